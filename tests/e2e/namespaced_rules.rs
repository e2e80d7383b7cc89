//! NamespacedCopyRules (SPEC §2.2, §9, §13) on the real API server: a team declares copies out
//! of its own namespace with a rule it writes there, as its own identity. The copies land only
//! where the target namespace accepts copies from the team's namespace: in a cluster-wide
//! install, and in a namespace-scoped one (copyrator running as the chart's ServiceAccount,
//! the CRD installed by the administrator), where they also need copyrator bound and listed.

use crate::common;

use std::time::Duration;

use common::{tenant::Tenant, *};
use copyrator::{
    marks,
    namespaced::{NamespacedCopyRule, NamespacedCopyRuleSpec},
};
use k8s_openapi::api::{
    core::v1::{Namespace, Secret},
    rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject},
};
use kube::{
    Api, Client,
    api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams},
};
use serde_json::json;

use crate::helm_chart::support::{Release, container_arg, render};

/// Lets the tenant of `ns` write NamespacedCopyRules there, as the chart's aggregated
/// `<fullname>-namespaced-edit` lets whoever may edit a namespace.
async fn grant_rules(env: &TestEnv, ns: &str) {
    let meta = || ObjectMeta {
        name: Some("edit-copy-rules".into()),
        namespace: Some(ns.into()),
        ..Default::default()
    };
    let create = PostParams::default();
    let role = Role {
        metadata: meta(),
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["copyrator.io".into()]),
            resources: Some(vec!["namespacedcopyrules".into()]),
            verbs: [
                "get", "list", "watch", "create", "update", "patch", "delete",
            ]
            .map(String::from)
            .to_vec(),
            ..Default::default()
        }]),
    };
    Api::<Role>::namespaced(env.client.clone(), ns)
        .create(&create, &role)
        .await
        .unwrap();
    let binding = RoleBinding {
        metadata: meta(),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: "edit-copy-rules".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: "tenant".into(),
            namespace: Some(ns.into()),
            ..Default::default()
        }]),
    };
    Api::<RoleBinding>::namespaced(env.client.clone(), ns)
        .create(&create, &binding)
        .await
        .unwrap();
}

/// Namespace `ns` accepts copies from `from` (`copyrator.io/accept-from`).
async fn accept_from(env: &TestEnv, ns: &str, from: &str) {
    Api::<Namespace>::all(env.client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                marks::ACCEPT_FROM_ANNOTATION: from
            }}})),
        )
        .await
        .unwrap();
}

/// The rule `push` copying Secret `cred` of its namespace into `targets`.
fn push_rule(targets: &[&str]) -> NamespacedCopyRule {
    NamespacedCopyRule::new(
        "push",
        NamespacedCopyRuleSpec {
            kind: "Secret".into(),
            source_name: Some("cred".into()),
            namespaces: targets.iter().map(|t| t.to_string()).collect(),
            ..Default::default()
        },
    )
}

fn rules(client: &Client, ns: &str) -> Api<NamespacedCopyRule> {
    Api::namespaced(client.clone(), ns)
}

/// No Secret `cred` appears in any of `namespaces` for `period`.
async fn never_copied(env: &TestEnv, namespaces: &[&str], period: Duration) {
    stays(period, "no copy where it is not accepted", || async {
        for ns in namespaces {
            if env.secrets(ns).get_opt("cred").await.unwrap().is_some() {
                eprintln!("a copy in {ns}");
                return false;
            }
        }
        true
    })
    .await;
}

/// The copy in `ns` holds `token` = `want` and names its rule.
fn copy_of(rule_ns: &str, want: &str) -> impl Fn(&Secret) -> bool {
    let mark = format!("namespacedcopyrule/{rule_ns}/push");
    let want = want.to_string();
    move |s| {
        secret_value(s, "token").as_deref() == Some(want.as_str())
            && s.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(marks::RULE_ANNOTATION))
                == Some(&mark)
    }
}

#[tokio::test]
async fn a_tenants_namespaced_rule_copies_only_where_its_namespace_is_accepted() {
    let env = TestEnv::new().await;
    let tenant = Tenant::new(&env, "ncr-tenant").await;
    grant_rules(&env, &tenant.namespace).await;
    let platform = env.namespace("ncr-platform", &[]).await;
    let accepting = env.namespace("ncr-yes", &[]).await;
    let refusing = env.namespace("ncr-no", &[]).await;
    accept_from(&env, &accepting, &tenant.namespace).await;
    let t = Harness::start_in(
        env,
        Options {
            extra: vec![format!("--trusted-namespaces={platform}")],
            ..Default::default()
        },
    )
    .await;
    let own = &tenant.namespace;

    // Admission validates the rule as it validates a CopyRule, naming the field.
    let mut invalid = push_rule(&[&accepting]);
    invalid.spec.source_selector = Some(Default::default());
    let denied = rules(&tenant.client, own)
        .create(&PostParams::default(), &invalid)
        .await
        .expect_err("a rule with both sourceName and sourceSelector");
    assert!(denied.to_string().contains("spec.sourceName"), "{denied}");

    // All as the tenant: its Secret, and its rule pushing it into both namespaces.
    tenant
        .secrets(own)
        .create(
            &PostParams::default(),
            &secret("cred", &[], &[], &[("token", "v1")]),
        )
        .await
        .unwrap();
    rules(&tenant.client, own)
        .create(&PostParams::default(), &push_rule(&[&accepting, &refusing]))
        .await
        .unwrap();
    t.wait_for::<Secret>(&accepting, "cred", "the accepted copy", copy_of(own, "v1"))
        .await;
    never_copied(&t, &[&refusing], Duration::from_secs(2)).await;

    // The copy follows its source; the refusing namespace still gets nothing.
    tenant
        .secrets(own)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"token": "v2"}})),
        )
        .await
        .unwrap();
    t.wait_for::<Secret>(&accepting, "cred", "the copy following", copy_of(own, "v2"))
        .await;
    never_copied(&t, &[&refusing], Duration::from_secs(1)).await;

    // explain names the rule of the copy, and says why the other namespace has none.
    let explain = |ns: String| {
        let platform = platform.clone();
        async move {
            let out = run_copyrator(&[
                "explain",
                "namespace",
                &ns,
                "--trusted-namespaces",
                &platform,
            ])
            .await;
            assert!(out.success, "{}", out.stderr);
            out.stdout
        }
    };
    let table = explain(accepting.clone()).await;
    let mark = format!("namespacedcopyrule/{own}/push");
    assert!(
        table.lines().any(|l| l.starts_with(&mark)
            && l.contains("in sync")
            && l.contains("listed in spec.namespaces")),
        "{table}"
    );
    let table = explain(refusing.clone()).await;
    assert!(table.contains("does not accept copies from"), "{table}");

    // Consent withdrawn: the tenant's copy goes.
    accept_from(&t, &accepting, "someone-else").await;
    eventually(Duration::from_secs(10), "the copy deleted", || async {
        t.secrets(&accepting)
            .get_opt("cred")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;

    rules(&t.client, own)
        .delete("push", &DeleteParams::default())
        .await
        .unwrap();
    t.finish().await;
}

#[tokio::test]
async fn a_namespaced_rule_copies_into_bound_listed_namespaces_that_accept_it() {
    let env = TestEnv::new().await;
    let release_ns = env.namespace("ncs-release", &[]).await;
    // a is the team's; b accepts from it; c is listed and bound but does not accept; d
    // accepts but is not listed.
    let a = env.namespace("ncs-a", &[]).await;
    let b = env.namespace("ncs-b", &[]).await;
    let c = env.namespace("ncs-c", &[]).await;
    let d = env.namespace("ncs-d", &[]).await;
    for ns in [&b, &d] {
        accept_from(&env, ns, &a).await;
    }
    let name = format!("ncs{}", env.id);
    let fullname = format!("{name}-copyrator");
    let listed = format!("namespaces=[\"{a}\",\"{b}\",\"{c}\"]");
    let values = ["--set", "scope=namespaces", "--set-json", listed.as_str()];
    let mut release = Release::install(&name, &release_ns, &values);
    let dir = tempfile::tempdir().unwrap();
    let sa_kubeconfig = dir.path().join("kubeconfig");
    let token = service_account_token(&env.client, &release_ns, &fullname).await;
    write_token_kubeconfig(&kubeconfig(), &token, &sa_kubeconfig);
    let namespaces = container_arg(&render(&name, &release_ns, &values), "--namespaces");
    // a is not trusted: its rule needs the target's consent.
    let mut p = Process::spawn(&[
        "--kubeconfig",
        &sa_kubeconfig.display().to_string(),
        &namespaces,
        "--trusted-namespaces",
        &release_ns,
        "--lease-namespace",
        &release_ns,
        "--lease-name",
        &fullname,
        "--resync-interval",
        "1h",
    ]);
    p.wait_ready().await;

    env.secrets(&a)
        .create(
            &PostParams::default(),
            &secret("cred", &[], &[], &[("token", "v1")]),
        )
        .await
        .unwrap();
    rules(&env.client, &a)
        .create(&PostParams::default(), &push_rule(&[&b, &c, &d]))
        .await
        .unwrap();
    env.wait_for::<Secret>(
        &b,
        "cred",
        "the copy in a listed namespace that accepts",
        copy_of(&a, "v1"),
    )
    .await;
    never_copied(&env, &[&c, &d], Duration::from_secs(2)).await;
    let logs = p.logs();
    assert!(
        !logs.contains("NamespacedCopyRule CRD is not installed"),
        "the CRD is installed\n{logs}"
    );
    assert_eq!(
        p.metric("copyrator_api_errors_total{code=\"403\"}").await,
        0.0,
        "copyrator was refused something\n{logs}"
    );

    rules(&env.client, &a)
        .delete("push", &DeleteParams::default())
        .await
        .unwrap();
    p.terminate();
    release.uninstall();
    env.cleanup().await;
}

/// Consent is to receive data, never to have one's own objects replaced (SPEC §9.11): a
/// tenant's NamespacedCopyRule naming another team's Secret with `conflictPolicy: Overwrite`
/// and `readOnly` is denied at admission, and one that got in while the webhook was off is held
/// to Skip by the planner: the team's Secret stays its own, unmarked and editable.
#[tokio::test]
async fn a_tenants_rule_never_takes_over_an_object_of_the_namespace_that_accepts_it() {
    let env = TestEnv::new().await;
    let tenant = Tenant::new(&env, "ncr-taker").await;
    grant_rules(&env, &tenant.namespace).await;
    let theirs = env.namespace("ncr-theirs", &[]).await;
    accept_from(&env, &theirs, &tenant.namespace).await;
    env.secrets(&theirs)
        .create(
            &PostParams::default(),
            &secret("db", &[], &[], &[("password", "theirs")]),
        )
        .await
        .unwrap();
    let t = Harness::start_in(env, Options::default()).await;
    let own = &tenant.namespace;
    tenant
        .secrets(own)
        .create(
            &PostParams::default(),
            &secret("cred", &[], &[], &[("password", "team-a")]),
        )
        .await
        .unwrap();
    let mut taker = push_rule(&[&theirs]);
    taker.spec.target_name = Some("db".into());
    taker.spec.conflict_policy = copyrator::copyrule::ConflictPolicy::Overwrite;
    taker.spec.read_only = Some(true);

    let denied = rules(&tenant.client, own)
        .create(&PostParams::default(), &taker)
        .await
        .expect_err("a tenant's rule asking to overwrite");
    assert!(
        denied.to_string().contains("spec.conflictPolicy"),
        "{denied}"
    );

    // With the webhook off (copyrator down when the rule was written), the rule gets in.
    t.unregister_webhooks().await;
    rules(&tenant.client, own)
        .create(&PostParams::default(), &taker)
        .await
        .unwrap();
    stays(
        Duration::from_secs(4),
        "the team's Secret stays its own",
        || async {
            let db = t.secrets(&theirs).get("db").await.unwrap();
            secret_value(&db, "password").as_deref() == Some("theirs")
                && !kube::ResourceExt::labels(&db).contains_key(marks::MANAGED_BY_LABEL)
        },
    )
    .await;
    t.finish().await;
}
