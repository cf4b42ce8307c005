//! Latency as the lab reports it for a set of samples.

use serde::{Deserialize, Serialize};

/// What the lab reports for a set of latency samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Samples.
    pub count: u64,
    /// Mean latency (ns).
    pub mean_ns: f64,
    /// Standard deviation (ns).
    pub stddev_ns: f64,
    /// Lowest latency (ns).
    pub min_ns: u64,
    /// Highest latency (ns).
    pub max_ns: u64,
    /// Median (ns).
    pub p50_ns: u64,
    /// 90th percentile (ns).
    pub p90_ns: u64,
    /// 99th percentile (ns).
    pub p99_ns: u64,
    /// 99.9th percentile (ns).
    pub p999_ns: u64,
    /// 99.99th percentile (ns).
    pub p9999_ns: u64,
}
