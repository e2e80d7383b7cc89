//! The content a job's plan needs beside the metadata `cluster::load` reads (SPEC §5,
//! "Reads"): sources' payloads (from the payload cache when the version matches, else a GET),
//! a bundle's sources, and truststores' passwords. "Where is a job's input read" has two
//! answers: metadata in `crate::cluster::load`, content here.

use std::sync::Arc;

use crate::{
    cluster::{ReadMode, reads::each},
    content,
    model::{Object, ObjectKey, SourceInfo},
    plan::{Contents, World},
    sync::context::Context,
};

/// Reads source payloads (one GET each, a batch at once); a source that vanished is removed,
/// one that cannot be read is recorded as unreadable (its targets are skipped).
pub async fn read_sources(
    ctx: &Context,
    world: &mut World,
    contents: &mut Contents,
    keys: &[ObjectKey],
) {
    // A hub's source (SPEC §14) is never read from this cluster (its key names no namespace
    // here): a plan holds its copies (`Unreadable::holds`) unless its link's round read it.
    let keys: Vec<ObjectKey> = keys.iter().filter(|k| !k.is_hub()).cloned().collect();
    let keys = &keys[..];
    // A bundle's stand-in source is read as its sources (SPEC §3.2, Bundles).
    let (bundles, keys): (Vec<&ObjectKey>, Vec<&ObjectKey>) =
        keys.iter().partition(|k| k.is_bundle());
    for key in bundles {
        read_bundle(ctx, world, contents, key).await;
    }
    let mut read = Vec::new();
    // Sources listed at a version whose payload a GET returned before need no GET now.
    let mut misses = Vec::new();
    for &key in &keys {
        let listed = world.sources().get(key).map(|s| s.resource_version.clone());
        let cached = listed
            .filter(|rv| !rv.is_empty())
            .and_then(|rv| ctx.caches.source_payloads.get(&(key.clone(), rv)));
        match cached {
            Some((payload, info)) => {
                let hash = content::source_hash(&info, &payload);
                contents.known_hashes.insert(key.clone(), hash);
                contents.payloads.insert(key.clone(), payload);
                read.push((key.clone(), Some(info)));
            }
            None => misses.push(key.clone()),
        }
    }
    let cluster = &ctx.cluster;
    let reads = each(misses, |k| async move { cluster.get(&k).await }).await;
    for (key, obj) in &reads {
        let obj = match obj {
            Ok(obj) => obj,
            Err(e) => {
                tracing::debug!(source = %key, error = %e, "source unreadable; its copies are skipped");
                world.unreadable_mut().sources.insert(key.clone());
                continue;
            }
        };
        let info = obj
            .as_ref()
            .and_then(|o| SourceInfo::from_meta(key.kind, &(&o.metadata).into()));
        if let (Some(obj), Some(info)) = (&obj, &info) {
            remember_payload(ctx, contents, info, obj);
        }
        // Its inline configuration may have changed since it was listed (or it is gone).
        read.push((key.clone(), info));
    }
    world.set_sources(read);
    read_passwords(ctx, world, contents, &keys).await;
}

/// Reads the truststores' passwords the rules copying `keys` take from Secrets (SPEC §3.2),
/// those this job has not read yet; when one cannot be read, those sources are unreadable
/// (their copies are skipped, and retried by jobs of their own).
async fn read_passwords(
    ctx: &Context,
    world: &mut World,
    contents: &mut Contents,
    keys: &[&ObjectKey],
) {
    let sources: Vec<&SourceInfo> = keys
        .iter()
        .filter_map(|k| world.sources().get(*k))
        .collect();
    let rules: Vec<&crate::rules::Rule> = world
        .rules()
        .rules
        .iter()
        .filter(|r| r.password_refs().next().is_some())
        .filter(|r| sources.iter().any(|s| r.applies_to(s)))
        .collect();
    if rules.is_empty() {
        return;
    }
    // Collected: an iterator of the rules' refs would be held across the reads.
    let refs: Vec<_> = rules
        .iter()
        .flat_map(|r| r.password_refs())
        .cloned()
        .collect();
    let trust = &ctx.settings.policy.trust;
    if let Err(e) =
        crate::cluster::passwords::read(&ctx.cluster, trust, &refs, &mut contents.passwords).await
    {
        tracing::debug!(error = %e, "a truststore's password Secret is unreadable; its copies are skipped");
        let unreadable: Vec<ObjectKey> = sources
            .iter()
            .filter(|s| rules.iter().any(|r| r.applies_to(s)))
            .map(|s| s.key.clone())
            .collect();
        world.unreadable_mut().sources.extend(unreadable);
    }
}

/// Reads the sources of the bundle `key` stands for, and its stores' passwords, into
/// `contents`; when one cannot be read, the bundle is unreadable (its copies are skipped, and
/// its rule's job retried).
async fn read_bundle(ctx: &Context, world: &mut World, contents: &mut Contents, key: &ObjectKey) {
    let Some(rule) = world.rules().copy_rule(&key.name).cloned() else {
        return;
    };
    let Some(bundle) = rule.bundle() else {
        return;
    };
    let trust = &ctx.settings.policy.trust;
    let refs: Vec<_> = rule.password_refs().cloned().collect();
    let read = async {
        crate::cluster::passwords::read(&ctx.cluster, trust, &refs, &mut contents.passwords)
            .await?;
        super::bundles::read(&ctx.cluster, bundle, ReadMode::Cached).await
    };
    match read.await {
        Ok(inputs) => {
            contents.bundles.insert(key.clone(), Arc::new(inputs));
        }
        Err(e) => {
            tracing::debug!(bundle = %key, error = %e, "a source of the bundle is unreadable; its copies are skipped");
            world.unreadable_mut().sources.insert(key.clone());
        }
    }
}

pub fn remember_payload(ctx: &Context, contents: &mut Contents, info: &SourceInfo, obj: &Object) {
    let payload = obj.payload.clone().for_kind(info.key.kind);
    let hash = content::source_hash(info, &payload);
    ctx.caches.source_hashes.insert(
        (info.key.clone(), info.resource_version.clone()),
        hash.clone(),
    );
    contents.known_hashes.insert(info.key.clone(), hash);
    let payload = Arc::new(payload);
    ctx.caches
        .keep_source_payload(info, &payload, ctx.settings.source_cache_bytes);
    contents.payloads.insert(info.key.clone(), payload);
}
