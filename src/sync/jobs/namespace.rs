//! A namespace job: every copy that should or does live in one namespace (SPEC §4.1, §4.3).

use crate::{
    cluster::{
        Freshness,
        load::{self, Found},
    },
    marks,
    model::Kind,
    pipeline::{context::Context, job::Job},
    plan::{Contents, Scope},
    sync::{
        Outcome, SyncError,
        converge::{converge, finish_loading},
        follow_up::after,
        persisted::{namespace_persisted, read_persisted},
    },
};

/// A namespace job: every copy that should or does live in one namespace (SPEC §4.1, §4.3).
pub(in crate::sync) async fn run(
    ctx: &Context,
    job: &Job,
    name: &str,
) -> Result<Outcome, SyncError> {
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
    )?;
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
    after(ctx, job, &outcomes)
}
