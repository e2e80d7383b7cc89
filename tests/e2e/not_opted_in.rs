//! A source that asks for copies without the opt-in label is not silently ignored: the
//! resync warns on it, once per version of the source.

use crate::common;

use common::*;
use copyrator::marks;
use k8s_openapi::api::{core::v1::Secret, events::v1::Event};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// copyrator's SourceNotOptedIn Events about Secret `name` in `ns`.
async fn warnings(env: &TestEnv, ns: &str, name: &str) -> Vec<Event> {
    env.api::<Event>(ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some("SourceNotOptedIn")
                && e.type_.as_deref() == Some("Warning")
        })
        .collect()
}

async fn wait_warnings(env: &TestEnv, ns: &str, name: &str, n: usize) -> Vec<Event> {
    eventually(
        CONVERGE,
        &format!("{n} SourceNotOptedIn warning(s) on {name}"),
        || async {
            let found = warnings(env, ns, name).await;
            (found.len() >= n).then_some(found)
        },
    )
    .await
}

#[tokio::test]
async fn unlabelled_source_gets_one_warning_per_version() {
    let t = Harness::start(Options {
        resync_interval: "1s",
        extra: vec!["--unlabelled-scan-interval=1s".into()],
        ..Default::default()
    })
    .await;
    let src = t.namespace("nop-src", &[]).await;
    let dest = t.namespace("nop-dest", &[]).await;
    let annotated = |name: &str| {
        secret(
            name,
            &[],
            &[(marks::NAMESPACES_ANNOTATION, &dest)],
            &[("v", "1")],
        )
    };
    t.secrets(&src)
        .create(&PostParams::default(), &annotated("forgot-label"))
        .await
        .unwrap();
    let first = wait_warnings(&t, &src, "forgot-label", 1).await;
    let note = first[0].note.clone().unwrap_or_default();
    assert!(
        note.contains("copyrator.io/namespaces") && note.contains("copyrator.io/source"),
        "{note}"
    );

    // Later scans ran (a second such source is warned about), and did not repeat the first.
    t.secrets(&src)
        .create(&PostParams::default(), &annotated("also-forgot"))
        .await
        .unwrap();
    wait_warnings(&t, &src, "also-forgot", 1).await;
    t.wait_metric(
        "copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}",
        "two more resyncs",
        |n| n >= 4.0,
    )
    .await;
    assert_eq!(warnings(&t, &src, "forgot-label").await.len(), 1);

    // A new version of the source is warned about again.
    t.secrets(&src)
        .patch(
            "forgot-label",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"v": "2"}})),
        )
        .await
        .unwrap();
    wait_warnings(&t, &src, "forgot-label", 2).await;
    // Nothing was copied: the source is still not opted in.
    assert!(
        t.secrets(&dest)
            .get_opt("forgot-label")
            .await
            .unwrap()
            .is_none()
    );

    // Opted in: it is copied, and no warning follows.
    t.secrets(&src)
        .patch(
            "forgot-label",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {marks::SOURCE_LABEL: "true"}}})),
        )
        .await
        .unwrap();
    t.wait_value::<Secret>(&dest, "forgot-label", "v", "2")
        .await;
    let resyncs = t
        .metric("copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}")
        .await;
    t.wait_metric(
        "copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}",
        "two more resyncs",
        |n| n >= resyncs + 2.0,
    )
    .await;
    assert_eq!(warnings(&t, &src, "forgot-label").await.len(), 2);
    t.finish().await;
}
