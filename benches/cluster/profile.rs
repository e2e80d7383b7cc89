//! Phase apiserver-profile: where the API server's CPU goes in an update fan-out. For each
//! variant, update rounds run one a second for a fixed time while the API server records a
//! CPU profile (`/debug/pprof/profile`); the profiles are saved beside the report, with the
//! API server's CPU per round and `go tool pprof -top -diff_base` between the variants.
//!
//! Variants: a plain client updating N Secrets; the same with copyrator's marks (as many labels
//! and annotations of the same sizes as a copy carries, under other keys); the same with the
//! four annotations packed into one; copyrator fanning a
//! source update out to the same N namespaces; the same with a validating webhook on every copy
//! UPDATE/DELETE registered as well (the earlier design, replaced by the watch of copies).
//! Then each LIST a copyrator job makes, measured alone ([`crate::list_cost`]).

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    process::Command,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use copyrator::marks;
use futures::{StreamExt, TryStreamExt, stream};
use http_body_util::BodyExt;
use k8s_openapi::api::{
    admissionregistration::v1::ValidatingWebhookConfiguration, core::v1::Secret,
};
use kube::{
    Api, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams, VersionMatch, WatchEvent, WatchParams},
};
use serde_json::json;

use crate::{
    CONCURRENCY, LongRun, Sizes,
    common::{self, Process, secret},
    measure::{all_seen, namespace_storm, watch_secrets},
    payload,
    report::Report,
};

/// Seconds each variant's profile covers.
const PROFILE_SECONDS: u64 = 20;

/// Every variant's rounds start this far apart: the same pace for all, and one at which
/// copyrator's write bucket (500/s, burst 1,000) never empties. Back to back, copyrator's rounds
/// had waited for that limit (~1 s each against ~0.2 s for the plain client's), and the API
/// server's CPU that goes with time rather than with writes (garbage collection, timers) was
/// divided by 12 rounds for copyrator and by 38-47 for the plain clients.
const ROUND_PERIOD: Duration = Duration::from_secs(1);

/// The variants, in the order they run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    Raw,
    RawWithMarks,
    RawWithPackedMarks,
    Copyrator,
    CopyratorWithCopiesWebhook,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Raw => "raw",
            Variant::RawWithMarks => "raw-with-marks",
            Variant::RawWithPackedMarks => "raw-with-packed-marks",
            Variant::Copyrator => "copyrator",
            Variant::CopyratorWithCopiesWebhook => "copyrator-with-copies-webhook",
        }
    }
}

pub async fn run(report: &mut Report, lr: &LongRun, sz: &Sizes) {
    let (n, out) = (sz.fanout, sz.out.as_path());
    let LongRun {
        env,
        client,
        p,
        src,
        ..
    } = lr;
    let key = format!("bench-prof-{}", env.id);
    let names = namespace_storm(lr, "prof", &key, n).await;

    // The plain client's Secrets: one label; with marks: a copy's labels and annotations.
    let plain = raw_secrets(client, &names, &format!("{key}-raw"), Marks::None).await;
    let marked = raw_secrets(client, &names, &format!("{key}-marked"), Marks::Copy).await;
    let packed = raw_secrets(client, &names, &format!("{key}-packed"), Marks::Packed).await;
    // copyrator's source, fanned out once before profiling.
    let label = format!("{key}-src");
    env.secrets(src)
        .create(
            &PostParams::default(),
            &secret(
                "prof",
                &[(marks::SOURCE_LABEL, "true"), (&label, "yes")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &format!("{key}=yes"))],
                &[("config.json", &payload(0))],
            ),
        )
        .await
        .unwrap();
    let copies = format!("{label}=yes,{}", marks::MANAGED_SELECTOR);
    let (seen, watch) = watch_secrets(Api::all(client.clone()), copies.clone(), |_| true).await;
    all_seen(
        &seen,
        n,
        Duration::from_secs(120),
        Instant::now(),
        "profile source",
    )
    .await;
    watch.abort();

    let stamp = out
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("profile")
        .trim_end_matches(".md");
    let dir = out.parent().unwrap_or(Path::new(".")).to_path_buf();
    let mut raw_sets = [plain, marked, packed];
    let mut results = Vec::new();
    for variant in [
        Variant::Raw,
        Variant::RawWithMarks,
        Variant::RawWithPackedMarks,
        Variant::Copyrator,
        Variant::CopyratorWithCopiesWebhook,
    ] {
        let extra = if variant == Variant::CopyratorWithCopiesWebhook {
            Some(register_copies_webhook(client, p).await)
        } else {
            None
        };
        let seen = Latest::start(
            client,
            &match variant {
                Variant::Raw => format!("{key}-raw=yes"),
                Variant::RawWithMarks => format!("{key}-marked=yes"),
                Variant::RawWithPackedMarks => format!("{key}-packed=yes"),
                Variant::Copyrator | Variant::CopyratorWithCopiesWebhook => copies.clone(),
            },
        )
        .await;
        let file = dir.join(format!("{stamp}-apiserver-{}.pb.gz", variant.name()));
        let profile = tokio::spawn(fetch_profile(profile_client().await, file.clone()));
        // Let the profile start before the first round.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let deadline =
            Instant::now() + Duration::from_secs(PROFILE_SECONDS) - Duration::from_millis(600);
        let mut rounds = 0usize;
        let mut round_times = Vec::new();
        while Instant::now() < deadline {
            let value = format!("{}-{}-{rounds}", payload(0), variant.name());
            let t = Instant::now();
            match variant {
                Variant::Raw => raw_round(client, &mut raw_sets[0], &seen, &value).await,
                Variant::RawWithMarks => raw_round(client, &mut raw_sets[1], &seen, &value).await,
                Variant::RawWithPackedMarks => {
                    raw_round(client, &mut raw_sets[2], &seen, &value).await
                }
                Variant::Copyrator | Variant::CopyratorWithCopiesWebhook => {
                    copyrator_round(lr, &seen, n, &value).await
                }
            }
            round_times.push(t.elapsed());
            rounds += 1;
            if Instant::now() + ROUND_PERIOD.saturating_sub(t.elapsed()) >= deadline {
                break;
            }
            tokio::time::sleep(ROUND_PERIOD.saturating_sub(t.elapsed())).await;
        }
        profile.await.unwrap();
        drop(seen);
        if let Some(extra) = extra {
            unregister_copies_webhook(client, extra).await;
        }
        let cpu = profile_cpu(&file);
        results.push((variant, file, rounds, cpu, round_times));
    }

    for (variant, _, rounds, cpu, times) in &results {
        let per_round = cpu.map(|c| c / *rounds as f64);
        let median = {
            let mut t = times.clone();
            t.sort();
            t[t.len() / 2]
        };
        report.row(
            &format!("API-server CPU per update round of {n}: {}", variant.name()),
            match per_round {
                Some(ms) => format!(
                    "{:.0} ms ({rounds} rounds, median {} ms)",
                    ms * 1e3,
                    median.as_millis()
                ),
                None => format!("no profile ({rounds} rounds)"),
            },
            "".into(),
            "".into(),
            "",
        );
    }
    // Where the CPU goes, per round: the API server's request paths, by cumulative time.
    let per_path: Vec<(Variant, BTreeMap<&str, f64>)> = results
        .iter()
        .map(|(variant, file, rounds, _, _)| {
            let all = cumulative(file, None);
            let lists = cumulative(file, Some(LIST_HANDLER));
            let paths = PATHS
                .iter()
                .map(|(label, func, under_lists)| {
                    let cum = if *under_lists { &lists } else { &all };
                    let total: f64 = cum
                        .iter()
                        .filter(|(f, _)| f.ends_with(func))
                        .map(|(_, v)| v)
                        .sum();
                    (*label, total * 1e3 / *rounds as f64)
                })
                .collect();
            (*variant, paths)
        })
        .collect();
    for (label, _, _) in PATHS {
        report.note(format!(
            "API-server CPU per round in {label}: {}",
            per_path
                .iter()
                .map(|(v, p)| format!("{} {:.1} ms", v.name(), p[label]))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let find = |v: Variant| results.iter().find(|r| r.0 == v).map(|r| r.1.clone());
    for (base, other) in [
        (Variant::Raw, Variant::RawWithMarks),
        (Variant::RawWithPackedMarks, Variant::RawWithMarks),
        (Variant::RawWithMarks, Variant::Copyrator),
        (Variant::Copyrator, Variant::CopyratorWithCopiesWebhook),
    ] {
        if let (Some(b), Some(o)) = (find(base), find(other)) {
            let diff = dir.join(format!(
                "{stamp}-apiserver-diff-{}-vs-{}.txt",
                other.name(),
                base.name()
            ));
            let base_arg = format!("-diff_base={}", b.display());
            let text = pprof(&["-top", "-nodecount=40", &base_arg], &[&o]);
            std::fs::write(&diff, &text).unwrap();
            report.note(format!(
                "API-server profile {} minus {} (whole {PROFILE_SECONDS} s profiles, not per round): {}",
                other.name(),
                base.name(),
                diff.display()
            ));
        }
    }
    report.note(format!(
        "apiserver-profile: {PROFILE_SECONDS} s CPU profile of kube-apiserver (/debug/pprof/profile) per variant while update rounds of {n} start one a second; CPU per round = profile samples / rounds; profiles in {}",
        dir.display()
    ));
    crate::list_cost::run(
        report,
        lr,
        &copies,
        &format!("{key}=yes"),
        n,
        sz.list_cost_lists,
        sz.list_cost_unrelated,
    )
    .await;
}

/// What a plain client's Secrets carry besides their own label.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Marks {
    None,
    /// As many labels and annotations, of the same sizes, as a copy carries (2 labels, 4
    /// annotations).
    Copy,
    /// The same information with the four annotations packed into one (what fewer marks per
    /// copy would save the API server).
    Packed,
}

/// `n` Secrets written by a plain client, one per namespace, carrying `marks`.
async fn raw_secrets(
    client: &kube::Client,
    names: &[String],
    label: &str,
    marks: Marks,
) -> Vec<Secret> {
    let uid = "8b7c3c2e-5c1a-4a8e-9a5e-1f2b3c4d5e6f";
    let hash = "0".repeat(64);
    let source = "bench-src-abcdef/prof";
    let rule = "inline:bench-src-abcdef/prof";
    let packed = serde_json::json!({
        "source": source, "contentHash": hash, "rule": rule, "deletionPolicy": "Delete"
    })
    .to_string();
    let mut labels = vec![(label, "yes")];
    let mut annotations: Vec<(&str, &str)> = Vec::new();
    if marks != Marks::None {
        labels.push(("bench.example/managed-by", "copyrator"));
        labels.push(("bench.example/source-uid", uid));
    }
    match marks {
        Marks::None => {}
        Marks::Copy => annotations.extend([
            ("bench.example/source", source),
            ("bench.example/content-hash", &hash),
            ("bench.example/rule", rule),
            ("bench.example/deletion-policy", "Delete"),
        ]),
        Marks::Packed => annotations.push(("bench.example/copy", &packed)),
    }
    let name = match marks {
        Marks::None => "raw-prof",
        Marks::Copy => "raw-prof-marked",
        Marks::Packed => "raw-prof-packed",
    };
    let s = secret(name, &labels, &annotations, &[("config.json", &payload(0))]);
    stream::iter(names.iter())
        .map(|ns| {
            let api: Api<Secret> = Api::namespaced(client.clone(), ns);
            let s = s.clone();
            async move { api.create(&PostParams::default(), &s).await }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await
        .unwrap()
}

/// The latest `config.json` of every Secret a selector matches, by namespace, from one watch
/// started before the profile: rounds then cost the API server their writes and events only.
struct Latest {
    values: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Latest {
    async fn start(client: &kube::Client, selector: &str) -> Self {
        let api: Api<Secret> = Api::all(client.clone());
        // From the watch cache (resourceVersion 0): not a read of every Secret from etcd.
        let lp = ListParams::default()
            .labels(selector)
            .at("0")
            .matching(VersionMatch::NotOlderThan);
        let rv = api
            .list_metadata(&lp)
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap();
        let stream = api
            .watch(&WatchParams::default().labels(selector).timeout(290), &rv)
            .await
            .unwrap();
        let values = Arc::new(Mutex::new(HashMap::new()));
        let out = Arc::clone(&values);
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(event)) = stream.next().await {
                if let WatchEvent::Added(s) | WatchEvent::Modified(s) = event {
                    let value = s
                        .data
                        .as_ref()
                        .and_then(|d| d.get("config.json"))
                        .map(|v| v.0.clone())
                        .unwrap_or_default();
                    out.lock()
                        .unwrap()
                        .insert(s.namespace().unwrap_or_default(), value);
                }
            }
        });
        Self { values, task }
    }

    /// Waits until `n` Secrets hold `value`.
    async fn wait(&self, n: usize, value: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let holding = self
                .values
                .lock()
                .unwrap()
                .values()
                .filter(|v| v.as_slice() == value.as_bytes())
                .count();
            if holding >= n {
                return;
            }
            assert!(Instant::now() < deadline, "{holding} of {n} updated");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

impl Drop for Latest {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The plain client updates every Secret of `set` to `value`, `CONCURRENCY` in flight, until
/// the watch saw them all (as copyrator's rounds are timed).
async fn raw_round(client: &kube::Client, set: &mut Vec<Secret>, seen: &Latest, value: &str) {
    let n = set.len();
    let updated: Vec<Secret> = stream::iter(std::mem::take(set))
        .map(|mut s| {
            let api: Api<Secret> = Api::namespaced(client.clone(), &s.namespace().unwrap());
            s.data = None;
            s.string_data = Some(BTreeMap::from([(
                "config.json".to_string(),
                value.to_string(),
            )]));
            async move { api.replace(&s.name_any(), &PostParams::default(), &s).await }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await
        .unwrap();
    *set = updated;
    seen.wait(n, value).await;
}

/// copyrator's source updated to `value`, until the watch saw all `n` copies with it.
async fn copyrator_round(lr: &LongRun, seen: &Latest, n: usize, value: &str) {
    lr.env
        .secrets(&lr.src)
        .patch(
            "prof",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"config.json": value}})),
        )
        .await
        .unwrap();
    seen.wait(n, value).await;
}

/// Registers, as a configuration of its own, the webhook copyrator used to have for copies
/// (UPDATE and DELETE of managed Secrets and ConfigMaps, to `/admission/copies`, which still
/// answers); returns its name.
pub async fn register_copies_webhook(client: &kube::Client, p: &Process) -> String {
    let name = format!("{}-copies", common::WEBHOOK_CONFIG_NAME);
    let cfg: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "copies.copyrator.io",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {
                "url": format!("https://127.0.0.1:{}/admission/copies", p.webhook_port),
                "caBundle": crate::base64_of_bytes(&p.ca),
            },
            "failurePolicy": "Ignore",
            "sideEffects": "NoneOnDryRun",
            "timeoutSeconds": 3,
            "objectSelector": {"matchLabels": {marks::MANAGED_BY_LABEL: marks::MANAGED_BY_VALUE}},
            "rules": [{
                "apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["UPDATE", "DELETE"], "resources": ["secrets", "configmaps"]
            }]
        }]
    }))
    .unwrap();
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    api.create(&PostParams::default(), &cfg).await.unwrap();
    // The API server picks up webhook configurations from its informer.
    tokio::time::sleep(Duration::from_secs(1)).await;
    name
}

pub async fn unregister_copies_webhook(client: &kube::Client, name: String) {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    api.delete(&name, &Default::default()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// A client of its own for the profile request, its connection already open: under the
/// rounds' load a new connection's TLS handshake can miss the client's 5 s connect timeout. The
/// profile answers only after `PROFILE_SECONDS`: longer than `--api-timeout`'s default lets a
/// connection stay silent.
async fn profile_client() -> kube::Client {
    let client = copyrator::cluster::client::kube_client_with_timeout(
        Some(&common::kubeconfig()),
        Duration::from_secs(PROFILE_SECONDS + 30),
    )
    .await
    .expect("kube client");
    let req = hyper::Request::get("/healthz")
        .body(kube::client::Body::empty())
        .unwrap();
    let resp = client.send(req).await.expect("the API server's /healthz");
    let _ = resp.into_body().collect().await;
    client
}

/// The API server's CPU profile over `PROFILE_SECONDS`, saved to `file`.
async fn fetch_profile(client: kube::Client, file: PathBuf) {
    let req = hyper::Request::get(format!("/debug/pprof/profile?seconds={PROFILE_SECONDS}"))
        .body(kube::client::Body::empty())
        .unwrap();
    let resp = client
        .send(req)
        .await
        .expect("the API server's pprof endpoint");
    assert!(resp.status().is_success(), "pprof: {}", resp.status());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    std::fs::write(&file, &bytes).unwrap();
}

/// Request paths of the API server whose cumulative CPU the report shows: (label, the end of
/// the function's name in the profile, counting only the samples under the LIST handler).
const PATHS: [(&str, &str, bool); 11] = [
    (
        "updates (PUT handler)",
        "endpoints.restfulUpdateResource.func1",
        false,
    ),
    (
        "managedFields",
        "fieldmanager.(*FieldManager).UpdateNoErrors",
        false,
    ),
    (
        "validating admission webhooks",
        "validating.(*validatingDispatcher).Dispatch.func1",
        false,
    ),
    ("watches served", "handlers.serveWatch", false),
    (
        "lists (incl. watch requests)",
        "endpoints.restfulListResource.func1",
        false,
    ),
    (
        "encoding LIST responses",
        "handlers.transformResponseObject",
        true,
    ),
    (
        "the watch cache's label filter in LISTs",
        "cacher.filterWithAttrsFunction.func1",
        true,
    ),
    ("LISTs from etcd", "etcd3.(*store).List", false),
    ("gets", "endpoints.restfulGetResource.func1", false),
    ("patches", "endpoints.restfulPatchResource.func1", false),
    ("garbage collection", "runtime.gcBgMarkWorker", false),
];

/// The LIST handler (watches too), as a `go tool pprof -focus` pattern.
const LIST_HANDLER: &str = "handlers\\.ListResource\\.func1$";

/// Cumulative CPU seconds of every function in a profile, counting only the samples under
/// `focus` if given.
fn cumulative(file: &Path, focus: Option<&str>) -> Vec<(String, f64)> {
    let focus = focus.map(|f| format!("-focus={f}"));
    let mut args = vec![
        "-top",
        "-cum",
        "-nodecount=100000",
        "-nodefraction=0",
        "-edgefraction=0",
    ];
    args.extend(focus.as_deref());
    let text = pprof(&args, &[file]);
    text.lines()
        .filter_map(|line| {
            // flat flat% sum% cum cum% name
            let mut parts = line.split_whitespace();
            let _flat = parts.next()?;
            let flat_pct = parts.next()?;
            let _sum = parts.next()?;
            let cum = parts.next()?;
            let _cum_pct = parts.next()?;
            let name: Vec<&str> = parts.collect();
            if !flat_pct.ends_with('%') || name.is_empty() {
                return None;
            }
            Some((name.join(" "), parse_duration(cum)?))
        })
        .collect()
}

/// Total CPU seconds in a profile (`Total samples = …` of `go tool pprof -top`).
fn profile_cpu(file: &Path) -> Option<f64> {
    let text = pprof(&["-top", "-nodecount=1"], &[file]);
    let total = text.split("Total samples = ").nth(1)?;
    let value = total.split_whitespace().next()?;
    parse_duration(value)
}

fn parse_duration(s: &str) -> Option<f64> {
    if s == "0" {
        return Some(0.0);
    }
    let (num, unit) = s
        .find(|c: char| c.is_ascii_alphabetic())
        .map(|i| s.split_at(i))?;
    let v: f64 = num.parse().ok()?;
    Some(match unit {
        "s" => v,
        "ms" => v / 1e3,
        "us" | "µs" => v / 1e6,
        "mins" | "min" => v * 60.0,
        _ => return None,
    })
}

/// `go tool pprof ARGS FILES`: its output, or why it could not run.
fn pprof(args: &[&str], files: &[&Path]) -> String {
    let mut cmd = Command::new("go");
    cmd.args(["tool", "pprof"]).args(args).args(files);
    match cmd.output() {
        Ok(o) => format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => format!("go tool pprof could not run: {e}"),
    }
}
