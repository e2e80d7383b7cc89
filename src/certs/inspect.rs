//! Reading certificates back: validity, names, which CA signed a certificate, whether a key
//! belongs to it. What the rotation decides from.

use std::net::IpAddr;

use base64::Engine;
use rustls::pki_types::{CertificateDer, pem::PemObject};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use x509_parser::{certificate::X509Certificate, extensions::GeneralName, prelude::FromDer};

use super::issue::SubjectNames;

/// What copyrator needs to know of one certificate.
#[derive(Clone, PartialEq, Eq)]
pub struct CertFacts {
    pub der: Vec<u8>,
    pub fingerprint: [u8; 32],
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    pub is_ca: bool,
    /// The subject public key (the BIT STRING's contents).
    pub public_key: Vec<u8>,
    pub names: SubjectNames,
}

impl std::fmt::Debug for CertFacts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertFacts")
            .field("fingerprint", &hex(&self.fingerprint[..8]))
            .field("not_after", &self.not_after)
            .field("is_ca", &self.is_ca)
            .finish()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl CertFacts {
    /// Parses one DER certificate; `None` if it is not one.
    pub fn from_der(der: &[u8]) -> Option<Self> {
        let (_, cert) = X509Certificate::from_der(der).ok()?;
        let validity = cert.validity();
        let mut names = SubjectNames::default();
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(dns) => names.dns_names.push((*dns).to_string()),
                    GeneralName::IPAddress(raw) => {
                        let ip = match raw.len() {
                            4 => <[u8; 4]>::try_from(*raw).ok().map(IpAddr::from),
                            16 => <[u8; 16]>::try_from(*raw).ok().map(IpAddr::from),
                            _ => None,
                        };
                        names.ips.extend(ip);
                    }
                    _ => {}
                }
            }
        }
        Some(Self {
            der: der.to_vec(),
            fingerprint: Sha256::digest(der).into(),
            not_before: validity.not_before.to_datetime(),
            not_after: validity.not_after.to_datetime(),
            is_ca: cert.is_ca(),
            public_key: cert.public_key().subject_public_key.data.to_vec(),
            names,
        })
    }

    /// The certificate as one PEM block.
    pub fn pem(&self) -> String {
        let b64 = base64::engine::general_purpose::STANDARD.encode(&self.der);
        let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
        for line in b64.as_bytes().chunks(64) {
            out.push_str(std::str::from_utf8(line).unwrap_or_default());
            out.push('\n');
        }
        out.push_str("-----END CERTIFICATE-----\n");
        out
    }

    /// Whether `issuer`'s key made this certificate's signature.
    pub fn signed_by(&self, issuer: &CertFacts) -> bool {
        let (Ok((_, cert)), Ok((_, ca))) = (
            X509Certificate::from_der(&self.der),
            X509Certificate::from_der(&issuer.der),
        ) else {
            return false;
        };
        cert.verify_signature(Some(ca.public_key())).is_ok()
    }

    /// Whether `key_pem` is the private key of this certificate.
    pub fn key_matches(&self, key_pem: &str) -> bool {
        rcgen::KeyPair::from_pem(key_pem).is_ok_and(|key| key.public_key_raw() == self.public_key)
    }

    /// Whether the certificate is valid at `now`.
    pub fn valid_at(&self, now: OffsetDateTime) -> bool {
        self.not_before <= now && now < self.not_after
    }

    /// Whether the certificate is for exactly these names (in any order).
    pub fn is_for(&self, names: &SubjectNames) -> bool {
        let sorted = |n: &SubjectNames| {
            let mut dns = n.dns_names.clone();
            dns.sort();
            let mut ips = n.ips.clone();
            ips.sort();
            (dns, ips)
        };
        sorted(&self.names) == sorted(names)
    }
}

/// Every certificate in a PEM bundle, in order; blocks that are not certificates are skipped.
pub fn parse_bundle(pem: &[u8]) -> Vec<CertFacts> {
    CertificateDer::pem_slice_iter(pem)
        .filter_map(Result::ok)
        .filter_map(|der| CertFacts::from_der(&der))
        .collect()
}

/// The PEM bundle of `certs`, in order.
pub fn bundle_pem<'a>(certs: impl IntoIterator<Item = &'a CertFacts>) -> String {
    certs.into_iter().map(CertFacts::pem).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::issue::{self, PemPair};
    use time::Duration;

    fn names() -> SubjectNames {
        SubjectNames {
            dns_names: vec!["copyrator.ns.svc".into(), "localhost".into()],
            ips: vec!["127.0.0.1".parse().unwrap()],
        }
    }

    fn facts(pair: &PemPair) -> CertFacts {
        let mut all = parse_bundle(pair.cert.as_bytes());
        assert_eq!(all.len(), 1);
        all.remove(0)
    }

    #[test]
    fn reads_back_what_was_issued() {
        let now = OffsetDateTime::now_utc();
        let ca = issue::new_ca(now, Duration::days(10)).unwrap();
        let other = issue::new_ca(now, Duration::days(10)).unwrap();
        let leaf = issue::serving(&ca, &names(), now, now + Duration::days(2)).unwrap();
        let (ca_f, other_f, leaf_f) = (facts(&ca), facts(&other), facts(&leaf));

        assert!(ca_f.is_ca && !leaf_f.is_ca);
        assert!(leaf_f.signed_by(&ca_f));
        assert!(!leaf_f.signed_by(&other_f));
        assert!(ca_f.signed_by(&ca_f), "self-signed");
        assert!(leaf_f.key_matches(&leaf.key));
        assert!(!leaf_f.key_matches(&ca.key));
        assert!(ca_f.key_matches(&ca.key));
        assert!(!leaf_f.key_matches("not a key"));
        assert!(leaf_f.is_for(&names()));
        assert!(!leaf_f.is_for(&SubjectNames::default()));
        assert_eq!(
            (leaf_f.not_after - now).whole_hours(),
            47,
            "valid for the two days asked (to the second)"
        );
        assert!(leaf_f.valid_at(now) && !leaf_f.valid_at(now + Duration::days(3)));

        // A bundle survives a round trip through PEM, garbage between blocks skipped.
        let bundle = format!(
            "{}junk\n{}",
            bundle_pem([&ca_f, &other_f]),
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
        );
        assert_eq!(parse_bundle(bundle.as_bytes()), vec![ca_f, other_f]);
    }
}
