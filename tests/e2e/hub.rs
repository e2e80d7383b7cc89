//! Copies across clusters (SPEC §14), with two real API servers: the test cluster is the
//! member, a second control plane the hub. The member's copyrator pulls what the hub places
//! on it through a HubLink, within the link's ceiling; a hub away or a refused token deletes
//! nothing.

mod consent;
mod fixture;
mod gate;
mod isolation;
mod join;
mod liveness;
mod profiles;
mod recovery;
mod reports;

use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;

use crate::common::{CONVERGE, Harness, Options, secret_value, stays};
use fixture::{Hub, Member};

/// Starts the member's copyrator (pulling every second) and a hub whose namespace
/// `platform` holds `cred` (token=v1), placed on the member by rule `registry` into
/// namespaces labelled `registry=<id>`.
async fn setup() -> (Harness, Hub, Member) {
    setup_every(None).await
}

/// As [`setup`], reading the hub in full every `interval` (`None`: every second).
async fn setup_every(interval: Option<&str>) -> (Harness, Hub, Member) {
    let hub = Hub::start().await;
    let env = crate::common::TestEnv::new().await;
    let member = Member::prepare(&env).await;
    let h = Harness::start_in(
        env,
        Options {
            extra: interval.map_or_else(|| member.args(), |i| member.args_every(i)),
            ..Default::default()
        },
    )
    .await;
    hub.namespace("platform").await;
    hub.source("platform", "cred", "v1").await;
    hub.rule("registry", ("platform", "cred"), ("registry", &h.name("r")))
        .await;
    hub.grant_members().await;
    (h, hub, member)
}

fn token(s: &Secret) -> Option<String> {
    secret_value(s, "token")
}

#[tokio::test]
async fn copies_follow_the_hub_within_the_link_ceiling() {
    let (h, hub, member) = setup().await;
    let selected = ("registry", h.name("r"));
    let ceiling = ("hub-ceiling", h.name("c"));
    let sel = (selected.0, selected.1.as_str());
    let ceil = (ceiling.0, ceiling.1.as_str());
    // Selected by the hub's rule and inside the ceiling; selected but outside the ceiling;
    // inside both but holding the member's own Secret of the same name.
    let inside = h.namespace("team-in", &[sel, ceil]).await;
    let outside = h.namespace("team-out", &[sel]).await;
    let owned = h.namespace("team-owned", &[sel, ceil]).await;
    crate::common::build::secret("cred")
        .data("token", "mine")
        .create(&h, &owned)
        .await;
    // A source of a hub namespace the ceiling does not accept, readable by the member, and
    // `inside` consenting to every namespace of the hub: the ceiling alone keeps it out.
    let consent = serde_json::json!({"metadata": {"annotations": {
        "copyrator.io/accept-from": format!("{}/*", member.link),
    }}});
    kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(h.client.clone())
        .patch(
            &inside,
            &Default::default(),
            &kube::api::Patch::Merge(&consent),
        )
        .await
        .expect("annotating the namespace");
    hub.namespace("other").await;
    hub.source("other", "other-cred", "o1").await;
    hub.rule("elsewhere", ("other", "other-cred"), sel).await;
    hub.grant_members().await;
    assert!(hub.can_get(fixture::MEMBER, "other", "other-cred").await);
    member.set_token(&h, &hub.member_token().await).await;

    // No link: nothing from the hub is written.
    stays(
        Duration::from_secs(3),
        "no copy without a HubLink",
        || async { matches!(h.secrets(&inside).get_opt("cred").await, Ok(None)) },
    )
    .await;

    member.link(&h, &hub, &["platform"], ceil).await;
    let copy: Secret = h.wait_value(&inside, "cred", "token", "v1").await;
    let annotations = copy.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("copyrator.io/source").map(String::as_str),
        Some(format!("{}/platform/cred", member.link).as_str()),
        "the copy names its link and source"
    );
    member.wait_reachable(&h, "True", CONVERGE).await;
    // explain on the member names the hub copy's link and hub source (it does not read the
    // hub: docs/clusters.md).
    let explained = crate::common::run_copyrator(&["explain", "namespace", &inside]).await;
    assert!(explained.success, "explain answers: {}", explained.stderr);
    assert!(
        explained.stdout.contains(&format!(
            "platform/cred on the hub of HubLink {}",
            member.link
        )),
        "explain names the hub copy: {}",
        explained.stdout
    );
    // ... and the hub rule the ceiling refuses (its source namespace is not accepted).
    assert!(
        explained.stdout.contains(&format!(
            "HubLink {} refuses hub CopyRule elsewhere",
            member.link
        )),
        "explain names the refused hub rule: {}",
        explained.stdout
    );
    // A few more rounds: what the ceiling excludes and what the member owns stay as they are.
    stays(
        Duration::from_secs(4),
        "the ceiling and the member's own objects hold",
        || async {
            let out = h.secrets(&outside).get_opt("cred").await;
            let other = h.secrets(&inside).get_opt("other-cred").await;
            let mine = h.secrets(&owned).get("cred").await;
            matches!(out, Ok(None))
                && matches!(other, Ok(None))
                && mine.is_ok_and(|s| {
                    let marked = s
                        .metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key("copyrator.io/source"));
                    token(&s).as_deref() == Some("mine") && !marked
                })
        },
    )
    .await;

    // The conflict with the member's own Secret is said on the member, on the HubLink, where
    // Events about CopyRules live.
    crate::common::eventually(
        CONVERGE,
        "a CopyConflict Event about the HubLink",
        || async {
            let events = kube::Api::<k8s_openapi::api::events::v1::Event>::namespaced(
                h.client.clone(),
                crate::common::RULE_EVENTS,
            )
            .list(&Default::default())
            .await
            .ok()?;
            events.items.into_iter().find(|e| {
                e.reason.as_deref() == Some("CopyConflict")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains(owned.as_str()))
                    && e.regarding.as_ref().is_some_and(|r| {
                        r.kind.as_deref() == Some("HubLink")
                            && r.name.as_deref() == Some(member.link.as_str())
                    })
            })
        },
    )
    .await;
    hub.source("platform", "cred", "v2").await;
    h.wait_value::<Secret>(&inside, "cred", "token", "v2").await;
    hub.delete_source("platform", "cred").await;
    h.wait_gone::<Secret>(&inside, "cred").await;
    assert_eq!(
        token(&h.secrets(&owned).get("cred").await.unwrap()).as_deref(),
        Some("mine"),
        "the member's own Secret is never touched"
    );
    member.delete_link(&h).await;
    h.finish().await;
}

#[tokio::test]
async fn a_hub_away_or_a_refused_token_deletes_nothing() {
    let (h, hub, member) = setup().await;
    let sel = ("registry", h.name("r"));
    let ceil = ("hub-ceiling", h.name("c"));
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
    h.wait_value::<Secret>(&inside, "cred", "token", "v1").await;
    member.wait_reachable(&h, "True", CONVERGE).await;

    let synced = h
        .secrets(&inside)
        .get("cred")
        .await
        .unwrap()
        .metadata
        .resource_version;
    // The hub's API server frozen for 60 s (longer than a hub watch may stay silent): the
    // copy stays as last synced, the link says since when.
    hub.signal("STOP");
    let frozen = std::time::Instant::now();
    let (_, reason, since) = member
        .wait_reachable(&h, "False", Duration::from_secs(40))
        .await;
    assert_eq!(reason, "HubUnreachable");
    let last_sync = format!(
        "copyrator_hub_last_sync_timestamp_seconds{{link=\"{}\"}}",
        member.link
    );
    let frozen_at = h.metric(&last_sync).await;
    assert!(frozen_at > 0.0, "the last full sync is known: {frozen_at}");
    stays(
        Duration::from_secs(60).saturating_sub(frozen.elapsed()),
        "the copy stays while the hub is away",
        || async {
            h.secrets(&inside)
                .get("cred")
                .await
                .is_ok_and(|s| token(&s).as_deref() == Some("v1"))
        },
    )
    .await;
    let (_, _, still) = member.reachable(&h).await.expect("a Reachable condition");
    // explain on the member says since when its hub is away (from the link's status).
    let explained = crate::common::run_copyrator(&["explain", "namespace", &inside]).await;
    assert!(
        explained
            .stdout
            .contains(&format!("HubLink {}: hub unreachable since", member.link)),
        "explain says the hub is away: {}",
        explained.stdout
    );
    assert_eq!(
        h.metric(&last_sync).await,
        frozen_at,
        "the last sync time stands still while the hub is away"
    );
    assert_eq!(
        since, still,
        "Reachable=False keeps the time of the first failure"
    );
    hub.signal("CONT");
    member
        .wait_reachable(&h, "True", Duration::from_secs(40))
        .await;
    assert!(
        h.metric(&last_sync).await > frozen_at,
        "the last sync time moves again once the hub is back"
    );
    let after = h
        .secrets(&inside)
        .get("cred")
        .await
        .unwrap()
        .metadata
        .resource_version;
    assert_eq!(after, synced, "back in reach, a copy in sync gets no write");
    hub.source("platform", "cred", "v2").await;
    h.wait_value::<Secret>(&inside, "cred", "token", "v2").await;

    // A token the hub refuses: nothing deleted either.
    member.set_token(&h, "not-a-token").await;
    let (_, reason, _) = member.wait_reachable(&h, "False", CONVERGE).await;
    assert_eq!(reason, "CredentialRefused");
    stays(
        Duration::from_secs(3),
        "the copy stays while the token is refused",
        || async {
            h.secrets(&inside)
                .get("cred")
                .await
                .is_ok_and(|s| token(&s).as_deref() == Some("v2"))
        },
    )
    .await;
    // A new token in the Secret: sync goes on, no restart.
    member.set_token(&h, &hub.member_token().await).await;
    member.wait_reachable(&h, "True", CONVERGE).await;
    hub.source("platform", "cred", "v3").await;
    h.wait_value::<Secret>(&inside, "cred", "token", "v3").await;
    member.delete_link(&h).await;
    h.finish().await;
}

#[tokio::test]
async fn a_member_reads_only_the_sources_placed_on_it() {
    let hub = Hub::start().await;
    hub.service_account("member-2").await;
    hub.namespace("platform").await;
    hub.source("platform", "cred", "v1").await;
    hub.source("platform", "cred-2", "v1").await;
    hub.rule("registry", ("platform", "cred"), ("registry", "on"))
        .await;
    hub.rule_on(
        "second",
        ("platform", "cred-2"),
        ("registry", "on"),
        "member-2",
    )
    .await;
    hub.grant_members().await;
    let m1 = fixture::MEMBER;
    assert!(
        hub.can_get(m1, "platform", "cred").await,
        "member-1 reads its source"
    );
    assert!(
        !hub.can_get("member-2", "platform", "cred").await,
        "member-2 cannot read member-1's source"
    );
    assert!(hub.can_get("member-2", "platform", "cred-2").await);
    assert!(!hub.can_get(m1, "platform", "cred-2").await);
    // The watches by name: list and watch with fieldSelector=metadata.name=<name>, which the
    // hub authorizes against the Role's resourceNames; never every Secret of the namespace.
    for verb in ["list", "watch"] {
        assert!(
            hub.can(m1, verb, "platform", "cred").await,
            "member-1 may {verb} its source by name"
        );
        assert!(
            !hub.can("member-2", verb, "platform", "cred").await,
            "member-2 cannot {verb} member-1's source"
        );
        assert!(
            !hub.can(m1, verb, "platform", "").await,
            "member-1 cannot {verb} every Secret of the namespace"
        );
    }
    // No longer placed: no longer readable.
    hub.delete_rule("registry").await;
    hub.grant_members().await;
    assert!(
        !hub.can_get(m1, "platform", "cred").await,
        "access follows the placement"
    );
    assert!(hub.can_get("member-2", "platform", "cred-2").await);
}

#[tokio::test]
async fn a_hub_change_reaches_the_member_by_its_watches() {
    // A full read every 300 s: within this test, only the hub watches can carry a change.
    let (h, hub, member) = setup_every(Some("300s")).await;
    hub.source("platform", "later", "l1").await;
    let sel = ("registry", h.name("r"));
    let ceil = ("hub-ceiling", h.name("c"));
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
    // The link is followed within the links' check (5 s), read in full once.
    h.wait_value::<Secret>(&inside, "cred", "token", "v1").await;

    let soon = Duration::from_secs(5);
    let value = |name: &'static str| {
        let api = h.secrets(&inside);
        move || {
            let api = api.clone();
            async move {
                api.get_opt(name)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|s| token(&s))
            }
        }
    };
    // A source update: its watch wakes one read of it.
    let started = std::time::Instant::now();
    hub.source("platform", "cred", "v2").await;
    crate::common::eventually(soon, "the copy updated by the watch", || {
        let read = value("cred")();
        async move { read.await.filter(|v| v == "v2") }
    })
    .await;
    eprintln!("hub update -> member copy: {:?}", started.elapsed());
    // A rule placed later: the CopyRules watch wakes a full read, and its source is followed.
    hub.rule("later", ("platform", "later"), ("registry", &h.name("r")))
        .await;
    hub.grant_members().await;
    crate::common::eventually(soon, "the newly placed source copied", || {
        let read = value("later")();
        async move { read.await.filter(|v| v == "l1") }
    })
    .await;
    hub.source("platform", "later", "l2").await;
    crate::common::eventually(soon, "the newly placed source followed", || {
        let read = value("later")();
        async move { read.await.filter(|v| v == "l2") }
    })
    .await;
    // A source deleted: the watch wakes a full read, which finds it gone.
    hub.delete_source("platform", "cred").await;
    crate::common::eventually(soon, "the copy of a deleted source deleted", || {
        let read = value("cred")();
        async move { read.await.is_none().then_some(()) }
    })
    .await;
    member.delete_link(&h).await;
    h.finish().await;
}
