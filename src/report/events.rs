//! Kubernetes Events on sources and CopyRules, deduplicated so that a resync repeating the
//! same finding does not write the same Event again. Event messages name objects and reasons
//! only, never data.
//!
//! An Event about a source lives in the source's namespace. An Event about a CopyRule names
//! target namespaces, which only administrators may read (SPEC §9.5), so it lives in
//! kube-system ([`COPY_RULE_EVENTS_NAMESPACE`]): the API server accepts an Event about a
//! cluster-scoped object in `default` (which many clusters let tenants read) or, only when the
//! Event has an eventTime, in kube-system (1.20 accepts nowhere else; copyrator's own namespace
//! is refused). `kubectl describe copyrule` finds it there: it lists Events in all namespaces by
//! `involvedObject` with an empty namespace.
//!
//! Written through the core/v1 Events API with eventTime and the reporting fields set (what
//! that API calls a new Event), and also the classic count, timestamps and source that older
//! readers show. Both Events APIs show the same Events (`kubectl describe`, `kubectl get events`).

use std::{sync::Arc, time::Duration};

use k8s_openapi::{
    api::core::v1::{Event, EventSource, ObjectReference},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time},
    jiff::Timestamp,
};
use kube::{Api, Client, api::PostParams};
use moka::sync::Cache;

use crate::{
    copyrule::CopyRule,
    metrics::Metrics,
    model::{Kind, ObjectKey},
};

/// Where Events about CopyRules live: the one namespace besides `default` the API server accepts
/// them in, and one only administrators read on a typical cluster (SPEC §9.5).
pub const COPY_RULE_EVENTS_NAMESPACE: &str = "kube-system";

/// The longest `reportingInstance` the API server accepts.
const INSTANCE_LIMIT: usize = 128;

/// How long an identical Event is suppressed.
const DEDUP_WINDOW: Duration = Duration::from_secs(15 * 60);

/// What an Event is about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Regarding {
    Source {
        key: ObjectKey,
        uid: String,
    },
    CopyRule {
        name: String,
        uid: String,
    },
    /// A member's HubLink, for what a hub's rule does here (SPEC §14): cluster-scoped like a
    /// CopyRule, its Events live beside theirs.
    HubLink {
        name: String,
    },
    /// The install itself, by its Lease: what it says of a namespace where it may not
    /// write (SPEC §13) is told here.
    Install {
        namespace: String,
        lease: String,
    },
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
            Regarding::Install { namespace, lease } => ObjectReference {
                api_version: Some("coordination.k8s.io/v1".into()),
                kind: Some("Lease".into()),
                namespace: Some(namespace.clone()),
                name: Some(lease.clone()),
                ..Default::default()
            },
            Regarding::HubLink { name } => ObjectReference {
                api_version: Some("copyrator.io/v1alpha1".into()),
                kind: Some("HubLink".into()),
                name: Some(name.clone()),
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

    /// The namespace an Event about this object lives in.
    fn event_namespace(&self) -> &str {
        match self {
            Regarding::Source { key, .. } => &key.namespace,
            Regarding::CopyRule { .. } | Regarding::HubLink { .. } => COPY_RULE_EVENTS_NAMESPACE,
            Regarding::Install { namespace, .. } => namespace,
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
    /// A read-only copy's name, held by someone else's object, taken back (SPEC §4 item 11).
    pub const RECLAIMED: &str = "CopyReclaimed";
    pub const INVALID: &str = "InvalidConfiguration";
    pub const NO_TARGETS: &str = "NoTargets";
    pub const SA_TOKEN: &str = "ServiceAccountTokenNotCopied";
    /// A source that is never copied by its content: a credential's Secret type, an object
    /// that runs code (SPEC §3.1).
    pub const NEVER_COPIED: &str = "NeverCopied";
    /// An RBAC copy that would grant what copyrator may not hand out (SPEC §9.10).
    pub const GRANT_REFUSED: &str = "GrantRefused";
    pub const FAILED: &str = "CopyFailed";
    pub const SYNCED: &str = "Synced";
    pub const SOURCE_NOT_FOUND: &str = "SourceNotFound";
    pub const REFUSED: &str = "CopyRefused";
    pub const NOT_OPTED_IN: &str = "SourceNotOptedIn";
    pub const HELD_BACK: &str = "SourceHeldBack";
    /// A Secret's value that is not certificates only, for a ConfigMap (SPEC §3.2).
    pub const KEY_MATERIAL: &str = "KeyMaterialRefused";
    /// A source lacks keys its rule asks for (SPEC §3.2).
    pub const MISSING_KEYS: &str = "MissingKeys";
    /// A source of a bundle gives no certificate and is left out (SPEC §3.2, Bundles).
    pub const LEFT_OUT: &str = "BundleSourceLeftOut";
    /// No source of a bundle admitted into a namespace gives a certificate: its copy there
    /// is left as it is (SPEC §3.2, Bundles).
    pub const BUNDLE_EMPTY: &str = "BundleEmpty";
    /// A truststore's password cannot be read from its Secret: the copy is left as it is
    /// (SPEC §3.2, Bundles).
    pub const NO_PASSWORD: &str = "TruststorePasswordUnavailable";
    /// A listed namespace where copyrator is not bound: nothing is copied there (SPEC §13).
    pub const NOT_BOUND: &str = "NotBound";
    /// A listed namespace where copyrator is bound again.
    pub const BOUND: &str = "Bound";
    /// A hub could not let a member read a placed rule's source (SPEC §14.1).
    pub const NOT_GRANTED: &str = "MemberNotGranted";
}

#[derive(Clone)]
pub struct Events {
    client: Client,
    instance: String,
    seen: Cache<(Regarding, &'static str, String), ()>,
    metrics: Arc<Metrics>,
}

impl Events {
    /// `instance` (the replica's identity) becomes each Event's `reportingInstance`, which the
    /// API server requires non-empty and at most 128 bytes long.
    pub fn new(client: Client, instance: String, metrics: Arc<Metrics>) -> Self {
        Self {
            client,
            instance: reporting_instance(&instance),
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
        let namespace = regarding.event_namespace().to_string();
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
            // With an eventTime the API server takes an Event about a CopyRule in kube-system.
            event_time: Some(MicroTime(now)),
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

/// A replica's identity as the API server takes it for `reportingInstance`.
fn reporting_instance(identity: &str) -> String {
    match identity.trim() {
        "" => "copyrator".to_string(),
        i => truncate(i.to_string(), INSTANCE_LIMIT),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_rule_events_live_in_kube_system_and_source_events_beside_the_source() {
        let rule = Regarding::CopyRule {
            name: "r".into(),
            uid: "u".into(),
        };
        assert_eq!(rule.event_namespace(), "kube-system");
        // `kubectl describe copyrule` selects involvedObject.namespace="".
        assert_eq!(rule.reference().namespace, None);
        let source = Regarding::source(
            Kind::Secret,
            &ObjectKey::new(Kind::Secret, "team-a", "cred"),
            "u",
        );
        assert_eq!(source.event_namespace(), "team-a");
        assert_eq!(source.reference().namespace.as_deref(), Some("team-a"));
    }

    #[test]
    fn the_reporting_instance_is_never_empty_nor_too_long() {
        assert_eq!(reporting_instance("copyrator-7d9f-x2"), "copyrator-7d9f-x2");
        assert_eq!(reporting_instance(" "), "copyrator");
        assert_eq!(reporting_instance(&"a".repeat(300)).len(), 128);
    }

    #[test]
    fn truncate_keeps_char_boundaries() {
        assert_eq!(truncate("abc".into(), 5), "abc");
        assert_eq!(truncate("aé".into(), 2), "a");
    }
}
