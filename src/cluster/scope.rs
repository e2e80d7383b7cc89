//! What an install may read and write (SPEC §13): every namespace, or, in a namespace-scoped
//! install (`--namespaces`), the namespaces listed whose owners bound copyrator's
//! ServiceAccount there. A listed namespace is bound while copyrator may read its Namespace
//! object (the first rule of the Role its owner binds); the watch of that object tells
//! (`watch.rs`). Anywhere else copyrator makes no API call: a LIST there finds nothing and a
//! GET no object, so a namespace that did not consent is, to copyrator, one that holds
//! nothing, and nothing is written there.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
};

use tokio::sync::watch;

use crate::freshness::coverage::Partitions;

/// How often a listed namespace where copyrator is not bound is looked at again (one GET of
/// its Namespace object): the API calls a namespace that did not consent costs are bounded.
pub const NOT_BOUND_RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether copyrator is bound in a listed namespace, as last seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding {
    /// Not looked at yet: calls are made, and tell.
    Unknown,
    Bound,
    /// Its Namespace object answered 403: nothing is read or written there.
    NotBound,
}

/// See the module documentation.
pub struct Scope {
    partitions: Partitions,
    bindings: Mutex<BTreeMap<String, Binding>>,
    /// The namespaces not bound, told to whoever reports them (Events, metrics).
    not_bound: watch::Sender<BTreeSet<String>>,
    /// Whether the NamespacedCopyRule CRD is installed, as found at start; not known (a
    /// one-off command) until then.
    namespaced_rules: std::sync::OnceLock<bool>,
}

impl Default for Scope {
    fn default() -> Self {
        Self::new(Partitions::default())
    }
}

impl Scope {
    /// Every namespace (`Partitions::default()`), or those listed.
    pub fn new(partitions: Partitions) -> Self {
        let bindings = partitions
            .listed()
            .into_iter()
            .flatten()
            .map(|ns| (ns.clone(), Binding::Unknown))
            .collect();
        Self {
            partitions,
            bindings: Mutex::new(bindings),
            not_bound: watch::channel(BTreeSet::new()).0,
            namespaced_rules: std::sync::OnceLock::new(),
        }
    }

    fn bindings(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Binding>> {
        self.bindings.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The watches of each feed: one per namespace listed, or one for all.
    pub fn partitions(&self) -> &Partitions {
        &self.partitions
    }

    /// The namespaces listed; `None` for a cluster-wide install.
    pub fn listed(&self) -> Option<&BTreeSet<String>> {
        self.partitions.listed()
    }

    /// Whether copyrator makes API calls in `namespace`: any namespace of a cluster-wide
    /// install; a listed one not known unbound.
    pub fn reads(&self, namespace: &str) -> bool {
        match self.listed() {
            None => true,
            Some(_) => matches!(
                self.bindings().get(namespace),
                Some(Binding::Unknown | Binding::Bound)
            ),
        }
    }

    /// The namespaces a LIST of every namespace covers: `None` for all of them (one LIST),
    /// else the listed ones copyrator may read.
    pub fn namespaces_read(&self) -> Option<Vec<String>> {
        self.listed()?;
        Some(
            self.bindings()
                .iter()
                .filter(|(_, b)| **b != Binding::NotBound)
                .map(|(ns, _)| ns.clone())
                .collect(),
        )
    }

    /// How copyrator stands in `namespace` (a listed one); returns whether that changed. A
    /// change to or from "not bound" is said once, here: not again until it changes back.
    pub fn set(&self, namespace: &str, binding: Binding) -> bool {
        let was = {
            let mut bindings = self.bindings();
            match bindings.get_mut(namespace) {
                Some(b) if *b != binding => Some(std::mem::replace(b, binding)),
                _ => None,
            }
        };
        let changed = was.is_some();
        match (was, binding) {
            (Some(_), Binding::NotBound) => tracing::warn!(
                namespace,
                "copyrator is not bound in this listed namespace: it gets no copies until its owner applies the Role and RoleBinding the chart's NOTES print (looked at again every {}s)",
                NOT_BOUND_RECHECK.as_secs()
            ),
            (Some(Binding::NotBound), Binding::Bound) => {
                tracing::info!(namespace, "copyrator is now bound in this listed namespace")
            }
            _ => {}
        }
        if changed {
            let not_bound: BTreeSet<String> = self
                .bindings()
                .iter()
                .filter(|(_, b)| **b == Binding::NotBound)
                .map(|(ns, _)| ns.clone())
                .collect();
            self.not_bound.send_replace(not_bound);
        }
        changed
    }

    /// How copyrator stands in `namespace`; `None` when it is not listed.
    pub fn binding(&self, namespace: &str) -> Option<Binding> {
        self.bindings().get(namespace).copied()
    }

    /// Records whether the NamespacedCopyRule CRD is installed (found once, at start).
    pub fn set_namespaced_rules_served(&self, served: bool) {
        let _ = self.namespaced_rules.set(served);
    }

    /// Whether NamespacedCopyRules are read: `false` only once found not installed.
    pub fn reads_namespaced_rules(&self) -> bool {
        self.namespaced_rules.get().copied().unwrap_or(true)
    }

    /// The listed namespaces not bound, now and as they change.
    pub fn not_bound(&self) -> watch::Receiver<BTreeSet<String>> {
        self.not_bound.subscribe()
    }
}

/// Shared by the clones of a `Cluster`.
pub type SharedScope = Arc<Scope>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_listed_namespaces_not_known_unbound_are_read() {
        let scope = Scope::new(Partitions::namespaces(["a".into(), "b".into()]));
        assert!(
            scope.reads("a") && scope.reads("b"),
            "unknown: a call tells"
        );
        assert!(!scope.reads("elsewhere"), "not listed");
        let mut told = scope.not_bound();
        assert!(scope.set("b", Binding::NotBound));
        assert!(!scope.set("b", Binding::NotBound), "no change");
        assert!(!scope.reads("b"));
        assert_eq!(scope.namespaces_read(), Some(vec!["a".to_string()]));
        assert!(told.has_changed().unwrap());
        assert_eq!(*told.borrow_and_update(), BTreeSet::from(["b".to_string()]));
        assert!(
            !scope.set("elsewhere", Binding::Bound),
            "not listed: ignored"
        );
        let everywhere = Scope::default();
        assert!(everywhere.reads("anything"));
        assert_eq!(everywhere.namespaces_read(), None);
    }
}
