//! The hub phase's instruments: control planes of their own, a watch of a member's receiving
//! namespace, Secrets written by apply, and the hub's read requests from its /metrics.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    process::Command,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams, PostParams, WatchEvent, WatchParams},
};
use serde_json::json;

use crate::{common::secret, measure::counter_deltas};

/// Each Secret's `config.json`, by name, with when a watch saw it.
type Seen = Arc<Mutex<HashMap<String, (Vec<u8>, Instant)>>>;

/// The latest version of each Secret of one namespace, with when a watch saw it.
pub struct Latest {
    latest: Seen,
    pub task: tokio::task::JoinHandle<()>,
}

impl Latest {
    pub async fn start(api: Api<Secret>) -> Self {
        let latest = Arc::new(Mutex::new(HashMap::new()));
        let out = Arc::clone(&latest);
        let rv = api
            .list_metadata(&Default::default())
            .await
            .expect("listing the receiving namespace")
            .metadata
            .resource_version
            .unwrap_or_default();
        let task = tokio::spawn(async move {
            let mut rv = rv;
            loop {
                let Ok(stream) = api.watch(&WatchParams::default().timeout(290), &rv).await else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let mut stream = std::pin::pin!(stream);
                while let Some(Ok(event)) = stream.next().await {
                    let now = Instant::now();
                    match event {
                        WatchEvent::Added(s) | WatchEvent::Modified(s) => {
                            rv = s.resource_version().unwrap_or_default();
                            let value = s
                                .data
                                .as_ref()
                                .and_then(|d| d.get("config.json"))
                                .map(|v| v.0.clone())
                                .unwrap_or_default();
                            out.lock().unwrap().insert(s.name_any(), (value, now));
                        }
                        WatchEvent::Bookmark(b) => rv = b.metadata.resource_version,
                        _ => {}
                    }
                }
            }
        });
        Self { latest, task }
    }

    /// How long after `since` the Secret `name` was seen holding `value` (waits up to 60 s).
    pub async fn wait(&self, name: &str, value: &str, since: Instant) -> Duration {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some((v, at)) = self.latest.lock().unwrap().get(name)
                && v == value.as_bytes()
            {
                return at.saturating_duration_since(since);
            }
            assert!(
                Instant::now() < deadline,
                "the copy {name} holding the update"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// A control plane of its own (scripts/control-plane.sh), stopped when dropped.
pub struct ControlPlane {
    dir: PathBuf,
    pub kubeconfig: PathBuf,
}

impl ControlPlane {
    pub fn up(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("{name}.{}", std::process::id()));
        let kubeconfig = crate::hub_fixture::control_plane_up(&dir, "a member");
        Self { dir, kubeconfig }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let _ = Command::new(root.join("scripts/control-plane.sh"))
            .env_remove("COPYRATOR_KUBECONFIG")
            .args(["down", "--dir"])
            .arg(&self.dir)
            .output();
    }
}

pub async fn create_namespace(client: &Client, name: &str, labels: &[(&str, &str)]) {
    let labels: HashMap<&str, &str> = labels.iter().copied().collect();
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
}

/// Creates or replaces the Secret `namespace/name` holding `config.json=value`.
pub async fn set_value(
    client: &Client,
    namespace: &str,
    name: &str,
    value: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
) {
    let mut s = secret(name, labels, annotations, &[("config.json", value)]);
    s.metadata.namespace = Some(namespace.into());
    Api::<Secret>::namespaced(client.clone(), namespace)
        .patch(
            name,
            &PatchParams::apply("copyrator-bench").force(),
            &Patch::Apply(&s),
        )
        .await
        .unwrap_or_else(|e| panic!("writing Secret {namespace}/{name}: {e}"));
}

/// The hub API server's /metrics.
pub async fn hub_metrics(hub: &Client) -> String {
    use http_body_util::BodyExt;
    let req = hyper::Request::get("/metrics")
        .body(kube::client::Body::empty())
        .unwrap();
    let resp = hub.send(req).await.expect("the hub's /metrics");
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8_lossy(&bytes).to_string()
}

/// The hub's read requests of Secrets and CopyRules between two scrapes (the members': the
/// driver only writes), as (verb, resource, count), summed over the other labels.
pub fn member_reads(before: &str, after: &str) -> Vec<(String, String, f64)> {
    let label = |sample: &str, key: &str| {
        let at = sample.find(&format!("{key}=\""))? + key.len() + 2;
        Some(sample[at..].split('"').next()?.to_string())
    };
    let mut sums: std::collections::BTreeMap<(String, String), f64> = Default::default();
    for (sample, d) in counter_deltas("apiserver_request_total", before, after) {
        let (Some(verb), Some(resource)) = (label(&sample, "verb"), label(&sample, "resource"))
        else {
            continue;
        };
        if matches!(verb.as_str(), "GET" | "LIST" | "WATCH")
            && matches!(resource.as_str(), "secrets" | "copyrules")
        {
            *sums.entry((verb, resource)).or_default() += d;
        }
    }
    sums.into_iter().map(|((v, r), d)| (v, r, d)).collect()
}
