//! The command line's rules, as a user meets them running the `copyrator` binary: environment
//! variables named after their flags (renamed ones still read), errors in one line that name the
//! server or file and what to do, input refused where it would silently do nothing, and
//! `copyrator resync` making the leader resync at once. (Help length, headings and the env rule
//! for every flag are unit tests of src/cli/conventions.rs.)

use std::{path::Path, process::Output, time::Duration};

use crate::common::{Process, TestEnv, run_copyrator};

/// `copyrator ARGS` with only the environment variables `env` of copyrator's own.
fn copyrator(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_copyrator"));
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("COPYRATOR_") {
            cmd.env_remove(key);
        }
    }
    cmd.args(args)
        .envs(env.iter().copied())
        .output()
        .expect("running copyrator")
}

/// The one line a failed command printed; fails the test if it succeeded or printed more.
fn one_line_error(out: &Output) -> String {
    assert!(!out.status.success(), "expected a failure: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    // A usage error ends with clap's pointer to --help, as kubectl's does.
    let stderr = stderr
        .trim_end()
        .trim_end_matches("For more information, try '--help'.")
        .trim_end()
        .to_string();
    assert_eq!(
        stderr.lines().count(),
        1,
        "one line, kubectl style:\n{stderr}"
    );
    stderr
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn flags_are_read_from_copyrator_and_their_name_renamed_ones_too() {
    let dir = tempfile::tempdir().unwrap();
    for (env, sub) in [("COPYRATOR_OUT", "new"), ("COPYRATOR_CERTS_OUT", "old")] {
        let out_dir = dir.path().join(sub).display().to_string();
        let out = copyrator(&["certs"], &[(env, &out_dir)]);
        assert!(out.status.success(), "{env}: {out:?}");
        assert!(
            dir.path().join(sub).join("tls.crt").exists(),
            "{env} chose the output directory"
        );
    }
    // A size from the environment, as a flag takes it; a bad one names the variable's flag.
    let out = copyrator(&["serve", "--help"], &[]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("[default: 6Mi]"));
    let err = one_line_error(&copyrator(
        &["serve"],
        &[("COPYRATOR_MAX_BODY_BYTES", "6 megabytes")],
    ));
    assert!(
        err.contains("--max-body-bytes") && err.contains("6Mi"),
        "{err}"
    );
}

#[test]
fn an_unreachable_api_server_is_named_with_what_to_check() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = format!("https://127.0.0.1:{port}");
    let kubeconfig = write(
        dir.path(),
        "kubeconfig",
        &format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: '{server}', insecure-skip-tls-verify: true}}\n\
             users:\n- name: u\n  user: {{token: t}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\n"
        ),
    );
    for args in [
        &["explain", "namespace", "team-a"][..],
        &["resync"][..],
        &["migrate", "--from", "reflector"][..],
    ] {
        let args: Vec<&str> = args
            .iter()
            .copied()
            .chain(["--kubeconfig", &kubeconfig])
            .collect();
        let err = one_line_error(&copyrator(&args, &[]));
        assert!(
            err.contains(&format!(
                "cannot reach the Kubernetes API server at {server}"
            )),
            "{args:?}: {err}"
        );
        assert!(
            err.contains(&kubeconfig) && err.contains("cluster is up"),
            "{err}"
        );
        assert!(
            !err.contains("--lease-namespace"),
            "no advice about something else: {err}"
        );
    }
}

#[test]
fn a_ca_file_that_is_not_pem_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let ca = write(dir.path(), "hub-ca.der", "not a certificate");
    let token = write(dir.path(), "east.token", "t0ken");
    let err = one_line_error(&copyrator(
        &[
            "manifests",
            "hub-join",
            "--side",
            "member",
            "--cluster",
            "east",
            "--server",
            "https://hub.example:6443",
            "--ca-file",
            &ca,
            "--token-file",
            &token,
            "--source-namespaces",
            "platform",
            "--namespace-selector",
            "registry=hub",
        ],
        &[],
    ));
    assert!(
        err.contains(&ca) && err.contains("not a PEM certificate"),
        "{err}"
    );
    assert!(
        !err.contains("is needed"),
        "not reported as a missing flag: {err}"
    );
}

#[test]
fn yaml_errors_name_the_file_and_place_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "rules.yaml", "kind: CopyRule\nkind: Secret\n");
    for args in [
        &["plan", "-f", &file][..],
        &["migrate", "--from", "reflector", "-f", &file][..],
    ] {
        let err = one_line_error(&copyrator(args, &[]));
        assert!(
            err.contains(&file) && err.contains("line 2") && err.contains("duplicate"),
            "{err}"
        );
        assert!(
            !err.contains("DuplicateKeyPolicy"),
            "no advice meant for programs: {err}"
        );
    }
}

#[test]
fn webhooks_refuse_an_http_url_and_a_kind_without_its_group() {
    let err = one_line_error(&copyrator(
        &["manifests", "webhooks", "--url", "http://127.0.0.1:8443"],
        &[],
    ));
    assert!(err.contains("not an https:// URL"), "{err}");
    let err = one_line_error(&copyrator(
        &[
            "manifests",
            "webhooks",
            "--service",
            "ns/copyrator",
            "--copy-kinds",
            "NetworkPolicy",
        ],
        &[],
    ));
    assert!(err.contains("NetworkPolicy.networking.k8s.io"), "{err}");
    let out = copyrator(
        &[
            "manifests",
            "webhooks",
            "--service",
            "ns/copyrator",
            "--copy-kinds",
            "NetworkPolicy.networking.k8s.io,LimitRange",
        ],
        &[],
    );
    assert!(
        out.status.success(),
        "with its group, and a core kind: {out:?}"
    );
    // serve checks the same list before it starts.
    let err = one_line_error(&copyrator(&["serve", "--copy-kinds", "RoleBinding"], &[]));
    assert!(
        err.contains("RoleBinding.rbac.authorization.k8s.io"),
        "{err}"
    );
}

/// A reflector source whose two lists both name namespaces: from files without Namespace
/// objects, the names are kept (they need no lookup), a warning says what could not be
/// resolved, and `--strict` fails.
#[test]
fn offline_migrate_keeps_plain_names_warns_and_strict_fails() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "sources.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: registry-cred\n  namespace: platform\n  annotations:\n\
         \x20   reflector.v1.k8s.emberstack.com/reflection-allowed: \"true\"\n\
         \x20   reflector.v1.k8s.emberstack.com/reflection-allowed-namespaces: \"team-a,team-b,team-.*\"\n\
         \x20   reflector.v1.k8s.emberstack.com/reflection-auto-enabled: \"true\"\n\
         \x20   reflector.v1.k8s.emberstack.com/reflection-auto-namespaces: \"team-a,team-c\"\n\
         data: {token: dG9rZW4=}\n",
    );
    let out = copyrator(
        &["migrate", "--from", "reflector", "-f", &file, "-o", "yaml"],
        &[],
    );
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("copyrator.io/namespaces: team-a,team-c"),
        "the names both lists give are kept:\n{stdout}"
    );
    assert!(
        stderr.contains("warning") && stderr.contains("Namespace objects"),
        "{stderr}"
    );
    let strict = copyrator(
        &[
            "migrate",
            "--from",
            "reflector",
            "-f",
            &file,
            "-o",
            "yaml",
            "--strict",
        ],
        &[],
    );
    assert!(!strict.status.success(), "--strict fails: {strict:?}");
    let stderr = String::from_utf8_lossy(&strict.stderr);
    let last = stderr.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.contains("migrate --strict") && last.contains("could not be carried over"),
        "{stderr}"
    );
    // -n is one namespace, as kubectl's.
    let err = one_line_error(&copyrator(
        &["migrate", "--from", "reflector", "-f", &file, "-n", "a,b"],
        &[],
    ));
    assert!(err.contains("-n takes one namespace"), "{err}");
}

/// `copyrator resync`: the leader resyncs at once, not at its next interval (an hour here).
#[tokio::test]
async fn resync_makes_the_leader_resync_now() {
    let env = TestEnv::new().await;
    let lease = env.name("resync");
    let resyncs = "copyrator_jobs_total{kind=\"resync\",outcome=\"ok\"}";
    let mut process = Process::spawn(&[
        "--resync-interval=1h",
        "--lease-namespace=default",
        &format!("--lease-name={lease}"),
    ]);
    process.wait_up().await;
    process
        .wait_metric("copyrator_leader", "leading", |v| v == 1.0)
        .await;
    let before = process
        .wait_metric(resyncs, "the startup resync", |v| v >= 1.0)
        .await;
    // Nothing else would resync within the hour.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(process.metric(resyncs).await, before);
    let out = run_copyrator(&["resync", "--lease-name", &lease]).await;
    assert!(out.success, "{out:?}");
    assert!(
        out.stdout.contains("full resync started by the leader"),
        "{out:?}"
    );
    process
        .wait_metric(resyncs, "the requested resync", |v| v > before)
        .await;
    drop(process);
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(env.client.clone(), "default");
    let _ = leases.delete(&lease, &Default::default()).await;
    env.cleanup().await;
}
