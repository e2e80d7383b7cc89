//! Least privilege on the real API server, with copyrator running as the chart's own
//! ServiceAccount (SPEC §9.10, §4 item 11): RBAC copies grant only the roles the chart lists,
//! come only from CopyRules naming a trusted source, never land in copyrator's namespace, and a
//! namespace cannot detach a copied policy by stripping its marks, copyrator up or down.

use std::time::Duration;

use crate::common::{self, *};
use crate::helm_chart::support::{Release, find, render};
use copyrator::copyrule::{CopyRule, CopyRuleSpec};
use k8s_openapi::api::{
    core::v1::ServiceAccount,
    events::v1::Event,
    networking::v1::NetworkPolicy,
    rbac::v1::{ClusterRole, Role, RoleBinding},
};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

const RBAC: &str = "rbac.authorization.k8s.io/v1";
const KINDS: &str = r#"copyKinds=[
    {"kind": "RoleBinding", "group": "rbac.authorization.k8s.io", "resource": "rolebindings"},
    {"kind": "Role", "group": "rbac.authorization.k8s.io", "resource": "roles"},
    {"kind": "NetworkPolicy", "group": "networking.k8s.io", "resource": "networkpolicies"}]"#;

/// The rendered Deployment's arguments that say what copyrator copies and may grant.
pub(crate) fn policy_args(docs: &[serde_json::Value]) -> Vec<String> {
    let args: Vec<String> = serde_json::from_value(
        find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"].clone(),
    )
    .unwrap();
    args.into_iter()
        .filter(|a| {
            [
                "--copy-kinds=",
                "--bind-cluster-roles=",
                "--bind-roles=",
                "--escalate-roles=",
            ]
            .iter()
            .any(|p| a.starts_with(p))
        })
        .collect()
}

pub(crate) fn rule_spec(kind: &str, src: &str, name: &str, target: &str, id: &str) -> CopyRuleSpec {
    let api_version = if kind == "NetworkPolicy" {
        "networking.k8s.io/v1"
    } else {
        RBAC
    };
    serde_json::from_value(json!({
        "apiVersion": api_version, "kind": kind, "sourceNamespace": src, "sourceName": name,
        "namespaceSelector": {"matchLabels": {target: id}}
    }))
    .unwrap()
}

fn binding(name: &str, cluster_role: &str) -> RoleBinding {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "devs"}]
    }))
    .unwrap()
}

/// A client for ServiceAccount `name` of `namespace`, made there with a Role of `rules`.
pub(crate) async fn identity(
    env: &TestEnv,
    namespace: &str,
    name: &str,
    rules: serde_json::Value,
) -> Client {
    let create = PostParams::default();
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<ServiceAccount>::namespaced(env.client.clone(), namespace)
        .create(&create, &sa)
        .await
        .unwrap();
    let role: Role =
        serde_json::from_value(json!({"metadata": {"name": name}, "rules": rules})).unwrap();
    Api::<Role>::namespaced(env.client.clone(), namespace)
        .create(&create, &role)
        .await
        .unwrap();
    let rb: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(env.client.clone(), namespace)
        .create(&create, &rb)
        .await
        .unwrap();
    let token = service_account_token(&env.client, namespace, name).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    write_token_kubeconfig(&kubeconfig(), &token, &path);
    copyrator::cluster::client::kube_client(Some(&path))
        .await
        .unwrap()
}

async fn absent<K: Object>(env: &TestEnv, ns: &str, name: &str) -> bool {
    env.api::<K>(ns).get_opt(name).await.unwrap().is_none()
}

/// With every chart list empty, no Role or RoleBinding copy is made however it is asked for;
/// with `rbac.bindClusterRoles: [view]`, a binding to `view` is copied and one to a ClusterRole
/// of Secret rights copyrator itself holds (which the API server would let it bind) is not, a
/// Warning Event and the rule's status saying why; nothing but data lands in copyrator's own
/// namespace, which the rules select too.
#[tokio::test]
async fn rbac_copies_grant_only_the_roles_the_chart_lists() {
    let env = TestEnv::new().await;
    let release_ns = env.namespace("gr-release", &[]).await;
    let name = format!("gr{}", env.id);
    let fullname = format!("{name}-copyrator");
    // The chart's webhook configurations are the ones this test registers for its process.
    let values = ["--set", "webhook.name=copyrator-e2e", "--set-json", KINDS];
    let mut release = Release::install(&name, &release_ns, &values);
    let dir = tempfile::tempdir().unwrap();
    let sa_kubeconfig = dir.path().join("kubeconfig");
    let token = service_account_token(&env.client, &release_ns, &fullname).await;
    write_token_kubeconfig(&kubeconfig(), &token, &sa_kubeconfig);

    let target = "gr-target";
    let src = env.namespace("gr-src", &[]).await;
    let dst = env.namespace("gr-dst", &[(target, &env.id)]).await;
    env.label_namespace(&release_ns, json!({ target: env.id }))
        .await;
    let create = PostParams::default();
    // Secret rights copyrator holds everywhere: the API server lets it bind this role.
    let reader = env.name("secret-reader");
    let cluster_role: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": reader},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]}]
    }))
    .unwrap();
    Api::<ClusterRole>::all(env.client.clone())
        .create(&create, &cluster_role)
        .await
        .unwrap();
    let bindings = Api::<RoleBinding>::namespaced(env.client.clone(), &src);
    bindings
        .create(&create, &binding("to-view", "view"))
        .await
        .unwrap();
    bindings
        .create(&create, &binding("to-reader", &reader))
        .await
        .unwrap();
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "app-reader"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    }))
    .unwrap();
    Api::<Role>::namespaced(env.client.clone(), &src)
        .create(&create, &role)
        .await
        .unwrap();
    let policy: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": "deny-all"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    }))
    .unwrap();
    Api::<NetworkPolicy>::namespaced(env.client.clone(), &src)
        .create(&create, &policy)
        .await
        .unwrap();
    let rules = [
        ("RoleBinding", "to-view"),
        ("RoleBinding", "to-reader"),
        ("Role", "app-reader"),
        ("NetworkPolicy", "deny-all"),
    ];
    let mut rule_names = Vec::new();
    for (kind, source) in rules {
        rule_names.push(
            env.copy_rule(
                &format!("gr-{source}"),
                rule_spec(kind, &src, source, target, &env.id),
            )
            .await,
        );
    }

    let trusted = format!("--trusted-namespaces={src}");
    let spawn = |values: &[&str]| {
        let mut args = vec![
            "--kubeconfig".to_string(),
            sa_kubeconfig.display().to_string(),
            trusted.clone(),
            format!("--lease-namespace={release_ns}"),
            format!("--lease-name={fullname}"),
            "--resync-interval=1s".to_string(),
        ];
        args.extend(policy_args(&render(&name, &release_ns, values)));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Process::spawn(&args)
    };

    // Every list empty. The webhooks registered for the process cover the kinds this test
    // process knows.
    for (group, kind, plural) in [
        ("rbac.authorization.k8s.io", "RoleBinding", "rolebindings"),
        ("rbac.authorization.k8s.io", "Role", "roles"),
        ("networking.k8s.io", "NetworkPolicy", "networkpolicies"),
    ] {
        copyrator::model::Kind::register(group, "v1", kind, plural).unwrap();
    }
    let mut p = spawn(&values);
    p.wait_ready().await;
    env.register_webhooks(&p).await;
    env.wait_for::<NetworkPolicy>(&dst, "deny-all", "the NetworkPolicy's copy", |_| true)
        .await;
    for rule in &rule_names[..3] {
        eventually(Duration::from_secs(10), "a GrantRefused Event", || async {
            (!rule_events(&env, rule, "GrantRefused").await.is_empty()).then_some(())
        })
        .await;
    }
    // However it is asked for: by a selector, or inline in the trusted namespace.
    let mut selecting = rule_spec("RoleBinding", &src, "to-view", target, &env.id);
    selecting.source_name = None;
    selecting.source_selector = Some(Default::default());
    let denied = env
        .rules()
        .create(&create, &CopyRule::new(&env.name("gr-selector"), selecting))
        .await;
    assert!(
        matches!(&denied, Err(kube::Error::Api(s)) if s.message.contains("spec.sourceSelector")),
        "{denied:?}"
    );
    let elsewhere = env.namespace("gr-elsewhere", &[]).await;
    let inline = bindings
        .patch(
            "to-view",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {
                "labels": {"copyrator.io/source": "true"},
                "annotations": {"copyrator.io/namespaces": elsewhere}}})),
        )
        .await;
    assert!(
        matches!(&inline, Err(kube::Error::Api(s)) if s.message.contains("CopyRule")),
        "{inline:?}"
    );
    p.wait_metric(
        "copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}",
        "two resyncs",
        |n| n >= 2.0,
    )
    .await;
    for ns in [&dst, &release_ns, &elsewhere] {
        for name in ["to-view", "to-reader"] {
            assert!(absent::<RoleBinding>(&env, ns, name).await, "{ns}/{name}");
        }
        assert!(absent::<Role>(&env, ns, "app-reader").await, "{ns}");
    }
    assert!(
        absent::<NetworkPolicy>(&env, &release_ns, "deny-all").await,
        "a policy copied into copyrator's own namespace"
    );
    // Nothing was left for the API server to refuse: no RBAC write was even tried. (Other
    // tests' terminating namespaces refuse Events; those 403s are not about grants.)
    let refused: Vec<String> = p
        .logs()
        .lines()
        .filter(|l| l.contains("403") || l.to_lowercase().contains("forbidden"))
        .filter(|l| l.contains("rolebindings") || l.contains("roles"))
        .map(String::from)
        .collect();
    assert!(
        refused.is_empty(),
        "copyrator refuses before the API server would: {refused:?}"
    );
    p.terminate();
    env.unregister_webhooks().await;

    // bindClusterRoles: [view].
    let view = ["--set-json", "rbac.bindClusterRoles=[\"view\"]"];
    let listed: Vec<&str> = values.iter().chain(view.iter()).copied().collect();
    let summary = release.upgrade(&listed);
    assert_eq!(summary["status"], "deployed", "{summary}");
    let mut p = spawn(&listed);
    p.wait_ready().await;
    env.wait_for::<RoleBinding>(&dst, "to-view", "the binding to view", |rb| {
        rb.role_ref.name == "view"
    })
    .await;
    let reader_rule = &rule_names[1];
    let status = eventually(Duration::from_secs(10), "the rule's status", || async {
        let rule = env.rules().get(reader_rule).await.unwrap();
        let conflicts = rule.status.map(|s| s.conflicts).unwrap_or_default();
        conflicts
            .iter()
            .find(|c| c.namespace == dst && c.reason.contains(&reader))
            .cloned()
    })
    .await;
    assert!(status.reason.contains("--bind-cluster-roles"), "{status:?}");
    let events: Vec<Event> = rule_events(&env, reader_rule, "GrantRefused").await;
    assert!(
        events
            .iter()
            .any(|e| e.note.as_deref().is_some_and(|n| n.contains(&reader))),
        "{events:?}"
    );
    p.wait_metric(
        "copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}",
        "two resyncs",
        |n| n >= 2.0,
    )
    .await;
    assert!(absent::<RoleBinding>(&env, &dst, "to-reader").await);
    assert!(absent::<Role>(&env, &dst, "app-reader").await);
    assert!(
        absent::<RoleBinding>(&env, &release_ns, "to-view").await,
        "a binding copied into copyrator's own namespace"
    );
    p.terminate();

    let _ = Api::<ClusterRole>::all(env.client.clone())
        .delete(&reader, &DeleteParams::default())
        .await;
    release.uninstall();
    env.cleanup().await;
}

/// A namespace editor who strips the marks of a copied default-deny NetworkPolicy (read-only
/// by default, SPEC §4 item 11) to make it theirs is refused, with copyrator up and with
/// copyrator down; the policy stays the platform's.
#[tokio::test]
async fn a_namespace_cannot_detach_a_copied_policy() {
    // The webhooks registered for this process cover the kinds it knows.
    copyrator::model::Kind::register(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
    )
    .unwrap();
    let env = TestEnv::new().await;
    let platform = env.namespace("gr-platform", &[]).await;
    let opts = Options {
        extra: vec![
            format!("--trusted-namespaces={platform}"),
            "--copy-kinds=NetworkPolicy.networking.k8s.io".into(),
        ],
        ..Default::default()
    };
    let mut t = Harness::start_in(env, opts).await;
    let dst = t.namespace("gr-team", &[("gr-team", &t.id)]).await;
    let policy: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": "default-deny"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}
    }))
    .unwrap();
    Api::<NetworkPolicy>::namespaced(t.client.clone(), &platform)
        .create(&PostParams::default(), &policy)
        .await
        .unwrap();
    t.copy_rule(
        "gr-deny",
        rule_spec("NetworkPolicy", &platform, "default-deny", "gr-team", &t.id),
    )
    .await;
    let copy = t
        .wait_for::<NetworkPolicy>(&dst, "default-deny", "the policy's copy", |_| true)
        .await;
    assert_eq!(
        copy.metadata.labels.as_ref().unwrap()["copyrator.io/read-only"],
        "true",
        "a copied policy is read-only unless its rule says otherwise"
    );
    let editor = identity(
        &t,
        &dst,
        "editor",
        json!([{"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
                "verbs": ["get", "list", "update", "patch"]}]),
    )
    .await;
    let editor_policies = Api::<NetworkPolicy>::namespaced(editor, &dst);
    let strip = || async {
        editor_policies
            .patch(
                "default-deny",
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "metadata": {"labels": {"app.kubernetes.io/managed-by": null,
                                            "copyrator.io/read-only": null}},
                    "spec": {"policyTypes": []}
                })),
            )
            .await
    };
    let up = strip().await;
    assert!(
        matches!(&up, Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("read-only copy")),
        "{up:?}"
    );
    t.kill().await;
    let down = strip().await;
    assert!(
        matches!(&down, Err(kube::Error::Api(s)) if s.message.contains("failed calling webhook")),
        "with copyrator down the strip must fail closed: {down:?}"
    );
    let kept = t
        .api::<NetworkPolicy>(&dst)
        .get("default-deny")
        .await
        .unwrap();
    assert_eq!(
        kept.metadata.labels.as_ref().unwrap()["app.kubernetes.io/managed-by"],
        "copyrator"
    );
    assert_eq!(
        kept.spec.unwrap().policy_types,
        Some(vec!["Ingress".to_string()])
    );
    t.finish().await;
}

/// A CopyRule copying RoleBindings is denied at admission unless its author may bind the
/// role in every namespace (with `--client-ca`: the API server's reviews only).
#[tokio::test]
async fn an_rbac_rule_is_denied_to_an_author_who_may_not_bind_its_role() {
    let env = TestEnv::new().await;
    let src = env.namespace("gr-admins", &[]).await;
    let Some(client_ca) = common::webhook_client_ca() else {
        eprintln!("skipped: the webhook client CA of the cluster under test is unknown");
        return;
    };
    let opts = Options {
        extra: vec![
            format!("--client-ca={}", client_ca.display()),
            format!("--trusted-namespaces={src}"),
            "--copy-kinds=RoleBinding.rbac.authorization.k8s.io".into(),
            "--bind-cluster-roles=view,edit".into(),
        ],
        ..Default::default()
    };
    let t = Harness::start_in(env, opts).await;
    let env = &*t;
    Api::<RoleBinding>::namespaced(env.client.clone(), &src)
        .create(&PostParams::default(), &binding("to-view", "view"))
        .await
        .unwrap();
    // An author who may write CopyRules and nothing else.
    let author_ns = env.namespace("gr-author", &[]).await;
    let author = identity(env, &author_ns, "author", json!([])).await;
    let cluster_role = |name: &str, rules: serde_json::Value| -> ClusterRole {
        serde_json::from_value(json!({"metadata": {"name": name}, "rules": rules})).unwrap()
    };
    let bind_to_author = |name: &str| -> k8s_openapi::api::rbac::v1::ClusterRoleBinding {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": "author", "namespace": author_ns}]
        }))
        .unwrap()
    };
    let (rules_role, bind_role) = (env.name("gr-copyrules"), env.name("gr-bind-view"));
    let roles = Api::<ClusterRole>::all(env.client.clone());
    let role_bindings =
        Api::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>::all(env.client.clone());
    let create = PostParams::default();
    roles
        .create(
            &create,
            &cluster_role(
                &rules_role,
                json!([{"apiGroups": ["copyrator.io"], "resources": ["copyrules"],
                        "verbs": ["create", "get", "delete"]}]),
            ),
        )
        .await
        .unwrap();
    role_bindings
        .create(&create, &bind_to_author(&rules_role))
        .await
        .unwrap();
    let spec = rule_spec("RoleBinding", &src, "to-view", "gr-x", &env.id);
    let rule_name = env.name("gr-authored");
    let rules = Api::<CopyRule>::all(author.clone());
    let denied = rules
        .create(&create, &CopyRule::new(&rule_name, spec.clone()))
        .await;
    assert!(
        matches!(&denied, Err(kube::Error::Api(s)) if s.message.contains("may not bind ClusterRole view")),
        "{denied:?}"
    );
    // Given `bind` on view, the same author may.
    roles
        .create(
            &create,
            &cluster_role(
                &bind_role,
                json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"],
                        "resourceNames": ["view"], "verbs": ["bind"]}]),
            ),
        )
        .await
        .unwrap();
    role_bindings
        .create(&create, &bind_to_author(&bind_role))
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "the rule allowed", || async {
        rules
            .create(&create, &CopyRule::new(&rule_name, spec.clone()))
            .await
            .ok()
    })
    .await;
    env.track_copy_rule(&rule_name);
    // A rule whose source does not exist yet may come to bind any listed role: edit too.
    let mut unborn = spec.clone();
    unborn.source_name = Some("not-yet".into());
    let denied = rules
        .create(&create, &CopyRule::new(&env.name("gr-unborn"), unborn))
        .await;
    assert!(
        matches!(&denied, Err(kube::Error::Api(s)) if s.message.contains("may not bind ClusterRole edit")),
        "{denied:?}"
    );
    for (role, binding) in [(&rules_role, &rules_role), (&bind_role, &bind_role)] {
        let _ = roles.delete(role, &DeleteParams::default()).await;
        let _ = role_bindings
            .delete(binding, &DeleteParams::default())
            .await;
    }
    t.finish().await;
}

/// A kind that runs code, named in `--copy-kinds`, stops copyrator at startup, saying why.
#[tokio::test]
async fn a_workload_kind_in_copy_kinds_stops_startup() {
    for kind in ["Deployment.apps", "CronJob.batch", "PodTemplate"] {
        let out = run_copyrator(&["serve", &format!("--copy-kinds={kind}")]).await;
        assert!(!out.success, "{kind}: {out:?}");
        assert!(
            out.stderr.contains("is never copied: ")
                && (out.stderr.contains("runs code") || out.stderr.contains("code a controller")),
            "{kind}: {}",
            out.stderr
        );
    }
}
