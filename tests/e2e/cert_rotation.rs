//! copyrator's own certificates (`--tls-secret`, SPEC §6.5) against the real API server: the
//! CA and serving certificate issued into the Secret, the CA published into copyrator's
//! webhook configurations, rotations (by expiry and by hand) while the API server keeps
//! calling every webhook with `failurePolicy: Fail` — so a single call that failed its TLS
//! check would fail the write that made it.

use crate::common;

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

/// Two replicas sharing the certificate Secret, answering the test's webhooks
/// (`failurePolicy: Fail`). `fast` looks every 200 ms, gives each step 2 s to reach everyone,
/// and answers the validating webhooks. `slow` answers the Pod gate; it looks every second and
/// gives each step 3 s, so it never takes a rotation step first: it follows, serving each new
/// certificate up to a second late — were a CA dropped from the published bundle while a
/// replica still serves a certificate it signed, Pod creates would fail.
struct Replicas {
    fast: Copyrator,
    slow: Copyrator,
    /// The namespace of the certificate Secret.
    own: String,
    /// The name of the test's webhook configurations.
    config: String,
}

impl Replicas {
    /// Starts both with these lifetimes, registers the webhooks, and waits until the Secret's
    /// CA is published and both replicas serve its certificate.
    async fn start(env: &TestEnv, ca_validity: &str, cert_validity: &str) -> Self {
        let own = env.namespace("certs", &[]).await;
        let config = env.name("copyrator-rotation");
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
                ca_validity,
                "--cert-validity",
                cert_validity,
                "--cert-propagation",
                propagation,
                "--cert-check-interval",
                interval,
            ]
            .map(String::from)
            .to_vec(),
            ..Default::default()
        };
        let fast = Copyrator::start(replica("200ms", "2s")).await;
        let slow = Copyrator::start(replica("1s", "3s")).await;
        let replicas = Self {
            fast,
            slow,
            own,
            config,
        };
        let [port, slow_port] = replicas.ports();
        register(
            &env.client,
            &replicas.config,
            &format!("https://127.0.0.1:{port}"),
            &format!("https://127.0.0.1:{slow_port}"),
            &env.id,
        )
        .await;
        replicas.wait_settled(env).await;
        replicas
    }

    fn ports(&self) -> [u16; 2] {
        [&self.fast, &self.slow].map(|c| c.running().webhook_addr.port())
    }

    /// Waits until the Secret holds a serving pair, every webhook trusts exactly the Secret's
    /// CA bundle, and both replicas serve the Secret's certificate; returns the Secret.
    async fn wait_settled(&self, env: &TestEnv) -> Secret {
        let secrets = env.secrets(&self.own);
        eventually(
            Duration::from_secs(30),
            "the Secret's CA bundle published and its certificate served",
            || async {
                let s = secrets.get_opt(SECRET).await.ok()??;
                let ca = data(&s, "ca.crt");
                let serving = inspect::parse_bundle(&data(&s, "tls.crt"))
                    .first()?
                    .fingerprint;
                let published = bundles(&env.client, &self.config).await;
                if !published.iter().all(|b| *b == ca) {
                    return None;
                }
                for p in self.ports() {
                    if served_fingerprint(p, &ca).await != Some(serving) {
                        return None;
                    }
                }
                Some(s)
            },
        )
        .await
    }

    /// CAs issued so far, by either replica.
    async fn cas_issued(&self) -> f64 {
        let issued = "copyrator_certificates_issued_total{certificate=\"ca\"}";
        self.fast.metric(issued).await + self.slow.metric(issued).await
    }

    /// Asks for a rotation by hand: `copyrator.io/rotate` set to `value`.
    async fn ask_rotation(&self, env: &TestEnv, value: &str) {
        env.secrets(&self.own)
            .patch(
                SECRET,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {
                    manager::ROTATE_ANNOTATION: value
                }}})),
            )
            .await
            .unwrap();
    }

    async fn stop(self, env: &TestEnv) {
        unregister(&env.client, &self.config).await;
        self.fast.kill().await;
        self.slow.kill().await;
    }
}

/// Writes that go through every webhook with `failurePolicy: Fail`, so that a call that failed
/// its TLS check fails the write: a Namespace CREATE and an UPDATE of a source (validating), a
/// Pod CREATE (mutating). Each round makes one of each.
struct Writes {
    /// A source whose copies go to namespaces labelled `rotation-target=<id>`.
    src: String,
    /// Where the Pods are created.
    first_target: String,
    rounds: u32,
    namespaces: u32,
    updates: u32,
    pods: u32,
    failures: Vec<String>,
    last_namespace: String,
}

impl Writes {
    async fn prepare(env: &TestEnv) -> Self {
        let id = env.id.as_str();
        let src = env
            .namespace("rotation-src", &[("rotation-test", id)])
            .await;
        let selector = format!("rotation-target={id}");
        env.secrets(&src)
            .create(
                &PostParams::default(),
                &common::secret(
                    "shared",
                    &[("copyrator.io/source", "true")],
                    &[("copyrator.io/namespace-selector", &selector)],
                    &[("k", "v")],
                ),
            )
            .await
            .unwrap();
        let target = [("rotation-test", id), ("rotation-target", id)];
        let first_target = env.namespace("rotation-dst", &target).await;
        service_account(&env.client, &first_target).await;
        Self {
            src,
            last_namespace: first_target.clone(),
            first_target,
            rounds: 0,
            namespaces: 0,
            updates: 0,
            pods: 0,
            failures: Vec::new(),
        }
    }

    async fn round(&mut self, env: &TestEnv) {
        self.rounds += 1;
        let i = self.rounds;
        let id = env.id.as_str();
        let pp = PostParams::default();
        let name = format!("rotation-{i}-{id}");
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(
                    [("rotation-test", id), ("rotation-target", id)]
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
                self.namespaces += 1;
                self.last_namespace = name;
            }
            Err(e) => self.failures.push(format!("namespace create: {e}")),
        }
        let round = base64::engine::general_purpose::STANDARD.encode(i.to_string());
        match env
            .secrets(&self.src)
            .patch(
                "shared",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"round": round}})),
            )
            .await
        {
            Ok(_) => self.updates += 1,
            Err(e) => self.failures.push(format!("source update: {e}")),
        }
        match Api::<Pod>::namespaced(env.client.clone(), &self.first_target)
            .create(&pp, &pod(&format!("p{i}"), &[], None))
            .await
        {
            Ok(_) => self.pods += 1,
            Err(e) => self.failures.push(format!("pod create: {e}")),
        }
    }

    fn assert_none_failed(&self, during: &str) {
        assert!(
            self.failures.is_empty(),
            "{} of {} writes failed {during}: {:#?}",
            self.failures.len(),
            (self.namespaces + self.updates + self.pods) as usize + self.failures.len(),
            &self.failures[..self.failures.len().min(10)]
        );
    }
}

#[tokio::test]
async fn webhooks_keep_answering_across_certificate_rotations() {
    let env = TestEnv::new().await;
    // Short lives so that rotations happen within the test: a CA lives 24 s (a new one after
    // 16 s), a serving certificate 12 s (a new one after 8 s).
    let replicas = Replicas::start(&env, "24s", "12s").await;
    let [port, slow_port] = replicas.ports();
    let config = replicas.config.clone();
    let secrets = env.secrets(&replicas.own);

    // Issued and published (Replicas::start waited until every webhook trusts exactly the
    // Secret's CA bundle and both ports serve the Secret's certificate), in a Secret marked
    // as copyrator's.
    let secret = secrets.get(SECRET).await.unwrap();
    let annotations = secret.metadata.annotations.clone().unwrap();
    assert_eq!(
        annotations
            .get(manager::MANAGED_ANNOTATION)
            .map(String::as_str),
        Some(manager::MANAGED_VALUE)
    );
    let first_ca = inspect::parse_bundle(&data(&secret, "ca.crt"))[0].fingerprint;
    let serving = inspect::parse_bundle(&data(&secret, "tls.crt"))[0].fingerprint;

    // Writes through every webhook for 50 s, and on (up to 30 s more) until more than 100 of
    // each kind went through: on a loaded machine 50 s may hold fewer rounds.
    let mut writes = Writes::prepare(&env).await;
    let started = Instant::now();
    let mut cas_seen = vec![first_ca];
    let mut served_seen = vec![serving];
    let mut rotation_asked = false;
    let namespace_reviews = "copyrator_admission_requests_total{endpoint=\"namespaces\",operation=\"CREATE\",outcome=\"allowed\"}";
    let calls_before = replicas.fast.metric(namespace_reviews).await;
    while started.elapsed() < Duration::from_secs(50)
        || ((writes.pods <= 100 || writes.updates <= 100)
            && started.elapsed() < Duration::from_secs(80))
    {
        // By hand, a third of the way in: a new CA now, through the same order.
        if !rotation_asked && started.elapsed() > Duration::from_secs(15) {
            rotation_asked = true;
            replicas.ask_rotation(&env, "by-the-test").await;
        }
        writes.round(&env).await;
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

    writes.assert_none_failed("while certificates rotated");
    // The API server did call copyrator for each of them (nothing skipped them).
    let calls = replicas.fast.metric(namespace_reviews).await - calls_before;
    assert!(
        calls >= f64::from(writes.namespaces),
        "{calls} namespace reviews for {} creates",
        writes.namespaces
    );
    assert!(
        writes.pods > 100 && writes.updates > 100,
        "{} pods, {} updates",
        writes.pods,
        writes.updates
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
    let cas_issued = replicas.cas_issued().await;
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
    env.wait_for::<Secret>(&writes.last_namespace, "shared", "the copy", |_| true)
        .await;

    replicas.stop(&env).await;
    env.cleanup().await;
}

/// Four rotations asked for by hand inside one `--cert-propagation` window (SPEC §6.5): the API
/// server verifies every replica's certificate throughout (no write through a
/// `failurePolicy: Fail` webhook fails), the requests made while the first rotation is under
/// way make one more between them, and it all ends on one CA, published and served.
#[tokio::test]
async fn rotations_asked_faster_than_propagation_fail_no_call() {
    let env = TestEnv::new().await;
    // Lives far longer than the test: only the requests rotate.
    let replicas = Replicas::start(&env, "2h", "1h").await;
    let secrets = env.secrets(&replicas.own);
    let first = secrets.get(SECRET).await.unwrap();
    let first_ca = inspect::parse_bundle(&data(&first, "ca.crt"))[0].fingerprint;
    let cas_before = replicas.cas_issued().await;
    let mut writes = Writes::prepare(&env).await;

    // Four requests 400 ms apart, all inside the 2 s a new CA is trusted before a certificate
    // is signed by it, with writes through every webhook in between.
    for i in 0..4 {
        replicas.ask_rotation(&env, &format!("burst-{i}")).await;
        let asked = Instant::now();
        while asked.elapsed() < Duration::from_millis(400) {
            writes.round(&env).await;
        }
    }
    // Writes go on until the last request is recorded as done and the Secret is back to one
    // CA, then until that CA is published everywhere and both replicas serve its certificate.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        writes.round(&env).await;
        let s = secrets.get(SECRET).await.unwrap();
        let done = s
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(manager::ROTATED_ANNOTATION))
            .is_some_and(|v| v == "burst-3");
        if done && inspect::parse_bundle(&data(&s, "ca.crt")).len() == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the rotations did not complete in 30 s"
        );
    }
    let last = replicas.wait_settled(&env).await;
    for _ in 0..10 {
        writes.round(&env).await;
    }

    writes.assert_none_failed("while four rotations were asked for");
    assert!(writes.pods >= 20, "{} pods", writes.pods);
    let ca = inspect::parse_bundle(&data(&last, "ca.crt"));
    assert_ne!(ca[0].fingerprint, first_ca, "the CA was rotated");
    let made = replicas.cas_issued().await - cas_before;
    assert!(
        (1.0..=2.0).contains(&made),
        "{made} CAs made for four requests inside one rotation"
    );

    replicas.stop(&env).await;
    env.cleanup().await;
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
    // That nothing is written is the point: no signal says copyrator has looked and declined,
    // so give it 15 certificate checks' time.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = env.secrets(&own).get("someones-tls").await.unwrap();
    assert_eq!(data(&after, "tls.crt"), b"theirs");
    assert_eq!(after.data.as_ref().unwrap().len(), 1, "nothing added");
    let (status, body) = common::http_get(copyrator.running().http_addr, "/readyz").await;
    assert_eq!(status, 503, "not ready without a certificate: {body}");
    copyrator.kill().await;
    env.cleanup().await;
}
