//! The chart's options, rendered (offline, and for Kubernetes 1.20 and 1.30) and linted:
//! ports, hostNetwork, security contexts, image digest, topology spread, NetworkPolicy and the
//! certificate modes. Included by tests/e2e/helm_chart.rs.

use serde_json::{Value, json};

use crate::helm_chart::support::{
    b64, chart_dir, find, find_all, helm, helm_ok, render, render_fails, render_for,
};

fn deployment_pod(docs: &[Value]) -> Value {
    find(docs, "Deployment")["spec"]["template"]["spec"].clone()
}

fn container_port(pod: &Value, name: &str) -> Value {
    pod["containers"][0]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("container port {name}"))["containerPort"]
        .clone()
}

fn args_of(pod: &Value) -> Vec<String> {
    serde_json::from_value(pod["containers"][0]["args"].clone()).unwrap()
}

/// A ready-made CA certificate in PEM.
fn some_ca_pem() -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_copyrator"))
        .args(["certs", "--out"])
        .arg(dir.path())
        .args(["--dns", "demo-copyrator.platform-system.svc"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    std::fs::read_to_string(dir.path().join("ca.crt")).unwrap()
}

#[test]
fn webhook_and_metrics_ports_move_the_containers_ports_not_the_services() {
    let docs = render(
        "demo",
        "platform-system",
        &[
            "--set",
            "webhook.port=10250",
            "--set",
            "metrics.port=9443",
            "--set",
            "networkPolicy.enabled=true",
        ],
    );
    let pod = deployment_pod(&docs);
    assert_eq!(container_port(&pod, "webhook"), 10250);
    assert_eq!(container_port(&pod, "http"), 9443);
    let args = args_of(&pod);
    for expected in ["--webhook-addr=0.0.0.0:10250", "--http-addr=0.0.0.0:9443"] {
        assert!(args.iter().any(|a| a == expected), "{expected} in {args:?}");
    }
    crate::helm_chart::assert_serve_accepts(&args);
    // The probes and the Service follow the ports by name; the API server still calls 443.
    assert_eq!(
        pod["containers"][0]["readinessProbe"]["httpGet"]["port"],
        "http"
    );
    let service = find(&docs, "Service");
    assert_eq!(
        service["spec"]["ports"],
        json!([
            {"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"},
            {"name": "metrics", "port": 9090, "targetPort": "http", "protocol": "TCP"},
        ])
    );
    for hook in find(&docs, "ValidatingWebhookConfiguration")["webhooks"]
        .as_array()
        .unwrap()
    {
        assert_eq!(hook["clientConfig"]["service"]["port"], 443);
    }
    let policy = find(&docs, "NetworkPolicy");
    let ports: Vec<&Value> = policy["spec"]["ingress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|rule| &rule["ports"][0]["port"])
        .collect();
    assert_eq!(ports, [&json!(10250), &json!(9443)]);

    render_fails(
        &["--set", "webhook.port=9090"],
        "webhook.port and metrics.port must differ",
    );
    render_fails(&["--set", "webhook.port=70000"], "/webhook/port");
}

#[test]
fn host_network_uses_cluster_dns_and_replaces_pods_without_surging() {
    let default = deployment_pod(&render("demo", "platform-system", &[]));
    assert!(default.get("hostNetwork").is_none(), "{default}");
    assert!(default.get("dnsPolicy").is_none());

    let docs = render(
        "demo",
        "platform-system",
        &["--set", "hostNetwork=true", "--set", "webhook.port=9443"],
    );
    let deployment = find(&docs, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
    // A surge pod would need a node whose webhook port is free: with two nodes and two
    // replicas there is none, and the rollout would hang.
    assert_eq!(
        deployment["spec"]["strategy"]["rollingUpdate"],
        json!({"maxSurge": 0, "maxUnavailable": 1})
    );
    assert_eq!(container_port(pod, "webhook"), 9443);

    render_fails(
        &["--set", "hostNetwork=true", "--set", "webhook.port=10250"],
        "kubelet or kube-proxy port",
    );
    render_fails(&["--set", "hostNetwork=yes"], "/hostNetwork");
}

#[test]
fn security_contexts_are_overridable_key_by_key() {
    // OpenShift's restricted SCC assigns the user and group itself.
    let docs = render(
        "demo",
        "platform-system",
        &[
            "--set",
            "podSecurityContext.runAsUser=null",
            "--set",
            "podSecurityContext.runAsGroup=null",
            "--set",
            "podSecurityContext.fsGroup=null",
            "--set",
            "securityContext.readOnlyRootFilesystem=false",
        ],
    );
    let pod = deployment_pod(&docs);
    assert_eq!(
        pod["securityContext"],
        json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}})
    );
    let container = &pod["containers"][0]["securityContext"];
    assert_eq!(container["readOnlyRootFilesystem"], false);
    assert_eq!(container["allowPrivilegeEscalation"], false);
    assert_eq!(container["capabilities"]["drop"], json!(["ALL"]));
    for key in ["runAsUser", "runAsGroup"] {
        assert!(container.get(key).is_none(), "{container}");
    }
}

#[test]
fn image_digest_wins_over_the_tag() {
    let digest = format!("sha256:{}", "ab".repeat(32));
    let docs = render(
        "demo",
        "platform-system",
        &[
            "--set",
            "image.tag=v9",
            "--set",
            &format!("image.digest={digest}"),
        ],
    );
    assert_eq!(
        deployment_pod(&docs)["containers"][0]["image"],
        format!("ghcr.io/copyrator/copyrator@{digest}")
    );
    render_fails(&["--set", "image.digest=latest"], "/image/digest");
}

#[test]
fn topology_spread_constraints_select_the_charts_pods_unless_told_otherwise() {
    let docs = render(
        "demo",
        "platform-system",
        &[
            "--set-json",
            r#"topologySpreadConstraints=[
                {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"},
                {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
                 "labelSelector": {"matchLabels": {"team": "platform"}}}]"#,
        ],
    );
    let deployment = find(&docs, "Deployment");
    let constraints = &deployment["spec"]["template"]["spec"]["topologySpreadConstraints"];
    assert_eq!(
        constraints[0],
        json!({
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": deployment["spec"]["selector"]["matchLabels"]},
        })
    );
    assert_eq!(
        constraints[1]["labelSelector"],
        json!({"matchLabels": {"team": "platform"}})
    );
    render_fails(
        &[
            "--set-json",
            r#"topologySpreadConstraints=[{"maxSkew": 1}]"#,
        ],
        "topologySpreadConstraints",
    );
}

#[test]
fn network_policy_opens_the_webhook_and_metrics_ports_to_their_peers_only() {
    assert!(find_all(&render("demo", "platform-system", &[]), "NetworkPolicy").is_empty());

    let docs = render(
        "demo",
        "platform-system",
        &["--set", "networkPolicy.enabled=true"],
    );
    let policy = find(&docs, "NetworkPolicy");
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"],
        find(&docs, "Deployment")["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    // No peers given: each port from anywhere (a rule without `from`), every other port
    // closed.
    assert_eq!(
        policy["spec"]["ingress"],
        json!([
            {"ports": [{"port": 8443, "protocol": "TCP"}]},
            {"ports": [{"port": 9090, "protocol": "TCP"}]},
        ])
    );

    let api_server = json!([{"ipBlock": {"cidr": "10.0.0.0/28"}}]);
    let prometheus = json!([{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }]);
    let egress =
        json!([{"ports": [{"port": 443, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]}]);
    let docs = render(
        "demo",
        "platform-system",
        &[
            "--set",
            "networkPolicy.enabled=true",
            "--set-json",
            &format!("networkPolicy.webhookFrom={api_server}"),
            "--set-json",
            &format!("networkPolicy.metricsFrom={prometheus}"),
            "--set-json",
            &format!("networkPolicy.egress={egress}"),
        ],
    );
    let spec = &find(&docs, "NetworkPolicy")["spec"];
    assert_eq!(spec["ingress"][0]["from"], api_server);
    assert_eq!(spec["ingress"][1]["from"], prometheus);
    assert_eq!(spec["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(spec["egress"], egress);

    render_fails(
        &[
            "--set-json",
            r#"networkPolicy.webhookFrom=[{"cidr": "10.0.0.0/8"}]"#,
        ],
        "networkPolicy/webhookFrom",
    );
}

#[test]
fn control_plane_cidrs_alone_close_the_webhook_port_to_everyone_else() {
    let docs = render(
        "demo",
        "platform-system",
        &[
            "--set-json",
            r#"networkPolicy.controlPlaneCIDRs=["10.0.0.0/28", "fd00::/64"]"#,
        ],
    );
    let spec = &find(&docs, "NetworkPolicy")["spec"];
    assert_eq!(
        spec["ingress"][0],
        json!({
            "ports": [{"port": 8443, "protocol": "TCP"}],
            "from": [
                {"ipBlock": {"cidr": "10.0.0.0/28"}},
                {"ipBlock": {"cidr": "fd00::/64"}},
            ],
        })
    );
    // The metrics port as configured: here from anywhere.
    assert_eq!(
        spec["ingress"][1],
        json!({"ports": [{"port": 9090, "protocol": "TCP"}]})
    );

    // With other peers: both.
    let docs = render(
        "demo",
        "platform-system",
        &[
            "--set",
            "networkPolicy.enabled=true",
            "--set-json",
            r#"networkPolicy.controlPlaneCIDRs=["10.0.0.0/28"]"#,
            "--set-json",
            r#"networkPolicy.webhookFrom=[{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "konnectivity"}}}]"#,
        ],
    );
    assert_eq!(
        find(&docs, "NetworkPolicy")["spec"]["ingress"][0]["from"],
        json!([
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "konnectivity"}}},
            {"ipBlock": {"cidr": "10.0.0.0/28"}},
        ])
    );

    render_fails(
        &[
            "--set-json",
            r#"networkPolicy.controlPlaneCIDRs=["10.0.0.1"]"#,
        ],
        "networkPolicy/controlPlaneCIDRs",
    );
    render_fails(
        &[
            "--set",
            "hostNetwork=true",
            "--set-json",
            r#"networkPolicy.controlPlaneCIDRs=["10.0.0.0/28"]"#,
        ],
        "has no effect with hostNetwork",
    );
}

/// The policy `controlPlaneCIDRs` renders is one the API server takes as it is.
#[tokio::test]
async fn the_api_server_takes_the_control_plane_policy() {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    use kube::{Api, api::PostParams};

    let env = crate::common::TestEnv::new().await;
    let ns = env.namespace("helm-netpol", &[]).await;
    let docs = render(
        "demo",
        &ns,
        &[
            "--set-json",
            r#"networkPolicy.controlPlaneCIDRs=["10.0.0.0/28", "fd00::/64"]"#,
        ],
    );
    let rendered = find(&docs, "NetworkPolicy");
    let policy: NetworkPolicy = serde_json::from_value(rendered.clone()).unwrap();
    let created = Api::<NetworkPolicy>::namespaced(env.client.clone(), &ns)
        .create(&PostParams::default(), &policy)
        .await
        .expect("the API server takes the rendered NetworkPolicy");
    crate::helm_chart::support::assert_contains(
        &serde_json::to_value(&created).unwrap()["spec"],
        &rendered["spec"],
        "NetworkPolicy.spec",
    );
    env.cleanup().await;
}

#[test]
fn cert_manager_can_sign_with_an_existing_issuer() {
    let docs = render(
        "demo",
        "platform-system",
        &[
            "--set",
            "certManager.enabled=true",
            "--set-json",
            r#"certManager.issuerRef={"name": "platform-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}"#,
        ],
    );
    assert!(
        find_all(&docs, "Issuer").is_empty(),
        "no self-signed Issuer"
    );
    assert!(find_all(&docs, "Secret").is_empty());
    let cert = find(&docs, "Certificate");
    assert_eq!(
        cert["spec"]["issuerRef"],
        json!({"name": "platform-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"})
    );
    assert_eq!(cert["spec"]["secretName"], "demo-copyrator-tls");
    assert_eq!(cert["spec"]["duration"], "2160h");
    assert_eq!(cert["spec"]["renewBefore"], "360h");
    assert_eq!(cert["spec"]["privateKey"]["rotationPolicy"], "Always");
    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        let config = find(&docs, kind);
        assert_eq!(
            config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            format!(
                "platform-system/{}",
                cert["metadata"]["name"].as_str().unwrap()
            )
        );
        for hook in config["webhooks"].as_array().unwrap() {
            assert!(hook["clientConfig"].get("caBundle").is_none(), "{hook}");
        }
    }
    render_fails(
        &[
            "--set",
            "certManager.enabled=true",
            "--set",
            "certManager.issuerRef.kind=ClusterIssuer",
        ],
        "certManager/issuerRef",
    );
    render_fails(
        &["--set", "certManager.issuerRef.name=platform-ca"],
        "certManager.issuerRef is only used with certManager.enabled=true",
    );
}

#[test]
fn an_existing_secret_and_its_ca_replace_the_charts_certificate() {
    let ca = some_ca_pem();
    let docs = render(
        "demo",
        "platform-system",
        &[
            "--set",
            "tls.existingSecret=my-webhook-tls",
            "--set-string",
            &format!("tls.caBundle={ca}"),
        ],
    );
    assert!(find_all(&docs, "Secret").is_empty(), "the chart makes none");
    assert!(find_all(&docs, "Certificate").is_empty());
    let pod = deployment_pod(&docs);
    assert_eq!(
        pod["volumes"],
        json!([{"name": "tls", "secret": {"secretName": "my-webhook-tls"}}])
    );
    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        for hook in find(&docs, kind)["webhooks"].as_array().unwrap() {
            let bundle = b64(hook["clientConfig"]["caBundle"].as_str().unwrap());
            assert_eq!(String::from_utf8(bundle).unwrap(), ca, "{hook}");
        }
    }

    render_fails(
        &["--set", "tls.existingSecret=my-webhook-tls"],
        "tls.existingSecret needs tls.caBundle",
    );
    render_fails(
        &["--set-string", &format!("tls.caBundle={ca}")],
        "tls.caBundle is only used with tls.existingSecret",
    );
    render_fails(
        &[
            "--set",
            "tls.existingSecret=my-webhook-tls",
            "--set-string",
            &format!("tls.caBundle={ca}"),
            "--set",
            "certManager.enabled=true",
        ],
        "choose one source of the serving certificate",
    );
    render_fails(
        &[
            "--set",
            "tls.existingSecret=x",
            "--set",
            "tls.caBundle=not-a-certificate",
        ],
        "/tls/caBundle",
    );
}

/// Value sets covering every option; each renders, lints clean in strict mode, and renders
/// for Kubernetes 1.20 and 1.30.
fn option_sets() -> Vec<(&'static str, Vec<String>)> {
    let ca = some_ca_pem();
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        ("defaults", vec![]),
        (
            "monitoring with a ServiceMonitor",
            s(&[
                "--set",
                "monitoring.serviceMonitor.enabled=true",
                "--set",
                "monitoring.serviceMonitor.interval=30s",
                "--set",
                "monitoring.prometheusRule.enabled=true",
                "--set",
                "monitoring.dashboard.enabled=true",
            ]),
        ),
        (
            "monitoring with a PodMonitor",
            s(&[
                "--set",
                "monitoring.podMonitor.enabled=true",
                "--set",
                "monitoring.prometheusRule.enabled=true",
                "--set",
                "monitoring.prometheusRule.disabled.CopyratorConflicts=true",
            ]),
        ),
        (
            "cert-manager, self-signed",
            s(&["--set", "certManager.enabled=true"]),
        ),
        (
            "cert-manager with a CA issuer",
            s(&[
                "--set",
                "certManager.enabled=true",
                "--set",
                "certManager.issuerRef.name=platform-ca",
                "--set",
                "certManager.issuerRef.kind=ClusterIssuer",
            ]),
        ),
        (
            "an existing Secret",
            vec![
                "--set".into(),
                "tls.existingSecret=my-webhook-tls".into(),
                "--set-string".into(),
                format!("tls.caBundle={ca}"),
            ],
        ),
        (
            "host network on another port, hardened otherwise",
            s(&[
                "--set",
                "hostNetwork=true",
                "--set",
                "webhook.port=9443",
                "--set",
                "metrics.port=9091",
                "--set",
                "networkPolicy.enabled=true",
                "--set",
                "replicas=1",
                "--set",
                "test.enabled=false",
                "--set",
                "podGate.enabled=false",
            ]),
        ),
        (
            "more kinds copied, RoleBindings and Roles among them",
            s(&[
                "--set-json",
                r#"copyKinds=[{"kind": "NetworkPolicy", "group": "networking.k8s.io", "resource": "networkpolicies"}, {"kind": "LimitRange", "group": "", "resource": "limitranges"}, {"kind": "RoleBinding", "group": "rbac.authorization.k8s.io", "resource": "rolebindings"}, {"kind": "Role", "group": "rbac.authorization.k8s.io", "resource": "roles"}]"#,
                "--set-json",
                r#"rbac.bindClusterRoles=["view"]"#,
                "--set-json",
                r#"rbac.bindRoles=["team-reader"]"#,
                "--set-json",
                r#"rbac.escalateRoles=["team-reader"]"#,
            ]),
        ),
    ]
}

#[test]
fn every_option_set_renders_and_lints_clean() {
    let chart = chart_dir().display().to_string();
    for (what, values) in option_sets() {
        let values: Vec<&str> = values.iter().map(String::as_str).collect();
        let mut args = vec!["lint", &chart, "--strict"];
        args.extend_from_slice(&values);
        let out = helm_ok(&args);
        assert!(
            out.contains("1 chart(s) linted, ok") && !out.contains("[WARNING]"),
            "{what}:\n{out}"
        );
        let docs = render("demo", "platform-system", &values);
        assert!(!docs.is_empty(), "{what}");
    }
}

/// The API versions each kind the chart renders is served at, by Kubernetes minor version
/// (inclusive bounds; CRD-defined kinds have no bound of Kubernetes' own).
fn served(api_version: &str, kind: &str, minor: u32) -> bool {
    let range = match (api_version, kind) {
        ("policy/v1beta1", "PodDisruptionBudget") => 5..=24,
        ("policy/v1", "PodDisruptionBudget") => 21..=u32::MAX,
        ("apps/v1", "Deployment") => 9..=u32::MAX,
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => 16..=u32::MAX,
        ("v1", _) => 0..=u32::MAX,
        ("rbac.authorization.k8s.io/v1", _) => 8..=u32::MAX,
        (
            "admissionregistration.k8s.io/v1",
            "ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding",
        ) => 30..=u32::MAX,
        ("admissionregistration.k8s.io/v1", _) => 16..=u32::MAX,
        ("networking.k8s.io/v1", "NetworkPolicy") => 7..=u32::MAX,
        ("monitoring.coreos.com/v1", _) | ("cert-manager.io/v1", _) => 0..=u32::MAX,
        _ => panic!("the chart renders {api_version} {kind}: add it to this table"),
    };
    range.contains(&minor)
}

/// How copyrator learns of hand edits and deletions of its copies does not depend on the
/// cluster's version (SPEC §5: a watch of its copies, chosen over a copies webhook by
/// measurement, with or without `matchConditions`): on 1.20 and on 1.30 the chart registers the
/// same webhooks, none of them for copies' writes and none with `matchConditions`.
#[test]
fn copy_edits_are_watched_not_webhooked_on_every_kubernetes_version() {
    let webhooks = |version: &str| -> Vec<Value> {
        let docs = render_for(version, &[], &[]);
        [
            "ValidatingWebhookConfiguration",
            "MutatingWebhookConfiguration",
        ]
        .iter()
        .flat_map(|kind| find(&docs, kind)["webhooks"].as_array().unwrap().clone())
        .collect()
    };
    let (old, new) = (webhooks("v1.20.15"), webhooks("v1.30.4"));
    assert_eq!(
        old, new,
        "the webhooks differ between Kubernetes 1.20 and 1.30"
    );
    for hook in &new {
        let path = hook["clientConfig"]["service"]["path"].as_str().unwrap();
        assert_ne!(path, "/admission/copies", "{hook}");
        if path == "/admission/read-only" {
            // Only read-only copies: no other copy's write calls it.
            assert_eq!(
                hook["objectSelector"]["matchLabels"]["copyrator.io/read-only"],
                "true"
            );
        }
        assert!(hook.get("matchConditions").is_none(), "{hook}");
    }
    let names: Vec<&str> = new.iter().map(|h| h["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "namespaces.copyrator.io",
            "sources.copyrator.io",
            "rules.copyrator.io",
            "read-only.copyrator.io",
            "read-only-updates.copyrator.io",
            "pods.copyrator.io"
        ]
    );
}

#[test]
fn chart_renders_for_kubernetes_1_20_and_1_30() {
    let crds = ["monitoring.coreos.com/v1", "cert-manager.io/v1"];
    for (version, minor) in [("v1.20.15", 20), ("v1.30.4", 30)] {
        for (what, values) in option_sets() {
            let values: Vec<&str> = values.iter().map(String::as_str).collect();
            let docs = render_for(version, &crds, &values);
            for doc in &docs {
                let (api, kind) = (
                    doc["apiVersion"].as_str().unwrap(),
                    doc["kind"].as_str().unwrap(),
                );
                assert!(
                    served(api, kind, minor),
                    "{what}: Kubernetes {version} does not serve {api} {kind}"
                );
            }
            if values.contains(&"replicas=1") {
                continue;
            }
            let pdb = find(&docs, "PodDisruptionBudget");
            let expected = if minor < 21 {
                "policy/v1beta1"
            } else {
                "policy/v1"
            };
            assert_eq!(pdb["apiVersion"], expected, "{what} on {version}");
        }
    }
    // Older than the chart's kubeVersion: refused, as `helm install` would.
    let chart = chart_dir().display().to_string();
    let out = helm(&[
        "template",
        &chart,
        "--release",
        "demo",
        "--namespace",
        "platform-system",
        "--kube-version",
        "v1.19.16",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("incompatible with Kubernetes v1.19.16"),
        "{out:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Against the test API server

/// Everything the test API server can take at once (monitoring and cert-manager objects need
/// CRDs: tests/e2e/helm_chart/monitoring.rs installs those), installed for real: the API server
/// accepts every field (the stored objects hold what was rendered), and uninstall removes it all.
#[tokio::test]
async fn helm_install_takes_every_option_the_api_server_serves() {
    use k8s_openapi::api::{apps::v1::Deployment, networking::v1::NetworkPolicy};
    use kube::Api;

    let env = crate::common::TestEnv::new().await;
    let ns = env.namespace("helm-opts", &[]).await;
    let name = format!("o{}", env.id);
    let fullname = format!("{name}-copyrator");
    let ca = some_ca_pem();
    let digest = format!("sha256:{}", "cd".repeat(32));
    let values: Vec<String> = [
        "--set",
        "hostNetwork=true",
        "--set",
        "webhook.port=9443",
        "--set",
        "metrics.port=9091",
        "--set",
        &format!("image.digest={digest}"),
        "--set",
        "podSecurityContext.runAsUser=null",
        "--set",
        "podSecurityContext.fsGroup=null",
        "--set-json",
        r#"topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}]"#,
        "--set",
        "networkPolicy.enabled=true",
        "--set-json",
        r#"networkPolicy.metricsFrom=[{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]"#,
        "--set",
        "monitoring.dashboard.enabled=true",
        "--set",
        "tls.existingSecret=byo-webhook-tls",
        "--set-string",
        &format!("tls.caBundle={ca}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    let mut release = crate::helm_chart::support::Release::install(&name, &ns, &values);
    let rendered = release.render_live_with(&values);

    let deployment = Api::<Deployment>::namespaced(env.client.clone(), &ns)
        .get(&fullname)
        .await
        .unwrap();
    let stored = serde_json::to_value(&deployment).unwrap();
    crate::helm_chart::support::assert_contains(
        &stored["spec"]["template"]["spec"],
        &find(&rendered, "Deployment")["spec"]["template"]["spec"],
        "Deployment.spec.template.spec",
    );
    assert_eq!(stored["spec"]["template"]["spec"]["hostNetwork"], true);
    let policy = Api::<NetworkPolicy>::namespaced(env.client.clone(), &ns)
        .get(&fullname)
        .await
        .unwrap();
    crate::helm_chart::support::assert_contains(
        &serde_json::to_value(&policy).unwrap()["spec"],
        &find(&rendered, "NetworkPolicy")["spec"],
        "NetworkPolicy.spec",
    );
    let installed = crate::helm_chart::support::Installed::read(&env.client, &ns, &fullname).await;
    assert!(installed.tls.is_none(), "the chart made no certificate");
    for hook in installed.vwc.as_ref().unwrap().webhooks.as_ref().unwrap() {
        assert_eq!(
            hook.client_config.ca_bundle.as_ref().unwrap().0,
            ca.as_bytes(),
            "{}",
            hook.name
        );
    }

    release.uninstall();
    let after = crate::helm_chart::support::Installed::read(&env.client, &ns, &fullname).await;
    assert!(after.present().is_empty(), "{:?}", after.present());
    env.cleanup().await;
}

/// The chart README's CRD step for `crds.enabled=false` works as written, from the repository
/// (the README gives the release's URL of the same folder).
#[tokio::test]
async fn documented_crd_upgrade_step_applies_the_charts_crd() {
    let readme = std::fs::read_to_string(chart_dir().join("README.md")).unwrap();
    let shown = "kubectl apply --server-side --force-conflicts -f https://raw.githubusercontent.com/copyrator/copyrator/main/deploy/crds/";
    assert!(readme.contains(shown), "the chart README shows: {shown}");
    let step = "kubectl apply --server-side --force-conflicts -f deploy/crds/";
    let _env = crate::common::TestEnv::new().await;
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(crate::common::kubeconfig())
        .args(step.split_whitespace().skip(1))
        .current_dir(crate::helm_chart::support::root())
        .output()
        .expect("kubectl");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("copyrules.copyrator.io serverside-applied"),
        "{out:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The values table of the chart README

fn values_table(args: &[&str]) -> std::process::Output {
    std::process::Command::new(crate::helm_chart::support::root().join(".venv/bin/python"))
        .arg(crate::helm_chart::support::root().join("scripts/chart-values-table.py"))
        .args(args)
        .output()
        .expect("scripts/chart-values-table.py (run scripts/bootstrap.sh for .venv)")
}

/// A copy of the chart's values.yaml and README.md in a directory of its own.
fn chart_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in ["values.yaml", "README.md"] {
        std::fs::copy(chart_dir().join(file), dir.path().join(file)).unwrap();
    }
    dir
}

#[test]
fn chart_readme_values_table_is_generated_from_values_yaml() {
    let out = values_table(&["--check"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let readme = std::fs::read_to_string(chart_dir().join("README.md")).unwrap();
    for row in [
        "| `webhook.port` | `8443` |",
        "| `hostNetwork` | `false` |",
        "| `image.tag` | the chart's `appVersion` |",
        "| `monitoring.dashboard.labels` | `{\"grafana_dashboard\": \"1\"}` |",
    ] {
        assert!(readme.contains(row), "the values table lacks {row}");
    }

    // A description changed in values.yaml makes the table stale, until it is regenerated.
    let copy = chart_copy();
    let values = copy.path().join("values.yaml");
    let text = std::fs::read_to_string(&values).unwrap();
    std::fs::write(
        &values,
        text.replace("# -- Worker tasks running copy jobs.", "# -- Copy workers."),
    )
    .unwrap();
    let chart = copy.path().display().to_string();
    let stale = values_table(&["--check", "--chart", &chart]);
    assert!(!stale.status.success());
    assert!(String::from_utf8_lossy(&stale.stderr).contains("the values table is stale"));
    assert!(values_table(&["--chart", &chart]).status.success());
    assert!(
        values_table(&["--check", "--chart", &chart])
            .status
            .success()
    );
    let regenerated = std::fs::read_to_string(copy.path().join("README.md")).unwrap();
    assert!(regenerated.contains("| `workers` | `4` | Copy workers. |"));

    // A value nobody documented is refused, by name.
    std::fs::write(&values, format!("{text}\nundocumented:\n  knob: 1\n")).unwrap();
    let out = values_table(&["--chart", &chart]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("documents undocumented.knob"),
        "{out:?}"
    );
}
