//! Clients that reach the webhook port and never finish a body (SPEC §6.1, §9.8): whatever they
//! hold, the API server's reviews are answered. Every webhook is `failurePolicy: Ignore`, so a
//! review refused for want of room is a change admitted unchecked: a read-only copy edited, a
//! Pod admitted before its pull secret's copy exists.

use crate::common;

use std::{
    net::IpAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use common::{tenant::Tenant, *};
use copyrator::marks;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{
    ResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Pod reviews copyrator answered (the gate's wait done), whoever sent them.
const PODS_ANSWERED: &str = "copyrator_admission_requests_total{endpoint=\"pods\",operation=\"CREATE\",outcome=\"allowed\"}";

/// Where the flood comes from: another loopback address than the API server's 127.0.0.1.
const FLOOD_FROM: &str = "127.0.0.2";
/// Requests held open at once, a tenth of them chunked.
const STALLED: usize = 300;
const PATHS: [&str; 3] = [
    "/admission/sources",
    "/admission/read-only",
    "/admission/pods",
];

/// The start of a request whose body never ends: its headers and the first bytes of its body.
fn stalled_request(path: &str, chunked: bool) -> Vec<u8> {
    let start =
        r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":""#;
    let framing = if chunked {
        "Transfer-Encoding: chunked".to_string()
    } else {
        "Content-Length: 4096".to_string()
    };
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{framing}\r\n\r\n"
    );
    if chunked {
        request.push_str(&format!("{:x}\r\n{start}\r\n", start.len()));
    } else {
        request.push_str(start);
    }
    request.into_bytes()
}

/// [`STALLED`] requests kept open from [`FLOOD_FROM`]: each task opens a connection, sends a
/// request that never ends, waits until the server answers or closes, and starts again.
struct Flood {
    /// Requests sent and not yet answered or cut off.
    held: Arc<AtomicUsize>,
    /// Requests sent in all.
    sent: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Flood {
    fn start(port: u16, ca: &[u8]) -> Self {
        let from: IpAddr = FLOOD_FROM.parse().unwrap();
        let (held, sent) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let tasks = (0..STALLED)
            .map(|i| {
                let request = stalled_request(PATHS[i % PATHS.len()], i % 10 == 0);
                let (held, sent, ca) = (Arc::clone(&held), Arc::clone(&sent), ca.to_vec());
                tokio::spawn(async move {
                    loop {
                        if let Ok(mut tls) = webhook_tls_from(from, port, &ca).await
                            && tls.write_all(&request).await.is_ok()
                            && tls.flush().await.is_ok()
                        {
                            held.fetch_add(1, Ordering::Relaxed);
                            sent.fetch_add(1, Ordering::Relaxed);
                            let mut buf = [0u8; 512];
                            while matches!(tls.read(&mut buf).await, Ok(n) if n > 0) {}
                            held.fetch_sub(1, Ordering::Relaxed);
                        }
                        // The pressure kept up, without a busy loop of reconnects.
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                })
            })
            .collect();
        Self { held, sent, tasks }
    }

    fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    fn sent(&self) -> usize {
        self.sent.load(Ordering::Relaxed)
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// 300 requests from another address that send their headers and never finish their body (a
/// tenth chunked), to the sources, read-only and Pod endpoints, held open all along: a tenant's
/// edit of a read-only copy is still denied, and 10 Pods, each in a new labelled namespace,
/// are still held until their pull secret's copy exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_bodies_from_another_address_switch_no_enforcement_off() {
    let env = TestEnv::new().await;
    let src = env.namespace("stall-src", &[]).await;
    let tenant = Tenant::new(&env, "stall-team").await;
    let dest = tenant.namespace.clone();
    let key = env.name("stall-pull");
    let pods = env.namespace("stall-pods", &[(&key, "on")]).await;
    service_account(&env.client, &pods).await;
    // The API server calls from 127.0.0.1, the flood from FLOOD_FROM: only the API server's
    // Pod reviews get the pull secrets' patch (SPEC §9.8).
    let mut p = Process::spawn(&[
        "--leader-election=false",
        "--resync-interval",
        "1h",
        "--api-server-cidrs",
        "127.0.0.1/32",
    ]);
    p.wait_up().await;
    env.register_webhooks(&p).await;
    env.config_maps(&src)
        .create(
            &PostParams::default(),
            &config_map(
                "settings",
                &[(marks::SOURCE_LABEL, "true")],
                &[
                    (marks::NAMESPACES_ANNOTATION, dest.as_str()),
                    (marks::READ_ONLY, "true"),
                ],
                &[("mode", "strict")],
            ),
        )
        .await
        .unwrap();
    env.secrets(&src)
        .create(
            &PostParams::default(),
            &registry_secret("registry", &format!("{key}=on"), true),
        )
        .await
        .unwrap();
    env.wait_for::<ConfigMap>(&dest, "settings", "a read-only copy", |c| {
        c.labels().get(marks::READ_ONLY).map(String::as_str) == Some("true")
    })
    .await;
    env.wait_for::<Secret>(&pods, "registry", "the pull secret's copy", |_| true)
        .await;

    let flood = Flood::start(p.webhook_port, &p.ca);
    let started = Instant::now();
    eventually(Duration::from_secs(30), "the flood in place", || async {
        (flood.sent() >= STALLED).then_some(())
    })
    .await;
    let in_place = started.elapsed();
    // Past the body timeout (2 s), so that the flood's first requests were cut off and sent
    // again: what copyrator faces is the flood going on, not its first second.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let open = p.metric("copyrator_webhook_connections").await;
    let held_before = flood.held();

    let edit = tenant
        .config_maps(&dest)
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"mode": "lax"}})),
        )
        .await;
    // Each Pod in a namespace made for it the instant before: admitted only once the gate
    // made its pull secret's copy there, with the copy injected (the API server's address is
    // verified; the flood's is not, SPEC §9.8).
    let answered = || p.metric(PODS_ANSWERED);
    let answered_before = answered().await;
    let mut without = Vec::new();
    let mut not_injected = Vec::new();
    for i in 0..10 {
        let ns = env
            .namespace(&format!("stall-new-{i}"), &[(&key, "on")])
            .await;
        service_account(&env.client, &ns).await;
        let admitted = create_pod(&env.client, &ns, &pod("app", &[], None)).await;
        let injected = admitted
            .spec
            .as_ref()
            .and_then(|s| s.image_pull_secrets.as_ref())
            .is_some_and(|l| l.iter().any(|r| r.name == "registry"));
        if !injected {
            not_injected.push(ns.clone());
        }
        if env
            .secrets(&ns)
            .get_opt("registry")
            .await
            .unwrap()
            .is_none()
        {
            without.push(ns);
        }
    }
    let pods_answered = answered().await - answered_before;
    let held_after = flood.held();
    drop(flood);
    eprintln!(
        "flood in place after {in_place:?}: {held_before} requests held by the client, {open} connections open at copyrator; {held_after} held after the edit and 10 Pods"
    );
    let metrics = p.metrics().await;
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("copyrator_webhook") || l.contains("outcome=\"timeout\""))
    {
        eprintln!("{line}");
    }

    let mut broken = Vec::new();
    match edit {
        Err(kube::Error::Api(status)) if status.message.contains("cannot be edited") => {}
        Err(e) => broken.push(format!("the tenant's edit failed otherwise: {e}")),
        Ok(_) => broken.push("a tenant's edit of a read-only copy was admitted".into()),
    }
    let mode = env
        .config_maps(&dest)
        .get("settings")
        .await
        .unwrap()
        .data
        .unwrap_or_default()
        .remove("mode");
    if mode.as_deref() != Some("strict") {
        broken.push(format!("the read-only copy holds mode={mode:?}"));
    }
    if !without.is_empty() {
        broken.push(format!(
            "{} of 10 Pods were admitted before their pull secret's copy existed: {without:?}",
            without.len()
        ));
    }
    if !not_injected.is_empty() {
        broken.push(format!(
            "{} of 10 Pods were admitted without their pull secret: {not_injected:?}",
            not_injected.len()
        ));
    }
    if pods_answered < 10.0 {
        broken.push(format!(
            "copyrator answered {pods_answered} of the API server's 10 Pod reviews"
        ));
    }
    assert!(
        broken.is_empty(),
        "beside {held_before} stalled requests from {FLOOD_FROM}:\n{}",
        broken.join("\n")
    );
    // Not a flood that never reached copyrator: it held its connections all along.
    assert!(
        open >= 200.0 && held_after >= 200,
        "{open} connections open at copyrator, {held_after} requests held at the end"
    );
    p.terminate();
    env.cleanup().await;
}
