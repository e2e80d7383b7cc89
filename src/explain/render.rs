//! An explanation as people read it: a table, the namespace or source first and the Events'
//! messages last (`json` renders it for scripts).

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;

use super::{
    events::{About, LastEvent},
    policy::Resolved,
};
use crate::{
    bundle::BundleSelect,
    model::{NamespaceInfo, SourceInfo},
    plan::explain::{Explanation, Finding, Focus, Planned},
    rules::RuleId,
};

/// When a rule's copies were last verified by a full resync.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verified {
    /// The CopyRule's `status.lastVerifiedTime` (None: never, or by an older copyrator).
    CopyRuleStatus(Option<Timestamp>),
    /// Inline rules: not recorded per rule; the start of the leader's last full resync, as
    /// published on its Lease (None: not published).
    LeaderResync(Option<Timestamp>),
}

impl Verified {
    pub(super) fn time(self) -> Option<Timestamp> {
        match self {
            Verified::CopyRuleStatus(t) | Verified::LeaderResync(t) => t,
        }
    }

    pub(super) fn by(self) -> Option<&'static str> {
        match self {
            Verified::CopyRuleStatus(Some(_)) => Some("CopyRuleStatus"),
            Verified::LeaderResync(Some(_)) => Some("LeaderResync"),
            _ => None,
        }
    }
}

/// What is rendered.
pub struct View<'a> {
    pub focus: &'a Focus,
    /// The policy used, and where it came from.
    pub policy: &'a Resolved,
    /// When each rule's copies were last verified.
    pub verified: &'a BTreeMap<RuleId, Verified>,
    /// The namespace explained (namespace focus).
    pub namespace: Option<&'a NamespaceInfo>,
    /// The source explained (source focus).
    pub source: Option<&'a SourceInfo>,
    pub explanation: &'a Explanation,
    pub events: &'a BTreeMap<About, LastEvent>,
}

/// The table, with the namespace or source first and the Events' messages last.
pub fn table(view: &View<'_>, now: Timestamp) -> String {
    let mut out = String::new();
    match (view.focus, view.namespace, view.source) {
        (Focus::Namespace(name), Some(ns), _) => {
            let labels = ns
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            out.push_str(&format!(
                "Namespace {name}{}\n  labels: {}\n  accepts copies from (copyrator.io/accept-from): {}\n",
                if ns.terminating { " (Terminating)" } else { "" },
                or_none(&labels),
                or_none(ns.accept_from.as_deref().unwrap_or("")),
            ));
        }
        (Focus::Source(key), _, Some(src)) => {
            out.push_str(&format!(
                "{key}\n  opted in (copyrator.io/source: \"true\"): {}\n",
                if crate::rules::ignored_annotations(src).is_empty()
                    && src
                        .labels
                        .get(crate::marks::SOURCE_LABEL)
                        .map(String::as_str)
                        == Some("true")
                {
                    "yes"
                } else {
                    "no"
                }
            ));
        }
        _ => {}
    }
    out.push_str(&policy_header(view.policy, now));
    out.push('\n');
    let findings = &view.explanation.findings;
    if findings.is_empty() {
        out.push_str(match view.focus {
            Focus::Namespace(_) => "No rule could copy anything into this namespace.\n",
            Focus::Rule(_) => "The rule selects no namespace and has no copy.\n",
            Focus::Source(_) => {
                "No rule copies this source: it has no copyrator annotations and no CopyRule selects it.\n"
            }
        });
    } else {
        let by_namespace = !matches!(view.focus, Focus::Namespace(_));
        let mut rows = vec![vec![
            "RULE".to_string(),
            if by_namespace { "NAMESPACE" } else { "SOURCE" }.to_string(),
            "COPY".to_string(),
            "APPLIES".to_string(),
            "STATE".to_string(),
            "VERIFIED".to_string(),
            "LAST EVENT".to_string(),
            "REASON".to_string(),
        ]];
        for f in findings {
            let event = view
                .events
                .get(&About::of(&f.rule))
                .map(|e| format!("{} {} {}", e.type_, e.reason, age(e.time, now)))
                .unwrap_or_else(|| "-".into());
            rows.push(vec![
                rule_name(&f.rule),
                if by_namespace {
                    f.target
                        .as_ref()
                        .map(|t| t.namespace.clone())
                        .unwrap_or_else(|| "-".into())
                } else {
                    f.source
                        .as_ref()
                        .map(|s| match s.is_bundle() {
                            true => format!("CopyRule {}", s.name),
                            false => format!("{} {}", s.kind, s.namespaced_name()),
                        })
                        .unwrap_or_else(|| "-".into())
                },
                f.target
                    .as_ref()
                    .map(|t| t.name.clone())
                    .unwrap_or_else(|| "-".into()),
                if f.applies() { "yes" } else { "no" }.into(),
                if f.target.is_some() {
                    state(f)
                } else {
                    "-".into()
                },
                age(view.verified.get(&f.rule).and_then(|v| v.time()), now),
                event,
                f.message.clone(),
            ]);
        }
        out.push_str(&columns(&rows));
    }
    for (rule, n) in &view.explanation.not_selected {
        out.push_str(&format!(
            "\n{} leaves out {n} other namespace{} (not selected, or the source's own).",
            rule_name(rule),
            if *n == 1 { "" } else { "s" }
        ));
    }
    if !view.explanation.not_selected.is_empty() {
        out.push('\n');
    }
    out.push_str(&bundle_sections(findings));
    if view
        .verified
        .values()
        .any(|v| *v == Verified::LeaderResync(None))
    {
        out.push_str(
            "\nVERIFIED: the last full resync that checked the copy; not recorded for inline \
             rules without the running copyrator's Lease.\n",
        );
    }
    if !view.events.is_empty() {
        out.push_str("\nLast copyrator Events:\n");
        for (about, e) in view.events {
            out.push_str(&format!(
                "  {about}: {} {} ({}{}): {}\n",
                e.type_,
                e.reason,
                age(e.time, now),
                if e.count > 1 {
                    format!(", {} times", e.count)
                } else {
                    String::new()
                },
                e.message
            ));
        }
    }
    out
}

/// The policy used and where it came from, its notes last: the table's first lines.
pub(super) fn policy_header(resolved: &Resolved, now: Timestamp) -> String {
    let mut out = String::new();
    let policy = &resolved.policy;
    out.push_str(&format!(
        "copyrator policy ({}): trusted namespaces: {}; excluded namespaces: {}\n",
        match (&resolved.lease, resolved.overridden.is_empty()) {
            (Some(l), true) => format!(
                "the running copyrator's, from Lease {}/{}",
                l.namespace, l.name
            ),
            (Some(l), false) => format!(
                "the running copyrator's, from Lease {}/{}, with {} from this command",
                l.namespace,
                l.name,
                resolved.overridden.join(", ")
            ),
            (None, _) => "this command's flags".to_string(),
        },
        or_none(&policy.trust.trusted_namespaces.to_string()),
        or_none(
            &policy
                .excluded_namespaces
                .iter()
                .cloned()
                .collect::<Vec<_>>()
                .join(",")
        ),
    ));
    if resolved.lease.is_some() {
        out.push_str(&format!(
            "last full resync by the leader: {}\n",
            resolved
                .last_resync
                .map(|t| format!("{} ({})", age(Some(t), now), t))
                .unwrap_or_else(|| "not published yet".into())
        ));
    }
    for note in &resolved.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

/// Each bundle copy's sources, below the table: every entry of `spec.sources`, the objects it
/// read and whether each is taken into the copy in that namespace, or left out and why.
fn bundle_sections(findings: &[Finding]) -> String {
    let mut out = String::new();
    for f in findings {
        let (Some(b), Some(target)) = (&f.bundle, &f.target) else {
            continue;
        };
        let certs = match b.certificates {
            Some(1) => "1 certificate".to_string(),
            Some(n) => format!("{n} certificates"),
            None => "sources not read".to_string(),
        };
        out.push_str(&format!(
            "\nBundle {} in {}: {} {} (key {}, {certs})\n",
            rule_name(&f.rule),
            target.namespace,
            target.kind,
            target.name,
            b.key
        ));
        for e in &b.entries {
            out.push_str(&format!(
                "  {} {} {} key {}\n",
                e.entry.kind,
                e.entry.namespace,
                match &e.entry.select {
                    BundleSelect::Name(name) => format!("name {name}"),
                    BundleSelect::Selector(sel) => format!("selector \"{sel}\""),
                },
                e.entry.key
            ));
            match &e.objects {
                None => out.push_str("    (not read)\n"),
                Some(objects) if objects.is_empty() => out.push_str("    (matches nothing)\n"),
                Some(objects) => {
                    for o in objects {
                        out.push_str(&format!(
                            "    {} {}: {}\n",
                            o.source.kind,
                            o.source.namespaced_name(),
                            o.describe(&target.namespace)
                        ));
                    }
                }
            }
        }
        if let Some(d) = &b.default_cas {
            out.push_str(&format!("  default CAs: {}\n", d.describe()));
        }
    }
    out
}

pub(super) fn or_none(s: &str) -> &str {
    if s.is_empty() { "(none)" } else { s }
}

fn rule_name(rule: &RuleId) -> String {
    rule.mark()
}

/// The copy's state and what the next sync does about it.
fn state(f: &Finding) -> String {
    let action = match f.action() {
        Planned::Nothing => return f.copy.describe().to_string(),
        Planned::Create => "create",
        Planned::Update => "update",
        Planned::Recreate => "recreate",
        Planned::Overwrite => "overwrite",
        Planned::Delete => "delete",
        Planned::Retain => "keep",
        Planned::ReadSource => "unknown",
    };
    format!("{} -> {action}", f.copy.describe())
}

fn age(time: Option<Timestamp>, now: Timestamp) -> String {
    let Some(t) = time else {
        return "-".into();
    };
    let s = now.duration_since(t).as_secs().max(0);
    match s {
        0..120 => format!("{s}s ago"),
        120..7200 => format!("{}m ago", s / 60),
        7200..172_800 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86_400),
    }
}

/// Left-aligned columns, two spaces apart; the last column is not padded.
pub(super) fn columns(rows: &[Vec<String>]) -> String {
    let n = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..n)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == n {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        explain::json::{ObjectOut, bundle_out},
        model::ObjectKey,
        plan::explain::BundleSources,
        tenancy::Tier,
    };

    #[test]
    fn columns_line_up_and_the_last_is_not_padded() {
        let rows = vec![
            vec!["A".to_string(), "BB".to_string(), "C".to_string()],
            vec!["long".to_string(), "x".to_string(), "tail".to_string()],
        ];
        assert_eq!(columns(&rows), "A     BB  C\nlong  x   tail\n");
    }

    /// A bundle copy in team-b: a trusted source taken, a tenant's selector match left out
    /// by trust, a named source lacking its key.
    fn bundle_finding() -> Finding {
        use crate::{
            bundle::{BundleSource, LeftOut},
            model::Kind,
            plan::explain::{CopyState, EntryFinding, ObjectFinding, Verdict},
            rules::Selection,
            selector::Selector,
        };
        let secret = |ns: &str, n: &str| ObjectKey::new(Kind::Secret, ns, n);
        let entry = |ns: &str, select, objects| EntryFinding {
            entry: BundleSource {
                kind: Kind::Secret,
                namespace: ns.into(),
                select,
                key: "ca.crt".into(),
            },
            objects,
        };
        let object = |source, trusted, read| ObjectFinding {
            source,
            trusted,
            read,
        };
        Finding {
            rule: RuleId::CopyRule("trust".into()),
            tier: Some(Tier::CopyRule),
            source: Some(ObjectKey::bundle(Kind::ConfigMap, "trust")),
            target: Some(ObjectKey::new(Kind::ConfigMap, "team-b", "ca-bundle")),
            verdict: Verdict::Applies {
                selection: Selection::Listed,
                action: Planned::Nothing,
            },
            copy: CopyState::InSync,
            message: "listed".into(),
            shape: None,
            bundle: Some(BundleSources {
                key: "ca-bundle.pem".into(),
                certificates: Some(2),
                entries: vec![
                    entry(
                        "platform",
                        BundleSelect::Name("root".into()),
                        Some(vec![object(secret("platform", "root"), true, Ok(2))]),
                    ),
                    entry(
                        "tenant",
                        BundleSelect::Selector(Selector::parse("ca=on").unwrap()),
                        Some(vec![object(secret("tenant", "mine"), false, Ok(1))]),
                    ),
                    entry(
                        "platform",
                        BundleSelect::Name("bare".into()),
                        Some(vec![object(
                            secret("platform", "bare"),
                            true,
                            Err(LeftOut::NoKey),
                        )]),
                    ),
                ],
                default_cas: Some(crate::plan::explain::DefaultCasFinding {
                    origin: Some("webpki-root-certs 1.0.11".into()),
                    certificates: Some(146),
                }),
            }),
        }
    }

    #[test]
    fn a_bundle_copys_sources_are_listed_below_the_table() {
        let text = bundle_sections(&[bundle_finding()]);
        assert_eq!(
            text,
            "\nBundle copyrule/trust in team-b: ConfigMap ca-bundle (key ca-bundle.pem, 2 certificates)
  Secret platform name root key ca.crt
    Secret platform/root: taken: 2 certificates
  Secret tenant selector \"ca=on\" key ca.crt
    Secret tenant/mine: left out: tenant is not a trusted namespace (--trusted-namespaces) and team-b does not accept copies from it (copyrator.io/accept-from)
  Secret platform name bare key ca.crt
    Secret platform/bare: left out: the source has no such key
  default CAs: taken: webpki-root-certs 1.0.11, 146 certificates
"
        );
    }

    #[test]
    fn a_bundle_copys_sources_are_in_the_json() {
        let out = serde_json::to_value(bundle_out(
            bundle_finding().bundle.as_ref().unwrap(),
            "team-b",
        ))
        .unwrap();
        assert_eq!(out["key"], "ca-bundle.pem");
        assert_eq!(out["certificates"], 2);
        assert_eq!(
            out["defaultCAs"],
            serde_json::json!({
                "source": "webpki-root-certs 1.0.11",
                "certificates": 146,
                "message": "taken: webpki-root-certs 1.0.11, 146 certificates"
            })
        );
        let sources = out["sources"].as_array().unwrap();
        assert_eq!(sources[0]["name"], "root");
        assert_eq!(sources[0]["selector"], serde_json::Value::Null);
        assert_eq!(sources[1]["selector"], "ca=on");
        let objects: Vec<(&str, bool, &str, serde_json::Value)> = sources
            .iter()
            .flat_map(|s| s["objects"].as_array().unwrap())
            .map(|o| {
                (
                    o["name"].as_str().unwrap(),
                    o["taken"].as_bool().unwrap(),
                    o["reason"].as_str().unwrap(),
                    o["certificates"].clone(),
                )
            })
            .collect();
        assert_eq!(
            objects,
            [
                ("root", true, "Taken", 2.into()),
                ("mine", false, "NotTrusted", 1.into()),
                ("bare", false, "KeyNotFound", serde_json::Value::Null),
            ]
        );
        let source: ObjectOut = (&ObjectKey::bundle(crate::model::Kind::ConfigMap, "t")).into();
        assert_eq!(
            source.kind, "CopyRule",
            "a bundle copy's source is its rule"
        );
    }

    #[test]
    fn ages_are_short() {
        let now = Timestamp::from_second(1_000_000).unwrap();
        let at = |s: i64| Some(Timestamp::from_second(1_000_000 - s).unwrap());
        assert_eq!(age(at(5), now), "5s ago");
        assert_eq!(age(at(600), now), "10m ago");
        assert_eq!(age(at(3 * 3600), now), "3h ago");
        assert_eq!(age(at(3 * 86_400), now), "3d ago");
        assert_eq!(age(None, now), "-");
    }
}
