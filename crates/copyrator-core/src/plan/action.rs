//! What the planner decides for one target: the actions and the reasons a claim cannot be
//! written.

use super::ClaimRef;
use crate::{content::DesiredCopy, model::ObjectKey, rules::RuleId};

/// Why a claim cannot be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConflictReason {
    /// An object copyrator does not manage holds the name (SPEC §4.5).
    Unmanaged,
    /// Another claim gets the name: one of a higher tier, or the older one of the same tier
    /// (SPEC §9.3).
    OwnedBy(ClaimRef),
    /// A copy of a higher tier that no rule wants any more (retained) holds the name; only a
    /// rule of that tier or above may take it over (SPEC §9.3).
    HeldByHigherTier(Option<RuleId>),
    /// The source is never copied, by its content: a credential's Secret type, or an object
    /// that runs code (SPEC §3, §3.1).
    NeverCopied(crate::model::NeverCopied),
    /// An RBAC copy would grant what copyrator may not hand out (SPEC §9.10).
    Grant(crate::grants::GrantRefused),
    /// The rule's transform refuses the source's payload: key material for a ConfigMap
    /// (SPEC §3.2).
    Refused(crate::transform::Refused),
    /// No source of the bundle admitted into the namespace gives a certificate: a bundle is
    /// never written empty, the copy there is left as it is (SPEC §3.2, Bundles).
    EmptyBundle,
}

impl std::fmt::Display for ConflictReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConflictReason::Unmanaged => f.write_str("an object not managed by copyrator exists"),
            ConflictReason::OwnedBy(c) => write!(
                f,
                "the name is taken by the copy of {} made by {}",
                c.source.namespaced_name(),
                c.rule
            ),
            ConflictReason::HeldByHigherTier(rule) => match rule {
                Some(rule) => write!(
                    f,
                    "a retained copy made by {rule}, of higher precedence, holds the name"
                ),
                None => f.write_str("a retained copy of higher precedence holds the name"),
            },
            ConflictReason::NeverCopied(never) => write!(f, "{never}"),
            ConflictReason::Grant(refused) => write!(f, "not copied: {refused}"),
            ConflictReason::Refused(refused) => write!(f, "{refused}"),
            ConflictReason::EmptyBundle => f.write_str(
                "no source of the bundle that this namespace takes certificates from holds one; the copy is left as it is",
            ),
        }
    }
}

/// Whether a write takes over an object copyrator does not manage, and by what right.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Adopt {
    /// The object is copyrator's copy (or nothing is there).
    No,
    /// The rule's `conflictPolicy: Overwrite` (SPEC §4 item 5).
    Overwrite,
    /// The name of a read-only copy its CopyRule held there, taken by another object: the copy
    /// is put back (SPEC §4 item 11).
    Reclaim,
}

impl Adopt {
    pub fn adopts(self) -> bool {
        self != Adopt::No
    }
}

/// One step for the applier, or an outcome to report.
#[derive(Clone, Debug, PartialEq)]
///
/// The desired copy is boxed: a full resync plans one action per copy, nearly all `InSync`,
/// and they should not each take the size of an object.
pub enum Action {
    /// Create if absent.
    Create {
        copy: Box<DesiredCopy>,
        by: ClaimRef,
    },
    /// Replace, preconditioned on `resource_version`. `adopt`: whether the object was not
    /// managed, and why it is written.
    Update {
        copy: Box<DesiredCopy>,
        resource_version: String,
        adopt: Adopt,
        by: ClaimRef,
    },
    /// Immutable content changed: delete (preconditioned) and create again.
    Recreate {
        copy: Box<DesiredCopy>,
        resource_version: String,
        adopt: Adopt,
        by: ClaimRef,
    },
    /// Delete a managed copy no rule wants (deletion policy Delete), preconditioned.
    /// `rule`: the rule recorded on the copy.
    Delete {
        target: ObjectKey,
        resource_version: String,
        rule: Option<RuleId>,
    },
    InSync {
        target: ObjectKey,
        by: ClaimRef,
    },
    /// A managed copy no rule wants, kept because of deletion policy Retain.
    Retain {
        target: ObjectKey,
        rule: Option<RuleId>,
    },
    Conflict {
        target: ObjectKey,
        by: ClaimRef,
        reason: ConflictReason,
    },
    /// The payload of this source must be read before the target can be planned.
    NeedSource {
        target: ObjectKey,
        source: ObjectKey,
    },
    /// The RoleBindings of the target's namespace must be read before a Role copy can be
    /// created or adopted there (SPEC §9.10).
    NeedBindings {
        target: ObjectKey,
    },
    /// Nothing to do for a reason worth knowing (e.g. the copy is being deleted).
    Skip {
        target: ObjectKey,
        reason: &'static str,
    },
    /// Not about one target: the claim's source lacks keys its rule asks for, and its copies
    /// are made without them (SPEC §3.2). Once per claim and plan.
    MissingKeys {
        by: ClaimRef,
        keys: Vec<String>,
    },
    /// Not about one target: a source of a bundle (`by.source`, its `key`) gives no
    /// certificate and is left out of it (SPEC §3.2, Bundles). Once per bundle and plan.
    LeftOut {
        by: ClaimRef,
        key: String,
        why: crate::bundle::LeftOut,
    },
}

// A full resync holds one action per copy in the cluster: a variant that grows it (an unboxed
// object, a claim by value) shows here, not in production memory (SPEC §5).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Action>() <= 136);

impl Action {
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Action::Create { .. }
                | Action::Update { .. }
                | Action::Recreate { .. }
                | Action::Delete { .. }
        )
    }
}
