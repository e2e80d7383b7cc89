//! A hub's connections are watched as the member's own are (SPEC §14.3): black-holed
//! connections to it are dropped within `--api-timeout`, and a frozen hub makes its link
//! `Reachable=False` as soon, with no full read due (one every 300 s here).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;

use super::{recovery::linked_copy, setup_every, token};
use crate::common::{Blackhole, eventually, stays};

/// What the issue asks of both faults: the member finds them within this.
const FOUND_WITHIN: Duration = Duration::from_secs(15);

#[tokio::test]
async fn an_update_after_black_holed_hub_connections_arrives_within_15_s() {
    let (h, hub, member) = setup_every(Some("300s")).await;
    let upstream = hub
        .server
        .trim_start_matches("https://")
        .parse()
        .expect("the hub's address");
    let proxy = Blackhole::start(upstream).await;
    member.set_token(&h, &hub.member_token().await).await;
    let server = format!("https://{}", proxy.addr);
    let inside = linked_copy(&h, &hub, &member, &server).await;

    // Every open connection to the hub goes silent (no FIN), as after a NAT or load balancer
    // failover; new ones pass.
    proxy.silence_open_connections();
    let start = Instant::now();
    hub.source("platform", "cred", "v2").await;
    eventually(FOUND_WITHIN, "the hub's update on the member", || async {
        let copy = h.secrets(&inside).get("cred").await.ok()?;
        (token(&copy).as_deref() == Some("v2")).then_some(())
    })
    .await;
    eprintln!("the update arrived after {:?}", start.elapsed());
    member.delete_link(&h).await;
    h.finish().await;
}

#[tokio::test]
async fn a_frozen_hub_is_found_within_15_s_and_back_costs_no_write() {
    let (h, hub, member) = setup_every(Some("300s")).await;
    member.set_token(&h, &hub.member_token().await).await;
    let inside = linked_copy(&h, &hub, &member, &hub.server.clone()).await;
    let synced = h
        .secrets(&inside)
        .get("cred")
        .await
        .unwrap()
        .metadata
        .resource_version;

    hub.signal("STOP");
    let start = Instant::now();
    let (_, reason, since) = member.wait_reachable(&h, "False", FOUND_WITHIN).await;
    eprintln!("Reachable=False after {:?}", start.elapsed());
    assert_eq!(reason, "HubUnreachable");
    stays(
        Duration::from_secs(10),
        "the copy stays, intact, while the hub is frozen",
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

    hub.signal("CONT");
    member
        .wait_reachable(&h, "True", Duration::from_secs(30))
        .await;
    let after = h.secrets(&inside).get("cred").await.unwrap();
    assert_eq!(
        after.metadata.resource_version, synced,
        "back, a copy in sync gets no write"
    );
    hub.source("platform", "cred", "v2").await;
    h.wait_value::<Secret>(&inside, "cred", "token", "v2").await;
    member.delete_link(&h).await;
    h.finish().await;
}
