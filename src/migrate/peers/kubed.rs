//! appscode kubed (config-syncer). A source with `kubed.appscode.com/sync` is copied into
//! every namespace (value empty or "true") or those its value selects (a namespace label
//! selector). Copies carry the labels `kubed.appscode.com/origin.name`, `origin.namespace`
//! and `origin.cluster`, and the annotation `kubed.appscode.com/origin` (a JSON reference).

use super::{Intent, PeerCopy, Skipped, Targets, Translation, checked_selector, merge};
use crate::model::{ObjectKey, SourceInfo};

const SYNC: &str = "kubed.appscode.com/sync";
const SYNC_CONTEXTS: &str = "kubed.appscode.com/sync-contexts";
const ORIGIN: &str = "kubed.appscode.com/origin";
const ORIGIN_NAME: &str = "kubed.appscode.com/origin.name";
const ORIGIN_NAMESPACE: &str = "kubed.appscode.com/origin.namespace";

pub(super) fn translate(objects: &[SourceInfo]) -> Translation {
    let mut out = Translation::default();
    let mut intents = Vec::new();
    for object in objects {
        if let Some(source) = source_named_by(object) {
            out.copies.push(PeerCopy {
                copy: object.key.clone(),
                source,
            });
            continue;
        }
        let Some(value) = object.annotations.get(SYNC) else {
            if object.annotations.contains_key(SYNC_CONTEXTS) {
                out.skipped.push(Skipped {
                    source_namespace: object.key.namespace.clone(),
                    note: format!(
                        "{}: {SYNC_CONTEXTS} (copies into other clusters) has no copyrator \
                         equivalent; not migrated",
                        object.key
                    ),
                });
            }
            continue;
        };
        let mut notes = Vec::new();
        if object.annotations.contains_key(SYNC_CONTEXTS) {
            notes.push(format!(
                "{SYNC_CONTEXTS} (copies into other clusters) has no copyrator equivalent"
            ));
        }
        let value = value.trim();
        let targets = if value.is_empty() || value == "true" {
            Targets {
                every: true,
                ..Default::default()
            }
        } else {
            match checked_selector("sync", value, &mut notes) {
                Some(selector) => Targets {
                    selector: Some(selector),
                    ..Default::default()
                },
                None => {
                    out.skipped.extend(notes.into_iter().map(|n| Skipped {
                        source_namespace: object.key.namespace.clone(),
                        note: format!("{}: {n}", object.key),
                    }));
                    continue;
                }
            }
        };
        intents.push(Intent {
            rule_name: None,
            create_once: false,
            source: object.key.clone(),
            target_name: None,
            targets,
            notes,
        });
    }
    out.intents = merge(intents);
    out
}

/// The origin labels (else the origin annotation) of a kubed copy.
pub(super) fn source_named_by(object: &SourceInfo) -> Option<ObjectKey> {
    let key = match (
        object.labels.get(ORIGIN_NAMESPACE),
        object.labels.get(ORIGIN_NAME),
    ) {
        (Some(ns), Some(name)) => ObjectKey::new(object.key.kind, ns, name),
        _ => {
            #[derive(serde::Deserialize)]
            struct Reference {
                namespace: String,
                name: String,
            }
            let r: Reference = serde_json::from_str(object.annotations.get(ORIGIN)?).ok()?;
            ObjectKey::new(object.key.kind, r.namespace, r.name)
        }
    };
    key.is_valid().then_some(key)
}
