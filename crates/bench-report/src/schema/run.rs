//! The whole of `results.json`: one run of one scenario (or of `quick`), with the
//! sections only the scenarios that ran fill.

use super::{
    BackboneResult, Fanout, FilesFault, FilesMarketData, FilesRow, Instances, JournalStep,
    JournalUpdateCost, LatencyStep, Machine, Memory, PeersResult, ProcessUsage, RsslResult,
    Settings, Stall, Throughput, TreeResult, WaitResult, WebSocketResult,
};
use serde::{Deserialize, Serialize};

/// The whole results file (schema in docs/BENCHMARKS.md).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Results {
    /// The lab's version (the workspace's).
    pub tickwire_version: String,
    /// The commit the lab was built from ("unknown" outside a git checkout).
    pub git_commit: String,
    /// The scenario run (`throughput`, `quick`, `backbone`, ...).
    pub scenario: String,
    /// The lab's own command line (`tickwire-bench SCENARIO ...`; empty in results
    /// written before it was kept).
    #[serde(default)]
    pub command: String,
    /// When the run started, seconds since the Unix epoch.
    pub started_unix_s: u64,
    /// How long the run took (s).
    pub duration_s: f64,
    /// The host the run ran on.
    pub machine: Option<Machine>,
    /// The run's settings (items, step seconds, rates, pass criteria...), as the lab had
    /// them.
    pub settings: Settings,
    /// Every command line the run started (the lab's first, then nodes and load tools).
    pub commands: Vec<String>,
    /// The throughput scenario: one entry per cache setting.
    pub throughput: Vec<Throughput>,
    /// The fan-out scenario.
    pub fanout: Option<Fanout>,
    /// The single-node latency ladder: one entry per rung.
    pub latency: Vec<LatencyStep>,
    /// The instances scenario: one entry per instance count and pinning.
    pub instances: Vec<Instances>,
    /// Every process's usage in every step, flattened for dashboards.
    pub processes: Vec<StepProcess>,
    /// The stall scenario (absent in results written before it existed).
    #[serde(default)]
    pub stall: Option<Stall>,
    /// The memory scenario (absent in results written before it existed).
    #[serde(default)]
    pub memory: Option<Memory>,
    /// The WebSocket scenario (absent in results written before it existed).
    #[serde(default)]
    pub websocket: Option<WebSocketResult>,
    /// The backbone scenario (absent in results written before it existed).
    #[serde(default)]
    pub backbone: Option<BackboneResult>,
    /// The wait scenario (absent in results written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<WaitResult>,
    /// The node-tree scenario (absent in results written before it existed).
    #[serde(default)]
    pub tree: Option<TreeResult>,
    /// The peer scenario (absent in results written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peers: Option<PeersResult>,
    /// The journal scenario: one line per sync policy (absent in results written
    /// before it existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub journal: Vec<JournalStep>,
    /// The journal scenario: what journaling every update costs the sustained rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal_updates: Option<JournalUpdateCost>,
    /// The RSSL scenario (absent in results written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rssl: Option<RsslResult>,
    /// `bench files`: Tickwire's rows (the peers' are in `peers`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FilesRow>,
    /// `bench files`: market data's latency without files and during a transfer, at
    /// each files share.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files_market_data: Vec<FilesMarketData>,
    /// `bench files`: the large file to two sites without a fault and under each fault.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files_faults: Vec<FilesFault>,
    /// `bench files`: how the rigs of `files` and `files_faults` sealed their backbone
    /// (as `--backbone-auth` says; absent before it was recorded, when they had no key
    /// whatever the flag said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files_backbone_auth: Option<String>,
}

/// One process's figures for one step, flattened for dashboards.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepProcess {
    /// The scenario the step belongs to.
    pub scenario: String,
    /// The step's label.
    pub step: String,
    /// The rate the step asked of the publisher (updates/s).
    pub rate: u64,
    /// The process's usage in the step (its fields inline).
    #[serde(flatten)]
    pub usage: ProcessUsage,
}
