//! Leader election on a coordination.k8s.io Lease: any number of replicas serve webhooks and
//! run workers; the one holding the Lease also runs the reconciler (SPEC §5). Writes to the
//! Lease are preconditioned on its resourceVersion, so two replicas never both win one round.
//! The holder's writes also publish its policy and last full resync (`published`).

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::{SignedDuration, Timestamp},
};
use kube::{Api, Client, api::PostParams};
use tokio::sync::watch;

use super::published;
use crate::{marks, metrics::Metrics, sync::context::Resyncs};

/// Settings of the election.
#[derive(Clone, Debug)]
pub struct ElectionConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a Lease is valid without renewal.
    pub lease_duration: Duration,
    /// Annotations the holder keeps on the Lease: its policy
    /// ([`published::policy_annotations`]).
    pub published: BTreeMap<String, String>,
    /// A namespace-scoped install's namespaces not bound now, published as they change.
    pub not_bound: Option<watch::Receiver<std::collections::BTreeSet<String>>>,
    /// Told each `copyrator.io/resync` request the leader takes (the reconciler resyncs).
    pub resync_requests: Option<Arc<watch::Sender<String>>>,
}

impl ElectionConfig {
    /// How often the leader renews and followers look.
    fn retry_period(&self) -> Duration {
        (self.lease_duration / 5).clamp(Duration::from_millis(200), Duration::from_secs(2))
    }

    /// A leader that could not renew for this long steps down (before anyone may take over).
    fn renew_deadline(&self) -> Duration {
        self.lease_duration * 2 / 3
    }
}

/// Runs the election until `shutdown` fires; `leading` tells whether this replica leads.
/// `observed_leader` is set once any valid holder (this replica or another) is known.
pub async fn run(
    client: Client,
    config: ElectionConfig,
    leading: watch::Sender<bool>,
    observed_leader: watch::Sender<bool>,
    resyncs: watch::Receiver<Resyncs>,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut elector = Elector {
        api,
        config,
        resyncs,
        observed: None,
        last_renew: None,
    };
    loop {
        let now = Instant::now();
        let was_leading = *leading.borrow();
        let next = match elector.round().await {
            Ok(Round {
                leading: lead,
                holder_valid,
                wake_in,
            }) => {
                if lead {
                    elector.last_renew = Some(now);
                }
                set(&leading, &metrics, lead);
                if holder_valid || lead {
                    observed_leader.send_if_modified(|v| !std::mem::replace(v, true));
                }
                wake_in
            }
            Err(e) => {
                metrics.api_error(match &e {
                    kube::Error::Api(status) => status.code,
                    _ => 0,
                });
                tracing::warn!(error = %e, "leader election round failed");
                if was_leading
                    && elector
                        .last_renew
                        .is_none_or(|t| t.elapsed() > elector.config.renew_deadline())
                {
                    tracing::warn!("could not renew the lease in time; stepping down");
                    set(&leading, &metrics, false);
                }
                elector.config.retry_period()
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(next) => {}
            _ = shutdown.changed() => break,
        }
    }
    if *leading.borrow() {
        elector.release().await;
        set(&leading, &metrics, false);
    }
}

fn set(leading: &watch::Sender<bool>, metrics: &Metrics, lead: bool) {
    let changed = leading.send_if_modified(|v| std::mem::replace(v, lead) != lead);
    if changed {
        tracing::info!(leading = lead, "leadership changed");
    }
    metrics.leader.set(i64::from(lead));
}

struct Elector {
    api: Api<Lease>,
    config: ElectionConfig,
    /// This replica's full resyncs: the last one is published while it holds the Lease.
    resyncs: watch::Receiver<Resyncs>,
    /// The last Lease version seen held by someone else, and when it was first seen.
    observed: Option<(String, Instant)>,
    last_renew: Option<Instant>,
}

struct Round {
    leading: bool,
    /// Someone holds a valid lease.
    holder_valid: bool,
    wake_in: Duration,
}

fn now_micro() -> MicroTime {
    MicroTime(Timestamp::now())
}

impl Elector {
    fn spec(&self, acquire: MicroTime, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.config.lease_duration.as_secs().max(1) as i32),
            acquire_time: Some(acquire),
            renew_time: Some(now_micro()),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// The holder's annotations, on a Lease it is about to write: its policy and the start
    /// of its last full resync. Riding on the renewals, they cost no API call of their own.
    fn publish(&self, meta: &mut ObjectMeta) {
        let annotations = meta.annotations.get_or_insert_with(Default::default);
        annotations.extend(self.config.published.clone());
        if let Some(at) = self.resyncs.borrow().last_started {
            annotations.insert(published::LAST_RESYNC.into(), at.to_string());
        }
        if let Some(not_bound) = &self.config.not_bound {
            let value = published::joined(not_bound.borrow().iter());
            annotations.insert(published::NOT_BOUND.into(), value);
        }
    }

    fn post_params() -> PostParams {
        PostParams {
            dry_run: false,
            field_manager: Some(marks::FIELD_MANAGER.into()),
        }
    }

    async fn round(&mut self) -> Result<Round, kube::Error> {
        let retry = self.config.retry_period();
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            let mut lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec(now_micro(), 0)),
            };
            self.publish(&mut lease.metadata);
            let won = match self.api.create(&Self::post_params(), &lease).await {
                Ok(_) => true,
                Err(kube::Error::Api(s)) if s.code == 409 => false,
                Err(e) => return Err(e),
            };
            return Ok(Round {
                leading: won,
                holder_valid: true,
                wake_in: retry,
            });
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();

        if holder == self.config.identity {
            lease.spec = Some(self.spec(
                spec.acquire_time.clone().unwrap_or_else(now_micro),
                spec.lease_transitions.unwrap_or(0),
            ));
            self.publish(&mut lease.metadata);
            let request = take_resync_request(&mut lease.metadata);
            let renewed = self.replace(&lease).await?;
            if renewed
                && let (Some(request), Some(requests)) = (request, &self.config.resync_requests)
            {
                tracing::info!(request = %request, "full resync requested on the Lease");
                requests.send_replace(request);
            }
            return Ok(Round {
                leading: renewed,
                holder_valid: true,
                wake_in: retry,
            });
        }

        // Someone else's (or nobody's) lease: valid until its duration passed, counted from
        // when this replica first saw the current version, or from its renewTime.
        let duration = spec
            .lease_duration_seconds
            .map(|s| Duration::from_secs(s.max(1) as u64))
            .unwrap_or(self.config.lease_duration);
        let seen_at = match &self.observed {
            Some((seen_rv, at)) if *seen_rv == rv => *at,
            _ => {
                let at = Instant::now();
                self.observed = Some((rv.clone(), at));
                at
            }
        };
        let by_observation = seen_at + duration;
        let renewed_ago = spec
            .renew_time
            .as_ref()
            .map(|t| Timestamp::now().duration_since(t.0))
            .unwrap_or(SignedDuration::MAX);
        let by_renew_time = Instant::now()
            + duration
                .checked_sub(Duration::try_from(renewed_ago).unwrap_or(Duration::MAX))
                .unwrap_or(Duration::ZERO);
        let expires = by_observation.min(by_renew_time);
        let now = Instant::now();
        if !holder.is_empty() && expires > now {
            return Ok(Round {
                leading: false,
                holder_valid: true,
                // Look again when it would expire, or at the retry period, whichever is sooner.
                wake_in: retry.min(expires - now + Duration::from_millis(20)),
            });
        }
        tracing::info!(previous = %holder, "lease expired; taking over");
        lease.spec = Some(self.spec(now_micro(), spec.lease_transitions.unwrap_or(0) + 1));
        self.publish(&mut lease.metadata);
        // A new leader resyncs at once anyway: a pending request is taken by that.
        take_resync_request(&mut lease.metadata);
        let won = self.replace(&lease).await?;
        Ok(Round {
            leading: won,
            holder_valid: won,
            wake_in: retry,
        })
    }

    /// Replace preconditioned on the resourceVersion read; `false` if someone else wrote first.
    async fn replace(&self, lease: &Lease) -> Result<bool, kube::Error> {
        match self
            .api
            .replace(&self.config.name, &Self::post_params(), lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// On a clean shutdown: give the lease up so another replica takes over at once.
    async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.config.name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(&self.config.identity) {
            return;
        }
        spec.holder_identity = None;
        spec.renew_time = Some(now_micro());
        match self.replace(&lease).await {
            Ok(_) => tracing::info!("released the lease"),
            Err(e) => tracing::warn!(error = %e, "could not release the lease"),
        }
    }
}

/// A `copyrator.io/resync` request not acted on yet, marked as taken (`copyrator.io/resynced`
/// set to it) in the Lease about to be written.
fn take_resync_request(meta: &mut ObjectMeta) -> Option<String> {
    let annotations = meta.annotations.as_mut()?;
    let request = annotations.get(published::RESYNC)?.clone();
    if annotations.get(published::RESYNCED) == Some(&request) {
        return None;
    }
    annotations.insert(published::RESYNCED.into(), request.clone());
    Some(request)
}

/// Where a pod's namespace is written when it runs with a service account.
const SERVICE_ACCOUNT_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// The Lease's namespace when `--lease-namespace` is not given: copyrator's own namespace
/// in-cluster (`$POD_NAMESPACE`, else its service account's namespace file), `default` when
/// neither is known (out of cluster).
pub fn default_lease_namespace() -> String {
    lease_namespace_from(
        std::env::var("POD_NAMESPACE").ok(),
        std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE_FILE).ok(),
    )
}

/// copyrator's own namespace, which receives copies of Secrets and ConfigMaps only (SPEC
/// §9.10): in-cluster its pod's (`$POD_NAMESPACE`, else its service account's namespace
/// file), out of cluster `--lease-namespace` when given, else none.
pub fn own_namespace(lease_namespace: Option<&str>) -> Option<String> {
    [
        std::env::var("POD_NAMESPACE").ok(),
        std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE_FILE).ok(),
        lease_namespace.map(String::from),
    ]
    .into_iter()
    .flatten()
    .map(|s| s.trim().to_string())
    .find(|s| crate::selector::is_dns_label(s))
}

fn lease_namespace_from(pod_namespace: Option<String>, service_account: Option<String>) -> String {
    [pod_namespace, service_account]
        .into_iter()
        .flatten()
        .map(|s| s.trim().to_string())
        .find(|s| crate::selector::is_dns_label(s))
        .unwrap_or_else(|| "default".into())
}

/// A default identity: `$POD_NAME` or the host name, plus a random suffix so two processes on
/// one host differ.
pub fn default_identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "copyrator".into());
    let mut bytes = [0u8; 4];
    if getrandom(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        bytes = nanos.to_le_bytes();
    }
    format!("{base}-{:08x}", u32::from_le_bytes(bytes))
}

fn getrandom(buf: &mut [u8]) -> std::io::Result<()> {
    use std::io::Read;
    std::fs::File::open("/dev/urandom")?.read_exact(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_lives_in_copyrators_own_namespace_when_known() {
        let s = |v: &str| Some(v.to_string());
        assert_eq!(
            lease_namespace_from(s("copyrator-system"), s("other")),
            "copyrator-system"
        );
        assert_eq!(
            lease_namespace_from(None, s("copyrator-system\n")),
            "copyrator-system"
        );
        assert_eq!(lease_namespace_from(s(""), s("from-file")), "from-file");
        assert_eq!(lease_namespace_from(s("Not A Name"), None), "default");
        assert_eq!(lease_namespace_from(None, None), "default");
    }
}
