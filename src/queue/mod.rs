//! The bounded, coalescing work queue between triggers (admission, reconciler, retries) and
//! the workers.
//!
//! Jobs are keyed by what they sync; a job whose key is already queued merges into it (a burst
//! of 100 updates to one source is one fan-out, or two when the burst straddles a running
//! job). A key is never processed by two workers at once: a job arriving for a key being
//! processed waits and runs once more afterwards.
//!
//! Every job lives in here until it is done, also while it waits: for a retry's backoff, for an
//! admitted change to be persisted, or for the earliest start of a resync (a due-time heap
//! inside the queue, not timers outside it). Waiting jobs count toward the depth, and are
//! dropped when the queue closes. When the queue is full, a new job is dropped and a full
//! resync is queued instead, which always fits: nothing is lost (SPEC §4.8). Jobs waiting for
//! an admitted change no watch event has shown yet do not count toward the capacity: they
//! have a bounded share of their own, fair between classes of reviews
//! (`waiters::Waiters`), which gives them up ([`WorkQueue::evict`]) when a flood of reviews
//! of changes that never happen overflows it; real work never makes room for them.
//!
//! Ready jobs run in two classes: first attempts before retries and re-checks, so that work that
//! keeps failing (or reviews of changes that never happen, their waits ended by a deadline or
//! given up under a flood) cannot starve fresh work. A retry that has been ready for
//! [`LOW_MAX_WAIT`] runs anyway.

pub mod job;
pub mod unseen;

use std::{
    cmp::Reverse,
    collections::{BinaryHeap, HashMap, HashSet, VecDeque},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::sync::Notify;

use crate::metrics::{DroppedLabels, Metrics};
use job::{Awaited, Job, JobKey, Trigger};

/// Result of [`WorkQueue::push`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    Queued,
    /// Merged into a job with the same key that was already waiting.
    Coalesced,
    /// The queue was full (or closed): dropped, and a full resync queued in its place.
    Dropped,
}

/// What [`WorkQueue::evict`] did with a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Evicted {
    /// It waited in the queue: dropped, and a full resync queued in its place.
    Dropped,
    /// It is ready or running: it acts on what is persisted without waiting any longer.
    Released,
    /// No job of the key waits for a change.
    Absent,
}

/// What became of a job a worker ran (see [`WorkQueue::finish`]).
#[derive(Debug)]
pub enum Finished {
    Done,
    /// Run it again at `at` at the latest: a retry's backoff, or a re-check for a change that
    /// is not persisted yet ([`WorkQueue::wake`] makes it due earlier).
    Again {
        job: Job,
        at: Instant,
    },
}

/// A ready retry runs before fresh work once it has waited this long.
pub const LOW_MAX_WAIT: Duration = Duration::from_millis(250);

#[derive(Debug)]
struct Entry {
    job: Job,
    /// Set while the job sits in the heap; matches exactly one live heap entry.
    delayed: Option<(Instant, u64)>,
}

#[derive(Default)]
struct State {
    /// Ready first attempts, in arrival order.
    fresh: VecDeque<JobKey>,
    /// Ready retries and re-checks, with when they became ready.
    retries: VecDeque<(Instant, JobKey)>,
    /// Waiting jobs by due time; entries whose sequence no longer matches are stale.
    delayed: BinaryHeap<Reverse<(Instant, u64, JobKey)>>,
    /// Every queued job (ready or waiting), by key.
    queued: HashMap<JobKey, Entry>,
    /// Keys a worker is processing.
    active: HashSet<JobKey>,
    /// Jobs that arrived for an active key; queued when it is done.
    parked: HashMap<JobKey, Job>,
    /// Active keys woken while running: their next wait ends at once.
    woken: HashSet<JobKey>,
    /// Active keys given up while running ([`WorkQueue::evict`]): their next run does not
    /// wait, and comes after fresh work.
    released: HashSet<JobKey>,
    /// Queued jobs waiting in the heap.
    n_delayed: usize,
    /// The last job taken was a retry (see `take_ready`).
    last_was_retry: bool,
    /// When the last resync was taken to run.
    resync_started: Option<Instant>,
    seq: u64,
    closed: bool,
}

impl State {
    fn place(&mut self, job: Job, now: Instant) {
        let key = job.key.clone();
        match job.due().filter(|at| *at > now) {
            Some(at) => {
                self.seq += 1;
                self.n_delayed += 1;
                let seq = self.seq;
                self.delayed.push(Reverse((at, seq, key.clone())));
                self.queued.insert(
                    key,
                    Entry {
                        job,
                        delayed: Some((at, seq)),
                    },
                );
            }
            None => {
                if job.is_retry() {
                    self.retries.push_back((now, key.clone()));
                } else {
                    self.fresh.push_back(key.clone());
                }
                self.queued.insert(key, Entry { job, delayed: None });
            }
        }
    }

    /// Re-places a queued job whose due time may have changed.
    fn replace(&mut self, key: &JobKey, now: Instant) {
        let Some(entry) = self.queued.get(key) else {
            return;
        };
        let Some((at, _)) = entry.delayed else {
            return; // already ready
        };
        if entry.job.due().is_some_and(|due| due == at) {
            return;
        }
        if let Some(entry) = self.queued.remove(key) {
            self.n_delayed -= 1;
            self.place(entry.job, now);
        }
    }

    /// Moves due jobs from the heap to the ready queues; returns the next due time.
    fn promote(&mut self, now: Instant) -> Option<Instant> {
        while let Some(Reverse((at, seq, key))) = self.delayed.peek().cloned() {
            let live = self
                .queued
                .get(&key)
                .is_some_and(|e| e.delayed == Some((at, seq)));
            if !live {
                self.delayed.pop();
                continue;
            }
            if at > now {
                return Some(at);
            }
            self.delayed.pop();
            if let Some(entry) = self.queued.get_mut(&key) {
                self.n_delayed -= 1;
                let retry = entry.job.is_retry();
                entry.delayed = None;
                entry.job.retry_at = None;
                entry.job.not_before = None;
                if retry {
                    self.retries.push_back((now, key));
                } else {
                    self.fresh.push_back(key);
                }
            }
        }
        None
    }

    /// The next ready job: a first attempt, unless none is ready or the oldest retry has
    /// waited too long, and then every other one at most (fresh work keeps at least half of
    /// the workers even behind a long backlog of retries).
    fn take_ready(&mut self, now: Instant) -> Option<JobKey> {
        let retry_overdue = self
            .retries
            .front()
            .is_some_and(|(since, _)| now.saturating_duration_since(*since) >= LOW_MAX_WAIT);
        let retry_turn = self.fresh.is_empty() || (retry_overdue && !self.last_was_retry);
        let key = if retry_turn {
            self.retries.pop_front().map(|(_, k)| k)
        } else {
            None
        };
        self.last_was_retry = key.is_some();
        key.or_else(|| self.fresh.pop_front())
            .or_else(|| self.retries.pop_front().map(|(_, k)| k))
    }

    fn waiting(&self) -> usize {
        self.queued.len() + self.parked.len()
    }

    fn delayed_count(&self) -> usize {
        self.n_delayed
    }
}

/// See the module documentation.
pub struct WorkQueue {
    state: Mutex<State>,
    notify: Notify,
    capacity: usize,
    /// Jobs waiting for a change no watch event has shown yet (`waiters::Waiters` keeps the
    /// count): their share is bounded there, and they leave the capacity to other work.
    unseen: AtomicUsize,
}

impl WorkQueue {
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State::default()),
            notify: Notify::new(),
            capacity: capacity.max(1),
            unseen: AtomicUsize::new(0),
        })
    }

    /// How many jobs wait for a change no watch event has shown yet (see the field).
    pub(super) fn set_unseen(&self, n: usize) {
        self.unseen.store(n, Ordering::Relaxed);
    }

    /// The room for jobs: the capacity, beside the share of jobs waiting for unseen changes.
    fn room(&self) -> usize {
        self.capacity + self.unseen.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock leaves plain data behind; keep going with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The queued jobs (ready or waiting), for tests.
    #[cfg(test)]
    pub fn snapshot(&self) -> Vec<Job> {
        let state = self.lock();
        let mut jobs: Vec<Job> = state.queued.values().map(|e| e.job.clone()).collect();
        jobs.sort_by(|a, b| a.key.cmp(&b.key));
        jobs
    }

    /// Adds a job, merging it into a waiting job with the same key.
    pub fn push(&self, job: Job) -> Pushed {
        let mut st = self.lock();
        if st.closed {
            return Pushed::Dropped;
        }
        let result = Self::push_locked(&mut st, job, self.room(), Instant::now());
        drop(st);
        // Also after a drop: the resync queued in its place may be due before what the
        // workers sleep for.
        self.notify.notify_one();
        result
    }

    fn push_locked(st: &mut State, job: Job, capacity: usize, now: Instant) -> Pushed {
        if st.active.contains(&job.key) {
            return match st.parked.get_mut(&job.key) {
                Some(parked) => {
                    parked.merge(job);
                    Pushed::Coalesced
                }
                None => {
                    if job.key != JobKey::Resync && st.waiting() >= capacity {
                        return Self::drop_for_resync(st, now + DROPPED_SETTLE, now);
                    }
                    st.parked.insert(job.key.clone(), job);
                    // Counted as queued: it will run.
                    Pushed::Queued
                }
            };
        }
        if let Some(entry) = st.queued.get_mut(&job.key) {
            let key = job.key.clone();
            entry.job.merge(job);
            st.replace(&key, now);
            return Pushed::Coalesced;
        }
        if job.key != JobKey::Resync && st.waiting() >= capacity {
            return Self::drop_for_resync(st, now + DROPPED_SETTLE, now);
        }
        st.place(job, now);
        Pushed::Queued
    }

    /// Queues a full resync in place of a dropped job, to start at `earliest`.
    fn drop_for_resync(st: &mut State, earliest: Instant, now: Instant) -> Pushed {
        // The resync always fits (it bypasses the capacity check) and covers the dropped job,
        // once the dropped job's admitted change can have been persisted.
        let mut resync = Job::new(JobKey::Resync, Trigger::Reconciler);
        resync.not_before = Some(earliest.max(now));
        Self::push_locked(st, resync, usize::MAX, now);
        Pushed::Dropped
    }

    /// When the resync covering a job triggered at `since` and given up under a flood may
    /// start: once its change can have been persisted, and [`FLOOD_RESYNC_GAP`] after the
    /// previous resync started (a flood that goes on costs one resync per gap, not one after
    /// the other).
    fn flood_resync_at(st: &State, since: Instant) -> Instant {
        let settled = since + DROPPED_SETTLE;
        match st.resync_started {
            Some(at) => settled.max(at + FLOOD_RESYNC_GAP),
            None => settled,
        }
    }

    /// Waits for the next ready job; `None` once the queue is closed and nothing is ready
    /// (jobs still waiting are dropped then: a restarted copyrator's resync covers them).
    pub async fn pop(&self) -> Option<Job> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let next_due = {
                let mut st = self.lock();
                let now = Instant::now();
                let next_due = st.promote(now);
                if let Some(key) = st.take_ready(now) {
                    let Some(entry) = st.queued.remove(&key) else {
                        continue;
                    };
                    if key == JobKey::Resync {
                        st.resync_started = Some(now);
                    }
                    st.active.insert(key);
                    let more = !st.fresh.is_empty() || !st.retries.is_empty();
                    drop(st);
                    if more {
                        // Wake another worker for the rest.
                        self.notify.notify_one();
                    }
                    return Some(entry.job);
                }
                if st.closed {
                    return None;
                }
                next_due
            };
            match next_due {
                Some(at) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(at.into()) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Marks a popped job finished, or queues it to run again (a retry, a re-check); a job
    /// parked for its key merges in. A job woken while it ran ([`WorkQueue::wake`]) is due at
    /// once.
    pub fn finish(&self, key: &JobKey, next: Finished) -> Pushed {
        let mut st = self.lock();
        let now = Instant::now();
        st.active.remove(key);
        let released = st.released.remove(key);
        let woken = st.woken.remove(key);
        let mut job = match next {
            // A job parked behind this one takes its wake-up: the event it waits for may have
            // arrived (and the waiter that would wake it been used) while this one ran; without
            // it, it would sit until its persistence deadline. (Giving up the running job's
            // wait is not the parked one's: that one waits for a change of its own.)
            Finished::Done => st.parked.remove(key).map(|mut job| {
                if woken && job.retry_at.is_some() {
                    job.retry_at = (job.attempt > 0).then_some(now);
                }
                job
            }),
            Finished::Again { mut job, at } => {
                if released {
                    job.awaited = Awaited::Nothing;
                }
                // Woken: due at once, with the first attempts (see `wake`). Given up: due at
                // once, after fresh work.
                job.retry_at = if woken && job.attempt == 0 {
                    None
                } else {
                    Some(if woken || released { now } else { at })
                };
                if let Some(parked) = st.parked.remove(key) {
                    job.merge(parked);
                }
                Some(job)
            }
        };
        let result = match job.take() {
            Some(job) if st.closed => {
                drop(job);
                Pushed::Dropped
            }
            Some(job) => Self::push_locked(&mut st, job, self.room(), now),
            None => return Pushed::Queued,
        };
        drop(st);
        self.notify.notify_one();
        result
    }

    /// Marks a popped job finished (see [`WorkQueue::finish`]).
    pub fn done(&self, key: &JobKey) {
        self.finish(key, Finished::Done);
    }

    /// Whether an admitted job of `key` waits to run (queued, or parked behind a running one of
    /// its key): it has not read yet, so it will see whatever is persisted now.
    pub fn admitted_waiting(&self, key: &JobKey) -> bool {
        let st = self.lock();
        st.queued
            .get(key)
            .is_some_and(|e| e.job.trigger == Trigger::Admission)
            || st
                .parked
                .get(key)
                .is_some_and(|j| j.trigger == Trigger::Admission)
    }

    /// Whether a job of `key` runs now, or is due to run within `within` (queued ready, or
    /// waiting for a time that close): not a retry waiting out its backoff, nor a job waiting
    /// for an admitted change that is not persisted yet (which may never be).
    pub fn in_flight(&self, key: &JobKey, within: Duration) -> bool {
        let st = self.lock();
        let soon = Instant::now() + within;
        st.active.contains(key)
            || st
                .queued
                .get(key)
                .is_some_and(|e| e.delayed.is_none_or(|(at, _)| at <= soon))
    }

    /// Ends the wait of a queued job at once (what it waited for happened): it runs with the
    /// first attempts, not after the retries; a job running now runs again at once if it asks
    /// to wait.
    pub fn wake(&self, key: &JobKey) {
        let mut st = self.lock();
        if st.active.contains(key) {
            st.woken.insert(key.clone());
            return;
        }
        let now = Instant::now();
        if let Some(entry) = st.queued.get_mut(key)
            && entry.delayed.is_some()
            && entry.job.retry_at.is_some()
            && entry.job.attempt == 0
        {
            entry.job.retry_at = None;
            st.replace(key, now);
            drop(st);
            self.notify.notify_one();
        }
    }

    /// Gives up the wait of the job of `key` for an admitted change no watch event has shown,
    /// to make room in the share of such jobs (`waiters::Waiters`, under a flood of reviews of
    /// changes that never happen). Waiting in the queue, or parked behind a running job of its
    /// key, it is dropped and a full resync queued in its place, to start once its change can
    /// have been persisted (and [`FLOOD_RESYNC_GAP`] after the previous one started): if it was
    /// real, nothing is lost, and a flood costs a resync every few seconds, not a read per
    /// review. Ready or running, it acts on what is persisted without waiting any
    /// longer, after fresh work.
    pub fn evict(&self, key: &JobKey) -> Evicted {
        let mut st = self.lock();
        let now = Instant::now();
        let evicted = if st.active.contains(key) {
            match st.parked.get(key) {
                Some(parked) if parked.awaited != Awaited::Nothing => {
                    let at = Self::flood_resync_at(&st, parked.since);
                    st.parked.remove(key);
                    Self::drop_for_resync(&mut st, at, now);
                    Evicted::Dropped
                }
                _ => {
                    st.released.insert(key.clone());
                    Evicted::Released
                }
            }
        } else {
            match st.queued.get_mut(key) {
                Some(entry) if entry.job.awaited == Awaited::Nothing => Evicted::Absent,
                Some(entry) if entry.delayed.is_some() => {
                    let since = entry.job.since;
                    st.queued.remove(key);
                    // Its heap entry is stale now (`promote` skips it).
                    st.n_delayed -= 1;
                    let at = Self::flood_resync_at(&st, since);
                    Self::drop_for_resync(&mut st, at, now);
                    Evicted::Dropped
                }
                Some(entry) => {
                    entry.job.awaited = Awaited::Nothing;
                    Evicted::Released
                }
                None => Evicted::Absent,
            }
        };
        drop(st);
        if evicted == Evicted::Dropped {
            // The resync may be due before what the workers sleep for.
            self.notify.notify_one();
        }
        evicted
    }

    /// Jobs queued, waiting or parked behind a running job of the same key.
    pub fn depth(&self) -> usize {
        self.lock().waiting()
    }

    /// Of those, the ones waiting for a due time.
    pub fn delayed(&self) -> usize {
        self.lock().delayed_count()
    }

    /// Jobs waiting or running.
    pub fn pending(&self) -> usize {
        let st = self.lock();
        st.waiting() + st.active.len()
    }

    /// Stops accepting jobs; workers drain what is ready and then see `None`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.notify.notify_waiters();
    }
}

/// Queues `job`, counting coalesced and dropped jobs.
pub fn enqueue(queue: &WorkQueue, metrics: &Metrics, job: Job) {
    let kind = job.key.kind();
    count(metrics, kind, queue.push(job));
    metrics.queue_depth.set(queue.depth() as i64);
}

/// Counts what became of a push of a job of `kind` ([`JobKey::kind`]).
pub fn count(metrics: &Metrics, kind: &'static str, pushed: Pushed) {
    match pushed {
        Pushed::Queued => {}
        Pushed::Coalesced => {
            metrics.queue_coalesced.inc();
        }
        Pushed::Dropped => {
            metrics.queue_dropped.inc();
            metrics
                .jobs_dropped
                .get_or_create(&DroppedLabels {
                    kind,
                    reason: "queue_full",
                })
                .inc();
            tracing::warn!("work queue full: job dropped, full resync scheduled");
        }
    }
}

/// How long after a dropped admission job its resync starts at the earliest.
pub const DROPPED_SETTLE: Duration = Duration::from_secs(1);

/// Under a flood of reviews of changes that never happen, the resync covering the jobs given
/// up starts no sooner than this after the previous resync started.
pub const FLOOD_RESYNC_GAP: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Kind, ObjectKey};

    fn source(name: &str) -> Job {
        Job::new(
            JobKey::Source(ObjectKey::new(Kind::Secret, "ns", name)),
            Trigger::Admission,
        )
    }

    async fn pop_now(q: &WorkQueue) -> Option<Job> {
        tokio::time::timeout(Duration::from_millis(20), q.pop())
            .await
            .ok()
            .flatten()
    }

    #[tokio::test]
    async fn burst_for_one_key_coalesces_into_one_job() {
        let q = WorkQueue::new(10);
        assert_eq!(q.push(source("a")), Pushed::Queued);
        for _ in 0..99 {
            assert_eq!(q.push(source("a")), Pushed::Coalesced);
        }
        assert_eq!(q.depth(), 1);
        let job = q.pop().await.unwrap();
        assert_eq!(job.key, source("a").key);
        q.done(&job.key);
        assert_eq!(q.depth(), 0);
    }

    /// A namespace created and labelled a moment later: the label's job joins the queued
    /// second look of the create's job, and runs at once, not when the second look is due.
    #[tokio::test]
    async fn an_admitted_change_joining_a_queued_second_look_is_not_held_back() {
        let q = WorkQueue::new(10);
        let key = JobKey::Namespace("team-a".into());
        let mut second = Job::new(key.clone(), Trigger::SecondLook);
        second.not_before = Some(Instant::now() + Duration::from_secs(60));
        q.push(second.clone());
        assert!(pop_now(&q).await.is_none(), "the second look waits");
        assert_eq!(
            q.push(Job::new(key.clone(), Trigger::Admission)),
            Pushed::Coalesced
        );
        let job = pop_now(&q).await.expect("the admitted change runs at once");
        assert_eq!(job.trigger, Trigger::Admission);
        q.done(&job.key);
        // The other way round: a second look joining a queued admitted change.
        q.push(Job::new(key.clone(), Trigger::Admission));
        assert_eq!(q.push(second), Pushed::Coalesced);
        let job = pop_now(&q).await.expect("not held back either");
        q.done(&job.key);
    }

    #[tokio::test]
    async fn job_arriving_while_its_key_runs_runs_once_more_afterwards() {
        let q = WorkQueue::new(10);
        q.push(source("a"));
        let running = q.pop().await.unwrap();
        assert_eq!(q.push(source("a")), Pushed::Queued);
        assert_eq!(q.push(source("a")), Pushed::Coalesced);
        // Not handed to a second worker while the first runs.
        assert!(pop_now(&q).await.is_none());
        q.done(&running.key);
        let again = q.pop().await.unwrap();
        assert_eq!(again.key, running.key);
        q.done(&again.key);
        assert_eq!(q.pending(), 0);
    }

    #[tokio::test]
    async fn full_queue_drops_and_queues_a_resync_instead() {
        let q = WorkQueue::new(2);
        q.push(source("a"));
        q.push(source("b"));
        assert_eq!(q.push(source("c")), Pushed::Dropped);
        let last_drop = Instant::now();
        assert_eq!(q.push(source("d")), Pushed::Dropped);
        let first = [q.pop().await.unwrap(), q.pop().await.unwrap()];
        assert!(first.iter().all(|j| j.key != JobKey::Resync));
        // The resync waits (in the queue, counted) until the last dropped change can have
        // been persisted.
        assert_eq!(q.depth(), 1);
        assert_eq!(q.delayed(), 1);
        assert!(pop_now(&q).await.is_none(), "not due yet");
        let resync = q.pop().await.unwrap();
        assert_eq!(resync.key, JobKey::Resync);
        assert!(Instant::now() >= last_drop + DROPPED_SETTLE);
        assert_eq!(q.depth(), 0, "one resync covers every dropped job");

        // A drop while that resync runs queues another one after it, again with the wait.
        for j in &first {
            q.done(&j.key);
        }
        q.push(source("e"));
        q.push(source("f"));
        let dropped_during = Instant::now();
        assert_eq!(q.push(source("g")), Pushed::Dropped);
        q.done(&JobKey::Resync);
        let mut keys = Vec::new();
        for _ in 0..3 {
            let j = q.pop().await.unwrap();
            keys.push(j.key.clone());
            q.done(&j.key);
        }
        assert_eq!(keys[2], JobKey::Resync);
        assert!(Instant::now() >= dropped_during + DROPPED_SETTLE);
    }

    #[tokio::test]
    async fn merge_keeps_oldest_trigger_time_and_newest_awaited_state() {
        let q = WorkQueue::new(10);
        let first = source("a").awaiting(Awaited::ChangedFrom("1".into()));
        let since = first.since;
        q.push(first);
        q.push(source("a").awaiting(Awaited::ChangedFrom("2".into())));
        q.push(source("a"));
        let job = q.pop().await.unwrap();
        assert_eq!(job.since, since);
        assert_eq!(job.awaited, Awaited::ChangedFrom("2".into()));
    }

    #[tokio::test]
    async fn a_waiting_job_stays_in_the_queue_until_due_or_woken() {
        let q = WorkQueue::new(10);
        q.push(source("a"));
        let job = q.pop().await.unwrap();
        let key = job.key.clone();
        let at = Instant::now() + Duration::from_secs(60);
        assert_eq!(q.finish(&key, Finished::Again { job, at }), Pushed::Queued);
        assert_eq!((q.depth(), q.delayed()), (1, 1), "counted while it waits");
        assert!(pop_now(&q).await.is_none());
        q.wake(&key);
        let job = pop_now(&q).await.expect("woken: due at once");
        assert_eq!(job.key, key);

        // Woken while it runs: its next wait ends at once.
        q.wake(&key);
        q.finish(&key, Finished::Again { job, at });
        assert!(pop_now(&q).await.is_some());
    }

    /// A trigger parked behind a running job of its key, waiting for its change to be
    /// persisted: the wake-up for that change arrives while the first job still runs. The
    /// first job finishing must not swallow it (the parked job sat until its deadline).
    #[tokio::test]
    async fn a_wake_while_another_job_of_the_key_runs_reaches_the_parked_one() {
        let q = WorkQueue::new(10);
        q.push(source("a"));
        let running = q.pop().await.unwrap();
        let key = running.key.clone();
        let mut waiting = source("a").awaiting(Awaited::ChangedFrom("1".into()));
        waiting.retry_at = Some(Instant::now() + Duration::from_secs(60));
        assert_eq!(
            q.push(waiting),
            Pushed::Queued,
            "parked behind the running job"
        );
        q.wake(&key);
        q.done(&key);
        let job = pop_now(&q).await.expect("woken: due at once");
        assert_eq!(job.awaited, Awaited::ChangedFrom("1".into()));
        q.done(&key);

        // Without a wake-up it keeps waiting.
        q.push(source("a"));
        let running = q.pop().await.unwrap();
        let mut waiting = source("a").awaiting(Awaited::ChangedFrom("2".into()));
        waiting.retry_at = Some(Instant::now() + Duration::from_secs(60));
        q.push(waiting);
        q.done(&running.key);
        assert!(pop_now(&q).await.is_none(), "not woken: waits");
    }

    #[tokio::test]
    async fn a_retry_due_soon_runs_by_itself() {
        let q = WorkQueue::new(10);
        q.push(source("a"));
        let job = q.pop().await.unwrap();
        let key = job.key.clone();
        let at = Instant::now() + Duration::from_millis(30);
        q.finish(&key, Finished::Again { job, at });
        let again = tokio::time::timeout(Duration::from_secs(2), q.pop())
            .await
            .unwrap()
            .unwrap();
        assert!(Instant::now() >= at);
        assert_eq!(again.key, key);
    }

    #[tokio::test]
    async fn a_fresh_trigger_ends_a_retry_backoff_but_not_a_resync_delay() {
        let q = WorkQueue::new(10);
        q.push(source("a"));
        let job = q.pop().await.unwrap();
        let key = job.key.clone();
        let mut retry = job.clone();
        retry.attempt = 1;
        q.finish(
            &key,
            Finished::Again {
                job: retry,
                at: Instant::now() + Duration::from_secs(60),
            },
        );
        assert_eq!(q.push(source("a")), Pushed::Coalesced);
        assert!(pop_now(&q).await.is_some(), "due at once");

        let mut resync = Job::new(JobKey::Resync, Trigger::Reconciler);
        resync.not_before = Some(Instant::now() + Duration::from_secs(60));
        q.push(resync);
        q.push(Job::new(JobKey::Resync, Trigger::Reconciler));
        assert!(pop_now(&q).await.is_none(), "the earliest start holds");
    }

    #[tokio::test]
    async fn fresh_work_runs_before_retries_until_they_waited_too_long() {
        let q = WorkQueue::new(100);
        for name in ["r1", "r2"] {
            q.push(source(name));
            let mut job = q.pop().await.unwrap();
            job.attempt = 1;
            let key = job.key.clone();
            q.finish(
                &key,
                Finished::Again {
                    job,
                    at: Instant::now(),
                },
            );
        }
        q.push(source("fresh"));
        assert_eq!(q.pop().await.unwrap().key, source("fresh").key);
        tokio::time::sleep(LOW_MAX_WAIT).await;
        q.push(source("fresh-2"));
        q.push(source("fresh-3"));
        let order: Vec<JobKey> = [q.pop().await, q.pop().await, q.pop().await]
            .into_iter()
            .map(|j| j.unwrap().key)
            .collect();
        assert_eq!(
            order,
            [source("r1").key, source("fresh-2").key, source("r2").key],
            "a retry ready for long enough goes first, then every other job at most"
        );
    }

    #[tokio::test]
    async fn waiting_jobs_count_toward_the_capacity_and_go_with_close() {
        let q = WorkQueue::new(1);
        q.push(source("a"));
        let job = q.pop().await.unwrap();
        let key = job.key.clone();
        q.finish(
            &key,
            Finished::Again {
                job,
                at: Instant::now() + Duration::from_secs(60),
            },
        );
        assert_eq!(q.push(source("b")), Pushed::Dropped);
        q.close();
        assert!(
            q.pop().await.is_none(),
            "waiting jobs are not run after close"
        );
    }

    fn waiting(name: &str) -> Job {
        let mut job = source(name).awaiting(Awaited::Exists);
        job.retry_at = Some(job.since + Duration::from_secs(5));
        job
    }

    /// A job given up under a flood (`evict`): waiting in the queue or parked behind a running
    /// job of its key, it is dropped and one resync covers it once its change can have been
    /// persisted; running, it runs again at once on what is persisted, after fresh work.
    #[tokio::test]
    async fn a_job_given_up_is_dropped_if_it_waits_else_acts_after_fresh_work() {
        let q = WorkQueue::new(10);
        let first = waiting("a");
        q.push(first.clone());
        assert_eq!(q.evict(&first.key), Evicted::Dropped);
        assert_eq!(q.evict(&first.key), Evicted::Absent);
        let queued = q.snapshot();
        assert_eq!(queued.len(), 1);
        assert_eq!(queued[0].key, JobKey::Resync);
        assert_eq!(queued[0].not_before, Some(first.since + DROPPED_SETTLE));
        assert_eq!(
            q.delayed(),
            1,
            "the dropped job's heap entry no longer counts"
        );

        // Parked behind a running job of its key: the parked one goes.
        q.push(source("b"));
        let running = q.pop().await.unwrap();
        assert_eq!(q.push(waiting("b")), Pushed::Queued);
        assert_eq!(q.evict(&running.key), Evicted::Dropped);
        q.done(&running.key);
        assert!(pop_now(&q).await.is_none(), "nothing parked any more");

        // Running: it runs again at once, on what is persisted, after fresh work.
        q.push(waiting("c"));
        q.wake(&source("c").key);
        let running = q.pop().await.unwrap();
        assert_eq!(q.evict(&running.key), Evicted::Released);
        q.push(source("fresh"));
        let key = running.key.clone();
        let at = Instant::now() + Duration::from_secs(60);
        q.finish(&key, Finished::Again { job: running, at });
        assert_eq!(pop_now(&q).await.unwrap().key, source("fresh").key);
        let again = pop_now(&q).await.expect("not held until its deadline");
        assert_eq!(again.key, key);
        assert_eq!(again.awaited, Awaited::Nothing);
    }

    /// Under a flood that goes on, jobs keep giving way: the resync covering them waits for the
    /// gap after the previous one, instead of running again as soon as that one ends.
    #[tokio::test]
    async fn a_flood_costs_one_resync_per_gap() {
        let q = WorkQueue::new(10);
        q.push(Job::new(JobKey::Resync, Trigger::Reconciler));
        let started = Instant::now();
        let resync = q.pop().await.unwrap();
        let mut old = waiting("a");
        old.since = started - Duration::from_secs(3);
        q.push(old.clone());
        assert_eq!(q.evict(&old.key), Evicted::Dropped);
        q.done(&resync.key);
        let next = q.snapshot();
        assert_eq!(next.len(), 1);
        assert!(next[0].not_before.unwrap() >= started + FLOOD_RESYNC_GAP);
    }

    /// The only thing a drop queues is a resync due later: the workers must still wake for it.
    #[tokio::test]
    async fn the_resync_of_a_drop_runs_without_another_push() {
        let q = WorkQueue::new(10);
        let worker = {
            let q = Arc::clone(&q);
            tokio::spawn(async move { q.pop().await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        let mut old = waiting("a");
        old.since = Instant::now() - DROPPED_SETTLE;
        q.push(old.clone());
        q.evict(&old.key);
        let job = tokio::time::timeout(Duration::from_millis(500), worker)
            .await
            .expect("the resync ran")
            .unwrap()
            .unwrap();
        assert_eq!(job.key, JobKey::Resync);
    }

    #[tokio::test]
    async fn close_wakes_idle_workers() {
        let q = WorkQueue::new(10);
        let waiter = {
            let q = Arc::clone(&q);
            tokio::spawn(async move { q.pop().await })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        q.close();
        assert!(waiter.await.unwrap().is_none());
    }
}
