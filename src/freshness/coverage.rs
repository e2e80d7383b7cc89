//! Which watches keep one feed's index, and which of them are seeded and live (SPEC §13). A
//! cluster-wide install keeps each feed with one watch of every namespace; a namespace-scoped
//! install (`--namespaces`) with one watch per namespace listed, each seeded by a LIST of its
//! own namespace. A re-LIST of one namespace replaces that namespace's objects only, never the
//! others' (a store merged across namespaces that a re-LIST replaces whole keeps only the last
//! namespace listed: the kube-rs multi-namespace pitfall), and the index answers only while
//! every one of its watches is seeded and live.

use std::{
    collections::{BTreeSet, HashSet},
    sync::Arc,
};

use crate::model::ObjectKey;

/// The namespaces of a namespace-scoped install, or every namespace (`None`): what the watches
/// of one feed are, one per namespace or one for all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Partitions(Option<Arc<BTreeSet<String>>>);

impl Partitions {
    /// One watch per namespace of `namespaces`.
    pub fn namespaces(namespaces: impl IntoIterator<Item = String>) -> Self {
        Self(Some(Arc::new(namespaces.into_iter().collect())))
    }

    /// The namespaces listed; `None` for a cluster-wide install.
    pub fn listed(&self) -> Option<&BTreeSet<String>> {
        self.0.as_deref()
    }

    /// Every watch of a feed: `[None]`, or one per namespace.
    pub fn parts(&self) -> Vec<Option<String>> {
        match &self.0 {
            None => vec![None],
            Some(names) => names.iter().cloned().map(Some).collect(),
        }
    }

    /// The watch `part` names, as these partitions know it: any part is the one watch of a
    /// cluster-wide install; a namespace not listed is none of a scoped one's.
    fn of(&self, part: Option<&str>) -> Option<Option<String>> {
        match (&self.0, part) {
            (None, _) => Some(None),
            (Some(names), Some(ns)) if names.contains(ns) => Some(Some(ns.to_string())),
            (Some(_), _) => None,
        }
    }
}

/// Which of a feed's watches are not seeded yet, and which are down (see the module
/// documentation).
#[derive(Debug)]
pub struct Coverage {
    partitions: Partitions,
    unseeded: HashSet<Option<String>>,
    down: HashSet<Option<String>>,
}

impl Default for Coverage {
    fn default() -> Self {
        Self::new(&Partitions::default())
    }
}

impl Coverage {
    /// Every watch of `partitions` unseeded and down.
    pub fn new(partitions: &Partitions) -> Self {
        let parts: HashSet<Option<String>> = partitions.parts().into_iter().collect();
        Self {
            partitions: partitions.clone(),
            unseeded: parts.clone(),
            down: parts,
        }
    }

    /// The watch of `part` seeded its objects.
    pub fn seeded(&mut self, part: Option<&str>) {
        if let Some(p) = self.partitions.of(part) {
            self.unseeded.remove(&p);
        }
    }

    /// The watch of `part` starts over with a new LIST.
    pub fn unseed(&mut self, part: Option<&str>) {
        if let Some(p) = self.partitions.of(part) {
            self.unseeded.insert(p);
        }
    }

    /// The watch of `part` is up (events arrive) or down (they may be missed).
    pub fn set_live(&mut self, part: Option<&str>, live: bool) {
        if let Some(p) = self.partitions.of(part) {
            if live {
                self.down.remove(&p);
            } else {
                self.down.insert(p);
            }
        }
    }

    /// Every watch is up.
    pub fn live(&self) -> bool {
        self.down.is_empty()
    }

    /// Every watch is seeded and up: the index answers.
    pub fn answers(&self) -> bool {
        self.unseeded.is_empty() && self.down.is_empty()
    }

    /// Whether an object of namespace `namespace` belongs to the watch of `part`.
    pub fn covers(part: Option<&str>, namespace: &str) -> bool {
        part.is_none_or(|p| p == namespace)
    }
}

/// The namespace a key of an index belongs to, which says which watch keeps it.
pub trait InNamespace {
    fn namespace(&self) -> &str;
}

impl InNamespace for ObjectKey {
    fn namespace(&self) -> &str {
        &self.namespace
    }
}

/// A namespace's name: the namespaces index's key is its own namespace.
impl InNamespace for String {
    fn namespace(&self) -> &str {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scoped_feed_answers_once_every_namespace_is_seeded_and_live() {
        let mut c = Coverage::new(&Partitions::namespaces(["a".into(), "b".into()]));
        assert!(!c.answers());
        c.seeded(Some("a"));
        c.set_live(Some("a"), true);
        assert!(!c.answers(), "b is not in yet");
        c.seeded(Some("b"));
        c.set_live(Some("b"), true);
        assert!(c.answers());
        c.set_live(Some("b"), false);
        assert!(!c.answers() && !c.live(), "b's watch is down");
        c.set_live(Some("b"), true);
        c.unseed(Some("a"));
        assert!(!c.answers() && c.live(), "a starts over");
        c.seeded(Some("a"));
        c.set_live(Some("elsewhere"), false);
        assert!(
            c.answers(),
            "a namespace not listed is no watch of this feed"
        );
    }

    #[test]
    fn a_cluster_wide_feed_is_one_watch() {
        let mut c = Coverage::default();
        c.seeded(None);
        c.set_live(None, true);
        assert!(c.answers());
        c.set_live(Some("a"), false);
        assert!(!c.answers(), "any part is the one watch");
    }
}
