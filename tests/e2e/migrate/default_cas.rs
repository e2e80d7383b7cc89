//! trust-manager Bundles that take the default CAs, migrated and applied as printed: the README's
//! first Bundle (`useDefaultCAs: true` alone) and "the public CAs and our root" (plus one
//! Secret) give each selected namespace a bundle of Mozilla's roots, and the root; a resync
//! then writes nothing. Read from a file (`-f`): the Bundle CRD stays the one test's in
//! `migrate.rs` that installs it.

use std::collections::BTreeSet;

use base64::{Engine, engine::general_purpose::STANDARD};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;

use super::{apply_manifests, pem_bodies};
use crate::common::*;

/// trust-manager's README Bundle (`NAME` unique per run), with a `namespaceSelector` (`LABEL`)
/// so that it fills this test's namespaces only, and a Bundle of the public CAs and one
/// Secret's root (`NAME-corp`).
const BUNDLES: &str = r#"
apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata:
  name: NAME
spec:
  sources:
  - useDefaultCAs: true
  target:
    configMap:
      key: "bundle.pem"
    namespaceSelector:
      matchLabels:
        LABEL: "on"
---
apiVersion: trust.cert-manager.io/v1alpha1
kind: Bundle
metadata:
  name: NAME-corp
spec:
  sources:
  - useDefaultCAs: true
  - secret:
      name: "root-secret"
      key: "tls.crt"
  target:
    configMap:
      key: "ca-certificates.crt"
    namespaceSelector:
      matchLabels:
        LABEL: "on"
"#;

/// Mozilla's roots as the package copyrator is built with holds them, as [`pem_bodies`] gives
/// certificates.
fn mozilla_roots() -> BTreeSet<String> {
    webpki_root_certs::TLS_SERVER_ROOT_CERTS
        .iter()
        .map(|der| STANDARD.encode(der.as_ref()))
        .collect()
}

/// Waits until ConfigMap `ns/name` holds exactly `want` under `key`; returns it.
async fn wait_bundle(
    t: &Harness,
    ns: &str,
    name: &str,
    key: &str,
    want: &BTreeSet<String>,
) -> ConfigMap {
    t.wait_for::<ConfigMap>(ns, name, "the bundle", |cm| {
        cm.data
            .as_ref()
            .and_then(|d| d.get(key))
            .is_some_and(|pem| &pem_bodies(pem) == want)
    })
    .await
}

#[tokio::test]
async fn bundles_of_the_default_cas_migrate_to_bundles_of_mozilla_s_roots() {
    let env = TestEnv::new().await;
    let trust = env.namespace("tm-default-trust", &[]).await;
    let t = Harness::start_in(
        env,
        Options {
            resync_interval: "1s",
            extra: vec![format!("--trusted-namespaces={trust}")],
            ..Default::default()
        },
    )
    .await;
    let label = t.name("tm-default");
    let dest = t.namespace("tm-default-dest", &[(&label, "on")]).await;
    let other = t.namespace("tm-default-other", &[]).await;
    let root = ca_cert("corp-root");
    t.secrets(&trust)
        .create(
            &PostParams::default(),
            &secret("root-secret", &[], &[], &[("tls.crt", &root)]),
        )
        .await
        .unwrap();
    let name = t.name("trust-manager-bundle");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bundles.yaml");
    std::fs::write(
        &file,
        BUNDLES.replace("NAME", &name).replace("LABEL", &label),
    )
    .unwrap();

    let out = run_copyrator(&[
        "migrate",
        "--from",
        "trust-manager",
        "-f",
        file.to_str().unwrap(),
        "--trust-namespace",
        &trust,
        "--trusted-namespaces",
        &trust,
        "-o",
        "yaml",
    ])
    .await;
    assert!(out.success, "{}", out.stderr);
    let yaml = &out.stdout;
    assert_eq!(yaml.matches("defaultCAs: true").count(), 2, "{yaml}");
    assert!(!yaml.contains("Not migrated"), "{yaml}");
    apply_manifests(&t, yaml).await;

    let roots = mozilla_roots();
    assert!(roots.len() > 100, "{}", roots.len());
    let readme = wait_bundle(&t, &dest, &name, "bundle.pem", &roots).await;
    let mut with_root = roots.clone();
    with_root.extend(pem_bodies(&root));
    let corp = wait_bundle(
        &t,
        &dest,
        &format!("{name}-corp"),
        "ca-certificates.crt",
        &with_root,
    )
    .await;
    for copy in [name.clone(), format!("{name}-corp")] {
        assert!(
            t.config_maps(&other)
                .get_opt(&copy)
                .await
                .unwrap()
                .is_none(),
            "{copy} in {other}"
        );
    }

    // Steady: resyncs write neither copy.
    t.quiescent().await;
    t.wait_resyncs(2).await;
    for (before, key) in [(readme, "bundle.pem"), (corp, "ca-certificates.crt")] {
        let name = before.metadata.name.clone().unwrap();
        let after = t.config_maps(&dest).get(&name).await.unwrap();
        assert_eq!(
            after.metadata.resource_version, before.metadata.resource_version,
            "a resync rewrote {name}"
        );
        assert!(after.data.unwrap().contains_key(key));
    }
    t.finish().await;
}
