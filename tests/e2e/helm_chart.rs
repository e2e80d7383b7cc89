//! The Helm chart (`deploy/helm/copyrator`, SPEC §6.4) and the Dockerfile, checked with the real
//! tools: Helm v4's Go SDK (PyPI `helm-python-sdk`, driven by `helm_chart/helm_tool.py`), the
//! copyrator binary's own manifests and CLI, hadolint, openssl, and the test API server for a
//! real install, upgrade and uninstall — and copyrator running under the chart's RBAC.

mod admission_policy;
mod copy_kinds;
mod front_door;
mod hub;
mod monitoring;
mod namespace_scope;
mod options;
pub(crate) mod support;
mod test_hook;

use crate::common;

use std::{collections::BTreeSet, path::Path, process::Command, time::Duration};

use common::{Process, TestEnv, eventually};
use copyrator::copyrule::CopyRule;
use k8s_openapi::{
    api::{
        authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
        coordination::v1::Lease,
        core::v1::{ConfigMap, Event, Secret},
        rbac::v1::PolicyRule,
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{Api, api::PostParams};
use serde_json::{Value, json};
use support::{
    Installed, Release, assert_contains, b64, binary_webhooks, chart_dir, find, find_all,
    find_named, helm, helm_ok, kinds, openssl, render, root, service_account_token, temp_file,
    write_token_kubeconfig,
};

/// An RBAC rule as a comparable (apiGroups, resources, resourceNames, verbs) tuple.
type Rule = (Vec<String>, Vec<String>, Vec<String>, Vec<String>);
type RuleSet = BTreeSet<Rule>;

fn rule_set(rules: &[PolicyRule]) -> RuleSet {
    rules
        .iter()
        .map(|r| {
            (
                r.api_groups.clone().unwrap_or_default(),
                r.resources.clone().unwrap_or_default(),
                r.resource_names.clone().unwrap_or_default(),
                r.verbs.clone(),
            )
        })
        .collect()
}

fn rule(groups: &[&str], resources: &[&str], names: &[&str], verbs: &[&str]) -> Rule {
    let v = |s: &[&str]| s.iter().map(|s| s.to_string()).collect();
    (v(groups), v(resources), v(names), v(verbs))
}

/// Exactly the API calls copyrator makes (src/cluster/, src/report/events.rs, and with its own
/// certificates src/certs/manager.rs on the `webhooks` configurations), one rule per verb.
fn expected_cluster_rules(webhooks: &str) -> RuleSet {
    let objects = &["secrets", "configmaps"];
    let mut rules: Vec<Rule> = [
        "get", "list", "watch", "create", "update", "delete", "patch",
    ]
    .iter()
    .map(|v| rule(&[""], objects, &[], &[v]))
    .collect();
    rules.extend([
        rule(&[""], &["namespaces"], &[], &["get"]),
        rule(&[""], &["namespaces"], &[], &["list"]),
        rule(&[""], &["namespaces"], &[], &["watch"]),
        rule(
            &["copyrator.io"],
            &["copyrules", "namespacedcopyrules"],
            &[],
            &["get"],
        ),
        rule(
            &["copyrator.io"],
            &["copyrules", "namespacedcopyrules"],
            &[],
            &["list"],
        ),
        rule(
            &["copyrator.io"],
            &["copyrules", "namespacedcopyrules"],
            &[],
            &["watch"],
        ),
        rule(&["copyrator.io"], &["copyrules/status"], &[], &["patch"]),
        rule(&[""], &["events"], &[], &["create"]),
    ]);
    let configurations = &[
        "validatingwebhookconfigurations",
        "mutatingwebhookconfigurations",
    ];
    for verb in ["get", "patch"] {
        rules.push(rule(
            &["admissionregistration.k8s.io"],
            configurations,
            &[webhooks],
            &[verb],
        ));
    }
    rules.into_iter().collect()
}

/// Leader election on one named Lease (src/pipeline/leader.rs).
fn expected_lease_rules(lease: &str) -> RuleSet {
    [
        rule(&["coordination.k8s.io"], &["leases"], &[], &["create"]),
        rule(&["coordination.k8s.io"], &["leases"], &[lease], &["get"]),
        rule(&["coordination.k8s.io"], &["leases"], &[lease], &["update"]),
    ]
    .into_iter()
    .collect()
}

fn assert_least_privilege(rules: &RuleSet) {
    for (groups, resources, _, verbs) in rules {
        for s in groups.iter().chain(resources).chain(verbs) {
            assert!(!s.contains('*'), "wildcard in {rules:?}");
        }
    }
}

/// Every rendered flag is one `copyrator serve` has, with a value it parses: the binary's own
/// command line parses them (the pod-only `$(POD_NAMESPACE)` substituted).
fn assert_serve_accepts(args: &[String]) {
    let argv: Vec<String> = std::iter::once("copyrator".to_string())
        .chain(
            args.iter()
                .map(|a| a.replace("$(POD_NAMESPACE)", "platform-system")),
        )
        .collect();
    if let Err(e) = <copyrator::cli::Cli as clap::Parser>::try_parse_from(&argv) {
        panic!("copyrator rejects the chart's arguments {argv:?}:\n{e}");
    }
}

fn rules_of(doc: &Value) -> Vec<PolicyRule> {
    serde_json::from_value(doc["rules"].clone()).expect("RBAC rules")
}

// ---------------------------------------------------------------------------------------------
// Offline: lint, render, schema

#[test]
fn chart_lints_clean_in_strict_mode() {
    let chart = chart_dir().display().to_string();
    for extra in [&[][..], &["--set", "certManager.enabled=true"][..]] {
        let mut args = vec!["lint", &chart, "--strict"];
        args.extend_from_slice(extra);
        let out = helm_ok(&args);
        assert!(out.contains("1 chart(s) linted, ok"), "{out}");
        assert!(
            !out.contains("[WARNING]") && !out.contains("[ERROR]"),
            "lint findings:\n{out}"
        );
    }
}

#[test]
fn chart_plain_yaml_passes_yamllint() {
    // Chart.yaml and values.yaml; templates/ are Go templates and files/crds/ is generated (the
    // chart's .yamllint ignores both).
    let chart = chart_dir();
    let out = Command::new("yamllint")
        .arg("--strict")
        .arg("-c")
        .arg(chart.join(".yamllint"))
        .arg(&chart)
        .output()
        .expect("yamllint (apt install yamllint, or run scripts/bootstrap.sh)");
    assert!(
        out.status.success(),
        "yamllint:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn chart_ships_the_generated_crds_as_templates_kept_on_uninstall() {
    for (file, command) in [
        ("copyrules.copyrator.io.yaml", "crd"),
        ("namespacedcopyrules.copyrator.io.yaml", "namespaced-crd"),
        ("hublinks.copyrator.io.yaml", "hub-link-crd"),
    ] {
        let chart_copy = std::fs::read(chart_dir().join("files/crds").join(file))
            .unwrap_or_else(|e| panic!("the chart's files/crds/{file}: {e}"));
        let committed = std::fs::read(root().join("deploy/crds").join(file)).unwrap();
        assert!(
            chart_copy == committed,
            "deploy/helm/copyrator/files/crds/{file} is stale: cp deploy/crds/{file} deploy/helm/copyrator/files/crds/"
        );
        let generated = Command::new(env!("CARGO_BIN_EXE_copyrator"))
            .args(["manifests", command])
            .output()
            .unwrap();
        assert!(generated.status.success());
        assert!(
            generated.stdout == chart_copy,
            "the chart's {file} differs from `copyrator manifests {command}`"
        );
    }
    let crds = |extra: &[&str]| -> Vec<(String, Value)> {
        render("demo", "platform-system", extra)
            .into_iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
            .map(|d| (d["metadata"]["name"].as_str().unwrap().to_string(), d))
            .collect()
    };
    let names: Vec<String> = crds(&[]).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "copyrules.copyrator.io",
            "hublinks.copyrator.io",
            "namespacedcopyrules.copyrator.io"
        ]
    );
    for (name, crd) in crds(&[]) {
        assert_eq!(
            crd["metadata"]["annotations"]["helm.sh/resource-policy"], "keep",
            "{name}: crds.keep (the default) keeps it on uninstall"
        );
        let generated: Value = serde_json::to_value(
            serde_saphyr::from_str::<Value>(
                &std::fs::read_to_string(root().join("deploy/crds").join(format!("{name}.yaml")))
                    .unwrap(),
            )
            .unwrap(),
        )
        .unwrap();
        // Numbers as JSON has them: the generated `minimum: 0.0` is the rendered `0`.
        fn numbers_as_f64(v: &Value) -> Value {
            match v {
                Value::Number(n) => serde_json::json!(n.as_f64()),
                Value::Array(a) => Value::Array(a.iter().map(numbers_as_f64).collect()),
                Value::Object(o) => Value::Object(
                    o.iter()
                        .map(|(k, v)| (k.clone(), numbers_as_f64(v)))
                        .collect(),
                ),
                other => other.clone(),
            }
        }
        assert_eq!(
            numbers_as_f64(&crd["spec"]),
            numbers_as_f64(&generated["spec"]),
            "{name}: the generated spec"
        );
    }
    for (name, crd) in crds(&["--set", "crds.keep=false"]) {
        assert!(
            crd["metadata"]["annotations"]["helm.sh/resource-policy"].is_null(),
            "{name}: deleted with the release"
        );
    }
    assert!(crds(&["--set", "crds.enabled=false"]).is_empty());
    assert!(
        crds(&[
            "--set",
            "scope=namespaces",
            "--set-json",
            "namespaces=[\"a\"]"
        ])
        .is_empty(),
        "a namespace-scoped install renders nothing cluster-scoped"
    );
}

#[test]
fn rendered_webhook_configuration_is_what_copyrator_manifests_prints() {
    let cases: [(&[&str], &str, &str, u32, &str); 2] = [
        (&[], "demo-copyrator", "demo-copyrator", 3, "kube-system"),
        (
            &[
                "--set",
                "fullnameOverride=cpr",
                "--set",
                "webhook.name=cpr-hooks",
                "--set",
                "webhook.timeoutSeconds=5",
                "--set",
                "webhook.excludeNamespaces={kube-system,monitoring}",
            ],
            "cpr",
            "cpr-hooks",
            5,
            "kube-system,monitoring",
        ),
    ];
    for (values, service, name, timeout, excluded) in cases {
        let docs = render("demo", "platform-system", values);
        // No caBundle by default: copyrator sets it (SPEC §6.4).
        let ca = find(&docs, "ValidatingWebhookConfiguration")["webhooks"][0]["clientConfig"]
            .get("caBundle")
            .and_then(Value::as_str)
            .map(b64)
            .unwrap_or_default();
        let (validating, mutating) = binary_webhooks(
            &format!("platform-system/{service}"),
            name,
            &ca,
            timeout,
            excluded,
        );
        for mut expected in [validating, mutating] {
            let kind = expected["kind"].as_str().unwrap().to_string();
            let mut rendered = find(&docs, &kind).clone();
            // The chart adds its standard labels to the binary's.
            let rendered_labels = rendered["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("labels")
                .unwrap();
            let expected_labels = expected["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("labels")
                .unwrap();
            assert_contains(&rendered_labels, &expected_labels, "metadata.labels");
            assert_eq!(
                rendered, expected,
                "the chart's {kind} differs from `copyrator manifests webhooks` ({values:?})"
            );
        }
    }
}

#[test]
fn the_pod_gate_can_be_left_out_of_the_chart() {
    let docs = render("demo", "platform-system", &[]);
    let gate = find(&docs, "MutatingWebhookConfiguration");
    assert_eq!(
        gate["webhooks"][0]["clientConfig"]["service"]["path"],
        "/admission/pods"
    );
    assert_eq!(gate["webhooks"][0]["reinvocationPolicy"], "Never");
    let args =
        find(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("--pod-gate-timeout=2s"), "{args}");

    let docs = render(
        "demo",
        "platform-system",
        &["--set", "podGate.enabled=false"],
    );
    assert!(find_all(&docs, "MutatingWebhookConfiguration").is_empty());
    assert_eq!(find_all(&docs, "ValidatingWebhookConfiguration").len(), 1);
}

/// Read-only copies may be changed by copyrator alone (SPEC §4 item 11): the chart tells it
/// the username it runs as, the one its admission policy names too.
#[test]
fn copyrator_is_told_the_username_it_runs_as() {
    let docs = render("demo", "platform-system", &[]);
    let pod = &find(&docs, "Deployment")["spec"]["template"]["spec"];
    let user = format!(
        "system:serviceaccount:platform-system:{}",
        pod["serviceAccountName"].as_str().unwrap()
    );
    let args = pod["containers"][0]["args"].to_string();
    assert!(args.contains(&format!("--own-username={user}")), "{args}");
}

#[test]
fn rendered_webhooks_fail_open_but_for_read_only_updates_fast_and_skip_dry_runs() {
    let docs = render("demo", "platform-system", &[]);
    let vwc = find(&docs, "ValidatingWebhookConfiguration");
    let mwc = find(&docs, "MutatingWebhookConfiguration");
    let hooks: Vec<&Value> = vwc["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .chain(mwc["webhooks"].as_array().unwrap())
        .collect();
    assert_eq!(hooks.len(), 6);
    for h in hooks {
        // Only copyrator may change a read-only copy: while it cannot answer, no one may
        // (SPEC §4 item 11). Everything else goes on without copyrator.
        let failure_policy = match h["name"].as_str() {
            Some("read-only-updates.copyrator.io") => "Fail",
            _ => "Ignore",
        };
        assert_eq!(h["failurePolicy"], failure_policy, "{h}");
        // The read-only webhooks queue nothing: a dryRun edit is judged like the edit.
        let side_effects = match h["name"].as_str() {
            Some("read-only.copyrator.io" | "read-only-updates.copyrator.io") => "None",
            _ => "NoneOnDryRun",
        };
        assert_eq!(h["sideEffects"], side_effects, "{h}");
        let timeout = h["timeoutSeconds"].as_u64().unwrap();
        assert!((1..=5).contains(&timeout), "{h}");
        assert_eq!(h["clientConfig"]["service"]["port"], 443);
        assert_eq!(h["clientConfig"]["service"]["name"], "demo-copyrator");
        // Its own namespace is left out, but for the sources webhook: the chart trusts the
        // sources there, and their changes must arrive at once.
        let excluded = if h["name"] == "sources.copyrator.io" {
            json!(["kube-system"])
        } else {
            json!(["kube-system", "platform-system"])
        };
        assert_eq!(
            h["namespaceSelector"]["matchExpressions"][0]["values"], excluded,
            "{h}"
        );
    }
}

/// By default copyrator issues its own certificate (SPEC §6.4): the chart renders the Secret
/// empty and marked as copyrator's, the webhooks without a caBundle, and copyrator's flags for
/// the Service's names — nothing random, so every render is the same (Argo CD, `helm
/// template`), and the ClusterRole may touch copyrator's own webhook configurations only.
#[test]
fn copyrators_own_certificates_render_the_same_every_time() {
    let docs = render("demo", "platform-system", &[]);
    assert_eq!(
        docs,
        render("demo", "platform-system", &[]),
        "a second render is identical"
    );
    let secret = find(&docs, "Secret");
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(secret["metadata"]["name"], "demo-copyrator-webhook-certs");
    assert_eq!(
        secret["metadata"]["annotations"]["copyrator.io/certificates"],
        "managed"
    );
    assert!(secret.get("data").is_none(), "no data: {secret}");
    let vwc = find(&docs, "ValidatingWebhookConfiguration");
    let mwc = find(&docs, "MutatingWebhookConfiguration");
    for h in vwc["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .chain(mwc["webhooks"].as_array().unwrap())
    {
        assert!(
            h["clientConfig"].get("caBundle").is_none(),
            "copyrator sets the caBundle, Helm leaves it: {h}"
        );
    }
    let pod = &find(&docs, "Deployment")["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let args: Vec<String> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert_serve_accepts(&args);
    for expected in [
        "--tls-secret=demo-copyrator-webhook-certs",
        "--tls-secret-namespace=$(POD_NAMESPACE)",
        "--tls-dns-names=demo-copyrator,demo-copyrator.platform-system,demo-copyrator.platform-system.svc,demo-copyrator.platform-system.svc.cluster.local",
        "--webhook-configuration=demo-copyrator",
        "--ca-validity=8760h",
        "--cert-validity=2160h",
    ] {
        assert!(
            args.iter().any(|a| a == expected),
            "{expected} not in {args:?}"
        );
    }
    assert!(!args.iter().any(|a| a.starts_with("--tls-cert")));
    assert!(c.get("volumeMounts").is_none() && pod.get("volumes").is_none());

    let role = find_named(&docs, "ClusterRole", "demo-copyrator");
    let webhook_rules: Vec<&Value> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["apiGroups"] == json!(["admissionregistration.k8s.io"]))
        .collect();
    assert_eq!(webhook_rules.len(), 2, "get and patch");
    for r in webhook_rules {
        assert_eq!(r["resourceNames"], json!(["demo-copyrator"]));
    }

    // cert-manager or your own Secret: no such rules, and the pair is mounted.
    let managed = render(
        "demo",
        "platform-system",
        &["--set", "certManager.enabled=true"],
    );
    let role = find_named(&managed, "ClusterRole", "demo-copyrator");
    assert!(
        !role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["apiGroups"] == json!(["admissionregistration.k8s.io"]))
    );
    let pod = &find(&managed, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"],
        json!([{"name": "tls", "secret": {"secretName": "demo-copyrator-tls"}}])
    );
}

#[test]
fn cert_manager_mode_issues_the_same_secret_and_injects_the_ca() {
    let docs = render(
        "demo",
        "platform-system",
        &["--set", "certManager.enabled=true"],
    );
    assert!(
        find_all(&docs, "Secret").is_empty(),
        "cert-manager writes the Secret"
    );
    let issuer = find(&docs, "Issuer");
    assert_eq!(issuer["apiVersion"], "cert-manager.io/v1");
    assert_eq!(issuer["spec"], json!({"selfSigned": {}}));
    let cert = find(&docs, "Certificate");
    assert_eq!(cert["spec"]["secretName"], "demo-copyrator-tls");
    assert_eq!(
        cert["spec"]["issuerRef"]["name"],
        issuer["metadata"]["name"]
    );
    assert_eq!(
        cert["spec"]["dnsNames"],
        json!([
            "demo-copyrator",
            "demo-copyrator.platform-system",
            "demo-copyrator.platform-system.svc",
            "demo-copyrator.platform-system.svc.cluster.local"
        ])
    );
    let deployment = find(&docs, "Deployment");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"],
        "demo-copyrator-tls"
    );

    let vwc = find(&docs, "ValidatingWebhookConfiguration");
    assert_eq!(
        vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        format!(
            "platform-system/{}",
            cert["metadata"]["name"].as_str().unwrap()
        )
    );
    // Apart from the CA, which cert-manager fills in, the same webhooks as the binary's.
    let (validating, mutating) = binary_webhooks(
        "platform-system/demo-copyrator",
        "demo-copyrator",
        b"-",
        3,
        "kube-system",
    );
    for mut expected in [validating, mutating] {
        let rendered = find(&docs, expected["kind"].as_str().unwrap());
        assert_eq!(
            rendered["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        );
        for h in expected["webhooks"].as_array_mut().unwrap() {
            h["clientConfig"]
                .as_object_mut()
                .unwrap()
                .remove("caBundle");
        }
        assert_eq!(rendered["webhooks"], expected["webhooks"]);
        assert_eq!(rendered["metadata"]["name"], expected["metadata"]["name"]);
    }
}

#[test]
fn deployment_runs_two_hardened_replicas_with_probes() {
    let docs = render("demo", "platform-system", &[]);
    let deployment = find(&docs, "Deployment");
    assert_eq!(deployment["metadata"]["namespace"], "platform-system");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "demo-copyrator");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let anti =
        &pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(
        anti["podAffinityTerm"]["topologyKey"],
        "kubernetes.io/hostname"
    );
    assert_eq!(
        anti["podAffinityTerm"]["labelSelector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );

    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(
        c["image"], "ghcr.io/copyrator/copyrator:0.1.0",
        "default tag: appVersion"
    );
    let sc = &c["securityContext"];
    assert_eq!(sc["runAsNonRoot"], true);
    // The pod's user and group apply: the container does not repeat them, so that one
    // value drops them (OpenShift assigns its own).
    assert!(
        sc.get("runAsUser").is_none() && sc.get("runAsGroup").is_none(),
        "{sc}"
    );
    assert_eq!(pod["securityContext"]["runAsGroup"], 65532);
    assert_eq!(pod["securityContext"]["fsGroup"], 65532);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");

    let port = |name: &str| {
        c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("container port {name}"))["containerPort"]
            .clone()
    };
    assert_eq!(port("webhook"), 8443);
    assert_eq!(port("http"), 9090);
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({"path": "/livez", "port": "http"})
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "http"})
    );
    assert_eq!(
        c["resources"],
        json!({"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}})
    );

    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args[0], "serve");
    assert_serve_accepts(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>());
    for expected in [
        "--tls-secret=demo-copyrator-webhook-certs",
        "--lease-namespace=$(POD_NAMESPACE)",
        "--lease-name=demo-copyrator",
        "--log-format=json",
    ] {
        assert!(args.contains(&expected), "{expected} not in {args:?}");
    }
    let env = c["env"].as_array().unwrap();
    for (name, field) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        let var = env
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("env {name}"));
        assert_eq!(var["valueFrom"]["fieldRef"]["fieldPath"], field);
    }
    let pdb = find(&docs, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );

    let single = render("demo", "platform-system", &["--set", "replicas=1"]);
    assert!(
        find_all(&single, "PodDisruptionBudget").is_empty(),
        "one replica with minAvailable 1 would block node drains"
    );

    let service = find(&docs, "Service");
    assert_eq!(service["metadata"]["name"], "demo-copyrator");
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    let ports = service["spec"]["ports"].as_array().unwrap();
    let svc_port = |name: &str| {
        ports
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("service port {name}"))
    };
    assert_eq!(svc_port("webhook")["port"], 443);
    assert_eq!(svc_port("webhook")["targetPort"], "webhook");
    assert_eq!(svc_port("metrics")["port"], 9090);
    assert_eq!(svc_port("metrics")["targetPort"], "http");

    let sa = find(&docs, "ServiceAccount");
    assert_eq!(sa["metadata"]["name"], "demo-copyrator");
    assert_eq!(
        kinds(&docs),
        [
            "ClusterRole",
            "ClusterRoleBinding",
            // crds.enabled: the CopyRule, NamespacedCopyRule and HubLink CRDs.
            "CustomResourceDefinition",
            "Deployment",
            "MutatingWebhookConfiguration",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Secret",
            "Service",
            "ServiceAccount",
            // Helm renders for Kubernetes >= 1.30 without a cluster: the admission policy on
            // copyrator's ServiceAccount (tests/e2e/helm_chart/admission_policy.rs).
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingWebhookConfiguration",
        ]
        .into_iter()
        .map(String::from)
        .collect::<BTreeSet<_>>()
    );
}

#[test]
fn values_become_serve_flags_that_copyrator_accepts() {
    let docs = render(
        "demo",
        "platform-system",
        &[
            "--set",
            "replicas=3",
            "--set",
            "image.tag=v9.9.9",
            "--set",
            "resyncInterval=30s",
            "--set",
            "workers=8",
            "--set",
            "excludeNamespaces={kube-system,sandbox}",
            "--set",
            "logLevel=debug",
            "--set",
            "apiQps=50.5",
            "--set",
            "apiBurst=100",
            "--set",
            "leaseDuration=20s",
            "--set",
            "fanoutConcurrency=16",
            "--set",
            "trustedNamespaces={platform,team-*}",
            "--set",
            "webhook.clientCAConfigMap=apiserver-webhook-client-ca",
            "--set",
            "defaultCAs.configMap=debian-ca-certificates",
        ],
    );
    let deployment = find(&docs, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 3);
    let c = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "ghcr.io/copyrator/copyrator:v9.9.9");
    let args: Vec<String> = serde_json::from_value(c["args"].clone()).unwrap();
    for expected in [
        "--resync-interval=30s",
        "--workers=8",
        "--exclude-namespaces=kube-system,sandbox",
        "--log-level=debug",
        "--api-qps=50.5",
        "--api-burst=100",
        "--lease-duration=20s",
        "--fanout-concurrency=16",
        "--trusted-namespaces=platform,team-*",
        "--client-ca=/client-ca/ca.crt",
        "--default-cas-file=/default-cas/ca-certificates.crt",
    ] {
        assert!(
            args.iter().any(|a| a == expected),
            "{expected} not in {args:?}"
        );
    }

    assert_serve_accepts(&args);
    let volumes = &deployment["spec"]["template"]["spec"]["volumes"];
    assert!(
        volumes
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["configMap"]["name"] == "apiserver-webhook-client-ca"),
        "{volumes}"
    );
    // The default CAs' ConfigMap, mounted where --default-cas-file reads it.
    let volume = volumes
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["configMap"]["name"] == "debian-ca-certificates")
        .unwrap_or_else(|| panic!("{volumes}"));
    let mounts = c["volumeMounts"].as_array().unwrap();
    assert!(
        mounts
            .iter()
            .any(|m| m["name"] == volume["name"] && m["mountPath"] == "/default-cas"),
        "{mounts:?}"
    );
}

/// SPEC §9.1: the chart trusts its own namespace unless told otherwise, and ships roles for
/// people who manage or read CopyRules.
#[test]
fn chart_trusts_its_namespace_and_ships_copyrule_roles_for_people() {
    let docs = render("demo", "platform-system", &[]);
    let args: Vec<String> = serde_json::from_value(
        find(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"].clone(),
    )
    .unwrap();
    assert!(
        args.iter()
            .any(|a| a == "--trusted-namespaces=platform-system"),
        "{args:?}"
    );
    let all = render(
        "demo",
        "platform-system",
        &["--set", "trustedNamespaces={*}"],
    );
    let args = all
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .map(|d| d["spec"]["template"]["spec"]["containers"][0]["args"].to_string())
        .unwrap();
    assert!(args.contains("--trusted-namespaces=*"), "{args}");

    let admin = find_named(&docs, "ClusterRole", "demo-copyrator-admin");
    assert_eq!(
        rule_set(&rules_of(admin)),
        RuleSet::from([
            rule(
                &["copyrator.io"],
                &["copyrules"],
                &[],
                &[
                    "get",
                    "list",
                    "watch",
                    "create",
                    "update",
                    "patch",
                    "delete",
                    "deletecollection"
                ]
            ),
            rule(&["copyrator.io"], &["copyrules/status"], &[], &["get"]),
        ])
    );
    let labels = admin["metadata"]["labels"].as_object().unwrap();
    assert!(
        !labels
            .keys()
            .any(|k| k.starts_with("rbac.authorization.k8s.io/aggregate-to")),
        "creating CopyRules must never come with the built-in admin or edit roles"
    );
    let view = find_named(&docs, "ClusterRole", "demo-copyrator-view");
    for role in ["view", "edit", "admin"] {
        assert_eq!(
            view["metadata"]["labels"][format!("rbac.authorization.k8s.io/aggregate-to-{role}")],
            "true"
        );
    }
    assert_eq!(
        rule_set(&rules_of(view)),
        RuleSet::from([rule(
            &["copyrator.io"],
            &["copyrules", "copyrules/status"],
            &[],
            &["get", "list", "watch"]
        )])
    );
    // A namespace's own rules come with editing the namespace (they copy out of it only,
    // where they are accepted), and are read with view.
    let edit = find_named(&docs, "ClusterRole", "demo-copyrator-namespaced-edit");
    assert_eq!(
        rule_set(&rules_of(edit)),
        RuleSet::from([rule(
            &["copyrator.io"],
            &["namespacedcopyrules"],
            &[],
            &[
                "get",
                "list",
                "watch",
                "create",
                "update",
                "patch",
                "delete",
                "deletecollection"
            ]
        )])
    );
    for (role, aggregated) in [("view", false), ("edit", true), ("admin", true)] {
        let label =
            &edit["metadata"]["labels"][format!("rbac.authorization.k8s.io/aggregate-to-{role}")];
        assert_eq!(label == "true", aggregated, "aggregated into {role}");
    }
    let namespaced_view = find_named(&docs, "ClusterRole", "demo-copyrator-namespaced-view");
    assert_eq!(
        namespaced_view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"],
        "true"
    );
    let without = render(
        "demo",
        "platform-system",
        &["--set", "rbac.userRoles=false"],
    );
    assert_eq!(find_all(&without, "ClusterRole").len(), 1);
}

#[test]
fn rbac_grants_exactly_what_copyrator_uses() {
    let docs = render("demo", "platform-system", &[]);
    let cluster_role = find_named(&docs, "ClusterRole", "demo-copyrator");
    let cluster_rules = rule_set(&rules_of(cluster_role));
    assert_eq!(cluster_rules, expected_cluster_rules("demo-copyrator"));
    assert_least_privilege(&cluster_rules);

    let role = find(&docs, "Role");
    assert_eq!(role["metadata"]["namespace"], "platform-system");
    let lease_rules = rule_set(&rules_of(role));
    assert_eq!(lease_rules, expected_lease_rules("demo-copyrator"));
    assert_least_privilege(&lease_rules);

    let subject = json!([{"kind": "ServiceAccount", "name": "demo-copyrator", "namespace": "platform-system"}]);
    let crb = find(&docs, "ClusterRoleBinding");
    assert_eq!(crb["subjects"], subject);
    assert_eq!(crb["roleRef"]["kind"], "ClusterRole");
    assert_eq!(crb["roleRef"]["name"], cluster_role["metadata"]["name"]);
    let rb = find(&docs, "RoleBinding");
    assert_eq!(rb["subjects"], subject);
    assert_eq!(rb["roleRef"]["kind"], "Role");
    assert_eq!(rb["roleRef"]["name"], role["metadata"]["name"]);
}

#[test]
fn values_schema_rejects_bad_values_naming_the_field() {
    let chart = chart_dir().display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("replicas: \"two\"\n", "/replicas", "want integer"),
        ("replicas: 0\n", "/replicas", "minimum"),
        (
            "webhook:\n  timeoutSeconds: 30\n",
            "/webhook/timeoutSeconds",
            "maximum",
        ),
        ("replicaCount: 2\n", "replicaCount", "not allowed"),
        (
            "image:\n  tag: latest\n  registy: ghcr.io\n",
            "registy",
            "not allowed",
        ),
        ("logLevel: loud\n", "/logLevel", "one of"),
        ("logFormat: xml\n", "/logFormat", "one of"),
        ("resyncInterval: 5d\n", "/resyncInterval", "pattern"),
        (
            "certManager:\n  enabled: \"yes\"\n",
            "/certManager/enabled",
            "want boolean",
        ),
        (
            "admissionPolicy:\n  enabled: \"yes\"\n",
            "/admissionPolicy/enabled",
            "one of",
        ),
    ];
    for (i, (values, field, complaint)) in cases.iter().enumerate() {
        let file = dir.path().join(format!("bad-{i}.yaml"));
        std::fs::write(&file, values).unwrap();
        let file = file.display().to_string();
        for args in [
            vec![
                "template",
                &chart,
                "--release",
                "r",
                "--namespace",
                "n",
                "-f",
                &file,
            ],
            vec!["lint", &chart, "-f", &file],
        ] {
            let out = helm(&args);
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                !out.status.success(),
                "{} accepted {values:?}:\n{said}",
                args[0]
            );
            assert!(
                said.contains(field) && said.contains(complaint),
                "{} rejected {values:?} without naming {field} ({complaint}):\n{said}",
                args[0]
            );
        }
    }
    // A values file within bounds is accepted.
    let good = dir.path().join("good.yaml");
    std::fs::write(
        &good,
        "replicas: 3\nwebhook:\n  timeoutSeconds: 5\n  excludeNamespaces: [kube-system, monitoring]\n\
         podDisruptionBudget:\n  minAvailable: 50%\nlogFormat: text\nlogLevel: warn\n\
         apiQps: 0\nresyncInterval: 1500ms\nextraEnv:\n  - name: COPYRATOR_QUEUE_CAPACITY\n    value: \"500\"\n",
    )
    .unwrap();
    let docs = render("r", "n", &["-f", &good.display().to_string()]);
    assert_eq!(find(&docs, "Deployment")["spec"]["replicas"], 3);
    assert_eq!(
        find(&docs, "PodDisruptionBudget")["spec"]["minAvailable"],
        "50%"
    );
}

#[test]
fn notes_tell_how_to_opt_a_namespace_in() {
    let chart = chart_dir().display().to_string();
    let notes = helm_ok(&[
        "template",
        &chart,
        "--release",
        "demo",
        "--namespace",
        "platform-system",
        "--notes",
    ]);
    for expected in [
        "kubectl -n platform-system rollout status deployment/demo-copyrator",
        "label secret registry-cred copyrator.io/source=true",
        "annotate secret registry-cred copyrator.io/namespace-selector=registry=enabled",
        "kubectl label namespace team-a registry=enabled",
        "kubectl -n platform-system create secret generic registry-cred",
        "sourceNamespace: platform-system",
        "one, which refuses edits of read-only copies while copyrator is down",
        "kind: CopyRule",
        "kubectl get copyrules",
    ] {
        assert!(
            notes.contains(expected),
            "NOTES.txt lacks {expected:?}:\n{notes}"
        );
    }
}

#[test]
fn notes_say_when_anyone_can_reach_the_webhook_port() {
    let notes = |values: &[&str]| {
        let chart = chart_dir().display().to_string();
        let mut args = vec![
            "template",
            &chart,
            "--release",
            "demo",
            "--namespace",
            "platform-system",
            "--notes",
        ];
        args.extend_from_slice(values);
        helm_ok(&args)
    };
    let open = "takes AdmissionReviews from anyone who can reach it";
    for values in [
        &[][..],
        &["--set", "networkPolicy.enabled=true"],
        // Policies do not apply to pods on the node's network.
        &[
            "--set",
            "hostNetwork=true",
            "--set",
            "webhook.port=9443",
            "--set",
            "networkPolicy.enabled=true",
            "--set-json",
            r#"networkPolicy.webhookFrom=[{"ipBlock": {"cidr": "10.0.0.0/28"}}]"#,
        ],
    ] {
        let said = notes(values);
        assert!(said.contains(open), "{values:?}:\n{said}");
        assert!(
            said.contains("webhook.clientCAConfigMap")
                && said.contains("networkPolicy.controlPlaneCIDRs"),
            "{said}"
        );
    }
    for values in [
        &["--set", "webhook.clientCAConfigMap=apiserver-webhook-ca"][..],
        &[
            "--set-json",
            r#"networkPolicy.controlPlaneCIDRs=["10.0.0.0/28"]"#,
        ],
    ] {
        let said = notes(values);
        assert!(!said.contains(open), "{values:?}:\n{said}");
    }
}

// ---------------------------------------------------------------------------------------------
// Dockerfile

#[test]
fn dockerfile_passes_hadolint_and_ships_the_release_binary() {
    let hadolint = root().join(".venv/bin/hadolint");
    let out = Command::new(&hadolint)
        .arg(root().join("Dockerfile"))
        .output()
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/bootstrap.sh)", hadolint.display()));
    assert!(
        out.status.success(),
        "hadolint Dockerfile:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let instructions = dockerfile_instructions();
    let stages: Vec<usize> = instructions
        .iter()
        .enumerate()
        .filter(|(_, (op, _))| op == "FROM")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(stages.len(), 2, "multi-stage: a build and a runtime stage");
    let build = &instructions[stages[0]..stages[1]];
    let runtime = &instructions[stages[1]..];

    let (_, from) = &build[0];
    let (image, stage) = from.split_once(" AS ").expect("FROM ... AS build");
    assert!(image.starts_with("rust:"), "{image}");
    let workdir = build
        .iter()
        .filter(|(op, _)| op == "WORKDIR")
        .map(|(_, dir)| dir.as_str())
        .next_back()
        .expect("WORKDIR in the build stage");
    assert!(
        build
            .iter()
            .any(|(op, cmd)| op == "RUN" && cmd.ends_with("cargo build --release --locked")),
        "the build stage ends with `cargo build --release --locked`"
    );

    assert_eq!(runtime[0].1, "gcr.io/distroless/cc-debian12:nonroot");
    let bin = Path::new(env!("CARGO_BIN_EXE_copyrator"))
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    let copy = runtime
        .iter()
        .find(|(op, _)| op == "COPY")
        .map(|(_, args)| args.split_whitespace().collect::<Vec<_>>())
        .expect("COPY in the runtime stage");
    let from_stage = format!("--from={}", stage.trim());
    // What `cargo build --release` makes in the build stage's WORKDIR.
    let release_binary = format!("{}/target/release/{bin}", workdir.trim_end_matches('/'));
    assert_eq!(
        copy,
        [
            from_stage.as_str(),
            release_binary.as_str(),
            "/usr/local/bin/copyrator"
        ]
    );
    let last = |op: &str| {
        runtime
            .iter()
            .filter(|(o, _)| o == op)
            .map(|(_, a)| a.as_str())
            .next_back()
            .unwrap_or_else(|| panic!("{op} in the runtime stage"))
    };
    assert_eq!(last("USER"), "65532:65532");
    assert_eq!(last("ENTRYPOINT"), r#"["/usr/local/bin/copyrator"]"#);
    assert_eq!(last("CMD"), r#"["serve"]"#);
    assert_eq!(last("EXPOSE"), "8443 9090");

    // The chart runs the image as the same user, on the same ports.
    let docs = render("demo", "platform-system", &[]);
    let pod = &find(&docs, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    let ports: Vec<u64> = pod["containers"][0]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["containerPort"].as_u64().unwrap())
        .collect();
    assert_eq!(ports, [8443, 9090]);

    // The build context keeps what the build needs and leaves out the rest.
    let ignore = std::fs::read_to_string(root().join(".dockerignore")).unwrap();
    let ignored: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for must in ["target/", ".venv/", "certs/*"] {
        assert!(ignored.contains(&must), ".dockerignore lacks {must}");
    }
    for needed in [
        "src",
        "src/",
        "crates",
        "crates/",
        "benches",
        "benches/",
        "Cargo.toml",
        "Cargo.lock",
    ] {
        assert!(!ignored.contains(&needed), ".dockerignore drops {needed}");
    }
}

/// The Dockerfile's instructions, continuation lines joined and comments dropped, as
/// (INSTRUCTION, arguments).
fn dockerfile_instructions() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("\\\n", " ")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (op, rest) = l.trim().split_once(' ').unwrap_or((l.trim(), ""));
            (op.to_uppercase(), rest.trim().to_string())
        })
        .collect()
}

fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        }
    } else {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    }
}

/// No Docker engine runs here, so the Dockerfile's build stage is replayed as Docker would run
/// it: an empty WORKDIR, only what its COPY instructions take from the build context, its RUN
/// commands in order. It must end with the release binary the runtime stage copies. (Cargo's
/// target directory is kept under the repository's `target/`, as Docker keeps its layer cache,
/// so registry crates are built once; copyrator itself is rebuilt from the copied sources.)
#[test]
fn dockerfile_build_stage_builds_the_binary_from_its_own_context() {
    let instructions = dockerfile_instructions();
    let runtime_from = instructions
        .iter()
        .rposition(|(op, _)| op == "FROM")
        .unwrap();
    let build = &instructions[..runtime_from];
    let ignored: Vec<String> = std::fs::read_to_string(root().join(".dockerignore"))
        .unwrap()
        .lines()
        .map(|l| l.trim().trim_end_matches('/').to_string())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();

    let context = tempfile::tempdir().unwrap();
    let workdir = context.path().join("app");
    std::fs::create_dir_all(&workdir).unwrap();
    let cache = root().join("target/dockerfile-build");
    std::fs::create_dir_all(&cache).unwrap();
    std::os::unix::fs::symlink(&cache, workdir.join("target")).unwrap();
    let started = std::time::SystemTime::now();
    for (op, args) in build {
        match op.as_str() {
            "FROM" | "WORKDIR" => {}
            "COPY" => {
                let parts: Vec<&str> = args.split_whitespace().collect();
                let (dest, sources) = parts.split_last().unwrap();
                for src in sources {
                    assert!(
                        !ignored.iter().any(|i| i == src),
                        ".dockerignore drops {src}, which the build stage copies"
                    );
                    let target = if dest.ends_with('/') || *dest == "." || sources.len() > 1 {
                        workdir.join(dest).join(Path::new(src).file_name().unwrap())
                    } else {
                        workdir.join(dest)
                    };
                    copy_tree(&root().join(src), &target);
                }
            }
            "RUN" => {
                let out = Command::new("sh")
                    .args(["-c", args])
                    .current_dir(&workdir)
                    .env_remove("CARGO_TARGET_DIR")
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "RUN {args}\n{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            other => panic!("build stage: unexpected {other} {args}"),
        }
    }
    let binary = workdir.join("target/release/copyrator");
    let modified = std::fs::metadata(&binary).unwrap().modified().unwrap();
    assert!(modified >= started, "{} was not rebuilt", binary.display());
    let out = Command::new(&binary).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for command in ["serve", "certs", "manifests"] {
        assert!(help.contains(command), "{command} missing from:\n{help}");
    }
}

// ---------------------------------------------------------------------------------------------
// Against the test API server

#[tokio::test]
async fn helm_install_creates_a_working_setup_and_uninstall_removes_it() {
    let env = TestEnv::new().await;
    let ns = env.namespace("helm", &[]).await;
    let name = format!("r{}", env.id);
    let fullname = format!("{name}-copyrator");
    let mut release = Release::install(&name, &ns, &[]);

    let installed = Installed::read(&env.client, &ns, &fullname).await;
    assert_eq!(
        installed.present().len(),
        11,
        "installed: {:?}",
        installed.present()
    );

    // The webhook configuration is the binary's, trusting the CA stored in the TLS Secret.
    let vwc = serde_json::to_value(installed.vwc.as_ref().unwrap()).unwrap();
    let mwc = serde_json::to_value(installed.mwc.as_ref().unwrap()).unwrap();
    let (validating, mutating) = binary_webhooks(
        &format!("{ns}/{fullname}"),
        &fullname,
        &installed.ca(),
        3,
        "kube-system",
    );
    assert_contains(&vwc, &validating, "ValidatingWebhookConfiguration");
    assert_contains(&mwc, &mutating, "MutatingWebhookConfiguration");

    let cluster_rules = rule_set(
        &installed
            .cluster_role
            .as_ref()
            .unwrap()
            .rules
            .clone()
            .unwrap(),
    );
    assert_eq!(cluster_rules, expected_cluster_rules(&fullname));
    let lease_rules = rule_set(&installed.role.as_ref().unwrap().rules.clone().unwrap());
    assert_eq!(lease_rules, expected_lease_rules(&fullname));
    let subjects = installed
        .cluster_role_binding
        .as_ref()
        .unwrap()
        .subjects
        .clone()
        .unwrap();
    assert_eq!(
        (subjects[0].kind.as_str(), subjects[0].name.as_str()),
        ("ServiceAccount", fullname.as_str())
    );
    assert_eq!(subjects[0].namespace.as_deref(), Some(ns.as_str()));

    let deployment = installed.deployment.as_ref().unwrap();
    let spec = &deployment.spec;
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some(fullname.as_str()));
    let svc = installed.service.as_ref().unwrap().spec.as_ref().unwrap();
    assert_eq!(svc.selector, spec.selector.match_labels);
    let ports: Vec<(i32, String)> = svc
        .ports
        .as_ref()
        .unwrap()
        .iter()
        .map(|p| {
            let target = match p.target_port.as_ref().unwrap() {
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s.clone(),
                other => format!("{other:?}"),
            };
            (p.port, target)
        })
        .collect();
    assert_eq!(ports, [(443, "webhook".into()), (9090, "http".into())]);
    // copyrator's own certificates: an empty Secret for it to fill (nothing runs here).
    assert_eq!(
        installed.tls.as_ref().unwrap().type_.as_deref(),
        Some("Opaque")
    );
    let pdb = installed.pdb.as_ref().unwrap();
    assert_eq!(pdb.data["spec"]["minAvailable"], 1);

    // The CopyRule CRD is served (the harness applied it; this release leaves it to others).
    let crd = Api::<CustomResourceDefinition>::all(env.client.clone())
        .get("copyrules.copyrator.io")
        .await
        .unwrap();
    assert!(
        crd.spec
            .versions
            .iter()
            .any(|v| v.name == "v1alpha1" && v.served)
    );

    release.uninstall();
    let after = Installed::read(&env.client, &ns, &fullname).await;
    assert!(
        after.present().is_empty(),
        "left behind by helm uninstall: {:?}",
        after.present()
    );
    assert!(
        Api::<CustomResourceDefinition>::all(env.client.clone())
            .get_opt("copyrules.copyrator.io")
            .await
            .unwrap()
            .is_some(),
        "a release without crds.enabled leaves the CRDs alone"
    );
    env.cleanup().await;
}

/// copyrator (this build, out of cluster) running as the chart's ServiceAccount with the
/// chart's certificate flags: the honest test that the ClusterRole and Role grant enough,
/// and that copyrator's own certificate works with the chart — issued into the chart's Secret,
/// published into the chart's webhooks, verifiable for the Service's name, and kept as it is
/// by `helm upgrade`. No webhook call reaches it (the Service has no endpoints here): the
/// startup and periodic resyncs do all the work.
#[tokio::test]
async fn copyrator_does_its_job_under_the_charts_service_account() {
    let env = TestEnv::new().await;
    let ns = env.namespace("helm-rbac", &[]).await;
    let name = format!("p{}", env.id);
    let fullname = format!("{name}-copyrator");
    let mut release = Release::install(&name, &ns, &[]);

    // Work that needs every permission: an inline-rule Secret (list namespaces, get/list/
    // create secrets), a same-name Secret it must not touch (create events), a CopyRule naming
    // a ConfigMap (list copyrules, patch the source's label, patch the rule's status).
    let opt_in = ("helm-rbac-test", env.id.as_str());
    let source_ns = env.namespace("helm-src", &[]).await;
    let target_ns = env.namespace("helm-dst", &[opt_in]).await;
    let conflict_ns = env.namespace("helm-conflict", &[opt_in]).await;
    let selector = format!("{}={}", opt_in.0, opt_in.1);
    let create = PostParams::default();
    env.secrets(&source_ns)
        .create(
            &create,
            &common::secret(
                "shared",
                &[("copyrator.io/source", "true")],
                &[("copyrator.io/namespace-selector", selector.as_str())],
                &[("k", "v")],
            ),
        )
        .await
        .unwrap();
    env.secrets(&conflict_ns)
        .create(
            &create,
            &common::secret("shared", &[], &[], &[("someone", "else")]),
        )
        .await
        .unwrap();
    env.config_maps(&source_ns)
        .create(
            &create,
            &common::config_map("settings", &[], &[], &[("a", "b")]),
        )
        .await
        .unwrap();
    let rule_name = format!("helm-rbac-{}", env.id);
    let rule: CopyRule = serde_json::from_value(json!({
        "apiVersion": "copyrator.io/v1alpha1",
        "kind": "CopyRule",
        "metadata": {"name": rule_name},
        "spec": {
            "kind": "ConfigMap",
            "sourceNamespace": source_ns,
            "sourceName": "settings",
            "namespaces": [target_ns],
        }
    }))
    .unwrap();
    env.rules().create(&create, &rule).await.unwrap();
    env.track_copy_rule(&rule_name);

    let token = service_account_token(&env.client, &ns, &fullname).await;
    // The API server authorizes from caches of the RBAC objects, filled by watches of their
    // own: a binding helm just made can be missing from them for a moment. This test is about
    // what the chart grants, so it starts copyrator once both kinds of binding are seen.
    authorized(
        &env.client,
        &ns,
        &fullname,
        ("list", "", "secrets", None, None),
    )
    .await;
    authorized(
        &env.client,
        &ns,
        &fullname,
        (
            "get",
            "coordination.k8s.io",
            "leases",
            Some(&ns),
            Some(&fullname),
        ),
    )
    .await;
    // The source namespace is trusted, as the chart's trustedNamespaces value would say.
    let mut copyrator = copyrator_as(&token, &ns, &fullname, &source_ns);
    copyrator.wait_ready().await;

    // Issued into the chart's Secret, published into every webhook of the release.
    let installed = Installed::read(&env.client, &ns, &fullname).await;
    let bundle = installed.ca();
    assert!(!bundle.is_empty(), "copyrator filled the Secret");
    let hooks = |i: &Installed| {
        let v = i.vwc.as_ref().unwrap().webhooks.clone().unwrap();
        let m = i.mwc.as_ref().unwrap().webhooks.clone().unwrap();
        v.into_iter()
            .map(|h| (h.name, h.timeout_seconds, h.client_config))
            .chain(
                m.into_iter()
                    .map(|h| (h.name, h.timeout_seconds, h.client_config)),
            )
            .collect::<Vec<_>>()
    };
    for (hook, _, client_config) in hooks(&installed) {
        assert_eq!(
            client_config.ca_bundle.map(|b| b.0),
            Some(bundle.clone()),
            "webhook {hook} trusts the CA in the Secret"
        );
    }

    // The API server dials `<service>.<namespace>.svc` and checks the certificate against the
    // caBundle: copyrator's certificate passes that check.
    let ca = temp_file(&bundle);
    let host = format!("{fullname}.{ns}.svc");
    let handshake = openssl(&[
        "s_client",
        "-connect",
        &format!("127.0.0.1:{}", copyrator.webhook_port),
        "-servername",
        &host,
        "-verify_hostname",
        &host,
        "-CAfile",
        &ca.path().display().to_string(),
        "-verify_return_error",
        "-brief",
    ]);
    assert!(handshake.contains("Verification: OK"), "{handshake}");

    // Leader election in the release namespace, on the chart's Lease.
    let holder = eventually(Duration::from_secs(20), "the Lease held", || async {
        Api::<Lease>::namespaced(env.client.clone(), &ns)
            .get_opt(&fullname)
            .await
            .ok()??
            .spec?
            .holder_identity
            .filter(|h| !h.is_empty())
    })
    .await;
    assert!(holder.starts_with(&fullname), "{holder}");

    env.wait_for::<Secret>(&target_ns, "shared", "the inline-rule copy", |_| true)
        .await;
    env.wait_for_any::<Event>(&source_ns, "a CopyConflict Event", |e| {
        e.reason.as_deref() == Some("CopyConflict")
    })
    .await;
    env.wait_for::<ConfigMap>(&target_ns, "settings", "the CopyRule's copy", |_| true)
        .await;
    env.wait_for::<ConfigMap>(&source_ns, "settings", "labelled as a source", |cm| {
        cm.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("copyrator.io/source"))
            .is_some_and(|v| v == "true")
    })
    .await;
    env.wait_for::<CopyRule>("", &rule_name, "the CopyRule's status", |r| {
        r.status.as_ref().is_some_and(|s| s.synced_copies >= 1)
    })
    .await;

    let metrics = copyrator.metrics().await;
    assert_eq!(
        common::metric_value(&metrics, "copyrator_api_errors_total{code=\"403\"}"),
        0.0,
        "{metrics}"
    );
    let logs = copyrator.logs();
    assert!(
        !logs.to_lowercase().contains("forbidden"),
        "copyrator was refused something under the chart's RBAC:\n{logs}"
    );

    // `helm upgrade` changes the webhooks but keeps what copyrator wrote: the Secret's data
    // and every caBundle (the chart renders neither). copyrator looks again only in an hour
    // here (--cert-check-interval): nothing put them back.
    let secret_before = installed.tls.as_ref().unwrap().data.clone();
    let summary = release.upgrade(&["--set", "webhook.timeoutSeconds=2"]);
    assert_eq!(summary["status"], "deployed", "{summary}");
    let after = Installed::read(&env.client, &ns, &fullname).await;
    assert_eq!(after.tls.as_ref().unwrap().data, secret_before);
    for (hook, timeout, client_config) in hooks(&after) {
        assert_eq!(timeout, Some(2), "the upgrade was applied to {hook}");
        assert_eq!(
            client_config.ca_bundle.map(|b| b.0),
            Some(bundle.clone()),
            "webhook {hook} still trusts the same CA"
        );
    }
    let metrics = copyrator.metrics().await;
    assert_eq!(
        common::metric_value(
            &metrics,
            "copyrator_certificates_issued_total{certificate=\"ca\"}"
        ),
        1.0,
        "{metrics}"
    );

    drop(copyrator);
    release.uninstall();
    env.cleanup().await;
}

/// The copyrator binary running out of cluster as a ServiceAccount (its `token`), with the
/// certificate flags the chart renders (its own certificate in `<fullname>-webhook-certs`, the
/// CA published into the `<fullname>` webhook configurations), the chart's Lease and the Pod
/// name a replica of the release would have.
/// Waits until the API server's authorizer allows ServiceAccount `namespace/name` `verb` on
/// `(group, resource)` (in `in_ns`, of name `named`, when given), by SubjectAccessReview.
async fn authorized(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    (verb, group, resource, in_ns, named): (&str, &str, &str, Option<&str>, Option<&str>),
) {
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:{namespace}:{name}")),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                namespace: in_ns.map(str::to_string),
                name: named.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    eventually(
        Duration::from_secs(10),
        &format!("{verb} {resource} authorized for the chart's ServiceAccount"),
        || {
            let (reviews, review) = (reviews.clone(), review.clone());
            async move {
                let answer = reviews.create(&PostParams::default(), &review).await.ok()?;
                answer.status?.allowed.then_some(())
            }
        },
    )
    .await;
}

fn copyrator_as(token: &str, namespace: &str, fullname: &str, trusted_namespaces: &str) -> Process {
    let (dir, ca) = common::test_certs();
    let kubeconfig_file = dir.path().join("kubeconfig");
    write_token_kubeconfig(&common::kubeconfig(), token, &kubeconfig_file);
    let kubeconfig = format!("--kubeconfig={}", kubeconfig_file.display());
    let pod_name = format!("{fullname}-test-pod");
    let dns_names = format!(
        "{fullname},{fullname}.{namespace},{fullname}.{namespace}.svc,{fullname}.{namespace}.svc.cluster.local"
    );
    Process::spawn_with_env(
        dir,
        ca,
        &[
            &kubeconfig,
            &format!("--lease-namespace={namespace}"),
            &format!("--lease-name={fullname}"),
            &format!("--tls-secret={fullname}-webhook-certs"),
            &format!("--tls-secret-namespace={namespace}"),
            &format!("--tls-dns-names={dns_names}"),
            &format!("--webhook-configuration={fullname}"),
            "--cert-check-interval=1h",
            "--resync-interval=1s",
            &format!("--trusted-namespaces={trusted_namespaces}"),
            "--log-format=json",
        ],
        &[("POD_NAME", &pod_name)],
    )
}
