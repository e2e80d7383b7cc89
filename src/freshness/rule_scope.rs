//! The CopyRules as of the last LIST of them that no CopyRule event has overtaken since: what
//! a source's watch event needs to know to tell which namespaces the change can reach (the Pod
//! gate forgets only those, SPEC §10.2). Jobs LIST the few CopyRules in full; each LIST that
//! started after the latest CopyRule event leaves its rules here. While a CopyRule event is
//! newer than every LIST since, nothing is known, and callers assume every namespace.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicU64, Ordering},
};

use crate::{copyrule::CopyRule, rules::Rule};

/// See the module documentation.
#[derive(Default)]
pub struct CopyRuleScope {
    /// Counts CopyRule events.
    generation: AtomicU64,
    /// The valid CopyRules a LIST returned, and the generation it started at.
    known: Mutex<Option<(u64, Arc<Vec<Rule>>)>>,
}

impl CopyRuleScope {
    fn known(&self) -> std::sync::MutexGuard<'_, Option<(u64, Arc<Vec<Rule>>)>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A CopyRule changed (its watch event): what is known is not any more.
    pub fn changed(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        *self.known() = None;
    }

    /// Noted before a LIST of CopyRules is sent; give it to [`Self::listed`].
    pub fn listing(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// A LIST that started at `since` returned `rules`: known, unless a CopyRule event came
    /// meanwhile (then the LIST may hold a rule as it was before that event).
    pub fn listed(&self, since: u64, rules: &[CopyRule]) {
        let parsed: Vec<Rule> = rules
            .iter()
            .filter(|r| r.metadata.deletion_timestamp.is_none())
            .filter_map(|r| Rule::from_copy_rule(r).ok())
            .collect();
        let mut known = self.known();
        if self.generation.load(Ordering::SeqCst) == since {
            *known = Some((since, Arc::new(parsed)));
        }
    }

    /// The CopyRules, if known now.
    pub fn rules(&self) -> Option<Arc<Vec<Rule>>> {
        let known = self.known();
        let (at, rules) = known.as_ref()?;
        (*at == self.generation.load(Ordering::SeqCst)).then(|| Arc::clone(rules))
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
                api_version: None,
                kind: Kind::Secret.as_str().into(),
                source_namespace: "platform".into(),
                source_name: Some("cred".into()),
                source_selector: None,
                namespace_selector: None,
                namespaces: vec!["team-a".into()],
                exclude_namespaces: vec![],
                target_name: None,
                deletion_policy: Default::default(),
                conflict_policy: Default::default(),
                image_pull_secret: false,
                read_only: false,
                keys: None,
                target: None,
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
}
