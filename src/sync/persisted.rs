//! Reading a job's trigger object once the admitted change is persisted (SPEC §4.6): the job
//! registers as a waiter first (see `pipeline::waiters`), and says "not yet" instead of waiting.

use super::ApiError;
use crate::{
    copyrule::CopyRule,
    model::{NamespaceInfo, Object},
    pipeline::{
        context::Context,
        job::{Awaited, Job, elapsed_since},
        waiters::{Check, Feed, PERSIST_WAIT},
    },
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

/// Whether the awaited change of a Secret or ConfigMap is visible in what was read.
pub fn object_persisted(awaited: &Awaited, obj: &Option<Object>) -> bool {
    match (awaited, obj) {
        (Awaited::Nothing, _) => true,
        (Awaited::Exists, o) => o.is_some(),
        (Awaited::ChangedFrom(rv), None) => !rv.is_empty(),
        (Awaited::ChangedFrom(rv), Some(o)) => o.metadata.resource_version.as_deref() != Some(rv),
        (Awaited::Gone, o) => o
            .as_ref()
            .is_none_or(|o| o.metadata.deletion_timestamp.is_some()),
    }
}

/// Whether the awaited change of a Namespace is visible in what was read.
pub fn namespace_persisted(awaited: &Awaited, ns: &Option<NamespaceInfo>) -> bool {
    match (awaited, ns) {
        (Awaited::Nothing, _) => true,
        (Awaited::Exists, ns) => ns.is_some(),
        (Awaited::ChangedFrom(rv), None) => !rv.is_empty(),
        (Awaited::ChangedFrom(rv), Some(ns)) => &ns.resource_version != rv,
        (Awaited::Gone, ns) => ns.as_ref().is_none_or(|n| n.terminating),
    }
}

/// Whether the awaited change of a CopyRule is visible in what was read.
pub fn rule_persisted(awaited: &Awaited, rule: &Option<CopyRule>) -> bool {
    match (awaited, rule) {
        (Awaited::Nothing, _) => true,
        (Awaited::Exists, r) => r.is_some(),
        (Awaited::ChangedFrom(rv), None) => !rv.is_empty(),
        (Awaited::ChangedFrom(rv), Some(r)) => r.metadata.resource_version.as_deref() != Some(rv),
        (Awaited::Gone, r) => r
            .as_ref()
            .is_none_or(|r| r.metadata.deletion_timestamp.is_some()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(rv: &str) -> Option<Object> {
        let mut o = Object::default();
        o.metadata.resource_version = Some(rv.into());
        Some(o)
    }

    fn ns(rv: &str) -> Option<NamespaceInfo> {
        Some(NamespaceInfo {
            name: "n".into(),
            resource_version: rv.into(),
            labels: Default::default(),
            accept_from: None,
            terminating: false,
        })
    }

    #[test]
    fn admitted_changes_count_as_persisted_only_once_visible() {
        let changed = Awaited::ChangedFrom("5".into());
        assert!(
            !object_persisted(&changed, &obj("5")),
            "still the version the admission replaced"
        );
        assert!(object_persisted(&changed, &obj("6")));
        assert!(
            object_persisted(&changed, &None),
            "deleted since: nothing to wait for"
        );
        assert!(!object_persisted(&Awaited::Exists, &None));
        assert!(object_persisted(&Awaited::Exists, &obj("1")));
        assert!(!object_persisted(&Awaited::Gone, &obj("1")));
        assert!(object_persisted(&Awaited::Gone, &None));
        assert!(object_persisted(&Awaited::Nothing, &None));

        assert!(
            !namespace_persisted(&changed, &ns("5")),
            "a label change not persisted yet"
        );
        assert!(namespace_persisted(&changed, &ns("6")));
        assert!(
            !namespace_persisted(&Awaited::Exists, &None),
            "namespace CREATE not persisted yet"
        );
        assert!(namespace_persisted(&Awaited::Exists, &ns("1")));
    }
}
