//! One link's copies made equal to what its hub places here (SPEC §14.2, §14.3): the member's
//! rules and namespaces read as a job reads them, the hub's placed rules and sources joined to
//! them, then planned and applied within the link's scope like any job. Called only after the
//! hub was read in full: what is deleted here was positively read from a reachable hub.

use std::sync::Arc;

use crate::{
    cluster::{
        ReadMode,
        apply::Applied,
        load::{self, Found},
    },
    hub::Hubs,
    model::Kind,
    plan::{Action, Contents, Existing, Scope, plan},
    queue::job::{Job, JobKey, Trigger},
    rules::Rule,
    sync::{SyncError, context::Context, converge::settle},
};

/// Plans and applies every copy of `link` (its view in `hubs`, read from its hub this round);
/// returns the outcomes.
pub async fn converge_link(
    ctx: &Context,
    hubs: Arc<Hubs>,
    link: &str,
    mut contents: Contents,
) -> Result<Vec<(Action, Applied)>, SyncError> {
    let cluster = &ctx.cluster;
    let fresh = ReadMode::Indexed;
    let kinds = [Kind::Secret, Kind::ConfigMap];
    // The member's own rules too: they take precedence over a hub's (SPEC §14.2).
    let mut world = load::load_rules(cluster, &kinds, &ctx.settings.policy, fresh).await?;
    world.set_hubs(hubs);
    let rules: Vec<Rule> = world
        .rules()
        .rules
        .iter()
        .filter(|r| r.id.hub_link() == Some(link))
        .cloned()
        .collect();
    load::load_target_namespaces(cluster, &mut world, &rules, fresh).await?;
    let mut found = Found::default();
    for kind in kinds {
        let mut all = Found::default();
        load::all_copies(cluster, kind, None, fresh, &mut all).await?;
        all.retain(|_, e| matches!(e, Existing::Managed(m) if m.rule.hub_link() == Some(link)));
        found.existing.extend(all.existing);
        found.suspect.extend(all.suspect);
    }
    load::ensure_namespaces(cluster, &mut world, found.namespaces(), fresh).await?;
    load::read_suspects(cluster, &mut world, &mut found).await;
    let mut actions = plan(
        &world,
        &Scope::Link(link.to_string()),
        &found.existing,
        &contents,
    );
    // Every placed source present was read with its payload; one that was not is never read
    // here (its key names no namespace of this cluster).
    actions.retain(|a| !matches!(a, Action::NeedSource { .. }));
    let job = Job::new(JobKey::Resync, Trigger::Reconciler);
    let outcomes = settle(ctx, &job, &mut world, &mut found, &mut contents, actions).await?;
    crate::report::publish(&ctx.events, &ctx.metrics, &world, &outcomes).await;
    Ok(outcomes)
}
