//! The chart's `helm test` hook: its objects rendered and checked, and a real `helm test`
//! (Helm's SDK) against the test API server. That server has no kubelet, so the test plays
//! it: it runs each container of the test Pod, in order, with this machine's kubectl under
//! the Pod's ServiceAccount (a TokenRequest token, as the kubelet would mount), reports the
//! Pod's phase, and finalizes the test namespace Helm deletes. It also plays the parts of
//! kube-controller-manager the server lacks: the namespace controller (finalizing) and the
//! token controller (Kubernetes 1.20's ServiceAccount admission refuses a Pod whose
//! ServiceAccount references no token Secret). Included by tests/e2e/helm_chart.rs.

use std::{
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use copyrator::copyrule::CopyRule;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Namespace, Pod, Secret, ServiceAccount};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

use crate::common::{self, TestEnv, service_account_token, write_token_kubeconfig};
use crate::helm_chart::support::{Release, find, helm, render, render_hooks};

fn hook_weight(doc: &Value) -> i64 {
    doc["metadata"]["annotations"]["helm.sh/hook-weight"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// Whether `selector` (matchLabels) selects an object labelled `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    selector
        .as_object()
        .unwrap()
        .iter()
        .all(|(k, v)| &labels[k] == v)
}

#[test]
fn helm_test_objects_make_a_copy_and_read_only_it() {
    let hooks = render_hooks("demo", "platform-system", &[]);
    let kinds: Vec<&str> = {
        let mut sorted: Vec<&Value> = hooks.iter().collect();
        sorted.sort_by_key(|d| hook_weight(d));
        sorted.iter().map(|d| d["kind"].as_str().unwrap()).collect()
    };
    assert_eq!(
        kinds,
        [
            "Namespace",
            "ConfigMap",
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "CopyRule",
            "Pod"
        ],
        "created in this order"
    );
    for doc in &hooks {
        let annotations = &doc["metadata"]["annotations"];
        assert_eq!(annotations["helm.sh/hook"], "test", "{doc}");
        assert_eq!(
            annotations["helm.sh/hook-delete-policy"], "before-hook-creation,hook-succeeded",
            "deleted when the test passes, kept when it fails: {doc}"
        );
    }
    let test_ns = find(&hooks, "Namespace")["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(test_ns, "demo-copyrator-test");

    // The CopyRule is one copyrator accepts, copying the source into the test namespace.
    let source = find(&hooks, "ConfigMap");
    assert_eq!(source["metadata"]["namespace"], "platform-system");
    let probe = source["data"]["probe"].as_str().unwrap();
    let rule: CopyRule = serde_json::from_value(find(&hooks, "CopyRule").clone())
        .expect("the test CopyRule parses as copyrator's type");
    assert_eq!(rule.spec.source_namespace, "platform-system");
    assert_eq!(
        rule.spec.source_name.as_deref(),
        source["metadata"]["name"].as_str()
    );
    assert_eq!(
        serde_json::to_value(&rule.spec).unwrap()["namespaces"],
        json!([test_ns])
    );

    // The Pod may read ConfigMaps in the test namespace, nothing else.
    let pod = find(&hooks, "Pod");
    let sa = find(&hooks, "ServiceAccount");
    assert_eq!(pod["metadata"]["namespace"], "platform-system");
    assert_eq!(pod["spec"]["serviceAccountName"], sa["metadata"]["name"]);
    assert_eq!(sa["metadata"]["namespace"], "platform-system");
    let role = find(&hooks, "Role");
    assert_eq!(role["metadata"]["namespace"], test_ns.as_str());
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}])
    );
    let binding = find(&hooks, "RoleBinding");
    assert_eq!(binding["metadata"]["namespace"], test_ns.as_str());
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "platform-system"}])
    );

    // Three kubectl waits, in order, on the copy; hardened like copyrator itself.
    let spec = &pod["spec"];
    assert_eq!(spec["restartPolicy"], "Never");
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let steps: Vec<&Value> = spec["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .chain(spec["containers"].as_array().unwrap())
        .collect();
    let conditions: Vec<String> = steps
        .iter()
        .map(|c| {
            assert_eq!(c["image"], "registry.k8s.io/kubectl:v1.34.1");
            assert_eq!(c["command"], json!(["kubectl"]));
            let sc = &c["securityContext"];
            assert_eq!(sc["allowPrivilegeEscalation"], false);
            assert_eq!(sc["readOnlyRootFilesystem"], true);
            assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
            let args: Vec<String> = serde_json::from_value(c["args"].clone()).unwrap();
            assert_eq!(args[0], "wait");
            assert!(args.contains(&format!("--namespace={test_ns}")), "{args:?}");
            assert!(args.contains(&"configmap/demo-copyrator-test-source".to_string()));
            assert!(args.contains(&"--timeout=60s".to_string()));
            args.into_iter().find(|a| a.starts_with("--for=")).unwrap()
        })
        .collect();
    assert_eq!(
        conditions,
        [
            "--for=create".to_string(),
            r"--for=jsonpath={.metadata.labels.app\.kubernetes\.io/managed-by}=copyrator".into(),
            format!("--for=jsonpath={{.data.probe}}={probe}"),
        ]
    );

    // No selector of the release picks the test Pod (the ReplicaSet would adopt it, the
    // Service would send it AdmissionReviews).
    let release = render(
        "demo",
        "platform-system",
        &[
            "--set",
            "networkPolicy.enabled=true",
            "--set",
            "monitoring.podMonitor.enabled=true",
        ],
    );
    let labels = &pod["metadata"]["labels"];
    for (kind, selector) in [
        (
            "Deployment",
            &find(&release, "Deployment")["spec"]["selector"]["matchLabels"],
        ),
        ("Service", &find(&release, "Service")["spec"]["selector"]),
        (
            "PodDisruptionBudget",
            &find(&release, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        ),
        (
            "NetworkPolicy",
            &find(&release, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"],
        ),
        (
            "PodMonitor",
            &find(&release, "PodMonitor")["spec"]["selector"]["matchLabels"],
        ),
    ] {
        assert!(
            !selects(selector, labels),
            "the {kind} selects the test Pod"
        );
    }

    let digest = format!("sha256:{}", "0f".repeat(32));
    let pinned = render_hooks(
        "demo",
        "platform-system",
        &["--set", &format!("test.image.digest={digest}")],
    );
    assert_eq!(
        find(&pinned, "Pod")["spec"]["containers"][0]["image"],
        format!("registry.k8s.io/kubectl@{digest}")
    );
    assert!(render_hooks("demo", "platform-system", &["--set", "test.enabled=false"]).is_empty());
}

/// Plays the kubelet and the namespace controller for the test Pod of `release` in `ns`
/// until `stop`: returns each step's (container, exit success) of every Pod it ran.
async fn play_kubelet(
    client: Client,
    ns: String,
    pod_name: String,
    test_ns: String,
    stop: Arc<AtomicBool>,
) -> Vec<Vec<(String, bool)>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let mut runs = Vec::new();
    let mut ran = std::collections::BTreeSet::new();
    while !stop.load(Ordering::Relaxed) {
        if let Ok(Some(sa)) = accounts.get_opt(&pod_name).await
            && sa.secrets.as_ref().is_none_or(|s| s.is_empty())
        {
            add_token_secret(&client, &ns, &sa).await;
        }
        if let Ok(Some(pod)) = pods.get_opt(&pod_name).await
            && pod.metadata.deletion_timestamp.is_none()
            && !matches!(
                pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
            && ran.insert(pod.metadata.uid.clone().unwrap())
        {
            let steps = run_pod(&client, &ns, &pod).await;
            let passed = steps.iter().all(|(_, ok)| *ok);
            pods.patch_status(
                &pod_name,
                &PatchParams::default(),
                &Patch::Merge(json!({
                    "status": {"phase": if passed { "Succeeded" } else { "Failed" }}
                })),
            )
            .await
            .unwrap();
            runs.push(steps);
        }
        if let Ok(Some(n)) = namespaces.get_opt(&test_ns).await
            && n.metadata.deletion_timestamp.is_some()
        {
            finalize_namespace(&test_ns);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    runs
}

/// What the token controller does for a new ServiceAccount: a token Secret it references.
async fn add_token_secret(client: &Client, ns: &str, sa: &ServiceAccount) {
    let name = sa.metadata.name.clone().unwrap();
    let uid = sa.metadata.uid.clone().unwrap();
    let secret_name = format!("{name}-token-{}", &uid[..8]);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {
            "name": secret_name,
            "annotations": {
                "kubernetes.io/service-account.name": name,
                "kubernetes.io/service-account.uid": uid,
            },
        },
        "type": "kubernetes.io/service-account-token",
    }))
    .unwrap();
    let _ = Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await;
    let _ = Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"secrets": [{"name": secret_name}]})),
        )
        .await;
}

/// Runs the Pod's init containers, then its containers, each as its command would run in
/// the Pod (kubectl from the image → kubectl here), as the Pod's ServiceAccount; stops at the
/// first failure, as the kubelet does with init containers.
async fn run_pod(client: &Client, ns: &str, pod: &Pod) -> Vec<(String, bool)> {
    let spec = pod.spec.as_ref().unwrap();
    let sa = spec.service_account_name.as_deref().unwrap();
    let token = service_account_token(client, ns, sa).await;
    let home = tempfile::tempdir().unwrap();
    let kubeconfig = home.path().join("kubeconfig");
    write_token_kubeconfig(&common::kubeconfig(), &token, &kubeconfig);
    let containers: Vec<&Container> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .collect();
    let mut steps = Vec::new();
    for c in containers {
        assert_eq!(c.command.as_deref(), Some(&["kubectl".to_string()][..]));
        let mut kubectl = Command::new("kubectl");
        kubectl
            .args(c.args.iter().flatten())
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", home.path());
        let out = tokio::task::spawn_blocking(move || kubectl.output())
            .await
            .unwrap()
            .expect("kubectl (installed on this machine)");
        let ok = out.status.success();
        if !ok {
            eprintln!(
                "test step {} failed: {}{}",
                c.name,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        steps.push((c.name.clone(), ok));
        if !ok {
            break;
        }
    }
    steps
}

/// What the namespace controller does once a namespace is empty: drop its finalizer.
fn finalize_namespace(name: &str) {
    let body = json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name},
        "spec": {"finalizers": []},
    });
    let file = crate::helm_chart::support::temp_file(body.to_string().as_bytes());
    let _ = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(common::kubeconfig())
        .args([
            "replace",
            "--raw",
            &format!("/api/v1/namespaces/{name}/finalize"),
            "-f",
        ])
        .arg(file.path())
        .output();
}

/// `helm test` for the release, with the kubelet played meanwhile: (Helm's verdict and
/// message, the steps of each Pod run).
async fn helm_test(
    env: &TestEnv,
    release: &Release,
    ns: &str,
) -> (bool, String, Vec<Vec<(String, bool)>>) {
    let fullname = format!("{}-copyrator", release.name());
    let stop = Arc::new(AtomicBool::new(false));
    let kubelet = tokio::spawn(play_kubelet(
        env.client.clone(),
        ns.to_string(),
        format!("{fullname}-test"),
        format!("{fullname}-test"),
        stop.clone(),
    ));
    let args: Vec<String> = [
        "test",
        "--release",
        release.name(),
        "--namespace",
        ns,
        "--kubeconfig",
        &common::kubeconfig().display().to_string(),
        "--timeout",
        "120",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = tokio::task::spawn_blocking(move || {
        helm(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap();
    stop.store(true, Ordering::Relaxed);
    let runs = kubelet.await.unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said, runs)
}

#[tokio::test]
async fn helm_test_fails_without_a_copy_and_passes_once_copyrator_makes_it() {
    let env = TestEnv::new().await;
    let ns = env.namespace("helm-test", &[]).await;
    let name = format!("t{}", env.id);
    let fullname = format!("{name}-copyrator");
    let test_ns = format!("{fullname}-test");
    // Cleaned up by the test's cleanup should it fail halfway.
    env.track_namespace(&test_ns);
    env.track_copy_rule(&format!("{fullname}-test"));
    let mut release = Release::install(&name, &ns, &["--set", "test.timeout=2s"]);

    // No copyrator running: nothing makes the copy, the first step times out, helm test
    // fails. Helm keeps the failed Pod for a look (kubectl logs) and deletes the objects
    // before it, as their hook-succeeded policy says.
    let (passed, said, runs) = helm_test(&env, &release, &ns).await;
    assert!(!passed, "helm test passed with no copyrator:\n{said}");
    assert!(said.contains(&format!("{fullname}-test")), "{said}");
    assert_eq!(runs, [vec![("copy-created".to_string(), false)]], "{said}");
    let failed = Api::<Pod>::namespaced(env.client.clone(), &ns)
        .get(&format!("{fullname}-test"))
        .await
        .expect("the failed test Pod is kept");
    assert_eq!(failed.status.unwrap().phase.as_deref(), Some("Failed"));
    assert!(
        Api::<CopyRule>::all(env.client.clone())
            .get_opt(&format!("{fullname}-test"))
            .await
            .unwrap()
            .is_none()
    );

    // copyrator, as the chart's ServiceAccount with a 1 s resync (the test API server cannot
    // reach the chart's Service, so its webhooks are ignored and the resync finds the rule).
    release.upgrade(&["--set", "test.timeout=60s"]);
    let token = service_account_token(&env.client, &ns, &fullname).await;
    let mut copyrator = crate::helm_chart::copyrator_as(&token, &ns, &fullname, &ns);
    copyrator.wait_ready().await;

    let (passed, said, runs) = helm_test(&env, &release, &ns).await;
    assert!(passed, "helm test failed:\n{said}\n{}", copyrator.logs());
    assert_eq!(
        runs,
        [vec![
            ("copy-created".to_string(), true),
            ("copy-managed-by-copyrator".to_string(), true),
            ("copy-holds-source-data".to_string(), true),
        ]]
    );
    // A passing test leaves nothing behind.
    assert!(
        Api::<CopyRule>::all(env.client.clone())
            .get_opt(&format!("{fullname}-test"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        Api::<ConfigMap>::namespaced(env.client.clone(), &ns)
            .get_opt(&format!("{fullname}-test-source"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        Api::<Namespace>::all(env.client.clone())
            .get_opt(&test_ns)
            .await
            .unwrap()
            .is_none()
    );

    drop(copyrator);
    release.uninstall();
    env.cleanup().await;
}
