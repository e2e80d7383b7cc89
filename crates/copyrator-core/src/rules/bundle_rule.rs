//! A CopyRule with `spec.sources` (a bundle, SPEC §3.2) validated and converted.

use std::collections::BTreeMap;

use crate::{
    bundle::{self, Bundle, BundleSelect, BundleSource},
    copyrule::{BundleSourceSpec, CopyRule, CopyRuleSpec},
    model::{Kind, ObjectKey, SourceInfo},
    selector::{self, Selector},
    tenancy::Tier,
    transform::{self, Transform},
};

use super::{Rule, RuleError, RuleId, SourceMatch, check_key, copy_rule::check_secret_type};

/// Validates a CopyRule with `spec.sources` (a bundle, SPEC §3.2) and converts it: the
/// fields of a one-source rule are refused, each source and the target checked.
pub(super) fn bundle_rule(rule: &CopyRule, name: String) -> Result<Rule, RuleError> {
    let spec = &rule.spec;
    refuse_one_source_fields(spec)?;
    let target = BundleTarget::of(spec)?;
    let (sources, default_cas) = bundle_sources(spec)?;
    let targets = super::copy_rule::TargetClauses::of(spec)?;
    targets.require_some()?;
    let super::copy_rule::TargetClauses {
        namespace_selector,
        namespaces,
        exclude_namespaces,
    } = targets;
    let created = super::copy_rule::created(rule);
    let owner = SourceInfo {
        key: ObjectKey::bundle(target.kind, &name),
        uid: rule.metadata.uid.clone().unwrap_or_default(),
        resource_version: String::new(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        created,
        deleting: false,
        dropped: None,
    };
    Ok(Rule {
        id: RuleId::CopyRule(name),
        kind: target.kind,
        // No namespace: every namespace may receive the bundle, the sources' own included.
        source_namespace: String::new(),
        sources: SourceMatch::Bundle(Box::new(Bundle {
            sources,
            key: target.key,
            type_: target.type_,
            drop_expired: spec.drop_expired,
            default_cas,
            formats: target.formats,
            owner,
        })),
        namespace_selector,
        namespaces,
        exclude_namespaces,
        target_name: Some(target.name),
        deletion_policy: spec.deletion_policy,
        conflict_policy: spec.conflict_policy,
        created,
        tier: Tier::CopyRule,
        image_pull_secret: false,
        read_only: spec.read_only.unwrap_or(false),
        transform: Transform::default(),
        create_once: spec.create_once,
        created_in: super::created_in(rule),
        read_only_in: super::recorded_read_only_in(rule),
        held: Vec::new(),
    })
}

/// The fields of a one-source rule, which a bundle names per source or cannot use.
fn refuse_one_source_fields(spec: &CopyRuleSpec) -> Result<(), RuleError> {
    let not_with = |field: &str| {
        RuleError::new(
            field,
            "is not allowed with spec.sources: a bundle names each source's namespace, object and key in spec.sources",
        )
    };
    if !spec.source_namespace.is_empty() {
        return Err(not_with("spec.sourceNamespace"));
    }
    if spec.source_name.is_some() {
        return Err(not_with("spec.sourceName"));
    }
    if spec.source_selector.is_some() {
        return Err(not_with("spec.sourceSelector"));
    }
    if spec.keys.is_some() {
        return Err(not_with("spec.keys"));
    }
    if spec.image_pull_secret {
        return Err(RuleError::new(
            "spec.imagePullSecret",
            "is not for bundles: a bundle's copies hold certificates",
        ));
    }
    if spec.api_version.as_deref().is_some_and(|v| v != "v1") {
        return Err(RuleError::new(
            "spec.apiVersion",
            "a bundle's copies are Secrets or ConfigMaps (v1)",
        ));
    }
    Ok(())
}

/// A bundle's copies: their kind, name, the key holding the certificates, and its formats.
struct BundleTarget {
    kind: Kind,
    name: String,
    key: String,
    type_: Option<String>,
    formats: Option<transform::Formats>,
}

impl BundleTarget {
    fn of(spec: &CopyRuleSpec) -> Result<Self, RuleError> {
        let target = spec.target.clone().unwrap_or_default();
        let kind = match target.kind.as_deref().unwrap_or(spec.kind.as_str()) {
            "Secret" => Kind::Secret,
            "ConfigMap" => Kind::ConfigMap,
            other => {
                return Err(RuleError::new(
                    if target.kind.is_some() {
                        "spec.target.kind"
                    } else {
                        "spec.kind"
                    },
                    format!("{other:?}: a bundle's copies are a Secret or a ConfigMap"),
                ));
            }
        };
        let Some(key) = target.key.clone() else {
            return Err(RuleError::new(
                "spec.target.key",
                "is required for a bundle: the key of the copies that holds the certificates",
            ));
        };
        check_key("spec.target.key", &key)?;
        if let Some(type_) = &target.type_ {
            check_secret_type(kind, type_)?;
        }
        let formats = target
            .formats
            .as_ref()
            .map(|f| transform::Formats::for_bundle(f, &key))
            .transpose()?;
        let Some(name) = spec.target_name.clone() else {
            return Err(RuleError::new(
                "spec.targetName",
                "is required for a bundle: the name of its copies",
            ));
        };
        if !selector::is_dns_subdomain(&name) {
            return Err(RuleError::new(
                "spec.targetName",
                format!("{name:?} is not a valid object name"),
            ));
        }
        Ok(Self {
            kind,
            name,
            key,
            type_: target.type_,
            formats,
        })
    }
}

/// `spec.sources`, checked: the sources, and whether the default CAs are in the bundle.
fn bundle_sources(spec: &CopyRuleSpec) -> Result<(Vec<BundleSource>, bool), RuleError> {
    let entries = spec.sources.as_deref().unwrap_or_default();
    if entries.is_empty() || entries.len() > bundle::MAX_SOURCES {
        return Err(RuleError::new(
            "spec.sources",
            format!(
                "lists {} sources; a bundle takes 1 to {}",
                entries.len(),
                bundle::MAX_SOURCES
            ),
        ));
    }
    let mut sources = Vec::with_capacity(entries.len());
    let mut default_cas = false;
    for (i, entry) in entries.iter().enumerate() {
        if entry.default_cas {
            default_cas_entry(
                entry,
                &format!("spec.sources[{i}].defaultCAs"),
                &mut default_cas,
            )?;
            continue;
        }
        sources.push(bundle_source(entry, i)?);
    }
    Ok((sources, default_cas))
}

/// The entry `spec.sources[i]` naming a Secret or ConfigMap.
fn bundle_source(entry: &BundleSourceSpec, i: usize) -> Result<BundleSource, RuleError> {
    let field = |f: &str| format!("spec.sources[{i}].{f}");
    let kind = match entry.kind.as_str() {
        "" => {
            return Err(RuleError::new(
                field("kind"),
                "is required: Secret or ConfigMap (or defaultCAs: true alone)",
            ));
        }
        "Secret" => Kind::Secret,
        "ConfigMap" => Kind::ConfigMap,
        other => {
            return Err(RuleError::new(
                field("kind"),
                format!("{other:?}: a bundle's sources are Secrets or ConfigMaps"),
            ));
        }
    };
    if !selector::is_dns_label(&entry.namespace) {
        return Err(RuleError::new(
            field("namespace"),
            format!("{:?} is not a valid namespace name", entry.namespace),
        ));
    }
    let select = match (&entry.name, &entry.selector) {
        (Some(n), None) if selector::is_dns_subdomain(n) => BundleSelect::Name(n.clone()),
        (Some(n), None) => {
            return Err(RuleError::new(
                field("name"),
                format!("{n:?} is not a valid object name"),
            ));
        }
        (None, Some(sel)) => BundleSelect::Selector(
            Selector::from_label_selector(sel)
                .map_err(|e| RuleError::new(field("selector"), e.to_string()))?,
        ),
        _ => {
            return Err(RuleError::new(
                field("name"),
                "exactly one of name and selector is required",
            ));
        }
    };
    if !transform::is_valid_key(&entry.key) {
        return Err(RuleError::new(
            field("key"),
            format!("{:?} is not a valid key", entry.key),
        ));
    }
    Ok(BundleSource {
        kind,
        namespace: entry.namespace.clone(),
        select,
        key: entry.key.clone(),
    })
}

/// The entry `{defaultCAs: true}` (at `field`): alone, and once per bundle.
fn default_cas_entry(
    entry: &BundleSourceSpec,
    field: &str,
    seen: &mut bool,
) -> Result<(), RuleError> {
    let others = !entry.kind.is_empty()
        || !entry.namespace.is_empty()
        || entry.name.is_some()
        || entry.selector.is_some()
        || !entry.key.is_empty();
    if others {
        return Err(RuleError::new(
            field,
            "stands alone: an entry is defaultCAs: true, or a Secret's or ConfigMap's kind, \
             namespace, name or selector, and key",
        ));
    }
    if std::mem::replace(seen, true) {
        return Err(RuleError::new(field, "is listed twice"));
    }
    Ok(())
}
