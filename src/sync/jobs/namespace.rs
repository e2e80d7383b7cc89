//! A namespace job: every copy that should or does live in one namespace (SPEC §4.1, §4.3).
//! The Pod gate runs the same sync in the admission path (`sync::pods`).

use crate::{
    cluster::{
        Freshness,
        apply::Applied,
        load::{self, Found},
    },
    marks,
    model::Kind,
    pipeline::{context::Context, job::Job},
    plan::{Action, Contents, Scope, World},
    sync::{
        Outcome, SyncError,
        converge::{converge, finish_loading},
        follow_up::after,
        persisted::{namespace_persisted, parked, read_persisted},
        pods,
    },
};

/// What syncing one namespace came to.
pub(in crate::sync) enum Synced {
    /// The admitted change the job waits for is not visible yet.
    NotPersisted,
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
        Synced::Gone => Ok(Outcome::Done),
        Synced::Done { world, outcomes } => {
            if let Some(ready) = pods::readiness(ctx, name, &world, &outcomes).await {
                ctx.ready.record(name, since, ready);
            }
            after(ctx, job, &outcomes)
        }
    }
}

/// Reads, plans and writes every copy that should or does live in namespace `name`.
pub(in crate::sync) async fn sync(
    ctx: &Context,
    job: &Job,
    name: &str,
) -> Result<Synced, SyncError> {
    let cluster = &ctx.cluster;
    if parked(ctx, job) {
        return Ok(Synced::NotPersisted);
    }
    let fresh = Freshness::Cached;
    // The namespace, the rules and the copies in it, read at once: one round trip.
    let (ns, (mut world, secrets, config_maps)) = tokio::try_join!(
        read_persisted(
            ctx,
            job,
            || cluster.get_namespace(name),
            namespace_persisted,
        ),
        async {
            tokio::try_join!(
                load::load_rules(cluster, &Kind::ALL, &ctx.settings.policy, fresh),
                cluster.list_meta(
                    Kind::Secret,
                    Some(name),
                    marks::MANAGED_SELECTOR,
                    fresh,
                    |m| { load::listed(Kind::Secret, m) }
                ),
                cluster.list_meta(
                    Kind::ConfigMap,
                    Some(name),
                    marks::MANAGED_SELECTOR,
                    fresh,
                    |m| { load::listed(Kind::ConfigMap, m) }
                ),
            )
        }
    )?;
    let Some(ns) = ns else {
        return Ok(Synced::NotPersisted);
    };
    let Some(ns) = ns.filter(|n| !n.terminating) else {
        return Ok(Synced::Gone);
    };
    let mut found = Found::default();
    found.add_listed(secrets);
    found.add_listed(config_maps);
    world.insert_namespaces([ns]);
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
    Ok(Synced::Done {
        world: Box::new(world),
        outcomes,
    })
}
