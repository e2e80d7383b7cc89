//! Each reason `copyrator explain` gives, for the case that causes it, and a check that the
//! explanation agrees with the plan a job would make from the same inputs.

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::*;
use crate::{
    content::DesiredCopy,
    copyrule::{ConflictPolicy, CopyRule, CopyRuleSpec},
    marks,
    model::{Kind, Payload},
    plan::{ManagedCopy, Policy},
    rules::Rule,
    tenancy::{NamespacePatterns, TrustPolicy},
};

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn payload(v: &str) -> Payload {
    Payload {
        type_: Some("Opaque".into()),
        data: Some(map(&[("password", v)])),
        ..Default::default()
    }
}

fn ns(name: &str, labels: &[(&str, &str)]) -> NamespaceInfo {
    NamespaceInfo {
        name: name.into(),
        resource_version: "1".into(),
        labels: map(labels).into(),
        accept_from: None,
        terminating: false,
    }
}

/// Secret `platform/cred`, opted in, copied to namespaces labelled `registry=enabled`.
fn cred() -> SourceInfo {
    SourceInfo {
        key: ObjectKey::new(Kind::Secret, "platform", "cred"),
        uid: "uid-cred".into(),
        resource_version: "5".into(),
        labels: map(&[(marks::SOURCE_LABEL, "true")]),
        annotations: map(&[(marks::NAMESPACE_SELECTOR_ANNOTATION, "registry=enabled")]),
        created: 10,
        deleting: false,
        dropped: None,
    }
}

fn copy_rule(name: &str, spec: CopyRuleSpec) -> CopyRule {
    CopyRule::new(name, spec)
}

fn rule_spec(source: &str) -> CopyRuleSpec {
    CopyRuleSpec {
        api_version: None,
        kind: "Secret".into(),
        source_namespace: "platform".into(),
        sources: None,
        drop_expired: false,
        template: None,
        create_once: false,
        source_name: Some(source.into()),
        source_selector: None,
        namespace_selector: Some(LabelSelector {
            match_labels: Some(map(&[("registry", "enabled")])),
            match_expressions: None,
        }),
        namespaces: vec![],
        exclude_namespaces: vec![],
        target_name: None,
        deletion_policy: Default::default(),
        conflict_policy: ConflictPolicy::Skip,
        image_pull_secret: false,
        read_only: None,
        keys: None,
        target: None,
        clusters: None,
    }
}

struct Case {
    world: World,
    existing: BTreeMap<ObjectKey, Existing>,
    contents: Contents,
    unlabelled: Vec<SourceInfo>,
}

impl Case {
    /// `platform/cred` with its content, under `trust`, and `namespaces`.
    fn new(trust: TrustPolicy, namespaces: &[NamespaceInfo]) -> Self {
        let mut world = World::new(Policy {
            trust,
            excluded_namespaces: ["kube-system".to_string()].into(),
            ..Default::default()
        });
        world.set_sources([(cred().key, Some(cred()))]);
        world.insert_namespaces(namespaces.iter().cloned());
        let mut contents = Contents::default();
        contents
            .payloads
            .insert(cred().key, Arc::new(payload("v1")));
        Self {
            world,
            existing: BTreeMap::new(),
            contents,
            unlabelled: Vec::new(),
        }
    }

    fn trusted(namespaces: &[NamespaceInfo]) -> Self {
        Self::new(TrustPolicy::trust_all(), namespaces)
    }

    /// The copy copyrator would write into `namespace` from content `v`.
    fn copy(mut self, namespace: &str, v: &str, immutable: bool) -> Self {
        let src = cred();
        let rule = Rule::inline(&src).unwrap().unwrap();
        let mut p = payload(v);
        p.immutable = immutable.then_some(true);
        let copy = DesiredCopy::build(&rule, &src, &p, namespace).unwrap();
        let meta = copy.object().metadata;
        let managed = ManagedCopy::from_marks(
            Kind::Secret,
            &meta.labels.unwrap(),
            &meta.annotations.unwrap(),
            "7".into(),
            false,
        )
        .unwrap();
        self.existing.insert(copy.key, Existing::Managed(managed));
        self
    }

    fn unmanaged(mut self, namespace: &str) -> Self {
        self.existing.insert(
            ObjectKey::new(Kind::Secret, namespace, "cred"),
            Existing::Unmanaged {
                resource_version: "3".into(),
            },
        );
        self
    }

    fn explain(&self, focus: Focus) -> Explanation {
        explain(
            &self.world,
            &focus,
            &self.existing,
            &self.contents,
            &self.unlabelled,
            &Bundles::new(),
        )
    }

    /// The findings about namespace `name`, in one line each: rule, reason, copy, action.
    fn namespace(&self, name: &str) -> Vec<String> {
        summary(&self.explain(Focus::Namespace(name.into())))
    }
}

fn summary(e: &Explanation) -> Vec<String> {
    e.findings
        .iter()
        .map(|f| {
            format!(
                "{} {} {} {}{}",
                f.rule.mark(),
                f.verdict.code(),
                f.copy.code(),
                f.action().code(),
                if f.applies() { " applies" } else { "" }
            )
        })
        .collect()
}

#[test]
fn each_reason_appears_for_the_case_that_causes_it() {
    let team = |labels: &[(&str, &str)]| ns("team-a", labels);
    let enabled = [("registry", "enabled")];
    let cases: Vec<(&str, Case, &str)> = vec![
        (
            "selector does not match",
            Case::trusted(&[team(&[("registry", "off")])]),
            "inline NotSelected Missing None",
        ),
        (
            "applies, copy in sync",
            Case::trusted(&[team(&enabled)]).copy("team-a", "v1", false),
            "inline SelectorMatches InSync None applies",
        ),
        (
            "applies, copy missing",
            Case::trusted(&[team(&enabled)]),
            "inline SelectorMatches Missing Create applies",
        ),
        (
            "applies, copy stale",
            Case::trusted(&[team(&enabled)]).copy("team-a", "v0", false),
            "inline SelectorMatches Stale Update applies",
        ),
        (
            "applies, immutable copy stale",
            {
                let mut c = Case::trusted(&[team(&enabled)]).copy("team-a", "v0", true);
                let mut p = payload("v1");
                p.immutable = Some(true);
                c.contents.payloads.insert(cred().key, Arc::new(p));
                c
            },
            "inline SelectorMatches Stale Recreate applies",
        ),
        (
            "untrusted source, no consent",
            Case::new(TrustPolicy::default(), &[team(&enabled)]),
            "inline NotConsented Missing None",
        ),
        (
            "untrusted source, consent",
            Case::new(
                TrustPolicy::default(),
                &[NamespaceInfo {
                    accept_from: Some("platform".into()),
                    ..team(&enabled)
                }],
            ),
            "inline SelectorMatches Missing Create applies",
        ),
        (
            "globally excluded namespace",
            Case::trusted(&[ns("kube-system", &enabled)]),
            "inline ExcludedGlobally Missing None",
        ),
        (
            "terminating namespace",
            Case::trusted(&[NamespaceInfo {
                terminating: true,
                ..team(&enabled)
            }]),
            "inline NamespaceTerminating Missing None",
        ),
        (
            "an unmanaged object holds the name",
            Case::trusted(&[team(&enabled)]).unmanaged("team-a"),
            "inline UnmanagedObject Unmanaged None",
        ),
        (
            "the source's own namespace",
            Case::trusted(&[ns("platform", &enabled)]),
            "inline SourceNamespace Missing None",
        ),
        (
            "the source could not be read",
            {
                let mut c = Case::trusted(&[team(&enabled)]);
                c.world.unreadable_mut().sources.insert(cred().key);
                c
            },
            "inline Skipped Missing None",
        ),
        (
            "the source's content is unknown",
            {
                let mut c = Case::trusted(&[team(&enabled)]);
                c.contents.payloads.clear();
                c
            },
            "inline SelectorMatches Missing ReadSource applies",
        ),
        (
            "the copy is being deleted",
            {
                let mut c = Case::trusted(&[team(&enabled)]).copy("team-a", "v1", false);
                if let Some(Existing::Managed(m)) = c.existing.values_mut().next() {
                    m.deleting = true;
                }
                c
            },
            "inline Skipped BeingDeleted None",
        ),
    ];
    for (what, case, want) in cases {
        let namespace = case.world.namespaces().keys().next().unwrap().clone();
        assert_eq!(case.namespace(&namespace), [want], "{what}");
    }
}

#[test]
fn messages_name_the_clause_that_decided() {
    let case = Case::trusted(&[ns("team-a", &[("registry", "off")])]);
    let e = case.explain(Focus::Namespace("team-a".into()));
    assert_eq!(
        e.findings[0].message,
        "copyrator.io/namespace-selector \"registry=enabled\" does not match the namespace's labels"
    );
    let untrusted = Case::new(
        TrustPolicy::default(),
        &[ns("team-a", &[("registry", "enabled")])],
    );
    let msg = &untrusted
        .explain(Focus::Namespace("team-a".into()))
        .findings[0]
        .message;
    assert!(
        msg.contains("platform is not a trusted namespace")
            && msg.contains("copyrator.io/accept-from: platform"),
        "{msg}"
    );
    let conflict = Case::trusted(&[ns("team-a", &[("registry", "enabled")])]).unmanaged("team-a");
    let msg = &conflict.explain(Focus::Namespace("team-a".into())).findings[0].message;
    assert!(
        msg.contains("an object not managed by copyrator exists") && msg.contains("untouched"),
        "{msg}"
    );
}

#[test]
fn copy_rules_precedence_exclusion_and_missing_sources() {
    let mut case = Case::new(
        TrustPolicy {
            trusted_namespaces: NamespacePatterns::parse("platform").unwrap(),
        },
        &[ns("team-a", &[("registry", "enabled")])],
    );
    case.world.set_copy_rules(vec![
        copy_rule("wins", rule_spec("cred")),
        copy_rule(
            "excludes",
            CopyRuleSpec {
                exclude_namespaces: vec!["team-a".into()],
                ..rule_spec("cred")
            },
        ),
        copy_rule("orphaned", rule_spec("gone")),
        copy_rule(
            "by-label",
            CopyRuleSpec {
                source_name: None,
                source_selector: Some(LabelSelector {
                    match_labels: Some(map(&[("app", "nothing")])),
                    match_expressions: None,
                }),
                ..rule_spec("cred")
            },
        ),
        copy_rule(
            "invalid",
            CopyRuleSpec {
                namespace_selector: None,
                ..rule_spec("cred")
            },
        ),
    ]);
    let mut got = case.namespace("team-a");
    got.sort();
    let mut want = vec![
        // Both CopyRules selecting cred are of the same tier; the older (by name, same age) wins.
        "copyrule/by-label SourceNotFound Missing None",
        "copyrule/excludes ExcludedByRule Missing None",
        "copyrule/invalid InvalidConfiguration Missing None",
        "copyrule/orphaned SourceNotFound Missing None",
        "copyrule/wins SelectorMatches Missing Create applies",
        "inline NameTaken Missing None",
    ];
    want.sort();
    assert_eq!(got, want);
    let e = case.explain(Focus::Namespace("team-a".into()));
    let taken = e
        .findings
        .iter()
        .find(|f| f.verdict.code() == "NameTaken")
        .unwrap();
    assert!(taken.message.contains("CopyRule wins"), "{}", taken.message);
}

#[test]
fn orphans_and_unlabelled_sources_are_explained() {
    // The namespace no longer matches: the copy goes.
    let case = Case::trusted(&[ns("team-a", &[])]).copy("team-a", "v1", false);
    assert_eq!(
        case.namespace("team-a"),
        [
            "inline NotSelected Present None",
            "inline NoRuleWantsCopy Present Delete"
        ]
    );

    // A source that asks for team-a without the opt-in label.
    let mut case = Case::trusted(&[ns("team-a", &[("registry", "enabled")]), ns("b", &[])]);
    let mut bare = cred();
    bare.key.name = "unlabelled".into();
    bare.labels.clear();
    case.unlabelled = vec![bare.clone()];
    let e = case.explain(Focus::Namespace("team-a".into()));
    let f = e.findings.last().unwrap();
    assert_eq!(f.verdict.code(), "SourceNotOptedIn");
    assert!(
        f.message
            .contains("has copyrator.io/namespace-selector but not the label copyrator.io/source"),
        "{}",
        f.message
    );
    // Namespace b is not what it asks for.
    assert!(
        case.explain(Focus::Namespace("b".into()))
            .findings
            .iter()
            .all(|f| f.verdict.code() != "SourceNotOptedIn")
    );
    // Explaining the source itself says so too.
    let e = case.explain(Focus::Source(bare.key.clone()));
    assert_eq!(summary(&e), ["inline SourceNotOptedIn Missing None"]);
}

#[test]
fn a_source_is_explained_across_namespaces() {
    let mut case = Case::trusted(&[
        ns("team-a", &[("registry", "enabled")]),
        ns("team-b", &[("registry", "enabled")]),
        ns("other", &[]),
        ns("more", &[]),
        ns("platform", &[]),
    ])
    .copy("team-a", "v1", false);
    let mut src = cred();
    src.annotations
        .insert(marks::NAMESPACES_ANNOTATION.into(), "listed,gone".into());
    case.world.set_sources([(src.key.clone(), Some(src))]);
    case.world.insert_namespaces([ns("listed", &[])]);
    let e = case.explain(Focus::Source(cred().key));
    let mut got: Vec<String> = e
        .findings
        .iter()
        .map(|f| {
            format!(
                "{} {} {}",
                f.target.as_ref().unwrap().namespace,
                f.verdict.code(),
                f.copy.code()
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            "gone NamespaceNotFound Missing",
            "listed Listed Missing",
            "team-a SelectorMatches InSync",
            "team-b SelectorMatches Missing",
        ]
    );
    // other, more and the source's own namespace are counted, not listed.
    assert_eq!(e.not_selected.get(&RuleId::Inline(cred().key)), Some(&3));
}

/// Whatever the inputs, a finding applies exactly when the plan writes or keeps that claim's
/// copy, and says the same thing the plan does.
#[test]
fn explanation_agrees_with_the_plan() {
    let mut case = Case::new(
        TrustPolicy::default(),
        &[
            ns("team-a", &[("registry", "enabled")]),
            NamespaceInfo {
                accept_from: Some("plat*".into()),
                ..ns("team-b", &[("registry", "enabled")])
            },
            ns("team-c", &[("registry", "enabled")]),
        ],
    )
    .copy("team-b", "v0", false)
    .unmanaged("team-c");
    case.world
        .set_copy_rules(vec![copy_rule("other", rule_spec("cred"))]);
    for namespace in ["team-a", "team-b", "team-c"] {
        let scope = Scope::Namespace(namespace.into());
        let actions = plan(&case.world, &scope, &case.existing, &case.contents);
        let e = case.explain(Focus::Namespace(namespace.into()));
        for action in &actions {
            let (target, by, writes) = match action {
                Action::Create { copy, by } => (&copy.key, by, true),
                Action::Update { copy, by, .. } | Action::Recreate { copy, by, .. } => {
                    (&copy.key, by, true)
                }
                Action::InSync { target, by } => (target, by, false),
                Action::Conflict { target, by, .. } => (target, by, false),
                _ => continue,
            };
            let finding = e
                .findings
                .iter()
                .find(|f| {
                    f.target.as_ref() == Some(target)
                        && f.rule == by.rule
                        && f.source.as_ref() == Some(&by.source)
                })
                .unwrap_or_else(|| panic!("{namespace}: no finding for {action:?}"));
            let applies = writes || matches!(action, Action::InSync { .. });
            assert_eq!(finding.applies(), applies, "{namespace}: {finding:?}");
            assert_eq!(
                finding.action() != Planned::Nothing,
                writes,
                "{namespace}: {finding:?}"
            );
        }
        // Nothing applies that the plan does not write or keep.
        let applying = e.findings.iter().filter(|f| f.applies()).count();
        let kept = actions
            .iter()
            .filter(|a| a.is_write() || matches!(a, Action::InSync { .. }))
            .count();
        assert_eq!(applying, kept, "{namespace}");
    }
}

#[test]
fn a_hubs_copy_is_named_with_its_link_not_called_an_orphan() {
    let mut case = Case::trusted(&[ns("team-a", &[])]);
    let labels = map(&[(marks::MANAGED_BY_LABEL, marks::MANAGED_BY_VALUE)]);
    let annotations = map(&[
        (marks::SOURCE_ANNOTATION, "hub-a/platform/registry"),
        (marks::RULE_ANNOTATION, "hub-a/copyrule/registry"),
        (marks::CONTENT_HASH_ANNOTATION, "abc"),
    ]);
    let managed =
        ManagedCopy::from_marks(Kind::Secret, &labels, &annotations, "7".into(), false).unwrap();
    case.existing.insert(
        ObjectKey::new(Kind::Secret, "team-a", "registry"),
        Existing::Managed(managed),
    );
    let e = case.explain(Focus::Namespace("team-a".into()));
    let hub: Vec<&Finding> = e
        .findings
        .iter()
        .filter(|f| f.verdict == Verdict::HubUnknown)
        .collect();
    assert_eq!(hub.len(), 1, "{:#?}", e.findings);
    assert!(
        hub[0]
            .message
            .contains("platform/registry on the hub of HubLink hub-a")
            && hub[0].message.contains("kubectl get hublink hub-a"),
        "{}",
        hub[0].message
    );
    assert!(
        e.findings
            .iter()
            .all(|f| f.verdict.code() != "NoRuleWantsCopy"),
        "never called a copy no rule wants: {:#?}",
        e.findings
    );
    // Asked about another namespace, it is not mentioned.
    assert!(
        case.explain(Focus::Namespace("team-b".into()))
            .findings
            .iter()
            .all(|f| f.verdict != Verdict::HubUnknown)
    );
}
