//! Inline rules (labels and annotations on the source), end to end: SPEC §8 scenarios 1, 4 and
//! 5, the webhook fast path, ConfigMap sources, and the safety rules of §4.

use crate::common;

use std::{collections::BTreeMap, time::Duration};

use common::{build::Labelled, *};
use copyrator::marks;
use k8s_openapi::{
    ByteString,
    api::{
        core::v1::{ConfigMap, Namespace, Secret},
        events::v1::Event,
    },
};
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

const SOURCE_NS: &str = "default";

/// A predicate for the waits: a Warning Event with `reason` about the object `regarding`.
fn warning(regarding: &str, reason: &str) -> impl Fn(&Event) -> bool {
    let (regarding, reason) = (regarding.to_string(), reason.to_string());
    move |e| {
        e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding.as_str())
            && e.reason.as_deref() == Some(reason.as_str())
            && e.type_.as_deref() == Some("Warning")
    }
}

/// Removes leftovers of an earlier, interrupted run of the shell-operator scenario.
async fn forget_mysecret(env: &TestEnv) {
    let _ = env
        .secrets(SOURCE_NS)
        .delete("mysecret", &DeleteParams::default())
        .await;
    env.wait_gone::<Secret>(SOURCE_NS, "mysecret").await;
}

/// The shell-operator's source: opted in, copied where `secret=yes`, with a label to carry over
/// and tracking metadata not to.
fn mysecret(password: &str) -> build::SecretBuilder {
    build::secret("mysecret")
        .data("password", password)
        .source()
        .copied_where("secret=yes")
        .label("team", "platform")
        .annotation("kubectl.kubernetes.io/last-applied-configuration", "{}")
}

/// SPEC §8.1, every step.
#[tokio::test]
async fn shell_operator_secret_copier() {
    let env = TestEnv::new().await;
    forget_mysecret(&env).await;
    let t = Harness::start_in(env, Options::default()).await;
    let a = t.namespace("team-a", &[("secret", "yes")]).await;
    let b = t.namespace("team-b", &[]).await;

    // The source appears: labelled namespaces get it, others do not.
    let source = mysecret("s3cret").create(&t, SOURCE_NS).await;
    let copy = t
        .wait_value::<Secret>(&a, "mysecret", "password", "s3cret")
        .await;
    let labels = copy.metadata.labels.clone().unwrap();
    let annotations = copy.metadata.annotations.clone().unwrap();
    assert_eq!(
        labels.get(marks::MANAGED_BY_LABEL).map(String::as_str),
        Some("copyrator")
    );
    assert_eq!(
        labels.get(marks::SOURCE_UID_LABEL),
        source.metadata.uid.as_ref()
    );
    assert_eq!(labels.get("team").map(String::as_str), Some("platform"));
    assert!(
        !labels.contains_key(marks::SOURCE_LABEL),
        "a copy is not a source"
    );
    assert_eq!(
        annotations
            .get(marks::SOURCE_ANNOTATION)
            .map(String::as_str),
        Some("default/mysecret")
    );
    assert_eq!(
        annotations.get(marks::RULE_ANNOTATION).map(String::as_str),
        Some("inline")
    );
    assert!(
        annotations
            .get(marks::CONTENT_HASH_ANNOTATION)
            .is_some_and(|h| h.starts_with("sha256:"))
    );
    assert!(!annotations.contains_key("kubectl.kubernetes.io/last-applied-configuration"));
    assert!(!annotations.contains_key(marks::NAMESPACE_SELECTOR_ANNOTATION));
    assert_eq!(copy.type_.as_deref(), Some("Opaque"));
    assert!(copy.metadata.owner_references.is_none());
    assert!(t.secrets(&b).get_opt("mysecret").await.unwrap().is_none());

    // A namespace created later gets it.
    let c = t.namespace("team-c", &[("secret", "yes")]).await;
    t.wait_value::<Secret>(&c, "mysecret", "password", "s3cret")
        .await;

    // Removing the label deletes the copy.
    t.label_namespace(&a, json!({"secret": null})).await;
    t.wait_gone::<Secret>(&a, "mysecret").await;

    // Changing the source updates every copy.
    let mut changed = t.secrets(SOURCE_NS).get("mysecret").await.unwrap();
    changed.data = Some(BTreeMap::from([(
        "password".to_string(),
        ByteString(b"rotated".to_vec()),
    )]));
    t.secrets(SOURCE_NS)
        .replace("mysecret", &PostParams::default(), &changed)
        .await
        .unwrap();
    t.wait_value::<Secret>(&c, "mysecret", "password", "rotated")
        .await;

    // Deleting a copy by hand restores it.
    t.secrets(&c)
        .delete("mysecret", &DeleteParams::default())
        .await
        .unwrap();
    t.wait_value::<Secret>(&c, "mysecret", "password", "rotated")
        .await;

    // Editing a copy by hand restores it.
    t.secrets(&c)
        .patch(
            "mysecret",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"password": "aGFja2Vk", "extra": "eA=="}})),
        )
        .await
        .unwrap();
    let restored = t
        .wait_value::<Secret>(&c, "mysecret", "password", "rotated")
        .await;
    assert!(
        secret_value(&restored, "extra").is_none(),
        "keys added by hand are removed"
    );

    // Deleting the source deletes the copies.
    t.secrets(SOURCE_NS)
        .delete("mysecret", &DeleteParams::default())
        .await
        .unwrap();
    t.wait_gone::<Secret>(&c, "mysecret").await;

    t.finish().await;
}

/// The copy of a new namespace comes from the webhook, not from a resync.
#[tokio::test]
async fn new_namespace_gets_its_copy_through_the_webhook_without_a_resync() {
    let t = Harness::start(Options::default()).await; // resync every hour
    let resync_sample = "copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}";
    t.wait_metric(resync_sample, "the startup resync", |v| v >= 1.0)
        .await;
    let src = t.namespace("fast-src", &[]).await;
    let selector = format!("fast={}", t.id);
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret(
                "pull",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &selector)],
                &[("k", "v")],
            ),
        )
        .await
        .unwrap();

    for i in 0..3 {
        let started = std::time::Instant::now();
        let ns = t.namespace(&format!("fast-{i}"), &[("fast", &t.id)]).await;
        t.wait_value::<Secret>(&ns, "pull", "k", "v").await;
        eprintln!(
            "namespace {ns}: copy observed {:?} after the create returned",
            started.elapsed()
        );
    }
    // Opting in by a label added after creation takes the webhook path too (the job waits
    // for the admitted label to be persisted).
    for i in 0..3 {
        let ns = t.namespace(&format!("later-{i}"), &[]).await;
        t.label_namespace(&ns, json!({"fast": t.id})).await;
        t.wait_value::<Secret>(&ns, "pull", "k", "v").await;
    }
    assert_eq!(
        t.metric(resync_sample).await,
        1.0,
        "only the startup resync ran"
    );
    assert!(
        t.metric("copyrator_jobs_total{kind=\"namespace\",outcome=\"ok\"}")
            .await
            >= 3.0
    );
    // The rules and copies were read while the namespaces were being persisted, and the
    // jobs used those reads (SPEC §4.6): six admitted changes, at least one that fast.
    let used = t
        .metric("copyrator_namespace_early_reads_total{outcome=\"used\"}")
        .await;
    assert!(used >= 1.0, "early reads used: {used}");
    t.finish().await;
}

#[tokio::test]
async fn config_map_source_is_copied_with_data_and_binary_data() {
    let t = Harness::start(Options::default()).await;
    let src = t.namespace("cm-src", &[]).await;
    let d1 = t.namespace("cm-d1", &[]).await;
    let d2 = t.namespace("cm-d2", &[]).await;
    let mut cm = config_map(
        "settings",
        &[(marks::SOURCE_LABEL, "true")],
        &[(marks::NAMESPACES_ANNOTATION, &format!("{d1}, {d2}"))],
        &[("app.yaml", "replicas: 3")],
    );
    cm.binary_data = Some(BTreeMap::from([(
        "blob".to_string(),
        ByteString(vec![0, 1, 2, 255]),
    )]));
    t.config_maps(&src)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();

    for ns in [&d1, &d2] {
        let copy = t
            .wait_for::<ConfigMap>(ns, "settings", "copied", |_| true)
            .await;
        assert_eq!(
            copy.data
                .as_ref()
                .unwrap()
                .get("app.yaml")
                .map(String::as_str),
            Some("replicas: 3")
        );
        assert_eq!(
            copy.binary_data
                .as_ref()
                .unwrap()
                .get("blob")
                .map(|b| b.0.clone()),
            Some(vec![0, 1, 2, 255])
        );
        assert_eq!(
            copy.metadata
                .labels
                .as_ref()
                .unwrap()
                .get(marks::MANAGED_BY_LABEL)
                .map(String::as_str),
            Some("copyrator")
        );
    }

    t.config_maps(&src)
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"app.yaml": "replicas: 5"}})),
        )
        .await
        .unwrap();
    eventually(CONVERGE, "the ConfigMap change in every copy", || async {
        let mut all = true;
        for ns in [&d1, &d2] {
            let v = t
                .config_maps(ns)
                .get("settings")
                .await
                .ok()
                .and_then(|c| c.data?.get("app.yaml").cloned());
            all &= v.as_deref() == Some("replicas: 5");
        }
        all.then_some(())
    })
    .await;
    t.finish().await;
}

/// SPEC §8.4: a same-name Secret copyrator does not own survives byte for byte and is reported.
#[tokio::test]
async fn unmanaged_secret_with_the_copy_name_survives_byte_for_byte() {
    let t = Harness::start(Options::default()).await;
    let src = t.namespace("conflict-src", &[]).await;
    let sel = format!("conflict={}", t.id);
    let taken = t.namespace("conflict-taken", &[("conflict", &t.id)]).await;
    let free = t.namespace("conflict-free", &[("conflict", &t.id)]).await;

    let mine = secret(
        "shared",
        &[("owner", "team")],
        &[("note", "hand made")],
        &[("password", "theirs")],
    );
    t.secrets(&taken)
        .create(&PostParams::default(), &mine)
        .await
        .unwrap();
    let before = t.secrets(&taken).get("shared").await.unwrap();

    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret(
                "shared",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &sel)],
                &[("password", "ours")],
            ),
        )
        .await
        .unwrap();
    // The free namespace gets its copy: the job ran.
    t.wait_value::<Secret>(&free, "shared", "password", "ours")
        .await;
    let event = t
        .wait_for_any::<Event>(
            &src,
            "a CopyConflict warning on the source",
            warning("shared", "CopyConflict"),
        )
        .await;
    let note = event.note.clone().unwrap_or_default();
    assert!(
        note.contains(&taken) && note.contains("not managed by copyrator"),
        "{note}"
    );
    assert!(
        t.metric("copyrator_conflicts_total{reason=\"unmanaged\"}")
            .await
            >= 1.0
    );

    // A later change of the source and a resync do not touch it either.
    t.secrets(&src)
        .patch(
            "shared",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"password": "b3VyczI="}})),
        )
        .await
        .unwrap();
    t.wait_value::<Secret>(&free, "shared", "password", "ours2")
        .await;
    let after = t.secrets(&taken).get("shared").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "never written"
    );
    assert_eq!(after.data, before.data);
    assert_eq!(after.metadata.labels, before.metadata.labels);
    assert_eq!(after.metadata.annotations, before.metadata.annotations);
    t.finish().await;
}

/// SPEC §8.5: changes while copyrator is down converge after it starts, with no manual step.
#[tokio::test]
async fn converges_after_a_restart_when_things_changed_while_it_was_down() {
    let mut t = Harness::start(Options::default()).await;
    let src = t.namespace("down-src", &[]).await;
    let sel = format!("down={}", t.id);
    let kept = t.namespace("down-kept", &[("down", &t.id)]).await;
    let leaving = t.namespace("down-leaving", &[("down", &t.id)]).await;
    let edited = t.namespace("down-edited", &[("down", &t.id)]).await;
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret(
                "cred",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &sel)],
                &[("v", "1")],
            ),
        )
        .await
        .unwrap();
    for ns in [&kept, &leaving, &edited] {
        t.wait_value::<Secret>(ns, "cred", "v", "1").await;
    }

    // Down, with its webhooks still registered: the API server's calls fail and are ignored.
    t.kill().await;
    let arrived = t.namespace("down-arrived", &[("down", &t.id)]).await;
    t.label_namespace(&leaving, json!({"down": null})).await;
    t.secrets(&src)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "Mg=="}})),
        )
        .await
        .unwrap();
    t.secrets(&edited)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "ZXZpbA=="}})),
        )
        .await
        .unwrap();
    let lost = t.namespace("down-lost", &[("down", &t.id)]).await;
    t.secrets(&lost)
        .delete("cred", &DeleteParams::default())
        .await
        .ok();
    assert!(t.secrets(&arrived).get_opt("cred").await.unwrap().is_none());

    t.restart(Options::default()).await;
    for ns in [&kept, &arrived, &edited, &lost] {
        t.wait_value::<Secret>(ns, "cred", "v", "2").await;
    }
    t.wait_gone::<Secret>(&leaving, "cred").await;
    t.finish().await;
}

#[tokio::test]
async fn terminating_namespace_gets_no_copy_and_causes_no_failures() {
    let t = Harness::start(Options::default()).await;
    let src = t.namespace("term-src", &[]).await;
    let sel = format!("term={}", t.id);
    let doomed = t.namespace("term-doomed", &[("term", &t.id)]).await;
    let alive = t.namespace("term-alive", &[("term", &t.id)]).await;
    // Without a namespace controller a deleted namespace stays Terminating.
    Api::<Namespace>::all(t.client.clone())
        .delete(&doomed, &DeleteParams::default())
        .await
        .unwrap();
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret(
                "cred",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &sel)],
                &[("v", "1")],
            ),
        )
        .await
        .unwrap();
    t.wait_value::<Secret>(&alive, "cred", "v", "1").await;
    assert!(t.secrets(&doomed).get_opt("cred").await.unwrap().is_none());
    assert_eq!(
        t.metric("copyrator_jobs_total{kind=\"source\",outcome=\"retry\"}")
            .await,
        0.0
    );
    assert_eq!(
        t.metric("copyrator_jobs_total{kind=\"source\",outcome=\"failed\"}")
            .await,
        0.0
    );
    t.finish().await;
}

#[tokio::test]
async fn service_account_token_secret_is_never_copied() {
    let t = Harness::start(Options::default()).await;
    let src = t.namespace("sa-src", &[]).await;
    let dest = t.namespace("sa-dest", &[]).await;
    let mut token = secret(
        "sa-token",
        &[(marks::SOURCE_LABEL, "true")],
        &[
            (marks::NAMESPACES_ANNOTATION, &dest),
            ("kubernetes.io/service-account.name", "default"),
        ],
        &[("token", "not-really")],
    );
    token.type_ = Some("kubernetes.io/service-account-token".into());
    t.secrets(&src)
        .create(&PostParams::default(), &token)
        .await
        .unwrap();
    t.wait_for_any::<Event>(
        &src,
        "a warning that the token is not copied",
        warning("sa-token", "ServiceAccountTokenNotCopied"),
    )
    .await;
    assert!(
        t.secrets(&dest)
            .get_opt("sa-token")
            .await
            .unwrap()
            .is_none()
    );
    t.finish().await;
}

#[tokio::test]
async fn immutable_source_replaced_by_a_new_version_recreates_the_copies() {
    let t = Harness::start(Options::default()).await;
    let src = t.namespace("imm-src", &[]).await;
    let dest = t.namespace("imm-dest", &[]).await;
    let make = |v: &str| {
        let mut s = secret(
            "frozen",
            &[(marks::SOURCE_LABEL, "true")],
            &[(marks::NAMESPACES_ANNOTATION, &dest)],
            &[("v", v)],
        );
        s.immutable = Some(true);
        s
    };
    t.secrets(&src)
        .create(&PostParams::default(), &make("1"))
        .await
        .unwrap();
    let first = t.wait_value::<Secret>(&dest, "frozen", "v", "1").await;
    assert_eq!(first.immutable, Some(true));
    // An immutable Secret changes by being replaced.
    t.secrets(&src)
        .delete("frozen", &DeleteParams::default())
        .await
        .unwrap();
    t.secrets(&src)
        .create(&PostParams::default(), &make("2"))
        .await
        .unwrap();
    let second = t.wait_value::<Secret>(&dest, "frozen", "v", "2").await;
    assert_eq!(second.immutable, Some(true));
    assert_ne!(
        first.metadata.uid, second.metadata.uid,
        "recreated, not updated"
    );
    t.finish().await;
}

/// The API server refuses to update an immutable copy, or to change a Secret's type in place
/// (422 Invalid with a cause on that field): such a copy is deleted and created again.
#[tokio::test]
async fn a_copy_that_cannot_change_in_place_is_recreated() {
    let t = Harness::start(Options::default()).await;
    let src = t.namespace("inplace-src", &[]).await;
    let dest = t.namespace("inplace-dest", &[]).await;
    let make = |v: &str, immutable: bool, type_: &str| {
        let mut s = secret(
            "cred",
            &[(marks::SOURCE_LABEL, "true")],
            &[(marks::NAMESPACES_ANNOTATION, &dest)],
            &[("v", v)],
        );
        s.immutable = Some(immutable);
        s.type_ = Some(type_.into());
        s
    };
    let replace_source = |s: Secret| {
        let api = t.secrets(&src);
        async move {
            api.delete("cred", &DeleteParams::default()).await.ok();
            api.create(&PostParams::default(), &s).await.unwrap();
        }
    };
    t.secrets(&src)
        .create(&PostParams::default(), &make("1", true, "Opaque"))
        .await
        .unwrap();
    let frozen = t.wait_value::<Secret>(&dest, "cred", "v", "1").await;
    assert_eq!(frozen.immutable, Some(true));

    // Immutable -> mutable with new data: the update is refused (data and immutable are
    // forbidden to change), so the copy is replaced.
    replace_source(make("2", false, "Opaque")).await;
    let thawed = t.wait_value::<Secret>(&dest, "cred", "v", "2").await;
    assert_eq!(thawed.immutable, Some(false));
    assert_ne!(frozen.metadata.uid, thawed.metadata.uid, "recreated");

    // Another type: a Secret's type never changes in place.
    replace_source(make("3", false, "example.com/token")).await;
    let retyped = t.wait_value::<Secret>(&dest, "cred", "v", "3").await;
    assert_eq!(retyped.type_.as_deref(), Some("example.com/token"));
    assert_ne!(thawed.metadata.uid, retyped.metadata.uid, "recreated");
    for outcome in ["retry", "failed"] {
        let sample = format!("copyrator_jobs_total{{kind=\"source\",outcome=\"{outcome}\"}}");
        assert_eq!(t.metric(&sample).await, 0.0, "handled, not {outcome}");
    }
    t.finish().await;
}

#[tokio::test]
async fn source_opting_out_by_label_removes_its_copies() {
    let t = Harness::start(Options::default()).await;
    let src = t.namespace("optout-src", &[]).await;
    let dest = t.namespace("optout-dest", &[]).await;
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret(
                "cred",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACES_ANNOTATION, &dest)],
                &[("v", "1")],
            ),
        )
        .await
        .unwrap();
    t.wait_value::<Secret>(&dest, "cred", "v", "1").await;
    t.secrets(&src)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {marks::SOURCE_LABEL: null}}})),
        )
        .await
        .unwrap();
    t.wait_gone::<Secret>(&dest, "cred").await;
    t.finish().await;
}

#[tokio::test]
async fn steady_state_resync_writes_nothing() {
    let t = Harness::start(Options {
        resync_interval: "1s",
        ..Default::default()
    })
    .await;
    let src = t.namespace("steady-src", &[]).await;
    let sel = format!("steady={}", t.id);
    let mut targets = Vec::new();
    for i in 0..3 {
        targets.push(
            t.namespace(&format!("steady-{i}"), &[("steady", &t.id)])
                .await,
        );
    }
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret(
                "cred",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &sel)],
                &[("v", "1")],
            ),
        )
        .await
        .unwrap();
    for ns in &targets {
        t.wait_value::<Secret>(ns, "cred", "v", "1").await;
    }
    let versions = || async {
        let mut out = Vec::new();
        for ns in &targets {
            out.push(
                t.secrets(ns)
                    .get("cred")
                    .await
                    .unwrap()
                    .metadata
                    .resource_version,
            );
        }
        out
    };
    let rv = versions().await;
    let resyncs = "copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}";
    let writes = |m: &str| {
        ["create", "update", "delete"]
            .iter()
            .map(|v| metric_value(m, &format!("copyrator_copy_writes_total{{verb=\"{v}\"}}")))
            .sum::<f64>()
    };
    let before = t.metrics().await;
    let resyncs_before = metric_value(&before, resyncs);
    eventually(Duration::from_secs(15), "three more resyncs", || async {
        (t.metric(resyncs).await >= resyncs_before + 3.0).then_some(())
    })
    .await;
    let after = t.metrics().await;
    assert_eq!(
        writes(&after),
        writes(&before),
        "resyncs in steady state write nothing"
    );
    assert_eq!(rv, versions().await);
    t.finish().await;
}

/// A copy edited by hand while copyrator was down is found by the resync from metadata alone
/// (another field manager owns its data) and restored, though the source never changed.
#[tokio::test]
async fn hand_edit_made_while_down_is_restored_by_the_startup_resync() {
    let mut t = Harness::start(Options::default()).await;
    let src = t.namespace("tamper-src", &[]).await;
    let dest = t.namespace("tamper-dest", &[]).await;
    let untouched = t.namespace("tamper-untouched", &[]).await;
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret(
                "cred",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACES_ANNOTATION, &format!("{dest},{untouched}"))],
                &[("v", "original")],
            ),
        )
        .await
        .unwrap();
    t.wait_value::<Secret>(&dest, "cred", "v", "original").await;
    let untouched_rv = t
        .wait_value::<Secret>(&untouched, "cred", "v", "original")
        .await
        .metadata
        .resource_version;
    t.kill().await;

    t.secrets(&dest)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"data": {"v": "dGFtcGVyZWQ="}, "metadata": {"labels": {"sneaky": "yes"}}}),
            ),
        )
        .await
        .unwrap();

    t.restart(Options::default()).await;
    let restored = t.wait_value::<Secret>(&dest, "cred", "v", "original").await;
    assert!(!restored.metadata.labels.unwrap().contains_key("sneaky"));
    assert_eq!(
        t.secrets(&untouched)
            .get("cred")
            .await
            .unwrap()
            .metadata
            .resource_version,
        untouched_rv,
        "copies nobody touched are not rewritten"
    );
    t.finish().await;
}
