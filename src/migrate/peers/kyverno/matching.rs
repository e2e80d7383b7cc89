//! Which namespaces a Kyverno rule's `match` and `exclude` select, as a CopyRule's targets.
//! A filter matches a Namespace by its name (`names`, `name`, and `namespaces`, which Kyverno
//! compares with a Namespace's own name), by its labels (`selector`), or both (both must
//! hold); `any` ORs filters, `all` ANDs them. A CopyRule says "these names, OR this
//! selector, minus these names": an alternative that needs a name AND labels, an exclusion
//! by labels (or by a name pattern, from namespaces chosen by labels), or a filter on who
//! makes the request cannot be said, and the rule is reported.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde::Deserialize;
use serde_json::Value;

use super::{nullable, unknown};
use crate::{
    migrate::peers::Targets,
    model::NamespaceInfo,
    selector::{Selector, is_dns_label},
};

/// A `match` or `exclude` block: `any` (OR) or `all` (AND) of filters, or one filter inline
/// (`kyverno.io/v1`'s older form).
#[derive(Debug, Default, Deserialize)]
pub(in crate::migrate::peers) struct Match {
    #[serde(default, deserialize_with = "nullable")]
    any: Vec<Filter>,
    #[serde(default, deserialize_with = "nullable")]
    all: Vec<Filter>,
    #[serde(flatten)]
    inline: Filter,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Filter {
    resources: Option<Resources>,
    #[serde(default, deserialize_with = "nullable")]
    subjects: Vec<Value>,
    #[serde(default, deserialize_with = "nullable")]
    roles: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    cluster_roles: Vec<String>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

impl Filter {
    fn is_empty(&self) -> bool {
        self.resources.is_none()
            && self.subjects.is_empty()
            && self.roles.is_empty()
            && self.cluster_roles.is_empty()
            && self.other.values().all(Value::is_null)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Resources {
    #[serde(default, deserialize_with = "nullable")]
    kinds: Vec<String>,
    name: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    names: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    namespaces: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    annotations: BTreeMap<String, String>,
    selector: Option<LabelSelector>,
    namespace_selector: Option<LabelSelector>,
    #[serde(default, deserialize_with = "nullable")]
    operations: Vec<String>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

/// What a filter (or an AND of filters) asks of a Namespace: a name among `names`, labels
/// matching `labels`; `None` asks nothing.
#[derive(Clone, Debug, Default)]
struct Condition {
    names: Option<BTreeSet<String>>,
    labels: Option<LabelSelector>,
}

impl Condition {
    fn and(self, other: Condition) -> Condition {
        Condition {
            names: match (self.names, other.names) {
                (Some(a), Some(b)) => Some(a.intersection(&b).cloned().collect()),
                (a, b) => a.or(b),
            },
            labels: match (self.labels, other.labels) {
                (Some(a), Some(b)) => Some(both(a, b)),
                (a, b) => a.or(b),
            },
        }
    }
}

/// The copies' targets: one per alternative of `match` (merged later where one CopyRule can
/// say several), never the namespaces `exclude` names.
pub(super) fn targets(
    matched: Option<&Match>,
    exclude: Option<&Match>,
    namespaces: &[NamespaceInfo],
    notes: &mut Vec<String>,
) -> Result<Vec<Targets>, String> {
    let matched = matched.ok_or("the rule has no match block")?;
    let alternatives = read_match(matched, namespaces, notes)?;
    let excluded = match exclude {
        Some(exclude) => read_exclude(exclude, notes)?,
        None => BTreeSet::new(),
    };
    let pattern = excluded.iter().find(|e| is_pattern(e));
    let mut out = Vec::new();
    for condition in alternatives {
        let targets = match (condition.names, condition.labels) {
            (Some(_), Some(_)) => {
                return Err(
                    "match selects Namespaces by name and by labels at once (both must \
                            hold), which a CopyRule cannot say: its namespaces and \
                            namespaceSelector add up"
                        .into(),
                );
            }
            (Some(names), None) => Targets {
                names: names
                    .into_iter()
                    .filter(|n| !excluded.iter().any(|e| wildcard(e, n)))
                    .collect(),
                ..Default::default()
            },
            (None, _) if pattern.is_some() => {
                // Expanded today, it would let tomorrow's matching namespaces get a copy
                // Kyverno never made.
                return Err(format!(
                    "exclude names the pattern `{}`: a CopyRule's excludeNamespaces are names, \
                     and namespaces created later that match it would get a copy",
                    pattern.map_or("", String::as_str)
                ));
            }
            (None, labels) => {
                let selector = match labels {
                    Some(labels) => Selector::from_label_selector(&labels)
                        .map_err(|e| format!("match selector: {e}"))?,
                    None => Selector::everything(),
                };
                Targets {
                    every: selector.is_everything(),
                    selector: (!selector.is_everything()).then(|| selector.to_string()),
                    exclude: excluded.clone(),
                    ..Default::default()
                }
            }
        };
        out.push(targets);
    }
    // Every namespace already holds every other alternative.
    if let Some(every) = out.iter().find(|t| t.every) {
        return Ok(vec![every.clone()]);
    }
    Ok(out)
}

/// The conditions of `match`, any of which selects a Namespace.
fn read_match(
    block: &Match,
    namespaces: &[NamespaceInfo],
    notes: &mut Vec<String>,
) -> Result<Vec<Condition>, String> {
    let (all, filters) = filters(block, "match")?;
    let mut conditions = Vec::new();
    let mut namespaces_only = false;
    for (what, filter) in filters {
        let kinds = Kinds::of(filter);
        if !kinds.others.is_empty() {
            return Err(format!(
                "{what} matches {}: only a rule triggered by Namespaces alone copies into \
                 namespaces",
                kinds.others.join(", ")
            ));
        }
        if !kinds.namespaces && !all {
            return Err(format!("{what} names no kind"));
        }
        namespaces_only |= kinds.namespaces;
        conditions.push(read_filter(&what, filter, Some(namespaces), notes)?);
    }
    if !namespaces_only {
        return Err("match names no kind".into());
    }
    Ok(if all {
        vec![
            conditions
                .into_iter()
                .fold(Condition::default(), Condition::and),
        ]
    } else {
        conditions
    })
}

/// The namespaces `exclude` names, and its name patterns as written. A filter whose kinds
/// leave out Namespaces excludes none.
fn read_exclude(block: &Match, notes: &mut Vec<String>) -> Result<BTreeSet<String>, String> {
    let (all, filters) = filters(block, "exclude")?;
    let mut conditions = Vec::new();
    for (what, filter) in filters {
        let kinds = Kinds::of(filter);
        if !kinds.namespaces && !kinds.others.is_empty() {
            if all {
                return Ok(BTreeSet::new());
            }
            continue;
        }
        conditions.push((what.clone(), read_filter(&what, filter, None, notes)?));
    }
    let patterns = |c: &Condition| c.names.iter().flatten().any(|n| is_pattern(n));
    if all && conditions.len() > 1 && conditions.iter().any(|(_, c)| patterns(c)) {
        return Err(
            "exclude.all combines name patterns with other filters, which migrate \
                    cannot resolve"
                .into(),
        );
    }
    if all && !conditions.is_empty() {
        let what = "exclude.all".to_string();
        let condition = conditions
            .into_iter()
            .map(|(_, c)| c)
            .fold(Condition::default(), Condition::and);
        conditions = vec![(what, condition)];
    }
    let mut names = BTreeSet::new();
    for (what, condition) in conditions {
        if condition.labels.is_some() {
            return Err(format!(
                "{what} excludes Namespaces by labels, which a CopyRule cannot say (its \
                 excludeNamespaces are names)"
            ));
        }
        match condition.names {
            Some(n) => names.extend(n),
            None => return Err(format!("{what} excludes every Namespace")),
        }
    }
    Ok(names)
}

/// Filters, each with where it is in the policy (`match.any[1]`).
type Located<'a> = Vec<(String, &'a Filter)>;

/// A block's filters, and whether they are ANDed.
fn filters<'a>(block: &'a Match, what: &str) -> Result<(bool, Located<'a>), String> {
    let listed = |list: &'a [Filter], name: &str| {
        list.iter()
            .enumerate()
            .map(|(i, f)| (format!("{what}.{name}[{i}]"), f))
            .collect::<Vec<_>>()
    };
    match (
        block.any.is_empty(),
        block.all.is_empty(),
        block.inline.is_empty(),
    ) {
        (false, false, _) => Err(format!("{what} has both any and all")),
        (false, true, true) => Ok((false, listed(&block.any, "any"))),
        (true, false, true) => Ok((true, listed(&block.all, "all"))),
        (true, true, false) => Ok((true, vec![(what.to_string(), &block.inline)])),
        (true, true, true) => Err(format!("{what} is empty")),
        _ => Err(format!("{what} has both resources and any/all")),
    }
}

/// What one filter asks of a Namespace. Name patterns are expanded to today's `namespaces`
/// (of a match) or kept as written (`None`: of an exclude).
fn read_filter(
    what: &str,
    filter: &Filter,
    namespaces: Option<&[NamespaceInfo]>,
    notes: &mut Vec<String>,
) -> Result<Condition, String> {
    unknown(what, &filter.other, &[])?;
    let who: Vec<&str> = [
        ("subjects", filter.subjects.is_empty()),
        ("roles", filter.roles.is_empty()),
        ("clusterRoles", filter.cluster_roles.is_empty()),
    ]
    .into_iter()
    .filter(|(_, empty)| !empty)
    .map(|(field, _)| field)
    .collect();
    if !who.is_empty() {
        return Err(format!(
            "{what} depends on who makes the request ({}), which a CopyRule cannot say",
            who.join(", ")
        ));
    }
    let Some(resources) = &filter.resources else {
        return Err(format!("{what} has no resources"));
    };
    let at = format!("{what}.resources");
    unknown(&at, &resources.other, &[])?;
    if !resources.annotations.is_empty() {
        return Err(format!(
            "{at} selects Namespaces by annotations, which a CopyRule cannot say"
        ));
    }
    if !resources.operations.is_empty() && !resources.operations.iter().any(|o| o == "CREATE") {
        return Err(format!(
            "{at} matches only {} requests, never a Namespace's creation",
            resources.operations.join(", ")
        ));
    }
    if resources.namespace_selector.is_some() {
        notes.push(format!(
            "{at}.namespaceSelector: Kyverno does not apply it to Namespaces; ignored"
        ));
    }
    let mut condition = Condition::default();
    let lists = [
        ("name", resources.name.iter().cloned().collect::<Vec<_>>()),
        ("names", resources.names.clone()),
        ("namespaces", resources.namespaces.clone()),
    ];
    for (field, list) in lists.iter().filter(|(_, l)| !l.is_empty()) {
        condition = condition.and(Condition {
            names: names(&format!("{at}.{field}"), list, namespaces, notes)?,
            labels: None,
        });
    }
    if let Some(selector) = &resources.selector {
        condition = condition.and(Condition {
            names: None,
            labels: Some(selector.clone()),
        });
    }
    Ok(condition)
}

/// Which kinds a filter's `kinds` admit: Namespaces, and which others.
struct Kinds {
    namespaces: bool,
    others: Vec<String>,
}

impl Kinds {
    fn of(filter: &Filter) -> Kinds {
        let kinds = filter
            .resources
            .as_ref()
            .map(|r| r.kinds.as_slice())
            .unwrap_or_default();
        // `Namespace`, `v1/Namespace`, `*/Namespace`, `/v1/Namespace`; `*` admits every kind.
        let parse = |k: &str| {
            let mut parts = k.trim().rsplit('/');
            let kind = parts.next().unwrap_or_default().to_string();
            let core = parts.all(|p| matches!(p, "" | "*" | "v1"));
            (kind, core)
        };
        Kinds {
            namespaces: kinds.iter().any(|k| {
                let (kind, core) = parse(k);
                core && (kind == "Namespace" || kind == "*")
            }),
            others: kinds
                .iter()
                .filter(|k| parse(k) != ("Namespace".to_string(), true))
                .cloned()
                .collect(),
        }
    }
}

/// A list of names and Kyverno wildcard patterns (`*`, `?`), resolved: `None` when an entry
/// is `*` (any name). A pattern becomes today's `namespaces` that match it, with a note, or
/// stays as written without them.
fn names(
    what: &str,
    list: &[String],
    namespaces: Option<&[NamespaceInfo]>,
    notes: &mut Vec<String>,
) -> Result<Option<BTreeSet<String>>, String> {
    if list.iter().any(|n| n.trim() == "*") {
        return Ok(None);
    }
    let mut out = BTreeSet::new();
    for entry in list.iter().map(|e| e.trim()) {
        if entry.contains("{{") {
            return Err(format!(
                "{what}: {entry:?} is a variable, which a CopyRule cannot say"
            ));
        }
        if is_pattern(entry) {
            let Some(namespaces) = namespaces else {
                out.insert(entry.to_string());
                continue;
            };
            let matched: Vec<&str> = namespaces
                .iter()
                .map(|n| n.name.as_str())
                .filter(|n| wildcard(entry, n))
                .collect();
            notes.push(format!(
                "{what}: the pattern `{entry}` is expanded to the namespaces that match it today \
                 ({}); namespaces created later get no copy: label them and select by labels \
                 instead",
                if matched.is_empty() {
                    "none".to_string()
                } else {
                    matched.join(", ")
                }
            ));
            out.extend(matched.into_iter().map(String::from));
        } else if is_dns_label(entry) {
            out.insert(entry.to_string());
        } else {
            notes.push(format!(
                "{what}: {entry:?} is not a namespace name; ignored"
            ));
        }
    }
    Ok(Some(out))
}

fn is_pattern(name: &str) -> bool {
    name.contains(['*', '?'])
}

/// Kyverno's wildcard match: `*` any run of characters, `?` one character, the whole name.
fn wildcard(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut i, mut j) = (0, 0);
    // Where the last `*` was, and where in the name it started matching.
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}

/// Both selectors at once: their requirements ANDed.
fn both(a: LabelSelector, b: LabelSelector) -> LabelSelector {
    let mut labels = a.match_labels.unwrap_or_default();
    let mut expressions = a.match_expressions.unwrap_or_default();
    for (key, value) in b.match_labels.unwrap_or_default() {
        match labels.get(&key) {
            // Two values for one key: kept both, so the selector matches nothing, as Kyverno.
            Some(existing) if *existing != value => expressions.push(LabelSelectorRequirement {
                key,
                operator: "In".into(),
                values: Some(vec![value]),
            }),
            _ => {
                labels.insert(key, value);
            }
        }
    }
    expressions.extend(b.match_expressions.unwrap_or_default());
    LabelSelector {
        match_labels: (!labels.is_empty()).then_some(labels),
        match_expressions: (!expressions.is_empty()).then_some(expressions),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_whole_names() {
        for (p, n) in [
            ("team-*", "team-a"),
            ("*", ""),
            ("a?c", "abc"),
            ("*-prod", "x-prod"),
        ] {
            assert!(wildcard(p, n), "{p} {n}");
        }
        for (p, n) in [("team-*", "xteam-a"), ("a?c", "ac"), ("*-prod", "x-prod-1")] {
            assert!(!wildcard(p, n), "{p} {n}");
        }
    }

    #[test]
    fn selectors_anded_keep_every_requirement() {
        let sel = |v: Value| serde_json::from_value::<LabelSelector>(v).unwrap();
        let a = sel(serde_json::json!({"matchLabels": {"env": "prod"}}));
        let b = sel(serde_json::json!({"matchLabels": {"team": "a"},
            "matchExpressions": [{"key": "tier", "operator": "Exists"}]}));
        let s = Selector::from_label_selector(&both(a.clone(), b)).unwrap();
        assert_eq!(s.to_string(), "env=prod,team=a,tier");
        let conflict = sel(serde_json::json!({"matchLabels": {"env": "dev"}}));
        let s = Selector::from_label_selector(&both(a, conflict)).unwrap();
        let labels: BTreeMap<String, String> = [("env".to_string(), "prod".to_string())].into();
        assert!(!s.matches(&labels));
    }
}
