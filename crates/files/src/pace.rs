//! The share of bandwidth a sender's file traffic may take: a token bucket.
//!
//! Market data and files share the nodes and the network; files get `rate` bytes a
//! second (with bursts of at most `burst`) and never more, so live data keeps its
//! latency however many files are queued.

use std::time::{Duration, Instant};

/// How fast a sender may go: a byte budget refilled at its rate.
#[derive(Debug, Clone)]
pub struct Pace {
    rate: u64,
    burst: u64,
    tokens: u64,
    at: Instant,
}

impl Pace {
    /// `rate` bytes a second (at least 1), bursts of `burst` bytes (at least one
    /// message must fit: the caller passes a burst no smaller than its largest).
    pub fn new(rate: u64, burst: u64, now: Instant) -> Self {
        Pace {
            rate: rate.max(1),
            burst,
            tokens: burst,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at);
        let add = (elapsed.as_nanos() * u128::from(self.rate) / 1_000_000_000) as u64;
        if add > 0 {
            self.tokens = (self.tokens + add).min(self.burst);
            // Advance by what the tokens cost, not to `now`: no fraction is lost.
            self.at += Duration::from_nanos(
                (u128::from(add) * 1_000_000_000 / u128::from(self.rate)) as u64,
            );
            if self.tokens == self.burst {
                self.at = now;
            }
        }
    }

    /// From `now` on, `rate` bytes a second (at least 1); the tokens held so far stay.
    pub fn set_rate(&mut self, rate: u64, now: Instant) {
        self.refill(now);
        self.rate = rate.max(1);
    }

    /// Takes `bytes` if the bucket holds them.
    pub fn take(&mut self, bytes: u64, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= bytes {
            self.tokens -= bytes;
            true
        } else {
            false
        }
    }

    /// When `bytes` will be available.
    pub fn ready_at(&self, bytes: u64) -> Instant {
        let short = bytes.saturating_sub(self.tokens);
        self.at
            + Duration::from_nanos(
                (u128::from(short) * 1_000_000_000).div_ceil(u128::from(self.rate)) as u64,
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_gives_the_rate_and_no_more() {
        let t0 = Instant::now();
        let mut p = Pace::new(1000, 100, t0);
        assert!(p.take(100, t0));
        assert!(!p.take(1, t0));
        let at = p.ready_at(50);
        assert_eq!(at, t0 + Duration::from_millis(50));
        assert!(p.take(50, at));
        // Over a simulated second in 1 ms steps, at most rate + burst bytes go.
        let mut sent = 0;
        let mut now = at;
        for _ in 0..1000 {
            now += Duration::from_millis(1);
            while p.take(10, now) {
                sent += 10;
            }
        }
        assert!((990..=1100).contains(&sent), "{sent}");
    }
}
