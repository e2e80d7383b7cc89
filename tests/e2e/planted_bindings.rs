//! A RoleBinding planted before its Role exists (SPEC §9.10), on the real API server with
//! copyrator running as the chart's own ServiceAccount: a namespace admin binds a Role of
//! their own rights, deletes the Role and keeps the binding; the platform's Role copy of that
//! name is then refused there, and still made where nothing was planted.

use std::time::Duration;

use crate::common::*;
use crate::grants::{identity, policy_args, rule_spec};
use crate::helm_chart::support::{Release, render};
use k8s_openapi::api::{
    core::v1::ResourceQuota,
    rbac::v1::{Role, RoleBinding},
};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

/// The rights of the built-in `admin` ClusterRole that matter here (no controller manager
/// aggregates it on the test API server): Roles and RoleBindings, no `bind` or `escalate`;
/// ResourceQuotas read-only.
fn namespace_admin_rules() -> serde_json::Value {
    json!([
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["pods", "configmaps", "secrets"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["resourcequotas"], "verbs": ["get", "list", "watch"]}
    ])
}

fn role(name: &str, rules: serde_json::Value) -> Role {
    serde_json::from_value(json!({"metadata": {"name": name}, "rules": rules})).unwrap()
}

#[tokio::test]
async fn a_role_copy_never_arms_a_binding_planted_before_it() {
    let env = TestEnv::new().await;
    let release_ns = env.namespace("pb-release", &[]).await;
    let name = format!("pb{}", env.id);
    let fullname = format!("{name}-copyrator");
    let values = [
        "--set",
        "webhook.name=copyrator-e2e",
        "--set-json",
        r#"copyKinds=[{"kind": "Role", "group": "rbac.authorization.k8s.io", "resource": "roles"}]"#,
        "--set-json",
        r#"rbac.escalateRoles=["quota-editor"]"#,
    ];
    let mut release = Release::install(&name, &release_ns, &values);
    let dir = tempfile::tempdir().unwrap();
    let sa_kubeconfig = dir.path().join("kubeconfig");
    let token = service_account_token(&env.client, &release_ns, &fullname).await;
    write_token_kubeconfig(&kubeconfig(), &token, &sa_kubeconfig);

    let label = "pb-target";
    let platform = env.namespace("pb-platform", &[]).await;
    let clean = env.namespace("pb-clean", &[(label, &env.id)]).await;
    let victim = env.namespace("pb-victim", &[]).await;
    let create = PostParams::default();
    // The platform's Role: rights copyrator does not hold itself (it creates the copy as a
    // placeholder, then updates it, SPEC §9.10).
    let quota_rules = json!([{"apiGroups": [""], "resources": ["resourcequotas"],
                              "verbs": ["get", "list", "update", "patch"]}]);
    Api::<Role>::namespaced(env.client.clone(), &platform)
        .create(&create, &role("quota-editor", quota_rules.clone()))
        .await
        .unwrap();
    let quota: ResourceQuota = serde_json::from_value(
        json!({"metadata": {"name": "limits"}, "spec": {"hard": {"pods": "10"}}}),
    )
    .unwrap();
    Api::<ResourceQuota>::namespaced(env.client.clone(), &victim)
        .create(&create, &quota)
        .await
        .unwrap();

    // The namespace admin plants the binding: a Role of rights they hold, bound, deleted.
    let tenant = identity(&env, &victim, "tenant", namespace_admin_rules()).await;
    let tenant_roles = Api::<Role>::namespaced(tenant.clone(), &victim);
    tenant_roles
        .create(
            &create,
            &role(
                "quota-editor",
                json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]),
            ),
        )
        .await
        .unwrap();
    let planted: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "planted"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "quota-editor"},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": victim}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(tenant.clone(), &victim)
        .create(&create, &planted)
        .await
        .unwrap();
    tenant_roles
        .delete("quota-editor", &Default::default())
        .await
        .unwrap();

    copyrator::model::Kind::register("rbac.authorization.k8s.io", "v1", "Role", "roles").unwrap();
    let mut args = vec![
        "--kubeconfig".to_string(),
        sa_kubeconfig.display().to_string(),
        format!("--trusted-namespaces={platform}"),
        format!("--lease-namespace={release_ns}"),
        format!("--lease-name={fullname}"),
        "--resync-interval=1s".to_string(),
    ];
    args.extend(policy_args(&render(&name, &release_ns, &values)));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut p = Process::spawn(&args);
    p.wait_ready().await;
    env.register_webhooks(&p).await;
    // Asked for once the chart's webhooks are this process's (the placeholder's update passes
    // the read-only webhook).
    let rule = env
        .copy_rule(
            "pb-quota-editor",
            rule_spec("Role", &platform, "quota-editor", label, &env.id),
        )
        .await;

    // Where nothing was planted, the copy is made, with the platform's rules.
    let copy = env
        .wait_for::<Role>(&clean, "quota-editor", "the Role's copy", |r| {
            r.rules.as_ref().is_some_and(|rules| {
                rules
                    .iter()
                    .any(|r| r.resources == Some(vec!["resourcequotas".into()]))
            })
        })
        .await;
    assert_eq!(copy.rules.unwrap().len(), 1);

    // The namespace is labelled in: refused there, and said.
    env.label_namespace(&victim, json!({ label: env.id })).await;
    let conflict = eventually(Duration::from_secs(15), "the rule's status", || async {
        let rule = env.rules().get(&rule).await.unwrap();
        let conflicts = rule.status.map(|s| s.conflicts).unwrap_or_default();
        conflicts.into_iter().find(|c| c.namespace == victim)
    })
    .await;
    assert!(
        conflict.reason.contains("RoleBinding planted"),
        "{conflict:?}"
    );
    eventually(Duration::from_secs(10), "a GrantRefused Event", || async {
        rule_events(&env, &rule, "GrantRefused")
            .await
            .into_iter()
            .find(|e| e.note.as_deref().is_some_and(|n| n.contains("planted")))
    })
    .await;
    p.wait_metric(
        "copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}",
        "two resyncs",
        |n| n >= 2.0,
    )
    .await;
    assert!(
        env.api::<Role>(&victim)
            .get_opt("quota-editor")
            .await
            .unwrap()
            .is_none(),
        "the Role copy was created under the planted binding"
    );
    // And the namespace admin still cannot change their quota.
    let raised = Api::<ResourceQuota>::namespaced(tenant.clone(), &victim)
        .patch(
            "limits",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hard": {"pods": "1000"}}})),
        )
        .await;
    assert!(
        matches!(&raised, Err(kube::Error::Api(s)) if s.code == 403),
        "{raised:?}"
    );

    p.terminate();
    env.unregister_webhooks().await;
    release.uninstall();
    env.cleanup().await;
}
