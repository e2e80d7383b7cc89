//! AdmissionReview `warnings` for a source whose inline rule asks for targets that will get no
//! copy (SPEC §9.4), shown by kubectl at the moment the source is written. Admission is only a
//! hint: the planner enforces trust and consent whatever is said here.
//!
//! Deciding is pure ([`advise`]); the facts it needs (the consent annotation of namespaces the
//! source names) come from a few metadata GETs, bounded so that reviews posted by anyone who
//! reaches the webhook port cannot turn into a flood of API reads: a short cache, a handful of
//! lookups at once (when they are all busy, the advice is the generic one), and a deadline.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use moka::sync::Cache;
use tokio::sync::Semaphore;

use crate::{
    cluster::Cluster,
    marks,
    model::{Kind, NamespaceInfo, ObjectKey},
    plan::Policy,
    rules::Rule,
    tenancy::{self, Tier},
};

/// At most this many warnings per review (kubectl prints each on a line).
const MAX_WARNINGS: usize = 8;
/// Explicit target namespaces looked up per review.
const MAX_LOOKUPS: usize = 16;
/// Reviews looking namespaces up at once, across all requests.
const CONCURRENT_REVIEWS: usize = 4;
/// How long the advice may take before the review is answered without it.
const DEADLINE: Duration = Duration::from_millis(300);
/// How long a namespace's consent annotation is remembered.
const CACHE_TTL: Duration = Duration::from_secs(5);

/// What a lookup found about one namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Looked {
    /// Exists, with its `copyrator.io/accept-from` annotation (if any).
    Found(Option<String>),
    /// Does not exist.
    Missing,
    /// Not looked up (busy, failed or past the deadline).
    Unknown,
}

/// The warnings for a source's inline rule, given what is known of the namespaces it names.
/// Never names a namespace the source did not name itself, and never says whether a named
/// namespace exists: "does not accept" covers both.
pub fn advise(rule: &Rule, policy: &Policy, looked: &BTreeMap<String, Looked>) -> Vec<String> {
    let mut warnings = Vec::new();
    let source_ns = &rule.source_namespace;
    for name in &rule.namespaces {
        if policy.excluded_namespaces.contains(name) {
            warnings.push(format!(
                "namespace {name} never receives copies (excluded by copyrator's --exclude-namespaces)"
            ));
        }
    }
    if rule.tier == Tier::ConsentedInline {
        let mut unknown = false;
        for name in &rule.namespaces {
            if policy.excluded_namespaces.contains(name) {
                continue;
            }
            match looked.get(name).unwrap_or(&Looked::Unknown) {
                Looked::Found(accept) => {
                    let ns = NamespaceInfo {
                        name: name.clone(),
                        resource_version: String::new(),
                        labels: Default::default(),
                        accept_from: accept.clone(),
                        terminating: false,
                    };
                    if !tenancy::accepts_from(&ns, source_ns) {
                        warnings.push(refusal(name, source_ns));
                    }
                }
                Looked::Missing => warnings.push(refusal(name, source_ns)),
                Looked::Unknown => unknown = true,
            }
        }
        if rule.namespace_selector.is_some() || unknown {
            warnings.push(format!(
                "{source_ns} is not a namespace copyrator trusts: a namespace gets this copy only if its {} annotation lists {source_ns}",
                marks::ACCEPT_FROM_ANNOTATION
            ));
        }
    }
    if warnings.len() > MAX_WARNINGS {
        let more = warnings.len() - (MAX_WARNINGS - 1);
        warnings.truncate(MAX_WARNINGS - 1);
        warnings.push(format!("... and {more} more"));
    }
    warnings
}

fn refusal(namespace: &str, source_ns: &str) -> String {
    format!(
        "namespace {namespace} does not accept copies from {source_ns} (it needs the annotation {}: {source_ns})",
        marks::ACCEPT_FROM_ANNOTATION
    )
}

/// Looks up what [`advise`] needs, within the bounds described in the module documentation.
pub struct Advisor {
    pub(super) cluster: Cluster,
    policy: Policy,
    /// Reviews reading the cluster at once (for advice, or a CopyRule's sources:
    /// `certificates.rs`).
    pub(super) reviews: Semaphore,
    consent: Cache<String, Looked>,
}

impl Advisor {
    /// The policy copyrator runs with.
    pub(super) fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn new(cluster: Cluster, policy: Policy) -> Arc<Self> {
        Arc::new(Self {
            cluster,
            policy,
            reviews: Semaphore::new(CONCURRENT_REVIEWS),
            consent: Cache::builder()
                .max_capacity(10_000)
                .time_to_live(CACHE_TTL)
                .build(),
        })
    }

    /// A warning for a source being opted in (`key`) in a namespace that already holds as many
    /// opted-in sources as copyrator acts on there (SPEC §9.7), from the sources indexes
    /// (nothing while they cannot answer).
    pub fn source_count_warning(&self, key: &ObjectKey) -> Option<String> {
        let caps = &self.policy.caps;
        if self.policy.trust.is_trusted(&key.namespace) {
            return None;
        }
        let mut held = 0;
        for kind in Kind::served() {
            held += self.cluster.source_index().of(kind).read(|by_key| {
                by_key
                    .keys()
                    .filter(|k| k.namespace == key.namespace && *k != key)
                    .count()
            })?;
        }
        (held >= caps.per_namespace).then(|| {
            format!(
                "namespace {} already holds {held} opted-in sources, as many as copyrator acts on in a namespace it does not trust (--max-sources-per-namespace {}): the newest are held back, with no copies",
                key.namespace, caps.per_namespace
            )
        })
    }

    /// The warnings for `rule` (the inline rule of a source being written).
    pub async fn warnings(&self, rule: &Rule) -> Vec<String> {
        let mut looked = BTreeMap::new();
        if rule.tier == Tier::ConsentedInline && !rule.namespaces.is_empty() {
            let names: Vec<&String> = rule
                .namespaces
                .iter()
                .filter(|n| !self.policy.excluded_namespaces.contains(*n))
                .take(MAX_LOOKUPS)
                .collect();
            let mut missing = Vec::new();
            for name in names {
                match self.consent.get(name) {
                    Some(found) => {
                        looked.insert(name.clone(), found);
                    }
                    None => missing.push(name.clone()),
                }
            }
            if !missing.is_empty()
                && let Ok(_permit) = self.reviews.try_acquire()
            {
                let lookups = futures::future::join_all(missing.iter().map(|name| async move {
                    match self.cluster.get_namespace(name).await {
                        Ok(Some(ns)) => Looked::Found(ns.accept_from),
                        Ok(None) => Looked::Missing,
                        Err(_) => Looked::Unknown,
                    }
                }));
                if let Ok(results) = tokio::time::timeout(DEADLINE, lookups).await {
                    for (name, found) in missing.into_iter().zip(results) {
                        if found != Looked::Unknown {
                            self.consent.insert(name.clone(), found.clone());
                        }
                        looked.insert(name, found);
                    }
                }
            }
        }
        advise(rule, &self.policy, &looked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        model::{Kind, ObjectKey, SourceInfo},
        tenancy::{NamespacePatterns, TrustPolicy},
    };

    fn rule(ns: &str, annotations: &[(&str, &str)], trust: &TrustPolicy) -> Rule {
        let info = SourceInfo {
            key: ObjectKey::new(Kind::Secret, ns, "cacerts"),
            uid: "u".into(),
            resource_version: "1".into(),
            labels: [(marks::SOURCE_LABEL.to_string(), "true".to_string())].into(),
            annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            created: 0,
            deleting: false,
            dropped: None,
        };
        let mut r = Rule::inline(&info).unwrap().unwrap();
        r.tier = trust.inline_tier(ns);
        r
    }

    fn policy() -> Policy {
        Policy {
            excluded_namespaces: ["kube-system".to_string()].into(),
            trust: TrustPolicy {
                trusted_namespaces: NamespacePatterns::parse("platform").unwrap(),
            },
            ..Default::default()
        }
    }

    #[test]
    fn trusted_source_is_only_told_about_excluded_namespaces() {
        let p = policy();
        let r = rule(
            "platform",
            &[(marks::NAMESPACES_ANNOTATION, "istio-system,kube-system")],
            &p.trust,
        );
        assert_eq!(
            advise(&r, &p, &BTreeMap::new()),
            [
                "namespace kube-system never receives copies (excluded by copyrator's --exclude-namespaces)"
            ]
        );
    }

    #[test]
    fn untrusted_source_hears_which_named_namespaces_refuse() {
        let p = policy();
        let r = rule(
            "tenant-a",
            &[(marks::NAMESPACES_ANNOTATION, "istio-system,team-b,gone")],
            &p.trust,
        );
        let looked = BTreeMap::from([
            ("istio-system".to_string(), Looked::Found(None)),
            ("team-b".to_string(), Looked::Found(Some("tenant-*".into()))),
            ("gone".to_string(), Looked::Missing),
        ]);
        assert_eq!(
            advise(&r, &p, &looked),
            [
                "namespace gone does not accept copies from tenant-a (it needs the annotation copyrator.io/accept-from: tenant-a)",
                "namespace istio-system does not accept copies from tenant-a (it needs the annotation copyrator.io/accept-from: tenant-a)",
            ],
            "a missing namespace reads like a refusing one: no existence leak"
        );
    }

    #[test]
    fn untrusted_selector_or_unknown_namespaces_get_the_general_warning() {
        let p = policy();
        let r = rule(
            "tenant-a",
            &[(marks::NAMESPACE_SELECTOR_ANNOTATION, "!no-such-label")],
            &p.trust,
        );
        let w = advise(&r, &p, &BTreeMap::new());
        assert_eq!(w.len(), 1);
        assert!(
            w[0].starts_with("tenant-a is not a namespace copyrator trusts"),
            "{w:?}"
        );
        let r = rule("tenant-a", &[(marks::NAMESPACES_ANNOTATION, "x")], &p.trust);
        assert_eq!(advise(&r, &p, &BTreeMap::new()).len(), 1);
    }

    #[test]
    fn warnings_are_capped() {
        let p = policy();
        let names: Vec<String> = (0..20).map(|i| format!("ns-{i:02}")).collect();
        let r = rule(
            "tenant-a",
            &[(marks::NAMESPACES_ANNOTATION, &names.join(","))],
            &p.trust,
        );
        let looked = names.iter().map(|n| (n.clone(), Looked::Missing)).collect();
        let w = advise(&r, &p, &looked);
        assert_eq!(w.len(), MAX_WARNINGS);
        assert_eq!(w.last().unwrap(), "... and 13 more");
    }
}
