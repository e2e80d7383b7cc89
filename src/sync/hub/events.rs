//! What a hub watch's event asks of the member's sync (SPEC §14.2): nothing when it changes
//! nothing read, one source read again (one GET) and its copies converged from it and the
//! rest of the last full read, or a full read of the hub, the only one that deletes (as for
//! a change of this cluster's ClusterProfile's labels, which place rules).

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use crate::{freshness::dispatch::Change, hub::HubSource, sync::context::Context};

use super::{
    LinkState, converge_read,
    follow::{HubEvent, Seen},
    full_sync, remote, reports, status,
};

/// What a hub watch's event asks for: nothing (it changes nothing read), one source read
/// again, or a full read.
pub(super) async fn on_event(
    ctx: &Context,
    interval: Duration,
    states: &mut BTreeMap<String, LinkState>,
    event: HubEvent,
) {
    let names: Vec<String> = states.keys().cloned().collect();
    let Some(state) = states.get_mut(&event.link) else {
        return;
    };
    let what = match event.what {
        Seen::Down(why) => return status::watch_failed(ctx, state, &why).await,
        // Back after a failure: a full read says whether the hub is reachable again and
        // converges what changed meanwhile (copies in sync get no write).
        Seen::Up if std::mem::replace(&mut state.watch_down, false) => {
            return full_sync(ctx, interval, state, &names).await;
        }
        Seen::Up => return,
        what => what,
    };
    let (Some(follow), Some((settings, read))) = (&state.follow, &mut state.read) else {
        return;
    };
    let full = match what {
        Seen::RulesRelisted => true,
        Seen::Rule(change, meta) => {
            let name = meta.name.clone().unwrap_or_default();
            match read.generations.get(&name) {
                // A rule placed here: read in full when its spec changed.
                Some(generation) => change == Change::Deleted || meta.generation != *generation,
                None if change == Change::Deleted => false,
                // Another rule: placed here now? One GET says.
                None => {
                    let labels = read.labels.as_ref();
                    remote::rule_placed(&follow.hub, &name, &settings.cluster_name, labels)
                        .await
                        .unwrap_or(true)
                }
            }
        }
        // This cluster's labels changed: what is placed here may have (read in full).
        Seen::Profile(meta) => {
            let labels = meta.map(|m| m.labels.unwrap_or_default());
            labels != read.labels
        }
        Seen::Down(_) | Seen::Up => false,
        Seen::Source(key, meta) => {
            let known = read.sources.get(&key);
            match (meta, known) {
                (_, None) => false,
                (None, Some(HubSource::Gone)) => false,
                // Gone: only a full read deletes its copies (SPEC §14.3).
                (None, Some(_)) => true,
                (Some(m), Some(HubSource::Present(info)))
                    if m.resource_version.as_ref() == Some(&info.resource_version) =>
                {
                    false
                }
                (Some(_), Some(_)) => {
                    match remote::read_source(&follow.hub, &key, &mut read.contents).await {
                        Ok(found @ HubSource::Present(_)) => {
                            read.sources.insert(key, found);
                            let settings = Arc::clone(settings);
                            let name = event.link.clone();
                            let cluster = settings.cluster_name.clone();
                            match converge_read(ctx, &name, settings, read, &names).await {
                                Ok(reports) => {
                                    let last = &mut state.reported;
                                    reports::report_to_hub(
                                        &follow.hub,
                                        &follow.token,
                                        &cluster,
                                        &reports,
                                        last,
                                    )
                                    .await;
                                    false
                                }
                                Err(e) => {
                                    tracing::warn!(link = %name, error = %e, "a hub source's copies could not be converged; read again in full");
                                    true
                                }
                            }
                        }
                        _ => true,
                    }
                }
            }
        }
    };
    if full {
        full_sync(ctx, interval, state, &names).await;
    }
}
