//! copyrator's webhooks in the API server: the e2e Validating- and MutatingWebhookConfiguration
//! (the Pod gate), waiting until the API server calls them, and AdmissionReviews as the API
//! server sends them (from the reviews captured in `tests/data/`).

use std::{future::Future, sync::OnceLock, time::Duration};

use copyrator::manifests::{self, WebhookOptions, WebhookTarget};
use k8s_openapi::{
    api::{
        admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration},
        core::v1::Namespace,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, PostParams},
};
use serde_json::{Value, json};

use super::{env::unique_suffix, wait::eventually};

pub const WEBHOOK_CONFIG_NAME: &str = "copyrator-e2e";

/// Registers (or replaces) the e2e webhook configurations, both pointing at `base_url`.
pub async fn register_webhooks(client: &Client, base_url: &str, ca: &[u8]) {
    register_split(client, (base_url, ca), (base_url, ca)).await;
}

/// The options of the e2e webhook configurations, pointing at `base_url`.
pub fn webhook_options(base_url: &str, ca: &[u8]) -> WebhookOptions {
    WebhookOptions {
        name: WEBHOOK_CONFIG_NAME.into(),
        target: WebhookTarget::Url(base_url.into()),
        ca_bundle: ca.to_vec(),
        exclude_namespaces: vec!["kube-system".into()],
        timeout_seconds: 5,
    }
}

/// Registers the validating webhooks pointing at one copyrator and the Pod gate at another,
/// each `(base URL, CA)`: the replica that sees a Namespace need not be the one that admits its
/// Pods.
pub async fn register_split(client: &Client, validating: (&str, &[u8]), pods: (&str, &[u8])) {
    let cfg = manifests::webhook_configuration(&webhook_options(validating.0, validating.1));
    apply(
        &Api::<ValidatingWebhookConfiguration>::all(client.clone()),
        cfg,
    )
    .await;
    register_pod_gate(client, pods.0, pods.1).await;
}

/// Registers (or replaces) the Pod gate's configuration alone, pointing at `base_url`.
pub async fn register_pod_gate(client: &Client, base_url: &str, ca: &[u8]) {
    let cfg = manifests::pod_gate_configuration(&webhook_options(base_url, ca));
    apply(
        &Api::<MutatingWebhookConfiguration>::all(client.clone()),
        cfg,
    )
    .await;
}

async fn apply<K>(api: &Api<K>, mut cfg: K)
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    // Tests running at once register the same configuration: a write that lost the race to
    // another (409 Conflict on replace or create) reads the winner and tries again.
    for _ in 0..20 {
        let written = match api.get_opt(WEBHOOK_CONFIG_NAME).await.unwrap() {
            Some(existing) => {
                cfg.meta_mut().resource_version = existing.resource_version();
                api.replace(WEBHOOK_CONFIG_NAME, &PostParams::default(), &cfg)
                    .await
                    .map(|_| ())
            }
            None => {
                cfg.meta_mut().resource_version = None;
                api.create(&PostParams::default(), &cfg).await.map(|_| ())
            }
        };
        match written {
            Ok(()) => return,
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(e) => panic!("registering {WEBHOOK_CONFIG_NAME}: {e}"),
        }
    }
    panic!("registering {WEBHOOK_CONFIG_NAME}: conflicts 20 times in a row");
}

/// Removes the Pod gate's configuration alone (the validating webhooks stay).
pub async fn unregister_pod_gate(client: &Client) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let _ = api
        .delete(WEBHOOK_CONFIG_NAME, &DeleteParams::default())
        .await;
}

pub async fn unregister_webhooks(client: &Client) {
    let dp = DeleteParams::default();
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let _ = api.delete(WEBHOOK_CONFIG_NAME, &dp).await;
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let _ = api.delete(WEBHOOK_CONFIG_NAME, &dp).await;
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
            serde_json::from_str(include_str!("../../data/review-namespace-create.json"))
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

/// An AdmissionReview of the CREATE of Secret `ns/name` opted in as a source with
/// `annotations`, as the API server sends it (`tests/data/review-secret-create-source.json`).
pub fn source_create_review(ns: &str, name: &str, annotations: Value) -> Value {
    static CAPTURED: OnceLock<Value> = OnceLock::new();
    let mut review = CAPTURED
        .get_or_init(|| {
            serde_json::from_str(include_str!("../../data/review-secret-create-source.json"))
                .expect("tests/data/review-secret-create-source.json is JSON")
        })
        .clone();
    let request = &mut review["request"];
    request["name"] = json!(name);
    request["namespace"] = json!(ns);
    let meta = &mut request["object"]["metadata"];
    meta["name"] = json!(name);
    meta["namespace"] = json!(ns);
    meta["labels"] = json!({"copyrator.io/source": "true"});
    meta["annotations"] = annotations;
    review
}
