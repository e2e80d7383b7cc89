//! The Pod gate (SPEC §10), end to end: a Pod created the instant after its namespace finds
//! every copy it needs, also when another replica saw the namespace; image pull secrets are
//! injected where a rule asks and nowhere else (copyrator verifying the API server, SPEC
//! §9.8); a dryRun Pod writes nothing; copyrator down lets Pods through unchanged.

use crate::common;

use std::time::Duration;

use common::*;
use copyrator::{
    copyrule::{CopyRuleSpec, DeletionPolicy},
    marks,
    model::Kind,
};
use futures::StreamExt;
use k8s_openapi::{api::core::v1::Pod, apimachinery::pkg::apis::meta::v1::LabelSelector};
use kube::{Api, Client, api::PostParams};

pub(crate) const DRY_RUN_PODS: &str = "copyrator_admission_requests_total{endpoint=\"pods\",operation=\"CREATE\",outcome=\"dry_run\"}";

/// Dry-run Pod creates in `ns` until the gate at `metrics` counts one: the API server calls
/// the Pod gate.
pub(crate) async fn wait_for_pod_gate<F, Fut>(client: &Client, ns: &str, metric: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = f64>,
{
    let before = metric().await;
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let dry_run = PostParams {
        dry_run: true,
        field_manager: None,
    };
    eventually(
        Duration::from_secs(30),
        "the API server calling the Pod gate",
        || async {
            let _ = pods.create(&dry_run, &pod("probe", &[], None)).await;
            (metric().await > before).then_some(())
        },
    )
    .await;
}

/// 100 namespaces, 20 at a time, each labelled at creation and followed at once (same client,
/// no wait) by its ServiceAccount and a Pod; right after each Pod create returns, its copies
/// are read. Returns the namespaces where a copy was missing.
async fn storm(env: &TestEnv, key: &str) -> Vec<String> {
    futures::stream::iter(0..100)
        .map(|i| async move {
            let ns = env.namespace(&format!("storm-{i}"), &[(key, "on")]).await;
            service_account(&env.client, &ns).await;
            let admitted = create_pod(&env.client, &ns, &pod("app", &[], None)).await;
            let secret = env.secrets(&ns).get_opt("registry").await.unwrap();
            let bundle = env.config_maps(&ns).get_opt("ca-bundle").await.unwrap();
            let injected = pull_secret_names(&admitted) == ["registry"];
            (secret.is_none() || bundle.is_none() || !injected).then_some(ns)
        })
        .buffer_unordered(20)
        .filter_map(|m| async move { m })
        .collect::<Vec<_>>()
        .await
}

/// The sources of the storms: a pull secret and a CA bundle for namespaces labelled `key=on`.
async fn storm_sources(env: &TestEnv, key: &str) {
    let src = env.namespace("gate-src", &[]).await;
    let selector = format!("{key}=on");
    env.secrets(&src)
        .create(
            &PostParams::default(),
            &registry_secret("registry", &selector, true),
        )
        .await
        .unwrap();
    env.config_maps(&src)
        .create(
            &PostParams::default(),
            &config_map(
                "ca-bundle",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &selector)],
                &[("ca.crt", "-----BEGIN CERTIFICATE-----")],
            ),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn every_pod_finds_its_copies_in_a_storm_of_new_namespaces() {
    let Some(opts) = Options::default().verifying() else {
        return;
    };
    let t = Harness::start(opts).await;
    let key = t.name("storm");
    storm_sources(&t, &key).await;
    let probe = t.namespace("probe", &[]).await;
    service_account(&t.client, &probe).await;
    wait_for_pod_gate(&t.client, &probe, || t.metric(DRY_RUN_PODS)).await;

    let missing = storm(&t, &key).await;
    assert!(
        missing.is_empty(),
        "{} of 100 Pods were admitted before their copies existed: {missing:?}",
        missing.len()
    );
    for outcome in ["timeout", "error", "unsettled"] {
        let sample = format!("copyrator_pod_gate_total{{outcome=\"{outcome}\"}}");
        assert_eq!(t.metric(&sample).await, 0.0, "{outcome}");
    }
    t.finish().await;
}

#[tokio::test]
async fn the_pod_gate_holds_its_promise_on_another_replica_than_the_namespace_webhook() {
    // Replica A answers the Namespace (and source) webhooks, replica B the Pod gate.
    // Both verify the API server (`--client-ca`): B's answers carry the pull secrets.
    let Some(verifying) = Options::default().verifying() else {
        return;
    };
    let opts = || Options {
        webhooks: false,
        extra: verifying.extra.clone(),
        ..Default::default()
    };
    let t = Harness::start(opts()).await;
    let b = Copyrator::start(opts()).await;
    let url = |c: &Copyrator| format!("https://127.0.0.1:{}", c.running().webhook_addr.port());
    t.webhooks_registered();
    register_split(
        &t.client,
        (&url(t.copyrator()), &t.copyrator().ca),
        (&url(&b), &b.ca),
    )
    .await;
    let probe = t.namespace("probe", &[]).await;
    service_account(&t.client, &probe).await;
    wait_for_pod_gate(&t.client, &probe, || b.metric(DRY_RUN_PODS)).await;
    let key = t.name("split");
    storm_sources(&t, &key).await;

    let missing = storm(&t, &key).await;
    assert!(
        missing.is_empty(),
        "{} of 100 Pods admitted by replica B before their copies existed: {missing:?}",
        missing.len()
    );
    let on_b = |o: &str| format!("copyrator_pod_gate_total{{outcome=\"{o}\"}}");
    // B answered from its own work: a sync of its own, or the namespace job its own watch
    // started, which the gate joins (SPEC §10.2; counted as `cached`). Never by giving up.
    let mut answered = 0.0;
    for outcome in ["wrote", "settled", "cached"] {
        answered += b.metric(&on_b(outcome)).await;
    }
    assert!(
        answered >= 100.0,
        "B answered {answered} of 100 Pods from its own syncs or jobs"
    );
    for outcome in ["timeout", "error", "unsettled"] {
        assert_eq!(b.metric(&on_b(outcome)).await, 0.0, "{outcome}");
    }
    assert_eq!(
        t.metric("copyrator_admission_requests_total{endpoint=\"pods\",operation=\"CREATE\",outcome=\"allowed\"}")
            .await,
        0.0,
        "A answered no Pod"
    );
    b.stop().await;
    t.finish().await;
}

#[tokio::test]
async fn pull_secrets_are_injected_where_a_rule_asks_and_nowhere_else() {
    let Some(opts) = Options::default().verifying() else {
        return;
    };
    let t = Harness::start(opts).await;
    let key = t.name("inject");
    let selector = format!("{key}=on");
    let src = t.namespace("inject-src", &[]).await;
    // Two pull-type sources for the same namespaces; only one asks to be injected.
    for (name, pull) in [("registry", true), ("mirror", false)] {
        t.secrets(&src)
            .create(
                &PostParams::default(),
                &registry_secret(name, &selector, pull),
            )
            .await
            .unwrap();
    }
    // A CopyRule asking for injection, under another name.
    let mut spec = CopyRuleSpec {
        clusters: None,
        api_version: None,
        kind: Kind::Secret.as_str().into(),
        source_namespace: src.clone(),
        sources: None,
        drop_expired: false,
        template: None,
        create_once: false,
        source_name: Some("mirror".into()),
        source_selector: None,
        namespace_selector: Some(LabelSelector {
            match_labels: Some([(key.clone(), "on".to_string())].into()),
            match_expressions: None,
        }),
        namespaces: vec![],
        exclude_namespaces: vec![],
        target_name: Some("mirror-pull".into()),
        deletion_policy: DeletionPolicy::Delete,
        conflict_policy: Default::default(),
        image_pull_secret: true,
        read_only: None,
        keys: None,
        target: None,
    };
    t.copy_rule("inject", spec.clone()).await;
    let ns = t.namespace("inject", &[(&key, "on")]).await;
    let other = t.namespace("inject-other", &[]).await;
    for n in [&ns, &other] {
        service_account(&t.client, n).await;
    }
    wait_for_pod_gate(&t.client, &ns, || t.metric(DRY_RUN_PODS)).await;

    let plain = create_pod(&t.client, &ns, &pod("plain", &[], None)).await;
    assert_eq!(pull_secret_names(&plain), ["mirror-pull", "registry"]);
    for name in ["registry", "mirror-pull"] {
        let copy = t.secrets(&ns).get(name).await.unwrap();
        assert_eq!(
            copy.type_.as_deref(),
            Some("kubernetes.io/dockerconfigjson")
        );
    }
    let own = create_pod(
        &t.client,
        &ns,
        &pod("own", &["own-creds", "registry"], None),
    )
    .await;
    assert_eq!(
        pull_secret_names(&own),
        ["own-creds", "registry", "mirror-pull"],
        "existing entries kept, none twice"
    );
    let opted_out = create_pod(&t.client, &ns, &pod("opted-out", &[], Some("false"))).await;
    assert!(pull_secret_names(&opted_out).is_empty());
    let elsewhere = create_pod(&t.client, &other, &pod("elsewhere", &[], None)).await;
    assert!(
        pull_secret_names(&elsewhere).is_empty(),
        "no rule targets it"
    );

    // The annotation on a Secret of another type, and the field on a ConfigMap rule, are refused.
    let mut opaque = registry_secret("opaque", &selector, true);
    opaque.type_ = Some("Opaque".into());
    let err = t
        .secrets(&src)
        .create(&PostParams::default(), &opaque)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains(marks::IMAGE_PULL_SECRET_ANNOTATION),
        "{err}"
    );
    spec.kind = "ConfigMap".into();
    let err = t
        .rules()
        .create(
            &PostParams::default(),
            &copyrator::copyrule::CopyRule::new(&t.name("cm-pull"), spec),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("spec.imagePullSecret"), "{err}");
    t.finish().await;
}

/// A namespace job finds the pull secret it just wrote in sync when it looks again, and knows
/// its type from the rule and the source's version it copied: new namespaces' Pods get the
/// pull secret, and no copy is read back to learn its type (one GET per new namespace
/// before).
#[tokio::test]
async fn a_new_namespace_pull_secret_is_injected_without_reading_it_back() {
    let Some(opts) = Options::default().verifying() else {
        return;
    };
    let t = Harness::start(opts).await;
    let key = t.name("noread");
    let src = t.namespace("noread-src", &[]).await;
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &registry_secret("registry", &format!("{key}=on"), true),
        )
        .await
        .unwrap();
    let probe = t.namespace("noread-probe", &[]).await;
    service_account(&t.client, &probe).await;
    wait_for_pod_gate(&t.client, &probe, || t.metric(DRY_RUN_PODS)).await;

    const READS: &str = "copyrator_api_requests_total{verb=\"get\",resource=\"secrets\"}";
    let before = t.metric(READS).await;
    for i in 0..3 {
        let ns = t.namespace(&format!("noread-{i}"), &[(&key, "on")]).await;
        service_account(&t.client, &ns).await;
        t.wait_for::<k8s_openapi::api::core::v1::Secret>(&ns, "registry", "copied", |_| true)
            .await;
        // The namespace job's second look has run once its namespace is recorded settled; a
        // Pod created before that is answered by the gate's own sync, which looks the same way.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let p = create_pod(&t.client, &ns, &pod("app", &[], None)).await;
        assert_eq!(pull_secret_names(&p), ["registry"], "in {ns}");
    }
    let reads = t.metric(READS).await - before;
    assert_eq!(
        reads, 0.0,
        "Secrets read while three namespaces were set up"
    );
    t.finish().await;
}

/// The arguments of a replica that does not lead: it elects with the Lease `held` in
/// `leases`, which [`lease_held_elsewhere`] gives another holder.
pub(crate) fn follower_of(leases: &str) -> Vec<String> {
    [
        "--leader-election=true",
        "--lease-namespace",
        leases,
        "--lease-name",
        "held",
    ]
    .map(String::from)
    .to_vec()
}

/// A Lease in `ns` named `name`, held for an hour by another replica: a copyrator started
/// with it follows, so neither its watches nor its reconciler make copies on their own (the
/// Pod gate answers on every replica).
pub(crate) async fn lease_held_elsewhere(client: &Client, ns: &str, name: &str) {
    use k8s_openapi::api::coordination::v1::Lease;
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "holderIdentity": "another-replica",
            "leaseDurationSeconds": 3600,
            "acquireTime": k8s_openapi::jiff::Timestamp::now().to_string(),
            "renewTime": k8s_openapi::jiff::Timestamp::now().to_string(),
        },
    }))
    .unwrap();
    Api::<Lease>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_dry_run_pod_writes_no_copy_and_a_real_one_does() {
    // Only the Pod gate is registered, on a replica that does not lead: nothing else makes
    // the copy.
    let env = TestEnv::new().await;
    let leases = env.namespace("dry-lease", &[]).await;
    lease_held_elsewhere(&env.client, &leases, "held").await;
    let Some(opts) = (Options {
        webhooks: false,
        extra: follower_of(&leases),
        ..Default::default()
    })
    .verifying() else {
        return;
    };
    let t = Harness::start_in(env, opts).await;
    // Its startup resync would make the copy on its own: let it finish first.
    t.wait_startup_resync().await;
    t.webhooks_registered();
    register_pod_gate(
        &t.client,
        &format!(
            "https://127.0.0.1:{}",
            t.copyrator().running().webhook_addr.port()
        ),
        &t.copyrator().ca,
    )
    .await;
    let key = t.name("dry");
    let src = t.namespace("dry-src", &[]).await;
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &registry_secret("registry", &format!("{key}=on"), true),
        )
        .await
        .unwrap();
    let ns = t.namespace("dry", &[(&key, "on")]).await;
    service_account(&t.client, &ns).await;
    wait_for_pod_gate(&t.client, &ns, || t.metric(DRY_RUN_PODS)).await;

    let dry_run = PostParams {
        dry_run: true,
        field_manager: None,
    };
    let pods = Api::<Pod>::namespaced(t.client.clone(), &ns);
    let admitted = pods.create(&dry_run, &pod("app", &[], None)).await.unwrap();
    assert!(
        pull_secret_names(&admitted).is_empty(),
        "nothing known to inject"
    );
    stays(
        Duration::from_secs(1),
        "no copy after a dryRun Pod",
        || async { t.secrets(&ns).get_opt("registry").await.unwrap().is_none() },
    )
    .await;

    let admitted = create_pod(&t.client, &ns, &pod("app", &[], None)).await;
    assert!(t.secrets(&ns).get_opt("registry").await.unwrap().is_some());
    assert_eq!(pull_secret_names(&admitted), ["registry"]);
    assert_eq!(
        t.metric("copyrator_pod_gate_total{outcome=\"wrote\"}")
            .await,
        1.0
    );
    t.finish().await;
}

#[tokio::test]
async fn with_copyrator_down_pods_are_admitted_unchanged() {
    let mut t = Harness::start(Options::default()).await;
    let key = t.name("down");
    let src = t.namespace("down-src", &[]).await;
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &registry_secret("registry", &format!("{key}=on"), true),
        )
        .await
        .unwrap();
    let ns = t.namespace("down", &[(&key, "on")]).await;
    service_account(&t.client, &ns).await;
    // Its webhook configurations stay; nothing answers them.
    t.kill().await;
    let admitted = create_pod(&t.client, &ns, &pod("app", &["own"], None)).await;
    assert_eq!(pull_secret_names(&admitted), ["own"], "unchanged");
    t.finish().await;
}

/// A tenant edits its own source every 100 ms (SPEC §10.2): its rule reaches no namespace (none
/// consents), so its events forget nothing the Pod gate knows. 100 Pods across 20 namespaces
/// are admitted with their pull secret, most answered from memory (without the fix, every edit
/// forgot every namespace and sent nearly every Pod down the slow path).
#[tokio::test]
async fn a_tenant_editing_its_source_cannot_blind_the_pod_gate() {
    let env = TestEnv::new().await;
    let tenant = common::tenant::Tenant::new(&env, "tenant-a").await;
    let platform = env.namespace("gate-platform", &[]).await;
    let key = env.name("blind");
    let selector = format!("{key}=on");
    let mut namespaces = Vec::new();
    for i in 0..20 {
        let ns = env.namespace(&format!("blind-{i}"), &[(&key, "on")]).await;
        service_account(&env.client, &ns).await;
        namespaces.push(ns);
    }
    let Some(opts) = (Options {
        extra: vec![format!("--trusted-namespaces={platform}")],
        ..Default::default()
    })
    .verifying() else {
        return;
    };
    let t = Harness::start_in(env, opts).await;
    t.secrets(&platform)
        .create(
            &PostParams::default(),
            &registry_secret("registry", &selector, true),
        )
        .await
        .unwrap();
    for ns in &namespaces {
        t.wait_for::<k8s_openapi::api::core::v1::Secret>(ns, "registry", "copied", |_| true)
            .await;
    }
    // The tenant's match-all source, which no namespace consents to.
    tenant
        .secrets(&tenant.namespace)
        .create(
            &PostParams::default(),
            &secret(
                "noise",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, "!no-such-label")],
                &[("k", "v")],
            ),
        )
        .await
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let edits = {
        let api = tenant.secrets(&tenant.namespace);
        let stop = std::sync::Arc::clone(&stop);
        tokio::spawn(async move {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                n += 1;
                let patch = serde_json::json!({"metadata": {"annotations": {"example.com/tick": n.to_string()}}});
                api.patch(
                    "noise",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await
                .expect("the tenant edits its own source");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            n
        })
    };
    let cached = "copyrator_pod_gate_total{outcome=\"cached\"}";
    let before = t.metric(cached).await;
    // Five rounds over the 20 namespaces, a Pod every 25 ms: ~2.5 s, ~25 edits.
    let mut missing = Vec::new();
    for round in 0..5 {
        for ns in &namespaces {
            let admitted =
                create_pod(&t.client, ns, &pod(&format!("app-{round}"), &[], None)).await;
            if pull_secret_names(&admitted) != ["registry"] {
                missing.push(format!("{ns}/app-{round}"));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let ticks = edits.await.unwrap();
    assert!(ticks >= 15, "the tenant edited its source {ticks} times");
    assert!(
        missing.is_empty(),
        "admitted without the pull secret: {missing:?}"
    );
    // At most the first Pod of each namespace was synced; the rest came from memory.
    let from_memory = t.metric(cached).await - before;
    assert!(
        from_memory >= 70.0,
        "only {from_memory} of 100 Pods answered from memory"
    );
    t.finish().await;
}

/// Namespace bootstrap (SPEC §10.1 with §3.1): 50 new namespaces, each followed at once by a
/// Pod, every Pod admitted with the namespace's default-deny NetworkPolicy, LimitRange and
/// pull secret already there.
#[tokio::test]
async fn every_pod_finds_its_bootstrap_objects_in_a_storm_of_new_namespaces() {
    use k8s_openapi::api::{core::v1::LimitRange, networking::v1::NetworkPolicy};
    use serde_json::json;
    let Some(opts) = (Options {
        extra: vec!["--copy-kinds=NetworkPolicy.networking.k8s.io,LimitRange".into()],
        ..Default::default()
    })
    .verifying() else {
        return;
    };
    let t = Harness::start(opts).await;
    let key = t.name("boot");
    let src = t.namespace("boot-src", &[]).await;
    let selector = format!("{key}=on");
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &registry_secret("registry", &selector, true),
        )
        .await
        .unwrap();
    let create = PostParams::default();
    let np: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": "default-deny"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}
    }))
    .unwrap();
    Api::<NetworkPolicy>::namespaced(t.client.clone(), &src)
        .create(&create, &np)
        .await
        .unwrap();
    let lr: LimitRange = serde_json::from_value(json!({
        "metadata": {"name": "defaults"},
        "spec": {"limits": [{"type": "Container", "default": {"memory": "256Mi"}}]}
    }))
    .unwrap();
    Api::<LimitRange>::namespaced(t.client.clone(), &src)
        .create(&create, &lr)
        .await
        .unwrap();
    for (api_version, kind, name) in [
        ("networking.k8s.io/v1", "NetworkPolicy", "default-deny"),
        ("v1", "LimitRange", "defaults"),
    ] {
        let spec: CopyRuleSpec = serde_json::from_value(json!({
            "apiVersion": api_version, "kind": kind, "sourceNamespace": src, "sourceName": name,
            "namespaceSelector": {"matchLabels": {&key: "on"}},
        }))
        .unwrap();
        t.copy_rule(&format!("boot-{}", kind.to_lowercase()), spec)
            .await;
    }
    let probe = t.namespace("probe", &[]).await;
    service_account(&t.client, &probe).await;
    wait_for_pod_gate(&t.client, &probe, || t.metric(DRY_RUN_PODS)).await;

    let missing: Vec<String> = futures::stream::iter(0..50)
        .map(|i| {
            let (t, key) = (&t, &key);
            async move {
                let ns = t.namespace(&format!("boot-{i}"), &[(key, "on")]).await;
                service_account(&t.client, &ns).await;
                let admitted = create_pod(&t.client, &ns, &pod("app", &[], None)).await;
                let np = Api::<NetworkPolicy>::namespaced(t.client.clone(), &ns)
                    .get_opt("default-deny")
                    .await
                    .unwrap();
                let lr = Api::<LimitRange>::namespaced(t.client.clone(), &ns)
                    .get_opt("defaults")
                    .await
                    .unwrap();
                let secret = t.secrets(&ns).get_opt("registry").await.unwrap();
                let injected = pull_secret_names(&admitted) == ["registry"];
                (np.is_none() || lr.is_none() || secret.is_none() || !injected).then_some(ns)
            }
        })
        .buffer_unordered(10)
        .filter_map(|m| async move { m })
        .collect()
        .await;
    assert!(
        missing.is_empty(),
        "{} of 50 Pods were admitted before their bootstrap objects existed: {missing:?}",
        missing.len()
    );
    t.finish().await;
}
