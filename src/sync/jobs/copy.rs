//! A copy job: one copy someone else changed or deleted (SPEC §4.4).

use crate::{
    cluster::{
        ReadMode,
        load::{self, Found},
    },
    freshness::persisted::persisted,
    model::ObjectKey,
    plan::Scope,
    queue::job::Job,
    sync::{
        Outcome, SyncError,
        context::Context,
        converge::{converge, finish_loading},
        follow_up::after,
        hub::hubs_for,
        persisted::read_persisted,
    },
};

/// A copy job: one copy someone else changed or deleted (SPEC §4.4).
pub(in crate::sync) async fn run(
    ctx: &Context,
    job: &Job,
    key: &ObjectKey,
) -> Result<Outcome, SyncError> {
    let cluster = &ctx.cluster;
    let (copy, ns) = tokio::try_join!(
        read_persisted(ctx, job, || cluster.get(key), persisted),
        cluster.get_namespace(&key.namespace),
    )?;
    let Some(copy) = copy else {
        return Ok(Outcome::NotPersisted);
    };
    let Some(ns) = ns else {
        return Ok(Outcome::Done);
    };
    let fresh = ReadMode::Indexed;
    // The copy's source may be of the other of Secret and ConfigMap (SPEC §3.2).
    let kinds = key.kind.interchangeable();
    let mut world = load::load_rules(cluster, &kinds, &ctx.settings.policy, fresh).await?;
    world.insert_namespaces([ns]);
    let mut found = Found::default();
    found.add_read(key.clone(), copy.as_ref());
    // A hub copy is restored from what its hub was last read to place here (SPEC §14.2).
    let contents = hubs_for(&ctx.hub_reads.get(), &mut world, &found);
    finish_loading(ctx, &mut world, &mut found, fresh).await?;
    let outcomes = converge(
        ctx,
        job,
        &mut world,
        &Scope::Target(key.clone()),
        found,
        contents,
    )
    .await?;
    after(ctx, job, &outcomes).await
}
