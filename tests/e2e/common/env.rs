//! One test's corner of the shared cluster: the cluster itself (its kubeconfig, a client, the
//! CopyRule CRD), unique names, the namespaces and CopyRules a test made, and their cleanup —
//! also after a panic.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::{
        Mutex, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use copyrator::{
    cluster::client as serve,
    copyrule::{CopyRule, CopyRuleSpec},
};
use k8s_openapi::{
    api::core::v1::{ConfigMap, Namespace, Secret},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

use super::{process::Process, wait::eventually, webhooks};

/// The username of [`kubeconfig`]'s user (scripts/control-plane.sh's static token): what
/// copyrator runs as in tests unless given another kubeconfig (`--own-username`).
pub const ADMIN_USERNAME: &str = "admin";

/// The CA of the client certificate the test API server presents to webhooks (what
/// `copyrator serve --client-ca` verifies), when scripts/control-plane.sh started that server.
pub fn webhook_client_ca() -> Option<PathBuf> {
    let path = kubeconfig().parent()?.join("webhook-client-ca.crt");
    path.exists().then_some(path)
}

/// `--client-ca` naming [`webhook_client_ca`]: copyrator then answers only the API server, and
/// gives it the answers that turn on trust, consent and the namespace (SPEC §9.8). `None`,
/// said on stderr (the test is then skipped), when the cluster under test was not started by
/// scripts/control-plane.sh.
pub fn client_ca_arg() -> Option<String> {
    let Some(client_ca) = webhook_client_ca() else {
        eprintln!(
            "skipped: the cluster under test was not started by scripts/control-plane.sh, so its webhook client CA is unknown"
        );
        return None;
    };
    Some(format!("--client-ca={}", client_ca.display()))
}

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

/// An admin client of the cluster under test, the CopyRule CRD installed. A test's requests may
/// wait on the webhooks it studies under load: they get a minute, as kubectl's would, not
/// copyrator's `--api-timeout`.
pub async fn client() -> Client {
    let client =
        serve::kube_client_with_timeout(Some(&kubeconfig()), std::time::Duration::from_secs(60))
            .await
            .expect("kube client");
    install_crd(&client).await;
    client
}

/// Installs the CopyRule and NamespacedCopyRule CRDs (server-side apply, idempotent), as the
/// chart does, and waits until they are served.
async fn install_crd(client: &Client) {
    use copyrator::namespaced::NamespacedCopyRule;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::CustomResourceExt;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in [CopyRule::crd(), NamespacedCopyRule::crd()] {
        let name = crd.name_any();
        crds.patch(
            &name,
            &PatchParams::apply("copyrator-e2e").force(),
            &Patch::Apply(&crd),
        )
        .await
        .expect("installing a CRD of copyrator's");
    }
    served::<NamespacedCopyRule>(client, "NamespacedCopyRule").await;
    served::<CopyRule>(client, "CopyRule").await;
}

/// Waits until the API server serves the resource of `K` (its CRD just applied).
async fn served<K>(client: &Client, kind: &str)
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    eventually(
        Duration::from_secs(30),
        &format!("the {kind} CRD being served"),
        || {
            let api = api.clone();
            async move {
                api.list(&ListParams::default().limit(1))
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
    use std::sync::atomic::AtomicU32;
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
    /// The e2e webhook configuration is registered on this test's behalf.
    webhooks: AtomicBool,
}

impl TestEnv {
    pub async fn new() -> Self {
        Self {
            client: client().await,
            id: unique_suffix(),
            namespaces: Mutex::new(Vec::new()),
            copy_rules: Mutex::new(Vec::new()),
            webhooks: AtomicBool::new(false),
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

    /// Remembers a CopyRule (cluster-scoped), for cleanup.
    pub fn track_copy_rule(&self, name: &str) {
        self.copy_rules.lock().unwrap().push(name.to_string());
    }

    /// Creates CopyRule `base-<id>` with `spec`; returns its name.
    pub async fn copy_rule(&self, base: &str, spec: CopyRuleSpec) -> String {
        let name = self.name(base);
        self.rules()
            .create(&PostParams::default(), &CopyRule::new(&name, spec))
            .await
            .unwrap_or_else(|e| panic!("creating CopyRule {name}: {e}"));
        self.track_copy_rule(&name);
        name
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

    /// CopyRules (cluster-scoped).
    pub fn rules(&self) -> Api<CopyRule> {
        Api::all(self.client.clone())
    }

    /// Registers `process`'s webhooks (and waits until the API server calls them); they are
    /// removed by [`TestEnv::cleanup`], or by `Drop` if the test panics.
    pub async fn register_webhooks(&self, process: &Process) {
        self.webhooks_registered();
        process.register_webhooks(&self.client).await;
    }

    /// Removes the webhook configuration now (before the end of the test).
    pub async fn unregister_webhooks(&self) {
        webhooks::unregister_webhooks(&self.client).await;
        self.webhooks.store(false, Ordering::Relaxed);
    }

    /// The e2e webhook configuration is (about to be) registered for this test: remove it at
    /// the end, and first of all if the test panics.
    pub(crate) fn webhooks_registered(&self) {
        self.webhooks.store(true, Ordering::Relaxed);
    }

    /// Deletes what the test made: the webhook configuration, sources and CopyRules first (so
    /// nothing is left for later tests to copy), then its namespaces.
    pub async fn cleanup(self) {
        self.clean().await;
    }

    pub(crate) async fn clean(&self) {
        let leftovers = self.take();
        leftovers.delete(&self.client).await;
    }

    fn take(&self) -> Leftovers {
        let take = |m: &Mutex<Vec<String>>| {
            std::mem::take(&mut *m.lock().unwrap_or_else(|e| e.into_inner()))
        };
        Leftovers {
            webhooks: self.webhooks.swap(false, Ordering::Relaxed),
            copy_rules: take(&self.copy_rules),
            namespaces: take(&self.namespaces),
        }
    }
}

/// A test that panicked never reaches `cleanup()`: clean up anyway, on a runtime of our own in
/// a thread of its own (the test's runtime is unwinding, and it would be the one to answer
/// webhook calls), so later tests sharing the cluster see neither its webhooks nor its sources.
/// Best effort: errors are ignored, and this never panics.
impl Drop for TestEnv {
    fn drop(&mut self) {
        let leftovers = self.take();
        if leftovers.is_empty() {
            return;
        }
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async move {
                let client = serve::kube_client(Some(&kubeconfig())).await.ok()?;
                tokio::time::timeout(
                    Duration::from_secs(60),
                    leftovers.delete_after_panic(&client),
                )
                .await
                .ok()
            })
        })
        .join();
    }
}

/// What a test leaves behind in the cluster.
struct Leftovers {
    webhooks: bool,
    copy_rules: Vec<String>,
    namespaces: Vec<String>,
}

impl Leftovers {
    fn is_empty(&self) -> bool {
        !self.webhooks && self.copy_rules.is_empty() && self.namespaces.is_empty()
    }

    async fn delete(self, client: &Client) {
        if self.webhooks {
            webhooks::unregister_webhooks(client).await;
        }
        delete_all(client, self.copy_rules, self.namespaces).await;
    }

    /// As [`Leftovers::delete`]; the webhooks' server (the test's runtime) no longer answers,
    /// so the deletes wait until the API server has dropped the webhook configuration.
    async fn delete_after_panic(self, client: &Client) {
        if self.webhooks {
            webhooks::unregister_webhooks(client).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        delete_all(client, self.copy_rules, self.namespaces).await;
    }
}

async fn delete_all(client: &Client, copy_rules: Vec<String>, namespaces: Vec<String>) {
    let rules: Api<CopyRule> = Api::all(client.clone());
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
