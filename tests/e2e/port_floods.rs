//! What a client that reaches the webhook port from an address other than the API server's
//! may cost (SPEC §6.1, §9.8): forged reviews queue no work once the API server can be told
//! apart, and connections that send endless headers from several addresses keep within the
//! memory limit the port's budget is derived from.

use crate::common;

use std::{
    net::IpAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use common::*;
use copyrator::marks;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Tasks that keep posting, each from `from`, until dropped.
struct Flood {
    sent: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Flood {
    fn sent(&self) -> usize {
        self.sent.load(Ordering::Relaxed)
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// A review of the creation of Secret `name` in `ns`, opted in as a source for `selector`:
/// a change that never happens.
fn forged_source(ns: &str, name: &str, selector: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/data/review-secret-create-source.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut review: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let request = &mut review["request"];
    request["uid"] = json!(format!("forged-{name}"));
    request["name"] = json!(name);
    request["namespace"] = json!(ns);
    let meta = &mut request["object"]["metadata"];
    meta["name"] = json!(name);
    meta["namespace"] = json!(ns);
    meta["labels"] = json!({ marks::SOURCE_LABEL: "true" });
    meta["annotations"] = json!({ marks::NAMESPACE_SELECTOR_ANNOTATION: selector });
    let body = serde_json::to_vec(&review).unwrap();
    let mut request = format!(
        "POST /admission/sources HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(&body);
    request
}

/// `tasks` clients at `from`, each posting reviews of new sources in `ns` (a new name each
/// time), one connection per review, as fast as they are answered.
fn forge(from: IpAddr, port: u16, ca: &[u8], ns: &str, selector: &str, tasks: usize) -> Flood {
    let sent = Arc::new(AtomicUsize::new(0));
    let tasks = (0..tasks)
        .map(|t| {
            let (sent, ca, ns, selector) = (
                Arc::clone(&sent),
                ca.to_vec(),
                ns.to_string(),
                selector.to_string(),
            );
            tokio::spawn(async move {
                for i in 0.. {
                    let request = forged_source(&ns, &format!("forged-{t}-{i}"), &selector);
                    if let Ok(mut tls) = webhook_tls_from(from, port, &ca).await
                        && tls.write_all(&request).await.is_ok()
                    {
                        let mut answer = Vec::new();
                        let _ = tls.read_to_end(&mut answer).await;
                        if answer.starts_with(b"HTTP/1.1 200") {
                            sent.fetch_add(1, Ordering::Relaxed);
                        }
                    } else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            })
        })
        .collect();
    Flood { sent, tasks }
}

/// Forged reviews of sources that are never created, from an address other than the API
/// server's (verified by `--api-server-cidrs`), answered by the thousand while a real source
/// is updated: none of them queues a job, so none waits in the queue's share for changes
/// nobody makes, none is given up for a full resync, and the real update reaches every copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_reviews_queue_no_work_where_the_api_server_is_verified() {
    let env = TestEnv::new().await;
    let key = env.name("forged");
    let selector = format!("{key}=on");
    let src = env.namespace("forged-src", &[]).await;
    let mut dests = Vec::new();
    for i in 0..10 {
        dests.push(env.namespace(&format!("forged-{i}"), &[(&key, "on")]).await);
    }
    let mut p = Process::spawn(&[
        "--leader-election=false",
        "--resync-interval",
        "1h",
        "--api-server-cidrs",
        "127.0.0.1/32",
    ]);
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
    for ns in &dests {
        env.wait_value::<Secret>(ns, "shared", "password", "v1")
            .await;
    }

    // More reviews of changes that never happen than the queue's share for them holds
    // (1,024), within the 5 s such a job would wait.
    let flood = forge(
        "127.0.0.2".parse().unwrap(),
        p.webhook_port,
        &p.ca,
        &src,
        &selector,
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
    env.secrets(&src)
        .patch(
            "shared",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": "v2"}})),
        )
        .await
        .unwrap();
    for ns in &dests {
        env.wait_value::<Secret>(ns, "shared", "password", "v2")
            .await;
    }
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
    p.terminate();
    env.cleanup().await;
}

/// Header bytes each stalled connection sends at most, in pieces, without ever ending them.
const HEADER_BYTES: usize = 360 << 10;
/// Addresses the connections come from, and connections from each.
const ADDRESSES: [&str; 4] = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"];
const PER_ADDRESS: usize = 150;

/// [`PER_ADDRESS`] connections from each of [`ADDRESSES`], each sending a request line and
/// header lines up to [`HEADER_BYTES`] and never the empty line that ends them; a connection
/// the server closes is opened again.
fn endless_headers(port: u16, ca: &[u8]) -> Flood {
    let sent = Arc::new(AtomicUsize::new(0));
    let line = format!("X-Padding: {}\r\n", "a".repeat(4000));
    let tasks = ADDRESSES
        .iter()
        .flat_map(|from| (0..PER_ADDRESS).map(move |_| from.parse::<IpAddr>().unwrap()))
        .map(|from| {
            let (sent, ca, line) = (Arc::clone(&sent), ca.to_vec(), line.clone());
            tokio::spawn(async move {
                loop {
                    if let Ok(mut tls) = webhook_tls_from(from, port, &ca).await
                        && tls
                            .write_all(b"POST /admission/sources HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                            .await
                            .is_ok()
                    {
                        let mut written = 0;
                        while written < HEADER_BYTES {
                            if tls.write_all(line.as_bytes()).await.is_err()
                                || tls.flush().await.is_err()
                            {
                                break;
                            }
                            written += line.len();
                            sent.fetch_add(line.len(), Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        // Hold what was sent until the server closes.
                        let mut buf = [0u8; 512];
                        while matches!(tls.read(&mut buf).await, Ok(n) if n > 0) {}
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            })
        })
        .collect();
    Flood { sent, tasks }
}

/// 600 connections from four addresses other than the API server's, each sending up to 360 KB
/// of headers and never finishing them: copyrator, given the chart's memory limit
/// (`--memory-limit 128Mi`, from which the port's budget is derived), stays under it at its
/// peak, and a source update still reaches its copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_headers_from_several_addresses_keep_within_the_memory_limit() {
    let env = TestEnv::new().await;
    let key = env.name("headers");
    let selector = format!("{key}=on");
    let src = env.namespace("headers-src", &[]).await;
    let dest = env.namespace("headers", &[(&key, "on")]).await;
    let limit: u64 = 128 << 20;
    let mut p = Process::spawn(&[
        "--leader-election=false",
        "--resync-interval",
        "1h",
        "--memory-limit",
        "128Mi",
    ]);
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
    env.wait_value::<Secret>(&dest, "shared", "password", "v1")
        .await;
    let (_, idle) = p.memory();

    let flood = endless_headers(p.webhook_port, &p.ca);
    // Long enough for every connection to have sent all it sends: 90 lines, 20 ms apart.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let open = p.metric("copyrator_webhook_connections").await;
    env.secrets(&src)
        .patch(
            "shared",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": "v2"}})),
        )
        .await
        .unwrap();
    env.wait_value::<Secret>(&dest, "shared", "password", "v2")
        .await;
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
    p.terminate();
    env.cleanup().await;
}
