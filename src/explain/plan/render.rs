//! A plan as people read it (a table per document) and as scripts read it (`-o json`, a
//! stable shape documented in docs/plan-json.md; fields are only ever added).

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::super::{
    json::{
        BundleOut, ObjectOut, PolicyOut, RuleOut, TransformOut, bundle_out, policy_out, rule_out,
        transform_out,
    },
    policy::Resolved,
    render::{columns, policy_header},
};
use crate::{
    model::ObjectKey,
    plan::{
        explain::{Explanation, Finding},
        preview::{Change, Manifest, ManifestState, summary},
    },
};

/// One document of the files, and the planner's explanation of what applying it does.
pub struct Document {
    pub manifest: Manifest,
    pub state: ManifestState,
    pub explanation: Explanation,
}

/// What is rendered.
pub struct View<'a> {
    /// The policy used, and where it came from.
    pub policy: &'a Resolved,
    pub documents: &'a [Document],
    /// The documents left out, one note each.
    pub skipped: &'a [String],
}

/// Findings in the order a reader looks for them: by namespace, then copy, then rule.
fn ordered(e: &Explanation) -> Vec<&Finding> {
    let mut out: Vec<&Finding> = e.findings.iter().collect();
    out.sort_by_key(|f| {
        (
            f.target
                .as_ref()
                .map(|t| (t.namespace.clone(), t.name.clone())),
            f.rule.clone(),
        )
    });
    out
}

/// The table: the policy, then per document its targets and a count of each change.
pub fn table(view: &View<'_>, now: Timestamp) -> String {
    let mut out = policy_header(view.policy, now);
    for doc in view.documents {
        out.push_str(&format!(
            "\n{} ({})\n",
            doc.manifest.describe(),
            match doc.state {
                ManifestState::New => "new",
                ManifestState::Changed => "changed",
                ManifestState::Unchanged => "unchanged",
            }
        ));
        let findings = ordered(&doc.explanation);
        if findings.is_empty() {
            out.push_str("No copy anywhere is made, changed or deleted by it.\n");
        } else {
            let mut rows = vec![
                ["NAMESPACE", "COPY", "CHANGE", "RULE", "SOURCE", "REASON"]
                    .map(String::from)
                    .to_vec(),
            ];
            for f in findings {
                let dash = || "-".to_string();
                rows.push(vec![
                    f.target.as_ref().map_or_else(dash, |t| t.namespace.clone()),
                    f.target
                        .as_ref()
                        .map_or_else(dash, |t| format!("{} {}", t.kind, t.name)),
                    Change::of(f).describe().to_string(),
                    f.rule.mark(),
                    f.source.as_ref().map_or_else(dash, source_name),
                    f.message.clone(),
                ]);
            }
            out.push_str(&columns(&rows));
        }
        let unselected: usize = doc.explanation.not_selected.values().sum();
        if unselected > 0 {
            out.push_str(&format!(
                "{unselected} other namespace{} not selected (or the source's own).\n",
                if unselected == 1 { "" } else { "s" }
            ));
        }
        out.push_str(&format!("{}\n", totals(&doc.explanation.findings)));
    }
    for note in view.skipped {
        out.push_str(&format!("\nnote: {note}"));
    }
    if !view.skipped.is_empty() {
        out.push('\n');
    }
    out.push_str("\nNothing was written: applying the files makes these changes.\n");
    out
}

fn source_name(key: &ObjectKey) -> String {
    match key.is_bundle() {
        true => format!("CopyRule {}", key.name),
        false => format!("{} {}", key.kind, key.namespaced_name()),
    }
}

/// `2 to create, 1 refused, 3 in sync`: the changes that occur, in a fixed order.
fn totals(findings: &[Finding]) -> String {
    let parts: Vec<String> = summary(findings)
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(change, n)| match change {
            Change::InSync | Change::Refused | Change::Unknown => {
                format!("{n} {}", change.describe())
            }
            Change::Retain => format!("{n} kept"),
            Change::Skipped => format!("{n} not written"),
            _ => format!("{n} to {}", change.describe()),
        })
        .collect();
    match parts.is_empty() {
        true => "Nothing changes.".into(),
        false => format!("Summary: {}.", parts.join(", ")),
    }
}

/// `-o json`: see docs/plan-json.md. Fields are only ever added.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    kind: &'static str,
    version: u32,
    policy: PolicyOut,
    /// What the reader should know: about the policy used, documents left out.
    notes: Vec<String>,
    documents: Vec<DocumentOut>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DocumentOut {
    object: ObjectOut,
    /// `New`, `Changed` or `Unchanged`.
    state: &'static str,
    targets: Vec<TargetOut>,
    /// Namespaces its rules leave out (not selected, or the source's own), counted.
    not_selected: usize,
    summary: SummaryOut,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TargetOut {
    /// Null when there is no one target (a source not opted in).
    namespace: Option<String>,
    target: Option<ObjectOut>,
    source: Option<ObjectOut>,
    rule: RuleOut,
    change: &'static str,
    /// As `copyrator explain` gives it (docs/explain-json.md).
    reason: &'static str,
    message: String,
    /// What is there now; null when there is no one target.
    copy: Option<&'static str>,
    transform: Option<TransformOut>,
    bundle: Option<BundleOut>,
}

/// How many targets get each change.
#[derive(Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct SummaryOut {
    create: usize,
    update: usize,
    recreate: usize,
    overwrite: usize,
    in_sync: usize,
    delete: usize,
    retain: usize,
    refused: usize,
    skipped: usize,
    unknown: usize,
}

fn summary_out(findings: &[Finding]) -> SummaryOut {
    let mut out = SummaryOut::default();
    for (change, n) in summary(findings) {
        *match change {
            Change::Create => &mut out.create,
            Change::Update => &mut out.update,
            Change::Recreate => &mut out.recreate,
            Change::Overwrite => &mut out.overwrite,
            Change::InSync => &mut out.in_sync,
            Change::Delete => &mut out.delete,
            Change::Retain => &mut out.retain,
            Change::Refused => &mut out.refused,
            Change::Skipped => &mut out.skipped,
            Change::Unknown => &mut out.unknown,
        } = n;
    }
    out
}

fn manifest_out(m: &Manifest) -> ObjectOut {
    ObjectOut {
        kind: match m.kind {
            crate::plan::preview::ManifestKind::CopyRule => "CopyRule",
            crate::plan::preview::ManifestKind::Namespace => "Namespace",
            crate::plan::preview::ManifestKind::Source(kind) => kind.as_str(),
        },
        namespace: m.namespace.clone(),
        name: m.name.clone(),
    }
}

/// The `-o json` document.
pub fn report(view: &View<'_>) -> Report {
    let mut notes = view.policy.notes.clone();
    notes.extend(view.skipped.iter().cloned());
    Report {
        kind: "Plan",
        version: 1,
        policy: policy_out(view.policy),
        notes,
        documents: view
            .documents
            .iter()
            .map(|doc| DocumentOut {
                object: manifest_out(&doc.manifest),
                state: doc.state.code(),
                targets: ordered(&doc.explanation)
                    .into_iter()
                    .map(|f| TargetOut {
                        namespace: f.target.as_ref().map(|t| t.namespace.clone()),
                        target: f.target.as_ref().map(Into::into),
                        source: f.source.as_ref().map(Into::into),
                        rule: rule_out(&f.rule, f.tier),
                        change: Change::of(f).code(),
                        reason: f.verdict.code(),
                        message: f.message.clone(),
                        copy: f.target.as_ref().map(|_| f.copy.code()),
                        transform: f.shape.as_ref().map(transform_out),
                        bundle: f
                            .bundle
                            .as_ref()
                            .and_then(|b| Some(bundle_out(b, &f.target.as_ref()?.namespace))),
                    })
                    .collect(),
                not_selected: doc.explanation.not_selected.values().sum(),
                summary: summary_out(&doc.explanation.findings),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{
        copyrule::DeletionPolicy,
        model::Kind,
        plan::{
            ConflictReason, Policy,
            explain::{CopyState, Planned, Verdict},
            preview::ManifestKind,
        },
        rules::{RuleId, Selection},
        tenancy::Tier,
    };

    fn finding(namespace: &str, verdict: Verdict, copy: CopyState, message: &str) -> Finding {
        Finding {
            rule: RuleId::CopyRule("registry".into()),
            tier: Some(Tier::CopyRule),
            source: Some(ObjectKey::new(Kind::Secret, "platform", "cred")),
            target: Some(ObjectKey::new(Kind::Secret, namespace, "cred")),
            verdict,
            copy,
            message: message.into(),
            shape: None,
            bundle: None,
        }
    }

    /// The table of `documents`, with a document left out.
    fn view_of(documents: &[Document], policy: &Resolved) -> String {
        let view = View {
            policy,
            documents,
            skipped: &["document 2 (Deployment web) is not planned".to_string()],
        };
        table(&view, Timestamp::from_second(1_000_000).unwrap())
    }

    /// A CopyRule whose new selector takes team-c, refuses team-b (an unmanaged object) and
    /// leaves team-a, where its copy is deleted.
    fn changed_rule() -> Document {
        let applies = |action| Verdict::Applies {
            selection: Selection::SelectorMatches,
            action,
        };
        Document {
            manifest: Manifest {
                kind: ManifestKind::CopyRule,
                namespace: String::new(),
                name: "registry".into(),
                object: serde_json::Value::Null,
            },
            state: ManifestState::Changed,
            explanation: Explanation {
                findings: vec![
                    finding(
                        "team-c",
                        applies(Planned::Create),
                        CopyState::Missing,
                        "selected; missing",
                    ),
                    finding(
                        "team-a",
                        Verdict::NoRuleWants(DeletionPolicy::Delete),
                        CopyState::Present,
                        "no rule wants it",
                    ),
                    finding(
                        "team-b",
                        Verdict::Conflict(ConflictReason::Unmanaged),
                        CopyState::Unmanaged,
                        "an object not managed by copyrator exists",
                    ),
                ],
                not_selected: [(RuleId::CopyRule("registry".into()), 4)].into(),
            },
        }
    }

    fn flags() -> Resolved {
        Resolved {
            policy: Policy::default(),
            lease: None,
            last_resync: None,
            overridden: Vec::new(),
            notes: vec!["the running copyrator's policy was not found".into()],
            scope: None,
        }
    }

    #[test]
    fn the_table_lists_each_target_by_namespace_with_its_change_and_a_summary() {
        let text = view_of(&[changed_rule()], &flags());
        let rows: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("NAMESPACE"))
            .take(4)
            .collect();
        assert_eq!(
            rows,
            [
                "NAMESPACE  COPY         CHANGE   RULE               SOURCE                REASON",
                "team-a     Secret cred  delete   copyrule/registry  Secret platform/cred  no rule wants it",
                "team-b     Secret cred  refused  copyrule/registry  Secret platform/cred  an object not managed by copyrator exists",
                "team-c     Secret cred  create   copyrule/registry  Secret platform/cred  selected; missing",
            ]
        );
        for line in [
            "CopyRule registry (changed)",
            "4 other namespaces not selected (or the source's own).",
            "Summary: 1 to create, 1 to delete, 1 refused.",
            "note: document 2 (Deployment web) is not planned",
            "note: the running copyrator's policy was not found",
            "Nothing was written",
        ] {
            assert!(text.contains(line), "{line:?} in:\n{text}");
        }
    }

    #[test]
    fn the_json_has_a_version_and_one_target_per_namespace_with_its_change() {
        let docs = [changed_rule()];
        let policy = flags();
        let view = View {
            policy: &policy,
            documents: &docs,
            skipped: &[],
        };
        let out = serde_json::to_value(report(&view)).unwrap();
        assert_eq!((&out["kind"], &out["version"]), (&json!("Plan"), &json!(1)));
        assert_eq!(out["policy"]["from"], "Flags");
        let doc = &out["documents"][0];
        assert_eq!(
            doc["object"],
            json!({"kind": "CopyRule", "namespace": "", "name": "registry"})
        );
        assert_eq!(doc["state"], "Changed");
        assert_eq!(doc["notSelected"], 4);
        let targets: Vec<(&str, &str, &str, &str)> = doc["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["namespace"].as_str().unwrap(),
                    t["change"].as_str().unwrap(),
                    t["reason"].as_str().unwrap(),
                    t["copy"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            targets,
            [
                ("team-a", "Delete", "NoRuleWantsCopy", "Present"),
                ("team-b", "Refused", "UnmanagedObject", "Unmanaged"),
                ("team-c", "Create", "SelectorMatches", "Missing"),
            ]
        );
        let t = &doc["targets"][2];
        assert_eq!(
            t["rule"],
            json!({"type": "CopyRule", "name": "registry", "tier": "CopyRule"})
        );
        assert_eq!(t["source"]["name"], "cred");
        assert_eq!(t["target"]["namespace"], "team-c");
        assert_eq!(
            doc["summary"],
            json!({"create": 1, "update": 0, "recreate": 0, "overwrite": 0, "inSync": 0,
                   "delete": 1, "retain": 0, "refused": 1, "skipped": 0, "unknown": 0})
        );
    }

    #[test]
    fn a_document_that_changes_nothing_says_so() {
        let doc = Document {
            explanation: Explanation::default(),
            state: ManifestState::Unchanged,
            ..changed_rule()
        };
        let text = view_of(&[doc], &flags());
        assert!(
            text.contains("CopyRule registry (unchanged)\nNo copy anywhere is made, changed or deleted by it.\nNothing changes.\n"),
            "{text}"
        );
    }
}
