//! Typed access to the Kubernetes API for the workers: the reads that build a job's view of
//! the cluster and the preconditioned writes that apply its plan. Every call goes through a
//! client-side rate limiter (reads also through a bound on reads in flight) and is counted in
//! the metrics.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Api, Client, Resource,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions},
};
use serde_json::json;

pub mod apply;
pub mod load;
pub mod ratelimit;
pub mod selectors;
pub mod watch;

use ratelimit::RateLimiter;

use crate::{
    content::DesiredCopy,
    copyrule::{CopyRule, CopyRuleStatus},
    marks,
    metrics::Metrics,
    model::{Kind, Meta, MetaItem, MetaList, NamespaceInfo, Object, ObjectKey},
};

/// An API call that failed, classified for the callers that care.
#[derive(Debug, thiserror::Error)]
#[error("{verb} {resource}: {source}")]
pub struct ApiError {
    pub verb: &'static str,
    pub resource: &'static str,
    #[source]
    pub source: kube::Error,
}

impl ApiError {
    /// HTTP status of the API server's answer (0 when there was none).
    pub fn code(&self) -> u16 {
        match &self.source {
            kube::Error::Api(status) => status.code,
            _ => 0,
        }
    }

    fn reason(&self) -> &str {
        match &self.source {
            kube::Error::Api(status) => status.reason.as_str(),
            _ => "",
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.code() == 404
    }

    /// 409 from a create: the name is taken.
    pub fn is_already_exists(&self) -> bool {
        self.code() == 409 && self.reason() == "AlreadyExists"
    }

    /// 409 from a preconditioned write: the object changed since it was read.
    pub fn is_conflict(&self) -> bool {
        self.code() == 409 && self.reason() != "AlreadyExists"
    }

    /// 403 because the namespace is being deleted (no new content allowed).
    pub fn is_namespace_terminating(&self) -> bool {
        matches!(&self.source, kube::Error::Api(s) if s.code == 403 && s.message.contains("being terminated"))
    }

    /// 422 from an update that tried to change an immutable object.
    pub fn is_immutable_rejection(&self) -> bool {
        matches!(&self.source, kube::Error::Api(s) if s.code == 422 && s.message.contains("immutable"))
    }

    /// Worth retrying the whole job (server busy, network, timeouts).
    pub fn is_transient(&self) -> bool {
        matches!(self.code(), 0 | 429 | 500 | 502 | 503 | 504)
    }
}

/// Result of an API call.
pub type ApiResult<T> = Result<T, ApiError>;

/// The outcome of a write whose failure is an expected, handled case.
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    Done,
    /// The name is taken (create) or the object changed/vanished since it was read
    /// (update/delete precondition failed): re-read and plan again.
    Stale,
    /// The namespace is being deleted: nothing may be created there.
    NamespaceTerminating,
}

/// Where a LIST is served from.
///
/// A label-selected LIST served from etcd reads every object of the resource and filters
/// afterwards: with 50,000 Secrets in the cluster, listing a source's ten copies would read
/// all 50,000, in every job. The API server's watch cache filters in memory instead, at the
/// price of lagging etcd by milliseconds. Jobs read their trigger object consistently (GET)
/// and everything label-selected from the cache; what a lagging cache can hide is covered by
/// create-if-absent, preconditioned writes, the post-write re-check and a second look after
/// namespace changes (see `sync.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// From etcd, paginated: complete lists without a selector (nothing is read in vain),
    /// and re-checks that must see the latest state.
    Consistent,
    /// From the watch cache (`resourceVersion=0`), in one response: label-selected lists.
    Cached,
}

impl Freshness {
    fn list_params(self, page_size: u32) -> ListParams {
        match self {
            Freshness::Consistent => ListParams::default().limit(page_size),
            // The watch cache does not paginate (a limit would send the request to etcd).
            Freshness::Cached => ListParams {
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
}

impl Cluster {
    pub fn new(client: Client, metrics: Arc<Metrics>, limits: ApiLimits, page_size: u32) -> Self {
        Self {
            client,
            metrics,
            writes: Arc::new(limits.writes),
            reads: Arc::new(limits.reads),
            read_slots: Arc::new(tokio::sync::Semaphore::new(limits.read_concurrency.max(1))),
            page_size: page_size.max(1),
        }
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
                self.writes.acquire().await;
                None
            }
            "watch" => None,
            _ => {
                self.reads.acquire().await;
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

    /// Sends a request and parses the JSON answer, large ones on a blocking thread. A
    /// label-selected list from the watch cache comes in one response (thousands of copies,
    /// megabytes): it is received as the chunks the connection delivers (never copied into one
    /// text) and each chunk is freed as soon as the parser has passed it.
    /// Unlike `kube::Client::request`, a parse failure never logs the body: it may be a Secret.
    async fn fetch<T: serde::de::DeserializeOwned + Send + 'static>(
        &self,
        req: axum::http::Request<Vec<u8>>,
    ) -> Result<T, kube::Error> {
        use futures::AsyncBufReadExt;
        let body = self.client.request_stream(req).await?;
        let mut body = std::pin::pin!(body);
        let mut chunks = std::collections::VecDeque::new();
        let mut total = 0;
        loop {
            let chunk = body
                .fill_buf()
                .await
                .map_err(|e| kube::Error::SerdeError(serde_json::Error::io(e)))?;
            if chunk.is_empty() {
                break;
            }
            let n = chunk.len();
            total += n;
            chunks.push_back(bytes::Bytes::copy_from_slice(chunk));
            body.consume_unpin(n);
        }
        let parse = move || serde_json::from_reader(std::io::BufReader::new(ChunkReader(chunks)));
        // Most answers (GETs, small lists) are parsed faster than a blocking thread is woken.
        if total <= INLINE_PARSE_BYTES {
            return parse().map_err(kube::Error::SerdeError);
        }
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

    /// Opens a watch; its events are parsed as `T`.
    pub async fn watch_events<T: Clone + serde::de::DeserializeOwned>(
        &self,
        req: axum::http::Request<Vec<u8>>,
    ) -> ApiResult<
        impl futures::Stream<Item = Result<kube::core::WatchEvent<T>, kube::Error>> + use<T>,
    > {
        self.call("watch", "watch", self.client.request_events::<T>(req))
            .await
    }

    /// Reads a Secret or ConfigMap in full; `None` when it does not exist.
    /// An invalid name (never from the API server) is never put into a URL: there is no such
    /// object.
    pub async fn get(&self, key: &ObjectKey) -> ApiResult<Option<Object>> {
        if !key.is_valid() {
            return Ok(None);
        }
        let req = Self::objects_request(key.kind, Some(&key.namespace))
            .get(&key.name, &Default::default());
        self.call("get", key.kind.plural(), self.fetch_opt(req))
            .await
    }

    /// Reads only the metadata of a Secret or ConfigMap.
    pub async fn get_meta(&self, key: &ObjectKey) -> ApiResult<Option<Meta>> {
        if !key.is_valid() {
            return Ok(None);
        }
        let req = Self::objects_request(key.kind, Some(&key.namespace))
            .get_metadata(&key.name, &Default::default());
        let item: Option<MetaItem> = self
            .call("get", key.kind.plural(), self.fetch_opt(req))
            .await?;
        Ok(item.map(|i| i.metadata))
    }

    /// Metadata of every object of `kind` matching the selector, each item turned into what
    /// the caller keeps by `keep` as its page arrives.
    pub async fn list_meta<U>(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        label_selector: &str,
        fresh: Freshness,
        keep: impl FnMut(Meta) -> Option<U>,
    ) -> ApiResult<Vec<U>> {
        self.list_pages(
            kind.plural(),
            Object::url_path(&kind, namespace),
            label_selector,
            fresh,
            keep,
        )
        .await
    }

    async fn list_pages<U>(
        &self,
        resource: &'static str,
        url_path: String,
        label_selector: &str,
        fresh: Freshness,
        mut keep: impl FnMut(Meta) -> Option<U>,
    ) -> ApiResult<Vec<U>> {
        let request = kube::core::Request::new(url_path);
        let mut out = Vec::new();
        let mut lp = fresh.list_params(self.page_size);
        if !label_selector.is_empty() {
            lp = lp.labels(label_selector);
        }
        loop {
            let req = request
                .list_metadata(&lp)
                .map_err(kube::Error::BuildRequest);
            let page: MetaList = self
                .call("list", resource, async { self.fetch(req?).await })
                .await?;
            out.extend(
                page.items
                    .into_iter()
                    .flatten()
                    .map(|i| i.metadata)
                    .filter_map(&mut keep),
            );
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => lp.continue_token = Some(token),
                _ => return Ok(out),
            }
        }
    }

    /// One namespace's labels and state; `None` when it does not exist.
    pub async fn get_namespace(&self, name: &str) -> ApiResult<Option<NamespaceInfo>> {
        if !crate::selector::is_dns_label(name) {
            return Ok(None);
        }
        let req = kube::core::Request::new(Namespace::url_path(&(), None))
            .get_metadata(name, &Default::default());
        let item: Option<MetaItem> = self.call("get", "namespaces", self.fetch_opt(req)).await?;
        Ok(item.and_then(|i| namespace_info(&i.metadata)))
    }

    /// Namespaces matching a label selector (`""`: all), metadata only.
    pub async fn list_namespaces(
        &self,
        label_selector: &str,
        fresh: Freshness,
    ) -> ApiResult<Vec<NamespaceInfo>> {
        self.list_pages(
            "namespaces",
            Namespace::url_path(&(), None),
            label_selector,
            fresh,
            |m| namespace_info(&m),
        )
        .await
    }

    /// Every CopyRule; none when the CRD is not installed (inline rules still work).
    pub async fn list_copy_rules(&self, fresh: Freshness) -> ApiResult<Vec<CopyRule>> {
        let api: Api<CopyRule> = Api::all(self.client.clone());
        let mut lp = fresh.list_params(self.page_size);
        let mut out = Vec::new();
        loop {
            match self.call("list", "copyrules", api.list(&lp)).await {
                Err(e) if e.is_not_found() => {
                    tracing::debug!("CopyRule CRD not installed; only inline rules apply");
                    return Ok(Vec::new());
                }
                Err(e) => return Err(e),
                Ok(page) => {
                    out.extend(page.items);
                    match page.metadata.continue_ {
                        Some(token) if !token.is_empty() => lp.continue_token = Some(token),
                        _ => return Ok(out),
                    }
                }
            }
        }
    }

    pub async fn get_copy_rule(&self, name: &str) -> ApiResult<Option<CopyRule>> {
        let api: Api<CopyRule> = Api::all(self.client.clone());
        self.call("get", "copyrules", api.get_opt(name)).await
    }

    /// Writes a CopyRule's status subresource, preconditioned on the resourceVersion the status
    /// was computed from: a status computed from an older view never overwrites a newer one.
    pub async fn patch_rule_status(
        &self,
        name: &str,
        resource_version: &str,
        status: &CopyRuleStatus,
    ) -> ApiResult<Written> {
        let api: Api<CopyRule> = Api::all(self.client.clone());
        let patch =
            json!({ "metadata": { "resourceVersion": resource_version }, "status": status });
        let pp = PatchParams {
            field_manager: Some(marks::FIELD_MANAGER.into()),
            ..Default::default()
        };
        let res = self
            .call(
                "patch",
                "copyrules/status",
                api.patch_status(name, &pp, &Patch::Merge(&patch)),
            )
            .await;
        written(res)
    }

    /// Adds `copyrator.io/source: "true"` to a source a CopyRule references, so its changes
    /// reach the sources webhook (SPEC §2.2). A metadata-only merge patch of that one label,
    /// preconditioned on the uid that was read; nothing else of the source is touched.
    pub async fn label_source(&self, key: &ObjectKey, uid: &str) -> ApiResult<Written> {
        let api = self.objects(key.kind, Some(&key.namespace));
        let patch = json!({
            "metadata": { "uid": uid, "labels": { marks::SOURCE_LABEL: "true" } }
        });
        let pp = PatchParams {
            field_manager: Some(marks::FIELD_MANAGER.into()),
            ..Default::default()
        };
        let res = self
            .call(
                "patch",
                key.kind.plural(),
                api.patch_metadata(&key.name, &pp, &Patch::Merge(&patch)),
            )
            .await;
        written(res)
    }

    /// Creates a copy if the name is free. The body is serialized from the copy's shared
    /// parts, and of the answer (the whole object again) only the metadata is kept.
    pub async fn create_copy(&self, copy: &DesiredCopy) -> ApiResult<Written> {
        let key = &copy.key;
        let send = async {
            let body = copy.body(None).map_err(kube::Error::SerdeError)?;
            let req = Self::objects_request(key.kind, Some(&key.namespace))
                .create(&post_params(), body)
                .map_err(kube::Error::BuildRequest)?;
            self.fetch::<MetaItem>(req).await
        };
        match self.call("create", key.kind.plural(), send).await {
            Err(e) if e.is_namespace_terminating() => Ok(Written::NamespaceTerminating),
            other => written(other),
        }
    }

    /// Replaces a copy, preconditioned on the resourceVersion it was planned from.
    pub async fn replace_copy(
        &self,
        copy: &DesiredCopy,
        resource_version: &str,
    ) -> ApiResult<Written> {
        let key = &copy.key;
        let send = async {
            let body = copy
                .body(Some(resource_version))
                .map_err(kube::Error::SerdeError)?;
            let req = Self::objects_request(key.kind, Some(&key.namespace))
                .replace(&key.name, &post_params(), body)
                .map_err(kube::Error::BuildRequest)?;
            self.fetch::<MetaItem>(req).await
        };
        written(self.call("update", key.kind.plural(), send).await)
    }

    /// Deletes a copy, preconditioned on the resourceVersion it was planned from.
    pub async fn delete(&self, key: &ObjectKey, resource_version: &str) -> ApiResult<Written> {
        let api = self.objects(key.kind, Some(&key.namespace));
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(resource_version.to_string()),
                uid: None,
            }),
            ..Default::default()
        };
        let res = self
            .call("delete", key.kind.plural(), api.delete(&key.name, &dp))
            .await;
        written(res)
    }
}

fn post_params() -> PostParams {
    PostParams {
        dry_run: false,
        field_manager: Some(marks::FIELD_MANAGER.into()),
    }
}

fn written<T>(res: ApiResult<T>) -> ApiResult<Written> {
    match res {
        Ok(_) => Ok(Written::Done),
        Err(e) if e.is_already_exists() || e.is_conflict() || e.is_not_found() => {
            Ok(Written::Stale)
        }
        Err(e) => Err(e),
    }
}

fn namespace_info(meta: &Meta) -> Option<NamespaceInfo> {
    Some(NamespaceInfo {
        name: meta.name.clone()?,
        resource_version: meta.resource_version.clone().unwrap_or_default(),
        labels: meta.labels.clone().unwrap_or_default(),
        accept_from: meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(marks::ACCEPT_FROM_ANNOTATION))
            .cloned(),
        terminating: meta.deletion_timestamp.is_some(),
    })
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
