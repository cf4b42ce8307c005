//! The files scenario's section of report.md: the transfer rows beside the peers',
//! market data beside files, and the faults.

use crate::schema::{FilesFault, FilesMarketData, FilesRow};
use anyhow::Result;
use std::fmt::Write as _;

/// The transfer rows, each of Tickwire's followed by rsync's and uftp's of the same
/// class, sites and fsync.
pub(crate) fn report(
    md: &mut String,
    tw: &[FilesRow],
    uftp: &[FilesRow],
    rsync: &[FilesRow],
    cpus: Option<usize>,
    backbone_auth: Option<&str>,
) -> Result<()> {
    writeln!(md, "## Files\n")?;
    let sealed = match backbone_auth {
        Some("blake3") => "sealed with keyed BLAKE3",
        Some("hmac-sha256") => "sealed with HMAC-SHA256",
        _ => "not authenticated",
    };
    writeln!(md, "Files from one site to N sites, all on this machine (loopback). Tickwire: a source node and N edge nodes on the backbone (Aeron multicast, {sealed}), `tickwire files send` to the source; a row ends when the last file is whole in the last inbox. rsync: one daemon per site, one client per site at once. uftp: one receiver in a network namespace (each site in its own with more). The class 63KB-both-ways sends its files down to every site and, at the same time, up from the first site to the source (files counts both). CPU: every process of the run, per GB delivered (bytes x sites); CPU busy: their CPU time over the machine's while the row ran; system calls: the whole machine's while the row ran, per file delivered.\n")?;
    writeln!(md, "| class | files | sites | fsync | system | files/min | MB/s | CPU s/GB | CPU busy | syscalls/file | s |")?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|")?;
    let mut all: Vec<(&str, &FilesRow)> = Vec::new();
    for r in tw {
        all.push(("tickwire", r));
        for (name, peer) in [("rsync", rsync), ("uftp", uftp)] {
            if let Some(p) = peer
                .iter()
                .find(|p| p.class == r.class && p.sites == r.sites && p.fsync == r.fsync)
            {
                all.push((name, p));
            }
        }
    }
    for (system, r) in all {
        match &r.unavailable {
            Some(why) => writeln!(
                md,
                "| {} | {} | {} | {} | {system} | - ({why}) | | | | | |",
                r.class, r.files, r.sites, r.fsync
            )?,
            None => writeln!(
                md,
                "| {} | {} | {} | {} | {system} | {:.0} | {:.1} | {:.2} | {} | {} | {:.2} |",
                r.class,
                r.files,
                r.sites,
                r.fsync,
                r.files_per_min,
                r.mb_per_s,
                r.cpu_s_per_gb,
                cpus.and_then(|n| r.cpu_busy(n))
                    .map_or("-".into(), |b| format!("{:.0}%", b * 100.0)),
                r.syscalls_per_file
                    .map_or("-".into(), |s| format!("{s:.1}")),
                r.seconds
            )?,
        }
    }
    writeln!(md, "\nReference (managed file transfer, the field targets' section 3): 371 files/minute at best.\n")?;
    against_one_site(md, tw)
}

/// Tickwire's rows to several sites beside the same class to one: the goal (one file to
/// N sites in at most 1.2x the time to one) against what the CPU alone allows here,
/// where every site's work shares the same CPUs.
fn against_one_site(md: &mut String, tw: &[FilesRow]) -> Result<()> {
    let rows: Vec<_> = tw
        .iter()
        .filter_map(|r| Some((r, r.against_one_site(tw)?)))
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(md, "To several sites against one (Tickwire): the time, and the CPU every process used, over the same class's to one site. On this one machine the sites' work adds up on the same CPUs: where both rows keep the CPUs busy, the time follows the CPU; sites on machines of their own would not pay that. Goal: one file to 4 sites within 1.2x the time to one.\n")?;
    writeln!(md, "| class | sites | fsync | time (x) | CPU (x) |")?;
    writeln!(md, "|---|---|---|---|---|")?;
    for (r, x) in rows {
        writeln!(
            md,
            "| {} | {} | {} | {:.2} | {:.2} |",
            r.class, r.sites, r.fsync, x.time, x.cpu
        )?;
    }
    writeln!(md)?;
    Ok(())
}

/// The market-data lines of report.md's files section.
pub(crate) fn market_data_report(md: &mut String, rows: &[FilesMarketData]) -> Result<()> {
    let Some(first) = rows.first() else {
        return Ok(());
    };
    writeln!(md, "Market data beside files: {} updates/s from a source node to an edge node on the backbone, held {:.0} s without files and {:.0} s while the large file goes to the edge again and again at the files' full share: uploaded meanwhile (`files send` uploads each copy to the source as the one before arrives) or queued first (every copy put in the source's outbox and queued before any is sent: only their transfer runs). Goal: p99 during within 2x of p99 without.\n", first.rate, first.seconds, first.seconds)?;
    writeln!(md, "| files share MB/s | files | p50 µs without | p99 µs without | p50 µs during | p99 µs during | p99 during / without | delivered during | files MB/s during |")?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|")?;
    for m in rows {
        writeln!(
            md,
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.4} | {:.0} |",
            m.files_share_mb_per_s,
            if m.queued_first {
                "queued first"
            } else {
                "uploaded meanwhile"
            },
            m.p50_us_without,
            m.p99_us_without,
            m.p50_us_during,
            m.p99_us_during,
            m.p99_ratio,
            m.delivered_ratio_during,
            m.files_mb_per_s
        )?;
    }
    writeln!(md)?;
    Ok(())
}

/// The faults' lines of report.md's files section.
pub(crate) fn faults_report(md: &mut String, rows: &[FilesFault]) -> Result<()> {
    let Some(first) = rows.first() else {
        return Ok(());
    };
    writeln!(md, "Faults: the large file ({:.0} MB) from a source to {} sites at {} MB/s, without a fault and under each: 1% of the sites' datagrams lost, a site or the source killed with SIGKILL mid-file and started again, one site's disk full (a tmpfs of half the file). Whole: byte for byte the source's.\n", first.bytes as f64 / 1e6, first.sites, first.rate_mb_per_s)?;
    writeln!(
        md,
        "| fault | seconds | seconds without | whole at | what the nodes said |"
    )?;
    writeln!(md, "|---|---|---|---|---|")?;
    for f in rows {
        match &f.unavailable {
            Some(why) => writeln!(md, "| {} | | | | not run: {why} |", f.fault)?,
            None => writeln!(
                md,
                "| {} | {:.1} | {:.1} | {}/{} | {} |",
                f.fault, f.seconds, f.seconds_without, f.sites_whole, f.sites_expected, f.detail
            )?,
        }
    }
    writeln!(md)?;
    Ok(())
}
