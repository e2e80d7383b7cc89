//! One update round of a source fanned out to its copies, and the plain client's round it is
//! compared with (the same number of Secrets replaced): each timed until a watch saw every
//! object with the new content. Shared by the phases that time update fan-outs at a size of
//! their own (scale, tenant-sources).

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

use crate::{
    CONCURRENCY,
    measure::{all_seen, watch_secrets},
};

/// The content a round writes: `key` set to `<base>-<tag>`, a tag no earlier round used, so
/// that a watch tells the round's writes from every earlier one.
pub struct NewContent<'a> {
    pub key: &'a str,
    pub base: &'a str,
    pub tag: &'a str,
}

impl NewContent<'_> {
    fn value(&self) -> String {
        format!("{}-{}", self.base, self.tag)
    }

    /// Whether a Secret holds this round's content (a check for [`watch_secrets`]).
    fn check(&self) -> impl Fn(&Secret) -> bool + Send + 'static {
        let (key, suffix) = (self.key.to_string(), format!("-{}", self.tag));
        move |s| {
            s.data
                .as_ref()
                .and_then(|d| d.get(&key))
                .is_some_and(|v| v.0.ends_with(suffix.as_bytes()))
        }
    }
}

/// The plain client's round: each of `objs` (Secrets labelled `selector`) replaced with its
/// resourceVersion and the new content, [`CONCURRENCY`] in flight, until a watch saw them
/// all. Returns the time and the objects as replaced (for the next round's resourceVersions).
pub async fn raw_update(
    client: &kube::Client,
    selector: &str,
    objs: Vec<Secret>,
    content: &NewContent<'_>,
) -> (Duration, Vec<Secret>) {
    let n = objs.len();
    let (seen, watch) =
        watch_secrets(Api::all(client.clone()), selector.into(), content.check()).await;
    let value = content.value();
    let start = Instant::now();
    let objs: Vec<Secret> = stream::iter(objs)
        .map(|mut s| {
            let api: Api<Secret> = Api::namespaced(client.clone(), &s.namespace().unwrap());
            let data = BTreeMap::from([(content.key.to_string(), value.clone())]);
            async move {
                let name = s.name_any();
                s.string_data = Some(data);
                s.data = None;
                api.replace(&name, &PostParams::default(), &s).await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await
        .expect("raw updates");
    let took = all_seen(&seen, n, Duration::from_secs(600), start, "raw updates").await;
    watch.abort();
    (took, objs)
}

/// copyrator's round: `source` patched with the new content, from the patch's response until
/// a watch of `copies` (a label selector) saw `n` copies holding it.
pub async fn source_update(
    client: &kube::Client,
    source: (&Api<Secret>, &str),
    copies: &str,
    n: usize,
    content: &NewContent<'_>,
) -> Duration {
    let (seen, watch) =
        watch_secrets(Api::all(client.clone()), copies.into(), content.check()).await;
    let (api, name) = source;
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"stringData": {content.key: content.value()}})),
    )
    .await
    .expect("updating the source");
    let start = Instant::now();
    let took = all_seen(&seen, n, Duration::from_secs(600), start, "update fan-out").await;
    watch.abort();
    took
}
