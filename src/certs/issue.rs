//! Making certificates: a CA, and a serving certificate signed by a CA given as PEM.

use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

use super::CertError;

/// Backdating of every certificate's `notBefore`: slack for clock skew between this machine
/// and the API server.
pub const BACKDATE: Duration = Duration::hours(1);

/// The names a serving certificate is for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubjectNames {
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
}

impl SubjectNames {
    fn common_name(&self) -> String {
        self.dns_names
            .first()
            .cloned()
            .or_else(|| self.ips.first().map(ToString::to_string))
            .unwrap_or_else(|| "copyrator".into())
    }
}

/// A certificate and its private key, both PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct PemPair {
    pub cert: String,
    pub key: String,
}

impl std::fmt::Debug for PemPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PemPair")
            .field("cert", &self.cert.len())
            .field("key", &"<redacted>")
            .finish()
    }
}

/// A new CA, valid from `now - BACKDATE` until `now + validity`, that may sign end-entity
/// certificates only (path length 0).
pub fn new_ca(now: OffsetDateTime, validity: Duration) -> Result<PemPair, CertError> {
    let key = KeyPair::generate()?;
    let cert = ca_params(now, validity).self_signed(&key)?;
    Ok(PemPair {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

fn ca_params(now: OffsetDateTime, validity: Duration) -> CertificateParams {
    let mut params = CertificateParams::default();
    // The time in the name keeps successive CAs apart in a bundle and in logs.
    params.distinguished_name = name(&format!("copyrator webhook CA {}", now.unix_timestamp()));
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = now - BACKDATE;
    params.not_after = now + validity;
    params
}

/// A serving certificate for `names`, signed by `ca`, valid from `now - BACKDATE` until
/// `not_after` (never past the CA's own end: the caller passes the earlier of the two).
pub fn serving(
    ca: &PemPair,
    names: &SubjectNames,
    now: OffsetDateTime,
    not_after: OffsetDateTime,
) -> Result<PemPair, CertError> {
    let issuer = Issuer::from_ca_cert_pem(&ca.cert, KeyPair::from_pem(&ca.key)?)?;
    serving_with(&issuer, names, now, not_after)
}

pub(super) fn serving_with(
    issuer: &Issuer<'_, KeyPair>,
    names: &SubjectNames,
    now: OffsetDateTime,
    not_after: OffsetDateTime,
) -> Result<PemPair, CertError> {
    if names.dns_names.is_empty() && names.ips.is_empty() {
        return Err(CertError::NoSubjectAltNames);
    }
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    params.distinguished_name = name(&names.common_name());
    for dns in &names.dns_names {
        let san = dns
            .clone()
            .try_into()
            .map_err(|e| CertError::DnsName(dns.clone(), e))?;
        params.subject_alt_names.push(SanType::DnsName(san));
    }
    params
        .subject_alt_names
        .extend(names.ips.iter().map(|ip| SanType::IpAddress(*ip)));
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = now - BACKDATE;
    params.not_after = not_after;
    let cert = params.signed_by(&key, issuer)?;
    Ok(PemPair {
        cert: cert.pem(),
        key: key.serialize_pem(),
    })
}

/// A CA and a serving certificate signed by it, both valid for `validity`.
pub(super) fn ca_and_serving(
    names: &SubjectNames,
    now: OffsetDateTime,
    validity: Duration,
) -> Result<(PemPair, PemPair), CertError> {
    if names.dns_names.is_empty() && names.ips.is_empty() {
        return Err(CertError::NoSubjectAltNames);
    }
    let ca_key = KeyPair::generate()?;
    let params = ca_params(now, validity);
    let ca_cert = params.self_signed(&ca_key)?;
    let ca = PemPair {
        cert: ca_cert.pem(),
        key: ca_key.serialize_pem(),
    };
    let issuer = Issuer::new(params, ca_key);
    let leaf = serving_with(&issuer, names, now, now + validity)?;
    Ok((ca, leaf))
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn.push(DnType::OrganizationName, "copyrator");
    dn
}
