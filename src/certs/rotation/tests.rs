//! The rotation order, simulated over months with real certificates: at every instant the
//! certificate a replica serves verifies against the bundle the API server holds, with the API
//! server and the replicas each seeing changes late (but within `propagation`).

use std::collections::HashMap;

use super::*;
use crate::certs::{
    inspect::parse_bundle,
    issue::{self, PemPair},
};

fn names() -> SubjectNames {
    SubjectNames {
        dns_names: vec!["copyrator.copyrator.svc".into()],
        ips: vec![],
    }
}

fn settings() -> Settings {
    Settings {
        names: names(),
        ca_validity: Duration::days(30),
        cert_validity: Duration::days(6),
        propagation: Duration::minutes(5),
    }
}

fn one(pem: &str) -> CertFacts {
    parse_bundle(pem.as_bytes()).remove(0)
}

/// The Secret and the webhooks, changed only by the steps `next_step` names.
struct World {
    stored: Stored,
    published: Vec<Vec<CertFacts>>,
    now: OffsetDateTime,
    s: Settings,
    /// (time, bundle the webhooks hold from then on)
    published_history: Vec<(OffsetDateTime, Vec<CertFacts>)>,
    /// (time, serving certificate in the Secret from then on)
    serving_history: Vec<(OffsetDateTime, Option<CertFacts>)>,
    steps: Vec<&'static str>,
}

impl World {
    fn new(webhooks: usize) -> Self {
        let now = OffsetDateTime::now_utc();
        Self {
            stored: Stored::default(),
            published: vec![Vec::new(); webhooks],
            now,
            s: settings(),
            published_history: vec![(now, Vec::new())],
            serving_history: vec![(now, None)],
            steps: Vec::new(),
        }
    }

    fn step(&mut self) -> Step {
        let step = next_step(&self.stored, &self.published, self.now, &self.s);
        match &step {
            Step::NewCa { keep } => {
                let ca = issue::new_ca(self.now, self.s.ca_validity).unwrap();
                self.stored.bundle = std::iter::once(one(&ca.cert))
                    .chain(keep.iter().cloned())
                    .collect();
                self.stored.ca_key = Some(ca.key);
                self.stored.trusted_since = None;
                self.stored.rotate_done = self.stored.rotate_requested.clone();
                self.steps.push("new-ca");
            }
            Step::Publish { current_missing } => {
                for p in &mut self.published {
                    *p = self.stored.bundle.clone();
                }
                if *current_missing {
                    self.stored.trusted_since = None;
                }
                self.published_history
                    .push((self.now, self.stored.bundle.clone()));
                self.steps.push("publish");
            }
            Step::MarkTrusted => {
                self.stored.trusted_since = Some(self.now);
                self.steps.push("trusted");
            }
            Step::NewServing { not_after } => {
                let ca = self.stored.current_ca().unwrap().clone();
                let pair = PemPair {
                    cert: ca.pem(),
                    key: self.stored.ca_key.clone().unwrap(),
                };
                let leaf = issue::serving(&pair, &self.s.names, self.now, *not_after).unwrap();
                let cert = one(&leaf.cert);
                self.serving_history.push((self.now, Some(cert.clone())));
                self.stored.serving = Some(Serving {
                    cert,
                    key: leaf.key,
                });
                self.stored.serving_since = Some(self.now);
                self.steps.push("serving");
            }
            Step::Prune { keep } => {
                self.stored.bundle = keep.clone();
                self.steps.push("prune");
            }
            Step::Wait { .. } => {}
        }
        step
    }

    /// Takes steps until told to wait; returns when to look again.
    fn settle(&mut self) -> OffsetDateTime {
        for _ in 0..20 {
            if let Step::Wait { until } = self.step() {
                return until.unwrap();
            }
        }
        panic!("no rest after 20 steps: {:?}", self.steps);
    }

    fn at<T: Clone>(history: &[(OffsetDateTime, T)], t: OffsetDateTime) -> T {
        history
            .iter()
            .rev()
            .find(|(since, _)| *since <= t)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| history[0].1.clone())
    }
}

/// Every minute from `from` to `to`: what a replica `replica_lag` behind the Secret serves
/// verifies against what the API server, `api_lag` behind the webhooks, trusts.
fn assert_always_verifiable(
    w: &World,
    from: OffsetDateTime,
    to: OffsetDateTime,
    api_lag: Duration,
    replica_lag: Duration,
) -> usize {
    let mut verified: HashMap<([u8; 32], [u8; 32]), bool> = HashMap::new();
    let mut checked = 0;
    let mut t = from;
    while t < to {
        let trusted = World::at(&w.published_history, t - api_lag);
        // A replica serves what it last loaded: the Secret's certificate as of `replica_lag` ago.
        let served = World::at(&w.serving_history, t - replica_lag)
            .or_else(|| World::at(&w.serving_history, t));
        if let Some(served) = served {
            let ok = trusted.iter().any(|ca| {
                *verified
                    .entry((served.fingerprint, ca.fingerprint))
                    .or_insert_with(|| served.signed_by(ca))
            }) && served.valid_at(t);
            assert!(
                ok,
                "at {t}: the served certificate does not verify against the API server's bundle \
                 ({} CAs); steps so far {:?}",
                trusted.len(),
                w.steps
            );
            checked += 1;
        }
        t += Duration::minutes(1);
    }
    checked
}

/// The API server and the replicas may each see a change up to 90% of `propagation` late:
/// the extremes of one of them late and the other on time, and both late.
fn assert_verifiable_with_any_lag(w: &World, from: OffsetDateTime, to: OffsetDateTime) -> usize {
    let late = w.s.propagation * 9 / 10;
    let on_time = Duration::ZERO;
    [(late, on_time), (on_time, late), (late, late)]
        .into_iter()
        .map(|(api, replica)| assert_always_verifiable(w, from, to, api, replica))
        .min()
        .unwrap()
}

#[test]
fn a_fresh_install_issues_everything_at_once() {
    let mut w = World::new(2);
    w.settle();
    assert_eq!(w.steps, ["new-ca", "publish", "trusted", "serving"]);
    assert_eq!(w.stored.bundle.len(), 1);
    assert!(w.published.iter().all(|p| p == &w.stored.bundle));
    let serving = w.stored.serving.as_ref().unwrap();
    assert!(serving.cert.signed_by(&w.stored.bundle[0]));
    assert!(serving.cert.is_for(&names()));
}

#[test]
fn months_of_rotations_never_serve_an_untrusted_certificate() {
    let mut w = World::new(3);
    let start = w.now;
    let mut next = w.settle();
    let end = start + Duration::days(90);
    while w.now < end {
        // Wake at the time asked, or sooner (a periodic check), never later.
        w.now = next.min(w.now + Duration::hours(7));
        next = w.settle();
        assert!(w.stored.bundle.len() <= MAX_BUNDLE);
    }
    let count = |s: &str| w.steps.iter().filter(|x| **x == s).count();
    // 90 days of 30-day CAs renewed at 20 days; 6-day certificates renewed at 4 days.
    assert!(count("new-ca") >= 5, "{:?}", w.steps);
    assert!(count("serving") >= 20, "{:?}", w.steps);
    assert!(count("prune") >= 4, "old CAs are dropped: {:?}", w.steps);
    assert_eq!(w.stored.bundle.len(), 1, "back to one CA between rotations");
    let checked = assert_verifiable_with_any_lag(&w, start + w.s.propagation, end);
    assert!(checked > 90 * 24 * 60 - 10, "checked {checked} minutes");
}

#[test]
fn a_rotation_asked_for_by_hand_goes_through_the_same_order() {
    let mut w = World::new(1);
    let start = w.now;
    w.settle();
    let first_ca = w.stored.bundle[0].fingerprint;
    w.now += Duration::hours(1);
    w.stored.rotate_requested = Some("2026-11-22T10:00:00Z".into());
    let mut next = w.settle();
    assert_eq!(
        w.stored.rotate_done, w.stored.rotate_requested,
        "the request is recorded as done"
    );
    assert_eq!(w.stored.bundle.len(), 2, "old and new CA side by side");
    assert_ne!(w.stored.bundle[0].fingerprint, first_ca);
    let end = w.now + Duration::hours(1);
    while w.now < end {
        w.now = next.min(w.now + Duration::minutes(1));
        next = w.settle();
    }
    assert_eq!(w.stored.bundle.len(), 1);
    assert_ne!(
        w.stored.bundle[0].fingerprint, first_ca,
        "the old CA is gone"
    );
    assert!(
        w.stored
            .serving
            .as_ref()
            .unwrap()
            .cert
            .signed_by(&w.stored.bundle[0])
    );
    assert_verifiable_with_any_lag(&w, start + w.s.propagation, end);
    // Asking again with the same value does nothing more.
    let rotations = w.steps.iter().filter(|s| **s == "new-ca").count();
    w.now += Duration::minutes(1);
    w.settle();
    assert_eq!(
        w.steps.iter().filter(|s| **s == "new-ca").count(),
        rotations
    );
}

/// Rotations asked for by hand every `spacing`, four of them, from `first`: the world woken
/// at each request, when a step is due, and every minute. Returns when the last has completed.
fn ask_four_rotations(w: &mut World, first: OffsetDateTime, spacing: Duration) -> OffsetDateTime {
    let requests: Vec<(OffsetDateTime, String)> = (0..4)
        .map(|i| (first + spacing * i, format!("by-hand-{i}")))
        .collect();
    let end = first + Duration::hours(2);
    let mut next = w.settle();
    while w.now < end {
        let request = requests.iter().find(|(t, _)| *t > w.now);
        w.now = next.min(w.now + Duration::minutes(1));
        if let Some((t, value)) = request
            && *t <= w.now
        {
            w.now = *t;
            w.stored.rotate_requested = Some(value.clone());
        }
        next = w.settle();
        assert!(w.stored.bundle.len() <= MAX_BUNDLE, "{:?}", w.steps);
    }
    end
}

#[test]
fn rotations_asked_faster_than_propagation_keep_the_serving_ca_trusted() {
    // One a minute (all four inside one 5-minute propagation window), and spaced so that
    // requests land in each phase of the rotation before them: new CA trusted, serving
    // certificate signed, old CA dropped.
    // Requests made while a rotation is under way wait for it and count as one: the CAs made.
    for (spacing, new_cas) in [(1, 2), (3, 2), (4, 3)] {
        let spacing = Duration::minutes(spacing);
        let mut w = World::new(2);
        let start = w.now;
        w.settle();
        let end = ask_four_rotations(&mut w, start + Duration::hours(1), spacing);
        assert_verifiable_with_any_lag(&w, start + w.s.propagation, end);
        let made = w.steps.iter().filter(|s| **s == "new-ca").count() - 1;
        assert_eq!(made, new_cas, "({spacing}) {:?}", w.steps);
        assert_eq!(
            w.stored.rotate_done.as_deref(),
            Some("by-hand-3"),
            "the last request is done ({spacing}): {:?}",
            w.steps
        );
        assert_eq!(w.stored.bundle.len(), 1, "rotations completed ({spacing})");
        assert!(
            w.stored
                .serving
                .as_ref()
                .unwrap()
                .cert
                .signed_by(&w.stored.bundle[0])
        );
    }
}

#[test]
fn a_lost_secret_keeps_the_cas_the_webhooks_trust() {
    let mut w = World::new(2);
    w.settle();
    let old_ca = w.stored.bundle[0].clone();
    w.stored = Stored::default();
    w.now += Duration::minutes(1);
    w.settle();
    assert_eq!(w.stored.bundle.len(), 2);
    assert_eq!(
        w.stored.bundle[1], old_ca,
        "the published CA is kept beside the new"
    );
    assert!(w.published.iter().all(|p| p.contains(&old_ca)));
}

#[test]
fn a_webhook_recreated_without_a_bundle_is_published_again_and_waits() {
    let mut w = World::new(2);
    w.settle();
    w.now += Duration::hours(1);
    w.published[1] = Vec::new();
    assert_eq!(
        w.step(),
        Step::Publish {
            current_missing: true
        }
    );
    assert_eq!(w.step(), Step::MarkTrusted);
    assert_eq!(w.stored.trusted_since, Some(w.now));
}

#[test]
fn a_certificate_for_other_names_is_replaced_once_the_ca_is_trusted_everywhere() {
    let mut w = World::new(1);
    w.settle();
    w.s.names
        .dns_names
        .push("copyrator.copyrator.svc.cluster.local".into());
    // Trusted for long enough already: replaced at once.
    w.now += Duration::hours(1);
    assert!(matches!(w.step(), Step::NewServing { .. }));
    assert!(w.stored.serving.as_ref().unwrap().cert.is_for(&w.s.names));
}

#[test]
fn expired_cas_are_dropped_and_serving_never_outlives_its_ca() {
    let mut w = World::new(1);
    w.settle();
    // An extra CA that expires in an hour, as if left from long ago.
    let old = issue::new_ca(
        w.now - Duration::days(1),
        Duration::days(1) + Duration::hours(1),
    )
    .unwrap();
    w.stored.bundle.push(one(&old.cert));
    w.now += Duration::hours(2);
    assert!(
        matches!(w.step(), Step::Prune { ref keep } if keep.len() == 1),
        "{:?}",
        w.steps
    );
    let ca_end = w.stored.bundle[0].not_after;
    w.s.cert_validity = Duration::days(365);
    w.s.names.dns_names.push("other".into());
    w.settle();
    assert!(w.stored.serving.as_ref().unwrap().cert.not_after <= ca_end);
}
