//! What `migrate` reads: the Secrets and ConfigMaps that carry a peer's keys (for Kyverno,
//! its ClusterPolicies; for trust-manager, its Bundles), and the namespaces, from the cluster
//! (metadata only, policies and Bundles whole) or from manifest files.

use std::path::PathBuf;

use anyhow::Context as _;
use kube::{
    api::{Api, DynamicObject, ListParams},
    discovery,
};
use serde_json::Value;

use super::peers;
use crate::{
    cli::Peer,
    cluster::{Cluster, ReadMode},
    model::{Kind, Meta, NamespaceInfo, SourceInfo},
};

/// Objects with the peer's keys, the peer's own objects, and today's namespaces.
pub struct Read {
    pub objects: Vec<SourceInfo>,
    /// Kyverno ClusterPolicy and Policy documents, or trust-manager Bundles and ClusterBundles,
    /// as read.
    pub documents: Vec<Value>,
    pub namespaces: Vec<NamespaceInfo>,
}

impl Read {
    pub fn configured<'a>(&'a self, trust_namespace: &'a str) -> peers::Configured<'a> {
        peers::Configured {
            objects: &self.objects,
            documents: &self.documents,
            namespaces: &self.namespaces,
            trust_namespace,
        }
    }
}

/// The peers configured by objects of their own: the API group and kind of those, and what
/// their CRD is called when it is missing.
fn own_kind(peer: Peer) -> Option<OwnKind> {
    match peer {
        Peer::Kyverno => Some(OwnKind {
            group: "kyverno.io",
            kind: "ClusterPolicy",
            resource: "clusterpolicies.kyverno.io",
            peer: "Kyverno",
            what: "Kyverno policy",
            // Namespaced Policies, read to be reported: their generate rules are not migrated.
            // GeneratingPolicies (CEL), translated where their form maps.
            also: &[
                ("kyverno.io", "Policy"),
                ("policies.kyverno.io", "GeneratingPolicy"),
            ],
        }),
        Peer::TrustManager => Some(OwnKind {
            group: "trust.cert-manager.io",
            kind: "Bundle",
            resource: "bundles.trust.cert-manager.io",
            peer: "trust-manager",
            what: "trust-manager Bundle",
            also: &[(CLUSTER_BUNDLE_GROUP, "ClusterBundle")],
        }),
        Peer::Reflector | Peer::Replicator | Peer::Kubed => None,
    }
}

/// The API group of trust-manager's ClusterBundle (its successor of Bundle), read beside
/// Bundles from the cluster or files.
const CLUSTER_BUNDLE_GROUP: &str = "trust-manager.io";

struct OwnKind {
    group: &'static str,
    kind: &'static str,
    /// `plural.group`, as the CRD is named.
    resource: &'static str,
    peer: &'static str,
    what: &'static str,
    /// Other kinds (group, kind) of the peer's, read where the API server serves them so that
    /// what migrate cannot express is reported, not dropped.
    also: &'static [(&'static str, &'static str)],
}

/// From the cluster: every Secret and ConfigMap, page by page, keeping those with the peer's
/// keys; for Kyverno and trust-manager, their own objects instead.
pub async fn from_cluster(cluster: &Cluster, peer: Peer) -> anyhow::Result<Read> {
    let mut objects = Vec::new();
    let mut documents = Vec::new();
    let kinds = if let Some(own) = own_kind(peer) {
        documents = own_documents(cluster.client(), &own).await?;
        Vec::new()
    } else {
        vec![Kind::Secret, Kind::ConfigMap]
    };
    for kind in kinds {
        objects.extend(
            cluster
                .list_meta(kind, None, "", ReadMode::Consistent, |m| {
                    SourceInfo::from_meta(kind, &m).filter(|s| peers::is_peers(peer, s))
                })
                .await
                .with_context(|| format!("listing {}", kind.plural()))?,
        );
    }
    let namespaces = cluster
        .list_namespaces("", ReadMode::Consistent)
        .await
        .context("listing namespaces")?;
    Ok(Read {
        objects,
        documents,
        namespaces,
    })
}

/// The peer's own objects: its main kind's and those of `also` the API server serves. No
/// CRD of any of them is an error that says so. An `also` kind this user may not list is said
/// on stderr and left out: its objects are then not in the output.
async fn own_documents(client: &kube::Client, own: &OwnKind) -> anyhow::Result<Vec<Value>> {
    let mut documents = Vec::new();
    let mut served = false;
    for (i, (group, kind)) in std::iter::once((own.group, own.kind))
        .chain(own.also.iter().copied())
        .enumerate()
    {
        match list_all(client, group, kind).await {
            Ok(Some(read)) => {
                documents.extend(read);
                served = true;
            }
            Ok(None) => {}
            Err(e) if i > 0 && is_forbidden(&e) => {
                served = true;
                eprintln!(
                    "copyrator: cannot list {kind} ({group}): {e:#}; they are not read, so not \
                     in this output"
                );
            }
            Err(e) => return Err(e),
        }
    }
    if !served {
        let also: Vec<String> = own
            .also
            .iter()
            .map(|(group, kind)| format!("{kind}, {group}"))
            .collect();
        let also = if also.is_empty() {
            String::new()
        } else {
            format!(" (nor {})", also.join("; "))
        };
        anyhow::bail!(
            "the API server serves no {}: {}'s {} CRD is not installed in this cluster{}, so \
             there is no {} to migrate (read them from files with -f)",
            own.resource,
            own.peer,
            own.kind,
            also,
            own.what,
        );
    }
    Ok(documents)
}

/// Whether `e` is the API server refusing this user (403).
fn is_forbidden(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<kube::Error>(),
            Some(kube::Error::Api(s)) if s.code == 403
        )
    })
}

/// Every object of `group`'s `kind`, in all namespaces, in the version the API server prefers
/// (Kyverno's `kyverno.io/v1` or `v2beta1`; the translation reads both); `None` when the API
/// server serves no such kind.
async fn list_all(
    client: &kube::Client,
    group: &str,
    kind: &str,
) -> anyhow::Result<Option<Vec<Value>>> {
    let group = match discovery::group(client, group).await {
        Ok(group) => group,
        Err(kube::Error::Discovery(_)) => return Ok(None),
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
        Err(e) => {
            return Err(e).with_context(|| format!("discovering the {group} API group"));
        }
    };
    let Some((resource, _)) = group.recommended_kind(kind) else {
        return Ok(None);
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut documents = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api
            .list(&params)
            .await
            .with_context(|| format!("listing {}", resource.plural))?;
        for item in page.items {
            let mut doc = serde_json::to_value(item).with_context(|| format!("a {kind}"))?;
            // List items need not repeat their kind; the translation reads it.
            doc["apiVersion"] = resource.api_version.clone().into();
            doc["kind"] = resource.kind.clone().into();
            documents.push(doc);
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    Ok(Some(documents))
}

/// From manifest files (`-` is stdin): every document, `kind: List` items included.
pub fn from_files(files: &[PathBuf], peer: Peer) -> anyhow::Result<Read> {
    let mut read = Read {
        objects: Vec::new(),
        documents: Vec::new(),
        namespaces: Vec::new(),
    };
    for file in files {
        for doc in crate::cli::files::read_documents(file)? {
            add(&mut read, doc, peer)
                .with_context(|| format!("reading a document of {}", file.display()))?;
        }
    }
    Ok(read)
}

fn add(read: &mut Read, doc: Value, peer: Peer) -> anyhow::Result<()> {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
    if kind == "List" || kind.ends_with("List") {
        for item in doc
            .get("items")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
        {
            add(read, item, peer)?;
        }
        return Ok(());
    }
    let group = doc
        .get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.split_once('/'))
        .map_or("", |(group, _)| group);
    // The `also` kinds too: Kyverno's namespaced Policy (to say why it is not migrated),
    // trust-manager's newer ClusterBundle.
    if let Some(own) = own_kind(peer)
        && ((group, kind) == (own.group, own.kind) || own.also.contains(&(group, kind)))
    {
        read.documents.push(doc);
        return Ok(());
    }
    let Some(metadata) = doc.get("metadata") else {
        return Ok(());
    };
    let mut meta: Meta = serde_json::from_value(metadata.clone()).context("metadata")?;
    match kind {
        "Namespace" => read.namespaces.extend(meta.name.map(|name| NamespaceInfo {
            name,
            resource_version: String::new(),
            labels: meta.labels.unwrap_or_default().into(),
            accept_from: None,
            terminating: false,
        })),
        "Secret" | "ConfigMap" => {
            let kind = Kind::lookup("", kind).unwrap_or(Kind::Secret);
            meta.namespace.get_or_insert_with(|| "default".into());
            if let Some(info) = SourceInfo::from_meta(kind, &meta)
                && peers::is_peers(peer, &info)
            {
                read.objects.push(info);
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn empty() -> Read {
        Read {
            objects: Vec::new(),
            documents: Vec::new(),
            namespaces: Vec::new(),
        }
    }

    #[test]
    fn kyverno_policies_are_read_from_lists_and_other_peers_ignore_them() {
        let list = json!({
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
                 "metadata": {"name": "sync-secrets"}, "spec": {"rules": []}},
                {"apiVersion": "kyverno.io/v2beta1", "kind": "ClusterPolicy",
                 "metadata": {"name": "newer"}},
                {"apiVersion": "policies.kyverno.io/v1", "kind": "GeneratingPolicy",
                 "metadata": {"name": "cel"}},
                {"apiVersion": "example.com/v1", "kind": "ClusterPolicy",
                 "metadata": {"name": "not-kyverno"}},
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}},
            ],
        });
        let mut read = empty();
        add(&mut read, list.clone(), Peer::Kyverno).unwrap();
        let names: Vec<&str> = read
            .documents
            .iter()
            .filter_map(|p| p["metadata"]["name"].as_str())
            .collect();
        assert_eq!(names, ["sync-secrets", "newer", "cel"]);
        assert_eq!(read.namespaces.len(), 1);

        let mut read = empty();
        add(&mut read, list, Peer::Reflector).unwrap();
        assert!(read.documents.is_empty());
    }

    #[test]
    fn trust_manager_bundles_are_read_and_other_peers_ignore_them() {
        let list = json!({
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {"apiVersion": "trust.cert-manager.io/v1alpha1", "kind": "Bundle",
                 "metadata": {"name": "ca-bundle"}, "spec": {"sources": []}},
                {"apiVersion": "example.com/v1", "kind": "Bundle",
                 "metadata": {"name": "not-trust-manager"}},
                {"apiVersion": "kyverno.io/v1", "kind": "ClusterPolicy",
                 "metadata": {"name": "sync-secrets"}},
                {"apiVersion": "trust-manager.io/v1alpha2", "kind": "ClusterBundle",
                 "metadata": {"name": "newer"}},
            ],
        });
        let mut read = empty();
        add(&mut read, list.clone(), Peer::TrustManager).unwrap();
        let names: Vec<&str> = read
            .documents
            .iter()
            .filter_map(|d| d["metadata"]["name"].as_str())
            .collect();
        // The ClusterBundle to be reported as not migrated.
        assert_eq!(names, ["ca-bundle", "newer"]);

        let mut read = empty();
        add(&mut read, list, Peer::Kyverno).unwrap();
        assert_eq!(read.documents.len(), 1, "only the ClusterPolicy");
    }
}
