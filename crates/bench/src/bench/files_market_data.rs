//! `tickwire bench files`, market data beside files: a source node and an edge node on
//! the backbone carry 10,000 updates/s from perf-pub to perf-sub, and the latency is
//! held twice, without files and while the large file goes from the source's spool to
//! the edge's inbox again and again at the files' full share: once at the node's
//! default share (`[files] rate_mb_per_s`, 50 MB/s) and once at the lab's
//! `--files-rate-mb`. The goal: the p99 during the transfer within 2x of the p99
//! without.

use super::*;
use crate::scraper::counter;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

const RATE: u64 = 10_000;

/// The node's default share of the network for files (`[files] rate_mb_per_s`).
const DEFAULT_SHARE_MB: u64 = 50;

impl Lab {
    /// The market-data rows: at the node's default files share, then at the lab's.
    pub(super) fn files_market_data(
        &mut self,
        large: &Path,
        work: &Path,
    ) -> Result<Vec<FilesMarketData>> {
        let mut shares = vec![DEFAULT_SHARE_MB, self.args.files.files_rate_mb];
        shares.dedup();
        let mut rows = Vec::new();
        for share in shares {
            for queued_first in [false, true] {
                // The classes before left gigabytes of dirty pages: written back while
                // the latency is held without files, they would make that baseline the
                // slow one. Each row syncs, not only the first: a row queued first
                // writes 2.8 GB at 200 MB/s (its directories are removed after it, so
                // the sync usually finds little to do).
                let (synced, seconds) = super::files_scenario::settle_disk();
                self.progress.line(
                    &format!(
                        "files: the disk {} in {:.1} s before market data",
                        if synced {
                            "synced"
                        } else {
                            "NOT synced (sync failed)"
                        },
                        seconds
                    ),
                    0.0,
                );
                rows.push(self.files_market_data_at(share, queued_first, large, work)?);
            }
        }
        Ok(rows)
    }

    fn files_market_data_at(
        &mut self,
        share: u64,
        queued_first: bool,
        large: &Path,
        work: &Path,
    ) -> Result<FilesMarketData> {
        let dir = work.join("md");
        std::fs::create_dir_all(&dir)?;
        let spool = dir.join("spool");
        let inbox = dir.join("inbox");
        let how = if queued_first {
            "queued first"
        } else {
            "uploaded meanwhile"
        };
        let label = format!("files+market data, files at {share} MB/s, {how}");
        let mut spec = self.backbone_spec(&label, "off", 1000)?;
        let backbone = spec.node_config.clone().unwrap_or_default();
        // Copies queued first come through the source's outbox: the files thread takes
        // every copy there in one look, before it sends a chunk of any.
        let outbox = dir.join("outbox");
        let outbox_line = match queued_first {
            true => format!("outbox = {:?}\n", outbox.display().to_string()),
            false => String::new(),
        };
        spec.node_config = Some(format!(
            "{backbone}[files]\nservices = [\"FILES\"]\nspool = {:?}\nrate_mb_per_s = {}\nchunk_kib = 62\n{outbox_line}",
            spool.display().to_string(),
            share
        ));
        spec.edge_config = Some(format!(
            "{backbone}[files]\nservices = [\"FILES\"]\ninbox = {:?}\nfsync = \"never\"\n",
            inbox.display().to_string()
        ));
        let mut rigs = vec![self.start_rig(&spec)?];
        self.results.commands.extend(rigs[0].commands());
        let addr = rigs[0].node_addr.clone();
        let monitor = self.monitor(&rigs);
        let secs = self.seconds();
        let without = hold(&mut rigs, RATE, secs, 1.0, &monitor)?.remove(0);
        self.progress
            .line(&format!("without files: {}", step_text(&without)), 1.0);

        // Files at full speed for as long as the latency is held: the large file
        // queued, delivered, queued again; or, `queued_first`, enough copies queued
        // together before the first is sent that only their transfer runs while it is.
        let size = std::fs::metadata(large)?.len();
        let name = large
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("large")
            .to_string();
        let ahead = if queued_first {
            let bytes = share as f64 * 1e6 * (secs + 3.0);
            (bytes / size as f64).ceil() as usize + 1
        } else {
            0
        };
        for round in 1..=ahead {
            put_in_outbox(large, &outbox.join(queued_copy(round, &name)))?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let delivered = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let sender = {
            let (stop, delivered) = (stop.clone(), delivered.clone());
            let (bin, large, inbox) = (
                self.programs.node.clone(),
                large.to_path_buf(),
                // Files arrive in their service's directory.
                inbox.join("FILES"),
            );
            std::thread::spawn(move || -> Result<()> {
                if ahead > 0 {
                    return collect_queued(&inbox, &name, size, ahead, &stop, &delivered);
                }
                let mut round = 0;
                while !stop.load(Ordering::Relaxed) {
                    round += 1;
                    send_copy(&bin, &addr, &large, round)?;
                    let file = inbox.join(format!("md-{round}")).join(&name);
                    let deadline = Instant::now() + Duration::from_secs(120);
                    while std::fs::metadata(&file).map_or(true, |m| m.len() != size) {
                        if Instant::now() > deadline {
                            bail!("{} not delivered within 120 s", file.display());
                        }
                        if stop.load(Ordering::Relaxed) {
                            return Ok(());
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    delivered.fetch_add(size, Ordering::Relaxed);
                    // Room on the disk: the inbox keeps only the latest.
                    if round > 1 {
                        let _ = std::fs::remove_dir_all(inbox.join(format!("md-{}", round - 1)));
                    }
                }
                Ok(())
            })
        };
        // The first file on its way before the latency is held; copies queued first
        // all taken from the outbox (queued) before it is.
        let start = Instant::now();
        if queued_first {
            while std::fs::read_dir(&outbox).is_ok_and(|mut d| d.next().is_some()) {
                if start.elapsed() > Duration::from_secs(60) {
                    bail!(
                        "the source did not take the copies from its outbox {} within 60 s",
                        outbox.display()
                    );
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        while delivered.load(Ordering::Relaxed) == 0
            && !inbox.exists()
            && start.elapsed() < Duration::from_secs(30)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        // What the edge took of the files while the latency was held: its counter of
        // chunk bytes, read before and after (files whole in the window say less: sent
        // side by side, copies queued first are whole together at its end).
        let edge_http = rigs[0].edge.as_ref().and_then(|e| e.ws_addr.clone());
        let taken = || counter(edge_http.as_deref(), "tickwire_files_received_bytes_total");
        let taken_before = taken()?;
        let t0 = Instant::now();
        let during = hold(&mut rigs, RATE, secs, 1.0, &monitor);
        let window = t0.elapsed().as_secs_f64();
        let taken_after = taken()?;
        stop.store(true, Ordering::Relaxed);
        let sent = sender
            .join()
            .map_err(|_| anyhow::anyhow!("the files sender thread panicked"))?;
        let during = during?.remove(0);
        self.progress
            .line(&format!("during files: {}", step_text(&during)), 1.0);
        stop_rigs(rigs)?;
        let _ = std::fs::remove_dir_all(&dir);
        sent?;
        let p99_ratio = p99_ratio(without.latency.p99_ns, during.latency.p99_ns)?;
        let us = |ns: u64| ns as f64 / 1000.0;
        Ok(FilesMarketData {
            files_share_mb_per_s: share,
            queued_first,
            rate: RATE,
            p50_us_without: us(without.latency.p50_ns),
            p99_us_without: us(without.latency.p99_ns),
            p50_us_during: us(during.latency.p50_ns),
            p99_us_during: us(during.latency.p99_ns),
            p99_ratio,
            delivered_ratio_during: during.delivered_ratio,
            files_mb_per_s: mb_per_s(taken_before, taken_after, window),
            seconds: secs,
        })
    }
}

/// The market data's p99 during the files over its p99 without. A p99 of no samples
/// (0) is no figure: a ratio of it would be made up (huge, or 0), so it is an error.
fn p99_ratio(without_ns: u64, during_ns: u64) -> Result<f64> {
    for (what, p99) in [
        ("without files", without_ns),
        ("during the files", during_ns),
    ] {
        if p99 == 0 {
            bail!("the market data {what} took no latency samples: no p99 to compare");
        }
    }
    Ok(during_ns as f64 / without_ns as f64)
}

/// Megabytes per second between two readings of a byte counter.
fn mb_per_s(bytes_before: u64, bytes_after: u64, seconds: f64) -> f64 {
    match seconds > 0.0 {
        true => bytes_after.saturating_sub(bytes_before) as f64 / 1e6 / seconds,
        false => 0.0,
    }
}

/// The name of copy `round` of the large file queued first.
fn queued_copy(round: usize, name: &str) -> String {
    format!("md-{round}-{name}")
}

/// Puts a copy of the large file in the source's outbox: a hard link (no bytes
/// written; the source hashes it and moves it into its spool), or a copy where the
/// file system has no links.
fn put_in_outbox(large: &Path, to: &Path) -> Result<()> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if std::fs::hard_link(large, to).is_err() {
        std::fs::copy(large, to)
            .with_context(|| format!("cannot put {} in the outbox", to.display()))?;
    }
    Ok(())
}

/// Waits for the `ahead` copies queued first to arrive whole in `inbox` (in any
/// order: they are sent side by side), each removed once counted (room on the disk),
/// until `stop`. Fails if none arrives for 120 s.
fn collect_queued(
    inbox: &Path,
    name: &str,
    size: u64,
    ahead: usize,
    stop: &AtomicBool,
    delivered: &std::sync::atomic::AtomicU64,
) -> Result<()> {
    let mut waiting: Vec<usize> = (1..=ahead).collect();
    let mut progress = Instant::now();
    while !waiting.is_empty() && !stop.load(Ordering::Relaxed) {
        let before = waiting.len();
        waiting.retain(|&round| {
            let file = inbox.join(queued_copy(round, name));
            let whole = std::fs::metadata(&file).is_ok_and(|m| m.len() == size);
            if whole {
                delivered.fetch_add(size, Ordering::Relaxed);
                let _ = std::fs::remove_file(&file);
            }
            !whole
        });
        if waiting.len() < before {
            progress = Instant::now();
        } else if progress.elapsed() > Duration::from_secs(120) {
            bail!(
                "no copy queued first arrived in {} within 120 s ({} of {ahead} left)",
                inbox.display(),
                waiting.len()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Queues the large file at the source as `md-ROUND/NAME` for the edge.
fn send_copy(bin: &Path, addr: &str, large: &Path, round: usize) -> Result<()> {
    let status = Command::new(bin)
        .args(["files", "send", "--node", addr, "--to", "edge"])
        .args(["--as-dir", &format!("md-{round}")])
        .arg(large)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if !status.success() {
        bail!("tickwire files send failed: {status}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_p99_of_no_samples_gives_no_ratio() {
        assert_eq!(p99_ratio(100, 250).unwrap(), 2.5);
        for (without, during) in [(0, 250), (100, 0)] {
            let e = p99_ratio(without, during).unwrap_err().to_string();
            assert!(e.contains("no latency samples"), "{e}");
        }
    }

    #[test]
    fn the_files_rate_is_the_bytes_taken_in_the_window_over_its_length() {
        assert!((mb_per_s(1_000_000, 501_000_000, 10.0) - 50.0).abs() < 1e-9);
        // A counter that went back (a restarted node) or no time: no rate.
        assert_eq!(mb_per_s(5, 1, 10.0), 0.0);
        assert_eq!(mb_per_s(0, 100, 0.0), 0.0);
    }
}
