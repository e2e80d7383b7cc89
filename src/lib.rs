//! copyrator keeps Secrets and ConfigMaps copied across Kubernetes namespaces.
//!
//! How a change travels (SPEC §5):
//!
//! ```text
//! kube-apiserver ─AdmissionReview─▶ admission ─Job─▶ queue ◀─Job─ reconcile (periodic, leader)
//!                                                      │
//!                                                      ▼
//!           worker ─▶ sync: read persisted state (world) ─▶ plan (pure) ─▶ apply (writes)
//! ```

pub mod admission;
pub mod apply;
pub mod certs;
pub mod cli;
pub mod cluster;
pub mod content;
pub mod copyrule;
pub mod events;
pub mod leader;
pub mod manifests;
pub mod marks;
pub mod metrics;
pub mod model;
pub mod persisted;
pub mod plan;
pub mod queue;
pub mod ratelimit;
pub mod reconcile;
pub mod report;
pub mod rules;
pub mod selector;
pub mod selectors;
pub mod serve;
pub mod server;
pub mod sync;
pub mod telemetry;
pub mod tenancy;
pub mod tls;
pub mod watch;
pub mod worker;
pub mod world;
