//! A namespace job: every copy that should or does live in one namespace (SPEC §4.1, §4.3),
//! hub copies (SPEC §14) as the hubs were last read. The Pod gate runs the same sync in the admission path (`sync::pods`).

use crate::{
    cluster::{
        ApiError, ReadMode,
        apply::Applied,
        load::{self, Found},
    },
    freshness::{
        copy_index::Listed,
        persisted::persisted,
        prefetch::{NamespaceReads, Ticket},
    },
    metrics::OutcomeLabels,
    model::{Kind, NamespaceInfo},
    plan::{Action, Scope, World},
    queue::job::{Awaited, Job, Trigger},
    sync::{
        Outcome, SyncError,
        context::Context,
        converge::{converge, finish_loading},
        follow_up::after,
        hub,
        persisted::{parked, read_persisted, stop_waiting},
        readiness::readiness,
    },
};

/// What syncing one namespace came to.
pub(in crate::sync) enum Synced {
    /// The admitted change the job waits for is not visible yet.
    NotPersisted,
    /// A namespace just created: not written before this time (SPEC §4 item 6).
    NotBefore(std::time::Instant),
    /// The namespace does not exist or is being deleted: its copies go with it.
    Gone,
    Done {
        world: Box<World>,
        outcomes: Vec<(Action, Applied)>,
    },
}

/// A namespace job: every copy that should or does live in one namespace (SPEC §4.1, §4.3).
/// A clean run tells the Pod gate the namespace is settled.
pub(in crate::sync) async fn run(
    ctx: &Context,
    job: &Job,
    name: &str,
) -> Result<Outcome, SyncError> {
    let since = ctx.ready.begin();
    match sync(ctx, job, name).await? {
        Synced::NotPersisted => Ok(Outcome::NotPersisted),
        Synced::NotBefore(at) => Ok(Outcome::NotBefore(at)),
        Synced::Gone => Ok(Outcome::Done),
        Synced::Done { world, outcomes } => {
            if let Some(ready) = readiness(ctx, name, &world, &outcomes).await {
                ctx.ready.record(name, since, ready);
            }
            after(ctx, job, &outcomes).await
        }
    }
}

/// Reads, plans and writes every copy that should or does live in namespace `name`.
pub(in crate::sync) async fn sync(
    ctx: &Context,
    job: &Job,
    name: &str,
) -> Result<Synced, SyncError> {
    let fresh = ReadMode::Indexed;
    if parked(ctx, job) {
        return Ok(Synced::NotPersisted);
    }
    // A namespace just created: the API server holds a create into it for 50 ms until its own
    // namespace informer has it (NamespaceLifecycle admission), and our watch is often faster
    // than that informer. The first write waits `--new-namespace-delay` after the event, in
    // the queue; the early reads stay where they are until then.
    if job.awaited == Awaited::Exists
        && let Some(seen) = ctx.waiters.prefetch.seen(name)
    {
        let until = seen + ctx.settings.new_namespace_delay;
        if until > std::time::Instant::now() {
            return Ok(Synced::NotBefore(until));
        }
    }
    // Reads made while the namespace was being persisted, if they may stand in for new ones.
    let early = ctx
        .waiters
        .prefetch
        .take(name, &job.awaited, ctx.waiters.all_live());
    if early.as_ref().err() != Some(&"none") {
        let outcome = early.as_ref().map_or_else(|why| *why, |_| "used");
        ctx.metrics
            .early_reads
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
    }
    let (ns, mut world, copies) = match early {
        Ok((ns, reads)) => {
            stop_waiting(ctx, job);
            tracing::debug!("namespace from its watch event, rules and copies read before");
            (Some(ns), reads.world, reads.copies)
        }
        Err(_) => {
            // The namespace, the rules and the copies in it, read at once: one round trip.
            let (ns, (world, copies)) = tokio::try_join!(
                read_persisted(ctx, job, || read_namespace(ctx, job, name), persisted),
                rules_and_copies(ctx, name),
            )?;
            let Some(ns) = ns else {
                return Ok(Synced::NotPersisted);
            };
            (ns, world, copies)
        }
    };
    let Some(ns) = ns.filter(|n| !n.terminating) else {
        return Ok(Synced::Gone);
    };
    let mut found = Found::default();
    found.add_listed(copies);
    world.insert_namespaces([ns]);
    // The hub copies of this namespace too, from what the hubs were last read to place here
    // (never a hub call: a Pod waits on this sync).
    let contents = hub::hubs_for(&ctx.hub_reads.get(), &mut world, &found);
    finish_loading(ctx, &mut world, &mut found, fresh).await?;
    let outcomes = converge(
        ctx,
        job,
        &mut world,
        &Scope::Namespace(name.to_string()),
        found,
        contents,
    )
    .await?;
    Ok(Synced::Done {
        world: Box::new(world),
        outcomes,
    })
}

/// Namespace `name` as persisted: from the namespace index when it holds the namespace with
/// the change the job was admitted for (the watch applies an event to the index before it
/// wakes the job waiting on it), else a GET. The Pod gate's sync always reads it (a Pod
/// created right after its namespace was relabelled must see the new labels, whose event may
/// still be on its way), as does a job whose change the index does not show (it may show an
/// older one, or not hold the namespace yet).
async fn read_namespace(
    ctx: &Context,
    job: &Job,
    name: &str,
) -> Result<Option<NamespaceInfo>, ApiError> {
    let cluster = &ctx.cluster;
    if job.trigger != Trigger::PodGate {
        let held = cluster
            .namespace_index()
            .read(|by_name| by_name.get(name).cloned())
            .flatten()
            .filter(|ns| persisted(&job.awaited, &Some(ns.clone())));
        if let Some(ns) = held {
            ctx.metrics.index_read("namespace", "index");
            return Ok(Some(ns));
        }
        ctx.metrics.index_read("namespace", "get");
    }
    cluster.get_namespace(name).await
}

/// The rules, and the copies in namespace `name` (of every kind).
async fn rules_and_copies(ctx: &Context, name: &str) -> Result<(World, Vec<Listed>), ApiError> {
    let cluster = &ctx.cluster;
    let fresh = ReadMode::Indexed;
    let kinds = Kind::all();
    let copies = |kind| load::copies_listed(cluster, kind, Some(name), fresh);
    let (world, copies) = tokio::try_join!(
        load::load_rules(cluster, &kinds, &ctx.settings.policy, fresh),
        futures::future::try_join_all(kinds.iter().map(|&kind| copies(kind))),
    )?;
    Ok((world, copies.into_iter().flatten().collect()))
}

/// Reads the rules and the copies in the namespace `ticket` names while its admitted change
/// is being persisted, and keeps them for its job (`freshness::prefetch` says when they may
/// stand in for reads made once it is persisted).
pub(crate) async fn prefetch(ctx: &Context, ticket: Ticket) {
    let name = ticket.namespace().to_string();
    match rules_and_copies(ctx, &name).await {
        Ok((world, copies)) => ctx
            .waiters
            .prefetch
            .store(ticket, NamespaceReads { world, copies }),
        Err(e) => {
            tracing::debug!(namespace = %name, error = %e, "early reads failed: the job reads once the namespace is persisted");
            ctx.waiters.prefetch.forget(&ticket);
        }
    }
}
