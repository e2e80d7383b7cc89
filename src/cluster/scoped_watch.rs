//! The watches of a namespace-scoped install (SPEC §13), one per feed and listed namespace:
//! the Namespace object of each is read with a GET and watched on the path the API server
//! attributes to that namespace, so a RoleBinding there grants both. A namespace whose owner
//! did not bind copyrator answers 403: it is said once (`scope.rs`), handled as holding
//! nothing, and only its Namespace watch looks again, one GET every
//! [`NOT_BOUND_RECHECK`]; its other watches make no call until it is bound.

use std::sync::atomic::Ordering;

use super::{
    ApiResult,
    scope::{Binding, NOT_BOUND_RECHECK},
    watch::{FeedWatch, WatchSink},
};
use crate::freshness::{dispatch::Ended, feed::Feed};

/// The scoped install's part of a watch's loop (`watch.rs` runs it), as the watch's own
/// methods: what a namespace not bound, or a kind refused there, makes it do.
impl<S: WatchSink> FeedWatch<S> {
    /// The watch was refused in its namespace (403): nothing is there for it.
    pub(super) fn mark_refused(&self) {
        if let (Feed::Namespaces, Some(ns)) = (self.target.feed, self.part.as_deref()) {
            self.cluster.scope().set(ns, Binding::NotBound);
        }
        self.refused.store(true, Ordering::SeqCst);
    }

    /// Whether the watch was refused since it last started over.
    pub(super) fn is_refused(&self) -> bool {
        self.refused.load(Ordering::SeqCst)
    }

    /// Seeds the Namespaces watch of `ns` with its object (one GET); returns the version its
    /// watch starts from. A 403 marks the namespace not bound and the watch refused.
    pub(super) async fn seed_namespace(&self, ns: &str) -> ApiResult<String> {
        let meta = self.cluster.check_namespace(ns).await?;
        if self.cluster.scope().binding(ns) == Some(Binding::NotBound) {
            self.mark_refused();
            return Err(super::ApiError::other(
                "get",
                "namespaces",
                format!("copyrator is not bound in namespace {ns}"),
            ));
        }
        // A namespace not there yet is watched from any version: its creation is an ADDED.
        let at = meta
            .as_ref()
            .and_then(|m| m.resource_version.clone())
            .unwrap_or_else(|| "0".into());
        let mut seeding = self.sink.seeding(Feed::Namespaces, Some(ns));
        if let Some(meta) = meta {
            self.sink.listed(&mut seeding, meta);
        }
        self.sink.seeded(seeding);
        self.progress.made();
        Ok(at)
    }

    /// Before the watch of namespace `ns` calls the API server: returns `true` at once while
    /// copyrator is (or may be) bound there. Otherwise it keeps nothing of `ns`, waits until
    /// copyrator is bound there, and returns `false`: the watch starts over with a LIST.
    pub(super) async fn until_bound(&self, ns: &str) -> bool {
        let feed = self.target.feed;
        let scope = self.cluster.scope();
        let refused = self.refused.swap(false, Ordering::SeqCst);
        // Quiet on purpose: `/livez` must not take it for a wedged watch.
        let tick = self.cluster.api_timeout().min(NOT_BOUND_RECHECK);
        if feed != Feed::Namespaces && !refused {
            // The namespace's own watch finds out first, with one GET: no call here until then.
            let mut changes = scope.not_bound();
            while scope.binding(ns) == Some(Binding::Unknown) {
                if let Ok(Err(_)) = tokio::time::timeout(tick, changes.changed()).await {
                    break;
                }
                self.progress.made();
            }
        }
        let not_bound = scope.binding(ns) == Some(Binding::NotBound);
        if !refused && !not_bound {
            return true;
        }
        self.sink.nothing_there(feed, ns);
        if feed == Feed::Namespaces {
            // The one call a namespace that did not consent costs: a GET now and then.
            loop {
                self.quiet(NOT_BOUND_RECHECK).await;
                match self.cluster.check_namespace(ns).await {
                    Ok(_) if scope.binding(ns) == Some(Binding::Bound) => {
                        self.sink.bound_again(ns);
                        break;
                    }
                    _ => {}
                }
            }
        } else {
            let mut changes = scope.not_bound();
            if refused && !not_bound {
                // Bound, but this kind refused: the Role the owner bound lacks it. Looked at
                // again as seldom as a namespace not bound.
                tracing::debug!(
                    namespace = ns,
                    feed = feed.name(),
                    "refused to list here although bound: the Role bound here lacks this kind"
                );
                self.quiet(NOT_BOUND_RECHECK).await;
            } else {
                while scope.binding(ns) != Some(Binding::Bound) {
                    if let Ok(Err(_)) = tokio::time::timeout(tick, changes.changed()).await {
                        break;
                    }
                    self.progress.made();
                }
            }
        }
        // What was kept as "nothing there" is replaced by the LIST it starts over with.
        self.sink.down(feed, Some(ns), &Ended::Expired);
        false
    }

    /// Waits `period` without a call, telling `/livez` the watch is idle on purpose.
    pub(super) async fn quiet(&self, period: std::time::Duration) {
        let tick = self.cluster.api_timeout().min(period);
        let mut waited = std::time::Duration::ZERO;
        while waited < period {
            tokio::time::sleep(tick).await;
            waited += tick;
            self.progress.made();
        }
    }
}
