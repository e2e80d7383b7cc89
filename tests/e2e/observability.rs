//! What operators see: metrics that move by exactly what happened, readiness that means
//! something, and logs, Events and metrics that never contain a Secret's data.

use crate::common;

use std::time::Duration;

use base64::Engine;
use common::*;
use copyrator::marks;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::{
    Api,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

#[tokio::test]
async fn metrics_move_by_exactly_what_happened() {
    let t = Harness::start(Options::default()).await;
    t.wait_startup_resync().await;
    let src = t.namespace("metrics-src", &[]).await;
    let sel = format!("metrics={}", t.id);
    let taken = t.namespace("metrics-taken", &[]).await;
    t.secrets(&taken)
        .create(
            &PostParams::default(),
            &secret("cred", &[], &[], &[("x", "y")]),
        )
        .await
        .unwrap();
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret(
                "cred",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &sel)],
                &[("v", "1")],
            ),
        )
        .await
        .unwrap();
    let before = t.metrics().await;
    let delta =
        |after: &str, sample: &str| metric_value(after, sample) - metric_value(&before, sample);

    const N: usize = 4;
    let mut targets = Vec::new();
    for i in 0..N {
        targets.push(
            t.namespace(&format!("metrics-{i}"), &[("metrics", &t.id)])
                .await,
        );
    }
    for ns in &targets {
        t.wait_for::<Secret>(ns, "cred", "copy", |_| true).await;
    }
    t.label_namespace(&taken, json!({"metrics": t.id})).await;
    t.wait_metric(
        "copyrator_conflicts_total{reason=\"unmanaged\"}",
        "the conflict counted",
        |v| v >= 1.0,
    )
    .await;
    // Not `quiescent`: the namespace job's second look, a second after its admission, skips
    // the target again and counts it again. This counts the first sync alone, so it waits a
    // moment for anything else that sync might count, and reads before the second look.
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Counted once per sync that had to skip the target: the namespace job.
    assert_eq!(
        delta(
            &t.metrics().await,
            "copyrator_conflicts_total{reason=\"unmanaged\"}"
        ),
        1.0
    );
    // One update of the source: N copy updates. One opt-out: one delete.
    t.secrets(&src)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"v": "2"}})),
        )
        .await
        .unwrap();
    t.label_namespace(&targets[0], json!({"metrics": null}))
        .await;
    eventually(CONVERGE, "update and delete", || async {
        let m = t.metrics().await;
        (delta(&m, "copyrator_copy_writes_total{verb=\"update\"}") >= (N - 1) as f64
            && delta(&m, "copyrator_copy_writes_total{verb=\"delete\"}") >= 1.0)
            .then_some(())
    })
    .await;
    // Let anything still in flight land before reading the final numbers. Not `quiescent`
    // either: the counts below are read before the second look of `taken`'s namespace job
    // (a second after its label), which would count its conflict a third time.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = t.metrics().await;

    assert_eq!(
        delta(&after, "copyrator_copy_writes_total{verb=\"create\"}"),
        N as f64,
        "one create per namespace"
    );
    let updates = delta(&after, "copyrator_copy_writes_total{verb=\"update\"}");
    assert!(
        updates == (N - 1) as f64 || updates == N as f64,
        "one update per copy: {updates}"
    );
    assert_eq!(
        delta(&after, "copyrator_copy_writes_total{verb=\"delete\"}"),
        1.0
    );
    // ... and once more by the source update's fan-out, which skipped it again.
    assert_eq!(
        delta(&after, "copyrator_conflicts_total{reason=\"unmanaged\"}"),
        2.0
    );
    assert_eq!(
        delta(
            &after,
            "copyrator_admission_requests_total{endpoint=\"namespaces\",operation=\"CREATE\",outcome=\"allowed\"}"
        ),
        N as f64
    );
    assert!(
        delta(
            &after,
            "copyrator_jobs_total{kind=\"namespace\",outcome=\"ok\"}"
        ) >= N as f64
    );
    assert!(
        metric_value(
            &after,
            "copyrator_admission_duration_seconds_count{endpoint=\"namespaces\"}"
        ) >= N as f64
    );
    assert!(metric_value(&after, "copyrator_copy_lag_seconds_count") >= (2 * N) as f64);
    assert!(
        metric_value(
            &after,
            "copyrator_job_duration_seconds_count{kind=\"namespace\"}"
        ) >= N as f64
    );
    assert!(
        metric_value(
            &after,
            "copyrator_api_requests_total{verb=\"create\",resource=\"secrets\"}"
        ) >= N as f64
    );
    assert_eq!(metric_value(&after, "copyrator_leader"), 1.0);
    // Jobs still waiting in the queue (the namespaces' second looks) finish, and nothing is
    // left behind.
    eventually(CONVERGE, "an empty queue", || async {
        (t.metric("copyrator_queue_depth").await == 0.0
            && t.metric("copyrator_queue_delayed").await == 0.0)
            .then_some(())
    })
    .await;
    assert!(after.contains("# TYPE copyrator_resync_duration_seconds histogram"));
    assert!(after.ends_with("# EOF\n"));
    t.finish().await;
}

/// With the most verbose logging, a Secret's data never shows up in logs, Events or metrics.
#[tokio::test]
async fn secret_data_never_appears_in_logs_events_or_metrics() {
    let env = TestEnv::new().await;
    let canary = format!("CANARY-{}-do-not-leak", env.id);
    let canary2 = format!("CANARY2-{}-do-not-leak", env.id);
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s.as_bytes());
    let mut process = Process::spawn(&[
        "--log-level",
        "trace",
        "--log-format",
        "json",
        "--leader-election=false",
        "--resync-interval",
        "1s",
    ]);
    process.wait_up().await;
    env.register_webhooks(&process).await;

    let src = env.namespace("canary-src", &[]).await;
    let sel = format!("canary={}", env.id);
    let dest = env.namespace("canary-dest", &[("canary", &env.id)]).await;
    let conflict = env.namespace("canary-conflict", &[]).await;
    env.secrets(&conflict)
        .create(
            &PostParams::default(),
            &secret("leaky", &[], &[], &[("password", &canary2)]),
        )
        .await
        .unwrap();
    // Created, copied...
    env.secrets(&src)
        .create(
            &PostParams::default(),
            &secret(
                "leaky",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &sel)],
                &[("password", &canary)],
            ),
        )
        .await
        .unwrap();
    // The canary copied...
    env.wait_value::<Secret>(&dest, "leaky", "password", &canary)
        .await;
    // ... updated, conflicted, hand-edited, deleted.
    env.secrets(&src)
        .patch(
            "leaky",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": canary2}})),
        )
        .await
        .unwrap();
    env.label_namespace(&conflict, json!({"canary": env.id}))
        .await;
    // ... the update copied ...
    env.wait_value::<Secret>(&dest, "leaky", "password", &canary2)
        .await;
    env.secrets(&dest)
        .patch(
            "leaky",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": canary}})),
        )
        .await
        .unwrap();
    // ... the hand edit reverted ...
    env.wait_value::<Secret>(&dest, "leaky", "password", &canary2)
        .await;
    env.secrets(&src)
        .delete("leaky", &DeleteParams::default())
        .await
        .unwrap();
    // ... and the copy deleted.
    env.wait_gone::<Secret>(&dest, "leaky").await;
    // A couple of resyncs at trace level too.
    tokio::time::sleep(Duration::from_millis(2500)).await;

    let logs = process.logs();
    let metrics = process.metrics().await;
    let events = Api::<Event>::all(env.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    let events = serde_json::to_string(&events.items).unwrap();
    assert!(
        logs.len() > 10_000,
        "trace logging is on ({} bytes)",
        logs.len()
    );
    assert!(
        logs.contains("admission") && logs.contains("leaky"),
        "the logs do talk about the Secret"
    );
    assert!(events.contains("leaky"), "Events about the Secret exist");
    for needle in [canary.clone(), canary2.clone(), b64(&canary), b64(&canary2)] {
        assert!(!logs.contains(&needle), "secret data {needle} in the logs");
        assert!(
            !metrics.contains(&needle),
            "secret data {needle} in the metrics"
        );
        assert!(
            !events.contains(&needle),
            "secret data {needle} in an Event"
        );
    }
    process.terminate();
    env.cleanup().await;
}

#[tokio::test]
async fn readyz_follows_the_first_resync_and_the_certificate() {
    // A copyrator that cannot reach any API server never finishes a resync: alive, not ready.
    let cut_off = tempfile::tempdir().unwrap();
    let kc = cut_off.path().join("kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: x\n  cluster: {{server: 'https://127.0.0.1:{}', insecure-skip-tls-verify: true}}\nusers:\n- name: x\n  user: {{token: t}}\ncontexts:\n- name: x\n  context: {{cluster: x, user: x}}\ncurrent-context: x\n",
            free_port()
        ),
    )
    .unwrap();
    let mut lonely = Process::spawn(&[
        "--kubeconfig",
        kc.to_str().unwrap(),
        "--leader-election=false",
    ]);
    lonely.wait_up().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, body) = lonely.get("/readyz").await;
    assert_eq!((status, body.as_str()), (503, "first resync not finished"));
    assert_eq!(lonely.get("/healthz").await.0, 200);
    lonely.kill();

    // Against the real API server: ready after the first resync...
    let mut process =
        Process::spawn(&["--leader-election=false", "--tls-reload-interval", "200ms"]);
    process.wait_up().await;
    eventually(CONVERGE, "ready", || async {
        (process.get("/readyz").await.0 == 200).then_some(())
    })
    .await;
    // The resync job is counted when its worker finishes it, a moment after readiness.
    eventually(CONVERGE, "the first resync counted", || async {
        (process
            .metric("copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}")
            .await
            >= 1.0)
            .then_some(())
    })
    .await;
    let served_before = served_certificate(process.webhook_port);

    // ... unready while the certificate files are unusable, still serving the old pair ...
    std::fs::write(process.certs.join("tls.crt"), "garbage").unwrap();
    eventually(CONVERGE, "unready on a broken certificate", || async {
        (process.get("/readyz").await == (503, "serving certificate not usable".to_string()))
            .then_some(())
    })
    .await;
    assert_eq!(
        served_certificate(process.webhook_port),
        served_before,
        "the old pair stays in service"
    );
    assert!(
        process
            .metric("copyrator_tls_reloads_total{outcome=\"failure\"}")
            .await
            >= 1.0
    );

    // ... and ready again after a good rotation, serving the new certificate.
    let (fresh, _) = test_certs();
    for f in ["tls.key", "tls.crt"] {
        std::fs::copy(fresh.path().join(f), process.certs.join(f)).unwrap();
    }
    eventually(CONVERGE, "ready after rotation", || async {
        (process.get("/readyz").await.0 == 200).then_some(())
    })
    .await;
    let served_after = served_certificate(process.webhook_port);
    assert_ne!(served_after, served_before);
    assert_eq!(served_after, fingerprint(&fresh.path().join("tls.crt")));
    assert!(
        process
            .metric("copyrator_tls_reloads_total{outcome=\"success\"}")
            .await
            >= 1.0
    );
    process.terminate();
}

/// SHA-256 fingerprint of the certificate a TLS server presents (via openssl).
fn served_certificate(port: u16) -> String {
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect 127.0.0.1:{port} -servername localhost </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256"
        ))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn fingerprint(pem: &std::path::Path) -> String {
    let out = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(pem)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn the_runtime_has_as_many_worker_threads_as_threads_says() {
    const THREADS: &str = "copyrator_worker_threads";
    let mut three = Process::spawn(&["--leader-election=false", "--threads", "3"]);
    three.wait_up().await;
    assert_eq!(three.metric(THREADS).await, 3.0, "--threads 3");
    three.terminate();

    // The default: one per CPU this process may use too (the same machine, the same limits).
    let mut default = Process::spawn(&["--leader-election=false"]);
    default.wait_up().await;
    assert_eq!(
        default.metric(THREADS).await,
        std::thread::available_parallelism().unwrap().get() as f64,
        "the default"
    );
    default.terminate();
}

#[tokio::test]
async fn the_write_limit_holds_writes_back_and_counts_the_wait() {
    // Ten writes a second, no burst to speak of: a source copied into N namespaces needs at
    // least (N - 1) / 10 s, and the writes that waited are counted with their wait.
    let t = Harness::start(Options {
        extra: vec!["--api-qps=10".into(), "--api-burst=1".into()],
        ..Options::default()
    })
    .await;
    t.wait_startup_resync().await;
    const N: usize = 6;
    let sel = format!("limited={}", t.id);
    let mut targets = Vec::new();
    for i in 0..N {
        targets.push(
            t.namespace(&format!("limited-{i}"), &[("limited", &t.id)])
                .await,
        );
    }
    let src = t.namespace("limited-src", &[]).await;
    // Let the namespaces' own jobs (nothing to copy yet) finish and the bucket refill.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = t.metrics().await;
    let started = std::time::Instant::now();
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret(
                "limited",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &sel)],
                &[("v", "1")],
            ),
        )
        .await
        .unwrap();
    for ns in &targets {
        t.wait_for::<Secret>(ns, "limited", "copy", |_| true).await;
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(450),
        "{N} writes at 10/s with a burst of 1 took only {took:?}"
    );
    let after = t.metrics().await;
    let delta = |sample: &str| metric_value(&after, sample) - metric_value(&before, sample);
    let waited = delta("copyrator_api_rate_limited_total{limit=\"writes\"}");
    assert!(
        waited >= (N - 1) as f64,
        "at least {} of the {N} creates waited, counted {waited}",
        N - 1
    );
    let seconds = delta("copyrator_api_rate_limited_seconds_total{limit=\"writes\"}");
    assert!(
        seconds >= 0.4,
        "the waits add up to at least 0.1 + 0.2 + ... s, counted {seconds}"
    );
    t.finish().await;
}
