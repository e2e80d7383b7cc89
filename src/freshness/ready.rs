//! Which namespaces are known to hold every copy they should, in the sources' current
//! versions (SPEC §10): what lets the Pod gate answer from memory. An entry is made only by a
//! sync of that namespace that settled, and only if nothing that could change the answer
//! happened since that sync began; every watch event that could change it removes entries
//! (a namespace's own events and its copies' events, except the echo of copyrator's own copy
//! writes, which the watch does not pass on: that namespace; a source's event: the namespaces
//! its rules can reach, [`Reach`]; a CopyRule event: all of them). While any watch is not live,
//! nothing is trusted.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use moka::sync::Cache;

use super::feed::{Feed, Watched};

/// Which namespaces' answers a source's event may change: those its rules (before and after
/// the change) can have copies in ([`crate::plan::reach`]). A tenant's source that no namespace
/// consents to reaches nothing, so editing it forgets nothing (SPEC §10.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    Nothing,
    Namespaces(Vec<String>),
    /// Not known (the CopyRules or the namespaces are not known now), or most namespaces.
    All,
}

/// What a settled namespace's Pods get: the copies to add to `spec.imagePullSecrets`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ready {
    pub pull_secrets: Vec<String>,
}

/// See the module documentation.
pub struct ReadyIndex {
    entries: Cache<String, Arc<Ready>>,
    /// The tick of each namespace's latest invalidation.
    touched: Cache<String, u64>,
    /// Counts invalidations; a sync notes it before it reads.
    tick: AtomicU64,
    /// The tick of the latest invalidation of every namespace (and of the newest `touched`
    /// entry the cache evicted: older invalidations are no longer known one by one).
    everything: Arc<AtomicU64>,
    /// One bit per feed that is live.
    live: AtomicU64,
    /// Told whenever a namespace is recorded settled (a Pod waiting on its namespace's job).
    recorded: tokio::sync::Notify,
}

impl ReadyIndex {
    /// An index of at most `capacity` namespaces.
    pub fn new(capacity: u64) -> Self {
        let everything = Arc::new(AtomicU64::new(0));
        let evicted = Arc::clone(&everything);
        Self {
            entries: Cache::builder().max_capacity(capacity).build(),
            touched: Cache::builder()
                .max_capacity(capacity)
                .eviction_listener(move |_ns, tick: u64, _cause| {
                    evicted.fetch_max(tick, Ordering::SeqCst);
                })
                .build(),
            tick: AtomicU64::new(0),
            everything,
            live: AtomicU64::new(0),
            recorded: tokio::sync::Notify::new(),
        }
    }

    /// Whether every watch is live: only then do events tell the index what changed.
    pub fn trusted(&self) -> bool {
        let all = Feed::all()
            .into_iter()
            .fold(0u64, |mask, feed| mask | 1 << feed.index());
        self.live.load(Ordering::SeqCst) & all == all
    }

    /// The namespace's entry, if it is known settled.
    pub fn get(&self, namespace: &str) -> Option<Arc<Ready>> {
        if !self.trusted() {
            return None;
        }
        self.entries.get(namespace)
    }

    /// Notes the current tick; pass it to [`Self::record`] after the sync.
    pub fn begin(&self) -> u64 {
        self.tick.load(Ordering::SeqCst)
    }

    /// Records a namespace a sync that began at `since` found settled, unless something that
    /// could change the answer happened meanwhile (then the next Pod looks again).
    pub fn record(&self, namespace: &str, since: u64, ready: Ready) -> bool {
        let fresh = self.everything.load(Ordering::SeqCst) <= since
            && self.touched.get(namespace).is_none_or(|t| t <= since)
            && self.trusted();
        if fresh {
            self.entries.insert(namespace.to_string(), Arc::new(ready));
            // An invalidation that raced the insert wins.
            let raced = self.everything.load(Ordering::SeqCst) > since
                || self.touched.get(namespace).is_some_and(|t| t > since);
            if raced {
                self.entries.invalidate(namespace);
                return false;
            }
            self.recorded.notify_waiters();
        }
        fresh
    }

    /// Completes at the next [`Self::record`] of any namespace (create it, and `enable` it,
    /// before looking with [`Self::get`], so that no record between the two is missed).
    pub fn recorded(&self) -> tokio::sync::futures::Notified<'_> {
        self.recorded.notified()
    }

    /// Something in `namespace` changed.
    pub fn touch(&self, namespace: &str) {
        let tick = self.tick.fetch_add(1, Ordering::SeqCst) + 1;
        self.touched.insert(namespace.to_string(), tick);
        self.entries.invalidate(namespace);
    }

    /// Something that can change any namespace's answer changed.
    pub fn touch_all(&self) {
        let tick = self.tick.fetch_add(1, Ordering::SeqCst) + 1;
        self.everything.fetch_max(tick, Ordering::SeqCst);
        self.entries.invalidate_all();
    }

    /// A watch event. Events of a feed that is down (its watch starting, or starting over
    /// with a LIST that seeds its index) are not recorded one by one: [`Self::connected`]
    /// forgets everything when the feed comes up, and a seeding LIST delivers one for every
    /// namespace (5,000 entries of `touched` held for nothing, BENCHMARKS.md, memory).
    pub fn observe(&self, feed: Feed, watched: &Watched) {
        if self.live.load(Ordering::SeqCst) & (1 << feed.index()) == 0 {
            return;
        }
        match (feed, watched) {
            (Feed::Namespaces, Watched::Namespace(ns)) => self.touch(ns),
            (Feed::Copies(_), Watched::Object(key)) => self.touch(&key.namespace),
            _ => self.touch_all(),
        }
    }

    /// A source's watch event that may change the answer of the namespaces `reach` names.
    /// Ignored while the feed is down, as in [`Self::observe`].
    pub fn forget(&self, feed: Feed, reach: &Reach) {
        if self.live.load(Ordering::SeqCst) & (1 << feed.index()) == 0 {
            return;
        }
        match reach {
            Reach::Nothing => {}
            Reach::Namespaces(names) => names.iter().for_each(|ns| self.touch(ns)),
            Reach::All => self.touch_all(),
        }
    }

    /// A watch is connected. If it was down, events may have been missed: forget everything.
    /// (A watch the server ended after its timeout and that resumed from its last version
    /// missed nothing and never went down.)
    pub fn connected(&self, feed: Feed) {
        let bit = 1 << feed.index();
        if self.live.fetch_or(bit, Ordering::SeqCst) & bit == 0 {
            self.touch_all();
        }
    }

    /// A watch failed or must start over (410): until it is back, nothing is trusted.
    pub fn disconnected(&self, feed: Feed) {
        let bit = 1 << feed.index();
        self.live.fetch_and(!bit, Ordering::SeqCst);
        self.touch_all();
    }

    /// Namespaces known settled (for metrics).
    pub fn len(&self) -> u64 {
        self.entries.entry_count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Kind, ObjectKey};

    fn live() -> ReadyIndex {
        let index = ReadyIndex::new(100);
        for feed in Feed::all() {
            index.connected(feed);
        }
        index
    }

    fn ready(name: &str) -> Ready {
        Ready {
            pull_secrets: vec![name.into()],
        }
    }

    #[test]
    fn a_settled_namespace_is_answered_until_something_in_it_changes() {
        let index = live();
        let since = index.begin();
        assert!(index.record("a", since, ready("x")));
        assert!(index.record("b", since, ready("y")));
        assert_eq!(index.get("a").unwrap().pull_secrets, ["x"]);
        index.observe(
            Feed::Copies(Kind::Secret),
            &Watched::Object(ObjectKey::new(Kind::Secret, "a", "x")),
        );
        assert!(index.get("a").is_none(), "its copy changed");
        assert!(index.get("b").is_some(), "another namespace's copy");
        index.observe(Feed::Namespaces, &Watched::Namespace("b".into()));
        assert!(index.get("b").is_none());
    }

    #[test]
    fn a_source_or_rule_event_forgets_every_namespace() {
        let index = live();
        index.record("a", index.begin(), ready("x"));
        index.observe(
            Feed::Sources(Kind::Secret),
            &Watched::Object(ObjectKey::new(Kind::Secret, "p", "s")),
        );
        assert!(index.get("a").is_none());
        index.record("a", index.begin(), ready("x"));
        index.observe(Feed::CopyRules, &Watched::CopyRule("r".into()));
        assert!(index.get("a").is_none());
    }

    #[test]
    fn a_source_event_forgets_only_the_namespaces_it_reaches() {
        let index = live();
        let since = index.begin();
        for ns in ["a", "b", "c"] {
            assert!(index.record(ns, since, ready("x")));
        }
        let feed = Feed::Sources(Kind::Secret);
        index.forget(feed, &Reach::Nothing);
        assert!(["a", "b", "c"].iter().all(|ns| index.get(ns).is_some()));
        index.forget(feed, &Reach::Namespaces(vec!["b".into()]));
        assert!(index.get("a").is_some() && index.get("b").is_none());
        assert!(!index.record("b", since, ready("x")), "b changed since");
        index.forget(feed, &Reach::All);
        assert!(index.get("a").is_none() && index.get("c").is_none());
    }

    #[test]
    fn a_sync_that_raced_an_event_records_nothing() {
        let index = live();
        let since = index.begin();
        index.touch("a");
        assert!(
            !index.record("a", since, ready("x")),
            "a changed while read"
        );
        assert!(index.record("b", since, ready("y")), "b did not");
        let since = index.begin();
        index.touch_all();
        assert!(!index.record("b", since, ready("y")));
        assert!(index.record("b", index.begin(), ready("y")));
    }

    #[test]
    fn nothing_is_trusted_while_a_watch_is_down() {
        let index = live();
        index.record("a", index.begin(), ready("x"));
        index.disconnected(Feed::CopyRules);
        assert!(index.get("a").is_none());
        assert!(!index.record("a", index.begin(), ready("x")));
        index.connected(Feed::CopyRules);
        assert!(index.get("a").is_none(), "forgotten, not just hidden");
        assert!(index.record("a", index.begin(), ready("x")));
        index.connected(Feed::CopyRules);
        assert!(
            index.get("a").is_some(),
            "a watch resumed while live forgets nothing"
        );
    }

    #[test]
    fn events_of_a_feed_that_is_down_leave_no_entries_and_connecting_forgets_everything() {
        let index = ReadyIndex::new(100);
        for feed in Feed::all() {
            if feed != Feed::Namespaces {
                index.connected(feed);
            }
        }
        // A sync began while the namespaces' watch was still seeding its index.
        let since = index.begin();
        for i in 0..100 {
            index.observe(Feed::Namespaces, &Watched::Namespace(format!("ns-{i}")));
        }
        index.touched.run_pending_tasks();
        assert_eq!(index.touched.entry_count(), 0, "no entry per listed object");
        index.connected(Feed::Namespaces);
        assert!(
            !index.record("ns-1", since, ready("x")),
            "a sync that read before the feed came up is not trusted"
        );
        assert!(index.record("ns-1", index.begin(), ready("x")));
        // Live again: an event of one namespace is recorded for that namespace.
        let since = index.begin();
        index.observe(Feed::Namespaces, &Watched::Namespace("ns-2".into()));
        assert!(!index.record("ns-2", since, ready("x")));
        assert!(index.record("ns-3", since, ready("x")));
    }

    #[test]
    fn invalidations_forgotten_by_the_bounded_cache_count_for_everything() {
        let index = ReadyIndex::new(4);
        for feed in Feed::all() {
            index.connected(feed);
        }
        let since = index.begin();
        for i in 0..64 {
            index.touch(&format!("ns-{i}"));
        }
        index.touched.run_pending_tasks();
        let evicted = (0..64)
            .map(|i| format!("ns-{i}"))
            .find(|ns| index.touched.get(ns).is_none())
            .expect("the bounded cache evicted some invalidations");
        // Its invalidation is no longer known by name; it must still block a stale record.
        assert!(!index.record(&evicted, since, ready("x")));
    }
}
