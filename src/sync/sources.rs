//! What copyrator does to and says about sources themselves: the opt-in label on sources a
//! CopyRule selects (so their changes reach the sources webhook), and Events about a source's
//! own configuration.

use crate::{
    cluster::{ApiError, ReadMode},
    marks,
    model::{ObjectKey, SourceInfo},
    plan::World,
    report::{
        self,
        events::{Regarding, reason},
    },
    rules::{Rule, SourceMatch},
    sync::context::Context,
};

/// Sources a rule selects that lack the opt-in label get it, so that their changes reach the
/// sources webhook; they join the world either way.
pub(super) async fn adopt_rule_sources(
    ctx: &Context,
    world: &mut World,
    rule: &Rule,
    fresh: ReadMode,
) -> Result<(), ApiError> {
    let cluster = &ctx.cluster;
    // The stores' password Secrets too, so that a changed password re-makes the stores as a
    // changed source does (SPEC §3.2).
    label_password_secrets(ctx, rule).await?;
    let infos: Vec<SourceInfo> = match &rule.sources {
        SourceMatch::Bundle(bundle) => {
            label_bundle_sources(ctx, bundle, fresh).await?;
            return Ok(());
        }
        // The rule is its copies' source: nothing to label.
        SourceMatch::Template(_) => return Ok(()),
        SourceMatch::Name(name) => {
            let key = ObjectKey::new(rule.kind, &rule.source_namespace, name);
            cluster
                .get_meta(&key)
                .await?
                .and_then(|m| SourceInfo::from_meta(rule.kind, &m))
                .into_iter()
                .collect()
        }
        SourceMatch::Selector(sel) => {
            cluster
                .list_meta(
                    rule.kind,
                    Some(&rule.source_namespace),
                    &marks::not_a_copy(&sel.to_string()),
                    fresh,
                    |m| SourceInfo::from_meta(rule.kind, &m),
                )
                .await?
        }
    };
    // A copy is never a source (SPEC §9.6): never labelled, never in the world as one.
    let infos: Vec<SourceInfo> = infos.into_iter().filter(|i| rule.applies_to(i)).collect();
    for info in &infos {
        if info.labels.get(marks::SOURCE_LABEL).map(String::as_str) != Some("true")
            && !info.deleting
        {
            label_source(ctx, info).await;
        }
    }
    world.set_sources(infos.into_iter().map(|s| (s.key.clone(), Some(s))));
    Ok(())
}

/// A bundle's sources get the opt-in label, so that their changes reach the sources webhook
/// and watch, whose source jobs wake the bundle ([`wake_followers`]). They are not its rule's
/// sources: none joins the world.
async fn label_bundle_sources(
    ctx: &Context,
    bundle: &crate::bundle::Bundle,
    fresh: ReadMode,
) -> Result<(), ApiError> {
    let cluster = &ctx.cluster;
    for source in &bundle.sources {
        let infos: Vec<SourceInfo> = match &source.select {
            crate::bundle::BundleSelect::Name(name) => {
                let key = ObjectKey::new(source.kind, &source.namespace, name);
                cluster
                    .get_meta(&key)
                    .await?
                    .and_then(|m| SourceInfo::from_meta(source.kind, &m))
                    .into_iter()
                    .collect()
            }
            crate::bundle::BundleSelect::Selector(sel) => {
                cluster
                    .list_meta(
                        source.kind,
                        Some(&source.namespace),
                        &marks::not_a_copy(&sel.to_string()),
                        fresh,
                        |m| SourceInfo::from_meta(source.kind, &m),
                    )
                    .await?
            }
        };
        for info in infos
            .iter()
            .filter(|i| source.selects(i) && !i.deleting)
            .take(crate::bundle::MAX_SELECTED)
        {
            label_source(ctx, info).await;
        }
    }
    Ok(())
}

/// The Secrets `rule`'s truststores' passwords are read from get the opt-in label (in trusted
/// namespaces only, where they are read): their changes reach the sources webhook and watch,
/// whose source jobs wake the rule ([`wake_followers`]).
async fn label_password_secrets(ctx: &Context, rule: &Rule) -> Result<(), ApiError> {
    for from in rule.password_refs() {
        if !ctx.settings.policy.trust.is_trusted(&from.namespace) {
            continue;
        }
        let key = ObjectKey::new(crate::model::Kind::Secret, &from.namespace, &from.name);
        if let Some(info) = ctx
            .cluster
            .get_meta(&key)
            .await?
            .and_then(|m| SourceInfo::from_meta(key.kind, &m))
            .filter(|i| !i.deleting)
        {
            label_source(ctx, &info).await;
        }
    }
    Ok(())
}

/// The CopyRules that follow `key` without copying it get a job (SPEC §3.2): a change of a
/// bundle's source or of a store's password Secret (created, updated, deleted, relabelled)
/// reaches every copy of the rule.
pub(super) fn wake_followers(ctx: &Context, rules: &[Rule], key: &ObjectKey) {
    for rule in rules {
        if let Some(name) = rule.id.copy_rule_name()
            && rule.follows(key)
        {
            crate::queue::enqueue(
                &ctx.queue,
                &ctx.metrics,
                crate::queue::job::Job::new(
                    crate::queue::job::JobKey::Rule(name.to_string()),
                    crate::queue::job::Trigger::FollowUp,
                ),
            );
        }
    }
}

/// Whether a rule reads `info` without copying it, as a bundle's source or a store's
/// password (its opt-in label then asks for no rule of its own).
fn read_by_a_rule(world: &World, info: &SourceInfo) -> bool {
    world.rules().rules.iter().any(|r| {
        r.bundle()
            .is_some_and(|b| b.sources.iter().any(|s| s.selects(info)))
            || r.reads_password_of(&info.key)
    })
}

pub(super) async fn label_source(ctx: &Context, info: &SourceInfo) {
    if info.labels.get(marks::SOURCE_LABEL).map(String::as_str) == Some("true") {
        return;
    }
    if let Err(e) = ctx.cluster.label_source(&info.key, &info.uid).await {
        tracing::warn!(source = %info.key, error = %e, "could not label source");
    }
}

/// Events about a source's own configuration (inline rule).
pub(super) async fn warn_about_source(ctx: &Context, world: &World, info: &SourceInfo) {
    let regarding = Regarding::source(info.key.kind, &info.key, &info.uid);
    if let Some(why) = world.rules().capped_sources.get(&info.key) {
        ctx.events
            .warning(&regarding, reason::HELD_BACK, report::held_back(why))
            .await;
        return;
    }
    if let Some(err) = world.rules().invalid_sources.get(&info.key) {
        ctx.events
            .warning(&regarding, reason::INVALID, err.to_string())
            .await;
        return;
    }
    let labelled = info.labels.get(marks::SOURCE_LABEL).map(String::as_str) == Some("true");
    if labelled && world.rules().for_source(info).next().is_none() && !read_by_a_rule(world, info) {
        ctx.events
            .warning(
                &regarding,
                reason::NO_TARGETS,
                format!(
                    "labelled {}=true but has neither {} nor {} and no CopyRule selects it: copied nowhere",
                    marks::SOURCE_LABEL,
                    marks::NAMESPACE_SELECTOR_ANNOTATION,
                    marks::NAMESPACES_ANNOTATION
                ),
            )
            .await;
    }
}
