//! `tickwire bench files`, market data beside files: a source node and an edge node on
//! the backbone carry 10,000 updates/s from perf-pub to perf-sub, and the latency is
//! held twice, without files and while the large file goes from the source's spool to
//! the edge's inbox again and again at the files' full share: once at the node's
//! default share (`[files] rate_mb_per_s`, 50 MB/s) and once at the lab's
//! `--files-rate-mb`. The goal: the p99 during the transfer within 2x of the p99
//! without.

use super::*;
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
        // The classes before left gigabytes of dirty pages: written back while the
        // latency is held without files, they would make that baseline the slow one.
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
        let mut rows = Vec::new();
        for share in shares {
            for queued_first in [false, true] {
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
        spec.node_config = Some(format!(
            "{backbone}[files]\nservices = [\"FILES\"]\nspool = {:?}\nrate_mb_per_s = {}\nchunk_kib = 62\n",
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
        // before the latency is held that only their transfer runs while it is.
        let size = std::fs::metadata(large)?.len();
        let ahead = if queued_first {
            let bytes = share as f64 * 1e6 * (secs + 3.0);
            (bytes / size as f64).ceil() as usize + 1
        } else {
            0
        };
        for round in 1..=ahead {
            send_copy(&self.programs.node, &addr, large, round)?;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let delivered = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let whole_at = Arc::new(std::sync::Mutex::new(Vec::<Instant>::new()));
        let sender = {
            let (stop, delivered, whole_at) = (stop.clone(), delivered.clone(), whole_at.clone());
            let (bin, large, inbox) = (
                self.programs.node.clone(),
                large.to_path_buf(),
                // Files arrive in their service's directory.
                inbox.join("FILES"),
            );
            std::thread::spawn(move || -> Result<()> {
                let mut round = 0;
                while !stop.load(Ordering::Relaxed) {
                    round += 1;
                    if ahead == 0 {
                        send_copy(&bin, &addr, &large, round)?;
                    } else if round > ahead {
                        break;
                    }
                    let file = inbox
                        .join(format!("md-{round}"))
                        .join(large.file_name().unwrap_or_default());
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
                    if let Ok(mut w) = whole_at.lock() {
                        w.push(Instant::now());
                    }
                    // Room on the disk: the inbox keeps only the latest.
                    if round > 1 {
                        let _ = std::fs::remove_dir_all(inbox.join(format!("md-{}", round - 1)));
                    }
                }
                Ok(())
            })
        };
        // The first file on its way before the latency is held.
        let start = Instant::now();
        while delivered.load(Ordering::Relaxed) == 0
            && !inbox.exists()
            && start.elapsed() < Duration::from_secs(30)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let t0 = Instant::now();
        let during = hold(&mut rigs, RATE, secs, 1.0, &monitor);
        let t1 = Instant::now();
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
        let us = |ns: u64| ns as f64 / 1000.0;
        Ok(FilesMarketData {
            files_share_mb_per_s: share,
            queued_first,
            rate: RATE,
            p50_us_without: us(without.latency.p50_ns),
            p99_us_without: us(without.latency.p99_ns),
            p50_us_during: us(during.latency.p50_ns),
            p99_us_during: us(during.latency.p99_ns),
            p99_ratio: during.latency.p99_ns as f64 / (without.latency.p99_ns as f64).max(1.0),
            delivered_ratio_during: during.delivered_ratio,
            files_mb_per_s: whole_at
                .lock()
                .map_or(0.0, |w| files_mb_per_s(&w, size, t0, t1)),
            seconds: secs,
        })
    }
}

/// Megabytes per second of files of `size` bytes made whole at the times `whole_at`,
/// within `from` to `to`: the files whole after the first one in it, over the time from
/// that first one to the last. A file whole in the window was mostly sent before it
/// when the window began in its middle: counting every file whole in the window over
/// the window's length counts such a file whole, and reads up to a file (at 200 MB,
/// 20 MB/s over 10 s) more or less as the window falls. 0 with fewer than two.
fn files_mb_per_s(whole_at: &[Instant], size: u64, from: Instant, to: Instant) -> f64 {
    let inside: Vec<Instant> = whole_at
        .iter()
        .copied()
        .filter(|t| *t >= from && *t <= to)
        .collect();
    match (inside.first(), inside.last()) {
        (Some(first), Some(last)) if inside.len() >= 2 && last > first => {
            (inside.len() - 1) as f64 * size as f64 / 1e6 / (*last - *first).as_secs_f64()
        }
        _ => 0.0,
    }
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
    fn the_files_rate_counts_only_what_was_sent_in_the_window() {
        // 200 MB files whole every 4 s (50 MB/s); three of them in a window from 4 s to
        // 14 s, the first of those mostly sent before it began.
        let origin = Instant::now();
        let at = |s: f64| origin + Duration::from_secs_f64(s);
        let whole = [at(0.5), at(4.5), at(8.5), at(12.5), at(16.5)];
        let rate = files_mb_per_s(&whole, 200_000_000, at(4.0), at(14.0));
        assert!((rate - 50.0).abs() < 1e-6, "{rate}");
        // Fewer than two files whole in the window: no rate.
        assert_eq!(
            files_mb_per_s(&whole[..2], 200_000_000, at(4.0), at(14.0)),
            0.0
        );
    }
}
