//! Pods as the test cluster takes them (it has no controller-manager: no `default`
//! ServiceAccount, no token controller) and the registry credentials the Pod gate injects.

use k8s_openapi::{
    ByteString,
    api::core::v1::{Container, LocalObjectReference, Pod, PodSpec, Secret, ServiceAccount},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{Api, Client, api::PostParams};

use copyrator::marks;

use super::objects::secret;

/// A registry credential (type kubernetes.io/dockerconfigjson) copied into namespaces labelled
/// `selector`; `pull`: its rule asks for it to be injected as an image pull secret.
pub fn registry_secret(name: &str, selector: &str, pull: bool) -> Secret {
    let mut annotations = vec![(marks::NAMESPACE_SELECTOR_ANNOTATION, selector)];
    if pull {
        annotations.push((marks::IMAGE_PULL_SECRET_ANNOTATION, "true"));
    }
    let mut s = secret(name, &[(marks::SOURCE_LABEL, "true")], &annotations, &[]);
    s.type_ = Some("kubernetes.io/dockerconfigjson".into());
    s.data = Some(
        [(
            ".dockerconfigjson".to_string(),
            ByteString(br#"{"auths":{"registry.example":{"auth":"dTpw"}}}"#.to_vec()),
        )]
        .into(),
    );
    s
}

/// A Pod as a Deployment would make it (no token: the test cluster has no token controller).
pub fn pod(name: &str, pull_secrets: &[&str], inject: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            annotations: inject
                .map(|v| [(marks::INJECT_ANNOTATION.to_string(), v.to_string())].into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            automount_service_account_token: Some(false),
            image_pull_secrets: (!pull_secrets.is_empty()).then(|| {
                pull_secrets
                    .iter()
                    .map(|n| LocalObjectReference {
                        name: n.to_string(),
                    })
                    .collect()
            }),
            containers: vec![Container {
                name: "app".into(),
                image: Some("registry.example/app:1".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn pull_secret_names(p: &Pod) -> Vec<String> {
    p.spec
        .as_ref()
        .and_then(|s| s.image_pull_secrets.as_ref())
        .map(|l| l.iter().map(|r| r.name.clone()).collect())
        .unwrap_or_default()
}

/// The `default` ServiceAccount Pods need (no controller-manager makes it here).
pub async fn service_account(client: &Client, ns: &str) {
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some("default".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
}

pub async fn create_pod(client: &Client, ns: &str, pod: &Pod) -> Pod {
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), pod)
        .await
        .unwrap_or_else(|e| panic!("creating a Pod in {ns}: {e}"))
}
