//! Why a copy is or is not where someone expects it (`copyrator explain`, SPEC §11): the
//! planner's own decisions, laid out per rule, source and namespace. Nothing is decided here
//! that the planner does not decide: whether a rule targets a namespace comes from
//! [`World::targeting`], what happens to a wanted target from [`plan`], on the same inputs a
//! job plans from.

use std::collections::{BTreeMap, HashMap};

use super::{Action, ClaimRef, ConflictReason, Contents, Existing, Scope, Targeting, World, plan};
use crate::{
    copyrule::DeletionPolicy,
    model::{Kind, NamespaceInfo, ObjectKey, SourceInfo},
    rules::{Rule, RuleId, Selection},
    tenancy::Tier,
    transform::Transform,
};
pub use bundles::{
    BundleReads, BundleSources, Bundles, DefaultCasFinding, EntryFinding, ObjectFinding,
};
use findings::{hub_copies, invalid, judge, missing_namespaces, no_source, not_opted_in, orphan};
pub use verdict::{CopyState, Planned, Verdict};

/// What is being explained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Focus {
    /// Every rule that could put a copy into this namespace.
    Namespace(String),
    /// Every rule of this source, and where its copies go.
    Source(ObjectKey),
    /// One rule: every namespace it selects, and the copies it made that it no longer wants
    /// (`copyrator plan` of a rule's new version).
    Rule(RuleId),
}

impl Focus {
    /// Whether findings are given per namespace the rule selects, the others counted.
    fn counts_unselected(&self) -> bool {
        !matches!(self, Focus::Namespace(_))
    }
}

/// The findings about a [`Focus`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Explanation {
    pub findings: Vec<Finding>,
    /// For a source: per rule, how many namespaces its clauses leave out (the source's own and
    /// the unselected ones); they get no finding each.
    pub not_selected: BTreeMap<RuleId, usize>,
}

/// One rule (and source) judged against one target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub rule: RuleId,
    /// `None` for a rule that is not in force (invalid, not opted in, or gone).
    pub tier: Option<Tier>,
    /// `None` when the rule selects no source.
    pub source: Option<ObjectKey>,
    /// The copy's key; `None` when there is no one target (an invalid rule, a rule that
    /// selects no source by name).
    pub target: Option<ObjectKey>,
    pub verdict: Verdict,
    pub copy: CopyState,
    /// The verdict in words, naming the clause that decided it.
    pub message: String,
    /// What the copy holds of its source, when not all of it as it is (SPEC §3.2).
    pub shape: Option<Shape>,
    /// A bundle's copy: its sources, and which give it certificates in this namespace.
    pub bundle: Option<BundleSources>,
}

/// What a rule's copies carry of their source's payload, and as what (SPEC §3.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    pub source_kind: Kind,
    pub transform: Transform,
    /// Keys the rule asks for that the source lacks (known when its payload was read).
    pub missing: Vec<String>,
}

impl Shape {
    /// The shape of `rule`'s copies; `None` when they are their source's payload as it is.
    pub fn of(rule: &Rule, missing: Option<&Vec<String>>) -> Option<Self> {
        (!rule.transform.is_identity()).then(|| Shape {
            source_kind: rule.kind,
            transform: rule.transform.clone(),
            missing: missing.cloned().unwrap_or_default(),
        })
    }

    /// In words, of the copies of `source`: `keys ca.crt, tls.crt as server.pem of Secret
    /// platform/ca, as a ConfigMap; the source lacks tls.crt`.
    pub fn describe(&self, source: &ObjectKey) -> String {
        let t = &self.transform;
        let of = format!("{} {}", source.kind, source.namespaced_name());
        let mut out = match &t.keys {
            Some(_) => format!("keys {} of {of}", t.describe_keys()),
            None => format!("every key of {of}"),
        };
        if let Some(kind) = t.kind {
            out.push_str(&format!(", as a {kind}"));
        }
        if let Some(type_) = &t.type_ {
            out.push_str(&format!(", of type {type_}"));
        }
        if let Some(formats) = &t.formats {
            out.push_str(&format!(", with truststores {}", formats.describe()));
        }
        if !self.missing.is_empty() {
            out.push_str(&format!("; the source lacks {}", self.missing.join(", ")));
        }
        out
    }
}

impl Finding {
    /// Whether the rule gets its copy there (wanted, consented, no conflict).
    pub fn applies(&self) -> bool {
        matches!(self.verdict, Verdict::Applies { .. })
    }

    /// What copyrator's next sync does about this target for this rule.
    pub fn action(&self) -> Planned {
        match &self.verdict {
            Verdict::Applies { action, .. } => *action,
            Verdict::NoRuleWants(DeletionPolicy::Delete) => Planned::Delete,
            Verdict::NoRuleWants(DeletionPolicy::Retain) => Planned::Retain,
            _ => Planned::Nothing,
        }
    }
}

/// The planner's actions about the focus, indexed for lookup by claim and by target.
pub(super) struct Decided {
    pub(super) by_claim: HashMap<(ObjectKey, ClaimRef), Action>,
    pub(super) by_target: HashMap<ObjectKey, Vec<Action>>,
    pub(super) orphans: Vec<Action>,
    /// Keys each claim's source lacks.
    pub(super) missing: HashMap<ClaimRef, Vec<String>>,
}

/// Explains `focus` from the same inputs a job plans from. `unlabelled`: sources that carry
/// inline-rule annotations without the opt-in label (see [`crate::rules::ignored_annotations`]).
/// `bundles`: the sources of the bundles explained, as read per entry (the planner's
/// `contents.bundles` are the same, flattened); a bundle not there is shown unread.
pub fn explain(
    world: &World,
    focus: &Focus,
    existing: &BTreeMap<ObjectKey, Existing>,
    contents: &Contents,
    unlabelled: &[SourceInfo],
    bundles: &Bundles,
) -> Explanation {
    let scope = match focus {
        Focus::Namespace(ns) => Scope::Namespace(ns.clone()),
        Focus::Source(key) => Scope::Source(key.clone()),
        Focus::Rule(id) => Scope::Rule(id.clone()),
    };
    let mut actions = plan(world, &scope, existing, contents);
    // A source's bundles: their copies name the rule, not the source (SPEC §3.2, Bundles).
    if let Focus::Source(key) = focus {
        for rule in &world.rules().rules {
            if let Some(bundle) = rule.bundle()
                && reads_source(world, bundle, key)
            {
                let scope = Scope::Source(bundle.owner.key.clone());
                actions.extend(plan(world, &scope, existing, contents));
            }
        }
    }
    let planned = index(actions);
    let mut out = Explanation::default();
    let namespaces: Vec<&NamespaceInfo> = match focus {
        Focus::Namespace(ns) => world.namespaces().get(ns).into_iter().collect(),
        Focus::Source(_) | Focus::Rule(_) => world.namespaces().values().collect(),
    };
    for rule in &world.rules().rules {
        if let Focus::Rule(id) = focus
            && &rule.id != id
        {
            continue;
        }
        let sources: Vec<&SourceInfo> = match (rule.bundle(), focus) {
            // A template's copies have one source, the rule's stand-in.
            _ if rule.template().is_some() => match focus {
                Focus::Namespace(_) | Focus::Rule(_) => rule.owner().into_iter().collect(),
                Focus::Source(_) => Vec::new(),
            },
            // A bundle's copies have one source, the rule's stand-in.
            (Some(bundle), Focus::Namespace(_) | Focus::Rule(_)) => vec![&bundle.owner],
            (Some(bundle), Focus::Source(key)) if reads_source(world, bundle, key) => {
                vec![&bundle.owner]
            }
            (Some(_), Focus::Source(_)) => Vec::new(),
            (None, _) => world
                .sources()
                .values()
                .filter(|s| !s.deleting && rule.applies_to(s))
                .filter(|s| match focus {
                    Focus::Source(key) => &s.key == key,
                    Focus::Namespace(_) | Focus::Rule(_) => true,
                })
                .collect(),
        };
        if sources.is_empty() {
            match focus {
                Focus::Namespace(_) => out.findings.extend(
                    namespaces
                        .iter()
                        .map(|ns| no_source(world, rule, ns, existing)),
                ),
                // Where its copies would go once a source exists; the rest counted.
                Focus::Rule(_) => {
                    for ns in &namespaces {
                        match world.targeting(rule, ns) {
                            Targeting::NotSelected(sel) if sel != Selection::Excluded => {
                                *out.not_selected.entry(rule.id.clone()).or_default() += 1;
                            }
                            _ => out.findings.push(no_source(world, rule, ns, existing)),
                        }
                    }
                }
                Focus::Source(_) => {}
            }
            continue;
        }
        for source in sources {
            for ns in &namespaces {
                let target = ObjectKey::new(
                    rule.target_kind(),
                    &ns.name,
                    rule.target_name(&source.key.name),
                );
                let targeting = world.targeting(rule, ns);
                if let Targeting::NotSelected(sel) = targeting
                    && focus.counts_unselected()
                    && sel != Selection::Excluded
                {
                    *out.not_selected.entry(rule.id.clone()).or_default() += 1;
                    continue;
                }
                let mut finding = judge(rule, source, ns, target, targeting, &planned, existing);
                // Where the rule wants its copy: elsewhere its sources make nothing (and a
                // namespace's explanation reads only the bundles that target it).
                if let (Some(bundle), Targeting::Wanted(_)) = (rule.bundle(), targeting) {
                    let only = match focus {
                        Focus::Source(key) => Some(key),
                        Focus::Namespace(_) | Focus::Rule(_) => None,
                    };
                    let shown = bundles::sources_in(
                        world,
                        bundle,
                        &ns.name,
                        bundles.get(&source.key),
                        only,
                    );
                    finding.message = format!("{}; {}", finding.message, shown.summary());
                    finding.bundle = Some(shown);
                }
                out.findings.push(finding);
            }
            if focus.counts_unselected() {
                out.findings.extend(missing_namespaces(world, rule, source));
            }
        }
    }
    out.findings
        .extend(planned.orphans.iter().filter_map(|a| orphan(a, existing)));
    out.findings.extend(invalid(world, focus));
    out.findings
        .extend(not_opted_in(world, focus, unlabelled, existing));
    let from_hubs = hub_copies(focus, existing, &out.findings);
    out.findings.extend(from_hubs);
    out
}

/// Whether `bundle` reads the source `key`: named by an entry, or matched by a selector entry
/// (by the labels the world knows it by).
fn reads_source(world: &World, bundle: &crate::bundle::Bundle, key: &ObjectKey) -> bool {
    match world.sources().get(key) {
        Some(source) => bundle.sources.iter().any(|e| e.selects(source)),
        None => false,
    }
}

fn index(actions: Vec<Action>) -> Decided {
    let mut planned = Decided {
        by_claim: HashMap::new(),
        by_target: HashMap::new(),
        orphans: Vec::new(),
        missing: HashMap::new(),
    };
    for action in actions {
        let claim = match &action {
            Action::Create { copy, by }
            | Action::Update { copy, by, .. }
            | Action::Recreate { copy, by, .. } => Some((copy.key.clone(), by.clone())),
            Action::InSync { target, by } | Action::Conflict { target, by, .. } => {
                Some((target.clone(), by.clone()))
            }
            Action::Delete { .. } | Action::Retain { .. } => {
                planned.orphans.push(action);
                continue;
            }
            Action::NeedSource { .. } | Action::NeedBindings { .. } | Action::Skip { .. } => None,
            Action::MissingKeys { by, keys } => {
                planned.missing.insert(by.clone(), keys.clone());
                continue;
            }
            // Said per target, from the bundle's sources as read (`bundles::sources_in`).
            Action::LeftOut { .. } => continue,
        };
        match claim {
            Some(key) => {
                planned.by_claim.insert(key, action);
            }
            None => {
                let target = match &action {
                    Action::NeedSource { target, .. }
                    | Action::NeedBindings { target }
                    | Action::Skip { target, .. } => target.clone(),
                    _ => continue,
                };
                planned.by_target.entry(target).or_default().push(action);
            }
        }
    }
    planned
}

#[cfg(test)]
mod bundle_tests;
mod bundles;
mod findings;
#[cfg(test)]
mod tests;
mod verdict;
