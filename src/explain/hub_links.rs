//! What a member's HubLinks say of their hubs (SPEC §14), as `explain` notes: a hub unreachable
//! since when (its copies stay as last synced), the hub rules a link's ceiling refuses, and
//! why a namespace holds no copy of a rule placed here (the ceiling, the rule's selection, a
//! tenant's source without consent). Read from the links' spec and status, as the member's
//! copyrator wrote it, and the member's namespace; the hub is not read.

use kube::{Api, Client, api::ListParams};

use crate::{
    hub::{HubLink, PlacedRuleStatus, hub_namespace},
    model::{Kind, NamespaceInfo, ObjectKey},
    selector::Selector,
    tenancy::accepts_from,
};

/// Every HubLink; none where the HubLink CRD is not installed or not readable.
pub async fn links(client: &Client) -> Vec<HubLink> {
    Api::<HubLink>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// Why a namespace holds no copy of a placed rule, as the member's planner decides it: the
/// rule's own selection first, then the link's ceiling, then consent (`World::targeting`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Absent {
    /// The rule excludes the namespace by name.
    Excluded,
    /// The namespace does not carry the rule's labels, nor is it named by the rule.
    NotConsenting,
    /// The link's ceiling (its namespaceSelector) does not let the namespace receive.
    BeyondCeiling,
    /// The source's hub namespace is not trusted by the link, and the namespace's
    /// copyrator.io/accept-from does not name `<link>/<namespace>`.
    NoTenantConsent(String),
    /// Nothing refuses it: the link's next sync writes the copy.
    Due,
}

/// Why namespace `ns` holds no copy of `rule`, placed by the hub of link `link` whose ceiling
/// receives into namespaces matching `ceiling`.
pub fn why_absent(
    link: &str,
    ceiling: &Selector,
    rule: &PlacedRuleStatus,
    ns: &NamespaceInfo,
) -> Absent {
    if rule.exclude_namespaces.contains(&ns.name) {
        return Absent::Excluded;
    }
    let selected = rule.namespaces.contains(&ns.name)
        || rule
            .namespace_selector
            .as_deref()
            .and_then(|s| Selector::parse(s).ok())
            .is_some_and(|s| s.matches(&ns.labels));
    if !selected {
        return Absent::NotConsenting;
    }
    if !ceiling.matches(&ns.labels) {
        return Absent::BeyondCeiling;
    }
    let from = rule
        .source
        .split_once('/')
        .map_or_else(String::new, |(hub_ns, _)| hub_namespace(link, hub_ns));
    if !rule.trusted && !accepts_from(ns, &from) {
        return Absent::NoTenantConsent(from);
    }
    Absent::Due
}

/// For namespace `ns`, why each rule placed by `links` has no copy there (`present`: whether
/// a copy is at a key).
pub fn absent_notes(
    links: &[HubLink],
    ns: &NamespaceInfo,
    present: impl Fn(&ObjectKey) -> bool,
) -> Vec<String> {
    let mut out = Vec::new();
    for link in links {
        // The ceiling's selector alone: a link invalid otherwise is said by its own notes.
        let ceiling = Selector::from_label_selector(&link.spec.ceiling.namespace_selector);
        let (Some(name), Ok(ceiling), Some(status)) =
            (link.metadata.name.as_ref(), ceiling, &link.status)
        else {
            continue;
        };
        for rule in &status.placed {
            let Some(kind) = Kind::from_name(&rule.kind) else {
                continue;
            };
            if present(&ObjectKey::new(
                kind,
                ns.name.clone(),
                rule.target_name.clone(),
            )) {
                continue;
            }
            let why = match why_absent(name, &ceiling, rule, ns) {
                Absent::Excluded => "not selected: the hub rule excludes it".to_string(),
                Absent::NotConsenting => format!(
                    "namespace not consenting: it does not match the hub rule's \
                     namespaceSelector ({}) and is not among its namespaces",
                    rule.namespace_selector.as_deref().unwrap_or("none")
                ),
                Absent::BeyondCeiling => format!(
                    "refused by the link's ceiling: its namespaceSelector ({}) does not \
                     match the namespace",
                    ceiling
                ),
                Absent::NoTenantConsent(from) => format!(
                    "tenant source without consent: its hub namespace is not among the \
                     link's trustedSourceNamespaces and the namespace's \
                     copyrator.io/accept-from does not name {from}"
                ),
                Absent::Due => "placed here: the link's next sync writes it".to_string(),
            };
            out.push(format!(
                "HubLink {name}: no copy of hub CopyRule {} ({} {}) in {}: {why}",
                rule.name, rule.kind, rule.source, ns.name
            ));
        }
    }
    out
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

    fn ns(labels: &[(&str, &str)], accept_from: Option<&str>) -> NamespaceInfo {
        NamespaceInfo {
            name: "team-a".into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<std::collections::BTreeMap<_, _>>()
                .into(),
            accept_from: accept_from.map(str::to_string),
            resource_version: String::new(),
            terminating: false,
        }
    }

    fn placed(trusted: bool) -> PlacedRuleStatus {
        PlacedRuleStatus {
            name: "registry".into(),
            kind: "Secret".into(),
            source: "tenant/cred".into(),
            target_name: "cred".into(),
            trusted,
            namespace_selector: Some("registry=on".into()),
            ..Default::default()
        }
    }

    /// The consent matrix of a hub copy (SPEC §14.2): the rule's selection, then the link's
    /// ceiling, then a tenant source's consent, in the planner's order.
    #[test]
    fn a_missing_hub_copy_is_explained_by_selection_ceiling_and_consent() {
        let ceiling = Selector::parse("hub=allowed").unwrap();
        let why =
            |rule: &PlacedRuleStatus, ns: &NamespaceInfo| why_absent("hub-a", &ceiling, rule, ns);
        let both = [("registry", "on"), ("hub", "allowed")];
        assert_eq!(why(&placed(true), &ns(&both, None)), Absent::Due);
        assert_eq!(
            why(&placed(true), &ns(&[("hub", "allowed")], None)),
            Absent::NotConsenting,
            "unlabelled for the rule"
        );
        assert_eq!(
            why(&placed(true), &ns(&[("registry", "on")], None)),
            Absent::BeyondCeiling,
            "outside the ceiling"
        );
        assert_eq!(
            why(&placed(true), &ns(&[], None)),
            Absent::NotConsenting,
            "the rule's own selection is said first, as the planner decides"
        );
        assert_eq!(
            why(&placed(false), &ns(&both, None)),
            Absent::NoTenantConsent("hub-a/tenant".into())
        );
        assert_eq!(
            why(&placed(false), &ns(&both, Some("other/*"))),
            Absent::NoTenantConsent("hub-a/tenant".into()),
            "consent to another link's namespaces is not consent"
        );
        assert_eq!(
            why(&placed(false), &ns(&both, Some("hub-a/tenant"))),
            Absent::Due
        );
        let mut listed = placed(true);
        listed.namespace_selector = None;
        listed.namespaces = vec!["team-a".into()];
        assert_eq!(why(&listed, &ns(&[("hub", "allowed")], None)), Absent::Due);
        listed.exclude_namespaces = vec!["team-a".into()];
        assert_eq!(
            why(&listed, &ns(&[("hub", "allowed")], None)),
            Absent::Excluded
        );
    }

    #[test]
    fn a_present_copy_needs_no_explaining_and_a_missing_one_names_its_reason() {
        let link: HubLink = serde_json::from_value(serde_json::json!({
            "apiVersion": "copyrator.io/v1alpha1", "kind": "HubLink",
            "metadata": {"name": "hub-a"},
            "spec": {"server": "https://hub:6443", "caBundle": "", "clusterName": "m",
                     "credentialSecret": {"name": "t"},
                     "ceiling": {"sourceNamespaces": ["tenant"],
                                 "namespaceSelector": {"matchLabels": {"hub": "allowed"}}}},
            "status": {"placed": [serde_json::to_value(placed(false)).unwrap()]},
        }))
        .unwrap();
        let team = ns(&[("registry", "on"), ("hub", "allowed")], None);
        let notes = absent_notes(std::slice::from_ref(&link), &team, |_| false);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("no copy of hub CopyRule registry (Secret tenant/cred) in team-a")
                && notes[0].contains("tenant source without consent")
                && notes[0].contains("hub-a/tenant"),
            "{notes:?}"
        );
        let outside = ns(&[("registry", "on")], None);
        let notes = absent_notes(std::slice::from_ref(&link), &outside, |_| false);
        assert!(
            notes[0].contains("refused by the link's ceiling"),
            "{notes:?}"
        );
        assert!(absent_notes(std::slice::from_ref(&link), &team, |_| true).is_empty());
    }

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
