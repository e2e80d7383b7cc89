//! The streams of watch events copyrator follows ([`Feed`]), each by its own name, and what an
//! event's object is to the jobs waiting on it ([`Watched`]).

use std::sync::OnceLock;

use crate::{
    model::{Kind, MAX_KINDS, Meta, ObjectKey},
    queue::job::JobKey,
};

/// An object whose persisted changes jobs wait for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Watched {
    Namespace(String),
    Object(ObjectKey),
    CopyRule(String),
}

/// A stream of watch events that can end waits: which one covers a job decides whether its
/// waits may rely on events or must poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Feed {
    Namespaces,
    /// Objects of one kind labelled `copyrator.io/source=true`.
    Sources(Kind),
    /// Objects of one kind labelled `app.kubernetes.io/managed-by=copyrator`.
    Copies(Kind),
    CopyRules,
    /// NamespacedCopyRules: one watch, or one per namespace of a namespace-scoped install;
    /// none, and nothing there, when their CRD is not installed.
    NamespacedCopyRules,
    /// Objects of one kind that a CopyRule's `sourceSelector` matches, labelled or not yet:
    /// one watch per selector, run by the leader (SPEC §5), not in [`Feed::all`].
    Selected(Kind),
}

impl Feed {
    /// Most feeds: namespaces, both kinds of rules, and the sources, copies and selected
    /// sources of each kind.
    pub const MAX: usize = 3 + 3 * MAX_KINDS;

    /// Every feed of this process: namespaces, CopyRules, and the sources and copies of
    /// every kind copied here ([`Kind::all`]: a kind registered later adds its two).
    pub fn all() -> Vec<Feed> {
        let mut all = vec![Feed::Namespaces, Feed::CopyRules, Feed::NamespacedCopyRules];
        for kind in Kind::served() {
            all.push(Feed::Sources(kind));
            all.push(Feed::Copies(kind));
        }
        all
    }

    /// What an event's object is, for the waiters.
    pub fn watched(self, m: &Meta) -> Option<Watched> {
        let name = m.name.clone()?;
        Some(match self {
            Feed::Namespaces => Watched::Namespace(name),
            // A rule in a namespace is known as `<namespace>/<name>` (`namespaced.rs`).
            Feed::CopyRules | Feed::NamespacedCopyRules => {
                Watched::CopyRule(crate::namespaced::rule_name(m.namespace.as_deref(), &name))
            }
            Feed::Sources(kind) | Feed::Copies(kind) | Feed::Selected(kind) => {
                Watched::Object(ObjectKey::new(kind, m.namespace.clone()?, name))
            }
        })
    }

    /// The feed, as logs and metrics name it: `source secrets`, `copied networkpolicies`.
    pub fn name(self) -> &'static str {
        static NAMES: [OnceLock<&'static str>; Feed::MAX] = [const { OnceLock::new() }; Feed::MAX];
        match self {
            Feed::Namespaces => "namespaces",
            Feed::CopyRules => "copyrules",
            Feed::NamespacedCopyRules => "namespacedcopyrules",
            Feed::Sources(kind) => NAMES[self.index()]
                .get_or_init(|| Box::leak(format!("source {}", kind.plural()).into_boxed_str())),
            Feed::Copies(kind) => NAMES[self.index()]
                .get_or_init(|| Box::leak(format!("copied {}", kind.plural()).into_boxed_str())),
            Feed::Selected(kind) => NAMES[self.index()]
                .get_or_init(|| Box::leak(format!("selected {}", kind.plural()).into_boxed_str())),
        }
    }

    /// Its bit in masks of feeds, `0..Feed::MAX`.
    pub(super) fn index(self) -> usize {
        match self {
            Feed::Namespaces => 0,
            Feed::CopyRules => 1,
            Feed::NamespacedCopyRules => 2,
            Feed::Sources(kind) => 3 + 2 * kind.index(),
            Feed::Copies(kind) => 4 + 2 * kind.index(),
            Feed::Selected(kind) => 3 + 2 * MAX_KINDS + kind.index(),
        }
    }

    /// The feed of the rule copyrator knows as `name` (`crate::namespaced`).
    pub fn of_rule(name: &str) -> Feed {
        match crate::namespaced::split_rule_name(name) {
            Some(_) => Feed::NamespacedCopyRules,
            None => Feed::CopyRules,
        }
    }

    /// The feed and object a job of `key` waits on.
    pub fn of(key: &JobKey) -> Option<(Feed, Watched)> {
        match key {
            JobKey::Namespace(n) => Some((Feed::Namespaces, Watched::Namespace(n.clone()))),
            JobKey::Source(k) => Some((Feed::Sources(k.kind), Watched::Object(k.clone()))),
            JobKey::Copy(k) => Some((Feed::Copies(k.kind), Watched::Object(k.clone()))),
            JobKey::Rule(n) => Some((Feed::of_rule(n), Watched::CopyRule(n.clone()))),
            JobKey::Resync => None,
        }
    }
}
