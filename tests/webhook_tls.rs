//! The API server calls copyrator's webhooks over TLS, trusting a CA made by `copyrator certs`.

mod common;

use std::{process::Command, time::Duration};

use common::{Copyrator, Options, TestEnv, eventually, secret};
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
    let copyrator = Copyrator::start_with_certs(Options::default(), dir, ca).await;
    let env = TestEnv::new().await;
    let sample = "copyrator_admission_requests_total{endpoint=\"namespaces\",operation=\"CREATE\",outcome=\"allowed\"}";
    let before = copyrator.metric(sample).await;
    let ns = env.namespace("tls", &[]).await;
    eventually(
        Duration::from_secs(10),
        "an allowed namespace admission",
        || async { (copyrator.metric(sample).await > before).then_some(()) },
    )
    .await;

    // A denial travels back through the API server to the client, naming the annotation.
    let bad = secret(
        "bad-source",
        &[(marks::SOURCE_LABEL, "true")],
        &[(marks::NAMESPACE_SELECTOR_ANNOTATION, "env in prod")],
        &[("k", "v")],
    );
    let err = env
        .secrets(&ns)
        .create(&PostParams::default(), &bad)
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("copyrator.io/namespace-selector"), "{msg}");
    assert!(
        env.secrets(&ns)
            .get_opt("bad-source")
            .await
            .unwrap()
            .is_none(),
        "the denied Secret was not stored"
    );

    copyrator.stop().await;
    env.cleanup().await;
}
