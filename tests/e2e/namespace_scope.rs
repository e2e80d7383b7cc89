//! A namespace-scoped install (SPEC §13) on the real API server with RBAC: copyrator runs as the
//! chart's ServiceAccount, bound only by the Roles and RoleBindings the chart rendered with
//! `scope: namespaces`, with no webhook registered. It may not read Secrets cluster-wide or in
//! a namespace not listed; where it is bound, copies appear, follow and come back within 2 s; a
//! listed namespace whose owner did not bind it gets nothing, said once, at a bounded cost, and
//! its copy once the owner binds it. Two teams' installs side by side each do their job.

use crate::common;

use std::time::{Duration, Instant};

use crate::helm_chart::support::{Release, container_arg, find_named, render};
use common::*;
use copyrator::marks;
use k8s_openapi::api::{
    authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec},
    core::v1::Secret,
    events::v1::Event,
    rbac::v1::{Role, RoleBinding},
};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

/// How long copyrator may take to make, follow or restore a copy with no webhook: its watches
/// are the triggers.
const WITHIN: Duration = Duration::from_secs(2);

/// `kubectl auth can-i VERB secrets [-n NS | --all-namespaces]`, asked as `client`.
async fn can_i(client: &Client, verb: &str, namespace: Option<&str>) -> bool {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                resource: Some("secrets".into()),
                namespace: namespace.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

/// The Events with `reason` about the install's Lease `lease` in `namespace` that name
/// namespace `about`.
async fn events_about(
    env: &TestEnv,
    namespace: &str,
    lease: &str,
    about: &str,
    reason: &str,
) -> Vec<Event> {
    env.api::<Event>(namespace)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.note.as_deref().is_some_and(|n| n.contains(about))
                && e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some("Lease") && r.name.as_deref() == Some(lease)
                })
        })
        .collect()
}

/// Waits at most [`WITHIN`] for `ns/name` to hold `token` = `want`; panics with `what`.
async fn within(env: &TestEnv, ns: &str, name: &str, want: &str, what: &str) {
    let secrets = env.secrets(ns);
    let start = Instant::now();
    loop {
        let got = secrets.get_opt(name).await.unwrap();
        if got
            .as_ref()
            .and_then(|s| secret_value(s, "token"))
            .as_deref()
            == Some(want)
        {
            return;
        }
        assert!(start.elapsed() < WITHIN, "{what}: not within {WITHIN:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_namespace_scoped_install_copies_where_bound_and_nowhere_else() {
    let env = TestEnv::new().await;
    let release_ns = env.namespace("nss-release", &[]).await;
    // a holds the source, b wants it; c is listed but its owner did not bind copyrator; d is
    // not listed.
    let a = env.namespace("nss-a", &[]).await;
    let b = env.namespace("nss-b", &[]).await;
    let c = env.namespace("nss-c", &[]).await;
    let d = env.namespace("nss-d", &[]).await;
    let name = format!("nss{}", env.id);
    let fullname = format!("{name}-copyrator");
    let listed = format!("namespaces=[\"{a}\",\"{b}\",\"{c}\"]");
    let values = ["--set", "scope=namespaces", "--set-json", listed.as_str()];
    let mut release = Release::install(&name, &release_ns, &values);
    // c's owner never applied the Role and RoleBinding: take away what the chart rendered.
    let _ = Api::<RoleBinding>::namespaced(env.client.clone(), &c)
        .delete(&fullname, &DeleteParams::default())
        .await;
    let _ = Api::<Role>::namespaced(env.client.clone(), &c)
        .delete(&fullname, &DeleteParams::default())
        .await;

    let dir = tempfile::tempdir().unwrap();
    let sa_kubeconfig = dir.path().join("kubeconfig");
    let token = service_account_token(&env.client, &release_ns, &fullname).await;
    write_token_kubeconfig(&kubeconfig(), &token, &sa_kubeconfig);
    let kc = sa_kubeconfig.display().to_string();
    let as_copyrator = copyrator::cluster::client::kube_client(Some(&sa_kubeconfig))
        .await
        .unwrap();
    assert!(
        !can_i(&as_copyrator, "list", None).await,
        "copyrator may list secrets --all-namespaces"
    );
    for ns in [&c, &d] {
        assert!(
            !can_i(&as_copyrator, "get", Some(ns)).await,
            "copyrator may get secrets in {ns}"
        );
    }
    assert!(
        can_i(&as_copyrator, "get", Some(&b)).await,
        "the review says yes where copyrator is bound"
    );

    // As a replica of the release runs it: the chart's --namespaces, its Lease.
    let namespaces = container_arg(&render(&name, &release_ns, &values), "--namespaces");
    let mut p = Process::spawn(&[
        "--kubeconfig",
        &kc,
        &namespaces,
        "--trusted-namespaces",
        &a,
        "--lease-namespace",
        &release_ns,
        "--lease-name",
        &fullname,
        "--resync-interval",
        "1h",
    ]);
    p.wait_ready().await;

    let targets = format!("{b},{c},{d}");
    let source = secret(
        "cred",
        &[(marks::SOURCE_LABEL, "true")],
        &[(marks::NAMESPACES_ANNOTATION, &targets)],
        &[("token", "v1")],
    );
    env.secrets(&a)
        .create(&PostParams::default(), &source)
        .await
        .unwrap();
    within(&env, &b, "cred", "v1", "the copy in a bound namespace").await;

    env.secrets(&a)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"token": "v2"}})),
        )
        .await
        .unwrap();
    within(&env, &b, "cred", "v2", "the copy following its source").await;

    env.secrets(&b)
        .delete("cred", &DeleteParams::default())
        .await
        .unwrap();
    within(&env, &b, "cred", "v2", "the deleted copy restored").await;

    env.secrets(&b)
        .patch(
            "cred",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"token": "edited"}})),
        )
        .await
        .unwrap();
    within(&env, &b, "cred", "v2", "the edited copy restored").await;

    // Nothing where copyrator is not bound, nor where it is not listed.
    for ns in [&c, &d] {
        assert!(
            env.secrets(ns).get_opt("cred").await.unwrap().is_none(),
            "a copy in {ns}"
        );
    }
    // One line says why c gets nothing, and c costs a bounded number of refused calls.
    let refused = p.metric("copyrator_api_errors_total{code=\"403\"}").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let refused_later = p.metric("copyrator_api_errors_total{code=\"403\"}").await;
    let logs = p.logs();
    let said: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("not bound in this listed namespace"))
        .collect();
    assert!(
        said.len() == 1 && said[0].contains(c.as_str()),
        "one line about {c}: {said:?}\n{logs}"
    );
    assert_eq!(
        p.metric("copyrator_namespaces_not_bound").await,
        1.0,
        "the metric counts {c}"
    );
    assert!(
        refused <= 10.0 && refused_later <= refused + 1.0,
        "refused calls: {refused}, then {refused_later} 5 s later\n{logs}"
    );
    for ns in [&c, &d] {
        assert!(
            env.secrets(ns).get_opt("cred").await.unwrap().is_none(),
            "a copy in {ns}"
        );
    }
    // Said in an Event beside the Lease, naming the install, and by explain, which reads the
    // Lease; explain also says d is not served at all.
    let told = eventually(CONVERGE, "a NotBound Event about c", || async {
        events_about(&env, &release_ns, &fullname, &c, "NotBound")
            .await
            .pop()
    })
    .await;
    let instance = told.reporting_instance.unwrap_or_default();
    assert!(
        instance.starts_with(&format!("{release_ns}/{fullname}/")),
        "the Event names the install: {instance}"
    );
    let lease = [
        "--lease-namespace",
        release_ns.as_str(),
        "--lease-name",
        &fullname,
    ];
    for (ns, says) in [
        (&c, format!("copyrator is not bound in {c}")),
        (&d, format!("{d} is not one of its namespaces")),
    ] {
        eventually(CONVERGE, "explain saying why", || async {
            let mut args = vec!["explain", "namespace", ns.as_str()];
            args.extend(lease);
            let out = run_copyrator_with(&args, &[]).await;
            (out.success && out.stdout.contains(&says)).then_some(())
        })
        .await;
    }
    let install = format!(
        "copyrator_install_info{{install=\"{release_ns}/{fullname}\",scope=\"namespaces\"}}"
    );
    assert_eq!(
        p.metric(&install).await,
        1.0,
        "the metrics name the install"
    );

    // Quiet watches are not renewed every few seconds: a watch per feed and namespace shares
    // HTTP/2 connections that PINGs keep honest (10 watches here; on connections of their own
    // each would be renewed every 6 s).
    let watches = "copyrator_api_requests_total{verb=\"watch\",resource=\"watch\"}";
    let before = p.metric(watches).await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let renewed = p.metric(watches).await - before;
    assert!(renewed <= 2.0, "{renewed} watch requests in 15 s of quiet");

    // c's owner consents later, with the Role and RoleBinding the chart renders for c: the
    // copy follows within one look at c (every 30 s), with no restart.
    let for_c = render(
        &name,
        &release_ns,
        &[
            "--set",
            "scope=namespaces",
            "--set-json",
            &format!("namespaces=[\"{c}\"]"),
        ],
    );
    let role: Role =
        serde_json::from_value((*find_named(&for_c, "Role", &fullname)).clone()).unwrap();
    let binding: RoleBinding =
        serde_json::from_value((*find_named(&for_c, "RoleBinding", &fullname)).clone()).unwrap();
    Api::<Role>::namespaced(env.client.clone(), &c)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(env.client.clone(), &c)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    // One look every 30 s (NOT_BOUND_RECHECK), then a resync.
    let consented = Instant::now();
    eventually(
        Duration::from_secs(40),
        "the copy once c's owner consented",
        || async {
            let copy: Option<Secret> = env.secrets(&c).get_opt("cred").await.unwrap();
            copy.filter(holding("token", "v2")).map(drop)
        },
    )
    .await;
    eprintln!("copy in c {:?} after consent", consented.elapsed());
    assert_eq!(p.metric("copyrator_namespaces_not_bound").await, 0.0);
    eventually(CONVERGE, "a Bound Event about c", || async {
        events_about(&env, &release_ns, &fullname, &c, "Bound")
            .await
            .pop()
    })
    .await;
    assert!(p.logs().contains("now bound"), "{}", p.logs());
    assert!(
        env.secrets(&d).get_opt("cred").await.unwrap().is_none(),
        "a copy in {d}, never listed"
    );
    p.terminate();
    release.uninstall();
    env.cleanup().await;
}

/// A release of `scope: namespaces` serving `listed`, and copyrator running as its
/// ServiceAccount with the chart's `--namespaces`, trusting sources in `trusted`, on its own
/// Lease.
struct ScopedInstall {
    release: Release,
    process: Process,
    /// `<namespace>/<name>` of its Lease.
    lease: String,
    _dir: tempfile::TempDir,
}

fn lease_of(install: &ScopedInstall) -> String {
    install.lease.clone()
}

async fn scoped_install(
    env: &TestEnv,
    base: &str,
    listed: &[&str],
    trusted: &str,
) -> ScopedInstall {
    let release_ns = env.namespace(&format!("{base}-release"), &[]).await;
    let name = format!("{base}{}", env.id);
    let fullname = format!("{name}-copyrator");
    let listed = format!("namespaces={}", serde_json::to_string(listed).unwrap());
    let values = ["--set", "scope=namespaces", "--set-json", listed.as_str()];
    let release = Release::install(&name, &release_ns, &values);
    let dir = tempfile::tempdir().unwrap();
    let sa_kubeconfig = dir.path().join("kubeconfig");
    let token = service_account_token(&env.client, &release_ns, &fullname).await;
    write_token_kubeconfig(&kubeconfig(), &token, &sa_kubeconfig);
    let namespaces = container_arg(&render(&name, &release_ns, &values), "--namespaces");
    let process = Process::spawn(&[
        "--kubeconfig",
        &sa_kubeconfig.display().to_string(),
        &namespaces,
        "--trusted-namespaces",
        trusted,
        "--leader-election=true",
        "--lease-namespace",
        &release_ns,
        "--lease-name",
        &fullname,
        "--resync-interval",
        "1h",
    ]);
    ScopedInstall {
        release,
        process,
        lease: format!("{release_ns}/{fullname}"),
        _dir: dir,
    }
}

#[tokio::test]
async fn two_teams_and_a_cluster_wide_install_side_by_side_each_do_their_job() {
    let env = TestEnv::new().await;
    // Team 1 serves src1 and dst1, team 2 src2 and dst2; each source asks for both targets.
    let src1 = env.namespace("nst-src1", &[]).await;
    let dst1 = env.namespace("nst-dst1", &[]).await;
    let src2 = env.namespace("nst-src2", &[]).await;
    let dst2 = env.namespace("nst-dst2", &[]).await;
    // The platform's cluster-wide install serves the rest: the teams' namespaces are excluded
    // from it (SPEC §13), and its source asks for its own target and a team's.
    let platform = env.namespace("nst-platform", &[]).await;
    let shared = env.namespace("nst-shared", &[]).await;
    let excluded = format!("kube-system,kube-node-lease,{src1},{dst1},{src2},{dst2}");
    let mut cluster_wide = Process::spawn(&[
        "--exclude-namespaces",
        &excluded,
        "--lease-namespace",
        &platform,
        "--resync-interval",
        "1h",
    ]);
    let mut one = scoped_install(&env, "nst1", &[&src1, &dst1], &src1).await;
    let mut two = scoped_install(&env, "nst2", &[&src2, &dst2], &src2).await;
    one.process.wait_ready().await;
    two.process.wait_ready().await;
    cluster_wide.wait_ready().await;
    let source = secret(
        "cred",
        &[(marks::SOURCE_LABEL, "true")],
        &[(marks::NAMESPACES_ANNOTATION, &format!("{shared},{dst1}"))],
        &[("token", "platform")],
    );
    env.secrets(&platform)
        .create(&PostParams::default(), &source)
        .await
        .unwrap();
    let targets = format!("{dst1},{dst2}");
    for (src, value) in [(&src1, "one"), (&src2, "two")] {
        let source = secret(
            "cred",
            &[(marks::SOURCE_LABEL, "true")],
            &[(marks::NAMESPACES_ANNOTATION, &targets)],
            &[("token", value)],
        );
        env.secrets(src)
            .create(&PostParams::default(), &source)
            .await
            .unwrap();
    }
    within(&env, &dst1, "cred", "one", "team 1's copy in its namespace").await;
    within(&env, &dst2, "cred", "two", "team 2's copy in its namespace").await;
    within(
        &env,
        &shared,
        "cred",
        "platform",
        "the cluster-wide install's copy",
    )
    .await;
    let version = |ns: String| {
        let secrets = env.secrets(&ns);
        async move {
            secrets
                .get_opt("cred")
                .await
                .unwrap()
                .and_then(|s| s.metadata.resource_version)
        }
    };
    let team_versions = (version(dst1.clone()).await, version(dst2.clone()).await);
    // Each leads on its own Lease; neither wrote where the other serves.
    for (install, team) in [(&one, "1"), (&two, "2")] {
        assert_eq!(
            install.process.metric("copyrator_leader").await,
            1.0,
            "team {team}'s install leads its own Lease"
        );
        assert_eq!(
            install
                .process
                .metric("copyrator_api_errors_total{code=\"403\"}")
                .await,
            0.0,
            "team {team}'s install was refused something\n{}",
            install.process.logs()
        );
    }
    let value = |ns: String| {
        let secrets = env.secrets(&ns);
        async move {
            secrets
                .get_opt("cred")
                .await
                .unwrap()
                .and_then(|s| secret_value(&s, "token"))
        }
    };
    stays(
        Duration::from_secs(3),
        "each copy stays its own team's, unwritten",
        || async {
            value(dst1.clone()).await.as_deref() == Some("one")
                && value(dst2.clone()).await.as_deref() == Some("two")
                && (version(dst1.clone()).await, version(dst2.clone()).await) == team_versions
                && value(shared.clone()).await.as_deref() == Some("platform")
        },
    )
    .await;
    // Each names its install (its Lease) in its metrics.
    for (process, install, scope) in [
        (&cluster_wide, format!("{platform}/copyrator"), "cluster"),
        (&one.process, lease_of(&one), "namespaces"),
    ] {
        let info = format!("copyrator_install_info{{install=\"{install}\",scope=\"{scope}\"}}");
        assert_eq!(process.metric(&info).await, 1.0, "{info}");
    }
    cluster_wide.terminate();
    for mut install in [one, two] {
        install.process.terminate();
        install.release.uninstall();
    }
    env.cleanup().await;
}

/// Webhooks an administrator registers for a namespace-scoped install work for its namespaces
/// (SPEC §13): a Pod in a listed namespace finds the pull secret it needs, injected, the moment
/// it is admitted; one in a namespace not listed, labelled the same, gets nothing.
#[tokio::test]
async fn registered_webhooks_gate_pods_in_the_listed_namespaces_only() {
    let env = TestEnv::new().await;
    let key = format!("nsw{}", env.id);
    let selector = format!("{key}=on");
    let src = env.namespace("nsw-src", &[]).await;
    let listed = env.namespace("nsw-listed", &[]).await;
    let other = env.namespace("nsw-other", &[(&key, "on")]).await;
    // Verifying the API server: its Pod reviews get the pull secret's patch (SPEC §9.8).
    let Some(opts) = (Options {
        extra: vec![
            format!("--namespaces={src},{listed}"),
            format!("--trusted-namespaces={src}"),
        ],
        ..Default::default()
    })
    .verifying() else {
        return;
    };
    let t = Harness::start_in(env, opts).await;
    t.secrets(&src)
        .create(
            &PostParams::default(),
            &registry_secret("registry", &selector, true),
        )
        .await
        .unwrap();
    for ns in [&listed, &other] {
        service_account(&t.client, ns).await;
    }
    crate::pod_gate::wait_for_pod_gate(&t.client, &listed, || {
        t.metric(crate::pod_gate::DRY_RUN_PODS)
    })
    .await;
    // Labelled now: the namespace webhook and the Pod right after it race the watches.
    Api::<k8s_openapi::api::core::v1::Namespace>::all(t.client.clone())
        .patch(
            &listed,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {&key: "on"}}})),
        )
        .await
        .unwrap();
    let admitted = create_pod(&t.client, &listed, &pod("app", &[], None)).await;
    assert_eq!(pull_secret_names(&admitted), ["registry"]);
    assert!(
        t.secrets(&listed)
            .get_opt("registry")
            .await
            .unwrap()
            .is_some(),
        "the pull secret is there when its Pod is admitted"
    );
    let elsewhere = create_pod(&t.client, &other, &pod("app", &[], None)).await;
    assert!(pull_secret_names(&elsewhere).is_empty());
    assert!(
        t.secrets(&other)
            .get_opt("registry")
            .await
            .unwrap()
            .is_none(),
        "a copy in {other}, not listed"
    );
    t.finish().await;
}
