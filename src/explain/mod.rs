//! `copyrator explain namespace NS` and `copyrator explain source [KIND/]NS/NAME` (SPEC §11):
//! reads the cluster as a job does (`load`), asks the planner why (`plan::explain`), adds the
//! last Event copyrator wrote about each rule (`events`) and prints it (`render`), with the
//! running copyrator's policy (`policy`), read from its Lease (`lease`). Writes nothing.

mod events;
mod hub_links;
mod json;
mod lease;
mod load;
pub mod plan;
mod policy;
mod render;
pub mod resync;

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context as _;
use k8s_openapi::jiff::Timestamp;

use crate::{
    cli::{ExplainCommand, ExplainOptions, ExplainOutput, ExplicitPolicy, KindArg},
    cluster::Cluster,
    model::{Kind, ObjectKey},
    plan::explain::{Focus, explain},
    rules::RuleId,
    selector,
};

/// Runs `copyrator explain`; the explanation goes to stdout. `explicit`: the policy flags
/// given rather than defaulted, which override the running copyrator's published policy.
pub async fn run(command: ExplainCommand, explicit: ExplicitPolicy) -> anyhow::Result<()> {
    let (asked, options) = match command {
        ExplainCommand::Namespace { namespace, options } => {
            anyhow::ensure!(
                selector::is_dns_label(&namespace),
                "{namespace:?} is not a namespace name"
            );
            (Err(namespace), options)
        }
        ExplainCommand::Source {
            source,
            kind,
            options,
        } => (Ok((source, kind)), options),
    };
    let ExplainOptions {
        kubeconfig,
        output,
        policy,
        lease: lease_args,
        webhook_configuration,
    } = options;
    let client = crate::cluster::client::command_client(kubeconfig.as_deref()).await?;
    crate::cluster::kinds::register_for_cli(&client, &policy.copy_kinds).await;
    // A source's kind is known once the kinds the cluster's CopyRules name are registered.
    let focus = match asked {
        Err(namespace) => Focus::Namespace(namespace),
        Ok((source, kind)) => {
            Focus::Source(parse_source(&source, kind).map_err(anyhow::Error::msg)?)
        }
    };
    let cluster = Cluster::for_commands(client.clone());
    let resolved = resolve_policy(
        &client,
        &policy,
        &lease_args,
        webhook_configuration.as_deref(),
        explicit,
    )
    .await?;
    let mut resolved = resolved;
    let links = hub_links::links(&client).await;
    resolved
        .notes
        .extend(links.iter().flat_map(hub_links::link_notes));
    resolved.notes.extend(policy::scope_notes(
        resolved.scope.as_ref(),
        match &focus {
            Focus::Namespace(ns) => Some(ns.as_str()),
            Focus::Source(_) | Focus::Rule(_) => None,
        },
    ));
    let policy = resolved.policy.clone();
    let inputs = match &focus {
        Focus::Namespace(name) => load::for_namespace(&cluster, &policy, name).await?,
        Focus::Source(key) => load::for_source(&cluster, &policy, key).await?,
        // A rule's focus is `copyrator plan`'s (`plan::load`).
        Focus::Rule(id) => anyhow::bail!("explain does not explain the {id} alone"),
    };
    // A hub copy that is not here, and why (from the links' status, without reading the hub).
    if let Focus::Namespace(name) = &focus
        && let Some(ns) = inputs.world.namespaces().get(name)
    {
        resolved
            .notes
            .extend(hub_links::absent_notes(&links, ns, |key| {
                inputs.existing.contains_key(key)
            }));
    }
    let explanation = explain(
        &inputs.world,
        &focus,
        &inputs.existing,
        &inputs.contents,
        &inputs.unlabelled,
        &inputs.bundles,
    );
    let about: BTreeSet<events::About> = explanation
        .findings
        .iter()
        .map(|f| events::About::of(&f.rule))
        .collect();
    let events = events::last_events(&client, about).await;
    // When each rule's copies were last verified: a CopyRule's status says; for inline rules,
    // the leader's last full resync, if it published one.
    let verified: BTreeMap<RuleId, render::Verified> = explanation
        .findings
        .iter()
        .map(|f| {
            let v = match &f.rule {
                RuleId::CopyRule(name) => render::Verified::CopyRuleStatus(
                    inputs
                        .world
                        .copy_rules()
                        .iter()
                        .find(|cr| cr.metadata.name.as_deref() == Some(name.as_str()))
                        .and_then(|cr| cr.status.as_ref()?.last_verified_time.clone())
                        .map(|t| t.0),
                ),
                RuleId::Inline(_) | RuleId::Namespaced(_) => {
                    render::Verified::LeaderResync(resolved.last_resync)
                }
                // A hub's copies are verified by their link's rounds (its status).
                RuleId::Hub { .. } => render::Verified::LeaderResync(None),
            };
            (f.rule.clone(), v)
        })
        .collect();
    let view = render::View {
        focus: &focus,
        policy: &resolved,
        verified: &verified,
        namespace: match &focus {
            Focus::Namespace(name) => inputs.world.namespaces().get(name),
            Focus::Source(_) | Focus::Rule(_) => None,
        },
        source: match &focus {
            Focus::Source(key) => inputs.world.sources().get(key),
            Focus::Namespace(_) | Focus::Rule(_) => None,
        },
        explanation: &explanation,
        events: &events,
    };
    let text = match output {
        ExplainOutput::Table => render::table(&view, Timestamp::now()),
        ExplainOutput::Json => {
            serde_json::to_string_pretty(&json::report(&view))
                .context("rendering the explanation")?
                + "\n"
        }
    };
    print_stdout(&text)
}

/// Writes `text` to stdout; a reader that stops reading early (`| head`) is no error.
fn print_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        written => written.context("writing to stdout"),
    }
}

/// The policy to reason with (SPEC §11.1): the running copyrator's, read from its Lease in
/// its own namespace, each policy flag given (`explicit`) overriding its value.
async fn resolve_policy(
    client: &kube::Client,
    flags: &crate::cli::PolicyArgs,
    lease_args: &crate::cli::LeaseArgs,
    webhook_configuration: Option<&str>,
    explicit: ExplicitPolicy,
) -> anyhow::Result<policy::Resolved> {
    let search = lease::find_lease(client, lease_args, webhook_configuration).await?;
    let ignored = search.ignored_notes();
    let mut resolved = policy::resolve(&flags.policy(), explicit, search.lookup);
    resolved.notes.extend(ignored);
    Ok(resolved)
}

/// The registered kind a command line names: its kind or resource, any case, singular or
/// plural (`networkpolicy`, `NetworkPolicies`, `cm`), or `Kind.group` as `--copy-kinds` does.
fn kind_named(name: &str) -> Result<Kind, String> {
    let lower = name.to_ascii_lowercase();
    if lower == "cm" {
        return Ok(Kind::ConfigMap);
    }
    Kind::registered()
        .into_iter()
        .find(|k| {
            let kind = k.as_str().to_ascii_lowercase();
            lower == kind
                || lower == k.plural()
                || lower == k.name().to_ascii_lowercase()
                || lower == format!("{}.{}", k.plural(), k.group())
        })
        .ok_or_else(|| {
            let known: Vec<String> = Kind::registered()
                .into_iter()
                .map(|k| k.as_str().to_ascii_lowercase())
                .collect();
            format!(
                "{name:?} is not a kind copyrator copies here ({})",
                known.join(", ")
            )
        })
}

/// `NS/NAME` (of kind `kind`, default Secret), or `KIND/NS/NAME` for any kind copied here
/// (`secret/`, `configmap/`, `cm/`, `networkpolicy/`, plural or any case).
pub fn parse_source(spec: &str, kind: Option<KindArg>) -> Result<ObjectKey, String> {
    let parts: Vec<&str> = spec.split('/').collect();
    let (named, namespace, name) = match parts.as_slice() {
        [ns, name] => (None, *ns, *name),
        [kind, ns, name] => (Some(kind_named(kind)?), *ns, *name),
        _ => {
            return Err(format!(
                "{spec:?}: give NAMESPACE/NAME or KIND/NAMESPACE/NAME (secret/, configmap/, or another kind copied here)"
            ));
        }
    };
    let kind = match (named, kind.map(Kind::from)) {
        (Some(a), Some(b)) if a != b => {
            return Err(format!("{spec:?} names a {a}, but --kind says {b}"));
        }
        (Some(k), _) | (None, Some(k)) => k,
        (None, None) => Kind::Secret,
    };
    let key = ObjectKey::new(kind, namespace, name);
    if !key.is_valid() {
        return Err(format!("{spec:?} is not a valid NAMESPACE/NAME"));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_named_with_or_without_their_kind() {
        let secret = |ns, n| ObjectKey::new(Kind::Secret, ns, n);
        let cm = |ns, n| ObjectKey::new(Kind::ConfigMap, ns, n);
        assert_eq!(
            parse_source("platform/cred", None),
            Ok(secret("platform", "cred"))
        );
        assert_eq!(
            parse_source("platform/ca", Some(KindArg::Configmap)),
            Ok(cm("platform", "ca"))
        );
        assert_eq!(
            parse_source("configmap/platform/ca", None),
            Ok(cm("platform", "ca"))
        );
        assert_eq!(
            parse_source("cm/platform/ca", None),
            Ok(cm("platform", "ca"))
        );
        assert_eq!(
            parse_source("Secret/platform/cred", None),
            Ok(secret("platform", "cred"))
        );
        assert_eq!(
            parse_source("secret/platform/cred", Some(KindArg::Secret)),
            Ok(secret("platform", "cred"))
        );
        for bad in ["cred", "a/b/c/d", "pod/a/b", "Platform/cred", "platform/"] {
            assert!(parse_source(bad, None).is_err(), "{bad}");
        }
        let e = parse_source("secret/a/b", Some(KindArg::Configmap)).unwrap_err();
        assert!(e.contains("--kind says ConfigMap"), "{e}");
    }

    #[test]
    fn a_source_of_any_kind_copied_here_is_named_by_kind_or_resource() {
        let policy = Kind::register(
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "networkpolicies",
        )
        .unwrap();
        for named in [
            "networkpolicy/team/default-deny",
            "NetworkPolicies/team/default-deny",
            "NetworkPolicy.networking.k8s.io/team/default-deny",
            "networkpolicies.networking.k8s.io/team/default-deny",
        ] {
            assert_eq!(
                parse_source(named, None),
                Ok(ObjectKey::new(policy, "team", "default-deny")),
                "{named}"
            );
        }
        let e = parse_source("frobnicator/team/limits", None).unwrap_err();
        assert!(e.contains("not a kind copyrator copies here"), "{e}");
        assert!(e.contains("networkpolicy"), "{e}");
    }
}
