//! What a CopyRule placed on member clusters (`spec.clusters`, SPEC §14.1) must be: checked
//! with the rest of the rule; how a member takes what is placed on it is `crate::hub`'s.

use crate::{
    copyrule::CopyRuleSpec,
    selector::{self, Selector},
};

use super::{MAX_NAMESPACES, RuleError};

/// What a CopyRule with `spec.clusters` must be (SPEC §14.1): placed somewhere, on valid
/// cluster names or a valid selector, copying one named Secret or ConfigMap. Checked at
/// admission, beside the rest of the rule.
pub fn check_placement(spec: &CopyRuleSpec) -> Result<(), RuleError> {
    let Some(clusters) = &spec.clusters else {
        return Ok(());
    };
    if clusters.names.is_empty() && clusters.selector.is_none() {
        return Err(RuleError::new(
            "spec.clusters",
            "places the rule nowhere: give names and/or a selector",
        ));
    }
    if clusters.names.len() > MAX_NAMESPACES {
        return Err(RuleError::new(
            "spec.clusters.names",
            format!(
                "lists {} clusters; at most {MAX_NAMESPACES} are allowed (use a selector)",
                clusters.names.len()
            ),
        ));
    }
    if let Some(bad) = clusters
        .names
        .iter()
        .find(|n| !selector::is_dns_subdomain(n))
    {
        return Err(RuleError::new(
            "spec.clusters.names",
            format!("{bad:?} is not a cluster's name"),
        ));
    }
    if let Some(sel) = &clusters.selector {
        Selector::from_label_selector(sel)
            .map_err(|e| RuleError::new("spec.clusters.selector", e.to_string()))?;
    }
    // A member may read only the sources placed on it, by name (per-member Roles with
    // resourceNames): it cannot list a selector's matches, a bundle's sources or a template's.
    let not = |field: &str, what: &str| {
        Err(RuleError::new(
            field,
            format!("a rule placed on member clusters (spec.clusters) {what}"),
        ))
    };
    if spec.sources.is_some() {
        return not("spec.sources", "cannot be a bundle");
    }
    if spec.template.is_some() {
        return not("spec.template", "cannot be a template");
    }
    if spec.source_selector.is_some() || spec.source_name.is_none() {
        return not(
            "spec.sourceName",
            "names its source: a member reads only what is placed on it, by name",
        );
    }
    if !matches!(spec.api_version.as_deref(), None | Some("v1"))
        || !matches!(spec.kind.as_str(), "Secret" | "ConfigMap")
    {
        return not("spec.kind", "copies a Secret or a ConfigMap");
    }
    Ok(())
}
