//! Client-side rate limit on Kubernetes API calls: a token bucket (`qps` refill, `burst`
//! capacity). Callers reserve a token and sleep until it is theirs, so waiting callers are
//! served in arrival order and no caller spins.

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

pub struct RateLimiter {
    qps: f64,
    burst: f64,
    state: Mutex<Bucket>,
}

struct Bucket {
    /// May go negative: tokens already promised to sleeping callers.
    tokens: f64,
    last: Instant,
}

impl RateLimiter {
    /// `qps <= 0` disables the limit.
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps,
            burst,
            state: Mutex::new(Bucket {
                tokens: burst,
                last: Instant::now(),
            }),
        }
    }

    pub fn unlimited() -> Self {
        Self::new(0.0, 1)
    }

    /// How long the caller must wait for its token (and takes it).
    fn reserve(&self) -> Duration {
        if self.qps <= 0.0 {
            return Duration::ZERO;
        }
        let mut b = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let refill = now.saturating_duration_since(b.last).as_secs_f64() * self.qps;
        b.tokens = (b.tokens + refill).min(self.burst);
        b.last = now;
        b.tokens -= 1.0;
        if b.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-b.tokens / self.qps)
        }
    }

    /// Waits for a token; returns how long that took (zero when one was there).
    pub async fn acquire(&self) -> Duration {
        let wait = self.reserve();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_is_free_then_callers_wait_their_turn() {
        let rl = RateLimiter::new(100.0, 3);
        assert_eq!(rl.reserve(), Duration::ZERO);
        assert_eq!(rl.reserve(), Duration::ZERO);
        assert_eq!(rl.reserve(), Duration::ZERO);
        let w1 = rl.reserve();
        let w2 = rl.reserve();
        assert!(
            w1 > Duration::from_millis(5) && w1 <= Duration::from_millis(10),
            "{w1:?}"
        );
        assert!(w2 > w1, "later callers wait longer: {w1:?} {w2:?}");
    }

    #[test]
    fn zero_qps_means_unlimited() {
        let rl = RateLimiter::unlimited();
        for _ in 0..1000 {
            assert_eq!(rl.reserve(), Duration::ZERO);
        }
    }
}
