//! The default CAs copyrator runs with (SPEC §3.2, Bundles): Mozilla's roots from the
//! `webpki-root-certs` package it is built with, or the PEM file its administrator mounted
//! (`serve --default-cas-file`), read once at start. Parsing and judging them is the core's
//! (`bundle::DefaultCas`); this module only chooses and reads.

use std::{path::Path, sync::Arc};

use anyhow::Context as _;

use crate::bundle::DefaultCas;

/// The package of Mozilla's roots copyrator is built with.
pub const PACKAGE: &str = "webpki-root-certs";
/// Its version: the one Cargo.toml pins exactly (a test checks Cargo.lock agrees).
pub const PACKAGE_VERSION: &str = "1.0.11";

/// The default CAs of the package copyrator is built with.
pub fn built_in() -> Arc<DefaultCas> {
    let ders = webpki_root_certs::TLS_SERVER_ROOT_CERTS
        .iter()
        .map(|der| der.as_ref());
    // The package's certificates are Mozilla's, parsed by its own tests: one that did not parse
    // would be a broken build, not an input.
    match DefaultCas::from_package(PACKAGE, PACKAGE_VERSION, ders) {
        Ok(cas) => Arc::new(cas),
        Err(e) => panic!("{e}"),
    }
}

/// The default CAs `serve` runs with: those of `file` when given (PEM certificates and nothing
/// else), else the package's.
pub fn load(file: Option<&Path>) -> anyhow::Result<Arc<DefaultCas>> {
    let Some(path) = file else {
        return Ok(built_in());
    };
    let bytes = std::fs::read(path)
        .with_context(|| format!("reading --default-cas-file {}", path.display()))?;
    Ok(Arc::new(DefaultCas::from_pem_file(
        &path.display().to_string(),
        &bytes,
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_shown_is_the_one_built_with() {
        let lock = include_str!("../Cargo.lock");
        let entry = format!("name = \"{PACKAGE}\"\nversion = \"{PACKAGE_VERSION}\"");
        assert!(
            lock.contains(&entry),
            "Cargo.lock holds another {PACKAGE} than {PACKAGE_VERSION}: update PACKAGE_VERSION"
        );
    }

    #[test]
    fn the_built_in_set_is_mozilla_s_roots() {
        let cas = built_in();
        assert!(cas.certificates.len() > 100, "{}", cas.certificates.len());
        assert_eq!(cas.origin.to_string(), "webpki-root-certs 1.0.11");
    }

    #[test]
    fn a_file_replaces_them_and_a_bad_one_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("cas.pem");
        let pem =
            crate::certs::issue::new_ca(time::OffsetDateTime::now_utc(), time::Duration::days(1))
                .unwrap()
                .cert;
        std::fs::write(&good, &pem).unwrap();
        let cas = load(Some(&good)).unwrap();
        assert_eq!(cas.certificates.len(), 1);
        assert!(cas.origin.to_string().starts_with("file "));

        let bad = dir.path().join("bad.pem");
        std::fs::write(&bad, format!("# comment\n{pem}")).unwrap();
        let err = load(Some(&bad)).unwrap_err().to_string();
        assert!(
            err.contains("bad.pem") && err.contains("outside PEM"),
            "{err}"
        );
        let missing = dir.path().join("missing.pem");
        let err = format!("{:#}", load(Some(&missing)).unwrap_err());
        assert!(err.contains("reading --default-cas-file"), "{err}");
    }
}
