//! What a worker does with one job (SPEC §4, §5): read the persisted state the job's scope
//! needs (after the admitted change landed, `persisted`), plan, apply and settle what went stale
//! (`converge`), then report and queue follow-ups (`follow_up`). One file per kind of job in
//! `jobs/`.

pub(crate) mod bundles;
pub mod context;
mod converge;
mod follow_up;
pub mod hub;
pub mod hub_reads;
mod inputs;
mod jobs;
pub mod persisted;
pub mod pods;
mod readiness;
mod sources;
pub mod unlabelled;

use crate::{
    cluster::ApiError,
    queue::job::{Job, JobKey},
    sync::context::Context,
};

/// Why a job did not finish; it is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("{count} write(s) failed, first: {first}")]
    Writes {
        count: usize,
        first: String,
        /// The first failure's [`ApiError::metric_label`].
        reason: &'static str,
    },
    #[error("targets kept changing while being written: {0}")]
    Unsettled(String),
}

impl SyncError {
    /// Why the job failed, as a metric label (`copyrator_job_failures_total`): the API's
    /// reason, never a message or a name.
    pub fn metric_label(&self) -> &'static str {
        match self {
            SyncError::Api(e) => e.metric_label(),
            SyncError::Writes { reason, .. } => reason,
            SyncError::Unsettled(_) => "unsettled",
        }
    }
}

/// How many times stale targets are re-read and re-planned within one job.
const MAX_ROUNDS: usize = 4;

/// What a job run came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Done,
    /// The admitted change it waits for is not persisted yet: run it again later (a watch
    /// event or the deadline, see [`crate::freshness::waiters`]).
    NotPersisted,
    /// Persisted, but not to be written before this time (a new namespace, SPEC §4 item 6):
    /// run it again then; the job waits in the queue, not on a worker.
    NotBefore(std::time::Instant),
}

/// Runs one job.
pub async fn run(ctx: &Context, job: &Job) -> Result<Outcome, SyncError> {
    match &job.key {
        // A bundle's copies name their CopyRule as their source: their job is the rule's.
        JobKey::Source(key) if key.is_bundle() => jobs::rule::run(ctx, job, &key.name).await,
        JobKey::Source(key) => jobs::source::run(ctx, job, key).await,
        JobKey::Namespace(name) => jobs::namespace::run(ctx, job, name).await,
        JobKey::Copy(key) => jobs::copy::run(ctx, job, key).await,
        JobKey::Rule(name) => jobs::rule::run(ctx, job, name).await,
        JobKey::Resync => jobs::resync::run(ctx, job).await,
    }
}

/// Makes the early reads admitted namespace changes ask for (`freshness::prefetch`), each in a
/// task of its own, until the process ends.
pub async fn prefetch_namespaces(ctx: std::sync::Arc<Context>) {
    let mut requests = ctx.waiters.prefetch.serve();
    // At most MAX_IN_FLIGHT at once: while they run, requests wait in the channel, and beyond
    // it are refused (their jobs read as usual).
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(
        crate::freshness::prefetch::MAX_IN_FLIGHT,
    ));
    while let Some(ticket) = requests.recv().await {
        let Ok(slot) = std::sync::Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let ctx = std::sync::Arc::clone(&ctx);
        tokio::spawn(async move {
            jobs::namespace::prefetch(&ctx, ticket).await;
            drop(slot);
        });
    }
}

#[cfg(test)]
pub(crate) mod tests;
