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
    metrics::{CapLabels, Metrics, ReasonLabels},
    model::{NeverCopied, ObjectKey, SERVICE_ACCOUNT_TOKEN_TYPE},
    plan::{Action, Adopt, ClaimRef, ConflictReason, World},
    rules::{Capped, RuleId},
    transform::Refused,
};

/// Per-rule tally of one job's outcomes (or of a resync's chunks, summed: [`Tally::absorb`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tally {
    /// Copies the rule wants (claims).
    pub wanted: u32,
    /// Namespaces those are in.
    pub namespaces: u32,
    pub synced: u32,
    pub created: u32,
    pub updated: u32,
    pub deleted: u32,
    pub failed: u32,
    pub conflicts: Vec<CopyConflict>,
    /// Keys the rule asks for that its sources lack, by source (`<namespace>/<name>`).
    pub missing_keys: BTreeMap<String, BTreeSet<String>>,
    /// Sources of a bundle left out of it: (source, key, why).
    pub left_out: BTreeSet<(String, String, String)>,
    /// Namespaces a copy was created in (a create-once rule's record, SPEC §3.4).
    pub created_in: BTreeSet<String>,
    /// Namespaces the rule's copy is in sync in, or was written in (a read-only rule's record,
    /// SPEC §4 item 11). Kept only for rules that [`crate::rules::Rule::holds_its_names`]
    /// when summed over a resync.
    pub held_in: BTreeSet<String>,
    /// Namespaces the rule's copy was deleted or left in, no longer wanted: its name there is
    /// not the rule's any more.
    pub released_in: BTreeSet<String>,
}

impl Tally {
    pub fn writes(&self) -> u32 {
        self.created + self.updated + self.deleted
    }

    /// Adds the tally of targets in other namespaces (another chunk of a resync): the sums are
    /// the tally of both, and nothing is held per target.
    pub fn absorb(&mut self, other: Tally) {
        self.wanted += other.wanted;
        self.namespaces += other.namespaces;
        self.synced += other.synced;
        self.created += other.created;
        self.updated += other.updated;
        self.deleted += other.deleted;
        self.failed += other.failed;
        self.conflicts.extend(other.conflicts);
        for (source, keys) in other.missing_keys {
            self.missing_keys.entry(source).or_default().extend(keys);
        }
        self.left_out.extend(other.left_out);
        self.created_in.extend(other.created_in);
        self.held_in.extend(other.held_in);
        self.released_in.extend(other.released_in);
    }
}

/// Sums up outcomes per rule. Deletions are counted against the rule recorded on the copy.
pub fn tally(outcomes: &[(Action, Applied)]) -> BTreeMap<RuleId, Tally> {
    // The targets each rule wants, deduplicated (a target can have a conflict and a write).
    type Wanted<'a> = BTreeMap<RuleId, BTreeSet<(&'a str, &'a str)>>;
    fn want<'a>(wanted: &mut Wanted<'a>, rule: &RuleId, target: &'a ObjectKey) {
        let (ns, name) = (target.namespace.as_str(), target.name.as_str());
        wanted.entry(rule.clone()).or_default().insert((ns, name));
    }
    let mut wanted: Wanted = BTreeMap::new();
    let mut out: BTreeMap<RuleId, Tally> = BTreeMap::new();
    for (action, applied) in outcomes {
        let done = matches!(applied, Applied::Done);
        match action {
            Action::InSync { target, by } => {
                want(&mut wanted, &by.rule, target);
                let t = out.entry(by.rule.clone()).or_default();
                t.synced += 1;
                t.held_in.insert(target.namespace.clone());
            }
            Action::Create { copy, by }
            | Action::Update { copy, by, .. }
            | Action::Recreate { copy, by, .. } => {
                if matches!(applied, Applied::NamespaceTerminating) {
                    continue;
                }
                want(&mut wanted, &by.rule, &copy.key);
                let t = out.entry(by.rule.clone()).or_default();
                if done {
                    t.synced += 1;
                    t.held_in.insert(copy.key.namespace.clone());
                    match action {
                        Action::Create { .. } => {
                            t.created += 1;
                            t.created_in.insert(copy.key.namespace.clone());
                        }
                        _ => t.updated += 1,
                    }
                } else {
                    t.failed += 1;
                }
            }
            Action::Delete {
                target,
                rule: Some(rule),
                ..
            } if done => {
                let t = out.entry(rule.clone()).or_default();
                t.deleted += 1;
                t.released_in.insert(target.namespace.clone());
            }
            Action::Retain {
                target,
                rule: Some(rule),
            } => {
                let t = out.entry(rule.clone()).or_default();
                t.released_in.insert(target.namespace.clone());
            }
            Action::Conflict { target, by, reason } => {
                want(&mut wanted, &by.rule, target);
                let t = out.entry(by.rule.clone()).or_default();
                t.conflicts.push(CopyConflict {
                    namespace: target.namespace.clone(),
                    name: target.name.clone(),
                    reason: reason.to_string(),
                });
            }
            Action::MissingKeys { by, keys } => {
                out.entry(by.rule.clone())
                    .or_default()
                    .missing_keys
                    .entry(by.source.namespaced_name())
                    .or_default()
                    .extend(keys.iter().cloned());
            }
            Action::LeftOut { by, key, why } => {
                out.entry(by.rule.clone()).or_default().left_out.insert((
                    by.source.to_string(),
                    key.clone(),
                    why.to_string(),
                ));
            }
            _ => {}
        }
    }
    for (rule, targets) in wanted {
        let t = out.entry(rule).or_default();
        t.wanted = targets.len() as u32;
        t.namespaces = targets
            .iter()
            .map(|(ns, _)| *ns)
            .collect::<BTreeSet<_>>()
            .len() as u32;
    }
    out
}

/// Events and metrics for one job's outcomes.
///
/// Events about the source of an untrusted namespace (SPEC §9.5) never name objects in other
/// namespaces and carry no counts: the tenant who reads them may not be allowed to see those
/// namespaces, and a count of them would tell what a name could not (which exist, how many
/// carry a label). They say that some targets were not written, and why, in one Event per
/// reason.
pub async fn publish(
    events: &Events,
    metrics: &Metrics,
    world: &World,
    outcomes: &[(Action, Applied)],
) {
    // (source of an untrusted inline rule, event reason, summary)
    let mut anonymous: BTreeSet<(ObjectKey, &'static str, String)> = BTreeSet::new();
    for (action, applied) in outcomes {
        match (action, applied) {
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
                    ConflictReason::NeverCopied(NeverCopied::SecretType { type_, .. })
                        if *type_ == SERVICE_ACCOUNT_TOKEN_TYPE =>
                    {
                        "service_account_token"
                    }
                    ConflictReason::NeverCopied(NeverCopied::SecretType { .. }) => "credential",
                    ConflictReason::NeverCopied(NeverCopied::RunsCode { .. }) => "runs_code",
                    ConflictReason::Grant(_) => "grant",
                    ConflictReason::Refused(Refused::NoPassword { .. }) => "truststore_password",
                    ConflictReason::Refused(_) => "key_material",
                    ConflictReason::EmptyBundle => "empty_bundle",
                };
                metrics
                    .conflicts
                    .get_or_create(&ReasonLabels { reason: label })
                    .inc();
                let event_reason = match why {
                    ConflictReason::NeverCopied(NeverCopied::SecretType { type_, .. })
                        if *type_ == SERVICE_ACCOUNT_TOKEN_TYPE =>
                    {
                        reason::SA_TOKEN
                    }
                    ConflictReason::NeverCopied(_) => reason::NEVER_COPIED,
                    ConflictReason::Grant(_) => reason::GRANT_REFUSED,
                    ConflictReason::Refused(Refused::NoPassword { .. }) => reason::NO_PASSWORD,
                    ConflictReason::Refused(_) => reason::KEY_MATERIAL,
                    ConflictReason::EmptyBundle => reason::BUNDLE_EMPTY,
                    _ => reason::CONFLICT,
                };
                if let Some(source) = untrusted_source(world, by) {
                    let summary = match why {
                        ConflictReason::NeverCopied(NeverCopied::SecretType { .. }) => {
                            "it is a credential's Secret type, never copied"
                        }
                        // Kinds other than Secret and ConfigMap are never an untrusted
                        // inline rule's (SPEC §9.2).
                        ConflictReason::NeverCopied(NeverCopied::RunsCode { .. }) => {
                            "it runs code, never copied"
                        }
                        ConflictReason::Grant(_) => "it would grant what copyrator may not",
                        ConflictReason::Unmanaged => {
                            "an object not managed by copyrator holds the name"
                        }
                        ConflictReason::OwnedBy(_) => {
                            "the copy of a rule of higher precedence gets the name"
                        }
                        ConflictReason::HeldByHigherTier(_) => {
                            "a retained copy of higher precedence holds the name"
                        }
                        // Fixed words: nothing of whether the Secret exists (SPEC §9.5).
                        ConflictReason::Refused(Refused::NoPassword { .. }) => {
                            "a store's password is read from a Secret only for a trusted rule"
                        }
                        ConflictReason::Refused(_) => {
                            "a Secret's data is copied into a ConfigMap only as PEM certificates"
                        }
                        // Bundles are CopyRules, never an untrusted inline rule.
                        ConflictReason::EmptyBundle => "no certificate to copy",
                    };
                    anonymous.insert((source.clone(), event_reason, summary.to_string()));
                    continue;
                }
                let note = match why {
                    ConflictReason::NeverCopied(never) => {
                        format!("{} is not copied: {never}", by.source.namespaced_name())
                    }
                    ConflictReason::Grant(refused) => {
                        format!(
                            "{target} not written from {}: {refused}; a copy made before is deleted",
                            by.source.namespaced_name()
                        )
                    }
                    // Names only: the Secret and its key, never the value.
                    ConflictReason::Refused(Refused::NoPassword { .. }) => {
                        format!("{target} not written: {why}; the copy there is left as it is")
                    }
                    ConflictReason::Refused(refused) => {
                        format!("{target} not written from {}: {refused}", by.source)
                    }
                    _ => format!("{target} not written: {why}; left untouched"),
                };
                if let Some(regarding) = regarding(world, by) {
                    events.warning(&regarding, event_reason, note).await;
                }
            }
            (Action::LeftOut { by, key, why }, _) => {
                // Names only, on the CopyRule (an administrator's object, SPEC §9.5).
                let note = format!("{} key {key} is left out of the bundle: {why}", by.source);
                if let Some(regarding) = regarding(world, by) {
                    events.warning(&regarding, reason::LEFT_OUT, note).await;
                }
            }
            (Action::MissingKeys { by, keys }, _) => {
                // Only key names, of the rule's own source: said on the source of an
                // untrusted inline rule too (SPEC §9.5).
                let note = format!(
                    "{} has no key {}: its copies are made without {}",
                    by.source,
                    keys.join(", "),
                    if keys.len() == 1 { "it" } else { "them" }
                );
                if let Some(regarding) = regarding(world, by) {
                    events.warning(&regarding, reason::MISSING_KEYS, note).await;
                }
            }
            (
                Action::Update {
                    copy,
                    adopt: Adopt::Reclaim,
                    by,
                    ..
                }
                | Action::Recreate {
                    copy,
                    adopt: Adopt::Reclaim,
                    by,
                    ..
                },
                Applied::Done,
            ) => {
                if let Some(regarding) = regarding(world, by) {
                    events
                        .warning(
                            &regarding,
                            reason::RECLAIMED,
                            format!(
                                "{} held an object copyrator did not make, at the name of the read-only copy this rule held there; the copy was put back",
                                copy.key
                            ),
                        )
                        .await;
                }
            }
            (
                Action::Update {
                    copy,
                    adopt: Adopt::Overwrite,
                    by,
                    ..
                }
                | Action::Recreate {
                    copy,
                    adopt: Adopt::Overwrite,
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
                    anonymous.insert((
                        source.clone(),
                        reason::FAILED,
                        format!("writing failed with HTTP {} (retrying)", e.code()),
                    ));
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
    for (source, event_reason, why) in anonymous {
        let Some(info) = world.sources().get(&source) else {
            continue;
        };
        let regarding = Regarding::source(source.kind, &source, &info.uid);
        let note = format!("some target namespaces get no copy: {why}");
        events.warning(&regarding, event_reason, note).await;
    }
}

/// Events on the sources one namespace's count cap holds back, per resync: enough to say
/// why, without one Event per source of a namespace that holds thousands.
const HELD_BACK_EVENTS_PER_NAMESPACE: usize = 10;

/// Events and metrics for the sources a cap holds back (SPEC §9.7), after a full resync: an
/// Event on each (in its own namespace; at most a few per
/// namespace for the count cap: `HELD_BACK_EVENTS_PER_NAMESPACE`), and gauges of how many and of the namespaces over the
/// per-namespace cap.
pub async fn capped(events: &Events, metrics: &Metrics, world: &World) {
    let capped = &world.rules().capped_sources;
    let mut per_namespace: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut by_count, mut by_bytes) = (0, 0);
    for (key, why) in capped {
        match why {
            Capped::PerNamespace => {
                by_count += 1;
                let told = per_namespace.entry(&key.namespace).or_default();
                *told += 1;
                if *told > HELD_BACK_EVENTS_PER_NAMESPACE {
                    continue;
                }
            }
            Capped::MetadataBytes(_) => by_bytes += 1,
        }
        if let Some(info) = world.sources().get(key) {
            events
                .warning(
                    &Regarding::source(key.kind, key, &info.uid),
                    reason::HELD_BACK,
                    held_back(why),
                )
                .await;
        }
    }
    for (cap, n) in [("per_namespace", by_count), ("metadata_bytes", by_bytes)] {
        metrics
            .capped_sources
            .get_or_create(&CapLabels { cap })
            .set(n);
    }
    metrics
        .namespaces_at_source_cap
        .set(per_namespace.len() as i64);
}

/// What a source held back by a cap is told (an Event, an admission warning).
pub fn held_back(why: &Capped) -> String {
    format!(
        "copyrator does not act on this source: {why}; its copies are left as they are and no new ones are made"
    )
}

/// Events and metrics for what the inline rules of untrusted namespaces ask for and do not get
/// ([`World::refusals`]; of `source` only, when given): one Event per rule, on its source,
/// with no count and no name (SPEC §9.5). Called by jobs whose world holds every namespace the
/// rules name or select (a source's job, a resync), once per job.
pub async fn refusals(
    events: &Events,
    metrics: &Metrics,
    world: &World,
    source: Option<&ObjectKey>,
) {
    for refusal in world.refusals(source) {
        let src = refusal.claim.source;
        let ns = &src.key.namespace;
        let needs = format!("the annotation {}: {ns}", marks::ACCEPT_FROM_ANNOTATION);
        let mut notes = Vec::new();
        if refusal.named > 0 {
            metrics.refused_targets.inc_by(refusal.named as u64);
            notes.push(format!(
                "namespaces it names that do not accept copies from {ns} get no copy (each needs {needs})"
            ));
        }
        if refusal.unmatched_selector {
            metrics.refused_targets.inc();
            notes.push(format!(
                "no namespace that accepts copies from {ns} matches its selector (a namespace needs {needs} to get copies)"
            ));
        }
        let regarding = Regarding::source(src.key.kind, &src.key, &src.uid);
        for note in notes {
            events.warning(&regarding, reason::REFUSED, note).await;
        }
    }
}

/// The source of a claim whose Events must not name other namespaces' objects: the inline
/// rule of an untrusted namespace (SPEC §9.5).
fn untrusted_source<'a>(world: &World, by: &'a ClaimRef) -> Option<&'a ObjectKey> {
    match &by.rule {
        RuleId::Inline(source) if !world.policy().trust.is_trusted(&source.namespace) => {
            Some(source)
        }
        // A NamespacedCopyRule's sources are of its namespace.
        RuleId::Namespaced(_) if !world.policy().trust.is_trusted(&by.source.namespace) => {
            Some(&by.source)
        }
        _ => None,
    }
}

/// The object an Event about a claim belongs on: the CopyRule, or the source of an inline rule.
fn regarding(world: &World, by: &ClaimRef) -> Option<Regarding> {
    match &by.rule {
        // With its uid: `kubectl describe copyrule` selects Events by it.
        RuleId::CopyRule(name) => Some(
            world
                .copy_rules()
                .iter()
                .find(|r| r.metadata.name.as_deref() == Some(name.as_str()))
                .map(Regarding::copy_rule)
                .unwrap_or_else(|| Regarding::CopyRule {
                    name: name.clone(),
                    uid: String::new(),
                }),
        ),
        // A hub's rule is no object here (SPEC §14): its Events go on the member's HubLink.
        RuleId::Hub { link, .. } => Some(Regarding::HubLink { name: link.clone() }),
        RuleId::Inline(key) => world
            .sources()
            .get(key)
            .map(|s| Regarding::source(key.kind, key, &s.uid)),
        // A NamespacedCopyRule's Events go on its source, in its namespace, as an inline
        // rule's do.
        RuleId::Namespaced(_) => world
            .sources()
            .get(&by.source)
            .map(|s| Regarding::source(by.source.kind, &by.source, &s.uid)),
    }
}
