//! Phase big-payload: a ~1 MiB Secret fanned out, in a copyrator process of its own so that
//! its peak RSS is this phase's, beside a plain client writing the same Secrets.

use std::time::{Duration, Instant};

use copyrator::marks;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{Api, api::PostParams};

use crate::{
    CONCURRENCY,
    common::{TestEnv, secret, webhooks::unregister_webhooks},
    measure::{create_namespace, memory},
    report::{Report, ms},
};

/// A ~1 MiB Secret fanned out to `n` namespaces (SPEC §5: a fan-out's memory is the payload
/// plus the writes in flight): copyrator's peak RSS, in a process of its own so that the peak is
/// this phase's, and its time beside a plain client writing the same `n` Secrets.
pub async fn run(report: &mut Report, env: &TestEnv, n: usize) {
    let client = &env.client;
    let key = format!("bench-big-{}", env.id);
    let ns_api: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = (0..n).map(|i| format!("{key}-{i}")).collect();
    stream::iter(&names)
        .for_each_concurrent(CONCURRENCY, |name| {
            let ns_api = ns_api.clone();
            let key = key.clone();
            async move {
                create_namespace(&ns_api, name, &[(key.as_str(), "yes")]).await;
            }
        })
        .await;
    for name in &names {
        env.track_namespace(name);
    }
    // 1,000,000 bytes of data: 1.33 MB of base64 in every request.
    let data = "x".repeat(1_000_000);

    // The raw client: the same n writes at the same concurrency.
    let start = Instant::now();
    stream::iter(&names)
        .map(|ns| {
            let api: Api<Secret> = Api::namespaced(client.clone(), ns);
            let s = secret("big-raw", &[], &[], &[("blob", &data)]);
            async move { api.create(&PostParams::default(), &s).await }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .expect("raw writes");
    let raw = start.elapsed();
    stream::iter(&names)
        .for_each_concurrent(CONCURRENCY, |ns| {
            let api: Api<Secret> = Api::namespaced(client.clone(), ns);
            async move {
                let _ = api.delete("big-raw", &Default::default()).await;
            }
        })
        .await;

    let mut p = crate::bench_copyrator(Some(client), &[]).await;
    let (rss_before, _) = memory(p.child.id());
    let src = env.namespace("bench-big-src", &[]).await;
    let all: Api<Secret> = Api::all(client.clone());
    let copy_label = format!("{key}-copy");
    let start = Instant::now();
    env.secrets(&src)
        .create(
            &PostParams::default(),
            &secret(
                "big",
                &[(marks::SOURCE_LABEL, "true"), (copy_label.as_str(), "yes")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &format!("{key}=yes"))],
                &[("blob", &data)],
            ),
        )
        .await
        .unwrap();
    let selector = format!("{copy_label}=yes,{}", marks::MANAGED_SELECTOR);
    let deadline = Instant::now() + Duration::from_secs(300);
    // From the watch cache: a consistent list would read every Secret in etcd each time.
    let lp = kube::api::ListParams {
        resource_version: Some("0".into()),
        ..Default::default()
    }
    .labels(&selector);
    loop {
        let listed = all
            .list_metadata(&lp)
            .await
            .map(|l| l.items.len())
            .unwrap_or(0);
        if listed >= n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "big fan-out: {listed}/{n} after 300 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = start.elapsed();
    let (rss_after, peak) = memory(p.child.id());
    p.terminate();
    unregister_webhooks(client).await;
    report.row(
        &format!("1 MiB Secret fanned out to {n}: time"),
        ms(took),
        ms(raw),
        format!("{:.2}", took.as_secs_f64() / raw.as_secs_f64()),
        "",
    );
    report.row(
        &format!("1 MiB Secret fanned out to {n}: peak RSS"),
        format!("{peak:.1} MiB"),
        format!("{rss_before:.1} MiB before"),
        String::new(),
        "≤ 64 MiB",
    );
    report.note(format!(
        "big payload: RSS {rss_before:.1} MiB before, {rss_after:.1} MiB after, peak {peak:.1} MiB; {n} copies of 1,000,000 bytes in {took:?} (raw client {raw:?})"
    ));
}
