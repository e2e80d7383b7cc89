//! The echoes of copyrator's own copy writes and deletes on this replica (SPEC §5, copies
//! edited by someone else): who wrote a copy is known by the resourceVersions copyrator's own
//! writes returned, never by a field manager's name, which any client may give. An event at a
//! version copyrator's write returned is its own; one that came while a write was in flight is
//! presumed its own until the write answers, and is someone else's edit if no write returned
//! that version. A DELETED event is copyrator's own once per delete it sent.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use crate::model::{Kind, ObjectKey};

/// copyrator's own writes of copies on this replica: the ones in flight, and the
/// resourceVersions answered writes returned until their events are seen.
#[derive(Default)]
struct OwnWrites {
    in_flight: HashMap<ObjectKey, Flight>,
    written: HashMap<ObjectKey, Vec<(Box<str>, Instant)>>,
    /// `written`'s size after its last pruning.
    pruned_at: usize,
}

/// The writes of one copy in flight, and the events that came meanwhile.
#[derive(Default)]
struct Flight {
    writes: u32,
    /// Events taken for a write's echo until the writes answer.
    presumed: Vec<Box<str>>,
    /// What the answered writes returned.
    answered: Vec<Box<str>>,
}

/// How long a delete copyrator made waits for its DELETED event before it is forgotten (the
/// event comes within milliseconds, or the watch starts over, which forgets them all).
const OWN_DELETE_TTL: Duration = Duration::from_secs(60);

/// Copies copyrator deletes itself (its copy delete, as it sent it): their DELETED events are
/// its own echo, not a deletion by someone else to restore (SPEC §4.4). Without it, a source
/// deleted with 500 copies woke 500 copy jobs, each reading the copy, its namespace and the
/// CopyRules to find nothing to restore.
#[derive(Default)]
struct OwnDeletes {
    sent: HashMap<ObjectKey, Instant>,
    /// `sent`'s size after its last pruning.
    pruned_at: usize,
}

/// How long the version an own write returned waits for its event before it is forgotten.
const OWN_WRITE_TTL: Duration = Duration::from_secs(60);

/// See the module documentation.
#[derive(Default)]
pub struct Echoes {
    /// Copies copyrator is deleting, or deleted and has not seen the DELETED event of yet.
    own_deletes: Mutex<OwnDeletes>,
    /// Copies copyrator is writing, or wrote and has not seen the event of yet.
    own_writes: Mutex<OwnWrites>,
    /// Copies found edited by someone else once a write of theirs answered (an event that came
    /// while the write was in flight was not its echo): taken by the watch, which restores them.
    edited: Mutex<Vec<ObjectKey>>,
    edited_notify: tokio::sync::Notify,
}

impl Echoes {
    fn own_writes(&self) -> std::sync::MutexGuard<'_, OwnWrites> {
        self.own_writes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn own_deletes(&self) -> std::sync::MutexGuard<'_, OwnDeletes> {
        self.own_deletes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Events of `kind` (in `namespace`, or all) may have been missed (its watch starts over):
    /// a delete or write whose event never comes is forgotten.
    pub fn forget_kind(&self, kind: Kind, namespace: Option<&str>) {
        let kept = |k: &ObjectKey| k.kind != kind || namespace.is_some_and(|ns| k.namespace != ns);
        self.own_deletes().sent.retain(|k, _| kept(k));
        self.own_writes().written.retain(|k, _| kept(k));
    }

    /// copyrator is about to create or replace `key`.
    pub fn writing(&self, key: &ObjectKey) {
        self.own_writes()
            .in_flight
            .entry(key.clone())
            .or_default()
            .writes += 1;
    }

    /// A write of `key` answered, returning `rv` (`None`: it failed). Once no write of the
    /// copy is in flight, returns whether an event taken for an echo meanwhile is no write's:
    /// someone else's edit.
    pub fn write_answered(&self, key: &ObjectKey, rv: Option<&str>) -> bool {
        let now = Instant::now();
        let rv: Option<Box<str>> = rv.map(Into::into);
        let mut own = self.own_writes();
        let Some(flight) = own.in_flight.get_mut(key) else {
            return false;
        };
        flight.writes = flight.writes.saturating_sub(1);
        flight.answered.extend(rv);
        if flight.writes > 0 {
            return false;
        }
        let flight = own.in_flight.remove(key).unwrap_or_default();
        let unseen: Vec<(Box<str>, Instant)> = flight
            .answered
            .iter()
            .filter(|rv| !flight.presumed.contains(rv))
            .map(|rv| (rv.clone(), now))
            .collect();
        if !unseen.is_empty() {
            if own.written.len() > 2 * own.pruned_at.max(1024) {
                own.written.retain(|_, v| {
                    v.retain(|(_, at)| now.saturating_duration_since(*at) < OWN_WRITE_TTL);
                    !v.is_empty()
                });
                own.pruned_at = own.written.len();
            }
            own.written.entry(key.clone()).or_default().extend(unseen);
        }
        flight
            .presumed
            .iter()
            .any(|rv| !flight.answered.contains(rv))
    }

    /// `key` was found edited by someone else: queued for [`Echoes::take_edited`].
    pub fn edited(&self, key: &ObjectKey) {
        self.edited
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(key.clone());
        self.edited_notify.notify_one();
    }

    /// Copies found edited by someone else when a write of theirs answered; waits until there
    /// is one.
    pub async fn take_edited(&self) -> Vec<ObjectKey> {
        loop {
            let notified = self.edited_notify.notified();
            let taken = std::mem::take(&mut *self.edited.lock().unwrap_or_else(|e| e.into_inner()));
            if !taken.is_empty() {
                return taken;
            }
            notified.await;
        }
    }

    /// The copies found edited so far, without waiting (tests).
    #[cfg(test)]
    pub fn take_now(&self) -> Vec<ObjectKey> {
        std::mem::take(&mut *self.edited.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Whether an ADDED or MODIFIED event of `key` at `rv` is copyrator's own write: a version
    /// a write returned (each answers for one event), or, unless the event says someone else
    /// edited it (`others`), an event while a write is in flight (checked when it answers).
    pub fn is_own_write(&self, key: &ObjectKey, rv: &str, others: bool) -> bool {
        let mut own = self.own_writes();
        let echo = own.written.get_mut(key).and_then(|v| {
            let i = v.iter().position(|(r, _)| **r == *rv)?;
            v.remove(i);
            Some(())
        });
        if own.written.get(key).is_some_and(Vec::is_empty) {
            own.written.remove(key);
        }
        match own.in_flight.get_mut(key) {
            _ if echo.is_some() => true,
            Some(flight) if !others => {
                flight.presumed.push(rv.into());
                true
            }
            _ => false,
        }
    }

    /// copyrator is about to delete `key`.
    pub fn deleting(&self, key: &ObjectKey) {
        let now = Instant::now();
        let mut own = self.own_deletes();
        if own.sent.len() > 2 * own.pruned_at.max(1024) {
            own.sent
                .retain(|_, at| now.saturating_duration_since(*at) < OWN_DELETE_TTL);
            own.pruned_at = own.sent.len();
        }
        own.sent.insert(key.clone(), now);
    }

    /// copyrator's delete of `key` did not happen: a DELETED event of it is someone else's.
    pub fn delete_failed(&self, key: &ObjectKey) {
        self.own_deletes().sent.remove(key);
    }

    /// Whether a DELETED event of `key` is the echo of copyrator's own delete; each delete
    /// answers for one event. (Events of one object arrive in order: the first DELETED event
    /// after copyrator's delete is that delete's.)
    pub fn own_delete_seen(&self, key: &ObjectKey) -> bool {
        self.own_deletes()
            .sent
            .remove(key)
            .is_some_and(|at| at.elapsed() < OWN_DELETE_TTL)
    }
}
