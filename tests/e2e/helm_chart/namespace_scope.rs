//! `scope: namespaces` rendered with the real Helm (SPEC §13): no cluster-scoped object at all
//! (hooks included), no right on Secrets outside the namespaces listed but the chart's own
//! certificate Secret, `--namespaces` passed on, no webhook configuration named, and NOTES
//! printing the Role and RoleBinding a namespace's owner applies. Included by
//! tests/e2e/helm_chart.rs.

use serde_json::Value;

use crate::helm_chart::support::{
    chart_dir, container_arg, find, helm_ok, parse_yaml_stream, render_all,
};

const LISTED: &str = r#"namespaces=["team-a","team-b"]"#;

fn rendered() -> Vec<Value> {
    render_all(
        "demo",
        "platform",
        &[
            "--set",
            "scope=namespaces",
            "--set-json",
            LISTED,
            // A kind of another API group, as an operator would enable it.
            "--set-json",
            r#"copyKinds=[{"kind": "NetworkPolicy", "group": "networking.k8s.io", "resource": "networkpolicies"}]"#,
        ],
    )
}

#[test]
fn a_namespace_scoped_release_holds_no_cluster_scoped_object() {
    let docs = rendered();
    for doc in &docs {
        assert!(
            doc["metadata"]["namespace"].is_string(),
            "a cluster-scoped (or unnamespaced) {} {} in scope: namespaces",
            doc["kind"],
            doc["metadata"]["name"]
        );
    }
    // Every right on Secrets is in a listed namespace, but for the chart's certificate Secret.
    let mut bound_in = Vec::new();
    for role in docs.iter().filter(|d| d["kind"] == "Role") {
        let ns = role["metadata"]["namespace"].as_str().unwrap_or_default();
        for rule in role["rules"].as_array().into_iter().flatten() {
            let resources: Vec<&str> = rule["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if !resources.contains(&"secrets") {
                continue;
            }
            if ns == "team-a" || ns == "team-b" {
                bound_in.push(ns.to_string());
                continue;
            }
            assert_eq!(
                rule["resourceNames"],
                serde_json::json!(["demo-copyrator-webhook-certs"]),
                "a Secret rule in {ns}: {rule}"
            );
        }
    }
    bound_in.sort();
    bound_in.dedup();
    assert_eq!(bound_in, ["team-a", "team-b"]);
    for ns in ["team-a", "team-b"] {
        let binding = docs
            .iter()
            .find(|d| d["kind"] == "RoleBinding" && d["metadata"]["namespace"] == ns)
            .unwrap_or_else(|| panic!("no RoleBinding in {ns}"));
        assert_eq!(binding["subjects"][0]["name"], "demo-copyrator");
        assert_eq!(binding["subjects"][0]["namespace"], "platform");
    }
    let release: Vec<Value> = docs
        .iter()
        .filter(|d| d["metadata"]["annotations"]["helm.sh/hook"].is_null())
        .cloned()
        .collect();
    assert_eq!(
        container_arg(&release, "--namespaces"),
        "--namespaces=team-a,team-b"
    );
    let args = find(&release, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        .to_string();
    assert!(
        !args.contains("--webhook-configuration"),
        "no webhook configuration to publish a CA into: {args}"
    );
}

#[test]
fn notes_print_the_role_and_binding_a_namespace_owner_applies() {
    let chart = chart_dir().display().to_string();
    let notes = helm_ok(&[
        "template",
        &chart,
        "--release",
        "demo",
        "--namespace",
        "platform",
        "--notes",
        "--set",
        "scope=namespaces",
        "--set-json",
        LISTED,
    ]);
    let manifest: String = notes
        .split("<<'EOF'\n")
        .nth(1)
        .and_then(|rest| rest.split("\n  EOF").next())
        .expect("a manifest to apply in NOTES")
        .to_string();
    let docs = parse_yaml_stream(&dedent(&manifest));
    assert_eq!(docs.len(), 2, "{manifest}");
    assert_eq!(docs[0]["kind"], "Role");
    assert_eq!(docs[1]["kind"], "RoleBinding");
    assert_eq!(docs[1]["subjects"][0]["name"], "demo-copyrator");
    assert_eq!(docs[1]["roleRef"]["name"], docs[0]["metadata"]["name"]);
}

/// The NOTES indent the manifest by two spaces.
fn dedent(text: &str) -> String {
    text.lines()
        .map(|l| l.strip_prefix("  ").unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A namespace-scoped install's rules (inline, NamespacedCopyRules) never copy RBAC objects
/// (SPEC §9.11): the chart refuses RBAC kinds rather than ask each namespace to consent to
/// rights on Roles and RoleBindings, and its NOTES say the release namespace is for
/// administrators.
#[test]
fn a_namespace_scoped_install_refuses_rbac_kinds_and_says_who_acts_as_it() {
    crate::helm_chart::support::render_fails(
        &[
            "--set",
            "scope=namespaces",
            "--set-json",
            LISTED,
            "--set-json",
            r#"copyKinds=[{"kind": "RoleBinding", "group": "rbac.authorization.k8s.io", "resource": "rolebindings"}]"#,
        ],
        "never copy Roles or RoleBindings",
    );
    let chart = chart_dir().display().to_string();
    let notes = helm_ok(&[
        "template",
        &chart,
        "--release",
        "demo",
        "--namespace",
        "platform",
        "--notes",
        "--set",
        "scope=namespaces",
        "--set-json",
        LISTED,
    ]);
    assert!(
        notes.contains("act as copyrator there") && notes.contains("administrators only"),
        "{notes}"
    );
}
