//! How copyrator names a rule that lives in a namespace: `<namespace>/<name>`. A cluster-scoped
//! CopyRule's name never holds a `/`, so the two never meet, and every path that knows a rule
//! by its name (jobs, status, marks, the per-namespace re-list of a namespace-scoped install,
//! SPEC §13) tells them apart. No namespaced rule kind is served yet (issue 45 item 3, the
//! Issuer/ClusterIssuer pattern); a CopyRule, cluster-scoped, is always known by its own name.

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
