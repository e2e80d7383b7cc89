//! The `copyrator` binary: parses the command line and runs `serve`, `certs`, `manifests`,
//! `explain`, `plan`, `migrate` or `resync`.

use std::process::ExitCode;

use clap::FromArgMatches;
use copyrator::{
    app,
    certs::{self, CertRequest},
    cli::{Cli, Command, ExplicitPolicy, ManifestsCommand, conventions},
    explain,
    manifests::{self, WebhookOptions, WebhookTarget},
    migrate, telemetry,
};

fn main() -> ExitCode {
    // As `Cli::parse()`, keeping the matches: explain needs to know which policy flags were
    // given rather than defaulted.
    // SAFETY: no other thread exists yet.
    unsafe { conventions::carry_renamed_env() };
    let matches = conventions::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Command::Serve(args) => {
            tune_malloc();
            if let Err(e) = telemetry::init(args.log_format, &args.log_level) {
                eprintln!("copyrator: {e}");
                return ExitCode::from(2);
            }
            let mut runtime = tokio::runtime::Builder::new_multi_thread();
            if let Some(threads) = args.threads {
                runtime.worker_threads(threads.into());
            }
            match runtime.enable_all().build() {
                Ok(rt) => rt.block_on(app::run(*args)),
                Err(e) => Err(e.into()),
            }
        }
        Command::Certs(args) => {
            let req = CertRequest {
                dns_names: args.dns,
                ips: args.ip,
                valid_days: args.days,
            };
            let req = if req.dns_names.is_empty() && req.ips.is_empty() {
                CertRequest {
                    valid_days: req.valid_days,
                    ..CertRequest::default()
                }
            } else {
                req
            };
            certs::write(&args.out, &req)
                .map(|_| {
                    println!(
                        "wrote {}/{{{},{},{}}}",
                        args.out.display(),
                        certs::CA_CERT_FILE,
                        certs::TLS_CERT_FILE,
                        certs::TLS_KEY_FILE
                    )
                })
                .map_err(Into::into)
        }
        Command::Explain(command) => one_off(explain::run(
            command,
            ExplicitPolicy::from_matches(&matches),
        )),
        Command::Plan(args) => one_off(explain::plan::run(
            *args,
            ExplicitPolicy::from_matches(&matches),
        )),
        Command::Migrate(args) => one_off(migrate::run(*args)),
        Command::Resync(args) => one_off(explain::resync::run(args)),
        Command::Manifests(ManifestsCommand::Crd) => manifests::crd_yaml()
            .map(|y| print!("{y}"))
            .map_err(Into::into),
        Command::Manifests(ManifestsCommand::NamespacedCrd) => manifests::namespaced_crd_yaml()
            .map(|y| print!("{y}"))
            .map_err(Into::into),
        Command::Manifests(ManifestsCommand::HubLinkCrd) => manifests::hub_link_crd_yaml()
            .map(|y| print!("{y}"))
            .map_err(Into::into),
        Command::Manifests(ManifestsCommand::HubJoin(args)) => (|| {
            let read = |path: &Option<std::path::PathBuf>, flag: &str| {
                path.as_ref()
                    .map(|p| {
                        std::fs::read(p)
                            .map_err(|e| anyhow::anyhow!("reading {flag} {}: {e}", p.display()))
                    })
                    .transpose()
            };
            let join = copyrator::manifests::hub_join::Join {
                cluster: args.cluster,
                members_namespace: args.members_namespace,
                link: args.link,
                member_namespace: args.member_namespace,
                server: args.server,
                ca: read(&args.ca_file, "--ca-file")?
                    .map(|pem| {
                        let is_pem = String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----");
                        anyhow::ensure!(
                            is_pem,
                            "--ca-file {}: not a PEM certificate (no -----BEGIN CERTIFICATE----- line): \
                             give the hub API server's CA as PEM (its kubeconfig's \
                             certificate-authority-data, base64-decoded)",
                            args.ca_file.as_ref().map(|p| p.display().to_string()).unwrap_or_default()
                        );
                        Ok(pem)
                    })
                    .transpose()?,
                token: read(&args.token_file, "--token-file")?
                    .map(|t| String::from_utf8_lossy(&t).into_owned()),
                source_namespaces: args.source_namespaces,
                trusted_source_namespaces: args.trusted_source_namespaces,
                namespace_labels: args.namespace_selector,
                cluster_profile_namespace: args.cluster_profile_namespace,
            };
            print!("{}", join.manifests(args.side).map_err(anyhow::Error::msg)?);
            Ok(())
        })(),
        Command::Manifests(ManifestsCommand::Webhooks(args)) => (|| {
            let target = match (args.url, args.service) {
                (Some(url), None) => WebhookTarget::Url(url),
                (None, Some(svc)) => WebhookTarget::service(&svc).map_err(anyhow::Error::msg)?,
                _ => anyhow::bail!("give exactly one of --url or --service"),
            };
            let ca_bundle = match &args.ca_bundle {
                Some(path) => std::fs::read(path)
                    .map_err(|e| anyhow::anyhow!("reading --ca-bundle {}: {e}", path.display()))?,
                None => Vec::new(),
            };
            copyrator::cluster::kinds::register_offline(&args.copy_kinds)
                .map_err(anyhow::Error::msg)?;
            let yaml = manifests::webhooks_yaml(&WebhookOptions {
                name: args.name,
                target,
                ca_bundle,
                exclude_namespaces: args.exclude_namespaces,
                timeout_seconds: args.timeout_seconds,
            })?;
            print!("{yaml}");
            Ok(())
        })(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("copyrator: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs a command that talks to the cluster once, on a small runtime.
fn one_off(work: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(work)
}

/// glibc's allocator, tuned for a process whose peak is a resync's load (SPEC §7, memory).
///
/// Threads that allocate concurrently get arenas of their own (up to eight per core), and
/// memory freed in one arena is not reused by another: with tokio's workers and the blocking
/// threads that parse LIST responses, that fragmentation was most of copyrator's RSS above its
/// live heap. Measured with 5,000 namespaces and 4,500 copies (BENCHMARKS.md): peak RSS 42–57
/// MiB with glibc's default, 38–44 MiB with two arenas, 35 MiB with one — but one arena halved
/// admission throughput for Secret UPDATE reviews (lock contention), two did not.
///
/// Allocations of 128 KiB and more (a resync's tables and vectors of every namespace and copy,
/// a seeding LIST's index) get pages of their own, returned when freed. glibc raises that
/// threshold each time such a block is freed (up to 32 MiB), after which the next resync's
/// big blocks come from the arenas and leave holes there between the small, long-lived
/// entries of the indexes: peak RSS at 5,000 namespaces and 7,800 copies 40.4–42.1 MiB with
/// the moving threshold, 38.7 MiB with it fixed (settled 29.1–30.0 against 27.4–27.7).
///
/// `MALLOC_ARENA_MAX` and `MALLOC_MMAP_THRESHOLD_` in the environment win.
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    for (env, param, value) in [
        ("MALLOC_ARENA_MAX", libc::M_ARENA_MAX, 2),
        ("MALLOC_MMAP_THRESHOLD_", libc::M_MMAP_THRESHOLD, 128 * 1024),
    ] {
        if std::env::var_os(env).is_none() {
            // SAFETY: called before any other thread exists; mallopt only sets an allocator
            // parameter and reports failure by its return value.
            unsafe {
                libc::mallopt(param, value);
            }
        }
    }
}
