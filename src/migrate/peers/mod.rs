//! What a peer's configuration asks for, in copyrator's terms (pure): each source's targets
//! ([`Intent`]), whole CopyRules where the peer's object already is one ([`PeerRule`]: a
//! trust-manager Bundle), and which objects are the peer's copies of which source
//! ([`PeerCopy`]). One module per peer; the regular-expression namespace lists two of them
//! share are expanded here.

mod kubed;
mod kyverno;
mod reflector;
pub use reflector::NO_NAMESPACES;
mod replicator;
mod trust_manager;

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::{
    cli::Peer,
    copyrule::CopyRule,
    model::{NamespaceInfo, ObjectKey, SourceInfo},
    selector::{self, Selector},
};

/// What a peer does for one source, as copyrator would: copy it into these namespaces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Intent {
    pub source: ObjectKey,
    /// The copies' name when it is not the source's (a pull-style copy named otherwise).
    pub target_name: Option<String>,
    pub targets: Targets,
    /// What the reader of the output must know: lists expanded, limits, differences.
    pub notes: Vec<String>,
    /// The CopyRule's name when the peer's configuration names the intent (a Kyverno
    /// policy's rule); otherwise it is named after the peer and the source.
    pub rule_name: Option<String>,
    /// Copies made once and then left to their namespace (Kyverno's `synchronize: false`,
    /// SPEC §3.4): only a CopyRule says it.
    pub create_once: bool,
}

/// Where an intent's copies go: every namespace, or those the selector matches plus the
/// names; never the excluded ones.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Targets {
    pub every: bool,
    /// A label selector in the string syntax, validated by copyrator's parser.
    pub selector: Option<String>,
    pub names: BTreeSet<String>,
    /// Namespaces that never get a copy, whatever else selects them (a CopyRule's
    /// `excludeNamespaces`).
    pub exclude: BTreeSet<String>,
}

impl Targets {
    pub fn is_empty(&self) -> bool {
        !self.every && self.selector.is_none() && self.names.is_empty()
    }

    /// A CopyRule's `namespaceSelector`, `namespaces` and `excludeNamespaces` for these
    /// targets, or why a CopyRule cannot say them.
    pub fn rule_fields(&self) -> Result<RuleTargets, String> {
        let namespace_selector = if self.every {
            Some(LabelSelector::default())
        } else {
            match self.selector.as_deref().map(Selector::parse) {
                None => None,
                Some(Ok(sel)) => Some(sel.to_label_selector().ok_or_else(|| {
                    format!(
                        "the selector \"{sel}\" uses > or <, which a CopyRule's \
                         namespaceSelector cannot say"
                    )
                })?),
                Some(Err(e)) => return Err(format!("invalid selector: {e}")),
            }
        };
        Ok(RuleTargets {
            namespace_selector,
            namespaces: if self.every {
                Vec::new()
            } else {
                self.names.iter().cloned().collect()
            },
            exclude_namespaces: self.exclude.iter().cloned().collect(),
        })
    }

    /// Whether `ns` is a target today (before copyrator's own exclusions).
    pub fn matches(&self, ns: &NamespaceInfo) -> bool {
        let selected = self.every
            || self.names.contains(&ns.name)
            || self
                .selector
                .as_deref()
                .and_then(|s| Selector::parse(s).ok())
                .is_some_and(|s| s.matches(&ns.labels));
        selected && !self.exclude.contains(&ns.name)
    }
}

/// [`Targets`] as a CopyRule's fields say them.
pub struct RuleTargets {
    pub namespace_selector: Option<LabelSelector>,
    pub namespaces: Vec<String>,
    pub exclude_namespaces: Vec<String>,
}

/// An object a peer made (or keeps in sync) from `source`, as its own annotations say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerCopy {
    pub copy: ObjectKey,
    pub source: ObjectKey,
}

/// A CopyRule a peer's object says whole (a trust-manager Bundle: several sources, one
/// target key), printed as it is, in force: the peer's object was the cluster
/// administrators' own.
#[derive(Clone, Debug)]
pub struct PeerRule {
    pub rule: CopyRule,
    /// The namespace its sources are read from (for `migrate -n` and the trust note).
    pub source_namespace: String,
    /// What the reader of the output must know: what was left out, and why.
    pub notes: Vec<String>,
    /// Manifests to apply with it: the ConfigMap holding a Bundle's inline certificates.
    pub objects: Vec<serde_json::Value>,
}

/// A peer's configuration over a set of objects.
#[derive(Clone, Debug, Default)]
pub struct Translation {
    pub intents: Vec<Intent>,
    pub rules: Vec<PeerRule>,
    pub copies: Vec<PeerCopy>,
    /// Objects with the peer's annotations that give nothing to migrate, and why.
    pub skipped: Vec<Skipped>,
}

/// Something not migrated, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// The namespace of the source it is about (for `migrate -n`).
    pub source_namespace: String,
    pub note: String,
}

/// What a peer is configured with: annotations on `objects`, or `documents`, the peer's own
/// objects as read (Kyverno's ClusterPolicies, trust-manager's Bundles).
pub struct Configured<'a> {
    pub objects: &'a [SourceInfo],
    pub documents: &'a [serde_json::Value],
    /// Today's namespaces (for the regular-expression and wildcard lists).
    pub namespaces: &'a [NamespaceInfo],
    /// trust-manager's trust namespace, where its Bundles' and ClusterBundles' sources are.
    pub trust_namespace: &'a str,
}

/// Translates `peer`'s configuration.
pub fn translate(peer: Peer, read: &Configured<'_>) -> Translation {
    match peer {
        Peer::Reflector => reflector::translate(read.objects, read.namespaces),
        Peer::Replicator => replicator::translate(read.objects, read.namespaces),
        Peer::Kubed => kubed::translate(read.objects),
        Peer::Kyverno => kyverno::translate(read.documents, read.namespaces),
        Peer::TrustManager => trust_manager::translate(read.documents, read.trust_namespace),
    }
}

/// The source `object` is a copy of, by `peer`'s annotations or labels on it. Kyverno's
/// copies name the policy and rule that made them, trust-manager's their Bundle, not the
/// source.
pub fn source_named_by(peer: Peer, object: &SourceInfo) -> Option<ObjectKey> {
    match peer {
        Peer::Reflector => reflector::source_named_by(object),
        Peer::Replicator => replicator::source_named_by(object),
        Peer::Kubed => kubed::source_named_by(object),
        Peer::Kyverno | Peer::TrustManager => None,
    }
}

/// Whether `object` carries any of `peer`'s keys (Kyverno's and trust-manager's
/// configuration is not on the objects: none does).
pub fn is_peers(peer: Peer, object: &SourceInfo) -> bool {
    let prefix = match peer {
        Peer::Reflector => "reflector.v1.k8s.emberstack.com/",
        Peer::Replicator => "replicator.v1.mittwald.de/",
        Peer::Kubed => "kubed.appscode.com/",
        Peer::Kyverno | Peer::TrustManager => return false,
    };
    object
        .annotations
        .keys()
        .chain(object.labels.keys())
        .any(|k| k.starts_with(prefix))
}

/// An explicit `null` (an empty YAML key) reads as the default, as the API server reads it.
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Default + serde::Deserialize<'de>,
{
    Ok(<Option<T> as serde::Deserialize>::deserialize(d)?.unwrap_or_default())
}

/// `namespace/name` of an object of `kind`, as the peers write references.
fn parse_reference(kind: crate::model::Kind, value: &str) -> Option<ObjectKey> {
    let (ns, name) = value.trim().split_once('/')?;
    let key = ObjectKey::new(kind, ns, name);
    key.is_valid().then_some(key)
}

fn is_true(v: Option<&String>) -> bool {
    v.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// A comma-separated list of namespace names and regular expressions (matched against the
/// whole name, as reflector and replicator do), resolved against today's namespaces.
#[derive(Clone, Debug, Default)]
struct PatternList {
    names: BTreeSet<String>,
    /// (pattern, compiled) of the entries that are regular expressions.
    patterns: Vec<(String, regex::Regex)>,
    invalid: Vec<String>,
}

impl PatternList {
    fn parse(list: &str) -> Self {
        let mut out = Self::default();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            if selector::is_dns_label(entry) {
                out.names.insert(entry.to_string());
            } else {
                match regex::Regex::new(&format!("^(?:{entry})$")) {
                    Ok(re) => out.patterns.push((entry.to_string(), re)),
                    Err(_) => out.invalid.push(entry.to_string()),
                }
            }
        }
        out
    }

    fn is_empty(&self) -> bool {
        self.names.is_empty() && self.patterns.is_empty() && self.invalid.is_empty()
    }

    fn matches(&self, namespace: &str) -> bool {
        self.names.contains(namespace) || self.patterns.iter().any(|(_, re)| re.is_match(namespace))
    }

    /// The names, plus today's namespaces each pattern matches; a note per pattern and per
    /// invalid entry.
    fn expand(
        &self,
        what: &str,
        namespaces: &[NamespaceInfo],
        notes: &mut Vec<String>,
    ) -> BTreeSet<String> {
        let mut names = self.names.clone();
        for (pattern, re) in &self.patterns {
            let matched: Vec<&str> = namespaces
                .iter()
                .map(|n| n.name.as_str())
                .filter(|n| re.is_match(n))
                .collect();
            notes.push(expanded_note(what, pattern, &matched));
            names.extend(matched.into_iter().map(String::from));
        }
        for entry in &self.invalid {
            notes.push(format!(
                "{what}: {entry:?} is neither a namespace name nor a valid regular expression; ignored"
            ));
        }
        names
    }
}

fn expanded_note(what: &str, pattern: &str, matched: &[&str]) -> String {
    format!(
        "{what}: the regular expression `{pattern}` is expanded to the namespaces that match it \
         today ({}); namespaces created later get no copy: label them and use a selector instead",
        if matched.is_empty() {
            "none".to_string()
        } else {
            matched.join(", ")
        }
    )
}

/// Checks a peer's label selector with copyrator's parser; the note says why it is not used.
fn checked_selector(what: &str, raw: &str, notes: &mut Vec<String>) -> Option<String> {
    match Selector::parse(raw) {
        Ok(sel) => Some(sel.to_string()),
        Err(e) => {
            notes.push(format!(
                "{what}: {raw:?} is not a valid label selector ({e}); ignored"
            ));
            None
        }
    }
}

/// Merges intents for the same source and copy name (several pulls, or push and pull).
/// Two different selectors cannot be OR'ed in one rule: those stay apart.
fn merge(intents: Vec<Intent>) -> Vec<Intent> {
    let mut out: Vec<Intent> = Vec::new();
    for intent in intents {
        let same = out.iter_mut().find(|i| {
            i.source == intent.source
                && i.target_name == intent.target_name
                && i.rule_name == intent.rule_name
                && i.create_once == intent.create_once
                && i.targets.exclude == intent.targets.exclude
                && (i.targets.selector.is_none()
                    || intent.targets.selector.is_none()
                    || i.targets.selector == intent.targets.selector)
        });
        match same {
            Some(into) => {
                into.targets.every |= intent.targets.every;
                into.targets.names.extend(intent.targets.names);
                if into.targets.selector.is_none() {
                    into.targets.selector = intent.targets.selector;
                }
                into.notes.extend(intent.notes);
            }
            None => out.push(intent),
        }
    }
    out
}

#[cfg(test)]
mod tests;
