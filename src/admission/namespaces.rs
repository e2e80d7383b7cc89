//! `/admission/namespaces`: Namespace CREATE and UPDATE. Never denies.

use kube::core::{
    DynamicObject,
    admission::{AdmissionRequest, Operation},
};

use super::{Verdict, util};
use crate::queue::{Awaited, Job, JobKey, Trigger};

pub fn review(req: &AdmissionRequest<DynamicObject>) -> Verdict {
    let name = req.name.clone();
    if name.is_empty() {
        return Verdict::allow();
    }
    let job = Job::new(JobKey::Namespace(name), Trigger::Admission);
    match req.operation {
        // The namespace is not persisted yet: the job waits until it exists (SPEC §4.6).
        Operation::Create => Verdict::job(job.awaiting(Awaited::Exists)),
        // Only label changes (and the start of deletion) change which copies belong here.
        Operation::Update => {
            let (old, new) = (req.old_object.as_ref(), req.object.as_ref());
            let labels_changed = util::labels(old) != util::labels(new);
            let deleting = |o: Option<&DynamicObject>| {
                o.is_some_and(|o| o.metadata.deletion_timestamp.is_some())
            };
            if !labels_changed || deleting(new) {
                return Verdict::allow();
            }
            match util::resource_version(old) {
                Some(rv) => Verdict::job(job.awaiting(Awaited::ChangedFrom(rv))),
                None => Verdict::job(job),
            }
        }
        _ => Verdict::allow(),
    }
}
