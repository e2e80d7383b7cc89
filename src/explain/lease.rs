//! The running copyrator's Lease, which `explain` reads its policy from (SPEC §11.1): only in
//! copyrator's own namespace, given or learnt from its webhook configuration's Service. A
//! Lease of that name elsewhere could be anyone's: it is ignored, and said.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::{
    api::{admissionregistration::v1::ValidatingWebhookConfiguration, coordination::v1::Lease},
    jiff::Timestamp,
};
use kube::{Api, Client, api::ListParams};

use crate::{cli::LeaseArgs, pipeline::published::Published};

/// The Lease a policy was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRef {
    pub namespace: String,
    pub name: String,
    /// Someone holds it and renewed it within its duration.
    pub held: bool,
}

/// What looking for the running copyrator's Lease found.
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup {
    /// Boxed: the policy published is large beside a reason.
    Found(LeaseRef, Box<Published>),
    /// None to be read, and why.
    NotFound(String),
}

/// What looking for the running copyrator's Lease found, and the Leases of that name it
/// ignored.
#[derive(Clone, Debug, PartialEq)]
pub struct Search {
    /// The Lease in copyrator's own namespace, or why there is none to read.
    pub lookup: Lookup,
    /// Leases of that name elsewhere that publish a policy: ignored, and said.
    pub ignored: Vec<LeaseRef>,
    /// The namespace they were ignored for, and how it was known.
    pub own_namespace: OwnNamespace,
}

/// copyrator's own namespace, where its Lease lives, and how explain knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnNamespace {
    /// `--lease-namespace`.
    Flag(String),
    /// The namespace of the Service the named webhook configuration calls.
    WebhookService {
        namespace: String,
        configuration: String,
    },
}

impl OwnNamespace {
    /// The namespace's name.
    pub fn name(&self) -> &str {
        match self {
            OwnNamespace::Flag(ns) | OwnNamespace::WebhookService { namespace: ns, .. } => ns,
        }
    }

    fn origin(&self) -> String {
        match self {
            OwnNamespace::Flag(_) => "--lease-namespace".into(),
            OwnNamespace::WebhookService { configuration, .. } => {
                format!("the Service of ValidatingWebhookConfiguration {configuration}")
            }
        }
    }
}

impl Search {
    /// One note per ignored Lease: only its namespace and name, nothing it says (whoever may
    /// write a Lease in that namespace chose its content).
    pub fn ignored_notes(&self) -> Vec<String> {
        let own = &self.own_namespace;
        self.ignored
            .iter()
            .map(|l| {
                format!(
                    "Lease {}/{} ignored: not in copyrator's namespace {} (from {}), and a Lease \
                     elsewhere may be anyone's",
                    l.namespace,
                    l.name,
                    own.name(),
                    own.origin()
                )
            })
            .collect()
    }
}

/// Finds the Lease the running copyrator publishes its policy on, only in copyrator's own
/// namespace (SPEC §11.1): `--lease-namespace`, else the namespace of the Service that its
/// webhook configuration (`webhook_configuration`, default the Lease's name) calls, else an
/// error asking for `--lease-namespace`. A Lease of that name elsewhere could be anyone's: it
/// is ignored, and named in `ignored`. A Lease that cannot be read is not an error: explain
/// goes on with its flags, and says so.
pub async fn find_lease(
    client: &Client,
    args: &LeaseArgs,
    webhook_configuration: Option<&str>,
) -> anyhow::Result<Search> {
    let name = &args.lease_name;
    let own_namespace = match &args.lease_namespace {
        Some(namespace) => OwnNamespace::Flag(namespace.clone()),
        None => {
            let configuration = webhook_configuration.unwrap_or(name);
            OwnNamespace::WebhookService {
                namespace: webhook_namespace(client, configuration).await?,
                configuration: configuration.to_string(),
            }
        }
    };
    let namespace = own_namespace.name();
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let lookup = match api.get_opt(name).await {
        Ok(Some(lease)) => published(&lease)
            .map(|p| {
                Lookup::Found(
                    LeaseRef {
                        namespace: namespace.to_string(),
                        name: name.clone(),
                        held: held(&lease, Timestamp::now()),
                    },
                    Box::new(p),
                )
            })
            .unwrap_or_else(|| {
                Lookup::NotFound(format!(
                    "Lease {namespace}/{name} publishes no policy: leader election off, or an older copyrator"
                ))
            }),
        Ok(None) => Lookup::NotFound(format!(
            "no Lease {namespace}/{name} (copyrator's namespace, from {})",
            own_namespace.origin()
        )),
        Err(e) => Lookup::NotFound(format!("reading Lease {namespace}/{name}: {e}")),
    };
    let ignored = elsewhere(client, name, namespace).await;
    Ok(Search {
        lookup,
        ignored,
        own_namespace,
    })
}

/// Leases named `name` outside `own_namespace` that publish a policy. Only to say they were
/// ignored: a reader who may not list Leases everywhere is told nothing about them.
async fn elsewhere(client: &Client, name: &str, own_namespace: &str) -> Vec<LeaseRef> {
    let api: Api<Lease> = Api::all(client.clone());
    let Ok(list) = api
        .list(&ListParams::default().fields(&format!("metadata.name={name}")))
        .await
    else {
        return Vec::new();
    };
    let now = Timestamp::now();
    list.items
        .iter()
        .filter(|l| published(l).is_some())
        .filter_map(|l| {
            let namespace = l.metadata.namespace.clone()?;
            (namespace != own_namespace).then(|| LeaseRef {
                namespace,
                name: name.to_string(),
                held: held(l, now),
            })
        })
        .collect()
}

/// The namespace of the Service that ValidatingWebhookConfiguration `configuration` calls:
/// copyrator's own. Only cluster administrators write webhook configurations, so unlike a
/// Lease, no tenant can plant one.
async fn webhook_namespace(client: &Client, configuration: &str) -> anyhow::Result<String> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let ask = "give --lease-namespace (the namespace copyrator runs in), or \
               --webhook-configuration (the name of its ValidatingWebhookConfiguration)";
    match api.get_opt(configuration).await {
        Ok(Some(found)) => service_namespace(&found).map_err(|why| {
            anyhow::anyhow!(
                "copyrator's namespace is unknown: ValidatingWebhookConfiguration {configuration} {why}: {ask}"
            )
        }),
        Ok(None) => anyhow::bail!(
            "copyrator's namespace is unknown: no ValidatingWebhookConfiguration {configuration}: {ask}"
        ),
        Err(e) => anyhow::bail!(
            "copyrator's namespace is unknown: reading ValidatingWebhookConfiguration {configuration}: {e}: {ask}"
        ),
    }
}

/// The one namespace of the Services that `configuration`'s copyrator webhooks (`*.copyrator.io`)
/// call; `Err` says why there is none.
fn service_namespace(configuration: &ValidatingWebhookConfiguration) -> Result<String, String> {
    let namespaces: BTreeSet<&str> = configuration
        .webhooks
        .iter()
        .flatten()
        .filter(|w| w.name.ends_with(".copyrator.io"))
        .filter_map(|w| Some(w.client_config.service.as_ref()?.namespace.as_str()))
        .collect();
    let mut found = namespaces.iter();
    match (found.next(), found.next()) {
        (Some(one), None) => Ok(one.to_string()),
        (None, _) => Err("has no copyrator webhook that calls a Service (called by URL?)".into()),
        (Some(_), Some(_)) => Err(format!(
            "calls Services in several namespaces ({})",
            namespaces.into_iter().collect::<Vec<_>>().join(", ")
        )),
    }
}

fn published(lease: &Lease) -> Option<Published> {
    let annotations: &BTreeMap<String, String> = lease.metadata.annotations.as_ref()?;
    Published::is_published(annotations).then(|| Published::read(annotations))
}

/// Whether someone holds `lease` and renewed it within its duration.
fn held(lease: &Lease, now: Timestamp) -> bool {
    let Some(spec) = &lease.spec else {
        return false;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    let (Some(renewed), Some(secs)) = (&spec.renew_time, spec.lease_duration_seconds) else {
        return false;
    };
    !holder.is_empty() && now.duration_since(renewed.0).as_secs() <= i64::from(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(ns: &str, held: bool) -> LeaseRef {
        LeaseRef {
            namespace: ns.into(),
            name: "copyrator".into(),
            held,
        }
    }

    fn configuration(webhooks: &[(&str, Option<&str>)]) -> ValidatingWebhookConfiguration {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "copyrator"},
            "webhooks": webhooks.iter().map(|(name, namespace)| {
                let client = match namespace {
                    Some(ns) => serde_json::json!({"service": {"namespace": ns, "name": "copyrator"}}),
                    None => serde_json::json!({"url": "https://127.0.0.1:8443/admission/sources"}),
                };
                serde_json::json!({
                    "name": name, "clientConfig": client, "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                })
            }).collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    #[test]
    fn copyrators_namespace_is_the_one_its_webhooks_call() {
        let ours = configuration(&[
            ("sources.copyrator.io", Some("ops")),
            ("read-only.copyrator.io", Some("ops")),
            ("other.example.com", Some("elsewhere")),
        ]);
        assert_eq!(service_namespace(&ours), Ok("ops".into()));
        let by_url = configuration(&[("sources.copyrator.io", None)]);
        assert!(service_namespace(&by_url).unwrap_err().contains("URL"));
        let none = configuration(&[("other.example.com", Some("elsewhere"))]);
        assert!(service_namespace(&none).is_err());
        let split = configuration(&[
            ("sources.copyrator.io", Some("a")),
            ("rules.copyrator.io", Some("b")),
        ]);
        assert!(
            service_namespace(&split)
                .unwrap_err()
                .contains("several namespaces (a, b)")
        );
    }

    #[test]
    fn a_lease_elsewhere_is_named_as_ignored_by_its_namespace_and_name_only() {
        let search = Search {
            lookup: Lookup::NotFound("no Lease ops/copyrator".into()),
            ignored: vec![lease("tenant-a", true)],
            own_namespace: OwnNamespace::WebhookService {
                namespace: "ops".into(),
                configuration: "copyrator".into(),
            },
        };
        assert_eq!(
            search.ignored_notes(),
            [
                "Lease tenant-a/copyrator ignored: not in copyrator's namespace ops (from the \
              Service of ValidatingWebhookConfiguration copyrator), and a Lease elsewhere may be \
              anyone's"
            ]
        );
    }
}
