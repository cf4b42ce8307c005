//! `bench files`: file transfer rows, market data beside files, and faults.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One row of `results.json` → `files`, and of `peers` → `uftp` / `rsync`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FilesRow {
    /// The class of files (e.g. `16KB`, `63KB-both-ways`, `large`).
    pub class: String,
    /// Files the row sent (both ways counted for a both-ways class).
    pub files: usize,
    /// Bytes of those files (each counted once, not per site).
    pub bytes: u64,
    /// Sites each file went to.
    pub sites: usize,
    /// The receivers' fsync setting (`always`, `never`; `-` where the system has none).
    pub fsync: String,
    /// Files delivered per minute (files over the row's seconds).
    pub files_per_min: f64,
    /// Megabytes (10^6 bytes) sent per second.
    pub mb_per_s: f64,
    /// CPU seconds (user + system) of every process of the run, per GB delivered
    /// (bytes x sites).
    pub cpu_s_per_gb: f64,
    /// System calls per file delivered (files x sites), counted system-wide.
    pub syscalls_per_file: Option<f64>,
    /// From the first file sent to the last one whole at the last site (s).
    pub seconds: f64,
    /// CPU seconds of each process.
    #[serde(default)]
    pub cpu_s: BTreeMap<String, f64>,
    /// Why the row did not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

impl FilesRow {
    /// CPU seconds of every process of the row (0 in results that did not record them).
    pub fn cpu_s_total(&self) -> f64 {
        self.cpu_s.values().sum()
    }

    /// The share of the machine's CPU time (`cpus` CPUs over the row's seconds) its
    /// processes used: near 1, the row measured the CPUs more than the software.
    pub fn cpu_busy(&self, cpus: usize) -> Option<f64> {
        let capacity = self.seconds * cpus as f64;
        (capacity > 0.0 && !self.cpu_s.is_empty()).then(|| self.cpu_s_total() / capacity)
    }

    /// The same class, fsync and system to one site, for a row to more than one: its
    /// time and its processes' CPU over that row's (`None` for a row to one site, or
    /// where either did not run or recorded no CPU).
    pub fn against_one_site(&self, rows: &[FilesRow]) -> Option<AgainstOneSite> {
        if self.sites <= 1 || self.unavailable.is_some() {
            return None;
        }
        let one = rows.iter().find(|r| {
            r.sites == 1
                && r.class == self.class
                && r.fsync == self.fsync
                && r.unavailable.is_none()
        })?;
        let (cpu, cpu_one) = (self.cpu_s_total(), one.cpu_s_total());
        (one.seconds > 0.0 && cpu > 0.0 && cpu_one > 0.0).then(|| AgainstOneSite {
            time: self.seconds / one.seconds,
            cpu: cpu / cpu_one,
        })
    }
}

/// A row to N sites beside the same class to one ([`FilesRow::against_one_site`]). On
/// one machine every site's work adds up: where both rows keep the CPUs busy, `time`
/// follows `cpu`, which sites on machines of their own would not pay.
#[derive(Debug, Clone, Copy)]
pub struct AgainstOneSite {
    /// Seconds over the one-site row's.
    pub time: f64,
    /// CPU seconds of every process over the one-site row's.
    pub cpu: f64,
}

/// `results.json` → `files_market_data`: one per files share.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FilesMarketData {
    /// The files' share of the network (`[files] rate_mb_per_s`).
    pub files_share_mb_per_s: u64,
    /// Whether the files were queued before the latency was held (only their
    /// transfer ran meanwhile), or uploaded to the source node as they went.
    pub queued_first: bool,
    /// Updates per second of the market data.
    pub rate: u64,
    /// Market data's median latency without files (µs).
    pub p50_us_without: f64,
    /// Market data's 99th percentile latency without files (µs).
    pub p99_us_without: f64,
    /// Market data's median latency during the transfer (µs).
    pub p50_us_during: f64,
    /// Market data's 99th percentile latency during the transfer (µs).
    pub p99_us_during: f64,
    /// p99 during / p99 without.
    pub p99_ratio: f64,
    /// Market data delivered / offered during the transfer.
    pub delivered_ratio_during: f64,
    /// File bytes the edge took per second while the latency was held: its
    /// `tickwire_files_received_bytes_total` read before and after, over the time
    /// between (runs before 2026-12-01 counted the files whole in the window, which
    /// read copies sent side by side as faster than they went).
    pub files_mb_per_s: f64,
    /// How long the latency was held, each way (s).
    pub seconds: f64,
}

/// One row of `results.json` → `files_faults`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FilesFault {
    /// `none`, `loss_1pct`, `kill_site`, `kill_sender` or `full_disk`.
    pub fault: String,
    /// Sites the file went to.
    pub sites: usize,
    /// The file's size in bytes.
    pub bytes: u64,
    /// The source's `[files] rate_mb_per_s` (every row alike, so that a transfer lasts
    /// long enough to be killed in the middle).
    pub rate_mb_per_s: u64,
    /// From the send until the file was whole at every site that could take it (or
    /// the row's time limit).
    pub seconds: f64,
    /// The `none` row's seconds.
    pub seconds_without: f64,
    /// Sites whose file is whole, byte for byte the source's.
    pub sites_whole: usize,
    /// Sites that should have it whole (all but the full one).
    pub sites_expected: usize,
    /// What the nodes said.
    pub detail: String,
    /// Why the row did not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}
