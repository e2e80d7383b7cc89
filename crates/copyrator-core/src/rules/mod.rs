//! Copy rules in one form, whatever declared them: the inline rule of an annotated source
//! (SPEC §2.1, `inline`), a `CopyRule` resource (SPEC §2.2, `copy_rule`), or a CopyRule
//! bundling several sources (SPEC §3.2, `bundle`); and the set of rules in force (`set`).
//! Parsing and validation live here, so the admission webhooks and the workers agree on what
//! is valid.

mod bundle_rule;
mod copy_rule;
mod inline;
mod placement;
mod set;
mod template_rule;

pub use copy_rule::copy_rule_kind;
// An invalid rule's error and the check of a copy's key are defined below the rules, where
// the transforms, which check their own fields, reach them too.
pub use crate::copyrule::RuleError;
pub(crate) use crate::transform::check_key;
pub use inline::ignored_annotations;
pub use placement::check_placement;
pub use set::{Capped, RuleSet, SourceCaps};

use std::collections::BTreeSet;

use crate::{
    bundle::Bundle,
    copyrule::{ConflictPolicy, DeletionPolicy},
    model::{Kind, NamespaceInfo, ObjectKey, SourceInfo},
    selector::Selector,
    tenancy::{self, Tier},
    transform::{self, Transform},
};

/// Which rule a copy belongs to; rendered into the `copyrator.io/rule` annotation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RuleId {
    /// The inline rule carried by the source itself.
    Inline(ObjectKey),
    /// A CopyRule, by name.
    CopyRule(String),
    /// A hub's CopyRule placed on this cluster, by link and name (SPEC §14).
    Hub { link: String, rule: String },
    /// A NamespacedCopyRule, as `<namespace>/<name>` (`crate::namespaced`).
    Namespaced(String),
}

impl RuleId {
    /// The value of the `copyrator.io/rule` annotation on copies.
    pub fn mark(&self) -> String {
        match self {
            RuleId::Inline(_) => "inline".to_string(),
            RuleId::CopyRule(name) => format!("copyrule/{name}"),
            RuleId::Hub { link, rule } => format!("{link}/copyrule/{rule}"),
            RuleId::Namespaced(name) => format!("{}/{name}", crate::marks::NAMESPACED_RULE_MARK),
        }
    }

    /// The name a rule resource of this cluster is known by (jobs, the world): a CopyRule's
    /// own, or a NamespacedCopyRule's `<namespace>/<name>`.
    pub fn copy_rule_name(&self) -> Option<&str> {
        match self {
            RuleId::CopyRule(name) | RuleId::Namespaced(name) => Some(name),
            RuleId::Inline(_) | RuleId::Hub { .. } => None,
        }
    }

    /// The rule resource copyrator knows as `name`: a NamespacedCopyRule when it is
    /// `<namespace>/<name>`, else a CopyRule.
    pub fn of_rule_name(name: &str) -> RuleId {
        match crate::namespaced::split_rule_name(name) {
            Some(_) => RuleId::Namespaced(name.to_string()),
            None => RuleId::CopyRule(name.to_string()),
        }
    }

    /// The namespace and name of a NamespacedCopyRule.
    pub fn namespaced(&self) -> Option<(&str, &str)> {
        match self {
            RuleId::Namespaced(name) => crate::namespaced::split_rule_name(name),
            _ => None,
        }
    }

    /// The link of a hub's rule.
    pub fn hub_link(&self) -> Option<&str> {
        match self {
            RuleId::Hub { link, .. } => Some(link),
            _ => None,
        }
    }
}

impl std::fmt::Display for RuleId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RuleId::Inline(src) => write!(f, "inline rule of {src}"),
            RuleId::CopyRule(name) => write!(f, "CopyRule {name}"),
            RuleId::Hub { link, rule } => write!(f, "CopyRule {rule} of hub {link}"),
            RuleId::Namespaced(name) => write!(f, "NamespacedCopyRule {name}"),
        }
    }
}

/// Which objects of the source namespace a rule copies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceMatch {
    Name(String),
    Selector(Selector),
    /// A bundle (SPEC §3.2): the certificates of several sources, of any namespace, combined
    /// into one key; none of them is a source of the rule's copies, the rule itself is.
    Bundle(Box<Bundle>),
    /// A template (SPEC §3.3): the rule holds its copies' content; it is their source.
    Template(Box<crate::template::Template>),
}

/// How a rule's own namespace clauses (explicit names, selector, exclusions) judge one
/// namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Selection {
    /// Named in the rule's explicit namespaces.
    Listed,
    /// The rule's namespace selector matches the namespace's labels.
    SelectorMatches,
    /// The source's own namespace: never a target (no copy loops).
    SourceNamespace,
    /// Named in the rule's `excludeNamespaces`.
    Excluded,
    /// Neither named nor matched by the selector.
    NotSelected,
}

impl Selection {
    /// Whether the rule wants a copy there (before global policy, namespace state, consent).
    pub fn selects(self) -> bool {
        matches!(self, Selection::Listed | Selection::SelectorMatches)
    }
}

/// A validated copy rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub id: RuleId,
    pub kind: Kind,
    pub source_namespace: String,
    pub sources: SourceMatch,
    /// `None`: no selector, only the explicit namespaces.
    pub namespace_selector: Option<Selector>,
    pub namespaces: BTreeSet<String>,
    pub exclude_namespaces: BTreeSet<String>,
    pub target_name: Option<String>,
    pub deletion_policy: DeletionPolicy,
    pub conflict_policy: ConflictPolicy,
    /// Creation time (seconds): when two rules of one tier want the same target, the older
    /// one wins.
    pub created: i64,
    /// Precedence and trust (SPEC §9): CopyRule, trusted inline or consented inline (a
    /// NamespacedCopyRule's is its namespace's inline tier).
    pub tier: Tier,
    /// The copies are image pull secrets, injected into Pods of target namespaces (SPEC §10).
    pub image_pull_secret: bool,
    /// The copies are read-only: edits and deletions by anyone but copyrator are denied at
    /// admission (SPEC §4 item 11).
    pub read_only: bool,
    /// What the copies carry of the source's payload, and as what kind (SPEC §3.2).
    pub transform: Transform,
    /// Create-once copies (SPEC §3.4): made where missing, then their namespace's.
    pub create_once: bool,
    /// With `create_once`: the namespaces a copy was created in, as the CopyRule's status
    /// records them (never made there again).
    pub created_in: BTreeSet<String>,
    /// The namespaces the CopyRule's status records it holds its read-only copy in (SPEC §4
    /// item 11): an unmanaged object at the copy's name there is reclaimed, when the rule
    /// [`Rule::holds_its_names`].
    pub read_only_in: BTreeSet<String>,
    /// What the rule asked beyond its author's powers and is held back from (SPEC §9.11):
    /// `conflictPolicy: Overwrite` of a rule that is not a CopyRule.
    pub held: Vec<Overreach>,
}

impl Rule {
    /// Whether the names of this rule's copies are its own once held (SPEC §4 item 11): a
    /// CopyRule's read-only copies, one per namespace (a `sourceSelector`'s names come and go
    /// with its sources), never create-once. Only a CopyRule's: another rule's status, if it
    /// has one, is not an administrator's word.
    pub fn holds_its_names(&self) -> bool {
        self.read_only
            && !self.create_once
            && matches!(self.id, RuleId::CopyRule(_))
            && !matches!(self.sources, SourceMatch::Selector(_))
    }
}

impl Rule {
    /// Whether `source` is one of this rule's sources. A copy never is (SPEC §9.6), whatever
    /// its name or the labels it carried over from its own source.
    pub fn selects_source(&self, source: &SourceInfo) -> bool {
        !source.is_copy()
            && source.key.kind == self.kind
            && source.key.namespace == self.source_namespace
            && match &self.sources {
                SourceMatch::Name(name) => &source.key.name == name,
                SourceMatch::Selector(sel) => sel.matches(&source.labels),
                SourceMatch::Bundle(_) | SourceMatch::Template(_) => false,
            }
    }

    /// The rule's bundle, when it is one.
    pub fn bundle(&self) -> Option<&Bundle> {
        match &self.sources {
            SourceMatch::Bundle(b) => Some(b),
            _ => None,
        }
    }

    /// The rule's template, when it is one.
    pub fn template(&self) -> Option<&crate::template::Template> {
        match &self.sources {
            SourceMatch::Template(t) => Some(t),
            _ => None,
        }
    }

    /// What stands for the source of the copies when the rule itself is their source (a
    /// bundle, a template): the one source its claims name.
    pub fn owner(&self) -> Option<&SourceInfo> {
        match &self.sources {
            SourceMatch::Bundle(b) => Some(&b.owner),
            SourceMatch::Template(t) => Some(&t.owner),
            _ => None,
        }
    }

    /// The Secrets its truststores' passwords are read from (`passwordSecretRef`, SPEC §3.2),
    /// whether it is a bundle or copies its sources' keys.
    pub fn password_refs(&self) -> impl Iterator<Item = &transform::PasswordRef> {
        let formats = match &self.sources {
            SourceMatch::Bundle(b) => b.formats.as_ref(),
            _ => self.transform.formats.as_ref(),
        };
        formats.into_iter().flat_map(|f| f.password_refs())
    }

    /// Whether `key` is a Secret a store's password is read from.
    pub fn reads_password_of(&self, key: &ObjectKey) -> bool {
        key.kind == Kind::Secret
            && self
                .password_refs()
                .any(|r| r.namespace == key.namespace && r.name == key.name)
    }

    /// Whether a change of `key`, which is none of the sources the rule copies, can change its
    /// copies: a bundle's source, or a Secret a store's password is read from. Its rule's job
    /// then plans them again (SPEC §3.2).
    pub fn follows(&self, key: &ObjectKey) -> bool {
        self.bundle().is_some_and(|b| b.follows(key)) || self.reads_password_of(key)
    }

    /// Whether `source` is copied by this rule: an inline rule belongs to exactly its own
    /// source; a CopyRule to every source it selects.
    pub fn applies_to(&self, source: &SourceInfo) -> bool {
        match &self.id {
            RuleId::Inline(key) => key == &source.key && !source.is_copy(),
            RuleId::CopyRule(_) | RuleId::Hub { .. } | RuleId::Namespaced(_) => {
                self.selects_source(source)
            }
        }
    }

    /// Whether the rule wants copies in `ns` (before global exclusions and namespace state).
    /// The source namespace is never a target: no copy loops.
    pub fn targets_namespace(&self, ns: &NamespaceInfo) -> bool {
        self.selection(ns).selects()
    }

    /// How the rule's own namespace clauses judge `ns`, and why (before global exclusions,
    /// namespace state and consent, which [`crate::plan::World::targeting`] adds).
    pub fn selection(&self, ns: &NamespaceInfo) -> Selection {
        if ns.name == self.source_namespace {
            Selection::SourceNamespace
        } else if self.exclude_namespaces.contains(&ns.name) {
            Selection::Excluded
        } else if self.namespaces.contains(&ns.name) {
            Selection::Listed
        } else if self
            .namespace_selector
            .as_ref()
            .is_some_and(|s| s.matches(&ns.labels))
        {
            Selection::SelectorMatches
        } else {
            Selection::NotSelected
        }
    }

    /// Whether `ns` consents to this rule's copies: always for trusted rules; for the inline
    /// rule of an untrusted namespace only if `ns` accepts copies from that namespace.
    pub fn consented_by(&self, ns: &NamespaceInfo) -> bool {
        self.tier != Tier::ConsentedInline || tenancy::accepts_from(ns, &self.source_namespace)
    }

    /// Whether the rule can target anything at all.
    pub fn has_targets(&self) -> bool {
        self.namespace_selector.is_some() || !self.namespaces.is_empty()
    }

    /// The kind of the rule's copies: its sources' kind, unless `target.kind` says otherwise.
    pub fn target_kind(&self) -> Kind {
        self.transform.target_kind(self.kind)
    }

    /// Name of the copy of `source_name`.
    pub fn target_name<'a>(&'a self, source_name: &'a str) -> &'a str {
        self.target_name.as_deref().unwrap_or(source_name)
    }

    /// Human-readable source description (`ns/name` or `ns/{selector}`), for status and events.
    pub fn source_description(&self) -> String {
        match &self.sources {
            SourceMatch::Name(name) => format!("{}/{}", self.source_namespace, name),
            SourceMatch::Selector(sel) => format!("{}/{{{}}}", self.source_namespace, sel),
            SourceMatch::Bundle(b) => {
                let n = b.sources.len();
                let objects = format!("{n} source{}", if n == 1 { "" } else { "s" });
                match (n, b.default_cas) {
                    (0, true) => "bundle of the default CAs".to_string(),
                    (_, true) => format!("bundle of the default CAs and {objects}"),
                    (_, false) => format!("bundle of {objects}"),
                }
            }
            SourceMatch::Template(_) => "template".to_string(),
        }
    }
}

/// The namespaces a create-once CopyRule's status records it created a copy in (SPEC §3.4).
pub(crate) fn created_in(rule: &crate::copyrule::CopyRule) -> BTreeSet<String> {
    if !rule.spec.create_once {
        return BTreeSet::new();
    }
    rule.status
        .as_ref()
        .map(|s| s.created_in.iter().cloned().collect())
        .unwrap_or_default()
}

/// The namespaces a CopyRule's status records it holds its read-only copy in (SPEC §4 item
/// 11), when recorded for its current spec (`observedGeneration`): a changed spec may name
/// another copy, whose name the rule never held.
pub fn recorded_read_only_in(rule: &crate::copyrule::CopyRule) -> BTreeSet<String> {
    match &rule.status {
        Some(s)
            if rule.metadata.namespace.is_none()
                && s.observed_generation.is_some()
                && s.observed_generation == rule.metadata.generation =>
        {
            s.read_only_in.iter().cloned().collect()
        }
        _ => BTreeSet::new(),
    }
}

/// What a rule asked for beyond its author's powers, and was held back from (what each
/// author may ask, and what it is told when it asks more: `crate::powers`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Overreach {
    /// `conflictPolicy: Overwrite`: held to `Skip`.
    Overwrite,
    /// Create-once copies: the rule copies nothing.
    CreateOnce,
    /// A kind its author may not copy: the rule copies nothing.
    Kind(Kind),
    /// A keystore password read from a Secret: the rule copies nothing.
    PasswordRef,
}

impl Overreach {
    /// The field of the rule that asked for it (a NamespacedCopyRule's or a CopyRule's).
    pub fn field(&self) -> &'static str {
        match self {
            Overreach::Overwrite => "spec.conflictPolicy",
            Overreach::CreateOnce => "spec.createOnce",
            Overreach::Kind(_) => "spec.kind",
            Overreach::PasswordRef => "spec.target.formats",
        }
    }

    /// Whether the rule still copies, held back from this (`Overwrite` held to `Skip`), or
    /// copies nothing.
    pub fn is_held(&self) -> bool {
        matches!(self, Overreach::Overwrite)
    }
}

impl Rule {
    /// Validates a CopyRule and converts it. Errors name the offending field.
    pub fn from_copy_rule(rule: &crate::copyrule::CopyRule) -> Result<Rule, RuleError> {
        let name = rule.metadata.name.clone().unwrap_or_default();
        let spec = &rule.spec;
        if rule.metadata.namespace.is_some()
            && (spec.sources.is_some()
                || spec.template.is_some()
                || spec.clusters.is_some()
                || spec.create_once)
        {
            // What reaches beyond its namespace, or needs a status, is a CopyRule's only.
            return Err(RuleError::new(
                "spec",
                "a NamespacedCopyRule has no sources, template, clusters or createOnce",
            ));
        }
        check_placement(spec)?;
        if spec.sources.is_some() {
            return bundle_rule::bundle_rule(rule, name);
        }
        if spec.template.is_some() {
            return template_rule::template_rule(rule, name);
        }
        Rule::one_source_rule(rule, name)
    }
}

/// Most keys one rule may list.
pub const MAX_KEYS: usize = 256;

/// Most explicit namespaces one rule may list.
pub const MAX_NAMESPACES: usize = 1000;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod namespaced_tests;
