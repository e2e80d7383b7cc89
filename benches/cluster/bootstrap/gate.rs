//! The Pod gate with bootstrap objects (SPEC §10.1): namespaces created labelled, each followed
//! at once (same client, no wait) by its ServiceAccount and a Pod, as a CI pipeline does; for
//! each Pod, how long its create took and whether all five objects existed and the pull Secret
//! was injected when it was admitted — with the gate registered, then with its configuration
//! deleted (the objects then come from the namespaces webhook's job alone).

use std::time::{Duration, Instant};

use super::{Boot, PULL_SECRET};
use crate::{
    common::{
        create_pod, pod, pull_secret_names, register_pod_gate, service_account, unregister_pod_gate,
    },
    measure::{create_namespace, namespace_lifecycle_waits},
    pod_gate::{gate_outcomes, wait_gate_silent},
    report::{Report, ms, summary},
};

struct Race {
    times: Vec<Duration>,
    /// Pods admitted with all five objects in their namespace, with the pull Secret injected.
    complete: usize,
    injected: usize,
    outcomes: String,
    /// Creates held by the API server's 50 ms wait for its namespace informer.
    lifecycle_waits: f64,
    names: Vec<String>,
}

/// `count` namespaces with a Pod each, gate registered, then as many with it unregistered;
/// returns the namespaces. The gate is registered again at the end.
pub async fn run(report: &mut Report, b: &Boot, count: usize) -> Vec<String> {
    let gated = race(b, "gated", count).await;
    unregister_pod_gate(&b.env.client).await;
    wait_gate_silent(&b.env, &b.p).await;
    let plain = race(b, "ungated", count).await;
    register_pod_gate(
        &b.env.client,
        &format!("https://127.0.0.1:{}", b.p.webhook_port),
        &b.p.ca,
    )
    .await;

    let (g50, _, g99, _) = summary(gated.times.clone());
    let (p50, _, p99, _) = summary(plain.times.clone());
    report.row(
        &format!("bootstrap: Pod created right after its new namespace ({count}): Pod create time"),
        format!("p50 {} p99 {}", ms(g50), ms(g99)),
        format!("gate unregistered: p50 {} p99 {}", ms(p50), ms(p99)),
        format!(
            "+{:.1} ms",
            (g50.as_secs_f64() - p50.as_secs_f64()) * 1000.0
        ),
        "gate adds ≤ 2 ms at p50 (issue 34)",
    );
    report.row(
        "… Pods admitted with all five objects present / with the pull Secret injected",
        format!("{}/{count} / {}/{count}", gated.complete, gated.injected),
        format!(
            "gate unregistered: {}/{count} / {}/{count}",
            plain.complete, plain.injected
        ),
        "".into(),
        "every Pod",
    );
    report.row(
        "… creates NamespaceLifecycle held over 25 ms (ServiceAccounts, Pods, copies)",
        format!("{:.0}", gated.lifecycle_waits),
        format!("gate unregistered: {:.0}", plain.lifecycle_waits),
        "".into(),
        "",
    );
    report.note(format!(
        "bootstrap pod gate: {count} namespaces created one by one, labelled for the five, each followed at once by its ServiceAccount and a Pod (same client); the five are read right after the Pod create returns; Pod create time is the create call alone; the ratio column is the gated p50 minus the ungated one. Gate outcomes, gated round: {}; ungated round: {}",
        gated.outcomes, plain.outcomes
    ));
    gated.names.into_iter().chain(plain.names).collect()
}

async fn race(b: &Boot, tag: &str, count: usize) -> Race {
    let client = &b.env.client;
    let before = b.p.metrics().await;
    let waits_before = namespace_lifecycle_waits(client).await;
    let mut out = Race {
        times: Vec::new(),
        complete: 0,
        injected: 0,
        outcomes: String::new(),
        lifecycle_waits: 0.0,
        names: Vec::new(),
    };
    for i in 0..count {
        let name = b.env.name(&format!("boot-{tag}-{i}"));
        create_namespace(&b.namespaces, &name, &[(b.key.as_str(), "on")]).await;
        b.env.track_namespace(&name);
        service_account(client, &name).await;
        let t = Instant::now();
        let admitted = create_pod(client, &name, &pod("app", &[], None)).await;
        out.times.push(t.elapsed());
        let mut present = 0;
        for o in &b.objects {
            let got = b.api(o, &name).get_opt(o.name).await;
            if got.expect("reading a bootstrap object").is_some() {
                present += 1;
            }
        }
        if present == b.objects.len() {
            out.complete += 1;
        }
        if pull_secret_names(&admitted) == [PULL_SECRET] {
            out.injected += 1;
        }
        out.names.push(name);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = b.p.metrics().await;
    out.lifecycle_waits = namespace_lifecycle_waits(client).await - waits_before;
    out.outcomes = gate_outcomes(&before, &after);
    out
}
