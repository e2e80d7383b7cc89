//! Table tests of rule parsing and validation (SPEC §2.1, §2.2, §3.2, §9).

use std::collections::BTreeSet;

use super::*;
use crate::copyrule::CopyRuleSpec;
use crate::{
    copyrule::{ConflictPolicy, CopyRule, DeletionPolicy},
    marks,
    model::{Kind, NamespaceInfo, ObjectKey, SourceInfo},
    tenancy::{Tier, TrustPolicy},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

pub(crate) fn source(
    ns: &str,
    name: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
) -> SourceInfo {
    SourceInfo {
        key: ObjectKey::new(Kind::Secret, ns, name),
        uid: format!("uid-{ns}-{name}"),
        resource_version: "1".into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        annotations: annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        created: 0,
        deleting: false,
        dropped: None,
    }
}

fn ns(name: &str, labels: &[(&str, &str)]) -> NamespaceInfo {
    NamespaceInfo {
        name: name.into(),
        resource_version: String::new(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        accept_from: None,
        terminating: false,
    }
}

fn spec() -> CopyRuleSpec {
    CopyRuleSpec {
        api_version: None,
        kind: "ConfigMap".into(),
        source_namespace: "platform".into(),
        sources: None,
        drop_expired: false,
        template: None,
        create_once: false,
        source_name: Some("shared".into()),
        source_selector: None,
        namespace_selector: Some(LabelSelector {
            match_labels: Some([("team".to_string(), "a".to_string())].into()),
            match_expressions: None,
        }),
        namespaces: vec![],
        exclude_namespaces: vec![],
        target_name: None,
        deletion_policy: DeletionPolicy::Delete,
        conflict_policy: ConflictPolicy::Skip,
        image_pull_secret: false,
        read_only: None,
        keys: None,
        target: None,
        clusters: None,
    }
}

fn copy_rule(spec: CopyRuleSpec) -> CopyRule {
    CopyRule::new("r", spec)
}

#[test]
fn unlabelled_source_has_no_inline_rule() {
    let s = source("default", "s", &[], &[(marks::NAMESPACES_ANNOTATION, "a")]);
    assert_eq!(Rule::inline(&s), Ok(None));
}

#[test]
fn inline_rule_from_annotations() {
    let s = source(
        "platform",
        "registry-cred",
        &[(marks::SOURCE_LABEL, "true")],
        &[
            (
                marks::NAMESPACE_SELECTOR_ANNOTATION,
                "registry=enabled,env in (prod,staging)",
            ),
            (marks::NAMESPACES_ANNOTATION, "team-a, team-b,"),
        ],
    );
    let rule = Rule::inline(&s).unwrap().unwrap();
    assert_eq!(rule.id.mark(), "inline");
    assert!(rule.targets_namespace(&ns("team-a", &[])));
    assert!(rule.targets_namespace(&ns("x", &[("registry", "enabled"), ("env", "prod")])));
    assert!(!rule.targets_namespace(&ns("x", &[("registry", "enabled")])));
    assert!(!rule.targets_namespace(&ns("platform", &[("registry", "enabled"), ("env", "prod")])));
    assert!(rule.selects_source(&s));
}

#[test]
fn an_untrusted_namespace_copies_no_powerful_kind_even_with_consent() {
    let np = Kind::register(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
    )
    .unwrap();
    let mut s = source(
        "tenant",
        "deny-all",
        &[(marks::SOURCE_LABEL, "true")],
        &[(marks::NAMESPACES_ANNOTATION, "victim")],
    );
    s.key.kind = np;
    let trust = TrustPolicy {
        trusted_namespaces: tenancy::NamespacePatterns::parse("platform").unwrap(),
    };
    let e = Rule::inline_tiered(&s, &trust).unwrap_err();
    assert_eq!(e.field, marks::SOURCE_LABEL);
    assert!(e.message.contains("never suffices"), "{e}");
    let set = RuleSet::build([&s], [], &trust);
    assert!(set.rules.is_empty());
    assert!(set.invalid_sources.contains_key(&s.key));
    // A Secret of the same namespace is a consented inline rule, as before.
    s.key.kind = Kind::Secret;
    let rule = Rule::inline_tiered(&s, &trust).unwrap().unwrap();
    assert_eq!(rule.tier, Tier::ConsentedInline);
    // From a trusted namespace the NetworkPolicy is copied.
    s.key.kind = np;
    s.key.namespace = "platform".into();
    let rule = Rule::inline_tiered(&s, &trust).unwrap().unwrap();
    assert_eq!(rule.tier, Tier::TrustedInline);
}

#[test]
fn copy_rules_name_any_registered_kind_by_api_version() {
    Kind::register(
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
    )
    .unwrap();
    let mut spec = spec();
    spec.api_version = Some("rbac.authorization.k8s.io/v1".into());
    spec.kind = "RoleBinding".into();
    let rule = Rule::from_copy_rule(&CopyRule::new("r", spec.clone())).unwrap();
    assert_eq!(rule.kind.plural(), "rolebindings");
    spec.api_version = None;
    let e = Rule::from_copy_rule(&CopyRule::new("r", spec.clone())).unwrap_err();
    assert_eq!(e.field, "spec.kind");
    assert!(e.message.contains("--copy-kinds"), "{e}");
    spec.kind = "Pod".into();
    let e = Rule::from_copy_rule(&CopyRule::new("r", spec)).unwrap_err();
    assert!(e.message.contains("never copied"), "{e}");
}

#[test]
fn labelled_source_without_annotations_targets_nothing() {
    let s = source("default", "s", &[(marks::SOURCE_LABEL, "true")], &[]);
    let rule = Rule::inline(&s).unwrap().unwrap();
    assert!(!rule.has_targets());
}

#[test]
fn image_pull_secret_is_asked_by_annotation_or_spec_and_only_for_secrets() {
    let with = |kind: Kind, value: &str| {
        let mut s = source(
            "default",
            "s",
            &[(marks::SOURCE_LABEL, "true")],
            &[(marks::IMAGE_PULL_SECRET_ANNOTATION, value)],
        );
        s.key.kind = kind;
        Rule::inline(&s)
    };
    assert!(
        with(Kind::Secret, "true")
            .unwrap()
            .unwrap()
            .image_pull_secret
    );
    assert!(
        !with(Kind::Secret, "false")
            .unwrap()
            .unwrap()
            .image_pull_secret
    );
    let plain = source("default", "s", &[(marks::SOURCE_LABEL, "true")], &[]);
    assert!(!Rule::inline(&plain).unwrap().unwrap().image_pull_secret);
    let e = with(Kind::ConfigMap, "true").unwrap_err();
    assert_eq!(e.field, marks::IMAGE_PULL_SECRET_ANNOTATION);
    assert!(e.to_string().contains("only for Secrets"), "{e}");
    let e = with(Kind::Secret, "yes").unwrap_err();
    assert!(e.to_string().contains("\"true\" or \"false\""), "{e}");

    let mut secret = spec();
    secret.kind = "Secret".into();
    secret.image_pull_secret = true;
    let rule = Rule::from_copy_rule(&CopyRule::new("r", secret)).unwrap();
    assert!(rule.image_pull_secret);
    let mut config_map = spec();
    config_map.image_pull_secret = true;
    let e = Rule::from_copy_rule(&CopyRule::new("r", config_map)).unwrap_err();
    assert_eq!(e.field, "spec.imagePullSecret");
}

#[test]
fn read_only_is_asked_by_annotation_or_spec() {
    let with = |value: &str| {
        let s = source(
            "default",
            "s",
            &[(marks::SOURCE_LABEL, "true")],
            &[(marks::READ_ONLY, value)],
        );
        Rule::inline(&s)
    };
    assert!(with("true").unwrap().unwrap().read_only);
    assert!(!with("false").unwrap().unwrap().read_only);
    let plain = source("default", "s", &[(marks::SOURCE_LABEL, "true")], &[]);
    assert!(!Rule::inline(&plain).unwrap().unwrap().read_only);
    let e = with("yes").unwrap_err();
    assert_eq!(e.field, marks::READ_ONLY);
    assert!(e.to_string().contains("\"true\" or \"false\""), "{e}");

    let mut read_only = spec();
    read_only.read_only = Some(true);
    assert!(
        Rule::from_copy_rule(&CopyRule::new("r", read_only))
            .unwrap()
            .read_only
    );
    assert!(
        !Rule::from_copy_rule(&CopyRule::new("r", spec()))
            .unwrap()
            .read_only
    );
}

#[test]
fn invalid_inline_annotations_name_the_annotation() {
    let cases: &[(&str, &str, &str)] = &[
        (
            marks::NAMESPACE_SELECTOR_ANNOTATION,
            "env in prod",
            "expected '('",
        ),
        (marks::NAMESPACE_SELECTOR_ANNOTATION, " ", "is empty"),
        (
            marks::NAMESPACES_ANNOTATION,
            "Team_A",
            "not a valid namespace name",
        ),
        (marks::NAMESPACES_ANNOTATION, "a,default", "own namespace"),
    ];
    for (annotation, value, needle) in cases {
        let s = source(
            "default",
            "s",
            &[(marks::SOURCE_LABEL, "true")],
            &[(annotation, value)],
        );
        let e = Rule::inline(&s).unwrap_err();
        assert_eq!(&e.field, annotation);
        assert!(e.to_string().starts_with(annotation));
        assert!(e.message.contains(needle), "{e} should mention {needle:?}");
    }
}

#[test]
fn copy_rule_validation_names_the_field() {
    let sel = LabelSelector {
        match_labels: Some([("copyrator".to_string(), "true".to_string())].into()),
        match_expressions: None,
    };
    let bad_op = LabelSelector {
        match_labels: None,
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "a".into(),
            operator: "Like".into(),
            values: Some(vec!["x".into()]),
        }]),
    };
    let cases: Vec<(CopyRuleSpec, &str, &str)> = vec![
        (
            CopyRuleSpec {
                source_selector: Some(sel.clone()),
                ..spec()
            },
            "spec.sourceName",
            "mutually exclusive",
        ),
        (
            CopyRuleSpec {
                source_name: None,
                ..spec()
            },
            "spec.sourceName",
            "is required",
        ),
        (
            CopyRuleSpec {
                source_name: None,
                source_selector: Some(sel.clone()),
                target_name: Some("x".into()),
                ..spec()
            },
            "spec.targetName",
            "only allowed with spec.sourceName",
        ),
        (
            CopyRuleSpec {
                namespace_selector: Some(bad_op.clone()),
                ..spec()
            },
            "spec.namespaceSelector",
            "not one of In",
        ),
        (
            CopyRuleSpec {
                source_name: None,
                source_selector: Some(bad_op),
                ..spec()
            },
            "spec.sourceSelector",
            "not one of In",
        ),
        (
            CopyRuleSpec {
                namespaces: vec!["platform".into()],
                ..spec()
            },
            "spec.namespaces",
            "source namespace",
        ),
        (
            CopyRuleSpec {
                namespaces: vec!["Bad".into()],
                ..spec()
            },
            "spec.namespaces",
            "not a valid namespace",
        ),
        (
            CopyRuleSpec {
                exclude_namespaces: vec!["a b".into()],
                ..spec()
            },
            "spec.excludeNamespaces",
            "not a valid namespace",
        ),
        (
            CopyRuleSpec {
                namespace_selector: None,
                ..spec()
            },
            "spec.namespaceSelector",
            "is required",
        ),
        (
            CopyRuleSpec {
                source_namespace: "".into(),
                ..spec()
            },
            "spec.sourceNamespace",
            "not a valid namespace",
        ),
    ];
    for (spec, field, needle) in cases {
        let e = Rule::from_copy_rule(&copy_rule(spec.clone())).expect_err(&format!("{spec:?}"));
        assert_eq!(e.field, field, "{e}");
        assert!(e.message.contains(needle), "{e} should mention {needle:?}");
    }
}

/// SPEC §9.7: of an untrusted namespace's sources the oldest act, up to the cap; one whose
/// labels and annotations are over the byte cap does not; trusted namespaces are not
/// capped.
#[test]
fn caps_hold_back_the_newest_and_the_largest_sources_of_untrusted_namespaces() {
    let caps = SourceCaps {
        per_namespace: 2,
        metadata_bytes: 100,
    };
    let trust = TrustPolicy {
        trusted_namespaces: tenancy::NamespacePatterns::parse("platform").unwrap(),
    };
    let opted = [(marks::SOURCE_LABEL, "true")];
    let annotated = [(marks::NAMESPACES_ANNOTATION, "team-a")];
    let at = |ns: &str, name: &str, created: i64| SourceInfo {
        created,
        ..source(ns, name, &opted, &annotated)
    };
    let big = "x".repeat(200);
    let mut large = at("tenant", "large", 0);
    large
        .annotations
        .insert("example.com/big".into(), big.clone());
    // Tracking metadata is never copied: it does not count.
    let mut applied = at("tenant", "applied", 1);
    applied.annotations.insert(
        "kubectl.kubernetes.io/last-applied-configuration".into(),
        big.clone(),
    );
    let sources = [
        large,
        applied,
        at("tenant", "b", 2),
        at("tenant", "a", 2),
        at("tenant", "newest", 3),
        at("platform", "p1", 1),
        at("platform", "p2", 2),
        at("platform", "p3", 3),
    ];
    // The opt-in label, the namespaces annotation and the big one.
    let large_bytes = marks::SOURCE_LABEL.len()
        + "true".len()
        + marks::NAMESPACES_ANNOTATION.len()
        + "team-a".len()
        + "example.com/big".len()
        + big.len();
    let set = RuleSet::build_capped(&sources, [], &trust, &caps);
    let capped: Vec<(&str, &Capped)> = set
        .capped_sources
        .iter()
        .map(|(k, why)| (k.name.as_str(), why))
        .collect();
    assert_eq!(
        capped,
        [
            ("b", &Capped::PerNamespace),
            ("large", &Capped::MetadataBytes(large_bytes)),
            ("newest", &Capped::PerNamespace),
        ],
        "the oldest two act (applied, then a before b by name)"
    );
    let acting: BTreeSet<&str> = set
        .rules
        .iter()
        .filter_map(|r| match &r.id {
            RuleId::Inline(k) => Some(k.name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(acting, BTreeSet::from(["a", "applied", "p1", "p2", "p3"]));
    // What is kept of a source over the byte cap is its key and opt-in label, and its size.
    let kept = sources[0].clone().kept(Some(caps.metadata_bytes));
    assert!(kept.annotations.is_empty());
    assert_eq!(kept.labels.len(), 1);
    assert_eq!(kept.dropped, Some(large_bytes));
    let again = RuleSet::build_capped([&kept], [], &trust, &caps);
    assert!(matches!(
        again.capped_sources.values().next(),
        Some(Capped::MetadataBytes(_))
    ));
    // Within the cap, only what is never copied is dropped.
    let kept = sources[1].clone().kept(Some(caps.metadata_bytes));
    assert_eq!(kept.dropped, None);
    assert!(
        !kept
            .annotations
            .contains_key("kubectl.kubernetes.io/last-applied-configuration")
    );
    assert!(kept.annotations.contains_key(marks::NAMESPACES_ANNOTATION));
}

#[test]
fn a_copy_is_never_a_source() {
    let copy = source(
        "shared",
        "cacerts",
        &[
            (marks::SOURCE_LABEL, "true"),
            (marks::MANAGED_BY_LABEL, marks::MANAGED_BY_VALUE),
        ],
        &[(marks::NAMESPACE_SELECTOR_ANNOTATION, "")],
    );
    let err = Rule::inline(&copy).unwrap_err();
    assert_eq!(err.field, marks::SOURCE_LABEL);
    assert!(err.message.contains("a copy is never a source"), "{err}");
    // Named by a CopyRule's sourceName: not selected either.
    let rule = Rule::from_copy_rule(&copy_rule(CopyRuleSpec {
        kind: "Secret".into(),
        source_namespace: "shared".into(),
        source_name: Some("cacerts".into()),
        ..spec()
    }))
    .unwrap();
    assert!(!rule.selects_source(&copy));
    let mut original = copy.clone();
    original.labels.remove(marks::MANAGED_BY_LABEL);
    assert!(rule.selects_source(&original));
    let set = RuleSet::build([&copy], [], &TrustPolicy::trust_all());
    assert!(set.rules.is_empty());
    assert!(set.invalid_sources.contains_key(&copy.key));
}

#[test]
fn copy_rule_selects_sources_and_namespaces() {
    let rule = Rule::from_copy_rule(&copy_rule(CopyRuleSpec {
        kind: "Secret".into(),
        source_name: None,
        source_selector: Some(LabelSelector {
            match_labels: Some([("copyrator".to_string(), "true".to_string())].into()),
            match_expressions: None,
        }),
        namespaces: vec!["explicit".into()],
        exclude_namespaces: vec!["sandbox".into()],
        ..spec()
    }))
    .unwrap();
    assert_eq!(rule.id.mark(), "copyrule/r");
    assert!(rule.selects_source(&source("platform", "a", &[("copyrator", "true")], &[])));
    assert!(!rule.selects_source(&source("other", "a", &[("copyrator", "true")], &[])));
    assert!(!rule.selects_source(&source("platform", "a", &[], &[])));
    // A copy never is a source, whatever labels it carried over (SPEC §9.6).
    let copy = source(
        "platform",
        "a",
        &[
            ("copyrator", "true"),
            (marks::MANAGED_BY_LABEL, marks::MANAGED_BY_VALUE),
        ],
        &[],
    );
    assert!(!rule.selects_source(&copy) && !rule.applies_to(&copy));
    assert!(rule.targets_namespace(&ns("explicit", &[])));
    assert!(rule.targets_namespace(&ns("t", &[("team", "a")])));
    assert!(!rule.targets_namespace(&ns("sandbox", &[("team", "a")])));
    assert!(!rule.targets_namespace(&ns("t", &[("team", "b")])));
    assert_eq!(rule.source_description(), "platform/{copyrator=true}");
}

#[test]
fn selection_says_why_a_namespace_is_or_is_not_a_target() {
    let rule = Rule::from_copy_rule(&copy_rule(CopyRuleSpec {
        namespaces: vec!["explicit".into(), "sandbox".into()],
        exclude_namespaces: vec!["sandbox".into()],
        ..spec()
    }))
    .unwrap();
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], Selection);
    let cases: &[Case] = &[
        ("explicit", &[], Selection::Listed),
        ("t", &[("team", "a")], Selection::SelectorMatches),
        ("t", &[("team", "b")], Selection::NotSelected),
        ("platform", &[("team", "a")], Selection::SourceNamespace),
        ("sandbox", &[("team", "a")], Selection::Excluded),
    ];
    for (name, labels, want) in cases {
        let n = ns(name, labels);
        assert_eq!(rule.selection(&n), *want, "{name}");
        assert_eq!(rule.targets_namespace(&n), want.selects(), "{name}");
    }
}

#[test]
fn annotations_without_the_opt_in_label_are_reported_as_ignored() {
    let annotated = [(marks::NAMESPACES_ANNOTATION, "a")];
    let unlabelled = source("default", "s", &[], &annotated);
    assert_eq!(
        ignored_annotations(&unlabelled),
        [marks::NAMESPACES_ANNOTATION]
    );
    let labelled = source("default", "s", &[(marks::SOURCE_LABEL, "true")], &annotated);
    assert!(ignored_annotations(&labelled).is_empty());
    let wrong_value = source("default", "s", &[(marks::SOURCE_LABEL, "yes")], &annotated);
    assert_eq!(ignored_annotations(&wrong_value).len(), 1);
    assert!(ignored_annotations(&source("default", "s", &[], &[])).is_empty());
}

#[test]
fn rule_set_orders_older_rules_first_and_collects_invalid_ones() {
    let mut newer = copy_rule(spec());
    newer.metadata.name = Some("newer".into());
    newer.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(200).unwrap(),
    ));
    let mut older = newer.clone();
    older.metadata.name = Some("older".into());
    older.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(100).unwrap(),
    ));
    let mut invalid = newer.clone();
    invalid.metadata.name = Some("invalid".into());
    invalid.spec.source_name = None;
    let bad_source = source(
        "default",
        "bad",
        &[(marks::SOURCE_LABEL, "true")],
        &[(marks::NAMESPACES_ANNOTATION, "-x")],
    );
    let set = RuleSet::build(
        [&bad_source],
        [&newer, &older, &invalid],
        &TrustPolicy::default(),
    );
    let ids: Vec<_> = set.rules.iter().map(|r| r.id.mark()).collect();
    assert_eq!(ids, ["copyrule/older", "copyrule/newer"]);
    assert!(set.invalid_copy_rules.contains_key("invalid"));
    assert!(set.invalid_sources.contains_key(&bad_source.key));
}
