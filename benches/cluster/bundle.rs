//! Phase bundle: one CopyRule bundling one Secret of 100 CA certificates into a ConfigMap in
//! N namespaces; the source updated (one certificate replaced) until a watch saw every copy
//! with the new bundle, in rounds alternating with a plain client updating N ConfigMaps of
//! the same size; copyrator's API calls, jobs and CPU per update round.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use copyrator::{
    copyrule::{CopyRule, CopyRuleSpec},
    marks,
};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, ResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

use crate::{
    CONCURRENCY, LongRun,
    common::secret,
    fanout::{cpu_per_round, fanout_row},
    measure::{
        CpuMeter, all_seen, api_calls, counter_deltas, cpu_since, namespace_storm, wait_quiet,
        watch_objects,
    },
    report::{Report, ms},
};

/// Certificates in the bundle's source.
const CERTS: usize = 100;
/// Raw and copyrator update rounds, alternating. Each writes N ConfigMaps of ~60 KB.
const ROUNDS: usize = 7;
/// The source's key holding the certificates, and the copies' key.
const SOURCE_KEY: &str = "ca.crt";
const KEY: &str = "ca-bundle.pem";
/// Quiet time before each round, as fanout's: the API server's work of one round (and
/// copyrator's write bucket) settled before the next.
const ROUND_GAP: Duration = Duration::from_secs(2);

/// A self-signed CA certificate, PEM (LF line ends). Fresh keys each time: the sizes are
/// what matters, and they are the same for every certificate.
fn ca(name: &str) -> String {
    let key = rcgen::KeyPair::generate().expect("a key pair");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let pem = params.self_signed(&key).expect("a certificate").pem();
    pem.replace("\r\n", "\n")
}

/// A line of `pem`'s body no other certificate has (the last full one, in its signature): a
/// bundle holding it holds that certificate, whatever the order or line ends around it.
fn marker(pem: &str) -> String {
    let lines: Vec<&str> = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    lines[lines.len().saturating_sub(2)].to_string()
}

/// The watch predicate: ConfigMap `name` whose `KEY` holds `marker`.
fn holding(name: String, marker: String) -> impl Fn(&ConfigMap) -> bool + Send + 'static {
    move |cm| {
        cm.name_any() == name
            && cm
                .data
                .as_ref()
                .and_then(|d| d.get(KEY))
                .is_some_and(|v| v.contains(&marker))
    }
}

#[derive(Default)]
struct Rounds {
    raw: Vec<Duration>,
    cr: Vec<Duration>,
    raw_cpu: [Duration; 4],
    cr_cpu: [Duration; 4],
    /// copyrator's API calls of each update round (until it was quiet again), and by verb and
    /// resource summed over the rounds.
    calls: Vec<f64>,
    by_call: BTreeMap<String, f64>,
    jobs: BTreeMap<String, f64>,
}

/// A plain client's update round: each of `written` replaced with `text` (the
/// resourceVersions of the last responses), `CONCURRENCY` in flight, until a watch saw all.
async fn raw_round(
    client: &kube::Client,
    written: &mut Vec<ConfigMap>,
    label: &str,
    text: &str,
    mark: &str,
    cpu: Option<&CpuMeter>,
) -> (Duration, [Duration; 4]) {
    let n = written.len();
    let name = written[0].name_any();
    let (seen, watch) = watch_objects(
        Api::<ConfigMap>::all(client.clone()),
        format!("{label}=yes"),
        holding(name, mark.to_string()),
    )
    .await;
    let before = cpu.map(CpuMeter::sample);
    let start = Instant::now();
    let updated: Vec<ConfigMap> = stream::iter(std::mem::take(written))
        .map(|mut cm| {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), &cm.namespace().unwrap());
            cm.data = Some(BTreeMap::from([(KEY.to_string(), text.to_string())]));
            async move {
                api.replace(&cm.name_any(), &PostParams::default(), &cm)
                    .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await
        .unwrap();
    let took = all_seen(&seen, n, Duration::from_secs(120), start, "raw updates").await;
    let used = cpu_since(cpu, before);
    watch.abort();
    *written = updated;
    (took, used)
}

/// The bundle's source replaced with `text` (one certificate new); timed from the response
/// until a watch saw all `n` copies holding `mark`.
async fn copyrator_round(
    lr: &LongRun,
    source: &str,
    target: &str,
    n: usize,
    text: &str,
    mark: &str,
    cpu: Option<&CpuMeter>,
) -> (Duration, [Duration; 4]) {
    let (seen, watch) = watch_objects(
        Api::<ConfigMap>::all(lr.client.clone()),
        marks::MANAGED_SELECTOR.to_string(),
        holding(target.to_string(), mark.to_string()),
    )
    .await;
    let before = cpu.map(CpuMeter::sample);
    lr.env
        .secrets(&lr.src)
        .patch(
            source,
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {SOURCE_KEY: text}})),
        )
        .await
        .unwrap();
    let start = Instant::now();
    let took = all_seen(&seen, n, Duration::from_secs(120), start, "bundle fan-out").await;
    let used = cpu_since(cpu, before);
    watch.abort();
    (took, used)
}

/// Adds what each sample of the counter family `name` grew by to `into`.
fn add_deltas(into: &mut BTreeMap<String, f64>, name: &str, before: &str, after: &str) {
    for (labels, d) in counter_deltas(name, before, after) {
        *into.entry(labels).or_default() += d;
    }
}

fn per_round(m: &BTreeMap<String, f64>, rounds: usize) -> String {
    let mut v: Vec<(&String, &f64)> = m.iter().collect();
    v.sort_by(|a, b| b.1.total_cmp(a.1));
    v.iter()
        .map(|(labels, d)| format!("{labels} {:.1}", **d / rounds.max(1) as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A storm of `n` namespaces labelled for the bundle, the rule and its first fan-out, then
/// the timed update rounds.
pub async fn run(report: &mut Report, lr: &LongRun, n: usize) {
    let LongRun { env, client, p, .. } = lr;
    let fan_key = format!("bench-bundle-{}", env.id);
    let storm = Instant::now();
    let names = namespace_storm(lr, "bundle", &fan_key, n).await;
    report.row(
        &format!("bundle: namespace storm: {n} created, {CONCURRENCY} in flight"),
        format!("{} until all {} jobs done", ms(storm.elapsed()), 2 * n),
        "".into(),
        "".into(),
        "",
    );

    let mut certs: Vec<String> = (0..CERTS).map(|i| ca(&format!("bench-ca-{i}"))).collect();
    let source = env.name("bundle-src");
    let target = env.name("bundle");
    env.secrets(&lr.src)
        .create(
            &PostParams::default(),
            &secret(&source, &[], &[], &[(SOURCE_KEY, &certs.concat())]),
        )
        .await
        .unwrap();

    // The plain client's ConfigMaps, created once (timed beside the rule's first fan-out).
    let raw_label = format!("bench-rawbundle-{}", env.id);
    let raw_name = env.name("rawbundle");
    let (raw_create, mut written) =
        raw_create(client, &names, &raw_label, &raw_name, &certs.concat()).await;

    let (seen, watch) = watch_objects(
        Api::<ConfigMap>::all(client.clone()),
        marks::MANAGED_SELECTOR.to_string(),
        holding(target.clone(), marker(&certs[0])),
    )
    .await;
    let spec: CopyRuleSpec = serde_json::from_value(json!({
        "kind": "ConfigMap",
        "sources": [{"kind": "Secret", "namespace": lr.src, "name": source, "key": SOURCE_KEY}],
        "targetName": target,
        "target": {"key": KEY},
        "namespaceSelector": {"matchLabels": {fan_key.clone(): "yes"}},
    }))
    .expect("a bundle CopyRule");
    env.rules()
        .create(&PostParams::default(), &CopyRule::new(&target, spec))
        .await
        .unwrap();
    env.track_copy_rule(&target);
    let start = Instant::now();
    let cr_create = all_seen(&seen, n, Duration::from_secs(120), start, "bundle created").await;
    watch.abort();
    wait_quiet(p).await;
    let copy_bytes = Api::<ConfigMap>::namespaced(client.clone(), &names[0])
        .get(&target)
        .await
        .ok()
        .and_then(|cm| cm.data?.get(KEY).map(String::len))
        .unwrap_or(0);

    let mut r = Rounds::default();
    let mut last_round = Instant::now();
    for round in 0..ROUNDS {
        let cpu = CpuMeter::new(p.child.id());
        // One certificate replaced, a different one each round.
        let i = (round * 37) % CERTS;
        certs[i] = ca(&format!("bench-ca-{i}-r{round}"));
        let (text, mark) = (certs.concat(), marker(&certs[i]));

        tokio::time::sleep(ROUND_GAP.saturating_sub(last_round.elapsed())).await;
        let (took, used) =
            raw_round(client, &mut written, &raw_label, &text, &mark, cpu.as_ref()).await;
        r.raw.push(took);
        r.raw_cpu = std::array::from_fn(|k| r.raw_cpu[k] + used[k]);
        last_round = Instant::now();

        tokio::time::sleep(ROUND_GAP.saturating_sub(last_round.elapsed())).await;
        let before = p.metrics().await;
        let (took, used) =
            copyrator_round(lr, &source, &target, n, &text, &mark, cpu.as_ref()).await;
        r.cr.push(took);
        r.cr_cpu = std::array::from_fn(|k| r.cr_cpu[k] + used[k]);
        // Everything the update caused (status, Events, follow-up jobs), not just the writes.
        wait_quiet(p).await;
        let after = p.metrics().await;
        r.calls.push(api_calls(&after) - api_calls(&before));
        add_deltas(
            &mut r.by_call,
            "copyrator_api_requests_total",
            &before,
            &after,
        );
        add_deltas(&mut r.jobs, "copyrator_jobs_total", &before, &after);
        last_round = Instant::now();
    }

    report.row(
        &format!("bundle: rule created, {n} copies of {CERTS} certificates"),
        ms(cr_create),
        ms(raw_create),
        format!("{:.2}", cr_create.as_secs_f64() / raw_create.as_secs_f64()),
        "",
    );
    fanout_row(
        report,
        &format!(
            "bundle: source updated (1 of {CERTS} certificates replaced), {n} copies (median of {ROUNDS})"
        ),
        &r.cr,
        &r.raw,
        "≤ 1.2 × raw",
    );
    let rounds = r.cr.len();
    report.note(format!(
        "bundle: raw = a plain kube-rs client replacing {n} ConfigMaps of its own ({} bytes each, the certificates as the source holds them; the copies hold {copy_bytes}), {CONCURRENCY} in flight; copyrator = from the source's update response; both until a watch saw every object with the new certificate. Rounds alternate, each {} s after the previous one ended",
        certs.concat().len(),
        ROUND_GAP.as_secs()
    ));
    report.note(format!(
        "bundle: copyrator's API calls per update round (until quiet: no call for 1 s), each round: {}; by verb and resource, per round: {}; jobs per round: {}",
        r.calls.iter().map(|c| format!("{c:.0}")).collect::<Vec<_>>().join("/"),
        per_round(&r.by_call, rounds),
        per_round(&r.jobs, rounds),
    ));
    report.note(format!(
        "bundle: CPU per update round, by process: raw: {}; copyrator: {}",
        cpu_per_round(&r.raw_cpu, rounds),
        cpu_per_round(&r.cr_cpu, rounds),
    ));
    clean_up(lr, &target, &source, written).await;
}

/// Leaves the cluster as the fan-out phase does for the phases after it (restore, memory,
/// resync): the rule and its copies gone, the source and the plain client's ConfigMaps too.
async fn clean_up(lr: &LongRun, target: &str, source: &str, written: Vec<ConfigMap>) {
    let LongRun { env, client, p, .. } = lr;
    let _ = env.rules().delete(target, &Default::default()).await;
    let _ = env
        .secrets(&lr.src)
        .delete(source, &Default::default())
        .await;
    stream::iter(written)
        .for_each_concurrent(CONCURRENCY, |cm| async move {
            let ns = cm.namespace().unwrap_or_default();
            let _ = Api::<ConfigMap>::namespaced(client.clone(), &ns)
                .delete(&cm.name_any(), &Default::default())
                .await;
        })
        .await;
    let copies = Api::<ConfigMap>::all(client.clone());
    let by_name = kube::api::ListParams::default().fields(&format!("metadata.name={target}"));
    crate::common::eventually(
        Duration::from_secs(120),
        "the bundle's copies deleted with its rule",
        || async {
            copies
                .list_metadata(&by_name)
                .await
                .ok()?
                .items
                .is_empty()
                .then_some(())
        },
    )
    .await;
    wait_quiet(p).await;
}

/// The plain client's `n` ConfigMaps holding `text`, created `CONCURRENCY` at a time; the time
/// until a watch saw them all, and the objects as created.
async fn raw_create(
    client: &kube::Client,
    namespaces: &[String],
    label: &str,
    name: &str,
    text: &str,
) -> (Duration, Vec<ConfigMap>) {
    let (seen, watch) = watch_objects(
        Api::<ConfigMap>::all(client.clone()),
        format!("{label}=yes"),
        |_| true,
    )
    .await;
    let start = Instant::now();
    let created: Vec<ConfigMap> = stream::iter(namespaces.iter())
        .map(|ns| {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
            let cm = crate::common::config_map(name, &[(label, "yes")], &[], &[(KEY, text)]);
            async move { api.create(&PostParams::default(), &cm).await }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await
        .unwrap();
    let took = all_seen(
        &seen,
        namespaces.len(),
        Duration::from_secs(120),
        start,
        "raw creates",
    )
    .await;
    watch.abort();
    (took, created)
}
