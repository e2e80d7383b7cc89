//! The order of [`STEPS`], as invariants: what each step must find done when it runs. Each
//! test feeds events to a dispatcher (no I/O) and looks at the indexes, the Pod gate's memory,
//! the waiters and the queue just before every step; swapping two steps fails one of them.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use futures::FutureExt;
use tokio::sync::{Notify, watch};

use super::*;
use crate::{
    freshness::{feed::Watched, ready::Ready, waiters::Waiters},
    model::Kind,
    queue::WorkQueue,
};

struct Rig {
    dispatcher: Dispatcher,
    indexes: Arc<Indexes>,
    ready: Arc<ReadyIndex>,
    waiters: Arc<Waiters>,
    queue: Arc<WorkQueue>,
    rules_changed: Arc<Notify>,
    _leading: watch::Sender<bool>,
}

/// A dispatcher on the leading replica with every feed up and every index seeded empty.
fn rig() -> Rig {
    let indexes = Arc::new(Indexes::default());
    let queue = WorkQueue::new(100);
    let metrics = Arc::new(Metrics::new());
    let waiters = Waiters::new(Arc::clone(&queue), Arc::clone(&metrics));
    let ready = Arc::new(ReadyIndex::new(100));
    let rules_changed = Arc::new(Notify::new());
    let (leading_tx, leading) = watch::channel(true);
    let dispatcher = Dispatcher::new(
        Arc::clone(&indexes),
        Arc::new(Policy::default()),
        Arc::clone(&waiters),
        Arc::clone(&ready),
        Work {
            queue: Arc::clone(&queue),
            leading,
        },
        Arc::clone(&rules_changed),
        metrics,
    );
    for feed in Feed::all() {
        let seeding = dispatcher.seeding(feed, None);
        dispatcher.seeded(seeding);
        dispatcher.up(feed, None);
    }
    Rig {
        dispatcher,
        indexes,
        ready,
        waiters,
        queue,
        rules_changed,
        _leading: leading_tx,
    }
}

/// What `look` finds just before each step, from now on.
type Looks<S> = Arc<Mutex<Vec<(Step, S)>>>;

fn probe<S: Send + 'static>(
    dispatcher: &Dispatcher,
    look: impl Fn() -> S + Send + 'static,
) -> Looks<S> {
    let looks: Looks<S> = Arc::default();
    let into = Arc::clone(&looks);
    *dispatcher.probe.lock().unwrap() = Some(Box::new(move |step| {
        into.lock().unwrap().push((step, look()));
    }));
    looks
}

/// What was found just before `step` (of the one event probed).
fn before<S: Clone>(looks: &Looks<S>, step: Step) -> S {
    let looks = looks.lock().unwrap();
    let found: Vec<_> = looks.iter().filter(|(s, _)| *s == step).collect();
    assert_eq!(found.len(), 1, "{step:?} taken once");
    found[0].1.clone()
}

fn labels(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

fn namespace(name: &str, rv: &str, team: &str) -> Meta {
    Meta {
        name: Some(name.into()),
        resource_version: Some(rv.into()),
        labels: labels(&[("team", team)]),
        ..Default::default()
    }
}

fn source(ns: &str, name: &str, rv: &str) -> Meta {
    Meta {
        name: Some(name.into()),
        namespace: Some(ns.into()),
        uid: Some(format!("uid-{name}")),
        resource_version: Some(rv.into()),
        labels: labels(&[(marks::SOURCE_LABEL, "true")]),
        annotations: labels(&[(marks::NAMESPACE_SELECTOR_ANNOTATION, "team=a")]),
        ..Default::default()
    }
}

fn copy(ns: &str, name: &str, rv: &str) -> Meta {
    Meta {
        name: Some(name.into()),
        namespace: Some(ns.into()),
        resource_version: Some(rv.into()),
        labels: labels(&[
            (marks::MANAGED_BY_LABEL, marks::MANAGED_BY_VALUE),
            (marks::SOURCE_UID_LABEL, "uid-app"),
        ]),
        annotations: labels(&[(marks::SOURCE_ANNOTATION, "platform/app")]),
        ..Default::default()
    }
}

/// A copy, as the copies watch's seeding LIST found it.
fn listed_copy(rig: &Rig, meta: Meta) {
    let feed = Feed::Copies(Kind::Secret);
    let mut seeding = rig.dispatcher.seeding(feed, None);
    rig.dispatcher.listed(&mut seeding, meta);
    rig.dispatcher.seeded(seeding);
    assert_eq!(
        rig.queue.depth(),
        0,
        "a listed copy no one edited needs nothing"
    );
}

/// `namespace` known settled by the Pod gate.
fn settled(rig: &Rig, namespace: &str) {
    let since = rig.ready.begin();
    assert!(rig.ready.record(namespace, since, Ready::default()));
}

#[test]
fn a_namespace_event_reaches_the_index_early_reads_and_pod_gate_before_its_waiters_wake() {
    let rig = rig();
    settled(&rig, "team-a");
    let prefetch = &rig.waiters.prefetch;
    let _ticket = prefetch.start("team-a", || true).expect("an early read");
    let waiting = Watched::Namespace("team-a".into());
    rig.waiters
        .register(&waiting, &JobKey::Namespace("team-a".into()));
    let (ix, ready, waiters) = (
        Arc::clone(&rig.indexes),
        Arc::clone(&rig.ready),
        Arc::clone(&rig.waiters),
    );
    let looks = probe(&rig.dispatcher, move || {
        let team = ix
            .namespaces
            .peek(&"team-a".to_string(), |n| {
                n.labels.get("team").map(str::to_string)
            })
            .flatten();
        (
            team,
            waiters.prefetch.seen("team-a").is_some(),
            ready.get("team-a").is_some(),
            waiters.len(),
        )
    });
    rig.dispatcher.event(
        Feed::Namespaces,
        Change::Added,
        &namespace("team-a", "7", "a"),
    );

    // (label in the index, early reads told, still settled for the Pod gate, jobs waiting)
    assert_eq!(before(&looks, Step::Index), (None, false, true, 1));
    assert_eq!(
        before(&looks, Step::EarlyReads),
        (Some("a".into()), false, true, 1),
        "the index learns the namespace first"
    );
    assert_eq!(
        before(&looks, Step::PodGateMemory),
        (Some("a".into()), true, true, 1),
        "early reads learn of it before anything else moves"
    );
    assert_eq!(
        before(&looks, Step::Waiters),
        (Some("a".into()), true, false, 1),
        "a woken job finds the index current and the Pod gate no longer trusting old reads"
    );
    assert_eq!(
        before(&looks, Step::Work),
        (Some("a".into()), true, false, 0),
        "its job woken"
    );
}

#[test]
fn a_source_event_is_in_the_index_and_forgets_settled_namespaces_before_jobs_wake() {
    let rig = rig();
    settled(&rig, "team-a");
    let key = ObjectKey::new(Kind::Secret, "platform", "app");
    rig.waiters
        .register(&Watched::Object(key.clone()), &JobKey::Source(key.clone()));
    let (ix, ready, waiters) = (
        Arc::clone(&rig.indexes),
        Arc::clone(&rig.ready),
        Arc::clone(&rig.waiters),
    );
    let k = key.clone();
    let looks = probe(&rig.dispatcher, move || {
        (
            ix.sources
                .of(Kind::Secret)
                .peek(&k, |s| s.resource_version.clone()),
            ready.get("team-a").is_some(),
            waiters.len(),
        )
    });
    let feed = Feed::Sources(Kind::Secret);
    rig.dispatcher
        .event(feed, Change::Added, &source("platform", "app", "3"));

    assert_eq!(before(&looks, Step::Index), (None, true, 1));
    assert_eq!(
        before(&looks, Step::PodGateMemory),
        (Some("3".into()), true, 1)
    );
    assert_eq!(
        before(&looks, Step::Waiters),
        (Some("3".into()), false, 1),
        "the CopyRules are not known: every namespace's answer is forgotten before a job wakes"
    );
    assert_eq!(before(&looks, Step::Work), (Some("3".into()), false, 0));
}

#[test]
fn a_source_that_lost_its_opt_in_label_leaves_the_index() {
    let rig = rig();
    let feed = Feed::Sources(Kind::Secret);
    let key = ObjectKey::new(Kind::Secret, "platform", "app");
    rig.dispatcher
        .event(feed, Change::Added, &source("platform", "app", "3"));
    assert!(
        rig.indexes
            .sources
            .of(Kind::Secret)
            .peek(&key, |_| ())
            .is_some()
    );
    let mut opted_out = source("platform", "app", "4");
    opted_out.labels = labels(&[(marks::SOURCE_LABEL, "false")]);
    rig.dispatcher.event(feed, Change::Modified, &opted_out);
    assert!(
        rig.indexes
            .sources
            .of(Kind::Secret)
            .peek(&key, |_| ())
            .is_none()
    );
}

#[test]
fn a_copy_deleted_by_someone_else_is_gone_from_the_index_before_its_restore_is_queued() {
    let rig = rig();
    let feed = Feed::Copies(Kind::Secret);
    listed_copy(&rig, copy("team-a", "app", "5"));
    settled(&rig, "team-a");
    let (ix, ready, queue) = (
        Arc::clone(&rig.indexes),
        Arc::clone(&rig.ready),
        Arc::clone(&rig.queue),
    );
    let looks = probe(&rig.dispatcher, move || {
        let held = ix
            .copies
            .copies_in(Kind::Secret, "team-a")
            .map(|v| v.len())
            .unwrap_or_default();
        (held, ready.get("team-a").is_some(), queue.depth())
    });
    rig.dispatcher
        .event(feed, Change::Deleted, &copy("team-a", "app", "6"));

    assert_eq!(before(&looks, Step::Index), (1, true, 0));
    assert_eq!(before(&looks, Step::Waiters), (0, false, 0));
    assert_eq!(
        before(&looks, Step::Work),
        (0, false, 0),
        "the restore job must find the copy gone, and the Pod gate must not trust it"
    );
    assert_eq!(
        before(&looks, Step::Listeners),
        (0, false, 1),
        "restore queued"
    );
}

#[test]
fn copyrators_own_delete_is_not_restored_and_keeps_the_pod_gates_memory() {
    let rig = rig();
    let feed = Feed::Copies(Kind::Secret);
    listed_copy(&rig, copy("team-a", "app", "5"));
    settled(&rig, "team-a");
    let key = ObjectKey::new(Kind::Secret, "team-a", "app");
    rig.indexes.copies.deleting(&key);
    rig.dispatcher
        .event(feed, Change::Deleted, &copy("team-a", "app", "6"));
    assert_eq!(rig.queue.depth(), 0, "nothing to restore");
    assert!(rig.ready.get("team-a").is_some());
}

#[test]
fn a_copy_rule_event_forgets_the_rules_before_the_selector_watches_hear_of_it() {
    let rig = rig();
    let scope = &rig.indexes.copy_rules;
    scope.listed(scope.listing(), &[]);
    settled(&rig, "team-a");
    let (ix, ready, rules_changed) = (
        Arc::clone(&rig.indexes),
        Arc::clone(&rig.ready),
        Arc::clone(&rig.rules_changed),
    );
    let looks = probe(&rig.dispatcher, move || {
        (
            ix.copy_rules.rules().is_some(),
            ready.get("team-a").is_some(),
            rules_changed.notified().now_or_never().is_some(),
        )
    });
    let rule = Meta {
        name: Some("ca".into()),
        resource_version: Some("9".into()),
        ..Default::default()
    };
    rig.dispatcher.event(Feed::CopyRules, Change::Added, &rule);

    assert_eq!(before(&looks, Step::Index), (true, true, false));
    assert_eq!(before(&looks, Step::Waiters), (false, false, false));
    assert_eq!(
        before(&looks, Step::Listeners),
        (false, false, false),
        "listeners are told last, when the rules are already forgotten"
    );
    assert!(
        rig.rules_changed.notified().now_or_never().is_some(),
        "and told"
    );
}

#[test]
fn a_seeding_list_answers_only_once_in_and_what_it_lacks_is_handled_as_deleted() {
    let rig = rig();
    let feed = Feed::Namespaces;
    rig.dispatcher
        .event(feed, Change::Added, &namespace("old", "1", "a"));
    rig.waiters.register(
        &Watched::Namespace("old".into()),
        &JobKey::Namespace("old".into()),
    );
    rig.dispatcher.down(feed, None, &Ended::Expired);
    assert_eq!(rig.indexes.namespaces.read(|_| ()), None, "stops answering");
    assert!(rig.waiters.is_empty(), "waiting jobs look again");
    rig.waiters.register(
        &Watched::Namespace("old".into()),
        &JobKey::Namespace("old".into()),
    );

    let mut seeding = rig.dispatcher.seeding(feed, None);
    rig.dispatcher
        .listed(&mut seeding, namespace("new", "2", "b"));
    assert_eq!(
        rig.indexes.namespaces.read(|_| ()),
        None,
        "not before the LIST is in"
    );
    rig.dispatcher.seeded(seeding);
    rig.dispatcher.up(feed, None);
    let names = rig
        .indexes
        .namespaces
        .read(|by_name| {
            let mut v: Vec<_> = by_name.keys().cloned().collect();
            v.sort();
            v
        })
        .expect("answers");
    assert_eq!(names, ["new"]);
    assert!(
        rig.waiters.is_empty(),
        "the job of a namespace the LIST lacks woke"
    );
}

#[test]
fn a_watch_that_timed_out_keeps_its_index_one_that_failed_does_not() {
    let rig = rig();
    let feed = Feed::Namespaces;
    rig.dispatcher
        .event(feed, Change::Added, &namespace("a", "1", "a"));
    settled(&rig, "a");
    rig.dispatcher.down(feed, None, &Ended::Timeout);
    assert!(rig.indexes.namespaces.answers());
    assert!(rig.ready.get("a").is_some(), "it missed nothing");
    assert!(
        !rig.waiters.is_live(feed),
        "but waiting jobs poll until it is back"
    );
    rig.dispatcher.up(feed, None);
    rig.dispatcher
        .down(feed, None, &Ended::Failed("reset".into()));
    assert!(!rig.indexes.namespaces.answers());
    assert!(rig.ready.get("a").is_none(), "events may have been missed");
}

#[test]
fn a_replica_that_does_not_lead_queues_no_restore() {
    let rig = rig();
    rig._leading.send_replace(false);
    let feed = Feed::Copies(Kind::Secret);
    listed_copy(&rig, copy("team-a", "app", "5"));
    rig.dispatcher
        .event(feed, Change::Deleted, &copy("team-a", "app", "6"));
    assert_eq!(rig.queue.depth(), 0);
}

/// The jobs in the queue, by key and trigger.
fn queued(rig: &Rig) -> Vec<(JobKey, Trigger)> {
    rig.queue
        .snapshot()
        .into_iter()
        .map(|j| (j.key, j.trigger))
        .collect()
}

#[test]
fn a_namespace_change_no_admitted_job_waited_for_queues_its_job() {
    let rig = rig();
    let feed = Feed::Namespaces;
    rig.dispatcher
        .event(feed, Change::Added, &namespace("team-a", "1", "a"));
    let job = (JobKey::Namespace("team-a".into()), Trigger::Watch);
    assert_eq!(
        queued(&rig),
        std::slice::from_ref(&job),
        "created: the webhooks missed it"
    );

    let rig = rig_with_namespace("team-a");
    rig.dispatcher
        .event(feed, Change::Modified, &namespace("team-a", "2", "a"));
    assert_eq!(queued(&rig), [], "nothing copyrator reads changed");
    rig.dispatcher
        .event(feed, Change::Modified, &namespace("team-a", "3", "b"));
    assert_eq!(queued(&rig), std::slice::from_ref(&job), "relabelled");

    let rig = rig_with_namespace("team-a");
    let mut consenting = namespace("team-a", "2", "a");
    consenting.annotations = labels(&[(marks::ACCEPT_FROM_ANNOTATION, "platform")]);
    rig.dispatcher.event(feed, Change::Modified, &consenting);
    assert_eq!(queued(&rig), [job], "consent changed");

    let rig = rig_with_namespace("team-a");
    rig.dispatcher
        .event(feed, Change::Deleted, &namespace("team-a", "2", "a"));
    assert_eq!(queued(&rig), [], "gone with its copies");
}

/// A leading rig whose namespace index holds `name` (labelled team=a), as listed.
fn rig_with_namespace(name: &str) -> Rig {
    let rig = rig();
    let mut seeding = rig.dispatcher.seeding(Feed::Namespaces, None);
    rig.dispatcher
        .listed(&mut seeding, namespace(name, "1", "a"));
    rig.dispatcher.seeded(seeding);
    assert_eq!(queued(&rig), [], "a listed namespace asks for nothing");
    rig
}

#[test]
fn a_change_an_admitted_job_waited_for_queues_nothing_more() {
    let rig = rig();
    let key = ObjectKey::new(Kind::Secret, "platform", "app");
    let admitted = JobKey::Source(key.clone());
    rig.waiters.register(&Watched::Object(key), &admitted);
    rig.dispatcher.event(
        Feed::Sources(Kind::Secret),
        Change::Modified,
        &source("platform", "app", "3"),
    );
    assert_eq!(queued(&rig), [], "the admitted job covers it");
    let other = JobKey::Source(ObjectKey::new(Kind::Secret, "platform", "other"));
    rig.queue.push(Job::new(other.clone(), Trigger::Admission));
    rig.dispatcher.event(
        Feed::Sources(Kind::Secret),
        Change::Modified,
        &source("platform", "other", "4"),
    );
    rig.waiters.register(
        &Watched::Namespace("team-a".into()),
        &JobKey::Namespace("team-a".into()),
    );
    rig.dispatcher.event(
        Feed::Namespaces,
        Change::Added,
        &namespace("team-a", "4", "a"),
    );
    assert_eq!(
        queued(&rig),
        [(other, Trigger::Admission)],
        "an admitted job yet to run covers its change too"
    );
    let triggered = |feed: Feed| {
        rig.dispatcher
            .metrics
            .watch_triggered
            .get_or_create(&FeedLabels { feed: feed.name() })
            .get()
    };
    assert_eq!(triggered(Feed::Sources(Kind::Secret)), 0);
    assert_eq!(triggered(Feed::Namespaces), 0);
}

#[test]
fn every_source_event_no_admitted_job_waited_for_queues_the_sources_job() {
    let rig = rig();
    let feed = Feed::Sources(Kind::Secret);
    let job = (
        JobKey::Source(ObjectKey::new(Kind::Secret, "platform", "app")),
        Trigger::Watch,
    );
    for (change, rv) in [
        (Change::Added, "1"),
        (Change::Modified, "2"),
        (Change::Deleted, "3"),
    ] {
        rig.dispatcher
            .event(feed, change, &source("platform", "app", rv));
        assert_eq!(
            queued(&rig),
            std::slice::from_ref(&job),
            "{change:?} (coalesced)"
        );
    }
}

/// CopyRule `ca` at resourceVersion `rv` and `generation` (its spec's version).
fn rule(rv: &str, generation: i64) -> Meta {
    Meta {
        name: Some("ca".into()),
        resource_version: Some(rv.into()),
        generation: Some(generation),
        ..Default::default()
    }
}

#[test]
fn a_copy_rules_spec_change_queues_its_job_its_status_does_not() {
    let rig = rig();
    let job = |rig: &Rig| -> Vec<(JobKey, Trigger, bool)> {
        rig.queue
            .snapshot()
            .into_iter()
            .map(|j| (j.key, j.trigger, j.full_scan))
            .collect()
    };
    let expected = [(JobKey::Rule("ca".into()), Trigger::Watch, true)];
    let mut seeding = rig.dispatcher.seeding(Feed::CopyRules, None);
    rig.dispatcher.listed(&mut seeding, rule("1", 1));
    rig.dispatcher.seeded(seeding);
    assert_eq!(job(&rig), [], "listed");
    rig.dispatcher
        .event(Feed::CopyRules, Change::Modified, &rule("2", 1));
    assert_eq!(job(&rig), [], "a status write: same generation");
    rig.dispatcher
        .event(Feed::CopyRules, Change::Modified, &rule("3", 2));
    assert_eq!(job(&rig), expected, "its spec changed");

    let rig2 = rig_after_relist_without_the_rule();
    assert_eq!(job(&rig2), expected, "deleted while the watch was away");
}

#[test]
fn a_copy_rules_status_write_keeps_the_pod_gates_memory_its_spec_change_does_not() {
    let rig = rig();
    let mut seeding = rig.dispatcher.seeding(Feed::CopyRules, None);
    rig.dispatcher.listed(&mut seeding, rule("1", 1));
    rig.dispatcher.seeded(seeding);
    settled(&rig, "team-a");
    rig.dispatcher
        .event(Feed::CopyRules, Change::Modified, &rule("2", 1));
    assert!(
        rig.ready.get("team-a").is_some(),
        "a status write: same generation"
    );
    rig.dispatcher
        .event(Feed::CopyRules, Change::Modified, &rule("3", 2));
    assert!(rig.ready.get("team-a").is_none(), "its spec changed");
    settled(&rig, "team-a");
    rig.dispatcher
        .event(Feed::CopyRules, Change::Deleted, &rule("4", 2));
    assert!(rig.ready.get("team-a").is_none(), "deleted");
}

#[test]
fn each_feed_of_rules_relists_only_its_own_rules() {
    let rig = rig();
    let namespaced = Meta {
        namespace: Some("team-a".into()),
        ..rule("1", 1)
    };
    let mut seeding = rig.dispatcher.seeding(Feed::CopyRules, None);
    rig.dispatcher.listed(&mut seeding, rule("1", 1));
    rig.dispatcher.seeded(seeding);
    let mut seeding = rig.dispatcher.seeding(Feed::NamespacedCopyRules, None);
    rig.dispatcher.listed(&mut seeding, namespaced.clone());
    rig.dispatcher.seeded(seeding);
    assert_eq!(queued(&rig), [], "both listed: nothing gone");
    // Each feed's re-list holds its own rules only: the other's are not gone.
    for feed in [Feed::NamespacedCopyRules, Feed::CopyRules] {
        let mut seeding = rig.dispatcher.seeding(feed, None);
        let meta = match feed {
            Feed::CopyRules => rule("1", 1),
            _ => namespaced.clone(),
        };
        rig.dispatcher.listed(&mut seeding, meta);
        rig.dispatcher.seeded(seeding);
        assert_eq!(queued(&rig), [], "{feed:?} re-listed");
    }
    // The NamespacedCopyRule gone while its watch was away: its job, by its namespaced name.
    let seeding = rig.dispatcher.seeding(Feed::NamespacedCopyRules, None);
    rig.dispatcher.seeded(seeding);
    assert_eq!(
        queued(&rig),
        [(JobKey::Rule("team-a/ca".into()), Trigger::Watch)]
    );
}

fn rig_after_relist_without_the_rule() -> Rig {
    let rig = rig();
    let rule = Meta {
        name: Some("ca".into()),
        generation: Some(1),
        ..Default::default()
    };
    rig.dispatcher.event(Feed::CopyRules, Change::Added, &rule);
    let _ = rig.queue.snapshot();
    // Drain: the ADDED event of a rule not known before asks for its job.
    while rig.queue.depth() > 0 {
        let job = rig.queue.pop().now_or_never().flatten().expect("a job");
        rig.queue.finish(&job.key, crate::queue::Finished::Done);
    }
    rig.dispatcher.down(Feed::CopyRules, None, &Ended::Expired);
    let seeding = rig.dispatcher.seeding(Feed::CopyRules, None);
    rig.dispatcher.seeded(seeding);
    rig
}

#[test]
fn a_source_deleted_while_its_watch_was_away_queues_its_job() {
    let rig = rig();
    let feed = Feed::Sources(Kind::Secret);
    let mut seeding = rig.dispatcher.seeding(feed, None);
    rig.dispatcher
        .listed(&mut seeding, source("platform", "app", "1"));
    rig.dispatcher.seeded(seeding);
    assert_eq!(queued(&rig), [], "a listed source asks for nothing");
    rig.dispatcher.down(feed, None, &Ended::Expired);
    let seeding = rig.dispatcher.seeding(feed, None);
    rig.dispatcher.seeded(seeding);
    assert_eq!(
        queued(&rig),
        [(
            JobKey::Source(ObjectKey::new(Kind::Secret, "platform", "app")),
            Trigger::Watch
        )]
    );
}

#[test]
fn a_replica_that_does_not_lead_queues_no_watch_triggered_job() {
    let rig = rig();
    rig._leading.send_replace(false);
    rig.dispatcher.event(
        Feed::Namespaces,
        Change::Added,
        &namespace("team-a", "1", "a"),
    );
    rig.dispatcher.event(
        Feed::Sources(Kind::Secret),
        Change::Added,
        &source("platform", "app", "1"),
    );
    assert_eq!(queued(&rig), []);
}

/// A dispatcher knowing namespaces `team-a` (team=a) and `team-b` (team=b) and one CopyRule,
/// `web`, copying the ConfigMaps of `platform` labelled `app=web` into team=a.
fn rig_with_selector_rule() -> Rig {
    use crate::copyrule::{CopyRule, CopyRuleSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    let rig = rig();
    for (name, team) in [("team-a", "a"), ("team-b", "b")] {
        rig.dispatcher
            .event(Feed::Namespaces, Change::Added, &namespace(name, "1", team));
    }
    let since = rig.indexes.copy_rules.listing();
    let selector = |k: &str, v: &str| LabelSelector {
        match_labels: Some([(k.to_string(), v.to_string())].into()),
        match_expressions: None,
    };
    let rule = CopyRule::new(
        "web",
        CopyRuleSpec {
            kind: "ConfigMap".into(),
            source_namespace: "platform".into(),
            source_selector: Some(selector("app", "web")),
            namespace_selector: Some(selector("team", "a")),
            ..Default::default()
        },
    );
    rig.indexes.copy_rules.listed(since, &[rule]);
    let since = rig.indexes.namespaced_rules.listing();
    rig.indexes.namespaced_rules.listed(since, &[]);
    while rig.queue.depth() > 0 {
        let job = rig.queue.pop().now_or_never().flatten().expect("a job");
        rig.queue.finish(&job.key, crate::queue::Finished::Done);
    }
    rig
}

/// An object of `platform` matching `web`'s selector, with `opted_in` the opt-in label.
fn selected(rv: &str, opted_in: bool) -> Meta {
    let mut pairs = vec![("app", "web")];
    if opted_in {
        pairs.push((marks::SOURCE_LABEL, "true"));
    }
    Meta {
        name: Some("web-config".into()),
        namespace: Some("platform".into()),
        uid: Some("uid-web".into()),
        resource_version: Some(rv.into()),
        labels: labels(&pairs),
        ..Default::default()
    }
}

#[test]
fn a_new_unlabelled_selector_match_forgets_its_rules_namespaces_and_queues_its_source_job() {
    let rig = rig_with_selector_rule();
    settled(&rig, "team-a");
    settled(&rig, "team-b");
    let ready = Arc::clone(&rig.ready);
    let looks = probe(&rig.dispatcher, move || ready.get("team-a").is_some());
    let feed = Feed::Selected(Kind::ConfigMap);
    rig.dispatcher
        .event(feed, Change::Added, &selected("5", false));
    assert!(
        !before(&looks, Step::Waiters),
        "the Pod gate forgets the rule's namespaces before any job wakes: a Pod admitted \
         before the source's job labels it waits for the new source's copies"
    );
    assert!(
        rig.ready.get("team-b").is_some(),
        "the rule does not reach team-b"
    );
    let key = ObjectKey::new(Kind::ConfigMap, "platform", "web-config");
    assert_eq!(queued(&rig), [(JobKey::Source(key), Trigger::Watch)]);
}

#[test]
fn a_labelled_selector_match_is_the_sources_feeds_and_a_gone_one_queues_its_job() {
    let rig = rig_with_selector_rule();
    let feed = Feed::Selected(Kind::ConfigMap);
    rig.dispatcher
        .event(feed, Change::Modified, &selected("6", true));
    assert!(
        queued(&rig).is_empty(),
        "its changes reach the sources webhook and feed"
    );
    rig.dispatcher
        .event(feed, Change::Deleted, &selected("7", true));
    let key = ObjectKey::new(Kind::ConfigMap, "platform", "web-config");
    assert_eq!(
        queued(&rig),
        [(JobKey::Source(key), Trigger::Watch)],
        "gone (or no longer matching): its copies follow the deletion policy"
    );
}

#[test]
fn a_selector_watch_starting_on_a_new_leader_queues_the_unlabelled_matches_it_lists() {
    let rig = rig_with_selector_rule();
    let feed = Feed::Selected(Kind::ConfigMap);
    let mut seeding = rig.dispatcher.seeding(feed, None);
    rig.dispatcher.listed(&mut seeding, selected("5", false));
    rig.dispatcher.seeded(seeding);
    let key = ObjectKey::new(Kind::ConfigMap, "platform", "web-config");
    assert_eq!(queued(&rig), [(JobKey::Source(key), Trigger::Watch)]);
}
