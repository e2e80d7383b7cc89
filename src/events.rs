//! Kubernetes Events on sources and CopyRules (events.k8s.io/v1 through kube-runtime's
//! Recorder), deduplicated so that a resync repeating the same finding does not write the same
//! Event again. Event notes name objects and reasons only, never data.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Client,
    runtime::events::{Event, EventType, Recorder, Reporter},
};
use moka::sync::Cache;

use crate::{
    copyrule::CopyRule,
    metrics::Metrics,
    model::{Kind, ObjectKey},
};

/// How long an identical Event is suppressed.
const DEDUP_WINDOW: Duration = Duration::from_secs(15 * 60);

/// What an Event is about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Regarding {
    Source { key: ObjectKey, uid: String },
    CopyRule { name: String, uid: String },
}

impl Regarding {
    fn reference(&self) -> ObjectReference {
        match self {
            Regarding::Source { key, uid } => ObjectReference {
                api_version: Some("v1".into()),
                kind: Some(key.kind.as_str().into()),
                namespace: Some(key.namespace.clone()),
                name: Some(key.name.clone()),
                uid: Some(uid.clone()).filter(|u| !u.is_empty()),
                ..Default::default()
            },
            Regarding::CopyRule { name, uid } => ObjectReference {
                api_version: Some("copyrator.io/v1alpha1".into()),
                kind: Some("CopyRule".into()),
                name: Some(name.clone()),
                uid: Some(uid.clone()).filter(|u| !u.is_empty()),
                ..Default::default()
            },
        }
    }

    pub fn copy_rule(rule: &CopyRule) -> Self {
        Regarding::CopyRule {
            name: rule.metadata.name.clone().unwrap_or_default(),
            uid: rule.metadata.uid.clone().unwrap_or_default(),
        }
    }

    pub fn source(kind: Kind, key: &ObjectKey, uid: &str) -> Self {
        debug_assert_eq!(kind, key.kind);
        Regarding::Source {
            key: key.clone(),
            uid: uid.to_string(),
        }
    }
}

/// Reasons, as they appear in `kubectl describe`.
pub mod reason {
    pub const CONFLICT: &str = "CopyConflict";
    pub const ADOPTED: &str = "CopyAdopted";
    pub const INVALID: &str = "InvalidConfiguration";
    pub const NO_TARGETS: &str = "NoTargets";
    pub const SA_TOKEN: &str = "ServiceAccountTokenNotCopied";
    pub const FAILED: &str = "CopyFailed";
    pub const SYNCED: &str = "Synced";
    pub const SOURCE_NOT_FOUND: &str = "SourceNotFound";
}

#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
    seen: Cache<(Regarding, &'static str, String), ()>,
    metrics: Arc<Metrics>,
}

impl Events {
    pub fn new(client: Client, instance: Option<String>, metrics: Arc<Metrics>) -> Self {
        let reporter = Reporter {
            controller: "copyrator".into(),
            instance,
        };
        Self {
            recorder: Recorder::new(client, reporter),
            seen: Cache::builder()
                .max_capacity(10_000)
                .time_to_live(DEDUP_WINDOW)
                .build(),
            metrics,
        }
    }

    pub async fn warning(&self, regarding: &Regarding, reason: &'static str, note: String) {
        self.publish(regarding, EventType::Warning, reason, note)
            .await
    }

    pub async fn normal(&self, regarding: &Regarding, reason: &'static str, note: String) {
        self.publish(regarding, EventType::Normal, reason, note)
            .await
    }

    async fn publish(
        &self,
        regarding: &Regarding,
        type_: EventType,
        reason: &'static str,
        note: String,
    ) {
        let key = (regarding.clone(), reason, note.clone());
        if self.seen.contains_key(&key) {
            return;
        }
        self.seen.insert(key, ());
        let event = Event {
            type_,
            reason: reason.into(),
            // The API caps notes at 1 kB.
            note: Some(truncate(note, 1000)),
            action: "Sync".into(),
            secondary: None,
        };
        self.metrics.api_call("create", "events");
        if let Err(e) = self.recorder.publish(&event, &regarding.reference()).await {
            // Events are best effort; a failure must not fail the job.
            tracing::warn!(error = %e, reason, "could not publish event");
        }
    }
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}
