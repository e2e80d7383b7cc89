//! What a member's HubLinks say of their hubs (SPEC §14), as `explain` notes: a hub unreachable
//! since when (its copies stay as last synced), and the hub rules a link's ceiling refuses.
//! Read from the links' status, as the member's copyrator wrote it; the hub is not read.

use kube::{Api, Client, api::ListParams};

use crate::hub::HubLink;

/// The notes of every HubLink; none where the HubLink CRD is not installed or not readable.
pub async fn notes(client: &Client) -> Vec<String> {
    match Api::<HubLink>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(links) => links.items.iter().flat_map(link_notes).collect(),
        Err(_) => Vec::new(),
    }
}

/// What `link`'s status says that a reader of `explain` needs.
pub fn link_notes(link: &HubLink) -> Vec<String> {
    let name = link.metadata.name.as_deref().unwrap_or_default();
    let Some(status) = &link.status else {
        return vec![format!(
            "HubLink {name} has no status yet: its hub was not read"
        )];
    };
    let mut out = Vec::new();
    if let Some(c) = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Reachable" && c.status == "False")
    {
        out.push(format!(
            "HubLink {name}: hub unreachable since {} ({}: {}); its copies stay as last synced",
            c.last_transition_time.0, c.reason, c.message
        ));
    }
    for refused in &status.refused_rules {
        out.push(format!(
            "HubLink {name} refuses hub CopyRule {}: {}",
            refused.name, refused.reason
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_hub_and_refused_rules_are_said_and_a_healthy_link_is_not() {
        let link = |status: serde_json::Value| -> HubLink {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "copyrator.io/v1alpha1", "kind": "HubLink",
                "metadata": {"name": "hub-a"},
                "spec": {"server": "https://hub:6443", "caBundle": "", "clusterName": "m",
                         "credentialSecret": {"name": "t"},
                         "ceiling": {"sourceNamespaces": ["platform"], "namespaceSelector": {}}},
                "status": status,
            }))
            .unwrap()
        };
        let condition = |status: &str| {
            serde_json::json!({
            "type": "Reachable", "status": status, "reason": "HubUnreachable",
            "message": "timed out", "lastTransitionTime": "2026-11-28T05:00:00Z"})
        };
        assert!(
            link_notes(&link(
                serde_json::json!({"conditions": [condition("True")]})
            ))
            .is_empty()
        );
        let notes = link_notes(&link(serde_json::json!({
            "conditions": [condition("False")],
            "refusedRules": [{"name": "elsewhere", "reason": "hub namespace other is beyond the ceiling"}],
        })));
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            notes[0].contains("hub unreachable since 2026-11-28T05:00:00Z"),
            "{notes:?}"
        );
        assert!(
            notes[1].contains("refuses hub CopyRule elsewhere: hub namespace other"),
            "{notes:?}"
        );
    }
}
