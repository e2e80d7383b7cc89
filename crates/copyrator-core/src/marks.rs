//! The labels and annotations copyrator reads (configuration) and writes (its marks on copies).

/// Label that opts a Secret or ConfigMap in as a source; the `/admission/sources` webhook keys on it.
pub const SOURCE_LABEL: &str = "copyrator.io/source";
/// Inline rule: Kubernetes label-selector syntax over namespace labels.
pub const NAMESPACE_SELECTOR_ANNOTATION: &str = "copyrator.io/namespace-selector";
/// Inline rule: comma-separated explicit namespace names, OR'ed with the selector.
pub const NAMESPACES_ANNOTATION: &str = "copyrator.io/namespaces";

/// Inline rule: `"true"` makes the copies image pull secrets: Pods in target namespaces get
/// the copy in `spec.imagePullSecrets` (SPEC §10). Only for Secrets of a [`PULL_SECRET_TYPES`]
/// type.
pub const IMAGE_PULL_SECRET_ANNOTATION: &str = "copyrator.io/image-pull-secret";
/// Inline rule: `"true"` makes the copies read-only (SPEC §4 item 11): the
/// `/admission/read-only` webhook denies their UPDATE and DELETE by anyone but copyrator.
/// Also the label copyrator puts on such copies, which that webhook's objectSelector keys on.
pub const READ_ONLY: &str = "copyrator.io/read-only";
/// Inline rule: the keys of the source's data the copies carry, comma-separated, each a key's
/// name or `from=to` to rename it (`"ca.crt,tls.crt=server.pem"`); every key when absent
/// (SPEC §3.2).
pub const KEYS_ANNOTATION: &str = "copyrator.io/keys";
/// Pod annotation: `"false"` leaves the Pod's `spec.imagePullSecrets` alone.
pub const INJECT_ANNOTATION: &str = "copyrator.io/inject";
/// Secret types a kubelet reads registry credentials from.
pub const PULL_SECRET_TYPES: [&str; 2] =
    ["kubernetes.io/dockerconfigjson", "kubernetes.io/dockercfg"];

/// Namespace annotation: comma-separated names or `*` patterns of the namespaces whose
/// untrusted sources may copy into this namespace (SPEC §9.2).
pub const ACCEPT_FROM_ANNOTATION: &str = "copyrator.io/accept-from";

/// Every copy carries `app.kubernetes.io/managed-by: copyrator`; objects without it are never
/// modified or deleted.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "copyrator";
/// Label on copies: uid of the source they were copied from (selectable, so a source's copies are
/// one label-selected LIST away).
pub const SOURCE_UID_LABEL: &str = "copyrator.io/source-uid";
/// Annotation on copies: `<namespace>/<name>` of the source.
pub const SOURCE_ANNOTATION: &str = "copyrator.io/source";
/// Annotation on copies whose kind is not their source's (a ConfigMap made of a Secret's
/// certificates, SPEC §3.2): the source's kind, as `--copy-kinds` names kinds. Absent, the
/// source is of the copy's own kind.
pub const SOURCE_KIND_ANNOTATION: &str = "copyrator.io/source-kind";
/// The `copyrator.io/source-kind` of a bundle's copies (SPEC §3.2, Bundles): their
/// `copyrator.io/source` is `copyrule/<name>`, the CopyRule that combines their sources.
pub const BUNDLE_SOURCE_KIND: &str = "CopyRule";
/// Annotation on copies: hash of the copied content (payload and carried metadata).
pub const CONTENT_HASH_ANNOTATION: &str = "copyrator.io/content-hash";
/// Annotation on copies: the rule that made the copy (`inline`, `copyrule/<name>`, or
/// `namespacedcopyrule/<namespace>/<name>`).
pub const RULE_ANNOTATION: &str = "copyrator.io/rule";
/// How [`RULE_ANNOTATION`] begins for a NamespacedCopyRule's copy.
pub const NAMESPACED_RULE_MARK: &str = "namespacedcopyrule";
/// Annotation on copies: what happens to the copy when no rule wants it any more
/// (`Delete` or `Retain`), so the answer survives the deletion of its rule.
pub const DELETION_POLICY_ANNOTATION: &str = "copyrator.io/deletion-policy";
/// On a create-once copy (SPEC §3.4), the rule that made it: said, not owned (the object
/// carries none of copyrator's ownership marks, and belongs to its namespace).
pub const CREATED_BY_ANNOTATION: &str = "copyrator.io/created-by";

/// Field manager of every write copyrator makes. The copies webhook ignores updates made under
/// this name (they are copyrator's own), and the reconciler treats fields owned by any other
/// manager as a sign of a hand edit.
pub const FIELD_MANAGER: &str = "copyrator";

/// Label selector matching every copy copyrator manages.
pub const MANAGED_SELECTOR: &str = "app.kubernetes.io/managed-by=copyrator";

/// Label selector matching every opted-in source.
pub const SOURCE_SELECTOR: &str = "copyrator.io/source=true";

/// Label selector matching every object that is not one of copyrator's copies: a copy is
/// never a source (SPEC §9.6), so every selection of sources adds it on the server side.
pub const NOT_A_COPY_SELECTOR: &str = "app.kubernetes.io/managed-by!=copyrator";

/// Label selector matching every opted-in source that is not a copy.
pub const OPTED_IN_SELECTOR: &str =
    "copyrator.io/source=true,app.kubernetes.io/managed-by!=copyrator";

/// `selector` (label-selector syntax, possibly empty) narrowed to objects that are not copies.
pub fn not_a_copy(selector: &str) -> String {
    if selector.is_empty() {
        NOT_A_COPY_SELECTOR.to_string()
    } else {
        format!("{selector},{NOT_A_COPY_SELECTOR}")
    }
}

/// The tools that find what they manage by keys of their own, each by the domains of those
/// keys' prefixes: a key whose prefix is one of these domains, or a subdomain of one, is never
/// carried to a copy, whatever its name (SPEC §3; which keys each tool writes and why they are
/// stripped: docs/carried-metadata.md). By family, not key by key: a tool's next key is
/// stripped too.
pub const TRACKING_FAMILIES: &[(&str, &[&str])] = &[
    ("Flux", &["fluxcd.io"]),
    ("Argo CD", &["argocd.argoproj.io"]),
    ("Helm", &["helm.sh"]),
    ("kubectl", &["kubectl.kubernetes.io"]),
    (
        "kustomize, kpt",
        &[
            "config.kubernetes.io",
            "config.k8s.io",
            "cli-utils.sigs.k8s.io",
        ],
    ),
    ("Carvel kapp", &["k14s.io"]),
    (
        "Rancher Fleet, k3s",
        &[
            "fleet.cattle.io",
            "objectset.rio.cattle.io",
            "helm.cattle.io",
        ],
    ),
    (
        "Config Sync",
        &["configsync.gke.io", "configmanagement.gke.io"],
    ),
];

/// Whether `key`'s prefix (before its `/`) is `domain` or a subdomain of it.
fn in_domain(key: &str, domain: &str) -> bool {
    let Some((prefix, _)) = key.split_once('/') else {
        return false;
    };
    prefix == domain
        || prefix
            .strip_suffix(domain)
            .is_some_and(|sub| sub.ends_with('.'))
}

/// Whether `key` belongs to a tool of [`TRACKING_FAMILIES`].
pub fn is_tracking_key(key: &str) -> bool {
    TRACKING_FAMILIES
        .iter()
        .flat_map(|(_, domains)| domains.iter())
        .any(|domain| in_domain(key, domain))
}

/// Metadata keys that are never carried from a source to its copies: tracking and tooling
/// metadata (so GitOps tools neither adopt nor prune copies), copyrator's own configuration and
/// marks, and keys whose value must be copyrator's.
pub fn is_carried_key(key: &str) -> bool {
    const EXACT: &[&str] = &[
        // Argo CD's default tracking label (its own domain's keys are a family).
        "app.kubernetes.io/instance",
        "app.kubernetes.io/managed-by",
        "deployment.kubernetes.io/revision",
    ];
    const PREFIXES: &[&str] = &[
        "copyrator.io/",
        "kubernetes.io/service-account.",
        "reflector.v1.k8s.emberstack.com/",
        "replicator.v1.mittwald.de/",
        "kubed.appscode.com/",
    ];
    !EXACT.contains(&key) && !PREFIXES.iter().any(|p| key.starts_with(p)) && !is_tracking_key(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_match_the_keys() {
        assert_eq!(
            MANAGED_SELECTOR,
            format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}")
        );
        assert_eq!(SOURCE_SELECTOR, format!("{SOURCE_LABEL}=true"));
        assert_eq!(
            NOT_A_COPY_SELECTOR,
            format!("{MANAGED_BY_LABEL}!={MANAGED_BY_VALUE}")
        );
        assert_eq!(OPTED_IN_SELECTOR, not_a_copy(SOURCE_SELECTOR));
        assert_eq!(not_a_copy(""), NOT_A_COPY_SELECTOR);
    }

    /// One line per family: keys its tool writes, which no copy carries, and look-alikes
    /// (another domain that ends the same, the domain as a key's name, no prefix), which
    /// copies carry.
    #[test]
    fn every_key_of_a_tracking_family_is_stripped_and_look_alikes_are_not() {
        let table: &[(&str, &[&str], &[&str])] = &[
            (
                "Flux",
                &[
                    "helm.toolkit.fluxcd.io/name",
                    "helm.toolkit.fluxcd.io/namespace",
                    "kustomize.toolkit.fluxcd.io/name",
                    "kustomize.toolkit.fluxcd.io/checksum",
                    "kustomize.toolkit.fluxcd.io/prune",
                    "source.toolkit.fluxcd.io/any-future-key",
                    "reconcile.fluxcd.io/requestedAt",
                    "fluxcd.io/sync-gc-mark",
                ],
                &[
                    "notfluxcd.io/name",
                    "fluxcd.io.example.com/name",
                    "example.com/fluxcd.io",
                ],
            ),
            (
                "Argo CD",
                &[
                    "argocd.argoproj.io/tracking-id",
                    "argocd.argoproj.io/instance",
                    "argocd.argoproj.io/sync-options",
                    "argocd.argoproj.io/compare-options",
                    "app.kubernetes.io/instance",
                ],
                &[
                    "workflows.argoproj.io/workflow",
                    "myargocd.argoproj.io/x",
                    "argocd/x",
                ],
            ),
            (
                "Helm",
                &[
                    "meta.helm.sh/release-name",
                    "meta.helm.sh/release-namespace",
                    "helm.sh/chart",
                    "helm.sh/resource-policy",
                    "helm.sh/hook",
                ],
                &["helm.shop/chart", "myhelm.sh/chart", "helm", "chart"],
            ),
            (
                "kubectl",
                &[
                    "kubectl.kubernetes.io/last-applied-configuration",
                    "kubectl.kubernetes.io/restartedAt",
                ],
                &["kubernetes.io/description", "notkubectl.kubernetes.io/x"],
            ),
            (
                "kustomize, kpt",
                &[
                    "config.kubernetes.io/origin",
                    "config.kubernetes.io/local-config",
                    "internal.config.kubernetes.io/path",
                    "kustomize.config.k8s.io/id",
                    "kustomize.config.k8s.io/needs-hash",
                    "config.k8s.io/owning-inventory",
                    "cli-utils.sigs.k8s.io/inventory-id",
                ],
                &[
                    "myconfig.kubernetes.io/x",
                    "app.kubernetes.io/config",
                    "sigs.k8s.io/x",
                ],
            ),
            (
                "Carvel kapp",
                &[
                    "kapp.k14s.io/app",
                    "kapp.k14s.io/association",
                    "kapp.k14s.io/identity",
                    "kapp.k14s.io/original",
                    "kbld.k14s.io/images",
                ],
                &["k14s.io.example.com/app", "kapp/app"],
            ),
            (
                "Rancher Fleet, k3s",
                &[
                    "fleet.cattle.io/bundle-name",
                    "objectset.rio.cattle.io/hash",
                    "objectset.rio.cattle.io/applied",
                    "objectset.rio.cattle.io/owner-name",
                    "helmcharts.helm.cattle.io/chart",
                ],
                // Rancher's project annotation is not a tracking key: Rancher reads it.
                &["field.cattle.io/projectId", "cattle.io/creator"],
            ),
            (
                "Config Sync",
                &[
                    "configsync.gke.io/resource-id",
                    "configsync.gke.io/manager",
                    "configmanagement.gke.io/managed",
                    "configmanagement.gke.io/token",
                ],
                &["gke.io/x", "cloud.google.com/neg"],
            ),
        ];
        let families: Vec<&str> = TRACKING_FAMILIES.iter().map(|(f, _)| *f).collect();
        let tested: Vec<&str> = table.iter().map(|(f, _, _)| *f).collect();
        assert_eq!(tested, families, "one line per family");
        for (family, stripped, carried) in table {
            for key in *stripped {
                assert!(!is_carried_key(key), "{family}: {key} must not be carried");
            }
            for key in *carried {
                assert!(
                    is_carried_key(key),
                    "{family}: look-alike {key} must be carried"
                );
            }
        }
    }

    #[test]
    fn copyrator_and_peer_metadata_is_not_carried() {
        for key in [
            "app.kubernetes.io/managed-by",
            "copyrator.io/source",
            "copyrator.io/namespace-selector",
            "copyrator.io/namespaces",
            "deployment.kubernetes.io/revision",
            "kubernetes.io/service-account.name",
            // The peers' configuration and marks (`copyrator migrate`): a copy carrying them
            // would look like a peer's source or copy.
            "reflector.v1.k8s.emberstack.com/reflects",
            "replicator.v1.mittwald.de/replicate-to",
            "kubed.appscode.com/sync",
            "kubed.appscode.com/origin.name",
        ] {
            assert!(!is_carried_key(key), "{key} must not be carried");
        }
    }

    #[test]
    fn ordinary_metadata_is_carried() {
        for key in ["team", "app.kubernetes.io/name", "example.com/owner", "env"] {
            assert!(is_carried_key(key), "{key} must be carried");
        }
    }
}
