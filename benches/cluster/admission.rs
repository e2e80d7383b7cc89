//! Phase admission: AdmissionReviews, as the API server sends them (captured fixtures in
//! tests/data/), posted over TLS at rising concurrency; throughput, latency and copyrator's CPU.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use crate::{
    base64_of,
    common::Process,
    measure::{control_plane_pids, cpu_time},
    payload,
    report::{Report, ms, summary},
};

/// SPEC §7's target for the admission endpoint at 64 connections.
const TARGET: &str = "≥ 20,000/s, p99 ≤ 2 ms";

/// Two reviews (a source Secret UPDATE, a Namespace CREATE) posted to copyrator `p` over TLS,
/// `seconds` at each concurrency.
pub async fn run(report: &mut Report, p: &Process, seconds: f64) {
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "registry", "namespace": "bench-nowhere", "resourceVersion": "12345",
                     "uid": "8b7c3c2e-5c1a-4a8e-9a5e-1f2b3c4d5e6f",
                     "labels": {"copyrator.io/source": "true", "team": "platform"},
                     "annotations": {"copyrator.io/namespace-selector": "registry=enabled,env in (prod,staging)"}},
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64_of(&payload(0))}
    });
    let reviews = [
        (
            "/admission/sources",
            "Secret UPDATE (1 KiB, old+new)",
            review(SECRET_UPDATE, "UPDATE", secret.clone(), Some(secret)),
        ),
        (
            "/admission/namespaces",
            "Namespace CREATE",
            review(
                NAMESPACE_CREATE,
                "CREATE",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-x", "labels": {"registry": "enabled"}}}),
                None,
            ),
        ),
    ];
    for (path, what, body) in &reviews {
        for concurrency in [1usize, 4, 16, 64] {
            load(p, path, body, concurrency, seconds).await.row(
                report,
                &format!("admission {what}, {concurrency} conn"),
                if concurrency == 64 { TARGET } else { "" },
            );
        }
    }
    report.note("admission: the load generator runs on the same 2 cores (HTTP/1.1 keep-alive over TLS, one connection per concurrent client); CPU share in % of one core".into());

    // The API server's own shape: client-go talks HTTP/2 to a webhook that offers it (copyrator
    // does, by ALPN), its calls multiplexed as streams of one connection.
    let (path, what, body) = &reviews[0];
    for streams in [16usize, 64] {
        load_h2(p, path, body, streams, seconds).await.row(
            report,
            &format!("admission {what}, {streams} streams over one HTTP/2 connection"),
            if streams == 64 { TARGET } else { "" },
        );
    }

    // Diagnostic: is the tail at 64 connections copyrator's, or the two processes' threads
    // taking turns on the same cores? The same load with copyrator on one core and the benchmark
    // (and the control plane, and the long-running copyrator when it is not the one measured) on
    // the other: first as they are (tokio's default, a worker thread per core each, so two
    // threads share each core), then with one worker thread each, so no thread of either waits
    // for the other's time slice.
    let (path, what, body) = &reviews[0];
    if let Some(_pinned) = Pinned::split(p.child.id(), &[]) {
        for concurrency in [16usize, 64] {
            load(p, path, body, concurrency, seconds).await.row(
                report,
                &format!(
                    "diagnostic: admission {what}, {concurrency} conn, copyrator and load generator on a core each (2 worker threads each)"
                ),
                "",
            );
        }
    }
    let mut single = single_threaded_copyrator().await;
    if let Some(_pinned) = Pinned::split(single.child.id(), &[p.child.id()]) {
        // Warm up the new process (its first connections, buffers, caches) before measuring.
        load_on_one_thread(&single, path, body, 64, seconds / 2.0);
        for concurrency in [16usize, 64] {
            load_on_one_thread(&single, path, body, concurrency, seconds).row(
                report,
                &format!(
                    "diagnostic: admission {what}, {concurrency} conn, copyrator and load generator on a core each (1 worker thread each)"
                ),
                if concurrency == 64 { "p99 ≤ 2 ms" } else { "" },
            );
        }
    }
    single.terminate();
    report.note("admission diagnostic: \"2 worker threads each\" is copyrator as deployed (tokio's default, one worker per core it may use) and the load generator's runtime, each pinned to one core (the control plane on the load generator's), so two threads take turns on each core; \"1 worker thread each\" is a second copyrator started with `--threads 1` and the load generator on a single-threaded runtime".into());
}

/// A second copyrator like the long-running one (no webhooks registered: the load posts to it
/// directly) with one worker thread (`--threads 1`), after its first resync.
async fn single_threaded_copyrator() -> Process {
    crate::bench_copyrator(None, &["--threads", "1"]).await
}

/// [`load`] on a single-threaded runtime of its own thread (this task's worker is held until
/// it is done).
fn load_on_one_thread(
    p: &Process,
    path: &'static str,
    body: &Value,
    concurrency: usize,
    seconds: f64,
) -> Load {
    tokio::task::block_in_place(|| {
        std::thread::scope(|s| {
            s.spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(load(p, path, body, concurrency, seconds))
            })
            .join()
            .unwrap()
        })
    })
}

/// copyrator on CPU 1; this benchmark process, the control plane and `others` on CPU 0
/// (taskset), until dropped.
struct Pinned {
    pids: Vec<u32>,
    /// The CPUs all may use again afterwards (read before pinning: a pinned process sees one).
    all: String,
}

impl Pinned {
    fn split(copyrator: u32, others: &[u32]) -> Option<Self> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cpus < 2 {
            return None;
        }
        let pin = |cpus: &str, pid: u32| {
            std::process::Command::new("taskset")
                .args(["-a", "-p", "-c", cpus, &pid.to_string()])
                .output()
                .is_ok_and(|o| o.status.success())
        };
        let rest: Vec<u32> = [std::process::id()]
            .into_iter()
            .chain(control_plane_pids().into_iter().flatten())
            .chain(others.iter().copied())
            .collect();
        let pinned = Self {
            pids: [copyrator]
                .into_iter()
                .chain(rest.iter().copied())
                .collect(),
            all: format!("0-{}", cpus - 1),
        };
        // Unpinned again on drop if any fails.
        (pin("1", copyrator) && rest.iter().all(|&pid| pin("0", pid))).then_some(pinned)
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        for &pid in &self.pids {
            let ok = std::process::Command::new("taskset")
                .args(["-a", "-p", "-c", &self.all, &pid.to_string()])
                .output()
                .is_ok_and(|o| o.status.success());
            assert!(ok, "taskset could not unpin process {pid}");
        }
    }
}

/// What one load of reviews measured.
pub struct Load {
    pub rps: f64,
    pub p50: Duration,
    pub p99: Duration,
    /// copyrator's CPU time over the wall time.
    pub cpu_share: f64,
}

impl Load {
    pub fn figure(&self) -> String {
        format!(
            "{:.0}/s p50 {} p99 {}",
            self.rps,
            ms(self.p50),
            ms(self.p99)
        )
    }

    pub fn cpu(&self) -> String {
        format!("copyrator CPU {:.0}%", 100.0 * self.cpu_share)
    }

    /// This load as a row of `report`: its figure, copyrator's CPU, the target it is held to.
    pub fn row(&self, report: &mut Report, label: &str, target: &str) {
        report.row(label, self.figure(), self.cpu(), "".into(), target);
    }
}

/// `body` posted to `path` of copyrator `p` for `seconds`, from `concurrency` clients, each on
/// its own HTTP/1.1 keep-alive connection over TLS; every answer must be 2xx.
pub async fn load(
    p: &Process,
    path: &'static str,
    body: &Value,
    concurrency: usize,
    seconds: f64,
) -> Load {
    use http_body_util::{BodyExt, Full};
    use hyper::Request;
    use hyper_util::rt::TokioIo;
    use rustls::pki_types::ServerName;

    let tls = tls_config(p);
    let body = bytes::Bytes::from(serde_json::to_vec(body).unwrap());
    let pid = p.child.id();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let cpu_before = cpu_time(pid);
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let tls = Arc::clone(&tls);
            let body = body.clone();
            let port = p.webhook_port;
            tokio::spawn(async move {
                let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .unwrap();
                tcp.set_nodelay(true).unwrap();
                let conn = tokio_rustls::TlsConnector::from(tls)
                    .connect(ServerName::try_from("localhost").unwrap(), tcp)
                    .await
                    .unwrap();
                let (mut sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(conn))
                        .await
                        .unwrap();
                tokio::spawn(connection);
                let mut lat = Vec::new();
                while Instant::now() < deadline {
                    let req = Request::post(path)
                        .header("content-type", "application/json")
                        .header("host", "localhost")
                        .body(Full::new(body.clone()))
                        .unwrap();
                    let t = Instant::now();
                    let resp = sender.send_request(req).await.unwrap();
                    assert!(resp.status().is_success());
                    let _ = resp.into_body().collect().await.unwrap();
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let wall = started.elapsed();
    let cpu = cpu_time(pid).saturating_sub(cpu_before);
    let rps = all.len() as f64 / wall.as_secs_f64();
    let (p50, _, p99, _) = summary(all);
    Load {
        rps,
        p50,
        p99,
        cpu_share: cpu.as_secs_f64() / wall.as_secs_f64(),
    }
}

/// `body` posted to `path` of copyrator `p` for `seconds`, `streams` requests at a time over
/// one HTTP/2 connection over TLS (as the API server's client sends webhook calls); every
/// answer must be 2xx.
pub async fn load_h2(
    p: &Process,
    path: &'static str,
    body: &Value,
    streams: usize,
    seconds: f64,
) -> Load {
    use http_body_util::{BodyExt, Full};
    use hyper::Request;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use rustls::pki_types::ServerName;

    let mut tls = (*tls_config(p)).clone();
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let body = bytes::Bytes::from(serde_json::to_vec(body).unwrap());
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", p.webhook_port))
        .await
        .unwrap();
    tcp.set_nodelay(true).unwrap();
    let conn = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(
        conn.get_ref().1.alpn_protocol(),
        Some(&b"h2"[..]),
        "copyrator offers HTTP/2"
    );
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(conn))
            .await
            .unwrap();
    let driver = tokio::spawn(connection);
    let pid = p.child.id();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let cpu_before = cpu_time(pid);
    let started = Instant::now();
    let tasks: Vec<_> = (0..streams)
        .map(|_| {
            let mut sender = sender.clone();
            let body = body.clone();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while Instant::now() < deadline {
                    let req = Request::post(format!("https://localhost{path}"))
                        .header("content-type", "application/json")
                        .body(Full::new(body.clone()))
                        .unwrap();
                    let t = Instant::now();
                    sender.ready().await.unwrap();
                    let resp = sender.send_request(req).await.unwrap();
                    assert!(resp.status().is_success());
                    let _ = resp.into_body().collect().await.unwrap();
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let wall = started.elapsed();
    let cpu = cpu_time(pid).saturating_sub(cpu_before);
    drop(sender);
    driver.abort();
    let rps = all.len() as f64 / wall.as_secs_f64();
    let (p50, _, p99, _) = summary(all);
    Load {
        rps,
        p50,
        p99,
        cpu_share: cpu.as_secs_f64() / wall.as_secs_f64(),
    }
}

/// A TLS client trusting copyrator `p`'s CA.
fn tls_config(p: &Process) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};

    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&p.ca) {
        roots.add(cert.unwrap()).unwrap();
    }
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

/// Reviews captured from the API server (scripts/capture-fixtures.sh): the envelope, kinds,
/// resources, userInfo and options exactly as it sends them.
const SECRET_UPDATE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/review-secret-update-source.json"
));
const NAMESPACE_CREATE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/review-namespace-create.json"
));

/// The captured review `fixture` carrying the benchmark's request instead: its uid,
/// `operation`, `object` and `old`, and the object's name and namespace.
pub fn review(fixture: &str, operation: &str, object: Value, old: Option<Value>) -> Value {
    let mut review: Value = serde_json::from_str(fixture).expect("a captured AdmissionReview");
    let request = &mut review["request"];
    // The rest of the request (kind, resource, options) stays the fixture's.
    assert_eq!(
        request["kind"]["kind"], object["kind"],
        "a fixture of the same kind"
    );
    assert_eq!(
        request["operation"], operation,
        "a fixture of the same operation"
    );
    let meta = &object["metadata"];
    let name = meta["name"].clone();
    // The API server sends a Namespace's own name as its namespace (review-namespace-create.json).
    let namespace = meta.get("namespace").unwrap_or(&name).clone();
    request["uid"] = json!("0df28fbd-5f5f-11e8-bc74-36e6bb280816");
    request["operation"] = json!(operation);
    request["name"] = name;
    request["namespace"] = namespace;
    request["object"] = object;
    request["oldObject"] = old.unwrap_or(Value::Null);
    review
}
