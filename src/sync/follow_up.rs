//! After a job: the status of the CopyRules whose copies it touched, Events about them, and the
//! follow-up jobs that keep the last word based on the latest state.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use k8s_openapi::jiff::Timestamp;

use super::{Outcome, SyncError};
use crate::{
    cluster::{Written, apply::Applied},
    plan::{Action, World},
    queue::{
        enqueue,
        job::{Job, JobKey, Trigger},
    },
    report::{
        self, Tally,
        events::{Regarding, reason},
    },
    rules::RuleId,
    sync::context::Context,
};

/// Writes the status of CopyRule `cr` from what a job found (`tallies`, by rule), when it
/// changed. `verified`: when the leader's full resync that found it began (SPEC §2.2,
/// `lastVerifiedTime`); a new time is a change, so such a resync writes every rule's status.
pub(super) async fn write_rule_status(
    ctx: &Context,
    world: &World,
    cr: &crate::copyrule::CopyRule,
    tallies: &BTreeMap<RuleId, Tally>,
    verified: Option<Timestamp>,
) {
    let Some(name) = cr.metadata.name.as_deref() else {
        return;
    };
    // A NamespacedCopyRule has no status: its copies are told on its sources (SPEC §2.2).
    if cr.metadata.deletion_timestamp.is_some() || cr.metadata.namespace.is_some() {
        return;
    }
    let id = RuleId::CopyRule(name.to_string());
    let tally = tallies.get(&id);
    let parsed = match world.rules().copy_rule(name) {
        Some(r) => Ok(r),
        None => match world.rules().invalid_copy_rules.get(name) {
            Some(e) => Err(e),
            None => return,
        },
    };
    // The status this replica last wrote is newer than a listed copy of the rule read before
    // that write (a resync racing a rule job): compare against it, not against the stale one.
    let uid = cr.metadata.uid.clone().unwrap_or_default();
    let mut latest = cr.clone();
    if let Some((cached_uid, cached)) = ctx.caches.written_status.get(name)
        && cached_uid == uid
    {
        latest.status = Some(cached);
    }
    let status = report::rule_status(&latest, parsed, world, tally, Timestamp::now(), verified);
    let wrote = tally.is_some_and(|t| t.writes() > 0);
    let regarding = Regarding::copy_rule(cr);
    let not_ready_reason = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "False")
        .map(|c| (c.reason.clone(), c.message.clone()));
    if let Err(e) = parsed {
        ctx.events
            .warning(&regarding, reason::INVALID, e.to_string())
            .await;
    } else if let Some((_, message)) = not_ready_reason.filter(|(r, _)| r == "SourceNotFound") {
        ctx.events
            .warning(&regarding, reason::SOURCE_NOT_FOUND, message)
            .await;
    } else if let Some(t) = tally.filter(|t| t.writes() > 0) {
        ctx.events
            .normal(
                &regarding,
                reason::SYNCED,
                format!(
                    "{} created, {} updated; {}/{} copies in sync",
                    t.created, t.updated, t.synced, t.wanted
                ),
            )
            .await;
    } else if status.synced_copies > latest.status.as_ref().map_or(0, |s| s.synced_copies) {
        // Another job (a source's, a namespace's) wrote the copies and queued this one for
        // the status: say what is in sync now, as the writing job would have.
        ctx.events
            .normal(
                &regarding,
                reason::SYNCED,
                format!(
                    "{}/{} copies in sync",
                    status.synced_copies, status.target_namespaces
                ),
            )
            .await;
    }
    if !(wrote || report::status_changed(latest.status.as_ref(), &status)) {
        return;
    }
    tracing::debug!(rule = name, wrote, old = ?latest.status, new = ?status, "writing CopyRule status");
    let resource_version = cr.metadata.resource_version.clone().unwrap_or_default();
    match ctx
        .cluster
        .patch_rule_status(name, &resource_version, &status)
        .await
    {
        Ok(Written::Done) => ctx
            .caches
            .written_status
            .insert(name.to_string(), (uid, status)),
        Ok(_) => {
            // The rule changed since it was read (another sync wrote its status): this view
            // may be older; sync the rule again from a fresh read.
            tracing::debug!(rule = name, "CopyRule changed since read; re-syncing it");
            enqueue(
                &ctx.queue,
                &ctx.metrics,
                Job::new(JobKey::Rule(name.to_string()), Trigger::FollowUp),
            );
        }
        Err(e) => tracing::warn!(rule = name, error = %e, "could not update CopyRule status"),
    }
}

/// Records the create-once copies `outcomes` created in their CopyRules' status at once
/// (SPEC §3.4): the record is what keeps a copy its namespace deletes from being made again,
/// so it is not left for the status follow-up, which plans again and finds the copies there.
/// Preconditioned on the version read; a rule changed meanwhile is read again (a few times).
async fn record_created_once(ctx: &Context, outcomes: &[(Action, Applied)]) {
    let mut created: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (action, applied) in outcomes {
        if let (Action::Create { copy, by }, Applied::Done) = (action, applied)
            && copy
                .template
                .annotations
                .contains_key(crate::marks::CREATED_BY_ANNOTATION)
            && let Some(name) = by.rule.copy_rule_name()
        {
            created
                .entry(name.to_string())
                .or_default()
                .insert(copy.key.namespace.clone());
        }
    }
    for (name, namespaces) in created {
        for _ in 0..3 {
            let cr = match ctx.cluster.get_copy_rule(&name).await {
                Ok(Some(cr)) => cr,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(rule = name, error = %e, "could not read CopyRule to record its create-once copies");
                    break;
                }
            };
            let mut status = cr.status.clone().unwrap_or_default();
            let mut record: BTreeSet<String> = status.created_in.iter().cloned().collect();
            let before = record.len();
            record.extend(namespaces.iter().cloned());
            if record.len() == before {
                break;
            }
            status.created_in = record.into_iter().collect();
            let rv = cr.metadata.resource_version.clone().unwrap_or_default();
            match ctx.cluster.patch_rule_status(&name, &rv, &status).await {
                Ok(Written::Done) => {
                    let uid = cr.metadata.uid.clone().unwrap_or_default();
                    ctx.caches
                        .written_status
                        .insert(name.clone(), (uid, status));
                    break;
                }
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(rule = name, error = %e, "could not record create-once copies");
                    break;
                }
            }
        }
    }
}

/// How long a CopyRule's status follow-up waits for others to join it (SPEC §2.2).
const STATUS_SETTLE: Duration = Duration::from_secs(1);

/// How long after an admission-triggered namespace job its second look runs.
const SECOND_LOOK: Duration = Duration::from_secs(1);

/// Follow-ups: CopyRules whose copies this job touched get their status refreshed; a
/// namespace job triggered by an admission runs once more a moment later. Its rules came from
/// the watch cache, which lags etcd by milliseconds: a source or CopyRule created in the same
/// instant as the namespace may be missing from both this job's view and (namespace list) the
/// source's job's view. The second look reads a cache that has caught up.
pub(super) async fn after(
    ctx: &Context,
    job: &Job,
    outcomes: &[(Action, Applied)],
) -> Result<Outcome, SyncError> {
    record_created_once(ctx, outcomes).await;
    if let (JobKey::Namespace(name), Trigger::Admission) = (&job.key, job.trigger) {
        let mut second = Job::new(JobKey::Namespace(name.clone()), Trigger::SecondLook);
        second.not_before = Some(Instant::now() + SECOND_LOOK);
        enqueue(&ctx.queue, &ctx.metrics, second);
    }
    if matches!(job.key, JobKey::Rule(_) | JobKey::Resync) {
        return Ok(Outcome::Done);
    }
    let rules: BTreeSet<String> = report::tally(outcomes)
        .into_iter()
        .filter(|(_, t)| t.writes() > 0 || !t.conflicts.is_empty() || t.failed > 0)
        // A NamespacedCopyRule has no status to follow up.
        .filter(|(id, _)| id.namespaced().is_none())
        .filter_map(|(id, _)| id.copy_rule_name().map(str::to_string))
        .collect();
    // The status waits a moment: the jobs of a burst of new namespaces (or sources) then
    // share one rule job, one status write and one Event per rule, instead of one each.
    let due = Instant::now() + STATUS_SETTLE;
    for name in rules {
        let mut status = Job::new(JobKey::Rule(name), Trigger::FollowUp);
        status.not_before = Some(due);
        enqueue(&ctx.queue, &ctx.metrics, status);
    }
    Ok(Outcome::Done)
}
