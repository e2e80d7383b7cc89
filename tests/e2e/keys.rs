//! Keys, kinds and types (SPEC §3.2), end to end: a cert-manager-style TLS Secret's CA becomes
//! a ConfigMap `ca-bundle` in every labelled namespace and follows the source's rotation, hand
//! edits and deletes; a rule asking key material into a ConfigMap is denied, or refused at
//! apply time when the source gains it later, and a canary private key is found in no
//! ConfigMap, log line, Event or metric; keys are renamed, types and kinds changed, and keys a
//! source lacks reported.

use crate::common;

pub(crate) mod passwords;
pub(crate) mod truststores;

use std::time::Duration;

use base64::{Engine, engine::general_purpose::STANDARD};
use common::*;
use copyrator::{
    copyrule::{CopyRule, CopyRuleSpec, CopyRuleStatus, KeySpec, TargetSpec},
    marks,
};
use k8s_openapi::{
    api::{
        core::v1::{ConfigMap, Secret},
        events::v1::Event,
    },
    apimachinery::pkg::apis::meta::v1::LabelSelector,
};
use kube::{
    Api,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

/// A self-signed CA certificate and its private key, PEM, made now.
fn pem_pair(name: &str) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
}

/// What cert-manager writes for a Certificate: a `kubernetes.io/tls` Secret with the CA, the
/// certificate and its key (all new). Returns it, the CA and the certificate.
fn tls_secret(name: &str) -> (Secret, String, String) {
    let (ca, _) = pem_pair("ca");
    let (cert, key) = pem_pair("server");
    let mut s = secret(
        name,
        &[],
        &[],
        &[("ca.crt", &ca), ("tls.crt", &cert), ("tls.key", &key)],
    );
    s.type_ = Some("kubernetes.io/tls".into());
    (s, ca, cert)
}

fn selecting(key: &str) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_labels: Some([(key.to_string(), "on".to_string())].into()),
        match_expressions: None,
    })
}

fn rule(source_ns: &str, source: &str) -> CopyRuleSpec {
    CopyRuleSpec {
        clusters: None,
        api_version: None,
        kind: "Secret".into(),
        source_namespace: source_ns.into(),
        sources: None,
        drop_expired: false,
        template: None,
        create_once: false,
        source_name: Some(source.into()),
        source_selector: None,
        namespace_selector: None,
        namespaces: vec![],
        exclude_namespaces: vec![],
        target_name: None,
        deletion_policy: Default::default(),
        conflict_policy: Default::default(),
        image_pull_secret: false,
        read_only: None,
        keys: None,
        target: None,
    }
}

fn keys(names: &[&str]) -> Option<Vec<KeySpec>> {
    Some(names.iter().map(|k| KeySpec::Name(k.to_string())).collect())
}

fn as_config_map() -> Option<TargetSpec> {
    Some(TargetSpec {
        key: None,
        kind: Some("ConfigMap".into()),
        type_: None,
        formats: None,
    })
}

/// A predicate for the waits: a ConfigMap holding exactly `data`.
fn exactly(data: &[(&str, &str)]) -> impl Fn(&ConfigMap) -> bool {
    let want: std::collections::BTreeMap<String, String> = data
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |c| c.data.as_ref() == Some(&want) && c.binary_data.is_none()
}

/// A predicate for the waits: the CopyRule has a status, satisfying `check`.
fn status_is(check: impl Fn(&CopyRuleStatus) -> bool) -> impl Fn(&CopyRule) -> bool {
    move |r| r.status.as_ref().is_some_and(&check)
}

fn ready(s: &CopyRuleStatus) -> Option<(&str, &str)> {
    s.conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.as_str(), c.reason.as_str()))
}

/// Every copy write copyrator counted (creates, updates, deletes).
async fn copy_writes(t: &Harness) -> f64 {
    let mut n = 0.0;
    for verb in ["create", "update", "delete"] {
        n += t
            .metric(&format!("copyrator_copy_writes_total{{verb=\"{verb}\"}}"))
            .await;
    }
    n
}

#[tokio::test]
async fn a_tls_secrets_ca_becomes_a_config_map_in_every_labelled_namespace_and_follows_it() {
    let t = Harness::start(Options {
        resync_interval: "1s",
        ..Default::default()
    })
    .await;
    let label = t.name("bundle");
    let src = t.namespace("keys-src", &[]).await;
    let a = t.namespace("keys-a", &[(&label, "on")]).await;
    let b = t.namespace("keys-b", &[(&label, "on")]).await;
    let off = t.namespace("keys-off", &[]).await;
    let (source, ca1, _) = tls_secret("ca");
    t.secrets(&src)
        .create(&PostParams::default(), &source)
        .await
        .unwrap();
    let name = t
        .copy_rule(
            "ca-bundle",
            CopyRuleSpec {
                namespace_selector: selecting(&label),
                target_name: Some("ca-bundle".into()),
                keys: keys(&["ca.crt"]),
                target: as_config_map(),
                ..rule(&src, "ca")
            },
        )
        .await;
    for ns in [&a, &b] {
        let cm = t
            .wait_for::<ConfigMap>(ns, "ca-bundle", "only the CA", exactly(&[("ca.crt", &ca1)]))
            .await;
        let annotations = cm.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations
                .get(marks::SOURCE_KIND_ANNOTATION)
                .map(String::as_str),
            Some("Secret")
        );
        assert_eq!(
            annotations.get(marks::SOURCE_ANNOTATION),
            Some(&format!("{src}/ca"))
        );
        assert!(
            t.secrets(ns).get_opt("ca-bundle").await.unwrap().is_none(),
            "no Secret is made"
        );
    }
    assert!(
        t.config_maps(&off)
            .get_opt("ca-bundle")
            .await
            .unwrap()
            .is_none()
    );

    // The Pod gate: a Pod right after its namespace finds the bundle there.
    let probe = t.namespace("keys-probe", &[]).await;
    service_account(&t.client, &probe).await;
    crate::pod_gate::wait_for_pod_gate(&t.client, &probe, || {
        t.metric(crate::pod_gate::DRY_RUN_PODS)
    })
    .await;
    let mut gated = vec![a.clone(), b.clone()];
    for i in 0..5 {
        let ns = t
            .namespace(&format!("keys-new-{i}"), &[(&label, "on")])
            .await;
        service_account(&t.client, &ns).await;
        create_pod(&t.client, &ns, &pod("app", &[], None)).await;
        let cm = t.config_maps(&ns).get_opt("ca-bundle").await.unwrap();
        assert!(
            cm.as_ref().is_some_and(exactly(&[("ca.crt", &ca1)])),
            "the Pod in {ns} was admitted before its bundle: {cm:?}"
        );
        gated.push(ns);
    }

    // The source rotates: every bundle follows.
    let (rotated, ca2, _) = tls_secret("ca");
    t.secrets(&src)
        .patch(
            "ca",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": rotated.string_data})),
        )
        .await
        .unwrap();
    for ns in &gated {
        t.wait_for::<ConfigMap>(
            ns,
            "ca-bundle",
            "the rotated CA",
            exactly(&[("ca.crt", &ca2)]),
        )
        .await;
    }

    // Deleted or edited by hand: restored.
    t.config_maps(&a)
        .delete("ca-bundle", &DeleteParams::default())
        .await
        .unwrap();
    t.config_maps(&b)
        .patch(
            "ca-bundle",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"ca.crt": "tampered", "extra": "x"}})),
        )
        .await
        .unwrap();
    for ns in [&a, &b] {
        t.wait_for::<ConfigMap>(ns, "ca-bundle", "restored", exactly(&[("ca.crt", &ca2)]))
            .await;
    }

    // In sync: the status says so, and resyncs write nothing.
    let copies = gated.len() as u32;
    t.wait_for::<CopyRule>(
        "",
        &name,
        "every bundle in sync",
        status_is(|s| s.synced_copies == copies && ready(s) == Some(("True", "Synced"))),
    )
    .await;
    t.quiescent().await;
    let writes = copy_writes(&t).await;
    t.wait_resyncs(2).await;
    assert_eq!(
        copy_writes(&t).await,
        writes,
        "a resync of in-sync bundles writes nothing"
    );

    // explain says which keys, from which source.
    let out = run_copyrator(&["explain", "namespace", &a, "-o", "json"]).await;
    assert!(out.success, "{}", out.stderr);
    let report = out.json();
    let finding = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"]["name"] == json!(name))
        .unwrap_or_else(|| panic!("no finding of {name}: {report}"));
    assert_eq!(
        finding["source"],
        json!({"kind": "Secret", "namespace": src, "name": "ca"})
    );
    assert_eq!(finding["target"]["kind"], json!("ConfigMap"));
    assert_eq!(finding["copy"], json!("InSync"));
    assert_eq!(
        finding["transform"],
        json!({"keys": [{"from": "ca.crt", "to": "ca.crt"}], "missingKeys": [], "kind": "ConfigMap", "type": null})
    );
    let table = run_copyrator(&["explain", "source", &format!("secret/{src}/ca")]).await;
    assert!(
        table
            .stdout
            .contains(&format!("keys ca.crt of Secret {src}/ca, as a ConfigMap")),
        "{}",
        table.stdout
    );
    t.finish().await;
}

/// With `--client-ca` the API server's review of a CopyRule asking key material into a
/// ConfigMap is judged on the source's content, and denied naming the key.
#[tokio::test]
async fn a_rule_asking_for_tls_key_in_a_config_map_is_denied_or_refused() {
    let Some(t) = Harness::start_with_client_ca().await else {
        return;
    };
    let src = t.namespace("deny-src", &[]).await;
    let dest = t.namespace("deny-dest", &[]).await;
    let (source, ca, _) = tls_secret("ca");
    t.secrets(&src)
        .create(&PostParams::default(), &source)
        .await
        .unwrap();
    for (i, asked) in [keys(&["ca.crt", "tls.key"]), None].into_iter().enumerate() {
        let name = t.name(&format!("deny-{i}"));
        let spec = CopyRuleSpec {
            namespaces: vec![dest.clone()],
            keys: asked,
            target: as_config_map(),
            ..rule(&src, "ca")
        };
        let err = t
            .rules()
            .create(&PostParams::default(), &CopyRule::new(&name, spec))
            .await
            .expect_err("denied");
        let msg = err.to_string();
        assert!(
            msg.contains("key tls.key holds a private key"),
            "the denial names the key: {msg}"
        );
        assert!(t.rules().get_opt(&name).await.unwrap().is_none());
    }
    // Only the CA: allowed, and copied.
    t.copy_rule(
        "ca-only",
        CopyRuleSpec {
            namespaces: vec![dest.clone()],
            keys: keys(&["ca.crt"]),
            target: as_config_map(),
            ..rule(&src, "ca")
        },
    )
    .await;
    t.wait_for::<ConfigMap>(&dest, "ca", "the CA", exactly(&[("ca.crt", &ca)]))
        .await;

    // A rule for a source that does not exist yet is judged when the source comes: refused
    // per target, said in status and an Event, nothing written.
    let later = t
        .copy_rule(
            "later",
            CopyRuleSpec {
                namespaces: vec![dest.clone()],
                target_name: Some("later-bundle".into()),
                target: as_config_map(),
                ..rule(&src, "later")
            },
        )
        .await;
    t.wait_for::<CopyRule>(
        "",
        &later,
        "SourceNotFound",
        status_is(|s| ready(s) == Some(("False", "SourceNotFound"))),
    )
    .await;
    // Opted in, so that its creation reaches the sources webhook at once.
    let (mut source, _, _) = tls_secret("later");
    source.metadata.labels = Some([(marks::SOURCE_LABEL.to_string(), "true".to_string())].into());
    t.secrets(&src)
        .create(&PostParams::default(), &source)
        .await
        .unwrap();
    t.wait_for::<CopyRule>(
        "",
        &later,
        "the target refused",
        status_is(|s| {
            s.conflicting_copies == 1
                && s.conflicts
                    .iter()
                    .any(|c| c.namespace == dest && c.reason.contains("key tls.key"))
        }),
    )
    .await;
    eventually(CONVERGE, "a KeyMaterialRefused Event", || async {
        (!rule_events(&t, &later, "KeyMaterialRefused")
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    assert!(
        t.config_maps(&dest)
            .get_opt("later-bundle")
            .await
            .unwrap()
            .is_none()
    );
    t.finish().await;
}

/// Without `--client-ca` anyone who reaches the webhook port could forge the review, so the
/// content is not read at admission (SPEC §9.8): the rule is allowed with a warning kubectl
/// shows, and every copy that would carry the key is refused when it is made.
#[tokio::test]
async fn without_a_client_ca_key_material_is_refused_when_copied() {
    let t = Harness::start(Options::default()).await;
    let src = t.namespace("unchecked-src", &[]).await;
    let dest = t.namespace("unchecked-dest", &[]).await;
    let (source, _, _) = tls_secret("ca");
    t.secrets(&src)
        .create(&PostParams::default(), &source)
        .await
        .unwrap();
    let name = t.name("unchecked");
    let rule = CopyRule::new(
        &name,
        CopyRuleSpec {
            namespaces: vec![dest.clone()],
            keys: keys(&["ca.crt", "tls.key"]),
            target: as_config_map(),
            ..rule(&src, "ca")
        },
    );
    let applied = kubectl(
        &["apply", "-f", "-"],
        &serde_json::to_string(&rule).unwrap(),
    )
    .await;
    assert!(applied.success, "allowed: {}", applied.stderr);
    assert!(
        applied
            .stderr
            .contains("Warning: the sources' content is checked when copies are made"),
        "kubectl shows that it is judged later: {}",
        applied.stderr
    );
    t.wait_for::<CopyRule>(
        "",
        &name,
        "the target refused",
        status_is(|s| {
            s.conflicts
                .iter()
                .any(|c| c.namespace == dest && c.reason.contains("key tls.key"))
        }),
    )
    .await;
    eventually(CONVERGE, "a KeyMaterialRefused Event", || async {
        (!rule_events(&t, &name, "KeyMaterialRefused")
            .await
            .is_empty())
        .then_some(())
    })
    .await;
    assert!(t.config_maps(&dest).get_opt("ca").await.unwrap().is_none());
    t.finish().await;
}

#[tokio::test]
async fn keys_are_renamed_types_and_kinds_changed_and_missing_keys_reported() {
    let t = Harness::start(Options::default()).await;
    let src = t.namespace("rename-src", &[]).await;
    let dest = t.namespace("rename-dest", &[]).await;
    let (source, ca, cert) = tls_secret("ca");
    t.secrets(&src)
        .create(&PostParams::default(), &source)
        .await
        .unwrap();

    // Renamed, with a type of its own, and a key the source lacks.
    let name = t
        .copy_rule(
            "renamed",
            CopyRuleSpec {
                namespaces: vec![dest.clone()],
                target_name: Some("ca-opaque".into()),
                keys: Some(vec![
                    KeySpec::Name("ca.crt".into()),
                    KeySpec::Renamed {
                        from: "tls.crt".into(),
                        to: Some("server.pem".into()),
                    },
                    KeySpec::Name("extra.pem".into()),
                ]),
                target: Some(TargetSpec {
                    key: None,
                    kind: None,
                    type_: Some("Opaque".into()),
                    formats: None,
                }),
                ..rule(&src, "ca")
            },
        )
        .await;
    let copy = t
        .wait_for::<Secret>(&dest, "ca-opaque", "renamed keys", |s| {
            s.type_.as_deref() == Some("Opaque")
                && s.data
                    .as_ref()
                    .map(|d| d.keys().cloned().collect::<Vec<_>>())
                    == Some(vec!["ca.crt".into(), "server.pem".into()])
        })
        .await;
    assert_eq!(secret_value(&copy, "ca.crt").as_deref(), Some(ca.as_str()));
    assert_eq!(
        secret_value(&copy, "server.pem").as_deref(),
        Some(cert.as_str())
    );
    t.wait_for::<CopyRule>(
        "",
        &name,
        "the missing key reported, the copy in sync",
        status_is(|s| {
            ready(s) == Some(("True", "Synced"))
                && s.missing_keys.len() == 1
                && s.missing_keys[0].source == format!("{src}/ca")
                && s.missing_keys[0].keys == ["extra.pem"]
        }),
    )
    .await;
    eventually(CONVERGE, "a MissingKeys Event", || async {
        rule_events(&t, &name, "MissingKeys")
            .await
            .into_iter()
            .find(|e| e.note.as_deref().is_some_and(|n| n.contains("extra.pem")))
    })
    .await;

    // The type changes back to the source's (a Secret's type never changes in place).
    t.rules()
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"keys": ["ca.crt", "tls.crt", "tls.key"], "target": null}}),
            ),
        )
        .await
        .unwrap();
    t.wait_for::<Secret>(&dest, "ca-opaque", "a TLS Secret again", |s| {
        s.type_.as_deref() == Some("kubernetes.io/tls")
            && s.data.as_ref().map(|d| d.len()) == Some(3)
    })
    .await;

    // The inline annotation, on a ConfigMap: selected and renamed.
    t.config_maps(&src)
        .create(
            &PostParams::default(),
            &config_map(
                "app",
                &[(marks::SOURCE_LABEL, "true")],
                &[
                    (marks::NAMESPACES_ANNOTATION, &dest),
                    (marks::KEYS_ANNOTATION, "app.conf, log.conf=logging.conf"),
                ],
                &[
                    ("app.conf", "a=1"),
                    ("log.conf", "level=info"),
                    ("private", "x"),
                ],
            ),
        )
        .await
        .unwrap();
    t.wait_for::<ConfigMap>(
        &dest,
        "app",
        "two keys, one renamed",
        exactly(&[("app.conf", "a=1"), ("logging.conf", "level=info")]),
    )
    .await;

    // A ConfigMap's data as a Secret.
    t.config_maps(&src)
        .create(
            &PostParams::default(),
            &config_map("settings", &[], &[], &[("a", "1")]),
        )
        .await
        .unwrap();
    t.copy_rule(
        "as-secret",
        CopyRuleSpec {
            kind: "ConfigMap".into(),
            namespaces: vec![dest.clone()],
            target: Some(TargetSpec {
                key: None,
                kind: Some("Secret".into()),
                type_: None,
                formats: None,
            }),
            ..rule(&src, "settings")
        },
    )
    .await;
    let s = t.wait_value::<Secret>(&dest, "settings", "a", "1").await;
    assert_eq!(s.type_.as_deref(), Some("Opaque"));
    assert!(
        t.config_maps(&dest)
            .get_opt("settings")
            .await
            .unwrap()
            .is_none()
    );
    // Deleted or edited by hand, with no resync to fall back on: restored at once (the copy's
    // job looks for its source among ConfigMaps).
    t.quiescent().await;
    t.secrets(&dest)
        .delete("settings", &DeleteParams::default())
        .await
        .unwrap();
    t.wait_value::<Secret>(&dest, "settings", "a", "1").await;
    t.secrets(&dest)
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"a": "edited"}})),
        )
        .await
        .unwrap();
    t.wait_value::<Secret>(&dest, "settings", "a", "1").await;
    // Its marks edited: the one that names its source's kind removed. Taken back, not deleted.
    t.quiescent().await;
    t.secrets(&dest)
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {marks::SOURCE_KIND_ANNOTATION: null}}}),
            ),
        )
        .await
        .unwrap();
    t.wait_for::<Secret>(&dest, "settings", "its marks restored", |s| {
        s.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(marks::SOURCE_KIND_ANNOTATION))
            .map(String::as_str)
            == Some("ConfigMap")
    })
    .await;
    // Its source deleted, the Secret goes with it (deletion policy Delete), at once: the
    // source's job finds copies of the other kind too (no resync runs in this test, and no
    // other job is left: a namespace's second look would find the orphan too).
    t.quiescent().await;
    t.config_maps(&src)
        .delete("settings", &DeleteParams::default())
        .await
        .unwrap();
    t.wait_gone::<Secret>(&dest, "settings").await;
    t.finish().await;
}

#[tokio::test]
async fn a_canary_private_key_reaches_no_config_map_log_event_or_metric() {
    let env = TestEnv::new().await;
    // With the API server's client certificate verified, so that the rule's admission reads
    // the source too (SPEC §9.8): the denial is searched for the canary as well.
    let client_ca = webhook_client_ca().map(|p| format!("--client-ca={}", p.display()));
    let mut args = vec![
        "--log-level",
        "trace",
        "--log-format",
        "json",
        "--leader-election=false",
        "--resync-interval",
        "1s",
    ];
    args.extend(client_ca.as_deref());
    let mut process = Process::spawn(&args);
    process.wait_up().await;
    env.register_webhooks(&process).await;
    let label = env.name("trust");
    let src = env.namespace("canary-src", &[]).await;
    let dest = env.namespace("canary-dest", &[(&label, "on")]).await;
    let (ca, _) = pem_pair("ca");
    let (_, canary) = pem_pair("canary");
    env.secrets(&src)
        .create(
            &PostParams::default(),
            &secret("trust", &[], &[], &[("ca.crt", &ca)]),
        )
        .await
        .unwrap();
    // Every key of the Secret, as a ConfigMap: allowed while it holds certificates only.
    let name = env
        .copy_rule(
            "trust",
            CopyRuleSpec {
                namespace_selector: selecting(&label),
                target_name: Some("trust-bundle".into()),
                target: as_config_map(),
                ..rule(&src, "trust")
            },
        )
        .await;
    env.wait_for::<ConfigMap>(&dest, "trust-bundle", "the CA", exactly(&[("ca.crt", &ca)]))
        .await;

    // The source gains the canary key, beside the CA and inside ca.crt.
    env.secrets(&src)
        .patch(
            "trust",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"extra.pem": canary}})),
        )
        .await
        .unwrap();
    env.wait_for::<CopyRule>(
        "",
        &name,
        "the copy refused",
        status_is(|s| {
            s.conflicts
                .iter()
                .any(|c| c.reason.contains("key extra.pem holds a private key"))
        }),
    )
    .await;
    env.secrets(&src)
        .patch(
            "trust",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"stringData": {"ca.crt": format!("{ca}{canary}")}, "data": {"extra.pem": null}}),
            ),
        )
        .await
        .unwrap();
    env.wait_for::<CopyRule>(
        "",
        &name,
        "the copy refused again",
        status_is(|s| {
            s.conflicts
                .iter()
                .any(|c| c.reason.contains("key ca.crt holds a private key"))
        }),
    )
    .await;
    // A namespace labelled now gets nothing; the bundle made before stays as it was.
    let late = env.namespace("canary-late", &[(&label, "on")]).await;
    // A rule asking for it is denied at admission (when the review is known to come from the
    // API server; else it is refused when copied, as above).
    let asked = env
        .rules()
        .create(
            &PostParams::default(),
            &CopyRule::new(
                &env.name("trust-2"),
                CopyRuleSpec {
                    namespaces: vec![dest.clone()],
                    target_name: Some("trust-2".into()),
                    keys: keys(&["ca.crt"]),
                    target: as_config_map(),
                    ..rule(&src, "trust")
                },
            ),
        )
        .await;
    if client_ca.is_some() {
        let err = asked.expect_err("denied");
        assert!(
            err.to_string().contains("key ca.crt holds a private key"),
            "{err}"
        );
    }
    stays(Duration::from_secs(3), "no bundle with the key", || async {
        let here = env
            .config_maps(&dest)
            .get_opt("trust-bundle")
            .await
            .unwrap();
        let there = env
            .config_maps(&late)
            .get_opt("trust-bundle")
            .await
            .unwrap();
        here.as_ref().is_some_and(exactly(&[("ca.crt", &ca)])) && there.is_none()
    })
    .await;
    assert!(
        process
            .metric("copyrator_conflicts_total{reason=\"key_material\"}")
            .await
            >= 1.0
    );

    // Searched everywhere copyrator writes or says something.
    let logs = process.logs();
    let metrics = process.metrics().await;
    let events = serde_json::to_string(
        &Api::<Event>::all(env.client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items,
    )
    .unwrap();
    let config_maps = serde_json::to_string(
        &Api::<ConfigMap>::all(env.client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items,
    )
    .unwrap();
    assert!(
        logs.len() > 10_000,
        "trace logging is on ({} bytes)",
        logs.len()
    );
    assert!(
        logs.contains("trust-bundle"),
        "the logs talk about the copies"
    );
    assert!(events.contains("KeyMaterialRefused"), "the refusal is said");
    assert!(config_maps.contains("trust-bundle"));
    let mut needles: Vec<String> = canary
        .lines()
        // Whole lines only: a short last line could occur anywhere by chance.
        .filter(|l| !l.starts_with("-----") && l.len() >= 40)
        .map(String::from)
        .collect();
    needles.push(STANDARD.encode(&canary));
    needles.push(STANDARD.encode(format!("{ca}{canary}")));
    for needle in &needles {
        for (what, text) in [
            ("ConfigMap", &config_maps),
            ("log line", &logs),
            ("Event", &events),
            ("metric", &metrics),
        ] {
            assert!(
                !text.contains(needle.as_str()),
                "the canary key in a {what}: {needle}"
            );
        }
    }
    process.terminate();
    env.cleanup().await;
}
