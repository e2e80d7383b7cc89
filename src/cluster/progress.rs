//! When each watch last made progress (connected, listed, received an event or a bookmark), for
//! `copyrator_watch_last_progress_seconds{feed}` and for `/livez`: a watch that made none for
//! several API timeouts in a row is wedged, and only a restart is sure to help (SPEC §5).

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::{FeedLabels, Metrics};

/// API timeouts in a row without progress after which a watch counts as wedged. One timeout
/// is a silent connection, which the watch survives by reconnecting; three mean that its
/// reconnections make no progress either.
pub const WEDGED_AFTER_TIMEOUTS: u32 = 3;

/// The watches' progress, shared by the watches and `/livez`.
pub struct WatchProgress {
    /// The API timeout (`--api-timeout`): a watch is wedged after [`WEDGED_AFTER_TIMEOUTS`]
    /// of them.
    api_timeout: Duration,
    started: Instant,
    feeds: Mutex<Vec<Arc<FeedProgress>>>,
    metrics: Arc<Metrics>,
}

/// One watch's progress; see [`WatchProgress`].
pub struct FeedProgress {
    feed: &'static str,
    started: Instant,
    /// Milliseconds from `started` to the last progress.
    last_ms: AtomicU64,
    gauge: Gauge<f64, AtomicU64>,
}

impl FeedProgress {
    /// The watch made progress now.
    pub fn made(&self) {
        self.last_ms
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        self.gauge.set(unix.as_secs_f64());
    }

    /// Time since the last progress.
    fn quiet_for(&self, now: Instant) -> Duration {
        let last = self.started + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        now.saturating_duration_since(last)
    }
}

impl WatchProgress {
    pub fn new(api_timeout: Duration, metrics: Arc<Metrics>) -> Self {
        Self {
            api_timeout,
            started: Instant::now(),
            feeds: Mutex::default(),
            metrics,
        }
    }

    /// The progress of `feed`'s watch, counted from now (a watch that never connects is
    /// wedged as surely as one that stopped).
    pub fn track(&self, feed: &'static str) -> Arc<FeedProgress> {
        let progress = Arc::new(FeedProgress {
            feed,
            started: self.started,
            last_ms: AtomicU64::new(0),
            gauge: self
                .metrics
                .watch_last_progress
                .get_or_create(&FeedLabels { feed })
                .clone(),
        });
        progress.made();
        self.feeds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::clone(&progress));
        progress
    }

    /// The progress of a watch that `/livez` does not judge (a CopyRule selector's, which
    /// comes and goes with its rule and runs on the leader only); its gauge is kept.
    pub fn untracked(&self, feed: &'static str) -> Arc<FeedProgress> {
        let progress = Arc::new(FeedProgress {
            feed,
            started: self.started,
            last_ms: AtomicU64::new(0),
            gauge: self
                .metrics
                .watch_last_progress
                .get_or_create(&FeedLabels { feed })
                .clone(),
        });
        progress.made();
        progress
    }

    /// The watch quiet for longest, with how long, if that is past the wedged limit.
    pub fn wedged(&self) -> Option<(&'static str, Duration)> {
        self.wedged_at(Instant::now())
    }

    fn wedged_at(&self, now: Instant) -> Option<(&'static str, Duration)> {
        let limit = self.api_timeout * WEDGED_AFTER_TIMEOUTS;
        self.feeds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|f| (f.feed, f.quiet_for(now)))
            .filter(|(_, quiet)| *quiet > limit)
            .max_by_key(|(_, quiet)| *quiet)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watch_is_wedged_only_after_three_timeouts_without_progress() {
        let progress = WatchProgress::new(Duration::from_secs(10), Arc::new(Metrics::new()));
        let namespaces = progress.track("namespaces");
        let copies = progress.track("copies");
        let now = Instant::now();
        assert_eq!(progress.wedged_at(now + Duration::from_secs(29)), None);
        namespaces.made();
        let later = Instant::now() + Duration::from_secs(31);
        assert_eq!(
            progress.wedged_at(later).map(|(feed, _)| feed),
            Some("copies")
        );
        copies.made();
        assert_eq!(progress.wedged_at(Instant::now()), None);
    }

    #[test]
    fn progress_is_exported_as_unix_time() {
        let metrics = Arc::new(Metrics::new());
        let progress = WatchProgress::new(Duration::from_secs(10), Arc::clone(&metrics));
        progress.track("namespaces").made();
        let text = metrics.encode();
        let line = text
            .lines()
            .find(|l| l.starts_with("copyrator_watch_last_progress_seconds{feed=\"namespaces\"}"))
            .expect("the gauge is exported");
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .expect("a number");
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!((now - value).abs() < 5.0, "{line}");
    }
}
