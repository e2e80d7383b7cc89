//! Which CopyRule selectors are watched (SPEC §5): the sources of CopyRules with a
//! `sourceSelector` are seen the moment they appear, through one metadata-only watch per (kind,
//! source namespace, selector), filtered by the API server's watch cache, so that neither
//! unrelated objects nor other namespaces cost anything but the API server's label match. The
//! watches are the one watch loop (`watch::spawn_selected`); what their events trigger is the
//! dispatcher's to decide (`crate::freshness::dispatch`), as for every other watch.
//!
//! Run by the leader only: every replica would otherwise do the same work. A new leader's
//! watches start with a LIST of the objects that match now, so nothing is missed in between.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use tokio::{sync::watch, task::JoinHandle};

use crate::{
    cluster::{Cluster, ReadMode, progress::WatchProgress, watch::Target},
    freshness::{dispatch::Dispatcher, feed::Feed},
    marks,
    metrics::Metrics,
    model::Kind,
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

impl SourceSelector {
    /// What its watch follows: the objects it selects, copies left out.
    fn target(&self) -> Target {
        Target {
            feed: Feed::Selected(self.kind),
            namespace: Some(self.namespace.clone()),
            // A copy is never a source (SPEC §9.6), whatever labels it carried over.
            selector: Some(marks::not_a_copy(&self.selector)),
            fields: None,
            name: Feed::Selected(self.kind).name(),
            resource: None,
        }
    }
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
            SourceMatch::Name(_) | SourceMatch::Template(_) => Vec::new(),
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
#[allow(clippy::too_many_arguments)]
pub async fn run(
    cluster: Cluster,
    dispatcher: Arc<Dispatcher>,
    metrics: Arc<Metrics>,
    progress: Arc<WatchProgress>,
    policy: crate::plan::Policy,
    mut leading: watch::Receiver<bool>,
    rules_changed: Arc<tokio::sync::Notify>,
    mut shutdown: watch::Receiver<bool>,
) {
    let recheck = Duration::from_secs(30);
    let mut running: BTreeMap<SourceSelector, JoinHandle<()>> = BTreeMap::new();
    loop {
        let want = if *leading.borrow_and_update() {
            match crate::cluster::load::load_rules(&cluster, &[], &policy, ReadMode::Indexed).await
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
                    super::watch::spawn_selected(
                        &cluster,
                        &dispatcher,
                        &metrics,
                        &progress,
                        &shutdown,
                        sel.target(),
                    )
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
            clusters: None,
            api_version: None,
            kind: Kind::ConfigMap.as_str().into(),
            source_namespace: ns.into(),
            sources: None,
            drop_expired: false,
            template: None,
            create_once: false,
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
