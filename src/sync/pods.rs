//! What the Pod gate needs from a namespace sync (SPEC §10): the namespace synced in the
//! admission path, whether it settled, and which of its copies are image pull secrets.

use super::{
    SyncError,
    follow_up::after,
    jobs::namespace::{Synced, sync},
    readiness::readiness,
};
use crate::{
    cluster::apply::Applied,
    freshness::ready::Ready,
    queue::job::{Job, JobKey, Trigger},
    sync::context::Context,
};

/// What a Pod gate sync of one namespace came to.
#[derive(Debug)]
pub struct Settled {
    /// `Some` when every copy the namespace should hold exists in its source's version:
    /// what the namespace's Pods get.
    pub ready: Option<Ready>,
    /// Copies created or updated by this sync.
    pub written: usize,
}

/// Syncs namespace `name` now, for a Pod about to be admitted there; a settled namespace is
/// remembered (unless something changed while it was read).
pub async fn settle_namespace(ctx: &Context, name: &str) -> Result<Settled, SyncError> {
    let since = ctx.ready.begin();
    let job = Job::new(JobKey::Namespace(name.to_string()), Trigger::PodGate);
    match sync(ctx, &job, name).await? {
        // Awaits nothing: never "not persisted".
        Synced::NotPersisted => Ok(Settled {
            ready: Some(Ready::default()),
            written: 0,
        }),
        // A namespace that does not exist (a review no API server sent: it admits Pods only
        // into namespaces that exist) or is being deleted (it takes no Pods) has nothing to
        // inject, and is remembered like any namespace with nothing to do, until its own
        // event: the answer, its outcome and its cost say nothing about whether it exists,
        // and reviews naming it cost one sync, not one each (SPEC §9.8).
        Synced::Gone => {
            ctx.ready.record(name, since, Ready::default());
            Ok(Settled {
                ready: Some(Ready::default()),
                written: 0,
            })
        }
        // Only jobs awaiting a namespace CREATE are held back; were this one, it settled
        // nothing.
        Synced::NotBefore(_) => Ok(Settled {
            ready: None,
            written: 0,
        }),
        Synced::Done { world, outcomes } => {
            let written = outcomes
                .iter()
                .filter(|(a, r)| a.is_write() && matches!(r, Applied::Done))
                .count();
            let ready = readiness(ctx, name, &world, &outcomes).await;
            if let Some(ready) = &ready {
                ctx.ready.record(name, since, ready.clone());
            }
            after(ctx, &job, &outcomes).await?;
            Ok(Settled { ready, written })
        }
    }
}
