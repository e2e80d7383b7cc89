//! The worker pool: a few tasks that take jobs from the queue, run them (`sync`), and
//! put them back when they must run again: a retry with exponential backoff, or a re-check for
//! an admitted change not persisted yet. Nothing waits while holding a worker. Every job runs
//! in a tracing span with its key.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use tracing::Instrument;

use crate::{
    freshness::feed::Feed,
    queue::{
        Finished, count,
        job::{Job, retry_delay},
    },
    sync::context::Context,
};
use crate::{
    metrics::{FailureLabels, JobLabels, KindLabels, Metrics},
    sync::{Outcome, SyncError, run},
};

/// After this many attempts a job is left to the next resync.
pub const MAX_ATTEMPTS: u32 = 8;

/// Starts `count` workers; they stop when the queue is closed and drained.
pub fn spawn(ctx: Arc<Context>, count: usize) -> Vec<tokio::task::JoinHandle<()>> {
    (0..count.max(1))
        .map(|i| {
            let ctx = Arc::clone(&ctx);
            tokio::spawn(async move { work(ctx, i).await })
        })
        .collect()
}

async fn work(ctx: Arc<Context>, worker: usize) {
    while let Some(job) = ctx.queue.pop().await {
        // Counted before the queue's depth drops, uncounted after it is back up (a retry):
        // the two never read 0 together while the job is still around.
        ctx.metrics.jobs_in_flight.inc();
        update_gauges(&ctx);
        let span = tracing::info_span!(
            "job",
            worker,
            key = %job.key,
            trigger = job.trigger.as_str(),
            attempt = job.attempt
        );
        let started = Instant::now();
        let result = run(&ctx, &job).instrument(span.clone()).await;
        let kind = job.key.kind();
        ctx.metrics
            .job_duration
            .get_or_create(&KindLabels { kind })
            .observe(started.elapsed().as_secs_f64());
        let key = job.key.clone();
        let (outcome, next) = match result {
            Ok(Outcome::Done) => {
                span.in_scope(|| {
                    tracing::debug!(took_ms = started.elapsed().as_millis() as u64, "job done")
                });
                ("ok", Finished::Done)
            }
            Ok(Outcome::NotPersisted) => {
                let now = Instant::now();
                let at = Feed::of(&job.key)
                    .map(|(feed, _)| ctx.waiters.next_look(feed, job.since, now))
                    .unwrap_or(now + Duration::from_millis(50));
                span.in_scope(|| {
                    tracing::debug!(
                        look_again_in_ms = at.saturating_duration_since(now).as_millis() as u64,
                        "admitted change not persisted yet"
                    )
                });
                ("waiting", Finished::Again { job, at })
            }
            Ok(Outcome::NotBefore(at)) => {
                span.in_scope(|| {
                    tracing::debug!(
                        write_in_us =
                            at.saturating_duration_since(Instant::now()).as_micros() as u64,
                        "new namespace: first write after --new-namespace-delay"
                    )
                });
                ("waiting", Finished::Again { job, at })
            }
            Err(e) if job.attempt + 1 < MAX_ATTEMPTS => {
                count_failure(&ctx.metrics, kind, &e);
                let delay = retry_delay(job.attempt);
                span.in_scope(|| tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "job failed, will retry"));
                let retry = Job {
                    attempt: job.attempt + 1,
                    ..job
                };
                (
                    "retry",
                    Finished::Again {
                        job: retry,
                        at: Instant::now() + delay,
                    },
                )
            }
            Err(e) => {
                count_failure(&ctx.metrics, kind, &e);
                span.in_scope(
                    || tracing::error!(error = %e, "job failed; leaving it to the next resync"),
                );
                ("failed", Finished::Done)
            }
        };
        count(&ctx.metrics, kind, ctx.queue.finish(&key, next));
        ctx.metrics
            .jobs
            .get_or_create(&JobLabels { kind, outcome })
            .inc();
        update_gauges(&ctx);
        ctx.metrics.jobs_in_flight.dec();
    }
}

fn count_failure(metrics: &Metrics, kind: &'static str, e: &SyncError) {
    metrics
        .job_failures
        .get_or_create(&FailureLabels {
            kind,
            reason: e.metric_label(),
        })
        .inc();
}

fn update_gauges(ctx: &Context) {
    ctx.metrics.queue_depth.set(ctx.queue.depth() as i64);
    ctx.metrics.queue_delayed.set(ctx.queue.delayed() as i64);
}
