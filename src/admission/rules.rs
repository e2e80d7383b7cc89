//! `/admission/rules`: CopyRule CREATE, UPDATE and DELETE. Denies invalid rules with a
//! message naming the field (the API server of 1.20 has no CEL validation to do it).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{
    Verdict,
    caller::Caller,
    review::{self, Object, Operation, Request},
};
use crate::{
    copyrule::{CopyRule, CopyRuleSpec},
    plan::Policy,
    queue::job::{Awaited, Job, JobKey, Trigger},
    rules::Rule,
    selector,
};

/// The warning, instead of the denial, for an unverified caller's rule that reads a store's
/// password: which namespaces are trusted is said only to the API server (SPEC §9.8).
const PASSWORD_UNCHECKED: &str = "copyrator: a store's passwordSecretRef is read only from a trusted namespace (--trusted-namespaces): checked when copies are made, and said in this CopyRule's status (run copyrator with --client-ca to have it denied here)";

/// Likewise for a rule copying RBAC objects, whose source must be in a trusted namespace.
const GRANT_SOURCE_UNCHECKED: &str = "copyrator: RoleBindings and Roles are copied only from a trusted namespace (--trusted-namespaces): checked when copies are made, and said in this CopyRule's status (run copyrator with --client-ca to have it denied here)";

pub fn review(req: &Request<'_>, policy: &Policy, caller: Caller) -> Verdict {
    if req.name.is_empty() && req.operation != Operation::Create {
        return Verdict::allow();
    }
    match req.operation {
        Operation::Create | Operation::Update => {
            let Some(obj) = req.object.as_ref() else {
                return Verdict::allow();
            };
            let rule = match copy_rule(obj) {
                Ok(r) => r,
                Err(e) => {
                    return Verdict::deny(format!("copyrator: not a valid CopyRule: {e}"));
                }
            };
            let parsed = match Rule::from_copy_rule(&rule) {
                Ok(parsed) => parsed,
                Err(e) => return Verdict::deny(format!("copyrator: invalid CopyRule: {e}")),
            };
            // A store's password is read only from the platform's own namespaces (SPEC §3.2);
            // the planner checks again, trust may change with a restart.
            let password_unchecked = (caller == Caller::Unverified
                && parsed.password_refs().next().is_some())
            .then(|| PASSWORD_UNCHECKED.to_string());
            if let Some(from) = parsed
                .password_refs()
                .filter(|_| caller == Caller::Verified)
                .find(|r| !policy.trust.is_trusted(&r.namespace))
            {
                return Verdict::deny(format!(
                    "copyrator: invalid CopyRule: spec.target.formats: a store's passwordSecretRef names namespace {}, which is not trusted (--trusted-namespaces): a password is read only from a trusted namespace",
                    from.namespace
                ));
            }
            // RBAC copies come only from where only administrators write (SPEC §9.10); the
            // planner refuses them too, trust may change with a restart. Which namespaces are
            // trusted is said only to the API server (SPEC §9.8).
            // A template's source is the CopyRule itself, trusted as every CopyRule is.
            let source_in_namespace = crate::admission::grants::needs_check(&parsed).is_some()
                && parsed.template().is_none();
            let grants_unchecked = (caller == Caller::Unverified && source_in_namespace)
                .then(|| GRANT_SOURCE_UNCHECKED.to_string());
            if caller == Caller::Verified
                && source_in_namespace
                && !policy.trust.is_trusted(&parsed.source_namespace)
            {
                return Verdict::deny(format!(
                    "copyrator: invalid CopyRule: spec.sourceNamespace: {} is not trusted (--trusted-namespaces): {}s are copied only from namespaces where only administrators write",
                    parsed.source_namespace,
                    parsed.target_kind().as_str()
                ));
            }
            let check_grant = crate::admission::grants::needs_check(&parsed).map(|_| {
                crate::admission::grants::GrantCheck {
                    rule: Box::new(parsed.clone()),
                    user: req.user_info.clone(),
                }
            });
            // A Secret's data for ConfigMaps is judged on what its sources hold now.
            let check = super::certificates::needs_check(&parsed).then(|| Box::new(parsed));
            let name = rule
                .metadata
                .name
                .clone()
                .unwrap_or_else(|| req.name.clone());
            if !selector::is_dns_subdomain(&name) {
                // Not a name the API server would send (a hand-made review): no work.
                return Verdict::allow();
            }
            let job = Job::new(JobKey::Rule(name), Trigger::Admission).full_scan();
            let mut verdict = if req.operation == Operation::Create {
                Verdict::job(job.awaiting(Awaited::Exists))
            } else {
                let old = req.old_object.as_ref();
                let spec_changed = old.and_then(|o| o.spec).map(|s| s.get())
                    != obj.spec.map(|s| s.get())
                    || review::labels(old) != review::labels(Some(obj))
                    || obj.metadata.deletion_timestamp.is_some();
                if !spec_changed {
                    return Verdict::allow();
                }
                match review::resource_version(old) {
                    Some(rv) => Verdict::job(job.awaiting(Awaited::ChangedFrom(rv))),
                    None => Verdict::job(job),
                }
            };
            verdict.check_certificates = check;
            verdict.check_grant = check_grant;
            verdict.warnings.extend(password_unchecked);
            verdict.warnings.extend(grants_unchecked);
            verdict
        }
        Operation::Delete if !selector::is_dns_subdomain(&req.name) => Verdict::allow(),
        Operation::Delete => Verdict::job(
            Job::new(JobKey::Rule(req.name.clone()), Trigger::Admission)
                .full_scan()
                .awaiting(Awaited::Gone),
        ),
        Operation::Connect => Verdict::allow(),
    }
}

/// The CopyRule of a review: its metadata and its spec, parsed.
fn copy_rule(obj: &Object<'_>) -> Result<CopyRule, serde_json::Error> {
    let spec: CopyRuleSpec = match obj.spec {
        Some(raw) => serde_json::from_str(raw.get())?,
        None => return Err(serde::de::Error::missing_field("spec")),
    };
    let m = &obj.metadata;
    let mut rule = CopyRule::new(m.name.as_deref().unwrap_or_default(), spec);
    rule.metadata = ObjectMeta {
        name: m.name.clone(),
        uid: m.uid.clone(),
        resource_version: m.resource_version.clone(),
        labels: m.labels.clone(),
        annotations: m.annotations.clone(),
        creation_timestamp: m.creation_timestamp.clone(),
        deletion_timestamp: m.deletion_timestamp.clone(),
        ..Default::default()
    };
    Ok(rule)
}
