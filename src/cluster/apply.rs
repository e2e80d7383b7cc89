//! Applying a plan: the only place copies are written. Every write is safe under races
//! (SPEC §4.5): creates only succeed if the name is free, updates and deletes carry the
//! resourceVersion they were planned from. Writes run with bounded concurrency, and with a
//! bound on the bytes in flight: each request body is built from the copy's shared template
//! just before it is sent, so a fan-out's memory is the payload plus the writes in flight
//! (SPEC §5), not the payload times the number of namespaces.

use std::time::Instant;

use futures::{StreamExt, stream};
use tokio::sync::Semaphore;

use crate::{
    cluster::{ApiError, Cluster, Written},
    content::DesiredCopy,
    metrics::{Metrics, VerbLabels},
    model::kind_table::Grants,
    plan::Action,
};

/// What became of one action.
#[derive(Debug)]
pub enum Applied {
    /// Nothing to write (in sync, conflict, retained, skipped).
    NoWrite,
    Done,
    /// The target changed since it was read: re-read and plan it again.
    Stale,
    /// The namespace is being deleted.
    NamespaceTerminating,
    /// Boxed: a full resync keeps one outcome per copy, nearly all without an error.
    Failed(Box<ApiError>),
}

#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Applied>() <= 16);

/// The process-wide budget of bytes in copy writes that [`apply`] takes its permits from (in
/// KiB; `--fanout-bytes`): a write holds twice its body (the request, and the object the API
/// server sends back until its metadata is read).
pub struct WriteBudget {
    permits: Semaphore,
    kib: u32,
}

impl WriteBudget {
    pub fn new(bytes: usize) -> Self {
        let kib = (bytes / 1024).clamp(1, u32::MAX as usize >> 4) as u32;
        Self {
            permits: Semaphore::new(kib as usize),
            kib,
        }
    }
}

/// Applies `actions` with at most `concurrency` writes in flight, and no more bytes in flight
/// than `budget` allows; returns each action with its result (in completion order: a slow
/// write never holds back the window).
pub async fn apply(
    cluster: &Cluster,
    metrics: &Metrics,
    budget: &WriteBudget,
    actions: Vec<Action>,
    concurrency: usize,
    since: Instant,
) -> Vec<(Action, Applied)> {
    let mut out = Vec::with_capacity(actions.len());
    let mut results = stream::iter(actions)
        .map(|action| async move {
            let kib = match &action {
                Action::Create { copy, .. }
                | Action::Update { copy, .. }
                | Action::Recreate { copy, .. } => {
                    (2 * copy.approx_bytes() / 1024 + 1).min(budget.kib as usize) as u32
                }
                _ => 0,
            };
            // A closed semaphore is never closed here; without a permit, write anyway.
            let _permit = match kib {
                0 => None,
                n => budget.permits.acquire_many(n).await.ok(),
            };
            let applied = apply_one(cluster, metrics, &action, since).await;
            (action, applied)
        })
        .buffer_unordered(concurrency.max(1));
    while let Some(result) = results.next().await {
        out.push(result);
    }
    out
}

async fn apply_one(
    cluster: &Cluster,
    metrics: &Metrics,
    action: &Action,
    since: Instant,
) -> Applied {
    let result = match action {
        Action::Create { copy, .. } => match cluster.create_copy(copy).await {
            // A Role copy of rules copyrator does not hold (SPEC §9.10).
            Err(e) if e.is_forbidden() && copy.key.kind.facts().grants == Some(Grants::Role) => {
                create_role_in_two_steps(cluster, metrics, copy, since).await
            }
            other => other.map(|w| count(metrics, "create", w, since)),
        },
        Action::Update {
            copy,
            resource_version,
            ..
        } => {
            match cluster.replace_copy(copy, resource_version).await {
                // The existing copy is immutable (the source was mutable before): recreate.
                Err(e) if e.is_immutable_rejection() => {
                    recreate(cluster, metrics, action, since).await
                }
                other => other.map(|w| count(metrics, "update", w, since)),
            }
        }
        Action::Recreate { .. } => recreate(cluster, metrics, action, since).await,
        Action::Delete {
            target,
            resource_version,
            ..
        } => cluster
            .delete(target, resource_version)
            .await
            .map(|w| count(metrics, "delete", w, since)),
        _ => return Applied::NoWrite,
    };
    tracing::debug!(action = %describe(action), result = ?result.as_ref().map_err(|e| e.code()), "applied");
    match result {
        Ok(Written::Done) => Applied::Done,
        Ok(Written::Stale) => Applied::Stale,
        Ok(Written::NamespaceTerminating) => Applied::NamespaceTerminating,
        Err(e) => Applied::Failed(Box::new(e)),
    }
}

/// Creates a Role copy as its placeholder ([`crate::grants::role_placeholder`]), then
/// updates it to its rules, preconditioned on the placeholder's version: `escalate` on its
/// name authorizes the update, never the create. A placeholder the update does not reach is
/// stale by its marks: the next sync updates it.
async fn create_role_in_two_steps(
    cluster: &Cluster,
    metrics: &Metrics,
    copy: &DesiredCopy,
    since: Instant,
) -> Result<Written, ApiError> {
    match cluster
        .create_copy(&crate::grants::role_placeholder(copy))
        .await?
    {
        Written::Done => {}
        other => return Ok(other),
    }
    let Some(rv) = cluster
        .get_meta(&copy.key)
        .await?
        .and_then(|m| m.resource_version)
    else {
        return Ok(Written::Stale);
    };
    cluster
        .replace_copy(copy, &rv)
        .await
        .map(|w| count(metrics, "create", w, since))
}

/// Delete (preconditioned) then create: the only way to change an immutable object.
async fn recreate(
    cluster: &Cluster,
    metrics: &Metrics,
    action: &Action,
    since: Instant,
) -> Result<Written, ApiError> {
    let (Action::Recreate {
        copy,
        resource_version,
        ..
    }
    | Action::Update {
        copy,
        resource_version,
        ..
    }) = action
    else {
        return Ok(Written::Done);
    };
    match cluster.delete(&copy.key, resource_version).await? {
        Written::Done => {
            count(metrics, "delete", Written::Done, since);
        }
        other => return Ok(other),
    }
    cluster
        .create_copy(copy)
        .await
        .map(|w| count(metrics, "create", w, since))
}

fn count(metrics: &Metrics, verb: &'static str, w: Written, since: Instant) -> Written {
    if w == Written::Done {
        metrics
            .copy_writes
            .get_or_create(&VerbLabels { verb })
            .inc();
        metrics.copy_lag.observe(
            Instant::now()
                .saturating_duration_since(since)
                .as_secs_f64(),
        );
    }
    w
}

/// `verb kind ns/name` of an action, for logs (never its content).
fn describe(action: &Action) -> String {
    match action {
        Action::Create { copy, .. } => format!("create {}", copy.key),
        Action::Update { copy, adopt, .. } => {
            format!(
                "{} {}",
                if adopt.adopts() { "adopt" } else { "update" },
                copy.key
            )
        }
        Action::Recreate { copy, .. } => format!("recreate {}", copy.key),
        Action::Delete { target, .. } => format!("delete {target}"),
        _ => String::new(),
    }
}
