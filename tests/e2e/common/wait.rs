//! Waiting for the cluster to get somewhere: polling with a timeout ([`eventually`]), asserting
//! that nothing happens ([`stays`]), and the generic waits for any kind of object built on
//! them — one object by name, one object's absence, any object of a namespace.

use std::{
    fmt::Debug,
    future::Future,
    time::{Duration, Instant},
};

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::{Api, Client, Resource, api::ListParams};
use serde::de::DeserializeOwned;

use super::{
    env::TestEnv,
    http::metric_value,
    objects::{Data, holding},
};

/// How long tests wait for copyrator to converge. A correctness bound, not a performance claim.
pub const CONVERGE: Duration = Duration::from_secs(20);

/// Polls `check` until it returns `Some`, or panics after `timeout` with `what`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Asserts that `check` keeps holding for `period` (for "nothing happens" assertions).
pub async fn stays<F, Fut>(period: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < period {
        assert!(check().await, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Where objects of a kind live: the `Api` of namespace `ns` for a namespaced kind, the
/// cluster-wide one for a cluster-scoped kind (whose `ns` is "").
pub trait Scope {
    fn api<K>(client: Client, ns: &str) -> Api<K>
    where
        K: Resource<Scope = Self, DynamicType = ()>;
}

impl Scope for NamespaceResourceScope {
    fn api<K>(client: Client, ns: &str) -> Api<K>
    where
        K: Resource<Scope = Self, DynamicType = ()>,
    {
        Api::namespaced(client, ns)
    }
}

impl Scope for ClusterResourceScope {
    fn api<K>(client: Client, ns: &str) -> Api<K>
    where
        K: Resource<Scope = Self, DynamicType = ()>,
    {
        debug_assert!(ns.is_empty(), "{} is cluster-scoped", K::kind(&()));
        Api::all(client)
    }
}

/// A kind of object the waits work with: any built-in or CopyRule.
pub trait Object:
    Resource<DynamicType = (), Scope: Scope> + Clone + DeserializeOwned + Debug
{
}

impl<K> Object for K where
    K: Resource<DynamicType = (), Scope: Scope> + Clone + DeserializeOwned + Debug
{
}

fn api<K: Object>(client: &Client, ns: &str) -> Api<K> {
    <K::Scope as Scope>::api::<K>(client.clone(), ns)
}

/// `Kind ns/name` (or `Kind name`), for messages.
fn describe<K: Object>(ns: &str, name: &str) -> String {
    let kind = K::kind(&());
    if ns.is_empty() {
        format!("{kind} {name}")
    } else {
        format!("{kind} {ns}/{name}")
    }
}

/// Waits (up to [`CONVERGE`]) until object `ns/name` exists and satisfies `check`; returns it.
/// `ns` is "" for a cluster-scoped kind; `what` says what is awaited, for the failure message.
pub async fn wait_for<K: Object>(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    check: impl Fn(&K) -> bool,
) -> K {
    let api = api::<K>(client, ns);
    let what = format!("{}: {what}", describe::<K>(ns, name));
    eventually(CONVERGE, &what, || async {
        api.get_opt(name).await.ok().flatten().filter(|o| check(o))
    })
    .await
}

/// Waits (up to [`CONVERGE`]) until object `ns/name` no longer exists.
pub async fn wait_gone<K: Object>(client: &Client, ns: &str, name: &str) {
    let api = api::<K>(client, ns);
    let what = format!("{} deleted", describe::<K>(ns, name));
    eventually(CONVERGE, &what, || async {
        matches!(api.get_opt(name).await, Ok(None)).then_some(())
    })
    .await
}

/// Waits (up to [`CONVERGE`]) until some object of namespace `ns` satisfies `check`; returns
/// the oldest one that does (by creation time, then in list order).
pub async fn wait_for_any<K: Object>(
    client: &Client,
    ns: &str,
    what: &str,
    check: impl Fn(&K) -> bool,
) -> K {
    let api = api::<K>(client, ns);
    let kind = K::kind(&());
    let what = format!("{kind} in {ns}: {what}");
    eventually(CONVERGE, &what, || async {
        let mut found: Vec<K> = api
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|o| check(o))
            .collect();
        found.sort_by_key(|o| o.meta().creation_timestamp.clone());
        found.into_iter().next()
    })
    .await
}

impl TestEnv {
    /// An `Api` for kind `K` in namespace `ns` ("" for a cluster-scoped kind).
    pub fn api<K: Object>(&self, ns: &str) -> Api<K> {
        api(&self.client, ns)
    }

    /// [`wait_for`] in this test's cluster: e.g.
    /// `env.wait_for::<Secret>(&ns, "cred", "v=1", holding("v", "1")).await`.
    pub async fn wait_for<K: Object>(
        &self,
        ns: &str,
        name: &str,
        what: &str,
        check: impl Fn(&K) -> bool,
    ) -> K {
        wait_for(&self.client, ns, name, what, check).await
    }

    /// [`wait_for`] object `ns/name` (a Secret or ConfigMap) to hold `key` = `want`.
    pub async fn wait_value<K>(&self, ns: &str, name: &str, key: &str, want: &str) -> K
    where
        K: Object + Data,
    {
        let what = format!("holding {key}={want}");
        wait_for(&self.client, ns, name, &what, holding(key, want)).await
    }

    /// [`wait_gone`] in this test's cluster.
    pub async fn wait_gone<K: Object>(&self, ns: &str, name: &str) {
        wait_gone::<K>(&self.client, ns, name).await
    }

    /// [`wait_for_any`] in this test's cluster.
    pub async fn wait_for_any<K: Object>(
        &self,
        ns: &str,
        what: &str,
        check: impl Fn(&K) -> bool,
    ) -> K {
        wait_for_any(&self.client, ns, what, check).await
    }
}

/// Waits (up to [`CONVERGE`]) until the sample `read` returns satisfies `check`; returns it.
pub(crate) async fn wait_metric<F, Fut>(what: &str, read: F, check: impl Fn(f64) -> bool) -> f64
where
    F: Fn() -> Fut,
    Fut: Future<Output = f64>,
{
    eventually(CONVERGE, what, || async {
        let v = read().await;
        check(v).then_some(v)
    })
    .await
}

/// Waits (up to [`CONVERGE`]) until copyrator, whose metrics `read` returns, is idle: no job
/// queued (due now or later: a second look, a retry) or running, and every metadata watch
/// connected; in two reads 200 ms apart, so that the watch echo of a last write, which can
/// queue a job just after the first read, is seen. Counts read after this are final: use it
/// instead of a sleep before asserting an exact number of writes, conflicts or Events.
pub(crate) async fn quiescent<F, Fut>(read: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = String>,
{
    let start = Instant::now();
    let mut idle_reads = 0;
    loop {
        if start.elapsed() > CONVERGE {
            panic!("timed out after {CONVERGE:?} waiting for copyrator to be idle");
        }
        if !idle(&read().await) {
            idle_reads = 0;
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        idle_reads += 1;
        if idle_reads == 2 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether Prometheus text says copyrator is idle (see [`quiescent`]).
fn idle(metrics: &str) -> bool {
    let watches_live = metrics
        .lines()
        .filter(|l| l.starts_with("copyrator_watch_live{"))
        .all(|l| l.ends_with(" 1"));
    metric_value(metrics, "copyrator_queue_depth ") == 0.0
        && metric_value(metrics, "copyrator_jobs_in_flight ") == 0.0
        && watches_live
}
