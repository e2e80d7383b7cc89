//! The harness itself: a real API server stores and returns what kube-rs sends it.

use crate::common;

use common::{TestEnv, build, secret_value};

#[tokio::test]
async fn control_plane_stores_and_returns_a_namespace_and_a_secret() {
    let env = TestEnv::new().await;
    let ns = env.namespace("smoke", &[("purpose", "smoke")]).await;
    let created = build::secret("hello")
        .data("greeting", "hi")
        .create(&env, &ns)
        .await;
    assert!(
        created.metadata.uid.is_some(),
        "the API server assigns a uid"
    );

    let read = env.secrets(&ns).get("hello").await.unwrap();
    assert_eq!(secret_value(&read, "greeting").as_deref(), Some("hi"));
    let namespace = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(env.client.clone())
        .get(&ns)
        .await
        .unwrap();
    assert_eq!(
        namespace
            .metadata
            .labels
            .unwrap()
            .get("purpose")
            .map(String::as_str),
        Some("smoke")
    );
    env.cleanup().await;
}
