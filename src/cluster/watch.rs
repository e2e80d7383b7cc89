//! Metadata-only watches that tell waiting jobs their change was persisted ([`crate::pipeline::waiters`])
//! and keep the indexes jobs read instead of LISTs ([`super::index`], [`super::copy_index`]).
//! Each is label-selected where the resource is numerous (sources and copies, never every
//! Secret), so memory stays flat in the number of unrelated objects. A watch starts from a
//! LIST that seeds its index and resumes from the last resourceVersion it saw; when the API
//! server no longer has that version (410), it starts over with a new LIST and wakes every job
//! waiting on its feed, since events may have been missed.

use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Resource,
    api::WatchParams,
    core::{WatchEvent, request::Request},
};
use tokio::sync::{Notify, watch};

use crate::{
    cluster::{Cluster, copy_index::Seen},
    copyrule::CopyRule,
    marks,
    metrics::{FeedLabels, Metrics},
    model::{Kind, Meta, MetaItem, Object, ObjectKey, SourceInfo},
    pipeline::{
        job::{Job, JobKey, Trigger},
        queue::{WorkQueue, enqueue},
        ready::{Reach, ReadyIndex},
        waiters::{Feed, Waiters, Watched},
    },
    plan::{Policy, reach},
    rules::Rule,
};

/// Server-side timeout of one watch request: below the client's read timeout, so a quiet
/// watch ends cleanly and is resumed rather than cut.
const WATCH_SECONDS: u32 = 50;

impl Feed {
    /// The resource, as API-call metrics name it.
    fn resource(self) -> &'static str {
        match self {
            Feed::Namespaces => "namespaces",
            Feed::Sources(kind) | Feed::Copies(kind) => kind.plural(),
            Feed::CopyRules => "copyrules",
        }
    }

    fn url_path(self) -> String {
        match self {
            Feed::Namespaces => Namespace::url_path(&(), None),
            Feed::Sources(kind) | Feed::Copies(kind) => Object::url_path(&kind, None),
            Feed::CopyRules => CopyRule::url_path(&(), None),
        }
    }

    fn label_selector(self) -> Option<&'static str> {
        match self {
            // A copy is never a source (SPEC §9.6): copies do not even enter the index.
            Feed::Sources(_) => Some(marks::OPTED_IN_SELECTOR),
            Feed::Copies(_) => Some(marks::MANAGED_SELECTOR),
            Feed::Namespaces | Feed::CopyRules => None,
        }
    }

    /// What an event's object is, for the waiters.
    fn watched(self, m: &Meta) -> Option<Watched> {
        let name = m.name.clone()?;
        Some(match self {
            Feed::Namespaces => Watched::Namespace(name),
            Feed::CopyRules => Watched::CopyRule(name),
            Feed::Sources(kind) | Feed::Copies(kind) => {
                Watched::Object(ObjectKey::new(kind, m.namespace.clone()?, name))
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Feed::Namespaces => "namespaces",
            Feed::Sources(Kind::Secret) => "source secrets",
            Feed::Sources(Kind::ConfigMap) => "source configmaps",
            Feed::Copies(Kind::Secret) => "copied secrets",
            Feed::Copies(Kind::ConfigMap) => "copied configmaps",
            Feed::CopyRules => "copyrules",
        }
    }
}

/// What keeping an event's object found out (see [`FeedState::keep`]).
#[derive(Default)]
struct Kept {
    /// A copy's ADDED or MODIFIED event: whose it is.
    seen: Option<Seen>,
    /// A source's event: the namespaces it can change.
    reach: Option<Reach>,
}

/// Where copy events that need work go: a copy deleted, or edited by someone else, is queued
/// for restoring by the replica that leads (SPEC §4.4); the others only watch.
#[derive(Clone)]
pub struct CopyEdits {
    pub queue: Arc<WorkQueue>,
    pub leading: watch::Receiver<bool>,
}

/// Starts one watch per feed; they run until `shutdown` fires. `rules_changed` is told about
/// every CopyRule event (see `selectors.rs`); copy events go to `copy_edits`.
#[allow(clippy::too_many_arguments)]
pub fn spawn(
    cluster: &Cluster,
    policy: &Arc<Policy>,
    waiters: &Arc<Waiters>,
    ready: &Arc<ReadyIndex>,
    metrics: &Arc<Metrics>,
    rules_changed: &Arc<Notify>,
    copy_edits: &CopyEdits,
    shutdown: &watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let edited = tokio::spawn(restore_edited_after_writes(
        cluster.clone(),
        copy_edits.clone(),
        Arc::clone(metrics),
        shutdown.clone(),
    ));
    Feed::ALL
        .into_iter()
        .map(|feed| {
            let feed_state = FeedState {
                cluster: cluster.clone(),
                policy: Arc::clone(policy),
                feed,
                waiters: Arc::clone(waiters),
                ready: Arc::clone(ready),
                metrics: Arc::clone(metrics),
                on_event: (feed == Feed::CopyRules).then(|| Arc::clone(rules_changed)),
                copy_edits: matches!(feed, Feed::Copies(_)).then(|| copy_edits.clone()),
            };
            tokio::spawn(run(feed_state, shutdown.clone()))
        })
        .chain([edited])
        .collect()
}

/// A feed, where its events go, and where its state is shown.
struct FeedState {
    cluster: Cluster,
    /// Trust and exclusions, for what a source's event can reach.
    policy: Arc<Policy>,
    feed: Feed,
    waiters: Arc<Waiters>,
    /// Forgets what events may have changed (the Pod gate's memory).
    ready: Arc<ReadyIndex>,
    metrics: Arc<Metrics>,
    /// Told about every event of this feed.
    on_event: Option<Arc<Notify>>,
    /// Copies feeds: where deleted and hand-edited copies are queued.
    copy_edits: Option<CopyEdits>,
}

impl FeedState {
    /// Whether this feed keeps an index of its objects (every feed but CopyRules, whose
    /// jobs read the few CopyRules in full).
    fn keeps(&self) -> bool {
        !matches!(self.feed, Feed::CopyRules)
    }

    /// The feed's index answers (its watch is up) or not (events may be missed).
    fn set_index_live(&self, live: bool) {
        let c = &self.cluster;
        match self.feed {
            Feed::Copies(kind) => c.copy_index().set_live(kind, live),
            Feed::Sources(kind) => c.source_index().of(kind).set_live(live),
            Feed::Namespaces => c.namespace_index().set_live(live),
            Feed::CopyRules => {}
        }
    }

    /// The watch starts over with a new LIST: the index stops answering until then.
    fn unseed(&self) {
        let c = &self.cluster;
        match self.feed {
            Feed::Copies(kind) => c.copy_index().unseed(kind),
            Feed::Sources(kind) => c.source_index().of(kind).unseed(),
            Feed::Namespaces => c.namespace_index().unseed(),
            Feed::CopyRules => {}
        }
    }

    /// An event's object into the feed's index, before anyone waiting on it is woken; what
    /// the event is to this replica (a copy's), and which namespaces it can change (a source's).
    fn keep(&self, meta: &Meta, deleted: bool) -> Kept {
        let c = &self.cluster;
        let rv = meta.resource_version.as_deref();
        let mut kept = Kept::default();
        match (self.feed, deleted) {
            (Feed::Copies(kind), false) => kept.seen = c.copy_index().event(kind, meta.clone()),
            (Feed::Copies(_), true) => {
                if let Some(Watched::Object(key)) = self.feed.watched(meta) {
                    c.copy_index().forget(&key, rv);
                }
            }
            (Feed::Sources(kind), _) => {
                let index = c.source_index().of(kind);
                let Some(Watched::Object(key)) = self.feed.watched(meta) else {
                    return kept;
                };
                // An object that lost its opt-in label is no source any more.
                let opted_in = meta
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(marks::SOURCE_LABEL))
                    .is_some_and(|v| v == "true");
                let before = index.peek(&key, Clone::clone);
                let after = SourceInfo::from_meta(kind, meta)
                    .filter(|_| !deleted && opted_in)
                    .map(|s| self.policy.keep_source(s));
                kept.reach = Some(self.source_reach(before.as_ref(), after.as_ref()));
                match after {
                    Some(info) => index.insert(key, info),
                    None => index.remove(&key, rv),
                }
            }
            (Feed::Namespaces, _) => {
                let index = c.namespace_index();
                match super::reads::namespace_info(meta) {
                    Some(info) if !deleted => index.insert(info.name.clone(), info),
                    _ => {
                        if let Some(name) = &meta.name {
                            index.remove(name, rv);
                        }
                    }
                }
            }
            (Feed::CopyRules, _) => {
                // What the CopyRules were is not known any more (a source's reach).
                c.copy_rule_scope().changed();
                return kept;
            }
        }
        self.show_index_size();
        kept
    }

    /// The namespaces a source's change can reach: where its rules before and after the change
    /// (its inline rule, the CopyRules selecting it) can have copies. Every namespace while
    /// the CopyRules or the namespaces are not known, or when it reaches most of them.
    fn source_reach(&self, before: Option<&SourceInfo>, after: Option<&SourceInfo>) -> Reach {
        let c = &self.cluster;
        let Some(copy_rules) = c.copy_rule_scope().rules() else {
            return Reach::All;
        };
        let mut rules = Vec::new();
        for source in [before, after].into_iter().flatten() {
            if let Ok(Some(mut inline)) = Rule::inline(source) {
                inline.tier = self.policy.trust.inline_tier(&inline.source_namespace);
                rules.push(inline);
            }
            rules.extend(
                copy_rules
                    .iter()
                    .filter(|r| r.selects_source(source))
                    .cloned(),
            );
        }
        if rules.is_empty() {
            return Reach::Nothing;
        }
        let reached = c
            .namespace_index()
            .read(|by_name| (reach(&self.policy, &rules, by_name.values()), by_name.len()));
        match reached {
            Some((names, _)) if names.is_empty() => Reach::Nothing,
            Some((names, all)) if names.len() * 2 <= all => Reach::Namespaces(names),
            _ => Reach::All,
        }
    }

    fn show_index_size(&self) {
        let c = &self.cluster;
        let len = match self.feed {
            Feed::Copies(kind) => c.copy_index().len(kind),
            Feed::Sources(kind) => c.source_index().of(kind).len(),
            Feed::Namespaces => c.namespace_index().len(),
            Feed::CopyRules => return,
        };
        self.metrics
            .index_objects
            .get_or_create(&FeedLabels {
                feed: self.feed.name(),
            })
            .set(len as i64);
    }

    fn set_live(&self, live: bool) {
        self.waiters.set_live(self.feed, live);
        // A watch that timed out resumes where it ended and misses nothing: its index keeps
        // answering meanwhile; it stops when events may have been missed (`run`).
        if live {
            self.set_index_live(true);
        }
        if live {
            self.ready.connected(self.feed);
        }
        self.metrics
            .watch_live
            .get_or_create(&FeedLabels {
                feed: self.feed.name(),
            })
            .set(i64::from(live));
    }
}

async fn run(state: FeedState, mut shutdown: watch::Receiver<bool>) {
    let feed = state.feed;
    let waiters = &state.waiters;
    let mut version = "0".to_string();
    // Feeds with an index start from a LIST that seeds it (see `seed`).
    let mut seeded = false;
    let mut failures = 0u32;
    loop {
        let ended = tokio::select! {
            r = async {
                if state.keeps() && !seeded {
                    match seed(&state).await {
                        Ok(at) => {
                            version = at;
                            seeded = true;
                        }
                        Err(why) => return Ended::Failed(why),
                    }
                }
                watch_once(&state, &mut version).await
            } => r,
            _ = shutdown.changed() => break,
        };
        state.set_live(false);
        if !matches!(ended, Ended::Timeout) {
            state.set_index_live(false);
        }
        match ended {
            Ended::Timeout => {
                failures = 0;
                continue;
            }
            Ended::Expired => {
                // Events since `version` are gone: start over, and let waiters look again.
                state.ready.disconnected(feed);
                state.unseed();
                seeded = false;
                version = "0".into();
                waiters.notify_feed(feed);
                failures = 0;
                continue;
            }
            Ended::Failed(why) => {
                state.ready.disconnected(feed);
                failures += 1;
                if failures == 1 || failures.is_power_of_two() {
                    tracing::warn!(feed = feed.name(), error = %why, failures, "watch failed; waiting jobs poll meanwhile");
                }
            }
        }
        let backoff =
            Duration::from_millis(100 * u64::from(failures.min(300))).min(Duration::from_secs(30));
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.changed() => break,
        }
    }
    state.set_live(false);
    state.set_index_live(false);
    state.ready.disconnected(feed);
}

/// Queues a copy job for a copy deleted or edited by someone else, on the leading replica.
fn restore(edits: &CopyEdits, metrics: &Metrics, key: &ObjectKey) {
    if !*edits.leading.borrow() {
        return;
    }
    tracing::debug!(copy = %key, "copy deleted or edited by someone else");
    enqueue(
        &edits.queue,
        metrics,
        Job::new(JobKey::Copy(key.clone()), Trigger::Watch),
    );
}

/// Queues a job of `source` on the leading replica: a copy of it got new marks from a write
/// this replica did not make (most likely another replica's, for a new version of the
/// source); the source's job finds any copy whose marks do not match the source and restores
/// it. Coalesced: the copies of one fan-out by another replica are one job here.
fn check_source(edits: &CopyEdits, metrics: &Metrics, source: &ObjectKey) {
    if !*edits.leading.borrow() {
        return;
    }
    enqueue(
        &edits.queue,
        metrics,
        Job::new(JobKey::Source(source.clone()), Trigger::Watch),
    );
}

/// Restores the copies found edited by someone else once copyrator's own write of them
/// answered (an event that came while the write was in flight, not its echo).
async fn restore_edited_after_writes(
    cluster: Cluster,
    edits: CopyEdits,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            keys = cluster.copy_index().take_edited() => {
                for key in keys {
                    restore(&edits, &metrics, &key);
                }
            }
            _ = shutdown.changed() => break,
        }
    }
}

enum Ended {
    /// The server ended the watch after its timeout: resume.
    Timeout,
    /// 410 Gone: the version is too old.
    Expired,
    Failed(String),
}

/// Lists a feed's objects (from the API server's watch cache), seeds the feed's index with
/// them, and handles each as the watch would an event: every object as added, and every one
/// the index held that the list no longer has as deleted (a copy: restored, SPEC §4.4).
/// Returns the list's resourceVersion, where the watch starts.
async fn seed(state: &FeedState) -> Result<String, String> {
    let cluster = &state.cluster;
    let feed = state.feed;
    // Each item goes into a fresh index as it is parsed: no list of them is held besides.
    let (gone, at) = match feed {
        Feed::Copies(kind) => {
            let index = cluster.copy_index();
            let mut seed = index.seeding(kind);
            let at = list_kept(state, |m| {
                if let Some(item) = index.item(kind, m) {
                    seed.insert(item);
                }
            })
            .await?;
            (keys_gone(index.seed(kind, seed)), at)
        }
        Feed::Sources(kind) => {
            let index = cluster.source_index().of(kind);
            let mut seed = index.seeding();
            let at = list_kept(state, |m| {
                if let Some(s) = SourceInfo::from_meta(kind, &m) {
                    let s = state.policy.keep_source(s);
                    seed.insert(s.key.clone(), s);
                }
            })
            .await?;
            (keys_gone(index.seed(seed)), at)
        }
        Feed::Namespaces => {
            let index = cluster.namespace_index();
            let mut seed = index.seeding();
            let at = list_kept(state, |m| {
                if let Some(n) = super::reads::namespace_info(&m) {
                    seed.insert(n.name.clone(), n);
                }
            })
            .await?;
            let gone = index
                .seed(seed)
                .into_iter()
                .map(|name| Meta {
                    name: Some(name),
                    ..Default::default()
                })
                .collect();
            (gone, at)
        }
        Feed::CopyRules => return Ok("0".into()),
    };
    if at.is_empty() {
        return Err(format!(
            "the list of {} has no resourceVersion",
            feed.name()
        ));
    }
    for meta in gone {
        on_event(state, &meta, true, Kept::default());
    }
    state.show_index_size();
    Ok(at)
}

/// The feed's LIST (metadata, from the watch cache), every item handled as an ADDED event
/// and then given to `keep`; returns the resourceVersion the list is at.
async fn list_kept(state: &FeedState, mut keep: impl FnMut(Meta)) -> Result<String, String> {
    let feed = state.feed;
    state
        .cluster
        .list_feed(
            feed.resource(),
            feed.url_path(),
            feed.label_selector().unwrap_or_default(),
            |meta| {
                on_event(state, &meta, false, Kept::default());
                keep(meta)
            },
        )
        .await
        .map_err(|e| e.to_string())
}

/// Deleted objects' keys as the metadata an event would carry.
fn keys_gone(keys: Vec<ObjectKey>) -> Vec<Meta> {
    keys.into_iter()
        .map(|key| Meta {
            name: Some(key.name),
            namespace: Some(key.namespace),
            ..Default::default()
        })
        .collect()
}

/// Whether the DELETED event of `meta` is the echo of copyrator's own delete of a copy (which
/// answers for this one event: [`super::copy_index::CopyIndex::own_delete_seen`]).
fn own_delete(state: &FeedState, meta: &Meta) -> bool {
    let Feed::Copies(_) = state.feed else {
        return false;
    };
    match state.feed.watched(meta) {
        Some(Watched::Object(key)) => state.cluster.copy_index().own_delete_seen(&key),
        _ => false,
    }
}

/// What every event of a feed does, before the watch moves on: early reads learn what changed,
/// the Pod gate's memory forgets, waiting jobs wake, and a copy deleted or edited by someone
/// else is queued for restoring. `seen`: what a copy's event is to this replica (`None` for an
/// item of a seeding LIST, which no write of this process can explain).
fn on_event(state: &FeedState, meta: &Meta, deleted: bool, kept: Kept) {
    let Kept { seen, reach } = kept;
    let feed = state.feed;
    // A copy deleted by someone else, or changed by a write this replica did not make while
    // its marks stayed (or under another field manager): not the echo of copyrator's own
    // delete or write. Who wrote is known by the resourceVersions copyrator's own writes
    // returned, not by a field manager's name, which anyone may give. (Who last wrote a
    // deleted copy's fields does not matter: who deleted it does.)
    let foreign = if deleted {
        !own_delete(state, meta)
    } else {
        match &seen {
            Some(Seen::Edited) => true,
            Some(Seen::Own | Seen::Remarked(_)) => false,
            None => meta.edited_by_others,
        }
    };
    // Before anyone is woken: early reads of namespace jobs learn what changed.
    let prefetch = &state.waiters.prefetch;
    match feed {
        Feed::Sources(_) | Feed::CopyRules => prefetch.inputs_changed(),
        Feed::Copies(_) => {
            if let Some(ns) = &meta.namespace {
                prefetch.copy_changed(ns);
            }
        }
        Feed::Namespaces => {
            if let Some(name) = &meta.name {
                prefetch.namespace_event(name, || {
                    (!deleted)
                        .then(|| super::reads::namespace_info(meta))
                        .flatten()
                });
            }
        }
    }
    if let Some(watched) = feed.watched(meta) {
        // copyrator's own copy writes follow a change the index already saw (a source, a
        // namespace, a rule): they change no namespace's answer.
        match (&reach, foreign || !matches!(feed, Feed::Copies(_))) {
            (Some(reach), _) => state.ready.forget(feed, reach),
            (None, true) => state.ready.observe(feed, &watched),
            (None, false) => {}
        }
        state.waiters.notify(&watched);
        if let (Some(edits), Watched::Object(key), true) = (&state.copy_edits, &watched, foreign) {
            restore(edits, &state.metrics, key);
        }
        if let (Some(edits), Some(Seen::Remarked(source))) = (&state.copy_edits, &seen) {
            check_source(edits, &state.metrics, source);
        }
    }
    if let Some(on_event) = &state.on_event {
        on_event.notify_one();
    }
}

async fn watch_once(state: &FeedState, version: &mut String) -> Ended {
    let cluster = &state.cluster;
    let feed = state.feed;
    let wp = WatchParams {
        label_selector: feed.label_selector().map(String::from),
        timeout: Some(WATCH_SECONDS),
        bookmarks: true,
        ..Default::default()
    };
    let request = match Request::new(feed.url_path()).watch_metadata(&wp, version) {
        Ok(r) => r,
        Err(e) => return Ended::Failed(e.to_string()),
    };
    let stream = match cluster.watch_events::<MetaItem>(request).await {
        Ok(s) => s,
        Err(e) if e.code() == 410 => return Ended::Expired,
        Err(e) => return Ended::Failed(e.to_string()),
    };
    state.set_live(true);
    let events = state
        .metrics
        .watch_events
        .get_or_create(&FeedLabels { feed: feed.name() })
        .clone();
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(
                WatchEvent::Added(ref item)
                | WatchEvent::Modified(ref item)
                | WatchEvent::Deleted(ref item),
            ) => {
                if let Some(rv) = &item.metadata.resource_version {
                    version.clone_from(rv);
                }
                events.inc();
                let deleted = matches!(event, Ok(WatchEvent::Deleted(_)));
                let kept = state.keep(&item.metadata, deleted);
                on_event(state, &item.metadata, deleted, kept);
            }
            Ok(WatchEvent::Bookmark(b)) => *version = b.metadata.resource_version,
            Ok(WatchEvent::Error(status)) if status.code == 410 => return Ended::Expired,
            Ok(WatchEvent::Error(status)) => return Ended::Failed(status.message.clone()),
            Err(e) => return Ended::Failed(e.to_string()),
        }
    }
    Ended::Timeout
}
