//! A bundle's default CAs (SPEC §3.2, Bundles), end to end: `{defaultCAs: true}` puts Mozilla's
//! roots, from the package copyrator is built with, into every copy, whatever the namespace
//! trusts; the CopyRule's status names the package and its version; a resync writes nothing;
//! `--default-cas-file` replaces them with the administrator's certificates.

use std::collections::BTreeSet;

use base64::{Engine, engine::general_purpose::STANDARD};
use copyrator::copyrule::{BundleSourceSpec, CopyRule};
use kube::api::PostParams;

use super::{bundle, cert, held, named, set, status_is, wait_holding};
use crate::common::*;

fn default_cas() -> BundleSourceSpec {
    BundleSourceSpec {
        default_cas: true,
        ..Default::default()
    }
}

/// Mozilla's roots as the package copyrator is built with holds them, as [`bodies`] gives
/// certificates.
fn mozilla_roots() -> BTreeSet<String> {
    webpki_root_certs::TLS_SERVER_ROOT_CERTS
        .iter()
        .map(|der| STANDARD.encode(der.as_ref()))
        .collect()
}

#[tokio::test]
async fn the_public_cas_go_into_every_copy_and_the_status_names_their_package() {
    // copyrator trusts one namespace, not the sources'.
    let env = TestEnv::new().await;
    let trusted = format!("--trusted-namespaces={}", env.name("public-platform"));
    let t = Harness::start_in(
        env,
        Options {
            resync_interval: "1s",
            extra: vec![trusted],
            ..Default::default()
        },
    )
    .await;
    let label = t.name("public");
    let src = t.namespace("public-src", &[]).await;
    let dest = t.namespace("public-dest", &[(&label, "on")]).await;
    let root = cert("public-root");
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &secret("root", &[], &[], &[("ca.crt", &root)]),
        )
        .await
        .unwrap();
    let name = t
        .copy_rule(
            "public",
            bundle(
                &label,
                vec![default_cas(), named("Secret", &src, "root", "ca.crt")],
            ),
        )
        .await;
    // src is not trusted and dest accepts nothing from it: the root stays out, and the public
    // CAs, the platform's, are there all the same.
    let roots = mozilla_roots();
    assert!(roots.len() > 100, "{}", roots.len());
    wait_holding(&t, &dest, &roots, "Mozilla's roots").await;
    assert!(held(&t, &dest).await.unwrap().is_disjoint(&set(&[&root])));
    let rule = t
        .wait_for::<CopyRule>(
            "",
            &name,
            "the default CAs in status",
            status_is(|s| s.default_cas.is_some() && s.synced_copies == 1),
        )
        .await;
    let shown = rule.status.unwrap().default_cas.unwrap();
    assert_eq!(
        (shown.package.as_deref(), shown.version.as_deref()),
        (
            Some("webpki-root-certs"),
            Some(copyrator::default_cas::PACKAGE_VERSION)
        )
    );
    assert_eq!(shown.certificates as usize, roots.len());

    // explain shows them beside the sources, counted.
    let out = run_copyrator(&["explain", "namespace", &dest, "-o", "json"]).await;
    assert!(out.success, "explain failed: {}", out.stderr);
    let report = out.json();
    let bundle = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|f| (f["source"]["name"] == name.as_str()).then(|| &f["bundle"]))
        .unwrap_or_else(|| panic!("no finding of {name}: {report}"));
    assert_eq!(
        bundle["defaultCAs"]["source"],
        format!(
            "webpki-root-certs {}",
            copyrator::default_cas::PACKAGE_VERSION
        ),
        "{bundle}"
    );
    assert_eq!(bundle["defaultCAs"]["certificates"], roots.len());
    assert_eq!(bundle["certificates"], roots.len(), "{bundle}");

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

#[tokio::test]
async fn a_default_cas_file_replaces_the_package() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (cert("corp-public-one"), cert("corp-public-two"));
    let file = dir.path().join("ca-certificates.crt");
    std::fs::write(&file, format!("{one}\n{two}")).unwrap();
    let path = file.to_str().unwrap().to_string();
    let t = Harness::start(Options {
        extra: vec![format!("--default-cas-file={path}")],
        ..Default::default()
    })
    .await;
    let label = t.name("file-cas");
    let dest = t.namespace("file-cas-dest", &[(&label, "on")]).await;
    let name = t
        .copy_rule("file-cas", bundle(&label, vec![default_cas()]))
        .await;
    wait_holding(&t, &dest, &set(&[&one, &two]), "the file's certificates").await;
    let rule = t
        .wait_for::<CopyRule>(
            "",
            &name,
            "the file in status",
            status_is(|s| s.default_cas.is_some()),
        )
        .await;
    let shown = rule.status.unwrap().default_cas.unwrap();
    assert_eq!(shown.file.as_deref(), Some(path.as_str()));
    assert_eq!(shown.package, None);
    assert_eq!(shown.certificates, 2);
    t.finish().await;
}
