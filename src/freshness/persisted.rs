//! When an admitted change counts as persisted (SPEC §4.6): what a job waiting for it must
//! see in what it reads before it acts. Admission happens before the change is persisted, and
//! the change may never be; a job acts on persisted state only.

use crate::{
    copyrule::CopyRule,
    model::{NamespaceInfo, Object},
    queue::job::Awaited,
};

/// Whether the awaited change of a Secret or ConfigMap is visible in what was read.
pub fn object_persisted(awaited: &Awaited, obj: &Option<Object>) -> bool {
    match (awaited, obj) {
        (Awaited::Nothing, _) => true,
        (Awaited::Exists, o) => o.is_some(),
        (Awaited::ChangedFrom(rv), None) => !rv.is_empty(),
        (Awaited::ChangedFrom(rv), Some(o)) => o.metadata.resource_version.as_deref() != Some(rv),
        (Awaited::Gone, o) => o
            .as_ref()
            .is_none_or(|o| o.metadata.deletion_timestamp.is_some()),
    }
}

/// Whether the awaited change of a Namespace is visible in what was read.
pub fn namespace_persisted(awaited: &Awaited, ns: &Option<NamespaceInfo>) -> bool {
    match (awaited, ns) {
        (Awaited::Nothing, _) => true,
        (Awaited::Exists, ns) => ns.is_some(),
        (Awaited::ChangedFrom(rv), None) => !rv.is_empty(),
        (Awaited::ChangedFrom(rv), Some(ns)) => &ns.resource_version != rv,
        (Awaited::Gone, ns) => ns.as_ref().is_none_or(|n| n.terminating),
    }
}

/// Whether the awaited change of a CopyRule is visible in what was read.
pub fn rule_persisted(awaited: &Awaited, rule: &Option<CopyRule>) -> bool {
    match (awaited, rule) {
        (Awaited::Nothing, _) => true,
        (Awaited::Exists, r) => r.is_some(),
        (Awaited::ChangedFrom(rv), None) => !rv.is_empty(),
        (Awaited::ChangedFrom(rv), Some(r)) => r.metadata.resource_version.as_deref() != Some(rv),
        (Awaited::Gone, r) => r
            .as_ref()
            .is_none_or(|r| r.metadata.deletion_timestamp.is_some()),
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
        assert!(
            !object_persisted(&changed, &obj("5")),
            "still the version the admission replaced"
        );
        assert!(object_persisted(&changed, &obj("6")));
        assert!(
            object_persisted(&changed, &None),
            "deleted since: nothing to wait for"
        );
        assert!(!object_persisted(&Awaited::Exists, &None));
        assert!(object_persisted(&Awaited::Exists, &obj("1")));
        assert!(!object_persisted(&Awaited::Gone, &obj("1")));
        assert!(object_persisted(&Awaited::Gone, &None));
        assert!(object_persisted(&Awaited::Nothing, &None));

        assert!(
            !namespace_persisted(&changed, &ns("5")),
            "a label change not persisted yet"
        );
        assert!(namespace_persisted(&changed, &ns("6")));
        assert!(
            !namespace_persisted(&Awaited::Exists, &None),
            "namespace CREATE not persisted yet"
        );
        assert!(namespace_persisted(&Awaited::Exists, &ns("1")));
    }
}
