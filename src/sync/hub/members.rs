//! The hub side (SPEC §14.1): each member's read access kept equal to what is placed on it.
//! Per member and source namespace a Role `copyrator-member-<cluster>` naming the placed
//! Secrets and ConfigMaps (resourceNames; `get`, and `list`/`watch` by name), bound to the member's ServiceAccount of the
//! same name in the members' namespace; one ClusterRole to list CopyRules, bound per member.
//! In the members' namespace, its report ConfigMap and the right to write it (`reports.rs`).
//! The members are the clusters rules name and those of the ClusterProfiles in the members'
//! namespace (`profiles.rs`), whose labels rules' selectors match; each may also read its own
//! ClusterProfile there.
//! What no rule places any more is deleted (found by the `copyrator.io/member` label).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};

use super::{profiles, reports};
use crate::{
    copyrule::CopyRule,
    hub::{
        CLUSTER_PROFILE_GROUP, CLUSTER_PROFILE_PLURAL, MEMBER_LABEL, NamespaceAccess,
        member_access, member_identity,
    },
    marks,
};

/// The ClusterRole every member is bound to: CopyRules, read-only.
const READ_RULES: &str = "copyrator-member-copyrules";

/// Makes every member's Roles and bindings on the hub `hub` equal to what its CopyRules place;
/// members' ServiceAccounts live in `members_namespace`. Returns how many members have access.
pub async fn grant_members(hub: &Client, members_namespace: &str) -> kube::Result<usize> {
    let rules = Api::<CopyRule>::all(hub.clone())
        .list(&ListParams::default())
        .await?;
    let inventory = profiles::inventory(hub, members_namespace).await?;
    let access = member_access(&rules.items, inventory.as_ref(), members_namespace);
    let apply = PatchParams::apply("copyrator").force();
    apply_object(
        hub,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        READ_RULES,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": READ_RULES, "labels": {marks::MANAGED_BY_LABEL: marks::MANAGED_BY_VALUE}},
            "rules": [{"apiGroups": ["copyrator.io"], "resources": ["copyrules"], "verbs": ["get", "list", "watch"]}],
        }),
        &apply,
    )
    .await?;
    let mut kept: BTreeSet<(String, String)> = BTreeSet::new();
    for (cluster, namespaces) in &access {
        let name = member_identity(cluster);
        let labels =
            json!({MEMBER_LABEL: cluster, marks::MANAGED_BY_LABEL: marks::MANAGED_BY_VALUE});
        let subject =
            json!([{"kind": "ServiceAccount", "name": name, "namespace": members_namespace}]);
        apply_object(
            hub,
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            &name,
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": name, "labels": labels},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": READ_RULES},
                "subjects": subject,
            }),
            &apply,
        )
        .await?;
        // Its report (SPEC §14.4), which the hub makes and only it may write.
        apply_object(
            hub,
            &format!("/api/v1/namespaces/{members_namespace}/configmaps"),
            &name,
            reports::report_object(members_namespace, cluster),
            &apply,
        )
        .await?;
        let mut roles: BTreeMap<&str, Vec<Value>> = namespaces
            .iter()
            .map(|(namespace, sources)| (namespace.as_str(), role_rules(sources)))
            .collect();
        roles
            .entry(members_namespace)
            .or_default()
            .extend(reports::home_rules(cluster));
        for (namespace, rules) in roles {
            let base = format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}");
            apply_object(
                hub,
                &format!("{base}/roles"),
                &name,
                json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                    "metadata": {"name": name, "namespace": namespace, "labels": labels},
                    "rules": rules,
                }),
                &apply,
            )
            .await?;
            apply_object(
                hub,
                &format!("{base}/rolebindings"),
                &name,
                json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": name, "namespace": namespace, "labels": labels},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                    "subjects": subject,
                }),
                &apply,
            )
            .await?;
            kept.insert((namespace.to_string(), name.clone()));
        }
    }
    let members: BTreeSet<String> = access.keys().cloned().collect();
    remove_stale(hub, &members, &kept).await?;
    reports::settle_reports(
        hub,
        members_namespace,
        &members,
        &rules.items,
        |rule, cluster| {
            let labels = inventory.as_ref().and_then(|p| p.get(cluster));
            crate::hub::placed_on(&rule.spec, cluster, labels)
        },
    )
    .await?;
    Ok(access.len())
}

/// `get`, `list` and `watch` on the placed sources and the member's own ClusterProfile, by
/// name.
fn role_rules(sources: &NamespaceAccess) -> Vec<Value> {
    let mut rules = Vec::new();
    for (group, resource, names) in [
        ("", "secrets", &sources.secrets),
        ("", "configmaps", &sources.config_maps),
        (
            CLUSTER_PROFILE_GROUP,
            CLUSTER_PROFILE_PLURAL,
            &sources.cluster_profiles,
        ),
    ] {
        if !names.is_empty() {
            // list and watch by name (fieldSelector=metadata.name=<name>): RBAC checks
            // resourceNames for those as for a get.
            rules.push(json!({"apiGroups": [group], "resources": [resource], "resourceNames": names, "verbs": ["get", "list", "watch"]}));
        }
    }
    rules
}

/// Server-side applies `body` at `collection/name`.
async fn apply_object(
    hub: &Client,
    collection: &str,
    name: &str,
    body: Value,
    params: &PatchParams,
) -> kube::Result<()> {
    let req = kube::api::Request::new(collection)
        .patch(name, params, &Patch::Apply(&body))
        .map_err(kube::Error::BuildRequest)?;
    hub.request::<Value>(req).await.map(|_| ())
}

/// Deletes the member Roles, RoleBindings and ClusterRoleBindings not kept this round.
async fn remove_stale(
    hub: &Client,
    members: &BTreeSet<String>,
    kept: &BTreeSet<(String, String)>,
) -> kube::Result<()> {
    let labelled = ListParams::default().labels(MEMBER_LABEL);
    for role in Api::<Role>::all(hub.clone()).list(&labelled).await?.items {
        let key = (role.namespace().unwrap_or_default(), role.name_any());
        if !kept.contains(&key) {
            Api::<Role>::namespaced(hub.clone(), &key.0)
                .delete(&key.1, &DeleteParams::default())
                .await?;
        }
    }
    for binding in Api::<RoleBinding>::all(hub.clone())
        .list(&labelled)
        .await?
        .items
    {
        let key = (binding.namespace().unwrap_or_default(), binding.name_any());
        if !kept.contains(&key) {
            Api::<RoleBinding>::namespaced(hub.clone(), &key.0)
                .delete(&key.1, &DeleteParams::default())
                .await?;
        }
    }
    let api = Api::<ClusterRoleBinding>::all(hub.clone());
    for binding in api.list(&labelled).await?.items {
        let member = binding
            .labels()
            .get(MEMBER_LABEL)
            .cloned()
            .unwrap_or_default();
        if !members.contains(&member) {
            api.delete(&binding.name_any(), &DeleteParams::default())
                .await?;
        }
    }
    Ok(())
}
