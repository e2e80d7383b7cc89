//! What a client that reaches the webhook port from an address other than the API server's
//! may cost (SPEC §6.1, §9.8): forged reviews queue no work once the API server can be told
//! apart, and connections that send endless headers from several addresses keep within the
//! memory limit the port's budget is derived from.

use crate::common;

use std::time::{Duration, Instant};

use common::{
    floods::{endless_headers, forge},
    *,
};
use copyrator::marks;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

/// A copyrator started with `flags`, its webhooks registered, and a source Secret `shared`
/// (password v1) copied into `targets` new namespaces.
struct Fixture {
    env: TestEnv,
    p: Process,
    src: String,
    selector: String,
    dests: Vec<String>,
}

impl Fixture {
    async fn start(base: &str, targets: usize, flags: &[&str]) -> Self {
        let env = TestEnv::new().await;
        let key = env.name(base);
        let selector = format!("{key}=on");
        let src = env.namespace(&format!("{base}-src"), &[]).await;
        let mut dests = Vec::new();
        for i in 0..targets {
            dests.push(env.namespace(&format!("{base}-{i}"), &[(&key, "on")]).await);
        }
        let mut args = vec!["--leader-election=false", "--resync-interval", "1h"];
        args.extend(flags);
        let mut p = Process::spawn(&args);
        p.wait_up().await;
        env.register_webhooks(&p).await;
        let source = secret(
            "shared",
            &[(marks::SOURCE_LABEL, "true")],
            &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &selector)],
            &[("password", "v1")],
        );
        env.secrets(&src)
            .create(&PostParams::default(), &source)
            .await
            .unwrap();
        let fixture = Self {
            env,
            p,
            src,
            selector,
            dests,
        };
        fixture.wait_copies("v1").await;
        fixture
    }

    /// The source updated to `password`.
    async fn update(&self, password: &str) {
        self.env
            .secrets(&self.src)
            .patch(
                "shared",
                &PatchParams::default(),
                &Patch::Merge(json!({"stringData": {"password": password}})),
            )
            .await
            .unwrap();
    }

    async fn wait_copies(&self, password: &str) {
        for ns in &self.dests {
            self.env
                .wait_value::<Secret>(ns, "shared", "password", password)
                .await;
        }
    }

    async fn stop(mut self) {
        self.p.terminate();
        self.env.cleanup().await;
    }
}

/// Forged reviews of sources that are never created, from an address other than the API
/// server's (verified by `--api-server-cidrs`), answered by the thousand while a real source
/// is updated: none of them queues a job, so none waits in the queue's share for changes
/// nobody makes, none is given up for a full resync, and the real update reaches every copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_reviews_queue_no_work_where_the_api_server_is_verified() {
    let f = Fixture::start("forged", 10, &["--api-server-cidrs", "127.0.0.1/32"]).await;
    let p = &f.p;

    // More reviews of changes that never happen than the queue's share for them holds
    // (1,024), within the 5 s such a job would wait.
    let flood = forge(
        "127.0.0.2".parse().unwrap(),
        p.webhook_port,
        &p.ca,
        &f.src,
        &f.selector,
        8,
    );
    eventually(
        Duration::from_secs(120),
        "1,500 forged reviews answered",
        || async { (flood.sent() >= 1_500).then_some(()) },
    )
    .await;
    // Jobs waiting for the changes under review (the last 5 s of reviews, were they queued).
    let waiting = p.metric("copyrator_queue_unseen").await;
    let updated = Instant::now();
    f.update("v2").await;
    f.wait_copies("v2").await;
    let took = updated.elapsed();
    let sent = flood.sent();
    drop(flood);

    let metrics = p.metrics().await;
    let unqueued = metric_value(&metrics, "copyrator_admission_unqueued_total");
    let given_up = metric_value(
        &metrics,
        r#"copyrator_jobs_dropped_total{kind="source",reason="unseen_share"}"#,
    );
    eprintln!(
        "{sent} forged reviews answered; the real update reached 10 copies in {took:?}; {unqueued} reviews queued nothing; {waiting} jobs waited for unseen changes during the flood; {given_up} jobs given up"
    );
    assert_eq!(
        waiting, 0.0,
        "jobs of forged reviews waited in the queue for changes nobody makes"
    );
    assert!(
        unqueued >= 1_500.0,
        "of {sent} forged reviews answered, {unqueued} were answered without queueing work"
    );
    assert_eq!(
        given_up, 0.0,
        "jobs of forged reviews were queued and given up (each schedules a full resync)"
    );
    f.stop().await;
}

/// 600 connections from four addresses other than the API server's, each sending up to 360 KB
/// of headers and never finishing them: copyrator, given the chart's memory limit
/// (`--memory-limit 128Mi`, from which the port's budget is derived), stays under it at its
/// peak, and a source update still reaches its copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_headers_from_several_addresses_keep_within_the_memory_limit() {
    let f = Fixture::start("headers", 1, &["--memory-limit", "128Mi"]).await;
    let (p, limit) = (&f.p, 128u64 << 20);
    let (_, idle) = p.memory();

    let flood = endless_headers(p.webhook_port, &p.ca);
    // Long enough for every connection to have sent all it sends: 90 lines, 20 ms apart.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let open = p.metric("copyrator_webhook_connections").await;
    f.update("v2").await;
    f.wait_copies("v2").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (peak, _) = p.memory();
    let sent = flood.sent();
    drop(flood);
    eprintln!(
        "idle RSS {} MiB; peak {} MiB with {open} connections open, {} MiB of headers sent",
        idle >> 20,
        peak >> 20,
        sent >> 20
    );
    assert!(
        sent > 64 << 20,
        "the flood sent only {sent} bytes of headers"
    );
    assert!(
        peak < limit,
        "peak RSS {} MiB, over the 128 MiB limit the port's budget is derived from",
        peak >> 20
    );
    f.stop().await;
}
