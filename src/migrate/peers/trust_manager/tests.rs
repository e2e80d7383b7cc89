//! trust-manager Bundles as their users write them, translated: what becomes a CopyRule bundle,
//! and what is left out and said, with the Bundle it is of.

use serde_json::{Value, json};

use super::*;
use crate::{
    cli::Peer,
    migrate::{
        config::{self, Change},
        render,
    },
    plan::Policy,
    tenancy::{NamespacePatterns, TrustPolicy},
};

mod cluster_bundles;

const TRUST: &str = "cert-manager";

/// A Bundle named `name` with `spec`.
fn bundle(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "trust.cert-manager.io/v1alpha1",
        "kind": "Bundle",
        "metadata": {"name": name},
        "spec": spec,
    })
}

fn translate_one(doc: Value) -> Translation {
    translate(&[doc], TRUST)
}

/// The one CopyRule of a Bundle that gives one, and its notes.
fn only_rule(t: &Translation) -> (&CopyRuleSpec, String, String) {
    assert_eq!(t.rules.len(), 1, "{t:#?}");
    assert!(t.skipped.is_empty(), "{:?}", t.skipped);
    let rule = &t.rules[0];
    (
        &rule.rule.spec,
        rule.rule.metadata.name.clone().unwrap_or_default(),
        rule.notes.join("\n"),
    )
}

fn named(kind: &str, name: &str, key: &str) -> BundleSourceSpec {
    BundleSourceSpec {
        kind: kind.into(),
        namespace: TRUST.into(),
        name: Some(name.into()),
        selector: None,
        key: key.into(),
        ..Default::default()
    }
}

/// A CA certificate, PEM, as an inline source holds one.
fn inline_ca() -> String {
    crate::certs::issue::new_ca(time::OffsetDateTime::now_utc(), time::Duration::days(1))
        .unwrap()
        .cert
}

fn default_cas() -> BundleSourceSpec {
    BundleSourceSpec {
        default_cas: true,
        ..Default::default()
    }
}

fn labels(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        match_expressions: None,
    }
}

#[test]
fn configmap_and_secret_sources_become_bundle_sources_in_the_trust_namespace() {
    let t = translate_one(bundle(
        "ca-bundle",
        json!({
            "sources": [
                {"secret": {"name": "root-ca", "key": "ca.crt"}},
                {"configMap": {"name": "corp-ca", "key": "ca.pem"}},
                {"configMap": {"selector": {"matchLabels": {"trust": "yes"}}, "key": "root.pem"}},
            ],
            "target": {
                "configMap": {"key": "trust-bundle.pem"},
                "namespaceSelector": {"matchLabels": {"trust": "enabled"}},
            },
        }),
    ));
    let (spec, name, notes) = only_rule(&t);
    assert_eq!(name, "trust-manager-ca-bundle-configmap");
    assert_eq!(t.rules[0].source_namespace, TRUST);
    assert_eq!(spec.kind, "ConfigMap");
    assert_eq!(
        spec.sources.as_deref().unwrap(),
        [
            named("Secret", "root-ca", "ca.crt"),
            named("ConfigMap", "corp-ca", "ca.pem"),
            BundleSourceSpec {
                kind: "ConfigMap".into(),
                namespace: TRUST.into(),
                name: None,
                selector: Some(labels(&[("trust", "yes")])),
                key: "root.pem".into(),
                ..Default::default()
            },
        ]
    );
    assert_eq!(
        spec.target_name.as_deref(),
        Some("ca-bundle"),
        "named after the Bundle"
    );
    assert_eq!(
        spec.target.as_ref().and_then(|t| t.key.as_deref()),
        Some("trust-bundle.pem")
    );
    assert_eq!(
        spec.namespace_selector,
        Some(labels(&[("trust", "enabled")]))
    );
    assert!(
        !spec.drop_expired,
        "trust-manager keeps expired certificates"
    );
    assert!(
        notes.contains("from trust-manager Bundle ca-bundle"),
        "{notes}"
    );
    assert!(!notes.contains("left out"), "{notes}");
}

#[test]
fn the_trust_namespace_is_the_one_given() {
    let doc = bundle(
        "b",
        json!({
            "sources": [{"secret": {"name": "root-ca", "key": "ca.crt"}}],
            "target": {"configMap": {"key": "ca.pem"}},
        }),
    );
    let t = translate(&[doc], "trust");
    assert_eq!(t.rules[0].source_namespace, "trust");
    let sources = t.rules[0].rule.spec.sources.as_deref().unwrap();
    assert_eq!(sources[0].namespace, "trust");
}

#[test]
fn no_namespace_selector_is_every_namespace() {
    let t = translate_one(bundle(
        "b",
        json!({
            "sources": [{"secret": {"name": "root-ca", "key": "ca.crt"}}],
            "target": {"configMap": {"key": "ca.pem"}},
        }),
    ));
    let (spec, _, notes) = only_rule(&t);
    assert_eq!(spec.namespace_selector, Some(LabelSelector::default()));
    assert!(
        notes.contains("every namespace, as trust-manager did"),
        "{notes}"
    );
}

#[test]
fn a_secret_target_is_a_secret_bundle() {
    let t = translate_one(bundle(
        "b",
        json!({
            "sources": [{"secret": {"name": "root-ca", "key": "ca.crt"}}],
            "target": {"secret": {"key": "ca.pem"}},
        }),
    ));
    let (spec, name, _) = only_rule(&t);
    assert_eq!(name, "trust-manager-b-secret");
    assert_eq!(spec.kind, "Secret");
    assert_eq!(spec.target.as_ref().unwrap().key.as_deref(), Some("ca.pem"));
}

#[test]
fn both_targets_are_two_copy_rules_and_say_so() {
    let t = translate_one(bundle(
        "b",
        json!({
            "sources": [{"secret": {"name": "root-ca", "key": "ca.crt"}}],
            "target": {"configMap": {"key": "ca.pem"}, "secret": {"key": "bundle.pem"}},
        }),
    ));
    let rules: Vec<(&str, &str, Option<&str>)> = t
        .rules
        .iter()
        .map(|r| {
            (
                r.rule.metadata.name.as_deref().unwrap(),
                r.rule.spec.kind.as_str(),
                r.rule.spec.target.as_ref().and_then(|t| t.key.as_deref()),
            )
        })
        .collect();
    assert_eq!(
        rules,
        [
            ("trust-manager-b-configmap", "ConfigMap", Some("ca.pem")),
            ("trust-manager-b-secret", "Secret", Some("bundle.pem")),
        ]
    );
    for rule in &t.rules {
        let notes = rule.notes.join("\n");
        assert!(
            notes.contains("both a ConfigMap and a Secret b: two CopyRules"),
            "{notes}"
        );
    }
}

#[test]
fn inline_certificates_become_a_configmap_printed_with_the_rule_and_its_source() {
    let (first, second) = (inline_ca(), inline_ca());
    let t = translate_one(bundle(
        "b",
        json!({
            "sources": [
                {"secret": {"name": "root-ca", "key": "ca.crt"}},
                {"inLine": first},
                {"inLine": format!("  {second}\n\n")},
                {"inLine": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"},
            ],
            "target": {"configMap": {"key": "ca.pem"}, "secret": {"key": "ca.crt"}},
        }),
    ));
    assert_eq!(t.rules.len(), 2, "{t:#?}");
    let configmap = &t.rules[0].rule;
    let sources = configmap.spec.sources.as_deref().unwrap();
    assert_eq!(
        sources,
        [
            named("Secret", "root-ca", "ca.crt"),
            named("ConfigMap", "trust-manager-b-inline", "ca.crt"),
        ]
    );
    assert_eq!(
        t.rules[1].rule.spec.sources.as_deref().unwrap(),
        sources,
        "both CopyRules read it"
    );
    // The ConfigMap is printed once, with the first CopyRule.
    assert!(t.rules[1].objects.is_empty());
    let [object] = &t.rules[0].objects[..] else {
        panic!("{:?}", t.rules[0].objects);
    };
    assert_eq!(
        object["metadata"],
        json!({"name": "trust-manager-b-inline", "namespace": TRUST})
    );
    let held = object["data"]["ca.crt"].as_str().unwrap().to_string();
    assert_eq!(
        crate::transform::only_certificates(held.as_bytes()),
        Ok(2),
        "{held}"
    );
    let notes = t.rules[0].notes.join("\n");
    assert!(
        notes.contains("printed as ConfigMap cert-manager/trust-manager-b-inline (key ca.crt)")
            && notes.contains(
                "sources[3].inLine: the value holds a CERTIFICATE block that is not a valid \
                 X.509 certificate"
            ),
        "{notes}"
    );
    assert!(!notes.contains("MIIB"), "no value is repeated: {notes}");

    // Printed, it is applied before the CopyRule, and the manifests carry it.
    let config = configured(t, &policy(TRUST));
    let script = render::kubectl(&config, Peer::TrustManager).unwrap();
    let configmap_at = script.find("kind: ConfigMap").unwrap();
    let rule_at = script.find("kind: CopyRule").unwrap();
    assert!(configmap_at < rule_at, "{script}");
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&render::manifests(&config, Peer::TrustManager).unwrap())
            .unwrap();
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(kinds, ["ConfigMap", "CopyRule", "CopyRule"]);
    assert_eq!(docs[0]["data"]["ca.crt"], held);
}

#[test]
fn use_default_cas_becomes_the_default_cas_source() {
    let t = translate_one(bundle(
        "b",
        json!({
            "sources": [
                {"useDefaultCAs": true},
                {"useDefaultCAs": false},
                {"secret": {"name": "root-ca", "key": "ca.crt"}},
            ],
            "target": {"configMap": {"key": "ca.pem"}},
        }),
    ));
    let (spec, _, notes) = only_rule(&t);
    assert_eq!(
        spec.sources.as_deref().unwrap(),
        [default_cas(), named("Secret", "root-ca", "ca.crt")]
    );
    assert!(
        notes.contains("sources[0].useDefaultCAs: the default CAs are copyrator's")
            && notes.contains("--default-cas-file"),
        "{notes}"
    );
    assert!(
        !notes.contains("sources[1]"),
        "false asks for nothing: {notes}"
    );

    // trust-manager's README Bundle: the default CAs alone make a bundle, valid as printed.
    let t = translate_one(bundle(
        "trust-manager-bundle",
        json!({
            "sources": [{"useDefaultCAs": true}],
            "target": {"configMap": {"key": "bundle.pem"}},
        }),
    ));
    let (spec, name, _) = only_rule(&t);
    assert_eq!(name, "trust-manager-trust-manager-bundle-configmap");
    assert_eq!(spec.sources.as_deref().unwrap(), [default_cas()]);
    assert!(Rule::from_copy_rule(&t.rules[0].rule).is_ok());
}

#[test]
fn include_all_keys_is_said() {
    let t = translate_one(bundle(
        "b",
        json!({
            "sources": [
                {"secret": {"name": "root-ca", "key": "ca.crt"}},
                {"configMap": {"name": "many", "includeAllKeys": true}},
            ],
            "target": {"configMap": {"key": "ca.pem"}},
        }),
    ));
    let (spec, _, notes) = only_rule(&t);
    assert_eq!(spec.sources.as_ref().unwrap().len(), 1);
    assert!(
        notes.contains("sources[1].configMap (ConfigMap many): includeAllKeys"),
        "{notes}"
    );
}

#[test]
fn additional_formats_become_truststores_and_a_pkcs12_profile_is_said() {
    let t = translate_one(bundle(
        "b",
        json!({
            "sources": [{"secret": {"name": "root-ca", "key": "ca.crt"}}],
            "target": {
                "configMap": {"key": "ca.pem"},
                "additionalFormats": {
                    "jks": {"key": "bundle.jks", "password": "s3cret"},
                    "pkcs12": {"key": "bundle.p12", "profile": "Modern2023"},
                },
            },
        }),
    ));
    let (spec, _, notes) = only_rule(&t);
    let formats = spec.target.as_ref().unwrap().formats.as_ref().unwrap();
    assert_eq!(formats.from, None, "the bundle's key");
    let jks = formats.jks.as_ref().unwrap();
    assert_eq!(
        (jks.key.as_str(), jks.password.as_deref()),
        ("bundle.jks", Some("s3cret"))
    );
    let p12 = formats.pkcs12.as_ref().unwrap();
    assert_eq!(
        (p12.key.as_str(), p12.password.as_deref()),
        ("bundle.p12", None)
    );
    assert!(
        notes.contains("target.additionalFormats.pkcs12.profile Modern2023"),
        "{notes}"
    );
}

#[test]
fn a_store_on_the_pem_key_is_left_out_and_said() {
    let t = translate_one(bundle(
        "b",
        json!({
            "sources": [{"secret": {"name": "root-ca", "key": "ca.crt"}}],
            "target": {
                "configMap": {"key": "ca.pem"},
                "additionalFormats": {"jks": {"key": "ca.pem"}},
            },
        }),
    ));
    let (spec, _, notes) = only_rule(&t);
    assert_eq!(spec.target.as_ref().unwrap().formats, None);
    assert!(
        notes.contains("the truststores would make the CopyRule invalid"),
        "{notes}"
    );
}

#[test]
fn target_metadata_and_unknown_fields_are_said() {
    let t = translate_one(bundle(
        "b",
        json!({
            "sources": [{"secret": {"name": "root-ca", "key": "ca.crt", "future": 1}},
                        {"secret": {"name": "other", "key": "ca.crt"}}],
            "target": {
                "configMap": {"key": "ca.pem", "metadata": {"labels": {"app": "x"}}, "extra": 1},
                "additionalFormats": {"jks": {"key": "a.jks", "alias": "x"}, "pem": {}},
                "somethingNew": true,
            },
            "alsoNew": {},
        }),
    ));
    let (spec, _, notes) = only_rule(&t);
    assert_eq!(
        spec.sources.as_deref().unwrap(),
        [named("Secret", "other", "ca.crt")]
    );
    for said in [
        "target.configMap.metadata",
        "target.configMap.extra",
        "target.additionalFormats.pem",
        "target.additionalFormats.jks.alias",
        "target.somethingNew",
        "spec.alsoNew",
        "sources[0].secret.future",
    ] {
        assert!(notes.contains(said), "{said}: {notes}");
    }
}

#[test]
fn a_bundle_copyrator_cannot_read_a_source_of_gives_no_rule_and_the_reasons() {
    let t = translate_one(bundle(
        "b",
        json!({
            "sources": [{"useDefaultCAs": false}, {"inLine": "x"}, {"configMap": {"name": "k"}}],
            "target": {"configMap": {"key": "ca.pem"}},
        }),
    ));
    assert!(t.rules.is_empty(), "{t:#?}");
    assert_eq!(t.skipped.len(), 1);
    let note = &t.skipped[0].note;
    assert!(
        note.starts_with("trust-manager Bundle \"b\": no source copyrator can read")
            && note
                .contains("sources[1].inLine: the value holds text outside PEM certificate blocks")
            && note.contains("sources[2].configMap (ConfigMap k): no key")
            && note.ends_with("not migrated"),
        "{note}"
    );
    assert_eq!(t.skipped[0].source_namespace, TRUST);

    let no_target = translate_one(bundle(
        "c",
        json!({"sources": [{"secret": {"name": "root-ca", "key": "ca.crt"}}], "target": {}}),
    ));
    assert!(no_target.rules.is_empty());
    assert!(
        no_target.skipped[0]
            .note
            .contains("target names neither a configMap nor a secret"),
        "{:?}",
        no_target.skipped
    );

    let unreadable = translate(
        &[json!({"kind": "Bundle", "metadata": {"name": "d"}, "spec": 3})],
        TRUST,
    );
    assert!(unreadable.rules.is_empty());
    assert!(
        unreadable.skipped[0]
            .note
            .contains("not a Bundle migrate can read"),
        "{:?}",
        unreadable.skipped
    );
}

fn policy(trusted: &str) -> Policy {
    Policy {
        trust: TrustPolicy {
            trusted_namespaces: NamespacePatterns::parse(trusted).unwrap(),
        },
        ..Default::default()
    }
}

fn configured(t: Translation, policy: &Policy) -> config::Config {
    config::build(
        t,
        &Default::default(),
        &config::Options {
            peer: Peer::TrustManager,
            policy,
            copy_rules: false,
            trust_sources: false,
        },
    )
}

#[test]
fn copy_rules_are_printed_in_force_and_an_untrusted_trust_namespace_is_said() {
    let doc = || {
        bundle(
            "b",
            json!({
                "sources": [{"secret": {"name": "root-ca", "key": "ca.crt"}}],
                "target": {"configMap": {"key": "ca.pem"}},
            }),
        )
    };
    let untrusted = configured(translate_one(doc()), &policy("team-*"));
    assert_eq!(untrusted.items.len(), 1);
    let item = &untrusted.items[0];
    assert!(!item.commented_out, "a Bundle was the administrators' own");
    assert!(matches!(item.change, Change::CopyRule(_)));
    let notes = item.notes.join("\n");
    assert!(
        notes.contains("cert-manager is not a trusted namespace")
            && notes.contains("--trusted-namespaces including cert-manager"),
        "{notes}"
    );
    let trusted = configured(translate_one(doc()), &policy("cert-manager"));
    assert!(
        !trusted.items[0]
            .notes
            .iter()
            .any(|n| n.contains("not a trusted namespace")),
        "{:?}",
        trusted.items[0].notes
    );

    // Both outputs carry it in force, the manifests as a CopyRule to apply.
    let script = render::kubectl(&untrusted, Peer::TrustManager).unwrap();
    assert!(
        script.contains("\nkubectl apply -f - <<'EOF'\napiVersion: copyrator.io/v1alpha1"),
        "{script}"
    );
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&render::manifests(&untrusted, Peer::TrustManager).unwrap())
            .unwrap();
    let rules: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "CopyRule").collect();
    assert_eq!(rules.len(), 1, "{docs:?}");
    assert_eq!(rules[0]["spec"]["targetName"], "b");
}
