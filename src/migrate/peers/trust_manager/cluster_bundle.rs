//! trust-manager's `ClusterBundle` (`trust-manager.io/v1alpha2`), its successor of `Bundle`,
//! read into the parts of its CopyRules: `sourceRefs` become `spec.sources`; each target's
//! `data` gives the PEM's key, a PKCS#12 store, and the JKS store trust-manager's own
//! migration marks by annotation; `defaultCAs.provider: System` and `inLineCAs` as a Bundle's
//! default CAs and inline certificates are. What a CopyRule cannot say (a key with a wildcard,
//! a PKCS#12 `profile`, a second PEM key, the targets' metadata, fields migrate does not know)
//! is left out and said, as for a Bundle.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::Deserialize;
use serde_json::Value;

use super::{
    Parts, Target, check_name, inline, inline_objects, lower_camel, metadata_note,
    namespace_selector, nullable, reference_source, unknown,
};
use crate::{
    copyrule::{BundleSourceSpec, FormatsSpec, TruststoreSpec},
    transform,
};

/// Marks a ClusterBundle as its users' own: trust-manager no longer keeps it equal to the
/// Bundle of its name.
const MIGRATED: &str = "trust-manager.io/migrated";
/// The key of the PKCS#12 entry trust-manager writes as a JKS store instead (a Bundle's
/// `additionalFormats.jks`, converted).
const JKS_KEY: &str = "internal.trust-manager.io/jks-key";

/// Whether trust-manager's migration has handed this ClusterBundle to its users.
pub(super) fn is_migrated(doc: &Value) -> bool {
    doc["metadata"]["annotations"].get(MIGRATED).is_some()
}

/// A ClusterBundle's parts, or why it gives no CopyRule.
pub(super) fn read(doc: &Value, trust_namespace: &str) -> Result<Parts, String> {
    let bundle = ClusterBundle::deserialize(doc)
        .map_err(|e| format!("not a ClusterBundle migrate can read ({e})"))?;
    let name = &bundle.metadata.name;
    check_name(name)?;
    let spec = &bundle.spec;
    let mut left_out = unknown("spec", &spec.other);
    let mut said = vec![format!("from trust-manager ClusterBundle {name}")];
    let mut sources = Vec::new();
    match spec.default_cas.provider.as_deref() {
        None | Some("Disabled") => {}
        Some("System") => {
            let (source, note) = inline::default_cas("defaultCAs.provider System");
            sources.push(source);
            said.push(note);
        }
        Some(other) => left_out.push(format!(
            "defaultCAs.provider {other}: migrate does not know it; left out"
        )),
    }
    left_out.extend(unknown("defaultCAs", &spec.default_cas.other));
    for (i, raw) in spec.source_refs.iter().enumerate() {
        match source_ref(i, raw, trust_namespace) {
            Ok(found) => sources.push(found),
            Err(note) => left_out.push(note),
        }
    }
    let inline: Vec<String> = match spec.in_line_cas.as_deref() {
        Some(pem) if !pem.trim().is_empty() => {
            match inline::inline_certificates("inLineCAs", pem) {
                Ok(pem) => vec![pem],
                Err(note) => {
                    left_out.push(note);
                    Vec::new()
                }
            }
        }
        _ => Vec::new(),
    };
    let objects = inline_objects(name, trust_namespace, &inline, &mut sources, &mut said)
        .map_err(|note| left_out.push(note))
        .unwrap_or_default();
    let target = &spec.target;
    let namespace_selector = namespace_selector(target.namespace_selector.as_ref(), &mut said)?;
    left_out.extend(unknown("target", &target.other));
    let jks_key = bundle.metadata.annotations.get(JKS_KEY).map(String::as_str);
    let targets = [
        ("ConfigMap", target.config_map.as_ref()),
        ("Secret", target.secret.as_ref()),
    ]
    .into_iter()
    .filter_map(|(kind, t)| t.map(|t| key_value_target(kind, t, jks_key)))
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

/// One entry of `spec.sourceRefs` as a CopyRule bundle source, or the note saying why it is
/// left out.
fn source_ref(i: usize, raw: &Value, trust_namespace: &str) -> Result<BundleSourceSpec, String> {
    let at = format!("sourceRefs[{i}]");
    let entry =
        SourceRef::deserialize(raw).map_err(|e| format!("{at}: cannot be read ({e}); left out"))?;
    if let Some(field) = entry.other.keys().next() {
        return Err(format!("{at}.{field}: migrate does not know it; left out"));
    }
    let kind = match entry.kind.as_deref() {
        Some("ConfigMap") => "ConfigMap",
        Some("Secret") => "Secret",
        Some(other) => {
            return Err(format!(
                "{at}.kind {other}: a bundle's source is a ConfigMap or a Secret; left out"
            ));
        }
        None => return Err(format!("{at}: no kind; left out")),
    };
    let what = entry.name.as_deref().map_or_else(
        || format!("{at} ({kind}s by selector)"),
        |n| format!("{at} ({kind} {n})"),
    );
    if let Some(key) = entry.key.as_deref().filter(|k| k.contains('*')) {
        return Err(format!(
            "{what}: key {key:?} is a pattern; a CopyRule bundle source names one key: list \
             the source once per key; left out"
        ));
    }
    reference_source(
        &what,
        kind,
        entry.name.as_ref(),
        entry.selector.as_ref(),
        entry.key.as_ref(),
        trust_namespace,
    )
}

/// `target.configMap` or `target.secret`: the first PEM entry's key is the bundle's key, the
/// PKCS#12 entries its stores (the one `jks_key` names is a JKS store).
fn key_value_target(kind: &'static str, target: &KeyValueTarget, jks_key: Option<&str>) -> Target {
    let field = format!("target.{}", lower_camel(kind));
    let mut notes = unknown(&field, &target.other);
    if target
        .metadata
        .as_ref()
        .is_some_and(|m| !m.is_null() && m.as_object().is_none_or(|o| !o.is_empty()))
    {
        notes.push(metadata_note(&field));
    }
    let mut pem: Option<String> = None;
    let (mut pkcs12, mut jks): (Option<TruststoreSpec>, Option<TruststoreSpec>) = (None, None);
    for (i, raw) in target.data.iter().enumerate() {
        let at = format!("{field}.data[{i}]");
        let entry = match Entry::deserialize(raw) {
            Ok(entry) => entry,
            Err(e) => {
                notes.push(format!("{at}: cannot be read ({e}); left out"));
                continue;
            }
        };
        notes.extend(unknown(&at, &entry.other));
        let Some(key) = entry.key.filter(|k| transform::is_valid_key(k)) else {
            notes.push(format!("{at}.key is missing or not a valid key; left out"));
            continue;
        };
        let format = entry.format.as_deref().unwrap_or("PEM");
        if format == "PEM" {
            for (field, set) in [
                ("password", entry.password.is_some()),
                ("profile", entry.profile.is_some()),
            ] {
                if set {
                    notes.push(format!(
                        "{at}.{field}: only a PKCS12 entry has one; left out"
                    ));
                }
            }
        }
        match (format, &pem) {
            ("PEM", None) => pem = Some(key),
            ("PEM", Some(first)) => notes.push(format!(
                "{at} ({key}): a CopyRule's copy holds the bundle's PEM under one key ({first}); \
                 left out"
            )),
            ("PKCS12", _) => {
                let is_jks = jks_key == Some(key.as_str());
                let (store, what) = if is_jks {
                    (&mut jks, "JKS")
                } else {
                    (&mut pkcs12, "PKCS#12")
                };
                if store.is_some() {
                    notes.push(format!(
                        "{at} ({key}): a CopyRule's copy holds one {what} store; left out"
                    ));
                    continue;
                }
                match (entry.profile, is_jks) {
                    (Some(profile), false) => notes.push(format!(
                        "{at}.profile {profile}: copyrator makes one kind of PKCS#12 (SPEC \
                         3.2), not trust-manager's profiles; left out"
                    )),
                    (Some(profile), true) => notes.push(format!(
                        "{at}.profile {profile}: a JKS store has no profile; left out"
                    )),
                    (None, _) => {}
                }
                if is_jks && entry.password.is_none() {
                    notes.push(format!(
                        "{at} ({key}): no password; the JKS store gets copyrator's default, \
                         changeit"
                    ));
                }
                // Absent, trust-manager's default password, which is copyrator's too.
                *store = Some(TruststoreSpec {
                    key,
                    password: entry.password,
                    password_secret_ref: None,
                });
            }
            (other, _) => notes.push(format!(
                "{at}.format {other}: migrate does not know it; left out"
            )),
        }
    }
    Target {
        kind,
        key: pem.ok_or_else(|| {
            format!("{field}.data has no PEM entry: a CopyRule bundle's copy always holds the PEM")
        }),
        formats: (pkcs12.is_some() || jks.is_some()).then_some(FormatsSpec {
            from: None,
            pkcs12,
            jks,
        }),
        formats_field: format!("{field}.data"),
        notes,
    }
}

// The parts of a ClusterBundle migrate reads; as for a Bundle, each level keeps the fields it
// does not name in `other`, so that they are reported rather than ignored.

#[derive(Debug, Deserialize)]
struct ClusterBundle {
    metadata: Meta,
    #[serde(default, deserialize_with = "nullable")]
    spec: Spec,
}

#[derive(Debug, Deserialize)]
struct Meta {
    #[serde(default, deserialize_with = "nullable")]
    name: String,
    #[serde(default, deserialize_with = "nullable")]
    annotations: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    /// Read one by one, so that one source migrate cannot read does not hide the others.
    #[serde(default, deserialize_with = "nullable")]
    source_refs: Vec<Value>,
    #[serde(rename = "defaultCAs", default, deserialize_with = "nullable")]
    default_cas: DefaultCas,
    #[serde(rename = "inLineCAs")]
    in_line_cas: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    target: BundleTarget,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

#[derive(Debug, Default, Deserialize)]
struct DefaultCas {
    provider: Option<String>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

#[derive(Debug, Deserialize)]
struct SourceRef {
    kind: Option<String>,
    name: Option<String>,
    selector: Option<LabelSelector>,
    key: Option<String>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BundleTarget {
    config_map: Option<KeyValueTarget>,
    secret: Option<KeyValueTarget>,
    namespace_selector: Option<LabelSelector>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

#[derive(Debug, Deserialize)]
struct KeyValueTarget {
    /// Read one by one, as the sources are.
    #[serde(default, deserialize_with = "nullable")]
    data: Vec<Value>,
    /// Labels and annotations trust-manager put on its targets.
    metadata: Option<Value>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

#[derive(Debug, Deserialize)]
struct Entry {
    key: Option<String>,
    /// `PEM` (absent) or `PKCS12`.
    format: Option<String>,
    password: Option<String>,
    profile: Option<String>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}
