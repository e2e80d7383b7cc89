//! The planner with bundles (SPEC §3.2, Bundles): one claim per target whose stand-in source is
//! the CopyRule, a payload per set of sources admitted into the namespace (trust, consent),
//! never an empty copy, and marks that parse back to the same claim.

use base64::{Engine, engine::general_purpose::STANDARD};

use super::*;
use crate::{
    bundle::{BundleInput, BundleInputs, LeftOut, certificates},
    content::object_hash,
    copyrule::{BundleSourceSpec, CopyRule, CopyRuleSpec, FormatsSpec, TargetSpec, TruststoreSpec},
    marks,
    model::{Kind, NamespaceInfo},
    tenancy::{NamespacePatterns, TrustPolicy},
    transform::certificates::tests::ca,
    transform::{PasswordMissing, PasswordRef, Refused, truststores::Password},
};

fn owner() -> ObjectKey {
    ObjectKey::bundle(Kind::ConfigMap, "trust")
}

fn target(ns: &str) -> ObjectKey {
    ObjectKey::new(Kind::ConfigMap, ns, "ca-bundle")
}

fn entry(ns: &str, name: &str) -> BundleSourceSpec {
    BundleSourceSpec {
        kind: "Secret".into(),
        namespace: ns.into(),
        name: Some(name.into()),
        selector: None,
        key: "ca.crt".into(),
        ..Default::default()
    }
}

/// A bundle `trust` of `platform/root` (trusted) and `tenant/extra` (not), into team-a (which
/// accepts copies from tenant) and team-b (which does not).
fn world() -> World {
    world_with(None)
}

fn world_with(formats: Option<FormatsSpec>) -> World {
    let mut rule = CopyRule::new(
        "trust",
        CopyRuleSpec {
            kind: "ConfigMap".into(),
            source_namespace: String::new(),
            sources: Some(vec![entry("platform", "root"), entry("tenant", "extra")]),
            namespaces: vec!["team-a".into(), "team-b".into()],
            target_name: Some("ca-bundle".into()),
            target: Some(TargetSpec {
                key: Some("ca-bundle.pem".into()),
                formats,
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    rule.metadata.uid = Some("uid-trust".into());
    let policy = Policy {
        trust: TrustPolicy {
            trusted_namespaces: NamespacePatterns::parse("platform").unwrap(),
        },
        ..Default::default()
    };
    let mut world = World::from_parts(policy, [], vec![rule]);
    world.insert_namespaces(
        [("team-a", Some("tenant")), ("team-b", None)].map(|(n, accept)| NamespaceInfo {
            name: n.into(),
            resource_version: "1".into(),
            labels: Default::default(),
            accept_from: accept.map(Into::into),
            terminating: false,
        }),
    );
    world
}

fn input(ns: &str, name: &str, read: Result<&str, LeftOut>) -> BundleInput {
    BundleInput {
        source: ObjectKey::new(Kind::Secret, ns, name),
        key: "ca.crt".into(),
        read: read.map(|pem| certificates(pem.as_bytes()).unwrap()),
    }
}

fn with_inputs(inputs: Vec<BundleInput>) -> Contents {
    with_passwords(inputs, Default::default())
}

fn with_passwords(
    inputs: Vec<BundleInput>,
    passwords: BTreeMap<PasswordRef, Result<Password, PasswordMissing>>,
) -> Contents {
    let mut contents = Contents::default();
    contents.bundles.insert(
        owner(),
        Arc::new(BundleInputs {
            inputs,
            read_at: 1_900_000_000,
        }),
    );
    contents.passwords = passwords;
    contents
}

fn pem_of(copy: &DesiredCopy) -> String {
    copy.object().payload.data.unwrap()["ca-bundle.pem"].clone()
}

#[test]
fn a_bundle_is_read_through_its_rule_and_each_namespace_gets_the_sources_it_takes() {
    let world = world();
    // Nothing read yet: every target asks for the bundle's sources, by the rule's stand-in.
    let actions = plan(&world, &Scope::All, &BTreeMap::new(), &Contents::default());
    assert_eq!(actions.len(), 2, "{actions:?}");
    assert!(
        actions
            .iter()
            .all(|a| matches!(a, Action::NeedSource { source, .. } if *source == owner())),
        "{actions:?}"
    );
    let (root, _) = ca("root");
    let (extra, _) = ca("extra");
    let contents = with_inputs(vec![
        input("platform", "root", Ok(&root)),
        input("tenant", "extra", Ok(&extra)),
    ]);
    let actions = plan(&world, &Scope::All, &BTreeMap::new(), &contents);
    let copies: BTreeMap<ObjectKey, &DesiredCopy> = actions
        .iter()
        .map(|a| match a {
            Action::Create { copy, by } => {
                assert_eq!(by.source, owner());
                (copy.key.clone(), copy.as_ref())
            }
            other => panic!("{other:?}"),
        })
        .collect();
    let a = pem_of(copies[&target("team-a")]);
    let b = pem_of(copies[&target("team-b")]);
    // team-a consents to tenant: both certificates; team-b only the trusted one.
    assert_eq!(crate::transform::only_certificates(a.as_bytes()), Ok(2));
    assert_eq!(crate::transform::only_certificates(b.as_bytes()), Ok(1));
    let body = |pem: &str| pem.lines().nth(1).unwrap().to_string();
    assert!(!b.contains(&body(&extra)[..40]), "{b}");
    assert_ne!(
        copies[&target("team-a")].marks().content_hash,
        copies[&target("team-b")].marks().content_hash
    );

    // The marks name the rule, and parse back to a copy the same claim owns: in sync.
    let existing: BTreeMap<ObjectKey, Existing> = copies
        .values()
        .map(|copy| {
            let object = copy.object();
            let meta = &object.metadata;
            let annotations = meta.annotations.as_ref().unwrap();
            assert_eq!(annotations[marks::SOURCE_ANNOTATION], "copyrule/trust");
            assert_eq!(annotations[marks::SOURCE_KIND_ANNOTATION], "CopyRule");
            assert_eq!(
                meta.labels.as_ref().unwrap()[marks::SOURCE_UID_LABEL],
                "uid-trust"
            );
            let mut m = ManagedCopy::from_marks(
                Kind::ConfigMap,
                meta.labels.as_ref().unwrap(),
                annotations,
                "5".into(),
                false,
            )
            .unwrap();
            assert_eq!(m.source, owner());
            m.actual_hash = Some(object_hash(Kind::ConfigMap, &object));
            (copy.key.clone(), Existing::Managed(m))
        })
        .collect();
    let actions = plan(&world, &Scope::All, &existing, &contents);
    assert!(
        actions.iter().all(|a| matches!(a, Action::InSync { .. })),
        "{actions:?}"
    );
    // A copy's own job (one target) finds the bundle's claim on it: restored, never orphaned.
    let mut edited = existing.clone();
    if let Some(Existing::Managed(m)) = edited.get_mut(&target("team-b")) {
        m.actual_hash = Some("sha256:edited".into());
    }
    let actions = plan(&world, &Scope::Target(target("team-b")), &edited, &contents);
    assert!(
        matches!(&actions[..], [Action::Update { copy, .. }] if copy.key == target("team-b")),
        "{actions:?}"
    );
}

#[test]
fn a_bundle_with_no_certificate_to_give_is_never_written_and_says_why() {
    let world = world();
    let (extra, _) = ca("extra");
    // The trusted source is gone; the tenant's goes only to team-a.
    let contents = with_inputs(vec![
        input("platform", "root", Err(LeftOut::SourceNotFound)),
        input("tenant", "extra", Ok(&extra)),
    ]);
    let actions = plan(&world, &Scope::All, &BTreeMap::new(), &contents);
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Create { copy, .. } if copy.key == target("team-a"))),
        "{actions:?}"
    );
    assert!(
        actions.iter().any(|a| matches!(
            a,
            Action::Conflict { target: t, reason: ConflictReason::EmptyBundle, .. }
                if *t == target("team-b")
        )),
        "{actions:?}"
    );
    let left: Vec<_> = actions
        .iter()
        .filter_map(|a| match a {
            Action::LeftOut { by, key, why } => Some((by.source.clone(), key.clone(), *why)),
            _ => None,
        })
        .collect();
    assert_eq!(
        left,
        [(
            ObjectKey::new(Kind::Secret, "platform", "root"),
            "ca.crt".to_string(),
            LeftOut::SourceNotFound
        )],
        "said once per plan, not per target"
    );
}

#[test]
fn a_bundles_stores_hold_the_certificates_its_namespace_takes() {
    let store = |key: &str| {
        Some(TruststoreSpec {
            key: key.into(),
            password: None,
            ..Default::default()
        })
    };
    let world = world_with(Some(FormatsSpec {
        from: None,
        pkcs12: store("truststore.p12"),
        jks: store("truststore.jks"),
    }));
    let (root, _) = ca("root");
    let (extra, _) = ca("extra");
    let contents = with_inputs(vec![
        input("platform", "root", Ok(&root)),
        input("tenant", "extra", Ok(&extra)),
    ]);
    let copies = |contents: &Contents| -> BTreeMap<ObjectKey, crate::model::Payload> {
        plan(&world, &Scope::All, &BTreeMap::new(), contents)
            .into_iter()
            .map(|a| match a {
                Action::Create { copy, .. } => (copy.key.clone(), copy.object().payload),
                other => panic!("{other:?}"),
            })
            .collect()
    };
    let first = copies(&contents);
    // A JKS store counts its entries after its magic and version.
    let jks_entries = |p: &crate::model::Payload| {
        let jks = STANDARD
            .decode(&p.binary_data.as_ref().unwrap()["truststore.jks"])
            .unwrap();
        u32::from_be_bytes(jks[8..12].try_into().unwrap())
    };
    let (a, b) = (&first[&target("team-a")], &first[&target("team-b")]);
    assert_eq!(jks_entries(a), 2, "team-a takes tenant's certificate too");
    assert_eq!(jks_entries(b), 1);
    assert!(
        b.binary_data
            .as_ref()
            .unwrap()
            .contains_key("truststore.p12")
    );
    // Per target, deterministic: the sources read in another order make the same bytes.
    let again = copies(&with_inputs(vec![
        input("tenant", "extra", Ok(&extra)),
        input("platform", "root", Ok(&root)),
    ]));
    assert_eq!(first, again);
}

/// The JKS store of the copy `action` creates, if it creates one.
fn created_jks(action: &Action) -> Option<(ObjectKey, String)> {
    match action {
        Action::Create { copy, .. } => Some((
            copy.key.clone(),
            copy.object().payload.binary_data?["truststore.jks"].clone(),
        )),
        _ => None,
    }
}

#[test]
fn a_store_password_from_a_secret_is_read_from_a_trusted_namespace_or_nothing_is_written() {
    let from = |ns: &str| crate::copyrule::PasswordSecretRef {
        namespace: ns.into(),
        name: "store-password".into(),
        key: "jks".into(),
    };
    let formats = |ns: &str| FormatsSpec {
        from: None,
        pkcs12: None,
        jks: Some(TruststoreSpec {
            key: "truststore.jks".into(),
            password_secret_ref: Some(from(ns)),
            ..Default::default()
        }),
    };
    let key = |ns: &str| PasswordRef {
        namespace: ns.into(),
        name: "store-password".into(),
        key: "jks".into(),
    };
    let (root, _) = ca("root");
    let inputs = || vec![input("platform", "root", Ok(&root))];
    let plan_with = |world: &World, ns: &str, read: Result<&str, PasswordMissing>| {
        let read = read.map(|p| Password(p.into()));
        let contents = with_passwords(inputs(), [(key(ns), read)].into());
        plan(world, &Scope::All, &BTreeMap::new(), &contents)
    };

    let trusted = world_with(Some(formats("platform")));
    let first = plan_with(&trusted, "platform", Ok("one"));
    let stores: Vec<_> = first.iter().filter_map(created_jks).collect();
    assert_eq!(stores.len(), 2, "{first:?}");
    // Another password, other bytes: a changed Secret re-makes the stores.
    let second = plan_with(&trusted, "platform", Ok("two"));
    let again: Vec<_> = second.iter().filter_map(created_jks).collect();
    assert_ne!(stores, again);

    // A Secret or key that is not there: no store under a wrong password, no copy at all.
    let missing = plan_with(&trusted, "platform", Err(PasswordMissing::NoKey));
    assert_eq!(missing.len(), 2, "{missing:?}");
    for action in &missing {
        let Action::Conflict { reason, .. } = action else {
            panic!("{action:?}");
        };
        assert!(
            matches!(reason, ConflictReason::Refused(Refused::NoPassword { why: PasswordMissing::NoKey, store, .. })
                if store == "truststore.jks"),
            "{reason:?}"
        );
        let said = reason.to_string();
        assert!(
            said.contains("Secret platform/store-password key jks has no such key"),
            "{said}"
        );
    }

    // A namespace that is not trusted: refused, even had its Secret been read.
    let untrusted = world_with(Some(formats("tenant")));
    let refused = plan_with(&untrusted, "tenant", Ok("one"));
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
