//! copyrator's own certificates (`--tls-secret`, SPEC §6.4) against the real API server: the
//! CA and serving certificate issued into the Secret, the CA published into copyrator's
//! webhook configurations, rotations (by expiry and by hand) while the API server keeps
//! calling every webhook with `failurePolicy: Fail` — so a single call that failed its TLS
//! check would fail the write that made it.

mod common;

use std::time::{Duration, Instant};

use base64::Engine;
use common::{Copyrator, Options, TestEnv, eventually, pod, service_account};
use copyrator::{
    certs::{inspect, manager},
    manifests::{self, WebhookOptions, WebhookTarget},
};
use k8s_openapi::{
    api::{
        admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration},
        core::v1::{Namespace, Pod, Secret},
    },
    apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta},
};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

const SECRET: &str = "copyrator-webhook-certs";

/// The test's own webhook configurations: copyrator's, the validating webhooks pointing at
/// `validating` and the Pod gate at `mutating`, with an empty caBundle (copyrator fills it),
/// `failurePolicy: Fail`, and only for objects labelled `rotation-test=<id>` (other tests'
/// objects never reach them, even if this test fails and leaves them registered: CopyRules are
/// cluster-scoped, so a namespace selector would not keep them out).
async fn register(client: &Client, name: &str, validating: &str, mutating: &str, id: &str) {
    let opts = |base: &str| WebhookOptions {
        name: name.into(),
        target: WebhookTarget::Url(base.into()),
        ca_bundle: Vec::new(),
        exclude_namespaces: vec!["kube-system".into()],
        timeout_seconds: 5,
    };
    let only_ours = LabelSelector {
        match_labels: Some([("rotation-test".to_string(), id.to_string())].into()),
        ..Default::default()
    };
    let mut validating = manifests::webhook_configuration(&opts(validating));
    for h in validating.webhooks.iter_mut().flatten() {
        h.failure_policy = Some("Fail".into());
        if h.name.starts_with("namespaces.") || h.name.starts_with("rules.") {
            h.object_selector = Some(only_ours.clone());
        } else {
            h.namespace_selector = Some(only_ours.clone());
        }
    }
    let mut mutating = manifests::pod_gate_configuration(&opts(mutating));
    for h in mutating.webhooks.iter_mut().flatten() {
        h.failure_policy = Some("Fail".into());
        h.namespace_selector = Some(only_ours.clone());
    }
    let pp = PostParams::default();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&pp, &validating)
        .await
        .unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&pp, &mutating)
        .await
        .unwrap();
}

async fn unregister(client: &Client, name: &str) {
    let dp = DeleteParams::default();
    let _ = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(name, &dp)
        .await;
    let _ = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete(name, &dp)
        .await;
}

/// Every caBundle of the two configurations, as the API server holds them.
async fn bundles(client: &Client, name: &str) -> Vec<Vec<u8>> {
    let v = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get(name)
        .await
        .unwrap();
    let m = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get(name)
        .await
        .unwrap();
    let mut out: Vec<Vec<u8>> = v
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .map(|h| h.client_config.ca_bundle.map(|b| b.0).unwrap_or_default())
        .collect();
    out.extend(
        m.webhooks
            .unwrap_or_default()
            .into_iter()
            .map(|h| h.client_config.ca_bundle.map(|b| b.0).unwrap_or_default()),
    );
    out
}

fn data(secret: &Secret, key: &str) -> Vec<u8> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .unwrap_or_default()
}

/// The fingerprint of the certificate copyrator's webhook port serves, checked against `ca`;
/// `None` if the handshake fails (not verified by `ca`, or no certificate served yet: a
/// replica refuses handshakes until it has one).
async fn served_fingerprint(port: u16, ca: &[u8]) -> Option<[u8; 32]> {
    let tls = common::try_webhook_tls(port, ca).await.ok()?;
    let der = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    Some(inspect::CertFacts::from_der(&der).unwrap().fingerprint)
}

#[tokio::test]
async fn webhooks_keep_answering_across_certificate_rotations() {
    let env = TestEnv::new().await;
    let id = env.id.clone();
    let own = env.namespace("certs", &[]).await;
    let config = env.name("copyrator-rotation");
    let ours = ("rotation-test", id.as_str());
    let target_label = ("rotation-target", id.as_str());

    // Short lives so that rotations happen within the test: a CA lives 24 s (a new one after
    // 16 s), a serving certificate 12 s (a new one after 8 s); each step waits 2 s for the
    // previous one to reach the API server and the replicas. Two replicas: one looks every
    // 200 ms and answers the validating webhooks. The other answers the Pod gate; it looks
    // every second and gives each step 3 s, so it never takes a rotation step first: it
    // follows, serving each new certificate up to a second late — were an old CA dropped
    // before every replica serves the new certificate, Pod creates would fail.
    let replica = |interval: &str, propagation: &str| Options {
        webhooks: false,
        extra: [
            "--tls-secret",
            SECRET,
            "--tls-secret-namespace",
            &own,
            "--tls-ips",
            "127.0.0.1",
            "--webhook-configuration",
            &config,
            "--ca-validity",
            "24s",
            "--cert-validity",
            "12s",
            "--cert-propagation",
            propagation,
            "--cert-check-interval",
            interval,
        ]
        .map(String::from)
        .to_vec(),
        ..Default::default()
    };
    let copyrator = Copyrator::start(replica("200ms", "2s")).await;
    let slow = Copyrator::start(replica("1s", "3s")).await;
    let port = copyrator.running().webhook_addr.port();
    let slow_port = slow.running().webhook_addr.port();
    register(
        &env.client,
        &config,
        &format!("https://127.0.0.1:{port}"),
        &format!("https://127.0.0.1:{slow_port}"),
        &id,
    )
    .await;

    // Issued and published: the Secret holds a CA, its key and a serving pair; every webhook
    // trusts exactly the Secret's CA bundle; the port serves the Secret's certificate.
    let secrets = env.secrets(&own);
    let secret = eventually(
        Duration::from_secs(20),
        "the certificate Secret",
        || async {
            let s = secrets.get_opt(SECRET).await.ok()??;
            (!data(&s, "tls.crt").is_empty()).then_some(s)
        },
    )
    .await;
    let annotations = secret.metadata.annotations.clone().unwrap();
    assert_eq!(
        annotations
            .get(manager::MANAGED_ANNOTATION)
            .map(String::as_str),
        Some(manager::MANAGED_VALUE)
    );
    eventually(
        Duration::from_secs(20),
        "the CA bundle published",
        || async {
            let s = secrets.get(SECRET).await.ok()?;
            let ca = data(&s, "ca.crt");
            bundles(&env.client, &config)
                .await
                .iter()
                .all(|b| *b == ca)
                .then_some(())
        },
    )
    .await;
    let ca = data(&secrets.get(SECRET).await.unwrap(), "ca.crt");
    let serving = inspect::parse_bundle(&data(&secrets.get(SECRET).await.unwrap(), "tls.crt"));
    for p in [port, slow_port] {
        eventually(
            Duration::from_secs(10),
            "the Secret's certificate served",
            || async {
                (served_fingerprint(p, &ca).await == Some(serving[0].fingerprint)).then_some(())
            },
        )
        .await;
    }
    let first_ca = inspect::parse_bundle(&ca)[0].fingerprint;

    // A source whose copies go to namespaces labelled rotation-target=<id>, and writes that
    // go through every webhook, for 50 s: Namespace CREATE (validating), Secret UPDATE of the
    // source (validating), Pod CREATE (mutating).
    let src = env.namespace("rotation-src", &[ours]).await;
    let pp = PostParams::default();
    let selector = format!("{}={}", target_label.0, target_label.1);
    secrets_create(&env, &src, &selector).await;
    let first_target = env.namespace("rotation-dst", &[ours, target_label]).await;
    service_account(&env.client, &first_target).await;

    let started = Instant::now();
    let mut failures: Vec<String> = Vec::new();
    let (mut namespaces, mut updates, mut pods) = (0u32, 0u32, 0u32);
    let mut cas_seen = vec![first_ca];
    let mut served_seen = vec![serving[0].fingerprint];
    let mut rotation_asked = false;
    let mut last_namespace = first_target.clone();
    let calls_before = copyrator
        .metric("copyrator_admission_requests_total{endpoint=\"namespaces\",operation=\"CREATE\",outcome=\"allowed\"}")
        .await;
    let mut i = 0;
    while started.elapsed() < Duration::from_secs(50) {
        i += 1;
        // By hand, a third of the way in: a new CA now, through the same order.
        if !rotation_asked && started.elapsed() > Duration::from_secs(15) {
            rotation_asked = true;
            secrets
                .patch(
                    SECRET,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"annotations": {
                        manager::ROTATE_ANNOTATION: "by-the-test"
                    }}})),
                )
                .await
                .unwrap();
        }
        let name = format!("rotation-{i}-{id}");
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(
                    [ours, target_label]
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        match Api::<Namespace>::all(env.client.clone())
            .create(&pp, &ns)
            .await
        {
            Ok(_) => {
                env.track_namespace(&name);
                namespaces += 1;
                last_namespace = name;
            }
            Err(e) => failures.push(format!("namespace create: {e}")),
        }
        match env
            .secrets(&src)
            .patch(
                "shared",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"round": base64::engine::general_purpose::STANDARD.encode(i.to_string())}})),
            )
            .await
        {
            Ok(_) => updates += 1,
            Err(e) => failures.push(format!("source update: {e}")),
        }
        match Api::<Pod>::namespaced(env.client.clone(), &first_target)
            .create(&pp, &pod(&format!("p{i}"), &[], None))
            .await
        {
            Ok(_) => pods += 1,
            Err(e) => failures.push(format!("pod create: {e}")),
        }
        for b in bundles(&env.client, &config).await {
            for c in inspect::parse_bundle(&b) {
                if c.is_ca && !cas_seen.contains(&c.fingerprint) {
                    cas_seen.push(c.fingerprint);
                }
            }
        }
        if let Ok(s) = secrets.get(SECRET).await
            && let Some(c) = inspect::parse_bundle(&data(&s, "tls.crt")).first()
            && !served_seen.contains(&c.fingerprint)
        {
            served_seen.push(c.fingerprint);
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }

    assert!(
        failures.is_empty(),
        "{} of {} writes failed while certificates rotated: {:#?}",
        failures.len(),
        namespaces as usize + updates as usize + pods as usize + failures.len(),
        &failures[..failures.len().min(10)]
    );
    // The API server did call copyrator for each of them (nothing skipped them).
    let calls = copyrator
        .metric("copyrator_admission_requests_total{endpoint=\"namespaces\",operation=\"CREATE\",outcome=\"allowed\"}")
        .await
        - calls_before;
    assert!(
        calls >= f64::from(namespaces),
        "{calls} namespace reviews for {namespaces} creates"
    );
    assert!(
        pods > 100 && updates > 100,
        "{pods} pods, {updates} updates"
    );
    // Rotations happened: by hand after 15 s, then every 16 s by age; serving certificates
    // every ~8 s and after each new CA.
    assert!(
        cas_seen.len() >= 3,
        "{} CAs published in 50 s",
        cas_seen.len()
    );
    assert!(
        served_seen.len() >= 6,
        "{} serving certificates in 50 s",
        served_seen.len()
    );
    let issued = "copyrator_certificates_issued_total{certificate=\"ca\"}";
    let cas_issued = copyrator.metric(issued).await + slow.metric(issued).await;
    assert!(cas_issued >= 3.0, "{cas_issued} CAs issued");
    let secret = secrets.get(SECRET).await.unwrap();
    assert_eq!(
        secret
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .get(manager::ROTATED_ANNOTATION)
            .map(String::as_str),
        Some("by-the-test"),
        "the rotation asked for was done"
    );
    // What is served now verifies against what the API server holds now.
    let published = bundles(&env.client, &config).await;
    for p in [port, slow_port] {
        assert!(
            served_fingerprint(p, &published[0]).await.is_some(),
            "the certificate served on port {p} verifies against the published CA"
        );
    }
    // And copyrator did its job throughout: the last namespace got its copy.
    env.wait_for::<Secret>(&last_namespace, "shared", "the copy", |_| true)
        .await;

    unregister(&env.client, &config).await;
    copyrator.kill().await;
    slow.kill().await;
    env.cleanup().await;
}

async fn secrets_create(env: &TestEnv, ns: &str, selector: &str) {
    env.secrets(ns)
        .create(
            &PostParams::default(),
            &common::secret(
                "shared",
                &[("copyrator.io/source", "true")],
                &[("copyrator.io/namespace-selector", selector)],
                &[("k", "v")],
            ),
        )
        .await
        .unwrap();
}

/// A Secret of that name that copyrator did not make is left alone, and copyrator says so
/// (not ready, an error naming the annotation) instead of serving nothing silently.
#[tokio::test]
async fn a_secret_copyrator_does_not_own_is_not_overwritten() {
    let env = TestEnv::new().await;
    let own = env.namespace("certs-foreign", &[]).await;
    let foreign = common::secret("someones-tls", &[], &[], &[("tls.crt", "theirs")]);
    env.secrets(&own)
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    let copyrator = Copyrator::start(Options {
        webhooks: false,
        extra: [
            "--tls-secret",
            "someones-tls",
            "--tls-secret-namespace",
            &own,
            "--tls-ips",
            "127.0.0.1",
            "--cert-check-interval",
            "200ms",
        ]
        .map(String::from)
        .to_vec(),
        ..Default::default()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = env.secrets(&own).get("someones-tls").await.unwrap();
    assert_eq!(data(&after, "tls.crt"), b"theirs");
    assert_eq!(after.data.as_ref().unwrap().len(), 1, "nothing added");
    let (status, body) = common::http_get(copyrator.running().http_addr, "/readyz").await;
    assert_eq!(status, 503, "not ready without a certificate: {body}");
    copyrator.kill().await;
    env.cleanup().await;
}
