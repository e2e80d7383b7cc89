//! The RoleBindings to Roles of one namespace, read where a Role copy is about to be created or
//! adopted (SPEC §9.10): the planner refuses the Role under a name a binding it did not make
//! already references there. Read from etcd, one namespace at a time, only then.

use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::{Api, api::ListParams};

use super::{ApiResult, Cluster};
use crate::{grants::BindingToRole, marks, model::Kind, plan::ManagedCopy};

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

impl Cluster {
    /// Every RoleBinding of `namespace` whose `roleRef` names a Role, with the claim its
    /// copyrator marks name, if any. A consistent read: a binding planted a moment ago counts.
    pub async fn role_bindings_to_roles(&self, namespace: &str) -> ApiResult<Vec<BindingToRole>> {
        let api: Api<RoleBinding> = Api::namespaced(self.client.clone(), namespace);
        let list = self
            .call("list", "rolebindings", api.list(&ListParams::default()))
            .await?;
        Ok(list.items.iter().filter_map(binding_to_role).collect())
    }
}

/// What the planner needs of one RoleBinding: `None` unless it binds a Role.
fn binding_to_role(rb: &RoleBinding) -> Option<BindingToRole> {
    if rb.role_ref.kind != "Role" || rb.role_ref.api_group.as_deref() != Some(RBAC_GROUP) {
        return None;
    }
    let meta = &rb.metadata;
    let labels = meta.labels.clone().unwrap_or_default();
    // Only a kind copyrator copies can be its copy; the planner judges the marks' claim.
    let marked = Kind::lookup(RBAC_GROUP, "RoleBinding")
        .filter(|_| {
            labels.get(marks::MANAGED_BY_LABEL).map(String::as_str) == Some(marks::MANAGED_BY_VALUE)
        })
        .and_then(|kind| {
            ManagedCopy::from_marks(
                kind,
                &labels,
                &meta.annotations.clone().unwrap_or_default(),
                String::new(),
                false,
            )
            .ok()
        })
        .map(|copy| (copy.rule.clone(), copy.source.clone()));
    Some(BindingToRole {
        name: meta.name.clone()?,
        role: rb.role_ref.name.clone(),
        marked,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_bindings_to_roles_count_with_the_claim_their_marks_name() {
        let kind = Kind::register(RBAC_GROUP, "v1", "RoleBinding", "rolebindings").unwrap();
        let rb = |role_kind: &str, labels: serde_json::Value| -> RoleBinding {
            serde_json::from_value(json!({
                "metadata": {"name": "b", "labels": labels, "annotations": {
                    "copyrator.io/source": "platform/to-app", "copyrator.io/rule": "copyrule/to-app"}},
                "roleRef": {"apiGroup": RBAC_GROUP, "kind": role_kind, "name": "app"}
            }))
            .unwrap()
        };
        assert_eq!(binding_to_role(&rb("ClusterRole", json!({}))), None);
        let foreign = binding_to_role(&rb("Role", json!({}))).unwrap();
        assert_eq!((foreign.name.as_str(), foreign.role.as_str()), ("b", "app"));
        assert_eq!(
            foreign.marked, None,
            "annotations without the label are no marks"
        );
        let marked = binding_to_role(&rb("Role", json!({marks::MANAGED_BY_LABEL: "copyrator"})))
            .unwrap()
            .marked
            .unwrap();
        assert_eq!(marked.0, crate::rules::RuleId::CopyRule("to-app".into()));
        assert_eq!(
            marked.1,
            crate::model::ObjectKey::new(kind, "platform", "to-app")
        );
    }
}
