//! `bench tree`: the classic procedure through two nodes over an upstream link.

use super::{Fanout, LatencyStep, Throughput};
use serde::{Deserialize, Serialize};

/// `results.json` → `tree` (docs/BENCHMARKS.md).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TreeResult {
    /// Single node, cache off, same items, same run: the base of the comparison.
    pub single_node_updates_per_s: u64,
    /// Through the POP, cache off and on (the same cache at both nodes).
    pub throughput: Vec<Throughput>,
    /// The POP with many subscriber connections, producer 50/50.
    pub fanout: Option<Fanout>,
    /// The latency ladder through both nodes (cache off at both).
    pub latency: Vec<LatencyStep>,
    /// The single-node ladder, same run, same rates.
    pub single_node_latency: Vec<LatencyStep>,
}
