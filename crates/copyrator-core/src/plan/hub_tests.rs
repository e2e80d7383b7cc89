//! Table-driven tests of the planner with a hub's copies (SPEC §14): the link's ceiling,
//! consent, precedence beside local rules, and no deletion without a positive signal.

use super::*;
use crate::{
    content::DesiredCopy,
    copyrule::{ClusterPlacement, CopyRule, CopyRuleSpec},
    hub::{HubSource, Hubs, LinkSettings, LinkView, place},
    marks,
    model::{Kind, NamespaceInfo, Payload, SourceInfo},
    selector::Selector,
    tenancy::{NamespacePatterns, TrustPolicy},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
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

/// A member namespace the hub rules select and the ceiling admits.
const RECEIVING: &[(&str, &str)] = &[("registry", "enabled"), ("hub", "allowed")];

/// Link `hub-a`: sources of `platform` (trusted) and `team-*`, into namespaces labelled
/// `hub=allowed`.
fn settings(name: &str) -> LinkSettings {
    LinkSettings {
        name: name.into(),
        cluster_name: "member-1".into(),
        cluster_profile_namespace: None,
        source_namespaces: NamespacePatterns::parse("platform,team-*").unwrap(),
        trusted_source_namespaces: NamespacePatterns::parse("platform").unwrap(),
        kinds: vec![Kind::Secret, Kind::ConfigMap],
        namespace_selector: Selector::parse("hub=allowed").unwrap(),
    }
}

/// A hub CopyRule placed on `member-1`, copying `source_ns/cred` into namespaces labelled
/// `registry=enabled`.
fn hub_rule(name: &str, created: i64, source_ns: &str) -> CopyRule {
    let mut cr = CopyRule::new(
        name,
        CopyRuleSpec {
            kind: "Secret".into(),
            source_namespace: source_ns.into(),
            source_name: Some("cred".into()),
            namespace_selector: Some(LabelSelector {
                match_labels: Some(map(&[("registry", "enabled")])),
                match_expressions: None,
            }),
            clusters: Some(ClusterPlacement {
                names: vec!["member-1".into()],
                selector: None,
            }),
            ..Default::default()
        },
    );
    cr.metadata.creation_timestamp = Some(Time(
        k8s_openapi::jiff::Timestamp::from_second(created).unwrap(),
    ));
    cr
}

fn hub_source(link: &str, source_ns: &str, uid: &str) -> SourceInfo {
    SourceInfo {
        key: ObjectKey::hub(Kind::Secret, link, source_ns, "cred"),
        uid: uid.into(),
        resource_version: "5".into(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        created: 100,
        deleting: false,
        dropped: None,
    }
}

fn payload(v: &str) -> Payload {
    Payload {
        type_: Some("Opaque".into()),
        data: Some(map(&[("token", v)])),
        ..Default::default()
    }
}

/// A member world: copyrator's namespace `copyrator`, no namespace trusted.
struct Member {
    world: World,
    hubs: Hubs,
    existing: BTreeMap<ObjectKey, Existing>,
    contents: Contents,
}

impl Member {
    fn new() -> Self {
        let mut world = World::new(Policy {
            trust: TrustPolicy::default(),
            own_namespace: Some("copyrator".into()),
            ..Default::default()
        });
        world.insert_namespaces([ns("copyrator", RECEIVING)]);
        Member {
            world,
            hubs: Hubs {
                links_known: true,
                links: Vec::new(),
            },
            existing: BTreeMap::new(),
            contents: Contents::default(),
        }
    }

    /// Link `link`, its hub holding `rules` with source `cred` present in each source
    /// namespace (payload `v1`).
    fn link(mut self, link: &str, rules: &[CopyRule]) -> Self {
        let s = settings(link);
        let placement = place(&s, None, rules);
        let mut view = LinkView::new(link, Ok(Arc::new(s)));
        for key in placement.sources() {
            let (_, hub_ns) = key.hub_parts().unwrap();
            let src = hub_source(link, hub_ns, &format!("uid-{hub_ns}"));
            self.contents
                .payloads
                .insert(key.clone(), Arc::new(payload("v1")));
            view.sources.insert(key, HubSource::Present(src));
        }
        view.placement = Some(Arc::new(placement));
        self.hubs.links.push(view);
        self
    }

    fn ns(mut self, name: &str, labels: &[(&str, &str)]) -> Self {
        self.world.insert_namespaces([ns(name, labels)]);
        self
    }

    fn consenting(mut self, name: &str, accept_from: &str) -> Self {
        let mut n = ns(name, RECEIVING);
        n.accept_from = Some(accept_from.into());
        self.world.insert_namespaces([n]);
        self
    }

    fn edit(mut self, f: impl FnOnce(&mut Hubs)) -> Self {
        f(&mut self.hubs);
        self
    }

    /// The copy `link`'s rule `rule` makes of its `source_ns` source in `namespace`, as
    /// copyrator writes it (payload `v`).
    fn with_copy(
        mut self,
        link: &str,
        rule: &CopyRule,
        source_ns: &str,
        namespace: &str,
        v: &str,
    ) -> Self {
        let placement = place(&settings(link), None, std::slice::from_ref(rule));
        let member_rule = &placement.rules[0];
        let src = hub_source(link, source_ns, &format!("uid-{source_ns}"));
        let copy = DesiredCopy::build(member_rule, &src, &payload(v), namespace).unwrap();
        let meta = copy.object().metadata;
        let managed = ManagedCopy::from_marks(
            Kind::Secret,
            &meta.labels.unwrap(),
            &meta.annotations.unwrap(),
            "7".into(),
            false,
        )
        .expect("a hub copy's marks parse");
        self.existing
            .insert(copy.key.clone(), Existing::Managed(managed));
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

    fn local_rule(mut self, rule: CopyRule, source: SourceInfo) -> Self {
        self.contents
            .payloads
            .insert(source.key.clone(), Arc::new(payload("local")));
        self.world.set_sources([(source.key.clone(), Some(source))]);
        self.world.set_copy_rules(vec![rule]);
        self
    }

    fn plan(mut self) -> Vec<String> {
        self.world.set_hubs(Arc::new(self.hubs.clone()));
        summary(&plan(
            &self.world,
            &Scope::All,
            &self.existing,
            &self.contents,
        ))
    }
}

fn summary(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .map(|a| match a {
            Action::Create { copy, by } => format!(
                "create {} by {} from {}",
                copy.key.namespace,
                by.rule.mark(),
                copy.template.marks.source.namespaced_name()
            ),
            Action::Update { copy, .. } => format!("update {}", copy.key.namespace),
            Action::Recreate { copy, .. } => format!("recreate {}", copy.key.namespace),
            Action::Delete { target, .. } => format!("delete {}", target.namespace),
            Action::InSync { target, .. } => format!("in-sync {}", target.namespace),
            Action::Retain { target, .. } => format!("retain {}", target.namespace),
            Action::Conflict { target, by, reason } => {
                let why = match reason {
                    ConflictReason::Unmanaged => "unmanaged".to_string(),
                    ConflictReason::OwnedBy(c) => format!("owned by {}", c.rule.mark()),
                    other => format!("{other:?}"),
                };
                format!("conflict {} {} ({why})", target.namespace, by.rule.mark())
            }
            Action::NeedSource { source, .. } => format!("need {}", source.namespaced_name()),
            Action::Skip { target, .. } => format!("skip {}", target.namespace),
            other => format!("{other:?}"),
        })
        .collect()
}

#[test]
fn a_hub_copy_lands_within_the_ceiling_and_consent() {
    let trusted = hub_rule("registry", 10, "platform");
    let tenant = hub_rule("tenant", 10, "team-x");
    let cases: Vec<(&str, Member, Vec<&str>)> = vec![
        (
            "a labelled namespace within the ceiling gets the copy, marked with hub and source",
            Member::new()
                .link("hub-a", std::slice::from_ref(&trusted))
                .ns("team-a", RECEIVING),
            vec!["create team-a by hub-a/copyrule/registry from hub-a/platform/cred"],
        ),
        (
            "no link: nothing from any hub",
            Member::new().ns("team-a", RECEIVING),
            vec![],
        ),
        (
            "the rule's selector does not match: nothing",
            Member::new()
                .link("hub-a", std::slice::from_ref(&trusted))
                .ns("team-a", &[("hub", "allowed")]),
            vec![],
        ),
        (
            "the ceiling's namespaceSelector does not match: nothing",
            Member::new()
                .link("hub-a", std::slice::from_ref(&trusted))
                .ns("team-a", &[("registry", "enabled")]),
            vec![],
        ),
        (
            "copyrator's own namespace never receives a hub copy",
            Member::new().link("hub-a", std::slice::from_ref(&trusted)),
            vec![],
        ),
        (
            "a source namespace beyond the ceiling: nothing",
            Member::new()
                .link("hub-a", &[hub_rule("other", 10, "kube-system")])
                .ns("team-a", RECEIVING),
            vec![],
        ),
        (
            "a tenant's source without consent: nothing",
            Member::new()
                .link("hub-a", std::slice::from_ref(&tenant))
                .ns("team-a", RECEIVING),
            vec![],
        ),
        (
            "a tenant's source where the namespace consents to <link>/<namespace>",
            Member::new()
                .link("hub-a", std::slice::from_ref(&tenant))
                .consenting("team-a", "hub-a/team-*"),
            vec!["create team-a by hub-a/copyrule/tenant from hub-a/team-x/cred"],
        ),
        (
            "consent to this cluster's namespaces (`*`) is no consent to a hub's",
            Member::new()
                .link("hub-a", std::slice::from_ref(&tenant))
                .consenting("team-a", "*"),
            vec![],
        ),
        (
            "consent to another link's namespace is none to this one's",
            Member::new()
                .link("hub-a", &[tenant])
                .consenting("team-a", "hub-b/team-x"),
            vec![],
        ),
    ];
    for (name, member, want) in cases {
        assert_eq!(member.plan(), want, "{name}");
    }
}

#[test]
fn a_hub_copy_goes_only_on_a_positive_signal() {
    let rule = hub_rule("registry", 10, "platform");
    let copied = || {
        Member::new()
            .link("hub-a", std::slice::from_ref(&rule))
            .ns("team-a", RECEIVING)
            .with_copy("hub-a", &rule, "platform", "team-a", "v1")
    };
    let source_key = ObjectKey::hub(Kind::Secret, "hub-a", "platform", "cred");
    let set_source = |state: HubSource| {
        let key = source_key.clone();
        move |hubs: &mut Hubs| {
            hubs.links[0].sources.insert(key, state);
        }
    };
    let cases: Vec<(&str, Member, Vec<&str>)> = vec![
        (
            "in sync: no write (§14.3)",
            copied(),
            vec!["in-sync team-a"],
        ),
        (
            "the source changed on the hub: updated",
            Member::new()
                .link("hub-a", std::slice::from_ref(&rule))
                .ns("team-a", RECEIVING)
                .with_copy("hub-a", &rule, "platform", "team-a", "v0"),
            vec!["update team-a"],
        ),
        (
            "the HubLinks not known yet: kept as it is",
            copied().edit(|h| h.links_known = false),
            vec!["skip team-a"],
        ),
        (
            "the hub never read since the start: kept as it is",
            copied().edit(|h| h.links[0].placement = None),
            vec!["skip team-a"],
        ),
        (
            "the link invalid: kept as it is",
            copied().edit(|h| h.links[0].settings = Err("bad".into())),
            vec!["skip team-a"],
        ),
        (
            "the source not read yet: kept as it is",
            copied().edit(set_source(HubSource::Pending)),
            vec!["skip team-a"],
        ),
        (
            "the source's read denied or failed: kept as it is",
            copied().edit(set_source(HubSource::Unreadable("403".into()))),
            vec!["skip team-a"],
        ),
        (
            "the hub says the source is gone: deleted per its policy",
            copied().edit(set_source(HubSource::Gone)),
            vec!["delete team-a"],
        ),
        (
            "the hub no longer places the rule: deleted per its policy",
            copied().edit(|h| {
                h.links[0].placement = Some(Arc::new(place(&settings("hub-a"), None, &[])))
            }),
            vec!["delete team-a"],
        ),
        (
            "the link deleted by this cluster's administrator: deleted per its policy",
            copied().edit(|h| h.links.clear()),
            vec!["delete team-a"],
        ),
        (
            "the namespace left the ceiling (this cluster's change): deleted",
            Member::new()
                .link("hub-a", std::slice::from_ref(&rule))
                .ns("team-a", &[("registry", "enabled")])
                .with_copy("hub-a", &rule, "platform", "team-a", "v1"),
            vec!["delete team-a"],
        ),
    ];
    for (name, member, want) in cases {
        assert_eq!(member.plan(), want, "{name}");
    }
}

#[test]
fn hub_rules_rank_below_local_ones_and_never_take_an_unmanaged_object() {
    let mut overwriting = hub_rule("registry", 10, "platform");
    overwriting.spec.conflict_policy = crate::copyrule::ConflictPolicy::Overwrite;
    let local_source = SourceInfo {
        key: ObjectKey::new(Kind::Secret, "infra", "cred"),
        uid: "local".into(),
        resource_version: "1".into(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        created: 500,
        deleting: false,
        dropped: None,
    };
    let mut local = hub_rule("local", 500, "infra");
    local.spec.clusters = None;
    let cases: Vec<(&str, Member, Vec<&str>)> = vec![
        (
            "an object the member owns is never touched, whatever the hub rule's conflictPolicy",
            Member::new()
                .link("hub-a", &[overwriting])
                .ns("team-a", RECEIVING)
                .unmanaged("team-a"),
            vec!["conflict team-a hub-a/copyrule/registry (unmanaged)"],
        ),
        (
            "a local CopyRule wanting the name wins over the hub's",
            Member::new()
                .link("hub-a", &[hub_rule("registry", 10, "platform")])
                .ns("team-a", RECEIVING)
                .local_rule(local.clone(), local_source.clone()),
            vec![
                // The local rule's reach includes copyrator's own namespace; the hub's never.
                "create copyrator by copyrule/local from infra/cred",
                "conflict team-a hub-a/copyrule/registry (owned by copyrule/local)",
                "create team-a by copyrule/local from infra/cred",
            ],
        ),
        (
            "two hubs want the name: the older rule wins",
            Member::new()
                .link("hub-a", &[hub_rule("registry", 20, "platform")])
                .link("hub-b", &[hub_rule("registry", 10, "platform")])
                .ns("team-a", RECEIVING),
            vec![
                "conflict team-a hub-a/copyrule/registry (owned by hub-b/copyrule/registry)",
                "create team-a by hub-b/copyrule/registry from hub-b/platform/cred",
            ],
        ),
    ];
    for (name, member, want) in cases {
        assert_eq!(member.plan(), want, "{name}");
    }
}

#[test]
fn a_hub_source_makes_no_rule_of_its_own_and_a_hub_copy_is_never_a_source() {
    let rule = hub_rule("registry", 10, "platform");
    // The hub's source carries an inline rule's annotations and a copy's mark.
    let member = Member::new()
        .link("hub-a", std::slice::from_ref(&rule))
        .ns("team-a", RECEIVING)
        .edit(|h| {
            let key = ObjectKey::hub(Kind::Secret, "hub-a", "platform", "cred");
            let mut src = hub_source("hub-a", "platform", "uid-platform");
            src.labels = map(&[(marks::SOURCE_LABEL, "true")]);
            src.annotations = map(&[(marks::NAMESPACE_SELECTOR_ANNOTATION, "")]);
            h.links[0]
                .sources
                .insert(key.clone(), HubSource::Present(src.clone()));
        });
    assert_eq!(
        member.plan(),
        ["create team-a by hub-a/copyrule/registry from hub-a/platform/cred"],
        "no inline rule of the hub's source (an empty selector would be invalid, and copy everywhere)"
    );
    let copy_on_hub = Member::new()
        .link("hub-a", std::slice::from_ref(&rule))
        .ns("team-a", RECEIVING)
        .edit(|h| {
            let key = ObjectKey::hub(Kind::Secret, "hub-a", "platform", "cred");
            let mut src = hub_source("hub-a", "platform", "uid-platform");
            src.labels = map(&[(marks::MANAGED_BY_LABEL, marks::MANAGED_BY_VALUE)]);
            h.links[0].sources.insert(key, HubSource::Present(src));
        });
    assert_eq!(
        copy_on_hub.plan(),
        Vec::<String>::new(),
        "a hub's copy is no source"
    );
}
