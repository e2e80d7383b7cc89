//! `/admission/copies`: UPDATE and DELETE of Secrets and ConfigMaps managed by copyrator.
//! Never denies; a change made by anyone but copyrator queues the copy for restoring.

use kube::core::{
    DynamicObject,
    admission::{AdmissionRequest, Operation},
};

use super::{Verdict, util};
use crate::{
    marks,
    model::{Kind, ObjectKey},
    queue::{Awaited, Job, JobKey, Trigger},
};

pub fn review(req: &AdmissionRequest<DynamicObject>) -> Verdict {
    let (Some(kind), Some(namespace)) = (Kind::from_kind(&req.kind.kind), req.namespace.clone())
    else {
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
            let field_manager = req
                .options
                .as_ref()
                .and_then(|o| o.0.get("fieldManager"))
                .and_then(|f| f.as_str());
            // copyrator's own writes come back through this webhook; they need no work.
            if field_manager == Some(marks::FIELD_MANAGER)
                || !util::relevant_change(req.old_object.as_ref(), req.object.as_ref())
            {
                return Verdict::allow();
            }
            match util::resource_version(req.old_object.as_ref()) {
                Some(rv) => Verdict::job(job.awaiting(Awaited::ChangedFrom(rv))),
                None => Verdict::job(job),
            }
        }
        Operation::Delete => Verdict::job(job.awaiting(Awaited::Gone)),
        _ => Verdict::allow(),
    }
}
