//! The member side of copies across clusters (SPEC §14): every `--hub-sync-interval`, the
//! leader reads each HubLink, reads its hub with the token in the link's Secret, and makes the
//! link's copies equal to what the hub places here. A hub that cannot be read in full changes
//! nothing here: its copies stay as last synced, and the link's `Reachable` condition is False
//! since the first failure.

mod converge;
mod members;
mod remote;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use kube::{
    Api,
    api::{ListParams, Patch, PatchParams},
};
use serde_json::json;
use tokio::sync::watch;

use crate::{
    hub::{HubLink, Hubs, LinkSettings, LinkView},
    sync::context::Context,
};

pub use members::grant_members;
pub use remote::HubError;

/// The hub side (SPEC §14.1): every `interval`, while this replica leads, each member's read
/// access is made equal to what the CopyRules place on it (`members.rs`).
pub async fn run_hub(
    ctx: Arc<Context>,
    interval: Duration,
    members_namespace: String,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        if *ctx.leading.borrow()
            && let Err(e) = grant_members(ctx.cluster.client(), &members_namespace).await
        {
            tracing::warn!(error = %e, "members' hub access not updated; retried next round");
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// What the member remembers of a link between rounds, for its status.
#[derive(Debug, Default)]
struct LinkState {
    /// Since when the hub has not been read in full.
    unreachable_since: Option<Timestamp>,
    /// When it last was, and its copies converged.
    last_sync: Option<Timestamp>,
    /// The status last written, but for `lastSyncTime`: written again when it changes.
    written: Option<serde_json::Value>,
    /// When `lastSyncTime` was last written.
    written_at: Option<Timestamp>,
}

/// How often `lastSyncTime` is written while nothing else in the status changes.
const SYNC_TIME_EVERY: Duration = Duration::from_secs(30);

/// Runs rounds every `interval` while this replica leads, until shutdown.
pub async fn run(ctx: Arc<Context>, interval: Duration, mut shutdown: watch::Receiver<bool>) {
    let mut states: BTreeMap<String, LinkState> = BTreeMap::new();
    loop {
        if *ctx.leading.borrow() {
            round(&ctx, &mut states).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// One round over every link.
async fn round(ctx: &Context, states: &mut BTreeMap<String, LinkState>) {
    let member = ctx.cluster.client();
    let links = match Api::<HubLink>::all(member.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(l) => l.items,
        Err(e) => {
            tracing::debug!(error = %e, "HubLinks unreadable; no hub copy is written or deleted");
            return;
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
        }
        kept
    });
    for link in &links {
        let Some(name) = link.metadata.name.clone() else {
            continue;
        };
        let state = states.entry(name.clone()).or_default();
        let result = sync_link(ctx, link, &names).await;
        let now = Timestamp::now();
        let status = match result {
            Ok(done) => {
                state.unreachable_since = None;
                state.last_sync = Some(now);
                ctx.metrics
                    .hub_last_sync
                    .get_or_create(&crate::metrics::HubLinkLabels { link: name.clone() })
                    .set(now.as_millisecond() as f64 / 1000.0);
                status(
                    state,
                    "True",
                    "HubRead",
                    "the hub was read and its copies converged",
                    &done,
                )
            }
            Err(LinkError::Invalid(e)) => {
                let done = Synced::default();
                let mut s = status(state, "Unknown", "LinkInvalid", &e, &done);
                s["conditions"][1] = condition("Valid", "False", "LinkInvalid", &e, now);
                s
            }
            Err(LinkError::Hub(e)) => {
                tracing::warn!(link = %name, error = %e, "hub not read; its copies stay as they are");
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
                continue;
            }
        };
        write_status(ctx, &name, state, status).await;
    }
}

/// What a link's round came to.
#[derive(Debug, Default)]
struct Synced {
    placed: usize,
    refused: Vec<(String, String)>,
}

enum LinkError {
    Invalid(String),
    Hub(HubError),
    Member(String),
}

/// Reads `link`'s hub and converges its copies; `names` are every link of this member (the
/// copies of the others are held as they are meanwhile).
async fn sync_link(ctx: &Context, link: &HubLink, names: &[String]) -> Result<Synced, LinkError> {
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
    let hub = remote::hub_client(link, &token).map_err(LinkError::Hub)?;
    let read = remote::read_hub(&hub, &settings)
        .await
        .map_err(LinkError::Hub)?;
    let synced = Synced {
        placed: read.placement.rules.len(),
        refused: read
            .placement
            .refused
            .iter()
            .map(|r| (r.name.clone(), r.refusal.to_string()))
            .collect(),
    };
    let mut view = LinkView::new(settings.name.clone(), Ok(Arc::new(settings)));
    view.placement = Some(Arc::new(read.placement));
    view.sources = read.sources;
    let mut all = vec![view];
    // The other links' copies are not this round's: held as they are.
    all.extend(
        names
            .iter()
            .filter(|n| Some(n.as_str()) != link.metadata.name.as_deref())
            .map(|n| LinkView::new(n.clone(), Err("not read in this round".into()))),
    );
    let hubs = Arc::new(Hubs {
        links_known: true,
        links: all,
    });
    let name = link.metadata.name.clone().unwrap_or_default();
    converge::converge_link(ctx, hubs, &name, read.contents)
        .await
        .map_err(|e| LinkError::Member(e.to_string()))?;
    Ok(synced)
}

fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    at: Timestamp,
) -> serde_json::Value {
    json!({
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message.chars().take(1000).collect::<String>(),
        "lastTransitionTime": Time(at),
    })
}

/// The link's status after a round (`lastSyncTime` apart).
fn status(
    state: &LinkState,
    reachable: &str,
    reason: &str,
    message: &str,
    done: &Synced,
) -> serde_json::Value {
    let at = state.last_sync.unwrap_or_else(Timestamp::now);
    json!({
        "conditions": [
            condition("Reachable", reachable, reason, message, at),
            condition("Valid", "True", "LinkValid", "the link's settings are valid", at),
        ],
        "placedRules": done.placed,
        "refusedRules": done
            .refused
            .iter()
            .map(|(name, reason)| json!({"name": name, "reason": reason}))
            .collect::<Vec<_>>(),
    })
}

/// Writes the link's status when it changed (or `lastSyncTime` is due).
async fn write_status(
    ctx: &Context,
    name: &str,
    state: &mut LinkState,
    mut status: serde_json::Value,
) {
    let now = Timestamp::now();
    let due = state
        .written_at
        .is_none_or(|t| now.duration_since(t).as_secs() >= SYNC_TIME_EVERY.as_secs() as i64);
    // A condition's time is when it last changed, not when it was last seen.
    if let Some(old) = &state.written {
        for i in 0..2 {
            if old["conditions"][i]["status"] == status["conditions"][i]["status"]
                && old["conditions"][i]["reason"] == status["conditions"][i]["reason"]
            {
                status["conditions"][i]["lastTransitionTime"] =
                    old["conditions"][i]["lastTransitionTime"].clone();
            }
        }
    }
    if state.written.as_ref() == Some(&status) && !due {
        return;
    }
    let mut body = status.clone();
    if let Some(t) = state.last_sync {
        body["lastSyncTime"] = json!(Time(t));
    }
    let api = Api::<HubLink>::all(ctx.cluster.client().clone());
    let patch = json!({ "status": body });
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            state.written = Some(status);
            state.written_at = Some(now);
        }
        Err(e) => tracing::debug!(link = %name, error = %e, "HubLink status not written"),
    }
}
