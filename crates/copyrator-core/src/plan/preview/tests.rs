//! `copyrator plan`'s pure part: reading a file's documents, `kubectl apply`'s merge, the
//! checks admission makes, and the changes the planner's explanation says, above all the
//! copies a rule's new version no longer wants.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::{
    content::DesiredCopy,
    model::{Kind, ObjectKey, Payload},
    plan::{
        Existing, ManagedCopy, Policy,
        explain::{Bundles, Explanation, explain},
    },
    tenancy::{NamespacePatterns, TrustPolicy},
};

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn ns(name: &str, labels: &[(&str, &str)]) -> NamespaceInfo {
    NamespaceInfo {
        name: name.into(),
        resource_version: "1".into(),
        labels: map(labels).into(),
        accept_from: None,
        terminating: false,
    }
}

/// Secret `platform/cred` holding `v`, as the API server returns it.
fn cred_object(v: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "cred", "namespace": "platform", "uid": "uid-cred",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "type": "Opaque", "data": {"v": v},
    })
}

/// A CopyRule of `platform/cred` as a file gives it, selecting `selector`.
fn rule_file(selector: Value) -> Value {
    json!({
        "apiVersion": "copyrator.io/v1alpha1", "kind": "CopyRule",
        "metadata": {"name": "registry"},
        "spec": {"kind": "Secret", "sourceNamespace": "platform", "sourceName": "cred",
                 "namespaceSelector": selector},
    })
}

/// `file` as the API server holds it once `kubectl apply` created it.
fn live(file: &Value) -> Option<Value> {
    let mut live = file.clone();
    live["metadata"]["annotations"] = json!({LAST_APPLIED: file.to_string()});
    Some(live)
}

/// The world of a cluster with namespaces `team-a` (`registry=on`), `team-b` (`registry=on`,
/// `old=yes`), `team-c` (`new=yes`) and a tenant's namespace, platform trusted, Secret
/// `platform/cred` and its content.
struct Cluster {
    world: World,
    contents: Contents,
    existing: BTreeMap<ObjectKey, Existing>,
}

impl Cluster {
    fn new() -> Self {
        let object: Object = serde_json::from_value(cred_object("djE=")).unwrap();
        let info = SourceInfo::from_meta(Kind::Secret, &Meta::from(&object.metadata)).unwrap();
        let mut world = World::new(Policy {
            trust: TrustPolicy {
                trusted_namespaces: NamespacePatterns::parse("platform").unwrap(),
            },
            ..Default::default()
        });
        world.set_sources([(info.key.clone(), Some(info.clone()))]);
        world.insert_namespaces([
            ns("platform", &[]),
            ns("team-a", &[("registry", "on")]),
            ns("team-b", &[("registry", "on"), ("old", "yes")]),
            ns("team-c", &[("new", "yes")]),
            ns("tenant", &[]),
        ]);
        let mut contents = Contents::default();
        contents
            .payloads
            .insert(info.key.clone(), Arc::new(object.payload));
        Self {
            world,
            contents,
            existing: BTreeMap::new(),
        }
    }

    /// The CopyRule of `file` in force, and its copies made where it wants them.
    fn with_rule(mut self, file: Value) -> Self {
        let rule: CopyRule = serde_json::from_value(file).unwrap();
        self.world.set_copy_rule("registry", Some(rule));
        let rule = self.world.rules().copy_rule("registry").unwrap().clone();
        let source = self.world.sources().values().next().unwrap().clone();
        let payload: Payload = (*self.contents.payloads[&source.key]).clone();
        let selected: Vec<String> = self
            .world
            .namespaces()
            .values()
            .filter(|n| rule.targets_namespace(n))
            .map(|n| n.name.clone())
            .collect();
        for namespace in selected {
            let copy = DesiredCopy::build(&rule, &source, &payload, &namespace).unwrap();
            let meta = copy.object().metadata;
            let managed = ManagedCopy::from_marks(
                Kind::Secret,
                &meta.labels.unwrap(),
                &meta.annotations.unwrap(),
                "7".into(),
                false,
            )
            .unwrap();
            self.existing.insert(copy.key, Existing::Managed(managed));
        }
        self
    }

    /// Applies `file` (its live object: what the world holds), as `copyrator plan` does.
    fn plan(&mut self, file: Value, live: Option<Value>) -> Result<Explanation, String> {
        let (docs, _) = manifests(vec![file], "default").map_err(|e| e.to_string())?;
        let doc = &docs[0];
        let merged = applied(live.as_ref(), &doc.object);
        let focus = put(&mut self.world, &mut self.contents, doc, merged, 1_000)?;
        Ok(explain(
            &self.world,
            &focus,
            &self.existing,
            &self.contents,
            &[],
            &Bundles::new(),
        ))
    }
}

/// Each finding as `namespace change reason`, sorted.
fn changes(e: &Explanation) -> Vec<String> {
    let mut out: Vec<String> = e
        .findings
        .iter()
        .map(|f| {
            format!(
                "{} {} {}",
                f.target.as_ref().map_or("-", |t| t.namespace.as_str()),
                Change::of(f).code(),
                f.verdict.code()
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_new_rule_creates_its_copies_where_it_selects_and_counts_the_rest() {
    let mut cluster = Cluster::new();
    let e = cluster
        .plan(rule_file(json!({"matchLabels": {"registry": "on"}})), None)
        .unwrap();
    assert_eq!(
        changes(&e),
        [
            "team-a Create SelectorMatches",
            "team-b Create SelectorMatches"
        ]
    );
    // platform (the source's own), team-c, tenant.
    assert_eq!(e.not_selected.values().sum::<usize>(), 3);
}

#[test]
fn a_changed_selector_deletes_the_copies_the_new_version_no_longer_wants() {
    let old = rule_file(json!({"matchLabels": {"registry": "on"}}));
    let mut cluster = Cluster::new().with_rule(old.clone());
    let e = cluster
        .plan(
            rule_file(json!({"matchLabels": {"old": "yes"}})),
            live(&old),
        )
        .unwrap();
    assert_eq!(
        changes(&e),
        [
            "team-a Delete NoRuleWantsCopy",
            "team-b InSync SelectorMatches"
        ]
    );

    // Kept instead where the new version says Retain.
    let old = rule_file(json!({"matchLabels": {"registry": "on"}}));
    let mut cluster = Cluster::new().with_rule(old.clone());
    let mut new = rule_file(json!({"matchLabels": {"new": "yes"}}));
    new["spec"]["deletionPolicy"] = json!("Retain");
    let e = cluster.plan(new, live(&old)).unwrap();
    assert_eq!(
        changes(&e),
        [
            "team-a Retain NoRuleWantsCopy",
            "team-b Retain NoRuleWantsCopy",
            "team-c Create SelectorMatches",
        ]
    );
}

#[test]
fn a_rule_copying_another_source_deletes_the_old_sources_copies() {
    let old = rule_file(json!({"matchLabels": {"registry": "on"}}));
    let mut cluster = Cluster::new().with_rule(old.clone());
    let mut new = old.clone();
    new["spec"]["sourceName"] = json!("other");
    let e = cluster.plan(new, live(&old)).unwrap();
    assert_eq!(
        changes(&e),
        [
            "team-a Delete NoRuleWantsCopy",
            "team-a Skipped SourceNotFound",
            "team-b Delete NoRuleWantsCopy",
            "team-b Skipped SourceNotFound",
        ]
    );
}

#[test]
fn an_unchanged_rule_changes_nothing() {
    let old = rule_file(json!({"matchLabels": {"registry": "on"}}));
    let mut cluster = Cluster::new().with_rule(old.clone());
    let e = cluster.plan(old, None).unwrap();
    assert_eq!(
        changes(&e),
        [
            "team-a InSync SelectorMatches",
            "team-b InSync SelectorMatches"
        ]
    );
    assert!(e.findings.iter().all(|f| !Change::of(f).is_write()));
}

#[test]
fn a_template_rule_creates_its_copies_without_any_source() {
    Kind::register(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
    )
    .unwrap();
    let mut cluster = Cluster::new();
    let file = json!({
        "apiVersion": "copyrator.io/v1alpha1", "kind": "CopyRule",
        "metadata": {"name": "default-deny"},
        "spec": {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                 "targetName": "default-deny",
                 "namespaceSelector": {"matchLabels": {"registry": "on"}},
                 "template": {"spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}},
    });
    let e = cluster.plan(file, None).unwrap();
    assert_eq!(
        changes(&e),
        [
            "team-a Create SelectorMatches",
            "team-b Create SelectorMatches"
        ]
    );
}

#[test]
fn a_new_namespace_gets_the_copies_of_the_rules_its_labels_select() {
    let mut cluster =
        Cluster::new().with_rule(rule_file(json!({"matchLabels": {"registry": "on"}})));
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
                           "metadata": {"name": "team-new", "labels": {"registry": "on"}}});
    let e = cluster.plan(namespace, None).unwrap();
    assert_eq!(changes(&e), ["team-new Create SelectorMatches"]);
    assert!(cluster.world.namespaces().contains_key("team-new"));
}

#[test]
fn a_tenants_source_is_refused_where_the_namespace_does_not_consent() {
    let mut cluster = Cluster::new();
    cluster.world.namespaces_mut().insert(
        "team-a".into(),
        NamespaceInfo {
            accept_from: Some("tenant".into()),
            ..ns("team-a", &[])
        },
    );
    let source = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "tcred", "namespace": "tenant",
                     "labels": {"copyrator.io/source": "true"},
                     "annotations": {"copyrator.io/namespaces": "team-a,team-b"}},
        "stringData": {"v": "1"},
    });
    let e = cluster.plan(source, None).unwrap();
    assert_eq!(
        changes(&e),
        ["team-a Create Listed", "team-b Refused NotConsented",]
    );
    let refused = e.findings.iter().find(|f| Change::of(f) == Change::Refused);
    assert!(
        refused
            .unwrap()
            .message
            .contains("copyrator.io/accept-from"),
        "{refused:?}"
    );
}

#[test]
fn an_invalid_document_is_denied_in_admissions_words_naming_the_field() {
    let mut cluster = Cluster::new();
    let mut file = rule_file(json!({}));
    file["spec"]["namespaces"] = json!(["platform"]);
    let e = cluster.plan(file, None).unwrap_err();
    assert!(e.starts_with("invalid CopyRule: spec.namespaces: "), "{e}");

    let mut file = rule_file(json!({}));
    file["spec"]["sourceSelector"] = json!({"matchLabels": {"a": "b"}});
    let e = cluster.plan(file, None).unwrap_err();
    assert!(e.starts_with("invalid CopyRule: spec.sourceName: "), "{e}");

    let file = json!({"apiVersion": "copyrator.io/v1alpha1", "kind": "CopyRule",
                      "metadata": {"name": "x"}, "spec": {"kind": 7}});
    let e = cluster.plan(file, None).unwrap_err();
    assert!(e.starts_with("not a valid CopyRule: "), "{e}");

    let source = |annotations: Value, type_: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "type": type_,
               "metadata": {"name": "s", "namespace": "platform",
                            "labels": {"copyrator.io/source": "true"},
                            "annotations": annotations}})
    };
    let e = cluster
        .plan(
            source(json!({"copyrator.io/namespaces": "Not A Name"}), "Opaque"),
            None,
        )
        .unwrap_err();
    assert!(
        e.starts_with("invalid annotation copyrator.io/namespaces: "),
        "{e}"
    );
    let e = cluster
        .plan(
            source(
                json!({"copyrator.io/namespaces": "team-a", "copyrator.io/image-pull-secret": "true"}),
                "Opaque",
            ),
            None,
        )
        .unwrap_err();
    assert_eq!(
        e,
        "invalid annotation copyrator.io/image-pull-secret: only a Secret of type \
         kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg can be an image pull \
         secret; this one is of type Opaque"
    );
}

#[test]
fn documents_are_read_in_order_lists_flattened_and_other_kinds_noted() {
    let docs = vec![
        json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-z"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ca"}, "data": {"a": "b"}},
        ]}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}),
        Value::Null,
        rule_file(json!({})),
    ];
    let (read, skipped) = manifests(docs, "ops").unwrap();
    let described: Vec<String> = read.iter().map(Manifest::describe).collect();
    assert_eq!(
        described,
        ["Namespace team-z", "ConfigMap ops/ca", "CopyRule registry"]
    );
    assert_eq!(read[1].object["metadata"]["namespace"], "ops");
    assert_eq!(skipped.len(), 1);
    assert!(
        skipped[0].contains("document 3 (Deployment web)")
            && skipped[0].contains("Deployment.apps"),
        "{skipped:?}"
    );

    let nameless = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {}});
    let e = manifests(vec![nameless], "ops").unwrap_err();
    assert_eq!(e.to_string(), "document 1 (Secret ): has no metadata.name");
    let bad_name =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Not_A_Name"}});
    let e = manifests(vec![bad_name], "ops").unwrap_err();
    assert!(e.message.contains("is not a valid name"), "{e}");
    let bad = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                     "data": {"k": "not base64!"}});
    let e = manifests(vec![bad], "ops").unwrap_err();
    assert!(e.message.contains("data.k: is not a base64 string"), "{e}");
    let bad = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                     "data": {"n": 7}});
    assert!(manifests(vec![bad], "ops").is_err());
}

#[test]
fn a_secrets_string_data_lands_in_its_data_over_the_same_keys() {
    let doc = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                     "data": {"a": "YQ==", "b": "Yg=="}, "stringData": {"b": "B", "c": "C"}});
    let (read, _) = manifests(vec![doc], "ops").unwrap();
    assert_eq!(
        read[0].object["data"],
        json!({"a": "YQ==", "b": "Qg==", "c": "Qw=="})
    );
    assert!(read[0].object.get("stringData").is_none());
}

#[test]
fn apply_merges_as_kubectl_does_removing_only_what_it_applied_before() {
    let last =
        json!({"metadata": {"labels": {"team": "a", "gone": "x"}}, "data": {"k1": "1", "k2": "2"}});
    let live = json!({
        "metadata": {"name": "s", "uid": "u", "resourceVersion": "9",
                     "labels": {"team": "a", "gone": "x", "copyrator.io/source": "true"},
                     "annotations": {LAST_APPLIED: last.to_string()}},
        "data": {"k1": "1", "k2": "2", "theirs": "3"},
    });
    let file = json!({"metadata": {"name": "s", "labels": {"team": "b"}}, "data": {"k1": "one"}});
    let merged = applied(Some(&live), &file);
    assert_eq!(
        merged["metadata"]["labels"],
        json!({"team": "b", "copyrator.io/source": "true"}),
        "a label it applied before and no longer gives is removed; another's label stays"
    );
    assert_eq!(merged["data"], json!({"k1": "one", "theirs": "3"}));
    assert_eq!(
        merged["metadata"]["uid"], "u",
        "the live object's identity stays"
    );
    assert_eq!(
        ManifestState::of(Some(&live), &merged),
        ManifestState::Changed
    );

    // Created without kubectl apply: nothing is removed.
    let mut bare = live.clone();
    bare["metadata"]["annotations"] = json!({});
    let merged = applied(Some(&bare), &file);
    assert_eq!(merged["data"]["k2"], "2");
    // Lists are replaced, not merged.
    let merged = applied(
        Some(&json!({"spec": {"namespaces": ["a", "b"]}})),
        &json!({"spec": {"namespaces": ["c"]}}),
    );
    assert_eq!(merged["spec"]["namespaces"], json!(["c"]));
    assert_eq!(applied(None, &file), file);
}

#[test]
fn an_object_is_unchanged_when_only_what_the_server_keeps_differs() {
    let live = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "s", "resourceVersion": "9", "managedFields": [{}],
                     "annotations": {LAST_APPLIED: "{}"}, "labels": {}},
        "data": {"a": "YQ=="}, "status": {"x": 1},
    });
    let file = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
                      "data": {"a": "YQ=="}});
    let merged = applied(Some(&live), &file);
    assert_eq!(
        ManifestState::of(Some(&live), &merged),
        ManifestState::Unchanged
    );
    assert_eq!(ManifestState::of(None, &file), ManifestState::New);
}

#[test]
fn each_verdict_reads_as_one_change() {
    use crate::{
        plan::{ConflictReason, explain::Verdict},
        rules::Selection,
    };
    let finding = |verdict: Verdict, copy: CopyState| Finding {
        rule: RuleId::CopyRule("r".into()),
        tier: None,
        source: None,
        target: None,
        verdict,
        copy,
        message: String::new(),
        shape: None,
        bundle: None,
    };
    let applies = |action| Verdict::Applies {
        selection: Selection::Listed,
        action,
    };
    let cases = [
        (applies(Planned::Create), CopyState::Missing, Change::Create),
        (applies(Planned::Update), CopyState::Stale, Change::Update),
        (
            applies(Planned::Recreate),
            CopyState::Stale,
            Change::Recreate,
        ),
        (
            applies(Planned::Overwrite),
            CopyState::Unmanaged,
            Change::Overwrite,
        ),
        (applies(Planned::Nothing), CopyState::InSync, Change::InSync),
        (
            applies(Planned::ReadSource),
            CopyState::Present,
            Change::Unknown,
        ),
        (
            Verdict::NoRuleWants(DeletionPolicy::Delete),
            CopyState::Present,
            Change::Delete,
        ),
        (
            Verdict::NoRuleWants(DeletionPolicy::Retain),
            CopyState::Present,
            Change::Retain,
        ),
        (Verdict::NotConsented, CopyState::Missing, Change::Refused),
        (
            Verdict::Conflict(ConflictReason::Unmanaged),
            CopyState::Unmanaged,
            Change::Refused,
        ),
        (
            Verdict::Conflict(ConflictReason::EmptyBundle),
            CopyState::Missing,
            Change::Refused,
        ),
        (
            Verdict::ExcludedGlobally,
            CopyState::Missing,
            Change::Skipped,
        ),
        (Verdict::SourceNotFound, CopyState::Missing, Change::Skipped),
    ];
    for (verdict, copy, change) in cases {
        let f = finding(verdict.clone(), copy);
        assert_eq!(Change::of(&f), change, "{verdict:?}");
    }
    let all = summary(&[finding(applies(Planned::Create), CopyState::Missing)]);
    assert_eq!(all.len(), Change::ALL.len(), "every change listed");
    assert_eq!(all[0], (Change::Create, 1));
    assert!(all[1..].iter().all(|(_, n)| *n == 0));
}
