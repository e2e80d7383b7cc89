//! Measuring instruments shared by the phases: watches that time when objects appear, CPU
//! time and memory of processes from /proc, copyrator's /metrics (API calls, idleness,
//! resyncs), and namespace creation timed at its response.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{
    Api, ResourceExt,
    api::{ListParams, ObjectMeta, PostParams, WatchEvent, WatchParams},
};

use crate::common::{Process, metric_value};

/// Records when each Secret matching `selector` was first seen with `check` true, by
/// `namespace/name`.
/// Returns once the watch's starting point is fixed, so nothing written after it is missed.
pub async fn watch_secrets(
    api: Api<Secret>,
    selector: String,
    check: impl Fn(&Secret) -> bool + Send + 'static,
) -> (
    Arc<Mutex<HashMap<String, Instant>>>,
    tokio::task::JoinHandle<()>,
) {
    watch_objects(api, selector, check).await
}

/// [`watch_secrets`] for any kind.
pub async fn watch_objects<K>(
    api: Api<K>,
    selector: String,
    check: impl Fn(&K) -> bool + Send + 'static,
) -> (
    Arc<Mutex<HashMap<String, Instant>>>,
    tokio::task::JoinHandle<()>,
)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let seen = Arc::new(Mutex::new(HashMap::new()));
    let out = Arc::clone(&seen);
    // From the watch cache (`resourceVersion=0`), as an informer starts: a LIST with a limit
    // goes to etcd, which walks every Secret for the selector (a phase after big-payload
    // holds 500 MB of them) and missed the client's timeout under load.
    let params = kube::api::ListParams::default()
        .labels(&selector)
        .match_any();
    let mut attempt = 0;
    let mut rv = loop {
        match api.list_metadata(&params).await {
            Ok(list) => {
                break list
                    .metadata
                    .resource_version
                    .expect("a list resourceVersion");
            }
            Err(e) if attempt < 5 => {
                attempt += 1;
                eprintln!("listing for the watch failed ({e}); again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => panic!("listing for the watch: {e}"),
        }
    };
    let task = tokio::spawn(async move {
        loop {
            let wp = WatchParams::default().labels(&selector).timeout(290);
            let stream = match api.watch(&wp, &rv).await {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("watch failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let mut stream = stream.boxed();
            while let Some(Ok(event)) = stream.next().await {
                let now = Instant::now();
                match event {
                    WatchEvent::Added(s) | WatchEvent::Modified(s) => {
                        if let Some(v) = s.resource_version() {
                            rv = v;
                        }
                        if check(&s) {
                            let key =
                                format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any());
                            out.lock().unwrap().entry(key).or_insert(now);
                        }
                    }
                    WatchEvent::Deleted(s) => {
                        if let Some(v) = s.resource_version() {
                            rv = v;
                        }
                    }
                    WatchEvent::Bookmark(b) => rv = b.metadata.resource_version,
                    WatchEvent::Error(e) => {
                        eprintln!("watch error: {e:?}");
                        break;
                    }
                }
            }
        }
    });
    (seen, task)
}

pub async fn wait_count(
    seen: &Mutex<HashMap<String, Instant>>,
    n: usize,
    timeout: Duration,
) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if seen.lock().unwrap().len() >= n {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    eprintln!("watch saw {} of {n}", seen.lock().unwrap().len());
    false
}

/// Waits until `seen` holds `n` objects; how long after `start` the last one was seen.
pub async fn all_seen(
    seen: &Mutex<HashMap<String, Instant>>,
    n: usize,
    timeout: Duration,
    start: Instant,
    what: &str,
) -> Duration {
    assert!(wait_count(seen, n, timeout).await, "{what} complete");
    let last = *seen.lock().unwrap().values().max().unwrap();
    last.saturating_duration_since(start)
}

/// CPU used by the meter's processes since `before` was sampled.
pub fn cpu_since(cpu: Option<&CpuMeter>, before: Option<[Duration; 4]>) -> [Duration; 4] {
    match (cpu, before) {
        (Some(m), Some(b)) => cpu_delta(b, m.sample()),
        _ => Default::default(),
    }
}

pub async fn create_namespace(
    api: &Api<Namespace>,
    name: &str,
    labels: &[(&str, &str)],
) -> Instant {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    Instant::now()
}

/// Objects of `api` matching `selector`, counted page by page.
pub async fn count<K>(api: &Api<K>, selector: &str) -> usize
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut lp = ListParams::default().labels(selector).limit(5000);
    let mut n = 0;
    loop {
        let page = api.list_metadata(&lp).await.expect("counting");
        n += page.items.len();
        match page.metadata.continue_ {
            Some(t) if !t.is_empty() => lp.continue_token = Some(t),
            _ => return n,
        }
    }
}

/// Total API calls in a /metrics text.
pub fn api_calls(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("copyrator_api_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// CPU time of the processes that share the machine during a fan-out: the API server, etcd,
/// copyrator and this benchmark (the raw writer, and the watch that times both).
#[derive(Clone)]
pub struct CpuMeter {
    pids: [u32; 4],
}

pub const CPU_PARTS: [&str; 4] = ["kube-apiserver", "etcd", "copyrator", "benchmark client"];

impl CpuMeter {
    /// The control plane's pids (see [`control_plane_pids`]).
    pub fn new(copyrator: u32) -> Option<Self> {
        let [apiserver, etcd] = control_plane_pids()?;
        Some(Self {
            pids: [apiserver, etcd, copyrator, std::process::id()],
        })
    }

    pub fn sample(&self) -> [Duration; 4] {
        self.pids.map(cpu_time)
    }
}

/// kube-apiserver's and etcd's pids, from the pid files beside the kubeconfig
/// (scripts/control-plane.sh).
pub fn control_plane_pids() -> Option<[u32; 2]> {
    let kubeconfig = std::env::var("COPYRATOR_KUBECONFIG").ok()?;
    let dir = std::path::Path::new(&kubeconfig).parent()?;
    let pid = |f: &str| -> Option<u32> {
        std::fs::read_to_string(dir.join(f))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    Some([pid("apiserver.pid")?, pid("etcd.pid")?])
}

fn cpu_delta(before: [Duration; 4], after: [Duration; 4]) -> [Duration; 4] {
    std::array::from_fn(|i| after[i].saturating_sub(before[i]))
}

/// Process CPU time (user + system) of `pid`, from /proc.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_comm = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after_comm.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // Fields after the command: state(0) ... utime(11) stime(12); clock ticks are 100 Hz.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// (VmRSS, VmHWM) of `pid` in MiB.
pub fn memory(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (kb("VmRSS:") / 1024.0, kb("VmHWM:") / 1024.0)
}

/// API calls by verb and resource between two /metrics snapshots.
pub fn call_breakdown(before: &str, after: &str) -> String {
    counter_breakdown("copyrator_api_requests_total", before, after)
}

/// How much each sample of the counter family `name` grew between two scrapes, e.g.
/// `{outcome="used"} 12, {outcome="late"} 3`.
pub fn counter_breakdown(name: &str, before: &str, after: &str) -> String {
    counter_deltas(name, before, after)
        .iter()
        .map(|(labels, d)| format!("{labels} {d:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// API calls by verb and resource between two /metrics snapshots, divided by `n` (calls per
/// namespace, say), to two decimals, the most frequent first.
pub fn call_breakdown_per(before: &str, after: &str, n: usize) -> String {
    let mut deltas = counter_deltas("copyrator_api_requests_total", before, after);
    deltas.sort_by(|a, b| b.1.total_cmp(&a.1));
    deltas
        .iter()
        .map(|(labels, d)| format!("{labels} {:.2}", d / n.max(1) as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The samples of the counter family `name` that grew between two scrapes: their labels
/// (`{verb="get",...}`) and by how much.
pub fn counter_deltas(name: &str, before: &str, after: &str) -> Vec<(String, f64)> {
    let prefix = format!("{name}{{");
    after
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| {
            let (sample, _) = l.rsplit_once(' ')?;
            let d = metric_value(after, sample) - metric_value(before, sample);
            (d > 0.0).then(|| (sample.trim_start_matches(name).to_string(), d))
        })
        .collect()
}

/// Waits until `sample` reached `at_least` and the queue is empty.
pub async fn wait_idle(p: &Process, sample: &str, at_least: f64) {
    let start = Instant::now();
    loop {
        let m = p.metrics().await;
        if metric_value(&m, sample) >= at_least && metric_value(&m, "copyrator_queue_depth") == 0.0
        {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "copyrator not idle after 300 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the process's queue is empty and it made no API call for a second.
pub async fn wait_quiet(p: &Process) {
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut last = (f64::NAN, Instant::now());
    loop {
        let m = p.metrics().await;
        let calls = api_calls(&m);
        if calls != last.0 || metric_value(&m, "copyrator_queue_depth") > 0.0 {
            last = (calls, Instant::now());
        } else if last.1.elapsed() >= Duration::from_secs(1) {
            return;
        }
        assert!(Instant::now() < deadline, "copyrator not quiet after 600 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn resyncs(p: &Process) -> f64 {
    p.metric("copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}")
        .await
}

pub async fn wait_resyncs(p: &Process, at_least: f64, timeout: Duration) {
    let start = Instant::now();
    while resyncs(p).await < at_least {
        assert!(start.elapsed() < timeout, "no resync within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `n` namespaces `<base>-<i>` labelled `key=yes`, created `CONCURRENCY` at a time and tracked
/// for cleanup; returns once copyrator ran every namespace job and its second look.
pub async fn namespace_storm(lr: &crate::LongRun, base: &str, key: &str, n: usize) -> Vec<String> {
    let names: Vec<String> = (0..n)
        .map(|i| lr.env.name(&format!("{base}-{i}")))
        .collect();
    let ns_jobs = "copyrator_jobs_total{kind=\"namespace\",outcome=\"ok\"}";
    let before = lr.p.metric(ns_jobs).await;
    futures::stream::iter(names.iter())
        .map(|name| async move { create_namespace(&lr.namespaces, name, &[(key, "yes")]).await })
        .buffer_unordered(crate::CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    for name in &names {
        lr.env.track_namespace(name);
    }
    // Each namespace job runs twice (the second look): all must be done before timing.
    wait_idle(&lr.p, ns_jobs, before + 2.0 * n as f64).await;
    names
}

/// The bucket of the API server's admission duration histogram above which a create was held
/// by NamespaceLifecycle's 50 ms wait (its buckets: 5 ms, 25 ms, 100 ms, ...).
pub const LIFECYCLE_WAIT_BUCKET: Duration = Duration::from_millis(25);

/// Creates the API server's NamespaceLifecycle admission plugin held for over 25 ms, so far.
///
/// When a create names a namespace its own informer has not seen yet, the plugin sleeps a
/// fixed 50 ms (`missingNamespaceWait` in k8s.io/apiserver's
/// pkg/admission/plugin/namespace/lifecycle) before it looks again: a create right after its
/// namespace, by any client, can take 50 ms more than usual. The plugin's own duration
/// histogram (`apiserver_admission_controller_admission_duration_seconds`, buckets 5 ms, 25 ms,
/// 100 ms, ...) counts those waits: the samples above its 25 ms bucket.
pub async fn namespace_lifecycle_waits(client: &kube::Client) -> f64 {
    use http_body_util::BodyExt;
    let req = hyper::Request::get("/metrics")
        .body(kube::client::Body::empty())
        .unwrap();
    let resp = client.send(req).await.expect("the API server's /metrics");
    assert!(resp.status().is_success(), "/metrics: {}", resp.status());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    lifecycle_waits_in(&String::from_utf8_lossy(&bytes))
}

fn lifecycle_waits_in(metrics: &str) -> f64 {
    let bucket = |le: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| {
                l.starts_with("apiserver_admission_controller_admission_duration_seconds_bucket{")
                    && l.contains(r#"name="NamespaceLifecycle""#)
                    && l.contains(r#"operation="CREATE""#)
                    && l.contains(&format!(r#"le="{le}""#))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    bucket("+Inf") - bucket(&LIFECYCLE_WAIT_BUCKET.as_secs_f64().to_string())
}
