//! Watches are triggers too (SPEC §5): with every webhook configuration removed, the watches
//! alone keep the promises of SPEC §4 (a new labelled namespace gets its copy, a source update
//! reaches it, an opt-out removes it) without waiting for a full resync; with the webhooks,
//! an admitted change costs no job of the watch's besides.

use std::time::{Duration, Instant};

use crate::common;

use common::*;
use copyrator::marks;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

/// Far above the watches' milliseconds, far below the hour-long resync interval of the tests.
const BOUND: Duration = Duration::from_secs(5);

const RESYNCS: &str = "copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}";

fn triggered(feed: &str) -> String {
    format!("copyrator_watch_triggered_jobs_total{{feed=\"{feed}\"}}")
}

/// Waits until `check` holds for `ns/name`, at most [`BOUND`]; returns how long it took.
async fn within<F: Fn(&Secret) -> bool>(
    t: &Harness,
    ns: &str,
    name: &str,
    what: &str,
    check: F,
) -> Duration {
    let started = Instant::now();
    let api = t.secrets(ns);
    eventually(BOUND, what, || async {
        api.get_opt(name).await.ok().flatten().filter(|s| check(s))
    })
    .await;
    started.elapsed()
}

#[tokio::test]
async fn without_webhooks_the_watches_alone_copy_update_and_remove() {
    let t = Harness::start(Options {
        webhooks: false,
        ..Options::default()
    })
    .await;
    t.wait_startup_resync().await;
    let key = t.name("no-webhooks");
    let src = t.namespace("no-webhooks-src", &[]).await;
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret(
                "cred",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &format!("{key}=yes"))],
                &[("password", "one")],
            ),
        )
        .await
        .unwrap();

    let dest = t.namespace("no-webhooks", &[(&key, "yes")]).await;
    let created = within(
        &t,
        &dest,
        "cred",
        "the copy in a new labelled namespace",
        |s| secret_value(s, "password").as_deref() == Some("one"),
    )
    .await;

    t.secrets(&src)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": "two"}})),
        )
        .await
        .unwrap();
    let updated = within(&t, &dest, "cred", "the source's update in the copy", |s| {
        secret_value(s, "password").as_deref() == Some("two")
    })
    .await;

    let started = Instant::now();
    t.label_namespace(&dest, json!({ key.as_str(): null }))
        .await;
    eventually(BOUND, "the copy removed after the opt-out", || async {
        matches!(t.secrets(&dest).get_opt("cred").await, Ok(None)).then_some(())
    })
    .await;
    let removed = started.elapsed();
    println!("without webhooks: created {created:?}, updated {updated:?}, removed {removed:?}");

    assert_eq!(
        t.metric(RESYNCS).await,
        1.0,
        "no full resync but the startup one"
    );
    assert!(t.metric(&triggered("namespaces")).await >= 2.0);
    assert!(t.metric(&triggered("source secrets")).await >= 2.0);
    t.finish().await;
}

#[tokio::test]
async fn an_admitted_change_costs_no_job_of_the_watchs() {
    let t = Harness::start(Options::default()).await;
    t.wait_startup_resync().await;
    let key = t.name("admitted");
    let src = t.namespace("admitted-src", &[]).await;
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret(
                "cred",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &format!("{key}=yes"))],
                &[("password", "v0")],
            ),
        )
        .await
        .unwrap();
    let dest = t.namespace("admitted", &[(&key, "yes")]).await;
    t.wait_value::<Secret>(&dest, "cred", "password", "v0")
        .await;
    for round in 1..=3 {
        let value = format!("v{round}");
        t.secrets(&src)
            .patch(
                "cred",
                &PatchParams::default(),
                &Patch::Merge(json!({"stringData": {"password": value}})),
            )
            .await
            .unwrap();
        t.wait_value::<Secret>(&dest, "cred", "password", &value)
            .await;
    }
    t.label_namespace(&dest, json!({ key.as_str(): null }))
        .await;
    t.wait_gone::<Secret>(&dest, "cred").await;
    t.quiescent().await;
    for feed in ["namespaces", "source secrets"] {
        assert_eq!(
            t.metric(&triggered(feed)).await,
            0.0,
            "{feed}: every change was admitted, and its admitted job covered it"
        );
    }
    t.finish().await;
}
