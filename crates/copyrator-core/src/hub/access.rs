//! What each member may read on the hub (SPEC §14.1): per member and source namespace, the
//! names of the Secrets and ConfigMaps placed on it by name — the resourceNames of the Role the
//! hub keeps for it there. A member's identity so reads what is placed on it, and no other
//! member's sources.

use std::collections::{BTreeMap, BTreeSet};

use crate::copyrule::CopyRule;

/// The sources of one hub namespace a member may read, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceAccess {
    pub secrets: BTreeSet<String>,
    pub config_maps: BTreeSet<String>,
}

/// Per member cluster (named in a rule's `spec.clusters.names`), per hub namespace, what it
/// may read. Rules being deleted and rules that name no Secret or ConfigMap grant nothing.
pub fn member_access(
    copy_rules: &[CopyRule],
) -> BTreeMap<String, BTreeMap<String, NamespaceAccess>> {
    let mut out: BTreeMap<String, BTreeMap<String, NamespaceAccess>> = BTreeMap::new();
    for rule in copy_rules {
        let spec = &rule.spec;
        let (Some(clusters), Some(name)) = (&spec.clusters, &spec.source_name) else {
            continue;
        };
        if rule.metadata.deletion_timestamp.is_some()
            || !matches!(spec.api_version.as_deref(), None | Some("v1"))
            || crate::hub::check_placement(spec).is_err()
        {
            continue;
        }
        for cluster in &clusters.names {
            let access = out
                .entry(cluster.clone())
                .or_default()
                .entry(spec.source_namespace.clone())
                .or_default();
            match spec.kind.as_str() {
                "Secret" => access.secrets.insert(name.clone()),
                "ConfigMap" => access.config_maps.insert(name.clone()),
                _ => continue,
            };
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::copyrule::{ClusterPlacement, CopyRuleSpec};

    fn rule(name: &str, kind: &str, ns: &str, source: &str, clusters: &[&str]) -> CopyRule {
        CopyRule::new(
            name,
            CopyRuleSpec {
                kind: kind.into(),
                source_namespace: ns.into(),
                source_name: Some(source.into()),
                clusters: Some(ClusterPlacement {
                    names: clusters.iter().map(|c| c.to_string()).collect(),
                    selector: None,
                }),
                ..Default::default()
            },
        )
    }

    #[test]
    fn each_member_reads_only_what_is_placed_on_it() {
        let mut local = rule("local", "Secret", "platform", "local-only", &[]);
        local.spec.clusters = None;
        let rules = [
            rule("a", "Secret", "platform", "cred-a", &["member-a"]),
            rule(
                "both",
                "ConfigMap",
                "platform",
                "ca",
                &["member-a", "member-b"],
            ),
            rule("b", "Secret", "team", "cred-b", &["member-b"]),
            local,
        ];
        let access = member_access(&rules);
        let names = |m: &str, ns: &str| {
            let a = &access[m][ns];
            (
                a.secrets.iter().cloned().collect::<Vec<_>>(),
                a.config_maps.iter().cloned().collect::<Vec<_>>(),
            )
        };
        assert_eq!(
            names("member-a", "platform"),
            (vec!["cred-a".into()], vec!["ca".into()])
        );
        assert!(
            !access["member-a"].contains_key("team"),
            "member-a gets nothing of team"
        );
        assert_eq!(names("member-b", "platform"), (vec![], vec!["ca".into()]));
        assert_eq!(names("member-b", "team"), (vec!["cred-b".into()], vec![]));
        assert_eq!(access.len(), 2, "a rule placed nowhere grants nothing");
    }
}
