//! Phase restore: a copy deleted or edited by hand, until copyrator has restored it (SPEC
//! §4.4): from the delete / patch response to a watch seeing the copy back with the source's
//! content. copyrator learns of both from its metadata watch of managed copies.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use copyrator::marks;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams},
};
use serde_json::json;

use crate::{
    LongRun,
    common::secret,
    measure::create_namespace,
    payload,
    report::{Report, ms, summary},
};

/// `count` namespaces with a copy each; each copy deleted by hand, one at a time, then each
/// edited by hand, one at a time, 20 ms apart.
pub async fn run(report: &mut Report, lr: &LongRun, count: usize) {
    let LongRun {
        env,
        client,
        namespaces,
        src,
        ..
    } = lr;
    let key = format!("bench-restore-{}", env.id);
    let names: Vec<String> = (0..count)
        .map(|i| env.name(&format!("restore-{i}")))
        .collect();
    for name in &names {
        create_namespace(namespaces, name, &[(&key, "yes")]).await;
        env.track_namespace(name);
    }
    let value = payload(0);
    env.secrets(src)
        .create(
            &PostParams::default(),
            &secret(
                "restore",
                &[(marks::SOURCE_LABEL, "true")],
                &[(marks::NAMESPACE_SELECTOR_ANNOTATION, &format!("{key}=yes"))],
                &[("config.json", &value)],
            ),
        )
        .await
        .unwrap();
    let uid = env
        .secrets(src)
        .get("restore")
        .await
        .unwrap()
        .uid()
        .unwrap();
    let selector = format!("{}={uid}", marks::SOURCE_UID_LABEL);
    let secrets: Api<Secret> = Api::all(client.clone());
    // Every copy in place first.
    for name in &names {
        let api: Api<Secret> = Api::namespaced(client.clone(), name);
        let deadline = Instant::now() + Duration::from_secs(30);
        while api.get_opt("restore").await.unwrap().is_none() {
            assert!(Instant::now() < deadline, "the copy in {name}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    let events = Events::start(&secrets, &selector).await;
    let mut deleted = Vec::new();
    for name in &names {
        let api: Api<Secret> = Api::namespaced(client.clone(), name);
        let old = api.get("restore").await.unwrap().uid();
        let before = Instant::now();
        api.delete("restore", &DeleteParams::default())
            .await
            .unwrap();
        let t = Instant::now();
        deleted.push(
            events
                .wait(name, before, t, |s| s.uid() != old, &value)
                .await,
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut edited = Vec::new();
    for name in &names {
        let api: Api<Secret> = Api::namespaced(client.clone(), name);
        let before = Instant::now();
        api.patch(
            "restore",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"config.json": "edited by hand"}})),
        )
        .await
        .unwrap();
        let t = Instant::now();
        edited.push(events.wait(name, before, t, |_| true, &value).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    events.stop();
    for (what, times) in [("deleted", deleted), ("edited", edited)] {
        let (p50, _, p99, max) = summary(times);
        report.row(
            &format!("copy {what} by hand → restored ({count}), p50 / p99 / max"),
            format!("{} / {} / {}", ms(p50), ms(p99), ms(max)),
            "".into(),
            "".into(),
            "p50 ≤ 50 ms, p99 ≤ 200 ms",
        );
    }
    report.note(format!(
        "restore: {count} copies, each deleted (then each edited) by hand one at a time, 20 ms apart; from the API response to a watch event of the copy back with the source's content; copyrator learns of both from its watch of managed copies"
    ));
}

/// One watch of the source's copies for the whole phase: the latest version of each, by
/// namespace, with when it arrived.
struct Events {
    latest: Arc<Mutex<std::collections::HashMap<String, (Secret, Instant)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Events {
    async fn start(api: &Api<Secret>, selector: &str) -> Self {
        let latest = Arc::new(Mutex::new(std::collections::HashMap::new()));
        let rv = api
            .list_metadata(&kube::api::ListParams::default().labels(selector).limit(1))
            .await
            .unwrap()
            .metadata
            .resource_version
            .unwrap();
        let stream = api
            .watch(&WatchParams::default().labels(selector).timeout(290), &rv)
            .await
            .unwrap();
        let out = Arc::clone(&latest);
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(event)) = stream.next().await {
                if let WatchEvent::Added(s) | WatchEvent::Modified(s) = event {
                    let ns = s.namespace().unwrap_or_default();
                    out.lock().unwrap().insert(ns, (s, Instant::now()));
                }
            }
        });
        Self { latest, task }
    }

    /// Time from `answered` (the API response) until namespace `ns`'s copy, seen after
    /// `sent`, satisfies `check` and holds `value`.
    async fn wait(
        &self,
        ns: &str,
        sent: Instant,
        answered: Instant,
        check: impl Fn(&Secret) -> bool,
        value: &str,
    ) -> Duration {
        let since = answered;
        let deadline = since + Duration::from_secs(30);
        loop {
            if let Some((s, at)) = self.latest.lock().unwrap().get(ns)
                && *at >= sent
                && check(s)
                && s.data
                    .as_ref()
                    .and_then(|d| d.get("config.json"))
                    .is_some_and(|v| v.0 == value.as_bytes())
            {
                return at.saturating_duration_since(since);
            }
            assert!(Instant::now() < deadline, "the copy in {ns} restored");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn stop(self) {
        self.task.abort();
    }
}
