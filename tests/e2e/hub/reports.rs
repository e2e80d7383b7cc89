//! Members' status on the hub (SPEC §14.4): what a member holds of a hub rule placed on it,
//! written by the member into its own report on the hub and gathered by the hub's leader into
//! the rule's `status.clusters`; a member may write its own report and no other member's.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;

use super::{fixture, setup};
use crate::common::{CONVERGE, build, eventually};
use copyrator::{copyrule::CopyRule, hub::report::RuleReport};

#[tokio::test]
async fn the_hub_rule_says_what_each_member_holds_and_its_conflicts() {
    let (h, hub, member) = setup().await;
    let sel = ("registry", h.name("r"));
    let sel = (sel.0, sel.1.as_str());
    let ceil = ("hub-ceiling", h.name("c"));
    let ceil = (ceil.0, ceil.1.as_str());
    let inside = h.namespace("team-in", &[sel, ceil]).await;
    let owned = h.namespace("team-owned", &[sel, ceil]).await;
    build::secret("cred")
        .data("token", "mine")
        .create(&h, &owned)
        .await;
    hub.service_account("member-2").await;
    hub.rule_on(
        "for-member-2",
        ("platform", "cred"),
        ("registry", "x"),
        "member-2",
    )
    .await;
    hub.grant_members().await;
    member.set_token(&h, &hub.member_token().await).await;
    member.link(&h, &hub, &["platform"], ceil).await;
    h.wait_value::<Secret>(&inside, "cred", "token", "v1").await;

    // The member reports into its own ConfigMap on the hub: 2 copies wanted, 1 in sync, 1
    // held by the member's own Secret.
    let reports = Api::<ConfigMap>::namespaced(hub.client.clone(), fixture::MEMBERS_NS);
    let report_name = copyrator::hub::member_identity(fixture::MEMBER);
    let report = eventually(CONVERGE, "the member's report on the hub", || async {
        let cm = reports.get_opt(&report_name).await.ok()??;
        let raw = cm.data?.get("registry")?.clone();
        let r: RuleReport = serde_json::from_str(&raw).ok()?;
        (r.wanted == 2).then_some(r)
    })
    .await;
    assert_eq!((report.synced, report.conflicting), (1, 1), "{report:?}");
    assert_eq!(report.conflicts[0].namespace, owned);

    // The hub's leader gathers it into the rule's status, per member.
    hub.grant_members().await;
    let rules = Api::<CopyRule>::all(hub.client.clone());
    let status = rules.get("registry").await.unwrap().status.unwrap();
    let member_1 = status
        .clusters
        .iter()
        .find(|c| c.cluster == fixture::MEMBER)
        .unwrap_or_else(|| panic!("member-1 in the rule's status: {:?}", status.clusters));
    assert_eq!(
        (
            member_1.wanted_copies,
            member_1.synced_copies,
            member_1.conflicting_copies
        ),
        (2, 1, 1)
    );
    assert_eq!(member_1.conflicts[0].namespace, owned);
    assert!(member_1.reported_time.is_some());
    // A rule not placed on member-1: member-1 says nothing of it, and member-2 reported nothing.
    let other = rules.get("for-member-2").await.unwrap().status;
    assert!(
        other.is_none_or(|s| s.clusters.is_empty()),
        "no member spoke of for-member-2"
    );

    // Each member may write its own report, not another's (`kubectl auth can-i patch`).
    let own = copyrator::hub::member_identity(fixture::MEMBER);
    let other_report = copyrator::hub::member_identity("member-2");
    let ns = fixture::MEMBERS_NS;
    assert!(
        hub.may(fixture::MEMBER, "patch", "configmaps", ns, &own)
            .await
    );
    assert!(
        !hub.may(fixture::MEMBER, "patch", "configmaps", ns, &other_report)
            .await,
        "member-1 cannot write member-2's report"
    );
    assert!(
        !hub.may(fixture::MEMBER, "create", "configmaps", ns, "")
            .await,
        "nor make reports of its own"
    );

    // The member's Secret goes: the copy is made, and the report and status follow.
    h.secrets(&owned)
        .delete("cred", &Default::default())
        .await
        .unwrap();
    h.wait_value::<Secret>(&owned, "cred", "token", "v1").await;
    eventually(Duration::from_secs(60), "the report follows", || async {
        hub.grant_members().await;
        let s = rules.get("registry").await.ok()?.status?;
        let c = s.clusters.iter().find(|c| c.cluster == fixture::MEMBER)?;
        (c.synced_copies == 2 && c.conflicting_copies == 0).then_some(())
    })
    .await;
    member.delete_link(&h).await;
    h.finish().await;
}
