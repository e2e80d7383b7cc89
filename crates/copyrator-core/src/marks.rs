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
/// Annotation on copies: the rule that made the copy (`inline` or `copyrule/<name>`).
pub const RULE_ANNOTATION: &str = "copyrator.io/rule";
/// Annotation on copies: what happens to the copy when no rule wants it any more
/// (`Delete` or `Retain`), so the answer survives the deletion of its rule.
pub const DELETION_POLICY_ANNOTATION: &str = "copyrator.io/deletion-policy";

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

/// Metadata keys that are never carried from a source to its copies: tracking and tooling
/// metadata (so GitOps tools neither adopt nor prune copies), copyrator's own configuration and
/// marks, and keys whose value must be copyrator's.
pub fn is_carried_key(key: &str) -> bool {
    const EXACT: &[&str] = &[
        "kubectl.kubernetes.io/last-applied-configuration",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/managed-by",
        "deployment.kubernetes.io/revision",
        "kapp.k14s.io/identity",
        "kustomize.toolkit.fluxcd.io/checksum",
    ];
    const PREFIXES: &[&str] = &[
        "copyrator.io/",
        "meta.helm.sh/",
        "helm.sh/",
        "argocd.argoproj.io/",
        "kustomize.toolkit.fluxcd.io/",
        "kapp.k14s.io/",
        "kubernetes.io/service-account.",
        "reflector.v1.k8s.emberstack.com/",
        "replicator.v1.mittwald.de/",
        "kubed.appscode.com/",
    ];
    !EXACT.contains(&key) && !PREFIXES.iter().any(|p| key.starts_with(p))
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

    #[test]
    fn tracking_and_tooling_metadata_is_not_carried() {
        for key in [
            "kubectl.kubernetes.io/last-applied-configuration",
            "meta.helm.sh/release-name",
            "helm.sh/chart",
            "argocd.argoproj.io/tracking-id",
            "app.kubernetes.io/instance",
            "app.kubernetes.io/managed-by",
            "copyrator.io/source",
            "copyrator.io/namespace-selector",
            "copyrator.io/namespaces",
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
