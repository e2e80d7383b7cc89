//! The planner's refusals of what copyrator must never hand out (SPEC §3.1, §9.10): RBAC
//! copies beyond the installer's lists or from untrusted namespaces, objects that run code,
//! credentials' Secret types, and policy objects in copyrator's own namespace.

use super::*;
use crate::{
    copyrule::{CopyRule, CopyRuleSpec},
    grants::{GrantPolicy, GrantRefused},
    marks,
    model::{Kind, NamespaceInfo, NeverCopied, Payload, SourceInfo},
    rules::{Rule, RuleError},
    tenancy::{NamespacePatterns, TrustPolicy},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::json;

fn rbac(kind: &str) -> Kind {
    let plural = format!("{}s", kind.to_lowercase());
    Kind::register("rbac.authorization.k8s.io", "v1", kind, &plural).unwrap()
}

fn network_policy() -> Kind {
    Kind::register(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
    )
    .unwrap()
}

fn widget() -> Kind {
    Kind::register("example.com", "v1", "Widget", "widgets").unwrap()
}

fn ns(name: &str, labels: &[(&str, &str)]) -> NamespaceInfo {
    NamespaceInfo {
        name: name.into(),
        resource_version: "1".into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>()
            .into(),
        accept_from: None,
        terminating: false,
    }
}

/// A world whose namespaces `team-a` and `copyrator` (copyrator's own) are labelled
/// `bootstrap=yes`, trusting `platform`, with `grants`.
struct Rig {
    world: World,
    existing: BTreeMap<ObjectKey, Existing>,
    contents: Contents,
    rules: Vec<CopyRule>,
}

impl Rig {
    fn new(grants: GrantPolicy) -> Self {
        let mut world = World::new(Policy {
            trust: TrustPolicy {
                trusted_namespaces: NamespacePatterns::parse("platform").unwrap(),
            },
            grants,
            own_namespace: Some("copyrator".into()),
            ..Default::default()
        });
        world.insert_namespaces([
            ns("platform", &[]),
            ns("tenant", &[]),
            ns("team-a", &[("bootstrap", "yes")]),
            ns("copyrator", &[("bootstrap", "yes")]),
        ]);
        // The labelled namespaces' RoleBindings read, none there (SPEC §9.10).
        let contents = Contents {
            role_bindings: ["team-a", "copyrator"]
                .map(|ns| (ns.to_string(), Vec::new()))
                .into(),
            ..Default::default()
        };
        Rig {
            world,
            existing: BTreeMap::new(),
            contents,
            rules: Vec::new(),
        }
    }

    /// A source `namespace/name` of `kind` holding `fields`, copied by a CopyRule of its
    /// name into the labelled namespaces.
    fn source(mut self, kind: Kind, namespace: &str, name: &str, payload: Payload) -> Self {
        let key = ObjectKey::new(kind, namespace, name);
        let source = SourceInfo {
            key: key.clone(),
            uid: format!("uid-{name}"),
            resource_version: "5".into(),
            labels: Default::default(),
            annotations: Default::default(),
            created: 1,
            deleting: false,
            dropped: None,
        };
        self.contents
            .payloads
            .insert(key.clone(), Arc::new(payload));
        self.world.set_sources([(key, Some(source))]);
        let spec = CopyRuleSpec {
            api_version: Some(kind.api_version()),
            kind: kind.as_str().into(),
            source_namespace: namespace.into(),
            source_name: Some(name.into()),
            namespace_selector: Some(LabelSelector {
                match_labels: Some([("bootstrap".to_string(), "yes".to_string())].into()),
                match_expressions: None,
            }),
            ..Default::default()
        };
        self.rules.push(CopyRule::new(name, spec));
        self.world.set_copy_rules(self.rules.clone());
        self
    }

    /// The plan, one line per action, sorted (kinds are numbered in the order tests
    /// register them).
    fn plan(&self) -> Vec<String> {
        let mut lines: Vec<String> = plan(&self.world, &Scope::All, &self.existing, &self.contents)
            .iter()
            .map(|a| match a {
                Action::Create { copy, .. } => format!("create {}", copy.key),
                Action::Conflict { target, reason, .. } => match reason {
                    ConflictReason::Grant(g) => format!("refuse {target}: {}", short(g)),
                    ConflictReason::NeverCopied(NeverCopied::RunsCode { path }) => {
                        format!("refuse {target}: runs code at {path}")
                    }
                    ConflictReason::NeverCopied(NeverCopied::SecretType { type_, .. }) => {
                        format!("refuse {target}: {type_}")
                    }
                    other => format!("conflict {target}: {other}"),
                },
                Action::Delete { target, .. } => format!("delete {target}"),
                Action::Update {
                    copy,
                    adopt: Adopt::Overwrite | Adopt::Reclaim,
                    ..
                } => format!("adopt {}", copy.key),
                Action::Update { copy, .. } => format!("update {}", copy.key),
                Action::InSync { target, .. } => format!("in-sync {target}"),
                Action::NeedBindings { target } => format!("read the RoleBindings of {target}"),
                other => format!("{other:?}"),
            })
            .collect();
        lines.sort();
        lines
    }
}

fn short(g: &GrantRefused) -> String {
    match g {
        GrantRefused::RoleNotListed { kind, name } => format!("{kind} {name} not listed"),
        GrantRefused::RoleNameNotListed { name } => format!("Role name {name} not listed"),
        GrantRefused::NoRoleRef => "no roleRef".into(),
        GrantRefused::SourceNotTrusted { namespace } => format!("{namespace} not trusted"),
        GrantRefused::BoundBeforeCreated { role, binding } => {
            format!("RoleBinding {binding} to {role} was there first")
        }
    }
}

fn binding_to(kind: &str, role: &str) -> Payload {
    serde_json::from_value(json!({
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "devs"}]
    }))
    .unwrap()
}

fn role_rules() -> Payload {
    serde_json::from_value(
        json!({"rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}),
    )
    .unwrap()
}

fn grants(cluster_roles: &[&str], roles: &[&str], escalate: &[&str]) -> GrantPolicy {
    let set = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
    GrantPolicy {
        bind_cluster_roles: set(cluster_roles),
        bind_roles: set(roles),
        roles: set(escalate),
    }
}

#[test]
fn a_binding_is_copied_only_to_the_roles_listed() {
    let rb = rbac("RoleBinding");
    let rig = Rig::new(grants(&["view"], &[], &[]))
        .source(rb, "platform", "to-view", binding_to("ClusterRole", "view"))
        .source(
            rb,
            "platform",
            "to-reader",
            binding_to("ClusterRole", "secret-reader"),
        );
    assert_eq!(
        rig.plan(),
        [
            "create RoleBinding team-a/to-view",
            "refuse RoleBinding team-a/to-reader: ClusterRole secret-reader not listed",
        ]
    );
}

#[test]
fn with_every_list_empty_no_rbac_copy_is_made() {
    let (rb, role) = (rbac("RoleBinding"), rbac("Role"));
    let rig = Rig::new(GrantPolicy::default())
        .source(rb, "platform", "to-view", binding_to("ClusterRole", "view"))
        .source(rb, "platform", "to-app", binding_to("Role", "app"))
        .source(role, "platform", "app", role_rules());
    assert_eq!(
        rig.plan(),
        [
            "refuse Role team-a/app: Role name app not listed",
            "refuse RoleBinding team-a/to-app: Role app not listed",
            "refuse RoleBinding team-a/to-view: ClusterRole view not listed",
        ]
    );
    let rig = Rig::new(grants(&["view"], &["app"], &["app"]))
        .source(rb, "platform", "to-app", binding_to("Role", "app"))
        .source(role, "platform", "app", role_rules());
    assert_eq!(
        rig.plan(),
        ["create Role team-a/app", "create RoleBinding team-a/to-app"]
    );
}

#[test]
fn rbac_copies_come_only_from_a_trusted_namespace() {
    let rb = rbac("RoleBinding");
    let rig = Rig::new(grants(&["view"], &[], &[])).source(
        rb,
        "tenant",
        "to-view",
        binding_to("ClusterRole", "view"),
    );
    assert_eq!(
        rig.plan(),
        ["refuse RoleBinding team-a/to-view: tenant not trusted"]
    );
}

#[test]
fn a_refused_binding_takes_away_the_copy_it_made_before() {
    let rb = rbac("RoleBinding");
    // `view` is not listed (any more).
    let mut rig = Rig::new(GrantPolicy::default()).source(
        rb,
        "platform",
        "to-view",
        binding_to("ClusterRole", "view"),
    );
    // The copy made while `view` was listed.
    let src = rig.world.sources().values().next().unwrap().clone();
    let rule = rig.world.rules().rules[0].clone();
    let copy = crate::content::DesiredCopy::build(
        &rule,
        &src,
        &binding_to("ClusterRole", "view"),
        "team-a",
    )
    .unwrap();
    let meta = copy.object().metadata;
    let managed = ManagedCopy::from_marks(
        rb,
        &meta.labels.unwrap(),
        &meta.annotations.unwrap(),
        "9".into(),
        false,
    )
    .unwrap();
    rig.existing
        .insert(copy.key.clone(), Existing::Managed(managed));
    // An unmanaged object of the name elsewhere is never touched.
    rig.existing.insert(
        ObjectKey::new(rb, "copyrator", "to-view"),
        Existing::Unmanaged {
            resource_version: "3".into(),
        },
    );
    assert_eq!(
        rig.plan(),
        [
            "delete RoleBinding team-a/to-view",
            "refuse RoleBinding team-a/to-view: ClusterRole view not listed",
        ]
    );
}

/// A binding planted before the Role exists (made to a Role of the tenant's own rights, which
/// was then deleted) would get the copy's rules without RBAC's check: a Role copy is created
/// or adopted only once the namespace's RoleBindings are read and none that copyrator did not
/// make references it; a Role copy that is there already keeps being updated.
#[test]
fn a_role_is_never_created_under_a_binding_made_before_it() {
    let (rb, role) = (rbac("RoleBinding"), rbac("Role"));
    let bound = |name: &str, marked: Option<(&str, &str)>| crate::grants::BindingToRole {
        name: name.into(),
        role: "quota-editor".into(),
        marked: marked.map(|(rule, source)| {
            (
                RuleId::CopyRule(rule.into()),
                ObjectKey::new(rb, "platform", source),
            )
        }),
    };
    let mut rig = Rig::new(grants(&[], &["quota-editor"], &["quota-editor"]))
        .source(role, "platform", "quota-editor", role_rules())
        .source(
            rb,
            "platform",
            "to-quota-editor",
            binding_to("Role", "quota-editor"),
        );
    let role_copy = "Role team-a/quota-editor";
    // Not read yet: read before anything is written.
    rig.contents.role_bindings.remove("team-a");
    assert!(
        rig.plan()
            .contains(&format!("read the RoleBindings of {role_copy}"))
    );
    // Planted by the namespace's admin: refused, not written.
    let planted = [
        bound("mine", None),
        // Marks naming a rule and source that want no binding of this name here: a forgery.
        bound("forged", Some(("to-quota-editor", "to-quota-editor"))),
    ];
    for binding in planted {
        rig.contents
            .role_bindings
            .insert("team-a".into(), vec![binding.clone()]);
        assert!(
            rig.plan().contains(&format!(
                "refuse {role_copy}: RoleBinding {} to quota-editor was there first",
                binding.name
            )),
            "{binding:?}: {:?}",
            rig.plan()
        );
        // Nor is an object of its name adopted (conflictPolicy Overwrite).
        let mut overwrite = rig.rules[0].spec.clone();
        overwrite.conflict_policy = crate::copyrule::ConflictPolicy::Overwrite;
        let mut adopting = rig.rules.clone();
        adopting[0] = CopyRule::new("quota-editor", overwrite);
        let mut world = rig.world.clone();
        world.set_copy_rules(adopting);
        let key = ObjectKey::new(role, "team-a", "quota-editor");
        let mut existing = rig.existing.clone();
        existing.insert(
            key.clone(),
            Existing::Unmanaged {
                resource_version: "3".into(),
            },
        );
        let actions = plan(&world, &Scope::Target(key), &existing, &rig.contents);
        assert!(
            matches!(
                actions.as_slice(),
                [Action::Conflict {
                    reason: ConflictReason::Grant(GrantRefused::BoundBeforeCreated { .. }),
                    ..
                }]
            ),
            "{actions:?}"
        );
    }
    // copyrator's own copy of the platform's binding to it: the Role is created.
    rig.contents.role_bindings.insert(
        "team-a".into(),
        vec![bound(
            "to-quota-editor",
            Some(("to-quota-editor", "to-quota-editor")),
        )],
    );
    assert!(rig.plan().contains(&format!("create {role_copy}")));
    // A Role copy already there is ours: updated whatever binds it since.
    rig.contents
        .role_bindings
        .insert("team-a".into(), vec![bound("mine", None)]);
    let src = rig.world.sources()[&ObjectKey::new(role, "platform", "quota-editor")].clone();
    let rule = rig
        .world
        .rules()
        .rules
        .iter()
        .find(|r| r.target_kind() == role)
        .unwrap()
        .clone();
    let copy = crate::content::DesiredCopy::build(&rule, &src, &role_rules(), "team-a").unwrap();
    let meta = copy.object().metadata;
    let mut annotations = meta.annotations.unwrap();
    annotations.insert(marks::CONTENT_HASH_ANNOTATION.into(), "older".into());
    let managed =
        ManagedCopy::from_marks(role, &meta.labels.unwrap(), &annotations, "9".into(), false)
            .unwrap();
    rig.existing
        .insert(copy.key.clone(), Existing::Managed(managed));
    assert!(
        rig.plan().contains(&format!("update {role_copy}")),
        "{:?}",
        rig.plan()
    );
}

#[test]
fn copyrators_own_namespace_receives_data_only() {
    let np: Payload =
        serde_json::from_value(json!({"spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}))
            .unwrap();
    let secret = Payload {
        type_: Some("Opaque".into()),
        data: Some([("a".to_string(), "YQ==".to_string())].into()),
        ..Default::default()
    };
    let rig = Rig::new(grants(&["view"], &[], &[]))
        .source(network_policy(), "platform", "deny-all", np)
        .source(Kind::Secret, "platform", "cred", secret)
        .source(
            rbac("RoleBinding"),
            "platform",
            "to-view",
            binding_to("ClusterRole", "view"),
        );
    assert_eq!(
        rig.plan(),
        [
            "create NetworkPolicy team-a/deny-all",
            "create RoleBinding team-a/to-view",
            "create Secret copyrator/cred",
            "create Secret team-a/cred",
        ]
    );
}

#[test]
fn objects_that_run_code_are_never_copied() {
    let runs: Payload = serde_json::from_value(json!({
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    }))
    .unwrap();
    let data: Payload = serde_json::from_value(json!({"spec": {"size": 3, "image": ""}})).unwrap();
    let rig = Rig::new(GrantPolicy::default())
        .source(widget(), "platform", "runner", runs)
        .source(widget(), "platform", "plain", data);
    assert_eq!(
        rig.plan(),
        [
            "create Widget team-a/plain",
            "refuse Widget team-a/runner: runs code at spec.template.spec.containers[0].image",
        ]
    );
}

#[test]
fn credentials_secret_types_are_never_copied() {
    let token = |t: &str| Payload {
        type_: Some(t.into()),
        data: Some([("token-id".to_string(), "YQ==".to_string())].into()),
        ..Default::default()
    };
    let rig = Rig::new(GrantPolicy::default())
        .source(
            Kind::Secret,
            "platform",
            "bootstrap",
            token("bootstrap.kubernetes.io/token"),
        )
        .source(
            Kind::Secret,
            "platform",
            "sa",
            token("kubernetes.io/service-account-token"),
        );
    let plan = rig.plan();
    assert!(
        plan.iter()
            .all(|l| l.starts_with("refuse") && l.contains("token")),
        "{plan:?}"
    );
    assert_eq!(plan.len(), 4, "two namespaces each: {plan:?}");
}

#[test]
fn rbac_objects_are_copied_only_by_a_copy_rule_naming_its_source() {
    let rb = rbac("RoleBinding");
    let mut spec = CopyRuleSpec {
        api_version: Some(rb.api_version()),
        kind: "RoleBinding".into(),
        source_namespace: "platform".into(),
        source_selector: Some(LabelSelector::default()),
        namespaces: vec!["team-a".into()],
        ..Default::default()
    };
    let err: RuleError = Rule::from_copy_rule(&CopyRule::new("r", spec.clone())).unwrap_err();
    assert_eq!(err.field, "spec.sourceSelector");
    spec.source_selector = None;
    spec.source_name = Some("to-view".into());
    assert!(Rule::from_copy_rule(&CopyRule::new("r", spec)).is_ok());
    // An inline rule never copies RBAC, trusted namespace or not.
    let source = SourceInfo {
        key: ObjectKey::new(rb, "platform", "to-view"),
        uid: "u".into(),
        resource_version: "1".into(),
        labels: [(marks::SOURCE_LABEL.to_string(), "true".to_string())].into(),
        annotations: [(
            marks::NAMESPACES_ANNOTATION.to_string(),
            "team-a".to_string(),
        )]
        .into(),
        created: 1,
        deleting: false,
        dropped: None,
    };
    let err = Rule::inline_tiered(&source, &TrustPolicy::trust_all()).unwrap_err();
    assert_eq!(err.field, marks::SOURCE_LABEL);
}

#[test]
fn policy_kinds_are_read_only_unless_asked_otherwise() {
    let spec = |kind: Kind, read_only: Option<bool>| CopyRuleSpec {
        api_version: Some(kind.api_version()),
        kind: kind.as_str().into(),
        source_namespace: "platform".into(),
        source_name: Some("x".into()),
        namespaces: vec!["team-a".into()],
        read_only,
        ..Default::default()
    };
    let read_only = |kind, ro| {
        Rule::from_copy_rule(&CopyRule::new("r", spec(kind, ro)))
            .unwrap()
            .read_only
    };
    assert!(read_only(network_policy(), None));
    assert!(!read_only(network_policy(), Some(false)));
    assert!(!read_only(Kind::Secret, None));
    assert!(read_only(Kind::Secret, Some(true)));
}
