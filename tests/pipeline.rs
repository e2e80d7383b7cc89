//! The work queue under load, end to end: bursts coalesce, a full queue loses nothing.

mod common;

use common::*;
use copyrator::marks;
use futures::future::join_all;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

/// A burst of 100 updates to one source is a couple of fan-outs, not 100, and the copies end
/// up with the last persisted content.
#[tokio::test]
async fn burst_of_updates_to_one_source_coalesces() {
    let env = TestEnv::new().await;
    let copyrator = Copyrator::start(Options::default()).await;
    let src = env.namespace("burst-src", &[]).await;
    let sel = format!("burst={}", env.id);
    let mut targets = Vec::new();
    for i in 0..5 {
        targets.push(
            env.namespace(&format!("burst-{i}"), &[("burst", &env.id)])
                .await,
        );
    }
    env.secrets(&src)
        .create(
            &PostParams::default(),
            &secret(
                "cred",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &sel)],
                &[("n", "0")],
            ),
        )
        .await
        .unwrap();
    for ns in &targets {
        eventually(CONVERGE, "first copies", || async {
            env.secrets(ns).get_opt("cred").await.ok().flatten()
        })
        .await;
    }
    // Namespace jobs take a second look a second after their admission: let them pass.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let jobs = "copyrator_jobs_total{kind=\"source\",outcome=\"ok\"}";
    let updates = "copyrator_copy_writes_total{verb=\"update\"}";
    let jobs_before = copyrator.metric(jobs).await;
    let updates_before = copyrator.metric(updates).await;

    let api = env.secrets(&src);
    join_all((1..=100).map(|i| {
        let api = api.clone();
        async move {
            api.patch(
                "cred",
                &PatchParams::default(),
                &Patch::Merge(json!({"stringData": {"n": i.to_string()}})),
            )
            .await
            .unwrap();
        }
    }))
    .await;
    let last = secret_value(&env.secrets(&src).get("cred").await.unwrap(), "n").unwrap();
    for ns in &targets {
        eventually(
            CONVERGE,
            &format!("{ns} holding the last update ({last})"),
            || async {
                let s = env.secrets(ns).get("cred").await.ok()?;
                (secret_value(&s, "n").as_deref() == Some(last.as_str())).then_some(())
            },
        )
        .await;
    }
    let fanouts = copyrator.metric(jobs).await - jobs_before;
    let writes = copyrator.metric(updates).await - updates_before;
    eprintln!("100 updates -> {fanouts} source jobs, {writes} copy updates for 5 copies");
    assert!(fanouts < 100.0 / 4.0, "100 updates ran {fanouts} fan-outs");
    assert!(writes <= fanouts * 5.0);
    copyrator.stop().await;
    env.cleanup().await;
}

/// When the queue is full, jobs are dropped and a full resync catches up: nothing is lost.
#[tokio::test]
async fn full_queue_drops_jobs_and_the_resync_catches_up() {
    let env = TestEnv::new().await;
    let copyrator = Copyrator::start(Options {
        extra: vec![
            "--queue-capacity".into(),
            "2".into(),
            "--workers".into(),
            "1".into(),
        ],
        ..Default::default()
    })
    .await;
    let src = env.namespace("full-src", &[]).await;
    let sel = format!("full={}", env.id);
    env.secrets(&src)
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
    let names: Vec<String> = join_all((0..30).map(|i| {
        let env = &env;
        async move {
            env.namespace(&format!("full-{i}"), &[("full", &env.id)])
                .await
        }
    }))
    .await;
    for ns in &names {
        eventually(CONVERGE, &format!("copy in {ns}"), || async {
            env.secrets(ns).get_opt("cred").await.ok().flatten()
        })
        .await;
    }
    let dropped = copyrator.metric("copyrator_queue_dropped_total").await;
    assert!(
        dropped > 0.0,
        "the test must overflow the queue to prove anything"
    );
    eventually(CONVERGE, "a resync after the drops", || async {
        let resyncs = copyrator
            .metric("copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}")
            .await;
        (resyncs >= 2.0).then_some(())
    })
    .await;
    copyrator.stop().await;
    env.cleanup().await;
}
