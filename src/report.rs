//! Telling people what happened: Events on sources and CopyRules, conflict metrics, and the
//! CopyRule status (written only when it changed).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};

use crate::{
    apply::Applied,
    copyrule::{CopyConflict, CopyRule, CopyRuleStatus},
    events::{Events, Regarding, reason},
    marks,
    metrics::{Metrics, ReasonLabels},
    model::ObjectKey,
    plan::{Action, ClaimRef, ConflictReason, World},
    rules::{Rule, RuleError, RuleId, SourceMatch},
};

/// Per-rule tally of one job's outcomes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    /// Copies the rule wants (claims), by target.
    pub wanted: BTreeSet<(String, String)>,
    pub synced: u32,
    pub created: u32,
    pub updated: u32,
    pub deleted: u32,
    pub failed: u32,
    pub conflicts: Vec<CopyConflict>,
}

impl Tally {
    pub fn writes(&self) -> u32 {
        self.created + self.updated + self.deleted
    }

    pub fn namespaces(&self) -> u32 {
        self.wanted
            .iter()
            .map(|(ns, _)| ns)
            .collect::<BTreeSet<_>>()
            .len() as u32
    }
}

/// Sums up outcomes per rule. Deletions are counted against the rule recorded on the copy.
pub fn tally(outcomes: &[(Action, Applied)]) -> BTreeMap<RuleId, Tally> {
    let mut out: BTreeMap<RuleId, Tally> = BTreeMap::new();
    for (action, applied) in outcomes {
        let done = matches!(applied, Applied::Done);
        match action {
            Action::InSync { target, by } => {
                let t = out.entry(by.rule.clone()).or_default();
                t.wanted
                    .insert((target.namespace.clone(), target.name.clone()));
                t.synced += 1;
            }
            Action::Create { copy, by }
            | Action::Update { copy, by, .. }
            | Action::Recreate { copy, by, .. } => {
                if matches!(applied, Applied::NamespaceTerminating) {
                    continue;
                }
                let t = out.entry(by.rule.clone()).or_default();
                t.wanted
                    .insert((copy.key.namespace.clone(), copy.key.name.clone()));
                if done {
                    t.synced += 1;
                    match action {
                        Action::Create { .. } => t.created += 1,
                        _ => t.updated += 1,
                    }
                } else {
                    t.failed += 1;
                }
            }
            Action::Delete {
                rule: Some(rule), ..
            } if done => {
                out.entry(rule.clone()).or_default().deleted += 1;
            }
            Action::Conflict { target, by, reason } => {
                let t = out.entry(by.rule.clone()).or_default();
                t.wanted
                    .insert((target.namespace.clone(), target.name.clone()));
                t.conflicts.push(CopyConflict {
                    namespace: target.namespace.clone(),
                    name: target.name.clone(),
                    reason: reason.to_string(),
                });
            }
            _ => {}
        }
    }
    out
}

/// Events and metrics for one job's outcomes.
///
/// Events about the source of an untrusted namespace (SPEC §9.5) never name objects in other
/// namespaces: the tenant who reads them may not be allowed to see those. They say how many
/// targets were refused or not written, and why, in one Event per reason.
pub async fn publish(
    events: &Events,
    metrics: &Metrics,
    world: &World,
    outcomes: &[(Action, Applied)],
) {
    // (source of an untrusted inline rule, event reason, summary) -> count
    let mut anonymous: BTreeMap<(ObjectKey, &'static str, String), usize> = BTreeMap::new();
    for (action, applied) in outcomes {
        match (action, applied) {
            (Action::Refused { by, .. }, _) => {
                metrics.refused_targets.inc();
                if let RuleId::Inline(source) = &by.rule {
                    let why = format!(
                        "its namespace does not accept copies from {0} (it needs {1}: {0} on the target namespace)",
                        source.namespace,
                        marks::ACCEPT_FROM_ANNOTATION
                    );
                    *anonymous
                        .entry((source.clone(), reason::REFUSED, why))
                        .or_default() += 1;
                }
            }
            (
                Action::Conflict {
                    target,
                    by,
                    reason: why,
                },
                _,
            ) => {
                let label = match why {
                    ConflictReason::Unmanaged => "unmanaged",
                    ConflictReason::OwnedBy(_) => "other_rule",
                    ConflictReason::HeldByHigherTier(_) => "higher_precedence",
                    ConflictReason::ServiceAccountToken => "service_account_token",
                };
                metrics
                    .conflicts
                    .get_or_create(&ReasonLabels { reason: label })
                    .inc();
                let event_reason = match why {
                    ConflictReason::ServiceAccountToken => reason::SA_TOKEN,
                    _ => reason::CONFLICT,
                };
                if let Some(source) = untrusted_source(world, by) {
                    let summary = match why {
                        ConflictReason::ServiceAccountToken => {
                            "it is a service-account token Secret, never copied"
                        }
                        ConflictReason::Unmanaged => {
                            "an object not managed by copyrator holds the name"
                        }
                        ConflictReason::OwnedBy(_) => {
                            "the copy of a rule of higher precedence gets the name"
                        }
                        ConflictReason::HeldByHigherTier(_) => {
                            "a retained copy of higher precedence holds the name"
                        }
                    };
                    *anonymous
                        .entry((source.clone(), event_reason, summary.to_string()))
                        .or_default() += 1;
                    continue;
                }
                let note = match why {
                    ConflictReason::ServiceAccountToken => {
                        format!(
                            "{} is a service-account token Secret; it is never copied",
                            by.source.namespaced_name()
                        )
                    }
                    _ => format!("{target} not written: {why}; left untouched"),
                };
                if let Some(regarding) = regarding(world, by) {
                    events.warning(&regarding, event_reason, note).await;
                }
            }
            (
                Action::Update {
                    copy,
                    adopt: true,
                    by,
                    ..
                }
                | Action::Recreate {
                    copy,
                    adopt: true,
                    by,
                    ..
                },
                Applied::Done,
            ) => {
                if let Some(regarding) = regarding(world, by) {
                    events
                        .normal(
                            &regarding,
                            reason::ADOPTED,
                            format!("{} was not managed by copyrator and was overwritten (conflictPolicy: Overwrite)", copy.key),
                        )
                        .await;
                }
            }
            (
                Action::Create { copy, by }
                | Action::Update { copy, by, .. }
                | Action::Recreate { copy, by, .. },
                Applied::Failed(e),
            ) => {
                if let Some(source) = untrusted_source(world, by) {
                    *anonymous
                        .entry((
                            source.clone(),
                            reason::FAILED,
                            format!("writing failed with HTTP {} (retrying)", e.code()),
                        ))
                        .or_default() += 1;
                    continue;
                }
                if let Some(regarding) = regarding(world, by) {
                    events
                        .warning(
                            &regarding,
                            reason::FAILED,
                            format!("writing {} failed: HTTP {}", copy.key, e.code()),
                        )
                        .await;
                }
            }
            _ => {}
        }
    }
    for ((source, event_reason, why), count) in anonymous {
        let Some(info) = world.sources.get(&source) else {
            continue;
        };
        let regarding = Regarding::source(source.kind, &source, &info.uid);
        let note = match count {
            1 => format!("1 target namespace gets no copy: {why}"),
            n => format!("{n} target namespaces get no copy: {why}"),
        };
        events.warning(&regarding, event_reason, note).await;
    }
}

/// The source of a claim whose Events must not name other namespaces' objects: the inline
/// rule of an untrusted namespace (SPEC §9.5).
fn untrusted_source<'a>(world: &World, by: &'a ClaimRef) -> Option<&'a ObjectKey> {
    match &by.rule {
        RuleId::Inline(source) if !world.policy.trust.is_trusted(&source.namespace) => Some(source),
        _ => None,
    }
}

/// The object an Event about a claim belongs on: the CopyRule, or the source of an inline rule.
fn regarding(world: &World, by: &ClaimRef) -> Option<Regarding> {
    match &by.rule {
        RuleId::CopyRule(name) => Some(Regarding::CopyRule {
            name: name.clone(),
            uid: String::new(),
        }),
        RuleId::Inline(key) => world
            .sources
            .get(key)
            .map(|s| Regarding::source(key.kind, key, &s.uid)),
    }
}

/// The status a CopyRule should show after a sync that saw `tally`.
pub fn rule_status(
    rule: &CopyRule,
    parsed: Result<&Rule, &RuleError>,
    world: &World,
    tally: Option<&Tally>,
    now: Timestamp,
) -> CopyRuleStatus {
    let empty = Tally::default();
    let tally = tally.unwrap_or(&empty);
    let (ready, why, message, source) = match parsed {
        Err(e) => (false, "Invalid", e.to_string(), None),
        Ok(r) => {
            let source = Some(r.source_description());
            let wanted = tally.wanted.len();
            let source_missing = matches!(&r.sources, SourceMatch::Name(_))
                && !world
                    .sources
                    .values()
                    .any(|s| !s.deleting && r.selects_source(s));
            if source_missing {
                (
                    false,
                    "SourceNotFound",
                    format!("source {} not found", r.source_description()),
                    source,
                )
            } else if !tally.conflicts.is_empty() {
                (
                    false,
                    "Conflicts",
                    format!(
                        "{}/{wanted} copies in sync, {} in conflict",
                        tally.synced,
                        tally.conflicts.len()
                    ),
                    source,
                )
            } else if tally.failed > 0 {
                (
                    false,
                    "SyncFailed",
                    format!(
                        "{}/{wanted} copies in sync, {} failed (retrying)",
                        tally.synced, tally.failed
                    ),
                    source,
                )
            } else if wanted == 0 && matches!(&r.sources, SourceMatch::Selector(_)) {
                (
                    true,
                    "NoSources",
                    "no source matches the selector".to_string(),
                    source,
                )
            } else {
                (
                    true,
                    "Synced",
                    format!("{}/{wanted} copies in sync", tally.synced),
                    source,
                )
            }
        }
    };
    let previous = rule.status.as_ref();
    let status_str = if ready { "True" } else { "False" };
    let last_transition = previous
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .filter(|c| c.status == status_str)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    let mut conflicts = tally.conflicts.clone();
    conflicts.sort();
    CopyRuleStatus {
        observed_generation: rule.metadata.generation,
        conditions: vec![Condition {
            type_: "Ready".into(),
            status: status_str.into(),
            reason: why.into(),
            message,
            last_transition_time: last_transition,
            observed_generation: rule.metadata.generation,
        }],
        source,
        target_namespaces: tally.namespaces(),
        synced_copies: tally.synced,
        conflicts,
        last_sync_time: Some(Time(now)),
    }
}

/// Whether two statuses differ in anything but the sync time.
pub fn status_changed(old: Option<&CopyRuleStatus>, new: &CopyRuleStatus) -> bool {
    let Some(old) = old else {
        return true;
    };
    let strip = |s: &CopyRuleStatus| CopyRuleStatus {
        last_sync_time: None,
        ..s.clone()
    };
    strip(old) != strip(new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        content::DesiredCopy,
        copyrule::{ConflictPolicy, CopyRuleSpec, DeletionPolicy},
        model::{Kind, ObjectKey, Payload, SourceInfo},
    };

    fn rule() -> CopyRule {
        let mut r = CopyRule::new(
            "r",
            CopyRuleSpec {
                kind: Kind::ConfigMap,
                source_namespace: "src".into(),
                source_name: Some("cm".into()),
                source_selector: None,
                namespace_selector: None,
                namespaces: vec!["a".into(), "b".into(), "c".into()],
                exclude_namespaces: vec![],
                target_name: None,
                deletion_policy: DeletionPolicy::Delete,
                conflict_policy: ConflictPolicy::Skip,
            },
        );
        r.metadata.generation = Some(3);
        r
    }

    fn world_with_source() -> World {
        let key = ObjectKey::new(Kind::ConfigMap, "src", "cm");
        let mut w = World::default();
        w.sources.insert(
            key.clone(),
            SourceInfo {
                key,
                uid: "u".into(),
                resource_version: "1".into(),
                labels: Default::default(),
                annotations: Default::default(),
                created: 0,
                deleting: false,
            },
        );
        w
    }

    fn outcomes(cr: &CopyRule, w: &World) -> Vec<(Action, Applied)> {
        let parsed = Rule::from_copy_rule(cr).unwrap();
        let src = w.sources.values().next().unwrap();
        let by = ClaimRef {
            rule: parsed.id.clone(),
            source: src.key.clone(),
        };
        let copy = Box::new(DesiredCopy::build(&parsed, src, &Payload::default(), "a"));
        vec![
            (
                Action::Create {
                    copy,
                    by: by.clone(),
                },
                Applied::Done,
            ),
            (
                Action::InSync {
                    target: ObjectKey::new(Kind::ConfigMap, "b", "cm"),
                    by: by.clone(),
                },
                Applied::NoWrite,
            ),
            (
                Action::Conflict {
                    target: ObjectKey::new(Kind::ConfigMap, "c", "cm"),
                    by,
                    reason: ConflictReason::Unmanaged,
                },
                Applied::NoWrite,
            ),
        ]
    }

    #[test]
    fn status_counts_targets_synced_copies_and_conflicts() {
        let cr = rule();
        let w = world_with_source();
        let t = tally(&outcomes(&cr, &w));
        let parsed = Rule::from_copy_rule(&cr).unwrap();
        let tally = t.get(&parsed.id).unwrap();
        assert_eq!(tally.created, 1);
        let s = rule_status(
            &cr,
            Ok(&parsed),
            &w,
            Some(tally),
            Timestamp::from_second(1000).unwrap(),
        );
        assert_eq!(s.observed_generation, Some(3));
        assert_eq!(s.target_namespaces, 3);
        assert_eq!(s.synced_copies, 2);
        assert_eq!(s.source.as_deref(), Some("src/cm"));
        assert_eq!(s.conflicts.len(), 1);
        assert_eq!(s.conflicts[0].namespace, "c");
        let ready = &s.conditions[0];
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "Conflicts")
        );
        assert_eq!(ready.message, "2/3 copies in sync, 1 in conflict");
    }

    #[test]
    fn missing_source_and_invalid_rule_are_not_ready() {
        let cr = rule();
        let parsed = Rule::from_copy_rule(&cr).unwrap();
        let s = rule_status(
            &cr,
            Ok(&parsed),
            &World::default(),
            None,
            Timestamp::from_second(1).unwrap(),
        );
        assert_eq!(s.conditions[0].reason, "SourceNotFound");
        let err = RuleError::new("spec.sourceName", "is required");
        let s = rule_status(
            &cr,
            Err(&err),
            &World::default(),
            None,
            Timestamp::from_second(1).unwrap(),
        );
        assert_eq!(s.conditions[0].status, "False");
        assert_eq!(s.conditions[0].reason, "Invalid");
        assert_eq!(s.conditions[0].message, "spec.sourceName: is required");
    }

    #[test]
    fn only_sync_time_changing_is_not_a_change() {
        let cr = rule();
        let parsed = Rule::from_copy_rule(&cr).unwrap();
        let w = world_with_source();
        let a = rule_status(
            &cr,
            Ok(&parsed),
            &w,
            None,
            Timestamp::from_second(1).unwrap(),
        );
        let mut with_status = cr.clone();
        with_status.status = Some(a.clone());
        let b = rule_status(
            &with_status,
            Ok(&parsed),
            &w,
            None,
            Timestamp::from_second(99).unwrap(),
        );
        assert!(
            !status_changed(Some(&a), &b),
            "transition time kept, sync time ignored"
        );
        assert!(status_changed(None, &b));
        let mut c = b.clone();
        c.synced_copies = 7;
        assert!(status_changed(Some(&a), &c));
    }
}
