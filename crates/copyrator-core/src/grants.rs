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
//!
//! And one rule about where a Role copy lands: a Role is never created or adopted under a
//! name a RoleBinding copyrator did not make already references there ([`judge_role_creation`]).
//! RBAC checks a binding against its Role when the binding is written, and a binding may
//! outlive its Role: a namespace admin who binds a Role of their own rights and deletes it has
//! planted a binding that the Role copy would arm with rights they could never bind.

use std::collections::BTreeSet;

use crate::{
    model::{Kind, ObjectKey, Payload, kind_table::Grants},
    rules::RuleId,
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
    /// A RoleBinding copyrator did not make already references the Role the copy would
    /// create or adopt: it would grant the Role's rules to whoever that binding names, without
    /// RBAC's check that its author may grant them.
    BoundBeforeCreated { role: String, binding: String },
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
            GrantRefused::BoundBeforeCreated { role, binding } => write!(
                f,
                "RoleBinding {binding}, not copyrator's, already references Role {role} here: creating the Role would grant its rules to that binding's subjects, who were never checked for them; delete the binding (it can be made again once the Role exists)"
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

/// A RoleBinding of a namespace whose `roleRef` names a Role of that namespace, as read where
/// a Role copy is about to be created or adopted (SPEC §9.10).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingToRole {
    /// The binding's name.
    pub name: String,
    /// The Role its `roleRef` names.
    pub role: String,
    /// The rule and source its copyrator marks name, when it carries marks that parse: a
    /// copy's, or a forgery, which only the planner can tell apart (it knows the claims).
    pub marked: Option<(RuleId, ObjectKey)>,
}

/// Whether a Role copy named `role` may be created, or an object of that name adopted, in a
/// namespace whose RoleBindings to Roles are `bindings` (see the module documentation).
/// `is_copy` says which of them copyrator made for a rule that wants them there: those were
/// judged by [`judge`] and bind what the administrator's source binds.
///
/// A Role copy that exists already is not judged again: a binding made since it exists was
/// checked by RBAC against its rules (its author holds them, or may `bind` it).
pub fn judge_role_creation(
    role: &str,
    bindings: &[BindingToRole],
    is_copy: impl Fn(&BindingToRole) -> bool,
) -> Result<(), GrantRefused> {
    match bindings.iter().find(|b| b.role == role && !is_copy(b)) {
        Some(b) => Err(GrantRefused::BoundBeforeCreated {
            role: role.to_string(),
            binding: b.name.clone(),
        }),
        None => Ok(()),
    }
}

/// The content-hash mark of a Role copy's placeholder ([`role_placeholder`]): never a
/// source's hash, so a placeholder left behind is stale and updated by the next sync.
pub const PLACEHOLDER_HASH: &str = "placeholder";

/// What a Role copy is first created as when the API server refuses it with its rules
/// (SPEC §9.10). RBAC authorizes `escalate` before it knows a created object's name, so
/// `escalate` limited to the names on `--escalate-roles` allows updating a Role copy to rules
/// copyrator does not hold, never creating one with them. The placeholder's one rule is that
/// very `escalate` on its own name: copyrator holds it, so may create it; anyone binding it in
/// the moment before the update must hold it too (an empty Role would be bindable by every
/// namespace admin, and would then carry the copy's rules to them).
pub fn role_placeholder(copy: &crate::content::DesiredCopy) -> crate::content::DesiredCopy {
    let t = &copy.template;
    let mut payload = (*t.payload).clone();
    payload.fields.insert(
        "rules".into(),
        serde_json::json!([{
            "apiGroups": ["rbac.authorization.k8s.io"],
            "resources": ["roles"],
            "resourceNames": [copy.key.name],
            "verbs": ["escalate"],
        }]),
    );
    let mut annotations = t.annotations.clone();
    annotations.insert(
        crate::marks::CONTENT_HASH_ANNOTATION.into(),
        PLACEHOLDER_HASH.into(),
    );
    let template = crate::content::CopyTemplate {
        kind: t.kind,
        name: t.name.clone(),
        labels: t.labels.clone(),
        annotations,
        payload: std::sync::Arc::new(payload),
        marks: t.marks.clone(),
        missing_keys: Vec::new(),
    };
    crate::content::DesiredCopy {
        key: copy.key.clone(),
        template: std::sync::Arc::new(template),
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
    fn a_role_is_not_created_under_a_binding_copyrator_did_not_make() {
        let bound = |name: &str, role: &str, marked: bool| BindingToRole {
            name: name.into(),
            role: role.into(),
            marked: marked.then(|| {
                (
                    RuleId::CopyRule("bindings".into()),
                    ObjectKey::new(rbac("RoleBinding"), "platform", name),
                )
            }),
        };
        let copies_only = |b: &BindingToRole| b.marked.is_some();
        // Nothing bound there, or only other Roles: created.
        assert_eq!(
            judge_role_creation("quota-editor", &[], copies_only),
            Ok(())
        );
        let other = [bound("team", "app", false)];
        assert_eq!(
            judge_role_creation("quota-editor", &other, copies_only),
            Ok(())
        );
        // A binding planted before the Role exists: refused, naming it.
        let planted = [
            bound("team", "app", false),
            bound("mine", "quota-editor", false),
        ];
        assert_eq!(
            judge_role_creation("quota-editor", &planted, copies_only),
            Err(GrantRefused::BoundBeforeCreated {
                role: "quota-editor".into(),
                binding: "mine".into()
            })
        );
        // copyrator's own copy of the platform's binding to it: created.
        let copied = [bound("platform-binding", "quota-editor", true)];
        assert_eq!(
            judge_role_creation("quota-editor", &copied, copies_only),
            Ok(())
        );
        // Marks alone are no proof: what the planner does not take for a copy counts.
        assert!(judge_role_creation("quota-editor", &copied, |_| false).is_err());
    }

    #[test]
    fn a_role_placeholder_grants_only_escalate_on_itself_and_is_stale() {
        let role = rbac("Role");
        let rule = crate::rules::Rule::from_copy_rule(&crate::copyrule::CopyRule::new(
            "quota-editor",
            serde_json::from_value(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "sourceNamespace": "platform", "sourceName": "quota-editor",
                "namespaceSelector": {}
            }))
            .unwrap(),
        ))
        .unwrap();
        let source = crate::model::SourceInfo {
            key: ObjectKey::new(role, "platform", "quota-editor"),
            uid: "u".into(),
            resource_version: "1".into(),
            labels: Default::default(),
            annotations: Default::default(),
            created: 1,
            deleting: false,
            dropped: None,
        };
        let rules: Payload = serde_json::from_value(json!({"rules": [
            {"apiGroups": [""], "resources": ["resourcequotas"], "verbs": ["update"]}]}))
        .unwrap();
        let copy = crate::content::DesiredCopy::build(&rule, &source, &rules, "team-a").unwrap();
        let placeholder = role_placeholder(&copy).object();
        let real = copy.object();
        assert_eq!(placeholder.metadata.labels, real.metadata.labels);
        let annotations = placeholder.metadata.annotations.unwrap();
        assert_eq!(
            annotations[crate::marks::CONTENT_HASH_ANNOTATION],
            PLACEHOLDER_HASH
        );
        assert_eq!(
            serde_json::to_value(&placeholder.payload.fields["rules"]).unwrap(),
            json!([{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"],
                    "resourceNames": ["quota-editor"], "verbs": ["escalate"]}])
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
