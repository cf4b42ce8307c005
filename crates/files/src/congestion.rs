//! How fast a sender's files go when the network loses: additive increase,
//! multiplicative decrease, on the loss the backbone's receivers report.
//!
//! One stream of datagrams reaches every site, and Aeron repairs a loss by sending the
//! lost range again to every site. When the sites cannot take the pace (a busy host,
//! full socket buffers), each loss brings retransmissions that every site must take
//! too, which makes more loss: a file that goes at 100 MB/s to one site crawled at a
//! few MB/s to four sites on one host. The sites' drivers ask for repairs with NAKs;
//! the sender's driver counts them. Where NAKs come faster than `loss_ratio` of the
//! datagrams sent, the sender's rate is cut by a quarter (at most once a
//! `cut_interval`: the NAKs of what was sent before a cut keep arriving for a while);
//! each `step_interval` without, it grows by a 32nd of the configured rate, up to it.
//! It never goes below an 8th of it: a site that loses whatever the pace (a bad link)
//! costs the others that much at most, and Aeron still repairs its losses.
//!
//! Random loss of a few datagrams in a hundred stays below `loss_ratio`: each lost
//! datagram costs a handful of NAKs, not one per datagram sent.

use std::time::{Duration, Instant};

/// NAKs per datagram sent above which the network is taken to be congested.
pub const LOSS_RATIO: f64 = 0.05;
/// Shortest time between two cuts.
pub const CUT_INTERVAL: Duration = Duration::from_millis(200);
/// How often the rate grows while there is no congestion.
pub const STEP_INTERVAL: Duration = Duration::from_millis(100);

/// The rate a sender may use now, from the network's loss.
#[derive(Debug, Clone)]
pub struct LossControl {
    max: u64,
    rate: u64,
    /// The last sample's counters: NAKs received and datagrams sent.
    last: Option<(u64, u64)>,
    last_cut: Option<Instant>,
    next_step: Instant,
    cuts: u64,
}

impl LossControl {
    /// Starts at `max` bytes a second, the most it ever allows.
    pub fn new(max: u64, now: Instant) -> Self {
        LossControl {
            max: max.max(8),
            rate: max.max(8),
            last: None,
            last_cut: None,
            next_step: now + STEP_INTERVAL,
            cuts: 0,
        }
    }

    /// The rate now, bytes a second.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// Times the rate was cut.
    pub fn cuts(&self) -> u64 {
        self.cuts
    }

    /// The driver's totals so far: NAKs it received and datagrams it sent. Returns the
    /// new rate when it changed.
    pub fn on_counters(&mut self, naks: u64, datagrams: u64, now: Instant) -> Option<u64> {
        let before = self.rate;
        let (naks_then, sent_then) = self
            .last
            .replace((naks, datagrams))
            .unwrap_or((naks, datagrams));
        let new_naks = naks.saturating_sub(naks_then);
        let sent = datagrams.saturating_sub(sent_then);
        let congested = new_naks > 0 && new_naks as f64 > LOSS_RATIO * sent.max(1) as f64;
        if congested {
            if self.last_cut.is_none_or(|at| now >= at + CUT_INTERVAL) {
                self.rate = (self.rate - self.rate / 4).max(self.max / 8);
                self.last_cut = Some(now);
                self.cuts += 1;
            }
            self.next_step = now + STEP_INTERVAL;
        } else if now >= self.next_step {
            self.rate = (self.rate + self.max / 32).min(self.max);
            self.next_step = now + STEP_INTERVAL;
        }
        (self.rate != before).then_some(self.rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;

    #[test]
    fn congestion_cuts_a_quarter_at_most_once_an_interval_down_to_an_eighth() {
        let t0 = Instant::now();
        let mut c = LossControl::new(200 * MB, t0);
        assert_eq!(c.on_counters(0, 0, t0), None);
        // 100 NAKs for 1,000 datagrams: congested.
        assert_eq!(c.on_counters(100, 1000, t0), Some(150 * MB));
        // More within the cut interval: no second cut.
        assert_eq!(
            c.on_counters(200, 2000, t0 + Duration::from_millis(50)),
            None
        );
        let mut now = t0;
        let mut naks = 200;
        let mut sent = 2000;
        for _ in 0..40 {
            now += CUT_INTERVAL;
            naks += 100;
            sent += 1000;
            c.on_counters(naks, sent, now);
        }
        assert_eq!(c.rate(), 25 * MB, "never below an eighth");
    }

    #[test]
    fn random_loss_below_the_ratio_keeps_the_rate_and_quiet_brings_it_back() {
        let t0 = Instant::now();
        let mut c = LossControl::new(200 * MB, t0);
        c.on_counters(0, 0, t0);
        // 1% of datagrams lost, a few NAKs each: 3 NAKs per 100 datagrams.
        let mut now = t0;
        for i in 1..=20u64 {
            now += STEP_INTERVAL;
            c.on_counters(3 * i * 10, 1000 * i, now);
        }
        assert_eq!(c.rate(), 200 * MB);
        assert_eq!(c.cuts(), 0);
        c.on_counters(10_000, 21_000, now);
        assert_eq!(c.rate(), 150 * MB);
        // Eight quiet steps of a 32nd each bring it back, and no further.
        for _ in 0..20 {
            now += STEP_INTERVAL;
            c.on_counters(10_000, 22_000, now);
        }
        assert_eq!(c.rate(), 200 * MB);
    }
}
