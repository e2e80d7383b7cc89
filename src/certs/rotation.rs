//! When to make a new CA, publish a CA bundle, sign a new serving certificate or drop an old
//! CA: the order that keeps every webhook call verifiable across a rotation (SPEC §6.5). Pure:
//! [`next_step`] looks at what the certificate Secret holds and what the webhook
//! configurations trust, at one instant, and names the one step to take.
//!
//! The order: a new CA is added to the bundle first, beside the old one; the bundle is
//! published into every webhook; only once every webhook has trusted the new CA for
//! `propagation` is a serving certificate signed by it; only once that certificate has been in
//! the Secret for `propagation` (every replica has loaded it) is the old CA dropped. A
//! rotation asked for by hand waits for the one under way to complete, so requests faster than
//! `propagation` never push the CA of a certificate still served out of the bundle.

use time::{Duration, OffsetDateTime};

use super::{inspect::CertFacts, issue::SubjectNames};

/// At most this many CAs in a bundle: the current one and those still being phased out.
pub const MAX_BUNDLE: usize = 4;

/// How certificates are made and when they are renewed.
#[derive(Clone, Debug)]
pub struct Settings {
    pub names: SubjectNames,
    /// Lifetime of a new CA; the next one is made when a third of it is left.
    pub ca_validity: Duration,
    /// Lifetime of a new serving certificate (never past its CA's end); the next one is signed
    /// when a third of it is left.
    pub cert_validity: Duration,
    /// How long a change takes to reach every party: the API server (a published bundle) and
    /// every replica (a new serving certificate in the Secret).
    pub propagation: Duration,
}

/// The serving pair held in the Secret.
#[derive(Clone, Debug)]
pub struct Serving {
    pub cert: CertFacts,
    pub key: String,
}

/// What the certificate Secret holds, read back.
#[derive(Clone, Debug, Default)]
pub struct Stored {
    /// `ca.crt`: every CA the webhooks should trust, the current one first.
    pub bundle: Vec<CertFacts>,
    /// `ca.key`: the current CA's key.
    pub ca_key: Option<String>,
    /// `tls.crt` (its first certificate) and `tls.key`.
    pub serving: Option<Serving>,
    /// Since when every webhook has trusted the current CA.
    pub trusted_since: Option<OffsetDateTime>,
    /// When the serving certificate was written.
    pub serving_since: Option<OffsetDateTime>,
    /// A rotation asked for by hand (annotation value), and the last one done.
    pub rotate_requested: Option<String>,
    pub rotate_done: Option<String>,
}

impl Stored {
    /// The CA whose key the Secret holds.
    pub fn current_ca(&self) -> Option<&CertFacts> {
        let key = self.ca_key.as_deref()?;
        self.bundle.iter().find(|c| c.is_ca && c.key_matches(key))
    }

    fn rotation_requested(&self) -> bool {
        self.rotate_requested.is_some() && self.rotate_requested != self.rotate_done
    }

    /// Whether the last rotation has completed: the bundle is down to one CA, in the Secret
    /// and in every webhook (older CAs are dropped only once every replica serves a
    /// certificate of the current one).
    fn rotation_completed(&self, published: &[Vec<CertFacts>]) -> bool {
        let only = |b: &[CertFacts]| match b {
            [c] => Some(c.fingerprint),
            _ => None,
        };
        let ours = only(&self.bundle);
        ours.is_some() && published.iter().all(|p| only(p) == ours)
    }
}

/// The one step to take next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Make a new CA and put it first in the bundle, before `keep`.
    NewCa { keep: Vec<CertFacts> },
    /// Put the Secret's bundle into every webhook that does not hold exactly it;
    /// `current_missing`: some webhook does not trust the current CA yet.
    Publish { current_missing: bool },
    /// Record that every webhook trusts the current CA from now on.
    MarkTrusted,
    /// Sign a new serving certificate with the current CA, valid until `not_after`.
    NewServing { not_after: OffsetDateTime },
    /// Reduce the bundle to `keep`.
    Prune { keep: Vec<CertFacts> },
    /// Nothing to do; look again at `until` at the latest.
    Wait { until: Option<OffsetDateTime> },
}

/// The next step, given the Secret (`stored`), the bundle each webhook holds now
/// (`published`: one entry per webhook of copyrator's configurations) and the time.
pub fn next_step(
    stored: &Stored,
    published: &[Vec<CertFacts>],
    now: OffsetDateTime,
    s: &Settings,
) -> Step {
    // A rotation asked for by hand while the last one is under way waits until that one has
    // completed. Acted on at once, a fourth request in a row pushed the CA of the certificate
    // still served out of the full bundle, and that certificate, no longer usable, was replaced
    // at once by one of a CA nobody trusted yet. Requests made meanwhile count as one (the
    // annotation holds the latest), acted on then.
    let rotate_now = stored.rotation_requested() && stored.rotation_completed(published);
    let Some(ca) = stored
        .current_ca()
        .filter(|ca| ca.valid_at(now) && now < renew_at(ca) && !rotate_now)
    else {
        return Step::NewCa {
            keep: still_trusted(stored, published, now),
        };
    };

    // Expired CAs go at once: nothing signed by them verifies any more.
    if stored.bundle.iter().any(|c| !c.valid_at(now)) {
        return Step::Prune {
            keep: stored
                .bundle
                .iter()
                .filter(|c| c.valid_at(now))
                .cloned()
                .collect(),
        };
    }

    let fingerprints = |b: &[CertFacts]| b.iter().map(|c| c.fingerprint).collect::<Vec<_>>();
    let wanted = fingerprints(&stored.bundle);
    if published.iter().any(|p| fingerprints(p) != wanted) {
        let current_missing = published
            .iter()
            .any(|p| !p.iter().any(|c| c.fingerprint == ca.fingerprint));
        return Step::Publish { current_missing };
    }
    let Some(trusted_since) = stored.trusted_since else {
        return Step::MarkTrusted;
    };
    let trusted_everywhere = trusted_since + s.propagation;

    let usable = stored.serving.as_ref().filter(|sv| {
        sv.cert.valid_at(now)
            && sv.cert.key_matches(&sv.key)
            && stored.bundle.iter().any(|c| sv.cert.signed_by(c))
    });
    let good = usable
        .filter(|sv| sv.cert.signed_by(ca) && sv.cert.is_for(&s.names) && now < renew_at(&sv.cert));
    let new_serving = Step::NewServing {
        not_after: (now + s.cert_validity).min(ca.not_after),
    };
    let Some(serving) = good else {
        // Nothing usable to serve: nothing to keep working either.
        if usable.is_none() || now >= trusted_everywhere {
            return new_serving;
        }
        return Step::Wait {
            until: Some(trusted_everywhere),
        };
    };

    let mut until = renew_at(ca).min(renew_at(&serving.cert));
    if stored.bundle.len() > 1 {
        // Every replica serves the certificate of the current CA once it has been in the
        // Secret for `propagation`: the others may go.
        let since = stored
            .serving_since
            .unwrap_or(serving.cert.not_before + super::issue::BACKDATE);
        if now >= since + s.propagation {
            return Step::Prune {
                keep: vec![ca.clone()],
            };
        }
        until = until.min(since + s.propagation);
    }
    Step::Wait { until: Some(until) }
}

/// When a certificate is renewed: with a third of its lifetime left.
fn renew_at(c: &CertFacts) -> OffsetDateTime {
    let issued = c.not_before + super::issue::BACKDATE;
    c.not_after - (c.not_after - issued) / 3
}

/// The CAs to keep beside a new one: those in the Secret or in any webhook that are still
/// valid, in that order, at most `MAX_BUNDLE - 1`.
fn still_trusted(
    stored: &Stored,
    published: &[Vec<CertFacts>],
    now: OffsetDateTime,
) -> Vec<CertFacts> {
    let mut keep: Vec<CertFacts> = Vec::new();
    for c in stored.bundle.iter().chain(published.iter().flatten()) {
        if c.is_ca && c.valid_at(now) && !keep.iter().any(|k| k.fingerprint == c.fingerprint) {
            keep.push(c.clone());
        }
    }
    keep.truncate(MAX_BUNDLE - 1);
    keep
}

#[cfg(test)]
mod tests;
