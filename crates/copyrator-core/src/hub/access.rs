//! What each member may read on the hub (SPEC §14.1): per member and source namespace, the
//! names of the Secrets and ConfigMaps placed on it — by name or by its ClusterProfile's
//! labels — the resourceNames of the Role the hub keeps for it there; and, in the members'
//! namespace, its own ClusterProfile. A member's identity so reads what is placed on it, its
//! own labels, and no other member's.

use std::collections::{BTreeMap, BTreeSet};

use crate::copyrule::CopyRule;

use super::placed_on;

/// The sources of one hub namespace a member may read, by kind, and the ClusterProfiles
/// (its own, in the members' namespace).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceAccess {
    pub secrets: BTreeSet<String>,
    pub config_maps: BTreeSet<String>,
    pub cluster_profiles: BTreeSet<String>,
}

/// The hub's inventory of members: each ClusterProfile's name (the cluster's) and labels.
pub type Profiles = BTreeMap<String, BTreeMap<String, String>>;

/// Per member cluster, per hub namespace, what it may read. The members are the clusters a
/// rule names and those with a ClusterProfile in `members_namespace` (`profiles`, which
/// rules' selectors match): each may read its own ClusterProfile there, even with nothing
/// placed on it yet, so it learns its labels. `profiles` `None` (the hub cannot read them):
/// selectors place nothing and no ClusterProfile is granted. Rules being deleted and rules
/// that name no Secret or ConfigMap grant nothing.
pub fn member_access(
    copy_rules: &[CopyRule],
    profiles: Option<&Profiles>,
    members_namespace: &str,
) -> BTreeMap<String, BTreeMap<String, NamespaceAccess>> {
    let mut out: BTreeMap<String, BTreeMap<String, NamespaceAccess>> = BTreeMap::new();
    let empty = Profiles::new();
    // A ClusterProfile is granted only by a hub that reads them: RBAC lets it grant only
    // what it holds itself.
    let grant_profile = profiles.is_some();
    let profiles = profiles.unwrap_or(&empty);
    let own_profile = |out: &mut BTreeMap<String, BTreeMap<String, NamespaceAccess>>,
                       cluster: &str| {
        if !grant_profile {
            out.entry(cluster.to_string()).or_default();
            return;
        }
        out.entry(cluster.to_string())
            .or_default()
            .entry(members_namespace.to_string())
            .or_default()
            .cluster_profiles
            .insert(cluster.to_string());
    };
    for cluster in profiles.keys() {
        own_profile(&mut out, cluster);
    }
    for rule in copy_rules {
        let spec = &rule.spec;
        let (Some(clusters), Some(name)) = (&spec.clusters, &spec.source_name) else {
            continue;
        };
        if rule.metadata.deletion_timestamp.is_some()
            || !matches!(spec.api_version.as_deref(), None | Some("v1"))
            || crate::rules::check_placement(spec).is_err()
        {
            continue;
        }
        let selected = profiles
            .iter()
            .filter(|(cluster, labels)| placed_on(spec, cluster, Some(labels)))
            .map(|(cluster, _)| cluster);
        let members: BTreeSet<&String> = clusters.names.iter().chain(selected).collect();
        for cluster in members {
            own_profile(&mut out, cluster);
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
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

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
        let access = member_access(&rules, Some(&Profiles::new()), "members");
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
        assert_eq!(
            access["member-a"]["members"].cluster_profiles,
            ["member-a".to_string()].into(),
            "a named member reads its own ClusterProfile"
        );
    }

    #[test]
    fn a_selector_places_on_the_clusters_whose_profile_matches() {
        let mut prod = rule("prod", "Secret", "platform", "cred", &[]);
        if let Some(clusters) = prod.spec.clusters.as_mut() {
            clusters.selector = Some(LabelSelector {
                match_labels: Some([("env".to_string(), "prod".to_string())].into()),
                match_expressions: None,
            });
        }
        let label = |v: &str| [("env".to_string(), v.to_string())].into();
        let profiles: Profiles = [
            ("member-a".to_string(), label("prod")),
            ("member-b".to_string(), label("dev")),
        ]
        .into();
        let access = member_access(std::slice::from_ref(&prod), Some(&profiles), "members");
        assert_eq!(
            access["member-a"]["platform"].secrets,
            ["cred".to_string()].into(),
            "the matching cluster reads the source"
        );
        assert!(
            !access["member-b"].contains_key("platform"),
            "the other cluster reads nothing of platform"
        );
        for m in ["member-a", "member-b"] {
            assert_eq!(
                access[m]["members"].cluster_profiles,
                [m.to_string()].into(),
                "{m} reads its own ClusterProfile, and no other"
            );
        }
        // No inventory (CRD not installed): the selector places nothing.
        let access = member_access(
            std::slice::from_ref(&prod),
            Some(&Profiles::new()),
            "members",
        );
        assert!(access.is_empty(), "nothing placed: {access:?}");
        // ClusterProfiles unreadable: nothing selected, no profile granted; names still work.
        let mut named = prod;
        if let Some(clusters) = named.spec.clusters.as_mut() {
            clusters.names = vec!["member-c".into()];
        }
        let access = member_access(&[named], None, "members");
        assert_eq!(access.keys().collect::<Vec<_>>(), ["member-c"]);
        assert!(
            !access["member-c"].contains_key("members"),
            "no ClusterProfile granted by a hub that cannot read them"
        );
        assert_eq!(
            access["member-c"]["platform"].secrets,
            ["cred".to_string()].into()
        );
    }
}
