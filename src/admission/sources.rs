//! `/admission/sources`: objects of the kinds copied labelled `copyrator.io/source=true`.
//! Denies only invalid copyrator annotations, with a message naming the annotation, and the
//! opt-in label where it cannot take effect (on a copy; on a kind other than Secret or
//! ConfigMap in a namespace that is not trusted).
//!
//! Trust decides nothing an unverified caller hears (SPEC §9.8): its source is judged as if
//! its namespace were trusted, and what trust would change is said as a condition. The
//! planner enforces trust whatever admission said.

use super::{
    Verdict,
    caller::Caller,
    checks::Check,
    review::{self, Object, Operation, Request},
};
use crate::{
    marks,
    model::{Kind, ObjectKey, SourceInfo},
    plan::Policy,
    queue::job::{Awaited, Job, JobKey, Trigger},
    rules::{Capped, Rule},
    tenancy::TrustPolicy,
};

/// The warning, instead of the denial, for an unverified caller's inline rule of a kind only
/// a trusted namespace may copy.
fn trusted_only_warning(kind: Kind) -> String {
    format!(
        "copyrator: an inline rule for a {kind} counts only in a namespace copyrator trusts \
         (--trusted-namespaces): elsewhere it makes no rule, and a Warning Event on the source \
         says so (run copyrator with --client-ca to have it denied here)"
    )
}

pub fn review(req: &Request<'_>, policy: &Policy, caller: Caller) -> Verdict {
    let (Some(kind), Some(namespace)) = (
        Kind::lookup(&req.kind.group, &req.kind.kind),
        req.namespace.clone(),
    ) else {
        return Verdict::allow();
    };
    let key = ObjectKey::new(kind, namespace, req.name.clone());
    if !key.is_valid() {
        // Not a name the API server would send (a hand-made review): no work.
        return Verdict::allow();
    }
    let job = Job::new(JobKey::Source(key.clone()), Trigger::Admission);
    match req.operation {
        Operation::Create | Operation::Update => {
            let Some(obj) = req.object.as_ref() else {
                return Verdict::allow();
            };
            let mut meta = obj.metadata.clone();
            // On CREATE with generateName the name is not in the request's name field.
            meta.namespace = Some(key.namespace.clone());
            meta.name = meta.name.or_else(|| Some(key.name.clone()));
            let info = SourceInfo::from_meta(kind, &meta);
            let trust_all;
            let trust = if Check::SourceTrust.looks(caller) {
                &policy.trust
            } else {
                trust_all = TrustPolicy::trust_all();
                &trust_all
            };
            // Over a cap (a source of an untrusted namespace, SPEC §9.7): allowed, and said.
            let held_back = info.as_ref().and_then(|i| {
                if Check::SourceMetadataCap.looks(caller) {
                    return policy
                        .keep_source(i.clone())
                        .dropped
                        .map(|bytes| crate::report::held_back(&Capped::MetadataBytes(bytes)));
                }
                let dropped = i.clone().kept(Some(policy.caps.metadata_bytes)).dropped;
                dropped.map(|bytes| {
                    format!(
                        "unless its namespace is trusted, {}",
                        crate::report::held_back(&Capped::MetadataBytes(bytes))
                    )
                })
            });
            let newly_opted_in =
                rule_config(req.old_object.as_ref())[0].map(String::as_str) != Some("true");
            let rule_changed = req.operation == Operation::Create
                || rule_config(req.old_object.as_ref()) != rule_config(req.object.as_ref());
            let rule = match info.map(|i| Rule::inline_tiered(&i, trust)) {
                Some(Err(e)) if e.field == marks::SOURCE_LABEL => {
                    return Verdict::deny(format!("copyrator: label {e}"));
                }
                Some(Err(e)) => return Verdict::deny(format!("copyrator: invalid annotation {e}")),
                Some(Ok(rule)) => rule,
                None => None,
            };
            if let Some(Err(e)) = rule
                .as_ref()
                .map(|r| r.check_pull_secret_type(Some(&secret_type(obj))))
            {
                return Verdict::deny(format!("copyrator: invalid annotation {e}"));
            }
            let trusted_only = (!Check::SourceTrust.looks(caller)
                && rule_changed
                && rule.is_some()
                && !kind.is_consentable())
            .then(|| trusted_only_warning(kind));
            // Warnings about targets that will get no copy, when the rule is new or changed.
            let advise = rule
                .filter(|r| r.has_targets())
                .filter(|_| rule_changed)
                .map(Box::new);
            let mut verdict = if req.operation == Operation::Create {
                Verdict::job(job.awaiting(Awaited::Exists))
            } else if !review::relevant_change(req.old_object.as_ref(), req.object.as_ref()) {
                Verdict::allow()
            } else {
                match review::resource_version(req.old_object.as_ref()) {
                    Some(rv) => Verdict::job(job.awaiting(Awaited::ChangedFrom(rv))),
                    None => Verdict::job(job),
                }
            };
            verdict.advise = advise;
            verdict.warnings.extend(held_back);
            verdict.warnings.extend(trusted_only);
            // The count cap's warning tells how many sources a namespace holds: only for the
            // API server (SPEC §9.8).
            if Check::SourceCountCap.looks(caller)
                && newly_opted_in
                && rule_config(req.object.as_ref())[0].map(String::as_str) == Some("true")
            {
                verdict.opted_in = Some(key);
            }
            verdict
        }
        Operation::Delete => Verdict::job(job.awaiting(Awaited::Gone)),
        Operation::Connect => Verdict::allow(),
    }
}

/// A Secret's `type` (`Opaque` when unset).
fn secret_type(obj: &Object<'_>) -> String {
    obj.type_
        .and_then(|t| serde_json::from_str::<String>(t.get()).ok())
        .unwrap_or_else(|| "Opaque".into())
}

/// The parts of an object that make up its inline rule.
fn rule_config<'o>(obj: Option<&'o Object<'_>>) -> [Option<&'o String>; 4] {
    let label = obj.and_then(|o| o.labels().get(marks::SOURCE_LABEL));
    let annotation = |key: &str| obj.and_then(|o| o.annotation(key));
    [
        label,
        annotation(marks::NAMESPACE_SELECTOR_ANNOTATION),
        annotation(marks::NAMESPACES_ANNOTATION),
        annotation(marks::IMAGE_PULL_SECRET_ANNOTATION),
    ]
}
