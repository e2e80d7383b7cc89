//! Kyverno's best-practice namespace bootstrap policies (add-network-policy, add-ns-quota,
//! add-networkpolicy-dns), migrated and applied as printed: a new labelled namespace gets the
//! same five objects Kyverno would give it, made from template CopyRules, and one deleted or
//! edited comes back. A rule that needs the requesting user's name is reported, not
//! translated. The policies are Kyverno's own, each given a namespace selector (`LABEL`) so
//! that they fill this test's namespaces only, and names unique per run (`ID`).

use k8s_openapi::api::{
    core::v1::{LimitRange, ResourceQuota},
    networking::v1::NetworkPolicy,
};
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

use super::apply_manifests;
use crate::common::*;

const POLICIES: &str = r#"
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: add-networkpolicy-ID
spec:
  rules:
  - name: default-deny
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              LABEL: "on"
    generate:
      apiVersion: networking.k8s.io/v1
      kind: NetworkPolicy
      name: default-deny
      namespace: "{{request.object.metadata.name}}"
      synchronize: true
      data:
        spec:
          podSelector: {}
          policyTypes:
          - Ingress
          - Egress
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: add-ns-quota-ID
spec:
  rules:
  - name: generate-resourcequota
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              LABEL: "on"
    generate:
      apiVersion: v1
      kind: ResourceQuota
      name: default-resourcequota
      synchronize: true
      namespace: "{{request.object.metadata.name}}"
      data:
        spec:
          hard:
            requests.cpu: '4'
            requests.memory: '16Gi'
            limits.cpu: '4'
            limits.memory: '16Gi'
  - name: generate-limitrange
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              LABEL: "on"
    generate:
      apiVersion: v1
      kind: LimitRange
      name: default-limitrange
      synchronize: true
      namespace: "{{request.object.metadata.name}}"
      data:
        spec:
          limits:
          - default:
              cpu: 500m
              memory: 1Gi
            defaultRequest:
              cpu: 200m
              memory: 256Mi
            type: Container
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: add-networkpolicy-dns-ID
spec:
  rules:
  - name: add-netpol-dns
    match:
      any:
      - resources:
          kinds:
          - Namespace
          selector:
            matchLabels:
              LABEL: "on"
    generate:
      apiVersion: networking.k8s.io/v1
      kind: NetworkPolicy
      name: allow-dns
      namespace: "{{request.object.metadata.name}}"
      synchronize: true
      data:
        spec:
          podSelector:
            matchLabels: {}
          policyTypes:
          - Egress
          egress:
          - to:
            - namespaceSelector:
                matchLabels:
                  name: kube-system
            ports:
            - protocol: UDP
              port: 53
---
apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata:
  name: owner-binding-ID
spec:
  rules:
  - name: requester-is-admin
    match:
      any:
      - resources:
          kinds:
          - Namespace
    generate:
      apiVersion: rbac.authorization.k8s.io/v1
      kind: RoleBinding
      name: owner
      namespace: "{{request.object.metadata.name}}"
      data:
        roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: admin}
        subjects:
        - {apiGroup: rbac.authorization.k8s.io, kind: User, name: "{{request.userInfo.username}}"}
"#;

#[tokio::test]
async fn kyverno_bootstrap_policies_give_a_new_namespace_the_same_objects() {
    let t = Harness::start(Options {
        resync_interval: "2s",
        extra: vec!["--copy-kinds=NetworkPolicy.networking.k8s.io,ResourceQuota,LimitRange".into()],
        ..Default::default()
    })
    .await;
    let label = t.name("kyv-boot");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policies.yaml");
    std::fs::write(
        &file,
        POLICIES.replace("ID", &t.id).replace("LABEL", &label),
    )
    .unwrap();
    let out = run_copyrator(&[
        "migrate",
        "--from",
        "kyverno",
        "-f",
        file.to_str().unwrap(),
        "-o",
        "yaml",
    ])
    .await;
    assert!(out.success, "{}", out.stderr);
    let yaml = &out.stdout;
    assert_eq!(yaml.matches("kind: CopyRule").count(), 4, "{yaml}");
    assert!(
        yaml.contains(&format!(
            "Not migrated: ClusterPolicy owner-binding-{}",
            t.id
        )) && yaml.contains("{{request.userInfo.username}}: the user who made the request"),
        "the requester's name is reported: {yaml}"
    );
    apply_manifests(&t, yaml).await;

    // A namespace created after the rules, as Kyverno's trigger is its creation.
    let ns = t.namespace("kyv-boot", &[(&label, "on")]).await;
    let other = t.namespace("kyv-boot-other", &[]).await;
    let deny = t
        .wait_for::<NetworkPolicy>(&ns, "default-deny", "default-deny", |_| true)
        .await;
    assert_eq!(
        serde_json::to_value(deny.spec.unwrap()).unwrap(),
        json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})
    );
    let dns = t
        .wait_for::<NetworkPolicy>(&ns, "allow-dns", "allow-dns", |_| true)
        .await;
    assert_eq!(
        serde_json::to_value(&dns.spec.as_ref().unwrap().egress).unwrap(),
        json!([{"to": [{"namespaceSelector": {"matchLabels": {"name": "kube-system"}}}],
                "ports": [{"protocol": "UDP", "port": 53}]}])
    );
    let quota = t
        .wait_for::<ResourceQuota>(&ns, "default-resourcequota", "quota", |_| true)
        .await;
    assert_eq!(
        serde_json::to_value(quota.spec.unwrap().hard.unwrap()).unwrap(),
        json!({"limits.cpu": "4", "limits.memory": "16Gi", "requests.cpu": "4", "requests.memory": "16Gi"})
    );
    let limits = t
        .wait_for::<LimitRange>(&ns, "default-limitrange", "limits", |_| true)
        .await;
    assert_eq!(
        serde_json::to_value(&limits.spec.unwrap().limits[0].default).unwrap(),
        json!({"cpu": "500m", "memory": "1Gi"})
    );
    // Nothing where the policies did not match.
    let none: kube::Api<NetworkPolicy> = kube::Api::namespaced(t.client.clone(), &other);
    assert!(none.get_opt("default-deny").await.unwrap().is_none());

    // Deleted, it comes back; edited, it holds the template's content again (the read-only
    // webhook refuses the edit, or the copy is put back: what the namespace sees is the same).
    let policies: kube::Api<NetworkPolicy> = kube::Api::namespaced(t.client.clone(), &ns);
    policies
        .delete("default-deny", &DeleteParams::default())
        .await
        .unwrap();
    t.wait_for::<NetworkPolicy>(&ns, "default-deny", "default-deny restored", |p| {
        p.metadata.deletion_timestamp.is_none()
    })
    .await;
    let quotas: kube::Api<ResourceQuota> = kube::Api::namespaced(t.client.clone(), &ns);
    let _refused_or_restored = quotas
        .patch(
            "default-resourcequota",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hard": {"limits.cpu": "400"}}})),
        )
        .await;
    t.wait_for::<ResourceQuota>(&ns, "default-resourcequota", "quota restored", |q| {
        q.spec
            .as_ref()
            .and_then(|s| s.hard.as_ref())
            .and_then(|h| h.get("limits.cpu"))
            .is_some_and(|v| v.0 == "4")
    })
    .await;
}
