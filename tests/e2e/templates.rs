//! Templates (SPEC §3.3) on the real API server: a CopyRule holding a default-deny
//! NetworkPolicy and a RoleBinding to the namespace's own admins group makes them in every
//! labelled namespace, restores them when edited or deleted, removes them when the namespace
//! opts out, and explain shows the CopyRule as their source.

use std::time::Duration;

use crate::common::*;
use copyrator::copyrule::{CopyRule, CopyRuleSpec};
use k8s_openapi::api::{networking::v1::NetworkPolicy, rbac::v1::RoleBinding};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn template_rule(
    kind: &str,
    api_version: &str,
    name: &str,
    key: &str,
    template: serde_json::Value,
) -> CopyRuleSpec {
    serde_json::from_value(json!({
        "apiVersion": api_version,
        "kind": kind,
        "targetName": name,
        "namespaceSelector": {"matchLabels": {key: "on"}},
        "template": template,
    }))
    .unwrap()
}

#[tokio::test]
async fn a_template_bootstraps_every_labelled_namespace_and_keeps_it_so() {
    for (group, kind, plural) in [
        ("networking.k8s.io", "NetworkPolicy", "networkpolicies"),
        ("rbac.authorization.k8s.io", "RoleBinding", "rolebindings"),
    ] {
        copyrator::model::Kind::register(group, "v1", kind, plural).unwrap();
    }
    let t = Harness::start(Options {
        extra: vec![
            "--copy-kinds=NetworkPolicy.networking.k8s.io,RoleBinding.rbac.authorization.k8s.io"
                .into(),
            "--bind-cluster-roles=admin".into(),
        ],
        resync_interval: "2s",
        ..Default::default()
    })
    .await;
    let key = t.name("tpl");
    let deny = t
        .copy_rule(
            "tpl-deny",
            template_rule(
                "NetworkPolicy",
                "networking.k8s.io/v1",
                "default-deny",
                &key,
                json!({"metadata": {"labels": {"purpose": "isolation"}},
                       "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}}),
            ),
        )
        .await;
    t.copy_rule(
        "tpl-admins",
        template_rule(
            "RoleBinding",
            "rbac.authorization.k8s.io/v1",
            "team-admins",
            &key,
            json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "$(namespace)-admins"}]}),
        ),
    )
    .await;
    // A Secret template never gets past admission.
    let denied = t
        .rules()
        .create(
            &PostParams::default(),
            &CopyRule::new(
                &t.name("tpl-secret"),
                template_rule("Secret", "v1", "cred", &key, json!({"data": {"a": "YQ=="}})),
            ),
        )
        .await;
    assert!(
        matches!(&denied, Err(kube::Error::Api(s)) if s.message.contains("spec.template")),
        "{denied:?}"
    );

    let a = t.namespace("tpl-a", &[(&key, "on")]).await;
    let b = t.namespace("tpl-b", &[(&key, "on")]).await;
    for ns in [&a, &b] {
        let np = t
            .wait_for::<NetworkPolicy>(ns, "default-deny", "the template's policy", |_| true)
            .await;
        let labels = np.metadata.labels.unwrap();
        assert_eq!(labels["purpose"], "isolation");
        assert_eq!(labels["copyrator.io/read-only"], "true");
        assert_eq!(
            np.metadata.annotations.unwrap()["copyrator.io/source"],
            format!("copyrule/{deny}")
        );
        let group = format!("{ns}-admins");
        t.wait_for::<RoleBinding>(ns, "team-admins", "the namespace's own admins", |rb| {
            rb.subjects.as_ref().is_some_and(|s| s[0].name == group)
        })
        .await;
    }

    // Edited (as copyrator's own identity may: the read-only webhook lets the test's admin
    // through) or deleted: restored.
    let policies = t.api::<NetworkPolicy>(&a);
    policies
        .patch(
            "default-deny",
            &PatchParams {
                field_manager: Some("intruder".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"spec": {"policyTypes": ["Ingress"]}})),
        )
        .await
        .unwrap();
    t.wait_for::<NetworkPolicy>(&a, "default-deny", "restored after an edit", |np| {
        np.spec.as_ref().and_then(|s| s.policy_types.clone())
            == Some(vec!["Ingress".into(), "Egress".into()])
    })
    .await;
    t.api::<RoleBinding>(&b)
        .delete("team-admins", &DeleteParams::default())
        .await
        .unwrap();
    t.wait_for::<RoleBinding>(&b, "team-admins", "restored after a delete", |_| true)
        .await;

    // explain names the CopyRule as the copies' source.
    let out = run_copyrator(&["explain", "namespace", &a, "-o", "json"]).await;
    assert!(out.success, "{}", out.stderr);
    let findings = out.json()["findings"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        findings
            .iter()
            .any(|f| f["target"]["name"] == "default-deny"
                && f["source"] == json!({"kind": "CopyRule", "namespace": "", "name": deny})
                && f["copy"] == "InSync"),
        "{}",
        out.stdout
    );

    // The namespace opts out: its copies go.
    t.label_namespace(&a, json!({ &key: null })).await;
    t.wait_gone::<NetworkPolicy>(&a, "default-deny").await;
    t.wait_gone::<RoleBinding>(&a, "team-admins").await;
    stays(Duration::from_secs(1), "b keeps its copies", || async {
        t.api::<NetworkPolicy>(&b)
            .get_opt("default-deny")
            .await
            .unwrap()
            .is_some()
    })
    .await;
    t.finish().await;
}

/// Create-once (SPEC §3.4): a copy made where missing, once, then its namespace's: an edit
/// stays, a deletion is not undone, the rule's status records where it made copies, and a
/// namespace that opts in later still gets one.
#[tokio::test]
async fn a_create_once_copy_belongs_to_its_namespace_once_made() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let t = Harness::start(Options {
        resync_interval: "1s",
        ..Default::default()
    })
    .await;
    let key = t.name("once");
    let mut spec = template_rule(
        "ConfigMap",
        "v1",
        "team-defaults",
        &key,
        json!({"data": {"owner": "$(namespace)", "tier": "standard"}}),
    );
    spec.create_once = true;
    let rule = t.copy_rule("once", spec).await;
    let a = t.namespace("once-a", &[(&key, "on")]).await;
    let b = t.namespace("once-b", &[(&key, "on")]).await;
    for ns in [&a, &b] {
        let cm = t
            .wait_value::<ConfigMap>(ns, "team-defaults", "owner", ns)
            .await;
        let labels = cm.metadata.labels.unwrap_or_default();
        assert!(
            !labels.contains_key("app.kubernetes.io/managed-by"),
            "its namespace's, not copyrator's: {labels:?}"
        );
        assert_eq!(
            cm.metadata.annotations.unwrap()["copyrator.io/created-by"],
            format!("copyrule/{rule}")
        );
    }
    t.wait_for::<CopyRule>("", &rule, "the record of both", |r| {
        r.status
            .as_ref()
            .is_some_and(|s| s.created_in.contains(&a) && s.created_in.contains(&b))
    })
    .await;
    // a edits its copy, b deletes its own: after several resyncs, both stay so.
    t.api::<ConfigMap>(&a)
        .patch(
            "team-defaults",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"tier": "gold"}})),
        )
        .await
        .unwrap();
    t.api::<ConfigMap>(&b)
        .delete("team-defaults", &DeleteParams::default())
        .await
        .unwrap();
    t.wait_resyncs(3).await;
    t.wait_value::<ConfigMap>(&a, "team-defaults", "tier", "gold")
        .await;
    assert!(
        t.api::<ConfigMap>(&b)
            .get_opt("team-defaults")
            .await
            .unwrap()
            .is_none(),
        "a create-once copy its namespace deleted is not made again"
    );
    // A namespace opting in later gets one, once.
    let c = t.namespace("once-c", &[(&key, "on")]).await;
    t.wait_value::<ConfigMap>(&c, "team-defaults", "owner", &c)
        .await;
    // The namespace opts out: the copy stays, it is the namespace's.
    t.label_namespace(&a, json!({ &key: null })).await;
    t.wait_resyncs(2).await;
    t.wait_value::<ConfigMap>(&a, "team-defaults", "tier", "gold")
        .await;
    t.finish().await;
}

/// Create-once (SPEC §3.4): where an object copyrator did not make holds the copy's name, the
/// rule reports it (status conflict) and never writes it, while other namespaces get their
/// copy.
#[tokio::test]
async fn a_create_once_rule_reports_an_object_it_did_not_make_and_leaves_it() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let t = Harness::start(Options {
        resync_interval: "1s",
        ..Default::default()
    })
    .await;
    let key = t.name("once-held");
    let held = t.namespace("once-held", &[(&key, "on")]).await;
    t.config_maps(&held)
        .create(
            &PostParams::default(),
            &config_map("team-defaults", &[], &[], &[("owner", "the team")]),
        )
        .await
        .unwrap();
    let free = t.namespace("once-free", &[(&key, "on")]).await;
    let mut spec = template_rule(
        "ConfigMap",
        "v1",
        "team-defaults",
        &key,
        json!({"data": {"owner": "$(namespace)"}}),
    );
    spec.create_once = true;
    let rule = t.copy_rule("once-held", spec).await;
    t.wait_value::<ConfigMap>(&free, "team-defaults", "owner", &free)
        .await;
    let status = t
        .wait_for::<CopyRule>("", &rule, "the held name reported", |r| {
            r.status
                .as_ref()
                .is_some_and(|s| s.conflicts.iter().any(|c| c.namespace == held))
        })
        .await
        .status
        .unwrap();
    assert!(!status.created_in.contains(&held), "{status:?}");
    assert_eq!(status.conflicting_copies, 1, "{status:?}");
    t.wait_resyncs(1).await;
    let theirs = t.config_maps(&held).get("team-defaults").await.unwrap();
    assert_eq!(theirs.data.unwrap()["owner"], "the team", "never written");
    assert!(
        !theirs
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("copyrator.io/created-by")
    );
    t.finish().await;
}
