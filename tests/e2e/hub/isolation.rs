//! One namespace's trouble on the hub is its own (SPEC §14.1): a tenant of one hub source
//! namespace replaces the RoleBinding copyrator made there for a member with its own, and a
//! rule names a source namespace that does not exist; meanwhile a rule moves between members
//! and a new one is placed on this member. Every other grant is made, the old member's
//! revoked, and what could not be granted is said on the rule and in an Event.

use k8s_openapi::api::{core::v1::Event, rbac::v1::RoleBinding};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

use copyrator::copyrule::CopyRule;
use k8s_openapi::api::core::v1::Secret;

use super::{recovery::linked_copy, setup};

/// What rule `rule`'s `status.clusters` says the hub could not grant `cluster`.
async fn not_granted(hub: &super::Hub, rule: &str, cluster: &str) -> Option<String> {
    Api::<CopyRule>::all(hub.client.clone())
        .get(rule)
        .await
        .ok()?
        .status?
        .clusters
        .into_iter()
        .find(|c| c.cluster == cluster)?
        .not_granted
}

#[tokio::test]
async fn a_hijacked_binding_in_one_hub_namespace_stops_no_other_grant() {
    let (h, hub, member) = setup().await;
    member.set_token(&h, &hub.member_token().await).await;
    let inside = linked_copy(&h, &hub, &member, &hub.server.clone()).await;
    let sel = ("registry", h.name("r"));
    let sel = (sel.0, sel.1.as_str());
    // A tenant's namespace whose source is placed on m2; a shared source placed on m1.
    hub.namespace("tenant").await;
    hub.source("tenant", "tenant-cred", "t1").await;
    hub.rule_on("b", ("tenant", "tenant-cred"), sel, "m2").await;
    hub.namespace("shared").await;
    hub.source("shared", "shared-cred", "s1").await;
    hub.rule_on("a", ("shared", "shared-cred"), sel, "m1").await;
    hub.grant_members().await;
    assert!(hub.can_get("m2", "tenant", "tenant-cred").await);
    assert!(hub.can_get("m1", "shared", "shared-cred").await);

    // The tenant replaces the RoleBinding copyrator made for m2 with its own, of another
    // roleRef (which no apply can change).
    let name = copyrator::hub::member_identity("m2");
    let bindings = Api::<RoleBinding>::namespaced(hub.client.clone(), "tenant");
    bindings
        .delete(&name, &Default::default())
        .await
        .expect("deleting copyrator's binding");
    let own: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant-own"},
        "subjects": [{"kind": "User", "name": "tenant", "apiGroup": "rbac.authorization.k8s.io"}],
    }))
    .unwrap();
    bindings
        .create(&PostParams::default(), &own)
        .await
        .expect("the tenant's binding");
    // A typo'd source namespace, placed on m3.
    hub.rule_on("typo", ("platfrom", "cred"), sel, "m3").await;
    // Rule a moves from m1 to m3; a new rule places platform/cred2 on this member.
    Api::<CopyRule>::all(hub.client.clone())
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"clusters": {"names": ["m3"]}}})),
        )
        .await
        .expect("moving rule a");
    hub.source("platform", "cred2", "c1").await;
    hub.rule("late", ("platform", "cred2"), sel).await;
    // One round, as the hub's copyrator runs it (an error would be logged, and retried).
    let round = hub.grant_round().await;

    assert!(
        hub.can_get("m3", "shared", "shared-cred").await,
        "the moved rule's new member reads its source (round: {round:?})"
    );
    assert!(
        !hub.can_get("m1", "shared", "shared-cred").await,
        "its old member reads it no more"
    );
    h.wait_value::<Secret>(&inside, "cred2", "token", "c1")
        .await;
    // What could not be granted is said on the rule, and in an Event about it.
    let said = not_granted(&hub, "b", "m2").await.unwrap_or_default();
    assert!(
        said.contains(&format!("RoleBinding tenant/{name}")),
        "rule b says m2's binding is not copyrator's: {said:?}"
    );
    let said = not_granted(&hub, "typo", "m3").await.unwrap_or_default();
    assert!(
        said.contains("platfrom"),
        "rule typo says why m3 cannot read its source: {said:?}"
    );
    let events = Api::<Event>::namespaced(hub.client.clone(), "kube-system")
        .list(&ListParams::default())
        .await
        .expect("the hub's Events");
    assert!(
        events.items.iter().any(|e| {
            e.involved_object.name.as_deref() == Some("b")
                && e.reason.as_deref() == Some("MemberNotGranted")
                && e.message.as_deref().is_some_and(|m| m.contains("m2"))
        }),
        "an Event on rule b says m2 is not granted"
    );
    // The tenant's binding is left as it is.
    let theirs = bindings.get(&name).await.expect("the tenant's binding");
    assert_eq!(theirs.role_ref.name, "tenant-own");
    member.delete_link(&h).await;
    h.finish().await;
}
