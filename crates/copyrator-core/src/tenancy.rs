//! Who may make copyrator write where (SPEC §9, Tenancy). A CopyRule is trusted; an inline rule
//! is trusted when its source's namespace is trusted (`--trusted-namespaces`); any other inline
//! rule copies only into namespaces that accept its namespace with the
//! `copyrator.io/accept-from` annotation. When rules want the same target, the higher tier
//! wins: CopyRule, then trusted inline, then consented inline.

use std::fmt;

use crate::{model::NamespaceInfo, selector};

/// A list of namespace name patterns: `*` matches any run of characters (`team-*`, `*`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespacePatterns {
    patterns: Vec<String>,
}

impl NamespacePatterns {
    /// Parses a comma-separated list; blank entries are skipped.
    pub fn parse(list: &str) -> Result<Self, String> {
        Self::from_entries(list.split(','))
    }

    /// Builds the list from entries (e.g. repeated or comma-split flag values).
    pub fn from_entries<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut patterns = Vec::new();
        for entry in entries.into_iter().map(str::trim).filter(|e| !e.is_empty()) {
            validate_pattern(entry)?;
            patterns.push(entry.to_string());
        }
        Ok(Self { patterns })
    }

    /// Keeps the valid entries of a comma-separated list and returns the invalid ones, for
    /// input that must not be rejected (an annotation on a Namespace).
    pub fn parse_lenient(list: &str) -> (Self, Vec<String>) {
        let mut patterns = Vec::new();
        let mut invalid = Vec::new();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            match validate_pattern(entry) {
                Ok(()) => patterns.push(entry.to_string()),
                Err(_) => invalid.push(entry.to_string()),
            }
        }
        (Self { patterns }, invalid)
    }

    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Whether any pattern matches `namespace`. A hub's namespace (`<link>/<namespace>`, SPEC
    /// §14.2) is matched only by a pattern naming that link, and a pattern naming a link
    /// matches nothing else: `*` is every namespace of this cluster, no hub's.
    pub fn matches(&self, namespace: &str) -> bool {
        self.patterns
            .iter()
            .any(|p| match (p.split_once('/'), namespace.split_once('/')) {
                (None, None) => glob_match(p, namespace),
                (Some((link, pattern)), Some((of, name))) => {
                    link == of && glob_match(pattern, name)
                }
                _ => false,
            })
    }
}

impl fmt::Display for NamespacePatterns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.patterns.join(","))
    }
}

/// An entry is `*`, a namespace name, or a namespace name with `*` wildcards; or one of those
/// after `<link>/`, for a hub's namespaces (SPEC §14.2).
fn validate_pattern(entry: &str) -> Result<(), String> {
    if let Some((link, pattern)) = entry.split_once('/') {
        return match selector::is_dns_label(link) && validate_pattern(pattern).is_ok() {
            true if !pattern.contains('/') => Ok(()),
            _ => Err(format!(
                "{entry:?} is not <link>/<namespace or pattern> (e.g. hub-a/platform)"
            )),
        };
    }
    let literal = entry.replace('*', "a");
    if entry.len() <= 63 && (entry == "*" || selector::is_dns_label(&literal)) {
        Ok(())
    } else {
        Err(format!(
            "{entry:?} is not a namespace name or a pattern with '*' (e.g. team-*)"
        ))
    }
}

/// `*` matches any run of characters, everything else itself.
fn glob_match(pattern: &str, name: &str) -> bool {
    let Some((head, rest)) = pattern.split_once('*') else {
        return pattern == name;
    };
    let Some(mut remaining) = name.strip_prefix(head) else {
        return false;
    };
    let mut parts: Vec<&str> = rest.split('*').collect();
    let tail = parts.pop().unwrap_or_default();
    for part in parts {
        match remaining.find(part) {
            Some(i) => remaining = &remaining[i + part.len()..],
            None => return false,
        }
    }
    remaining.len() >= tail.len() && remaining.ends_with(tail)
}

/// Precedence of a rule when several want the same target; also how far it is trusted.
/// Ordered from highest to lowest precedence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tier {
    /// A CopyRule: cluster-scoped, created only by whom the cluster admin allows.
    CopyRule,
    /// The inline rule of a source in a trusted namespace.
    TrustedInline,
    /// A hub's rule placed on this cluster whose source's namespace the link trusts (SPEC
    /// §14.2). A hub's other rules need the target's consent, as the lowest tier.
    Hub,
    /// The inline rule of a source in any other namespace: needs the target's consent.
    ConsentedInline,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::CopyRule => "CopyRule",
            Tier::TrustedInline => "trusted inline rule",
            Tier::Hub => "hub rule",
            Tier::ConsentedInline => "inline rule of an untrusted namespace",
        }
    }
}

/// The cluster's trust settings (`--trusted-namespaces`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustPolicy {
    pub trusted_namespaces: NamespacePatterns,
}

impl TrustPolicy {
    /// Trusts every namespace (`--trusted-namespaces '*'`): a single-team cluster.
    pub fn trust_all() -> Self {
        Self {
            trusted_namespaces: NamespacePatterns {
                patterns: vec!["*".into()],
            },
        }
    }

    pub fn is_trusted(&self, namespace: &str) -> bool {
        self.trusted_namespaces.matches(namespace)
    }

    /// The tier of the inline rule of a source in `namespace`.
    pub fn inline_tier(&self, namespace: &str) -> Tier {
        if self.is_trusted(namespace) {
            Tier::TrustedInline
        } else {
            Tier::ConsentedInline
        }
    }
}

/// Whether `target` accepts copies from sources in `source_namespace` through its
/// `copyrator.io/accept-from` annotation.
pub fn accepts_from(target: &NamespaceInfo, source_namespace: &str) -> bool {
    target.accept_from.as_deref().is_some_and(|list| {
        NamespacePatterns::parse_lenient(list)
            .0
            .matches(source_namespace)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SPEC §14.2: `<link>/<pattern>` consents to a hub's namespaces, and only to them; a
    /// pattern of this cluster's namespaces, `*` included, never to a hub's.
    #[test]
    fn hub_namespaces_are_matched_only_by_patterns_naming_their_link() {
        let cases: &[(&str, &str, bool)] = &[
            ("hub-a/team-x", "hub-a/team-x", true),
            ("hub-a/team-*", "hub-a/team-x", true),
            ("hub-a/*", "hub-a/anything", true),
            ("hub-a/team-*", "hub-b/team-x", false),
            ("*", "hub-a/team-x", false),
            ("team-*", "hub-a/team-x", false),
            ("hub-a/team-x", "team-x", false),
            ("hub-a/*", "hub-a", false),
        ];
        for (list, name, want) in cases {
            let patterns = NamespacePatterns::parse(list).expect("valid");
            assert_eq!(patterns.matches(name), *want, "{list} ~ {name}");
        }
        for bad in [
            "hub-a/",
            "/team-x",
            "hub-a/team/x",
            "Hub_A/x",
            "hub-a/Bad Name",
        ] {
            assert!(NamespacePatterns::parse(bad).is_err(), "{bad} is invalid");
        }
    }

    #[test]
    fn patterns_match_names_and_wildcards() {
        let cases: &[(&str, &str, bool)] = &[
            ("tenant-a", "tenant-a", true),
            ("tenant-a", "tenant-ab", false),
            ("team-*", "team-a", true),
            ("team-*", "team-", true),
            ("team-*", "teams", false),
            ("*", "anything", true),
            ("*-prod", "shop-prod", true),
            ("*-prod", "shop-prod-x", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "acb", false),
            ("a*a", "a", false),
            ("a*a", "aa", true),
        ];
        for (pattern, name, want) in cases {
            assert_eq!(glob_match(pattern, name), *want, "{pattern} ~ {name}");
        }
    }

    #[test]
    fn pattern_lists_are_validated() {
        let p = NamespacePatterns::parse(" tenant-a, team-*,,").unwrap();
        assert!(p.matches("tenant-a") && p.matches("team-x") && !p.matches("other"));
        assert!(NamespacePatterns::parse("").unwrap().is_empty());
        for bad in ["Tenant", "a b", "a/b/c", "/b", "-x", &"a".repeat(64)] {
            assert!(NamespacePatterns::parse(bad).is_err(), "{bad}");
        }
        let (ok, invalid) = NamespacePatterns::parse_lenient("tenant-a, Bad Name ,team-*");
        assert!(ok.matches("team-1"));
        assert_eq!(invalid, ["Bad Name"]);
    }

    #[test]
    fn trust_decides_the_inline_tier() {
        let none = TrustPolicy::default();
        assert_eq!(none.inline_tier("platform"), Tier::ConsentedInline);
        let some = TrustPolicy {
            trusted_namespaces: NamespacePatterns::parse("platform,infra-*").unwrap(),
        };
        assert_eq!(some.inline_tier("platform"), Tier::TrustedInline);
        assert_eq!(some.inline_tier("infra-dns"), Tier::TrustedInline);
        assert_eq!(some.inline_tier("tenant-a"), Tier::ConsentedInline);
        assert_eq!(
            TrustPolicy::trust_all().inline_tier("x"),
            Tier::TrustedInline
        );
        assert!(
            Tier::CopyRule < Tier::TrustedInline && Tier::TrustedInline < Tier::ConsentedInline
        );
    }

    #[test]
    fn consent_comes_from_the_target_namespace_annotation() {
        let ns = |accept: Option<&str>| NamespaceInfo {
            name: "istio-system".into(),
            resource_version: String::new(),
            labels: Default::default(),
            accept_from: accept.map(Into::into),
            terminating: false,
        };
        assert!(!accepts_from(&ns(None), "tenant-a"));
        assert!(!accepts_from(&ns(Some("")), "tenant-a"));
        assert!(accepts_from(&ns(Some("tenant-a")), "tenant-a"));
        assert!(accepts_from(&ns(Some("x, team-*")), "team-b"));
        assert!(!accepts_from(&ns(Some("team-*")), "tenant-a"));
        assert!(accepts_from(&ns(Some("*")), "tenant-a"));
        assert!(!accepts_from(&ns(Some("Bad Entry")), "tenant-a"));
    }
}
