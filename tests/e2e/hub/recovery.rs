//! A member's copies through what real networks and credentials do (SPEC §14.3): the hub
//! black-holed by a TCP proxy (no FIN, no RST), the member's token replaced and the old one
//! revoked, a copy edited by hand on the member.

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams};

use super::{setup, setup_every, token};
use crate::common::{Blackhole, CONVERGE, stays};

/// The copy of the hub's `platform/cred` in a namespace inside the link's ceiling, once the
/// link is up; returns the namespace.
pub(super) async fn linked_copy(
    h: &crate::common::Harness,
    hub: &super::Hub,
    member: &super::Member,
    server: &str,
) -> String {
    let sel = ("registry", h.name("r"));
    let ceil = ("hub-ceiling", h.name("c"));
    let inside = h
        .namespace(
            "team-in",
            &[(sel.0, sel.1.as_str()), (ceil.0, ceil.1.as_str())],
        )
        .await;
    member
        .link_through(h, hub, server, &["platform"], (ceil.0, ceil.1.as_str()))
        .await;
    h.wait_value::<Secret>(&inside, "cred", "token", "v1").await;
    member.wait_reachable(h, "True", CONVERGE).await;
    inside
}

#[tokio::test]
async fn a_black_holed_hub_deletes_nothing_and_back_converges_without_writes() {
    let (h, hub, member) = setup().await;
    let upstream = hub
        .server
        .trim_start_matches("https://")
        .parse()
        .expect("the hub's address");
    let proxy = Blackhole::start(upstream).await;
    member.set_token(&h, &hub.member_token().await).await;
    let server = format!("https://{}", proxy.addr);
    let inside = linked_copy(&h, &hub, &member, &server).await;
    let synced = h
        .secrets(&inside)
        .get("cred")
        .await
        .unwrap()
        .metadata
        .resource_version;

    // Every connection to the hub goes silent, and new ones are never answered.
    proxy.block_new_connections();
    proxy.silence_open_connections();
    let (_, reason, since) = member
        .wait_reachable(&h, "False", Duration::from_secs(40))
        .await;
    assert_eq!(reason, "HubUnreachable");
    stays(
        Duration::from_secs(10),
        "the copy stays, intact, while the hub is black-holed",
        || async {
            h.secrets(&inside)
                .get("cred")
                .await
                .is_ok_and(|s| s.metadata.resource_version == synced)
        },
    )
    .await;
    let (_, _, still) = member.reachable(&h).await.expect("a Reachable condition");
    assert_eq!(since, still, "Reachable=False since the first failure");

    proxy.forward_new();
    member
        .wait_reachable(&h, "True", Duration::from_secs(30))
        .await;
    let after = h.secrets(&inside).get("cred").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, synced,
        "back in reach, a copy in sync gets no write"
    );
    hub.source("platform", "cred", "v2").await;
    h.wait_value::<Secret>(&inside, "cred", "token", "v2").await;
    member.delete_link(&h).await;
    h.finish().await;
}

#[tokio::test]
async fn a_replaced_token_with_the_old_one_revoked_keeps_sync_going() {
    let (h, hub, member) = setup().await;
    let old = hub.member_token_bound("token-1").await;
    member.set_token(&h, &old).await;
    let inside = linked_copy(&h, &hub, &member, &hub.server.clone()).await;

    // The administrator rotates: a new token in the Secret, then the old one revoked.
    let new = hub.member_token_bound("token-2").await;
    member.set_token(&h, &new).await;
    hub.revoke("token-1").await;
    // The API server finds the bound Secret gone within seconds.
    crate::common::eventually(Duration::from_secs(30), "the old token revoked", || async {
        (!hub.authenticates(&old).await).then_some(())
    })
    .await;
    assert!(hub.authenticates(&new).await);
    hub.source("platform", "cred", "v2").await;
    h.wait_value::<Secret>(&inside, "cred", "token", "v2").await;
    assert_eq!(
        member.reachable(&h).await.map(|c| c.0).as_deref(),
        Some("True"),
        "the link stays reachable on the new token"
    );
    // The token's expiry is reported: the metric has its exp claim, the link says it is fresh.
    let expiry = copyrator::hub::credential::token_expiry(&new).expect("a JWT's exp");
    let metric = format!(
        "copyrator_hub_credential_expiry_timestamp_seconds{{link=\"{}\"}}",
        member.link
    );
    h.wait_metric(&metric, "the token's expiry", |v| v == expiry as f64)
        .await;
    crate::common::eventually(CONVERGE, "CredentialExpiring=False", || async {
        member
            .condition(&h, "CredentialExpiring")
            .await
            .filter(|c| c.0 == "False" && c.1 == "TokenValid")
    })
    .await;
    // A token about to expire is said before it bites (this one, made here, the hub refuses).
    let soon = {
        use base64::Engine as _;
        let e = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        format!(
            "{}.{}.sig",
            e.encode(r#"{"alg":"RS256"}"#),
            e.encode(format!(r#"{{"iat":{},"exp":{}}}"#, now - 540, now + 60))
        )
    };
    member.set_token(&h, &soon).await;
    crate::common::eventually(CONVERGE, "CredentialExpiring=True", || async {
        member
            .condition(&h, "CredentialExpiring")
            .await
            .filter(|c| c.0 == "True" && c.1 == "TokenExpiresSoon")
    })
    .await;
    member.delete_link(&h).await;
    h.finish().await;
}

#[tokio::test]
async fn a_hub_copy_edited_on_the_member_is_restored() {
    // A full read every 300 s: the restores below are the copies watch's, as for local copies.
    let (h, hub, member) = setup_every(Some("300s")).await;
    member.set_token(&h, &hub.member_token().await).await;
    let inside = linked_copy(&h, &hub, &member, &hub.server.clone()).await;
    h.secrets(&inside)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"stringData": {"token": "edited"}})),
        )
        .await
        .unwrap();
    h.wait_value::<Secret>(&inside, "cred", "token", "v1").await;
    h.secrets(&inside)
        .delete("cred", &Default::default())
        .await
        .unwrap();
    let back: Secret = h.wait_value(&inside, "cred", "token", "v1").await;
    assert_eq!(token(&back).as_deref(), Some("v1"));
    member.delete_link(&h).await;
    h.finish().await;
}
