//! The AdmissionReview as copyrator reads it: the request's identity, the old and new object's
//! metadata, and the rest of each object as raw JSON slices of the request body, compared and
//! parsed only where an endpoint needs them. A 1 MiB Secret's UPDATE review is ~2.7 MB of JSON;
//! parsed into full objects it would be twice that again, per request in flight.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::model::Meta;

pub use kube::core::admission::Operation;

/// `{"apiVersion": ..., "kind": "AdmissionReview", "request": {...}}`
#[derive(Deserialize)]
pub struct Review<'a> {
    #[serde(rename = "apiVersion", default)]
    pub api_version: Option<String>,
    #[serde(borrow, default)]
    pub request: Option<Request<'a>>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Options {
    #[serde(default)]
    pub field_manager: Option<String>,
}

/// Who made the request, as the API server authenticated them (anyone's to claim in a review
/// not sent by the API server: `--client-ca`, SPEC §9.8).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct UserInfo {
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub uid: Option<String>,
    #[serde(default)]
    pub groups: Option<Vec<String>>,
    #[serde(default)]
    pub extra: Option<std::collections::BTreeMap<String, Vec<String>>>,
}

/// The request of a review.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request<'a> {
    pub uid: String,
    pub kind: GroupVersionKind,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    pub operation: Operation,
    #[serde(borrow, default)]
    pub object: Option<Object<'a>>,
    #[serde(borrow, default)]
    pub old_object: Option<Object<'a>>,
    #[serde(default)]
    pub dry_run: Option<bool>,
    #[serde(default)]
    pub options: Option<Options>,
    #[serde(default)]
    pub user_info: UserInfo,
}

impl Request<'_> {
    pub fn is_dry_run(&self) -> bool {
        self.dry_run == Some(true)
    }

    /// The field manager of a CREATE or UPDATE, when the client set one.
    pub fn field_manager(&self) -> Option<&str> {
        self.options.as_ref()?.field_manager.as_deref()
    }
}

/// An object of a review: its metadata, and everything else as raw JSON.
#[derive(Debug, Deserialize)]
pub struct Object<'a> {
    #[serde(default)]
    pub metadata: Meta,
    #[serde(borrow, default, rename = "type")]
    pub type_: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub data: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "binaryData")]
    pub binary_data: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub immutable: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub spec: Option<&'a RawValue>,
}

impl Object<'_> {
    pub fn labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.metadata.labels.as_ref().unwrap_or(&EMPTY)
    }

    pub fn annotation(&self, key: &str) -> Option<&String> {
        self.metadata.annotations.as_ref()?.get(key)
    }

    /// The fields a copy carries, as written, for "did anything relevant change" comparisons.
    pub fn payload(&self) -> [Option<&str>; 4] {
        [self.type_, self.data, self.binary_data, self.immutable].map(|v| v.map(RawValue::get))
    }
}

/// Labels of an optional object.
pub fn labels<'o>(obj: Option<&'o Object<'_>>) -> Option<&'o BTreeMap<String, String>> {
    obj.map(Object::labels)
}

/// resourceVersion of an optional object.
pub fn resource_version(obj: Option<&Object<'_>>) -> Option<String> {
    obj.and_then(|o| o.metadata.resource_version.clone())
}

/// Whether an UPDATE changed anything copyrator cares about: payload, labels, annotations,
/// or the start of a deletion.
pub fn relevant_change(old: Option<&Object<'_>>, new: Option<&Object<'_>>) -> bool {
    match (old, new) {
        (Some(a), Some(b)) => {
            a.payload() != b.payload()
                || a.metadata.labels != b.metadata.labels
                || a.metadata.annotations != b.metadata.annotations
                || a.metadata.deletion_timestamp.is_some()
                    != b.metadata.deletion_timestamp.is_some()
        }
        (None, None) => false,
        _ => true,
    }
}

/// The answer to a review.
#[derive(Debug, Default, Serialize)]
pub struct Response {
    pub uid: String,
    pub allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// A JSONPatch (base64 on the wire).
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "base64_patch"
    )]
    pub patch: Option<Vec<u8>>,
    #[serde(rename = "patchType", skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<&'static str>,
}

#[derive(Debug, Serialize)]
pub struct Status {
    pub code: u16,
    pub message: String,
}

fn base64_patch<S: serde::Serializer>(patch: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
    use base64::Engine;
    match patch {
        Some(p) => s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(p)),
        None => s.serialize_none(),
    }
}

impl Response {
    pub fn allow(uid: &str) -> Self {
        Self {
            uid: uid.to_string(),
            allowed: true,
            ..Default::default()
        }
    }

    pub fn deny(mut self, message: String) -> Self {
        self.allowed = false;
        self.status = Some(Status { code: 403, message });
        self
    }

    /// The whole review around the answer, in the API version of the request.
    pub fn into_review(self, api_version: Option<String>) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": api_version.unwrap_or_else(|| "admission.k8s.io/v1".into()),
            "kind": "AdmissionReview",
            "response": self,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_review_is_read_without_copying_the_payload() {
        let body = serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u", "kind": {"group": "", "version": "v1", "kind": "Secret"},
                "name": "s", "namespace": "ns", "operation": "UPDATE",
                "userInfo": {"username": "admin"},
                "options": {"fieldManager": "kubectl"},
                "object": {"metadata": {"name": "s", "resourceVersion": "2", "labels": {"a": "b"}},
                           "type": "Opaque", "data": {"k": "djI="}},
                "oldObject": {"metadata": {"name": "s", "resourceVersion": "1", "labels": {"a": "b"}},
                              "type": "Opaque", "data": {"k": "djE="}},
                "dryRun": false
            }
        })
        .to_string();
        let review: Review = serde_json::from_str(&body).unwrap();
        let req = review.request.unwrap();
        assert_eq!(req.kind.kind, "Secret");
        assert_eq!(req.operation, Operation::Update);
        assert_eq!(req.field_manager(), Some("kubectl"));
        let (new, old) = (
            req.object.as_ref().unwrap(),
            req.old_object.as_ref().unwrap(),
        );
        assert_eq!(new.data.unwrap().get(), r#"{"k":"djI="}"#);
        assert!(relevant_change(Some(old), Some(new)));
        assert!(!relevant_change(Some(new), Some(new)));
        assert_eq!(resource_version(Some(old)).as_deref(), Some("1"));
    }

    #[test]
    fn answers_echo_the_uid_and_carry_warnings_and_denials() {
        let mut allow = Response::allow("u1");
        allow.warnings.push("careful".into());
        let v = allow.into_review(None);
        assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(v["response"]["uid"], "u1");
        assert_eq!(v["response"]["allowed"], true);
        assert_eq!(v["response"]["warnings"][0], "careful");
        assert!(v["response"].get("status").is_none());
        let v = Response::allow("u2").deny("no".into()).into_review(None);
        assert_eq!(v["response"]["allowed"], false);
        assert_eq!(v["response"]["status"]["message"], "no");
        let mut patched = Response::allow("u3");
        patched.patch = Some(b"[]".to_vec());
        patched.patch_type = Some("JSONPatch");
        let v = patched.into_review(None);
        assert_eq!(v["response"]["patch"], "W10=");
        assert_eq!(v["response"]["patchType"], "JSONPatch");
    }
}
