//! What a new namespace costs the API server once the watches keep what its job reads: its
//! namespace and the CopyRules come from memory, its source's payload from the cache of the
//! version the index shows, and the post-write re-check from the indexes; only the copy is
//! written. The Pod gate still reads the namespace it syncs.

use serde_json::json;

use super::{FakeApi, context, copy_in, count, index_namespaces, namespace, scene};
use crate::{
    model::{Kind, ObjectKey, SourceInfo},
    queue::job::{Awaited, Job, JobKey, Trigger},
    sync::{Outcome, context::Context, pods::settle_namespace, run},
};

/// The CopyRules watch is up and a LIST of them (none) is known; the sources watch holds the
/// source as the fake API does.
fn rules_and_sources_known(api: &FakeApi, ctx: &Context) {
    let scope = ctx.cluster.copy_rule_scope();
    scope.listed(scope.listing(), &[]);
    scope.set_live(None, true);
    let key = ObjectKey::new(Kind::Secret, "platform", "registry");
    let meta = api
        .store(|s| s.get("secrets", Some("platform"), "registry").cloned())
        .map(|v| serde_json::from_value(v["metadata"].clone()).unwrap())
        .unwrap();
    let index = ctx.cluster.source_index().of(Kind::Secret);
    let mut seed = index.seeding(None);
    seed.insert(key, SourceInfo::from_meta(Kind::Secret, &meta).unwrap());
    index.seed(None, seed);
    index.set_live(None, true);
}

fn created(ns: &str) -> Job {
    Job::new(JobKey::Namespace(ns.into()), Trigger::Admission).awaiting(Awaited::Exists)
}

#[tokio::test]
async fn new_namespaces_read_nothing_the_indexes_hold_and_their_source_once() {
    let api = scene();
    api.store(|s| {
        s.put(
            "namespaces",
            namespace("team-b", json!({"registry": "enabled"})),
        )
    });
    let ctx = context(&api);
    index_namespaces(&api, &ctx, &["platform", "team-a", "team-b"]);
    rules_and_sources_known(&api, &ctx);

    for ns in ["team-a", "team-b"] {
        assert_eq!(run(&ctx, &created(ns)).await.unwrap(), Outcome::Done);
        assert!(copy_in(&api, ns).is_some(), "{ns} has its copy");
    }
    assert_eq!(
        count(&api, "GET namespaces -/team-a"),
        0,
        "{:#?}",
        api.lines()
    );
    assert_eq!(count(&api, "GET namespaces -/team-b"), 0);
    assert_eq!(count(&api, "LIST copyrules -/*"), 0, "{:#?}", api.lines());
    assert_eq!(
        count(&api, "GET secrets platform/registry"),
        1,
        "the payload read once, kept for its version; the re-checks from the index: {:#?}",
        api.lines()
    );
}

#[tokio::test]
async fn a_job_whose_change_the_index_does_not_show_reads_its_namespace() {
    let api = scene();
    let ctx = context(&api);
    index_namespaces(&api, &ctx, &["platform", "team-a"]);
    rules_and_sources_known(&api, &ctx);
    let held = ctx
        .cluster
        .namespace_index()
        .read(|m| m["team-a"].resource_version.clone())
        .unwrap();
    // Relabelled from the version the index holds; the event is not there yet.
    let job = Job::new(JobKey::Namespace("team-a".into()), Trigger::Admission)
        .awaiting(Awaited::ChangedFrom(held));
    run(&ctx, &job).await.unwrap();
    assert_eq!(
        count(&api, "GET namespaces -/team-a"),
        1,
        "{:#?}",
        api.lines()
    );
}

#[tokio::test]
async fn the_pod_gate_reads_the_namespace_it_syncs() {
    let api = scene();
    let ctx = context(&api);
    index_namespaces(&api, &ctx, &["platform", "team-a"]);
    rules_and_sources_known(&api, &ctx);
    settle_namespace(&ctx, "team-a").await.unwrap();
    assert!(copy_in(&api, "team-a").is_some());
    assert_eq!(
        count(&api, "GET namespaces -/team-a"),
        1,
        "{:#?}",
        api.lines()
    );
    assert_eq!(count(&api, "LIST copyrules -/*"), 0, "{:#?}", api.lines());
}

#[tokio::test]
async fn rules_are_listed_while_their_watch_is_down() {
    let api = scene();
    let ctx = context(&api);
    index_namespaces(&api, &ctx, &["platform", "team-a"]);
    rules_and_sources_known(&api, &ctx);
    ctx.cluster.copy_rule_scope().set_live(None, false);
    run(&ctx, &created("team-a")).await.unwrap();
    assert_eq!(count(&api, "LIST copyrules -/*"), 1, "{:#?}", api.lines());
}
