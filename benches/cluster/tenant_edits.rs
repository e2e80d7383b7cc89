//! Phase tenant-edits: an edit of an untrusted source costs what the namespaces that consent to
//! it hold, not the cluster (SPEC §9.7). A tenant namespace holds 1,000 sources, each with a
//! 64-requirement namespace selector every namespace matches; 10 namespaces accept copies from
//! it (`copyrator.io/accept-from`). At 5,000 and then 20,000 namespaces a fresh copyrator makes
//! the 10,000 copies, then every source is edited once (a data change and a label, which the
//! copies carry): the copyrator's CPU, API calls and wall time per edit, until every copy holds
//! the edit. The work per edit should not grow with the namespaces that do not consent.

use std::time::{Duration, Instant};

use copyrator::marks;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

use crate::{
    common::{Process, TestEnv, metric_value, secret, webhooks::unregister_webhooks},
    measure::{api_calls, count, cpu_time, create_namespace, wait_quiet, wait_resyncs},
    report::Report,
};

/// What the phase builds.
pub struct Sizes {
    /// Namespaces at each step.
    pub steps: Vec<usize>,
    /// The tenant's sources.
    pub sources: usize,
    /// Namespaces that accept copies from the tenant.
    pub consenting: usize,
}

/// Requirements in each source's namespace selector (the cap, SPEC §6.1).
const REQUIREMENTS: usize = 64;
const GROW_CONCURRENCY: usize = 64;
const EDIT_CONCURRENCY: usize = 16;
/// Edit rounds at each size.
const ROUNDS: usize = 2;

/// A selector of [`REQUIREMENTS`] requirements that every namespace matches.
fn heavy_selector() -> String {
    (0..REQUIREMENTS)
        .map(|i| format!("bench-k{i} notin (v{i},w{i})"))
        .collect::<Vec<_>>()
        .join(",")
}

struct Measured {
    cpu_per_edit: Duration,
    calls_per_edit: f64,
    wall: Duration,
}

pub async fn run(report: &mut Report, sz: &Sizes) {
    let env = TestEnv::new().await;
    let client = env.client.clone();
    let id = env.id.clone();
    let all = format!("bench-edits-{id}");
    let copies_label = format!("bench-edits-src-{id}");
    let tenant = env.namespace("edits-tenant", &[]).await;
    let trusted = env.namespace("edits-platform", &[]).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut names: Vec<String> = Vec::new();
    let selector = heavy_selector();
    let sources = env.secrets(&tenant);
    let mut rows = Vec::new();
    for &n in &sz.steps {
        let from = names.len();
        let grow = Instant::now();
        let new: Vec<String> = (from..n).map(|i| env.name(&format!("edits-{i}"))).collect();
        stream::iter(new.iter())
            .map(|name| {
                let (namespaces, all) = (&namespaces, all.as_str());
                async move { create_namespace(namespaces, name, &[(all, "yes")]).await }
            })
            .buffer_unordered(GROW_CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
        names.extend(new);
        report.note(format!(
            "tenant-edits: {} namespaces created in {:.1} s, {n} in all",
            n - from,
            grow.elapsed().as_secs_f64()
        ));
        if from == 0 {
            // The first namespaces consent; then the tenant's sources, before any copyrator.
            for name in &names[..sz.consenting] {
                namespaces
                    .patch(
                        name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"annotations": {
                            marks::ACCEPT_FROM_ANNOTATION: tenant}}})),
                    )
                    .await
                    .expect("consent");
            }
            stream::iter(0..sz.sources)
                .map(|i| {
                    let (sources, selector, label) = (&sources, &selector, &copies_label);
                    let s = secret(
                        &format!("edits-src-{i}"),
                        &[(marks::SOURCE_LABEL, "true"), (label.as_str(), "r0")],
                        &[(marks::NAMESPACE_SELECTOR_ANNOTATION, selector.as_str())],
                        &[("v", "0")],
                    );
                    async move { sources.create(&PostParams::default(), &s).await }
                })
                .buffer_unordered(EDIT_CONCURRENCY)
                .try_collect::<Vec<_>>()
                .await
                .expect("the tenant's sources");
        }
        let mut p = Process::spawn(&[
            "--leader-election=false",
            "--resync-interval",
            "1h",
            "--trusted-namespaces",
            &trusted,
            "--unlabelled-scan-interval",
            "0",
            // All the tenant's sources are acted on (the default cap is 100, SPEC §9.7).
            "--max-sources-per-namespace",
            &sz.sources.to_string(),
            "--log-level",
            "warn",
        ]);
        p.wait_up().await;
        wait_resyncs(&p, 1.0, Duration::from_secs(900)).await;
        wait_quiet(&p).await;
        let copies = Api::<Secret>::all(client.clone());
        let expected = sz.sources * sz.consenting;
        let made = count(
            &copies,
            &format!("{copies_label},{}", marks::MANAGED_SELECTOR),
        )
        .await;
        assert_eq!(made, expected, "tenant-edits: the copies at {n} namespaces");
        p.register_webhooks(&client).await;
        let pid = p.child.id();
        let mut measured = Vec::new();
        for round in 0..ROUNDS {
            let tag = format!("n{n}r{round}");
            let (cpu0, m0, started) = (cpu_time(pid), p.metrics().await, Instant::now());
            stream::iter(0..sz.sources)
                .map(|i| {
                    let (sources, label, tag) = (&sources, &copies_label, &tag);
                    async move {
                        sources
                            .patch(
                                &format!("edits-src-{i}"),
                                &PatchParams::default(),
                                &Patch::Merge(json!({
                                    "metadata": {"labels": {label: tag}},
                                    "stringData": {"v": tag}})),
                            )
                            .await
                    }
                })
                .buffer_unordered(EDIT_CONCURRENCY)
                .try_collect::<Vec<_>>()
                .await
                .expect("editing the tenant's sources");
            let deadline = Instant::now() + Duration::from_secs(600);
            let done = format!("{copies_label}={tag},{}", marks::MANAGED_SELECTOR);
            while count(&copies, &done).await < expected {
                assert!(Instant::now() < deadline, "tenant-edits: copies edited");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let wall = started.elapsed();
            wait_quiet(&p).await;
            let m1 = p.metrics().await;
            let cpu = cpu_time(pid).saturating_sub(cpu0);
            measured.push(Measured {
                cpu_per_edit: cpu / sz.sources as u32,
                calls_per_edit: (api_calls(&m1) - api_calls(&m0)) / sz.sources as f64,
                wall,
            });
            println!(
                "  tenant-edits {n} ns round {round}: {:.2} ms CPU, {:.1} API calls per edit, {:.1} s",
                (cpu.as_secs_f64() * 1000.0) / sz.sources as f64,
                (api_calls(&m1) - api_calls(&m0)) / sz.sources as f64,
                wall.as_secs_f64()
            );
        }
        let refused = metric_value(&p.metrics().await, "copyrator_refused_targets_total");
        p.terminate();
        unregister_webhooks(&client).await;
        rows.push((n, measured, refused));
    }
    let best = |m: &[Measured]| m.iter().map(|m| m.cpu_per_edit).min().unwrap_or_default();
    let describe = |m: &[Measured]| {
        m.iter()
            .map(|m| {
                format!(
                    "{:.2} ms CPU, {:.1} calls, {:.1} s",
                    m.cpu_per_edit.as_secs_f64() * 1000.0,
                    m.calls_per_edit,
                    m.wall.as_secs_f64()
                )
            })
            .collect::<Vec<_>>()
            .join(" / ")
    };
    if let [(small, at_small, _), .., (large, at_large, refused)] = rows.as_slice() {
        let (a, b) = (best(at_small), best(at_large));
        report.row(
            &format!(
                "tenant-edits: copyrator CPU per edit of a {REQUIREMENTS}-requirement tenant source ({} consent), {large} vs {small} ns",
                sz.consenting
            ),
            format!("{:.2} ms [{}]", b.as_secs_f64() * 1000.0, describe(at_large)),
            format!("{:.2} ms [{}]", a.as_secs_f64() * 1000.0, describe(at_small)),
            format!("{:.2}", b.as_secs_f64() / a.as_secs_f64()),
            "flat (≈ 1) in the namespaces that do not consent",
        );
        report.note(format!(
            "tenant-edits: {} tenant sources, each selecting every namespace with {REQUIREMENTS} requirements, {} namespaces consenting; per size a fresh copyrator made the copies, then {ROUNDS} rounds edited every source once ({EDIT_CONCURRENCY} in flight, its webhooks registered) until every copy carried the edit; CPU is the process's over the round (the edits' jobs, the refused-target reports of each source), calls are its API requests; the figure is the best round at each size. {refused} targets refused at the last size (the selector's non-consenting namespaces are never judged, so none are counted)",
            sz.sources, sz.consenting
        ));
    }
    std::mem::forget(env);
}
