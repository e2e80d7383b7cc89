//! A generate rule with inline `data` becomes a template CopyRule (SPEC §3.3): the data is
//! the copies' content, `{{request.object.metadata.name}}` becomes `$(namespace)`, and
//! `synchronize: false` (Kyverno's default) becomes `createOnce` (SPEC §3.4). Any other
//! variable takes its value from the request (its user, its object's labels), which a copy
//! made for a namespace has no equivalent of: such a rule is reported, not translated.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use super::super::{PeerRule, Targets};
use crate::{
    copyrule::{CopyRule, CopyRuleSpec, DeletionPolicy},
    model::Kind,
    rules::Rule,
    template::NAMESPACE_VARIABLE,
};

/// What a data rule generates.
pub(super) struct Generated<'a> {
    pub rule_name: String,
    pub kind: Kind,
    pub target_name: &'a str,
    pub content: &'a Value,
    pub synchronize: bool,
    /// `orphanDownstreamOnPolicyDelete`: the copies stay when the policy goes.
    pub orphan: bool,
}

/// A Kyverno variable: `{{ ... }}`.
static VARIABLE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\{\{\s*([^}]*?)\s*\}\}").expect("a valid expression"));

/// The one variable a template can say: the triggering Namespace's name.
const NAMESPACE_NAME: &str = "request.object.metadata.name";

/// One template CopyRule per way the rule's match selects namespaces, or why there is none.
pub(super) fn template_rules(
    generated: &Generated<'_>,
    alternatives: Vec<Targets>,
    mut notes: Vec<String>,
) -> Result<Vec<PeerRule>, String> {
    let kind = generated.kind;
    if kind == Kind::Secret {
        return Err(
            "generate.data of a Secret: a Secret's data must not sit in a CopyRule, which the \
             built-in view role may read; keep the Secret in a namespace of your own and clone \
             it (generate.clone), which migrate translates"
                .into(),
        );
    }
    let Value::Object(content) = substitute("generate.data", generated.content)? else {
        return Err("generate.data is not an object".into());
    };
    let template = template_fields(content, generated)?;
    if generated.synchronize {
        notes.push(
            "synchronize: true: the copies follow the CopyRule; copyrator restores one edited or \
             deleted, and refuses edits of copies of kinds other than Secret and ConfigMap \
             (read-only)"
                .into(),
        );
    } else {
        notes.push(super::CREATE_ONCE_NOTE.into());
    }
    let deletion_policy = if generated.orphan {
        notes.push(
            "orphanDownstreamOnPolicyDelete: the copies stay when the CopyRule is deleted \
             (deletionPolicy: Retain)"
                .into(),
        );
        DeletionPolicy::Retain
    } else {
        DeletionPolicy::Delete
    };
    if !kind.is_consentable() {
        notes.push(format!(
            "copyrator copies {} only when run with --copy-kinds naming it (chart value \
             copyKinds); until then it refuses this CopyRule",
            kind.name()
        ));
    }
    let mut rules = Vec::new();
    for targets in alternatives {
        let targets = targets.rule_fields()?;
        let rule = CopyRule::new(
            &generated.rule_name,
            CopyRuleSpec {
                api_version: (!kind.group().is_empty()).then(|| kind.api_version()),
                kind: kind.as_str().into(),
                template: Some(template.clone()),
                create_once: !generated.synchronize,
                target_name: Some(generated.target_name.to_string()),
                namespace_selector: targets.namespace_selector,
                namespaces: targets.namespaces,
                exclude_namespaces: targets.exclude_namespaces,
                deletion_policy,
                ..Default::default()
            },
        );
        // What migrate prints, copyrator accepts: checked as admission checks it.
        Rule::from_copy_rule(&rule).map_err(|e| format!("its CopyRule would be invalid ({e})"))?;
        rules.push(PeerRule {
            rule,
            // The CopyRule is its copies' source.
            source_namespace: String::new(),
            notes: notes.clone(),
            objects: Vec::new(),
        });
    }
    Ok(rules)
}

/// `value` with the namespace-name variable written as copyrator writes it, or the first
/// other variable found, with where.
fn substitute(at: &str, value: &Value) -> Result<Value, String> {
    Ok(match value {
        Value::String(s) => Value::String(substitute_str(at, s)?),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| substitute(&format!("{at}[{i}]"), v))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let at = format!("{at}.{k}");
                    Ok((substitute_str(&at, k)?, substitute(&at, v)?))
                })
                .collect::<Result<_, String>>()?,
        ),
        other => other.clone(),
    })
}

fn substitute_str(at: &str, s: &str) -> Result<String, String> {
    if let Some(other) = VARIABLE
        .captures_iter(s)
        .map(|c| c[1].to_string())
        .find(|v| v != NAMESPACE_NAME)
    {
        let why = if other.starts_with("request.userInfo") {
            "the user who made the request, which a copy has none of: copyrator makes \
             copies for a namespace, not for a user"
        } else {
            "a value taken from each request; copyrator puts only the namespace's name into a \
             template ($(namespace))"
        };
        return Err(format!("{at} uses {{{{{other}}}}}: {why}"));
    }
    Ok(VARIABLE.replace_all(s, NAMESPACE_VARIABLE).into_owned())
}

/// The template: `data` without what the rule itself says (its kind, name and namespace).
fn template_fields(
    mut content: Map<String, Value>,
    generated: &Generated<'_>,
) -> Result<Map<String, Value>, String> {
    let kind = generated.kind;
    for (field, says) in [
        ("apiVersion", kind.api_version()),
        ("kind", kind.as_str().into()),
    ] {
        match content.remove(field) {
            Some(Value::String(v)) if v == says => {}
            Some(v) => return Err(format!("generate.data.{field} is {v}, not {says}")),
            None => {}
        }
    }
    if let Some(Value::Object(meta)) = content.get_mut("metadata") {
        let mut kept = Map::new();
        for (key, value) in std::mem::take(meta) {
            match key.as_str() {
                "labels" | "annotations" => {
                    kept.insert(key, value);
                }
                "name" if value.as_str() == Some(generated.target_name) => {}
                "namespace" if value.as_str() == Some(NAMESPACE_VARIABLE) => {}
                other => {
                    return Err(format!(
                        "generate.data.metadata.{other}: a template's metadata holds labels \
                         and annotations only"
                    ));
                }
            }
        }
        if kept.is_empty() {
            content.remove("metadata");
        } else {
            *meta = kept;
        }
    }
    Ok(content)
}
