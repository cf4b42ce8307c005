//! `bench stall`: one of several subscribers stopped, then the node.

use super::{LatencySummary, Step};
use serde::{Deserialize, Serialize};

/// The `stall` object of results.json (schema in docs/BENCHMARKS.md). Every field has a
/// default, so results written before a field existed still parse.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Stall {
    /// Updates per second asked of the publisher.
    pub rate: u64,
    /// Where the rate came from (`--stall-rate`, the throughput scenario, or a search).
    pub rate_source: String,
    /// The maximum sustainable rate the rate is 50% of (None with `--stall-rate`).
    pub max_sustainable_updates_per_s: Option<u64>,
    /// Items each subscriber watches.
    pub items: usize,
    /// perf-sub processes (subscriber 0 is the one stopped).
    pub subscribers: usize,
    /// The subscribers not stopped.
    pub healthy_subscribers: usize,
    /// The node's cache: `off` or `on`.
    pub cache: String,
    /// Length of a latency interval (perf-sub `--interval-ms`), ms.
    pub interval_ms: u64,
    /// Measured SIGSTOP to SIGCONT of the subscriber, and of the node.
    pub subscriber_stopped_ms: f64,
    /// Measured SIGSTOP to SIGCONT of the node (ms).
    pub node_stopped_ms: f64,
    /// Healthy subscribers' p99 per phase: the highest p99 among them.
    pub baseline_p99_ns: u64,
    /// The healthy subscribers' highest p99 while the subscriber was stopped (ns).
    pub stall_p99_ns: u64,
    /// The same after the subscriber continued (ns).
    pub after_subscriber_p99_ns: u64,
    /// The same while the node was stopped and just after (ns).
    pub node_pause_p99_ns: u64,
    /// The same after the node continued (ns).
    pub after_node_p99_ns: u64,
    /// Healthy subscribers' time from the node's SIGCONT back to baseline (the slowest
    /// of them); None if one did not recover within the `after_node` phase.
    pub recovery_ms: Option<f64>,
    /// The stopped subscriber's own time from its SIGCONT back to its baseline.
    pub subscriber_recovery_ms: Option<f64>,
    /// The definition of recovery, in words.
    pub recovery_rule: String,
    /// Sequence gaps over all healthy subscribers, whole scenario.
    pub healthy_gaps: u64,
    /// Updates the publisher sent minus updates each healthy subscriber received or saw
    /// merged by conflation, summed, from a quiet start to a quiet end (0 when nothing
    /// was lost).
    pub healthy_lost: i64,
    /// Updates merged away by conflation for the healthy subscribers (not lost: the
    /// merged update carries their latest values, but reported apart).
    pub healthy_conflated: u64,
    /// Times a healthy subscriber's connection was re-established.
    pub healthy_reconnects: u64,
    /// The node's peak resident set (VmHWM) at the end of the run.
    pub node_peak_rss_bytes: u64,
    /// Updates merged away by conflation, all subscribers, whole run.
    pub conflated_updates: u64,
    /// The node dropped the stopped subscriber (it reconnected) instead of conflating.
    pub stopped_subscriber_disconnected: bool,
    /// What happened to the stopped subscriber.
    pub stopped_subscriber: StoppedSubscriber,
    /// The publisher's achieved send rate in the baseline and while a subscriber was
    /// stopped.
    pub publisher_baseline_per_s: f64,
    /// The publisher's send rate while a subscriber was stopped (updates/s).
    pub publisher_stall_per_s: f64,
    /// The timeline's phases, in order.
    pub phases: Vec<StallPhase>,
    /// SIGSTOP / SIGCONT and phase ends, in ms from the baseline's start.
    pub events: Vec<StallEvent>,
    /// Latency per interval, ms from the baseline's start (for the plot).
    pub series: Vec<StallPoint>,
    /// Each target, required and measured.
    pub targets: Vec<StallTarget>,
    /// Every target met.
    pub pass: bool,
    /// Steps of the max search (standalone `bench stall` without `--stall-rate`).
    pub search_steps: Vec<Step>,
}

/// One phase of the timeline.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StallPhase {
    /// `baseline`, `subscriber_stall`, `after_subscriber`, `node_pause`, `after_node`.
    pub name: String,
    /// Length of the phase (s).
    pub seconds: f64,
    /// Updates the publisher sent in the phase.
    pub publisher_sent: u64,
    /// The publisher's send rate in the phase (updates/s).
    pub publisher_per_s: f64,
    /// Largest lag of a publisher burst behind its schedule (ms).
    pub publisher_max_lag_ms: f64,
    /// Summed over the healthy subscribers.
    pub healthy_updates: u64,
    /// Sequence gaps, summed over the healthy subscribers.
    pub healthy_gaps: u64,
    /// Updates merged by conflation, summed over the healthy subscribers.
    pub healthy_conflated: u64,
    /// The highest p99 and max among the healthy subscribers.
    pub healthy_p99_ns: u64,
    /// The highest max latency among the healthy subscribers (ns).
    pub healthy_max_ns: u64,
    /// The node's largest sampled RSS and its CPU in the phase.
    pub node_max_rss_bytes: u64,
    /// The node's CPU in the phase, percent of one CPU.
    pub node_cpu_percent: f64,
    /// Each healthy subscriber's latency in the phase (subscribers 1.. in order).
    pub healthy: Vec<LatencySummary>,
}

/// What happened to the subscriber that was stopped.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StoppedSubscriber {
    /// Updates it received over the run.
    pub updates: u64,
    /// Sequence gaps it saw.
    pub gaps: u64,
    /// Updates merged for it by conflation.
    pub conflated: u64,
    /// Status messages it received.
    pub statuses: u64,
    /// Times its connection was re-established.
    pub reconnects: u64,
    /// Its p99 over the baseline phase (ns).
    pub baseline_p99_ns: u64,
    /// Its time from its SIGCONT back to its baseline (ms); None if it did not recover.
    pub recovery_ms: Option<f64>,
    /// It exited on its own (its summary is missing; the figures above are partial).
    pub exited: bool,
}

/// A moment of the timeline (a signal sent, a phase ended).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StallEvent {
    /// What happened (e.g. `subscriber SIGSTOP`, `node SIGCONT`).
    pub name: String,
    /// When, in ms from the baseline's start.
    pub t_ms: f64,
}

/// One interval of the time series; a p99 of 0 means no sample in the interval.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StallPoint {
    /// The interval's start, ms from the baseline's start.
    pub t_ms: f64,
    /// The highest p99 among the healthy subscribers, and their samples.
    pub healthy_p99_ns: u64,
    /// The healthy subscribers' samples in the interval.
    pub healthy_count: u64,
    /// The stopped subscriber's p99 in the interval (ns).
    pub stopped_p99_ns: u64,
    /// The stopped subscriber's samples in the interval.
    pub stopped_count: u64,
}

/// One of the scenario's targets.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct StallTarget {
    /// What is measured.
    pub name: String,
    /// What is required, in words.
    pub target: String,
    /// What was measured, in words.
    pub value: String,
    /// The target was met.
    pub pass: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_results_without_new_fields_parse() {
        let s: Stall = serde_json::from_str(r#"{"rate": 5, "baseline_p99_ns": 7}"#).unwrap();
        assert_eq!((s.rate, s.baseline_p99_ns, s.recovery_ms), (5, 7, None));
    }
}
