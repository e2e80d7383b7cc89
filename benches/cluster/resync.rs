//! Phase resync: what one steady-state resync of a fresh copyrator costs (API calls, bytes
//! read, writes, CPU, duration), at the cluster as the memory phase left it.

use std::time::Duration;

use crate::{
    common::{Process, metric_value},
    measure::{api_calls, call_breakdown, cpu_time, memory, wait_resyncs},
    report::{Report, ms},
};

/// A fresh process at the cluster as it is, after three resyncs.
pub struct Fresh {
    /// VmRSS and VmHWM in MiB, after the third resync.
    pub rss: f64,
    pub peak: f64,
    /// /metrics before and after the third resync, and the CPU it took.
    before: String,
    after: String,
    cpu: Duration,
}

/// The fresh process (a resync every 15 s) at the full load: its startup resync's peak, its
/// steady state, one resync's cost.
pub async fn fresh_process() -> Fresh {
    let mut fresh = Process::spawn(&[
        "--leader-election=false",
        "--resync-interval",
        "15s",
        "--log-level",
        "warn",
    ]);
    fresh.wait_up().await;
    let fresh_pid = fresh.child.id();
    wait_resyncs(&fresh, 1.0, Duration::from_secs(120)).await;
    wait_resyncs(&fresh, 2.0, Duration::from_secs(60)).await;
    let before = fresh.metrics().await;
    let cpu_before = cpu_time(fresh_pid);
    wait_resyncs(&fresh, 3.0, Duration::from_secs(60)).await;
    let cpu = cpu_time(fresh_pid).saturating_sub(cpu_before);
    let after = fresh.metrics().await;
    let (rss, peak) = memory(fresh_pid);
    fresh.terminate();
    Fresh {
        rss,
        peak,
        before,
        after,
        cpu,
    }
}

/// The resync rows of `fresh`, at `total_ns` namespaces.
pub fn rows(report: &mut Report, fresh: &Fresh, total_ns: usize) {
    let Fresh {
        before, after, cpu, ..
    } = fresh;
    let cpu = *cpu;
    let delta = |s: &str| metric_value(after, s) - metric_value(before, s);
    let calls = call_breakdown(before, after);
    let total_calls: f64 = api_calls(after) - api_calls(before);
    let writes: f64 = ["create", "update", "delete"]
        .iter()
        .map(|v| delta(&format!("copyrator_copy_writes_total{{verb=\"{v}\"}}")))
        .sum();
    let resync_secs = delta("copyrator_resync_duration_seconds_sum");
    report.row(
        &format!("steady-state resync at {total_ns} namespaces"),
        format!(
            "{total_calls:.0} calls, {:.2} MB read",
            delta("copyrator_api_response_bytes_total") / 1e6
        ),
        "".into(),
        "".into(),
        "a handful of LISTs",
    );
    report.row(
        "steady-state resync: writes / CPU / duration",
        format!(
            "{writes:.0} writes, {} CPU, {}",
            ms(cpu),
            ms(Duration::from_secs_f64(resync_secs))
        ),
        "".into(),
        "".into(),
        "zero writes",
    );
    report.note(format!("resync calls by verb/resource: {calls}"));
}
