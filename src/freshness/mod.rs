//! Freshness: why a job may trust what it reads, and what a watch event wakes, in which order
//! (SPEC §4.6, §5).
//!
//! A job acts on persisted state only, and must not act on state older than the change it was
//! admitted for. Everything that makes that so lives here:
//! - the indexes the watches keep (`index`, `copy_index`, `rule_scope`): pure data, updated by
//!   events and by copyrator's own writes, read by jobs instead of LISTs;
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
pub mod dispatch;
pub mod echoes;
pub mod index;
pub mod persisted;
pub mod prefetch;
pub mod ready;
pub mod rule_scope;
pub mod waiters;

use std::sync::Arc;

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
}
