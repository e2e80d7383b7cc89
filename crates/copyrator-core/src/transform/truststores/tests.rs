//! Truststore formats (SPEC §3.2): stable bytes, read back by another PKCS#12 implementation,
//! JKS as Java lays it out, and the rule's `spec.target.formats` checked at parse time.

use sha1::Sha1;

use super::*;
use crate::{
    copyrule::{CopyRule, CopyRuleSpec, KeySpec, TargetSpec},
    model::Payload,
    rules::Rule,
    transform::Transform,
};

/// A self-signed CA certificate named `cn`, PEM, made now.
fn ca(cn: &str) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.self_signed(&key).unwrap().pem()
}

fn der_of(pem: &str) -> Vec<u8> {
    Pem::iter_from_buffer(pem.as_bytes())
        .next()
        .unwrap()
        .unwrap()
        .contents
}

fn both(from: &str) -> Formats {
    Formats {
        from: from.into(),
        pkcs12: Some(Store {
            key: "truststore.p12".into(),
            password: Password(PKCS12_DEFAULT_PASSWORD.into()),
            password_from: None,
        }),
        jks: Some(Store {
            key: "truststore.jks".into(),
            password: Password(JKS_DEFAULT_PASSWORD.into()),
            password_from: None,
        }),
    }
}

/// The stores `formats` makes of `pem` for a ConfigMap: (PKCS#12, JKS) bytes.
fn stores(formats: &Formats, pem: &str) -> (Vec<u8>, Vec<u8>) {
    let mut data = BTreeMap::from([(formats.from.clone(), pem.to_string())]);
    let mut binary = BTreeMap::new();
    formats
        .add_to(Kind::ConfigMap, &mut data, &mut binary)
        .unwrap();
    assert_eq!(data.len(), 1, "the PEM key is left as it is");
    let get = |k: &str| STANDARD.decode(&binary[k]).unwrap();
    (get("truststore.p12"), get("truststore.jks"))
}

#[test]
fn the_same_certificates_make_the_same_bytes() {
    let (a, b) = (ca("Platform Root CA"), ca("Second CA"));
    let pem = format!("{a}{b}");
    let first = stores(&both("ca.crt"), &pem);
    let second = stores(&both("ca.crt"), &pem);
    assert_eq!(first, second);
    // The order and repetitions of the certificates in the PEM do not matter: a store is a
    // set of certificates, in the order of their aliases.
    let shuffled = stores(&both("ca.crt"), &format!("{b}\n{a}\n{b}"));
    assert_eq!(first, shuffled);
    // Another certificate, or another password, makes other bytes.
    assert_ne!(stores(&both("ca.crt"), &a), first);
    let mut other = both("ca.crt");
    other.jks.as_mut().unwrap().password = Password("another".into());
    other.pkcs12.as_mut().unwrap().password = Password("another".into());
    let (p12, jks) = stores(&other, &pem);
    assert_ne!(p12, first.0);
    assert_ne!(jks, first.1);
}

#[test]
fn the_pkcs12_store_reads_back_as_trusted_certificates_by_their_aliases() {
    let (a, b) = (ca("Platform Root CA"), ca("Second CA"));
    let (p12, _) = stores(&both("ca.crt"), &format!("{a}{b}"));
    let store =
        p12_keystore::KeyStore::from_pkcs12(&p12, PKCS12_DEFAULT_PASSWORD).expect("parses back");
    let entries: Vec<(String, Vec<u8>)> = store
        .entries()
        .map(|(alias, entry)| match entry {
            p12_keystore::KeyStoreEntry::Certificate(c) => (alias.clone(), c.as_der().to_vec()),
            other => panic!("{alias}: not a trusted certificate: {other:?}"),
        })
        .collect();
    assert_eq!(entries.len(), 2, "{entries:?}");
    for (pem, prefix) in [(&a, "platform-root-ca-"), (&b, "second-ca-")] {
        let der = der_of(pem);
        let (alias, _) = entries
            .iter()
            .find(|(_, d)| *d == der)
            .expect("each certificate is in the store");
        let hex = alias
            .strip_prefix(prefix)
            .unwrap_or_else(|| panic!("{alias}"));
        assert_eq!(hex.len(), 16, "{alias}");
    }
    // The MAC is checked: another password does not open it.
    assert!(p12_keystore::KeyStore::from_pkcs12(&p12, "changeit").is_err());
}

#[test]
fn the_jks_store_is_laid_out_as_java_writes_it() {
    let a = ca("Platform Root CA");
    let (_, jks) = stores(&both("ca.crt"), &a);
    let u32_at = |i: usize| u32::from_be_bytes(jks[i..i + 4].try_into().unwrap());
    assert_eq!(u32_at(0), 0xFEED_FEED);
    assert_eq!(u32_at(4), 2, "version");
    assert_eq!(u32_at(8), 1, "one entry");
    assert_eq!(u32_at(12), 2, "a trusted certificate entry");
    let alias_len = u16::from_be_bytes([jks[16], jks[17]]) as usize;
    let alias = std::str::from_utf8(&jks[18..18 + alias_len]).unwrap();
    assert!(alias.starts_with("platform-root-ca-"), "{alias}");
    let body = jks.len() - 20;
    // SHA-1 over the password (UTF-16BE), "Mighty Aphrodite" and the body.
    let mut digest = Sha1::new();
    for unit in JKS_DEFAULT_PASSWORD.encode_utf16() {
        digest.update(unit.to_be_bytes());
    }
    digest.update(b"Mighty Aphrodite");
    digest.update(&jks[..body]);
    assert_eq!(&jks[body..], digest.finalize().as_slice());
    let der = der_of(&a);
    assert_eq!(&jks[body - der.len()..body], der.as_slice());
}

fn tls_secret() -> (Payload, String) {
    let a = ca("Platform Root CA");
    let payload = Payload {
        type_: Some("kubernetes.io/tls".into()),
        data: Some(BTreeMap::from([
            ("ca.crt".to_string(), STANDARD.encode(&a)),
            ("tls.key".to_string(), STANDARD.encode("not a certificate")),
        ])),
        ..Default::default()
    };
    (payload, a)
}

fn transform(kind: Option<Kind>, from: &str) -> Transform {
    Transform {
        keys: Some(vec![KeyMapping {
            from: from.into(),
            to: from.into(),
        }]),
        kind,
        type_: kind.is_none().then(|| "Opaque".to_string()),
        formats: Some(both(from)),
    }
}

#[test]
fn the_stores_land_beside_the_pem_key_in_binary_data_or_secret_data() {
    let (secret, a) = tls_secret();
    let shaped = transform(Some(Kind::ConfigMap), "ca.crt")
        .apply(Kind::Secret, &secret)
        .unwrap()
        .payload;
    assert_eq!(
        shaped.data,
        Some(BTreeMap::from([("ca.crt".into(), a.clone())]))
    );
    let binary = shaped.binary_data.unwrap();
    assert_eq!(
        binary.keys().collect::<Vec<_>>(),
        ["truststore.jks", "truststore.p12"]
    );
    let as_secret = transform(None, "ca.crt")
        .apply(Kind::Secret, &secret)
        .unwrap()
        .payload;
    let data = as_secret.data.unwrap();
    assert_eq!(
        data.keys().collect::<Vec<_>>(),
        ["ca.crt", "truststore.jks", "truststore.p12"]
    );
    assert_eq!(data["truststore.p12"], binary["truststore.p12"]);
    assert_eq!(as_secret.binary_data, None);
}

#[test]
fn a_key_that_is_not_certificates_makes_no_store_and_a_missing_one_none_at_all() {
    let (secret, _) = tls_secret();
    let refused = transform(None, "tls.key")
        .apply(Kind::Secret, &secret)
        .unwrap_err();
    assert_eq!(
        refused,
        Refused::NotTruststore {
            key: "tls.key".into(),
            why: NotCertificates::OutsideBlocks
        }
    );
    assert!(refused.to_string().starts_with("key tls.key holds text"));
    let shaped = transform(None, "gone")
        .apply(Kind::Secret, &secret)
        .unwrap();
    assert_eq!(shaped.missing, ["gone"]);
    assert_eq!(shaped.payload.data, None);
}

fn spec(keys: &[&str], formats: FormatsSpec) -> CopyRuleSpec {
    CopyRuleSpec {
        kind: "Secret".into(),
        source_namespace: "platform".into(),
        source_name: Some("ca".into()),
        namespaces: vec!["team-a".into()],
        keys: (!keys.is_empty())
            .then(|| keys.iter().map(|k| KeySpec::Name(k.to_string())).collect()),
        target: Some(TargetSpec {
            kind: Some("ConfigMap".into()),
            formats: Some(formats),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn store(key: &str) -> Option<TruststoreSpec> {
    Some(TruststoreSpec {
        key: key.into(),
        password: None,
        ..Default::default()
    })
}

#[test]
fn a_copy_rule_asks_for_formats_with_trust_managers_default_passwords() {
    let rule = Rule::from_copy_rule(&CopyRule::new(
        "r",
        spec(
            &["ca.crt"],
            FormatsSpec {
                from: None,
                pkcs12: store("truststore.p12"),
                jks: store("truststore.jks"),
            },
        ),
    ))
    .unwrap();
    let formats = rule.transform.formats.unwrap();
    assert_eq!(formats.from, "ca.crt");
    assert_eq!(formats.pkcs12.unwrap().password.0, "");
    assert_eq!(formats.jks.unwrap().password.0, "changeit");
    // As YAML writes it.
    let json = serde_json::json!({"kind": "Secret", "sourceNamespace": "p", "sourceName": "ca",
        "namespaces": ["a"], "keys": ["ca.crt", "tls.crt"],
        "target": {"kind": "ConfigMap", "formats": {"from": "ca.crt",
            "jks": {"key": "truststore.jks", "password": "s3cret"}}}});
    let parsed: CopyRuleSpec = serde_json::from_value(json).unwrap();
    let rule = Rule::from_copy_rule(&CopyRule::new("r", parsed)).unwrap();
    let formats = rule.transform.formats.unwrap();
    assert_eq!(formats.from, "ca.crt");
    assert!(formats.pkcs12.is_none());
    assert_eq!(formats.jks.as_ref().unwrap().password.0, "s3cret");
    assert!(
        !format!("{formats:?}").contains("s3cret"),
        "passwords stay out of Debug"
    );
}

#[test]
fn bad_formats_are_denied_naming_the_field() {
    let ok = || FormatsSpec {
        from: None,
        pkcs12: store("truststore.p12"),
        jks: None,
    };
    let mut cases: Vec<(&[&str], FormatsSpec, &str)> = vec![
        (&[], ok(), "spec.target.formats"),
        (
            &["ca.crt"],
            FormatsSpec {
                pkcs12: None,
                ..ok()
            },
            "spec.target.formats",
        ),
        (&["ca.crt", "tls.crt"], ok(), "spec.target.formats.from"),
        (
            &["ca.crt", "tls.crt"],
            FormatsSpec {
                from: Some("other".into()),
                ..ok()
            },
            "spec.target.formats.from",
        ),
        (
            &["ca.crt"],
            FormatsSpec {
                pkcs12: store("ca.crt"),
                ..ok()
            },
            "spec.target.formats.pkcs12.key",
        ),
        (
            &["ca.crt"],
            FormatsSpec {
                pkcs12: store("a/b"),
                ..ok()
            },
            "spec.target.formats.pkcs12.key",
        ),
        (
            &["ca.crt"],
            FormatsSpec {
                jks: store("truststore.p12"),
                ..ok()
            },
            "spec.target.formats.jks.key",
        ),
        (
            &["ca.crt"],
            FormatsSpec {
                jks: Some(TruststoreSpec {
                    key: "truststore.jks".into(),
                    password: Some("\u{1F512}".into()),
                    ..Default::default()
                }),
                ..ok()
            },
            "spec.target.formats.jks.password",
        ),
    ];
    // A password and the Secret holding one: which is meant is not known.
    cases.push((
        &["ca.crt"],
        FormatsSpec {
            jks: Some(TruststoreSpec {
                key: "truststore.jks".into(),
                password: Some("changeit".into()),
                password_secret_ref: Some(password_secret("platform")),
            }),
            ..ok()
        },
        "spec.target.formats.jks.passwordSecretRef",
    ));
    for (keys, formats, field) in cases {
        let s = spec(keys, formats);
        let e = Rule::from_copy_rule(&CopyRule::new("r", s.clone())).unwrap_err();
        assert_eq!(e.field, field, "{s:?}: {e}");
    }
}

fn password_secret(namespace: &str) -> crate::copyrule::PasswordSecretRef {
    crate::copyrule::PasswordSecretRef {
        namespace: namespace.into(),
        name: "pw".into(),
        key: "jks".into(),
    }
}

#[test]
fn a_single_source_rule_takes_a_stores_password_from_a_secret_and_follows_it() {
    let rule = Rule::from_copy_rule(&CopyRule::new(
        "r",
        spec(
            &["ca.crt"],
            FormatsSpec {
                from: None,
                pkcs12: store("truststore.p12"),
                jks: Some(TruststoreSpec {
                    key: "truststore.jks".into(),
                    password: None,
                    password_secret_ref: Some(password_secret("platform")),
                }),
            },
        ),
    ))
    .unwrap();
    let refs: Vec<_> = rule.password_refs().map(|r| r.to_string()).collect();
    assert_eq!(refs, ["Secret platform/pw key jks"]);
    let secret = |name: &str| crate::model::ObjectKey::new(Kind::Secret, "platform", name);
    assert!(rule.follows(&secret("pw")), "its changes wake the rule");
    assert!(!rule.follows(&secret("other")));
    let config_map = crate::model::ObjectKey::new(Kind::ConfigMap, "platform", "pw");
    assert!(
        !rule.follows(&config_map),
        "a password is only read from a Secret"
    );
}

#[test]
fn a_password_is_taken_only_as_read_and_only_from_a_trusted_namespace() {
    use crate::tenancy::{NamespacePatterns, TrustPolicy};
    let formats = |ns: &str| Formats {
        jks: Some(Store {
            password_from: Some(PasswordRef {
                namespace: ns.into(),
                name: "pw".into(),
                key: "jks".into(),
            }),
            ..both("ca.crt").jks.unwrap()
        }),
        ..both("ca.crt")
    };
    let trust = TrustPolicy {
        trusted_namespaces: NamespacePatterns::parse("platform").unwrap(),
    };
    let read = |ns: &str, got: Result<&str, PasswordMissing>| -> ReadPasswords {
        let key = formats(ns).jks.unwrap().password_from.unwrap();
        [(key, got.map(|p| Password(p.into())))].into()
    };
    let why = |r: Result<Formats, Refused>| match r {
        Err(Refused::NoPassword { why, store, .. }) => {
            assert_eq!(store, "truststore.jks");
            why
        }
        other => panic!("{other:?}"),
    };

    let made = formats("platform")
        .with_passwords(&trust, &read("platform", Ok("s3cret")))
        .unwrap();
    let jks = made.jks.unwrap();
    assert_eq!(jks.password, Password("s3cret".into()));
    assert_eq!(jks.password_from, None, "the formats can now be made");
    assert_eq!(
        made.pkcs12.unwrap().password,
        Password(PKCS12_DEFAULT_PASSWORD.into()),
        "the other store keeps its own"
    );
    // Not read, not there, untrusted (even had it been read): no store under another password.
    assert_eq!(
        why(formats("platform").with_passwords(&trust, &ReadPasswords::new())),
        PasswordMissing::NotRead
    );
    assert_eq!(
        why(formats("platform")
            .with_passwords(&trust, &read("platform", Err(PasswordMissing::NoKey)))),
        PasswordMissing::NoKey
    );
    assert_eq!(
        why(formats("tenant").with_passwords(&trust, &read("tenant", Ok("s3cret")))),
        PasswordMissing::Untrusted
    );
    // The formats as the rule has them cannot be made at all.
    let mut data = BTreeMap::from([("ca.crt".to_string(), ca("Root"))]);
    let e = formats("platform").add_to(Kind::ConfigMap, &mut data, &mut BTreeMap::new());
    assert!(
        matches!(
            e,
            Err(Refused::NoPassword {
                why: PasswordMissing::NotRead,
                ..
            })
        ),
        "{e:?}"
    );
}

#[test]
fn aliases_are_readable_and_stable() {
    assert_eq!(alias_part("My Root CA (2024)"), "my-root-ca--2024");
    assert_eq!(alias_part("é"), "");
    let a = ca("Platform Root CA");
    let certs = trusted_certificates(a.as_bytes()).unwrap();
    assert_eq!(certs, trusted_certificates(a.as_bytes()).unwrap());
    assert!(certs[0].alias.starts_with("platform-root-ca-"));
    assert!(certs[0].not_before_ms > 0);
}
