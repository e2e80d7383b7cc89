//! A source job: every copy of one source, after its admitted change landed (SPEC §4.2).

use std::{collections::BTreeSet, time::Instant};

use crate::{
    cluster::{
        ApiError, ReadMode,
        load::{self, Found},
    },
    freshness::persisted::persisted,
    model::{ObjectKey, SourceInfo},
    plan::{Contents, Existing, Scope},
    queue::job::Job,
    report,
    rules::Rule,
    sync::{
        Outcome, SyncError,
        context::Context,
        converge::{converge, finish_loading},
        follow_up::after,
        inputs::remember_payload,
        persisted::read_persisted,
        sources::{label_source, wake_followers, warn_about_source},
    },
};

/// A source job: every copy of one source (SPEC §4.2).
pub(in crate::sync) async fn run(
    ctx: &Context,
    job: &Job,
    key: &ObjectKey,
) -> Result<Outcome, SyncError> {
    let cluster = &ctx.cluster;
    let t0 = Instant::now();
    let Some(source) = read_persisted(ctx, job, || cluster.get(key), persisted).await? else {
        return Ok(Outcome::NotPersisted);
    };
    let t_persisted = t0.elapsed();
    let info = source
        .as_ref()
        .and_then(|o| SourceInfo::from_meta(key.kind, &(&o.metadata).into()));
    if info.is_none() && cluster.copy_index().any_copy(|m| &m.source == key) == Some(false) {
        // Not a source and no copy of it: nothing to do but tell the rules that follow it (bundles, stores'
        // passwords),
        // as the CopyRules known in memory say (while their watch is down, the next resync
        // does). A review of a source that does not exist (forged, or denied by another
        // webhook) costs this one read (SPEC §9.8).
        if let Some(rules) = cluster.copy_rule_scope().rules() {
            wake_followers(ctx, &rules, key);
        }
        return Ok(Outcome::Done);
    }
    // Label-selected lists come from the API server's watch cache (see ReadMode).
    let fresh = ReadMode::Indexed;
    // The rules and the source's existing copies are independent reads: do them at once.
    let copies = async {
        let mut found = Found::default();
        // A Secret's copies may be ConfigMaps and a ConfigMap's Secrets (SPEC §3.2).
        for kind in key.kind.interchangeable() {
            match &info {
                Some(info) => {
                    let uids = BTreeSet::from([info.uid.clone()]);
                    load::copies_of_sources(cluster, kind, &uids, fresh, &mut found).await?;
                }
                None => {
                    // Gone: its copies can only be found by their annotation.
                    load::all_copies(cluster, kind, None, fresh, &mut found).await?;
                }
            }
        }
        if info.is_none() {
            found.retain(|_, e| matches!(e, Existing::Managed(m) if &m.source == key));
        }
        Ok::<_, ApiError>(found)
    };
    // Sources of the other kind too: a copy whose marks name this source may be claimed by one.
    let kinds = key.kind.interchangeable();
    let (mut world, mut found) = tokio::try_join!(
        load::load_rules(cluster, &kinds, &ctx.settings.policy, fresh),
        copies
    )?;
    world.set_sources([(key.clone(), info.clone())]);
    wake_followers(ctx, &world.rules().rules, key);
    let mut contents = Contents::default();
    if let (Some(obj), Some(info)) = (&source, &info) {
        remember_payload(ctx, &mut contents, info, obj);
        warn_about_source(ctx, &world, info).await;
        let rules: Vec<Rule> = world.rules().for_source(info).cloned().collect();
        load::load_target_namespaces(cluster, &mut world, &rules, fresh).await?;
    }
    finish_loading(ctx, &mut world, &mut found, fresh).await?;
    tracing::debug!(
        waited_ms = t_persisted.as_millis() as u64,
        read_ms = (t0.elapsed() - t_persisted).as_millis() as u64,
        namespaces = world.namespaces().len(),
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
    report::refusals(&ctx.events, &ctx.metrics, &world, Some(key)).await;
    // A source a CopyRule selects gets the opt-in label (after its copies are written: not on
    // their way), so that its changes also reach the sources webhook (SPEC §2.2).
    if let Some(info) = info.as_ref().filter(|i| !i.deleting)
        && world
            .rules()
            .for_source(info)
            .any(|r| r.id.copy_rule_name().is_some())
    {
        label_source(ctx, info).await;
    }
    after(ctx, job, &outcomes).await
}
