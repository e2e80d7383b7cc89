//! Orchestration tests of `sync` against an in-memory API (`fake_api`): what a job does when
//! the cluster changes under it (stale writes, relabelled namespaces, status races, changes not
//! persisted yet, unreadable sources), asserted on the objects the API ends up holding and the
//! requests it received. The happy paths and the real API server are the end-to-end tests'.

mod bundle_reads;
pub(crate) mod fake_api;
mod indexed_reads;
mod prefetch;

use std::sync::Arc;

pub(crate) use fake_api::status;
use fake_api::{FakeApi, Step};
use serde_json::{Value, json};

use super::{MAX_ROUNDS, Outcome, SyncError, run};
use crate::{
    cluster::{ApiLimits, Cluster, namespace_info, ratelimit::RateLimiter},
    marks,
    metrics::{Metrics, WhatLabels},
    model::{Kind, ObjectKey},
    plan::Policy,
    queue::{
        WorkQueue,
        job::{Awaited, Job, JobKey, Trigger},
    },
    report::events::Events,
    sync::context::{Context, SyncSettings},
    tenancy::TrustPolicy,
};

const PASSWORD: &str = "c2VjcmV0"; // "secret"

pub(crate) fn context(api: &FakeApi) -> Context {
    let client = api.client();
    let metrics = Arc::new(Metrics::new());
    let cluster = Cluster::new(
        client.clone(),
        Arc::clone(&metrics),
        ApiLimits {
            writes: RateLimiter::unlimited(),
            reads: RateLimiter::unlimited(),
            read_concurrency: 8,
        },
        500,
    );
    let events = Events::new(client, "test".into(), Arc::clone(&metrics));
    let settings = SyncSettings {
        policy: Policy {
            trust: TrustPolicy::trust_all(),
            ..Default::default()
        },
        fanout_concurrency: 4,
        fanout_bytes: 16 << 20,
        new_namespace_delay: std::time::Duration::ZERO,
        resync_chunk: crate::sync::context::RESYNC_CHUNK,
        source_cache_bytes: crate::sync::context::DEFAULT_SOURCE_CACHE_BYTES,
    };
    Context::new(cluster, events, metrics, WorkQueue::new(100), settings)
}

pub(crate) fn namespace(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
}

/// A source in `platform` whose inline rule selects namespaces labelled `registry=enabled`.
fn source(data: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": "registry", "namespace": "platform",
            "labels": {marks::SOURCE_LABEL: "true"},
            "annotations": {marks::NAMESPACE_SELECTOR_ANNOTATION: "registry=enabled"}
        },
        "type": "Opaque",
        "data": {"password": data}
    })
}

/// `platform` with the source, and `team-a` opted in.
pub(crate) fn scene() -> FakeApi {
    let api = FakeApi::default();
    api.store(|s| {
        s.put("namespaces", namespace("platform", json!({})));
        s.put(
            "namespaces",
            namespace("team-a", json!({"registry": "enabled"})),
        );
        s.put("secrets", source(PASSWORD));
    });
    api
}

fn source_key() -> ObjectKey {
    ObjectKey::new(Kind::Secret, "platform", "registry")
}

fn source_job() -> Job {
    Job::new(JobKey::Source(source_key()), Trigger::Admission)
}

pub(crate) fn copy_in(api: &FakeApi, ns: &str) -> Option<Value> {
    api.store(|s| s.get("secrets", Some(ns), "registry").cloned())
}

pub(crate) fn count(api: &FakeApi, line: &str) -> usize {
    api.lines().iter().filter(|l| *l == line).count()
}

fn queued(ctx: &Context) -> Vec<(JobKey, Trigger)> {
    ctx.queue
        .snapshot()
        .into_iter()
        .map(|j| (j.key, j.trigger))
        .collect()
}

#[tokio::test]
async fn a_name_taken_between_read_and_write_is_reported_and_never_overwritten() {
    let api = scene();
    // Someone creates their own Secret with the copy's name just before copyrator's create.
    let theirs = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "registry", "namespace": "team-a"},
        "data": {"password": "dGhlaXJz"}
    });
    let mut raced = false;
    api.hook(move |req, store| {
        if req.line() == "POST secrets team-a/*" && !std::mem::replace(&mut raced, true) {
            store.put("secrets", theirs.clone());
        }
        Step::Continue
    });
    let ctx = context(&api);

    assert_eq!(run(&ctx, &source_job()).await.unwrap(), Outcome::Done);

    let held = copy_in(&api, "team-a").unwrap();
    assert_eq!(
        held["data"]["password"], "dGhlaXJz",
        "their data, untouched"
    );
    assert!(held["metadata"].get("labels").is_none(), "no marks added");
    assert_eq!(count(&api, "POST secrets team-a/*"), 1);
    assert_eq!(count(&api, "PUT secrets team-a/registry"), 0);
    assert_eq!(count(&api, "DELETE secrets team-a/registry"), 0);
    let events: Vec<Value> = api
        .requests()
        .into_iter()
        .filter(|r| r.resource == "events")
        .map(|r| r.body)
        .collect();
    assert!(
        events.iter().any(|e| e["reason"] == "CopyConflict"),
        "the conflict is reported: {events:?}"
    );
}

#[tokio::test]
async fn an_update_that_went_stale_is_read_again_and_written_over_the_new_version() {
    let api = scene();
    let ctx = context(&api);
    run(&ctx, &source_job()).await.unwrap();
    let first = copy_in(&api, "team-a").expect("copied");
    assert_eq!(first["data"]["password"], PASSWORD);

    // The source changes; just before copyrator's update, someone edits the copy.
    api.store(|s| s.put("secrets", source("bmV3")));
    let mut raced = false;
    api.hook(move |req, store| {
        if req.line() == "PUT secrets team-a/registry" && !std::mem::replace(&mut raced, true) {
            let mut edited = store
                .get("secrets", Some("team-a"), "registry")
                .cloned()
                .unwrap();
            edited["data"]["password"] = "ZWRpdGVk".into();
            store.put("secrets", edited);
        }
        Step::Continue
    });
    assert_eq!(run(&ctx, &source_job()).await.unwrap(), Outcome::Done);

    let copy = copy_in(&api, "team-a").unwrap();
    assert_eq!(
        copy["data"]["password"], "bmV3",
        "the source's new data won"
    );
    assert_eq!(
        copy["metadata"]["uid"], first["metadata"]["uid"],
        "updated in place"
    );
    assert_eq!(
        count(&api, "PUT secrets team-a/registry"),
        2,
        "{:#?}",
        api.lines()
    );
    let puts: Vec<String> = api
        .requests()
        .into_iter()
        .filter(|r| r.line() == "PUT secrets team-a/registry")
        .map(|r| {
            r.body["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_ne!(
        puts[0], puts[1],
        "the second write is preconditioned on the re-read version"
    );
}

#[tokio::test]
async fn writes_that_never_settle_end_the_job_for_a_retry_after_a_few_rounds() {
    let api = scene();
    let ctx = context(&api);
    run(&ctx, &source_job()).await.unwrap();
    api.store(|s| s.put("secrets", source("bmV3")));
    // Another writer edits the copy before every one of copyrator's updates.
    api.hook(|req, store| {
        if req.line() == "PUT secrets team-a/registry" {
            let mut edited = store
                .get("secrets", Some("team-a"), "registry")
                .cloned()
                .unwrap();
            edited["data"]["password"] = "ZWRpdGVk".into();
            store.put("secrets", edited);
        }
        Step::Continue
    });

    let err = run(&ctx, &source_job()).await.unwrap_err();
    assert!(matches!(err, SyncError::Unsettled(_)), "{err}");
    assert_eq!(
        count(&api, "PUT secrets team-a/registry"),
        MAX_ROUNDS,
        "{:#?}",
        api.lines()
    );
}

/// Seeds the namespace index with these namespaces as the fake API holds them and marks it
/// live, as the namespaces watch does once its LIST has returned.
pub(crate) fn index_namespaces(api: &FakeApi, ctx: &Context, names: &[&str]) {
    let index = ctx.cluster.namespace_index();
    let mut seed = index.seeding(None);
    for name in names {
        let info = namespace_info_in(&api.store(|s| s.get("namespaces", None, name).cloned()));
        seed.insert(info.name.clone(), info);
    }
    index.seed(None, seed);
    index.set_live(None, true);
}

fn namespace_info_in(ns: &Option<Value>) -> crate::model::NamespaceInfo {
    let meta = serde_json::from_value(ns.as_ref().unwrap()["metadata"].clone()).unwrap();
    namespace_info(&meta).unwrap()
}

/// team-a opts out while copyrator's create is on its way (with `indexed`, the namespace
/// index is live and its watch delivers the change): the job writes from the older view and
/// queues a follow-up that reads team-a again.
async fn relabelled_while_the_job_wrote(indexed: bool) -> FakeApi {
    let api = scene();
    let ctx = context(&api);
    if indexed {
        index_namespaces(&api, &ctx, &["platform", "team-a"]);
    }
    let cluster = ctx.cluster.clone();
    api.hook(move |req, store| {
        if req.line() == "POST secrets team-a/*" {
            store.put("namespaces", namespace("team-a", json!({})));
            if indexed {
                let info = namespace_info_in(&store.get("namespaces", None, "team-a").cloned());
                cluster.namespace_index().insert(info.name.clone(), info);
            }
        }
        Step::Continue
    });
    assert_eq!(run(&ctx, &source_job()).await.unwrap(), Outcome::Done);

    assert!(
        copy_in(&api, "team-a").is_some(),
        "written from the older view"
    );
    assert!(
        queued(&ctx).contains(&(JobKey::Namespace("team-a".into()), Trigger::FollowUp)),
        "a follow-up reads the namespace again: {:?}",
        queued(&ctx)
    );
    api
}

#[tokio::test]
async fn a_namespace_relabelled_while_the_job_wrote_gets_a_job_of_its_own() {
    relabelled_while_the_job_wrote(false).await;
}

#[tokio::test]
async fn the_post_write_recheck_reads_the_namespace_index_and_follows_a_relabel_it_holds() {
    let api = relabelled_while_the_job_wrote(true).await;
    let namespace_reads: Vec<String> = api
        .lines()
        .into_iter()
        .filter(|l| l.contains(" namespaces"))
        .collect();
    assert!(
        namespace_reads.is_empty(),
        "namespaces came from the index, before and after the write: {namespace_reads:?}"
    );
}

fn copy_rule() -> Value {
    json!({
        "apiVersion": "copyrator.io/v1alpha1", "kind": "CopyRule",
        "metadata": {"name": "registry"},
        "spec": {
            "kind": "Secret", "sourceNamespace": "platform", "sourceName": "registry",
            "namespaceSelector": {"matchLabels": {"registry": "enabled"}}
        }
    })
}

fn rule_job() -> Job {
    Job::new(JobKey::Rule("registry".into()), Trigger::Admission)
}

#[tokio::test]
async fn a_rule_status_is_written_on_the_version_it_was_computed_from() {
    let api = scene();
    api.store(|s| s.put("copyrules", copy_rule()));
    let ctx = context(&api);
    assert_eq!(run(&ctx, &rule_job()).await.unwrap(), Outcome::Done);

    let rule = api.store(|s| s.get("copyrules", None, "registry").cloned().unwrap());
    let ready = rule["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .cloned()
        .unwrap();
    assert_eq!(ready["status"], "True", "{rule:#}");
    let patch = api
        .requests()
        .into_iter()
        .find(|r| r.line() == "PATCH copyrules/status -/registry")
        .expect("status written");
    assert!(
        patch.body["metadata"]["resourceVersion"].is_string(),
        "preconditioned: {}",
        patch.body
    );
    assert!(ctx.caches.written_status.contains_key("registry"));
}

#[tokio::test]
async fn a_rule_status_that_lost_a_race_is_not_cached_and_the_rule_is_synced_again() {
    let api = scene();
    api.store(|s| s.put("copyrules", copy_rule()));
    // The rule is edited between copyrator's read and its status write.
    api.hook(|req, store| {
        if req.line() == "PATCH copyrules/status -/registry" {
            let mut rule = store.get("copyrules", None, "registry").cloned().unwrap();
            rule["spec"]["excludeNamespaces"] = json!(["sandbox"]);
            store.put("copyrules", rule);
        }
        Step::Continue
    });
    let ctx = context(&api);
    assert_eq!(run(&ctx, &rule_job()).await.unwrap(), Outcome::Done);

    let rule = api.store(|s| s.get("copyrules", None, "registry").cloned().unwrap());
    assert!(rule.get("status").is_none(), "the stale status was refused");
    assert!(!ctx.caches.written_status.contains_key("registry"));
    assert!(
        queued(&ctx).contains(&(JobKey::Rule("registry".into()), Trigger::FollowUp)),
        "{:?}",
        queued(&ctx)
    );
}

/// A copy in `ns` of the source in `platform`, made by `rule` (the value of its rule mark), as
/// a metadata LIST shows it.
fn copy_meta(ns: &str, rule: &str) -> crate::model::Meta {
    serde_json::from_value(json!({
        "name": "registry", "namespace": ns, "resourceVersion": "7",
        "labels": {
            marks::MANAGED_BY_LABEL: marks::MANAGED_BY_VALUE,
            marks::SOURCE_UID_LABEL: "uid-1",
        },
        "annotations": {
            marks::SOURCE_ANNOTATION: "platform/registry",
            marks::RULE_ANNOTATION: rule,
            marks::CONTENT_HASH_ANNOTATION: "h",
        },
    }))
    .unwrap()
}

/// Seeds the copy index with `copies` (Secrets) and marks it live, as its watches do.
fn index_copies(ctx: &Context, copies: Vec<crate::model::Meta>) {
    let index = ctx.cluster.copy_index();
    for kind in Kind::all() {
        let mut seed = index.seeding(kind, None);
        if kind == Kind::Secret {
            for meta in copies.iter().cloned() {
                seed.insert(index.item(kind, meta).unwrap());
            }
        }
        index.seed(kind, None, seed);
        index.set_live(kind, None, true);
    }
}

/// A review of a CopyRule that does not exist (a forged DELETE, or a CREATE another webhook
/// denied): its job reads the rule, asks the copy index whether any copy carries its mark,
/// and stops; no LIST of the rules, no walk of every copy.
#[tokio::test]
async fn the_job_of_a_rule_that_does_not_exist_and_owns_no_copy_reads_once() {
    let api = scene();
    let ctx = context(&api);
    let ghost = Job::new(JobKey::Rule("ghost".into()), Trigger::Admission).full_scan();
    index_copies(&ctx, vec![copy_meta("team-a", "inline")]);
    assert_eq!(run(&ctx, &ghost).await.unwrap(), Outcome::Done);
    assert_eq!(api.lines(), ["GET copyrules -/ghost"]);

    // A copy of it remains (the rule was deleted): the job looks for its copies.
    index_copies(&ctx, vec![copy_meta("team-a", "copyrule/ghost")]);
    assert_eq!(run(&ctx, &ghost).await.unwrap(), Outcome::Done);
    assert_eq!(count(&api, "LIST copyrules -/*"), 1, "{:#?}", api.lines());
}

/// The same for a source: a review of a Secret that does not exist costs one read.
#[tokio::test]
async fn the_job_of_a_source_that_does_not_exist_and_has_no_copy_reads_once() {
    let api = scene();
    let ctx = context(&api);
    index_copies(&ctx, vec![copy_meta("team-a", "inline")]);
    let ghost = ObjectKey::new(Kind::Secret, "platform", "ghost");
    let job = Job::new(JobKey::Source(ghost), Trigger::Admission);
    assert_eq!(run(&ctx, &job).await.unwrap(), Outcome::Done);
    assert_eq!(api.lines(), ["GET secrets platform/ghost"]);
}

#[tokio::test]
async fn a_job_whose_admitted_change_is_not_visible_yet_reads_once_and_writes_nothing() {
    let api = scene();
    let rv = api.store(|s| {
        s.get("secrets", Some("platform"), "registry").unwrap()["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string()
    });
    let ctx = context(&api);
    // Admitted: an update of the version still stored (the write has not landed yet).
    let job = source_job().awaiting(Awaited::ChangedFrom(rv));
    assert_eq!(run(&ctx, &job).await.unwrap(), Outcome::NotPersisted);
    assert_eq!(api.lines(), ["GET secrets platform/registry"]);
}

#[tokio::test]
async fn an_unreadable_source_skips_its_copies_and_gets_a_job_of_its_own() {
    let api = scene();
    // The source's payload cannot be read (its metadata can: the lists work).
    api.hook(|req, _| {
        if req.line() == "GET secrets platform/registry" {
            let mut busy = status("not-found", "registry");
            busy["code"] = 503.into();
            busy["reason"] = "ServiceUnavailable".into();
            return Step::Answer(503, busy);
        }
        Step::Continue
    });
    let ctx = context(&api);
    let job = Job::new(JobKey::Namespace("team-a".into()), Trigger::Reconciler);
    assert_eq!(run(&ctx, &job).await.unwrap(), Outcome::Done);

    assert!(copy_in(&api, "team-a").is_none());
    assert!(
        api.lines().iter().all(|l| !l.starts_with("POST secrets")),
        "{:#?}",
        api.lines()
    );
    assert!(
        queued(&ctx).contains(&(JobKey::Source(source_key()), Trigger::FollowUp)),
        "{:?}",
        queued(&ctx)
    );
    let unreadable = ctx
        .metrics
        .unreadable
        .get_or_create(&WhatLabels { what: "source" })
        .get();
    assert_eq!(unreadable, 1);
}

/// A source's payload read by one job serves the next job that lists the source at the same
/// resourceVersion: no second GET of it. A source changed between that LIST and the write is
/// still followed: the check after writing reads it fresh and queues its source job.
#[tokio::test]
async fn a_source_payload_read_once_serves_the_next_job_and_a_change_is_still_followed() {
    let api = scene();
    let ctx = context(&api);
    assert_eq!(run(&ctx, &source_job()).await.unwrap(), Outcome::Done);
    assert!(copy_in(&api, "team-a").is_some());
    let reads = |api: &FakeApi| count(api, "GET secrets platform/registry");

    // team-b opts in: its namespace job writes the copy without reading the payload again
    // (the one read left is the metadata check after writing).
    api.store(|s| {
        s.put(
            "namespaces",
            namespace("team-b", json!({"registry": "enabled"})),
        )
    });
    let before = reads(&api);
    let job = Job::new(JobKey::Namespace("team-b".into()), Trigger::Reconciler);
    assert_eq!(run(&ctx, &job).await.unwrap(), Outcome::Done);
    let copy = copy_in(&api, "team-b").expect("the copy");
    assert_eq!(copy["data"]["password"], PASSWORD);
    assert_eq!(reads(&api) - before, 1, "{:#?}", api.lines());

    // team-c opts in, and the source changes while its copy is on its way: written from the
    // version listed, then followed.
    api.store(|s| {
        s.put(
            "namespaces",
            namespace("team-c", json!({"registry": "enabled"})),
        )
    });
    api.hook(|req, store| {
        if req.line() == "POST secrets team-c/*" {
            store.put("secrets", source("bmV3")); // "new"
        }
        Step::Continue
    });
    let job = Job::new(JobKey::Namespace("team-c".into()), Trigger::Reconciler);
    assert_eq!(run(&ctx, &job).await.unwrap(), Outcome::Done);
    assert!(
        queued(&ctx).contains(&(JobKey::Source(source_key()), Trigger::FollowUp)),
        "the changed source is synced again: {:?}",
        queued(&ctx)
    );
}

/// A full resync plans and writes a chunk of namespaces at a time (SPEC §5): in chunks of
/// two it makes exactly the writes, and leaves exactly the copies, that one plan of the whole
/// cluster does: copies created, updated and deleted, and an object copyrator does not own
/// left as it is, in namespaces spread over several chunks.
#[tokio::test]
async fn a_resync_planned_chunk_by_chunk_writes_what_one_plan_writes() {
    async fn resynced(chunk: usize) -> (FakeApi, Vec<String>) {
        let api = scene();
        api.store(|s| {
            for i in 0..7 {
                let labels = if [0, 1, 2, 4, 6].contains(&i) {
                    json!({"registry": "enabled"})
                } else {
                    json!({})
                };
                s.put("namespaces", namespace(&format!("team-{i}"), labels));
            }
        });
        let ctx = context(&api);
        assert_eq!(run(&ctx, &source_job()).await.unwrap(), Outcome::Done);
        // Then the cluster moves on: team-2 opts out, team-3 opts in, the source changes,
        // and team-4's copy gives way to an object of someone else's.
        api.store(|s| {
            s.put("namespaces", namespace("team-2", json!({})));
            s.put(
                "namespaces",
                namespace("team-3", json!({"registry": "enabled"})),
            );
            s.put("secrets", source("bmV3")); // "new"
            s.remove("secrets", Some("team-4"), "registry");
            s.put(
                "secrets",
                json!({"apiVersion": "v1", "kind": "Secret",
                       "metadata": {"name": "registry", "namespace": "team-4"},
                       "data": {"mine": "eA=="}}),
            );
        });
        let before = api.lines().len();
        let mut ctx = context(&api);
        ctx.settings.resync_chunk = chunk;
        let job = Job::new(JobKey::Resync, Trigger::Reconciler);
        run(&ctx, &job).await.unwrap();
        let mut writes: Vec<String> = api.lines()[before..]
            .iter()
            .filter(|l| !l.starts_with("GET") && !l.starts_with("LIST"))
            .filter(|l| !l.contains("events"))
            .cloned()
            .collect();
        writes.sort();
        (api, writes)
    }
    let (chunked, chunked_writes) = resynced(2).await;
    let (whole, whole_writes) = resynced(10_000).await;
    assert_eq!(chunked_writes, whole_writes);
    for expected in [
        "POST secrets team-3/*",
        "PUT secrets team-0/registry",
        "PUT secrets team-6/registry",
        "DELETE secrets team-2/registry",
    ] {
        assert!(
            chunked_writes.iter().any(|w| w == expected),
            "{expected}: {chunked_writes:#?}"
        );
    }
    for i in 0..7 {
        let ns = format!("team-{i}");
        let data = |api: &FakeApi| copy_in(api, &ns).map(|c| c["data"].clone());
        assert_eq!(data(&chunked), data(&whole), "{ns}");
    }
    assert_eq!(
        copy_in(&chunked, "team-4").unwrap()["data"]["mine"],
        "eA==",
        "never overwritten"
    );
    assert_eq!(
        copy_in(&chunked, "team-3").unwrap()["data"]["password"],
        "bmV3"
    );
}
