//! What a copy is (SPEC §3): the object built from a source, its marks, and the content hash
//! that lets copyrator skip writes when a copy is already identical.

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::{
    copyrule::DeletionPolicy,
    marks,
    model::{Kind, Object, ObjectKey, Payload, SourceInfo},
    rules::Rule,
    transform::Refused,
};

/// Only the labels or annotations a copy carries over from its source.
pub fn carried(map: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    map.iter()
        .filter(|(k, _)| marks::is_carried_key(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Hash of everything a copy carries: payload plus carried labels and annotations.
/// Computed the same way from a source (what the copy should hold) and from a copy (what it
/// holds), because copyrator's marks are exactly the keys that are never carried.
pub fn content_hash(
    kind: Kind,
    payload: &Payload,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> String {
    #[derive(Serialize)]
    struct Canonical<'a> {
        kind: Kind,
        payload: &'a Payload,
        labels: BTreeMap<&'a String, &'a String>,
        annotations: BTreeMap<&'a String, &'a String>,
    }
    fn keep(m: &BTreeMap<String, String>) -> BTreeMap<&String, &String> {
        m.iter().filter(|(k, _)| marks::is_carried_key(k)).collect()
    }
    let canonical = Canonical {
        kind,
        payload,
        labels: keep(labels),
        annotations: keep(annotations),
    };
    // BTreeMaps serialize in key order, so the encoding is deterministic.
    let bytes = serde_json::to_vec(&canonical).unwrap_or_default();
    let digest = Sha256::digest(&bytes);
    let mut hex = String::with_capacity(7 + 40);
    hex.push_str("sha256:");
    for b in &digest[..20] {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

/// The hash a copy of `source` with `payload` must carry.
pub fn source_hash(source: &SourceInfo, payload: &Payload) -> String {
    copy_hash(source.key.kind, source, payload)
}

/// The hash a copy of `kind` made of `source` must carry, `payload` being what the copy holds
/// (the source's, or as a rule's transform shaped it, SPEC §3.2).
pub fn copy_hash(kind: Kind, source: &SourceInfo, payload: &Payload) -> String {
    content_hash(kind, payload, &source.labels, &source.annotations)
}

/// The hash of what an existing copy actually holds (for hand-edit detection).
pub fn object_hash(kind: Kind, obj: &Object) -> String {
    let empty = BTreeMap::new();
    content_hash(
        kind,
        &obj.payload.clone().for_kind(kind),
        obj.metadata.labels.as_ref().unwrap_or(&empty),
        obj.metadata.annotations.as_ref().unwrap_or(&empty),
    )
}

/// copyrator's marks on a copy (SPEC §3): what identifies it as managed, and by whom.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Marks {
    /// The copy's kind: its source's, or the one its rule makes it (SPEC §3.2).
    pub kind: Kind,
    pub source: ObjectKey,
    pub source_uid: String,
    pub rule: String,
    pub deletion_policy: DeletionPolicy,
    pub content_hash: String,
    /// The rule makes read-only copies: label [`marks::READ_ONLY`], on which the read-only
    /// webhook's objectSelector keys (SPEC §4 item 11).
    pub read_only: bool,
}

impl Marks {
    pub fn new(rule: &Rule, source: &SourceInfo, content_hash: String) -> Self {
        Self {
            kind: rule.transform.target_kind(source.key.kind),
            source: source.key.clone(),
            source_uid: source.uid.clone(),
            rule: rule.id.mark(),
            deletion_policy: rule.deletion_policy,
            content_hash,
            read_only: rule.read_only,
        }
    }

    fn labels(&self) -> Vec<(&'static str, String)> {
        let mut labels = vec![
            (marks::MANAGED_BY_LABEL, marks::MANAGED_BY_VALUE.to_string()),
            (marks::SOURCE_UID_LABEL, self.source_uid.clone()),
        ];
        if self.read_only {
            labels.push((marks::READ_ONLY, "true".to_string()));
        }
        labels
    }

    fn annotations(&self) -> Vec<(&'static str, String)> {
        let mut annotations = vec![
            (marks::SOURCE_ANNOTATION, self.source.namespaced_name()),
            (marks::CONTENT_HASH_ANNOTATION, self.content_hash.clone()),
            (marks::RULE_ANNOTATION, self.rule.clone()),
            (
                marks::DELETION_POLICY_ANNOTATION,
                self.deletion_policy.as_str().to_string(),
            ),
        ];
        // Only where it differs: the marks of every other copy stay what they were. A
        // bundle's copies name their rule as their source (SPEC §3.2, Bundles).
        if self.source.is_bundle() {
            annotations.push((
                marks::SOURCE_KIND_ANNOTATION,
                marks::BUNDLE_SOURCE_KIND.into(),
            ));
        } else if self.source.kind != self.kind {
            annotations.push((marks::SOURCE_KIND_ANNOTATION, self.source.kind.name()));
        }
        annotations
    }
}

/// What every copy of one source made by one rule shares: name, metadata, marks and the
/// payload, which exists once however many namespaces get a copy (a 1 MiB Secret fanned out
/// to 500 namespaces is 1 MiB in memory, not 500). The rule's transform (SPEC §3.2) is applied
/// here, once per source version and rule, and the content hash is of its result.
#[derive(Debug)]
pub struct CopyTemplate {
    pub kind: Kind,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub payload: Arc<Payload>,
    pub marks: Marks,
    /// Keys the rule asks for that the source lacks: the copies are made without them.
    pub missing_keys: Vec<String>,
}

impl CopyTemplate {
    /// The copies of `source` (with `payload`, as [`Payload::for_kind`] keeps the source's
    /// kind) that `rule` makes; refused when the rule's transform refuses the payload.
    pub fn new(rule: &Rule, source: &SourceInfo, payload: &Arc<Payload>) -> Result<Self, Refused> {
        Self::shaped_by(rule, &rule.transform, source, payload)
    }

    /// The copies of `source` that `rule` makes, shaped by `transform`: the rule's own, its
    /// truststores' passwords read ([`crate::transform::Formats::with_passwords`]).
    pub fn shaped_by(
        rule: &Rule,
        transform: &crate::transform::Transform,
        source: &SourceInfo,
        payload: &Arc<Payload>,
    ) -> Result<Self, Refused> {
        let kind = transform.target_kind(source.key.kind);
        let (payload, missing_keys) = if transform.is_identity() {
            (Arc::clone(payload), Vec::new())
        } else {
            let shaped = transform.apply(source.key.kind, payload)?;
            (Arc::new(shaped.payload), shaped.missing)
        };
        let marks = Marks::new(rule, source, copy_hash(kind, source, &payload));
        let mut labels = carried(&source.labels);
        let mut annotations = carried(&source.annotations);
        if rule.create_once {
            // It belongs to its namespace once made (SPEC §3.4): no ownership marks, only
            // which rule made it.
            annotations.insert(marks::CREATED_BY_ANNOTATION.into(), rule.id.mark());
        } else {
            labels.extend(marks.labels().into_iter().map(|(k, v)| (k.to_string(), v)));
            annotations.extend(
                marks
                    .annotations()
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v)),
            );
        }
        Ok(Self {
            kind,
            name: rule.target_name(&source.key.name).to_string(),
            labels,
            annotations,
            payload,
            marks,
            missing_keys,
        })
    }
}

/// A copy as it should exist: a template and a namespace.
#[derive(Clone, Debug)]
pub struct DesiredCopy {
    pub key: ObjectKey,
    pub template: Arc<CopyTemplate>,
}

impl PartialEq for DesiredCopy {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
            && (Arc::ptr_eq(&self.template, &other.template)
                || self.template.marks == other.template.marks)
    }
}

impl DesiredCopy {
    /// The copy `template` describes, in `namespace`.
    pub fn in_namespace(template: &Arc<CopyTemplate>, namespace: &str) -> Self {
        Self {
            key: ObjectKey::new(template.kind, namespace, &template.name),
            template: Arc::clone(template),
        }
    }

    /// Builds the copy of `source` (with `payload`) that `rule` wants in `namespace`.
    pub fn build(
        rule: &Rule,
        source: &SourceInfo,
        payload: &Payload,
        namespace: &str,
    ) -> Result<Self, Refused> {
        let payload = Arc::new(payload.clone().for_kind(source.key.kind));
        let template = Arc::new(CopyTemplate::new(rule, source, &payload)?);
        Ok(Self::in_namespace(&template, namespace))
    }

    pub fn marks(&self) -> &Marks {
        &self.template.marks
    }

    /// The whole object (a copy of the payload: for tests and inspection, not for writes).
    pub fn object(&self) -> Object {
        Object {
            api_version: self.key.kind.api_version(),
            kind: self.key.kind.as_str().into(),
            metadata: ObjectMeta {
                name: Some(self.key.name.clone()),
                namespace: Some(self.key.namespace.clone()),
                labels: Some(self.template.labels.clone()),
                annotations: Some(self.template.annotations.clone()),
                ..Default::default()
            },
            payload: (*self.template.payload).clone(),
        }
    }

    /// The request body of a create (no resourceVersion) or a preconditioned replace,
    /// serialized from the shared parts without copying the payload first.
    pub fn body(&self, resource_version: Option<&str>) -> serde_json::Result<Vec<u8>> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Meta<'a> {
            name: &'a str,
            namespace: &'a str,
            labels: &'a BTreeMap<String, String>,
            annotations: &'a BTreeMap<String, String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            resource_version: Option<&'a str>,
        }
        #[derive(Serialize)]
        struct Body<'a> {
            #[serde(rename = "apiVersion")]
            api_version: String,
            kind: &'static str,
            metadata: Meta<'a>,
            #[serde(flatten)]
            payload: &'a Payload,
        }
        let mut out = Vec::with_capacity(self.approx_bytes());
        serde_json::to_writer(
            &mut out,
            &Body {
                api_version: self.key.kind.api_version(),
                kind: self.key.kind.as_str(),
                metadata: Meta {
                    name: &self.key.name,
                    namespace: &self.key.namespace,
                    labels: &self.template.labels,
                    annotations: &self.template.annotations,
                    resource_version,
                },
                payload: &self.template.payload,
            },
        )?;
        Ok(out)
    }

    /// About how many bytes a request to write this copy takes (payload plus metadata).
    pub fn approx_bytes(&self) -> usize {
        let map = |m: &BTreeMap<String, String>| -> usize {
            m.iter().map(|(k, v)| k.len() + v.len() + 6).sum()
        };
        256 + self.template.payload.approx_bytes()
            + map(&self.template.labels)
            + map(&self.template.annotations)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{plan::ManagedCopy, rules::Rule};

    fn source() -> SourceInfo {
        SourceInfo {
            key: ObjectKey::new(Kind::Secret, "default", "mysecret"),
            uid: "uid-1".into(),
            resource_version: "5".into(),
            labels: [
                (marks::SOURCE_LABEL, "true"),
                ("team", "platform"),
                ("app.kubernetes.io/managed-by", "Helm"),
                ("app.kubernetes.io/instance", "release-1"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            annotations: [
                (marks::NAMESPACE_SELECTOR_ANNOTATION, "secret=yes"),
                ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
                ("meta.helm.sh/release-name", "x"),
                ("argocd.argoproj.io/tracking-id", "y"),
                ("description", "registry credentials"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            created: 0,
            deleting: false,
            dropped: None,
        }
    }

    fn payload(value: &str) -> Payload {
        Payload {
            type_: Some("Opaque".into()),
            data: Some([("password".to_string(), value.to_string())].into()),
            binary_data: None,
            immutable: None,
            fields: Default::default(),
        }
    }

    #[test]
    fn copy_carries_payload_and_filtered_metadata_plus_marks() {
        let src = source();
        let rule = Rule::inline(&src).unwrap().unwrap();
        let copy = DesiredCopy::build(&rule, &src, &payload("c2VjcmV0"), "team-a").unwrap();
        let object = copy.object();
        let labels = object.metadata.labels.as_ref().unwrap();
        let annotations = object.metadata.annotations.as_ref().unwrap();
        assert_eq!(copy.key, ObjectKey::new(Kind::Secret, "team-a", "mysecret"));
        assert_eq!(labels.get("team").map(String::as_str), Some("platform"));
        assert_eq!(
            labels.get(marks::MANAGED_BY_LABEL).map(String::as_str),
            Some("copyrator")
        );
        assert_eq!(
            labels.get(marks::SOURCE_UID_LABEL).map(String::as_str),
            Some("uid-1")
        );
        assert!(
            !labels.contains_key(marks::SOURCE_LABEL),
            "a copy must not become a source"
        );
        assert!(!labels.contains_key("app.kubernetes.io/instance"));
        assert_eq!(
            annotations.get("description").map(String::as_str),
            Some("registry credentials")
        );
        assert_eq!(
            annotations
                .get(marks::SOURCE_ANNOTATION)
                .map(String::as_str),
            Some("default/mysecret")
        );
        assert_eq!(
            annotations.get(marks::RULE_ANNOTATION).map(String::as_str),
            Some("inline")
        );
        assert_eq!(
            annotations
                .get(marks::DELETION_POLICY_ANNOTATION)
                .map(String::as_str),
            Some("Delete")
        );
        for k in annotations.keys() {
            assert!(
                !k.starts_with("meta.helm.sh/")
                    && !k.starts_with("argocd.argoproj.io/")
                    && !k.starts_with("kubectl.kubernetes.io/"),
                "{k} must not be carried"
            );
        }
        assert!(!annotations.contains_key(marks::NAMESPACE_SELECTOR_ANNOTATION));
        assert_eq!(object.payload, payload("c2VjcmV0"));
        assert!(object.metadata.owner_references.is_none());
        assert!(object.metadata.finalizers.is_none());
        // What is sent is that object, and only a replace carries a resourceVersion.
        let sent: serde_json::Value = serde_json::from_slice(&copy.body(None).unwrap()).unwrap();
        assert_eq!(sent, serde_json::to_value(&object).unwrap());
        let replace: Object = serde_json::from_slice(&copy.body(Some("7")).unwrap()).unwrap();
        assert_eq!(replace.metadata.resource_version.as_deref(), Some("7"));
        let parsed =
            ManagedCopy::from_marks(Kind::Secret, labels, annotations, "1".into(), false).unwrap();
        assert!(copy.marks().recorded_in(&parsed));
    }

    #[test]
    fn hash_of_written_copy_equals_hash_of_source() {
        let src = source();
        let rule = Rule::inline(&src).unwrap().unwrap();
        let copy = DesiredCopy::build(&rule, &src, &payload("YQ=="), "team-a").unwrap();
        assert_eq!(
            object_hash(Kind::Secret, &copy.object()),
            copy.marks().content_hash
        );
    }

    #[test]
    fn hash_changes_with_data_type_immutability_and_carried_metadata_only() {
        let src = source();
        let base = source_hash(&src, &payload("YQ=="));
        assert_ne!(base, source_hash(&src, &payload("Yg==")));
        let mut p = payload("YQ==");
        p.immutable = Some(true);
        assert_ne!(base, source_hash(&src, &p));
        let mut p = payload("YQ==");
        p.type_ = Some("kubernetes.io/dockerconfigjson".into());
        assert_ne!(base, source_hash(&src, &p));

        let mut relabelled = src.clone();
        relabelled.labels.insert("team".into(), "other".into());
        assert_ne!(base, source_hash(&relabelled, &payload("YQ==")));

        let mut reconfigured = src.clone();
        reconfigured
            .annotations
            .insert(marks::NAMESPACE_SELECTOR_ANNOTATION.into(), "x=y".into());
        reconfigured.annotations.insert(
            "kubectl.kubernetes.io/last-applied-configuration".into(),
            "{\"x\":1}".into(),
        );
        assert_eq!(base, source_hash(&reconfigured, &payload("YQ==")));
    }

    #[test]
    fn hand_edited_copy_hash_differs() {
        let src = source();
        let rule = Rule::inline(&src).unwrap().unwrap();
        let copy = DesiredCopy::build(&rule, &src, &payload("YQ=="), "team-a").unwrap();
        let mut edited = copy.object();
        edited
            .payload
            .data
            .as_mut()
            .unwrap()
            .insert("extra".into(), "eA==".into());
        assert_ne!(
            object_hash(Kind::Secret, &edited),
            copy.marks().content_hash
        );
        let mut relabelled = copy.object();
        relabelled
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("hand".into(), "made".into());
        assert_ne!(
            object_hash(Kind::Secret, &relabelled),
            copy.marks().content_hash
        );
    }
}
