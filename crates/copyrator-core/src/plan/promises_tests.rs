//! Promise × rule source (SPEC §4, §9, §9.11): every promise the planner keeps, checked for a
//! rule of every author. [`case`] matches on [`Author`] without a wildcard: a new rule source
//! does not compile here until it is built, and then every promise below is asked of it.

use super::*;
use crate::{
    bundle::{BundleInput, BundleInputs, certificates},
    copyrule::{BundleSourceSpec, ConflictPolicy, CopyRule, CopyRuleSpec, TargetSpec},
    grants::GrantPolicy,
    hub::{HubSource, Hubs, LinkSettings, LinkView, place},
    marks,
    model::{Kind, NamespaceInfo, Payload, SourceInfo},
    namespaced::{NamespacedCopyRule, NamespacedCopyRuleSpec},
    powers::{Author, Kinds, OwnNamespace, Targets},
    rules::Rule,
    selector::Selector,
    tenancy::{NamespacePatterns, TrustPolicy},
    transform::certificates::tests::ca,
};
use serde_json::json;

/// The namespace every case copies into, and the copies' name.
const DEST: &str = "dest";
const NAME: &str = "shared";
/// The trusted namespace, and a tenant's.
const PLATFORM: &str = "platform";
const TENANT: &str = "team-a";
/// copyrator's own namespace.
const OWN: &str = "copyrator";

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn role_binding() -> Kind {
    Kind::register(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
    )
    .unwrap()
}

/// What a source of `kind` holds: data for a ConfigMap, a roleRef to ClusterRole `view`
/// (listed on `--bind-cluster-roles`) for a RoleBinding.
fn payload(kind: Kind) -> Payload {
    if kind == Kind::ConfigMap {
        Payload {
            data: Some(map(&[("k", "v")])),
            ..Default::default()
        }
    } else {
        let mut p = Payload::default();
        p.fields.insert(
            "roleRef".into(),
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}),
        );
        p
    }
}

fn source(kind: Kind, namespace: &str, inline: bool) -> SourceInfo {
    let (labels, annotations) = if inline {
        (
            map(&[(marks::SOURCE_LABEL, "true")]),
            map(&[(marks::NAMESPACES_ANNOTATION, &format!("{DEST},{OWN}"))]),
        )
    } else {
        Default::default()
    };
    SourceInfo {
        key: ObjectKey::new(kind, namespace, NAME),
        uid: format!("uid-{namespace}"),
        resource_version: "5".into(),
        labels,
        annotations,
        created: 100,
        deleting: false,
        dropped: None,
    }
}

/// `platform` trusted; RoleBindings of ClusterRole `view` may be copied; `kube-system`
/// excluded; copyrator's namespace `copyrator`.
fn policy() -> Policy {
    Policy {
        trust: TrustPolicy {
            trusted_namespaces: NamespacePatterns::parse(PLATFORM).unwrap(),
        },
        grants: GrantPolicy {
            bind_cluster_roles: ["view".to_string()].into(),
            ..Default::default()
        },
        excluded_namespaces: ["kube-system".to_string()].into(),
        own_namespace: Some(OWN.into()),
        ..Default::default()
    }
}

/// A namespace the hub link's ceiling admits; consenting to the tenant (here and on the hub)
/// when `consent`.
fn namespace(name: &str, consent: bool) -> NamespaceInfo {
    NamespaceInfo {
        name: name.into(),
        resource_version: "1".into(),
        labels: map(&[("hub", "allowed")]).into(),
        accept_from: consent.then(|| format!("{TENANT},hub-a/{TENANT}")),
        terminating: false,
    }
}

/// The spec a CopyRule-like rule of `kind` asks with: into `dest` and copyrator's own.
fn spec(kind: Kind, source_namespace: &str, conflict: ConflictPolicy) -> CopyRuleSpec {
    CopyRuleSpec {
        api_version: Some(kind.api_version()),
        kind: kind.as_str().into(),
        source_namespace: source_namespace.into(),
        source_name: Some(NAME.into()),
        namespaces: vec![DEST.into(), OWN.into()],
        conflict_policy: conflict,
        ..Default::default()
    }
}

fn namespaced(namespace: &str, kind: Kind, conflict: ConflictPolicy) -> CopyRule {
    let s = spec(kind, namespace, conflict);
    let mut rule = NamespacedCopyRule::new(
        "r",
        NamespacedCopyRuleSpec {
            api_version: s.api_version,
            kind: s.kind,
            source_name: s.source_name,
            namespaces: s.namespaces,
            conflict_policy: s.conflict_policy,
            ..Default::default()
        },
    );
    rule.metadata.namespace = Some(namespace.into());
    rule.metadata.uid = Some("uid-r".into());
    rule.as_copy_rule().unwrap()
}

/// One rule of `author` copying a `kind` named [`NAME`] into [`DEST`] and copyrator's own
/// namespace, asking `conflict` where its author can write that down; `consent`: whether the
/// receiving namespaces accept copies from the tenant.
struct Case {
    world: World,
    contents: Contents,
}

fn case(author: Author, kind: Kind, conflict: ConflictPolicy, consent: bool) -> Case {
    let mut world = World::new(policy());
    world.insert_namespaces([
        namespace(DEST, consent),
        namespace(OWN, consent),
        namespace("kube-system", consent),
    ]);
    let mut contents = Contents::default();
    let mut add_source = |world: &mut World, src: SourceInfo| {
        contents
            .payloads
            .insert(src.key.clone(), Arc::new(payload(kind)));
        world.set_sources([(src.key.clone(), Some(src))]);
    };
    match author {
        Author::CopyRule => {
            add_source(&mut world, source(kind, PLATFORM, false));
            world.set_copy_rules(vec![CopyRule::new("r", spec(kind, PLATFORM, conflict))]);
        }
        Author::Template => {
            let mut s = spec(kind, "", conflict);
            s.source_name = None;
            s.target_name = Some(NAME.into());
            let body = if kind == Kind::ConfigMap {
                json!({"data": {"k": "v"}})
            } else {
                json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}})
            };
            s.template = Some(serde_json::from_value(body).unwrap());
            let mut rule = CopyRule::new("r", s);
            rule.metadata.uid = Some("uid-r".into());
            world.set_copy_rules(vec![rule]);
        }
        Author::Bundle => {
            let mut s = spec(kind, "", conflict);
            s.source_name = None;
            s.target_name = Some(NAME.into());
            s.sources = Some(vec![BundleSourceSpec {
                kind: "Secret".into(),
                namespace: PLATFORM.into(),
                name: Some("root".into()),
                key: "ca.crt".into(),
                ..Default::default()
            }]);
            s.target = Some(TargetSpec {
                key: Some("ca.pem".into()),
                ..Default::default()
            });
            let mut rule = CopyRule::new("r", s);
            rule.metadata.uid = Some("uid-r".into());
            world.set_copy_rules(vec![rule]);
            let (pem, _) = ca("root");
            contents.bundles.insert(
                ObjectKey::bundle(kind, "r"),
                Arc::new(BundleInputs {
                    inputs: vec![BundleInput {
                        source: ObjectKey::new(Kind::Secret, PLATFORM, "root"),
                        key: "ca.crt".into(),
                        read: Ok(certificates(pem.as_bytes()).unwrap()),
                    }],
                    read_at: 1_900_000_000,
                }),
            );
        }
        Author::TrustedInline => add_source(&mut world, source(kind, PLATFORM, true)),
        Author::TenantInline => add_source(&mut world, source(kind, TENANT, true)),
        Author::TrustedNamespaced => {
            add_source(&mut world, source(kind, PLATFORM, false));
            world.set_copy_rules(vec![namespaced(PLATFORM, kind, conflict)]);
        }
        Author::TenantNamespaced => {
            add_source(&mut world, source(kind, TENANT, false));
            world.set_copy_rules(vec![namespaced(TENANT, kind, conflict)]);
        }
        Author::Hub => {
            // A tenant's namespace of the hub, which the link does not trust.
            let link = LinkSettings {
                name: "hub-a".into(),
                cluster_name: "member-1".into(),
                cluster_profile_namespace: None,
                source_namespaces: NamespacePatterns::parse("platform,team-*").unwrap(),
                trusted_source_namespaces: NamespacePatterns::parse(PLATFORM).unwrap(),
                kinds: vec![Kind::ConfigMap, role_binding()],
                namespace_selector: Selector::parse("hub=allowed").unwrap(),
            };
            let mut s = spec(kind, TENANT, conflict);
            s.clusters = Some(crate::copyrule::ClusterPlacement {
                names: vec!["member-1".into()],
                selector: None,
            });
            let placement = place(&link, None, &[CopyRule::new("r", s)]);
            let mut view = LinkView::new("hub-a", Ok(Arc::new(link)));
            for key in placement.sources() {
                contents
                    .payloads
                    .insert(key.clone(), Arc::new(payload(kind)));
                let mut src = source(kind, TENANT, false);
                src.key = key.clone();
                view.sources.insert(key, HubSource::Present(src));
            }
            view.placement = Some(Arc::new(placement));
            world.set_hubs(Arc::new(Hubs {
                links_known: true,
                links: vec![view],
            }));
        }
    }
    Case { world, contents }
}

impl Case {
    /// What the plan writes into `namespace` over `existing`: the target's key, and whether
    /// the write takes over what is there.
    fn writes_into(&self, namespace: &str, existing: &BTreeMap<ObjectKey, Existing>) -> Vec<bool> {
        plan(&self.world, &Scope::All, existing, &self.contents)
            .into_iter()
            .filter_map(|a| match a {
                Action::Create { copy, .. } if copy.key.namespace == namespace => Some(false),
                Action::Update { copy, adopt, .. } | Action::Recreate { copy, adopt, .. }
                    if copy.key.namespace == namespace =>
                {
                    Some(adopt.adopts())
                }
                _ => None,
            })
            .collect()
    }
}

/// The kind every data promise is asked with: what every author may copy.
const DATA: Kind = Kind::ConfigMap;

/// Only a rule whose author may overwrite takes over an object copyrator does not manage,
/// whatever else the rule asks (read-only, a namespace's consent); every other rule leaves it
/// to its owner (SPEC §4, §9.11).
#[test]
fn only_a_rule_that_may_overwrite_takes_over_an_unmanaged_object() {
    for author in Author::ALL {
        let c = case(author, DATA, ConflictPolicy::Overwrite, true);
        let theirs = BTreeMap::from([(
            ObjectKey::new(DATA, DEST, NAME),
            Existing::Unmanaged {
                resource_version: "3".into(),
            },
        )]);
        let writes = c.writes_into(DEST, &theirs);
        if author.powers().overwrite {
            assert_eq!(writes, [true], "{author:?} asked to overwrite");
        } else {
            assert!(
                writes.is_empty(),
                "{author:?} took over an unmanaged object"
            );
        }
        // With nothing there, every author copies into a consenting namespace.
        assert_eq!(c.writes_into(DEST, &BTreeMap::new()), [false], "{author:?}");
    }
}

/// Nothing lands where its author needs consent and the namespace gave none (SPEC §9.2).
#[test]
fn no_copy_where_consent_is_needed_and_not_given() {
    for author in Author::ALL {
        let c = case(author, DATA, ConflictPolicy::Skip, false);
        let writes = c.writes_into(DEST, &BTreeMap::new());
        match author.powers().targets {
            Targets::Selected => assert_eq!(writes, [false], "{author:?}"),
            Targets::Consenting | Targets::WithinCeiling => {
                assert!(writes.is_empty(), "{author:?} wrote without consent")
            }
        }
    }
}

/// copyrator's own namespace receives data only from whom the table says, and an excluded
/// namespace nothing from anyone (SPEC §9.10, §2.3).
#[test]
fn own_and_excluded_namespaces_receive_only_what_the_table_allows() {
    for author in Author::ALL {
        let c = case(author, DATA, ConflictPolicy::Skip, true);
        let own = c.writes_into(OWN, &BTreeMap::new());
        match author.powers().own_namespace {
            OwnNamespace::Data => assert_eq!(own, [false], "{author:?}"),
            OwnNamespace::Nothing => assert!(own.is_empty(), "{author:?} wrote into {OWN}"),
        }
        assert!(c.writes_into("kube-system", &BTreeMap::new()).is_empty());
        // Never a kind other than data into copyrator's namespace, from anyone.
        let c = case(author, role_binding(), ConflictPolicy::Skip, true);
        assert!(
            c.writes_into(OWN, &BTreeMap::new()).is_empty(),
            "{author:?}"
        );
    }
}

/// An RBAC copy comes only from an author whose row allows it; nobody else's rule grants
/// anything, whatever the lists (SPEC §9.10, §9.11).
#[test]
fn rbac_copies_only_from_authors_that_may_grant() {
    for author in Author::ALL {
        let c = case(author, role_binding(), ConflictPolicy::Skip, true);
        let writes = c.writes_into(DEST, &BTreeMap::new());
        let p = author.powers();
        if p.rbac {
            assert_eq!(p.kinds, Kinds::Any);
            assert_eq!(writes, [false], "{author:?} may copy a listed RoleBinding");
        } else {
            assert!(writes.is_empty(), "{author:?} copied a RoleBinding");
        }
    }
}

/// The table and the rule each source makes agree: every case's rule is of its author.
#[test]
fn every_rule_source_maps_to_its_row() {
    for author in Author::ALL {
        let c = case(author, DATA, ConflictPolicy::Skip, true);
        let rules: Vec<Author> = c.world.rules().rules.iter().map(Rule::author).collect();
        assert_eq!(rules, [author], "{author:?}");
    }
}

/// A rule that asks to overwrite and may not is held to Skip, and the set says so.
#[test]
fn a_rule_held_to_its_row_is_told() {
    for author in Author::ALL {
        let c = case(author, DATA, ConflictPolicy::Overwrite, true);
        let rules = c.world.rules();
        let held = rules
            .held
            .values()
            .any(|asked| asked.contains(&crate::powers::Overreach::Overwrite));
        // A hub rule's is said on the link (its placement), an inline rule cannot ask.
        let can_ask = !matches!(
            author,
            Author::TrustedInline | Author::TenantInline | Author::Hub
        );
        assert_eq!(
            held,
            can_ask && !author.powers().overwrite,
            "{author:?}: {:?}",
            rules.held
        );
        assert!(
            rules
                .rules
                .iter()
                .all(|r| r.conflict_policy == ConflictPolicy::Skip || r.powers().overwrite)
        );
    }
}
