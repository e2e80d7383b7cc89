//! `copyrator explain` against the real API server: each reason appears for the case that
//! causes it, the copy's state follows what is really in the namespace, and the last Event
//! copyrator wrote is shown. copyrator's own verdicts come from its running instance; explain
//! must agree with them.

mod lease;

use crate::common;

use common::*;
use copyrator::{
    copyrule::{ConflictPolicy, CopyRule, CopyRuleSpec, DeletionPolicy},
    marks,
    model::Kind,
};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The finding about `source` (`namespace/name`) whose copy goes to `target_ns`.
fn finding<'a>(report: &'a Value, source: &str, target_ns: &str) -> &'a Value {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| {
            format!(
                "{}/{}",
                f["source"]["namespace"].as_str().unwrap_or_default(),
                f["source"]["name"].as_str().unwrap_or_default()
            ) == source
                && f["target"]["namespace"].as_str() == Some(target_ns)
        })
        .unwrap_or_else(|| {
            panic!(
                "no finding about {source} in {target_ns}:\n{}",
                serde_json::to_string_pretty(report).unwrap()
            )
        })
}

/// (reason, copy, action, applies) of a finding, for one-line assertions.
fn verdict(f: &Value) -> (String, String, String, bool) {
    (
        f["reason"].as_str().unwrap_or_default().to_string(),
        f["copy"].as_str().unwrap_or("-").to_string(),
        f["action"].as_str().unwrap_or_default().to_string(),
        f["applies"].as_bool().unwrap(),
    )
}

fn v(reason: &str, copy: &str, action: &str, applies: bool) -> (String, String, String, bool) {
    (reason.into(), copy.into(), action.into(), applies)
}

/// Keeps a namespace Terminating even where a namespace controller runs: deletion waits for
/// this finalizer, which the test removes at the end.
const HOLD: &str = "e2e.copyrator.io/hold";

async fn terminating_namespace(env: &TestEnv, base: &str, labels: &[(&str, &str)]) -> String {
    let name = env.namespace(base, labels).await;
    let namespaces = env.api::<Namespace>("");
    namespaces
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": [HOLD]}})),
        )
        .await
        .unwrap();
    namespaces
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    env.wait_for::<Namespace>("", &name, "Terminating", |n| {
        n.metadata.deletion_timestamp.is_some()
    })
    .await;
    name
}

async fn release(env: &TestEnv, name: &str) {
    let _ = env
        .api::<Namespace>("")
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
}

async fn create(env: &TestEnv, ns: &str, s: Secret) {
    env.secrets(ns)
        .create(&PostParams::default(), &s)
        .await
        .unwrap_or_else(|e| panic!("creating a Secret in {ns}: {e}"));
}

#[tokio::test]
async fn explain_gives_the_reason_for_each_case() {
    let env = TestEnv::new().await;
    let id = env.id.clone();
    let sel = format!("explain={id}");
    let src = env.namespace("ex-src", &[]).await;
    let tenant = env.namespace("ex-tenant", &[]).await;
    let team = env.namespace("ex-team", &[("explain", &id)]).await;
    let other = env.namespace("ex-other", &[]).await;
    let excluded = env.namespace("ex-excl", &[("explain", &id)]).await;
    let doomed = terminating_namespace(&env, "ex-doomed", &[("explain", &id)]).await;
    // copyrator and explain agree on the policy: src is trusted, tenant is not; excluded is
    // excluded.
    let policy = [
        format!("--trusted-namespaces={src}"),
        format!("--exclude-namespaces=kube-system,kube-node-lease,{excluded}"),
    ];
    let mut t = Harness::start_in(
        env,
        Options {
            extra: policy.to_vec(),
            ..Default::default()
        },
    )
    .await;
    let explain = |what: &'static str, subject: String| {
        let policy = policy.clone();
        async move {
            let mut args = vec!["explain", what, subject.as_str(), "-o", "json"];
            args.extend(policy.iter().map(String::as_str));
            let out = run_copyrator(&args).await;
            assert!(
                out.success,
                "explain {what} {subject} failed: {}",
                out.stderr
            );
            out.json()
        }
    };

    // An object copyrator does not manage already holds one name.
    create(&t, &team, secret("taken", &[], &[], &[("mine", "yes")])).await;
    let source = |name: &str, annotations: &[(&str, &str)]| {
        secret(
            name,
            &[(marks::SOURCE_LABEL, "true")],
            annotations,
            &[("v", "1")],
        )
    };
    create(
        &t,
        &src,
        source("cred", &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &sel)]),
    )
    .await;
    create(
        &t,
        &src,
        source("taken", &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &sel)]),
    )
    .await;
    create(
        &t,
        &tenant,
        source("tcred", &[(marks::NAMESPACES_ANNOTATION, &team)]),
    )
    .await;
    // Annotated, but without the opt-in label.
    create(
        &t,
        &src,
        secret(
            "unlabelled",
            &[],
            &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &sel)],
            &[("v", "1")],
        ),
    )
    .await;
    t.wait_value::<Secret>(&team, "cred", "v", "1").await;
    t.wait_for_any::<k8s_openapi::api::events::v1::Event>(
        &src,
        "the conflict reported on the source",
        |e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("taken")
                && e.reason.as_deref() == Some("CopyConflict")
        },
    )
    .await;

    let report = explain("namespace", team.clone()).await;
    assert_eq!(
        verdict(finding(&report, &format!("{src}/cred"), &team)),
        v("SelectorMatches", "InSync", "None", true)
    );
    let taken = finding(&report, &format!("{src}/taken"), &team);
    assert_eq!(
        verdict(taken),
        v("UnmanagedObject", "Unmanaged", "None", false)
    );
    assert_eq!(taken["lastEvent"]["reason"], "CopyConflict");
    assert_eq!(taken["lastEvent"]["type"], "Warning");
    let tcred = finding(&report, &format!("{tenant}/tcred"), &team);
    assert_eq!(verdict(tcred), v("NotConsented", "Missing", "None", false));
    assert!(
        tcred["message"]
            .as_str()
            .unwrap()
            .contains(&format!("copyrator.io/accept-from: {tenant}")),
        "{tcred}"
    );
    assert_eq!(
        verdict(finding(&report, &format!("{src}/unlabelled"), &team)),
        v("SourceNotOptedIn", "Missing", "None", false)
    );
    // The unmanaged object is still exactly as it was made.
    let mine = t.secrets(&team).get("taken").await.unwrap();
    assert_eq!(secret_value(&mine, "mine").as_deref(), Some("yes"));

    for (ns, reason) in [
        (&other, "NotSelected"),
        (&excluded, "ExcludedGlobally"),
        (&doomed, "NamespaceTerminating"),
    ] {
        let report = explain("namespace", ns.clone()).await;
        let f = finding(&report, &format!("{src}/cred"), ns);
        assert_eq!(verdict(f), v(reason, "Missing", "None", false), "{ns}");
    }

    // The source's view: every namespace its rule selects, and the rest counted.
    let report = explain("source", format!("secret/{src}/cred")).await;
    assert_eq!(
        verdict(finding(&report, &format!("{src}/cred"), &team)),
        v("SelectorMatches", "InSync", "None", true)
    );
    assert_eq!(
        verdict(finding(&report, &format!("{src}/cred"), &excluded)),
        v("ExcludedGlobally", "Missing", "None", false)
    );
    assert!(
        report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["target"]["namespace"] != other.as_str()),
        "an unselected namespace is counted, not listed"
    );
    assert!(report["notSelected"][0]["namespaces"].as_u64().unwrap() >= 2);

    // With copyrator down, a new source's copy is missing and a changed source's copy stale.
    t.kill().await;
    create(
        &t,
        &src,
        source("late", &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &sel)]),
    )
    .await;
    t.secrets(&src)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"v": "2"}})),
        )
        .await
        .unwrap();
    let report = explain("namespace", team.clone()).await;
    assert_eq!(
        verdict(finding(&report, &format!("{src}/late"), &team)),
        v("SelectorMatches", "Missing", "Create", true)
    );
    assert_eq!(
        verdict(finding(&report, &format!("{src}/cred"), &team)),
        v("SelectorMatches", "Stale", "Update", true)
    );

    // The table says the same in words.
    let table = run_copyrator(&["explain", "namespace", &team, "--trusted-namespaces", &src]).await;
    assert!(table.success, "{}", table.stderr);
    assert!(
        table.stdout.contains("REASON")
            && table.stdout.contains("missing -> create")
            && table.stdout.contains("does not accept copies from")
            && table.stdout.contains("Warning CopyConflict"),
        "{}",
        table.stdout
    );

    release(&t, &doomed).await;
    t.finish().await;
}

#[tokio::test]
async fn explain_fails_clearly_for_what_does_not_exist() {
    let env = TestEnv::new().await;
    let ns = env.namespace("ex-missing", &[]).await;
    let missing_ns = env.name("ex-nowhere");
    let out = run_copyrator(&["explain", "namespace", &missing_ns]).await;
    assert!(!out.success);
    assert!(
        out.stderr
            .contains(&format!("namespace {missing_ns} not found")),
        "{}",
        out.stderr
    );
    let out = run_copyrator(&["explain", "source", &format!("configmap/{ns}/nothing")]).await;
    assert!(!out.success);
    assert!(
        out.stderr
            .contains(&format!("ConfigMap {ns}/nothing not found")),
        "{}",
        out.stderr
    );
    let out = run_copyrator(&["explain", "source", "not a source"]).await;
    assert!(
        !out.success && out.stderr.contains("NAMESPACE/NAME"),
        "{}",
        out.stderr
    );
    env.cleanup().await;
}

/// The running copyrator publishes its policy on its Lease: `explain` with no policy flags
/// reasons as it does (an in-sync copy of a trusted source is in sync, not "delete"), a flag
/// given overrides it with a note, and each copy says when a resync last verified it.
#[tokio::test]
async fn explain_uses_the_running_copyrators_policy_from_its_lease() {
    let env = TestEnv::new().await;
    let id = env.id.clone();
    let src = env.namespace("exl-src", &[]).await;
    let team = env.namespace("exl-team", &[("explain-lease", &id)]).await;
    let lease_ns = env.namespace("exl-lease", &[]).await;
    let lease_name = env.name("copyrator");
    let trusted = format!("--trusted-namespaces={src}");
    let mut p = Process::spawn(&[
        "--leader-election=true",
        "--lease-namespace",
        &lease_ns,
        "--lease-name",
        &lease_name,
        "--lease-duration",
        "4s",
        "--resync-interval",
        "1s",
        &trusted,
    ]);
    p.wait_ready().await;
    p.wait_metric("copyrator_leader", "leading", |v| v == 1.0)
        .await;

    let sel = format!("explain-lease={id}");
    create(
        &env,
        &src,
        secret(
            "cred",
            &[(marks::SOURCE_LABEL, "true")],
            &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &sel)],
            &[("v", "1")],
        ),
    )
    .await;
    env.config_maps(&src)
        .create(
            &PostParams::default(),
            &config_map("ca", &[], &[], &[("v", "1")]),
        )
        .await
        .unwrap();
    let rule = env
        .copy_rule(
            "exl-rule",
            CopyRuleSpec {
                clusters: None,
                api_version: None,
                kind: Kind::ConfigMap.as_str().into(),
                source_namespace: src.clone(),
                sources: None,
                drop_expired: false,
                template: None,
                create_once: false,
                source_name: Some("ca".into()),
                source_selector: None,
                namespace_selector: None,
                namespaces: vec![team.clone()],
                exclude_namespaces: vec![],
                target_name: None,
                deletion_policy: DeletionPolicy::Delete,
                conflict_policy: ConflictPolicy::Skip,
                image_pull_secret: false,
                read_only: None,
                keys: None,
                target: None,
            },
        )
        .await;
    env.wait_value::<Secret>(&team, "cred", "v", "1").await;
    // The leader's resync verifies the rule's copies: the status says when.
    let status = env
        .wait_for::<CopyRule>("", &rule, "verified by a resync", |r| {
            r.status.as_ref().is_some_and(|s| {
                s.last_verified_time.is_some() && s.synced_copies == 1 && s.stale_copies == 0
            })
        })
        .await
        .status
        .unwrap();
    assert_eq!(status.conflicting_copies, 0);
    let explain = |extra: &[&str]| {
        let mut args = vec!["explain", "namespace", team.as_str(), "-o", "json"];
        args.extend(["--lease-name", lease_name.as_str()]);
        args.extend(["--lease-namespace", lease_ns.as_str()]);
        args.extend(extra);
        let args: Vec<String> = args.into_iter().map(String::from).collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = run_copyrator(&args).await;
            assert!(out.success, "explain failed: {}", out.stderr);
            out.json()
        }
    };

    // No policy flags: the running copyrator's policy, from its Lease.
    let report = explain(&[]).await;
    let cred = finding(&report, &format!("{src}/cred"), &team);
    assert_eq!(
        verdict(cred),
        v("SelectorMatches", "InSync", "None", true),
        "{cred:#}"
    );
    assert_eq!(report["policy"]["from"], "Lease", "{report:#}");
    assert_eq!(report["policy"]["lease"]["namespace"], lease_ns.as_str());
    assert_eq!(report["policy"]["trustedNamespaces"], src.as_str());
    assert_eq!(cred["lastVerifiedBy"], "LeaderResync");
    assert!(cred["lastVerified"].is_string(), "{cred:#}");
    let ca = finding(&report, &format!("{src}/ca"), &team);
    assert_eq!(ca["lastVerifiedBy"], "CopyRuleStatus");
    assert!(
        ca["lastVerified"].as_str().is_some_and(|t| !t.is_empty()),
        "{ca:#}"
    );

    // A flag given explicitly wins, and explain says so.
    let report = explain(&["--trusted-namespaces", ""]).await;
    assert_eq!(report["policy"]["from"], "LeaseAndFlags");
    assert_eq!(
        report["policy"]["overridden"],
        json!(["--trusted-namespaces"])
    );
    assert!(
        report["notes"][0]
            .as_str()
            .is_some_and(|n| n.contains("overrides the running copyrator's")),
        "{report:#}"
    );
    assert_eq!(
        finding(&report, &format!("{src}/cred"), &team)["reason"],
        "NotConsented"
    );

    // Installed as a kubectl plugin, the same binary answers `kubectl copyrator ...`.
    let plugins = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_copyrator"),
        plugins.path().join("kubectl-copyrator"),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        plugins.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let (team2, lease2, lease_ns2) = (team.clone(), lease_name.clone(), lease_ns.clone());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("kubectl")
            .args(["copyrator", "explain", "namespace", &team2])
            .args(["--lease-name", &lease2, "--lease-namespace", &lease_ns2])
            .env("PATH", path)
            .env("KUBECONFIG", kubeconfig())
            .env_remove("COPYRATOR_KUBECONFIG")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("the running copyrator's, from Lease"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    p.terminate();
    env.cleanup().await;
}

/// A self-signed CA certificate, PEM, made now.
fn ca_pem(name: &str) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.self_signed(&key).unwrap().pem()
}

/// Each object a bundle finding shows: (name, reason, taken, certificates).
fn bundle_objects(f: &Value) -> Vec<(String, String, bool, Value)> {
    f["bundle"]["sources"]
        .as_array()
        .unwrap_or_else(|| panic!("no bundle sources: {f}"))
        .iter()
        .flat_map(|s| s["objects"].as_array().cloned().unwrap_or_default())
        .map(|o| {
            (
                o["name"].as_str().unwrap().to_string(),
                o["reason"].as_str().unwrap().to_string(),
                o["taken"].as_bool().unwrap(),
                o["certificates"].clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn explain_shows_which_sources_a_bundle_copy_takes_and_why_it_leaves_others_out() {
    let env = TestEnv::new().await;
    let platform = env.namespace("exb-platform", &[]).await;
    let trusted = format!("--trusted-namespaces={platform}");
    let t = Harness::start_in(
        env,
        Options {
            extra: vec![trusted.clone()],
            ..Default::default()
        },
    )
    .await;
    let label = t.name("exb");
    let tenant = t.namespace("exb-tenant", &[]).await;
    // Selected by the bundle; accepts no copies from the tenant.
    let team = t.namespace("exb-team", &[(&label, "on")]).await;
    create(
        &t,
        &platform,
        secret("root", &[], &[], &[("ca.crt", &ca_pem("root"))]),
    )
    .await;
    create(&t, &platform, secret("bare", &[], &[], &[("other", "x")])).await;
    create(
        &t,
        &tenant,
        secret("extra", &[], &[], &[("ca.crt", &ca_pem("extra"))]),
    )
    .await;
    let entry = |ns: &str, name: &str| json!({"kind": "Secret", "namespace": ns, "name": name, "key": "ca.crt"});
    let spec: CopyRuleSpec = serde_json::from_value(json!({
        "kind": "ConfigMap",
        "sources": [entry(&platform, "root"), entry(&tenant, "extra"), entry(&platform, "bare")],
        "targetName": "ca-bundle",
        "target": {"key": "ca-bundle.pem"},
        "namespaceSelector": {"matchLabels": {label.as_str(): "on"}},
    }))
    .unwrap();
    let rule = t.copy_rule("exb", spec).await;
    t.wait_for::<k8s_openapi::api::core::v1::ConfigMap>(
        &team,
        "ca-bundle",
        "the bundle copy",
        |cm| {
            cm.data
                .as_ref()
                .is_some_and(|d| d.contains_key("ca-bundle.pem"))
        },
    )
    .await;

    let out = run_copyrator(&["explain", "namespace", &team, "-o", "json", &trusted]).await;
    assert!(out.success, "explain failed: {}", out.stderr);
    let report = out.json();
    let f = finding(&report, &format!("/{rule}"), &team);
    assert_eq!(f["source"]["kind"], "CopyRule", "{f}");
    assert_eq!(verdict(f), v("SelectorMatches", "InSync", "None", true));
    assert_eq!(f["bundle"]["key"], "ca-bundle.pem");
    assert_eq!(f["bundle"]["certificates"], 1, "{f}");
    assert_eq!(
        f["bundle"]["sources"].as_array().unwrap().len(),
        3,
        "one per entry of spec.sources: {f}"
    );
    assert_eq!(
        bundle_objects(f),
        [
            ("root".to_string(), "Taken".to_string(), true, json!(1)),
            (
                "extra".to_string(),
                "NotTrusted".to_string(),
                false,
                json!(1)
            ),
            (
                "bare".to_string(),
                "KeyNotFound".to_string(),
                false,
                Value::Null
            ),
        ]
    );

    // The tenant's source: the bundle's copy in team, where trust leaves it out.
    let out = run_copyrator(&[
        "explain",
        "source",
        &format!("secret/{tenant}/extra"),
        "-o",
        "json",
        &trusted,
    ])
    .await;
    assert!(out.success, "explain failed: {}", out.stderr);
    let report = out.json();
    let f = finding(&report, &format!("/{rule}"), &team);
    assert_eq!(
        bundle_objects(f),
        [(
            "extra".to_string(),
            "NotTrusted".to_string(),
            false,
            json!(1)
        )]
    );

    // The table lists the sources below the findings.
    let table = run_copyrator(&["explain", "namespace", &team, &trusted]).await;
    assert!(table.success, "{}", table.stderr);
    assert!(
        table
            .stdout
            .contains(&format!("Bundle copyrule/{rule} in {team}"))
            && table
                .stdout
                .contains(&format!("Secret {platform}/root: taken: 1 certificate"))
            && table.stdout.contains(&format!(
                "Secret {tenant}/extra: left out: {tenant} is not a trusted namespace"
            ))
            && table.stdout.contains(&format!(
                "Secret {platform}/bare: left out: the source has no such key"
            )),
        "{}",
        table.stdout
    );
    t.finish().await;
}
