//! `bench rssl`: LSEG's perf tools over RSSL, directly and through a node.

use super::LatencyStep;
use serde::{Deserialize, Serialize};

/// `results.json` → `rssl` (docs/BENCHMARKS.md).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RsslResult {
    /// The tools' folder and version.
    pub tools: String,
    /// Items ConsPerf watched.
    pub items: usize,
    /// ProvPerf -> ConsPerf.
    pub direct: Vec<RsslStep>,
    /// ProvPerf -> a byte relay -> ConsPerf: what one more hop costs on this machine
    /// (a thread per direction copying bytes as they come, no decoding).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub relayed: Vec<RsslStep>,
    /// ProvPerf -> node -> ConsPerf (the node a consumer of ProvPerf, an interactive
    /// provider) and NIProvPerf -> node -> ConsPerf; `provider` says which.
    pub through_node: Vec<RsslStep>,
    /// The highest rate of each path with every update delivered.
    pub max_sustained_updates_per_s: MaxSustained,
    /// The native path at the same rates (node CPU per update, latency).
    pub native: Vec<LatencyStep>,
}

/// `bench rssl`: the highest rate each path delivered every update at (updates/s).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MaxSustained {
    /// ProvPerf -> ConsPerf.
    pub direct: u64,
    /// ProvPerf through the node (the same provider as direct).
    pub through_node: u64,
    /// NIProvPerf through the node.
    #[serde(default)]
    pub through_node_niprovperf: u64,
}

/// One rate of one path, as ConsPerf measured it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RsslStep {
    /// Updates per second the provider was asked for.
    pub rate: u64,
    /// The provider that published.
    pub provider: String,
    /// ConsPerf's steady-state average update rate.
    pub update_rate: f64,
    /// ConsPerf's steady-state mean latency (µs), from latency-stamped updates; none
    /// when ConsPerf got no latency-stamped update in its steady state.
    pub latency_avg_us: Option<f64>,
    /// ConsPerf's highest latency in its steady state (µs), when it had any.
    pub latency_max_us: Option<f64>,
    /// The median of ConsPerf's one-second latency means over its steady state (µs):
    /// a JVM's pause, which moves the mean of a short steady state by hundreds of µs,
    /// moves it little.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_median_of_seconds_us: Option<f64>,
    /// Refreshes (images) ConsPerf received.
    pub refreshes: u64,
    /// Updates ConsPerf received over its whole run.
    pub updates: u64,
    /// Updates short of the asked rate over the steady state (rate x its duration -
    /// updates received), 0 when ConsPerf got them all.
    pub lost: u64,
    /// Every refresh, and at least 99% of the asked rate.
    pub sustained: bool,
    /// The node's CPU time per update it sent, over a window inside ConsPerf's steady
    /// state (ns); null without a node, or where the window could not be read (the key
    /// is always there, as docs/BENCHMARKS.md lists it).
    #[serde(default)]
    pub node_cpu_ns_per_update: Option<f64>,
}

/// `RsslStep::provider` of the interactive provider (ProvPerf).
pub const PROVPERF: &str = "ProvPerf";
/// `RsslStep::provider` of the non-interactive provider (NIProvPerf).
pub const NIPROVPERF: &str = "NIProvPerf";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_step_has_the_node_cpu_key() {
        let keys = |s: &RsslStep| {
            let v = serde_json::to_value(s).unwrap();
            v.as_object().unwrap().keys().cloned().collect::<Vec<_>>()
        };
        let direct = RsslStep {
            rate: 1000,
            provider: PROVPERF.into(),
            ..RsslStep::default()
        };
        for key in [
            "rate",
            "provider",
            "update_rate",
            "latency_avg_us",
            "latency_max_us",
            "refreshes",
            "updates",
            "lost",
            "sustained",
            "node_cpu_ns_per_update",
        ] {
            assert!(keys(&direct).iter().any(|k| k == key), "{key}");
        }
        // A step through the node whose window was not read: null, not left out.
        let v = serde_json::to_value(&direct).unwrap();
        assert!(v["node_cpu_ns_per_update"].is_null());
        let measured = RsslStep {
            node_cpu_ns_per_update: Some(1500.0),
            ..direct
        };
        let back: RsslStep =
            serde_json::from_value(serde_json::to_value(&measured).unwrap()).unwrap();
        assert_eq!(back.node_cpu_ns_per_update, Some(1500.0));
    }
}
