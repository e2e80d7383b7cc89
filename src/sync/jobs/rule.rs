//! A rule job: every copy of one CopyRule or NamespacedCopyRule, then a CopyRule's status
//! (SPEC §2.2).

use std::collections::BTreeSet;

use crate::{
    cluster::{
        ReadMode,
        load::{self, Found},
    },
    freshness::persisted::persisted,
    model::Kind,
    plan::{Contents, Existing, Scope},
    queue::job::Job,
    rules::RuleId,
    sync::{
        Outcome, SyncError,
        context::Context,
        converge::{converge, finish_loading},
        follow_up::{after, write_rule_status},
        persisted::read_persisted,
        sources::adopt_rule_sources,
    },
};

/// A rule job: every copy of one CopyRule, then its status (SPEC §2.2).
pub(in crate::sync) async fn run(
    ctx: &Context,
    job: &Job,
    name: &str,
) -> Result<Outcome, SyncError> {
    let cluster = &ctx.cluster;
    let Some(copy_rule) = read_persisted(ctx, job, || cluster.get_rule(name), persisted).await?
    else {
        return Ok(Outcome::NotPersisted);
    };
    let id = RuleId::of_rule_name(name);
    if copy_rule.is_none() && cluster.copy_index().any_copy(|m| m.rule == id) == Some(false) {
        // No such rule and no copy of it: nothing to do. A review of a CopyRule that never
        // existed (forged, or denied by another webhook) costs this one read (SPEC §9.8).
        return Ok(Outcome::Done);
    }
    let kinds: Vec<Kind> = match &copy_rule {
        Some(r) => match crate::rules::copy_rule_kind(&r.spec) {
            // Its copies may be of the other of Secret and ConfigMap (SPEC §3.2), also
            // those made before its target kind changed.
            Ok(kind) => kind.interchangeable(),
            // Invalid: its status says why; its copies, if any, are of some kind copied here.
            Err(_) => Kind::all(),
        },
        None => Kind::all(),
    };
    let fresh = ReadMode::Indexed;
    let mut world = load::load_rules(cluster, &kinds, &ctx.settings.policy, fresh).await?;
    // The rule as just read, not as listed a moment earlier.
    world.set_copy_rule(name, copy_rule.clone());
    let rule = world.rules().copy_rule(name).cloned();
    let mut found = Found::default();

    if let Some(rule) = &rule {
        adopt_rule_sources(ctx, &mut world, rule, fresh).await?;
        load::load_target_namespaces(cluster, &mut world, [rule], fresh).await?;
        let mut uids: BTreeSet<String> = world
            .sources()
            .values()
            .filter(|s| rule.applies_to(s))
            .map(|s| s.uid.clone())
            .collect();
        // A bundle's copies carry its rule's uid (SPEC §3.2, Bundles).
        uids.extend(rule.bundle().map(|b| b.owner.uid.clone()));
        load::copies_of_sources(cluster, rule.target_kind(), &uids, fresh, &mut found).await?;
    }
    if rule.is_none() || job.full_scan {
        // Deleted, invalid or changed: its copies of sources it no longer selects are only
        // found by their rule annotation.
        for kind in &kinds {
            let mut all = Found::default();
            load::all_copies(cluster, *kind, None, fresh, &mut all).await?;
            all.retain(|_, e| matches!(e, Existing::Managed(m) if m.rule == id));
            found.existing.extend(all.existing);
            found.suspect.extend(all.suspect);
        }
    }
    finish_loading(ctx, &mut world, &mut found, fresh).await?;
    let outcomes = converge(
        ctx,
        job,
        &mut world,
        &Scope::Rule(id.clone()),
        found,
        Contents::default(),
    )
    .await?;
    if let Some(cr) = &copy_rule {
        write_rule_status(ctx, &world, cr, &crate::report::tally(&outcomes), None).await;
    }
    after(ctx, job, &outcomes).await
}
