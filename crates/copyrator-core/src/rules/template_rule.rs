//! A CopyRule with `spec.template` (SPEC §3.3) validated and converted: the fields of a rule
//! with a source are refused, and the template is checked to be an object's fields.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::{
    copyrule::CopyRule,
    model::{Kind, ObjectKey, SourceInfo},
    selector,
    template::{MAX_TEMPLATE_BYTES, Template, mentions_namespace},
    tenancy::Tier,
    transform::Transform,
};

use super::{Rule, RuleError, RuleId, SourceMatch, copy_rule::copy_rule_kind};

/// Top-level fields a template may not set: the API server's and copyrator's own.
const NOT_IN_A_TEMPLATE: [&str; 3] = ["apiVersion", "kind", "status"];

/// Validates a CopyRule with `spec.template` and converts it.
pub(super) fn template_rule(rule: &CopyRule, name: String) -> Result<Rule, RuleError> {
    let spec = &rule.spec;
    let not_with = |field: &str| {
        RuleError::new(
            field,
            "is not allowed with spec.template: the template is the copies' content and their source",
        )
    };
    for (set, field) in [
        (!spec.source_namespace.is_empty(), "spec.sourceNamespace"),
        (spec.source_name.is_some(), "spec.sourceName"),
        (spec.source_selector.is_some(), "spec.sourceSelector"),
        (spec.sources.is_some(), "spec.sources"),
        (spec.keys.is_some(), "spec.keys"),
        (spec.target.is_some(), "spec.target"),
        (spec.image_pull_secret, "spec.imagePullSecret"),
        (spec.drop_expired, "spec.dropExpired"),
    ] {
        if set {
            return Err(not_with(field));
        }
    }
    let kind = copy_rule_kind(spec)?;
    if kind == Kind::Secret {
        return Err(RuleError::new(
            "spec.template",
            "is not for Secrets: a Secret's data must not sit in a CopyRule, which the built-in view role may read; copy it from a source Secret instead",
        ));
    }
    let Some(target_name) = spec.target_name.clone() else {
        return Err(RuleError::new(
            "spec.targetName",
            "is required with spec.template: the copies' name",
        ));
    };
    if !kind.is_valid_name(&target_name) || !selector::is_dns_subdomain(&target_name) {
        return Err(RuleError::new(
            "spec.targetName",
            format!("{target_name:?} is not a valid object name"),
        ));
    }
    let raw = spec.template.clone().unwrap_or_default();
    let bytes = serde_json::to_vec(&raw).map_or(usize::MAX, |b| b.len());
    if bytes > MAX_TEMPLATE_BYTES {
        return Err(RuleError::new(
            "spec.template",
            format!("takes {bytes} bytes; at most {MAX_TEMPLATE_BYTES} are allowed"),
        ));
    }
    let mut fields: BTreeMap<String, Value> = BTreeMap::new();
    let (mut labels, mut annotations) = (BTreeMap::new(), BTreeMap::new());
    for (key, value) in raw {
        if NOT_IN_A_TEMPLATE.contains(&key.as_str()) {
            return Err(RuleError::new(
                format!("spec.template.{key}"),
                "is not the template's to set: the rule's apiVersion and kind say what the copies are",
            ));
        }
        if key == "metadata" {
            (labels, annotations) = template_metadata(&value)?;
            continue;
        }
        fields.insert(key, value);
    }
    if fields.is_empty() {
        return Err(RuleError::new(
            "spec.template",
            "holds no field of the copies (e.g. spec, rules, roleRef, data)",
        ));
    }
    let per_namespace = fields.values().any(mentions_namespace)
        || labels
            .values()
            .chain(annotations.values())
            .any(|v: &String| v.contains(crate::template::NAMESPACE_VARIABLE));
    let targets = super::copy_rule::TargetClauses::of(spec)?;
    targets.require_some()?;
    let super::copy_rule::TargetClauses {
        namespace_selector,
        namespaces,
        exclude_namespaces,
    } = targets;
    let created = super::copy_rule::created(rule);
    let owner = SourceInfo {
        key: ObjectKey::bundle(kind, &name),
        uid: rule.metadata.uid.clone().unwrap_or_default(),
        resource_version: String::new(),
        labels,
        annotations,
        created,
        deleting: false,
        dropped: None,
    };
    Ok(Rule {
        id: RuleId::CopyRule(name),
        kind,
        // No namespace: the rule itself is the source.
        source_namespace: String::new(),
        sources: SourceMatch::Template(Box::new(Template {
            fields,
            owner,
            per_namespace,
        })),
        namespace_selector,
        namespaces,
        exclude_namespaces,
        target_name: Some(target_name),
        deletion_policy: spec.deletion_policy,
        conflict_policy: spec.conflict_policy,
        created,
        tier: Tier::CopyRule,
        image_pull_secret: false,
        // Create-once copies are their namespace's: never read-only.
        read_only: spec
            .read_only
            .unwrap_or(!kind.is_consentable() && !spec.create_once),
        transform: Transform::default(),
        create_once: spec.create_once,
        created_in: super::created_in(rule),
        read_only_in: super::recorded_read_only_in(rule),
        held: Vec::new(),
    })
}

/// A template's labels and annotations.
type Metadata = (BTreeMap<String, String>, BTreeMap<String, String>);

/// The template's `metadata`: labels and annotations only, string to string.
fn template_metadata(value: &Value) -> Result<Metadata, RuleError> {
    let field = "spec.template.metadata";
    let Value::Object(meta) = value else {
        return Err(RuleError::new(field, "must be an object"));
    };
    let mut out = (BTreeMap::new(), BTreeMap::new());
    for (key, value) in meta {
        let into = match key.as_str() {
            "labels" => &mut out.0,
            "annotations" => &mut out.1,
            other => {
                return Err(RuleError::new(
                    format!("{field}.{other}"),
                    "a template's metadata holds labels and annotations only: the copies' name is spec.targetName, their namespace the one selected",
                ));
            }
        };
        let map: BTreeMap<String, String> = serde_json::from_value(value.clone())
            .map_err(|_| RuleError::new(format!("{field}.{key}"), "must map strings to strings"))?;
        // copyrator's own marks are never a template's (SPEC §9.6).
        if let Some(own) = map.keys().find(|k| !crate::marks::is_carried_key(k)) {
            return Err(RuleError::new(
                format!("{field}.{key}"),
                format!("{own:?} is copyrator's or a tool's own key, never a copy's"),
            ));
        }
        *into = map;
    }
    Ok(out)
}
