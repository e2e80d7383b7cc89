//! An explanation as people read it (a table) and as scripts read it (`-o json`, a stable
//! shape documented in SPEC §11.2).

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::{
    events::{About, LastEvent},
    policy::Resolved,
};
use crate::{
    bundle::BundleSelect,
    model::{NamespaceInfo, ObjectKey, SourceInfo},
    plan::explain::{BundleSources, Explanation, Finding, Focus, Planned, Shape},
    rules::RuleId,
    tenancy::Tier,
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
    fn time(self) -> Option<Timestamp> {
        match self {
            Verified::CopyRuleStatus(t) | Verified::LeaderResync(t) => t,
        }
    }

    fn by(self) -> Option<&'static str> {
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
    let resolved = view.policy;
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

fn or_none(s: &str) -> &str {
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
fn columns(rows: &[Vec<String>]) -> String {
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

/// `-o json`: see SPEC §11.2. Fields are only ever added.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    kind: &'static str,
    version: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<NamespaceOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<ObjectOut>,
    policy: PolicyOut,
    findings: Vec<FindingOut>,
    not_selected: Vec<NotSelectedOut>,
    /// What the reader should know about the policy used (overrides, a Lease not found).
    notes: Vec<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NamespaceOut {
    name: String,
    labels: BTreeMap<String, String>,
    accept_from: Option<String>,
    terminating: bool,
}

#[derive(Serialize)]
struct ObjectOut {
    kind: &'static str,
    namespace: String,
    name: String,
}

impl From<&ObjectKey> for ObjectOut {
    fn from(k: &ObjectKey) -> Self {
        Self {
            // A bundle copy's source is its CopyRule, as its marks say (SPEC §3.2, Bundles).
            kind: if k.is_bundle() {
                "CopyRule"
            } else {
                k.kind.as_str()
            },
            namespace: k.namespace.clone(),
            name: k.name.clone(),
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PolicyOut {
    trusted_namespaces: String,
    excluded_namespaces: Vec<String>,
    max_sources_per_namespace: usize,
    max_source_metadata_bytes: usize,
    /// `Lease`, `LeaseAndFlags` or `Flags`.
    from: &'static str,
    lease: Option<LeaseOut>,
    /// Flags given to explain that replaced the published values.
    overridden: Vec<&'static str>,
    /// When the leader's last full resync began, as published.
    last_resync: Option<String>,
}

#[derive(Serialize)]
struct LeaseOut {
    namespace: String,
    name: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RuleOut {
    /// `CopyRule` or `Inline`.
    #[serde(rename = "type")]
    type_: &'static str,
    /// The CopyRule's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    /// `CopyRule`, `TrustedInline`, `ConsentedInline`; null when the rule is not in force.
    tier: Option<&'static str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FindingOut {
    rule: RuleOut,
    source: Option<ObjectOut>,
    target: Option<ObjectOut>,
    applies: bool,
    reason: &'static str,
    message: String,
    /// Null when there is no one target.
    copy: Option<&'static str>,
    action: &'static str,
    last_event: Option<EventOut>,
    /// When a full resync last checked the copy; null when not recorded.
    last_verified: Option<String>,
    /// `CopyRuleStatus` or `LeaderResync`; null with `lastVerified`.
    last_verified_by: Option<&'static str>,
    /// What the copy holds of its source when not all of it as it is (SPEC §3.2); null
    /// otherwise.
    transform: Option<TransformOut>,
    /// A bundle's copy: its sources, and which give it certificates here; null otherwise.
    bundle: Option<BundleOut>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BundleOut {
    /// The copy's key holding the certificates.
    key: String,
    /// Certificates the copy holds in this namespace; null when the sources were not read.
    certificates: Option<usize>,
    /// One per entry of `spec.sources` (for `explain source`: the entries that read it).
    sources: Vec<BundleEntryOut>,
    /// The default CAs, when the bundle takes them (null otherwise).
    #[serde(rename = "defaultCAs")]
    default_cas: Option<DefaultCasOut>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DefaultCasOut {
    /// Where they come from (`webpki-root-certs 1.0.11`, `file PATH sha256:HEX`); null when
    /// copyrator has none.
    source: Option<String>,
    /// How many certificates they are; null when not known here.
    certificates: Option<usize>,
    message: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BundleEntryOut {
    kind: &'static str,
    namespace: String,
    /// Null for a selector entry.
    name: Option<String>,
    /// Null for a named entry.
    selector: Option<String>,
    key: String,
    /// The objects it read; null when not read.
    objects: Option<Vec<BundleObjectOut>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BundleObjectOut {
    kind: &'static str,
    namespace: String,
    name: String,
    /// Whether its certificates are in the copy here.
    taken: bool,
    /// `Taken`, `NotTrusted`, `SourceNotFound`, `KeyNotFound` or `NotCertificates`.
    reason: &'static str,
    message: String,
    /// How many certificates its key holds; null when it holds none that can be taken.
    certificates: Option<usize>,
}

fn bundle_out(b: &BundleSources, namespace: &str) -> BundleOut {
    BundleOut {
        key: b.key.clone(),
        certificates: b.certificates,
        default_cas: b.default_cas.as_ref().map(|d| DefaultCasOut {
            source: d.origin.clone(),
            certificates: d.certificates,
            message: d.describe(),
        }),
        sources: b
            .entries
            .iter()
            .map(|e| BundleEntryOut {
                kind: e.entry.kind.as_str(),
                namespace: e.entry.namespace.clone(),
                name: match &e.entry.select {
                    BundleSelect::Name(n) => Some(n.clone()),
                    BundleSelect::Selector(_) => None,
                },
                selector: match &e.entry.select {
                    BundleSelect::Name(_) => None,
                    BundleSelect::Selector(s) => Some(s.to_string()),
                },
                key: e.entry.key.clone(),
                objects: e.objects.as_ref().map(|objects| {
                    objects
                        .iter()
                        .map(|o| BundleObjectOut {
                            kind: o.source.kind.as_str(),
                            namespace: o.source.namespace.clone(),
                            name: o.source.name.clone(),
                            taken: o.taken(),
                            reason: o.code(),
                            message: o.describe(namespace),
                            certificates: o.read.ok(),
                        })
                        .collect()
                }),
            })
            .collect(),
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TransformOut {
    /// The keys copied and their names in the copy; null: every key.
    keys: Option<Vec<KeyOut>>,
    /// Keys asked for that the source lacks (known when its content was read).
    missing_keys: Vec<String>,
    /// The copy's kind.
    kind: &'static str,
    /// The copy's Secret type when the rule sets one.
    #[serde(rename = "type")]
    type_: Option<String>,
}

#[derive(Serialize)]
struct KeyOut {
    from: String,
    to: String,
}

fn transform_out(shape: &Shape) -> TransformOut {
    let t = &shape.transform;
    TransformOut {
        keys: t.keys.as_ref().map(|keys| {
            keys.iter()
                .map(|k| KeyOut {
                    from: k.from.clone(),
                    to: k.to.clone(),
                })
                .collect()
        }),
        missing_keys: shape.missing.clone(),
        kind: t.target_kind(shape.source_kind).as_str(),
        type_: t.type_.clone(),
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EventOut {
    #[serde(rename = "type")]
    type_: String,
    reason: String,
    message: String,
    time: Option<String>,
    count: i32,
}

#[derive(Serialize)]
struct NotSelectedOut {
    rule: RuleOut,
    namespaces: usize,
}

fn rule_out(rule: &RuleId, tier: Option<Tier>) -> RuleOut {
    RuleOut {
        type_: match rule {
            RuleId::Inline(_) => "Inline",
            RuleId::CopyRule(_) => "CopyRule",
        },
        name: rule.copy_rule_name().map(String::from),
        tier: tier.map(|t| match t {
            Tier::CopyRule => "CopyRule",
            Tier::TrustedInline => "TrustedInline",
            Tier::ConsentedInline => "ConsentedInline",
        }),
    }
}

/// The `-o json` document.
pub fn report(view: &View<'_>) -> Report {
    let policy = &view.policy.policy;
    Report {
        kind: "Explanation",
        version: 1,
        namespace: view.namespace.map(|ns| NamespaceOut {
            name: ns.name.clone(),
            labels: ns.labels.to_map(),
            accept_from: ns.accept_from.clone(),
            terminating: ns.terminating,
        }),
        source: match view.focus {
            Focus::Source(key) => Some(key.into()),
            Focus::Namespace(_) | Focus::Rule(_) => None,
        },
        policy: PolicyOut {
            trusted_namespaces: policy.trust.trusted_namespaces.to_string(),
            excluded_namespaces: policy.excluded_namespaces.iter().cloned().collect(),
            max_sources_per_namespace: policy.caps.per_namespace,
            max_source_metadata_bytes: policy.caps.metadata_bytes,
            from: view.policy.origin(),
            lease: view.policy.lease.as_ref().map(|l| LeaseOut {
                namespace: l.namespace.clone(),
                name: l.name.clone(),
            }),
            overridden: view.policy.overridden.clone(),
            last_resync: view.policy.last_resync.map(|t| t.to_string()),
        },
        notes: view.policy.notes.clone(),
        findings: view
            .explanation
            .findings
            .iter()
            .map(|f| FindingOut {
                rule: rule_out(&f.rule, f.tier),
                source: f.source.as_ref().map(Into::into),
                target: f.target.as_ref().map(Into::into),
                applies: f.applies(),
                reason: f.verdict.code(),
                message: f.message.clone(),
                copy: f.target.as_ref().map(|_| f.copy.code()),
                action: f.action().code(),
                last_event: view.events.get(&About::of(&f.rule)).map(|e| EventOut {
                    type_: e.type_.clone(),
                    reason: e.reason.clone(),
                    message: e.message.clone(),
                    time: e.time.map(|t| t.to_string()),
                    count: e.count,
                }),
                last_verified: view
                    .verified
                    .get(&f.rule)
                    .and_then(|v| v.time())
                    .map(|t| t.to_string()),
                last_verified_by: view.verified.get(&f.rule).and_then(|v| v.by()),
                transform: f.shape.as_ref().map(transform_out),
                bundle: f.bundle.as_ref().and_then(|b| {
                    let ns = f.target.as_ref()?.namespace.as_str();
                    Some(bundle_out(b, ns))
                }),
            })
            .collect(),
        not_selected: view
            .explanation
            .not_selected
            .iter()
            .map(|(rule, n)| NotSelectedOut {
                rule: rule_out(rule, None),
                namespaces: *n,
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
