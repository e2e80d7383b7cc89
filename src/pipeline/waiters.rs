//! Jobs waiting for an admitted change to be persisted (SPEC §4.6), without holding a worker
//! and without polling. Admission happens before the change is persisted, and the change may never
//! be (another webhook denies it, or the review was never the API server's). A job that finds
//! the persisted state not there yet registers as a waiter for the object, then goes back into
//! the queue until its deadline; a watch event for that object ([`crate::cluster::watch`]) wakes it to
//! look again. The waiter is registered *before* the job reads, so a change persisted after
//! that read always produces an event that finds it, and one persisted before it is seen by the
//! read. While a feed's watch is down, waiting jobs poll instead, with a growing interval.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use super::job::{Awaited, Job, JobKey};
use super::prefetch::Prefetches;
use super::queue::{WorkQueue, enqueue};
use crate::{
    metrics::Metrics,
    model::{Kind, ObjectKey},
};

/// How long jobs wait for an admitted change to be persisted before acting on what is there.
pub const PERSIST_WAIT: Duration = Duration::from_secs(5);

/// An object whose persisted changes jobs wait for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Watched {
    Namespace(String),
    Object(ObjectKey),
    CopyRule(String),
}

/// A stream of watch events that can end waits: which one covers a job decides whether its
/// waits may rely on events or must poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Feed {
    Namespaces,
    /// Secrets or ConfigMaps labelled `copyrator.io/source=true`.
    Sources(Kind),
    /// Secrets or ConfigMaps labelled `app.kubernetes.io/managed-by=copyrator`.
    Copies(Kind),
    CopyRules,
}

impl Feed {
    pub const ALL: [Feed; 6] = [
        Feed::Namespaces,
        Feed::Sources(Kind::Secret),
        Feed::Sources(Kind::ConfigMap),
        Feed::Copies(Kind::Secret),
        Feed::Copies(Kind::ConfigMap),
        Feed::CopyRules,
    ];

    pub(super) fn index(self) -> usize {
        match self {
            Feed::Namespaces => 0,
            Feed::Sources(Kind::Secret) => 1,
            Feed::Sources(Kind::ConfigMap) => 2,
            Feed::Copies(Kind::Secret) => 3,
            Feed::Copies(Kind::ConfigMap) => 4,
            Feed::CopyRules => 5,
        }
    }

    /// The feed and object a job of `key` waits on.
    pub fn of(key: &JobKey) -> Option<(Feed, Watched)> {
        match key {
            JobKey::Namespace(n) => Some((Feed::Namespaces, Watched::Namespace(n.clone()))),
            JobKey::Source(k) => Some((Feed::Sources(k.kind), Watched::Object(k.clone()))),
            JobKey::Copy(k) => Some((Feed::Copies(k.kind), Watched::Object(k.clone()))),
            JobKey::Rule(n) => Some((Feed::CopyRules, Watched::CopyRule(n.clone()))),
            JobKey::Resync => None,
        }
    }
}

/// Most jobs waiting for a persisted change at once. Real changes are persisted within
/// milliseconds of their admission; what waits long is mostly a review of a change that never
/// happens (denied by another webhook, or posted by someone who is not the API server). When
/// more wait, the oldest waits end early: those jobs act on what is persisted.
pub const MAX_WAITING: usize = 1024;

/// Jobs waiting for objects to change, and which feeds are live.
pub struct Waiters {
    /// Early reads of namespace jobs and what the feeds saw since (see [`Prefetches`]).
    pub prefetch: Prefetches,
    queue: Arc<WorkQueue>,
    waiting: Mutex<Registry>,
    live: [AtomicBool; 6],
    capacity: usize,
}

#[derive(Default)]
struct Registry {
    /// When an event for an object was last received (the last [`RECENT`]), by a 64-bit hash
    /// of the object ([`recent_key`]), not the object's name: a watch that starts or starts
    /// over delivers an event for every object it covers (thousands of namespaces and copies
    /// at once). Two objects with the same hash only make a job read when it could have
    /// parked, never the reverse.
    recent: HashMap<u64, Instant>,
    /// `recent`'s size after its last pruning.
    pruned_at: usize,
    by_object: HashMap<Watched, HashSet<JobKey>>,
    /// Jobs in the order they started waiting (entries of jobs no longer waiting are stale).
    order: VecDeque<(Watched, JobKey)>,
    count: usize,
}

/// How long the receipt of an event is remembered: longer than any wait.
const RECENT: Duration = Duration::from_secs(10);

/// What a job that waits for a change must do now (see [`Waiters::check`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Check {
    /// Read the object: the change may be there.
    Read,
    /// Nothing happened to the object since the job's trigger and the feed is live: it will
    /// wake the job. No read is needed, so a review of a change that never happens costs no
    /// API call until its wait ends.
    Parked,
}

/// The key of `watched` in [`Registry::recent`]: a fixed-key SipHash, the same in every call.
fn recent_key(watched: &Watched) -> u64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut h = DefaultHasher::new();
    watched.hash(&mut h);
    h.finish()
}

impl Registry {
    fn record(&mut self, watched: &Watched, now: Instant) {
        self.recent.insert(recent_key(watched), now);
        if self.recent.len() > 2 * self.pruned_at.max(1024) {
            self.recent
                .retain(|_, at| now.saturating_duration_since(*at) < RECENT);
            self.pruned_at = self.recent.len();
        }
    }

    fn remove(&mut self, watched: &Watched, job: &JobKey) -> bool {
        let Some(jobs) = self.by_object.get_mut(watched) else {
            return false;
        };
        let removed = jobs.remove(job);
        if jobs.is_empty() {
            self.by_object.remove(watched);
        }
        if removed {
            self.count -= 1;
        }
        removed
    }

    fn take(&mut self, watched: &Watched) -> HashSet<JobKey> {
        let jobs = self.by_object.remove(watched).unwrap_or_default();
        self.count -= jobs.len();
        jobs
    }
}

impl Waiters {
    pub fn new(queue: Arc<WorkQueue>) -> Arc<Self> {
        Self::with_capacity(queue, MAX_WAITING)
    }

    pub fn with_capacity(queue: Arc<WorkQueue>, capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            prefetch: Prefetches::default(),
            queue,
            waiting: Mutex::new(Registry::default()),
            live: Default::default(),
            capacity: capacity.max(1),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `job`, triggered at `since`, waits for `watched` to change: it is registered, and told
    /// whether it must read the object now. Checking and registering happen under the lock
    /// that events take: an event before is seen here, an event after wakes the job.
    pub fn check(&self, feed: Feed, watched: &Watched, job: &JobKey, since: Instant) -> Check {
        let live = self.is_live(feed);
        let (seen, released) = {
            let mut reg = self.lock();
            let seen = reg
                .recent
                .get(&recent_key(watched))
                .is_some_and(|at| *at >= since);
            (seen, self.register_locked(&mut reg, watched, job))
        };
        self.release(released);
        if live && !seen {
            Check::Parked
        } else {
            Check::Read
        }
    }

    /// `job` waits for `watched` to change; beyond the capacity, the job that has waited
    /// longest stops waiting.
    pub fn register(&self, watched: &Watched, job: &JobKey) {
        let released = {
            let mut reg = self.lock();
            self.register_locked(&mut reg, watched, job)
        };
        self.release(released);
    }

    fn register_locked(&self, reg: &mut Registry, watched: &Watched, job: &JobKey) -> Vec<JobKey> {
        let mut released = Vec::new();
        if !reg
            .by_object
            .entry(watched.clone())
            .or_default()
            .insert(job.clone())
        {
            return released;
        }
        reg.count += 1;
        reg.order.push_back((watched.clone(), job.clone()));
        while reg.count > self.capacity {
            let Some((w, j)) = reg.order.pop_front() else {
                break;
            };
            if reg.remove(&w, &j) {
                released.push(j);
            }
        }
        // Forget stale order entries once they outnumber the live ones.
        if reg.order.len() > 2 * reg.count + 64 {
            let Registry {
                by_object, order, ..
            } = reg;
            order.retain(|(w, j)| by_object.get(w).is_some_and(|js| js.contains(j)));
        }
        released
    }

    fn release(&self, jobs: Vec<JobKey>) {
        for job in jobs {
            tracing::debug!(job = %job, "too many jobs waiting for persistence: the oldest acts now");
            self.queue.release(&job);
        }
    }

    pub fn unregister(&self, watched: &Watched, job: &JobKey) {
        self.lock().remove(watched, job);
    }

    /// Something happened to `watched`: its waiters look again.
    pub fn notify(&self, watched: &Watched) {
        let jobs = {
            let mut reg = self.lock();
            reg.record(watched, Instant::now());
            reg.take(watched)
        };
        for job in jobs {
            self.queue.wake(&job);
        }
    }

    /// Events of `feed` may have been missed (its watch restarted from scratch): every job
    /// waiting on it looks again.
    pub fn notify_feed(&self, feed: Feed) {
        let jobs: Vec<JobKey> = {
            let mut reg = self.lock();
            let keys: Vec<Watched> = reg
                .by_object
                .iter()
                .filter(|(_, jobs)| jobs.iter().any(|j| Feed::of(j).map(|f| f.0) == Some(feed)))
                .map(|(w, _)| w.clone())
                .collect();
            keys.iter().flat_map(|w| reg.take(w)).collect()
        };
        for job in jobs {
            self.queue.wake(&job);
        }
    }

    pub fn set_live(&self, feed: Feed, live: bool) {
        self.live[feed.index()].store(live, Ordering::SeqCst);
        if !live {
            // Until it is back, events arrive late: early reads sent before are not trusted
            // (after the store, so that a reader who saw it live sees the bump).
            self.prefetch.inputs_changed();
        }
    }

    pub fn is_live(&self, feed: Feed) -> bool {
        self.live[feed.index()].load(Ordering::SeqCst)
    }

    /// Whether every feed is connected.
    pub fn all_live(&self) -> bool {
        Feed::ALL.into_iter().all(|f| self.is_live(f))
    }

    /// Jobs waiting (for tests and metrics).
    pub fn len(&self) -> usize {
        self.lock().count
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues the job of an admission review. A change under review is not persisted yet: while
    /// the watch that will report it is live, the job waits in the queue until that event (or
    /// its deadline) without running at all, so a review of a change that never happens costs
    /// no worker time and no API call until its wait ends (SPEC §4.6).
    pub fn enqueue_admitted(&self, metrics: &Metrics, mut job: Job) {
        let feed = Feed::of(&job.key).filter(|(feed, _)| self.is_live(*feed));
        let Some((feed, watched)) = feed.filter(|_| job.awaited != Awaited::Nothing) else {
            return enqueue(&self.queue, metrics, job);
        };
        job.retry_at = Some(job.since + PERSIST_WAIT);
        if let JobKey::Namespace(ns) = &job.key {
            // Its rules and copies are read while the namespace change is persisted.
            self.prefetch.request(ns, || self.all_live());
        }
        let (key, since) = (job.key.clone(), job.since);
        enqueue(&self.queue, metrics, job);
        // An event that came before the registration would not wake the job: look now.
        if self.check(feed, &watched, &key, since) == Check::Read {
            self.queue.wake(&key);
        }
    }

    /// When a job triggered at `since` that found its change not persisted yet looks again:
    /// at its deadline if a live feed will wake it earlier, else after an interval growing
    /// with the time it has waited (2 ms to 250 ms).
    pub fn next_look(&self, feed: Feed, since: Instant, now: Instant) -> Instant {
        let deadline = since + PERSIST_WAIT;
        if self.is_live(feed) {
            return deadline.max(now);
        }
        let waited = now.saturating_duration_since(since);
        let interval = (waited / 2).clamp(Duration::from_millis(2), Duration::from_millis(250));
        (now + interval).min(deadline.max(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::job::Trigger;
    use crate::pipeline::queue::Finished;

    #[tokio::test]
    async fn an_event_wakes_the_jobs_waiting_on_its_object() {
        let queue = WorkQueue::new(10);
        let waiters = Waiters::new(queue.clone());
        let key = JobKey::Namespace("team-a".into());
        queue.push(Job::new(key.clone(), Trigger::Admission));
        let job = queue.pop().await.unwrap();
        let (feed, watched) = Feed::of(&key).unwrap();
        waiters.set_live(feed, true);
        waiters.register(&watched, &key);
        let now = Instant::now();
        let at = waiters.next_look(feed, job.since, now);
        assert!(at >= job.since + PERSIST_WAIT, "a live feed: no polling");
        queue.finish(&key, Finished::Again { job, at });
        assert!(
            tokio::time::timeout(Duration::from_millis(30), queue.pop())
                .await
                .is_err()
        );
        waiters.notify(&Watched::Namespace("other".into()));
        assert_eq!(waiters.len(), 1);
        waiters.notify(&watched);
        assert!(waiters.is_empty());
        let woken = tokio::time::timeout(Duration::from_millis(100), queue.pop())
            .await
            .expect("woken by the event")
            .unwrap();
        assert_eq!(woken.key, key);
    }

    #[test]
    fn a_job_reads_only_if_something_happened_since_its_trigger_or_no_feed_will_tell() {
        let waiters = Waiters::new(WorkQueue::new(10));
        let feed = Feed::Namespaces;
        let key = JobKey::Namespace("a".into());
        let watched = Watched::Namespace("a".into());
        let since = Instant::now();
        assert_eq!(
            waiters.check(feed, &watched, &key, since),
            Check::Read,
            "no live feed: read (and poll)"
        );
        waiters.set_live(feed, true);
        assert_eq!(
            waiters.check(feed, &watched, &key, since),
            Check::Parked,
            "nothing happened yet: a review of a change that never comes costs nothing"
        );
        waiters.notify(&watched);
        assert_eq!(
            waiters.check(feed, &watched, &key, since),
            Check::Read,
            "an event since the trigger: read"
        );
        let later = Instant::now() + Duration::from_millis(1);
        assert_eq!(
            waiters.check(feed, &watched, &key, later),
            Check::Parked,
            "an event before the trigger does not count"
        );
    }

    #[tokio::test]
    async fn under_a_flood_of_waits_the_oldest_stops_waiting() {
        let queue = WorkQueue::new(100);
        let waiters = Waiters::with_capacity(queue.clone(), 2);
        let mut keys = Vec::new();
        for name in ["a", "b", "c"] {
            let key = JobKey::Namespace(name.into());
            queue.push(Job::new(key.clone(), Trigger::Admission).awaiting(Awaited::Exists));
            let job = queue.pop().await.unwrap();
            waiters.register(&Watched::Namespace(name.into()), &key);
            let at = Instant::now() + Duration::from_secs(60);
            queue.finish(&key, Finished::Again { job, at });
            keys.push(key);
        }
        assert_eq!(waiters.len(), 2);
        let released = tokio::time::timeout(Duration::from_millis(100), queue.pop())
            .await
            .expect("the oldest wait ended")
            .unwrap();
        assert_eq!(released.key, keys[0]);
        assert_eq!(
            released.awaited,
            Awaited::Nothing,
            "it acts on what is persisted"
        );
    }

    #[test]
    fn without_a_live_feed_jobs_poll_with_a_growing_interval() {
        let waiters = Waiters::new(WorkQueue::new(1));
        let since = Instant::now();
        let first = waiters.next_look(Feed::Namespaces, since, since);
        assert_eq!(first - since, Duration::from_millis(2));
        let later = since + Duration::from_secs(2);
        assert_eq!(
            waiters.next_look(Feed::Namespaces, since, later) - later,
            Duration::from_millis(250)
        );
        let late = since + Duration::from_millis(4_900);
        assert_eq!(
            waiters.next_look(Feed::Namespaces, since, late),
            since + PERSIST_WAIT,
            "never past the deadline"
        );
    }
}
