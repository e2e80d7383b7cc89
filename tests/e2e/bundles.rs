//! Bundles (SPEC §3.2, Bundles), end to end: a CopyRule with `sources` combines certificates of
//! several Secrets and ConfigMaps into one key of its copies; the copies follow a source
//! deleted and created again without ever being emptied, follow a CA rotation step by step,
//! take a tenant's certificate only where the namespace consents, and resyncs of an unchanged
//! bundle write nothing. Its truststores: `bundles/truststores.rs`.

use crate::common;

mod default_cas;
mod truststores;

use std::{
    collections::BTreeSet,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use common::*;
use copyrator::{
    copyrule::{BundleSourceSpec, CopyRule, CopyRuleSpec, CopyRuleStatus},
    marks,
};
use k8s_openapi::{
    api::core::v1::{ConfigMap, Namespace},
    apimachinery::pkg::apis::meta::v1::LabelSelector,
};
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

/// The key the bundles of these tests are written to.
const KEY: &str = "ca-bundle.pem";

/// A self-signed CA certificate, PEM, made now.
fn cert(name: &str) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.self_signed(&key).unwrap().pem()
}

/// The certificates of a PEM text, each as its base64 body on one line: comparable whatever
/// the line breaks and order.
fn bodies(pem: &str) -> BTreeSet<String> {
    pem.split("-----END CERTIFICATE-----")
        .filter_map(|block| block.split("-----BEGIN CERTIFICATE-----").nth(1))
        .map(|body| body.split_whitespace().collect())
        .collect()
}

/// The certificates of `pems`, as [`bodies`] gives them.
fn set(pems: &[&str]) -> BTreeSet<String> {
    pems.iter().flat_map(|p| bodies(p)).collect()
}

fn named(kind: &str, ns: &str, name: &str, key: &str) -> BundleSourceSpec {
    BundleSourceSpec {
        kind: kind.into(),
        namespace: ns.into(),
        name: Some(name.into()),
        selector: None,
        key: key.into(),
        ..Default::default()
    }
}

fn selecting(label: &str) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_labels: Some([(label.to_string(), "on".to_string())].into()),
        match_expressions: None,
    })
}

/// A bundle rule: `sources` into the ConfigMap `ca-bundle` (key [`KEY`]) of every namespace
/// labelled `label=on`.
fn bundle(label: &str, sources: Vec<BundleSourceSpec>) -> CopyRuleSpec {
    serde_json::from_value(json!({
        "kind": "ConfigMap",
        "sources": sources,
        "targetName": "ca-bundle",
        "target": {"key": KEY},
        "namespaceSelector": selecting(label),
    }))
    .unwrap()
}

/// What the bundle copy in `ns` holds, when there is one.
async fn held(t: &Harness, ns: &str) -> Option<BTreeSet<String>> {
    let cm = t.config_maps(ns).get_opt("ca-bundle").await.unwrap()?;
    Some(bodies(cm.data.as_ref()?.get(KEY)?))
}

/// Waits until the bundle copy in `ns` holds exactly `want`.
async fn wait_holding(t: &Harness, ns: &str, want: &BTreeSet<String>, what: &str) {
    eventually(CONVERGE, what, || async {
        (held(t, ns).await.as_ref() == Some(want)).then_some(())
    })
    .await;
}

async fn patch_rule(t: &Harness, name: &str, sources: Vec<BundleSourceSpec>) {
    t.rules()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"sources": sources}})),
        )
        .await
        .unwrap();
}

fn status_is(check: impl Fn(&CopyRuleStatus) -> bool) -> impl Fn(&CopyRule) -> bool {
    move |r| r.status.as_ref().is_some_and(&check)
}

/// Watches the bundle copy in `ns` until stopped, and fails the test if it is ever seen
/// missing or empty once it held certificates: a bundle is never emptied.
fn never_empty(t: &Harness, ns: &str) -> (Arc<AtomicBool>, tokio::task::JoinHandle<()>) {
    let stop = Arc::new(AtomicBool::new(false));
    let api: Api<ConfigMap> = t.config_maps(ns);
    let done = Arc::clone(&stop);
    let task = tokio::spawn(async move {
        while !done.load(Ordering::SeqCst) {
            let cm = api.get_opt("ca-bundle").await.unwrap();
            let pem = cm
                .as_ref()
                .and_then(|c| c.data.as_ref())
                .and_then(|d| d.get(KEY));
            assert!(
                pem.is_some_and(|p| !bodies(p).is_empty()),
                "the bundle was missing or empty: {cm:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    (stop, task)
}

#[tokio::test]
async fn a_bundle_of_two_sources_stays_correct_while_one_is_deleted_and_recreated() {
    let t = Harness::start(Options::default()).await;
    let label = t.name("bundle");
    let src = t.namespace("bundle-src", &[]).await;
    let dest = t.namespace("bundle-dest", &[(&label, "on")]).await;
    let (root, corp) = (cert("root"), cert("corp"));
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret("root", &[], &[], &[("ca.crt", &root), ("tls.key", "x")]),
        )
        .await
        .unwrap();
    let corp_cm = config_map("corp", &[], &[], &[("ca.pem", &corp)]);
    t.config_maps(&src)
        .create(&PostParams::default(), &corp_cm)
        .await
        .unwrap();
    let name = t
        .copy_rule(
            "bundle",
            bundle(
                &label,
                vec![
                    named("Secret", &src, "root", "ca.crt"),
                    named("ConfigMap", &src, "corp", "ca.pem"),
                ],
            ),
        )
        .await;
    let both = set(&[&root, &corp]);
    wait_holding(&t, &dest, &both, "both certificates").await;
    let cm = t.config_maps(&dest).get("ca-bundle").await.unwrap();
    let annotations = cm.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get(marks::SOURCE_ANNOTATION),
        Some(&format!("copyrule/{name}"))
    );
    assert_eq!(
        cm.data.unwrap().keys().collect::<Vec<_>>(),
        [KEY],
        "one key, nothing else of the sources"
    );

    // One source goes: the bundle keeps the other's certificate, and is never empty. (Once
    // copyrator is idle: no job of the rule's own creation is left to notice it.)
    t.quiescent().await;
    let (stop, watcher) = never_empty(&t, &dest);
    t.config_maps(&src)
        .delete("corp", &DeleteParams::default())
        .await
        .unwrap();
    wait_holding(&t, &dest, &set(&[&root]), "the remaining certificate").await;
    t.wait_for::<CopyRule>(
        "",
        &name,
        "the missing source in status",
        status_is(|s| {
            s.left_out
                .iter()
                .any(|l| l.source.contains("corp") && l.key == "ca.pem")
        }),
    )
    .await;
    // Created again (opted in, as a CopyRule's named source is): both again.
    let mut again = corp_cm.clone();
    again.metadata.labels = Some([(marks::SOURCE_LABEL.to_string(), "true".to_string())].into());
    t.config_maps(&src)
        .create(&PostParams::default(), &again)
        .await
        .unwrap();
    wait_holding(&t, &dest, &both, "both certificates again").await;
    stop.store(true, Ordering::SeqCst);
    watcher.await.unwrap();
    t.finish().await;
}

#[tokio::test]
async fn rotating_a_ca_adds_the_new_one_then_drops_the_old_and_the_copies_follow_each_step() {
    let t = Harness::start(Options::default()).await;
    let label = t.name("rotate");
    let src = t.namespace("rotate-src", &[]).await;
    let a = t.namespace("rotate-a", &[(&label, "on")]).await;
    let (old, new) = (cert("old"), cert("new"));
    for (name, pem) in [("old-ca", &old), ("new-ca", &new)] {
        t.secrets(&src)
            .create(
                &PostParams::default(),
                &secret(name, &[], &[], &[("ca.crt", pem)]),
            )
            .await
            .unwrap();
    }
    let name = t
        .copy_rule(
            "rotate",
            bundle(&label, vec![named("Secret", &src, "old-ca", "ca.crt")]),
        )
        .await;
    wait_holding(&t, &a, &set(&[&old]), "the old CA").await;
    let (stop, watcher) = never_empty(&t, &a);

    // Step 1: the new CA joins.
    patch_rule(
        &t,
        &name,
        vec![
            named("Secret", &src, "old-ca", "ca.crt"),
            named("Secret", &src, "new-ca", "ca.crt"),
        ],
    )
    .await;
    wait_holding(&t, &a, &set(&[&old, &new]), "both CAs").await;
    // Step 2: the old one leaves.
    patch_rule(&t, &name, vec![named("Secret", &src, "new-ca", "ca.crt")]).await;
    wait_holding(&t, &a, &set(&[&new]), "the new CA alone").await;
    // A new namespace gets what the bundle holds now; a renewed certificate is followed.
    let b = t.namespace("rotate-b", &[(&label, "on")]).await;
    wait_holding(&t, &b, &set(&[&new]), "the new CA in a new namespace").await;
    // Once idle, a source's own change is what updates the copies.
    t.quiescent().await;
    let renewed = cert("new");
    t.secrets(&src)
        .patch(
            "new-ca",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"ca.crt": renewed}})),
        )
        .await
        .unwrap();
    for ns in [&a, &b] {
        wait_holding(&t, ns, &set(&[&renewed]), "the renewed CA").await;
    }
    stop.store(true, Ordering::SeqCst);
    watcher.await.unwrap();
    t.finish().await;
}

#[tokio::test]
async fn a_tenants_bundle_source_reaches_only_namespaces_that_consent() {
    let (t, platform) = Harness::start_trusting("bundle-platform").await;
    let label = t.name("tenant-bundle");
    let tenant = t.namespace("bundle-tenant", &[]).await;
    let consenting = t.namespace("bundle-consents", &[(&label, "on")]).await;
    let plain = t.namespace("bundle-plain", &[(&label, "on")]).await;
    Api::<Namespace>::all(t.client.clone())
        .patch(
            &consenting,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
                marks::ACCEPT_FROM_ANNOTATION: tenant
            }}})),
        )
        .await
        .unwrap();
    let (root, theirs, later) = (cert("root"), cert("tenant"), cert("tenant-later"));
    t.secrets(&platform)
        .create(
            &PostParams::default(),
            &secret("root", &[], &[], &[("ca.crt", &root)]),
        )
        .await
        .unwrap();
    // A Secret the tenant labels in its own namespace, matching the bundle's selector.
    t.secrets(&tenant)
        .create(
            &PostParams::default(),
            &secret("mine", &[("ca", "on")], &[], &[("ca.crt", &theirs)]),
        )
        .await
        .unwrap();
    let mut spec = bundle(&label, vec![named("Secret", &platform, "root", "ca.crt")]);
    spec.sources.as_mut().unwrap().push(BundleSourceSpec {
        kind: "Secret".into(),
        namespace: tenant.clone(),
        name: None,
        selector: selecting("ca"),
        key: "ca.crt".into(),
        ..Default::default()
    });
    t.copy_rule("tenant-bundle", spec).await;
    wait_holding(
        &t,
        &consenting,
        &set(&[&root, &theirs]),
        "the tenant's certificate where it is accepted",
    )
    .await;
    wait_holding(&t, &plain, &set(&[&root]), "the trusted one alone").await;
    // A new match of the tenant's selector is followed, and still only where accepted.
    t.secrets(&tenant)
        .create(
            &PostParams::default(),
            &secret("more", &[("ca", "on")], &[], &[("ca.crt", &later)]),
        )
        .await
        .unwrap();
    wait_holding(
        &t,
        &consenting,
        &set(&[&root, &theirs, &later]),
        "the tenant's new certificate where it is accepted",
    )
    .await;
    stays(
        Duration::from_millis(500),
        "no tenant certificate without consent",
        || async { held(&t, &plain).await == Some(set(&[&root])) },
    )
    .await;
    t.finish().await;
}

#[tokio::test]
async fn resyncs_of_an_unchanged_bundle_write_nothing() {
    let t = Harness::start(Options {
        resync_interval: "1s",
        ..Default::default()
    })
    .await;
    let label = t.name("steady");
    let src = t.namespace("steady-src", &[]).await;
    let dest = t.namespace("steady-dest", &[(&label, "on")]).await;
    let (a, b) = (cert("a"), cert("b"));
    // The same certificates twice, in another order and spacing: one bundle of two.
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret("one", &[], &[], &[("ca.crt", &format!("{a}{b}"))]),
        )
        .await
        .unwrap();
    t.config_maps(&src)
        .create(
            &PostParams::default(),
            &config_map("two", &[], &[], &[("ca.pem", &format!("\n{b}\n\n{a}"))]),
        )
        .await
        .unwrap();
    let name = t
        .copy_rule(
            "steady",
            bundle(
                &label,
                vec![
                    named("Secret", &src, "one", "ca.crt"),
                    named("ConfigMap", &src, "two", "ca.pem"),
                ],
            ),
        )
        .await;
    wait_holding(&t, &dest, &set(&[&a, &b]), "the two certificates").await;
    t.wait_for::<CopyRule>(
        "",
        &name,
        "in sync",
        status_is(|s| s.synced_copies == 1 && s.conflicting_copies == 0),
    )
    .await;
    t.quiescent().await;
    let before = t.config_maps(&dest).get("ca-bundle").await.unwrap();
    t.wait_resyncs(2).await;
    let after = t.config_maps(&dest).get("ca-bundle").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "a resync of an unchanged bundle writes nothing"
    );
    t.finish().await;
}
