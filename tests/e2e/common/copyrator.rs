//! copyrator running in the test process (`copyrator::app::start`), with the test cluster's
//! kubeconfig, its own certificates, and its webhooks registered in the API server.

use std::path::Path;

use clap::Parser;
use copyrator::{
    app::{self as serve, Running},
    cli::{Cli, Command as CliCommand},
};
use kube::Client;

use super::{
    env::{ADMIN_USERNAME, client, kubeconfig},
    http::{http_get, metric_value},
    tls::test_certs,
    wait,
    webhooks::{DRY_RUN_PROBES, register_webhooks, unregister_webhooks, wait_for_webhooks},
};

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

impl Options {
    /// These options with `--client-ca` naming the test API server's webhook client CA: the
    /// API server is then a verified caller, whose Pod reviews get the pull secrets' patch
    /// (SPEC §9.8, §10.3). `None`, said on stderr (the test is then skipped), where that CA
    /// is unknown.
    pub fn verifying(mut self) -> Option<Self> {
        self.extra.push(super::client_ca_arg()?);
        Some(self)
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

    /// Waits (up to [`CONVERGE`](super::CONVERGE)) until `sample`'s value satisfies `check`;
    /// returns the value.
    pub async fn wait_metric(&self, sample: &str, what: &str, check: impl Fn(f64) -> bool) -> f64 {
        wait::wait_metric(what, || self.metric(sample), check).await
    }

    /// Waits until copyrator is idle ([`wait::quiescent`]): what it counts from then on is final.
    pub async fn quiescent(&self) {
        wait::quiescent(|| self.metrics()).await
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

/// `copyrator serve` arguments for the in-process copyrator: ports chosen by the OS, the test
/// cluster, certificates from `certs`, every namespace trusted unless `opts` says otherwise.
pub fn serve_args(opts: &Options, certs: &Path) -> Box<copyrator::cli::ServeArgs> {
    let mut argv: Vec<String> = vec!["copyrator".into(), "serve".into()];
    // The test cluster, unless `opts` reaches it some other way (through a proxy).
    if !opts.extra.iter().any(|a| a.starts_with("--kubeconfig")) {
        argv.extend(["--kubeconfig".into(), kubeconfig().display().to_string()]);
    }
    argv.extend([
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
    ]);
    // One replica leads unless a test says otherwise.
    if !opts
        .extra
        .iter()
        .any(|a| a.starts_with("--leader-election"))
    {
        argv.extend(["--leader-election".into(), "false".into()]);
    }
    // Tests of copy semantics run as on a single-team cluster; tenancy tests say otherwise.
    if !opts
        .extra
        .iter()
        .any(|a| a.starts_with("--trusted-namespaces"))
    {
        argv.push("--trusted-namespaces=*".into());
    }
    // copyrator runs as the admin, and may change read-only copies as such, unless given
    // another identity.
    if !opts
        .extra
        .iter()
        .any(|a| a.starts_with("--kubeconfig") || a.starts_with("--own-username"))
    {
        argv.push(format!("--own-username={ADMIN_USERNAME}"));
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
