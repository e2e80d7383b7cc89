//! The bounded, coalescing work queue between triggers (admission, reconciler, retries) and
//! the workers.
//!
//! Jobs are keyed by what they sync; a job whose key is already queued merges into it (a burst
//! of 100 updates to one source is one fan-out, or two when the burst straddles a running
//! job). A key is never processed by two workers at once: a job arriving for a key being
//! processed waits and runs once more afterwards. When the queue is full, the job is dropped
//! and a full resync is queued instead, which always fits: nothing is lost (SPEC §4.8).

use std::{
    collections::{HashMap, HashSet, VecDeque},
    fmt,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use tokio::sync::Notify;

use crate::model::ObjectKey;

/// What a job syncs. Jobs with equal keys coalesce.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobKey {
    /// Every copy of one source.
    Source(ObjectKey),
    /// Every copy that should or does live in one namespace.
    Namespace(String),
    /// One copy (changed or deleted by someone else).
    Copy(ObjectKey),
    /// Every copy of one CopyRule, and its status.
    Rule(String),
    /// Everything.
    Resync,
}

impl JobKey {
    /// Short kind name for metrics labels.
    pub fn kind(&self) -> &'static str {
        match self {
            JobKey::Source(_) => "source",
            JobKey::Namespace(_) => "namespace",
            JobKey::Copy(_) => "copy",
            JobKey::Rule(_) => "rule",
            JobKey::Resync => "resync",
        }
    }
}

impl fmt::Display for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobKey::Source(k) => write!(f, "source {k}"),
            JobKey::Namespace(n) => write!(f, "namespace {n}"),
            JobKey::Copy(k) => write!(f, "copy {k}"),
            JobKey::Rule(n) => write!(f, "rule {n}"),
            JobKey::Resync => f.write_str("resync"),
        }
    }
}

/// What an admission request told us about the state a job must wait for: admission happens
/// before the change is persisted, and the change may never be (SPEC §4.6).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Awaited {
    #[default]
    Nothing,
    /// CREATE: wait until the object exists.
    Exists,
    /// UPDATE: wait until the persisted resourceVersion is no longer this one.
    ChangedFrom(String),
    /// DELETE: wait until the object is gone (or being deleted).
    Gone,
}

/// What triggered a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    Admission,
    Reconciler,
    /// Follow-up work queued by another job (e.g. a rule's status after its copies changed).
    FollowUp,
    /// The same job once more, a moment after an admission-triggered run, with the API
    /// server's watch cache caught up (see `sync::after`).
    SecondLook,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Admission => "admission",
            Trigger::Reconciler => "reconciler",
            Trigger::FollowUp => "follow-up",
            Trigger::SecondLook => "second-look",
        }
    }
}

/// A unit of work.
#[derive(Clone, Debug)]
pub struct Job {
    pub key: JobKey,
    pub awaited: Awaited,
    pub trigger: Trigger,
    /// When the oldest trigger merged into this job happened (for the copy-lag metric).
    pub since: Instant,
    /// Retries so far (0 for a fresh trigger).
    pub attempt: u32,
    /// For rule jobs: also look for the rule's copies of sources it no longer selects
    /// (after the rule itself changed). Merged by OR.
    pub full_scan: bool,
    /// Do not start before this instant (merged by max). A resync standing in for dropped
    /// admission jobs waits until their changes had time to be persisted: run at once, it
    /// could list the cluster before them and miss them (SPEC §4.6, §4.8).
    pub not_before: Option<Instant>,
}

impl Job {
    pub fn new(key: JobKey, trigger: Trigger) -> Self {
        Self {
            key,
            awaited: Awaited::Nothing,
            trigger,
            since: Instant::now(),
            attempt: 0,
            full_scan: false,
            not_before: None,
        }
    }

    pub fn awaiting(mut self, awaited: Awaited) -> Self {
        self.awaited = awaited;
        self
    }

    pub fn full_scan(mut self) -> Self {
        self.full_scan = true;
        self
    }

    /// Folds a newer trigger for the same key into this job.
    fn merge(&mut self, newer: Job) {
        // The newest admitted change is the one worth waiting for.
        if newer.awaited != Awaited::Nothing {
            self.awaited = newer.awaited;
        }
        self.since = self.since.min(newer.since);
        self.attempt = self.attempt.min(newer.attempt);
        self.full_scan |= newer.full_scan;
        self.not_before = self.not_before.max(newer.not_before);
        if newer.trigger == Trigger::Admission {
            self.trigger = Trigger::Admission;
        }
    }
}

/// Result of [`WorkQueue::push`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushed {
    Queued,
    /// Merged into a job with the same key that was already waiting.
    Coalesced,
    /// The queue was full: dropped, and a full resync queued in its place.
    Dropped,
}

#[derive(Default)]
struct State {
    ready: VecDeque<JobKey>,
    /// Queued jobs, by key (each key appears in `ready` exactly once).
    queued: HashMap<JobKey, Job>,
    /// Keys a worker is processing.
    active: HashSet<JobKey>,
    /// Jobs that arrived for an active key; queued when it is done.
    parked: HashMap<JobKey, Job>,
    closed: bool,
}

/// See the module documentation.
pub struct WorkQueue {
    state: Mutex<State>,
    notify: Notify,
    capacity: usize,
}

impl WorkQueue {
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State::default()),
            notify: Notify::new(),
            capacity: capacity.max(1),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding this lock leaves plain data behind; keep going with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a job, merging it into a waiting job with the same key.
    pub fn push(&self, job: Job) -> Pushed {
        let mut st = self.lock();
        if st.closed {
            return Pushed::Dropped;
        }
        let result = Self::push_locked(&mut st, job, self.capacity);
        drop(st);
        if result == Pushed::Queued {
            self.notify.notify_one();
        }
        result
    }

    fn push_locked(st: &mut State, job: Job, capacity: usize) -> Pushed {
        if st.active.contains(&job.key) {
            return match st.parked.get_mut(&job.key) {
                Some(parked) => {
                    parked.merge(job);
                    Pushed::Coalesced
                }
                None => {
                    if job.key != JobKey::Resync && st.queued.len() + st.parked.len() >= capacity {
                        return Self::drop_for_resync(st, capacity);
                    }
                    st.parked.insert(job.key.clone(), job);
                    // Counted as queued: it will run.
                    Pushed::Queued
                }
            };
        }
        if let Some(queued) = st.queued.get_mut(&job.key) {
            queued.merge(job);
            return Pushed::Coalesced;
        }
        if job.key != JobKey::Resync && st.queued.len() + st.parked.len() >= capacity {
            return Self::drop_for_resync(st, capacity);
        }
        st.ready.push_back(job.key.clone());
        st.queued.insert(job.key.clone(), job);
        Pushed::Queued
    }

    fn drop_for_resync(st: &mut State, capacity: usize) -> Pushed {
        // The resync always fits (it bypasses the capacity check) and covers the dropped job,
        // once the dropped job's admitted change can have been persisted.
        let mut resync = Job::new(JobKey::Resync, Trigger::Reconciler);
        resync.not_before = Some(Instant::now() + DROPPED_SETTLE);
        Self::push_locked(st, resync, capacity);
        Pushed::Dropped
    }

    /// Waits for the next job; `None` once the queue is closed and drained.
    pub async fn pop(&self) -> Option<Job> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = self.lock();
                if let Some(key) = st.ready.pop_front() {
                    let job = st.queued.remove(&key);
                    st.active.insert(key);
                    let more = !st.ready.is_empty();
                    drop(st);
                    if more {
                        // Wake another worker for the rest.
                        self.notify.notify_one();
                    }
                    if let Some(job) = job {
                        return Some(job);
                    }
                    continue;
                }
                if st.closed {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Marks a popped job finished; a job parked for its key becomes ready.
    pub fn done(&self, key: &JobKey) {
        let mut st = self.lock();
        st.active.remove(key);
        if let Some(job) = st.parked.remove(key) {
            st.ready.push_back(job.key.clone());
            st.queued.insert(job.key.clone(), job);
            drop(st);
            self.notify.notify_one();
        }
    }

    /// Queues `job` again after `delay` (retry with backoff).
    pub fn push_after(self: &Arc<Self>, job: Job, delay: Duration) {
        let queue = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            queue.push(job);
        });
    }

    /// Jobs waiting (queued or parked behind a running job of the same key).
    pub fn depth(&self) -> usize {
        let st = self.lock();
        st.queued.len() + st.parked.len()
    }

    /// Jobs waiting or running.
    pub fn pending(&self) -> usize {
        let st = self.lock();
        st.queued.len() + st.parked.len() + st.active.len()
    }

    /// Stops accepting jobs; workers drain what is queued and then see `None`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.notify.notify_waiters();
    }
}

/// How long after a dropped admission job its resync starts at the earliest.
pub const DROPPED_SETTLE: Duration = Duration::from_secs(1);

/// Exponential backoff for retries: 50 ms doubling to 10 s.
pub fn retry_delay(attempt: u32) -> Duration {
    let ms = 50u64.saturating_mul(1u64 << attempt.min(8));
    Duration::from_millis(ms.min(10_000))
}

/// A clock reading helper for lag measurements.
pub fn elapsed_since(since: Instant) -> Duration {
    Instant::now().saturating_duration_since(since)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Kind;

    fn source(name: &str) -> Job {
        Job::new(
            JobKey::Source(ObjectKey::new(Kind::Secret, "ns", name)),
            Trigger::Admission,
        )
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

    #[tokio::test]
    async fn job_arriving_while_its_key_runs_runs_once_more_afterwards() {
        let q = WorkQueue::new(10);
        q.push(source("a"));
        let running = q.pop().await.unwrap();
        assert_eq!(q.push(source("a")), Pushed::Queued);
        assert_eq!(q.push(source("a")), Pushed::Coalesced);
        // Not handed to a second worker while the first runs.
        assert!(
            tokio::time::timeout(Duration::from_millis(20), q.pop())
                .await
                .is_err()
        );
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
        let jobs: Vec<Job> = vec![
            q.pop().await.unwrap(),
            q.pop().await.unwrap(),
            q.pop().await.unwrap(),
        ];
        assert_eq!(jobs[2].key, JobKey::Resync);
        assert_eq!(q.depth(), 0, "one resync covers every dropped job");
        // It waits until the last dropped change can have been persisted.
        assert!(jobs[2].not_before.unwrap() >= last_drop + DROPPED_SETTLE);
        assert_eq!(jobs[0].not_before, None, "other jobs start at once");

        // A drop while that resync runs queues another one after it, again with the wait.
        q.push(source("e"));
        q.push(source("f"));
        let dropped_during = Instant::now();
        assert_eq!(q.push(source("g")), Pushed::Dropped);
        q.done(&JobKey::Resync);
        let mut next = Vec::new();
        for _ in 0..3 {
            next.push(q.pop().await.unwrap());
        }
        let resync = next.iter().find(|j| j.key == JobKey::Resync).unwrap();
        assert!(resync.not_before.unwrap() >= dropped_during + DROPPED_SETTLE);
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

    #[test]
    fn retry_delay_grows_and_caps() {
        assert_eq!(retry_delay(0), Duration::from_millis(50));
        assert_eq!(retry_delay(1), Duration::from_millis(100));
        assert_eq!(retry_delay(20), Duration::from_secs(10));
    }
}
