//! NamespacedCopyRules (SPEC §2.2, §9): a team's rule is its namespace's, never more.

use std::collections::BTreeMap;

use super::tests::source;
use super::*;
use crate::{
    copyrule::CopyRule,
    marks,
    model::NamespaceInfo,
    namespaced::{NamespacedCopyRule, NamespacedCopyRuleSpec},
    plan::{ManagedCopy, Policy, Targeting, World},
    tenancy::{NamespacePatterns, TrustPolicy},
};

fn trusting(list: &str) -> TrustPolicy {
    TrustPolicy {
        trusted_namespaces: NamespacePatterns::parse(list).unwrap(),
    }
}

/// Rule `name` of namespace `ns` copying Secret `cred` into `targets`, created at `created`.
fn rule_in(ns: &str, name: &str, targets: &[&str], created: i64) -> CopyRule {
    let mut rule = NamespacedCopyRule::new(
        name,
        NamespacedCopyRuleSpec {
            kind: "Secret".into(),
            source_name: Some("cred".into()),
            namespaces: targets.iter().map(|t| t.to_string()).collect(),
            ..Default::default()
        },
    );
    rule.metadata.namespace = Some(ns.into());
    rule.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(created).unwrap(),
    ));
    rule.as_copy_rule().unwrap()
}

fn namespace(name: &str, accept_from: Option<&str>) -> NamespaceInfo {
    NamespaceInfo {
        name: name.into(),
        resource_version: String::new(),
        labels: Default::default(),
        accept_from: accept_from.map(str::to_string),
        terminating: false,
    }
}

#[test]
fn its_sources_are_its_namespaces_and_its_tier_is_its_namespaces() {
    let cr = rule_in("team-a", "push", &["team-b"], 0);
    assert_eq!(cr.metadata.name.as_deref(), Some("team-a/push"));
    let rule = Rule::from_copy_rule(&cr).unwrap();
    assert_eq!(rule.id, RuleId::Namespaced("team-a/push".into()));
    assert_eq!(rule.id.mark(), "namespacedcopyrule/team-a/push");
    assert_eq!(rule.source_namespace, "team-a");
    assert_eq!(rule.tier, Tier::ConsentedInline, "the lowest until trusted");
    assert!(rule.applies_to(&source("team-a", "cred", &[], &[])));
    assert!(!rule.applies_to(&source("team-b", "cred", &[], &[])));

    // Untrusted: the target's consent decides, as for an inline rule there.
    let untrusted = rule.clone().tiered(&trusting("platform")).unwrap();
    assert_eq!(untrusted.tier, Tier::ConsentedInline);
    assert!(!untrusted.consented_by(&namespace("team-b", None)));
    assert!(!untrusted.consented_by(&namespace("team-b", Some("team-c"))));
    assert!(untrusted.consented_by(&namespace("team-b", Some("team-*"))));
    // Trusted: as the trusted inline rule of its namespace, below CopyRules.
    let trusted = rule.tiered(&trusting("team-a")).unwrap();
    assert_eq!(trusted.tier, Tier::TrustedInline);
    assert!(Tier::CopyRule < trusted.tier);
    // A CopyRule keeps its own tier whatever the trust.
    let mut copy_rule = cr.clone();
    copy_rule.metadata.namespace = None;
    copy_rule.metadata.name = Some("push".into());
    let copy_rule = Rule::from_copy_rule(&copy_rule).unwrap();
    assert_eq!(
        copy_rule.tiered(&trusting("")).unwrap().tier,
        Tier::CopyRule
    );
}

#[test]
fn it_never_copies_rbac_nor_another_kind_from_an_untrusted_namespace() {
    let rb = crate::model::Kind::register(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
    )
    .unwrap();
    let np = crate::model::Kind::register(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
    )
    .unwrap();
    let of_kind = |kind: crate::model::Kind| {
        let mut cr = rule_in("team-a", "push", &["team-b"], 0);
        cr.spec.api_version = Some(format!("{}/v1", kind.group()));
        cr.spec.kind = kind.as_str().into();
        cr
    };
    let e = Rule::from_copy_rule(&of_kind(rb)).unwrap_err();
    assert_eq!(e.field, "spec.kind");
    assert!(e.message.contains("never copies"), "{e}");
    // Even from a trusted namespace.
    let set = RuleSet::build([], [&of_kind(rb)], &trusting("*"));
    assert!(set.rules.is_empty());
    assert!(set.invalid_copy_rules.contains_key("team-a/push"));
    // A NetworkPolicy: from a trusted namespace only; consent never suffices.
    let e = Rule::from_copy_rule(&of_kind(np))
        .unwrap()
        .tiered(&trusting("platform"))
        .unwrap_err();
    assert_eq!(e.field, "spec.kind");
    let set = RuleSet::build([], [&of_kind(np)], &trusting("team-a"));
    assert_eq!(set.rules.len(), 1);
    // What reaches beyond its namespace is a CopyRule's only.
    let mut bundle = rule_in("team-a", "push", &["team-b"], 0);
    bundle.spec.create_once = true;
    assert_eq!(Rule::from_copy_rule(&bundle).unwrap_err().field, "spec");
}

#[test]
fn the_count_cap_counts_a_namespaces_rules_with_its_sources() {
    let caps = SourceCaps {
        per_namespace: 2,
        ..SourceCaps::default()
    };
    let trust = trusting("platform");
    let opted = [(marks::SOURCE_LABEL, "true")];
    let annotated = [(marks::NAMESPACES_ANNOTATION, "team-b")];
    let old_source = SourceInfo {
        created: 1,
        ..source("team-a", "old", &opted, &annotated)
    };
    let new_source = SourceInfo {
        created: 4,
        ..source("team-a", "new", &opted, &annotated)
    };
    let rules = [
        rule_in("team-a", "second", &["team-b"], 2),
        rule_in("team-a", "third", &["team-b"], 3),
        // Another namespace's, and a trusted namespace's, count elsewhere or not at all.
        rule_in("team-c", "own", &["team-b"], 0),
        rule_in("platform", "p1", &["team-b"], 0),
        rule_in("platform", "p2", &["team-b"], 0),
        rule_in("platform", "p3", &["team-b"], 0),
    ];
    let set = RuleSet::build_capped([&old_source, &new_source], &rules, &trust, &caps);
    let acting: Vec<String> = set.rules.iter().map(|r| r.id.to_string()).collect();
    assert_eq!(
        acting,
        [
            "NamespacedCopyRule platform/p1",
            "NamespacedCopyRule platform/p2",
            "NamespacedCopyRule platform/p3",
            "NamespacedCopyRule team-c/own",
            "inline rule of Secret team-a/old",
            "NamespacedCopyRule team-a/second",
        ],
        "trusted first, then oldest first; of team-a only the oldest two, old and second"
    );
    assert_eq!(
        set.capped_rules.keys().collect::<Vec<_>>(),
        [&RuleId::Namespaced("team-a/third".into())]
    );
    assert!(set.capped_sources.contains_key(&new_source.key));

    // A capped rule's copies stay as they are: neither written nor deleted.
    let mut world = World::from_parts(
        Policy {
            trust,
            caps,
            ..Policy::default()
        },
        [old_source, new_source],
        rules.to_vec(),
    );
    world.insert_namespaces([namespace("team-b", Some("team-a"))]);
    assert!(
        world
            .unreadable()
            .capped_rules
            .contains(&RuleId::Namespaced("team-a/third".into()))
    );
}

#[test]
fn it_never_targets_copyrators_own_namespace() {
    let policy = Policy {
        own_namespace: Some("copyrator".into()),
        trust: trusting("*"),
        ..Policy::default()
    };
    let world = World::from_parts(
        policy,
        [],
        vec![rule_in("team-a", "push", &["copyrator", "team-b"], 0)],
    );
    let rule = &world.rules().rules[0];
    assert_eq!(
        world.targeting(rule, &namespace("copyrator", Some("*"))),
        Targeting::ExcludedGlobally
    );
    assert!(matches!(
        world.targeting(rule, &namespace("team-b", None)),
        Targeting::Wanted(_)
    ));
}

#[test]
fn a_copys_mark_names_a_rule_of_its_sources_namespace_only() {
    let parse = |rule: &str| {
        let annotations: BTreeMap<String, String> = [
            (marks::SOURCE_ANNOTATION, "team-a/cred"),
            (marks::RULE_ANNOTATION, rule),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        ManagedCopy::from_marks(
            crate::model::Kind::Secret,
            &BTreeMap::new(),
            &annotations,
            "1".into(),
            false,
        )
        .map(|m| m.rule.clone())
    };
    assert_eq!(
        parse("namespacedcopyrule/team-a/push"),
        Ok(RuleId::Namespaced("team-a/push".into()))
    );
    // A rule of another namespace never makes a copy of team-a's source.
    assert!(parse("namespacedcopyrule/team-b/push").is_err());
    assert!(parse("namespacedcopyrule/team-a").is_err());
    assert!(parse("namespacedcopyrule/team-a/Not_A_Name").is_err());
}

/// Rule `name` of namespace `ns` making a JKS store of Secret `cred`'s `ca.crt`, its password
/// read from Secret `platform/store-password`.
fn rule_reading_a_password(ns: &str, name: &str) -> CopyRule {
    use crate::copyrule::{FormatsSpec, KeySpec, PasswordSecretRef, TargetSpec, TruststoreSpec};
    let mut rule = rule_in(ns, name, &["team-b"], 0);
    rule.spec.keys = Some(vec![KeySpec::Name("ca.crt".into())]);
    rule.spec.target = Some(TargetSpec {
        formats: Some(FormatsSpec {
            from: None,
            pkcs12: None,
            jks: Some(TruststoreSpec {
                key: "truststore.jks".into(),
                password: None,
                password_secret_ref: Some(PasswordSecretRef {
                    namespace: "platform".into(),
                    name: "store-password".into(),
                    key: "jks".into(),
                }),
            }),
        }),
        ..Default::default()
    });
    rule
}

#[test]
fn a_tenants_rule_never_reads_a_stores_password_from_a_secret() {
    let trust = trusting("platform");
    let tenants = rule_reading_a_password("team-a", "stores");
    let e = Rule::from_copy_rule(&tenants)
        .unwrap()
        .tiered(&trust)
        .unwrap_err();
    assert_eq!(e.field, "spec.target.formats.jks.passwordSecretRef");
    assert!(e.message.contains("not trusted"), "{e}");
    assert!(e.message.contains("give the password itself"), "{e}");
    // Said the same whatever the Secret: nothing was read to say it.
    assert!(!e.message.contains("store-password"), "{e}");
    // Invalid: no job reads the Secret for it, nor labels it.
    let set = RuleSet::build([], [&tenants], &trust);
    assert!(set.rules.is_empty());
    assert_eq!(set.invalid_copy_rules["team-a/stores"], e);

    // The platform's own rule, and a CopyRule, read it.
    let platforms = rule_reading_a_password("platform", "stores");
    let mut copy_rule = tenants.clone();
    copy_rule.metadata.namespace = None;
    copy_rule.metadata.name = Some("stores".into());
    let set = RuleSet::build([], [&platforms, &copy_rule], &trust);
    assert!(set.invalid_copy_rules.is_empty(), "{set:?}");
    assert_eq!(set.rules.len(), 2);
    assert!(set.rules.iter().all(|r| r.password_refs().count() == 1));
}
