//! The API server calls copyrator's webhooks over TLS, trusting a CA made by `copyrator certs`.

use crate::common;

use std::{process::Command, time::Duration};

use common::{Harness, Options, eventually, secret};
use copyrator::marks;
use kube::api::PostParams;

#[tokio::test]
async fn api_server_calls_the_webhooks_over_tls_with_certs_from_copyrator_certs() {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_copyrator"))
        .args(["certs", "--out"])
        .arg(dir.path())
        .args(["--ip", "127.0.0.1", "--dns", "localhost"])
        .status()
        .unwrap();
    assert!(status.success());
    let ca = std::fs::read(dir.path().join("ca.crt")).unwrap();

    // start_with_certs registers the webhooks with this CA and waits until the API server
    // has called the namespaces webhook for real.
    let t = Harness::start_with_certs(Options::default(), dir, ca).await;
    let sample = "copyrator_admission_requests_total{endpoint=\"namespaces\",operation=\"CREATE\",outcome=\"allowed\"}";
    let before = t.metric(sample).await;
    let ns = t.namespace("tls", &[]).await;
    eventually(
        Duration::from_secs(10),
        "an allowed namespace admission",
        || async { (t.metric(sample).await > before).then_some(()) },
    )
    .await;

    // A denial travels back through the API server to the client, naming the annotation.
    let bad = secret(
        "bad-source",
        &[(marks::SOURCE_LABEL, "true")],
        &[(marks::NAMESPACE_SELECTOR_ANNOTATION, "env in prod")],
        &[("k", "v")],
    );
    let err = t
        .secrets(&ns)
        .create(&PostParams::default(), &bad)
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("copyrator.io/namespace-selector"), "{msg}");
    assert!(
        t.secrets(&ns)
            .get_opt("bad-source")
            .await
            .unwrap()
            .is_none(),
        "the denied Secret was not stored"
    );

    t.finish().await;
}

/// `--client-ca`: the API server, presenting the webhook client certificate its admission
/// configuration gives it, is let in; a client without a certificate, or with one from another
/// CA, is refused at the TLS handshake.
#[tokio::test]
async fn with_a_client_ca_only_the_api_server_gets_in() {
    // It waits for the API server's calls to arrive: the API server gets in.
    let Some(t) = Harness::start_with_client_ca().await else {
        return;
    };
    let sample = "copyrator_admission_requests_total{endpoint=\"namespaces\",operation=\"CREATE\",outcome=\"allowed\"}";
    let before = t.metric(sample).await;
    t.namespace("mtls", &[]).await;
    eventually(
        Duration::from_secs(10),
        "the API server's review",
        || async { (t.metric(sample).await > before).then_some(()) },
    )
    .await;

    let port = t.copyrator().running().webhook_addr.port();
    let server_ca = t.copyrator().certs.path().join("ca.crt");
    // curl on a blocking thread: the in-process copyrator answers on this test's runtime.
    let refused = |args: Vec<String>| {
        let server_ca = server_ca.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                let out = Command::new("curl")
                    .args(["-sS", "-o", "/dev/null", "--max-time", "10", "--cacert"])
                    .arg(server_ca)
                    .args(args)
                    .arg(format!("https://127.0.0.1:{port}/admission/namespaces"))
                    .args(["-d", "{}"])
                    .output()
                    .unwrap();
                !out.status.success()
            })
            .await
            .unwrap()
        }
    };
    assert!(
        refused(vec![]).await,
        "a client without a certificate is refused"
    );
    // A certificate from another CA (the serving pair of a `copyrator certs` run).
    let other = tempfile::tempdir().unwrap();
    assert!(
        Command::new(env!("CARGO_BIN_EXE_copyrator"))
            .args(["certs", "--out"])
            .arg(other.path())
            .status()
            .unwrap()
            .success()
    );
    assert!(
        refused(vec![
            "--cert".into(),
            other.path().join("tls.crt").display().to_string(),
            "--key".into(),
            other.path().join("tls.key").display().to_string(),
        ])
        .await,
        "a certificate from another CA is refused"
    );
    // The API server's own certificate works from here too: the check is the certificate.
    let client_ca = common::webhook_client_ca().expect("the client CA it was started with");
    let dir = client_ca.parent().unwrap();
    assert!(
        !refused(vec![
            "--cert".into(),
            dir.join("webhook-client.crt").display().to_string(),
            "--key".into(),
            dir.join("webhook-client.key").display().to_string(),
        ])
        .await,
        "the API server's client certificate is accepted"
    );

    t.finish().await;
}
