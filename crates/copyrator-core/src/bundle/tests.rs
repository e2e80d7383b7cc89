//! The combine function of bundles (SPEC §3.2, Bundles): deduplicated, in a stable order,
//! expired certificates dropped on request, sources that give no certificate left out, and
//! nothing at all when nothing is left.

use super::*;

/// A self-signed CA certificate with the common name `name`, and its key, PEM; valid only in
/// 2000 (long expired) when `expired`.
fn make(name: &str, expired: bool) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    if expired {
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2000, 12, 31);
    }
    (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
}

fn ca(name: &str) -> (String, String) {
    make(name, false)
}

fn expired(name: &str) -> String {
    make(name, true).0
}

fn input(ns: &str, name: &str, value: &str) -> BundleInput {
    BundleInput {
        source: ObjectKey::new(Kind::Secret, ns, name),
        key: "ca.crt".into(),
        read: certificates(value.as_bytes()).map_err(LeftOut::NotCertificates),
    }
}

fn inputs(list: Vec<BundleInput>) -> BundleInputs {
    BundleInputs {
        inputs: list,
        read_at: 1_900_000_000,
    }
}

fn all(b: &BundleInputs) -> Vec<usize> {
    (0..b.inputs.len()).collect()
}

fn count(pem: &str) -> usize {
    pem.matches("-----BEGIN CERTIFICATE-----").count()
}

#[test]
fn certificates_are_deduplicated_and_ordered_whatever_the_sources_order_and_whitespace() {
    let (a, _) = ca("a");
    let (b, _) = ca("b");
    let (c, _) = ca("c");
    let one = inputs(vec![
        input("x", "s1", &format!("{a}{b}")),
        input("y", "s2", &format!("\n{b}\n\n{c}")),
    ]);
    let other = inputs(vec![
        input("y", "s2", &format!("{c}{a}").replace('\n', "\r\n")),
        input("x", "s1", &format!("{b}  \n{b}")),
    ]);
    let pem = one.combine(&all(&one), &[], false).unwrap();
    assert_eq!(count(&pem), 3);
    assert_eq!(other.combine(&all(&other), &[], false).unwrap(), pem);
    // Ordered by subject: a, b, c (their subjects differ only in the name).
    let at = |cert: &str| {
        let body = cert.lines().nth(1).unwrap();
        certificates(pem.as_bytes())
            .unwrap()
            .iter()
            .position(|c| {
                let again = STANDARD.encode(&c.der);
                again.starts_with(body)
            })
            .unwrap()
    };
    assert!(at(&a) < at(&b) && at(&b) < at(&c), "{pem}");
    // What comes out is PEM certificates and nothing else: it passes the PEM rule.
    assert_eq!(crate::transform::only_certificates(pem.as_bytes()), Ok(3));
}

#[test]
fn expired_certificates_are_dropped_only_when_asked() {
    let (live, _) = ca("live");
    let old = expired("old");
    let b = inputs(vec![input("x", "s", &format!("{old}{live}"))]);
    assert_eq!(count(&b.combine(&all(&b), &[], false).unwrap()), 2);
    assert_eq!(count(&b.combine(&all(&b), &[], true).unwrap()), 1);
    // Only expired ones: nothing is left, and nothing is written.
    let gone = inputs(vec![input("x", "s", &old)]);
    assert_eq!(gone.combine(&all(&gone), &[], true), None);
}

#[test]
fn sources_that_give_no_certificate_are_left_out_and_reported() {
    let (a, key) = ca("a");
    let missing = BundleInput {
        source: ObjectKey::new(Kind::ConfigMap, "x", "gone"),
        key: "ca.pem".into(),
        read: Err(LeftOut::SourceNotFound),
    };
    let b = inputs(vec![
        input("x", "good", &a),
        input("x", "keyed", &format!("{a}{key}")),
        input("x", "text", "hello"),
        missing,
    ]);
    let pem = b.combine(&all(&b), &[], false).unwrap();
    assert_eq!(count(&pem), 1);
    let left: Vec<(String, LeftOut)> = b
        .left_out()
        .map(|(i, why)| (i.source.name.clone(), why))
        .collect();
    assert_eq!(
        left,
        [
            (
                "keyed".to_string(),
                LeftOut::NotCertificates(NotCertificates::PrivateKey)
            ),
            (
                "text".to_string(),
                LeftOut::NotCertificates(NotCertificates::OutsideBlocks)
            ),
            ("gone".to_string(), LeftOut::SourceNotFound),
        ]
    );
    // The private key is in no output and no reason.
    let body = key.lines().nth(1).unwrap();
    assert!(!pem.contains(body));
    for (_, why) in b.left_out() {
        assert!(!why.to_string().contains(body));
    }
}

#[test]
fn no_certificate_admitted_means_no_bundle() {
    let (a, _) = ca("a");
    let b = inputs(vec![input("tenant", "s", &a), input("x", "bad", "nope")]);
    assert_eq!(b.combine(&[], &[], false), None);
    // Only the source that gives nothing is admitted: still nothing.
    assert_eq!(b.combine(&[1], &[], false), None);
    assert_eq!(b.admitted(|ns| ns == "tenant"), [0]);
}

#[test]
fn a_bundle_payload_is_the_pem_as_text_in_a_config_map_and_base64_in_a_secret() {
    let cm = payload(Kind::ConfigMap, "ca.pem", None, "PEM".into(), None).unwrap();
    assert_eq!(cm.data.unwrap()["ca.pem"], "PEM");
    let secret = payload(Kind::Secret, "ca.pem", None, "PEM".into(), None).unwrap();
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    assert_eq!(secret.data.unwrap()["ca.pem"], STANDARD.encode("PEM"));
}

mod validation {
    use crate::{
        copyrule::{BundleSourceSpec, CopyRule, CopyRuleSpec, TargetSpec},
        rules::Rule,
    };

    fn spec() -> CopyRuleSpec {
        serde_json::from_value(serde_json::json!({
            "kind": "ConfigMap",
            "sources": [
                {"kind": "Secret", "namespace": "cert-manager", "name": "root-ca", "key": "ca.crt"},
                {"kind": "ConfigMap", "namespace": "trust", "selector": {"matchLabels": {"ca": "true"}}, "key": "ca.pem"},
            ],
            "targetName": "ca-bundle",
            "target": {"key": "ca-bundle.pem"},
            "namespaceSelector": {},
        }))
        .unwrap()
    }

    fn field(spec: CopyRuleSpec) -> String {
        Rule::from_copy_rule(&CopyRule::new("trust", spec))
            .unwrap_err()
            .field
    }

    #[test]
    fn a_bundle_rule_is_valid_and_its_copies_are_named_by_the_rule() {
        let rule = Rule::from_copy_rule(&CopyRule::new("trust", spec())).unwrap();
        let bundle = rule.bundle().unwrap();
        assert_eq!(bundle.sources.len(), 2);
        assert_eq!(bundle.key, "ca-bundle.pem");
        assert_eq!(rule.target_kind(), crate::model::Kind::ConfigMap);
        assert_eq!(rule.target_name(&bundle.owner.key.name), "ca-bundle");
        assert!(bundle.owner.key.is_bundle());
        assert_eq!(bundle.owner.key.namespaced_name(), "copyrule/trust");
    }

    #[test]
    fn a_bundle_refuses_the_fields_of_a_one_source_rule_naming_them() {
        type Edit = Box<dyn Fn(&mut CopyRuleSpec)>;
        let cases: Vec<(&str, Edit)> = vec![
            (
                "spec.sourceName",
                Box::new(|s| s.source_name = Some("x".into())),
            ),
            (
                "spec.sourceSelector",
                Box::new(|s| s.source_selector = Some(Default::default())),
            ),
            (
                "spec.sourceNamespace",
                Box::new(|s| s.source_namespace = "platform".into()),
            ),
            (
                "spec.keys",
                Box::new(|s| s.keys = Some(vec![crate::copyrule::KeySpec::Name("a".into())])),
            ),
            ("spec.targetName", Box::new(|s| s.target_name = None)),
            ("spec.target.key", Box::new(|s| s.target = None)),
            (
                "spec.target.kind",
                Box::new(|s| {
                    s.target = Some(TargetSpec {
                        key: Some("a".into()),
                        kind: Some("NetworkPolicy".into()),
                        type_: None,
                        formats: None,
                    })
                }),
            ),
            ("spec.sources", Box::new(|s| s.sources = Some(vec![]))),
            (
                "spec.sources[0].name",
                Box::new(|s| {
                    s.sources.as_mut().unwrap()[0] = BundleSourceSpec {
                        kind: "Secret".into(),
                        namespace: "a".into(),
                        name: None,
                        selector: None,
                        key: "ca.crt".into(),
                        ..Default::default()
                    }
                }),
            ),
            (
                "spec.sources[1].kind",
                Box::new(|s| s.sources.as_mut().unwrap()[1].kind = "Pod".into()),
            ),
            (
                "spec.sources[0].key",
                Box::new(|s| s.sources.as_mut().unwrap()[0].key = "a/b".into()),
            ),
        ];
        for (want, edit) in cases {
            let mut s = spec();
            edit(&mut s);
            assert_eq!(field(s), want);
        }
        // And a one-source rule refuses a bundle's fields.
        let mut one: CopyRuleSpec = serde_json::from_value(serde_json::json!({
            "kind": "Secret", "sourceNamespace": "p", "sourceName": "ca",
            "namespaceSelector": {}, "dropExpired": true,
        }))
        .unwrap();
        assert_eq!(field(one.clone()), "spec.dropExpired");
        one.drop_expired = false;
        one.target = Some(TargetSpec {
            key: Some("a".into()),
            ..Default::default()
        });
        assert_eq!(field(one), "spec.target.key");
    }

    #[test]
    fn a_bundle_makes_its_stores_of_its_one_key() {
        let with = |formats: serde_json::Value| {
            let mut s = spec();
            s.target = Some(
                serde_json::from_value(serde_json::json!({
                    "key": "ca-bundle.pem", "formats": formats,
                }))
                .unwrap(),
            );
            Rule::from_copy_rule(&CopyRule::new("trust", s))
        };
        let stores = serde_json::json!({"pkcs12": {"key": "truststore.p12"},
            "jks": {"key": "truststore.jks", "password": "s3cret"}});
        let rule = with(stores.clone()).unwrap();
        let formats = rule.bundle().unwrap().formats.clone().unwrap();
        assert_eq!(formats.from, "ca-bundle.pem", "from: target.key by default");
        assert_eq!(formats.pkcs12.unwrap().password.0, "");
        assert_eq!(formats.jks.unwrap().password.0, "s3cret");
        let mut named = stores.clone();
        named["from"] = "ca-bundle.pem".into();
        assert!(with(named).is_ok(), "from may name target.key");

        let mut other = stores.clone();
        other["from"] = "ca.crt".into();
        let e = with(other).unwrap_err();
        assert_eq!(e.field, "spec.target.formats.from");
        assert!(e.message.contains("one key"), "{e}");
        let taken = serde_json::json!({"jks": {"key": "ca-bundle.pem"}});
        assert_eq!(
            with(taken).unwrap_err().field,
            "spec.target.formats.jks.key"
        );
        assert_eq!(
            with(serde_json::json!({})).unwrap_err().field,
            "spec.target.formats"
        );

        // A password from a Secret: the ref is kept, to be read per job.
        let from_secret = serde_json::json!({"jks": {"key": "truststore.jks",
            "passwordSecretRef": {"namespace": "platform", "name": "pw", "key": "jks"}}});
        let rule = with(from_secret.clone()).unwrap();
        let refs: Vec<_> = rule.password_refs().map(|r| r.to_string()).collect();
        assert_eq!(refs, ["Secret platform/pw key jks"]);
        let secret = crate::model::ObjectKey::new(crate::model::Kind::Secret, "platform", "pw");
        assert!(rule.follows(&secret), "its changes wake the bundle");
        // Not with password; names that are valid.
        let mut both = from_secret.clone();
        both["jks"]["password"] = "changeit".into();
        let e = with(both).unwrap_err();
        assert_eq!(e.field, "spec.target.formats.jks.passwordSecretRef");
        assert!(e.message.contains("not both"), "{e}");
        for (field, bad) in [
            ("namespace", "Not_A_Namespace"),
            ("name", "a b"),
            ("key", "a/b"),
        ] {
            let mut wrong = from_secret.clone();
            wrong["jks"]["passwordSecretRef"][field] = bad.into();
            assert_eq!(
                with(wrong).unwrap_err().field,
                format!("spec.target.formats.jks.passwordSecretRef.{field}")
            );
        }
    }
}
