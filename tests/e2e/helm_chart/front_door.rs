//! The front door works as written: the README's first screen, the chart NOTES' first example,
//! and the docs' path (install, first copy, upgrade, rollback, uninstall), each block run as a
//! user types it, with kubectl and helm (`helm_cli.py` on the real Helm SDK, the chart packaged
//! as the release workflow packages it), against the test API server. copyrator runs out of
//! cluster as the chart's ServiceAccount, with the flags the installed Deployment carries.
//! Included by tests/e2e/helm_chart.rs.

use std::{path::PathBuf, process::Output};

use k8s_openapi::api::{apps::v1::Deployment, core::v1::Secret};

use super::*;

/// The `sh` block that follows `<!-- test: NAME -->` in `doc` (a repository path).
fn doc_block(doc: &str, name: &str) -> String {
    let text = std::fs::read_to_string(root().join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"));
    let marker = format!("<!-- test: {name} -->");
    let after = text
        .split_once(&marker)
        .unwrap_or_else(|| panic!("{doc} has no {marker}"))
        .1;
    let body = after
        .trim_start()
        .strip_prefix("```sh\n")
        .unwrap_or_else(|| panic!("{doc}: {marker} is not followed by a ```sh block"));
    body.split_once("\n```")
        .unwrap_or_else(|| panic!("{doc}: {marker}'s block is not closed"))
        .0
        .to_string()
}

/// A shell as the docs' reader has it: kubectl and helm on the PATH, the test cluster's
/// kubeconfig, the docs' names replaced by this test's (`copyrator-system`, `platform`,
/// `team-a`), and `helm`'s release `copyrator` by this test's release.
struct Shell {
    bin: tempfile::TempDir,
    chart: PathBuf,
    release: String,
    names: Vec<(String, String)>,
}

impl Shell {
    fn new(release: &str, names: &[(&str, &str)]) -> Self {
        let bin = tempfile::tempdir().unwrap();
        let helm = bin.path().join("helm");
        std::fs::write(
            &helm,
            format!(
                "#!/bin/sh\nexec {} {} \"$@\"\n",
                root().join(".venv/bin/python").display(),
                root().join("tests/e2e/helm_chart/helm_cli.py").display()
            ),
        )
        .unwrap();
        let mut perms = std::fs::metadata(&helm).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&helm, perms).unwrap();
        let chart = packaged_chart(bin.path());
        Self {
            bin,
            chart,
            release: release.into(),
            names: names
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
        }
    }

    /// `script` with the docs' names replaced by this test's (longest first, whole words).
    fn localize(&self, script: &str) -> String {
        let mut names = self.names.clone();
        names.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
        let mut out = script.to_string();
        for (i, (from, _)) in names.iter().enumerate() {
            out = out.replace(from.as_str(), &format!("\u{0}{i}\u{0}"));
        }
        for (i, (_, to)) in names.iter().enumerate() {
            out = out.replace(&format!("\u{0}{i}\u{0}"), to);
        }
        out
    }

    fn run(&self, script: &str) -> Output {
        let script = self.localize(script);
        let path = format!(
            "{}:{}",
            self.bin.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Command::new("bash")
            .args(["-euo", "pipefail", "-c", &script])
            .env("PATH", path)
            .env("KUBECONFIG", common::kubeconfig())
            .env("FRONT_DOOR_CHART", &self.chart)
            .env("FRONT_DOOR_RELEASE", &self.release)
            .output()
            .expect("running bash")
    }

    /// Runs `script`, which must succeed; its stdout.
    fn ok(&self, what: &str, script: &str) -> String {
        let out = self.run(script);
        assert!(
            out.status.success(),
            "{what} failed ({}):\n{}\n--- stdout\n{}--- stderr\n{}",
            out.status,
            self.localize(script),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// The chart packaged as the release workflow packages it (`helm package`), in `dir`.
fn packaged_chart(dir: &std::path::Path) -> PathBuf {
    let chart = chart_dir().display().to_string();
    let dest = dir.display().to_string();
    let printed = helm_ok(&["package", &chart, "--destination", &dest]);
    PathBuf::from(printed.trim())
}

/// The value of `--NAME=` among the installed Deployment's container args.
async fn deployment_flag(client: &kube::Client, ns: &str, name: &str, flag: &str) -> String {
    let deployment = Api::<Deployment>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("Deployment {ns}/{name}: {e}"));
    let args = deployment.spec.template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap_or_default();
    let prefix = format!("--{flag}=");
    args.iter()
        .find_map(|a| a.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("the Deployment passes no {prefix}: {args:?}"))
        .to_string()
}

/// Starts copyrator as the release's ServiceAccount, with the trusted namespaces the chart
/// rendered into its Deployment.
async fn start_copyrator(env: &TestEnv, ns: &str, fullname: &str) -> Process {
    let trusted = deployment_flag(&env.client, ns, fullname, "trusted-namespaces").await;
    let token = service_account_token(&env.client, ns, fullname).await;
    authorized(
        &env.client,
        ns,
        fullname,
        ("list", "", "secrets", None, None),
    )
    .await;
    authorized(
        &env.client,
        ns,
        fullname,
        (
            "get",
            "coordination.k8s.io",
            "leases",
            Some(ns),
            Some(fullname),
        ),
    )
    .await;
    let mut copyrator = copyrator_as(&token, ns, fullname, &trusted);
    copyrator.wait_ready().await;
    copyrator
}

/// Waits until Secret `ns/name` is copyrator's copy holding `token`.
async fn copy_arrives(env: &TestEnv, ns: &str, name: &str) {
    let secrets = env.secrets(ns);
    eventually(
        Duration::from_secs(30),
        &format!("the copy {ns}/{name}"),
        || {
            let secrets = secrets.clone();
            async move {
                let copy: Secret = secrets.get_opt(name).await.ok()??;
                let managed = copy
                    .metadata
                    .labels
                    .as_ref()?
                    .get("app.kubernetes.io/managed-by");
                (managed.map(String::as_str) == Some("copyrator")).then_some(())
            }
        },
    )
    .await;
}

/// The README's first screen on a cluster with nothing installed: its `helm install` and its
/// first copy, as written (the names made this test's own), then the docs' upgrade, rollback
/// and uninstall, which the README's link leads to. The chart's CRDs are already served here
/// (the harness applies them), so the docs' adoption step runs first, as for an upgrade from
/// chart 0.2.
#[tokio::test]
async fn the_readme_and_the_docs_path_work_as_written() {
    let env = TestEnv::new().await;
    let system = env.name("fd-system");
    env.track_namespace(&system);
    let platform = env.namespace("fd-platform", &[]).await;
    let team = env.namespace("fd-team", &[]).await;
    let release = format!("copyrator-{}", env.id);
    let shell = Shell::new(
        &release,
        &[
            ("copyrator-system", system.as_str()),
            ("platform", platform.as_str()),
            ("team-a", team.as_str()),
            (
                "release-name=copyrator ",
                &format!("release-name={release} "),
            ),
        ],
    );

    // The docs' install and first copy are the README's, word for word: running these runs both.
    assert_eq!(
        doc_block("docs/install.md", "install"),
        doc_block("README.md", "readme-install")
    );
    assert_eq!(
        doc_block("docs/first-copy.md", "first-copy"),
        doc_block("README.md", "readme-first-copy")
    );
    // As chart 0.2 left them: every CRD of deploy/crds/, owned by no release.
    let crds = root().join("deploy/crds").display().to_string();
    shell.ok(
        "CRDs as chart 0.2 left them",
        &format!("kubectl apply --server-side --force-conflicts -f {crds} >/dev/null"),
    );
    let adopt = doc_block("docs/operations/upgrade.md", "adopt-crds");
    shell.ok("docs/operations/upgrade.md adopt-crds", &adopt);
    shell.ok("README install", &doc_block("README.md", "readme-install"));
    let copyrator = start_copyrator(&env, &system, &release).await;
    // Its last command shows the copy: run once copyrator has written it (milliseconds, but a
    // loaded test machine is no promise).
    let first_copy = doc_block("README.md", "readme-first-copy");
    let (setup, show) = first_copy.rsplit_once('\n').unwrap();
    shell.ok("README first copy", setup);
    copy_arrives(&env, &team, "registry-cred").await;
    let out = shell.ok("README first copy, the copy", show);
    assert!(
        out.contains("registry-cred"),
        "the last command shows the copy:\n{out}"
    );

    // `copyrator resync` finds the Lease through the release's webhook configuration, and the
    // leader takes the request.
    let resync = common::run_copyrator_with(
        &[
            "resync",
            "--webhook-configuration",
            &release,
            "--lease-name",
            &release,
        ],
        &[],
    )
    .await;
    assert!(resync.success, "copyrator resync: {resync:?}");
    assert!(
        resync.stdout.contains("full resync started by the leader"),
        "{resync:?}"
    );
    let lease = Api::<Lease>::namespaced(env.client.clone(), &system)
        .get(&release)
        .await
        .unwrap();
    let annotations = lease.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations.get("copyrator.io/resync"),
        annotations.get("copyrator.io/resynced"),
        "the request was taken"
    );

    let upgraded = shell.ok(
        "upgrade",
        &doc_block("docs/operations/upgrade.md", "upgrade"),
    );
    assert!(upgraded.contains("\"revision\": 2"), "{upgraded}");
    assert_eq!(
        deployment_flag(&env.client, &system, &release, "trusted-namespaces").await,
        format!("{system},{platform}"),
        "--reuse-values kept the install's trustedNamespaces"
    );
    shell.ok(
        "rollback",
        &doc_block("docs/operations/upgrade.md", "rollback"),
    );
    copy_arrives(&env, &team, "registry-cred").await;

    // Uninstalled: pods go first (copyrator stops), then the release's objects.
    drop(copyrator);
    shell.ok(
        "uninstall",
        &doc_block("docs/operations/uninstall.md", "uninstall"),
    );
    let installed = Installed::read(&env.client, &system, &release).await;
    assert!(
        installed.present().is_empty(),
        "left: {:?}",
        installed.present()
    );
    assert!(
        Api::<CustomResourceDefinition>::all(env.client.clone())
            .get_opt("copyrules.copyrator.io")
            .await
            .unwrap()
            .is_some(),
        "crds.keep kept the CRDs"
    );
    let copy = env.secrets(&team).get("registry-cred").await;
    assert!(
        copy.is_ok(),
        "the copy stays after uninstall, as the docs say"
    );
    // The docs remove every copy in the cluster; here, only this test's namespaces'.
    let cleanup = doc_block("docs/operations/uninstall.md", "uninstall-copies")
        .replace("--all-namespaces", &format!("--namespace {team}"));
    shell.ok("uninstall copies", &cleanup);
    env.wait_gone::<Secret>(&team, "registry-cred").await;
    assert!(
        env.secrets(&platform)
            .get_opt("registry-cred")
            .await
            .unwrap()
            .is_some(),
        "the source stays"
    );
    env.cleanup().await;
}

/// The NOTES' first example, on the chart's defaults: installed with no value at all, the
/// commands the install prints make a copy.
#[tokio::test]
async fn the_notes_first_example_works_on_the_charts_defaults() {
    let env = TestEnv::new().await;
    let system = env.namespace("fd-notes", &[]).await;
    let team = env.name("fd-notes-team");
    env.track_namespace(&team);
    let release = format!("copyrator-n{}", env.id);
    // The defaults, but for the CRDs the harness already serves.
    let mut installed = Release::install(&release, &system, &[]);
    let notes = helm_ok(&[
        "template",
        &chart_dir().display().to_string(),
        "--release",
        &release,
        "--namespace",
        &system,
        "--notes",
    ]);
    let example: Vec<&str> = notes
        .split_once("A first copy")
        .unwrap_or_else(|| panic!("NOTES lead with a first copy:\n{notes}"))
        .1
        .split_once("A source in any other namespace")
        .expect("the first example ends")
        .0
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("kubectl "))
        .collect();
    assert!(example.len() >= 5, "{example:?}");
    let copyrator = start_copyrator(&env, &system, &release).await;
    let shell = Shell::new(&release, &[("team-a", team.as_str())]);
    let (setup, check) = example.split_at(example.len() - 1);
    shell.ok("NOTES example", &setup.join("\n"));
    copy_arrives(&env, &team, "registry-cred").await;
    let shown = shell.ok("NOTES check", check[0]);
    assert!(shown.contains("registry-cred"), "{shown}");
    drop(copyrator);
    // Uninstalled before the namespaces go: its read-only webhook fails closed, and left
    // registered it would refuse every later test's edit of a read-only copy.
    installed.uninstall();
    env.cleanup().await;
}
