//! Truststore formats (SPEC §3.2), end to end: a TLS Secret's CA copied as a ConfigMap with
//! PKCS#12 and JKS truststores beside the PEM, read back by `openssl pkcs12` and Java's
//! `keytool`, unchanged across resyncs; a rule making a truststore of a private key is denied.
//! A store's password from a Secret: `super::passwords`.

use std::process::Command;

use super::{keys, pem_pair, rule};
use crate::common::*;
use copyrator::copyrule::{CopyRule, CopyRuleSpec, FormatsSpec, TargetSpec, TruststoreSpec};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;

/// A self-signed CA certificate whose subject is `CN=<cn>`, PEM, made now.
pub(crate) fn named_ca(cn: &str) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.self_signed(&key).unwrap().pem()
}

fn store(key: &str) -> Option<TruststoreSpec> {
    Some(TruststoreSpec {
        key: key.into(),
        password: None,
        ..Default::default()
    })
}

fn with_truststores(from: Option<&str>) -> Option<TargetSpec> {
    Some(TargetSpec {
        kind: Some("ConfigMap".into()),
        formats: Some(FormatsSpec {
            from: from.map(str::to_string),
            pkcs12: store("truststore.p12"),
            jks: store("truststore.jks"),
        }),
        ..Default::default()
    })
}

/// Runs a tool, and returns what it printed (stdout and stderr); panics when it fails.
pub(crate) fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} runs (is it installed? scripts/bootstrap.sh): {e}"));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{program} {args:?} failed: {said}");
    said
}

pub(crate) fn binary(cm: &ConfigMap, key: &str) -> Option<Vec<u8>> {
    cm.binary_data.as_ref()?.get(key).map(|b| b.0.clone())
}

/// Whether `keytool` opens the JKS store `bytes` with `password` (and lists `cn` in it).
pub(crate) fn jks_opens(bytes: Vec<u8>, password: &str, cn: &str) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("truststore.jks");
    std::fs::write(&path, bytes).unwrap();
    let path = path.to_str().unwrap();
    let out = Command::new("keytool")
        .args(["-list", "-v", "-keystore", path, "-storepass", password])
        .output()
        .expect("keytool runs");
    out.status.success() && String::from_utf8_lossy(&out.stdout).contains(&format!("CN={cn}"))
}

#[tokio::test]
async fn a_ca_becomes_pkcs12_and_jks_truststores_that_openssl_and_keytool_read() {
    let t = Harness::start(Options {
        resync_interval: "1s",
        ..Default::default()
    })
    .await;
    let src = t.namespace("stores-src", &[]).await;
    let dest = t.namespace("stores-dest", &[]).await;
    let cn = format!("Truststore Test CA {}", t.name("ca"));
    let ca = named_ca(&cn);
    let (server, key) = pem_pair("server");
    let mut source = secret(
        "ca",
        &[],
        &[],
        &[("ca.crt", &ca), ("tls.crt", &server), ("tls.key", &key)],
    );
    source.type_ = Some("kubernetes.io/tls".into());
    t.secrets(&src)
        .create(&PostParams::default(), &source)
        .await
        .unwrap();
    t.copy_rule(
        "truststores",
        CopyRuleSpec {
            namespaces: vec![dest.clone()],
            target_name: Some("ca-bundle".into()),
            keys: keys(&["ca.crt"]),
            target: with_truststores(None),
            ..rule(&src, "ca")
        },
    )
    .await;
    let cm = t
        .wait_for::<ConfigMap>(&dest, "ca-bundle", "the CA and both truststores", |c| {
            c.data.as_ref().and_then(|d| d.get("ca.crt")) == Some(&ca)
                && binary(c, "truststore.p12").is_some()
                && binary(c, "truststore.jks").is_some()
        })
        .await;
    assert_eq!(
        cm.data.as_ref().map(|d| d.len()),
        Some(1),
        "only the CA in data"
    );

    // Read back by the tools people use, which list the CA's subject.
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, bytes: Vec<u8>| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path.to_str().unwrap().to_string()
    };
    let p12 = file("truststore.p12", binary(&cm, "truststore.p12").unwrap());
    let jks = file("truststore.jks", binary(&cm, "truststore.jks").unwrap());
    let listed = run(
        "openssl",
        &[
            "pkcs12", "-info", "-nokeys", "-in", &p12, "-passin", "pass:",
        ],
    );
    assert!(listed.contains(&cn), "openssl lists the CA: {listed}");
    let listed = run(
        "keytool",
        &["-list", "-v", "-keystore", &jks, "-storepass", "changeit"],
    );
    assert!(
        listed.contains(&format!("Owner: CN={cn}")) && listed.contains("trustedCertEntry"),
        "keytool lists the CA as trusted: {listed}"
    );
    // Java takes the PKCS#12 store's certificate for a trusted entry too.
    let listed = run(
        "keytool",
        &[
            "-list",
            "-v",
            "-storetype",
            "PKCS12",
            "-keystore",
            &p12,
            "-storepass",
            "",
        ],
    );
    assert!(
        listed.contains(&format!("Owner: CN={cn}")) && listed.contains("trustedCertEntry"),
        "keytool lists the PKCS#12 store's CA as trusted: {listed}"
    );

    // Stable bytes: resyncs write nothing, and the copy keeps its resourceVersion.
    t.quiescent().await;
    let version = t
        .config_maps(&dest)
        .get("ca-bundle")
        .await
        .unwrap()
        .metadata
        .resource_version;
    t.wait_resyncs(2).await;
    let after = t.config_maps(&dest).get("ca-bundle").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, version,
        "two resyncs left the copy as it was"
    );
    t.finish().await;
}

#[tokio::test]
async fn a_truststore_of_a_key_that_is_not_certificates_is_denied() {
    // The sources' content is read at admission only for the API server (SPEC §9.8).
    let Some(t) = Harness::start_with_client_ca().await else {
        return;
    };
    let src = t.namespace("stores-deny-src", &[]).await;
    let dest = t.namespace("stores-deny-dest", &[]).await;
    let (server, key) = pem_pair("server");
    let mut source = secret("tls", &[], &[], &[("tls.crt", &server), ("tls.key", &key)]);
    source.type_ = Some("kubernetes.io/tls".into());
    t.secrets(&src)
        .create(&PostParams::default(), &source)
        .await
        .unwrap();
    // A Secret copy (no ConfigMap involved): the truststore alone asks for certificates.
    let mut target = with_truststores(Some("tls.key"));
    if let Some(t) = target.as_mut() {
        t.kind = None;
        t.type_ = Some("Opaque".into());
    }
    let name = t.name("stores-deny");
    let err = t
        .rules()
        .create(
            &PostParams::default(),
            &CopyRule::new(
                &name,
                CopyRuleSpec {
                    namespaces: vec![dest.clone()],
                    keys: keys(&["tls.crt", "tls.key"]),
                    target,
                    ..rule(&src, "tls")
                },
            ),
        )
        .await
        .expect_err("denied");
    let msg = err.to_string();
    assert!(
        msg.contains("spec.target.formats") && msg.contains("key tls.key holds a private key"),
        "the denial names the field and the key: {msg}"
    );
    // A store whose key is a copied key is denied too, before any source is read.
    let err = t
        .rules()
        .create(
            &PostParams::default(),
            &CopyRule::new(
                &name,
                CopyRuleSpec {
                    namespaces: vec![dest.clone()],
                    keys: keys(&["truststore.jks"]),
                    target: with_truststores(None),
                    ..rule(&src, "tls")
                },
            ),
        )
        .await
        .expect_err("denied");
    assert!(
        err.to_string().contains("spec.target.formats.jks.key"),
        "{err}"
    );
    assert!(t.rules().get_opt(&name).await.unwrap().is_none());
    t.finish().await;
}
