//! `bench wait`: the backbone's latency ladder once per idle strategy.

use super::LatencyStep;
use serde::{Deserialize, Serialize};

/// `results.json` → `wait` (docs/BENCHMARKS.md).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WaitResult {
    /// How the nodes were connected.
    pub transport: String,
    /// One ladder per idle strategy, in the order run.
    pub strategies: Vec<StrategyLadder>,
}

/// One idle strategy's latency ladder.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StrategyLadder {
    /// `[backbone] idle` of both nodes.
    pub strategy: String,
    /// The ladder's rungs (the first, rate 0, with the nodes at rest).
    pub latency: Vec<LatencyStep>,
}
