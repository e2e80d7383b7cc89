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
    /// Bytes of source payloads kept between jobs (`--source-cache-bytes`,
    /// [`Caches::source_payloads`]).
    pub source_cache_bytes: u64,
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
    /// The hubs' last reads, published by the leader's hub loop (SPEC §14): what namespace
    /// syncs, the Pod gate's among them, converge hub copies from.
    pub hub_reads: crate::sync::hub_reads::SharedReads,
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
    /// Payloads of sources at a resourceVersion (what a GET returned): a job whose sources
    /// (from the index, or listed) are at that version needs no GET. Bounded by the bytes of
    /// what it holds (`--source-cache-bytes`); a source changed since is a new key, so a
    /// payload is only ever used for the version it was read at. What a job writes from it is
    /// checked against the sources' current versions afterwards, as for a GET
    /// (`sync::converge::recheck_inputs`). Never logged: a Secret's data.
    pub source_payloads: Cache<(ObjectKey, String), (Arc<Payload>, SourceInfo)>,
    /// The CopyRule status this replica last wrote, by rule name (with the rule's uid).
    pub written_status: Cache<String, (String, CopyRuleStatus)>,
    /// Objects with unparseable marks already reported (each is reported once).
    pub malformed_seen: Cache<ObjectKey, ()>,
    /// Versions of sources not opted in already warned about: (source, resourceVersion).
    pub unlabelled_warned: Cache<(ObjectKey, String), ()>,
}

impl Caches {
    /// Caches holding at most `source_bytes` bytes of source payloads.
    pub fn new(source_bytes: u64) -> Self {
        Self {
            source_hashes: Cache::builder().max_capacity(100_000).build(),
            source_payloads: Cache::builder()
                .weigher(|_, (payload, info): &(Arc<Payload>, SourceInfo)| {
                    u32::try_from(cached_source_bytes(payload, info)).unwrap_or(u32::MAX)
                })
                .max_capacity(source_bytes)
                .build(),
            written_status: Cache::builder().max_capacity(10_000).build(),
            malformed_seen: Cache::builder().max_capacity(10_000).build(),
            unlabelled_warned: Cache::builder().max_capacity(10_000).build(),
        }
    }

    /// Keeps a source's payload at its resourceVersion, unless it would take more than a
    /// [`SOURCE_CACHE_ENTRY_SHARE`] of the cache (one large source does not push out every
    /// small one; it is read when needed, and dropped after).
    pub fn keep_source_payload(&self, info: &SourceInfo, payload: &Arc<Payload>, bound: u64) {
        let bytes = cached_source_bytes(payload, info) as u64;
        if info.resource_version.is_empty() || bytes > bound / SOURCE_CACHE_ENTRY_SHARE {
            return;
        }
        self.source_payloads.insert(
            (info.key.clone(), info.resource_version.clone()),
            (Arc::clone(payload), info.clone()),
        );
    }
}

/// `--source-cache-bytes`' default.
pub const DEFAULT_SOURCE_CACHE_BYTES: u64 = 64 << 20;
/// A payload over this share of `--source-cache-bytes` is not kept.
pub const SOURCE_CACHE_ENTRY_SHARE: u64 = 8;

/// About what a cached source takes in memory: its payload, and what is kept of its metadata.
fn cached_source_bytes(payload: &Payload, info: &SourceInfo) -> usize {
    let map = |m: &std::collections::BTreeMap<String, String>| {
        m.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
    };
    payload.approx_bytes()
        + map(&info.labels)
        + map(&info.annotations)
        + info.key.namespace.len()
        + info.key.name.len()
        + info.uid.len()
        + 2 * info.resource_version.len()
        + 256
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
        let source_cache_bytes = settings.source_cache_bytes;
        Self {
            cluster,
            events,
            waiters: Waiters::new(Arc::clone(&queue), Arc::clone(&metrics)),
            metrics,
            queue,
            settings,
            caches: Caches::new(source_cache_bytes),
            resyncs: tokio::sync::watch::Sender::new(Resyncs::default()),
            // A process without an election leads (`serve --leader-election=false`, tests).
            leading: tokio::sync::watch::channel(true).1,
            write_budget: WriteBudget::new(fanout_bytes),
            ready: Arc::new(ReadyIndex::new(READY_CAPACITY)),
            hub_reads: Default::default(),
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
