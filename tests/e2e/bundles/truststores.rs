//! Truststore formats on a bundle (SPEC §3.2), end to end: one CopyRule makes a CA bundle of
//! two sources into PEM, JKS and PKCS#12 in a namespace, the stores read back by `keytool` and
//! `openssl` holding both certificates, unchanged across resyncs; a store's password taken
//! from a Secret in a trusted namespace opens it, a changed password re-makes it, and a
//! missing one leaves the copy as it was, said in status and an Event.

use super::{KEY, named, selecting};
use crate::{
    common::*,
    keys::{
        passwords::store_follows_its_password,
        truststores::{binary, named_ca, run},
    },
};
use copyrator::copyrule::{CopyRule, CopyRuleSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use serde_json::json;

/// A temporary file holding `bytes`, and its path.
fn file(dir: &tempfile::TempDir, name: &str, bytes: Vec<u8>) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    path.to_str().unwrap().to_string()
}

/// What `keytool -list` says of a JKS store opened with `password`.
fn keytool_jks(path: &str, password: &str) -> String {
    run(
        "keytool",
        &["-list", "-v", "-keystore", path, "-storepass", password],
    )
}

#[tokio::test]
async fn a_bundle_of_two_sources_comes_as_pem_jks_and_pkcs12() {
    let t = Harness::start(Options {
        resync_interval: "1s",
        ..Default::default()
    })
    .await;
    let label = t.name("bundle-stores");
    let src = t.namespace("bundle-stores-src", &[]).await;
    let dest = t.namespace("bundle-stores-dest", &[(&label, "on")]).await;
    let (root_cn, corp_cn) = (t.name("Bundle Root CA"), t.name("Bundle Corp CA"));
    let (root, corp) = (named_ca(&root_cn), named_ca(&corp_cn));
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret("root", &[], &[], &[("ca.crt", &root)]),
        )
        .await
        .unwrap();
    t.config_maps(&src)
        .create(
            &PostParams::default(),
            &config_map("corp", &[], &[], &[("ca.pem", &corp)]),
        )
        .await
        .unwrap();
    let spec: CopyRuleSpec = serde_json::from_value(json!({
        "kind": "ConfigMap",
        "sources": [named("Secret", &src, "root", "ca.crt"), named("ConfigMap", &src, "corp", "ca.pem")],
        "targetName": "ca-bundle",
        "target": {"key": KEY, "formats": {
            "pkcs12": {"key": "truststore.p12"},
            "jks": {"key": "truststore.jks", "password": "bundle-pass"},
        }},
        "namespaceSelector": selecting(&label),
    }))
    .unwrap();
    t.copy_rule("bundle-stores", spec).await;
    let cm = t
        .wait_for::<ConfigMap>(&dest, "ca-bundle", "the bundle and both stores", |c| {
            binary(c, "truststore.p12").is_some() && binary(c, "truststore.jks").is_some()
        })
        .await;
    assert_eq!(
        cm.data.as_ref().map(|d| d.keys().collect::<Vec<_>>()),
        Some(vec![&KEY.to_string()]),
        "the PEM in data, the stores in binaryData"
    );

    let dir = tempfile::tempdir().unwrap();
    let jks = file(
        &dir,
        "truststore.jks",
        binary(&cm, "truststore.jks").unwrap(),
    );
    let p12 = file(
        &dir,
        "truststore.p12",
        binary(&cm, "truststore.p12").unwrap(),
    );
    let listed = keytool_jks(&jks, "bundle-pass");
    for cn in [&root_cn, &corp_cn] {
        assert!(
            listed.contains(&format!("Owner: CN={cn}")),
            "keytool lists {cn}: {listed}"
        );
    }
    assert_eq!(listed.matches("trustedCertEntry").count(), 2, "{listed}");
    let listed = run(
        "openssl",
        &[
            "pkcs12", "-info", "-nokeys", "-in", &p12, "-passin", "pass:",
        ],
    );
    for cn in [&root_cn, &corp_cn] {
        assert!(listed.contains(cn.as_str()), "openssl lists {cn}: {listed}");
    }

    // Stable bytes: resyncs write nothing.
    t.quiescent().await;
    let version = cm.metadata.resource_version.clone();
    t.wait_resyncs(2).await;
    let after = t.config_maps(&dest).get("ca-bundle").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, version,
        "two resyncs left the copy as it was"
    );
    t.finish().await;
}

#[tokio::test]
async fn a_store_password_from_a_secret_opens_the_store_and_follows_the_secret() {
    // The API server verified: it hears which namespaces are trusted (SPEC §9.8).
    let Some((t, platform)) = Harness::start_trusting_verified("pw-platform").await else {
        return;
    };
    let label = t.name("pw-bundle");
    let dest = t.namespace("pw-dest", &[(&label, "on")]).await;
    let cn = t.name("Password Test CA");
    t.secrets(&platform)
        .create(
            &PostParams::default(),
            &secret("root", &[], &[], &[("ca.crt", &named_ca(&cn))]),
        )
        .await
        .unwrap();
    t.secrets(&platform)
        .create(
            &PostParams::default(),
            &secret("store-password", &[], &[], &[("jks", "first-pass")]),
        )
        .await
        .unwrap();
    let spec = |ns: &str| -> CopyRuleSpec {
        serde_json::from_value(json!({
            "kind": "ConfigMap",
            "sources": [named("Secret", &platform, "root", "ca.crt")],
            "targetName": "ca-bundle",
            "target": {"key": KEY, "formats": {"jks": {"key": "truststore.jks",
                "passwordSecretRef": {"namespace": ns, "name": "store-password", "key": "jks"}}}},
            "namespaceSelector": selecting(&label),
        }))
        .unwrap()
    };
    // A password read from a namespace that is not trusted is denied.
    let err = t
        .rules()
        .create(
            &PostParams::default(),
            &CopyRule::new(&t.name("pw-untrusted"), spec(&dest)),
        )
        .await
        .expect_err("denied");
    assert!(err.to_string().contains("not trusted"), "{err}");

    let name = t.copy_rule("pw-bundle", spec(&platform)).await;
    store_follows_its_password(&t, &name, &platform, &dest, &cn).await;
    t.finish().await;
}
