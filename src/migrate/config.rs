//! From a peer's intents to copyrator configuration (pure): the inline rule on the source
//! (its opt-in label and annotations) where one expresses the intent, a CopyRule where it
//! cannot (every namespace, a copy named otherwise, a second selector, a source that already
//! has copyrator annotations, or when asked), with what the reader must know as notes. A
//! CopyRule for a source of an untrusted namespace is commented out unless asked otherwise:
//! it would turn a tenant's wish into a cluster administrator's decision (SPEC §12.1). A
//! Kyverno ClusterPolicy is already the administrators' decision: it becomes CopyRules only,
//! in force. So does a trust-manager Bundle, a CopyRule already ([`PeerRule`]), with a note when
//! its trust namespace is not trusted (its copies would hold nothing).

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

use super::peers::{Intent, PeerRule, Translation};
use crate::{
    cli::Peer,
    copyrule::{ConflictPolicy, CopyRule, CopyRuleSpec, DeletionPolicy},
    marks,
    model::{ObjectKey, SourceInfo},
    plan::Policy,
};

/// The configuration that expresses a peer's intents.
#[derive(Clone, Debug, Default)]
pub struct Config {
    pub items: Vec<Item>,
    /// What was not migrated, and why.
    pub skipped: Vec<String>,
}

/// One change to make.
#[derive(Clone, Debug)]
pub struct Item {
    pub change: Change,
    /// The intents it expresses (their targets are what `--adopt` looks at).
    pub intents: Vec<Intent>,
    pub notes: Vec<String>,
    /// Printed commented out: not part of the configuration unless someone uncomments it (a
    /// CopyRule for a source of an untrusted namespace without `--trust-sources`), so
    /// `--adopt` takes none of its copies.
    pub commented_out: bool,
    /// Manifests to apply before the change (`kubectl apply`): the ConfigMap holding a
    /// trust-manager Bundle's inline certificates, which its CopyRule reads.
    pub objects: Vec<serde_json::Value>,
}

#[derive(Clone, Debug)]
pub enum Change {
    /// The source's inline rule: `copyrator.io/source: "true"` and these annotations.
    Inline {
        source: ObjectKey,
        selector: Option<String>,
        namespaces: BTreeSet<String>,
    },
    CopyRule(Box<CopyRule>),
}

impl Item {
    /// The `copyrator.io/rule` mark of the copies this change makes.
    pub fn rule_mark(&self) -> String {
        match &self.change {
            Change::Inline { .. } => "inline".into(),
            Change::CopyRule(rule) => format!(
                "copyrule/{}",
                rule.metadata.name.as_deref().unwrap_or_default()
            ),
        }
    }
}

/// Options of the translation.
pub struct Options<'a> {
    pub peer: Peer,
    pub policy: &'a Policy,
    /// Every intent becomes a CopyRule.
    pub copy_rules: bool,
    /// CopyRules for sources of untrusted namespaces are printed in force (`--trust-sources`).
    pub trust_sources: bool,
}

/// Builds the configuration. `sources`: the objects read, by key (for their current
/// copyrator annotations).
pub fn build(
    translation: Translation,
    sources: &BTreeMap<ObjectKey, SourceInfo>,
    options: &Options<'_>,
) -> Config {
    let mut config = Config {
        items: Vec::new(),
        skipped: translation.skipped.into_iter().map(|s| s.note).collect(),
    };
    let mut by_source: BTreeMap<ObjectKey, Vec<Intent>> = BTreeMap::new();
    for mut intent in translation.intents {
        let excluded: Vec<String> = intent
            .targets
            .names
            .iter()
            .filter(|n| options.policy.is_excluded(n))
            .cloned()
            .collect();
        if !excluded.is_empty() {
            intent
                .targets
                .names
                .retain(|n| !options.policy.is_excluded(n));
            intent.notes.push(format!(
                "{} left out: copyrator never copies into its --exclude-namespaces",
                excluded.join(", ")
            ));
        }
        if intent.targets.every {
            intent.notes.push(format!(
                "every namespace, as {} did, except copyrator's --exclude-namespaces ({})",
                peer_name(options.peer),
                options
                    .policy
                    .excluded_namespaces
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if intent.targets.is_empty() {
            config.skipped.push(format!(
                "{}: its {} configuration selects no namespace today; nothing to generate",
                intent.source,
                peer_name(options.peer)
            ));
            continue;
        }
        by_source
            .entry(intent.source.clone())
            .or_default()
            .push(intent);
    }
    let mut rule_names = BTreeSet::new();
    for peer_rule in translation.rules {
        config
            .items
            .push(peer_rule_item(peer_rule, &mut rule_names, options));
    }
    for (source, intents) in by_source {
        let configured = sources.get(&source).is_some_and(|s| {
            s.annotations.contains_key(marks::NAMESPACES_ANNOTATION)
                || s.annotations
                    .contains_key(marks::NAMESPACE_SELECTOR_ANNOTATION)
        });
        let mut inline: Option<Item> = None;
        for intent in intents {
            let fits_inline = !options.copy_rules
                && !administrators(options.peer)
                && !configured
                && !intent.targets.every
                && intent.target_name.is_none()
                && !intent.create_once;
            if fits_inline {
                match &mut inline {
                    None => {
                        inline = Some(Item {
                            change: Change::Inline {
                                source: source.clone(),
                                selector: intent.targets.selector.clone(),
                                namespaces: intent.targets.names.clone(),
                            },
                            notes: intent.notes.clone(),
                            intents: vec![intent],
                            commented_out: false,
                            objects: Vec::new(),
                        });
                        continue;
                    }
                    Some(item) => {
                        if merge_inline(item, &intent) {
                            continue;
                        }
                        // A second, different selector: a CopyRule says it.
                    }
                }
            }
            let mut notes = intent.notes.clone();
            if configured {
                notes.push(
                    "the source already has copyrator annotations: a CopyRule leaves them as \
                     they are"
                        .to_string(),
                );
            }
            match copy_rule(options.peer, &intent, &mut rule_names, &mut notes) {
                Some(rule) => {
                    let untrusted = !options.policy.trust.is_trusted(&source.namespace);
                    let held = untrusted && !options.trust_sources;
                    if untrusted && administrators(options.peer) {
                        notes.push(administrators_untrusted_note(&source.namespace));
                    } else if untrusted {
                        notes.push(untrusted_rule_note(&intent, options.trust_sources));
                    }
                    config.items.push(Item {
                        change: Change::CopyRule(Box::new(rule)),
                        intents: vec![intent],
                        notes,
                        commented_out: held && !administrators(options.peer),
                        objects: Vec::new(),
                    });
                }
                None => config
                    .skipped
                    .extend(notes.into_iter().map(|n| format!("{source}: {n}"))),
            }
        }
        if let Some(mut item) = inline {
            if !options.policy.trust.is_trusted(&source.namespace) {
                item.notes.push(consent_note(&source, &item));
            }
            config.items.push(item);
        }
    }
    config
}

/// A peer's CopyRule as printed: in force (the peer's object was the administrators' own), its
/// name unique, with what copyrator needs to fill it (a bundle takes a source's certificates
/// only where its namespace is trusted or consented to, SPEC §3.2).
fn peer_rule_item(
    peer_rule: PeerRule,
    taken: &mut BTreeSet<String>,
    options: &Options<'_>,
) -> Item {
    let PeerRule {
        mut rule,
        source_namespace,
        mut notes,
        objects,
    } = peer_rule;
    let base = rule.metadata.name.clone().unwrap_or_default();
    rule.metadata.name = Some(unique_name(&base, taken));
    notes.push(
        "CopyRules are trusted: creating one needs the copyrator-admin ClusterRole".to_string(),
    );
    let ns = &source_namespace;
    // A template rule (no source namespace) is its copies' source.
    if !ns.is_empty() && !options.policy.trust.is_trusted(ns) {
        notes.push(format!(
            "{ns} is not a trusted namespace: a bundle puts a source's certificates only into \
             namespaces that trust its namespace or accept copies from it, so until then these \
             copies get no certificate of {ns} (except in {ns} itself). Run copyrator with \
             --trusted-namespaces including {ns} (Helm value trustedNamespaces), as {peer} \
             trusted it for every namespace, or annotate each target namespace: kubectl \
             annotate namespace TARGET {accept}={ns}. If the running copyrator trusts {ns}, \
             give migrate the same --trusted-namespaces",
            peer = peer_name(options.peer),
            accept = marks::ACCEPT_FROM_ANNOTATION,
        ));
    }
    Item {
        change: Change::CopyRule(Box::new(rule)),
        intents: Vec::new(),
        notes,
        commented_out: false,
        objects,
    }
}

/// Adds `intent` to the source's inline rule if one rule can say both (one selector at most).
fn merge_inline(item: &mut Item, intent: &Intent) -> bool {
    let Change::Inline {
        selector,
        namespaces,
        ..
    } = &mut item.change
    else {
        return false;
    };
    if let (Some(a), Some(b)) = (&*selector, &intent.targets.selector)
        && a != b
    {
        return false;
    }
    if selector.is_none() {
        *selector = intent.targets.selector.clone();
    }
    namespaces.extend(intent.targets.names.iter().cloned());
    item.notes.extend(intent.notes.iter().cloned());
    item.intents.push(intent.clone());
    true
}

/// An inline rule of an untrusted namespace copies only where the target consents (SPEC §9).
fn consent_note(source: &ObjectKey, item: &Item) -> String {
    let ns = &source.namespace;
    let mut note = format!(
        "{ns} is not a trusted namespace: copyrator copies this inline rule only into \
         namespaces that consent. Either run copyrator with --trusted-namespaces including \
         {ns} (Helm value trustedNamespaces), or annotate each target namespace: kubectl \
         annotate namespace TARGET {}={ns}",
        marks::ACCEPT_FROM_ANNOTATION
    );
    if let Change::Inline { namespaces, .. } = &item.change
        && !namespaces.is_empty()
    {
        note.push_str(&format!(
            " (TARGET: {})",
            namespaces.iter().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    note
}

/// Whether the peer's configuration is the cluster administrators' own (a Kyverno
/// ClusterPolicy is cluster-scoped and already copies its source without consent): it says
/// what a CopyRule says, so it becomes CopyRules, printed in force.
fn administrators(peer: Peer) -> bool {
    peer == Peer::Kyverno
}

/// A CopyRule the administrators already asked for, of a source anyone who may edit its
/// namespace decides: said, as the policy did it.
fn administrators_untrusted_note(ns: &str) -> String {
    format!(
        "{ns} is not a trusted namespace: as the policy did, this CopyRule copies what whoever \
         may edit {ns} writes, without the targets' consent, at CopyRule precedence; printed \
         in force because the ClusterPolicy already asked for it"
    )
}

/// A CopyRule is trusted (SPEC §9.1): for a source of an untrusted namespace, it makes whoever
/// may edit that namespace decide what every selected namespace holds, with no consent and at
/// the highest precedence (§9.3). Said, and (unless `trust_sources`) not put in force.
fn untrusted_rule_note(intent: &Intent, trust_sources: bool) -> String {
    let ns = &intent.source.namespace;
    if trust_sources {
        return format!(
            "{ns} is not a trusted namespace; printed in force because of --trust-sources: this \
             CopyRule copies what whoever may edit {ns} writes, without the targets' consent, \
             at CopyRule precedence"
        );
    }
    let targets = if intent.targets.every {
        "into every namespace".to_string()
    } else {
        let mut targets: Vec<String> = intent.targets.names.iter().cloned().collect();
        if let Some(sel) = &intent.targets.selector {
            targets.push(format!("the namespaces labelled {sel}"));
        }
        format!("into {}", targets.join(", "))
    };
    format!(
        "NOT IN FORCE, printed commented out: {ns} is not a trusted namespace. A CopyRule is \
         trusted: it would copy {source}, whose content whoever may edit {ns} decides, {targets} \
         without their consent ({accept}), taking the name there at CopyRule precedence, over a \
         trusted source's copy of the same name. Uncomment it (or run migrate with \
         --trust-sources) only if the cluster administrators take that content as theirs; if \
         the running copyrator trusts {ns}, give migrate the same --trusted-namespaces",
        source = intent.source,
        accept = marks::ACCEPT_FROM_ANNOTATION,
    )
}

/// The CopyRule for `intent`, named after the peer and the source (unique among `taken`).
fn copy_rule(
    peer: Peer,
    intent: &Intent,
    taken: &mut BTreeSet<String>,
    notes: &mut Vec<String>,
) -> Option<CopyRule> {
    let targets = match intent.targets.rule_fields() {
        Ok(targets) => targets,
        Err(e) => {
            notes.push(format!("{e}; not migrated"));
            return None;
        }
    };
    let base = match &intent.rule_name {
        Some(name) => name.clone(),
        None => {
            let mut base = format!(
                "{}-{}-{}",
                peer_name(peer),
                intent.source.namespace,
                intent.source.name
            );
            if let Some(target) = &intent.target_name {
                base.push_str(&format!("-to-{target}"));
            }
            base
        }
    };
    let name = unique_name(&base, taken);
    notes.push(
        "CopyRules are trusted: creating one needs the copyrator-admin ClusterRole".to_string(),
    );
    let kind = intent.source.kind;
    if !kind.is_consentable() {
        notes.push(format!(
            "copyrator copies {} only when run with --copy-kinds naming it (chart value \
             copyKinds); until then it refuses this CopyRule",
            kind.name()
        ));
    }
    Some(CopyRule::new(
        &name,
        CopyRuleSpec {
            api_version: (!kind.group().is_empty()).then(|| kind.api_version()),
            kind: kind.as_str().into(),
            source_namespace: intent.source.namespace.clone(),
            sources: None,
            drop_expired: false,
            template: None,
            create_once: intent.create_once,
            clusters: None,
            source_name: Some(intent.source.name.clone()),
            source_selector: None,
            namespace_selector: targets.namespace_selector,
            namespaces: targets.namespaces,
            exclude_namespaces: targets.exclude_namespaces,
            target_name: intent.target_name.clone(),
            deletion_policy: DeletionPolicy::Delete,
            conflict_policy: ConflictPolicy::Skip,
            image_pull_secret: false,
            read_only: None,
            keys: None,
            target: None,
        },
    ))
}

/// A CopyRule name (a DNS subdomain of at most 253 characters) from `base`, unique in
/// `taken`.
fn unique_name(base: &str, taken: &mut BTreeSet<String>) -> String {
    let mut name: String = base
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.len() > 240 {
        let digest = Sha256::digest(base.as_bytes());
        let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        name.truncate(230);
        name = format!("{}-{hex}", name.trim_end_matches(['-', '.']));
    }
    let mut candidate = name.clone();
    let mut n = 2;
    while !taken.insert(candidate.clone()) {
        candidate = format!("{name}-{n}");
        n += 1;
    }
    candidate
}

pub fn peer_name(peer: Peer) -> &'static str {
    match peer {
        Peer::Reflector => "reflector",
        Peer::Replicator => "replicator",
        Peer::Kubed => "kubed",
        Peer::Kyverno => "kyverno",
        Peer::TrustManager => "trust-manager",
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    use super::*;
    use crate::{
        migrate::peers::Targets,
        model::Kind,
        tenancy::{NamespacePatterns, TrustPolicy},
    };

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new(Kind::Secret, "platform", name)
    }

    fn intent(name: &str, targets: Targets, target_name: Option<&str>) -> Intent {
        Intent {
            rule_name: None,
            create_once: false,
            source: key(name),
            target_name: target_name.map(String::from),
            targets,
            notes: Vec::new(),
        }
    }

    fn names(list: &[&str]) -> Targets {
        Targets {
            names: list.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn selector(s: &str) -> Targets {
        Targets {
            selector: Some(s.into()),
            ..Default::default()
        }
    }

    fn policy(trusted: &str) -> Policy {
        Policy {
            excluded_namespaces: ["kube-system".to_string()].into(),
            trust: TrustPolicy {
                trusted_namespaces: NamespacePatterns::parse(trusted).unwrap(),
            },
            ..Default::default()
        }
    }

    fn build_with(intents: Vec<Intent>, policy: &Policy, copy_rules: bool) -> Config {
        build(
            Translation {
                intents,
                ..Default::default()
            },
            &BTreeMap::new(),
            &Options {
                peer: Peer::Reflector,
                policy,
                copy_rules,
                trust_sources: false,
            },
        )
    }

    /// One line per item: `inline <source> <selector> <names>` or `copyrule <name>`.
    fn summary(config: &Config) -> Vec<String> {
        config
            .items
            .iter()
            .map(|i| match &i.change {
                Change::Inline {
                    source,
                    selector,
                    namespaces,
                } => format!(
                    "inline {} {} {}",
                    source.name,
                    selector.as_deref().unwrap_or("-"),
                    namespaces.iter().cloned().collect::<Vec<_>>().join(",")
                ),
                Change::CopyRule(r) => format!("copyrule {}", r.metadata.name.as_deref().unwrap()),
            })
            .collect()
    }

    #[test]
    fn inline_where_it_can_say_it_copy_rules_where_it_cannot() {
        let trusted = policy("platform");
        let config = build_with(
            vec![
                intent("a", names(&["team-a", "kube-system"]), None),
                intent("a", selector("env=prod"), None),
                intent("a", selector("env=dev"), None),
                intent(
                    "b",
                    Targets {
                        every: true,
                        ..Default::default()
                    },
                    None,
                ),
                intent("c", names(&["team-b"]), Some("renamed")),
                intent("d", names(&[]), None),
            ],
            &trusted,
            false,
        );
        assert_eq!(
            summary(&config),
            [
                "copyrule reflector-platform-a",
                "inline a env=prod team-a",
                "copyrule reflector-platform-b",
                "copyrule reflector-platform-c-to-renamed",
            ]
        );
        let inline = &config.items[1];
        assert!(
            inline
                .notes
                .iter()
                .any(|n| n.contains("kube-system left out")),
            "{:?}",
            inline.notes
        );
        assert!(config.skipped.iter().any(|s| s.contains("platform/d")));
        let Change::CopyRule(every) = &config.items[2].change else {
            panic!()
        };
        assert_eq!(
            every.spec.namespace_selector,
            Some(LabelSelector::default()),
            "every namespace is the empty selector"
        );
        let Change::CopyRule(renamed) = &config.items[3].change else {
            panic!()
        };
        assert_eq!(renamed.spec.target_name.as_deref(), Some("renamed"));
        assert_eq!(renamed.spec.namespaces, ["team-b"]);
    }

    #[test]
    fn untrusted_inline_rules_say_what_they_need() {
        let config = build_with(
            vec![intent("a", names(&["team-a"]), None)],
            &policy(""),
            false,
        );
        let note = config.items[0].notes.join("\n");
        assert!(
            note.contains("--trusted-namespaces")
                && note.contains("copyrator.io/accept-from=platform"),
            "{note}"
        );
        let trusted = build_with(
            vec![intent("a", names(&["team-a"]), None)],
            &policy("*"),
            false,
        );
        assert!(trusted.items[0].notes.is_empty());
    }

    #[test]
    fn copy_rules_of_untrusted_sources_are_commented_out_unless_trusted_sources() {
        let every = Targets {
            every: true,
            ..Default::default()
        };
        let intents = || {
            vec![
                intent("a", every.clone(), None),
                intent("b", names(&["team-b"]), Some("renamed")),
            ]
        };
        let config = build_with(intents(), &policy("team-*"), false);
        assert!(config.items.iter().all(|i| i.commented_out));
        let note = config.items[0].notes.join("\n");
        assert!(
            note.contains("NOT IN FORCE")
                && note.contains("platform is not a trusted namespace")
                && note.contains("into every namespace without their consent")
                && note.contains("CopyRule precedence"),
            "{note}"
        );
        assert!(
            config.items[1]
                .notes
                .join("\n")
                .contains("into team-b without"),
            "{:?}",
            config.items[1].notes
        );

        let asked = build(
            Translation {
                intents: intents(),
                ..Default::default()
            },
            &BTreeMap::new(),
            &Options {
                peer: Peer::Reflector,
                policy: &policy("team-*"),
                copy_rules: false,
                trust_sources: true,
            },
        );
        assert!(asked.items.iter().all(|i| !i.commented_out));
        assert!(
            asked.items[0]
                .notes
                .iter()
                .any(|n| n.contains("because of --trust-sources")),
            "{:?}",
            asked.items[0].notes
        );

        let trusted = build_with(intents(), &policy("platform"), false);
        assert!(trusted.items.iter().all(|i| !i.commented_out));
        assert!(
            !trusted.items[0]
                .notes
                .iter()
                .any(|n| n.contains("not a trusted namespace"))
        );
    }

    #[test]
    fn copy_rules_when_asked_or_when_the_source_is_configured_already() {
        let config = build_with(
            vec![intent("a", names(&["team-a"]), None)],
            &policy("*"),
            true,
        );
        assert_eq!(summary(&config), ["copyrule reflector-platform-a"]);
        assert_eq!(config.items[0].rule_mark(), "copyrule/reflector-platform-a");

        let mut configured = SourceInfo {
            key: key("a"),
            uid: String::new(),
            resource_version: String::new(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            created: 0,
            deleting: false,
            dropped: None,
        };
        configured
            .annotations
            .insert(marks::NAMESPACES_ANNOTATION.into(), "x".into());
        let config = build(
            Translation {
                intents: vec![intent("a", names(&["team-a"]), None)],
                ..Default::default()
            },
            &[(key("a"), configured)].into(),
            &Options {
                peer: Peer::Kubed,
                policy: &policy("*"),
                copy_rules: false,
                trust_sources: false,
            },
        );
        assert_eq!(summary(&config), ["copyrule kubed-platform-a"]);
    }

    #[test]
    fn rule_names_are_valid_and_unique() {
        let mut taken = BTreeSet::new();
        assert_eq!(unique_name("a-b", &mut taken), "a-b");
        assert_eq!(unique_name("a-b", &mut taken), "a-b-2");
        let long = unique_name(&"x".repeat(400), &mut taken);
        assert!(
            long.len() <= 253 && crate::selector::is_dns_subdomain(&long),
            "{long}"
        );
    }
}
