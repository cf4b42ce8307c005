//! The journal scenario's section of report.md.

use super::format::{fmt_rate, ns};
use crate::schema::{JournalStep, JournalUpdateCost};
use anyhow::Result;
use std::fmt::Write as _;

/// A latency with its unit: µs below a millisecond, ms above.
fn duration(ns: u64) -> String {
    if ns < 1_000_000 {
        format!("{:.0} µs", ns as f64 / 1e3)
    } else {
        format!("{:.2} ms", ns as f64 / 1e6)
    }
}

/// The journal's part of report.md.
pub(crate) fn report(md: &mut String, steps: &[JournalStep]) -> Result<()> {
    writeln!(md, "## Posts and the journal\n")?;
    writeln!(md, "One poster keeps {} posts in flight (off-stream, Ack asked); the publisher (`tickwire publish --accept-posts`) applies each and answers. The journal writes a received record before the post goes on and a completed record before the Ack (docs/JOURNAL.md).\n", steps.first().map_or(0, |s| s.window))?;
    writeln!(md, "| sync | posts acknowledged/s | base 100 = always | Ack p50 | Ack p99 | Ack max | journal syscalls per post | journal MB/s | node CPU per post | refused |")?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|")?;
    let base = steps
        .iter()
        .find(|s| s.sync == "always")
        .map_or(0.0, |s| s.posts_per_s);
    for s in steps {
        let rel = if base > 0.0 {
            format!("{:.0}", 100.0 * s.posts_per_s / base)
        } else {
            "-".into()
        };
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {:.3} | {:.1} | {} | {} |",
            s.sync,
            fmt_rate(s.posts_per_s),
            rel,
            duration(s.ack_p50_ns),
            duration(s.ack_p99_ns),
            duration(s.ack_max_ns),
            s.syscalls_per_post,
            s.journal_mb_per_s,
            s.node_cpu_us_per_post
                .map_or("-".into(), |c| format!("{c:.1} µs")),
            match &s.first_nak {
                Some(n) => format!("{} ({n})", s.nakked),
                None => "0".into(),
            }
        )?;
    }
    writeln!(md, "\nReference (managed file transfer, section 3 of the field targets): 371 files/minute without a forced sync per queue write, 91 with one.\n")?;
    Ok(())
}

/// The update-journaling part of report.md.
pub(crate) fn report_updates(md: &mut String, c: &JournalUpdateCost) -> Result<()> {
    writeln!(
        md,
        "Journaling every update ({} items, cache on, sync batch): {} updates/s sustained with it, {} without; it costs {:.0}% of the rate (next step failed: {} / {}). The node's CPU per update at those rates: {} with, {} without.\n",
        c.items,
        fmt_rate(c.with_journal_updates_per_s as f64),
        fmt_rate(c.without_journal_updates_per_s as f64),
        c.cost_percent,
        c.with_limited_by.as_deref().unwrap_or("-"),
        c.without_limited_by.as_deref().unwrap_or("-"),
        ns(c.with_node_cpu_ns_per_update),
        ns(c.without_node_cpu_ns_per_update),
    )?;
    Ok(())
}
