//! Metadata-only watches: I/O only, one loop for all of them. Each turns the API server's
//! stream of one [`Target`] (a feed, or the sources a CopyRule's selector matches) into events
//! and hands every one to its [`WatchSink`]: this cluster's [`Dispatcher`], which keeps the
//! indexes and decides what an event wakes and queues (`crate::freshness::dispatch`), or a
//! HubLink's follower, for the watches of a hub (`crate::sync::hub::follow`). Each is label-selected where the resource is
//! numerous (sources and copies, never every Secret), so memory stays flat in the number of
//! unrelated objects. A watch starts from a LIST that seeds its index and resumes from the
//! last resourceVersion it saw; when the API server no longer has that version (410), it starts
//! over with a new LIST.
//!
//! A watch whose connection goes silent (no FIN, no RST) is found within the API timeout
//! (`--api-timeout`): the API server is asked to end each watch request well before it
//! (`Cluster::watch_seconds`), so a watch silent for longer is dead, not quiet. It ends as
//! failed and resumes, on a new connection, from the last resourceVersion it saw: the API
//! server replays what it missed, or answers 410 and the watch starts over with a LIST.
//! Meanwhile its index stops answering (jobs LIST), since it may lag. Each watch's progress
//! is recorded for `/livez` and the metrics (`progress`).

use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    Resource,
    api::WatchParams,
    core::{WatchEvent, request::Request},
};
use tokio::sync::watch;

use crate::{
    cluster::{
        Cluster,
        progress::{FeedProgress, WatchProgress},
    },
    copyrule::CopyRule,
    freshness::{
        dispatch::{Change, Dispatcher, Ended},
        feed::Feed,
    },
    marks,
    metrics::{FeedLabels, Metrics},
    model::{Meta, MetaItem, Object},
    namespaced::NamespacedCopyRule,
};

use super::scope;

/// What one watch follows: a feed's objects in every namespace, or those of one namespace a
/// CopyRule's `sourceSelector` matches (`selectors.rs` makes its target).
#[derive(Clone, Debug)]
pub struct Target {
    pub feed: Feed,
    /// `None`: every namespace.
    pub namespace: Option<String>,
    /// The label selector the API server filters by.
    pub selector: Option<String>,
    /// The field selector it filters by: `metadata.name=<name>` watches one object, which
    /// RBAC authorizes against a Role's `resourceNames`.
    pub fields: Option<String>,
    /// How logs, metrics and `/livez` name it: its feed's name, unless said otherwise.
    pub name: &'static str,
    /// A resource that is no feed's (a hub's ClusterProfiles): its plural, as API-call
    /// metrics name it, and its URL path; the sink is still told `feed`. `None`: the feed's.
    pub resource: Option<(&'static str, String)>,
}

/// Where a watch hands what it sees, in order: the same calls whatever it follows.
pub trait WatchSink: Send + Sync + 'static {
    /// What a seeding LIST gathers until it is in.
    type Seeding: Send;
    /// A seeding LIST of `feed` (its watch of `part`) starts.
    fn seeding(&self, feed: Feed, part: Option<&str>) -> Self::Seeding;
    /// One item of it.
    fn listed(&self, seeding: &mut Self::Seeding, meta: Meta);
    /// It is in.
    fn seeded(&self, seeding: Self::Seeding);
    /// A watch event.
    fn event(&self, feed: Feed, change: Change, meta: &Meta);
    /// A watch request is connected: events arrive in order from now on.
    fn up(&self, feed: Feed, part: Option<&str>);
    /// A watch request ended (see [`Ended`]).
    fn down(&self, feed: Feed, part: Option<&str>, ended: &Ended);
    /// The watch stopped for good.
    fn stopped(&self, feed: Feed, part: Option<&str>);
    /// A namespace-scoped install's watch has nothing to watch in `namespace`.
    fn nothing_there(&self, _feed: Feed, _namespace: &str) {}
    /// copyrator is bound again in `namespace` (namespace-scoped installs).
    fn bound_again(&self, _namespace: &str) {}
    /// An optional resource is not readable at all: nothing of `feed` is there.
    fn nothing_there_at_all(&self, _feed: Feed) {}
}

impl WatchSink for Dispatcher {
    type Seeding = crate::freshness::dispatch::Seeding;
    fn seeding(&self, feed: Feed, part: Option<&str>) -> Self::Seeding {
        Dispatcher::seeding(self, feed, part)
    }
    fn listed(&self, seeding: &mut Self::Seeding, meta: Meta) {
        Dispatcher::listed(self, seeding, meta)
    }
    fn seeded(&self, seeding: Self::Seeding) {
        Dispatcher::seeded(self, seeding)
    }
    fn event(&self, feed: Feed, change: Change, meta: &Meta) {
        Dispatcher::event(self, feed, change, meta)
    }
    fn up(&self, feed: Feed, part: Option<&str>) {
        Dispatcher::up(self, feed, part)
    }
    fn down(&self, feed: Feed, part: Option<&str>, ended: &Ended) {
        Dispatcher::down(self, feed, part, ended)
    }
    fn stopped(&self, feed: Feed, part: Option<&str>) {
        Dispatcher::stopped(self, feed, part)
    }
    fn nothing_there(&self, feed: Feed, namespace: &str) {
        Dispatcher::nothing_there(self, feed, namespace)
    }
    fn bound_again(&self, namespace: &str) {
        Dispatcher::bound_again(self, namespace)
    }
    fn nothing_there_at_all(&self, feed: Feed) {
        Dispatcher::nothing_there_at_all(self, feed)
    }
}

impl Target {
    /// A feed, label-selected where its resource is numerous (sources and copies, never every
    /// Secret), so memory stays flat in the number of unrelated objects.
    pub fn feed(feed: Feed) -> Self {
        let selector = match feed {
            // A copy is never a source (SPEC §9.6): copies do not even enter the index.
            Feed::Sources(_) => Some(marks::OPTED_IN_SELECTOR.to_string()),
            Feed::Copies(_) => Some(marks::MANAGED_SELECTOR.to_string()),
            Feed::Namespaces | Feed::CopyRules | Feed::NamespacedCopyRules | Feed::Selected(_) => {
                None
            }
        };
        Self {
            feed,
            namespace: None,
            selector,
            fields: None,
            name: feed.name(),
            resource: None,
        }
    }

    /// The resource, as API-call metrics name it.
    fn resource(&self) -> &'static str {
        if let Some((plural, _)) = &self.resource {
            return plural;
        }
        match self.feed {
            Feed::Namespaces => "namespaces",
            Feed::Sources(kind) | Feed::Copies(kind) | Feed::Selected(kind) => kind.plural(),
            Feed::CopyRules => "copyrules",
            Feed::NamespacedCopyRules => "namespacedcopyrules",
        }
    }

    fn url_path(&self) -> String {
        if let Some((_, path)) = &self.resource {
            return path.clone();
        }
        let ns = self.namespace.as_deref();
        match self.feed {
            // One namespace's own object, by the path whose request the API server attributes
            // to that namespace: a RoleBinding there can grant watching it (SPEC §13).
            Feed::Namespaces if ns.is_some() => {
                format!("/api/v1/watch/namespaces/{}", ns.unwrap_or_default())
            }
            Feed::Namespaces => Namespace::url_path(&(), None),
            Feed::Sources(kind) | Feed::Copies(kind) | Feed::Selected(kind) => {
                Object::url_path(&kind, ns)
            }
            Feed::CopyRules => CopyRule::url_path(&(), None),
            Feed::NamespacedCopyRules => NamespacedCopyRule::url_path(&(), ns),
        }
    }
}

/// Starts one watch per feed, and the restoring of copies found edited while copyrator's own
/// write was in flight; they run until `shutdown` fires. NamespacedCopyRules are watched only
/// when `namespaced_rules` (their CRD is installed).
pub fn spawn(
    cluster: &Cluster,
    dispatcher: &Arc<Dispatcher>,
    metrics: &Arc<Metrics>,
    progress: &WatchProgress,
    shutdown: &watch::Receiver<bool>,
    namespaced_rules: bool,
) -> Vec<tokio::task::JoinHandle<()>> {
    let edited = {
        let dispatcher = Arc::clone(dispatcher);
        let shutdown = shutdown.clone();
        tokio::spawn(async move { dispatcher.restore_edited_after_writes(shutdown).await })
    };
    if let Some(listed) = cluster.scope().listed() {
        // A namespace-scoped install reads no cluster-scoped CopyRule (SPEC §13): its feed
        // has nothing to watch in any namespace.
        tracing::info!(
            namespaces = listed.len(),
            "namespace-scoped install: cluster-scoped CopyRules are ignored; inline rules apply"
        );
        for ns in listed {
            dispatcher.nothing_there(Feed::CopyRules, ns);
        }
    }
    if !namespaced_rules {
        // Said once; nothing is looked for again (installing the CRD takes a restart).
        tracing::info!(
            "the NamespacedCopyRule CRD is not installed: NamespacedCopyRules are not read"
        );
        match cluster.scope().listed() {
            None => dispatcher.nothing_there_at_all(Feed::NamespacedCopyRules),
            Some(listed) => {
                for ns in listed {
                    dispatcher.nothing_there(Feed::NamespacedCopyRules, ns);
                }
            }
        }
    }
    Feed::all()
        .into_iter()
        .filter(|feed| cluster.scope().listed().is_none() || *feed != Feed::CopyRules)
        .filter(|feed| namespaced_rules || *feed != Feed::NamespacedCopyRules)
        .flat_map(|feed| spawn_feed(cluster, dispatcher, metrics, progress, shutdown, feed))
        .chain([edited])
        .collect()
}

/// Starts the watch of one feed (at startup, or for a kind registered later): one of every
/// namespace, or one per namespace of a namespace-scoped install.
pub fn spawn_feed(
    cluster: &Cluster,
    dispatcher: &Arc<Dispatcher>,
    metrics: &Arc<Metrics>,
    progress: &WatchProgress,
    shutdown: &watch::Receiver<bool>,
    feed: Feed,
) -> Vec<tokio::task::JoinHandle<()>> {
    let parts = match cluster.scope().listed() {
        None => vec![None],
        Some(listed) => listed.iter().cloned().map(Some).collect(),
    };
    parts
        .into_iter()
        .map(|part| {
            let mut target = Target::feed(feed);
            target.namespace.clone_from(&part);
            let watch = FeedWatch {
                cluster: cluster.clone(),
                target,
                part,
                sink: Arc::clone(dispatcher),
                metrics: Arc::clone(metrics),
                progress: progress.track(feed.name()),
                refused: Default::default(),
            };
            tokio::spawn(watch.run(shutdown.clone()))
        })
        .collect()
}

/// Starts the watch of a CopyRule selector's sources (`crate::cluster::selectors`); it runs
/// until aborted or `shutdown` fires. `/livez` does not judge it: it comes and goes with its
/// rule, on the leader only.
pub fn spawn_selected(
    cluster: &Cluster,
    dispatcher: &Arc<Dispatcher>,
    metrics: &Arc<Metrics>,
    progress: &WatchProgress,
    shutdown: &watch::Receiver<bool>,
    target: Target,
) -> tokio::task::JoinHandle<()> {
    let watch = FeedWatch {
        cluster: cluster.clone(),
        progress: progress.untracked(target.feed.name()),
        target,
        // A selector's watch is its feed's only one, in any install.
        part: None,
        sink: Arc::clone(dispatcher),
        metrics: Arc::clone(metrics),
        refused: Default::default(),
    };
    tokio::spawn(watch.run(shutdown.clone()))
}

/// Whether the failed LIST of `feed` (its watch of `part`) finds an optional resource absent:
/// NamespacedCopyRules, watched cluster-wide, not served (CRD deleted) or not granted (a
/// hand-made role without them). Watched per namespace, a 403 is `scoped_watch`'s.
fn optional(feed: Feed, part: Option<&str>, e: &crate::cluster::ApiError) -> bool {
    feed == Feed::NamespacedCopyRules && part.is_none() && (e.is_forbidden() || e.is_not_found())
}

/// Starts a watch of `target` in the cluster `cluster` reaches (a hub's, say), handing what it
/// sees to `sink`; it runs until aborted or `shutdown` fires. `/livez` does not judge it.
pub fn spawn_into<S: WatchSink>(
    cluster: &Cluster,
    sink: Arc<S>,
    metrics: &Arc<Metrics>,
    progress: &WatchProgress,
    shutdown: &watch::Receiver<bool>,
    target: Target,
) -> tokio::task::JoinHandle<()> {
    let watch = FeedWatch {
        cluster: cluster.clone(),
        progress: progress.untracked(target.name),
        target,
        part: None,
        sink,
        metrics: Arc::clone(metrics),
        refused: Default::default(),
    };
    tokio::spawn(watch.run(shutdown.clone()))
}

/// One watch: the loop every feed, selector and hub watch runs (list, watch, bookmarks, 410,
/// backoff, silence).
pub(super) struct FeedWatch<S: WatchSink = Dispatcher> {
    pub(super) cluster: Cluster,
    pub(super) target: Target,
    /// Which of its feed's watches it is: `None` the one of every namespace, else the one of
    /// a namespace of a namespace-scoped install.
    pub(super) part: Option<String>,
    pub(super) sink: Arc<S>,
    metrics: Arc<Metrics>,
    pub(super) progress: Arc<FeedProgress>,
    /// Refused (403) in its namespace since it last started over (`scoped_watch`).
    pub(super) refused: std::sync::atomic::AtomicBool,
}

impl<S: WatchSink> FeedWatch<S> {
    async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let feed = self.target.feed;
        let part = self.part.as_deref();
        let mut version = "0".to_string();
        // Each starts from a LIST that seeds its index (see `seed`).
        let mut seeded = false;
        let mut failures = 0u32;
        // Whether "NamespacedCopyRules not readable" was said (once).
        let mut said = false;
        loop {
            if let Some(ns) = part {
                // A namespace that did not consent is not called, but for the bounded look
                // of its Namespace watch (`scoped_watch.rs`).
                let bound = tokio::select! {
                    b = self.until_bound(ns) => b,
                    _ = shutdown.changed() => break,
                };
                if !bound {
                    seeded = false;
                    version = "0".into();
                    continue;
                }
            }
            let ended = tokio::select! {
                r = async {
                    if !seeded {
                        match self.seed().await {
                            Ok(at) => {
                                version = at;
                                seeded = true;
                            }
                            Err(e) if part.is_some() && e.is_forbidden() => {
                                self.mark_refused();
                                return Ended::Failed(e.to_string());
                            }
                            Err(e) if optional(feed, part, &e) => return Ended::Absent(e.to_string()),
                            Err(e) => return Ended::Failed(e.to_string()),
                        }
                    }
                    self.watch_once(&mut version).await
                } => r,
                _ = shutdown.changed() => break,
            };
            if part.is_some() && self.is_refused() {
                // Said and handled as nothing there; looked at again once bound.
                seeded = false;
                version = "0".into();
                failures = 0;
                continue;
            }
            if let Ended::Absent(why) = &ended {
                // Not served or not granted: nothing there, said once, looked at again as
                // seldom as a namespace not bound; no error loop.
                if !std::mem::replace(&mut said, true) {
                    tracing::warn!(feed = feed.name(), error = %why, "not readable: none are read; looked at again every {}s", scope::NOT_BOUND_RECHECK.as_secs());
                }
                self.sink.nothing_there_at_all(feed);
                tokio::select! {
                    _ = self.quiet(scope::NOT_BOUND_RECHECK) => {}
                    _ = shutdown.changed() => break,
                }
                continue;
            }
            self.sink.down(feed, part, &ended);
            match ended {
                Ended::Timeout => {
                    failures = 0;
                    continue;
                }
                Ended::Expired => {
                    // Events since `version` are gone: start over.
                    seeded = false;
                    version = "0".into();
                    failures = 0;
                    continue;
                }
                Ended::Failed(why) | Ended::Absent(why) => {
                    failures += 1;
                    if failures == 1 || failures.is_power_of_two() {
                        tracing::warn!(feed = self.target.name, error = %why, failures, "watch failed; waiting jobs poll meanwhile");
                    }
                }
            }
            let backoff = Duration::from_millis(100 * u64::from(failures.min(300)))
                .min(Duration::from_secs(30));
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = shutdown.changed() => break,
            }
        }
        self.sink.stopped(feed, part);
    }

    /// Lists the feed's objects (metadata, from the API server's watch cache) into a seed the
    /// dispatcher handles item by item (no list of them is held besides); returns the list's
    /// resourceVersion, where the watch starts.
    async fn seed(&self) -> crate::cluster::ApiResult<String> {
        let feed = self.target.feed;
        self.metrics
            .watch_lists
            .get_or_create(&FeedLabels {
                feed: self.target.name,
            })
            .inc();
        if let (Feed::Namespaces, Some(ns)) = (feed, self.part.as_deref()) {
            return self.seed_namespace(ns).await;
        }
        let mut seeding = self.sink.seeding(feed, self.part.as_deref());
        let at = self
            .cluster
            .list_feed(
                self.target.resource(),
                self.target.url_path(),
                self.target.selector.as_deref().unwrap_or_default(),
                self.target.fields.as_deref().unwrap_or_default(),
                |meta| {
                    // A long LIST is progress too, item by item.
                    self.progress.made();
                    self.sink.listed(&mut seeding, meta)
                },
            )
            .await?;
        if at.is_empty() {
            return Err(crate::cluster::ApiError::other(
                "list",
                self.target.resource(),
                format!("the list of {} has no resourceVersion", feed.name()),
            ));
        }
        self.sink.seeded(seeding);
        self.progress.made();
        Ok(at)
    }

    async fn watch_once(&self, version: &mut String) -> Ended {
        let feed = self.target.feed;
        let wp = WatchParams {
            label_selector: self.target.selector.clone(),
            field_selector: self.target.fields.clone(),
            timeout: Some(self.cluster.watch_seconds()),
            bookmarks: true,
            ..Default::default()
        };
        let request = match Request::new(self.target.url_path()).watch_metadata(&wp, version) {
            Ok(r) => r,
            Err(e) => return Ended::Failed(e.to_string()),
        };
        let stream = match self
            .cluster
            .watch_events::<MetaItem>(self.part.as_deref(), request)
            .await
        {
            Ok(s) => s,
            Err(e) if e.code() == 410 => return Ended::Expired,
            Err(e) if self.part.is_some() && e.is_forbidden() => {
                self.mark_refused();
                return Ended::Failed(e.to_string());
            }
            Err(e) => return Ended::Failed(e.to_string()),
        };
        self.sink.up(feed, self.part.as_deref());
        self.progress.made();
        let events = self
            .metrics
            .watch_events
            .get_or_create(&FeedLabels {
                feed: self.target.name,
            })
            .clone();
        let mut stream = std::pin::pin!(stream);
        // The API server ends the request before this; silence past it is a dead connection
        // (the client's read timeout, or a lane's PINGs, say it sooner; this holds whatever
        // the transport).
        let tick = self.cluster.api_timeout();
        let silence = self.cluster.watch_silence();
        let mut quiet = Duration::ZERO;
        loop {
            let event = match tokio::time::timeout(tick, stream.next()).await {
                Ok(Some(event)) => event,
                Ok(None) => break,
                // On a watch lane a quiet stream still open is on a connection that answers
                // PINGs (one that does not is closed, failing the stream): progress.
                Err(_) if quiet + tick < silence => {
                    quiet += tick;
                    self.progress.made();
                    continue;
                }
                Err(_) => {
                    return Ended::Failed(format!(
                        "no progress for {}s: the connection went silent",
                        (quiet + tick).as_secs()
                    ));
                }
            };
            quiet = Duration::ZERO;
            if !matches!(event, Err(_) | Ok(WatchEvent::Error(_))) {
                self.progress.made();
            }
            let (change, item) = match event {
                Ok(WatchEvent::Added(item)) => (Change::Added, item),
                Ok(WatchEvent::Modified(item)) => (Change::Modified, item),
                Ok(WatchEvent::Deleted(item)) => (Change::Deleted, item),
                Ok(WatchEvent::Bookmark(b)) => {
                    *version = b.metadata.resource_version;
                    continue;
                }
                Ok(WatchEvent::Error(status)) if status.code == 410 => return Ended::Expired,
                Ok(WatchEvent::Error(status)) => return Ended::Failed(status.message),
                Err(e) => return Ended::Failed(e.to_string()),
            };
            if let Some(rv) = &item.metadata.resource_version {
                version.clone_from(rv);
            }
            events.inc();
            self.sink.event(feed, change, &item.metadata);
        }
        Ended::Timeout
    }
}
