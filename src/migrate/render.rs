//! The configuration as a shell script of kubectl commands, or as manifests for
//! `kubectl apply --server-side`.

use serde_json::{Value, json};

use super::config::{Change, Config, Item, peer_name};
use crate::{cli::Peer, marks, model::ObjectKey};

/// The shell script: one block per change, notes as comments.
pub fn kubectl(config: &Config, peer: Peer) -> anyhow::Result<String> {
    let mut out = header(
        config,
        peer,
        "run this script (kubectl must reach the cluster)",
    );
    out.push_str("set -e\n");
    for item in &config.items {
        out.push('\n');
        out.push_str(&comments(item, peer));
        for object in &item.objects {
            let apply = format!("kubectl apply -f - <<'EOF'\n{}EOF\n", yaml(object)?);
            out.push_str(&held(item, apply));
        }
        match &item.change {
            Change::Inline {
                source,
                selector,
                namespaces,
            } => {
                let (kind, ns, name) = names(source);
                out.push_str(&format!(
                    "kubectl -n {ns} label {kind} {name} {}=true --overwrite\n",
                    marks::SOURCE_LABEL
                ));
                let mut annotations = Vec::new();
                if let Some(sel) = selector {
                    annotations.push(quote(&format!(
                        "{}={sel}",
                        marks::NAMESPACE_SELECTOR_ANNOTATION
                    )));
                }
                if !namespaces.is_empty() {
                    annotations.push(quote(&format!(
                        "{}={}",
                        marks::NAMESPACES_ANNOTATION,
                        join(namespaces)
                    )));
                }
                out.push_str(&format!(
                    "kubectl -n {ns} annotate {kind} {name} --overwrite {}\n",
                    annotations.join(" ")
                ));
            }
            Change::CopyRule(rule) => {
                let apply = format!(
                    "kubectl apply -f - <<'EOF'\n{}EOF\n",
                    yaml(&serde_json::to_value(rule)?)?
                );
                out.push_str(&held(item, apply));
            }
        }
    }
    Ok(out)
}

/// YAML documents: for a source, a merge patch of its opt-in label and annotations (never a
/// manifest to apply: `kubectl apply` would drop the fields it leaves out, the data first),
/// each with the `kubectl patch` command that applies it; CopyRules as manifests.
pub fn manifests(config: &Config, peer: Peer) -> anyhow::Result<String> {
    let apply = if peer == Peer::TrustManager {
        // trust-manager's becomes CopyRules, and ConfigMaps of its inline certificates.
        "kubectl apply -f (CopyRules, and ConfigMaps holding inline certificates)"
    } else if peer == Peer::Kyverno {
        // Kyverno's configuration becomes CopyRules only.
        "kubectl apply -f (CopyRules only)"
    } else {
        "documents of kind Secret or ConfigMap are MERGE PATCHES of the existing sources: \n\
         #   apply each with the kubectl patch command above it, never with kubectl apply (that \n\
         #   would remove what they leave out, the data first); CopyRules: kubectl apply -f"
    };
    let mut out = header(config, peer, apply);
    for item in &config.items {
        for object in &item.objects {
            out.push_str("---\n");
            out.push_str(&format!(
                "# ConfigMap {}/{}: read by the CopyRule below\n",
                object["metadata"]["namespace"].as_str().unwrap_or_default(),
                object["metadata"]["name"].as_str().unwrap_or_default(),
            ));
            out.push_str(&held(item, yaml(object)?));
        }
        out.push_str("---\n");
        out.push_str(&comments(item, peer));
        let doc = match &item.change {
            Change::Inline {
                source,
                selector,
                namespaces,
            } => {
                let (kind, ns, name) = names(source);
                out.push_str(&format!(
                    "# kubectl -n {ns} patch {kind} {name} --type merge --patch-file THIS_DOCUMENT\n"
                ));
                let mut annotations = serde_json::Map::new();
                if let Some(sel) = selector {
                    annotations.insert(marks::NAMESPACE_SELECTOR_ANNOTATION.into(), json!(sel));
                }
                if !namespaces.is_empty() {
                    annotations
                        .insert(marks::NAMESPACES_ANNOTATION.into(), json!(join(namespaces)));
                }
                json!({
                    "apiVersion": "v1",
                    "kind": source.kind.as_str(),
                    "metadata": {
                        "name": source.name,
                        "namespace": source.namespace,
                        "labels": {marks::SOURCE_LABEL: "true"},
                        "annotations": annotations,
                    }
                })
            }
            Change::CopyRule(rule) => serde_json::to_value(rule)?,
        };
        out.push_str(&held(item, yaml(&doc)?));
    }
    Ok(out)
}

fn header(config: &Config, peer: Peer, apply: &str) -> String {
    let mut out = format!(
        "# copyrator configuration for what {name} does here (copyrator migrate --from {name}).\n\
         # Review it, then: {apply}\n{then}",
        name = peer_name(peer),
        then = afterwards(peer),
    );
    if config.items.is_empty() {
        out.push_str(&format!(
            "# Nothing to migrate: no {} configuration found.\n",
            peer_name(peer)
        ));
    }
    let held = config.items.iter().filter(|i| i.commented_out).count();
    if held > 0 {
        out.push_str(&format!(
            "# {held} CopyRule(s) printed commented out: their sources are in namespaces that are\n\
             #   not trusted (see each one's note; --trust-sources prints them in force).\n"
        ));
    }
    for skipped in &config.skipped {
        out.push_str(&format!("# Not migrated: {skipped}\n"));
    }
    out
}

/// What to do once the configuration is applied.
fn afterwards(peer: Peer) -> String {
    if peer == Peer::TrustManager {
        // trust-manager's targets carry no copyrator marks, and an owner reference to their
        // Bundle (or ClusterBundle): the garbage collector deletes them with it.
        return "# trust-manager's copies (named after their Bundle or ClusterBundle, owned by one) are\n\
                # objects copyrator does not own: it reports them as conflicts and leaves them alone.\n\
                # Then delete each migrated Bundle and ClusterBundle: the garbage collector deletes the\n\
                # copies with their owner, and copyrator writes its own at its next full resync\n\
                # (--resync-interval). For them at once, delete them first and apply this right after\n\
                # (a short gap). copyrator labels their sources copyrator.io/source=true itself, to\n\
                # follow their changes. Check with `copyrator explain namespace NAMESPACE`.\n"
            .to_string();
    }
    if peer == Peer::Kyverno {
        // Kyverno's copies carry no copyrator marks: conflicts until they are gone.
        return "# Kyverno's copies are objects copyrator does not own: it reports them as conflicts and\n\
                # leaves them alone. Then remove the migrated generate rules (each CopyRule names its\n\
                # policy and rule) from the ClusterPolicies: with synchronize, Kyverno deletes its\n\
                # copies with them (unless orphanDownstreamOnPolicyDelete; then delete them), and\n\
                # copyrator writes its own at its next full resync (--resync-interval). For them at\n\
                # once, remove the generate rules first and apply this right after (a short gap).\n\
                # Check with `copyrator explain source NAMESPACE/NAME`.\n"
            .to_string();
    }
    format!(
        "# Once `copyrator explain source NAMESPACE/NAME` shows every copy in sync, remove {peer}'s\n\
         # annotations from the sources and uninstall {peer}.\n",
        peer = peer_name(peer)
    )
}

fn comments(item: &Item, peer: Peer) -> String {
    let mut out = match &item.change {
        Change::Inline { source, .. } => format!("# {source}: inline rule ({})\n", peer_name(peer)),
        Change::CopyRule(rule) => format!(
            "# CopyRule {} ({})\n",
            rule.metadata.name.as_deref().unwrap_or_default(),
            peer_name(peer)
        ),
    };
    for note in &item.notes {
        out.push_str(&format!("#   {note}\n"));
    }
    out
}

/// `text` as printed: commented out line by line when the item is not in force (SPEC §12.1),
/// so neither `sh` nor `kubectl apply -f` acts on it.
fn held(item: &Item, text: String) -> String {
    if !item.commented_out {
        return text;
    }
    text.lines().map(|l| format!("# {l}\n")).collect()
}

fn names(key: &ObjectKey) -> (String, &str, &str) {
    (key.kind.name().to_lowercase(), &key.namespace, &key.name)
}

fn join(names: &std::collections::BTreeSet<String>) -> String {
    names.iter().cloned().collect::<Vec<_>>().join(",")
}

/// Single-quoted for a POSIX shell.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// YAML of a JSON value, without its nulls.
fn yaml(value: &Value) -> anyhow::Result<String> {
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k.clone(), strip(v)))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    Ok(serde_saphyr::to_string(&strip(value))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CopyRule for `platform/a` into every namespace, with `platform` untrusted.
    fn untrusted_every(trust_sources: bool) -> Config {
        use crate::{
            migrate::{
                config::{Options, build},
                peers::{Intent, Targets, Translation},
            },
            model::Kind,
            plan::Policy,
            tenancy::{NamespacePatterns, TrustPolicy},
        };
        let intent = Intent {
            rule_name: None,
            create_once: false,
            source: ObjectKey::new(Kind::Secret, "platform", "a"),
            target_name: None,
            targets: Targets {
                every: true,
                ..Default::default()
            },
            notes: Vec::new(),
        };
        let policy = Policy {
            excluded_namespaces: Default::default(),
            trust: TrustPolicy {
                trusted_namespaces: NamespacePatterns::parse("team-*").unwrap(),
            },
            ..Default::default()
        };
        build(
            Translation {
                intents: vec![intent],
                ..Default::default()
            },
            &Default::default(),
            &Options {
                peer: Peer::Kubed,
                policy: &policy,
                copy_rules: false,
                trust_sources,
            },
        )
    }

    #[test]
    fn untrusted_copy_rules_are_comments_in_both_outputs() {
        let config = untrusted_every(false);
        let script = kubectl(&config, Peer::Kubed).unwrap();
        assert!(
            !script.lines().any(|l| l.starts_with("kubectl")),
            "{script}"
        );
        assert!(
            script.contains("# kubectl apply -f - <<'EOF'\n# apiVersion: copyrator.io/v1alpha1"),
            "{script}"
        );
        let docs = manifests(&config, Peer::Kubed).unwrap();
        let parsed: Vec<Value> = serde_saphyr::from_multiple(&docs).unwrap();
        assert!(parsed.iter().all(Value::is_null), "{docs}");

        let asked = untrusted_every(true);
        let script = kubectl(&asked, Peer::Kubed).unwrap();
        assert!(
            script.contains("\nkubectl apply -f - <<'EOF'\napiVersion: copyrator.io/v1alpha1"),
            "{script}"
        );
        let docs = manifests(&asked, Peer::Kubed).unwrap();
        let parsed: Vec<Value> = serde_saphyr::from_multiple(&docs).unwrap();
        assert!(parsed.iter().any(|d| d["kind"] == "CopyRule"), "{docs}");
    }

    #[test]
    fn shell_quoting_survives_selectors() {
        assert_eq!(quote("a=b"), "'a=b'");
        assert_eq!(quote("env in (a,b),!x"), "'env in (a,b),!x'");
        assert_eq!(quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn yaml_keeps_strings_that_look_like_other_things_strings() {
        let y = yaml(&json!({"labels": {"copyrator.io/source": "true"}, "gone": null})).unwrap();
        let back: Value = serde_saphyr::from_str(&y).unwrap();
        assert_eq!(back, json!({"labels": {"copyrator.io/source": "true"}}));
    }
}
