//! trust-manager ClusterBundles (`trust-manager.io/v1alpha2`) as its docs and its own
//! migration write them, translated like Bundles; and a Bundle beside the ClusterBundle
//! trust-manager made of it gives one CopyRule, not two.

use super::*;

/// A ClusterBundle named `name` with `spec` (and `annotations`).
fn cluster_bundle(name: &str, annotations: Value, spec: Value) -> Value {
    json!({
        "apiVersion": "trust-manager.io/v1alpha2",
        "kind": "ClusterBundle",
        "metadata": {"name": name, "annotations": annotations},
        "spec": spec,
    })
}

#[test]
fn source_refs_and_the_pem_key_become_a_bundle_copy_rule() {
    let t = translate_one(cluster_bundle(
        "ca-bundle",
        Value::Null,
        json!({
            "sourceRefs": [
                {"kind": "Secret", "name": "root-ca", "key": "ca.crt"},
                {"kind": "ConfigMap", "selector": {"matchLabels": {"trust": "yes"}}, "key": "root.pem"},
            ],
            "defaultCAs": {"provider": "Disabled"},
            "target": {
                "configMap": {"data": [{"key": "trust-bundle.pem"}]},
                "namespaceSelector": {"matchLabels": {"trust": "enabled"}},
            },
        }),
    ));
    let (spec, name, notes) = only_rule(&t);
    assert_eq!(name, "trust-manager-ca-bundle-configmap");
    assert_eq!(spec.kind, "ConfigMap");
    assert_eq!(
        spec.sources.as_deref().unwrap(),
        [
            named("Secret", "root-ca", "ca.crt"),
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
    assert_eq!(spec.target_name.as_deref(), Some("ca-bundle"));
    let target = spec.target.as_ref().unwrap();
    assert_eq!(target.key.as_deref(), Some("trust-bundle.pem"));
    assert!(target.formats.is_none());
    assert_eq!(
        spec.namespace_selector,
        Some(labels(&[("trust", "enabled")]))
    );
    assert!(
        notes.contains("from trust-manager ClusterBundle ca-bundle"),
        "{notes}"
    );
    assert!(!notes.contains("left out"), "{notes}");
}

#[test]
fn pkcs12_entries_become_stores_and_the_converted_jks_one_a_jks_store() {
    // As trust-manager's migration converts a Bundle with both additionalFormats.
    let t = translate_one(cluster_bundle(
        "b",
        json!({"internal.trust-manager.io/jks-key": "bundle.jks"}),
        json!({
            "sourceRefs": [{"kind": "Secret", "name": "root-ca", "key": "ca.crt"}],
            "target": {
                "secret": {"data": [
                    {"key": "ca.pem"},
                    {"key": "bundle.jks", "format": "PKCS12", "password": "changeit"},
                    {"key": "bundle.p12", "format": "PKCS12", "profile": "Modern2023"},
                ]},
                "namespaceSelector": {},
            },
        }),
    ));
    let (spec, name, notes) = only_rule(&t);
    assert_eq!(name, "trust-manager-b-secret");
    assert_eq!(spec.kind, "Secret");
    let formats = spec.target.as_ref().unwrap().formats.as_ref().unwrap();
    let jks = formats.jks.as_ref().unwrap();
    assert_eq!(
        (jks.key.as_str(), jks.password.as_deref()),
        ("bundle.jks", Some("changeit"))
    );
    let p12 = formats.pkcs12.as_ref().unwrap();
    assert_eq!(
        (p12.key.as_str(), p12.password.as_deref()),
        ("bundle.p12", None),
        "no password: trust-manager's password-less default, copyrator's too"
    );
    assert!(
        notes.contains("target.secret.data[2].profile Modern2023") && notes.contains("left out"),
        "{notes}"
    );
}

#[test]
fn what_a_copy_rule_cannot_say_is_left_out_and_said() {
    let t = translate_one(cluster_bundle(
        "b",
        json!({}),
        json!({
            "sourceRefs": [
                {"kind": "Secret", "name": "root-ca", "key": "ca.crt"},
                {"kind": "ConfigMap", "name": "many", "key": "*.pem"},
                {"kind": "Pod", "name": "p", "key": "x"},
            ],
            "inLineCAs": inline_ca(),
            "defaultCAs": {"provider": "System"},
            "future": true,
            "target": {
                "configMap": {
                    "data": [{"key": "ca.pem"}, {"key": "also.pem", "format": "PEM"}],
                    "metadata": {"labels": {"team": "a"}},
                },
            },
        }),
    ));
    let (spec, _, notes) = only_rule(&t);
    // The default CAs and the inline certificates (a ConfigMap printed with the rule) are
    // sources.
    assert_eq!(
        spec.sources.as_deref().unwrap(),
        [
            default_cas(),
            named("Secret", "root-ca", "ca.crt"),
            named("ConfigMap", "trust-manager-b-inline", "ca.crt"),
        ]
    );
    assert_eq!(t.rules[0].objects.len(), 1);
    for said in [
        "sourceRefs[1] (ConfigMap many): key \"*.pem\" is a pattern",
        "sourceRefs[2].kind Pod: a bundle's source is a ConfigMap or a Secret",
        "printed as ConfigMap cert-manager/trust-manager-b-inline",
        "defaultCAs.provider System: the default CAs are copyrator's",
        "spec.future: migrate does not know it",
        "target.configMap.data[1] (also.pem): a CopyRule's copy holds the bundle's PEM under \
         one key (ca.pem)",
        "target.configMap.metadata",
        "no namespaceSelector: every namespace",
    ] {
        assert!(notes.contains(said), "{said:?} in:\n{notes}");
    }
}

#[test]
fn a_target_without_a_pem_entry_or_a_readable_source_gives_no_rule_and_says_why() {
    let t = translate_one(cluster_bundle(
        "stores-only",
        json!({}),
        json!({
            "sourceRefs": [{"kind": "Secret", "name": "root-ca", "key": "ca.crt"}],
            "target": {"configMap": {"data": [{"key": "b.p12", "format": "PKCS12"}]}},
        }),
    ));
    assert!(t.rules.is_empty(), "{t:#?}");
    let note = &t.skipped[0].note;
    assert!(
        note.contains("trust-manager ClusterBundle \"stores-only\"")
            && note.contains("target.configMap.data has no PEM entry")
            && note.ends_with("not migrated"),
        "{note}"
    );

    let t = translate_one(cluster_bundle(
        "inline-only",
        json!({}),
        json!({
            "inLineCAs": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
            "target": {"configMap": {"data": [{"key": "ca.pem"}]}},
        }),
    ));
    assert!(t.rules.is_empty(), "{t:#?}");
    let note = &t.skipped[0].note;
    assert!(
        note.contains("no source copyrator can read") && note.contains("inLineCAs"),
        "{note}"
    );
}

#[test]
fn a_bundle_and_the_cluster_bundle_made_of_it_give_one_copy_rule() {
    let spec_v1 = json!({
        "sources": [{"secret": {"name": "root-ca", "key": "ca.crt"}}],
        "target": {"configMap": {"key": "ca.pem"}},
    });
    let spec_v2 = json!({
        "sourceRefs": [{"kind": "Secret", "name": "root-ca", "key": "ca.crt"}],
        "target": {"configMap": {"data": [{"key": "ca.pem"}]}, "namespaceSelector": {}},
    });
    // Before the handover trust-manager keeps the ClusterBundle equal to the Bundle: the
    // Bundle's.
    let t = translate(
        &[
            bundle("twin", spec_v1.clone()),
            cluster_bundle("twin", json!({}), spec_v2.clone()),
        ],
        TRUST,
    );
    assert_eq!(t.rules.len(), 1, "{t:#?}");
    assert!(t.rules[0].notes[0].contains("from trust-manager Bundle twin"));
    assert_eq!(t.skipped.len(), 1);
    assert!(
        t.skipped[0]
            .note
            .starts_with("trust-manager ClusterBundle \"twin\": made of the Bundle of the same"),
        "{}",
        t.skipped[0].note
    );

    // Marked migrated, the ClusterBundle is its users' own: the ClusterBundle's; the Bundle
    // still owns trust-manager's copies, so it is to be deleted too.
    let marked = json!({"trust-manager.io/migrated": "true"});
    let t = translate(
        &[
            bundle("twin", spec_v1.clone()),
            cluster_bundle("twin", marked.clone(), spec_v2),
        ],
        TRUST,
    );
    assert_eq!(t.rules.len(), 1, "{t:#?}");
    assert!(t.rules[0].notes[0].contains("from trust-manager ClusterBundle twin"));
    let note = &t.skipped[0].note;
    assert!(
        note.starts_with("trust-manager Bundle \"twin\": its CopyRule is the ClusterBundle")
            && note.contains("delete this Bundle too"),
        "{note}"
    );

    // The marked ClusterBundle gives none: the Bundle's stands in, and says so.
    let t = translate(
        &[
            bundle("twin", spec_v1),
            cluster_bundle(
                "twin",
                marked,
                json!({"target": {"configMap": {"data": [{"key": "ca.pem"}]}}}),
            ),
        ],
        TRUST,
    );
    assert_eq!(t.rules.len(), 1, "{t:#?}");
    let notes = t.rules[0].notes.join("\n");
    assert!(
        notes.contains("from trust-manager Bundle twin")
            && notes.contains("the ClusterBundle twin of the same name gives no CopyRule"),
        "{notes}"
    );
    assert_eq!(t.skipped.len(), 1, "{:?}", t.skipped);
    assert!(
        t.skipped[0].note.contains("no source copyrator can read"),
        "{}",
        t.skipped[0].note
    );
}

#[test]
fn settings_of_entries_that_do_not_take_them_are_said() {
    let t = translate_one(cluster_bundle(
        "b",
        json!({"internal.trust-manager.io/jks-key": "b.jks"}),
        json!({
            "sourceRefs": [{"kind": "Secret", "name": "root-ca", "key": "ca.crt"}],
            "target": {"configMap": {"data": [
                {"key": "ca.pem", "password": "x"},
                {"key": "b.jks", "format": "PKCS12", "profile": "LegacyDES"},
            ]}},
        }),
    ));
    let (spec, _, notes) = only_rule(&t);
    let formats = spec.target.as_ref().unwrap().formats.as_ref().unwrap();
    let jks = formats.jks.as_ref().unwrap();
    assert_eq!((jks.key.as_str(), jks.password.as_deref()), ("b.jks", None));
    for said in [
        "target.configMap.data[0].password: only a PKCS12 entry has one",
        "target.configMap.data[1].profile LegacyDES: a JKS store has no profile",
        "target.configMap.data[1] (b.jks): no password; the JKS store gets copyrator's \
         default, changeit",
    ] {
        assert!(notes.contains(said), "{said:?} in:\n{notes}");
    }
}
