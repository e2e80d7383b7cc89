//! Kubernetes manifests generated from the code, so they cannot drift from it: the CopyRule
//! CRD, the ValidatingWebhookConfiguration for the admission endpoints and the
//! MutatingWebhookConfiguration of the Pod gate (SPEC §6.1, §6.3, §10).

use std::collections::BTreeMap;

use k8s_openapi::{
    ByteString,
    api::admissionregistration::v1::{
        MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
        ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
    },
    apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement, ObjectMeta},
};
use kube::CustomResourceExt;

use crate::{admission::Endpoint, copyrule::CopyRule, marks, model::Kind};

pub mod hub_join;

/// Where the API server reaches the webhooks.
#[derive(Clone, Debug)]
pub enum WebhookTarget {
    /// Base URL, e.g. `https://127.0.0.1:8443` (out-of-cluster runs).
    Url(String),
    /// In-cluster Service `namespace/name`, port 443.
    Service { namespace: String, name: String },
}

impl WebhookTarget {
    /// Parses `--service NS/NAME`.
    pub fn service(s: &str) -> Result<Self, String> {
        match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(Self::Service {
                    namespace: ns.into(),
                    name: name.into(),
                })
            }
            _ => Err(format!("--service must be NAMESPACE/NAME, got {s:?}")),
        }
    }

    fn client_config(&self, endpoint: Endpoint, ca_bundle: &[u8]) -> WebhookClientConfig {
        // None: copyrator publishes its own CA into the webhooks (`serve --tls-secret`).
        let ca = (!ca_bundle.is_empty()).then(|| ByteString(ca_bundle.to_vec()));
        match self {
            WebhookTarget::Url(base) => WebhookClientConfig {
                url: Some(format!("{}{}", base.trim_end_matches('/'), endpoint.path())),
                ca_bundle: ca,
                service: None,
            },
            WebhookTarget::Service { namespace, name } => WebhookClientConfig {
                url: None,
                ca_bundle: ca,
                service: Some(ServiceReference {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    path: Some(endpoint.path().into()),
                    port: Some(443),
                }),
            },
        }
    }

    fn own_namespace(&self) -> Option<&str> {
        match self {
            WebhookTarget::Service { namespace, .. } => Some(namespace),
            WebhookTarget::Url(_) => None,
        }
    }
}

/// Options of the generated webhook configuration.
#[derive(Clone, Debug)]
pub struct WebhookOptions {
    pub name: String,
    pub target: WebhookTarget,
    /// PEM of the CA that signed the serving certificate; empty: none (copyrator sets it).
    pub ca_bundle: Vec<u8>,
    pub exclude_namespaces: Vec<String>,
    pub timeout_seconds: i32,
}

fn rule(
    groups: &[&str],
    version: &str,
    resources: &[&str],
    operations: &[&str],
) -> RuleWithOperations {
    RuleWithOperations {
        api_groups: Some(groups.iter().map(|s| s.to_string()).collect()),
        api_versions: Some(vec![version.into()]),
        resources: Some(resources.iter().map(|s| s.to_string()).collect()),
        operations: Some(operations.iter().map(|s| s.to_string()).collect()),
        scope: None,
    }
}

/// Rules for the kinds copied: Secrets and ConfigMaps, and the kinds registered from
/// `--copy-kinds` in this process (one rule per API group; every version, since
/// `matchPolicy: Equivalent` would send the others converted anyway).
fn kind_rules(operations: &[&str]) -> Vec<RuleWithOperations> {
    let mut by_group: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for kind in Kind::all() {
        by_group
            .entry(kind.group())
            .or_default()
            .push(kind.plural());
    }
    by_group
        .into_iter()
        .map(|(group, resources)| {
            let version = if group.is_empty() { "v1" } else { "*" };
            rule(&[group], version, &resources, operations)
        })
        .collect()
}

fn match_labels(key: &str, value: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([(key.to_string(), value.to_string())])),
        match_expressions: None,
    }
}

/// Leaves out the excluded namespaces and copyrator's own (by the `kubernetes.io/metadata.name`
/// label of Kubernetes >= 1.21; on older servers the selector matches everything and the
/// exclusion is a no-op: copyrator still does nothing there).
/// The excluded namespaces, and copyrator's own unless `own` (the sources webhook: the chart
/// trusts its namespace's sources, whose changes must arrive at once like any source's).
fn namespace_selector(opts: &WebhookOptions, own: bool) -> Option<LabelSelector> {
    let mut excluded: Vec<String> = opts.exclude_namespaces.clone();
    if let Some(namespace) = opts.target.own_namespace().filter(|_| !own) {
        excluded.push(namespace.to_string());
    }
    excluded.sort();
    excluded.dedup();
    (!excluded.is_empty()).then(|| LabelSelector {
        match_labels: None,
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "kubernetes.io/metadata.name".into(),
            operator: "NotIn".into(),
            values: Some(excluded),
        }]),
    })
}

/// copyrator's copies labelled read-only: the only objects the read-only webhook is called for.
fn read_only_copies() -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([
            (
                marks::MANAGED_BY_LABEL.to_string(),
                marks::MANAGED_BY_VALUE.to_string(),
            ),
            (marks::READ_ONLY.to_string(), "true".to_string()),
        ])),
        match_expressions: None,
    }
}

fn metadata(opts: &WebhookOptions) -> ObjectMeta {
    ObjectMeta {
        name: Some(opts.name.clone()),
        labels: Some(BTreeMap::from([(
            "app.kubernetes.io/name".to_string(),
            "copyrator".to_string(),
        )])),
        ..Default::default()
    }
}

/// The ValidatingWebhookConfiguration for namespaces, sources and CopyRules: `failurePolicy:
/// Ignore` (copyrator never blocks the cluster), `sideEffects: NoneOnDryRun`, a short timeout,
/// an object selector so the API server only calls for sources, and excluded namespaces (see
/// `namespace_selector`). Copies are not here: their edits and deletions come from copyrator's
/// watch of them (SPEC §5), which costs the API server nothing per copy write. The one
/// exception is read-only copies (SPEC §4 item 11), selected by their label so that no other
/// copy's write calls it: `sideEffects: None`, since it queues nothing, and so a dryRun edit is
/// judged like the edit.
pub fn webhook_configuration(opts: &WebhookOptions) -> ValidatingWebhookConfiguration {
    let webhook = |endpoint: Endpoint,
                   rules: Vec<RuleWithOperations>,
                   object_selector: Option<LabelSelector>| ValidatingWebhook {
        name: format!("{}.copyrator.io", endpoint.name()),
        admission_review_versions: vec!["v1".into()],
        client_config: opts.target.client_config(endpoint, &opts.ca_bundle),
        failure_policy: Some("Ignore".into()),
        match_policy: Some("Equivalent".into()),
        namespace_selector: namespace_selector(opts, endpoint == Endpoint::Sources),
        object_selector,
        rules: Some(rules),
        side_effects: match endpoint {
            Endpoint::ReadOnly => "None".into(),
            _ => "NoneOnDryRun".into(),
        },
        timeout_seconds: Some(opts.timeout_seconds),
        match_conditions: None,
    };
    ValidatingWebhookConfiguration {
        metadata: metadata(opts),
        webhooks: Some(vec![
            webhook(
                Endpoint::Namespaces,
                vec![rule(&[""], "v1", &["namespaces"], &["CREATE", "UPDATE"])],
                None,
            ),
            webhook(
                Endpoint::Sources,
                kind_rules(&["CREATE", "UPDATE", "DELETE"]),
                Some(match_labels(marks::SOURCE_LABEL, "true")),
            ),
            webhook(
                Endpoint::Rules,
                vec![rule(
                    &["copyrator.io"],
                    "v1alpha1",
                    &["copyrules", "namespacedcopyrules"],
                    &["CREATE", "UPDATE", "DELETE"],
                )],
                None,
            ),
            webhook(
                Endpoint::ReadOnly,
                kind_rules(&["DELETE"]),
                Some(read_only_copies()),
            ),
            // Only copyrator may change a read-only copy: while it cannot answer, no one may,
            // so that an edit stripping a copy's marks cannot slip through (SPEC §4 item 11).
            // Deletions, namespace deletion included, take the one above.
            ValidatingWebhook {
                name: "read-only-updates.copyrator.io".into(),
                failure_policy: Some("Fail".into()),
                ..webhook(
                    Endpoint::ReadOnly,
                    kind_rules(&["UPDATE"]),
                    Some(read_only_copies()),
                )
            },
        ]),
    }
}

/// The MutatingWebhookConfiguration of the Pod gate (SPEC §10): Pod CREATE, `failurePolicy:
/// Ignore` (copyrator down: Pods are admitted unchanged), `sideEffects: NoneOnDryRun` (a dryRun
/// Pod writes no copy), `reinvocationPolicy: Never`, excluded namespaces left out. Every Pod
/// CREATE in the other namespaces reaches it (no objectSelector can tell which need copies).
pub fn pod_gate_configuration(opts: &WebhookOptions) -> MutatingWebhookConfiguration {
    MutatingWebhookConfiguration {
        metadata: metadata(opts),
        webhooks: Some(vec![MutatingWebhook {
            name: format!("{}.copyrator.io", Endpoint::Pods.name()),
            admission_review_versions: vec!["v1".into()],
            client_config: opts.target.client_config(Endpoint::Pods, &opts.ca_bundle),
            failure_policy: Some("Ignore".into()),
            match_policy: Some("Equivalent".into()),
            namespace_selector: namespace_selector(opts, false),
            object_selector: None,
            reinvocation_policy: Some("Never".into()),
            rules: Some(vec![rule(&[""], "v1", &["pods"], &["CREATE"])]),
            side_effects: "NoneOnDryRun".into(),
            timeout_seconds: Some(opts.timeout_seconds),
            match_conditions: None,
        }]),
    }
}

/// A manifest could not be rendered.
#[derive(Debug, thiserror::Error)]
#[error("rendering YAML: {0}")]
pub struct YamlError(String);

fn yaml<T: serde::Serialize>(value: &T) -> Result<String, YamlError> {
    serde_saphyr::to_string(value).map_err(|e| YamlError(e.to_string()))
}

/// YAML of `value` as a manifest of `kind`.
fn manifest<T: serde::Serialize>(kind: &str, value: &T) -> Result<String, YamlError> {
    let mut value = serde_json::to_value(value).map_err(|e| YamlError(e.to_string()))?;
    if let serde_json::Value::Object(m) = &mut value {
        // k8s-openapi leaves apiVersion/kind to the client; a manifest needs them. (Keys are
        // rendered in order: apiVersion and kind come first.)
        m.insert(
            "apiVersion".into(),
            "admissionregistration.k8s.io/v1".into(),
        );
        m.insert("kind".into(), kind.into());
    }
    yaml(&value)
}

/// YAML of both webhook configurations, as two documents.
pub fn webhooks_yaml(opts: &WebhookOptions) -> Result<String, YamlError> {
    Ok(format!(
        "{}---\n{}",
        manifest(
            "ValidatingWebhookConfiguration",
            &webhook_configuration(opts)
        )?,
        manifest(
            "MutatingWebhookConfiguration",
            &pod_gate_configuration(opts)
        )?,
    ))
}

/// YAML of the CopyRule CRD, as committed under `deploy/`.
pub fn crd_yaml() -> Result<String, YamlError> {
    yaml(&CopyRule::crd())
}

/// YAML of the NamespacedCopyRule CRD, as committed under `deploy/`.
pub fn namespaced_crd_yaml() -> Result<String, YamlError> {
    yaml(&crate::namespaced::NamespacedCopyRule::crd())
}

/// YAML of the HubLink CRD (SPEC §14), as committed under `deploy/`.
pub fn hub_link_crd_yaml() -> Result<String, YamlError> {
    yaml(&crate::hub::HubLink::crd())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(target: WebhookTarget) -> WebhookOptions {
        WebhookOptions {
            name: "copyrator".into(),
            target,
            ca_bundle: b"-----BEGIN CERTIFICATE-----\n".to_vec(),
            exclude_namespaces: vec!["kube-system".into()],
            timeout_seconds: 3,
        }
    }

    #[test]
    fn every_webhook_is_ignore_but_read_only_updates_none_on_dry_run_and_short() {
        let cfg =
            webhook_configuration(&opts(WebhookTarget::Url("https://127.0.0.1:8443/".into())));
        let hooks = cfg.webhooks.unwrap();
        assert_eq!(hooks.len(), 5);
        for h in &hooks {
            let failure_policy = match h.name.as_str() {
                "read-only-updates.copyrator.io" => "Fail",
                _ => "Ignore",
            };
            assert_eq!(
                h.failure_policy.as_deref(),
                Some(failure_policy),
                "{}",
                h.name
            );
            let side_effects = match h.name.as_str() {
                "read-only.copyrator.io" | "read-only-updates.copyrator.io" => "None",
                _ => "NoneOnDryRun",
            };
            assert_eq!(h.side_effects, side_effects);
            assert!(h.timeout_seconds.unwrap() <= 5);
            assert_eq!(h.admission_review_versions, ["v1"]);
            assert!(
                h.client_config
                    .url
                    .as_ref()
                    .unwrap()
                    .starts_with("https://127.0.0.1:8443/admission/")
            );
        }
        assert_eq!(
            hooks[1].object_selector,
            Some(match_labels("copyrator.io/source", "true"))
        );
        assert!(
            hooks.iter().all(|h| h.name != "copies.copyrator.io"),
            "copy edits come from the watch of copies"
        );
        // Only copies labelled read-only call them: their DELETE (Ignore) and their UPDATE
        // (Fail: no edit gets past copyrator while it cannot answer).
        for (hook, operation) in [(&hooks[3], "DELETE"), (&hooks[4], "UPDATE")] {
            assert_eq!(
                hook.client_config.url.as_deref(),
                Some("https://127.0.0.1:8443/admission/read-only")
            );
            assert_eq!(
                hook.object_selector.as_ref().unwrap().match_labels,
                Some(BTreeMap::from([
                    ("app.kubernetes.io/managed-by".into(), "copyrator".into()),
                    ("copyrator.io/read-only".into(), "true".into()),
                ]))
            );
            let rule = &hook.rules.as_ref().unwrap()[0];
            assert_eq!(
                rule.operations.as_deref(),
                Some(&[operation.to_string()][..])
            );
        }
    }

    #[test]
    fn service_target_excludes_its_own_namespace() {
        let cfg = webhook_configuration(&opts(
            WebhookTarget::service("copyrator-system/copyrator").unwrap(),
        ));
        let hook = &cfg.webhooks.unwrap()[0];
        let svc = hook.client_config.service.as_ref().unwrap();
        assert_eq!(
            (svc.namespace.as_str(), svc.name.as_str(), svc.port),
            ("copyrator-system", "copyrator", Some(443))
        );
        let values = hook
            .namespace_selector
            .as_ref()
            .unwrap()
            .match_expressions
            .as_ref()
            .unwrap()[0]
            .values
            .clone()
            .unwrap();
        assert_eq!(values, ["copyrator-system", "kube-system"]);
    }

    #[test]
    fn sources_in_its_own_namespace_reach_the_sources_webhook() {
        let cfg = webhook_configuration(&opts(
            WebhookTarget::service("copyrator-system/copyrator").unwrap(),
        ));
        let excluded = |name: &str| {
            let hooks = cfg.webhooks.as_ref().unwrap();
            let hook = hooks.iter().find(|h| h.name == name).unwrap();
            hook.namespace_selector
                .as_ref()
                .unwrap()
                .match_expressions
                .as_ref()
                .unwrap()[0]
                .values
                .clone()
                .unwrap()
        };
        // The chart trusts its own namespace's inline rules: their changes must arrive at once.
        assert_eq!(excluded("sources.copyrator.io"), ["kube-system"]);
        assert_eq!(
            excluded("namespaces.copyrator.io"),
            ["copyrator-system", "kube-system"]
        );
    }

    #[test]
    fn service_flag_is_validated() {
        assert!(WebhookTarget::service("ns/name").is_ok());
        for bad in ["name", "/name", "ns/", "a/b/c"] {
            assert!(WebhookTarget::service(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn yaml_documents_start_with_api_version_and_kind() {
        let y = webhooks_yaml(&opts(WebhookTarget::Url("https://x".into()))).unwrap();
        let docs: Vec<&str> = y.split("---\n").collect();
        assert_eq!(docs.len(), 2, "{y}");
        assert!(docs[0].starts_with("apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\n"), "{y}");
        assert!(
            docs[1].starts_with(
                "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\n"
            ),
            "{y}"
        );
    }

    #[test]
    fn the_pod_gate_is_mutating_ignore_none_on_dry_run_and_never_reinvoked() {
        let cfg = pod_gate_configuration(&opts(
            WebhookTarget::service("copyrator-system/copyrator").unwrap(),
        ));
        let hooks = cfg.webhooks.unwrap();
        assert_eq!(hooks.len(), 1);
        let h = &hooks[0];
        assert_eq!(h.failure_policy.as_deref(), Some("Ignore"));
        assert_eq!(h.side_effects, "NoneOnDryRun");
        assert_eq!(h.reinvocation_policy.as_deref(), Some("Never"));
        assert_eq!(
            h.client_config.service.as_ref().unwrap().path.as_deref(),
            Some("/admission/pods")
        );
        let rule = &h.rules.as_ref().unwrap()[0];
        assert_eq!(rule.resources.as_deref(), Some(&["pods".to_string()][..]));
        assert_eq!(
            rule.operations.as_deref(),
            Some(&["CREATE".to_string()][..])
        );
        let excluded = h
            .namespace_selector
            .as_ref()
            .unwrap()
            .match_expressions
            .as_ref()
            .unwrap()[0]
            .values
            .clone()
            .unwrap();
        assert_eq!(excluded, ["copyrator-system", "kube-system"]);
    }

    #[test]
    fn committed_crd_equals_the_generated_one() {
        let committed = include_str!("../deploy/crds/copyrules.copyrator.io.yaml");
        assert_eq!(
            committed,
            crd_yaml().unwrap(),
            "deploy/crds/copyrules.copyrator.io.yaml is stale: run `cargo run -- manifests crd > deploy/crds/copyrules.copyrator.io.yaml`"
        );
    }

    #[test]
    fn committed_namespaced_crd_equals_the_generated_one() {
        let committed = include_str!("../deploy/crds/namespacedcopyrules.copyrator.io.yaml");
        assert_eq!(
            committed,
            namespaced_crd_yaml().unwrap(),
            "deploy/crds/namespacedcopyrules.copyrator.io.yaml is stale: run `cargo run -- manifests namespaced-crd > deploy/crds/namespacedcopyrules.copyrator.io.yaml`"
        );
        let crd = crate::namespaced::NamespacedCopyRule::crd();
        assert_eq!(crd.spec.scope, "Namespaced");
    }

    #[test]
    fn committed_hub_link_crd_equals_the_generated_one() {
        let committed = include_str!("../deploy/crds/hublinks.copyrator.io.yaml");
        assert_eq!(
            committed,
            hub_link_crd_yaml().unwrap(),
            "deploy/crds/hublinks.copyrator.io.yaml is stale: run `cargo run -- manifests hub-link-crd > deploy/crds/hublinks.copyrator.io.yaml`"
        );
    }

    #[test]
    fn crd_has_printer_columns_short_name_and_status() {
        let crd = CopyRule::crd();
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.short_names, Some(vec!["cpr".to_string()]));
        let v = &crd.spec.versions[0];
        assert!(v.subresources.as_ref().unwrap().status.is_some());
        let cols: Vec<_> = v
            .additional_printer_columns
            .as_ref()
            .unwrap()
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(
            cols,
            ["Kind", "Source", "Targets", "Synced", "Ready", "Age"]
        );
    }
}
