//! `copyrator migrate --from reflector|replicator|kubed` (SPEC §12): reads what the peer's
//! annotations ask for (`input`, `peers`), prints the copyrator configuration that asks the
//! same (`config`, `render`), and with `--adopt` takes over the peer's copies of the same
//! sources (`adopt`).

mod adopt;
mod config;
mod input;
mod peers;
mod render;

use std::collections::BTreeMap;

use crate::{
    cli::{MigrateArgs, MigrateOutput},
    explain::cli_cluster,
};

/// Runs `copyrator migrate`: the configuration to stdout, what `--adopt` did to stderr.
pub async fn run(args: MigrateArgs) -> anyhow::Result<()> {
    let policy = args.policy.policy();
    let cluster = if args.files.is_empty() {
        Some(cli_cluster(
            crate::app::kube_client(args.kubeconfig.as_deref()).await?,
        ))
    } else {
        None
    };
    let read = match &cluster {
        Some(cluster) => input::from_cluster(cluster, args.from).await?,
        None => input::from_files(&args.files, args.from)?,
    };
    let mut translation = peers::translate(args.from, &read.objects, &read.namespaces);
    if !args.namespaces.is_empty() {
        let keep = |ns: &String| args.namespaces.contains(ns);
        translation.intents.retain(|i| keep(&i.source.namespace));
        translation.copies.retain(|c| keep(&c.source.namespace));
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
    if args.adopt
        && let Some(cluster) = &cluster
    {
        for line in adopt::adopt(cluster, args.from, &config, &read.namespaces, &policy).await? {
            eprintln!("copyrator: {line}");
        }
    }
    Ok(())
}
