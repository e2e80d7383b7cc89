//! Members' status on the hub (SPEC §14.4): each member writes, into its own ConfigMap on the
//! hub, what it holds of every hub CopyRule placed on it (copies in sync, wanted, conflicts, or
//! why its ceiling refuses the rule); the hub's leader gathers those into each rule's
//! `status.clusters`. A member's report is believed only for rules placed on it, and only in
//! bounded size: a member cannot speak for another, nor grow a rule's status without bound.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};

use crate::copyrule::{CopyConflict, CopyRule, MemberCopies};

/// Conflicts a member reports per rule, at most (the count is whole).
pub const MAX_REPORTED_CONFLICTS: usize = 10;

/// Members a rule's `status.clusters` lists, at most (by name; the rest are left out).
pub const MAX_LISTED_MEMBERS: usize = 256;

/// Longest reason taken from a member's report, in characters (a member's strings are its
/// own: bounded, so that no member can make a rule's status too large to be written).
const MAX_REASON: usize = 256;

/// `s`, cut to `max` characters.
fn bounded(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

/// The key of the member's report ConfigMap holding when it was written.
pub const REPORTED_AT_KEY: &str = "reportedAt";

/// What a member holds of one hub CopyRule placed on it: the value of the rule's key in the
/// member's report ConfigMap (JSON).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleReport {
    /// Copies the rule wants in the member.
    pub wanted: u32,
    /// Of those, in sync with the hub's source.
    pub synced: u32,
    /// Targets held by an object the rule may not write, counted whole.
    pub conflicting: u32,
    /// The first of them, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<CopyConflict>,
    /// Why the member's ceiling refuses the rule (then it holds no copy of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

impl RuleReport {
    /// A report of `wanted` copies, `synced` in sync, and `conflicts` (kept up to the bound).
    pub fn new(wanted: u32, synced: u32, mut conflicts: Vec<CopyConflict>) -> RuleReport {
        conflicts.sort();
        conflicts.dedup();
        let conflicting = conflicts.len() as u32;
        conflicts.truncate(MAX_REPORTED_CONFLICTS);
        RuleReport {
            wanted,
            synced,
            conflicting,
            conflicts,
            refused: None,
        }
    }

    /// A rule the member's ceiling refuses, and why.
    pub fn refused(why: impl Into<String>) -> RuleReport {
        RuleReport {
            refused: Some(why.into()),
            ..RuleReport::default()
        }
    }
}

/// The data of a member's report ConfigMap: one key per placed rule (its name), the JSON of
/// its [`RuleReport`].
pub fn report_data(reports: &BTreeMap<String, RuleReport>) -> BTreeMap<String, String> {
    reports
        .iter()
        .filter_map(|(rule, r)| Some((rule.clone(), serde_json::to_string(r).ok()?)))
        .collect()
}

/// One member's report as read on the hub: its cluster name (from the ConfigMap's member
/// label, which the hub sets), its data, and when it was written.
pub struct MemberReport<'a> {
    pub cluster: &'a str,
    pub data: &'a BTreeMap<String, String>,
}

/// What the hub could not grant its members this round, and why: by member and hub
/// namespace (`None`: the member's grants outside source namespaces, its CopyRules binding or
/// its report).
pub type GrantFailures = BTreeMap<(String, Option<String>), String>;

/// `clusters` (a rule's `status.clusters`) with what the hub could not grant: each member
/// `rule` is placed on (`placed(rule, cluster)`) whose grant in the rule's source namespace,
/// or outside source namespaces, failed says why (`notGranted`), reported or not.
pub fn with_grant_failures(
    rule: &CopyRule,
    mut clusters: Vec<MemberCopies>,
    failures: &GrantFailures,
    placed: impl Fn(&CopyRule, &str) -> bool,
) -> Vec<MemberCopies> {
    for ((cluster, namespace), why) in failures {
        let concerns = namespace
            .as_ref()
            .is_none_or(|ns| *ns == rule.spec.source_namespace);
        if !concerns || !placed(rule, cluster) {
            continue;
        }
        let at = match clusters.iter().position(|c| c.cluster == *cluster) {
            Some(at) => at,
            None => {
                clusters.push(MemberCopies {
                    cluster: cluster.clone(),
                    ..MemberCopies::default()
                });
                clusters.len() - 1
            }
        };
        clusters[at].not_granted = Some(bounded(why, MAX_REASON));
    }
    clusters.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    clusters.truncate(MAX_LISTED_MEMBERS);
    clusters
}

/// The `status.clusters` of hub CopyRule `rule` from the members' `reports`: one entry per
/// member it is placed on (`placed(rule, cluster)`) that reported it, by cluster name, at
/// most [`MAX_LISTED_MEMBERS`]. A value that does not parse is said as such, never trusted.
pub fn clusters_status(
    rule: &CopyRule,
    reports: &[MemberReport<'_>],
    placed: impl Fn(&CopyRule, &str) -> bool,
) -> Vec<MemberCopies> {
    let Some(name) = rule.metadata.name.as_deref() else {
        return Vec::new();
    };
    let mut out: Vec<MemberCopies> = reports
        .iter()
        .filter(|m| placed(rule, m.cluster))
        .filter_map(|m| {
            let raw = m.data.get(name)?;
            let reported_time = m
                .data
                .get(REPORTED_AT_KEY)
                .and_then(|t| t.parse().ok())
                .map(Time);
            let entry = match serde_json::from_str::<RuleReport>(raw) {
                Ok(r) => MemberCopies {
                    cluster: m.cluster.to_string(),
                    wanted_copies: r.wanted,
                    synced_copies: r.synced,
                    conflicting_copies: r.conflicting,
                    conflicts: r
                        .conflicts
                        .into_iter()
                        .take(MAX_REPORTED_CONFLICTS)
                        .map(|c| CopyConflict {
                            namespace: bounded(&c.namespace, 63),
                            name: bounded(&c.name, 253),
                            reason: bounded(&c.reason, MAX_REASON),
                        })
                        .collect(),
                    refused: r.refused.map(|why| bounded(&why, MAX_REASON)),
                    not_granted: None,
                    reported_time,
                },
                Err(_) => MemberCopies {
                    cluster: m.cluster.to_string(),
                    refused: Some("the member's report does not parse".into()),
                    reported_time,
                    ..MemberCopies::default()
                },
            };
            Some(entry)
        })
        .collect();
    out.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    out.truncate(MAX_LISTED_MEMBERS);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::copyrule::{ClusterPlacement, CopyRuleSpec};

    fn rule(name: &str, clusters: &[&str]) -> CopyRule {
        let mut r = CopyRule::new(
            name,
            CopyRuleSpec {
                kind: "Secret".into(),
                source_namespace: "platform".into(),
                source_name: Some("cred".into()),
                clusters: Some(ClusterPlacement {
                    names: clusters.iter().map(|c| c.to_string()).collect(),
                    selector: None,
                }),
                ..CopyRuleSpec::default()
            },
        );
        r.metadata.name = Some(name.into());
        r
    }

    fn named(rule: &CopyRule, cluster: &str) -> bool {
        crate::hub::placed_on(&rule.spec, cluster, None)
    }

    #[test]
    fn a_report_round_trips_and_keeps_at_most_ten_conflicts_but_counts_all() {
        let conflicts: Vec<CopyConflict> = (0..25)
            .map(|i| CopyConflict {
                namespace: format!("ns-{i:02}"),
                name: "cred".into(),
                reason: "an object copyrator does not own".into(),
            })
            .collect();
        let mut reports = BTreeMap::new();
        reports.insert("registry".to_string(), RuleReport::new(30, 5, conflicts));
        reports.insert("ca".to_string(), RuleReport::refused("beyond the ceiling"));
        let data = report_data(&reports);
        let back: RuleReport = serde_json::from_str(&data["registry"]).unwrap();
        assert_eq!((back.wanted, back.synced, back.conflicting), (30, 5, 25));
        assert_eq!(back.conflicts.len(), MAX_REPORTED_CONFLICTS);
        let refused: RuleReport = serde_json::from_str(&data["ca"]).unwrap();
        assert_eq!(refused.refused.as_deref(), Some("beyond the ceiling"));
    }

    #[test]
    fn a_member_speaks_only_for_rules_placed_on_it_and_nonsense_is_said_as_such() {
        let registry = rule("registry", &["m1", "m2"]);
        let mut good = BTreeMap::new();
        good.insert(
            "registry".to_string(),
            serde_json::to_string(&RuleReport::new(3, 3, vec![])).unwrap(),
        );
        good.insert(REPORTED_AT_KEY.to_string(), "2026-11-28T07:00:00Z".into());
        let mut bad = BTreeMap::new();
        bad.insert("registry".to_string(), "{not json".to_string());
        let reports = [
            MemberReport {
                cluster: "m1",
                data: &good,
            },
            MemberReport {
                cluster: "m2",
                data: &bad,
            },
            // Not placed on m3: its word about the rule is not taken.
            MemberReport {
                cluster: "m3",
                data: &good,
            },
        ];
        let status = clusters_status(&registry, &reports, named);
        assert_eq!(
            status
                .iter()
                .map(|c| c.cluster.as_str())
                .collect::<Vec<_>>(),
            ["m1", "m2"]
        );
        assert_eq!((status[0].wanted_copies, status[0].synced_copies), (3, 3));
        assert!(status[0].reported_time.is_some());
        assert_eq!(
            status[1].refused.as_deref(),
            Some("the member's report does not parse")
        );
        // A member's strings are bounded, whatever it writes.
        let mut long = BTreeMap::new();
        let mut huge = RuleReport::refused("x".repeat(100_000));
        huge.conflicts.push(CopyConflict {
            namespace: "n".repeat(10_000),
            name: "c".into(),
            reason: "r".repeat(10_000),
        });
        long.insert(
            "registry".to_string(),
            serde_json::to_string(&huge).unwrap(),
        );
        let status = clusters_status(
            &registry,
            &[MemberReport {
                cluster: "m1",
                data: &long,
            }],
            named,
        );
        assert_eq!(status[0].refused.as_ref().map(String::len), Some(256));
        assert_eq!(status[0].conflicts[0].namespace.len(), 63);
        assert_eq!(status[0].conflicts[0].reason.len(), 256);
        // A rule a member did not report: no entry for it.
        let other = rule("other", &["m1"]);
        assert!(clusters_status(&other, &reports, named).is_empty());
    }

    #[test]
    fn a_grant_the_hub_could_not_make_is_said_for_the_members_placed_only() {
        let registry = rule("registry", &["m1", "m2"]);
        let reported = vec![MemberCopies {
            cluster: "m2".into(),
            wanted_copies: 1,
            ..MemberCopies::default()
        }];
        let failures: GrantFailures = [
            // m1's binding in the rule's source namespace is another's: said, though m1
            // has not reported.
            (
                ("m1".into(), Some("platform".into())),
                "held by another".into(),
            ),
            // m2's in another namespace: not this rule's concern.
            (("m2".into(), Some("team".into())), "not found".into()),
            // m3 is not placed on: nothing said of it here.
            (("m3".into(), None), "refused".into()),
        ]
        .into();
        let status = with_grant_failures(&registry, reported, &failures, named);
        assert_eq!(
            status
                .iter()
                .map(|c| (c.cluster.as_str(), c.not_granted.as_deref()))
                .collect::<Vec<_>>(),
            [("m1", Some("held by another")), ("m2", None)]
        );
        assert_eq!(status[1].wanted_copies, 1, "m2's report is kept");
        // A member-wide failure concerns every rule placed on it.
        let failures: GrantFailures = [(("m2".into(), None), "refused".into())].into();
        let status = with_grant_failures(&registry, Vec::new(), &failures, named);
        assert_eq!(status.len(), 1);
        assert_eq!(status[0].not_granted.as_deref(), Some("refused"));
    }
}
