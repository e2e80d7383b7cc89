//! Kyverno policies as their users write them (`tests/data/kyverno-policies.yaml`), translated:
//! what becomes a CopyRule, and what is reported with its policy and rule.

use std::collections::BTreeMap;

use serde_json::Value;

use super::*;
use crate::{
    cli::Peer,
    migrate::{
        config::{self, Change},
        peers::Targets,
        render,
    },
    plan::Policy as CopyPolicy,
    tenancy::{NamespacePatterns, TrustPolicy},
};

fn fixtures() -> Vec<Value> {
    let text = include_str!("../../../../tests/data/kyverno-policies.yaml");
    serde_saphyr::from_multiple(text).expect("the fixtures parse")
}

fn namespaces(names: &[&str]) -> Vec<NamespaceInfo> {
    names
        .iter()
        .map(|name| NamespaceInfo {
            name: name.to_string(),
            resource_version: String::new(),
            labels: Default::default(),
            accept_from: None,
            terminating: false,
        })
        .collect()
}

fn today() -> Vec<NamespaceInfo> {
    namespaces(&[
        "default",
        "platform",
        "team-a",
        "sandbox-1",
        "sandbox-2",
        "kyverno",
    ])
}

fn intent<'a>(t: &'a Translation, rule: &str) -> &'a Intent {
    t.intents
        .iter()
        .find(|i| i.rule_name.as_deref() == Some(rule))
        .unwrap_or_else(|| panic!("no intent for {rule}: {t:#?}"))
}

fn names(list: &[&str]) -> std::collections::BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn sync_secrets_clones_regcred_into_every_namespace_but_the_excluded() {
    let t = translate(&fixtures(), &today());
    let i = intent(&t, "kyverno-sync-secrets-sync-image-pull-secret");
    assert_eq!(i.source, ObjectKey::new(Kind::Secret, "default", "regcred"));
    assert_eq!(i.target_name, None, "same name as the source");
    assert_eq!(
        i.targets,
        Targets {
            every: true,
            exclude: names(&["kube-system", "kyverno"]),
            ..Default::default()
        }
    );
    assert!(
        i.notes
            .iter()
            .any(|n| n.contains("generateExisting is not true")
                && n.contains("namespaces that exist now")),
        "{:?}",
        i.notes
    );
}

#[test]
fn a_cloned_network_policy_keeps_its_kind_copy_name_and_selector() {
    let t = translate(&fixtures(), &today());
    let i = intent(&t, "kyverno-tenant-networkpolicy-clone-default-deny");
    assert_eq!(i.source.kind.api_version(), "networking.k8s.io/v1");
    assert_eq!(i.source.kind.as_str(), "NetworkPolicy");
    assert_eq!(i.source.namespaced_name(), "platform/default-deny");
    assert_eq!(i.target_name.as_deref(), Some("deny-all"));
    assert_eq!(i.targets.selector.as_deref(), Some("tenant=true"));
    assert_eq!(i.targets.exclude, names(&["sandbox"]));
    assert!(
        !i.notes.iter().any(|n| n.contains("generateExisting")),
        "generateExisting: true copies into existing namespaces, as copyrator does"
    );
}

#[test]
fn the_older_inline_form_and_all_blocks_are_read() {
    let t = translate(&fixtures(), &today());
    let labelled = intent(&t, "kyverno-zk-kafka-address-corp-namespaces");
    assert_eq!(
        labelled.source,
        ObjectKey::new(Kind::ConfigMap, "default", "zk-kafka-address"),
        "no apiVersion: ConfigMap is core"
    );
    assert_eq!(
        labelled.targets.selector.as_deref(),
        Some("app-type in (corp,partner)")
    );
    // match.all: the names of one filter AND the namespaces of the other, less the
    // excluded pattern.
    let listed = intent(&t, "kyverno-zk-kafka-address-listed-namespaces");
    assert_eq!(listed.targets.names, names(&["team-b"]));
    assert!(!listed.targets.every && listed.targets.selector.is_none());
    // A matched pattern is today's namespaces, said so.
    let pattern = intent(&t, "kyverno-zk-kafka-address-team-pattern");
    assert_eq!(pattern.targets.names, names(&["team-a"]));
    assert!(
        pattern.notes.iter().any(|n| n.contains("`team-*`")
            && n.contains("(team-a)")
            && n.contains("created later")),
        "{:?}",
        pattern.notes
    );
    // The validation rule is not a copy: neither translated nor reported.
    assert!(!format!("{t:?}").contains("require-labels"));
}

#[test]
fn what_a_copy_rule_cannot_say_is_reported_with_policy_and_rule() {
    let t = translate(&fixtures(), &today());
    let cases = [
        (
            "ClusterPolicy team-bootstrap, rule \"owner\"",
            "uses {{request.userInfo.username}}: the user who made the request",
        ),
        (
            "rule \"by-label\"",
            "generate.data.data.center uses {{request.object.metadata.labels.\"cost-center\"}}",
        ),
        (
            "rule \"secret-data\"",
            "a Secret's data must not sit in a CopyRule",
        ),
        ("rule \"clone-list\"", "cloneList"),
        ("rule \"clone-list\"", "sourceSelector"),
        (
            "rule \"per-app\"",
            "generate.name is \"{{request.object.metadata.labels.app}}-config\"",
        ),
        ("rule \"variable-source\"", "clone.namespace is"),
        (
            "rule \"named-and-labelled\"",
            "by name and by labels at once",
        ),
        (
            "rule \"not-for-admins\"",
            "exclude.any[0] depends on who makes the request (clusterRoles)",
        ),
        ("rule \"only-if-labelled\"", "preconditions"),
        ("rule \"fixed-namespace\"", "the fixed namespace \"audit\""),
        (
            "rule \"exclude-by-labels\"",
            "excludes Namespaces by labels",
        ),
        (
            "rule \"exclude-by-pattern\"",
            "exclude names the pattern `sandbox-*`",
        ),
        (
            "Policy team-defaults, rule \"copy-config\"",
            "namespaced Policy",
        ),
    ];
    for (at, why) in cases {
        assert!(
            t.skipped.iter().any(|s| s.note.contains(at)
                && s.note.contains(why)
                && s.note.ends_with("not migrated")),
            "{at}: {why}\n{:#?}",
            t.skipped
        );
    }
    assert_eq!(t.skipped.len(), 13, "{:#?}", t.skipped);
    // Skipped rules keep their source's namespace, for `migrate -n`.
    let list = t
        .skipped
        .iter()
        .find(|s| s.note.contains("clone-list"))
        .unwrap();
    assert_eq!(list.source_namespace, "platform");
    // Nothing of a skipped rule is translated.
    assert_eq!(t.intents.len(), 6, "{:#?}", t.intents);
}

#[test]
fn variables_matches_on_other_kinds_and_unknown_fields_are_refused() {
    let rule = |generate: Value, matched: Value| -> Vec<Value> {
        vec![serde_json::json!({
            "apiVersion": "kyverno.io/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "p"},
            "spec": {"rules": [{"name": "r", "match": matched, "generate": generate}]},
        })]
    };
    let clone = |extra: Value| {
        let mut g = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "name": "s",
            "namespace": "{{request.object.metadata.name}}", "synchronize": true,
            "clone": {"namespace": "default", "name": "s"},
        });
        for (k, v) in extra.as_object().unwrap() {
            g[k] = v.clone();
        }
        g
    };
    let namespaces_only = serde_json::json!({"any": [{"resources": {"kinds": ["Namespace"]}}]});
    let cases = [
        (
            clone(serde_json::json!({})),
            serde_json::json!({"any": [{"resources": {"kinds": ["Namespace", "Pod"]}}]}),
            "matches Pod",
        ),
        (
            clone(serde_json::json!({})),
            serde_json::json!({"any": [{"resources": {"kinds": ["*"]}}]}),
            "matches *",
        ),
        (
            clone(serde_json::json!({})),
            serde_json::json!({"any": [{"resources": {"kinds": ["Namespace"], "annotations": {"a": "b"}}}]}),
            "by annotations",
        ),
        (
            clone(serde_json::json!({})),
            serde_json::json!({"any": [{"resources": {"kinds": ["Namespace"], "operations": ["DELETE"]}}]}),
            "only DELETE requests",
        ),
        (
            clone(serde_json::json!({})),
            serde_json::json!({"any": [{"resources": {"kinds": ["Namespace"], "names": ["{{x}}"]}}]}),
            "is a variable",
        ),
        (
            clone(serde_json::json!({})),
            serde_json::json!({"any": [{"resources": {"kinds": ["Namespace"]}}], "all": [{"resources": {"kinds": ["Namespace"]}}]}),
            "both any and all",
        ),
        (
            clone(serde_json::json!({"foreach": [{"list": "x"}]})),
            namespaces_only.clone(),
            "foreach",
        ),
        (
            clone(serde_json::json!({"newField": 1})),
            namespaces_only.clone(),
            "generate has `newField`",
        ),
        (
            clone(serde_json::json!({"kind": "Pod"})),
            namespaces_only.clone(),
            "Pod is never copied",
        ),
        (
            clone(serde_json::json!({"apiVersion": null, "kind": "Widget"})),
            namespaces_only.clone(),
            "cannot tell Widget's API group",
        ),
        (
            clone(serde_json::json!({"name": "Not_A_Name"})),
            namespaces_only.clone(),
            "not a valid Secret name",
        ),
        (
            clone(serde_json::json!({"namespace": null})),
            namespaces_only.clone(),
            "cluster-scoped",
        ),
    ];
    for (generate, matched, why) in cases {
        let t = translate(&rule(generate, matched), &today());
        assert!(t.intents.is_empty(), "{why}: {t:#?}");
        assert!(
            t.skipped.len() == 1 && t.skipped[0].note.contains(why),
            "{why}: {:#?}",
            t.skipped
        );
    }
    // The baseline of those cases translates.
    let t = translate(
        &rule(clone(serde_json::json!({})), namespaces_only),
        &today(),
    );
    assert_eq!(t.intents.len(), 1, "{t:#?}");
}

/// The configuration `migrate` prints for the fixtures, with copyrator trusting `trusted`.
fn configuration(trusted: &str) -> config::Config {
    let policy = CopyPolicy {
        excluded_namespaces: ["kube-system".to_string()].into(),
        trust: TrustPolicy {
            trusted_namespaces: NamespacePatterns::parse(trusted).unwrap(),
        },
        ..Default::default()
    };
    config::build(
        translate(&fixtures(), &today()),
        &BTreeMap::new(),
        &config::Options {
            peer: Peer::Kyverno,
            policy: &policy,
            copy_rules: false,
            trust_sources: false,
        },
    )
}

#[test]
fn policies_become_copy_rules_in_force_even_from_untrusted_namespaces() {
    let config = configuration("");
    let rules: Vec<_> = config
        .items
        .iter()
        .map(|i| match &i.change {
            Change::CopyRule(r) => (r.metadata.name.clone().unwrap(), i),
            Change::Inline { .. } => panic!("a ClusterPolicy becomes CopyRules only"),
        })
        .collect();
    assert_eq!(
        rules.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        [
            "kyverno-add-networkpolicy-default-deny",
            "kyverno-add-ns-quota-generate-resourcequota",
            "kyverno-add-ns-quota-generate-limitrange",
            "kyverno-team-bootstrap-admins",
            "kyverno-sync-secrets-sync-image-pull-secret",
            "kyverno-unsayable-created-once",
            "kyverno-zk-kafka-address-corp-namespaces",
            "kyverno-zk-kafka-address-listed-namespaces",
            "kyverno-zk-kafka-address-team-pattern",
            "kyverno-tenant-networkpolicy-clone-default-deny",
        ]
    );
    for (name, item) in &rules {
        assert!(!item.commented_out, "{name}");
        if let Change::CopyRule(r) = &item.change
            && r.spec.template.is_some()
        {
            // A template's source is the CopyRule: no namespace to trust.
            continue;
        }
        assert!(
            item.notes
                .iter()
                .any(|n| n.contains("is not a trusted namespace")
                    && n.contains("the ClusterPolicy already asked for it")),
            "{name}: {:?}",
            item.notes
        );
    }
    let yaml = render::manifests(&config, Peer::Kyverno).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml).unwrap();
    let netpol = docs
        .iter()
        .find(|d| d["metadata"]["name"] == "kyverno-tenant-networkpolicy-clone-default-deny")
        .unwrap_or_else(|| panic!("{yaml}"));
    assert_eq!(
        netpol["spec"],
        serde_json::json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "sourceNamespace": "platform",
            "sourceName": "default-deny",
            "targetName": "deny-all",
            "namespaceSelector": {"matchLabels": {"tenant": "true"}},
            "excludeNamespaces": ["sandbox"],
            "deletionPolicy": "Delete",
            "conflictPolicy": "Skip",
        })
    );
    assert!(
        yaml.contains("--copy-kinds naming it"),
        "the NetworkPolicy rule says what copyrator needs: {yaml}"
    );
    let regcred = docs
        .iter()
        .find(|d| d["metadata"]["name"] == "kyverno-sync-secrets-sync-image-pull-secret")
        .unwrap();
    assert_eq!(regcred["spec"]["namespaceSelector"], serde_json::json!({}));
    assert_eq!(
        regcred["spec"]["excludeNamespaces"],
        serde_json::json!(["kube-system", "kyverno"])
    );
    assert!(
        regcred["spec"].get("apiVersion").is_none(),
        "core: no apiVersion"
    );
    let once = docs
        .iter()
        .find(|d| d["metadata"]["name"] == "kyverno-unsayable-created-once")
        .unwrap();
    assert_eq!(once["spec"]["createOnce"], true, "synchronize left out");
    assert_eq!(regcred["spec"].get("createOnce"), None, "synchronize: true");
    // Trusted, no note about trust.
    let trusted = configuration("default,platform");
    assert!(
        trusted
            .items
            .iter()
            .all(|i| !i.notes.iter().any(|n| n.contains("trusted namespace")))
    );
}

#[test]
fn inline_data_becomes_a_template_with_the_namespace_name_put_in() {
    let config = configuration("");
    let yaml = render::manifests(&config, Peer::Kyverno).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml).unwrap();
    let spec = |name: &str| {
        docs.iter()
            .find(|d| d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{name}: {yaml}"))["spec"]
            .clone()
    };
    assert_eq!(
        spec("kyverno-add-networkpolicy-default-deny"),
        serde_json::json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "targetName": "default-deny",
            "namespaceSelector": {},
            "template": {"spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}},
            "deletionPolicy": "Delete",
            "conflictPolicy": "Skip",
        })
    );
    let quota = spec("kyverno-add-ns-quota-generate-resourcequota");
    assert_eq!(quota["kind"], "ResourceQuota");
    assert_eq!(quota["template"]["spec"]["hard"]["limits.memory"], "16Gi");
    let admins = spec("kyverno-team-bootstrap-admins");
    assert_eq!(admins["createOnce"], true, "synchronize left out: false");
    assert_eq!(
        admins["namespaceSelector"],
        serde_json::json!({"matchLabels": {"team": "true"}})
    );
    assert_eq!(
        admins["template"]["subjects"][0]["name"], "$(namespace)-admins",
        "spaces inside the braces are Kyverno's too"
    );
    assert_eq!(
        admins["template"]["metadata"],
        serde_json::json!({"labels": {"team": "$(namespace)"}})
    );
    // What migrate prints, copyrator accepts.
    for item in &config.items {
        if let Change::CopyRule(rule) = &item.change {
            crate::rules::Rule::from_copy_rule(rule).unwrap();
        }
    }
}

#[test]
fn plurals_follow_kubernetes() {
    for (kind, want) in [
        ("NetworkPolicy", "networkpolicies"),
        ("Ingress", "ingresses"),
        ("ResourceQuota", "resourcequotas"),
        ("Gateway", "gateways"),
    ] {
        assert_eq!(plural(kind), want);
    }
}

fn generating_policies() -> Vec<Value> {
    let text = include_str!("../../../../tests/data/kyverno-generating-policies.yaml");
    serde_saphyr::from_multiple(text).expect("the fixtures parse")
}

#[test]
fn generating_policies_that_clone_or_hold_a_fixed_object_become_copy_rules() {
    let t = translate(&generating_policies(), &today());
    let clone = intent(&t, "kyverno-clone-image-pull-secret");
    assert_eq!(
        clone.source,
        ObjectKey::new(Kind::Secret, "default", "regcred")
    );
    assert!(clone.targets.every);
    assert!(!clone.create_once, "synchronize enabled");
    assert_eq!(t.rules.len(), 1, "{:#?}", t.rules);
    let netpol = &t.rules[0].rule;
    assert_eq!(
        netpol.metadata.name.as_deref(),
        Some("kyverno-default-deny-default-deny")
    );
    assert_eq!(netpol.spec.kind, "NetworkPolicy");
    assert!(netpol.spec.create_once, "synchronize not enabled");
    assert_eq!(
        serde_json::to_value(&netpol.spec.namespace_selector).unwrap(),
        serde_json::json!({"matchLabels": {"tenant": "true"}})
    );
    assert_eq!(
        serde_json::to_value(&netpol.spec.template).unwrap(),
        serde_json::json!({"spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}})
    );
    for (policy, why) in [
        ("per-team-config", "variables.team"),
        ("only-some", "matchConditions"),
        ("on-pods", "other than Namespaces"),
    ] {
        assert!(
            t.skipped.iter().any(
                |s| s.note.starts_with(&format!("GeneratingPolicy {policy}:"))
                    && s.note.contains(why)
                    && s.note.ends_with("not migrated")
            ),
            "{policy}: {why}\n{:#?}",
            t.skipped
        );
    }
    assert_eq!(t.skipped.len(), 3, "{:#?}", t.skipped);
}

#[test]
fn a_generating_policy_past_a_cel_bound_is_not_migrated_and_the_note_names_the_bound() {
    let mut hostile = generating_policies()[0].clone();
    hostile["metadata"]["name"] = "hostile".into();
    let nested = format!("{}1{}", "[".repeat(40), "]".repeat(40));
    hostile["spec"]["variables"][0]["expression"] = nested.into();
    let padded = format!("object.metadata.name + \"{}\"", "x".repeat(6000));
    let mut long = generating_policies()[0].clone();
    long["metadata"]["name"] = "long".into();
    long["spec"]["generate"][0]["expression"] = padded.into();
    let t = translate(&[hostile, long], &today());
    let notes: Vec<&str> = t.skipped.iter().map(|s| s.note.as_str()).collect();
    assert_eq!(
        notes,
        [
            "GeneratingPolicy hostile: variables.targetNs: the expression nests brackets over 32 deep, the bound on one expression; not migrated",
            "GeneratingPolicy long: generate[0]: the expression is 6025 bytes, over the bound of 5120 bytes on one expression; not migrated",
        ]
    );
}
