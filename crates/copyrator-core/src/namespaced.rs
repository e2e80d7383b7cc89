//! A namespace's own copy rules (SPEC §13): in a namespace-scoped install a team declares
//! copies from its own namespace with a `NamespacedCopyRule`, the namespaced sibling of the
//! cluster-scoped `CopyRule` (as cert-manager's Issuer is of its ClusterIssuer). copyrator
//! handles one as a CopyRule named `<namespace>/<name>`: a cluster-scoped name never holds a
//! `/`, so the two never meet, and every path that knows a CopyRule by its name (jobs, status,
//! marks) knows a NamespacedCopyRule the same way.

/// The name copyrator knows a rule by: its own for a CopyRule (`namespace` `None`),
/// `<namespace>/<name>` for a NamespacedCopyRule.
pub fn rule_name(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// The namespace and name of a NamespacedCopyRule known as `name`; `None` for a CopyRule's.
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
