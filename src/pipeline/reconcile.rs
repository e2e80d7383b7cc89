//! The reconciler decides when full resyncs run, queued like any other job (SPEC §5): one when
//! this replica starts, leader or not (a restarted replica converges what it missed at once,
//! without waiting for the Lease of the process it replaces, SPEC §4.9), and while it leads,
//! one every `--resync-interval`, and one whenever someone asks on the Lease (`copyrator
//! resync`, taken by `leader.rs`). The resync itself is `sync::resync`.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::sync::watch;

use crate::{
    freshness::feed::Feed,
    queue::{
        enqueue,
        job::{Job, JobKey, Trigger},
    },
    sync::context::Context,
};

/// How long the startup resync waits for the watches to be up: a watch that cannot start
/// (RBAC, an API server that refuses it) delays convergence by no more than this.
const WATCHES_WAIT: Duration = Duration::from_secs(5);

/// Runs until `shutdown` fires.
pub async fn run(
    ctx: Arc<Context>,
    interval: Duration,
    mut leading: watch::Receiver<bool>,
    mut requests: watch::Receiver<String>,
    mut shutdown: watch::Receiver<bool>,
) {
    let resync = || {
        enqueue(
            &ctx.queue,
            &ctx.metrics,
            Job::new(JobKey::Resync, Trigger::Reconciler),
        );
        Instant::now()
    };
    // The startup resync waits until the watches that keep an index are up (at most
    // `WATCHES_WAIT`; rules keep none, and without the CRD their watch never is): their seeding
    // LISTs and the resync's own then do not hold every namespace and copy at the same time
    // (SPEC §5, the resync's peak memory).
    let deadline = Instant::now() + WATCHES_WAIT;
    let indexed_live = || {
        Feed::all()
            .into_iter()
            .filter(|f| !matches!(f, Feed::CopyRules | Feed::NamespacedCopyRules))
            .all(|f| ctx.waiters.is_live(f))
    };
    while !indexed_live() && Instant::now() < deadline {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            _ = shutdown.changed() => return,
        }
    }
    let mut last = resync();
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
        // A new leader resyncs at once (the previous one may have died mid-way), unless this
        // replica's own startup resync just did.
        let mut first = last.elapsed() < interval.min(Duration::from_secs(10));
        loop {
            if !std::mem::take(&mut first) {
                last = resync();
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                // Asked for on the Lease: resync now, and count the interval from here.
                r = requests.changed() => if r.is_err() { return },
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
