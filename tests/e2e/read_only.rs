//! Read-only copies (SPEC §4 item 11), on the real API server: a tenant can neither edit nor
//! delete one (the API server says which source and rule), copyrator still updates it, and
//! namespace deletion is never blocked, whether or not copyrator can tell the API server's
//! reviews from anyone's (SPEC §9.8); a copy that is not read-only can be edited and is
//! restored.

use crate::common;

use common::{tenant::Tenant, *};
use copyrator::{
    copyrule::{ConflictPolicy, CopyRuleSpec, DeletionPolicy},
    marks,
    model::Kind,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::{
    Api, Client, Config, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use serde_json::json;

const NAMESPACE_CONTROLLER: &str = "system:serviceaccount:kube-system:namespace-controller";

/// The test admin's client, acting as `user` (impersonation).
async fn acting_as(user: &str) -> Client {
    let kubeconfig = Kubeconfig::read_from(kubeconfig()).expect("the admin kubeconfig");
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("the admin's config");
    config.auth_info.impersonate = Some(user.into());
    Client::try_from(config).expect("an impersonating client")
}

/// The message of a request the API server refused.
fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>, what: &str) -> String {
    match result {
        Err(kube::Error::Api(status)) => status.message,
        other => panic!("{what} should be refused by the read-only webhook, got {other:?}"),
    }
}

fn is_read_only(cm: &ConfigMap) -> bool {
    cm.labels().get(marks::READ_ONLY).map(String::as_str) == Some("true")
}

#[tokio::test]
async fn only_copyrator_changes_a_read_only_copy_and_namespace_deletion_is_never_blocked() {
    read_only_copy_scenario(Harness::start(Options::default()).await, false).await;
}

/// The same, copyrator verifying the API server (`--client-ca`): it then also lets anyone who
/// may delete there delete the copy once its namespace is being deleted.
#[tokio::test]
async fn a_verified_api_server_lets_anyone_delete_a_read_only_copy_of_a_terminating_namespace() {
    let Some(t) = Harness::start_with_client_ca().await else {
        return;
    };
    read_only_copy_scenario(t, true).await;
}

/// A tenant's edit and delete refused, copyrator's update and the namespace controller's
/// delete done; then the namespace is deleted. `verified`: copyrator knows the API server.
async fn read_only_copy_scenario(t: Harness, verified: bool) {
    let src = t.namespace("ro-src", &[]).await;
    let tenant = Tenant::new(&t, "ro-team").await;
    let dest = tenant.namespace.clone();
    t.config_maps(&src)
        .create(
            &PostParams::default(),
            &config_map("ca", &[], &[], &[("ca.crt", "v1")]),
        )
        .await
        .unwrap();
    let rule = t
        .copy_rule(
            "ro",
            CopyRuleSpec {
                clusters: None,
                api_version: None,
                kind: Kind::ConfigMap.as_str().into(),
                source_namespace: src.clone(),
                sources: None,
                drop_expired: false,
                template: None,
                create_once: false,
                source_name: Some("ca".into()),
                source_selector: None,
                namespace_selector: None,
                namespaces: vec![dest.clone()],
                exclude_namespaces: vec![],
                target_name: None,
                deletion_policy: DeletionPolicy::Delete,
                conflict_policy: ConflictPolicy::Skip,
                image_pull_secret: false,
                read_only: Some(true),
                keys: None,
                target: None,
            },
        )
        .await;
    let copy = t
        .wait_for::<ConfigMap>(&dest, "ca", "a read-only copy", is_read_only)
        .await;

    // The tenant may edit ConfigMaps in its namespace, but not this one, nor delete it.
    let mine = tenant.config_maps(&dest);
    let edit = mine
        .patch(
            "ca",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"ca.crt": "mine"}})),
        )
        .await;
    let message = refusal(edit, "the tenant's edit");
    for part in [
        format!("read-only copy of {src}/ca"),
        format!("CopyRule {rule}"),
        "cannot be edited".into(),
    ] {
        assert!(message.contains(&part), "{part:?} not in {message:?}");
    }
    let message = refusal(
        mine.delete("ca", &DeleteParams::default()).await,
        "the tenant's delete",
    );
    assert!(message.contains("cannot be deleted"), "{message}");
    let held = t.config_maps(&dest).get("ca").await.unwrap();
    assert_eq!(held.uid(), copy.uid());
    assert_eq!(held.value("ca.crt").as_deref(), Some("v1"));

    // copyrator itself still updates it when the source changes.
    t.config_maps(&src)
        .patch(
            "ca",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"ca.crt": "v2"}})),
        )
        .await
        .unwrap();
    t.wait_value::<ConfigMap>(&dest, "ca", "ca.crt", "v2").await;

    // The namespace controller deletes it (copyrator then makes it again: the namespace is
    // still wanted) ...
    Api::<ConfigMap>::namespaced(acting_as(NAMESPACE_CONTROLLER).await, &dest)
        .delete("ca", &DeleteParams::default())
        .await
        .expect("the namespace controller may delete a read-only copy");
    t.wait_for::<ConfigMap>(&dest, "ca", "made again", |c| c.uid() != copy.uid())
        .await;

    // ... and once its namespace is being deleted (this API server has no namespace
    // controller: it stays Terminating), the controllers that empty it still may.
    Api::<Namespace>::all(t.client.clone())
        .delete(&dest, &DeleteParams::default())
        .await
        .unwrap();
    if verified {
        // To the API server, copyrator answers by the namespace's phase: anyone may.
        eventually(
            CONVERGE,
            "the tenant's delete in a terminating namespace",
            || async { mine.delete("ca", &DeleteParams::default()).await.ok() },
        )
        .await;
    } else {
        // To anyone else, the phase is not said (SPEC §9.8): the tenant is still refused, ...
        stays(
            std::time::Duration::from_secs(2),
            "the tenant's delete refused in a terminating namespace",
            || async {
                let deleted = mine.delete("ca", &DeleteParams::default()).await;
                refusal(deleted, "the tenant's delete").contains("cannot be deleted")
            },
        )
        .await;
        // ... and the namespace controller, emptying the namespace, deletes it.
        Api::<ConfigMap>::namespaced(acting_as(NAMESPACE_CONTROLLER).await, &dest)
            .delete("ca", &DeleteParams::default())
            .await
            .expect("the namespace controller may delete a read-only copy");
    }
    t.wait_gone::<ConfigMap>(&dest, "ca").await;
    t.finish().await;
}

#[tokio::test]
async fn a_copy_that_is_not_read_only_may_be_edited_and_is_restored() {
    let t = Harness::start(Options::default()).await;
    let src = t.namespace("rw-src", &[]).await;
    let tenant = Tenant::new(&t, "rw-team").await;
    let dest = tenant.namespace.clone();
    let inline = |read_only: &str| {
        config_map(
            "settings",
            &[(marks::SOURCE_LABEL, "true")],
            &[
                (marks::NAMESPACES_ANNOTATION, dest.as_str()),
                (marks::READ_ONLY, read_only),
            ],
            &[("mode", "strict")],
        )
    };
    t.config_maps(&src)
        .create(&PostParams::default(), &inline("true"))
        .await
        .unwrap();
    t.wait_for::<ConfigMap>(&dest, "settings", "a read-only copy", is_read_only)
        .await;
    let mine = tenant.config_maps(&dest);
    let edit = || async {
        mine.patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"mode": "lax"}})),
        )
        .await
    };
    let message = refusal(edit().await, "the tenant's edit");
    assert!(message.contains("inline rule"), "{message}");

    // Read-only turned off on the source: the copy loses the label, and with it the webhook.
    t.config_maps(&src)
        .replace("settings", &PostParams::default(), &{
            let mut cm = inline("false");
            cm.metadata.resource_version = t
                .config_maps(&src)
                .get("settings")
                .await
                .unwrap()
                .resource_version();
            cm
        })
        .await
        .unwrap();
    t.wait_for::<ConfigMap>(&dest, "settings", "no longer read-only", |c| {
        !is_read_only(c)
    })
    .await;
    edit()
        .await
        .expect("an edit of a copy that is not read-only");
    t.wait_value::<ConfigMap>(&dest, "settings", "mode", "strict")
        .await;
    t.finish().await;
}

/// SPEC §4 item 11: a read-only copy's name is its CopyRule's. While copyrator is down its
/// DELETE webhook fails open: the copy is deleted and the namespace makes an object of the
/// same name. copyrator, back, puts its copy back over that object (the rule's status
/// recorded that it held a read-only copy there) and says so in a Warning Event.
#[tokio::test]
async fn a_read_only_copy_swapped_while_copyrator_is_down_is_put_back() {
    let mut t = Harness::start(Options::default()).await;
    let src = t.namespace("ro-swap-src", &[]).await;
    let dest = t.namespace("ro-swap", &[]).await;
    t.config_maps(&src)
        .create(
            &PostParams::default(),
            &config_map("ca", &[], &[], &[("ca.crt", "platform")]),
        )
        .await
        .unwrap();
    let mut spec = common::build::copy_rule("ro-swap")
        .of(Kind::ConfigMap)
        .source(&src, "ca")
        .copied_to(&[&dest])
        .build();
    spec.read_only = Some(true);
    let rule = t.copy_rule("ro-swap", spec).await;
    t.wait_for::<ConfigMap>(&dest, "ca", "a read-only copy", is_read_only)
        .await;
    t.wait_for::<copyrator::copyrule::CopyRule>("", &rule, "its record of the copy", |r| {
        r.status
            .as_ref()
            .is_some_and(|s| s.read_only_in.contains(&dest))
    })
    .await;

    t.kill().await;
    t.config_maps(&dest)
        .delete("ca", &DeleteParams::default())
        .await
        .expect("the DELETE webhook fails open while copyrator is down");
    t.wait_gone::<ConfigMap>(&dest, "ca").await;
    t.config_maps(&dest)
        .create(
            &PostParams::default(),
            &config_map("ca", &[], &[], &[("ca.crt", "forged")]),
        )
        .await
        .unwrap();
    t.restart(Options::default()).await;

    let back = t
        .wait_value::<ConfigMap>(&dest, "ca", "ca.crt", "platform")
        .await;
    assert!(is_read_only(&back), "read-only again: {:?}", back.labels());
    assert_eq!(
        back.labels()
            .get(marks::MANAGED_BY_LABEL)
            .map(String::as_str),
        Some("copyrator")
    );
    let event = t
        .wait_for_any::<k8s_openapi::api::events::v1::Event>(
            RULE_EVENTS,
            "a CopyReclaimed event on the rule",
            about_rule(&rule, "CopyReclaimed"),
        )
        .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    t.finish().await;
}
