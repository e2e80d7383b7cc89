//! A tenant of a shared cluster, as the API server knows one: a ServiceAccount whose Role allows
//! Secrets and ConfigMaps in its own namespace and nothing else, used through its own client
//! (a TokenRequest token), never through impersonation.

use std::path::PathBuf;

use k8s_openapi::api::{
    core::v1::{ConfigMap, Secret, ServiceAccount},
    rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject},
};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};

use super::{TestEnv, kubeconfig, service_account_token, write_token_kubeconfig};

pub struct Tenant {
    pub namespace: String,
    pub client: Client,
    /// A kubeconfig with the tenant's token, for `kubectl`.
    pub kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tenant {
    /// Creates namespace `base-<id>` and a tenant who may edit Secrets and ConfigMaps there.
    pub async fn new(env: &TestEnv, base: &str) -> Self {
        let namespace = env.namespace(base, &[]).await;
        let meta = |name: &str| ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.clone()),
            ..Default::default()
        };
        let create = PostParams::default();
        Api::<ServiceAccount>::namespaced(env.client.clone(), &namespace)
            .create(
                &create,
                &ServiceAccount {
                    metadata: meta("tenant"),
                    ..Default::default()
                },
            )
            .await
            .expect("tenant ServiceAccount");
        Api::<Role>::namespaced(env.client.clone(), &namespace)
            .create(
                &create,
                &Role {
                    metadata: meta("edit-config"),
                    rules: Some(vec![PolicyRule {
                        api_groups: Some(vec![String::new()]),
                        resources: Some(vec!["secrets".into(), "configmaps".into()]),
                        verbs: [
                            "get", "list", "watch", "create", "update", "patch", "delete",
                        ]
                        .map(String::from)
                        .to_vec(),
                        ..Default::default()
                    }]),
                },
            )
            .await
            .expect("tenant Role");
        Api::<RoleBinding>::namespaced(env.client.clone(), &namespace)
            .create(
                &create,
                &RoleBinding {
                    metadata: meta("tenant-edit-config"),
                    role_ref: RoleRef {
                        api_group: Some("rbac.authorization.k8s.io".into()),
                        kind: "Role".into(),
                        name: "edit-config".into(),
                    },
                    subjects: Some(vec![Subject {
                        kind: "ServiceAccount".into(),
                        name: "tenant".into(),
                        namespace: Some(namespace.clone()),
                        ..Default::default()
                    }]),
                },
            )
            .await
            .expect("tenant RoleBinding");
        let token = service_account_token(&env.client, &namespace, "tenant").await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        write_token_kubeconfig(&kubeconfig(), &token, &path);
        let client = copyrator::cluster::client::kube_client(Some(&path))
            .await
            .expect("the tenant's client");
        Self {
            namespace,
            client,
            kubeconfig: path,
            _dir: dir,
        }
    }

    pub fn secrets(&self, ns: &str) -> Api<Secret> {
        Api::namespaced(self.client.clone(), ns)
    }

    pub fn config_maps(&self, ns: &str) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// `kubectl apply` of `manifest` (YAML) as the tenant; returns (success, stderr). Runs on
    /// a blocking thread: copyrator may be serving the API server's webhook call from this
    /// test's runtime meanwhile.
    pub async fn kubectl_apply(&self, manifest: &str) -> (bool, String) {
        let kubeconfig = self.kubeconfig.clone();
        let manifest = manifest.to_string();
        tokio::task::spawn_blocking(move || kubectl_apply_with(&kubeconfig, &manifest))
            .await
            .unwrap()
    }
}

/// `kubectl --kubeconfig KUBECONFIG apply -f -` of `manifest`; (success, stderr). Blocking.
pub fn kubectl_apply_with(kubeconfig: &std::path::Path, manifest: &str) -> (bool, String) {
    {
        use std::io::Write;
        let mut child = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["apply", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("kubectl");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(manifest.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}
