//! Objects written as a scenario names them, so that a test reads as what it checks:
//! `build::secret("cred").data("v", "1").source().copied_where("team=a")` is a source with
//! an inline rule, and `build::copy_rule("x").source(&ns, "cred").copied_to(&[&dest])` a
//! CopyRule. Each builder creates its object in the test's cluster (`create`) or gives it as
//! the API type (`build`) for tests that write it some other way.

use std::collections::BTreeMap;

use copyrator::{
    copyrule::{ConflictPolicy, CopyRuleSpec, DeletionPolicy},
    marks,
    model::Kind,
};
use k8s_openapi::{
    api::core::v1::{ConfigMap, Secret},
    apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta},
};
use kube::api::PostParams;

use super::TestEnv;

/// The metadata every builder of a namespaced object shares, and the inline rule's annotations.
#[derive(Clone, Default)]
pub struct Metadata {
    name: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
}

impl Metadata {
    fn object_meta(&self) -> ObjectMeta {
        let map = |m: &BTreeMap<String, String>| (!m.is_empty()).then(|| m.clone());
        ObjectMeta {
            name: Some(self.name.clone()),
            labels: map(&self.labels),
            annotations: map(&self.annotations),
            ..Default::default()
        }
    }
}

/// What a Secret and a ConfigMap builder share: labels, annotations and the inline rule.
pub trait Labelled: Sized {
    fn metadata(&mut self) -> &mut Metadata;

    fn label(mut self, key: &str, value: &str) -> Self {
        self.metadata().labels.insert(key.into(), value.into());
        self
    }

    fn annotation(mut self, key: &str, value: &str) -> Self {
        self.metadata().annotations.insert(key.into(), value.into());
        self
    }

    /// Opted in as a source (`copyrator.io/source: "true"`).
    fn source(self) -> Self {
        self.label(marks::SOURCE_LABEL, "true")
    }

    /// An inline rule copying into the namespaces this label selector matches.
    fn copied_where(self, selector: &str) -> Self {
        self.annotation(marks::NAMESPACE_SELECTOR_ANNOTATION, selector)
    }
}

/// A Secret of type `Opaque`.
#[derive(Clone)]
pub struct SecretBuilder {
    meta: Metadata,
    data: BTreeMap<String, String>,
}

/// A Secret named `name`, holding nothing yet.
pub fn secret(name: &str) -> SecretBuilder {
    SecretBuilder {
        meta: Metadata {
            name: name.into(),
            ..Default::default()
        },
        data: BTreeMap::new(),
    }
}

impl Labelled for SecretBuilder {
    fn metadata(&mut self) -> &mut Metadata {
        &mut self.meta
    }
}

impl SecretBuilder {
    pub fn data(mut self, key: &str, value: &str) -> Self {
        self.data.insert(key.into(), value.into());
        self
    }

    pub fn build(&self) -> Secret {
        Secret {
            metadata: self.meta.object_meta(),
            string_data: Some(self.data.clone()),
            type_: Some("Opaque".into()),
            ..Default::default()
        }
    }

    /// Creates it in `namespace`, as the test's user.
    pub async fn create(&self, env: &TestEnv, namespace: &str) -> Secret {
        env.secrets(namespace)
            .create(&PostParams::default(), &self.build())
            .await
            .unwrap_or_else(|e| panic!("creating Secret {namespace}/{}: {e}", self.meta.name))
    }
}

/// A ConfigMap.
#[derive(Clone)]
pub struct ConfigMapBuilder {
    meta: Metadata,
    data: BTreeMap<String, String>,
}

/// A ConfigMap named `name`, holding nothing yet.
pub fn config_map(name: &str) -> ConfigMapBuilder {
    ConfigMapBuilder {
        meta: Metadata {
            name: name.into(),
            ..Default::default()
        },
        data: BTreeMap::new(),
    }
}

impl Labelled for ConfigMapBuilder {
    fn metadata(&mut self) -> &mut Metadata {
        &mut self.meta
    }
}

impl ConfigMapBuilder {
    pub fn data(mut self, key: &str, value: &str) -> Self {
        self.data.insert(key.into(), value.into());
        self
    }

    pub fn build(&self) -> ConfigMap {
        ConfigMap {
            metadata: self.meta.object_meta(),
            data: Some(self.data.clone()),
            ..Default::default()
        }
    }

    /// Creates it in `namespace`, as the test's user.
    pub async fn create(&self, env: &TestEnv, namespace: &str) -> ConfigMap {
        env.config_maps(namespace)
            .create(&PostParams::default(), &self.build())
            .await
            .unwrap_or_else(|e| panic!("creating ConfigMap {namespace}/{}: {e}", self.meta.name))
    }
}

/// A CopyRule of Secrets, with `Delete` and `Skip` policies, until told otherwise.
#[derive(Clone)]
pub struct CopyRuleBuilder {
    base: String,
    spec: CopyRuleSpec,
}

/// A CopyRule named `base-<test id>` once created.
pub fn copy_rule(base: &str) -> CopyRuleBuilder {
    CopyRuleBuilder {
        base: base.into(),
        spec: CopyRuleSpec {
            kind: Kind::Secret.as_str().into(),
            deletion_policy: DeletionPolicy::Delete,
            conflict_policy: ConflictPolicy::Skip,
            ..Default::default()
        },
    }
}

fn match_labels(key: &str, value: &str) -> Option<LabelSelector> {
    Some(LabelSelector {
        match_labels: Some([(key.to_string(), value.to_string())].into()),
        match_expressions: None,
    })
}

impl CopyRuleBuilder {
    /// Copies objects of `kind` (Secret by default).
    pub fn of(mut self, kind: Kind) -> Self {
        self.spec.kind = kind.as_str().into();
        self
    }

    /// The one source `namespace/name`.
    pub fn source(mut self, namespace: &str, name: &str) -> Self {
        self.spec.source_namespace = namespace.into();
        self.spec.source_name = Some(name.into());
        self
    }

    /// Every object of `namespace` labelled `key=value` is a source.
    pub fn sources_labelled(mut self, namespace: &str, (key, value): (&str, &str)) -> Self {
        self.spec.source_namespace = namespace.into();
        self.spec.source_selector = match_labels(key, value);
        self
    }

    /// Copies into these namespaces by name.
    pub fn copied_to<S: AsRef<str>>(mut self, names: &[S]) -> Self {
        self.spec.namespaces = names.iter().map(|n| n.as_ref().to_string()).collect();
        self
    }

    /// Copies into the namespaces labelled `key=value`.
    pub fn copied_where(mut self, (key, value): (&str, &str)) -> Self {
        self.spec.namespace_selector = match_labels(key, value);
        self
    }

    pub fn build(&self) -> CopyRuleSpec {
        self.spec.clone()
    }

    /// Creates it (cluster-scoped, removed at cleanup); returns its name.
    pub async fn create(&self, env: &TestEnv) -> String {
        env.copy_rule(&self.base, self.build()).await
    }
}
