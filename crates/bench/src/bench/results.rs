//! The results of a lab run as `results.json` holds them (docs/BENCHMARKS.md names every
//! key), and the figures read from them.

use super::*;

/// The whole results file (schema in docs/BENCHMARKS.md).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Results {
    pub tickwire_version: String,
    pub git_commit: String,
    pub scenario: String,
    /// The lab's own command line (`tickwire-bench SCENARIO ...`; empty in results
    /// written before it was kept).
    #[serde(default)]
    pub command: String,
    pub started_unix_s: u64,
    pub duration_s: f64,
    pub machine: Option<Machine>,
    pub settings: serde_json::Value,
    pub commands: Vec<String>,
    pub throughput: Vec<Throughput>,
    pub fanout: Option<Fanout>,
    pub latency: Vec<LatencyStep>,
    pub instances: Vec<Instances>,
    pub processes: Vec<StepProcess>,
    /// The stall scenario (absent in results written before it existed).
    #[serde(default)]
    pub stall: Option<Stall>,
    /// The memory scenario (absent in results written before it existed).
    #[serde(default)]
    pub memory: Option<crate::memory::Memory>,
    /// The WebSocket scenario (absent in results written before it existed).
    #[serde(default)]
    pub websocket: Option<WebSocketResult>,
    /// The backbone scenario (absent in results written before it existed).
    #[serde(default)]
    pub backbone: Option<backbone_scenario::BackboneResult>,
    /// The wait scenario (absent in results written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<wait_scenario::WaitResult>,
    /// The node-tree scenario (absent in results written before it existed).
    #[serde(default)]
    pub tree: Option<tree_scenario::TreeResult>,
    /// The peer scenario (absent in results written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peers: Option<peers_scenario::PeersResult>,
    /// The journal scenario: one line per sync policy (absent in results written
    /// before it existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub journal: Vec<journal_scenario::JournalStep>,
    /// The journal scenario: what journaling every update costs the sustained rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal_updates: Option<journal_scenario::JournalUpdateCost>,
    /// The RSSL scenario (absent in results written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rssl: Option<rssl_scenario::RsslResult>,
    /// `bench files`: Tickwire's rows (the peers' are in `peers`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<files_scenario::FilesRow>,
    /// `bench files`: market data's latency without files and during a transfer, at
    /// each files share.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files_market_data: Vec<files_market_data::FilesMarketData>,
    /// `bench files`: the large file to two sites without a fault and under each fault.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files_faults: Vec<files_faults::FilesFault>,
}

/// `bench ws`: one WebSocket JSON subscriber.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WebSocketResult {
    pub items: usize,
    /// Highest rate delivered with zero loss to the WebSocket subscriber.
    pub max_sustainable_updates_per_s: u64,
    pub steps: Vec<Step>,
    /// Steps held at fixed rates (1,000 and 10,000 updates/s) for latency.
    pub latency: Vec<Step>,
    /// Many connections watching the same items, with the node's shared JSON encoding
    /// on and off (absent in results written before it existed).
    #[serde(default)]
    pub fanout: Option<WsFanout>,
}

/// `bench ws`, fan-out part: what encoding an update's JSON once for every WebSocket
/// client watching it saves, in node CPU per update delivered, at one fixed rate.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WsFanout {
    pub connections: usize,
    pub items: usize,
    /// The publisher's rate; the node delivers this times `connections`.
    pub input_updates_per_s: u64,
    /// Node CPU (user + system) per update delivered, median of the runs, in µs.
    pub shared_node_cpu_us_per_update: f64,
    pub unshared_node_cpu_us_per_update: f64,
    /// unshared / shared: how many times more CPU the node spends without sharing.
    pub unshared_over_shared: f64,
    /// The user-mode part of the above (the encoding itself; the system part, writing
    /// to the sockets, is the same either way), median of the runs, in µs.
    #[serde(default)]
    pub shared_node_user_us_per_update: f64,
    #[serde(default)]
    pub unshared_node_user_us_per_update: f64,
    /// Update encodings the nodes made, and the times one was reused for another
    /// client, over the whole life of the shared and of the per-client nodes, from
    /// their /metrics (they show that sharing happened, and only where it was on).
    #[serde(default)]
    pub shared_encoded: u64,
    #[serde(default)]
    pub shared_reused: u64,
    #[serde(default)]
    pub unshared_encoded: u64,
    #[serde(default)]
    pub unshared_reused: u64,
    /// One step per run, alternating shared and unshared rigs (each run a fresh rig).
    pub shared: Vec<Step>,
    pub unshared: Vec<Step>,
}

/// The node's usage in a step (its process is named `node-...`).
pub(super) fn node_usage(step: &Step) -> Option<&ProcessUsage> {
    step.processes.iter().find(|p| p.name.starts_with("node-"))
}

/// The node's CPU seconds in a step (picked by `cpu`) per update delivered, in µs.
pub(super) fn node_us_per_update(step: &Step, cpu: impl Fn(&ProcessUsage) -> f64) -> Option<f64> {
    let node = node_usage(step)?;
    (step.delivered > 0).then(|| cpu(node) * 1e6 / step.delivered as f64)
}

/// The node's CPU (user + system) microseconds per update delivered in a step.
pub(super) fn node_cpu_us_per_update(step: &Step) -> Option<f64> {
    node_us_per_update(step, |p| p.cpu_user_s + p.cpu_sys_s)
}

/// The user-mode part of [`node_cpu_us_per_update`].
pub(super) fn node_user_us_per_update(step: &Step) -> Option<f64> {
    node_us_per_update(step, |p| p.cpu_user_s)
}

pub(super) fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Throughput {
    pub cache: String,
    pub items: usize,
    pub max_sustainable_updates_per_s: u64,
    /// Why the lowest failing rate failed (e.g. "publisher-limited": the load tool, not
    /// the node, was the limit).
    pub limited_by: Option<String>,
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fanout {
    /// Why the lowest failing rate failed.
    pub limited_by: Option<String>,
    pub connections: usize,
    pub items: usize,
    pub commonality: String,
    pub fanout: f64,
    pub cache: String,
    pub input_updates_per_s: u64,
    pub output_updates_per_s: u64,
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LatencyStep {
    pub rate: u64,
    pub mean_ns: f64,
    pub stddev_ns: f64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub p9999_ns: u64,
    pub count: u64,
    pub gaps: u64,
    pub delivered_ratio: f64,
    pub sustained: bool,
    /// The node's CPU per update at this rate (as in `step`).
    #[serde(default)]
    pub node_cpu_ns_per_update: f64,
    pub step: Step,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Instances {
    pub instances: usize,
    pub pinned: bool,
    pub per_instance_updates_per_s: u64,
    pub aggregate_updates_per_s: u64,
    pub steps: Vec<Vec<Step>>,
}

/// One process's figures for one step, flattened for dashboards.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepProcess {
    pub scenario: String,
    pub step: String,
    pub rate: u64,
    #[serde(flatten)]
    pub usage: ProcessUsage,
}
