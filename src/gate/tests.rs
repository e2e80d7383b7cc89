//! The Pod gate against the in-memory API: one namespace sync however many Pods wait on it,
//! answers from memory only while the watches vouch for them, no writes for dryRun Pods, and
//! no remembered answer after a failed write.

use std::sync::Arc;

use futures::future::join_all;

use crate::sync::tests::{context, copy_in, count, fake_api::Step, scene, status};
use crate::{
    freshness::feed::{Feed, Watched},
    gate::{Outcome, PodGate},
    queue::job::{Job, JobKey, Trigger},
    sync::context::Context,
};

const BUDGET: std::time::Duration = std::time::Duration::from_secs(5);

/// A context whose watches are all connected: settled namespaces may be remembered.
fn live(ctx: Context) -> Arc<Context> {
    for feed in Feed::all() {
        ctx.ready.connected(feed);
    }
    Arc::new(ctx)
}

fn outcomes(answers: &[(Outcome, Option<Arc<crate::freshness::ready::Ready>>)]) -> Vec<Outcome> {
    answers.iter().map(|(o, _)| *o).collect()
}

#[tokio::test]
async fn pods_of_one_namespace_share_one_sync_and_later_ones_are_answered_from_memory() {
    let api = scene();
    let ctx = live(context(&api));
    let gate = PodGate::new(Arc::clone(&ctx), BUDGET);

    let answers = join_all((0..20).map(|_| gate.check("team-a", false))).await;
    assert_eq!(outcomes(&answers), vec![Outcome::Wrote; 20]);
    assert!(copy_in(&api, "team-a").is_some(), "the copy exists");
    assert_eq!(
        count(&api, "POST secrets team-a/*"),
        1,
        "{:#?}",
        api.lines()
    );

    let requests = api.lines().len();
    let (outcome, ready) = gate.check("team-a", false).await;
    assert_eq!(outcome, Outcome::Cached);
    assert!(ready.unwrap().pull_secrets.is_empty(), "an Opaque source");
    assert_eq!(api.lines().len(), requests, "answered without an API call");
}

#[tokio::test]
async fn an_event_that_can_change_the_answer_makes_the_next_pod_sync_again() {
    let api = scene();
    let ctx = live(context(&api));
    let gate = PodGate::new(Arc::clone(&ctx), BUDGET);
    assert_eq!(gate.check("team-a", false).await.0, Outcome::Wrote);
    assert_eq!(gate.check("team-a", false).await.0, Outcome::Cached);

    // The namespace's own event: synced again (nothing to write now).
    ctx.ready
        .observe(Feed::Namespaces, &Watched::Namespace("team-a".into()));
    assert_eq!(gate.check("team-a", false).await.0, Outcome::Settled);
    assert_eq!(gate.check("team-a", false).await.0, Outcome::Cached);

    // A copy deleted by hand (its watch event): written again before the Pod is admitted.
    api.store(|s| s.remove("secrets", Some("team-a"), "registry"));
    ctx.ready.observe(
        Feed::Copies(crate::model::Kind::Secret),
        &Watched::Object(crate::model::ObjectKey::new(
            crate::model::Kind::Secret,
            "team-a",
            "registry",
        )),
    );
    assert_eq!(gate.check("team-a", false).await.0, Outcome::Wrote);
    assert!(copy_in(&api, "team-a").is_some());

    // A watch down: nothing is answered from memory until it is back.
    ctx.ready
        .disconnected(Feed::Sources(crate::model::Kind::Secret));
    assert_eq!(gate.check("team-a", false).await.0, Outcome::Settled);
    assert_eq!(gate.check("team-a", false).await.0, Outcome::Settled);
    ctx.ready
        .connected(Feed::Sources(crate::model::Kind::Secret));
    assert_eq!(gate.check("team-a", false).await.0, Outcome::Settled);
    assert_eq!(gate.check("team-a", false).await.0, Outcome::Cached);
}

#[tokio::test]
async fn a_dry_run_pod_writes_nothing_and_a_failed_write_is_not_remembered() {
    let api = scene();
    let ctx = live(context(&api));
    let gate = PodGate::new(Arc::clone(&ctx), BUDGET);

    assert_eq!(gate.check("team-a", true).await.0, Outcome::DryRun);
    assert!(api.lines().is_empty(), "{:#?}", api.lines());

    let mut failures = 1;
    api.hook(move |req, _| {
        if req.line() == "POST secrets team-a/*" && failures > 0 {
            failures -= 1;
            let mut err = status("not-found", "registry");
            err["code"] = 500.into();
            err["reason"] = "InternalError".into();
            return Step::Answer(500, err);
        }
        Step::Continue
    });
    // A server error ends the sync (the job is retried): the Pod is admitted without the
    // promise.
    assert_eq!(gate.check("team-a", false).await.0, Outcome::Error);
    assert!(copy_in(&api, "team-a").is_none());
    // Not remembered: the next Pod syncs again, and this time the write lands.
    assert_eq!(gate.check("team-a", false).await.0, Outcome::Wrote);
    assert!(copy_in(&api, "team-a").is_some());
}

#[tokio::test]
async fn excluded_namespaces_are_not_synced() {
    let api = scene();
    let mut ctx = context(&api);
    ctx.settings.policy.excluded_namespaces = ["team-a".to_string()].into();
    let gate = PodGate::new(live(ctx), BUDGET);
    assert_eq!(gate.check("team-a", false).await.0, Outcome::Excluded);
    assert!(api.lines().is_empty());
}

/// A Pod review naming a namespace that does not exist (no API server sends one: a forged
/// review) is answered as a namespace with nothing to do is, and from memory the next time,
/// until the namespace's own event.
#[tokio::test]
async fn a_namespace_that_does_not_exist_is_answered_like_one_with_nothing_to_do() {
    let api = scene();
    api.store(|s| {
        s.put(
            "namespaces",
            crate::sync::tests::namespace("quiet", serde_json::json!({})),
        )
    });
    let ctx = live(context(&api));
    let gate = PodGate::new(Arc::clone(&ctx), BUDGET);
    for namespace in ["quiet", "nowhere"] {
        let (outcome, ready) = gate.check(namespace, false).await;
        assert_eq!(outcome, Outcome::Settled, "{namespace}");
        assert!(ready.unwrap().pull_secrets.is_empty(), "{namespace}");
    }
    let requests = api.lines().len();
    for namespace in ["quiet", "nowhere"] {
        assert_eq!(gate.check(namespace, false).await.0, Outcome::Cached);
    }
    assert_eq!(api.lines().len(), requests, "answered without an API call");

    // Created since: its event makes the next Pod sync it.
    ctx.ready
        .observe(Feed::Namespaces, &Watched::Namespace("nowhere".into()));
    assert_eq!(gate.check("nowhere", false).await.0, Outcome::Settled);
}

#[tokio::test]
async fn a_pod_created_while_its_namespace_job_runs_waits_for_that_job_instead_of_syncing() {
    let api = scene();
    let ctx = live(context(&api));
    let gate = PodGate::new(Arc::clone(&ctx), BUDGET);
    // The namespace's creation queued its job; a worker runs it.
    let key = JobKey::Namespace("team-a".into());
    ctx.queue.push(Job::new(key.clone(), Trigger::Admission));
    let job = ctx.queue.pop().await.expect("the namespace's job");

    let before = api.lines().len();
    let pod = tokio::spawn({
        let gate = Arc::clone(&gate);
        async move { gate.check("team-a", false).await }
    });
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    assert!(!pod.is_finished(), "the Pod waits for the job");
    assert_eq!(
        api.lines().len(),
        before,
        "and the gate reads nothing itself: {:#?}",
        api.lines()
    );

    crate::sync::run(&ctx, &job)
        .await
        .expect("the job settles it");
    ctx.queue.done(&key);
    let (outcome, ready) = pod.await.expect("the Pod's answer");
    assert_eq!(outcome, Outcome::Cached, "what the job recorded");
    assert!(ready.is_some());
    assert!(copy_in(&api, "team-a").is_some(), "the copy exists");
    assert_eq!(count(&api, "POST secrets team-a/*"), 1, "written once");
}

#[tokio::test]
async fn a_pod_whose_namespace_job_is_only_a_retry_later_is_synced_at_once() {
    let api = scene();
    let ctx = live(context(&api));
    let gate = PodGate::new(Arc::clone(&ctx), BUDGET);
    let key = JobKey::Namespace("team-a".into());
    let mut retry = Job::new(key.clone(), Trigger::FollowUp);
    retry.attempt = 3;
    retry.retry_at = Some(std::time::Instant::now() + std::time::Duration::from_secs(60));
    ctx.queue.push(retry);
    assert!(!ctx.queue.in_flight(&key, std::time::Duration::from_secs(1)));
    assert_eq!(gate.check("team-a", false).await.0, Outcome::Wrote);
}

#[tokio::test]
async fn a_pod_whose_namespace_job_waits_for_a_change_not_persisted_is_synced_at_once() {
    let api = scene();
    let ctx = live(context(&api));
    let gate = PodGate::new(Arc::clone(&ctx), BUDGET);
    // A review announced a change of team-a (perhaps forged) that is not persisted: its job
    // waits for it, up to its deadline.
    let key = JobKey::Namespace("team-a".into());
    let mut waiting = Job::new(key.clone(), Trigger::Admission);
    waiting.retry_at = Some(std::time::Instant::now() + crate::freshness::persisted::PERSIST_WAIT);
    ctx.queue.push(waiting);
    let started = std::time::Instant::now();
    assert_eq!(gate.check("team-a", false).await.0, Outcome::Wrote);
    assert!(
        started.elapsed() < super::JOIN_WAIT,
        "not held for that job"
    );
}
