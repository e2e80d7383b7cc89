//! What a member reads from its hub (SPEC §14.2): with the token in the link's credential
//! Secret (read again every round, so a replaced token is used at once, with no restart), its
//! own ClusterProfile's labels, the hub's CopyRules, and each source placed on this member,
//! by name; one source or one rule again when a watch says it changed. Every read has a short timeout: a frozen hub is an
//! unreachable one, never a stuck member.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, api::ListParams};

use super::error::{HUB_TIMEOUT, HubError, classify};
use crate::{
    cluster::client::{Transport, builder_with},
    content,
    copyrule::CopyRule,
    hub::{HubLink, HubSource, LinkSettings, Placement, parse_ca_bundle, place, placed_on},
    model::{Object, ObjectKey, SourceInfo},
    plan::Contents,
};

/// CopyRules per page of a full read.
const RULES_PAGE: u32 = 500;

/// One round's reading of a hub: what it places here, each placed source as read, and the
/// payloads of those present (as a plan takes them).
#[derive(Clone)]
pub struct HubRead {
    pub placement: Arc<Placement>,
    pub sources: BTreeMap<ObjectKey, HubSource>,
    pub contents: Contents,
    /// The `metadata.generation` of each hub CopyRule placed here (taken or refused): a watch
    /// event of another rule, or of one of these whose spec did not change, changes nothing.
    pub generations: BTreeMap<String, Option<i64>>,
    /// The labels of this cluster's ClusterProfile on the hub, which rules' selectors match;
    /// `None`: it has none readable (or the link names no namespace for it).
    pub labels: Option<BTreeMap<String, String>>,
}

/// The member's token for `link`, read now from its Secret in `namespace`.
pub async fn read_token(
    member: &Client,
    namespace: &str,
    link: &HubLink,
) -> Result<String, HubError> {
    let secret_ref = &link.spec.credential_secret;
    let key = secret_ref.key.as_deref().unwrap_or("token");
    let what = format!("{namespace}/{} key {key}", secret_ref.name);
    let secret = Api::<Secret>::namespaced(member.clone(), namespace)
        .get_opt(&secret_ref.name)
        .await
        .map_err(|e| HubError::Credential(what.clone(), e.to_string()))?
        .ok_or_else(|| HubError::Credential(what.clone(), "not found".into()))?;
    let token = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .and_then(|v| String::from_utf8(v.0.clone()).ok())
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| HubError::Credential(what, "has no token under that key".into()))?;
    Ok(token)
}

/// A client of the hub `link` names, authenticating with `token`, whose connections may stay
/// silent for `read_timeout`, built as the service's own clients are (`cluster::client`):
/// `transport` [`Transport::PerRequest`] for reads ([`HUB_TIMEOUT`]), where an idle pooled
/// connection is not reused after a third of it; [`Transport::Multiplexed`] for the watches,
/// whose HTTP/2 PINGs every third of it find a silent or frozen hub however quiet they are.
pub fn hub_client(
    link: &HubLink,
    token: &str,
    read_timeout: Duration,
    transport: Transport,
) -> Result<Client, HubError> {
    let bad = |e: String| HubError::Unreachable(format!("spec: {e}"));
    let url = link.spec.server.parse().map_err(|e| bad(format!("{e}")))?;
    let mut config = kube::Config::new(url);
    config.root_cert = Some(parse_ca_bundle(&link.spec.ca_bundle).map_err(bad)?);
    config.auth_info.token = Some(secrecy::SecretString::from(token.to_string()));
    config.connect_timeout = Some(HUB_TIMEOUT);
    config.read_timeout = Some(read_timeout);
    config.write_timeout = Some(HUB_TIMEOUT);
    // As the service's: the read timeout bounds silence since the last write, so a pooled
    // connection's idle time does not count against the request sent on it.
    config.reset_reader_on_write = true;
    builder_with(config, transport)
        .map(|b| b.build())
        .map_err(|e| bad(e.to_string()))
}

/// Reads what the hub places on the member `settings` describes, and each placed source.
/// A source the hub says is not there is [`HubSource::Gone`]; one it does not let the member
/// read is [`HubSource::Unreadable`]; any other failure fails the whole read.
pub async fn read_hub(hub: &Client, settings: &LinkSettings) -> Result<HubRead, HubError> {
    let labels = match &settings.cluster_profile_namespace {
        Some(ns) => super::profiles::own_labels(hub, ns, &settings.cluster_name).await?,
        None => None,
    };
    // Page by page, keeping only the rules placed here: the member's memory does not grow
    // with the hub's other rules.
    let mut placed = Vec::new();
    let mut lp = ListParams::default().limit(RULES_PAGE);
    loop {
        let page =
            tokio::time::timeout(HUB_TIMEOUT * 2, Api::<CopyRule>::all(hub.clone()).list(&lp))
                .await
                .map_err(|_| HubError::Unreachable("listing CopyRules timed out".into()))?
                .map_err(classify)?;
        placed.extend(
            page.items
                .into_iter()
                .filter(|r| placed_on(&r.spec, &settings.cluster_name, labels.as_ref())),
        );
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => lp.continue_token = Some(token),
            _ => break,
        }
    }
    let placement = place(settings, labels.as_ref(), &placed);
    let generations = placed
        .iter()
        .filter_map(|r| Some((r.metadata.name.clone()?, r.metadata.generation)))
        .collect();
    let mut sources = BTreeMap::new();
    let mut contents = Contents::default();
    for key in placement.sources() {
        let state = read_source(hub, &key, &mut contents).await?;
        sources.insert(key, state);
    }
    Ok(HubRead {
        placement: Arc::new(placement),
        sources,
        contents,
        generations,
        labels,
    })
}

/// Reads the placed source `key` (a member key of a hub source); its payload and hash go
/// into `contents`. A source the hub says is not there is [`HubSource::Gone`]; one it does not
/// let the member read is [`HubSource::Unreadable`]; any other failure is an error.
pub async fn read_source(
    hub: &Client,
    key: &ObjectKey,
    contents: &mut Contents,
) -> Result<HubSource, HubError> {
    let on_hub = key.on_hub();
    let path = format!(
        "/api/v1/namespaces/{}/{}",
        on_hub.namespace,
        on_hub.kind.plural()
    );
    let req = kube::api::Request::new(path).get(&on_hub.name, &Default::default());
    let req = req.map_err(|e| HubError::Unreachable(e.to_string()))?;
    let read = tokio::time::timeout(HUB_TIMEOUT * 2, hub.request::<Object>(req))
        .await
        .map_err(|_| HubError::Unreachable(format!("reading {on_hub} timed out")))?;
    Ok(match read {
        Ok(obj) => present(key, obj, contents),
        Err(kube::Error::Api(s)) if s.code == 404 => HubSource::Gone,
        Err(kube::Error::Api(s)) if s.code == 403 => HubSource::Unreadable(s.message),
        Err(e) => return Err(classify(e)),
    })
}

/// Whether the hub CopyRule `name` exists and places its rule on `cluster`, whose
/// ClusterProfile carries `labels` (one GET).
pub async fn rule_placed(
    hub: &Client,
    name: &str,
    cluster: &str,
    labels: Option<&BTreeMap<String, String>>,
) -> Result<bool, HubError> {
    let read = tokio::time::timeout(
        HUB_TIMEOUT * 2,
        Api::<CopyRule>::all(hub.clone()).get_opt(name),
    )
    .await
    .map_err(|_| HubError::Unreachable(format!("reading CopyRule {name} timed out")))?
    .map_err(classify)?;
    Ok(read.is_some_and(|r| placed_on(&r.spec, cluster, labels)))
}

/// A source read from the hub, known here by its member key; its payload and hash go into
/// `contents`, as a local source's read does.
fn present(key: &ObjectKey, obj: Object, contents: &mut Contents) -> HubSource {
    let Some(mut info) = SourceInfo::from_meta(key.kind, &(&obj.metadata).into()) else {
        return HubSource::Unreadable("the hub returned an object without a name".into());
    };
    info.key = key.clone();
    let payload = obj.payload.for_kind(key.kind);
    contents
        .known_hashes
        .insert(key.clone(), content::source_hash(&info, &payload));
    contents.payloads.insert(key.clone(), Arc::new(payload));
    HubSource::Present(info)
}
