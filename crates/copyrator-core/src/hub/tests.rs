//! What a hub places on a member, how a link's settings parse, and the marks of a hub's copy.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::*;
use crate::{
    copyrule::{ClusterPlacement, CopyRule, CopyRuleSpec},
    marks,
    plan::{ManagedCopy, MarksError},
    rules::{RuleId, check_placement},
    tenancy::Tier,
};

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn selector(pairs: &[(&str, &str)]) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_labels: Some(map(pairs)),
        match_expressions: None,
    })
}

fn placed_spec(names: &[&str], sel: Option<LabelSelector>) -> CopyRuleSpec {
    CopyRuleSpec {
        kind: "Secret".into(),
        source_namespace: "platform".into(),
        source_name: Some("cred".into()),
        namespace_selector: selector(&[("registry", "enabled")]),
        clusters: Some(ClusterPlacement {
            names: names.iter().map(|n| n.to_string()).collect(),
            selector: sel,
        }),
        ..Default::default()
    }
}

fn link(ceiling: CeilingSpec) -> HubLink {
    use base64::Engine as _;
    let (ca, _) = crate::transform::certificates::tests::ca("hub");
    HubLink::new(
        "hub-a",
        HubLinkSpec {
            server: "https://hub.example:6443".into(),
            ca_bundle: base64::engine::general_purpose::STANDARD.encode(ca),
            credential_secret: CredentialSecretRef {
                name: "hub-a-credential".into(),
                key: None,
            },
            cluster_name: "member-1".into(),
            cluster_profile_namespace: None,
            ceiling,
        },
    )
}

fn ceiling() -> CeilingSpec {
    CeilingSpec {
        source_namespaces: vec!["platform".into(), "team-*".into()],
        trusted_source_namespaces: vec!["platform".into()],
        kinds: vec![],
        namespace_selector: LabelSelector {
            match_labels: Some(map(&[("hub", "allowed")])),
            match_expressions: None,
        },
    }
}

/// A placement case: its name, the rule, the member's ClusterProfile labels, whether placed.
type PlacementCase<'a> = (
    &'a str,
    CopyRuleSpec,
    Option<&'a BTreeMap<String, String>>,
    bool,
);

#[test]
fn a_rule_is_placed_by_name_or_by_the_labels_of_the_clusters_profile() {
    let prod = map(&[("env", "prod")]);
    let cases: &[PlacementCase] = &[
        ("named", placed_spec(&["member-1"], None), None, true),
        (
            "another named",
            placed_spec(&["member-2"], None),
            None,
            false,
        ),
        (
            "selected by its profile's labels",
            placed_spec(&[], selector(&[("env", "prod")])),
            Some(&prod),
            true,
        ),
        (
            "a selector, and no profile",
            placed_spec(&[], selector(&[("env", "prod")])),
            None,
            false,
        ),
        (
            "not matched",
            placed_spec(&[], selector(&[("env", "dev")])),
            Some(&prod),
            false,
        ),
        (
            "no spec.clusters",
            CopyRuleSpec::default(),
            Some(&prod),
            false,
        ),
    ];
    for (name, spec, labels, want) in cases {
        assert_eq!(placed_on(spec, "member-1", *labels), *want, "{name}");
    }
}

#[test]
fn a_placed_rule_names_one_secret_or_configmap() {
    let ok = placed_spec(&["member-1"], None);
    assert_eq!(check_placement(&ok), Ok(()));
    let cases: Vec<(&str, CopyRuleSpec, &str)> = vec![
        ("placed nowhere", placed_spec(&[], None), "spec.clusters"),
        (
            "a selector of sources",
            CopyRuleSpec {
                source_name: None,
                source_selector: selector(&[("a", "b")]),
                ..ok.clone()
            },
            "spec.sourceName",
        ),
        (
            "a bundle",
            CopyRuleSpec {
                sources: Some(vec![]),
                ..ok.clone()
            },
            "spec.sources",
        ),
        (
            "a template",
            CopyRuleSpec {
                template: Some(Default::default()),
                ..ok.clone()
            },
            "spec.template",
        ),
        (
            "another kind",
            CopyRuleSpec {
                api_version: Some("rbac.authorization.k8s.io/v1".into()),
                kind: "RoleBinding".into(),
                ..ok.clone()
            },
            "spec.kind",
        ),
        (
            "a bad cluster name",
            placed_spec(&["Not A Name"], None),
            "spec.clusters.names",
        ),
    ];
    for (name, spec, field) in cases {
        let err = check_placement(&spec).expect_err(name);
        assert_eq!(err.field, field, "{name}: {err}");
    }
    // The rule as a whole: the same namespace name on the hub and on members is fine.
    let mut same = placed_spec(&["member-1"], None);
    same.namespaces = vec!["platform".into()];
    assert!(crate::rules::Rule::from_copy_rule(&CopyRule::new("r", same)).is_ok());
}

#[test]
fn a_placed_rule_becomes_a_member_rule_within_the_ceiling() {
    let settings = LinkSettings::from_link(&link(ceiling())).expect("valid link");
    let rule = |name: &str, ns: &str, kind: &str| {
        let mut spec = placed_spec(&["member-1"], None);
        spec.source_namespace = ns.into();
        spec.kind = kind.into();
        spec.conflict_policy = crate::copyrule::ConflictPolicy::Overwrite;
        CopyRule::new(name, spec)
    };
    let mut configmap_only = settings.clone();
    configmap_only.kinds = vec![crate::model::Kind::ConfigMap];
    let placement = place(
        &settings,
        None,
        &[
            rule("a", "platform", "Secret"),
            rule("b", "team-x", "Secret"),
            rule("c", "kube-system", "Secret"),
        ],
    );
    let ids: Vec<(RuleId, Tier, &str)> = placement
        .rules
        .iter()
        .map(|r| (r.id.clone(), r.tier, r.source_namespace.as_str()))
        .collect();
    assert_eq!(
        ids,
        [
            (
                RuleId::Hub {
                    link: "hub-a".into(),
                    rule: "a".into()
                },
                Tier::Hub,
                "hub-a/platform"
            ),
            (
                RuleId::Hub {
                    link: "hub-a".into(),
                    rule: "b".into()
                },
                Tier::ConsentedInline,
                "hub-a/team-x"
            ),
        ]
    );
    assert!(
        placement
            .rules
            .iter()
            .all(|r| r.conflict_policy == crate::copyrule::ConflictPolicy::Skip),
        "a hub never overwrites what the member owns"
    );
    assert_eq!(placement.refused.len(), 1);
    assert_eq!(
        placement.refused[0].refusal,
        Refusal::SourceNamespace("kube-system".into())
    );
    let refused = place(&configmap_only, None, &[rule("a", "platform", "Secret")]);
    assert_eq!(
        refused.refused[0].refusal,
        Refusal::Kind(crate::model::Kind::Secret)
    );
    assert!(refused.refused[0].refusal.to_string().contains("ceiling"));
}

#[test]
fn a_link_follows_a_bounded_number_of_sources() {
    let settings = LinkSettings::from_link(&link(ceiling())).unwrap();
    let rules: Vec<CopyRule> = (0..MAX_PLACED_SOURCES + 3)
        .map(|i| {
            let mut spec = placed_spec(&["member-1"], None);
            spec.source_name = Some(format!("cred-{i:04}"));
            CopyRule::new(&format!("r-{i:04}"), spec)
        })
        .collect();
    let placement = place(&settings, None, &rules);
    assert_eq!(placement.rules.len(), MAX_PLACED_SOURCES);
    assert_eq!(placement.refused.len(), 3);
    assert!(
        placement
            .refused
            .iter()
            .all(|r| r.refusal == Refusal::TooMany)
    );
}

#[test]
fn a_links_settings_are_checked_naming_the_field() {
    assert!(LinkSettings::from_link(&link(ceiling())).is_ok());
    let mut bad_kind = ceiling();
    bad_kind.kinds = vec!["RoleBinding".into()];
    let mut bad_pattern = ceiling();
    bad_pattern.source_namespaces = vec!["Not A Namespace".into()];
    let cases: Vec<(&str, HubLink, &str)> = vec![
        (
            "a kind that is not data",
            link(bad_kind),
            "spec.ceiling.kinds",
        ),
        (
            "a bad pattern",
            link(bad_pattern),
            "spec.ceiling.sourceNamespaces",
        ),
        (
            "plain http",
            {
                let mut l = link(ceiling());
                l.spec.server = "http://hub:6443".into();
                l
            },
            "spec.server",
        ),
        (
            "a CA that is not PEM certificates",
            {
                let mut l = link(ceiling());
                l.spec.ca_bundle = "bm90IGEgY2VydA==".into();
                l
            },
            "spec.caBundle",
        ),
        (
            "a name that cannot be a mark",
            {
                let mut l = link(ceiling());
                l.metadata.name = Some("hub.a".into());
                l
            },
            "metadata.name",
        ),
        (
            "a profile namespace that is a path",
            {
                let mut l = link(ceiling());
                l.spec.cluster_profile_namespace = Some("members/../secrets".into());
                l
            },
            "spec.clusterProfileNamespace",
        ),
    ];
    for (name, l, field) in cases {
        let err = LinkSettings::from_link(&l).expect_err(name);
        assert_eq!(err.field, field, "{name}: {err}");
    }
}

#[test]
fn a_hub_copys_marks_name_hub_and_source_and_local_marks_stay_as_they_are() {
    let labels = map(&[(marks::MANAGED_BY_LABEL, marks::MANAGED_BY_VALUE)]);
    let parse = |source: &str, rule: &str| {
        let annotations = map(&[
            (marks::SOURCE_ANNOTATION, source),
            (marks::RULE_ANNOTATION, rule),
        ]);
        ManagedCopy::from_marks(
            crate::model::Kind::Secret,
            &labels,
            &annotations,
            "1".into(),
            false,
        )
        .map(|m| (m.source.clone(), m.rule.clone()))
    };
    let secret = crate::model::Kind::Secret;
    assert_eq!(
        parse("hub-a/platform/cred", "hub-a/copyrule/registry"),
        Ok((
            ObjectKey::hub(secret, "hub-a", "platform", "cred"),
            RuleId::Hub {
                link: "hub-a".into(),
                rule: "registry".into()
            }
        ))
    );
    assert_eq!(
        parse("hub-a/platform/cred", "hub-a/copyrule/registry")
            .unwrap()
            .0
            .namespaced_name(),
        "hub-a/platform/cred"
    );
    // Local copies, as before.
    assert_eq!(
        parse("platform/cred", "copyrule/registry"),
        Ok((
            ObjectKey::new(secret, "platform", "cred"),
            RuleId::CopyRule("registry".into())
        ))
    );
    assert_eq!(
        parse("platform/cred", "inline"),
        Ok((
            ObjectKey::new(secret, "platform", "cred"),
            RuleId::Inline(ObjectKey::new(secret, "platform", "cred"))
        ))
    );
    let malformed: &[(&str, &str, MarksError)] = &[
        (
            "hub-a/platform/cred",
            "hub-b/copyrule/registry",
            MarksError::BadRule,
        ),
        (
            "hub-a/platform/cred",
            "copyrule/registry",
            MarksError::BadRule,
        ),
        ("hub-a/platform/cred", "inline", MarksError::BadRule),
        (
            "platform/cred",
            "hub-a/copyrule/registry",
            MarksError::BadRule,
        ),
        (
            "hub.a/platform/cred",
            "hub.a/copyrule/r",
            MarksError::BadSource,
        ),
        (
            "hub-a/Plat form/cred",
            "hub-a/copyrule/r",
            MarksError::BadSource,
        ),
        (
            "hub-a/platform/cred/x",
            "hub-a/copyrule/r",
            MarksError::BadSource,
        ),
        ("hub-a//cred", "hub-a/copyrule/r", MarksError::BadSource),
    ];
    for (source, rule, want) in malformed {
        assert_eq!(parse(source, rule), Err(want.clone()), "{source} {rule}");
    }
}

#[test]
fn a_hub_sources_key_is_never_a_key_of_this_cluster() {
    let key = ObjectKey::hub(crate::model::Kind::Secret, "hub-a", "platform", "cred");
    assert!(
        key.is_hub() && !key.is_valid(),
        "never read or written here"
    );
    assert_eq!(key.hub_parts(), Some(("hub-a", "platform")));
    assert_eq!(
        key.on_hub(),
        ObjectKey::new(crate::model::Kind::Secret, "platform", "cred")
    );
    assert!(!key.on_hub().is_hub());
}
