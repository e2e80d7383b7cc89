//! How a rule shapes its copies (SPEC §3.2): which keys of a Secret or ConfigMap they carry and
//! under which names, and whether they are Secrets or ConfigMaps, of which Secret type. Pure:
//! a source's payload in, the copies' payload out, once per source version and rule (every
//! namespace's copy shares the result, `content::CopyTemplate`).

pub mod certificates;
mod jks;
mod pkcs12_store;
pub mod truststores;

use std::collections::BTreeMap;

use base64::{Engine, engine::general_purpose::STANDARD};

pub use certificates::{NotCertificates, only_certificates};
pub use truststores::{Formats, PasswordMissing, PasswordRef, ReadPasswords};

use crate::model::{Kind, Payload};

/// One certificate of a truststore, with what the stores say about it: what `truststores`
/// makes and each store's writer (`jks`, `pkcs12_store`) writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustedCert {
    /// Its name in the stores: the subject's common name, made safe, and the start of its
    /// SHA-256 fingerprint (`my-ca-3f2a9c1d0b7e4a55`), so it is readable, and unique and
    /// stable for the certificate.
    pub alias: String,
    /// The certificate, DER.
    pub der: Vec<u8>,
    /// Its notBefore in milliseconds since the epoch: the JKS entry's date (a date of the
    /// certificate, not of the write, so the bytes do not change with the clock).
    pub not_before_ms: i64,
}

/// One key a rule copies, and its name in the copy.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyMapping {
    pub from: String,
    pub to: String,
}

/// What a rule does to its source's payload. The default changes nothing: the copy is the
/// source's payload as it is (SPEC §3).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Transform {
    /// The keys copied, each under its new name; `None`: every key, as it is named.
    pub keys: Option<Vec<KeyMapping>>,
    /// The copies' kind, when it is not the source's (a Secret's certificates as a ConfigMap).
    pub kind: Option<Kind>,
    /// The copies' Secret type, when it is not the source's.
    pub type_: Option<String>,
    /// Truststores of the copies' certificates beside them (`spec.target.formats`).
    pub formats: Option<Formats>,
}

/// A source's payload as a rule's copies carry it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shaped {
    pub payload: Payload,
    /// Keys the rule asks for that the source does not hold (the copy is made without them).
    pub missing: Vec<String>,
}

/// Why a source's payload cannot become a rule's copies.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// A Secret's value that would land in a ConfigMap is not certificates only: key
    /// material never leaves a Secret (SPEC §3.2).
    #[error(
        "key {key} {why}: a Secret's data is copied into a ConfigMap only when it is PEM certificates and nothing else"
    )]
    NotCertificates { key: String, why: NotCertificates },
    /// The key a rule makes truststores of is not certificates only (SPEC §3.2).
    #[error(
        "key {key} {why}: truststores are made of a key holding PEM certificates and nothing else"
    )]
    NotTruststore { key: String, why: NotCertificates },
    /// A truststore could not be encoded (not seen: its inputs are checked before).
    #[error("the truststore {key} could not be encoded")]
    Unencodable { key: String },
    /// A truststore's password is to be read from a Secret, and cannot be: no store is made
    /// under another password (SPEC §3.2).
    #[error("the password of the truststore {store}: {from} {why}")]
    NoPassword {
        store: String,
        from: Box<truststores::PasswordRef>,
        why: truststores::PasswordMissing,
    },
}

/// One value of a Secret or ConfigMap, as the API carries it.
enum Value<'a> {
    /// ConfigMap `data`: text as it is.
    Text(&'a str),
    /// Secret `data` or ConfigMap `binaryData`: base64.
    Base64(&'a str),
}

impl Transform {
    /// Whether the copies are the source's payload as it is.
    pub fn is_identity(&self) -> bool {
        self.keys.is_none() && self.kind.is_none() && self.type_.is_none() && self.formats.is_none()
    }

    /// The kind of the copies of a `source` kind's object.
    pub fn target_kind(&self, source: Kind) -> Kind {
        self.kind.unwrap_or(source)
    }

    /// The payload of a copy of `payload`, the payload of a `source` kind's object (as
    /// [`Payload::for_kind`] keeps it). Every value that would go from a Secret into a
    /// ConfigMap is checked: certificates only, or nothing is copied.
    pub fn apply(&self, source: Kind, payload: &Payload) -> Result<Shaped, Refused> {
        if self.is_identity() {
            return Ok(Shaped {
                payload: payload.clone(),
                missing: Vec::new(),
            });
        }
        let target = self.target_kind(source);
        let value = |key: &str| -> Option<Value<'_>> {
            if source == Kind::Secret {
                payload.data.as_ref()?.get(key).map(|v| Value::Base64(v))
            } else {
                let text = payload.data.as_ref().and_then(|d| d.get(key));
                let binary = payload.binary_data.as_ref().and_then(|d| d.get(key));
                text.map(|v| Value::Text(v))
                    .or_else(|| binary.map(|v| Value::Base64(v)))
            }
        };
        let all: Vec<KeyMapping>;
        let keys = match &self.keys {
            Some(keys) => keys,
            None => {
                all = payload
                    .data
                    .iter()
                    .chain(payload.binary_data.iter())
                    .flat_map(|m| m.keys())
                    .map(|k| KeyMapping {
                        from: k.clone(),
                        to: k.clone(),
                    })
                    .collect();
                &all
            }
        };
        let mut missing = Vec::new();
        let mut data = BTreeMap::new();
        let mut binary = BTreeMap::new();
        for KeyMapping { from, to } in keys {
            let Some(value) = value(from) else {
                missing.push(from.clone());
                continue;
            };
            match (target == Kind::Secret, value) {
                (true, Value::Base64(v)) => {
                    data.insert(to.clone(), v.to_string());
                }
                (true, Value::Text(v)) => {
                    data.insert(to.clone(), STANDARD.encode(v));
                }
                (false, Value::Text(v)) => {
                    data.insert(to.clone(), v.to_string());
                }
                (false, Value::Base64(v)) if source == Kind::ConfigMap => {
                    binary.insert(to.clone(), v.to_string());
                }
                // A Secret's value for a ConfigMap: certificates, or nothing at all.
                (false, Value::Base64(v)) => {
                    let refused = |why| Refused::NotCertificates {
                        key: from.clone(),
                        why,
                    };
                    let bytes = STANDARD
                        .decode(v)
                        .map_err(|_| refused(NotCertificates::NotText))?;
                    only_certificates(&bytes).map_err(refused)?;
                    let text =
                        String::from_utf8(bytes).map_err(|_| refused(NotCertificates::NotText))?;
                    data.insert(to.clone(), text);
                }
            }
        }
        if let Some(formats) = &self.formats {
            formats.add_to(target, &mut data, &mut binary)?;
        }
        // The API server drops empty maps: a copy holding `data: {}` would read back without
        // it, and never match its hash.
        let non_empty = |m: BTreeMap<String, String>| (!m.is_empty()).then_some(m);
        let type_ = (target == Kind::Secret).then(|| {
            self.type_.clone().unwrap_or_else(|| {
                let own = payload.type_.clone().filter(|_| source == Kind::Secret);
                own.unwrap_or_else(|| OPAQUE.to_string())
            })
        });
        Ok(Shaped {
            payload: Payload {
                type_,
                data: non_empty(data),
                binary_data: non_empty(binary),
                immutable: payload.immutable,
                fields: BTreeMap::new(),
            },
            missing,
        })
    }

    /// The keys the copies carry, for people (`explain`): `ca.crt, tls.crt as server.pem`, or
    /// `every key`.
    pub fn describe_keys(&self) -> String {
        match &self.keys {
            None => "every key".to_string(),
            Some(keys) => keys
                .iter()
                .map(|k| {
                    if k.from == k.to {
                        k.from.clone()
                    } else {
                        format!("{} as {}", k.from, k.to)
                    }
                })
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// The Secret type of a Secret written without one.
pub const OPAQUE: &str = "Opaque";

/// `key` as a key of the copies: what the API server accepts, else the denial at `field`.
pub(crate) fn check_key(
    field: impl Into<String>,
    key: &str,
) -> Result<(), crate::copyrule::RuleError> {
    if is_valid_key(key) {
        Ok(())
    } else {
        Err(crate::copyrule::RuleError::new(
            field,
            format!(
                "{key:?} is not a valid key (at most 253 characters of letters, digits, '-', '_' and '.')"
            ),
        ))
    }
}

/// Whether `key` is a valid key of a Secret's or ConfigMap's data (what the API server
/// accepts: at most 253 of `-`, `_`, `.` and alphanumerics, neither `.` nor `..`).
pub fn is_valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key != "."
        && key != ".."
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::{certificates::tests::ca, *};

    fn b64(s: &str) -> String {
        STANDARD.encode(s)
    }

    fn map(entries: &[(&str, String)]) -> Option<BTreeMap<String, String>> {
        Some(
            entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    fn keys(list: &[(&str, &str)]) -> Option<Vec<KeyMapping>> {
        Some(
            list.iter()
                .map(|(from, to)| KeyMapping {
                    from: from.to_string(),
                    to: to.to_string(),
                })
                .collect(),
        )
    }

    /// A cert-manager-style TLS Secret: CA, certificate and key.
    fn tls_secret() -> (Payload, String, String) {
        let (ca_pem, _) = ca("ca");
        let (tls_pem, key_pem) = ca("server");
        let payload = Payload {
            type_: Some("kubernetes.io/tls".into()),
            data: map(&[
                ("ca.crt", b64(&ca_pem)),
                ("tls.crt", b64(&tls_pem)),
                ("tls.key", b64(&key_pem)),
            ]),
            ..Default::default()
        };
        (payload, ca_pem, key_pem)
    }

    #[test]
    fn the_identity_changes_nothing() {
        let (p, _, _) = tls_secret();
        let shaped = Transform::default().apply(Kind::Secret, &p).unwrap();
        assert_eq!(shaped.payload, p);
        assert!(shaped.missing.is_empty());
    }

    #[test]
    fn a_tls_secrets_ca_becomes_a_config_map_of_that_certificate_alone() {
        let (p, ca_pem, _) = tls_secret();
        let t = Transform {
            keys: keys(&[("ca.crt", "ca.crt")]),
            kind: Some(Kind::ConfigMap),
            type_: None,
            formats: None,
        };
        let shaped = t.apply(Kind::Secret, &p).unwrap();
        assert_eq!(
            shaped.payload,
            Payload {
                data: map(&[("ca.crt", ca_pem)]),
                ..Default::default()
            }
        );
    }

    #[test]
    fn key_material_never_reaches_a_config_map_and_the_refusal_names_the_key() {
        let (p, _, key_pem) = tls_secret();
        for t in [
            // Every key (tls.key among them), or tls.key by name.
            Transform {
                kind: Some(Kind::ConfigMap),
                ..Default::default()
            },
            Transform {
                keys: keys(&[("ca.crt", "ca.crt"), ("tls.key", "key.pem")]),
                kind: Some(Kind::ConfigMap),
                type_: None,
                formats: None,
            },
        ] {
            let refused = t.apply(Kind::Secret, &p).unwrap_err();
            assert_eq!(
                refused,
                Refused::NotCertificates {
                    key: "tls.key".into(),
                    why: NotCertificates::PrivateKey
                }
            );
            let said = refused.to_string();
            assert!(
                said.starts_with("key tls.key holds a private key"),
                "{said}"
            );
            let body = key_pem.lines().nth(1).unwrap();
            assert!(!said.contains(body), "{said}");
        }
        // Not base64, or not certificates: refused too.
        let mut odd = p.clone();
        odd.data
            .as_mut()
            .unwrap()
            .insert("ca.crt".into(), "%%%".into());
        let t = Transform {
            keys: keys(&[("ca.crt", "ca.crt")]),
            kind: Some(Kind::ConfigMap),
            type_: None,
            formats: None,
        };
        assert!(matches!(
            t.apply(Kind::Secret, &odd),
            Err(Refused::NotCertificates { key, why: NotCertificates::NotText }) if key == "ca.crt"
        ));
    }

    #[test]
    fn keys_are_selected_renamed_and_the_missing_ones_reported() {
        let (p, ca_pem, _) = tls_secret();
        let t = Transform {
            keys: keys(&[("ca.crt", "ca.crt"), ("tls.crt", "server.pem"), ("x", "y")]),
            kind: None,
            type_: Some("Opaque".into()),
            formats: None,
        };
        let shaped = t.apply(Kind::Secret, &p).unwrap();
        let data = shaped.payload.data.as_ref().unwrap();
        assert_eq!(data.keys().collect::<Vec<_>>(), ["ca.crt", "server.pem"]);
        assert_eq!(data["ca.crt"], b64(&ca_pem));
        assert_eq!(shaped.payload.type_.as_deref(), Some("Opaque"));
        assert_eq!(shaped.missing, ["x"]);
        // Without a type of its own, the copy keeps the source's.
        let t = Transform {
            keys: keys(&[("ca.crt", "ca.crt")]),
            ..Default::default()
        };
        let shaped = t.apply(Kind::Secret, &p).unwrap();
        assert_eq!(shaped.payload.type_.as_deref(), Some("kubernetes.io/tls"));
        // Nothing left: no empty map that the API server would drop.
        let t = Transform {
            keys: keys(&[("gone", "gone")]),
            ..Default::default()
        };
        let shaped = t.apply(Kind::Secret, &p).unwrap();
        assert_eq!(shaped.payload.data, None);
        assert_eq!(shaped.missing, ["gone"]);
    }

    #[test]
    fn config_maps_become_secrets_and_keep_binary_data_apart() {
        let cm = Payload {
            data: map(&[("app.conf", "a=1".to_string())]),
            binary_data: map(&[("logo.png", b64("\u{1}png"))]),
            immutable: Some(true),
            ..Default::default()
        };
        let to_secret = Transform {
            kind: Some(Kind::Secret),
            ..Default::default()
        };
        let shaped = to_secret.apply(Kind::ConfigMap, &cm).unwrap();
        assert_eq!(
            shaped.payload,
            Payload {
                type_: Some("Opaque".into()),
                data: map(&[("app.conf", b64("a=1")), ("logo.png", b64("\u{1}png"))]),
                immutable: Some(true),
                ..Default::default()
            }
        );
        let renamed = Transform {
            keys: keys(&[("logo.png", "icon.png"), ("app.conf", "app.conf")]),
            ..Default::default()
        };
        let shaped = renamed.apply(Kind::ConfigMap, &cm).unwrap();
        assert_eq!(shaped.payload.data, map(&[("app.conf", "a=1".into())]));
        assert_eq!(
            shaped.payload.binary_data,
            map(&[("icon.png", b64("\u{1}png"))])
        );
    }

    #[test]
    fn key_names_are_checked_as_the_api_server_does() {
        for ok in ["ca.crt", "tls.key", "a_b-c.1", ".dotfile"] {
            assert!(is_valid_key(ok), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "a b", "é", &"x".repeat(254)] {
            assert!(!is_valid_key(bad), "{bad}");
        }
    }
}

#[cfg(test)]
mod rule_tests;
