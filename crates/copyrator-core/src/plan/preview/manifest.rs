//! The documents of a manifest file as `copyrator plan` reads them: which are CopyRules,
//! Namespaces or sources of a kind copied here, and what each object becomes once `kubectl
//! apply` has merged it into the live one (its last-applied configuration decides which
//! fields it removes; fields someone else set stay).

use base64::Engine as _;
use serde_json::{Map, Value};

use crate::model::Kind;

/// The annotation in which `kubectl apply` keeps the configuration it last applied.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What a document is to `copyrator plan`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManifestKind {
    CopyRule,
    /// Its labels and consent decide which rules target it.
    Namespace,
    /// An object of a kind copyrator copies: its inline rule, and its content for every rule
    /// that copies it.
    Source(Kind),
}

/// One document of a manifest file, named.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    pub kind: ManifestKind,
    /// Empty for a CopyRule or a Namespace (cluster-scoped).
    pub namespace: String,
    pub name: String,
    /// The document as given, its namespace filled in, a Secret's `stringData` merged into its
    /// `data` as the API server merges it.
    pub object: Value,
}

impl Manifest {
    /// `CopyRule registry`, `Secret platform/cred`, `Namespace team-a`.
    pub fn describe(&self) -> String {
        match self.kind {
            ManifestKind::CopyRule => format!("CopyRule {}", self.name),
            ManifestKind::Namespace => format!("Namespace {}", self.name),
            ManifestKind::Source(kind) => format!("{kind} {}/{}", self.namespace, self.name),
        }
    }
}

/// A document `copyrator plan` cannot read: which one, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("document {index} ({what}): {message}")]
pub struct ManifestError {
    /// 1-based, in the order the documents were given.
    pub index: usize,
    pub what: String,
    pub message: String,
}

/// The documents copyrator plans, in order (the items of a `kind: List` in place), and a
/// note for each document it has nothing to say about (a Deployment, a kind not copied here).
/// `default_namespace` is where a namespaced document without `metadata.namespace` goes, as
/// `kubectl apply -n` puts it.
pub fn manifests(
    documents: Vec<Value>,
    default_namespace: &str,
) -> Result<(Vec<Manifest>, Vec<String>), ManifestError> {
    let mut flat = Vec::new();
    for doc in documents {
        flatten(doc, &mut flat);
    }
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for (i, doc) in flat.into_iter().enumerate() {
        let index = i + 1;
        let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind_name = doc.get("kind").and_then(Value::as_str).unwrap_or("");
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let name = doc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let what = format!("{kind_name} {name}");
        let fail = |message: String| ManifestError {
            index,
            what: what.clone(),
            message,
        };
        let kind = match (group, kind_name) {
            ("copyrator.io", "CopyRule") => ManifestKind::CopyRule,
            ("", "Namespace") => ManifestKind::Namespace,
            (group, kind_name) => match Kind::lookup(group, kind_name) {
                Some(kind) => ManifestKind::Source(kind),
                None if kind_name.is_empty() => {
                    return Err(fail("has no kind".into()));
                }
                None => {
                    skipped.push(format!(
                        "document {index} ({what}) is not planned: copyrator copies no {kind_name}{} here (--copy-kinds)",
                        if group.is_empty() { String::new() } else { format!(".{group}") }
                    ));
                    continue;
                }
            },
        };
        if name.is_empty() {
            return Err(fail("has no metadata.name".into()));
        }
        let mut object = doc;
        let namespace = match kind {
            ManifestKind::CopyRule | ManifestKind::Namespace => String::new(),
            ManifestKind::Source(_) => {
                let given = object
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .filter(|ns| !ns.is_empty())
                    .map(String::from);
                let ns = given.unwrap_or_else(|| default_namespace.to_string());
                object["metadata"]["namespace"] = Value::String(ns.clone());
                ns
            }
        };
        let valid = match kind {
            ManifestKind::CopyRule => crate::selector::is_dns_subdomain(&name),
            ManifestKind::Namespace => crate::selector::is_dns_label(&name),
            ManifestKind::Source(k) => {
                crate::model::ObjectKey::new(k, namespace.as_str(), name.as_str()).is_valid()
            }
        };
        if !valid {
            return Err(fail(format!(
                "{name:?}{} is not a valid name",
                if namespace.is_empty() {
                    String::new()
                } else {
                    format!(" in namespace {namespace:?}")
                }
            )));
        }
        match kind {
            ManifestKind::Source(k) if k == Kind::Secret => {
                merge_string_data(&mut object).map_err(fail)?;
            }
            ManifestKind::Source(k) if k == Kind::ConfigMap => {
                check_config_map(&object).map_err(fail)?;
            }
            _ => {}
        }
        out.push(Manifest {
            kind,
            namespace,
            name,
            object,
        });
    }
    Ok((out, skipped))
}

fn flatten(doc: Value, out: &mut Vec<Value>) {
    if doc.is_null() {
        return;
    }
    let is_list = doc
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
        && doc.get("items").is_some_and(Value::is_array);
    match (is_list, doc) {
        (true, Value::Object(mut map)) => {
            if let Some(Value::Array(items)) = map.remove("items") {
                for item in items {
                    flatten(item, out);
                }
            }
        }
        (_, doc) => out.push(doc),
    }
}

/// A Secret's `stringData` written into its `data`, base64-encoded, over keys of the same name,
/// as the API server stores it; its `data` values checked as the API server checks them.
fn merge_string_data(secret: &mut Value) -> Result<(), String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let Some(obj) = secret.as_object_mut() else {
        return Err("is not an object".into());
    };
    let string_data = obj.remove("stringData");
    let data = obj
        .entry("data")
        .or_insert_with(|| Value::Object(Map::new()));
    if data.is_null() {
        *data = Value::Object(Map::new());
    }
    let Some(data) = data.as_object_mut() else {
        return Err("data: is not a map of keys to base64 strings".into());
    };
    for (key, value) in data.iter() {
        let valid = value.as_str().is_some_and(|v| b64.decode(v).is_ok());
        if !valid {
            return Err(format!("data.{key}: is not a base64 string"));
        }
    }
    match string_data {
        None | Some(Value::Null) => {}
        Some(Value::Object(strings)) => {
            for (key, value) in strings {
                let Some(text) = value.as_str() else {
                    return Err(format!("stringData.{key}: is not a string"));
                };
                data.insert(key, Value::String(b64.encode(text)));
            }
        }
        Some(_) => return Err("stringData: is not a map of keys to strings".into()),
    }
    Ok(())
}

/// A ConfigMap's `data` (strings) and `binaryData` (base64), checked as the API server checks
/// them.
fn check_config_map(config_map: &Value) -> Result<(), String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    for field in ["data", "binaryData"] {
        let Some(values) = config_map.get(field).filter(|v| !v.is_null()) else {
            continue;
        };
        let Some(values) = values.as_object() else {
            return Err(format!("{field}: is not a map of keys to strings"));
        };
        for (key, value) in values {
            let valid = match (field, value.as_str()) {
                (_, None) => false,
                ("binaryData", Some(v)) => b64.decode(v).is_ok(),
                (_, Some(_)) => true,
            };
            if !valid {
                let what = if field == "data" {
                    "string"
                } else {
                    "base64 string"
                };
                return Err(format!("{field}.{key}: is not a {what}"));
            }
        }
    }
    Ok(())
}

/// The object `kubectl apply` of `file` makes of `live` (`None`: it creates `file`): the
/// three-way merge of a JSON merge patch, with the configuration last applied (the live
/// object's [`LAST_APPLIED`] annotation) telling which of the fields missing from `file` it
/// removes. Maps (labels, annotations, data) merge key by key; lists are replaced. The new
/// last-applied annotation is left out: copyrator never acts on it.
pub fn applied(live: Option<&Value>, file: &Value) -> Value {
    let Some(live) = live else {
        return file.clone();
    };
    let last: Option<Value> = live
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(LAST_APPLIED))
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str(s).ok());
    merge(live, last.as_ref(), file)
}

fn merge(live: &Value, last: Option<&Value>, file: &Value) -> Value {
    let (Value::Object(live), Value::Object(file)) = (live, file) else {
        return file.clone();
    };
    let last = last.and_then(Value::as_object);
    let mut out = live.clone();
    for key in last.into_iter().flat_map(|l| l.keys()) {
        if !file.contains_key(key) {
            out.remove(key);
        }
    }
    for (key, value) in file {
        if value.is_null() {
            out.remove(key);
            continue;
        }
        let merged = match live.get(key) {
            Some(l) => merge(l, last.and_then(|m| m.get(key)), value),
            None => value.clone(),
        };
        out.insert(key.clone(), merged);
    }
    Value::Object(out)
}

/// Whether applying a document creates its object, changes it, or leaves it as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManifestState {
    New,
    Changed,
    Unchanged,
}

impl ManifestState {
    /// Of `applied` ([`applied`]) beside `live`: labels, annotations and every field but the
    /// metadata the API server keeps and `status` compared.
    pub fn of(live: Option<&Value>, applied: &Value) -> Self {
        match live {
            None => ManifestState::New,
            Some(live) if content(live) == content(applied) => ManifestState::Unchanged,
            Some(_) => ManifestState::Changed,
        }
    }

    /// A stable name for scripts (`-o json`).
    pub fn code(self) -> &'static str {
        match self {
            ManifestState::New => "New",
            ManifestState::Changed => "Changed",
            ManifestState::Unchanged => "Unchanged",
        }
    }
}

/// What a user's apply can change of an object: its labels and annotations (but the
/// last-applied one) and its top-level fields but `status`.
fn content(object: &Value) -> Value {
    let mut out = object.as_object().cloned().unwrap_or_default();
    for key in ["status", "apiVersion", "kind"] {
        out.remove(key);
    }
    let meta = out.remove("metadata").unwrap_or(Value::Null);
    let map = |key: &str| {
        meta.get(key)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let mut annotations = map("annotations");
    annotations.remove(LAST_APPLIED);
    // An empty map is no map.
    out.retain(|_, v| !(v.is_null() || v.as_object().is_some_and(Map::is_empty)));
    out.insert(
        "metadata".into(),
        serde_json::json!({"labels": map("labels"), "annotations": annotations}),
    );
    Value::Object(out)
}
