//! `results.json` `settings`: the lab's flags as the run had them, for a reader who
//! wants to know how a figure was made without parsing the command line. A flag the
//! scenario does not take holds its default. Every field has a default, so results
//! written before a flag existed still read.

use serde::{Deserialize, Serialize};

/// The run's settings (each field is the `tickwire-bench` flag of the same name, unless
/// its comment says otherwise).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Settings {
    /// `--items`: the watchlist of the throughput and latency scenarios.
    pub items: usize,
    /// `--step-seconds`, or the scenario's default: how long each rate is held.
    pub step_seconds: f64,
    /// `--rates`: the latency ladder asked for (none: the default ladder).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rates: Option<Vec<u64>>,
    /// `--fanout-items`.
    pub fanout_items: usize,
    /// `--connections`: subscriber connections of the fan-out scenario.
    pub connections: usize,
    /// `--start-rate`: the first rate of every search (none: the scenario's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_rate: Option<u64>,
    /// `--max-rate`.
    pub max_rate: u64,
    /// `--pub-spin-us`.
    pub ladder_pub_spin_us: u64,
    /// `--pub-yield` (`on`, `off`).
    pub ladder_pub_yield: String,
    /// `--node-wait`.
    pub ladder_node_wait: String,
    /// `--sub-wait`.
    pub ladder_sub_wait: String,
    /// Whether system calls were counted: `--syscalls` and a kernel that lets `perf`
    /// count them.
    pub syscalls_counted: bool,
    /// `--scrape-metrics`: every how many seconds `/metrics` was read (none: not read).
    pub metrics_scraped_every_s: Option<u64>,
    /// `--stall-rate` (none: the scenario's).
    pub stall_rate: Option<u64>,
    /// `--stall-items`.
    pub stall_items: usize,
    /// `--stall-subscribers`.
    pub stall_subscribers: usize,
    /// `--stall-seconds`.
    pub stall_seconds: f64,
    /// `--node-pause-ms`.
    pub node_pause_ms: u64,
    /// `--stall-phase-seconds`, or the scenario's default.
    pub stall_phase_seconds: f64,
    /// `--stall-interval-ms`.
    pub stall_interval_ms: u64,
    /// `--memory-connections`.
    pub memory_connections: usize,
    /// `--memory-items`.
    pub memory_items: usize,
    /// `--ws-items`.
    pub ws_items: usize,
    /// `--ws-connections`.
    pub ws_connections: usize,
    /// `--ws-fanout-items`.
    pub ws_fanout_items: usize,
    /// `--ws-fanout-rate`.
    pub ws_fanout_rate: u64,
    /// `--backbone-driver`.
    pub backbone_driver: String,
    /// `--backbone-idle`.
    pub backbone_idle: String,
    /// `--backbone-max-park-us` (none: the node's default).
    pub backbone_max_park_us: Option<u64>,
    /// `--backbone-mtu`.
    pub backbone_mtu: usize,
    /// `--backbone-auth` (`on`: a keyed BLAKE3 key, `hmac-sha256` (`on` before BLAKE3), `off`).
    pub backbone_auth: String,
    /// `--journal-posts-only` (absent before it was recorded).
    pub journal_posts_only: bool,
    /// `--rssl-items` (absent before it was recorded).
    pub rssl_items: usize,
    /// `--rssl-ticks` (none: the tools' 1,000 a second, or the rate when lower).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rssl_ticks: Option<u64>,
    /// `--files-scale`.
    pub files_scale: f64,
    /// `--files-large-mb`.
    pub files_large_mb: u64,
    /// `--files-rate-mb`.
    pub files_rate_mb: u64,
    /// `--files-sites`.
    pub files_sites: Vec<usize>,
    /// `--files-fsync`.
    pub files_fsync: Vec<String>,
    /// `--wait-strategies`.
    pub wait_strategies: Vec<String>,
    /// When a rate counts as sustained, in words.
    pub pass_criteria: String,
}
