//! `copyrator resync`: asks the running copyrator for a full resync now, by the annotation
//! `copyrator.io/resync` on its Lease, which its leader takes at its next renewal (SPEC §5).
//! Found as `explain` finds it (`lease`); the one write is that annotation.

use std::time::Duration;

use k8s_openapi::{api::coordination::v1::Lease, jiff::Timestamp};
use kube::{
    Api,
    api::{Patch, PatchParams},
};

use super::lease::find_lease;
use crate::{cli::ResyncArgs, pipeline::published};

/// How long to wait for the leader to take the request: a few of its renewals (every 2 s at
/// most).
const TAKEN_WITHIN: Duration = Duration::from_secs(15);

/// Runs `copyrator resync`: annotates the Lease, then waits until the leader has taken it.
pub async fn run(args: ResyncArgs) -> anyhow::Result<()> {
    let client = crate::cluster::client::command_client(args.kubeconfig.as_deref()).await?;
    let search = find_lease(&client, &args.lease, args.webhook_configuration.as_deref()).await?;
    let namespace = search.own_namespace.name().to_string();
    let name = &args.lease.lease_name;
    let api: Api<Lease> = Api::namespaced(client, &namespace);
    let request = Timestamp::now().to_string();
    let patch = serde_json::json!({"metadata": {"annotations": {published::RESYNC: request}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| match &e {
            kube::Error::Api(s) if s.code == 404 => anyhow::anyhow!(
                "no Lease {namespace}/{name}: is copyrator running there with leader election \
                 (the default)? Give --lease-namespace and --lease-name"
            ),
            _ => anyhow::anyhow!("annotating Lease {namespace}/{name}: {e}"),
        })?;
    let deadline = tokio::time::Instant::now() + TAKEN_WITHIN;
    loop {
        let lease = api.get(name).await?;
        let annotations = lease.metadata.annotations.unwrap_or_default();
        if annotations.get(published::RESYNCED) == Some(&request) {
            let holder = lease
                .spec
                .and_then(|s| s.holder_identity)
                .unwrap_or_default();
            println!("full resync started by the leader {holder} (Lease {namespace}/{name})");
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "asked on Lease {namespace}/{name}, but no leader took it within {}s: is copyrator \
                 running? The request stays, and the next leader resyncs at once anyway",
                TAKEN_WITHIN.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
