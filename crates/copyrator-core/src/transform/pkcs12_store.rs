//! A PKCS#12 truststore (RFC 7292) of certificates only, built from the RustCrypto `pkcs12`,
//! `cms` and `der` types (no ASN.1 by hand), and deterministic: the same certificates and
//! password make the same bytes.
//!
//! The layout is what Java and openssl read as a truststore: one unencrypted SafeContents of
//! certificate bags (encrypting public certificates under a published password protects
//! nothing, and encryption is where IVs and salts would make bytes random), each bag with a
//! `friendlyName` (the alias) and Oracle's trusted-key-usage attribute, without which Java
//! loads no trusted entry from a PKCS#12 file; an HMAC-SHA-256 over it all keyed from the
//! password (RFC 7292 appendix B), whose salt is derived from the content instead of drawn.

use der::{
    Decode, Encode,
    asn1::{Any, BmpString, ObjectIdentifier, OctetString, SetOfVec},
};
use hmac::{Hmac, Mac};
use pkcs12::{
    PKCS_12_CERT_BAG_OID, PKCS_12_X509_CERT_OID,
    cert_type::CertBag,
    digest_info::DigestInfo,
    kdf::{Pkcs12KeyType, derive_key_utf8},
    mac_data::MacData,
    pfx::{Pfx, Version},
    safe_bag::SafeBag,
};
use sha2::{Digest, Sha256};
use spki::AlgorithmIdentifierOwned;
use x509_cert::attr::{Attribute, Attributes};

use super::TrustedCert;

/// PKCS#7 `data` content type.
const ID_DATA: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.7.1");
/// SHA-256, the MAC's digest.
const ID_SHA_256: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.16.840.1.101.3.4.2.1");
/// PKCS#9 `friendlyName`: the entry's alias.
const FRIENDLY_NAME: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.20");
/// Oracle's trusted key usage: Java takes a certificate bag for a trusted entry only with it.
const ORACLE_TRUSTED_KEY_USAGE: ObjectIdentifier =
    ObjectIdentifier::new_unwrap("2.16.840.1.113894.746875.1.1");
/// anyExtendedKeyUsage: trusted for every purpose (what keytool and openssl's `-jdktrust` say).
const ANY_EXTENDED_KEY_USAGE: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.37.0");

/// The MAC key's derivation rounds: openssl's default. The MAC guards integrity under a
/// password everyone knows; more rounds would cost every plan of the rule and buy nothing.
const MAC_ITERATIONS: i32 = 2048;

/// The PKCS#12 truststore of `certs` (in this order) under `password`.
pub fn truststore(certs: &[TrustedCert], password: &str) -> der::Result<Vec<u8>> {
    let bags = certs
        .iter()
        .map(cert_bag)
        .collect::<der::Result<Vec<_>>>()?;
    let safe = ContentInfoData::new(bags.to_der()?)?;
    let auth_safe = vec![safe.0].to_der()?;
    let mac_data = mac(&auth_safe, password)?;
    Pfx {
        version: Version::V3,
        auth_safe: ContentInfoData::new(auth_safe)?.0,
        mac_data: Some(mac_data),
    }
    .to_der()
}

/// A CMS ContentInfo of type `data` holding `octets`.
struct ContentInfoData(cms::content_info::ContentInfo);

impl ContentInfoData {
    fn new(octets: Vec<u8>) -> der::Result<Self> {
        Ok(Self(cms::content_info::ContentInfo {
            content_type: ID_DATA,
            content: Any::from_der(&OctetString::new(octets)?.to_der()?)?,
        }))
    }
}

/// A certificate bag for `cert`, with its alias and the trust attribute.
fn cert_bag(cert: &TrustedCert) -> der::Result<SafeBag> {
    let value =
        |v: Vec<u8>| -> der::Result<SetOfVec<Any>> { SetOfVec::try_from(vec![Any::from_der(&v)?]) };
    let mut attributes = Attributes::new();
    attributes.insert(Attribute {
        oid: FRIENDLY_NAME,
        values: value(BmpString::from_utf8(&cert.alias)?.to_der()?)?,
    })?;
    attributes.insert(Attribute {
        oid: ORACLE_TRUSTED_KEY_USAGE,
        values: value(ANY_EXTENDED_KEY_USAGE.to_der()?)?,
    })?;
    let bag = CertBag {
        cert_id: PKCS_12_X509_CERT_OID,
        cert_value: OctetString::new(cert.der.clone())?,
    };
    Ok(SafeBag {
        bag_id: PKCS_12_CERT_BAG_OID,
        bag_value: bag.to_der()?,
        bag_attributes: Some(attributes),
    })
}

/// The MacData of `auth_safe` (the octets the PFX's authSafe holds) under `password`. The
/// salt is a digest of the content: the same store has the same salt, a different one
/// another.
fn mac(auth_safe: &[u8], password: &str) -> der::Result<MacData> {
    let salt = Sha256::new()
        .chain_update(b"copyrator pkcs12 mac salt\0")
        .chain_update(auth_safe)
        .finalize();
    let salt = &salt[..16];
    let key = derive_key_utf8::<Sha256>(password, salt, Pkcs12KeyType::Mac, MAC_ITERATIONS, 32)?;
    let mut hmac = <Hmac<Sha256> as Mac>::new_from_slice(&key)
        .map_err(|_| der::Error::from(der::ErrorKind::Failed))?;
    hmac.update(auth_safe);
    Ok(MacData {
        mac: DigestInfo {
            algorithm: AlgorithmIdentifierOwned {
                oid: ID_SHA_256,
                parameters: Some(Any::null()),
            },
            digest: OctetString::new(hmac.finalize().into_bytes().to_vec())?,
        },
        mac_salt: OctetString::new(salt)?,
        iterations: MAC_ITERATIONS,
    })
}
