//! What applying a manifest file would do (`copyrator plan`, SPEC §11.4). Each object of the
//! file is put into the world as `kubectl apply` would leave it ([`manifest`]), after the
//! checks admission makes of it; the planner's explanation of what it changes
//! ([`crate::plan::explain`]: a CopyRule's targets, a source's copies, a namespace's copies) is
//! then read as one change per target: created, updated, in sync, refused, deleted.

pub mod manifest;

use std::sync::Arc;

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use serde_json::Value;

pub use manifest::{
    LAST_APPLIED, Manifest, ManifestError, ManifestKind, ManifestState, applied, manifests,
};

use super::{
    Contents, World,
    explain::{CopyState, Finding, Focus, Planned, Verdict},
};
use crate::{
    copyrule::{CopyRule, DeletionPolicy},
    marks,
    model::{Meta, NamespaceInfo, Object, SourceInfo},
    rules::{Rule, RuleId},
};

/// What happens at one target once the file is applied and copyrator has synced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Change {
    Create,
    Update,
    /// Deleted and created again: the copy is immutable.
    Recreate,
    /// An object copyrator does not manage is replaced (conflictPolicy: Overwrite).
    Overwrite,
    /// The copy is there and stays as it is.
    InSync,
    Delete,
    /// No rule wants the copy any more; its deletion policy keeps it.
    Retain,
    /// The rule asks for a copy that copyrator does not write: no consent, a conflict, key
    /// material, a grant not allowed, an object never copied.
    Refused,
    /// Nothing is written, for a reason that is no refusal: excluded, terminating, no source.
    Skipped,
    /// The source's content could not be read: whether the copy changes is unknown.
    Unknown,
}

impl Change {
    /// Every change, in the order a summary lists them.
    pub const ALL: [Change; 10] = [
        Change::Create,
        Change::Update,
        Change::Recreate,
        Change::Overwrite,
        Change::InSync,
        Change::Delete,
        Change::Retain,
        Change::Refused,
        Change::Skipped,
        Change::Unknown,
    ];

    /// The change a finding of the planner's explanation says.
    pub fn of(finding: &Finding) -> Change {
        match &finding.verdict {
            Verdict::Applies { action, .. } => match action {
                Planned::Create => Change::Create,
                Planned::Update => Change::Update,
                Planned::Recreate => Change::Recreate,
                Planned::Overwrite => Change::Overwrite,
                Planned::Nothing if finding.copy == CopyState::InSync => Change::InSync,
                _ => Change::Unknown,
            },
            Verdict::NoRuleWants(DeletionPolicy::Delete) => Change::Delete,
            Verdict::NoRuleWants(DeletionPolicy::Retain) => Change::Retain,
            Verdict::NotConsented | Verdict::Conflict(_) | Verdict::BeyondCeiling => {
                Change::Refused
            }
            Verdict::HubUnknown => Change::Unknown,
            Verdict::NotSelected(_)
            | Verdict::ExcludedGlobally
            | Verdict::Terminating
            | Verdict::NamespaceNotFound
            | Verdict::Skipped(_)
            | Verdict::SourceNotFound
            | Verdict::Invalid(_)
            | Verdict::NotOptedIn(_) => Change::Skipped,
        }
    }

    /// A stable name for scripts (`-o json`).
    pub fn code(self) -> &'static str {
        match self {
            Change::Create => "Create",
            Change::Update => "Update",
            Change::Recreate => "Recreate",
            Change::Overwrite => "Overwrite",
            Change::InSync => "InSync",
            Change::Delete => "Delete",
            Change::Retain => "Retain",
            Change::Refused => "Refused",
            Change::Skipped => "Skipped",
            Change::Unknown => "Unknown",
        }
    }

    /// In words, for the table.
    pub fn describe(self) -> &'static str {
        match self {
            Change::Create => "create",
            Change::Update => "update",
            Change::Recreate => "recreate",
            Change::Overwrite => "overwrite",
            Change::InSync => "in sync",
            Change::Delete => "delete",
            Change::Retain => "keep",
            Change::Refused => "refused",
            Change::Skipped => "none",
            Change::Unknown => "unknown",
        }
    }

    /// Whether copyrator writes the target (creates, changes or deletes it).
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Change::Create | Change::Update | Change::Recreate | Change::Overwrite | Change::Delete
        )
    }
}

/// How many findings say each change, every change listed (zero included).
pub fn summary(findings: &[Finding]) -> Vec<(Change, usize)> {
    Change::ALL
        .iter()
        .map(|c| (*c, findings.iter().filter(|f| Change::of(f) == *c).count()))
        .collect()
}

/// Puts `applied`, the object `manifest` becomes once applied ([`applied`]), into `world` (and
/// a source's content into `contents`) as copyrator would see it, after the checks admission
/// makes of it (the same functions: [`Rule::from_copy_rule`], [`Rule::inline_tiered`] under
/// the world's trust); returns what to explain about it. An error is admission's denial in
/// its words. `now` (seconds) is the creation time of an object that does not exist yet: the
/// newest, which loses ties of precedence (SPEC §9.3).
pub fn put(
    world: &mut World,
    contents: &mut Contents,
    manifest: &Manifest,
    applied: Value,
    now: i64,
) -> Result<Focus, String> {
    let created = Time(Timestamp::from_second(now).unwrap_or_default());
    match manifest.kind {
        ManifestKind::CopyRule => {
            let mut rule: CopyRule = serde_json::from_value(applied)
                .map_err(|e| format!("not a valid CopyRule: {e}"))?;
            rule.metadata.creation_timestamp.get_or_insert(created);
            Rule::from_copy_rule(&rule).map_err(|e| format!("invalid CopyRule: {e}"))?;
            world.set_copy_rule(&manifest.name, Some(rule));
            Ok(Focus::Rule(RuleId::CopyRule(manifest.name.clone())))
        }
        ManifestKind::Namespace => {
            let mut meta: Meta = serde_json::from_value(applied["metadata"].clone())
                .map_err(|e| format!("not a valid Namespace: {e}"))?;
            meta.creation_timestamp.get_or_insert(created);
            let ns = NamespaceInfo::from_meta(&meta).ok_or("has no metadata.name")?;
            world.namespaces_mut().insert(ns.name.clone(), ns);
            Ok(Focus::Namespace(manifest.name.clone()))
        }
        ManifestKind::Source(kind) => {
            let object: Object =
                serde_json::from_value(applied).map_err(|e| format!("not a valid {kind}: {e}"))?;
            let mut meta = Meta::from(&object.metadata);
            meta.creation_timestamp.get_or_insert(created);
            let info = SourceInfo::from_meta(kind, &meta).ok_or("has no name or namespace")?;
            match Rule::inline_tiered(&info, &world.policy().trust) {
                Err(e) if e.field == marks::SOURCE_LABEL => return Err(format!("label {e}")),
                Err(e) => return Err(format!("invalid annotation {e}")),
                Ok(Some(rule)) => rule
                    .check_pull_secret_type(object.payload.type_.as_deref())
                    .map_err(|e| format!("invalid annotation {e}"))?,
                Ok(None) => {}
            }
            let key = info.key.clone();
            let info = world.policy().keep_source(info);
            world.set_sources([(key.clone(), Some(info))]);
            contents.known_hashes.remove(&key);
            contents
                .payloads
                .insert(key.clone(), Arc::new(object.payload.for_kind(kind)));
            Ok(Focus::Source(key))
        }
    }
}

#[cfg(test)]
mod tests;
