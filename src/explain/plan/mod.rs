//! `copyrator plan -f FILE` (SPEC §11.4): what applying manifest files would do, read from the
//! live cluster without writing anything. The files' objects are merged into the live ones as
//! `kubectl apply` merges them and checked as admission checks them (`plan::preview`, pure);
//! the cluster is read as `explain` reads it (`load`); the planner then explains each
//! document's part (`plan::explain`), printed as one change per target (`render`).

mod load;
mod render;

use std::path::PathBuf;

use anyhow::Context as _;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::{
    cli::{ExplainOptions, ExplainOutput, ExplicitPolicy, PlanArgs},
    cluster::Cluster,
    plan::{explain::explain, preview},
};

/// Runs `copyrator plan`; the plan goes to stdout. Fails, naming the document and the field,
/// when a document is one admission would deny.
pub async fn run(args: PlanArgs, explicit: ExplicitPolicy) -> anyhow::Result<()> {
    let PlanArgs {
        files,
        namespace,
        options,
    } = args;
    let ExplainOptions {
        kubeconfig,
        output,
        policy,
        lease: lease_args,
        webhook_configuration,
    } = options;
    let documents = read_files(&files)?;
    let client = crate::cluster::client::command_client(kubeconfig.as_deref()).await?;
    // The kinds copied here are known before the documents are told apart by kind.
    crate::cluster::kinds::register_for_cli(&client, &policy.copy_kinds).await;
    let default_namespace = namespace.unwrap_or_else(|| client.default_namespace().to_string());
    let (manifests, skipped) = preview::manifests(documents, &default_namespace)?;
    anyhow::ensure!(
        !manifests.is_empty(),
        "nothing to plan: no CopyRule, Namespace or object of a kind copied here in {}{}",
        files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        skipped
            .iter()
            .map(|s| format!("\n  {s}"))
            .collect::<String>()
    );
    let resolved = super::resolve_policy(
        &client,
        &policy,
        &lease_args,
        webhook_configuration.as_deref(),
        explicit,
    )
    .await?;
    let cluster = Cluster::for_commands(client);
    let now = Timestamp::now().as_second();
    let inputs = load::for_manifests(&cluster, &resolved.policy, manifests, now).await?;
    let documents: Vec<render::Document> = inputs
        .documents
        .into_iter()
        .map(|doc| render::Document {
            explanation: explain(
                &inputs.world,
                &doc.focus,
                &inputs.existing,
                &inputs.contents,
                &inputs.unlabelled,
                &inputs.bundles,
            ),
            manifest: doc.manifest,
            state: doc.state,
        })
        .collect();
    let view = render::View {
        policy: &resolved,
        documents: &documents,
        skipped: &skipped,
    };
    let text = match output {
        ExplainOutput::Table => render::table(&view, Timestamp::now()),
        ExplainOutput::Json => {
            serde_json::to_string_pretty(&render::report(&view)).context("rendering the plan")?
                + "\n"
        }
    };
    super::print_stdout(&text)
}

/// Every YAML document of `files` (`-` is stdin), in order.
fn read_files(files: &[PathBuf]) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    for file in files {
        out.extend(crate::cli::files::read_documents(file)?);
    }
    Ok(out)
}
