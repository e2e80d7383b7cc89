//! What a copy of an RBAC object may grant (SPEC §9.10). The API server lets a client create
//! a RoleBinding when it may `bind` the role *or already holds every permission in it*, and a
//! Role when it may `escalate` *or holds every permission in it*; copyrator holds every verb on
//! what it copies, in every namespace. So RBAC alone does not keep copyrator from handing out
//! what it holds: the planner does, by three rules that do not depend on what the API server
//! would allow.
//!
//! - A copied RoleBinding's `roleRef` is a ClusterRole on `--bind-cluster-roles` or a Role on
//!   `--bind-roles`; a copied Role's name is on `--escalate-roles` (the chart's `rbac` lists).
//!   Empty lists: no RBAC copy at all.
//! - The source lives where only administrators write: a trusted namespace
//!   (`--trusted-namespaces`). A Role's rules, and a binding's subjects, are what the source
//!   holds; only who may write there decides them.
//! - Only a CopyRule naming its source asks for an RBAC copy (never an inline rule or a
//!   `sourceSelector`, [`crate::rules`]); its author's right to grant it is checked when the
//!   rule is written (a SubjectAccessReview at admission).

use std::collections::BTreeSet;

use crate::{
    model::{Kind, Payload, kind_table::Grants},
    tenancy::TrustPolicy,
};

/// The roles copies may bind, and the Roles copies may be (see the module documentation).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GrantPolicy {
    /// `--bind-cluster-roles`: ClusterRoles a copied RoleBinding may reference.
    pub bind_cluster_roles: BTreeSet<String>,
    /// `--bind-roles`: Roles (by name, in the copy's namespace) a copied RoleBinding may
    /// reference.
    pub bind_roles: BTreeSet<String>,
    /// `--escalate-roles`: the names a copied Role may have.
    pub roles: BTreeSet<String>,
}

/// Why an RBAC copy is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GrantRefused {
    /// A RoleBinding's `roleRef` names a role that is not on the lists.
    RoleNotListed { kind: String, name: String },
    /// A Role whose name is not on `--escalate-roles`.
    RoleNameNotListed { name: String },
    /// A RoleBinding without a `roleRef` that names a Role or ClusterRole.
    NoRoleRef,
    /// The source's namespace is not trusted: RBAC copies come only from where only
    /// administrators write.
    SourceNotTrusted { namespace: String },
}

impl std::fmt::Display for GrantRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GrantRefused::RoleNotListed { kind, name } => {
                let flag = if kind == "ClusterRole" {
                    "--bind-cluster-roles (Helm value rbac.bindClusterRoles)"
                } else {
                    "--bind-roles (Helm value rbac.bindRoles)"
                };
                write!(
                    f,
                    "it binds {kind} {name}, which is not on {flag}: copyrator binds only the roles its installer listed"
                )
            }
            GrantRefused::RoleNameNotListed { name } => write!(
                f,
                "a Role named {name} is not on --escalate-roles (Helm value rbac.escalateRoles): copyrator writes only the Roles its installer listed"
            ),
            GrantRefused::NoRoleRef => {
                f.write_str("its roleRef names no Role or ClusterRole copyrator can judge")
            }
            GrantRefused::SourceNotTrusted { namespace } => write!(
                f,
                "its source's namespace {namespace} is not trusted (--trusted-namespaces): RBAC objects are copied only from namespaces where only administrators write"
            ),
        }
    }
}

/// Judges a copy of `kind` named `name`, made from `payload` of a source in
/// `source_namespace` (`None`: the CopyRule itself is the source, a template, SPEC §3.3; an
/// administrator's object) (see the module documentation). Kinds that grant nothing pass.
pub fn judge(
    kind: Kind,
    name: &str,
    source_namespace: Option<&str>,
    payload: &Payload,
    grants: &GrantPolicy,
    trust: &TrustPolicy,
) -> Result<(), GrantRefused> {
    let Some(what) = kind.facts().grants else {
        return Ok(());
    };
    if let Some(namespace) = source_namespace
        && !trust.is_trusted(namespace)
    {
        return Err(GrantRefused::SourceNotTrusted {
            namespace: namespace.to_string(),
        });
    }
    match what {
        Grants::Role if grants.roles.contains(name) => Ok(()),
        Grants::Role => Err(GrantRefused::RoleNameNotListed {
            name: name.to_string(),
        }),
        Grants::Binding => {
            let (role_kind, role) = role_ref(payload).ok_or(GrantRefused::NoRoleRef)?;
            let listed = match role_kind {
                "ClusterRole" => &grants.bind_cluster_roles,
                "Role" => &grants.bind_roles,
                _ => return Err(GrantRefused::NoRoleRef),
            };
            if listed.contains(role) {
                Ok(())
            } else {
                Err(GrantRefused::RoleNotListed {
                    kind: role_kind.to_string(),
                    name: role.to_string(),
                })
            }
        }
    }
}

/// A RoleBinding's `roleRef`: the role's kind and name, of the RBAC API group.
pub fn role_ref(payload: &Payload) -> Option<(&str, &str)> {
    let r = payload.fields.get("roleRef")?;
    let group = r.get("apiGroup").and_then(|g| g.as_str()).unwrap_or("");
    if group != "rbac.authorization.k8s.io" {
        return None;
    }
    Some((r.get("kind")?.as_str()?, r.get("name")?.as_str()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rbac(kind: &str) -> Kind {
        let plural = format!("{}s", kind.to_lowercase());
        Kind::register("rbac.authorization.k8s.io", "v1", kind, &plural).unwrap()
    }

    fn binding(kind: &str, name: &str) -> Payload {
        serde_json::from_value(json!({
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
            "subjects": [{"kind": "Group", "name": "team-a"}]
        }))
        .unwrap()
    }

    fn policy(cluster_roles: &[&str], roles: &[&str], escalate: &[&str]) -> GrantPolicy {
        let set = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        GrantPolicy {
            bind_cluster_roles: set(cluster_roles),
            bind_roles: set(roles),
            roles: set(escalate),
        }
    }

    fn trusted() -> TrustPolicy {
        TrustPolicy {
            trusted_namespaces: crate::tenancy::NamespacePatterns::parse("platform").unwrap(),
        }
    }

    #[test]
    fn a_binding_is_copied_only_to_a_role_listed_for_its_kind() {
        let rb = rbac("RoleBinding");
        let judge =
            |p: &Payload, g: &GrantPolicy| judge(rb, "b", Some("platform"), p, g, &trusted());
        let view = binding("ClusterRole", "view");
        assert_eq!(judge(&view, &policy(&["view"], &[], &[])), Ok(()));
        assert_eq!(
            judge(
                &binding("ClusterRole", "secret-reader"),
                &policy(&["view"], &[], &[])
            ),
            Err(GrantRefused::RoleNotListed {
                kind: "ClusterRole".into(),
                name: "secret-reader".into()
            })
        );
        // A Role of the listed ClusterRole's name is another role.
        assert!(judge(&binding("Role", "view"), &policy(&["view"], &[], &[])).is_err());
        assert_eq!(
            judge(&binding("Role", "app"), &policy(&[], &["app"], &[])),
            Ok(())
        );
        // Empty lists: no binding at all.
        assert!(judge(&view, &GrantPolicy::default()).is_err());
        // A roleRef of another group, or none, is judged as no role at all.
        let odd: Payload = serde_json::from_value(
            json!({"roleRef": {"apiGroup": "example.com", "kind": "ClusterRole", "name": "view"}}),
        )
        .unwrap();
        assert_eq!(
            judge(&odd, &policy(&["view"], &[], &[])),
            Err(GrantRefused::NoRoleRef)
        );
        assert_eq!(
            judge(&Payload::default(), &policy(&["view"], &[], &[])),
            Err(GrantRefused::NoRoleRef)
        );
    }

    #[test]
    fn a_role_is_copied_only_under_a_listed_name() {
        let role = rbac("Role");
        let rules: Payload = serde_json::from_value(
            json!({"rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}),
        )
        .unwrap();
        let g = policy(&["view"], &["app"], &["app"]);
        assert_eq!(
            judge(role, "app", Some("platform"), &rules, &g, &trusted()),
            Ok(())
        );
        assert_eq!(
            judge(role, "other", Some("platform"), &rules, &g, &trusted()),
            Err(GrantRefused::RoleNameNotListed {
                name: "other".into()
            })
        );
    }

    #[test]
    fn rbac_copies_come_only_from_trusted_namespaces() {
        let rb = rbac("RoleBinding");
        let g = policy(&["view"], &[], &[]);
        assert_eq!(
            judge(
                rb,
                "b",
                Some("team-a"),
                &binding("ClusterRole", "view"),
                &g,
                &trusted()
            ),
            Err(GrantRefused::SourceNotTrusted {
                namespace: "team-a".into()
            })
        );
    }

    #[test]
    fn kinds_that_grant_nothing_pass() {
        let np = Kind::register(
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "networkpolicies",
        )
        .unwrap();
        let g = GrantPolicy::default();
        let p = Payload::default();
        assert_eq!(judge(np, "x", Some("team-a"), &p, &g, &trusted()), Ok(()));
        assert_eq!(
            judge(Kind::Secret, "x", Some("team-a"), &p, &g, &trusted()),
            Ok(())
        );
    }
}
