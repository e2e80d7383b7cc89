//! Phase pod-gate: what the Pod gate (SPEC §10) costs and what it buys.
//!
//! - Its no-op path, which every Pod CREATE in the cluster takes: the captured Pod CREATE
//!   review for a settled namespace, posted over TLS at rising concurrency.
//! - The race it closes: namespaces created labelled, each followed at once (same client, no
//!   wait) by its ServiceAccount and a Pod, as a CI pipeline does. For each Pod, how long its
//!   create took and whether its copy existed when it was admitted — with the gate registered,
//!   then with the gate's configuration deleted (the copy then comes from the namespaces
//!   webhook alone, as with every peer).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, api::PostParams};
use serde_json::{Value, json};

use crate::{
    LongRun,
    admission::{load, review},
    common::{
        Process, TestEnv, create_pod, metric_value, pod, pull_secret_names, register_pod_gate,
        registry_secret, service_account, unregister_pod_gate,
    },
    measure::{create_namespace, namespace_lifecycle_waits},
    report::{Report, ms, summary},
};

const POD_CREATE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/review-pod-create.json"
));

const GATE_PODS: &str = "copyrator_admission_requests_total{endpoint=\"pods\",operation=\"CREATE\",outcome=\"dry_run\"}";

/// The no-op path at 1/4/16/64 connections for `seconds` each, then `count` namespaces with a
/// Pod each, with and without the gate.
pub async fn run(report: &mut Report, lr: &LongRun, count: usize, seconds: f64) {
    no_op(report, lr, seconds).await;

    let LongRun { env, src, .. } = lr;
    let key = format!("bench-gate-{}", env.id);
    env.secrets(src)
        .create(
            &PostParams::default(),
            &registry_secret("registry", &format!("{key}=on"), true),
        )
        .await
        .unwrap();
    let gated = race(lr, &key, "gated", count).await;
    unregister_pod_gate(&lr.client).await;
    wait_gate_silent(&lr.env, &lr.p).await;
    let plain = race(lr, &key, "plain", count).await;
    register_pod_gate(
        &lr.client,
        &format!("https://127.0.0.1:{}", lr.p.webhook_port),
        &lr.p.ca,
    )
    .await;

    let (g50, _, g99, _) = summary(gated.times.clone());
    let (p50, _, p99, _) = summary(plain.times.clone());
    report.row(
        &format!("Pod created right after its new namespace ({count}): Pod create time"),
        format!("p50 {} p99 {}", ms(g50), ms(g99)),
        format!("gate unregistered: p50 {} p99 {}", ms(p50), ms(p99)),
        format!("{:.2}×", g50.as_secs_f64() / p50.as_secs_f64()),
        "",
    );
    report.row(
        "… creates the API server's NamespaceLifecycle admission held over 25 ms (ServiceAccounts, Pods, copies)",
        format!("{:.0}", gated.lifecycle_waits),
        format!("gate unregistered: {:.0}", plain.lifecycle_waits),
        "".into(),
        "",
    );
    report.row(
        "… Pods admitted with their copy / with the pull secret injected",
        format!("{}/{count} / {}/{count}", gated.with_copy, gated.injected),
        format!(
            "gate unregistered: {}/{count} / {}/{count}",
            plain.with_copy, plain.injected
        ),
        "".into(),
        "every Pod",
    );
    report.note(format!(
        "pod gate: {count} namespaces created one by one, labelled, each followed at once by its ServiceAccount and a Pod (same client); the copy is read right after the Pod create returns; Pod create time is the create call alone. Gate outcomes (gated round): {}",
        gated.outcomes
    ));
}

/// The no-op path: Pods in a namespace with nothing to copy, answered from memory once the
/// namespace has settled.
async fn no_op(report: &mut Report, lr: &LongRun, seconds: f64) {
    let ns = lr.env.namespace("gate-noop", &[]).await;
    let mut body: Value = review(
        POD_CREATE,
        "CREATE",
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "app", "namespace": ns},
               "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}}),
        None,
    );
    // The fixture's Pod in full (volumes, envFrom, imagePullSecrets), in the bench namespace.
    let captured: Value = serde_json::from_str(POD_CREATE).unwrap();
    body["request"]["object"] = captured["request"]["object"].clone();
    body["request"]["object"]["metadata"]["namespace"] = json!(ns);
    // The first review settles the namespace; the rest are answered from memory.
    load(&lr.p, "/admission/pods", &body, 1, 0.05).await;
    let metrics = lr.p.metrics().await;
    let cached_before = metric_value(&metrics, "copyrator_pod_gate_total{outcome=\"cached\"}");
    let mut total = 0.0;
    for concurrency in [1usize, 4, 16, 64] {
        let l = load(&lr.p, "/admission/pods", &body, concurrency, seconds).await;
        total += l.rps * seconds;
        l.row(
            report,
            &format!("Pod gate, no-op Pod CREATE, {concurrency} conn"),
            if concurrency == 16 {
                "≥ 20,000/s, p99 ≤ 1 ms"
            } else {
                ""
            },
        );
    }
    let metrics = lr.p.metrics().await;
    let cached = metric_value(&metrics, "copyrator_pod_gate_total{outcome=\"cached\"}");
    report.note(format!(
        "pod gate no-op: the captured Pod CREATE review (tests/data/review-pod-create.json) for a namespace with nothing to copy; {:.0} of ~{total:.0} answered from memory (outcome=\"cached\")",
        cached - cached_before
    ));
}

struct Race {
    times: Vec<Duration>,
    with_copy: usize,
    injected: usize,
    outcomes: String,
    /// Creates held by the API server's 50 ms wait for its namespace informer.
    lifecycle_waits: f64,
}

async fn race(lr: &LongRun, key: &str, tag: &str, count: usize) -> Race {
    let LongRun { env, p, .. } = lr;
    let before = p.metrics().await;
    let waits_before = namespace_lifecycle_waits(&lr.client).await;
    let mut out = Race {
        times: Vec::new(),
        with_copy: 0,
        injected: 0,
        outcomes: String::new(),
        lifecycle_waits: 0.0,
    };
    for i in 0..count {
        let name = env.name(&format!("{tag}-{i}"));
        create_namespace(&lr.namespaces, &name, &[(key, "on")]).await;
        env.track_namespace(&name);
        service_account(&lr.client, &name).await;
        let t = Instant::now();
        let admitted = create_pod(&lr.client, &name, &pod("app", &[], None)).await;
        out.times.push(t.elapsed());
        if env
            .secrets(&name)
            .get_opt("registry")
            .await
            .unwrap()
            .is_some()
        {
            out.with_copy += 1;
        }
        if pull_secret_names(&admitted) == ["registry"] {
            out.injected += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = p.metrics().await;
    out.lifecycle_waits = namespace_lifecycle_waits(&lr.client).await - waits_before;
    out.outcomes = gate_outcomes(&before, &after);
    out
}

/// The Pod gate's answers between two scrapes of copyrator's /metrics, by outcome.
pub fn gate_outcomes(before: &str, after: &str) -> String {
    [
        "cached",
        "settled",
        "wrote",
        "unsettled",
        "timeout",
        "error",
    ]
    .iter()
    .map(|o| {
        let sample = format!("copyrator_pod_gate_total{{outcome=\"{o}\"}}");
        let n = metric_value(after, &sample) - metric_value(before, &sample);
        format!("{o} {n:.0}")
    })
    .collect::<Vec<_>>()
    .join(", ")
}

/// The API server picks up a deleted configuration asynchronously: dry-run Pod creates until
/// five in a row reach copyrator `p` no more.
pub async fn wait_gate_silent(env: &TestEnv, p: &Process) {
    let ns = env.namespace("gate-probe", &[]).await;
    service_account(&env.client, &ns).await;
    let pods = Api::<Pod>::namespaced(env.client.clone(), &ns);
    let dry_run = PostParams {
        dry_run: true,
        field_manager: None,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut quiet = 0;
    while quiet < 5 {
        assert!(
            Instant::now() < deadline,
            "the API server still calls the deleted Pod gate"
        );
        let before = metric_value(&p.metrics().await, GATE_PODS);
        pods.create(&dry_run, &pod("probe", &[], None))
            .await
            .unwrap();
        let after = metric_value(&p.metrics().await, GATE_PODS);
        quiet = if after > before { 0 } else { quiet + 1 };
    }
}
