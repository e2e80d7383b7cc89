//! Copies across clusters (SPEC §14): a member cluster pulls copies of a hub's sources through a
//! cluster-scoped `HubLink`, within the link's ceiling. This module is the API surface (the
//! `HubLink` resource, from which its CRD is generated), the link's settings parsed
//! (`link`), what a hub places on a member and how a placed rule becomes one of the member's
//! rules (`placement`), and the member's view of each hub that a plan takes (`view`).
//!
//! A hub's source is known on the member by an [`ObjectKey`] whose namespace is
//! `<link>/<namespace>` ([`ObjectKey::hub`]): no namespace of the member can have that name,
//! so such a key is never read, listed or written in the member, and its
//! [`ObjectKey::namespaced_name`] is the copies' `copyrator.io/source` mark,
//! `<link>/<namespace>/<name>`.

mod access;
pub mod credential;
mod link;
mod placement;
pub mod report;
mod view;

pub use access::{NamespaceAccess, Profiles, member_access};
pub use link::{LinkSettings, parse_ca_bundle};
pub use placement::{MAX_PLACED_SOURCES, Placement, Refusal, RefusedRule, place, placed_on};
pub use view::{HubSource, Hubs, LinkView};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::model::{Kind, ObjectKey};

/// A member cluster's link to a hub: where the hub is, the member's credential there, and
/// the ceiling of what the hub may write here (SPEC §14.2). Without one, nothing from any hub
/// is written.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "copyrator.io",
    version = "v1alpha1",
    kind = "HubLink",
    plural = "hublinks",
    shortname = "hl",
    category = "copyrator",
    status = "HubLinkStatus",
    doc = "HubLink lets a hub cluster's CopyRules placed on this cluster copy the hub's Secrets and ConfigMaps here, within a ceiling this cluster's administrator sets.",
    printcolumn = r#"{"name":"Server","type":"string","jsonPath":".spec.server"}"#,
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.clusterName"}"#,
    printcolumn = r#"{"name":"Reachable","type":"string","jsonPath":".status.conditions[?(@.type==\"Reachable\")].status"}"#,
    printcolumn = r#"{"name":"Rules","type":"integer","jsonPath":".status.placedRules"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct HubLinkSpec {
    /// The hub's API server: https://host:port.
    pub server: String,
    /// PEM certificates (base64, as a webhook's caBundle) the hub's serving certificate must
    /// chain to.
    pub ca_bundle: String,
    /// The Secret, in copyrator's own namespace, holding this cluster's bearer token on the
    /// hub. A new token written there is used from then on, with no restart.
    pub credential_secret: CredentialSecretRef,
    /// This cluster's name on the hub: the name hub CopyRules place on, and of its
    /// ClusterProfile there.
    pub cluster_name: String,
    /// The hub namespace of this cluster's ClusterProfile (multicluster.x-k8s.io), whose
    /// labels hub CopyRules' `spec.clusters.selector` match. Absent: selectors never place
    /// rules here; names still do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_profile_namespace: Option<String>,
    /// What the hub may write here, whatever its rules ask.
    pub ceiling: CeilingSpec,
}

/// A key of a Secret in copyrator's own namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CredentialSecretRef {
    pub name: String,
    /// The key holding the token (default `token`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// `spec.ceiling`: the bound on every copy a hub makes here.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CeilingSpec {
    /// The hub namespaces whose sources may be copied here: names, or patterns with `*`.
    pub source_namespaces: Vec<String>,
    /// Of those, the ones whose copies land in any namespace the rule and ceiling select.
    /// Copies of other sources land only in namespaces whose copyrator.io/accept-from names
    /// `<link>/<namespace>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trusted_source_namespaces: Vec<String>,
    /// Kinds accepted: Secret and/or ConfigMap (default both).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<String>,
    /// The namespaces of this cluster that may receive hub copies (`{}`: every one).
    pub namespace_selector: LabelSelector,
}

/// What the member observed of the link, written by its leader.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HubLinkStatus {
    /// `Reachable` (False since the first failed read of the hub), `Valid`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// When the hub was last read in full and the link's copies converged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_time: Option<Time>,
    /// The hub's CopyRules placed on this cluster and within the ceiling.
    #[serde(default)]
    pub placed_rules: u32,
    /// Placed rules refused here, and why (beyond the ceiling, invalid).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused_rules: Vec<RefusedRuleStatus>,
    /// The placed rules within the ceiling, as last read (the first [`MAX_PLACED_SOURCES`]
    /// by name): what `explain` needs to say why a namespace holds no copy of one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placed: Vec<PlacedRuleStatus>,
}

/// A placed rule the member takes: where its copies go and whether they need consent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacedRuleStatus {
    /// The hub CopyRule's name.
    pub name: String,
    /// The kind of its copies.
    pub kind: String,
    /// Its source on the hub: `<namespace>/<name>`.
    pub source: String,
    /// The copies' name.
    pub target_name: String,
    /// Whether its source's namespace is among the ceiling's trustedSourceNamespaces (else
    /// a namespace receives only if its copyrator.io/accept-from names `<link>/<namespace>`).
    pub trusted: bool,
    /// Its namespaceSelector, in label selector syntax.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<String>,
    /// The namespaces it names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// The namespaces it excludes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_namespaces: Vec<String>,
}

impl PlacedRuleStatus {
    /// What the status says of `rule`, a placed rule as the member takes it.
    pub fn of(rule: &crate::rules::Rule) -> Option<Self> {
        let crate::rules::RuleId::Hub { rule: name, .. } = &rule.id else {
            return None;
        };
        let crate::rules::SourceMatch::Name(source) = &rule.sources else {
            return None;
        };
        let (_, hub_ns) = rule.source_namespace.split_once('/')?;
        Some(Self {
            name: name.clone(),
            kind: rule.target_kind().to_string(),
            source: format!("{hub_ns}/{source}"),
            target_name: rule.target_name(source).to_string(),
            trusted: rule.tier != crate::tenancy::Tier::ConsentedInline,
            namespace_selector: rule.namespace_selector.as_ref().map(|s| s.to_string()),
            namespaces: rule.namespaces.iter().cloned().collect(),
            exclude_namespaces: rule.exclude_namespaces.iter().cloned().collect(),
        })
    }
}

/// A placed rule the member refuses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RefusedRuleStatus {
    pub name: String,
    pub reason: String,
}

impl ObjectKey {
    /// The key by which a member knows the source `namespace/name` of the hub its link `link`
    /// reaches (see the module documentation).
    pub fn hub(kind: Kind, link: &str, namespace: &str, name: impl Into<String>) -> Self {
        ObjectKey::new(kind, hub_namespace(link, namespace), name)
    }

    /// The link and the hub namespace of a hub source's key; `None` for any other key.
    pub fn hub_parts(&self) -> Option<(&str, &str)> {
        self.namespace.split_once('/')
    }

    /// The link of a hub source's key.
    pub fn hub_link(&self) -> Option<&str> {
        self.hub_parts().map(|(link, _)| link)
    }

    /// Whether this is a hub source's key.
    pub fn is_hub(&self) -> bool {
        self.namespace.contains('/')
    }

    /// The key of a hub source as the hub knows it (its own namespace); itself otherwise.
    pub fn on_hub(&self) -> ObjectKey {
        match self.hub_parts() {
            Some((_, ns)) => ObjectKey::new(self.kind, ns, self.name.clone()),
            None => self.clone(),
        }
    }
}

/// The namespace a member's keys give the hub namespace `namespace` of link `link`.
pub fn hub_namespace(link: &str, namespace: &str) -> String {
    format!("{link}/{namespace}")
}

/// The name of a member's identity on the hub, and of the Role and RoleBinding that grant it
/// the sources placed on it: `copyrator-member-<cluster>`.
pub fn member_identity(cluster: &str) -> String {
    format!("copyrator-member-{cluster}")
}

/// The label on the Roles and RoleBindings a hub keeps for a member: the member's name.
pub const MEMBER_LABEL: &str = "copyrator.io/member";

/// The API group, version and plural of the SIG-Multicluster ClusterProfile, the hub's
/// inventory of member clusters.
pub const CLUSTER_PROFILE_GROUP: &str = "multicluster.x-k8s.io";
pub const CLUSTER_PROFILE_VERSION: &str = "v1alpha1";
pub const CLUSTER_PROFILE_PLURAL: &str = "clusterprofiles";

/// The URL path of the hub's ClusterProfiles in `namespace`.
pub fn cluster_profiles_path(namespace: &str) -> String {
    format!(
        "/apis/{CLUSTER_PROFILE_GROUP}/{CLUSTER_PROFILE_VERSION}/namespaces/{namespace}/{CLUSTER_PROFILE_PLURAL}"
    )
}

#[cfg(test)]
mod tests;
