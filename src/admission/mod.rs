//! The admission webhooks (SPEC §6.1): AdmissionReview v1 over HTTPS. Each endpoint turns a
//! review into a verdict (allow, or deny invalid copyrator configuration) and at most one job
//! for the queue. Handlers never wait for the work: they answer in microseconds, and dryRun
//! requests cause no work (SPEC §4.7). The one exception is the Pod gate (`pods`, SPEC §10),
//! which answers once the Pod's namespace holds its copies. `read_only` denies edits of
//! read-only copies by anyone but copyrator (SPEC §4 item 11).

pub mod advice;
pub mod caller;
mod certificates;
pub mod checks;
mod copies;
mod grants;
mod namespaces;
pub mod pods;
pub mod read_only;
pub mod review;
mod rules;
mod sources;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    body::Bytes,
    extract::{Request, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::post,
};
use http_body_util::BodyExt;
use serde_json::json;
use tracing::Instrument;

use caller::Caller;
use checks::Check;
use review::Operation;

use crate::{
    freshness::waiters::Waiters,
    gate::PodGate,
    listener::{
        Peer, Peers,
        budget::{BodyBytes, Limit},
    },
    metrics::{LimitLabels, Metrics},
    plan::Policy,
    queue::{WorkQueue, job::Job},
    rules::Rule,
};

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
    /// Mutating: Pod CREATE.
    Pods,
    /// UPDATE and DELETE of read-only copies.
    ReadOnly,
}

impl Endpoint {
    pub const ALL: [Endpoint; 6] = [
        Endpoint::Namespaces,
        Endpoint::Sources,
        Endpoint::Copies,
        Endpoint::Rules,
        Endpoint::Pods,
        Endpoint::ReadOnly,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Endpoint::Namespaces => "namespaces",
            Endpoint::Sources => "sources",
            Endpoint::Copies => "copies",
            Endpoint::Rules => "rules",
            Endpoint::Pods => "pods",
            Endpoint::ReadOnly => "read-only",
        }
    }

    /// URL path of the endpoint.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Namespaces => "/admission/namespaces",
            Endpoint::Sources => "/admission/sources",
            Endpoint::Copies => "/admission/copies",
            Endpoint::Rules => "/admission/rules",
            Endpoint::Pods => "/admission/pods",
            Endpoint::ReadOnly => "/admission/read-only",
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
    /// A Pod to hold until its namespace's copies exist ([`pods`]).
    pub pod: Option<pods::PodCheck>,
    /// A source being opted in: warn when its namespace is at its cap of sources.
    pub opted_in: Option<crate::model::ObjectKey>,
    /// A CopyRule copying a Secret's data into ConfigMaps: deny it if its sources hold
    /// anything but certificates now (`certificates`).
    pub check_certificates: Option<Box<Rule>>,
    /// A CopyRule copying RBAC objects: deny it if its author may not grant what it copies
    /// (`grants`).
    pub check_grant: Option<grants::GrantCheck>,
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
    pub limits: Arc<Limits>,
    /// Where jobs wait for the changes under review to be persisted.
    pub waiters: Arc<Waiters>,
    /// The Pod gate; `None`: Pods are admitted unchanged.
    pub gate: Option<Arc<PodGate>>,
    /// copyrator's own username (`--own-username`): the one identity that may change a
    /// read-only copy. `None`: unknown, read-only copies are not enforced.
    pub own_username: Option<Arc<str>>,
    /// Where the read-only webhook learns, without an API call, whether a namespace is being
    /// deleted; `None`: it never knows (deletions are allowed).
    pub namespaces: Option<crate::cluster::Cluster>,
    /// The API server can be told apart from other callers (`--client-ca` or
    /// `--api-server-cidrs`): reviews of anyone else queue no work ([`Caller::queues_work`]).
    pub api_server_known: bool,
}

impl AdmissionState {
    /// What copyrator's namespace index says about `name`.
    fn namespace_state(&self, name: &str) -> read_only::NamespaceState {
        use read_only::NamespaceState;
        let held = self.namespaces.as_ref().and_then(|c| {
            c.namespace_index()
                .read(|by_name| by_name.get(name).map(|n| n.terminating))
        });
        match held {
            Some(Some(false)) => NamespaceState::Active,
            Some(Some(true)) => NamespaceState::Terminating,
            _ => NamespaceState::Unknown,
        }
    }
}

/// What one request may take of the webhook server (SPEC §6.1): these are settings with
/// defaults, not accidents of a library's defaults. What each client address may hold at once
/// is counted by `peers`.
#[derive(Debug)]
pub struct Limits {
    /// Largest request body.
    pub max_body: usize,
    /// Time from a request's headers to its body's last byte; beyond, 408.
    pub request_timeout: Duration,
    /// Reviews being answered and body bytes held, per client address and in all.
    pub peers: Arc<Peers>,
}

impl Limits {
    pub fn new(max_body: usize, request_timeout: Duration, peers: Arc<Peers>) -> Arc<Self> {
        Arc::new(Self {
            max_body,
            request_timeout,
            peers,
        })
    }
}

/// The router for all admission endpoints.
pub fn router(state: AdmissionState) -> Router {
    let mut router = Router::new();
    for endpoint in Endpoint::ALL {
        router = router.route(
            endpoint.path(),
            post(move |state: State<AdmissionState>, request: Request| {
                handle(endpoint, state, request)
            }),
        );
    }
    router.with_state(state)
}

/// A JSON error body for requests that are not answered with a review.
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

/// Why a request is answered with an error instead of a review.
struct Refused {
    status: StatusCode,
    outcome: &'static str,
    message: String,
    /// The limit a 503 met.
    limit: Option<Limit>,
}

impl Refused {
    fn new(status: StatusCode, outcome: &'static str, message: String) -> Self {
        Self {
            status,
            outcome,
            message,
            limit: None,
        }
    }

    fn shed(limit: Limit) -> Self {
        let message = match limit {
            Limit::PeerInFlight => {
                "copyrator is answering as many reviews from this address as it allows at once; try again"
            }
            Limit::InFlight => {
                "copyrator is answering as many reviews as it allows at once; try again"
            }
            Limit::PeerBodyBytes => {
                "copyrator is receiving as many bytes from this address as it allows at once; try again"
            }
            Limit::BodyBytes => {
                "copyrator is receiving as many bytes as it allows at once; try again"
            }
        };
        Self {
            limit: Some(limit),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "shed", message.into())
        }
    }

    fn too_large(max_body: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!("request body over the limit of {max_body} bytes"),
        )
    }
}

/// Receives the body within the limits, counting its bytes against its address as they
/// arrive (a body that stalls holds only what it sent); the bytes stay counted until the
/// returned tally drops.
async fn receive(
    limits: &Limits,
    peer: &Peer,
    request: Request,
) -> Result<(Bytes, BodyBytes), Refused> {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limits.max_body) {
        return Err(Refused::too_large(limits.max_body));
    }
    let mut tally = peer.body_bytes();
    let mut body = request.into_body();
    let deadline = tokio::time::Instant::now() + limits.request_timeout;
    // One frame is the whole body as the API server sends small reviews: kept without a copy.
    let mut first: Option<Bytes> = None;
    let mut rest: Vec<u8> = Vec::new();
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => {
                return Err(Refused::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "timeout",
                    format!(
                        "request body not received within {:?}",
                        limits.request_timeout
                    ),
                ));
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(Refused::new(
                    StatusCode::BAD_REQUEST,
                    "bad_request",
                    format!("reading the request body: {e}"),
                ));
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        if tally.held() + data.len() > limits.max_body {
            return Err(Refused::too_large(limits.max_body));
        }
        tally.take(data.len()).map_err(Refused::shed)?;
        match &first {
            None => first = Some(data),
            Some(head) => {
                if rest.is_empty() {
                    rest.extend_from_slice(head);
                }
                rest.extend_from_slice(&data);
            }
        }
    }
    let body = if rest.is_empty() {
        first.unwrap_or_default()
    } else {
        Bytes::from(rest)
    };
    Ok((body, tally))
}

/// One review: received within the limits, parsed, answered by `endpoint` (in [`answer`]),
/// and counted.
async fn handle(
    endpoint: Endpoint,
    State(state): State<AdmissionState>,
    request: Request,
) -> Response {
    let started = Instant::now();
    let caller = match request
        .extensions()
        .get::<crate::listener::VerifiedClient>()
    {
        Some(_) => Caller::Verified,
        None => Caller::Unverified,
    };
    let refuse = |refused: Refused| {
        if let Some(limit) = refused.limit {
            state
                .metrics
                .webhook_shed
                .get_or_create(&LimitLabels {
                    limit: limit.metric_label(),
                })
                .inc();
        }
        state.metrics.observe_admission(
            endpoint.name(),
            "UNKNOWN",
            refused.outcome,
            started.elapsed(),
        );
        error(refused.status, refused.message)
    };
    let peer = match request.extensions().get::<Peer>() {
        Some(peer) => peer.clone(),
        None => state.limits.peers.unattached(),
    };
    let (body, _bytes) = match receive(&state.limits, &peer, request).await {
        Ok(b) => b,
        Err(refused) => return refuse(refused),
    };
    // Counted only now that the whole body is in: a stalled body holds no review's place.
    let _review = match peer.review() {
        Ok(permit) => permit,
        Err(limit) => return refuse(Refused::shed(limit)),
    };
    let not_a_review =
        |why: String| Refused::new(StatusCode::BAD_REQUEST, "bad_request", why.to_string());
    let review: review::Review = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return refuse(not_a_review(format!("not an AdmissionReview: {e}"))),
    };
    let api_version = review.api_version;
    let Some(request) = review.request else {
        return refuse(not_a_review(
            "not an AdmissionReview: it has no request".into(),
        ));
    };
    // Names and kinds only: never the objects, which may hold Secret data.
    let span = tracing::info_span!(
        "admission",
        endpoint = endpoint.name(),
        uid = %request.uid,
        kind = %request.kind.kind,
        namespace = request.namespace.as_deref().unwrap_or(""),
        name = %request.name,
        operation = operation_name(&request.operation),
        dry_run = request.is_dry_run(),
    );
    let response = answer(endpoint, &state, caller, &request, started)
        .instrument(span)
        .await;
    Json(response.into_review(api_version)).into_response()
}

/// The answer to a review: `endpoint`'s verdict, with what only a look at the cluster adds
/// ([`look`]), the Pod gate's wait and patch; the verdict's work queued.
async fn answer(
    endpoint: Endpoint,
    state: &AdmissionState,
    caller: Caller,
    request: &review::Request<'_>,
    started: Instant,
) -> review::Response {
    let mut verdict = match endpoint {
        Endpoint::Namespaces => namespaces::review(request),
        Endpoint::Sources => sources::review(request, &state.policy, caller),
        Endpoint::Copies => copies::review(request),
        Endpoint::Rules => rules::review(request, &state.policy, caller),
        Endpoint::Pods => pods::review(request, caller),
        Endpoint::ReadOnly => {
            read_only::review(request, state.own_username.as_deref(), caller, |ns| {
                state.namespace_state(ns)
            })
        }
    };
    // The reads some reviews make (advice, the certificate check, the Pod gate) are boxed:
    // inline, their state would make every review's future several KiB larger, and the
    // router moves that future a few times per review (seen as memcpy in callgrind).
    look(state, caller, &mut verdict).await;
    let mut response = review::Response::allow(&request.uid);
    response.warnings = std::mem::take(&mut verdict.warnings);
    if let (Some(check), Some(gate)) = (verdict.pod.take(), &state.gate) {
        let (outcome, ready) = Box::pin(gate.check(&check.namespace, request.is_dry_run())).await;
        tracing::debug!(outcome = outcome.as_str(), "Pod gate");
        if let Some(patch) = ready.and_then(|r| pods::patch(&check, &r)) {
            response.patch = Some(patch);
            response.patch_type = Some("JSONPatch");
        }
    }
    let outcome = if let Some(message) = verdict.deny {
        tracing::info!(%message, "denied");
        response = response.deny(message);
        "denied"
    } else if request.is_dry_run() {
        "dry_run"
    } else {
        match verdict.job {
            Some(job) if caller.queues_work(state.api_server_known) => {
                tracing::debug!(job = %job.key, "queued");
                state.waiters.enqueue_admitted(&state.metrics, job);
            }
            Some(job) => {
                tracing::debug!(job = %job.key, "not the API server's review: nothing queued");
                state.metrics.admission_unqueued.inc();
            }
            None => {}
        }
        "allowed"
    };
    let operation = operation_name(&request.operation);
    state
        .metrics
        .observe_admission(endpoint.name(), operation, outcome, started.elapsed());
    response
}

/// What the verdict asks to be looked up in the cluster, for the callers the checks look for
/// ([`checks`]); anyone else gets each check's warning instead, when it has one.
async fn look(state: &AdmissionState, caller: Caller, verdict: &mut Verdict) {
    let unchecked = |check: Check| check.unchecked_warning().map(String::from);
    if let (Some(key), Some(advisor)) = (verdict.opted_in.take(), &state.advisor) {
        verdict.warnings.extend(advisor.source_count_warning(&key));
    }
    if let Some(rule) = verdict.advise.take() {
        match &state.advisor {
            Some(advisor) => verdict
                .warnings
                .extend(Box::pin(advisor.warnings(&rule)).await),
            None => {
                verdict
                    .warnings
                    .extend(advice::advise(&rule, &state.policy, &Default::default()))
            }
        }
    }
    if let (Some(rule), Some(advisor)) = (verdict.check_certificates.take(), &state.advisor) {
        // Reading the sources' content answers "does this key hold only certificates?".
        // Anyone else learns it at apply time, in the rule's status, which only a CopyRule's
        // readers see.
        if Check::Certificates.looks(caller) {
            if let Some(denial) = Box::pin(advisor.certificate_refusal(&rule)).await {
                verdict.deny = Some(denial);
            }
        } else if certificates::needs_check(&rule) {
            verdict.warnings.extend(unchecked(Check::Certificates));
        }
    }
    if let (Some(check), Some(advisor)) = (verdict.check_grant.take(), &state.advisor) {
        // Who may grant what is the API server's to say, about the user it authenticated
        // (SPEC §9.10).
        if Check::Grant.looks(caller) {
            if let Some(denial) = Box::pin(advisor.grant_refusal(&check)).await {
                verdict.deny = Some(denial);
            }
        } else {
            verdict.warnings.extend(unchecked(Check::Grant));
        }
    }
}

#[cfg(test)]
mod tests;
