//! What each client address may hold of the webhook server at once (SPEC §6.1): reviews being
//! answered and body bytes received, each under a total and a cap per address, so that what the
//! API server may take does not depend on what clients at other addresses hold
//! (docs/design/webhook-peers.md). Every count is an atomic: a request takes no lock.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use super::connection::ConnectionState;

/// Default `--webhook-max-connections`.
pub const DEFAULT_CONNECTIONS: usize = 1024;
/// Default `--webhook-max-connections-per-peer`: an HTTP/2 API server needs a handful.
pub const DEFAULT_CONNECTIONS_PER_PEER: usize = 256;
/// Default `--webhook-max-in-flight`.
pub const DEFAULT_IN_FLIGHT: usize = 256;
/// Default `--webhook-max-in-flight-per-peer`.
pub const DEFAULT_IN_FLIGHT_PER_PEER: usize = 128;
/// Default `--webhook-body-bytes-in-flight`.
pub const DEFAULT_BODY_BYTES: usize = 32 << 20;
/// Default `--webhook-body-bytes-per-peer`.
pub const DEFAULT_BODY_BYTES_PER_PEER: usize = 16 << 20;

/// Totals and per-address caps of the webhook server (SPEC §6.1).
#[derive(Clone, Copy, Debug)]
pub struct PeerLimits {
    /// Connections open at once.
    pub connections: usize,
    /// Connections one address may hold.
    pub connections_per_peer: usize,
    /// Reviews being answered at once (counted once a body is in).
    pub in_flight: usize,
    /// Reviews one address may have answered at once.
    pub in_flight_per_peer: usize,
    /// Body bytes received and held at once.
    pub body_bytes: usize,
    /// Body bytes one address may have received and held at once.
    pub body_bytes_per_peer: usize,
}

impl Default for PeerLimits {
    fn default() -> Self {
        Self {
            connections: DEFAULT_CONNECTIONS,
            connections_per_peer: DEFAULT_CONNECTIONS_PER_PEER,
            in_flight: DEFAULT_IN_FLIGHT,
            in_flight_per_peer: DEFAULT_IN_FLIGHT_PER_PEER,
            body_bytes: DEFAULT_BODY_BYTES,
            body_bytes_per_peer: DEFAULT_BODY_BYTES_PER_PEER,
        }
    }
}

/// Largest request head (request line and headers) a connection may send: HTTP/1.1's read
/// buffer and HTTP/2's header list stop there (the API server sends under 2 KiB). Without it,
/// each connection could hold ~400 KB of headers it never finishes.
pub const MAX_HEADER_BYTES: usize = 16 << 10;

/// What one open connection may hold at most, headers at [`MAX_HEADER_BYTES`] included: TLS
/// records being read and written, HTTP's buffers, its task. Measured with connections that
/// send headers and never finish (BENCHMARKS.md, "The webhook port's memory"), rounded up.
pub const CONNECTION_BYTES: usize = 96 << 10;

impl PeerLimits {
    /// The defaults within `memory_limit` (`--memory-limit`, the container's limit): the port
    /// keeps to half of it, bodies in flight to a quarter and connections' own buffers to a
    /// quarter ([`CONNECTION_BYTES`] each), each no larger than the defaults; an address may
    /// hold half the bodies' room and a quarter of the connections, as by default.
    pub fn within(memory_limit: usize, max_body: usize) -> Self {
        let quarter = memory_limit / 4;
        let connections = (quarter / CONNECTION_BYTES).clamp(16, DEFAULT_CONNECTIONS);
        let body_bytes = quarter.clamp(max_body, DEFAULT_BODY_BYTES);
        Self {
            connections,
            connections_per_peer: (connections / 4).max(4),
            in_flight: DEFAULT_IN_FLIGHT,
            in_flight_per_peer: DEFAULT_IN_FLIGHT_PER_PEER,
            body_bytes,
            body_bytes_per_peer: (body_bytes / 2).max(max_body),
        }
    }

    /// The limits made consistent: nothing zero, no cap above its total, and room for one
    /// body of `max_body` bytes (else such a review could never be received).
    pub fn sane(mut self, max_body: usize) -> Self {
        self.connections = self.connections.max(1);
        self.connections_per_peer = self.connections_per_peer.clamp(1, self.connections);
        self.in_flight = self.in_flight.max(1);
        self.in_flight_per_peer = self.in_flight_per_peer.clamp(1, self.in_flight);
        self.body_bytes = self.body_bytes.max(max_body);
        self.body_bytes_per_peer = self.body_bytes_per_peer.clamp(max_body, self.body_bytes);
        self
    }
}

/// The limit a request met when it was answered 503.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// Its address had `--webhook-max-in-flight-per-peer` reviews being answered.
    PeerInFlight,
    /// `--webhook-max-in-flight` reviews were being answered, and its address held its share.
    InFlight,
    /// Its address had sent `--webhook-body-bytes-per-peer` bytes of bodies not yet answered.
    PeerBodyBytes,
    /// `--webhook-body-bytes-in-flight` bytes were held, and its address held its share.
    BodyBytes,
}

impl Limit {
    /// The `limit` label of `copyrator_webhook_shed_total`.
    pub fn metric_label(self) -> &'static str {
        match self {
            Limit::PeerInFlight => "peer_in_flight",
            Limit::InFlight => "in_flight",
            Limit::PeerBodyBytes => "peer_body_bytes",
            Limit::BodyBytes => "body_bytes",
        }
    }
}

/// What one address holds now.
#[derive(Debug, Default)]
pub(super) struct Usage {
    in_flight: AtomicUsize,
    body_bytes: AtomicUsize,
}

/// What every address holds together, and how many addresses have a connection open.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) limits: PeerLimits,
    in_flight: AtomicUsize,
    body_bytes: AtomicUsize,
    /// Addresses with a connection open: the table keeps it.
    pub(super) peers: AtomicUsize,
}

impl Shared {
    pub(super) fn new(limits: PeerLimits) -> Self {
        Self {
            limits,
            in_flight: AtomicUsize::new(0),
            body_bytes: AtomicUsize::new(0),
            peers: AtomicUsize::new(0),
        }
    }

    /// Takes `n` of a limit for one address (`mine`) from the total (`all`): refused at the
    /// address's cap, and at the total unless the address holds less than an equal share of
    /// it (the total over the addresses connected). So the total can be exceeded, by at most
    /// one share per address, and never by an address that already holds its share.
    fn take(
        &self,
        mine: &AtomicUsize,
        all: &AtomicUsize,
        n: usize,
        (cap, total): (usize, usize),
    ) -> Result<(), Scope> {
        let held = mine.fetch_add(n, Ordering::AcqRel) + n;
        if held > cap {
            mine.fetch_sub(n, Ordering::AcqRel);
            return Err(Scope::Peer);
        }
        let everyone = all.fetch_add(n, Ordering::AcqRel) + n;
        let share = total / self.peers.load(Ordering::Relaxed).max(1);
        if everyone > total && held > share {
            all.fetch_sub(n, Ordering::AcqRel);
            mine.fetch_sub(n, Ordering::AcqRel);
            return Err(Scope::Total);
        }
        Ok(())
    }
}

enum Scope {
    Peer,
    Total,
}

/// The address a request came from, as its limits see it: carried in the request's extensions
/// (the listener puts it there) to the admission handler. Cloning it is one reference count.
#[derive(Clone, Debug)]
pub struct Peer(pub(super) Arc<PeerInner>);

#[derive(Debug)]
pub(super) struct PeerInner {
    pub(super) usage: Arc<Usage>,
    pub(super) shared: Arc<Shared>,
    pub(super) connection: Option<Arc<ConnectionState>>,
}

impl Peer {
    /// Counts one review as being answered until the permit drops; a stalled body holds none.
    pub fn review(&self) -> Result<ReviewPermit, Limit> {
        let (p, s) = (&self.0, &self.0.shared);
        s.take(
            &p.usage.in_flight,
            &s.in_flight,
            1,
            (s.limits.in_flight_per_peer, s.limits.in_flight),
        )
        .map_err(|scope| match scope {
            Scope::Peer => Limit::PeerInFlight,
            Scope::Total => Limit::InFlight,
        })?;
        if let Some(c) = &p.connection {
            c.reviewing.fetch_add(1, Ordering::Relaxed);
        }
        Ok(ReviewPermit(self.clone()))
    }

    /// A tally of one body's bytes, taken as they arrive ([`BodyBytes::take`]).
    pub fn body_bytes(&self) -> BodyBytes {
        BodyBytes {
            peer: self.clone(),
            held: 0,
        }
    }
}

/// One review being answered; dropped when its answer is made.
#[derive(Debug)]
pub struct ReviewPermit(Peer);

impl Drop for ReviewPermit {
    fn drop(&mut self) {
        let p = &self.0.0;
        p.usage.in_flight.fetch_sub(1, Ordering::AcqRel);
        p.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
        if let Some(c) = &p.connection {
            c.reviewing.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The bytes of one body received so far; they stay counted until it drops.
#[derive(Debug)]
pub struct BodyBytes {
    peer: Peer,
    held: usize,
}

impl BodyBytes {
    /// Bytes counted so far.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Counts `n` more bytes that arrived.
    pub fn take(&mut self, n: usize) -> Result<(), Limit> {
        let (p, s) = (&self.peer.0, &self.peer.0.shared);
        s.take(
            &p.usage.body_bytes,
            &s.body_bytes,
            n,
            (s.limits.body_bytes_per_peer, s.limits.body_bytes),
        )
        .map_err(|scope| match scope {
            Scope::Peer => Limit::PeerBodyBytes,
            Scope::Total => Limit::BodyBytes,
        })?;
        self.held += n;
        Ok(())
    }
}

impl Drop for BodyBytes {
    fn drop(&mut self) {
        let p = &self.peer.0;
        p.usage.body_bytes.fetch_sub(self.held, Ordering::AcqRel);
        p.shared.body_bytes.fetch_sub(self.held, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The port's room under the chart's limit: bodies and connections' buffers a quarter
    /// each, so that a flood holding all of it leaves the other half to the rest.
    #[test]
    fn the_ports_room_is_half_the_memory_limit() {
        let max_body = 6 << 20;
        for limit in [64usize << 20, 128 << 20, 256 << 20, 512 << 20] {
            let l = PeerLimits::within(limit, max_body).sane(max_body);
            let held = l.body_bytes + l.connections * CONNECTION_BYTES;
            assert!(held <= limit / 2, "{limit}: {l:?} holds {held}");
            assert!(l.connections_per_peer * 4 <= l.connections.max(16));
            assert!(l.body_bytes_per_peer >= max_body, "{l:?}");
        }
        let l = PeerLimits::within(128 << 20, max_body);
        assert_eq!((l.connections, l.body_bytes), (341, 32 << 20));
        // A limit that leaves room for more than the defaults keeps the defaults.
        let large = PeerLimits::within(64 << 30, max_body);
        assert_eq!(large.connections, DEFAULT_CONNECTIONS);
        assert_eq!(large.body_bytes, DEFAULT_BODY_BYTES);
    }
}
