//! A finding's parts as scripts read them: whether the rule applies and why ([`Verdict`]),
//! what the next sync does ([`Planned`]), and what is at the target now ([`CopyState`]).

use super::ConflictReason;
use crate::{copyrule::DeletionPolicy, model::NeverCopied, rules::Selection};

/// Whether a rule applies at a target, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The copy belongs there; `action` is what the next sync does.
    Applies {
        selection: Selection,
        action: Planned,
    },
    /// The rule's own clauses leave the namespace out.
    NotSelected(Selection),
    /// Selected, but excluded by `--exclude-namespaces`.
    ExcludedGlobally,
    /// A hub's rule, refused here by its link's ceiling (SPEC §14.2): the namespace may not
    /// receive, or the hub namespace or kind is not accepted.
    BeyondCeiling,
    /// A hub's copy whose hub is not known now (unreachable since it started, or its link
    /// invalid): kept as it is (SPEC §14.3).
    HubUnknown,
    /// Selected, but the namespace is terminating.
    Terminating,
    /// Named by the rule, but no such namespace exists.
    NamespaceNotFound,
    /// An untrusted inline rule, and the namespace does not consent (SPEC §9.2).
    NotConsented,
    /// Wanted, but not written (SPEC §4.5, §9.3).
    Conflict(ConflictReason),
    /// Wanted, but skipped for now (the planner's reason).
    Skipped(&'static str),
    /// The rule selects no existing source.
    SourceNotFound,
    /// A copy no rule wants: deleted or kept per its deletion policy.
    NoRuleWants(DeletionPolicy),
    /// The rule's configuration is invalid; it is ignored.
    Invalid(String),
    /// The source carries these inline-rule annotations but not the opt-in label.
    NotOptedIn(Vec<&'static str>),
}

impl Verdict {
    /// A stable name for scripts (`-o json`).
    pub fn code(&self) -> &'static str {
        match self {
            Verdict::Applies {
                selection: Selection::Listed,
                ..
            } => "Listed",
            Verdict::Applies { .. } => "SelectorMatches",
            Verdict::NotSelected(Selection::SourceNamespace) => "SourceNamespace",
            Verdict::NotSelected(Selection::Excluded) => "ExcludedByRule",
            Verdict::NotSelected(_) => "NotSelected",
            Verdict::ExcludedGlobally => "ExcludedGlobally",
            Verdict::BeyondCeiling => "BeyondCeiling",
            Verdict::HubUnknown => "HubUnknown",
            Verdict::Terminating => "NamespaceTerminating",
            Verdict::NamespaceNotFound => "NamespaceNotFound",
            Verdict::NotConsented => "NotConsented",
            Verdict::Conflict(ConflictReason::Unmanaged) => "UnmanagedObject",
            Verdict::Conflict(ConflictReason::OwnedBy(_)) => "NameTaken",
            Verdict::Conflict(ConflictReason::HeldByHigherTier(_)) => "HeldByRetainedCopy",
            Verdict::Conflict(ConflictReason::NeverCopied(NeverCopied::SecretType {
                type_: crate::model::SERVICE_ACCOUNT_TOKEN_TYPE,
                ..
            })) => "ServiceAccountToken",
            Verdict::Conflict(ConflictReason::NeverCopied(_)) => "NeverCopied",
            Verdict::Conflict(ConflictReason::Grant(_)) => "GrantRefused",
            Verdict::Conflict(ConflictReason::Refused(crate::transform::Refused::NoPassword {
                ..
            })) => "TruststorePasswordUnavailable",
            Verdict::Conflict(ConflictReason::Refused(_)) => "KeyMaterialRefused",
            Verdict::Conflict(ConflictReason::EmptyBundle) => "BundleEmpty",
            Verdict::Skipped(_) => "Skipped",
            Verdict::SourceNotFound => "SourceNotFound",
            Verdict::NoRuleWants(_) => "NoRuleWantsCopy",
            Verdict::Invalid(_) => "InvalidConfiguration",
            Verdict::NotOptedIn(_) => "SourceNotOptedIn",
        }
    }
}

/// What the next sync does about a target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Planned {
    Nothing,
    Create,
    Update,
    /// Delete and create again: the copy is immutable.
    Recreate,
    /// Replace an object copyrator does not manage (conflictPolicy: Overwrite).
    Overwrite,
    Delete,
    Retain,
    /// The source's content must be read first (it could not be).
    ReadSource,
}

impl Planned {
    pub fn code(self) -> &'static str {
        match self {
            Planned::Nothing => "None",
            Planned::Create => "Create",
            Planned::Update => "Update",
            Planned::Recreate => "Recreate",
            Planned::Overwrite => "Overwrite",
            Planned::Delete => "Delete",
            Planned::Retain => "Retain",
            Planned::ReadSource => "ReadSource",
        }
    }
}

/// What is at the target now, as this rule sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyState {
    Missing,
    InSync,
    Stale,
    /// An object copyrator does not manage holds the name.
    Unmanaged,
    /// A copy another rule or source made holds the name.
    OtherOwner,
    BeingDeleted,
    /// copyrator's copy is there (its freshness is not the question).
    Present,
}

impl CopyState {
    pub fn code(self) -> &'static str {
        match self {
            CopyState::Missing => "Missing",
            CopyState::InSync => "InSync",
            CopyState::Stale => "Stale",
            CopyState::Unmanaged => "Unmanaged",
            CopyState::OtherOwner => "OtherOwner",
            CopyState::BeingDeleted => "BeingDeleted",
            CopyState::Present => "Present",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            CopyState::Missing => "missing",
            CopyState::InSync => "in sync",
            CopyState::Stale => "stale",
            CopyState::Unmanaged => "unmanaged object",
            CopyState::OtherOwner => "another rule's copy",
            CopyState::BeingDeleted => "being deleted",
            CopyState::Present => "present",
        }
    }
}
