//! mittwald kubernetes-replicator. Push: a source with `replicate-to` (namespace names or
//! regular expressions) and/or `replicate-to-matching` (a namespace label selector) is copied
//! there; its copies carry only `replicated-from-version`, `replicated-at` and
//! `replicated-keys`, never the source's name. Pull: an object with `replicate-from:
//! <namespace>/<name>` is filled from that source, if the source has `replication-allowed:
//! "true"` and its `replication-allowed-namespaces` (names or regular expressions) match the
//! object's namespace.

use super::{
    Intent, PatternList, PeerCopy, Skipped, Targets, Translation, checked_selector, is_true, merge,
    parse_reference,
};
use crate::model::{NamespaceInfo, ObjectKey, SourceInfo};

const REPLICATE_TO: &str = "replicator.v1.mittwald.de/replicate-to";
const REPLICATE_TO_MATCHING: &str = "replicator.v1.mittwald.de/replicate-to-matching";
const REPLICATE_FROM: &str = "replicator.v1.mittwald.de/replicate-from";
const ALLOWED: &str = "replicator.v1.mittwald.de/replication-allowed";
const ALLOWED_NAMESPACES: &str = "replicator.v1.mittwald.de/replication-allowed-namespaces";

pub(super) fn translate(objects: &[SourceInfo], namespaces: &[NamespaceInfo]) -> Translation {
    let mut out = Translation::default();
    let mut intents = Vec::new();
    for object in objects {
        if let Some(source) = source_named_by(object) {
            out.copies.push(PeerCopy {
                copy: object.key.clone(),
                source: source.clone(),
            });
            intents.extend(pull(object, source, objects, &mut out.skipped));
        }
        let to = object.annotations.get(REPLICATE_TO);
        let matching = object.annotations.get(REPLICATE_TO_MATCHING);
        if to.is_none() && matching.is_none() {
            continue;
        }
        let mut notes = Vec::new();
        let others: Vec<NamespaceInfo> = namespaces
            .iter()
            .filter(|n| n.name != object.key.namespace)
            .cloned()
            .collect();
        let mut names = PatternList::parse(to.map_or("", String::as_str)).expand(
            "replicate-to",
            &others,
            &mut notes,
        );
        names.remove(&object.key.namespace);
        let selector = matching
            .map(|m| m.trim())
            .filter(|m| !m.is_empty())
            .and_then(|m| checked_selector("replicate-to-matching", m, &mut notes));
        intents.push(Intent {
            rule_name: None,
            create_once: false,
            source: object.key.clone(),
            target_name: None,
            targets: Targets {
                every: false,
                selector,
                names,
                exclude: Default::default(),
            },
            notes,
        });
    }
    out.intents = merge(intents);
    out
}

/// A pull-style copy: filled from `source` if the source permits its namespace.
fn pull(
    object: &SourceInfo,
    source: ObjectKey,
    objects: &[SourceInfo],
    skipped: &mut Vec<Skipped>,
) -> Option<Intent> {
    let Some(src) = objects.iter().find(|o| o.key == source) else {
        skipped.push(Skipped {
            source_namespace: source.namespace.clone(),
            note: format!(
                "{}: replicate-from {}, which was not found; not migrated",
                object.key,
                source.namespaced_name()
            ),
        });
        return None;
    };
    let permitted = is_true(src.annotations.get(ALLOWED))
        && src
            .annotations
            .get(ALLOWED_NAMESPACES)
            .is_some_and(|list| PatternList::parse(list).matches(&object.key.namespace));
    if !permitted {
        skipped.push(Skipped {
            source_namespace: source.namespace.clone(),
            note: format!(
                "{}: replicate-from {}, which does not permit replication into {} \
             (replication-allowed, replication-allowed-namespaces); replicator copies it only \
             when run with --allow-all, so it is not migrated",
                object.key,
                source.namespaced_name(),
                object.key.namespace
            ),
        });
        return None;
    }
    Some(Intent {
        rule_name: None,
        create_once: false,
        target_name: (object.key.name != source.name).then(|| object.key.name.clone()),
        targets: Targets {
            names: [object.key.namespace.clone()].into(),
            ..Default::default()
        },
        notes: vec![format!(
            "{} pulls from it (replicate-from {})",
            object.key,
            source.namespaced_name()
        )],
        source,
    })
}

/// `replicate-from: <namespace>/<name>`. Push copies name no source.
pub(super) fn source_named_by(object: &SourceInfo) -> Option<ObjectKey> {
    parse_reference(object.key.kind, object.annotations.get(REPLICATE_FROM)?)
}
