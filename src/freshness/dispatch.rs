//! What a watch event does, and in which order (SPEC §5): the one place that orders the
//! subsystems an event reaches. The watches (`crate::cluster::watch`) only turn the API
//! server's stream into events and hand each here; nothing here does I/O.
//!
//! Every event takes the [`STEPS`], in that order:
//! 1. **Index**: the feed's index learns the object (a copy's event is classified: this
//!    replica's own echo, someone else's edit, or new marks; a source's event says which
//!    namespaces it can reach). A job woken below reads the index: it must find the change.
//! 2. **Early reads**: namespace jobs' early reads learn what changed, before anyone is woken
//!    (`prefetch`).
//! 3. **Pod gate memory**: the namespaces whose answer the event can change are forgotten
//!    (`ready`), before a job woken below could record them settled from older reads.
//! 4. **Waiters**: jobs waiting for this object's admitted change wake (`waiters`).
//! 5. **Work**: on the leading replica, a copy deleted or edited by someone else is queued for
//!    restoring, and a copy with new marks its source's job (queue). A change to a namespace
//!    (created, relabelled, consent or termination changed), a source or a CopyRule's spec that
//!    woke no job in step 4 is one no admission announced here (the webhooks missed it, or
//!    another replica admitted it): its job is queued (SPEC §5, watches as triggers).
//! 6. **Listeners**: whoever follows a feed as a whole (the selector watches follow CopyRules).
//!
//! A seeding LIST's items take steps 2-6 as they arrive and go into a fresh index, which
//! answers only once the whole LIST is in ([`Dispatcher::seeded`]); objects the index held that
//! the LIST no longer has are handled as deleted. A listed item triggers no job of its own (the
//! startup resync reads everything), except a copy someone else edited. In a namespace-scoped
//! install each feed has one watch per namespace (its `part`): a LIST replaces that namespace's
//! objects only, and a feed counts as up while all of its watches are (`coverage`).

use std::sync::Arc;

use tokio::sync::{Notify, watch};

use super::{
    Indexes,
    copy_index::{CopySeed, Seen},
    coverage::{Coverage, Partitions},
    feed::{Feed, Watched},
    index::{Seed, namespace_info},
    ready::{Reach, ReadyIndex},
    waiters::Waiters,
};
use crate::{
    marks,
    metrics::{FeedLabels, Metrics},
    model::{Kind, Meta, ObjectKey, SourceInfo},
    plan::{Policy, reach},
    queue::{
        WorkQueue, enqueue,
        job::{Job, JobKey, Trigger},
    },
    rules::Rule,
    tenancy::Tier,
};

/// One step of an event (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Index,
    EarlyReads,
    PodGateMemory,
    Waiters,
    Work,
    Listeners,
}

/// The order every event takes: the promise the module documentation explains, and the one
/// [`Dispatcher::event`] follows.
pub const STEPS: [Step; 6] = [
    Step::Index,
    Step::EarlyReads,
    Step::PodGateMemory,
    Step::Waiters,
    Step::Work,
    Step::Listeners,
];

/// What happened to an object, as a watch saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Added,
    Modified,
    Deleted,
}

/// How a feed's watch request ended.
#[derive(Debug)]
pub enum Ended {
    /// The server ended it after its timeout: it resumes where it ended and missed nothing.
    Timeout,
    /// 410 Gone: events since its version are lost; it starts over with a new LIST.
    Expired,
    /// It failed (events may have been missed); it is tried again.
    Failed(String),
    /// What it watches is optional and not there (not served, or not granted): handled as
    /// nothing there ([`Dispatcher::nothing_there_at_all`]), looked at again seldom.
    Absent(String),
}

/// Where the work an event asks for goes: the queue, on the replica that leads (the others
/// only watch).
#[derive(Clone)]
pub struct Work {
    pub queue: Arc<WorkQueue>,
    pub leading: watch::Receiver<bool>,
}

/// Called before each step, in tests.
#[cfg(test)]
type Probe = Box<dyn FnMut(Step) + Send>;

/// See the module documentation.
pub struct Dispatcher {
    indexes: Arc<Indexes>,
    /// Trust and exclusions, for what a source's event can reach.
    policy: Arc<Policy>,
    waiters: Arc<Waiters>,
    ready: Arc<ReadyIndex>,
    work: Work,
    /// Told about every CopyRule event (the selector watches follow the CopyRules).
    rules_changed: Arc<Notify>,
    /// Each CopyRule's `metadata.generation` as last seen: a change of its spec, not of its
    /// status (which copyrator writes), is one to act on.
    rule_generations: std::sync::Mutex<std::collections::HashMap<String, Option<i64>>>,
    /// Which watches of each feed are up: the feed is, for the waiters, the Pod gate and the
    /// metrics, while all of them are.
    feeds_live: std::sync::Mutex<std::collections::HashMap<Feed, Coverage>>,
    metrics: Arc<Metrics>,
    /// Called before each step (tests of the order).
    #[cfg(test)]
    probe: std::sync::Mutex<Option<Probe>>,
}

/// What step 1 found out about an event (see [`Dispatcher::keep`]).
#[derive(Default)]
struct Kept {
    /// A copy's ADDED or MODIFIED event: whose it is.
    seen: Option<Seen>,
    /// A source's event: the namespaces it can change.
    reach: Option<Reach>,
    /// A copy's event is someone else's doing: a copy deleted by someone else, or changed by a
    /// write this replica did not make while its marks stayed (or under another field
    /// manager). Who wrote is known by the resourceVersions copyrator's own writes returned,
    /// not by a field manager's name, which anyone may give. (Who last wrote a deleted copy's
    /// fields does not matter: who deleted it does.)
    foreign: bool,
    /// The job the change asks for, unless an admitted job was waiting for it (step 5).
    trigger: Option<Job>,
    /// Jobs step 4 woke.
    woken: usize,
}

/// A seeding LIST's objects so far (see [`Dispatcher::seeding`]).
pub struct Seeding {
    feed: Feed,
    /// The watch it seeds: `None` the one of every namespace, else one namespace's.
    part: Option<String>,
    seed: FeedSeed,
}

enum FeedSeed {
    Copies(CopySeed),
    Sources(Seed<ObjectKey, SourceInfo>),
    Namespaces(Seed<String, crate::model::NamespaceInfo>),
    /// CopyRules by name, with their generation.
    CopyRules(std::collections::HashMap<String, Option<i64>>),
    /// A selector's matches are kept nowhere: the sources feed keeps the labelled ones.
    Selected,
}

impl Dispatcher {
    pub fn new(
        indexes: Arc<Indexes>,
        policy: Arc<Policy>,
        waiters: Arc<Waiters>,
        ready: Arc<ReadyIndex>,
        work: Work,
        rules_changed: Arc<Notify>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            indexes,
            policy,
            waiters,
            ready,
            work,
            rules_changed,
            rule_generations: Default::default(),
            feeds_live: Default::default(),
            metrics,
            #[cfg(test)]
            probe: Default::default(),
        }
    }

    /// A watch event: every step, in order.
    pub fn event(&self, feed: Feed, change: Change, meta: &Meta) {
        let deleted = change == Change::Deleted;
        let mut kept = Kept::default();
        for step in STEPS {
            self.take(step, feed, meta, deleted, &mut kept);
        }
    }

    fn take(&self, step: Step, feed: Feed, meta: &Meta, deleted: bool, kept: &mut Kept) {
        #[cfg(test)]
        if let Some(probe) = self.probe.lock().unwrap().as_mut() {
            probe(step);
        }
        match step {
            Step::Index => *kept = self.keep(feed, meta, deleted),
            Step::EarlyReads => self.early_reads(feed, meta, deleted),
            Step::PodGateMemory => self.pod_gate_memory(feed, meta, kept),
            Step::Waiters => {
                if let Some(watched) = feed.watched(meta) {
                    kept.woken = self.waiters.notify(&watched);
                }
            }
            Step::Work => self.work(feed, meta, kept),
            Step::Listeners => {
                if matches!(feed, Feed::CopyRules | Feed::NamespacedCopyRules) {
                    self.rules_changed.notify_one();
                }
            }
        }
    }

    /// Step 1: the object into the feed's index; what the event is to this replica (a copy's),
    /// and which namespaces it can change (a source's).
    fn keep(&self, feed: Feed, meta: &Meta, deleted: bool) -> Kept {
        let ix = &self.indexes;
        let rv = meta.resource_version.as_deref();
        let mut kept = Kept::default();
        match (feed, deleted) {
            (Feed::Copies(kind), false) => kept.seen = ix.copies.event(kind, meta.clone()),
            (Feed::Copies(_), true) => {
                if let Some(Watched::Object(key)) = feed.watched(meta) {
                    ix.copies.forget(&key, rv);
                }
            }
            (Feed::Sources(kind), _) => {
                let index = ix.sources.of(kind);
                let Some(Watched::Object(key)) = feed.watched(meta) else {
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
                // Its content is not in the metadata: every event may be a change of it.
                kept.trigger = Some(Job::new(JobKey::Source(key.clone()), Trigger::Watch));
                match after {
                    Some(info) => index.insert(key, info),
                    None => index.remove(&key, rv),
                }
            }
            (Feed::Namespaces, _) => match namespace_info(meta) {
                Some(info) if !deleted => {
                    let same = ix
                        .namespaces
                        .peek(&info.name, |b| {
                            b.labels == info.labels
                                && b.accept_from == info.accept_from
                                && b.terminating == info.terminating
                        })
                        .unwrap_or(false);
                    if !same {
                        let key = JobKey::Namespace(info.name.clone());
                        kept.trigger = Some(Job::new(key, Trigger::Watch));
                    }
                    ix.namespaces.insert(info.name.clone(), info)
                }
                _ => {
                    if let Some(name) = &meta.name {
                        ix.namespaces.remove(name, rv);
                    }
                }
            },
            (Feed::Selected(kind), _) => {
                kept.reach = Some(self.selected_reach(kind, meta, deleted));
                kept.trigger = selected_trigger(kind, meta, deleted);
                return kept;
            }
            (Feed::CopyRules | Feed::NamespacedCopyRules, _) => {
                // What the CopyRules were is not known any more (a source's reach, jobs'
                // reads), unless only a known rule's status changed.
                ix.rules_of(feed).event(meta, deleted);
                kept.trigger = self.rule_changed(meta, deleted);
                return kept;
            }
        }
        self.show_index_size(feed);
        kept.foreign = self.foreign(feed, meta, deleted, kept.seen.as_ref());
        kept
    }

    /// The job a CopyRule's event asks for: one whose spec changed (its generation), that is
    /// new, or that is gone. Its status, which copyrator writes, asks for none.
    fn rule_changed(&self, meta: &Meta, deleted: bool) -> Option<Job> {
        let name = crate::namespaced::rule_name(meta.namespace.as_deref(), meta.name.as_deref()?);
        let mut known = self
            .rule_generations
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let changed = if deleted {
            known.remove(&name);
            true
        } else {
            known.insert(name.clone(), meta.generation) != Some(meta.generation)
        };
        changed.then(|| Job::new(JobKey::Rule(name), Trigger::Watch).full_scan())
    }

    /// The namespaces a source's change can reach: where its rules before and after the change
    /// (its inline rule, the CopyRules selecting it) can have copies. Every namespace while
    /// the CopyRules or the namespaces are not known, or when it reaches most of them.
    fn source_reach(&self, before: Option<&SourceInfo>, after: Option<&SourceInfo>) -> Reach {
        let (Some(copy_rules), Some(namespaced)) = (
            self.indexes.copy_rules.rules(),
            self.indexes.namespaced_rules.rules(),
        ) else {
            return Reach::All;
        };
        // A NamespacedCopyRule's tier is its namespace's.
        let namespaced: Vec<Rule> = namespaced
            .iter()
            .filter_map(|r| r.clone().tiered(&self.policy.trust).ok())
            .collect();
        let mut rules = Vec::new();
        for source in [before, after].into_iter().flatten() {
            if let Ok(Some(mut inline)) = Rule::inline(source) {
                inline.tier = self.policy.trust.inline_tier(&inline.source_namespace);
                rules.push(inline);
            }
            rules.extend(
                copy_rules
                    .iter()
                    .chain(&namespaced)
                    // A rule following it (a bundle's source, a store's password) reaches
                    // the rule's namespaces (SPEC §3.2).
                    .filter(|r| r.selects_source(source) || r.follows(&source.key))
                    .cloned(),
            );
        }
        if rules.is_empty() {
            return Reach::Nothing;
        }
        // An untrusted source's rules reach only namespaces that accept copies from
        // somewhere: those alone are judged (SPEC §9.7).
        let namespaces = &self.indexes.namespaces;
        let all = namespaces.len();
        let reached = if rules.iter().all(|r| r.tier == Tier::ConsentedInline) {
            namespaces.read_marked(|consenting| reach(&self.policy, &rules, consenting))
        } else {
            namespaces.read(|by_name| reach(&self.policy, &rules, by_name.values()))
        };
        match reached {
            Some(names) if names.is_empty() => Reach::Nothing,
            Some(names) if names.len() * 2 <= all => Reach::Namespaces(names),
            _ => Reach::All,
        }
    }

    /// The namespaces an object a CopyRule's selector matches can reach: as a source's change
    /// (its rules before and after), though nobody may have told copyrator of it yet. So the
    /// Pod gate forgets them before the source's job labels it (SPEC §10.2): a Pod admitted
    /// meanwhile waits for the new source's copies.
    fn selected_reach(&self, kind: Kind, meta: &Meta, deleted: bool) -> Reach {
        let Some(Watched::Object(key)) = Feed::Selected(kind).watched(meta) else {
            return Reach::Nothing;
        };
        let before = self.indexes.sources.of(kind).peek(&key, Clone::clone);
        let after = SourceInfo::from_meta(kind, meta)
            .filter(|_| !deleted)
            .map(|s| self.policy.keep_source(s));
        self.source_reach(before.as_ref(), after.as_ref())
    }

    /// Step 2: early reads of namespace jobs learn what changed.
    fn early_reads(&self, feed: Feed, meta: &Meta, deleted: bool) {
        let prefetch = &self.waiters.prefetch;
        match feed {
            Feed::Sources(_) | Feed::Selected(_) | Feed::CopyRules | Feed::NamespacedCopyRules => {
                prefetch.inputs_changed()
            }
            Feed::Copies(_) => {
                if let Some(ns) = &meta.namespace {
                    prefetch.copy_changed(ns);
                }
            }
            Feed::Namespaces => {
                if let Some(name) = &meta.name {
                    prefetch.namespace_event(name, || {
                        (!deleted).then(|| namespace_info(meta)).flatten()
                    });
                }
            }
        }
    }

    /// Step 3: the Pod gate forgets the namespaces the event can change. copyrator's own copy
    /// writes follow a change the index already saw (a source, a namespace, a rule): they
    /// change no namespace's answer.
    fn pod_gate_memory(&self, feed: Feed, meta: &Meta, kept: &Kept) {
        let Some(watched) = feed.watched(meta) else {
            return;
        };
        // A CopyRule event that changed no spec (its status, which copyrator writes after a
        // burst of namespace jobs) changes no namespace's answer: forgetting every namespace
        // then made the Pods of settled namespaces wait for a sync of their own.
        if matches!(feed, Feed::CopyRules | Feed::NamespacedCopyRules) && kept.trigger.is_none() {
            return;
        }
        match (
            &kept.reach,
            kept.foreign || !matches!(feed, Feed::Copies(_)),
        ) {
            // A selector's watch is the leader's alone and comes and goes with its rule: its
            // events are trusted as far as the sources watch of the kind is.
            (Some(reach), _) if let Feed::Selected(kind) = feed => {
                self.ready.forget(Feed::Sources(kind), reach)
            }
            (Some(reach), _) => self.ready.forget(feed, reach),
            (None, true) => self.ready.observe(feed, &watched),
            (None, false) => {}
        }
    }

    /// Whether a copy's event is someone else's doing ([`Kept::foreign`]), asked once per
    /// event (a delete of copyrator's answers for one event only). An item of a seeding LIST,
    /// which no write of this process can explain, is judged by its `managedFields`.
    fn foreign(&self, feed: Feed, meta: &Meta, deleted: bool, seen: Option<&Seen>) -> bool {
        let Feed::Copies(_) = feed else {
            return false;
        };
        if deleted {
            return !match feed.watched(meta) {
                Some(Watched::Object(key)) => self.indexes.copies.own_delete_seen(&key),
                _ => false,
            };
        }
        match seen {
            Some(Seen::Edited) => true,
            Some(Seen::Own | Seen::Remarked(_)) => false,
            None => meta.edited_by_others,
        }
    }

    /// Step 5: on the leading replica, a copy deleted or edited by someone else is queued for
    /// restoring (SPEC §4.4), and a copy that got new marks from a write this replica did not
    /// make (most likely another replica's, for a new version of the source) its source's
    /// job, which finds any copy whose marks do not match the source. Coalesced: the copies of
    /// one fan-out by another replica are one job here.
    fn work(&self, feed: Feed, meta: &Meta, kept: &mut Kept) {
        if let (true, Some(Watched::Object(key))) = (kept.foreign, feed.watched(meta)) {
            self.restore(&key);
        }
        if let Some(Seen::Remarked(source)) = &kept.seen {
            self.queue(JobKey::Source(source.clone()));
        }
        // A change no admitted job here waited for, or waits to run (it will read what is
        // persisted now): one that did covers it.
        if let Some(job) = kept
            .trigger
            .take()
            .filter(|j| kept.woken == 0 && !self.work.queue.admitted_waiting(&j.key))
            && *self.work.leading.borrow()
        {
            self.metrics
                .watch_triggered
                .get_or_create(&FeedLabels { feed: feed.name() })
                .inc();
            enqueue(&self.work.queue, &self.metrics, job);
        }
    }

    /// copyrator is bound again in a listed namespace that had refused it (SPEC §13): what it
    /// could not do there meanwhile is done by a resync, since the objects its watches list
    /// there trigger no job of their own (the leader only).
    pub fn bound_again(&self, namespace: &str) {
        tracing::debug!(namespace, "bound again: resync");
        self.queue(JobKey::Resync);
    }

    /// Queues a copy job for a copy deleted or edited by someone else (the leader only).
    pub fn restore(&self, key: &ObjectKey) {
        tracing::debug!(copy = %key, "copy deleted or edited by someone else");
        self.queue(JobKey::Copy(key.clone()));
    }

    fn queue(&self, key: JobKey) {
        if *self.work.leading.borrow() {
            enqueue(
                &self.work.queue,
                &self.metrics,
                Job::new(key, Trigger::Watch),
            );
        }
    }

    /// Restores the copies found edited by someone else once copyrator's own write of them
    /// answered (an event that came while the write was in flight, not its echo), until
    /// `shutdown`.
    pub async fn restore_edited_after_writes(&self, mut shutdown: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                keys = self.indexes.copies.take_edited() => {
                    for key in keys {
                        self.restore(&key);
                    }
                }
                _ = shutdown.changed() => break,
            }
        }
    }

    /// An empty seed for a seeding LIST of `feed` by its watch of `part` (`None`: the one of
    /// every namespace; see [`Dispatcher::listed`]).
    pub fn seeding(&self, feed: Feed, part: Option<&str>) -> Seeding {
        let ix = &self.indexes;
        let seed = match feed {
            Feed::Copies(kind) => FeedSeed::Copies(ix.copies.seeding(kind, part)),
            Feed::Sources(kind) => FeedSeed::Sources(ix.sources.of(kind).seeding(part)),
            Feed::Namespaces => FeedSeed::Namespaces(ix.namespaces.seeding(part)),
            Feed::CopyRules | Feed::NamespacedCopyRules => FeedSeed::CopyRules(Default::default()),
            Feed::Selected(_) => FeedSeed::Selected,
        };
        Seeding {
            feed,
            part: part.map(String::from),
            seed,
        }
    }

    /// The watch of `feed` in `namespace` has nothing to watch (copyrator is not bound there,
    /// or the kind is not served): it keeps nothing of that namespace, and answers for it, as
    /// a LIST of nothing would have it (what it held there is handled as deleted).
    pub fn nothing_there(&self, feed: Feed, namespace: &str) {
        let seeding = self.seeding(feed, Some(namespace));
        self.seeded(seeding);
        self.up(feed, Some(namespace));
    }

    /// The one watch of `feed` (a cluster-wide install's) has nothing to watch (its CRD is
    /// not installed): [`Dispatcher::nothing_there`] of every namespace.
    pub fn nothing_there_at_all(&self, feed: Feed) {
        let seeding = self.seeding(feed, None);
        self.seeded(seeding);
        self.up(feed, None);
    }

    /// One item of a seeding LIST: handled as an ADDED event would be (steps 2-6), and kept in
    /// the seed, which replaces the index once the LIST is in ([`Dispatcher::seeded`]).
    pub fn listed(&self, seeding: &mut Seeding, meta: Meta) {
        // A selector's LIST is its watch starting on a new leader: an unlabelled match found
        // there is a new source nobody told copyrator about, as an ADDED event would be.
        if let Feed::Selected(_) = seeding.feed {
            self.event(seeding.feed, Change::Added, &meta);
            return;
        }
        let mut kept = Kept {
            foreign: self.foreign(seeding.feed, &meta, false, None),
            ..Kept::default()
        };
        for step in STEPS.into_iter().filter(|s| *s != Step::Index) {
            self.take(step, seeding.feed, &meta, false, &mut kept);
        }
        match &mut seeding.seed {
            FeedSeed::Copies(seed) => {
                if let Feed::Copies(kind) = seeding.feed
                    && let Some(item) = self.indexes.copies.item(kind, meta)
                {
                    seed.insert(item);
                }
            }
            FeedSeed::Sources(seed) => {
                if let Feed::Sources(kind) = seeding.feed
                    && let Some(s) = SourceInfo::from_meta(kind, &meta)
                {
                    let s = self.policy.keep_source(s);
                    seed.insert(s.key.clone(), s);
                }
            }
            FeedSeed::Namespaces(seed) => {
                if let Some(n) = namespace_info(&meta) {
                    seed.insert(n.name.clone(), n);
                }
            }
            FeedSeed::CopyRules(seed) => {
                if let Some(name) = &meta.name {
                    let name = crate::namespaced::rule_name(meta.namespace.as_deref(), name);
                    seed.insert(name, meta.generation);
                }
            }
            FeedSeed::Selected => {}
        }
    }

    /// A seeding LIST is in: it replaces what the feed's index held, and every object the
    /// index held that the LIST no longer has is handled as deleted (a copy: restored, SPEC
    /// §4.4).
    pub fn seeded(&self, seeding: Seeding) {
        let ix = &self.indexes;
        let feed = seeding.feed;
        let part = seeding.part.as_deref();
        let gone: Vec<Meta> = match seeding.seed {
            FeedSeed::Copies(seed) => match feed {
                Feed::Copies(kind) => keys_gone(ix.copies.seed(kind, part, seed)),
                _ => Vec::new(),
            },
            FeedSeed::Sources(seed) => match feed {
                Feed::Sources(kind) => keys_gone(ix.sources.of(kind).seed(part, seed)),
                _ => Vec::new(),
            },
            FeedSeed::Namespaces(seed) => ix
                .namespaces
                .seed(part, seed)
                .into_iter()
                .map(|name| Meta {
                    name: Some(name),
                    ..Default::default()
                })
                .collect(),
            FeedSeed::CopyRules(seed) => {
                // A change made between a job's LIST and this one has no event of its own.
                ix.rules_of(feed).changed();
                let mut known = self
                    .rule_generations
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                // A namespace's rules are named `<namespace>/<name>` (see `rule_changed`); the
                // two feeds of rules share the generations, each replacing only its own.
                let in_part = |name: &str| {
                    let of = crate::namespaced::split_rule_name(name);
                    Feed::of_rule(name) == feed
                        && part.is_none_or(|ns| of.is_some_and(|(n, _)| n == ns))
                };
                let gone = known
                    .keys()
                    .filter(|name| in_part(name) && !seed.contains_key(*name))
                    .map(|name| Meta {
                        name: Some(name.clone()),
                        ..Default::default()
                    })
                    .collect();
                known.retain(|name, _| !in_part(name));
                known.extend(seed);
                gone
            }
            FeedSeed::Selected => Vec::new(),
        };
        for meta in gone {
            // Deleted while the watch was away: a source's or a CopyRule's copies follow.
            let trigger = match (feed, feed.watched(&meta)) {
                (Feed::Sources(_), Some(Watched::Object(key))) => {
                    Some(Job::new(JobKey::Source(key), Trigger::Watch))
                }
                (Feed::CopyRules | Feed::NamespacedCopyRules, Some(Watched::CopyRule(name))) => {
                    Some(Job::new(JobKey::Rule(name), Trigger::Watch).full_scan())
                }
                _ => None,
            };
            let mut kept = Kept {
                foreign: self.foreign(feed, &meta, true, None),
                trigger,
                ..Kept::default()
            };
            for step in STEPS.into_iter().filter(|s| *s != Step::Index) {
                self.take(step, feed, &meta, true, &mut kept);
            }
        }
        self.show_index_size(feed);
    }

    /// A watch of `feed` (of `part`, see [`Dispatcher::seeding`]) is connected: events arrive
    /// in order from now on. The feed is up once all of its watches are.
    pub fn up(&self, feed: Feed, part: Option<&str>) {
        self.set_index_live(feed, part, true);
        if !self.feed_live(feed, part, true) {
            return;
        }
        self.waiters.set_live(feed, true);
        if !matches!(feed, Feed::Selected(_)) {
            self.ready.connected(feed);
        }
        self.show_live(feed, true);
    }

    /// A watch request of `feed` (of `part`) ended (see [`Ended`]): waiting jobs poll until it
    /// is back; a watch that timed out resumes where it ended, so its index keeps answering
    /// meanwhile; one that may have missed events stops its index and the Pod gate's memory,
    /// and one that must start over also wakes every job waiting on it.
    pub fn down(&self, feed: Feed, part: Option<&str>, ended: &Ended) {
        self.feed_live(feed, part, false);
        self.waiters.set_live(feed, false);
        self.show_live(feed, false);
        match ended {
            Ended::Timeout => {}
            Ended::Expired => {
                self.set_index_live(feed, part, false);
                self.disconnected(feed);
                self.unseed(feed, part);
                self.waiters.notify_feed(feed);
            }
            Ended::Failed(_) | Ended::Absent(_) => {
                self.set_index_live(feed, part, false);
                self.disconnected(feed);
            }
        }
    }

    /// A watch of `feed` (of `part`) stopped for good (shutdown).
    pub fn stopped(&self, feed: Feed, part: Option<&str>) {
        self.feed_live(feed, part, false);
        self.waiters.set_live(feed, false);
        self.show_live(feed, false);
        self.set_index_live(feed, part, false);
        self.disconnected(feed);
    }

    /// Records that the watch of `part` is up or down; returns whether every watch of `feed`
    /// is up now. A selector's watches are not partitioned: each is the feed (as before).
    fn feed_live(&self, feed: Feed, part: Option<&str>, live: bool) -> bool {
        let mut feeds = self.feeds_live.lock().unwrap_or_else(|e| e.into_inner());
        let coverage = feeds.entry(feed).or_insert_with(|| match feed {
            Feed::Selected(_) => Coverage::new(&Partitions::default()),
            _ => Coverage::new(&self.indexes.partitions),
        });
        coverage.set_live(part, live);
        coverage.live()
    }

    /// The Pod gate trusts nothing while a feed it follows is down; a selector's watch is
    /// not one of those (see [`Dispatcher::up`]).
    fn disconnected(&self, feed: Feed) {
        if !matches!(feed, Feed::Selected(_)) {
            self.ready.disconnected(feed);
        }
    }

    fn set_index_live(&self, feed: Feed, part: Option<&str>, live: bool) {
        self.indexes.of(feed, |index| index.set_live(part, live));
    }

    /// The watch of `part` starts over with a new LIST: the index stops answering until then.
    fn unseed(&self, feed: Feed, part: Option<&str>) {
        self.indexes.of(feed, |index| index.unseed(part));
    }

    fn show_index_size(&self, feed: Feed) {
        if let Some(len) = self.indexes.of(feed, |index| index.held()) {
            self.metrics
                .index_objects
                .get_or_create(&FeedLabels { feed: feed.name() })
                .set(len as i64);
        }
    }

    fn show_live(&self, feed: Feed, live: bool) {
        self.metrics
            .watch_live
            .get_or_create(&FeedLabels { feed: feed.name() })
            .set(i64::from(live));
    }
}

/// The job an event of a CopyRule's selector asks for (SPEC §5): an object that matches and
/// lacks the opt-in label is a source nobody told copyrator about (its job labels it, so its
/// later changes reach the sources webhook); one that stopped matching, or is gone, has copies
/// to take away per the rule's deletion policy. A labelled match's changes come through the
/// sources feed.
fn selected_trigger(kind: Kind, meta: &Meta, deleted: bool) -> Option<Job> {
    let labelled = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(marks::SOURCE_LABEL))
        .is_some_and(|v| v == "true");
    if labelled && !deleted {
        return None;
    }
    let Some(Watched::Object(key)) = Feed::Selected(kind).watched(meta) else {
        return None;
    };
    Some(Job::new(JobKey::Source(key), Trigger::Watch))
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

#[cfg(test)]
mod tests;
