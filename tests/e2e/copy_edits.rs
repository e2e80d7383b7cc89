//! Copies deleted or edited by someone else are restored (SPEC §4.4): copyrator learns of it
//! from its watch of managed copies (no webhook is registered for copies).

use crate::common;

use common::*;
use copyrator::marks;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

#[tokio::test]
async fn hand_deleted_and_hand_edited_copies_are_restored_from_the_copies_watch() {
    let t = Harness::start(Options::default()).await;
    let key = t.name("edits");
    let src = t.namespace("edits-src", &[]).await;
    let dest = t.namespace("edits", &[(&key, "yes")]).await;
    // The namespace jobs' second looks (a second after their admission) would make a deleted
    // copy again: let them run first, so that only the copies watch can restore what follows.
    t.wait_metric(
        "copyrator_jobs_total{kind=\"namespace\",outcome=\"ok\"}",
        "both namespaces' jobs and their second looks",
        |v| v >= 4.0,
    )
    .await;
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret(
                "cred",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &format!("{key}=yes"))],
                &[("password", "s3cret")],
            ),
        )
        .await
        .unwrap();
    let copy = t
        .wait_value::<Secret>(&dest, "cred", "password", "s3cret")
        .await;
    let jobs = "copyrator_jobs_total{kind=\"copy\",outcome=\"ok\"}";
    let before = t.metric(jobs).await;

    // Deleted by hand: back, as a new object.
    t.secrets(&dest)
        .delete("cred", &DeleteParams::default())
        .await
        .unwrap();
    let restored = t
        .wait_for::<Secret>(&dest, "cred", "recreated", |s| s.uid() != copy.uid())
        .await;
    assert_eq!(
        secret_value(&restored, "password").as_deref(),
        Some("s3cret")
    );

    // Edited by hand: its content restored, keys added by hand removed.
    t.secrets(&dest)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"password": "aGFja2Vk", "extra": "eA=="}})),
        )
        .await
        .unwrap();
    let restored = t
        .wait_for::<Secret>(&dest, "cred", "restored", |s| {
            secret_value(s, "password").as_deref() == Some("s3cret")
                && secret_value(s, "extra").is_none()
        })
        .await;
    assert_eq!(
        restored
            .labels()
            .get(marks::MANAGED_BY_LABEL)
            .map(String::as_str),
        Some("copyrator")
    );
    // Both came from copy jobs, which only the copies watch queues.
    assert!(t.metric(jobs).await >= before + 2.0);

    // Edited under copyrator's own field manager name, as anyone may write it (`kubectl
    // edit --field-manager=copyrator`), the marks left as they were: restored all the same.
    // Who wrote is known by the versions copyrator's own writes returned (SPEC §5).
    t.secrets(&dest)
        .patch(
            "cred",
            &PatchParams {
                field_manager: Some(marks::FIELD_MANAGER.into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"data": {"password": "Zm9yZ2Vk"}})),
        )
        .await
        .unwrap();
    t.wait_value::<Secret>(&dest, "cred", "password", "s3cret")
        .await;

    // copyrator's own writes are not taken for edits: a source update fans out and the copy
    // jobs stay where they are.
    let after_edits = t.metric(jobs).await;
    t.secrets(&src)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": "rotated"}})),
        )
        .await
        .unwrap();
    t.wait_value::<Secret>(&dest, "cred", "password", "rotated")
        .await;
    stays(
        std::time::Duration::from_millis(500),
        "no copy job for copyrator's own update",
        || async { t.metric(jobs).await == after_edits },
    )
    .await;

    // Nor its own deletes: the source deleted, its copy goes with it, and no copy job runs
    // (the copy's DELETED event is copyrator's own echo, not a deletion to restore).
    let before_delete = copy_jobs(&t).await;
    t.secrets(&src)
        .delete("cred", &DeleteParams::default())
        .await
        .unwrap();
    t.wait_gone::<Secret>(&dest, "cred").await;
    stays(
        std::time::Duration::from_millis(500),
        "no copy job for copyrator's own delete",
        || async { copy_jobs(&t).await == before_delete },
    )
    .await;
    t.finish().await;
}

/// Copy jobs finished, whatever their outcome.
async fn copy_jobs(t: &Harness) -> f64 {
    t.metrics()
        .await
        .lines()
        .filter(|l| l.starts_with("copyrator_jobs_total{kind=\"copy\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A source's job finds its copies in copyrator's index of them (kept by the copies watch and
/// by its own writes, SPEC §5), not by a LIST that walks every Secret; where the index is
/// behind (a copy deleted a moment before), the preconditioned write fails, the copy is read
/// again and written; an object at a target name that copyrator never made stays untouched.
#[tokio::test]
async fn a_source_job_finds_its_copies_in_the_copy_index_and_writes_nothing_it_does_not_own() {
    let t = Harness::start(Options::default()).await;
    let key = t.name("index");
    let src = t.namespace("index-src", &[]).await;
    let a = t.namespace("index-a", &[(&key, "yes")]).await;
    let b = t.namespace("index-b", &[(&key, "yes")]).await;
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret(
                "cred",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &format!("{key}=yes"))],
                &[("password", "v1")],
            ),
        )
        .await
        .unwrap();
    for ns in [&a, &b] {
        t.wait_value::<Secret>(ns, "cred", "password", "v1").await;
    }
    t.wait_metric(
        "copyrator_index_objects{feed=\"copied secrets\"}",
        "both copies in the index",
        |v| v >= 2.0,
    )
    .await;
    // Each job's copies, sources and target namespaces come from the indexes the watches keep.
    let served = |what: &str, from: &str| {
        format!("copyrator_index_reads_total{{what=\"{what}\",served_from=\"{from}\"}}")
    };
    let whats = ["copies", "sources", "namespaces"];
    let mut index_before = Vec::new();
    let mut lists_before = Vec::new();
    for what in whats {
        index_before.push(t.metric(&served(what, "index")).await);
        lists_before.push(t.metric(&served(what, "list")).await);
    }
    // The post-write re-check looks the written namespaces up in the index as well: no GET
    // of each, no LIST of every namespace from etcd after a job that wrote.
    let namespace_reads = ["get", "list"].map(|verb| {
        format!("copyrator_api_requests_total{{verb=\"{verb}\",resource=\"namespaces\"}}")
    });
    let mut namespace_reads_before = Vec::new();
    for sample in &namespace_reads {
        namespace_reads_before.push(t.metric(sample).await);
    }
    let source_jobs = "copyrator_jobs_total{kind=\"source\",outcome=\"ok\"}";
    let source_jobs_before = t.metric(source_jobs).await;
    let update = |value: &'static str| {
        let secrets = t.secrets(&src);
        async move {
            secrets
                .patch(
                    "cred",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"stringData": {"password": value}})),
                )
                .await
                .unwrap();
        }
    };

    update("v2").await;
    for ns in [&a, &b] {
        t.wait_value::<Secret>(ns, "cred", "password", "v2").await;
    }
    // The re-check runs after the writes, inside the job: wait for the job to end.
    t.wait_metric(source_jobs, "the source's job done", |n| {
        n > source_jobs_before
    })
    .await;
    for (i, what) in whats.into_iter().enumerate() {
        assert!(
            t.metric(&served(what, "index")).await > index_before[i],
            "{what} served from the index"
        );
        assert_eq!(
            t.metric(&served(what, "list")).await,
            lists_before[i],
            "no LIST of {what}"
        );
    }
    for (sample, before) in namespace_reads.iter().zip(namespace_reads_before) {
        assert_eq!(
            t.metric(sample).await,
            before,
            "no read of namespaces, the re-check after writing included: {sample}"
        );
    }

    // Deleted by hand and the source updated at once: whatever the index held, the copy comes
    // back with the newest value.
    t.secrets(&a)
        .delete("cred", &DeleteParams::default())
        .await
        .unwrap();
    update("v3").await;
    for ns in [&a, &b] {
        t.wait_value::<Secret>(ns, "cred", "password", "v3").await;
    }

    // Someone else's Secret at the target name of a namespace that opts in later: the index has
    // never seen it (it carries no ownership label); the create fails and it is left alone.
    let c = t.namespace("index-c", &[]).await;
    t.secrets(&c)
        .create(
            &PostParams::default(),
            &secret("cred", &[], &[], &[("password", "mine")]),
        )
        .await
        .unwrap();
    t.label_namespace(&c, json!({ key.as_str(): "yes" })).await;
    update("v4").await;
    for ns in [&a, &b] {
        t.wait_value::<Secret>(ns, "cred", "password", "v4").await;
    }
    stays(
        std::time::Duration::from_millis(500),
        "someone else's Secret untouched",
        || async {
            let theirs = t.secrets(&c).get("cred").await.unwrap();
            secret_value(&theirs, "password").as_deref() == Some("mine")
                && !theirs.labels().contains_key(marks::MANAGED_BY_LABEL)
        },
    )
    .await;
    t.finish().await;
}
