//! Metadata as copyrator reads it from LISTs, GETs and watches: what the planner needs and
//! nothing else, with `managedFields` reduced to one fact while parsing.

use std::{collections::BTreeMap, fmt};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::Deserialize;

/// The metadata copyrator reads from LISTs and GETs: what the planner needs and nothing else.
/// `managedFields` (often the largest part of metadata) is reduced while parsing to the one
/// fact copyrator uses, so a list of thousands of copies never sits in memory as JSON trees.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    /// Bumped by the API server when the spec changes, not the status (custom resources).
    pub generation: Option<i64>,
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
    pub creation_timestamp: Option<Time>,
    pub deletion_timestamp: Option<Time>,
    /// Some field manager other than copyrator owns payload or metadata fields: the sign,
    /// visible without reading the payload, that someone edited a copy by hand.
    #[serde(
        default,
        rename = "managedFields",
        deserialize_with = "edited_by_others"
    )]
    pub edited_by_others: bool,
}

/// From a full object's metadata (GET, admission): `managedFields` are not consulted
/// (`edited_by_others` is false); only LISTs of copies need that fact.
impl From<&ObjectMeta> for Meta {
    fn from(m: &ObjectMeta) -> Self {
        Self {
            name: m.name.clone(),
            namespace: m.namespace.clone(),
            uid: m.uid.clone(),
            resource_version: m.resource_version.clone(),
            generation: m.generation,
            labels: m.labels.clone(),
            annotations: m.annotations.clone(),
            creation_timestamp: m.creation_timestamp.clone(),
            deletion_timestamp: m.deletion_timestamp.clone(),
            edited_by_others: false,
        }
    }
}

/// A metadata-only list, as the API server sends it.
#[derive(Debug, Default, Deserialize)]
pub struct MetaList {
    #[serde(default)]
    pub metadata: MetaListMeta,
    /// `null` when the list is empty.
    #[serde(default)]
    pub items: Option<Vec<MetaItem>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct MetaListMeta {
    #[serde(rename = "continue", default)]
    pub continue_: Option<String>,
    /// The version the list is at: a watch started from it misses nothing the list did not show.
    #[serde(rename = "resourceVersion", default)]
    pub resource_version: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct MetaItem {
    #[serde(default)]
    pub metadata: Meta,
}

/// Splits a list response, fed in the chunks the connection delivers, into its items (each
/// element of the top-level `items` array as a JSON text of its own) and the rest (the list with
/// `items` emptied, for [`MetaList`]'s `metadata`). A list of thousands of objects is then
/// parsed one object at a time, as it arrives: neither the whole text nor every parsed item is
/// ever held at once.
#[derive(Debug, Default)]
pub struct ListSplitter {
    /// Nesting depth of objects and arrays outside strings (1: inside the list object).
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// Inside the top-level array (the only array a list has at depth 1: `items`).
    in_items: bool,
    /// The item being read.
    item: Vec<u8>,
    /// Everything but the items.
    rest: Vec<u8>,
}

impl ListSplitter {
    /// Reads `bytes`, calling `on_item` with each item completed by them. An element that is
    /// not an object is passed on as well (and fails to parse as an item).
    pub fn feed<E>(
        &mut self,
        bytes: &[u8],
        mut on_item: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        for &b in bytes {
            // Between items: separators and whitespace belong to no one.
            let element = self.in_items && self.depth >= 2;
            if self.in_string {
                self.push(element, b);
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match b {
                b'"' => {
                    self.in_string = true;
                    self.push(element, b);
                }
                b'[' if self.depth == 1 => {
                    self.in_items = true;
                    self.depth += 1;
                    self.rest.push(b);
                }
                b'{' | b'[' => {
                    self.depth += 1;
                    self.push(element, b);
                }
                b']' if self.in_items && self.depth == 2 => {
                    self.emit(&mut on_item)?;
                    self.in_items = false;
                    self.depth -= 1;
                    self.rest.push(b);
                }
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    self.push(element, b);
                    if self.in_items && self.depth == 2 {
                        self.emit(&mut on_item)?;
                    }
                }
                b',' if self.in_items && self.depth == 2 => self.emit(&mut on_item)?,
                b' ' | b'\n' | b'\r' | b'\t' if element => {}
                _ => self.push(element, b),
            }
        }
        Ok(())
    }

    /// The list without its items, once every chunk was fed.
    pub fn finish(self) -> Vec<u8> {
        self.rest
    }

    fn push(&mut self, element: bool, b: u8) {
        if element {
            self.item.push(b);
        } else {
            self.rest.push(b);
        }
    }

    fn emit<E>(&mut self, on_item: &mut impl FnMut(&[u8]) -> Result<(), E>) -> Result<(), E> {
        if self.item.is_empty() {
            return Ok(());
        }
        let done = on_item(&self.item);
        self.item.clear();
        done
    }
}

/// Whether any managedFields entry of a manager other than copyrator touches content.
fn edited_by_others<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    #[derive(Deserialize)]
    struct Entry {
        manager: Option<String>,
        #[serde(rename = "fieldsV1", default)]
        fields: Option<TopFields>,
    }
    let entries: Option<Vec<Entry>> = Option::deserialize(d)?;
    Ok(entries.into_iter().flatten().any(|e| {
        e.manager.as_deref() != Some(crate::marks::FIELD_MANAGER)
            && e.fields.is_some_and(|f| f.content)
    }))
}

/// The top level of a `fieldsV1` set, reduced to: does it own payload, labels or annotations?
/// Nested values are skipped without being built.
struct TopFields {
    content: bool,
}

impl<'de> Deserialize<'de> for TopFields {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, Visitor};

        /// `f:metadata`: owns labels or annotations?
        struct MetadataFields(bool);
        impl<'de> Deserialize<'de> for MetadataFields {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = MetadataFields;
                    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                        f.write_str("a fieldsV1 map")
                    }
                    fn visit_map<A: MapAccess<'de>>(
                        self,
                        mut map: A,
                    ) -> Result<MetadataFields, A::Error> {
                        let mut owns = false;
                        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                            owns |= matches!(key.as_ref(), "f:labels" | "f:annotations");
                            map.next_value::<IgnoredAny>()?;
                        }
                        Ok(MetadataFields(owns))
                    }
                }
                d.deserialize_map(V)
            }
        }

        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TopFields;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a fieldsV1 map")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TopFields, A::Error> {
                let mut content = false;
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    match key.as_ref() {
                        "f:data" | "f:binaryData" | "f:type" | "f:immutable" | "f:stringData" => {
                            content = true;
                            map.next_value::<IgnoredAny>()?;
                        }
                        "f:metadata" => content |= map.next_value::<MetadataFields>()?.0,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(TopFields { content })
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn listed(managed_fields: serde_json::Value) -> Meta {
        serde_json::from_value(json!({"name": "c", "managedFields": managed_fields})).unwrap()
    }

    #[test]
    fn empty_list_has_null_items() {
        let list: MetaList = serde_json::from_str(r#"{"kind":"PartialObjectMetadataList","metadata":{"resourceVersion":"5"},"items":null}"#).unwrap();
        assert!(list.items.unwrap_or_default().is_empty());
    }

    /// Splits `text` fed in chunks of `size` bytes: the items, and the rest.
    fn split(text: &str, size: usize) -> (Vec<String>, String) {
        let mut splitter = ListSplitter::default();
        let mut items = Vec::new();
        for chunk in text.as_bytes().chunks(size) {
            splitter
                .feed(chunk, |item| {
                    items.push(String::from_utf8(item.to_vec()).unwrap());
                    Ok::<_, ()>(())
                })
                .unwrap();
        }
        (items, String::from_utf8(splitter.finish()).unwrap())
    }

    #[test]
    fn a_list_is_split_into_its_items_in_any_chunks() {
        let text = r#"{"kind":"PartialObjectMetadataList","metadata":{"resourceVersion":"5","continue":"c[1]{"},
            "items": [ {"metadata":{"name":"a","labels":{"x":"}]\"{["},"managedFields":[{"f":{}}]}},
            {"metadata":{"name":"b\\","annotations":{"a":"[\\\"]"}}} ] , "extra":{"y":[1,2]}}"#;
        let expected_items = [
            r#"{"metadata":{"name":"a","labels":{"x":"}]\"{["},"managedFields":[{"f":{}}]}}"#,
            r#"{"metadata":{"name":"b\\","annotations":{"a":"[\\\"]"}}}"#,
        ];
        for size in [1, 2, 3, 7, 64, text.len()] {
            let (items, rest) = split(text, size);
            assert_eq!(items, expected_items, "chunks of {size}");
            let rest: serde_json::Value = serde_json::from_str(&rest).unwrap();
            assert_eq!(
                rest,
                json!({"kind":"PartialObjectMetadataList","metadata":{"resourceVersion":"5","continue":"c[1]{"},"items":[],"extra":{"y":[1,2]}})
            );
            for item in &items {
                let parsed: MetaItem = serde_json::from_str(item).unwrap();
                assert!(parsed.metadata.name.is_some());
            }
        }
        let (items, rest) = split(r#"{"metadata":{},"items":null}"#, 5);
        assert!(items.is_empty());
        let list: MetaList = serde_json::from_str(&rest).unwrap();
        assert!(list.items.is_none());
        let (items, _) = split(r#"{"items":[{"a":1},null]}"#, 4);
        assert_eq!(items, [r#"{"a":1}"#, "null"]);
    }

    #[test]
    fn hand_edits_show_in_managed_fields() {
        let ours = json!({"manager": "copyrator", "operation": "Update", "fieldsV1": {"f:data": {"f:a": {}}}});
        let kubectl_data = json!({"manager": "kubectl-edit", "operation": "Update", "fieldsV1": {"f:data": {"f:a": {}}}});
        let kubectl_label = json!({"manager": "kubectl-label", "fieldsV1": {"f:metadata": {"f:labels": {"f:x": {}}}}});
        let finalizer =
            json!({"manager": "other", "fieldsV1": {"f:metadata": {"f:finalizers": {".": {}}}}});
        assert!(!listed(json!([ours.clone()])).edited_by_others);
        assert!(listed(json!([ours.clone(), kubectl_data])).edited_by_others);
        assert!(listed(json!([ours.clone(), kubectl_label])).edited_by_others);
        assert!(!listed(json!([ours, finalizer])).edited_by_others);
        assert!(!listed(json!(null)).edited_by_others);
        let none: Meta = serde_json::from_value(json!({"name": "c"})).unwrap();
        assert!(!none.edited_by_others);
    }
}
