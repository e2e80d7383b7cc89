//! CopyRule resources end to end: SPEC §8 scenarios 2 and 3, deletion policies, selectors,
//! conflicts between rules, adoption, validation at admission, and the status users read.

use crate::common;

use std::time::Duration;

use common::{build::Labelled, *};
use copyrator::{
    copyrule::{ConflictPolicy, CopyRule, CopyRuleSpec, CopyRuleStatus, DeletionPolicy},
    marks,
    model::Kind,
};
use k8s_openapi::{
    api::{
        core::v1::{ConfigMap, Secret},
        events::v1::Event,
    },
    apimachinery::pkg::apis::meta::v1::LabelSelector,
};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn spec(kind: Kind, source_ns: &str) -> CopyRuleSpec {
    CopyRuleSpec {
        clusters: None,
        api_version: None,
        kind: kind.as_str().into(),
        source_namespace: source_ns.into(),
        sources: None,
        drop_expired: false,
        template: None,
        create_once: false,
        source_name: None,
        source_selector: None,
        namespace_selector: None,
        namespaces: vec![],
        exclude_namespaces: vec![],
        target_name: None,
        deletion_policy: DeletionPolicy::Delete,
        conflict_policy: ConflictPolicy::Skip,
        image_pull_secret: false,
        read_only: None,
        keys: None,
        target: None,
    }
}

fn match_labels(k: &str, v: &str) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_labels: Some([(k.to_string(), v.to_string())].into()),
        match_expressions: None,
    })
}

async fn cm_data(env: &TestEnv, ns: &str, name: &str, key: &str) -> Option<String> {
    env.config_maps(ns)
        .get_opt(name)
        .await
        .ok()
        .flatten()
        .and_then(|c| c.data?.get(key).cloned())
}

/// A predicate for the waits: the CopyRule has a status, satisfying `check`.
fn status_is(check: impl Fn(&CopyRuleStatus) -> bool) -> impl Fn(&CopyRule) -> bool {
    move |r| r.status.as_ref().is_some_and(&check)
}

fn ready(s: &CopyRuleStatus) -> Option<(&str, &str, &str)> {
    s.conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.as_str(), c.reason.as_str(), c.message.as_str()))
}

/// SPEC §8.2: a Copyrator-style rule copies every matching ConfigMap and follows changes.
#[tokio::test]
async fn selector_rule_copies_every_matching_config_map_and_follows_changes() {
    let t = Harness::start(Options {
        resync_interval: "2s",
        ..Default::default()
    })
    .await;
    let src = t.namespace("cr-src", &[]).await;
    let t1 = t.namespace("cr-t1", &[("copies", &t.id)]).await;
    let t2 = t.namespace("cr-t2", &[("copies", &t.id)]).await;
    let other = t.namespace("cr-other", &[]).await;
    for name in ["alpha", "beta"] {
        build::config_map(name)
            .data("v", name)
            .label("copyrator", "true")
            .create(&t, &src)
            .await;
    }
    build::config_map("gamma")
        .data("v", "gamma")
        .create(&t, &src)
        .await;
    let name = build::copy_rule("selector")
        .of(Kind::ConfigMap)
        .sources_labelled(&src, ("copyrator", "true"))
        .copied_where(("copies", &t.id))
        .create(&t)
        .await;
    for ns in [&t1, &t2] {
        t.wait_value::<ConfigMap>(ns, "alpha", "v", "alpha").await;
        t.wait_value::<ConfigMap>(ns, "beta", "v", "beta").await;
        assert!(
            cm_data(&t, ns, "gamma", "v").await.is_none(),
            "gamma is not selected"
        );
    }
    assert!(cm_data(&t, &other, "alpha", "v").await.is_none());
    // copyrator labelled the selected sources so their changes reach the webhook.
    let alpha = t.config_maps(&src).get("alpha").await.unwrap();
    assert_eq!(
        alpha
            .metadata
            .labels
            .unwrap()
            .get(marks::SOURCE_LABEL)
            .map(String::as_str),
        Some("true")
    );

    t.config_maps(&src)
        .patch(
            "beta",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "beta-2"}})),
        )
        .await
        .unwrap();
    for ns in [&t1, &t2] {
        t.wait_value::<ConfigMap>(ns, "beta", "v", "beta-2").await;
    }
    // A new matching ConfigMap (not labelled as a source) is picked up by the resync.
    build::config_map("delta")
        .data("v", "delta")
        .label("copyrator", "true")
        .create(&t, &src)
        .await;
    t.wait_value::<ConfigMap>(&t2, "delta", "v", "delta").await;

    let status = t
        .wait_for::<CopyRule>(
            "",
            &name,
            "6 copies in sync",
            status_is(|s| s.synced_copies == 6),
        )
        .await
        .status
        .unwrap();
    assert_eq!(status.target_namespaces, 2);
    assert_eq!(
        ready(&status),
        Some(("True", "Synced", "6/6 copies in sync"))
    );
    assert_eq!(
        status.source.as_deref(),
        Some(format!("{src}/{{copyrator=true}}").as_str())
    );
    t.finish().await;
}

/// SPEC §8.3: a ConfigMapSync-style rule keeps one ConfigMap in sync in one namespace.
#[tokio::test]
async fn named_rule_keeps_one_config_map_in_sync_in_one_namespace() {
    let t = Harness::start(Options::default()).await;
    let src = t.namespace("sync-src", &[]).await;
    let dest = t.namespace("sync-dest", &[]).await;
    let bystander = t.namespace("sync-bystander", &[]).await;
    build::config_map("app-config")
        .data("mode", "blue")
        .create(&t, &src)
        .await;
    let name = build::copy_rule("sync")
        .of(Kind::ConfigMap)
        .source(&src, "app-config")
        .copied_to(&[&dest])
        .create(&t)
        .await;
    let copy = t
        .wait_value::<ConfigMap>(&dest, "app-config", "mode", "blue")
        .await;
    let annotations = copy.metadata.annotations.unwrap();
    assert_eq!(
        annotations.get(marks::RULE_ANNOTATION),
        Some(&format!("copyrule/{name}"))
    );
    for change in ["green", "red"] {
        t.config_maps(&src)
            .patch(
                "app-config",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"mode": change}})),
            )
            .await
            .unwrap();
        t.wait_value::<ConfigMap>(&dest, "app-config", "mode", change)
            .await;
    }
    assert!(
        cm_data(&t, &bystander, "app-config", "mode")
            .await
            .is_none()
    );
    let status = t
        .wait_for::<CopyRule>(
            "",
            &name,
            "Ready",
            status_is(|s| ready(s).is_some_and(|r| r.0 == "True")),
        )
        .await
        .status
        .unwrap();
    assert_eq!((status.target_namespaces, status.synced_copies), (1, 1));
    t.finish().await;
}

#[tokio::test]
async fn deleting_a_rule_deletes_or_retains_its_copies_per_policy() {
    let t = Harness::start(Options::default()).await;
    let src = t.namespace("del-src", &[]).await;
    let dest = t.namespace("del-dest", &[]).await;
    for name in ["gone", "kept"] {
        t.config_maps(&src)
            .create(
                &PostParams::default(),
                &config_map(name, &[], &[], &[("v", name)]),
            )
            .await
            .unwrap();
    }
    let delete_rule = t
        .copy_rule(
            "deleter",
            CopyRuleSpec {
                source_name: Some("gone".into()),
                namespaces: vec![dest.clone()],
                ..spec(Kind::ConfigMap, &src)
            },
        )
        .await;
    let retain_rule = t
        .copy_rule(
            "retainer",
            CopyRuleSpec {
                source_name: Some("kept".into()),
                namespaces: vec![dest.clone()],
                deletion_policy: DeletionPolicy::Retain,
                ..spec(Kind::ConfigMap, &src)
            },
        )
        .await;
    t.wait_value::<ConfigMap>(&dest, "gone", "v", "gone").await;
    t.wait_value::<ConfigMap>(&dest, "kept", "v", "kept").await;

    t.rules()
        .delete(&delete_rule, &DeleteParams::default())
        .await
        .unwrap();
    t.rules()
        .delete(&retain_rule, &DeleteParams::default())
        .await
        .unwrap();
    t.wait_gone::<ConfigMap>(&dest, "gone").await;
    stays(
        Duration::from_millis(800),
        "a Retain rule's copy stays",
        || async { cm_data(&t, &dest, "kept", "v").await.as_deref() == Some("kept") },
    )
    .await;
    t.finish().await;
}

#[tokio::test]
async fn namespace_leaving_the_selector_loses_its_copy_and_excluded_namespaces_get_none() {
    let t = Harness::start(Options::default()).await;
    let src = t.namespace("sel-src", &[]).await;
    let stay = t.namespace("sel-stay", &[("tier", &t.id)]).await;
    let leave = t.namespace("sel-leave", &[("tier", &t.id)]).await;
    let excluded = t.namespace("sel-excluded", &[("tier", &t.id)]).await;
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret("token", &[], &[], &[("t", "x")]),
        )
        .await
        .unwrap();
    let name = t
        .copy_rule(
            "tier",
            CopyRuleSpec {
                source_name: Some("token".into()),
                target_name: Some("pull-secret".into()),
                namespace_selector: match_labels("tier", &t.id),
                exclude_namespaces: vec![excluded.clone()],
                ..spec(Kind::Secret, &src)
            },
        )
        .await;
    for ns in [&stay, &leave] {
        t.wait_for::<Secret>(ns, "pull-secret", "renamed copy", |_| true)
            .await;
    }
    assert!(
        t.secrets(&excluded)
            .get_opt("pull-secret")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        t.secrets(&stay).get_opt("token").await.unwrap().is_none(),
        "copies carry the targetName"
    );

    t.label_namespace(&leave, json!({"tier": null})).await;
    // The copy is removed from the namespace that left.
    t.wait_gone::<Secret>(&leave, "pull-secret").await;
    assert!(
        t.secrets(&stay)
            .get_opt("pull-secret")
            .await
            .unwrap()
            .is_some()
    );
    let status = t
        .wait_for::<CopyRule>(
            "",
            &name,
            "1 target",
            status_is(|s| s.target_namespaces == 1 && s.synced_copies == 1),
        )
        .await
        .status
        .unwrap();
    assert_eq!(ready(&status).map(|r| r.0), Some("True"));
    t.finish().await;
}

#[tokio::test]
async fn two_rules_for_one_target_do_not_fight_and_the_second_reports_a_conflict() {
    let t = Harness::start(Options::default()).await;
    let src = t.namespace("fight-src", &[]).await;
    let dest = t.namespace("fight-dest", &[]).await;
    for (name, v) in [("one", "1"), ("two", "2")] {
        t.config_maps(&src)
            .create(
                &PostParams::default(),
                &config_map(name, &[], &[], &[("v", v)]),
            )
            .await
            .unwrap();
    }
    let first = t
        .copy_rule(
            "first",
            CopyRuleSpec {
                source_name: Some("one".into()),
                target_name: Some("shared".into()),
                namespaces: vec![dest.clone()],
                ..spec(Kind::ConfigMap, &src)
            },
        )
        .await;
    t.wait_value::<ConfigMap>(&dest, "shared", "v", "1").await;
    let second = t
        .copy_rule(
            "second",
            CopyRuleSpec {
                source_name: Some("two".into()),
                target_name: Some("shared".into()),
                namespaces: vec![dest.clone()],
                ..spec(Kind::ConfigMap, &src)
            },
        )
        .await;
    let status = t
        .wait_for::<CopyRule>(
            "",
            &second,
            "a conflict",
            status_is(|s| !s.conflicts.is_empty()),
        )
        .await
        .status
        .unwrap();
    assert_eq!(status.conflicts[0].namespace, dest);
    assert_eq!(status.conflicts[0].name, "shared");
    assert!(
        status.conflicts[0].reason.contains(&first),
        "{:?}",
        status.conflicts[0]
    );
    assert_eq!(
        ready(&status).map(|r| (r.0, r.1)),
        Some(("False", "Conflicts"))
    );

    // No ping-pong: the copy keeps the first rule's content and is not rewritten.
    let rv = t
        .config_maps(&dest)
        .get("shared")
        .await
        .unwrap()
        .metadata
        .resource_version;
    stays(
        Duration::from_millis(800),
        "the first rule keeps the target",
        || async {
            let c = t.config_maps(&dest).get("shared").await.unwrap();
            c.metadata.resource_version == rv
                && c.data.unwrap().get("v").map(String::as_str) == Some("1")
        },
    )
    .await;
    let first_status = t
        .wait_for::<CopyRule>(
            "",
            &first,
            "Ready",
            status_is(|s| ready(s).is_some_and(|r| r.0 == "True")),
        )
        .await
        .status
        .unwrap();
    assert!(first_status.conflicts.is_empty());
    t.finish().await;
}

#[tokio::test]
async fn overwrite_policy_adopts_an_unmanaged_object_and_says_so() {
    let t = Harness::start(Options::default()).await;
    let src = t.namespace("adopt-src", &[]).await;
    let dest = t.namespace("adopt-dest", &[]).await;
    t.config_maps(&dest)
        .create(
            &PostParams::default(),
            &config_map("settings", &[], &[], &[("v", "hand made")]),
        )
        .await
        .unwrap();
    t.config_maps(&src)
        .create(
            &PostParams::default(),
            &config_map("settings", &[], &[], &[("v", "managed")]),
        )
        .await
        .unwrap();
    let name = t
        .copy_rule(
            "adopter",
            CopyRuleSpec {
                source_name: Some("settings".into()),
                namespaces: vec![dest.clone()],
                conflict_policy: ConflictPolicy::Overwrite,
                ..spec(Kind::ConfigMap, &src)
            },
        )
        .await;
    let adopted = t
        .wait_value::<ConfigMap>(&dest, "settings", "v", "managed")
        .await;
    assert_eq!(
        adopted
            .metadata
            .labels
            .unwrap()
            .get(marks::MANAGED_BY_LABEL)
            .map(String::as_str),
        Some("copyrator")
    );
    t.wait_for_any::<Event>(
        RULE_EVENTS,
        "a CopyAdopted event on the rule",
        about_rule(&name, "CopyAdopted"),
    )
    .await;
    t.finish().await;
}

#[tokio::test]
async fn skip_policy_reports_the_unmanaged_object_in_status_and_events_once() {
    let t = Harness::start(Options {
        resync_interval: "1s",
        ..Default::default()
    })
    .await;
    let src = t.namespace("skip-src", &[]).await;
    let dest = t.namespace("skip-dest", &[]).await;
    let ok = t.namespace("skip-ok", &[]).await;
    t.secrets(&dest)
        .create(
            &PostParams::default(),
            &secret("pull-secret", &[], &[], &[("mine", "yes")]),
        )
        .await
        .unwrap();
    let before = t.secrets(&dest).get("pull-secret").await.unwrap();
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret("registry", &[], &[], &[("auth", "token")]),
        )
        .await
        .unwrap();
    let name = t
        .copy_rule(
            "skipper",
            CopyRuleSpec {
                source_name: Some("registry".into()),
                target_name: Some("pull-secret".into()),
                namespaces: vec![dest.clone(), ok.clone()],
                ..spec(Kind::Secret, &src)
            },
        )
        .await;
    let status = t
        .wait_for::<CopyRule>(
            "",
            &name,
            "a conflict",
            status_is(|s| !s.conflicts.is_empty() && s.synced_copies == 1),
        )
        .await
        .status
        .unwrap();
    assert_eq!(status.target_namespaces, 2);
    assert_eq!(
        status.conflicts[0].reason,
        "an object not managed by copyrator exists"
    );
    assert_eq!(
        ready(&status),
        Some(("False", "Conflicts", "1/2 copies in sync, 1 in conflict"))
    );
    assert!(status.last_sync_time.is_some());
    assert!(status.observed_generation.is_some());

    // Several resyncs later: still untouched, one event, and the status rewritten only for
    // each resync's verification stamp (SPEC §2.2), nothing else in it changed.
    let status_writes =
        "copyrator_api_requests_total{verb=\"patch\",resource=\"copyrules/status\"}";
    let resyncs = "copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}";
    let writes_before = t.metric(status_writes).await;
    let resyncs_before = t.metric(resyncs).await;
    eventually(Duration::from_secs(15), "three more resyncs", || async {
        (t.metric(resyncs).await >= resyncs_before + 3.0).then_some(())
    })
    .await;
    let status_written = t.metric(status_writes).await - writes_before;
    let resynced = t.metric(resyncs).await - resyncs_before;
    assert!(
        status_written <= resynced + 1.0,
        "at most one status write per resync: {status_written} for {resynced}"
    );
    let later = t.rules().get(&name).await.unwrap().status.unwrap();
    assert!(later.last_verified_time > status.last_verified_time);
    let times = |s: &CopyRuleStatus| CopyRuleStatus {
        last_sync_time: None,
        last_verified_time: None,
        ..s.clone()
    };
    assert_eq!(times(&later), times(&status), "nothing else changed");
    let events = rule_events(&t, &name, "CopyConflict").await;
    assert_eq!(
        events.len(),
        1,
        "one deduplicated conflict event: {events:?}"
    );
    assert!(
        events[0].series.is_none(),
        "not re-published on every resync"
    );
    let after = t.secrets(&dest).get("pull-secret").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    assert_eq!(after.data, before.data);
    t.finish().await;
}

#[tokio::test]
async fn invalid_rules_are_denied_at_admission_naming_the_field() {
    let t = Harness::start(Options::default()).await;
    let cases: Vec<(CopyRuleSpec, &str)> = vec![
        (
            CopyRuleSpec {
                source_name: Some("a".into()),
                source_selector: match_labels("x", "y"),
                namespaces: vec!["dest".into()],
                ..spec(Kind::ConfigMap, "platform")
            },
            "spec.sourceName",
        ),
        (
            CopyRuleSpec {
                namespaces: vec!["dest".into()],
                ..spec(Kind::ConfigMap, "platform")
            },
            "spec.sourceName",
        ),
        (
            CopyRuleSpec {
                source_selector: match_labels("x", "y"),
                target_name: Some("renamed".into()),
                namespaces: vec!["dest".into()],
                ..spec(Kind::ConfigMap, "platform")
            },
            "spec.targetName",
        ),
        (
            CopyRuleSpec {
                source_name: Some("a".into()),
                namespace_selector: Some(LabelSelector {
                    match_labels: None,
                    match_expressions: Some(vec![
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                            key: "env".into(),
                            operator: "Matches".into(),
                            values: Some(vec!["prod".into()]),
                        },
                    ]),
                }),
                ..spec(Kind::ConfigMap, "platform")
            },
            "spec.namespaceSelector",
        ),
        (
            CopyRuleSpec {
                source_name: Some("a".into()),
                namespaces: vec!["platform".into()],
                ..spec(Kind::ConfigMap, "platform")
            },
            "spec.namespaces",
        ),
    ];
    for (i, (spec, field)) in cases.into_iter().enumerate() {
        let name = t.name(&format!("invalid-{i}"));
        let err = t
            .rules()
            .create(&PostParams::default(), &CopyRule::new(&name, spec))
            .await
            .expect_err("denied");
        let msg = err.to_string();
        assert!(msg.contains(field), "case {i}: {msg} should name {field}");
        assert!(t.rules().get_opt(&name).await.unwrap().is_none());
    }
    t.finish().await;
}

#[tokio::test]
async fn invalid_rule_that_got_in_while_the_webhook_was_down_is_not_ready() {
    // No webhooks: the API server stores whatever passes the schema.
    let t = Harness::start(Options {
        webhooks: false,
        resync_interval: "1s",
        ..Default::default()
    })
    .await;
    let name = t
        .copy_rule(
            "sneaked-in",
            CopyRuleSpec {
                source_name: Some("a".into()),
                source_selector: match_labels("x", "y"),
                namespaces: vec!["dest".into()],
                ..spec(Kind::ConfigMap, "platform")
            },
        )
        .await;
    let status = t
        .wait_for::<CopyRule>("", &name, "Ready=False", status_is(|s| ready(s).is_some()))
        .await
        .status
        .unwrap();
    let (state, reason, message) = ready(&status).unwrap();
    assert_eq!((state, reason), ("False", "Invalid"));
    assert!(message.contains("spec.sourceName"), "{message}");
    t.finish().await;
}

#[tokio::test]
async fn kubectl_get_copyrules_shows_the_columns_with_real_values() {
    let t = Harness::start(Options::default()).await;
    let src = t.namespace("cols-src", &[]).await;
    let d1 = t.namespace("cols-d1", &[]).await;
    let d2 = t.namespace("cols-d2", &[]).await;
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret("cred", &[], &[], &[("k", "v")]),
        )
        .await
        .unwrap();
    let name = t
        .copy_rule(
            "cols",
            CopyRuleSpec {
                source_name: Some("cred".into()),
                namespaces: vec![d1, d2],
                ..spec(Kind::Secret, &src)
            },
        )
        .await;
    t.wait_for::<CopyRule>("", &name, "2 synced", status_is(|s| s.synced_copies == 2))
        .await;

    // What `kubectl get copyrules` prints comes from the API server's Table output.
    let req = axum::http::Request::get(format!("/apis/copyrator.io/v1alpha1/copyrules/{name}"))
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .unwrap();
    let table: serde_json::Value = t.client.request(req).await.unwrap();
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        columns,
        [
            "Name", "Kind", "Source", "Targets", "Synced", "Ready", "Age"
        ]
    );
    let cells = &table["rows"][0]["cells"];
    assert_eq!(cells[0], json!(name));
    assert_eq!(cells[1], json!("Secret"));
    assert_eq!(cells[2], json!(format!("{src}/cred")));
    assert_eq!(cells[3], json!(2));
    assert_eq!(cells[4], json!(2));
    assert_eq!(cells[5], json!("True"));
    t.finish().await;
}

#[tokio::test]
async fn rule_for_a_missing_source_is_not_ready_until_the_source_appears() {
    let t = Harness::start(Options::default()).await;
    let src = t.namespace("missing-src", &[]).await;
    let dest = t.namespace("missing-dest", &[]).await;
    let name = t
        .copy_rule(
            "waiting",
            CopyRuleSpec {
                source_name: Some("later".into()),
                namespaces: vec![dest.clone()],
                ..spec(Kind::ConfigMap, &src)
            },
        )
        .await;
    let status = t
        .wait_for::<CopyRule>(
            "",
            &name,
            "SourceNotFound",
            status_is(|s| ready(s).is_some_and(|r| r.1 == "SourceNotFound")),
        )
        .await
        .status
        .unwrap();
    assert_eq!(ready(&status).unwrap().0, "False");
    t.wait_for_any::<Event>(
        RULE_EVENTS,
        "a SourceNotFound event on the rule",
        about_rule(&name, "SourceNotFound"),
    )
    .await;

    // Created with the opt-in label, the source reaches the webhook at once.
    t.config_maps(&src)
        .create(
            &PostParams::default(),
            &config_map(
                "later",
                &[(marks::SOURCE_LABEL, "true")],
                &[],
                &[("v", "here")],
            ),
        )
        .await
        .unwrap();
    t.wait_value::<ConfigMap>(&dest, "later", "v", "here").await;
    t.wait_for::<CopyRule>(
        "",
        &name,
        "Ready",
        status_is(|s| ready(s).is_some_and(|r| r.0 == "True")),
    )
    .await;
    t.finish().await;
}

#[tokio::test]
async fn changing_a_rule_moves_its_copies() {
    let t = Harness::start(Options::default()).await;
    let src = t.namespace("move-src", &[]).await;
    let before = t.namespace("move-before", &[]).await;
    let after = t.namespace("move-after", &[]).await;
    t.config_maps(&src)
        .create(
            &PostParams::default(),
            &config_map("cfg", &[], &[], &[("v", "1")]),
        )
        .await
        .unwrap();
    let name = t
        .copy_rule(
            "mover",
            CopyRuleSpec {
                source_name: Some("cfg".into()),
                namespaces: vec![before.clone()],
                ..spec(Kind::ConfigMap, &src)
            },
        )
        .await;
    t.wait_value::<ConfigMap>(&before, "cfg", "v", "1").await;
    t.rules()
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"namespaces": [after]}})),
        )
        .await
        .unwrap();
    t.wait_value::<ConfigMap>(&after, "cfg", "v", "1").await;
    t.wait_gone::<ConfigMap>(&before, "cfg").await;
    let status = t
        .wait_for::<CopyRule>(
            "",
            &name,
            "generation 2 observed",
            status_is(|s| s.observed_generation == Some(2)),
        )
        .await
        .status
        .unwrap();
    assert_eq!((status.target_namespaces, status.synced_copies), (1, 1));
    t.finish().await;
}

/// A ConfigMap or Secret created after the rule with the matching label is copied at once (not
/// at the next resync, an hour away here); removing the label removes its copies; objects
/// without the label, or in other namespaces, cause copyrator no work at all.
#[tokio::test]
async fn a_source_that_starts_matching_a_selector_is_copied_at_once() {
    let t = Harness::start(Options::default()).await; // resync every hour
    let src = t.namespace("sel-src", &[]).await;
    let elsewhere = t.namespace("sel-elsewhere", &[]).await;
    let target_label = ("sel-target", t.id.as_str());
    let a = t.namespace("sel-a", &[target_label]).await;
    let b = t.namespace("sel-b", &[target_label]).await;
    for (name, kind) in [("cm", Kind::ConfigMap), ("secret", Kind::Secret)] {
        t.copy_rule(
            &format!("sel-{name}"),
            CopyRuleSpec {
                source_selector: match_labels("copyrator", "true"),
                namespace_selector: match_labels(target_label.0, target_label.1),
                ..spec(kind, &src)
            },
        )
        .await;
    }
    let selector_watches = "copyrator_selector_watches";
    t.wait_metric(selector_watches, "both selectors watched", |v| v == 2.0)
        .await;

    // Objects no rule selects: no admission call, no watch event, no job.
    let quiet = [
        "copyrator_admission_requests_total{endpoint=\"sources\",operation=\"CREATE\",outcome=\"allowed\"}",
        "copyrator_watch_events_total{feed=\"selected secrets\"}",
        "copyrator_jobs_total{kind=\"source\",outcome=\"ok\"}",
    ];
    let mut before = Vec::new();
    for sample in quiet {
        before.push(t.metric(sample).await);
    }
    for i in 0..10 {
        for ns in [&src, &elsewhere] {
            t.secrets(ns)
                .create(
                    &PostParams::default(),
                    &secret(
                        &format!("unrelated-{i}"),
                        &[("team", "x")],
                        &[],
                        &[("k", "v")],
                    ),
                )
                .await
                .unwrap();
        }
    }
    t.secrets(&elsewhere)
        .create(
            &PostParams::default(),
            &secret(
                "labelled-elsewhere",
                &[("copyrator", "true")],
                &[],
                &[("k", "v")],
            ),
        )
        .await
        .unwrap();

    // The new sources, labelled only as the rules' selectors ask.
    let created = std::time::Instant::now();
    t.config_maps(&src)
        .create(
            &PostParams::default(),
            &config_map("later-cm", &[("copyrator", "true")], &[], &[("v", "1")]),
        )
        .await
        .unwrap();
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret("later-secret", &[("copyrator", "true")], &[], &[("v", "1")]),
        )
        .await
        .unwrap();
    for ns in [&a, &b] {
        t.wait_value::<ConfigMap>(ns, "later-cm", "v", "1").await;
        t.wait_value::<Secret>(ns, "later-secret", "v", "1").await;
    }
    eprintln!(
        "copies of sources created later: all present {:?} after the creates",
        created.elapsed()
    );
    assert!(
        !t.secrets(&elsewhere)
            .get_opt("labelled-elsewhere")
            .await
            .unwrap()
            .unwrap()
            .metadata
            .labels
            .unwrap()
            .contains_key(copyrator::marks::SOURCE_LABEL),
        "an object in another namespace is not adopted"
    );
    // Only the two new sources caused work: a job each (and the sources webhook once they
    // carry the opt-in label their first job gave them).
    let after_events = t.metric(quiet[1]).await;
    assert!(
        after_events - before[1] >= 1.0,
        "the new Secret source came through its selector's watch"
    );
    assert!(
        after_events - before[1] <= 4.0,
        "unrelated objects caused watch events: {} -> {after_events}",
        before[1]
    );
    assert_eq!(
        t.metric(quiet[0]).await,
        before[0],
        "no sources-webhook call for CREATEs of objects without the opt-in label"
    );

    // Its changes follow, now through the label the first job added.
    t.config_maps(&src)
        .patch(
            "later-cm",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "2"}})),
        )
        .await
        .unwrap();
    t.wait_value::<ConfigMap>(&a, "later-cm", "v", "2").await;

    // The selector's label removed: the copies go.
    t.config_maps(&src)
        .patch(
            "later-cm",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"copyrator": null}}})),
        )
        .await
        .unwrap();
    t.wait_gone::<ConfigMap>(&a, "later-cm").await;
    t.wait_gone::<ConfigMap>(&b, "later-cm").await;

    t.finish().await;
}
