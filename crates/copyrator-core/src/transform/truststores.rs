//! Truststore formats (SPEC §3.2, `spec.target.formats`): a rule's copies carry, beside the key
//! holding PEM certificates, the same certificates as a PKCS#12 and/or a JKS truststore. The
//! stores are pure functions of the set of certificates and the password, so a resync of an
//! unchanged source makes the same bytes, the same content hash, and writes nothing.

use std::{collections::BTreeMap, fmt};

use base64::{Engine, engine::general_purpose::STANDARD};
use sha2::{Digest, Sha256};
use x509_parser::{parse_x509_certificate, pem::Pem};

use super::{
    KeyMapping, NotCertificates, Refused, TrustedCert, jks, only_certificates, pkcs12_store,
};
use crate::{
    copyrule::{FormatsSpec, RuleError, TruststoreSpec},
    model::Kind,
    tenancy::TrustPolicy,
};

/// The password of a JKS store when none is given (trust-manager's and Java's default).
pub const JKS_DEFAULT_PASSWORD: &str = "changeit";
/// The password of a PKCS#12 store when none is given (trust-manager's default).
pub const PKCS12_DEFAULT_PASSWORD: &str = "";

/// The truststores a rule's copies carry, and of which key's certificates.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Formats {
    /// The copies' key (its name in the copies) holding the PEM certificates.
    pub from: String,
    pub pkcs12: Option<Store>,
    pub jks: Option<Store>,
}

/// One truststore: its key in the copies and its password.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Store {
    pub key: String,
    /// The password, when it is written in the rule (or the default).
    pub password: Password,
    /// Where the password is read from instead (`passwordSecretRef`): until it is read, the
    /// store cannot be made.
    pub password_from: Option<PasswordRef>,
}

/// A key of a Secret in a trusted namespace holding a store's password.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PasswordRef {
    pub namespace: String,
    pub name: String,
    pub key: String,
}

impl fmt::Display for PasswordRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Secret {}/{} key {}",
            self.namespace, self.name, self.key
        )
    }
}

/// Why a store's password could not be read from its Secret. Said in fixed words: nothing of
/// a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PasswordMissing {
    #[error("is not in a trusted namespace (--trusted-namespaces)")]
    Untrusted,
    #[error("does not exist")]
    SecretNotFound,
    #[error("has no such key")]
    NoKey,
    #[error("is no store password (UTF-8, at most 128 characters, none beyond U+FFFF)")]
    Invalid,
    #[error("was not read")]
    NotRead,
}

/// The stores' passwords a job read from Secrets, or why one could not be (never logged: the
/// Debug of a [`Password`] hides it).
pub type ReadPasswords = BTreeMap<PasswordRef, Result<Password, PasswordMissing>>;

/// Whether `password` can be a store's: PKCS#12 passwords are BMPStrings (UTF-16 without
/// surrogates) and JKS's are Java chars, so a character beyond U+FFFF cannot be said the
/// same way in both.
pub fn is_store_password(password: &str) -> bool {
    !password.chars().any(|c| c as u32 > 0xFFFF) && password.chars().count() <= 128
}

/// A store's password. It guards no secret (a truststore holds public certificates) but is
/// kept out of `Debug` output all the same, as anything called a password should be.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Password(pub String);

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(..)")
    }
}

impl Formats {
    /// The formats `spec` asks for, on copies carrying `keys` (spec.keys; the formats need
    /// them to know which key holds the certificates and that no store's key is taken).
    pub fn from_spec(spec: &FormatsSpec, keys: Option<&[KeyMapping]>) -> Result<Self, RuleError> {
        const FIELD: &str = "spec.target.formats";
        let Some(keys) = keys else {
            return Err(RuleError::new(
                FIELD,
                "needs spec.keys: the key holding the certificates and every key of the copies must be known",
            ));
        };
        let from = match (&spec.from, keys) {
            (Some(from), _) if keys.iter().any(|k| &k.to == from) => from.clone(),
            (Some(from), _) => {
                return Err(RuleError::new(
                    "spec.target.formats.from",
                    format!("{from:?} is not a key of the copies (spec.keys names them)"),
                ));
            }
            (None, [only]) => only.to.clone(),
            (None, _) => {
                return Err(RuleError::new(
                    "spec.target.formats.from",
                    "is needed when spec.keys lists several keys: name the copies' key holding the certificates",
                ));
            }
        };
        let copied: Vec<&str> = keys.iter().map(|k| k.to.as_str()).collect();
        Self::with_stores(spec, from, &copied)
    }

    /// The formats `spec` asks for on the copies of a bundle, whose one key is `key`
    /// (`spec.target.key`): the stores are made of it, and `from` may only name it.
    pub fn for_bundle(spec: &FormatsSpec, key: &str) -> Result<Self, RuleError> {
        if let Some(from) = spec.from.as_deref().filter(|from| *from != key) {
            return Err(RuleError::new(
                "spec.target.formats.from",
                format!(
                    "{from:?} is not spec.target.key ({key:?}): a bundle's copies hold one key, the one its stores are made of (leave from out)"
                ),
            ));
        }
        Self::with_stores(spec, key.to_string(), &[key])
    }

    /// The stores of `spec`, made of the copies' key `from`, beside the copies' keys `copied`.
    fn with_stores(spec: &FormatsSpec, from: String, copied: &[&str]) -> Result<Self, RuleError> {
        const FIELD: &str = "spec.target.formats";
        if spec.pkcs12.is_none() && spec.jks.is_none() {
            return Err(RuleError::new(
                FIELD,
                "names no format: set pkcs12, jks or both",
            ));
        }
        let store = |name: &str, spec: &Option<TruststoreSpec>, default: &str| {
            let Some(spec) = spec else {
                return Ok(None);
            };
            let field = format!("{FIELD}.{name}");
            super::check_key(format!("{field}.key"), &spec.key)?;
            if copied.contains(&spec.key.as_str()) {
                return Err(RuleError::new(
                    format!("{field}.key"),
                    format!(
                        "{:?} is already a key of the copies; a truststore needs a key of its own",
                        spec.key
                    ),
                ));
            }
            let password = spec.password.clone().unwrap_or_else(|| default.to_string());
            if !is_store_password(&password) {
                return Err(RuleError::new(
                    format!("{field}.password"),
                    "must be at most 128 characters, none beyond U+FFFF",
                ));
            }
            let password_from = spec
                .password_secret_ref
                .as_ref()
                .map(|r| password_ref(&format!("{field}.passwordSecretRef"), r, spec))
                .transpose()?;
            Ok(Some(Store {
                key: spec.key.clone(),
                password: Password(password),
                password_from,
            }))
        };
        let pkcs12 = store("pkcs12", &spec.pkcs12, PKCS12_DEFAULT_PASSWORD)?;
        let jks = store("jks", &spec.jks, JKS_DEFAULT_PASSWORD)?;
        if let (Some(p), Some(j)) = (&pkcs12, &jks)
            && p.key == j.key
        {
            return Err(RuleError::new(
                "spec.target.formats.jks.key",
                format!("{:?} is also the pkcs12 store's key", j.key),
            ));
        }
        Ok(Formats { from, pkcs12, jks })
    }

    /// The Secrets the stores' passwords are read from.
    pub fn password_refs(&self) -> impl Iterator<Item = &PasswordRef> {
        [&self.pkcs12, &self.jks]
            .into_iter()
            .flatten()
            .filter_map(|s| s.password_from.as_ref())
    }

    /// These formats with every password read from a Secret taken from `read` (what a job
    /// read, [`ReadPasswords`]): the formats [`Formats::add_to`] can make. A password is taken
    /// only from a trusted namespace's Secret, whatever was read (trust can change between the
    /// read and the plan). A password that cannot be had refuses the copy: a store is never
    /// made under another password than the one asked for.
    pub fn with_passwords(
        &self,
        trust: &TrustPolicy,
        read: &ReadPasswords,
    ) -> Result<Formats, Refused> {
        let mut out = self.clone();
        for store in [&mut out.pkcs12, &mut out.jks].into_iter().flatten() {
            if let Some(from) = store.password_from.take() {
                let password = if trust.is_trusted(&from.namespace) {
                    read.get(&from)
                        .cloned()
                        .unwrap_or(Err(PasswordMissing::NotRead))
                } else {
                    Err(PasswordMissing::Untrusted)
                };
                store.password = password.map_err(|why| Refused::NoPassword {
                    store: store.key.clone(),
                    from: Box::new(from.clone()),
                    why,
                })?;
            }
        }
        Ok(out)
    }

    /// The stores' keys in the copies, in words: `truststore.p12 (PKCS#12), truststore.jks
    /// (JKS) of ca.crt`.
    pub fn describe(&self) -> String {
        let stores: Vec<String> = [(&self.pkcs12, "PKCS#12"), (&self.jks, "JKS")]
            .into_iter()
            .filter_map(|(s, name)| s.as_ref().map(|s| format!("{} ({name})", s.key)))
            .collect();
        format!("{} of {}", stores.join(", "), self.from)
    }

    /// Adds the truststores to a shaped payload of `target` kind (`data` and `binary` as
    /// [`super::Transform::apply`] builds them), made of the certificates of its key
    /// [`Formats::from`]. Nothing is added when the copies lack that key (the source lacks
    /// it, which is reported as a missing key); a value that is not PEM certificates and
    /// nothing else is refused.
    pub fn add_to(
        &self,
        target: Kind,
        data: &mut BTreeMap<String, String>,
        binary: &mut BTreeMap<String, String>,
    ) -> Result<(), Refused> {
        let refused = |why| Refused::NotTruststore {
            key: self.from.clone(),
            why,
        };
        // A Secret's data is base64, a ConfigMap's data text and its binaryData base64.
        let secret = target == Kind::Secret;
        let decode = |b64: &String| {
            STANDARD
                .decode(b64)
                .map_err(|_| refused(NotCertificates::NotText))
        };
        let pem = match (data.get(&self.from), binary.get(&self.from)) {
            (Some(b64), _) if secret => decode(b64)?,
            (Some(text), _) => text.as_bytes().to_vec(),
            (None, Some(b64)) => decode(b64)?,
            (None, None) => return Ok(()),
        };
        let certs = trusted_certificates(&pem).map_err(refused)?;
        // Passwords not read yet ([`Formats::with_passwords`]): no store under a wrong one.
        if let Some(store) = [&self.pkcs12, &self.jks]
            .into_iter()
            .flatten()
            .find(|s| s.password_from.is_some())
            && let Some(from) = &store.password_from
        {
            return Err(Refused::NoPassword {
                store: store.key.clone(),
                from: Box::new(from.clone()),
                why: PasswordMissing::NotRead,
            });
        }
        let pkcs12 = self.pkcs12.as_ref().map(|store| {
            let bytes = pkcs12_store::truststore(&certs, &store.password.0).ok();
            (store, bytes)
        });
        let jks = self.jks.as_ref().map(|store| {
            let bytes = jks::truststore(&certs, &store.password.0).ok();
            (store, bytes)
        });
        for (store, bytes) in pkcs12.into_iter().chain(jks) {
            let bytes = bytes.ok_or_else(|| Refused::Unencodable {
                key: store.key.clone(),
            })?;
            let value = STANDARD.encode(bytes);
            if secret {
                data.insert(store.key.clone(), value);
            } else {
                binary.insert(store.key.clone(), value);
            }
        }
        Ok(())
    }
}

/// A store's `passwordSecretRef`, checked: not with `password`, of a valid namespace, name
/// and key.
fn password_ref(
    field: &str,
    r: &crate::copyrule::PasswordSecretRef,
    spec: &TruststoreSpec,
) -> Result<PasswordRef, RuleError> {
    if spec.password.is_some() {
        return Err(RuleError::new(
            field,
            "is not allowed with password: give the password or the Secret holding it, not both",
        ));
    }
    if !crate::selector::is_dns_label(&r.namespace) {
        return Err(RuleError::new(
            format!("{field}.namespace"),
            format!("{:?} is not a valid namespace name", r.namespace),
        ));
    }
    if !crate::selector::is_dns_subdomain(&r.name) {
        return Err(RuleError::new(
            format!("{field}.name"),
            format!("{:?} is not a valid object name", r.name),
        ));
    }
    super::check_key(format!("{field}.key"), &r.key)?;
    Ok(PasswordRef {
        namespace: r.namespace.clone(),
        name: r.name.clone(),
        key: r.key.clone(),
    })
}

/// The certificates of `pem` (PEM certificates and nothing else, as the PEM rule judges it),
/// each once, in the order of their aliases: the stores depend on the set of certificates,
/// not on their order or repetitions in the PEM.
pub fn trusted_certificates(pem: &[u8]) -> Result<Vec<TrustedCert>, NotCertificates> {
    only_certificates(pem)?;
    let mut out: BTreeMap<String, TrustedCert> = BTreeMap::new();
    for block in Pem::iter_from_buffer(pem) {
        let block = block.map_err(|_| NotCertificates::BadCertificate)?;
        let (_, cert) =
            parse_x509_certificate(&block.contents).map_err(|_| NotCertificates::BadCertificate)?;
        let fingerprint = Sha256::digest(&block.contents);
        let hex: String = fingerprint[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let name = cert
            .subject()
            .iter_common_name()
            .next()
            .and_then(|cn| cn.as_str().ok())
            .map(alias_part)
            .unwrap_or_default();
        let alias = if name.is_empty() {
            hex
        } else {
            format!("{name}-{hex}")
        };
        let not_before_ms = cert.validity().not_before.timestamp().saturating_mul(1000);
        out.entry(alias.clone()).or_insert(TrustedCert {
            alias,
            der: block.contents,
            not_before_ms,
        });
    }
    Ok(out.into_values().collect())
}

/// A common name as part of an alias: lower case (JKS lower-cases aliases when it loads a
/// store), letters, digits, `.`, `_` and `-` only, at most 64 characters.
fn alias_part(cn: &str) -> String {
    let mapped: String = cn
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    mapped.trim_matches('-').to_string()
}

#[cfg(test)]
mod tests;
