//! A Java KeyStore (JKS) truststore: trusted-certificate entries only. JKS is a plain binary
//! format (no ASN.1), written here as Java's `sun.security.provider.JavaKeyStore` writes it,
//! all integers big-endian:
//!
//! ```text
//! magic 0xFEEDFEED (u32) · version 2 (u32) · entry count (u32)
//! each entry: tag 2 = trustedCertEntry (u32) · alias (UTF) · date, ms since the epoch (u64)
//!             · certificate type "X.509" (UTF) · DER length (u32) · DER
//! SHA-1( password as UTF-16BE · "Mighty Aphrodite" · everything above )   (20 bytes)
//! ```
//!
//! where UTF is Java's `DataOutput.writeUTF`: a u16 byte length and modified UTF-8 (aliases
//! here are ASCII, where it is plain UTF-8). A trusted-certificate entry holds nothing secret
//! and nothing random, so the bytes depend only on the entries and the password.

use sha1::{Digest, Sha1};

use super::TrustedCert;

const MAGIC: u32 = 0xFEED_FEED;
const VERSION: u32 = 2;
const TRUSTED_CERT_ENTRY: u32 = 2;
/// The text Java mixes into the integrity digest after the password.
const WHITENER: &[u8] = b"Mighty Aphrodite";

/// Why a store cannot be written: a length the format's fields cannot hold, or an alias
/// that is not ASCII (aliases are made ASCII, so neither happens).
#[derive(Debug, PartialEq, Eq)]
pub struct Unwritable;

/// The JKS truststore of `certs` (in this order) under `password`.
pub fn truststore(certs: &[TrustedCert], password: &str) -> Result<Vec<u8>, Unwritable> {
    let mut out = Vec::new();
    out.extend(MAGIC.to_be_bytes());
    out.extend(VERSION.to_be_bytes());
    out.extend(len32(certs.len())?.to_be_bytes());
    for cert in certs {
        out.extend(TRUSTED_CERT_ENTRY.to_be_bytes());
        write_utf(&mut out, &cert.alias)?;
        out.extend(cert.not_before_ms.to_be_bytes());
        write_utf(&mut out, "X.509")?;
        out.extend(len32(cert.der.len())?.to_be_bytes());
        out.extend(&cert.der);
    }
    let mut digest = Sha1::new();
    for unit in password.encode_utf16() {
        digest.update(unit.to_be_bytes());
    }
    digest.update(WHITENER);
    digest.update(&out);
    out.extend(digest.finalize());
    Ok(out)
}

fn len32(n: usize) -> Result<u32, Unwritable> {
    u32::try_from(n).map_err(|_| Unwritable)
}

/// `DataOutput.writeUTF` of ASCII text (aliases are made ASCII, `truststores::alias_part`).
fn write_utf(out: &mut Vec<u8>, s: &str) -> Result<(), Unwritable> {
    if !s.is_ascii() || s.contains('\0') {
        // Modified UTF-8 differs from UTF-8 for NUL and beyond ASCII; never written here.
        return Err(Unwritable);
    }
    let len = u16::try_from(s.len()).map_err(|_| Unwritable)?;
    out.extend(len.to_be_bytes());
    out.extend(s.as_bytes());
    Ok(())
}
