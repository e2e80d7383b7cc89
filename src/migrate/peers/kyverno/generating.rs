//! Kyverno's `GeneratingPolicy` (policies.kyverno.io, CEL). The forms that say what a CopyRule
//! says are translated: triggered by Namespaces (optionally selected by their labels), its
//! `generate` is `generator.Apply(<the namespace's name>, [objects])` where each object is a
//! clone (`resource.Get("v1", "secrets"|"configmaps", ns, name)`) or a fixed object. Those are
//! found by evaluating the policy's CEL with the namespace's name left as copyrator's
//! placeholder (`$(namespace)`) and nothing else known: an expression that needs anything
//! else (the object's labels, the request, other lookups) fails to evaluate and the policy is
//! reported with why. Never run against the cluster: `resource.Get` only names its source.
//! Each expression runs within `bounds` (size, nesting, time).

use std::{collections::HashMap, sync::Arc};

use cel::{Context, Program, Value as Cel, objects::Map as CelMap};
use serde_json::{Value, json};

use super::{
    super::{Intent, PeerRule, Targets},
    CREATE_ONCE_NOTE, bounds, data,
};
use crate::{
    model::{Kind, NamespaceInfo, ObjectKey},
    selector::Selector,
    template::NAMESPACE_VARIABLE,
};

/// What one GeneratingPolicy becomes.
pub(super) struct Translated {
    pub intents: Vec<Intent>,
    pub rules: Vec<PeerRule>,
}

/// Where `resource.Get` puts the source it names (a string no object of Kubernetes holds).
const CLONE_MARK: &str = "\u{0}copyrator-clone:";

/// Whether `doc` is a GeneratingPolicy (any version of its group).
pub(super) fn is_generating_policy(doc: &Value) -> bool {
    doc["kind"] == "GeneratingPolicy"
        && doc["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("policies.kyverno.io/"))
}

/// The policy's translation, or why it has none.
pub(super) fn translate(doc: &Value, _namespaces: &[NamespaceInfo]) -> Result<Translated, String> {
    let spec = &doc["spec"];
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    if spec["matchConditions"]
        .as_array()
        .is_some_and(|c| !c.is_empty())
    {
        return Err(
            "matchConditions: CEL conditions on each request, which a CopyRule cannot say".into(),
        );
    }
    let targets = trigger(&spec["matchConstraints"])?;
    let enabled = |field: &str| spec["evaluation"][field]["enabled"].as_bool() == Some(true);
    let synchronize = enabled("synchronize");
    let mut notes = vec![format!("from Kyverno GeneratingPolicy {name}")];
    if !enabled("generateExisting") {
        notes.push(
            "generateExisting is not enabled: Kyverno generated only for namespaces created or \
             changed after the policy; copyrator also copies into the matching namespaces that \
             exist now"
                .into(),
        );
    }
    let generated = evaluate(spec)?;
    let mut out = Translated {
        intents: Vec::new(),
        rules: Vec::new(),
    };
    let rule_name = format!("kyverno-{name}");
    for object in generated {
        match object {
            Value::String(s) if s.starts_with(CLONE_MARK) => {
                let source = clone_source(&s[CLONE_MARK.len()..])?;
                let mut notes = notes.clone();
                if !synchronize {
                    notes.push(CREATE_ONCE_NOTE.into());
                }
                out.intents.push(Intent {
                    source,
                    target_name: None,
                    targets: targets.clone(),
                    notes,
                    rule_name: Some(rule_name.clone()),
                    create_once: !synchronize,
                });
            }
            Value::Object(mut object) => {
                let api_version = object["apiVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let kind_name = object["kind"].as_str().unwrap_or_default().to_string();
                let kind = super::kind_of(&api_version, &kind_name)?;
                let target_name = object
                    .get("metadata")
                    .and_then(|m| m["name"].as_str())
                    .ok_or("a generated object has no metadata.name")?
                    .to_string();
                if object.get("metadata").and_then(|m| m["namespace"].as_str())
                    != Some(NAMESPACE_VARIABLE)
                {
                    return Err(format!(
                        "{kind_name} {target_name} is not generated into the namespace that matched"
                    ));
                }
                object.remove("status");
                let content = Value::Object(object);
                out.rules.extend(data::template_rules(
                    &data::Generated {
                        rule_name: format!("{rule_name}-{}", target_name.to_ascii_lowercase()),
                        kind,
                        target_name: &target_name,
                        content: &content,
                        synchronize,
                        orphan: enabled("orphanDownstreamOnPolicyDelete"),
                    },
                    vec![targets.clone()],
                    notes.clone(),
                )?);
            }
            other => return Err(format!("generates {other}, which is not an object")),
        }
    }
    Ok(out)
}

/// Which namespaces trigger the policy: it must match Namespaces only; its object or
/// namespace selector (both apply to the Namespace itself) select among them.
fn trigger(constraints: &Value) -> Result<Targets, String> {
    let rules = constraints["resourceRules"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let only_namespaces = !rules.is_empty()
        && rules
            .iter()
            .all(|r| r["apiGroups"] == json!([""]) && r["resources"] == json!(["namespaces"]));
    if !only_namespaces {
        return Err(
            "matchConstraints match objects other than Namespaces: copyrator copies into \
             namespaces, triggered by them"
                .into(),
        );
    }
    let mut requirements = Vec::new();
    for field in ["namespaceSelector", "objectSelector"] {
        let value = &constraints[field];
        if value.is_null() || value == &json!({}) {
            continue;
        }
        let selector = serde_json::from_value(value.clone())
            .map_err(|e| format!("matchConstraints.{field}: {e}"))?;
        let selector = Selector::from_label_selector(&selector)
            .map_err(|e| format!("matchConstraints.{field}: {e}"))?;
        requirements.push(selector.to_string());
    }
    requirements.retain(|r| !r.is_empty());
    Ok(Targets {
        every: requirements.is_empty(),
        selector: (!requirements.is_empty()).then(|| requirements.join(",")),
        ..Targets::default()
    })
}

/// The objects the policy's `generate` gives a namespace named `$(namespace)`.
fn evaluate(spec: &Value) -> Result<Vec<Value>, String> {
    let generate = spec["generate"].as_array().cloned().unwrap_or_default();
    if generate.is_empty() {
        return Err("generate is empty".into());
    }
    let object = json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": NAMESPACE_VARIABLE}});
    let mut variables = serde_json::Map::new();
    for variable in spec["variables"].as_array().into_iter().flatten() {
        let name = variable["name"].as_str().unwrap_or_default();
        let value = run(&variable["expression"], &object, &variables)
            .map_err(|e| format!("variables.{name}: {e}"))?;
        variables.insert(name.to_string(), value);
    }
    let mut objects = Vec::new();
    for (i, entry) in generate.iter().enumerate() {
        let applied = run(&entry["expression"], &object, &variables)
            .map_err(|e| format!("generate[{i}]: {e}"))?;
        let (Some(into), Some(list)) = (applied[0].as_str(), applied[1].as_array()) else {
            return Err(format!(
                "generate[{i}] is not generator.Apply(namespace, [objects])"
            ));
        };
        if into != NAMESPACE_VARIABLE {
            return Err(format!(
                "generate[{i}] generates into {into:?}, not the namespace that matched"
            ));
        }
        objects.extend(list.iter().cloned());
    }
    Ok(objects)
}

/// One expression's value with `object` and `variables` known, `resource.Get` naming its
/// source and `generator.Apply` giving `[namespace, objects]`; within [`bounds`].
fn run(
    expression: &Value,
    object: &Value,
    variables: &serde_json::Map<String, Value>,
) -> Result<Value, String> {
    run_within(bounds::TIMEOUT, expression, object, variables)
}

/// [`run`] given `timeout`.
fn run_within(
    timeout: std::time::Duration,
    expression: &Value,
    object: &Value,
    variables: &serde_json::Map<String, Value>,
) -> Result<Value, String> {
    let text = expression.as_str().ok_or("no expression")?;
    bounds::check(text)?;
    let (text, object, variables) = (text.to_string(), object.clone(), variables.clone());
    bounds::run_bounded(timeout, move || evaluate_one(&text, &object, &variables))
}

/// [`run`] without bounds.
fn evaluate_one(
    text: &str,
    object: &Value,
    variables: &serde_json::Map<String, Value>,
) -> Result<Value, String> {
    let program = Program::compile(text).map_err(|e| format!("{text:?} does not compile: {e}"))?;
    let mut context = Context::default();
    let cel = |v: &Value| cel::to_value(v).map_err(|e| e.to_string());
    context.add_variable_from_value("object", cel(object)?);
    context.add_variable_from_value("variables", cel(&Value::Object(variables.clone()))?);
    // Receivers of the library calls Kyverno defines; only the two below are known.
    for receiver in ["resource", "generator"] {
        context.add_variable_from_value(
            receiver,
            Cel::Map(CelMap::from(HashMap::<String, Cel>::new())),
        );
    }
    context
        .add_function(
            "Get",
            |_this: cel::extractors::This<Cel>,
             api_version: Arc<String>,
             resource: Arc<String>,
             namespace: Arc<String>,
             name: Arc<String>| {
                Cel::String(Arc::new(format!(
                    "{CLONE_MARK}{api_version}/{resource}/{namespace}/{name}"
                )))
            },
        )
        .map_err(|e| e.to_string())?;
    context
        .add_function(
            "Apply",
            |_this: cel::extractors::This<Cel>, namespace: Cel, objects: Cel| {
                Cel::List(Arc::new(vec![namespace, objects]))
            },
        )
        .map_err(|e| e.to_string())?;
    let value = program.execute(&context).map_err(|e| {
        format!(
            "{text:?} needs what a copy made for a namespace does not know (only the \
             namespace's name is): {e}"
        )
    })?;
    value.json().map_err(|e| e.to_string())
}

/// The source `resource.Get` names: a Secret or ConfigMap.
fn clone_source(named: &str) -> Result<ObjectKey, String> {
    let parts: Vec<&str> = named.split('/').collect();
    let (resource, namespace, name) = match parts.as_slice() {
        [_version, resource, ns, name] | [_, _version, resource, ns, name] => {
            (*resource, *ns, *name)
        }
        _ => return Err(format!("resource.Get({named}) cannot be read")),
    };
    let kind = match resource {
        "secrets" => Kind::Secret,
        "configmaps" => Kind::ConfigMap,
        other => {
            return Err(format!(
                "resource.Get of {other}: migrate translates clones of Secrets and ConfigMaps"
            ));
        }
    };
    let key = ObjectKey::new(kind, namespace, name);
    if !key.is_valid() || namespace.contains(CLONE_MARK) || name.contains(CLONE_MARK) {
        return Err(format!(
            "resource.Get names {namespace}/{name}, not a valid source"
        ));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hostile_expression_within_the_size_bounds_is_cut_off_in_time() {
        // A million additions: far past a few milliseconds, far below any memory concern.
        let big: Vec<Value> = (0..1000).map(|i| json!(i)).collect();
        let variables = serde_json::Map::from_iter([("big".to_string(), Value::Array(big))]);
        let hostile = json!("variables.big.map(a, variables.big.map(b, a + b)).size()");
        let started = std::time::Instant::now();
        let e = run_within(
            std::time::Duration::from_millis(5),
            &hostile,
            &json!({}),
            &variables,
        )
        .unwrap_err();
        assert!(e.contains("ran past the bound of 5 ms"), "{e}");
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }
}
