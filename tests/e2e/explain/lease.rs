//! `explain` reads the running copyrator's policy only in copyrator's own namespace (SPEC §11.1):
//! a Lease of the same name that a tenant plants in its namespace changes nothing it finds.

use crate::common;

use common::{tenant::Tenant, *};
use copyrator::{marks, pipeline::published};
use k8s_openapi::{
    api::{
        admissionregistration::v1::ValidatingWebhookConfiguration,
        coordination::v1::Lease,
        core::v1::Secret,
        rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject},
    },
    jiff::Timestamp,
};
use kube::{
    Api,
    api::{DeleteParams, ObjectMeta, PostParams},
};
use serde_json::{Value, json};

/// (source, target namespace, reason, copy, action, applies) of every finding, sorted: what
/// explain found, without the times that move with each resync.
fn verdicts(report: &Value) -> Vec<(String, String, String, String, String, bool)> {
    let text = |v: &Value| v.as_str().unwrap_or("-").to_string();
    let mut all: Vec<_> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                format!(
                    "{}/{}",
                    text(&f["source"]["namespace"]),
                    text(&f["source"]["name"])
                ),
                text(&f["target"]["namespace"]),
                text(&f["reason"]),
                text(&f["copy"]),
                text(&f["action"]),
                f["applies"].as_bool().unwrap_or_default(),
            )
        })
        .collect();
    all.sort();
    all
}

/// A ValidatingWebhookConfiguration as the chart names copyrator's: its webhooks call the
/// Service `copyrator` in `namespace`. Its one rule matches nothing, so the API server never
/// calls it.
fn webhook_configuration(name: &str, namespace: &str) -> ValidatingWebhookConfiguration {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "webhooks": [{
            "name": "sources.copyrator.io",
            "clientConfig": {"service": {"namespace": namespace, "name": "copyrator",
                                         "path": "/admission/sources"}},
            "rules": [{"apiGroups": ["e2e.copyrator.io"], "apiVersions": ["v1"],
                       "operations": ["CREATE"], "resources": ["nothings"]}],
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }],
    }))
    .unwrap()
}

/// Lets the tenant write Leases in its own namespace, as many clusters let a namespace's
/// editors.
async fn may_write_leases(env: &TestEnv, tenant: &Tenant) {
    let ns = &tenant.namespace;
    let meta = |name: &str| ObjectMeta {
        name: Some(name.into()),
        namespace: Some(ns.clone()),
        ..Default::default()
    };
    Api::<Role>::namespaced(env.client.clone(), ns)
        .create(
            &PostParams::default(),
            &Role {
                metadata: meta("leases"),
                rules: Some(vec![PolicyRule {
                    api_groups: Some(vec!["coordination.k8s.io".into()]),
                    resources: Some(vec!["leases".into()]),
                    verbs: vec!["create".into()],
                    ..Default::default()
                }]),
            },
        )
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(env.client.clone(), ns)
        .create(
            &PostParams::default(),
            &RoleBinding {
                metadata: meta("tenant-leases"),
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "Role".into(),
                    name: "leases".into(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: "tenant".into(),
                    namespace: Some(ns.clone()),
                    ..Default::default()
                }]),
            },
        )
        .await
        .unwrap();
}

/// A tenant plants a held Lease named like copyrator's, publishing a forged policy (its own
/// namespace trusted, the team's excluded). `explain` without `--lease-namespace` learns
/// copyrator's namespace from its webhook configuration, finds exactly what it found before,
/// and names the planted Lease as ignored, saying nothing of what it holds.
#[tokio::test]
async fn a_lease_planted_by_a_tenant_changes_nothing_and_is_named_as_ignored() {
    let env = TestEnv::new().await;
    let id = env.id.clone();
    let src = env.namespace("exp-src", &[]).await;
    let team = env.namespace("exp-team", &[("explain-planted", &id)]).await;
    let own = env.namespace("exp-own", &[]).await;
    let tenant = Tenant::new(&env, "exp-tenant").await;
    let lease_name = env.name("copyrator");
    let trusted = format!("--trusted-namespaces={src}");
    let mut p = Process::spawn(&[
        "--leader-election=true",
        "--lease-namespace",
        &own,
        "--lease-name",
        &lease_name,
        "--lease-duration",
        "4s",
        "--resync-interval",
        "1s",
        &trusted,
    ]);
    p.wait_ready().await;
    p.wait_metric("copyrator_leader", "leading", |v| v == 1.0)
        .await;
    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(env.client.clone());
    configurations
        .create(
            &PostParams::default(),
            &webhook_configuration(&lease_name, &own),
        )
        .await
        .unwrap();

    // A trusted source reaches the team; the tenant's, which the team did not consent to, not.
    let sel = format!("explain-planted={id}");
    for (ns, name) in [(&src, "cred"), (&tenant.namespace, "grab")] {
        super::create(
            &env,
            ns,
            secret(
                name,
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &sel)],
                &[("v", "1")],
            ),
        )
        .await;
    }
    env.wait_value::<Secret>(&team, "cred", "v", "1").await;
    let explain = |with_namespace: bool| {
        let mut args = vec!["explain", "namespace", team.as_str(), "-o", "json"];
        args.extend(["--lease-name", lease_name.as_str()]);
        if with_namespace {
            args.extend(["--lease-namespace", own.as_str()]);
        }
        let args: Vec<String> = args.into_iter().map(String::from).collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = run_copyrator_with(&args, &[]).await;
            assert!(out.success, "explain failed: {}", out.stderr);
            (out.json(), out.stdout)
        }
    };
    let (before, _) = explain(true).await;
    let mut expected = vec![
        (
            format!("{src}/cred"),
            team.clone(),
            "SelectorMatches".to_string(),
            "InSync".to_string(),
            "None".to_string(),
            true,
        ),
        (
            format!("{}/grab", tenant.namespace),
            team.clone(),
            "NotConsented".to_string(),
            "Missing".to_string(),
            "None".to_string(),
            false,
        ),
    ];
    expected.sort();
    assert_eq!(verdicts(&before), expected, "{before:#}");

    // The tenant's Lease: held, renewed now, with a policy that would change both findings.
    may_write_leases(&env, &tenant).await;
    let forged = format!("{},forged-{id}", tenant.namespace);
    let planted: Lease = serde_json::from_value(json!({
        "metadata": {
            "name": lease_name,
            "annotations": {
                published::TRUSTED_NAMESPACES: forged,
                published::EXCLUDED_NAMESPACES: team,
                published::LAST_RESYNC: Timestamp::now().to_string(),
            },
        },
        "spec": {
            "holderIdentity": format!("copyrator-{id}"),
            "leaseDurationSeconds": 3600,
            "renewTime": Timestamp::now().to_string(),
        },
    }))
    .unwrap();
    Api::<Lease>::namespaced(tenant.client.clone(), &tenant.namespace)
        .create(&PostParams::default(), &planted)
        .await
        .expect("the tenant may create a Lease in its own namespace");

    for with_namespace in [false, true] {
        let (report, stdout) = explain(with_namespace).await;
        assert_eq!(verdicts(&report), expected, "{report:#}");
        assert_eq!(report["policy"]["from"], "Lease", "{report:#}");
        assert_eq!(report["policy"]["lease"]["namespace"], own.as_str());
        assert_eq!(report["policy"]["trustedNamespaces"], src.as_str());
        let ignored = format!("Lease {}/{lease_name} ignored", tenant.namespace);
        assert!(
            report["notes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n.as_str().is_some_and(|n| n.starts_with(&ignored))),
            "{report:#}"
        );
        assert!(
            !stdout.contains(&format!("forged-{id}")),
            "nothing the planted Lease says is printed: {stdout}"
        );
    }

    // Without a webhook configuration to learn copyrator's namespace from, explain asks for it.
    let out = run_copyrator_with(
        &[
            "explain",
            "namespace",
            &team,
            "--lease-name",
            &lease_name,
            "--webhook-configuration",
            &env.name("no-such-configuration"),
        ],
        &[],
    )
    .await;
    assert!(
        !out.success && out.stderr.contains("give --lease-namespace"),
        "{}",
        out.stderr
    );

    configurations
        .delete(&lease_name, &DeleteParams::default())
        .await
        .unwrap();
    p.terminate();
    env.cleanup().await;
}
