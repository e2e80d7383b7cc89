//! The hub side (SPEC §14.1): each member's read access kept equal to what is placed on it.
//! Per member and source namespace a Role `copyrator-member-<cluster>` naming the placed
//! Secrets and ConfigMaps (resourceNames; `get`, and `list`/`watch` by name), bound to the member's ServiceAccount of the
//! same name in the members' namespace; one ClusterRole to list CopyRules, bound per member.
//! In the members' namespace, its report ConfigMap and the right to write it (`reports.rs`).
//! The members are the clusters rules name and those of the ClusterProfiles in the members'
//! namespace (`profiles.rs`), whose labels rules' selectors match; each may also read its own
//! ClusterProfile there.
//! What no rule places any more is deleted (found by the `copyrator.io/member` label).
//! Each member's and each namespace's grants are applied on their own (SPEC §14.1): one
//! that fails is said, on the rules it concerns, and stops no other.

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
        member_access, member_identity, report::GrantFailures,
    },
    marks,
    report::events::{Events, Regarding, reason},
};

/// The ClusterRole every member is bound to: CopyRules, read-only.
const READ_RULES: &str = "copyrator-member-copyrules";

/// What a round of [`grant_members`] did.
#[derive(Debug, Default)]
pub struct Granted {
    /// Members with access.
    pub members: usize,
    /// What it could not grant, and why (said on each rule concerned and in an Event).
    pub failures: GrantFailures,
}

/// Makes every member's Roles and bindings on the hub `hub` equal to what its CopyRules place;
/// members' ServiceAccounts live in `members_namespace`. Each member's and each namespace's
/// grants are applied on their own: one that fails (a RoleBinding another made under its
/// name, a source namespace that does not exist) is said on the rules it concerns (their
/// `status.clusters`) and in an Event (`events`), and stops nothing else; what is placed
/// nowhere any more is revoked all the same. An error only when the hub's CopyRules (or its
/// ClusterProfiles) cannot be read: then nothing is known, and nothing changed.
pub async fn grant_members(
    hub: &Client,
    members_namespace: &str,
    events: &Events,
) -> kube::Result<Granted> {
    let rules = Api::<CopyRule>::all(hub.clone())
        .list(&ListParams::default())
        .await?;
    let inventory = profiles::inventory(hub, members_namespace).await?;
    let access = member_access(&rules.items, inventory.as_ref(), members_namespace);
    let apply = PatchParams::apply("copyrator").force();
    if let Err(e) = apply_object(
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
    .await
    {
        tracing::warn!(error = %e, "ClusterRole {READ_RULES} not applied on the hub");
    }
    let mut failures = GrantFailures::new();
    // What is placed, granted or not: everything else labelled a member's is revoked.
    let mut kept: BTreeSet<(String, String)> = BTreeSet::new();
    for (cluster, namespaces) in &access {
        let name = member_identity(cluster);
        let labels =
            json!({MEMBER_LABEL: cluster, marks::MANAGED_BY_LABEL: marks::MANAGED_BY_VALUE});
        let subject =
            json!([{"kind": "ServiceAccount", "name": name, "namespace": members_namespace}]);
        let binding = apply_object(
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
        .await
        .map_err(|e| format!("ClusterRoleBinding {name} on the hub: {}", said(&e)));
        // Its report (SPEC §14.4), which the hub makes and only it may write.
        let report = apply_object(
            hub,
            &format!("/api/v1/namespaces/{members_namespace}/configmaps"),
            &name,
            reports::report_object(members_namespace, cluster),
            &apply,
        )
        .await
        .map_err(|e| {
            format!(
                "ConfigMap {members_namespace}/{name} on the hub: {}",
                said(&e)
            )
        });
        if let Err(why) = binding.and(report) {
            failures.insert((cluster.clone(), None), why);
        }
        let mut roles: BTreeMap<&str, Vec<Value>> = namespaces
            .iter()
            .map(|(namespace, sources)| (namespace.as_str(), role_rules(sources)))
            .collect();
        roles
            .entry(members_namespace)
            .or_default()
            .extend(reports::home_rules(cluster));
        for (namespace, rules) in roles {
            kept.insert((namespace.to_string(), name.clone()));
            let role = json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "rules": rules,
            });
            let binding = json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": subject,
            });
            if let Err(why) = grant_in(hub, namespace, &name, role, binding, &apply).await {
                // The members' namespace holds the member's own grants (its profile, its
                // report): every rule placed on it is concerned.
                let at = (namespace != members_namespace).then(|| namespace.to_string());
                failures.insert((cluster.clone(), at), why);
            }
        }
    }
    let members: BTreeSet<String> = access.keys().cloned().collect();
    remove_stale(hub, &members, &kept).await?;
    let placed = |rule: &CopyRule, cluster: &str| {
        let labels = inventory.as_ref().and_then(|p| p.get(cluster));
        crate::hub::placed_on(&rule.spec, cluster, labels)
    };
    say_failures(events, &rules.items, &failures, &placed).await;
    reports::settle_reports(
        hub,
        members_namespace,
        &members,
        &rules.items,
        &failures,
        placed,
    )
    .await?;
    Ok(Granted {
        members: access.len(),
        failures,
    })
}

/// Applies member Role `role` and its RoleBinding `binding` (both named `name`) in
/// `namespace`; the error names what could not be applied.
async fn grant_in(
    hub: &Client,
    namespace: &str,
    name: &str,
    role: Value,
    binding: Value,
    apply: &PatchParams,
) -> Result<(), String> {
    let base = format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}");
    apply_object(hub, &format!("{base}/roles"), name, role, apply)
        .await
        .map_err(|e| format!("Role {namespace}/{name} on the hub: {}", said(&e)))?;
    apply_object(hub, &format!("{base}/rolebindings"), name, binding, apply)
        .await
        .map_err(|e| format!("RoleBinding {namespace}/{name} on the hub: {}", said(&e)))
}

/// What the hub said of a failed apply: its message alone (the whole status is too long to
/// be read in a rule's status).
fn said(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => status.message.clone(),
        e => e.to_string(),
    }
}

/// An Event on each rule a grant failure concerns (deduplicated: said again at most every
/// 15 minutes while it lasts).
async fn say_failures(
    events: &Events,
    rules: &[CopyRule],
    failures: &GrantFailures,
    placed: &impl Fn(&CopyRule, &str) -> bool,
) {
    for ((cluster, namespace), why) in failures {
        tracing::warn!(cluster = %cluster, error = %why, "a member's access on the hub not granted; the others' are");
        for rule in rules {
            let concerns = namespace
                .as_ref()
                .is_none_or(|ns| *ns == rule.spec.source_namespace);
            if concerns && rule.spec.clusters.is_some() && placed(rule, cluster) {
                let note = format!("member {cluster} cannot be let read this rule's source: {why}");
                events
                    .warning(&Regarding::copy_rule(rule), reason::NOT_GRANTED, note)
                    .await;
            }
        }
    }
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

/// Deletes the member Roles, RoleBindings and ClusterRoleBindings not kept this round, each
/// on its own: one that cannot be deleted is logged and tried again next round. An error only
/// when they cannot be listed.
async fn remove_stale(
    hub: &Client,
    members: &BTreeSet<String>,
    kept: &BTreeSet<(String, String)>,
) -> kube::Result<()> {
    let labelled = ListParams::default().labels(MEMBER_LABEL);
    let said = |what: &str, name: &str, e: kube::Error| {
        tracing::warn!(error = %e, "member {what} {name} not deleted on the hub; tried again next round");
    };
    for role in Api::<Role>::all(hub.clone()).list(&labelled).await?.items {
        let key = (role.namespace().unwrap_or_default(), role.name_any());
        if !kept.contains(&key)
            && let Err(e) = Api::<Role>::namespaced(hub.clone(), &key.0)
                .delete(&key.1, &DeleteParams::default())
                .await
        {
            said("Role", &format!("{}/{}", key.0, key.1), e);
        }
    }
    for binding in Api::<RoleBinding>::all(hub.clone())
        .list(&labelled)
        .await?
        .items
    {
        let key = (binding.namespace().unwrap_or_default(), binding.name_any());
        if !kept.contains(&key)
            && let Err(e) = Api::<RoleBinding>::namespaced(hub.clone(), &key.0)
                .delete(&key.1, &DeleteParams::default())
                .await
        {
            said("RoleBinding", &format!("{}/{}", key.0, key.1), e);
        }
    }
    let api = Api::<ClusterRoleBinding>::all(hub.clone());
    for binding in api.list(&labelled).await?.items {
        let member = binding
            .labels()
            .get(MEMBER_LABEL)
            .cloned()
            .unwrap_or_default();
        if !members.contains(&member)
            && let Err(e) = api
                .delete(&binding.name_any(), &DeleteParams::default())
                .await
        {
            said("ClusterRoleBinding", &binding.name_any(), e);
        }
    }
    Ok(())
}
