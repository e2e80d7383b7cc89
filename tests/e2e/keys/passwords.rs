//! A truststore's password from a Secret (`passwordSecretRef`, SPEC §3.2), end to end: read
//! only from a trusted namespace, it opens the store and the default does not; a changed
//! password re-makes the store; a missing one leaves the copy as it was, said in the rule's
//! status, a Warning Event and `explain`.

use super::{
    keys, pem_pair, rule,
    truststores::{binary, jks_opens, named_ca},
};
use crate::common::*;
use base64::{Engine, engine::general_purpose::STANDARD};
use copyrator::copyrule::{
    CopyRule, CopyRuleSpec, FormatsSpec, PasswordSecretRef, TargetSpec, TruststoreSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

/// What a CopyRule promises of its JKS store `truststore.jks` in `dest`'s `ca-bundle`, its
/// password read from the Secret `platform/store-password` (key `jks`, holding `first-pass`),
/// a bundle or not (SPEC §3.2): that password opens it and the default does not; a new
/// password makes it again; the key removed leaves the copy as it was, said in the rule's
/// status, a Warning Event and `explain namespace`.
pub(crate) async fn store_follows_its_password(
    t: &Harness,
    rule: &str,
    platform: &str,
    dest: &str,
    cn: &str,
) {
    let jks = |c: &ConfigMap| binary(c, "truststore.jks");
    let cm = t
        .wait_for::<ConfigMap>(dest, "ca-bundle", "the JKS store", |c| jks(c).is_some())
        .await;
    let first = jks(&cm).unwrap();
    assert!(
        jks_opens(first.clone(), "first-pass", cn),
        "the Secret's password opens it"
    );
    assert!(
        !jks_opens(first.clone(), "changeit", cn),
        "the default does not"
    );

    // A new password: the store is made again under it, no source changed. (Once copyrator
    // is idle: no job of the rule's own creation is left to make it.)
    t.quiescent().await;
    let secrets = t.secrets(platform);
    let set_password = |value: serde_json::Value| {
        let secrets = secrets.clone();
        async move {
            secrets
                .patch(
                    "store-password",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {"jks": value}})),
                )
                .await
                .unwrap();
        }
    };
    set_password(json!(STANDARD.encode("second-pass"))).await;
    let cm = t
        .wait_for::<ConfigMap>(dest, "ca-bundle", "the store made again", |c| {
            jks(c).is_some_and(|b| b != first)
        })
        .await;
    assert!(jks_opens(jks(&cm).unwrap(), "second-pass", cn));

    // The key gone: no store under a wrong password; the copy stays, the rule says why.
    t.quiescent().await;
    let version = t
        .config_maps(dest)
        .get("ca-bundle")
        .await
        .unwrap()
        .metadata
        .resource_version;
    set_password(serde_json::Value::Null).await;
    t.wait_for::<CopyRule>("", rule, "the conflict in status", |r| {
        r.status.as_ref().is_some_and(|s| {
            s.conflicts.iter().any(|c| {
                c.namespace == dest && c.reason.contains("store-password key jks has no such key")
            })
        })
    })
    .await;
    eventually(
        CONVERGE,
        "a TruststorePasswordUnavailable Event",
        || async {
            (!rule_events(t, rule, "TruststorePasswordUnavailable")
                .await
                .is_empty())
            .then_some(())
        },
    )
    .await;
    let cm = t.config_maps(dest).get("ca-bundle").await.unwrap();
    assert_eq!(
        cm.metadata.resource_version, version,
        "the copy is left as it was"
    );

    // `explain` gives the same reason, and plans no write (none under a default password).
    let trusted = format!("--trusted-namespaces={platform}");
    let out = run_copyrator(&["explain", "namespace", dest, "-o", "json", &trusted]).await;
    assert!(out.success, "explain failed: {}", out.stderr);
    let report = out.json();
    let f = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["target"]["name"] == "ca-bundle")
        .unwrap_or_else(|| panic!("no finding about ca-bundle: {report}"));
    assert_eq!(f["reason"], "TruststorePasswordUnavailable", "{f}");
    assert_eq!(f["action"], "None", "{f}");
}

#[tokio::test]
async fn a_store_password_from_a_secret_opens_a_single_source_rules_store_and_follows_it() {
    // The API server verified: it hears which namespaces are trusted (SPEC §9.8).
    let Some((t, platform)) = Harness::start_trusting_verified("pw-keys-platform").await else {
        return;
    };
    let dest = t.namespace("pw-keys-dest", &[]).await;
    // A cert-manager-style TLS Secret whose CA is copied, and the store's password beside it.
    let cn = t.name("Keys Password CA");
    let ca = named_ca(&cn);
    let (server, key) = pem_pair("server");
    let mut source = secret(
        "ca",
        &[],
        &[],
        &[("ca.crt", &ca), ("tls.crt", &server), ("tls.key", &key)],
    );
    source.type_ = Some("kubernetes.io/tls".into());
    let secrets = t.secrets(&platform);
    secrets
        .create(&PostParams::default(), &source)
        .await
        .unwrap();
    secrets
        .create(
            &PostParams::default(),
            &secret("store-password", &[], &[], &[("jks", "first-pass")]),
        )
        .await
        .unwrap();
    let spec = |ns: &str| CopyRuleSpec {
        namespaces: vec![dest.clone()],
        target_name: Some("ca-bundle".into()),
        keys: keys(&["ca.crt"]),
        target: Some(TargetSpec {
            kind: Some("ConfigMap".into()),
            formats: Some(FormatsSpec {
                from: None,
                pkcs12: None,
                jks: Some(TruststoreSpec {
                    key: "truststore.jks".into(),
                    password: None,
                    password_secret_ref: Some(PasswordSecretRef {
                        namespace: ns.into(),
                        name: "store-password".into(),
                        key: "jks".into(),
                    }),
                }),
            }),
            ..Default::default()
        }),
        ..rule(&platform, "ca")
    };
    // A password read from a namespace that is not trusted is denied.
    let err = t
        .rules()
        .create(
            &PostParams::default(),
            &CopyRule::new(&t.name("pw-keys-untrusted"), spec(&dest)),
        )
        .await
        .expect_err("denied");
    assert!(err.to_string().contains("not trusted"), "{err}");

    let name = t.copy_rule("pw-keys", spec(&platform)).await;
    let cm = t
        .wait_for::<ConfigMap>(&dest, "ca-bundle", "the CA and its JKS store", |c| {
            binary(c, "truststore.jks").is_some()
        })
        .await;
    assert_eq!(cm.data.as_ref().and_then(|d| d.get("ca.crt")), Some(&ca));
    store_follows_its_password(&t, &name, &platform, &dest, &cn).await;
    t.finish().await;
}
