//! The webhook server's certificate, re-read when its files change: including the
//! Kubernetes Secret-volume rotation, where `tls.crt` and `tls.key` are symlinks through a
//! `..data` symlink that is swapped atomically. A new pair that does not load (bad PEM, key
//! not matching the certificate, half-written files) keeps the previous one in service and is
//! tried again on the next poll.

use std::{
    fmt, fs,
    path::{Path, PathBuf},
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, AtomicI64, Ordering},
    },
    time::Duration,
};

use rustls::{
    DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme,
    client::danger::HandshakeSignatureValid,
    crypto::CryptoProvider,
    pki_types::{CertificateDer, PrivateKeyDer, UnixTime, pem::PemObject},
    server::{
        ClientHello, ResolvesServerCert, WebPkiClientVerifier,
        danger::{ClientCertVerified, ClientCertVerifier},
    },
    sign::CertifiedKey,
};
use sha2::{Digest, Sha256};

use crate::metrics::{CertificateLabels, Metrics, OutcomeLabels};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: no PEM certificate found")]
    NoCertificate { path: PathBuf },
    #[error("{path}: no usable PEM private key found")]
    NoKey { path: PathBuf },
    #[error("certificate and key do not form a usable pair: {0}")]
    Pair(rustls::Error),
}

/// Where the serving certificate lives.
#[derive(Clone, Debug)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The current certificate, swapped in place on reload; also a rustls cert resolver. Its
/// pair comes from files (re-read when they change) or is installed by copyrator's own
/// certificate manager (`crate::certs::manager`); until there is one, handshakes fail.
pub struct ReloadingCert {
    files: Option<CertFiles>,
    current: RwLock<Option<Arc<CertifiedKey>>>,
    /// Fingerprint of the pair currently loaded (or last rejected).
    fingerprint: RwLock<[u8; 32]>,
    /// False while the newest pair offered does not form a usable pair, or before any.
    usable: AtomicBool,
    /// `notAfter` of the certificate in service (Unix seconds), 0 before any.
    not_after: AtomicI64,
    provider: Arc<CryptoProvider>,
}

impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("files", &self.files)
            .finish()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn fingerprint(cert: &[u8], key: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(cert);
    h.update([0u8]);
    h.update(key);
    h.finalize().into()
}

/// Parses a certificate chain and key into a checked pair; `cert_origin` and `key_origin` name
/// where they came from in errors.
fn parse(
    cert_origin: &Path,
    key_origin: &Path,
    cert_pem: &[u8],
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert_origin.to_path_buf(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| TlsError::NoKey {
        path: key_origin.to_path_buf(),
    })?;
    CertifiedKey::from_der(chain, key, provider).map_err(TlsError::Pair)
}

impl ReloadingCert {
    /// Loads the pair; fails if it is not usable (there is nothing to fall back to yet).
    pub fn load(files: CertFiles) -> Result<Arc<Self>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cert_pem = read(&files.cert)?;
        let key_pem = read(&files.key)?;
        let key = parse(&files.cert, &files.key, &cert_pem, &key_pem, &provider)?;
        let loaded = Self::empty(Some(files), provider);
        loaded.swap(key, fingerprint(&cert_pem, &key_pem));
        Ok(Arc::new(loaded))
    }

    /// No pair yet: one is [`install`](Self::install)ed later (copyrator's own certificates).
    pub fn pending() -> Arc<Self> {
        Arc::new(Self::empty(
            None,
            Arc::new(rustls::crypto::ring::default_provider()),
        ))
    }

    fn empty(files: Option<CertFiles>, provider: Arc<CryptoProvider>) -> Self {
        Self {
            files,
            current: RwLock::new(None),
            fingerprint: RwLock::new([0; 32]),
            usable: AtomicBool::new(false),
            not_after: AtomicI64::new(0),
            provider,
        }
    }

    fn swap(&self, key: CertifiedKey, fp: [u8; 32]) {
        let not_after = key
            .cert
            .first()
            .and_then(|der| crate::certs::inspect::CertFacts::from_der(der))
            .map_or(0, |c| c.not_after.unix_timestamp());
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(key));
        *self.fingerprint.write().unwrap_or_else(|e| e.into_inner()) = fp;
        self.not_after.store(not_after, Ordering::Relaxed);
        self.usable.store(true, Ordering::Relaxed);
    }

    /// Whether the newest pair offered is usable and in service.
    pub fn is_usable(&self) -> bool {
        self.usable.load(Ordering::Relaxed)
    }

    /// `notAfter` of the certificate in service, as Unix seconds (0 before any).
    pub fn not_after(&self) -> i64 {
        self.not_after.load(Ordering::Relaxed)
    }

    /// Puts a pair given as PEM into service unless it is the one in service already;
    /// `origin` names where it came from in errors. A pair that does not load leaves the
    /// previous one in service. `Ok(true)`: a new pair is in service.
    pub fn install(&self, cert_pem: &[u8], key_pem: &[u8], origin: &str) -> Result<bool, TlsError> {
        let fp = fingerprint(cert_pem, key_pem);
        if *self.fingerprint.read().unwrap_or_else(|e| e.into_inner()) == fp {
            return Ok(false);
        }
        let origin = Path::new(origin);
        match parse(origin, origin, cert_pem, key_pem, &self.provider) {
            Ok(key) => {
                self.swap(key, fp);
                Ok(true)
            }
            Err(e) => {
                *self.fingerprint.write().unwrap_or_else(|e| e.into_inner()) = fp;
                Err(e)
            }
        }
    }

    /// Re-reads the files (if the pair comes from files); swaps in a changed, usable pair.
    /// `Ok(true)`: a new pair is in service; `Ok(false)`: nothing changed.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let Some(files) = &self.files else {
            return Ok(false);
        };
        let result = (|| {
            let cert_pem = read(&files.cert)?;
            let key_pem = read(&files.key)?;
            let fp = fingerprint(&cert_pem, &key_pem);
            if *self.fingerprint.read().unwrap_or_else(|e| e.into_inner()) == fp {
                return Ok(None);
            }
            let parsed = parse(&files.cert, &files.key, &cert_pem, &key_pem, &self.provider);
            Ok(Some((fp, parsed)))
        })();
        match result {
            Ok(None) => Ok(false),
            Ok(Some((fp, Ok(key)))) => {
                self.swap(key, fp);
                Ok(true)
            }
            Ok(Some((_, Err(e)))) | Err(e) => {
                self.usable.store(false, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Polls the files (and the client CA's) every `interval` for the life of the process.
    pub async fn watch(
        self: Arc<Self>,
        client_ca: Option<Arc<ClientCa>>,
        interval: Duration,
        metrics: Arc<Metrics>,
    ) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        let mut ca_failing = false;
        loop {
            tick.tick().await;
            let not_after = self.not_after();
            if not_after > 0 {
                metrics
                    .certificate_expiry
                    .get_or_create(&CertificateLabels {
                        certificate: "serving",
                    })
                    .set(not_after);
            }
            if let Some(ca) = &client_ca {
                match ca.reload() {
                    Ok(true) => {
                        ca_failing = false;
                        tracing::info!(path = %ca.path.display(), "client CA reloaded");
                    }
                    Ok(false) => ca_failing = false,
                    Err(e) => {
                        if !ca_failing {
                            tracing::error!(error = %e, "new client CA not usable; keeping the previous one");
                        }
                        ca_failing = true;
                    }
                }
            }
            match self.reload() {
                Ok(true) => {
                    failing = false;
                    metrics
                        .tls_reloads
                        .get_or_create(&OutcomeLabels { outcome: "success" })
                        .inc();
                    tracing::info!(files = ?self.files, "serving certificate reloaded");
                }
                Ok(false) => failing = false,
                Err(e) => {
                    if !failing {
                        // Count and log each bad rotation once, not every poll.
                        metrics
                            .tls_reloads
                            .get_or_create(&OutcomeLabels { outcome: "failure" })
                            .inc();
                        tracing::error!(error = %e, "new serving certificate not usable; keeping the previous one");
                    }
                    failing = true;
                }
            }
        }
    }

    /// A rustls server configuration that always serves the current pair (HTTP/1.1 and h2),
    /// and, with `client_ca`, accepts only clients presenting a certificate it signed.
    pub fn server_config(self: &Arc<Self>, client_ca: Option<Arc<ClientCa>>) -> Arc<ServerConfig> {
        let builder = ServerConfig::builder_with_provider(Arc::clone(&self.provider))
            .with_safe_default_protocol_versions()
            .expect("the ring provider supports the default protocol versions");
        let builder = match client_ca {
            Some(ca) => builder.with_client_cert_verifier(ca as Arc<dyn ClientCertVerifier>),
            None => builder.with_no_client_auth(),
        };
        let mut config =
            builder.with_cert_resolver(Arc::clone(self) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

/// The CA bundle whose certificates clients must present (`--client-ca`): the API server's
/// webhook client credentials (its `--admission-control-config-file`), so that only the API
/// server can post reviews. Re-read when the file changes; a bad new bundle keeps the old one.
pub struct ClientCa {
    path: PathBuf,
    provider: Arc<CryptoProvider>,
    current: RwLock<Arc<dyn ClientCertVerifier>>,
    fingerprint: RwLock<[u8; 32]>,
}

impl fmt::Debug for ClientCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCa")
            .field("path", &self.path)
            .finish()
    }
}

impl ClientCa {
    pub fn load(path: PathBuf) -> Result<Arc<Self>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let pem = read(&path)?;
        let verifier = Self::verifier(&path, &pem, &provider)?;
        Ok(Arc::new(Self {
            fingerprint: RwLock::new(fingerprint(&pem, b"")),
            current: RwLock::new(verifier),
            path,
            provider,
        }))
    }

    fn verifier(
        path: &Path,
        pem: &[u8],
        provider: &Arc<CryptoProvider>,
    ) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem).filter_map(Result::ok) {
            roots.add(cert).map_err(TlsError::Pair)?;
        }
        if roots.is_empty() {
            return Err(TlsError::NoCertificate {
                path: path.to_path_buf(),
            });
        }
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(provider))
            .build()
            .map_err(|e| TlsError::Pair(rustls::Error::General(e.to_string())))
    }

    /// `Ok(true)`: a changed bundle is in use.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let pem = read(&self.path)?;
        let fp = fingerprint(&pem, b"");
        if *self.fingerprint.read().unwrap_or_else(|e| e.into_inner()) == fp {
            return Ok(false);
        }
        let verifier = Self::verifier(&self.path, &pem, &self.provider);
        *self.fingerprint.write().unwrap_or_else(|e| e.into_inner()) = fp;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = verifier?;
        Ok(true)
    }

    fn current(&self) -> Arc<dyn ClientCertVerifier> {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }
}

impl ClientCertVerifier for ClientCa {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        // The hints would have to outlive a reload; clients send their certificate without.
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.current()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.current().supported_verify_schemes()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certs::{CertRequest, generate};
    use std::os::unix::fs::symlink;

    /// Lays out a directory like a Kubernetes Secret volume: `tls.crt -> ..data/tls.crt`,
    /// `..data -> ..<version>`.
    fn secret_volume(dir: &Path, version: &str, cert: &str, key: &str) {
        let v = dir.join(format!("..{version}"));
        fs::create_dir_all(&v).unwrap();
        fs::write(v.join("tls.crt"), cert).unwrap();
        fs::write(v.join("tls.key"), key).unwrap();
        let tmp = dir.join("..data_tmp");
        let _ = fs::remove_file(&tmp);
        symlink(format!("..{version}"), &tmp).unwrap();
        fs::rename(&tmp, dir.join("..data")).unwrap();
        for f in ["tls.crt", "tls.key"] {
            if fs::symlink_metadata(dir.join(f)).is_err() {
                symlink(format!("..data/{f}"), dir.join(f)).unwrap();
            }
        }
    }

    fn files(dir: &Path) -> CertFiles {
        CertFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        }
    }

    fn serial(c: &ReloadingCert) -> Vec<u8> {
        c.current.read().unwrap().as_ref().unwrap().cert[0].to_vec()
    }

    #[test]
    fn reloads_on_secret_volume_symlink_swap() {
        let dir = tempfile::tempdir().unwrap();
        let a = generate(&CertRequest::default()).unwrap();
        secret_volume(dir.path(), "v1", &a.cert_pem, &a.key_pem);
        let cert = ReloadingCert::load(files(dir.path())).unwrap();
        let first = serial(&cert);
        assert!(!cert.reload().unwrap(), "unchanged files are not reloaded");

        let b = generate(&CertRequest::default()).unwrap();
        secret_volume(dir.path(), "v2", &b.cert_pem, &b.key_pem);
        assert!(cert.reload().unwrap());
        assert_ne!(serial(&cert), first);
        assert!(cert.is_usable());
    }

    #[test]
    fn bad_new_pair_keeps_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let a = generate(&CertRequest::default()).unwrap();
        secret_volume(dir.path(), "v1", &a.cert_pem, &a.key_pem);
        let cert = ReloadingCert::load(files(dir.path())).unwrap();
        let first = serial(&cert);

        // Certificate of one pair with the key of another.
        let b = generate(&CertRequest::default()).unwrap();
        secret_volume(dir.path(), "v2", &b.cert_pem, &a.key_pem);
        assert!(matches!(cert.reload(), Err(TlsError::Pair(_))));
        assert_eq!(serial(&cert), first);
        assert!(!cert.is_usable());

        // Garbage.
        secret_volume(dir.path(), "v3", "not a cert", "not a key");
        assert!(cert.reload().is_err());
        assert_eq!(serial(&cert), first);

        // A good rotation recovers.
        secret_volume(dir.path(), "v4", &b.cert_pem, &b.key_pem);
        assert!(cert.reload().unwrap());
        assert!(cert.is_usable());
        assert_ne!(serial(&cert), first);
    }

    #[test]
    fn missing_files_fail_the_initial_load() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            ReloadingCert::load(files(dir.path())),
            Err(TlsError::Read { .. })
        ));
    }
}
