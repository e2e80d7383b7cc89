//! The kinds `--copy-kinds` enables (SPEC §3.1), resolved through API discovery: the version
//! the API server prefers, the resource name, and whether the kind can be copied at all
//! (namespaced, and served with the verbs a copy needs). A kind that is not served yet (a CRD
//! installed after copyrator started) is looked for again every `--kind-retry-interval` (30 s); once resolved it is
//! registered ([`Kind::register`]) and its two watches start. A kind that stops being served
//! (its CRD deleted) is marked so: CopyRules naming it report it in their status.

use kube::{Client, discovery};

use crate::model::{Kind, not_copyable, split_name};

/// Verbs a kind must be served with for copyrator to copy it.
const VERBS: [&str; 6] = ["get", "list", "watch", "create", "update", "delete"];

/// A kind as `--copy-kinds` names it: `Kind` (core group) or `Kind.group`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KindName {
    pub group: String,
    pub kind: String,
}

impl std::fmt::Display for KindName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.kind)
        } else {
            write!(f, "{}.{}", self.kind, self.group)
        }
    }
}

/// Parses `--copy-kinds`. Secret and ConfigMap are always copied, whether listed or not; a
/// kind that is never copied ([`not_copyable`]) or a malformed name is an error.
pub fn parse(list: &[String]) -> Result<Vec<KindName>, String> {
    let mut out: Vec<KindName> = Vec::new();
    for entry in list.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        let (kind, group) = split_name(entry);
        if kind.is_empty() || !kind.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(format!(
                "--copy-kinds: {entry:?} is not a kind (Kind or Kind.group, e.g. NetworkPolicy.networking.k8s.io)"
            ));
        }
        if !group.is_empty() && !copyrator_core::selector::is_dns_subdomain(group) {
            return Err(format!("--copy-kinds: {group:?} is not an API group"));
        }
        if group.is_empty()
            && let Some(group) = group_of_built_in(kind)
        {
            return Err(format!(
                "--copy-kinds: {kind} is not in the core API group: give {kind}.{group} \
                 (a kind without a group names the core group, where no {kind} is served)"
            ));
        }
        if let Some(why) = not_copyable(group, kind) {
            return Err(format!("--copy-kinds: {why}"));
        }
        let name = KindName {
            group: group.to_string(),
            kind: kind.to_string(),
        };
        let built_in = Kind::lookup(group, kind).is_some_and(|k| k.is_consentable());
        if !built_in && !out.contains(&name) {
            out.push(name);
        }
    }
    Ok(out)
}

/// The API group of Kubernetes' built-in namespaced kinds outside the core group: a
/// `--copy-kinds` entry naming one without its group would match nothing, silently.
fn group_of_built_in(kind: &str) -> Option<&'static str> {
    const BUILT_IN: [(&str, &str); 16] = [
        ("NetworkPolicy", "networking.k8s.io"),
        ("Ingress", "networking.k8s.io"),
        ("Role", "rbac.authorization.k8s.io"),
        ("RoleBinding", "rbac.authorization.k8s.io"),
        ("Deployment", "apps"),
        ("StatefulSet", "apps"),
        ("DaemonSet", "apps"),
        ("ReplicaSet", "apps"),
        ("ControllerRevision", "apps"),
        ("Job", "batch"),
        ("CronJob", "batch"),
        ("PodDisruptionBudget", "policy"),
        ("HorizontalPodAutoscaler", "autoscaling"),
        ("Lease", "coordination.k8s.io"),
        ("EndpointSlice", "discovery.k8s.io"),
        ("CSIStorageCapacity", "storage.k8s.io"),
    ];
    BUILT_IN
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, group)| *group)
}

/// Why a kind could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum KindError {
    /// Not served (yet): looked for again.
    #[error("{0} is not served by the API server")]
    NotServed(KindName),
    /// Served, but copyrator cannot copy it: never looked for again.
    #[error("{0}")]
    NotCopyable(String),
    #[error("discovery of {name} failed: {source}")]
    Discovery {
        name: KindName,
        #[source]
        source: kube::Error,
    },
}

/// Looks `name` up through discovery and registers it.
pub async fn resolve(client: &Client, name: &KindName) -> Result<Kind, KindError> {
    let group = match discovery::group(client, &name.group).await {
        Ok(group) => group,
        Err(kube::Error::Discovery(_)) => return Err(KindError::NotServed(name.clone())),
        Err(kube::Error::Api(s)) if s.code == 404 => {
            return Err(KindError::NotServed(name.clone()));
        }
        Err(source) => {
            return Err(KindError::Discovery {
                name: name.clone(),
                source,
            });
        }
    };
    let Some((resource, caps)) = group.recommended_kind(&name.kind) else {
        return Err(KindError::NotServed(name.clone()));
    };
    if caps.scope != discovery::Scope::Namespaced {
        return Err(KindError::NotCopyable(format!(
            "{name} is cluster-scoped: copyrator copies objects between namespaces"
        )));
    }
    let missing: Vec<&str> = VERBS
        .into_iter()
        .filter(|v| !caps.supports_operation(v))
        .collect();
    if !missing.is_empty() {
        return Err(KindError::NotCopyable(format!(
            "{name} is not served with the verbs a copy needs ({})",
            missing.join(", ")
        )));
    }
    Kind::register(
        &resource.group,
        &resource.version,
        &resource.kind,
        &resource.plural,
    )
    .map_err(|e| KindError::NotCopyable(format!("{name}: {e}")))
}

/// For the commands that reason like `serve` (`explain`, `migrate`): registers the kinds
/// `--copy-kinds` names and those the cluster's CopyRules name, as far as discovery finds
/// them; what it cannot resolve is left out (a CopyRule of such a kind is shown invalid).
pub async fn register_for_cli(client: &Client, flags: &[String]) {
    let mut names = parse(flags).unwrap_or_default();
    let rules: kube::Api<crate::copyrule::CopyRule> = kube::Api::all(client.clone());
    if let Ok(list) = rules.list(&Default::default()).await {
        for cr in list {
            let name = KindName {
                group: cr.spec.group().to_string(),
                kind: cr.spec.kind.clone(),
            };
            if Kind::lookup(&name.group, &name.kind).is_none() && !names.contains(&name) {
                names.push(name);
            }
        }
    }
    for name in names {
        if let Err(e) = resolve(client, &name).await {
            eprintln!("note: {e}");
        }
    }
}

/// For `manifests webhooks`, which asks no cluster: registers the kinds of `--copy-kinds`
/// written `Kind[.group][=resource]`. The resource (the plural) is derived from the kind as
/// Kubernetes does for regular names (`NetworkPolicy` -> `networkpolicies`); a custom resource
/// whose plural is irregular names it after `=`. The version is left open (`*` in the
/// webhook rules of a named group; `v1` for the core group), as `serve` matches every version
/// of a kind (`matchPolicy: Equivalent`).
pub fn register_offline(list: &[String]) -> Result<Vec<Kind>, String> {
    let mut kinds = Vec::new();
    for entry in list.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
        let (name, resource) = match entry.split_once('=') {
            Some((name, resource)) => (name, Some(resource)),
            None => (entry, None),
        };
        let Some(parsed) = parse(&[name.to_string()])?.into_iter().next() else {
            continue; // Secret or ConfigMap: always there.
        };
        let plural = match resource {
            Some(r) if copyrator_core::selector::is_dns_label(r) => r.to_string(),
            Some(r) => {
                return Err(format!(
                    "--copy-kinds: {r:?} is not a resource name (the plural, e.g. networkpolicies)"
                ));
            }
            None => {
                kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
                    &parsed.group,
                    "v1",
                    &parsed.kind,
                ))
                .plural
            }
        };
        let kind = Kind::register(&parsed.group, "v1", &parsed.kind, &plural)
            .map_err(|e| format!("--copy-kinds: {parsed}: {e}"))?;
        kinds.push(kind);
    }
    Ok(kinds)
}

/// Whether `kind` is still served (its group and version list its resource).
pub async fn served(client: &Client, kind: Kind) -> Result<bool, kube::Error> {
    let gv = kube::core::GroupVersion::gv(kind.group(), kind.version());
    match discovery::pinned_group(client, &gv).await {
        Ok(group) => Ok(group
            .versioned_resources(kind.version())
            .iter()
            .any(|(r, _)| r.kind == kind.as_str())),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(kube::Error::Discovery(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_kinds_name_kinds_and_groups_and_refuse_what_is_never_copied() {
        let list = |s: &str| s.split(',').map(String::from).collect::<Vec<_>>();
        let kinds = parse(&list(
            "Secret, ConfigMap,NetworkPolicy.networking.k8s.io,LimitRange,LimitRange,",
        ))
        .unwrap();
        assert_eq!(
            kinds.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["NetworkPolicy.networking.k8s.io", "LimitRange"]
        );
        assert!(parse(&list("Pod")).unwrap_err().contains("runs code"));
        assert!(
            parse(&list("Lease.coordination.k8s.io"))
                .unwrap_err()
                .contains("never copied")
        );
        assert!(parse(&list("Net/Policy")).is_err());
        assert!(parse(&list("X.Not_A_Group")).is_err());
    }

    #[test]
    fn manifests_register_kinds_with_derived_or_given_plurals() {
        let list = |s: &str| s.split(',').map(String::from).collect::<Vec<_>>();
        let kinds = register_offline(&list(
            "Secret,NetworkPolicy.networking.k8s.io,ResourceQuota,Octopus.example.com=octopi",
        ))
        .unwrap();
        assert_eq!(
            kinds
                .iter()
                .map(|k| (k.group(), k.plural()))
                .collect::<Vec<_>>(),
            [
                ("networking.k8s.io", "networkpolicies"),
                ("", "resourcequotas"),
                ("example.com", "octopi"),
            ]
        );
        assert!(register_offline(&list("Pod")).is_err());
        assert!(
            register_offline(&list("Widget.example.com=Not_Plural"))
                .unwrap_err()
                .contains("not a resource name")
        );
    }
}
