//! copyrator keeps Secrets, ConfigMaps and other namespaced objects copied across Kubernetes
//! namespaces (the contract: `docs/SPEC.md`).
//!
//! How a change travels, and which module holds each step: the one architecture diagram and code
//! layout are in "How it is built" of `docs/architecture.md`, so that there is one to keep true.
//! Modules depend on each other in one direction only, in every folder of both crates, checked
//! by `layering.rs`; every path a comment names exists, checked by `doc_paths.rs`.

pub use copyrator_core::{
    bundle, content, copyrule, grants, hub, marks, model, namespaced, plan, powers, rules,
    selector, template, tenancy, transform,
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
mod doc_paths;
#[cfg(test)]
mod layering;
