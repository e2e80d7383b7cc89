//! The end-to-end tests: one test binary, one module per subject, all against a real
//! kube-apiserver + etcd (`common`). Run them with
//! `scripts/control-plane.sh run -- cargo nextest run --test e2e`; nextest runs each test in
//! its own process, one at a time (`.config/nextest.toml`, test-group `e2e`).

mod common;

mod bootstrap;
mod bundles;
mod carried_metadata;
mod cert_rotation;
mod cli;
mod copy_edits;
mod copy_rules;
mod explain;
mod grants;
mod ha;
mod helm_chart;
mod hostile;
mod hub;
mod inline_rules;
mod keys;
mod least_privilege;
mod migrate;
mod namespace_scope;
mod namespaced_rules;
mod not_opted_in;
mod observability;
mod pipeline;
mod plan;
mod planted_bindings;
mod pod_gate;
mod port_floods;
mod read_only;
mod release;
mod silent_connections;
mod smoke;
mod stalled_bodies;
mod templates;
mod tenancy;
mod unverified_callers;
mod watch_triggers;
mod webhook_tls;
