//! `copyrator certs`: a throwaway CA and a serving certificate for the webhook server.
//!
//! Production installs get their certificate from the Helm chart or cert-manager; this is for
//! local runs, the demo and the tests, where the API server must trust copyrator's endpoint at
//! `https://127.0.0.1:PORT`.

use std::{
    fs,
    net::IpAddr,
    path::{Path, PathBuf},
};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

/// File names written into the output directory (the names a Kubernetes TLS Secret volume uses).
pub const CA_CERT_FILE: &str = "ca.crt";
pub const TLS_CERT_FILE: &str = "tls.crt";
pub const TLS_KEY_FILE: &str = "tls.key";

/// What to put into the serving certificate.
#[derive(Clone, Debug)]
pub struct CertRequest {
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
    pub valid_days: u32,
}

impl Default for CertRequest {
    fn default() -> Self {
        Self {
            dns_names: vec!["localhost".into()],
            ips: vec![IpAddr::from([127, 0, 0, 1])],
            valid_days: 365,
        }
    }
}

/// PEM-encoded output of [`generate`].
#[derive(Clone, Debug)]
pub struct GeneratedCerts {
    pub ca_cert_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("certificate generation failed: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("invalid DNS name {0:?}: {1}")]
    DnsName(String, rcgen::Error),
    #[error("a serving certificate needs at least one --dns or --ip")]
    NoSubjectAltNames,
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Creates a CA and a serving certificate signed by it, both in memory.
pub fn generate(req: &CertRequest) -> Result<GeneratedCerts, CertError> {
    if req.dns_names.is_empty() && req.ips.is_empty() {
        return Err(CertError::NoSubjectAltNames);
    }
    let (not_before, not_after) = validity(req.valid_days);

    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name = name("copyrator webhook CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca_params.not_before = not_before;
    ca_params.not_after = not_after;
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    let common_name = req
        .dns_names
        .first()
        .cloned()
        .or_else(|| req.ips.first().map(ToString::to_string))
        .unwrap_or_else(|| "copyrator".into());
    params.distinguished_name = name(&common_name);
    for dns in &req.dns_names {
        let san = dns
            .clone()
            .try_into()
            .map_err(|e| CertError::DnsName(dns.clone(), e))?;
        params.subject_alt_names.push(SanType::DnsName(san));
    }
    params
        .subject_alt_names
        .extend(req.ips.iter().map(|ip| SanType::IpAddress(*ip)));
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = not_before;
    params.not_after = not_after;
    let cert = params.signed_by(&key, &issuer)?;

    Ok(GeneratedCerts {
        ca_cert_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Generates and writes `ca.crt`, `tls.crt` and `tls.key` into `dir` (created if needed).
/// The key is written with mode 0600.
pub fn write(dir: &Path, req: &CertRequest) -> Result<GeneratedCerts, CertError> {
    let certs = generate(req)?;
    fs::create_dir_all(dir).map_err(|source| CertError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    write_file(&dir.join(CA_CERT_FILE), &certs.ca_cert_pem, 0o644)?;
    write_file(&dir.join(TLS_CERT_FILE), &certs.cert_pem, 0o644)?;
    write_file(&dir.join(TLS_KEY_FILE), &certs.key_pem, 0o600)?;
    Ok(certs)
}

fn write_file(path: &Path, contents: &str, mode: u32) -> Result<(), CertError> {
    use std::os::unix::fs::PermissionsExt;
    let err = |source| CertError::Write {
        path: path.to_path_buf(),
        source,
    };
    // Write beside the target and rename, so a running server never reads half a file.
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, contents).map_err(err)?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode)).map_err(err)?;
    fs::rename(&tmp, path).map_err(err)
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn.push(DnType::OrganizationName, "copyrator");
    dn
}

fn validity(days: u32) -> (OffsetDateTime, OffsetDateTime) {
    let now = OffsetDateTime::now_utc();
    // A little slack for clock skew between this machine and the API server.
    (
        now - Duration::hours(1),
        now + Duration::days(i64::from(days.max(1))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_pem_ca_cert_and_key() {
        let certs = generate(&CertRequest::default()).expect("generate");
        assert!(certs.ca_cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(certs.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(certs.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert_ne!(certs.ca_cert_pem, certs.cert_pem);
    }

    #[test]
    fn rejects_request_without_names() {
        let req = CertRequest {
            dns_names: vec![],
            ips: vec![],
            valid_days: 1,
        };
        assert!(matches!(generate(&req), Err(CertError::NoSubjectAltNames)));
    }

    #[test]
    fn rejects_invalid_dns_name() {
        let req = CertRequest {
            dns_names: vec!["bücher.example".into()],
            ips: vec![],
            valid_days: 1,
        };
        assert!(matches!(generate(&req), Err(CertError::DnsName(..))));
    }

    #[test]
    fn writes_files_with_private_key_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &CertRequest::default()).expect("write");
        for f in [CA_CERT_FILE, TLS_CERT_FILE, TLS_KEY_FILE] {
            assert!(dir.path().join(f).is_file(), "{f} missing");
        }
        let mode = fs::metadata(dir.path().join(TLS_KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
