//! `copyrator manifests hub-join`: what joining a member cluster to a hub takes (SPEC §14),
//! one YAML stream per side, so that joining is one `kubectl apply` on each. The hub side is
//! the member's identity there (namespace, ServiceAccount, a token Secret the hub's token
//! controller fills); what it may read is granted by the hub's copyrator as rules place
//! sources on it. The member side is the HubLink with its ceiling and the Secret holding the
//! token, in copyrator's own namespace.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::{hub::member_identity, marks, selector::is_dns_label};

/// Which side's manifests to print.
pub use crate::cli::HubJoinSide as Side;

/// What a join needs; see `copyrator manifests hub-join --help`.
#[derive(Clone, Debug)]
pub struct Join {
    /// The member's name on the hub (a CopyRule's `spec.clusters.names`).
    pub cluster: String,
    /// The hub's namespace of members' identities (`serve --hub-members-namespace`).
    pub members_namespace: String,
    /// The HubLink's name on the member.
    pub link: String,
    /// copyrator's own namespace on the member, where the token Secret lives.
    pub member_namespace: String,
    /// The hub API server's URL.
    pub server: Option<String>,
    /// PEM of the CA that signed the hub API server's certificate.
    pub ca: Option<Vec<u8>>,
    /// The member's token on the hub.
    pub token: Option<String>,
    /// The ceiling: hub namespaces whose sources the member accepts, those of them trusted,
    /// and the member namespaces that may receive (`key=value` labels, ANDed).
    pub source_namespaces: Vec<String>,
    pub trusted_source_namespaces: Vec<String>,
    pub namespace_labels: Vec<(String, String)>,
    /// The hub namespace of the member's ClusterProfile, whose labels selectors match.
    pub cluster_profile_namespace: Option<String>,
}

/// The Secret of the member's token on either side.
const TOKEN_SECRET: &str = "copyrator-hub-token";

impl Join {
    /// The manifests of `side`, as a YAML stream; an error names what is missing or wrong.
    pub fn manifests(&self, side: Side) -> Result<String, String> {
        for (what, name) in [
            ("--cluster", &self.cluster),
            ("--members-namespace", &self.members_namespace),
            ("--member-namespace", &self.member_namespace),
        ] {
            if !is_dns_label(name) {
                return Err(format!("{what} {name:?} is not a DNS label"));
            }
        }
        if let Some(ns) = self.cluster_profile_namespace.as_ref()
            && !is_dns_label(ns)
        {
            return Err(format!(
                "--cluster-profile-namespace {ns:?} is not a DNS label"
            ));
        }
        let docs = match side {
            Side::Hub => self.hub_side(),
            Side::Member => self.member_side()?,
        };
        let mut out = String::new();
        for doc in docs {
            out.push_str("---\n");
            out.push_str(&serde_saphyr::to_string(&doc).map_err(|e| e.to_string())?);
        }
        Ok(out)
    }

    fn hub_side(&self) -> Vec<Value> {
        let identity = member_identity(&self.cluster);
        let labels = json!({marks::MANAGED_BY_LABEL: marks::MANAGED_BY_VALUE, "copyrator.io/member": self.cluster});
        vec![
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": self.members_namespace}}),
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": identity, "namespace": self.members_namespace, "labels": labels},
                   "automountServiceAccountToken": false}),
            // Filled by the hub's token controller; revoked by deleting it. Read it with
            // kubectl get secret -n NS copyrator-hub-token-CLUSTER -o jsonpath='{.data.token}'.
            json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
                   "metadata": {"name": format!("{TOKEN_SECRET}-{}", self.cluster),
                                "namespace": self.members_namespace, "labels": labels,
                                "annotations": {"kubernetes.io/service-account.name": identity}}}),
        ]
    }

    fn member_side(&self) -> Result<Vec<Value>, String> {
        let server = self
            .server
            .as_deref()
            .filter(|s| s.starts_with("https://"))
            .ok_or("--server https://HUB:PORT is needed for the member side")?;
        let ca = self
            .ca
            .as_deref()
            .ok_or("--ca-file FILE (PEM of the hub's CA) is needed for the member side")?;
        if !String::from_utf8_lossy(ca).contains("-----BEGIN CERTIFICATE-----") {
            return Err(
                "--ca-file is not a PEM certificate (no -----BEGIN CERTIFICATE----- line): \
                 give the hub API server's CA as PEM, e.g. its kubeconfig's \
                 certificate-authority-data, base64-decoded"
                    .into(),
            );
        }
        let token = self
            .token
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or(
                "--token-file FILE is needed for the member side: the token of the hub side's \
             ServiceAccount (its Secret's data.token, base64-decoded, or kubectl create token)",
            )?;
        if self.source_namespaces.is_empty() {
            return Err(
                "--source-namespaces: the hub namespaces the member accepts (the ceiling)".into(),
            );
        }
        if self.namespace_labels.is_empty() {
            return Err(
                "--namespace-selector KEY=VALUE: which member namespaces may receive".into(),
            );
        }
        let match_labels: serde_json::Map<String, Value> = self
            .namespace_labels
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        let encoded = base64::engine::general_purpose::STANDARD;
        let mut spec = json!({
            "server": server,
            "caBundle": encoded.encode(ca),
            "credentialSecret": {"name": TOKEN_SECRET},
            "clusterName": self.cluster,
            "ceiling": {
                "sourceNamespaces": self.source_namespaces,
                "trustedSourceNamespaces": self.trusted_source_namespaces,
                "namespaceSelector": {"matchLabels": match_labels},
            },
        });
        if let Some(ns) = &self.cluster_profile_namespace {
            spec["clusterProfileNamespace"] = json!(ns);
        }
        Ok(vec![
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                   "metadata": {"name": TOKEN_SECRET, "namespace": self.member_namespace},
                   "data": {"token": encoded.encode(token)}}),
            json!({"apiVersion": "copyrator.io/v1alpha1", "kind": "HubLink",
            "metadata": {"name": self.link},
            "spec": spec}),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join() -> Join {
        Join {
            cluster: "east".into(),
            members_namespace: "copyrator-members".into(),
            link: "hub".into(),
            member_namespace: "copyrator".into(),
            server: Some("https://hub.example:6443".into()),
            ca: Some(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".to_vec()),
            token: Some("tok\n".into()),
            source_namespaces: vec!["platform".into()],
            trusted_source_namespaces: vec!["platform".into()],
            namespace_labels: vec![("registry".into(), "hub".into())],
            cluster_profile_namespace: None,
        }
    }

    fn docs(yaml: &str) -> Vec<Value> {
        yaml.split("---\n")
            .filter(|d| !d.trim().is_empty())
            .map(|d| serde_saphyr::from_str(d).unwrap())
            .collect()
    }

    #[test]
    fn the_hub_side_is_the_members_identity_and_its_token_secret() {
        let hub = docs(&join().manifests(Side::Hub).unwrap());
        let kinds: Vec<&str> = hub.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["Namespace", "ServiceAccount", "Secret"]);
        assert_eq!(hub[1]["metadata"]["name"], "copyrator-member-east");
        assert_eq!(
            hub[2]["metadata"]["annotations"]["kubernetes.io/service-account.name"],
            "copyrator-member-east"
        );
        // No Role: what the member may read is granted as rules place sources on it.
        assert!(
            hub.iter()
                .all(|d| !d["kind"].as_str().unwrap().contains("Role"))
        );
    }

    #[test]
    fn the_member_side_is_a_link_within_its_ceiling_and_the_token() {
        let member = docs(&join().manifests(Side::Member).unwrap());
        let link: crate::hub::HubLink = serde_json::from_value(member[1].clone()).unwrap();
        assert_eq!(link.spec.cluster_name, "east");
        assert_eq!(link.spec.credential_secret.name, TOKEN_SECRET);
        assert_eq!(member[0]["data"]["token"], "dG9r", "the token, trimmed");
        assert_eq!(member[0]["metadata"]["namespace"], "copyrator");
        assert_eq!(link.spec.cluster_profile_namespace, None);
        let profiled = Join {
            cluster_profile_namespace: Some("copyrator-members".into()),
            ..join()
        };
        let member = docs(&profiled.manifests(Side::Member).unwrap());
        let link: crate::hub::HubLink = serde_json::from_value(member[1].clone()).unwrap();
        assert_eq!(
            link.spec.cluster_profile_namespace.as_deref(),
            Some("copyrator-members"),
            "--cluster-profile-namespace lets selectors place on the member"
        );
    }

    #[test]
    fn a_member_side_without_what_it_needs_says_which() {
        for (unset, flag) in [
            (
                Join {
                    server: None,
                    ..join()
                },
                "--server",
            ),
            (
                Join {
                    ca: Some(b"not pem".to_vec()),
                    ..join()
                },
                "--ca-file",
            ),
            (
                Join {
                    token: Some(" ".into()),
                    ..join()
                },
                "--token-file",
            ),
            (
                Join {
                    source_namespaces: vec![],
                    ..join()
                },
                "--source-namespaces",
            ),
            (
                Join {
                    namespace_labels: vec![],
                    ..join()
                },
                "--namespace-selector",
            ),
            (
                Join {
                    cluster: "East!".into(),
                    ..join()
                },
                "--cluster",
            ),
            (
                Join {
                    cluster_profile_namespace: Some("a/b".into()),
                    ..join()
                },
                "--cluster-profile-namespace",
            ),
        ] {
            let err = unset.manifests(Side::Member).unwrap_err();
            assert!(err.contains(flag), "{flag}: {err}");
        }
    }
}
