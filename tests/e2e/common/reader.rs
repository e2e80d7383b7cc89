//! An identity that may get and list everything and write nothing (a ServiceAccount bound to
//! a ClusterRole of those verbs), for commands that promise to only read.

use k8s_openapi::api::{
    core::v1::ServiceAccount,
    rbac::v1::{ClusterRole, ClusterRoleBinding},
};
use kube::{
    Api,
    api::{DeleteParams, ObjectMeta, PostParams},
};
use serde_json::json;

use super::{TestEnv, kubeconfig, service_account_token, write_token_kubeconfig};

/// A kubeconfig for an identity that may get and list everything and write nothing,
/// and the cluster-wide objects that grant it (deleted by [`Reader::remove`]).
pub struct Reader {
    pub kubeconfig: std::path::PathBuf,
    name: String,
    _dir: tempfile::TempDir,
}

impl Reader {
    pub async fn new(env: &TestEnv) -> Self {
        let ns = env.namespace("pl-reader", &[]).await;
        let name = env.name("pl-reader");
        let meta = |namespace: Option<&str>| ObjectMeta {
            name: Some(name.clone()),
            namespace: namespace.map(String::from),
            ..Default::default()
        };
        let create = PostParams::default();
        Api::<ServiceAccount>::namespaced(env.client.clone(), &ns)
            .create(
                &create,
                &ServiceAccount {
                    metadata: meta(Some(&ns)),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let role: ClusterRole = serde_json::from_value(json!({
            "metadata": {"name": name},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list"]}],
        }))
        .unwrap();
        Api::<ClusterRole>::all(env.client.clone())
            .create(&create, &role)
            .await
            .unwrap();
        let binding: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
        }))
        .unwrap();
        Api::<ClusterRoleBinding>::all(env.client.clone())
            .create(&create, &binding)
            .await
            .unwrap();
        let token = service_account_token(&env.client, &ns, &name).await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        write_token_kubeconfig(&kubeconfig(), &token, &path);
        Self {
            kubeconfig: path,
            name,
            _dir: dir,
        }
    }

    pub async fn remove(&self, env: &TestEnv) {
        let dp = DeleteParams::default();
        let _ = Api::<ClusterRoleBinding>::all(env.client.clone())
            .delete(&self.name, &dp)
            .await;
        let _ = Api::<ClusterRole>::all(env.client.clone())
            .delete(&self.name, &dp)
            .await;
    }
}
