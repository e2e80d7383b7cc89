//! An explanation as scripts read it (`-o json`): a stable shape, documented in
//! docs/explain-json.md, whose fields are only ever added. Its parts that name objects,
//! rules, policy and bundles are `copyrator plan`'s too (docs/plan-json.md).

use std::collections::BTreeMap;

use serde::Serialize;

use super::{events::About, policy::Resolved, render::View};
use crate::{
    bundle::BundleSelect,
    model::ObjectKey,
    plan::explain::{BundleSources, Focus, Shape},
    rules::RuleId,
    tenancy::Tier,
};

/// `-o json`: see docs/explain-json.md. Fields are only ever added.
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
pub(super) struct ObjectOut {
    pub(super) kind: &'static str,
    pub(super) namespace: String,
    pub(super) name: String,
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
pub(super) struct PolicyOut {
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
pub(super) struct RuleOut {
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
pub(super) struct BundleOut {
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

pub(super) fn bundle_out(b: &BundleSources, namespace: &str) -> BundleOut {
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
pub(super) struct TransformOut {
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

pub(super) fn transform_out(shape: &Shape) -> TransformOut {
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

pub(super) fn rule_out(rule: &RuleId, tier: Option<Tier>) -> RuleOut {
    RuleOut {
        type_: match rule {
            RuleId::Inline(_) => "Inline",
            RuleId::CopyRule(_) => "CopyRule",
            RuleId::Hub { .. } => "HubCopyRule",
            RuleId::Namespaced(_) => "NamespacedCopyRule",
        },
        name: rule.copy_rule_name().map(String::from),
        tier: tier.map(|t| match t {
            Tier::CopyRule => "CopyRule",
            Tier::TrustedInline => "TrustedInline",
            Tier::Hub => "Hub",
            Tier::ConsentedInline => "ConsentedInline",
        }),
    }
}

/// The policy used, for `-o json`.
pub(super) fn policy_out(resolved: &Resolved) -> PolicyOut {
    let policy = &resolved.policy;
    PolicyOut {
        trusted_namespaces: policy.trust.trusted_namespaces.to_string(),
        excluded_namespaces: policy.excluded_namespaces.iter().cloned().collect(),
        max_sources_per_namespace: policy.caps.per_namespace,
        max_source_metadata_bytes: policy.caps.metadata_bytes,
        from: resolved.origin(),
        lease: resolved.lease.as_ref().map(|l| LeaseOut {
            namespace: l.namespace.clone(),
            name: l.name.clone(),
        }),
        overridden: resolved.overridden.clone(),
        last_resync: resolved.last_resync.map(|t| t.to_string()),
    }
}

/// The `-o json` document.
pub fn report(view: &View<'_>) -> Report {
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
        policy: policy_out(view.policy),
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
