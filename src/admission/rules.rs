//! `/admission/rules`: CopyRule and NamespacedCopyRule CREATE, UPDATE and DELETE. Denies
//! invalid rules with a message naming the field (the API server of 1.20 has no CEL
//! validation to do it). A NamespacedCopyRule is checked as the CopyRule it stands for
//! (`copyrator_core::namespaced`), and as a rule of its namespace's tier.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{
    Verdict,
    caller::Caller,
    checks::Check,
    review::{self, Object, Operation, Request},
};
use crate::{
    copyrule::{CopyRule, CopyRuleSpec},
    namespaced::{NamespacedCopyRule, NamespacedCopyRuleSpec},
    plan::Policy,
    powers::{self, Author},
    queue::job::{Awaited, Job, JobKey, Trigger},
    rules::Rule,
    selector,
    tenancy::TrustPolicy,
};

pub fn review(req: &Request<'_>, policy: &Policy, caller: Caller) -> Verdict {
    if req.name.is_empty() && req.operation != Operation::Create {
        return Verdict::allow();
    }
    // A NamespacedCopyRule is the only rule kind reviewed in a namespace.
    let namespace = req.namespace.as_deref().filter(|ns| !ns.is_empty());
    let kind = match namespace {
        Some(_) => "NamespacedCopyRule",
        None => "CopyRule",
    };
    if namespace.is_some_and(|ns| !selector::is_dns_label(ns)) {
        // Not a namespace the API server would send (a hand-made review): no work.
        return Verdict::allow();
    }
    let job_name = |name: &str| crate::namespaced::rule_name(namespace, name);
    match req.operation {
        Operation::Create | Operation::Update => {
            let Some(obj) = req.object.as_ref() else {
                return Verdict::allow();
            };
            let rule = match namespace {
                Some(ns) => namespaced_rule(obj, ns),
                None => copy_rule(obj),
            };
            let rule = match rule {
                Ok(r) => r,
                Err(e) => {
                    return Verdict::deny(format!("copyrator: not a valid {kind}: {e}"));
                }
            };
            let parsed = match Rule::from_copy_rule(&rule) {
                Ok(parsed) => parsed,
                Err(e) => return Verdict::deny(format!("copyrator: invalid {kind}: {e}")),
            };
            // What no row of its author allows, whatever --trusted-namespaces says, is denied
            // to every caller (SPEC §9.11); the planner holds the rule to its row too.
            if let Some(asked) = powers::beyond_every_row(&parsed).first() {
                let kinds = match namespace {
                    Some(_) => Author::TrustedNamespaced.powers().kinds,
                    None => parsed.powers().kinds,
                };
                return Verdict::deny(format!(
                    "copyrator: invalid {kind}: {}: {}",
                    asked.field(),
                    asked.message_to(kind, kinds)
                ));
            }
            let unchecked = match trust_checks(&parsed, policy, caller) {
                Ok(unchecked) => unchecked,
                Err(denial) => return Verdict::deny(denial),
            };
            let check_grant = crate::admission::grants::needs_check(&parsed).map(|_| {
                crate::admission::grants::GrantCheck {
                    rule: Box::new(parsed.clone()),
                    user: req.user_info.clone(),
                }
            });
            // A Secret's data for ConfigMaps is judged on what its sources hold now.
            let check = super::certificates::needs_check(&parsed).then(|| Box::new(parsed));
            let name = obj
                .metadata
                .name
                .clone()
                .unwrap_or_else(|| req.name.clone());
            if !selector::is_dns_subdomain(&name) {
                // Not a name the API server would send (a hand-made review): no work.
                return Verdict::allow();
            }
            let job = Job::new(JobKey::Rule(job_name(&name)), Trigger::Admission).full_scan();
            let Some(mut verdict) = queued(req, obj, job) else {
                return Verdict::allow();
            };
            verdict.check_certificates = check;
            verdict.check_grant = check_grant;
            verdict.warnings.extend(
                unchecked
                    .into_iter()
                    .filter_map(Check::unchecked_warning)
                    .map(String::from),
            );
            verdict
        }
        Operation::Delete if !selector::is_dns_subdomain(&req.name) => Verdict::allow(),
        Operation::Delete => Verdict::job(
            Job::new(JobKey::Rule(job_name(&req.name)), Trigger::Admission)
                .full_scan()
                .awaiting(Awaited::Gone),
        ),
        Operation::Connect => Verdict::allow(),
    }
}

/// The verdict queueing `job` for a CREATE, or for an UPDATE that changes the rule; `None`
/// when nothing changed.
fn queued(req: &Request<'_>, obj: &Object<'_>, job: Job) -> Option<Verdict> {
    if req.operation == Operation::Create {
        return Some(Verdict::job(job.awaiting(Awaited::Exists)));
    }
    let old = req.old_object.as_ref();
    let spec_changed = old.and_then(|o| o.spec).map(|s| s.get()) != obj.spec.map(|s| s.get())
        || review::labels(old) != review::labels(Some(obj))
        || obj.metadata.deletion_timestamp.is_some();
    if !spec_changed {
        return None;
    }
    Some(match review::resource_version(old) {
        Some(rv) => Verdict::job(job.awaiting(Awaited::ChangedFrom(rv))),
        None => Verdict::job(job),
    })
}

/// The checks of `rule` that turn on `--trusted-namespaces`: those that do not look, for
/// `caller`, and apply; `Err`: the denial. Whether a namespace is trusted is said only to the
/// API server (SPEC §9.8); the planner checks again, as trust may change with a restart.
fn trust_checks(rule: &Rule, policy: &Policy, caller: Caller) -> Result<Vec<Check>, String> {
    let mut unchecked = Vec::new();
    let kind = match rule.id.namespaced() {
        Some(_) => "NamespacedCopyRule",
        None => "CopyRule",
    };
    // A NamespacedCopyRule's tier is its namespace's. Anyone else is warned whenever the rule
    // asks what only a trusted namespace's rule may, trusted or not.
    // (Its warning comes last.)
    let tier_unchecked = if Check::RuleTier.looks(caller) {
        if let Err(e) = rule.clone().tiered(&policy.trust) {
            return Err(format!("copyrator: invalid {kind}: {e}"));
        }
        None
    } else {
        let untrusted = TrustPolicy::default();
        rule.clone()
            .tiered(&untrusted)
            .is_err()
            .then_some(Check::RuleTier)
    };
    // A store's password is read only from the platform's own namespaces (SPEC §3.2).
    if Check::StorePassword.looks(caller) {
        if let Some(from) = rule
            .password_refs()
            .find(|r| !policy.trust.is_trusted(&r.namespace))
        {
            return Err(format!(
                "copyrator: invalid CopyRule: spec.target.formats: a store's passwordSecretRef names namespace {}, which is not trusted (--trusted-namespaces): a password is read only from a trusted namespace",
                from.namespace
            ));
        }
    } else if rule.password_refs().next().is_some() {
        unchecked.push(Check::StorePassword);
    }
    // RBAC copies come only from where only administrators write (SPEC §9.10). A template's
    // source is the CopyRule itself, trusted as every CopyRule is.
    let source_in_namespace =
        crate::admission::grants::needs_check(rule).is_some() && rule.template().is_none();
    if source_in_namespace && !Check::GrantSource.looks(caller) {
        unchecked.push(Check::GrantSource);
    } else if source_in_namespace && !policy.trust.is_trusted(&rule.source_namespace) {
        return Err(format!(
            "copyrator: invalid CopyRule: spec.sourceNamespace: {} is not trusted (--trusted-namespaces): {}s are copied only from namespaces where only administrators write",
            rule.source_namespace,
            rule.target_kind().as_str()
        ));
    }
    unchecked.extend(tier_unchecked);
    Ok(unchecked)
}

/// The NamespacedCopyRule of a review in namespace `ns`, as the CopyRule it stands for.
fn namespaced_rule(obj: &Object<'_>, ns: &str) -> Result<CopyRule, serde_json::Error> {
    let spec: NamespacedCopyRuleSpec = match obj.spec {
        Some(raw) => serde_json::from_str(raw.get())?,
        None => return Err(serde::de::Error::missing_field("spec")),
    };
    let m = &obj.metadata;
    let mut rule = NamespacedCopyRule::new(m.name.as_deref().unwrap_or_default(), spec);
    rule.metadata = ObjectMeta {
        name: m.name.clone(),
        namespace: Some(ns.to_string()),
        uid: m.uid.clone(),
        resource_version: m.resource_version.clone(),
        creation_timestamp: m.creation_timestamp.clone(),
        deletion_timestamp: m.deletion_timestamp.clone(),
        ..Default::default()
    };
    // A CREATE may leave the name to generateName: the rule is checked all the same.
    if rule.metadata.name.is_none() {
        rule.metadata.name = Some(String::new());
    }
    rule.as_copy_rule()
        .ok_or_else(|| serde::de::Error::custom("a NamespacedCopyRule needs a namespace"))
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
