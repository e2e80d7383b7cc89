//! Table-driven tests of the planner: one case per product rule of SPEC §2.3, §3 and §4.

use super::*;
use crate::{
    content::{DesiredCopy, source_hash},
    copyrule::{CopyRule, CopyRuleSpec},
    marks,
    model::{Kind, Labels, NamespaceInfo, Payload, SERVICE_ACCOUNT_TOKEN_TYPE, SourceInfo},
    rules::Rule,
    tenancy::{NamespacePatterns, TrustPolicy},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A Secret source `default/mysecret` with the shell-operator rule `secret=yes`.
fn inline_source() -> SourceInfo {
    SourceInfo {
        key: ObjectKey::new(Kind::Secret, "default", "mysecret"),
        uid: "uid-1".into(),
        resource_version: "10".into(),
        labels: map(&[(marks::SOURCE_LABEL, "true")]),
        annotations: map(&[(marks::NAMESPACE_SELECTOR_ANNOTATION, "secret=yes")]),
        created: 100,
        deleting: false,
        dropped: None,
    }
}

fn payload(v: &str) -> Payload {
    Payload {
        type_: Some("Opaque".into()),
        data: Some(map(&[("password", v)])),
        binary_data: None,
        immutable: None,
        fields: Default::default(),
    }
}

fn ns(name: &str, labels: &[(&str, &str)]) -> NamespaceInfo {
    NamespaceInfo {
        name: name.into(),
        resource_version: String::new(),
        labels: map(labels).into(),
        accept_from: None,
        terminating: false,
    }
}

struct Fixture {
    world: World,
    existing: BTreeMap<ObjectKey, Existing>,
    contents: Contents,
}

impl Fixture {
    fn new() -> Self {
        let src = inline_source();
        let mut f = Fixture {
            // These tables are about copy semantics, on a single-team cluster; trust and
            // consent have their own tables below.
            world: World::new(Policy {
                trust: TrustPolicy::trust_all(),
                ..Default::default()
            }),
            existing: BTreeMap::new(),
            contents: Contents::default(),
        };
        f.add_source(src, Some(payload("v1")));
        f.world
            .insert_namespaces([ns("default", &[("secret", "yes")])]);
        f.rebuild_rules(&[]);
        f
    }

    fn add_source(&mut self, src: SourceInfo, p: Option<Payload>) {
        if let Some(p) = p {
            self.contents.payloads.insert(src.key.clone(), Arc::new(p));
        }
        self.world.set_sources([(src.key.clone(), Some(src))]);
    }

    fn rebuild_rules(&mut self, copy_rules: &[CopyRule]) {
        self.world.set_copy_rules(copy_rules.to_vec());
    }

    fn ns(mut self, name: &str, labels: &[(&str, &str)]) -> Self {
        self.world.insert_namespaces([ns(name, labels)]);
        self
    }

    fn source(&self) -> &SourceInfo {
        self.world.sources().values().next().unwrap()
    }

    /// A managed copy in `namespace` exactly as copyrator would have written it from `p`.
    fn copy_of(
        &self,
        src: &SourceInfo,
        rule: &Rule,
        p: &Payload,
        namespace: &str,
        rv: &str,
    ) -> (ObjectKey, Existing) {
        let copy = DesiredCopy::build(rule, src, p, namespace).unwrap();
        let meta = copy.object().metadata;
        (
            copy.key.clone(),
            Existing::Managed(
                ManagedCopy::from_marks(
                    copy.key.kind,
                    &meta.labels.unwrap(),
                    &meta.annotations.unwrap(),
                    rv.into(),
                    false,
                )
                .unwrap(),
            ),
        )
    }

    fn with_inline_copy(mut self, namespace: &str, p: &Payload) -> Self {
        let src = self.source().clone();
        let rule = Rule::inline(&src).unwrap().unwrap();
        let (k, e) = self.copy_of(&src, &rule, p, namespace, "7");
        self.existing.insert(k, e);
        self
    }

    fn plan(&self, scope: Scope) -> Vec<Action> {
        plan(&self.world, &scope, &self.existing, &self.contents)
    }
}

fn target(ns: &str) -> ObjectKey {
    ObjectKey::new(Kind::Secret, ns, "mysecret")
}

/// A compact rendering of actions, so each case states its expectation in one line.
fn summary(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .map(|a| match a {
            Action::Create { copy, .. } => format!("create {}", copy.key.namespace),
            Action::Update {
                copy,
                resource_version,
                adopt,
                ..
            } => {
                format!(
                    "update {}@{resource_version}{}",
                    copy.key.namespace,
                    match adopt {
                        Adopt::No => "",
                        Adopt::Overwrite => " adopt",
                        Adopt::Reclaim => " reclaim",
                    }
                )
            }
            Action::Recreate {
                copy,
                resource_version,
                ..
            } => format!("recreate {}@{resource_version}", copy.key.namespace),
            Action::Delete {
                target,
                resource_version,
                ..
            } => format!("delete {}@{resource_version}", target.namespace),
            Action::InSync { target, .. } => format!("in-sync {}", target.namespace),
            Action::Retain { target, .. } => format!("retain {}", target.namespace),
            Action::Conflict { target, by, reason } => format!(
                "conflict {} {} ({})",
                target.namespace,
                by.rule.mark(),
                match reason {
                    ConflictReason::Unmanaged => "unmanaged".to_string(),
                    ConflictReason::OwnedBy(c) => format!("owned by {}", c.rule.mark()),
                    ConflictReason::HeldByHigherTier(_) => "held".to_string(),
                    ConflictReason::NeverCopied(crate::model::NeverCopied::SecretType {
                        type_: SERVICE_ACCOUNT_TOKEN_TYPE,
                        ..
                    }) => "sa-token".to_string(),
                    ConflictReason::NeverCopied(n) => format!("never: {n}"),
                    ConflictReason::Grant(g) => format!("grant: {g}"),
                    ConflictReason::Refused(r) => format!("refused: {r}"),
                    ConflictReason::EmptyBundle => "empty bundle".to_string(),
                }
            ),
            Action::NeedSource { source, .. } => format!("need {}", source.namespaced_name()),
            Action::NeedBindings { target } => format!("need bindings {}", target.namespace),
            Action::Skip { target, reason } => format!("skip {} ({reason})", target.namespace),
            Action::MissingKeys { by, keys } => {
                format!("missing {} {}", by.rule.mark(), keys.join(","))
            }
            Action::LeftOut { by, key, .. } => format!("left out {} {key}", by.source),
        })
        .collect()
}

fn copy_rule(name: &str, created: i64, spec: CopyRuleSpec) -> CopyRule {
    let mut cr = CopyRule::new(name, spec);
    cr.metadata.creation_timestamp = Some(Time(
        k8s_openapi::jiff::Timestamp::from_second(created).unwrap(),
    ));
    cr
}

fn rule_spec(kind: Kind, source: &str) -> CopyRuleSpec {
    CopyRuleSpec {
        api_version: None,
        kind: kind.as_str().into(),
        source_namespace: "default".into(),
        sources: None,
        drop_expired: false,
        template: None,
        create_once: false,
        source_name: Some(source.into()),
        source_selector: None,
        namespace_selector: Some(LabelSelector {
            match_labels: Some(map(&[("secret", "yes")])),
            match_expressions: None,
        }),
        namespaces: vec![],
        exclude_namespaces: vec![],
        target_name: None,
        deletion_policy: DeletionPolicy::Delete,
        conflict_policy: ConflictPolicy::Skip,
        image_pull_secret: false,
        read_only: None,
        keys: None,
        target: None,
        clusters: None,
    }
}

#[test]
fn lifecycle_rules_of_the_inline_copier() {
    type Case = (&'static str, Fixture, Scope, Vec<&'static str>);
    let v1 = payload("v1");
    let v2 = payload("v2");
    let cases: Vec<Case> = vec![
        (
            "new matching namespace gets a copy (§4.1)",
            Fixture::new().ns("team-a", &[("secret", "yes")]),
            Scope::All,
            vec!["create team-a"],
        ),
        (
            "non-matching namespace gets nothing",
            Fixture::new().ns("team-b", &[("secret", "no")]),
            Scope::All,
            vec![],
        ),
        (
            "identical copy is not written (§3 steady state)",
            Fixture::new()
                .ns("team-a", &[("secret", "yes")])
                .with_inline_copy("team-a", &v1),
            Scope::All,
            vec!["in-sync team-a"],
        ),
        (
            "source change updates the copy with its resourceVersion (§4.2, §4.5)",
            Fixture::new()
                .ns("team-a", &[("secret", "yes")])
                .with_inline_copy("team-a", &v2),
            Scope::All,
            vec!["update team-a@7"],
        ),
        (
            "label removed: copy deleted, preconditioned (§4.3)",
            Fixture::new()
                .ns("team-a", &[])
                .with_inline_copy("team-a", &v1),
            Scope::All,
            vec!["delete team-a@7"],
        ),
        (
            "copy deleted by hand is restored (§4.4)",
            Fixture::new().ns("team-a", &[("secret", "yes")]),
            Scope::Target(target("team-a")),
            vec!["create team-a"],
        ),
        (
            "source namespace is never a target (§2.3)",
            Fixture::new(),
            Scope::All,
            vec![],
        ),
        (
            "terminating namespace gets nothing",
            {
                let mut f = Fixture::new().ns("team-a", &[("secret", "yes")]);
                f.world
                    .namespaces_mut()
                    .get_mut("team-a")
                    .unwrap()
                    .terminating = true;
                f
            },
            Scope::All,
            vec![],
        ),
        (
            "copy in a terminating namespace is left to the namespace deletion",
            {
                let mut f = Fixture::new()
                    .ns("team-a", &[("secret", "yes")])
                    .with_inline_copy("team-a", &v1);
                f.world
                    .namespaces_mut()
                    .get_mut("team-a")
                    .unwrap()
                    .terminating = true;
                f
            },
            Scope::All,
            vec!["skip team-a (namespace is terminating)"],
        ),
        (
            "globally excluded namespace gets nothing, an old copy there stays (not this install's)",
            {
                let mut f = Fixture::new()
                    .ns("kube-system", &[("secret", "yes")])
                    .with_inline_copy("kube-system", &v1);
                let mut policy = f.world.policy().clone();
                policy.excluded_namespaces.insert("kube-system".into());
                f.world = World::from_parts(
                    policy,
                    f.world.sources().values().cloned(),
                    f.world.copy_rules().to_vec(),
                );
                f.world
                    .insert_namespaces([ns("kube-system", &[("secret", "yes")])]);
                f
            },
            Scope::All,
            vec!["skip kube-system (namespace is excluded (--exclude-namespaces))"],
        ),
        (
            "copy being deleted is skipped",
            {
                let mut f = Fixture::new()
                    .ns("team-a", &[("secret", "yes")])
                    .with_inline_copy("team-a", &v1);
                if let Some(Existing::Managed(m)) = f.existing.get_mut(&target("team-a")) {
                    m.deleting = true;
                }
                f
            },
            Scope::All,
            vec!["skip team-a (copy is being deleted)"],
        ),
    ];
    for (name, f, scope, want) in cases {
        assert_eq!(summary(&f.plan(scope)), want, "{name}");
    }
}

#[test]
fn source_deleted_deletes_copies() {
    let mut f = Fixture::new()
        .ns("team-a", &[("secret", "yes")])
        .with_inline_copy("team-a", &payload("v1"));
    let key = f.source().key.clone();
    f.world.edit_sources(|s| s.clear());
    f.rebuild_rules(&[]);
    assert_eq!(summary(&f.plan(Scope::Source(key))), ["delete team-a@7"]);
}

#[test]
fn source_being_deleted_counts_as_gone() {
    let mut f = Fixture::new()
        .ns("team-a", &[("secret", "yes")])
        .with_inline_copy("team-a", &payload("v1"));
    f.world
        .edit_sources(|sources| sources.values_mut().for_each(|s| s.deleting = true));
    f.rebuild_rules(&[]);
    assert_eq!(summary(&f.plan(Scope::All)), ["delete team-a@7"]);
}

#[test]
fn hand_edited_copy_is_restored() {
    let mut f = Fixture::new()
        .ns("team-a", &[("secret", "yes")])
        .with_inline_copy("team-a", &payload("v1"));
    if let Some(Existing::Managed(m)) = f.existing.get_mut(&target("team-a")) {
        m.actual_hash = Some("sha256:edited".into());
    }
    assert_eq!(summary(&f.plan(Scope::All)), ["update team-a@7"]);
}

#[test]
fn marks_that_do_not_parse_make_an_object_unmanaged() {
    let good = map(&[
        (marks::SOURCE_ANNOTATION, "default/mysecret"),
        (marks::RULE_ANNOTATION, "inline"),
    ]);
    let labels = map(&[(marks::MANAGED_BY_LABEL, marks::MANAGED_BY_VALUE)]);
    let parse = |annotations: &BTreeMap<String, String>| {
        ManagedCopy::from_marks(Kind::Secret, &labels, annotations, "1".into(), false)
    };
    let copy = parse(&good).unwrap();
    assert_eq!(
        copy.source,
        ObjectKey::new(Kind::Secret, "default", "mysecret")
    );
    assert_eq!(copy.rule, RuleId::Inline(copy.source.clone()));
    // The forged marks of SPEC §4.5's hostile-input cases, and removed ones.
    for source in [
        "x/a b",
        "x/",
        "nonsense",
        "a/b/c/d",
        "../../x/y",
        "/x",
        "X/y",
    ] {
        let mut a = good.clone();
        a.insert(marks::SOURCE_ANNOTATION.into(), source.into());
        assert_eq!(parse(&a), Err(MarksError::BadSource), "{source}");
    }
    for rule in ["", "copyrule/", "copyrule/a b", "rule/x", "Inline"] {
        let mut a = good.clone();
        a.insert(marks::RULE_ANNOTATION.into(), rule.into());
        assert_eq!(parse(&a), Err(MarksError::BadRule), "{rule}");
    }
    let mut a = good.clone();
    a.remove(marks::SOURCE_ANNOTATION);
    assert_eq!(parse(&a), Err(MarksError::MissingSource));
    let mut a = good;
    a.remove(marks::RULE_ANNOTATION);
    assert_eq!(parse(&a), Err(MarksError::MissingRule));
}

#[test]
fn recreated_source_updates_copies_to_the_new_uid() {
    let mut f = Fixture::new()
        .ns("team-a", &[("secret", "yes")])
        .with_inline_copy("team-a", &payload("v1"));
    f.world
        .edit_sources(|sources| sources.values_mut().for_each(|s| s.uid = "uid-2".into()));
    assert_eq!(summary(&f.plan(Scope::All)), ["update team-a@7"]);
}

#[test]
fn immutable_source_change_recreates_the_copy() {
    let mut f = Fixture::new()
        .ns("team-a", &[("secret", "yes")])
        .with_inline_copy("team-a", &payload("v1"));
    let mut p = payload("v2");
    p.immutable = Some(true);
    let key = f.source().key.clone();
    f.contents.payloads.insert(key, Arc::new(p));
    assert_eq!(summary(&f.plan(Scope::All)), ["recreate team-a@7"]);
}

#[test]
fn immutable_source_in_sync_is_not_touched() {
    let mut p = payload("v1");
    p.immutable = Some(true);
    let mut f = Fixture::new()
        .ns("team-a", &[("secret", "yes")])
        .with_inline_copy("team-a", &p);
    let key = f.source().key.clone();
    f.contents.payloads.insert(key, Arc::new(p));
    assert_eq!(summary(&f.plan(Scope::All)), ["in-sync team-a"]);
}

#[test]
fn unmanaged_object_is_never_touched_with_skip() {
    let mut f = Fixture::new().ns("team-a", &[("secret", "yes")]);
    f.existing.insert(
        target("team-a"),
        Existing::Unmanaged {
            resource_version: "3".into(),
        },
    );
    assert_eq!(
        summary(&f.plan(Scope::All)),
        ["conflict team-a inline (unmanaged)"]
    );
    // and no write for it even without a claim
    f.world.namespaces_mut().get_mut("team-a").unwrap().labels = Labels::default();
    assert_eq!(summary(&f.plan(Scope::All)), Vec::<String>::new());
}

#[test]
fn overwrite_policy_adopts_unmanaged_object() {
    let mut f = Fixture::new().ns("team-a", &[("secret", "yes")]);
    let mut spec = rule_spec(Kind::Secret, "mysecret");
    spec.conflict_policy = ConflictPolicy::Overwrite;
    // Take the inline rule away so only the CopyRule claims.
    f.world
        .edit_sources(|sources| sources.values_mut().for_each(|s| s.labels.clear()));
    f.rebuild_rules(&[copy_rule("adopter", 1, spec)]);
    f.existing.insert(
        target("team-a"),
        Existing::Unmanaged {
            resource_version: "3".into(),
        },
    );
    assert_eq!(summary(&f.plan(Scope::All)), ["update team-a@3 adopt"]);
}

/// SPEC §4 item 11: the name of a read-only copy a CopyRule's status records it held in a
/// namespace is the rule's; someone else's object found there (the copy deleted while the
/// webhook was down, an object of the same name made) is overwritten with the copy. Nowhere
/// else, and for no other rule.
#[test]
fn a_copy_rule_reclaims_the_name_of_the_read_only_copy_it_held() {
    type Edit = fn(&mut CopyRule);
    let cases: [(&str, Edit, &str); 7] = [
        ("recorded here", |_| {}, "update team-a@3 reclaim"),
        (
            "recorded in another namespace only",
            |cr| cr.status.as_mut().unwrap().read_only_in = vec!["team-b".into()],
            "conflict team-a copyrule/guarded (unmanaged)",
        ),
        (
            "copies not read-only",
            |cr| cr.spec.read_only = Some(false),
            "conflict team-a copyrule/guarded (unmanaged)",
        ),
        (
            "recorded for an older spec (another copy's name, maybe)",
            |cr| cr.metadata.generation = Some(2),
            "conflict team-a copyrule/guarded (unmanaged)",
        ),
        (
            "no generation recorded",
            |cr| cr.status.as_mut().unwrap().observed_generation = None,
            "conflict team-a copyrule/guarded (unmanaged)",
        ),
        (
            "a sourceSelector rule: its names come and go with its sources",
            |cr| {
                cr.spec.source_name = None;
                cr.spec.source_selector = Some(LabelSelector {
                    match_labels: Some(map(&[("app", "x")])),
                    match_expressions: None,
                });
            },
            "conflict team-a copyrule/guarded (unmanaged)",
        ),
        (
            "conflictPolicy: Overwrite adopts, as anywhere",
            |cr| cr.spec.conflict_policy = ConflictPolicy::Overwrite,
            "update team-a@3 adopt",
        ),
    ];
    for (what, edit, expected) in cases {
        let mut f = Fixture::new().ns("team-a", &[("secret", "yes")]);
        // Only the CopyRule claims.
        f.world.edit_sources(|sources| {
            sources
                .values_mut()
                .for_each(|s| s.labels = map(&[("app", "x")]))
        });
        let mut spec = rule_spec(Kind::Secret, "mysecret");
        spec.read_only = Some(true);
        let mut cr = copy_rule("guarded", 1, spec);
        cr.metadata.generation = Some(1);
        cr.status = Some(crate::copyrule::CopyRuleStatus {
            observed_generation: Some(1),
            read_only_in: vec!["team-a".into()],
            ..Default::default()
        });
        edit(&mut cr);
        f.rebuild_rules(&[cr]);
        f.existing.insert(
            target("team-a"),
            Existing::Unmanaged {
                resource_version: "3".into(),
            },
        );
        assert_eq!(summary(&f.plan(Scope::All)), [expected], "{what}");
    }
}

/// A NamespacedCopyRule or a hub's rule never reclaims a name (SPEC §4 item 11): only a
/// CopyRule's status is an administrator's record; the hub's records the hub's namespaces.
#[test]
fn only_a_copy_rule_holds_the_names_of_its_read_only_copies() {
    let mut spec = rule_spec(Kind::Secret, "mysecret");
    spec.read_only = Some(true);
    let mut cr = copy_rule("guarded", 1, spec);
    cr.metadata.generation = Some(1);
    cr.status = Some(crate::copyrule::CopyRuleStatus {
        observed_generation: Some(1),
        read_only_in: vec!["team-a".into()],
        ..Default::default()
    });
    let rule = Rule::from_copy_rule(&cr).unwrap();
    assert!(rule.holds_its_names() && rule.read_only_in.contains("team-a"));
    let mut namespaced = cr.clone();
    namespaced.metadata.namespace = Some("default".into());
    namespaced.metadata.name = Some("default/guarded".into());
    let rule = Rule::from_copy_rule(&namespaced).unwrap();
    assert!(!rule.holds_its_names() && rule.read_only_in.is_empty());
    let hub = Rule {
        id: RuleId::Hub {
            link: "hub".into(),
            rule: "guarded".into(),
        },
        ..Rule::from_copy_rule(&cr).unwrap()
    };
    assert!(!hub.holds_its_names());
}

#[test]
fn service_account_token_secret_is_never_copied() {
    let mut f = Fixture::new().ns("team-a", &[("secret", "yes")]);
    let key = f.source().key.clone();
    let mut p = payload("token");
    p.type_ = Some(SERVICE_ACCOUNT_TOKEN_TYPE.into());
    f.contents.payloads.insert(key, Arc::new(p));
    assert_eq!(
        summary(&f.plan(Scope::All)),
        ["conflict team-a inline (sa-token)"]
    );
}

#[test]
fn retain_policy_keeps_copies_no_rule_wants() {
    let mut f = Fixture::new().ns("team-a", &[("secret", "yes")]);
    let mut spec = rule_spec(Kind::Secret, "mysecret");
    spec.deletion_policy = DeletionPolicy::Retain;
    f.world
        .edit_sources(|sources| sources.values_mut().for_each(|s| s.labels.clear()));
    let rules = [copy_rule("keeper", 1, spec)];
    f.rebuild_rules(&rules);
    let src = f.source().clone();
    let rule = f.world.rules().rules[0].clone();
    let (k, e) = f.copy_of(&src, &rule, &payload("v1"), "team-a", "4");
    f.existing.insert(k, e);
    assert_eq!(summary(&f.plan(Scope::All)), ["in-sync team-a"]);

    // namespace leaves the selector: the live rule says Retain
    f.world.namespaces_mut().get_mut("team-a").unwrap().labels = Labels::default();
    assert_eq!(summary(&f.plan(Scope::All)), ["retain team-a"]);

    // rule deleted: the policy recorded on the copy says Retain
    f.rebuild_rules(&[]);
    assert_eq!(summary(&f.plan(Scope::All)), ["retain team-a"]);
}

#[test]
fn deleted_copy_rule_with_delete_policy_removes_its_copies() {
    let mut f = Fixture::new().ns("team-a", &[("secret", "yes")]);
    f.world
        .edit_sources(|sources| sources.values_mut().for_each(|s| s.labels.clear()));
    f.rebuild_rules(&[copy_rule("r", 1, rule_spec(Kind::Secret, "mysecret"))]);
    let src = f.source().clone();
    let rule = f.world.rules().rules[0].clone();
    let (k, e) = f.copy_of(&src, &rule, &payload("v1"), "team-a", "4");
    f.existing.insert(k, e);
    f.rebuild_rules(&[]);
    assert_eq!(
        summary(&f.plan(Scope::Rule(RuleId::CopyRule("r".into())))),
        ["delete team-a@4"]
    );
}

#[test]
fn deletion_policy_change_rewrites_the_mark() {
    let mut f = Fixture::new().ns("team-a", &[("secret", "yes")]);
    f.world
        .edit_sources(|sources| sources.values_mut().for_each(|s| s.labels.clear()));
    f.rebuild_rules(&[copy_rule("r", 1, rule_spec(Kind::Secret, "mysecret"))]);
    let src = f.source().clone();
    let rule = f.world.rules().rules[0].clone();
    let (k, e) = f.copy_of(&src, &rule, &payload("v1"), "team-a", "4");
    f.existing.insert(k, e);
    let mut spec = rule_spec(Kind::Secret, "mysecret");
    spec.deletion_policy = DeletionPolicy::Retain;
    f.rebuild_rules(&[copy_rule("r", 1, spec)]);
    assert_eq!(summary(&f.plan(Scope::All)), ["update team-a@4"]);
}

#[test]
fn read_only_flip_relabels_every_copy_both_ways() {
    let mut f = Fixture::new().ns("team-a", &[("secret", "yes")]);
    f.world
        .edit_sources(|sources| sources.values_mut().for_each(|s| s.labels.clear()));
    f.rebuild_rules(&[copy_rule("r", 1, rule_spec(Kind::Secret, "mysecret"))]);
    let src = f.source().clone();
    let plain = f.world.rules().rules[0].clone();
    let mut spec = rule_spec(Kind::Secret, "mysecret");
    spec.read_only = Some(true);
    f.rebuild_rules(&[copy_rule("r", 1, spec)]);
    let read_only = f.world.rules().rules[0].clone();
    let labelled = |rule: &Rule| {
        DesiredCopy::build(rule, &src, &payload("v1"), "team-a")
            .unwrap()
            .object()
            .metadata
            .labels
            .unwrap()
            .get(marks::READ_ONLY)
            .cloned()
    };
    assert_eq!(labelled(&read_only).as_deref(), Some("true"));
    assert_eq!(labelled(&plain), None);

    // A copy made before the rule became read-only gets the label (SPEC §4 item 11) ...
    let (k, e) = f.copy_of(&src, &plain, &payload("v1"), "team-a", "4");
    f.existing.insert(k.clone(), e);
    assert_eq!(summary(&f.plan(Scope::All)), ["update team-a@4"]);
    // ... and loses it when it stops being read-only; a copy already labelled is in sync.
    let (k, e) = f.copy_of(&src, &read_only, &payload("v1"), "team-a", "5");
    f.existing.insert(k, e);
    assert_eq!(summary(&f.plan(Scope::All)), ["in-sync team-a"]);
    f.rebuild_rules(&[copy_rule("r", 1, rule_spec(Kind::Secret, "mysecret"))]);
    assert_eq!(summary(&f.plan(Scope::All)), ["update team-a@5"]);
}

#[test]
fn two_rules_on_one_target_do_not_fight() {
    let mut f = Fixture::new().ns("team-a", &[("secret", "yes")]);
    f.world
        .edit_sources(|sources| sources.values_mut().for_each(|s| s.labels.clear()));
    let older = copy_rule("older", 1, rule_spec(Kind::Secret, "mysecret"));
    let newer = copy_rule("newer", 2, rule_spec(Kind::Secret, "mysecret"));
    f.rebuild_rules(&[newer.clone(), older.clone()]);
    assert_eq!(
        summary(&f.plan(Scope::All)),
        [
            "conflict team-a copyrule/newer (owned by copyrule/older)",
            "create team-a"
        ]
    );

    // Once the newer rule's copy exists (say the older rule came later), it keeps the name.
    let src = f.source().clone();
    let newer_rule = f.world.rules().copy_rule("newer").unwrap().clone();
    let (k, e) = f.copy_of(&src, &newer_rule, &payload("v1"), "team-a", "4");
    f.existing.insert(k, e);
    assert_eq!(
        summary(&f.plan(Scope::All)),
        [
            "conflict team-a copyrule/older (owned by copyrule/newer)",
            "in-sync team-a"
        ]
    );
}

#[test]
fn copy_rule_with_target_name_and_explicit_namespaces() {
    let mut f = Fixture::new()
        .ns("dest", &[])
        .ns("sandbox", &[("secret", "yes")])
        .ns("team-a", &[("secret", "yes")]);
    f.world
        .edit_sources(|sources| sources.values_mut().for_each(|s| s.labels.clear()));
    let mut spec = rule_spec(Kind::Secret, "mysecret");
    spec.namespaces = vec!["dest".into()];
    spec.exclude_namespaces = vec!["sandbox".into()];
    spec.target_name = Some("pull-secret".into());
    f.rebuild_rules(&[copy_rule("r", 1, spec)]);
    let actions = f.plan(Scope::All);
    let created: Vec<_> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Create { copy, .. } => Some(copy.key.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(
        created,
        ["Secret dest/pull-secret", "Secret team-a/pull-secret"]
    );
}

#[test]
fn selector_rule_copies_every_matching_source() {
    let mut f = Fixture::new().ns("team-a", &[("secret", "yes")]);
    f.world.edit_sources(|s| s.clear());
    for (name, labels) in [
        ("a", &[("copyrator", "true")][..]),
        ("b", &[("copyrator", "true")]),
        ("c", &[]),
    ] {
        let src = SourceInfo {
            key: ObjectKey::new(Kind::ConfigMap, "default", name),
            labels: map(labels),
            annotations: BTreeMap::new(),
            ..inline_source()
        };
        f.add_source(
            src,
            Some(Payload {
                data: Some(map(&[("k", name)])),
                ..Default::default()
            }),
        );
    }
    let mut spec = rule_spec(Kind::ConfigMap, "unused");
    spec.source_name = None;
    spec.source_selector = Some(LabelSelector {
        match_labels: Some(map(&[("copyrator", "true")])),
        match_expressions: None,
    });
    f.rebuild_rules(&[copy_rule("cm", 1, spec)]);
    let created: Vec<_> = f
        .plan(Scope::All)
        .iter()
        .filter_map(|a| match a {
            Action::Create { copy, .. } => Some(copy.key.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(created, ["ConfigMap team-a/a", "ConfigMap team-a/b"]);
}

#[test]
fn steady_state_needs_no_payload_when_the_hash_is_known() {
    let mut f = Fixture::new()
        .ns("team-a", &[("secret", "yes")])
        .with_inline_copy("team-a", &payload("v1"));
    let src = f.source().clone();
    f.contents.payloads.clear();
    f.contents
        .known_hashes
        .insert(src.key.clone(), source_hash(&src, &payload("v1")));
    assert_eq!(summary(&f.plan(Scope::All)), ["in-sync team-a"]);

    // a stale hash means the payload must be read first
    f.contents
        .known_hashes
        .insert(src.key.clone(), source_hash(&src, &payload("v2")));
    assert_eq!(summary(&f.plan(Scope::All)), ["need default/mysecret"]);

    // and a missing copy needs it too
    let mut f = Fixture::new().ns("team-b", &[("secret", "yes")]);
    f.contents.payloads.clear();
    assert_eq!(summary(&f.plan(Scope::All)), ["need default/mysecret"]);
}

#[test]
fn scopes_limit_the_plan() {
    let f = Fixture::new()
        .ns("team-a", &[("secret", "yes")])
        .ns("team-b", &[("secret", "yes")]);
    assert_eq!(
        summary(&f.plan(Scope::Namespace("team-b".into()))),
        ["create team-b"]
    );
    assert_eq!(
        summary(&f.plan(Scope::Target(target("team-a")))),
        ["create team-a"]
    );
    assert_eq!(
        summary(&f.plan(Scope::Source(ObjectKey::new(
            Kind::Secret,
            "default",
            "other"
        )))),
        Vec::<String>::new()
    );
    let rule = RuleId::Inline(f.source().key.clone());
    assert_eq!(
        summary(&f.plan(Scope::Rule(rule))),
        ["create team-a", "create team-b"]
    );
}

#[test]
fn configmap_copies_data_and_binary_data() {
    let mut f = Fixture::new().ns("team-a", &[("secret", "yes")]);
    let src = SourceInfo {
        key: ObjectKey::new(Kind::ConfigMap, "default", "settings"),
        ..inline_source()
    };
    f.world.edit_sources(|s| s.clear());
    let p = Payload {
        type_: None,
        data: Some(map(&[("a", "1")])),
        binary_data: Some(map(&[("b", "AAE=")])),
        immutable: None,
        fields: Default::default(),
    };
    f.add_source(src, Some(p.clone()));
    f.rebuild_rules(&[]);
    let actions = f.plan(Scope::All);
    let [Action::Create { copy, .. }] = actions.as_slice() else {
        panic!("{actions:?}")
    };
    assert_eq!(
        copy.key,
        ObjectKey::new(Kind::ConfigMap, "team-a", "settings")
    );
    let object = copy.object();
    assert_eq!(object.kind, "ConfigMap");
    assert_eq!(object.payload, p);
}

/// Trust, consent and precedence (SPEC §9): a platform namespace is trusted, tenants are not.
mod tenancy {
    use super::*;

    const TENANT: &str = "tenant-a";
    const PLATFORM: &str = "platform";

    /// A labelled Secret `cacerts` in `ns` with inline annotations, created at `created`.
    fn inline(ns: &str, created: i64, annotations: &[(&str, &str)]) -> SourceInfo {
        SourceInfo {
            key: ObjectKey::new(Kind::Secret, ns, "cacerts"),
            uid: format!("uid-{ns}"),
            resource_version: "1".into(),
            labels: map(&[(marks::SOURCE_LABEL, "true")]),
            annotations: map(annotations),
            created,
            deleting: false,
            dropped: None,
        }
    }

    struct Cluster {
        world: World,
        existing: BTreeMap<ObjectKey, Existing>,
        contents: Contents,
    }

    impl Cluster {
        fn new(trusted: &str) -> Self {
            let mut world = World::new(Policy {
                trust: TrustPolicy {
                    trusted_namespaces: NamespacePatterns::parse(trusted).unwrap(),
                },
                ..Default::default()
            });
            world.insert_namespaces([ns(TENANT, &[]), ns(PLATFORM, &[])]);
            Self {
                world,
                existing: BTreeMap::new(),
                contents: Contents::default(),
            }
        }

        fn namespace(mut self, name: &str, labels: &[(&str, &str)], accept: Option<&str>) -> Self {
            let mut n = ns(name, labels);
            n.accept_from = accept.map(Into::into);
            self.world.insert_namespaces([n]);
            self
        }

        fn source(mut self, src: SourceInfo) -> Self {
            let p = payload(&src.key.namespace);
            self.contents.payloads.insert(src.key.clone(), Arc::new(p));
            self.world.set_sources([(src.key.clone(), Some(src))]);
            self
        }

        fn copy_rules(mut self, rules: &[CopyRule]) -> Self {
            self.world.set_copy_rules(rules.to_vec());
            self
        }

        /// The copy `rule` (by mark) would have written of the source in `source_ns` into `ns`.
        fn with_copy_by(mut self, mark: &str, source_ns: &str, ns: &str) -> Self {
            let key = ObjectKey::new(Kind::Secret, source_ns, "cacerts");
            let src = self.world.sources()[&key].clone();
            let rule = self
                .world
                .rules()
                .rules
                .iter()
                .find(|r| r.id.mark() == mark && r.applies_to(&src))
                .unwrap_or_else(|| panic!("rule {mark} for {key}"))
                .clone();
            let copy = DesiredCopy::build(&rule, &src, &payload(source_ns), ns).unwrap();
            let meta = copy.object().metadata;
            self.existing.insert(
                copy.key,
                Existing::Managed(
                    ManagedCopy::from_marks(
                        Kind::Secret,
                        &meta.labels.unwrap(),
                        &meta.annotations.unwrap(),
                        "7".into(),
                        false,
                    )
                    .unwrap(),
                ),
            );
            self
        }

        /// A copy in istio-system made by CopyRule `r` (Retain) of the platform's unlabelled
        /// source, and then the rule deleted.
        fn with_retained_copy(self) -> Self {
            self.source(SourceInfo {
                labels: BTreeMap::new(),
                ..inline(PLATFORM, 1, &[])
            })
            .copy_rules(&[retained_rule("r")])
            .with_copy_by("copyrule/r", PLATFORM, "istio-system")
            .copy_rules(&[])
        }

        /// Actions with the source that wins, for cases where it matters.
        fn plan(&self) -> Vec<String> {
            plan(&self.world, &Scope::All, &self.existing, &self.contents)
                .iter()
                .map(|a| {
                    let by = |c: &ClaimRef| format!("{} {}", c.source.namespace, c.rule.mark());
                    match a {
                        Action::Create { copy, by: c } => {
                            format!("create {} by {}", copy.key.namespace, by(c))
                        }
                        Action::Update { copy, by: c, .. } => {
                            format!("update {} by {}", copy.key.namespace, by(c))
                        }
                        Action::InSync { target, by: c } => {
                            format!("in-sync {} by {}", target.namespace, by(c))
                        }
                        Action::Conflict {
                            target,
                            by: c,
                            reason,
                        } => format!(
                            "conflict {} for {} ({})",
                            target.namespace,
                            by(c),
                            match reason {
                                ConflictReason::OwnedBy(w) => format!("{} wins", by(w)),
                                ConflictReason::HeldByHigherTier(_) => "held".into(),
                                other => other.to_string(),
                            }
                        ),
                        other => summary(std::slice::from_ref(other)).join(""),
                    }
                })
                .chain(self.world.refusals(None).iter().map(|r| {
                    format!(
                        "refused {} {}: {} named{}",
                        r.claim.source.key.namespace,
                        r.claim.rule.id.mark(),
                        r.named,
                        if r.unmatched_selector {
                            ", no consenting namespace selected"
                        } else {
                            ""
                        }
                    )
                }))
                .collect()
        }
    }

    fn retained_rule(name: &str) -> CopyRule {
        let mut spec = rule_spec(Kind::Secret, "cacerts");
        spec.source_namespace = PLATFORM.into();
        spec.namespace_selector = None;
        spec.namespaces = vec!["istio-system".into()];
        spec.deletion_policy = DeletionPolicy::Retain;
        copy_rule(name, 1, spec)
    }

    /// SPEC §9.7: a source a cap holds back makes no claim, and its copy is left as it is
    /// (neither written nor deleted: not an orphan).
    #[test]
    fn a_capped_sources_copy_is_left_as_it_is() {
        let push = [(marks::NAMESPACES_ANNOTATION, "istio-system")];
        let mut c = Cluster::new(PLATFORM)
            .namespace("istio-system", &[], Some(TENANT))
            .source(inline(TENANT, 1, &push))
            .with_copy_by("inline", TENANT, "istio-system");
        let mut newer = inline(TENANT, 2, &push);
        newer.key.name = "newer".into();
        c = c.source(newer);
        assert_eq!(
            c.plan(),
            [
                "in-sync istio-system by tenant-a inline",
                "create istio-system by tenant-a inline"
            ]
        );
        let mut policy = c.world.policy().clone();
        policy.caps.per_namespace = 1;
        let mut capped = World::new(policy.clone());
        capped.insert_namespaces(c.world.namespaces().values().cloned());
        capped.set_sources(
            c.world
                .sources()
                .values()
                .map(|s| (s.key.clone(), Some(s.clone()))),
        );
        c.world = capped;
        assert_eq!(
            c.plan(),
            ["in-sync istio-system by tenant-a inline"],
            "the newer source is held back: no copy made"
        );
        // Over the byte cap, the older one too: its copy stays, untouched.
        policy.caps.metadata_bytes = 10;
        let mut capped = World::new(policy);
        capped.insert_namespaces(c.world.namespaces().values().cloned());
        capped.set_sources(
            c.world
                .sources()
                .values()
                .map(|s| (s.key.clone(), Some(s.clone()))),
        );
        c.world = capped;
        assert_eq!(
            c.plan(),
            ["skip istio-system (its source is held back by a cap (SPEC §9.7))"]
        );
    }

    #[test]
    fn no_write_without_consent() {
        let push = [(marks::NAMESPACES_ANNOTATION, "istio-system")];
        let match_all = [(marks::NAMESPACE_SELECTOR_ANNOTATION, "!no-such-label")];
        type Case = (&'static str, Cluster, Vec<&'static str>);
        let cases: Vec<Case> = vec![
            (
                "explicit push into a namespace that did not consent is refused",
                Cluster::new(PLATFORM)
                    .namespace("istio-system", &[], None)
                    .source(inline(TENANT, 1, &push)),
                vec!["refused tenant-a inline: 1 named"],
            ),
            (
                "a match-all selector copies only where consent was given, and costs the \
                 other namespaces nothing (not even a refusal each)",
                Cluster::new(PLATFORM)
                    .namespace("istio-system", &[], None)
                    .namespace("team-b", &[], Some("tenant-a"))
                    .source(inline(TENANT, 1, &match_all)),
                vec!["create team-b by tenant-a inline"],
            ),
            (
                "a match-all selector no namespace consents to is refused, once",
                Cluster::new(PLATFORM)
                    .namespace("istio-system", &[], None)
                    .namespace("team-b", &[], Some("tenant-b"))
                    .source(inline(TENANT, 1, &match_all)),
                vec!["refused tenant-a inline: 0 named, no consenting namespace selected"],
            ),
            (
                "a named namespace that does not exist is refused like one that does not \
                 consent (a refusal says nothing about existence)",
                Cluster::new(PLATFORM).source(inline(TENANT, 1, &push)),
                vec!["refused tenant-a inline: 1 named"],
            ),
            (
                "consent by pattern",
                Cluster::new(PLATFORM)
                    .namespace("istio-system", &[], Some("team-*, tenant-*"))
                    .source(inline(TENANT, 1, &push)),
                vec!["create istio-system by tenant-a inline"],
            ),
            (
                "consent for someone else is no consent",
                Cluster::new(PLATFORM)
                    .namespace("istio-system", &[], Some("tenant-b,team-*"))
                    .source(inline(TENANT, 1, &push)),
                vec!["refused tenant-a inline: 1 named"],
            ),
            (
                "consent withdrawn: the tenant's copy goes",
                Cluster::new(PLATFORM)
                    .namespace("istio-system", &[], Some(TENANT))
                    .source(inline(TENANT, 1, &push))
                    .with_copy_by("inline", TENANT, "istio-system")
                    .namespace("istio-system", &[], None),
                vec!["delete istio-system@7", "refused tenant-a inline: 1 named"],
            ),
            (
                "a trusted namespace needs no consent",
                Cluster::new(PLATFORM)
                    .namespace("istio-system", &[], None)
                    .source(inline(PLATFORM, 1, &push)),
                vec!["create istio-system by platform inline"],
            ),
            (
                "trusting every namespace restores the single-team behaviour",
                Cluster::new("*")
                    .namespace("istio-system", &[], None)
                    .source(inline(TENANT, 1, &push)),
                vec!["create istio-system by tenant-a inline"],
            ),
            (
                "a CopyRule needs no consent",
                Cluster::new("")
                    .namespace("istio-system", &[], None)
                    .source(SourceInfo {
                        labels: BTreeMap::new(),
                        ..inline(PLATFORM, 1, &[])
                    })
                    .copy_rules(&[retained_rule("r")]),
                vec!["create istio-system by platform copyrule/r"],
            ),
        ];
        for (name, c, want) in cases {
            assert_eq!(c.plan(), want, "{name}");
        }
    }

    #[test]
    fn higher_tiers_take_names_over_and_lower_ones_cannot() {
        let push = [(marks::NAMESPACES_ANNOTATION, "istio-system")];
        type Case = (&'static str, Cluster, Vec<&'static str>);
        let cases: Vec<Case> = vec![
            (
                "a name pre-empted by a consented tenant goes to the later platform source",
                Cluster::new(PLATFORM)
                    .namespace("istio-system", &[], Some(TENANT))
                    .source(inline(TENANT, 1, &push))
                    .with_copy_by("inline", TENANT, "istio-system")
                    .source(inline(PLATFORM, 9, &push)),
                vec![
                    "conflict istio-system for tenant-a inline (platform inline wins)",
                    "update istio-system by platform inline",
                ],
            ),
            (
                "once taken over, the platform keeps it",
                Cluster::new(PLATFORM)
                    .namespace("istio-system", &[], Some(TENANT))
                    .source(inline(TENANT, 1, &push))
                    .source(inline(PLATFORM, 9, &push))
                    .with_copy_by("inline", PLATFORM, "istio-system"),
                vec![
                    "conflict istio-system for tenant-a inline (platform inline wins)",
                    "in-sync istio-system by platform inline",
                ],
            ),
            (
                "a CopyRule takes a trusted inline copy over",
                Cluster::new(PLATFORM)
                    .namespace("istio-system", &[], None)
                    .source(inline(PLATFORM, 1, &push))
                    .with_copy_by("inline", PLATFORM, "istio-system")
                    .copy_rules(&[retained_rule("r")]),
                vec![
                    "conflict istio-system for platform inline (platform copyrule/r wins)",
                    "update istio-system by platform copyrule/r",
                ],
            ),
            (
                "a copy retained from a CopyRule is not taken by a consented tenant",
                Cluster::new(PLATFORM)
                    .namespace("istio-system", &[], Some(TENANT))
                    .with_retained_copy()
                    .source(inline(TENANT, 5, &push)),
                vec!["conflict istio-system for tenant-a inline (held)"],
            ),
            (
                "nor by a trusted inline rule",
                Cluster::new(PLATFORM)
                    .namespace("istio-system", &[], None)
                    .with_retained_copy()
                    .source(inline(PLATFORM, 5, &push)),
                vec!["conflict istio-system for platform inline (held)"],
            ),
            (
                "without consent a retained copy is not even looked at",
                Cluster::new(PLATFORM)
                    .namespace("istio-system", &[], None)
                    .with_retained_copy()
                    .source(inline(TENANT, 5, &push)),
                vec!["retain istio-system", "refused tenant-a inline: 1 named"],
            ),
            (
                "two consented tenants: the older one gets the name",
                Cluster::new(PLATFORM)
                    .namespace("istio-system", &[], Some("tenant-*"))
                    .namespace("tenant-b", &[], None)
                    .source(inline("tenant-b", 2, &push))
                    .source(inline(TENANT, 3, &push)),
                vec![
                    "conflict istio-system for tenant-a inline (tenant-b inline wins)",
                    "create istio-system by tenant-b inline",
                ],
            ),
        ];
        for (name, c, want) in cases {
            assert_eq!(c.plan(), want, "{name}");
        }
    }
}

#[test]
fn what_could_not_be_read_is_neither_written_nor_deleted() {
    // A copy whose source could not be read: not judged orphaned.
    let mut f = Fixture::new()
        .ns("team-a", &[("secret", "yes")])
        .ns("team-b", &[])
        .with_inline_copy("team-b", &payload("v1"));
    let key = f.source().key.clone();
    f.world.unreadable_mut().sources.insert(key.clone());
    assert_eq!(
        summary(&f.plan(Scope::All)),
        [
            "skip team-a (its source or namespace could not be read)",
            "skip team-b (its source or namespace could not be read)"
        ]
    );
    // A namespace that could not be read: its targets wait.
    f.world.unreadable_mut().sources.clear();
    f.world.unreadable_mut().namespaces.insert("team-b".into());
    assert_eq!(
        summary(&f.plan(Scope::All)),
        [
            "create team-a",
            "skip team-b (its source or namespace could not be read)"
        ]
    );
}

fn target_of(a: &Action) -> ObjectKey {
    match a {
        Action::Create { copy, .. }
        | Action::Update { copy, .. }
        | Action::Recreate { copy, .. } => copy.key.clone(),
        Action::Delete { target, .. }
        | Action::InSync { target, .. }
        | Action::Retain { target, .. }
        | Action::Conflict { target, .. }
        | Action::NeedSource { target, .. }
        | Action::NeedBindings { target }
        | Action::Skip { target, .. } => target.clone(),
        Action::MissingKeys { .. } | Action::LeftOut { .. } => {
            panic!("not about one target: {a:?}")
        }
    }
}

/// `f` with two opted-in namespaces (team-a, team-b) and three CopyRules of the source that
/// compete for them: "newer" and "older" for every opted-in namespace, "renamed" for "dest"
/// under another name. team-b holds an outdated copy of "newer".
fn competing_rules(f: Fixture) -> Fixture {
    let mut f = f
        .ns("team-a", &[("secret", "yes")])
        .ns("team-b", &[("secret", "yes")]);
    f.world
        .edit_sources(|sources| sources.values_mut().for_each(|s| s.labels.clear()));
    let mut renamed = rule_spec(Kind::Secret, "mysecret");
    renamed.namespaces = vec!["dest".into()];
    renamed.target_name = Some("pull-secret".into());
    f.rebuild_rules(&[
        copy_rule("newer", 2, rule_spec(Kind::Secret, "mysecret")),
        copy_rule("older", 1, rule_spec(Kind::Secret, "mysecret")),
        copy_rule("renamed", 3, renamed),
    ]);
    let src = f.source().clone();
    let newer = f.world.rules().copy_rule("newer").unwrap().clone();
    let (k, e) = f.copy_of(&src, &newer, &payload("v0"), "team-b", "4");
    f.existing.insert(k, e);
    f
}

impl Fixture {
    /// A copy of the source in `ns` by a rule that no longer exists.
    fn orphan_in(&mut self, ns: &str) {
        let src = self.source().clone();
        let gone = Rule::inline(&inline_source()).unwrap().unwrap();
        let (k, e) = self.copy_of(&src, &gone, &payload("v1"), ns, "5");
        self.existing.insert(k, e);
    }
}

/// Planning named targets (a payload batch, a stale write, a copy job) computes only their
/// claims; it must decide exactly what planning everything decides for them, conflicts
/// between rules and renamed targets included.
#[test]
fn named_targets_are_planned_as_the_whole_plan_plans_them() {
    let mut f = competing_rules(Fixture::new().ns("dest", &[]));
    // A copy of a rule that no longer exists.
    f.orphan_in("dest");

    let all = f.plan(Scope::All);
    let targets: BTreeSet<ObjectKey> = all.iter().map(target_of).collect();
    assert!(targets.len() >= 5, "{:?}", summary(&all));
    let only = |keep: &BTreeSet<ObjectKey>| -> Vec<String> {
        let kept: Vec<Action> = all
            .iter()
            .filter(|a| keep.contains(&target_of(a)))
            .cloned()
            .collect();
        summary(&kept)
    };
    for t in &targets {
        assert_eq!(
            summary(&f.plan(Scope::Target(t.clone()))),
            only(&BTreeSet::from([t.clone()])),
            "{t}"
        );
    }
    let some: BTreeSet<ObjectKey> = targets
        .iter()
        .step_by(2)
        .cloned()
        .chain([ObjectKey::new(Kind::Secret, "team-a", "nothing-here")])
        .collect();
    assert_eq!(summary(&f.plan(Scope::Targets(some.clone()))), only(&some));
}

/// A full resync plans the cluster a chunk of namespaces at a time: each chunk must get
/// exactly what planning everything decides for its namespaces (conflicts between rules,
/// renamed targets and orphaned copies included), and the chunks together all of it.
#[test]
fn namespace_chunks_are_planned_as_the_whole_plan_plans_them() {
    let mut f = competing_rules(Fixture::new().ns("team-c", &[]).ns("dest", &[]));
    // Copies no rule wants: in a namespace that exists, and in one the world does not hold.
    f.orphan_in("team-c");
    f.orphan_in("vanished");

    let whole = f.plan(Scope::All);
    let all = summary(&whole);
    assert!(all.len() >= 6, "{all:?}");
    let chunks = [
        vec!["default", "dest"],
        vec!["team-a", "team-b"],
        vec!["team-c", "vanished"],
    ];
    let mut together = Vec::new();
    for chunk in chunks {
        let nss: BTreeSet<String> = chunk.iter().map(|n| n.to_string()).collect();
        let planned = summary(&f.plan(Scope::Namespaces(nss.clone())));
        let kept: Vec<Action> = whole
            .iter()
            .filter(|a| nss.contains(&target_of(a).namespace))
            .cloned()
            .collect();
        let expected = summary(&kept);
        assert_eq!(planned, expected, "{chunk:?}");
        together.extend(planned);
    }
    together.sort();
    let mut all = all;
    all.sort();
    assert_eq!(together, all, "the chunks together plan everything, once");
}
