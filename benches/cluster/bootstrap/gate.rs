//! The Pod gate with bootstrap objects (SPEC §10.1): namespaces created labelled, each followed
//! at once (same client, no wait) by its ServiceAccount and a Pod, as a CI pipeline does; for
//! each Pod, how long its create took and whether all five objects existed and the pull Secret
//! was injected when it was admitted — with the gate registered, then with its configuration
//! deleted (the objects then come from the namespaces webhook's job alone). Then, to tell
//! where the gate's added time goes, a second Pod in each namespace once it is settled, and
//! copyrator's own time answering the first Pods and the second.

use std::time::{Duration, Instant};

use super::{Boot, PULL_SECRET};
use crate::{
    common::{
        create_pod, metric_value, pod, pull_secret_names, register_pod_gate, service_account,
        unregister_pod_gate,
    },
    measure::{create_namespace, namespace_lifecycle_waits},
    pod_gate::{gate_outcomes, wait_gate_silent},
    report::{Report, ms, summary},
};

struct Race {
    times: Vec<Duration>,
    /// A second Pod in each namespace once it is settled (the gate answers from memory).
    settled_times: Vec<Duration>,
    /// Mean time copyrator spent answering the first Pods' and the second Pods' reviews
    /// (`copyrator_admission_duration_seconds{endpoint="pods"}`).
    answer_first: Duration,
    answer_settled: Duration,
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
    // Where the added time goes: what any gated Pod pays (a second Pod in a settled
    // namespace, answered from memory: the API server's call to the webhook), and the time
    // copyrator spent on the first Pods' reviews (waiting for the namespace job to record it).
    let (s50, _, _, _) = summary(gated.settled_times.clone());
    let (u50, _, _, _) = summary(plain.settled_times.clone());
    report.row(
        "… a second Pod once its namespace is settled: create time (the webhook call alone)",
        format!("p50 {}", ms(s50)),
        format!("gate unregistered: p50 {}", ms(u50)),
        format!(
            "+{:.1} ms",
            (s50.as_secs_f64() - u50.as_secs_f64()) * 1000.0
        ),
        "",
    );
    report.row(
        "… copyrator's mean time answering a first Pod's review / a second Pod's",
        format!("{} / {}", ms(gated.answer_first), ms(gated.answer_settled)),
        "".into(),
        "".into(),
        "",
    );
    report.row(
        "… creates NamespaceLifecycle held over 25 ms (ServiceAccounts, Pods, copies)",
        format!("{:.0}", gated.lifecycle_waits),
        format!("gate unregistered: {:.0}", plain.lifecycle_waits),
        "".into(),
        "",
    );
    report.note(format!(
        "bootstrap pod gate: {count} namespaces created one by one, labelled for the five, each followed at once by its ServiceAccount and a Pod (same client); the five are read right after the Pod create returns; Pod create time is the create call alone; the ratio column is the gated p50 minus the ungated one. Then a second Pod in each of those namespaces, settled by then. Gate outcomes, gated round: {}; ungated round: {}",
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
        settled_times: Vec::new(),
        answer_first: Duration::ZERO,
        answer_settled: Duration::ZERO,
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
    let first = b.p.metrics().await;
    for name in &out.names {
        let t = Instant::now();
        create_pod(client, name, &pod("later", &[], None)).await;
        out.settled_times.push(t.elapsed());
    }
    let after = b.p.metrics().await;
    out.answer_first = mean_answer(&before, &first);
    out.answer_settled = mean_answer(&first, &after);
    out.lifecycle_waits = namespace_lifecycle_waits(client).await - waits_before;
    out.outcomes = gate_outcomes(&before, &after);
    out
}

/// Mean of `copyrator_admission_duration_seconds{endpoint="pods"}` between two scrapes.
fn mean_answer(before: &str, after: &str) -> Duration {
    let d = |what: &str| {
        let sample = format!("copyrator_admission_duration_seconds_{what}{{endpoint=\"pods\"}}");
        metric_value(after, &sample) - metric_value(before, &sample)
    };
    let count = d("count");
    if count > 0.0 {
        Duration::from_secs_f64(d("sum") / count)
    } else {
        Duration::ZERO
    }
}
