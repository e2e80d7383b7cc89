//! copyrator as a child process (the binary under test), for logs, signals, memory, restarts
//! and other identities than the test's.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use kube::Client;

use super::{
    env::kubeconfig,
    http::{free_port, http_get, metric_value},
    tls::test_certs,
    wait,
    webhooks::{DRY_RUN_PROBES, register_webhooks, wait_for_webhooks},
};

/// copyrator as a separate process (for logs, signals and other identities).
pub struct Process {
    pub child: std::process::Child,
    pub webhook_port: u16,
    pub http_port: u16,
    pub log: PathBuf,
    pub certs: PathBuf,
    pub ca: Vec<u8>,
    extra: Vec<String>,
    envs: Vec<(String, String)>,
    _dir: tempfile::TempDir,
}

impl Process {
    /// Spawns `copyrator serve` with its own certificates and log file. `extra` is appended
    /// to the arguments (it may override `--kubeconfig`).
    pub fn spawn(extra: &[&str]) -> Self {
        let (dir, ca) = test_certs();
        Self::spawn_with(dir, ca, extra)
    }

    /// Spawns `copyrator serve` serving the certificate in `dir` (`tls.crt`, `tls.key`, signed
    /// by `ca`), logging to `dir/copyrator.log`.
    pub fn spawn_with(dir: tempfile::TempDir, ca: Vec<u8>, extra: &[&str]) -> Self {
        Self::spawn_with_env(dir, ca, extra, &[])
    }

    /// As [`Process::spawn_with`], with environment variables `envs` (e.g. `POD_NAME`).
    pub fn spawn_with_env(
        dir: tempfile::TempDir,
        ca: Vec<u8>,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Self {
        let webhook_port = free_port();
        let http_port = free_port();
        let log = dir.path().join("copyrator.log");
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let envs: Vec<(String, String)> = envs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let child = Self::start_child(dir.path(), webhook_port, http_port, &log, &extra, &envs);
        Self {
            child,
            webhook_port,
            http_port,
            log,
            certs: dir.path().to_path_buf(),
            ca,
            extra,
            envs,
            _dir: dir,
        }
    }

    fn start_child(
        dir: &Path,
        webhook_port: u16,
        http_port: u16,
        log: &Path,
        extra: &[String],
        envs: &[(String, String)],
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
            .envs(own_username(extra).map(|u| ("COPYRATOR_OWN_USERNAME", u)))
            .envs(envs.iter().map(|(k, v)| (k, v)))
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
            &self.envs,
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

    /// Waits (up to [`CONVERGE`](super::CONVERGE)) until `sample`'s value satisfies `check`;
    /// returns the value.
    pub async fn wait_metric(&self, sample: &str, what: &str, check: impl Fn(f64) -> bool) -> f64 {
        wait::wait_metric(what, || self.metric(sample), check).await
    }

    /// GET `path` on the plain HTTP port; (status, body).
    pub async fn get(&self, path: &str) -> (u16, String) {
        http_get(self.http_addr(), path).await
    }

    /// Waits until `/healthz` answers.
    pub async fn wait_up(&mut self) {
        self.wait_answering("/healthz", "come up").await;
    }

    /// Waits until `/readyz` answers (certificate loaded, first resync done).
    pub async fn wait_ready(&mut self) {
        self.wait_answering("/readyz", "get ready").await;
    }

    /// Waits (30 s at most) until `path` answers 200; panics with the logs if the process
    /// exits first or it never does.
    async fn wait_answering(&mut self, path: &str, what: &str) {
        let addr = self.http_addr();
        let start = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("copyrator exited with {status}:\n{}", self.logs());
            }
            if tokio::net::TcpStream::connect(addr).await.is_ok()
                && http_get(addr, path).await.0 == 200
            {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "copyrator did not {what}:\n{}",
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

/// The admin's username, as copyrator's own, unless `extra` gives another kubeconfig.
fn own_username(extra: &[String]) -> Option<&'static str> {
    (!extra.iter().any(|a| a.starts_with("--kubeconfig"))).then_some(super::env::ADMIN_USERNAME)
}
