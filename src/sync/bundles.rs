//! The sources of a bundle (SPEC §3.2, Bundles), read for a plan: each object named, and each
//! a selector entry matches, with its key's certificates parsed (`bundle::certificates`). A
//! bundle's sources are few: one GET each per job, and one label-selected LIST of metadata per
//! selector entry, from the watch cache. Nothing of them is kept between jobs; no watch of
//! every Secret is added (a selector entry's new matches are seen by its selector watch,
//! `cluster::selectors`). Its stores' passwords are read beside them (`cluster::passwords`).

use crate::{
    bundle::{self, Bundle, BundleInput, BundleInputs, BundleSelect, LeftOut, MAX_SELECTED},
    cluster::{ApiError, Cluster, ReadMode},
    marks,
    model::{Kind, Object, ObjectKey, SourceInfo},
};
use base64::{Engine, engine::general_purpose::STANDARD};

/// Reads what every source of `bundle` holds now, selector entries' matches listed `fresh` (a
/// job: the watch cache; `explain`: etcd, which reads each entry on its own with this). Its
/// stores' passwords are not read here: the caller reads them (`cluster::passwords`) into
/// `Contents.passwords`, as for any rule.
pub(crate) async fn read(
    cluster: &Cluster,
    bundle: &Bundle,
    fresh: ReadMode,
) -> Result<BundleInputs, ApiError> {
    let mut keys: Vec<(ObjectKey, &str)> = Vec::new();
    for source in &bundle.sources {
        match &source.select {
            BundleSelect::Name(name) => keys.push((
                ObjectKey::new(source.kind, &source.namespace, name),
                &source.key,
            )),
            BundleSelect::Selector(sel) => {
                // A copy is never a source (SPEC §9.6), whatever labels it carried over.
                let mut matched: Vec<ObjectKey> = cluster
                    .list_meta(
                        source.kind,
                        Some(&source.namespace),
                        &marks::not_a_copy(&sel.to_string()),
                        fresh,
                        |m| {
                            SourceInfo::from_meta(source.kind, &m)
                                .filter(|s| !s.is_copy())
                                .map(|s| s.key)
                        },
                    )
                    .await?;
                matched.sort();
                matched.truncate(MAX_SELECTED);
                keys.extend(matched.into_iter().map(|k| (k, source.key.as_str())));
            }
        }
    }
    let objects = futures::future::try_join_all(keys.iter().map(|(k, _)| cluster.get(k))).await?;
    let read_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let inputs = keys
        .into_iter()
        .zip(objects)
        .map(|((source, key), obj)| BundleInput {
            read: certificates_of(source.kind, obj.as_ref(), key),
            key: key.to_string(),
            source,
        })
        .collect();
    Ok(BundleInputs { inputs, read_at })
}

/// The certificates `obj` (of `kind`) holds under `key`, or why it gives none. A copy is no
/// source (SPEC §9.6): it reads as missing.
pub(crate) fn certificates_of(
    kind: Kind,
    obj: Option<&Object>,
    key: &str,
) -> Result<Vec<bundle::Certificate>, LeftOut> {
    let obj = obj
        .filter(|o| {
            o.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(marks::MANAGED_BY_LABEL))
                .map(String::as_str)
                != Some(marks::MANAGED_BY_VALUE)
        })
        .ok_or(LeftOut::SourceNotFound)?;
    let payload = &obj.payload;
    let text = payload.data.as_ref().and_then(|d| d.get(key));
    let binary = payload.binary_data.as_ref().and_then(|d| d.get(key));
    let not_text = LeftOut::NotCertificates(crate::transform::NotCertificates::NotText);
    let bytes = match (kind == Kind::Secret, text, binary) {
        // Secret data and ConfigMap binaryData are base64 on the wire.
        (true, Some(v), _) | (false, None, Some(v)) => STANDARD.decode(v).map_err(|_| not_text)?,
        (false, Some(v), _) => v.as_bytes().to_vec(),
        _ => return Err(LeftOut::NoKey),
    };
    bundle::certificates(&bytes).map_err(LeftOut::NotCertificates)
}
