//! How rules ask for a transform (SPEC §2.1, §2.2, §3.2): the inline annotation
//! `copyrator.io/keys`, a CopyRule's `spec.keys` and `spec.target`, and what is refused, with
//! the field named.

use super::*;
use crate::{
    copyrule::{CopyRule, CopyRuleSpec, KeySpec, TargetSpec},
    marks,
    model::{ObjectKey, SourceInfo},
    rules::Rule,
};

fn labelled(kind: Kind, keys: Option<&str>) -> SourceInfo {
    let mut annotations = BTreeMap::from([(
        marks::NAMESPACES_ANNOTATION.to_string(),
        "team-a".to_string(),
    )]);
    if let Some(keys) = keys {
        annotations.insert(marks::KEYS_ANNOTATION.into(), keys.into());
    }
    SourceInfo {
        key: ObjectKey::new(kind, "platform", "ca"),
        uid: "u".into(),
        resource_version: "1".into(),
        labels: [(marks::SOURCE_LABEL.to_string(), "true".to_string())].into(),
        annotations,
        created: 0,
        deleting: false,
        dropped: None,
    }
}

fn mapping(from: &str, to: &str) -> KeyMapping {
    KeyMapping {
        from: from.into(),
        to: to.into(),
    }
}

fn spec(kind: &str) -> CopyRuleSpec {
    CopyRuleSpec {
        kind: kind.into(),
        source_namespace: "platform".into(),
        source_name: Some("ca".into()),
        namespaces: vec!["team-a".into()],
        ..Default::default()
    }
}

fn parse(spec: CopyRuleSpec) -> Result<Rule, crate::rules::RuleError> {
    Rule::from_copy_rule(&CopyRule::new("r", spec))
}

#[test]
fn the_inline_annotation_selects_and_renames_keys() {
    let rule = Rule::inline(&labelled(
        Kind::Secret,
        Some(" ca.crt, tls.crt = server.pem,"),
    ))
    .unwrap()
    .unwrap();
    assert_eq!(
        rule.transform,
        Transform {
            keys: Some(vec![
                mapping("ca.crt", "ca.crt"),
                mapping("tls.crt", "server.pem")
            ]),
            kind: None,
            type_: None,
            formats: None,
        }
    );
    assert_eq!(rule.target_kind(), Kind::Secret);
    let plain = Rule::inline(&labelled(Kind::Secret, None))
        .unwrap()
        .unwrap();
    assert!(plain.transform.is_identity());
    for bad in ["", " , ", "a/b", "a=b,c=b", "=x"] {
        let e = Rule::inline(&labelled(Kind::ConfigMap, Some(bad))).unwrap_err();
        assert_eq!(e.field, marks::KEYS_ANNOTATION, "{bad:?}");
    }
}

#[test]
fn a_copy_rule_asks_for_keys_kind_and_type() {
    let mut s = spec("Secret");
    s.keys = Some(vec![
        KeySpec::Name("ca.crt".into()),
        KeySpec::Renamed {
            from: "tls.crt".into(),
            to: Some("server.pem".into()),
        },
        KeySpec::Renamed {
            from: "x".into(),
            to: None,
        },
    ]);
    s.target = Some(TargetSpec {
        key: None,
        kind: Some("ConfigMap".into()),
        type_: None,
        formats: None,
    });
    let rule = parse(s.clone()).unwrap();
    assert_eq!(rule.target_kind(), Kind::ConfigMap);
    assert_eq!(
        rule.transform.keys,
        Some(vec![
            mapping("ca.crt", "ca.crt"),
            mapping("tls.crt", "server.pem"),
            mapping("x", "x")
        ])
    );
    // The source's own kind as target is no change of kind.
    s.target = Some(TargetSpec {
        key: None,
        kind: Some("Secret".into()),
        type_: Some("Opaque".into()),
        formats: None,
    });
    let rule = parse(s).unwrap();
    assert_eq!(rule.transform.kind, None);
    assert_eq!(rule.transform.type_.as_deref(), Some("Opaque"));
    // Entries as YAML writes them: strings and maps in one list.
    let json = serde_json::json!({"kind": "Secret", "sourceNamespace": "p", "sourceName": "ca",
        "namespaces": ["a"], "keys": ["ca.crt", {"from": "tls.crt", "to": "server.pem"}],
        "target": {"kind": "ConfigMap"}});
    let parsed: CopyRuleSpec = serde_json::from_value(json).unwrap();
    assert_eq!(
        parsed.keys.as_ref().map(Vec::len),
        Some(2),
        "{:?}",
        parsed.keys
    );
}

#[test]
fn what_a_copy_rule_cannot_ask_is_denied_naming_the_field() {
    type Edit = Box<dyn Fn(&mut CopyRuleSpec)>;
    let cases: Vec<(&str, Edit)> = vec![
        ("spec.keys", Box::new(|s| s.keys = Some(vec![]))),
        (
            "spec.keys",
            Box::new(|s| s.keys = Some(vec![KeySpec::Name("a b".into())])),
        ),
        (
            "spec.keys",
            Box::new(|s| {
                s.keys = Some(vec![
                    KeySpec::Name("a".into()),
                    KeySpec::Renamed {
                        from: "b".into(),
                        to: Some("a".into()),
                    },
                ])
            }),
        ),
        (
            "spec.target.kind",
            Box::new(|s| {
                s.target = Some(TargetSpec {
                    key: None,
                    kind: Some("NetworkPolicy".into()),
                    type_: None,
                    formats: None,
                })
            }),
        ),
        (
            "spec.target.type",
            Box::new(|s| {
                s.target = Some(TargetSpec {
                    key: None,
                    kind: Some("ConfigMap".into()),
                    type_: Some("Opaque".into()),
                    formats: None,
                })
            }),
        ),
        (
            "spec.target.type",
            Box::new(|s| {
                s.target = Some(TargetSpec {
                    key: None,
                    kind: None,
                    type_: Some(crate::model::SERVICE_ACCOUNT_TOKEN_TYPE.into()),
                    formats: None,
                })
            }),
        ),
        (
            "spec.imagePullSecret",
            Box::new(|s| {
                s.image_pull_secret = true;
                s.target = Some(TargetSpec {
                    key: None,
                    kind: Some("ConfigMap".into()),
                    type_: None,
                    formats: None,
                });
            }),
        ),
    ];
    for (field, edit) in cases {
        let mut s = spec("Secret");
        edit(&mut s);
        let e = parse(s.clone()).unwrap_err();
        assert_eq!(e.field, field, "{s:?}: {e}");
    }
}
