//! `bench backbone`: the classic procedure across the backbone.

use super::{Fanout, LatencyStep, Step, Throughput};
use serde::{Deserialize, Serialize};

/// `results.json` → `backbone` (docs/BENCHMARKS.md).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BackboneResult {
    /// How the nodes were connected.
    pub transport: String,
    /// Single node, cache off, same items, same run: the base of the comparison.
    pub single_node_updates_per_s: u64,
    /// Across the backbone, cache off and on (the same cache at both nodes).
    pub throughput: Vec<Throughput>,
    /// An edge with many subscriber connections, producer 50/50.
    pub fanout: Option<Fanout>,
    /// The latency ladder across the backbone (cache off at both nodes).
    pub latency: Vec<LatencyStep>,
    /// The single-node ladder, same run, same rates.
    pub single_node_latency: Vec<LatencyStep>,
    /// One row per loss rate the edge was run with.
    pub loss: Vec<LossResult>,
}

/// `bench backbone`: the edge under one loss rate of its media driver.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LossResult {
    /// Fraction of the data frames the edge's media driver drops.
    pub loss_rate: f64,
    /// Highest rate sustained with that loss (every update delivered, no gap).
    pub sustained_updates_per_s: u64,
    /// Latency at `latency_rate` with that loss.
    pub latency_rate: u64,
    /// Median latency at `latency_rate` (ns).
    pub p50_ns: u64,
    /// 99th percentile latency at `latency_rate` (ns).
    pub p99_ns: u64,
    /// Sequence gaps seen by the subscriber over every step (must be 0).
    pub gaps: u64,
    /// NAKs the edge's driver sent, retransmissions the source's driver sent.
    pub naks: u64,
    /// Retransmissions the source's driver sent.
    pub retransmits: u64,
    /// The search's and the latency's steps.
    pub steps: Vec<Step>,
}
