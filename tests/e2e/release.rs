//! What a release is made of, checked here since the release runs only on GitHub: the workflow
//! (.github/workflows/release.yml; actionlint and zizmor lint it in scripts/test.sh) names the
//! image, chart and archives the rest of the repository names; the krew manifest it fills passes
//! krew's own validation; the chart it packages lints, renders and is accepted by the API server.

use std::{path::Path, process::Command};

use serde_json::Value;

use crate::{
    common,
    helm_chart::support::{chart_dir, helm_ok, root},
};

fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn workflow() -> Value {
    yaml(&root().join(".github/workflows/release.yml"))
}

/// `scripts/krew-manifest.py ARGS` with `env`: (success, stdout, stderr).
fn krew_manifest(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let out = Command::new(root().join(".venv/bin/python"))
        .arg(root().join("scripts/krew-manifest.py"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("scripts/krew-manifest.py (run scripts/bootstrap.sh for .venv)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const VERSION: &str = "v1.2.3";

/// The template filled as the workflow fills it, for `VERSION`.
fn filled_krew_manifest() -> String {
    let sha = |c: char| c.to_string().repeat(64);
    let (a, b, c, d) = (sha('a'), sha('b'), sha('c'), sha('d'));
    let template = root()
        .join("deploy/krew/copyrator.yaml")
        .display()
        .to_string();
    let (ok, stdout, stderr) = krew_manifest(
        &[&template],
        &[
            ("VERSION", VERSION),
            ("SHA256_LINUX_AMD64", &a),
            ("SHA256_LINUX_ARM64", &b),
            ("SHA256_DARWIN_AMD64", &c),
            ("SHA256_DARWIN_ARM64", &d),
        ],
    );
    assert!(ok, "filling the krew template: {stderr}");
    stdout
}

#[test]
fn the_workflow_publishes_what_the_chart_and_docs_name() {
    let wf = workflow();
    assert_eq!(wf["on"]["push"]["tags"][0], "v*", "runs on a version tag");
    assert_eq!(
        wf["permissions"],
        serde_json::json!({}),
        "no permission by default"
    );
    let values = yaml(&chart_dir().join("values.yaml"));
    let image = format!(
        "{}/{}",
        values["image"]["registry"].as_str().unwrap(),
        values["image"]["repository"].as_str().unwrap()
    );
    assert_eq!(
        wf["env"]["IMAGE"],
        image.as_str(),
        "the chart's default image"
    );
    let chart_repo = wf["env"]["CHART_REPO"].as_str().unwrap();
    for doc in ["README.md", "docs/install.md"] {
        let text = std::fs::read_to_string(root().join(doc)).unwrap();
        assert!(
            text.contains(&format!("{chart_repo}/copyrator")),
            "{doc} installs the chart the workflow pushes ({chart_repo}/copyrator)"
        );
    }
    // Every action pinned by commit, every job with permissions of its own.
    let text = std::fs::read_to_string(root().join(".github/workflows/release.yml")).unwrap();
    for line in text
        .lines()
        .filter(|l| l.trim_start().starts_with("- uses:") || l.trim_start().starts_with("uses:"))
    {
        let reference = line.split('@').nth(1).unwrap_or_default();
        let sha = reference.split_whitespace().next().unwrap_or_default();
        assert!(
            sha.len() == 40 && sha.chars().all(|c| c.is_ascii_hexdigit()),
            "not pinned by commit: {line}"
        );
    }
    for (name, job) in wf["jobs"].as_object().unwrap() {
        assert!(
            job["permissions"].is_object(),
            "job {name} says its permissions"
        );
    }
    // The binaries it builds are the platforms the krew manifest offers.
    let built: Vec<(String, String)> = wf["jobs"]["binaries"]["strategy"]["matrix"]["include"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["os"].as_str().unwrap().into(),
                p["arch"].as_str().unwrap().into(),
            )
        })
        .collect();
    let manifest: Value = serde_saphyr::from_str(&filled_krew_manifest()).unwrap();
    let offered: Vec<(String, String)> = manifest["spec"]["platforms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let labels = &p["selector"]["matchLabels"];
            (
                labels["os"].as_str().unwrap().into(),
                labels["arch"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(built, offered);
    for (os, arch) in [
        ("linux", "amd64"),
        ("linux", "arm64"),
        ("darwin", "amd64"),
        ("darwin", "arm64"),
    ] {
        assert!(
            built.contains(&(os.into(), arch.into())),
            "{os}/{arch} is built"
        );
    }
}

#[test]
fn the_krew_manifest_passes_krews_validation() {
    let filled = filled_krew_manifest();
    let manifest: Value = serde_saphyr::from_str(&filled).unwrap();
    assert_eq!(manifest["spec"]["version"], VERSION);
    for platform in manifest["spec"]["platforms"].as_array().unwrap() {
        let labels = &platform["selector"]["matchLabels"];
        let archive = format!(
            "copyrator-{VERSION}-{}-{}",
            labels["os"].as_str().unwrap(),
            labels["arch"].as_str().unwrap()
        );
        // The archive the workflow's Package step makes, on the release of this tag.
        assert_eq!(
            platform["uri"],
            format!("https://github.com/copyrator/copyrator/releases/download/{VERSION}/{archive}.tar.gz").as_str()
        );
        assert_eq!(
            platform["files"][0]["from"],
            format!("{archive}/copyrator").as_str()
        );
        assert_eq!(platform["bin"], "copyrator");
    }
    let dir = tempfile::tempdir().unwrap();
    let check = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        krew_manifest(&["--check", &path.display().to_string()], &[])
    };
    let (ok, _, stderr) = check("copyrator.yaml", &filled);
    assert!(ok, "{stderr}");
    // Each rule of krew's ValidatePlugin, broken once.
    let a64 = "a".repeat(64);
    for (broken, says) in [
        (filled.replace("v1alpha2", "v1alpha1"), "apiVersion"),
        (filled.replace("kind: Plugin", "kind: Plugins"), "kind"),
        (
            filled.replace("  name: copyrator", "  name: other"),
            "should be named",
        ),
        (
            filled.replace(
                "shortDescription: Explain, plan and migrate copies of Secrets and ConfigMaps",
                "shortDescription: \"Explain\\nplan\"",
            ),
            "line breaks",
        ),
        (
            filled.replace(&format!("version: {VERSION}"), "version: 1.2.3"),
            "version",
        ),
        (filled.replacen(&a64, "A", 1), "sha256"),
        (filled.replacen("      bin: copyrator\n", "", 1), "`bin`"),
        (
            filled.replacen("{os: linux, arch: amd64}", "{os: linux, distro: debian}", 1),
            "not supported",
        ),
        (
            filled.replacen(
                "matchLabels: {os: linux, arch: amd64}",
                "matchLabels: {}",
                1,
            ),
            "empty",
        ),
        (
            filled.replacen("      uri: https", "      url: https", 1),
            "unknown field",
        ),
    ] {
        let (ok, _, stderr) = check("copyrator.yaml", &broken);
        assert!(!ok && stderr.contains(says), "expected {says:?}: {stderr}");
    }
    let (ok, _, stderr) = check("kubectl-copyrator.yaml", &filled);
    assert!(
        !ok && stderr.contains("should be named"),
        "the file is named after the plugin: {stderr}"
    );
    // An unfilled placeholder is refused by name.
    let template = root()
        .join("deploy/krew/copyrator.yaml")
        .display()
        .to_string();
    let (ok, _, stderr) = krew_manifest(&[&template], &[("VERSION", VERSION)]);
    assert!(!ok && stderr.contains("SHA256_LINUX_AMD64"), "{stderr}");
}

/// The chart as the workflow packages it (`helm package --version --app-version`): it lints
/// clean, renders with its values checked by the schema, and the API server accepts every
/// object it renders (a server-side dry run).
#[tokio::test]
async fn the_packaged_chart_lints_renders_and_is_accepted() {
    let env = common::TestEnv::new().await;
    let ns = env.namespace("packaged", &[]).await;
    let dir = tempfile::tempdir().unwrap();
    let chart = chart_dir().display().to_string();
    let dest = dir.path().display().to_string();
    let tgz = helm_ok(&[
        "package",
        &chart,
        "--destination",
        &dest,
        "--version",
        "1.2.3",
        "--app-version",
        "1.2.3",
    ]);
    let tgz = tgz.trim();
    assert!(tgz.ends_with("copyrator-1.2.3.tgz"), "{tgz}");
    let lint = helm_ok(&["lint", tgz, "--strict"]);
    assert!(
        lint.contains("1 chart(s) linted, ok") && !lint.contains("[WARNING]"),
        "{lint}"
    );
    // Rendered for the test cluster's Kubernetes version, as `helm install` there would be.
    let rendered = helm_ok(&[
        "template",
        tgz,
        "--release",
        "pkg",
        "--namespace",
        &ns,
        "--kube-version",
        "v1.20.2",
    ]);
    assert!(
        rendered.contains("image: \"ghcr.io/copyrator/copyrator:1.2.3\""),
        "the app version's image"
    );
    assert!(
        rendered.contains("kind: CustomResourceDefinition"),
        "with its CRDs"
    );
    let refused = crate::helm_chart::support::helm(&[
        "template",
        tgz,
        "--release",
        "pkg",
        "--namespace",
        &ns,
        "--set",
        "crds.keep=maybe",
    ]);
    assert!(
        !refused.status.success(),
        "the schema travels with the package"
    );
    // Hooks (helm test) apart, as a release applies them.
    let release: Vec<&str> = rendered
        .split("\n---")
        .filter(|doc| !doc.contains("helm.sh/hook"))
        .collect();
    let mut kubectl = Command::new("kubectl")
        .args(["apply", "--dry-run=server", "-f", "-"])
        .env("KUBECONFIG", common::kubeconfig())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl");
    use std::io::Write as _;
    kubectl
        .stdin
        .take()
        .unwrap()
        .write_all(release.join("\n---").as_bytes())
        .unwrap();
    let out = kubectl.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the API server refuses what the packaged chart renders:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let accepted = String::from_utf8_lossy(&out.stdout);
    assert!(
        accepted.contains("deployment.apps/pkg-copyrator"),
        "{accepted}"
    );
    env.cleanup().await;
}

/// Every alert the chart renders links its runbook, a section that exists in the docs.
#[test]
fn every_alert_links_a_runbook_that_exists() {
    let rendered = crate::helm_chart::support::render(
        "demo",
        "platform-system",
        &[
            "--set",
            "monitoring.prometheusRule.enabled=true",
            "--set",
            "hub.member.enabled=true",
        ],
    );
    let rule = rendered
        .iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .expect("a PrometheusRule");
    let runbooks = std::fs::read_to_string(root().join("docs/operations/alerts.md")).unwrap();
    let anchors: Vec<String> = runbooks
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .map(|h| h.trim().to_lowercase())
        .collect();
    let rules = rule["spec"]["groups"][0]["rules"].as_array().unwrap();
    assert!(rules.len() >= 18, "{}", rules.len());
    for alert in rules {
        let name = alert["alert"].as_str().unwrap();
        let url = alert["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} has no runbook_url"));
        let (page, anchor) = url.split_once('#').unwrap();
        assert_eq!(
            page,
            "https://github.com/copyrator/copyrator/blob/main/docs/operations/alerts.md"
        );
        assert!(
            anchors.iter().any(|a| a == anchor),
            "{name}: no section #{anchor} in docs/operations/alerts.md"
        );
    }
}
