//! What `copyrator plan` reads, as `explain` reads it (`explain::load`): from etcd, every
//! target in full. The live objects the documents merge into; every opted-in source, CopyRule
//! and namespace, the documents' objects put in their place; the copies that each document
//! can change (a rule's, a source's, a namespace's) and the sources they are made from.
//! Nothing here writes.

use std::{collections::BTreeSet, sync::Arc};

use anyhow::{Context as _, anyhow};
use k8s_openapi::{api::core::v1::Namespace, apimachinery::pkg::apis::meta::v1::ObjectMeta};
use serde_json::Value;

use super::super::load::{read_bundles, read_passwords, read_payloads, read_targets};
use crate::{
    bundle::BundleInput,
    cluster::{
        Cluster, ReadMode,
        load::{self, Found},
    },
    copyrule::CopyRule,
    model::{Kind, Object, ObjectKey, SourceInfo},
    plan::{
        Contents, Existing, Policy, World,
        explain::{Bundles, Focus},
        preview::{self, Manifest, ManifestKind, ManifestState},
    },
    rules::{self, SourceMatch},
    sync::bundles::certificates_of,
};

/// One document, with what applying it does to its object and what to explain about it.
pub struct Planned {
    pub manifest: Manifest,
    pub state: ManifestState,
    pub focus: Focus,
}

/// The planner's inputs for the documents of a plan, the world as they leave it.
pub struct Inputs {
    pub world: World,
    pub existing: std::collections::BTreeMap<ObjectKey, Existing>,
    pub contents: Contents,
    /// Documents' sources that carry copyrator's annotations without the opt-in label.
    pub unlabelled: Vec<SourceInfo>,
    pub bundles: Bundles,
    pub documents: Vec<Planned>,
}

/// Reads what planning `manifests` needs, and puts each into the world as applying it would
/// (`now`: seconds, the creation time of what does not exist yet). Fails on a document
/// admission would deny, naming it.
pub async fn for_manifests(
    cluster: &Cluster,
    policy: &Policy,
    manifests: Vec<Manifest>,
    now: i64,
) -> anyhow::Result<Inputs> {
    let fresh = ReadMode::Consistent;
    let mut live = Vec::with_capacity(manifests.len());
    for manifest in &manifests {
        live.push(
            read_live(cluster, manifest)
                .await
                .with_context(|| format!("reading {}", manifest.describe()))?,
        );
    }
    let mut world = load::load_rules(cluster, &Kind::all(), policy, fresh)
        .await
        .context("listing sources and CopyRules")?;
    world.insert_namespaces(
        cluster
            .list_namespaces("", fresh)
            .await
            .context("listing namespaces")?,
    );
    let mut given = Contents::default();
    let mut documents = Vec::with_capacity(manifests.len());
    for (manifest, live) in manifests.into_iter().zip(live) {
        let applied = preview::applied(live.as_ref(), &manifest.object);
        let state = ManifestState::of(live.as_ref(), &applied);
        let focus = preview::put(&mut world, &mut given, &manifest, applied, now)
            .map_err(|e| anyhow!("{}: {e}", manifest.describe()))?;
        documents.push(Planned {
            manifest,
            state,
            focus,
        });
    }
    // The sources the CopyRules select that are not labelled yet, the documents' rules too.
    let more = load::unlabelled_rule_sources(cluster, &world, fresh)
        .await
        .context("listing the sources of CopyRules")?;
    world.set_sources(more.into_iter().map(|s| (s.key.clone(), Some(s))));
    let foci: Vec<&Focus> = documents.iter().map(|d| &d.focus).collect();
    let stand_ins = bundles_reading(&world, &foci);
    let mut found = Found::default();
    for kind in Kind::all() {
        load::all_copies(cluster, kind, None, fresh, &mut found)
            .await
            .context("listing copyrator's copies")?;
    }
    found.retain(|key, e| foci.iter().any(|f| changes_copy(f, &stand_ins, key, e)));
    let mut targets: BTreeSet<ObjectKey> = found.existing.keys().cloned().collect();
    let sources = claimed(&world, &foci, &stand_ins, &mut targets);
    let (stand_ins, sources): (BTreeSet<ObjectKey>, BTreeSet<ObjectKey>) =
        sources.into_iter().partition(ObjectKey::is_bundle);
    // The documents' sources are as the file gives them, not as the cluster holds them.
    let to_read = sources
        .into_iter()
        .filter(|s| !given.payloads.contains_key(s))
        .collect();
    let mut contents = read_payloads(cluster, &mut world, to_read).await;
    let given_keys: Vec<ObjectKey> = given.payloads.keys().cloned().collect();
    contents.payloads.extend(given.payloads);
    read_passwords(cluster, policy, &world, &mut contents).await;
    let mut bundles = read_bundles(cluster, &mut world, &mut contents, stand_ins).await;
    read_given_into_bundles(&world, &mut contents, &mut bundles, &given_keys);
    let existing = read_targets(cluster, targets).await?;
    let unlabelled = documents
        .iter()
        .filter_map(|d| match &d.focus {
            Focus::Source(key) => world.sources().get(key),
            _ => None,
        })
        .filter(|s| !rules::ignored_annotations(s).is_empty())
        .cloned()
        .collect();
    Ok(Inputs {
        world,
        existing,
        contents,
        unlabelled,
        bundles,
        documents,
    })
}

/// The bundles' sources the files give, as the files give them: the cluster's version read by
/// `read_bundles` replaced (or left out, or added where a selector entry now matches), as a
/// job would read them once the files are applied.
fn read_given_into_bundles(
    world: &World,
    contents: &mut Contents,
    bundles: &mut Bundles,
    given: &[ObjectKey],
) {
    for (stand_in, reads) in bundles.iter_mut() {
        let Some(bundle) = world
            .rules()
            .copy_rule(&stand_in.name)
            .and_then(|r| r.bundle())
        else {
            continue;
        };
        let mut changed = false;
        // `read_bundles` reads one entry of `spec.sources` at a time, in order.
        for (entry, inputs) in bundle.sources.iter().zip(reads.entries.iter_mut()) {
            for key in given.iter().filter(|k| entry.may_select(k)) {
                changed = true;
                inputs.retain(|i| &i.source != key);
                let (Some(info), Some(payload)) =
                    (world.sources().get(key), contents.payloads.get(key))
                else {
                    continue;
                };
                if !entry.selects(info) {
                    continue;
                }
                let object = Object {
                    metadata: ObjectMeta {
                        labels: Some(info.labels.clone()),
                        ..Default::default()
                    },
                    payload: (**payload).clone(),
                    ..Default::default()
                };
                inputs.push(BundleInput {
                    source: key.clone(),
                    key: entry.key.clone(),
                    read: certificates_of(key.kind, Some(&object), &entry.key),
                });
                inputs.sort_by(|a, b| a.source.cmp(&b.source));
            }
        }
        if changed {
            contents
                .bundles
                .insert(stand_in.clone(), Arc::new(reads.inputs()));
        }
    }
}

/// The object `manifest` names as the cluster holds it now, if it exists.
async fn read_live(cluster: &Cluster, manifest: &Manifest) -> anyhow::Result<Option<Value>> {
    let client = cluster.client().clone();
    let value = match manifest.kind {
        ManifestKind::CopyRule => kube::Api::<CopyRule>::all(client)
            .get_opt(&manifest.name)
            .await?
            .map(serde_json::to_value),
        ManifestKind::Namespace => kube::Api::<Namespace>::all(client)
            .get_opt(&manifest.name)
            .await?
            .map(serde_json::to_value),
        ManifestKind::Source(kind) => cluster
            .get(&ObjectKey::new(kind, &manifest.namespace, &manifest.name))
            .await?
            .map(|o| serde_json::to_value(&o)),
    };
    Ok(value.transpose()?)
}

/// The bundles that read a source some document focuses on: their copies change with it.
fn bundles_reading(world: &World, foci: &[&Focus]) -> BTreeSet<ObjectKey> {
    let sources: Vec<&SourceInfo> = foci
        .iter()
        .filter_map(|f| match f {
            Focus::Source(key) => world.sources().get(key),
            _ => None,
        })
        .collect();
    world
        .rules()
        .rules
        .iter()
        .filter_map(|r| r.bundle())
        .filter(|b| {
            sources
                .iter()
                .any(|s| b.sources.iter().any(|e| e.selects(s)))
        })
        .map(|b| b.owner.key.clone())
        .collect()
}

/// Whether an existing copy at `key` is one `focus` can change: made by its rule, of its
/// source (or a bundle reading it), or in its namespace.
fn changes_copy(
    focus: &Focus,
    stand_ins: &BTreeSet<ObjectKey>,
    key: &ObjectKey,
    existing: &Existing,
) -> bool {
    let managed = match existing {
        Existing::Managed(m) => Some(m),
        _ => None,
    };
    match focus {
        Focus::Rule(id) => managed.is_some_and(|m| &m.rule == id),
        Focus::Source(source) => {
            managed.is_some_and(|m| &m.source == source || stand_ins.contains(&m.source))
        }
        Focus::Namespace(ns) => &key.namespace == ns,
    }
}

/// Adds the targets some claim in one of `foci` wants; returns the sources of every claim on
/// those targets (whichever wins, its content decides what is written there). A namespace's
/// focus also reads the names that rules without a source would take there.
fn claimed(
    world: &World,
    foci: &[&Focus],
    stand_ins: &BTreeSet<ObjectKey>,
    targets: &mut BTreeSet<ObjectKey>,
) -> BTreeSet<ObjectKey> {
    let claims = world.claims();
    let mut sources = BTreeSet::new();
    for (target, on) in claims.wanted.iter() {
        let in_focus = on.iter().any(|c| {
            foci.iter().any(|f| match f {
                Focus::Rule(id) => &c.rule.id == id,
                Focus::Source(key) => &c.source.key == key || stand_ins.contains(&c.source.key),
                Focus::Namespace(ns) => &target.namespace == ns,
            })
        });
        if in_focus {
            targets.insert(target.clone());
            sources.extend(on.iter().map(|c| c.source.key.clone()));
        }
    }
    for focus in foci {
        let Focus::Namespace(ns) = focus else {
            continue;
        };
        for rule in &world.rules().rules {
            if let SourceMatch::Name(source) = &rule.sources {
                targets.insert(ObjectKey::new(
                    rule.target_kind(),
                    ns,
                    rule.target_name(source),
                ));
            }
        }
    }
    sources
}

#[cfg(test)]
mod tests {
    use base64::{Engine as _, engine::general_purpose::STANDARD};
    use serde_json::json;

    use super::*;
    use crate::{model::Payload, plan::explain::BundleReads};

    fn ca(name: &str) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    fn secret_payload(pem: &str) -> Payload {
        Payload {
            data: Some([("ca.crt".to_string(), STANDARD.encode(pem))].into()),
            ..Default::default()
        }
    }

    /// A bundle reading `platform/root`, read from the cluster with `old`; the file gives the
    /// Secret with `new`.
    #[test]
    fn a_bundle_reads_its_source_as_the_file_gives_it() {
        let rule: CopyRule = serde_json::from_value(json!({
            "apiVersion": "copyrator.io/v1alpha1", "kind": "CopyRule",
            "metadata": {"name": "trust", "uid": "u"},
            "spec": {"kind": "ConfigMap", "targetName": "ca-bundle", "target": {"key": "ca.pem"},
                     "namespaceSelector": {},
                     "sources": [{"kind": "Secret", "namespace": "platform", "name": "root",
                                  "key": "ca.crt"}]},
        }))
        .unwrap();
        let root = ObjectKey::new(Kind::Secret, "platform", "root");
        let info = SourceInfo {
            key: root.clone(),
            uid: String::new(),
            resource_version: String::new(),
            labels: Default::default(),
            annotations: Default::default(),
            created: 0,
            deleting: false,
            dropped: None,
        };
        let world = World::from_parts(Policy::default(), [info], vec![rule]);
        let stand_in = world.rules().copy_rule("trust").unwrap().bundle().unwrap();
        let stand_in = stand_in.owner.key.clone();
        let (old, new) = (ca("old"), ca("new"));
        let read = |pem: &str| BundleInput {
            source: root.clone(),
            key: "ca.crt".into(),
            read: crate::bundle::certificates(pem.as_bytes()).map_err(|_| unreachable!()),
        };
        let mut bundles = Bundles::from([(
            stand_in.clone(),
            BundleReads {
                entries: vec![vec![read(&old)]],
                read_at: 0,
            },
        )]);
        let mut contents = Contents::default();
        contents
            .payloads
            .insert(root.clone(), Arc::new(secret_payload(&new)));
        read_given_into_bundles(
            &world,
            &mut contents,
            &mut bundles,
            std::slice::from_ref(&root),
        );
        let inputs = &contents.bundles[&stand_in].inputs;
        assert_eq!(inputs.len(), 1);
        assert_eq!(inputs[0].read, read(&new).read, "the file's certificate");
        assert_eq!(bundles[&stand_in].entries[0], [read(&new)]);
    }
}
