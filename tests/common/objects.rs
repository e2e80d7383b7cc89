//! Sources and copies as tests write and read them: Secret and ConfigMap builders, and the
//! values they hold.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{ConfigMap, Secret},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::Resource;

/// A Secret source with the shell-operator style inline rule.
pub fn secret(
    name: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
    data: &[(&str, &str)],
) -> Secret {
    Secret {
        metadata: meta(name, labels, annotations),
        string_data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        type_: Some("Opaque".into()),
        ..Default::default()
    }
}

pub fn config_map(
    name: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
    data: &[(&str, &str)],
) -> ConfigMap {
    ConfigMap {
        metadata: meta(name, labels, annotations),
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

fn meta(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> ObjectMeta {
    let map = |pairs: &[(&str, &str)]| -> Option<BTreeMap<String, String>> {
        (!pairs.is_empty()).then(|| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
    };
    ObjectMeta {
        name: Some(name.into()),
        labels: map(labels),
        annotations: map(annotations),
        ..Default::default()
    }
}

/// Decoded value of one key of a Secret.
pub fn secret_value(s: &Secret, key: &str) -> Option<String> {
    s.data
        .as_ref()?
        .get(key)
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
}

/// Name of an object, for messages.
pub fn name_of<K: Resource>(o: &K) -> String {
    o.meta().name.clone().unwrap_or_default()
}
