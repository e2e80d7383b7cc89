//! End-to-end test harness: a real kube-apiserver + etcd (started once per test process, or
//! the cluster in `COPYRATOR_KUBECONFIG`), per-test namespaces with unique names, and
//! copyrator itself running in-process with its webhooks registered in the API server over TLS.
#![allow(dead_code)]

use std::{
    collections::BTreeMap,
    future::Future,
    path::{Path, PathBuf},
    process::Command,
    sync::{Mutex, OnceLock},
    time::{Duration, Instant},
};

use clap::Parser;
use copyrator::{
    app::{self as serve, Running},
    certs::{self, CertRequest},
    cli::{Cli, Command as CliCommand},
    manifests::{self, WebhookOptions, WebhookTarget},
};
use k8s_openapi::{
    api::{
        admissionregistration::v1::ValidatingWebhookConfiguration,
        authentication::v1::{TokenRequest, TokenRequestSpec},
        core::v1::{ConfigMap, Namespace, Secret, ServiceAccount},
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

pub mod tenant;

pub const WEBHOOK_CONFIG_NAME: &str = "copyrator-e2e";

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

/// Polls `check` until it returns `Some`, or panics after `timeout` with `what`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How long tests wait for copyrator to converge. A correctness bound, not a performance claim.
pub const CONVERGE: Duration = Duration::from_secs(20);

/// Asserts that `check` keeps holding for `period` (for "nothing happens" assertions).
pub async fn stays<F, Fut>(period: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < period {
        assert!(check().await, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn unique_suffix() -> String {
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

/// A Secret source with the shell-operator style inline rule.
pub fn secret(
    name: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
    data: &[(&str, &str)],
) -> Secret {
    Secret {
        metadata: meta(name, labels, annotations),
        string_data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

pub fn config_map(
    name: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
    data: &[(&str, &str)],
) -> ConfigMap {
    ConfigMap {
        metadata: meta(name, labels, annotations),
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

fn meta(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> ObjectMeta {
    let map = |pairs: &[(&str, &str)]| -> Option<BTreeMap<String, String>> {
        (!pairs.is_empty()).then(|| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
    };
    ObjectMeta {
        name: Some(name.into()),
        labels: map(labels),
        annotations: map(annotations),
        ..Default::default()
    }
}

/// Decoded value of one key of a Secret.
pub fn secret_value(s: &Secret, key: &str) -> Option<String> {
    s.data
        .as_ref()?
        .get(key)
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
}

/// A free port below the ephemeral range (32768+): a port from the ephemeral range can be
/// taken by an outgoing connection between this check and the server binding it.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    // Each test process walks its own stretch of ports, so that parallel processes rarely meet.
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 20_000 + (std::process::id() % 120) as u16 * 100;
    for _ in 0..12_000 {
        let port = 20_000 + (base - 20_000 + NEXT.fetch_add(1, Ordering::Relaxed)) % 12_000;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port between 20000 and 32000")
}

/// Writes a CA and a serving certificate for 127.0.0.1 into a new temporary directory.
pub fn test_certs() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let generated = certs::write(
        dir.path(),
        &CertRequest {
            dns_names: vec!["localhost".into()],
            ips: vec!["127.0.0.1".parse().unwrap()],
            valid_days: 2,
        },
    )
    .unwrap();
    (dir, generated.ca_cert_pem.into_bytes())
}

/// Registers (or replaces) the e2e webhook configuration pointing at `base_url`.
pub async fn register_webhooks(client: &Client, base_url: &str, ca: &[u8]) {
    let mut cfg = manifests::webhook_configuration(&WebhookOptions {
        name: WEBHOOK_CONFIG_NAME.into(),
        target: WebhookTarget::Url(base_url.into()),
        ca_bundle: ca.to_vec(),
        exclude_namespaces: vec!["kube-system".into()],
        timeout_seconds: 5,
    });
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    if let Some(existing) = api.get_opt(WEBHOOK_CONFIG_NAME).await.unwrap() {
        cfg.metadata.resource_version = existing.resource_version();
        api.replace(WEBHOOK_CONFIG_NAME, &PostParams::default(), &cfg)
            .await
            .unwrap();
    } else {
        api.create(&PostParams::default(), &cfg).await.unwrap();
    }
}

pub async fn unregister_webhooks(client: &Client) {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let _ = api
        .delete(WEBHOOK_CONFIG_NAME, &DeleteParams::default())
        .await;
}

/// copyrator running in this test process.
pub struct Copyrator {
    pub running: Option<Running>,
    pub certs: tempfile::TempDir,
    pub ca: Vec<u8>,
    client: Client,
}

/// Options for [`Copyrator::start`].
pub struct Options {
    pub resync_interval: &'static str,
    pub webhooks: bool,
    pub extra: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            resync_interval: "1h",
            webhooks: true,
            extra: Vec::new(),
        }
    }
}

impl Copyrator {
    /// Starts copyrator against the test cluster and, unless disabled, registers its webhooks
    /// and waits until the API server calls them.
    pub async fn start(opts: Options) -> Self {
        let (certs, ca) = test_certs();
        Self::start_with_certs(opts, certs, ca).await
    }

    pub async fn start_with_certs(opts: Options, certs: tempfile::TempDir, ca: Vec<u8>) -> Self {
        // Logs of the in-process copyrator, when asked for with RUST_LOG.
        if std::env::var_os("RUST_LOG").is_some() {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
        }
        let client = client().await;
        let args = serve_args(&opts, certs.path());
        let running = serve::start(&args).await.expect("copyrator starts");
        let base = format!("https://127.0.0.1:{}", running.webhook_addr.port());
        if opts.webhooks {
            register_webhooks(&client, &base, &ca).await;
            wait_for_webhooks(
                &client,
                "the API server calling copyrator's webhooks",
                || std::future::ready(metric_value(&running.metrics.encode(), DRY_RUN_PROBES)),
            )
            .await;
        }
        Self {
            running: Some(running),
            certs,
            ca,
            client,
        }
    }

    pub fn running(&self) -> &Running {
        self.running.as_ref().expect("running")
    }

    /// Prometheus text from `/metrics`.
    pub async fn metrics(&self) -> String {
        http_get(self.running().http_addr, "/metrics").await.1
    }

    /// Value of one sample (`name{labels}`), 0 if absent.
    pub async fn metric(&self, sample: &str) -> f64 {
        metric_value(&self.metrics().await, sample)
    }

    /// Stops copyrator and removes its webhook configuration.
    pub async fn stop(mut self) {
        unregister_webhooks(&self.client).await;
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
    }

    /// Stops copyrator but leaves the webhook configuration (webhook down: calls fail and are
    /// ignored, as with a crashed deployment).
    pub async fn kill(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
    }
}

pub fn serve_args(opts: &Options, certs: &Path) -> Box<copyrator::cli::ServeArgs> {
    let mut argv: Vec<String> = vec![
        "copyrator".into(),
        "serve".into(),
        "--kubeconfig".into(),
        kubeconfig().display().to_string(),
        "--webhook-addr".into(),
        "127.0.0.1:0".into(),
        "--http-addr".into(),
        "127.0.0.1:0".into(),
        "--tls-cert".into(),
        certs.join("tls.crt").display().to_string(),
        "--tls-key".into(),
        certs.join("tls.key").display().to_string(),
        "--resync-interval".into(),
        opts.resync_interval.into(),
        "--leader-election".into(),
        "false".into(),
    ];
    // Tests of copy semantics run as on a single-team cluster; tenancy tests say otherwise.
    if !opts
        .extra
        .iter()
        .any(|a| a.starts_with("--trusted-namespaces"))
    {
        argv.push("--trusted-namespaces=*".into());
    }
    argv.extend(opts.extra.iter().cloned());
    match Cli::try_parse_from(argv)
        .expect("valid serve arguments")
        .command
    {
        CliCommand::Serve(args) => args,
        _ => unreachable!(),
    }
}

/// Dry-run namespace creates seen by copyrator's namespaces webhook.
const DRY_RUN_PROBES: &str = "copyrator_admission_requests_total{endpoint=\"namespaces\",operation=\"CREATE\",outcome=\"dry_run\"}";

/// The API server picks webhook configurations up asynchronously: dry-run namespace creates
/// until copyrator counts one more (`probes` reads that count from copyrator's metrics).
async fn wait_for_webhooks<F, Fut>(client: &Client, what: &str, probes: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = f64>,
{
    let api = Api::<Namespace>::all(client.clone());
    let before = probes().await;
    eventually(Duration::from_secs(30), what, || {
        let api = api.clone();
        let probes = &probes;
        async move {
            let ns = Namespace {
                metadata: ObjectMeta {
                    name: Some(format!("webhook-probe-{}", unique_suffix())),
                    ..Default::default()
                },
                ..Default::default()
            };
            let dry_run = PostParams {
                dry_run: true,
                field_manager: None,
            };
            let _ = api.create(&dry_run, &ns).await;
            (probes().await > before).then_some(())
        }
    })
    .await;
}

/// Parses one sample value out of Prometheus text.
pub fn metric_value(text: &str, sample: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(sample)
                .and_then(|rest| rest.trim().split(' ').next()?.parse().ok())
        })
        .unwrap_or(0.0)
}

/// Minimal HTTP/1.1 GET against the plain port; returns (status, body).
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = match text.split_once("\r\n\r\n") {
        Some((head, body))
            if head
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked") =>
        {
            dechunk(body)
        }
        Some((_, body)) => body.to_string(),
        None => String::new(),
    };
    (status, body)
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Name of an object, for messages.
pub fn name_of<K: Resource>(o: &K) -> String {
    o.meta().name.clone().unwrap_or_default()
}

/// copyrator as a separate process (for logs, signals and other identities).
pub struct Process {
    pub child: std::process::Child,
    pub webhook_port: u16,
    pub http_port: u16,
    pub log: PathBuf,
    pub certs: PathBuf,
    pub ca: Vec<u8>,
    extra: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Process {
    /// Spawns `copyrator serve` with its own certificates and log file. `extra` is appended
    /// to the arguments (it may override `--kubeconfig`).
    pub fn spawn(extra: &[&str]) -> Self {
        let (dir, ca) = test_certs();
        Self::spawn_with(dir, ca, extra)
    }

    pub fn spawn_with(dir: tempfile::TempDir, ca: Vec<u8>, extra: &[&str]) -> Self {
        let webhook_port = free_port();
        let http_port = free_port();
        let log = dir.path().join("copyrator.log");
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let child = Self::start_child(dir.path(), webhook_port, http_port, &log, &extra);
        Self {
            child,
            webhook_port,
            http_port,
            log,
            certs: dir.path().to_path_buf(),
            ca,
            extra,
            _dir: dir,
        }
    }

    fn start_child(
        dir: &Path,
        webhook_port: u16,
        http_port: u16,
        log: &Path,
        extra: &[String],
    ) -> std::process::Child {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        Command::new(env!("CARGO_BIN_EXE_copyrator"))
            .arg("serve")
            // The default cluster; an explicit --kubeconfig in `extra` wins.
            .env("COPYRATOR_KUBECONFIG", kubeconfig())
            // A single-team cluster unless `extra` says --trusted-namespaces.
            .env("COPYRATOR_TRUSTED_NAMESPACES", "*")
            .args(["--webhook-addr", &format!("127.0.0.1:{webhook_port}")])
            .args(["--http-addr", &format!("127.0.0.1:{http_port}")])
            .arg("--tls-cert")
            .arg(dir.join("tls.crt"))
            .arg("--tls-key")
            .arg(dir.join("tls.key"))
            .args(extra)
            .env_remove("RUST_LOG")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("spawning copyrator")
    }

    /// Starts the process again (after [`Process::kill`]) on the same ports, with the same
    /// certificate and arguments: a restarted pod behind the same Service.
    pub fn restart(&mut self) {
        self.kill();
        self.child = Self::start_child(
            &self.certs,
            self.webhook_port,
            self.http_port,
            &self.log,
            &self.extra,
        );
    }

    /// Peak and current resident memory of the process, in bytes (VmHWM, VmRSS).
    pub fn memory(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0)
                * 1024
        };
        (field("VmHWM:"), field("VmRSS:"))
    }

    pub fn http_addr(&self) -> std::net::SocketAddr {
        ([127, 0, 0, 1], self.http_port).into()
    }

    pub async fn metrics(&self) -> String {
        http_get(self.http_addr(), "/metrics").await.1
    }

    pub async fn metric(&self, sample: &str) -> f64 {
        metric_value(&self.metrics().await, sample)
    }

    /// Waits until `/healthz` answers.
    pub async fn wait_up(&mut self) {
        let addr = self.http_addr();
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("copyrator exited with {status}:\n{}", self.logs());
            }
            if tokio::net::TcpStream::connect(addr).await.is_ok()
                && http_get(addr, "/healthz").await.0 == 200
            {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "copyrator did not come up:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Registers this process's webhooks and waits until the API server calls them.
    pub async fn register_webhooks(&self, client: &Client) {
        register_webhooks(
            client,
            &format!("https://127.0.0.1:{}", self.webhook_port),
            &self.ca,
        )
        .await;
        wait_for_webhooks(
            client,
            "the API server calling the process's webhooks",
            || self.metric(DRY_RUN_PROBES),
        )
        .await;
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL: no clean shutdown, no Lease release.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for a clean exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        self.child.wait().expect("wait")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A kubeconfig for the test cluster authenticating with `token` instead of the admin's.
pub fn write_token_kubeconfig(admin: &Path, token: &str, out: &Path) {
    let admin = kube::config::Kubeconfig::read_from(admin).expect("the admin kubeconfig");
    let context = admin
        .contexts
        .iter()
        .find(|c| Some(&c.name) == admin.current_context.as_ref())
        .and_then(|c| c.context.as_ref())
        .expect("a current context");
    let cluster = admin
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref())
        .expect("its cluster");
    let mut cluster_json = json!({"server": cluster.server});
    if let Some(ca) = &cluster.certificate_authority {
        cluster_json["certificate-authority"] = json!(ca);
    }
    if let Some(ca) = &cluster.certificate_authority_data {
        cluster_json["certificate-authority-data"] = json!(ca);
    }
    if cluster.insecure_skip_tls_verify == Some(true) {
        cluster_json["insecure-skip-tls-verify"] = json!(true);
    }
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": cluster_json}],
        "users": [{"name": "copyrator", "user": {"token": token}}],
        "contexts": [{"name": "copyrator", "context": {"cluster": "test", "user": "copyrator"}}],
        "current-context": "copyrator",
    });
    // JSON is YAML.
    std::fs::write(out, serde_json::to_string_pretty(&config).unwrap()).unwrap();
}

/// A token of a ServiceAccount (TokenRequest API), valid for an hour.
pub async fn service_account_token(client: &Client, namespace: &str, name: &str) -> String {
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(
            name,
            &PostParams::default(),
            &TokenRequest {
                spec: Some(TokenRequestSpec {
                    audiences: None,
                    expiration_seconds: Some(3600),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("a token for ServiceAccount {namespace}/{name}: {e}"))
        .status
        .and_then(|s| s.token)
        .expect("a token in the TokenRequest status")
}

/// A TLS connection to copyrator's webhook port, trusting `ca`.
pub async fn webhook_tls(
    port: u16,
    ca: &[u8],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connecting to the webhook port");
    tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(
            ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()),
            tcp,
        )
        .await
        .expect("TLS handshake")
}

/// An HTTP/1.1 client on one TLS connection to the webhook port (hyper's).
pub struct WebhookClient {
    sender: hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>,
}

impl WebhookClient {
    pub async fn connect(port: u16, ca: &[u8]) -> Self {
        let tls = webhook_tls(port, ca).await;
        let (sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                .await
                .expect("HTTP handshake");
        tokio::spawn(conn);
        Self { sender }
    }

    /// POSTs `body` to `path`; returns (status, body).
    pub async fn post(&mut self, path: &str, body: impl Into<bytes::Bytes>) -> (u16, String) {
        use http_body_util::BodyExt;
        let body: bytes::Bytes = body.into();
        let request = hyper::Request::post(path)
            .header("host", "127.0.0.1")
            .header("content-type", "application/json")
            .header("content-length", body.len())
            .body(http_body_util::Full::new(body))
            .unwrap();
        self.sender.ready().await.expect("connection ready");
        let response = self.sender.send_request(request).await.expect("response");
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }
}

/// An AdmissionReview of a Namespace CREATE, as the API server would send it.
pub fn namespace_create_review(name: &str, labels: serde_json::Value) -> String {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": format!("uid-{name}"),
            "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "resource": {"group": "", "version": "v1", "resource": "namespaces"},
            "name": name,
            "operation": "CREATE",
            "userInfo": {"username": "admin"},
            "object": {"apiVersion": "v1", "kind": "Namespace",
                       "metadata": {"name": name, "labels": labels}},
            "oldObject": null,
            "dryRun": false
        }
    })
    .to_string()
}
