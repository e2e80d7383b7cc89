//! Other identities than the test's admin: ServiceAccount tokens (TokenRequest API) and
//! kubeconfigs that authenticate with them.

use std::path::Path;

use k8s_openapi::api::{
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::ServiceAccount,
};
use kube::{Api, Client, api::PostParams};
use serde_json::json;

/// A kubeconfig for the test cluster authenticating with `token` instead of the admin's.
pub fn write_token_kubeconfig(admin: &Path, token: &str, out: &Path) {
    let admin = kube::config::Kubeconfig::read_from(admin).expect("the admin kubeconfig");
    let context = admin
        .contexts
        .iter()
        .find(|c| Some(&c.name) == admin.current_context.as_ref())
        .and_then(|c| c.context.as_ref())
        .expect("a current context");
    let cluster = admin
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref())
        .expect("its cluster");
    let mut cluster_json = json!({"server": cluster.server});
    if let Some(ca) = &cluster.certificate_authority {
        cluster_json["certificate-authority"] = json!(ca);
    }
    if let Some(ca) = &cluster.certificate_authority_data {
        cluster_json["certificate-authority-data"] = json!(ca);
    }
    if cluster.insecure_skip_tls_verify == Some(true) {
        cluster_json["insecure-skip-tls-verify"] = json!(true);
    }
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": cluster_json}],
        "users": [{"name": "copyrator", "user": {"token": token}}],
        "contexts": [{"name": "copyrator", "context": {"cluster": "test", "user": "copyrator"}}],
        "current-context": "copyrator",
    });
    // JSON is YAML.
    std::fs::write(out, serde_json::to_string_pretty(&config).unwrap()).unwrap();
}

/// A token of a ServiceAccount (TokenRequest API), valid for an hour.
pub async fn service_account_token(client: &Client, namespace: &str, name: &str) -> String {
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(
            name,
            &PostParams::default(),
            &TokenRequest {
                spec: Some(TokenRequestSpec {
                    audiences: None,
                    expiration_seconds: Some(3600),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("a token for ServiceAccount {namespace}/{name}: {e}"))
        .status
        .and_then(|s| s.token)
        .expect("a token in the TokenRequest status")
}
