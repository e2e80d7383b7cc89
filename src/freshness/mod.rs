//! Freshness: why a job may trust what it reads, and what a watch event wakes, in which order
//! (SPEC §4.6, §5).
//!
//! A job acts on persisted state only, and must not act on state older than the change it was
//! admitted for. Everything that makes that so lives here:
//! - the indexes the watches keep (`index`, `copy_index`, `rule_scope`): pure data, updated by
//!   events and by copyrator's own writes, read by jobs instead of LISTs, each kept by one
//!   watch or, in a namespace-scoped install, one per namespace (`coverage`);
//! - the echoes of copyrator's own copy writes and deletes (`echoes`): an event at a version
//!   copyrator's write returned is its own, anything else is someone else's;
//! - jobs waiting for their admitted change to be persisted (`waiters`, `persisted`), and the
//!   early reads of namespace jobs (`prefetch`);
//! - the Pod gate's memory of settled namespaces (`ready`);
//! - the dispatcher (`dispatch`): the one place that orders what an event does.
//!
//! The watches themselves (`crate::cluster::watch`) are I/O only: they turn the API server's
//! stream into events and hand each to the dispatcher.

pub mod copy_index;
pub mod coverage;
pub mod dispatch;
pub mod echoes;
pub mod feed;
pub mod index;
pub mod persisted;
pub mod prefetch;
pub mod ready;
pub mod rule_scope;
pub mod waiters;

use std::sync::Arc;

use crate::model::Kind;
use coverage::Partitions;
use feed::Feed;

/// What the dispatcher asks of every feed's index, whatever it keeps (as linkerd's
/// `IndexNamespacedResource`): to answer or not while its watches are up or down, to stop
/// answering until a watch's next LIST, and how much it holds. `part` names the watch: `None`
/// the one of every namespace, a namespace one of a namespace-scoped install's (`coverage`).
pub trait FeedIndex {
    /// The watch is up (events arrive) or down (they may be missed: answer nothing).
    fn set_live(&self, part: Option<&str>, live: bool);
    /// The watch starts over with a new LIST: answer nothing until it is in.
    fn unseed(&self, part: Option<&str>);
    /// Objects held, for `copyrator_index_objects`; `None` when it keeps no count.
    fn held(&self) -> Option<usize>;
}

impl<K: Eq + std::hash::Hash + Clone, V: index::Versioned> FeedIndex for index::Index<K, V> {
    fn set_live(&self, part: Option<&str>, live: bool) {
        index::Index::set_live(self, part, live)
    }
    fn unseed(&self, part: Option<&str>) {
        index::Index::unseed(self, part)
    }
    fn held(&self) -> Option<usize> {
        Some(self.len())
    }
}

/// One kind's copies in the copy index.
struct CopiesOf<'a>(&'a copy_index::CopyIndex, Kind);

impl FeedIndex for CopiesOf<'_> {
    fn set_live(&self, part: Option<&str>, live: bool) {
        self.0.set_live(self.1, part, live)
    }
    fn unseed(&self, part: Option<&str>) {
        self.0.unseed(self.1, part)
    }
    fn held(&self) -> Option<usize> {
        Some(self.0.len(self.1))
    }
}

impl FeedIndex for rule_scope::CopyRuleScope {
    fn set_live(&self, part: Option<&str>, live: bool) {
        rule_scope::CopyRuleScope::set_live(self, part, live)
    }
    fn unseed(&self, _: Option<&str>) {
        self.changed()
    }
    fn held(&self) -> Option<usize> {
        None
    }
}

/// A selector's matches are kept nowhere (the sources feed keeps the labelled ones).
struct NoIndex;

impl FeedIndex for NoIndex {
    fn set_live(&self, _: Option<&str>, _: bool) {}
    fn unseed(&self, _: Option<&str>) {}
    fn held(&self) -> Option<usize> {
        None
    }
}

/// The indexes the watches keep (and copyrator's own writes update), shared by the
/// dispatcher that applies events to them and the jobs that read them (through
/// `crate::cluster::Cluster`).
#[derive(Default)]
pub struct Indexes {
    /// copyrator's copies, by source and by namespace.
    pub copies: Arc<copy_index::CopyIndex>,
    /// The opted-in sources.
    pub sources: Arc<index::SourceIndex>,
    /// Every namespace.
    pub namespaces: Arc<index::NamespaceIndex>,
    /// The CopyRules as last listed, unless a CopyRule event came since.
    pub copy_rules: Arc<rule_scope::CopyRuleScope>,
    /// The NamespacedCopyRules likewise, as the CopyRules they stand for.
    pub namespaced_rules: Arc<rule_scope::CopyRuleScope>,
    /// The watches that keep each index: one per feed, or one per feed and namespace listed.
    pub partitions: Partitions,
}

impl Indexes {
    /// The indexes of an install whose watches are those of `partitions`.
    pub fn with_partitions(partitions: Partitions) -> Self {
        Self {
            copies: Arc::new(copy_index::CopyIndex::with_partitions(&partitions)),
            sources: Arc::new(index::PerKind::from_fn(|| {
                index::Index::with_partitions(&partitions)
            })),
            namespaces: Arc::new(index::Index::with_partitions(&partitions)),
            copy_rules: Arc::new(rule_scope::CopyRuleScope::with_partitions(&partitions)),
            namespaced_rules: Arc::new(rule_scope::CopyRuleScope::with_partitions(&partitions)),
            partitions,
        }
    }

    /// What the watch of CopyRules or of NamespacedCopyRules (`feed`) keeps.
    pub fn rules_of(&self, feed: Feed) -> &rule_scope::CopyRuleScope {
        match feed {
            Feed::NamespacedCopyRules => &self.namespaced_rules,
            _ => &self.copy_rules,
        }
    }

    /// The index `feed`'s watch keeps, as [`FeedIndex`]; `f` of it.
    pub fn of<R>(&self, feed: Feed, f: impl FnOnce(&dyn FeedIndex) -> R) -> R {
        match feed {
            Feed::Copies(kind) => f(&CopiesOf(&self.copies, kind)),
            Feed::Sources(kind) => f(self.sources.of(kind)),
            Feed::Namespaces => f(&*self.namespaces),
            Feed::CopyRules => f(&*self.copy_rules),
            Feed::NamespacedCopyRules => f(&*self.namespaced_rules),
            Feed::Selected(_) => f(&NoIndex),
        }
    }
}
