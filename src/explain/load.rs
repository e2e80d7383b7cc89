//! Reading what the planner needs to explain a namespace or a source: the same loads a job
//! makes (`cluster::load`), from etcd (a one-off command wants the latest state, not the
//! watch cache's), and every target read in full, so that "in sync" means what the copy
//! really holds and a name held by an object copyrator does not manage is seen before any
//! write would find it. A bundle's sources are read as a job reads them (`sync::bundles`),
//! one entry of `spec.sources` at a time, so that each object read is known by its entry.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

use anyhow::{Context as _, anyhow};

use crate::{
    bundle::Bundle,
    cluster::{
        Cluster, ReadMode,
        load::{self, Found},
        passwords,
        reads::each,
    },
    model::{Kind, Object, ObjectKey, SourceInfo},
    plan::{
        Contents, Existing, Policy, World,
        explain::{BundleReads, Bundles},
    },
    rules::{self, SourceMatch},
    sync::bundles,
};

/// The planner's inputs for one explanation.
pub struct Inputs {
    pub world: World,
    pub existing: BTreeMap<ObjectKey, Existing>,
    pub contents: Contents,
    /// Sources that ask for copies without the opt-in label.
    pub unlabelled: Vec<SourceInfo>,
    /// The sources of the bundles explained, per entry (also in `contents`, flattened).
    pub bundles: Bundles,
}

/// Everything that could put a copy into namespace `name`. Fails if it does not exist.
pub async fn for_namespace(
    cluster: &Cluster,
    policy: &Policy,
    name: &str,
) -> anyhow::Result<Inputs> {
    let ns = cluster
        .get_namespace(name)
        .await
        .with_context(|| format!("reading namespace {name}"))?
        .ok_or_else(|| anyhow!("namespace {name} not found"))?;
    let fresh = ReadMode::Consistent;
    let mut world = rules_world(cluster, &Kind::all(), policy).await?;
    world.insert_namespaces([ns]);
    let mut found = Found::default();
    for kind in Kind::all() {
        load::all_copies(cluster, kind, Some(name), fresh, &mut found)
            .await
            .context("listing copyrator's copies")?;
    }
    load::ensure_sources(cluster, &mut world, found.sources())
        .await
        .context("reading the sources of the copies")?;
    let unlabelled = load::unlabelled_annotated_sources(cluster)
        .await
        .context("listing sources that are not opted in")?;
    let mut targets: BTreeSet<ObjectKey> = found.existing.keys().cloned().collect();
    let sources = claimed(&world, &mut targets, |_| true);
    // Names rules without a source and sources that are not opted in would take.
    for rule in &world.rules().rules {
        if let SourceMatch::Name(source) = &rule.sources {
            targets.insert(ObjectKey::new(
                rule.target_kind(),
                name,
                rule.target_name(source),
            ));
        }
    }
    targets.extend(
        unlabelled
            .iter()
            .map(|s| ObjectKey::new(s.key.kind, name, &s.key.name)),
    );
    // A bundle's stand-in source is read as its sources (SPEC §3.2, Bundles).
    let (stand_ins, sources): (BTreeSet<ObjectKey>, BTreeSet<ObjectKey>) =
        sources.into_iter().partition(ObjectKey::is_bundle);
    let mut contents = read_payloads(cluster, &mut world, sources).await;
    read_passwords(cluster, policy, &world, &mut contents).await;
    let bundles = read_bundles(cluster, &mut world, &mut contents, stand_ins).await;
    let existing = read_targets(cluster, targets).await?;
    Ok(Inputs {
        world,
        existing,
        contents,
        unlabelled,
        bundles,
    })
}

/// Every rule of source `key` and where its copies are. Fails if it does not exist.
pub async fn for_source(
    cluster: &Cluster,
    policy: &Policy,
    key: &ObjectKey,
) -> anyhow::Result<Inputs> {
    let source = cluster
        .get(key)
        .await
        .with_context(|| format!("reading {key}"))?
        .ok_or_else(|| anyhow!("{key} not found"))?;
    let info = SourceInfo::from_meta(key.kind, &(&source.metadata).into())
        .ok_or_else(|| anyhow!("{key} has no name or namespace"))?;
    let fresh = ReadMode::Consistent;
    let mut world = rules_world(cluster, &[key.kind], policy).await?;
    world.set_sources([(key.clone(), Some(info.clone()))]);
    world.insert_namespaces(
        cluster
            .list_namespaces("", fresh)
            .await
            .context("listing namespaces")?,
    );
    let mut found = Found::default();
    // A Secret's copies may be ConfigMaps and a ConfigMap's Secrets (SPEC §3.2).
    for kind in key.kind.interchangeable() {
        load::all_copies(cluster, kind, None, fresh, &mut found)
            .await
            .context("listing copyrator's copies")?;
    }
    // The bundles that read it: their copies name their rule (SPEC §3.2, Bundles), and are
    // Secrets or ConfigMaps, as a bundle's sources are: listed above.
    let stand_ins: BTreeSet<ObjectKey> = world
        .rules()
        .rules
        .iter()
        .filter_map(|r| r.bundle())
        .filter(|b| b.sources.iter().any(|e| e.selects(&info)))
        .map(|b| b.owner.key.clone())
        .collect();
    found.retain(|_, e| {
        matches!(e, Existing::Managed(m) if &m.source == key || stand_ins.contains(&m.source))
    });
    let mut targets: BTreeSet<ObjectKey> = found.existing.keys().cloned().collect();
    claimed(&world, &mut targets, |s| s == key || stand_ins.contains(s));
    let mut contents = Contents::default();
    contents
        .payloads
        .insert(key.clone(), payload(key.kind, &source));
    read_passwords(cluster, policy, &world, &mut contents).await;
    let bundles = read_bundles(cluster, &mut world, &mut contents, stand_ins).await;
    let existing = read_targets(cluster, targets).await?;
    let unlabelled = if rules::ignored_annotations(&info).is_empty() {
        Vec::new()
    } else {
        vec![info]
    };
    Ok(Inputs {
        world,
        existing,
        contents,
        unlabelled,
        bundles,
    })
}

/// Opted-in sources and CopyRules of `kinds`, plus the sources CopyRules select that are not
/// labelled yet, as the resync loads them.
async fn rules_world(cluster: &Cluster, kinds: &[Kind], policy: &Policy) -> anyhow::Result<World> {
    let fresh = ReadMode::Consistent;
    let mut world = load::load_rules(cluster, kinds, policy, fresh)
        .await
        .context("listing sources and CopyRules")?;
    let more = load::unlabelled_rule_sources(cluster, &world, fresh)
        .await
        .context("listing the sources of CopyRules")?;
    world.set_sources(more.into_iter().map(|s| (s.key.clone(), Some(s))));
    Ok(world)
}

/// Adds the targets some rule claims for a source `keep` accepts; returns those sources.
fn claimed(
    world: &World,
    targets: &mut BTreeSet<ObjectKey>,
    keep: impl Fn(&ObjectKey) -> bool,
) -> BTreeSet<ObjectKey> {
    let claims = world.claims();
    let mut sources = BTreeSet::new();
    for (target, on) in claims.wanted.iter() {
        for claim in on.iter().filter(|c| keep(&c.source.key)) {
            targets.insert(target.clone());
            sources.insert(claim.source.key.clone());
        }
    }
    sources
}

/// The content of each source (to know whether copies are current). One that cannot be
/// read is unreadable to the planner, as in a job.
pub(super) async fn read_payloads(
    cluster: &Cluster,
    world: &mut World,
    sources: BTreeSet<ObjectKey>,
) -> Contents {
    let read = each(sources, |k| async move { cluster.get(&k).await }).await;
    let mut contents = Contents::default();
    for (key, obj) in read {
        match obj {
            Ok(Some(obj)) => {
                contents
                    .payloads
                    .insert(key.clone(), payload(key.kind, &obj));
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("copyrator: cannot read {key}: {e}");
                world.unreadable_mut().sources.insert(key);
            }
        }
    }
    contents
}

/// The sources of the bundles `stand_ins` stand for, read as a job reads them
/// ([`crate::sync::bundles::read`]) but one entry of `spec.sources` at a time (together), from
/// etcd: what each entry matched is then known. Their stores' passwords are read beside them
/// into `contents`, as a job reads them (`cluster::passwords`). A bundle whose sources or
/// passwords cannot be read is unreadable to the planner, as in a job.
pub(super) async fn read_bundles(
    cluster: &Cluster,
    world: &mut World,
    contents: &mut Contents,
    stand_ins: BTreeSet<ObjectKey>,
) -> Bundles {
    let mut out = Bundles::new();
    let trust = world.policy().trust.clone();
    for key in stand_ins {
        let Some(rule) = world.rules().copy_rule(&key.name).cloned() else {
            continue;
        };
        let Some(bundle) = rule.bundle() else {
            continue;
        };
        let entries = bundle.sources.iter().map(|entry| {
            let one = Bundle {
                sources: vec![entry.clone()],
                ..bundle.clone()
            };
            async move { bundles::read(cluster, &one, ReadMode::Consistent).await }
        });
        let refs: Vec<_> = rule.password_refs().cloned().collect();
        let read = tokio::try_join!(
            futures::future::try_join_all(entries),
            passwords::read(cluster, &trust, &refs, &mut contents.passwords)
        );
        match read {
            Ok((read, ())) => {
                let reads = BundleReads {
                    // No entry read (a bundle of the default CAs alone): judged as of now.
                    read_at: read
                        .iter()
                        .map(|r| r.read_at)
                        .min()
                        .unwrap_or_else(|| k8s_openapi::jiff::Timestamp::now().as_second()),
                    entries: read.into_iter().map(|r| r.inputs).collect(),
                };
                contents
                    .bundles
                    .insert(key.clone(), Arc::new(reads.inputs()));
                out.insert(key, reads);
            }
            Err(e) => {
                eprintln!("copyrator: cannot read the sources of {key}: {e}");
                world.unreadable_mut().sources.insert(key);
            }
        }
    }
    out
}

/// The truststores' passwords the single-source rules read from Secrets, as a job reads them
/// (SPEC §3.2); a bundle's are read with its sources ([`read_bundles`]). One that cannot be
/// read leaves its copies unexplained, as an unreadable source does.
pub(super) async fn read_passwords(
    cluster: &Cluster,
    policy: &Policy,
    world: &World,
    contents: &mut Contents,
) {
    let refs: Vec<_> = world
        .rules()
        .rules
        .iter()
        .filter(|r| r.bundle().is_none())
        .flat_map(|r| r.password_refs())
        .cloned()
        .collect();
    let read = passwords::read(cluster, &policy.trust, &refs, &mut contents.passwords);
    if let Err(e) = read.await {
        eprintln!("copyrator: cannot read a truststore's password Secret: {e}");
    }
}

fn payload(kind: Kind, obj: &Object) -> Arc<crate::model::Payload> {
    Arc::new(obj.payload.clone().for_kind(kind))
}

/// What holds each target name, read in full.
pub(super) async fn read_targets(
    cluster: &Cluster,
    targets: BTreeSet<ObjectKey>,
) -> anyhow::Result<BTreeMap<ObjectKey, Existing>> {
    let read = each(targets, |k| async move { cluster.get(&k).await }).await;
    let mut existing = BTreeMap::new();
    for (key, obj) in read {
        let obj = obj.with_context(|| format!("reading {key}"))?;
        let (found, _) = load::classify(key.kind, obj.as_ref());
        existing.insert(key, found);
    }
    Ok(existing)
}
