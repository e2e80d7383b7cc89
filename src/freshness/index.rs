//! What copyrator's metadata watches keep of the objects they watch (SPEC §5, "Reads"): the
//! copies (`copy_index`), the opted-in sources and the namespaces, each reduced to what a job
//! needs (never a payload, never an unrelated Secret). A job's cached reads are served from
//! here instead of a LIST per job: the 1.20 watch cache has no label index, so a
//! label-selected LIST of Secrets walked every Secret in the cluster, and every LIST's answer
//! was encoded as JSON for one job.
//!
//! An index answers only while it is seeded (by the LIST its watch starts from) and its watch
//! has not failed since; otherwise callers LIST as before. A namespace-scoped install keeps
//! each index with one watch per namespace, each seeding its own namespace (`coverage`). What it answers is as fresh as a
//! LIST from the API server's watch cache (the watch is fed by that same cache): a job that
//! waited for its triggering change to be persisted sees that change here, because the watch
//! applies an event to its index before it wakes the jobs waiting on it.

use std::{
    collections::{HashMap, HashSet},
    hash::Hash,
    sync::Mutex,
};

use super::coverage::{Coverage, InNamespace, Partitions};
use crate::{
    marks,
    model::{Kind, Labels, MAX_KINDS, Meta, NamespaceInfo, ObjectKey, SourceInfo},
};

/// What copyrator keeps of a namespace, from its metadata.
pub fn namespace_info(meta: &Meta) -> Option<NamespaceInfo> {
    Some(NamespaceInfo {
        name: meta.name.clone()?,
        resource_version: meta.resource_version.clone().unwrap_or_default(),
        labels: meta.labels.as_ref().map(Labels::from).unwrap_or_default(),
        accept_from: meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(marks::ACCEPT_FROM_ANNOTATION))
            .cloned(),
        terminating: meta.deletion_timestamp.is_some(),
    })
}

/// A value kept by an index: its object's resourceVersion orders updates.
pub trait Versioned {
    fn resource_version(&self) -> &str;

    /// Whether the index also keeps the object's key among its marked ones
    /// ([`Index::read_marked`]): a few objects the callers look at without walking them all.
    fn marked(&self) -> bool {
        false
    }
}

impl Versioned for SourceInfo {
    fn resource_version(&self) -> &str {
        &self.resource_version
    }
}

impl<T: Versioned> Versioned for Box<T> {
    fn resource_version(&self) -> &str {
        (**self).resource_version()
    }
}

/// A namespace that accepts copies from somewhere (`copyrator.io/accept-from`) is marked: an
/// untrusted source's rule is judged against those alone (SPEC §9.7), so a tenant's change
/// costs the namespaces that consent, not the cluster.
impl Versioned for NamespaceInfo {
    fn resource_version(&self) -> &str {
        &self.resource_version
    }

    fn marked(&self) -> bool {
        self.accept_from
            .as_deref()
            .is_some_and(|a| !a.trim().is_empty())
    }
}

/// Whether `new` is not older than `old`. resourceVersions are opaque to clients, and only
/// used here to keep an event that arrives after copyrator's own write of the same object from
/// putting the older version back; when either does not parse as a number, the newer arrival
/// wins (a stale entry costs a conflict, never a wrong write).
fn not_older(new: &str, old: &str) -> bool {
    match (new.parse::<u64>(), old.parse::<u64>()) {
        (Ok(n), Ok(o)) => n >= o,
        _ => true,
    }
}

struct State<K, V> {
    /// Which watches keep it, seeded by a LIST and live: only when all are does it answer.
    coverage: Coverage,
    by_key: HashMap<K, V>,
    /// The keys of the values [`Versioned::marked`].
    marked: HashSet<K>,
}

impl<K, V> Default for State<K, V> {
    fn default() -> Self {
        Self {
            coverage: Coverage::default(),
            by_key: HashMap::new(),
            marked: HashSet::new(),
        }
    }
}

/// What a seeding LIST has returned so far (see [`Index::seeding`]).
pub struct Seed<K, V>(HashMap<K, V>);

impl<K: Eq + Hash, V: Versioned> Seed<K, V> {
    pub fn insert(&mut self, key: K, value: V) {
        match self.0.get(&key) {
            Some(old) if !not_older(value.resource_version(), old.resource_version()) => {}
            _ => {
                self.0.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
impl<K: Eq + Hash, V: Versioned> FromIterator<(K, V)> for Seed<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(items: I) -> Self {
        let mut seed = Seed(HashMap::new());
        for (key, value) in items {
            seed.insert(key, value);
        }
        seed
    }
}

/// One watch's objects by key (see the module documentation).
pub struct Index<K, V> {
    state: Mutex<State<K, V>>,
}

impl<K, V> Default for Index<K, V> {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
        }
    }
}

impl<K, V> Index<K, V> {
    /// An index kept by the watches of `partitions` (one per namespace of a namespace-scoped
    /// install).
    pub fn with_partitions(partitions: &Partitions) -> Self {
        Self {
            state: Mutex::new(State {
                coverage: Coverage::new(partitions),
                ..State::default()
            }),
        }
    }
}

impl<K: Eq + Hash + Clone, V: Versioned> Index<K, V> {
    fn state(&self) -> std::sync::MutexGuard<'_, State<K, V>> {
        // A panic while holding the lock cannot leave the map half-updated in a way that
        // matters more than a stale entry: keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An object as a watch event or copyrator's own write showed it; an event older than
    /// what is held (copyrator's own write, seen first) does not replace it.
    pub fn insert(&self, key: K, value: V) {
        let mut state = self.state();
        if let Some(old) = state.by_key.get(&key)
            && !not_older(value.resource_version(), old.resource_version())
        {
            return;
        }
        if value.marked() {
            state.marked.insert(key.clone());
        } else {
            state.marked.remove(&key);
        }
        state.by_key.insert(key, value);
    }

    /// An object deleted: by a watch event (with its last resourceVersion) or by copyrator
    /// (`None`). A deletion older than what is held (written again since) is ignored.
    pub fn remove(&self, key: &K, resource_version: Option<&str>) {
        let mut state = self.state();
        let Some(old) = state.by_key.get(key) else {
            return;
        };
        if let Some(rv) = resource_version
            && !not_older(rv, old.resource_version())
        {
            return;
        }
        state.by_key.remove(key);
        state.marked.remove(key);
    }

    /// An empty map for the LIST of the watch of `part` (`None`: the one watch of every
    /// namespace) to fill as its items arrive (no list of them held besides), sized for what
    /// the index holds now when that LIST replaces all of it.
    pub fn seeding(&self, part: Option<&str>) -> Seed<K, V> {
        Seed(HashMap::with_capacity(if part.is_none() {
            self.len()
        } else {
            0
        }))
    }

    /// Stops answering until seeded again (the watch of `part` starts over with a new LIST).
    pub fn unseed(&self, part: Option<&str>) {
        self.state().coverage.unseed(part);
    }

    /// The watch of `part` is up (events arrive) or down (they may be missed: answer nothing).
    pub fn set_live(&self, part: Option<&str>, live: bool) {
        self.state().coverage.set_live(part, live);
    }

    /// `read` over the objects held; `None` while the index cannot answer (not seeded, or its
    /// watch down).
    pub fn read<R>(&self, read: impl FnOnce(&HashMap<K, V>) -> R) -> Option<R> {
        let state = self.state();
        state.coverage.answers().then(|| read(&state.by_key))
    }

    /// `read` over the marked objects only ([`Versioned::marked`]); `None` while the index
    /// cannot answer.
    pub fn read_marked<R>(
        &self,
        read: impl FnOnce(&mut dyn Iterator<Item = &V>) -> R,
    ) -> Option<R> {
        let state = self.state();
        state.coverage.answers().then(|| {
            let mut marked = state.marked.iter().filter_map(|k| state.by_key.get(k));
            read(&mut marked)
        })
    }

    /// What is held for `key`, answered or not (the previous version of an object whose event
    /// just arrived).
    pub fn peek<R>(&self, key: &K, read: impl FnOnce(&V) -> R) -> Option<R> {
        self.state().by_key.get(key).map(read)
    }

    /// Whether [`Index::read`] would answer now.
    pub fn answers(&self) -> bool {
        self.read(|_| ()).is_some()
    }

    /// Objects held (a gauge).
    pub fn len(&self) -> usize {
        self.state().by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<K: Eq + Hash + Clone + InNamespace, V: Versioned> Index<K, V> {
    /// Replaces what the watch of `part` keeps (`None`: everything) by what its LIST returned;
    /// returns the keys held before that the LIST no longer has (deleted while the watch was
    /// away). The other namespaces' objects stay as they are.
    pub fn seed(&self, part: Option<&str>, fresh: Seed<K, V>) -> Vec<K> {
        let mut fresh = fresh.0;
        let mut state = self.state();
        let gone: Vec<K> = state
            .by_key
            .keys()
            .filter(|k| Coverage::covers(part, k.namespace()) && !fresh.contains_key(*k))
            .cloned()
            .collect();
        if part.is_none() {
            fresh.shrink_to_fit();
            state.marked = fresh
                .iter()
                .filter(|(_, v)| v.marked())
                .map(|(k, _)| k.clone())
                .collect();
            state.by_key = fresh;
        } else {
            for key in &gone {
                state.by_key.remove(key);
                state.marked.remove(key);
            }
            for (key, value) in fresh {
                if value.marked() {
                    state.marked.insert(key.clone());
                } else {
                    state.marked.remove(&key);
                }
                state.by_key.insert(key, value);
            }
        }
        state.coverage.seeded(part);
        gone
    }
}

/// One index per kind copied (at most [`MAX_KINDS`]; an index of a kind not copied stays
/// empty and costs a few empty maps).
pub struct PerKind<T>([T; MAX_KINDS]);

impl<T: Default> Default for PerKind<T> {
    fn default() -> Self {
        Self(std::array::from_fn(|_| T::default()))
    }
}

impl<T> PerKind<T> {
    /// One per kind, each made by `make`.
    pub fn from_fn(make: impl Fn() -> T) -> Self {
        Self(std::array::from_fn(|_| make()))
    }

    pub fn of(&self, kind: Kind) -> &T {
        &self.0[kind.index()]
    }
}

/// The opted-in sources (`copyrator.io/source=true`), from the sources watches.
pub type SourceIndex = PerKind<Index<ObjectKey, SourceInfo>>;

/// Every namespace (name, labels, consent annotation, terminating), from the namespaces watch.
pub type NamespaceIndex = Index<String, NamespaceInfo>;

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(name: &str, rv: u64) -> (String, NamespaceInfo) {
        (
            name.to_string(),
            NamespaceInfo {
                name: name.into(),
                resource_version: rv.to_string(),
                labels: Default::default(),
                accept_from: None,
                terminating: false,
            },
        )
    }

    fn names(index: &NamespaceIndex) -> Option<Vec<(String, String)>> {
        index.read(|m| {
            let mut v: Vec<_> = m
                .values()
                .map(|n| (n.name.clone(), n.resource_version.clone()))
                .collect();
            v.sort();
            v
        })
    }

    #[test]
    fn answers_only_when_seeded_and_live() {
        let index = NamespaceIndex::default();
        assert!(names(&index).is_none());
        index.set_live(None, true);
        assert!(names(&index).is_none(), "not seeded");
        index.seed(None, Seed::from_iter([ns("a", 1)]));
        assert_eq!(names(&index), Some(vec![("a".into(), "1".into())]));
        index.set_live(None, false);
        assert!(names(&index).is_none(), "watch down");
        index.set_live(None, true);
        index.unseed(None);
        assert!(names(&index).is_none(), "starting over");
    }

    #[test]
    fn an_older_event_never_replaces_a_newer_version() {
        let index = NamespaceIndex::default();
        index.seed(None, Seed::from_iter([ns("a", 5)]));
        index.set_live(None, true);
        let (k, v) = ns("a", 9);
        index.insert(k, v);
        let (k, v) = ns("a", 7);
        index.insert(k, v);
        assert_eq!(names(&index), Some(vec![("a".into(), "9".into())]));
        index.remove(&"a".to_string(), Some("8"));
        assert_eq!(index.len(), 1, "a deletion older than the version held");
        index.remove(&"a".to_string(), Some("10"));
        assert_eq!(index.len(), 0);
        let (k, v) = ns("a", 11);
        index.insert(k, v);
        index.remove(&"a".to_string(), None);
        assert_eq!(index.len(), 0, "copyrator's own delete always removes");
    }

    #[test]
    fn namespaces_that_accept_copies_are_kept_apart() {
        let index = NamespaceIndex::default();
        let consenting = |name: &str, rv: u64, accept: Option<&str>| {
            let (k, mut v) = ns(name, rv);
            v.accept_from = accept.map(String::from);
            (k, v)
        };
        let marked = |index: &NamespaceIndex| {
            let mut names = index
                .read_marked(|m| m.map(|n| n.name.clone()).collect::<Vec<_>>())
                .unwrap();
            names.sort();
            names
        };
        index.seed(
            None,
            Seed::from_iter([
                consenting("a", 1, Some("tenant")),
                consenting("b", 1, None),
                consenting("c", 1, Some(" ")),
            ]),
        );
        index.set_live(None, true);
        assert_eq!(marked(&index), ["a"]);
        let (k, v) = consenting("b", 2, Some("tenant"));
        index.insert(k, v);
        let (k, v) = consenting("a", 2, None);
        index.insert(k, v);
        assert_eq!(marked(&index), ["b"], "consent given and taken back");
        index.remove(&"b".to_string(), None);
        assert!(marked(&index).is_empty());
        index.set_live(None, false);
        assert!(index.read_marked(|_| ()).is_none(), "watch down");
    }

    #[test]
    fn a_new_seed_reports_what_was_deleted_meanwhile() {
        let index = NamespaceIndex::default();
        index.seed(None, Seed::from_iter([ns("a", 1), ns("b", 2)]));
        index.set_live(None, true);
        let gone = index.seed(None, Seed::from_iter([ns("b", 3), ns("c", 4)]));
        assert_eq!(gone, vec!["a".to_string()]);
        assert_eq!(
            names(&index),
            Some(vec![("b".into(), "3".into()), ("c".into(), "4".into())]),
            "still live: answers at once"
        );
    }

    #[test]
    fn a_namespaces_relist_replaces_its_own_objects_only() {
        // A namespace-scoped install: one watch per namespace feeds one index.
        let partitions = Partitions::namespaces(["a".into(), "b".into()]);
        let index: SourceIndex = PerKind::from_fn(|| Index::with_partitions(&partitions));
        let index = index.of(Kind::Secret);
        let source = |ns: &str, name: &str, rv: u64| {
            let key = ObjectKey::new(Kind::Secret, ns, name);
            let info = SourceInfo {
                key: key.clone(),
                uid: String::new(),
                resource_version: rv.to_string(),
                labels: Default::default(),
                annotations: Default::default(),
                created: 0,
                deleting: false,
                dropped: None,
            };
            (key, info)
        };
        let held = |index: &Index<ObjectKey, SourceInfo>| {
            index.read(|m| {
                let mut v: Vec<String> = m
                    .keys()
                    .map(|k| format!("{}/{}", k.namespace, k.name))
                    .collect();
                v.sort();
                v
            })
        };
        index.seed(
            Some("a"),
            Seed::from_iter([source("a", "x", 1), source("a", "y", 1)]),
        );
        index.set_live(Some("a"), true);
        assert_eq!(held(index), None, "b's watch has not listed yet");
        index.seed(Some("b"), Seed::from_iter([source("b", "z", 2)]));
        index.set_live(Some("b"), true);
        assert_eq!(
            held(index),
            Some(vec!["a/x".into(), "a/y".into(), "b/z".into()])
        );
        // b's watch expired and lists again: a's objects stay, b's deleted one is reported.
        index.unseed(Some("b"));
        assert_eq!(held(index), None, "b starts over");
        let gone = index.seed(Some("b"), Seed::from_iter([source("b", "w", 3)]));
        assert_eq!(gone, vec![ObjectKey::new(Kind::Secret, "b", "z")]);
        assert_eq!(
            held(index),
            Some(vec!["a/x".into(), "a/y".into(), "b/w".into()])
        );
        // a namespace that is listed empty (copyrator not bound there) keeps nothing.
        let gone = index.seed(Some("a"), Seed::from_iter([]));
        assert_eq!(gone.len(), 2);
        assert_eq!(held(index), Some(vec!["b/w".into()]));
    }

    #[test]
    fn marked_namespaces_follow_a_partial_relist() {
        let partitions = Partitions::namespaces(["a".into(), "b".into()]);
        let index = NamespaceIndex::with_partitions(&partitions);
        let (ka, mut a) = ns("a", 1);
        a.accept_from = Some("x".into());
        let (kb, mut b) = ns("b", 1);
        b.accept_from = Some("x".into());
        index.seed(Some("a"), Seed::from_iter([(ka, a)]));
        index.seed(Some("b"), Seed::from_iter([(kb, b)]));
        index.set_live(Some("a"), true);
        index.set_live(Some("b"), true);
        let marked = |index: &NamespaceIndex| {
            let mut v = index
                .read_marked(|m| m.map(|n| n.name.clone()).collect::<Vec<_>>())
                .unwrap();
            v.sort();
            v
        };
        assert_eq!(marked(&index), ["a", "b"]);
        index.seed(Some("b"), Seed::from_iter([ns("b", 2)]));
        assert_eq!(marked(&index), ["a"], "b's consent is gone, a's stays");
    }
}
