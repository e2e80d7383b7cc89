//! copyrator against the raw API-server limit, measured in the same run (SPEC §7).
//!
//! Runs the release binary against a real kube-apiserver + etcd (scripts/bench.sh starts a
//! fresh one) and prints each figure beside its baseline and the ratio:
//!
//! 1. new-namespace latency: create response -> copy observed by a watch; baseline: a plain
//!    client creating the same Secret right after the namespace;
//! 2. fan-out: source create / update with N matching namespaces -> every copy observed;
//!    baseline: a plain kube-rs client writing N Secrets at the same concurrency;
//! 3. admission throughput over TLS at rising concurrency, with copyrator's CPU;
//! 4. memory with many namespaces and unrelated Secrets vs none;
//! 5. cost of one steady-state resync.
//!
//! `cargo bench --bench cluster -- [--quick] [--out FILE]`

#[path = "../../tests/common/mod.rs"]
mod common;

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use common::{Process, TestEnv, metric_value, secret, unregister_webhooks};
use copyrator::marks;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{
    Api, ResourceExt,
    api::{ObjectMeta, Patch, PatchParams, PostParams, WatchEvent, WatchParams},
};
use serde_json::json;

/// copyrator's default fan-out concurrency; the raw baseline uses the same.
const CONCURRENCY: usize = 32;

struct Sizes {
    latency_namespaces: usize,
    fanout: usize,
    memory_namespaces: usize,
    memory_secrets: usize,
    admission_seconds: f64,
    big_payload: usize,
    selector_sources: usize,
    selector_writes: usize,
}

fn sizes(quick: bool) -> Sizes {
    if quick {
        Sizes {
            latency_namespaces: 40,
            fanout: 100,
            memory_namespaces: 500,
            memory_secrets: 2_000,
            admission_seconds: 1.0,
            big_payload: 50,
            selector_sources: 20,
            selector_writes: 500,
        }
    } else {
        Sizes {
            latency_namespaces: 200,
            fanout: 500,
            memory_namespaces: 5_000,
            memory_secrets: 50_000,
            admission_seconds: 3.0,
            big_payload: 500,
            selector_sources: 100,
            selector_writes: 4000,
        }
    }
}

/// One printed figure.
struct Row {
    figure: String,
    copyrator: String,
    baseline: String,
    ratio: String,
    target: String,
}

#[derive(Default)]
struct Report {
    rows: Vec<Row>,
    notes: Vec<String>,
}

impl Report {
    fn row(
        &mut self,
        figure: &str,
        copyrator: String,
        baseline: String,
        ratio: String,
        target: &str,
    ) {
        println!("{figure:<48} {copyrator:>24} {baseline:>24} {ratio:>8}   {target}");
        self.rows.push(Row {
            figure: figure.into(),
            copyrator,
            baseline,
            ratio,
            target: target.into(),
        });
    }

    fn note(&mut self, s: String) {
        println!("  - {s}");
        self.notes.push(s);
    }

    fn markdown(&self) -> String {
        let mut out = String::from(
            "| figure | copyrator | baseline (same run) | ratio | SPEC §7 target |\n|---|---|---|---|---|\n",
        );
        for r in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                r.figure, r.copyrator, r.baseline, r.ratio, r.target
            ));
        }
        if !self.notes.is_empty() {
            out.push_str("\nNotes:\n");
            for n in &self.notes {
                out.push_str(&format!("- {n}\n"));
            }
        }
        out
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn summary(mut v: Vec<Duration>) -> (Duration, Duration, Duration, Duration) {
    v.sort();
    (
        percentile(&v, 0.5),
        percentile(&v, 0.9),
        percentile(&v, 0.99),
        *v.last().unwrap_or(&Duration::ZERO),
    )
}

fn payload(i: usize) -> String {
    // A realistic registry credential: ~1 KiB.
    format!(
        "{{\"auths\":{{\"registry.example.com\":{{\"auth\":\"{}\"}}}}}}-{i}",
        "x".repeat(1000)
    )
}

/// Records when each Secret matching `selector` was first seen with `check` true, by
/// `namespace/name`.
/// Returns once the watch's starting point is fixed, so nothing written after it is missed.
async fn watch_secrets(
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
async fn watch_objects<K>(
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
    let mut rv = api
        .list_metadata(&kube::api::ListParams::default().labels(&selector).limit(1))
        .await
        .expect("listing for the watch")
        .metadata
        .resource_version
        .expect("a list resourceVersion");
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

async fn wait_count(seen: &Mutex<HashMap<String, Instant>>, n: usize, timeout: Duration) -> bool {
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
async fn all_seen(
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
fn cpu_since(cpu: Option<&CpuMeter>, before: Option<[Duration; 4]>) -> [Duration; 4] {
    match (cpu, before) {
        (Some(m), Some(b)) => cpu_delta(b, m.sample()),
        _ => Default::default(),
    }
}

async fn create_namespace(api: &Api<Namespace>, name: &str, labels: &[(&str, &str)]) -> Instant {
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

const FANOUT_ROUNDS: usize = 5;
/// Rounds of the diagnostic run without the copies webhook.
const DIAGNOSTIC_ROUNDS: usize = 3;

/// Total API calls in a /metrics text.
fn api_calls(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("copyrator_api_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A plain client writing the same objects copyrator writes: one Secret into each of the
/// `namespaces`, then an update of each (with the resourceVersions the creates returned),
/// `CONCURRENCY` in flight; each timed until a watch saw them all.
async fn raw_fanout(
    client: &kube::Client,
    namespaces: &[String],
    label: &str,
    cpu: Option<&CpuMeter>,
) -> (Duration, Duration, [Duration; 4]) {
    let n = namespaces.len();
    let (seen, watch) =
        watch_secrets(Api::all(client.clone()), format!("{label}=yes"), |_| true).await;
    let start = Instant::now();
    let created: Vec<Secret> = stream::iter(namespaces.iter())
        .map(|ns| {
            let api: Api<Secret> = Api::namespaced(client.clone(), ns);
            let s = secret(
                label,
                &[(label, "yes")],
                &[],
                &[("config.json", &payload(0))],
            );
            async move { api.create(&PostParams::default(), &s).await }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await
        .unwrap();
    let create = all_seen(&seen, n, Duration::from_secs(60), start, "raw creates").await;
    watch.abort();
    let (seen, watch) = watch_secrets(Api::all(client.clone()), format!("{label}=yes"), |s| {
        s.data
            .as_ref()
            .and_then(|d| d.get("config.json"))
            .is_some_and(|v| v.0.ends_with(b"-updated"))
    })
    .await;
    let cpu_before = cpu.map(CpuMeter::sample);
    let start = Instant::now();
    stream::iter(created)
        .map(|mut s| {
            let api: Api<Secret> = Api::namespaced(client.clone(), &s.namespace().unwrap());
            async move {
                let name = s.name_any();
                s.string_data = Some(BTreeMap::from([(
                    "config.json".to_string(),
                    format!("{}-updated", payload(0)),
                )]));
                s.data = None;
                api.replace(&name, &PostParams::default(), &s).await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    let update = all_seen(&seen, n, Duration::from_secs(60), start, "raw updates").await;
    let cpu_used = cpu_since(cpu, cpu_before);
    watch.abort();
    (create, update, cpu_used)
}

/// A source selecting the `n` namespaces labelled `fan_key`: created, then updated; each
/// timed from the API response until a watch saw all `n` copies (with the new content).
async fn copyrator_fanout(
    env: &TestEnv,
    client: &kube::Client,
    src: &str,
    name: &str,
    fan_key: &str,
    n: usize,
    cpu: Option<&CpuMeter>,
) -> (Duration, Duration, [Duration; 4]) {
    // Copies carry their source's labels: watch for them before the source exists.
    let label = format!("bench-{name}-{}", env.id);
    let selector = format!("{label}=yes,{}", marks::MANAGED_SELECTOR);
    let (seen, watch) = watch_secrets(Api::all(client.clone()), selector.clone(), |_| true).await;
    let source = secret(
        name,
        &[(marks::SOURCE_LABEL, "true"), (&label, "yes")],
        &[(
            marks::NAMESPACE_SELECTOR_ANNOTATION,
            &format!("{fan_key}=yes"),
        )],
        &[("config.json", &payload(0))],
    );
    env.secrets(src)
        .create(&PostParams::default(), &source)
        .await
        .unwrap();
    let start = Instant::now();
    let create = all_seen(&seen, n, Duration::from_secs(120), start, "initial fan-out").await;
    watch.abort();
    let (seen, watch) = watch_secrets(Api::all(client.clone()), selector, |s| {
        s.data
            .as_ref()
            .and_then(|d| d.get("config.json"))
            .is_some_and(|v| v.0.ends_with(b"-updated"))
    })
    .await;
    let cpu_before = cpu.map(CpuMeter::sample);
    env.secrets(src)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"stringData": {"config.json": format!("{}-updated", payload(0))}}),
            ),
        )
        .await
        .unwrap();
    let start = Instant::now();
    let update = all_seen(&seen, n, Duration::from_secs(120), start, "update fan-out").await;
    let cpu_used = cpu_since(cpu, cpu_before);
    watch.abort();
    (create, update, cpu_used)
}

#[derive(Default)]
struct Rounds {
    raw_creates: Vec<Duration>,
    raw_updates: Vec<Duration>,
    cr_creates: Vec<Duration>,
    cr_updates: Vec<Duration>,
    /// CPU per process (CPU_PARTS) summed over the rounds' update phases.
    raw_update_cpu: [Duration; 4],
    cr_update_cpu: [Duration; 4],
}

/// `rounds` alternating raw and copyrator fan-outs to `names`; the API calls of copyrator's
/// first round go to `breakdown`.
#[allow(clippy::too_many_arguments)]
async fn fanout_rounds(
    env: &TestEnv,
    client: &kube::Client,
    p: &Process,
    src: &str,
    names: &[String],
    fan_key: &str,
    tag: &str,
    rounds: usize,
    mut breakdown: Option<&mut String>,
) -> Rounds {
    let mut r = Rounds::default();
    for round in 0..rounds {
        let cpu = CpuMeter::new(p.child.id());
        let (c, u, used) = raw_fanout(
            client,
            names,
            &format!("bench-raw{tag}{round}-{}", env.id),
            cpu.as_ref(),
        )
        .await;
        r.raw_creates.push(c);
        r.raw_updates.push(u);
        r.raw_update_cpu = std::array::from_fn(|i| r.raw_update_cpu[i] + used[i]);
        let before = p.metrics().await;
        let (c, u, used) = copyrator_fanout(
            env,
            client,
            src,
            &format!("{tag}{round}"),
            fan_key,
            names.len(),
            cpu.as_ref(),
        )
        .await;
        r.cr_creates.push(c);
        r.cr_updates.push(u);
        r.cr_update_cpu = std::array::from_fn(|i| r.cr_update_cpu[i] + used[i]);
        if let Some(out) = breakdown.take() {
            *out = call_breakdown(&before, &p.metrics().await);
        }
    }
    r
}

/// "raw: ... ; copyrator: ..." CPU per update round, by process.
fn cpu_note(r: &Rounds) -> String {
    let per_round = |cpu: &[Duration; 4], rounds: usize| {
        let total: Duration = cpu.iter().sum();
        let parts: Vec<String> = CPU_PARTS
            .iter()
            .zip(cpu)
            .map(|(name, d)| format!("{name} {}", ms(*d / rounds as u32)))
            .collect();
        format!("{} (total {})", parts.join(", "), ms(total / rounds as u32))
    };
    format!(
        "raw: {}; copyrator: {}",
        per_round(&r.raw_update_cpu, r.raw_updates.len().max(1)),
        per_round(&r.cr_update_cpu, r.cr_updates.len().max(1))
    )
}

fn fanout_row(report: &mut Report, figure: &str, cr: &[Duration], raw: &[Duration], target: &str) {
    let median = |v: &[Duration]| {
        let mut v = v.to_vec();
        v.sort();
        v[v.len() / 2]
    };
    let list = |v: &[Duration]| {
        v.iter()
            .map(|d| format!("{:.0}", d.as_secs_f64() * 1000.0))
            .collect::<Vec<_>>()
            .join("/")
    };
    let (c, r) = (median(cr), median(raw));
    report.row(
        figure,
        format!("{} [{} ms]", ms(c), list(cr)),
        format!("{} [{} ms]", ms(r), list(raw)),
        format!("{:.2}", c.as_secs_f64() / r.as_secs_f64()),
        target,
    );
}

/// CPU time of the processes that share the machine during a fan-out: the API server, etcd,
/// copyrator and this benchmark (the raw writer, and the watch that times both).
#[derive(Clone)]
struct CpuMeter {
    pids: [u32; 4],
}

const CPU_PARTS: [&str; 4] = ["kube-apiserver", "etcd", "copyrator", "benchmark client"];

impl CpuMeter {
    /// The control plane's pids from the pid files beside its kubeconfig (scripts/control-plane.sh).
    fn new(copyrator: u32) -> Option<Self> {
        let kubeconfig = std::env::var("COPYRATOR_KUBECONFIG").ok()?;
        let dir = std::path::Path::new(&kubeconfig).parent()?;
        let pid = |f: &str| -> Option<u32> {
            std::fs::read_to_string(dir.join(f))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        Some(Self {
            pids: [
                pid("apiserver.pid")?,
                pid("etcd.pid")?,
                copyrator,
                std::process::id(),
            ],
        })
    }

    fn sample(&self) -> [Duration; 4] {
        self.pids.map(cpu_time)
    }
}

fn cpu_delta(before: [Duration; 4], after: [Duration; 4]) -> [Duration; 4] {
    std::array::from_fn(|i| after[i].saturating_sub(before[i]))
}

/// Process CPU time (user + system) of `pid`, from /proc.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_comm = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after_comm.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // Fields after the command: state(0) ... utime(11) stime(12); clock ticks are 100 Hz.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// (VmRSS, VmHWM) of `pid` in MiB.
fn memory(pid: u32) -> (f64, f64) {
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
fn call_breakdown(before: &str, after: &str) -> String {
    after
        .lines()
        .filter(|l| l.starts_with("copyrator_api_requests_total{"))
        .filter_map(|l| {
            let (sample, _) = l.rsplit_once(' ')?;
            let d = metric_value(after, sample) - metric_value(before, sample);
            (d > 0.0).then(|| {
                format!(
                    "{} {d:.0}",
                    sample.trim_start_matches("copyrator_api_requests_total")
                )
            })
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Waits until `sample` reached `at_least` and the queue is empty.
async fn wait_idle(p: &Process, sample: &str, at_least: f64) {
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

/// RSS (steady after two resyncs, and peak) of a fresh copyrator against the cluster as it is.
async fn fresh_process_memory() -> (f64, f64) {
    let mut p = Process::spawn(&[
        "--leader-election=false",
        "--resync-interval",
        "5s",
        "--log-level",
        "warn",
    ]);
    p.wait_up().await;
    wait_resyncs(&p, 2.0, Duration::from_secs(120)).await;
    let m = memory(p.child.id());
    p.terminate();
    m
}

async fn resyncs(p: &Process) -> f64 {
    p.metric("copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}")
        .await
}

async fn wait_resyncs(p: &Process, at_least: f64, timeout: Duration) {
    let start = Instant::now();
    while resyncs(p).await < at_least {
        assert!(start.elapsed() < timeout, "no resync within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A ~1 MiB Secret fanned out to `n` namespaces (SPEC §5: a fan-out's memory is the payload
/// plus the writes in flight): copyrator's peak RSS, in a process of its own so that the peak is
/// this phase's, and its time beside a plain client writing the same `n` Secrets.
async fn big_payload(report: &mut Report, env: &TestEnv, n: usize) {
    let client = &env.client;
    let key = format!("bench-big-{}", env.id);
    let ns_api: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = (0..n).map(|i| format!("{key}-{i}")).collect();
    stream::iter(&names)
        .for_each_concurrent(CONCURRENCY, |name| {
            let ns_api = ns_api.clone();
            let key = key.clone();
            async move {
                create_namespace(&ns_api, name, &[(key.as_str(), "yes")]).await;
            }
        })
        .await;
    for name in &names {
        env.track_namespace(name);
    }
    // 1,000,000 bytes of data: 1.33 MB of base64 in every request.
    let data = "x".repeat(1_000_000);

    // The raw client: the same n writes at the same concurrency.
    let start = Instant::now();
    stream::iter(&names)
        .map(|ns| {
            let api: Api<Secret> = Api::namespaced(client.clone(), ns);
            let s = secret("big-raw", &[], &[], &[("blob", &data)]);
            async move { api.create(&PostParams::default(), &s).await }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .expect("raw writes");
    let raw = start.elapsed();
    stream::iter(&names)
        .for_each_concurrent(CONCURRENCY, |ns| {
            let api: Api<Secret> = Api::namespaced(client.clone(), ns);
            async move {
                let _ = api.delete("big-raw", &Default::default()).await;
            }
        })
        .await;

    let mut p = Process::spawn(&[
        "--leader-election=false",
        "--resync-interval",
        "1h",
        "--log-level",
        "warn",
    ]);
    p.wait_up().await;
    p.register_webhooks(client).await;
    wait_resyncs(&p, 1.0, Duration::from_secs(60)).await;
    let (rss_before, _) = memory(p.child.id());
    let src = env.namespace("bench-big-src", &[]).await;
    let all: Api<Secret> = Api::all(client.clone());
    let copy_label = format!("{key}-copy");
    let start = Instant::now();
    env.secrets(&src)
        .create(
            &PostParams::default(),
            &secret(
                "big",
                &[(marks::SOURCE_LABEL, "true"), (copy_label.as_str(), "yes")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &format!("{key}=yes"))],
                &[("blob", &data)],
            ),
        )
        .await
        .unwrap();
    let selector = format!("{copy_label}=yes,{}", marks::MANAGED_SELECTOR);
    let deadline = Instant::now() + Duration::from_secs(300);
    // From the watch cache: a consistent list would read every Secret in etcd each time.
    let lp = kube::api::ListParams {
        resource_version: Some("0".into()),
        ..Default::default()
    }
    .labels(&selector);
    loop {
        let listed = all
            .list_metadata(&lp)
            .await
            .map(|l| l.items.len())
            .unwrap_or(0);
        if listed >= n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "big fan-out: {listed}/{n} after 300 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = start.elapsed();
    let (rss_after, peak) = memory(p.child.id());
    p.terminate();
    unregister_webhooks(client).await;
    report.row(
        &format!("1 MiB Secret fanned out to {n}: time"),
        ms(took),
        ms(raw),
        format!("{:.2}", took.as_secs_f64() / raw.as_secs_f64()),
        "",
    );
    report.row(
        &format!("1 MiB Secret fanned out to {n}: peak RSS"),
        format!("{peak:.1} MiB"),
        format!("{rss_before:.1} MiB before"),
        String::new(),
        "≤ 64 MiB",
    );
    report.note(format!(
        "big payload: RSS {rss_before:.1} MiB before, {rss_after:.1} MiB after, peak {peak:.1} MiB; {n} copies of 1,000,000 bytes in {took:?} (raw client {raw:?})"
    ));
}

/// CopyRule selector sources (SPEC §5): how soon a new matching object's copies exist, and what
/// the design costs the API server per 1,000 unrelated Secret writes in the source namespace:
/// without the feature, with it (one label-selected, metadata-only watch), and with the
/// candidate it was measured against (a mutating webhook on every Secret CREATE in source
/// namespaces; its round trip measured with copyrator's copies endpoint, which allows CREATEs
/// without work).
async fn selector_sources(report: &mut Report, env: &TestEnv, sources: usize, writes: usize) {
    const ROTATIONS: usize = 5;
    use copyrator::copyrule::{CopyRule, CopyRuleSpec};
    use k8s_openapi::api::{
        admissionregistration::v1::MutatingWebhookConfiguration, core::v1::ConfigMap,
    };
    let client = &env.client;
    let mut p = Process::spawn(&[
        "--leader-election=false",
        "--resync-interval",
        "1h",
        "--log-level",
        "warn",
    ]);
    p.wait_up().await;
    p.register_webhooks(client).await;
    wait_resyncs(&p, 1.0, Duration::from_secs(60)).await;
    let cpu = CpuMeter::new(p.child.id());
    let key = format!("bench-sel-{}", env.id);
    let src = env
        .namespace("bench-sel-src", &[(key.as_str(), "source")])
        .await;
    let targets: Vec<String> = {
        let mut v = Vec::new();
        for i in 0..3 {
            v.push(
                env.namespace(&format!("bench-sel-{i}"), &[(key.as_str(), "target")])
                    .await,
            );
        }
        v
    };

    // API-server CPU for `writes` unlabelled Secret creates in the source namespace.
    let unrelated = |round: String| {
        let client = client.clone();
        let src = src.clone();
        let cpu = cpu.as_ref();
        async move {
            let before = cpu.map(CpuMeter::sample);
            let api: Api<Secret> = Api::namespaced(client, &src);
            let start = Instant::now();
            stream::iter(0..writes)
                .map(|i| {
                    let api = api.clone();
                    let name = format!("{round}-{i}");
                    async move {
                        api.create(
                            &PostParams::default(),
                            &secret(&name, &[("team", "x")], &[], &[("k", "v")]),
                        )
                        .await
                    }
                })
                .buffer_unordered(16)
                .try_collect::<Vec<_>>()
                .await
                .expect("unrelated writes");
            (start.elapsed(), cpu_since(cpu, before))
        }
    };

    let rules: Api<CopyRule> = Api::all(client.clone());
    let rule_name = format!("{key}-rule");
    env.track_copy_rule(&rule_name);
    let selector =
        |k: &str, v: &str| k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
            match_labels: Some([(k.to_string(), v.to_string())].into()),
            match_expressions: None,
        };
    let rule = CopyRule::new(
        &rule_name,
        CopyRuleSpec {
            kind: copyrator::model::Kind::ConfigMap,
            source_namespace: src.clone(),
            source_name: None,
            source_selector: Some(selector(&key, "copy-me")),
            namespace_selector: Some(selector(&key, "target")),
            namespaces: vec![],
            exclude_namespaces: vec![],
            target_name: None,
            deletion_policy: Default::default(),
            conflict_policy: Default::default(),
        },
    );
    let watches = |n: f64| {
        let p = &p;
        async move {
            let start = Instant::now();
            while p.metric("copyrator_selector_watches").await != n {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "selector watches != {n}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    // The candidate: a mutating webhook on every Secret CREATE in source namespaces.
    let mwc = format!("{key}-candidate");
    let hook: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": mwc},
        "webhooks": [{
            "name": "candidate.copyrator.io",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {
                "url": format!("https://127.0.0.1:{}/admission/copies", p.webhook_port),
                "caBundle": base64_of(&String::from_utf8_lossy(&p.ca)),
            },
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["secrets"]}],
            "namespaceSelector": {"matchLabels": {key.as_str(): "source"}},
            "failurePolicy": "Ignore",
            "sideEffects": "NoneOnDryRun",
            "timeoutSeconds": 3,
        }]
    }))
    .unwrap();
    let hooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let probes = "copyrator_admission_requests_total{endpoint=\"copies\",operation=\"CREATE\",outcome=\"dry_run\"}";
    let calls = "copyrator_admission_requests_total{endpoint=\"copies\",operation=\"CREATE\",outcome=\"allowed\"}";
    let hook_on = || async {
        hooks.create(&PostParams::default(), &hook).await.unwrap();
        // The API server picks it up asynchronously: dry-run creates until it calls.
        let probe: Api<Secret> = Api::namespaced(client.clone(), &src);
        let before = p.metric(probes).await;
        let start = Instant::now();
        let mut i = 0;
        while p.metric(probes).await <= before {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "candidate webhook never called"
            );
            i += 1;
            let _ = probe
                .create(
                    &PostParams {
                        dry_run: true,
                        field_manager: None,
                    },
                    &secret(&format!("probe-{i}"), &[], &[], &[("k", "v")]),
                )
                .await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let hook_off = || async {
        let _ = hooks.delete(&mwc, &Default::default()).await;
        // Until the API server stops calling it, dry runs still arrive.
        let probe: Api<Secret> = Api::namespaced(client.clone(), &src);
        let start = Instant::now();
        let mut i = 0;
        loop {
            let before = p.metric(probes).await;
            i += 1;
            let _ = probe
                .create(
                    &PostParams {
                        dry_run: true,
                        field_manager: None,
                    },
                    &secret(&format!("gone-{i}"), &[], &[], &[("k", "v")]),
                )
                .await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            if p.metric(probes).await == before {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "candidate webhook still called"
            );
        }
    };

    // Rotating rounds (warm-up first) so that drift of the shared machine hits all three alike.
    unrelated("warmup".into()).await;
    let (mut without, mut with, mut candidate) = (Vec::new(), Vec::new(), Vec::new());
    let mut hook_calls = 0.0;
    for round in 0..ROTATIONS {
        without.push(unrelated(format!("without-{round}")).await);
        rules.create(&PostParams::default(), &rule).await.unwrap();
        watches(1.0).await;
        with.push(unrelated(format!("with-{round}")).await);
        rules.delete(&rule_name, &Default::default()).await.unwrap();
        watches(0.0).await;
        hook_on().await;
        let before = p.metric(calls).await;
        candidate.push(unrelated(format!("candidate-{round}")).await);
        hook_calls += p.metric(calls).await - before;
        hook_off().await;
    }
    let median = |v: &mut Vec<(Duration, [Duration; 4])>| -> (Duration, [Duration; 4]) {
        v.sort_by_key(|(_, c)| c[0]);
        v[v.len() / 2]
    };
    let spread = |v: &[(Duration, [Duration; 4])]| -> String {
        let k = 1000.0 / writes as f64;
        let ms: Vec<String> = v
            .iter()
            .map(|(_, c)| format!("{:.0}", c[0].as_secs_f64() * 1000.0 * k))
            .collect();
        ms.join("/")
    };
    let spreads = format!(
        "API-server ms per 1,000 writes, each round: without {}, selector watch {}, mutating webhook {}",
        spread(&without),
        spread(&with),
        spread(&candidate)
    );
    let (t_without, cpu_without) = median(&mut without);
    let (t_with, cpu_with) = median(&mut with);
    let (t_candidate, cpu_candidate) = median(&mut candidate);
    let calls = hook_calls / ROTATIONS as f64;

    // Latency: one matching ConfigMap at a time, until its copy is in every target.
    rules.create(&PostParams::default(), &rule).await.unwrap();
    watches(1.0).await;
    // One watch for the whole run: copies carry the source's labels.
    let (seen, watch) = watch_objects(
        Api::<ConfigMap>::all(client.clone()),
        format!("{key}=copy-me"),
        {
            let targets = targets.clone();
            move |cm: &ConfigMap| {
                targets
                    .iter()
                    .any(|t| Some(t) == cm.metadata.namespace.as_ref())
            }
        },
    )
    .await;
    let mut latencies = Vec::new();
    for i in 0..sources {
        let name = format!("later-{i}");
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &src);
        let start = Instant::now();
        api.create(
            &PostParams::default(),
            &common::config_map(&name, &[(key.as_str(), "copy-me")], &[], &[("v", "1")]),
        )
        .await
        .unwrap();
        let deadline = start + Duration::from_secs(30);
        let last = loop {
            let times: Vec<Instant> = {
                let seen = seen.lock().unwrap();
                targets
                    .iter()
                    .filter_map(|t| seen.get(&format!("{t}/{name}")).copied())
                    .collect()
            };
            if times.len() == targets.len() {
                break times.into_iter().max().unwrap();
            }
            assert!(
                Instant::now() < deadline,
                "copies of {name} not seen in 30 s"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        latencies.push(last.saturating_duration_since(start));
    }
    watch.abort();
    let (p50, _, p99, max) = summary(latencies);
    let _ = rules.delete(&rule_name, &Default::default()).await;
    p.terminate();
    unregister_webhooks(client).await;

    report.row(
        "source created later → copies in 3 namespaces, p50",
        ms(p50),
        String::new(),
        String::new(),
        "tens of ms",
    );
    report.row(
        "source created later → copies in 3 namespaces, p99",
        ms(p99),
        String::new(),
        String::new(),
        "",
    );
    let per_k = |d: [Duration; 4]| -> String {
        let k = 1000.0 / writes as f64;
        format!(
            "{:.0} ms API server + {:.0} ms etcd + {:.0} ms copyrator",
            d[0].as_secs_f64() * 1000.0 * k,
            d[1].as_secs_f64() * 1000.0 * k,
            d[2].as_secs_f64() * 1000.0 * k
        )
    };
    report.row(
        "CPU per 1,000 unrelated writes, selector watch (chosen)",
        per_k(cpu_with),
        per_k(cpu_without),
        format!(
            "{:.2}",
            cpu_with[0].as_secs_f64() / cpu_without[0].as_secs_f64().max(1e-9)
        ),
        "≈ 1 (no admission work)",
    );
    report.row(
        "CPU per 1,000 unrelated writes, mutating webhook (candidate)",
        per_k(cpu_candidate),
        per_k(cpu_without),
        format!(
            "{:.2}",
            cpu_candidate[0].as_secs_f64() / cpu_without[0].as_secs_f64().max(1e-9)
        ),
        "",
    );
    report.note(format!(
        "selector sources: {sources} ConfigMaps created one at a time, copies in all 3 targets after p50 {} / p99 {} / max {}; {writes} unrelated Secret creates at 16 in flight (median of {ROTATIONS} rotating rounds, by API-server CPU) took {t_without:?} without the feature, {t_with:?} with the selector watch, {t_candidate:?} with a mutating webhook ({calls:.0} admission calls a round)",
        ms(p50),
        ms(p99),
        ms(max)
    ));
    report.note(spreads);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let out = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .cloned();
    if args.iter().any(|a| a == "--list") {
        // `cargo bench -- --list` style discovery: nothing to list.
        return;
    }
    let mut sz = sizes(quick);
    if let Some(n) = args
        .iter()
        .position(|a| a == "--fanout")
        .and_then(|i| args.get(i + 1)?.parse().ok())
    {
        sz.fanout = n;
    }
    let skip_memory = args.iter().any(|a| a == "--no-memory");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let only_big = args.iter().any(|a| a == "--only-big-payload");
    let only_selectors = args.iter().any(|a| a == "--only-selector-sources");
    let report = rt.block_on(async {
        let mut report = Report::default();
        let env = TestEnv::new().await;
        if !only_selectors {
            big_payload(&mut report, &env, sz.big_payload).await;
        }
        if !only_big {
            selector_sources(&mut report, &env, sz.selector_sources, sz.selector_writes).await;
        }
        env.cleanup().await;
        if only_big || only_selectors {
            return report;
        }
        let mut rest = run(sz, skip_memory).await;
        report.rows.append(&mut rest.rows);
        report.notes.append(&mut rest.notes);
        report
    });
    let md = report.markdown();
    println!("\n{md}");
    if let Some(path) = out {
        std::fs::write(&path, md).expect("writing the report");
        println!("written to {path}");
    }
}

async fn run(sz: Sizes, skip_memory: bool) -> Report {
    let mut report = Report::default();
    let env = TestEnv::new().await;
    let client = env.client.clone();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    println!(
        "{:<48} {:>24} {:>24} {:>8}   target",
        "figure", "copyrator", "baseline", "ratio"
    );

    // copyrator: the release binary, its webhooks registered, a resync every 10 s.
    let log_level = std::env::var("COPYRATOR_BENCH_LOG_LEVEL").unwrap_or_else(|_| "warn".into());
    let mut p = Process::spawn(&[
        "--leader-election=false",
        "--resync-interval",
        "1h",
        "--log-level",
        &log_level,
    ]);
    p.wait_up().await;
    p.register_webhooks(&client).await;
    let pid = p.child.id();
    wait_resyncs(&p, 1.0, Duration::from_secs(60)).await;
    let (rss_empty, _) = memory(pid);

    // ---- 1. new-namespace latency -------------------------------------------------------
    let src = env.namespace("bench-src", &[]).await;
    let lat_key = format!("bench-lat-{}", env.id);
    env.secrets(&src)
        .create(
            &PostParams::default(),
            &secret(
                "pull",
                &[(marks::SOURCE_LABEL, "true")],
                &[(
                    marks::NAMESPACE_SELECTOR_ANNOTATION,
                    &format!("{lat_key}=yes"),
                )],
                &[("config.json", &payload(0))],
            ),
        )
        .await
        .unwrap();
    let uid = env.secrets(&src).get("pull").await.unwrap().uid().unwrap();
    let (seen, watch) = watch_secrets(
        Api::all(client.clone()),
        format!("{}={uid}", marks::SOURCE_UID_LABEL),
        |_| true,
    )
    .await;
    let mut created = Vec::new();
    for i in 0..sz.latency_namespaces {
        let name = env.name(&format!("lat-{i}"));
        let t = create_namespace(&namespaces, &name, &[(&lat_key, "yes")]).await;
        env.track_namespace(&name);
        created.push((name, t));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        wait_count(&seen, created.len(), Duration::from_secs(30)).await,
        "copies for every namespace"
    );
    watch.abort();
    let copy_lat: Vec<Duration> = {
        let seen = seen.lock().unwrap();
        created
            .iter()
            .map(|(n, t)| seen[&format!("{n}/pull")].saturating_duration_since(*t))
            .collect()
    };

    // Baseline: a plain client creating the Secret itself right after the namespace.
    let raw_key = format!("bench-raw-{}", env.id);
    let (seen, watch) =
        watch_secrets(Api::all(client.clone()), format!("{raw_key}=yes"), |_| true).await;
    let mut raw_created = Vec::new();
    for i in 0..sz.latency_namespaces {
        let name = env.name(&format!("raw-{i}"));
        let t = create_namespace(&namespaces, &name, &[]).await;
        env.track_namespace(&name);
        env.secrets(&name)
            .create(
                &PostParams::default(),
                &secret(
                    "pull",
                    &[(&raw_key, "yes")],
                    &[],
                    &[("config.json", &payload(0))],
                ),
            )
            .await
            .unwrap();
        raw_created.push((name, t));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(wait_count(&seen, raw_created.len(), Duration::from_secs(30)).await);
    watch.abort();
    let raw_lat: Vec<Duration> = {
        let seen = seen.lock().unwrap();
        raw_created
            .iter()
            .map(|(n, t)| seen[&format!("{n}/pull")].saturating_duration_since(*t))
            .collect()
    };
    let (c50, c90, c99, cmax) = summary(copy_lat);
    let (r50, r90, r99, rmax) = summary(raw_lat);
    for (label, c, r, target) in [
        ("new namespace -> copy, p50", c50, r50, "≤ 30 ms"),
        ("new namespace -> copy, p90", c90, r90, ""),
        ("new namespace -> copy, p99", c99, r99, "≤ 100 ms"),
        ("new namespace -> copy, max", cmax, rmax, ""),
    ] {
        report.row(
            label,
            ms(c),
            ms(r),
            format!("{:.2}", c.as_secs_f64() / r.as_secs_f64().max(1e-9)),
            target,
        );
    }
    report.note(format!(
        "latency: {} namespaces created one by one, 20 ms apart; from the namespace create response to the copy's ADDED watch event; baseline: the same client creating the Secret itself after the namespace",
        sz.latency_namespaces
    ));

    // ---- 2. fan-out -----------------------------------------------------------------------
    let n = sz.fanout;
    let fan_key = format!("bench-fan-{}", env.id);
    let names: Vec<String> = (0..n).map(|i| env.name(&format!("fan-{i}"))).collect();
    let ns_jobs = "copyrator_jobs_total{kind=\"namespace\",outcome=\"ok\"}";
    let ns_jobs_before = p.metric(ns_jobs).await;
    let storm = Instant::now();
    stream::iter(names.iter())
        .map(|name| {
            let namespaces = namespaces.clone();
            let key = fan_key.clone();
            async move { create_namespace(&namespaces, name, &[(&key, "yes")]).await }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    for name in &names {
        env.track_namespace(name);
    }
    // Each namespace job runs twice (the second look): all must be done before timing.
    wait_idle(&p, ns_jobs, ns_jobs_before + 2.0 * n as f64).await;
    report.row(
        &format!("namespace storm: {n} created, {CONCURRENCY} in flight"),
        format!("{} until all {} jobs done", ms(storm.elapsed()), 2 * n),
        "".into(),
        "".into(),
        "",
    );

    // Raw and copyrator runs alternate, each timed until a watch saw every object: the
    // machine's noise hits both alike; medians are reported.
    let mut breakdown = String::new();
    let rounds = fanout_rounds(
        &env,
        &client,
        &p,
        &src,
        &names,
        &fan_key,
        "fan",
        FANOUT_ROUNDS,
        Some(&mut breakdown),
    )
    .await;
    for (what, cr, raw, target) in [
        ("created", &rounds.cr_creates, &rounds.raw_creates, ""),
        (
            "updated",
            &rounds.cr_updates,
            &rounds.raw_updates,
            "≤ 1.25 × raw",
        ),
    ] {
        fanout_row(
            &mut report,
            &format!("fan-out: source {what}, {n} copies (median of {FANOUT_ROUNDS})"),
            cr,
            raw,
            target,
        );
    }
    report.note(format!(
        "fan-out CPU per update round (2 cores = 2 s of CPU per wall second), by process: {}",
        cpu_note(&rounds)
    ));
    report.note(format!(
        "fan-out: raw = a plain kube-rs client writing the same {n} objects (one Secret per namespace, {CONCURRENCY} in flight), copyrator = from the source's create/update response; both until a watch saw every object. copyrator's API calls for one create + update round: {breakdown}; its updates also pass the copies webhook (UPDATE) in the API server, the raw writes do not"
    ));

    // What the copies webhook costs the update fan-out: the same rounds with it unregistered
    // (the API server then skips one admission call per copy update), then registered again.
    {
        use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration as V;
        let api: Api<V> = Api::all(client.clone());
        let saved = api.get(common::WEBHOOK_CONFIG_NAME).await.unwrap();
        let mut without = saved.clone();
        without
            .webhooks
            .as_mut()
            .unwrap()
            .retain(|w| !w.name.starts_with("copies"));
        assert!(without.webhooks.as_ref().unwrap().len() < saved.webhooks.as_ref().unwrap().len());
        api.replace(
            common::WEBHOOK_CONFIG_NAME,
            &PostParams::default(),
            &without,
        )
        .await
        .unwrap();
        // The API server picks up webhook configurations from its informer.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let diag = fanout_rounds(
            &env,
            &client,
            &p,
            &src,
            &names,
            &fan_key,
            "diag",
            DIAGNOSTIC_ROUNDS,
            None,
        )
        .await;
        fanout_row(
            &mut report,
            &format!(
                "diagnostic: source updated, {n} copies, copies webhook unregistered (median of {DIAGNOSTIC_ROUNDS})"
            ),
            &diag.cr_updates,
            &diag.raw_updates,
            "",
        );
        report.note(format!(
            "diagnostic CPU per update round, copies webhook unregistered: {}",
            cpu_note(&diag)
        ));
        let mut restore = api.get(common::WEBHOOK_CONFIG_NAME).await.unwrap();
        restore.webhooks = saved.webhooks;
        api.replace(
            common::WEBHOOK_CONFIG_NAME,
            &PostParams::default(),
            &restore,
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    if let Ok(keep) = std::env::var("COPYRATOR_BENCH_KEEP_LOG") {
        std::fs::copy(&p.log, keep).unwrap();
    }
    // ---- 3. admission throughput ---------------------------------------------------------
    admission(&mut report, &p, sz.admission_seconds).await;

    if skip_memory {
        p.terminate();
        common::unregister_webhooks(&client).await;
        std::mem::forget(env);
        return report;
    }
    // ---- 4. memory and 5. resync cost ------------------------------------------------------
    // The long-running process so far; then the cluster grows without copyrator (the jobs of
    // a 4,000-namespace storm are not what is measured here) and a fresh process meets it:
    // first with the namespaces only, then with the unrelated Secrets as well.
    let (rss_before_load, hwm_long) = memory(pid);
    p.terminate();
    common::unregister_webhooks(&client).await;
    let existing = namespaces
        .list_metadata(&Default::default())
        .await
        .unwrap()
        .items
        .len();
    let extra_ns = sz.memory_namespaces.saturating_sub(existing);
    let total_ns = existing + extra_ns;
    let load_started = Instant::now();
    let mem_names: Vec<String> = (0..extra_ns)
        .map(|i| env.name(&format!("mem-{i}")))
        .collect();
    stream::iter(mem_names.iter())
        .map(|name| {
            let namespaces = namespaces.clone();
            async move { create_namespace(&namespaces, name, &[("bench", "memory")]).await }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
    for name in &mem_names {
        env.track_namespace(name);
    }
    let (ns_only_rss, ns_only_peak) = fresh_process_memory().await;

    let per_ns = sz.memory_secrets.div_ceil(mem_names.len().max(1));
    stream::iter(
        (0..sz.memory_secrets).map(|i| (mem_names[i / per_ns % mem_names.len().max(1)].clone(), i)),
    )
    .map(|(ns, i)| {
        let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let s = secret(
            &format!("unrelated-{i}"),
            &[("app", "other")],
            &[],
            &[("k", "v")],
        );
        async move { api.create(&PostParams::default(), &s).await }
    })
    .buffer_unordered(64)
    .try_collect::<Vec<_>>()
    .await
    .unwrap();
    let managed = Api::<Secret>::all(client.clone())
        .list_metadata(&kube::api::ListParams::default().labels(marks::MANAGED_SELECTOR))
        .await
        .unwrap()
        .items
        .len();
    let sources = Api::<Secret>::all(client.clone())
        .list_metadata(
            &kube::api::ListParams::default().labels(&format!("{}=true", marks::SOURCE_LABEL)),
        )
        .await
        .unwrap()
        .items
        .len();
    report.note(format!(
        "memory: loaded {extra_ns} namespaces (total {total_ns}) and {} unrelated Secrets in {:.0} s, copyrator stopped meanwhile; the cluster also holds the earlier phases' {sources} sources and {managed} copies; RSS read from /proc/<pid>/status (VmRSS, peak VmHWM)",
        sz.memory_secrets,
        load_started.elapsed().as_secs_f64()
    ));

    // The fresh process at the full load: startup resync peak, steady state, one resync's cost.
    let mut fresh = Process::spawn(&[
        "--leader-election=false",
        "--resync-interval",
        "15s",
        "--log-level",
        "warn",
    ]);
    fresh.wait_up().await;
    let fresh_pid = fresh.child.id();
    wait_resyncs(&fresh, 1.0, Duration::from_secs(120)).await;
    wait_resyncs(&fresh, 2.0, Duration::from_secs(60)).await;
    let before = fresh.metrics().await;
    let cpu_before = cpu_time(fresh_pid);
    wait_resyncs(&fresh, 3.0, Duration::from_secs(60)).await;
    let cpu = cpu_time(fresh_pid).saturating_sub(cpu_before);
    let after = fresh.metrics().await;
    let (fresh_rss, fresh_peak) = memory(fresh_pid);
    report.row(
        "RSS, long-running process after phases 1-3",
        format!("{rss_before_load:.1} MiB (peak {hwm_long:.1})"),
        format!("{rss_empty:.1} MiB (empty cluster)"),
        format!("{:.2}", rss_before_load / rss_empty),
        "",
    );
    report.row(
        &format!("RSS, fresh process, {total_ns} ns, no unrelated Secrets"),
        format!("{ns_only_rss:.1} MiB (peak {ns_only_peak:.1})"),
        format!("{rss_empty:.1} MiB (empty cluster)"),
        format!("{:.2}", ns_only_rss / rss_empty),
        "",
    );
    report.row(
        &format!(
            "RSS, fresh process, {total_ns} ns + {} Secrets",
            sz.memory_secrets
        ),
        format!("{fresh_rss:.1} MiB (peak {fresh_peak:.1})"),
        format!("{ns_only_rss:.1} MiB (same, no Secrets)"),
        format!("{:.2}", fresh_rss / ns_only_rss),
        "≤ 32 MiB, flat in Secrets",
    );
    let delta = |s: &str| metric_value(&after, s) - metric_value(&before, s);
    let calls: Vec<String> = after
        .lines()
        .filter(|l| l.starts_with("copyrator_api_requests_total{"))
        .filter_map(|l| {
            let (sample, _) = l.rsplit_once(' ')?;
            let d = delta(sample);
            (d > 0.0).then(|| {
                format!(
                    "{} {d:.0}",
                    sample.trim_start_matches("copyrator_api_requests_total")
                )
            })
        })
        .collect();
    let total_calls: f64 = api_calls(&after) - api_calls(&before);
    let writes: f64 = ["create", "update", "delete"]
        .iter()
        .map(|v| delta(&format!("copyrator_copy_writes_total{{verb=\"{v}\"}}")))
        .sum();
    let resync_secs = delta("copyrator_resync_duration_seconds_sum");
    report.row(
        &format!("steady-state resync at {total_ns} namespaces"),
        format!(
            "{total_calls:.0} calls, {:.2} MB read",
            delta("copyrator_api_response_bytes_total") / 1e6
        ),
        "".into(),
        "".into(),
        "a handful of LISTs",
    );
    report.row(
        "steady-state resync: writes / CPU / duration",
        format!(
            "{writes:.0} writes, {} CPU, {}",
            ms(cpu),
            ms(Duration::from_secs_f64(resync_secs))
        ),
        "".into(),
        "".into(),
        "zero writes",
    );
    report.note(format!(
        "resync calls by verb/resource: {}",
        calls.join(", ")
    ));
    fresh.terminate();
    report.note(
        "cleanup of the benchmark's namespaces is left to the throwaway control plane".into(),
    );
    std::mem::forget(env); // deleting 5,000 namespaces one by one would double the run time
    report
}

/// AdmissionReviews posted over TLS at rising concurrency.
async fn admission(report: &mut Report, p: &Process, seconds: f64) {
    use http_body_util::{BodyExt, Full};
    use hyper::Request;
    use hyper_util::rt::TokioIo;
    use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};

    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&p.ca) {
        roots.add(cert.unwrap()).unwrap();
    }
    let tls = Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    );
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
            review("Secret", "secrets", "UPDATE", secret.clone(), Some(secret)),
        ),
        (
            "/admission/namespaces",
            "Namespace CREATE",
            review(
                "Namespace",
                "namespaces",
                "CREATE",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-x", "labels": {"registry": "enabled"}}}),
                None,
            ),
        ),
    ];
    let pid = p.child.id();
    for (path, what, body) in reviews {
        let body = bytes::Bytes::from(serde_json::to_vec(&body).unwrap());
        for concurrency in [1usize, 4, 16, 64] {
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
            report.row(
                &format!("admission {what}, {concurrency} conn"),
                format!("{rps:.0}/s p50 {} p99 {}", ms(p50), ms(p99)),
                format!(
                    "copyrator CPU {:.0}%",
                    100.0 * cpu.as_secs_f64() / wall.as_secs_f64()
                ),
                "".into(),
                if concurrency == 64 {
                    "≥ 20,000/s, p99 ≤ 2 ms"
                } else {
                    ""
                },
            );
        }
    }
    report.note("admission: the load generator runs on the same 2 cores (HTTP/1.1 keep-alive over TLS, one connection per concurrent client); CPU share in % of one core".into());
}

fn base64_of(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn review(
    kind: &str,
    resource: &str,
    operation: &str,
    object: serde_json::Value,
    old: Option<serde_json::Value>,
) -> serde_json::Value {
    let meta = &object["metadata"];
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "0df28fbd-5f5f-11e8-bc74-36e6bb280816",
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": resource},
            "requestKind": {"group": "", "version": "v1", "kind": kind},
            "requestResource": {"group": "", "version": "v1", "resource": resource},
            "name": meta["name"], "namespace": meta.get("namespace"),
            "operation": operation,
            "userInfo": {"username": "admin", "groups": ["system:masters", "system:authenticated"]},
            "object": object, "oldObject": old,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": if operation == "CREATE" { "CreateOptions" } else { "UpdateOptions" }}
        }
    })
}
