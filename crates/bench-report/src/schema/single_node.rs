//! The single-node scenarios: throughput, fan-out, the latency ladder and instances.

use super::{LatencySummary, Step};
use serde::{Deserialize, Serialize};

/// The highest rate one node sustains with no fan-out, for one cache setting.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Throughput {
    /// The node's cache: `off` or `on`.
    pub cache: String,
    /// Items published and watched.
    pub items: usize,
    /// Highest rate with every step's pass criteria met (updates/s).
    pub max_sustainable_updates_per_s: u64,
    /// Why the lowest failing rate failed (e.g. "publisher-limited": the load tool, not
    /// the node, was the limit).
    pub limited_by: Option<String>,
    /// Every step of the search (ramp, then bisection).
    pub steps: Vec<Step>,
}

/// The highest input rate a node sustains to many subscriber connections.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fanout {
    /// Why the lowest failing rate failed.
    pub limited_by: Option<String>,
    /// Subscriber connections.
    pub connections: usize,
    /// Items published.
    pub items: usize,
    /// How the connections' watchlists overlap (e.g. `producer-50-50`).
    pub commonality: String,
    /// Updates delivered per update published (over all connections).
    pub fanout: f64,
    /// The node's cache: `off` or `on`.
    pub cache: String,
    /// Highest sustained publisher rate (updates/s).
    pub input_updates_per_s: u64,
    /// Updates delivered per second at that rate (all connections).
    pub output_updates_per_s: u64,
    /// Every step of the search.
    pub steps: Vec<Step>,
}

/// One rung of a latency ladder: the step's latency and outcome, flattened.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LatencyStep {
    /// Updates per second asked of the publisher (0: the nodes at rest).
    pub rate: u64,
    /// The step's end-to-end latency, its keys at this level in JSON.
    #[serde(flatten)]
    pub latency: LatencySummary,
    /// Sequence gaps the subscriber saw.
    pub gaps: u64,
    /// delivered / (offered x fan-out).
    pub delivered_ratio: f64,
    /// The step met the pass criteria.
    pub sustained: bool,
    /// The node's CPU per update at this rate (as in `step`).
    #[serde(default)]
    pub node_cpu_ns_per_update: f64,
    /// The step itself.
    pub step: Step,
}

/// N independent node + publisher + subscriber sets at once, pinned or not.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Instances {
    /// Sets run at once.
    pub instances: usize,
    /// Each set pinned to CPUs of its own.
    pub pinned: bool,
    /// Highest rate each set sustained (updates/s).
    pub per_instance_updates_per_s: u64,
    /// That times the sets (updates/s).
    pub aggregate_updates_per_s: u64,
    /// Each search step's steps, one per set.
    pub steps: Vec<Vec<Step>>,
}
