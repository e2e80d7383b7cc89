//! Reading a job's trigger object once the admitted change is persisted (SPEC §4.6): the job
//! registers as a waiter first (see `freshness::waiters`), and says "not yet" instead of
//! waiting. When a change counts as persisted is `freshness::persisted`'s.

use super::ApiError;
pub use crate::freshness::persisted::persisted;
use crate::{
    freshness::{feed::Feed, persisted::PERSIST_WAIT, waiters::Check},
    queue::job::{Awaited, Job, elapsed_since},
    sync::context::Context,
};

/// Reads the job's trigger object with `read`; `None` while the admitted change the job waits
/// for (`done`) is not visible yet and its deadline has not passed. The job registers as a
/// waiter first, so a change persisted after the read wakes it; while the feed is live and no
/// event arrived for the object since the trigger, it does not even read.
pub(super) async fn read_persisted<T, Fut>(
    ctx: &Context,
    job: &Job,
    read: impl Fn() -> Fut,
    done: fn(&Awaited, &T) -> bool,
) -> Result<Option<T>, ApiError>
where
    Fut: Future<Output = Result<T, ApiError>>,
{
    if parked(ctx, job) {
        return Ok(None);
    }
    let value = read().await?;
    if waiting(job) && !done(&job.awaited, &value) {
        return Ok(None);
    }
    stop_waiting(ctx, job);
    Ok(Some(value))
}

/// The job saw its admitted change: an event for its object no longer needs to wake it.
pub(super) fn stop_waiting(ctx: &Context, job: &Job) {
    if let Some((_, watched)) = Feed::of(&job.key) {
        ctx.waiters.unregister(&watched, &job.key);
    }
}

/// Whether the job still waits for its admitted change to be persisted.
fn waiting(job: &Job) -> bool {
    job.awaited != Awaited::Nothing && elapsed_since(job.since) < PERSIST_WAIT
}

/// Whether the job waits for its admitted change and no watch event for it arrived yet: then
/// [`read_persisted`] would say "not yet" without reading. Lets a job start its other reads
/// beside the trigger's only when that read will happen.
pub(super) fn parked(ctx: &Context, job: &Job) -> bool {
    waiting(job)
        && Feed::of(&job.key).is_some_and(|(feed, watched)| {
            ctx.waiters.check(feed, &watched, &job.key, job.since) == Check::Parked
        })
}
