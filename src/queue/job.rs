//! What a job is: the key it coalesces on, what triggered it, what admitted change it waits
//! for, and its attempt count and backoff.

use std::{
    fmt,
    time::{Duration, Instant},
};

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
    /// A watch event (a copy deleted or edited by someone else).
    Watch,
    /// A Pod about to be admitted into a namespace not known to be settled (SPEC §10).
    PodGate,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Admission => "admission",
            Trigger::Reconciler => "reconciler",
            Trigger::FollowUp => "follow-up",
            Trigger::SecondLook => "second-look",
            Trigger::Watch => "watch",
            Trigger::PodGate => "pod-gate",
        }
    }
}

/// A unit of work.
#[derive(Clone, Debug)]
pub struct Job {
    pub key: JobKey,
    pub awaited: Awaited,
    pub trigger: Trigger,
    /// When the oldest trigger merged into this job happened (for the copy-lag metric and the
    /// deadline of persistence waits).
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
    /// Backoff of a retry or of a re-check for persistence; a fresh trigger merged into the
    /// job makes it due at once.
    pub retry_at: Option<Instant>,
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
            retry_at: None,
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

    /// When the job may run.
    pub(super) fn due(&self) -> Option<Instant> {
        match (self.not_before, self.retry_at) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// First attempts run before retries and re-checks.
    pub(super) fn is_retry(&self) -> bool {
        self.retry_at.is_some() || self.attempt > 0
    }

    /// Folds a newer trigger for the same key into this job.
    pub(super) fn merge(&mut self, newer: Job) {
        // The newest admitted change is the one worth waiting for.
        if newer.awaited != Awaited::Nothing {
            self.awaited = newer.awaited;
        }
        self.since = self.since.min(newer.since);
        self.attempt = self.attempt.min(newer.attempt);
        self.full_scan |= newer.full_scan;
        // An admitted change is not held back by the second look it joins (a namespace
        // created, then labelled a moment later, would get its copies a second late): it runs
        // as soon as it may, and once it has run it schedules a second look of its own
        // (`sync::follow_up::after`). Otherwise the later of the two waits wins.
        //
        // A status follow-up waits a moment so that the follow-ups of many jobs become one
        // (`sync::follow_up::after`): the first one's wait holds, and a trigger of any other
        // kind is not held back by it.
        self.not_before = match (self.trigger, newer.trigger) {
            (Trigger::SecondLook, Trigger::Admission) => newer.not_before,
            (Trigger::Admission, Trigger::SecondLook) => self.not_before,
            (Trigger::FollowUp, Trigger::FollowUp) => self.not_before.min(newer.not_before),
            (Trigger::FollowUp, _) => newer.not_before,
            (_, Trigger::FollowUp) => self.not_before,
            _ => self.not_before.max(newer.not_before),
        };
        self.retry_at = match (self.retry_at, newer.retry_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            _ => None,
        };
        if newer.trigger == Trigger::Admission {
            self.trigger = Trigger::Admission;
        }
    }
}

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

    #[test]
    fn status_follow_ups_become_one_without_holding_back_other_triggers() {
        let now = Instant::now();
        let later = |ms| {
            let mut job = Job::new(JobKey::Rule("r".into()), Trigger::FollowUp);
            job.not_before = Some(now + Duration::from_millis(ms));
            job
        };
        // The first follow-up's wait holds: a storm of them does not postpone the status.
        let mut job = later(1_000);
        job.merge(later(1_500));
        assert_eq!(job.not_before, Some(now + Duration::from_millis(1_000)));
        // A change of the rule itself runs at once, whichever came first.
        for newer in [Trigger::Admission, Trigger::Watch, Trigger::Reconciler] {
            let mut job = later(1_000);
            job.merge(Job::new(JobKey::Rule("r".into()), newer));
            assert_eq!(job.not_before, None, "{newer:?}");
            let mut job = Job::new(JobKey::Rule("r".into()), newer);
            job.merge(later(1_000));
            assert_eq!(job.not_before, None, "{newer:?}");
        }
        // A follow-up that must run now (a re-check) is not held back by a status one.
        let mut job = later(1_000);
        job.merge(Job::new(JobKey::Rule("r".into()), Trigger::FollowUp));
        assert_eq!(job.not_before, None);
    }

    #[test]
    fn retry_delay_grows_and_caps() {
        assert_eq!(retry_delay(0), Duration::from_millis(50));
        assert_eq!(retry_delay(1), Duration::from_millis(100));
        assert_eq!(retry_delay(20), Duration::from_secs(10));
    }
}
