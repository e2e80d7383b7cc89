//! The Pod gate (SPEC §10): before a Pod is admitted, every copy its namespace should hold
//! exists in its source's current version. A namespace known to be settled is answered from
//! memory ([`crate::freshness::ready`]); a Pod of a namespace whose job is in flight (one
//! created right after its namespace) waits for that job to record it settled; any other is
//! synced in the admission path, one sync per namespace however many Pods wait on it, within a
//! time budget past which the Pod is admitted anyway (the sync goes on).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::{FutureExt, future::Shared};
use tokio::sync::Semaphore;

use crate::{
    freshness::ready::Ready,
    metrics::OutcomeLabels,
    queue::job::JobKey,
    sync::{context::Context, pods::settle_namespace},
};

/// Namespace syncs the gate runs at once; more wait for a slot (within their budget).
const SYNCS: usize = 32;

/// Longest a Pod waits for its namespace's job in flight before the gate syncs the namespace
/// itself (a job still queued behind others, or one waiting for an API server that is slow).
const JOIN_WAIT: Duration = Duration::from_millis(250);

/// How often a Pod waiting for its namespace's job looks whether the job is still in flight.
const JOIN_POLL: Duration = Duration::from_millis(5);

/// What the gate answered, for `copyrator_pod_gate_total{outcome}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// From memory: the namespace is known settled.
    Cached,
    /// Synced now; nothing needed writing.
    Settled,
    /// Synced now; copies were created or updated before the Pod was admitted.
    Wrote,
    /// Synced now, but something failed or could not be read: admitted without the promise.
    Unsettled,
    /// The sync did not finish within the budget: admitted, the sync goes on.
    Timeout,
    /// The sync failed: admitted.
    Error,
    /// A dryRun Pod in a namespace not known settled: no writes, admitted unchanged.
    DryRun,
    /// An excluded namespace: nothing to do.
    Excluded,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Cached => "cached",
            Outcome::Settled => "settled",
            Outcome::Wrote => "wrote",
            Outcome::Unsettled => "unsettled",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
            Outcome::DryRun => "dry_run",
            Outcome::Excluded => "excluded",
        }
    }
}

type Sync = Shared<futures::future::BoxFuture<'static, (Outcome, Option<Arc<Ready>>)>>;

/// See the module documentation.
pub struct PodGate {
    ctx: Arc<Context>,
    budget: Duration,
    slots: Arc<Semaphore>,
    in_flight: Arc<Mutex<HashMap<String, Sync>>>,
}

impl PodGate {
    /// A gate that waits at most `budget` for a namespace's sync (`--pod-gate-timeout`).
    pub fn new(ctx: Arc<Context>, budget: Duration) -> Arc<Self> {
        Arc::new(Self {
            ctx,
            budget,
            slots: Arc::new(Semaphore::new(SYNCS)),
            in_flight: Default::default(),
        })
    }

    /// Makes sure the copies namespace `namespace` should hold exist; returns how, and what
    /// its Pods get when it is settled.
    pub async fn check(&self, namespace: &str, dry_run: bool) -> (Outcome, Option<Arc<Ready>>) {
        let answer = self.answer(namespace, dry_run).await;
        self.ctx
            .metrics
            .pod_gate
            .get_or_create(&OutcomeLabels {
                outcome: answer.0.as_str(),
            })
            .inc();
        answer
    }

    async fn answer(&self, namespace: &str, dry_run: bool) -> (Outcome, Option<Arc<Ready>>) {
        if self.ctx.settings.policy.is_excluded(namespace) {
            return (Outcome::Excluded, None);
        }
        if let Some(ready) = self.ctx.ready.get(namespace) {
            return (Outcome::Cached, Some(ready));
        }
        if dry_run {
            return (Outcome::DryRun, None);
        }
        if let Some(ready) = self.join(namespace).await {
            return (Outcome::Cached, Some(ready));
        }
        let sync = self.sync(namespace);
        match tokio::time::timeout(self.budget, sync).await {
            Ok(answer) => answer,
            Err(_) => {
                tracing::info!(
                    namespace,
                    budget_ms = self.budget.as_millis() as u64,
                    "Pod gate: namespace not settled within the budget; admitting the Pod"
                );
                (Outcome::Timeout, None)
            }
        }
    }

    /// Waits for the namespace job already in flight for `namespace` (a Pod created right
    /// after its namespace: the job its creation queued, woken by the namespace's event) to
    /// record it settled, instead of syncing it again beside that job; `None` when none runs
    /// or is due within [`JOIN_WAIT`] (one still waiting for an admitted change, which a
    /// forged review may announce and never make, is not joined), or it ends or runs past
    /// [`JOIN_WAIT`] without recording the namespace settled (the gate syncs it then).
    /// What it records is what [`Outcome::Cached`] answers from: a sync of the namespace
    /// that settled with nothing that could change the answer arriving since it began.
    async fn join(&self, namespace: &str) -> Option<Arc<Ready>> {
        let key = JobKey::Namespace(namespace.to_string());
        let until = Instant::now() + JOIN_WAIT.min(self.budget);
        loop {
            let recorded = self.ctx.ready.recorded();
            tokio::pin!(recorded);
            recorded.as_mut().enable();
            if let Some(ready) = self.ctx.ready.get(namespace) {
                return Some(ready);
            }
            if !self.ctx.queue.in_flight(&key, JOIN_WAIT) {
                return None;
            }
            // A job that ends without recording it tells nothing: look again now and then.
            let next = (Instant::now() + JOIN_POLL).min(until);
            if next <= Instant::now() {
                return None;
            }
            tokio::select! {
                _ = recorded => {}
                _ = tokio::time::sleep_until(next.into()) => {}
            }
        }
    }

    /// The namespace's sync: the one running, or a new one. It runs as a task of its own, so
    /// a Pod admitted past the budget does not cancel it.
    fn sync(&self, namespace: &str) -> Sync {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(running) = in_flight.get(namespace) {
            return running.clone();
        }
        let ctx = Arc::clone(&self.ctx);
        let slots = Arc::clone(&self.slots);
        let name = namespace.to_string();
        let registry = Arc::clone(&self.in_flight);
        let task = tokio::spawn(async move {
            let answer = match slots.acquire_owned().await {
                Ok(_slot) => match settle_namespace(&ctx, &name).await {
                    Ok(settled) => match settled.ready {
                        Some(ready) if settled.written > 0 => {
                            (Outcome::Wrote, Some(Arc::new(ready)))
                        }
                        Some(ready) => (Outcome::Settled, Some(Arc::new(ready))),
                        None => (Outcome::Unsettled, None),
                    },
                    Err(e) => {
                        tracing::warn!(namespace = %name, error = %e, "Pod gate: namespace sync failed; admitting the Pod");
                        (Outcome::Error, None)
                    }
                },
                Err(_) => (Outcome::Error, None),
            };
            registry
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&name);
            answer
        });
        let shared = async move { task.await.unwrap_or((Outcome::Error, None)) }
            .boxed()
            .shared();
        in_flight.insert(namespace.to_string(), shared.clone());
        shared
    }
}

#[cfg(test)]
mod tests;
