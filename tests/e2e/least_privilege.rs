//! Least privilege, proven on the real API server with RBAC: copyrator authenticated as the
//! chart's ServiceAccount (TokenRequest) does its whole job with the chart's ClusterRole and
//! Role, and removing any single rule of either makes part of that job fail. With `copyKinds`,
//! the kinds enabled are copied and RBAC objects stay out of reach but for the roles named.

use crate::common;

use std::time::{Duration, Instant};

use crate::helm_chart::support::Release;
use common::*;
use copyrator::{copyrule::CopyRule, marks};
use k8s_openapi::api::{
    admissionregistration::v1::ValidatingWebhookConfiguration,
    coordination::v1::Lease,
    core::v1::Event,
    rbac::v1::{ClusterRole, PolicyRule, Role},
};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

/// How long one step of the job may take before it counts as failed.
const STEP: Duration = Duration::from_secs(8);

/// The chart's RBAC, as installed.
struct Rbac {
    client: Client,
    namespace: String,
    fullname: String,
    cluster_rules: Vec<PolicyRule>,
    role_rules: Vec<PolicyRule>,
}

impl Rbac {
    fn role_name(&self) -> String {
        format!("{}-leader-election", self.fullname)
    }

    async fn set(&self, cluster_rules: &[PolicyRule], role_rules: &[PolicyRule]) {
        Api::<ClusterRole>::all(self.client.clone())
            .patch(
                &self.fullname,
                &PatchParams::default(),
                &Patch::Merge(json!({ "rules": cluster_rules })),
            )
            .await
            .unwrap();
        Api::<Role>::namespaced(self.client.clone(), &self.namespace)
            .patch(
                &self.role_name(),
                &PatchParams::default(),
                &Patch::Merge(json!({ "rules": role_rules })),
            )
            .await
            .unwrap();
    }
}

fn describe(rule: &PolicyRule) -> String {
    format!(
        "{:?} {:?} {:?}{}",
        rule.api_groups.clone().unwrap_or_default(),
        rule.resources.clone().unwrap_or_default(),
        rule.verbs,
        rule.resource_names
            .as_ref()
            .map(|n| format!(" names {n:?}"))
            .unwrap_or_default()
    )
}

/// Waits for `what`; fails early once copyrator has been refused anything.
async fn step<F, Fut>(p: &Process, what: &str, mut check: F) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return Ok(());
        }
        let refused = p.metric("copyrator_api_errors_total{code=\"403\"}").await;
        if refused > 0.0 {
            return Err(format!(
                "{what}: copyrator was refused {refused} API call(s)"
            ));
        }
        if start.elapsed() > STEP {
            return Err(format!("{what}: not done within {STEP:?}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// copyrator's whole job, as the ServiceAccount: leader election, inline copies created,
/// updated, deleted and conflicted, a new namespace served by the webhook, a CopyRule whose
/// source gets labelled, whose status gets written and which gets an Event. `Err` says what did
/// not happen.
async fn whole_job(env: &TestEnv, rbac: &Rbac, kubeconfig: &str, run: usize) -> Result<(), String> {
    // As after a fresh install: no Lease yet, the first replica creates it.
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &rbac.namespace);
    let _ = leases
        .delete(&rbac.fullname, &DeleteParams::default())
        .await;
    // With its own certificate, as the chart runs it: issued into the chart's Secret and
    // published into the webhook configuration (the release's webhook.name is the e2e one).
    let certificate_secret = format!("{}-webhook-certs", rbac.fullname);
    let mut p = Process::spawn(&[
        "--kubeconfig",
        kubeconfig,
        "--leader-election=true",
        "--lease-namespace",
        &rbac.namespace,
        "--lease-name",
        &rbac.fullname,
        "--lease-duration",
        "3s",
        "--resync-interval",
        "1h",
        "--tls-secret",
        &certificate_secret,
        "--tls-secret-namespace",
        &rbac.namespace,
        "--tls-ips",
        "127.0.0.1",
        "--webhook-configuration",
        WEBHOOK_CONFIG_NAME,
        "--cert-check-interval",
        "200ms",
    ]);
    p.wait_up().await;
    // Registered without a caBundle: copyrator must put its CA there.
    env.webhooks_registered();
    register_webhooks(
        &env.client,
        &format!("https://127.0.0.1:{}", p.webhook_port),
        &[],
    )
    .await;
    let result = whole_job_steps(env, &p, run).await;
    let result = match result {
        Ok(()) => {
            let refused = p.metric("copyrator_api_errors_total{code=\"403\"}").await;
            if refused > 0.0 {
                Err(format!("refused {refused} API call(s)"))
            } else {
                Ok(())
            }
        }
        err => err,
    };
    if result.is_err() && std::env::var_os("COPYRATOR_TEST_LOGS").is_some() {
        eprintln!("--- copyrator logs (run {run}) ---\n{}", p.logs());
    }
    p.terminate();
    env.unregister_webhooks().await;
    result
}

async fn whole_job_steps(env: &TestEnv, p: &Process, run: usize) -> Result<(), String> {
    let started = Instant::now();
    step(p, "leading and ready after the first resync", || async {
        p.get("/readyz").await.0 == 200
    })
    .await?;
    step(p, "its CA published into the webhooks", || async {
        Api::<ValidatingWebhookConfiguration>::all(env.client.clone())
            .get(WEBHOOK_CONFIG_NAME)
            .await
            .is_ok_and(|c| {
                c.webhooks
                    .unwrap_or_default()
                    .iter()
                    .all(|h| h.client_config.ca_bundle.is_some())
            })
    })
    .await?;

    let label = env.name(&format!("lp{run}"));
    let src = env.namespace(&format!("lp{run}-src"), &[]).await;
    let t1 = env
        .namespace(&format!("lp{run}-t1"), &[("lp", &label)])
        .await;
    let taken = env
        .namespace(&format!("lp{run}-taken"), &[("lp", &label)])
        .await;
    env.secrets(&taken)
        .create(
            &PostParams::default(),
            &secret("cred", &[], &[], &[("theirs", "1")]),
        )
        .await
        .unwrap();
    env.secrets(&src)
        .create(
            &PostParams::default(),
            &secret(
                "cred",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &format!("lp={label}"))],
                &[("v", "1")],
            ),
        )
        .await
        .unwrap();
    let has = |ns: String, want: &'static str| {
        let api = env.secrets(&ns);
        async move {
            api.get_opt("cred")
                .await
                .ok()
                .flatten()
                .is_some_and(|s| secret_value(&s, "v").as_deref() == Some(want))
        }
    };
    step(p, "copy created by the source job", || has(t1.clone(), "1")).await?;
    step(p, "conflict reported as an Event", || async {
        Api::<Event>::namespaced(env.client.clone(), &src)
            .list(&ListParams::default())
            .await
            .is_ok_and(|l| {
                l.items
                    .iter()
                    .any(|e| e.reason.as_deref() == Some("CopyConflict"))
            })
    })
    .await?;
    let t2 = env
        .namespace(&format!("lp{run}-t2"), &[("lp", &label)])
        .await;
    step(p, "copy created by the namespace job", || {
        has(t2.clone(), "1")
    })
    .await?;

    env.secrets(&src)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"v": "2"}})),
        )
        .await
        .unwrap();
    step(p, "copies updated", || async {
        has(t1.clone(), "2").await && has(t2.clone(), "2").await
    })
    .await?;
    env.label_namespace(&t1, json!({"lp": null})).await;
    step(p, "copy deleted on opt-out", || async {
        matches!(env.secrets(&t1).get_opt("cred").await, Ok(None))
    })
    .await?;

    env.config_maps(&src)
        .create(
            &PostParams::default(),
            &config_map("settings", &[], &[], &[("a", "b")]),
        )
        .await
        .unwrap();
    let rule_name = env.name(&format!("lp{run}"));
    // It also names a namespace not created yet: the namespace index does not hold it, so the
    // rule's job reads it from the API server (the namespaces `get`, which jobs whose index
    // holds their namespace no longer need).
    let later = env.name(&format!("lp{run}-later"));
    let rule: CopyRule = serde_json::from_value(json!({
        "apiVersion": "copyrator.io/v1alpha1", "kind": "CopyRule",
        "metadata": {"name": rule_name},
        "spec": {"kind": "ConfigMap", "sourceNamespace": src, "sourceName": "settings", "namespaces": [t2, later]}
    }))
    .unwrap();
    let rules: Api<CopyRule> = Api::all(env.client.clone());
    rules.create(&PostParams::default(), &rule).await.unwrap();
    env.track_copy_rule(&rule_name);
    let result = async {
        step(p, "CopyRule copy created", || async {
            env.config_maps(&t2)
                .get_opt("settings")
                .await
                .ok()
                .flatten()
                .is_some()
        })
        .await?;
        step(p, "CopyRule source labelled", || async {
            env.config_maps(&src)
                .get("settings")
                .await
                .ok()
                .and_then(|c| c.metadata.labels)
                .is_some_and(|l| l.get(marks::SOURCE_LABEL).map(String::as_str) == Some("true"))
        })
        .await?;
        step(p, "CopyRule status written", || async {
            rules
                .get(&rule_name)
                .await
                .ok()
                .and_then(|r| r.status)
                .is_some_and(|s| s.synced_copies == 1)
        })
        .await?;
        // In kube-system, where only administrators read (SPEC §9.5).
        let about_rule = format!("involvedObject.kind=CopyRule,involvedObject.name={rule_name}");
        step(p, "CopyRule Event written in kube-system", || async {
            Api::<Event>::namespaced(env.client.clone(), "kube-system")
                .list(&ListParams::default().fields(&about_rule))
                .await
                .is_ok_and(|l| !l.items.is_empty())
        })
        .await
    }
    .await;
    let _ = rules.delete(&rule_name, &DeleteParams::default()).await;
    result?;

    // Still leading after renewing the Lease a few times.
    let lease = Duration::from_secs(3);
    if let Some(rest) = (lease * 2).checked_sub(started.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    if p.metric("copyrator_leader").await != 1.0 {
        return Err("lost the Lease: could not renew it".into());
    }
    Ok(())
}

#[tokio::test]
async fn every_rule_of_the_charts_rbac_is_needed_and_together_they_suffice() {
    let env = TestEnv::new().await;
    let ns = env.namespace("lp-release", &[]).await;
    let name = format!("lp{}", env.id);
    // The chart's certificate rules name its webhook configurations: let those be the ones this
    // test registers.
    let mut release = Release::install(&name, &ns, &["--set", "webhook.name=copyrator-e2e"]);
    let fullname = format!("{name}-copyrator");
    let cluster_rules = Api::<ClusterRole>::all(env.client.clone())
        .get(&fullname)
        .await
        .unwrap()
        .rules
        .unwrap_or_default();
    let role_rules = Api::<Role>::namespaced(env.client.clone(), &ns)
        .get(&format!("{fullname}-leader-election"))
        .await
        .unwrap()
        .rules
        .unwrap_or_default();
    assert!(
        cluster_rules.len() >= 10 && role_rules.len() == 3,
        "one rule per verb"
    );
    let rbac = Rbac {
        client: env.client.clone(),
        namespace: ns.clone(),
        fullname: fullname.clone(),
        cluster_rules,
        role_rules,
    };
    let dir = tempfile::tempdir().unwrap();
    let sa_kubeconfig = dir.path().join("kubeconfig");
    let token = service_account_token(&env.client, &ns, &fullname).await;
    write_token_kubeconfig(&kubeconfig(), &token, &sa_kubeconfig);
    let kc = sa_kubeconfig.display().to_string();

    let mut run = 0;
    whole_job(&env, &rbac, &kc, run)
        .await
        .expect("the chart's RBAC suffices for the whole job");

    let mut unneeded = Vec::new();
    for i in 0..rbac.cluster_rules.len() + rbac.role_rules.len() {
        let (mut cluster, mut role) = (rbac.cluster_rules.clone(), rbac.role_rules.clone());
        let removed = if i < cluster.len() {
            cluster.remove(i)
        } else {
            role.remove(i - rbac.cluster_rules.len())
        };
        rbac.set(&cluster, &role).await;
        run += 1;
        let result = whole_job(&env, &rbac, &kc, run).await;
        eprintln!(
            "without {}: {}",
            describe(&removed),
            result
                .as_ref()
                .err()
                .map(String::as_str)
                .unwrap_or("job done")
        );
        if result.is_ok() {
            unneeded.push(describe(&removed));
        }
    }
    rbac.set(&rbac.cluster_rules, &rbac.role_rules).await;
    assert!(
        unneeded.is_empty(),
        "rules copyrator does not need: {unneeded:?}"
    );

    release.uninstall();
    env.cleanup().await;
}

/// `copyKinds` under the chart's RBAC, on the real API server: with NetworkPolicy enabled,
/// copyrator as the chart's ServiceAccount (with the chart's `--copy-kinds`) copies the
/// NetworkPolicy a CopyRule names, and may still not create a RoleBinding. What RoleBindings it
/// copies once enabled: `grants.rs`.
#[tokio::test]
async fn copy_kinds_are_granted_their_verbs_and_nothing_else() {
    use crate::helm_chart::support::{container_arg, render};
    use k8s_openapi::api::{networking::v1::NetworkPolicy, rbac::v1::RoleBinding};

    let env = TestEnv::new().await;
    let ns = env.namespace("lpk-release", &[]).await;
    let name = format!("lpk{}", env.id);
    let fullname = format!("{name}-copyrator");
    let network_policy =
        r#"{"kind": "NetworkPolicy", "group": "networking.k8s.io", "resource": "networkpolicies"}"#;
    let only_network_policies = format!("copyKinds=[{network_policy}]");
    let values = ["--set-json", only_network_policies.as_str()];
    let mut release = Release::install(&name, &ns, &values);
    let dir = tempfile::tempdir().unwrap();
    let sa_kubeconfig = dir.path().join("kubeconfig");
    let token = service_account_token(&env.client, &ns, &fullname).await;
    write_token_kubeconfig(&kubeconfig(), &token, &sa_kubeconfig);
    let kc = sa_kubeconfig.display().to_string();
    // copyrator as a replica of the release would run: the chart's --copy-kinds, its Lease.
    let spawn = |copy_kinds: String| {
        Process::spawn(&[
            "--kubeconfig",
            &kc,
            &copy_kinds,
            "--lease-namespace",
            &ns,
            "--lease-name",
            &fullname,
            "--resync-interval",
            "1s",
        ])
    };

    let src = env.namespace("lpk-src", &[]).await;
    let dst = env.namespace("lpk-dst", &[]).await;
    let create = PostParams::default();
    let policy: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": "deny-ingress"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}
    }))
    .unwrap();
    Api::<NetworkPolicy>::namespaced(env.client.clone(), &src)
        .create(&create, &policy)
        .await
        .unwrap();
    // A CopyRule copying `source`, of `kind` in `api_version`, from src into dst.
    let spec = |api_version: &str, kind: &str, source: &str| {
        serde_json::from_value(json!({
            "apiVersion": api_version, "kind": kind, "sourceNamespace": src,
            "sourceName": source, "namespaces": [dst]
        }))
        .unwrap()
    };
    env.copy_rule(
        "lpk-np",
        spec("networking.k8s.io/v1", "NetworkPolicy", "deny-ingress"),
    )
    .await;

    let mut p = spawn(container_arg(&render(&name, &ns, &values), "--copy-kinds"));
    p.wait_ready().await;
    env.wait_for::<NetworkPolicy>(&dst, "deny-ingress", "the NetworkPolicy's copy", |np| {
        np.spec.as_ref().and_then(|s| s.policy_types.clone()) == Some(vec!["Ingress".into()])
    })
    .await;
    assert_eq!(
        p.metric("copyrator_api_errors_total{code=\"403\"}").await,
        0.0,
        "{}",
        p.logs()
    );
    // The chart's RBAC still keeps copyrator's ServiceAccount from writing RoleBindings.
    let as_copyrator = copyrator::cluster::client::kube_client(Some(&sa_kubeconfig))
        .await
        .unwrap();
    let binding = |name: &str, cluster_role: &str| -> RoleBinding {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": cluster_role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": "someone"}]
        }))
        .unwrap()
    };
    match Api::<RoleBinding>::namespaced(as_copyrator, &dst)
        .create(&create, &binding("planted", "view"))
        .await
    {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => panic!("copyrator's ServiceAccount created a RoleBinding: {other:?}"),
    }
    p.terminate();

    release.uninstall();
    env.cleanup().await;
}
