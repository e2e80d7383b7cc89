//! Each peer's annotations, translated: what each asks for and which objects are its copies.

use std::collections::BTreeMap;

use super::*;
use crate::model::Kind;

/// A peer configured by annotations only.
fn translate(peer: Peer, objects: &[SourceInfo], namespaces: &[NamespaceInfo]) -> Translation {
    super::translate(
        peer,
        &Configured {
            objects,
            documents: &[],
            namespaces,
            trust_namespace: "cert-manager",
        },
    )
}

fn object(kind: Kind, ns: &str, name: &str, annotations: &[(&str, &str)]) -> SourceInfo {
    SourceInfo {
        key: ObjectKey::new(kind, ns, name),
        uid: format!("uid-{ns}-{name}"),
        resource_version: "1".into(),
        labels: BTreeMap::new(),
        annotations: annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        created: 0,
        deleting: false,
        dropped: None,
    }
}

fn secret(ns: &str, name: &str, annotations: &[(&str, &str)]) -> SourceInfo {
    object(Kind::Secret, ns, name, annotations)
}

fn namespaces(specs: &[(&str, &[(&str, &str)])]) -> Vec<NamespaceInfo> {
    specs
        .iter()
        .map(|(name, labels)| NamespaceInfo {
            name: name.to_string(),
            resource_version: String::new(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            accept_from: None,
            terminating: false,
        })
        .collect()
}

fn today() -> Vec<NamespaceInfo> {
    namespaces(&[
        ("platform", &[]),
        ("team-a", &[("env", "prod")]),
        ("team-b", &[]),
        ("app-1", &[("env", "prod")]),
        ("app-22", &[]),
        ("other", &[]),
    ])
}

fn names(t: &Targets) -> Vec<&str> {
    t.names.iter().map(String::as_str).collect()
}

const R: &str = "reflector.v1.k8s.emberstack.com/";

fn r(key: &str) -> String {
    format!("{R}{key}")
}

#[test]
fn reflector_auto_reflection_everywhere_selected_or_expanded() {
    let (allowed, auto, auto_ns) = (
        r("reflection-allowed"),
        r("reflection-auto-enabled"),
        r("reflection-auto-namespaces"),
    );
    let everywhere = secret("platform", "tls", &[(&allowed, "true"), (&auto, "true")]);
    let listed = secret(
        "platform",
        "ca",
        &[
            (&allowed, "True"),
            (&auto, "true"),
            (&auto_ns, "team-a, app-[0-9]+,platform"),
        ],
    );
    let not_auto = secret("platform", "manual", &[(&allowed, "true")]);
    let t = translate(Peer::Reflector, &[everywhere, listed, not_auto], &today());
    assert_eq!(t.intents.len(), 2, "{t:?}");
    let tls = t.intents.iter().find(|i| i.source.name == "tls").unwrap();
    assert!(tls.targets.every);
    let ca = t.intents.iter().find(|i| i.source.name == "ca").unwrap();
    // Names stay names; the regular expression becomes today's matching namespaces; the
    // source's own namespace is never a target.
    assert_eq!(names(&ca.targets), ["app-1", "app-22", "team-a"]);
    assert!(
        ca.notes
            .iter()
            .any(|n| n.contains("`app-[0-9]+`") && n.contains("app-1, app-22")),
        "{:?}",
        ca.notes
    );
}

#[test]
fn reflector_both_lists_restricting_expands_to_what_both_allow() {
    let s = secret(
        "platform",
        "tls",
        &[
            (&r("reflection-allowed"), "true"),
            (&r("reflection-allowed-namespaces"), "team-.*,app-1"),
            (&r("reflection-auto-enabled"), "true"),
            (&r("reflection-auto-namespaces-selector"), "env=prod"),
        ],
    );
    let t = translate(Peer::Reflector, &[s], &today());
    assert_eq!(names(&t.intents[0].targets), ["app-1", "team-a"]);
    assert!(t.intents[0].targets.selector.is_none());
}

#[test]
fn reflector_mirrors_are_copies_and_hand_made_ones_are_pulls() {
    let source = secret(
        "platform",
        "tls",
        &[
            (&r("reflection-allowed"), "true"),
            (&r("reflection-allowed-namespaces"), "team-.*"),
        ],
    );
    let auto_copy = secret(
        "team-a",
        "tls",
        &[
            (&r("reflects"), "platform/tls"),
            (&r("auto-reflects"), "True"),
        ],
    );
    let mirror = secret("team-b", "my-tls", &[(&r("reflects"), "platform/tls")]);
    let refused = secret("other", "tls", &[(&r("reflects"), "platform/tls")]);
    let t = translate(
        Peer::Reflector,
        &[source, auto_copy, mirror, refused],
        &today(),
    );
    assert_eq!(t.copies.len(), 3);
    assert!(
        t.copies
            .iter()
            .all(|c| c.source.namespaced_name() == "platform/tls")
    );
    assert_eq!(t.intents.len(), 1, "{t:?}");
    assert_eq!(t.intents[0].target_name.as_deref(), Some("my-tls"));
    assert_eq!(names(&t.intents[0].targets), ["team-b"]);
    assert!(
        t.skipped
            .iter()
            .any(|s| s.note.contains("other/tls") && s.note.contains("does not permit")),
        "{:?}",
        t.skipped
    );
}

const M: &str = "replicator.v1.mittwald.de/";

fn m(key: &str) -> String {
    format!("{M}{key}")
}

#[test]
fn replicator_push_by_names_patterns_and_selector() {
    let s = secret(
        "platform",
        "cred",
        &[
            (&m("replicate-to"), "team-b,app-[0-9]"),
            (&m("replicate-to-matching"), "env=prod"),
        ],
    );
    let push_copy = secret(
        "team-b",
        "cred",
        &[
            (&m("replicated-from-version"), "17"),
            (&m("replicated-keys"), "a"),
        ],
    );
    let t = translate(Peer::Replicator, &[s, push_copy], &today());
    assert_eq!(t.intents.len(), 1);
    assert_eq!(names(&t.intents[0].targets), ["app-1", "team-b"]);
    assert_eq!(t.intents[0].targets.selector.as_deref(), Some("env=prod"));
    // A push copy names no source: it is not known as a copy.
    assert!(t.copies.is_empty());
}

#[test]
fn replicator_pull_needs_the_sources_permission() {
    let s = secret(
        "platform",
        "cred",
        &[
            (&m("replication-allowed"), "true"),
            (&m("replication-allowed-namespaces"), "team-.*"),
        ],
    );
    let pull = secret(
        "team-a",
        "pulled",
        &[(&m("replicate-from"), "platform/cred")],
    );
    let denied = secret("other", "cred", &[(&m("replicate-from"), "platform/cred")]);
    let dangling = secret("team-b", "x", &[(&m("replicate-from"), "platform/gone")]);
    let t = translate(Peer::Replicator, &[s, pull, denied, dangling], &today());
    assert_eq!(t.intents.len(), 1, "{t:?}");
    assert_eq!(t.intents[0].target_name.as_deref(), Some("pulled"));
    assert_eq!(names(&t.intents[0].targets), ["team-a"]);
    assert_eq!(t.copies.len(), 3);
    assert_eq!(t.skipped.len(), 2, "{:?}", t.skipped);
}

#[test]
fn kubed_sync_everywhere_or_by_selector_and_its_copies() {
    let all = object(
        Kind::ConfigMap,
        "platform",
        "omni",
        &[("kubed.appscode.com/sync", "")],
    );
    let truthy = object(
        Kind::ConfigMap,
        "platform",
        "t",
        &[("kubed.appscode.com/sync", "true")],
    );
    let selected = object(
        Kind::ConfigMap,
        "platform",
        "sel",
        &[("kubed.appscode.com/sync", "app=kubed")],
    );
    let bad = object(
        Kind::ConfigMap,
        "platform",
        "bad",
        &[("kubed.appscode.com/sync", "app in kubed")],
    );
    let mut by_labels = object(Kind::ConfigMap, "team-a", "omni", &[]);
    by_labels.labels = [
        ("kubed.appscode.com/origin.name", "omni"),
        ("kubed.appscode.com/origin.namespace", "platform"),
        ("kubed.appscode.com/origin.cluster", "unicorn"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let by_annotation = object(
        Kind::ConfigMap,
        "team-b",
        "omni",
        &[(
            "kubed.appscode.com/origin",
            r#"{"kind":"ConfigMap","namespace":"platform","name":"omni","uid":"u"}"#,
        )],
    );
    let t = translate(
        Peer::Kubed,
        &[all, truthy, selected, bad, by_labels, by_annotation],
        &today(),
    );
    let get = |name: &str| t.intents.iter().find(|i| i.source.name == name).unwrap();
    assert!(get("omni").targets.every && get("t").targets.every);
    assert_eq!(get("sel").targets.selector.as_deref(), Some("app=kubed"));
    assert!(t.intents.iter().all(|i| i.source.name != "bad"));
    assert!(
        t.skipped.iter().any(|s| s.note.contains("platform/bad")),
        "{:?}",
        t.skipped
    );
    assert_eq!(t.copies.len(), 2);
    assert!(
        t.copies
            .iter()
            .all(|c| c.source == ObjectKey::new(Kind::ConfigMap, "platform", "omni"))
    );
}

#[test]
fn pattern_lists_match_whole_names() {
    let p = PatternList::parse("team-a, app-[0-9]+, [bad");
    assert!(p.matches("team-a") && p.matches("app-12"));
    assert!(!p.matches("xapp-1") && !p.matches("app-1x") && !p.matches("team-ab"));
    let mut notes = Vec::new();
    let expanded = p.expand("list", &today(), &mut notes);
    assert_eq!(
        expanded.into_iter().collect::<Vec<_>>(),
        ["app-1", "app-22", "team-a"]
    );
    assert!(notes.iter().any(|n| n.contains("\"[bad\"")), "{notes:?}");
}
