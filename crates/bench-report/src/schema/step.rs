//! One held rate of a rig (`Step`) and the latency summary it carries: the unit every
//! scenario's search and ladder is made of.

use super::{LatencySummary, ProcessUsage, SystemUsage};
use serde::{Deserialize, Serialize};

/// Why a step passed or failed.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Step {
    /// The rig's label (scenario, cache, rate).
    pub label: String,
    /// Updates per second the publisher was asked for.
    pub target_rate: u64,
    /// Length of the measured window (s).
    pub seconds: f64,
    /// Updates the publisher sent in the window.
    pub offered: u64,
    /// Updates the subscriber(s) received in the window.
    pub delivered: u64,
    /// delivered / (offered x fan-out).
    pub delivered_ratio: f64,
    /// Updates sent per second in the window.
    pub offered_per_s: f64,
    /// Updates received per second in the window (all subscribers).
    pub delivered_per_s: f64,
    /// Sequence gaps the subscriber(s) saw in the window.
    pub gaps: u64,
    /// Status messages the subscriber(s) received in the window.
    pub statuses: u64,
    /// Updates the node merged for a subscriber that fell behind (slow-consumer
    /// conflation): a step with any fails, as every update must arrive on its own.
    #[serde(default)]
    pub conflated: u64,
    /// Updates sent (times the fan-out) but not yet received, at the step's start and
    /// end: a backlog that grows means the node (or subscriber) is not keeping up.
    #[serde(default)]
    pub backlog_start: i64,
    /// The backlog at the step's end.
    #[serde(default)]
    pub backlog_end: i64,
    /// Largest lag of a publisher burst behind its schedule in the window.
    pub publisher_max_lag_ms: f64,
    /// The step met the pass criteria.
    pub pass: bool,
    /// Why it passed or failed, in words.
    pub reason: String,
    /// End-to-end latency of the timestamped updates received in the window.
    pub latency: LatencySummary,
    /// CPU time (user + system, every thread) of the rig's node processes (the node,
    /// and across a backbone or a tree the downstream node too) per update the
    /// publisher sent in the window: the node's own cost, whatever else shares the
    /// machine. From /proc in clock ticks (10 ms): a short step at a low rate rounds.
    #[serde(default)]
    pub node_cpu_ns_per_update: f64,
    /// Every process of the rig over the window.
    pub processes: Vec<ProcessUsage>,
    /// The whole machine over the window, where sampled.
    pub system: Option<SystemUsage>,
}
