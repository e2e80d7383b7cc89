//! Hub CopyRules placed by ClusterProfile labels (SPEC §14.1): `spec.clusters.selector`
//! matches the labels of the member's ClusterProfile in the hub's members' namespace. The hub
//! grants each member its own profile and what its labels place on it; the member follows its
//! profile by a watch, so a label change reaches it with no full read. Included by
//! tests/e2e/hub.rs.

use std::time::Duration;

use copyrator::copyrule::{
    ClusterPlacement, ConflictPolicy, CopyRule, CopyRuleSpec, DeletionPolicy,
};
use k8s_openapi::{
    api::{authorization::v1::SubjectAccessReview, core::v1::Secret},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::LabelSelector,
};
use kube::{
    Api, Client,
    api::{
        ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
    },
};
use serde_json::json;

use super::fixture::{Hub, MEMBER, MEMBERS_NS, Member};
use crate::common::{CONVERGE, Harness, Options, eventually, secret_value, stays};

/// The hub's ClusterProfiles in the members' namespace.
fn profiles(hub: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("multicluster.x-k8s.io", "v1alpha1", "ClusterProfile");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "clusterprofiles");
    Api::namespaced_with(hub.clone(), MEMBERS_NS, &resource)
}

/// Installs the stand-in ClusterProfile CRD (clusterprofile-crd.yaml) and waits until it is
/// served.
async fn install_profiles_crd(hub: &Client) {
    let crd: CustomResourceDefinition =
        serde_saphyr::from_str(include_str!("clusterprofile-crd.yaml")).expect("the CRD's YAML");
    Api::<CustomResourceDefinition>::all(hub.clone())
        .create(&PostParams::default(), &crd)
        .await
        .expect("installing the ClusterProfile CRD");
    let api = profiles(hub);
    eventually(Duration::from_secs(30), "ClusterProfiles served", || {
        let api = api.clone();
        async move { api.list(&ListParams::default().limit(1)).await.ok() }
    })
    .await;
}

/// Makes cluster `name`'s ClusterProfile carry exactly `labels`.
async fn profile(hub: &Client, name: &str, labels: &[(&str, &str)]) {
    let labels: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let body = json!({
        "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
        "metadata": {"name": name, "namespace": MEMBERS_NS, "labels": labels},
        "spec": {"displayName": name, "clusterManager": {"name": "e2e"}},
    });
    profiles(hub)
        .patch(
            name,
            &PatchParams::apply("copyrator-e2e").force(),
            &Patch::Apply(&body),
        )
        .await
        .unwrap_or_else(|e| panic!("ClusterProfile {name}: {e}"));
}

/// Whether member `cluster`'s identity may `verb` the ClusterProfile `name` (a SubjectAccessReview,
/// as `kubectl auth can-i --as` asks it).
async fn can(hub: &Client, cluster: &str, verb: &str, name: &str) -> bool {
    let user = format!(
        "system:serviceaccount:{MEMBERS_NS}:{}",
        copyrator::hub::member_identity(cluster)
    );
    let review: SubjectAccessReview = serde_json::from_value(json!({"spec": {
        "user": user,
        "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{MEMBERS_NS}")],
        "resourceAttributes": {"verb": verb, "group": "multicluster.x-k8s.io",
                               "resource": "clusterprofiles", "namespace": MEMBERS_NS, "name": name},
    }}))
    .expect("a SubjectAccessReview");
    Api::<SubjectAccessReview>::all(hub.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("a SubjectAccessReview")
        .status
        .is_some_and(|s| s.allowed)
}

#[tokio::test]
async fn a_rule_follows_the_labels_of_the_members_cluster_profile() {
    // A full read every 300 s: within this test, only the hub watches carry a change.
    let hub = Hub::start().await;
    install_profiles_crd(&hub.client).await;
    profile(&hub.client, MEMBER, &[("env", "dev")]).await;
    profile(&hub.client, "member-2", &[("env", "prod")]).await;
    let env = crate::common::TestEnv::new().await;
    let member = Member::prepare(&env).await;
    let h = Harness::start_in(
        env,
        Options {
            extra: member.args_every("300s"),
            ..Default::default()
        },
    )
    .await;
    hub.namespace("platform").await;
    hub.source("platform", "cred", "v1").await;
    let sel = ("registry", h.name("r"));
    let ceil = ("hub-ceiling", h.name("c"));
    let spec = CopyRuleSpec {
        kind: "Secret".into(),
        source_namespace: "platform".into(),
        source_name: Some("cred".into()),
        namespace_selector: Some(LabelSelector {
            match_labels: Some([(sel.0.to_string(), sel.1.clone())].into()),
            match_expressions: None,
        }),
        deletion_policy: DeletionPolicy::Delete,
        conflict_policy: ConflictPolicy::Overwrite,
        clusters: Some(ClusterPlacement {
            names: vec![],
            selector: Some(LabelSelector {
                match_labels: Some([("env".to_string(), "prod".to_string())].into()),
                match_expressions: None,
            }),
        }),
        ..Default::default()
    };
    Api::<CopyRule>::all(hub.client.clone())
        .create(&PostParams::default(), &CopyRule::new("prod-cred", spec))
        .await
        .expect("the hub CopyRule");
    hub.grant_members().await;

    // Each member may read its own ClusterProfile, by name, and no other member's.
    for verb in ["get", "list", "watch"] {
        assert!(
            can(&hub.client, MEMBER, verb, MEMBER).await,
            "{MEMBER} may {verb} its own ClusterProfile"
        );
        assert!(
            !can(&hub.client, MEMBER, verb, "member-2").await,
            "{MEMBER} cannot {verb} member-2's ClusterProfile"
        );
        assert!(
            !can(&hub.client, MEMBER, verb, "").await,
            "{MEMBER} cannot {verb} every ClusterProfile"
        );
    }
    assert!(can(&hub.client, "member-2", "get", "member-2").await);
    assert!(
        hub.can_get("member-2", "platform", "cred").await,
        "member-2's labels place the rule on it"
    );
    assert!(
        !hub.can_get(MEMBER, "platform", "cred").await,
        "{MEMBER}'s labels do not place the rule on it"
    );

    let inside = h
        .namespace(
            "team-in",
            &[(sel.0, sel.1.as_str()), (ceil.0, ceil.1.as_str())],
        )
        .await;
    member.set_token(&h, &hub.member_token().await).await;
    member
        .link(&h, &hub, &["platform"], (ceil.0, ceil.1.as_str()))
        .await;
    let link = json!({"spec": {"clusterProfileNamespace": MEMBERS_NS}});
    Api::<copyrator::hub::HubLink>::all(h.client.clone())
        .patch(&member.link, &PatchParams::default(), &Patch::Merge(&link))
        .await
        .expect("naming the link's ClusterProfile namespace");
    member.wait_reachable(&h, "True", CONVERGE).await;
    stays(
        Duration::from_secs(3),
        "no copy while the profile does not match",
        || async { matches!(h.secrets(&inside).get_opt("cred").await, Ok(None)) },
    )
    .await;

    // The label added, and the hub's next round granting the source: the profile's watch
    // brings the rule in.
    let soon = Duration::from_secs(10);
    let started = std::time::Instant::now();
    profile(&hub.client, MEMBER, &[("env", "prod")]).await;
    hub.grant_members().await;
    eventually(soon, "the copy placed by the profile's label", || async {
        let copy: Option<Secret> = h.secrets(&inside).get_opt("cred").await.ok().flatten();
        copy.and_then(|s| secret_value(&s, "token"))
            .filter(|v| v == "v1")
    })
    .await;
    eprintln!(
        "profile label added -> member copy: {:?}",
        started.elapsed()
    );
    // The hub's round gathers the member's report into the rule's status (SPEC §14.4): the
    // rule is placed on it by its labels, so its word is taken.
    let rules = Api::<CopyRule>::all(hub.client.clone());
    eventually(
        CONVERGE,
        "member-1 in the selected rule's status",
        || async {
            hub.grant_members().await;
            let status = rules.get("prod-cred").await.ok()?.status?;
            let member = status.clusters.into_iter().find(|c| c.cluster == MEMBER)?;
            (member.synced_copies == 1).then_some(())
        },
    )
    .await;

    // The member's profile no longer readable (its Role on the hub gone): a denied read
    // deletes nothing, the link says so, and the copy stays until the hub grants it again.
    Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(hub.client.clone(), MEMBERS_NS)
        .delete(
            &copyrator::hub::member_identity(MEMBER),
            &Default::default(),
        )
        .await
        .expect("revoking the member's profile Role");
    // A change of the profile (its watch started before, and goes on) asks for a full read.
    profile(&hub.client, MEMBER, &[("env", "prod"), ("tier", "1")]).await;
    member.wait_reachable(&h, "False", CONVERGE).await;
    stays(
        Duration::from_secs(3),
        "the copy stays while the profile is unreadable",
        || async {
            h.secrets(&inside)
                .get_opt("cred")
                .await
                .is_ok_and(|c| c.is_some())
        },
    )
    .await;
    hub.grant_members().await;
    member.wait_reachable(&h, "True", CONVERGE).await;

    // The label removed: the rule is placed here no more, and its copy goes.
    profile(&hub.client, MEMBER, &[("env", "dev")]).await;
    eventually(soon, "the copy removed with the label", || async {
        matches!(h.secrets(&inside).get_opt("cred").await, Ok(None)).then_some(())
    })
    .await;
    member.delete_link(&h).await;
    h.finish().await;
}
