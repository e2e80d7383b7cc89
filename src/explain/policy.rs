//! The policy `explain` reasons with: the running copyrator's, read from the Lease its leader
//! publishes it on (`pipeline::published`), with the policy flags given to `explain` itself
//! overriding it, each override said (SPEC §11.1).

use std::collections::BTreeMap;

use k8s_openapi::{api::coordination::v1::Lease, jiff::Timestamp};
use kube::{Api, Client, api::ListParams};

use crate::{
    cli::{ExplicitPolicy, LeaseArgs},
    pipeline::published::Published,
    plan::Policy,
};

/// The Lease a policy was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRef {
    pub namespace: String,
    pub name: String,
    /// Someone holds it and renewed it within its duration.
    pub held: bool,
}

/// What looking for the running copyrator's Lease found.
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup {
    Found(LeaseRef, Published),
    /// None to be read, and why.
    NotFound(String),
}

/// The policy explain uses, and where it came from.
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
    }
}

/// Finds the Lease the running copyrator publishes its policy on: `--lease-namespace`'s, or
/// without it the one Lease named `--lease-name` in any namespace that publishes a policy
/// (one currently held, if several do). Several held: an error asking for
/// `--lease-namespace`. A Lease that cannot be read is not an error: explain goes on with
/// its flags, and says so.
pub async fn find_lease(client: &Client, args: &LeaseArgs) -> anyhow::Result<Lookup> {
    let name = &args.lease_name;
    if let Some(namespace) = &args.lease_namespace {
        let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
        return Ok(match api.get_opt(name).await {
            Ok(Some(lease)) => published(&lease)
                .map(|p| {
                    Lookup::Found(
                        LeaseRef {
                            namespace: namespace.clone(),
                            name: name.clone(),
                            held: held(&lease, Timestamp::now()),
                        },
                        p,
                    )
                })
                .unwrap_or_else(|| {
                    Lookup::NotFound(format!(
                        "Lease {namespace}/{name} publishes no policy: leader election off, or an older copyrator"
                    ))
                }),
            Ok(None) => Lookup::NotFound(format!("no Lease {namespace}/{name}")),
            Err(e) => Lookup::NotFound(format!("reading Lease {namespace}/{name}: {e}")),
        });
    }
    let api: Api<Lease> = Api::all(client.clone());
    let leases = match api
        .list(&ListParams::default().fields(&format!("metadata.name={name}")))
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            return Ok(Lookup::NotFound(format!(
                "listing Leases named {name}: {e}"
            )));
        }
    };
    let now = Timestamp::now();
    let candidates: Vec<(LeaseRef, Published)> = leases
        .iter()
        .filter_map(|l| {
            let p = published(l)?;
            let lease = LeaseRef {
                namespace: l.metadata.namespace.clone()?,
                name: name.clone(),
                held: held(l, now),
            };
            Some((lease, p))
        })
        .collect();
    pick(name, candidates)
}

/// The one candidate, or the one held among several.
fn pick(name: &str, candidates: Vec<(LeaseRef, Published)>) -> anyhow::Result<Lookup> {
    let namespaces = |c: &[(LeaseRef, Published)]| {
        c.iter()
            .map(|(l, _)| l.namespace.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match candidates.len() {
        0 => Ok(Lookup::NotFound(format!(
            "no Lease named {name} publishes one in any namespace"
        ))),
        1 => {
            let (lease, p) = candidates.into_iter().next().expect("one");
            Ok(Lookup::Found(lease, p))
        }
        _ => {
            let all = namespaces(&candidates);
            let mut held: Vec<_> = candidates.into_iter().filter(|(l, _)| l.held).collect();
            if held.len() == 1 {
                let (lease, p) = held.remove(0);
                return Ok(Lookup::Found(lease, p));
            }
            anyhow::bail!(
                "Leases named {name} in several namespaces publish a copyrator policy ({all}): \
                 say which with --lease-namespace"
            )
        }
    }
}

fn published(lease: &Lease) -> Option<Published> {
    let annotations: &BTreeMap<String, String> = lease.metadata.annotations.as_ref()?;
    Published::is_published(annotations).then(|| Published::read(annotations))
}

/// Whether someone holds `lease` and renewed it within its duration.
fn held(lease: &Lease, now: Timestamp) -> bool {
    let Some(spec) = &lease.spec else {
        return false;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    let (Some(renewed), Some(secs)) = (&spec.renew_time, spec.lease_duration_seconds) else {
        return false;
    };
    !holder.is_empty() && now.duration_since(renewed.0).as_secs() <= i64::from(secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        pipeline::published::policy_annotations,
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
        Lookup::Found(lease("ops", true), Published::read(&policy_annotations(p)))
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
    fn one_lease_is_used_and_several_need_a_namespace_unless_one_is_held() {
        let p = || Published::read(&policy_annotations(&policy("a", &[], 1)));
        assert!(matches!(
            pick("copyrator", vec![]).unwrap(),
            Lookup::NotFound(_)
        ));
        let one = pick("copyrator", vec![(lease("a", false), p())]).unwrap();
        assert_eq!(one, Lookup::Found(lease("a", false), p()));
        let r = resolve(&Policy::default(), ExplicitPolicy::default(), one);
        assert!(r.notes[0].contains("not held"), "{:?}", r.notes);
        let held = pick(
            "copyrator",
            vec![(lease("a", false), p()), (lease("b", true), p())],
        )
        .unwrap();
        assert_eq!(held, Lookup::Found(lease("b", true), p()));
        let e = pick(
            "copyrator",
            vec![(lease("a", true), p()), (lease("b", true), p())],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("(a, b)") && e.contains("--lease-namespace"),
            "{e}"
        );
    }
}
