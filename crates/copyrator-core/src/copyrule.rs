//! The `CopyRule` custom resource (cluster-scoped, `copyrator.io/v1alpha1`): the central,
//! CRD-driven form of a copy rule. Validation and conversion into a [`crate::rules::Rule`]
//! live in `rules/`; this file is the API surface only, from which the CRD is generated.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Copies one object (or every one of its kind matching a selector) from a source namespace
/// into the namespaces the rule selects, and keeps the copies identical to the source.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "copyrator.io",
    version = "v1alpha1",
    kind = "CopyRule",
    plural = "copyrules",
    shortname = "cpr",
    category = "copyrator",
    status = "CopyRuleStatus",
    doc = "CopyRule keeps objects of a source namespace (Secrets, ConfigMaps, or any namespaced kind copyrator is allowed to copy) copied into selected namespaces.",
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.kind"}"#,
    printcolumn = r#"{"name":"Source","type":"string","jsonPath":".status.source"}"#,
    printcolumn = r#"{"name":"Targets","type":"integer","jsonPath":".status.targetNamespaces"}"#,
    printcolumn = r#"{"name":"Synced","type":"integer","jsonPath":".status.syncedCopies"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct CopyRuleSpec {
    /// API version of the source objects' kind (default `v1`): its group is what counts,
    /// e.g. `networking.k8s.io/v1`; copyrator reads and writes the kind in the version the
    /// API server prefers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the source objects: Secret, ConfigMap, or another namespaced kind copyrator is
    /// allowed to copy (`--copy-kinds`), e.g. NetworkPolicy.
    pub kind: String,
    /// Namespace of the source objects. Never a target of this rule. Required, except for a
    /// bundle (`sources`), whose sources each name their own.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source_namespace: String,
    /// Name of the one source object. Exactly one of sourceName and sourceSelector is required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_name: Option<String>,
    /// Every object of `kind` in sourceNamespace matching this selector is a source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_selector: Option<LabelSelector>,
    /// A bundle, instead of sourceNamespace, sourceName and sourceSelector: the PEM
    /// certificates of one key of each of these Secrets and ConfigMaps, deduplicated and in a
    /// stable order, in the one key `target.key` of the copies named `targetName`. A source's
    /// certificates reach a namespace only when its namespace is trusted or the target
    /// namespace accepts copies from it (copyrator.io/accept-from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sources: Option<Vec<BundleSourceSpec>>,
    /// The copies themselves, instead of a source (SPEC §3.3): their top-level fields (`spec`,
    /// `rules`, `roleRef` and `subjects`, a ConfigMap's `data`, ...) and optionally
    /// `metadata.labels` and `metadata.annotations`. `$(namespace)` in any string value
    /// becomes the target namespace's name. Not for Secrets (a CopyRule is readable by
    /// `view`). Needs targetName.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "template_schema")]
    pub template: Option<serde_json::Map<String, serde_json::Value>>,
    /// With `sources`: certificates past their notAfter are left out of the bundle.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drop_expired: bool,
    /// Namespaces whose labels match receive copies. `{}` selects every namespace.
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
    /// What happens to copies this rule no longer wants (source gone, namespace no longer
    /// selected, rule deleted): Delete (default) or Retain.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
    /// What happens when a target name is taken by an object copyrator does not manage:
    /// Skip (default: leave it alone and report a conflict) or Overwrite (adopt it).
    #[serde(default)]
    pub conflict_policy: ConflictPolicy,
    /// The copies are image pull secrets: every Pod created in a target namespace gets the copy
    /// in spec.imagePullSecrets. Only for Secrets of type kubernetes.io/dockerconfigjson or
    /// kubernetes.io/dockercfg.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub image_pull_secret: bool,
    /// Create-once copies (SPEC §3.4): a copy is created where missing in a selected
    /// namespace, once, and then belongs to the namespace: copyrator never updates, restores
    /// or deletes it. Kyverno's `synchronize: false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub create_once: bool,
    /// The copies are read-only: UPDATE and DELETE of a copy by anyone but copyrator are
    /// denied at admission (when copyrator's read-only webhook is installed), except its
    /// deletion with its namespace. Default: true for kinds other than Secret and ConfigMap
    /// (a namespace must not edit its way out of a platform's policy), false for those two.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// The keys of a Secret's or ConfigMap's data the copies carry (every key when absent):
    /// a key's name, or `{from: tls.crt, to: server.pem}` to rename it. A key the source
    /// lacks is left out of the copies and reported in status and Events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "key_list_schema")]
    pub keys: Option<Vec<KeySpec>>,
    /// The copies' kind and Secret type, when they are not the source's: e.g. a TLS Secret's
    /// ca.crt as a ConfigMap. A Secret's data lands in a ConfigMap only when every value
    /// copied is PEM certificates and nothing else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<TargetSpec>,
    /// Member clusters this rule copies into instead of this cluster's namespaces (a hub's
    /// rule, SPEC §14): those named, and those whose ClusterProfile's labels the selector
    /// matches. Each member pulls its copies through a HubLink, within that link's ceiling.
    /// The rule must name its source (sourceName), a Secret or ConfigMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<ClusterPlacement>,
}

/// `spec.clusters`: the member clusters a hub's CopyRule is placed on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClusterPlacement {
    /// Member clusters by name (their ClusterProfile's name on the hub).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// Member clusters whose ClusterProfile (multicluster.x-k8s.io, in the hub's
    /// --cluster-inventory-namespace) has matching labels; OR'ed with names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// One entry of `spec.keys`: a key's name, or a key and its name in the copies.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged, deny_unknown_fields)]
pub enum KeySpec {
    Name(String),
    Renamed {
        from: String,
        /// Its name in the copies (default: `from`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        to: Option<String>,
    },
}

/// One source of a bundle: a key of a Secret or ConfigMap holding PEM certificates, of the
/// object named, or of every object the selector matches in the namespace; or the default CAs
/// (`defaultCAs: true` alone).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BundleSourceSpec {
    /// Secret or ConfigMap.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Exactly one of name and selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// The key holding the certificates.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// The public CAs copyrator ships (Mozilla's roots, or the PEM file its administrator
    /// gave with --default-cas-file), instead of kind, namespace, name, selector and key. They
    /// go into every copy of the bundle: they are the platform's, whatever a namespace trusts.
    #[serde(
        rename = "defaultCAs",
        default,
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub default_cas: bool,
}

/// What the copies are, when not what the source is.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TargetSpec {
    /// For a bundle (`sources`): the key of the copies that holds the certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Secret or ConfigMap (default: the source's kind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The copies' Secret type (default: the source's, or Opaque for a ConfigMap's), e.g.
    /// Opaque for a kubernetes.io/tls source copied with only ca.crt.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Truststores made of the copies' PEM certificates, beside them: `pkcs12` and `jks`,
    /// each under a key of its own (binaryData of a ConfigMap, data of a Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formats: Option<FormatsSpec>,
}

/// `spec.target.formats`: the copies' certificates as Java and PKCS#12 truststores too.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FormatsSpec {
    /// The copies' key holding the PEM certificates (its name in the copies). Needed when
    /// spec.keys lists several keys; the one key otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// A PKCS#12 truststore (password: empty unless given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pkcs12: Option<TruststoreSpec>,
    /// A Java KeyStore (JKS) truststore (password: `changeit` unless given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jks: Option<TruststoreSpec>,
}

/// One truststore of `spec.target.formats`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TruststoreSpec {
    /// Its key in the copies, e.g. truststore.p12 or truststore.jks.
    pub key: String,
    /// The store's password (its integrity check's key; it protects no secret: a truststore
    /// holds public certificates). Default: empty for PKCS#12, `changeit` for JKS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// The store's password from a key of a Secret in a trusted namespace, instead of
    /// `password`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret_ref: Option<PasswordSecretRef>,
}

/// A key of a Secret holding a truststore's password.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PasswordSecretRef {
    /// A trusted namespace (`--trusted-namespaces`).
    pub namespace: String,
    pub name: String,
    pub key: String,
}

/// `spec.template` in the CRD: any object's fields, which admission checks.
fn template_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "nullable": true,
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// `spec.keys` in the CRD: each entry is a string or a `{from, to}` map, which a structural
/// schema can only say by leaving the entry's type open; admission checks the entries.
pub(crate) fn key_list_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "nullable": true,
        "items": {"x-kubernetes-preserve-unknown-fields": true}
    })
}

/// What happens to copies no rule wants any more.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum DeletionPolicy {
    #[default]
    Delete,
    Retain,
}

impl CopyRuleSpec {
    /// The API group of `apiVersion` (`""` for `v1` or when absent).
    pub fn group(&self) -> &str {
        match self.api_version.as_deref() {
            Some(v) => v.rsplit_once('/').map_or("", |(group, _)| group),
            None => "",
        }
    }
}

impl DeletionPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            DeletionPolicy::Delete => "Delete",
            DeletionPolicy::Retain => "Retain",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Delete" => Some(Self::Delete),
            "Retain" => Some(Self::Retain),
            _ => None,
        }
    }
}

/// What happens when a target name is taken by an object copyrator does not manage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConflictPolicy {
    #[default]
    Skip,
    Overwrite,
}

/// Observed state of a CopyRule, written by copyrator after each sync of the rule.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CopyRuleStatus {
    /// The metadata.generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: True when every wanted copy is in sync; False with a reason otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The source, as `<namespace>/<name>` or `<namespace>/<selector>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Number of namespaces that should hold copies.
    #[serde(default)]
    pub target_namespaces: u32,
    /// Number of copies that are in sync with their source.
    #[serde(default)]
    pub synced_copies: u32,
    /// Number of copies the rule wants that are missing or out of date after the sync (a
    /// write failed and is retried).
    #[serde(default)]
    pub stale_copies: u32,
    /// Number of targets held by an object the rule may not write (listed in `conflicts`).
    #[serde(default)]
    pub conflicting_copies: u32,
    /// Targets this rule could not write, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<CopyConflict>,
    /// Keys of spec.keys a source lacks: its copies are made without them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_keys: Vec<MissingKeys>,
    /// Sources of a bundle left out of it: missing, or their key missing or not PEM
    /// certificates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOutSource>,
    /// For a bundle with `defaultCAs: true`: where its default CAs come from (the package and
    /// its version, or the file), and how many certificates they are.
    #[serde(
        rename = "defaultCAs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub default_cas: Option<DefaultCasStatus>,
    /// With createOnce: the namespaces copyrator created a copy in (once: never again, while
    /// the namespace exists).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub created_in: Vec<String>,
    /// With readOnly copies, for a rule of one copy per namespace (not sourceSelector): the
    /// namespaces it holds its read-only copy in (SPEC §4 item 11). The name there is the
    /// rule's: an object found at it that copyrator does not manage is overwritten with the
    /// copy. Kept for the rule's metadata.generation it was recorded for (observedGeneration).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only_in: Vec<String>,
    /// When copyrator last finished syncing this rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_time: Option<Time>,
    /// When the leader's last full resync began that checked every copy of this rule: each
    /// was then in sync, or is counted in staleCopies or conflictingCopies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_verified_time: Option<Time>,
    /// On a hub, for a rule placed on member clusters: what each member reports holding of it
    /// (SPEC §14.4), by cluster name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<MemberCopies>,
}

/// What one member cluster holds of a hub CopyRule placed on it, as the member reported it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberCopies {
    /// The member's name (its ClusterProfile's, and `spec.clusters.names`').
    pub cluster: String,
    /// Copies the rule wants there.
    #[serde(default)]
    pub wanted_copies: u32,
    /// Of those, in sync with the source.
    #[serde(default)]
    pub synced_copies: u32,
    /// Targets held there by an object the rule may not write.
    #[serde(default)]
    pub conflicting_copies: u32,
    /// The first of them, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<CopyConflict>,
    /// Why the member's ceiling refuses the rule, if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Why the hub could not let the member read the rule's source, if it could not: a Role
    /// or RoleBinding it keeps for the member that it may not write there (one another made
    /// under its name, a namespace that does not exist). The member's other grants are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_granted: Option<String>,
    /// When the member wrote its report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_time: Option<Time>,
}

/// Keys a rule asks for that one of its sources lacks.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub struct MissingKeys {
    /// The source, as `<namespace>/<name>`.
    pub source: String,
    pub keys: Vec<String>,
}

/// A source of a bundle left out of it, and why.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub struct LeftOutSource {
    /// The source, as `<Kind> <namespace>/<name>`.
    pub source: String,
    pub key: String,
    pub reason: String,
}

/// The default CAs a bundle's copies hold: the package and its version, or the file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DefaultCasStatus {
    /// The package of Mozilla's roots copyrator is built with, e.g. webpki-root-certs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Or the PEM file given with --default-cas-file, and its SHA-256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    pub certificates: u32,
}

/// A target a rule could not write.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub struct CopyConflict {
    pub namespace: String,
    pub name: String,
    pub reason: String,
}

/// An invalid rule: which field or annotation, and what is wrong with it (the rules,
/// `crate::rules`, and the transforms they carry, `crate::transform`, check their fields).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct RuleError {
    pub field: String,
    pub message: String,
}

impl RuleError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}
