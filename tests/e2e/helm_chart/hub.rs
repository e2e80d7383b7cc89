//! The chart's values for copies across clusters (SPEC §14), rendered with the real Helm: a
//! member gets `--hub-sync-interval` and the HubLink rights, a hub `--hub-members-namespace`
//! and the rights to keep members' Roles; neither is in a release that asked for neither, and
//! `scope: namespaces` takes neither flag. Included by tests/e2e/helm_chart.rs.

use serde_json::Value;

use crate::helm_chart::support::{find, render};

/// The container's args.
fn container_args(docs: &[Value]) -> Vec<String> {
    serde_json::from_value(
        find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"].clone(),
    )
    .expect("the container's args")
}

/// The rules of the ClusterRole named `demo-copyrator`, as (resources, verbs) strings.
fn cluster_rules(docs: &[Value]) -> Vec<String> {
    docs.iter()
        .filter(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == "demo-copyrator")
        .flat_map(|d| d["rules"].as_array().cloned().unwrap_or_default())
        .map(|r| format!("{} {}", r["resources"], r["verbs"]))
        .collect()
}

#[test]
fn hub_values_render_the_flags_and_rights_of_a_member_and_a_hub() {
    let plain = render("demo", "platform", &[]);
    let args = container_args(&plain);
    assert!(!args.iter().any(|a| a.starts_with("--hub-")), "{args:?}");
    let rules = cluster_rules(&plain).join("\n");
    assert!(
        !rules.contains("hublinks") && !rules.contains("rolebindings"),
        "{rules}"
    );

    let both = render(
        "demo",
        "platform",
        &[
            "--set",
            "hub.member.enabled=true",
            "--set",
            "hub.member.syncInterval=30s",
            "--set",
            "hub.membersNamespace=copyrator-members",
        ],
    );
    let args = container_args(&both);
    for flag in [
        "--hub-sync-interval=30s",
        "--hub-members-namespace=copyrator-members",
    ] {
        assert!(args.iter().any(|a| a == flag), "{flag} in {args:?}");
    }
    let rules = cluster_rules(&both).join("\n");
    for rule in [
        r#"["hublinks"] ["list"]"#,
        r#"["hublinks/status"] ["patch"]"#,
        r#"["clusterrolebindings","roles","rolebindings"] ["get","list","create","patch","delete"]"#,
    ] {
        assert!(rules.contains(rule), "{rule} in\n{rules}");
    }
    // The members' ClusterProfiles, read in the members' namespace only.
    let profiles = |docs: &[Value]| -> Vec<String> {
        docs.iter()
            .filter(|d| {
                d["kind"] == "Role" && d["metadata"]["name"] == "demo-copyrator-cluster-profiles"
            })
            .map(|d| format!("{} {}", d["metadata"]["namespace"], d["rules"]))
            .collect()
    };
    assert_eq!(
        profiles(&both),
        [
            r#""copyrator-members" [{"apiGroups":["multicluster.x-k8s.io"],"resources":["clusterprofiles"],"verbs":["get","list","watch"]}]"#
        ],
    );
    assert!(
        both.iter().any(|d| d["kind"] == "RoleBinding"
            && d["metadata"]["name"] == "demo-copyrator-cluster-profiles"
            && d["metadata"]["namespace"] == "copyrator-members"
            && d["roleRef"]["name"] == "demo-copyrator-cluster-profiles"),
        "the Role is bound in the members' namespace"
    );
    assert!(
        profiles(&plain).is_empty(),
        "no hub, no ClusterProfiles read"
    );

    // A namespace-scoped install reads nothing cluster-scoped: no hub flag (serve refuses them).
    let scoped = render(
        "demo",
        "platform",
        &[
            "--set",
            "scope=namespaces",
            "--set-json",
            r#"namespaces=["team-a"]"#,
            "--set",
            "hub.member.enabled=true",
            "--set",
            "hub.membersNamespace=copyrator-members",
        ],
    );
    let args = container_args(&scoped);
    assert!(!args.iter().any(|a| a.starts_with("--hub-")), "{args:?}");
}

#[test]
fn a_member_gets_the_stale_sync_alert_and_nothing_else_does() {
    let alerts = |extra: &[&str]| -> Vec<String> {
        let mut values = vec!["--set", "monitoring.prometheusRule.enabled=true"];
        values.extend(extra);
        render("demo", "platform", &values)
            .iter()
            .filter(|d| d["kind"] == "PrometheusRule")
            .flat_map(|d| {
                d["spec"]["groups"][0]["rules"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|r| r["alert"].as_str().map(String::from))
            .collect()
    };
    assert!(!alerts(&[]).iter().any(|a| a == "CopyratorHubSyncStale"));
    assert!(
        alerts(&["--set", "hub.member.enabled=true"])
            .iter()
            .any(|a| a == "CopyratorHubSyncStale")
    );
}
