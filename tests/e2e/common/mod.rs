//! End-to-end test harness: a real kube-apiserver + etcd (started once per test process, or the
//! cluster in `COPYRATOR_KUBECONFIG`), per-test namespaces with unique names, and copyrator
//! running in-process ([`Harness`]) or as a child process ([`Process`]), its webhooks
//! registered in the API server over TLS.
//!
//! A test starts with [`Harness::start`] (or [`TestEnv::new`] when it runs copyrator some other
//! way), waits with [`TestEnv::wait_for`] / [`TestEnv::wait_gone`] / [`TestEnv::wait_for_any`],
//! and ends with [`Harness::finish`] (or [`TestEnv::cleanup`]); a test that panics is cleaned up
//! by [`TestEnv`]'s `Drop`.

mod auth;
mod blackhole;
pub mod build;
mod cli;
mod copyrator;
pub mod env;
mod events;
pub mod floods;
mod harness;
mod http;
mod objects;
mod pods;
mod process;
mod reader;
pub mod tenant;
mod tls;
mod wait;
pub mod webhooks;

pub use auth::{service_account_token, write_token_kubeconfig};
pub use blackhole::{Blackhole, api_server_addr};
pub use cli::{kubectl, kubectl_copyrator, run_copyrator, run_copyrator_with, sh};
pub use copyrator::{Copyrator, Options};
pub use env::{TestEnv, client_ca_arg, kubeconfig, webhook_client_ca};
pub use events::{RULE_EVENTS, about_rule, rule_events};
pub use harness::Harness;
pub use http::{free_port, http_get, metric_value};
pub use objects::{Data, ca_cert, config_map, holding, secret, secret_value};
pub use pods::{create_pod, pod, pull_secret_names, registry_secret, service_account};
pub use process::Process;
pub use reader::Reader;
pub use tls::{WebhookClient, test_certs, try_webhook_tls, webhook_tls, webhook_tls_from};
pub use wait::{CONVERGE, Object, Scope, eventually, stays, wait_for};
pub use webhooks::{
    WEBHOOK_CONFIG_NAME, namespace_create_review, register_pod_gate, register_split,
    register_webhooks, source_create_review, unregister_pod_gate,
};
