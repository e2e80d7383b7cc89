//! `/admission/pods` (mutating): Pod CREATE. Never denies. The Pod is admitted once the Pod
//! gate has made sure its namespace holds every copy it should (SPEC §10); the copies that are
//! image pull secrets are appended to `spec.imagePullSecrets` by JSONPatch, for the API server
//! only: their names are facts of the cluster (SPEC §9.8).

use serde::Deserialize;
use serde_json::json;

use super::{
    Verdict,
    caller::Caller,
    checks::Check,
    review::{Operation, Request},
};
use crate::{freshness::ready::Ready, marks};

/// What the handler asks the Pod gate, and what it needs to patch the Pod.
#[derive(Debug)]
pub struct PodCheck {
    pub namespace: String,
    /// `false` when the Pod is annotated `copyrator.io/inject: "false"`, or the caller is not
    /// verified as the API server: the patch would name the namespace's pull secrets, copies of
    /// other namespaces' Secrets, to anyone who reaches the port (SPEC §9.8).
    pub inject: bool,
    /// `spec.imagePullSecrets` as sent: `None` when the field is absent.
    existing: Option<Vec<String>>,
}

pub fn review(req: &Request<'_>, caller: Caller) -> Verdict {
    let (Operation::Create, Some(namespace), Some(pod)) =
        (&req.operation, req.namespace.clone(), req.object.as_ref())
    else {
        return Verdict::allow();
    };
    if !crate::selector::is_dns_label(&namespace) {
        return Verdict::allow();
    }
    let inject = Check::PullSecrets.looks(caller)
        && pod
            .annotation(marks::INJECT_ANNOTATION)
            .is_none_or(|v| v.trim() != "false");
    #[derive(Deserialize)]
    struct Spec {
        #[serde(default, rename = "imagePullSecrets")]
        image_pull_secrets: Option<Vec<LocalRef>>,
    }
    #[derive(Deserialize)]
    struct LocalRef {
        #[serde(default)]
        name: String,
    }
    let existing = pod
        .spec
        .and_then(|raw| serde_json::from_str::<Spec>(raw.get()).ok())
        .and_then(|s| s.image_pull_secrets)
        .map(|refs| refs.into_iter().map(|r| r.name).collect());
    Verdict {
        pod: Some(PodCheck {
            namespace,
            inject,
            existing,
        }),
        ..Verdict::allow()
    }
}

/// The JSONPatch that appends the namespace's pull secrets the Pod does not list yet; `None`
/// when there is nothing to add.
pub fn patch(check: &PodCheck, ready: &Ready) -> Option<Vec<u8>> {
    if !check.inject {
        return None;
    }
    let listed = check.existing.as_deref().unwrap_or_default();
    let missing: Vec<&String> = ready
        .pull_secrets
        .iter()
        .filter(|name| !listed.contains(name))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let ops: Vec<serde_json::Value> = match &check.existing {
        None => vec![json!({
            "op": "add",
            "path": "/spec/imagePullSecrets",
            "value": missing.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
        })],
        Some(_) => missing
            .iter()
            .map(|n| json!({"op": "add", "path": "/spec/imagePullSecrets/-", "value": {"name": n}}))
            .collect(),
    };
    serde_json::to_vec(&ops).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(existing: Option<&[&str]>, inject: bool) -> PodCheck {
        PodCheck {
            namespace: "team-a".into(),
            inject,
            existing: existing.map(|e| e.iter().map(|s| s.to_string()).collect()),
        }
    }

    fn ready(names: &[&str]) -> Ready {
        Ready {
            pull_secrets: names.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn ops(patch: Option<Vec<u8>>) -> serde_json::Value {
        serde_json::from_slice(&patch.expect("a patch")).unwrap()
    }

    #[test]
    fn pull_secrets_are_added_without_duplicates_keeping_existing_entries() {
        assert_eq!(
            ops(patch(&check(None, true), &ready(&["registry"]))),
            json!([{"op": "add", "path": "/spec/imagePullSecrets", "value": [{"name": "registry"}]}])
        );
        assert_eq!(
            ops(patch(
                &check(Some(&["own"]), true),
                &ready(&["own", "registry"])
            )),
            json!([{"op": "add", "path": "/spec/imagePullSecrets/-", "value": {"name": "registry"}}])
        );
        assert_eq!(
            patch(&check(Some(&["registry"]), true), &ready(&["registry"])),
            None
        );
        assert_eq!(patch(&check(None, true), &ready(&[])), None);
    }

    #[test]
    fn a_pod_that_opts_out_is_left_alone() {
        assert_eq!(patch(&check(None, false), &ready(&["registry"])), None);
    }
}
