//! Bundles (SPEC §3.2, Bundles): the certificates of one key of several Secrets and ConfigMaps,
//! combined into one key of a CopyRule's copies. Pure: the sources' values in (read by the
//! sync layer), the combined PEM out, the same bytes for the same certificates whatever the
//! order, whitespace or duplicates of the sources. Certificates are judged by the PEM rule
//! (`transform::certificates`) and parsed by `x509-parser`; no ASN.1 is read by hand.

use std::collections::BTreeMap;

use base64::{Engine, engine::general_purpose::STANDARD};
use x509_parser::parse_x509_certificate;

use crate::{
    model::{Kind, ObjectKey, Payload, SourceInfo},
    selector::Selector,
    transform::{Formats, NotCertificates, Refused, certificates::certificate_ders},
};

/// A CopyRule's bundle, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle {
    pub sources: Vec<BundleSource>,
    /// The key of the copies that holds the certificates.
    pub key: String,
    /// The copies' Secret type (Secret copies only; Opaque by default).
    pub type_: Option<String>,
    /// Certificates past their notAfter are left out.
    pub drop_expired: bool,
    /// The default CAs are a source too (`{defaultCAs: true}`): they go into every copy.
    pub default_cas: bool,
    /// Truststores of the certificates beside them (`spec.target.formats`, made of `key`).
    pub formats: Option<crate::transform::Formats>,
    /// What stands for the source of the copies in their marks and claims: the rule itself
    /// ([`ObjectKey::bundle`], the rule's uid as `source-uid`).
    pub owner: SourceInfo,
}

/// One source entry of a bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleSource {
    pub kind: Kind,
    pub namespace: String,
    pub select: BundleSelect,
    /// The key holding the certificates.
    pub key: String,
}

/// Which objects of a bundle source's namespace it reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BundleSelect {
    Name(String),
    Selector(Selector),
}

/// Most source entries one bundle may list.
pub const MAX_SOURCES: usize = 64;
/// Most objects one selector entry of a bundle reads (the oldest names first are not known
/// from metadata alone: the first by name).
pub const MAX_SELECTED: usize = 32;

impl BundleSource {
    /// Whether `source` is read by this entry. A copy never is (SPEC §9.6).
    pub fn selects(&self, source: &SourceInfo) -> bool {
        !source.is_copy()
            && source.key.kind == self.kind
            && source.key.namespace == self.namespace
            && match &self.select {
                BundleSelect::Name(name) => &source.key.name == name,
                BundleSelect::Selector(sel) => sel.matches(&source.labels),
            }
    }

    /// Whether an object of `key` may be read by this entry, its labels unknown (it is gone).
    pub fn may_select(&self, key: &ObjectKey) -> bool {
        key.kind == self.kind
            && key.namespace == self.namespace
            && match &self.select {
                BundleSelect::Name(name) => &key.name == name,
                BundleSelect::Selector(_) => true,
            }
    }
}

impl Bundle {
    /// Whether a change of the object `key` can change the bundle: it is named, or of the
    /// kind and namespace of a selector entry (it may start or stop matching it, or go).
    /// A Secret its stores' passwords are read from is followed by its rule
    /// ([`crate::rules::Rule::follows`]).
    pub fn follows(&self, key: &ObjectKey) -> bool {
        self.sources.iter().any(|s| s.may_select(key))
    }
}

/// Why a bundle source gives no certificate. Said in fixed words: nothing of a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeftOut {
    #[error("the source does not exist")]
    SourceNotFound,
    #[error("the source has no such key")]
    NoKey,
    #[error("the key {0}")]
    NotCertificates(NotCertificates),
}

/// One certificate of a bundle source: its DER, and what orders and filters it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Certificate {
    pub der: Vec<u8>,
    /// The subject's DER encoding: the first sort key.
    subject: Vec<u8>,
    /// notAfter, seconds since the epoch.
    not_after: i64,
}

impl Certificate {
    /// A DER X.509 certificate, parsed for what orders and filters it.
    pub fn from_der(der: Vec<u8>) -> Result<Self, NotCertificates> {
        let (subject, not_after) = match parse_x509_certificate(&der) {
            Ok(([], cert)) => (
                cert.subject().as_raw().to_vec(),
                cert.validity().not_after.timestamp(),
            ),
            _ => return Err(NotCertificates::BadCertificate),
        };
        Ok(Self {
            der,
            subject,
            not_after,
        })
    }
}

/// The certificates of a bundle source's value: PEM holding nothing but certificates (the
/// PEM rule), each parsed.
pub fn certificates(value: &[u8]) -> Result<Vec<Certificate>, NotCertificates> {
    certificate_ders(value)?
        .into_iter()
        .map(Certificate::from_der)
        .collect()
}

/// One object's key read for a bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BundleInput {
    pub source: ObjectKey,
    pub key: String,
    pub read: Result<Vec<Certificate>, LeftOut>,
}

/// Every object a bundle's sources read, in the order of its entries (then by name), and
/// when they were read (what "expired" is judged against).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BundleInputs {
    pub inputs: Vec<BundleInput>,
    /// Seconds since the epoch.
    pub read_at: i64,
}

impl BundleInputs {
    /// The inputs whose namespace `admits` (trusted, or consented to by the target namespace,
    /// SPEC §9): their indexes, the key of what a target's copy holds.
    pub fn admitted(&self, admits: impl Fn(&str) -> bool) -> Vec<usize> {
        self.inputs
            .iter()
            .enumerate()
            .filter(|(_, i)| admits(&i.source.namespace))
            .map(|(n, _)| n)
            .collect()
    }

    /// The PEM of the admitted inputs' certificates and of `defaults` (the default CAs, when
    /// the bundle takes them: admitted everywhere): deduplicated by DER, ordered by subject
    /// (its DER) then DER, without expired ones when `drop_expired`. `None` when no certificate
    /// is left: a bundle is never written empty.
    pub fn combine(
        &self,
        admitted: &[usize],
        defaults: &[Certificate],
        drop_expired: bool,
    ) -> Option<String> {
        let mut certs: Vec<&Certificate> = admitted
            .iter()
            .filter_map(|n| self.inputs.get(*n))
            .filter_map(|i| i.read.as_ref().ok())
            .flatten()
            .chain(defaults)
            .filter(|c| !drop_expired || c.not_after >= self.read_at)
            .collect();
        certs.sort_by(|a, b| (&a.subject, &a.der).cmp(&(&b.subject, &b.der)));
        certs.dedup_by(|a, b| a.der == b.der);
        if certs.is_empty() {
            return None;
        }
        let mut pem = String::new();
        for cert in certs {
            pem.push_str("-----BEGIN CERTIFICATE-----\n");
            let b64 = STANDARD.encode(&cert.der);
            // 64 characters a line, as PEM writers do; base64 is ASCII, so bytes are chars.
            for line in b64.as_bytes().chunks(64) {
                pem.push_str(&String::from_utf8_lossy(line));
                pem.push('\n');
            }
            pem.push_str("-----END CERTIFICATE-----\n");
        }
        Some(pem)
    }

    /// The inputs that give no certificate, and why (reported, never fatal).
    pub fn left_out(&self) -> impl Iterator<Item = (&BundleInput, LeftOut)> {
        self.inputs
            .iter()
            .filter_map(|i| i.read.as_ref().err().map(|why| (i, *why)))
    }
}

/// The payload of a bundle's copies of `kind`: `pem` under `key` (base64 in a Secret, of
/// `type_` or Opaque), and the truststores of `formats` beside it.
pub fn payload(
    kind: Kind,
    key: &str,
    type_: Option<&str>,
    pem: String,
    formats: Option<&Formats>,
) -> Result<Payload, Refused> {
    let mut payload = pem_payload(kind, key, type_, pem);
    if let Some(formats) = formats {
        let mut data = payload.data.take().unwrap_or_default();
        let mut binary = BTreeMap::new();
        formats.add_to(kind, &mut data, &mut binary)?;
        payload.data = Some(data);
        payload.binary_data = (!binary.is_empty()).then_some(binary);
    }
    Ok(payload)
}

fn pem_payload(kind: Kind, key: &str, type_: Option<&str>, pem: String) -> Payload {
    if kind == Kind::Secret {
        Payload {
            type_: Some(type_.unwrap_or(crate::transform::OPAQUE).to_string()),
            data: Some(BTreeMap::from([(key.to_string(), STANDARD.encode(pem))])),
            ..Default::default()
        }
    } else {
        Payload {
            data: Some(BTreeMap::from([(key.to_string(), pem)])),
            ..Default::default()
        }
    }
}

mod default_cas;
pub use default_cas::{DefaultCas, DefaultCasError, DefaultCasOrigin};

#[cfg(test)]
mod tests;
