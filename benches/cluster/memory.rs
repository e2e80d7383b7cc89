//! Phase memory: copyrator's RSS with many namespaces and unrelated Secrets, from the
//! long-running process after the earlier phases to fresh processes as the cluster grows.

use std::time::{Duration, Instant};

use copyrator::marks;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

use crate::{
    LongRun, Sizes,
    common::{Process, secret},
    measure::{create_namespace, memory, wait_resyncs},
    report::Report,
    resync::Fresh,
};

/// What the load left for the rows, measured before the fresh process at the full load.
pub struct Loaded {
    rss_before_load: f64,
    hwm_long: f64,
    ns_only_rss: f64,
    ns_only_peak: f64,
    pub total_ns: usize,
    secrets: usize,
}

/// The long-running process's RSS; then, with copyrator stopped, the cluster grown to
/// `sz.memory_namespaces` namespaces (the jobs of a 4,000-namespace storm are not what is
/// measured here) holding 1.6 times as many copies (the earlier phases' and, to make up the
/// rest, copies of 17 sources in the new namespaces, made by a helper process that is not
/// measured)
/// and a fresh process's RSS at it, then `sz.memory_secrets` unrelated Secrets added for the
/// fresh process at the full load ([`crate::resync::fresh_process`]).
pub async fn load(report: &mut Report, lr: &mut LongRun, sz: &Sizes) -> Loaded {
    let (rss_before_load, hwm_long) = memory(lr.p.child.id());
    lr.stop().await;
    let LongRun {
        env,
        client,
        namespaces,
        src,
        ..
    } = &*lr;
    let existing_names: Vec<String> = namespaces
        .list_metadata(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        // Being deleted (a phase's leftover): no copy can land there.
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .filter_map(|n| n.metadata.name)
        .collect();
    let existing = existing_names.len();
    let extra_ns = sz.memory_namespaces.saturating_sub(existing);
    let total_ns = existing + extra_ns;
    let load_started = Instant::now();
    let mem_names: Vec<String> = (0..extra_ns)
        .map(|i| env.name(&format!("mem-{i}")))
        .collect();
    // The same load whatever the earlier phases left: 1.6 copies per namespace (what the
    // phase held on 2026-11-25 afternoon, 7,800-8,000 copies of 17-18 sources, most of them
    // left behind by the fan-out's rounds, which now clean up). Every namespace but the
    // sources' gets a copy of the memory source; the first `grouped` new ones also one of
    // [`GROUPS`] group sources.
    let existing_copies = count(client, marks::MANAGED_SELECTOR).await;
    // Not the sources' own namespace, nor those copyrator excludes by default.
    let relabelled: Vec<&String> = existing_names
        .iter()
        .filter(|n| *n != src && !["kube-system", "kube-node-lease"].contains(&n.as_str()))
        .collect();
    stream::iter(&relabelled)
        .map(|name| {
            let namespaces = namespaces.clone();
            let patch = json!({"metadata": {"labels": {COPY_LABEL: "yes"}}});
            async move {
                namespaces
                    .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
            }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    let grouped = (sz.memory_namespaces * 8 / 5)
        .saturating_sub(existing_copies + relabelled.len() + extra_ns)
        .min(extra_ns);
    let groups: Vec<String> = (0..GROUPS).map(|g| format!("g{g}")).collect();
    stream::iter(mem_names.iter().enumerate())
        .map(|(i, name)| {
            let namespaces = namespaces.clone();
            let mut labels = vec![("bench", "memory"), (COPY_LABEL, "yes")];
            if i < grouped {
                labels.push((GROUP_LABEL, groups[i % GROUPS].as_str()));
            }
            async move { create_namespace(&namespaces, name, &labels).await }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
    for name in &mem_names {
        env.track_namespace(name);
    }
    let with_copy = relabelled.len() + extra_ns + grouped;
    make_copies(client, src, with_copy, grouped.min(GROUPS)).await;
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
    let managed = count(client, marks::MANAGED_SELECTOR).await;
    let sources = count(client, marks::SOURCE_SELECTOR).await;
    report.note(format!(
        "memory: loaded {extra_ns} namespaces (total {total_ns}) and {} unrelated Secrets in {:.0} s, copyrator stopped meanwhile (but for a helper that made {with_copy} of the copies); the cluster holds {sources} sources and {managed} copies; RSS read from /proc/<pid>/status (VmRSS, peak VmHWM)",
        sz.memory_secrets,
        load_started.elapsed().as_secs_f64()
    ));
    Loaded {
        rss_before_load,
        hwm_long,
        ns_only_rss,
        ns_only_peak,
        total_ns,
        secrets: sz.memory_secrets,
    }
}

/// The RSS rows: the long-running process beside `rss_empty` (its RSS on the empty cluster),
/// fresh processes at the namespaces only and (`fresh`) at the full load.
pub fn rows(report: &mut Report, l: &Loaded, rss_empty: f64, fresh: &Fresh) {
    let Loaded {
        rss_before_load,
        hwm_long,
        ns_only_rss,
        ns_only_peak,
        total_ns,
        secrets,
    } = *l;
    let (fresh_rss, fresh_peak) = (fresh.rss, fresh.peak);
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
        &format!("RSS, fresh process, {total_ns} ns + {secrets} Secrets"),
        format!("{fresh_rss:.1} MiB (peak {fresh_peak:.1})"),
        format!("{ns_only_rss:.1} MiB (same, no Secrets)"),
        format!("{:.2}", fresh_rss / ns_only_rss),
        "≤ 32 MiB, flat in Secrets",
    );
}

/// Namespace label of the new namespaces that get a copy of the memory source.
const COPY_LABEL: &str = "bench-memory-copy";
/// Namespace label of the new namespaces that get a copy of a group source, and how many
/// group sources there are.
const GROUP_LABEL: &str = "bench-memory-group";
const GROUPS: usize = 16;

/// Secrets (sources and copies) matching `selector`, cluster-wide.
async fn count(client: &kube::Client, selector: &str) -> usize {
    Api::<Secret>::all(client.clone())
        .list_metadata(&kube::api::ListParams::default().labels(selector))
        .await
        .unwrap()
        .items
        .len()
}

/// A source in `src` copied to the namespaces labelled [`COPY_LABEL`] and `groups` sources
/// copied to the namespaces of their [`GROUP_LABEL`], and their `n` copies, made by a
/// copyrator process of their own (its startup resync), stopped once they exist.
async fn make_copies(client: &kube::Client, src: &str, n: usize, groups: usize) {
    if n == 0 {
        return;
    }
    let before = count(client, marks::MANAGED_SELECTOR).await;
    let sources = std::iter::once(("memory-source".to_string(), format!("{COPY_LABEL}=yes")))
        .chain((0..groups).map(|g| (format!("memory-group-{g}"), format!("{GROUP_LABEL}=g{g}"))));
    for (name, selector) in sources {
        let source = secret(
            &name,
            &[(marks::SOURCE_LABEL, "true")],
            &[(marks::NAMESPACE_SELECTOR_ANNOTATION, selector.as_str())],
            &[("k", "v")],
        );
        Api::<Secret>::namespaced(client.clone(), src)
            .create(&PostParams::default(), &source)
            .await
            .unwrap();
    }
    let mut p = Process::spawn(&[
        "--leader-election=false",
        "--resync-interval",
        "1h",
        "--log-level",
        "warn",
    ]);
    p.wait_up().await;
    let deadline = Instant::now() + Duration::from_secs(600);
    while count(client, marks::MANAGED_SELECTOR).await < before + n {
        assert!(Instant::now() < deadline, "the memory source's {n} copies");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    p.terminate();
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
