//! A `HubLink` validated into what the member acts on: the hub's name here, this cluster's
//! name there, and the ceiling (SPEC §14.2). Every error names the field.

use crate::{
    model::Kind,
    rules::RuleError,
    selector::{self, Selector},
    tenancy::NamespacePatterns,
};

use super::HubLink;

/// A link's settings, parsed and checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkSettings {
    /// The HubLink's name: the hub's name in this cluster's marks.
    pub name: String,
    /// This cluster's name on the hub.
    pub cluster_name: String,
    /// The hub namespace of its ClusterProfile; `None`: selectors place nothing here.
    pub cluster_profile_namespace: Option<String>,
    /// Hub namespaces whose sources are accepted.
    pub source_namespaces: NamespacePatterns,
    /// Of those, the ones whose copies need no consent.
    pub trusted_source_namespaces: NamespacePatterns,
    /// Kinds accepted (Secret, ConfigMap).
    pub kinds: Vec<Kind>,
    /// Namespaces of this cluster that may receive.
    pub namespace_selector: Selector,
}

impl LinkSettings {
    /// Checks `link` and parses its settings.
    pub fn from_link(link: &HubLink) -> Result<Self, RuleError> {
        let name = link.metadata.name.clone().unwrap_or_default();
        // The name is part of every mark of the link's copies (`<link>/<namespace>/<name>`).
        if !selector::is_dns_label(&name) {
            return Err(RuleError::new(
                "metadata.name",
                format!(
                    "{name:?} is not a DNS label: a HubLink's name is part of its copies' marks"
                ),
            ));
        }
        let spec = &link.spec;
        if !spec.server.starts_with("https://") {
            return Err(RuleError::new(
                "spec.server",
                format!("{:?} is not an https:// URL", spec.server),
            ));
        }
        parse_ca_bundle(&spec.ca_bundle).map_err(|e| RuleError::new("spec.caBundle", e))?;
        if !selector::is_dns_subdomain(&spec.credential_secret.name) {
            return Err(RuleError::new(
                "spec.credentialSecret.name",
                format!("{:?} is not a Secret's name", spec.credential_secret.name),
            ));
        }
        if !selector::is_dns_subdomain(&spec.cluster_name) {
            return Err(RuleError::new(
                "spec.clusterName",
                format!("{:?} is not a cluster's name", spec.cluster_name),
            ));
        }
        // Part of the URL the profile is read at: a namespace's name, nothing else.
        if let Some(ns) = &spec.cluster_profile_namespace
            && !selector::is_dns_label(ns)
        {
            return Err(RuleError::new(
                "spec.clusterProfileNamespace",
                format!("{ns:?} is not a namespace's name"),
            ));
        }
        let ceiling = &spec.ceiling;
        let patterns = |field: &str, list: &[String]| {
            NamespacePatterns::from_entries(list.iter().map(String::as_str))
                .map_err(|e| RuleError::new(field, e))
        };
        let source_namespaces =
            patterns("spec.ceiling.sourceNamespaces", &ceiling.source_namespaces)?;
        let trusted_source_namespaces = patterns(
            "spec.ceiling.trustedSourceNamespaces",
            &ceiling.trusted_source_namespaces,
        )?;
        let kinds = if ceiling.kinds.is_empty() {
            vec![Kind::Secret, Kind::ConfigMap]
        } else {
            ceiling
                .kinds
                .iter()
                .map(|k| match k.as_str() {
                    "Secret" => Ok(Kind::Secret),
                    "ConfigMap" => Ok(Kind::ConfigMap),
                    other => Err(RuleError::new(
                        "spec.ceiling.kinds",
                        format!("{other:?}: a hub's copies are Secrets or ConfigMaps"),
                    )),
                })
                .collect::<Result<_, _>>()?
        };
        let namespace_selector = Selector::from_label_selector(&ceiling.namespace_selector)
            .map_err(|e| RuleError::new("spec.ceiling.namespaceSelector", e.to_string()))?;
        Ok(Self {
            name,
            cluster_name: spec.cluster_name.clone(),
            cluster_profile_namespace: spec.cluster_profile_namespace.clone(),
            source_namespaces,
            trusted_source_namespaces,
            kinds,
            namespace_selector,
        })
    }
}

/// The DER certificates of a base64 PEM bundle (a HubLink's `caBundle`).
pub fn parse_ca_bundle(bundle: &str) -> Result<Vec<Vec<u8>>, String> {
    use base64::Engine as _;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(bundle.trim())
        .map_err(|_| "is not base64".to_string())?;
    crate::transform::certificates::certificate_ders(&pem).map_err(|e| e.to_string())
}
