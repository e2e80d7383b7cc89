//! copyrator keeps Secrets and ConfigMaps copied across Kubernetes namespaces.
//!
//! How a change travels (SPEC §5), and where each step lives:
//!
//! ```text
//! kube-apiserver ─AdmissionReview─▶ admission/ ─Job─▶ queue/ ◀─Job─ pipeline/reconcile
//!        │ watch events                                 ▲           cluster/selectors
//!        └──▶ cluster/watch (I/O) ─▶ freshness/dispatch ┘ indexes, Pod gate memory, waiters
//!                                                         │
//!   pipeline/worker ─▶ sync/jobs/*: cluster/load (persisted state) ─▶ plan (pure, core crate)
//!                                   ─▶ cluster/apply (the only writes) ─▶ report (Events, status)
//!
//! kube-apiserver ─Pod CREATE─▶ admission/pods ─▶ gate: freshness/ready (memory) or
//!                                                sync/pods (the namespace synced now)
//! ```
//!
//! The top-level modules depend on each other in one direction only (`layering.rs`):
//! `freshness` and `queue` know nothing of `cluster`, `sync` or `pipeline`.

pub use copyrator_core::{
    bundle, content, copyrule, grants, marks, model, plan, rules, selector, tenancy, transform,
};

pub mod admission;
pub mod app;
pub mod certs;
pub mod cli;
pub mod cluster;
pub mod default_cas;
pub mod explain;
pub mod freshness;
pub mod gate;
pub mod listener;
pub mod manifests;
pub mod metrics;
pub mod migrate;
pub mod pipeline;
pub mod queue;
pub mod report;
pub mod sync;
pub mod telemetry;

#[cfg(test)]
mod layering;
