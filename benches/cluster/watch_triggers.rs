//! Phase watch-triggers: the same copyrator with its webhooks registered, then with the
//! webhook configurations deleted (SPEC §5, watches as triggers): new namespaces one at a
//! time until each copy is seen, and source updates until every copy has the new content;
//! the API calls each change cost, and the jobs the watches queued because no admission did.
//! With webhooks, an admitted change's job is woken by its watch event: no second job.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use copyrator::marks;
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, ResourceExt,
    api::{ObjectMeta, Patch, PatchParams, PostParams},
};
use serde_json::json;

use crate::{
    LongRun,
    common::{
        Process, secret,
        webhooks::{DRY_RUN_PROBES, unregister_webhooks},
    },
    measure::{api_calls, call_breakdown, counter_breakdown, create_namespace, watch_secrets},
    payload,
    report::{Report, ms, summary},
};

pub struct Sizes {
    /// New namespaces per half, one at a time.
    pub namespaces: usize,
    /// Source updates per half, one at a time.
    pub updates: usize,
    /// Namespaces each update is fanned out to.
    pub fanout: usize,
}

const TRIGGERED: &str = "copyrator_watch_triggered_jobs_total";
const JOBS: &str = "copyrator_jobs_total";

/// What one half (webhooks on or off) measured.
struct Half {
    ns_latency: Vec<Duration>,
    update_latency: Vec<Duration>,
    ns_calls: f64,
    update_calls: f64,
    ns_triggered: f64,
    update_triggered: f64,
    /// Notes: calls, triggered jobs and jobs by kind, for the namespaces and the updates.
    ns_breakdown: String,
    update_breakdown: String,
}

/// The sum of every sample of the counter family `name` in a /metrics text.
fn family_sum(metrics: &str, name: &str) -> f64 {
    let prefix = format!("{name}{{");
    metrics
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until the watch saw `key`; when, or `None` after `timeout`.
async fn seen_at(
    seen: &Mutex<HashMap<String, Instant>>,
    key: &str,
    timeout: Duration,
) -> Option<Instant> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Some(t) = seen.lock().unwrap().get(key) {
            return Some(*t);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    None
}

/// Waits until copyrator has nothing queued, after the second look of an admitted namespace
/// job (1 s after it ran) had time to be queued: its API calls belong to the change.
async fn settle(p: &Process) {
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let start = Instant::now();
    while p.metric("copyrator_queue_depth").await > 0.0 {
        assert!(start.elapsed() < Duration::from_secs(60), "copyrator idle");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Deletes the webhook configurations and waits until the API server stops calling
/// copyrator: five dry-run namespace creates in a row that copyrator did not see.
async fn webhooks_off(client: &kube::Client, p: &Process) {
    unregister_webhooks(client).await;
    let api: Api<Namespace> = Api::all(client.clone());
    let dry_run = PostParams {
        dry_run: true,
        field_manager: None,
    };
    let start = Instant::now();
    let mut quiet = 0;
    while quiet < 5 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the API server still calls copyrator's webhooks 30 s after their deletion"
        );
        let before = p.metric(DRY_RUN_PROBES).await;
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(format!("bench-wt-probe-{}", start.elapsed().as_nanos())),
                ..Default::default()
            },
            ..Default::default()
        };
        let _ = api.create(&dry_run, &ns).await;
        quiet = if p.metric(DRY_RUN_PROBES).await > before {
            0
        } else {
            quiet + 1
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One half: `sz.namespaces` new namespaces labelled `ns_key`, created one at a time, each
/// timed from its create response until the watch saw its copy of `ns_source`; then
/// `sz.updates` updates of `fan_source`, each timed from its patch response until every one
/// of its `sz.fanout` copies has the new content.
#[allow(clippy::too_many_arguments)]
async fn half(
    lr: &LongRun,
    sz: &Sizes,
    tag: &str,
    ns_key: &str,
    ns_source: (&str, &str),
    fan_source: (&str, &str),
    version: &mut usize,
) -> Half {
    let LongRun {
        env,
        client,
        namespaces,
        src,
        p,
        ..
    } = lr;
    let (ns_source, ns_uid) = ns_source;
    let (fan_source, fan_uid) = fan_source;
    let (seen, watch) = watch_secrets(
        Api::all(client.clone()),
        format!("{}={ns_uid}", marks::SOURCE_UID_LABEL),
        |_| true,
    )
    .await;
    let before = p.metrics().await;
    let mut ns_latency = Vec::new();
    for i in 0..sz.namespaces {
        let name = env.name(&format!("wt-{tag}-{i}"));
        let t = create_namespace(namespaces, &name, &[(ns_key, "yes")]).await;
        env.track_namespace(&name);
        let at = seen_at(
            &seen,
            &format!("{name}/{ns_source}"),
            Duration::from_secs(60),
        )
        .await
        .unwrap_or_else(|| panic!("the copy in {name} within 60 s ({tag})"));
        ns_latency.push(at.saturating_duration_since(t));
    }
    watch.abort();
    settle(p).await;
    let after = p.metrics().await;
    let n = sz.namespaces as f64;
    let ns_calls = (api_calls(&after) - api_calls(&before)) / n;
    let ns_triggered = family_sum(&after, TRIGGERED) - family_sum(&before, TRIGGERED);
    let ns_breakdown = breakdown(&before, &after);

    let before = p.metrics().await;
    let mut update_latency = Vec::new();
    for _ in 0..sz.updates {
        *version += 1;
        let content = format!("{}-v{version}", payload(0));
        let expected = content.clone().into_bytes();
        let (seen, watch) = watch_secrets(
            Api::all(client.clone()),
            format!("{}={fan_uid}", marks::SOURCE_UID_LABEL),
            move |s| {
                s.data
                    .as_ref()
                    .and_then(|d| d.get("config.json"))
                    .is_some_and(|v| v.0 == expected)
            },
        )
        .await;
        env.secrets(src)
            .patch(
                fan_source,
                &PatchParams::default(),
                &Patch::Merge(json!({"stringData": {"config.json": content}})),
            )
            .await
            .unwrap();
        let start = Instant::now();
        update_latency.push(
            crate::measure::all_seen(
                &seen,
                sz.fanout,
                Duration::from_secs(60),
                start,
                &format!("update fanned out ({tag})"),
            )
            .await,
        );
        watch.abort();
        // Each update finds copyrator quiet, as a source edited now and then does.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    settle(p).await;
    let after = p.metrics().await;
    let k = sz.updates as f64;
    Half {
        ns_latency,
        update_latency,
        ns_calls,
        update_calls: (api_calls(&after) - api_calls(&before)) / k,
        ns_triggered,
        update_triggered: family_sum(&after, TRIGGERED) - family_sum(&before, TRIGGERED),
        ns_breakdown,
        update_breakdown: breakdown(&before, &after),
    }
}

/// API calls, watch-triggered jobs and jobs between two scrapes.
fn breakdown(before: &str, after: &str) -> String {
    format!(
        "API calls: {}; watch-triggered jobs: {}; jobs: {}",
        call_breakdown(before, after),
        or_none(counter_breakdown(TRIGGERED, before, after)),
        counter_breakdown(JOBS, before, after)
    )
}

fn or_none(s: String) -> String {
    if s.is_empty() { "none".into() } else { s }
}

/// Both halves against the long-running copyrator, webhooks registered first; registered
/// again at the end for the phases after this one.
pub async fn run(report: &mut Report, lr: &LongRun, sz: &Sizes) {
    let LongRun {
        env,
        client,
        src,
        p,
        ..
    } = lr;
    let ns_key = format!("bench-wt-ns-{}", env.id);
    let fan_key = format!("bench-wt-fan-{}", env.id);
    let phase_start = Instant::now();
    crate::measure::namespace_storm(lr, "wt-fan", &fan_key, sz.fanout).await;
    let mut uids = Vec::new();
    for (name, key) in [("wt-ns", &ns_key), ("wt-fan", &fan_key)] {
        let s = secret(
            name,
            &[(marks::SOURCE_LABEL, "true")],
            &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &format!("{key}=yes"))],
            &[("config.json", &payload(0))],
        );
        let created = env
            .secrets(src)
            .create(&PostParams::default(), &s)
            .await
            .unwrap();
        uids.push(created.uid().unwrap());
    }
    // The fan-out source's first copies, before any update is timed.
    {
        let (seen, watch) = watch_secrets(
            Api::all(client.clone()),
            format!("{}={}", marks::SOURCE_UID_LABEL, uids[1]),
            |_| true,
        )
        .await;
        let start = Instant::now();
        crate::measure::all_seen(&seen, sz.fanout, Duration::from_secs(60), start, "wt-fan").await;
        watch.abort();
    }
    settle(p).await;
    let mut version = 0;
    let ns_source = ("wt-ns", uids[0].as_str());
    let fan_source = ("wt-fan", uids[1].as_str());
    let on = half(lr, sz, "on", &ns_key, ns_source, fan_source, &mut version).await;
    webhooks_off(client, p).await;
    let off = half(lr, sz, "off", &ns_key, ns_source, fan_source, &mut version).await;
    p.register_webhooks(client).await;

    let (n, k, m) = (sz.namespaces, sz.updates, sz.fanout);
    let ratio = |off: f64, on: f64| format!("{:.2}", off / on.max(1e-9));
    let (on50, _, on99, _) = summary(on.ns_latency.clone());
    let (off50, _, off99, _) = summary(off.ns_latency.clone());
    let (uon50, _, uon99, _) = summary(on.update_latency.clone());
    let (uoff50, _, uoff99, _) = summary(off.update_latency.clone());
    for (label, off_d, on_d, target) in [
        (
            format!("watch-triggers: new namespace -> copy, p50 ({n})"),
            off50,
            on50,
            "",
        ),
        (
            format!("watch-triggers: new namespace -> copy, p99 ({n})"),
            off99,
            on99,
            "off: seconds, not a resync",
        ),
        (
            format!("watch-triggers: source update -> {m} copies, p50 ({k})"),
            uoff50,
            uon50,
            "",
        ),
        (
            format!("watch-triggers: source update -> {m} copies, p99 ({k})"),
            uoff99,
            uon99,
            "off: seconds, not a resync",
        ),
    ] {
        report.row(
            &label,
            format!("off: {}", ms(off_d)),
            format!("on: {}", ms(on_d)),
            ratio(off_d.as_secs_f64(), on_d.as_secs_f64()),
            target,
        );
    }
    for (label, off_v, on_v) in [
        (
            "watch-triggers: API calls per new namespace",
            off.ns_calls,
            on.ns_calls,
        ),
        (
            "watch-triggers: API calls per source update",
            off.update_calls,
            on.update_calls,
        ),
    ] {
        report.row(
            label,
            format!("off: {off_v:.2}"),
            format!("on: {on_v:.2}"),
            ratio(off_v, on_v),
            "on: no extra API calls",
        );
    }
    report.row(
        "watch-triggers: watch-triggered jobs, namespaces / updates",
        format!("off: {:.0} / {:.0}", off.ns_triggered, off.update_triggered),
        format!("on: {:.0} / {:.0}", on.ns_triggered, on.update_triggered),
        "".into(),
        "on: 0; off: one per change",
    );
    report.note(format!(
        "watch-triggers: one copyrator, webhooks registered (on: changes admitted), then its webhook configurations deleted and the API server seen to stop calling it (off: changes found by the watches alone); each half: {n} namespaces labelled for a source, created one at a time, each timed from its create response until a watch saw its copy; then {k} updates of a source copied to {m} namespaces, one at a time, each timed from its patch response until a watch saw all {m} copies with the new content. API calls and jobs counted from copyrator's /metrics until it was idle, the admitted namespace jobs' second look (1 s later) included. Phase took {:.0} s",
        phase_start.elapsed().as_secs_f64()
    ));
    for (what, h) in [("on", &on), ("off", &off)] {
        report.note(format!(
            "watch-triggers, webhooks {what}, {n} new namespaces: {}",
            h.ns_breakdown
        ));
        report.note(format!(
            "watch-triggers, webhooks {what}, {k} source updates: {}",
            h.update_breakdown
        ));
    }
}
