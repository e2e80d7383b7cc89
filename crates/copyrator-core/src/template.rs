//! Templates (SPEC §3.3): a CopyRule that holds the object its copies are made of, for what a
//! new namespace should start with and that has no source of its own (a default-deny
//! NetworkPolicy, a quota, a RoleBinding to `<namespace>-admins`). No source object lives
//! anywhere: the CopyRule is the copies' source, as for a bundle, and their marks say so.
//!
//! The one variable is the target namespace's name: `$(namespace)` in any string value (and
//! in the values of the template's labels and annotations) becomes it. Nothing else is
//! templated: the copies are a pure function of the rule and the namespace's name, so a resync
//! of unchanged copies writes nothing, and `explain` and `plan` show exactly what is written.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::model::{Kind, Payload, SourceInfo};

/// The one variable of a template: the target namespace's name.
pub const NAMESPACE_VARIABLE: &str = "$(namespace)";

/// Most bytes a template may take (its JSON): a bootstrap object, not a payload store.
pub const MAX_TEMPLATE_BYTES: usize = 64 * 1024;

/// A CopyRule's template, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    /// The copies' top-level fields (`spec`, `rules`, `roleRef`, `data`, ...).
    pub fields: BTreeMap<String, Value>,
    /// What stands for the source of the copies ([`crate::model::ObjectKey::bundle`], the
    /// rule's uid), with the template's labels and annotations.
    pub owner: SourceInfo,
    /// Whether `$(namespace)` appears anywhere: then each namespace's copy is its own.
    pub per_namespace: bool,
}

impl Template {
    /// The template's owner and payload for a copy of `kind` in `namespace`: every
    /// `$(namespace)` replaced.
    pub fn for_namespace(&self, kind: Kind, namespace: &str) -> (SourceInfo, Payload) {
        let fields: serde_json::Map<String, Value> = self
            .fields
            .iter()
            .map(|(k, v)| (k.clone(), substitute(v, namespace)))
            .collect();
        // Fields the template validation let through always read as a payload.
        let payload: Payload = serde_json::from_value(Value::Object(fields)).unwrap_or_default();
        let mut owner = self.owner.clone();
        for map in [&mut owner.labels, &mut owner.annotations] {
            for value in map.values_mut() {
                *value = value.replace(NAMESPACE_VARIABLE, namespace);
            }
        }
        (owner, payload.for_kind(kind))
    }
}

/// `value` with every `$(namespace)` in its strings replaced by `namespace`.
fn substitute(value: &Value, namespace: &str) -> Value {
    match value {
        Value::String(s) if s.contains(NAMESPACE_VARIABLE) => {
            Value::String(s.replace(NAMESPACE_VARIABLE, namespace))
        }
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| substitute(v, namespace)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), substitute(v, namespace)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Whether `$(namespace)` appears in any string of `value`.
pub fn mentions_namespace(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains(NAMESPACE_VARIABLE),
        Value::Array(items) => items.iter().any(mentions_namespace),
        Value::Object(map) => map.values().any(mentions_namespace),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ObjectKey;
    use serde_json::json;

    fn template(fields: Value, labels: &[(&str, &str)]) -> Template {
        let fields: BTreeMap<String, Value> = serde_json::from_value(fields).unwrap();
        let per_namespace = fields.values().any(mentions_namespace)
            || labels.iter().any(|(_, v)| v.contains(NAMESPACE_VARIABLE));
        Template {
            fields,
            owner: SourceInfo {
                key: ObjectKey::bundle(Kind::ConfigMap, "t"),
                uid: "uid-t".into(),
                resource_version: String::new(),
                labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                annotations: Default::default(),
                created: 0,
                deleting: false,
                dropped: None,
            },
            per_namespace,
        }
    }

    #[test]
    fn the_namespace_name_is_put_into_every_string_and_nothing_else_is_templated() {
        let t = template(
            json!({"data": {"group": "$(namespace)-admins", "note": "{{request.object.metadata.name}}",
                            "twice": "$(namespace)/$(namespace)", "plain": "x"}}),
            &[("team", "$(namespace)")],
        );
        assert!(t.per_namespace);
        let (owner, payload) = t.for_namespace(Kind::ConfigMap, "team-a");
        let data = payload.data.unwrap();
        assert_eq!(data["group"], "team-a-admins");
        assert_eq!(data["twice"], "team-a/team-a");
        assert_eq!(
            data["note"], "{{request.object.metadata.name}}",
            "no other variable"
        );
        assert_eq!(data["plain"], "x");
        assert_eq!(owner.labels["team"], "team-a");
    }

    #[test]
    fn a_template_without_the_variable_is_the_same_everywhere() {
        let t = template(
            json!({"spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}),
            &[],
        );
        assert!(!t.per_namespace);
        let np = Kind::register(
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "networkpolicies",
        )
        .unwrap();
        assert_eq!(t.for_namespace(np, "a").1, t.for_namespace(np, "b").1);
        assert_eq!(
            serde_json::to_value(t.for_namespace(np, "a").1).unwrap(),
            json!({"spec": {"podSelector": {}, "policyTypes": ["Ingress"]}})
        );
    }

    #[test]
    fn role_bindings_to_a_namespaces_own_group() {
        let rb = Kind::register(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
        )
        .unwrap();
        let t = template(
            json!({"roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "$(namespace)-admins"}]}),
            &[],
        );
        let (_, payload) = t.for_namespace(rb, "payments");
        assert_eq!(payload.fields["subjects"][0]["name"], "payments-admins");
        assert_eq!(payload.fields["roleRef"]["name"], "admin");
    }
}
