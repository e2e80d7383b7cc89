//! `copyKinds` and the RBAC objects' own guards (`rbac.bindClusterRoles`, `rbac.bindRoles`,
//! `rbac.escalateRoles`), rendered offline: the ClusterRole grants the kinds enabled exactly the
//! verbs a copy needs and nothing else, `--copy-kinds` names them, and the webhooks cover them as
//! copyrator's own manifests do. Included by tests/e2e/helm_chart.rs.

use serde_json::{Value, json};

use super::{
    Rule, RuleSet, assert_least_privilege, assert_serve_accepts, expected_cluster_rules, rule,
    rule_set, rules_of,
};
use crate::helm_chart::support::{
    binary_webhooks_with, container_arg, find, find_named, render, render_fails,
};

const NETWORK_POLICY: &str =
    r#"{"kind": "NetworkPolicy", "group": "networking.k8s.io", "resource": "networkpolicies"}"#;
const ROLE_BINDING: &str =
    r#"{"kind": "RoleBinding", "group": "rbac.authorization.k8s.io", "resource": "rolebindings"}"#;
const ROLE: &str = r#"{"kind": "Role", "group": "rbac.authorization.k8s.io", "resource": "roles"}"#;
const LIMIT_RANGE: &str = r#"{"kind": "LimitRange", "group": "", "resource": "limitranges"}"#;

/// What a copy needs on its kind (src/cluster/kinds.rs, and patch for the opt-in label).
const COPY_VERBS: [&str; 7] = [
    "get", "list", "watch", "create", "update", "patch", "delete",
];

/// `--set-json copyKinds=[kinds...]`, plus `extra`.
fn with_kinds(kinds: &[&str], extra: &[&str]) -> Vec<Value> {
    let list = format!("copyKinds=[{}]", kinds.join(","));
    let mut values = vec!["--set-json", &list];
    values.extend_from_slice(extra);
    render("demo", "platform-system", &values)
}

fn cluster_rules(docs: &[Value]) -> RuleSet {
    rule_set(&rules_of(find_named(docs, "ClusterRole", "demo-copyrator")))
}

/// The seven per-verb rules of one API group's copied resources.
fn copy_rules(group: &str, resources: &[&str]) -> RuleSet {
    COPY_VERBS
        .iter()
        .map(|v| rule(&[group], resources, &[], &[v]))
        .collect()
}

/// The rules a copyrator without other kinds has on Secrets and ConfigMaps.
fn secret_and_configmap_rules() -> RuleSet {
    copy_rules("", &["secrets", "configmaps"])
}

fn copy_kinds_flag(docs: &[Value]) -> String {
    let args: Vec<String> = serde_json::from_value(
        find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"].clone(),
    )
    .unwrap();
    assert_serve_accepts(&args);
    container_arg(docs, "--copy-kinds")
}

fn names_anything_of_rbac(rule: &Rule) -> bool {
    let (groups, resources, _, verbs) = rule;
    groups.iter().any(|g| g == "rbac.authorization.k8s.io")
        || resources
            .iter()
            .any(|r| r.contains("role") || r.contains("binding"))
        || verbs.iter().any(|v| v == "bind" || v == "escalate")
}

#[test]
fn a_copy_kind_gets_the_verbs_a_copy_needs_and_nothing_of_rbac() {
    let docs = with_kinds(&[NETWORK_POLICY], &[]);
    assert_eq!(
        copy_kinds_flag(&docs),
        "--copy-kinds=Secret,ConfigMap,NetworkPolicy.networking.k8s.io"
    );
    let rules = cluster_rules(&docs);
    let mut expected = expected_cluster_rules("demo-copyrator");
    expected.extend(copy_rules("networking.k8s.io", &["networkpolicies"]));
    assert_eq!(rules, expected);
    assert_least_privilege(&rules);
    let rbac: Vec<&Rule> = rules.iter().filter(|r| names_anything_of_rbac(r)).collect();
    assert!(rbac.is_empty(), "{rbac:?}");

    // A core kind joins Secrets and ConfigMaps in their rules.
    let docs = with_kinds(&[LIMIT_RANGE, NETWORK_POLICY], &[]);
    assert_eq!(
        copy_kinds_flag(&docs),
        "--copy-kinds=Secret,ConfigMap,LimitRange,NetworkPolicy.networking.k8s.io"
    );
    let rules = cluster_rules(&docs);
    let mut expected: RuleSet = expected_cluster_rules("demo-copyrator")
        .difference(&secret_and_configmap_rules())
        .cloned()
        .collect();
    expected.extend(copy_rules("", &["secrets", "configmaps", "limitranges"]));
    expected.extend(copy_rules("networking.k8s.io", &["networkpolicies"]));
    assert_eq!(rules, expected);
}

/// Defaults, and the new values left empty, render the ClusterRole of copyrator without other
/// kinds: Secret and ConfigMap only, no rule of the RBAC group.
#[test]
fn without_copy_kinds_the_cluster_role_is_secrets_and_configmaps_only() {
    let defaults = render("demo", "platform-system", &[]);
    assert_eq!(copy_kinds_flag(&defaults), "--copy-kinds=Secret,ConfigMap");
    let rules = cluster_rules(&defaults);
    assert_eq!(rules, expected_cluster_rules("demo-copyrator"));
    assert!(!rules.iter().any(names_anything_of_rbac), "{rules:?}");
    let empty = render(
        "demo",
        "platform-system",
        &[
            "--set-json",
            "copyKinds=[]",
            "--set-json",
            "rbac.bindClusterRoles=[]",
            "--set-json",
            "rbac.bindRoles=[]",
            "--set-json",
            "rbac.escalateRoles=[]",
        ],
    );
    assert_eq!(empty, defaults);
}

/// Creating a RoleBinding needs `bind` on the role it references (copyrator holds few of the
/// permissions a role grants): only on the roles named, never on all.
#[test]
fn copied_rolebindings_may_bind_only_the_roles_named() {
    let docs = with_kinds(
        &[ROLE_BINDING],
        &["--set-json", r#"rbac.bindClusterRoles=["view"]"#],
    );
    assert_eq!(
        copy_kinds_flag(&docs),
        "--copy-kinds=Secret,ConfigMap,RoleBinding.rbac.authorization.k8s.io"
    );
    let rules = cluster_rules(&docs);
    let binds: Vec<&Rule> = rules
        .iter()
        .filter(|r| r.3.contains(&"bind".into()))
        .collect();
    assert_eq!(
        binds,
        [&rule(
            &["rbac.authorization.k8s.io"],
            &["clusterroles"],
            &["view"],
            &["bind"]
        )]
    );
    // Whether a CopyRule's author may grant what it copies (SPEC §9.10): only with a list set.
    let reviews = rule(
        &["authorization.k8s.io"],
        &["subjectaccessreviews"],
        &[],
        &["create"],
    );
    let mut expected = expected_cluster_rules("demo-copyrator");
    expected.extend(copy_rules("rbac.authorization.k8s.io", &["rolebindings"]));
    expected.insert(binds[0].clone());
    expected.insert(reviews.clone());
    assert_eq!(rules, expected);
    assert_least_privilege(&rules);

    // Roles by name, and escalate for copied Roles, likewise.
    let docs = with_kinds(
        &[ROLE_BINDING, ROLE],
        &[
            "--set-json",
            r#"rbac.bindRoles=["team-reader", "team-writer"]"#,
            "--set-json",
            r#"rbac.escalateRoles=["team-reader"]"#,
        ],
    );
    let rules = cluster_rules(&docs);
    let guarded: RuleSet = rules
        .iter()
        .filter(|r| r.3.iter().any(|v| v == "bind" || v == "escalate"))
        .cloned()
        .collect();
    assert_eq!(
        guarded,
        RuleSet::from([
            rule(
                &["rbac.authorization.k8s.io"],
                &["roles"],
                &["team-reader", "team-writer"],
                &["bind"]
            ),
            rule(
                &["rbac.authorization.k8s.io"],
                &["roles"],
                &["team-reader"],
                &["escalate"]
            ),
        ])
    );
    let mut expected = expected_cluster_rules("demo-copyrator");
    expected.extend(copy_rules(
        "rbac.authorization.k8s.io",
        &["rolebindings", "roles"],
    ));
    expected.extend(guarded);
    expected.insert(reviews);
    assert_eq!(rules, expected);

    // Roles copied, RoleBindings not: `list` on RoleBindings, to find a binding planted under
    // a Role's name before the Role is created there (SPEC §9.10).
    let rules = cluster_rules(&with_kinds(
        &[ROLE],
        &["--set-json", r#"rbac.escalateRoles=["team-reader"]"#],
    ));
    let mut expected = expected_cluster_rules("demo-copyrator");
    expected.extend(copy_rules("rbac.authorization.k8s.io", &["roles"]));
    expected.insert(rule(
        &["rbac.authorization.k8s.io"],
        &["roles"],
        &["team-reader"],
        &["escalate"],
    ));
    expected.insert(rule(
        &["rbac.authorization.k8s.io"],
        &["rolebindings"],
        &[],
        &["list"],
    ));
    expected.insert(rule(
        &["authorization.k8s.io"],
        &["subjectaccessreviews"],
        &[],
        &["create"],
    ));
    assert_eq!(rules, expected);
    assert_least_privilege(&rules);

    // RoleBindings without bindings to name: no bind at all (copies of bindings to roles
    // copyrator does not hold fail with 403).
    let rules = cluster_rules(&with_kinds(&[ROLE_BINDING], &[]));
    assert!(
        !rules.iter().any(|r| r.3.contains(&"bind".into())),
        "{rules:?}"
    );
}

#[test]
fn copy_kinds_and_role_names_are_checked() {
    for (values, complaint) in [
        (
            r#"copyKinds=[{"kind": "NetworkPolicy", "group": "networking.k8s.io"}]"#,
            "resource",
        ),
        (
            r#"copyKinds=[{"kind": "NetworkPolicy.networking.k8s.io", "group": "", "resource": "networkpolicies"}]"#,
            "/copyKinds/0/kind",
        ),
        (
            r#"copyKinds=[{"kind": "Widget", "group": "Example_Com", "resource": "widgets"}]"#,
            "/copyKinds/0/group",
        ),
        (r#"rbac.bindClusterRoles=["*"]"#, "/rbac/bindClusterRoles/0"),
        (
            r#"copyKinds=[{"kind": "Secret", "group": "", "resource": "secrets"}]"#,
            "Secret is always copied",
        ),
        (
            r#"rbac.bindClusterRoles=["view"]"#,
            "only used when copyKinds has RoleBinding",
        ),
        (
            r#"rbac.escalateRoles=["team-reader"]"#,
            "only used when copyKinds has Role",
        ),
    ] {
        render_fails(&["--set-json", values], complaint);
    }
}

/// The sources and read-only webhooks cover every kind copied, as `copyrator manifests
/// webhooks --copy-kinds` prints them (one rule per API group).
#[test]
fn webhooks_cover_copy_kinds_as_copyrator_renders_them() {
    let (expected, _) = binary_webhooks_with(
        "platform-system/demo-copyrator",
        "demo-copyrator",
        b"",
        3,
        "kube-system",
        &[
            "--copy-kinds",
            "NetworkPolicy.networking.k8s.io,LimitRange,RoleBinding.rbac.authorization.k8s.io",
        ],
    );
    let expected = &expected;
    let docs = with_kinds(&[NETWORK_POLICY, LIMIT_RANGE, ROLE_BINDING], &[]);
    let rendered = find(&docs, "ValidatingWebhookConfiguration");
    assert_eq!(rendered["webhooks"], expected["webhooks"]);
    let sources = &rendered["webhooks"][1];
    assert_eq!(sources["name"], "sources.copyrator.io");
    assert_eq!(
        sources["rules"],
        json!([
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE", "DELETE"],
             "resources": ["secrets", "configmaps", "limitranges"]},
            {"apiGroups": ["networking.k8s.io"], "apiVersions": ["*"],
             "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["networkpolicies"]},
            {"apiGroups": ["rbac.authorization.k8s.io"], "apiVersions": ["*"],
             "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["rolebindings"]},
        ])
    );
}
