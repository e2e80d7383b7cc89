//! The LISTs a copyrator job makes, one kind at a time (part of phase apiserver-profile, on
//! its namespaces and copyrator's copies): kube-apiserver CPU per LIST, from /proc, JSON
//! against protobuf, the watch cache against etcd; then the copies LIST again with unrelated
//! Secrets added to the cluster (the watch cache has no label index: a label-selected LIST
//! walks every Secret it holds).

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ListParams, PostParams};

use crate::{
    CONCURRENCY, LongRun,
    common::secret,
    measure::{control_plane_pids, cpu_time},
    report::Report,
};

const META: &str = ";as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
const JSON: &str = "application/json";
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// One kind of LIST: what it reads and how it is asked for.
struct Case {
    what: &'static str,
    path: String,
    accept: String,
}

/// `copies` selects copyrator's `n` copies, `namespaces` the namespaces they are in.
pub async fn run(
    report: &mut Report,
    lr: &LongRun,
    copies: &str,
    namespaces: &str,
    n: usize,
    lists: usize,
    unrelated: usize,
) {
    let Some([apiserver, _]) = control_plane_pids() else {
        report.note("list cost: skipped (needs scripts/control-plane.sh's pid files)".into());
        return;
    };
    let (copies, namespaces) = (query(copies), query(namespaces));
    let case = |what, path: String, accept: String| Case { what, path, accept };
    let copies_cached = format!("/api/v1/secrets?labelSelector={copies}&resourceVersion=0");
    let cases = [
        case(
            "copies, metadata, watch cache, JSON",
            copies_cached.clone(),
            format!("{JSON}{META}"),
        ),
        case(
            "copies, metadata, watch cache, protobuf",
            copies_cached.clone(),
            format!("{PROTOBUF}{META}"),
        ),
        case(
            "copies, metadata, etcd, JSON",
            format!("/api/v1/secrets?labelSelector={copies}&limit=500"),
            format!("{JSON}{META}"),
        ),
        case(
            "selected namespaces, watch cache, JSON",
            format!("/api/v1/namespaces?labelSelector={namespaces}&resourceVersion=0"),
            JSON.into(),
        ),
        case(
            "selected namespaces, watch cache, protobuf",
            format!("/api/v1/namespaces?labelSelector={namespaces}&resourceVersion=0"),
            PROTOBUF.into(),
        ),
        case(
            "every namespace, etcd, JSON (the re-check after writing)",
            "/api/v1/namespaces?limit=500".into(),
            JSON.into(),
        ),
    ];
    let secrets_in_cluster = count_secrets(&lr.client).await;
    let mut rows = Vec::new();
    for c in &cases {
        let (cpu, wall, bytes) = measure(&lr.client, apiserver, c, lists).await;
        rows.push(vec![
            c.what.to_string(),
            format!("{:.1} ms", ms(cpu)),
            format!("{:.1} ms", ms(wall)),
            format!("{} KB", bytes / 1000),
        ]);
    }
    report.table(
        &format!(
            "apiserver-profile, each LIST alone ({lists} in a row, kube-apiserver CPU from /proc; {n} copies, {secrets_in_cluster} Secrets in the cluster)"
        ),
        &["LIST", "API-server CPU per LIST", "wall per LIST", "response"],
        &rows,
    );

    // The same copies LIST with `unrelated` more Secrets in the cluster, then without them.
    let before = measure(&lr.client, apiserver, &cases[0], lists).await.0;
    let ns = lr.env.namespace("list-cost-unrelated", &[]).await;
    let api = lr.env.secrets(&ns);
    let s = secret(
        "unrelated",
        &[("bench-unrelated", "yes")],
        &[],
        &[("k", "v")],
    );
    stream::iter(0..unrelated)
        .map(|i| {
            let (api, mut s) = (api.clone(), s.clone());
            s.metadata.name = Some(format!("unrelated-{i}"));
            async move { api.create(&PostParams::default(), &s).await }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    let after = measure(&lr.client, apiserver, &cases[0], lists).await.0;
    let per_1000 = (ms(after) - ms(before)) / (unrelated as f64 / 1000.0);
    report.row(
        &format!("copies LIST ({n}) from the watch cache, {unrelated} unrelated Secrets added"),
        format!("{:.1} ms API-server CPU", ms(after)),
        format!("{:.1} ms before", ms(before)),
        format!("{:+.2} ms per 1,000", per_1000),
        "",
    );
    // The later phases (memory) count their own unrelated Secrets. One DELETE of 20,000 may
    // outlast the API server's request deadline (HTTP 500 "context deadline exceeded" with the
    // collection half deleted): ask again until none is left.
    let unrelated_only = ListParams::default().labels("bench-unrelated=yes");
    for attempt in 1.. {
        match api
            .delete_collection(&DeleteParams::default(), &unrelated_only)
            .await
        {
            Ok(_) => break,
            Err(e) if attempt < 10 => eprintln!("deleting the unrelated Secrets again: {e}"),
            Err(e) => panic!("the unrelated Secrets could not be deleted: {e}"),
        }
    }
}

/// kube-apiserver CPU and wall time per LIST of `lists` in a row (after one to warm up), and
/// the response's size (all its pages).
async fn measure(
    client: &kube::Client,
    apiserver: u32,
    c: &Case,
    lists: usize,
) -> (Duration, Duration, usize) {
    list(client, c).await;
    let (cpu0, t0) = (cpu_time(apiserver), Instant::now());
    let mut bytes = 0;
    for _ in 0..lists {
        bytes = list(client, c).await;
    }
    let per = |d: Duration| d / lists as u32;
    (
        per(cpu_time(apiserver).saturating_sub(cpu0)),
        per(t0.elapsed()),
        bytes,
    )
}

/// One LIST, page by page (JSON pages carry the continue token); its bytes.
async fn list(client: &kube::Client, c: &Case) -> usize {
    let mut bytes = 0;
    let mut next: Option<String> = None;
    loop {
        let path = match &next {
            Some(token) => format!("{}&continue={}", c.path, query(token)),
            None => c.path.clone(),
        };
        let req = hyper::Request::get(path)
            .header("Accept", &c.accept)
            .body(kube::client::Body::empty())
            .unwrap();
        let resp = client.send(req).await.expect("LIST");
        assert!(
            resp.status().is_success(),
            "LIST {}: {}",
            c.path,
            resp.status()
        );
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        bytes += body.len();
        next = c
            .accept
            .starts_with(JSON)
            .then(|| serde_json::from_slice::<serde_json::Value>(&body).ok())
            .flatten()
            .and_then(|v| v["metadata"]["continue"].as_str().map(str::to_owned))
            .filter(|t| !t.is_empty());
        if next.is_none() {
            return bytes;
        }
    }
}

async fn count_secrets(client: &kube::Client) -> usize {
    let api: kube::Api<Secret> = kube::Api::all(client.clone());
    let mut lp = ListParams::default().limit(5000);
    let mut total = 0;
    loop {
        let page = api.list_metadata(&lp).await.unwrap();
        total += page.items.len();
        match page.metadata.continue_ {
            Some(t) if !t.is_empty() => lp.continue_token = Some(t),
            _ => return total,
        }
    }
}

/// `s` as a URL query value.
fn query(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
