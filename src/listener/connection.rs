//! One webhook connection as the connection table (`peers.rs`) and the address budgets
//! (`budget.rs`) see it: its requests, its reviews, and whether it was made to give way.

use std::{
    net::IpAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::Instant,
};

use tokio::sync::Notify;

use super::eviction::Standing;

/// One connection as the table sees it. Its owner updates the atomics; the table reads them
/// only to choose which connection gives way.
#[derive(Debug)]
pub struct ConnectionState {
    pub(super) peer: IpAddr,
    /// The table's clock (`Peers::epoch`), read in milliseconds.
    pub(super) epoch: Instant,
    pub(super) opened_ms: u64,
    pub(super) opened_seq: u64,
    pub(super) verified: AtomicBool,
    /// Requests whose headers came and whose answer has not been sent.
    pub(super) requests: AtomicUsize,
    /// Of those, reviews being answered (their body is in): never cut off.
    pub(super) reviewing: AtomicUsize,
    /// When the last request was answered (ms on the table's clock); `u64::MAX`: none yet.
    pub(super) last_done_ms: AtomicU64,
    pub(super) evicted: AtomicBool,
    pub(super) evict: Notify,
}

impl ConnectionState {
    /// Marks the connection as one whose client `--client-ca` verified: it never gives way.
    pub fn set_verified(&self) {
        self.verified.store(true, Ordering::Relaxed);
    }

    pub(super) fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Counts a request whose headers came, until the guard drops (its answer is made, or the
    /// connection went mid-way).
    pub fn request(self: &Arc<Self>) -> RequestGuard {
        self.requests.fetch_add(1, Ordering::Relaxed);
        RequestGuard(Arc::clone(self))
    }

    /// How long the connection has been without a request open: `None` while one is open.
    /// `answered` says whether it ever answered one (else the time counts from its opening).
    pub fn quiet_for(&self) -> Option<(std::time::Duration, bool)> {
        if self.requests.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let (since, answered) = match self.last_done_ms.load(Ordering::Relaxed) {
            u64::MAX => (self.opened_ms, false),
            ms => (ms, true),
        };
        let ms = self.now_ms().saturating_sub(since);
        Some((std::time::Duration::from_millis(ms), answered))
    }

    /// Resolves once the table has closed this connection to make room for another.
    pub async fn evicted(&self) {
        self.evict.notified().await
    }

    pub(super) fn standing(&self) -> Standing {
        let last = self.last_done_ms.load(Ordering::Relaxed);
        Standing {
            verified: self.verified.load(Ordering::Relaxed),
            reviewing: self.reviewing.load(Ordering::Relaxed) > 0,
            answered: last != u64::MAX,
            waiting: self.requests.load(Ordering::Relaxed) > 0,
            quiet_since_ms: if last == u64::MAX {
                self.opened_ms
            } else {
                last
            },
            opened_seq: self.opened_seq,
        }
    }
}

/// One request counted on its connection; dropped when its answer is made.
#[derive(Debug)]
pub struct RequestGuard(Arc<ConnectionState>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let c = &self.0;
        c.last_done_ms.store(c.now_ms(), Ordering::Relaxed);
        c.requests.fetch_sub(1, Ordering::Relaxed);
    }
}
