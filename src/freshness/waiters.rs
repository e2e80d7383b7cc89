//! Jobs waiting for an admitted change to be persisted (SPEC §4.6), without holding a worker
//! and without polling. Admission happens before the change is persisted, and the change may never
//! be (another webhook denies it, or the review was never the API server's). A job that finds
//! the persisted state not there yet registers as a waiter for the object, then goes back into
//! the queue until its deadline; a watch event for that object ([`crate::cluster::watch`]) wakes it to
//! look again. The waiter is registered *before* the job reads, so a change persisted after
//! that read always produces an event that finds it, and one persisted before it is seen by the
//! read. While a feed's watch is down, waiting jobs poll instead, with a growing interval.
//!
//! Jobs waiting for a change no event has shown since their trigger hold a bounded share of
//! the queue of their own, fair between classes of reviews ([`Unseen`]): under a flood of
//! reviews of changes that never happen, the flooding class gives way, and the jobs of real
//! changes, whose events come within milliseconds, are not dropped.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use super::{
    feed::{Feed, Watched},
    persisted::PERSIST_WAIT,
    prefetch::Prefetches,
};
use crate::metrics::{DroppedLabels, Metrics};
use crate::queue::{
    Evicted, WorkQueue, enqueue,
    job::{Awaited, Job, JobKey},
    unseen::{Class, Unseen},
};

/// Most jobs waiting at once for a change no watch event has shown yet. Real changes are
/// persisted within milliseconds of their admission, and their events end the wait; what
/// waits long is a review of a change that never happens (denied by another webhook, or posted
/// by someone who is not the API server). When more wait, the class of reviews holding the
/// most gives up its oldest ([`Unseen`]).
pub const MAX_WAITING: usize = 1024;

/// Jobs waiting for objects to change, and which feeds are live.
pub struct Waiters {
    /// Early reads of namespace jobs and what the feeds saw since (see [`Prefetches`]).
    pub prefetch: Prefetches,
    queue: Arc<WorkQueue>,
    metrics: Arc<Metrics>,
    waiting: Mutex<Registry>,
    live: [AtomicBool; Feed::MAX],
    /// Jobs dropped from the unseen share so far (for logging a flood sparingly).
    dropped: std::sync::atomic::AtomicU64,
}

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
    count: usize,
    /// Of the waiting jobs, those that no event has shown their change since their trigger.
    unseen: Unseen,
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
        self.unseen.remove(job);
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
        for job in &jobs {
            self.unseen.remove(job);
        }
        jobs
    }
}

impl Waiters {
    pub fn new(queue: Arc<WorkQueue>, metrics: Arc<Metrics>) -> Arc<Self> {
        Self::with_capacity(queue, metrics, MAX_WAITING)
    }

    /// Waiters whose unseen share holds `capacity` jobs.
    pub fn with_capacity(
        queue: Arc<WorkQueue>,
        metrics: Arc<Metrics>,
        capacity: usize,
    ) -> Arc<Self> {
        Arc::new(Self {
            prefetch: Prefetches::default(),
            queue,
            metrics,
            waiting: Mutex::new(Registry {
                recent: HashMap::new(),
                pruned_at: 0,
                by_object: HashMap::new(),
                count: 0,
                unseen: Unseen::new(capacity),
            }),
            live: [const { AtomicBool::new(false) }; Feed::MAX],
            dropped: Default::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `job`, triggered at `since`, waits for `watched` to change: it is registered, and told
    /// whether it must read the object now. Checking and registering happen under the lock
    /// that events take: an event before is seen here, an event after wakes the job. A job
    /// no event has shown its change to joins the unseen share.
    pub fn check(&self, feed: Feed, watched: &Watched, job: &JobKey, since: Instant) -> Check {
        let live = self.is_live(feed);
        let (seen, gone) = {
            let mut reg = self.lock();
            let seen = reg
                .recent
                .get(&recent_key(watched))
                .is_some_and(|at| *at >= since);
            let gone = self.register_locked(&mut reg, watched, job, !seen);
            (seen, gone)
        };
        self.give_way(gone);
        if live && !seen {
            Check::Parked
        } else {
            Check::Read
        }
    }

    /// `job` waits for `watched` to change, no event having shown it yet (see [`Self::check`]).
    pub fn register(&self, watched: &Watched, job: &JobKey) {
        let gone = {
            let mut reg = self.lock();
            self.register_locked(&mut reg, watched, job, true)
        };
        self.give_way(gone);
    }

    /// Registers `job`, in the unseen share if `unseen`; returns the jobs that give way for it
    /// there, no longer registered.
    fn register_locked(
        &self,
        reg: &mut Registry,
        watched: &Watched,
        job: &JobKey,
        unseen: bool,
    ) -> Vec<(JobKey, Class)> {
        if reg
            .by_object
            .entry(watched.clone())
            .or_default()
            .insert(job.clone())
        {
            reg.count += 1;
        }
        let gone = if unseen {
            reg.unseen.insert(job)
        } else {
            Vec::new()
        };
        for (key, _) in &gone {
            if let Some((_, watched)) = Feed::of(key) {
                reg.remove(&watched, key);
            }
        }
        self.set_unseen(reg);
        gone
    }

    /// The share's size, where the queue's capacity and the metrics look.
    fn set_unseen(&self, reg: &Registry) {
        self.queue.set_unseen(reg.unseen.len());
        self.metrics.queue_unseen.set(reg.unseen.len() as i64);
    }

    /// Jobs that gave way in the unseen share stop waiting: dropped from the queue (a full
    /// resync covers them), or, when ready or running, acting on what is persisted.
    fn give_way(&self, jobs: Vec<(JobKey, Class)>) {
        for (job, class) in jobs {
            match self.queue.evict(&job) {
                Evicted::Dropped => {
                    self.metrics
                        .jobs_dropped
                        .get_or_create(&DroppedLabels {
                            kind: job.kind(),
                            reason: "unseen_share",
                        })
                        .inc();
                    let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                    if n.is_power_of_two() {
                        tracing::warn!(
                            dropped = n,
                            class = %class,
                            "more admitted changes wait for their watch event than {MAX_WAITING}: \
                             the oldest of the class holding most is dropped (a flood of reviews of \
                             changes that never happen?); a full resync covers it"
                        );
                    }
                }
                Evicted::Released | Evicted::Absent => {
                    tracing::debug!(job = %job, %class, "too many jobs waiting for unseen changes: this one acts now");
                }
            }
        }
    }

    pub fn unregister(&self, watched: &Watched, job: &JobKey) {
        let mut reg = self.lock();
        reg.remove(watched, job);
        self.set_unseen(&reg);
    }

    /// Something happened to `watched`: its waiters look again.
    /// Returns how many jobs it woke.
    pub fn notify(&self, watched: &Watched) -> usize {
        let jobs = {
            let mut reg = self.lock();
            reg.record(watched, Instant::now());
            let jobs = reg.take(watched);
            if !jobs.is_empty() {
                self.set_unseen(&reg);
            }
            jobs
        };
        let woken = jobs.len();
        for job in jobs {
            self.queue.wake(&job);
        }
        woken
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
            let jobs = keys.iter().flat_map(|w| reg.take(w)).collect();
            self.set_unseen(&reg);
            jobs
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
        Feed::all().into_iter().all(|f| self.is_live(f))
    }

    /// Jobs waiting (for tests and metrics).
    pub fn len(&self) -> usize {
        self.lock().count
    }

    /// Of those, the jobs no event has shown their change yet.
    pub fn unseen(&self) -> usize {
        self.lock().unseen.len()
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
    use crate::model::{Kind, ObjectKey};
    use crate::queue::job::Trigger;
    use crate::queue::{Finished, Pushed};

    #[tokio::test]
    async fn an_event_wakes_the_jobs_waiting_on_its_object() {
        let queue = WorkQueue::new(10);
        let waiters = Waiters::new(queue.clone(), Default::default());
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
        let waiters = Waiters::new(WorkQueue::new(10), Default::default());
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

    fn dropped(metrics: &Metrics, kind: &'static str) -> u64 {
        metrics
            .jobs_dropped
            .get_or_create(&DroppedLabels {
                kind,
                reason: "unseen_share",
            })
            .get()
    }

    /// More reviews of changes that never happen than the unseen share holds: the oldest of
    /// the class holding most are dropped from the queue (a resync queued in their place), and
    /// the job of a real change in another class waits on, and runs at once on its event.
    #[tokio::test]
    async fn under_a_flood_of_waits_the_flooding_class_gives_way() {
        let queue = WorkQueue::new(100);
        let metrics = Arc::new(Metrics::new());
        let waiters = Waiters::with_capacity(queue.clone(), Arc::clone(&metrics), 3);
        for feed in Feed::all() {
            waiters.set_live(feed, true);
        }
        let real = ObjectKey::new(Kind::Secret, "team-a", "cred");
        waiters.enqueue_admitted(
            &metrics,
            Job::new(JobKey::Source(real.clone()), Trigger::Admission)
                .awaiting(Awaited::ChangedFrom("1".into())),
        );
        for name in ["a", "b", "c", "d"] {
            waiters.enqueue_admitted(
                &metrics,
                Job::new(JobKey::Namespace(name.into()), Trigger::Admission)
                    .awaiting(Awaited::Exists),
            );
        }
        assert_eq!((waiters.unseen(), waiters.len()), (3, 3));
        let queued: Vec<JobKey> = queue.snapshot().into_iter().map(|j| j.key).collect();
        assert_eq!(
            queued,
            [
                JobKey::Source(real.clone()),
                JobKey::Namespace("c".into()),
                JobKey::Namespace("d".into()),
                JobKey::Resync,
            ]
        );
        assert_eq!(dropped(&metrics, "namespace"), 2);
        assert_eq!(dropped(&metrics, "source"), 0);
        assert_eq!(metrics.queue_dropped.get(), 0, "no job dropped for room");

        waiters.notify(&Watched::Object(real.clone()));
        assert_eq!(waiters.unseen(), 2, "seen: out of the share");
        let job = tokio::time::timeout(Duration::from_millis(100), queue.pop())
            .await
            .expect("woken by its event")
            .unwrap();
        assert_eq!(job.key, JobKey::Source(real));
    }

    /// Jobs waiting for unseen changes have their own share: they leave the queue's capacity
    /// to other work.
    #[tokio::test]
    async fn unseen_waits_leave_the_capacity_to_other_work() {
        let queue = WorkQueue::new(2);
        let metrics = Arc::new(Metrics::new());
        let waiters = Waiters::new(queue.clone(), Arc::clone(&metrics));
        waiters.set_live(Feed::CopyRules, true);
        for name in ["a", "b", "c"] {
            waiters.enqueue_admitted(
                &metrics,
                Job::new(JobKey::Rule(name.into()), Trigger::Admission).awaiting(Awaited::Gone),
            );
        }
        assert_eq!(waiters.unseen(), 3);
        for name in ["x", "y"] {
            let follow_up = Job::new(JobKey::Namespace(name.into()), Trigger::FollowUp);
            assert_eq!(queue.push(follow_up), Pushed::Queued);
        }
        assert_eq!(
            queue.push(Job::new(JobKey::Namespace("z".into()), Trigger::FollowUp)),
            Pushed::Dropped,
            "the capacity still holds for the rest"
        );
        assert_eq!(dropped(&metrics, "rule"), 0);
    }

    #[test]
    fn without_a_live_feed_jobs_poll_with_a_growing_interval() {
        let waiters = Waiters::new(WorkQueue::new(1), Default::default());
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
