//! The reconciler: while this replica leads, a full resync at startup and every
//! `--resync-interval`, queued like any other job (SPEC §5). The resync itself is
//! `sync::resync`; this only decides when.

use std::{sync::Arc, time::Duration};

use tokio::sync::watch;

use crate::{
    queue::{Job, JobKey, Trigger},
    sync::Context,
    worker::enqueue,
};

/// Runs until `shutdown` fires.
pub async fn run(
    ctx: Arc<Context>,
    interval: Duration,
    mut leading: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        // Wait for leadership.
        while !*leading.borrow_and_update() {
            tokio::select! {
                r = leading.changed() => if r.is_err() { return },
                _ = shutdown.changed() => return,
            }
        }
        tracing::info!(
            every_s = interval.as_secs(),
            "leading: running the reconciler"
        );
        loop {
            enqueue(
                &ctx.queue,
                &ctx.metrics,
                Job::new(JobKey::Resync, Trigger::Reconciler),
            );
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                r = leading.changed() => {
                    if r.is_err() { return }
                    if !*leading.borrow() {
                        tracing::info!("no longer leading: reconciler paused");
                        break;
                    }
                }
                _ = shutdown.changed() => return,
            }
        }
    }
}
