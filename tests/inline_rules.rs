//! Inline rules (labels and annotations on the source), end to end: SPEC §8 scenarios 1, 4 and
//! 5, the webhook fast path, ConfigMap sources, and the safety rules of §4.

mod common;

use std::{collections::BTreeMap, time::Duration};

use common::*;
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
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

const SOURCE_NS: &str = "default";

async fn wait_secret_value(env: &TestEnv, ns: &str, name: &str, key: &str, want: &str) -> Secret {
    eventually(
        CONVERGE,
        &format!("{ns}/{name} holding {key}={want}"),
        || async {
            env.secrets(ns)
                .get_opt(name)
                .await
                .ok()
                .flatten()
                .filter(|s| secret_value(s, key).as_deref() == Some(want))
        },
    )
    .await
}

async fn wait_secret_gone(env: &TestEnv, ns: &str, name: &str) {
    eventually(CONVERGE, &format!("{ns}/{name} deleted"), || async {
        matches!(env.secrets(ns).get_opt(name).await, Ok(None)).then_some(())
    })
    .await
}

async fn warning_events(env: &TestEnv, ns: &str, regarding: &str, reason: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(env.client.clone(), ns);
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding)
                && e.reason.as_deref() == Some(reason)
                && e.type_.as_deref() == Some("Warning")
        })
        .collect()
}

/// Removes leftovers of an earlier, interrupted run of the shell-operator scenario.
async fn forget_mysecret(env: &TestEnv) {
    let _ = env
        .secrets(SOURCE_NS)
        .delete("mysecret", &DeleteParams::default())
        .await;
    wait_secret_gone(env, SOURCE_NS, "mysecret").await;
}

fn mysecret(password: &str) -> Secret {
    secret(
        "mysecret",
        &[(marks::SOURCE_LABEL, "true"), ("team", "platform")],
        &[
            (marks::NAMESPACE_SELECTOR_ANNOTATION, "secret=yes"),
            ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
        ],
        &[("password", password)],
    )
}

/// SPEC §8.1, every step.
#[tokio::test]
async fn shell_operator_secret_copier() {
    let env = TestEnv::new().await;
    forget_mysecret(&env).await;
    let copyrator = Copyrator::start(Options::default()).await;
    let a = env.namespace("team-a", &[("secret", "yes")]).await;
    let b = env.namespace("team-b", &[]).await;

    // The source appears: labelled namespaces get it, others do not.
    env.secrets(SOURCE_NS)
        .create(&PostParams::default(), &mysecret("s3cret"))
        .await
        .unwrap();
    let source = env.secrets(SOURCE_NS).get("mysecret").await.unwrap();
    let copy = wait_secret_value(&env, &a, "mysecret", "password", "s3cret").await;
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
    assert!(env.secrets(&b).get_opt("mysecret").await.unwrap().is_none());

    // A namespace created later gets it.
    let c = env.namespace("team-c", &[("secret", "yes")]).await;
    wait_secret_value(&env, &c, "mysecret", "password", "s3cret").await;

    // Removing the label deletes the copy.
    env.label_namespace(&a, json!({"secret": null})).await;
    wait_secret_gone(&env, &a, "mysecret").await;

    // Changing the source updates every copy.
    let mut changed = env.secrets(SOURCE_NS).get("mysecret").await.unwrap();
    changed.data = Some(BTreeMap::from([(
        "password".to_string(),
        ByteString(b"rotated".to_vec()),
    )]));
    env.secrets(SOURCE_NS)
        .replace("mysecret", &PostParams::default(), &changed)
        .await
        .unwrap();
    wait_secret_value(&env, &c, "mysecret", "password", "rotated").await;

    // Deleting a copy by hand restores it.
    env.secrets(&c)
        .delete("mysecret", &DeleteParams::default())
        .await
        .unwrap();
    wait_secret_value(&env, &c, "mysecret", "password", "rotated").await;

    // Editing a copy by hand restores it.
    env.secrets(&c)
        .patch(
            "mysecret",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"password": "aGFja2Vk", "extra": "eA=="}})),
        )
        .await
        .unwrap();
    let restored = wait_secret_value(&env, &c, "mysecret", "password", "rotated").await;
    assert!(
        secret_value(&restored, "extra").is_none(),
        "keys added by hand are removed"
    );

    // Deleting the source deletes the copies.
    env.secrets(SOURCE_NS)
        .delete("mysecret", &DeleteParams::default())
        .await
        .unwrap();
    wait_secret_gone(&env, &c, "mysecret").await;

    copyrator.stop().await;
    env.cleanup().await;
}

/// The copy of a new namespace comes from the webhook, not from a resync.
#[tokio::test]
async fn new_namespace_gets_its_copy_through_the_webhook_without_a_resync() {
    let env = TestEnv::new().await;
    let copyrator = Copyrator::start(Options::default()).await; // resync every hour
    let resync_sample = "copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}";
    eventually(CONVERGE, "the startup resync", || async {
        (copyrator.metric(resync_sample).await >= 1.0).then_some(())
    })
    .await;
    let src = env.namespace("fast-src", &[]).await;
    let selector = format!("fast={}", env.id);
    env.secrets(&src)
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
        let ns = env
            .namespace(&format!("fast-{i}"), &[("fast", &env.id)])
            .await;
        wait_secret_value(&env, &ns, "pull", "k", "v").await;
        eprintln!(
            "namespace {ns}: copy observed {:?} after the create returned",
            started.elapsed()
        );
    }
    // Opting in by a label added after creation takes the webhook path too (the job waits
    // for the admitted label to be persisted).
    for i in 0..3 {
        let ns = env.namespace(&format!("later-{i}"), &[]).await;
        env.label_namespace(&ns, json!({"fast": env.id})).await;
        wait_secret_value(&env, &ns, "pull", "k", "v").await;
    }
    assert_eq!(
        copyrator.metric(resync_sample).await,
        1.0,
        "only the startup resync ran"
    );
    assert!(
        copyrator
            .metric("copyrator_jobs_total{kind=\"namespace\",outcome=\"ok\"}")
            .await
            >= 3.0
    );
    copyrator.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn config_map_source_is_copied_with_data_and_binary_data() {
    let env = TestEnv::new().await;
    let copyrator = Copyrator::start(Options::default()).await;
    let src = env.namespace("cm-src", &[]).await;
    let d1 = env.namespace("cm-d1", &[]).await;
    let d2 = env.namespace("cm-d2", &[]).await;
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
    env.config_maps(&src)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();

    for ns in [&d1, &d2] {
        let copy: ConfigMap = eventually(CONVERGE, &format!("settings in {ns}"), || async {
            env.config_maps(ns).get_opt("settings").await.ok().flatten()
        })
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

    env.config_maps(&src)
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
            let v = env
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
    copyrator.stop().await;
    env.cleanup().await;
}

/// SPEC §8.4: a same-name Secret copyrator does not own survives byte for byte and is reported.
#[tokio::test]
async fn unmanaged_secret_with_the_copy_name_survives_byte_for_byte() {
    let env = TestEnv::new().await;
    let copyrator = Copyrator::start(Options::default()).await;
    let src = env.namespace("conflict-src", &[]).await;
    let sel = format!("conflict={}", env.id);
    let taken = env
        .namespace("conflict-taken", &[("conflict", &env.id)])
        .await;
    let free = env
        .namespace("conflict-free", &[("conflict", &env.id)])
        .await;

    let mine = secret(
        "shared",
        &[("owner", "team")],
        &[("note", "hand made")],
        &[("password", "theirs")],
    );
    env.secrets(&taken)
        .create(&PostParams::default(), &mine)
        .await
        .unwrap();
    let before = env.secrets(&taken).get("shared").await.unwrap();

    env.secrets(&src)
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
    wait_secret_value(&env, &free, "shared", "password", "ours").await;
    let events = eventually(CONVERGE, "a CopyConflict warning on the source", || async {
        let e = warning_events(&env, &src, "shared", "CopyConflict").await;
        (!e.is_empty()).then_some(e)
    })
    .await;
    let note = events[0].note.clone().unwrap_or_default();
    assert!(
        note.contains(&taken) && note.contains("not managed by copyrator"),
        "{note}"
    );
    assert!(
        copyrator
            .metric("copyrator_conflicts_total{reason=\"unmanaged\"}")
            .await
            >= 1.0
    );

    // A later change of the source and a resync do not touch it either.
    env.secrets(&src)
        .patch(
            "shared",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"password": "b3VyczI="}})),
        )
        .await
        .unwrap();
    wait_secret_value(&env, &free, "shared", "password", "ours2").await;
    let after = env.secrets(&taken).get("shared").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "never written"
    );
    assert_eq!(after.data, before.data);
    assert_eq!(after.metadata.labels, before.metadata.labels);
    assert_eq!(after.metadata.annotations, before.metadata.annotations);
    copyrator.stop().await;
    env.cleanup().await;
}

/// SPEC §8.5: changes while copyrator is down converge after it starts, with no manual step.
#[tokio::test]
async fn converges_after_a_restart_when_things_changed_while_it_was_down() {
    let env = TestEnv::new().await;
    let copyrator = Copyrator::start(Options::default()).await;
    let src = env.namespace("down-src", &[]).await;
    let sel = format!("down={}", env.id);
    let kept = env.namespace("down-kept", &[("down", &env.id)]).await;
    let leaving = env.namespace("down-leaving", &[("down", &env.id)]).await;
    let edited = env.namespace("down-edited", &[("down", &env.id)]).await;
    env.secrets(&src)
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
        wait_secret_value(&env, ns, "cred", "v", "1").await;
    }

    // Down, with its webhooks still registered: the API server's calls fail and are ignored.
    copyrator.kill().await;
    let arrived = env.namespace("down-arrived", &[("down", &env.id)]).await;
    env.label_namespace(&leaving, json!({"down": null})).await;
    env.secrets(&src)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "Mg=="}})),
        )
        .await
        .unwrap();
    env.secrets(&edited)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "ZXZpbA=="}})),
        )
        .await
        .unwrap();
    let lost = env.namespace("down-lost", &[("down", &env.id)]).await;
    env.secrets(&lost)
        .delete("cred", &DeleteParams::default())
        .await
        .ok();
    assert!(
        env.secrets(&arrived)
            .get_opt("cred")
            .await
            .unwrap()
            .is_none()
    );

    let copyrator = Copyrator::start(Options::default()).await;
    for ns in [&kept, &arrived, &edited, &lost] {
        wait_secret_value(&env, ns, "cred", "v", "2").await;
    }
    wait_secret_gone(&env, &leaving, "cred").await;
    copyrator.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn terminating_namespace_gets_no_copy_and_causes_no_failures() {
    let env = TestEnv::new().await;
    let copyrator = Copyrator::start(Options::default()).await;
    let src = env.namespace("term-src", &[]).await;
    let sel = format!("term={}", env.id);
    let doomed = env.namespace("term-doomed", &[("term", &env.id)]).await;
    let alive = env.namespace("term-alive", &[("term", &env.id)]).await;
    // Without a namespace controller a deleted namespace stays Terminating.
    Api::<Namespace>::all(env.client.clone())
        .delete(&doomed, &DeleteParams::default())
        .await
        .unwrap();
    env.secrets(&src)
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
    wait_secret_value(&env, &alive, "cred", "v", "1").await;
    assert!(
        env.secrets(&doomed)
            .get_opt("cred")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        copyrator
            .metric("copyrator_jobs_total{kind=\"source\",outcome=\"retry\"}")
            .await,
        0.0
    );
    assert_eq!(
        copyrator
            .metric("copyrator_jobs_total{kind=\"source\",outcome=\"failed\"}")
            .await,
        0.0
    );
    copyrator.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn service_account_token_secret_is_never_copied() {
    let env = TestEnv::new().await;
    let copyrator = Copyrator::start(Options::default()).await;
    let src = env.namespace("sa-src", &[]).await;
    let dest = env.namespace("sa-dest", &[]).await;
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
    env.secrets(&src)
        .create(&PostParams::default(), &token)
        .await
        .unwrap();
    eventually(
        CONVERGE,
        "a warning that the token is not copied",
        || async {
            let e = warning_events(&env, &src, "sa-token", "ServiceAccountTokenNotCopied").await;
            (!e.is_empty()).then_some(())
        },
    )
    .await;
    assert!(
        env.secrets(&dest)
            .get_opt("sa-token")
            .await
            .unwrap()
            .is_none()
    );
    copyrator.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn immutable_source_replaced_by_a_new_version_recreates_the_copies() {
    let env = TestEnv::new().await;
    let copyrator = Copyrator::start(Options::default()).await;
    let src = env.namespace("imm-src", &[]).await;
    let dest = env.namespace("imm-dest", &[]).await;
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
    env.secrets(&src)
        .create(&PostParams::default(), &make("1"))
        .await
        .unwrap();
    let first = wait_secret_value(&env, &dest, "frozen", "v", "1").await;
    assert_eq!(first.immutable, Some(true));
    // An immutable Secret changes by being replaced.
    env.secrets(&src)
        .delete("frozen", &DeleteParams::default())
        .await
        .unwrap();
    env.secrets(&src)
        .create(&PostParams::default(), &make("2"))
        .await
        .unwrap();
    let second = wait_secret_value(&env, &dest, "frozen", "v", "2").await;
    assert_eq!(second.immutable, Some(true));
    assert_ne!(
        first.metadata.uid, second.metadata.uid,
        "recreated, not updated"
    );
    copyrator.stop().await;
    env.cleanup().await;
}

/// The API server refuses to update an immutable copy, or to change a Secret's type in place
/// (422 Invalid with a cause on that field): such a copy is deleted and created again.
#[tokio::test]
async fn a_copy_that_cannot_change_in_place_is_recreated() {
    let env = TestEnv::new().await;
    let copyrator = Copyrator::start(Options::default()).await;
    let src = env.namespace("inplace-src", &[]).await;
    let dest = env.namespace("inplace-dest", &[]).await;
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
        let api = env.secrets(&src);
        async move {
            api.delete("cred", &DeleteParams::default()).await.ok();
            api.create(&PostParams::default(), &s).await.unwrap();
        }
    };
    env.secrets(&src)
        .create(&PostParams::default(), &make("1", true, "Opaque"))
        .await
        .unwrap();
    let frozen = wait_secret_value(&env, &dest, "cred", "v", "1").await;
    assert_eq!(frozen.immutable, Some(true));

    // Immutable -> mutable with new data: the update is refused (data and immutable are
    // forbidden to change), so the copy is replaced.
    replace_source(make("2", false, "Opaque")).await;
    let thawed = wait_secret_value(&env, &dest, "cred", "v", "2").await;
    assert_eq!(thawed.immutable, Some(false));
    assert_ne!(frozen.metadata.uid, thawed.metadata.uid, "recreated");

    // Another type: a Secret's type never changes in place.
    replace_source(make("3", false, "example.com/token")).await;
    let retyped = wait_secret_value(&env, &dest, "cred", "v", "3").await;
    assert_eq!(retyped.type_.as_deref(), Some("example.com/token"));
    assert_ne!(thawed.metadata.uid, retyped.metadata.uid, "recreated");
    for outcome in ["retry", "failed"] {
        let sample = format!("copyrator_jobs_total{{kind=\"source\",outcome=\"{outcome}\"}}");
        assert_eq!(
            copyrator.metric(&sample).await,
            0.0,
            "handled, not {outcome}"
        );
    }
    copyrator.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn source_opting_out_by_label_removes_its_copies() {
    let env = TestEnv::new().await;
    let copyrator = Copyrator::start(Options::default()).await;
    let src = env.namespace("optout-src", &[]).await;
    let dest = env.namespace("optout-dest", &[]).await;
    env.secrets(&src)
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
    wait_secret_value(&env, &dest, "cred", "v", "1").await;
    env.secrets(&src)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {marks::SOURCE_LABEL: null}}})),
        )
        .await
        .unwrap();
    wait_secret_gone(&env, &dest, "cred").await;
    copyrator.stop().await;
    env.cleanup().await;
}

#[tokio::test]
async fn steady_state_resync_writes_nothing() {
    let env = TestEnv::new().await;
    let copyrator = Copyrator::start(Options {
        resync_interval: "1s",
        ..Default::default()
    })
    .await;
    let src = env.namespace("steady-src", &[]).await;
    let sel = format!("steady={}", env.id);
    let mut targets = Vec::new();
    for i in 0..3 {
        targets.push(
            env.namespace(&format!("steady-{i}"), &[("steady", &env.id)])
                .await,
        );
    }
    env.secrets(&src)
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
        wait_secret_value(&env, ns, "cred", "v", "1").await;
    }
    let versions = || async {
        let mut out = Vec::new();
        for ns in &targets {
            out.push(
                env.secrets(ns)
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
    let before = copyrator.metrics().await;
    let resyncs_before = metric_value(&before, resyncs);
    eventually(Duration::from_secs(15), "three more resyncs", || async {
        (copyrator.metric(resyncs).await >= resyncs_before + 3.0).then_some(())
    })
    .await;
    let after = copyrator.metrics().await;
    assert_eq!(
        writes(&after),
        writes(&before),
        "resyncs in steady state write nothing"
    );
    assert_eq!(rv, versions().await);
    copyrator.stop().await;
    env.cleanup().await;
}

/// A copy edited by hand while copyrator was down is found by the resync from metadata alone
/// (another field manager owns its data) and restored, though the source never changed.
#[tokio::test]
async fn hand_edit_made_while_down_is_restored_by_the_startup_resync() {
    let env = TestEnv::new().await;
    let copyrator = Copyrator::start(Options::default()).await;
    let src = env.namespace("tamper-src", &[]).await;
    let dest = env.namespace("tamper-dest", &[]).await;
    let untouched = env.namespace("tamper-untouched", &[]).await;
    env.secrets(&src)
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
    wait_secret_value(&env, &dest, "cred", "v", "original").await;
    let untouched_rv = wait_secret_value(&env, &untouched, "cred", "v", "original")
        .await
        .metadata
        .resource_version;
    copyrator.kill().await;

    env.secrets(&dest)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"data": {"v": "dGFtcGVyZWQ="}, "metadata": {"labels": {"sneaky": "yes"}}}),
            ),
        )
        .await
        .unwrap();

    let copyrator = Copyrator::start(Options::default()).await;
    let restored = wait_secret_value(&env, &dest, "cred", "v", "original").await;
    assert!(!restored.metadata.labels.unwrap().contains_key("sneaky"));
    assert_eq!(
        env.secrets(&untouched)
            .get("cred")
            .await
            .unwrap()
            .metadata
            .resource_version,
        untouched_rv,
        "copies nobody touched are not rewritten"
    );
    copyrator.stop().await;
    env.cleanup().await;
}
