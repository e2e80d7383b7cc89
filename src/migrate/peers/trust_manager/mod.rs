//! trust-manager. A `Bundle` (`trust.cert-manager.io/v1alpha1`, cluster-scoped) combines the
//! certificates of Secrets and ConfigMaps of trust-manager's trust namespace into a ConfigMap
//! and/or Secret named after it in the namespaces its selector matches: a CopyRule with
//! `sources` already (SPEC §3.2, Bundles), one per target kind. The default CAs become its
//! `{defaultCAs: true}` source, inline certificates a ConfigMap printed beside it (`inline`).
//! What a CopyRule cannot say (every key of a source, a PKCS#12 profile, the targets' extra
//! labels and annotations) is left out and said in the rule's notes, never dropped; a
//! Bundle left with no source or no target gives no CopyRule, and the reason. Its successor,
//! the `ClusterBundle` (`trust-manager.io/v1alpha2`), says the same in other fields and is
//! translated alike (`cluster_bundle`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Deserialize;
use serde_json::Value;

use super::{PeerRule, Skipped, Translation, nullable};
use crate::{
    bundle::MAX_SOURCES,
    copyrule::{BundleSourceSpec, CopyRule, CopyRuleSpec, FormatsSpec, TargetSpec, TruststoreSpec},
    rules::Rule,
    selector::{self, Selector},
    transform,
};

/// A Bundle's or ClusterBundle's CopyRules, or why it has none.
type Rules = Result<Vec<PeerRule>, String>;

pub(super) fn translate(documents: &[Value], trust_namespace: &str) -> Translation {
    let mut out = Translation::default();
    let skipped = |note: String| Skipped {
        source_namespace: trust_namespace.to_string(),
        note,
    };
    // Each document: its name, whether a ClusterBundle, its CopyRules or why it has none.
    let read: Vec<(&str, bool, Rules)> = documents
        .iter()
        .map(|doc| {
            let name = doc["metadata"]["name"].as_str().unwrap_or_default();
            let cluster = doc["kind"] == "ClusterBundle";
            let parts = if cluster {
                cluster_bundle::read(doc, trust_namespace)
            } else {
                Bundle::deserialize(doc)
                    .map_err(|e| format!("not a Bundle migrate can read ({e})"))
                    .and_then(|bundle| parts_of_bundle(&bundle, trust_namespace))
            };
            (
                name,
                cluster,
                parts.and_then(|parts| rules_of(parts, trust_namespace)),
            )
        })
        .collect();
    // trust-manager's own migration makes a ClusterBundle of each Bundle, of the same name,
    // and keeps it equal to the Bundle until its users mark it `trust-manager.io/migrated`:
    // one CopyRule per name, the marked ClusterBundle's (its users' now), else the Bundle's;
    // the other's, when that one gives none.
    let marked: BTreeMap<&str, bool> = documents
        .iter()
        .filter(|d| d["kind"] == "ClusterBundle")
        .filter_map(|d| {
            Some((
                d["metadata"]["name"].as_str()?,
                cluster_bundle::is_migrated(d),
            ))
        })
        .collect();
    for (name, cluster, result) in &read {
        let what = if *cluster { "ClusterBundle" } else { "Bundle" };
        let twin = read
            .iter()
            .find(|(n, c, _)| n == name && c != cluster)
            .map(|(_, _, r)| r.is_ok());
        let preferred = twin.is_none() || *cluster == marked.get(name).copied().unwrap_or(false);
        match (result, preferred, twin) {
            (Ok(rules), true, _) => out.rules.extend(rules.iter().cloned()),
            // The preferred twin gives a CopyRule: this one is said, not printed.
            (_, false, Some(true)) => out.skipped.push(skipped(if *cluster {
                format!(
                    "trust-manager ClusterBundle {name:?}: made of the Bundle of the same name, \
                     which trust-manager keeps it equal to: its CopyRule is the Bundle's; not \
                     migrated"
                )
            } else {
                format!(
                    "trust-manager Bundle {name:?}: its CopyRule is the ClusterBundle {name}'s, \
                     which its users marked trust-manager.io/migrated; delete this Bundle too \
                     (trust-manager's copies are owned by it); not migrated"
                )
            })),
            // The preferred twin gives none (its line says why): this one stands in.
            (Ok(rules), false, _) => {
                let other = if *cluster { "Bundle" } else { "ClusterBundle" };
                let mut rules = rules.clone();
                if let Some(first) = rules.first_mut() {
                    first.notes.push(format!(
                        "the {other} {name} of the same name gives no CopyRule (its line says \
                         why): this is the {what}'s"
                    ));
                }
                out.rules.extend(rules);
            }
            (Err(reason), _, _) => out.skipped.push(skipped(format!(
                "trust-manager {what} {name:?}: {reason}; not migrated"
            ))),
        }
    }
    out
}

/// What a Bundle or a ClusterBundle says, as a CopyRule says it: its CopyRules are made of
/// this ([`rules_of`]), one per target.
struct Parts {
    name: String,
    sources: Vec<BundleSourceSpec>,
    /// Manifests to apply with the CopyRules (the ConfigMap of inline certificates).
    objects: Vec<Value>,
    /// Said in each CopyRule's notes: where it is from, what it does as trust-manager did.
    said: Vec<String>,
    /// Left out, said in each CopyRule's notes.
    left_out: Vec<String>,
    namespace_selector: LabelSelector,
    targets: Vec<Target>,
}

/// One target kind's copy.
struct Target {
    kind: &'static str,
    /// The bundle's PEM's key, or why there is none.
    key: Result<String, String>,
    formats: Option<FormatsSpec>,
    /// The field the truststores came from, for the note when they would make the CopyRule
    /// invalid.
    formats_field: String,
    /// Left out of this target only.
    notes: Vec<String>,
}

/// A Bundle's parts, or why it gives no CopyRule.
fn parts_of_bundle(bundle: &Bundle, trust_namespace: &str) -> Result<Parts, String> {
    let name = &bundle.metadata.name;
    check_name(name)?;
    let spec = &bundle.spec;
    let mut left_out = unknown("spec", &spec.other);
    let mut sources = Vec::new();
    let mut said = vec![format!("from trust-manager Bundle {name}")];
    let mut inline = Vec::new();
    for (i, raw) in spec.sources.iter().enumerate() {
        match source(i, raw, trust_namespace) {
            Ok(Read::Source(found)) => sources.push(found),
            Ok(Read::DefaultCas(at)) if sources.iter().any(|s| s.default_cas) => {
                said.push(format!("{at}: the default CAs, listed once"));
            }
            Ok(Read::DefaultCas(at)) => {
                let (source, note) = inline::default_cas(&at);
                sources.push(source);
                said.push(note);
            }
            Ok(Read::Inline(pem)) => inline.push(pem),
            Ok(Read::Nothing) => {}
            Err(note) => left_out.push(note),
        }
    }
    let objects = inline_objects(name, trust_namespace, &inline, &mut sources, &mut said)
        .map_err(|note| left_out.push(note))
        .unwrap_or_default();
    let target = &spec.target;
    let namespace_selector = namespace_selector(target.namespace_selector.as_ref(), &mut said)?;
    let (formats, formats_notes) = target
        .additional_formats
        .as_ref()
        .map(formats)
        .unwrap_or_default();
    left_out.extend(formats_notes);
    left_out.extend(unknown("target", &target.other));
    let targets = [
        ("ConfigMap", target.config_map.as_ref()),
        ("Secret", target.secret.as_ref()),
    ]
    .into_iter()
    .filter_map(|(kind, t)| t.map(|t| (kind, t)))
    .map(|(kind, template)| {
        let field = format!("target.{}", lower_camel(kind));
        Target {
            kind,
            key: template
                .key
                .clone()
                .filter(|k| transform::is_valid_key(k))
                .ok_or_else(|| format!("{field}.key is missing or not a valid key")),
            formats: formats.clone(),
            formats_field: "target.additionalFormats".into(),
            notes: template
                .metadata
                .as_ref()
                .is_some_and(|m| !m.is_null())
                .then(|| metadata_note(&field))
                .into_iter()
                .chain(unknown(&field, &template.other))
                .collect(),
        }
    })
    .collect();
    Ok(Parts {
        name: name.clone(),
        sources,
        objects,
        said,
        left_out,
        namespace_selector,
        targets,
    })
}

/// The ConfigMap of a bundle's inline certificates `pems` (none: nothing), its source added
/// to `sources` and said; or the note saying why they are left out.
fn inline_objects(
    bundle: &str,
    trust_namespace: &str,
    pems: &[String],
    sources: &mut Vec<BundleSourceSpec>,
    said: &mut Vec<String>,
) -> Result<Vec<Value>, String> {
    if pems.is_empty() {
        return Ok(Vec::new());
    }
    let (configmap, source, note) = inline::inline_source(bundle, trust_namespace, pems)?;
    sources.push(source);
    said.push(note);
    Ok(vec![configmap])
}

/// A name trust-manager gives its copies, that copyrator's must be too.
fn check_name(name: &str) -> Result<(), String> {
    if selector::is_dns_subdomain(name) {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a valid name for its copies, which trust-manager names after it"
        ))
    }
}

/// The notes for fields migrate does not know, at `at`.
fn unknown(at: &str, other: &BTreeMap<String, Value>) -> Vec<String> {
    other
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(field, _)| format!("{at}.{field}: migrate does not know it; left out"))
        .collect()
}

/// `target.namespaceSelector` as the CopyRule's; absent, every namespace (said).
fn namespace_selector(
    selector: Option<&LabelSelector>,
    said: &mut Vec<String>,
) -> Result<LabelSelector, String> {
    match selector {
        None => {
            said.push(
                "no namespaceSelector: every namespace, as trust-manager did, except \
                 copyrator's --exclude-namespaces"
                    .into(),
            );
            Ok(LabelSelector::default())
        }
        Some(sel) => {
            Selector::from_label_selector(sel).map_err(|e| {
                format!("target.namespaceSelector is not a selector copyrator can read ({e})")
            })?;
            Ok(sel.clone())
        }
    }
}

fn metadata_note(field: &str) -> String {
    format!(
        "{field}.metadata: copyrator's copies carry only its own labels and annotations; left out"
    )
}

/// The CopyRules of `parts` (one per target kind), or why there are none.
fn rules_of(parts: Parts, trust_namespace: &str) -> Result<Vec<PeerRule>, String> {
    let Parts {
        name,
        sources,
        mut objects,
        said,
        mut left_out,
        namespace_selector,
        targets,
    } = parts;
    if targets.is_empty() {
        return Err(
            "target names neither a configMap nor a secret: trust-manager writes nothing".into(),
        );
    }
    if sources.is_empty() {
        left_out.insert(0, "no source copyrator can read".into());
        return Err(left_out.join("; "));
    }
    if sources.len() > MAX_SOURCES {
        return Err(format!(
            "{} sources; a CopyRule bundle takes at most {MAX_SOURCES}: split it in two Bundles \
             with copies of different names, or label the sources and list a selector",
            sources.len()
        ));
    }
    let mut rules = Vec::new();
    let mut failed = Vec::new();
    let both = targets.len() == 2;
    for target in targets {
        let kind = target.kind;
        let mut notes = said.clone();
        if both {
            notes.push(format!(
                "trust-manager wrote both a ConfigMap and a Secret {name}: two CopyRules, this \
                 one for the {kind}"
            ));
        }
        notes.extend(left_out.iter().cloned());
        let key = match target.key {
            Ok(key) => key,
            Err(reason) => {
                failed.push(reason);
                continue;
            }
        };
        notes.extend(target.notes);
        let make = |formats: Option<FormatsSpec>| {
            CopyRule::new(
                &format!("trust-manager-{name}-{}", kind.to_ascii_lowercase()),
                CopyRuleSpec {
                    kind: kind.to_string(),
                    sources: Some(sources.clone()),
                    target_name: Some(name.clone()),
                    target: Some(TargetSpec {
                        key: Some(key.clone()),
                        formats,
                        ..Default::default()
                    }),
                    namespace_selector: Some(namespace_selector.clone()),
                    ..Default::default()
                },
            )
        };
        let mut rule = make(target.formats.clone());
        // What migrate prints, copyrator accepts: checked as admission checks it. Truststores
        // it would refuse (a store's key the same as the PEM's) are left out and said.
        if target.formats.is_some()
            && let Err(e) = Rule::from_copy_rule(&rule)
        {
            notes.push(format!(
                "{}: the truststores would make the CopyRule invalid ({e}); left out",
                target.formats_field
            ));
            rule = make(None);
        }
        if let Err(e) = Rule::from_copy_rule(&rule) {
            failed.push(format!("its {kind} CopyRule would be invalid ({e})"));
            continue;
        }
        rules.push(PeerRule {
            rule,
            source_namespace: trust_namespace.to_string(),
            notes,
            // Printed once, with the first of its CopyRules.
            objects: std::mem::take(&mut objects),
        });
    }
    if rules.is_empty() {
        return Err(failed.join("; "));
    }
    if let Some(rule) = rules.first_mut() {
        rule.notes.extend(failed);
    }
    Ok(rules)
}

/// What one entry of a Bundle's `spec.sources` gives.
enum Read {
    Source(BundleSourceSpec),
    /// The default CAs, asked for at this field.
    DefaultCas(String),
    /// Inline PEM certificates (judged already).
    Inline(String),
    /// Nothing (`useDefaultCAs: false`).
    Nothing,
}

/// One entry of `spec.sources` as what it gives a CopyRule bundle, or the note saying why it
/// is left out.
fn source(i: usize, raw: &Value, trust_namespace: &str) -> Result<Read, String> {
    let at = format!("sources[{i}]");
    let entry =
        Source::deserialize(raw).map_err(|e| format!("{at}: cannot be read ({e}); left out"))?;
    let (kind, reference) = match (
        &entry.config_map,
        &entry.secret,
        &entry.in_line,
        entry.use_default_cas,
    ) {
        (Some(r), None, None, None | Some(false)) => ("ConfigMap", r),
        (None, Some(r), None, None | Some(false)) => ("Secret", r),
        (None, None, Some(pem), None | Some(false)) => {
            return inline::inline_certificates(&format!("{at}.inLine"), pem).map(Read::Inline);
        }
        (None, None, None, Some(true)) => {
            return Ok(Read::DefaultCas(format!("{at}.useDefaultCAs")));
        }
        (None, None, None, _) if entry.other.is_empty() => return Ok(Read::Nothing),
        _ => {
            let fields: Vec<&str> = [
                ("configMap", entry.config_map.is_some()),
                ("secret", entry.secret.is_some()),
                ("inLine", entry.in_line.is_some()),
                ("useDefaultCAs", entry.use_default_cas == Some(true)),
            ]
            .into_iter()
            .filter_map(|(f, set)| set.then_some(f))
            .chain(entry.other.keys().map(String::as_str))
            .collect();
            return Err(format!(
                "{at} has {}, not exactly one of configMap, secret, inLine and useDefaultCAs; \
                 left out",
                fields.join(", ")
            ));
        }
    };
    let at = format!("{at}.{}", lower_camel(kind));
    if let Some(field) = reference.other.keys().next() {
        return Err(format!("{at}.{field}: migrate does not know it; left out"));
    }
    let what = reference.name.as_deref().map_or_else(
        || format!("{at} ({kind}s by selector)"),
        |n| format!("{at} ({kind} {n})"),
    );
    if reference.include_all_keys == Some(true) {
        return Err(format!(
            "{what}: includeAllKeys: a CopyRule bundle source names one key; list the source \
             once per key; left out"
        ));
    }
    reference_source(
        &what,
        kind,
        reference.name.as_ref(),
        reference.selector.as_ref(),
        reference.key.as_ref(),
        trust_namespace,
    )
    .map(Read::Source)
}

/// A source reference (`what` names it in notes) as a CopyRule bundle source, or the note
/// saying why it is left out.
fn reference_source(
    what: &str,
    kind: &str,
    name: Option<&String>,
    selector: Option<&LabelSelector>,
    key: Option<&String>,
    trust_namespace: &str,
) -> Result<BundleSourceSpec, String> {
    let Some(key) = key.cloned() else {
        return Err(format!("{what}: no key; left out"));
    };
    if !transform::is_valid_key(&key) {
        return Err(format!("{what}: {key:?} is not a valid key; left out"));
    }
    let (name, selector) = match (name, selector) {
        (Some(name), None) if selector::is_dns_subdomain(name) => (Some(name.clone()), None),
        (None, Some(sel)) => match Selector::from_label_selector(sel) {
            Ok(_) => (None, Some(sel.clone())),
            Err(e) => {
                return Err(format!(
                    "{what}: its selector cannot be read ({e}); left out"
                ));
            }
        },
        _ => {
            return Err(format!(
                "{what}: not exactly one valid name or selector; left out"
            ));
        }
    };
    Ok(BundleSourceSpec {
        kind: kind.to_string(),
        namespace: trust_namespace.to_string(),
        name,
        selector,
        key,
        ..Default::default()
    })
}

/// `additionalFormats` as the CopyRule's truststores (`spec.target.formats`, made of the
/// bundle's PEM; the passwords' defaults are trust-manager's: `changeit` for JKS, empty for
/// PKCS#12), and what is left out of them: a store without a key, a PKCS#12 `profile`
/// (copyrator's PKCS#12 has one shape, SPEC §3.2).
fn formats(formats: &AdditionalFormats) -> (Option<FormatsSpec>, Vec<String>) {
    let mut notes = unknown("target.additionalFormats", &formats.other);
    let mut store = |name: &str, store: &Option<Store>| -> Option<TruststoreSpec> {
        let store = store.as_ref()?;
        notes.extend(unknown(
            &format!("target.additionalFormats.{name}"),
            &store.other,
        ));
        let Some(key) = store.key.as_deref().filter(|k| transform::is_valid_key(k)) else {
            notes.push(format!(
                "target.additionalFormats.{name}.key is missing or not a valid key; that store \
                 is left out"
            ));
            return None;
        };
        if let Some(profile) = &store.profile {
            notes.push(format!(
                "target.additionalFormats.{name}.profile {profile}: copyrator makes one kind of \
                 PKCS#12 (SPEC 3.2), not trust-manager's profiles; left out"
            ));
        }
        Some(TruststoreSpec {
            key: key.to_string(),
            password: store.password.clone(),
            password_secret_ref: None,
        })
    };
    let jks = store("jks", &formats.jks);
    let pkcs12 = store("pkcs12", &formats.pkcs12);
    let spec = (jks.is_some() || pkcs12.is_some()).then_some(FormatsSpec {
        from: None,
        pkcs12,
        jks,
    });
    (spec, notes)
}

/// `ConfigMap` → `configMap`, as trust-manager names its fields.
fn lower_camel(kind: &str) -> String {
    let mut chars = kind.chars();
    chars
        .next()
        .map(|c| c.to_ascii_lowercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

// The parts of a Bundle migrate reads. Each level keeps the fields it does not name in
// `other`, so that a field migrate does not understand is reported rather than ignored.

#[derive(Debug, Deserialize)]
struct Bundle {
    metadata: BundleMeta,
    #[serde(default, deserialize_with = "nullable")]
    spec: BundleSpec,
}

#[derive(Debug, Deserialize)]
struct BundleMeta {
    #[serde(default, deserialize_with = "nullable")]
    name: String,
}

#[derive(Debug, Default, Deserialize)]
struct BundleSpec {
    /// Read one by one, so that one source migrate cannot read does not hide the others.
    #[serde(default, deserialize_with = "nullable")]
    sources: Vec<Value>,
    #[serde(default, deserialize_with = "nullable")]
    target: BundleTarget,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Source {
    config_map: Option<SourceRef>,
    secret: Option<SourceRef>,
    in_line: Option<String>,
    #[serde(rename = "useDefaultCAs")]
    use_default_cas: Option<bool>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SourceRef {
    name: Option<String>,
    selector: Option<LabelSelector>,
    key: Option<String>,
    include_all_keys: Option<bool>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BundleTarget {
    config_map: Option<TargetTemplate>,
    secret: Option<TargetTemplate>,
    additional_formats: Option<AdditionalFormats>,
    namespace_selector: Option<LabelSelector>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

#[derive(Debug, Deserialize)]
struct TargetTemplate {
    key: Option<String>,
    /// Labels and annotations trust-manager put on its targets.
    metadata: Option<Value>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

#[derive(Debug, Deserialize)]
struct AdditionalFormats {
    jks: Option<Store>,
    pkcs12: Option<Store>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

#[derive(Debug, Deserialize)]
struct Store {
    key: Option<String>,
    /// The store's password; absent, trust-manager's default, which is copyrator's too.
    password: Option<String>,
    profile: Option<String>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

mod cluster_bundle;
mod inline;
#[cfg(test)]
mod tests;
