//! Bootstrap latency: from a new namespace's create response until watches saw all five
//! bootstrap objects in it, copied by copyrator, beside a plain client creating the same five
//! right after each namespace; and what copyrator asked the API server for per namespace.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::future::try_join_all;
use kube::api::{DynamicObject, PostParams};

use super::Boot;
use crate::{
    common::metric_value,
    measure::{
        LIFECYCLE_WAIT_BUCKET, api_calls, call_breakdown_per, counter_breakdown, create_namespace,
        namespace_lifecycle_waits, wait_quiet, watch_objects,
    },
    report::{Report, ms, summary},
};

/// When each watched object was first seen, by `namespace/name`: one map per bootstrap object.
type Seen = Vec<Arc<Mutex<HashMap<String, Instant>>>>;

const NAMESPACE_JOBS: &str = "copyrator_jobs_total{kind=\"namespace\",outcome=\"ok\"}";
/// How long all five may take to appear in every namespace of a half.
const ALL_SEEN: Duration = Duration::from_secs(60);

/// A warm-up namespace (not timed: it shows the rules work), then `count` namespaces created
/// one by one, 20 ms apart, labelled for the rules; then as many unlabelled, each followed by
/// the plain client's five creates. Returns every namespace it made.
pub async fn run(report: &mut Report, b: &Boot, count: usize) -> Vec<String> {
    let client = &b.env.client;
    let mut watches = Vec::new();
    let mut seen: Seen = Vec::new();
    for o in &b.objects {
        let api = kube::Api::<DynamicObject>::all_with(client.clone(), &o.ar);
        let (s, w) = watch_objects(api, format!("{}={}", b.label, b.env.id), |_| true).await;
        seen.push(s);
        watches.push(w);
    }
    let on = [(b.key.as_str(), "on")];
    let warm = b.env.name("boot-warm");
    let t = create_namespace(&b.namespaces, &warm, &on).await;
    b.env.track_namespace(&warm);
    wait_all(
        b,
        &seen,
        &[(warm.clone(), t)],
        "the warm-up namespace's five copies",
    )
    .await;
    wait_quiet(&b.p).await;

    // copyrator.
    let metrics_before = b.p.metrics().await;
    let waits_before = namespace_lifecycle_waits(client).await;
    let mut created = Vec::new();
    for i in 0..count {
        let name = b.env.name(&format!("boot-{i}"));
        let t = create_namespace(&b.namespaces, &name, &on).await;
        b.env.track_namespace(&name);
        created.push((name, t));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let copy_lat = wait_all(
        b,
        &seen,
        &created,
        "copyrator's five copies in every namespace",
    )
    .await;
    // Every namespace job and its second look (SPEC §5) done, and nothing more asked for:
    // what one new namespace costs, all of it.
    let jobs = settle(b, metric_value(&metrics_before, NAMESPACE_JOBS), count).await;
    let metrics_after = b.p.metrics().await;
    let waits_copyrator = namespace_lifecycle_waits(client).await - waits_before;
    let calls = (api_calls(&metrics_after) - api_calls(&metrics_before)) / count as f64;
    let by_call = call_breakdown_per(&metrics_before, &metrics_after, count);
    // Where the calls beyond one write per object go, for whoever makes them fewer.
    let why = [
        "copyrator_copy_writes_total",
        "copyrator_api_errors_total",
        "copyrator_job_failures_total",
        "copyrator_namespace_early_reads_total",
        "copyrator_index_reads_total",
    ]
    .map(|name| {
        let d = counter_breakdown(name, &metrics_before, &metrics_after);
        format!(
            "{}: {}",
            name.trim_start_matches("copyrator_"),
            if d.is_empty() { "0".into() } else { d }
        )
    })
    .join("; ");

    // The plain client: the five creates at once right after the namespace.
    let waits_before = namespace_lifecycle_waits(client).await;
    let mut raw_created = Vec::new();
    let create = PostParams::default();
    for i in 0..count {
        let name = b.env.name(&format!("boot-raw-{i}"));
        let t = create_namespace(&b.namespaces, &name, &[]).await;
        b.env.track_namespace(&name);
        try_join_all(
            b.objects
                .iter()
                .map(|o| async { b.api(o, &name).create(&create, &b.plain(o)).await }),
        )
        .await
        .expect("the plain client's five creates");
        raw_created.push((name, t));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let raw_lat = wait_all(b, &seen, &raw_created, "the plain client's five objects").await;
    let waits_raw = namespace_lifecycle_waits(client).await - waits_before;
    for w in watches {
        w.abort();
    }

    let slow = |v: &[Duration]| v.iter().filter(|d| **d > LIFECYCLE_WAIT_BUCKET).count();
    let (copy_slow, raw_slow) = (slow(&copy_lat), slow(&raw_lat));
    let (c50, c90, c99, cmax) = summary(copy_lat);
    let (r50, r90, r99, rmax) = summary(raw_lat);
    for (label, c, r, target) in [
        ("p50", c50, r50, "≤ 1.5 × plain client (issue 34)"),
        ("p90", c90, r90, ""),
        ("p99", c99, r99, ""),
        ("max", cmax, rmax, ""),
    ] {
        report.row(
            &format!("bootstrap: new namespace -> all five objects, {label}"),
            ms(c),
            ms(r),
            format!("{:.2}", c.as_secs_f64() / r.as_secs_f64().max(1e-9)),
            target,
        );
    }
    report.row(
        "bootstrap: samples over 25 ms / creates NamespaceLifecycle held over 25 ms",
        format!("{copy_slow} / {waits_copyrator:.0}"),
        format!("{raw_slow} / {waits_raw:.0}"),
        "".into(),
        "",
    );
    let copied = b.objects.len();
    report.row(
        "bootstrap: copyrator's API calls per new namespace",
        format!("{calls:.2}"),
        format!("{copied} (the plain client's creates)"),
        format!("{:.2}", calls / copied as f64),
        &format!("≤ objects copied + 1 = {} (issue 34)", copied + 1),
    );
    report.note(format!(
        "bootstrap latency: {count} namespaces created one by one, 20 ms apart, labelled for 4 CopyRules (RoleBinding to ClusterRole view, default-deny NetworkPolicy, LimitRange, ResourceQuota) and an inline pull Secret; from the namespace create response until a watch per kind saw all five in it (ADDED); baseline: {count} namespaces, each followed by the same client creating the five itself, all five at once"
    ));
    report.note(format!(
        "bootstrap: copyrator's API calls per new namespace (verb, resource: calls per namespace; {jobs:.0} namespace jobs ran for {count} namespaces, second looks included, counted until it was quiet): {by_call}"
    ));
    report.note(format!(
        "bootstrap: for those {count} namespaces, in all: {why}"
    ));
    created
        .into_iter()
        .chain(raw_created)
        .map(|(n, _)| n)
        .collect()
}

/// Waits until every one of `created` holds all five objects by the watches; for each, how
/// long after its create the last of them was seen.
async fn wait_all(
    b: &Boot,
    seen: &Seen,
    created: &[(String, Instant)],
    what: &str,
) -> Vec<Duration> {
    let keys: Vec<String> = b.objects.iter().map(|o| o.name.to_string()).collect();
    let start = Instant::now();
    loop {
        let maps: Vec<_> = seen.iter().map(|s| s.lock().unwrap()).collect();
        let mut missing = 0;
        let mut out = Vec::new();
        for (ns, t) in created {
            let last = maps
                .iter()
                .zip(&keys)
                .map(|(m, name)| m.get(&format!("{ns}/{name}")).copied())
                .collect::<Option<Vec<Instant>>>();
            match last.and_then(|v| v.into_iter().max()) {
                Some(last) => out.push(last.saturating_duration_since(*t)),
                None => missing += 1,
            }
        }
        drop(maps);
        if missing == 0 {
            return out;
        }
        assert!(
            start.elapsed() < ALL_SEEN,
            "{what}: {missing} of {} namespaces still miss an object after {ALL_SEEN:?}",
            created.len()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits (30 s at most) for two namespace jobs per namespace after `before` (the admitted
/// job and its second look), then until copyrator is quiet; the jobs that ran.
async fn settle(b: &Boot, before: f64, count: usize) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    let want = before + 2.0 * count as f64;
    let mut jobs = b.p.metric(NAMESPACE_JOBS).await;
    while jobs < want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        jobs = b.p.metric(NAMESPACE_JOBS).await;
    }
    wait_quiet(&b.p).await;
    b.p.metric(NAMESPACE_JOBS).await - before
}
