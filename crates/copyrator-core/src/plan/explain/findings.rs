//! The findings themselves: one per rule, source and target, in the words of the clause that
//! decided it.

use std::collections::BTreeMap;

use super::{CopyState, Decided, Finding, Focus, Planned, Shape, Verdict};
use crate::{
    copyrule::DeletionPolicy,
    marks,
    model::{NamespaceInfo, ObjectKey, SourceInfo},
    plan::{Action, Adopt, ClaimRef, ConflictReason, Existing, Targeting, World},
    rules::{self, Rule, RuleId, Selection, SourceMatch},
};

/// One (rule, source, namespace): the targeting decision, then the planner's action.
pub(super) fn judge(
    rule: &Rule,
    source: &SourceInfo,
    ns: &NamespaceInfo,
    target: ObjectKey,
    targeting: Targeting,
    planned: &Decided,
    existing: &BTreeMap<ObjectKey, Existing>,
) -> Finding {
    let found = existing.get(&target);
    let copy = |in_sync: Option<bool>| copy_state(found, Some((rule, source)), in_sync);
    let selected = |sel| selection_text(rule, sel, &ns.name);
    let (verdict, state, message) = match targeting {
        Targeting::NotSelected(sel) => (Verdict::NotSelected(sel), copy(None), selected(sel)),
        Targeting::ExcludedGlobally => (
            Verdict::ExcludedGlobally,
            copy(None),
            format!(
                "{} is excluded by copyrator's --exclude-namespaces",
                ns.name
            ),
        ),
        Targeting::BeyondCeiling => (
            Verdict::BeyondCeiling,
            copy(None),
            format!(
                "the ceiling of HubLink {link} does not let {ns} receive its hub's copies \
                 (spec.ceiling.namespaceSelector, and never copyrator's own namespace)",
                link = rule.id.hub_link().unwrap_or_default(),
                ns = ns.name
            ),
        ),
        Targeting::Terminating => (
            Verdict::Terminating,
            copy(None),
            format!("{} is terminating: nothing is written into it", ns.name),
        ),
        Targeting::Refused(_) if rule.id.hub_link().is_some() => (
            Verdict::NotConsented,
            copy(None),
            format!(
                "HubLink {link} does not trust hub namespace {src} \
                 (spec.ceiling.trustedSourceNamespaces) and {ns} does not accept copies from it \
                 (it needs the annotation {ann}: {link}/{src})",
                link = rule.id.hub_link().unwrap_or_default(),
                src = rule
                    .source_namespace
                    .split_once('/')
                    .map_or("", |(_, ns)| ns),
                ns = ns.name,
                ann = marks::ACCEPT_FROM_ANNOTATION
            ),
        ),
        Targeting::Refused(_) => (
            Verdict::NotConsented,
            copy(None),
            format!(
                "{src} is not a trusted namespace (--trusted-namespaces) and {ns} does not accept \
                 copies from it (it needs the annotation {ann}: {src})",
                src = rule.source_namespace,
                ns = ns.name,
                ann = marks::ACCEPT_FROM_ANNOTATION
            ),
        ),
        Targeting::Wanted(sel) => {
            let claim = ClaimRef::new(rule.id.clone(), source.key.clone());
            let why = selected(sel);
            match planned.by_claim.get(&(target.clone(), claim)) {
                Some(action) => wanted(sel, action, why, found, &copy),
                None => {
                    let skip = planned.by_target.get(&target).and_then(|actions| {
                        actions.iter().find_map(|a| match a {
                            Action::Skip { reason, .. } => Some(*reason),
                            Action::NeedBindings { .. } => Some(
                                "a Role is created only after the RoleBindings of its namespace are read, which explain does not do (SPEC §9.10)",
                            ),
                            _ => None,
                        })
                    });
                    match skip {
                        Some(reason) => (
                            Verdict::Skipped(reason),
                            copy(None),
                            format!("{why}, but skipped for now: {reason}"),
                        ),
                        // The planner needs the source's content and could not have it.
                        None => (
                            Verdict::Applies {
                                selection: sel,
                                action: Planned::ReadSource,
                            },
                            copy(None),
                            format!(
                                "{why}; the source's content could not be read, so whether the \
                                 copy is current is unknown"
                            ),
                        ),
                    }
                }
            }
        }
    };
    let claim = ClaimRef::new(rule.id.clone(), source.key.clone());
    let shape = Shape::of(rule, planned.missing.get(&claim));
    // Create-once (SPEC §3.4): what is there is the namespace's.
    let message = match (rule.create_once, existing.get(&target)) {
        (false, _) => message,
        (true, Some(Existing::None) | None) if rule.created_in.contains(&target.namespace) => {
            format!(
                "{message}; create-once: copyrator made the copy here once, and its namespace deleted it: it is not made again"
            )
        }
        (true, Some(Existing::None) | None) => {
            format!("{message}; create-once: made here once, then the namespace's")
        }
        (true, Some(Existing::Unmanaged { .. }))
            if !rule.created_in.contains(&target.namespace) =>
        {
            format!(
                "{message}; create-once: copyrator did not make the object there, someone else's object holds the name: it is never written"
            )
        }
        (true, Some(_)) => format!(
            "{message}; create-once: the object there belongs to the namespace, copyrator never changes or deletes it"
        ),
    };
    let message = match &shape {
        Some(shape) => format!("{message}; the copy holds {}", shape.describe(&source.key)),
        None => message,
    };
    // What the rule asked beyond its author's powers and does not get (SPEC §9.11).
    let message = rule.held.iter().fold(message, |m, o| {
        format!(
            "{m}; held to its author's powers: {}",
            o.message(rule.author())
        )
    });
    Finding {
        rule: rule.id.clone(),
        tier: Some(rule.tier),
        source: Some(source.key.clone()),
        target: Some(target),
        verdict,
        copy: state,
        message,
        shape,
        bundle: None,
    }
}

/// A wanted target: what the planner decided for this claim.
fn wanted(
    selection: Selection,
    action: &Action,
    why: String,
    found: Option<&Existing>,
    copy: &dyn Fn(Option<bool>) -> CopyState,
) -> (Verdict, CopyState, String) {
    let applies = |action| Verdict::Applies { selection, action };
    let taking_over = match found {
        Some(Existing::Managed(m)) if copy(None) == CopyState::OtherOwner => {
            format!(
                "; it takes over the copy made by the {} (SPEC §9.3)",
                m.rule
            )
        }
        _ => String::new(),
    };
    match action {
        Action::InSync { .. } => (applies(Planned::Nothing), copy(Some(true)), why),
        Action::Create { .. } => (
            applies(Planned::Create),
            copy(None),
            format!("{why}; the copy is missing: the next sync creates it"),
        ),
        Action::Update {
            adopt: Adopt::Reclaim,
            ..
        }
        | Action::Recreate {
            adopt: Adopt::Reclaim,
            ..
        } => (
            applies(Planned::Overwrite),
            CopyState::Unmanaged,
            format!(
                "{why}; an object copyrator does not manage holds the name of the read-only \
                 copy this CopyRule held here, and the copy is put back (SPEC §4 item 11)"
            ),
        ),
        Action::Update {
            adopt: Adopt::Overwrite,
            ..
        }
        | Action::Recreate {
            adopt: Adopt::Overwrite,
            ..
        } => (
            applies(Planned::Overwrite),
            CopyState::Unmanaged,
            format!(
                "{why}; an object copyrator does not manage holds the name and is overwritten \
                 (conflictPolicy: Overwrite)"
            ),
        ),
        Action::Update { .. } => (
            applies(Planned::Update),
            copy(Some(false)),
            format!(
                "{why}; the copy differs from its source: the next sync updates it{taking_over}"
            ),
        ),
        Action::Recreate { .. } => (
            applies(Planned::Recreate),
            copy(Some(false)),
            format!(
                "{why}; the copy is immutable and differs from its source: the next sync \
                 deletes it and creates it again{taking_over}"
            ),
        ),
        Action::Conflict { reason, .. } => {
            let tail = match reason {
                ConflictReason::Unmanaged => " (conflictPolicy: Skip): it is left untouched",
                ConflictReason::NeverCopied(_) | ConflictReason::Grant(_) => {
                    ": this rule gets no copy there, and a copy it made before is deleted"
                }
                _ => ": this rule gets no copy there",
            };
            (
                Verdict::Conflict(reason.clone()),
                copy(None),
                format!("{why}, but {reason}{tail}"),
            )
        }
        _ => (applies(Planned::Nothing), copy(None), why),
    }
}

/// A rule that selects no existing source, judged against one namespace.
pub(super) fn no_source(
    world: &World,
    rule: &Rule,
    ns: &NamespaceInfo,
    existing: &BTreeMap<ObjectKey, Existing>,
) -> Finding {
    let (source, target) = match &rule.sources {
        SourceMatch::Name(name) => (
            Some(ObjectKey::new(rule.kind, &rule.source_namespace, name)),
            Some(ObjectKey::new(
                rule.target_kind(),
                &ns.name,
                rule.target_name(name),
            )),
        ),
        SourceMatch::Selector(_) | SourceMatch::Bundle(_) | SourceMatch::Template(_) => {
            (None, None)
        }
    };
    let copy = copy_state(target.as_ref().and_then(|t| existing.get(t)), None, None);
    let (verdict, message) = match world.targeting(rule, ns) {
        Targeting::NotSelected(sel) => (
            Verdict::NotSelected(sel),
            selection_text(rule, sel, &ns.name),
        ),
        _ => (
            Verdict::SourceNotFound,
            match &rule.sources {
                SourceMatch::Name(name) => format!(
                    "the source {} {}/{name} does not exist",
                    rule.kind, rule.source_namespace
                ),
                SourceMatch::Selector(sel) => format!(
                    "no {} in {} matches spec.sourceSelector \"{sel}\"",
                    rule.kind, rule.source_namespace
                ),
                SourceMatch::Bundle(_) => "the bundle has no source".to_string(),
                // A template is its own source: it always has one.
                SourceMatch::Template(_) => "the template makes no copy here".to_string(),
            },
        ),
    };
    Finding {
        rule: rule.id.clone(),
        tier: Some(rule.tier),
        source,
        target,
        verdict,
        copy,
        message,
        shape: Shape::of(rule, None),
        bundle: None,
    }
}

/// Namespaces a rule names explicitly that do not exist.
pub(super) fn missing_namespaces<'a>(
    world: &'a World,
    rule: &'a Rule,
    source: &'a SourceInfo,
) -> impl Iterator<Item = Finding> + 'a {
    rule.namespaces
        .iter()
        .filter(|n| !world.namespaces().contains_key(*n))
        .map(move |n| Finding {
            rule: rule.id.clone(),
            tier: Some(rule.tier),
            source: Some(source.key.clone()),
            target: Some(ObjectKey::new(
                rule.target_kind(),
                n,
                rule.target_name(&source.key.name),
            )),
            verdict: Verdict::NamespaceNotFound,
            copy: CopyState::Missing,
            message: format!("{n} is listed in {} but does not exist", fields(rule).0),
            shape: Shape::of(rule, None),
            bundle: None,
        })
}

/// A managed copy no rule wants (the planner's Delete or Retain).
pub(super) fn orphan(action: &Action, existing: &BTreeMap<ObjectKey, Existing>) -> Option<Finding> {
    let (target, rule, policy) = match action {
        Action::Delete { target, rule, .. } => (target, rule, DeletionPolicy::Delete),
        Action::Retain { target, rule } => (target, rule, DeletionPolicy::Retain),
        _ => return None,
    };
    let Some(Existing::Managed(m)) = existing.get(target) else {
        return None;
    };
    let fate = match policy {
        DeletionPolicy::Delete => "the next sync deletes it (deletion policy Delete)",
        DeletionPolicy::Retain => "it is kept (deletion policy Retain)",
    };
    Some(Finding {
        rule: rule.clone().unwrap_or_else(|| m.rule.clone()),
        tier: None,
        source: Some(m.source.clone()),
        target: Some(target.clone()),
        verdict: Verdict::NoRuleWants(policy),
        copy: if m.deleting {
            CopyState::BeingDeleted
        } else {
            CopyState::Present
        },
        message: format!(
            "no rule wants this copy any more (its rule or source is gone, or the namespace \
             is no longer selected): {fate}"
        ),
        shape: None,
        bundle: None,
    })
}

/// A hub's copies in the namespace asked about (SPEC §14): kept by their HubLink's sync, which
/// reads the hub; `explain` reads only this cluster, so it names the hub source and the link
/// and says where to look rather than judging them.
pub(super) fn hub_copies(
    focus: &Focus,
    existing: &BTreeMap<ObjectKey, Existing>,
    already: &[Finding],
) -> Vec<Finding> {
    let Focus::Namespace(ns) = focus else {
        return Vec::new();
    };
    existing
        .iter()
        .filter(|(target, _)| &target.namespace == ns)
        .filter(|(target, _)| !already.iter().any(|f| f.target.as_ref() == Some(*target)))
        .filter_map(|(target, e)| match e {
            Existing::Managed(m) => m.source.hub_parts().map(|(link, hub_ns)| Finding {
                rule: m.rule.clone(),
                tier: None,
                source: Some(m.source.clone()),
                target: Some(target.clone()),
                verdict: Verdict::HubUnknown,
                copy: if m.deleting {
                    CopyState::BeingDeleted
                } else {
                    CopyState::Present
                },
                message: format!(
                    "a copy of {hub_ns}/{name} on the hub of HubLink {link}: its link's sync \
                         keeps it and deletes it only on what a reachable hub says; explain \
                         reads this cluster only (kubectl get hublink {link} -o yaml: whether \
                         the hub is reachable, since when)",
                    name = m.source.name,
                ),
                shape: None,
                bundle: None,
            }),
            _ => None,
        })
        .collect()
}

/// Rules whose configuration is invalid: ignored, whatever they ask for.
pub(super) fn invalid(world: &World, focus: &Focus) -> Vec<Finding> {
    let set = world.rules();
    let sources = set
        .invalid_sources
        .iter()
        .filter(|(key, _)| match focus {
            Focus::Source(k) => *key == k,
            Focus::Rule(id) => matches!(id, RuleId::Inline(k) if k == *key),
            Focus::Namespace(_) => true,
        })
        .map(|(key, err)| Finding {
            rule: RuleId::Inline(key.clone()),
            tier: None,
            source: Some(key.clone()),
            target: None,
            verdict: Verdict::Invalid(err.to_string()),
            copy: CopyState::Missing,
            message: format!("invalid configuration, ignored: {err}"),
            shape: None,
            bundle: None,
        });
    let copy_rules = set
        .invalid_copy_rules
        .iter()
        .filter(|(name, _)| match focus {
            Focus::Namespace(_) => true,
            Focus::Rule(id) => id.copy_rule_name() == Some(name.as_str()),
            Focus::Source(k) => world.copy_rules().iter().any(|cr| {
                cr.metadata.name.as_deref() == Some(name.as_str())
                    && crate::rules::copy_rule_kind(&cr.spec).ok() == Some(k.kind)
                    && cr.spec.source_namespace == k.namespace
            }),
        })
        .map(|(name, err)| Finding {
            rule: match crate::namespaced::split_rule_name(name) {
                Some(_) => RuleId::Namespaced(name.clone()),
                None => RuleId::CopyRule(name.clone()),
            },
            tier: None,
            source: None,
            target: None,
            verdict: Verdict::Invalid(err.to_string()),
            copy: CopyState::Missing,
            message: format!("invalid configuration, ignored: {err}"),
            shape: None,
            bundle: None,
        });
    sources.chain(copy_rules).collect()
}

/// Sources that ask for copies without the opt-in label: for a namespace, those whose
/// would-be rule selects it; for a source, itself.
pub(super) fn not_opted_in(
    world: &World,
    focus: &Focus,
    unlabelled: &[SourceInfo],
    existing: &BTreeMap<ObjectKey, Existing>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for source in unlabelled {
        let ignored = rules::ignored_annotations(source);
        if ignored.is_empty() {
            continue;
        }
        let target = match focus {
            Focus::Source(key) | Focus::Rule(RuleId::Inline(key)) if key == &source.key => None,
            Focus::Source(_) | Focus::Rule(_) => continue,
            Focus::Namespace(name) => {
                let Some(ns) = world.namespaces().get(name) else {
                    continue;
                };
                // The rule it would have with the label: does it ask for this namespace?
                let mut labelled = source.clone();
                labelled
                    .labels
                    .insert(marks::SOURCE_LABEL.into(), "true".into());
                match Rule::inline(&labelled) {
                    Ok(Some(rule)) if rule.targets_namespace(ns) => {
                        Some(ObjectKey::new(source.key.kind, name, &source.key.name))
                    }
                    _ => continue,
                }
            }
        };
        out.push(Finding {
            rule: RuleId::Inline(source.key.clone()),
            tier: None,
            source: Some(source.key.clone()),
            copy: copy_state(target.as_ref().and_then(|t| existing.get(t)), None, None),
            target,
            message: format!(
                "the source has {} but not the label {}: \"true\", so copyrator ignores it",
                ignored.join(" and "),
                marks::SOURCE_LABEL
            ),
            verdict: Verdict::NotOptedIn(ignored),
            shape: None,
            bundle: None,
        });
    }
    out
}

/// What is at a target, for the claim of `rule` on `source` (if any). `in_sync`: the
/// planner's judgement of an owned copy's content, when it made one.
fn copy_state(
    found: Option<&Existing>,
    claim: Option<(&Rule, &SourceInfo)>,
    in_sync: Option<bool>,
) -> CopyState {
    match found {
        None | Some(Existing::None) => CopyState::Missing,
        Some(Existing::Unmanaged { .. }) => CopyState::Unmanaged,
        Some(Existing::Managed(m)) if m.deleting => CopyState::BeingDeleted,
        Some(Existing::Managed(m)) => match claim {
            Some((rule, source)) if m.rule != rule.id || m.source != source.key => {
                CopyState::OtherOwner
            }
            _ => match in_sync {
                Some(true) => CopyState::InSync,
                Some(false) => CopyState::Stale,
                None => CopyState::Present,
            },
        },
    }
}

/// The names of a rule's explicit-namespaces and selector clauses, as its author wrote them.
fn fields(rule: &Rule) -> (&'static str, &'static str) {
    match rule.id {
        RuleId::Inline(_) => (
            marks::NAMESPACES_ANNOTATION,
            marks::NAMESPACE_SELECTOR_ANNOTATION,
        ),
        RuleId::CopyRule(_) | RuleId::Hub { .. } | RuleId::Namespaced(_) => {
            ("spec.namespaces", "spec.namespaceSelector")
        }
    }
}

/// Why the rule's own clauses select `namespace` or not, naming the clause.
fn selection_text(rule: &Rule, selection: Selection, namespace: &str) -> String {
    let (names, selector) = fields(rule);
    match selection {
        Selection::Listed => format!("{namespace} is listed in {names}"),
        Selection::SelectorMatches => match &rule.namespace_selector {
            Some(s) if s.is_everything() => format!("{selector} selects every namespace"),
            Some(s) => format!("{selector} \"{s}\" matches the namespace's labels"),
            None => format!("{selector} matches"),
        },
        Selection::SourceNamespace => {
            "the source's own namespace is never a target (no copy loops)".to_string()
        }
        Selection::Excluded => format!("{namespace} is listed in spec.excludeNamespaces"),
        Selection::NotSelected => match &rule.namespace_selector {
            Some(s) if rule.namespaces.is_empty() => {
                format!("{selector} \"{s}\" does not match the namespace's labels")
            }
            Some(s) => format!(
                "not listed in {names}, and {selector} \"{s}\" does not match the namespace's labels"
            ),
            None => format!("not listed in {names} (the rule has no namespace selector)"),
        },
    }
}
