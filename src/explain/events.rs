//! The last Event copyrator wrote about a source or CopyRule (`report::events` writes them:
//! core/v1 Events on the source, in kube-system for a CopyRule).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::{api::core::v1::Event, jiff::Timestamp};
use kube::{Api, Client, api::ListParams};

use crate::{model::ObjectKey, report::events::COPY_RULE_EVENTS_NAMESPACE, rules::RuleId};

/// What an Event is about, as explain groups findings: the object copyrator reports on for
/// a rule (the CopyRule, or the source of an inline rule).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum About {
    Source(ObjectKey),
    CopyRule(String),
}

impl About {
    pub fn of(rule: &RuleId) -> Self {
        match rule {
            RuleId::Inline(key) => About::Source(key.clone()),
            RuleId::CopyRule(name) => About::CopyRule(name.clone()),
            // Its Events are on its sources, as an inline rule's (`report`), and a rule
            // selects several: none is looked up here.
            RuleId::Namespaced(_) => About::CopyRule(rule.to_string()),
            // A hub's rule is no object here: no Event of this cluster is about it.
            RuleId::Hub { .. } => About::CopyRule(rule.to_string()),
        }
    }
}

impl std::fmt::Display for About {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            About::Source(key) => write!(f, "{key}"),
            About::CopyRule(name) => write!(f, "CopyRule {name}"),
        }
    }
}

/// One Event, as explain shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastEvent {
    pub type_: String,
    pub reason: String,
    pub message: String,
    pub time: Option<Timestamp>,
    pub count: i32,
}

/// The last copyrator Event about each of `about`. Best effort: what cannot be read (no
/// permission on Events) is left out, with a note on stderr.
pub async fn last_events(client: &Client, about: BTreeSet<About>) -> BTreeMap<About, LastEvent> {
    let mut out = BTreeMap::new();
    for a in about {
        let (namespace, kind, name) = match &a {
            About::Source(key) => (key.namespace.as_str(), key.kind.as_str(), key.name.as_str()),
            About::CopyRule(name) => (COPY_RULE_EVENTS_NAMESPACE, "CopyRule", name.as_str()),
        };
        let api: Api<Event> = Api::namespaced(client.clone(), namespace);
        let lp = ListParams::default().fields(&format!(
            "involvedObject.kind={kind},involvedObject.name={name}"
        ));
        match api.list(&lp).await {
            Ok(list) => {
                if let Some(e) = list
                    .items
                    .into_iter()
                    .filter(from_copyrator)
                    .max_by_key(time)
                {
                    out.insert(
                        a,
                        LastEvent {
                            type_: e.type_.clone().unwrap_or_default(),
                            reason: e.reason.clone().unwrap_or_default(),
                            message: e.message.clone().unwrap_or_default(),
                            time: time(&e),
                            count: e.count.unwrap_or(1),
                        },
                    );
                }
            }
            Err(e) => eprintln!("copyrator: cannot list the Events about {a}: {e}"),
        }
    }
    out
}

fn from_copyrator(e: &Event) -> bool {
    e.reporting_component.as_deref() == Some("copyrator")
        || e.source.as_ref().and_then(|s| s.component.as_deref()) == Some("copyrator")
}

fn time(e: &Event) -> Option<Timestamp> {
    e.last_timestamp
        .as_ref()
        .map(|t| t.0)
        .or_else(|| e.event_time.as_ref().map(|t| t.0))
        .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
}
