//! The webhook server's connections, by client address (SPEC §6.1): who holds how many, and,
//! when a new connection finds no room, which open one gives way ([`eviction`]). The table's
//! lock is taken when a connection opens or closes, never per request.

use std::{
    collections::HashMap,
    net::IpAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::Instant,
};

use tokio::sync::Notify;

use super::{
    budget::{Peer, PeerInner, PeerLimits, Shared, Usage},
    connection::ConnectionState,
    eviction::{self, Choice, Standing},
};
use crate::metrics::{EvictedLabels, Metrics, ReasonLabels};

/// Why a new connection was closed at once (`copyrator_webhook_connections_refused_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `--webhook-max-connections` were open and none could give way.
    Full,
    /// Its address held `--webhook-max-connections-per-peer` and none of them could give way.
    PeerLimit,
}

impl Refusal {
    pub fn metric_label(self) -> &'static str {
        match self {
            Refusal::Full => "full",
            Refusal::PeerLimit => "peer_limit",
        }
    }
}

/// An open connection's place in the table; dropping it frees the place.
#[derive(Debug)]
pub struct Slot {
    peers: Arc<Peers>,
    pub state: Arc<ConnectionState>,
    pub peer: Peer,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut table = self.peers.lock();
        if !self.state.evicted.load(Ordering::Relaxed) {
            table.remove(&self.state);
        }
        self.peers.publish(&table);
    }
}

#[derive(Debug)]
struct PeerEntry {
    usage: Arc<Usage>,
    connections: Vec<Arc<ConnectionState>>,
}

/// The open connections, by address.
#[derive(Debug, Default)]
struct Table {
    peers: HashMap<IpAddr, PeerEntry>,
    open: usize,
    opened: u64,
}

impl Table {
    fn remove(&mut self, state: &Arc<ConnectionState>) {
        let Some(entry) = self.peers.get_mut(&state.peer) else {
            return;
        };
        if let Some(i) = entry.connections.iter().position(|c| Arc::ptr_eq(c, state)) {
            entry.connections.swap_remove(i);
            self.open -= 1;
        }
        if entry.connections.is_empty() {
            self.peers.remove(&state.peer);
        }
    }

    /// Every open connection, with what eviction weighs.
    fn standings(&self) -> (Vec<(IpAddr, Standing)>, Vec<&Arc<ConnectionState>>) {
        self.peers
            .iter()
            .flat_map(|(ip, entry)| {
                entry
                    .connections
                    .iter()
                    .map(move |c| ((*ip, c.standing()), c))
            })
            .unzip()
    }
}

/// The webhook server's connections and what each address holds.
pub struct Peers {
    shared: Arc<Shared>,
    table: Mutex<Table>,
    /// For requests that did not come through the listener (tests, benchmarks).
    unattached: Peer,
    metrics: Arc<Metrics>,
    /// The clock connections' times are read on.
    epoch: Instant,
    /// When an eviction was last logged at warn level (ms on `epoch`); `u64::MAX`: never.
    last_warned_ms: AtomicU64,
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peers")
            .field("limits", &self.shared.limits)
            .finish_non_exhaustive()
    }
}

/// What happened to a new connection.
#[derive(Debug)]
pub enum Admission {
    Admitted(Slot),
    Refused(Refusal),
}

impl Peers {
    pub fn new(limits: PeerLimits, metrics: Arc<Metrics>) -> Arc<Self> {
        let shared = Arc::new(Shared::new(limits));
        Arc::new(Self {
            unattached: Peer(Arc::new(PeerInner {
                usage: Arc::default(),
                shared: Arc::clone(&shared),
                connection: None,
            })),
            shared,
            table: Mutex::new(Table::default()),
            metrics,
            epoch: Instant::now(),
            last_warned_ms: AtomicU64::new(u64::MAX),
        })
    }

    /// The peer of requests that did not come through the listener: one for all of them.
    pub fn unattached(&self) -> Peer {
        self.unattached.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // Every update leaves the table whole: a panic elsewhere cannot have broken it.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn publish(&self, table: &Table) {
        self.shared
            .peers
            .store(table.peers.len(), Ordering::Relaxed);
        self.metrics.webhook_connections.set(table.open as i64);
        self.metrics.webhook_peers.set(table.peers.len() as i64);
    }

    /// Gives a new connection from `ip` a place: at once when there is room, else by closing a
    /// connection that gives way ([`eviction::choose`]), else not at all.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Admission {
        let limits = self.shared.limits;
        let mut table = self.lock();
        let mine = table.peers.get(&ip).map_or(0, |e| e.connections.len());
        let at_cap = mine >= limits.connections_per_peer;
        if at_cap || table.open >= limits.connections {
            let (open, states) = table.standings();
            let (victim, standing) = match eviction::choose(&open, &ip, at_cap) {
                Choice::Evict(i) => (Arc::clone(states[i]), open[i].1),
                Choice::Refuse => {
                    let refusal = if at_cap {
                        Refusal::PeerLimit
                    } else {
                        Refusal::Full
                    };
                    self.metrics
                        .webhook_connections_refused
                        .get_or_create(&ReasonLabels {
                            reason: refusal.metric_label(),
                        })
                        .inc();
                    return Admission::Refused(refusal);
                }
            };
            victim.evicted.store(true, Ordering::Relaxed);
            table.remove(&victim);
            victim.evict.notify_one();
            let reason = if at_cap { "peer_limit" } else { "full" };
            self.count_eviction(&victim, reason, standing.metric_label());
        }
        let opened_seq = table.opened;
        let entry = table.peers.entry(ip).or_insert_with(|| PeerEntry {
            usage: Arc::default(),
            connections: Vec::new(),
        });
        let state = Arc::new(ConnectionState {
            peer: ip,
            epoch: self.epoch,
            opened_ms: self.epoch.elapsed().as_millis() as u64,
            opened_seq,
            verified: AtomicBool::new(false),
            requests: AtomicUsize::new(0),
            reviewing: AtomicUsize::new(0),
            last_done_ms: AtomicU64::new(u64::MAX),
            evicted: AtomicBool::new(false),
            evict: Notify::new(),
        });
        entry.connections.push(Arc::clone(&state));
        let peer = Peer(Arc::new(PeerInner {
            usage: Arc::clone(&entry.usage),
            shared: Arc::clone(&self.shared),
            connection: Some(Arc::clone(&state)),
        }));
        table.open += 1;
        table.opened += 1;
        self.publish(&table);
        Admission::Admitted(Slot {
            peers: Arc::clone(self),
            state,
            peer,
        })
    }

    fn count_eviction(&self, state: &ConnectionState, reason: &'static str, what: &'static str) {
        self.metrics
            .webhook_connections_evicted
            .get_or_create(&EvictedLabels {
                reason,
                state: what,
            })
            .inc();
        // The first eviction in a minute names the address; the rest are only counted.
        let now = self.epoch.elapsed().as_millis() as u64;
        let last = self.last_warned_ms.load(Ordering::Relaxed);
        if last == u64::MAX || now.saturating_sub(last) >= 60_000 {
            self.last_warned_ms.store(now, Ordering::Relaxed);
            tracing::warn!(peer = %state.peer, reason, state = what, "closed a webhook connection to make room for a new one (more this minute are only counted)");
        } else {
            tracing::debug!(peer = %state.peer, reason, state = what, "closed a webhook connection to make room for a new one");
        }
    }
}

#[cfg(test)]
mod tests;
