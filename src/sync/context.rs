//! What every job needs, one per process and shared by all workers: the API, Events, metrics,
//! the queue and its waiters, the settings, and a few small caches.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use moka::sync::Cache;

use crate::{
    cluster::{Cluster, apply::WriteBudget},
    copyrule::CopyRuleStatus,
    metrics::Metrics,
    model::{ObjectKey, Payload, SourceInfo},
    plan::Policy,
    report::events::Events,
};
use crate::{
    freshness::{ready::ReadyIndex, waiters::Waiters},
    queue::WorkQueue,
};

/// Most namespaces the Pod gate remembers as settled (~100 bytes each).
const READY_CAPACITY: u64 = 100_000;

/// `--unlabelled-scan-interval`'s default.
pub const DEFAULT_UNLABELLED_SCAN: Duration = Duration::from_secs(3600);

/// Settings the sync logic needs.
#[derive(Clone, Debug)]
pub struct SyncSettings {
    /// Exclusions and trust (`--exclude-namespaces`, `--trusted-namespaces`).
    pub policy: Policy,
    /// Concurrent writes per job (`--fanout-concurrency`).
    pub fanout_concurrency: usize,
    /// Bytes of copy writes in flight across all jobs (`--fanout-bytes`).
    pub fanout_bytes: usize,
    /// Least time between a new namespace's watch event and the first write into it
    /// (`--new-namespace-delay`).
    pub new_namespace_delay: std::time::Duration,
    /// Namespaces a full resync plans and writes at a time ([`RESYNC_CHUNK`]).
    pub resync_chunk: usize,
}

/// Namespaces a full resync plans and writes at a time: what planning holds is one chunk's
/// claims and actions, not the cluster's (SPEC §5). At 5,000 namespaces and 8,000 copies a
/// resync planned at once held ~3 MB for them (heaptrack, BENCHMARKS.md, memory).
pub const RESYNC_CHUNK: usize = 500;

/// Everything a job needs; one per process, shared by all workers.
pub struct Context {
    /// API calls, and the indexes the watches keep (`crate::freshness`).
    pub cluster: Cluster,
    pub events: Events,
    pub metrics: Arc<Metrics>,
    pub queue: Arc<WorkQueue>,
    /// Jobs waiting for admitted changes to be persisted.
    pub waiters: Arc<Waiters>,
    /// Namespaces known to hold every copy they should (the Pod gate's memory).
    pub ready: Arc<ReadyIndex>,
    pub settings: SyncSettings,
    /// What jobs remember between runs, each bounded.
    pub caches: Caches,
    /// Bytes of copy writes in flight, across all jobs (see `apply.rs`).
    pub write_budget: WriteBudget,
    /// Completed full resyncs (readiness waits for the first; the leader publishes the last
    /// on its Lease).
    pub resyncs: tokio::sync::watch::Sender<Resyncs>,
    /// Whether this replica leads: only the leader's resyncs vouch for every copy in the
    /// CopyRules' status (`lastVerifiedTime`), so replicas never write it in turn.
    pub leading: tokio::sync::watch::Receiver<bool>,
    /// When resyncs look for sources that are not opted in (`--unlabelled-scan-interval`).
    pub unlabelled_scan: Periodic,
}

/// The full resyncs this replica completed.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Resyncs {
    pub completed: u64,
    /// When the last completed one began reading the cluster.
    pub last_started: Option<k8s_openapi::jiff::Timestamp>,
}

/// What jobs remember between runs. Each is bounded, and losing any entry costs a read, never
/// a wrong write.
pub struct Caches {
    /// Content hash of a source at a resourceVersion: lets a resync decide "in sync" from
    /// metadata alone. One small entry per source.
    pub source_hashes: Cache<(ObjectKey, String), String>,
    /// Payloads of small sources at a resourceVersion (what a GET returned): a job that lists a
    /// source at that version needs no GET. Bounded by bytes (`SOURCE_PAYLOAD_CACHE_BYTES`);
    /// what a job writes from it is checked against a fresh read afterwards, as for a GET
    /// (`sync::converge::recheck_inputs`).
    pub source_payloads: Cache<(ObjectKey, String), (Arc<Payload>, SourceInfo)>,
    /// The CopyRule status this replica last wrote, by rule name (with the rule's uid).
    pub written_status: Cache<String, (String, CopyRuleStatus)>,
    /// Objects with unparseable marks already reported (each is reported once).
    pub malformed_seen: Cache<ObjectKey, ()>,
    /// Versions of sources not opted in already warned about: (source, resourceVersion).
    pub unlabelled_warned: Cache<(ObjectKey, String), ()>,
}

impl Default for Caches {
    fn default() -> Self {
        Self {
            source_hashes: Cache::builder().max_capacity(100_000).build(),
            source_payloads: Cache::builder()
                .weigher(|_, (payload, _): &(Arc<Payload>, SourceInfo)| {
                    u32::try_from(payload_bytes(payload)).unwrap_or(u32::MAX)
                })
                .max_capacity(SOURCE_PAYLOAD_CACHE_BYTES)
                .build(),
            written_status: Cache::builder().max_capacity(10_000).build(),
            malformed_seen: Cache::builder().max_capacity(10_000).build(),
            unlabelled_warned: Cache::builder().max_capacity(10_000).build(),
        }
    }
}

/// Bytes of source payloads kept between jobs ([`Caches::source_payloads`]).
pub const SOURCE_PAYLOAD_CACHE_BYTES: u64 = 4 << 20;
/// Larger payloads are not kept: read when needed, dropped after (SPEC §4.5 memory bounds).
pub const SOURCE_PAYLOAD_CACHE_MAX_ENTRY: usize = 64 << 10;

/// Bytes of a payload's keys and values, roughly what it holds in memory.
pub fn payload_bytes(payload: &Payload) -> usize {
    let map = |m: &Option<std::collections::BTreeMap<String, String>>| {
        m.iter()
            .flatten()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
    };
    map(&payload.data) + map(&payload.binary_data)
}

/// Something a job does now and then, not every time: at most once per `every` (never when
/// it is zero), the first time at once.
#[derive(Debug)]
pub struct Periodic {
    every: Duration,
    last: Mutex<Option<Instant>>,
}

impl Periodic {
    pub fn new(every: Duration) -> Self {
        Self {
            every,
            last: Mutex::new(None),
        }
    }

    /// Whether it is due at `now`; if so, the next one is due `every` later.
    pub fn due(&self, now: Instant) -> bool {
        if self.every.is_zero() {
            return false;
        }
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        match *last {
            Some(t) if now.saturating_duration_since(t) < self.every => false,
            _ => {
                *last = Some(now);
                true
            }
        }
    }
}

impl Context {
    pub fn new(
        cluster: Cluster,
        events: Events,
        metrics: Arc<Metrics>,
        queue: Arc<WorkQueue>,
        settings: SyncSettings,
    ) -> Self {
        let fanout_bytes = settings.fanout_bytes;
        Self {
            cluster,
            events,
            waiters: Waiters::new(Arc::clone(&queue), Arc::clone(&metrics)),
            metrics,
            queue,
            settings,
            caches: Caches::default(),
            resyncs: tokio::sync::watch::Sender::new(Resyncs::default()),
            // A process without an election leads (`serve --leader-election=false`, tests).
            leading: tokio::sync::watch::channel(true).1,
            write_budget: WriteBudget::new(fanout_bytes),
            ready: Arc::new(ReadyIndex::new(READY_CAPACITY)),
            unlabelled_scan: Periodic::new(DEFAULT_UNLABELLED_SCAN),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periodic_work_is_due_at_once_then_once_per_interval() {
        let t0 = Instant::now();
        let p = Periodic::new(Duration::from_secs(60));
        assert!(p.due(t0));
        assert!(!p.due(t0 + Duration::from_secs(59)));
        assert!(p.due(t0 + Duration::from_secs(60)));
        assert!(!p.due(t0 + Duration::from_secs(61)));
        let never = Periodic::new(Duration::ZERO);
        assert!(!never.due(t0));
    }
}
