//! The per-address accounting and the connection table, without sockets.

use std::{net::IpAddr, sync::Arc, time::Duration};

use super::*;
use crate::listener::budget::Limit;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn peers(limits: PeerLimits) -> (Arc<Peers>, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    (Peers::new(limits, Arc::clone(&metrics)), metrics)
}

fn admitted(peers: &Arc<Peers>, addr: &str) -> Slot {
    match peers.admit(ip(addr)) {
        Admission::Admitted(slot) => slot,
        Admission::Refused(r) => panic!("{addr} refused: {r:?}"),
    }
}

/// Resolves at once if `slot` was evicted.
async fn was_evicted(slot: &Slot) -> bool {
    tokio::time::timeout(Duration::from_millis(20), slot.state.evicted())
        .await
        .is_ok()
}

#[test]
fn an_address_at_its_cap_is_refused_and_another_is_not() {
    let (peers, _) = peers(PeerLimits {
        in_flight: 4,
        in_flight_per_peer: 2,
        ..Default::default()
    });
    let (a, b) = (admitted(&peers, "10.0.0.1"), admitted(&peers, "10.0.0.2"));
    let held: Vec<_> = (0..2).map(|_| a.peer.review().unwrap()).collect();
    assert_eq!(a.peer.review().unwrap_err(), Limit::PeerInFlight);
    let other = b.peer.review().expect("another address has its own cap");
    drop(held);
    a.peer.review().expect("released when the permits drop");
    drop(other);
}

#[test]
fn below_its_share_an_address_is_served_past_the_total() {
    let (peers, _) = peers(PeerLimits {
        in_flight: 6,
        in_flight_per_peer: 6,
        ..Default::default()
    });
    let (a, b) = (admitted(&peers, "10.0.0.1"), admitted(&peers, "10.0.0.2"));
    // A takes nearly the whole total before B asks, B the rest.
    let held: Vec<_> = (0..5).map(|_| a.peer.review().unwrap()).collect();
    let mut b_held = vec![b.peer.review().unwrap()];
    // B holds less than its share (6 over 2 addresses): served past the total, up to it.
    b_held.extend((0..2).map(|_| b.peer.review().unwrap()));
    assert_eq!(b.peer.review().unwrap_err(), Limit::InFlight);
    // A, holding more than its share, gets nothing more while the total is reached.
    assert_eq!(a.peer.review().unwrap_err(), Limit::InFlight);
    drop((held, b_held));
}

#[test]
fn body_bytes_are_counted_as_they_arrive_and_released_with_the_tally() {
    let (peers, _) = peers(PeerLimits {
        body_bytes: 1000,
        body_bytes_per_peer: 600,
        ..Default::default()
    });
    let (a, b) = (admitted(&peers, "10.0.0.1"), admitted(&peers, "10.0.0.2"));
    let mut first = a.peer.body_bytes();
    first.take(400).unwrap();
    let mut second = a.peer.body_bytes();
    second.take(200).unwrap();
    assert_eq!(second.take(1).unwrap_err(), Limit::PeerBodyBytes);
    let mut other = b.peer.body_bytes();
    other.take(400).expect("another address has its own bytes");
    assert_eq!(second.held(), 200);
    drop(first);
    let mut again = a.peer.body_bytes();
    again.take(400).expect("released when the tally drops");
    drop((second, other, again));
}

#[test]
fn limits_are_made_consistent() {
    let sane = PeerLimits {
        connections: 0,
        connections_per_peer: 5,
        in_flight: 10,
        in_flight_per_peer: 20,
        body_bytes: 100,
        body_bytes_per_peer: 10,
    }
    .sane(1000);
    assert_eq!((sane.connections, sane.connections_per_peer), (1, 1));
    assert_eq!(sane.in_flight_per_peer, 10);
    assert_eq!((sane.body_bytes, sane.body_bytes_per_peer), (1000, 1000));
}

#[tokio::test]
async fn a_full_table_evicts_a_stalled_connection_of_the_address_holding_most() {
    let (peers, metrics) = peers(PeerLimits {
        connections: 4,
        connections_per_peer: 4,
        ..Default::default()
    });
    let apiserver = admitted(&peers, "127.0.0.1");
    let answered = apiserver.state.request();
    drop(answered);
    let flood: Vec<Slot> = (0..3).map(|_| admitted(&peers, "127.0.0.2")).collect();
    // The API server's next connection: the flood's oldest connection gives way.
    let next = admitted(&peers, "127.0.0.1");
    assert!(was_evicted(&flood[0]).await);
    assert!(!was_evicted(&flood[1]).await);
    assert!(!was_evicted(&apiserver).await);
    // The flood's own next connection replaces its oldest stalled one, not the API server's.
    let more = admitted(&peers, "127.0.0.2");
    assert!(was_evicted(&flood[1]).await);
    assert!(!was_evicted(&next).await);
    let text = metrics.encode();
    assert!(
        text.contains(
            r#"copyrator_webhook_connections_evicted_total{reason="full",state="stalled"} 2"#
        ),
        "{text}"
    );
    assert!(text.contains("copyrator_webhook_connections 4"), "{text}");
    drop((flood, more));
    assert!(metrics.encode().contains("copyrator_webhook_connections 2"));
}

#[tokio::test]
async fn verified_and_reviewing_connections_keep_their_places() {
    let (peers, metrics) = peers(PeerLimits {
        connections: 2,
        connections_per_peer: 2,
        ..Default::default()
    });
    let verified = admitted(&peers, "127.0.0.1");
    verified.state.set_verified();
    let busy = admitted(&peers, "127.0.0.2");
    let _review = busy.peer.review().unwrap();
    assert!(matches!(
        peers.admit(ip("127.0.0.3")),
        Admission::Refused(Refusal::Full)
    ));
    assert!(!was_evicted(&verified).await);
    assert!(!was_evicted(&busy).await);
    assert!(
        metrics
            .encode()
            .contains(r#"copyrator_webhook_connections_refused_total{reason="full"} 1"#)
    );
}

#[tokio::test]
async fn at_its_cap_an_address_gives_up_its_own_stalled_connection() {
    let (peers, metrics) = peers(PeerLimits {
        connections: 10,
        connections_per_peer: 2,
        ..Default::default()
    });
    let first = admitted(&peers, "10.0.0.1");
    let _ = first.state.request();
    let second = admitted(&peers, "10.0.0.1");
    let third = admitted(&peers, "10.0.0.1");
    // `first` answered a request; `second` never did: it goes.
    assert!(was_evicted(&second).await);
    assert!(!was_evicted(&first).await);
    // With nothing of its own that may give way, the new connection is refused.
    let _reviews = (first.peer.review().unwrap(), third.peer.review().unwrap());
    assert!(matches!(
        peers.admit(ip("10.0.0.1")),
        Admission::Refused(Refusal::PeerLimit)
    ));
    let text = metrics.encode();
    assert!(
        text.contains(
            r#"copyrator_webhook_connections_evicted_total{reason="peer_limit",state="stalled"} 1"#
        ),
        "{text}"
    );
}

#[test]
fn an_address_is_forgotten_with_its_last_connection() {
    let (peers, metrics) = peers(PeerLimits::default());
    let a = admitted(&peers, "10.0.0.1");
    let b = admitted(&peers, "10.0.0.2");
    let b2 = admitted(&peers, "10.0.0.2");
    assert!(metrics.encode().contains("copyrator_webhook_peers 2"));
    drop((a, b));
    assert!(metrics.encode().contains("copyrator_webhook_peers 1"));
    drop(b2);
    let text = metrics.encode();
    assert!(text.contains("copyrator_webhook_peers 0"), "{text}");
    assert!(text.contains("copyrator_webhook_connections 0"), "{text}");
}

#[test]
fn quiet_time_counts_from_the_last_answer() {
    let (peers, _) = peers(PeerLimits::default());
    let slot = admitted(&peers, "10.0.0.1");
    let (_, answered) = slot.state.quiet_for().unwrap();
    assert!(!answered);
    let open = slot.state.request();
    assert!(slot.state.quiet_for().is_none(), "a request is open");
    drop(open);
    let (quiet, answered) = slot.state.quiet_for().unwrap();
    assert!(answered);
    assert!(quiet < Duration::from_secs(1));
}
