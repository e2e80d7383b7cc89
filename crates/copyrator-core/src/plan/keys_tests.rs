//! The planner with rules that shape their copies (SPEC §3.2): keys selected and renamed, a
//! Secret's certificates copied as a ConfigMap, key material refused per target.

use super::*;
use crate::{
    content::{DesiredCopy, object_hash, source_hash},
    copyrule::{CopyRule, CopyRuleSpec, KeySpec, TargetSpec},
    marks,
    model::{Kind, NamespaceInfo, Payload, SourceInfo},
    transform::certificates::tests::ca,
};
use base64::{Engine, engine::general_purpose::STANDARD};

struct Tls {
    world: World,
    contents: Contents,
    ca_pem: String,
    key_pem: String,
}

fn source_key() -> ObjectKey {
    ObjectKey::new(Kind::Secret, "platform", "ca")
}

/// A cert-manager-style TLS Secret `platform/ca` (ca.crt, tls.crt, tls.key), namespaces
/// team-a and team-b, and one CopyRule with `keys` and `target`.
fn tls(keys: &[KeySpec], target: Option<TargetSpec>) -> Tls {
    tls_under(Policy::default(), keys, target)
}

/// [`tls`] under `policy`.
fn tls_under(policy: Policy, keys: &[KeySpec], target: Option<TargetSpec>) -> Tls {
    let (ca_pem, _) = ca("ca");
    let (tls_pem, key_pem) = ca("server");
    let payload = Payload {
        type_: Some("kubernetes.io/tls".into()),
        data: Some(
            [
                ("ca.crt", &ca_pem),
                ("tls.crt", &tls_pem),
                ("tls.key", &key_pem),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), STANDARD.encode(v)))
            .collect(),
        ),
        ..Default::default()
    };
    let source = SourceInfo {
        key: source_key(),
        uid: "uid-ca".into(),
        resource_version: "3".into(),
        labels: Default::default(),
        annotations: Default::default(),
        created: 1,
        deleting: false,
        dropped: None,
    };
    let rule = CopyRule::new(
        "ca-bundle",
        CopyRuleSpec {
            kind: "Secret".into(),
            source_namespace: "platform".into(),
            source_name: Some("ca".into()),
            namespaces: vec!["team-a".into(), "team-b".into()],
            target_name: Some("ca-bundle".into()),
            keys: Some(keys.to_vec()),
            target,
            ..Default::default()
        },
    );
    let mut world = World::from_parts(policy, [source], vec![rule]);
    world.insert_namespaces(["team-a", "team-b"].map(|n| NamespaceInfo {
        name: n.into(),
        resource_version: "1".into(),
        labels: Default::default(),
        accept_from: None,
        terminating: false,
    }));
    let mut contents = Contents::default();
    contents.payloads.insert(source_key(), Arc::new(payload));
    Tls {
        world,
        contents,
        ca_pem,
        key_pem,
    }
}

fn key(name: &str) -> KeySpec {
    KeySpec::Name(name.into())
}

fn as_config_map() -> Option<TargetSpec> {
    Some(TargetSpec {
        key: None,
        kind: Some("ConfigMap".into()),
        type_: None,
        formats: None,
    })
}

fn bundle(ns: &str) -> ObjectKey {
    ObjectKey::new(Kind::ConfigMap, ns, "ca-bundle")
}

/// The copy `f`'s rule wants in `ns`, as an existing managed copy read back.
fn written(f: &Tls, ns: &str) -> (ObjectKey, Existing) {
    let rule = f.world.rules().copy_rule("ca-bundle").unwrap();
    let src = &f.world.sources()[&source_key()];
    let copy = DesiredCopy::build(rule, src, &f.contents.payloads[&source_key()], ns).unwrap();
    let object = copy.object();
    let meta = &object.metadata;
    let mut managed = ManagedCopy::from_marks(
        copy.key.kind,
        meta.labels.as_ref().unwrap(),
        meta.annotations.as_ref().unwrap(),
        "5".into(),
        false,
    )
    .unwrap();
    managed.actual_hash = Some(object_hash(copy.key.kind, &object));
    (copy.key.clone(), Existing::Managed(managed))
}

#[test]
fn a_tls_secrets_ca_is_copied_as_a_config_map_of_that_certificate_alone() {
    let f = tls(&[key("ca.crt")], as_config_map());
    let actions = plan(&f.world, &Scope::All, &BTreeMap::new(), &f.contents);
    assert_eq!(actions.len(), 2, "{actions:?}");
    for (action, ns) in actions.iter().zip(["team-a", "team-b"]) {
        let Action::Create { copy, by } = action else {
            panic!("{action:?}");
        };
        assert_eq!(copy.key, bundle(ns));
        assert_eq!(by.source, source_key(), "the claim is the Secret's");
        let object = copy.object();
        assert_eq!(
            object.payload,
            Payload {
                data: Some([("ca.crt".to_string(), f.ca_pem.clone())].into()),
                ..Default::default()
            }
        );
        let annotations = object.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[marks::SOURCE_KIND_ANNOTATION], "Secret");
        assert_eq!(annotations[marks::SOURCE_ANNOTATION], "platform/ca");
        // The hash is of what the copy holds, so reading it back finds it in sync.
        assert_eq!(
            object_hash(Kind::ConfigMap, &object),
            copy.marks().content_hash
        );
        let json = String::from_utf8(copy.body(None).unwrap()).unwrap();
        assert!(!json.contains(&STANDARD.encode(&f.key_pem)), "{json}");
        assert!(!json.contains(f.key_pem.lines().nth(1).unwrap()), "{json}");
    }
}

#[test]
fn a_transformed_copy_in_sync_is_left_alone_and_judged_from_the_payload() {
    let f = tls(&[key("ca.crt")], as_config_map());
    let existing: BTreeMap<_, _> = ["team-a", "team-b"].map(|ns| written(&f, ns)).into();
    let Existing::Managed(m) = &existing[&bundle("team-a")] else {
        unreachable!()
    };
    assert_eq!(m.source, source_key(), "the marks name a Secret source");
    let actions = plan(&f.world, &Scope::All, &existing, &f.contents);
    assert!(
        actions.iter().all(|a| matches!(a, Action::InSync { .. })),
        "{actions:?}"
    );
    // Its source's own hash says nothing about the shaped copy: the payload is read.
    let mut contents = Contents::default();
    let raw = &f.contents.payloads[&source_key()];
    contents.known_hashes.insert(
        source_key(),
        source_hash(&f.world.sources()[&source_key()], raw),
    );
    let actions = plan(&f.world, &Scope::All, &existing, &contents);
    assert!(
        actions
            .iter()
            .all(|a| matches!(a, Action::NeedSource { source, .. } if *source == source_key())),
        "{actions:?}"
    );
    // A source's job covers its ConfigMap copies; a hand edit (another hash) is restored.
    let mut edited = existing.clone();
    if let Some(Existing::Managed(m)) = edited.get_mut(&bundle("team-b")) {
        m.actual_hash = Some("sha256:edited".into());
    }
    let actions = plan(&f.world, &Scope::Source(source_key()), &edited, &f.contents);
    assert!(
        matches!(&actions[..], [Action::InSync { .. }, Action::Update { copy, .. }] if copy.key == bundle("team-b")),
        "{actions:?}"
    );
}

#[test]
fn key_material_is_refused_per_target_and_nothing_is_written() {
    for keys in [vec![key("ca.crt"), key("tls.key")], vec![]] {
        // Every key (an empty list stands for no `keys`), or tls.key by name.
        let f = if keys.is_empty() {
            let mut f = tls(&[key("ca.crt")], as_config_map());
            let mut cr = f.world.copy_rules()[0].clone();
            cr.spec.keys = None;
            f.world.set_copy_rules(vec![cr]);
            f
        } else {
            tls(&keys, as_config_map())
        };
        // A copy made before the source held a key stays as it is.
        let existing: BTreeMap<_, _> = [(
            bundle("team-a"),
            Existing::Managed(
                ManagedCopy::from_marks(
                    Kind::ConfigMap,
                    &[(marks::SOURCE_UID_LABEL.to_string(), "uid-ca".to_string())].into(),
                    &[
                        (marks::SOURCE_ANNOTATION, "platform/ca"),
                        (marks::SOURCE_KIND_ANNOTATION, "Secret"),
                        (marks::RULE_ANNOTATION, "copyrule/ca-bundle"),
                        (marks::CONTENT_HASH_ANNOTATION, "sha256:old"),
                    ]
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .into(),
                    "4".into(),
                    false,
                )
                .unwrap(),
            ),
        )]
        .into();
        let actions = plan(&f.world, &Scope::All, &existing, &f.contents);
        assert_eq!(actions.len(), 2, "{actions:?}");
        for action in &actions {
            let Action::Conflict {
                reason: ConflictReason::Refused(refused),
                ..
            } = action
            else {
                panic!("{action:?}");
            };
            let said = refused.to_string();
            assert!(
                said.starts_with("key tls.key holds a private key"),
                "{said}"
            );
            assert!(!said.contains(f.key_pem.lines().nth(1).unwrap()));
        }
    }
}

#[test]
fn renamed_keys_and_a_new_type_and_the_missing_keys_said_once_per_claim() {
    let f = tls(
        &[
            key("ca.crt"),
            KeySpec::Renamed {
                from: "tls.crt".into(),
                to: Some("server.pem".into()),
            },
            key("extra.pem"),
        ],
        Some(TargetSpec {
            key: None,
            kind: None,
            type_: Some("Opaque".into()),
            formats: None,
        }),
    );
    let actions = plan(&f.world, &Scope::All, &BTreeMap::new(), &f.contents);
    let missing: Vec<_> = actions
        .iter()
        .filter_map(|a| match a {
            Action::MissingKeys { by, keys } => Some((by.source.clone(), keys.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(missing, [(source_key(), vec!["extra.pem".to_string()])]);
    let creates: Vec<_> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Create { copy, .. } => Some(copy),
            _ => None,
        })
        .collect();
    assert_eq!(creates.len(), 2);
    let payload = &creates[0].template.payload;
    assert_eq!(payload.type_.as_deref(), Some("Opaque"));
    assert_eq!(
        payload.data.as_ref().unwrap().keys().collect::<Vec<_>>(),
        ["ca.crt", "server.pem"]
    );
    assert_eq!(creates[0].key.kind, Kind::Secret);
    assert!(
        !creates[0]
            .template
            .annotations
            .contains_key(marks::SOURCE_KIND_ANNOTATION),
        "a copy of its source's kind carries the marks it always did"
    );
}

#[test]
fn a_rule_that_changes_its_target_kind_deletes_the_copies_of_the_old_kind() {
    let f = tls(&[key("ca.crt")], None);
    let (old_key, old) = written(&f, "team-a");
    assert_eq!(old_key.kind, Kind::Secret);
    let mut g = tls(&[key("ca.crt")], as_config_map());
    g.contents = f.contents.clone();
    let existing = BTreeMap::from([(old_key.clone(), old)]);
    let rule = RuleId::CopyRule("ca-bundle".into());
    let mut actions = plan(&g.world, &Scope::Rule(rule), &existing, &g.contents);
    actions.sort_by_key(|a| format!("{a:?}"));
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Delete { target, .. } if *target == old_key)),
        "{actions:?}"
    );
    assert_eq!(
        actions
            .iter()
            .filter(
                |a| matches!(a, Action::Create { copy, .. } if copy.key.kind == Kind::ConfigMap)
            )
            .count(),
        2
    );
}

/// A JKS store beside the CA, its password from the Secret `platform/store-password` or,
/// with `inline`, written in the rule.
fn with_jks(from_secret: bool, inline: Option<&str>) -> Option<TargetSpec> {
    use crate::copyrule::{FormatsSpec, PasswordSecretRef, TruststoreSpec};
    Some(TargetSpec {
        formats: Some(FormatsSpec {
            from: None,
            pkcs12: None,
            jks: Some(TruststoreSpec {
                key: "truststore.jks".into(),
                password: inline.map(str::to_string),
                password_secret_ref: from_secret.then(|| PasswordSecretRef {
                    namespace: "platform".into(),
                    name: "store-password".into(),
                    key: "jks".into(),
                }),
            }),
        }),
        ..as_config_map().unwrap()
    })
}

/// The JKS stores the copies `actions` create hold, by namespace.
fn created_stores(actions: &[Action]) -> BTreeMap<String, String> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Create { copy, .. } => Some((
                copy.key.namespace.clone(),
                copy.object().payload.binary_data?["truststore.jks"].clone(),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn a_single_source_rules_store_password_is_read_from_a_trusted_secret_or_nothing_is_written() {
    use crate::{
        tenancy::{NamespacePatterns, TrustPolicy},
        transform::{PasswordMissing, PasswordRef, truststores::Password},
    };
    let trusting = |ns: &str| Policy {
        trust: TrustPolicy {
            trusted_namespaces: NamespacePatterns::parse(ns).unwrap(),
        },
        ..Default::default()
    };
    let from = PasswordRef {
        namespace: "platform".into(),
        name: "store-password".into(),
        key: "jks".into(),
    };
    let mut f = tls_under(trusting("platform"), &[key("ca.crt")], with_jks(true, None));
    let plan_with = |f: &mut Tls, read: Option<Result<&str, PasswordMissing>>| {
        f.contents.passwords = read
            .map(|r| (from.clone(), r.map(|p| Password(p.into()))))
            .into_iter()
            .collect();
        plan(&f.world, &Scope::All, &BTreeMap::new(), &f.contents)
    };

    // Not read yet (a source job has the payload only): read with the payload, then planned.
    let unread = plan_with(&mut f, None);
    assert!(
        unread
            .iter()
            .all(|a| matches!(a, Action::NeedSource { source, .. } if *source == source_key())),
        "{unread:?}"
    );
    // Read: the store is the one the rule would make with that password written in it.
    let one = created_stores(&plan_with(&mut f, Some(Ok("one"))));
    assert_eq!(one.len(), 2, "{one:?}");
    let mut inline = tls(&[key("ca.crt")], with_jks(false, Some("one")));
    inline.contents.payloads = f.contents.payloads.clone();
    let written = created_stores(&plan(
        &inline.world,
        &Scope::All,
        &BTreeMap::new(),
        &inline.contents,
    ));
    assert_eq!(one, written);
    // A new password, new stores.
    let two = created_stores(&plan_with(&mut f, Some(Ok("two"))));
    assert_ne!(one["team-a"], two["team-a"]);

    // Not there: no store under another password; the targets are conflicts naming the Secret.
    let missing = plan_with(&mut f, Some(Err(PasswordMissing::SecretNotFound)));
    assert_eq!(missing.len(), 2, "{missing:?}");
    for action in &missing {
        let Action::Conflict { reason, .. } = action else {
            panic!("{action:?}");
        };
        assert_eq!(
            reason.to_string(),
            ConflictReason::Refused(Refused::NoPassword {
                store: "truststore.jks".into(),
                from: Box::new(from.clone()),
                why: PasswordMissing::SecretNotFound,
            })
            .to_string()
        );
        assert!(
            reason
                .to_string()
                .contains("Secret platform/store-password key jks does not exist"),
            "{reason}"
        );
    }

    // Its namespace no longer trusted: refused, whatever was read.
    let mut untrusted = tls_under(trusting("other"), &[key("ca.crt")], with_jks(true, None));
    let refused = plan_with(&mut untrusted, Some(Ok("one")));
    assert!(
        refused.iter().all(|a| matches!(
            a,
            Action::Conflict {
                reason: ConflictReason::Refused(Refused::NoPassword {
                    why: PasswordMissing::Untrusted,
                    ..
                }),
                ..
            }
        )),
        "{refused:?}"
    );
}
