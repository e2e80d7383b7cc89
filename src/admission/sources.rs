//! `/admission/sources`: Secrets and ConfigMaps labelled `copyrator.io/source=true`.
//! Denies only invalid copyrator annotations, with a message naming the annotation.

use kube::core::{
    DynamicObject,
    admission::{AdmissionRequest, Operation},
};

use super::{Verdict, util};
use crate::{
    model::{Kind, ObjectKey, SourceInfo},
    queue::{Awaited, Job, JobKey, Trigger},
    rules::Rule,
};

pub fn review(req: &AdmissionRequest<DynamicObject>) -> Verdict {
    let (Some(kind), Some(namespace)) = (Kind::from_kind(&req.kind.kind), req.namespace.clone())
    else {
        return Verdict::allow();
    };
    let key = ObjectKey::new(kind, namespace, req.name.clone());
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
            if let Some(info) = SourceInfo::from_meta(kind, &(&meta).into())
                && let Err(e) = Rule::inline(&info)
            {
                return Verdict {
                    deny: Some(format!("copyrator: invalid annotation {e}")),
                    job: None,
                };
            }
            if req.operation == Operation::Create {
                return Verdict::job(job.awaiting(Awaited::Exists));
            }
            if !util::relevant_change(req.old_object.as_ref(), req.object.as_ref()) {
                return Verdict::allow();
            }
            match util::resource_version(req.old_object.as_ref()) {
                Some(rv) => Verdict::job(job.awaiting(Awaited::ChangedFrom(rv))),
                None => Verdict::job(job),
            }
        }
        Operation::Delete => Verdict::job(job.awaiting(Awaited::Gone)),
        Operation::Connect => Verdict::allow(),
    }
}
