//! Bootstrap memory (SPEC §3.1, §5): objects of an enabled kind that are neither sources nor
//! copies cost nothing. A fresh copyrator with the bootstrap kinds enabled, at the cluster the
//! earlier parts left (their sources, rules and copies), then with many unrelated RoleBindings
//! and NetworkPolicies added: its settled and peak RSS both ways.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::{networking::v1::NetworkPolicy, rbac::v1::RoleBinding};
use kube::{Api, api::PostParams};
use serde_json::json;

use super::COPY_KINDS;
use crate::{
    common::{Process, TestEnv, metric_value},
    measure::{api_calls, count, memory, wait_quiet, wait_resyncs},
    report::Report,
};

/// Fresh processes measured each way, one after the other.
const RUNS: usize = 2;
/// Unrelated objects created at once (the memory phase's 64).
const LOAD_CONCURRENCY: usize = 64;
/// The label on the unrelated objects.
const UNRELATED: &str = "app=bench-unrelated";

/// One fresh process, once quiet after its startup resync.
struct Fresh {
    /// VmRSS then, and VmHWM (the peak through startup and settling).
    settled: f64,
    peak: f64,
    /// Bytes it read and API calls it made until then.
    bytes: f64,
    calls: f64,
}

/// [`RUNS`] fresh processes; `unrelated` RoleBindings and as many NetworkPolicies spread over
/// `namespaces`; [`RUNS`] fresh processes again.
pub async fn run(report: &mut Report, env: &TestEnv, namespaces: &[String], unrelated: usize) {
    let mut without = Vec::new();
    for _ in 0..RUNS {
        without.push(fresh().await);
    }
    let loaded = Instant::now();
    load(env, namespaces, unrelated).await;
    let load_time = loaded.elapsed();
    let rbs = count(&Api::<RoleBinding>::all(env.client.clone()), UNRELATED).await;
    let nps = count(&Api::<NetworkPolicy>::all(env.client.clone()), UNRELATED).await;
    assert_eq!((rbs, nps), (unrelated, unrelated), "the unrelated objects");
    let mut with = Vec::new();
    for _ in 0..RUNS {
        with.push(fresh().await);
    }

    let mean = |v: &[Fresh], f: fn(&Fresh) -> f64| v.iter().map(f).sum::<f64>() / v.len() as f64;
    let each = |v: &[Fresh], f: fn(&Fresh) -> f64| {
        let all: Vec<String> = v.iter().map(|r| format!("{:.1}", f(r))).collect();
        format!("{:.1} MiB [{}]", mean(v, f), all.join("/"))
    };
    for (what, f, target) in [
        (
            "settled RSS",
            (|r: &Fresh| r.settled) as fn(&Fresh) -> f64,
            "flat: ≤ 1.05 × without (issue 34)",
        ),
        ("peak RSS", |r: &Fresh| r.peak, "flat: ≤ 1.05 × without"),
    ] {
        report.row(
            &format!(
                "bootstrap: fresh process, {what}, with {unrelated} unrelated RoleBindings + {unrelated} NetworkPolicies vs none"
            ),
            each(&with, f),
            each(&without, f),
            format!("{:.2}", mean(&with, f) / mean(&without, f)),
            target,
        );
    }
    report.note(format!(
        "bootstrap memory: {RUNS} fresh copyrators ({COPY_KINDS}, resyncs an hour apart, no webhooks registered) at the cluster the latency and gate parts left (their namespaces, the copies of the five in them, the sources and rules), then {RUNS} more after {unrelated} RoleBindings and {unrelated} NetworkPolicies labelled {UNRELATED} (neither sources nor copies) were created over {} namespaces in {:.0} s ({LOAD_CONCURRENCY} in flight, copyrator stopped); each measured once its startup resync was done, its queue empty and no API call made for 1 s: VmRSS (settled), VmHWM (peak); mean [each run]. Until then, read {:.2} / {:.2} MB in {:.0} / {:.0} API calls, without / with",
        namespaces.len(),
        load_time.as_secs_f64(),
        mean(&without, |r| r.bytes) / 1e6,
        mean(&with, |r| r.bytes) / 1e6,
        mean(&without, |r| r.calls),
        mean(&with, |r| r.calls),
    ));
}

/// A fresh copyrator with the phase's kinds, measured once quiet after its startup resync.
async fn fresh() -> Fresh {
    let mut p = Process::spawn(&[
        "--leader-election=false",
        "--resync-interval",
        "1h",
        "--log-level",
        "warn",
        COPY_KINDS,
    ]);
    p.wait_up().await;
    wait_resyncs(&p, 1.0, Duration::from_secs(600)).await;
    wait_quiet(&p).await;
    let (settled, peak) = memory(p.child.id());
    let m = p.metrics().await;
    p.terminate();
    Fresh {
        settled,
        peak,
        bytes: metric_value(&m, "copyrator_api_response_bytes_total"),
        calls: api_calls(&m),
    }
}

/// `n` RoleBindings and `n` NetworkPolicies, neither sources nor copies, spread over
/// `namespaces`, [`LOAD_CONCURRENCY`] creates in flight.
async fn load(env: &TestEnv, namespaces: &[String], n: usize) {
    let client = &env.client;
    stream::iter(0..2 * n)
        .map(|i| {
            let ns = &namespaces[(i / 2) % namespaces.len()];
            let name = format!("unrelated-{}", i / 2);
            let labels = json!({"app": "bench-unrelated"});
            async move {
                if i % 2 == 0 {
                    let rb: RoleBinding = serde_json::from_value(json!({
                        "metadata": {"name": name, "labels": labels},
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}]
                    }))
                    .expect("a RoleBinding");
                    Api::<RoleBinding>::namespaced(client.clone(), ns)
                        .create(&PostParams::default(), &rb)
                        .await
                        .map(|_| ())
                } else {
                    let np: NetworkPolicy = serde_json::from_value(json!({
                        "metadata": {"name": name, "labels": labels},
                        "spec": {"podSelector": {"matchLabels": {"app": name}}, "policyTypes": ["Ingress"]}
                    }))
                    .expect("a NetworkPolicy");
                    Api::<NetworkPolicy>::namespaced(client.clone(), ns)
                        .create(&PostParams::default(), &np)
                        .await
                        .map(|_| ())
                }
            }
        })
        .buffer_unordered(LOAD_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .expect("creating the unrelated objects");
}
