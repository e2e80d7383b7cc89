//! The CopyRules as of the last LIST of them that no change of a CopyRule's spec has overtaken
//! since: what a source's watch event needs to know to tell which namespaces the change can
//! reach (the Pod gate forgets only those, SPEC §10.2), and what jobs read instead of a LIST
//! of CopyRules while the CopyRules watch is live (SPEC §5, "Reads").
//!
//! The CopyRules watch is metadata-only, so it cannot keep the rules by itself: each LIST of
//! them (a job's, while nothing is known; the resync's) that started after the latest change
//! leaves its rules here, and the watch's events say when they stop being current. An event
//! that shows a rule known here with the same uid, `metadata.generation` and deletion state
//! changed its status or metadata only (the API server bumps a custom resource's generation on
//! every change of its spec): what the rules select and copy is unchanged, so it leaves them
//! known. Every other event (a rule added, deleted, its spec changed, or one not known here)
//! forgets them; while a change is newer than every LIST since, nothing is known, and callers
//! LIST, or assume every namespace. The held objects' spec and identity are current; their
//! status and resourceVersion may be older (jobs that write a rule's status read it first).
//!
//! Jobs read them only while the watch is live: a watch that failed may have missed a change,
//! and one that starts over from a new LIST (410, or its first start) may never deliver the
//! event of a change made between a job's LIST and its own, so a new seed forgets them.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicU64, Ordering},
};

use super::coverage::{Coverage, Partitions};
use crate::{copyrule::CopyRule, model::Meta, rules::Rule};

/// What a LIST left (see the module documentation).
struct Known {
    /// The generation of changes the LIST started at.
    at: u64,
    /// Every CopyRule it returned, valid or not.
    copy_rules: Arc<Vec<CopyRule>>,
    /// The valid ones, parsed, not being deleted.
    rules: Arc<Vec<Rule>>,
}

/// See the module documentation.
#[derive(Default)]
pub struct CopyRuleScope {
    /// Counts changes of CopyRules' specs (and anything that may hide one).
    generation: AtomicU64,
    known: Mutex<Option<Known>>,
    /// Which CopyRules watches are up (one, or one per namespace of a namespace-scoped
    /// install, where the rules are namespaced).
    live: Mutex<Coverage>,
}

impl CopyRuleScope {
    /// Kept by the watches of `partitions`.
    pub fn with_partitions(partitions: &Partitions) -> Self {
        Self {
            live: Mutex::new(Coverage::new(partitions)),
            ..Self::default()
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Option<Known>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A CopyRule changed in a way that may change what the rules select or copy (or a change
    /// may have been missed): what is known is not any more.
    pub fn changed(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        *self.known() = None;
    }

    /// A CopyRule's watch event; returns whether it forgot the rules (see the module
    /// documentation: an event that changed a known rule's status only does not).
    pub fn event(&self, meta: &Meta, deleted: bool) -> bool {
        // A rule in a namespace is held as `<namespace>/<name>` (`namespaced.rs`).
        let name = meta
            .name
            .as_deref()
            .map(|n| crate::namespaced::rule_name(meta.namespace.as_deref(), n));
        let same_spec = !deleted
            && self.known().as_ref().is_some_and(|k| {
                k.copy_rules.iter().any(|r| {
                    r.metadata.name.is_some()
                        && r.metadata.name == name
                        && r.metadata.uid == meta.uid
                        && r.metadata.generation.is_some()
                        && r.metadata.generation == meta.generation
                        && r.metadata.deletion_timestamp.is_some()
                            == meta.deletion_timestamp.is_some()
                })
            });
        if !same_spec {
            self.changed();
        }
        !same_spec
    }

    /// Noted before a LIST of CopyRules is sent; give it to [`Self::listed`].
    pub fn listing(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// A LIST that started at `since` returned `rules`: known, unless a change came meanwhile
    /// (then the LIST may hold a rule as it was before it).
    pub fn listed(&self, since: u64, rules: &[CopyRule]) {
        let parsed: Vec<Rule> = rules
            .iter()
            .filter(|r| r.metadata.deletion_timestamp.is_none())
            .filter_map(|r| Rule::from_copy_rule(r).ok())
            .collect();
        let mut known = self.known();
        if self.generation.load(Ordering::SeqCst) == since {
            *known = Some(Known {
                at: since,
                copy_rules: Arc::new(rules.to_vec()),
                rules: Arc::new(parsed),
            });
        }
    }

    /// The valid CopyRules, parsed, if known now.
    pub fn rules(&self) -> Option<Arc<Vec<Rule>>> {
        let known = self.known();
        let k = known.as_ref()?;
        (k.at == self.generation.load(Ordering::SeqCst)).then(|| Arc::clone(&k.rules))
    }

    /// Every CopyRule, for a job that would LIST them: only while they are known and the
    /// watch is live.
    pub fn copy_rules(&self) -> Option<Arc<Vec<CopyRule>>> {
        if !self.live.lock().unwrap_or_else(|e| e.into_inner()).live() {
            return None;
        }
        let known = self.known();
        let k = known.as_ref()?;
        (k.at == self.generation.load(Ordering::SeqCst)).then(|| Arc::clone(&k.copy_rules))
    }

    /// The CopyRules watch of `part` is up, or down (it may miss events: jobs LIST
    /// meanwhile).
    pub fn set_live(&self, part: Option<&str>, live: bool) {
        self.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .set_live(part, live);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{copyrule::CopyRuleSpec, model::Kind};

    fn rule(name: &str) -> CopyRule {
        CopyRule::new(
            name,
            CopyRuleSpec {
                kind: Kind::Secret.as_str().into(),
                source_namespace: "platform".into(),
                source_name: Some("cred".into()),
                namespaces: vec!["team-a".into()],
                ..Default::default()
            },
        )
    }

    #[test]
    fn a_list_overtaken_by_a_rule_event_is_not_known() {
        let scope = CopyRuleScope::default();
        assert!(scope.rules().is_none(), "nothing listed yet");
        let since = scope.listing();
        scope.listed(since, &[rule("a")]);
        assert_eq!(scope.rules().unwrap().len(), 1);
        // A rule changes while a LIST is under way: that LIST's answer may be older.
        let since = scope.listing();
        scope.changed();
        assert!(scope.rules().is_none());
        scope.listed(since, &[rule("a")]);
        assert!(scope.rules().is_none(), "overtaken");
        let since = scope.listing();
        scope.listed(since, &[rule("a"), rule("b")]);
        assert_eq!(scope.rules().unwrap().len(), 2);
    }

    fn listed_rule(name: &str, uid: &str, generation: i64) -> CopyRule {
        let mut r = rule(name);
        r.metadata.uid = Some(uid.into());
        r.metadata.generation = Some(generation);
        r.metadata.resource_version = Some("10".into());
        r
    }

    fn event(name: &str, uid: &str, generation: i64) -> Meta {
        Meta {
            name: Some(name.into()),
            uid: Some(uid.into()),
            generation: Some(generation),
            resource_version: Some("11".into()),
            ..Default::default()
        }
    }

    fn known_and_live() -> CopyRuleScope {
        let scope = CopyRuleScope::default();
        scope.set_live(None, true);
        scope.listed(scope.listing(), &[listed_rule("a", "u1", 3)]);
        scope
    }

    #[test]
    fn jobs_read_the_rules_only_while_known_and_the_watch_is_live() {
        let scope = CopyRuleScope::default();
        scope.listed(scope.listing(), &[listed_rule("a", "u1", 3)]);
        assert!(scope.rules().is_some());
        assert!(scope.copy_rules().is_none(), "the watch is not up");
        scope.set_live(None, true);
        assert_eq!(scope.copy_rules().unwrap().len(), 1);
        scope.set_live(None, false);
        assert!(scope.copy_rules().is_none(), "the watch may miss events");
    }

    #[test]
    fn a_status_change_keeps_the_rules_any_other_change_forgets_them() {
        let scope = known_and_live();
        assert!(!scope.event(&event("a", "u1", 3), false), "status only");
        assert!(scope.copy_rules().is_some());

        for (what, meta, deleted) in [
            ("spec changed", event("a", "u1", 4), false),
            ("deleted", event("a", "u1", 3), true),
            ("recreated under the same name", event("a", "u2", 3), false),
            ("a rule not known", event("b", "u3", 1), false),
            (
                "being deleted",
                Meta {
                    deletion_timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::now(),
                    )),
                    ..event("a", "u1", 3)
                },
                false,
            ),
            (
                "no generation",
                Meta {
                    generation: None,
                    ..event("a", "u1", 3)
                },
                false,
            ),
        ] {
            let scope = known_and_live();
            assert!(scope.event(&meta, deleted), "{what}");
            assert!(scope.copy_rules().is_none(), "{what}");
            assert!(scope.rules().is_none(), "{what}");
        }

        let scope = CopyRuleScope::default();
        scope.set_live(None, true);
        assert!(
            scope.event(&event("a", "u1", 3), false),
            "nothing known: nothing to compare with"
        );
    }
}
