//! The member side of copies across clusters (SPEC §14): the leader follows each HubLink's hub
//! with watches, of its CopyRules and of each placed source by name, as triggers: a source's
//! event reads that source again (one GET) and converges its copies from what was last read
//! of the rest; a placed rule's event, a LIST that may hide changes, or `--hub-sync-interval`
//! since the last one, reads the hub in full (`remote::read_hub`), the only read that can
//! delete a copy. A hub that cannot be read in full changes nothing here: its copies stay as
//! last synced, and the link's `Reachable` condition is False since the first failure.

mod converge;
mod error;
mod events;
mod follow;
mod members;
mod profiles;
mod reads;
mod remote;
mod reports;
mod status;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use kube::{Api, api::ListParams};
use serde_json::json;
use tokio::{
    sync::{mpsc, watch},
    time::Instant,
};

use crate::{
    cluster::progress::WatchProgress,
    hub::{HubLink, Hubs, LinkSettings, LinkView, MAX_PLACED_SOURCES, PlacedRuleStatus},
    sync::context::Context,
};

use follow::{Deps, Follow};
use remote::HubRead;
use status::{condition, status, write_status};

pub use error::HubError;
pub use members::{Granted, grant_members};
pub use reads::hubs_for;

/// The hub side (SPEC §14.1): every `interval`, while this replica leads, each member's read
/// access is made equal to what the CopyRules place on it (`members.rs`).
pub async fn run_hub(
    ctx: Arc<Context>,
    interval: Duration,
    members_namespace: String,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        if *ctx.leading.borrow() {
            match grant_members(ctx.cluster.client(), &members_namespace, &ctx.events).await {
                Ok(granted) if !granted.failures.is_empty() => tracing::warn!(
                    not_granted = granted.failures.len(),
                    "members' hub access updated, but for what the rules' status says"
                ),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "members' hub access not updated; retried next round")
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// How often, at most, the HubLinks and their tokens are read again (member API calls only):
/// a new link is followed, and a new token used by the watches, within this.
pub const LINK_CHECK: Duration = Duration::from_secs(5);

/// What the member remembers of a link, for its status and its watches' events.
#[derive(Default)]
struct LinkState {
    /// The HubLink as last listed.
    link: Option<HubLink>,
    /// Its hub's watches, while this replica leads and the link is valid.
    follow: Option<Follow>,
    /// The last full read of its hub, kept up to date by the events since.
    read: Option<(Arc<LinkSettings>, HubRead)>,
    /// When the next full read is due (`--hub-sync-interval` after the last).
    next_full: Option<Instant>,
    /// Since when the hub has not been read in full.
    unreachable_since: Option<Timestamp>,
    /// When it last was, and its copies converged.
    last_sync: Option<Timestamp>,
    /// The status last written, but for `lastSyncTime`: written again when it changes.
    written: Option<serde_json::Value>,
    /// When `lastSyncTime` was last written.
    written_at: Option<Timestamp>,
    /// When its token expires and was issued (Unix seconds), when the token says.
    credential: Option<(i64, Option<i64>)>,
    /// The report last written on the hub (SPEC §14.4), but for its time.
    reported: Option<BTreeMap<String, String>>,
    /// Full reads failed in a row: the next is tried after [`retry_after`] of them.
    failures: u32,
    /// Whether its CopyRules watch failed and is not up again.
    watch_down: bool,
}

/// When a full read is tried again after `failures` in a row: 5 s, doubling, at most
/// `interval` (a hub back, or a read allowed again, is found without waiting for it).
fn retry_after(failures: u32, interval: Duration) -> Duration {
    let backoff = LINK_CHECK.saturating_mul(1 << failures.saturating_sub(1).min(6));
    backoff.min(interval)
}

/// Follows every link while this replica leads, until shutdown.
pub async fn run(
    ctx: Arc<Context>,
    interval: Duration,
    progress: Arc<WatchProgress>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (events_tx, mut events) = mpsc::channel(follow::EVENTS_QUEUED);
    let deps = Deps {
        metrics: Arc::clone(&ctx.metrics),
        progress,
        shutdown: shutdown.clone(),
        events: events_tx,
        api_timeout: ctx.cluster.api_timeout(),
    };
    let mut states: BTreeMap<String, LinkState> = BTreeMap::new();
    let mut next_check = Instant::now();
    // Whether the HubLinks were listed since this replica leads.
    let mut listed = false;
    ctx.hub_reads
        .publish(&ctx.ready, crate::sync::hub_reads::HubReads::Unknown);
    let mut leadership = ctx.leading.clone();
    loop {
        let leading = *ctx.leading.borrow();
        if !leading {
            // Only the leader follows the hubs.
            states.values_mut().for_each(|s| s.follow = None);
            listed = false;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(next_check) => {
                if leading {
                    listed |= check_links(&ctx, &deps, interval, &mut states).await;
                }
                next_check = Instant::now() + interval.min(LINK_CHECK);
            }
            Some(event) = events.recv() => {
                if leading {
                    events::on_event(&ctx, interval, &mut states, event).await;
                }
            }
            // A replica that stops leading stops vouching for hub copies at once.
            Ok(()) = leadership.changed() => {}
            _ = shutdown.changed() => return,
        }
        reads::publish_reads(&ctx, &states, leading && listed);
    }
}

/// Reads the HubLinks and their tokens: (re)starts each link's watches when its spec or token
/// changed, and reads its hub in full when due. Whether the HubLinks were listed.
async fn check_links(
    ctx: &Context,
    deps: &Deps,
    interval: Duration,
    states: &mut BTreeMap<String, LinkState>,
) -> bool {
    let member = ctx.cluster.client();
    let links = match Api::<HubLink>::all(member.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(l) => l.items,
        Err(e) => {
            tracing::debug!(error = %e, "HubLinks unreadable; no hub copy is written or deleted");
            return false;
        }
    };
    let names: Vec<String> = links
        .iter()
        .filter_map(|l| l.metadata.name.clone())
        .collect();
    states.retain(|n, _| {
        let kept = names.contains(n);
        if !kept {
            let link = crate::metrics::HubLinkLabels { link: n.clone() };
            ctx.metrics.hub_last_sync.remove(&link);
            ctx.metrics.hub_credential_expiry.remove(&link);
        }
        kept
    });
    let own = ctx.settings.policy.own_namespace.as_deref();
    for link in links {
        let Some(name) = link.metadata.name.clone() else {
            continue;
        };
        let state = states.entry(name.clone()).or_default();
        let valid = LinkSettings::from_link(&link).is_ok();
        let token = match own {
            Some(ns) if valid => remote::read_token(member, ns, &link).await.ok(),
            _ => None,
        };
        track_expiry(ctx, &name, state, token.as_deref());
        let stale = state
            .follow
            .as_ref()
            .is_none_or(|f| Some(&f.token) != token.as_ref() || f.spec != link.spec);
        let mut due = state.next_full.is_none_or(|t| Instant::now() >= t);
        match token {
            Some(token) if stale => {
                state.follow = None;
                match Follow::start(deps, &link, &token) {
                    Ok(f) => {
                        state.follow = Some(f);
                        // The placed sources' watches start after the full read.
                        due = true;
                    }
                    Err(e) => tracing::debug!(link = %name, error = %e, "hub not watched"),
                }
            }
            Some(_) => {}
            // No token to watch with: the full read says why.
            None => state.follow = None,
        }
        if state
            .follow
            .as_ref()
            .is_some_and(|f| f.missed.swap(false, std::sync::atomic::Ordering::SeqCst))
        {
            due = true;
        }
        state.link = Some(link);
        if due {
            full_sync(ctx, interval, state, &names).await;
        }
    }
    true
}

/// Records when link `name`'s `token` expires (metric, status), and says once per token when
/// it is due for replacement (SPEC §14.3).
fn track_expiry(ctx: &Context, name: &str, state: &mut LinkState, token: Option<&str>) {
    use crate::hub::credential::{token_expiry, token_issued};
    let labels = crate::metrics::HubLinkLabels { link: name.into() };
    let now = token.and_then(|t| Some((token_expiry(t)?, token_issued(t))));
    match now {
        Some((expiry, _)) => {
            ctx.metrics
                .hub_credential_expiry
                .get_or_create(&labels)
                .set(expiry as f64);
        }
        None => {
            ctx.metrics.hub_credential_expiry.remove(&labels);
        }
    }
    if now != state.credential
        && let Some((expiry, issued)) = now
        && status::expires_soon(issued, expiry)
    {
        tracing::warn!(
            link = name,
            expiry,
            "the hub token expires soon: write a new one into the link's credential Secret"
        );
    }
    state.credential = now;
}

/// Reads `state`'s hub in full and converges its copies; writes the link's status, and
/// follows the placed sources read.
async fn full_sync(ctx: &Context, interval: Duration, state: &mut LinkState, names: &[String]) {
    let Some(link) = state.link.clone() else {
        return;
    };
    let name = link.metadata.name.clone().unwrap_or_default();
    state.next_full = Some(Instant::now() + interval);
    let result = sync_link(ctx, &link, names).await;
    let now = Timestamp::now();
    let status = match result {
        Ok((settings, read, reports)) => {
            state.failures = 0;
            if let Some(follow) = &state.follow {
                let cluster = &settings.cluster_name;
                let last = &mut state.reported;
                reports::report_to_hub(&follow.hub, &follow.token, cluster, &reports, last).await;
            }
            state.unreachable_since = None;
            state.last_sync = Some(now);
            ctx.metrics
                .hub_last_sync
                .get_or_create(&crate::metrics::HubLinkLabels { link: name.clone() })
                .set(now.as_millisecond() as f64 / 1000.0);
            let done = Synced::of(&read);
            if let Some(follow) = &mut state.follow {
                follow.follow_sources(read.sources.keys());
            }
            let placed = placed_status(&read.placement.rules);
            state.read = Some((settings, read));
            let mut s = status(
                state,
                "True",
                "HubRead",
                "the hub was read and its copies converged",
                &done,
            );
            // Kept while the hub is away: what explain judges a namespace by.
            s["placed"] = placed;
            s
        }
        Err(LinkError::Invalid(e)) => {
            let done = Synced::default();
            let mut s = status(state, "Unknown", "LinkInvalid", &e, &done);
            s["conditions"][1] = condition("Valid", "False", "LinkInvalid", &e, now);
            s
        }
        Err(LinkError::Hub(e)) => {
            tracing::warn!(link = %name, error = %e, "hub not read; its copies stay as they are");
            state.failures += 1;
            state.next_full = Some(Instant::now() + retry_after(state.failures, interval));
            let since = *state.unreachable_since.get_or_insert(now);
            let mut s = status(
                state,
                "False",
                e.reason(),
                &e.to_string(),
                &Synced::default(),
            );
            s["conditions"][0]["lastTransitionTime"] = json!(Time(since));
            s
        }
        Err(LinkError::Member(e)) => {
            tracing::warn!(link = %name, error = %e, "a hub's copies could not be converged; retried next round");
            return;
        }
    };
    write_status(ctx, &name, state, status).await;
}

/// What a link's full read came to.
#[derive(Debug, Default)]
struct Synced {
    placed: usize,
    refused: Vec<(String, String)>,
}

impl Synced {
    fn of(read: &HubRead) -> Self {
        Synced {
            placed: read.placement.rules.len(),
            refused: read
                .placement
                .refused
                .iter()
                .map(|r| (r.name.clone(), r.refusal.to_string()))
                .collect(),
        }
    }
}

/// The placed rules as `status.placed` lists them (the first [`MAX_PLACED_SOURCES`] by name).
fn placed_status(rules: &[crate::rules::Rule]) -> serde_json::Value {
    let mut placed: Vec<_> = rules.iter().filter_map(PlacedRuleStatus::of).collect();
    placed.sort_by(|a, b| a.name.cmp(&b.name));
    placed.truncate(MAX_PLACED_SOURCES);
    json!(placed)
}

enum LinkError {
    Invalid(String),
    Hub(HubError),
    Member(String),
}

/// Reads `link`'s hub in full and converges its copies; `names` are every link of this member
/// (the copies of the others are held as they are meanwhile). Returns what was read, and what
/// the member holds of each placed rule.
async fn sync_link(
    ctx: &Context,
    link: &HubLink,
    names: &[String],
) -> Result<(Arc<LinkSettings>, HubRead, Reports), LinkError> {
    let settings = LinkSettings::from_link(link).map_err(|e| LinkError::Invalid(e.to_string()))?;
    let namespace = ctx
        .settings
        .policy
        .own_namespace
        .as_deref()
        .ok_or_else(|| {
            LinkError::Invalid(
                "copyrator's own namespace is unknown: the credential Secret cannot be read".into(),
            )
        })?;
    let token = remote::read_token(ctx.cluster.client(), namespace, link)
        .await
        .map_err(LinkError::Hub)?;
    let hub = remote::hub_client(
        link,
        &token,
        error::HUB_TIMEOUT,
        crate::cluster::client::Transport::PerRequest,
    )
    .map_err(LinkError::Hub)?;
    let read = remote::read_hub(&hub, &settings)
        .await
        .map_err(LinkError::Hub)?;
    let settings = Arc::new(settings);
    let name = link.metadata.name.clone().unwrap_or_default();
    let reports = converge_read(ctx, &name, Arc::clone(&settings), &read, names)
        .await
        .map_err(LinkError::Member)?;
    Ok((settings, read, reports))
}

/// What the member holds of each rule its hub places on it, by rule name (SPEC §14.4).
type Reports = BTreeMap<String, crate::hub::report::RuleReport>;

/// Converges link `name`'s copies to `read` (a full read, maybe updated by events since);
/// returns what the member holds of each placed rule then.
async fn converge_read(
    ctx: &Context,
    name: &str,
    settings: Arc<LinkSettings>,
    read: &HubRead,
    names: &[String],
) -> Result<Reports, String> {
    let mut view = LinkView::new(name.to_string(), Ok(settings));
    view.placement = Some(Arc::clone(&read.placement));
    view.sources = read.sources.clone();
    let mut all = vec![view];
    // The other links' copies are not this read's: held as they are.
    all.extend(
        names
            .iter()
            .filter(|n| n.as_str() != name)
            .map(|n| LinkView::new(n.clone(), Err("not read in this round".into()))),
    );
    let hubs = Arc::new(Hubs {
        links_known: true,
        links: all,
    });
    converge::converge_link(ctx, hubs, name, read.contents.clone())
        .await
        .map(|outcomes| reports::member_reports(name, &read.placement, &outcomes))
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_full_read_is_retried_in_5_s_doubling_up_to_the_interval() {
        let interval = Duration::from_secs(300);
        let secs = |n| retry_after(n, interval).as_secs();
        assert_eq!([secs(1), secs(2), secs(3), secs(4)], [5, 10, 20, 40]);
        assert_eq!(secs(7), 300, "never longer than the interval");
        assert_eq!(secs(1_000), 300);
        assert_eq!(retry_after(3, Duration::from_secs(1)).as_secs(), 1);
    }
}
