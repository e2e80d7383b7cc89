//! One test's corner of the shared cluster: the cluster itself (its kubeconfig, a client, the
//! CopyRule CRD), unique names, the namespaces and CopyRules a test made, and their cleanup —
//! also after a panic.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::{Mutex, OnceLock},
    time::Duration,
};

use copyrator::app as serve;
use k8s_openapi::{
    api::core::v1::{ConfigMap, Namespace, Secret},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

use super::wait::eventually;

/// The kubeconfig of the cluster under test, starting a local control plane if needed.
pub fn kubeconfig() -> PathBuf {
    static KUBECONFIG: OnceLock<PathBuf> = OnceLock::new();
    KUBECONFIG
        .get_or_init(|| {
            if let Ok(path) = std::env::var("COPYRATOR_KUBECONFIG")
                && !path.is_empty()
            {
                return PathBuf::from(path);
            }
            let root = Path::new(env!("CARGO_MANIFEST_DIR"));
            let dir =
                std::env::temp_dir().join(format!("copyrator-test-cp.{}", std::process::id()));
            let out = Command::new(root.join("scripts/control-plane.sh"))
                .args(["up", "--dir"])
                .arg(&dir)
                .args(["--owner-pid", &std::process::id().to_string()])
                .output()
                .expect("running scripts/control-plane.sh (run scripts/bootstrap.sh first)");
            assert!(
                out.status.success(),
                "control plane failed to start:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string())
        })
        .clone()
}

pub async fn client() -> Client {
    let client = serve::kube_client(Some(&kubeconfig()))
        .await
        .expect("kube client");
    install_crd(&client).await;
    client
}

/// Installs the CopyRule CRD (server-side apply, idempotent) and waits until it is served.
async fn install_crd(client: &Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::CustomResourceExt;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = copyrator::copyrule::CopyRule::crd();
    let name = crd.name_any();
    crds.patch(
        &name,
        &PatchParams::apply("copyrator-e2e").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("installing the CopyRule CRD");
    let rules: Api<copyrator::copyrule::CopyRule> = Api::all(client.clone());
    eventually(
        Duration::from_secs(30),
        "the CopyRule CRD being served",
        || {
            let rules = rules.clone();
            async move {
                rules
                    .list(&ListParams::default().limit(1))
                    .await
                    .ok()
                    .map(|_| ())
            }
        },
    )
    .await;
}

/// A suffix no other name in this cluster has.
pub(crate) fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{:x}{:x}",
        nanos % 0xfffff,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// One test's corner of the cluster: unique names, and everything it created, for cleanup.
pub struct TestEnv {
    pub client: Client,
    pub id: String,
    namespaces: Mutex<Vec<String>>,
    copy_rules: Mutex<Vec<String>>,
}

impl TestEnv {
    pub async fn new() -> Self {
        Self {
            client: client().await,
            id: unique_suffix(),
            namespaces: Mutex::new(Vec::new()),
            copy_rules: Mutex::new(Vec::new()),
        }
    }

    /// `base-<id>`: a name no other test uses.
    pub fn name(&self, base: &str) -> String {
        format!("{base}-{}", self.id)
    }

    /// Creates namespace `base-<id>` with `labels`; returns its name.
    pub async fn namespace(&self, base: &str, labels: &[(&str, &str)]) -> String {
        let name = self.name(base);
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        self.namespaces.lock().unwrap().push(name.clone());
        name
    }

    /// Remembers a namespace created some other way, for cleanup.
    pub fn track_namespace(&self, name: &str) {
        self.namespaces.lock().unwrap().push(name.to_string());
    }

    pub fn track_copy_rule(&self, name: &str) {
        self.copy_rules.lock().unwrap().push(name.to_string());
    }

    pub async fn label_namespace(&self, name: &str, labels: serde_json::Value) {
        Api::<Namespace>::all(self.client.clone())
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": labels}})),
            )
            .await
            .unwrap();
    }

    pub fn secrets(&self, ns: &str) -> Api<Secret> {
        Api::namespaced(self.client.clone(), ns)
    }

    pub fn config_maps(&self, ns: &str) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Deletes what the test made: sources and CopyRules first (so nothing is left for later
    /// tests to copy), then its namespaces.
    pub async fn cleanup(self) {
        let copy_rules = std::mem::take(&mut *self.copy_rules.lock().unwrap());
        let namespaces = std::mem::take(&mut *self.namespaces.lock().unwrap());
        delete_all(&self.client, copy_rules, namespaces).await;
    }
}

/// A test that panicked never reaches `cleanup()`: clean up anyway, on a runtime of our own
/// (the test's is unwinding), so later tests sharing the cluster do not see its sources.
impl Drop for TestEnv {
    fn drop(&mut self) {
        let copy_rules =
            std::mem::take(&mut *self.copy_rules.lock().unwrap_or_else(|e| e.into_inner()));
        let namespaces =
            std::mem::take(&mut *self.namespaces.lock().unwrap_or_else(|e| e.into_inner()));
        if copy_rules.is_empty() && namespaces.is_empty() {
            return;
        }
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async move {
                let client = serve::kube_client(Some(&kubeconfig())).await.ok()?;
                delete_all(&client, copy_rules, namespaces).await;
                Some(())
            })
        })
        .join();
    }
}

async fn delete_all(client: &Client, copy_rules: Vec<String>, namespaces: Vec<String>) {
    let rules: Api<copyrator::copyrule::CopyRule> = Api::all(client.clone());
    for r in copy_rules {
        let _ = rules.delete(&r, &DeleteParams::default()).await;
    }
    let lp = ListParams::default();
    for ns in &namespaces {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
        for s in secrets.list(&lp).await.map(|l| l.items).unwrap_or_default() {
            let _ = secrets
                .delete(&s.name_any(), &DeleteParams::default())
                .await;
        }
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        for c in config_maps
            .list(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default()
        {
            let _ = config_maps
                .delete(&c.name_any(), &DeleteParams::default())
                .await;
        }
    }
    let api = Api::<Namespace>::all(client.clone());
    for ns in namespaces {
        let _ = api.delete(&ns, &DeleteParams::default()).await;
    }
}
