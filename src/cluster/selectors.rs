//! The sources of CopyRules with a `sourceSelector`, seen the moment they appear (SPEC §5):
//! one metadata-only watch per (kind, source namespace, selector), filtered by the API server's
//! watch cache, so that neither unrelated objects nor other namespaces cost anything but the
//! API server's label match. An object that starts matching and lacks the opt-in label (a new
//! source nobody told copyrator about) gets a source job at once; one that stops matching (or
//! goes) gets one too, so its copies follow the rule's deletion policy. Later changes of an
//! adopted source reach the sources webhook through the label its first job adds.
//!
//! Run by the leader only: every replica would otherwise do the same work. A new leader's
//! watches start with the objects that match now, so nothing is missed in between.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use futures::StreamExt;
use kube::{
    Resource,
    api::WatchParams,
    core::{WatchEvent, request::Request},
};
use tokio::{sync::watch, task::JoinHandle};

use crate::{
    cluster::{Cluster, Freshness},
    marks,
    metrics::{FeedLabels, Metrics},
    model::{Kind, MetaItem, Object, ObjectKey},
    queue::{
        WorkQueue, enqueue,
        job::{Job, JobKey, Trigger},
    },
    rules::{Rule, SourceMatch},
};

/// What one watch selects: a kind of object in a namespace, by a label selector.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SourceSelector {
    pub kind: Kind,
    pub namespace: String,
    /// In the string syntax the API server takes.
    pub selector: String,
}

/// The watches the CopyRules ask for.
pub fn wanted<'a>(rules: impl IntoIterator<Item = &'a Rule>) -> Vec<SourceSelector> {
    let mut out: Vec<SourceSelector> = rules
        .into_iter()
        .flat_map(|r| match &r.sources {
            SourceMatch::Selector(sel) => vec![SourceSelector {
                kind: r.kind,
                namespace: r.source_namespace.clone(),
                selector: sel.to_string(),
            }],
            SourceMatch::Name(_) => Vec::new(),
            // A bundle's selector entries: a new match wakes the bundle (SPEC §3.2).
            SourceMatch::Bundle(b) => b
                .sources
                .iter()
                .filter_map(|s| match &s.select {
                    crate::bundle::BundleSelect::Selector(sel) => Some(SourceSelector {
                        kind: s.kind,
                        namespace: s.namespace.clone(),
                        selector: sel.to_string(),
                    }),
                    crate::bundle::BundleSelect::Name(_) => None,
                })
                .collect(),
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Keeps one watch running per wanted selector while this replica leads; looks at the
/// CopyRules again whenever `rules_changed` says so (and every `recheck`).
pub async fn run(
    cluster: Cluster,
    queue: Arc<WorkQueue>,
    metrics: Arc<Metrics>,
    policy: crate::plan::Policy,
    mut leading: watch::Receiver<bool>,
    rules_changed: Arc<tokio::sync::Notify>,
    mut shutdown: watch::Receiver<bool>,
) {
    let recheck = Duration::from_secs(30);
    let mut running: BTreeMap<SourceSelector, JoinHandle<()>> = BTreeMap::new();
    loop {
        let want = if *leading.borrow_and_update() {
            match crate::cluster::load::load_rules(&cluster, &[], &policy, Freshness::Indexed).await
            {
                Ok(world) => Some(wanted(&world.rules().rules)),
                Err(e) => {
                    tracing::warn!(error = %e, "could not list CopyRules; selector watches unchanged");
                    None
                }
            }
        } else {
            Some(Vec::new())
        };
        if let Some(want) = want {
            running.retain(|sel, task| {
                let keep = want.contains(sel) && !task.is_finished();
                if !keep {
                    task.abort();
                }
                keep
            });
            for sel in want {
                running.entry(sel.clone()).or_insert_with(|| {
                    tokio::spawn(watch_selector(
                        cluster.clone(),
                        sel,
                        Arc::clone(&queue),
                        Arc::clone(&metrics),
                    ))
                });
            }
            metrics.selector_watches.set(running.len() as i64);
        }
        tokio::select! {
            _ = rules_changed.notified() => {}
            r = leading.changed() => if r.is_err() { break },
            _ = tokio::time::sleep(recheck) => {}
            _ = shutdown.changed() => break,
        }
    }
    for task in running.values() {
        task.abort();
    }
}

/// One selector's watch, resumed from its last version, started over after a 410.
async fn watch_selector(
    cluster: Cluster,
    sel: SourceSelector,
    queue: Arc<WorkQueue>,
    metrics: Arc<Metrics>,
) {
    let events = metrics
        .watch_events
        .get_or_create(&FeedLabels {
            feed: "source selectors",
        })
        .clone();
    let mut version = "0".to_string();
    let mut failures = 0u32;
    loop {
        let wp = WatchParams {
            // A copy is never a source (SPEC §9.6), whatever labels it carried over.
            label_selector: Some(marks::not_a_copy(&sel.selector)),
            // Ended by the API server before the client's API timeout (see `watch`).
            timeout: Some(cluster.watch_seconds()),
            bookmarks: true,
            ..Default::default()
        };
        let request = Request::new(Object::url_path(&sel.kind, Some(&sel.namespace)))
            .watch_metadata(&wp, &version);
        let stream = match request {
            Ok(req) => cluster.watch_events::<MetaItem>(req).await,
            Err(e) => {
                tracing::error!(error = %e, "building a selector watch");
                return;
            }
        };
        let stream = match stream {
            Ok(s) => s,
            Err(e) if e.code() == 410 => {
                version = "0".into();
                continue;
            }
            Err(e) => {
                failures += 1;
                if failures.is_power_of_two() {
                    tracing::warn!(namespace = %sel.namespace, selector = %sel.selector, error = %e, "selector watch failed");
                }
                tokio::time::sleep(Duration::from_millis(100 * u64::from(failures.min(300)))).await;
                continue;
            }
        };
        failures = 0;
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let (item, gone) = match event {
                Ok(WatchEvent::Added(item) | WatchEvent::Modified(item)) => (item, false),
                Ok(WatchEvent::Deleted(item)) => (item, true),
                Ok(WatchEvent::Bookmark(b)) => {
                    version = b.metadata.resource_version;
                    continue;
                }
                Ok(WatchEvent::Error(status)) if status.code == 410 => {
                    version = "0".into();
                    break;
                }
                Ok(WatchEvent::Error(_)) | Err(_) => break,
            };
            events.inc();
            if let Some(rv) = &item.metadata.resource_version {
                version.clone_from(rv);
            }
            let labelled = item
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(marks::SOURCE_LABEL))
                .is_some_and(|v| v == "true");
            // A labelled source's changes reach the sources webhook; a new, unlabelled match
            // and a source that stopped matching do not.
            if labelled && !gone {
                continue;
            }
            let Some(name) = item.metadata.name else {
                continue;
            };
            let key = ObjectKey::new(sel.kind, &sel.namespace, name);
            tracing::debug!(source = %key, gone, "source selector event");
            enqueue(
                &queue,
                &metrics,
                Job::new(JobKey::Source(key), Trigger::Watch),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        copyrule::{CopyRule, CopyRuleSpec},
        tenancy::TrustPolicy,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    fn rule(name: &str, ns: &str, selector: Option<(&str, &str)>) -> Rule {
        let spec = CopyRuleSpec {
            api_version: None,
            kind: Kind::ConfigMap.as_str().into(),
            source_namespace: ns.into(),
            sources: None,
            drop_expired: false,
            source_name: selector.is_none().then(|| "one".to_string()),
            source_selector: selector.map(|(k, v)| LabelSelector {
                match_labels: Some([(k.to_string(), v.to_string())].into()),
                match_expressions: None,
            }),
            namespace_selector: Some(LabelSelector::default()),
            namespaces: vec![],
            exclude_namespaces: vec![],
            target_name: None,
            deletion_policy: Default::default(),
            conflict_policy: Default::default(),
            image_pull_secret: false,
            read_only: None,
            keys: None,
            target: None,
        };
        Rule::from_copy_rule(&CopyRule::new(name, spec)).unwrap()
    }

    #[test]
    fn one_watch_per_kind_namespace_and_selector() {
        let _ = TrustPolicy::default();
        let rules = [
            rule("a", "platform", Some(("copyrator", "true"))),
            rule("b", "platform", Some(("copyrator", "true"))),
            rule("c", "other", Some(("copyrator", "true"))),
            rule("d", "platform", None),
        ];
        let w = wanted(&rules);
        assert_eq!(
            w.iter()
                .map(|s| format!("{} {} {}", s.kind, s.namespace, s.selector))
                .collect::<Vec<_>>(),
            [
                "ConfigMap other copyrator=true",
                "ConfigMap platform copyrator=true"
            ]
        );
    }
}
