//! Phase fanout: a storm of namespaces, then a source created and updated with N matching
//! namespaces until every copy is seen, in rounds alternating with a plain client writing the
//! same N Secrets; then the same rounds with a copies webhook registered as well (diagnostic:
//! the design the copies watch replaced).

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use copyrator::marks;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

use crate::{
    CONCURRENCY, LongRun,
    common::{Process, TestEnv, metric_value, secret},
    measure::{
        CPU_PARTS, CpuMeter, all_seen, call_breakdown, cpu_since, namespace_storm, watch_secrets,
    },
    payload,
    report::{Report, ms},
};

/// Raw and copyrator rounds, alternating. A round is 0.3-0.6 s and single rounds vary by
/// ±30% on a saturated 2-core box: with 5 rounds the median of two runs differed by up to
/// 0.18 in the ratio; 11 cost ~20 s more.
const FANOUT_ROUNDS: usize = 11;
/// Rounds of the diagnostic run with a copies webhook registered (the earlier design).
const DIAGNOSTIC_ROUNDS: usize = 3;

/// A plain client writing the same objects copyrator writes: one Secret into each of the
/// `namespaces`, then an update of each (with the resourceVersions the creates returned),
/// `CONCURRENCY` in flight; each timed until a watch saw them all.
async fn raw_fanout(
    client: &kube::Client,
    namespaces: &[String],
    label: &str,
    cpu: Option<&CpuMeter>,
) -> (Duration, Duration, [Duration; 4]) {
    let n = namespaces.len();
    let (seen, watch) =
        watch_secrets(Api::all(client.clone()), format!("{label}=yes"), |_| true).await;
    let start = Instant::now();
    let created: Vec<Secret> = stream::iter(namespaces.iter())
        .map(|ns| {
            let api: Api<Secret> = Api::namespaced(client.clone(), ns);
            let s = secret(
                label,
                &[(label, "yes")],
                &[],
                &[("config.json", &payload(0))],
            );
            async move { api.create(&PostParams::default(), &s).await }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await
        .unwrap();
    let create = all_seen(&seen, n, Duration::from_secs(60), start, "raw creates").await;
    watch.abort();
    let (seen, watch) = watch_secrets(Api::all(client.clone()), format!("{label}=yes"), |s| {
        s.data
            .as_ref()
            .and_then(|d| d.get("config.json"))
            .is_some_and(|v| v.0.ends_with(b"-updated"))
    })
    .await;
    let keys: Vec<(String, String)> = created
        .iter()
        .map(|s| (s.namespace().unwrap(), s.name_any()))
        .collect();
    let cpu_before = cpu.map(CpuMeter::sample);
    let start = Instant::now();
    stream::iter(created)
        .map(|mut s| {
            let api: Api<Secret> = Api::namespaced(client.clone(), &s.namespace().unwrap());
            async move {
                let name = s.name_any();
                s.string_data = Some(BTreeMap::from([(
                    "config.json".to_string(),
                    format!("{}-updated", payload(0)),
                )]));
                s.data = None;
                api.replace(&name, &PostParams::default(), &s).await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    let update = all_seen(&seen, n, Duration::from_secs(60), start, "raw updates").await;
    let cpu_used = cpu_since(cpu, cpu_before);
    watch.abort();
    // Gone again, as copyrator's copies are after its round: every round finds the cluster
    // the same size (the API server's garbage collection grows with what its cache holds).
    stream::iter(keys)
        .map(|(ns, name)| {
            let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
            async move { api.delete(&name, &Default::default()).await }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    (create, update, cpu_used)
}

/// A source selecting the `n` namespaces labelled `fan_key`: created, then updated; each
/// timed from the API response until a watch saw all `n` copies (with the new content).
async fn copyrator_fanout(
    env: &TestEnv,
    client: &kube::Client,
    src: &str,
    name: &str,
    fan_key: &str,
    n: usize,
    cpu: Option<&CpuMeter>,
) -> (Duration, Duration, [Duration; 4]) {
    // Copies carry their source's labels: watch for them before the source exists.
    let label = format!("bench-{name}-{}", env.id);
    let selector = format!("{label}=yes,{}", marks::MANAGED_SELECTOR);
    let (seen, watch) = watch_secrets(Api::all(client.clone()), selector.clone(), |_| true).await;
    let source = secret(
        name,
        &[(marks::SOURCE_LABEL, "true"), (&label, "yes")],
        &[(
            marks::NAMESPACE_SELECTOR_ANNOTATION,
            &format!("{fan_key}=yes"),
        )],
        &[("config.json", &payload(0))],
    );
    env.secrets(src)
        .create(&PostParams::default(), &source)
        .await
        .unwrap();
    let start = Instant::now();
    let create = all_seen(&seen, n, Duration::from_secs(120), start, "initial fan-out").await;
    watch.abort();
    let (seen, watch) = watch_secrets(Api::all(client.clone()), selector, |s| {
        s.data
            .as_ref()
            .and_then(|d| d.get("config.json"))
            .is_some_and(|v| v.0.ends_with(b"-updated"))
    })
    .await;
    let cpu_before = cpu.map(CpuMeter::sample);
    env.secrets(src)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"stringData": {"config.json": format!("{}-updated", payload(0))}}),
            ),
        )
        .await
        .unwrap();
    let start = Instant::now();
    let update = all_seen(&seen, n, Duration::from_secs(120), start, "update fan-out").await;
    let cpu_used = cpu_since(cpu, cpu_before);
    watch.abort();
    (create, update, cpu_used)
}

/// Deletes the source of a [`copyrator_fanout`] round and waits until copyrator has deleted
/// its copies: every round finds the cluster the same size.
async fn remove_copyrator_round(env: &TestEnv, client: &kube::Client, src: &str, name: &str) {
    env.secrets(src)
        .delete(name, &Default::default())
        .await
        .unwrap();
    let selector = format!("bench-{name}-{}=yes,{}", env.id, marks::MANAGED_SELECTOR);
    let copies: Api<Secret> = Api::all(client.clone());
    let listed = ListParams::default().labels(&selector).match_any();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !copies
        .list_metadata(&listed)
        .await
        .unwrap()
        .items
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "the copies of {name} deleted with it"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[derive(Default)]
struct Rounds {
    raw_creates: Vec<Duration>,
    raw_updates: Vec<Duration>,
    cr_creates: Vec<Duration>,
    cr_updates: Vec<Duration>,
    /// copyrator's writes that waited for its own `--api-qps` limit in each round (create and
    /// update), and how long they waited in all.
    cr_rate_limited: Vec<(u64, Duration)>,
    /// CPU per process (CPU_PARTS) summed over the rounds' update phases.
    raw_update_cpu: [Duration; 4],
    cr_update_cpu: [Duration; 4],
}

/// `rounds` alternating raw and copyrator fan-outs to `names`; the API calls of copyrator's
/// first round go to `breakdown`.
#[allow(clippy::too_many_arguments)]
async fn fanout_rounds(
    env: &TestEnv,
    client: &kube::Client,
    p: &Process,
    src: &str,
    names: &[String],
    fan_key: &str,
    tag: &str,
    rounds: usize,
    mut breakdown: Option<&mut String>,
) -> Rounds {
    let mut r = Rounds::default();
    let mut last_round: Option<Instant> = None;
    // Every round starts from a quiet API server: the work a round leaves behind (its
    // garbage collection, the last watch events) lands in no other round, whichever kind
    // comes next. And a source updated now and then finds copyrator's write bucket full;
    // rounds back to back would drain it and measure the limit, not copyrator (2026-11-25
    // evening: every update round 980 ms, ~700 of its writes held back each).
    let pause = |last: Option<Instant>| async move {
        if let Some(last) = last {
            tokio::time::sleep(ROUND_GAP.saturating_sub(last.elapsed())).await;
        }
    };
    for round in 0..rounds {
        let cpu = CpuMeter::new(p.child.id());
        pause(last_round).await;
        let (c, u, used) = raw_fanout(
            client,
            names,
            &format!("bench-raw{tag}{round}-{}", env.id),
            cpu.as_ref(),
        )
        .await;
        r.raw_creates.push(c);
        r.raw_updates.push(u);
        r.raw_update_cpu = std::array::from_fn(|i| r.raw_update_cpu[i] + used[i]);
        last_round = Some(Instant::now());
        pause(last_round).await;
        let before = p.metrics().await;
        let name = format!("{tag}{round}");
        let (c, u, used) =
            copyrator_fanout(env, client, src, &name, fan_key, names.len(), cpu.as_ref()).await;
        r.cr_creates.push(c);
        r.cr_updates.push(u);
        r.cr_update_cpu = std::array::from_fn(|i| r.cr_update_cpu[i] + used[i]);
        let after = p.metrics().await;
        remove_copyrator_round(env, client, src, &name).await;
        last_round = Some(Instant::now());
        let delta = |sample: &str| metric_value(&after, sample) - metric_value(&before, sample);
        r.cr_rate_limited.push((
            delta(RATE_LIMITED_WRITES) as u64,
            Duration::from_secs_f64(delta(RATE_LIMITED_WRITE_SECONDS).max(0.0)),
        ));
        if let Some(out) = breakdown.take() {
            *out = call_breakdown(&before, &after);
        }
    }
    r
}

/// "raw: ... ; copyrator: ..." CPU per update round, by process.
fn cpu_note(r: &Rounds) -> String {
    format!(
        "raw: {}; copyrator: {}",
        cpu_per_round(&r.raw_update_cpu, r.raw_updates.len()),
        cpu_per_round(&r.cr_update_cpu, r.cr_updates.len())
    )
}

/// CPU per round by process (CPU_PARTS), from `cpu` summed over `rounds`.
pub fn cpu_per_round(cpu: &[Duration; 4], rounds: usize) -> String {
    let rounds = rounds.max(1) as u32;
    let total: Duration = cpu.iter().sum();
    let parts: Vec<String> = CPU_PARTS
        .iter()
        .zip(cpu)
        .map(|(name, d)| format!("{name} {}", ms(*d / rounds)))
        .collect();
    format!("{} (total {})", parts.join(", "), ms(total / rounds))
}

/// The quiet time before each round: as long as copyrator's write bucket takes to fill again
/// after a round's 1,000 writes at the defaults (`--api-burst` 1,000 at `--api-qps` 500/s).
const ROUND_GAP: Duration = Duration::from_secs(2);

const RATE_LIMITED_WRITES: &str = "copyrator_api_rate_limited_total{limit=\"writes\"}";
const RATE_LIMITED_WRITE_SECONDS: &str =
    "copyrator_api_rate_limited_seconds_total{limit=\"writes\"}";

/// Which rounds copyrator's own write limit (`--api-qps`, burst `--api-burst`) slowed down.
fn rate_limit_note(r: &Rounds) -> String {
    let rounds: Vec<String> = r
        .cr_rate_limited
        .iter()
        .map(|(n, waited)| format!("{n} ({})", ms(*waited)))
        .collect();
    format!(
        "fan-out: copyrator's writes that waited for its own write limit (--api-qps, burst --api-burst: 500/s and 1,000 by default; a round writes 1,000; every round, raw or copyrator, starts 2 s after the previous one ended, when the bucket is full again), per round (create + update), with their summed wait: {}",
        rounds.join(", ")
    )
}

pub fn fanout_row(
    report: &mut Report,
    figure: &str,
    cr: &[Duration],
    raw: &[Duration],
    target: &str,
) {
    let median = |v: &[Duration]| {
        let mut v = v.to_vec();
        v.sort();
        v[v.len() / 2]
    };
    let list = |v: &[Duration]| {
        v.iter()
            .map(|d| format!("{:.0}", d.as_secs_f64() * 1000.0))
            .collect::<Vec<_>>()
            .join("/")
    };
    let (c, r) = (median(cr), median(raw));
    // Each copyrator round runs right after its raw round: the ratio of the pair sees the
    // same machine state; the median of those ratios is reported beside the ratio of medians.
    let mut paired: Vec<f64> = cr
        .iter()
        .zip(raw)
        .map(|(c, r)| c.as_secs_f64() / r.as_secs_f64())
        .collect();
    paired.sort_by(f64::total_cmp);
    let paired = paired.get(paired.len() / 2).copied().unwrap_or(f64::NAN);
    report.row(
        figure,
        format!("{} [{} ms]", ms(c), list(cr)),
        format!("{} [{} ms]", ms(r), list(raw)),
        format!(
            "{:.2} (round by round: {paired:.2})",
            c.as_secs_f64() / r.as_secs_f64()
        ),
        target,
    );
}

/// A storm of `n` namespaces labelled for the fan-out, then the timed rounds.
pub async fn run(report: &mut Report, lr: &LongRun, n: usize) {
    let LongRun {
        env,
        client,
        p,
        src,
        ..
    } = lr;
    let fan_key = format!("bench-fan-{}", env.id);
    let storm = Instant::now();
    let names = namespace_storm(lr, "fan", &fan_key, n).await;
    report.row(
        &format!("namespace storm: {n} created, {CONCURRENCY} in flight"),
        format!("{} until all {} jobs done", ms(storm.elapsed()), 2 * n),
        "".into(),
        "".into(),
        "",
    );

    // Raw and copyrator runs alternate, each timed until a watch saw every object: the
    // machine's noise hits both alike; medians are reported.
    let mut breakdown = String::new();
    let rounds = fanout_rounds(
        env,
        client,
        p,
        src,
        &names,
        &fan_key,
        "fan",
        FANOUT_ROUNDS,
        Some(&mut breakdown),
    )
    .await;
    for (what, cr, raw, target) in [
        ("created", &rounds.cr_creates, &rounds.raw_creates, ""),
        (
            "updated",
            &rounds.cr_updates,
            &rounds.raw_updates,
            "≤ 1.25 × raw",
        ),
    ] {
        fanout_row(
            report,
            &format!("fan-out: source {what}, {n} copies (median of {FANOUT_ROUNDS})"),
            cr,
            raw,
            target,
        );
    }
    report.note(format!(
        "fan-out CPU per update round (2 cores = 2 s of CPU per wall second), by process: {}",
        cpu_note(&rounds)
    ));
    report.note(rate_limit_note(&rounds));
    report.note(format!(
        "fan-out: raw = a plain kube-rs client writing the same {n} objects (one Secret per namespace, {CONCURRENCY} in flight), copyrator = from the source's create/update response; both until a watch saw every object. copyrator's API calls for one create + update round: {breakdown}; copyrator learns of edits to copies from its watch of them (no admission call per copy write)"
    ));

    // What the earlier design, a validating webhook on every copy UPDATE/DELETE, would cost the
    // update fan-out: the same rounds with that webhook registered as well.
    {
        let extra = crate::profile::register_copies_webhook(client, p).await;
        let diag = fanout_rounds(
            env,
            client,
            p,
            src,
            &names,
            &fan_key,
            "diag",
            DIAGNOSTIC_ROUNDS,
            None,
        )
        .await;
        crate::profile::unregister_copies_webhook(client, extra).await;
        fanout_row(
            report,
            &format!(
                "diagnostic: source updated, {n} copies, with a copies webhook as well (the earlier design; median of {DIAGNOSTIC_ROUNDS})"
            ),
            &diag.cr_updates,
            &diag.raw_updates,
            "",
        );
        report.note(format!(
            "diagnostic CPU per update round, copies webhook registered: {}",
            cpu_note(&diag)
        ));
    }
}
