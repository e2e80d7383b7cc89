//! Phase selector-sources: how soon a CopyRule's newly matching source is copied, and what
//! the design (one selector watch) costs the API server per 1,000 unrelated Secret writes,
//! beside no feature and beside the candidate design (a mutating webhook).

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, api::PostParams};
use serde_json::json;

use crate::{
    base64_of,
    common::{self, TestEnv, secret, webhooks::unregister_webhooks},
    measure::{CpuMeter, cpu_since, watch_objects},
    report::{Report, ms, summary},
};

/// CopyRule selector sources (SPEC §5): how soon a new matching object's copies exist, and what
/// the design costs the API server per 1,000 unrelated Secret writes in the source namespace:
/// without the feature, with it (one label-selected, metadata-only watch), and with the
/// candidate it was measured against (a mutating webhook on every Secret CREATE in source
/// namespaces; its round trip measured with copyrator's copies endpoint, which allows CREATEs
/// without work).
pub async fn run(report: &mut Report, env: &TestEnv, sources: usize, writes: usize) {
    const ROTATIONS: usize = 5;
    use copyrator::copyrule::{CopyRule, CopyRuleSpec};
    use k8s_openapi::api::{
        admissionregistration::v1::MutatingWebhookConfiguration, core::v1::ConfigMap,
    };
    let client = &env.client;
    let mut p = crate::bench_copyrator(Some(client), &[]).await;
    let cpu = CpuMeter::new(p.child.id());
    let key = format!("bench-sel-{}", env.id);
    let src = env
        .namespace("bench-sel-src", &[(key.as_str(), "source")])
        .await;
    let targets: Vec<String> = {
        let mut v = Vec::new();
        for i in 0..3 {
            v.push(
                env.namespace(&format!("bench-sel-{i}"), &[(key.as_str(), "target")])
                    .await,
            );
        }
        v
    };

    // API-server CPU for `writes` unlabelled Secret creates in the source namespace.
    let unrelated = |round: String| {
        let client = client.clone();
        let src = src.clone();
        let cpu = cpu.as_ref();
        async move {
            let before = cpu.map(CpuMeter::sample);
            let api: Api<Secret> = Api::namespaced(client, &src);
            let start = Instant::now();
            stream::iter(0..writes)
                .map(|i| {
                    let api = api.clone();
                    let name = format!("{round}-{i}");
                    async move {
                        api.create(
                            &PostParams::default(),
                            &secret(&name, &[("team", "x")], &[], &[("k", "v")]),
                        )
                        .await
                    }
                })
                .buffer_unordered(16)
                .try_collect::<Vec<_>>()
                .await
                .expect("unrelated writes");
            (start.elapsed(), cpu_since(cpu, before))
        }
    };

    let rules: Api<CopyRule> = Api::all(client.clone());
    let rule_name = format!("{key}-rule");
    env.track_copy_rule(&rule_name);
    let selector =
        |k: &str, v: &str| k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
            match_labels: Some([(k.to_string(), v.to_string())].into()),
            match_expressions: None,
        };
    let rule = CopyRule::new(
        &rule_name,
        CopyRuleSpec {
            clusters: None,
            api_version: None,
            kind: copyrator::model::Kind::ConfigMap.as_str().into(),
            source_namespace: src.clone(),
            sources: None,
            drop_expired: false,
            template: None,
            create_once: false,
            source_name: None,
            source_selector: Some(selector(&key, "copy-me")),
            namespace_selector: Some(selector(&key, "target")),
            namespaces: vec![],
            exclude_namespaces: vec![],
            target_name: None,
            deletion_policy: Default::default(),
            conflict_policy: Default::default(),
            image_pull_secret: false,
            read_only: None,
            keys: None,
            target: None,
        },
    );
    let watches = |n: f64| {
        let p = &p;
        async move {
            let start = Instant::now();
            while p.metric("copyrator_selector_watches").await != n {
                assert!(
                    start.elapsed() < Duration::from_secs(30),
                    "selector watches != {n}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    // The candidate: a mutating webhook on every Secret CREATE in source namespaces.
    let mwc = format!("{key}-candidate");
    let hook: MutatingWebhookConfiguration = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": mwc},
        "webhooks": [{
            "name": "candidate.copyrator.io",
            "admissionReviewVersions": ["v1"],
            "clientConfig": {
                "url": format!("https://127.0.0.1:{}/admission/copies", p.webhook_port),
                "caBundle": base64_of(&String::from_utf8_lossy(&p.ca)),
            },
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["secrets"]}],
            "namespaceSelector": {"matchLabels": {key.as_str(): "source"}},
            "failurePolicy": "Ignore",
            "sideEffects": "NoneOnDryRun",
            "timeoutSeconds": 3,
        }]
    }))
    .unwrap();
    let hooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let probes = "copyrator_admission_requests_total{endpoint=\"copies\",operation=\"CREATE\",outcome=\"dry_run\"}";
    let calls = "copyrator_admission_requests_total{endpoint=\"copies\",operation=\"CREATE\",outcome=\"allowed\"}";
    let hook_on = || async {
        hooks.create(&PostParams::default(), &hook).await.unwrap();
        // The API server picks it up asynchronously: dry-run creates until it calls.
        let probe: Api<Secret> = Api::namespaced(client.clone(), &src);
        let before = p.metric(probes).await;
        let start = Instant::now();
        let mut i = 0;
        while p.metric(probes).await <= before {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "candidate webhook never called"
            );
            i += 1;
            let _ = probe
                .create(
                    &PostParams {
                        dry_run: true,
                        field_manager: None,
                    },
                    &secret(&format!("probe-{i}"), &[], &[], &[("k", "v")]),
                )
                .await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let hook_off = || async {
        let _ = hooks.delete(&mwc, &Default::default()).await;
        // Until the API server stops calling it, dry runs still arrive.
        let probe: Api<Secret> = Api::namespaced(client.clone(), &src);
        let start = Instant::now();
        let mut i = 0;
        loop {
            let before = p.metric(probes).await;
            i += 1;
            let _ = probe
                .create(
                    &PostParams {
                        dry_run: true,
                        field_manager: None,
                    },
                    &secret(&format!("gone-{i}"), &[], &[], &[("k", "v")]),
                )
                .await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            if p.metric(probes).await == before {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "candidate webhook still called"
            );
        }
    };

    // Rotating rounds (warm-up first) so that drift of the shared machine hits all three alike.
    unrelated("warmup".into()).await;
    let (mut without, mut with, mut candidate) = (Vec::new(), Vec::new(), Vec::new());
    let mut hook_calls = 0.0;
    for round in 0..ROTATIONS {
        without.push(unrelated(format!("without-{round}")).await);
        rules.create(&PostParams::default(), &rule).await.unwrap();
        watches(1.0).await;
        with.push(unrelated(format!("with-{round}")).await);
        rules.delete(&rule_name, &Default::default()).await.unwrap();
        watches(0.0).await;
        hook_on().await;
        let before = p.metric(calls).await;
        candidate.push(unrelated(format!("candidate-{round}")).await);
        hook_calls += p.metric(calls).await - before;
        hook_off().await;
    }
    let median = |v: &mut Vec<(Duration, [Duration; 4])>| -> (Duration, [Duration; 4]) {
        v.sort_by_key(|(_, c)| c[0]);
        v[v.len() / 2]
    };
    let spread = |v: &[(Duration, [Duration; 4])]| -> String {
        let k = 1000.0 / writes as f64;
        let ms: Vec<String> = v
            .iter()
            .map(|(_, c)| format!("{:.0}", c[0].as_secs_f64() * 1000.0 * k))
            .collect();
        ms.join("/")
    };
    let spreads = format!(
        "API-server ms per 1,000 writes, each round: without {}, selector watch {}, mutating webhook {}",
        spread(&without),
        spread(&with),
        spread(&candidate)
    );
    let (t_without, cpu_without) = median(&mut without);
    let (t_with, cpu_with) = median(&mut with);
    let (t_candidate, cpu_candidate) = median(&mut candidate);
    let calls = hook_calls / ROTATIONS as f64;

    // Latency: one matching ConfigMap at a time, until its copy is in every target.
    rules.create(&PostParams::default(), &rule).await.unwrap();
    watches(1.0).await;
    // One watch for the whole run: copies carry the source's labels.
    let (seen, watch) = watch_objects(
        Api::<ConfigMap>::all(client.clone()),
        format!("{key}=copy-me"),
        {
            let targets = targets.clone();
            move |cm: &ConfigMap| {
                targets
                    .iter()
                    .any(|t| Some(t) == cm.metadata.namespace.as_ref())
            }
        },
    )
    .await;
    let mut latencies = Vec::new();
    for i in 0..sources {
        let name = format!("later-{i}");
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &src);
        let start = Instant::now();
        api.create(
            &PostParams::default(),
            &common::config_map(&name, &[(key.as_str(), "copy-me")], &[], &[("v", "1")]),
        )
        .await
        .unwrap();
        let deadline = start + Duration::from_secs(30);
        let last = loop {
            let times: Vec<Instant> = {
                let seen = seen.lock().unwrap();
                targets
                    .iter()
                    .filter_map(|t| seen.get(&format!("{t}/{name}")).copied())
                    .collect()
            };
            if times.len() == targets.len() {
                break times.into_iter().max().unwrap();
            }
            assert!(
                Instant::now() < deadline,
                "copies of {name} not seen in 30 s"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        latencies.push(last.saturating_duration_since(start));
    }
    watch.abort();
    let (p50, _, p99, max) = summary(latencies);
    let _ = rules.delete(&rule_name, &Default::default()).await;
    p.terminate();
    unregister_webhooks(client).await;

    report.row(
        "source created later → copies in 3 namespaces, p50",
        ms(p50),
        String::new(),
        String::new(),
        "tens of ms",
    );
    report.row(
        "source created later → copies in 3 namespaces, p99",
        ms(p99),
        String::new(),
        String::new(),
        "",
    );
    let per_k = |d: [Duration; 4]| -> String {
        let k = 1000.0 / writes as f64;
        format!(
            "{:.0} ms API server + {:.0} ms etcd + {:.0} ms copyrator",
            d[0].as_secs_f64() * 1000.0 * k,
            d[1].as_secs_f64() * 1000.0 * k,
            d[2].as_secs_f64() * 1000.0 * k
        )
    };
    report.row(
        "CPU per 1,000 unrelated writes, selector watch (chosen)",
        per_k(cpu_with),
        per_k(cpu_without),
        format!(
            "{:.2}",
            cpu_with[0].as_secs_f64() / cpu_without[0].as_secs_f64().max(1e-9)
        ),
        "≈ 1 (no admission work)",
    );
    report.row(
        "CPU per 1,000 unrelated writes, mutating webhook (candidate)",
        per_k(cpu_candidate),
        per_k(cpu_without),
        format!(
            "{:.2}",
            cpu_candidate[0].as_secs_f64() / cpu_without[0].as_secs_f64().max(1e-9)
        ),
        "",
    );
    report.note(format!(
        "selector sources: {sources} ConfigMaps created one at a time, copies in all 3 targets after p50 {} / p99 {} / max {}; {writes} unrelated Secret creates at 16 in flight (median of {ROTATIONS} rotating rounds, by API-server CPU) took {t_without:?} without the feature, {t_with:?} with the selector watch, {t_candidate:?} with a mutating webhook ({calls:.0} admission calls a round)",
        ms(p50),
        ms(p99),
        ms(max)
    ));
    report.note(spreads);
}
