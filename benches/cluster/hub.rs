//! Phase hub: copies across clusters (SPEC §14) on this machine: one hub and `members` member
//! clusters, each a control plane of its own (scripts/control-plane.sh; member 1 is the
//! cluster under test), each member's release copyrator following the hub by watches with
//! `--hub-sync-interval 300s`, so that no full read carries an update. A hub source update →
//! every member's copy holding it, beside the same update copied inside one cluster (a source
//! of member 1 and its copy, by the same copyrator), taken in turns and then sent together (the
//! local copy timed under the members' load too); the hub's API calls per
//! member per update, from the hub's `apiserver_request_total`; then a member's RSS before and
//! after the hub gains unrelated CopyRules, with the hub calls each of those cost.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use copyrator::{
    cluster::client as serve,
    copyrule::{ClusterPlacement, ConflictPolicy, CopyRule, CopyRuleSpec, DeletionPolicy},
    hub::HubLink,
    marks,
};
use k8s_openapi::{api::core::v1::Namespace, apimachinery::pkg::apis::meta::v1::LabelSelector};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

use crate::{
    bench_copyrator,
    common::{Process, kubeconfig},
    hub_fixture::{Hub, install_crd},
    payload,
    report::{Report, ms, summary},
};

mod support;

use support::{ControlPlane, Latest, create_namespace, hub_metrics, member_reads, set_value};

/// The phase's sizes.
pub struct Sizes {
    /// Member clusters (at least 3 in the full run).
    pub members: usize,
    /// Hub updates (and as many local ones).
    pub updates: usize,
    /// Unrelated CopyRules added on the hub for the memory figure.
    pub unrelated_rules: usize,
}

/// The hub namespace and Secret placed on every member.
const HUB_NS: &str = "platform";
const HUB_SOURCE: &str = "bench-cred";

pub async fn run(report: &mut Report, sz: &Sizes) {
    let hub = Hub::start().await;
    let id = crate::common::env::unique_suffix();
    hub.namespace(HUB_NS).await;
    set_value(&hub.client, HUB_NS, HUB_SOURCE, &payload(0), &[], &[]).await;
    let names: Vec<String> = (1..=sz.members).map(|k| format!("member-{k}")).collect();
    for name in names.iter().skip(1) {
        hub.service_account(name).await;
    }
    let selector = format!("bench-hub-{id}");
    rule(&hub.client, "bench-hub", &names, &selector).await;
    hub.grant_members().await;

    let mut members = Vec::new();
    for (k, name) in names.iter().enumerate() {
        // Member 1 is the cluster under test; the others are control planes of their own.
        let plane = (k > 0).then(|| ControlPlane::up(&format!("copyrator-bench-{name}")));
        let config = plane
            .as_ref()
            .map(|p| p.kubeconfig.clone())
            .unwrap_or_else(kubeconfig);
        members.push(Member::join(plane, config, &hub, name, &id, &selector, k == 0).await);
    }
    // Every member holds the copy first.
    let first = payload(0);
    for m in &members {
        m.copies.wait(HUB_SOURCE, &first, Instant::now()).await;
    }

    // The local baseline: a source of member 1 copied into a namespace of member 1.
    let local = &members[0];
    let local_src = format!("bench-hub-src-{id}");
    let local_key = format!("bench-hub-local-{id}");
    create_namespace(&local.client, &local_src, &[]).await;
    let selector_annotation = format!("{local_key}=yes");
    let local_labels = [(marks::SOURCE_LABEL, "true")];
    let local_annotations = [(
        marks::NAMESPACE_SELECTOR_ANNOTATION,
        selector_annotation.as_str(),
    )];
    // Writes member 1's own source with `value`.
    let set_local = |value: String| {
        let (client, src) = (&local.client, &local_src);
        let (labels, annotations) = (&local_labels, &local_annotations);
        async move { set_value(client, src, "local", &value, labels, annotations).await }
    };
    set_local(first.clone()).await;
    // Its copy lands in member 1's receiving namespace, labelled for it too.
    Api::<Namespace>::all(local.client.clone())
        .patch(
            &local.target,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {&local_key: "yes"}}})),
        )
        .await
        .expect("labelling member 1's namespace");
    local.copies.wait("local", &first, Instant::now()).await;

    let before = hub_metrics(&hub.client).await;
    let mut hub_times = Vec::new();
    let mut by_member = vec![Vec::new(); members.len()];
    let mut local_times = Vec::new();
    for i in 1..=sz.updates {
        let value = payload(i);
        let sent = Instant::now();
        set_value(&hub.client, HUB_NS, HUB_SOURCE, &value, &[], &[]).await;
        let answered = Instant::now();
        for (k, m) in members.iter().enumerate() {
            let seen = m.copies.wait(HUB_SOURCE, &value, sent).await;
            hub_times.push(seen.saturating_sub(answered - sent));
            by_member[k].push(seen.saturating_sub(answered - sent));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let sent = Instant::now();
        set_local(value.clone()).await;
        let answered = Instant::now();
        let seen = local.copies.wait("local", &value, sent).await;
        local_times.push(seen.saturating_sub(answered - sent));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = hub_metrics(&hub.client).await;
    // The same updates sent together: the hub's and member 1's own at one moment, so the
    // local copy is timed under the load of every member's work too (the diagnostic for the
    // ratio: on one machine, the members' copyrators and API servers share its cores).
    let mut hub_together = Vec::new();
    let mut local_together = Vec::new();
    for i in 1..=sz.updates {
        let value = payload(sz.updates + i);
        let sent = Instant::now();
        let (hub_answered, local_answered) = tokio::join!(
            async {
                set_value(&hub.client, HUB_NS, HUB_SOURCE, &value, &[], &[]).await;
                Instant::now()
            },
            async {
                set_local(value.clone()).await;
                Instant::now()
            }
        );
        let seen = local.copies.wait("local", &value, sent).await;
        local_together.push(seen.saturating_sub(local_answered - sent));
        for m in &members {
            let seen = m.copies.wait(HUB_SOURCE, &value, sent).await;
            hub_together.push(seen.saturating_sub(hub_answered - sent));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (tp50, _, tp99, tmax) = summary(hub_together);
    let (ltp50, _, ltp99, ltmax) = summary(local_together);
    let (hp50, _, hp99, hmax) = summary(hub_times.clone());
    let (lp50, _, lp99, lmax) = summary(local_times);
    let n = sz.members;
    report.row(
        &format!("hub update → {n} members' copies, p50 / p99 / max"),
        format!("{} / {} / {}", ms(hp50), ms(hp99), ms(hmax)),
        format!("{} / {} / {}", ms(lp50), ms(lp99), ms(lmax)),
        format!("{:.2}", hp50.as_secs_f64() / lp50.as_secs_f64().max(1e-9)),
        "p50 ≤ 2 × local",
    );
    report.row(
        &format!("hub and local update sent together → {n} members' copies, p50 / p99 / max"),
        format!("{} / {} / {}", ms(tp50), ms(tp99), ms(tmax)),
        format!("{} / {} / {}", ms(ltp50), ms(ltp99), ms(ltmax)),
        format!("{:.2}", tp50.as_secs_f64() / ltp50.as_secs_f64().max(1e-9)),
        "p50 ≤ 2 × local (same load)",
    );
    let reads = member_reads(&before, &after);
    let per = |verb: &str, resource: &str| {
        reads
            .iter()
            .filter(|(v, r, _)| v == verb && r == resource)
            .map(|(_, _, d)| d)
            .sum::<f64>()
            / (n * sz.updates) as f64
    };
    report.row(
        "hub calls per member per update: GET secrets",
        format!("{:.2}", per("GET", "secrets")),
        "".into(),
        "".into(),
        "O(1)",
    );
    report.note(format!(
        "hub: {n} members (member 1 the cluster under test, the others and the hub control planes of their own on this machine), each a release copyrator with --hub-sync-interval 300s following the hub by watches; {} updates of one ~1 KiB hub Secret placed on all of them, each from the apply's response until every member's copy was seen with the new value by a watch on that member; baseline: the same copyrator of member 1 copying an update of its own source into the same namespace, taken in turns with the hub's. Hub calls in that window by verb and resource (the members' only; the driver's own writes left out), over members × updates: {}",
        sz.updates,
        reads
            .iter()
            .map(|(v, r, d)| format!("{v} {r} {:.2}", d / (n * sz.updates) as f64))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    report.note(format!(
        "hub: p50 by member (1 = the cluster of the local baseline): {}",
        by_member
            .iter()
            .enumerate()
            .map(|(k, t)| format!("{} {}", k + 1, ms(summary(t.clone()).0)))
            .collect::<Vec<_>>()
            .join(", ")
    ));

    // Memory flat in the hub's unrelated objects: rules placed on no member.
    let rss_before = members[0].process.memory().1;
    let before = hub_metrics(&hub.client).await;
    for i in 0..sz.unrelated_rules {
        rule(
            &hub.client,
            &format!("unrelated-{i}"),
            &["not-a-member".to_string()],
            "unrelated",
        )
        .await;
    }
    // Each member reads each (one GET) as its event arrives: wait until they all did.
    let wanted = (n * sz.unrelated_rules) as f64;
    let rule_gets = |reads: Vec<(String, String, f64)>| {
        reads
            .iter()
            .filter(|(v, r, _)| v == "GET" && r == "copyrules")
            .map(|(_, _, d)| d)
            .sum::<f64>()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut after = hub_metrics(&hub.client).await;
    while rule_gets(member_reads(&before, &after)) < wanted && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
        after = hub_metrics(&hub.client).await;
    }
    let rss_after = members[0].process.memory().1;
    let rule_gets = rule_gets(member_reads(&before, &after));
    report.row(
        &format!(
            "member RSS, hub + {} unrelated CopyRules",
            sz.unrelated_rules
        ),
        format!("{:.1} MiB", rss_after as f64 / 1048576.0),
        format!("{:.1} MiB", rss_before as f64 / 1048576.0),
        format!("{:.2}", rss_after as f64 / (rss_before as f64).max(1.0)),
        "flat",
    );
    report.note(format!(
        "hub: {} CopyRules placed on no member added to the hub: GET copyrules per member per rule {:.2} (each member reads a rule it was not told of once, to see whether it is placed on it)",
        sz.unrelated_rules,
        rule_gets / (n * sz.unrelated_rules.max(1)) as f64
    ));
    for m in members {
        m.copies.task.abort();
    }
}

/// A member cluster joined to the hub: its copyrator, and a watch of the namespace receiving.
struct Member {
    client: Client,
    target: String,
    copies: Latest,
    process: Process,
    /// Stopped after the process.
    _plane: Option<ControlPlane>,
}

impl Member {
    async fn join(
        plane: Option<ControlPlane>,
        config: PathBuf,
        hub: &Hub,
        name: &str,
        id: &str,
        selector: &str,
        webhooks: bool,
    ) -> Self {
        let client = serve::kube_client_with_timeout(Some(&config), Duration::from_secs(60))
            .await
            .expect("member client");
        install_crd::<CopyRule>(&client).await;
        install_crd::<HubLink>(&client).await;
        let own = format!("copyrator-own-{id}");
        let target = format!("hub-in-{id}");
        create_namespace(&client, &own, &[]).await;
        create_namespace(
            &client,
            &target,
            &[("registry", selector), ("hub-ceiling", "bench")],
        )
        .await;
        let token = hub.token_of(name).await;
        set_value(&client, &own, "hub-token", &token, &[], &[]).await;
        let link: HubLink = serde_json::from_value(json!({
            "apiVersion": "copyrator.io/v1alpha1", "kind": "HubLink",
            "metadata": {"name": "bench-hub"},
            "spec": {
                "server": hub.server, "caBundle": hub.ca_bundle,
                "credentialSecret": {"name": "hub-token", "key": "config.json"},
                "clusterName": name,
                "ceiling": {
                    "sourceNamespaces": [HUB_NS], "trustedSourceNamespaces": [HUB_NS],
                    "namespaceSelector": {"matchLabels": {"hub-ceiling": "bench"}},
                },
            },
        }))
        .expect("a HubLink");
        Api::<HubLink>::all(client.clone())
            .create(&PostParams::default(), &link)
            .await
            .expect("creating the HubLink");
        let copies = Latest::start(Api::namespaced(client.clone(), &target)).await;
        let config = config.to_string_lossy().to_string();
        let lease = format!("--lease-namespace={own}");
        let extra = [
            "--kubeconfig",
            config.as_str(),
            "--hub-sync-interval",
            "300s",
            lease.as_str(),
        ];
        let process = if webhooks {
            bench_copyrator(Some(&client), &extra).await
        } else {
            bench_copyrator(None, &extra).await
        };
        Self {
            client,
            target,
            copies,
            process,
            _plane: plane,
        }
    }
}

/// A hub CopyRule placing the hub source on `clusters`, into their namespaces labelled
/// `registry=<selector>`.
async fn rule(hub: &Client, name: &str, clusters: &[String], selector: &str) {
    let spec = CopyRuleSpec {
        kind: "Secret".into(),
        source_namespace: HUB_NS.into(),
        source_name: Some(HUB_SOURCE.into()),
        namespace_selector: Some(LabelSelector {
            match_labels: Some([("registry".to_string(), selector.to_string())].into()),
            match_expressions: None,
        }),
        deletion_policy: DeletionPolicy::Delete,
        conflict_policy: ConflictPolicy::Skip,
        clusters: Some(ClusterPlacement {
            names: clusters.to_vec(),
            selector: None,
        }),
        ..Default::default()
    };
    Api::<CopyRule>::all(hub.clone())
        .create(&PostParams::default(), &CopyRule::new(name, spec))
        .await
        .unwrap_or_else(|e| panic!("creating hub CopyRule {name}: {e}"));
}
