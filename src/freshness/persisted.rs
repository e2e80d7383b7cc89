//! When an admitted change counts as persisted (SPEC §4.6): what a job waiting for it must
//! see in what it reads before it acts. Admission happens before the change is persisted, and
//! the change may never be; a job acts on persisted state only.

use crate::{
    copyrule::CopyRule,
    model::{NamespaceInfo, Object},
    queue::job::Awaited,
};

/// How long jobs wait for an admitted change to be persisted before acting on what is there.
pub const PERSIST_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// What tells whether an admitted change is visible in an object read: its resourceVersion,
/// and whether it is going (deleted, or being deleted).
pub trait Persisted {
    fn resource_version(&self) -> Option<&str>;
    fn going(&self) -> bool;
}

impl Persisted for Object {
    fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }
    fn going(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }
}

impl Persisted for NamespaceInfo {
    fn resource_version(&self) -> Option<&str> {
        Some(&self.resource_version)
    }
    fn going(&self) -> bool {
        self.terminating
    }
}

impl Persisted for CopyRule {
    fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }
    fn going(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }
}

/// Whether the awaited change of an object (a source or copy, a namespace, a CopyRule) is
/// visible in what was read (`None`: not there).
pub fn persisted<T: Persisted>(awaited: &Awaited, read: &Option<T>) -> bool {
    match (awaited, read) {
        (Awaited::Nothing, _) => true,
        (Awaited::Exists, o) => o.is_some(),
        (Awaited::ChangedFrom(rv), None) => !rv.is_empty(),
        (Awaited::ChangedFrom(rv), Some(o)) => o.resource_version() != Some(rv),
        (Awaited::Gone, o) => o.as_ref().is_none_or(Persisted::going),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(rv: &str) -> Option<Object> {
        let mut o = Object::default();
        o.metadata.resource_version = Some(rv.into());
        Some(o)
    }

    fn ns(rv: &str) -> Option<NamespaceInfo> {
        Some(NamespaceInfo {
            name: "n".into(),
            resource_version: rv.into(),
            labels: Default::default(),
            accept_from: None,
            terminating: false,
        })
    }

    #[test]
    fn admitted_changes_count_as_persisted_only_once_visible() {
        let changed = Awaited::ChangedFrom("5".into());
        let none = None::<Object>;
        assert!(
            !persisted(&changed, &obj("5")),
            "still the version the admission replaced"
        );
        assert!(persisted(&changed, &obj("6")));
        assert!(
            persisted(&changed, &none),
            "deleted since: nothing to wait for"
        );
        assert!(!persisted(&Awaited::Exists, &none));
        assert!(persisted(&Awaited::Exists, &obj("1")));
        assert!(!persisted(&Awaited::Gone, &obj("1")));
        assert!(persisted(&Awaited::Gone, &none));
        assert!(persisted(&Awaited::Nothing, &none));

        assert!(
            !persisted(&changed, &ns("5")),
            "a label change not persisted yet"
        );
        assert!(persisted(&changed, &ns("6")));
        assert!(
            !persisted(&Awaited::Exists, &none),
            "namespace CREATE not persisted yet"
        );
        assert!(persisted(&Awaited::Exists, &ns("1")));
        let mut going = ns("7");
        if let Some(n) = going.as_mut() {
            n.terminating = true;
        }
        assert!(
            persisted(&Awaited::Gone, &going),
            "a namespace being deleted"
        );
    }
}
