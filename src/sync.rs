//! What a worker does with one job: read the persisted state the job's scope needs (waiting
//! for admitted changes to land, SPEC §4.6), plan, apply, re-plan targets that changed under
//! it, and report.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::jiff::Timestamp;
use moka::sync::Cache;

use crate::{
    apply::{Applied, apply},
    cluster::{ApiError, Cluster, Freshness, Written},
    content,
    events::{Events, Regarding, reason},
    marks,
    metrics::{Metrics, ReasonLabels, WhatLabels},
    model::{Kind, Object, ObjectKey, SourceInfo},
    persisted::{
        Check, Feed, PERSIST_WAIT, Waiters, namespace_persisted, object_persisted, rule_persisted,
    },
    plan::{Action, Contents, Existing, Policy, Scope, World, plan},
    queue::{Awaited, Job, JobKey, Trigger, WorkQueue, elapsed_since},
    report,
    rules::{Rule, RuleId, SourceMatch},
    worker::enqueue,
    world::{self, Found},
};

/// Settings the sync logic needs.
#[derive(Clone, Debug)]
pub struct SyncSettings {
    /// Exclusions and trust (`--exclude-namespaces`, `--trusted-namespaces`).
    pub policy: Policy,
    /// Concurrent writes per job (`--fanout-concurrency`).
    pub fanout_concurrency: usize,
    /// Bytes of copy writes in flight across all jobs (`--fanout-bytes`).
    pub fanout_bytes: usize,
}

/// Everything a job needs; one per process, shared by all workers.
pub struct Context {
    pub cluster: Cluster,
    pub events: Events,
    pub metrics: Arc<Metrics>,
    pub queue: Arc<WorkQueue>,
    /// Jobs waiting for admitted changes to be persisted.
    pub waiters: Arc<Waiters>,
    pub settings: SyncSettings,
    /// Content hash of a source at a resourceVersion: lets a resync decide "in sync" from
    /// metadata alone. Bounded; one small entry per source.
    pub source_hashes: Cache<(ObjectKey, String), String>,
    /// Counts completed full resyncs (readiness waits for the first).
    pub resyncs: tokio::sync::watch::Sender<u64>,
    /// The CopyRule status this replica last wrote, by rule name (with the rule's uid).
    pub written_status: Cache<String, (String, crate::copyrule::CopyRuleStatus)>,
    /// Objects with unparseable marks already reported (each is reported once).
    pub malformed_seen: Cache<ObjectKey, ()>,
    /// Bytes of copy writes in flight, across all jobs (see `apply.rs`).
    pub write_budget: crate::apply::WriteBudget,
}

impl Context {
    pub fn new(
        cluster: Cluster,
        events: Events,
        metrics: Arc<Metrics>,
        queue: Arc<WorkQueue>,
        settings: SyncSettings,
    ) -> Self {
        let fanout_bytes = settings.fanout_bytes;
        Self {
            cluster,
            events,
            metrics,
            waiters: Waiters::new(Arc::clone(&queue)),
            queue,
            settings,
            source_hashes: Cache::builder().max_capacity(100_000).build(),
            resyncs: tokio::sync::watch::Sender::new(0),
            written_status: Cache::builder().max_capacity(10_000).build(),
            malformed_seen: Cache::builder().max_capacity(10_000).build(),
            write_budget: crate::apply::WriteBudget::new(fanout_bytes),
        }
    }
}

/// Why a job did not finish; it is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("{count} write(s) failed, first: {first}")]
    Writes { count: usize, first: String },
    #[error("targets kept changing while being written: {0}")]
    Unsettled(String),
}

/// How many times stale targets are re-read and re-planned within one job.
const MAX_ROUNDS: usize = 4;

/// What a job run came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// The admitted change it waits for is not persisted yet: run it again later (a watch
    /// event or the deadline, see [`crate::persisted`]).
    NotPersisted,
}

/// Runs one job.
pub async fn run(ctx: &Context, job: &Job) -> Result<Outcome, SyncError> {
    match &job.key {
        JobKey::Source(key) => sync_source(ctx, job, key).await,
        JobKey::Namespace(name) => sync_namespace(ctx, job, name).await,
        JobKey::Copy(key) => sync_copy(ctx, job, key).await,
        JobKey::Rule(name) => sync_rule(ctx, job, name).await,
        JobKey::Resync => resync(ctx, job).await,
    }
}

/// Reads the job's trigger object with `read`; `None` while the admitted change the job waits
/// for (`done`) is not visible yet and its deadline has not passed. The job registers as a
/// waiter first, so a change persisted after the read wakes it; while the feed is live and no
/// event arrived for the object since the trigger, it does not even read.
async fn read_persisted<T, Fut>(
    ctx: &Context,
    job: &Job,
    read: impl Fn() -> Fut,
    done: fn(&Awaited, &T) -> bool,
) -> Result<Option<T>, ApiError>
where
    Fut: Future<Output = Result<T, ApiError>>,
{
    let feed = Feed::of(&job.key);
    let waiting = job.awaited != Awaited::Nothing && elapsed_since(job.since) < PERSIST_WAIT;
    if let (Some((feed, watched)), true) = (&feed, waiting)
        && ctx.waiters.check(*feed, watched, &job.key, job.since) == Check::Parked
    {
        return Ok(None);
    }
    let value = read().await?;
    if waiting && !done(&job.awaited, &value) {
        return Ok(None);
    }
    if let Some((_, watched)) = &feed {
        ctx.waiters.unregister(watched, &job.key);
    }
    Ok(Some(value))
}

/// A source job: every copy of one source (SPEC §4.2).
async fn sync_source(ctx: &Context, job: &Job, key: &ObjectKey) -> Result<Outcome, SyncError> {
    let cluster = &ctx.cluster;
    let t0 = Instant::now();
    let Some(source) = read_persisted(ctx, job, || cluster.get(key), object_persisted).await?
    else {
        return Ok(Outcome::NotPersisted);
    };
    let t_persisted = t0.elapsed();
    let info = source
        .as_ref()
        .and_then(|o| SourceInfo::from_meta(key.kind, &(&o.metadata).into()));
    // Label-selected lists come from the API server's watch cache (see Freshness).
    let fresh = Freshness::Cached;
    // The rules and the source's existing copies are independent reads: do them at once.
    let copies = async {
        let mut found = Found::default();
        match &info {
            Some(info) => {
                let uids = BTreeSet::from([info.uid.clone()]);
                world::copies_of_sources(cluster, key.kind, &uids, fresh, &mut found).await?;
            }
            None => {
                // Gone: its copies can only be found by their annotation.
                world::all_copies(cluster, key.kind, None, fresh, &mut found).await?;
                found.retain(|_, e| matches!(e, Existing::Managed(m) if &m.source == key));
            }
        }
        Ok::<_, ApiError>(found)
    };
    let kinds = [key.kind];
    let (mut world, mut found) = tokio::try_join!(
        world::load_rules(cluster, &kinds, &ctx.settings.policy, fresh),
        copies
    )?;
    world.set_sources([(key.clone(), info.clone())]);
    let mut contents = Contents::default();
    if let (Some(obj), Some(info)) = (&source, &info) {
        remember_payload(ctx, &mut contents, info, obj);
        warn_about_source(ctx, &world, info).await;
        let rules: Vec<Rule> = world.rules.for_source(info).cloned().collect();
        world::load_target_namespaces(cluster, &mut world, &rules, fresh).await?;
    }
    finish_loading(ctx, &mut world, &mut found, fresh).await?;
    tracing::debug!(
        waited_ms = t_persisted.as_millis() as u64,
        read_ms = (t0.elapsed() - t_persisted).as_millis() as u64,
        namespaces = world.namespaces.len(),
        copies = found.existing.len(),
        "source job state read"
    );
    let outcomes = converge(
        ctx,
        job,
        &mut world,
        &Scope::Source(key.clone()),
        found,
        contents,
    )
    .await?;
    // A source a CopyRule selects gets the opt-in label (after its copies are written: not on
    // their way), so that its changes also reach the sources webhook (SPEC §2.2).
    if let Some(info) = info.as_ref().filter(|i| !i.deleting)
        && world
            .rules
            .for_source(info)
            .any(|r| r.id.copy_rule_name().is_some())
    {
        label_source(ctx, info).await;
    }
    after(ctx, job, &outcomes)
}

/// A namespace job: every copy that should or does live in one namespace (SPEC §4.1, §4.3).
async fn sync_namespace(ctx: &Context, job: &Job, name: &str) -> Result<Outcome, SyncError> {
    let cluster = &ctx.cluster;
    let Some(ns) = read_persisted(
        ctx,
        job,
        || cluster.get_namespace(name),
        namespace_persisted,
    )
    .await?
    else {
        return Ok(Outcome::NotPersisted);
    };
    let Some(ns) = ns.filter(|n| !n.terminating) else {
        // Gone or going: its copies go with it.
        return Ok(Outcome::Done);
    };
    let mut found = Found::default();
    let fresh = Freshness::Cached;
    let (mut world, secrets, config_maps) = tokio::try_join!(
        world::load_rules(cluster, &Kind::ALL, &ctx.settings.policy, fresh),
        cluster.list_meta(
            Kind::Secret,
            Some(name),
            marks::MANAGED_SELECTOR,
            fresh,
            |m| { world::listed(Kind::Secret, m) }
        ),
        cluster.list_meta(
            Kind::ConfigMap,
            Some(name),
            marks::MANAGED_SELECTOR,
            fresh,
            |m| { world::listed(Kind::ConfigMap, m) }
        ),
    )?;
    found.add_listed(secrets);
    found.add_listed(config_maps);
    world.namespaces.insert(ns.name.clone(), ns);
    finish_loading(ctx, &mut world, &mut found, fresh).await?;
    let outcomes = converge(
        ctx,
        job,
        &mut world,
        &Scope::Namespace(name.to_string()),
        found,
        Contents::default(),
    )
    .await?;
    after(ctx, job, &outcomes)
}

/// A copy job: one copy someone else changed or deleted (SPEC §4.4).
async fn sync_copy(ctx: &Context, job: &Job, key: &ObjectKey) -> Result<Outcome, SyncError> {
    let cluster = &ctx.cluster;
    let (copy, ns) = tokio::try_join!(
        read_persisted(ctx, job, || cluster.get(key), object_persisted),
        cluster.get_namespace(&key.namespace),
    )?;
    let Some(copy) = copy else {
        return Ok(Outcome::NotPersisted);
    };
    let Some(ns) = ns else {
        return Ok(Outcome::Done);
    };
    let fresh = Freshness::Cached;
    let mut world = world::load_rules(cluster, &[key.kind], &ctx.settings.policy, fresh).await?;
    world.namespaces.insert(ns.name.clone(), ns);
    let mut found = Found::default();
    found.add_read(key.clone(), copy.as_ref());
    finish_loading(ctx, &mut world, &mut found, fresh).await?;
    let outcomes = converge(
        ctx,
        job,
        &mut world,
        &Scope::Target(key.clone()),
        found,
        Contents::default(),
    )
    .await?;
    after(ctx, job, &outcomes)
}

/// A rule job: every copy of one CopyRule, then its status (SPEC §2.2).
async fn sync_rule(ctx: &Context, job: &Job, name: &str) -> Result<Outcome, SyncError> {
    let cluster = &ctx.cluster;
    let Some(copy_rule) =
        read_persisted(ctx, job, || cluster.get_copy_rule(name), rule_persisted).await?
    else {
        return Ok(Outcome::NotPersisted);
    };
    let kinds: Vec<Kind> = match &copy_rule {
        Some(r) => vec![r.spec.kind],
        None => Kind::ALL.to_vec(),
    };
    let fresh = Freshness::Cached;
    let mut world = world::load_rules(cluster, &kinds, &ctx.settings.policy, fresh).await?;
    // The rule as just read, not as listed a moment earlier.
    world
        .copy_rules
        .retain(|r| r.metadata.name.as_deref() != Some(name));
    world.copy_rules.extend(copy_rule.clone());
    world.rebuild_rules();
    let id = RuleId::CopyRule(name.to_string());
    let rule = world.rules.copy_rule(name).cloned();
    let mut found = Found::default();

    if let Some(rule) = &rule {
        adopt_rule_sources(ctx, &mut world, rule, fresh).await?;
        world::load_target_namespaces(cluster, &mut world, [rule], fresh).await?;
        let uids: BTreeSet<String> = world
            .sources
            .values()
            .filter(|s| rule.applies_to(s))
            .map(|s| s.uid.clone())
            .collect();
        world::copies_of_sources(cluster, rule.kind, &uids, fresh, &mut found).await?;
    }
    if rule.is_none() || job.full_scan {
        // Deleted, invalid or changed: its copies of sources it no longer selects are only
        // found by their rule annotation.
        for kind in &kinds {
            let mut all = Found::default();
            world::all_copies(cluster, *kind, None, fresh, &mut all).await?;
            all.retain(|_, e| matches!(e, Existing::Managed(m) if m.rule == id));
            found.existing.extend(all.existing);
            found.suspect.extend(all.suspect);
        }
    }
    finish_loading(ctx, &mut world, &mut found, fresh).await?;
    let outcomes = converge(
        ctx,
        job,
        &mut world,
        &Scope::Rule(id.clone()),
        found,
        Contents::default(),
    )
    .await?;
    if let Some(cr) = &copy_rule {
        write_rule_status(ctx, &world, cr, &outcomes).await;
    }
    after(ctx, job, &outcomes)
}

/// The full resync: everything, from a handful of label-selected metadata-only LISTs.
async fn resync(ctx: &Context, job: &Job) -> Result<Outcome, SyncError> {
    let started = Instant::now();
    let cluster = &ctx.cluster;
    // Label-selected lists from the watch cache (no etcd scan of every Secret); the complete
    // namespace list from etcd, page by page.
    let cached = Freshness::Cached;
    let (mut world, namespaces, secrets, config_maps) = tokio::try_join!(
        world::load_rules(cluster, &Kind::ALL, &ctx.settings.policy, cached),
        cluster.list_namespaces("", Freshness::Consistent),
        cluster.list_meta(Kind::Secret, None, marks::MANAGED_SELECTOR, cached, |m| {
            world::listed(Kind::Secret, m)
        }),
        cluster.list_meta(
            Kind::ConfigMap,
            None,
            marks::MANAGED_SELECTOR,
            cached,
            |m| { world::listed(Kind::ConfigMap, m) }
        ),
    )?;
    let mut found = Found::default();
    found.add_listed(secrets);
    found.add_listed(config_maps);
    world.namespaces = namespaces
        .into_iter()
        .map(|n| (n.name.clone(), n))
        .collect();

    // Sources of CopyRules that lack the opt-in label are found by listing each source
    // namespace once per kind.
    let groups: BTreeSet<(Kind, String)> = world
        .rules
        .rules
        .iter()
        .filter(|r| r.id.copy_rule_name().is_some())
        .map(|r| (r.kind, r.source_namespace.clone()))
        .collect();
    for (kind, ns) in groups {
        let infos = cluster
            .list_meta(kind, Some(&ns), "", cached, |m| {
                SourceInfo::from_meta(kind, &m)
            })
            .await?;
        let rules: Vec<Rule> = world
            .rules
            .rules
            .iter()
            .filter(|r| {
                r.kind == kind && r.source_namespace == ns && r.id.copy_rule_name().is_some()
            })
            .cloned()
            .collect();
        let mut unlabelled = Vec::new();
        for info in infos {
            if rules.iter().any(|r| r.applies_to(&info)) && !world.sources.contains_key(&info.key) {
                label_source(ctx, &info).await;
                unlabelled.push(info);
            }
        }
        world.add_sources(unlabelled);
    }
    finish_loading(ctx, &mut world, &mut found, cached).await?;

    let outcomes = converge(
        ctx,
        job,
        &mut world,
        &Scope::All,
        found,
        Contents::default(),
    )
    .await?;
    for (action, applied) in &outcomes {
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
    for cr in &world.copy_rules {
        write_rule_status(ctx, &world, cr, &outcomes).await;
    }
    for (key, err) in &world.rules.invalid_sources {
        if let Some(src) = world.sources.get(key) {
            ctx.events
                .warning(
                    &Regarding::source(key.kind, key, &src.uid),
                    reason::INVALID,
                    err.to_string(),
                )
                .await;
        }
    }
    ctx.metrics
        .resync_duration
        .observe(started.elapsed().as_secs_f64());
    ctx.resyncs.send_modify(|n| *n += 1);
    tracing::info!(
        took_ms = started.elapsed().as_millis() as u64,
        writes = outcomes.iter().filter(|(a, _)| a.is_write()).count(),
        "resync done"
    );
    after(ctx, job, &outcomes)
}

/// Loads what every job needs once its scope is known: sources named by the copies found,
/// namespaces of those copies, and the content of copies that were edited by someone else.
/// What cannot be read is recorded in `world.unreadable`, not fatal.
async fn finish_loading(
    ctx: &Context,
    world: &mut World,
    found: &mut Found,
    fresh: Freshness,
) -> Result<(), ApiError> {
    let cluster = &ctx.cluster;
    world::ensure_sources(cluster, world, found.sources()).await?;
    world::ensure_namespaces(cluster, world, found.namespaces(), fresh).await?;
    world::read_suspects(cluster, world, found).await;
    Ok(())
}

/// Sources whose payloads are read together: the targets that need them are planned and
/// written, and the payloads dropped, before the next ones are read. A resync never holds
/// every source's payload at once.
const PAYLOAD_BATCH: usize = 8;

/// Plans and applies until every target in scope is settled; returns the outcomes.
async fn converge(
    ctx: &Context,
    job: &Job,
    world: &mut World,
    scope: &Scope,
    mut found: Found,
    mut contents: Contents,
) -> Result<Vec<(Action, Applied)>, SyncError> {
    report_malformed(ctx, &found);
    world::known_hashes(world, &ctx.source_hashes, &mut contents);
    let mut actions = plan(world, scope, &found.existing, &contents);
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
    let mut outcomes = settle(ctx, job, world, &mut found, &mut contents, actions).await?;
    let sources: Vec<ObjectKey> = needing.keys().cloned().collect();
    for batch in sources.chunks(PAYLOAD_BATCH) {
        read_sources(ctx, world, &mut contents, batch).await;
        let targets: BTreeSet<ObjectKey> = batch
            .iter()
            .flat_map(|s| needing[s].iter().cloned())
            .collect();
        let actions = plan(world, &Scope::Targets(targets), &found.existing, &contents);
        let mut settled = settle(ctx, job, world, &mut found, &mut contents, actions).await?;
        outcomes.append(&mut settled);
        contents.payloads.clear();
    }
    let failed: Vec<&ApiError> = outcomes
        .iter()
        .filter_map(|(_, r)| match r {
            Applied::Failed(e) => Some(e),
            _ => None,
        })
        .collect();
    report::publish(&ctx.events, &ctx.metrics, world, &outcomes).await;
    recheck_inputs(ctx, world, &outcomes).await?;
    retry_unreadable(ctx, job, world);
    if let Some(first) = failed.first() {
        let transient = failed.iter().all(|e| e.is_transient() || e.code() == 409);
        let err = SyncError::Writes {
            count: failed.len(),
            first: first.to_string(),
        };
        if transient || job.attempt < 3 {
            return Err(err);
        }
        tracing::warn!(error = %err, "giving up on writes until the next resync");
    }
    Ok(outcomes)
}

/// Applies `actions` and settles what went stale meanwhile: a target someone changed since it
/// was read is read again and planned again, a few rounds at most.
async fn settle(
    ctx: &Context,
    job: &Job,
    world: &mut World,
    found: &mut Found,
    contents: &mut Contents,
    mut actions: Vec<Action>,
) -> Result<Vec<(Action, Applied)>, SyncError> {
    let mut outcomes: Vec<(Action, Applied)> = Vec::new();
    for round in 0..MAX_ROUNDS {
        // A re-planned target may need a payload not read yet.
        let mut targets = BTreeSet::new();
        let mut needed = Vec::new();
        actions.retain(|a| match a {
            Action::NeedSource { target, source } => {
                targets.insert(target.clone());
                needed.push(source.clone());
                false
            }
            _ => true,
        });
        if !needed.is_empty() {
            needed.sort();
            needed.dedup();
            for batch in needed.chunks(PAYLOAD_BATCH) {
                read_sources(ctx, world, contents, batch).await;
            }
            actions.extend(plan(
                world,
                &Scope::Targets(targets),
                &found.existing,
                contents,
            ));
            // Still needing a payload: the source could not be read (skipped next round).
            actions.retain(|a| !matches!(a, Action::NeedSource { .. }));
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

/// What a job could not read is read again by jobs of its own (with their own backoff), and
/// counted.
fn retry_unreadable(ctx: &Context, job: &Job, world: &World) {
    let u = &world.unreadable;
    if u.is_empty() {
        return;
    }
    tracing::warn!(
        sources = u.sources.len(),
        namespaces = u.namespaces.len(),
        copies = u.copies.len(),
        "some objects could not be read; skipped them and queued jobs to look again"
    );
    let jobs = u
        .sources
        .iter()
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
            follow_up.retry_at = Some(Instant::now() + crate::queue::retry_delay(job.attempt));
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
async fn recheck_inputs(
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
                sources.insert(by.source.clone());
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
    // Fresh means fresh here: GETs, or one paginated LIST from etcd.
    let mut fresh = World::default();
    world::ensure_namespaces(
        &ctx.cluster,
        &mut fresh,
        namespaces.clone(),
        Freshness::Consistent,
    )
    .await?;
    for ns in namespaces {
        let before = world.namespaces.get(&ns).map(|n| &n.resource_version);
        let now = fresh.namespaces.get(&ns).map(|n| &n.resource_version);
        if before.is_some() && before != now {
            tracing::debug!(namespace = %ns, "namespace changed while this job ran; re-syncing it");
            enqueue(
                &ctx.queue,
                &ctx.metrics,
                Job::new(JobKey::Namespace(ns), Trigger::FollowUp),
            );
        }
    }
    let metas =
        futures::future::try_join_all(sources.iter().map(|k| ctx.cluster.get_meta(k))).await?;
    for (key, meta) in sources.into_iter().zip(metas) {
        let before = world.sources.get(&key).map(|s| s.resource_version.as_str());
        let now = meta.as_ref().and_then(|m| m.resource_version.as_deref());
        if before != now {
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

fn action_target(a: &Action) -> Option<ObjectKey> {
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
fn report_malformed(ctx: &Context, found: &Found) {
    for (key, err) in &found.malformed {
        if ctx.malformed_seen.contains_key(key) {
            continue;
        }
        ctx.malformed_seen.insert(key.clone(), ());
        ctx.metrics.malformed_marks.inc();
        tracing::warn!(object = %key, error = %err, "labelled as managed by copyrator but its marks do not parse; leaving it alone");
    }
}

/// Reads source payloads (one GET each, a batch at once); a source that vanished is removed,
/// one that cannot be read is recorded as unreadable (its targets are skipped).
async fn read_sources(
    ctx: &Context,
    world: &mut World,
    contents: &mut Contents,
    keys: &[ObjectKey],
) {
    let reads = futures::future::join_all(keys.iter().map(|k| ctx.cluster.get(k))).await;
    let mut read = Vec::new();
    for (key, obj) in keys.iter().zip(reads) {
        let obj = match obj {
            Ok(obj) => obj,
            Err(e) => {
                tracing::debug!(source = %key, error = %e, "source unreadable; its copies are skipped");
                world.unreadable.sources.insert(key.clone());
                continue;
            }
        };
        let info = obj
            .as_ref()
            .and_then(|o| SourceInfo::from_meta(key.kind, &(&o.metadata).into()));
        if let (Some(obj), Some(info)) = (&obj, &info) {
            remember_payload(ctx, contents, info, obj);
        }
        // Its inline configuration may have changed since it was listed (or it is gone).
        read.push((key.clone(), info));
    }
    world.set_sources(read);
}

fn remember_payload(ctx: &Context, contents: &mut Contents, info: &SourceInfo, obj: &Object) {
    let payload = obj.payload.clone().for_kind(info.key.kind);
    let hash = content::source_hash(info, &payload);
    ctx.source_hashes.insert(
        (info.key.clone(), info.resource_version.clone()),
        hash.clone(),
    );
    contents.known_hashes.insert(info.key.clone(), hash);
    contents
        .payloads
        .insert(info.key.clone(), Arc::new(payload));
}

/// Sources a rule selects that lack the opt-in label get it, so that their changes reach the
/// sources webhook; they join the world either way.
async fn adopt_rule_sources(
    ctx: &Context,
    world: &mut World,
    rule: &Rule,
    fresh: Freshness,
) -> Result<(), ApiError> {
    let cluster = &ctx.cluster;
    let infos: Vec<SourceInfo> = match &rule.sources {
        SourceMatch::Name(name) => {
            let key = ObjectKey::new(rule.kind, &rule.source_namespace, name);
            cluster
                .get_meta(&key)
                .await?
                .and_then(|m| SourceInfo::from_meta(rule.kind, &m))
                .into_iter()
                .collect()
        }
        SourceMatch::Selector(sel) => {
            cluster
                .list_meta(
                    rule.kind,
                    Some(&rule.source_namespace),
                    &sel.to_string(),
                    fresh,
                    |m| SourceInfo::from_meta(rule.kind, &m),
                )
                .await?
        }
    };
    for info in &infos {
        if info.labels.get(marks::SOURCE_LABEL).map(String::as_str) != Some("true")
            && !info.deleting
        {
            label_source(ctx, info).await;
        }
    }
    world.add_sources(infos);
    Ok(())
}

async fn label_source(ctx: &Context, info: &SourceInfo) {
    if info.labels.get(marks::SOURCE_LABEL).map(String::as_str) == Some("true") {
        return;
    }
    if let Err(e) = ctx.cluster.label_source(&info.key, &info.uid).await {
        tracing::warn!(source = %info.key, error = %e, "could not label source");
    }
}

/// Events about a source's own configuration (inline rule).
async fn warn_about_source(ctx: &Context, world: &World, info: &SourceInfo) {
    let regarding = Regarding::source(info.key.kind, &info.key, &info.uid);
    if let Some(err) = world.rules.invalid_sources.get(&info.key) {
        ctx.events
            .warning(&regarding, reason::INVALID, err.to_string())
            .await;
        return;
    }
    let labelled = info.labels.get(marks::SOURCE_LABEL).map(String::as_str) == Some("true");
    if labelled && world.rules.for_source(info).next().is_none() {
        ctx.events
            .warning(
                &regarding,
                reason::NO_TARGETS,
                format!(
                    "labelled {}=true but has neither {} nor {} and no CopyRule selects it: copied nowhere",
                    marks::SOURCE_LABEL,
                    marks::NAMESPACE_SELECTOR_ANNOTATION,
                    marks::NAMESPACES_ANNOTATION
                ),
            )
            .await;
    }
}

async fn write_rule_status(
    ctx: &Context,
    world: &World,
    cr: &crate::copyrule::CopyRule,
    outcomes: &[(Action, Applied)],
) {
    let Some(name) = cr.metadata.name.as_deref() else {
        return;
    };
    if cr.metadata.deletion_timestamp.is_some() {
        return;
    }
    let tallies = report::tally(outcomes);
    let id = RuleId::CopyRule(name.to_string());
    let tally = tallies.get(&id);
    let parsed = match world.rules.copy_rule(name) {
        Some(r) => Ok(r),
        None => match world.rules.invalid_copy_rules.get(name) {
            Some(e) => Err(e),
            None => return,
        },
    };
    // The status this replica last wrote is newer than a listed copy of the rule read before
    // that write (a resync racing a rule job): compare against it, not against the stale one.
    let uid = cr.metadata.uid.clone().unwrap_or_default();
    let mut latest = cr.clone();
    if let Some((cached_uid, cached)) = ctx.written_status.get(name)
        && cached_uid == uid
    {
        latest.status = Some(cached);
    }
    let status = report::rule_status(&latest, parsed, world, tally, Timestamp::now());
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
                    t.created,
                    t.updated,
                    t.synced,
                    t.wanted.len()
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
        Ok(Written::Done) => ctx.written_status.insert(name.to_string(), (uid, status)),
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

/// How long after an admission-triggered namespace job its second look runs.
const SECOND_LOOK: Duration = Duration::from_secs(1);

/// Follow-ups: CopyRules whose copies this job touched get their status refreshed; a
/// namespace job triggered by an admission runs once more a moment later. Its rules came from
/// the watch cache, which lags etcd by milliseconds: a source or CopyRule created in the same
/// instant as the namespace may be missing from both this job's view and (namespace list) the
/// source's job's view. The second look reads a cache that has caught up.
fn after(ctx: &Context, job: &Job, outcomes: &[(Action, Applied)]) -> Result<Outcome, SyncError> {
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
        .filter_map(|(id, _)| id.copy_rule_name().map(str::to_string))
        .collect();
    for name in rules {
        enqueue(
            &ctx.queue,
            &ctx.metrics,
            Job::new(JobKey::Rule(name), Trigger::FollowUp),
        );
    }
    Ok(Outcome::Done)
}
