//! The worker pool: a few tasks that take jobs from the queue, run them (see `sync.rs`), and
//! retry failures with exponential backoff. Every job runs in a tracing span with its key.

use std::{sync::Arc, time::Instant};

use tracing::Instrument;

use crate::{
    metrics::{JobLabels, KindLabels, Metrics},
    queue::{Job, Pushed, WorkQueue, retry_delay},
    sync::{Context, run},
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
        ctx.metrics.queue_depth.set(ctx.queue.depth() as i64);
        // Not yet due (a resync for dropped jobs): back into the queue when it is, without
        // holding this worker meanwhile.
        if let Some(wait) = job
            .not_before
            .and_then(|at| at.checked_duration_since(Instant::now()))
        {
            ctx.queue.done(&job.key);
            ctx.queue.push_after(job, wait);
            continue;
        }
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
        ctx.queue.done(&job.key);
        let outcome = match result {
            Ok(()) => {
                span.in_scope(|| {
                    tracing::debug!(took_ms = started.elapsed().as_millis() as u64, "job done")
                });
                "ok"
            }
            Err(e) if job.attempt + 1 < MAX_ATTEMPTS => {
                let delay = retry_delay(job.attempt);
                span.in_scope(|| tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "job failed, will retry"));
                let retry = Job {
                    attempt: job.attempt + 1,
                    ..job.clone()
                };
                ctx.queue.push_after(retry, delay);
                "retry"
            }
            Err(e) => {
                span.in_scope(
                    || tracing::error!(error = %e, "job failed; leaving it to the next resync"),
                );
                "failed"
            }
        };
        ctx.metrics
            .jobs
            .get_or_create(&JobLabels { kind, outcome })
            .inc();
        ctx.metrics.queue_depth.set(ctx.queue.depth() as i64);
    }
}

/// Queues `job`, counting coalesced and dropped jobs.
pub fn enqueue(queue: &WorkQueue, metrics: &Metrics, job: Job) {
    match queue.push(job) {
        Pushed::Queued => {}
        Pushed::Coalesced => {
            metrics.queue_coalesced.inc();
        }
        Pushed::Dropped => {
            metrics.queue_dropped.inc();
            tracing::warn!("work queue full: job dropped, full resync scheduled");
        }
    }
    metrics.queue_depth.set(queue.depth() as i64);
}
