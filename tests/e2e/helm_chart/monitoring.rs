//! Monitoring: the ServiceMonitor, PodMonitor, PrometheusRule and Grafana dashboard the chart
//! renders; every PromQL expression in the alerts and the dashboard parses and names only
//! metrics (and labels) a running copyrator exports; and the monitors, rules and a
//! cert-manager Certificate are accepted by the real CRDs of those projects in the test API
//! server (tests/e2e/helm_chart/crds/). Included by tests/e2e/helm_chart.rs.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, Client,
    api::{DynamicObject, PostParams},
    discovery::{self, Scope},
};
use promql_parser::parser::{self, Expr, LabelModifier};
use serde_json::{Value, json};

use crate::common::{self, Harness, Options, TestEnv, eventually};
use crate::helm_chart::support::{
    Release, assert_contains, chart_dir, find, find_all, parse_yaml_stream, render, root,
};

/// Labels a Prometheus scrape of a ServiceMonitor or PodMonitor target adds to every sample.
const TARGET_LABELS: &[&str] = &[
    "namespace",
    "pod",
    "container",
    "service",
    "endpoint",
    "job",
    "instance",
];

/// The only metric not copyrator's own: copyrator exports no process metrics, and the
/// dashboard's memory panel shows what the OOM killer compares with the memory limit.
const EXTERNAL: &[(&str, &str)] = &[(
    "container_memory_working_set_bytes",
    "the kubelet's cAdvisor, scraped by every kube-prometheus setup",
)];

/// What a scrape of copyrator's `/metrics` shows: every sample name it may export (from the
/// `# TYPE` lines, with the suffixes its type gets) and the label names seen per sample name.
struct Exposition {
    names: BTreeSet<String>,
    labels: BTreeMap<String, BTreeSet<String>>,
}

impl Exposition {
    fn parse(text: &str) -> Self {
        let mut names = BTreeSet::new();
        let mut labels: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split_whitespace();
                let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
                let suffixes: &[&str] = match kind {
                    "counter" => &["_total"],
                    "histogram" => &["_bucket", "_sum", "_count"],
                    "gauge" | "unknown" => &[""],
                    other => panic!("unexpected metric type {other} of {name}"),
                };
                names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
            } else if !line.starts_with('#') && !line.trim().is_empty() {
                let (name, rest) = line
                    .split_once(['{', ' '])
                    .unwrap_or_else(|| panic!("sample line {line:?}"));
                let set = labels.entry(name.to_string()).or_default();
                if line.as_bytes()[name.len()] == b'{' {
                    let body = &rest[..rest.rfind('}').unwrap()];
                    for pair in split_label_pairs(body) {
                        set.insert(pair.split_once('=').unwrap().0.to_string());
                    }
                }
            }
        }
        for name in labels.keys() {
            assert!(names.contains(name), "{name} has samples but no # TYPE");
        }
        Self { names, labels }
    }
}

/// `a="x",b="y,z"` → [`a="x"`, `b="y,z"`] (commas inside quoted values kept).
fn split_label_pairs(body: &str) -> Vec<&str> {
    let (mut out, mut start, mut quoted, mut escaped) = (Vec::new(), 0, false, false);
    for (i, c) in body.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < body.len() {
        out.push(&body[start..]);
    }
    out
}

/// What one PromQL expression reads: the metrics it selects with the label names each
/// selector matches on, and the labels it groups or matches by.
#[derive(Default, Debug)]
struct Reads {
    selectors: Vec<(String, BTreeSet<String>)>,
    grouping: BTreeSet<String>,
}

fn reads(expr: &Expr, out: &mut Reads) {
    let modifier = |m: &Option<LabelModifier>, out: &mut Reads| {
        if let Some(m) = m {
            out.grouping.extend(m.labels().labels.iter().cloned());
        }
    };
    match expr {
        Expr::Aggregate(a) => {
            modifier(&a.modifier, out);
            reads(&a.expr, out);
            if let Some(p) = &a.param {
                reads(p, out);
            }
        }
        Expr::Unary(u) => reads(&u.expr, out),
        Expr::Binary(b) => {
            if let Some(m) = &b.modifier {
                modifier(&m.matching, out);
                if let Some(labels) = m.card.labels() {
                    out.grouping.extend(labels.labels.iter().cloned());
                }
            }
            reads(&b.lhs, out);
            reads(&b.rhs, out);
        }
        Expr::Paren(p) => reads(&p.expr, out),
        Expr::Subquery(s) => reads(&s.expr, out),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => {}
        Expr::VectorSelector(vs) => selector(vs, out),
        Expr::MatrixSelector(ms) => selector(&ms.vs, out),
        Expr::Call(c) => c.args.args.iter().for_each(|a| reads(a, out)),
        Expr::Extension(_) => panic!("the parser makes no extensions"),
    }
}

fn selector(vs: &promql_parser::parser::VectorSelector, out: &mut Reads) {
    let name = vs
        .name
        .clone()
        .unwrap_or_else(|| panic!("a selector without a metric name: {vs}"));
    let labels = vs
        .matchers
        .matchers
        .iter()
        .map(|m| m.name.clone())
        .filter(|l| l != "__name__")
        .collect();
    out.selectors.push((name, labels));
}

/// A Grafana query with its variables replaced by what they stand for, as PromQL.
fn grafana_to_promql(query: &str) -> String {
    query
        .replace("$__rate_interval", "5m")
        .replace("$__range", "1h")
        .replace("$namespace", "copyrator-system")
        .replace("$pod", ".*")
}

/// Every PromQL expression of the chart's alerts and dashboard, with where it comes from.
fn chart_expressions() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let docs = render(
        "demo",
        "copyrator-system",
        &["--set", "monitoring.prometheusRule.enabled=true"],
    );
    let rule = find(&docs, "PrometheusRule");
    for group in rule["spec"]["groups"].as_array().unwrap() {
        for r in group["rules"].as_array().unwrap() {
            out.push((
                format!("alert {}", r["alert"].as_str().unwrap()),
                r["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    let dashboard = dashboard_json();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            out.push((
                format!("panel {:?}", panel["title"].as_str().unwrap()),
                grafana_to_promql(target["expr"].as_str().unwrap()),
            ));
        }
    }
    for var in dashboard["templating"]["list"].as_array().unwrap() {
        if var["type"] != "query" {
            continue;
        }
        // label_values(SELECTOR, LABEL): the selector is PromQL, the label one of its labels.
        let query = var["query"]["query"].as_str().unwrap();
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .unwrap_or_else(|| panic!("variable query {query}"));
        let (selector, label) = inner.rsplit_once(',').unwrap();
        out.push((
            format!("variable ${}", var["name"].as_str().unwrap()),
            grafana_to_promql(&format!("count by ({}) ({selector})", label.trim())),
        ));
    }
    out
}

fn dashboard_json() -> Value {
    let text = std::fs::read_to_string(chart_dir().join("dashboards/copyrator.json")).unwrap();
    serde_json::from_str(&text).expect("dashboards/copyrator.json is JSON")
}

/// Waits until copyrator's `/metrics` has a sample of `metric` (a family shows up in the
/// exposition once something was counted in it).
async fn wait_for_sample(t: &Harness, metric: &str) {
    let prefix = format!("{metric}{{");
    eventually(
        std::time::Duration::from_secs(30),
        &format!("a sample of {metric}"),
        || {
            let prefix = prefix.clone();
            async move { t.metrics().await.contains(&prefix).then_some(()) }
        },
    )
    .await;
}

/// copyrator after some work, its `/metrics`: copies a resync found missing and wrote, a
/// conflict, a certificate reload, admission reviews and a Pod through the Pod gate.
async fn metrics_after_some_work() -> String {
    // The source and its targets exist before copyrator starts (and its webhooks come later):
    // its startup resync finds the missing copy, drift the watches could not have seen.
    let env = TestEnv::new().await;
    let src = env.namespace("mon-src", &[]).await;
    let target = env.namespace("mon-dst", &[]).await;
    let taken = env.namespace("mon-taken", &[]).await;
    let create = PostParams::default();
    env.secrets(&taken)
        .create(&create, &common::secret("cred", &[], &[], &[("x", "y")]))
        .await
        .unwrap();
    env.secrets(&src)
        .create(
            &create,
            &common::secret(
                "cred",
                &[("copyrator.io/source", "true")],
                &[("copyrator.io/namespaces", &format!("{target},{taken}"))],
                &[("k", "v")],
            ),
        )
        .await
        .unwrap();
    let t = Harness::start_in(
        env,
        Options {
            webhooks: false,
            resync_interval: "1s",
            ..Default::default()
        },
    )
    .await;
    t.wait_for::<k8s_openapi::api::core::v1::Secret>(&target, "cred", "the copy", |_| true)
        .await;
    wait_for_sample(&t, "copyrator_resync_drift_total").await;
    wait_for_sample(&t, "copyrator_conflicts_total").await;

    // A new serving certificate (copyrator re-reads it), whose CA the webhooks then trust.
    let fresh = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_copyrator"))
        .args(["certs", "--ip", "127.0.0.1", "--out"])
        .arg(fresh.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    for file in ["tls.key", "tls.crt"] {
        std::fs::copy(
            fresh.path().join(file),
            t.copyrator().certs.path().join(file),
        )
        .unwrap();
    }
    wait_for_sample(&t, "copyrator_tls_reloads_total").await;
    let ca = std::fs::read(fresh.path().join("ca.crt")).unwrap();

    t.webhooks_registered();
    let base = format!(
        "https://127.0.0.1:{}",
        t.copyrator().running().webhook_addr.port()
    );
    common::register_webhooks(&t.client, &base, &ca).await;
    common::register_pod_gate(&t.client, &base, &ca).await;
    common::service_account(&t.client, &target).await;
    // The API server picks configurations up asynchronously: Pods until one passes the gate.
    let mut n = 0;
    let harness = &t;
    eventually(
        std::time::Duration::from_secs(30),
        "a Pod through the Pod gate",
        || {
            n += 1;
            let (client, target) = (harness.client.clone(), target.clone());
            let name = format!("app-{n}");
            async move {
                common::create_pod(&client, &target, &common::pod(&name, &[], None)).await;
                let m = harness.metrics().await;
                (m.contains("copyrator_pod_gate_total{")
                    && m.contains("copyrator_admission_requests_total{"))
                .then_some(())
            }
        },
    )
    .await;
    let metrics = t.metrics().await;
    common::unregister_pod_gate(&t.client).await;
    t.finish().await;
    metrics
}

#[tokio::test]
async fn alerts_and_dashboard_name_only_metrics_copyrator_exports() {
    let exposition = Exposition::parse(&metrics_after_some_work().await);
    let external: BTreeSet<&str> = EXTERNAL.iter().map(|(m, _)| *m).collect();
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    for (origin, expr) in chart_expressions() {
        let parsed = match parser::parse(&expr) {
            Ok(e) => e,
            Err(e) => {
                problems.push(format!("{origin}: does not parse ({e}): {expr}"));
                continue;
            }
        };
        let mut r = Reads::default();
        reads(&parsed, &mut r);
        assert!(!r.selectors.is_empty(), "{origin} reads no metric: {expr}");
        let mut available: BTreeSet<String> = TARGET_LABELS.iter().map(|l| l.to_string()).collect();
        for (metric, labels) in &r.selectors {
            used.insert(metric.clone());
            if external.contains(metric.as_str()) {
                continue;
            }
            if !exposition.names.contains(metric) {
                problems.push(format!("{origin}: copyrator exports no {metric}"));
                continue;
            }
            // Label names can only be checked against samples that exist; the work above
            // makes them for every metric a label is used with (the test says otherwise).
            let seen = exposition.labels.get(metric).cloned().unwrap_or_default();
            let base = metric
                .strip_suffix("_bucket")
                .map(|b| format!("{b}_count"))
                .unwrap_or_else(|| metric.clone());
            let seen_base = exposition.labels.get(&base).cloned().unwrap_or_default();
            for label in labels {
                if TARGET_LABELS.contains(&label.as_str()) {
                    continue;
                }
                if seen.is_empty() && seen_base.is_empty() {
                    problems.push(format!(
                        "{origin}: {metric} had no samples to check its label {label} against"
                    ));
                } else if !seen.contains(label) && !seen_base.contains(label) {
                    problems.push(format!("{origin}: {metric} has no label {label}"));
                }
            }
            available.extend(seen);
        }
        for label in &r.grouping {
            if !available.contains(label) {
                problems.push(format!(
                    "{origin}: groups by {label}, which none of its metrics has"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the chart's PromQL names what copyrator does not export:\n{}",
        problems.join("\n")
    );
    // The dashboard covers what operators look at first; the alerts what the issue asks for.
    for metric in [
        "copyrator_copy_writes_total",
        "copyrator_copy_lag_seconds_bucket",
        "copyrator_queue_depth",
        "copyrator_admission_requests_total",
        "copyrator_admission_duration_seconds_bucket",
        "copyrator_api_requests_total",
        "copyrator_pod_gate_total",
        "container_memory_working_set_bytes",
        "copyrator_conflicts_total",
        "copyrator_refused_targets_total",
        "copyrator_jobs_total",
    ] {
        assert!(used.contains(metric), "nothing shows {metric}");
    }
}

#[test]
fn monitoring_is_off_by_default_and_each_part_renders_alone() {
    let none = render("demo", "copyrator-system", &[]);
    for kind in [
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
        "ConfigMap",
    ] {
        assert!(
            find_all(&none, kind).is_empty(),
            "{kind} rendered by default"
        );
    }

    let docs = render(
        "demo",
        "copyrator-system",
        &[
            "--set",
            "monitoring.serviceMonitor.enabled=true",
            "--set",
            "monitoring.serviceMonitor.namespace=monitoring",
            "--set",
            "monitoring.serviceMonitor.labels.release=kube-prometheus-stack",
            "--set",
            "monitoring.serviceMonitor.interval=15s",
        ],
    );
    let sm = find(&docs, "ServiceMonitor");
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(sm["metadata"]["namespace"], "monitoring");
    assert_eq!(sm["metadata"]["labels"]["release"], "kube-prometheus-stack");
    // It selects the chart's Service in the release namespace, on the Service's port name.
    let service = find(&docs, "Service");
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&service["metadata"]["labels"][k], v, "Service label {k}");
    }
    assert_eq!(
        sm["spec"]["namespaceSelector"],
        json!({"matchNames": ["copyrator-system"]})
    );
    assert_eq!(
        sm["spec"]["endpoints"],
        json!([{"port": "metrics", "path": "/metrics", "scheme": "http", "interval": "15s"}])
    );
    assert!(
        service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "metrics")
    );

    let docs = render(
        "demo",
        "copyrator-system",
        &["--set", "monitoring.podMonitor.enabled=true"],
    );
    let pm = find(&docs, "PodMonitor");
    assert_eq!(pm["metadata"]["namespace"], "copyrator-system");
    assert_eq!(
        pm["spec"]["selector"]["matchLabels"],
        find(&docs, "Deployment")["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["port"], "http");

    let out = crate::helm_chart::support::helm(&[
        "template",
        &chart_dir().display().to_string(),
        "--release",
        "demo",
        "--namespace",
        "copyrator-system",
        "--set",
        "monitoring.podMonitor.enabled=true",
        "--set",
        "monitoring.serviceMonitor.enabled=true",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("choose one"));

    let docs = render(
        "demo",
        "copyrator-system",
        &[
            "--set",
            "monitoring.dashboard.enabled=true",
            "--set",
            "monitoring.dashboard.annotations.grafana_folder=Platform",
        ],
    );
    let cm = find(&docs, "ConfigMap");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(cm["metadata"]["annotations"]["grafana_folder"], "Platform");
    let shipped: Value =
        serde_json::from_str(cm["data"]["copyrator.json"].as_str().unwrap()).unwrap();
    assert_eq!(
        shipped,
        dashboard_json(),
        "the ConfigMap holds the dashboard file"
    );
    assert_eq!(shipped["uid"], "copyrator");
}

#[test]
fn alerts_can_be_disabled_and_labelled() {
    let all = render(
        "demo",
        "copyrator-system",
        &["--set", "monitoring.prometheusRule.enabled=true"],
    );
    let names = |docs: &[Value]| -> Vec<String> {
        find(docs, "PrometheusRule")["spec"]["groups"][0]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["alert"].as_str().unwrap().to_string())
            .collect()
    };
    let every = names(&all);
    for alert in [
        "CopyratorCopyLagHigh",
        "CopyratorQueueBacklog",
        "CopyratorConflicts",
        "CopyratorRefusedTargets",
        "CopyratorResyncFailing",
        "CopyratorResyncStalled",
        "CopyratorWebhookErrors",
        "CopyratorWebhookSlow",
        "CopyratorPodGateTimeouts",
    ] {
        assert!(every.iter().any(|a| a == alert), "{alert} in {every:?}");
    }
    for r in find(&all, "PrometheusRule")["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
    {
        let expr = r["expr"].as_str().unwrap();
        assert!(
            expr.contains("namespace=\"copyrator-system\""),
            "{} selects the release namespace: {expr}",
            r["alert"]
        );
        assert!(
            ["info", "warning", "critical"].contains(&r["labels"]["severity"].as_str().unwrap())
        );
        for key in ["summary", "description"] {
            assert!(r["annotations"][key].is_string(), "{r}");
        }
    }

    let some = render(
        "demo",
        "copyrator-system",
        &[
            "--set",
            "monitoring.prometheusRule.enabled=true",
            "--set",
            "monitoring.prometheusRule.disabled.CopyratorRefusedTargets=true",
            "--set",
            "monitoring.prometheusRule.alertLabels.team=platform",
            "--set",
            "monitoring.prometheusRule.resyncStalledAfter=2h",
        ],
    );
    let left = names(&some);
    assert_eq!(left.len(), every.len() - 1);
    assert!(!left.iter().any(|a| a == "CopyratorRefusedTargets"));
    let rules = &find(&some, "PrometheusRule")["spec"]["groups"][0]["rules"];
    for r in rules.as_array().unwrap() {
        assert_eq!(r["labels"]["team"], "platform");
    }
    let stalled = rules
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["alert"] == "CopyratorResyncStalled")
        .unwrap();
    assert!(stalled["expr"].as_str().unwrap().contains("[2h]"));
}

// ---------------------------------------------------------------------------------------------
// Against the test API server, with the real CRDs of the Prometheus Operator and cert-manager

/// Installs the vendored CRDs (tests/e2e/helm_chart/crds/, see its README) and waits until
/// their kinds are served. They stay: the API server is shared, and nothing else uses these groups.
async fn install_crds(client: &Client) {
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
        )),
    );
    let dir = root().join("tests/e2e/helm_chart/crds");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        for mut doc in parse_yaml_stream(&std::fs::read_to_string(&path).unwrap()) {
            drop_empty_string_defaults(&mut doc);
            let name = doc["metadata"]["name"].as_str().unwrap().to_string();
            let object: DynamicObject = serde_json::from_value(doc).unwrap();
            // Created, not applied: Kubernetes 1.20's server-side apply refuses fields newer
            // than itself (selectableFields), which a create drops.
            match crds.create(&PostParams::default(), &object).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => panic!("installing CRD {name}: {e}"),
            }
        }
    }
    for (group, kind) in [
        ("monitoring.coreos.com", "ServiceMonitor"),
        ("monitoring.coreos.com", "PodMonitor"),
        ("monitoring.coreos.com", "PrometheusRule"),
        ("cert-manager.io", "Certificate"),
    ] {
        eventually(
            std::time::Duration::from_secs(30),
            &format!("{kind} served"),
            || async move {
                discovery::group(client, group)
                    .await
                    .ok()?
                    .recommended_kind(kind)
                    .map(|_| ())
            },
        )
        .await;
    }
}

/// Kubernetes 1.20 rejects `default: ""` in a CRD schema (it reads the empty string as null);
/// newer API servers accept it. The defaults only fill in fields the chart never leaves
/// empty, so the test installs the schemas without them.
fn drop_empty_string_defaults(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if map.get("default") == Some(&json!("")) {
                map.remove("default");
            }
            map.values_mut().for_each(drop_empty_string_defaults);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_empty_string_defaults),
        _ => {}
    }
}

/// The object `doc` names, as the API server stores it.
async fn stored(client: &Client, doc: &Value) -> Value {
    stored_opt(client, doc)
        .await
        .unwrap_or_else(|| panic!("{} {} is not stored", doc["kind"], doc["metadata"]["name"]))
}

async fn stored_opt(client: &Client, doc: &Value) -> Option<Value> {
    let api_version = doc["apiVersion"].as_str().unwrap();
    let kind = doc["kind"].as_str().unwrap();
    let name = doc["metadata"]["name"].as_str().unwrap();
    let namespace = doc["metadata"]["namespace"].as_str();
    let (resource, namespaced) = match api_version.split_once('/') {
        // The core group (v1): ConfigMap and the like, all namespaced here.
        None => (
            kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
                "",
                api_version,
                kind,
            )),
            true,
        ),
        Some((group, version)) => {
            let (resource, caps) = discovery::group(client, group)
                .await
                .unwrap()
                .versioned_resources(version)
                .into_iter()
                .find(|(r, _)| r.kind == kind)
                .unwrap_or_else(|| panic!("{api_version} {kind} not served"));
            (resource, caps.scope == Scope::Namespaced)
        }
    };
    let api: Api<DynamicObject> = if namespaced {
        Api::namespaced_with(client.clone(), namespace.unwrap(), &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    };
    api.get_opt(name)
        .await
        .unwrap()
        .map(|o| serde_json::to_value(o).unwrap())
}

/// Installs the chart with every monitoring part and cert-manager (signing with a CA issuer),
/// then reads each object back: a field the CRD's schema does not know would have been
/// pruned, and the stored spec would differ from the rendered one.
#[tokio::test]
async fn monitors_rules_and_certificate_are_accepted_by_the_real_crds() {
    let env = TestEnv::new().await;
    install_crds(&env.client).await;
    let ns = env.namespace("helm-mon", &[]).await;
    let name = format!("m{}", env.id);
    let values = [
        "--set",
        "monitoring.serviceMonitor.enabled=true",
        "--set",
        "monitoring.serviceMonitor.interval=30s",
        "--set-json",
        r#"monitoring.serviceMonitor.metricRelabelings=[{"action": "drop", "regex": "copyrator_watch_events_total", "sourceLabels": ["__name__"]}]"#,
        "--set",
        "monitoring.prometheusRule.enabled=true",
        "--set",
        "monitoring.dashboard.enabled=true",
        "--set",
        "certManager.enabled=true",
        "--set",
        "certManager.issuerRef.name=platform-ca",
        "--set",
        "certManager.issuerRef.kind=ClusterIssuer",
    ];
    let mut release = Release::install(&name, &ns, &values);
    let rendered = release.render_live_with(&values);
    for kind in [
        "ServiceMonitor",
        "PrometheusRule",
        "Certificate",
        "ConfigMap",
    ] {
        let doc = find(&rendered, kind);
        let live = stored(&env.client, doc).await;
        let field = if kind == "ConfigMap" { "data" } else { "spec" };
        assert_contains(&live[field], &doc[field], &format!("{kind}.{field}"));
    }
    let dashboard: Api<ConfigMap> = Api::namespaced(env.client.clone(), &ns);
    assert!(
        dashboard
            .get(&format!("{name}-copyrator-dashboard"))
            .await
            .unwrap()
            .data
            .unwrap()
            .contains_key("copyrator.json")
    );

    // From the ServiceMonitor to a PodMonitor: the upgrade replaces one with the other.
    let pod_values = [
        "--set",
        "monitoring.podMonitor.enabled=true",
        "--set",
        "monitoring.prometheusRule.enabled=true",
    ];
    let service_monitor = find(&rendered, "ServiceMonitor").clone();
    release.upgrade(&pod_values);
    let rendered = release.render_live_with(&pod_values);
    let pm = find(&rendered, "PodMonitor");
    let live = stored(&env.client, pm).await;
    assert_contains(&live["spec"], &pm["spec"], "PodMonitor.spec");
    assert!(
        stored_opt(&env.client, &service_monitor).await.is_none(),
        "the upgrade removed the ServiceMonitor"
    );

    release.uninstall();
    env.cleanup().await;
}
