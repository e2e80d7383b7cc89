//! Kyverno. A ClusterPolicy rule that `generate`s an object by `clone` (from
//! `clone.namespace`/`clone.name`), with `synchronize: true`, into `namespace:
//! "{{request.object.metadata.name}}"` of the Namespaces its `match` selects (and its `exclude`
//! does not), asks what a CopyRule asks: the source, its kind, the copies' name, and the
//! namespaces (`matching`). Everything else a generate rule can say (inline `data`,
//! `cloneList`, no synchronization, variables, preconditions, triggers other than Namespaces)
//! is reported with the policy and rule, never dropped. Kyverno's copies name the policy and
//! rule that made them, not their source: none is known as a copy.

mod bounds;
mod data;
mod generating;
mod matching;

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::{Intent, PeerRule, Skipped, Translation, merge, nullable};
use crate::model::{Kind, NamespaceInfo, ObjectKey};

/// The one variable a generate rule triggered by a Namespace may name its target with: the
/// Namespace's own name, i.e. "into the namespace that matched".
const TRIGGER_NAME: &str = "{{request.object.metadata.name}}";

pub(super) fn translate(policies: &[Value], namespaces: &[NamespaceInfo]) -> Translation {
    let mut out = Translation::default();
    let mut intents = Vec::new();
    for doc in policies {
        if generating::is_generating_policy(doc) {
            match generating::translate(doc, namespaces) {
                Ok(found) => {
                    intents.extend(found.intents);
                    out.rules.extend(found.rules);
                }
                Err(reason) => out.skipped.push(Skipped {
                    source_namespace: String::new(),
                    note: format!(
                        "GeneratingPolicy {}: {reason}; not migrated",
                        doc["metadata"]["name"].as_str().unwrap_or_default()
                    ),
                }),
            }
            continue;
        }
        let policy = match Policy::deserialize(doc) {
            Ok(policy) => policy,
            Err(e) => {
                out.skipped.push(Skipped {
                    source_namespace: String::new(),
                    note: format!(
                        "{} {:?}: not a Kyverno policy migrate can read ({e}); not migrated",
                        doc["kind"].as_str().unwrap_or("policy"),
                        doc["metadata"]["name"].as_str().unwrap_or_default(),
                    ),
                });
                continue;
            }
        };
        let generating = policy
            .spec
            .rules
            .iter()
            .filter(|r| r.get("generate").is_some_and(|g| !g.is_null()))
            .count();
        for raw in &policy.spec.rules {
            if raw.get("generate").is_none_or(Value::is_null) {
                // Validation, mutation, image verification: not copies.
                continue;
            }
            let rule_name = raw["name"].as_str().unwrap_or_default();
            let at = format!(
                "{} {}, rule {rule_name:?}",
                policy.kind, policy.metadata.name
            );
            let rule = match Rule::deserialize(raw) {
                Ok(rule) => rule,
                Err(e) => {
                    out.skipped.push(Skipped {
                        source_namespace: String::new(),
                        note: format!("{at}: cannot be read ({e}); not migrated"),
                    });
                    continue;
                }
            };
            match translate_rule(&policy, &rule, generating, namespaces) {
                Ok(Translated::Intents(found)) => intents.extend(found),
                Ok(Translated::Rules(rules)) => out.rules.extend(rules),
                Err(reason) => out.skipped.push(Skipped {
                    source_namespace: rule.generate.source_namespace(),
                    note: format!("{at}: {reason}; not migrated"),
                }),
            }
        }
    }
    out.intents = merge(intents);
    out
}

/// What one generate rule becomes.
enum Translated {
    /// A clone: copies of an existing object (one intent per way its match selects
    /// namespaces).
    Intents(Vec<Intent>),
    /// Inline `data`: template CopyRules, whole.
    Rules(Vec<PeerRule>),
}

/// One generate rule's translation, or why it has none.
fn translate_rule(
    policy: &Policy,
    rule: &Rule,
    generating: usize,
    namespaces: &[NamespaceInfo],
) -> Result<Translated, String> {
    if policy.kind == "Policy" {
        return Err(format!(
            "a namespaced Policy generates only into its own namespace ({}), triggered by \
             objects there, never by Namespaces; copyrator copies across namespaces",
            policy.metadata.namespace.as_deref().unwrap_or("?")
        ));
    }
    if let Some(field) = ["preconditions", "celPreconditions"]
        .into_iter()
        .find(|f| rule.other.contains_key(*f))
    {
        return Err(format!(
            "{field}: the rule applies only when its conditions hold, which a CopyRule cannot say"
        ));
    }
    unknown("the rule", &rule.other, &RULE_FIELDS_IGNORED)?;
    let generate = &rule.generate;
    // `uid` names an existing target object; it says nothing about what is copied.
    unknown("generate", &generate.other, &["uid"])?;
    if generate.foreach.is_some() {
        return Err(
            "generate.foreach generates one object per list entry; a CopyRule copies \
                    named objects"
                .into(),
        );
    }
    if let Some(content) = &generate.data {
        let kind = generated_kind(generate)?;
        let target_name = literal("generate.name", generate.name.as_deref())?;
        into_the_trigger(generate.namespace.as_deref())?;
        let (alternatives, notes) = targets(policy, rule, generating, namespaces)?;
        return data::template_rules(
            &data::Generated {
                rule_name: rule_name(policy, rule),
                kind,
                target_name,
                content,
                synchronize: generate.synchronize == Some(true),
                orphan: generate.orphan_downstream_on_policy_delete == Some(true),
            },
            alternatives,
            notes,
        )
        .map(Translated::Rules);
    }
    if let Some(list) = &generate.clone_list {
        let kinds: Vec<&str> = list["kinds"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        return Err(format!(
            "cloneList copies every object of kinds {} in {} that matches a selector: one \
             CopyRule per kind with sourceNamespace and sourceSelector says it, written by hand",
            kinds.join(", "),
            list["namespace"].as_str().unwrap_or("?")
        ));
    }
    let clone = generate.clone.as_ref().ok_or(
        "generate has neither clone nor data: Kyverno creates an empty object, which is no copy",
    )?;
    unknown("generate.clone", &clone.other, &[])?;
    let kind = generated_kind(generate)?;
    let source_namespace = literal("clone.namespace", clone.namespace.as_deref())?;
    let source_name = literal("clone.name", clone.name.as_deref())?;
    let source = ObjectKey::new(kind, source_namespace, source_name);
    if !source.is_valid() {
        return Err(format!(
            "clone names {}/{}, which is not a valid {} namespace and name",
            source.namespace,
            source.name,
            kind.as_str()
        ));
    }
    let target_name = literal("generate.name", generate.name.as_deref())?;
    if !kind.is_valid_name(target_name) {
        return Err(format!(
            "generate.name {target_name:?} is not a valid {} name",
            kind.as_str()
        ));
    }
    into_the_trigger(generate.namespace.as_deref())?;

    let (alternatives, mut notes) = targets(policy, rule, generating, namespaces)?;
    let create_once = generate.synchronize != Some(true);
    if create_once {
        notes.push(CREATE_ONCE_NOTE.into());
    } else if generate.orphan_downstream_on_policy_delete == Some(true) {
        notes.push(
            "orphanDownstreamOnPolicyDelete: Kyverno left its copies when the policy was \
             deleted; copyrator deletes this rule's copies when the CopyRule is deleted \
             (deletionPolicy Delete; Retain keeps them)"
                .into(),
        );
    }
    let rule_name = rule_name(policy, rule);
    Ok(Translated::Intents(
        alternatives
            .into_iter()
            .map(|targets| Intent {
                source: source.clone(),
                target_name: (target_name != source.name).then(|| target_name.to_string()),
                targets,
                notes: notes.clone(),
                rule_name: Some(rule_name.clone()),
                create_once,
            })
            .collect(),
    ))
}

/// The ways a rule's match selects namespaces, and the notes every translated rule carries.
fn targets(
    policy: &Policy,
    rule: &Rule,
    generating: usize,
    namespaces: &[NamespaceInfo],
) -> Result<(Vec<super::Targets>, Vec<String>), String> {
    let mut notes = vec![from(policy, rule)];
    let alternatives = matching::targets(
        rule.match_.as_ref(),
        rule.exclude.as_ref(),
        namespaces,
        &mut notes,
    )?;
    notes.extend(common_notes(policy, &rule.generate, generating));
    Ok((alternatives, notes))
}

/// The note every translated rule starts with.
fn from(policy: &Policy, rule: &Rule) -> String {
    format!(
        "from Kyverno {} {}, rule {:?}",
        policy.kind, policy.metadata.name, rule.name
    )
}

/// The CopyRule name of a policy's rule.
fn rule_name(policy: &Policy, rule: &Rule) -> String {
    format!("kyverno-{}-{}", policy.metadata.name, rule.name)
}

/// What `synchronize: false` (Kyverno's default) becomes.
const CREATE_ONCE_NOTE: &str = "synchronize is not true: Kyverno created each copy once and \
    then left it to its namespace; so does this CopyRule (createOnce: true): a copy is made \
    where missing, once, and never updated, restored or deleted by copyrator";

/// Notes on how Kyverno's triggering differs, for every kind of generate rule.
fn common_notes(policy: &Policy, generate: &Generate, generating: usize) -> Vec<String> {
    let mut notes = Vec::new();
    let existing = generate
        .generate_existing
        .or(policy.spec.generate_existing)
        .or(policy.spec.generate_existing_on_policy_update)
        .unwrap_or(false);
    if !existing {
        notes.push(
            "generateExisting is not true: Kyverno generated only when a matching namespace \
             was created or changed after the policy; copyrator also copies into the matching \
             namespaces that exist now"
                .into(),
        );
    }
    if generating > 1 && policy.spec.apply_rules.as_deref() == Some("One") {
        notes.push(
            "applyRules: One: Kyverno applied only the first matching rule of the policy; \
             each rule is a CopyRule of its own here"
                .into(),
        );
    }
    notes
}

/// Rule fields that do not change what is copied where: `context` only defines variables
/// (a name that uses one is refused on its own), the rest is reporting.
const RULE_FIELDS_IGNORED: [&str; 3] = ["context", "skipBackgroundRequests", "reportProperties"];

/// An error naming the first field of `other` that is neither understood nor in `ignored`:
/// what migrate does not understand, it does not translate.
fn unknown(what: &str, other: &BTreeMap<String, Value>, ignored: &[&str]) -> Result<(), String> {
    match other
        .iter()
        .find(|(k, v)| !v.is_null() && !ignored.contains(&k.as_str()))
    {
        Some((field, _)) => Err(format!(
            "{what} has `{field}`, which migrate does not know how to express"
        )),
        None => Ok(()),
    }
}

/// A name that must be written out: a variable would take its value from the request.
fn literal<'a>(what: &str, value: Option<&'a str>) -> Result<&'a str, String> {
    match value.map(str::trim) {
        None | Some("") => Err(format!("{what} is missing")),
        Some(v) if v.contains("{{") => Err(format!(
            "{what} is {v:?}: a variable, taken from each request, which a CopyRule cannot say"
        )),
        Some(v) => Ok(v),
    }
}

/// The generated object's namespace must be the triggering Namespace's name: the copy goes
/// into the namespace that matched, as copyrator's do.
fn into_the_trigger(namespace: Option<&str>) -> Result<(), String> {
    let Some(namespace) = namespace.map(str::trim).filter(|n| !n.is_empty()) else {
        return Err(
            "generate.namespace is missing: the object would be cluster-scoped, and \
                    copyrator copies between namespaces"
                .into(),
        );
    };
    let compact: String = namespace.split_whitespace().collect();
    if compact == TRIGGER_NAME {
        return Ok(());
    }
    if namespace.contains("{{") {
        return Err(format!(
            "generate.namespace is {namespace:?}; only {TRIGGER_NAME} (the namespace that \
             matched) says what a CopyRule says"
        ));
    }
    Err(format!(
        "generate.namespace is the fixed namespace {namespace:?}: Kyverno writes there whenever \
         a matching Namespace appears, which a CopyRule cannot say (a CopyRule naming \
         {namespace:?} copies there always: write it by hand if that is meant)"
    ))
}

/// The generated object's kind, as copyrator names it: its API group from
/// `generate.apiVersion` (older policies leave it out for the core kinds).
fn generated_kind(generate: &Generate) -> Result<Kind, String> {
    let kind = literal("generate.kind", generate.kind.as_deref())?;
    let api_version = match generate.api_version.as_deref().map(str::trim) {
        Some(v) if !v.is_empty() => {
            literal("generate.apiVersion", Some(v))?;
            v
        }
        _ => well_known_api_version(kind).ok_or_else(|| {
            format!("generate.apiVersion is missing: migrate cannot tell {kind}'s API group")
        })?,
    };
    kind_of(api_version, kind)
}

/// The kind of `apiVersion` and `kind`, as copyrator names it.
fn kind_of(api_version: &str, kind: &str) -> Result<Kind, String> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    if kind.is_empty() || version.is_empty() {
        return Err(format!("{api_version:?} {kind:?} is not a kind"));
    }
    if let Some(known) = Kind::lookup(group, kind) {
        return Ok(known);
    }
    // A handle for the output only: this process names the kind in a CopyRule and never
    // reads or writes objects of it (no --adopt for Kyverno), so its resource name is
    // derived, not discovered.
    Kind::register(group, version, kind, &plural(kind)).map_err(|e| e.to_string())
}

/// The API version of the namespaced built-in kinds older policies name without one (their
/// row in the kind table).
fn well_known_api_version(kind: &str) -> Option<&'static str> {
    use copyrator_core::model::kind_table::TABLE;
    TABLE
        .iter()
        .find(|f| f.kind == Some(kind) && f.never_copied.is_none())
        .and_then(|f| f.api_version)
}

/// The resource name Kubernetes derives from a kind (`NetworkPolicy` → `networkpolicies`).
fn plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        return format!("{stem}ies");
    }
    if ["s", "x", "z", "ch", "sh"]
        .iter()
        .any(|e| lower.ends_with(e))
    {
        return format!("{lower}es");
    }
    format!("{lower}s")
}

// The parts of a Kyverno policy migrate reads (kyverno.io/v1 and v2beta1 alike). Each level
// keeps the fields it does not name in `other`, so that a field migrate does not understand
// is reported rather than ignored.

#[derive(Debug, Deserialize)]
struct Policy {
    kind: String,
    metadata: PolicyMeta,
    #[serde(default, deserialize_with = "nullable")]
    spec: PolicySpec,
}

#[derive(Debug, Deserialize)]
struct PolicyMeta {
    #[serde(default, deserialize_with = "nullable")]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PolicySpec {
    /// Read one by one, so that one rule migrate cannot read does not hide the others.
    #[serde(default, deserialize_with = "nullable")]
    rules: Vec<Value>,
    generate_existing: Option<bool>,
    /// Its older name.
    generate_existing_on_policy_update: Option<bool>,
    apply_rules: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Rule {
    #[serde(default, deserialize_with = "nullable")]
    name: String,
    #[serde(rename = "match")]
    match_: Option<matching::Match>,
    exclude: Option<matching::Match>,
    generate: Generate,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Generate {
    api_version: Option<String>,
    kind: Option<String>,
    name: Option<String>,
    namespace: Option<String>,
    synchronize: Option<bool>,
    generate_existing: Option<bool>,
    orphan_downstream_on_policy_delete: Option<bool>,
    clone: Option<CloneFrom>,
    clone_list: Option<Value>,
    data: Option<Value>,
    foreach: Option<Value>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

impl Generate {
    /// The source's namespace, for `migrate -n` ("" when the rule names none).
    fn source_namespace(&self) -> String {
        self.clone
            .as_ref()
            .and_then(|c| c.namespace.clone())
            .or_else(|| {
                self.clone_list
                    .as_ref()
                    .and_then(|l| l["namespace"].as_str().map(String::from))
            })
            .unwrap_or_default()
    }
}

#[derive(Debug, Deserialize)]
struct CloneFrom {
    namespace: Option<String>,
    name: Option<String>,
    #[serde(flatten)]
    other: BTreeMap<String, Value>,
}

#[cfg(test)]
mod tests;
