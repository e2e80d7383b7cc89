//! In-process microbenchmarks (criterion): the admission handler and the planner.
//! `cargo bench --bench micro`

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use axum::{body::Body, http::Request};
use copyrator::{
    admission::{AdmissionState, Limits, router},
    cluster::{ApiLimits, Cluster, ratelimit::RateLimiter},
    content::{DesiredCopy, source_hash},
    freshness::{feed::Feed, ready::Ready},
    gate::PodGate,
    listener::{PeerLimits, Peers},
    marks,
    metrics::Metrics,
    model::{Kind, NamespaceInfo, ObjectKey, Payload, SourceInfo},
    plan::{Contents, Existing, ManagedCopy, Policy, Scope, World, plan},
    queue::WorkQueue,
    report::events::Events,
    rules::Rule,
    sync::context::{Context, SyncSettings},
    tenancy::TrustPolicy,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use tower::ServiceExt;

/// A Secret UPDATE review as the API server sends it (`tests/data`, captured by
/// scripts/capture-fixtures.sh), its object carrying a 1.4 kB payload and a set-based selector.
fn secret_review() -> Vec<u8> {
    let mut review: serde_json::Value = serde_json::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/review-secret-update-source.json"
    )))
    .unwrap();
    let request = &mut review["request"];
    for object in ["object", "oldObject"] {
        request[object]["metadata"]["annotations"]["copyrator.io/namespace-selector"] =
            json!("registry=enabled,env in (prod,staging)");
        request[object]["data"] = json!({"config.json": "x".repeat(1400)});
    }
    serde_json::to_vec(&review).unwrap()
}

fn admission(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let queue = WorkQueue::new(10_000);
    let metrics = Arc::new(Metrics::new());
    let state = AdmissionState {
        waiters: copyrator::freshness::waiters::Waiters::new(
            Arc::clone(&queue),
            Arc::clone(&metrics),
        ),
        queue,
        metrics,
        policy: Arc::new(Policy {
            trust: TrustPolicy::trust_all(),
            ..Default::default()
        }),
        advisor: None,
        gate: None,
        own_username: None,
        namespaces: None,
        api_server_known: false,
        limits: Limits::new(
            6 << 20,
            std::time::Duration::from_secs(2),
            Peers::new(PeerLimits::default(), Arc::new(Metrics::new())),
        ),
    };
    let app = router(state);
    let body = bytes::Bytes::from(secret_review());
    let mut g = c.benchmark_group("admission");
    g.throughput(Throughput::Elements(1));
    g.bench_function("secret_update_review", |b| {
        b.to_async(&rt).iter(|| {
            let app = app.clone();
            let body = body.clone();
            async move {
                let resp = app
                    .oneshot(
                        Request::post("/admission/sources")
                            .header("content-type", "application/json")
                            .body(Body::from(body))
                            .unwrap(),
                    )
                    .await
                    .unwrap();
                assert!(resp.status().is_success());
                http_body_util::BodyExt::collect(resp.into_body())
                    .await
                    .unwrap()
            }
        })
    });
    // The Pod gate's no-op path: a Pod in a namespace known settled, answered from memory and
    // patched with its pull secret. (The gate's API client goes nowhere: any call would fail.)
    let ctx = rt.block_on(async { offline_context() });
    for feed in Feed::all() {
        ctx.ready.connected(feed);
    }
    let since = ctx.ready.begin();
    assert!(ctx.ready.record(
        "team-a",
        since,
        Ready {
            pull_secrets: vec!["mirror".into()]
        }
    ));
    let queue = WorkQueue::new(10_000);
    let pods = router(AdmissionState {
        waiters: copyrator::freshness::waiters::Waiters::new(
            Arc::clone(&queue),
            Arc::clone(&ctx.metrics),
        ),
        queue,
        metrics: Arc::clone(&ctx.metrics),
        policy: Arc::new(ctx.settings.policy.clone()),
        advisor: None,
        gate: Some(PodGate::new(Arc::clone(&ctx), Duration::from_secs(2))),
        own_username: None,
        namespaces: None,
        api_server_known: false,
        limits: Limits::new(
            6 << 20,
            Duration::from_secs(2),
            Peers::new(PeerLimits::default(), Arc::clone(&ctx.metrics)),
        ),
    });
    let pod = bytes::Bytes::from_static(include_bytes!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/review-pod-create.json"
    )));
    g.bench_function("pod_create_settled_namespace", |b| {
        b.to_async(&rt).iter(|| {
            let app = pods.clone();
            let body = pod.clone();
            async move {
                let resp = app
                    .oneshot(
                        Request::post("/admission/pods")
                            .header("content-type", "application/json")
                            .body(Body::from(body))
                            .unwrap(),
                    )
                    .await
                    .unwrap();
                let body = http_body_util::BodyExt::collect(resp.into_body())
                    .await
                    .unwrap()
                    .to_bytes();
                assert!(body.windows(5).any(|w| w == b"patch"), "patched");
                body
            }
        })
    });
    g.finish();
}

/// A sync context whose API client answers every call with an error.
fn offline_context() -> Arc<Context> {
    let service = tower::service_fn(|_req: axum::http::Request<kube::client::Body>| async {
        Err::<axum::http::Response<http_body_util::Full<bytes::Bytes>>, _>(std::io::Error::other(
            "no API server in this benchmark",
        ))
    });
    let client = kube::Client::new(service, "default");
    let metrics = Arc::new(Metrics::new());
    let cluster = Cluster::new(
        client.clone(),
        Arc::clone(&metrics),
        ApiLimits {
            writes: RateLimiter::unlimited(),
            reads: RateLimiter::unlimited(),
            read_concurrency: 1,
        },
        500,
    );
    let settings = SyncSettings {
        policy: Policy {
            trust: TrustPolicy::trust_all(),
            ..Default::default()
        },
        fanout_concurrency: 1,
        fanout_bytes: 1 << 20,
        new_namespace_delay: std::time::Duration::ZERO,
        resync_chunk: copyrator::sync::context::RESYNC_CHUNK,
        source_cache_bytes: copyrator::sync::context::DEFAULT_SOURCE_CACHE_BYTES,
    };
    Arc::new(Context::new(
        cluster,
        Events::new(client, "bench".into(), Arc::clone(&metrics)),
        metrics,
        WorkQueue::new(10),
        settings,
    ))
}

/// A cluster of `n` namespaces, one inline rule selecting all of them, every copy in sync.
fn steady_world(n: usize) -> (World, BTreeMap<ObjectKey, Existing>, Contents) {
    let source = SourceInfo {
        key: ObjectKey::new(Kind::Secret, "platform", "registry"),
        uid: "uid".into(),
        resource_version: "1".into(),
        labels: BTreeMap::from([(marks::SOURCE_LABEL.to_string(), "true".to_string())]),
        annotations: BTreeMap::from([(
            marks::NAMESPACE_SELECTOR_ANNOTATION.to_string(),
            "registry=enabled".to_string(),
        )]),
        created: 0,
        deleting: false,
        dropped: None,
    };
    let payload = Payload {
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            "config.json".to_string(),
            "x".repeat(1400),
        )])),
        ..Default::default()
    };
    let mut world = World::from_parts(
        Policy {
            trust: TrustPolicy::trust_all(),
            ..Default::default()
        },
        [source.clone()],
        Vec::new(),
    );
    let rule = Rule::inline(&source).unwrap().unwrap();
    let mut existing = BTreeMap::new();
    for i in 0..n {
        let name = format!("team-{i}");
        world.insert_namespaces([NamespaceInfo {
            name: name.clone(),
            resource_version: "1".into(),
            labels: [("registry", "enabled")].into_iter().collect(),
            accept_from: None,
            terminating: false,
        }]);
        let copy = DesiredCopy::build(&rule, &source, &payload, &name).expect("an identity rule");
        let meta = copy.object().metadata;
        existing.insert(
            copy.key,
            Existing::Managed(
                ManagedCopy::from_marks(
                    Kind::Secret,
                    &meta.labels.unwrap(),
                    &meta.annotations.unwrap(),
                    "7".into(),
                    false,
                )
                .unwrap(),
            ),
        );
    }
    let mut contents = Contents::default();
    contents
        .known_hashes
        .insert(source.key.clone(), source_hash(&source, &payload));
    (world, existing, contents)
}

fn planner(c: &mut Criterion) {
    let mut g = c.benchmark_group("plan");
    for n in [500usize, 5_000] {
        let (world, existing, contents) = steady_world(n);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(format!("steady_state_{n}_namespaces"), |b| {
            b.iter(|| {
                let actions = plan(&world, &Scope::All, &existing, &contents);
                assert_eq!(actions.len(), n);
                actions
            })
        });
    }
    // A payload batch of a startup resync: 8 of 100 sources' targets planned again once their
    // payloads are read. Only those targets' claims are computed (not 100 rules × namespaces).
    let (world, targets) = many_rules_world(100, 1_000);
    g.throughput(Throughput::Elements(targets.len() as u64));
    g.bench_function("payload_batch_8_of_100_rules_1000_namespaces", |b| {
        b.iter(|| {
            let actions = plan(
                &world,
                &Scope::Targets(targets.clone()),
                &BTreeMap::new(),
                &Contents::default(),
            );
            assert_eq!(actions.len(), targets.len());
            actions
        })
    });
    // A job's world grows by what each read returns: namespaces a few at a time (GETs, one
    // LIST per selector) into a map that may already hold thousands. Each batch costs its own
    // size, not the map's (it did: every batch rebuilt the whole map).
    let n = 5_000;
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function("world_namespaces_added_one_at_a_time_5000", |b| {
        b.iter(|| {
            let mut world = World::default();
            for i in 0..n {
                world.insert_namespaces([NamespaceInfo {
                    name: format!("team-{i:05}"),
                    resource_version: "1".into(),
                    labels: [("registry", "enabled")].into_iter().collect(),
                    accept_from: None,
                    terminating: false,
                }]);
            }
            assert_eq!(world.namespaces().len(), n);
            world
        })
    });
    g.finish();
}

/// `rules` inline rules (sources `src-0`, `src-1`, …), each selecting all of `n` namespaces;
/// and the targets of the first 8 sources.
fn many_rules_world(rules: usize, n: usize) -> (World, BTreeSet<ObjectKey>) {
    let sources: Vec<SourceInfo> = (0..rules)
        .map(|i| SourceInfo {
            key: ObjectKey::new(Kind::Secret, "platform", format!("src-{i}")),
            uid: format!("uid-{i}"),
            resource_version: "1".into(),
            labels: BTreeMap::from([(marks::SOURCE_LABEL.to_string(), "true".to_string())]),
            annotations: BTreeMap::from([(
                marks::NAMESPACE_SELECTOR_ANNOTATION.to_string(),
                "registry=enabled".to_string(),
            )]),
            created: i as i64,
            deleting: false,
            dropped: None,
        })
        .collect();
    let mut world = World::from_parts(
        Policy {
            trust: TrustPolicy::trust_all(),
            ..Default::default()
        },
        sources,
        Vec::new(),
    );
    world.insert_namespaces((0..n).map(|i| NamespaceInfo {
        name: format!("team-{i}"),
        resource_version: "1".into(),
        labels: [("registry", "enabled")].into_iter().collect(),
        accept_from: None,
        terminating: false,
    }));
    let targets = (0..8)
        .flat_map(|s| {
            (0..n)
                .map(move |i| ObjectKey::new(Kind::Secret, format!("team-{i}"), format!("src-{s}")))
        })
        .collect();
    (world, targets)
}

criterion_group!(benches, admission, planner);
criterion_main!(benches);
