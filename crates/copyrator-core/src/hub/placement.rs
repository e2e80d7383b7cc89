//! What a hub places on a member (SPEC §14.1) and how the member takes it (SPEC §14.2): a hub
//! CopyRule whose `spec.clusters` names or selects the member becomes one of the member's
//! rules, of the hub's tier, reading its source through the link, if the link's ceiling
//! accepts its source's namespace and kind; otherwise it is refused, with the reason.

use std::collections::{BTreeMap, BTreeSet};

use crate::{
    copyrule::{CopyRule, CopyRuleSpec},
    model::{Kind, ObjectKey},
    rules::{Rule, RuleError, RuleId, SourceMatch},
    selector::Selector,
    tenancy::Tier,
};

use super::{LinkSettings, hub_namespace};

/// Most sources one link follows: each is a watch of the hub (a member may read only the
/// sources placed on it, one by one), so what a hub places costs the member in proportion to
/// this, not to the hub.
pub const MAX_PLACED_SOURCES: usize = 256;

/// Whether the hub CopyRule `spec` is placed on the member cluster `cluster`, whose
/// ClusterProfile carries `labels` (`None`: it has none). A rule with an invalid selector is
/// placed nowhere by it.
pub fn placed_on(
    spec: &CopyRuleSpec,
    cluster: &str,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    let Some(clusters) = &spec.clusters else {
        return false;
    };
    clusters.names.iter().any(|n| n == cluster)
        || match (&clusters.selector, labels) {
            (Some(sel), Some(labels)) => {
                Selector::from_label_selector(sel).is_ok_and(|s| s.matches(labels))
            }
            _ => false,
        }
}

/// Why a member refuses a rule placed on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The rule is invalid as the member reads it.
    Invalid(RuleError),
    /// The link's ceiling does not accept sources of this hub namespace.
    SourceNamespace(String),
    /// The link's ceiling does not accept this kind (of the source or of the copies).
    Kind(Kind),
    /// More sources are placed than a link follows ([`MAX_PLACED_SOURCES`]).
    TooMany,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Invalid(e) => write!(f, "invalid here: {e}"),
            Refusal::SourceNamespace(ns) => write!(
                f,
                "refused by the link's ceiling: hub namespace {ns} is not among its sourceNamespaces"
            ),
            Refusal::Kind(kind) => {
                write!(
                    f,
                    "refused by the link's ceiling: {kind} is not among its kinds"
                )
            }
            Refusal::TooMany => write!(
                f,
                "more than {MAX_PLACED_SOURCES} sources are placed on this cluster; the first by rule name are followed"
            ),
        }
    }
}

/// A placed rule the member refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedRule {
    /// The hub CopyRule's name.
    pub name: String,
    /// Its source, as the member knows it, when it names one.
    pub source: Option<ObjectKey>,
    pub refusal: Refusal,
}

/// What a hub places on this member, as the member takes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// The placed rules within the ceiling, as member rules (their ids
    /// [`RuleId::Hub`], their sources the hub's).
    pub rules: Vec<Rule>,
    pub refused: Vec<RefusedRule>,
}

impl Placement {
    /// The hub sources the placed rules copy, each once.
    pub fn sources(&self) -> BTreeSet<ObjectKey> {
        self.rules
            .iter()
            .filter_map(|r| match &r.sources {
                SourceMatch::Name(name) => Some(ObjectKey::new(
                    r.kind,
                    r.source_namespace.clone(),
                    name.clone(),
                )),
                _ => None,
            })
            .collect()
    }
}

/// The hub's `copy_rules` placed on the member `link` reaches, whose ClusterProfile carries
/// `labels`: each taken within the ceiling, or refused with the reason. Rules are taken in
/// name order; past [`MAX_PLACED_SOURCES`] sources the rest are refused.
pub fn place(
    link: &LinkSettings,
    labels: Option<&BTreeMap<String, String>>,
    copy_rules: &[CopyRule],
) -> Placement {
    let mut placed: Vec<&CopyRule> = copy_rules
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .filter(|r| placed_on(&r.spec, &link.cluster_name, labels))
        .collect();
    placed.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut out = Placement::default();
    let mut sources = BTreeSet::new();
    for cr in placed {
        let name = cr.metadata.name.clone().unwrap_or_default();
        let source = cr
            .spec
            .source_name
            .as_ref()
            .filter(|_| matches!(cr.spec.kind.as_str(), "Secret" | "ConfigMap"))
            .map(|n| {
                let kind = if cr.spec.kind == "Secret" {
                    Kind::Secret
                } else {
                    Kind::ConfigMap
                };
                ObjectKey::hub(kind, &link.name, &cr.spec.source_namespace, n.clone())
            });
        let taken = member_rule(link, cr).and_then(|rule| {
            let key = source.clone().ok_or_else(|| {
                Refusal::Invalid(RuleError::new(
                    "spec.sourceName",
                    "names no Secret or ConfigMap",
                ))
            })?;
            if !sources.contains(&key) && sources.len() >= MAX_PLACED_SOURCES {
                return Err(Refusal::TooMany);
            }
            sources.insert(key);
            Ok(rule)
        });
        match taken {
            Ok(rule) => out.rules.push(rule),
            Err(refusal) => out.refused.push(RefusedRule {
                name,
                source,
                refusal,
            }),
        }
    }
    out
}

/// The member's rule for the hub CopyRule `cr` placed on it (SPEC §14.2): the hub's tier when
/// its source's namespace is trusted by the link, else one that needs the target's consent;
/// never overwriting an object copyrator does not manage here.
fn member_rule(link: &LinkSettings, cr: &CopyRule) -> Result<Rule, Refusal> {
    let mut rule = Rule::from_copy_rule(cr).map_err(Refusal::Invalid)?;
    let namespace = cr.spec.source_namespace.clone();
    if !link.source_namespaces.matches(&namespace) {
        return Err(Refusal::SourceNamespace(namespace));
    }
    for kind in [rule.kind, rule.target_kind()] {
        if !link.kinds.contains(&kind) {
            return Err(Refusal::Kind(kind));
        }
    }
    // A store's password in a Secret of the hub is not placed on the member: it cannot read it.
    if rule.password_refs().next().is_some() {
        return Err(Refusal::Invalid(RuleError::new(
            "spec.target.formats",
            "a store's passwordSecretRef is not read across clusters; give the password itself",
        )));
    }
    rule.id = RuleId::Hub {
        link: link.name.clone(),
        rule: cr.metadata.name.clone().unwrap_or_default(),
    };
    rule.tier = if link.trusted_source_namespaces.matches(&namespace) {
        Tier::Hub
    } else {
        Tier::ConsentedInline
    };
    rule.source_namespace = hub_namespace(&link.name, &namespace);
    // The hub's status records the hub's namespaces, never the member's.
    rule.read_only_in.clear();
    // Held to a hub rule's powers (SPEC §9.11): never overwriting an object copyrator does
    // not manage here, nothing it may not ask for.
    match rule.hold_to_powers() {
        Ok((rule, _overwrite)) => Ok(rule),
        Err(asked) => {
            let first = asked.iter().find(|o| !o.is_held()).unwrap_or(&asked[0]);
            Err(Refusal::Invalid(RuleError::new(
                first.field(),
                first.message(crate::powers::Author::Hub),
            )))
        }
    }
}
