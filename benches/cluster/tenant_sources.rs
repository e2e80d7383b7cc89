//! Phase tenant-sources: untrusted work is bounded by the tenant, not multiplied by the cluster
//! (SPEC §9.4). One untrusted namespace holds many match-all sources, each with a large carried
//! annotation, and no namespace consents to them; a fresh copyrator's memory through its
//! startup resync, and the update fan-out of a trusted platform source, are measured with
//! those sources and without them, at each size of the cluster (5,000 and 20,000 namespaces by
//! default).
//!
//! The cluster: the benchmark namespaces; in the trusted platform namespace a ~1 KiB Secret
//! copied to every one of them and a second one copied to the first few hundred (the one whose
//! update is timed); in the tenant's namespace (not in `--trusted-namespaces`) its Secrets,
//! labelled `copyrator.io/source: "true"`, selecting every namespace (`!no-such-label`) and
//! carrying a 64 KiB annotation each. copyrator is not running while the cluster changes: a
//! converging process makes the platform copies once per size, and the tenant's sources are
//! created or deleted in bulk between runs (they have no copies to make or delete).
//!
//! Runs alternate, (a) without and (b) with the tenant's sources, in the order a b b a (the
//! machine's drift hits both alike). Each run is a fresh process with the same flags: its
//! VmHWM when its startup resync's job is counted done, its VmRSS once it is quiet, then update
//! rounds of the platform source alternating with a plain client replacing as many Secrets of
//! its own (the machine's own noise, measured in the same runs).

use std::time::{Duration, Instant};

use copyrator::marks;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{
    Api,
    api::{DeleteParams, ListParams, PostParams},
};

use crate::{
    CONCURRENCY,
    common::{Process, TestEnv, metric_value, secret, webhooks::unregister_webhooks},
    measure::{count, cpu_time, create_namespace, memory, wait_idle, wait_quiet, wait_resyncs},
    payload,
    report::{Report, list, median, ms, quartiles},
    update_round::{NewContent, raw_update, source_update},
};

/// What the phase builds at each size.
pub struct Sizes {
    /// Benchmark namespaces at each step.
    pub steps: Vec<usize>,
    /// The tenant's sources.
    pub sources: usize,
    /// Namespaces the timed platform source is copied to (the fan-out phase's 500).
    pub fanout: usize,
}

/// The carried annotation on each of the tenant's sources: large, but well within the API
/// server's 256 KiB limit on an object's annotations.
const BLOB_ANNOTATION: &str = "bench.example.com/notes";
const BLOB_BYTES: usize = 64 * 1024;
/// A selector every namespace matches.
const MATCH_ALL: &str = "!no-such-label";
/// (a)/(b) pairs of runs at each size, and update rounds in each run.
const PAIRS: usize = 2;
const ROUNDS: usize = 5;
/// The quiet time before each update round: copyrator's write bucket (burst 1,000 at 500/s)
/// full again, the previous round's watch events and garbage collection done.
const ROUND_GAP: Duration = Duration::from_secs(2);
/// Namespaces created, and tenant sources created, at once.
const GROW_CONCURRENCY: usize = 64;
const SOURCE_CONCURRENCY: usize = 32;
const RESYNCS_OK: &str = "copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}";
/// The timed platform source.
const FAN_SOURCE: &str = "platform-fan";

/// This run's labels: every benchmark namespace (`all`), those the timed source is copied to
/// (`fan_ns`), the platform sources and their copies (`copy`), the timed source and its copies
/// (`fan`), the plain client's Secrets (`raw`), the tenant's sources (`tenant`).
struct Labels {
    all: String,
    fan_ns: String,
    copy: String,
    fan: String,
    raw: String,
    tenant: String,
}

/// What every run at a size shares.
struct Cluster<'a> {
    env: &'a TestEnv,
    l: &'a Labels,
    platform: &'a str,
    tenant: &'a str,
    /// Copies of the timed source at this size.
    fan: usize,
}

/// One fresh process.
#[derive(Default)]
struct Run {
    /// VmHWM when the startup resync was done; VmRSS once quiet after it; VmHWM at the end.
    startup_peak: f64,
    settled: f64,
    life_peak: f64,
    /// The startup resync's duration, the process's CPU and the bytes it read until then.
    startup_wall: f64,
    startup_cpu: f64,
    startup_bytes: f64,
    /// Targets refused by the end of the startup resync (`copyrator_refused_targets_total`).
    refused: f64,
    /// The update rounds: copyrator's fan-out and the plain client's.
    fanout: Vec<Duration>,
    raw: Vec<Duration>,
}

pub async fn run(report: &mut Report, sz: &Sizes) {
    let env = TestEnv::new().await;
    let client = env.client.clone();
    let id = &env.id;
    let l = Labels {
        all: format!("bench-tenant-{id}"),
        fan_ns: format!("bench-tenant-fan-ns-{id}"),
        copy: format!("bench-tenant-copy-{id}"),
        fan: format!("bench-tenant-fan-{id}"),
        raw: format!("bench-tenant-raw-{id}"),
        tenant: format!("bench-tenant-src-{id}"),
    };
    let phase_started = Instant::now();
    let platform = env.namespace("tenant-platform", &[]).await;
    let tenant = env.namespace("tenant-a", &[]).await;
    create_platform_sources(&env, &platform, &l).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut names: Vec<String> = Vec::new();
    let mut raw_objs: Vec<Secret> = Vec::new();
    for &n in &sz.steps {
        let from = names.len();
        let grow = Instant::now();
        let new: Vec<String> = (from..n)
            .map(|i| env.name(&format!("tenant-{i}")))
            .collect();
        stream::iter(new.iter().enumerate())
            .map(|(k, name)| {
                let (namespaces, l) = (&namespaces, &l);
                let mut labels = vec![(l.all.as_str(), "yes")];
                if from + k < sz.fanout {
                    labels.push((l.fan_ns.as_str(), "yes"));
                }
                async move { create_namespace(namespaces, name, &labels).await }
            })
            .buffer_unordered(GROW_CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
        names.extend(new);
        let grown = grow.elapsed();
        let fan = n.min(sz.fanout);
        raw_objs.extend(create_raw(&client, &l, &names[raw_objs.len()..fan]).await);
        let total_ns = count(&namespaces, "").await;
        report.note(format!(
            "tenant-sources: {} namespaces created in {:.1} s ({GROW_CONCURRENCY} in flight), {n} in all, {total_ns} in the cluster",
            n - from,
            grown.as_secs_f64()
        ));
        let c = Cluster {
            env: &env,
            l: &l,
            platform: &platform,
            tenant: &tenant,
            fan,
        };
        converge(report, &c, n).await;
        let mut without: Vec<Run> = Vec::new();
        let mut with: Vec<Run> = Vec::new();
        for pair in 0..PAIRS {
            // a b, then b a: each variant as often first as second.
            let order = if pair % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for tenant_sources in order {
                set_tenant_sources(report, &c, tenant_sources.then_some(sz.sources)).await;
                let tag = format!("n{n}p{pair}{}", if tenant_sources { "b" } else { "a" });
                let (run, objs) = measure(&c, raw_objs, &tag).await;
                raw_objs = objs;
                println!(
                    "  tenant-sources {n} ns, {}: startup peak {:.1} MiB, settled {:.1} MiB, fan-out {}",
                    if tenant_sources { "with" } else { "without" },
                    run.startup_peak,
                    run.settled,
                    list(&run.fanout)
                );
                if tenant_sources {
                    with.push(run);
                } else {
                    without.push(run);
                }
            }
        }
        // Gone before the next size grows and converges, and at the end of the phase.
        set_tenant_sources(report, &c, None).await;
        rows(report, n, sz.sources, fan, &with, &without);
    }
    // The platform sources too; the namespaces are left to the throwaway control plane, as
    // the scale phase leaves them (deleting 20,000 of them would take longer than the phase).
    for name in ["platform-all", FAN_SOURCE] {
        let _ = env
            .secrets(&platform)
            .delete(name, &DeleteParams::default())
            .await;
    }
    report.note(format!(
        "tenant-sources: at each size, runs alternate without (a) and with (b) the tenant's sources, a b b a; each is a fresh copyrator with the same flags (--trusted-namespaces naming the platform namespace only, --resync-interval 1h, the rest default). Its startup peak is VmHWM when copyrator_jobs_total{{kind=\"resync\"}} first counts one done, settled is VmRSS once its queue is empty and it made no API call for 1 s (after the jobs the resync queued and the not-opted-in scan that follows it), the run's peak VmHWM at its end. Then, its webhooks registered, {ROUNDS} rounds: a plain client replacing its own Secret in each of the timed source's namespaces ({CONCURRENCY} in flight), then the platform source updated, each timed until a watch saw every object with the new content, {} s of quiet before each. Noise: the fan-out counts as unchanged when the median of the rounds with the tenant's sources lies between the first and third quartiles of the rounds without (above them: slower than the machine's noise explains); the plain client's ratio between the same runs is the machine's own drift, to read a difference by",
        ROUND_GAP.as_secs()
    ));
    report.note(format!(
        "tenant-sources: the phase took {:.0} s; the tenant's and the platform's sources were deleted at its end, the namespaces (and the platform copies in them) are left to the throwaway control plane",
        phase_started.elapsed().as_secs_f64()
    ));
    std::mem::forget(env);
}

/// The platform's two sources: `platform-all` copied to every benchmark namespace, and the
/// timed one copied to those labelled `fan_ns`; ~1 KiB of payload each.
async fn create_platform_sources(env: &TestEnv, platform: &str, l: &Labels) {
    let fan_selector = format!("{}=yes", l.fan_ns);
    let all_selector = format!("{}=yes", l.all);
    let sources = [
        ("platform-all", all_selector.as_str(), None),
        (FAN_SOURCE, fan_selector.as_str(), Some(l.fan.as_str())),
    ];
    for (name, selector, extra_label) in sources {
        let mut labels = vec![(marks::SOURCE_LABEL, "true"), (l.copy.as_str(), "yes")];
        labels.extend(extra_label.map(|k| (k, "yes")));
        let s = secret(
            name,
            &labels,
            &[(marks::NAMESPACE_SELECTOR_ANNOTATION, selector)],
            &[("config.json", &payload(0))],
        );
        env.secrets(platform)
            .create(&PostParams::default(), &s)
            .await
            .expect("creating a platform source");
    }
}

/// The plain client's Secret in each of `namespaces`, labelled `raw`.
async fn create_raw(client: &kube::Client, l: &Labels, namespaces: &[String]) -> Vec<Secret> {
    stream::iter(namespaces)
        .map(|ns| {
            let api: Api<Secret> = Api::namespaced(client.clone(), ns);
            let s = secret(
                "tenant-raw",
                &[(l.raw.as_str(), "yes")],
                &[],
                &[("config.json", &payload(0))],
            );
            async move { api.create(&PostParams::default(), &s).await }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await
        .expect("raw creates")
}

/// copyrator's flags in this phase: only the platform namespace is trusted. `extra` is
/// appended.
fn flags<'a>(c: &'a Cluster, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--leader-election=false",
        "--resync-interval",
        "1h",
        "--trusted-namespaces",
        c.platform,
        "--log-level",
        "warn",
    ];
    args.extend_from_slice(extra);
    args
}

/// A copyrator with its write limit off makes the platform copies this size needs with its
/// startup resync, and stops (the tenant's sources are absent); the copies are counted.
async fn converge(report: &mut Report, c: &Cluster<'_>, n: usize) {
    let started = Instant::now();
    let mut p = Process::spawn(&flags(
        c,
        &["--api-qps", "0", "--unlabelled-scan-interval", "0"],
    ));
    p.wait_up().await;
    wait_resyncs(&p, 1.0, Duration::from_secs(900)).await;
    wait_idle(&p, RESYNCS_OK, 1.0).await;
    p.terminate();
    let selector = format!("{}=yes,{}", c.l.copy, marks::MANAGED_SELECTOR);
    let copies = count(&Api::<Secret>::all(c.env.client.clone()), &selector).await;
    let expected = n + c.fan;
    assert_eq!(
        copies, expected,
        "tenant-sources: the platform's copies at {n} namespaces"
    );
    report.note(format!(
        "tenant-sources: {copies} platform copies at {n} namespaces made by a converging process in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
}

/// The tenant's sources: `n` of them created (if there are none), or all deleted (`None`).
async fn set_tenant_sources(report: &mut Report, c: &Cluster<'_>, n: Option<usize>) {
    let api = c.env.secrets(c.tenant);
    let selector = format!("{}=yes", c.l.tenant);
    let present = count(&api, &selector).await;
    let started = Instant::now();
    match n {
        Some(n) if present == 0 => {
            stream::iter(0..n)
                .map(|i| {
                    let api = &api;
                    let s = tenant_source(c.l, i);
                    async move { api.create(&PostParams::default(), &s).await }
                })
                .buffer_unordered(SOURCE_CONCURRENCY)
                .try_collect::<Vec<_>>()
                .await
                .expect("creating the tenant's sources");
            report.note(format!(
                "tenant-sources: the tenant's {n} sources ({} KiB annotation each) created in {:.1} s ({SOURCE_CONCURRENCY} in flight)",
                BLOB_BYTES / 1024,
                started.elapsed().as_secs_f64()
            ));
        }
        None if present > 0 => {
            let lp = ListParams::default().labels(&selector);
            api.delete_collection(&DeleteParams::default(), &lp)
                .await
                .expect("deleting the tenant's sources");
            let deadline = Instant::now() + Duration::from_secs(300);
            while count(&api, &selector).await > 0 {
                assert!(Instant::now() < deadline, "the tenant's sources deleted");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            println!(
                "  tenant-sources: the tenant's {present} sources deleted in {:.1} s",
                started.elapsed().as_secs_f64()
            );
        }
        _ => {}
    }
}

/// The tenant's source `i`: a match-all rule nobody consents to, with a large annotation that
/// a copy would carry.
fn tenant_source(l: &Labels, i: usize) -> Secret {
    let prefix = format!("{i}-");
    let blob = format!("{prefix}{}", "n".repeat(BLOB_BYTES - prefix.len()));
    secret(
        &format!("tenant-src-{i}"),
        &[(marks::SOURCE_LABEL, "true"), (l.tenant.as_str(), "yes")],
        &[
            (marks::NAMESPACE_SELECTOR_ANNOTATION, MATCH_ALL),
            (BLOB_ANNOTATION, blob.as_str()),
        ],
        &[("token", "tenant")],
    )
}

/// A fresh process at the cluster as it is: its startup resync, quiet, then [`ROUNDS`] update
/// rounds with its webhooks registered, each after a plain client's round.
async fn measure(c: &Cluster<'_>, mut raw_objs: Vec<Secret>, tag: &str) -> (Run, Vec<Secret>) {
    let client = &c.env.client;
    let mut p = Process::spawn(&flags(c, &[]));
    p.wait_up().await;
    let pid = p.child.id();
    wait_resyncs(&p, 1.0, Duration::from_secs(900)).await;
    let mut run = Run {
        startup_peak: memory(pid).1,
        startup_cpu: cpu_time(pid).as_secs_f64(),
        ..Default::default()
    };
    let m = p.metrics().await;
    run.startup_wall = metric_value(&m, "copyrator_resync_duration_seconds_sum");
    run.startup_bytes = metric_value(&m, "copyrator_api_response_bytes_total");
    run.refused = metric_value(&m, "copyrator_refused_targets_total");
    // The jobs the startup resync queued, and the not-opted-in scan that follows it.
    wait_quiet(&p).await;
    run.settled = memory(pid).0;
    p.register_webhooks(client).await;
    let raw_selector = format!("{}=yes", c.l.raw);
    let fan_selector = format!("{}=yes,{}", c.l.fan, marks::MANAGED_SELECTOR);
    let source = c.env.secrets(c.platform);
    let base = payload(0);
    for round in 0..ROUNDS {
        let tag = format!("{tag}r{round}");
        let content = NewContent {
            key: "config.json",
            base: &base,
            tag: &tag,
        };
        tokio::time::sleep(ROUND_GAP).await;
        let (took, objs) = raw_update(client, &raw_selector, raw_objs, &content).await;
        raw_objs = objs;
        run.raw.push(took);
        tokio::time::sleep(ROUND_GAP).await;
        let took = source_update(
            client,
            (&source, FAN_SOURCE),
            &fan_selector,
            c.fan,
            &content,
        );
        run.fanout.push(took.await);
    }
    run.life_peak = memory(pid).1;
    p.terminate();
    unregister_webhooks(client).await;
    (run, raw_objs)
}

fn median_of(v: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = v.collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// A figure of a run: its name, its value, its target.
type Figure = (&'static str, fn(&Run) -> f64, &'static str);

/// The rows of one size: (b) `with` the tenant's sources beside (a) `without`.
fn rows(report: &mut Report, n: usize, sources: usize, fan: usize, with: &[Run], without: &[Run]) {
    let mib = |runs: &[Run], f: fn(&Run) -> f64| {
        let m = median_of(runs.iter().map(f));
        let all: Vec<String> = runs.iter().map(|r| format!("{:.1}", f(r))).collect();
        (m, format!("{m:.1} MiB [{}]", all.join("/")))
    };
    let memory_rows: [Figure; 3] = [
        (
            "peak RSS through the startup resync",
            |r| r.startup_peak,
            "≤ 1.1 × without",
        ),
        ("RSS settled after it", |r| r.settled, ""),
        (
            "peak RSS over the run (startup, scan, fan-out)",
            |r| r.life_peak,
            "",
        ),
    ];
    for (what, f, target) in memory_rows {
        let (b, b_text) = mib(with, f);
        let (a, a_text) = mib(without, f);
        report.row(
            &format!("tenant-sources, {n} ns: {what}, with {sources} tenant sources vs without"),
            b_text,
            a_text,
            format!("{:.2}", b / a),
            target,
        );
    }
    let rounds = |runs: &[Run], f: fn(&Run) -> &Vec<Duration>| -> Vec<Duration> {
        runs.iter().flat_map(|r| f(r).iter().copied()).collect()
    };
    let (b, a) = (rounds(with, |r| &r.fanout), rounds(without, |r| &r.fanout));
    let (q1, q3) = quartiles(&a);
    let (mb, ma) = (median(&b), median(&a));
    // Where (b)'s median falls among (a)'s rounds; the plain client's ratio in the same runs
    // says how much of a difference is the machine's.
    let verdict = if mb > q3 {
        "above"
    } else if mb < q1 {
        "below"
    } else {
        "within"
    };
    let (rb, ra) = (rounds(with, |r| &r.raw), rounds(without, |r| &r.raw));
    let drift = median(&rb).as_secs_f64() / median(&ra).as_secs_f64();
    report.row(
        &format!(
            "tenant-sources, {n} ns: platform source updated, {fan} copies, with vs without (median of {})",
            b.len()
        ),
        format!("{} [{}]", ms(mb), list(&b)),
        format!("{} [{}]", ms(ma), list(&a)),
        format!(
            "{:.2}: {verdict} without's quartiles {:.0}–{:.0} ms (plain client {drift:.2})",
            mb.as_secs_f64() / ma.as_secs_f64(),
            q1.as_secs_f64() * 1000.0,
            q3.as_secs_f64() * 1000.0,
        ),
        "unchanged within noise",
    );
    report.row(
        &format!("tenant-sources, {n} ns: plain client, {fan} Secrets updated, in the same runs"),
        format!("{} [{}]", ms(median(&rb)), list(&rb)),
        format!("{} [{}]", ms(median(&ra)), list(&ra)),
        format!("{drift:.2}"),
        "",
    );
    let startup = |runs: &[Run]| {
        format!(
            "resync {:.2} s, CPU {:.2} s, {:.1} MB read, {:.0} targets refused",
            median_of(runs.iter().map(|r| r.startup_wall)),
            median_of(runs.iter().map(|r| r.startup_cpu)),
            median_of(runs.iter().map(|r| r.startup_bytes)) / 1e6,
            median_of(runs.iter().map(|r| r.refused)),
        )
    };
    report.note(format!(
        "tenant-sources, {n} ns: startup of a fresh process (median of {} runs each), with the tenant's sources: {}; without: {}",
        with.len(),
        startup(with),
        startup(without)
    ));
}
