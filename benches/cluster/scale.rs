//! Phase scale: the scale curve, to plan past one machine. The cluster is built up step by step
//! (1,000 → 5,000 → 20,000 namespaces by default) with 10 and then 100 rules; at each point a
//! fresh copyrator's startup resync and its steady-state resyncs are measured (CPU, bytes read
//! from the API server, wall time, RSS), and at one step an update of the source every
//! namespace copies is fanned out beside a plain client making the same writes. Each figure
//! gets a fit (log-log exponent, and a line) and an extrapolation to 50,000 namespaces.
//!
//! The rules are inline sources in one namespace, the usual platform set-up: rule 0, a
//! registry credential (Secret) selecting every benchmark namespace; rules 1.. one team's
//! configuration each (Secrets and ConfigMaps alternately), selecting the namespaces of one of
//! [`TEAMS`] teams (namespace `i` belongs to team `i % TEAMS`). With 10 rules a namespace holds
//! 1.045 copies on average, with 100 rules 1.495: the copies grow with the namespaces at a
//! constant density, so the curve is a function of the cluster's size alone.
//!
//! Between the points copyrator is not running: a converging process (its write limit off: it
//! is the load generator here, not what is measured) makes the copies a step needs with its
//! startup resync, then a fresh process meets the converged cluster and is measured. After the
//! 100-rule point the 90 extra sources are deleted (the next step's converging process deletes
//! their copies), so that every step has a 10-rule point.

use std::time::{Duration, Instant};

use copyrator::marks;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::{
    Api,
    api::{DeleteParams, ListParams, PostParams},
};

use crate::{
    CONCURRENCY,
    common::{Process, TestEnv, config_map, metric_value, secret, webhooks::unregister_webhooks},
    measure::{
        CPU_PARTS, CpuMeter, count, cpu_since, cpu_time, create_namespace, memory, wait_idle,
        wait_resyncs,
    },
    payload,
    report::{Fit, Report, list, median, ms},
    update_round::{NewContent, raw_update, source_update},
};

/// Teams the benchmark namespaces belong to; rule `j ≥ 1` selects team `j`.
const TEAMS: usize = 200;
/// The rule counts measured at each step.
const RULES: [usize; 2] = [10, 100];
/// Namespaces created at once while the cluster grows.
const GROW_CONCURRENCY: usize = 64;
/// The measured process's resync interval, and how many steady-state resyncs are averaged.
const RESYNC_INTERVAL: &str = "3s";
const STEADY_RESYNCS: f64 = 3.0;
/// Rounds of the update fan-out, per write-limit setting.
const FANOUT_ROUNDS: usize = 3;
/// Where the curve is extrapolated to.
const TARGET: f64 = 50_000.0;
const RESYNCS_OK: &str = "copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}";

/// The steps (benchmark namespaces at each point) and where the update fan-out is measured.
pub struct Steps {
    pub namespaces: Vec<usize>,
    pub fanout_at: usize,
}

/// The labels of this run: every benchmark namespace (`all`), its team, every source and its
/// copies (`src`), rule 0's source and its copies (`fan`), the plain client's Secrets (`raw`).
struct Labels {
    all: String,
    team: String,
    src: String,
    fan: String,
    raw: String,
}

/// One measured point: a fresh process at the converged cluster.
#[derive(Clone, Debug, Default)]
struct Point {
    /// Benchmark namespaces, and all namespaces in the cluster.
    namespaces: usize,
    total_ns: usize,
    rules: usize,
    /// Copies of this phase's sources in the cluster (counted by a LIST).
    copies: usize,
    /// Writes the converging process made to get there, and its time.
    converge_writes: f64,
    converge: Duration,
    /// The startup resync: its duration, the process's CPU and the bytes it read until it was
    /// done, VmHWM then.
    startup_wall: f64,
    startup_cpu: f64,
    startup_bytes: f64,
    startup_peak: f64,
    /// A steady-state resync (mean of the measured ones): CPU, bytes read, API calls, writes,
    /// duration; then VmRSS and VmHWM at the end.
    cpu: f64,
    bytes: f64,
    calls: f64,
    writes: f64,
    wall: f64,
    rss: f64,
    peak: f64,
    /// kube-apiserver's and etcd's CPU per steady-state resync, less their idle rate.
    apiserver_cpu: f64,
    etcd_cpu: f64,
    /// What the resync waits for, made by the benchmark client (median of 3): the namespaces
    /// paged from etcd (500 a page, as copyrator does), and the copies (Secrets and ConfigMaps
    /// labelled managed-by) listed from the watch cache.
    ns_pages: f64,
    copies_list: f64,
}

pub async fn run(report: &mut Report, steps: &Steps) {
    let env = TestEnv::new().await;
    let client = env.client.clone();
    let id = &env.id;
    let l = Labels {
        all: format!("bench-scale-{id}"),
        team: format!("bench-scale-team-{id}"),
        src: format!("bench-scale-src-{id}"),
        fan: format!("bench-scale-fan-{id}"),
        raw: format!("bench-scale-raw-{id}"),
    };
    let src = env.namespace("scale-src", &[]).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let phase_started = Instant::now();
    create_sources(&env, &src, &l, 0..RULES[0]).await;

    let mut names: Vec<String> = Vec::new();
    let mut points: Vec<Point> = Vec::new();
    for (s, &n) in steps.namespaces.iter().enumerate() {
        // Grow the cluster (copyrator not running).
        let from = names.len();
        let grow = Instant::now();
        let new: Vec<String> = (from..n).map(|i| env.name(&format!("scale-{i}"))).collect();
        stream::iter(new.iter().enumerate())
            .map(|(k, name)| {
                let namespaces = namespaces.clone();
                let team = format!("t{}", (from + k) % TEAMS);
                let l = &l;
                async move {
                    let labels = [(l.all.as_str(), "yes"), (l.team.as_str(), team.as_str())];
                    create_namespace(&namespaces, name, &labels).await
                }
            })
            .buffer_unordered(GROW_CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
        names.extend(new);
        let grown = grow.elapsed();
        let total_ns = count(&namespaces, "").await;
        report.note(format!(
            "scale: {} namespaces created in {:.1} s ({:.0}/s, {GROW_CONCURRENCY} in flight), {n} in all, {total_ns} in the cluster",
            n - from,
            grown.as_secs_f64(),
            (n - from) as f64 / grown.as_secs_f64().max(1e-3)
        ));

        for (r, &rules) in RULES.iter().enumerate() {
            if r > 0 {
                create_sources(&env, &src, &l, RULES[r - 1]..rules).await;
            }
            let mut point = converge(&client, &l, n, total_ns, rules).await;
            measure_fresh(&mut point).await;
            time_lists(&client, &mut point).await;
            println!("  scale point: {point:?}");
            points.push(point);
            if r == 0 && n == steps.fanout_at {
                fanout(report, &env, &src, &l, &names).await;
            }
        }
        if s + 1 < steps.namespaces.len() {
            // Back to 10 rules: the next step's converging process deletes their copies.
            delete_sources(&env, &src, RULES[0]..RULES[RULES.len() - 1]).await;
        }
    }
    rows(report, &points);
    report.note(format!(
        "scale: the phase took {:.0} s; the cluster is left as it is (a throwaway control plane)",
        phase_started.elapsed().as_secs_f64()
    ));
    // Deleting 20,000 namespaces would take longer than the phase.
    std::mem::forget(env);
}

/// Rule `j`'s source: rule 0 a Secret selecting every benchmark namespace, the others one
/// team's namespaces each, Secrets and ConfigMaps alternately; ~1 KiB of payload each.
async fn create_sources(env: &TestEnv, src: &str, l: &Labels, rules: std::ops::Range<usize>) {
    stream::iter(rules)
        .map(|j| async move {
            let name = format!("scale-{j}");
            let selector = if j == 0 {
                format!("{}=yes", l.all)
            } else {
                format!("{}=t{j}", l.team)
            };
            let mut labels = vec![(marks::SOURCE_LABEL, "true"), (l.src.as_str(), "yes")];
            if j == 0 {
                labels.push((l.fan.as_str(), "yes"));
            }
            let annotations = [(marks::NAMESPACE_SELECTOR_ANNOTATION, selector.as_str())];
            let data = payload(j);
            let data = [("config.json", data.as_str())];
            if j % 2 == 0 {
                let s = secret(&name, &labels, &annotations, &data);
                env.secrets(src)
                    .create(&PostParams::default(), &s)
                    .await
                    .map(|_| ())
            } else {
                let c = config_map(&name, &labels, &annotations, &data);
                env.config_maps(src)
                    .create(&PostParams::default(), &c)
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .expect("creating the sources");
}

async fn delete_sources(env: &TestEnv, src: &str, rules: std::ops::Range<usize>) {
    stream::iter(rules)
        .map(|j| async move {
            let name = format!("scale-{j}");
            let dp = DeleteParams::default();
            if j % 2 == 0 {
                env.secrets(src).delete(&name, &dp).await.map(|_| ())
            } else {
                env.config_maps(src).delete(&name, &dp).await.map(|_| ())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .expect("deleting the sources");
}

/// Copies a step with `rules` rules should hold at `n` benchmark namespaces.
fn expected_copies(n: usize, rules: usize) -> usize {
    n + (1..rules)
        .map(|j| (0..n).filter(|i| i % TEAMS == j).count())
        .sum::<usize>()
}

fn writes(metrics: &str) -> f64 {
    ["create", "update", "delete"]
        .iter()
        .map(|v| {
            metric_value(
                metrics,
                &format!("copyrator_copy_writes_total{{verb=\"{v}\"}}"),
            )
        })
        .sum()
}

/// A copyrator with its write limit off makes what `rules` rules want at `n` namespaces with
/// its startup resync, and stops; the copies are counted.
async fn converge(
    client: &kube::Client,
    l: &Labels,
    n: usize,
    total_ns: usize,
    rules: usize,
) -> Point {
    let started = Instant::now();
    let mut p = Process::spawn(&[
        "--leader-election=false",
        "--resync-interval",
        "1h",
        "--api-qps",
        "0",
        "--unlabelled-scan-interval",
        "0",
        "--log-level",
        "warn",
    ]);
    p.wait_up().await;
    wait_resyncs(&p, 1.0, Duration::from_secs(900)).await;
    wait_idle(&p, RESYNCS_OK, 1.0).await;
    let converge_writes = writes(&p.metrics().await);
    p.terminate();
    let converge = started.elapsed();
    let selector = format!("{}=yes,{}", l.src, marks::MANAGED_SELECTOR);
    let copies = count(&Api::<Secret>::all(client.clone()), &selector).await
        + count(&Api::<ConfigMap>::all(client.clone()), &selector).await;
    let expected = expected_copies(n, rules);
    if copies != expected {
        eprintln!(
            "scale: {copies} copies at {n} namespaces and {rules} rules, {expected} expected"
        );
    }
    Point {
        namespaces: n,
        total_ns,
        rules,
        copies,
        converge_writes,
        converge,
        ..Default::default()
    }
}

/// A fresh process (default settings but a short resync interval) at the converged cluster:
/// its startup resync, then [`STEADY_RESYNCS`] steady-state ones.
async fn measure_fresh(point: &mut Point) {
    // The control plane's own CPU while nothing runs, to subtract.
    let idle_meter = CpuMeter::new(std::process::id());
    let idle_before = idle_meter.as_ref().map(CpuMeter::sample);
    let idle_window = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = cpu_since(idle_meter.as_ref(), idle_before);
    let idle_rate = |i: usize| idle[i].as_secs_f64() / idle_window.elapsed().as_secs_f64();
    let mut p = Process::spawn(&[
        "--leader-election=false",
        "--resync-interval",
        RESYNC_INTERVAL,
        "--unlabelled-scan-interval",
        "0",
        "--log-level",
        "warn",
    ]);
    p.wait_up().await;
    let pid = p.child.id();
    wait_resyncs(&p, 1.0, Duration::from_secs(600)).await;
    let first = p.metrics().await;
    point.startup_cpu = cpu_time(pid).as_secs_f64();
    point.startup_peak = memory(pid).1;
    point.startup_wall = metric_value(&first, "copyrator_resync_duration_seconds_sum");
    point.startup_bytes = metric_value(&first, "copyrator_api_response_bytes_total");
    wait_resyncs(&p, 2.0, Duration::from_secs(600)).await;
    let before = p.metrics().await;
    let cpu_before = cpu_time(pid);
    let meter = CpuMeter::new(pid);
    let parts_before = meter.as_ref().map(CpuMeter::sample);
    let window = Instant::now();
    let done = metric_value(&before, RESYNCS_OK);
    wait_resyncs(&p, done + STEADY_RESYNCS, Duration::from_secs(600)).await;
    let cpu = cpu_time(pid).saturating_sub(cpu_before);
    let parts = cpu_since(meter.as_ref(), parts_before);
    let window = window.elapsed().as_secs_f64();
    let after = p.metrics().await;
    (point.rss, point.peak) = memory(pid);
    p.terminate();
    let delta = |s: &str| metric_value(&after, s) - metric_value(&before, s);
    let k = delta(RESYNCS_OK).max(1.0);
    point.cpu = cpu.as_secs_f64() / k;
    point.bytes = delta("copyrator_api_response_bytes_total") / k;
    point.calls = (crate::measure::api_calls(&after) - crate::measure::api_calls(&before)) / k;
    point.writes = (writes(&after) - writes(&before)) / k;
    point.wall = delta("copyrator_resync_duration_seconds_sum") / k;
    let busy = |i: usize| (parts[i].as_secs_f64() - idle_rate(i) * window).max(0.0) / k;
    point.apiserver_cpu = busy(0);
    point.etcd_cpu = busy(1);
}

/// Times what a resync waits for, made by the benchmark client: all namespaces paged from etcd
/// (metadata, 500 a page), and the copies listed from the watch cache (metadata, label-selected);
/// median of 3 each.
async fn time_lists(client: &kube::Client, point: &mut Point) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut ns = Vec::new();
    let mut copies = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let mut lp = ListParams::default().limit(500);
        loop {
            let page = namespaces
                .list_metadata(&lp)
                .await
                .expect("listing namespaces");
            match page.metadata.continue_ {
                Some(t) if !t.is_empty() => lp.continue_token = Some(t),
                _ => break,
            }
        }
        ns.push(start.elapsed());
        let start = Instant::now();
        let lp = ListParams {
            label_selector: Some(marks::MANAGED_SELECTOR.into()),
            resource_version: Some("0".into()),
            ..Default::default()
        };
        Api::<Secret>::all(client.clone())
            .list_metadata(&lp)
            .await
            .expect("listing copies");
        Api::<ConfigMap>::all(client.clone())
            .list_metadata(&lp)
            .await
            .expect("listing copies");
        copies.push(start.elapsed());
    }
    point.ns_pages = median(&ns).as_secs_f64();
    point.copies_list = median(&copies).as_secs_f64();
}

/// The update fan-out to every benchmark namespace (rule 0's copies), in rounds alternating
/// with a plain client replacing the same number of Secrets (its own, one per namespace); with
/// copyrator's default write limit, then with it off.
async fn fanout(report: &mut Report, env: &TestEnv, src: &str, l: &Labels, names: &[String]) {
    let client = &env.client;
    let n = names.len();
    let start = Instant::now();
    let mut objs: Vec<Secret> = stream::iter(names.iter())
        .map(|ns| {
            let api: Api<Secret> = Api::namespaced(client.clone(), ns);
            let s = secret(
                "scale-raw",
                &[(l.raw.as_str(), "yes")],
                &[],
                &[("config.json", &payload(0))],
            );
            async move { api.create(&PostParams::default(), &s).await }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await
        .expect("raw creates");
    report.note(format!(
        "scale: the plain client created its {n} Secrets in {:.1} s ({CONCURRENCY} in flight)",
        start.elapsed().as_secs_f64()
    ));
    let settings: [(&str, &[&str]); 2] = [
        ("default write limit (--api-qps 500, burst 1,000)", &[]),
        ("write limit off (--api-qps 0)", &["--api-qps", "0"]),
    ];
    let raw_selector = format!("{}=yes", l.raw);
    let fan_selector = format!("{}=yes,{}", l.fan, marks::MANAGED_SELECTOR);
    for (s, (what, flags)) in settings.iter().enumerate() {
        let mut args = vec![
            "--leader-election=false",
            "--resync-interval",
            "1h",
            "--unlabelled-scan-interval",
            "0",
            "--log-level",
            "warn",
        ];
        args.extend_from_slice(flags);
        let mut p = Process::spawn(&args);
        p.wait_up().await;
        wait_resyncs(&p, 1.0, Duration::from_secs(600)).await;
        p.register_webhooks(client).await;
        let cpu = CpuMeter::new(p.child.id());
        let (mut raw, mut cr) = (Vec::new(), Vec::new());
        let (mut raw_cpu, mut cr_cpu) = ([Duration::ZERO; 4], [Duration::ZERO; 4]);
        for round in 0..FANOUT_ROUNDS {
            let tag = format!("s{s}r{round}");
            let before = cpu.as_ref().map(CpuMeter::sample);
            let base = payload(0);
            let content = NewContent {
                key: "config.json",
                base: &base,
                tag: &tag,
            };
            let (took, updated) = raw_update(client, &raw_selector, objs, &content).await;
            objs = updated;
            let used = cpu_since(cpu.as_ref(), before);
            raw_cpu = std::array::from_fn(|i| raw_cpu[i] + used[i]);
            raw.push(took);
            let before = cpu.as_ref().map(CpuMeter::sample);
            let source = (&env.secrets(src), "scale-0");
            cr.push(source_update(client, source, &fan_selector, n, &content).await);
            let used = cpu_since(cpu.as_ref(), before);
            cr_cpu = std::array::from_fn(|i| cr_cpu[i] + used[i]);
        }
        p.terminate();
        unregister_webhooks(client).await;
        let (c, r) = (median(&cr), median(&raw));
        report.row(
            &format!("scale: source updated, {n} copies, {what} (median of {FANOUT_ROUNDS})"),
            format!("{} [{}]", ms(c), list(&cr)),
            format!("{} [{}]", ms(r), list(&raw)),
            format!("{:.2}", c.as_secs_f64() / r.as_secs_f64()),
            "",
        );
        let per_round = |cpu: &[Duration; 4]| {
            CPU_PARTS
                .iter()
                .zip(cpu)
                .map(|(name, d)| format!("{name} {}", ms(*d / FANOUT_ROUNDS as u32)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        report.note(format!(
            "scale: update fan-out to {n}, {what}: CPU per round, raw: {}; copyrator: {}",
            per_round(&raw_cpu),
            per_round(&cr_cpu)
        ));
    }
}

/// The figures of the curve: name, the value of a point, how to print a value.
type Figure = (&'static str, fn(&Point) -> f64, fn(f64) -> String);

fn figures() -> Vec<Figure> {
    fn msf(v: f64) -> String {
        format!("{:.0} ms", v * 1000.0)
    }
    fn mb(v: f64) -> String {
        format!("{:.2} MB", v / 1e6)
    }
    fn mib(v: f64) -> String {
        format!("{v:.1} MiB")
    }
    fn calls(v: f64) -> String {
        format!("{v:.0}")
    }
    vec![
        ("steady resync: CPU", |p| p.cpu, msf),
        ("steady resync: bytes read", |p| p.bytes, mb),
        ("steady resync: wall time", |p| p.wall, msf),
        ("steady resync: API calls", |p| p.calls, calls),
        (
            "steady resync: kube-apiserver CPU",
            |p| p.apiserver_cpu,
            msf,
        ),
        ("steady resync: etcd CPU", |p| p.etcd_cpu, msf),
        ("namespaces paged from etcd (client)", |p| p.ns_pages, msf),
        (
            "copies listed from watch cache (client)",
            |p| p.copies_list,
            msf,
        ),
        ("RSS, settled", |p| p.rss, mib),
        ("RSS, peak (VmHWM)", |p| p.peak, mib),
        ("startup resync: wall time", |p| p.startup_wall, msf),
        ("startup: CPU until resynced", |p| p.startup_cpu, msf),
        (
            "startup: bytes read until resynced",
            |p| p.startup_bytes,
            mb,
        ),
    ]
}

/// The points, then per figure and rule count the fits and the extrapolation.
fn rows(report: &mut Report, points: &[Point]) {
    let steps: Vec<usize> = {
        let mut s: Vec<usize> = points.iter().map(|p| p.namespaces).collect();
        s.dedup();
        s
    };
    let header: Vec<String> = ["figure", "rules"]
        .into_iter()
        .map(String::from)
        .chain(steps.iter().map(|n| format!("{n} ns")))
        .chain(
            [
                "log-log exponent",
                "per 1,000 ns, step by step",
                "at 50,000: last step's rate / power law",
            ]
            .into_iter()
            .map(String::from),
        )
        .collect();
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    let mut table = Vec::new();
    let by_rules =
        |rules: usize| -> Vec<&Point> { points.iter().filter(|p| p.rules == rules).collect() };
    // What the cluster held at each point.
    for rules in RULES {
        let ps = by_rules(rules);
        let mut row = vec![
            "copies (namespaces in the cluster)".to_string(),
            rules.to_string(),
        ];
        row.extend(ps.iter().map(|p| format!("{} ({})", p.copies, p.total_ns)));
        row.extend(["".into(), "".into(), "".into()]);
        table.push(row);
    }
    for (name, value, show) in figures() {
        for rules in RULES {
            let ps = by_rules(rules);
            let xy: Vec<(f64, f64)> = ps.iter().map(|p| (p.namespaces as f64, value(p))).collect();
            let fit = Fit::of(&xy);
            // The marginal cost per 1,000 namespaces between consecutive points: growing from
            // step to step means worse than linear.
            let rates: Vec<f64> = xy
                .windows(2)
                .map(|w| (w[1].1 - w[0].1) / (w[1].0 - w[0].0) * 1000.0)
                .collect();
            let at_target = match (xy.last(), rates.last()) {
                (Some((x, y)), Some(rate)) => show(y + rate * (TARGET - x) / 1000.0),
                _ => "–".into(),
            };
            let mut row = vec![name.to_string(), rules.to_string()];
            row.extend(xy.iter().map(|(_, y)| show(*y)));
            row.push(format!("{:.2}", fit.exponent));
            row.push(
                rates
                    .iter()
                    .map(|r| show(*r))
                    .collect::<Vec<_>>()
                    .join(" → "),
            );
            row.push(format!("{at_target} / {}", show(fit.power_at(TARGET))));
            table.push(row);
        }
    }
    report.table(
        "Scale curve (phase scale): a fresh copyrator at each point; steady resync = mean of the steady-state resyncs measured",
        &header,
        &table,
    );
    for p in points {
        report.note(format!(
            "scale: {} ns, {} rules: {} copies; converging process {:.0} writes in {:.1} s; steady resync {:.0} writes",
            p.namespaces,
            p.rules,
            p.copies,
            p.converge_writes,
            p.converge.as_secs_f64(),
            p.writes
        ));
    }
    report.note(format!(
        "scale: extrapolated to {TARGET:.0} namespaces assuming the same copies per namespace ({:.3} with 10 rules, {:.3} with 100), the same rule mix (one rule selecting every namespace, the others one team of {TEAMS} each), one API server answering at the same speed per object, and copyrator's settings unchanged. 'last step's rate': the value at the last point plus the marginal cost per namespace between the last two points (linear growth from there); 'power law': the least-squares fit on log-log (its exponent is below 1 where a constant part, e.g. the process's baseline RSS, dominates the small points). A marginal cost that grows from step to step means worse than linear",
        expected_copies(20_000, 10) as f64 / 20_000.0,
        expected_copies(20_000, 100) as f64 / 20_000.0,
    ));
    report.note(
        "scale: steady resync = a fresh process (default settings, --resync-interval 3s, the hourly not-opted-in scan off) after its startup resync, mean of 3 resyncs (CPU of the process over them, copyrator_api_response_bytes_total, copyrator_resync_duration_seconds); startup = from the process's start until its first resync is done (CPU includes the process's start, bytes include its watches' first LISTs); RSS from /proc (VmRSS at the end, VmHWM over the process's life); kube-apiserver and etcd CPU per steady resync over the same resyncs, less their rate in 2 s idle before the process started; the two client rows are what the resync waits for, made by the benchmark client after the process stopped (median of 3)".into(),
    );
}
