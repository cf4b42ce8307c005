//! How late updates reach the node: for updates that carry the publisher's send time
//! (TIM_TRK_1, nanoseconds since the Unix epoch), the node's wall clock at reading
//! minus that stamp, sampled (one update in [`SAMPLE_EVERY`]) into fixed buckets.
//! The node's own figure for `/metrics`; the lab measures end to end.

/// One update in this many is looked at (a field lookup and a few comparisons), so
/// the hot path pays a fraction of a nanosecond per update on average.
/// A power of two: the hot path tests it with a mask.
pub const SAMPLE_EVERY: u64 = 16;
const _: () = assert!(SAMPLE_EVERY.is_power_of_two());

/// Upper bounds of the buckets in nanoseconds (10 µs .. 5 s); one more bucket above.
pub const BOUNDS_NS: [u64; 18] = [
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
    200_000_000,
    500_000_000,
    1_000_000_000,
    2_000_000_000,
    5_000_000_000,
];

/// Latency of updates from their publisher's stamp to the node, in buckets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LatencyHistogram {
    /// Samples per bucket (not cumulative); the last one is above every bound.
    pub counts: [u64; BOUNDS_NS.len() + 1],
    /// Sum of the samples (ns).
    pub sum_ns: u64,
    /// Samples counted.
    pub count: u64,
    /// Stamps later than the node's clock (the publisher's clock is ahead): not
    /// counted in the buckets.
    pub ahead: u64,
    /// Stamps more than [`STALE_NS`] old: not a send time (0, or a clock hours off),
    /// not counted either (one such sample, 1.7e18 ns from a stamp of 0, would hold
    /// the sum near its end for good).
    pub stale: u64,
}

/// The oldest stamp taken for a send time: an hour.
pub const STALE_NS: u64 = 3_600_000_000_000;

impl LatencyHistogram {
    /// One update's latency: stamped `stamp_ns`, seen at `now_ns` (wall clock, ns).
    pub fn record(&mut self, stamp_ns: u64, now_ns: u64) {
        let Some(ns) = now_ns.checked_sub(stamp_ns) else {
            self.ahead += 1;
            return;
        };
        if ns > STALE_NS {
            self.stale += 1;
            return;
        }
        let bucket = BOUNDS_NS
            .iter()
            .position(|&b| ns <= b)
            .unwrap_or(BOUNDS_NS.len());
        self.counts[bucket] += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
        self.count += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_fall_in_the_bucket_of_their_bound() {
        let mut h = LatencyHistogram::default();
        let now = 1_000_000_000_000;
        h.record(now - 10_000, now); // exactly a bound: that bucket
        h.record(now - 10_001, now);
        h.record(now - 7_000_000_000, now); // above every bound
        h.record(now + 5, now); // the publisher's clock ahead
        assert_eq!(h.counts[0], 1);
        assert_eq!(h.counts[1], 1);
        assert_eq!(h.counts[BOUNDS_NS.len()], 1);
        assert_eq!((h.count, h.ahead), (3, 1));
        assert_eq!(h.sum_ns, 10_000 + 10_001 + 7_000_000_000);
    }

    /// A stamp that is no send time (0, or hours old) is counted apart: it would
    /// otherwise hold the sum at its end, and the mean wrong, for good.
    #[test]
    fn stamps_hours_old_are_not_latencies() {
        let mut h = LatencyHistogram::default();
        let now = 1_764_000_000_000_000_000; // 2025, in ns
        for _ in 0..20 {
            h.record(0, now);
        }
        h.record(now - STALE_NS - 1, now);
        h.record(now - 50_000, now);
        assert_eq!((h.count, h.stale, h.sum_ns), (1, 21, 50_000));
    }
}
