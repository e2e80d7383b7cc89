//! The reads that build a job's view of the cluster: single objects, metadata lists (paginated
//! from etcd or whole from the watch cache), namespaces and CopyRules, and watches.

use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Resource};

use super::{ApiResult, Cluster, INLINE_PARSE_BYTES, ReadMode};
use crate::freshness::index::namespace_info;
use crate::{
    copyrule::CopyRule,
    model::{
        Kind, ListSplitter, Meta, MetaItem, MetaList, MetaListMeta, NamespaceInfo, Object,
        ObjectKey,
    },
};

/// Single-object reads a batch sends at once ([`each`]).
pub const READ_CONCURRENCY: usize = 16;

/// `read` of each of `keys`, [`READ_CONCURRENCY`] at a time, each answer beside its key: the
/// one loop a job's (and a one-off command's) batch of single reads takes. In no order.
pub async fn each<K, T, F, Fut>(keys: impl IntoIterator<Item = K>, read: F) -> Vec<(K, T)>
where
    K: Clone,
    F: Fn(K) -> Fut,
    Fut: Future<Output = T>,
{
    use futures::StreamExt;
    futures::stream::iter(keys)
        .map(|k| {
            let answer = read(k.clone());
            async move { (k, answer.await) }
        })
        .buffer_unordered(READ_CONCURRENCY)
        .collect()
        .await
}

impl Cluster {
    /// Opens a watch (of namespace `part`, or any); its events are parsed as `T`.
    pub async fn watch_events<T: Clone + serde::de::DeserializeOwned>(
        &self,
        part: Option<&str>,
        req: axum::http::Request<Vec<u8>>,
    ) -> ApiResult<
        impl futures::Stream<Item = Result<kube::core::WatchEvent<T>, kube::Error>> + use<T>,
    > {
        let client = self.watch_client(part);
        self.call("watch", "watch", client.request_events::<T>(req))
            .await
    }

    /// Reads a Secret or ConfigMap in full; `None` when it does not exist.
    /// An invalid name (never from the API server) is never put into a URL: there is no such
    /// object.
    pub async fn get(&self, key: &ObjectKey) -> ApiResult<Option<Object>> {
        // Outside the install's namespaces there is nothing to copyrator (SPEC §13).
        if !key.is_valid() || !self.scope.reads(&key.namespace) {
            return Ok(None);
        }
        let req = Self::objects_request(key.kind, Some(&key.namespace))
            .get(&key.name, &Default::default());
        self.call("get", key.kind.plural(), self.fetch_opt(req))
            .await
    }

    /// Reads only the metadata of a Secret or ConfigMap.
    pub async fn get_meta(&self, key: &ObjectKey) -> ApiResult<Option<Meta>> {
        if !key.is_valid() || !self.scope.reads(&key.namespace) {
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
    /// the caller keeps by `keep` as its page arrives. In a namespace-scoped install, "every
    /// namespace" is one LIST per namespace it reads, and a namespace that refuses it (403)
    /// holds nothing (SPEC §13).
    pub async fn list_meta<U>(
        &self,
        kind: Kind,
        namespace: Option<&str>,
        label_selector: &str,
        fresh: ReadMode,
        mut keep: impl FnMut(Meta) -> Option<U>,
    ) -> ApiResult<Vec<U>> {
        let namespaces = match (namespace, self.scope.namespaces_read()) {
            (None, None) => vec![None],
            (None, Some(read)) => read.into_iter().map(Some).collect(),
            (Some(ns), _) if self.scope.reads(ns) => vec![Some(ns.to_string())],
            (Some(_), _) => Vec::new(),
        };
        let scoped = self.scope.listed().is_some();
        let mut out = Vec::new();
        for ns in namespaces {
            let listed = self
                .list_pages(
                    kind.plural(),
                    Object::url_path(&kind, ns.as_deref()),
                    (label_selector, ""),
                    fresh,
                    &mut keep,
                )
                .await;
            match listed {
                Ok((items, _)) => out.extend(items),
                Err(e) if scoped && e.is_forbidden() => {
                    tracing::debug!(namespace = ?ns, kind = %kind.name(), "not allowed to list here: nothing there for copyrator");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// A watch's LIST: metadata of every object at `url_path` matching the selector, from the
    /// watch cache, each item given to `each` as it is parsed (none is held besides); returns
    /// the resourceVersion the watch resumes from.
    pub(super) async fn list_feed(
        &self,
        resource: &'static str,
        url_path: String,
        label_selector: &str,
        field_selector: &str,
        mut each: impl FnMut(Meta),
    ) -> ApiResult<String> {
        let keep = |meta| {
            each(meta);
            None::<()>
        };
        let selectors = (label_selector, field_selector);
        self.list_pages(resource, url_path, selectors, ReadMode::Cached, keep)
            .await
            .map(|(_, at)| at)
    }

    async fn list_pages<U>(
        &self,
        resource: &'static str,
        url_path: String,
        (label_selector, field_selector): (&str, &str),
        fresh: ReadMode,
        mut keep: impl FnMut(Meta) -> Option<U>,
    ) -> ApiResult<(Vec<U>, String)> {
        let request = kube::core::Request::new(url_path);
        let mut out = Vec::new();
        let mut lp = fresh.list_params(self.page_size);
        if !label_selector.is_empty() {
            lp = lp.labels(label_selector);
        }
        if !field_selector.is_empty() {
            lp = lp.fields(field_selector);
        }
        loop {
            let req = request
                .list_metadata(&lp)
                .map_err(kube::Error::BuildRequest);
            let page = self
                .call("list", resource, async {
                    self.fetch_list(req?, &mut keep, &mut out).await
                })
                .await?;
            match page.continue_ {
                Some(token) if !token.is_empty() => lp.continue_token = Some(token),
                _ => return Ok((out, page.resource_version.unwrap_or_default())),
            }
        }
    }

    /// Sends a metadata LIST and parses its answer item by item as the connection delivers
    /// it, each item turned by `keep` into what the caller keeps (into `out`) and dropped:
    /// a list of thousands of copies from the watch cache (one response, megabytes) is never
    /// held as text, nor as parsed metadata. Chunks too large to parse on the calling task go
    /// to a blocking thread. Returns the list's own metadata (its continue token).
    async fn fetch_list<U>(
        &self,
        req: axum::http::Request<Vec<u8>>,
        keep: &mut impl FnMut(Meta) -> Option<U>,
        out: &mut Vec<U>,
    ) -> Result<MetaListMeta, kube::Error> {
        use futures::AsyncBufReadExt;
        let parse_err = |e: serde_json::Error| kube::Error::SerdeError(e);
        let body = self.client.request_stream(req).await?;
        let mut body = std::pin::pin!(body);
        let mut splitter = ListSplitter::default();
        loop {
            let chunk = body
                .fill_buf()
                .await
                .map_err(|e| kube::Error::SerdeError(serde_json::Error::io(e)))?;
            if chunk.is_empty() {
                break;
            }
            let n = chunk.len();
            if n <= INLINE_PARSE_BYTES {
                splitter
                    .feed(chunk, |item| {
                        let item: MetaItem = serde_json::from_slice(item)?;
                        out.extend(keep(item.metadata));
                        Ok(())
                    })
                    .map_err(parse_err)?;
            } else {
                let chunk = bytes::Bytes::copy_from_slice(chunk);
                let (back, metas) = tokio::task::spawn_blocking(move || {
                    let mut metas = Vec::new();
                    let parsed = splitter.feed(&chunk, |item| {
                        metas.push(serde_json::from_slice::<MetaItem>(item)?.metadata);
                        Ok(())
                    });
                    (splitter, parsed.map(|()| metas))
                })
                .await
                .map_err(|e| kube::Error::Service(Box::new(e)))?;
                splitter = back;
                out.extend(metas.map_err(parse_err)?.into_iter().filter_map(&mut *keep));
            }
            body.consume_unpin(n);
        }
        let rest: MetaList = serde_json::from_slice(&splitter.finish()).map_err(parse_err)?;
        Ok(rest.metadata)
    }

    /// One namespace's labels and state; `None` when it does not exist, or, in a
    /// namespace-scoped install, when copyrator may not read it (not listed, or not bound
    /// there: SPEC §13).
    pub async fn get_namespace(&self, name: &str) -> ApiResult<Option<NamespaceInfo>> {
        Ok(self
            .get_namespace_meta(name)
            .await?
            .and_then(|m| namespace_info(&m)))
    }

    /// A namespace's metadata (see [`Cluster::get_namespace`]). In a namespace-scoped install
    /// the answer also says whether copyrator is bound there: a 403 is "not bound".
    pub(super) async fn get_namespace_meta(&self, name: &str) -> ApiResult<Option<Meta>> {
        if !crate::selector::is_dns_label(name) || !self.scope.reads(name) {
            return Ok(None);
        }
        self.check_namespace(name).await
    }

    /// A listed namespace's metadata, read even where copyrator was last found not bound: the
    /// namespace watch looks again (bounded, `watch.rs`) so a binding made later is found.
    pub(super) async fn check_namespace(&self, name: &str) -> ApiResult<Option<Meta>> {
        use super::scope::Binding;
        if !crate::selector::is_dns_label(name) {
            return Ok(None);
        }
        let req = kube::core::Request::new(Namespace::url_path(&(), None))
            .get_metadata(name, &Default::default());
        let got: ApiResult<Option<MetaItem>> =
            self.call("get", "namespaces", self.fetch_opt(req)).await;
        if self.scope.listed().is_none() {
            return got.map(|item| item.map(|i| i.metadata));
        }
        match got {
            Ok(item) => {
                self.scope.set(name, Binding::Bound);
                Ok(item.map(|i| i.metadata))
            }
            Err(e) if e.is_forbidden() => {
                self.scope.set(name, Binding::NotBound);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Namespaces matching a label selector (`""`: all), metadata only. In a namespace-scoped
    /// install: the listed namespaces copyrator may read, one GET each (it may not LIST
    /// namespaces), matched here.
    pub async fn list_namespaces(
        &self,
        label_selector: &str,
        fresh: ReadMode,
    ) -> ApiResult<Vec<NamespaceInfo>> {
        if let Some(read) = self.scope.namespaces_read() {
            let selector =
                crate::selector::Selector::parse(label_selector).map_err(|e| super::ApiError {
                    verb: "list",
                    resource: "namespaces",
                    source: kube::Error::Service(e.to_string().into()),
                })?;
            let found = each(read, |ns| async move { self.get_namespace(&ns).await }).await;
            let mut out = Vec::new();
            for (_, got) in found {
                out.extend(got?.filter(|ns| selector.matches(&ns.labels)));
            }
            out.sort_by(|a, b| a.name.cmp(&b.name));
            return Ok(out);
        }
        self.list_pages(
            "namespaces",
            Namespace::url_path(&(), None),
            (label_selector, ""),
            fresh,
            |m| namespace_info(&m),
        )
        .await
        .map(|(items, _)| items)
    }

    /// Every CopyRule; none when the CRD is not installed (inline rules still work). A
    /// namespace-scoped install does not read cluster-scoped CopyRules (SPEC §13).
    pub async fn list_copy_rules(&self, fresh: ReadMode) -> ApiResult<Vec<CopyRule>> {
        if self.scope.listed().is_some() {
            let since = self.indexes.copy_rules.listing();
            self.indexes.copy_rules.listed(since, &[]);
            return Ok(Vec::new());
        }
        let api: Api<CopyRule> = Api::all(self.client.clone());
        let mut lp = fresh.list_params(self.page_size);
        let mut out = Vec::new();
        let since = self.indexes.copy_rules.listing();
        loop {
            match self.call("list", "copyrules", api.list(&lp)).await {
                Err(e) if e.is_not_found() => {
                    tracing::debug!("CopyRule CRD not installed; only inline rules apply");
                    self.indexes.copy_rules.listed(since, &[]);
                    return Ok(Vec::new());
                }
                Err(e) => return Err(e),
                Ok(page) => {
                    out.extend(page.items);
                    match page.metadata.continue_ {
                        Some(token) if !token.is_empty() => lp.continue_token = Some(token),
                        _ => {
                            self.indexes.copy_rules.listed(since, &out);
                            return Ok(out);
                        }
                    }
                }
            }
        }
    }

    pub async fn get_copy_rule(&self, name: &str) -> ApiResult<Option<CopyRule>> {
        let api: Api<CopyRule> = Api::all(self.client.clone());
        self.call("get", "copyrules", api.get_opt(name)).await
    }
}
