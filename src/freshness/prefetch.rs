//! Reads a namespace job makes while the API server is still persisting the namespace change
//! it was admitted for (SPEC §4.6), so that once the namespace's watch event arrives the job
//! writes at once instead of reading first.
//!
//! A job normally reads the rules and the copies only after that event, because the event
//! orders its reads after the namespace change: any rule changed before it is either in what
//! the job reads, or its own job (which waits for the rule's event) reads the namespaces later
//! and sees the change. Reads made earlier keep that guarantee only if nothing they cover
//! changed in between, so they are used only when, from before they were sent until the job
//! uses them,
//! - no event arrived on the sources or CopyRules feeds (a global generation, bumped before the
//!   event wakes anyone, and on every feed disconnect),
//! - no event arrived for a copy in that namespace, and
//! - every feed stayed live;
//!
//! and the namespace itself is taken from its watch event (what the API server persisted),
//! which must show the awaited change. Otherwise the job reads as usual. Nothing here is
//! needed for correctness: it only saves the round trip between "persisted" and "written".

use std::{
    collections::HashMap,
    sync::{
        Mutex, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use tokio::sync::mpsc;

use crate::{
    freshness::{
        copy_index::Listed,
        persisted::{PERSIST_WAIT, persisted},
    },
    model::NamespaceInfo,
    plan::World,
    queue::job::Awaited,
};

/// Namespaces whose jobs may hold early reads at once (each holds the rules); more read as
/// usual.
pub const MAX_ENTRIES: usize = 64;

/// Early reads made at once (each is a few LISTs); requests beyond them and the
/// [`MAX_ENTRIES`] waiting are dropped, and their jobs read as usual. A flood of reviews
/// (repeated, or for namespaces that never persist) costs the API server at most this many
/// reads in flight.
pub const MAX_IN_FLIGHT: usize = 4;

/// What a namespace job reads besides the namespace: the rules and the copies in it.
pub struct NamespaceReads {
    pub world: World,
    pub copies: Vec<Listed>,
}

/// Early reads of namespace jobs, by namespace, and what happened since they were sent.
#[derive(Default)]
pub struct Prefetches {
    /// Bumped by every event of the sources and CopyRules feeds and every feed disconnect.
    generation: AtomicU64,
    /// Names each early read, so that a result lands only in the entry made for it.
    tickets: AtomicU64,
    entries: Mutex<HashMap<String, Entry>>,
    /// Where admitted namespace changes go to be read for (see [`Prefetches::serve`]).
    requests: OnceLock<mpsc::Sender<Ticket>>,
}

struct Entry {
    ticket: u64,
    since: Instant,
    generation: u64,
    copies_changed: bool,
    /// The namespace as its newest watch event since `since` showed it (`None`: deleted, or
    /// no event yet).
    persisted: Option<NamespaceInfo>,
    /// When that event arrived.
    seen: Option<Instant>,
    reads: Option<NamespaceReads>,
}

/// An early read in flight: handed back with its result.
#[must_use]
pub struct Ticket {
    namespace: String,
    id: u64,
}

impl Ticket {
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
}

impl Prefetches {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts tracking namespace `ns` before its early reads are sent; `None` when a feed is
    /// not live (`live`, asked after the generation is taken: a disconnect after that bumps
    /// it), too many namespaces are tracked already, or `ns` is tracked already: reads sent
    /// for an earlier admitted change of it serve a later one as well (they cover the rules
    /// and copies, checked from when they were sent; the namespace comes from its event), so
    /// repeated reviews of one namespace make one set of reads.
    pub fn start(&self, ns: &str, live: impl FnOnce() -> bool) -> Option<Ticket> {
        let generation = self.generation.load(Ordering::SeqCst);
        if !live() {
            return None;
        }
        let id = self.tickets.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut entries = self.lock();
        // Entries of changes never persisted (the request failed later) expire.
        entries.retain(|_, e| now.saturating_duration_since(e.since) < PERSIST_WAIT);
        if entries.len() >= MAX_ENTRIES || entries.contains_key(ns) {
            return None;
        }
        entries.insert(
            ns.to_string(),
            Entry {
                ticket: id,
                since: now,
                generation,
                copies_changed: false,
                persisted: None,
                seen: None,
                reads: None,
            },
        );
        Some(Ticket {
            namespace: ns.to_string(),
            id,
        })
    }

    /// The requests for early reads, for the one task that makes them; until this is called,
    /// none are made.
    pub fn serve(&self) -> mpsc::Receiver<Ticket> {
        let (tx, rx) = mpsc::channel(MAX_ENTRIES);
        let _ = self.requests.set(tx);
        rx
    }

    /// Asks for early reads for namespace `ns`, whose admitted change is being persisted.
    pub fn request(&self, ns: &str, live: impl FnOnce() -> bool) {
        let Some(requests) = self.requests.get() else {
            return;
        };
        if let Some(ticket) = self.start(ns, live)
            && let Err(refused) = requests.try_send(ticket)
        {
            // The reader is busy (MAX_IN_FLIGHT reads and MAX_ENTRIES waiting): no early reads.
            self.forget(&refused.into_inner());
        }
    }

    /// Keeps the result of the early reads `ticket` stands for.
    pub fn store(&self, ticket: Ticket, reads: NamespaceReads) {
        if let Some(e) = self.lock().get_mut(&ticket.namespace)
            && e.ticket == ticket.id
        {
            e.reads = Some(reads);
        }
    }

    /// Forgets the early reads `ticket` stands for (they failed, or were never sent); an
    /// entry made since for a later change stays.
    pub fn forget(&self, ticket: &Ticket) {
        let mut entries = self.lock();
        if entries
            .get(&ticket.namespace)
            .is_some_and(|e| e.ticket == ticket.id)
        {
            entries.remove(&ticket.namespace);
        }
    }

    /// A source or CopyRule changed, or a feed lost its connection: early reads sent before
    /// are no longer trusted.
    pub fn inputs_changed(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// A copy in namespace `ns` changed (a watch event).
    pub fn copy_changed(&self, ns: &str) {
        if let Some(e) = self.lock().get_mut(ns) {
            e.copies_changed = true;
        }
    }

    /// The namespace's watch event: what the API server persisted (`None`: it was deleted).
    pub fn namespace_event(&self, name: &str, info: impl FnOnce() -> Option<NamespaceInfo>) {
        if let Some(e) = self.lock().get_mut(name) {
            e.persisted = info();
            e.seen = Some(Instant::now());
        }
    }

    /// When the watch event of tracked namespace `ns` arrived, if it did (the entry stays).
    pub fn seen(&self, ns: &str) -> Option<Instant> {
        self.lock().get(ns).and_then(|e| e.seen)
    }

    /// The namespace and the early reads of `ns`, if they can stand in for reads made now:
    /// the namespace's event shows the change `awaited`, nothing the reads cover changed since
    /// they were sent, and every feed is `live`. Else why not (`stale`, `late`: still in
    /// flight, `none`). The entry is gone either way.
    pub fn take(
        &self,
        ns: &str,
        awaited: &Awaited,
        live: bool,
    ) -> Result<(NamespaceInfo, NamespaceReads), &'static str> {
        let e = self.lock().remove(ns).ok_or("none")?;
        let current = self.generation.load(Ordering::SeqCst);
        let fresh = live
            && e.generation == current
            && !e.copies_changed
            && e.since.elapsed() < PERSIST_WAIT
            && persisted(awaited, &e.persisted);
        match (fresh, e.persisted, e.reads) {
            (true, Some(ns), Some(reads)) => Ok((ns, reads)),
            (true, _, None) => Err("late"),
            _ => Err("stale"),
        }
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Policy;

    fn reads() -> NamespaceReads {
        NamespaceReads {
            world: World::from_parts(Policy::default(), [], Vec::new()),
            copies: Vec::new(),
        }
    }

    fn ns(rv: &str) -> Option<NamespaceInfo> {
        Some(NamespaceInfo {
            name: "n".into(),
            resource_version: rv.into(),
            labels: Default::default(),
            accept_from: None,
            terminating: false,
        })
    }

    fn started(p: &Prefetches) {
        let t = p.start("n", || true).unwrap();
        p.store(t, reads());
    }

    #[test]
    fn early_reads_stand_in_only_when_nothing_they_cover_changed() {
        let p = Prefetches::default();
        started(&p);
        assert!(
            p.take("n", &Awaited::Exists, true).is_err(),
            "no event for the namespace yet"
        );

        started(&p);
        assert_eq!(p.seen("n"), None, "no event yet");
        let before_event = Instant::now();
        p.namespace_event("n", || ns("7"));
        let seen = p.seen("n").expect("when its event arrived");
        assert!(seen >= before_event);
        assert_eq!(p.seen("n"), Some(seen), "looking leaves the entry");
        let (info, _) = p
            .take("n", &Awaited::Exists, true)
            .expect("nothing changed");
        assert_eq!(info.resource_version, "7");
        assert!(p.is_empty(), "taken once");

        started(&p);
        p.namespace_event("n", || ns("7"));
        p.inputs_changed();
        assert!(
            p.take("n", &Awaited::Exists, true).is_err(),
            "a rule changed"
        );

        started(&p);
        p.namespace_event("n", || ns("7"));
        p.copy_changed("other");
        p.copy_changed("n");
        assert!(
            p.take("n", &Awaited::Exists, true).is_err(),
            "a copy in it changed"
        );

        started(&p);
        p.namespace_event("n", || ns("7"));
        assert!(
            p.take("n", &Awaited::ChangedFrom("7".into()), true)
                .is_err(),
            "the event does not show the awaited change"
        );

        started(&p);
        p.namespace_event("n", || ns("7"));
        assert_eq!(
            p.take("n", &Awaited::Exists, false).err(),
            Some("stale"),
            "a watch is down"
        );

        started(&p);
        p.namespace_event("n", || None);
        assert!(
            p.take("n", &Awaited::Exists, true).is_err(),
            "deleted meanwhile"
        );

        let t = p.start("n", || true).unwrap();
        p.inputs_changed();
        p.store(t, reads());
        p.namespace_event("n", || ns("8"));
        assert!(
            p.take("n", &Awaited::Exists, true).is_err(),
            "reads sent before a change are not used"
        );

        // A second admitted change of the same namespace makes no second set of reads: the
        // first serve it, under the same checks.
        let first = p.start("n", || true).unwrap();
        assert!(
            p.start("n", || true).is_none(),
            "one set of reads per namespace"
        );
        p.store(first, reads());
        p.namespace_event("n", || ns("9"));
        let (info, _) = p
            .take("n", &Awaited::ChangedFrom("8".into()), true)
            .expect("the first reads serve the second change");
        assert_eq!(info.resource_version, "9");

        let first = p.start("n", || true).unwrap();
        p.copy_changed("n");
        assert!(p.start("n", || true).is_none());
        p.store(first, reads());
        p.namespace_event("n", || ns("10"));
        assert_eq!(
            p.take("n", &Awaited::Exists, true).err(),
            Some("stale"),
            "a copy changed after the first reads were sent"
        );

        // Reads that failed are forgotten by their ticket only.
        let failed = p.start("n", || true).unwrap();
        p.forget(&failed);
        assert!(p.is_empty());
        let newer = p.start("n", || true).unwrap();
        p.forget(&failed);
        assert!(!p.is_empty(), "a later entry stays");
        p.store(newer, reads());
    }

    #[test]
    fn tracks_a_bounded_number_of_namespaces() {
        let p = Prefetches::default();
        let tickets: Vec<Ticket> = (0..MAX_ENTRIES)
            .map(|i| p.start(&format!("n{i}"), || true).unwrap())
            .collect();
        assert!(p.start("one-more", || true).is_none());
        assert!(p.start("n1", || false).is_none(), "a feed is down");
        p.forget(&tickets[0]);
        assert!(p.start("one-more", || true).is_some());
    }
}
