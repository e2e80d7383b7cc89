//! Waiting for the cluster to get somewhere: polling with a timeout ([`eventually`]) and
//! asserting that nothing happens ([`stays`]).

use std::{
    future::Future,
    time::{Duration, Instant},
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
