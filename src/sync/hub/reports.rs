//! Members' status on the hub (SPEC §14.4), both ends. The hub's leader keeps, per member, a
//! report ConfigMap `copyrator-member-<cluster>` in the members' namespace and a Role letting
//! that member's identity alone `get` and `patch` it; it gathers the reports into each placed
//! rule's `status.clusters`. The member writes, after its copies of a hub converge, what it
//! holds of each placed rule, when that changed. Neither end deletes or waits on the other: a
//! report that cannot be written is written at the next convergence.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::{api::core::v1::ConfigMap, jiff::Timestamp};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};

use crate::{
    copyrule::CopyRule,
    hub::{
        MEMBER_LABEL, Placement, member_identity,
        report::{
            GrantFailures, MemberReport, REPORTED_AT_KEY, RuleReport, clusters_status, report_data,
            with_grant_failures,
        },
    },
    plan::Action,
    report::tally,
    rules::RuleId,
};

/// The rules of the Role a member holds in the members' namespace: its own report, nothing
/// else (`create` cannot be limited by name: the hub makes the ConfigMap).
pub fn home_rules(cluster: &str) -> Vec<Value> {
    vec![json!({
        "apiGroups": [""], "resources": ["configmaps"],
        "resourceNames": [member_identity(cluster)], "verbs": ["get", "patch"],
    })]
}

/// Member `cluster`'s report ConfigMap as the hub server-side applies it: its name and label
/// only, so the member's data stays its own field manager's.
pub fn report_object(members_namespace: &str, cluster: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": member_identity(cluster), "namespace": members_namespace,
            "labels": {MEMBER_LABEL: cluster},
        },
    })
}

/// With one LIST of the reports in `members_namespace`: deletes those of clusters that are not
/// `members` any more, and gathers the others into the `status.clusters` of each of `rules`
/// placed on members (`placed(rule, cluster)`), with what the hub could not grant them
/// (`failures`), written where it changed. A report is the
/// member's only if its name is that member's (a member may patch its own labels).
pub async fn settle_reports(
    hub: &Client,
    members_namespace: &str,
    members: &BTreeSet<String>,
    rules: &[CopyRule],
    failures: &GrantFailures,
    placed: impl Fn(&CopyRule, &str) -> bool,
) -> kube::Result<()> {
    let api = Api::<ConfigMap>::namespaced(hub.clone(), members_namespace);
    let maps = api
        .list(&ListParams::default().labels(MEMBER_LABEL))
        .await?
        .items;
    let empty = BTreeMap::new();
    let mut reports: Vec<MemberReport> = Vec::new();
    for cm in &maps {
        let Some(cluster) = cm.labels().get(MEMBER_LABEL) else {
            continue;
        };
        if cm.name_any() != member_identity(cluster) {
            continue;
        }
        if !members.contains(cluster) {
            if let Err(e) = api.delete(&cm.name_any(), &DeleteParams::default()).await {
                tracing::warn!(error = %e, cluster = %cluster, "a former member's report not deleted; tried again next round");
            }
            continue;
        }
        reports.push(MemberReport {
            cluster,
            data: cm.data.as_ref().unwrap_or(&empty),
        });
    }
    let rules_api = Api::<CopyRule>::all(hub.clone());
    for rule in rules.iter().filter(|r| r.spec.clusters.is_some()) {
        let clusters = clusters_status(rule, &reports, &placed);
        let clusters = with_grant_failures(rule, clusters, failures, &placed);
        let now = rule.status.as_ref().map(|s| &s.clusters);
        if now.is_none_or(|c| c.is_empty()) && clusters.is_empty() || now == Some(&clusters) {
            continue;
        }
        let patch = json!({"status": {"clusters": clusters}});
        if let Err(e) = rules_api
            .patch_status(
                &rule.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            tracing::debug!(rule = %rule.name_any(), error = %e, "members' report not written into the rule's status");
        }
    }
    Ok(())
}

/// What the member holds of each rule `placement` places on it (link `link`), from the
/// outcomes of a convergence of that link's copies; refused rules say why.
pub fn member_reports(
    link: &str,
    placement: &Placement,
    outcomes: &[(Action, crate::cluster::apply::Applied)],
) -> BTreeMap<String, RuleReport> {
    let tallies = tally(outcomes);
    let mut out = BTreeMap::new();
    for rule in &placement.rules {
        let RuleId::Hub {
            link: l,
            rule: name,
        } = &rule.id
        else {
            continue;
        };
        if l != link {
            continue;
        }
        let report = match tallies.get(&rule.id) {
            Some(t) => RuleReport::new(t.wanted, t.synced, t.conflicts.clone()),
            None => RuleReport::new(0, 0, Vec::new()),
        };
        out.insert(name.clone(), report);
    }
    for refused in &placement.refused {
        out.insert(
            refused.name.clone(),
            RuleReport::refused(refused.refusal.to_string()),
        );
    }
    out
}

/// Writes `reports` into member `cluster`'s report on the hub (in the namespace of the token's
/// ServiceAccount), unless they are what was written last (`last`). Keys of rules no longer
/// placed are removed. Failures are logged: the next convergence writes again.
pub async fn report_to_hub(
    hub: &Client,
    token: &str,
    cluster: &str,
    reports: &BTreeMap<String, RuleReport>,
    last: &mut Option<BTreeMap<String, String>>,
) {
    let data = report_data(reports);
    if last.as_ref() == Some(&data) {
        return;
    }
    let Some(namespace) = crate::hub::credential::token_namespace(token) else {
        tracing::debug!(
            cluster,
            "the hub token names no ServiceAccount namespace: no report"
        );
        return;
    };
    let api = Api::<ConfigMap>::namespaced(hub.clone(), &namespace);
    let name = member_identity(cluster);
    let old = match api.get_opt(&name).await {
        Ok(Some(cm)) => cm.data.unwrap_or_default(),
        // Not made yet by the hub (nothing placed here), or not ours to read.
        Ok(None) => return,
        Err(e) => {
            tracing::debug!(cluster, error = %e, "the member's report on the hub not read");
            return;
        }
    };
    let mut patch: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    for gone in old
        .keys()
        .filter(|k| !data.contains_key(*k) && *k != REPORTED_AT_KEY)
    {
        patch.insert(gone.clone(), Value::Null);
    }
    patch.insert(
        REPORTED_AT_KEY.into(),
        Value::String(Timestamp::now().to_string()),
    );
    match api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"data": patch})),
        )
        .await
    {
        Ok(_) => *last = Some(data),
        Err(e) => {
            tracing::debug!(cluster, error = %e, "the member's report on the hub not written")
        }
    }
}
