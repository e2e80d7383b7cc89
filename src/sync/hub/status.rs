//! The HubLink's status as the member's sync writes it (SPEC §14.3): `Reachable` since the
//! first failure, `Valid`, the placed and refused rules; `lastSyncTime` at most every
//! [`SYNC_TIME_EVERY`] while nothing else changes.

use std::time::Duration;

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::json;

use super::{LinkState, Synced};
use crate::{hub::HubLink, sync::context::Context};

/// How often `lastSyncTime` is written while nothing else in the status changes.
const SYNC_TIME_EVERY: Duration = Duration::from_secs(30);

pub(super) fn condition(
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
pub(super) fn status(
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
            credential_condition(state.credential, at),
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
pub(super) async fn write_status(
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

/// The hub's CopyRules watch failed with `why`: its connection went silent (its PINGs
/// unanswered) or the hub refused it. The link is unreachable from now, without waiting for a
/// full read to be due (SPEC §14.3), and one is due at the next check, which confirms it or
/// says the hub is back; the copies stay as they are.
pub(super) async fn watch_failed(ctx: &Context, state: &mut LinkState, why: &str) {
    if std::mem::replace(&mut state.watch_down, true) {
        return;
    }
    let Some(name) = state.link.as_ref().and_then(|l| l.metadata.name.clone()) else {
        return;
    };
    tracing::warn!(link = %name, error = %why, "the hub's watch failed; its copies stay as they are");
    state.next_full = Some(tokio::time::Instant::now());
    if state.unreachable_since.is_some() {
        return;
    }
    let now = Timestamp::now();
    state.unreachable_since = Some(now);
    let message = format!("the hub's watch failed: {why}");
    let mut s = status(
        state,
        "False",
        "HubUnreachable",
        &message,
        &Synced::default(),
    );
    s["conditions"][0]["lastTransitionTime"] = json!(Time(now));
    write_status(ctx, &name, state, s).await;
}

/// A token left with less than this is due for replacement, whatever its lifetime.
const EXPIRY_FLOOR_SECONDS: i64 = 120;

/// Whether a token expiring at `expiry` (issued at `issued`) is due for replacement now.
pub(super) fn expires_soon(issued: Option<i64>, expiry: i64) -> bool {
    let now = Timestamp::now().as_second();
    crate::hub::credential::expires_soon(issued, expiry, now, EXPIRY_FLOOR_SECONDS)
}

/// `CredentialExpiring`: True once the token is due for replacement (the last fifth of its
/// life, or its last two minutes), before the hub refuses it.
fn credential_condition(
    credential: Option<(i64, Option<i64>)>,
    at: Timestamp,
) -> serde_json::Value {
    match credential {
        Some((expiry, issued)) => {
            let when = Timestamp::from_second(expiry)
                .map(|t| t.to_string())
                .unwrap_or_else(|_| expiry.to_string());
            if expires_soon(issued, expiry) {
                let message = format!(
                    "the token expires at {when}: write a new one into the credential Secret"
                );
                condition(
                    "CredentialExpiring",
                    "True",
                    "TokenExpiresSoon",
                    &message,
                    at,
                )
            } else {
                let message = format!("the token expires at {when}");
                condition("CredentialExpiring", "False", "TokenValid", &message, at)
            }
        }
        None => condition(
            "CredentialExpiring",
            "Unknown",
            "ExpiryUnknown",
            "the token does not say when it expires",
            at,
        ),
    }
}
