//! Kubernetes Events on sources and CopyRules, deduplicated so that a resync repeating the
//! same finding does not write the same Event again. Event messages name objects and reasons
//! only, never data.
//!
//! Written through the core/v1 Events API in its classic form (no eventTime): older API
//! servers (1.20) reject events.k8s.io/v1 Events about cluster-scoped objects such as
//! CopyRules unless they live in kube-system; classic Events about them live in `default`.
//! Both APIs show the same Events (`kubectl describe`, `kubectl get events`).

use std::{sync::Arc, time::Duration};

use k8s_openapi::{
    api::core::v1::{Event, EventSource, ObjectReference},
    apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
    jiff::Timestamp,
};
use kube::{Api, Client, api::PostParams};
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
    pub const REFUSED: &str = "CopyRefused";
    pub const NOT_OPTED_IN: &str = "SourceNotOptedIn";
}

#[derive(Clone)]
pub struct Events {
    client: Client,
    instance: String,
    seen: Cache<(Regarding, &'static str, String), ()>,
    metrics: Arc<Metrics>,
}

impl Events {
    pub fn new(client: Client, instance: String, metrics: Arc<Metrics>) -> Self {
        Self {
            client,
            instance,
            seen: Cache::builder()
                .max_capacity(10_000)
                .time_to_live(DEDUP_WINDOW)
                .build(),
            metrics,
        }
    }

    pub async fn warning(&self, regarding: &Regarding, reason: &'static str, note: String) {
        self.publish(regarding, "Warning", reason, note).await
    }

    pub async fn normal(&self, regarding: &Regarding, reason: &'static str, note: String) {
        self.publish(regarding, "Normal", reason, note).await
    }

    async fn publish(
        &self,
        regarding: &Regarding,
        type_: &'static str,
        reason: &'static str,
        note: String,
    ) {
        let key = (regarding.clone(), reason, note.clone());
        if self.seen.contains_key(&key) {
            return;
        }
        self.seen.insert(key, ());
        let reference = regarding.reference();
        // Events about cluster-scoped objects live in `default`.
        let namespace = reference
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let now = Timestamp::now();
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!(
                    "{}.{:x}",
                    reference.name.as_deref().unwrap_or("copyrator"),
                    now.as_nanosecond()
                )),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            involved_object: reference,
            reason: Some(reason.into()),
            // The API caps messages at 1 kB.
            message: Some(truncate(note, 1000)),
            type_: Some(type_.into()),
            action: Some("Sync".into()),
            count: Some(1),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            reporting_component: Some("copyrator".into()),
            reporting_instance: Some(self.instance.clone()),
            source: Some(EventSource {
                component: Some("copyrator".into()),
                host: None,
            }),
            ..Default::default()
        };
        self.metrics.api_call("create", "events");
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        if let Err(e) = api.create(&PostParams::default(), &event).await {
            // Events are best effort; a failure must not fail the job.
            self.metrics.api_error(match &e {
                kube::Error::Api(status) => status.code,
                _ => 0,
            });
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
