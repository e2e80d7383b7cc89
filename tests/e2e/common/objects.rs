//! Sources and copies as tests write and read them: Secret and ConfigMap builders, and the
//! values they hold.

use std::collections::BTreeMap;

use k8s_openapi::{
    api::core::v1::{ConfigMap, Secret},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

/// A Secret, e.g. a source with the shell-operator style inline rule (labels and annotations).
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

/// An object holding string values by key: a Secret (decoded `data`) or a ConfigMap (`data`).
pub trait Data {
    fn value(&self, key: &str) -> Option<String>;
}

impl Data for Secret {
    fn value(&self, key: &str) -> Option<String> {
        secret_value(self, key)
    }
}

impl Data for ConfigMap {
    fn value(&self, key: &str) -> Option<String> {
        self.data.as_ref()?.get(key).cloned()
    }
}

/// A predicate for the waits: the object holds `key` = `want`.
pub fn holding<K: Data>(key: &str, want: &str) -> impl Fn(&K) -> bool {
    let (key, want) = (key.to_string(), want.to_string());
    move |o| o.value(&key).as_deref() == Some(want.as_str())
}

/// A self-signed CA certificate with common name `name`, PEM, made now.
pub fn ca_cert(name: &str) -> String {
    let key = rcgen::KeyPair::generate().expect("a key pair");
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).expect("a name");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.self_signed(&key).expect("a certificate").pem()
}
