//! `explain` of a bundle's copy (SPEC §11, §3.2 Bundles): the copy is the rule's, and each
//! source read is shown taken or left out in each namespace, for the planner's own reasons.

use std::{collections::BTreeMap, sync::Arc};

use super::*;
use crate::{
    bundle::{BundleInput, LeftOut, certificates},
    copyrule::{BundleSourceSpec, CopyRule, CopyRuleSpec, TargetSpec},
    model::Kind,
    plan::{Contents, Policy},
    tenancy::{NamespacePatterns, TrustPolicy},
    transform::certificates::tests::ca,
};

fn owner() -> ObjectKey {
    ObjectKey::bundle(Kind::ConfigMap, "trust")
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

fn secret(ns: &str, name: &str) -> ObjectKey {
    ObjectKey::new(Kind::Secret, ns, name)
}

/// A bundle `trust` of `platform/root` (trusted), `tenant/extra` (not) and `platform/bare`
/// (lacking the key), into team-a (which accepts copies from tenant) and team-b (which does
/// not). The tenant's Secret is known to the world, as `explain source` loads it.
fn world() -> World {
    let mut rule = CopyRule::new(
        "trust",
        CopyRuleSpec {
            kind: "ConfigMap".into(),
            sources: Some(vec![
                entry("platform", "root"),
                entry("tenant", "extra"),
                entry("platform", "bare"),
            ]),
            namespaces: vec!["team-a".into(), "team-b".into()],
            target_name: Some("ca-bundle".into()),
            target: Some(TargetSpec {
                key: Some("ca-bundle.pem".into()),
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
    let extra = SourceInfo {
        key: secret("tenant", "extra"),
        uid: "uid-extra".into(),
        resource_version: "3".into(),
        labels: Default::default(),
        annotations: Default::default(),
        created: 1,
        deleting: false,
        dropped: None,
    };
    let mut world = World::from_parts(policy, [extra], vec![rule]);
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
        source: secret(ns, name),
        key: "ca.crt".into(),
        read: read.map(|pem| certificates(pem.as_bytes()).unwrap()),
    }
}

/// The sources read, per entry, and the planner's contents made of them.
fn read() -> (Bundles, Contents) {
    let reads = BundleReads {
        entries: vec![
            vec![input("platform", "root", Ok(&ca("root").0))],
            vec![input("tenant", "extra", Ok(&ca("extra").0))],
            vec![input("platform", "bare", Err(LeftOut::NoKey))],
        ],
        read_at: 1_900_000_000,
    };
    let mut contents = Contents::default();
    contents.bundles.insert(owner(), Arc::new(reads.inputs()));
    (Bundles::from([(owner(), reads)]), contents)
}

/// Each object shown: `kind ns/name: code (certificates)`.
fn shown(f: &Finding) -> Vec<String> {
    f.bundle
        .as_ref()
        .unwrap()
        .entries
        .iter()
        .flat_map(|e| e.objects.clone().unwrap_or_default())
        .map(|o| {
            format!(
                "{}: {} ({:?})",
                o.source.namespaced_name(),
                o.code(),
                o.read.ok()
            )
        })
        .collect()
}

fn one(e: &Explanation) -> &Finding {
    assert_eq!(e.findings.len(), 1, "{e:#?}");
    &e.findings[0]
}

#[test]
fn a_bundle_copy_shows_each_source_taken_or_left_out_in_its_namespace() {
    let world = world();
    let (bundles, contents) = read();
    let explained = |ns: &str| {
        let focus = Focus::Namespace(ns.into());
        explain(&world, &focus, &BTreeMap::new(), &contents, &[], &bundles)
    };

    let b = explained("team-b");
    let f = one(&b);
    assert_eq!(f.source, Some(owner()), "the copy's source is its rule");
    assert_eq!(
        f.target,
        Some(ObjectKey::new(Kind::ConfigMap, "team-b", "ca-bundle"))
    );
    assert_eq!(f.action(), Planned::Create);
    assert_eq!(
        shown(f),
        [
            "platform/root: Taken (Some(1))",
            "tenant/extra: NotTrusted (Some(1))",
            "platform/bare: KeyNotFound (None)",
        ]
    );
    let sources = f.bundle.as_ref().unwrap();
    assert_eq!(sources.certificates, Some(1));
    assert_eq!(sources.entries.len(), 3, "one per entry of spec.sources");
    assert!(
        f.message
            .ends_with("the copy's ca-bundle.pem holds 1 certificate, from 1 of 3 sources: Secret platform/root"),
        "{}",
        f.message
    );
    let tenant = &sources.entries[1].objects.as_ref().unwrap()[0];
    assert!(
        tenant
            .describe("team-b")
            .contains("team-b does not accept copies from it"),
        "{}",
        tenant.describe("team-b")
    );

    // team-a accepts copies from the tenant: its certificate is taken there.
    let a = explained("team-a");
    let f = one(&a);
    assert_eq!(
        shown(f),
        [
            "platform/root: Taken (Some(1))",
            "tenant/extra: Taken (Some(1))",
            "platform/bare: KeyNotFound (None)",
        ]
    );
    assert_eq!(f.bundle.as_ref().unwrap().certificates, Some(2));

    // A namespace the rule does not select: no copy, so no sources to show.
    let mut world = world;
    world.insert_namespaces([NamespaceInfo {
        name: "team-c".into(),
        resource_version: "1".into(),
        labels: Default::default(),
        accept_from: None,
        terminating: false,
    }]);
    let focus = Focus::Namespace("team-c".into());
    let c = explain(&world, &focus, &BTreeMap::new(), &contents, &[], &bundles);
    let f = one(&c);
    assert!(matches!(f.verdict, Verdict::NotSelected(_)), "{f:#?}");
    assert_eq!(f.bundle, None);
}

#[test]
fn a_bundle_copy_whose_sources_were_not_read_lists_its_entries_only() {
    let world = world();
    let focus = Focus::Namespace("team-b".into());
    let e = explain(
        &world,
        &focus,
        &BTreeMap::new(),
        &Contents::default(),
        &[],
        &Bundles::new(),
    );
    let f = one(&e);
    assert_eq!(f.action(), Planned::ReadSource);
    let sources = f.bundle.as_ref().unwrap();
    assert_eq!(sources.certificates, None);
    assert_eq!(sources.entries.len(), 3);
    assert!(sources.entries.iter().all(|e| e.objects.is_none()));
}

#[test]
fn a_bundle_source_explained_shows_where_it_is_taken_and_where_trust_leaves_it_out() {
    let world = world();
    let (bundles, contents) = read();
    let focus = Focus::Source(secret("tenant", "extra"));
    let e = explain(&world, &focus, &BTreeMap::new(), &contents, &[], &bundles);
    let by_ns: Vec<(String, Vec<String>)> = e
        .findings
        .iter()
        .map(|f| (f.target.as_ref().unwrap().namespace.clone(), shown(f)))
        .collect();
    assert_eq!(
        by_ns,
        [
            (
                "team-a".to_string(),
                vec!["tenant/extra: Taken (Some(1))".to_string()]
            ),
            (
                "team-b".to_string(),
                vec!["tenant/extra: NotTrusted (Some(1))".to_string()]
            ),
        ]
    );
    assert!(
        e.findings.iter().all(|f| f.action() == Planned::Create),
        "the bundle's copies are planned as a job plans them: {e:#?}"
    );
    // A source no bundle reads has no bundle finding.
    let focus = Focus::Source(secret("tenant", "other"));
    let e = explain(&world, &focus, &BTreeMap::new(), &contents, &[], &bundles);
    assert!(e.findings.is_empty(), "{e:#?}");
}
