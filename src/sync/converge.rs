//! Planning and applying until the targets in a job's scope are settled: payloads read in
//! batches (`super::inputs`), stale targets read and planned again, what could not be read retried by jobs of its
//! own, and the inputs checked again after writing.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Instant,
};

use super::inputs::read_sources;
use super::{MAX_ROUNDS, SyncError};
use crate::{
    cluster::{
        ApiError, ReadMode,
        apply::{Applied, apply},
        load::{self, Found},
    },
    metrics::{ReasonLabels, WhatLabels},
    model::{ObjectKey, SourceInfo},
    plan::{Action, Contents, Scope, World, plan},
    queue::{
        enqueue,
        job::{Job, JobKey, Trigger},
    },
    report::{self, Tally},
    rules::RuleId,
    sync::context::Context,
};

/// Loads what every job needs once its scope is known: sources named by the copies found,
/// namespaces of those copies, and the content of copies that were edited by someone else.
/// What cannot be read is recorded in `world.unreadable()`, not fatal.
pub(super) async fn finish_loading(
    ctx: &Context,
    world: &mut World,
    found: &mut Found,
    fresh: ReadMode,
) -> Result<(), ApiError> {
    let cluster = &ctx.cluster;
    load::ensure_sources(cluster, world, found.sources()).await?;
    load::ensure_namespaces(cluster, world, found.namespaces(), fresh).await?;
    load::read_suspects(cluster, world, found).await;
    Ok(())
}

/// Sources whose payloads are read together: the targets that need them are planned and
/// written, and the payloads dropped, before the next ones are read. A resync never holds
/// every source's payload at once.
const PAYLOAD_BATCH: usize = 8;

/// Plans and applies until every target in scope is settled; returns the outcomes.
pub(super) async fn converge(
    ctx: &Context,
    job: &Job,
    world: &mut World,
    scope: &Scope,
    mut found: Found,
    mut contents: Contents,
) -> Result<Vec<(Action, Applied)>, SyncError> {
    report_malformed(ctx, &found);
    let outcomes = plan_and_apply(ctx, job, world, scope, &mut found, &mut contents).await?;
    let mut failed = Failed::default();
    failed.add(&outcomes);
    report::publish(&ctx.events, &ctx.metrics, world, &outcomes).await;
    recheck_inputs(ctx, world, &outcomes).await?;
    retry_unreadable(ctx, job, world);
    failed.into_result(job)?;
    Ok(outcomes)
}

/// What a full resync came to, summed over its chunks: nothing is held per target.
#[derive(Debug, Default)]
pub(super) struct Resynced {
    /// Per CopyRule (for their status); inline rules are not summed.
    pub tallies: BTreeMap<RuleId, Tally>,
    pub writes: usize,
}

/// Plans and applies every target in the cluster, a chunk of namespaces at a time: what
/// planning holds (the claims on every target, an action per target, the targets that wait
/// for a payload) and what a chunk's writes came to (its outcomes, published and checked
/// before the next chunk) is one chunk's, not the cluster's (SPEC §5, the resync's peak
/// memory). Hashes learned from a payload read for one chunk serve the next ones.
pub(super) async fn converge_all(
    ctx: &Context,
    job: &Job,
    world: &mut World,
    mut found: Found,
) -> Result<Resynced, SyncError> {
    report_malformed(ctx, &found);
    let mut contents = Contents::default();
    let mut failed = Failed::default();
    let mut done = Resynced::default();
    for chunk in namespace_chunks(world, &found, ctx.settings.resync_chunk) {
        let scope = Scope::Namespaces(chunk);
        let outcomes = plan_and_apply(ctx, job, world, &scope, &mut found, &mut contents).await?;
        count_drift(ctx, &outcomes);
        failed.add(&outcomes);
        report::publish(&ctx.events, &ctx.metrics, world, &outcomes).await;
        recheck_inputs(ctx, world, &outcomes).await?;
        done.writes += outcomes.iter().filter(|(a, _)| a.is_write()).count();
        for (rule, mut tally) in report::tally(&outcomes) {
            if rule.copy_rule_name().is_some() {
                // Namespaces per copy, kept only where the rule records them (SPEC §4 item 11).
                let holds = world
                    .rules()
                    .rules
                    .iter()
                    .any(|r| r.id == rule && r.holds_its_names());
                if !holds {
                    tally.held_in.clear();
                    tally.released_in.clear();
                }
                done.tallies.entry(rule).or_default().absorb(tally);
            }
        }
    }
    retry_unreadable(ctx, job, world);
    failed.into_result(job)?;
    Ok(done)
}

/// What a resync found drifted and put right, by kind of drift.
fn count_drift(ctx: &Context, outcomes: &[(Action, Applied)]) {
    for (action, applied) in outcomes {
        let drift = match (action, applied) {
            (Action::Create { .. }, Applied::Done) => "missing",
            (Action::Update { .. } | Action::Recreate { .. }, Applied::Done) => "stale",
            (Action::Delete { .. }, Applied::Done) => "orphaned",
            _ => continue,
        };
        ctx.metrics
            .resync_drift
            .get_or_create(&ReasonLabels { reason: drift })
            .inc();
    }
}

/// Writes that failed in a job, summed (a resync's over all its chunks).
#[derive(Debug, Default)]
struct Failed {
    count: usize,
    first: Option<(String, &'static str)>,
    /// Every failure may pass by itself (a timeout, a conflict).
    transient: bool,
}

impl Failed {
    fn add(&mut self, outcomes: &[(Action, Applied)]) {
        for (_, applied) in outcomes {
            if let Applied::Failed(e) = applied {
                if self.count == 0 {
                    self.transient = true;
                    self.first = Some((e.to_string(), e.metric_label()));
                }
                self.count += 1;
                self.transient &= e.is_transient() || e.code() == 409;
            }
        }
    }

    /// The job fails (and is retried) while writes fail, unless they keep failing for reasons
    /// that do not pass by themselves: then it gives up until the next resync.
    fn into_result(self, job: &Job) -> Result<(), SyncError> {
        let Some((first, reason)) = self.first else {
            return Ok(());
        };
        let err = SyncError::Writes {
            count: self.count,
            first,
            reason,
        };
        if self.transient || job.attempt < 3 {
            return Err(err);
        }
        tracing::warn!(error = %err, "giving up on writes until the next resync");
        Ok(())
    }
}

/// Namespaces whose targets are planned together in a full resync, `size` at a time: every
/// namespace the world holds and every one a copy was found in, in order.
fn namespace_chunks(world: &World, found: &Found, size: usize) -> Vec<BTreeSet<String>> {
    let mut all: BTreeSet<&str> = world.namespaces().keys().map(String::as_str).collect();
    all.extend(found.existing.keys().map(|k| k.namespace.as_str()));
    let all: Vec<&str> = all.into_iter().collect();
    all.chunks(size.max(1))
        .map(|c| c.iter().map(|n| n.to_string()).collect())
        .collect()
}

/// Plans the targets in `scope` and applies the plan: payloads read in batches, stale targets
/// read and planned again. Returns the outcomes.
async fn plan_and_apply(
    ctx: &Context,
    job: &Job,
    world: &mut World,
    scope: &Scope,
    found: &mut Found,
    contents: &mut Contents,
) -> Result<Vec<(Action, Applied)>, SyncError> {
    load::known_hashes(world, &ctx.caches.source_hashes, contents);
    let mut actions = plan(world, scope, &found.existing, contents);
    // Targets that need a source's payload, by source: planned again batch by batch.
    let mut needing: BTreeMap<ObjectKey, BTreeSet<ObjectKey>> = BTreeMap::new();
    actions.retain(|a| match a {
        Action::NeedSource { target, source } if !contents.payloads.contains_key(source) => {
            needing
                .entry(source.clone())
                .or_default()
                .insert(target.clone());
            false
        }
        _ => true,
    });
    let mut outcomes = settle(ctx, job, world, found, contents, actions).await?;
    let sources: Vec<ObjectKey> = needing.keys().cloned().collect();
    for batch in sources.chunks(PAYLOAD_BATCH) {
        read_sources(ctx, world, contents, batch).await;
        let targets: BTreeSet<ObjectKey> = batch
            .iter()
            .flat_map(|s| needing[s].iter().cloned())
            .collect();
        let actions = plan(world, &Scope::Targets(targets), &found.existing, contents);
        let mut settled = settle(ctx, job, world, found, contents, actions).await?;
        outcomes.append(&mut settled);
        contents.payloads.clear();
    }
    Ok(outcomes)
}

/// Applies `actions` and settles what went stale meanwhile: a target someone changed since it
/// was read is read again and planned again, a few rounds at most.
pub(super) async fn settle(
    ctx: &Context,
    job: &Job,
    world: &mut World,
    found: &mut Found,
    contents: &mut Contents,
    mut actions: Vec<Action>,
) -> Result<Vec<(Action, Applied)>, SyncError> {
    let mut outcomes: Vec<(Action, Applied)> = Vec::new();
    for round in 0..MAX_ROUNDS {
        // A re-planned target may need a payload not read yet, or a Role copy the RoleBindings
        // of its namespace (SPEC §9.10).
        let mut targets = BTreeSet::new();
        let mut needed = Vec::new();
        let mut bindings_of = BTreeSet::new();
        actions.retain(|a| match a {
            Action::NeedSource { target, source } => {
                targets.insert(target.clone());
                needed.push(source.clone());
                false
            }
            Action::NeedBindings { target } => {
                targets.insert(target.clone());
                bindings_of.insert(target.namespace.clone());
                false
            }
            _ => true,
        });
        if !targets.is_empty() {
            needed.sort();
            needed.dedup();
            for batch in needed.chunks(PAYLOAD_BATCH) {
                read_sources(ctx, world, contents, batch).await;
            }
            read_role_bindings(ctx, world, contents, bindings_of).await;
            actions.extend(plan(
                world,
                &Scope::Targets(targets),
                &found.existing,
                contents,
            ));
            // Still needing a payload or bindings: they could not be read (skipped next round).
            actions
                .retain(|a| !matches!(a, Action::NeedSource { .. } | Action::NeedBindings { .. }));
        }
        let writes = actions.iter().filter(|a| a.is_write()).count();
        let applying = Instant::now();
        let mut applied = apply(
            &ctx.cluster,
            &ctx.metrics,
            &ctx.write_budget,
            actions,
            ctx.settings.fanout_concurrency,
            job.since,
        )
        .await;
        if writes > 0 {
            tracing::debug!(
                writes,
                took_ms = applying.elapsed().as_millis() as u64,
                round,
                "applied"
            );
        }
        // One vector of outcomes, not two: a full resync has one per copy in the cluster.
        let mut stale = Vec::new();
        let mut i = 0;
        while i < applied.len() {
            if matches!(applied[i].1, Applied::Stale) {
                stale.push(applied.swap_remove(i).0);
            } else {
                i += 1;
            }
        }
        if outcomes.is_empty() {
            outcomes = applied;
        } else {
            outcomes.append(&mut applied);
        }
        if stale.is_empty() {
            return Ok(outcomes);
        }
        if round + 1 == MAX_ROUNDS {
            let first = stale.first().map(|a| format!("{a:?}")).unwrap_or_default();
            // Keep what settled; report the rest and retry the job.
            return Err(SyncError::Unsettled(first.chars().take(200).collect()));
        }
        // Someone changed these targets since they were read: read them again, plan again.
        let targets: BTreeSet<ObjectKey> = stale.iter().filter_map(action_target).collect();
        for target in &targets {
            let obj = ctx.cluster.get(target).await?;
            found.add_read(target.clone(), obj.as_ref());
        }
        report_malformed(ctx, found);
        actions = plan(world, &Scope::Targets(targets), &found.existing, contents);
    }
    Ok(outcomes)
}

/// Reads the RoleBindings of `namespaces` into `contents` (SPEC §9.10), once per job and
/// namespace. A namespace whose bindings cannot be read is unreadable: nothing is written
/// there in this job, and a job of its own looks again.
async fn read_role_bindings(
    ctx: &Context,
    world: &mut World,
    contents: &mut Contents,
    namespaces: BTreeSet<String>,
) {
    for ns in namespaces {
        if contents.role_bindings.contains_key(&ns) {
            continue;
        }
        match ctx.cluster.role_bindings_to_roles(&ns).await {
            Ok(bindings) => {
                contents.role_bindings.insert(ns, bindings);
            }
            Err(e) => {
                tracing::warn!(namespace = %ns, error = %e, "cannot read the RoleBindings of a namespace a Role copy goes to; nothing is written there until they can be read");
                world.unreadable_mut().namespaces.insert(ns);
            }
        }
    }
}

/// What a job could not read is read again by jobs of its own (with their own backoff), and
/// counted.
pub(super) fn retry_unreadable(ctx: &Context, job: &Job, world: &World) {
    let u = &world.unreadable();
    // A hub's source is read by its link's sync, never here (SPEC §14.2).
    let sources: Vec<&ObjectKey> = u.sources.iter().filter(|k| !k.is_hub()).collect();
    if sources.is_empty() && u.namespaces.is_empty() && u.copies.is_empty() {
        return;
    }
    tracing::warn!(
        sources = sources.len(),
        namespaces = u.namespaces.len(),
        copies = u.copies.len(),
        "some objects could not be read; skipped them and queued jobs to look again"
    );
    let jobs = sources
        .into_iter()
        .map(|k| (JobKey::Source(k.clone()), "source"))
        .chain(
            u.namespaces
                .iter()
                .map(|n| (JobKey::Namespace(n.clone()), "namespace")),
        )
        .chain(u.copies.iter().map(|k| (JobKey::Copy(k.clone()), "copy")));
    for (key, what) in jobs {
        ctx.metrics
            .unreadable
            .get_or_create(&WhatLabels { what })
            .inc();
        if key != job.key {
            let mut follow_up = Job::new(key, Trigger::FollowUp);
            follow_up.retry_at = Some(Instant::now() + crate::queue::job::retry_delay(job.attempt));
            enqueue(&ctx.queue, &ctx.metrics, follow_up);
        }
    }
}

/// After writing, checks that the namespaces and sources the writes were planned from have
/// not changed meanwhile. A job plans from a snapshot; a namespace relabelled (or a source
/// updated) after the snapshot was read may already have had its own job run, before this
/// job's write landed. Anything that changed gets a follow-up job, which runs after this write
/// and reads fresh state, so the last word is always based on the latest state. Costs nothing
/// when nothing was written.
///
/// The written namespaces are looked up in the namespace index (a LIST from etcd only while
/// it cannot answer): a LIST of every namespace from etcd after every writing job cost the API
/// server in proportion to the cluster's namespaces, not to the job's writes (SPEC §5). A
/// namespace job that ran on this replica before this write landed was woken by the watch
/// event that put its change in this index. One that read its change otherwise (on another
/// replica, or once its persistence wait ran out) takes a second look a second later
/// (`follow_up::SECOND_LOOK`) and finds this write's copy; the resync, what both missed.
/// The written sources are looked up in the source index the same way (a GET while it cannot
/// answer): a source updated meanwhile whose job ran here before this write landed was woken
/// by the event that put the new version there; one whose job ran on another replica meets
/// this write as a copy with older marks, which the leader's watch of copies sends back to
/// its source's job (`freshness::dispatch`, step 5).
pub(super) async fn recheck_inputs(
    ctx: &Context,
    world: &World,
    outcomes: &[(Action, Applied)],
) -> Result<(), ApiError> {
    let mut namespaces = BTreeSet::new();
    let mut sources = BTreeSet::new();
    for (action, applied) in outcomes {
        if !matches!(applied, Applied::Done) {
            continue;
        }
        match action {
            Action::Create { copy, by }
            | Action::Update { copy, by, .. }
            | Action::Recreate { copy, by, .. } => {
                namespaces.insert(copy.key.namespace.clone());
                // A hub's source changed meanwhile is its hub watch's to tell (SPEC §14.2).
                if !by.source.is_hub() {
                    sources.insert(by.source.clone());
                }
            }
            Action::Delete { target, .. } => {
                namespaces.insert(target.namespace.clone());
            }
            _ => {}
        }
    }
    if namespaces.is_empty() {
        return Ok(());
    }
    let indexed = ctx.cluster.namespace_index().answers();
    let mut fresh = World::default();
    load::ensure_namespaces(
        &ctx.cluster,
        &mut fresh,
        namespaces.clone(),
        if indexed {
            ReadMode::Indexed
        } else {
            ReadMode::Consistent
        },
    )
    .await?;
    for ns in namespaces {
        let before = world.namespaces().get(&ns).map(|n| &n.resource_version);
        let now = fresh.namespaces().get(&ns).map(|n| &n.resource_version);
        if before.is_some() && before != now {
            tracing::debug!(namespace = %ns, "namespace changed while this job ran; re-syncing it");
            enqueue(
                &ctx.queue,
                &ctx.metrics,
                Job::new(JobKey::Namespace(ns), Trigger::FollowUp),
            );
        }
    }
    let versions = futures::future::try_join_all(
        sources
            .iter()
            .map(|k| source_version(ctx, k, world.sources().get(k))),
    )
    .await?;
    for (key, now) in sources.into_iter().zip(versions) {
        let before = world
            .sources()
            .get(&key)
            .map(|s| s.resource_version.as_str());
        if before != now.as_deref() {
            tracing::debug!(source = %key, "source changed while this job ran; re-syncing it");
            enqueue(
                &ctx.queue,
                &ctx.metrics,
                Job::new(JobKey::Source(key), Trigger::FollowUp),
            );
        }
    }
    Ok(())
}

/// A written source's current resourceVersion, for [`recheck_inputs`]: from the source index
/// when it answers and holds the source at the version the job wrote from or a later one
/// (a source updated meanwhile on this replica is there: its job was woken by the event that
/// put it there), else a GET of its metadata (not held: no longer opted in, deleted, or
/// not seen yet).
async fn source_version(
    ctx: &Context,
    key: &ObjectKey,
    planned: Option<&SourceInfo>,
) -> Result<Option<String>, ApiError> {
    let held = ctx
        .cluster
        .source_index()
        .of(key.kind)
        .read(|by_key| by_key.get(key).map(|s| s.resource_version.clone()))
        .flatten();
    let not_older = |held: &str, planned: &str| match (held.parse::<u64>(), planned.parse::<u64>())
    {
        (Ok(h), Ok(p)) => h >= p,
        _ => held == planned,
    };
    if let (Some(held), Some(planned)) = (held, planned)
        && not_older(&held, &planned.resource_version)
    {
        ctx.metrics.index_read("source", "index");
        return Ok(Some(held));
    }
    ctx.metrics.index_read("source", "get");
    let meta = ctx.cluster.get_meta(key).await?;
    Ok(meta.and_then(|m| m.resource_version))
}

pub(super) fn action_target(a: &Action) -> Option<ObjectKey> {
    match a {
        Action::Create { copy, .. }
        | Action::Update { copy, .. }
        | Action::Recreate { copy, .. } => Some(copy.key.clone()),
        Action::Delete { target, .. } => Some(target.clone()),
        _ => None,
    }
}

/// Objects labelled as copyrator's whose marks do not parse are left alone (SPEC §4.5): each is
/// counted and logged once, never written and never followed to the source it names.
pub(super) fn report_malformed(ctx: &Context, found: &Found) {
    for (key, err) in &found.malformed {
        if ctx.caches.malformed_seen.contains_key(key) {
            continue;
        }
        ctx.caches.malformed_seen.insert(key.clone(), ());
        ctx.metrics.malformed_marks.inc();
        tracing::warn!(object = %key, error = %err, "labelled as managed by copyrator but its marks do not parse; leaving it alone");
    }
}
