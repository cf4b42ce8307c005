//! How fast a sender's files go when the network loses: additive increase,
//! multiplicative decrease, on the NAKs the backbone's receivers send.
//!
//! One stream of datagrams reaches every site, and a loss is repaired by sending again
//! to every site (Aeron's retransmissions, the files layer's repairs). When the sites
//! cannot take the pace (a busy host, full socket buffers), each loss brings more for
//! every site to take, which makes more loss: a file that went at 100 MB/s to one site
//! crawled at about 3 MB/s to four sites on one host, each site reading 2.8 GB for
//! 0.3 GB of files. The sites' drivers ask for what they lost with NAKs, which the
//! sender's driver counts. Over each [`WINDOW`], where the NAKs received pass
//! [`NAK_SHARE`] of the datagrams sent, the rate is cut by a quarter (at most once a
//! [`CUT_INTERVAL`]); otherwise it grows by a 32nd of the configured rate, up to it.
//! It never goes below an 8th of it: a site that loses whatever the pace (a bad link)
//! costs the others that much at most, and its losses are still repaired.
//!
//! Random loss stays below the share: a datagram lost in a hundred costs a few NAKs per
//! site that lost it (the lab's 1% loss at two sites went as fast with this as
//! without); in the collapse above the source received 2.6 NAKs per datagram sent.

use std::time::{Duration, Instant};

/// NAKs received per datagram sent above which the network is taken to be congested.
pub const NAK_SHARE: f64 = 0.1;
/// How long the counters are watched before each decision.
pub const WINDOW: Duration = Duration::from_millis(100);
/// Shortest time between two cuts (the NAKs of what was sent before a cut keep
/// arriving for a while).
pub const CUT_INTERVAL: Duration = Duration::from_millis(200);

/// The rate a sender may use now, from the network's loss.
#[derive(Debug, Clone)]
pub struct LossControl {
    max: u64,
    rate: u64,
    /// The window's start: when, and the driver's totals then (NAKs received,
    /// datagrams sent).
    window: Option<(Instant, u64, u64)>,
    last_cut: Option<Instant>,
    cuts: u64,
}

impl LossControl {
    /// Starts at `max` bytes a second, the most it ever allows.
    pub fn new(max: u64) -> Self {
        LossControl {
            max: max.max(16),
            rate: max.max(16),
            window: None,
            last_cut: None,
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
        let Some((start, naks_then, datagrams_then)) = self.window else {
            self.window = Some((now, naks, datagrams));
            return None;
        };
        if now < start + WINDOW {
            return None;
        }
        self.window = Some((now, naks, datagrams));
        let naks = naks.saturating_sub(naks_then);
        let datagrams = datagrams.saturating_sub(datagrams_then);
        let before = self.rate;
        if naks as f64 > NAK_SHARE * datagrams as f64 {
            if self.last_cut.is_none_or(|at| now >= at + CUT_INTERVAL) {
                self.rate = (self.rate - self.rate / 4).max(self.max / 8);
                self.last_cut = Some(now);
                self.cuts += 1;
            }
        } else {
            self.rate = (self.rate + self.max / 32).min(self.max);
        }
        (self.rate != before).then_some(self.rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1_000_000;

    #[test]
    fn a_congested_window_cuts_a_quarter_down_to_an_eighth() {
        let t0 = Instant::now();
        let mut c = LossControl::new(200 * MB);
        assert_eq!(c.on_counters(0, 0, t0), None);
        // Within the window: no decision yet, however bad.
        assert_eq!(c.on_counters(1000, 100, t0 + WINDOW / 2), None);
        // 2,000 NAKs for 1,000 datagrams over the window: cut.
        assert_eq!(c.on_counters(2000, 1000, t0 + WINDOW), Some(150 * MB));
        let (mut now, mut naks, mut sent) = (t0 + WINDOW, 2000, 1000);
        for _ in 0..40 {
            now += CUT_INTERVAL;
            naks += 500;
            sent += 1000;
            c.on_counters(naks, sent, now);
        }
        assert_eq!(c.rate(), 25 * MB, "never below an eighth");
        assert_eq!(c.cuts(), 41);
    }

    #[test]
    fn random_loss_below_the_share_keeps_the_rate_and_quiet_brings_it_back() {
        let t0 = Instant::now();
        let mut c = LossControl::new(200 * MB);
        c.on_counters(0, 0, t0);
        // 1% lost at each of two sites, a few NAKs each: 6 per 100 datagrams.
        let mut now = t0;
        for i in 1..=20u64 {
            now += WINDOW;
            c.on_counters(i * 60, i * 1000, now);
        }
        assert_eq!(c.rate(), 200 * MB);
        assert_eq!(c.cuts(), 0);
        now += WINDOW;
        c.on_counters(20 * 60 + 1000, 21 * 1000, now);
        assert_eq!(c.rate(), 150 * MB);
        // A cut at most every CUT_INTERVAL, however bad the windows between.
        now += WINDOW;
        c.on_counters(20 * 60 + 3000, 22 * 1000, now);
        assert_eq!(c.rate(), 150 * MB);
        // Eight quiet windows of a 32nd each bring it back, and no further.
        for i in 0..10 {
            now += WINDOW;
            c.on_counters(20 * 60 + 3000, 23 * 1000 + i * 1000, now);
        }
        assert_eq!(c.rate(), 200 * MB);
    }
}
