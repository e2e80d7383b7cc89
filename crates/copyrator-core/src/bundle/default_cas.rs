//! The default CAs (SPEC §3.2, Bundles): the public CAs a bundle's `{defaultCAs: true}`
//! source gives, as data. The shell reads them (the package copyrator is built with, or the
//! PEM file its administrator mounted); here they are parsed, judged and described.

use std::fmt;

use sha2::{Digest, Sha256};

use super::{Certificate, certificates};
use crate::{copyrule::DefaultCasStatus, transform::NotCertificates};

/// Where the default CAs come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DefaultCasOrigin {
    /// A package of Mozilla's roots compiled into copyrator.
    Package { name: String, version: String },
    /// A PEM file given with `--default-cas-file`, and the SHA-256 of its bytes.
    File { path: String, sha256: String },
}

/// The default CAs: their origin and their certificates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DefaultCas {
    pub origin: DefaultCasOrigin,
    pub certificates: Vec<Certificate>,
}

/// Why a set of default CAs is refused: copyrator does not start with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DefaultCasError {
    #[error("{0}: its certificate {1} is not a valid X.509 certificate")]
    BadPackage(String, usize),
    #[error(
        "--default-cas-file {0} {1}: it must hold PEM certificates and nothing else (no \
         comments, no keys)"
    )]
    NotCertificates(String, NotCertificates),
}

impl DefaultCas {
    /// The certificates of a package (DER, each a valid X.509 certificate).
    pub fn from_package<'a>(
        name: &str,
        version: &str,
        ders: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<Self, DefaultCasError> {
        let certificates = ders
            .into_iter()
            .enumerate()
            .map(|(i, der)| {
                Certificate::from_der(der.to_vec())
                    .map_err(|_| DefaultCasError::BadPackage(format!("{name} {version}"), i))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            origin: DefaultCasOrigin::Package {
                name: name.to_string(),
                version: version.to_string(),
            },
            certificates,
        })
    }

    /// The certificates of a PEM file's `bytes`, judged by the PEM rule a bundle source's
    /// value is (nothing but certificates, at least one).
    pub fn from_pem_file(path: &str, bytes: &[u8]) -> Result<Self, DefaultCasError> {
        let certificates = certificates(bytes)
            .map_err(|why| DefaultCasError::NotCertificates(path.to_string(), why))?;
        Ok(Self {
            origin: DefaultCasOrigin::File {
                path: path.to_string(),
                sha256: hex(&Sha256::digest(bytes)),
            },
            certificates,
        })
    }

    /// As a CopyRule's status shows them.
    pub fn status(&self) -> DefaultCasStatus {
        let certificates = u32::try_from(self.certificates.len()).unwrap_or(u32::MAX);
        match &self.origin {
            DefaultCasOrigin::Package { name, version } => DefaultCasStatus {
                package: Some(name.clone()),
                version: Some(version.clone()),
                certificates,
                ..Default::default()
            },
            DefaultCasOrigin::File { path, sha256 } => DefaultCasStatus {
                file: Some(path.clone()),
                sha256: Some(sha256.clone()),
                certificates,
                ..Default::default()
            },
        }
    }
}

/// `webpki-root-certs 1.0.11`, or `file /etc/cas.pem sha256:…`: as published on the Lease
/// and read back ([`DefaultCasOrigin::parse`]).
impl fmt::Display for DefaultCasOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Package { name, version } => write!(f, "{name} {version}"),
            Self::File { path, sha256 } => write!(f, "file {path} sha256:{sha256}"),
        }
    }
}

impl DefaultCasOrigin {
    /// What [`fmt::Display`] wrote, read back.
    pub fn parse(s: &str) -> Option<Self> {
        if let Some(rest) = s.strip_prefix("file ") {
            let (path, sha256) = rest.rsplit_once(" sha256:")?;
            return Some(Self::File {
                path: path.to_string(),
                sha256: sha256.to_string(),
            });
        }
        let (name, version) = s.split_once(' ')?;
        (!name.is_empty() && !version.is_empty() && !version.contains(' ')).then(|| Self::Package {
            name: name.to_string(),
            version: version.to_string(),
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transform::certificates::tests::ca;

    #[test]
    fn a_pem_file_of_certificates_is_the_default_cas_and_says_its_digest() {
        let (a, _) = ca("a.example");
        let (b, _) = ca("b.example");
        let file = format!("{a}\n{b}");
        let cas = DefaultCas::from_pem_file("/etc/cas.pem", file.as_bytes()).unwrap();
        assert_eq!(cas.certificates.len(), 2);
        let status = cas.status();
        assert_eq!(status.file.as_deref(), Some("/etc/cas.pem"));
        assert_eq!(status.certificates, 2);
        assert_eq!(status.sha256.as_ref().map(String::len), Some(64));
        assert_eq!(status.package, None);
    }

    #[test]
    fn a_file_with_anything_but_certificates_is_refused_naming_it() {
        let (cert, key) = ca("a.example");
        for (bytes, why) in [
            (format!("{cert}{key}"), NotCertificates::PrivateKey),
            (
                format!("# Mozilla roots\n{cert}"),
                NotCertificates::OutsideBlocks,
            ),
            (String::new(), NotCertificates::Empty),
        ] {
            let err = DefaultCas::from_pem_file("/etc/cas.pem", bytes.as_bytes()).unwrap_err();
            assert_eq!(
                err,
                DefaultCasError::NotCertificates("/etc/cas.pem".into(), why)
            );
            assert!(err.to_string().contains("--default-cas-file /etc/cas.pem"));
        }
    }

    #[test]
    fn a_package_says_its_name_and_version() {
        let (a, _) = ca("a.example");
        let der = certificates(a.as_bytes()).unwrap().remove(0).der;
        let cas = DefaultCas::from_package("roots", "1.2.3", [der.as_slice()]).unwrap();
        let status = cas.status();
        assert_eq!(
            (status.package.as_deref(), status.version.as_deref()),
            (Some("roots"), Some("1.2.3"))
        );
        assert_eq!(status.certificates, 1);
        assert_eq!(
            DefaultCas::from_package("roots", "1.2.3", [&b"junk"[..]]),
            Err(DefaultCasError::BadPackage("roots 1.2.3".into(), 0))
        );
    }

    #[test]
    fn an_origin_reads_back_as_published() {
        for origin in [
            DefaultCasOrigin::Package {
                name: "webpki-root-certs".into(),
                version: "1.0.11".into(),
            },
            DefaultCasOrigin::File {
                path: "/etc/copyrator/default cas/ca.pem".into(),
                sha256: "ab".repeat(32),
            },
        ] {
            assert_eq!(DefaultCasOrigin::parse(&origin.to_string()), Some(origin));
        }
        assert_eq!(DefaultCasOrigin::parse("nonsense"), None);
    }
}
