//! A `CopyRule` resource (SPEC §2.2) validated and converted: every error names the field.

use std::collections::BTreeSet;

use crate::{
    copyrule::{CopyRule, CopyRuleSpec, KeySpec},
    model::Kind,
    selector::{self, Selector},
    tenancy::Tier,
    transform::{self, KeyMapping, Transform},
};

use super::{MAX_KEYS, MAX_NAMESPACES, Rule, RuleError, RuleId, SourceMatch, check_key};

impl Rule {
    /// Validates a CopyRule naming or selecting its sources (neither a bundle nor a template;
    /// [`Rule::from_copy_rule`] sends those elsewhere) and converts it.
    pub(super) fn one_source_rule(rule: &CopyRule, name: String) -> Result<Rule, RuleError> {
        let spec = &rule.spec;
        if spec.drop_expired {
            return Err(RuleError::new(
                "spec.dropExpired",
                "is only for bundles (spec.sources)",
            ));
        }
        if spec.target.as_ref().is_some_and(|t| t.key.is_some()) {
            return Err(RuleError::new(
                "spec.target.key",
                "is only for bundles (spec.sources); spec.keys selects and renames the keys of other copies",
            ));
        }
        let kind = copy_rule_kind(spec)?;
        // A NamespacedCopyRule (`crate::namespaced`): a team's rule, never an RBAC copy.
        let namespaced = rule.metadata.namespace.is_some();
        if namespaced && kind.facts().grants.is_some() {
            return Err(RuleError::new(
                "spec.kind",
                format!(
                    "a NamespacedCopyRule never copies a {kind}: RBAC objects are copied only by a CopyRule that names its source, written by someone who may grant what it copies (SPEC §9.10)"
                ),
            ));
        }
        if !selector::is_dns_label(&spec.source_namespace) {
            return Err(RuleError::new(
                "spec.sourceNamespace",
                format!("{:?} is not a valid namespace name", spec.source_namespace),
            ));
        }
        let sources = match (&spec.source_name, &spec.source_selector) {
            (Some(_), Some(_)) => {
                return Err(RuleError::new(
                    "spec.sourceName",
                    "spec.sourceName and spec.sourceSelector are mutually exclusive; set exactly one",
                ));
            }
            (None, None) => {
                return Err(RuleError::new(
                    "spec.sourceName",
                    "one of spec.sourceName or spec.sourceSelector is required",
                ));
            }
            (Some(n), None) => {
                if !selector::is_dns_subdomain(n) {
                    return Err(RuleError::new(
                        "spec.sourceName",
                        format!("{n:?} is not a valid object name"),
                    ));
                }
                SourceMatch::Name(n.clone())
            }
            (None, Some(_)) if kind.facts().grants.is_some() => {
                return Err(RuleError::new(
                    "spec.sourceSelector",
                    format!(
                        "a {kind} is copied only from a named source (spec.sourceName): a selector would copy whatever anyone who may write there labels (SPEC §9.10)"
                    ),
                ));
            }
            (None, Some(sel)) => SourceMatch::Selector(
                Selector::from_label_selector(sel)
                    .map_err(|e| RuleError::new("spec.sourceSelector", e.to_string()))?,
            ),
        };
        if let Some(target) = &spec.target_name {
            if matches!(sources, SourceMatch::Selector(_)) {
                return Err(RuleError::new(
                    "spec.targetName",
                    "is only allowed with spec.sourceName (a selector may match many sources)",
                ));
            }
            if !selector::is_dns_subdomain(target) {
                return Err(RuleError::new(
                    "spec.targetName",
                    format!("{target:?} is not a valid object name"),
                ));
            }
        }
        let targets = TargetClauses::of(spec)?;
        // A rule placed on member clusters copies from the hub's namespace into theirs.
        if spec.clusters.is_none() && targets.namespaces.contains(&spec.source_namespace) {
            return Err(RuleError::new(
                "spec.namespaces",
                format!(
                    "contains the source namespace {:?}; a source is never copied into its own namespace",
                    spec.source_namespace
                ),
            ));
        }
        let transform = copy_rule_transform(spec, kind)?;
        if spec.image_pull_secret && transform.target_kind(kind) != Kind::Secret {
            return Err(RuleError::new(
                "spec.imagePullSecret",
                "is only for copies that are Secrets (of type kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg)",
            ));
        }
        targets.require_some()?;
        let TargetClauses {
            namespace_selector,
            namespaces,
            exclude_namespaces,
        } = targets;
        Ok(Rule {
            id: match namespaced {
                true => RuleId::Namespaced(name),
                false => RuleId::CopyRule(name),
            },
            kind,
            source_namespace: spec.source_namespace.clone(),
            sources,
            namespace_selector,
            namespaces,
            exclude_namespaces,
            target_name: spec.target_name.clone(),
            deletion_policy: spec.deletion_policy,
            conflict_policy: spec.conflict_policy,
            created: created(rule),
            // A NamespacedCopyRule's tier is its namespace's ([`super::RuleSet`] says which):
            // the lowest until then.
            tier: match namespaced {
                true => Tier::ConsentedInline,
                false => Tier::CopyRule,
            },
            image_pull_secret: spec.image_pull_secret,
            // Create-once copies are their namespace's: never read-only.
            read_only: spec
                .read_only
                .unwrap_or(!transform.target_kind(kind).is_consentable() && !spec.create_once),
            transform,
            create_once: spec.create_once,
            created_in: super::created_in(rule),
            read_only_in: super::recorded_read_only_in(rule),
            held: Vec::new(),
        })
    }
}

impl Rule {
    /// The rule with its tier as `trust` decides it: a CopyRule's is its own; a
    /// NamespacedCopyRule's is its namespace's inline tier (SPEC §9), and in an untrusted
    /// namespace it copies only Secrets and ConfigMaps, as an inline rule there does, and
    /// reads no store's password from a Secret (SPEC §3.2).
    pub fn tiered(mut self, trust: &crate::tenancy::TrustPolicy) -> Result<Rule, RuleError> {
        if self.id.namespaced().is_none() {
            return Ok(self);
        }
        self.tier = trust.inline_tier(&self.source_namespace);
        if self.tier == Tier::ConsentedInline && !self.kind.is_consentable() {
            return Err(RuleError::new(
                "spec.kind",
                format!(
                    "a NamespacedCopyRule of namespace {:?}, which is not trusted, copies only Secrets and ConfigMaps: other kinds are copied only by a CopyRule or from a trusted namespace (--trusted-namespaces), and a namespace's consent (copyrator.io/accept-from) never suffices for them",
                    self.source_namespace
                ),
            ));
        }
        // A store's password from a Secret: the platform's own, read for the platform's
        // rules only; a tenant's rule would learn what other namespaces hold (SPEC §3.2).
        if self.tier == Tier::ConsentedInline
            && let Some(store) = self.transform.formats.as_ref().and_then(|f| {
                [("pkcs12", &f.pkcs12), ("jks", &f.jks)]
                    .into_iter()
                    .find(|(_, s)| s.as_ref().is_some_and(|s| s.password_from.is_some()))
                    .map(|(name, _)| name)
            })
        {
            return Err(RuleError::new(
                format!("spec.target.formats.{store}.passwordSecretRef"),
                format!(
                    "a NamespacedCopyRule of namespace {:?}, which is not trusted, cannot read a store's password from a Secret: give the password itself (spec.target.formats.{store}.password); passwordSecretRef is for CopyRules and rules of trusted namespaces (--trusted-namespaces)",
                    self.source_namespace
                ),
            ));
        }
        Ok(self)
    }
}

/// Checks a rule's keys (each valid, at most [`MAX_KEYS`], no two copied under one name).
pub(super) fn key_mappings<'a>(
    field: &str,
    entries: Vec<(&'a str, Option<&'a str>)>,
) -> Result<Vec<KeyMapping>, RuleError> {
    if entries.is_empty() {
        return Err(RuleError::new(
            field,
            "lists no key; leave it out to copy every key",
        ));
    }
    if entries.len() > MAX_KEYS {
        return Err(RuleError::new(
            field,
            format!(
                "lists {} keys; at most {MAX_KEYS} are allowed",
                entries.len()
            ),
        ));
    }
    let mut out: Vec<KeyMapping> = Vec::with_capacity(entries.len());
    for (from, to) in entries {
        let to = to.unwrap_or(from);
        for key in [from, to] {
            check_key(field, key)?;
        }
        if out.iter().any(|k| k.to == to) {
            return Err(RuleError::new(
                field,
                format!("copies two keys as {to:?}; each name in the copies must be unique"),
            ));
        }
        out.push(KeyMapping {
            from: from.to_string(),
            to: to.to_string(),
        });
    }
    Ok(out)
}

/// The transform a CopyRule asks for with `spec.keys` and `spec.target` (SPEC §3.2), for
/// sources of `kind`.
pub(super) fn copy_rule_transform(spec: &CopyRuleSpec, kind: Kind) -> Result<Transform, RuleError> {
    let target = spec.target.clone().unwrap_or_default();
    if !kind.is_consentable() {
        let field = match (&spec.keys, &target.kind, &target.type_, &target.formats) {
            (Some(_), ..) => "spec.keys",
            (None, None, None, None) => return Ok(Transform::default()),
            _ => "spec.target",
        };
        return Err(RuleError::new(
            field,
            format!("is only for Secrets and ConfigMaps, not a {}", kind.name()),
        ));
    }
    let keys = match &spec.keys {
        None => None,
        Some(entries) => Some(key_mappings(
            "spec.keys",
            entries
                .iter()
                .map(|e| match e {
                    KeySpec::Name(name) => (name.as_str(), None),
                    KeySpec::Renamed { from, to } => (from.as_str(), to.as_deref()),
                })
                .collect(),
        )?),
    };
    let target_kind = match target.kind.as_deref() {
        None => kind,
        Some("Secret") => Kind::Secret,
        Some("ConfigMap") => Kind::ConfigMap,
        Some(other) => {
            return Err(RuleError::new(
                "spec.target.kind",
                format!("{other:?} is not a kind copies can be made as: Secret or ConfigMap"),
            ));
        }
    };
    if let Some(type_) = &target.type_ {
        check_secret_type(target_kind, type_)?;
    }
    let formats = match &target.formats {
        Some(spec) => Some(transform::Formats::from_spec(spec, keys.as_deref())?),
        None => None,
    };
    Ok(Transform {
        keys,
        kind: (target_kind != kind).then_some(target_kind),
        type_: target.type_,
        formats,
    })
}

/// The kind a CopyRule names by `spec.apiVersion` and `spec.kind` (SPEC §2.2), if copyrator
/// copies it here: Secret and ConfigMap, and the kinds `--copy-kinds` enabled and discovery
/// resolved.
pub fn copy_rule_kind(spec: &crate::copyrule::CopyRuleSpec) -> Result<Kind, RuleError> {
    let group = spec.group();
    if let Some(version) = spec.api_version.as_deref()
        && (version.is_empty() || version.starts_with('/') || version.ends_with('/'))
    {
        return Err(RuleError::new(
            "spec.apiVersion",
            format!("{version:?} is not an API version (v1, networking.k8s.io/v1, ...)"),
        ));
    }
    if let Some(why) = crate::model::not_copyable(group, &spec.kind) {
        return Err(RuleError::new("spec.kind", why));
    }
    if let Some(kind) = Kind::lookup(group, &spec.kind)
        && !kind.is_served()
    {
        return Err(RuleError::new(
            "spec.kind",
            format!(
                "{} is no longer served by the API server (was its CustomResourceDefinition deleted?)",
                kind.name()
            ),
        ));
    }
    Kind::lookup(group, &spec.kind).ok_or_else(|| {
        let name = if group.is_empty() {
            spec.kind.clone()
        } else {
            format!("{}.{group}", spec.kind)
        };
        RuleError::new(
            "spec.kind",
            format!(
                "{name} is not a kind copyrator copies here: it copies {}; add it to --copy-kinds (chart value copyKinds), and it must be a namespaced kind the API server serves",
                Kind::all()
                    .iter()
                    .map(|k| k.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    })
}

/// A CopyRule's target clauses, checked: `namespaceSelector`, `namespaces`,
/// `excludeNamespaces`.
pub(super) struct TargetClauses {
    pub namespace_selector: Option<Selector>,
    pub namespaces: BTreeSet<String>,
    pub exclude_namespaces: BTreeSet<String>,
}

impl TargetClauses {
    pub(super) fn of(spec: &crate::copyrule::CopyRuleSpec) -> Result<Self, RuleError> {
        Ok(Self {
            namespace_selector: spec
                .namespace_selector
                .as_ref()
                .map(Selector::from_label_selector)
                .transpose()
                .map_err(|e| RuleError::new("spec.namespaceSelector", e.to_string()))?,
            namespaces: namespace_set("spec.namespaces", &spec.namespaces)?,
            exclude_namespaces: namespace_set("spec.excludeNamespaces", &spec.exclude_namespaces)?,
        })
    }

    /// A rule must select some namespace, by selector or by name.
    pub(super) fn require_some(&self) -> Result<(), RuleError> {
        if self.namespace_selector.is_none() && self.namespaces.is_empty() {
            return Err(RuleError::new(
                "spec.namespaceSelector",
                "one of spec.namespaceSelector or spec.namespaces is required (use namespaceSelector: {} for every namespace)",
            ));
        }
        Ok(())
    }
}

/// When the CopyRule was created (seconds; 0 when not known), for precedence between rules.
pub(super) fn created(rule: &CopyRule) -> i64 {
    rule.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .unwrap_or_default()
}

pub(super) fn namespace_set(field: &str, names: &[String]) -> Result<BTreeSet<String>, RuleError> {
    if names.len() > MAX_NAMESPACES {
        return Err(RuleError::new(
            field,
            format!(
                "lists {} namespaces; at most {MAX_NAMESPACES} are allowed (use a selector)",
                names.len()
            ),
        ));
    }
    names
        .iter()
        .map(|n| {
            if selector::is_dns_label(n) {
                Ok(n.clone())
            } else {
                Err(RuleError::new(
                    field,
                    format!("{n:?} is not a valid namespace name"),
                ))
            }
        })
        .collect()
}

/// `spec.target.type` for copies of `kind`: only Secrets have a type, one the API server
/// accepts, and never a service-account token's.
pub(super) fn check_secret_type(kind: Kind, type_: &str) -> Result<(), RuleError> {
    if kind != Kind::Secret {
        return Err(RuleError::new(
            "spec.target.type",
            "is only for copies that are Secrets (a ConfigMap has no type)",
        ));
    }
    if type_.is_empty()
        || type_.len() > 253
        || !type_
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'))
    {
        return Err(RuleError::new(
            "spec.target.type",
            format!("{type_:?} is not a Secret type (Opaque, kubernetes.io/tls, ...)"),
        ));
    }
    if let Some((_, why)) = crate::model::kind_table::NEVER_COPIED_SECRET_TYPES
        .iter()
        .find(|(t, _)| *t == type_)
    {
        return Err(RuleError::new(
            "spec.target.type",
            format!("copyrator never makes Secrets of type {type_}: {why}"),
        ));
    }
    Ok(())
}
