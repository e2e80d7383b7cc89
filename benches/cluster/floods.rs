//! Phase floods: a source update fanned out while clients at other addresses than the API
//! server's flood the webhook port (SPEC §6.1, §9.8), in a copyrator of its own started as the
//! chart starts it (`--api-server-cidrs`, `--memory-limit 128Mi`): alone, beside forged reviews
//! answered as fast as copyrator answers them, and beside connections sending endless headers
//! from four addresses, with the process's peak RSS; a plain client's update of as many
//! Secrets is the baseline.

use std::time::Duration;

use copyrator::marks;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{
    Api, ResourceExt,
    api::{ListParams, PostParams},
};

use crate::{
    CONCURRENCY,
    common::{
        TestEnv,
        floods::{ADDRESSES, PER_ADDRESS, endless_headers, forge},
        secret,
        webhooks::unregister_webhooks,
    },
    measure::{create_namespace, memory},
    report::{Report, list, median, ms},
    update_round::{NewContent, raw_update, source_update},
};

/// Updates timed in each condition.
const ROUNDS: usize = 3;

pub async fn run(report: &mut Report, env: &TestEnv, n: usize) {
    let client = &env.client;
    let key = format!("bench-floods-{}", env.id);
    let ns_api: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = (0..n).map(|i| format!("{key}-{i}")).collect();
    stream::iter(&names)
        .for_each_concurrent(CONCURRENCY, |name| {
            let (ns_api, key) = (ns_api.clone(), key.clone());
            async move {
                create_namespace(&ns_api, name, &[(key.as_str(), "yes")]).await;
            }
        })
        .await;
    for name in &names {
        env.track_namespace(name);
    }

    // The plain client: as many Secrets replaced, with no copyrator running.
    let raw_label = format!("{key}-raw");
    let mut raw: Vec<Secret> = stream::iter(&names)
        .map(|ns| {
            let api: Api<Secret> = Api::namespaced(client.clone(), ns);
            let s = secret(
                "floods-raw",
                &[(raw_label.as_str(), "yes")],
                &[],
                &[("v", "0")],
            );
            async move { api.create(&PostParams::default(), &s).await }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await
        .expect("raw Secrets");
    let raw_selector = format!("{raw_label}=yes");
    let mut raw_times = Vec::new();
    for round in 0..ROUNDS {
        let tag = format!("raw{round}");
        let content = NewContent {
            key: "v",
            base: "raw",
            tag: &tag,
        };
        let (took, replaced) = raw_update(client, &raw_selector, raw, &content).await;
        raw_times.push(took);
        raw = replaced;
    }
    let raw_median = median(&raw_times);

    let mut p = crate::bench_copyrator(
        Some(client),
        &[
            "--api-server-cidrs",
            "127.0.0.1/32",
            "--memory-limit",
            "128Mi",
        ],
    )
    .await;
    let src = env.namespace("bench-floods-src", &[]).await;
    let sources: Api<Secret> = Api::namespaced(client.clone(), &src);
    let selector = format!("{key}=yes");
    sources
        .create(
            &PostParams::default(),
            &secret(
                "floods",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &selector)],
                &[("v", "0")],
            ),
        )
        .await
        .unwrap();
    let uid = sources.get("floods").await.unwrap().uid().unwrap();
    let copies = format!("{}={uid}", marks::SOURCE_UID_LABEL);
    let all: Api<Secret> = Api::all(client.clone());
    for _ in 0..3000 {
        let listed = all
            .list_metadata(&ListParams::default().labels(&copies))
            .await
            .map(|l| l.items.len())
            .unwrap_or(0);
        if listed >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let rounds = |label: &'static str| {
        let (sources, copies) = (sources.clone(), copies.clone());
        async move {
            let mut times = Vec::new();
            for round in 0..ROUNDS {
                let tag = format!("{label}{round}");
                let content = NewContent {
                    key: "v",
                    base: label,
                    tag: &tag,
                };
                times.push(source_update(client, (&sources, "floods"), &copies, n, &content).await);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            times
        }
    };
    let alone = rounds("alone").await;

    let flood = forge(
        "127.0.0.2".parse().unwrap(),
        p.webhook_port,
        &p.ca,
        &src,
        &selector,
        8,
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (sent_before, started) = (flood.sent(), std::time::Instant::now());
    let forged = rounds("forged").await;
    let rate = (flood.sent() - sent_before) as f64 / started.elapsed().as_secs_f64();
    drop(flood);
    let unqueued = p.metric("copyrator_admission_unqueued_total").await;

    let (_, peak_before) = memory(p.child.id());
    let flood = endless_headers(p.webhook_port, &p.ca);
    tokio::time::sleep(Duration::from_secs(8)).await;
    let open = p.metric("copyrator_webhook_connections").await;
    let headers = rounds("headers").await;
    let (_, peak) = memory(p.child.id());
    let sent = flood.sent();
    drop(flood);
    p.terminate();
    unregister_webhooks(client).await;

    let ratio = |d: Duration| format!("{:.2}", d.as_secs_f64() / raw_median.as_secs_f64());
    for (figure, times) in [
        (format!("update -> {n} copies, alone (floods)"), &alone),
        (
            format!("update -> {n} copies, {rate:.0} forged reviews/s"),
            &forged,
        ),
        (format!("update -> {n} copies, endless headers"), &headers),
    ] {
        report.row(
            &figure,
            ms(median(times)),
            ms(raw_median),
            ratio(median(times)),
            "",
        );
    }
    report.row(
        "peak RSS, endless headers (128Mi limit)",
        format!("{peak:.1} MiB"),
        format!("{peak_before:.1} MiB before"),
        String::new(),
        "< 128 MiB",
    );
    report.note(format!(
        "floods: {n} namespaces; copyrator started with --api-server-cidrs 127.0.0.1/32 --memory-limit 128Mi; source update until a watch saw all {n} copies, {ROUNDS} rounds each (median): alone {}, beside 8 clients at 127.0.0.2 posting forged source reviews one connection each ({rate:.0}/s answered; {unqueued} reviews queued nothing) {}, beside {} connections ({PER_ADDRESS} from each of {} addresses) sending header lines every 20 ms and never ending them ({open} open at copyrator, {} MiB sent) {}; plain client replacing {n} Secrets {}; peak RSS {peak_before:.1} MiB before the header flood, {peak:.1} MiB after",
        list(&alone),
        list(&forged),
        PER_ADDRESS * ADDRESSES.len(),
        ADDRESSES.len(),
        sent >> 20,
        list(&headers),
        list(&raw_times),
    ));
}
