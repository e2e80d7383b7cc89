//! Who receives a hub copy (SPEC §14.2), and `explain` on the member saying why a namespace
//! does not (SPEC §14.3): outside the link's ceiling, not selected by the hub rule, a tenant's
//! source without the namespace's consent. explain reads the member only: the HubLink's
//! status and the namespace.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::Patch;

use crate::common::{run_copyrator, stays};

/// `copyrator explain namespace ns` on the member, its output.
async fn explain(ns: &str) -> String {
    let out = run_copyrator(&["explain", "namespace", ns]).await;
    assert!(out.success, "explain answers: {}", out.stderr);
    out.stdout
}

#[tokio::test]
async fn explain_says_why_a_namespace_holds_no_hub_copy() {
    // A trusted source (setup's), and a tenant's: both placed into namespaces labelled
    // registry=<r>.
    let (h, hub, member) = super::setup().await;
    let r = h.name("r");
    hub.namespace("tenant").await;
    hub.source("tenant", "tenant-cred", "t1").await;
    hub.rule("tenant-rule", ("tenant", "tenant-cred"), ("registry", &r))
        .await;
    hub.grant_members().await;
    let ceil = ("hub-ceiling", h.name("c"));
    let sel = ("registry", r.as_str());
    let ceil = (ceil.0, ceil.1.as_str());
    let inside = h.namespace("team-in", &[sel, ceil]).await;
    let outside = h.namespace("team-out", &[sel]).await;
    let unlabelled = h.namespace("team-plain", &[ceil]).await;
    let consenting = h.namespace("team-yes", &[sel, ceil]).await;
    let consent = serde_json::json!({"metadata": {"annotations": {
        "copyrator.io/accept-from": format!("{}/tenant", member.link),
    }}});
    kube::Api::<Namespace>::all(h.client.clone())
        .patch(&consenting, &Default::default(), &Patch::Merge(&consent))
        .await
        .expect("annotating the namespace");
    member.set_token(&h, &hub.member_token().await).await;
    member
        .link_trusting(
            &h,
            &hub,
            &hub.server,
            &["platform", "tenant"],
            &["platform"],
            ceil,
        )
        .await;

    h.wait_value::<Secret>(&inside, "cred", "token", "v1").await;
    // The tenant's source lands where the namespace consents, and only there.
    h.wait_value::<Secret>(&consenting, "tenant-cred", "token", "t1")
        .await;
    stays(
        Duration::from_secs(3),
        "no hub copy beyond the ceiling, selection or consent",
        || async {
            let none = |r: kube::Result<Option<Secret>>| matches!(r, Ok(None));
            none(h.secrets(&outside).get_opt("cred").await)
                && none(h.secrets(&unlabelled).get_opt("cred").await)
                && none(h.secrets(&inside).get_opt("tenant-cred").await)
        },
    )
    .await;

    let why = |rule: &str, ns: &str| format!("no copy of hub CopyRule {rule} (Secret ") + ns;
    let out = explain(&outside).await;
    assert!(
        out.contains(&why("registry", "platform/cred) in ")) && out.contains(&outside),
        "explain names the missing copy: {out}"
    );
    assert!(
        out.contains("refused by the link's ceiling"),
        "explain names the ceiling: {out}"
    );
    let out = explain(&unlabelled).await;
    assert!(
        out.contains(&format!(
            "no copy of hub CopyRule registry (Secret platform/cred) in {unlabelled}: namespace not consenting"
        )),
        "explain names the missing label: {out}"
    );
    let out = explain(&inside).await;
    assert!(
        out.contains(&format!(
            "no copy of hub CopyRule tenant-rule (Secret tenant/tenant-cred) in {inside}: tenant source without consent"
        )) && out.contains(&format!("{}/tenant", member.link)),
        "explain names the consent the tenant's source lacks: {out}"
    );
    assert!(
        !out.contains("no copy of hub CopyRule registry "),
        "a copy that is there is not said missing: {out}"
    );
    let out = explain(&consenting).await;
    assert!(
        !out.contains("no copy of hub CopyRule"),
        "a namespace holding every copy has nothing missing: {out}"
    );
    member.delete_link(&h).await;
    h.finish().await;
}
