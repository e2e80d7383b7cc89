//! What copyrator does to and says about sources themselves: the opt-in label on sources a
//! CopyRule selects (so their changes reach the sources webhook), and Events about a source's
//! own configuration.

use crate::{
    cluster::{ApiError, Freshness},
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
    fresh: Freshness,
) -> Result<(), ApiError> {
    let cluster = &ctx.cluster;
    let infos: Vec<SourceInfo> = match &rule.sources {
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
    if labelled && world.rules().for_source(info).next().is_none() {
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
