//! `copyrator migrate --from reflector|replicator|kubed|kyverno|trust-manager` (SPEC §12):
//! reads what the peer's annotations (Kyverno: its ClusterPolicies and Policies; trust-manager:
//! its Bundles and ClusterBundles) ask for (`input`, `peers`), prints the
//! copyrator configuration that asks the same (`config`, `render`), and with `--adopt` takes
//! over the peer's copies of the same sources (`adopt`).

mod adopt;
mod config;
mod input;
mod peers;
mod render;

use std::collections::BTreeMap;

use crate::cli::{MigrateArgs, MigrateOutput, Peer};

/// Runs `copyrator migrate`: the configuration to stdout, what `--adopt` did to stderr.
pub async fn run(args: MigrateArgs) -> anyhow::Result<()> {
    // Kyverno's copies name the policy and rule that made them, not their source: nothing
    // tells which copy is of which source, so none is adopted (said before anything is read).
    if args.adopt && args.from == Peer::Kyverno {
        anyhow::bail!(
            "--adopt is not available with --from kyverno: Kyverno's copies name the policy \
             that made them, not their source. Apply the printed CopyRules; copyrator reports \
             Kyverno's copies as conflicts and leaves them alone until they are gone"
        );
    }
    // Likewise trust-manager's: they name their (Cluster)Bundle, and a bundle's copies have no one
    // source to be adopted for.
    if args.adopt && args.from == Peer::TrustManager {
        anyhow::bail!(
            "--adopt is not available with --from trust-manager: trust-manager's copies name \
             their Bundle or ClusterBundle, not a source. Apply the printed CopyRules; copyrator reports \
             trust-manager's copies as conflicts and leaves them alone until they are gone"
        );
    }
    let policy = args.policy.policy();
    let cluster = if args.files.is_empty() {
        Some(crate::cluster::Cluster::for_commands(
            crate::cluster::client::command_client(args.kubeconfig.as_deref()).await?,
        ))
    } else {
        None
    };
    let read = match &cluster {
        Some(cluster) => input::from_cluster(cluster, args.from).await?,
        None => input::from_files(&args.files, args.from)?,
    };
    let mut translation =
        peers::translate(args.from, &read.configured(&args.trust_manager_namespace));
    if !args.namespaces.is_empty() {
        let keep = |ns: &String| args.namespaces.contains(ns);
        translation.intents.retain(|i| keep(&i.source.namespace));
        translation.copies.retain(|c| keep(&c.source.namespace));
        translation.rules.retain(|r| keep(&r.source_namespace));
        translation.skipped.retain(|s| keep(&s.source_namespace));
    }
    let sources: BTreeMap<_, _> = read
        .objects
        .iter()
        .map(|o| (o.key.clone(), o.clone()))
        .collect();
    let config = config::build(
        translation,
        &sources,
        &config::Options {
            peer: args.from,
            policy: &policy,
            copy_rules: args.copy_rules,
            trust_sources: args.trust_sources,
        },
    );
    let text = match args.output {
        MigrateOutput::Kubectl => render::kubectl(&config, args.from)?,
        MigrateOutput::Yaml => render::manifests(&config, args.from)?,
    };
    print!("{text}");
    let unresolved = config
        .items
        .iter()
        .flat_map(|i| &i.notes)
        .filter(|n| n.starts_with(peers::NO_NAMESPACES))
        .count();
    if unresolved > 0 {
        eprintln!(
            "copyrator: warning: {unresolved} source(s) name target namespaces that the files \
             cannot resolve: they hold no Namespace objects; add them (kubectl get namespaces -o yaml) \
             or run without -f against the cluster"
        );
    }
    let not_carried = config.skipped.len()
        + config
            .items
            .iter()
            .map(|i| i.notes.len() + usize::from(i.commented_out))
            .sum::<usize>();
    if args.strict && not_carried > 0 {
        anyhow::bail!(
            "migrate --strict: {not_carried} thing(s) could not be carried over exactly (the notes \
             in the output say which): resolve them, or run without --strict to accept them"
        );
    }
    if args.adopt
        && let Some(cluster) = &cluster
    {
        for line in adopt::adopt(cluster, args.from, &config, &read.namespaces, &policy).await? {
            eprintln!("copyrator: {line}");
        }
    }
    Ok(())
}
