//! `/admission/rules`: CopyRule CREATE, UPDATE and DELETE. Denies invalid rules with a
//! message naming the field (the API server of 1.20 has no CEL validation to do it).

use kube::core::{
    DynamicObject,
    admission::{AdmissionRequest, Operation},
};

use super::{Verdict, util};
use crate::{
    copyrule::CopyRule,
    queue::{Awaited, Job, JobKey, Trigger},
    rules::Rule,
    selector,
};

pub fn review(req: &AdmissionRequest<DynamicObject>) -> Verdict {
    if req.name.is_empty() && req.operation != Operation::Create {
        return Verdict::allow();
    }
    match req.operation {
        Operation::Create | Operation::Update => {
            let Some(obj) = req.object.as_ref() else {
                return Verdict::allow();
            };
            let rule: CopyRule = match serde_json::to_value(obj).and_then(serde_json::from_value) {
                Ok(r) => r,
                Err(e) => {
                    return Verdict::deny(format!("copyrator: not a valid CopyRule: {e}"));
                }
            };
            if let Err(e) = Rule::from_copy_rule(&rule) {
                return Verdict::deny(format!("copyrator: invalid CopyRule: {e}"));
            }
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
            if req.operation == Operation::Create {
                return Verdict::job(job.awaiting(Awaited::Exists));
            }
            let spec_changed = req.old_object.as_ref().and_then(|o| o.data.get("spec"))
                != obj.data.get("spec")
                || util::labels(req.old_object.as_ref()) != util::labels(Some(obj))
                || obj.metadata.deletion_timestamp.is_some();
            if !spec_changed {
                return Verdict::allow();
            }
            match util::resource_version(req.old_object.as_ref()) {
                Some(rv) => Verdict::job(job.awaiting(Awaited::ChangedFrom(rv))),
                None => Verdict::job(job),
            }
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
