//! Telling people what happened: Events on sources and CopyRules, conflict and refusal
//! metrics (here), and the CopyRule status (`status`, written only when it changed).

use std::collections::{BTreeMap, BTreeSet};

pub mod events;
mod status;

pub use status::{rule_status, status_changed};

use events::{Events, Regarding, reason};

use crate::{
    cluster::apply::Applied,
    copyrule::CopyConflict,
    marks,
    metrics::{Metrics, ReasonLabels},
    model::ObjectKey,
    plan::{Action, ClaimRef, ConflictReason, World},
    rules::RuleId,
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
        let Some(info) = world.sources().get(&source) else {
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
        RuleId::Inline(source) if !world.policy().trust.is_trusted(&source.namespace) => {
            Some(source)
        }
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
            .sources()
            .get(key)
            .map(|s| Regarding::source(key.kind, key, &s.uid)),
    }
}
