//! The Pod gate covers hub copies like local ones (SPEC §10.1, §14.2): before a Pod is
//! admitted, its namespace holds the hub copies the member's last read of its hub places
//! there, written from that memory, with no hub call, and long before the next full read. A
//! replica that does not lead holds no reads, and so vouches for no namespace.

use k8s_openapi::api::core::v1::Secret;

use crate::common::{Harness, Options, create_pod, pod, service_account};
use crate::pod_gate::{DRY_RUN_PODS, follower_of, lease_held_elsewhere, wait_for_pod_gate};

use super::token;

#[tokio::test]
async fn a_pod_finds_its_hub_copy_before_the_next_read_of_the_hub() {
    // A full read every 300 s: within this test, neither a read nor a hub watch (the hub does
    // not change) restores a copy; only the namespace's own sync can.
    let (h, hub, member) = super::setup_every(Some("300s")).await;
    let sel = ("registry", h.name("r"));
    let ceil = ("hub-ceiling", h.name("c"));
    let labels = [(sel.0, sel.1.as_str()), (ceil.0, ceil.1.as_str())];
    let inside = h.namespace("team-in", &labels).await;
    service_account(&h.client, &inside).await;
    member.set_token(&h, &hub.member_token().await).await;
    member
        .link(&h, &hub, &["platform"], (ceil.0, ceil.1.as_str()))
        .await;
    h.wait_value::<Secret>(&inside, "cred", "token", "v1").await;
    wait_for_pod_gate(&h.client, &inside, || h.metric(DRY_RUN_PODS)).await;

    // The member's hub copy deleted by hand, a Pod created at once: it is admitted with the
    // copy in place, put back from what the hub was last read to place here (by the copy's
    // own watch or by the gate, whichever comes first), with no read of the hub.
    h.secrets(&inside)
        .delete("cred", &Default::default())
        .await
        .expect("deleting the hub copy");
    create_pod(&h.client, &inside, &pod("app", &["cred"], None)).await;
    let copy = h.secrets(&inside).get_opt("cred").await.unwrap();
    assert_eq!(
        copy.as_ref().and_then(token).as_deref(),
        Some("v1"),
        "the Pod was admitted with its hub copy in place, in its last-read version"
    );

    // A namespace labelled into the rule and ceiling, a Pod right after: its copy is there.
    let later = h.namespace("team-later", &[]).await;
    service_account(&h.client, &later).await;
    h.label_namespace(
        &later,
        serde_json::json!({sel.0: sel.1.as_str(), ceil.0: ceil.1.as_str()}),
    )
    .await;
    create_pod(&h.client, &later, &pod("app", &["cred"], None)).await;
    let copy = h.secrets(&later).get_opt("cred").await.unwrap();
    assert_eq!(
        copy.as_ref().and_then(token).as_deref(),
        Some("v1"),
        "a Pod of a namespace newly labelled finds its hub copy"
    );
    member.delete_link(&h).await;
    h.finish().await;
}

#[tokio::test]
async fn a_replica_that_does_not_lead_claims_no_namespace_settled() {
    // Hubs followed, but by another replica: this one holds no hub reads.
    let env = crate::common::TestEnv::new().await;
    let leases = env.namespace("gate-lease", &[]).await;
    lease_held_elsewhere(&env.client, &leases, "held").await;
    let h = Harness::start_in(
        env,
        Options {
            extra: [follower_of(&leases), vec!["--hub-sync-interval=1s".into()]].concat(),
            ..Default::default()
        },
    )
    .await;
    let ns = h.namespace("team", &[]).await;
    service_account(&h.client, &ns).await;
    wait_for_pod_gate(&h.client, &ns, || h.metric(DRY_RUN_PODS)).await;
    let outcome = |o: &str| format!("copyrator_pod_gate_total{{outcome=\"{o}\"}}");
    let unsettled = h.metric(&outcome("unsettled")).await;
    let claimed = h.metric(&outcome("settled")).await + h.metric(&outcome("cached")).await;
    for name in ["app-1", "app-2"] {
        create_pod(&h.client, &ns, &pod(name, &[], None)).await;
    }
    assert_eq!(
        h.metric(&outcome("unsettled")).await,
        unsettled + 2.0,
        "each Pod admitted without the promise"
    );
    assert_eq!(
        h.metric(&outcome("settled")).await + h.metric(&outcome("cached")).await,
        claimed,
        "no namespace claimed settled, nor remembered so"
    );
    h.finish().await;
}
