//! `copyrator plan -f` against the real API server: what it says a file would do is what
//! applying the file then does (the namespaces filled, the copies deleted, the namespaces that
//! refuse), and nothing is written before the apply.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

use crate::common::*;
use copyrator::marks;

/// `copyrator plan -o json` of `file`, with `args`; panics with stderr when it fails.
async fn plan_json(file: &std::path::Path, args: &[&str]) -> Value {
    let path = file.display().to_string();
    let mut argv = vec!["plan", "-f", path.as_str(), "-o", "json"];
    argv.extend(args);
    let out = run_copyrator(&argv).await;
    assert!(out.success, "plan failed: {}", out.stderr);
    out.json()
}

/// Each target of the plan's document `doc` as (namespace, change, reason).
fn changes(report: &Value, doc: usize) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = report["documents"][doc]["targets"]
        .as_array()
        .unwrap_or_else(|| panic!("no targets: {report:#}"))
        .iter()
        .map(|t| {
            (
                t["namespace"].as_str().unwrap_or("-").to_string(),
                t["change"].as_str().unwrap().to_string(),
                t["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

fn change(ns: &str, change: &str, reason: &str) -> (String, String, String) {
    (ns.into(), change.into(), reason.into())
}

/// The namespaces holding a copy CopyRule `rule` made.
async fn copies_of(env: &TestEnv, rule: &str) -> BTreeSet<String> {
    let lp = ListParams::default().labels(&format!(
        "{}={}",
        marks::MANAGED_BY_LABEL,
        marks::MANAGED_BY_VALUE
    ));
    Api::<Secret>::all(env.client.clone())
        .list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|s| {
            s.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(marks::RULE_ANNOTATION))
                == Some(&format!("copyrule/{rule}"))
        })
        .filter_map(|s| s.metadata.namespace)
        .collect()
}

/// A CopyRule of Secret `source_ns/cred` into the namespaces labelled `selector`, as YAML.
fn rule_yaml(name: &str, source_ns: &str, selector: (&str, &str)) -> String {
    format!(
        "apiVersion: copyrator.io/v1alpha1\nkind: CopyRule\nmetadata:\n  name: {name}\nspec:\n  \
         kind: Secret\n  sourceNamespace: {source_ns}\n  sourceName: cred\n  namespaceSelector:\n    \
         matchLabels:\n      {}: \"{}\"\n",
        selector.0, selector.1
    )
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

async fn apply(yaml: &str) {
    let out = kubectl(&["apply", "-f", "-"], yaml).await;
    assert!(out.success, "kubectl apply: {}", out.stderr);
}

/// Every resourceVersion a write by plan would change: the namespaces', the source's, the
/// unmanaged object's.
async fn versions(env: &TestEnv, namespaces: &[&str], secrets: &[(&str, &str)]) -> Vec<String> {
    let mut out = Vec::new();
    for ns in namespaces {
        let n = Api::<Namespace>::all(env.client.clone())
            .get(ns)
            .await
            .unwrap();
        out.push(n.metadata.resource_version.unwrap_or_default());
    }
    for (ns, name) in secrets {
        let s = env.secrets(ns).get(name).await.unwrap();
        out.push(s.metadata.resource_version.unwrap_or_default());
    }
    out
}

#[tokio::test]
async fn plan_lists_the_namespaces_an_apply_then_fills_and_writes_nothing() {
    let (t, platform) = Harness::start_trusting("pl-platform").await;
    let label = t.name("plan");
    let a = t.namespace("pl-a", &[(&label, "on")]).await;
    let b = t.namespace("pl-b", &[(&label, "on")]).await;
    let off = t.namespace("pl-off", &[]).await;
    let held = t.namespace("pl-held", &[(&label, "on")]).await;
    let create = |ns: String, s: Secret| {
        let api = t.secrets(&ns);
        async move { api.create(&PostParams::default(), &s).await.unwrap() }
    };
    create(platform.clone(), secret("cred", &[], &[], &[("v", "1")])).await;
    // An object copyrator does not manage holds the name in one selected namespace.
    create(held.clone(), secret("cred", &[], &[], &[("mine", "yes")])).await;
    let reader = Reader::new(&t).await;
    let rule = t.name("pl-rule");
    let dir = tempfile::tempdir().unwrap();
    let yaml = rule_yaml(&rule, &platform, (&label, "on"));
    let file = write(&dir, "rule.yaml", &yaml);
    let namespaces = [a.as_str(), b.as_str(), off.as_str(), held.as_str()];
    let secrets = [(platform.as_str(), "cred"), (held.as_str(), "cred")];
    let before = versions(&t, &namespaces, &secrets).await;

    // As an identity that may read everything and write nothing, as copyrator's policy says.
    let trusted = format!("--trusted-namespaces={platform}");
    let kubeconfig = reader.kubeconfig.display().to_string();
    let report = plan_json(&file, &["--kubeconfig", &kubeconfig, &trusted]).await;
    let doc = &report["documents"][0];
    assert_eq!(doc["object"]["name"], rule.as_str(), "{report:#}");
    assert_eq!(doc["state"], "New");
    assert_eq!(
        changes(&report, 0),
        [
            change(&a, "Create", "SelectorMatches"),
            change(&b, "Create", "SelectorMatches"),
            change(&held, "Refused", "UnmanagedObject"),
        ]
    );
    assert!(doc["notSelected"].as_u64().unwrap() >= 2, "{report:#}");
    assert_eq!(doc["summary"]["create"], 2);

    // Nothing was written: no CopyRule, no copy, every object as it was.
    t.quiescent().await;
    assert!(t.rules().get_opt(&rule).await.unwrap().is_none());
    assert!(copies_of(&t, &rule).await.is_empty());
    assert_eq!(versions(&t, &namespaces, &secrets).await, before);

    // The apply fills exactly the namespaces the plan listed to create.
    t.track_copy_rule(&rule);
    apply(&yaml).await;
    t.wait_value::<Secret>(&a, "cred", "v", "1").await;
    t.wait_value::<Secret>(&b, "cred", "v", "1").await;
    t.quiescent().await;
    assert_eq!(
        copies_of(&t, &rule).await,
        BTreeSet::from([a.clone(), b.clone()])
    );
    let mine = t.secrets(&held).get("cred").await.unwrap();
    assert_eq!(secret_value(&mine, "mine").as_deref(), Some("yes"));

    // The table says the same in words.
    let path = file.display().to_string();
    let table = run_copyrator(&["plan", "-f", &path, &trusted]).await;
    assert!(table.success, "{}", table.stderr);
    assert!(
        table
            .stdout
            .contains(&format!("CopyRule {rule} (unchanged)"))
            && table.stdout.contains("in sync")
            && table.stdout.contains("Nothing was written"),
        "{}",
        table.stdout
    );
    reader.remove(&t).await;
    t.finish().await;
}

#[tokio::test]
async fn plan_of_a_tenants_source_lists_the_namespaces_that_refuse_it() {
    let (t, _platform) = Harness::start_trusting("plt-platform").await;
    let tenant = t.namespace("plt-tenant", &[]).await;
    // Named so that the refusing one sorts first, as the plan lists them.
    let accepting = t.namespace("plt-yes", &[]).await;
    let refusing = t.namespace("plt-no", &[]).await;
    Api::<Namespace>::all(t.client.clone())
        .patch(
            &accepting,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {marks::ACCEPT_FROM_ANNOTATION: tenant}}}),
            ),
        )
        .await
        .unwrap();
    let yaml = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: tcred\n  labels:\n    \
         copyrator.io/source: \"true\"\n  annotations:\n    copyrator.io/namespaces: \
         \"{accepting},{refusing}\"\nstringData:\n  v: \"1\"\n"
    );

    // As a kubectl plugin, the file on stdin, its namespace from -n.
    let out = kubectl_copyrator(
        &[
            "plan",
            "-f",
            "-",
            "-n",
            &tenant,
            "-o",
            "json",
            "--lease-namespace",
            "default",
        ],
        &yaml,
    )
    .await;
    assert!(out.success, "{}\n{}", out.stdout, out.stderr);
    let stdout = out.stdout;
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        report["documents"][0]["object"],
        json!({"kind": "Secret", "namespace": tenant, "name": "tcred"})
    );
    assert_eq!(
        changes(&report, 0),
        [
            change(&refusing, "Refused", "NotConsented"),
            change(&accepting, "Create", "Listed"),
        ]
    );
    let refused = report["documents"][0]["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["change"] == "Refused")
        .unwrap();
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains(&format!("{}: {tenant}", marks::ACCEPT_FROM_ANNOTATION)),
        "{refused:#}"
    );
    assert!(t.secrets(&tenant).get_opt("tcred").await.unwrap().is_none());

    // Applied: the consenting namespace gets its copy, the other none.
    let out = kubectl(&["apply", "-n", &tenant, "-f", "-"], &yaml).await;
    assert!(out.success, "{}", out.stderr);
    t.wait_value::<Secret>(&accepting, "tcred", "v", "1").await;
    t.quiescent().await;
    assert!(
        t.secrets(&refusing)
            .get_opt("tcred")
            .await
            .unwrap()
            .is_none()
    );
    t.finish().await;
}

#[tokio::test]
async fn plan_of_a_changed_rule_shows_the_copies_it_would_delete() {
    let (t, platform) = Harness::start_trusting("plc-platform").await;
    let (was, will) = (t.name("plc-was"), t.name("plc-will"));
    let kept = t
        .namespace("plc-kept", &[(&was, "on"), (&will, "on")])
        .await;
    let left = t.namespace("plc-left", &[(&was, "on")]).await;
    t.secrets(&platform)
        .create(
            &PostParams::default(),
            &secret("cred", &[], &[], &[("v", "1")]),
        )
        .await
        .unwrap();
    let rule = t.name("plc-rule");
    t.track_copy_rule(&rule);
    apply(&rule_yaml(&rule, &platform, (&was, "on"))).await;
    t.wait_value::<Secret>(&kept, "cred", "v", "1").await;
    t.wait_value::<Secret>(&left, "cred", "v", "1").await;
    t.quiescent().await;
    let left_version = t
        .secrets(&left)
        .get("cred")
        .await
        .unwrap()
        .metadata
        .resource_version;

    let dir = tempfile::tempdir().unwrap();
    let yaml = rule_yaml(&rule, &platform, (&will, "on"));
    let file = write(&dir, "rule.yaml", &yaml);
    let trusted = format!("--trusted-namespaces={platform}");
    let report = plan_json(&file, &[&trusted]).await;
    assert_eq!(report["documents"][0]["state"], "Changed");
    assert_eq!(
        changes(&report, 0),
        [
            change(&kept, "InSync", "SelectorMatches"),
            change(&left, "Delete", "NoRuleWantsCopy"),
        ]
    );
    let path = file.display().to_string();
    let table = run_copyrator(&["plan", "-f", &path, &trusted]).await;
    assert!(
        table
            .stdout
            .lines()
            .any(|l| l.starts_with(left.as_str()) && l.contains(" delete ")),
        "{}",
        table.stdout
    );
    // Planned, not done: the copy is still there, untouched.
    let still = t.secrets(&left).get("cred").await.unwrap();
    assert_eq!(still.metadata.resource_version, left_version);

    apply(&yaml).await;
    t.wait_gone::<Secret>(&left, "cred").await;
    t.quiescent().await;
    assert_eq!(copies_of(&t, &rule).await, BTreeSet::from([kept.clone()]));
    t.finish().await;
}

#[tokio::test]
async fn plan_of_a_document_admission_would_deny_fails_naming_the_field() {
    let (t, platform) = Harness::start_trusting("pli-platform").await;
    let dir = tempfile::tempdir().unwrap();
    let rule = t.name("pli-rule");
    t.track_copy_rule(&rule);
    let yaml = format!(
        "apiVersion: copyrator.io/v1alpha1\nkind: CopyRule\nmetadata:\n  name: {rule}\nspec:\n  \
         kind: Secret\n  sourceNamespace: {platform}\n  sourceName: cred\n  namespaces: [{platform}]\n"
    );
    let file = write(&dir, "rule.yaml", &yaml);
    let path = file.display().to_string();
    let out = run_copyrator(&["plan", "-f", &path]).await;
    assert!(!out.success, "{}", out.stdout);
    let said = format!("CopyRule {rule}: invalid CopyRule: spec.namespaces: ");
    let denial = out
        .stderr
        .split_once(&said)
        .map(|(_, why)| why.trim().to_string())
        .unwrap_or_else(|| panic!("{}", out.stderr));
    // Admission denies the same rule, in the same words.
    let applied = kubectl(&["apply", "-f", "-"], &yaml).await;
    assert!(!applied.success, "{}", applied.stdout);
    assert!(
        applied
            .stderr
            .contains(&format!("invalid CopyRule: spec.namespaces: {denial}")),
        "plan said {denial:?}; the API server: {}",
        applied.stderr
    );
    assert!(t.rules().get_opt(&rule).await.unwrap().is_none());

    let source = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n  namespace: {platform}\n  labels:\n    \
         copyrator.io/source: \"true\"\n  annotations:\n    copyrator.io/namespaces: \"Not A Name\"\n"
    );
    let file = write(&dir, "source.yaml", &source);
    let path = file.display().to_string();
    let out = run_copyrator(&["plan", "-f", &path]).await;
    assert!(
        !out.success
            && out.stderr.contains(&format!(
                "Secret {platform}/s: invalid annotation copyrator.io/namespaces:"
            )),
        "{}",
        out.stderr
    );
    assert!(t.secrets(&platform).get_opt("s").await.unwrap().is_none());
    t.finish().await;
}
