//! The webhook server's certificates: `copyrator certs` writes a throwaway CA and serving
//! certificate into files (local runs, the demo, the tests); [`manager`] issues, publishes and
//! rotates them in-process for a cluster install (SPEC §6.5).

use std::{
    fs,
    net::IpAddr,
    path::{Path, PathBuf},
};

use time::{Duration, OffsetDateTime};

pub mod inspect;
pub mod issue;
pub mod manager;
pub mod rotation;
pub mod serving;

use issue::SubjectNames;

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
    let names = SubjectNames {
        dns_names: req.dns_names.clone(),
        ips: req.ips.clone(),
    };
    let (ca, leaf) = issue::ca_and_serving(
        &names,
        OffsetDateTime::now_utc(),
        Duration::days(i64::from(req.valid_days.max(1))),
    )?;
    Ok(GeneratedCerts {
        ca_cert_pem: ca.cert,
        cert_pem: leaf.cert,
        key_pem: leaf.key,
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
