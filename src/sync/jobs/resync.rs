//! The full resync: everything, from a handful of label-selected, metadata-only LISTs (SPEC §5).

use std::time::Instant;

use k8s_openapi::jiff::Timestamp;

use crate::{
    cluster::{
        ReadMode,
        load::{self, Found},
    },
    marks,
    model::Kind,
    queue::job::Job,
    report::{
        self,
        events::{Regarding, reason},
    },
    sync::{
        Outcome, SyncError,
        context::Context,
        converge::{converge_all, finish_loading},
        follow_up::write_rule_status,
        sources::label_source,
    },
};

/// The full resync: everything, from a handful of label-selected metadata-only LISTs.
pub(in crate::sync) async fn run(ctx: &Context, job: &Job) -> Result<Outcome, SyncError> {
    let started = Instant::now();
    let began = Timestamp::now();
    let cluster = &ctx.cluster;
    // Label-selected lists from the watch cache (no etcd scan of every Secret); the complete
    // namespace list from etcd, page by page.
    let cached = ReadMode::Cached;
    // The copies are the resync's own LIST, not the copy index's; only the marks they carry
    // alike are shared with it (values, never what the LIST says is there).
    let copy_index = cluster.copy_index();
    let listed = |kind| {
        move |m| crate::freshness::copy_index::listed(kind, m).map(|l| l.sharing_marks(copy_index))
    };
    let kinds = Kind::all();
    let (mut world, namespaces, copies) = tokio::try_join!(
        load::load_rules(cluster, &kinds, &ctx.settings.policy, cached),
        cluster.list_namespaces("", ReadMode::Consistent),
        futures::future::try_join_all(kinds.iter().map(|&kind| cluster.list_meta(
            kind,
            None,
            marks::MANAGED_SELECTOR,
            cached,
            listed(kind)
        ))),
    )?;
    let mut found = Found::default();
    for listed in copies {
        found.add_listed(listed);
    }
    world.insert_namespaces(namespaces);

    // Sources of CopyRules that lack the opt-in label get it, so their changes reach the
    // sources webhook.
    let unlabelled = load::unlabelled_rule_sources(cluster, &world, cached).await?;
    for info in &unlabelled {
        label_source(ctx, info).await;
    }
    world.set_sources(unlabelled.into_iter().map(|s| (s.key.clone(), Some(s))));
    finish_loading(ctx, &mut world, &mut found, cached).await?;

    let done = converge_all(ctx, job, &mut world, found).await?;
    report::refusals(&ctx.events, &ctx.metrics, &world, None).await;
    report::capped(&ctx.events, &ctx.metrics, &world).await;
    // The leader's resync vouches for every copy as of when it began reading (SPEC §2.2);
    // a follower's startup resync leaves that to the leader, so replicas never take turns
    // rewriting every status.
    let verified = (*ctx.leading.borrow()).then_some(began);
    for cr in world.copy_rules() {
        write_rule_status(ctx, &world, cr, &done.tallies, verified).await;
    }
    for (key, err) in &world.rules().invalid_sources {
        if let Some(src) = world.sources().get(key) {
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
    // What the resync loaded (every namespace and copy) is garbage now: give it back.
    drop(world);
    load::release_freed_memory();
    ctx.resyncs.send_modify(|r| {
        r.completed += 1;
        r.last_started = Some(began);
    });
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    ctx.metrics
        .last_resync
        .set(i64::try_from(now).unwrap_or(i64::MAX));
    tracing::info!(
        took_ms = started.elapsed().as_millis() as u64,
        writes = done.writes,
        "resync done"
    );
    Ok(Outcome::Done)
}
