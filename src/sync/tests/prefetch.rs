//! A new namespace's job reads the rules and its copies while the namespace is being
//! persisted, and writes as soon as the namespace's watch event arrives (`freshness::prefetch`);
//! when something those reads cover changed meanwhile, it reads again.

use serde_json::json;

use super::{context, copy_in, namespace, scene};
use crate::{
    freshness::feed::{Feed, Watched},
    model::NamespaceInfo,
    queue::job::{Awaited, Job, JobKey, Trigger},
    sync::{Outcome, context::Context, jobs::namespace::prefetch, run},
};

/// What admission does for a namespace change: queue its job (waiting for the event) and
/// ask for early reads, made here at once.
async fn admitted(ctx: &Context) -> Job {
    admitted_as(ctx, created_job()).await
}

async fn admitted_as(ctx: &Context, job: Job) -> Job {
    let mut requests = ctx.waiters.prefetch.serve();
    ctx.waiters.enqueue_admitted(&ctx.metrics, job);
    if let Ok(ticket) = requests.try_recv() {
        prefetch(ctx, ticket).await;
    }
    ctx.queue.snapshot().remove(0)
}

fn live(ctx: &Context) {
    for feed in Feed::all() {
        ctx.waiters.set_live(feed, true);
    }
}

fn created_job() -> Job {
    Job::new(JobKey::Namespace("team-new".into()), Trigger::Admission).awaiting(Awaited::Exists)
}

/// The namespace lands in the store and its watch event reaches copyrator.
fn persisted(api: &super::FakeApi, ctx: &Context) {
    api.store(|s| {
        s.put(
            "namespaces",
            namespace("team-new", json!({"registry": "enabled"})),
        )
    });
    ctx.waiters.prefetch.namespace_event("team-new", || {
        Some(NamespaceInfo {
            name: "team-new".into(),
            resource_version: "100".into(),
            labels: [("registry", "enabled")].into_iter().collect(),
            accept_from: None,
            terminating: false,
        })
    });
    ctx.waiters.notify(&Watched::Namespace("team-new".into()));
}

/// The requests after the first `skip` up to the copy's create.
fn before_create(api: &super::FakeApi, skip: usize) -> Vec<String> {
    let after = &api.lines()[skip..];
    let create = after
        .iter()
        .position(|l| l == "POST secrets team-new/*")
        .unwrap_or_else(|| panic!("the copy is created: {after:#?}"));
    after[..create].to_vec()
}

#[tokio::test]
async fn a_new_namespace_gets_its_copy_without_reading_after_it_is_persisted() {
    let api = scene();
    let ctx = context(&api);
    live(&ctx);
    let job = admitted(&ctx).await;
    let early = api.lines();
    assert!(
        early.iter().any(|l| l.starts_with("LIST secrets")),
        "rules and copies read while waiting: {early:#?}"
    );
    assert!(copy_in(&api, "team-new").is_none());

    persisted(&api, &ctx);
    assert_eq!(run(&ctx, &job).await.unwrap(), Outcome::Done);
    let before = before_create(&api, early.len());
    // Before the create only the source's payload is read (no cache of it yet here); the
    // checks after writing are the same as for any job.
    assert_eq!(before, ["GET secrets platform/registry"]);
    assert!(copy_in(&api, "team-new").is_some());
}

/// The API server holds a create into a namespace its own informer has not seen for 50 ms:
/// the first write into a namespace just created waits `--new-namespace-delay` after its
/// event, in the queue (the job comes back then, its early reads kept); a namespace that
/// existed before (a label added) is written at once.
#[tokio::test]
async fn the_first_write_into_a_new_namespace_waits_the_delay_after_its_event() {
    use std::time::{Duration, Instant};
    const DELAY: Duration = Duration::from_millis(300);
    let api = scene();
    let mut ctx = context(&api);
    ctx.settings.new_namespace_delay = DELAY;
    live(&ctx);
    let job = admitted(&ctx).await;
    let early = api.lines().len();
    let before_event = Instant::now();
    persisted(&api, &ctx);
    let after_event = Instant::now();
    let Outcome::NotBefore(at) = run(&ctx, &job).await.unwrap() else {
        panic!("written at once")
    };
    assert!(at >= before_event + DELAY && at <= after_event + DELAY);
    assert_eq!(api.lines().len(), early, "nothing read or written yet");
    assert_eq!(
        run(&ctx, &job).await.unwrap(),
        Outcome::NotBefore(at),
        "woken early (another event): still not before then"
    );
    tokio::time::sleep_until(at.into()).await;
    assert_eq!(run(&ctx, &job).await.unwrap(), Outcome::Done);
    assert_eq!(
        before_create(&api, early),
        ["GET secrets platform/registry"]
    );
    assert!(copy_in(&api, "team-new").is_some());

    // A label added to a namespace that existed: written at once.
    let api = scene();
    let mut ctx = context(&api);
    ctx.settings.new_namespace_delay = DELAY;
    live(&ctx);
    let relabelled = Job::new(JobKey::Namespace("team-new".into()), Trigger::Admission)
        .awaiting(Awaited::ChangedFrom("99".into()));
    let job = admitted_as(&ctx, relabelled).await;
    persisted(&api, &ctx);
    assert_eq!(run(&ctx, &job).await.unwrap(), Outcome::Done);
    assert!(copy_in(&api, "team-new").is_some());
}

#[tokio::test]
async fn reads_made_before_a_rule_changed_are_made_again() {
    let api = scene();
    let ctx = context(&api);
    live(&ctx);
    let job = admitted(&ctx).await;
    let early = api.lines().len();

    // A source event while the namespace was being persisted.
    ctx.waiters.prefetch.inputs_changed();
    persisted(&api, &ctx);
    assert_eq!(run(&ctx, &job).await.unwrap(), Outcome::Done);
    let before = before_create(&api, early);
    assert!(
        before.iter().any(|l| l == "GET namespaces -/team-new")
            && before.iter().any(|l| l.starts_with("LIST secrets")),
        "read again before writing: {before:#?}"
    );
    assert!(copy_in(&api, "team-new").is_some());
}

#[tokio::test]
async fn without_live_watches_nothing_is_read_early() {
    let api = scene();
    let ctx = context(&api);
    live(&ctx);
    ctx.waiters.set_live(Feed::CopyRules, false);
    let job = admitted(&ctx).await;
    // The namespaces feed is live: the job waits for its event, and nothing is read meanwhile.
    assert!(api.lines().is_empty(), "{:#?}", api.lines());
    assert_eq!(run(&ctx, &job).await.unwrap(), Outcome::NotPersisted);
    assert!(api.lines().is_empty(), "{:#?}", api.lines());
}

/// Reviews of changes that never persist, or many of one namespace, make a bounded number of
/// early reads: one set per namespace tracked, at most `MAX_ENTRIES` namespaces.
#[tokio::test]
async fn a_flood_of_namespace_reviews_makes_a_bounded_number_of_reads() {
    use crate::freshness::prefetch::MAX_ENTRIES;
    let api = scene();
    let ctx = std::sync::Arc::new(context(&api));
    live(&ctx);
    tokio::spawn(crate::sync::prefetch_namespaces(std::sync::Arc::clone(
        &ctx,
    )));
    tokio::task::yield_now().await;
    let sets = |api: &super::FakeApi| {
        api.lines()
            .iter()
            .filter(|l| l.starts_with("LIST copyrules"))
            .count()
    };
    let settle = || async {
        for _ in 0..100 {
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    };

    for _ in 0..1_000 {
        ctx.waiters.enqueue_admitted(&ctx.metrics, created_job());
        tokio::task::yield_now().await;
    }
    settle().await;
    assert_eq!(sets(&api), 1, "one set of reads for one namespace");

    for i in 0..1_000 {
        let job = Job::new(JobKey::Namespace(format!("never-{i}")), Trigger::Admission)
            .awaiting(Awaited::Exists);
        ctx.waiters.enqueue_admitted(&ctx.metrics, job);
        tokio::task::yield_now().await;
    }
    settle().await;
    let made = sets(&api);
    assert!(
        (2..=MAX_ENTRIES).contains(&made),
        "at most {MAX_ENTRIES} namespaces tracked at once: {made} sets of reads"
    );
}
