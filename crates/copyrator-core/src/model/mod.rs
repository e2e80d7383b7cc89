//! The domain objects copyrator reasons about, apart from any I/O: the two kinds it copies,
//! references to sources and copies, and what it knows about namespaces and sources.

mod kind;
pub mod kind_table;
mod labels;
mod meta;

use std::{borrow::Cow, collections::BTreeMap, fmt};

pub use kind::{Kind, Kinds, MAX_KINDS, RegisterError, not_copyable, split_name};
pub use labels::Labels;
pub use meta::{ListSplitter, Meta, MetaItem, MetaList, MetaListMeta};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{DynamicResourceScope, Resource};
use serde::{Deserialize, Serialize};

/// A Secret or ConfigMap by kind, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(kind: Kind, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            kind,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// Whether the namespace and name are valid Kubernetes names (a namespace is a DNS label,
    /// a Secret or ConfigMap name a DNS subdomain). Keys from reviews that anyone may post
    /// are checked before they become jobs, and never reach a URL otherwise.
    pub fn is_valid(&self) -> bool {
        crate::selector::is_dns_label(&self.namespace) && self.kind.is_valid_name(&self.name)
    }

    /// `<namespace>/<name>`, the form of the `copyrator.io/source` annotation; for a bundle's
    /// stand-in, `copyrule/<name>`.
    pub fn namespaced_name(&self) -> String {
        if self.is_bundle() {
            return format!("copyrule/{}", self.name);
        }
        format!("{}/{}", self.namespace, self.name)
    }

    /// What stands for the source of a bundle's copies of `kind` (SPEC §3.2, Bundles): the
    /// CopyRule `rule` itself. Its namespace is empty, which no object's is, so it is never
    /// read, listed or written as an object.
    pub fn bundle(kind: Kind, rule: impl Into<String>) -> Self {
        Self::new(kind, "", rule)
    }

    /// Whether this is a bundle's stand-in source ([`ObjectKey::bundle`]).
    pub fn is_bundle(&self) -> bool {
        self.namespace.is_empty()
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_bundle() {
            return write!(f, "CopyRule {} (bundle)", self.name);
        }
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// What the planner needs to know about a namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceInfo {
    pub name: String,
    pub resource_version: String,
    pub labels: Labels,
    /// Its `copyrator.io/accept-from` annotation: which untrusted namespaces' sources it
    /// accepts copies from (SPEC §9.2).
    pub accept_from: Option<String>,
    /// Being deleted: no new content may be created in it.
    pub terminating: bool,
}

impl NamespaceInfo {
    /// What copyrator keeps of a namespace, from its metadata; `None` without a name.
    pub fn from_meta(meta: &Meta) -> Option<Self> {
        Some(Self {
            name: meta.name.clone()?,
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            labels: meta.labels.as_ref().map(Labels::from).unwrap_or_default(),
            accept_from: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(crate::marks::ACCEPT_FROM_ANNOTATION))
                .cloned(),
            terminating: meta.deletion_timestamp.is_some(),
        })
    }
}

/// What the planner needs to know about a source without reading its payload: its metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceInfo {
    pub key: ObjectKey,
    pub uid: String,
    pub resource_version: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Seconds since the epoch, for ordering rules deterministically.
    pub created: i64,
    pub deleting: bool,
    /// Its labels and annotations were over the cap of what copyrator keeps of a source of an
    /// untrusted namespace and were dropped (SPEC §9.7): their size in bytes.
    pub dropped: Option<usize>,
}

impl SourceInfo {
    pub fn from_meta(kind: Kind, meta: &Meta) -> Option<Self> {
        Some(Self {
            key: ObjectKey::new(kind, meta.namespace.clone()?, meta.name.clone()?),
            uid: meta.uid.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            labels: meta.labels.clone().unwrap_or_default(),
            annotations: meta.annotations.clone().unwrap_or_default(),
            created: meta
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_second())
                .unwrap_or_default(),
            deleting: meta.deletion_timestamp.is_some(),
            dropped: None,
        })
    }

    /// Bytes of the labels and annotations copyrator acts on: those a copy carries and
    /// copyrator's own configuration (what [`SourceInfo::kept`] keeps).
    pub fn metadata_bytes(&self) -> usize {
        let size = |m: &BTreeMap<String, String>| -> usize {
            m.iter()
                .filter(|(k, _)| kept_key(k))
                .map(|(k, v)| k.len() + v.len())
                .sum()
        };
        size(&self.labels) + size(&self.annotations)
    }

    /// What copyrator keeps of a source while it holds many (its indexes, a resync): the
    /// labels and annotations a copy carries and copyrator's own configuration, nothing else
    /// (tracking metadata such as `kubectl.kubernetes.io/last-applied-configuration` is never
    /// copied). Over `max_bytes` (a source of an untrusted namespace, SPEC §9.7), those are
    /// dropped too but for the opt-in label, and their size is noted: such a source makes no
    /// rule, and what it holds costs nothing here.
    pub fn kept(mut self, max_bytes: Option<usize>) -> Self {
        self.labels.retain(|k, _| kept_key(k));
        self.annotations.retain(|k, _| kept_key(k));
        let bytes = self.metadata_bytes();
        if max_bytes.is_some_and(|max| bytes > max) {
            self.labels
                .retain(|k, v| k == crate::marks::SOURCE_LABEL && v == "true");
            self.annotations.clear();
            self.dropped = Some(bytes);
        }
        self
    }

    /// Whether the object carries copyrator's `managed-by` mark: one of copyrator's copies (or
    /// an object made to look like one). A copy is never a source, by any path (SPEC §9.6):
    /// copies carry their source's labels and land in namespaces their source's owner chose,
    /// so a copy taken for a source would let a tenant's content travel on under another
    /// rule's trust.
    pub fn is_copy(&self) -> bool {
        self.labels
            .get(crate::marks::MANAGED_BY_LABEL)
            .map(String::as_str)
            == Some(crate::marks::MANAGED_BY_VALUE)
    }
}

/// Whether copyrator acts on a source's label or annotation `key`: one a copy carries, or
/// copyrator's own configuration.
fn kept_key(key: &str) -> bool {
    crate::marks::is_carried_key(key)
        || key.starts_with("copyrator.io/")
        || key == crate::marks::MANAGED_BY_LABEL
}

/// The part of an object that a copy carries (SPEC §3): a Secret's type and data, a
/// ConfigMap's data, and for every other kind its top-level fields but status
/// ([`Payload::for_kind`]). Its `Debug` shows keys and sizes, never values: it may be a
/// Secret's data.
#[derive(Clone, Default, PartialEq, Eq, Serialize)]
pub struct Payload {
    /// Secret type (`Opaque`, `kubernetes.io/dockerconfigjson`, ...).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Secret data (base64 strings as on the wire) or ConfigMap data (UTF-8 strings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<BTreeMap<String, String>>,
    /// ConfigMap binaryData (base64 strings).
    #[serde(
        rename = "binaryData",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub binary_data: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub immutable: Option<bool>,
    /// Every other top-level field (`spec`, `rules`, `roleRef`, `subjects`, ...): what a copy
    /// of a kind other than Secret and ConfigMap carries. Always empty for those two.
    #[serde(flatten)]
    pub fields: BTreeMap<String, serde_json::Value>,
}

/// Read as a map of top-level fields, of which those of a Secret or ConfigMap are taken out
/// when they have the shape a Secret or ConfigMap gives them; anything else stays in
/// [`Payload::fields`] (a custom resource's `data` may be any JSON).
impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut fields = BTreeMap::<String, serde_json::Value>::deserialize(d)?;
        fn take<T: serde::de::DeserializeOwned>(
            fields: &mut BTreeMap<String, serde_json::Value>,
            key: &str,
        ) -> Option<T> {
            let value = fields.remove(key)?;
            match T::deserialize(&value) {
                Ok(v) => Some(v),
                Err(_) => {
                    fields.insert(key.to_string(), value);
                    None
                }
            }
        }
        Ok(Payload {
            type_: take(&mut fields, "type"),
            data: take(&mut fields, "data"),
            binary_data: take(&mut fields, "binaryData"),
            immutable: take(&mut fields, "immutable"),
            fields,
        })
    }
}

/// Secrets of this type hold a token the API server minted for one ServiceAccount in one
/// namespace; copying it would hand that identity to other namespaces.
pub const SERVICE_ACCOUNT_TOKEN_TYPE: &str = "kubernetes.io/service-account-token";

/// Why an object is never copied, judged on its content (SPEC §3, §3.1): what its kind's row
/// in [`kind_table`] cannot say alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NeverCopied {
    /// A Secret of a type that is one identity's credential ([`kind_table::NEVER_COPIED_SECRET_TYPES`]).
    SecretType {
        type_: &'static str,
        why: &'static str,
    },
    /// An object of a kind other than Secret and ConfigMap names a container image at `path`:
    /// it runs code, or makes something run it.
    RunsCode { path: String },
}

impl fmt::Display for NeverCopied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NeverCopied::SecretType { type_, why } => {
                write!(f, "a Secret of type {type_} is never copied: {why}")
            }
            NeverCopied::RunsCode { path } => write!(
                f,
                "it names a container image at {path}: objects that run code are never copied"
            ),
        }
    }
}

/// Deepest nesting looked at for a container image; deeper content counts as one (the API
/// server's own limit on JSON nesting is far below what a legitimate object needs).
const MAX_IMAGE_DEPTH: usize = 64;

/// Where `value` names a container image (an object's non-empty string field `image`), as a
/// JSON path below `at`.
fn image_path(value: &serde_json::Value, at: &str, depth: usize) -> Option<String> {
    use serde_json::Value;
    if depth > MAX_IMAGE_DEPTH {
        return Some(at.to_string());
    }
    match value {
        Value::Object(map) => {
            if map
                .get("image")
                .and_then(Value::as_str)
                .is_some_and(|s| !s.trim().is_empty())
            {
                return Some(format!("{at}.image"));
            }
            map.iter()
                .find_map(|(k, v)| image_path(v, &format!("{at}.{k}"), depth + 1))
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| image_path(v, &format!("{at}[{i}]"), depth + 1)),
        _ => None,
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Sizes<'a>(&'a BTreeMap<String, String>);
        impl fmt::Debug for Sizes<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map()
                    .entries(
                        self.0
                            .iter()
                            .map(|(k, v)| (k, format!("<{} bytes>", v.len()))),
                    )
                    .finish()
            }
        }
        f.debug_struct("Payload")
            .field("type", &self.type_)
            .field("data", &self.data.as_ref().map(Sizes))
            .field("binary_data", &self.binary_data.as_ref().map(Sizes))
            .field("immutable", &self.immutable)
            .field("fields", &self.fields.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Payload {
    /// About how many bytes the payload takes as JSON.
    pub fn approx_bytes(&self) -> usize {
        let map = |m: &Option<BTreeMap<String, String>>| -> usize {
            m.iter().flatten().map(|(k, v)| k.len() + v.len() + 6).sum()
        };
        let fields: usize = self
            .fields
            .iter()
            .map(|(k, v)| k.len() + v.to_string().len() + 4)
            .sum();
        map(&self.data)
            + map(&self.binary_data)
            + self.type_.as_ref().map_or(0, String::len)
            + fields
    }

    pub fn is_immutable(&self) -> bool {
        self.immutable == Some(true)
    }

    /// Why an object of `kind` holding this payload is never copied, if it is not: a Secret of
    /// a credential's type, or another kind's object naming a container image (SPEC §3.1). The
    /// kinds that are never copied at all are refused before (their row in [`kind_table`]).
    pub fn never_copied(&self, kind: Kind) -> Option<NeverCopied> {
        if kind == Kind::ConfigMap {
            return None;
        }
        if kind == Kind::Secret {
            let type_ = self.type_.as_deref()?;
            let (type_, why) = kind_table::NEVER_COPIED_SECRET_TYPES
                .iter()
                .find(|(t, _)| *t == type_)?;
            return Some(NeverCopied::SecretType { type_, why });
        }
        self.fields
            .iter()
            .find_map(|(k, v)| image_path(v, k, 0).map(|path| NeverCopied::RunsCode { path }))
    }

    /// Keeps only what a copy of `kind` carries (SPEC §3.1): a Secret has no binaryData, a
    /// ConfigMap no type, neither other fields; any other kind carries its top-level fields
    /// but those the API server or a controller owns: `status`, and per kind the fields
    /// [`server_owned`] names.
    pub fn for_kind(mut self, kind: Kind) -> Self {
        if kind == Kind::Secret {
            self.binary_data = None;
            self.fields.clear();
        } else if kind == Kind::ConfigMap {
            self.type_ = None;
            self.fields.clear();
        } else {
            // Another kind's fields of those names are its own: back into the map.
            use serde_json::Value;
            let map = |m: BTreeMap<String, String>| {
                Value::Object(m.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
            };
            if let Some(v) = self.type_.take() {
                self.fields.insert("type".into(), Value::String(v));
            }
            if let Some(v) = self.data.take() {
                self.fields.insert("data".into(), map(v));
            }
            if let Some(v) = self.binary_data.take() {
                self.fields.insert("binaryData".into(), map(v));
            }
            if let Some(v) = self.immutable.take() {
                self.fields.insert("immutable".into(), Value::Bool(v));
            }
            self.fields.remove("status");
            for field in server_owned(kind) {
                self.fields.remove(*field);
            }
        }
        self
    }
}

/// Top-level fields of `kind` that the API server or one of its controllers writes, which a
/// copy therefore never carries (besides `status`, never carried for any kind).
pub fn server_owned(kind: Kind) -> &'static [&'static str] {
    kind.facts().server_owned
}

/// An object of a kind copyrator copies, as it reads and writes it: metadata plus
/// [`Payload`]. One type for every kind keeps a single code path; [`Kind`] is its dynamic type.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Object {
    #[serde(
        rename = "apiVersion",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub api_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(flatten)]
    pub payload: Payload,
}

impl Resource for Object {
    type DynamicType = Kind;
    type Scope = DynamicResourceScope;

    fn kind(dt: &Kind) -> Cow<'_, str> {
        dt.as_str().into()
    }
    fn group(dt: &Kind) -> Cow<'_, str> {
        dt.group().into()
    }
    fn version(dt: &Kind) -> Cow<'_, str> {
        dt.version().into()
    }
    fn api_version(dt: &Kind) -> Cow<'_, str> {
        dt.api_version().into()
    }
    fn plural(dt: &Kind) -> Cow<'_, str> {
        dt.plural().into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_json_round_trips_through_object() {
        let raw = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "ns", "resourceVersion": "7"},
            "type": "Opaque", "data": {"a": "YQ=="}, "immutable": true
        });
        let obj: Object = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(obj.payload.type_.as_deref(), Some("Opaque"));
        assert!(obj.payload.is_immutable());
        assert_eq!(serde_json::to_value(&obj).unwrap(), raw);
    }
    #[test]
    fn payload_for_kind_drops_foreign_fields() {
        let p = Payload {
            type_: Some("Opaque".into()),
            binary_data: Some(BTreeMap::new()),
            ..Default::default()
        };
        assert!(p.clone().for_kind(Kind::Secret).binary_data.is_none());
        assert!(p.for_kind(Kind::ConfigMap).type_.is_none());
    }

    #[test]
    fn other_kinds_carry_their_fields_but_status_and_server_owned_ones() {
        let sa = Kind::register("", "v1", "ServiceAccount", "serviceaccounts").unwrap();
        let widget = Kind::register("example.com", "v1", "Widget", "widgets").unwrap();
        let raw = json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "builder", "namespace": "ns"},
            "secrets": [{"name": "builder-token-abc"}],
            "imagePullSecrets": [{"name": "registry"}],
            "automountServiceAccountToken": false
        });
        let obj: Object = serde_json::from_value(raw).unwrap();
        let p = obj.payload.for_kind(sa);
        assert_eq!(
            p.fields.keys().collect::<Vec<_>>(),
            ["automountServiceAccountToken", "imagePullSecrets"]
        );
        // A custom resource's `data` and `type` are its own, whatever their shape.
        let raw = json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "ns"},
            "type": "round", "data": {"size": 3, "tags": ["a"]}, "spec": {"x": 1},
            "status": {"ready": true}
        });
        let obj: Object = serde_json::from_value(raw).unwrap();
        let p = obj.payload.for_kind(widget);
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            json!({"type": "round", "data": {"size": 3, "tags": ["a"]}, "spec": {"x": 1}})
        );
        // A string map named `data` is taken out and put back as it was.
        let raw = json!({"data": {"a": "b"}, "immutable": true, "spec": {}});
        let p: Payload = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(serde_json::to_value(p.for_kind(widget)).unwrap(), raw);
        // Secrets and ConfigMaps carry no other field.
        let p: Payload = serde_json::from_value(json!({"data": {}, "spec": {}})).unwrap();
        assert!(p.for_kind(Kind::Secret).fields.is_empty());
    }

    #[test]
    fn payload_debug_never_shows_values() {
        let p = Payload {
            type_: Some("Opaque".into()),
            data: Some([("password".to_string(), "c2VjcmV0".to_string())].into()),
            ..Default::default()
        };
        let shown = format!(
            "{p:?} {:?}",
            Object {
                payload: p.clone(),
                ..Default::default()
            }
        );
        assert!(
            shown.contains("password") && shown.contains("<8 bytes>"),
            "{shown}"
        );
        assert!(!shown.contains("c2VjcmV0"), "{shown}");
    }
}
