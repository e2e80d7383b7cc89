//! Events about CopyRules, as a user finds them: they live in `kube-system` (SPEC §9.5), since
//! they name target namespaces.

use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;

use super::TestEnv;

/// Where Events about CopyRules live (SPEC §9.5).
pub const RULE_EVENTS: &str = "kube-system";

/// A predicate for the waits: an Event with `reason` about CopyRule `rule`.
pub fn about_rule(rule: &str, reason: &str) -> impl Fn(&Event) -> bool + use<> {
    let (rule, reason) = (rule.to_string(), reason.to_string());
    move |e| {
        e.regarding.as_ref().is_some_and(|r| {
            r.kind.as_deref() == Some("CopyRule") && r.name.as_deref() == Some(rule.as_str())
        }) && e.reason.as_deref() == Some(reason.as_str())
    }
}

/// The Events with `reason` about CopyRule `rule`, now.
pub async fn rule_events(env: &TestEnv, rule: &str, reason: &str) -> Vec<Event> {
    env.api::<Event>(RULE_EVENTS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(about_rule(rule, reason))
        .collect()
}
