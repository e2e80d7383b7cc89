//! `migrate --adopt`: copyrator takes over a peer's existing copies, so they do not show up
//! as conflicts with objects it does not manage. Only an object whose peer annotations name
//! the very source the generated rule copies is touched, and only its metadata: copyrator's
//! ownership marks are added (deletion policy Retain until the rule is in force, so nothing
//! is deleted meanwhile); the content is rewritten by copyrator's next sync. An object is
//! adopted only for a rule copyrator will follow as printed: not for a CopyRule printed
//! commented out, nor where an untrusted inline rule lacks the target's consent.

use serde_json::json;

use super::{
    config::{Change, Config, Item},
    peers,
};
use crate::{
    cli::Peer,
    cluster::{Cluster, Written},
    marks,
    model::{NamespaceInfo, ObjectKey, SourceInfo},
    plan::Policy,
    tenancy,
};

/// Adopts the peer's copies of every item's sources; returns one line per object looked at.
pub async fn adopt(
    cluster: &Cluster,
    peer: Peer,
    config: &Config,
    namespaces: &[NamespaceInfo],
    policy: &Policy,
) -> anyhow::Result<Vec<String>> {
    let mut lines = Vec::new();
    for item in &config.items {
        for intent in &item.intents {
            let Some(source) = cluster
                .get_meta(&intent.source)
                .await?
                .and_then(|m| SourceInfo::from_meta(intent.source.kind, &m))
            else {
                lines.push(format!("{}: not found; nothing adopted", intent.source));
                continue;
            };
            for ns in namespaces {
                if ns.name == source.key.namespace
                    || policy.is_excluded(&ns.name)
                    || !intent.targets.matches(ns)
                {
                    continue;
                }
                let key = ObjectKey::new(
                    source.key.kind,
                    &ns.name,
                    intent.target_name.as_deref().unwrap_or(&source.key.name),
                );
                if let Some(line) =
                    adopt_one(cluster, peer, item, &source, ns, &key, policy).await?
                {
                    lines.push(line);
                }
            }
        }
    }
    Ok(lines)
}

async fn adopt_one(
    cluster: &Cluster,
    peer: Peer,
    item: &Item,
    source: &SourceInfo,
    ns: &NamespaceInfo,
    key: &ObjectKey,
    policy: &Policy,
) -> anyhow::Result<Option<String>> {
    let Some(found) = cluster
        .get_meta(key)
        .await?
        .and_then(|m| SourceInfo::from_meta(key.kind, &m))
    else {
        return Ok(None);
    };
    if found
        .labels
        .get(marks::MANAGED_BY_LABEL)
        .map(String::as_str)
        == Some(marks::MANAGED_BY_VALUE)
    {
        return Ok(Some(format!("{key}: already copyrator's")));
    }
    match peers::source_named_by(peer, &found) {
        Some(named) if named == source.key => {}
        Some(other) => {
            return Ok(Some(format!(
                "{key}: left untouched: it is a copy of {}, not of {}",
                other.namespaced_name(),
                source.key.namespaced_name()
            )));
        }
        None => {
            return Ok(Some(format!(
                "{key}: left untouched: nothing on it names {} as its source",
                source.key.namespaced_name()
            )));
        }
    }
    // A CopyRule printed commented out is not part of the configuration: marked as its copy,
    // the object would be a Retained copy of a rule that does not exist, recorded at CopyRule
    // precedence, which no trusted source's claim could take over (SPEC §9.3).
    if item.commented_out {
        return Ok(Some(format!(
            "{key}: not adopted: {} is printed commented out ({} is not a trusted namespace); \
             adopt with --trust-sources once the cluster administrators take it as theirs",
            item.rule_mark(),
            source.key.namespace
        )));
    }
    // An inline rule of an untrusted namespace gets no copy where the target does not consent
    // (SPEC §9.2): adopting one there would have copyrator delete it.
    if matches!(item.change, Change::Inline { .. })
        && !policy.trust.is_trusted(&source.key.namespace)
        && !tenancy::accepts_from(ns, &source.key.namespace)
    {
        return Ok(Some(format!(
            "{key}: not adopted yet: {} does not accept copies from {} ({}); adopt again once it does",
            ns.name,
            source.key.namespace,
            marks::ACCEPT_FROM_ANNOTATION
        )));
    }
    let labels = json!({
        marks::MANAGED_BY_LABEL: marks::MANAGED_BY_VALUE,
        marks::SOURCE_UID_LABEL: source.uid,
    });
    let annotations = json!({
        marks::SOURCE_ANNOTATION: source.key.namespaced_name(),
        marks::RULE_ANNOTATION: item.rule_mark(),
        marks::DELETION_POLICY_ANNOTATION: "Retain",
    });
    let line = match cluster
        .add_marks(
            key,
            &found.uid,
            &found.resource_version,
            &labels,
            &annotations,
        )
        .await?
    {
        Written::Done => format!(
            "{key}: adopted (copy of {} by {})",
            source.key.namespaced_name(),
            item.rule_mark()
        ),
        _ => format!("{key}: changed while being adopted; left as is (run again)"),
    };
    Ok(Some(line))
}
