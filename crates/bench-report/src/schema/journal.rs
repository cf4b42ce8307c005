//! `bench journal`: posts through the node's journal, and what journaling updates costs.

use serde::{Deserialize, Serialize};

/// One line of `results.json` → `journal` (docs/BENCHMARKS.md).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JournalStep {
    /// "always", "batch", "never", or "off" (posts without a journal).
    pub sync: String,
    /// Posts acknowledged per second.
    pub posts_per_s: f64,
    /// Median time from a post to its Ack (ns).
    pub ack_p50_ns: u64,
    /// 99th percentile time from a post to its Ack (ns).
    pub ack_p99_ns: u64,
    /// Longest time from a post to its Ack (ns).
    pub ack_max_ns: u64,
    /// The journal's write and fdatasync calls per post answered.
    pub syscalls_per_post: f64,
    /// Journal bytes written per second (records x their size, from the journal's
    /// directory).
    pub journal_mb_per_s: f64,
    /// Posts answered in the run.
    pub posts: u64,
    /// Posts refused (Nak) in the run.
    pub nakked: u64,
    /// The first refusal's text, if any.
    pub first_nak: Option<String>,
    /// Posts in flight the poster kept.
    pub window: usize,
    /// Length of the run (s).
    pub seconds: f64,
    /// Node CPU per post answered, µs (user + system, all its threads).
    pub node_cpu_us_per_post: Option<f64>,
}

/// `results.json` → `journal_updates`: what journaling every update of a service costs
/// the node's sustained rate (cache on, no fan-out, `batch`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JournalUpdateCost {
    /// Items of the journaled service.
    pub items: usize,
    /// Highest sustained rate without the journal (updates/s).
    pub without_journal_updates_per_s: u64,
    /// Highest sustained rate with every update journaled (updates/s).
    pub with_journal_updates_per_s: u64,
    /// 100 x (1 - with / without).
    pub cost_percent: f64,
    /// Why the search without the journal stopped.
    pub without_limited_by: Option<String>,
    /// Why the search with the journal stopped.
    pub with_limited_by: Option<String>,
    /// The node's CPU time (every thread: the journal's too) per update at the highest
    /// rate each search sustained: what journaling costs the node whatever else shares
    /// the machine.
    #[serde(default)]
    pub without_node_cpu_ns_per_update: f64,
    /// The same with the journal (ns per update).
    #[serde(default)]
    pub with_node_cpu_ns_per_update: f64,
}
