//! Joining a member to a hub is one `kubectl apply` per side (SPEC §14): what
//! `copyrator manifests hub-join` prints for the hub and for the member, applied with kubectl,
//! and nothing else by hand but the token (which a hub with a token controller fills in the
//! Secret the hub side holds).

use k8s_openapi::api::core::v1::Secret;

use super::fixture::{Hub, Member};
use crate::common::{CONVERGE, Harness, Options, run_copyrator};

/// `kubectl apply -f -` of `manifests` with `kubeconfig`.
fn kubectl_apply(kubeconfig: &std::path::Path, manifests: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(manifests.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn joining_a_member_is_one_kubectl_apply_per_side() {
    const CLUSTER: &str = "joined";
    let hub = Hub::start().await;
    let env = crate::common::TestEnv::new().await;
    let member = Member::prepare(&env).await;
    let h = Harness::start_in(
        env,
        Options {
            extra: member.args(),
            ..Default::default()
        },
    )
    .await;
    let label = h.name("joined");

    // The hub side, applied on the hub.
    let hub_side = run_copyrator(&[
        "manifests",
        "hub-join",
        "--side",
        "hub",
        "--cluster",
        CLUSTER,
    ])
    .await;
    assert!(hub_side.success, "{}", hub_side.stderr);
    let applied = kubectl_apply(&hub.kubeconfig, &hub_side.stdout);
    assert!(
        applied.contains("serviceaccount/copyrator-member-joined"),
        "{applied}"
    );
    // The hub's copyrator places a source on the member and grants it.
    hub.namespace("platform").await;
    hub.source("platform", "cred", "v1").await;
    hub.rule_on(
        "registry",
        ("platform", "cred"),
        ("registry", &label),
        CLUSTER,
    )
    .await;
    hub.grant_members().await;

    // The member side, with the token, applied on the member.
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, hub.token_of(CLUSTER).await).unwrap();
    let selector = format!("registry={label}");
    let member_side = run_copyrator(&[
        "manifests",
        "hub-join",
        "--side",
        "member",
        "--cluster",
        CLUSTER,
        "--link",
        &member.link,
        "--member-namespace",
        &member.own_namespace,
        "--server",
        &hub.server,
        "--ca-file",
        &hub.ca_file().display().to_string(),
        "--token-file",
        &token_file.display().to_string(),
        "--source-namespaces",
        "platform",
        "--trusted-source-namespaces",
        "platform",
        "--namespace-selector",
        &selector,
    ])
    .await;
    assert!(member_side.success, "{}", member_side.stderr);
    kubectl_apply(&crate::common::kubeconfig(), &member_side.stdout);

    let team = h.namespace("team", &[("registry", label.as_str())]).await;
    h.wait_value::<Secret>(&team, "cred", "token", "v1").await;
    member.wait_reachable(&h, "True", CONVERGE).await;
    member.delete_link(&h).await;
    h.finish().await;
}

/// copyrator under the chart's own ServiceAccount and RBAC with `hub.member.enabled` pulls
/// from its hub: the chart grants what a member needs (HubLinks, their status, the token
/// Secret by name) and nothing else is needed.
#[tokio::test]
async fn a_member_under_the_charts_service_account_pulls_from_its_hub() {
    use crate::helm_chart::support::{Release, container_arg, render};
    const CLUSTER: &str = "charted";
    let hub = Hub::start().await;
    let env = crate::common::TestEnv::new().await;
    let member = Member::prepare(&env).await;
    let release_ns = member.own_namespace.clone();
    let name = format!("hubm{}", env.id);
    let fullname = format!("{name}-copyrator");
    let values = [
        "--set",
        "hub.member.enabled=true",
        "--set",
        "hub.member.syncInterval=1s",
    ];
    let mut release = Release::install(&name, &release_ns, &values);
    let interval = container_arg(&render(&name, &release_ns, &values), "--hub-sync-interval");

    let hub_side = run_copyrator(&[
        "manifests",
        "hub-join",
        "--side",
        "hub",
        "--cluster",
        CLUSTER,
    ])
    .await;
    kubectl_apply(&hub.kubeconfig, &hub_side.stdout);
    hub.namespace("platform").await;
    hub.source("platform", "cred", "v1").await;
    let label = env.name("charted");
    hub.rule_on(
        "registry",
        ("platform", "cred"),
        ("registry", &label),
        CLUSTER,
    )
    .await;
    hub.grant_members().await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, hub.token_of(CLUSTER).await).unwrap();
    let member_side = run_copyrator(&[
        "manifests",
        "hub-join",
        "--side",
        "member",
        "--cluster",
        CLUSTER,
        "--link",
        &member.link,
        "--member-namespace",
        &release_ns,
        "--server",
        &hub.server,
        "--ca-file",
        &hub.ca_file().display().to_string(),
        "--token-file",
        &token_file.display().to_string(),
        "--source-namespaces",
        "platform",
        "--trusted-source-namespaces",
        "platform",
        "--namespace-selector",
        &format!("registry={label}"),
    ])
    .await;
    assert!(member_side.success, "{}", member_side.stderr);
    kubectl_apply(&crate::common::kubeconfig(), &member_side.stdout);

    let sa_kubeconfig = dir.path().join("kubeconfig");
    let token = crate::common::service_account_token(&env.client, &release_ns, &fullname).await;
    crate::common::write_token_kubeconfig(&crate::common::kubeconfig(), &token, &sa_kubeconfig);
    let mut p = crate::common::Process::spawn(&[
        "--kubeconfig",
        &sa_kubeconfig.display().to_string(),
        &interval,
        "--lease-namespace",
        &release_ns,
        "--lease-name",
        &fullname,
    ]);
    p.wait_ready().await;
    let team = env.namespace("team", &[("registry", label.as_str())]).await;
    crate::common::eventually(
        CONVERGE,
        "the hub's copy under the chart's RBAC",
        || async {
            let copy = env.secrets(&team).get_opt("cred").await.ok().flatten();
            copy.filter(|s| crate::common::secret_value(s, "token").as_deref() == Some("v1"))
        },
    )
    .await;
    member.wait_reachable(&env, "True", CONVERGE).await;
    assert_eq!(
        p.metric("copyrator_api_errors_total{code=\"403\"}").await,
        0.0,
        "refused something:\n{}",
        p.logs()
    );
    p.terminate();
    member.delete_link(&env).await;
    release.uninstall();
    env.cleanup().await;
}
