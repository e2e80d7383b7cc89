//! A rule that lives in a namespace: the `NamespacedCopyRule` custom resource (namespaced,
//! `copyrator.io/v1alpha1`, SPEC §2.2), a team's CopyRule for copies out of its own namespace
//! (the Issuer/ClusterIssuer pattern), and how copyrator names such a rule:
//! `<namespace>/<name>`. A cluster-scoped CopyRule's name never holds a `/`, so the two never
//! meet, and every path that knows a rule by its name (jobs, marks, the per-namespace re-list
//! of a namespace-scoped install, SPEC §13) tells them apart.
//!
//! The rule's namespace is its sources' namespace; it has no `sourceNamespace`, and none of a
//! CopyRule's fields that reach beyond its namespace (bundles, templates, clusters) or that
//! need a status (create-once). It is carried through copyrator as the [`CopyRule`] it stands
//! for ([`NamespacedCopyRule::as_copy_rule`]), named `<namespace>/<name>`, with its namespace
//! set: its tier is its namespace's (SPEC §9), never a CopyRule's.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::copyrule::{
    ConflictPolicy, CopyRule, CopyRuleSpec, DeletionPolicy, KeySpec, TargetSpec,
};

/// Copies objects of the rule's own namespace into the namespaces it selects that accept
/// them (SPEC §9.2), like the inline rule of a source there.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "copyrator.io",
    version = "v1alpha1",
    kind = "NamespacedCopyRule",
    plural = "namespacedcopyrules",
    shortname = "ncpr",
    category = "copyrator",
    namespaced,
    doc = "NamespacedCopyRule keeps objects of its own namespace copied into selected namespaces that accept copies from it (copyrator.io/accept-from), unless its namespace is trusted.",
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.kind"}"#,
    printcolumn = r#"{"name":"Source","type":"string","jsonPath":".spec.sourceName"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NamespacedCopyRuleSpec {
    /// API version of the source objects' kind (default `v1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the source objects: Secret or ConfigMap; another kind copyrator copies
    /// (`--copy-kinds`) only in a trusted namespace; never an RBAC kind.
    pub kind: String,
    /// Name of the one source object, in the rule's namespace. Exactly one of sourceName and
    /// sourceSelector is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_name: Option<String>,
    /// Every object of `kind` in the rule's namespace matching this selector is a source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_selector: Option<LabelSelector>,
    /// Namespaces whose labels match receive copies, if they accept copies from the rule's
    /// namespace. `{}` selects every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// Explicit target namespaces, OR'ed with namespaceSelector.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Namespaces that never receive a copy, whatever else matches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_namespaces: Vec<String>,
    /// Name of the copies (default: the source's name). Only with sourceName.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_name: Option<String>,
    /// What happens to copies this rule no longer wants: Delete (default) or Retain.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
    /// What happens when a target name is taken by an object copyrator does not manage:
    /// Skip (default) or Overwrite.
    #[serde(default)]
    pub conflict_policy: ConflictPolicy,
    /// The copies are image pull secrets of the Pods of their namespaces (SPEC §10).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub image_pull_secret: bool,
    /// The copies are read-only (SPEC §4 item 11); default as for a CopyRule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// The keys of a Secret's or ConfigMap's data the copies carry, as a CopyRule's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::copyrule::key_list_schema")]
    pub keys: Option<Vec<KeySpec>>,
    /// The copies' kind and Secret type, as a CopyRule's (SPEC §3.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<TargetSpec>,
}

impl NamespacedCopyRule {
    /// The CopyRule this rule stands for: named `<namespace>/<name>`, its namespace set, its
    /// sources those of its namespace. `None` without a namespace (not one the API served).
    pub fn as_copy_rule(&self) -> Option<CopyRule> {
        let ns = self.metadata.namespace.as_deref()?;
        let name = self.metadata.name.as_deref()?;
        let s = &self.spec;
        let spec = CopyRuleSpec {
            api_version: s.api_version.clone(),
            kind: s.kind.clone(),
            source_namespace: ns.to_string(),
            source_name: s.source_name.clone(),
            source_selector: s.source_selector.clone(),
            namespace_selector: s.namespace_selector.clone(),
            namespaces: s.namespaces.clone(),
            exclude_namespaces: s.exclude_namespaces.clone(),
            target_name: s.target_name.clone(),
            deletion_policy: s.deletion_policy,
            conflict_policy: s.conflict_policy,
            image_pull_secret: s.image_pull_secret,
            read_only: s.read_only,
            keys: s.keys.clone(),
            target: s.target.clone(),
            ..CopyRuleSpec::default()
        };
        let m = &self.metadata;
        Some(CopyRule {
            metadata: ObjectMeta {
                name: Some(rule_name(Some(ns), name)),
                namespace: Some(ns.to_string()),
                uid: m.uid.clone(),
                generation: m.generation,
                resource_version: m.resource_version.clone(),
                creation_timestamp: m.creation_timestamp.clone(),
                deletion_timestamp: m.deletion_timestamp.clone(),
                ..ObjectMeta::default()
            },
            spec,
            status: None,
        })
    }
}

/// The name copyrator knows a rule by: its own for a CopyRule (`namespace` `None`),
/// `<namespace>/<name>` for a rule that lives in a namespace.
pub fn rule_name(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// The namespace and name of the rule in a namespace known as `name`; `None` for a CopyRule's.
pub fn split_rule_name(name: &str) -> Option<(&str, &str)> {
    name.split_once('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespaced_rule_is_known_by_its_namespace_and_name() {
        assert_eq!(rule_name(None, "registry"), "registry");
        assert_eq!(rule_name(Some("team-a"), "registry"), "team-a/registry");
        assert_eq!(
            split_rule_name("team-a/registry"),
            Some(("team-a", "registry"))
        );
        assert_eq!(split_rule_name("registry"), None);
    }
}
