//! Typed access to the Kubernetes API for the workers: the reads that build a job's view of
//! the cluster and the preconditioned writes that apply its plan. Every call goes through a
//! client-side rate limiter (reads also through a bound on reads in flight) and is counted in
//! the metrics.

use std::{sync::Arc, time::Duration};

use kube::{Api, Client, Resource, api::ListParams};

pub mod apply;
pub mod client;
mod error;
pub mod kinds;
pub mod load;
pub mod namespaced_rules;
pub mod passwords;
pub mod progress;
pub mod ratelimit;
pub mod reads;
mod role_bindings;
pub mod scope;
mod scoped_watch;
#[cfg(test)]
pub(crate) use crate::freshness::index::namespace_info;
pub mod selectors;
pub mod watch;
mod writes;

pub use error::{ApiError, ApiResult, Written};
use ratelimit::RateLimiter;

use crate::{
    freshness::{
        Indexes,
        copy_index::CopyIndex,
        index::{NamespaceIndex, SourceIndex},
        rule_scope::CopyRuleScope,
    },
    metrics::Metrics,
    model::{Kind, Object},
};

/// Where a LIST is served from.
///
/// A label-selected LIST served from etcd reads every object of the resource and filters
/// afterwards: with 50,000 Secrets in the cluster, listing a source's ten copies would read
/// all 50,000, in every job. The API server's watch cache filters in memory instead, at the
/// price of lagging etcd by milliseconds. Jobs read their trigger object consistently (GET;
/// a namespace job, from the namespace index when it shows the change the job was admitted
/// for) and everything label-selected from the cache; what a lagging cache can hide is covered by
/// create-if-absent, preconditioned writes, the post-write re-check and a second look after
/// namespace changes (see `sync/`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadMode {
    /// From etcd, paginated: complete lists without a selector (nothing is read in vain),
    /// and re-checks that must see the latest state.
    Consistent,
    /// From the watch cache (`resourceVersion=0`), in one response: label-selected lists.
    Cached,
    /// From what copyrator's watches keep (`index`), as fresh as `Cached`; LISTs as `Cached`
    /// while an index cannot answer. Jobs read this way; the full resync LISTs (`Cached`),
    /// independent of the indexes, to catch what they might have missed.
    Indexed,
}

impl ReadMode {
    fn list_params(self, page_size: u32) -> ListParams {
        match self {
            ReadMode::Consistent => ListParams::default().limit(page_size),
            // The watch cache does not paginate (a limit would send the request to etcd).
            ReadMode::Cached | ReadMode::Indexed => ListParams {
                resource_version: Some("0".into()),
                ..Default::default()
            },
        }
    }
}

/// Client-side limits on API calls (`--api-qps`, `--api-read-qps`, ...).
pub struct ApiLimits {
    pub writes: RateLimiter,
    pub reads: RateLimiter,
    /// Reads in flight at once.
    pub read_concurrency: usize,
}

/// See the module documentation.
#[derive(Clone)]
pub struct Cluster {
    client: Client,
    metrics: Arc<Metrics>,
    writes: Arc<RateLimiter>,
    reads: Arc<RateLimiter>,
    read_slots: Arc<tokio::sync::Semaphore>,
    page_size: u32,
    /// The indexes the watches keep (through the dispatcher) and copyrator's own writes
    /// update, read instead of LISTs.
    indexes: Arc<Indexes>,
    /// How long a connection may stay silent (`--api-timeout`); watches end before it.
    api_timeout: Duration,
    /// Where copyrator reads and writes: every namespace, or those listed and bound (SPEC §13).
    scope: Arc<scope::Scope>,
    /// The clients a namespace-scoped install's watches share, HTTP/2 and kept honest by
    /// PINGs (`client::watch_lanes`); none: watches use `client`.
    watch_lanes: Arc<[Client]>,
}

/// A watch's server-side timeout on a watch lane, seconds, and the spread added to it.
const LANE_WATCH_SECONDS: u32 = 240;
const LANE_WATCH_SPREAD_SECONDS: u32 = 120;

/// `--api-timeout`'s default: well below the minute a silent connection used to cost, and
/// well above the API server's usual answer times (SPEC §5).
pub const DEFAULT_API_TIMEOUT: Duration = Duration::from_secs(10);

impl Cluster {
    /// A client-side view of the cluster for one-off commands (`explain`, `migrate`): no rate
    /// limit beyond the API server's own, metrics kept in memory and dropped.
    pub fn for_commands(client: kube::Client) -> Cluster {
        Cluster::new(
            client,
            Arc::new(Metrics::new()),
            ApiLimits {
                writes: ratelimit::RateLimiter::unlimited(),
                reads: ratelimit::RateLimiter::unlimited(),
                read_concurrency: 16,
            },
            500,
        )
    }

    pub fn new(client: Client, metrics: Arc<Metrics>, limits: ApiLimits, page_size: u32) -> Self {
        Self {
            client,
            metrics,
            writes: Arc::new(limits.writes),
            reads: Arc::new(limits.reads),
            read_slots: Arc::new(tokio::sync::Semaphore::new(limits.read_concurrency.max(1))),
            page_size: page_size.max(1),
            indexes: Arc::default(),
            api_timeout: DEFAULT_API_TIMEOUT,
            scope: Arc::default(),
            watch_lanes: Arc::new([]),
        }
    }

    /// The client of a namespace-scoped install (`--namespaces`): one watch per feed and
    /// namespace, and no API call outside `namespaces` (SPEC §13). Before anything reads the
    /// indexes.
    pub fn scoped_to(mut self, namespaces: impl IntoIterator<Item = String>) -> Self {
        let partitions = crate::freshness::coverage::Partitions::namespaces(namespaces);
        self.indexes = Arc::new(Indexes::with_partitions(partitions.clone()));
        self.scope = Arc::new(scope::Scope::new(partitions));
        self
    }

    /// Where copyrator reads and writes (see [`scope::Scope`]).
    pub fn scope(&self) -> &scope::Scope {
        &self.scope
    }

    /// The client's `--api-timeout` (see [`DEFAULT_API_TIMEOUT`]), which the watches follow.
    pub fn with_api_timeout(mut self, api_timeout: Duration) -> Self {
        self.api_timeout = api_timeout;
        self
    }

    /// How long a connection may stay silent: a watch that long without a byte is wedged.
    pub fn api_timeout(&self) -> Duration {
        self.api_timeout
    }

    /// The watches' own clients (see [`client::watch_lanes`]).
    pub fn with_watch_lanes(mut self, lanes: Vec<Client>) -> Self {
        self.watch_lanes = lanes.into();
        self
    }

    /// The client that carries the watch of namespace `part` (any namespace: `None`).
    fn watch_client(&self, part: Option<&str>) -> &Client {
        match (part, self.watch_lanes.len()) {
            (_, 0) => &self.client,
            (None, _) => &self.watch_lanes[0],
            // The listed namespaces dealt round: every lane carries as many watches.
            (Some(ns), lanes) => {
                let at = self
                    .scope
                    .listed()
                    .and_then(|listed| listed.iter().position(|n| n == ns))
                    .unwrap_or(0);
                &self.watch_lanes[at % lanes]
            }
        }
    }

    /// The server-side timeout of a watch request. On a connection of its own (HTTP/1.1),
    /// two thirds of the API timeout, so that a quiet watch is ended by the API server, and
    /// resumed, well before its silence would count as a dead connection (the API server
    /// 1.20 sends bookmarks only about once a minute). On a watch lane, whose PINGs find a
    /// dead connection, minutes, spread so the renewals do not come together.
    pub fn watch_seconds(&self) -> u32 {
        if self.watch_lanes.is_empty() {
            return ((self.api_timeout.as_secs() * 2 / 3) as u32).max(1);
        }
        let spread = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos() % LANE_WATCH_SPREAD_SECONDS);
        LANE_WATCH_SECONDS + spread
    }

    /// How long a watch may go without an event before it counts as wedged: the API timeout
    /// on a connection of its own; past its server-side end on a lane, whose PINGs watch the
    /// connection.
    pub fn watch_silence(&self) -> Duration {
        if self.watch_lanes.is_empty() {
            self.api_timeout
        } else {
            Duration::from_secs(u64::from(LANE_WATCH_SECONDS + LANE_WATCH_SPREAD_SECONDS))
                + self.api_timeout
        }
    }

    /// The indexes, for the dispatcher that applies watch events to them.
    pub fn indexes(&self) -> &Arc<Indexes> {
        &self.indexes
    }

    /// The CopyRules as last listed (see [`crate::freshness::rule_scope`]); the CopyRules
    /// watch tells it when they change.
    pub fn copy_rule_scope(&self) -> &CopyRuleScope {
        &self.indexes.copy_rules
    }

    /// copyrator's copies by source (see [`crate::freshness::copy_index`]); answers only
    /// while the copies watch of `serve` keeps it.
    pub fn copy_index(&self) -> &CopyIndex {
        &self.indexes.copies
    }

    /// The opted-in sources (see [`crate::freshness::index`]); answers only while the
    /// sources watches of `serve` keep it.
    pub fn source_index(&self) -> &SourceIndex {
        &self.indexes.sources
    }

    /// Every namespace (see [`crate::freshness::index`]); answers only while the namespaces
    /// watch of `serve` keeps it.
    pub fn namespace_index(&self) -> &NamespaceIndex {
        &self.indexes.namespaces
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Runs one API call: rate limit, count, classify errors.
    async fn call<T>(
        &self,
        verb: &'static str,
        resource: &'static str,
        fut: impl Future<Output = Result<T, kube::Error>>,
    ) -> ApiResult<T> {
        // Writes and reads have limits of their own: a cold start's reads must not hold back
        // writes, nor a fan-out's writes the reads of other jobs. Watches are long-lived
        // streams, opened once per feed.
        let _slot = match verb {
            "create" | "update" | "patch" | "delete" => {
                let waited = self.writes.acquire().await;
                self.metrics.api_rate_limited("writes", waited);
                None
            }
            "watch" => None,
            _ => {
                let waited = self.reads.acquire().await;
                self.metrics.api_rate_limited("reads", waited);
                self.read_slots.acquire().await.ok()
            }
        };
        self.metrics.api_call(verb, resource);
        fut.await.map_err(|source| {
            let err = ApiError {
                verb,
                resource,
                source,
            };
            self.metrics.api_error(err.code());
            err
        })
    }

    fn objects(&self, kind: Kind, namespace: Option<&str>) -> Api<Object> {
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &kind),
            None => Api::all_with(self.client.clone(), &kind),
        }
    }

    /// Sends a request and parses the JSON answer. Answers up to `INLINE_PARSE_BYTES` (GETs,
    /// the metadata of a written copy's answer) are gathered into one buffer and parsed from
    /// it on the calling task: parsing from a slice is several times cheaper than through a
    /// reader, and a fan-out parses one answer per copy. Larger ones are received as the
    /// chunks the connection delivers (never copied into one text), parsed on a blocking
    /// thread, and each chunk is freed as soon as the parser has passed it. Metadata LISTs,
    /// which can be megabytes, are parsed item by item as they arrive instead
    /// (`reads::fetch_list`). Unlike `kube::Client::request`, a parse failure never logs the
    /// body: it may be a Secret.
    async fn fetch<T: serde::de::DeserializeOwned + Send + 'static>(
        &self,
        req: axum::http::Request<Vec<u8>>,
    ) -> Result<T, kube::Error> {
        use futures::AsyncBufReadExt;
        let body = self.client.request_stream(req).await?;
        let mut body = std::pin::pin!(body);
        let mut small = Vec::new();
        let mut chunks = std::collections::VecDeque::new();
        loop {
            let chunk = body
                .fill_buf()
                .await
                .map_err(|e| kube::Error::SerdeError(serde_json::Error::io(e)))?;
            if chunk.is_empty() {
                break;
            }
            let n = chunk.len();
            if chunks.is_empty() && small.len() + n <= INLINE_PARSE_BYTES {
                small.extend_from_slice(chunk);
            } else {
                if !small.is_empty() {
                    chunks.push_back(bytes::Bytes::from(std::mem::take(&mut small)));
                }
                chunks.push_back(bytes::Bytes::copy_from_slice(chunk));
            }
            body.consume_unpin(n);
        }
        if chunks.is_empty() {
            return serde_json::from_slice(&small).map_err(kube::Error::SerdeError);
        }
        let parse = move || serde_json::from_reader(std::io::BufReader::new(ChunkReader(chunks)));
        tokio::task::spawn_blocking(parse)
            .await
            .map_err(|e| kube::Error::Service(Box::new(e)))?
            .map_err(kube::Error::SerdeError)
    }

    /// `fetch`, with 404 as `None`.
    async fn fetch_opt<T: serde::de::DeserializeOwned + Send + 'static>(
        &self,
        req: Result<axum::http::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Result<Option<T>, kube::Error> {
        match self.fetch(req.map_err(kube::Error::BuildRequest)?).await {
            Ok(v) => Ok(Some(v)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn objects_request(kind: Kind, namespace: Option<&str>) -> kube::core::Request {
        kube::core::Request::new(Object::url_path(&kind, namespace))
    }
}

/// Response bodies up to this size are parsed on the calling task.
const INLINE_PARSE_BYTES: usize = 64 * 1024;

/// Reads a response body from its chunks, dropping each once read.
struct ChunkReader(std::collections::VecDeque<bytes::Bytes>);

impl std::io::Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use bytes::Buf;
        while let Some(front) = self.0.front_mut() {
            if front.has_remaining() {
                let n = front.remaining().min(buf.len());
                front.copy_to_slice(&mut buf[..n]);
                return Ok(n);
            }
            self.0.pop_front();
        }
        Ok(0)
    }
}
