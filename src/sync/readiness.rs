//! Whether a namespace sync settled the namespace, and which of its copies its Pods get as
//! image pull secrets (SPEC §10): asked by every namespace sync, for the Pod gate (`pods.rs`)
//! and for the namespace jobs alike.

use std::collections::BTreeSet;

use crate::{
    cluster::apply::Applied,
    freshness::ready::Ready,
    marks,
    model::{Kind, ObjectKey},
    plan::{Action, ClaimRef, World},
    sync::context::Context,
    transform::OPAQUE,
};

/// Whether a namespace sync left every copy in place (`None`: something failed, went stale or
/// could not be read), and which copies its Pods get as image pull secrets.
pub(super) async fn readiness(
    ctx: &Context,
    namespace: &str,
    world: &World,
    outcomes: &[(Action, Applied)],
) -> Option<Ready> {
    let unreadable = world.unreadable();
    // A placed hub source its hub did not let be read has no version to wait for: its copies
    // are held as they are (SPEC §14.3), and this namespace settled without them.
    if !unreadable.namespaces.is_empty()
        || !unreadable.copies.is_empty()
        || unreadable.sources.iter().any(|k| !k.is_hub())
    {
        return None;
    }
    // Hubs followed, but their reads not known here (a replica that does not lead).
    if !ctx.hub_reads.get().vouches() {
        return None;
    }
    let asks = |by: &ClaimRef| {
        world
            .rules()
            .get(&by.rule)
            .is_some_and(|r| r.image_pull_secret && r.kind == Kind::Secret)
    };
    let mut pull_secrets = BTreeSet::new();
    let mut to_check = Vec::new();
    for (action, applied) in outcomes {
        match (action, applied) {
            (_, Applied::Failed(_) | Applied::Stale)
            | (Action::NeedSource { .. } | Action::NeedBindings { .. }, _) => {
                return None;
            }
            (
                Action::Create { copy, by }
                | Action::Update { copy, by, .. }
                | Action::Recreate { copy, by, .. },
                Applied::Done,
            ) if copy.key.namespace == namespace && asks(by) => {
                if is_pull_secret_type(copy.template.payload.type_.as_deref()) {
                    pull_secrets.insert(copy.key.name.clone());
                } else {
                    log_not_a_pull_secret(&copy.key);
                }
            }
            (Action::InSync { target, by }, _) if target.namespace == namespace && asks(by) => {
                match in_sync_type(ctx, world, target, by) {
                    Some(type_) if is_pull_secret_type(type_.as_deref()) => {
                        pull_secrets.insert(target.name.clone());
                    }
                    Some(_) => log_not_a_pull_secret(target),
                    None => to_check.push(target.clone()),
                }
            }
            _ => {}
        }
    }
    // A copy in sync whose type is not known from memory: read it, its type decides whether
    // it can be a pull secret.
    for target in to_check {
        match ctx.cluster.get(&target).await {
            Ok(Some(copy)) if is_pull_secret_type(copy.payload.type_.as_deref()) => {
                pull_secrets.insert(target.name.clone());
            }
            Ok(_) => log_not_a_pull_secret(&target),
            Err(e) => {
                tracing::debug!(copy = %target, error = %e, "could not read a pull secret's type");
                return None;
            }
        }
    }
    Some(Ready {
        pull_secrets: pull_secrets.into_iter().collect(),
    })
}

/// The type of a copy found in sync, when it is known without reading the copy: in sync means
/// the copy holds what its rule makes of its source's current version (the content hash covers
/// the type), so its type is the rule's target type, or the source's own, known while that
/// version's payload is in the source cache (a namespace job's second look finds the copies it
/// just wrote in sync, and reading each again cost a GET per new namespace). `None`: not
/// known, read the copy.
fn in_sync_type(
    ctx: &Context,
    world: &World,
    target: &ObjectKey,
    by: &ClaimRef,
) -> Option<Option<String>> {
    if target.kind != Kind::Secret {
        return Some(None);
    }
    let rule = world.rules().get(&by.rule)?;
    if let Some(type_) = &rule.transform.type_ {
        return Some(Some(type_.clone()));
    }
    if by.source.kind != Kind::Secret {
        return Some(Some(OPAQUE.to_string()));
    }
    let version = &world.sources().get(&by.source)?.resource_version;
    if version.is_empty() {
        return None;
    }
    let (payload, _) = ctx
        .caches
        .source_payloads
        .get(&(by.source.clone(), version.clone()))?;
    Some(Some(
        payload.type_.clone().unwrap_or_else(|| OPAQUE.to_string()),
    ))
}

fn is_pull_secret_type(type_: Option<&str>) -> bool {
    type_.is_some_and(|t| marks::PULL_SECRET_TYPES.contains(&t))
}

fn log_not_a_pull_secret(target: &ObjectKey) {
    tracing::debug!(copy = %target, "its rule asks for an image pull secret, but it is not of a pull-secret type: not injected");
}
