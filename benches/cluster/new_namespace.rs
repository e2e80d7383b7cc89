//! Phase new-namespace: from a namespace's create response to its copy's ADDED watch event,
//! beside a plain client creating the same Secret right after the namespace.

use std::time::Duration;

use copyrator::marks;
use kube::{Api, ResourceExt, api::PostParams};

use crate::{
    LongRun,
    common::secret,
    measure::{
        LIFECYCLE_WAIT_BUCKET, call_breakdown, counter_breakdown, create_namespace,
        namespace_lifecycle_waits, wait_count, watch_secrets,
    },
    payload,
    report::{Report, ms, summary},
};

/// `count` namespaces created one by one, 20 ms apart, each selected by a source in `lr.src`;
/// then as many with the plain client.
pub async fn run(report: &mut Report, lr: &LongRun, count: usize) {
    let LongRun {
        env,
        client,
        namespaces,
        src,
        p,
        ..
    } = lr;
    let lat_key = format!("bench-lat-{}", env.id);
    env.secrets(src)
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
    let uid = env.secrets(src).get("pull").await.unwrap().uid().unwrap();
    let (seen, watch) = watch_secrets(
        Api::all(client.clone()),
        format!("{}={uid}", marks::SOURCE_UID_LABEL),
        |_| true,
    )
    .await;
    let metrics_before = p.metrics().await;
    let waits_before = namespace_lifecycle_waits(client).await;
    let mut created = Vec::new();
    for i in 0..count {
        let name = env.name(&format!("lat-{i}"));
        let t = create_namespace(namespaces, &name, &[(&lat_key, "yes")]).await;
        env.track_namespace(&name);
        created.push((name, t));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        wait_count(&seen, created.len(), Duration::from_secs(30)).await,
        "copies for every namespace"
    );
    watch.abort();
    // What copyrator asked the API server for those namespaces: the round trips between a
    // namespace and its copy (a plain client makes one, the create).
    let metrics_after = p.metrics().await;
    let waits_copyrator = namespace_lifecycle_waits(client).await - waits_before;
    let calls = call_breakdown(&metrics_before, &metrics_after);
    let early = counter_breakdown(
        "copyrator_namespace_early_reads_total",
        &metrics_before,
        &metrics_after,
    );
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
    let waits_before = namespace_lifecycle_waits(client).await;
    let mut raw_created = Vec::new();
    for i in 0..count {
        let name = env.name(&format!("raw-{i}"));
        let t = create_namespace(namespaces, &name, &[]).await;
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
    let waits_raw = namespace_lifecycle_waits(client).await - waits_before;
    let raw_lat: Vec<Duration> = {
        let seen = seen.lock().unwrap();
        raw_created
            .iter()
            .map(|(n, t)| seen[&format!("{n}/pull")].saturating_duration_since(*t))
            .collect()
    };
    // Samples over the bucket, beside the creates the plugin held over it: where the two
    // counts agree, the tail is that plugin's 50 ms wait.
    // Which namespaces were slow, to look up in copyrator's log (COPYRATOR_BENCH_KEEP_LOG).
    let slow_names: Vec<String> = created
        .iter()
        .zip(&copy_lat)
        .filter(|(_, d)| **d > LIFECYCLE_WAIT_BUCKET)
        .map(|((n, _), d)| format!("{n} {}", ms(*d)))
        .collect();
    let slow = |v: &[Duration]| v.iter().filter(|d| **d > LIFECYCLE_WAIT_BUCKET).count();
    let (copy_slow, raw_slow) = (slow(&copy_lat), slow(&raw_lat));
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
    report.row(
        "new namespace -> copy: samples over 25 ms / creates the API server's NamespaceLifecycle admission held over 25 ms",
        format!("{copy_slow} / {waits_copyrator:.0}"),
        format!("{raw_slow} / {waits_raw:.0}"),
        "".into(),
        "",
    );
    report.note(
        "the API server's NamespaceLifecycle admission plugin sleeps a fixed 50 ms (missingNamespaceWait) before it admits a create in a namespace its own informer has not seen yet; its duration histogram (apiserver_admission_controller_admission_duration_seconds, CREATE, above the 25 ms bucket) counts those creates, by any client, while each half of the phase ran".to_string(),
    );
    report.note(format!(
        "latency: {count} namespaces created one by one, 20 ms apart; from the namespace create response to the copy's ADDED watch event; baseline: the same client creating the Secret itself after the namespace"
    ));
    report.note(format!(
        "copyrator's API calls for those {count} namespaces (verb, resource: count): {calls}"
    ));
    if !slow_names.is_empty() {
        report.note(format!(
            "copyrator's samples over 25 ms: {}",
            slow_names.join(", ")
        ));
    }
    report.note(format!(
        "namespace jobs' reads made while the namespace was being persisted (SPEC §4.6), by outcome: {early}"
    ));
}
