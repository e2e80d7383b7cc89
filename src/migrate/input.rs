//! What `migrate` reads: the Secrets and ConfigMaps that carry a peer's keys, and the
//! namespaces, from the cluster (metadata only) or from manifest files.

use std::path::PathBuf;

use anyhow::Context as _;
use serde_json::Value;

use super::peers;
use crate::{
    cli::Peer,
    cluster::{Cluster, Freshness},
    model::{Kind, Meta, NamespaceInfo, SourceInfo},
};

/// Objects with the peer's keys, and today's namespaces.
pub struct Read {
    pub objects: Vec<SourceInfo>,
    pub namespaces: Vec<NamespaceInfo>,
}

/// From the cluster: every Secret and ConfigMap, page by page, keeping those with the peer's
/// keys.
pub async fn from_cluster(cluster: &Cluster, peer: Peer) -> anyhow::Result<Read> {
    let mut objects = Vec::new();
    for kind in [Kind::Secret, Kind::ConfigMap] {
        objects.extend(
            cluster
                .list_meta(kind, None, "", Freshness::Consistent, |m| {
                    SourceInfo::from_meta(kind, &m).filter(|s| peers::is_peers(peer, s))
                })
                .await
                .with_context(|| format!("listing {}", kind.plural()))?,
        );
    }
    let namespaces = cluster
        .list_namespaces("", Freshness::Consistent)
        .await
        .context("listing namespaces")?;
    Ok(Read {
        objects,
        namespaces,
    })
}

/// From manifest files (`-` is stdin): every document, `kind: List` items included.
pub fn from_files(files: &[PathBuf], peer: Peer) -> anyhow::Result<Read> {
    let mut read = Read {
        objects: Vec::new(),
        namespaces: Vec::new(),
    };
    for file in files {
        let text = if file.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin()).context("reading stdin")?
        } else {
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
        };
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
            .with_context(|| format!("parsing {} as YAML", file.display()))?;
        for doc in docs {
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
