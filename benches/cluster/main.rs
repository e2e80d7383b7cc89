//! copyrator against the raw API-server limit, measured in the same run (SPEC §7): the
//! arguments, the sizes, and the phases run in order into one report.
//!
//! Runs the release binary against a real kube-apiserver + etcd (scripts/bench.sh starts a
//! fresh one) and prints each figure beside its baseline and the ratio. The phases, in the
//! order they run (each a module):
//!
//! - big-payload: a ~1 MiB Secret fanned out: time and copyrator's peak RSS;
//! - selector-sources: CopyRule selector sources: copy latency, API-server CPU per 1,000
//!   unrelated writes;
//! - new-namespace: create response -> copy observed by a watch; baseline: a plain client
//!   creating the same Secret right after the namespace;
//! - fanout: source create / update with N matching namespaces -> every copy observed;
//!   baseline: a plain kube-rs client writing N Secrets at the same concurrency;
//! - bundle: one CopyRule bundling a Secret of 100 CA certificates into a ConfigMap in N
//!   namespaces (`--fanout`): the source updated (one certificate replaced) -> every copy
//!   observed with it; baseline: a plain client replacing N ConfigMaps of the same size at the
//!   same concurrency; copyrator's API calls, jobs and CPU per update round;
//! - restore: a copy deleted or edited by hand -> restored (watch event of the copy back);
//! - watch-triggers: new namespaces one at a time and source updates fanned out, with the
//!   webhooks registered and then with their configurations deleted (the watches alone):
//!   latency, API calls per change, jobs the watches queued;
//! - admission: throughput over TLS at rising concurrency, with copyrator's CPU;
//! - pod-gate: the Pod gate's no-op path over TLS; Pods created right after their new
//!   namespace, with the gate and with it unregistered (create time, copies present);
//! - apiserver-profile: kube-apiserver CPU profiles while update fan-outs run one a second:
//!   a plain client, the same with copyrator's marks, copyrator, and copyrator with a copies
//!   webhook registered as well (the earlier design; needs `go` for `go tool pprof`);
//! - memory: RSS with many namespaces and unrelated Secrets vs none;
//! - resync: cost of one steady-state resync;
//! - scale: the scale curve, 1,000 → 5,000 → 20,000 namespaces with 10 and 100 rules (resync
//!   CPU, bytes read, wall time, RSS; an update fanned out to 5,000), fitted and extrapolated
//!   to 50,000. Not in this program's default set: it needs a fresh control plane of its own
//!   (`--phase scale`, ~5 min); `scripts/bench.sh` starts a second one for it;
//! - tenant-sources: an untrusted namespace holding 1,000 match-all sources with 64 KiB
//!   annotations that no namespace consents to, at 5,000 and 20,000 namespaces: a fresh
//!   process's peak RSS through its startup resync and a platform source's update fan-out, with
//!   and without them. Not in the default set either (`--phase tenant-sources`); bench.sh
//!   starts a third control plane for it;
//! - tenant-edits: 1,000 tenant sources with 64-requirement selectors, 10 namespaces
//!   consenting, each edited: copyrator's CPU and API calls per edit at 5,000 and 20,000
//!   namespaces (`--phase tenant-edits`, a control plane of its own);
//! - bootstrap: a new namespace's five bootstrap objects (pull Secret, RoleBinding,
//!   NetworkPolicy, LimitRange, ResourceQuota) copied by a copyrator with `--copy-kinds`: time
//!   until all five exist beside a plain client creating them, API calls per namespace, the
//!   Pod gate's added time, a fresh process's RSS with 50,000 unrelated RoleBindings and as
//!   many NetworkPolicies against none. Not in the default set (`--phase bootstrap`); bench.sh
//!   starts a fourth control plane for it.
//! - hub: copies across clusters, one hub and `--members` member clusters (control planes of
//!   their own, member 1 the cluster under test), each member following the hub by watches:
//!   a hub source update → every member's copy, beside the same update copied inside member
//!   1; the hub's API calls per member per update; a member's RSS as the hub gains unrelated
//!   CopyRules. Not in the default set (`--phase hub`); bench.sh runs it on a fifth control
//!   plane of its own.
//!
//! `cargo bench --bench cluster -- [--quick] [--out FILE] [--fanout N] [--phase NAME,...]`

// The end-to-end harness; the benchmark uses a part of it.
#[allow(dead_code, unused_imports)]
#[path = "../../tests/e2e/common/mod.rs"]
mod common;

mod admission;
mod big_payload;
mod bootstrap;
mod bundle;
mod fanout;
mod floods;
mod hub;
// The e2e tests' hub fixture (a hub control plane, its member identities).
#[allow(dead_code, unused_imports)]
#[path = "../../tests/e2e/hub/fixture.rs"]
mod hub_fixture;
mod list_cost;
mod measure;
mod memory;
mod new_namespace;
mod pod_gate;
mod profile;
mod report;
mod restore;
mod resync;
mod scale;
mod selector_sources;
mod tenant_edits;
mod tenant_sources;
mod update_round;
mod watch_triggers;

use std::{collections::BTreeSet, path::PathBuf, time::Duration};

use clap::{Parser, ValueEnum};
use common::{Process, TestEnv, webhooks::unregister_webhooks};
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, Client};
use measure::{memory as rss, wait_resyncs};
use report::Report;

/// copyrator's default fan-out concurrency; the raw baseline uses the same.
const CONCURRENCY: usize = 32;

/// copyrator against a real API server, beside the raw API-server limit measured in the same run.
#[derive(Parser, Debug)]
#[command(name = "cluster", bin_name = "cargo bench --bench cluster --")]
struct Args {
    /// Small sizes, for a smoke run.
    #[arg(long)]
    quick: bool,
    /// Also write the report (Markdown) to FILE.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Namespaces in the fan-out and bundle phases [default: 500, 100 with --quick].
    #[arg(long, value_name = "N")]
    fanout: Option<usize>,
    /// Phases to run (repeatable, or comma-separated), always in the order of the possible
    /// values [default: all but scale, tenant-sources and bootstrap].
    #[arg(long = "phase", value_name = "NAME", value_enum, value_delimiter = ',')]
    phases: Vec<Phase>,
    /// All phases but memory (5,000 namespaces, 50,000 Secrets) and resync, which is measured
    /// on memory's load.
    #[arg(long, conflicts_with = "phases")]
    no_memory: bool,
    /// Lists nothing and exits (`cargo bench -- --list`).
    #[arg(long)]
    list: bool,
    /// Member clusters in the hub phase [default: 3].
    #[arg(long, value_name = "N", default_value_t = 3)]
    members: usize,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// The phases, in the order they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
enum Phase {
    /// A ~1 MiB Secret fanned out: time and peak RSS (a copyrator of its own)
    BigPayload,
    /// CopyRule selector sources: copy latency and API-server CPU of unrelated writes
    SelectorSources,
    /// A source update beside forged reviews and endless headers from other addresses than the
    /// API server's; peak RSS under a 128Mi limit (a copyrator of its own)
    Floods,
    /// New namespace -> copy latency
    NewNamespace,
    /// Namespace storm; source created / updated -> N copies
    Fanout,
    /// One 100-certificate bundle source updated -> N ConfigMap copies, beside a plain client
    Bundle,
    /// Copies deleted or edited by hand -> restored
    Restore,
    /// New namespaces and source updates with the webhooks registered, then deleted
    WatchTriggers,
    /// AdmissionReviews over TLS at rising concurrency
    Admission,
    /// The Pod gate: its no-op path, and Pods created right after their namespace
    PodGate,
    /// kube-apiserver CPU profiles of update fan-outs: plain client vs copyrator; each LIST a
    /// copyrator job makes, alone
    ApiserverProfile,
    /// RSS as the cluster grows to 5,000 namespaces and 50,000 Secrets
    Memory,
    /// Cost of one steady-state resync (at memory's load when both run)
    Resync,
    /// The scale curve to 20,000 namespaces (not in the default set; run alone: scripts/bench.sh
    /// runs it on a control plane of its own)
    Scale,
    /// An untrusted namespace's 1,000 match-all sources nobody consents to: memory and a
    /// platform fan-out with them and without, at 5,000 and 20,000 namespaces (not in the
    /// default set; scripts/bench.sh runs it on a control plane of its own)
    TenantSources,
    /// 1,000 tenant sources with 64-requirement selectors, 10 namespaces consenting, each
    /// source edited: copyrator's CPU and API calls per edit at 5,000 and 20,000 namespaces
    /// (not in the default set; scripts/bench.sh runs it on a control plane of its own)
    TenantEdits,
    /// A new namespace's five bootstrap objects (--copy-kinds): latency beside a plain client,
    /// API calls, the Pod gate, RSS with 50,000 unrelated RoleBindings and NetworkPolicies
    /// (not in the default set; scripts/bench.sh runs it on a control plane of its own)
    Bootstrap,
    /// One hub and --members member clusters on this machine: a hub update → every member's
    /// copy beside a local one, hub calls per member per update, a member's RSS with unrelated
    /// hub CopyRules (not in the default set; scripts/bench.sh runs it on a control plane of
    /// its own)
    Hub,
}

impl Phase {
    /// The phases that need a fresh control plane of their own and are not in the default set.
    fn own_control_plane(self) -> bool {
        matches!(
            self,
            Phase::Scale
                | Phase::TenantSources
                | Phase::TenantEdits
                | Phase::Bootstrap
                | Phase::Hub
        )
    }
}

impl Args {
    fn phases(&self) -> BTreeSet<Phase> {
        if !self.phases.is_empty() {
            self.phases.iter().copied().collect()
        } else if self.no_memory {
            Phase::value_variants()
                .iter()
                .copied()
                .filter(|p| !matches!(p, Phase::Memory | Phase::Resync) && !p.own_control_plane())
                .collect()
        } else {
            Phase::value_variants()
                .iter()
                .copied()
                .filter(|p| !p.own_control_plane())
                .collect()
        }
    }
}

pub struct Sizes {
    latency_namespaces: usize,
    fanout: usize,
    memory_namespaces: usize,
    memory_secrets: usize,
    admission_seconds: f64,
    big_payload: usize,
    selector_sources: usize,
    selector_writes: usize,
    /// Copies of the source the floods phase updates.
    floods: usize,
    gate_namespaces: usize,
    restore: usize,
    watch_triggers: watch_triggers::Sizes,
    /// Benchmark namespaces at each point of the scale curve, and where the update fan-out is
    /// measured.
    scale_steps: Vec<usize>,
    scale_fanout: usize,
    tenant: tenant_sources::Sizes,
    tenant_edits: tenant_edits::Sizes,
    bootstrap: bootstrap::Sizes,
    hub: hub::Sizes,
    /// LISTs of each kind in a row, and the unrelated Secrets added, in apiserver-profile's
    /// LIST-by-LIST measurement.
    list_cost_lists: usize,
    list_cost_unrelated: usize,
    /// The report's path: files of the phases (profiles) go beside it.
    out: PathBuf,
}

fn sizes(quick: bool) -> Sizes {
    if quick {
        Sizes {
            latency_namespaces: 40,
            fanout: 100,
            memory_namespaces: 500,
            memory_secrets: 2_000,
            admission_seconds: 1.0,
            big_payload: 50,
            selector_sources: 20,
            selector_writes: 500,
            floods: 50,
            gate_namespaces: 20,
            restore: 20,
            watch_triggers: watch_triggers::Sizes {
                namespaces: 20,
                updates: 10,
                fanout: 50,
            },
            scale_steps: vec![200, 500, 1_000],
            scale_fanout: 500,
            tenant: tenant_sources::Sizes {
                steps: vec![250, 500],
                sources: 200,
                fanout: 500,
            },
            tenant_edits: tenant_edits::Sizes {
                steps: vec![250, 1_000],
                sources: 100,
                consenting: 10,
            },
            bootstrap: bootstrap::Sizes {
                namespaces: 40,
                gate_namespaces: 20,
                unrelated: 300,
            },
            hub: hub::Sizes {
                members: 3,
                updates: 10,
                unrelated_rules: 200,
            },
            list_cost_lists: 10,
            list_cost_unrelated: 2_000,
            out: PathBuf::new(),
        }
    } else {
        Sizes {
            latency_namespaces: 200,
            fanout: 500,
            memory_namespaces: 5_000,
            memory_secrets: 50_000,
            admission_seconds: 3.0,
            big_payload: 500,
            selector_sources: 100,
            selector_writes: 4000,
            floods: 200,
            gate_namespaces: 100,
            restore: 100,
            watch_triggers: watch_triggers::Sizes {
                namespaces: 100,
                updates: 20,
                fanout: 50,
            },
            scale_steps: vec![1_000, 5_000, 20_000],
            scale_fanout: 5_000,
            tenant: tenant_sources::Sizes {
                steps: vec![5_000, 20_000],
                sources: 1_000,
                fanout: 500,
            },
            tenant_edits: tenant_edits::Sizes {
                steps: vec![5_000, 20_000],
                sources: 1_000,
                consenting: 10,
            },
            bootstrap: bootstrap::Sizes {
                namespaces: 200,
                gate_namespaces: 100,
                unrelated: 50_000,
            },
            hub: hub::Sizes {
                members: 3,
                updates: 50,
                unrelated_rules: 2_000,
            },
            list_cost_lists: 50,
            list_cost_unrelated: 20_000,
            out: PathBuf::new(),
        }
    }
}

fn payload(i: usize) -> String {
    // A realistic registry credential: ~1 KiB.
    format!(
        "{{\"auths\":{{\"registry.example.com\":{{\"auth\":\"{}\"}}}}}}-{i}",
        "x".repeat(1000)
    )
}

fn base64_of(s: &str) -> String {
    base64_of_bytes(s.as_bytes())
}

fn base64_of_bytes(b: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn main() {
    let args = Args::parse();
    if args.list {
        // `cargo bench -- --list` style discovery: nothing to list.
        return;
    }
    let mut sz = sizes(args.quick);
    if let Some(n) = args.fanout {
        sz.fanout = n;
    }
    sz.hub.members = args.members.max(1);
    sz.out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("bench-results/cluster.md"));
    let phases = args.phases();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let report = rt.block_on(run(&sz, &phases));
    let md = report.markdown();
    println!("\n{md}");
    if let Some(path) = args.out {
        std::fs::write(&path, md).expect("writing the report");
        println!("written to {}", path.display());
    }
}

async fn run(sz: &Sizes, phases: &BTreeSet<Phase>) -> Report {
    let mut report = Report::default();
    Report::header();
    // The phases with a copyrator of their own come first, on a cluster not loaded yet.
    if phases.contains(&Phase::BigPayload)
        || phases.contains(&Phase::SelectorSources)
        || phases.contains(&Phase::Floods)
    {
        let env = TestEnv::new().await;
        if phases.contains(&Phase::BigPayload) {
            big_payload::run(&mut report, &env, sz.big_payload).await;
        }
        if phases.contains(&Phase::SelectorSources) {
            selector_sources::run(&mut report, &env, sz.selector_sources, sz.selector_writes).await;
        }
        if phases.contains(&Phase::Floods) {
            floods::run(&mut report, &env, sz.floods).await;
        }
        env.cleanup().await;
    }
    if phases
        .iter()
        .any(|p| *p >= Phase::NewNamespace && !p.own_control_plane())
    {
        long_run(&mut report, sz, phases).await;
    }
    if phases.contains(&Phase::Scale) {
        if phases.len() > 1 {
            report.note(
                "scale ran after other phases: its namespace counts are its own, but the cluster also holds what they left (run it alone for the curve)".into(),
            );
        }
        let steps = scale::Steps {
            namespaces: sz.scale_steps.clone(),
            fanout_at: sz.scale_fanout,
        };
        scale::run(&mut report, &steps).await;
    }
    if phases.contains(&Phase::TenantSources) {
        if phases.len() > 1 {
            report.note(
                "tenant-sources ran after other phases: its namespace counts are its own, but the cluster also holds what they left (run it alone)".into(),
            );
        }
        tenant_sources::run(&mut report, &sz.tenant).await;
    }
    if phases.contains(&Phase::TenantEdits) {
        if phases.len() > 1 {
            report.note(
                "tenant-edits ran after other phases: the cluster also holds what they left (run it alone)".into(),
            );
        }
        tenant_edits::run(&mut report, &sz.tenant_edits).await;
    }
    if phases.contains(&Phase::Bootstrap) {
        if phases.len() > 1 {
            report.note(
                "bootstrap ran after other phases: the cluster also holds what they left (run it alone)".into(),
            );
        }
        bootstrap::run(&mut report, &sz.bootstrap).await;
    }
    if phases.contains(&Phase::Hub) {
        if phases.len() > 1 {
            report.note(
                "hub ran after other phases: member 1 also holds what they left (run it alone)"
                    .into(),
            );
        }
        hub::run(&mut report, &sz.hub).await;
    }
    report
}

/// The release copyrator as a process of its own (no leader election, resyncs an hour apart,
/// `--log-level warn` unless `extra` says otherwise), up, its webhooks registered with
/// `client` if given, after its first resync.
pub async fn bench_copyrator(client: Option<&Client>, extra: &[&str]) -> Process {
    let mut args = vec!["--leader-election=false", "--resync-interval", "1h"];
    if !extra.contains(&"--log-level") {
        args.extend(["--log-level", "warn"]);
    }
    args.extend(extra);
    let mut p = Process::spawn(&args);
    p.wait_up().await;
    if let Some(client) = client {
        p.register_webhooks(client).await;
    }
    wait_resyncs(&p, 1.0, Duration::from_secs(60)).await;
    p
}

/// What phases new-namespace to resync share: their corner of the cluster, the long-running
/// copyrator (the release binary, its webhooks registered, resyncs an hour apart), its RSS on
/// the empty cluster, the namespace of the sources.
pub struct LongRun {
    pub env: TestEnv,
    pub client: Client,
    pub namespaces: Api<Namespace>,
    pub p: Process,
    pub rss_empty: f64,
    pub src: String,
    stopped: bool,
}

impl LongRun {
    async fn start() -> Self {
        let env = TestEnv::new().await;
        let client = env.client.clone();
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let log_level =
            std::env::var("COPYRATOR_BENCH_LOG_LEVEL").unwrap_or_else(|_| "warn".into());
        let p = bench_copyrator(Some(&client), &["--log-level", &log_level]).await;
        let (rss_empty, _) = rss(p.child.id());
        let src = env.namespace("bench-src", &[]).await;
        Self {
            env,
            client,
            namespaces,
            p,
            rss_empty,
            src,
            stopped: false,
        }
    }

    /// Stops the long-running copyrator and unregisters its webhooks, once.
    pub async fn stop(&mut self) {
        if !self.stopped {
            self.p.terminate();
            unregister_webhooks(&self.client).await;
            self.stopped = true;
        }
    }
}

async fn long_run(report: &mut Report, sz: &Sizes, phases: &BTreeSet<Phase>) {
    let mut lr = LongRun::start().await;
    if phases.contains(&Phase::NewNamespace) {
        new_namespace::run(report, &lr, sz.latency_namespaces).await;
    }
    if phases.contains(&Phase::Fanout) {
        fanout::run(report, &lr, sz.fanout).await;
    }
    if phases.contains(&Phase::Bundle) {
        bundle::run(report, &lr, sz.fanout).await;
    }
    if phases.contains(&Phase::Restore) {
        restore::run(report, &lr, sz.restore).await;
    }
    if phases.contains(&Phase::WatchTriggers) {
        watch_triggers::run(report, &lr, &sz.watch_triggers).await;
    }
    if let Ok(keep) = std::env::var("COPYRATOR_BENCH_KEEP_LOG") {
        std::fs::copy(&lr.p.log, keep).unwrap();
    }
    if phases.contains(&Phase::Admission) {
        admission::run(report, &lr.p, sz.admission_seconds).await;
    }
    if phases.contains(&Phase::PodGate) {
        pod_gate::run(report, &lr, sz.gate_namespaces, sz.admission_seconds).await;
    }
    if phases.contains(&Phase::ApiserverProfile) {
        profile::run(report, &lr, sz).await;
    }
    if !phases.contains(&Phase::Memory) && !phases.contains(&Phase::Resync) {
        lr.stop().await;
        std::mem::forget(lr.env);
        return;
    }
    // The long-running process so far; then the cluster grows without copyrator and a fresh
    // process meets it: first with the namespaces only, then with the unrelated Secrets as well.
    let loaded = if phases.contains(&Phase::Memory) {
        Some(memory::load(report, &mut lr, sz).await)
    } else {
        lr.stop().await;
        None
    };
    let total_ns = match &loaded {
        Some(l) => l.total_ns,
        None => {
            let all = lr.namespaces.list_metadata(&Default::default()).await;
            all.unwrap().items.len()
        }
    };
    let fresh = resync::fresh_process().await;
    if let Some(loaded) = &loaded {
        memory::rows(report, loaded, lr.rss_empty, &fresh);
    }
    if phases.contains(&Phase::Resync) {
        resync::rows(report, &fresh, total_ns);
    }
    report.note(
        "cleanup of the benchmark's namespaces is left to the throwaway control plane".into(),
    );
    std::mem::forget(lr.env); // deleting 5,000 namespaces one by one would double the run time
}
