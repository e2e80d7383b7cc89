//! The rules in force (SPEC §9.3 precedence order), built from the labelled sources and the
//! CopyRules, and the caps that bound what an untrusted namespace's sources make copyrator do
//! (SPEC §9.7).

use std::collections::BTreeMap;

use crate::{
    copyrule::CopyRule,
    model::{ObjectKey, SourceInfo},
    tenancy::TrustPolicy,
};

use super::{Overreach, Rule, RuleError, RuleId};

/// How much of the sources of an untrusted namespace copyrator acts on (SPEC §9.7): what one
/// tenant can make it hold and do is bounded by the tenant, not multiplied by the cluster.
/// Sources of trusted namespaces are the platform's own and are not capped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceCaps {
    /// Opted-in sources per namespace (`--max-sources-per-namespace`): the oldest act, the
    /// rest are held back.
    pub per_namespace: usize,
    /// Bytes of the labels and annotations copyrator keeps of one source
    /// (`--max-source-metadata-bytes`, [`SourceInfo::kept`]).
    pub metadata_bytes: usize,
}

impl Default for SourceCaps {
    fn default() -> Self {
        Self {
            per_namespace: 100,
            metadata_bytes: 16 * 1024,
        }
    }
}

/// Why a source of an untrusted namespace is held back (SPEC §9.7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Capped {
    /// Its labels and annotations take this many bytes, over the cap.
    MetadataBytes(usize),
    /// Its namespace holds more opted-in sources than the cap, and older ones act.
    PerNamespace,
}

impl std::fmt::Display for Capped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Capped::MetadataBytes(bytes) => write!(
                f,
                "its labels and annotations take {bytes} bytes, more than copyrator acts on for a source of a namespace it does not trust (--max-source-metadata-bytes)"
            ),
            Capped::PerNamespace => f.write_str(
                "its namespace holds more opted-in sources than copyrator acts on for a namespace it does not trust (--max-sources-per-namespace); older ones are copied",
            ),
        }
    }
}

/// Every rule in force, in precedence order (tier, then older first, then by id), plus the
/// sources whose inline configuration is invalid and the sources a cap holds back.
#[derive(Clone, Debug, Default)]
pub struct RuleSet {
    pub rules: Vec<Rule>,
    pub invalid_sources: BTreeMap<ObjectKey, RuleError>,
    pub invalid_copy_rules: BTreeMap<String, RuleError>,
    /// Sources of untrusted namespaces over a cap: no rule applies to them, and their copies
    /// stay as they are (neither written nor deleted).
    pub capped_sources: BTreeMap<ObjectKey, Capped>,
    /// NamespacedCopyRules of untrusted namespaces over the count cap, which counts them with
    /// their namespace's sources: not in force, their copies stay as they are.
    pub capped_rules: BTreeMap<RuleId, Capped>,
    /// Rules in force held back from something they asked beyond their author's powers
    /// (SPEC §9.11): `conflictPolicy: Overwrite` of a rule that is not a CopyRule.
    pub held: BTreeMap<RuleId, Vec<Overreach>>,
}

/// `rule` held to its author's powers (SPEC §9.11): what it asks beyond them that leaves it
/// nothing to copy makes it invalid, naming the first such field.
fn held(rule: Rule) -> Result<(Rule, Vec<Overreach>), RuleError> {
    let author = rule.author();
    rule.hold_to_powers().map_err(|asked| {
        let first = asked
            .iter()
            .find(|o| !o.is_held())
            .expect("hold_to_powers fails only on what it cannot hold");
        RuleError::new(first.field(), first.message(author))
    })
}

/// What the count cap of an untrusted namespace counts (SPEC §9.7): its opted-in sources and
/// its NamespacedCopyRules, the oldest first.
enum Counted<'a> {
    Source(&'a SourceInfo),
    Rule(&'a CopyRule),
}

impl Counted<'_> {
    /// Oldest first; then by name, for a stable order.
    fn order(&self) -> (i64, String) {
        match self {
            Counted::Source(s) => (s.created, s.key.to_string()),
            Counted::Rule(r) => (
                super::copy_rule::created(r),
                r.metadata.name.clone().unwrap_or_default(),
            ),
        }
    }
}

impl RuleSet {
    /// Builds the rule set from the labelled sources' metadata and the CopyRules; `trust`
    /// decides the tier of each inline rule.
    pub fn build<'a>(
        labelled_sources: impl IntoIterator<Item = &'a SourceInfo>,
        copy_rules: impl IntoIterator<Item = &'a CopyRule>,
        trust: &TrustPolicy,
    ) -> Self {
        Self::build_capped(labelled_sources, copy_rules, trust, &SourceCaps::default())
    }

    /// [`RuleSet::build`], the sources of untrusted namespaces over `caps` held back: no
    /// rule, inline or CopyRule, applies to them.
    pub fn build_capped<'a>(
        labelled_sources: impl IntoIterator<Item = &'a SourceInfo>,
        copy_rules: impl IntoIterator<Item = &'a CopyRule>,
        trust: &TrustPolicy,
        caps: &SourceCaps,
    ) -> Self {
        let mut set = RuleSet::default();
        // What each untrusted namespace asks for, oldest first: the first ones act.
        let mut untrusted: BTreeMap<&str, Vec<Counted>> = BTreeMap::new();
        let mut acting = Vec::new();
        // A hub's sources (SPEC §14) make no rule of their own here.
        for source in labelled_sources.into_iter().filter(|s| !s.key.is_hub()) {
            if trust.is_trusted(&source.key.namespace) {
                acting.push(source);
            } else {
                untrusted
                    .entry(source.key.namespace.as_str())
                    .or_default()
                    .push(Counted::Source(source));
            }
        }
        let mut copy_rules_acting = Vec::new();
        for cr in copy_rules {
            if cr.metadata.deletion_timestamp.is_some() {
                continue;
            }
            match cr.metadata.namespace.as_deref() {
                Some(ns) if !trust.is_trusted(ns) => {
                    untrusted.entry(ns).or_default().push(Counted::Rule(cr));
                }
                _ => copy_rules_acting.push(cr),
            }
        }
        for (_, mut counted) in untrusted {
            counted.sort_by_key(Counted::order);
            let mut held = 0;
            for entry in counted {
                let source = match entry {
                    Counted::Rule(cr) if held >= caps.per_namespace => {
                        if let Ok(rule) = Rule::from_copy_rule(cr) {
                            set.capped_rules.insert(rule.id, Capped::PerNamespace);
                        }
                        continue;
                    }
                    Counted::Rule(cr) => {
                        held += 1;
                        copy_rules_acting.push(cr);
                        continue;
                    }
                    Counted::Source(source) => source,
                };
                let bytes = source.dropped.unwrap_or_else(|| source.metadata_bytes());
                if bytes > caps.metadata_bytes {
                    set.capped_sources
                        .insert(source.key.clone(), Capped::MetadataBytes(bytes));
                } else if source.deleting || source.is_copy() {
                    acting.push(source);
                } else if held >= caps.per_namespace {
                    set.capped_sources
                        .insert(source.key.clone(), Capped::PerNamespace);
                } else {
                    held += 1;
                    acting.push(source);
                }
            }
        }
        for source in acting {
            if source.deleting {
                continue;
            }
            match Rule::inline_tiered(source, trust).and_then(|r| r.map(held).transpose()) {
                Ok(Some((rule, asked))) if rule.has_targets() => set.push(rule, asked),
                Ok(_) => {}
                Err(e) => {
                    set.invalid_sources.insert(source.key.clone(), e);
                }
            }
        }
        for cr in copy_rules_acting {
            match Rule::from_copy_rule(cr)
                .and_then(|r| r.tiered(trust))
                .and_then(held)
            {
                // Placed on member clusters (SPEC §14.1): it copies nothing here.
                Ok(_) if cr.spec.clusters.is_some() => {}
                Ok((rule, asked)) => set.push(rule, asked),
                Err(e) => {
                    set.invalid_copy_rules
                        .insert(cr.metadata.name.clone().unwrap_or_default(), e);
                }
            }
        }
        set.rules
            .sort_by(|a, b| (a.tier, a.created, &a.id).cmp(&(b.tier, b.created, &b.id)));
        set
    }

    fn push(&mut self, rule: Rule, asked: Vec<Overreach>) {
        if !asked.is_empty() {
            self.held.insert(rule.id.clone(), asked);
        }
        self.rules.push(rule);
    }

    /// The rules that apply to `source`.
    pub fn for_source<'a>(&'a self, source: &'a SourceInfo) -> impl Iterator<Item = &'a Rule> + 'a {
        self.rules.iter().filter(move |r| r.applies_to(source))
    }

    pub fn get(&self, id: &RuleId) -> Option<&Rule> {
        self.rules.iter().find(|r| &r.id == id)
    }

    pub fn copy_rule(&self, name: &str) -> Option<&Rule> {
        self.rules
            .iter()
            .find(|r| r.id.copy_rule_name() == Some(name))
    }
}
