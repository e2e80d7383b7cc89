//! copyrator's webhooks in the API server: the e2e ValidatingWebhookConfiguration, waiting
//! until the API server calls them, and AdmissionReviews as the API server sends them (from
//! the reviews captured in `tests/data/`).

use std::{future::Future, sync::OnceLock, time::Duration};

use copyrator::manifests::{self, WebhookOptions, WebhookTarget};
use k8s_openapi::{
    api::{admissionregistration::v1::ValidatingWebhookConfiguration, core::v1::Namespace},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, PostParams},
};
use serde_json::{Value, json};

use super::{env::unique_suffix, wait::eventually};

pub const WEBHOOK_CONFIG_NAME: &str = "copyrator-e2e";

/// Registers (or replaces) the e2e webhook configuration pointing at `base_url`.
pub async fn register_webhooks(client: &Client, base_url: &str, ca: &[u8]) {
    let mut cfg = manifests::webhook_configuration(&WebhookOptions {
        name: WEBHOOK_CONFIG_NAME.into(),
        target: WebhookTarget::Url(base_url.into()),
        ca_bundle: ca.to_vec(),
        exclude_namespaces: vec!["kube-system".into()],
        timeout_seconds: 5,
    });
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    if let Some(existing) = api.get_opt(WEBHOOK_CONFIG_NAME).await.unwrap() {
        cfg.metadata.resource_version = existing.resource_version();
        api.replace(WEBHOOK_CONFIG_NAME, &PostParams::default(), &cfg)
            .await
            .unwrap();
    } else {
        api.create(&PostParams::default(), &cfg).await.unwrap();
    }
}

pub async fn unregister_webhooks(client: &Client) {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let _ = api
        .delete(WEBHOOK_CONFIG_NAME, &DeleteParams::default())
        .await;
}

/// Dry-run namespace creates seen by copyrator's namespaces webhook.
pub(crate) const DRY_RUN_PROBES: &str = "copyrator_admission_requests_total{endpoint=\"namespaces\",operation=\"CREATE\",outcome=\"dry_run\"}";

/// The API server picks webhook configurations up asynchronously: dry-run namespace creates
/// until copyrator counts one more (`probes` reads that count from copyrator's metrics).
pub(crate) async fn wait_for_webhooks<F, Fut>(client: &Client, what: &str, probes: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = f64>,
{
    let api = Api::<Namespace>::all(client.clone());
    let before = probes().await;
    eventually(Duration::from_secs(30), what, || {
        let api = api.clone();
        let probes = &probes;
        async move {
            let ns = Namespace {
                metadata: ObjectMeta {
                    name: Some(format!("webhook-probe-{}", unique_suffix())),
                    ..Default::default()
                },
                ..Default::default()
            };
            let dry_run = PostParams {
                dry_run: true,
                field_manager: None,
            };
            let _ = api.create(&dry_run, &ns).await;
            (probes().await > before).then_some(())
        }
    })
    .await;
}

/// An AdmissionReview of a Namespace CREATE, as the API server sends it: the review captured
/// in `tests/data/review-namespace-create.json`, for namespace `name` with `labels`.
pub fn namespace_create_review(name: &str, labels: Value) -> String {
    static CAPTURED: OnceLock<Value> = OnceLock::new();
    let mut review = CAPTURED
        .get_or_init(|| {
            serde_json::from_str(include_str!("../data/review-namespace-create.json"))
                .expect("tests/data/review-namespace-create.json is JSON")
        })
        .clone();
    let request = &mut review["request"];
    request["uid"] = json!(format!("uid-{name}"));
    request["name"] = json!(name);
    request["namespace"] = json!(name);
    let metadata = &mut request["object"]["metadata"];
    metadata["name"] = json!(name);
    metadata["labels"] = labels;
    review.to_string()
}
