//! What a job knows about the cluster ([`World`]), and who wants which target ([`Claims`]).
//! The rules are derived from the sources and CopyRules the world holds; every change goes
//! through a method that keeps them current, in batches.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

pub use crate::rules::SourceCaps;
use crate::{
    copyrule::CopyRule,
    model::{Kind, NamespaceInfo, ObjectKey, SourceInfo},
    rules::{Rule, RuleId, RuleSet, Selection},
    tenancy::{NamespacePatterns, Tier, TrustPolicy},
};

use super::ManagedCopy;

/// Cluster-wide settings every plan obeys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Global exclusions (`--exclude-namespaces`).
    pub excluded_namespaces: BTreeSet<String>,
    /// Which namespaces' inline rules are trusted (`--trusted-namespaces`, SPEC §9).
    pub trust: TrustPolicy,
    /// How much of the sources of untrusted namespaces copyrator acts on (SPEC §9.7).
    pub caps: SourceCaps,
    /// The roles RBAC copies may bind and the Roles they may be (SPEC §9.10).
    pub grants: crate::grants::GrantPolicy,
    /// copyrator's own namespace: it receives copies of Secrets and ConfigMaps only (SPEC
    /// §9.10), so no copied policy, quota or RBAC object can cut it off or act on its identity.
    pub own_namespace: Option<String>,
    /// The default CAs a bundle's `{defaultCAs: true}` source gives (SPEC §3.2, Bundles): read
    /// by the shell, once, at start. `None`: copyrator has none (tests, and the commands that
    /// plan no bundle); such a source then gives nothing.
    pub default_cas: Option<std::sync::Arc<crate::bundle::DefaultCas>>,
}

impl Policy {
    /// The certificates the default CAs give a bundle that takes them (`bundle.default_cas`).
    pub fn default_certificates(
        &self,
        bundle: &crate::bundle::Bundle,
    ) -> &[crate::bundle::Certificate] {
        match &self.default_cas {
            Some(cas) if bundle.default_cas => &cas.certificates,
            _ => &[],
        }
    }

    /// Whether `namespace` is excluded from copying altogether.
    pub fn is_excluded(&self, namespace: &str) -> bool {
        self.excluded_namespaces.contains(namespace)
    }

    /// Whether copies of `kind` never go into `namespace`: it is excluded, or it is
    /// copyrator's own and the kind is not data (SPEC §9.10).
    pub fn is_excluded_for(&self, namespace: &str, kind: Kind) -> bool {
        self.is_excluded(namespace)
            || (!kind.is_consentable() && self.own_namespace.as_deref() == Some(namespace))
    }

    /// What copyrator keeps of `source` while it holds many ([`SourceInfo::kept`]): the
    /// metadata cap applies to the sources of untrusted namespaces (SPEC §9.7).
    pub fn keep_source(&self, source: SourceInfo) -> SourceInfo {
        let cap =
            (!self.trust.is_trusted(&source.key.namespace)).then_some(self.caps.metadata_bytes);
        source.kept(cap)
    }
}

/// Sources, namespaces and copies a job failed to read, and sources a cap holds back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unreadable {
    pub sources: BTreeSet<ObjectKey>,
    pub namespaces: BTreeSet<String>,
    /// Copies whose content could not be read (judged by their marks meanwhile).
    pub copies: BTreeSet<ObjectKey>,
    /// Sources of untrusted namespaces over a cap (SPEC §9.7): like unreadable ones, their
    /// copies are neither written nor deleted, but nothing reads them again (derived from the
    /// rules, [`RuleSet::capped_sources`]).
    pub capped: BTreeSet<ObjectKey>,
    /// NamespacedCopyRules over their namespace's count cap: their copies are neither written
    /// nor deleted ([`RuleSet::capped_rules`]).
    pub capped_rules: BTreeSet<RuleId>,
    /// Links whose hub was never read, or is invalid: their copies stay as they are (SPEC
    /// §14.3).
    pub hubs: BTreeSet<String>,
    /// Whether the member's HubLinks are known ([`crate::hub::Hubs::links_known`]): until
    /// then no hub copy is written or deleted, since any link may exist.
    pub hub_links_known: bool,
}

impl Unreadable {
    /// Nothing failed to be read (capped sources are no failure).
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty() && self.namespaces.is_empty() && self.copies.is_empty()
    }

    /// Whether targets depending on `source` are left as they are.
    pub fn holds(&self, source: &ObjectKey) -> bool {
        self.sources.contains(source)
            || self.capped.contains(source)
            || source
                .hub_link()
                .is_some_and(|link| !self.hub_links_known || self.hubs.contains(link))
    }
}

/// What a job knows about the cluster, restricted to what the job loaded.
#[derive(Clone, Debug, Default)]
pub struct World {
    /// Derived from `sources` and `copy_rules`, rebuilt whenever either changes.
    rules: RuleSet,
    sources: BTreeMap<ObjectKey, SourceInfo>,
    copy_rules: Vec<CopyRule>,
    namespaces: BTreeMap<String, NamespaceInfo>,
    policy: Policy,
    unreadable: Unreadable,
    /// The member's hubs as a job read them (SPEC §14): their placed rules join the rules,
    /// their sources the sources.
    hubs: Arc<crate::hub::Hubs>,
    /// The placed rules of the hubs known, as member rules.
    hub_rules: Vec<Rule>,
    /// The settings of the links known, by name (their ceilings).
    hub_links: BTreeMap<String, Arc<crate::hub::LinkSettings>>,
}

impl World {
    /// An empty world under `policy`.
    pub fn new(policy: Policy) -> Self {
        Self {
            policy,
            ..Default::default()
        }
    }

    /// A world holding `sources` and `copy_rules`, its rules built once.
    pub fn from_parts(
        policy: Policy,
        sources: impl IntoIterator<Item = SourceInfo>,
        copy_rules: Vec<CopyRule>,
    ) -> Self {
        let mut world = Self {
            sources: sources.into_iter().map(|s| (s.key.clone(), s)).collect(),
            copy_rules,
            policy,
            ..Default::default()
        };
        world.rebuild_rules();
        world
    }

    pub fn rules(&self) -> &RuleSet {
        &self.rules
    }

    pub fn sources(&self) -> &BTreeMap<ObjectKey, SourceInfo> {
        &self.sources
    }

    pub fn copy_rules(&self) -> &[CopyRule] {
        &self.copy_rules
    }

    pub fn namespaces(&self) -> &BTreeMap<String, NamespaceInfo> {
        &self.namespaces
    }

    /// Namespaces can change freely: no derived state depends on them.
    pub fn namespaces_mut(&mut self) -> &mut BTreeMap<String, NamespaceInfo> {
        &mut self.namespaces
    }

    pub fn insert_namespaces(&mut self, namespaces: impl IntoIterator<Item = NamespaceInfo>) {
        // In bulk: a resync inserts every namespace, and one-by-one inserts in key order
        // leave the tree's nodes half empty.
        let added: BTreeMap<String, NamespaceInfo> = namespaces
            .into_iter()
            .map(|ns| (ns.name.clone(), ns))
            .collect();
        merge_into(&mut self.namespaces, added);
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// What this job could not read: targets that depend on it are skipped (never written,
    /// never deleted), and the reads are retried by follow-up jobs.
    pub fn unreadable(&self) -> &Unreadable {
        &self.unreadable
    }

    pub fn unreadable_mut(&mut self) -> &mut Unreadable {
        &mut self.unreadable
    }

    /// Records what was just read about sources (`None`: gone); the rules are rebuilt once.
    pub fn set_sources(&mut self, read: impl IntoIterator<Item = (ObjectKey, Option<SourceInfo>)>) {
        for (key, info) in read {
            match info {
                Some(s) => self.sources.insert(key, s),
                None => self.sources.remove(&key),
            };
        }
        self.rebuild_rules();
    }

    /// Changes the sources in place (tests and fixtures); the rules are rebuilt once.
    pub fn edit_sources(&mut self, edit: impl FnOnce(&mut BTreeMap<ObjectKey, SourceInfo>)) {
        edit(&mut self.sources);
        self.rebuild_rules();
    }

    /// Replaces the CopyRules; the rules are rebuilt once.
    pub fn set_copy_rules(&mut self, copy_rules: Vec<CopyRule>) {
        self.copy_rules = copy_rules;
        self.rebuild_rules();
    }

    /// Replaces one CopyRule by the version just read (`None`: gone).
    pub fn set_copy_rule(&mut self, name: &str, rule: Option<CopyRule>) {
        self.copy_rules
            .retain(|r| r.metadata.name.as_deref() != Some(name));
        self.copy_rules.extend(rule);
        self.rebuild_rules();
    }

    /// The member's hubs as read now (SPEC §14): what they place joins the rules, their
    /// sources as last read join the sources, and what is not known holds its copies.
    pub fn set_hubs(&mut self, hubs: Arc<crate::hub::Hubs>) {
        use crate::hub::HubSource;
        self.sources.retain(|k, _| !k.is_hub());
        self.unreadable.sources.retain(|k| !k.is_hub());
        self.unreadable.hubs.clear();
        self.unreadable.hub_links_known = hubs.links_known;
        self.hub_rules.clear();
        self.hub_links.clear();
        for link in &hubs.links {
            let (Ok(settings), Some(placement)) = (&link.settings, &link.placement) else {
                self.unreadable.hubs.insert(link.name.clone());
                continue;
            };
            self.hub_links
                .insert(link.name.clone(), Arc::clone(settings));
            self.hub_rules.extend(placement.rules.iter().cloned());
            for key in placement.sources() {
                match link.sources.get(&key) {
                    Some(HubSource::Present(info)) => {
                        self.sources.insert(key, info.clone());
                    }
                    Some(HubSource::Gone) => {}
                    Some(HubSource::Pending | HubSource::Unreadable(_)) | None => {
                        self.unreadable.sources.insert(key);
                    }
                }
            }
        }
        self.hubs = hubs;
        self.rebuild_rules();
    }

    /// The member's hubs as this world was given them.
    pub fn hubs(&self) -> &crate::hub::Hubs {
        &self.hubs
    }

    /// Whether the ceiling of `link` lets `ns` receive its copies (SPEC §14.2): the link is
    /// known, its namespace selector matches, and `ns` is not copyrator's own.
    pub fn hub_admits(&self, link: &str, ns: &NamespaceInfo) -> bool {
        self.hub_links
            .get(link)
            .is_some_and(|l| l.namespace_selector.matches(&ns.labels))
            && self.policy.own_namespace.as_deref() != Some(ns.name.as_str())
    }

    fn rebuild_rules(&mut self) {
        self.rules = RuleSet::build_capped(
            self.sources.values(),
            &self.copy_rules,
            &self.policy.trust,
            &self.policy.caps,
        );
        if !self.hub_rules.is_empty() {
            self.rules.rules.extend(self.hub_rules.iter().cloned());
            self.rules
                .rules
                .sort_by(|a, b| (a.tier, a.created, &a.id).cmp(&(b.tier, b.created, &b.id)));
        }
        // What a cap holds back is neither written nor deleted: its copies stay as they are.
        self.unreadable.capped = self.rules.capped_sources.keys().cloned().collect();
        self.unreadable.capped_rules = self.rules.capped_rules.keys().cloned().collect();
    }

    /// Whether `rule` gets copies in `ns`, and why (SPEC §2.3, §9.2): the rule's own clauses
    /// first, then the global exclusions, the namespace's state and its consent. The one
    /// place this is decided: [`World::claims`] and the explanations both ask it.
    pub fn targeting(&self, rule: &Rule, ns: &NamespaceInfo) -> Targeting {
        let selection = rule.selection(ns);
        if !selection.selects() {
            Targeting::NotSelected(selection)
        } else if self.policy.is_excluded_for(&ns.name, rule.target_kind())
            || (rule.powers().own_namespace == crate::powers::OwnNamespace::Nothing
                && self.policy.own_namespace.as_deref() == Some(ns.name.as_str()))
        {
            // A team's or a hub's rule never writes into copyrator's own namespace (SPEC §9.11).
            Targeting::ExcludedGlobally
        } else if let Some(link) = rule.id.hub_link()
            && !self.hub_admits(link, ns)
        {
            Targeting::BeyondCeiling
        } else if ns.terminating {
            Targeting::Terminating
        } else if rule.consented_by(ns) {
            Targeting::Wanted(selection)
        } else {
            Targeting::Refused(selection)
        }
    }

    /// Whether a bundle source in namespace `from` gives its certificates to the copy in
    /// `target_namespace` (SPEC §3.2, §9): `from` is trusted, the target namespace accepts
    /// copies from it, or it is the target's own. The one place this is decided: the planner
    /// and the explanations both ask it.
    pub fn bundle_admits(&self, target_namespace: &str, from: &str) -> bool {
        self.policy.trust.is_trusted(from)
            || from == target_namespace
            || self
                .namespaces
                .get(target_namespace)
                .is_some_and(|ns| crate::tenancy::accepts_from(ns, from))
    }

    /// Every target some rule wants, with the claims on it in precedence order (the rules
    /// are sorted by tier, age and id), split by whether the namespace consents.
    pub fn claims(&self) -> Claims<'_> {
        self.claims_where(None)
    }

    /// The claims on `targets` only, the same as [`World::claims`] holds for them. Rules
    /// whose sources give none of the targets' names, and namespaces holding none of them,
    /// are not looked at: planning a few targets costs them, not every rule × namespace.
    pub fn claims_on(&self, targets: &BTreeSet<&ObjectKey>) -> Claims<'_> {
        self.claims_where(Some(targets))
    }

    /// The claims on targets in `namespaces` only, the same as [`World::claims`] holds for
    /// them: a full resync plans a chunk of namespaces at a time (SPEC §5).
    pub fn claims_in(&self, namespaces: &BTreeSet<String>) -> Claims<'_> {
        let namespaces = namespaces
            .iter()
            .filter_map(|ns| self.namespaces.get(ns))
            .collect();
        self.claims_over(namespaces, None)
    }

    fn claims_where(&self, only: Option<&BTreeSet<&ObjectKey>>) -> Claims<'_> {
        let namespaces: Vec<&NamespaceInfo> = match only {
            None => self.namespaces.values().collect(),
            Some(ts) => ts
                .iter()
                .map(|t| t.namespace.as_str())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .filter_map(|ns| self.namespaces.get(ns))
                .collect(),
        };
        self.claims_over(namespaces, only)
    }

    /// The claims of every rule on targets in `namespaces` (and among `only`, when given).
    ///
    /// The inline rule of an untrusted namespace is judged only against the namespaces that
    /// accept copies from that namespace (SPEC §9.2): the others cannot take its copies, so
    /// they are not looked at, and a tenant's rules cost what the namespaces that consented to
    /// it hold, not what the cluster holds (a thousand match-all sources of one tenant are not
    /// a thousand claims on every namespace).
    fn claims_over(
        &self,
        namespaces: Vec<&NamespaceInfo>,
        only: Option<&BTreeSet<&ObjectKey>>,
    ) -> Claims<'_> {
        let names: Option<BTreeSet<(Kind, &str)>> =
            only.map(|ts| ts.iter().map(|t| (t.kind, t.name.as_str())).collect());
        // The namespaces that accept copies from somewhere, with their patterns parsed once.
        let accepting: Vec<(&NamespaceInfo, NamespacePatterns)> = namespaces
            .iter()
            .filter_map(|ns| {
                let list = ns.accept_from.as_deref()?;
                let patterns = NamespacePatterns::parse_lenient(list).0;
                (!patterns.is_empty()).then_some((*ns, patterns))
            })
            .collect();
        let mut out = Claims::default();
        for rule in &self.rules.rules {
            // A source a cap holds back makes no claim (its copies stay as they are). A
            // bundle's and a template's copies have one stand-in source, the rule itself
            // (SPEC §3.2, §3.3).
            let sources: Vec<&SourceInfo> = match rule.owner() {
                Some(owner) => vec![owner],
                None => self
                    .sources
                    .values()
                    .filter(|s| !s.deleting && !self.unreadable.capped.contains(&s.key))
                    .filter(|s| rule.applies_to(s))
                    .collect(),
            };
            let sources: Vec<&SourceInfo> = sources
                .into_iter()
                .filter(|s| {
                    names.as_ref().is_none_or(|names| {
                        names.contains(&(rule.target_kind(), rule.target_name(&s.key.name)))
                    })
                })
                .collect();
            if sources.is_empty() {
                continue;
            }
            let candidates: Box<dyn Iterator<Item = &NamespaceInfo>> =
                if rule.tier == Tier::ConsentedInline {
                    Box::new(
                        accepting
                            .iter()
                            .filter(|(_, p)| p.matches(&rule.source_namespace))
                            .map(|(ns, _)| *ns),
                    )
                } else {
                    Box::new(namespaces.iter().copied())
                };
            for ns in candidates {
                if !matches!(self.targeting(rule, ns), Targeting::Wanted(_)) {
                    continue;
                }
                for source in &sources {
                    let target = ObjectKey::new(
                        rule.target_kind(),
                        &ns.name,
                        rule.target_name(&source.key.name),
                    );
                    if only.is_some_and(|ts| !ts.contains(&target)) {
                        continue;
                    }
                    out.wanted
                        .entry(target)
                        .or_default()
                        .push(Claim { rule, source });
                }
            }
        }
        out
    }

    /// What the inline rules of untrusted namespaces (of `source` only, when given) asked
    /// for and do not get, one summary per rule and source (SPEC §9.5): how many of the
    /// namespaces it names do not take its copies (missing ones included: a refusal says
    /// nothing about whether a namespace exists), and whether its selector finds no
    /// namespace that consents. Namespaces its selector matches without consent are never
    /// looked at. Meaningful for a world holding every namespace the rule names or selects
    /// (a source's job, a resync), not for a namespace's job.
    pub fn refusals(&self, source: Option<&ObjectKey>) -> Vec<Refusal<'_>> {
        let mut out = Vec::new();
        for rule in &self.rules.rules {
            if rule.tier != Tier::ConsentedInline {
                continue;
            }
            for src in self.sources.values() {
                // A hub's source has no Event here to say it (SPEC §14.2).
                if src.deleting
                    || src.key.is_hub()
                    || self.unreadable.capped.contains(&src.key)
                    || !rule.applies_to(src)
                    || source.is_some_and(|key| key != &src.key)
                {
                    continue;
                }
                let wanted =
                    |ns: &NamespaceInfo| matches!(self.targeting(rule, ns), Targeting::Wanted(_));
                let named = rule
                    .namespaces
                    .iter()
                    .filter(|name| match self.namespaces.get(*name) {
                        None => true,
                        Some(ns) => matches!(self.targeting(rule, ns), Targeting::Refused(_)),
                    })
                    .count();
                let unmatched_selector = rule.namespace_selector.is_some()
                    && !self
                        .namespaces
                        .values()
                        .filter(|ns| ns.accept_from.is_some())
                        .any(|ns| rule.selection(ns) == Selection::SelectorMatches && wanted(ns));
                if named > 0 || unmatched_selector {
                    out.push(Refusal {
                        claim: Claim { rule, source: src },
                        named,
                        unmatched_selector,
                    });
                }
            }
        }
        out
    }
}

/// The namespaces among `namespaces` where `rules` may have copies: selected by a rule's
/// clauses, not excluded, and consenting where the rule needs consent (SPEC §9.2). What a
/// change of the rules' sources can change there and nowhere else (the Pod gate forgets only
/// these, SPEC §10.2): a source whose rules target nothing (no namespace consents to a tenant)
/// reaches nothing. Terminating namespaces count: their copies are being taken away.
pub fn reach<'a>(
    policy: &Policy,
    rules: &[Rule],
    namespaces: impl IntoIterator<Item = &'a NamespaceInfo>,
) -> Vec<String> {
    namespaces
        .into_iter()
        .filter(|ns| {
            rules.iter().any(|r| {
                !policy.is_excluded_for(&ns.name, r.target_kind())
                    && r.consented_by(ns)
                    && r.selection(ns).selects()
            })
        })
        .map(|ns| ns.name.clone())
        .collect()
}

/// What an untrusted inline rule asked for and does not get (see [`World::refusals`]).
#[derive(Clone, Copy, Debug)]
pub struct Refusal<'w> {
    pub claim: Claim<'w>,
    /// Namespaces the rule names that do not take its copies (missing ones included).
    pub named: usize,
    /// The rule has a selector, and no namespace that consents matches it.
    pub unmatched_selector: bool,
}

/// Whether a rule gets copies in a namespace, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Targeting {
    /// The rule selects the namespace and may write there.
    Wanted(Selection),
    /// The rule selects the namespace, but it is the inline rule of an untrusted namespace
    /// and the namespace did not consent (SPEC §9.2): never written, reported.
    Refused(Selection),
    /// The rule's own clauses leave the namespace out (not selected, excluded by the rule,
    /// the source's namespace).
    NotSelected(Selection),
    /// Selected, but excluded by `--exclude-namespaces`.
    ExcludedGlobally,
    /// A hub's rule selects the namespace, but its link's ceiling does not let it receive
    /// (SPEC §14.2).
    BeyondCeiling,
    /// Selected, but the namespace is being deleted: nothing may be created in it.
    Terminating,
}

/// Every target some rule wants, with the claims on it in precedence order. What untrusted
/// rules ask for and do not get is not here, target by target: [`World::refusals`] sums it up.
#[derive(Debug, Default)]
pub struct Claims<'w> {
    /// Targets whose namespace accepts the claim.
    pub wanted: BTreeMap<ObjectKey, Vec<Claim<'w>>>,
}

/// One rule wanting one source copied to one target.
#[derive(Clone, Copy, Debug)]
pub struct Claim<'w> {
    pub rule: &'w Rule,
    pub source: &'w SourceInfo,
}

impl Claim<'_> {
    pub fn to_ref(&self) -> ClaimRef {
        ClaimRef::new(self.rule.id.clone(), self.source.key.clone())
    }

    /// Whether `copy` is this claim's: same rule, same source, same source object (uid). A
    /// copy of a deleted and recreated source is taken over like any other copy (SPEC §9.3).
    pub fn owns(&self, copy: &ManagedCopy) -> bool {
        copy.rule == self.rule.id
            && copy.source == self.source.key
            && copy.source_uid == self.source.uid
    }
}

/// An owned [`Claim`], carried by actions for reporting. Shared, not copied: a full resync
/// plans one action per copy, most of them by the same few claims, so an action holds a
/// pointer where it held four strings (SPEC §5).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimRef(Arc<ClaimParts>);

/// What a [`ClaimRef`] names: the rule and the source.
#[derive(Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimParts {
    pub rule: RuleId,
    pub source: ObjectKey,
}

impl ClaimRef {
    pub fn new(rule: RuleId, source: ObjectKey) -> Self {
        Self(Arc::new(ClaimParts { rule, source }))
    }
}

impl std::ops::Deref for ClaimRef {
    type Target = ClaimParts;

    fn deref(&self) -> &ClaimParts {
        &self.0
    }
}

impl std::fmt::Debug for ClaimRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimRef")
            .field("rule", &self.rule)
            .field("source", &self.source)
            .finish()
    }
}

/// Adds `added` to `map`, replacing entries of the same keys. `BTreeMap::append` rebuilds the
/// whole tree (linear in both maps): right for a bulk load into an empty or small map, but a
/// caller adding namespaces a few at a time to a large map would pay the map's size each time
/// (quadratic). Small batches are inserted one by one.
pub fn merge_into<K: Ord, V>(map: &mut BTreeMap<K, V>, mut added: BTreeMap<K, V>) {
    if added.len() < map.len() / 8 {
        map.extend(added);
    } else {
        map.append(&mut added);
    }
}

#[cfg(test)]
mod merge_tests {
    use super::*;

    #[test]
    fn merge_into_adds_and_replaces_in_either_branch() {
        let mut map: BTreeMap<u32, &str> = (0..100).map(|i| (i, "old")).collect();
        // Small batch (inserted one by one): replaces 5, adds 200.
        merge_into(&mut map, BTreeMap::from([(5, "new"), (200, "new")]));
        // Large batch (appended): replaces 0..50, adds 300..400.
        merge_into(
            &mut map,
            (0..50).chain(300..400).map(|i| (i, "new")).collect(),
        );
        assert_eq!(map.len(), 201);
        assert_eq!(map[&5], "new");
        assert_eq!(map[&60], "old");
        assert_eq!(map[&200], "new");
        assert_eq!(map[&399], "new");
        assert_eq!(map.values().filter(|v| **v == "new").count(), 151);
        let mut empty = BTreeMap::new();
        merge_into(&mut empty, map.clone());
        assert_eq!(empty, map);
    }
}
