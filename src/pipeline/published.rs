//! What the leader publishes on its Lease for `copyrator explain` (SPEC §11): the policy it
//! runs with and when its last full resync began. Annotations on the Lease it renews anyway,
//! so publishing costs no API call and no permission beyond the election's.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::Timestamp;

use crate::{
    bundle::DefaultCasOrigin,
    plan::{Policy, SourceCaps},
    tenancy::NamespacePatterns,
};

/// `--trusted-namespaces`, as given (comma-separated patterns; empty: none).
pub const TRUSTED_NAMESPACES: &str = "copyrator.io/trusted-namespaces";
/// `--exclude-namespaces`, comma-separated.
pub const EXCLUDED_NAMESPACES: &str = "copyrator.io/excluded-namespaces";
/// `--max-sources-per-namespace`.
pub const MAX_SOURCES_PER_NAMESPACE: &str = "copyrator.io/max-sources-per-namespace";
/// `--max-source-metadata-bytes`.
pub const MAX_SOURCE_METADATA_BYTES: &str = "copyrator.io/max-source-metadata-bytes";
/// `--bind-cluster-roles`, comma-separated.
pub const BIND_CLUSTER_ROLES: &str = "copyrator.io/bind-cluster-roles";
/// `--bind-roles`, comma-separated.
pub const BIND_ROLES: &str = "copyrator.io/bind-roles";
/// `--escalate-roles`, comma-separated.
pub const ESCALATE_ROLES: &str = "copyrator.io/escalate-roles";
/// copyrator's own namespace (SPEC §9.10), when it knows it.
pub const OWN_NAMESPACE: &str = "copyrator.io/own-namespace";
/// Where the default CAs of bundles come from (`webpki-root-certs 1.0.11`, `file PATH
/// sha256:HEX`), when copyrator has them.
pub const DEFAULT_CAS: &str = "copyrator.io/default-cas";
/// When the leader's last completed full resync began (RFC 3339).
pub const LAST_RESYNC: &str = "copyrator.io/last-resync";
/// Set by anyone who may edit the Lease (`copyrator resync`, or `kubectl annotate`): the leader
/// starts a full resync when its value differs from [`RESYNCED`] (SPEC §5).
pub const RESYNC: &str = "copyrator.io/resync";
/// The last [`RESYNC`] value the leader acted on.
pub const RESYNCED: &str = "copyrator.io/resynced";
/// A namespace-scoped install's `--namespaces`, comma-separated (SPEC §13).
pub const LISTED_NAMESPACES: &str = "copyrator.io/namespaces";
/// The listed namespaces where copyrator is not bound now, comma-separated (SPEC §13).
pub const NOT_BOUND: &str = "copyrator.io/not-bound";

/// A comma-separated list of `names`, as published.
pub fn joined<'a>(names: impl IntoIterator<Item = &'a String>) -> String {
    names.into_iter().cloned().collect::<Vec<_>>().join(",")
}

/// The annotations that publish `policy`.
pub fn policy_annotations(policy: &Policy) -> BTreeMap<String, String> {
    let excluded: Vec<&str> = policy
        .excluded_namespaces
        .iter()
        .map(String::as_str)
        .collect();
    let list = |set: &BTreeSet<String>| set.iter().cloned().collect::<Vec<_>>().join(",");
    let mut out = BTreeMap::from([
        (
            BIND_CLUSTER_ROLES.to_string(),
            list(&policy.grants.bind_cluster_roles),
        ),
        (BIND_ROLES.to_string(), list(&policy.grants.bind_roles)),
        (ESCALATE_ROLES.to_string(), list(&policy.grants.roles)),
        (
            TRUSTED_NAMESPACES.to_string(),
            policy.trust.trusted_namespaces.to_string(),
        ),
        (EXCLUDED_NAMESPACES.to_string(), excluded.join(",")),
        (
            MAX_SOURCES_PER_NAMESPACE.to_string(),
            policy.caps.per_namespace.to_string(),
        ),
        (
            MAX_SOURCE_METADATA_BYTES.to_string(),
            policy.caps.metadata_bytes.to_string(),
        ),
    ]);
    if let Some(own) = &policy.own_namespace {
        out.insert(OWN_NAMESPACE.to_string(), own.clone());
    }
    if let Some(cas) = &policy.default_cas {
        out.insert(DEFAULT_CAS.to_string(), cas.origin.to_string());
    }
    out
}

/// A published comma-separated list's entries.
fn entries(v: &str) -> BTreeSet<String> {
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// A published policy as read back. A value that cannot be parsed (another version's, or
/// edited by hand) is left out and named in `unreadable`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Published {
    pub trusted_namespaces: Option<NamespacePatterns>,
    pub excluded_namespaces: Option<BTreeSet<String>>,
    pub max_sources_per_namespace: Option<usize>,
    pub max_source_metadata_bytes: Option<usize>,
    /// Boxed: read rarely, and three sets.
    pub grants: Option<Box<crate::grants::GrantPolicy>>,
    pub own_namespace: Option<String>,
    /// Boxed, as the grants: read rarely.
    pub default_cas: Option<Box<DefaultCasOrigin>>,
    pub last_resync: Option<Timestamp>,
    /// A namespace-scoped install's namespaces, and those of them not bound (SPEC §13).
    pub scope: Option<Box<PublishedScope>>,
    pub unreadable: Vec<String>,
}

/// What a namespace-scoped install publishes: where it serves and where it may not.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PublishedScope {
    pub listed: BTreeSet<String>,
    pub not_bound: BTreeSet<String>,
}

impl Published {
    /// Whether `annotations` publish a policy at all (the trusted namespaces are always
    /// published, empty when none).
    pub fn is_published(annotations: &BTreeMap<String, String>) -> bool {
        annotations.contains_key(TRUSTED_NAMESPACES)
    }

    /// Reads the published policy from a Lease's annotations.
    pub fn read(annotations: &BTreeMap<String, String>) -> Self {
        let mut unreadable = Vec::new();
        let mut get = |key: &str, ok: &dyn Fn(&str) -> bool| {
            let value = annotations.get(key)?;
            if ok(value) {
                Some(value.clone())
            } else {
                unreadable.push(format!("{key}: {value:?}"));
                None
            }
        };
        let trusted = get(TRUSTED_NAMESPACES, &|v| NamespacePatterns::parse(v).is_ok());
        let excluded = get(EXCLUDED_NAMESPACES, &|_| true);
        let sources = get(MAX_SOURCES_PER_NAMESPACE, &|v| v.parse::<usize>().is_ok());
        let bytes = get(MAX_SOURCE_METADATA_BYTES, &|v| v.parse::<usize>().is_ok());
        let resync = get(LAST_RESYNC, &|v| v.parse::<Timestamp>().is_ok());
        let bind_cluster_roles = get(BIND_CLUSTER_ROLES, &|_| true);
        let bind_roles = get(BIND_ROLES, &|_| true);
        let escalate_roles = get(ESCALATE_ROLES, &|_| true);
        let own = get(OWN_NAMESPACE, &|v| crate::selector::is_dns_label(v));
        let default_cas = get(DEFAULT_CAS, &|v| DefaultCasOrigin::parse(v).is_some());
        let listed = get(LISTED_NAMESPACES, &|_| true);
        let not_bound = get(NOT_BOUND, &|_| true);
        // Published together, by every version that publishes any: one missing is an older
        // copyrator's Lease, and its grants are not known.
        let grants = match (bind_cluster_roles, bind_roles, escalate_roles) {
            (Some(c), Some(r), Some(e)) => Some(Box::new(crate::grants::GrantPolicy {
                bind_cluster_roles: entries(&c),
                bind_roles: entries(&r),
                roles: entries(&e),
            })),
            _ => None,
        };
        Self {
            trusted_namespaces: trusted.and_then(|v| NamespacePatterns::parse(&v).ok()),
            excluded_namespaces: excluded.map(|v| entries(&v)),
            max_sources_per_namespace: sources.and_then(|v| v.parse().ok()),
            max_source_metadata_bytes: bytes.and_then(|v| v.parse().ok()),
            grants,
            own_namespace: own,
            default_cas: default_cas
                .and_then(|v| DefaultCasOrigin::parse(&v))
                .map(Box::new),
            last_resync: resync.and_then(|v| v.parse().ok()),
            scope: listed.map(|l| {
                Box::new(PublishedScope {
                    listed: entries(&l),
                    not_bound: not_bound.as_deref().map(entries).unwrap_or_default(),
                })
            }),
            unreadable,
        }
    }

    /// The policy published, `defaults` for what is not.
    pub fn policy_or(&self, defaults: &Policy) -> Policy {
        let mut p = defaults.clone();
        if let Some(t) = &self.trusted_namespaces {
            p.trust.trusted_namespaces = t.clone();
        }
        if let Some(e) = &self.excluded_namespaces {
            p.excluded_namespaces = e.clone();
        }
        if let Some(g) = &self.grants {
            p.grants = (**g).clone();
        }
        if self.own_namespace.is_some() {
            p.own_namespace = self.own_namespace.clone();
        }
        // Default CAs of another origin than this build's (a file it cannot read, another
        // package version): said, not counted (an empty set is one not known here).
        if let Some(origin) = &self.default_cas
            && p.default_cas
                .as_ref()
                .is_none_or(|own| own.origin != **origin)
        {
            p.default_cas = Some(std::sync::Arc::new(crate::bundle::DefaultCas {
                origin: (**origin).clone(),
                certificates: Vec::new(),
            }));
        }
        p.caps = SourceCaps {
            per_namespace: self
                .max_sources_per_namespace
                .unwrap_or(p.caps.per_namespace),
            metadata_bytes: self
                .max_source_metadata_bytes
                .unwrap_or(p.caps.metadata_bytes),
        };
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenancy::TrustPolicy;

    fn policy(trusted: &str, excluded: &[&str], caps: (usize, usize)) -> Policy {
        Policy {
            excluded_namespaces: excluded.iter().map(|s| s.to_string()).collect(),
            trust: TrustPolicy {
                trusted_namespaces: NamespacePatterns::parse(trusted).unwrap(),
            },
            caps: SourceCaps {
                per_namespace: caps.0,
                metadata_bytes: caps.1,
            },
            ..Policy::default()
        }
    }

    #[test]
    fn a_published_policy_reads_back_as_it_was() {
        let mut with_grants = policy("platform", &[], (1, 2));
        with_grants.grants.bind_cluster_roles = ["view".to_string(), "edit".into()].into();
        with_grants.grants.roles = ["app".to_string()].into();
        with_grants.own_namespace = Some("copyrator-system".into());
        for p in [
            policy("platform,infra-*", &["kube-system", "sandbox"], (7, 99)),
            policy("", &[], (0, 0)),
            policy("*", &["kube-system"], (100, 4096)),
            with_grants,
        ] {
            let annotations = policy_annotations(&p);
            assert!(Published::is_published(&annotations));
            let read = Published::read(&annotations);
            assert!(read.unreadable.is_empty(), "{:?}", read.unreadable);
            assert_eq!(read.policy_or(&Policy::default()), p);
        }
    }

    #[test]
    fn default_cas_of_this_build_are_used_and_others_said_without_certificates() {
        let built_in = crate::default_cas::built_in();
        let serving = |cas| Policy {
            default_cas: Some(cas),
            ..policy("", &[], (1, 2))
        };
        let explain_defaults = serving(built_in.clone());
        // The running copyrator has this build's package: explain counts its certificates.
        let read = Published::read(&policy_annotations(&serving(built_in.clone())));
        assert_eq!(
            read.policy_or(&explain_defaults).default_cas,
            Some(built_in)
        );
        // A file explain cannot read: named, its certificates not known here.
        let origin = DefaultCasOrigin::File {
            path: "/etc/copyrator/default-cas/ca.pem".into(),
            sha256: "0".repeat(64),
        };
        let file = std::sync::Arc::new(crate::bundle::DefaultCas {
            origin: origin.clone(),
            certificates: crate::default_cas::built_in().certificates[..2].to_vec(),
        });
        let read = Published::read(&policy_annotations(&serving(file)));
        assert!(read.unreadable.is_empty(), "{:?}", read.unreadable);
        let cas = read.policy_or(&explain_defaults).default_cas.unwrap();
        assert_eq!(cas.origin, origin);
        assert!(cas.certificates.is_empty());
    }

    #[test]
    fn unreadable_values_are_named_and_left_to_the_defaults() {
        let mut annotations = policy_annotations(&policy("a", &["b"], (1, 2)));
        annotations.insert(MAX_SOURCES_PER_NAMESPACE.into(), "many".into());
        annotations.insert(TRUSTED_NAMESPACES.into(), "Not A Name".into());
        annotations.insert(LAST_RESYNC.into(), "2026-11-22T10:00:00Z".into());
        let read = Published::read(&annotations);
        assert_eq!(read.unreadable.len(), 2, "{:?}", read.unreadable);
        let defaults = policy("", &[], (5, 6));
        let p = read.policy_or(&defaults);
        assert_eq!(p.caps.per_namespace, 5);
        assert_eq!(p.caps.metadata_bytes, 2);
        assert!(p.trust.trusted_namespaces.is_empty());
        assert_eq!(
            read.last_resync,
            Some("2026-11-22T10:00:00Z".parse().unwrap())
        );
        assert!(!Published::is_published(&BTreeMap::new()));
    }

    #[test]
    fn a_scoped_installs_namespaces_and_those_not_bound_read_back() {
        let mut annotations = policy_annotations(&policy("a", &[], (1, 2)));
        assert_eq!(Published::read(&annotations).scope, None, "cluster-wide");
        let listed: BTreeSet<String> = ["a".to_string(), "b".into(), "c".into()].into();
        annotations.insert(LISTED_NAMESPACES.into(), joined(&listed));
        annotations.insert(NOT_BOUND.into(), String::new());
        let read = Published::read(&annotations);
        assert_eq!(
            read.scope.as_deref(),
            Some(&PublishedScope {
                listed: listed.clone(),
                not_bound: BTreeSet::new(),
            })
        );
        annotations.insert(NOT_BOUND.into(), "c".into());
        let read = Published::read(&annotations);
        assert_eq!(
            read.scope.map(|s| s.not_bound),
            Some(["c".to_string()].into())
        );
    }
}
