//! `bench peers`: the same workload on Tickwire and on a peer (and, for `bench files`,
//! the peers' file transfers).

use super::{FilesRow, LatencyStep, Step};
use serde::{Deserialize, Serialize};

/// `results.json` → `peers` (docs/BENCHMARKS.md).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PeersResult {
    /// Tickwire's figures (cache off).
    #[serde(default, skip_serializing_if = "PeerResult::is_unset")]
    pub tickwire: PeerResult,
    /// The NATS server's figures.
    #[serde(default, skip_serializing_if = "PeerResult::is_unset")]
    pub nats: PeerResult,
    /// `bench files`: the same classes of files with uftp and rsync.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uftp: Vec<FilesRow>,
    /// `bench files`: the same classes of files with rsync.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rsync: Vec<FilesRow>,
}

impl PeerResult {
    /// Not measured in this run (a `bench files` run has no NATS side).
    pub fn is_unset(&self) -> bool {
        !self.available && self.unavailable.is_none() && self.steps.is_empty()
    }
}

/// One system's figures.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PeerResult {
    /// Whether it ran; when not, `unavailable` says why.
    pub available: bool,
    /// Why it did not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// The server's own version line.
    pub version: String,
    /// Items published and watched.
    pub items: usize,
    /// Highest rate with every update delivered, in order, on schedule.
    pub max_sustainable_updates_per_s: u64,
    /// Why the lowest failing rate failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limited_by: Option<String>,
    /// The search's steps.
    pub steps: Vec<Step>,
    /// The latency ladder (entries as the single-node ladder's).
    pub latency: Vec<LatencyStep>,
}
