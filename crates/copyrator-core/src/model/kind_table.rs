//! Everything copyrator knows about particular kinds, in one table (SPEC §3.1): which are never
//! copied and why, which fields the server owns, which fields force a copy to be replaced,
//! what a copy of the kind grants (RBAC, SPEC §9.10), and the API version a configuration
//! names it in when it names none. A kind with special rules is one row here; every other
//! kind takes [`DEFAULT`].

/// What an object of a kind grants when it is copied into a namespace (SPEC §9.10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grants {
    /// A RoleBinding: the permissions of the role its `roleRef` names, to its subjects.
    Binding,
    /// A Role: the permissions of its `rules`, to whoever is bound to its name there.
    Role,
}

/// One row of the table.
#[derive(Debug)]
pub struct KindFacts {
    /// API group, `""` for the core group.
    pub group: &'static str,
    /// The kind, or `None` for every kind of the group.
    pub kind: Option<&'static str>,
    /// Why objects of the kind are never copied, whatever the flags say.
    pub never_copied: Option<&'static str>,
    /// Top-level fields the API server or a controller writes: a copy never carries them
    /// (besides `status`, never carried for any kind).
    pub server_owned: &'static [&'static str],
    /// Top-level fields that cannot change in place: a change is written by deleting the copy
    /// and creating it again (SPEC §3.1).
    pub replaced_when_changed: &'static [&'static str],
    /// What a copy grants, for the kinds that carry permissions.
    pub grants: Option<Grants>,
    /// Whether a namespace may consent to copies of the kind from an untrusted namespace
    /// (SPEC §9.2): data only (Secrets and ConfigMaps). Every other kind changes what others
    /// may do in the namespace.
    pub consentable: bool,
    /// The `apiVersion` of a built-in kind, for configurations that name the kind alone
    /// (older Kyverno policies).
    pub api_version: Option<&'static str>,
}

/// The facts of a kind without a row: copied as it is, not consentable.
pub const DEFAULT: KindFacts = KindFacts {
    group: "",
    kind: None,
    never_copied: None,
    server_owned: &[],
    replaced_when_changed: &[],
    grants: None,
    consentable: false,
    api_version: None,
};

/// What [`facts`] answers for a kind without a row.
static NO_ROW: KindFacts = DEFAULT;

const RUNS_CODE: &str =
    "it runs code: a copy would start Pods in other namespaces, as their ServiceAccounts";

const DEPLOYS_AS: &str = "it deploys as the ServiceAccount it names (serviceAccountName): a copy would apply manifests in other namespaces with their ServiceAccounts' rights";

/// A row for a kind that is never copied.
const fn never(group: &'static str, kind: Option<&'static str>, why: &'static str) -> KindFacts {
    KindFacts {
        group,
        kind,
        never_copied: Some(why),
        ..DEFAULT
    }
}

/// A row for a built-in kind copied as it is, named by `api_version`.
const fn built_in(group: &'static str, kind: &'static str, api_version: &'static str) -> KindFacts {
    KindFacts {
        group,
        kind: Some(kind),
        api_version: Some(api_version),
        ..DEFAULT
    }
}

/// The table (see the module documentation). A kind's row is the first that names its group
/// and kind, else the first that names its group alone.
pub static TABLE: &[KindFacts] = &[
    KindFacts {
        replaced_when_changed: &["type"],
        consentable: true,
        ..built_in("", "Secret", "v1")
    },
    KindFacts {
        consentable: true,
        ..built_in("", "ConfigMap", "v1")
    },
    KindFacts {
        // The token controller lists the ServiceAccount's token Secrets: they exist only in
        // the source's namespace.
        server_owned: &["secrets"],
        ..built_in("", "ServiceAccount", "v1")
    },
    built_in("", "LimitRange", "v1"),
    built_in("", "ResourceQuota", "v1"),
    built_in("", "Service", "v1"),
    built_in("networking.k8s.io", "NetworkPolicy", "networking.k8s.io/v1"),
    KindFacts {
        replaced_when_changed: &["roleRef"],
        grants: Some(Grants::Binding),
        ..built_in(
            "rbac.authorization.k8s.io",
            "RoleBinding",
            "rbac.authorization.k8s.io/v1",
        )
    },
    KindFacts {
        grants: Some(Grants::Role),
        ..built_in(
            "rbac.authorization.k8s.io",
            "Role",
            "rbac.authorization.k8s.io/v1",
        )
    },
    never(
        "",
        Some("Pod"),
        "a Pod runs code: copying one would start workloads in other namespaces",
    ),
    never(
        "",
        Some("PodTemplate"),
        "a PodTemplate is the code a controller runs",
    ),
    never("apps", Some("Deployment"), RUNS_CODE),
    never("apps", Some("StatefulSet"), RUNS_CODE),
    never("apps", Some("DaemonSet"), RUNS_CODE),
    never("apps", Some("ReplicaSet"), RUNS_CODE),
    never(
        "batch",
        Some("Job"),
        "it runs code: a copy would start Pods in other namespaces, and run again each time it is restored",
    ),
    never(
        "batch",
        Some("CronJob"),
        "it runs code: a copy would start Pods in other namespaces on a schedule",
    ),
    never(
        "apps",
        Some("ControllerRevision"),
        "a ControllerRevision belongs to its controller",
    ),
    never(
        "",
        Some("Event"),
        "an Event reports on one object in its own namespace",
    ),
    never(
        "events.k8s.io",
        Some("Event"),
        "an Event reports on one object in its own namespace",
    ),
    never(
        "",
        Some("Endpoints"),
        "endpoints are written by the API server's controllers for a Service in their namespace",
    ),
    never(
        "discovery.k8s.io",
        Some("EndpointSlice"),
        "endpoints are written by the API server's controllers for a Service in their namespace",
    ),
    never(
        "coordination.k8s.io",
        Some("Lease"),
        "a Lease is held by one process: a copy would be a second holder",
    ),
    never(
        "",
        Some("Binding"),
        "it is written by controllers, not by users",
    ),
    never(
        "",
        Some("ReplicationController"),
        "it is written by controllers, not by users",
    ),
    never(
        "copyrator.io",
        None,
        "copyrator's own configuration is never copied",
    ),
    // Custom resources whose objects run code or deploy what does: pipelines, workflows,
    // serverless services, virtual machines, batch and training jobs, GitOps applications.
    never("tekton.dev", None, RUNS_CODE),
    never("argoproj.io", None, RUNS_CODE),
    never("serving.knative.dev", None, RUNS_CODE),
    never("kubevirt.io", None, RUNS_CODE),
    never("batch.volcano.sh", None, RUNS_CODE),
    never("ray.io", None, RUNS_CODE),
    never("kubeflow.org", None, RUNS_CODE),
    never("apps.kruise.io", None, RUNS_CODE),
    // GitOps and package controllers that apply what their objects name as a ServiceAccount
    // of the object's namespace: Flux, Carvel. (Argo's and Tekton's are in their groups above.)
    never("kustomize.toolkit.fluxcd.io", None, DEPLOYS_AS),
    never("helm.toolkit.fluxcd.io", None, DEPLOYS_AS),
    never("kappctrl.k14s.io", None, DEPLOYS_AS),
    never("packaging.carvel.dev", Some("PackageInstall"), DEPLOYS_AS),
];

/// The facts of objects of `kind` in API group `group`.
pub fn facts(group: &str, kind: &str) -> &'static KindFacts {
    TABLE
        .iter()
        .find(|f| f.group == group && f.kind == Some(kind))
        .or_else(|| TABLE.iter().find(|f| f.group == group && f.kind.is_none()))
        .unwrap_or(&NO_ROW)
}

/// Every field some kind replaces its copies on when it changes (the API error classifier
/// matches an answer's causes against them).
pub fn replaced_fields() -> impl Iterator<Item = &'static str> {
    TABLE
        .iter()
        .flat_map(|f| f.replaced_when_changed.iter().copied())
}

/// Secret types that are never copied, and why (SPEC §3): each is a credential the API server
/// honours for one identity in one place.
pub const NEVER_COPIED_SECRET_TYPES: &[(&str, &str)] = &[
    (
        "kubernetes.io/service-account-token",
        "it is a service-account token: copying it would hand that identity to other namespaces",
    ),
    (
        "bootstrap.kubernetes.io/token",
        "it is a bootstrap token: copying it would hand out a credential that joins nodes to the cluster",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind with special rules, and its rule: the one list to read when adding a kind.
    #[test]
    fn every_special_kind_and_its_rule() {
        let never = |g, k| facts(g, k).never_copied.is_some();
        for (g, k) in [
            ("", "Pod"),
            ("", "PodTemplate"),
            ("apps", "Deployment"),
            ("apps", "StatefulSet"),
            ("apps", "DaemonSet"),
            ("apps", "ReplicaSet"),
            ("batch", "Job"),
            ("batch", "CronJob"),
            ("apps", "ControllerRevision"),
            ("", "Event"),
            ("events.k8s.io", "Event"),
            ("", "Endpoints"),
            ("discovery.k8s.io", "EndpointSlice"),
            ("coordination.k8s.io", "Lease"),
            ("", "Binding"),
            ("", "ReplicationController"),
            ("copyrator.io", "CopyRule"),
            ("tekton.dev", "PipelineRun"),
            ("tekton.dev", "TaskRun"),
            ("argoproj.io", "Application"),
            ("argoproj.io", "Workflow"),
            ("argoproj.io", "CronWorkflow"),
            ("kustomize.toolkit.fluxcd.io", "Kustomization"),
            ("helm.toolkit.fluxcd.io", "HelmRelease"),
            ("kappctrl.k14s.io", "App"),
            ("packaging.carvel.dev", "PackageInstall"),
            ("serving.knative.dev", "Service"),
            ("kubevirt.io", "VirtualMachine"),
        ] {
            assert!(never(g, k), "{k}.{g} must never be copied");
        }
        for (g, k) in [
            ("", "Secret"),
            ("", "ConfigMap"),
            ("", "Service"),
            ("", "ServiceAccount"),
            ("networking.k8s.io", "NetworkPolicy"),
            ("rbac.authorization.k8s.io", "RoleBinding"),
            ("example.com", "Widget"),
            // Flux's sources and Carvel's package catalogue run nothing as anyone.
            ("source.toolkit.fluxcd.io", "GitRepository"),
            ("packaging.carvel.dev", "PackageRepository"),
        ] {
            assert!(!never(g, k), "{k}.{g} may be copied");
        }
        assert_eq!(facts("", "ServiceAccount").server_owned, ["secrets"]);
        let rbac = "rbac.authorization.k8s.io";
        assert_eq!(facts(rbac, "RoleBinding").grants, Some(Grants::Binding));
        assert_eq!(facts(rbac, "Role").grants, Some(Grants::Role));
        assert_eq!(
            facts(rbac, "RoleBinding").replaced_when_changed,
            ["roleRef"]
        );
        assert_eq!(facts("", "Secret").replaced_when_changed, ["type"]);
        let consentable: Vec<_> = TABLE
            .iter()
            .filter(|f| f.consentable)
            .map(|f| f.kind)
            .collect();
        assert_eq!(consentable, [Some("Secret"), Some("ConfigMap")]);
        assert!(facts("example.com", "Widget").grants.is_none());
        assert_eq!(
            facts("", "LimitRange").api_version,
            Some("v1"),
            "older Kyverno policies name built-in kinds without a version"
        );
    }

    #[test]
    fn a_kind_row_wins_over_its_groups() {
        assert!(std::ptr::eq(facts("example.com", "Widget"), &NO_ROW));
        assert_eq!(
            facts("apps", "Deployment").never_copied,
            Some(RUNS_CODE),
            "named row"
        );
        assert!(
            facts("apps", "Widget").never_copied.is_none(),
            "no apps-wide row"
        );
    }
}
