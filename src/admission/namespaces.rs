//! `/admission/namespaces`: Namespace CREATE and UPDATE. Never denies; warns about entries of
//! the `copyrator.io/accept-from` annotation that are not namespace names or patterns.

use super::{
    Verdict,
    review::{self, Object, Operation, Request},
};
use crate::{
    marks,
    queue::job::{Awaited, Job, JobKey, Trigger},
    selector,
    tenancy::NamespacePatterns,
};

pub fn review(req: &Request<'_>) -> Verdict {
    let name = req.name.clone();
    if !selector::is_dns_label(&name) {
        // Not a name the API server would send (a hand-made review): no work.
        return Verdict::allow();
    }
    let job = Job::new(JobKey::Namespace(name), Trigger::Admission);
    let (old, new) = (req.old_object.as_ref(), req.object.as_ref());
    let mut verdict = match req.operation {
        // The namespace is not persisted yet: the job waits until it exists (SPEC §4.6).
        Operation::Create => Verdict::job(job.awaiting(Awaited::Exists)),
        // Only labels and consent (and the start of deletion) change which copies belong here.
        Operation::Update => {
            let changed =
                review::labels(old) != review::labels(new) || accept_from(old) != accept_from(new);
            let deleting = new.is_some_and(|o| o.metadata.deletion_timestamp.is_some());
            if !changed || deleting {
                Verdict::allow()
            } else {
                match review::resource_version(old) {
                    Some(rv) => Verdict::job(job.awaiting(Awaited::ChangedFrom(rv))),
                    None => Verdict::job(job),
                }
            }
        }
        _ => return Verdict::allow(),
    };
    if let Some(list) = accept_from(new)
        && accept_from(old) != Some(list)
    {
        let (_, invalid) = NamespacePatterns::parse_lenient(list);
        verdict.warnings.extend(invalid.iter().map(|entry| {
            format!(
                "{}: {entry:?} is not a namespace name or a pattern with '*'; it is ignored",
                marks::ACCEPT_FROM_ANNOTATION
            )
        }));
    }
    verdict
}

fn accept_from<'o>(obj: Option<&'o Object<'_>>) -> Option<&'o String> {
    obj?.annotation(marks::ACCEPT_FROM_ANNOTATION)
}
