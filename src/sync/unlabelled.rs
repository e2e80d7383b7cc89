//! Sources that ask for copies without the opt-in label (SPEC §2.1): copyrator never hears of
//! their changes (its webhooks and lists key on the label), so now and then, after a resync,
//! a task of its own looks for them (`--unlabelled-scan-interval`) and says so on each, once
//! per version. It pages through every Secret and ConfigMap, so it holds no worker and does
//! not delay the resync it follows.

use std::{sync::Arc, time::Instant};

use tokio::sync::watch;

use crate::{
    cluster::load,
    marks,
    report::events::{Regarding, reason},
    rules,
    sync::context::Context,
};

/// After each resync this replica finishes, a scan if one is due; until `shutdown`.
pub async fn run(ctx: Arc<Context>, mut shutdown: watch::Receiver<bool>) {
    let mut resyncs = ctx.resyncs.subscribe();
    loop {
        tokio::select! {
            changed = resyncs.changed() => if changed.is_err() { return },
            _ = shutdown.changed() => return,
        }
        warn_if_due(&ctx).await;
    }
}

/// Warns on every source that is not opted in, if a scan is due.
async fn warn_if_due(ctx: &Context) {
    if !ctx.unlabelled_scan.due(Instant::now()) {
        return;
    }
    let started = Instant::now();
    let found = match load::unlabelled_annotated_sources(&ctx.cluster).await {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(error = %e, "could not look for sources without the opt-in label");
            return;
        }
    };
    for source in &found {
        let version = (source.key.clone(), source.resource_version.clone());
        if ctx.caches.unlabelled_warned.contains_key(&version) {
            continue;
        }
        ctx.caches.unlabelled_warned.insert(version, ());
        let note = format!(
            "has {} but not the label {}: \"true\": copyrator ignores it; add the label to \
             copy it (resourceVersion {})",
            rules::ignored_annotations(source).join(" and "),
            marks::SOURCE_LABEL,
            source.resource_version
        );
        ctx.events
            .warning(
                &Regarding::source(source.key.kind, &source.key, &source.uid),
                reason::NOT_OPTED_IN,
                note,
            )
            .await;
    }
    tracing::info!(
        found = found.len(),
        took_ms = started.elapsed().as_millis() as u64,
        "looked for sources without the opt-in label"
    );
    drop(found);
    load::release_freed_memory();
}
