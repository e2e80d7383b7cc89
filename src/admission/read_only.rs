//! `/admission/read-only`: UPDATE and DELETE of copies labelled `copyrator.io/read-only: "true"`
//! (SPEC §4 item 11). Denied to anyone but copyrator, except what namespace deletion needs.
//! Queues nothing: a change that got through (webhook down) is restored from the copies watch.

use super::{
    Verdict,
    caller::Caller,
    checks::Check,
    review::{Object, Operation, Request},
};
use crate::{
    marks,
    model::Kind,
    plan::{ManagedCopy, MarksError},
    rules::RuleId,
};

/// Who may still delete (and unblock the deletion of) a read-only copy: the controllers that
/// delete a namespace's contents and objects whose owners are gone, as they are named with
/// `--use-service-account-credentials` (kubeadm's default), and the controller manager's own
/// identity, which every controller uses without it. Real namespace deletion is theirs, so it
/// is never blocked, whoever posted the review.
pub const DELETION_CONTROLLERS: [&str; 3] = [
    "system:serviceaccount:kube-system:namespace-controller",
    "system:serviceaccount:kube-system:generic-garbage-collector",
    "system:kube-controller-manager",
];

/// What copyrator's namespace index says about the namespace of a review.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamespaceState {
    Active,
    /// Being deleted: everything in it may be deleted.
    Terminating,
    /// The index cannot answer (not seeded yet, its watch down) or holds no such namespace.
    Unknown,
}

/// The verdict on an UPDATE or DELETE of a read-only copy. `own_username`: copyrator's own
/// identity (`None`: unknown, nothing is denied). `namespace` is asked only for a DELETE by a
/// verified caller: to anyone else, a verdict by the namespace's phase would tell whether it
/// exists or is being deleted (SPEC §9.8), so theirs depends on the review alone.
pub fn review(
    req: &Request<'_>,
    own_username: Option<&str>,
    caller: Caller,
    namespace: impl FnOnce(&str) -> NamespaceState,
) -> Verdict {
    let Some(own) = own_username else {
        return Verdict::allow();
    };
    let user = req.user_info.username.as_deref().unwrap_or_default();
    if user == own || DELETION_CONTROLLERS.contains(&user) {
        return Verdict::allow();
    }
    // What the copy is now decides, not what the request would make it (an UPDATE that
    // drops the label is still an edit of a read-only copy).
    let (Some(kind), Some(ns), Some(old)) = (
        Kind::lookup(&req.kind.group, &req.kind.kind),
        req.namespace.as_deref(),
        req.old_object.as_ref(),
    ) else {
        return Verdict::allow();
    };
    let Ok(copy) = read_only_copy(kind, old) else {
        return Verdict::allow();
    };
    let what = match req.operation {
        // Once its deletion has started, the copy can only go away: finalizers are removed by
        // UPDATEs, and denying them would hold the copy (and its namespace) forever.
        Operation::Update if old.metadata.deletion_timestamp.is_none() => "edited",
        Operation::Delete
            if !Check::ReadOnlyDelete.looks(caller) || namespace(ns) == NamespaceState::Active =>
        {
            "deleted"
        }
        _ => return Verdict::allow(),
    };
    let rule = match &copy.rule {
        RuleId::Inline(_) => "its inline rule (annotation copyrator.io/read-only)".to_string(),
        RuleId::CopyRule(name) => format!("CopyRule {name} (spec.readOnly)"),
        RuleId::Namespaced(name) => format!("NamespacedCopyRule {name} (spec.readOnly)"),
        RuleId::Hub { link, rule } => format!("CopyRule {rule} of hub {link} (spec.readOnly)"),
    };
    Verdict::deny(format!(
        "copyrator: {kind} {ns}/{name} is a read-only copy of {source} made by {rule}: only \
         copyrator may change it, and it cannot be {what}. Change the source {source}, or turn \
         read-only off in the rule.",
        kind = kind.as_str(),
        name = req.name,
        source = copy.source.namespaced_name(),
    ))
}

/// The copy `obj` is, when it is one of copyrator's copies (marks that parse) labelled read-only.
fn read_only_copy(kind: Kind, obj: &Object<'_>) -> Result<ManagedCopy, MarksError> {
    let labels = obj.labels();
    if labels.get(marks::MANAGED_BY_LABEL).map(String::as_str) != Some(marks::MANAGED_BY_VALUE) {
        return Err(MarksError::MissingSource);
    }
    let copy = ManagedCopy::from_marks(
        kind,
        labels,
        obj.metadata
            .annotations
            .as_ref()
            .unwrap_or(&Default::default()),
        String::new(),
        false,
    )?;
    if copy.read_only {
        Ok(copy)
    } else {
        Err(MarksError::MissingSource)
    }
}

/// Where a pod's service account token is mounted.
const SERVICE_ACCOUNT_TOKEN_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// copyrator's own username when `--own-username` is not given: in-cluster, the subject of its
/// service account token (the username the API server gives it); out of cluster, unknown.
pub fn default_own_username() -> Option<String> {
    token_subject(&std::fs::read_to_string(SERVICE_ACCOUNT_TOKEN_FILE).ok()?)
}

/// The `sub` claim of a JWT, read without verifying it (the token is copyrator's own).
fn token_subject(token: &str) -> Option<String> {
    use base64::Engine;
    let payload = token.trim().split('.').nth(1)?;
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&json).ok()?;
    let sub = claims.get("sub")?.as_str()?;
    sub.starts_with("system:serviceaccount:")
        .then(|| sub.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::review::Review;
    use serde_json::{Value, json};

    const OWN: &str = "system:serviceaccount:copyrator-system:copyrator";
    const TENANT: &str = "system:serviceaccount:team-a:deployer";

    /// A review captured from the API server (copyrator's own UPDATE or DELETE of a copy),
    /// made by `user`, of a copy labelled read-only (or not).
    fn captured(operation: &str, user: &str, read_only: bool) -> String {
        let file = match operation {
            "DELETE" => "review-own-copy-delete",
            _ => "review-own-copy-update",
        };
        let path = format!("{}/tests/data/{file}.json", env!("CARGO_MANIFEST_DIR"));
        let mut review: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect(&path)).unwrap();
        let request = &mut review["request"];
        request["userInfo"]["username"] = user.into();
        request["options"] = json!({});
        for which in ["object", "oldObject"] {
            if read_only && request[which].is_object() {
                request[which]["metadata"]["labels"][marks::READ_ONLY] = "true".into();
            }
        }
        review.to_string()
    }

    fn verdict(
        body: &str,
        own: Option<&str>,
        namespace: NamespaceState,
        edit: impl FnOnce(&mut Value),
    ) -> Option<String> {
        let mut value: Value = serde_json::from_str(body).unwrap();
        edit(&mut value["request"]);
        let body = value.to_string();
        let review: Review = serde_json::from_str(&body).unwrap();
        let request = review.request.unwrap();
        let v = review_of(&request, own, namespace);
        assert!(v.job.is_none(), "the read-only webhook queues nothing");
        v.deny
    }

    fn review_of(req: &Request<'_>, own: Option<&str>, namespace: NamespaceState) -> Verdict {
        review(req, own, Caller::Verified, |_| namespace)
    }

    /// The verdict for a caller `--client-ca` did not verify, whose namespace is `namespace`.
    fn unverified(body: &str, namespace: NamespaceState) -> Option<String> {
        let sent: Review = serde_json::from_str(body).unwrap();
        let request = sent.request.unwrap();
        review(&request, Some(OWN), Caller::Unverified, |_| namespace).deny
    }

    #[test]
    fn an_unverified_callers_delete_is_judged_without_the_namespaces_phase() {
        use NamespaceState::*;
        for (case, user, denied) in [
            ("a tenant", TENANT, true),
            ("copyrator", OWN, false),
            ("the namespace controller", DELETION_CONTROLLERS[0], false),
            ("the garbage collector", DELETION_CONTROLLERS[1], false),
            ("the controller manager", DELETION_CONTROLLERS[2], false),
        ] {
            let body = captured("DELETE", user, true);
            let answers: Vec<Option<String>> = [Active, Terminating, Unknown]
                .into_iter()
                .map(|ns| unverified(&body, ns))
                .collect();
            assert_eq!(answers[0].is_some(), denied, "{case}: {answers:?}");
            assert!(
                answers.iter().all(|a| *a == answers[0]),
                "{case}: the same answer whether the namespace is active, terminating or \
                 unknown: {answers:?}"
            );
        }
    }

    #[test]
    fn who_may_change_a_read_only_copy() {
        use NamespaceState::*;
        let none = |_: &mut Value| {};
        // (case, operation, user, read-only label, namespace, denied)
        let cases: &[(&str, &str, &str, bool, NamespaceState, bool)] = &[
            ("a user's edit", "UPDATE", TENANT, true, Active, true),
            ("a user's delete", "DELETE", TENANT, true, Active, true),
            ("copyrator's edit", "UPDATE", OWN, true, Active, false),
            ("copyrator's delete", "DELETE", OWN, true, Active, false),
            (
                "a copy that is not read-only",
                "UPDATE",
                TENANT,
                false,
                Active,
                false,
            ),
            (
                "delete of a copy that is not read-only",
                "DELETE",
                TENANT,
                false,
                Active,
                false,
            ),
            (
                "the namespace controller",
                "DELETE",
                DELETION_CONTROLLERS[0],
                true,
                Active,
                false,
            ),
            (
                "the garbage collector",
                "DELETE",
                DELETION_CONTROLLERS[1],
                true,
                Active,
                false,
            ),
            (
                "the controller manager",
                "DELETE",
                DELETION_CONTROLLERS[2],
                true,
                Active,
                false,
            ),
            (
                "any delete in a terminating namespace",
                "DELETE",
                TENANT,
                true,
                Terminating,
                false,
            ),
            (
                "a delete the index cannot judge",
                "DELETE",
                TENANT,
                true,
                Unknown,
                false,
            ),
            (
                "an edit in a terminating namespace",
                "UPDATE",
                TENANT,
                true,
                Terminating,
                true,
            ),
        ];
        for (case, op, user, read_only, ns, denied) in cases {
            let body = captured(op, user, *read_only);
            let deny = verdict(&body, Some(OWN), *ns, none);
            assert_eq!(deny.is_some(), *denied, "{case}: {deny:?}");
        }
    }

    #[test]
    fn the_denial_names_the_source_and_the_rule() {
        let body = captured("UPDATE", TENANT, true);
        let message = verdict(&body, Some(OWN), NamespaceState::Active, |_| {}).unwrap();
        let review: Value = serde_json::from_str(&body).unwrap();
        let annotations = &review["request"]["oldObject"]["metadata"]["annotations"];
        let source = annotations[marks::SOURCE_ANNOTATION].as_str().unwrap();
        assert!(
            message.contains(&format!("read-only copy of {source}")),
            "{message}"
        );
        let rule = annotations[marks::RULE_ANNOTATION].as_str().unwrap();
        let named = match rule.strip_prefix("copyrule/") {
            Some(name) => format!("CopyRule {name}"),
            None => "inline rule".to_string(),
        };
        assert!(message.contains(&named), "{message}");
        assert!(message.contains("cannot be edited"), "{message}");
        let body = captured("DELETE", TENANT, true);
        let message = verdict(&body, Some(OWN), NamespaceState::Active, |_| {}).unwrap();
        assert!(message.contains("cannot be deleted"), "{message}");
    }

    #[test]
    fn an_edit_that_drops_the_label_is_judged_by_the_copy_as_it_is() {
        let body = captured("UPDATE", TENANT, true);
        let deny = verdict(&body, Some(OWN), NamespaceState::Active, |r| {
            r["object"]["metadata"]["labels"]
                .as_object_mut()
                .unwrap()
                .remove(marks::READ_ONLY);
        });
        assert!(deny.is_some());
    }

    #[test]
    fn finalizers_can_be_removed_once_the_copy_is_being_deleted() {
        let body = captured("UPDATE", TENANT, true);
        let deny = verdict(&body, Some(OWN), NamespaceState::Active, |r| {
            for which in ["object", "oldObject"] {
                r[which]["metadata"]["deletionTimestamp"] = "2026-11-21T10:00:00Z".into();
            }
            r["oldObject"]["metadata"]["finalizers"] = json!(["example.com/hold"]);
        });
        assert_eq!(deny, None);
    }

    #[test]
    fn objects_that_are_not_copies_are_never_denied() {
        let body = captured("UPDATE", TENANT, true);
        let deny = verdict(&body, Some(OWN), NamespaceState::Active, |r| {
            // The label alone, on an object without copyrator's marks.
            let labels = &mut r["oldObject"]["metadata"]["labels"];
            labels
                .as_object_mut()
                .unwrap()
                .remove(marks::MANAGED_BY_LABEL);
        });
        assert_eq!(deny, None);
        let deny = verdict(&body, Some(OWN), NamespaceState::Active, |r| {
            r["oldObject"]["metadata"]["annotations"][marks::SOURCE_ANNOTATION] = "forged".into();
        });
        assert_eq!(deny, None);
    }

    #[test]
    fn a_service_account_token_names_copyrators_username() {
        use base64::Engine;
        let part = |v: Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string().as_bytes())
        };
        let jwt = format!(
            "{}.{}.signature",
            part(json!({"alg": "RS256"})),
            part(json!({"sub": OWN, "iss": "https://kubernetes.default.svc"}))
        );
        assert_eq!(token_subject(&format!("{jwt}\n")).as_deref(), Some(OWN));
        assert_eq!(token_subject("not-a-jwt"), None);
        assert_eq!(token_subject("a.!!!.c"), None);
        let user = format!("a.{}.c", part(json!({"sub": "admin"})));
        assert_eq!(
            token_subject(&user),
            None,
            "only a service account is trusted by default"
        );
    }

    #[test]
    fn without_its_own_identity_copyrator_denies_nothing() {
        let body = captured("UPDATE", TENANT, true);
        assert_eq!(verdict(&body, None, NamespaceState::Active, |_| {}), None);
    }
}
