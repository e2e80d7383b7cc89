//! A CopyRule that copies RoleBindings or Roles grants permissions in every namespace it
//! selects, with copyrator's rights. Its author must hold the right to grant them there: at
//! admission, SubjectAccessReviews ask the API server whether the requesting user may `bind`
//! the role a binding references (or `escalate` a Role) in every namespace, the Kubernetes way
//! of "you cannot grant what you cannot grant" (SPEC §9.10).
//!
//! Which roles: the named source's `roleRef` as it is now; when the source cannot be read
//! (not created yet), every role the installer allows bindings to (`--bind-cluster-roles`,
//! `--bind-roles`), since the planner copies a binding to any of them. A Role's copies are
//! judged by `escalate` on Roles of their name.
//!
//! Only for reviews a `--client-ca`-verified client sent (the API server): the user in a
//! forged review is anyone's to claim, and the answer would tell who may grant what (SPEC
//! §9.8). Without `--client-ca` the rule is allowed with a warning; the planner's own rules
//! (listed roles only, trusted sources only) hold either way. Within the bounds of the other
//! admission reads (`advice.rs`); a check that cannot finish denies the rule, asking to try
//! again: a grant nobody checked is not let through.

use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::{Api, api::PostParams};

use super::{advice::Advisor, review::UserInfo};
use crate::{
    grants::role_ref,
    model::{ObjectKey, kind_table::Grants},
    rules::{Rule, SourceMatch},
    template::NAMESPACE_VARIABLE,
};

/// How long the reads and reviews may take before the rule is denied for now.
const DEADLINE: Duration = Duration::from_secs(2);
/// Roles checked per review.
const MAX_ROLES: usize = 32;

/// A CopyRule to check, and who asks for it.
#[derive(Debug)]
pub struct GrantCheck {
    pub rule: Box<Rule>,
    pub user: UserInfo,
}

/// What `rule`'s copies grant, if anything.
pub fn needs_check(rule: &Rule) -> Option<Grants> {
    rule.target_kind().facts().grants
}

/// One right to check: `verb` on a role (`clusterroles` or `roles`) named `name`, in every
/// namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Right {
    pub verb: &'static str,
    pub resource: &'static str,
    pub name: String,
}

impl std::fmt::Display for Right {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.resource {
            "clusterroles" => "ClusterRole",
            _ => "Roles named",
        };
        write!(f, "{} {what} {}", self.verb, self.name)
    }
}

/// The rights a rule's author must hold, given the roleRef of its source now (`None`: not
/// known) and the installer's lists.
pub fn rights(
    grants: Grants,
    rule: &Rule,
    source_role: Option<(&str, &str)>,
    policy: &crate::grants::GrantPolicy,
) -> Vec<Right> {
    let bind = |resource: &'static str, name: &str| Right {
        verb: "bind",
        resource,
        name: name.to_string(),
    };
    let mut out = match grants {
        Grants::Role => {
            let name = match &rule.sources {
                SourceMatch::Name(n) => rule.target_name(n).to_string(),
                SourceMatch::Template(_) => rule.target_name("").to_string(),
                _ => return Vec::new(),
            };
            vec![Right {
                verb: "escalate",
                resource: "roles",
                name,
            }]
        }
        Grants::Binding => match source_role {
            Some(("ClusterRole", name)) => vec![bind("clusterroles", name)],
            Some((_, name)) => vec![bind("roles", name)],
            None => policy
                .bind_cluster_roles
                .iter()
                .map(|n| bind("clusterroles", n))
                .chain(policy.bind_roles.iter().map(|n| bind("roles", n)))
                .collect(),
        },
    };
    out.truncate(MAX_ROLES);
    out
}

impl Advisor {
    /// The denial of `check`'s rule when its author may not grant what it copies (see the
    /// module documentation); `None` when they may.
    pub async fn grant_refusal(&self, check: &GrantCheck) -> Option<String> {
        let grants = needs_check(&check.rule)?;
        let denied = |why: String| {
            Some(format!(
                "copyrator: CopyRule not allowed: {why}. A CopyRule copying {}s grants in every namespace it selects, so its author must hold that right in every namespace (SPEC §9.10)",
                check.rule.target_kind().as_str()
            ))
        };
        let Ok(_permit) = self.reviews.try_acquire() else {
            return denied("copyrator is busy checking other rules; try again".into());
        };
        let work = async {
            let payload = match &check.rule.sources {
                SourceMatch::Name(name) => {
                    let key = ObjectKey::new(check.rule.kind, &check.rule.source_namespace, name);
                    let source = self.cluster.get(&key).await.ok().flatten();
                    source.map(|o| o.payload.for_kind(check.rule.kind))
                }
                // A template's roleRef is in the rule; one naming the namespace may come to
                // be any listed role (judged by the planner per copy).
                SourceMatch::Template(t) => {
                    Some(t.for_namespace(check.rule.kind, NAMESPACE_VARIABLE).1).filter(|p| {
                        role_ref(p).is_none_or(|(_, n)| !n.contains(NAMESPACE_VARIABLE))
                    })
                }
                _ => None,
            };
            let role = payload.as_ref().and_then(role_ref);
            let rights = rights(grants, &check.rule, role, &self.policy().grants);
            let answers =
                futures::future::join_all(rights.iter().map(|r| self.may(&check.user, r))).await;
            rights
                .into_iter()
                .zip(answers)
                .find(|(_, allowed)| *allowed != Ok(true))
        };
        match tokio::time::timeout(DEADLINE, work).await {
            Ok(None) => None,
            Ok(Some((right, Ok(_)))) => denied(format!(
                "{} may not {right} in every namespace",
                check
                    .user
                    .username
                    .as_deref()
                    .unwrap_or("the requesting user")
            )),
            Ok(Some((right, Err(())))) => denied(format!(
                "copyrator could not check whether you may {right}; try again"
            )),
            Err(_) => denied("copyrator could not check your rights in time; try again".into()),
        }
    }

    /// Whether `user` may exercise `right` in every namespace (a SubjectAccessReview without a
    /// namespace); `Err` when the API server did not answer.
    async fn may(&self, user: &UserInfo, right: &Right) -> Result<bool, ()> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                uid: user.uid.clone(),
                groups: user.groups.clone(),
                extra: user.extra.clone(),
                resource_attributes: Some(ResourceAttributes {
                    group: Some("rbac.authorization.k8s.io".into()),
                    resource: Some(right.resource.into()),
                    verb: Some(right.verb.into()),
                    name: Some(right.name.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.cluster.client().clone());
        match api.create(&PostParams::default(), &review).await {
            Ok(answer) => Ok(answer.status.is_some_and(|s| s.allowed)),
            Err(e) => {
                tracing::warn!(error = %e, "SubjectAccessReview failed");
                Err(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        copyrule::{CopyRule, CopyRuleSpec},
        grants::GrantPolicy,
        model::Kind,
    };

    fn rule(kind: &str, source: &str) -> Rule {
        let plural = format!("{}s", kind.to_lowercase());
        let k = Kind::register("rbac.authorization.k8s.io", "v1", kind, &plural).unwrap();
        Rule::from_copy_rule(&CopyRule::new(
            "r",
            CopyRuleSpec {
                api_version: Some(k.api_version()),
                kind: kind.into(),
                source_namespace: "platform".into(),
                source_name: Some(source.into()),
                namespaces: vec!["team-a".into()],
                ..Default::default()
            },
        ))
        .unwrap()
    }

    #[test]
    fn a_binding_asks_bind_on_its_role_or_on_every_role_it_could_bind() {
        let policy = GrantPolicy {
            bind_cluster_roles: ["view".to_string(), "edit".into()].into(),
            bind_roles: ["app".to_string()].into(),
            roles: Default::default(),
        };
        let rb = rule("RoleBinding", "to-view");
        let names = |rights: Vec<Right>| -> Vec<String> {
            rights.iter().map(ToString::to_string).collect()
        };
        assert_eq!(
            names(rights(
                Grants::Binding,
                &rb,
                Some(("ClusterRole", "view")),
                &policy
            )),
            ["bind ClusterRole view"]
        );
        assert_eq!(
            names(rights(Grants::Binding, &rb, Some(("Role", "app")), &policy)),
            ["bind Roles named app"]
        );
        // The source is not there yet: it may come to bind any role the installer listed.
        assert_eq!(
            names(rights(Grants::Binding, &rb, None, &policy)),
            [
                "bind ClusterRole edit",
                "bind ClusterRole view",
                "bind Roles named app"
            ]
        );
    }

    #[test]
    fn a_role_asks_escalate_on_roles_of_its_copies_name() {
        let role = rule("Role", "app");
        assert_eq!(
            rights(Grants::Role, &role, None, &GrantPolicy::default()),
            [Right {
                verb: "escalate",
                resource: "roles",
                name: "app".into()
            }]
        );
    }
}
