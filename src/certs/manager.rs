//! copyrator's own webhook certificates (`--tls-secret`, SPEC §6.5): every replica reads the
//! certificate Secret in its namespace, serves the pair it holds, and takes the steps
//! [`rotation::next_step`] names — a new CA, the CA bundle into copyrator's webhook
//! configurations, a new serving certificate, old CAs dropped. Replicas need no leader for
//! this: every write to the Secret carries the resourceVersion it was decided from, so of two
//! replicas deciding the same step one writes and the other re-reads and finds it done.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use base64::Engine;
use k8s_openapi::{
    ByteString,
    api::{
        admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration},
        core::v1::Secret,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;
use time::{OffsetDateTime, format_description::well_known::Rfc3339};
use tokio::sync::watch;

use super::serving::ReloadingCert;
use super::{
    CertError,
    inspect::{self, CertFacts},
    issue::{self, PemPair},
    rotation::{self, Serving, Settings, Step, Stored},
};
use crate::metrics::{CertificateLabels, Metrics, OutcomeLabels};

/// Marks the Secret as copyrator's to write (the chart renders it so; copyrator sets it on a
/// Secret it creates). copyrator writes no Secret without it.
pub const MANAGED_ANNOTATION: &str = "copyrator.io/certificates";
pub const MANAGED_VALUE: &str = "managed";
/// Since when every webhook has trusted the current CA (RFC 3339).
pub const TRUSTED_SINCE_ANNOTATION: &str = "copyrator.io/ca-trusted-since";
/// When the serving certificate was written (RFC 3339).
pub const SERVING_SINCE_ANNOTATION: &str = "copyrator.io/serving-issued-at";
/// Set by hand to any new value to rotate the CA now (through the same safe order), or, if a
/// rotation is under way, once it has completed.
pub const ROTATE_ANNOTATION: &str = "copyrator.io/rotate";
/// The last `copyrator.io/rotate` value acted on.
pub const ROTATED_ANNOTATION: &str = "copyrator.io/rotated";

pub const CA_CERT_KEY: &str = "ca.crt";
pub const CA_KEY_KEY: &str = "ca.key";
pub const TLS_CERT_KEY: &str = "tls.crt";
pub const TLS_KEY_KEY: &str = "tls.key";

/// Steps taken in one round before waiting again (a fresh install takes four).
const MAX_STEPS: usize = 8;

/// Where the certificates live and how they are made.
#[derive(Clone, Debug)]
pub struct ManagerConfig {
    pub namespace: String,
    pub secret: String,
    /// Validating- and MutatingWebhookConfigurations (by name) whose webhooks get the CA bundle.
    pub webhook_configurations: Vec<String>,
    pub settings: Settings,
    /// How often to look even when nothing is due (a Secret or webhook changed by others).
    pub check_interval: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    #[error(
        "Secret {0} exists without the annotation {MANAGED_ANNOTATION}: {MANAGED_VALUE}; copyrator does not write a Secret it does not own (choose another --tls-secret, or annotate it)"
    )]
    NotOurs(String),
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error(transparent)]
    Cert(#[from] CertError),
}

/// The certificate manager of one replica.
pub struct Manager {
    config: ManagerConfig,
    secrets: Api<Secret>,
    validating: Api<ValidatingWebhookConfiguration>,
    mutating: Api<MutatingWebhookConfiguration>,
    cert: Arc<ReloadingCert>,
    metrics: Arc<Metrics>,
    origin: String,
}

impl Manager {
    pub fn new(
        client: Client,
        config: ManagerConfig,
        cert: Arc<ReloadingCert>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            secrets: Api::namespaced(client.clone(), &config.namespace),
            validating: Api::all(client.clone()),
            mutating: Api::all(client),
            origin: format!("Secret {}/{}", config.namespace, config.secret),
            config,
            cert,
            metrics,
        }
    }

    /// Runs rounds until shutdown: after each, waits until the next step is due or
    /// `check_interval`, whichever is sooner.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let mut last_error = String::new();
        loop {
            let wait = match self.round().await {
                Ok(wait) => {
                    last_error.clear();
                    wait.min(self.config.check_interval)
                }
                Err(e) => {
                    let text = e.to_string();
                    if text != last_error {
                        tracing::error!(error = %text, secret = %self.origin, "managing the webhook certificates failed; retrying");
                        last_error = text;
                    }
                    self.config.check_interval
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait.max(Duration::from_millis(10))) => {}
                _ = shutdown.changed() => return,
            }
        }
    }

    /// Reads, serves, and takes the steps due now; returns how long until the next is due.
    pub async fn round(&self) -> Result<Duration, ManagerError> {
        for _ in 0..MAX_STEPS {
            let secret = self.secrets.get_opt(&self.config.secret).await?;
            if let Some(s) = &secret {
                let owned = s
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(MANAGED_ANNOTATION))
                    .is_some_and(|v| v == MANAGED_VALUE);
                if !owned {
                    return Err(ManagerError::NotOurs(self.origin.clone()));
                }
            }
            let stored = stored(secret.as_ref());
            self.serve(secret.as_ref(), &stored);
            let webhooks = self.webhooks().await?;
            let published: Vec<Vec<CertFacts>> = webhooks
                .iter()
                .flat_map(|c| c.bundles.iter().map(|(_, b)| bundle_of(b.as_ref())))
                .collect();
            let now = OffsetDateTime::now_utc();
            let step = rotation::next_step(&stored, &published, now, &self.config.settings);
            tracing::debug!(?step, "certificate step");
            let written = match step {
                Step::Wait { until } => {
                    let wait = until
                        .map(|u| Duration::try_from(u - now).unwrap_or_default())
                        .unwrap_or(self.config.check_interval);
                    return Ok(wait);
                }
                Step::NewCa { keep } => {
                    let ca = issue::new_ca(now, self.config.settings.ca_validity)?;
                    let bundle = std::iter::once(ca.cert.clone())
                        .chain(keep.iter().map(CertFacts::pem))
                        .collect::<String>();
                    let requested = stored.rotate_requested.clone();
                    let result = self
                        .write(secret, |data, annotations| {
                            data.insert(CA_CERT_KEY.into(), ByteString(bundle.into_bytes()));
                            data.insert(CA_KEY_KEY.into(), ByteString(ca.key.into_bytes()));
                            annotations.remove(TRUSTED_SINCE_ANNOTATION);
                            if let Some(r) = requested {
                                annotations.insert(ROTATED_ANNOTATION.into(), r);
                            }
                        })
                        .await;
                    if result.is_ok() {
                        self.issued("ca");
                        tracing::info!(secret = %self.origin, kept = keep.len(), "new webhook CA made; the old ones stay trusted until the serving certificate moves to it");
                    }
                    result
                }
                Step::Publish { current_missing } => {
                    let bundle = stored.bundle.iter().map(CertFacts::pem).collect::<String>();
                    self.publish(&webhooks, &bundle).await?;
                    tracing::info!(secret = %self.origin, cas = stored.bundle.len(), "CA bundle published into the webhook configurations");
                    if current_missing && stored.trusted_since.is_some() {
                        self.write(secret, |_, annotations| {
                            annotations.remove(TRUSTED_SINCE_ANNOTATION);
                        })
                        .await
                    } else {
                        Ok(())
                    }
                }
                Step::MarkTrusted => {
                    self.write(secret, |_, annotations| {
                        annotations.insert(TRUSTED_SINCE_ANNOTATION.into(), rfc3339(now));
                    })
                    .await
                }
                Step::NewServing { not_after } => {
                    let Some(ca) = stored.current_ca() else {
                        continue;
                    };
                    let ca = PemPair {
                        cert: ca.pem(),
                        key: stored.ca_key.clone().unwrap_or_default(),
                    };
                    let leaf = issue::serving(&ca, &self.config.settings.names, now, not_after)?;
                    let result = self
                        .write(secret, |data, annotations| {
                            data.insert(TLS_CERT_KEY.into(), ByteString(leaf.cert.into_bytes()));
                            data.insert(TLS_KEY_KEY.into(), ByteString(leaf.key.into_bytes()));
                            annotations.insert(SERVING_SINCE_ANNOTATION.into(), rfc3339(now));
                        })
                        .await;
                    if result.is_ok() {
                        self.issued("serving");
                        tracing::info!(secret = %self.origin, %not_after, "new serving certificate signed");
                    }
                    result
                }
                Step::Prune { keep } => {
                    let bundle = inspect::bundle_pem(&keep);
                    let result = self
                        .write(secret, |data, _| {
                            data.insert(CA_CERT_KEY.into(), ByteString(bundle.into_bytes()));
                        })
                        .await;
                    if result.is_ok() {
                        tracing::info!(secret = %self.origin, left = keep.len(), "CAs no longer needed dropped from the bundle");
                    }
                    result
                }
            };
            match written {
                Ok(()) => {}
                // Someone else (another replica) wrote first: decide again from what they wrote.
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Duration::ZERO)
    }

    /// Puts the Secret's serving pair into service if it is a usable one.
    fn serve(&self, secret: Option<&Secret>, stored: &Stored) {
        if let Some(ca) = stored.current_ca() {
            self.metrics
                .certificate_expiry
                .get_or_create(&CertificateLabels { certificate: "ca" })
                .set(ca.not_after.unix_timestamp());
        }
        let data = secret.and_then(|s| s.data.as_ref());
        let (Some(cert), Some(key)) = (
            data.and_then(|d| d.get(TLS_CERT_KEY)),
            data.and_then(|d| d.get(TLS_KEY_KEY)),
        ) else {
            return;
        };
        match self.cert.install(&cert.0, &key.0, &self.origin) {
            Ok(false) => {}
            Ok(true) => {
                self.metrics
                    .tls_reloads
                    .get_or_create(&OutcomeLabels { outcome: "success" })
                    .inc();
                tracing::info!(secret = %self.origin, "serving certificate loaded");
            }
            Err(e) => {
                self.metrics
                    .tls_reloads
                    .get_or_create(&OutcomeLabels { outcome: "failure" })
                    .inc();
                tracing::error!(error = %e, "serving certificate in the Secret not usable; keeping the previous one");
            }
        }
    }

    fn issued(&self, certificate: &'static str) {
        self.metrics
            .certificates_issued
            .get_or_create(&CertificateLabels { certificate })
            .inc();
    }

    /// Every webhook of copyrator's configurations as the API server holds it now.
    async fn webhooks(&self) -> Result<Vec<Webhooks>, kube::Error> {
        let mut out = Vec::new();
        for name in &self.config.webhook_configurations {
            if let Some(v) = self.validating.get_opt(name).await? {
                let hooks = v.webhooks.unwrap_or_default().into_iter();
                out.push(Webhooks {
                    mutating: false,
                    name: name.clone(),
                    bundles: hooks.map(|h| (h.name, h.client_config.ca_bundle)).collect(),
                });
            }
            if let Some(m) = self.mutating.get_opt(name).await? {
                let hooks = m.webhooks.unwrap_or_default().into_iter();
                out.push(Webhooks {
                    mutating: true,
                    name: name.clone(),
                    bundles: hooks.map(|h| (h.name, h.client_config.ca_bundle)).collect(),
                });
            }
        }
        Ok(out)
    }

    /// Sets `bundle` as the caBundle of every webhook in `configs` that does not hold it (a
    /// strategic merge patch on the webhooks' names: nothing else changes).
    async fn publish(&self, configs: &[Webhooks], bundle: &str) -> Result<(), kube::Error> {
        let b64 = base64::engine::general_purpose::STANDARD.encode(bundle);
        let params = PatchParams::default();
        for config in configs {
            let stale: Vec<serde_json::Value> = config
                .bundles
                .iter()
                .filter(|(_, b)| b.as_ref().is_none_or(|b| b.0 != bundle.as_bytes()))
                .map(|(name, _)| json!({"name": name, "clientConfig": {"caBundle": b64}}))
                .collect();
            if stale.is_empty() {
                continue;
            }
            let patch = Patch::Strategic(json!({ "webhooks": stale }));
            if config.mutating {
                self.mutating.patch(&config.name, &params, &patch).await?;
            } else {
                self.validating.patch(&config.name, &params, &patch).await?;
            }
        }
        Ok(())
    }

    /// Writes the Secret as read (`existing`, by its resourceVersion) with `edit` applied, or
    /// creates it. A 409 means someone wrote or created it first.
    async fn write(
        &self,
        existing: Option<Secret>,
        edit: impl FnOnce(&mut BTreeMap<String, ByteString>, &mut BTreeMap<String, String>),
    ) -> Result<(), kube::Error> {
        let params = PostParams::default();
        match existing {
            Some(mut s) => {
                let mut data = s.data.take().unwrap_or_default();
                let mut annotations = s.metadata.annotations.take().unwrap_or_default();
                edit(&mut data, &mut annotations);
                s.data = Some(data);
                s.metadata.annotations = Some(annotations);
                s.metadata.managed_fields = None;
                self.secrets
                    .replace(&self.config.secret, &params, &s)
                    .await
                    .map(drop)
            }
            None => {
                let mut data = BTreeMap::new();
                let mut annotations =
                    BTreeMap::from([(MANAGED_ANNOTATION.to_string(), MANAGED_VALUE.to_string())]);
                edit(&mut data, &mut annotations);
                let secret = Secret {
                    metadata: ObjectMeta {
                        name: Some(self.config.secret.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        annotations: Some(annotations),
                        ..Default::default()
                    },
                    type_: Some("Opaque".into()),
                    data: Some(data),
                    ..Default::default()
                };
                self.secrets.create(&params, &secret).await.map(drop)
            }
        }
    }
}

/// One webhook configuration of copyrator's: each webhook's name and caBundle.
struct Webhooks {
    mutating: bool,
    name: String,
    bundles: Vec<(String, Option<ByteString>)>,
}

fn bundle_of(b: Option<&ByteString>) -> Vec<CertFacts> {
    b.map(|b| inspect::parse_bundle(&b.0)).unwrap_or_default()
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.replace_nanosecond(0)
        .unwrap_or(t)
        .format(&Rfc3339)
        .unwrap_or_default()
}

/// What the Secret holds; an absent Secret holds nothing.
pub fn stored(secret: Option<&Secret>) -> Stored {
    let Some(secret) = secret else {
        return Stored::default();
    };
    let data = secret.data.clone().unwrap_or_default();
    let text = |k: &str| {
        data.get(k)
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
    };
    let annotations = secret.metadata.annotations.clone().unwrap_or_default();
    let time = |k: &str| {
        annotations
            .get(k)
            .and_then(|v| OffsetDateTime::parse(v, &Rfc3339).ok())
    };
    let serving = match (text(TLS_CERT_KEY), text(TLS_KEY_KEY)) {
        (Some(cert), Some(key)) => inspect::parse_bundle(cert.as_bytes())
            .into_iter()
            .next()
            .map(|cert| Serving { cert, key }),
        _ => None,
    };
    Stored {
        bundle: data
            .get(CA_CERT_KEY)
            .map(|b| inspect::parse_bundle(&b.0))
            .unwrap_or_default(),
        ca_key: text(CA_KEY_KEY),
        serving,
        trusted_since: time(TRUSTED_SINCE_ANNOTATION),
        serving_since: time(SERVING_SINCE_ANNOTATION),
        rotate_requested: annotations.get(ROTATE_ANNOTATION).cloned(),
        rotate_done: annotations.get(ROTATED_ANNOTATION).cloned(),
    }
}
