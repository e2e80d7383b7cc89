//! The planner with a bundle's default CAs (SPEC §3.2, Bundles): the platform's, so every copy
//! holds them whatever its namespace trusts; deduplicated with the sources' certificates; the
//! same certificates the same bytes; a bundle of them alone is never empty.

use super::*;
use crate::{
    bundle::{BundleInput, BundleInputs, DefaultCas, certificates},
    content::object_hash,
    copyrule::{BundleSourceSpec, CopyRule, CopyRuleSpec, TargetSpec},
    model::{Kind, NamespaceInfo},
    rules::Rule,
    tenancy::{NamespacePatterns, TrustPolicy},
    transform::certificates::tests::ca,
};

fn owner() -> ObjectKey {
    ObjectKey::bundle(Kind::ConfigMap, "public")
}

fn target(ns: &str) -> ObjectKey {
    ObjectKey::new(Kind::ConfigMap, ns, "ca-bundle")
}

fn default_cas() -> BundleSourceSpec {
    BundleSourceSpec {
        default_cas: true,
        ..Default::default()
    }
}

fn tenant_source() -> BundleSourceSpec {
    BundleSourceSpec {
        kind: "Secret".into(),
        namespace: "tenant".into(),
        name: Some("extra".into()),
        key: "ca.crt".into(),
        ..Default::default()
    }
}

/// Two public CAs, PEM each, and the default CAs they make.
fn public_cas() -> (Vec<String>, Arc<DefaultCas>) {
    let pems = vec![ca("public-one").0, ca("public-two").0];
    let ders: Vec<Vec<u8>> = pems
        .iter()
        .map(|p| certificates(p.as_bytes()).unwrap().remove(0).der)
        .collect();
    let cas = DefaultCas::from_package("roots", "1.0", ders.iter().map(Vec::as_slice)).unwrap();
    (pems, Arc::new(cas))
}

/// A bundle `public` of `sources` into team-a (which accepts copies from tenant) and team-b
/// (which trusts nothing), copyrator trusting no namespace.
fn world(sources: Vec<BundleSourceSpec>, cas: Arc<DefaultCas>) -> World {
    let rule = CopyRule::new(
        "public",
        CopyRuleSpec {
            kind: "ConfigMap".into(),
            sources: Some(sources),
            namespaces: vec!["team-a".into(), "team-b".into()],
            target_name: Some("ca-bundle".into()),
            target: Some(TargetSpec {
                key: Some("ca.pem".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    let policy = Policy {
        trust: TrustPolicy {
            trusted_namespaces: NamespacePatterns::parse("").unwrap(),
        },
        default_cas: Some(cas),
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

fn contents(inputs: Vec<BundleInput>) -> Contents {
    let mut contents = Contents::default();
    contents.bundles.insert(
        owner(),
        Arc::new(BundleInputs {
            inputs,
            read_at: 1_900_000_000,
        }),
    );
    contents
}

fn tenant_input(pem: &str) -> BundleInput {
    BundleInput {
        source: ObjectKey::new(Kind::Secret, "tenant", "extra"),
        key: "ca.crt".into(),
        read: Ok(certificates(pem.as_bytes()).unwrap()),
    }
}

/// The copies planned, by target: their PEM.
fn created(actions: &[Action]) -> BTreeMap<ObjectKey, &DesiredCopy> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Create { copy, .. } => Some((copy.key.clone(), copy.as_ref())),
            _ => None,
        })
        .collect()
}

fn pem_of(copy: &DesiredCopy) -> String {
    copy.object().payload.data.unwrap()["ca.pem"].clone()
}

/// The certificates of a PEM text, each as its base64 body on one line.
fn bodies(pem: &str) -> BTreeSet<String> {
    pem.split("-----END CERTIFICATE-----")
        .filter_map(|block| block.split("-----BEGIN CERTIFICATE-----").nth(1))
        .map(|body| body.split_whitespace().collect())
        .collect()
}

#[test]
fn the_default_cas_go_into_every_copy_whatever_its_namespace_trusts() {
    let (public, cas) = public_cas();
    let world = world(vec![default_cas(), tenant_source()], cas);
    let (extra, _) = ca("tenant-extra");
    let actions = plan(
        &world,
        &Scope::All,
        &BTreeMap::new(),
        &contents(vec![tenant_input(&extra)]),
    );
    let copies = created(&actions);
    let public_bodies = bodies(&public.concat());
    // team-b trusts nothing: the public CAs only; team-a accepts tenant's too.
    assert_eq!(bodies(&pem_of(copies[&target("team-b")])), public_bodies);
    let mut with_extra = public_bodies.clone();
    with_extra.extend(bodies(&extra));
    assert_eq!(bodies(&pem_of(copies[&target("team-a")])), with_extra);
}

#[test]
fn the_same_certificates_make_the_same_bytes_and_a_resync_writes_nothing() {
    let (public, cas) = public_cas();
    let world = world(vec![default_cas(), tenant_source()], cas.clone());
    // The tenant's source repeats a public CA: one copy of it in the bundle.
    let repeated = contents(vec![tenant_input(&format!("{}{}", public[1], public[0]))]);
    let actions = plan(&world, &Scope::All, &BTreeMap::new(), &repeated);
    let copies = created(&actions);
    let a = pem_of(copies[&target("team-a")]);
    assert_eq!(a, pem_of(copies[&target("team-b")]), "the same bytes");
    assert_eq!(crate::transform::only_certificates(a.as_bytes()), Ok(2));
    // The sources listed the other way round give the same bytes.
    let reordered = super::world::World::from_parts(
        world.policy().clone(),
        [],
        vec![{
            let mut r = world.copy_rules()[0].clone();
            r.spec.sources = Some(vec![tenant_source(), default_cas()]);
            r
        }],
    );
    let mut reordered = reordered;
    reordered.insert_namespaces(world.namespaces().values().cloned());
    let again = plan(&reordered, &Scope::All, &BTreeMap::new(), &repeated);
    assert_eq!(pem_of(created(&again)[&target("team-a")]), a);

    // The copies as written, read back: a resync plans nothing to write.
    let existing: BTreeMap<ObjectKey, Existing> = copies
        .values()
        .map(|copy| {
            let object = copy.object();
            let meta = &object.metadata;
            let mut m = ManagedCopy::from_marks(
                Kind::ConfigMap,
                meta.labels.as_ref().unwrap(),
                meta.annotations.as_ref().unwrap(),
                "5".into(),
                false,
            )
            .unwrap();
            m.actual_hash = Some(object_hash(Kind::ConfigMap, &object));
            (copy.key.clone(), Existing::Managed(m))
        })
        .collect();
    let actions = plan(&world, &Scope::All, &existing, &repeated);
    assert!(
        actions.iter().all(|a| matches!(a, Action::InSync { .. })),
        "{actions:?}"
    );
}

#[test]
fn a_bundle_of_the_default_cas_alone_fills_every_copy() {
    let (public, cas) = public_cas();
    let world = world(vec![default_cas()], cas);
    // It reads no object: its inputs are empty, and still no copy is empty.
    let actions = plan(&world, &Scope::All, &BTreeMap::new(), &contents(vec![]));
    let copies = created(&actions);
    assert_eq!(copies.len(), 2, "{actions:?}");
    for copy in copies.values() {
        assert_eq!(bodies(&pem_of(copy)), bodies(&public.concat()));
    }
}

#[test]
fn the_default_cas_entry_stands_alone_and_once() {
    let (_, cas) = public_cas();
    let invalid = |sources: Vec<BundleSourceSpec>| {
        let world = world(sources, cas.clone());
        Rule::from_copy_rule(&world.copy_rules()[0]).unwrap_err()
    };
    let mixed = BundleSourceSpec {
        key: "ca.crt".into(),
        ..default_cas()
    };
    let err = invalid(vec![mixed]);
    assert_eq!(err.field, "spec.sources[0].defaultCAs");
    let err = invalid(vec![default_cas(), tenant_source(), default_cas()]);
    assert_eq!(
        (err.field.as_str(), err.message.as_str()),
        ("spec.sources[2].defaultCAs", "is listed twice")
    );
    let err = invalid(vec![BundleSourceSpec::default()]);
    assert_eq!(err.field, "spec.sources[0].kind");
    let ok = world(vec![default_cas()], cas.clone());
    let rule = Rule::from_copy_rule(&ok.copy_rules()[0]).unwrap();
    assert_eq!(rule.source_description(), "bundle of the default CAs");
}
