//! Reading the persisted state a job plans from: rules, sources, namespaces and existing
//! copies, each loaded with label-selected, metadata-only calls where possible, and never more
//! than the job's scope needs. Nothing here writes.

use std::collections::{BTreeMap, BTreeSet};

use crate::freshness::copy_index::{Listed, existing_from_meta, listed};
use crate::{
    cluster::{ApiResult, Cluster, ReadMode, reads::each},
    content,
    copyrule::CopyRule,
    marks,
    model::{Kind, NamespaceInfo, Object, ObjectKey, SourceInfo},
    plan::{Contents, Existing, MarksError, Policy, World},
    rules::Rule,
    tenancy::Tier,
};

/// Up to this many missing namespaces are read one by one; beyond, all are listed.
const NAMESPACE_GETS_MAX: usize = 8;
/// uids per `source-uid in (...)` selector.
const UID_CHUNK: usize = 40;

/// Existing copies found at targets, plus the ones whose managedFields show a foreign edit
/// (their content must be read to know whether they drifted), and objects that carry
/// copyrator's ownership label but whose marks do not parse (treated as unmanaged).
#[derive(Default, Debug)]
pub struct Found {
    pub existing: BTreeMap<ObjectKey, Existing>,
    pub suspect: BTreeSet<ObjectKey>,
    pub malformed: BTreeMap<ObjectKey, MarksError>,
}

impl Found {
    /// Adds what a LIST of managed copies found.
    pub fn add_listed(&mut self, items: Vec<Listed>) {
        // Built in bulk and appended, not inserted one by one: a LIST arrives in key order, and
        // ordered inserts leave every node of the tree half empty (a full resync holds one
        // entry per copy in the cluster).
        let listed: BTreeMap<ObjectKey, Existing> = items
            .into_iter()
            .map(|item| {
                if item.suspect {
                    self.suspect.insert(item.key.clone());
                }
                if let Some(e) = item.malformed {
                    self.malformed.insert(item.key.clone(), e);
                }
                (item.key, item.existing)
            })
            .collect();
        crate::plan::merge_into(&mut self.existing, listed);
    }

    /// Namespaces of the copies found.
    pub fn namespaces(&self) -> BTreeSet<String> {
        self.existing.keys().map(|k| k.namespace.clone()).collect()
    }

    /// Sources the managed copies name (a bundle's copies name their rule, no object).
    pub fn sources(&self) -> BTreeSet<ObjectKey> {
        self.existing
            .values()
            .filter_map(|e| match e {
                Existing::Managed(m) if !m.source.is_bundle() => Some(m.source.clone()),
                _ => None,
            })
            .collect()
    }

    /// Keeps only the copies `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&ObjectKey, &Existing) -> bool) {
        self.existing.retain(|k, e| keep(k, e));
        let existing = &self.existing;
        self.suspect.retain(|k| existing.contains_key(k));
        self.malformed.retain(|k, _| existing.contains_key(k));
    }

    /// Adds one object read in full (a copy job's target, a re-read after a stale write).
    pub fn add_read(&mut self, key: ObjectKey, obj: Option<&Object>) {
        let (existing, malformed) = classify(key.kind, obj);
        if let Some(e) = malformed {
            self.malformed.insert(key.clone(), e);
        }
        self.suspect.remove(&key);
        self.existing.insert(key, existing);
    }
}

/// What exists at one target, read in full (for copies and re-reads after a stale write):
/// a managed copy also gets the hash of what it actually holds.
pub fn classify(kind: Kind, obj: Option<&Object>) -> (Existing, Option<MarksError>) {
    let Some(obj) = obj else {
        return (Existing::None, None);
    };
    let m = &obj.metadata;
    let (mut existing, malformed) = existing_from_meta(
        kind,
        m.labels.as_ref(),
        m.annotations.as_ref(),
        m.resource_version.clone().unwrap_or_default(),
        m.deletion_timestamp.is_some(),
    );
    if let Existing::Managed(copy) = &mut existing {
        copy.actual_hash = Some(content::object_hash(kind, obj));
    }
    (existing, malformed)
}

/// A world holding every opted-in source of `kinds` (metadata only) and every CopyRule;
/// namespaces and copies are added by the job.
pub async fn load_rules(
    cluster: &Cluster,
    kinds: &[Kind],
    policy: &Policy,
    fresh: ReadMode,
) -> ApiResult<World> {
    let lists = kinds
        .iter()
        .map(|kind| async move {
            if fresh == ReadMode::Indexed
                && let Some(held) = cluster
                    .source_index()
                    .of(*kind)
                    .read(|by_key| by_key.values().cloned().collect::<Vec<_>>())
            {
                cluster.metrics.index_read("sources", "index");
                return Ok(held);
            }
            if fresh == ReadMode::Indexed {
                cluster.metrics.index_read("sources", "list");
            }
            cluster
                .list_meta(*kind, None, marks::SOURCE_SELECTOR, fresh, |m| {
                    SourceInfo::from_meta(*kind, &m).map(|s| policy.keep_source(s))
                })
                .await
        })
        .collect::<Vec<_>>();
    let (sources, copy_rules) = tokio::try_join!(
        futures::future::try_join_all(lists),
        copy_rules(cluster, fresh)
    )?;
    Ok(World::from_parts(
        policy.clone(),
        sources.into_iter().flatten(),
        copy_rules,
    ))
}

/// Every CopyRule, and every NamespacedCopyRule as the CopyRule it stands for.
async fn copy_rules(cluster: &Cluster, fresh: ReadMode) -> ApiResult<Vec<CopyRule>> {
    let (mut rules, namespaced) = tokio::try_join!(
        cluster_copy_rules(cluster, fresh),
        namespaced_rules(cluster, fresh)
    )?;
    rules.extend(namespaced);
    Ok(rules)
}

/// Every NamespacedCopyRule: from what their watch keeps when it can answer and a cached read
/// was asked for, else by a LIST.
async fn namespaced_rules(cluster: &Cluster, fresh: ReadMode) -> ApiResult<Vec<CopyRule>> {
    if fresh == ReadMode::Indexed {
        if let Some(held) = cluster.indexes().namespaced_rules.copy_rules() {
            cluster.metrics.index_read("namespacedcopyrules", "index");
            return Ok(held.as_ref().clone());
        }
        cluster.metrics.index_read("namespacedcopyrules", "list");
    }
    cluster.list_namespaced_rules(fresh).await
}

/// Every CopyRule: from what the CopyRules watch keeps when it can answer and a cached read
/// was asked for, else by a LIST.
async fn cluster_copy_rules(cluster: &Cluster, fresh: ReadMode) -> ApiResult<Vec<CopyRule>> {
    if fresh == ReadMode::Indexed {
        if let Some(held) = cluster.copy_rule_scope().copy_rules() {
            cluster.metrics.index_read("copyrules", "index");
            let mut rules = held.as_ref().clone();
            fresh_created_in(cluster, &mut rules).await?;
            return Ok(rules);
        }
        cluster.metrics.index_read("copyrules", "list");
    }
    cluster.list_copy_rules(fresh).await
}

/// What the CopyRules watch keeps holds a rule's status as it was listed: a create-once
/// rule's record of the namespaces it created copies in (SPEC §3.4) is read again, so that a
/// copy its namespace deleted is never made again from an old record.
async fn fresh_created_in(cluster: &Cluster, rules: &mut [CopyRule]) -> ApiResult<()> {
    for rule in rules.iter_mut().filter(|r| r.spec.create_once) {
        let Some(name) = rule.metadata.name.clone() else {
            continue;
        };
        if let Some(now) = cluster.get_copy_rule(&name).await? {
            rule.status = now.status;
        }
    }
    Ok(())
}

/// Sources CopyRules select that the world does not hold yet: objects without the opt-in
/// label (copyrator labels them once it sees them). Found by listing each source namespace
/// once per kind.
pub async fn unlabelled_rule_sources(
    cluster: &Cluster,
    world: &World,
    fresh: ReadMode,
) -> ApiResult<Vec<SourceInfo>> {
    let copy_rules = || {
        world
            .rules()
            .rules
            .iter()
            // A bundle's sources are labelled by its rule's job.
            .filter(|r| r.id.copy_rule_name().is_some() && r.bundle().is_none())
    };
    let groups: BTreeSet<(Kind, String)> = copy_rules()
        .map(|r| (r.kind, r.source_namespace.clone()))
        .collect();
    let mut out = Vec::new();
    for (kind, ns) in groups {
        let infos = cluster
            .list_meta(kind, Some(&ns), marks::NOT_A_COPY_SELECTOR, fresh, |m| {
                SourceInfo::from_meta(kind, &m)
            })
            .await?;
        out.extend(infos.into_iter().filter(|info| {
            !world.sources().contains_key(&info.key) && copy_rules().any(|r| r.applies_to(info))
        }));
    }
    Ok(out)
}

/// Every Secret and ConfigMap that carries an inline rule's annotations but not the opt-in
/// label (see [`crate::rules::ignored_annotations`]): a metadata-only LIST of all of them,
/// page by page from etcd, keeping only those. Its cost grows with the number of objects in
/// the cluster: callers run it rarely.
pub async fn unlabelled_annotated_sources(cluster: &Cluster) -> ApiResult<Vec<SourceInfo>> {
    let mut out = Vec::new();
    // Secrets and ConfigMaps only: of other kinds (50,000 RoleBindings) the scan would cost
    // what copyrator promises unrelated objects never cost.
    for kind in [Kind::Secret, Kind::ConfigMap] {
        let selector = format!("{}!=true", marks::SOURCE_LABEL);
        out.extend(
            cluster
                .list_meta(kind, None, &selector, ReadMode::Consistent, |m| {
                    // Most objects have neither annotation: not worth a SourceInfo.
                    let annotated = m.annotations.as_ref().is_some_and(|a| {
                        a.contains_key(marks::NAMESPACE_SELECTOR_ANNOTATION)
                            || a.contains_key(marks::NAMESPACES_ANNOTATION)
                    });
                    annotated
                        .then(|| SourceInfo::from_meta(kind, &m))
                        .flatten()
                        .filter(|s| !crate::rules::ignored_annotations(s).is_empty())
                })
                .await?,
        );
    }
    Ok(out)
}

/// Adds the namespaces `rules` target: from the namespace index when it can answer and a
/// cached read was asked for, else one server-side selected LIST per selector; GETs for
/// explicit names the index does not hold.
pub async fn load_target_namespaces<'a>(
    cluster: &Cluster,
    world: &mut World,
    rules: impl IntoIterator<Item = &'a Rule>,
    fresh: ReadMode,
) -> ApiResult<()> {
    let rules: Vec<&Rule> = rules.into_iter().collect();
    let mut names: BTreeSet<String> = rules
        .iter()
        .flat_map(|r| r.namespaces.iter().cloned())
        .collect();
    // Untrusted sources' rules: only the namespaces that accept copies from their namespace
    // are looked at (SPEC §9.7); one the index does not show consenting gets nothing, so it
    // is not read either.
    if fresh == ReadMode::Indexed
        && !rules.is_empty()
        && rules.iter().all(|r| r.tier == Tier::ConsentedInline)
        && let Some(held) = cluster.namespace_index().read_marked(|consenting| {
            consenting
                .filter(|ns| {
                    rules.iter().any(|r| {
                        r.consented_by(ns)
                            && (r.namespaces.contains(&ns.name)
                                || r.namespace_selector
                                    .as_ref()
                                    .is_some_and(|sel| sel.matches(&ns.labels)))
                    })
                })
                .cloned()
                .collect::<Vec<NamespaceInfo>>()
        })
    {
        cluster.metrics.index_read("namespaces", "index");
        world.insert_namespaces(held);
        return Ok(());
    }
    if fresh == ReadMode::Indexed
        && let Some(held) = cluster.namespace_index().read(|by_name| {
            by_name
                .values()
                .filter(|ns| {
                    names.contains(&ns.name)
                        || rules.iter().any(|r| {
                            r.namespace_selector
                                .as_ref()
                                .is_some_and(|sel| sel.matches(&ns.labels))
                        })
                })
                .cloned()
                .collect::<Vec<NamespaceInfo>>()
        })
    {
        cluster.metrics.index_read("namespaces", "index");
        world.insert_namespaces(held);
    } else {
        if fresh == ReadMode::Indexed {
            cluster.metrics.index_read("namespaces", "list");
        }
        let mut selectors: BTreeSet<String> = rules
            .iter()
            .filter_map(|r| r.namespace_selector.as_ref().map(|s| s.to_string()))
            .collect();
        if selectors.contains("") {
            // A rule selects every namespace.
            selectors = BTreeSet::from([String::new()]);
        }
        let listed = futures::future::try_join_all(
            selectors.iter().map(|s| cluster.list_namespaces(s, fresh)),
        )
        .await?;
        world.insert_namespaces(listed.into_iter().flatten());
    }
    names.retain(|n| !world.namespaces().contains_key(n));
    get_namespaces(cluster, world, names).await
}

/// Makes sure `names` are in the world (GETs for a few, one LIST for many).
pub async fn ensure_namespaces(
    cluster: &Cluster,
    world: &mut World,
    names: BTreeSet<String>,
    fresh: ReadMode,
) -> ApiResult<()> {
    let mut missing: BTreeSet<String> = names
        .into_iter()
        .filter(|n| !world.namespaces().contains_key(n))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if fresh == ReadMode::Indexed
        && let Some(held) = cluster.namespace_index().read(|by_name| {
            missing
                .iter()
                .filter_map(|n| by_name.get(n).cloned())
                .collect::<Vec<NamespaceInfo>>()
        })
    {
        cluster.metrics.index_read("namespaces", "index");
        world.insert_namespaces(held);
        missing.retain(|n| !world.namespaces().contains_key(n));
        // Not in the index: not there a moment ago. A few are read to be sure (a namespace
        // created since); many are left out, as the LIST below would have.
        if missing.len() > NAMESPACE_GETS_MAX {
            return Ok(());
        }
        return get_namespaces(cluster, world, missing).await;
    }
    if missing.len() > NAMESPACE_GETS_MAX {
        world.insert_namespaces(cluster.list_namespaces("", fresh).await?);
        return Ok(());
    }
    get_namespaces(cluster, world, missing).await
}

/// Reads namespaces one by one; one that cannot be read is recorded as unreadable (its
/// targets are skipped) rather than failing the job.
async fn get_namespaces(
    cluster: &Cluster,
    world: &mut World,
    names: BTreeSet<String>,
) -> ApiResult<()> {
    let found = each(names, |n| async move { cluster.get_namespace(&n).await }).await;
    let mut read_ok = Vec::with_capacity(found.len());
    for (name, read) in found {
        match read {
            Ok(Some(ns)) => read_ok.push(ns),
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(namespace = %name, error = %e, "namespace unreadable; its targets are skipped");
                world.unreadable_mut().namespaces.insert(name);
            }
        }
    }
    world.insert_namespaces(read_ok);
    Ok(())
}

/// Adds sources named by existing copies that the world does not know yet (e.g. a source
/// whose opt-in label was removed), so no copy is judged orphaned without looking at its source.
pub async fn ensure_sources(
    cluster: &Cluster,
    world: &mut World,
    keys: BTreeSet<ObjectKey>,
) -> ApiResult<()> {
    // A hub's source (SPEC §14) is never read here: only its link's round knows it.
    let missing: Vec<ObjectKey> = keys
        .into_iter()
        .filter(|k| !k.is_hub() && !world.sources().contains_key(k))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let found = each(missing, |k| async move { cluster.get_meta(&k).await }).await;
    let mut read = Vec::new();
    for (key, meta) in found {
        match meta {
            Ok(meta) => {
                let info = meta.and_then(|m| SourceInfo::from_meta(key.kind, &m));
                read.push((key, info));
            }
            Err(e) => {
                tracing::debug!(source = %key, error = %e, "source unreadable; its copies are skipped");
                world.unreadable_mut().sources.insert(key);
            }
        }
    }
    world.set_sources(read.into_iter().filter(|(_, info)| info.is_some()));
    Ok(())
}

/// Reads suspect copies in full so the planner compares what they actually hold. One that
/// cannot be read keeps its metadata-only view and is recorded as unreadable (retried by a
/// follow-up job).
pub async fn read_suspects(cluster: &Cluster, world: &mut World, found: &mut Found) {
    let suspects: Vec<ObjectKey> = std::mem::take(&mut found.suspect).into_iter().collect();
    let read = each(suspects, |k| async move { cluster.get(&k).await }).await;
    for (k, obj) in read {
        match obj {
            Ok(obj) => found.add_read(k, obj.as_ref()),
            Err(e) => {
                tracing::debug!(copy = %k, error = %e, "copy unreadable; judged by its marks");
                world.unreadable_mut().copies.insert(k);
            }
        }
    }
}

/// Managed copies of the given sources, found by their `source-uid` label: from the copy
/// index when it can answer and a cached read was asked for, else by LISTs.
pub async fn copies_of_sources(
    cluster: &Cluster,
    kind: Kind,
    uids: &BTreeSet<String>,
    fresh: ReadMode,
    found: &mut Found,
) -> ApiResult<()> {
    if fresh == ReadMode::Indexed
        && let Some(listed) = cluster.copy_index().copies_of(kind, uids)
    {
        cluster.metrics.index_read("copies", "index");
        found.add_listed(listed);
        return Ok(());
    }
    if fresh == ReadMode::Indexed {
        cluster.metrics.index_read("copies", "list");
    }
    let uids: Vec<&String> = uids.iter().filter(|u| !u.is_empty()).collect();
    for chunk in uids.chunks(UID_CHUNK) {
        let list = chunk
            .iter()
            .map(|u| u.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let selector = format!(
            "{},{} in ({list})",
            marks::MANAGED_SELECTOR,
            marks::SOURCE_UID_LABEL
        );
        found.add_listed(
            cluster
                .list_meta(kind, None, &selector, fresh, |m| listed(kind, m))
                .await?,
        );
    }
    Ok(())
}

/// Every managed copy of `kind`, optionally in one namespace (see [`copies_listed`]).
pub async fn all_copies(
    cluster: &Cluster,
    kind: Kind,
    namespace: Option<&str>,
    fresh: ReadMode,
    found: &mut Found,
) -> ApiResult<()> {
    found.add_listed(copies_listed(cluster, kind, namespace, fresh).await?);
    Ok(())
}

/// Every managed copy of `kind`, optionally in one namespace: from the copy index when it can
/// answer and a cached read was asked for, else by a LIST.
pub async fn copies_listed(
    cluster: &Cluster,
    kind: Kind,
    namespace: Option<&str>,
    fresh: ReadMode,
) -> ApiResult<Vec<Listed>> {
    if fresh == ReadMode::Indexed {
        let index = cluster.copy_index();
        let held = match namespace {
            Some(ns) => index.copies_in(kind, ns),
            None => index.all(kind),
        };
        if let Some(listed) = held {
            cluster.metrics.index_read("copies", "index");
            return Ok(listed);
        }
        cluster.metrics.index_read("copies", "list");
    }
    cluster
        .list_meta(kind, namespace, marks::MANAGED_SELECTOR, fresh, |m| {
            listed(kind, m)
        })
        .await
}

/// Hands the memory a large load (a resync's namespaces and copies, a scan's pages) freed back
/// to the system. glibc keeps freed memory in its arenas, and returns it only from the top of
/// the main heap: what a resync at 5,000 namespaces and 5,000 copies freed stayed resident
/// (RSS) until the next one. `malloc_trim` releases the free pages of every arena (a few
/// milliseconds, once per resync or scan).
pub fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Hashes remembered for sources at their current resourceVersion.
pub fn known_hashes(
    world: &World,
    cache: &moka::sync::Cache<(ObjectKey, String), String>,
    contents: &mut Contents,
) {
    for (key, src) in world.sources() {
        if let Some(h) = cache.get(&(key.clone(), src.resource_version.clone())) {
            contents.known_hashes.insert(key.clone(), h);
        }
    }
}
