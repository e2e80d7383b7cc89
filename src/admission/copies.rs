//! `/admission/copies`: UPDATE and DELETE of Secrets and ConfigMaps managed by copyrator.
//! Never denies; a change made by anyone but copyrator queues the copy for restoring.

use super::{
    Verdict,
    review::{self, Operation, Request},
};
use crate::{
    marks,
    model::{Kind, ObjectKey},
    queue::job::{Awaited, Job, JobKey, Trigger},
};

pub fn review(req: &Request<'_>) -> Verdict {
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
    let job = Job::new(JobKey::Copy(key), Trigger::Admission);
    match req.operation {
        Operation::Update => {
            // copyrator's own writes come back through this webhook; they need no work.
            if req.field_manager() == Some(marks::FIELD_MANAGER)
                || !review::relevant_change(req.old_object.as_ref(), req.object.as_ref())
            {
                return Verdict::allow();
            }
            match review::resource_version(req.old_object.as_ref()) {
                Some(rv) => Verdict::job(job.awaiting(Awaited::ChangedFrom(rv))),
                None => Verdict::job(job),
            }
        }
        Operation::Delete => Verdict::job(job.awaiting(Awaited::Gone)),
        _ => Verdict::allow(),
    }
}
