//! Prometheus metrics (served as text on the plain HTTP port at `/metrics`).
//!
//! Labels never carry object names or data: only endpoints, operations, verbs and outcomes.

use std::{sync::atomic::AtomicU64, time::Duration};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    pub endpoint: &'static str,
    pub operation: &'static str,
    /// `allowed`, `denied`, `dry_run`, `bad_request`
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabels {
    pub endpoint: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    pub kind: &'static str,
    /// `ok`, `retry`, `failed`
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub kind: &'static str,
    /// Why, from the API's answer (`conflict`, `forbidden`, `throttled`, `unreachable`,
    /// `timeout`, `server_error`, ...; `unsettled`: targets kept changing while written).
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DroppedLabels {
    /// The job's kind (`source`, `namespace`, `copy`, `rule`).
    pub kind: &'static str,
    /// `queue_full`: the queue held `--queue-capacity` jobs; `unseen_share`: the job waited for
    /// an admitted change no watch event had shown, and more such jobs waited than their share
    /// holds (a flood of reviews of changes that never happen).
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    pub verb: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CapLabels {
    pub cap: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WhatLabels {
    pub what: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FeedLabels {
    pub feed: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    pub verb: &'static str,
    pub resource: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InstallLabels {
    /// `<namespace>/<name>` of the install's Lease.
    pub install: String,
    /// `cluster` or `namespaces` (SPEC §13).
    pub scope: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    pub limit: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServedLabels {
    /// `copies`, `sources` or `namespaces`.
    pub what: &'static str,
    /// `index` or `list`.
    pub served_from: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CodeLabels {
    pub code: u16,
}

/// A member's HubLink, by name (SPEC §14): one series per link its administrator made.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HubLinkLabels {
    pub link: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CertificateLabels {
    /// `ca` or `serving`.
    pub certificate: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvictedLabels {
    /// `full`: `--webhook-max-connections` were open; `peer_limit`: the new connection's
    /// address held `--webhook-max-connections-per-peer`.
    pub reason: &'static str,
    /// What the closed connection was doing: `stalled` (nothing answered yet), `waiting` (for
    /// the rest of a later request's body), `idle`.
    pub state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: &'static str,
}

/// Every metric copyrator exports.
pub struct Metrics {
    registry: Registry,
    pub admission_requests: Family<AdmissionLabels, Counter>,
    pub admission_duration: Family<EndpointLabels, Histogram>,
    pub queue_depth: Gauge,
    pub queue_delayed: Gauge,
    pub queue_coalesced: Counter,
    pub queue_dropped: Counter,
    pub jobs_dropped: Family<DroppedLabels, Counter>,
    pub queue_unseen: Gauge,
    pub jobs_in_flight: Gauge,
    pub jobs: Family<JobLabels, Counter>,
    pub job_failures: Family<FailureLabels, Counter>,
    pub job_duration: Family<KindLabels, Histogram>,
    pub copy_writes: Family<VerbLabels, Counter>,
    pub conflicts: Family<ReasonLabels, Counter>,
    pub refused_targets: Counter,
    pub malformed_marks: Counter,
    pub capped_sources: Family<CapLabels, Gauge>,
    pub namespaces_at_source_cap: Gauge,
    pub unreadable: Family<WhatLabels, Counter>,
    pub early_reads: Family<OutcomeLabels, Counter>,
    pub copy_lag: Histogram,
    pub resync_duration: Histogram,
    pub last_resync: Gauge,
    pub resync_drift: Family<ReasonLabels, Counter>,
    pub api_requests: Family<ApiLabels, Counter>,
    pub api_errors: Family<CodeLabels, Counter>,
    pub api_response_bytes: Counter,
    pub api_rate_limited: Family<LimitLabels, Counter>,
    pub api_rate_limited_seconds: Family<LimitLabels, Counter<f64, AtomicU64>>,
    pub index_reads: Family<ServedLabels, Counter>,
    pub index_objects: Family<FeedLabels, Gauge>,
    pub tls_reloads: Family<OutcomeLabels, Counter>,
    pub certificate_expiry: Family<CertificateLabels, Gauge>,
    pub certificates_issued: Family<CertificateLabels, Counter>,
    pub watch_live: Family<FeedLabels, Gauge>,
    /// Unix time of each watch's last progress (`crate::cluster::progress`).
    pub watch_last_progress: Family<FeedLabels, Gauge<f64, AtomicU64>>,
    /// Unix time each HubLink's hub was last read in full and its copies converged (SPEC §14.3).
    pub hub_last_sync: Family<HubLinkLabels, Gauge<f64, AtomicU64>>,
    /// Unix time each HubLink's token expires, when the token says (SPEC §14.3).
    pub hub_credential_expiry: Family<HubLinkLabels, Gauge<f64, AtomicU64>>,
    pub selector_watches: Gauge,
    pub watch_events: Family<FeedLabels, Counter>,
    pub watch_triggered: Family<FeedLabels, Counter>,
    pub watch_lists: Family<FeedLabels, Counter>,
    pub webhook_connections: Gauge,
    pub webhook_peers: Gauge,
    pub webhook_connections_refused: Family<ReasonLabels, Counter>,
    pub webhook_connections_evicted: Family<EvictedLabels, Counter>,
    pub webhook_connections_idle_closed: Counter,
    pub webhook_shed: Family<LimitLabels, Counter>,
    /// Reviews allowed without queueing their job: not the API server's, where it can be told
    /// apart (SPEC §9.8).
    pub admission_unqueued: Counter,
    pub leader: Gauge,
    /// Listed namespaces of a namespace-scoped install where copyrator is not bound (SPEC §13).
    pub namespaces_not_bound: Gauge,
    /// Which install this process is (its Lease) and its scope, for several side by side.
    pub install: Family<InstallLabels, Gauge>,
    pub worker_threads: Gauge,
    pub pod_gate: Family<OutcomeLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("copyrator");
        let admission_requests = Family::<AdmissionLabels, Counter>::default();
        registry.register(
            "admission_requests",
            "AdmissionReviews answered, by endpoint, operation and outcome",
            admission_requests.clone(),
        );
        // 10 µs .. ~80 ms
        let admission_duration = Family::<EndpointLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.00001, 2.0, 14))
        });
        registry.register(
            "admission_duration_seconds",
            "Time copyrator spent answering an AdmissionReview (parse to response)",
            admission_duration.clone(),
        );
        let queue_depth = Gauge::default();
        let queue_delayed = Gauge::default();
        registry.register(
            "queue_delayed",
            "Of the queued jobs, those waiting for a due time: a retry's backoff, a change not persisted yet, a resync's earliest start",
            queue_delayed.clone(),
        );
        registry.register(
            "queue_depth",
            "Jobs waiting in the work queue",
            queue_depth.clone(),
        );
        let queue_coalesced = Counter::default();
        registry.register(
            "queue_coalesced",
            "Jobs merged into a waiting job with the same key",
            queue_coalesced.clone(),
        );
        let queue_dropped = Counter::default();
        registry.register(
            "queue_dropped",
            "Jobs dropped because the queue was full (each schedules a full resync)",
            queue_dropped.clone(),
        );
        let jobs_dropped = Family::<DroppedLabels, Counter>::default();
        registry.register(
            "jobs_dropped",
            "Jobs dropped, by kind and reason (queue_full, unseen_share); each schedules a full resync",
            jobs_dropped.clone(),
        );
        let queue_unseen = Gauge::default();
        registry.register(
            "queue_unseen",
            "Jobs waiting for an admitted change no watch event has shown yet (their share of the queue)",
            queue_unseen.clone(),
        );
        let jobs_in_flight = Gauge::default();
        registry.register(
            "jobs_in_flight",
            "Jobs a worker is running now (with queue_depth at 0 as well, copyrator is idle)",
            jobs_in_flight.clone(),
        );
        let jobs = Family::<JobLabels, Counter>::default();
        registry.register("jobs", "Jobs finished, by kind and outcome", jobs.clone());
        let job_failures = Family::<FailureLabels, Counter>::default();
        registry.register(
            "job_failures",
            "Job runs that failed (retried or given up), by kind and reason",
            job_failures.clone(),
        );
        // 1 ms .. ~65 s
        let job_duration = Family::<KindLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 17))
        });
        registry.register(
            "job_duration_seconds",
            "Time a worker spent on a job, by kind",
            job_duration.clone(),
        );
        let copy_writes = Family::<VerbLabels, Counter>::default();
        registry.register(
            "copy_writes",
            "Writes to copies, by verb (create, update, delete)",
            copy_writes.clone(),
        );
        let conflicts = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "conflicts",
            "Targets not written because of a conflict, by reason",
            conflicts.clone(),
        );
        let refused_targets = Counter::default();
        registry.register(
            "refused_targets",
            "Refusals of inline rules of untrusted namespaces: each namespace one names that does not consent, and each selector no consenting namespace matches (never written; namespaces a selector matches without consent are not looked at)",
            refused_targets.clone(),
        );
        let capped_sources = Family::<CapLabels, Gauge>::default();
        registry.register(
            "capped_sources",
            "Sources of untrusted namespaces held back by a cap as of the last full resync (their copies left as they are), by cap: per_namespace or metadata_bytes",
            capped_sources.clone(),
        );
        let namespaces_at_source_cap = Gauge::default();
        registry.register(
            "namespaces_at_source_cap",
            "Untrusted namespaces holding more opted-in sources than --max-sources-per-namespace, as of the last full resync",
            namespaces_at_source_cap.clone(),
        );
        let malformed_marks = Counter::default();
        registry.register(
            "malformed_marks",
            "Objects labelled as managed by copyrator whose marks do not parse (left alone), each counted once",
            malformed_marks.clone(),
        );
        let unreadable = Family::<WhatLabels, Counter>::default();
        registry.register(
            "unreadable",
            "Objects a job could not read (source, namespace, copy): their targets were skipped and a job queued to look again",
            unreadable.clone(),
        );
        let early_reads = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "namespace_early_reads",
            "Reads made for a namespace job while its namespace change was being persisted, by what became of them: used, stale (something they cover changed), late (still in flight when the job ran)",
            early_reads.clone(),
        );
        let copy_lag = Histogram::new(exponential_buckets(0.001, 2.0, 17));
        registry.register(
            "copy_lag_seconds",
            "From the admission or resync that triggered a job to the write of a copy",
            copy_lag.clone(),
        );
        let resync_duration = Histogram::new(exponential_buckets(0.01, 2.0, 14));
        registry.register(
            "resync_duration_seconds",
            "Duration of a full resync",
            resync_duration.clone(),
        );
        let last_resync = Gauge::default();
        registry.register(
            "last_resync_timestamp_seconds",
            "When this replica last completed a full resync (unix time; 0: not yet)",
            last_resync.clone(),
        );
        let resync_drift = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "resync_drift",
            "Drift found by full resyncs: missing, stale, orphaned copies",
            resync_drift.clone(),
        );
        let api_requests = Family::<ApiLabels, Counter>::default();
        registry.register(
            "api_requests",
            "Requests to the Kubernetes API, by verb and resource",
            api_requests.clone(),
        );
        let api_errors = Family::<CodeLabels, Counter>::default();
        registry.register(
            "api_errors",
            "Kubernetes API errors, by HTTP status code (0: no response)",
            api_errors.clone(),
        );
        let api_response_bytes = Counter::default();
        registry.register(
            "api_response_bytes",
            "Bytes of Kubernetes API responses read (bodies)",
            api_response_bytes.clone(),
        );
        let api_rate_limited = Family::<LimitLabels, Counter>::default();
        registry.register(
            "api_rate_limited",
            "Kubernetes API calls that waited for copyrator's own client-side limit (writes: --api-qps, reads: --api-read-qps)",
            api_rate_limited.clone(),
        );
        let api_rate_limited_seconds = Family::<LimitLabels, Counter<f64, AtomicU64>>::default();
        registry.register(
            "api_rate_limited_seconds",
            "Time Kubernetes API calls waited for copyrator's own client-side limit, summed over the calls",
            api_rate_limited_seconds.clone(),
        );
        let index_reads = Family::<ServedLabels, Counter>::default();
        registry.register(
            "index_reads",
            "Cached reads of a job, by what was read (copies, sources, namespaces, copyrules; namespace, source: one object) and where they were served from (index: what copyrator's watches keep; list or get: the API server, while the index cannot answer)",
            index_reads.clone(),
        );
        let index_objects = Family::<FeedLabels, Gauge>::default();
        registry.register(
            "index_objects",
            "Objects held in the index a watch keeps (copies, opted-in sources, namespaces), by feed",
            index_objects.clone(),
        );
        let tls_reloads = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "tls_reloads",
            "Serving certificate reloads, by outcome (success, failure)",
            tls_reloads.clone(),
        );
        let certificate_expiry = Family::<CertificateLabels, Gauge>::default();
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "notAfter of the serving certificate in service and (with copyrator's own certificates) of the current CA, as Unix time",
            certificate_expiry.clone(),
        );
        let certificates_issued = Family::<CertificateLabels, Counter>::default();
        registry.register(
            "certificates_issued",
            "Certificates this replica issued into the certificate Secret (ca, serving)",
            certificates_issued.clone(),
        );
        let watch_live = Family::<FeedLabels, Gauge>::default();
        registry.register(
            "watch_live",
            "1 while the metadata watch of a feed is connected (jobs then wait for its events instead of polling)",
            watch_live.clone(),
        );
        let watch_last_progress = Family::<FeedLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "watch_last_progress_seconds",
            "Unix time of the last progress of the metadata watch of a feed: connected, listed, an event or a bookmark",
            watch_last_progress.clone(),
        );
        let hub_last_sync = Family::<HubLinkLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "hub_last_sync_timestamp_seconds",
            "Unix time a HubLink's hub was last read in full and the link's copies converged",
            hub_last_sync.clone(),
        );
        let hub_credential_expiry = Family::<HubLinkLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "hub_credential_expiry_timestamp_seconds",
            "Unix time a HubLink's hub token expires (its exp claim), when it has one",
            hub_credential_expiry.clone(),
        );
        let selector_watches = Gauge::default();
        registry.register(
            "selector_watches",
            "Watches of CopyRule source selectors this replica runs (the leader runs them)",
            selector_watches.clone(),
        );
        let watch_events = Family::<FeedLabels, Counter>::default();
        registry.register(
            "watch_events",
            "Watch events received, by feed",
            watch_events.clone(),
        );
        let watch_lists = Family::<FeedLabels, Counter>::default();
        registry.register(
            "watch_lists",
            "LISTs a watch started from (at startup, and when it must start over: 410 Gone), by feed",
            watch_lists.clone(),
        );
        let watch_triggered = Family::<FeedLabels, Counter>::default();
        registry.register(
            "watch_triggered_jobs",
            "Jobs queued by a watch event that no admitted job was waiting for (a change the webhooks missed), by feed",
            watch_triggered.clone(),
        );
        let webhook_connections = Gauge::default();
        registry.register(
            "webhook_connections",
            "Connections open to the webhook server",
            webhook_connections.clone(),
        );
        let webhook_peers = Gauge::default();
        registry.register(
            "webhook_peers",
            "Client addresses with a connection open to the webhook server (each has limits of its own)",
            webhook_peers.clone(),
        );
        let webhook_connections_refused = Family::<ReasonLabels, Counter>::default();
        registry.register(
            "webhook_connections_refused",
            "New webhook connections closed at once, by reason: full (--webhook-max-connections open, none could give way), peer_limit (its address held --webhook-max-connections-per-peer, none of them could give way)",
            webhook_connections_refused.clone(),
        );
        let webhook_connections_evicted = Family::<EvictedLabels, Counter>::default();
        registry.register(
            "webhook_connections_evicted",
            "Webhook connections closed to make room for a new one, by reason (full, peer_limit) and by what they were doing (stalled: nothing answered yet, waiting: for a body, idle)",
            webhook_connections_evicted.clone(),
        );
        let webhook_connections_idle_closed = Counter::default();
        registry.register(
            "webhook_connections_idle_closed",
            "Webhook connections closed for sending no request in time (first request or idle timeout)",
            webhook_connections_idle_closed.clone(),
        );
        let webhook_shed = Family::<LimitLabels, Counter>::default();
        registry.register(
            "webhook_shed",
            "Admission reviews answered 503 at once, by the limit they met: peer_in_flight, in_flight, peer_body_bytes, body_bytes",
            webhook_shed.clone(),
        );
        let admission_unqueued = Counter::default();
        registry.register(
            "admission_unqueued",
            "Reviews from a caller that is not the API server (it can be told apart: --client-ca or --api-server-cidrs), answered without queueing any work",
            admission_unqueued.clone(),
        );
        // Every series at 0 from the start, so that `increase()` sees the first refusal,
        // eviction or shed review (an alert on a series born at 1 would miss it).
        for reason in ["full", "peer_limit"] {
            let _ = webhook_connections_refused.get_or_create(&ReasonLabels { reason });
            for state in ["stalled", "waiting", "idle"] {
                let _ = webhook_connections_evicted.get_or_create(&EvictedLabels { reason, state });
            }
        }
        for limit in [
            "peer_in_flight",
            "in_flight",
            "peer_body_bytes",
            "body_bytes",
        ] {
            let _ = webhook_shed.get_or_create(&LimitLabels { limit });
        }
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 when this replica holds the lease and runs the reconciler",
            leader.clone(),
        );
        let namespaces_not_bound = Gauge::default();
        registry.register(
            "namespaces_not_bound",
            "Listed namespaces (--namespaces) whose owners have not bound copyrator: they get no copies",
            namespaces_not_bound.clone(),
        );
        let install = Family::<InstallLabels, Gauge>::default();
        registry.register(
            "install_info",
            "Always 1: the install this process belongs to (its Lease) and its scope",
            install.clone(),
        );
        let worker_threads = Gauge::default();
        registry.register(
            "worker_threads",
            "Worker threads of the async runtime (--threads; default one per CPU copyrator may use)",
            worker_threads.clone(),
        );
        let pod_gate = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "pod_gate",
            "Pod admissions by the Pod gate, by outcome (cached, settled, wrote, unsettled, timeout, error, dry_run, excluded)",
            pod_gate.clone(),
        );
        Self {
            registry,
            admission_requests,
            admission_duration,
            queue_depth,
            queue_delayed,
            queue_coalesced,
            queue_dropped,
            jobs_dropped,
            queue_unseen,
            jobs_in_flight,
            jobs,
            job_failures,
            job_duration,
            copy_writes,
            conflicts,
            refused_targets,
            malformed_marks,
            capped_sources,
            namespaces_at_source_cap,
            unreadable,
            early_reads,
            copy_lag,
            resync_duration,
            last_resync,
            resync_drift,
            api_requests,
            api_errors,
            api_response_bytes,
            api_rate_limited,
            api_rate_limited_seconds,
            index_reads,
            index_objects,
            tls_reloads,
            certificate_expiry,
            certificates_issued,
            watch_live,
            watch_last_progress,
            hub_last_sync,
            hub_credential_expiry,
            selector_watches,
            watch_events,
            watch_triggered,
            watch_lists,
            webhook_connections,
            webhook_peers,
            webhook_connections_refused,
            webhook_connections_evicted,
            webhook_connections_idle_closed,
            webhook_shed,
            admission_unqueued,
            leader,
            namespaces_not_bound,
            install,
            worker_threads,
            pod_gate,
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    pub fn observe_admission(
        &self,
        endpoint: &'static str,
        operation: &'static str,
        outcome: &'static str,
        took: Duration,
    ) {
        self.admission_requests
            .get_or_create(&AdmissionLabels {
                endpoint,
                operation,
                outcome,
            })
            .inc();
        self.admission_duration
            .get_or_create(&EndpointLabels { endpoint })
            .observe(took.as_secs_f64());
    }

    pub fn api_call(&self, verb: &'static str, resource: &'static str) {
        self.api_requests
            .get_or_create(&ApiLabels { verb, resource })
            .inc();
    }

    /// A call waited `waited` for the client-side `limit` (nothing when it did not wait).
    pub fn api_rate_limited(&self, limit: &'static str, waited: Duration) {
        if waited.is_zero() {
            return;
        }
        let labels = LimitLabels { limit };
        self.api_rate_limited.get_or_create(&labels).inc();
        self.api_rate_limited_seconds
            .get_or_create(&labels)
            .inc_by(waited.as_secs_f64());
    }

    /// A job read copies, sources or namespaces: from an index a watch keeps, or by LISTs.
    pub fn index_read(&self, what: &'static str, served_from: &'static str) {
        self.index_reads
            .get_or_create(&ServedLabels { what, served_from })
            .inc();
    }

    pub fn api_error(&self, code: u16) {
        self.api_errors.get_or_create(&CodeLabels { code }).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_prefixed_metrics() {
        let m = Metrics::new();
        m.observe_admission("namespaces", "CREATE", "allowed", Duration::from_micros(30));
        m.copy_writes
            .get_or_create(&VerbLabels { verb: "create" })
            .inc();
        m.leader.set(1);
        let text = m.encode();
        assert!(text.contains(
            "copyrator_admission_requests_total{endpoint=\"namespaces\",operation=\"CREATE\",outcome=\"allowed\"} 1"
        ));
        assert!(text.contains("copyrator_copy_writes_total{verb=\"create\"} 1"));
        assert!(text.contains("copyrator_leader 1"));
        assert!(
            text.contains("copyrator_admission_duration_seconds_count{endpoint=\"namespaces\"} 1")
        );
    }

    #[test]
    fn webhook_refusals_are_exported_at_zero_before_the_first() {
        let text = Metrics::new().encode();
        for sample in [
            r#"copyrator_webhook_connections_refused_total{reason="peer_limit"} 0"#,
            r#"copyrator_webhook_connections_evicted_total{reason="full",state="stalled"} 0"#,
            r#"copyrator_webhook_shed_total{limit="in_flight"} 0"#,
        ] {
            assert!(text.contains(sample), "{sample} in {text}");
        }
    }

    #[test]
    fn every_metric_is_in_the_metrics_reference() {
        // docs/metrics.md is where an operator looks a metric up: one registered without a row
        // there is one nobody can read.
        let docs = include_str!("../docs/metrics.md");
        let text = Metrics::new().encode();
        let mut missing = Vec::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("# TYPE ") else {
                continue;
            };
            let mut parts = rest.split(' ');
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            let shown = if kind == "counter" {
                format!("`{name}_total`")
            } else {
                format!("`{name}`")
            };
            if !docs.contains(&shown) {
                missing.push(shown);
            }
        }
        assert!(text.contains("# TYPE copyrator_leader gauge"), "{text}");
        assert!(missing.is_empty(), "docs/metrics.md lacks {missing:?}");
    }
}
