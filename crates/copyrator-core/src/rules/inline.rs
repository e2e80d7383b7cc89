//! The inline rule of an annotated source (SPEC §2.1): its annotations parsed and validated,
//! and its tier as the trust policy decides it.

use std::collections::BTreeSet;

use crate::{
    copyrule::{ConflictPolicy, DeletionPolicy},
    marks,
    model::{Kind, SourceInfo},
    selector::{self, Selector},
    tenancy::Tier,
    transform::{KeyMapping, Transform},
};

use super::{MAX_NAMESPACES, Rule, RuleError, RuleId, SourceMatch, copy_rule::key_mappings};

/// The annotations of an inline rule that `source` carries although it lacks the opt-in label
/// `copyrator.io/source: "true"`: copyrator ignores them (its webhooks and lists key on the
/// label). Empty when the source is labelled or carries none.
pub fn ignored_annotations(source: &SourceInfo) -> Vec<&'static str> {
    if source.labels.get(marks::SOURCE_LABEL).map(String::as_str) == Some("true") {
        return Vec::new();
    }
    [
        marks::NAMESPACE_SELECTOR_ANNOTATION,
        marks::NAMESPACES_ANNOTATION,
        marks::READ_ONLY,
        marks::KEYS_ANNOTATION,
    ]
    .into_iter()
    .filter(|a| source.annotations.contains_key(*a))
    .collect()
}

impl Rule {
    /// The inline rule of a source (SPEC §2.1). `Ok(None)` when the source does not carry the
    /// opt-in label. A labelled source without annotations yields a rule without targets.
    /// Its tier is the lowest until the trust policy says otherwise ([`super::RuleSet::build`]).
    pub fn inline(source: &SourceInfo) -> Result<Option<Rule>, RuleError> {
        if source.labels.get(marks::SOURCE_LABEL).map(String::as_str) != Some("true") {
            return Ok(None);
        }
        if source.is_copy() {
            return Err(RuleError::new(
                marks::SOURCE_LABEL,
                format!(
                    "is set on one of copyrator's copies ({}: {}); a copy is never a source: remove the label, or make the original the source",
                    marks::MANAGED_BY_LABEL,
                    marks::MANAGED_BY_VALUE
                ),
            ));
        }
        let namespace_selector = match source.annotations.get(marks::NAMESPACE_SELECTOR_ANNOTATION)
        {
            None => None,
            Some(raw) if raw.trim().is_empty() => {
                return Err(RuleError::new(
                    marks::NAMESPACE_SELECTOR_ANNOTATION,
                    "is empty; give a label selector such as \"team=a\" or remove the annotation",
                ));
            }
            Some(raw) => Some(Selector::parse(raw).map_err(|e| {
                RuleError::new(marks::NAMESPACE_SELECTOR_ANNOTATION, e.to_string())
            })?),
        };
        let mut namespaces = BTreeSet::new();
        if let Some(raw) = source.annotations.get(marks::NAMESPACES_ANNOTATION) {
            let count = raw.split(',').filter(|n| !n.trim().is_empty()).count();
            if count > MAX_NAMESPACES {
                return Err(RuleError::new(
                    marks::NAMESPACES_ANNOTATION,
                    format!(
                        "lists {count} namespaces; at most {MAX_NAMESPACES} are allowed (use a selector)"
                    ),
                ));
            }
            for name in raw.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                if !selector::is_dns_label(name) {
                    return Err(RuleError::new(
                        marks::NAMESPACES_ANNOTATION,
                        format!("{name:?} is not a valid namespace name"),
                    ));
                }
                if name == source.key.namespace {
                    return Err(RuleError::new(
                        marks::NAMESPACES_ANNOTATION,
                        format!(
                            "lists the source's own namespace {name:?}; a source is never copied into its own namespace"
                        ),
                    ));
                }
                namespaces.insert(name.to_string());
            }
        }
        let image_pull_secret = match source
            .annotations
            .get(marks::IMAGE_PULL_SECRET_ANNOTATION)
            .map(|v| v.trim())
        {
            None | Some("false") => false,
            Some("true") if source.key.kind == Kind::Secret => true,
            Some("true") => {
                return Err(RuleError::new(
                    marks::IMAGE_PULL_SECRET_ANNOTATION,
                    "is only for Secrets (of type kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg), not ConfigMaps",
                ));
            }
            Some(other) => {
                return Err(RuleError::new(
                    marks::IMAGE_PULL_SECRET_ANNOTATION,
                    format!("must be \"true\" or \"false\", not {other:?}"),
                ));
            }
        };
        let read_only = match source.annotations.get(marks::READ_ONLY).map(|v| v.trim()) {
            // Kinds other than Secret and ConfigMap are platform policy: read-only unless the
            // source says otherwise (SPEC §4 item 11).
            None => !source.key.kind.is_consentable(),
            Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(RuleError::new(
                    marks::READ_ONLY,
                    format!("must be \"true\" or \"false\", not {other:?}"),
                ));
            }
        };
        let keys = match source.annotations.get(marks::KEYS_ANNOTATION) {
            None => None,
            Some(_) if !source.key.kind.is_consentable() => {
                return Err(RuleError::new(
                    marks::KEYS_ANNOTATION,
                    format!(
                        "is only for Secrets and ConfigMaps, not a {}",
                        source.key.kind
                    ),
                ));
            }
            Some(raw) => Some(inline_keys(raw)?),
        };
        Ok(Some(Rule {
            id: RuleId::Inline(source.key.clone()),
            kind: source.key.kind,
            source_namespace: source.key.namespace.clone(),
            sources: SourceMatch::Name(source.key.name.clone()),
            namespace_selector,
            namespaces,
            exclude_namespaces: BTreeSet::new(),
            target_name: None,
            deletion_policy: DeletionPolicy::Delete,
            conflict_policy: ConflictPolicy::Skip,
            created: source.created,
            tier: Tier::ConsentedInline,
            image_pull_secret,
            read_only,
            transform: Transform {
                keys,
                ..Transform::default()
            },
            create_once: false,
            created_in: BTreeSet::new(),
            read_only_in: BTreeSet::new(),
            held: Vec::new(),
        }))
    }

    /// [`Rule::inline`] with its tier as `trust` decides it. An untrusted namespace's inline
    /// rule for a kind other than Secret or ConfigMap is invalid: such kinds are copied only
    /// by a CopyRule or from a trusted namespace, and consent never suffices (SPEC §9.2).
    pub fn inline_tiered(
        source: &SourceInfo,
        trust: &crate::tenancy::TrustPolicy,
    ) -> Result<Option<Rule>, RuleError> {
        let Some(mut rule) = Rule::inline(source)? else {
            return Ok(None);
        };
        if rule.kind.facts().grants.is_some() {
            return Err(RuleError::new(
                marks::SOURCE_LABEL,
                format!(
                    "opts in a {}: RBAC objects are copied only by a CopyRule that names its source, written by someone who may grant what it copies (SPEC §9.10)",
                    rule.kind
                ),
            ));
        }
        rule.tier = trust.inline_tier(&rule.source_namespace);
        if rule.tier == Tier::ConsentedInline && !rule.kind.is_consentable() {
            return Err(RuleError::new(
                marks::SOURCE_LABEL,
                format!(
                    "opts in a {} of namespace {:?}, which is not trusted: kinds other than Secret and ConfigMap are copied only by a CopyRule or from a trusted namespace (--trusted-namespaces), and a namespace's consent (copyrator.io/accept-from) never suffices for them",
                    rule.kind, rule.source_namespace
                ),
            ));
        }
        Ok(Some(rule))
    }
}

impl Rule {
    /// Whether a source of Secret type `type_` (`Opaque` when unset) may have this inline rule:
    /// its copies are image pull secrets only if a kubelet reads that type (SPEC §10).
    pub fn check_pull_secret_type(&self, type_: Option<&str>) -> Result<(), RuleError> {
        let type_ = type_.unwrap_or("Opaque");
        if !self.image_pull_secret || marks::PULL_SECRET_TYPES.contains(&type_) {
            return Ok(());
        }
        Err(RuleError::new(
            marks::IMAGE_PULL_SECRET_ANNOTATION,
            format!(
                "only a Secret of type {} can be an image pull secret; this one is of type {type_}",
                marks::PULL_SECRET_TYPES.join(" or ")
            ),
        ))
    }
}

/// The keys of the inline annotation `copyrator.io/keys`: `ca.crt,tls.crt=server.pem`.
fn inline_keys(raw: &str) -> Result<Vec<KeyMapping>, RuleError> {
    let field = marks::KEYS_ANNOTATION;
    let entries: Vec<(&str, Option<&str>)> = raw
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| match e.split_once('=') {
            Some((from, to)) => (from.trim(), Some(to.trim())),
            None => (e, None),
        })
        .collect();
    key_mappings(field, entries)
}
