//! AdmissionReview handling, driven through the real router (no network).

use std::time::Duration;

use super::*;
use crate::queue::job::{Awaited, JobKey};
use axum::{body::Body, http::Request};
use futures::StreamExt;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

mod unverified;

fn state() -> AdmissionState {
    let queue = WorkQueue::new(100);
    let metrics = Arc::new(Metrics::new());
    AdmissionState {
        waiters: Waiters::new(Arc::clone(&queue), Arc::clone(&metrics)),
        queue,
        metrics,
        policy: Arc::new(Policy {
            excluded_namespaces: ["kube-system".to_string()].into(),
            trust: crate::tenancy::TrustPolicy {
                trusted_namespaces: crate::tenancy::NamespacePatterns::parse("default").unwrap(),
            },
            ..Default::default()
        }),
        advisor: None,
        gate: None,
        own_username: None,
        namespaces: None,
        api_server_known: false,
        limits: Limits::new(
            64 * 1024,
            Duration::from_millis(200),
            crate::listener::Peers::new(
                crate::listener::PeerLimits {
                    in_flight: 8,
                    in_flight_per_peer: 8,
                    body_bytes: 256 * 1024,
                    body_bytes_per_peer: 256 * 1024,
                    ..Default::default()
                },
                Arc::new(Metrics::new()),
            ),
        ),
    }
}

/// An AdmissionReview exactly as the API server sent one (`tests/data/review-*.json`, captured
/// by scripts/capture-fixtures.sh), with this test's objects and operation in place of the
/// captured ones.
fn review(kind: &str, operation: &str, object: Value, old: Option<Value>) -> Value {
    let captured = match (kind, operation) {
        ("Namespace", "CREATE") => "namespace-create",
        ("Namespace", _) => "namespace-update-label",
        ("Secret", "CREATE") => "secret-create-source",
        ("Secret", "DELETE") => "secret-delete-copy",
        ("Secret", _) => "secret-update-source",
        ("ConfigMap", _) => "configmap-create-source",
        _ => "copyrule-create",
    };
    let path = format!(
        "{}/tests/data/review-{captured}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut review: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect(&path)).unwrap();
    assert_eq!(review["request"]["kind"]["kind"], kind, "{path}");
    let meta = object
        .get("metadata")
        .or_else(|| old.as_ref()?.get("metadata"))
        .cloned()
        .unwrap_or_default();
    let name = meta.get("name").cloned().unwrap_or_default();
    let namespace = match kind {
        "Namespace" => name.clone(),
        _ => meta.get("namespace").cloned().unwrap_or(Value::Null),
    };
    let request = &mut review["request"];
    request["operation"] = operation.into();
    request["name"] = name;
    request["namespace"] = namespace;
    request["object"] = if operation == "DELETE" {
        Value::Null
    } else {
        object
    };
    request["oldObject"] = old.unwrap_or(Value::Null);
    let options = match operation {
        "CREATE" => "CreateOptions",
        "DELETE" => "DeleteOptions",
        _ => "UpdateOptions",
    };
    request["options"]["kind"] = options.into();
    review
}

fn secret(annotations: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": "mysecret", "namespace": "default", "resourceVersion": "41",
            "labels": {"copyrator.io/source": "true"},
            "annotations": annotations
        },
        "type": "Opaque",
        "data": {"password": "c2VjcmV0"}
    })
}

async fn post(state: &AdmissionState, path: &str, body: impl Into<Body>) -> (StatusCode, Value) {
    send(state, path, body, false).await
}

/// Posts `body` as a client `--client-ca` verified (`verified`: the API server), or as anyone.
async fn send(
    state: &AdmissionState,
    path: &str,
    body: impl Into<Body>,
    verified: bool,
) -> (StatusCode, Value) {
    let app = router(state.clone());
    let mut request = Request::post(path)
        .header("content-type", "application/json")
        .body(body.into())
        .unwrap();
    if verified {
        request
            .extensions_mut()
            .insert(crate::listener::VerifiedClient);
    }
    let resp = app.oneshot(request).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn post_review(state: &AdmissionState, path: &str, review: Value) -> (StatusCode, Value) {
    post(state, path, review.to_string()).await
}

#[tokio::test]
async fn response_echoes_the_request_uid_and_allows() {
    let st = state();
    let sent = review("Secret", "CREATE", secret(json!({})), None);
    let (status, body) = post_review(&st, "/admission/sources", sent.clone()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(body["kind"], "AdmissionReview");
    assert_eq!(body["response"]["uid"], sent["request"]["uid"]);
    assert_eq!(body["response"]["allowed"], true);
    assert_eq!(st.queue.depth(), 1);
}

#[tokio::test]
async fn invalid_inline_annotation_is_denied_with_a_message_naming_it() {
    let st = state();
    let obj = secret(json!({"copyrator.io/namespace-selector": "env in prod"}));
    let (status, body) = post_review(
        &st,
        "/admission/sources",
        review("Secret", "UPDATE", obj, Some(secret(json!({})))),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["response"]["allowed"], false);
    let msg = body["response"]["status"]["message"].as_str().unwrap();
    assert!(msg.contains("copyrator.io/namespace-selector"), "{msg}");
    assert!(msg.contains("expected '('"), "{msg}");
    assert_eq!(st.queue.depth(), 0, "a denied change queues nothing");
}

#[tokio::test]
async fn dry_run_is_answered_but_queues_nothing() {
    let st = state();
    let mut r = review(
        "Namespace",
        "CREATE",
        json!({"metadata": {"name": "team-a", "labels": {"secret": "yes"}}}),
        None,
    );
    r["request"]["dryRun"] = json!(true);
    let (status, body) = post_review(&st, "/admission/namespaces", r).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["response"]["allowed"], true);
    assert_eq!(st.queue.depth(), 0);
}

#[tokio::test]
async fn dry_run_still_validates() {
    let st = state();
    let mut r = review(
        "Secret",
        "CREATE",
        secret(json!({"copyrator.io/namespaces": "Not_Valid"})),
        None,
    );
    r["request"]["dryRun"] = json!(true);
    let (_, body) = post_review(&st, "/admission/sources", r).await;
    assert_eq!(body["response"]["allowed"], false);
}

#[tokio::test]
async fn malformed_body_is_a_400_with_a_json_error() {
    let st = state();
    for body in ["{not json", "{\"kind\": \"AdmissionReview\"}", "[]"] {
        let (status, json) = post(&st, "/admission/namespaces", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert!(
            json["error"]
                .as_str()
                .unwrap()
                .starts_with("not an AdmissionReview"),
            "{json}"
        );
    }
}

#[tokio::test]
async fn oversize_body_is_a_413() {
    let st = state();
    let big = "x".repeat(65 * 1024);
    let obj = secret(json!({"pad": big}));
    let (status, json) = post_review(
        &st,
        "/admission/sources",
        review("Secret", "CREATE", obj, None),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(json["error"].is_string());
    assert_eq!(st.queue.depth(), 0);
}

#[tokio::test]
async fn oversize_body_without_a_length_is_a_413_too() {
    let st = state();
    let chunks = (0..70).map(|_| Ok::<_, std::io::Error>(vec![b' '; 1024]));
    let body = Body::from_stream(futures::stream::iter(chunks));
    let (status, _) = post(&st, "/admission/namespaces", body).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn a_body_that_never_ends_is_a_408() {
    let st = state();
    let body = Body::from_stream(futures::stream::pending::<Result<Vec<u8>, std::io::Error>>());
    let started = std::time::Instant::now();
    let (status, json) = post(&st, "/admission/namespaces", body).await;
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(json["error"].as_str().unwrap().contains("not received"));
}

/// Bodies that send a little and stall, as many as reviews may be answered at once and with
/// no length (the worst case the limits once reserved for): they hold only the bytes they sent,
/// and no review's place, so a whole review is still answered.
#[tokio::test]
async fn stalled_bodies_hold_only_the_bytes_they_sent() {
    let st = state();
    let stalled: Vec<_> = (0..8)
        .map(|_| {
            let first = futures::stream::iter([Ok::<_, std::io::Error>(vec![b' '; 1024])]);
            let body = Body::from_stream(first.chain(futures::stream::pending()));
            let st = st.clone();
            tokio::spawn(async move { post(&st, "/admission/sources", body).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let ns = review(
        "Namespace",
        "CREATE",
        json!({"metadata": {"name": "team-a"}}),
        None,
    );
    let (status, json) = post_review(&st, "/admission/namespaces", ns).await;
    assert_eq!(status, StatusCode::OK, "{json}");
    // Cut off at the body timeout.
    for s in stalled {
        assert_eq!(s.await.unwrap().0, StatusCode::REQUEST_TIMEOUT);
    }
}

#[tokio::test]
async fn beyond_its_limits_the_webhook_sheds_load_with_a_503() {
    let st = state();
    let ns = review(
        "Namespace",
        "CREATE",
        json!({"metadata": {"name": "team-a"}}),
        None,
    );
    // Every review slot taken.
    let peer = st.limits.peers.unattached();
    let slots: Vec<_> = (0..8).map(|_| peer.review().unwrap()).collect();
    let (status, json) = post_review(&st, "/admission/namespaces", ns.clone()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        json["error"].as_str().unwrap().contains("reviews"),
        "{json}"
    );
    drop(slots);
    // Every byte of the body budget taken.
    let mut bytes = peer.body_bytes();
    bytes.take(256 * 1024 - 100).unwrap();
    let (status, _) = post_review(&st, "/admission/namespaces", ns.clone()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    drop(bytes);
    let (status, _) = post_review(&st, "/admission/namespaces", ns).await;
    assert_eq!(status, StatusCode::OK);
    let metrics = st.metrics.encode();
    assert!(
        metrics.contains(r#"copyrator_admission_requests_total{endpoint="namespaces",operation="UNKNOWN",outcome="shed"} 2"#),
        "{metrics}"
    );
    for limit in ["peer_in_flight", "peer_body_bytes"] {
        let sample = format!(r#"copyrator_webhook_shed_total{{limit="{limit}"}} 1"#);
        assert!(metrics.contains(&sample), "{sample} in {metrics}");
    }
}

#[tokio::test]
async fn namespace_create_queues_a_job_that_waits_for_the_namespace() {
    let st = state();
    let ns = json!({"metadata": {"name": "team-a", "labels": {"secret": "yes"}}});
    post_review(
        &st,
        "/admission/namespaces",
        review("Namespace", "CREATE", ns, None),
    )
    .await;
    let job = st.queue.pop().await.unwrap();
    assert_eq!(job.key, JobKey::Namespace("team-a".into()));
    assert_eq!(job.awaited, Awaited::Exists);
}

#[tokio::test]
async fn namespace_update_without_label_change_queues_nothing() {
    let st = state();
    let old = json!({"metadata": {"name": "team-a", "resourceVersion": "5", "labels": {"secret": "yes"}}});
    let new = json!({"metadata": {"name": "team-a", "resourceVersion": "5", "labels": {"secret": "yes"}, "annotations": {"a": "b"}}});
    post_review(
        &st,
        "/admission/namespaces",
        review("Namespace", "UPDATE", new, Some(old.clone())),
    )
    .await;
    assert_eq!(st.queue.depth(), 0);
    let relabelled = json!({"metadata": {"name": "team-a", "resourceVersion": "5", "labels": {}}});
    post_review(
        &st,
        "/admission/namespaces",
        review("Namespace", "UPDATE", relabelled, Some(old)),
    )
    .await;
    let job = st.queue.pop().await.unwrap();
    assert_eq!(job.awaited, Awaited::ChangedFrom("5".into()));
}

#[tokio::test]
async fn consent_change_queues_the_namespace_and_bad_entries_are_warned_about() {
    let st = state();
    let old = json!({"metadata": {"name": "istio", "resourceVersion": "5"}});
    let new = json!({"metadata": {"name": "istio", "resourceVersion": "5",
        "annotations": {"copyrator.io/accept-from": "tenant-a, Bad Entry"}}});
    let (_, body) = post_review(
        &st,
        "/admission/namespaces",
        review("Namespace", "UPDATE", new, Some(old)),
    )
    .await;
    assert_eq!(body["response"]["allowed"], true, "never denied");
    assert_eq!(
        body["response"]["warnings"],
        json!([
            "copyrator.io/accept-from: \"Bad Entry\" is not a namespace name or a pattern with '*'; it is ignored"
        ])
    );
    let job = st.queue.pop().await.unwrap();
    assert_eq!(job.key, JobKey::Namespace("istio".into()));
}

#[tokio::test]
async fn untrusted_source_is_warned_that_its_targets_must_consent() {
    let st = state();
    let mut obj = secret(json!({"copyrator.io/namespace-selector": "!no-such-label"}));
    obj["metadata"]["namespace"] = json!("tenant-a");
    let sent = review("Secret", "CREATE", obj, None);
    let (_, body) = send(&st, "/admission/sources", sent.to_string(), true).await;
    assert_eq!(body["response"]["allowed"], true, "admission is a hint");
    let warnings = body["response"]["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0]
            .as_str()
            .unwrap()
            .starts_with("tenant-a is not a namespace copyrator trusts"),
        "{warnings:?}"
    );

    // A trusted source (`default`) hears nothing.
    let trusted = review(
        "Secret",
        "CREATE",
        secret(json!({"copyrator.io/namespace-selector": "!no-such-label"})),
        None,
    );
    let (_, body) = send(&st, "/admission/sources", trusted.to_string(), true).await;
    assert!(body["response"].get("warnings").is_none(), "{body}");
    // Anyone else hears the same about both (SPEC §9.8).
    let (_, body) = post_review(&st, "/admission/sources", sent).await;
    assert!(body["response"].get("warnings").is_none(), "{body}");
}

#[tokio::test]
async fn source_update_waits_for_the_new_version_and_delete_for_the_removal() {
    let st = state();
    let mut new = secret(json!({}));
    new["data"]["password"] = json!("bmV3");
    post_review(
        &st,
        "/admission/sources",
        review("Secret", "UPDATE", new, Some(secret(json!({})))),
    )
    .await;
    let job = st.queue.pop().await.unwrap();
    assert_eq!(job.awaited, Awaited::ChangedFrom("41".into()));
    st.queue.done(&job.key);
    post_review(
        &st,
        "/admission/sources",
        review("Secret", "DELETE", Value::Null, Some(secret(json!({})))),
    )
    .await;
    // The name comes from the request, not the (absent) object.
    let mut r = review("Secret", "DELETE", Value::Null, Some(secret(json!({}))));
    r["request"]["name"] = json!("mysecret");
    r["request"]["namespace"] = json!("default");
    post_review(&st, "/admission/sources", r).await;
    let job = st.queue.pop().await.unwrap();
    assert_eq!(job.awaited, Awaited::Gone);
}

#[tokio::test]
async fn copyrators_own_copy_updates_queue_nothing() {
    let st = state();
    let old = secret(json!({}));
    let mut new = secret(json!({}));
    new["data"]["password"] = json!("ZWRpdGVk");
    let mut r = review("Secret", "UPDATE", new.clone(), Some(old.clone()));
    r["request"]["options"] = json!({"kind": "UpdateOptions", "fieldManager": "copyrator"});
    post_review(&st, "/admission/copies", r).await;
    assert_eq!(st.queue.depth(), 0);
    let mut r = review("Secret", "UPDATE", new, Some(old));
    r["request"]["options"] = json!({"kind": "UpdateOptions", "fieldManager": "kubectl-edit"});
    post_review(&st, "/admission/copies", r).await;
    assert_eq!(
        st.queue.pop().await.unwrap().key,
        JobKey::Copy(crate::model::ObjectKey::new(
            crate::model::Kind::Secret,
            "default",
            "mysecret"
        ))
    );
}

#[tokio::test]
async fn invalid_copy_rule_is_denied_naming_the_field() {
    let st = state();
    let rule = json!({
        "apiVersion": "copyrator.io/v1alpha1", "kind": "CopyRule",
        "metadata": {"name": "r"},
        "spec": {
            "kind": "ConfigMap", "sourceNamespace": "platform",
            "sourceName": "a", "sourceSelector": {"matchLabels": {"x": "y"}},
            "namespaces": ["dest"]
        }
    });
    let (_, body) = post_review(
        &st,
        "/admission/rules",
        review("CopyRule", "CREATE", rule.clone(), None),
    )
    .await;
    assert_eq!(body["response"]["allowed"], false);
    let msg = body["response"]["status"]["message"].as_str().unwrap();
    assert!(msg.contains("spec.sourceName"), "{msg}");

    let mut valid = rule;
    valid["spec"]
        .as_object_mut()
        .unwrap()
        .remove("sourceSelector");
    let (_, body) = post_review(
        &st,
        "/admission/rules",
        review("CopyRule", "CREATE", valid, None),
    )
    .await;
    assert_eq!(body["response"]["allowed"], true);
    let job = st.queue.pop().await.unwrap();
    assert_eq!(job.key, JobKey::Rule("r".into()));
    assert!(job.full_scan);
}

#[tokio::test]
async fn metrics_count_outcomes() {
    let st = state();
    post(&st, "/admission/namespaces", "garbage").await;
    post_review(
        &st,
        "/admission/sources",
        review("Secret", "CREATE", secret(json!({})), None),
    )
    .await;
    let text = st.metrics.encode();
    assert!(text.contains("copyrator_admission_requests_total{endpoint=\"namespaces\",operation=\"UNKNOWN\",outcome=\"bad_request\"} 1"), "{text}");
    assert!(text.contains("copyrator_admission_requests_total{endpoint=\"sources\",operation=\"CREATE\",outcome=\"allowed\"} 1"), "{text}");
}

#[tokio::test]
async fn every_captured_review_is_answered_as_sent() {
    // The reviews the API server really sent, posted byte for byte to their endpoints.
    let cases = [
        ("namespace-create", "/admission/namespaces", 1),
        ("namespace-update-label", "/admission/namespaces", 1),
        ("secret-create-source", "/admission/sources", 1),
        ("secret-update-source", "/admission/sources", 1),
        ("configmap-create-source", "/admission/sources", 1),
        // The webhook's objectSelector sends copies only; the job reads what is persisted.
        ("secret-delete-copy", "/admission/copies", 1),
        ("copyrule-create", "/admission/rules", 1),
    ];
    for (captured, path, jobs) in cases {
        let st = state();
        let file = format!(
            "{}/tests/data/review-{captured}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(&file).unwrap();
        let uid = serde_json::from_slice::<Value>(&bytes).unwrap()["request"]["uid"].clone();
        let (status, body) = post(&st, path, bytes).await;
        assert_eq!(status, StatusCode::OK, "{captured}");
        assert_eq!(body["response"]["uid"], uid, "{captured}");
        assert_eq!(body["response"]["allowed"], true, "{captured}: {body}");
        assert_eq!(st.queue.depth(), jobs, "{captured}: jobs queued");
    }
}

#[tokio::test]
async fn the_pull_secret_annotation_is_denied_on_secrets_kubelets_cannot_pull_with() {
    let st = state();
    let mut opaque = secret(
        json!({"copyrator.io/image-pull-secret": "true", "copyrator.io/namespaces": "team-a"}),
    );
    let (_, body) = post_review(
        &st,
        "/admission/sources",
        review("Secret", "CREATE", opaque.clone(), None),
    )
    .await;
    assert_eq!(body["response"]["allowed"], false, "{body}");
    let msg = body["response"]["status"]["message"].as_str().unwrap();
    assert!(msg.contains("copyrator.io/image-pull-secret"), "{msg}");
    assert!(msg.contains("kubernetes.io/dockerconfigjson"), "{msg}");
    assert!(msg.contains("type Opaque"), "{msg}");

    opaque["type"] = json!("kubernetes.io/dockerconfigjson");
    let (_, body) = post_review(
        &st,
        "/admission/sources",
        review("Secret", "CREATE", opaque, None),
    )
    .await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
}

#[tokio::test]
async fn without_a_gate_a_pod_is_admitted_unchanged() {
    let st = state();
    let file = format!(
        "{}/tests/data/review-pod-create.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let (status, body) = post(&st, "/admission/pods", std::fs::read(&file).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["response"]["allowed"], true);
    assert!(body["response"].get("patch").is_none(), "{body}");
    assert_eq!(st.queue.depth(), 0, "the gate queues nothing");
}
