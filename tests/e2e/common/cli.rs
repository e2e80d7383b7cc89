//! The `copyrator` binary's one-off commands (`explain`, `migrate`) run against the test
//! cluster, as a user runs them.

use super::env::kubeconfig;

/// What a command printed, and whether it succeeded.
#[derive(Debug)]
pub struct CliOutput {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl CliOutput {
    /// stdout as JSON; panics with both outputs if it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!("not JSON ({e}):\n{}\nstderr:\n{}", self.stdout, self.stderr)
        })
    }
}

/// Runs `copyrator ARGS` with the test cluster's kubeconfig, on a blocking thread (copyrator
/// may be serving webhook calls from the test's runtime meanwhile). copyrator's own
/// environment variables of the test process are not passed on. `explain` is told copyrator's
/// namespace is `default`, where the copyrators of the tests, run out of cluster, keep their
/// Lease unless told otherwise (SPEC §6.3): as a user of such a copyrator must tell it.
pub async fn run_copyrator(args: &[&str]) -> CliOutput {
    run_copyrator_with(args, &[("COPYRATOR_LEASE_NAMESPACE", "default")]).await
}

/// [`run_copyrator`] with only the environment variables `env` of copyrator's own.
pub async fn run_copyrator_with(args: &[&str], env: &[(&str, &str)]) -> CliOutput {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_copyrator"));
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("COPYRATOR_") {
                cmd.env_remove(key);
            }
        }
        let out = cmd
            .args(&args)
            .envs(env)
            .env("COPYRATOR_KUBECONFIG", kubeconfig())
            .output()
            .expect("running copyrator");
        CliOutput {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    })
    .await
    .unwrap()
}

/// `kubectl ARGS` against the test cluster, with `stdin`; (success, stdout, stderr).
pub async fn kubectl(args: &[&str], stdin: &str) -> CliOutput {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let stdin = stdin.to_string();
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig())
            .args(&args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("kubectl");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        CliOutput {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    })
    .await
    .unwrap()
}

/// `kubectl copyrator ARGS` with `stdin`: the copyrator binary installed as a kubectl plugin
/// (`kubectl-copyrator` on the PATH), against the test cluster. copyrator's own environment
/// variables of the test process are not passed on.
pub async fn kubectl_copyrator(args: &[&str], stdin: &str) -> CliOutput {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let stdin = stdin.to_string();
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let plugins = tempfile::tempdir().expect("a plugin directory");
        std::os::unix::fs::symlink(
            env!("CARGO_BIN_EXE_copyrator"),
            plugins.path().join("kubectl-copyrator"),
        )
        .expect("the plugin");
        let path = format!(
            "{}:{}",
            plugins.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = std::process::Command::new("kubectl");
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("COPYRATOR_") {
                cmd.env_remove(key);
            }
        }
        let mut child = cmd
            .arg("copyrator")
            .args(&args)
            .env("PATH", path)
            .env("KUBECONFIG", kubeconfig())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("kubectl");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        CliOutput {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    })
    .await
    .unwrap()
}

/// Runs a shell script with `KUBECONFIG` set to the test cluster's (for `kubectl`).
pub async fn sh(script: &str) -> CliOutput {
    let script = script.to_string();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .env("KUBECONFIG", kubeconfig())
            .output()
            .expect("sh");
        CliOutput {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    })
    .await
    .unwrap()
}
