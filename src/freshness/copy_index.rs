//! copyrator's own copies by source (SPEC §5, "Reads"): the metadata of every object carrying
//! copyrator's ownership label, from the copies watch copyrator runs anyway (seeded by one
//! LIST, then kept by its events) and from copyrator's own writes. A source's job finds its
//! copies here instead of with a label-selected LIST: the 1.20 watch cache has no label index,
//! so that LIST walked every Secret in the cluster, in every source job.
//!
//! It holds only labelled copies (a few hundred bytes each), never unrelated Secrets, and never
//! a payload. What it answers is as fresh as a LIST from the API server's watch cache (the
//! watch is fed by that same cache) and fresher for copyrator's own writes, which it sees
//! before their events arrive. A view it gives can still be behind, as a cached LIST can:
//! every write is preconditioned (create-if-absent, resourceVersion on replace and delete), so
//! a stale entry costs a conflict and a re-read, never an overwrite. While the watch is down
//! (or not seeded yet) it answers nothing and jobs LIST as before.

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex},
};

use std::collections::BTreeMap;

use super::{
    coverage::Partitions,
    echoes::Echoes,
    index::{Index, PerKind, Seed, Versioned},
};
use crate::{
    marks,
    model::{Kind, Meta, ObjectKey},
    plan::{CopyMarks, Existing, ManagedCopy, MarksError, SharedMarks},
};

/// One copy as found by a metadata-only LIST of managed copies (or in the copy index).
#[derive(Clone, Debug)]
pub struct Listed {
    pub key: ObjectKey,
    pub existing: Existing,
    /// Another field manager owns its content: read it in full before trusting its hash.
    pub suspect: bool,
    pub malformed: Option<MarksError>,
}

/// What exists at a target, from its metadata: a managed copy when it carries the ownership
/// label and marks that parse, else unmanaged (with the reason when the label is there).
pub fn existing_from_meta(
    kind: Kind,
    labels: Option<&BTreeMap<String, String>>,
    annotations: Option<&BTreeMap<String, String>>,
    resource_version: String,
    deleting: bool,
) -> (Existing, Option<MarksError>) {
    let empty = BTreeMap::new();
    let labels = labels.unwrap_or(&empty);
    if labels.get(marks::MANAGED_BY_LABEL).map(String::as_str) != Some(marks::MANAGED_BY_VALUE) {
        return (Existing::Unmanaged { resource_version }, None);
    }
    let annotations = annotations.unwrap_or(&empty);
    match ManagedCopy::from_marks(
        kind,
        labels,
        annotations,
        resource_version.clone(),
        deleting,
    ) {
        Ok(m) => (Existing::Managed(m), None),
        Err(e) => (Existing::Unmanaged { resource_version }, Some(e)),
    }
}

/// What a metadata-only LIST item of a managed copy tells (a LIST through `Cluster::list_meta`).
pub fn listed(kind: Kind, m: Meta) -> Option<Listed> {
    let key = ObjectKey::new(kind, m.namespace?, m.name?);
    let (existing, malformed) = existing_from_meta(
        kind,
        m.labels.as_ref(),
        m.annotations.as_ref(),
        m.resource_version.unwrap_or_default(),
        m.deletion_timestamp.is_some(),
    );
    Some(Listed {
        suspect: m.edited_by_others && matches!(existing, Existing::Managed(_)),
        key,
        existing,
        malformed,
    })
}

impl Listed {
    /// The same, its marks shared with the copies the copy index holds: a full resync holds
    /// every copy in the cluster a second time, but their marks once (SPEC §5).
    pub fn sharing_marks(mut self, index: &CopyIndex) -> Self {
        if let Existing::Managed(m) = &mut self.existing {
            index.share(m);
        }
        self
    }
}

/// One copy, as a LIST of copies would show it ([`Listed`] without the key, which is the map's).
/// Boxed in the map: the table stays small, and growing it moves pointers, not entries.
struct Entry {
    /// Its `source-uid` label where the marks do not carry it (copies whose other marks do not
    /// parse); a managed copy's is in its marks.
    other_uid: Option<String>,
    held: Held,
    suspect: bool,
    malformed: Option<MarksError>,
}

/// [`Existing`], with what every copy of one source version carries alike shared.
enum Held {
    None,
    Managed {
        resource_version: Box<str>,
        marks: Arc<CopyMarks>,
        deleting: bool,
    },
    Unmanaged {
        resource_version: Box<str>,
    },
}

impl Entry {
    /// Its marks, when it is a managed copy.
    fn marks(&self) -> Option<Arc<CopyMarks>> {
        match &self.held {
            Held::Managed { marks, .. } => Some(Arc::clone(marks)),
            _ => None,
        }
    }

    fn uid(&self) -> &str {
        match (&self.held, &self.other_uid) {
            (Held::Managed { marks, .. }, _) => &marks.source_uid,
            (_, Some(uid)) => uid,
            _ => "",
        }
    }

    fn existing(&self) -> Existing {
        match &self.held {
            Held::None => Existing::None,
            Held::Managed {
                resource_version,
                marks,
                deleting,
            } => Existing::Managed(ManagedCopy {
                resource_version: resource_version.to_string(),
                marks: Arc::clone(marks),
                actual_hash: None,
                deleting: *deleting,
            }),
            Held::Unmanaged { resource_version } => Existing::Unmanaged {
                resource_version: resource_version.to_string(),
            },
        }
    }

    fn listed(&self, key: &ObjectKey) -> Listed {
        Listed {
            key: key.clone(),
            existing: self.existing(),
            suspect: self.suspect,
            malformed: self.malformed.clone(),
        }
    }
}

impl Versioned for Entry {
    fn resource_version(&self) -> &str {
        match &self.held {
            Held::Managed {
                resource_version, ..
            }
            | Held::Unmanaged { resource_version } => resource_version,
            Held::None => "",
        }
    }
}

/// See the module documentation. A lookup walks one kind's copies: microseconds for
/// thousands of copies, and no second map to keep in memory.
#[derive(Default)]
pub struct CopyIndex {
    kinds: PerKind<Index<ObjectKey, Box<Entry>>>,
    /// The marks every copy of one source version carries alike, held once for all of them:
    /// a copy's own fields were most of its entry (~8,000 copies of 18 sources held ~3.5 MB
    /// of repeated strings). A full resync's copies share them too ([`CopyIndex::share`]).
    marks: Mutex<SharedMarks>,
    /// The echoes of copyrator's own writes and deletes of copies.
    echoes: Echoes,
}

/// What a copy's ADDED or MODIFIED event is to this replica (SPEC §5, copies edited by someone
/// else). Who wrote a copy is known by the resourceVersion copyrator's own writes returned, not
/// by a field manager's name, which any client may give.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// The echo of this replica's own write: the resourceVersion its write returned, or an
    /// event while a write of the copy is in flight (checked when the write answers).
    Own,
    /// Someone else changed the copy and left copyrator's marks as they were (or wrote it
    /// under another field manager's name): read it in full, and restore it.
    Edited,
    /// The copy's marks changed, and no write of this replica did it: most likely another
    /// replica's write (a new version of the source, a takeover). The copy's source is
    /// checked against it.
    Remarked(ObjectKey),
}

/// What a seeding LIST item becomes (see [`CopyIndex::item`]).
pub struct Item {
    key: ObjectKey,
    entry: Box<Entry>,
}

/// A seeding LIST's copies so far (see [`CopyIndex::seeding`]).
pub struct CopySeed(Seed<ObjectKey, Box<Entry>>);

impl CopySeed {
    pub fn insert(&mut self, item: Item) {
        self.0.insert(item.key, item.entry);
    }
}

impl CopyIndex {
    fn kind(&self, kind: Kind) -> &Index<ObjectKey, Box<Entry>> {
        self.kinds.of(kind)
    }

    /// What to keep of one object's metadata; `None` without a name or namespace, or without
    /// copyrator's ownership label (not a copy: a LIST by that label would not return it).
    pub fn item(&self, kind: Kind, meta: Meta) -> Option<Item> {
        let labels = meta.labels.as_ref()?;
        if labels.get(marks::MANAGED_BY_LABEL).map(String::as_str) != Some(marks::MANAGED_BY_VALUE)
        {
            return None;
        }
        let uid = labels
            .get(marks::SOURCE_UID_LABEL)
            .cloned()
            .unwrap_or_default();
        let listed = listed(kind, meta)?;
        let other_uid = match &listed.existing {
            Existing::Managed(m) if m.source_uid == uid => None,
            _ => Some(uid).filter(|u| !u.is_empty()),
        };
        let held = match listed.existing {
            Existing::None => Held::None,
            Existing::Unmanaged { resource_version } => Held::Unmanaged {
                resource_version: resource_version.into(),
            },
            Existing::Managed(mut m) => {
                self.share(&mut m);
                Held::Managed {
                    resource_version: m.resource_version.into(),
                    deleting: m.deleting,
                    marks: m.marks,
                }
            }
        };
        Some(Item {
            key: listed.key,
            entry: Box::new(Entry {
                other_uid,
                held,
                suspect: listed.suspect,
                malformed: listed.malformed,
            }),
        })
    }

    /// Points `copy` at the one shared instance of its marks: the index's entries and a
    /// full resync's copies hold each once (SPEC §5).
    pub fn share(&self, copy: &mut ManagedCopy) {
        self.marks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .share(copy);
    }

    /// The index of a namespace-scoped install: each kind's copies kept by one watch per
    /// namespace of `partitions`.
    pub fn with_partitions(partitions: &Partitions) -> Self {
        Self {
            kinds: PerKind::from_fn(|| Index::with_partitions(partitions)),
            ..Self::default()
        }
    }

    /// An empty seed for a LIST of `kind` (by the watch of `part`, `None` for every
    /// namespace) to fill as its items arrive.
    pub fn seeding(&self, kind: Kind, part: Option<&str>) -> CopySeed {
        CopySeed(self.kind(kind).seeding(part))
    }

    /// Replaces what the watch of `part` keeps of `kind` by what its LIST returned; returns the
    /// keys held before that the LIST no longer has (deleted while the watch was away).
    pub fn seed(&self, kind: Kind, part: Option<&str>, seed: CopySeed) -> Vec<ObjectKey> {
        self.kind(kind).seed(part, seed.0)
    }

    /// The watch of `part` is up (events arrive) or down (they may be missed: answer nothing).
    pub fn set_live(&self, kind: Kind, part: Option<&str>, live: bool) {
        self.kind(kind).set_live(part, live);
    }

    /// Stops answering until seeded again (the watch of `part` starts over with a new LIST).
    pub fn unseed(&self, kind: Kind, part: Option<&str>) {
        self.kind(kind).unseed(part);
        // Events may have been missed: a delete or write whose event never comes is forgotten
        // here.
        self.echoes.forget_kind(kind, part);
    }

    /// copyrator is about to create or replace `key` (noted before the request is sent: its
    /// event can arrive before the answer).
    pub fn writing(&self, key: &ObjectKey) {
        self.echoes.writing(key);
    }

    /// A write of copy `key` answered with `meta` (`None`: it failed): the index learns the
    /// copy, the version it returned waits for its event, and once no write of the copy is in
    /// flight any more, an event taken for an echo meanwhile that no write returned is
    /// someone else's edit (queued for restoring, [`CopyIndex::take_edited`]).
    pub fn write_answered(&self, key: &ObjectKey, meta: Option<Meta>) {
        let rv = meta.as_ref().and_then(|m| m.resource_version.as_deref());
        let foreign = self.echoes.write_answered(key, rv);
        if let Some(meta) = meta {
            self.observe(key.kind, meta);
        }
        if foreign {
            self.echoes.edited(key);
        }
    }

    /// Copies found edited by someone else when a write of theirs answered; waits until there
    /// is one.
    pub async fn take_edited(&self) -> Vec<ObjectKey> {
        self.echoes.take_edited().await
    }

    /// What a copy's ADDED or MODIFIED event is ([`Seen`]), and the index learns the copy from
    /// it. `None` when it is no copy (any more): no name, or no ownership label.
    pub fn event(&self, kind: Kind, meta: Meta) -> Option<Seen> {
        let key = match (&meta.namespace, &meta.name) {
            (Some(ns), Some(name)) => ObjectKey::new(kind, ns.clone(), name.clone()),
            _ => return None,
        };
        let rv = meta.resource_version.clone().unwrap_or_default();
        let others = meta.edited_by_others;
        let own = self.echoes.is_own_write(&key, &rv, others);
        let before = self.kind(kind).peek(&key, |e| e.marks());
        let item = self.item(kind, meta);
        let Some(item) = item else {
            self.kind(kind).remove(&key, Some(&rv));
            return None;
        };
        let after = item.entry.marks();
        self.kind(kind).insert(item.key, item.entry);
        Some(match after {
            _ if own => Seen::Own,
            // Marks that no longer parse: read it (and report it, never write it).
            None => Seen::Edited,
            Some(_) if others => Seen::Edited,
            Some(after) if before.flatten().is_some_and(|b| *b == *after) => Seen::Edited,
            Some(after) => Seen::Remarked(after.source.clone()),
        })
    }

    /// copyrator is about to delete `key` (noted before the request is sent: its DELETED
    /// event can arrive before the answer).
    pub fn deleting(&self, key: &ObjectKey) {
        self.echoes.deleting(key);
    }

    /// copyrator's delete of `key` did not happen (a precondition failed, the copy was gone
    /// already, or the call failed): a DELETED event of it is someone else's.
    pub fn delete_failed(&self, key: &ObjectKey) {
        self.echoes.delete_failed(key);
    }

    /// Whether a DELETED event of `key` is the echo of copyrator's own delete; each delete
    /// answers for one event.
    pub fn own_delete_seen(&self, key: &ObjectKey) -> bool {
        self.echoes.own_delete_seen(key)
    }

    /// An object as a watch event or copyrator's own write showed it. An object without the
    /// ownership label is no copy (any more): dropped.
    pub fn observe(&self, kind: Kind, meta: Meta) {
        let key = match (&meta.namespace, &meta.name) {
            (Some(ns), Some(name)) => ObjectKey::new(kind, ns.clone(), name.clone()),
            _ => return,
        };
        let rv = meta.resource_version.clone();
        match self.item(kind, meta) {
            Some(item) => self.kind(kind).insert(item.key, item.entry),
            None => self.kind(kind).remove(&key, rv.as_deref()),
        }
    }

    /// A copy deleted: by a watch event (with its last resourceVersion) or by copyrator
    /// (`None`).
    pub fn forget(&self, key: &ObjectKey, resource_version: Option<&str>) {
        self.kind(key.kind).remove(key, resource_version);
    }

    /// The copies whose `source-uid` label is one of `uids`, as a LIST selecting them would
    /// return them; `None` while the index cannot answer (not seeded, or its watch down).
    pub fn copies_of(&self, kind: Kind, uids: &BTreeSet<String>) -> Option<Vec<Listed>> {
        self.copies_where(kind, |_, e| !e.uid().is_empty() && uids.contains(e.uid()))
    }

    /// The copies in namespace `namespace`, as a LIST of the namespace's managed objects
    /// would return them; `None` while the index cannot answer.
    pub fn copies_in(&self, kind: Kind, namespace: &str) -> Option<Vec<Listed>> {
        self.copies_where(kind, |k, _| k.namespace == namespace)
    }

    /// Whether some copy (of any kind) carries marks for which `f` holds (its rule, its
    /// source); `None` while the index cannot answer for every kind. Asked of the marks the
    /// copies share (one set per source version), not of every copy: the job of a CopyRule or
    /// a source that does not exist learns that it has nothing to do without walking every
    /// copy (SPEC §9.8). Marks a job's read still holds may answer `true` for copies gone
    /// since; never `false` for a copy held.
    pub fn any_copy(&self, f: impl Fn(&CopyMarks) -> bool) -> Option<bool> {
        if !Kind::served().all(|kind| self.kind(kind).answers()) {
            return None;
        }
        let marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        Some(marks.any_held(f))
    }

    /// Every copy of `kind`; `None` while the index cannot answer.
    pub fn all(&self, kind: Kind) -> Option<Vec<Listed>> {
        self.copies_where(kind, |_, _| true)
    }

    fn copies_where(
        &self,
        kind: Kind,
        keep: impl Fn(&ObjectKey, &Entry) -> bool,
    ) -> Option<Vec<Listed>> {
        self.kind(kind).read(|by_key| {
            let mut out: Vec<Listed> = by_key
                .iter()
                .filter(|(k, e)| keep(k, e))
                .map(|(k, e)| e.listed(k))
                .collect();
            out.sort_by(|a, b| a.key.cmp(&b.key));
            out
        })
    }

    /// Copies held, by kind (a gauge).
    pub fn len(&self, kind: Kind) -> usize {
        self.kind(kind).len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn meta(ns: &str, name: &str, uid: &str, rv: u64) -> Meta {
        let labels = BTreeMap::from([
            (
                marks::MANAGED_BY_LABEL.to_string(),
                marks::MANAGED_BY_VALUE.to_string(),
            ),
            (marks::SOURCE_UID_LABEL.to_string(), uid.to_string()),
        ]);
        let annotations =
            BTreeMap::from([(marks::SOURCE_ANNOTATION.to_string(), "src/app".to_string())]);
        Meta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            resource_version: Some(rv.to_string()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        }
    }

    fn keys(found: Option<Vec<Listed>>) -> Option<Vec<(String, String)>> {
        found.map(|v| {
            v.into_iter()
                .map(|l| {
                    let rv = match &l.existing {
                        Existing::Managed(m) => m.resource_version.clone(),
                        Existing::Unmanaged { resource_version } => resource_version.clone(),
                        Existing::None => String::new(),
                    };
                    (l.key.namespace.clone(), rv)
                })
                .collect()
        })
    }

    fn seeded(items: Vec<Meta>) -> CopyIndex {
        let index = CopyIndex::default();
        let mut seed = index.seeding(Kind::Secret, None);
        for item in items
            .into_iter()
            .filter_map(|m| index.item(Kind::Secret, m))
        {
            seed.insert(item);
        }
        assert!(index.seed(Kind::Secret, None, seed).is_empty());
        index.set_live(Kind::Secret, None, true);
        index
    }

    #[test]
    fn answers_only_when_seeded_and_live() {
        let index = CopyIndex::default();
        let uids = BTreeSet::from(["u1".to_string()]);
        assert!(index.copies_of(Kind::Secret, &uids).is_none());
        index.set_live(Kind::Secret, None, true);
        assert!(index.copies_of(Kind::Secret, &uids).is_none(), "not seeded");
        index.seed(Kind::Secret, None, index.seeding(Kind::Secret, None));
        assert_eq!(keys(index.copies_of(Kind::Secret, &uids)), Some(vec![]));
        index.set_live(Kind::Secret, None, false);
        assert!(index.copies_of(Kind::Secret, &uids).is_none(), "watch down");
        index.set_live(Kind::Secret, None, true);
        index.unseed(Kind::Secret, None);
        assert!(
            index.copies_of(Kind::Secret, &uids).is_none(),
            "starting over"
        );
        // The other kind is separate.
        assert!(index.copies_of(Kind::ConfigMap, &uids).is_none());
    }

    #[test]
    fn finds_a_sources_copies_by_uid() {
        let index = seeded(vec![
            meta("a", "app", "u1", 5),
            meta("b", "app", "u1", 6),
            meta("c", "app", "u2", 7),
        ]);
        let u1 = BTreeSet::from(["u1".to_string()]);
        assert_eq!(
            keys(index.copies_of(Kind::Secret, &u1)),
            Some(vec![("a".into(), "5".into()), ("b".into(), "6".into())])
        );
        let both = BTreeSet::from(["u1".to_string(), "u2".to_string()]);
        assert_eq!(index.copies_of(Kind::Secret, &both).unwrap().len(), 3);
        assert_eq!(index.len(Kind::Secret), 3);
    }

    #[test]
    fn an_older_event_never_replaces_a_newer_write() {
        let index = seeded(vec![meta("a", "app", "u1", 5)]);
        let u1 = BTreeSet::from(["u1".to_string()]);
        // copyrator's own write answered with 9; the event of an earlier write (7) arrives late.
        index.observe(Kind::Secret, meta("a", "app", "u1", 9));
        index.observe(Kind::Secret, meta("a", "app", "u1", 7));
        assert_eq!(
            keys(index.copies_of(Kind::Secret, &u1)),
            Some(vec![("a".into(), "9".into())])
        );
        // Nor does a late deletion remove a copy created again since.
        let key = ObjectKey::new(Kind::Secret, "a", "app");
        index.forget(&key, Some("8"));
        assert_eq!(index.len(Kind::Secret), 1);
        index.forget(&key, Some("10"));
        assert_eq!(index.len(Kind::Secret), 0);
        // copyrator's own delete always removes it.
        index.observe(Kind::Secret, meta("a", "app", "u1", 11));
        index.forget(&key, None);
        assert_eq!(index.len(Kind::Secret), 0);
    }

    #[test]
    fn a_copy_that_loses_its_label_or_changes_source_moves() {
        let index = seeded(vec![meta("a", "app", "u1", 5)]);
        let u1 = BTreeSet::from(["u1".to_string()]);
        let u2 = BTreeSet::from(["u2".to_string()]);
        index.observe(Kind::Secret, meta("a", "app", "u2", 6));
        assert_eq!(keys(index.copies_of(Kind::Secret, &u1)), Some(vec![]));
        assert_eq!(index.copies_of(Kind::Secret, &u2).unwrap().len(), 1);
        // Someone took it over: the ownership label is gone.
        let mut taken = meta("a", "app", "u2", 7);
        taken
            .labels
            .as_mut()
            .unwrap()
            .remove(marks::MANAGED_BY_LABEL);
        index.observe(Kind::Secret, taken);
        assert_eq!(keys(index.copies_of(Kind::Secret, &u2)), Some(vec![]));
        assert_eq!(index.len(Kind::Secret), 0);
    }

    #[test]
    fn finds_a_namespaces_copies() {
        let index = seeded(vec![
            meta("a", "app", "u1", 5),
            meta("a", "db", "u2", 6),
            meta("b", "app", "u1", 7),
        ]);
        let found = index.copies_in(Kind::Secret, "a").unwrap();
        let names: Vec<&str> = found.iter().map(|l| l.key.name.as_str()).collect();
        assert_eq!(names, ["app", "db"]);
        assert!(index.copies_in(Kind::Secret, "c").unwrap().is_empty());
        assert!(
            index.copies_in(Kind::ConfigMap, "a").is_none(),
            "not seeded"
        );
    }

    /// A copy whose marks parse (`meta`'s lack the rule: held as unmanaged, with the reason).
    fn managed(ns: &str, name: &str, uid: &str, rv: u64) -> Meta {
        let mut m = meta(ns, name, uid, rv);
        let annotations = m.annotations.as_mut().unwrap();
        annotations.insert(marks::RULE_ANNOTATION.to_string(), "inline".to_string());
        annotations.insert(marks::CONTENT_HASH_ANNOTATION.to_string(), "h1".to_string());
        m
    }

    #[test]
    fn copies_of_one_source_version_share_their_marks_and_old_ones_are_dropped() {
        let index = seeded(vec![
            managed("a", "app", "u1", 5),
            managed("b", "app", "u1", 6),
        ]);
        let marks_of = |ns: &str| {
            let key = ObjectKey::new(Kind::Secret, ns, "app");
            index
                .kind(Kind::Secret)
                .read(|by_key| match &by_key[&key].held {
                    Held::Managed { marks, .. } => Arc::clone(marks),
                    _ => panic!("not managed"),
                })
                .unwrap()
        };
        assert!(Arc::ptr_eq(&marks_of("a"), &marks_of("b")));
        // Sources come and go (here: a new source uid per write); marks no copy holds any
        // more are not kept.
        for v in 0..1_000 {
            index.observe(Kind::Secret, managed("a", "app", &format!("v{v}"), 10 + v));
        }
        let held = index.marks.lock().unwrap().len();
        assert!(held < 100, "{held} marks held for 2 copies");
        assert_eq!(marks_of("a").source_uid, "v999");
        assert_eq!(marks_of("b").source_uid, "u1");
        let found = index.all(Kind::Secret).unwrap();
        match &found[0].existing {
            Existing::Managed(m) => {
                assert_eq!(
                    (m.resource_version.as_str(), m.source_uid.as_str()),
                    ("1009", "v999")
                );
                assert_eq!(m.source, ObjectKey::new(Kind::Secret, "src", "app"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_resyncs_own_listed_copies_share_the_indexs_marks_but_keep_their_own_version() {
        let index = seeded(vec![managed("a", "app", "u1", 5)]);
        let held = match &index.all(Kind::Secret).unwrap()[0].existing {
            Existing::Managed(m) => Arc::clone(&m.marks),
            other => panic!("{other:?}"),
        };
        // The resync's LIST shows the copy at a later version, and another copy alike.
        for (ns, rv) in [("a", 9), ("b", 10)] {
            let listed = listed(Kind::Secret, managed(ns, "app", "u1", rv))
                .unwrap()
                .sharing_marks(&index);
            match listed.existing {
                Existing::Managed(m) => {
                    assert!(Arc::ptr_eq(&m.marks, &held), "{ns}: one instance");
                    assert_eq!(m.resource_version, rv.to_string(), "the LIST's own");
                }
                other => panic!("{other:?}"),
            }
        }
        // Different marks are not merged.
        let other = listed(Kind::Secret, managed("c", "app", "u2", 11))
            .unwrap()
            .sharing_marks(&index);
        match other.existing {
            Existing::Managed(m) => assert_eq!(m.source_uid, "u2"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_deleted_event_is_copyrators_own_once_per_delete_it_made() {
        let index = seeded(vec![managed("a", "app", "u1", 5)]);
        let key = ObjectKey::new(Kind::Secret, "a", "app");
        assert!(!index.own_delete_seen(&key), "nothing deleted yet");
        // Sent, and its event arrives (before or after the answer): copyrator's echo, once.
        index.deleting(&key);
        assert!(index.own_delete_seen(&key));
        assert!(
            !index.own_delete_seen(&key),
            "a later deletion is someone else's"
        );
        // A delete that did not happen (precondition failed, gone already) marks nothing.
        index.deleting(&key);
        index.delete_failed(&key);
        assert!(!index.own_delete_seen(&key));
        // Its watch starts over: what it would have delivered is forgotten (the other
        // kind's watch is another matter).
        index.deleting(&key);
        index.unseed(Kind::ConfigMap, None);
        assert!(index.own_delete_seen(&key));
        index.deleting(&key);
        index.unseed(Kind::Secret, None);
        assert!(!index.own_delete_seen(&key));
    }

    /// Whose write an event is, told by the resourceVersion copyrator's own writes returned,
    /// not by the field manager's name (SPEC §5): a copy edited under copyrator's own field
    /// manager name is someone else's edit.
    #[test]
    fn an_event_is_copyrators_own_only_by_the_version_its_write_returned() {
        let index = seeded(vec![managed("a", "app", "u1", 5)]);
        let key = ObjectKey::new(Kind::Secret, "a", "app");
        let mut v2 = managed("a", "app", "u1", 0);
        v2.annotations
            .as_mut()
            .unwrap()
            .insert(marks::CONTENT_HASH_ANNOTATION.into(), "h2".into());
        let at = |m: &Meta, rv: u64| Meta {
            resource_version: Some(rv.to_string()),
            ..m.clone()
        };
        // Its own write answers first, then its event: the echo, once.
        index.writing(&key);
        index.write_answered(&key, Some(at(&v2, 6)));
        assert_eq!(index.event(Kind::Secret, at(&v2, 6)), Some(Seen::Own));
        // The same marks again at a version no write of this replica returned: someone edited
        // the copy (its data, say) and left copyrator's marks, whatever field manager it named.
        assert_eq!(index.event(Kind::Secret, at(&v2, 7)), Some(Seen::Edited));
        // Someone else's manager in managedFields: edited, whatever the marks.
        let mut by_kubectl = at(&v2, 8);
        by_kubectl.edited_by_others = true;
        assert_eq!(index.event(Kind::Secret, by_kubectl), Some(Seen::Edited));
        // New marks from a write this replica did not make: another replica's write, most
        // likely; the source is checked.
        let v3 = managed("a", "app", "u2", 9);
        assert_eq!(
            index.event(Kind::Secret, v3),
            Some(Seen::Remarked(ObjectKey::new(Kind::Secret, "src", "app")))
        );
    }

    #[test]
    fn an_event_that_beats_its_writes_answer_is_checked_when_the_answer_comes() {
        let index = seeded(vec![managed("a", "app", "u1", 5)]);
        let key = ObjectKey::new(Kind::Secret, "a", "app");
        let at = |rv: u64| managed("a", "app", "u1", rv);
        let edited = || index.echoes.take_now();
        // The echo arrives before the answer: taken for it, and the answer agrees.
        index.writing(&key);
        assert_eq!(index.event(Kind::Secret, at(6)), Some(Seen::Own));
        index.write_answered(&key, Some(at(6)));
        assert!(edited().is_empty());
        // Someone's edit lands right after copyrator's write, both events before the answer:
        // the answer shows which was not copyrator's, and the copy is restored.
        index.writing(&key);
        assert_eq!(index.event(Kind::Secret, at(7)), Some(Seen::Own));
        assert_eq!(index.event(Kind::Secret, at(8)), Some(Seen::Own));
        index.write_answered(&key, Some(at(7)));
        assert_eq!(edited(), std::slice::from_ref(&key));
        // A write that failed returned nothing: an event meanwhile was someone else's.
        index.writing(&key);
        assert_eq!(index.event(Kind::Secret, at(9)), Some(Seen::Own));
        index.write_answered(&key, None);
        assert_eq!(edited(), std::slice::from_ref(&key));
        // Two writes of one copy in flight: decided when both answered.
        index.writing(&key);
        index.writing(&key);
        assert_eq!(index.event(Kind::Secret, at(10)), Some(Seen::Own));
        index.write_answered(&key, None);
        assert!(edited().is_empty(), "one write still in flight");
        index.write_answered(&key, Some(at(10)));
        assert!(edited().is_empty());
        // An answered write whose echo comes later: known by its version, once.
        index.writing(&key);
        index.write_answered(&key, Some(at(11)));
        assert_eq!(index.event(Kind::Secret, at(11)), Some(Seen::Own));
        assert_eq!(index.event(Kind::Secret, at(12)), Some(Seen::Edited));
    }

    #[test]
    fn malformed_copies_are_held_as_a_list_would_return_them() {
        // Labelled, but no source annotation: a LIST by label returns it (unmanaged, with the
        // reason); so does the index, so that jobs report and skip it as before.
        let mut m = meta("a", "app", "u1", 5);
        m.annotations = None;
        let index = seeded(vec![m]);
        let found = index
            .copies_of(Kind::Secret, &BTreeSet::from(["u1".to_string()]))
            .unwrap();
        assert_eq!(found.len(), 1);
        assert!(found[0].malformed.is_some());
        assert!(matches!(found[0].existing, Existing::Unmanaged { .. }));
    }
}
