//! The one way an end-to-end test runs copyrator in-process: [`Harness::start`] gives a fresh
//! [`TestEnv`] (reached through the harness, which dereferences to it) and a running
//! [`Copyrator`] whose webhooks the API server calls; [`Harness::finish`] stops copyrator and
//! deletes what the test made. A test that panics first is cleaned up by [`TestEnv`]'s `Drop`
//! (webhook configuration, CopyRules, namespaces).

use std::ops::Deref;

use super::{
    copyrator::{Copyrator, Options},
    env::TestEnv,
    tls::test_certs,
};

/// A test's cluster corner and the copyrator serving it.
pub struct Harness {
    env: TestEnv,
    copyrator: Option<Copyrator>,
}

/// Full resyncs finished.
const RESYNCS_DONE: &str = "copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}";

impl Harness {
    /// A new [`TestEnv`] and copyrator started with `opts`.
    pub async fn start(opts: Options) -> Self {
        Self::start_in(TestEnv::new().await, opts).await
    }

    /// copyrator started with `--client-ca` set to the CA of the client certificate the test
    /// API server presents to webhooks: only the API server gets in (SPEC §6.1). `None`, said
    /// on stderr, when the cluster under test was not started by scripts/control-plane.sh.
    pub async fn start_with_client_ca() -> Option<Self> {
        let opts = Options {
            extra: vec![super::client_ca_arg()?],
            ..Default::default()
        };
        Some(Self::start(opts).await)
    }

    /// copyrator trusting namespace `base-<id>`, made for it (a platform namespace whose
    /// sources reach every namespace), and that namespace's name.
    pub async fn start_trusting(base: &str) -> (Self, String) {
        Self::trusting(base, Vec::new()).await
    }

    /// As [`Harness::start_trusting`], copyrator also verifying the API server (`--client-ca`):
    /// its reviews then get the answers that turn on trust (SPEC §9.8). `None` where the
    /// cluster's webhook client CA is unknown.
    pub async fn start_trusting_verified(base: &str) -> Option<(Self, String)> {
        Some(Self::trusting(base, vec![super::client_ca_arg()?]).await)
    }

    async fn trusting(base: &str, mut extra: Vec<String>) -> (Self, String) {
        let env = TestEnv::new().await;
        let trusted = env.namespace(base, &[]).await;
        extra.push(format!("--trusted-namespaces={trusted}"));
        let opts = Options {
            extra,
            ..Default::default()
        };
        (Self::start_in(env, opts).await, trusted)
    }

    /// copyrator started with `opts` for `env`, prepared beforehand (namespaces that must
    /// exist before copyrator starts, or whose names `opts` carries).
    pub async fn start_in(env: TestEnv, opts: Options) -> Self {
        let (certs, ca) = test_certs();
        Self::start_with(env, opts, certs, ca).await
    }

    /// As [`Harness::start`], copyrator serving the certificate in `certs` (`tls.crt`,
    /// `tls.key`), which the webhook configuration trusts through `ca`.
    pub async fn start_with_certs(opts: Options, certs: tempfile::TempDir, ca: Vec<u8>) -> Self {
        Self::start_with(TestEnv::new().await, opts, certs, ca).await
    }

    async fn start_with(
        env: TestEnv,
        opts: Options,
        certs: tempfile::TempDir,
        ca: Vec<u8>,
    ) -> Self {
        if opts.webhooks {
            env.webhooks_registered();
        }
        let copyrator = Copyrator::start_with_certs(opts, certs, ca).await;
        Self {
            env,
            copyrator: Some(copyrator),
        }
    }

    /// The running copyrator.
    pub fn copyrator(&self) -> &Copyrator {
        self.copyrator.as_ref().expect("copyrator is not running")
    }

    /// Prometheus text from copyrator's `/metrics`.
    pub async fn metrics(&self) -> String {
        self.copyrator().metrics().await
    }

    /// Value of one sample (`name{labels}`) of copyrator's metrics, 0 if absent.
    pub async fn metric(&self, sample: &str) -> f64 {
        self.copyrator().metric(sample).await
    }

    /// Waits (up to [`CONVERGE`](super::CONVERGE)) until `sample`'s value satisfies `check`.
    pub async fn wait_metric(&self, sample: &str, what: &str, check: impl Fn(f64) -> bool) -> f64 {
        self.copyrator().wait_metric(sample, what, check).await
    }

    /// Waits until copyrator is idle ([`Copyrator::quiescent`]).
    pub async fn quiescent(&self) {
        self.copyrator().quiescent().await
    }

    /// Waits until copyrator's startup resync has finished (a job counted as done).
    pub async fn wait_startup_resync(&self) {
        self.wait_metric(RESYNCS_DONE, "the startup resync", |v| v >= 1.0)
            .await;
    }

    /// Waits until `n` more full resyncs have finished, then until copyrator is idle.
    pub async fn wait_resyncs(&self, n: u32) {
        let before = self.metric(RESYNCS_DONE).await;
        self.wait_metric(RESYNCS_DONE, &format!("{n} more resyncs"), |v| {
            v >= before + f64::from(n)
        })
        .await;
        self.quiescent().await;
    }

    /// Stops copyrator but leaves its webhook configuration: the API server's calls fail and
    /// are ignored, as with a crashed deployment.
    pub async fn kill(&mut self) {
        if let Some(copyrator) = self.copyrator.take() {
            copyrator.kill().await;
        }
    }

    /// Starts copyrator again (after [`Harness::kill`]), with `opts` and new certificates.
    pub async fn restart(&mut self, opts: Options) {
        self.kill().await;
        if opts.webhooks {
            self.env.webhooks_registered();
        }
        self.copyrator = Some(Copyrator::start(opts).await);
    }

    /// Stops copyrator (removing its webhook configuration) and deletes what the test made.
    pub async fn finish(mut self) {
        if let Some(copyrator) = self.copyrator.take() {
            copyrator.stop().await;
        }
        self.env.clean().await;
    }
}

impl Deref for Harness {
    type Target = TestEnv;

    fn deref(&self) -> &TestEnv {
        &self.env
    }
}
