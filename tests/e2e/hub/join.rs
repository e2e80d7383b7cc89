//! Joining a member to a hub is one `kubectl apply` per side (SPEC §14): what
//! `copyrator manifests hub-join` prints for the hub and for the member, applied with kubectl,
//! and nothing else by hand but the token (which a hub with a token controller fills in the
//! Secret the hub side holds).

use k8s_openapi::api::core::v1::Secret;

use super::fixture::{Hub, Member};
use crate::common::{CONVERGE, Harness, Options, run_copyrator};

/// `kubectl apply -f -` of `manifests` with `kubeconfig`; panics with kubectl's error.
fn kubectl_apply(kubeconfig: &std::path::Path, manifests: &str) {
    let (ok, stderr) = crate::common::tenant::kubectl_apply_with(kubeconfig, manifests);
    assert!(ok, "kubectl apply: {stderr}");
}

/// Joins member `cluster` to `hub` with `copyrator manifests hub-join`, one `kubectl apply`
/// per side: the hub side, then the member side with `link` in `member_namespace`, accepting
/// `platform`'s sources into namespaces labelled `registry=<label>`. The hub places `cred` of
/// `platform` on the member meanwhile (as the hub's copyrator would grant it).
async fn join(hub: &Hub, cluster: &str, link: &str, member_namespace: &str, label: &str) {
    let hub_side = run_copyrator(&[
        "manifests",
        "hub-join",
        "--side",
        "hub",
        "--cluster",
        cluster,
    ])
    .await;
    assert!(hub_side.success, "{}", hub_side.stderr);
    kubectl_apply(&hub.kubeconfig, &hub_side.stdout);
    hub.namespace("platform").await;
    hub.source("platform", "cred", "v1").await;
    hub.rule_on(
        "registry",
        ("platform", "cred"),
        ("registry", label),
        cluster,
    )
    .await;
    hub.grant_members().await;

    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, hub.token_of(cluster).await).unwrap();
    let selector = format!("registry={label}");
    let ca_file = hub.ca_file().display().to_string();
    let token_file = token_file.display().to_string();
    let member_side = run_copyrator(&[
        "manifests",
        "hub-join",
        "--side",
        "member",
        "--cluster",
        cluster,
        "--link",
        link,
        "--member-namespace",
        member_namespace,
        "--server",
        &hub.server,
        "--ca-file",
        &ca_file,
        "--token-file",
        &token_file,
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

    join(&hub, CLUSTER, &member.link, &member.own_namespace, &label).await;

    let team = h.namespace("team", &[("registry", label.as_str())]).await;
    h.wait_value::<Secret>(&team, "cred", "token", "v1").await;
    member.wait_reachable(&h, "True", CONVERGE).await;
    member.delete_link(&h).await;
    h.finish().await;
}

/// copyrator under the chart's own ServiceAccount and RBAC with `hub.member.enabled` pulls
/// from its hub: the chart grants what a member needs (HubLinks and their status; the token
/// Secret is read with the Secret rights copyrator holds anyway) and nothing else is needed.
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

    let label = env.name("charted");
    join(&hub, CLUSTER, &member.link, &release_ns, &label).await;
    let dir = tempfile::tempdir().unwrap();

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
