//! The admission webhooks (SPEC §6.1): AdmissionReview v1 over HTTPS. Each endpoint turns a
//! review into a verdict (allow, or deny invalid copyrator configuration) and at most one job
//! for the queue. Handlers never wait for the work: they answer in microseconds, and dryRun
//! requests cause no work (SPEC §4.7).

pub mod advice;
mod copies;
mod namespaces;
mod rules;
mod sources;

use std::{sync::Arc, time::Instant};

use axum::{
    Json, Router,
    body::Bytes,
    extract::{DefaultBodyLimit, State, rejection::BytesRejection},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::post,
};
use kube::core::{
    DynamicObject,
    admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation},
};
use serde_json::json;
use tracing::Instrument;

use crate::{metrics::Metrics, plan::Policy, queue::Job, queue::WorkQueue, rules::Rule};

/// Default request body limit: a 1 MiB Secret UPDATE review carries old and new objects,
/// base64-encoded, ~2.7 MB.
pub const DEFAULT_BODY_LIMIT: usize = 6 * 1024 * 1024;

/// The webhook endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Namespaces,
    Sources,
    Copies,
    Rules,
}

impl Endpoint {
    pub const ALL: [Endpoint; 4] = [
        Endpoint::Namespaces,
        Endpoint::Sources,
        Endpoint::Copies,
        Endpoint::Rules,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Endpoint::Namespaces => "namespaces",
            Endpoint::Sources => "sources",
            Endpoint::Copies => "copies",
            Endpoint::Rules => "rules",
        }
    }

    /// URL path of the endpoint.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Namespaces => "/admission/namespaces",
            Endpoint::Sources => "/admission/sources",
            Endpoint::Copies => "/admission/copies",
            Endpoint::Rules => "/admission/rules",
        }
    }
}

/// What an endpoint decided about one request.
#[derive(Debug, Default)]
pub struct Verdict {
    /// `Some(message)`: deny the request with this message.
    pub deny: Option<String>,
    /// Work to queue (ignored for dryRun requests).
    pub job: Option<Job>,
    /// Shown to the user by kubectl, whatever the verdict.
    pub warnings: Vec<String>,
    /// An inline rule to look at more closely for warnings ([`advice`]).
    pub advise: Option<Box<Rule>>,
}

impl Verdict {
    fn allow() -> Self {
        Self::default()
    }

    fn job(job: Job) -> Self {
        Self {
            job: Some(job),
            ..Self::default()
        }
    }

    fn deny(message: String) -> Self {
        Self {
            deny: Some(message),
            ..Self::default()
        }
    }
}

/// Shared state of the admission handlers.
#[derive(Clone)]
pub struct AdmissionState {
    pub queue: Arc<WorkQueue>,
    pub metrics: Arc<Metrics>,
    /// Exclusions and trust, as the workers apply them.
    pub policy: Arc<Policy>,
    /// Looks up what warnings about a source need; `None`: general warnings only.
    pub advisor: Option<Arc<advice::Advisor>>,
}

/// The router for all admission endpoints.
pub fn router(state: AdmissionState, body_limit: usize) -> Router {
    let mut router = Router::new();
    for endpoint in Endpoint::ALL {
        router = router.route(
            endpoint.path(),
            post(
                move |state: State<AdmissionState>, body: Result<Bytes, BytesRejection>| {
                    handle(endpoint, state, body)
                },
            ),
        );
    }
    router
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

/// A JSON error body for requests that are not AdmissionReviews at all.
fn error(status: StatusCode, message: String) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

fn operation_name(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

async fn handle(
    endpoint: Endpoint,
    State(state): State<AdmissionState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let started = Instant::now();
    let body = match body {
        Ok(b) => b,
        Err(rejection) => {
            state.metrics.observe_admission(
                endpoint.name(),
                "UNKNOWN",
                "bad_request",
                started.elapsed(),
            );
            return error(rejection.status(), rejection.body_text());
        }
    };
    let request: AdmissionRequest<DynamicObject> =
        match serde_json::from_slice::<AdmissionReview<DynamicObject>>(&body)
            .map_err(|e| e.to_string())
            .and_then(|review| {
                review
                    .try_into()
                    .map_err(|_| "AdmissionReview has no request".to_string())
            }) {
            Ok(r) => r,
            Err(msg) => {
                state.metrics.observe_admission(
                    endpoint.name(),
                    "UNKNOWN",
                    "bad_request",
                    started.elapsed(),
                );
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("not an AdmissionReview: {msg}"),
                );
            }
        };
    let operation = operation_name(&request.operation);
    // Names and kinds only: never the objects, which may hold Secret data.
    let span = tracing::info_span!(
        "admission",
        endpoint = endpoint.name(),
        uid = %request.uid,
        kind = %request.kind.kind,
        namespace = request.namespace.as_deref().unwrap_or(""),
        name = %request.name,
        operation,
        dry_run = request.dry_run,
    );
    async {
        let mut verdict = match endpoint {
            Endpoint::Namespaces => namespaces::review(&request),
            Endpoint::Sources => sources::review(&request, &state.policy),
            Endpoint::Copies => copies::review(&request),
            Endpoint::Rules => rules::review(&request),
        };
        if let Some(rule) = verdict.advise.take() {
            match &state.advisor {
                Some(advisor) => verdict.warnings.extend(advisor.warnings(&rule).await),
                None => verdict.warnings.extend(advice::advise(
                    &rule,
                    &state.policy,
                    &Default::default(),
                )),
            }
        }
        let mut response = AdmissionResponse::from(&request);
        if !verdict.warnings.is_empty() {
            response.warnings = Some(std::mem::take(&mut verdict.warnings));
        }
        let outcome = if let Some(message) = verdict.deny {
            tracing::info!(%message, "denied");
            response = response.deny(message);
            "denied"
        } else if request.dry_run {
            "dry_run"
        } else {
            if let Some(job) = verdict.job {
                tracing::debug!(job = %job.key, "queued");
                crate::worker::enqueue(&state.queue, &state.metrics, job);
            }
            "allowed"
        };
        state
            .metrics
            .observe_admission(endpoint.name(), operation, outcome, started.elapsed());
        Json(response.into_review()).into_response()
    }
    .instrument(span)
    .await
}

/// Helpers shared by the endpoint modules.
pub(crate) mod util {
    use std::collections::BTreeMap;

    use kube::core::DynamicObject;
    use serde_json::Value;

    pub fn labels(obj: Option<&DynamicObject>) -> BTreeMap<String, String> {
        obj.and_then(|o| o.metadata.labels.clone())
            .unwrap_or_default()
    }

    pub fn resource_version(obj: Option<&DynamicObject>) -> Option<String> {
        obj.and_then(|o| o.metadata.resource_version.clone())
    }

    /// The fields a copy carries, for "did anything relevant change" comparisons.
    pub fn payload(obj: Option<&DynamicObject>) -> [Option<&Value>; 4] {
        let field = |k: &str| obj.and_then(|o| o.data.get(k));
        [
            field("type"),
            field("data"),
            field("binaryData"),
            field("immutable"),
        ]
    }

    /// Whether an UPDATE changed anything copyrator cares about: payload, labels,
    /// annotations, or the start of a deletion.
    pub fn relevant_change(old: Option<&DynamicObject>, new: Option<&DynamicObject>) -> bool {
        let meta = |o: Option<&DynamicObject>| {
            o.map(|o| {
                (
                    o.metadata.labels.clone(),
                    o.metadata.annotations.clone(),
                    o.metadata.deletion_timestamp.is_some(),
                )
            })
        };
        payload(old) != payload(new) || meta(old) != meta(new)
    }
}

#[cfg(test)]
mod tests;
