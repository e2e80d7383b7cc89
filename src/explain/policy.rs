//! The policy `explain` reasons with: the running copyrator's, read from its Lease (`lease`),
//! with the policy flags given to `explain` itself overriding it, each override said (SPEC
//! §11.1).

use k8s_openapi::jiff::Timestamp;

use super::lease::{LeaseRef, Lookup};
use crate::{cli::ExplicitPolicy, pipeline::published::PublishedScope, plan::Policy};

#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    pub policy: Policy,
    /// The Lease the running copyrator's policy was read from.
    pub lease: Option<LeaseRef>,
    /// When the leader's last full resync began, as published.
    pub last_resync: Option<Timestamp>,
    /// The flags given here that replaced a published value (`--trusted-namespaces`, ...).
    pub overridden: Vec<&'static str>,
    pub notes: Vec<String>,
    /// A namespace-scoped install's namespaces and those not bound, as published (SPEC §13).
    pub scope: Option<PublishedScope>,
}

impl Resolved {
    /// `Lease`, `LeaseAndFlags` (some values overridden) or `Flags`.
    pub fn origin(&self) -> &'static str {
        match (&self.lease, self.overridden.is_empty()) {
            (None, _) => "Flags",
            (Some(_), true) => "Lease",
            (Some(_), false) => "LeaseAndFlags",
        }
    }
}

/// The published policy where `lookup` found one, each value replaced by the flag's when the
/// flag was given (`explicit`); `flags` alone otherwise.
pub fn resolve(flags: &Policy, explicit: ExplicitPolicy, lookup: Lookup) -> Resolved {
    let (lease, published) = match lookup {
        Lookup::Found(lease, published) => (lease, published),
        Lookup::NotFound(why) => {
            return Resolved {
                policy: flags.clone(),
                lease: None,
                last_resync: None,
                overridden: Vec::new(),
                notes: vec![format!(
                    "the running copyrator's policy was not found ({why}): using this command's \
                     policy flags; give it the running copyrator's values"
                )],
                scope: None,
            };
        }
    };
    let mut policy = published.policy_or(flags);
    let mut overridden = Vec::new();
    let mut notes = Vec::new();
    if !lease.held {
        notes.push(format!(
            "Lease {}/{} is not held (copyrator stopped, or released it): its policy may be out of date",
            lease.namespace, lease.name
        ));
    }
    let mut take =
        |given: bool, flag: &'static str, published: Option<String>, set: &mut dyn FnMut()| {
            if !given {
                return;
            }
            set();
            overridden.push(flag);
            notes.push(match published {
                Some(v) => format!(
                    "{flag} given here overrides the running copyrator's {:?}",
                    v
                ),
                None => format!("{flag} given here (the running copyrator does not publish it)"),
            });
        };
    take(
        explicit.trusted_namespaces,
        "--trusted-namespaces",
        published.trusted_namespaces.as_ref().map(|t| t.to_string()),
        &mut || policy.trust = flags.trust.clone(),
    );
    take(
        explicit.exclude_namespaces,
        "--exclude-namespaces",
        published
            .excluded_namespaces
            .as_ref()
            .map(|e| e.iter().cloned().collect::<Vec<_>>().join(",")),
        &mut || policy.excluded_namespaces = flags.excluded_namespaces.clone(),
    );
    take(
        explicit.max_sources_per_namespace,
        "--max-sources-per-namespace",
        published.max_sources_per_namespace.map(|n| n.to_string()),
        &mut || policy.caps.per_namespace = flags.caps.per_namespace,
    );
    take(
        explicit.max_source_metadata_bytes,
        "--max-source-metadata-bytes",
        published.max_source_metadata_bytes.map(|n| n.to_string()),
        &mut || policy.caps.metadata_bytes = flags.caps.metadata_bytes,
    );
    if !published.unreadable.is_empty() {
        notes.push(format!(
            "unreadable published values, this command's flags used instead: {}",
            published.unreadable.join("; ")
        ));
    }
    Resolved {
        policy,
        lease: Some(lease),
        last_resync: published.last_resync,
        overridden,
        notes,
        scope: published.scope.map(|s| *s),
    }
}

/// What a namespace-scoped install's published scope says of `namespace` (`None`: any
/// namespace), as notes (SPEC §13).
pub fn scope_notes(scope: Option<&PublishedScope>, namespace: Option<&str>) -> Vec<String> {
    let Some(scope) = scope else {
        return Vec::new();
    };
    let mut notes = Vec::new();
    if let Some(ns) = namespace
        && !scope.listed.contains(ns)
    {
        notes.push(format!(
            "the running copyrator is namespace-scoped and {ns} is not one of its namespaces: \
             nothing is copied into or from it"
        ));
    }
    let not_bound: Vec<&str> = scope
        .not_bound
        .iter()
        .map(String::as_str)
        .filter(|n| namespace.is_none_or(|ns| ns == *n))
        .collect();
    if !not_bound.is_empty() {
        notes.push(format!(
            "copyrator is not bound in {}: its owner has not applied the Role and RoleBinding \
             the chart prints (`helm get notes`); nothing is copied there until then",
            not_bound.join(", ")
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        pipeline::published::{Published, policy_annotations},
        plan::SourceCaps,
        tenancy::{NamespacePatterns, TrustPolicy},
    };

    fn policy(trusted: &str, excluded: &[&str], per_namespace: usize) -> Policy {
        Policy {
            excluded_namespaces: excluded.iter().map(|s| s.to_string()).collect(),
            trust: TrustPolicy {
                trusted_namespaces: NamespacePatterns::parse(trusted).unwrap(),
            },
            caps: SourceCaps {
                per_namespace,
                ..SourceCaps::default()
            },
            ..Policy::default()
        }
    }

    fn lease(ns: &str, held: bool) -> LeaseRef {
        LeaseRef {
            namespace: ns.into(),
            name: "copyrator".into(),
            held,
        }
    }

    fn found(p: &Policy) -> Lookup {
        Lookup::Found(
            lease("ops", true),
            Box::new(Published::read(&policy_annotations(p))),
        )
    }

    #[test]
    fn the_running_copyrators_policy_wins_over_defaults() {
        let running = policy("platform", &["kube-system", "sandbox"], 7);
        let defaults = policy("", &["kube-system", "kube-node-lease"], 100);
        let r = resolve(&defaults, ExplicitPolicy::default(), found(&running));
        assert_eq!(r.policy, running);
        assert_eq!(r.origin(), "Lease");
        assert!(r.overridden.is_empty() && r.notes.is_empty(), "{r:?}");
    }

    #[test]
    fn flags_given_override_only_their_own_value_and_say_so() {
        let running = policy("platform", &["sandbox"], 7);
        let given = policy("", &["kube-system", "kube-node-lease"], 100);
        let explicit = ExplicitPolicy {
            trusted_namespaces: true,
            ..Default::default()
        };
        let r = resolve(&given, explicit, found(&running));
        assert!(r.policy.trust.trusted_namespaces.is_empty(), "overridden");
        assert!(r.policy.is_excluded("sandbox"), "published, not overridden");
        assert_eq!(r.policy.caps.per_namespace, 7);
        assert_eq!(r.origin(), "LeaseAndFlags");
        assert_eq!(r.overridden, ["--trusted-namespaces"]);
        assert_eq!(
            r.notes,
            ["--trusted-namespaces given here overrides the running copyrator's \"platform\""]
        );
    }

    #[test]
    fn without_a_published_policy_the_flags_decide_with_a_note() {
        let given = policy("x", &[], 3);
        let r = resolve(
            &given,
            ExplicitPolicy::default(),
            Lookup::NotFound("no Lease ops/copyrator".into()),
        );
        assert_eq!(r.policy, given);
        assert_eq!(r.origin(), "Flags");
        assert!(
            r.notes[0].contains("no Lease ops/copyrator"),
            "{:?}",
            r.notes
        );
    }

    #[test]
    fn a_scoped_install_says_where_it_does_not_serve_and_where_it_is_not_bound() {
        let scope = PublishedScope {
            listed: ["a".to_string(), "c".into()].into(),
            not_bound: ["c".to_string()].into(),
        };
        assert!(scope_notes(None, Some("x")).is_empty(), "cluster-wide");
        assert!(scope_notes(Some(&scope), Some("a")).is_empty());
        let x = scope_notes(Some(&scope), Some("x"));
        assert!(
            x.len() == 1 && x[0].contains("x is not one of its namespaces"),
            "{x:?}"
        );
        let c = scope_notes(Some(&scope), Some("c"));
        assert!(c.len() == 1 && c[0].contains("not bound in c"), "{c:?}");
        let any = scope_notes(Some(&scope), None);
        assert!(
            any.len() == 1 && any[0].contains("not bound in c"),
            "{any:?}"
        );
    }
}
