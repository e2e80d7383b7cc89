//! Two replicas against one API server: one Lease holder runs the reconciler, both serve
//! webhooks and run workers, a killed leader is replaced, and they never fight over a copy.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use copyrator::marks;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

const LEASE: Duration = Duration::from_secs(4);

fn replica_args<'a>(lease_ns: &'a str, lease_name: &'a str, lease: &'a str) -> Vec<&'a str> {
    vec![
        "--leader-election=true",
        "--lease-namespace",
        lease_ns,
        "--lease-name",
        lease_name,
        "--lease-duration",
        lease,
        "--resync-interval",
        "1s",
    ]
}

async fn writes(p: &Process) -> f64 {
    let m = p.metrics().await;
    ["create", "update", "delete"]
        .iter()
        .map(|v| metric_value(&m, &format!("copyrator_copy_writes_total{{verb=\"{v}\"}}")))
        .sum()
}

const RESYNCS: &str = "copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}";

#[tokio::test]
async fn one_leader_runs_the_reconciler_and_a_killed_leader_is_replaced() {
    let env = TestEnv::new().await;
    let lease_ns = env.namespace("lease", &[]).await;
    let lease_name = env.name("copyrator");
    let args = replica_args(&lease_ns, &lease_name, "4s");

    let mut a = Process::spawn(&args);
    a.wait_up().await;
    a.wait_metric("copyrator_leader", "the first replica leading", |v| {
        v == 1.0
    })
    .await;
    let mut b = Process::spawn(&args);
    b.wait_up().await;
    // The follower is ready (it sees a leader) but does not lead.
    eventually(CONVERGE, "the follower ready", || async {
        (b.get("/readyz").await.0 == 200).then_some(())
    })
    .await;
    env.register_webhooks(&b).await;

    let src = env.namespace("ha-src", &[]).await;
    let sel = format!("ha={}", env.id);
    let mut targets = Vec::new();
    for i in 0..3 {
        targets.push(env.namespace(&format!("ha-{i}"), &[("ha", &env.id)]).await);
    }
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
    for ns in &targets {
        env.wait_for::<Secret>(ns, "cred", "copies", |_| true).await;
    }

    // Steady state: only the leader resyncs (the follower ran its startup resync only), and
    // nobody writes.
    let (wa, wb, ra) = (writes(&a).await, writes(&b).await, a.metric(RESYNCS).await);
    let rb = b.metric(RESYNCS).await;
    assert!(rb <= 1.0, "a follower resyncs once, when it starts");
    a.wait_metric(RESYNCS, "three more leader resyncs", |v| v >= ra + 3.0)
        .await;
    assert_eq!(
        b.metric(RESYNCS).await,
        rb,
        "the follower never runs the periodic reconciler"
    );
    assert_eq!(b.metric("copyrator_leader").await, 0.0);
    assert_eq!(
        writes(&a).await + writes(&b).await,
        wa + wb,
        "no writes in steady state"
    );

    // One change, handled by the follower's webhook job and the leader's resyncs at once:
    // each copy is written exactly once, no ping-pong.
    env.secrets(&src)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"v": "2"}})),
        )
        .await
        .unwrap();
    for ns in &targets {
        env.wait_value::<Secret>(ns, "cred", "v", "2").await;
    }
    let ra = a.metric(RESYNCS).await;
    a.wait_metric(RESYNCS, "two more leader resyncs", |v| v >= ra + 2.0)
        .await;
    assert_eq!(
        writes(&a).await + writes(&b).await,
        wa + wb + targets.len() as f64,
        "one write per copy across both replicas"
    );

    // Kill the leader: the follower takes over within the lease duration.
    a.kill();
    let killed = Instant::now();
    eventually(LEASE * 3, "the follower leading", || async {
        (b.metric("copyrator_leader").await == 1.0).then_some(())
    })
    .await;
    let takeover = killed.elapsed();
    eprintln!("takeover {takeover:?} after SIGKILL (lease {LEASE:?})");
    assert!(
        takeover <= LEASE + Duration::from_secs(1),
        "takeover took {takeover:?}"
    );

    // Copies keep converging: the new leader resyncs, its webhooks keep working.
    b.wait_metric(RESYNCS, "the new leader resyncing", |v| v >= rb + 1.0)
        .await;
    let late = env.namespace("ha-late", &[("ha", &env.id)]).await;
    env.wait_for::<Secret>(&late, "cred", "a copy after failover", |_| true)
        .await;

    assert!(b.terminate().success(), "clean exit on SIGTERM");
    env.cleanup().await;
}

#[tokio::test]
async fn a_leader_that_stops_cleanly_hands_over_at_once() {
    let env = TestEnv::new().await;
    let lease_ns = env.namespace("lease2", &[]).await;
    let lease_name = env.name("copyrator");
    let args = replica_args(&lease_ns, &lease_name, "30s");
    let mut a = Process::spawn(&args);
    a.wait_up().await;
    a.wait_metric("copyrator_leader", "the first replica leading", |v| {
        v == 1.0
    })
    .await;
    let mut b = Process::spawn(&args);
    b.wait_up().await;
    eventually(CONVERGE, "the follower ready", || async {
        (b.get("/readyz").await.0 == 200).then_some(())
    })
    .await;

    // SIGTERM releases the Lease: the follower does not wait out the 30 s lease.
    let stopped = Instant::now();
    assert!(a.terminate().success());
    eventually(Duration::from_secs(20), "the follower leading", || async {
        (b.metric("copyrator_leader").await == 1.0).then_some(())
    })
    .await;
    let handover = stopped.elapsed();
    eprintln!("handover {handover:?} after SIGTERM (lease 30s)");
    assert!(
        handover < Duration::from_secs(10),
        "handover took {handover:?}"
    );
    b.terminate();
    env.cleanup().await;
}

/// In-cluster, copyrator's pod knows its namespace (POD_NAMESPACE, as the chart sets it):
/// without --lease-namespace, the Lease lives there, not in `default`.
#[tokio::test]
async fn the_lease_lives_in_the_pods_own_namespace_by_default() {
    use k8s_openapi::api::coordination::v1::Lease;
    let env = TestEnv::new().await;
    let own = env.namespace("lease-own", &[]).await;
    let identity = env.name("lease-default");
    let (dir, ca) = test_certs();
    let mut p = Process::spawn_with_env(
        dir,
        ca,
        &["--leader-election=true", "--identity", &identity],
        &[("POD_NAMESPACE", &own)],
    );
    p.wait_up().await;
    let lease = env
        .wait_for::<Lease>(&own, "copyrator", "held by this process", |l| {
            l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some(identity.as_str())
        })
        .await;
    assert!(lease.spec.is_some());
    // Whatever else holds a Lease in `default`, it is not this process.
    let default = env
        .api::<Lease>("default")
        .get_opt("copyrator")
        .await
        .unwrap();
    assert_ne!(
        default.and_then(|l| l.spec).and_then(|s| s.holder_identity),
        Some(identity)
    );
    p.terminate();
    env.cleanup().await;
}

/// One round of changes while `what` (SPEC §4 item 9, §5 watches as triggers): a new labelled
/// namespace and a new version of the source; returns how long until every target held it.
async fn change_and_converge(
    env: &TestEnv,
    src: &str,
    targets: &mut Vec<String>,
    round: usize,
    what: &str,
) -> Duration {
    let started = Instant::now();
    targets.push(
        env.namespace(&format!("roll-{round}"), &[("roll", &env.id)])
            .await,
    );
    let value = format!("v{round}");
    env.secrets(src)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"v": value}})),
        )
        .await
        .unwrap();
    for ns in targets.iter() {
        let api = env.secrets(ns);
        eventually(
            Duration::from_secs(10),
            &format!("{what}: {ns} holds {value}"),
            || async {
                api.get_opt("cred")
                    .await
                    .ok()
                    .flatten()
                    .filter(|s| secret_value(s, "v").as_deref() == Some(value.as_str()))
            },
        )
        .await;
    }
    let took = started.elapsed();
    eprintln!("{what}: every copy converged {took:?} after the change");
    took
}

#[tokio::test]
async fn a_rolling_restart_of_two_replicas_loses_no_change() {
    let env = TestEnv::new().await;
    let lease_ns = env.namespace("roll-lease", &[]).await;
    let lease_name = env.name("copyrator");
    // An hour between resyncs: only the webhooks, the watches and the startup resyncs of the
    // replicas that come back can converge a change.
    let args = [
        "--leader-election=true",
        "--lease-namespace",
        &lease_ns,
        "--lease-name",
        &lease_name,
        "--lease-duration",
        "30s",
        "--resync-interval",
        "1h",
    ];
    let mut a = Process::spawn(&args);
    a.wait_up().await;
    a.wait_metric("copyrator_leader", "the first replica leading", |v| {
        v == 1.0
    })
    .await;
    let mut b = Process::spawn(&args);
    b.wait_up().await;
    env.register_webhooks(&b).await;

    let src = env.namespace("roll-src", &[]).await;
    env.secrets(&src)
        .create(
            &PostParams::default(),
            &secret(
                "cred",
                &[(marks::SOURCE_LABEL, "true")],
                &[(
                    marks::NAMESPACE_SELECTOR_ANNOTATION,
                    &format!("roll={}", env.id),
                )],
                &[("v", "v0")],
            ),
        )
        .await
        .unwrap();
    let mut targets = Vec::new();
    let mut took = vec![change_and_converge(&env, &src, &mut targets, 1, "both up").await];

    // The replica the webhooks call goes away: the API server's calls fail and are ignored;
    // the leader's watches see the changes.
    b.terminate();
    took.push(change_and_converge(&env, &src, &mut targets, 2, "the webhooks' replica down").await);
    let mut b = Process::spawn(&args);
    b.wait_up().await;
    env.register_webhooks(&b).await;
    took.push(change_and_converge(&env, &src, &mut targets, 3, "it is back").await);

    // Then the leader: SIGTERM hands the Lease over at once.
    assert!(a.terminate().success());
    eventually(
        Duration::from_secs(20),
        "the other replica leading",
        || async { (b.metric("copyrator_leader").await == 1.0).then_some(()) },
    )
    .await;
    took.push(change_and_converge(&env, &src, &mut targets, 4, "the old leader down").await);
    let mut a = Process::spawn(&args);
    a.wait_up().await;
    took.push(change_and_converge(&env, &src, &mut targets, 5, "both up again").await);

    assert_eq!(
        b.metric(RESYNCS).await,
        1.0,
        "no resync but its startup one"
    );
    for (round, t) in took.iter().enumerate() {
        assert!(
            *t < Duration::from_secs(5),
            "round {}: {t:?} (every change converges in seconds, none waits for a resync)",
            round + 1
        );
    }
    a.terminate();
    b.terminate();
    env.cleanup().await;
}
