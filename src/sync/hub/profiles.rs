//! The hub's inventory of member clusters (SPEC §14.1): SIG-Multicluster ClusterProfiles, one
//! per cluster, named after it, in the members' namespace; their labels are what a hub
//! CopyRule's `spec.clusters.selector` matches. The hub reads them all to grant each member
//! what is placed on it; a member reads only its own. Without the CRD, or the right to read
//! them, selectors place nothing and names still do.

use std::collections::BTreeMap;

use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams},
};

use crate::hub::{
    CLUSTER_PROFILE_GROUP, CLUSTER_PROFILE_PLURAL, CLUSTER_PROFILE_VERSION, Profiles,
};

use super::error::{HUB_TIMEOUT, HubError, classify};

/// ClusterProfiles per page of the hub's read.
const PROFILES_PAGE: u32 = 500;

/// The ClusterProfiles of `namespace` on `client`'s cluster.
fn profiles(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(
        CLUSTER_PROFILE_GROUP,
        CLUSTER_PROFILE_VERSION,
        "ClusterProfile",
    );
    let resource = ApiResource::from_gvk_with_plural(&gvk, CLUSTER_PROFILE_PLURAL);
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// Whether a failed read says the ClusterProfiles are not there to read (CRD not installed,
/// or not granted): no inventory, rather than an error.
fn absent(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404 || s.code == 403)
}

/// The hub's inventory: the labels of every ClusterProfile in `namespace` (metadata only,
/// page by page). None there to read (404, 403): `None`, with a warning; any other failure
/// is an error (the round is retried, nothing granted is removed meanwhile).
pub async fn inventory(hub: &Client, namespace: &str) -> kube::Result<Option<Profiles>> {
    let api = profiles(hub, namespace);
    let mut out = Profiles::new();
    let mut lp = ListParams::default().limit(PROFILES_PAGE);
    loop {
        let page = match api.list_metadata(&lp).await {
            Ok(page) => page,
            Err(e) if absent(&e) => {
                tracing::warn!(namespace, error = %e, "ClusterProfiles not readable: CopyRules' cluster selectors place nothing; names still do");
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        for profile in page.items {
            if let Some(name) = profile.metadata.name {
                out.insert(name, profile.metadata.labels.unwrap_or_default());
            }
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => lp.continue_token = Some(token),
            _ => break,
        }
    }
    Ok(Some(out))
}

/// The labels of the member `cluster`'s own ClusterProfile in the hub's `namespace`; `None`
/// when the hub has none (selectors place nothing here). A hub that does not answer, or does
/// not let the member read it, is an error: a denied read deletes nothing (SPEC §14.3), so
/// the copies its labels placed stay as they are.
pub async fn own_labels(
    hub: &Client,
    namespace: &str,
    cluster: &str,
) -> Result<Option<BTreeMap<String, String>>, HubError> {
    let read = tokio::time::timeout(
        HUB_TIMEOUT * 2,
        profiles(hub, namespace).get_metadata_opt(cluster),
    )
    .await
    .map_err(|_| HubError::Unreachable(format!("reading ClusterProfile {cluster} timed out")))?;
    match read {
        Ok(profile) => Ok(profile.map(|p| p.metadata.labels.unwrap_or_default())),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(classify(e)),
    }
}
