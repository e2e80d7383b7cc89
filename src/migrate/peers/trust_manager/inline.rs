//! The sources of a Bundle or ClusterBundle that are not objects: the default CAs become a
//! bundle's `{defaultCAs: true}` source (SPEC §3.2, Bundles), and inline certificates a
//! ConfigMap in the trust namespace, printed with the CopyRule, and a source naming it.

use serde_json::{Value, json};

use crate::{bundle, copyrule::BundleSourceSpec, selector};

/// The key of the inline certificates' ConfigMap.
pub(super) const INLINE_KEY: &str = "ca.crt";

/// The `{defaultCAs: true}` source, and what the notes say of it (`at`: the field that asked).
pub(super) fn default_cas(at: &str) -> (BundleSourceSpec, String) {
    (
        BundleSourceSpec {
            default_cas: true,
            ..Default::default()
        },
        format!(
            "{at}: the default CAs are copyrator's (Mozilla's roots from the webpki-root-certs \
             package, or the PEM file given with --default-cas-file), where trust-manager's \
             came from Debian's ca-certificates: the same Mozilla roots, possibly of another \
             release. For exactly the same set, run copyrator with --default-cas-file \
             /etc/ssl/certs/ca-certificates.crt from a Debian image (Helm value \
             defaultCAs.configMap)"
        ),
    )
}

/// The certificates of one inline value (at `at`), or the note saying why they are left out.
pub(super) fn inline_certificates(at: &str, pem: &str) -> Result<String, String> {
    match bundle::certificates(pem.as_bytes()) {
        Ok(_) => Ok(pem.trim().to_string() + "\n"),
        Err(why) => Err(format!(
            "{at}: the value {why}; a bundle takes PEM certificates only; left out"
        )),
    }
}

/// The ConfigMap holding the inline certificates `pems` of Bundle `bundle` in the trust
/// namespace, the source that reads it, and the note saying so; or the note saying why not.
pub(super) fn inline_source(
    bundle: &str,
    trust_namespace: &str,
    pems: &[String],
) -> Result<(Value, BundleSourceSpec, String), String> {
    let name = format!("trust-manager-{bundle}-inline");
    if !selector::is_dns_subdomain(&name) {
        return Err(format!(
            "inline certificates: {name:?} is too long a name for the ConfigMap to hold them; \
             put them in a ConfigMap in {trust_namespace} and add it to spec.sources; left out"
        ));
    }
    let configmap = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": trust_namespace},
        "data": {INLINE_KEY: pems.concat()},
    });
    let source = BundleSourceSpec {
        kind: "ConfigMap".into(),
        namespace: trust_namespace.to_string(),
        name: Some(name.clone()),
        key: INLINE_KEY.into(),
        ..Default::default()
    };
    let note = format!(
        "inline certificates: a CopyRule copies certificates from Secrets and ConfigMaps, so \
         they are printed as ConfigMap {trust_namespace}/{name} (key {INLINE_KEY}), a source \
         of this bundle: apply it with the CopyRule, and edit it to change them"
    );
    Ok((configmap, source, note))
}
