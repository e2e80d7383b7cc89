//! Tenancy (SPEC §9), end to end with a real tenant identity: a ServiceAccount token whose Role
//! allows Secrets in its own namespace only. No copy lands in a namespace that did not consent,
//! the platform's sources win names a tenant took first, and nothing a tenant can read names
//! objects it could not.

mod common;

use std::collections::BTreeMap;

use common::{tenant::Tenant, *};
use copyrator::{
    copyrule::{CopyRule, CopyRuleSpec, DeletionPolicy},
    marks,
    model::Kind,
};
use k8s_openapi::{
    ByteString,
    api::core::v1::{Event, Namespace, Secret},
};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

/// copyrator trusting only `platform`.
async fn copyrator_trusting(namespaces: &str) -> Copyrator {
    Copyrator::start(Options {
        extra: vec![format!("--trusted-namespaces={namespaces}")],
        ..Default::default()
    })
    .await
}

fn cacerts(value: &str, annotations: &[(&str, &str)]) -> Secret {
    secret(
        "cacerts",
        &[(marks::SOURCE_LABEL, "true")],
        annotations,
        &[("ca.crt", value)],
    )
}

async fn copy_value(env: &TestEnv, ns: &str) -> Option<String> {
    let s = env.secrets(ns).get_opt("cacerts").await.ok()??;
    secret_value(&s, "ca.crt")
}

async fn wait_copy(env: &TestEnv, ns: &str, want: &str) -> Secret {
    eventually(
        CONVERGE,
        &format!("{ns}/cacerts holding {want}"),
        || async {
            env.secrets(ns)
                .get_opt("cacerts")
                .await
                .ok()
                .flatten()
                .filter(|s| secret_value(s, "ca.crt").as_deref() == Some(want))
        },
    )
    .await
}

async fn assert_no_copy(env: &TestEnv, namespaces: &[&str]) {
    for ns in namespaces {
        assert!(
            env.secrets(ns).get_opt("cacerts").await.unwrap().is_none(),
            "no copy may land in {ns}"
        );
    }
}

/// Warning Events with `reason` on the source `cacerts` in `ns`, newest last.
async fn source_events(env: &TestEnv, ns: &str, reason: &str) -> Vec<Event> {
    let mut events: Vec<Event> = Api::<Event>::namespaced(env.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.name.as_deref() == Some("cacerts")
                && e.reason.as_deref() == Some(reason)
                && e.type_.as_deref() == Some("Warning")
        })
        .collect();
    events.sort_by_key(|e| e.metadata.creation_timestamp.clone());
    events
}

/// Waits for a Warning Event on the tenant's source whose message satisfies `check`: the sign
/// that copyrator planned the source and decided, before asserting what it did not write.
async fn wait_event(env: &TestEnv, ns: &str, reason: &str, check: impl Fn(&str) -> bool) -> String {
    eventually(CONVERGE, &format!("a {reason} Event in {ns}"), || async {
        source_events(env, ns, reason)
            .await
            .into_iter()
            .filter_map(|e| e.message)
            .find(|m| check(m))
    })
    .await
}

async fn annotate(env: &TestEnv, ns: &str, accept_from: Option<&str>) {
    Api::<Namespace>::all(env.client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                marks::ACCEPT_FROM_ANNOTATION: accept_from
            }}})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_tenant_cannot_push_into_namespaces_that_did_not_consent() {
    let env = TestEnv::new().await;
    let tenant = Tenant::new(&env, "tenant-a").await;
    let platform = env.namespace("platform", &[]).await;
    let istio = env.namespace("istio-system", &[]).await;
    let labelled = env.namespace("labelled", &[("registry", "enabled")]).await;
    let copyrator = copyrator_trusting(&platform).await;

    // The identity is real: the API server refuses the tenant outside its namespace.
    let refused = tenant
        .secrets(&istio)
        .create(&PostParams::default(), &cacerts("x", &[]))
        .await
        .expect_err("the tenant may not write in istio-system");
    assert!(refused.to_string().contains("forbidden"), "{refused}");

    // Explicit push: kubectl shows why at once; no copy lands.
    let manifest = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: cacerts\n  namespace: {}\n  labels:\n    {}: \"true\"\n  annotations:\n    {}: {istio}\nstringData:\n  ca.crt: tenant\n",
        tenant.namespace,
        marks::SOURCE_LABEL,
        marks::NAMESPACES_ANNOTATION
    );
    let (ok, stderr) = tenant.kubectl_apply(&manifest).await;
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "Warning: namespace {istio} does not accept copies from {}",
            tenant.namespace
        )),
        "kubectl shows the refusal: {stderr}"
    );
    let note = wait_event(&env, &tenant.namespace, "CopyRefused", |m| {
        m.starts_with("1 target namespace gets no copy")
    })
    .await;
    assert!(
        !note.contains(&istio),
        "the Event names no namespace: {note}"
    );
    assert_no_copy(&env, &[&istio]).await;

    // A match-all selector: refused everywhere, also in namespaces that match by label.
    tenant
        .secrets(&tenant.namespace)
        .patch(
            "cacerts",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                marks::NAMESPACES_ANNOTATION: null,
                marks::NAMESPACE_SELECTOR_ANNOTATION: "!no-such-label",
            }}})),
        )
        .await
        .unwrap();
    wait_event(&env, &tenant.namespace, "CopyRefused", |m| {
        m.split(' ')
            .next()
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| n >= 4)
    })
    .await;
    assert_no_copy(&env, &[&istio, &labelled, &platform, "default"]).await;
    assert!(copyrator.metric("copyrator_refused_targets_total").await >= 5.0);

    // Consent: istio-system accepts tenant-a, and gets its copy; the others still do not.
    annotate(&env, &istio, Some(&format!("other, {}", tenant.namespace))).await;
    wait_copy(&env, &istio, "tenant").await;
    assert_no_copy(&env, &[&labelled, &platform]).await;

    // Consent withdrawn: the copy goes.
    annotate(&env, &istio, None).await;
    eventually(CONVERGE, "the copy in istio-system deleted", || async {
        copy_value(&env, &istio).await.is_none().then_some(())
    })
    .await;

    copyrator.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn the_platform_source_wins_a_name_a_tenant_took_first() {
    let env = TestEnv::new().await;
    let tenant = Tenant::new(&env, "tenant-a").await;
    let platform = env.namespace("platform", &[]).await;
    let shared = env.namespace("shared", &[]).await;
    let apps = env.namespace("apps", &[]).await;
    annotate(&env, &shared, Some("tenant-*")).await;
    let copyrator = copyrator_trusting(&platform).await;
    let targets = format!("{shared},{apps}");

    // The tenant is first, in a namespace that accepts it and in one that does not.
    tenant
        .secrets(&tenant.namespace)
        .create(
            &PostParams::default(),
            &cacerts("tenant", &[(marks::NAMESPACES_ANNOTATION, &targets)]),
        )
        .await
        .unwrap();
    wait_copy(&env, &shared, "tenant").await;
    wait_event(&env, &tenant.namespace, "CopyRefused", |_| true).await;
    assert_no_copy(&env, &[&apps]).await;

    // The platform's source for the same name: it takes both over, the tenant's copy too.
    env.secrets(&platform)
        .create(
            &PostParams::default(),
            &cacerts("platform", &[(marks::NAMESPACES_ANNOTATION, &targets)]),
        )
        .await
        .unwrap();
    let taken = wait_copy(&env, &shared, "platform").await;
    wait_copy(&env, &apps, "platform").await;
    let annotations = taken.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get(marks::SOURCE_ANNOTATION),
        Some(&format!("{platform}/cacerts"))
    );
    let platform_uid = env
        .secrets(&platform)
        .get("cacerts")
        .await
        .unwrap()
        .metadata
        .uid;
    assert_eq!(
        taken
            .metadata
            .labels
            .unwrap_or_default()
            .get(marks::SOURCE_UID_LABEL),
        platform_uid.as_ref()
    );

    // The tenant hears that it lost the name, without learning who has it.
    let note = wait_event(&env, &tenant.namespace, "CopyConflict", |_| true).await;
    assert!(
        note.contains("higher precedence") && !note.contains(&platform) && !note.contains(&shared),
        "{note}"
    );

    // Changing its source gets the tenant nothing back.
    let conflicts = "copyrator_conflicts_total{reason=\"other_rule\"}";
    let before = copyrator.metric(conflicts).await;
    let mut changed = tenant
        .secrets(&tenant.namespace)
        .get("cacerts")
        .await
        .unwrap();
    changed.data = Some(BTreeMap::from([(
        "ca.crt".to_string(),
        ByteString(b"tenant-2".to_vec()),
    )]));
    tenant
        .secrets(&tenant.namespace)
        .replace("cacerts", &PostParams::default(), &changed)
        .await
        .unwrap();
    eventually(CONVERGE, "the tenant's change planned", || async {
        (copyrator.metric(conflicts).await > before).then_some(())
    })
    .await;
    assert_eq!(copy_value(&env, &shared).await.as_deref(), Some("platform"));

    copyrator.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn a_retained_copy_is_not_taken_over_by_a_tenant() {
    let env = TestEnv::new().await;
    let tenant = Tenant::new(&env, "tenant-a").await;
    let platform = env.namespace("platform", &[]).await;
    let shared = env.namespace("shared", &[]).await;
    annotate(&env, &shared, Some(&tenant.namespace)).await;
    let copyrator = copyrator_trusting(&platform).await;

    // A CopyRule copies the platform's cacerts with Retain, then goes away: the copy stays.
    env.secrets(&platform)
        .create(
            &PostParams::default(),
            &secret("cacerts", &[], &[], &[("ca.crt", "platform")]),
        )
        .await
        .unwrap();
    let rules: Api<CopyRule> = Api::all(env.client.clone());
    let name = env.name("retain");
    env.track_copy_rule(&name);
    rules
        .create(
            &PostParams::default(),
            &CopyRule::new(
                &name,
                CopyRuleSpec {
                    kind: Kind::Secret,
                    source_namespace: platform.clone(),
                    source_name: Some("cacerts".into()),
                    source_selector: None,
                    namespace_selector: None,
                    namespaces: vec![shared.clone()],
                    exclude_namespaces: vec![],
                    target_name: None,
                    deletion_policy: DeletionPolicy::Retain,
                    conflict_policy: Default::default(),
                },
            ),
        )
        .await
        .unwrap();
    wait_copy(&env, &shared, "platform").await;
    let rule_jobs = "copyrator_jobs_total{kind=\"rule\",outcome=\"ok\"}";
    let before = copyrator.metric(rule_jobs).await;
    rules.delete(&name, &Default::default()).await.unwrap();
    eventually(CONVERGE, "the deleted rule synced", || async {
        (copyrator.metric(rule_jobs).await > before).then_some(())
    })
    .await;

    // The tenant, welcome in `shared`, asks for the same name: the retained copy is kept.
    tenant
        .secrets(&tenant.namespace)
        .create(
            &PostParams::default(),
            &cacerts("tenant", &[(marks::NAMESPACES_ANNOTATION, &shared)]),
        )
        .await
        .unwrap();
    let note = wait_event(&env, &tenant.namespace, "CopyConflict", |_| true).await;
    assert!(
        note.contains("retained copy of higher precedence") && !note.contains(&name),
        "{note}"
    );
    let copy = env.secrets(&shared).get("cacerts").await.unwrap();
    assert_eq!(secret_value(&copy, "ca.crt").as_deref(), Some("platform"));
    assert_eq!(
        copy.metadata
            .annotations
            .unwrap_or_default()
            .get(marks::RULE_ANNOTATION),
        Some(&format!("copyrule/{name}"))
    );

    copyrator.stop().await;
    env.cleanup().await;
}

/// `--trusted-namespaces '*'`: every source is trusted, as on a single-team cluster.
#[tokio::test]
async fn trusting_every_namespace_copies_without_consent() {
    let env = TestEnv::new().await;
    let tenant = Tenant::new(&env, "team").await;
    let apps = env.namespace("apps", &[]).await;
    let copyrator = copyrator_trusting("*").await;
    tenant
        .secrets(&tenant.namespace)
        .create(
            &PostParams::default(),
            &cacerts("team", &[(marks::NAMESPACES_ANNOTATION, &apps)]),
        )
        .await
        .unwrap();
    wait_copy(&env, &apps, "team").await;
    // The job that wrote the copy has finished (and published what it had to say).
    eventually(CONVERGE, "the source job finished", || async {
        (copyrator
            .metric("copyrator_jobs_total{kind=\"source\",outcome=\"ok\"}")
            .await
            >= 1.0)
            .then_some(())
    })
    .await;
    assert!(
        source_events(&env, &tenant.namespace, "CopyRefused")
            .await
            .is_empty()
    );
    copyrator.stop().await;
    env.cleanup().await;
}
