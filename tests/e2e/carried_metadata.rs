//! What a copy carries of its source's labels and annotations (SPEC §3): ordinary ones, and
//! none of the keys by which Flux, Argo CD, Helm, kubectl, kustomize, kpt, Carvel kapp,
//! Rancher Fleet and Config Sync track what they manage. Such a key on a copy makes the tool
//! count the copy as its own (`flux tree`, Argo CD's prune).

use crate::common;

use common::*;
use copyrator::marks;
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;

/// Labels these tools put on what they manage, one or more per family.
const TRACKING_LABELS: [(&str, &str); 9] = [
    ("helm.toolkit.fluxcd.io/name", "platform"),
    ("kustomize.toolkit.fluxcd.io/name", "infra"),
    ("app.kubernetes.io/instance", "platform"),
    ("argocd.argoproj.io/instance", "platform"),
    ("helm.sh/chart", "platform-1.2.3"),
    ("kapp.k14s.io/app", "1700000000000000000"),
    (
        "objectset.rio.cattle.io/hash",
        "c35d8a4e136ecaab66ba320fcc233a0659968a07",
    ),
    ("configsync.gke.io/declared-version", "v1"),
    ("fleet.cattle.io/bundle-name", "platform"),
];

/// Annotations these tools put on what they manage.
const TRACKING_ANNOTATIONS: [(&str, &str); 13] = [
    ("helm.toolkit.fluxcd.io/namespace", "flux-system"),
    (
        "argocd.argoproj.io/tracking-id",
        "platform:/Secret:platform/cred",
    ),
    ("meta.helm.sh/release-name", "platform"),
    ("meta.helm.sh/release-namespace", "platform"),
    ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
    ("config.kubernetes.io/origin", "path: cred.yaml"),
    ("internal.config.kubernetes.io/path", "cred.yaml"),
    ("kustomize.config.k8s.io/id", "kind: Secret"),
    ("config.k8s.io/owning-inventory", "platform"),
    ("cli-utils.sigs.k8s.io/inventory-id", "platform"),
    ("kapp.k14s.io/identity", "v1;platform/v1/Secret/cred;v1"),
    ("objectset.rio.cattle.io/applied", "H4sIAAAA"),
    ("configmanagement.gke.io/managed", "enabled"),
];

/// A source carrying every tracking family's keys: its copy carries none of them, and its
/// ordinary labels and annotations.
#[tokio::test]
async fn a_copy_carries_no_tool_s_tracking_keys() {
    let (t, platform) = Harness::start_trusting("gitops-platform").await;
    let team = t.namespace("gitops-team", &[]).await;
    let mut labels = vec![(marks::SOURCE_LABEL, "true"), ("team", "platform")];
    labels.extend(TRACKING_LABELS);
    let mut annotations = vec![
        (marks::NAMESPACES_ANNOTATION, team.as_str()),
        ("example.com/owner", "platform-team"),
    ];
    annotations.extend(TRACKING_ANNOTATIONS);
    t.secrets(&platform)
        .create(
            &PostParams::default(),
            &secret("cred", &labels, &annotations, &[("token", "t1")]),
        )
        .await
        .unwrap();

    let copy = t.wait_value::<Secret>(&team, "cred", "token", "t1").await;
    let copy_labels = copy.metadata.labels.unwrap_or_default();
    let copy_annotations = copy.metadata.annotations.unwrap_or_default();
    let leaked: Vec<&str> = TRACKING_LABELS
        .iter()
        .filter(|(k, _)| copy_labels.contains_key(*k))
        .chain(
            TRACKING_ANNOTATIONS
                .iter()
                .filter(|(k, _)| copy_annotations.contains_key(*k)),
        )
        .map(|(k, _)| *k)
        .collect();
    assert!(leaked.is_empty(), "the copy carries {leaked:?}");
    assert_eq!(
        copy_labels.get("team").map(String::as_str),
        Some("platform")
    );
    assert_eq!(
        copy_annotations
            .get("example.com/owner")
            .map(String::as_str),
        Some("platform-team")
    );
    t.finish().await;
}
