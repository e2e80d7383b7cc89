//! Templates (SPEC §3.3): a CopyRule holding its copies' content makes them in the selected
//! namespaces, the namespace's name put in where asked; they are judged, marked, restored and
//! removed as any copy.

use super::*;
use crate::{
    copyrule::{CopyRule, CopyRuleSpec},
    grants::GrantPolicy,
    model::{Kind, NamespaceInfo},
    rules::Rule,
    tenancy::TrustPolicy,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Value, json};

fn kind(group: &str, kind: &str, plural: &str) -> Kind {
    Kind::register(group, "v1", kind, plural).unwrap()
}

fn network_policy() -> Kind {
    kind("networking.k8s.io", "NetworkPolicy", "networkpolicies")
}

fn role_binding() -> Kind {
    kind("rbac.authorization.k8s.io", "RoleBinding", "rolebindings")
}

fn ns(name: &str, team: Option<&str>) -> NamespaceInfo {
    NamespaceInfo {
        name: name.into(),
        resource_version: "1".into(),
        labels: team
            .map(|t| {
                [("team".to_string(), t.to_string())]
                    .into_iter()
                    .collect::<BTreeMap<_, _>>()
            })
            .unwrap_or_default()
            .into(),
        accept_from: None,
        terminating: false,
    }
}

/// A template rule `name` copying into every namespace labelled `team`, its copies named
/// `bootstrap` unless [`CopyRuleSpec::target_name`] is changed.
fn template_rule(name: &str, kind: Kind, template: Value) -> CopyRule {
    let mut rule = CopyRule::new(
        name,
        CopyRuleSpec {
            api_version: Some(kind.api_version()),
            kind: kind.as_str().into(),
            template: Some(serde_json::from_value(template).unwrap()),
            target_name: Some("bootstrap".into()),
            namespace_selector: Some(LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                        key: "team".into(),
                        operator: "Exists".into(),
                        values: None,
                    },
                ]),
            }),
            ..Default::default()
        },
    );
    rule.metadata.uid = Some(format!("uid-{name}"));
    rule
}

fn world(rules: Vec<CopyRule>, grants: GrantPolicy) -> World {
    let mut world = World::new(Policy {
        trust: TrustPolicy::default(),
        grants,
        ..Default::default()
    });
    world.insert_namespaces([
        ns("team-a", Some("a")),
        ns("team-b", Some("b")),
        ns("other", None),
    ]);
    world.set_copy_rules(rules);
    world
}

fn created(actions: &[Action]) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Create { copy, .. } => Some((
                copy.key.to_string(),
                serde_json::to_value(&*copy.template.payload).unwrap(),
            )),
            _ => None,
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn a_template_makes_its_copies_in_every_selected_namespace_marked_as_the_rules() {
    let np = network_policy();
    let spec = json!({"spec": {"podSelector": {}, "policyTypes": ["Ingress"]}});
    let w = world(
        vec![template_rule(
            "deny",
            np,
            json!({"metadata": {"labels": {"purpose": "deny"}}, "spec": spec["spec"]}),
        )],
        GrantPolicy::default(),
    );
    let actions = plan(&w, &Scope::All, &BTreeMap::new(), &Contents::default());
    let made = created(&actions);
    assert_eq!(
        made.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        [
            "NetworkPolicy team-a/bootstrap",
            "NetworkPolicy team-b/bootstrap"
        ],
        "the namespaces selected, no source needed: {actions:?}"
    );
    assert_eq!(made[0].1, spec);
    let Action::Create { copy, .. } = &actions[0] else {
        unreachable!()
    };
    let obj = copy.object();
    let annotations = obj.metadata.annotations.unwrap();
    assert_eq!(
        annotations[crate::marks::SOURCE_ANNOTATION],
        "copyrule/deny"
    );
    assert_eq!(
        annotations[crate::marks::SOURCE_KIND_ANNOTATION],
        crate::marks::BUNDLE_SOURCE_KIND
    );
    let labels = obj.metadata.labels.unwrap();
    assert_eq!(labels["purpose"], "deny");
    assert_eq!(labels[crate::marks::SOURCE_UID_LABEL], "uid-deny");
    assert_eq!(
        labels[crate::marks::READ_ONLY],
        "true",
        "a policy: read-only"
    );
}

#[test]
fn a_template_copy_in_sync_is_left_one_edited_is_restored_one_unwanted_goes() {
    let np = network_policy();
    let w = world(
        vec![template_rule(
            "deny",
            np,
            json!({"spec": {"podSelector": {}}}),
        )],
        GrantPolicy::default(),
    );
    let first = plan(&w, &Scope::All, &BTreeMap::new(), &Contents::default());
    let Action::Create { copy, .. } = &first[0] else {
        panic!("{first:?}")
    };
    let meta = copy.object().metadata;
    let managed = |rv: &str, hash: Option<&str>| {
        let mut annotations = meta.annotations.clone().unwrap();
        if let Some(h) = hash {
            annotations.insert(crate::marks::CONTENT_HASH_ANNOTATION.into(), h.into());
        }
        Existing::Managed(
            ManagedCopy::from_marks(
                np,
                meta.labels.as_ref().unwrap(),
                &annotations,
                rv.into(),
                false,
            )
            .unwrap(),
        )
    };
    let summary = |existing: BTreeMap<ObjectKey, Existing>| -> Vec<String> {
        let mut out: Vec<String> = plan(&w, &Scope::All, &existing, &Contents::default())
            .iter()
            .map(|a| match a {
                Action::InSync { target, .. } => format!("in-sync {}", target.namespace),
                Action::Update { copy, .. } => format!("update {}", copy.key.namespace),
                Action::Create { copy, .. } => format!("create {}", copy.key.namespace),
                Action::Delete { target, .. } => format!("delete {}", target.namespace),
                other => format!("{other:?}"),
            })
            .collect();
        out.sort();
        out
    };
    let key = |ns: &str| ObjectKey::new(np, ns, "bootstrap");
    assert_eq!(
        summary(BTreeMap::from([
            (key("team-a"), managed("5", None)),
            (key("team-b"), managed("6", Some("sha256:edited"))),
            (key("other"), managed("7", None)),
        ])),
        ["delete other", "in-sync team-a", "update team-b"]
    );
}

#[test]
fn the_namespace_name_goes_where_the_template_asks_and_grants_are_judged_per_copy() {
    let rb = role_binding();
    let template = |role: &str| {
        json!({
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "$(namespace)-admins"}]
        })
    };
    let grants = GrantPolicy {
        bind_cluster_roles: ["admin".to_string()].into(),
        ..Default::default()
    };
    let mut readers = template_rule("readers", rb, template("secret-reader"));
    readers.spec.target_name = Some("readers".into());
    let w = world(
        vec![template_rule("admins", rb, template("admin")), readers],
        grants,
    );
    let actions = plan(&w, &Scope::All, &BTreeMap::new(), &Contents::default());
    let made = created(&actions);
    assert_eq!(
        made.len(),
        2,
        "admin is listed, secret-reader is not: {actions:?}"
    );
    assert_eq!(made[0].1["subjects"][0]["name"], "team-a-admins");
    assert_eq!(made[1].1["subjects"][0]["name"], "team-b-admins");
    let refused = actions
        .iter()
        .filter(|a| {
            matches!(
                a,
                Action::Conflict {
                    reason: ConflictReason::Grant(_),
                    ..
                }
            )
        })
        .count();
    assert_eq!(
        refused, 2,
        "the secret-reader binding refused in both namespaces"
    );
}

#[test]
fn a_template_is_judged_like_any_object() {
    let widget = kind("example.com", "Gadget", "gadgets");
    let w = world(
        vec![template_rule(
            "runner",
            widget,
            json!({"spec": {"template": {"spec": {"containers": [{"image": "busybox"}]}}}}),
        )],
        GrantPolicy::default(),
    );
    let actions = plan(&w, &Scope::All, &BTreeMap::new(), &Contents::default());
    assert!(
        actions.iter().all(|a| matches!(
            a,
            Action::Conflict {
                reason: ConflictReason::NeverCopied(_),
                ..
            }
        )) && actions.len() == 2,
        "{actions:?}"
    );
}

#[test]
fn what_a_template_may_not_be() {
    let np = network_policy();
    let invalid = |rule: CopyRule| Rule::from_copy_rule(&rule).unwrap_err().field;
    let mut secret = template_rule("s", Kind::Secret, json!({"data": {"a": "YQ=="}}));
    secret.spec.api_version = None;
    assert_eq!(invalid(secret), "spec.template");
    let mut no_name = template_rule("n", np, json!({"spec": {}}));
    no_name.spec.target_name = None;
    assert_eq!(invalid(no_name), "spec.targetName");
    let mut with_source = template_rule("w", np, json!({"spec": {}}));
    with_source.spec.source_namespace = "platform".into();
    assert_eq!(invalid(with_source), "spec.sourceNamespace");
    assert_eq!(
        invalid(template_rule("k", np, json!({"kind": "Pod", "spec": {}}))),
        "spec.template.kind"
    );
    assert_eq!(
        invalid(template_rule(
            "m",
            np,
            json!({"metadata": {"name": "x"}, "spec": {}})
        )),
        "spec.template.metadata.name"
    );
    assert_eq!(
        invalid(template_rule(
            "o",
            np,
            json!({"metadata": {"labels": {"app.kubernetes.io/managed-by": "copyrator"}}, "spec": {}})
        )),
        "spec.template.metadata.labels"
    );
    assert_eq!(invalid(template_rule("e", np, json!({}))), "spec.template");
    assert!(Rule::from_copy_rule(&template_rule("ok", np, json!({"spec": {}}))).is_ok());
}

/// Create-once (SPEC §3.4), here of a template: made where missing, once, without
/// copyrator's ownership marks; what is there, or was made there and deleted since, is its
/// namespace's; it is never read-only.
#[test]
fn a_create_once_copy_is_made_once_and_then_belongs_to_its_namespace() {
    let np = network_policy();
    let mut rule = template_rule("quota-ish", np, json!({"spec": {"podSelector": {}}}));
    rule.spec.create_once = true;
    rule.status = Some(crate::copyrule::CopyRuleStatus {
        created_in: vec!["team-b".into()],
        ..Default::default()
    });
    let w = world(vec![rule], GrantPolicy::default());
    let key = |ns: &str| ObjectKey::new(np, ns, "bootstrap");
    let summary = |existing: BTreeMap<ObjectKey, Existing>| -> Vec<String> {
        let mut out: Vec<String> = plan(&w, &Scope::All, &existing, &Contents::default())
            .iter()
            .map(|a| match a {
                Action::InSync { target, .. } => format!("leave {}", target.namespace),
                Action::Conflict {
                    target,
                    reason: ConflictReason::Unmanaged,
                    ..
                } => format!("report {}", target.namespace),
                Action::Create { copy, .. } => {
                    let obj = copy.object();
                    let labels = obj.metadata.labels.unwrap_or_default();
                    let annotations = obj.metadata.annotations.unwrap_or_default();
                    assert!(
                        !labels.contains_key(crate::marks::MANAGED_BY_LABEL)
                            && !labels.contains_key(crate::marks::READ_ONLY),
                        "no ownership marks: {labels:?}"
                    );
                    assert_eq!(
                        annotations[crate::marks::CREATED_BY_ANNOTATION],
                        "copyrule/quota-ish"
                    );
                    format!("create {}", copy.key.namespace)
                }
                other => format!("{other:?}"),
            })
            .collect();
        out.sort();
        out
    };
    // team-a: missing, never made: made. team-b: made once and deleted since: left deleted.
    assert_eq!(summary(BTreeMap::new()), ["create team-a", "leave team-b"]);
    let unmanaged = || Existing::Unmanaged {
        resource_version: "9".into(),
    };
    // Made there, then edited or replaced by its namespace (an unmanaged object): left as it
    // is.
    assert_eq!(
        summary(BTreeMap::from([(key("team-b"), unmanaged())])),
        ["create team-a", "leave team-b"]
    );
    // Never made there, and someone else's object holds the name: reported, never written.
    assert_eq!(
        summary(BTreeMap::from([(key("team-a"), unmanaged())])),
        ["leave team-b", "report team-a"]
    );
    let parsed = Rule::from_copy_rule(&w.copy_rules()[0]).unwrap();
    assert!(
        parsed.create_once && !parsed.read_only,
        "its namespace's to edit"
    );
}
