//! emberstack kubernetes-reflector. A source permits reflection (`reflection-allowed`,
//! restricted to `reflection-allowed-namespaces` and/or `-namespaces-selector`); with
//! `reflection-auto-enabled` reflector creates the copies itself, in the namespaces
//! `reflection-auto-namespaces` and/or `-namespaces-selector` name (both lists: names or
//! regular expressions; empty: every namespace). A hand-made mirror names its source with
//! `reflects: <namespace>/<name>` and is kept in sync if the source permits its namespace.
//! Copies carry `reflects` too (auto-made ones also `auto-reflects: "True"`).

use super::{
    Intent, PatternList, PeerCopy, Skipped, Targets, Translation, checked_selector, is_true, merge,
    parse_reference,
};
use crate::model::{NamespaceInfo, ObjectKey, SourceInfo};

const PREFIX: &str = "reflector.v1.k8s.emberstack.com/";
const ALLOWED: &str = "reflector.v1.k8s.emberstack.com/reflection-allowed";
const ALLOWED_NAMESPACES: &str = "reflector.v1.k8s.emberstack.com/reflection-allowed-namespaces";
const ALLOWED_SELECTOR: &str =
    "reflector.v1.k8s.emberstack.com/reflection-allowed-namespaces-selector";
const AUTO_ENABLED: &str = "reflector.v1.k8s.emberstack.com/reflection-auto-enabled";
const AUTO_NAMESPACES: &str = "reflector.v1.k8s.emberstack.com/reflection-auto-namespaces";
const AUTO_SELECTOR: &str = "reflector.v1.k8s.emberstack.com/reflection-auto-namespaces-selector";
const REFLECTS: &str = "reflector.v1.k8s.emberstack.com/reflects";
const AUTO_REFLECTS: &str = "reflector.v1.k8s.emberstack.com/auto-reflects";

/// One side of reflector's namespace check: names/patterns OR a selector; both empty means
/// every namespace.
struct Side {
    what: &'static str,
    list: PatternList,
    selector: Option<String>,
}

impl Side {
    fn read(
        object: &SourceInfo,
        list: &'static str,
        selector: &'static str,
        notes: &mut Vec<String>,
    ) -> Self {
        let raw_selector = object
            .annotations
            .get(selector)
            .map(|s| s.trim())
            .unwrap_or("");
        Side {
            what: short(list),
            list: PatternList::parse(object.annotations.get(list).map_or("", String::as_str)),
            selector: (!raw_selector.is_empty())
                .then(|| checked_selector(short(selector), raw_selector, notes))
                .flatten(),
        }
    }

    fn is_every(&self) -> bool {
        self.list.is_empty() && self.selector.is_none()
    }

    fn matches(&self, ns: &NamespaceInfo) -> bool {
        self.is_every()
            || self.list.matches(&ns.name)
            || Targets {
                selector: self.selector.clone(),
                ..Default::default()
            }
            .matches(ns)
    }

    fn targets(&self, namespaces: &[NamespaceInfo], notes: &mut Vec<String>) -> Targets {
        Targets {
            every: false,
            selector: self.selector.clone(),
            names: self.list.expand(self.what, namespaces, notes),
            exclude: Default::default(),
        }
    }
}

/// How a note about input without Namespace objects begins (`migrate` warns on it).
pub const NO_NAMESPACES: &str =
    "the input holds no Namespace objects (add them: kubectl get namespaces -o yaml)";

fn short(annotation: &'static str) -> &'static str {
    annotation.strip_prefix(PREFIX).unwrap_or(annotation)
}

pub(super) fn translate(objects: &[SourceInfo], namespaces: &[NamespaceInfo]) -> Translation {
    let mut out = Translation::default();
    let mut intents = Vec::new();
    for object in objects {
        if let Some(source) = source_named_by(object) {
            out.copies.push(PeerCopy {
                copy: object.key.clone(),
                source: source.clone(),
            });
            if !is_true(object.annotations.get(AUTO_REFLECTS)) {
                intents.extend(mirror(
                    object,
                    source,
                    objects,
                    namespaces,
                    &mut out.skipped,
                ));
            }
        }
        if !is_true(object.annotations.get(ALLOWED))
            || !is_true(object.annotations.get(AUTO_ENABLED))
        {
            continue;
        }
        let mut notes = Vec::new();
        let allowed = Side::read(object, ALLOWED_NAMESPACES, ALLOWED_SELECTOR, &mut notes);
        let auto = Side::read(object, AUTO_NAMESPACES, AUTO_SELECTOR, &mut notes);
        let others: Vec<NamespaceInfo> = namespaces
            .iter()
            .filter(|n| n.name != object.key.namespace)
            .cloned()
            .collect();
        let mut targets = match (allowed.is_every(), auto.is_every()) {
            (true, true) => Targets {
                every: true,
                ..Default::default()
            },
            (true, false) => auto.targets(&others, &mut notes),
            (false, true) => allowed.targets(&others, &mut notes),
            (false, false) if namespaces.is_empty() => {
                // Files without Namespace objects: only plain names can be resolved, not
                // patterns or selectors. Keep the names both sides allow, and say so.
                let names: std::collections::BTreeSet<String> = allowed
                    .list
                    .names
                    .iter()
                    .chain(&auto.list.names)
                    .filter(|n| allowed.list.matches(n) && auto.list.matches(n))
                    .cloned()
                    .collect();
                notes.push(format!(
                    "{NO_NAMESPACES}: kept the target names both {} and {} give ({}); their \
                     patterns and selectors could not be resolved",
                    short(ALLOWED_NAMESPACES),
                    short(AUTO_NAMESPACES),
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.iter().cloned().collect::<Vec<_>>().join(", ")
                    }
                ));
                Targets {
                    names,
                    ..Default::default()
                }
            }
            (false, false) => {
                // Both restrict: copies go where both agree, which one rule cannot say.
                let names = others
                    .iter()
                    .filter(|n| allowed.matches(n) && auto.matches(n))
                    .map(|n| n.name.clone())
                    .collect();
                notes.push(format!(
                    "both {} and {} restrict the targets: expanded to the namespaces that \
                     satisfy both today; namespaces created later get no copy",
                    short(ALLOWED_NAMESPACES),
                    short(AUTO_NAMESPACES)
                ));
                Targets {
                    names,
                    ..Default::default()
                }
            }
        };
        // A source is never copied into its own namespace.
        targets.names.remove(&object.key.namespace);
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

/// A hand-made mirror: kept in sync from `source` if the source permits its namespace.
fn mirror(
    object: &SourceInfo,
    source: ObjectKey,
    objects: &[SourceInfo],
    namespaces: &[NamespaceInfo],
    skipped: &mut Vec<Skipped>,
) -> Option<Intent> {
    let Some(src) = objects.iter().find(|o| o.key == source) else {
        skipped.push(Skipped {
            source_namespace: source.namespace.clone(),
            note: format!(
                "{}: reflects {}, which was not found; not migrated",
                object.key,
                source.namespaced_name()
            ),
        });
        return None;
    };
    let mut ignored = Vec::new();
    let allowed = Side::read(src, ALLOWED_NAMESPACES, ALLOWED_SELECTOR, &mut ignored);
    let ns = namespaces
        .iter()
        .find(|n| n.name == object.key.namespace)
        .cloned()
        .unwrap_or_else(|| NamespaceInfo {
            name: object.key.namespace.clone(),
            resource_version: String::new(),
            labels: Default::default(),
            accept_from: None,
            terminating: false,
        });
    if !is_true(src.annotations.get(ALLOWED)) || !allowed.matches(&ns) {
        skipped.push(Skipped {
            source_namespace: source.namespace.clone(),
            note: format!(
                "{}: reflects {}, which does not permit reflection into {}; reflector does not \
             copy it either, so it is not migrated",
                object.key,
                source.namespaced_name(),
                ns.name
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
            "{} is a hand-made mirror (reflects {})",
            object.key,
            source.namespaced_name()
        )],
        source,
    })
}

/// `reflects: <namespace>/<name>`: the source this object mirrors.
pub(super) fn source_named_by(object: &SourceInfo) -> Option<ObjectKey> {
    parse_reference(object.key.kind, object.annotations.get(REFLECTS)?)
}
