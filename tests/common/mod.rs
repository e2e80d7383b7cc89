//! End-to-end test harness: a real kube-apiserver + etcd (started once per test process, or the
//! cluster in `COPYRATOR_KUBECONFIG`), per-test namespaces with unique names, and copyrator
//! running in-process ([`Copyrator`]) or as a child process ([`Process`]), its webhooks
//! registered in the API server over TLS.
// Each test binary uses a part of the harness.
#![allow(dead_code, unused_imports)]

mod auth;
mod copyrator;
mod env;
mod http;
mod objects;
mod process;
pub mod tenant;
mod tls;
mod wait;
mod webhooks;

pub use auth::{service_account_token, write_token_kubeconfig};
pub use copyrator::{Copyrator, Options, serve_args};
pub use env::{TestEnv, client, kubeconfig};
pub use http::{free_port, http_get, metric_value};
pub use objects::{config_map, name_of, secret, secret_value};
pub use process::Process;
pub use tls::{WebhookClient, test_certs, webhook_tls};
pub use wait::{CONVERGE, eventually, stays};
pub use webhooks::{
    WEBHOOK_CONFIG_NAME, namespace_create_review, register_webhooks, unregister_webhooks,
};
