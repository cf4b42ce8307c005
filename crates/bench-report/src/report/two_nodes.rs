//! The figures every two-node rig reports (the backbone's, the node tree's), beside the
//! single node's of the same run.

use super::format::{fmt_rate, us};
use super::steps::{cpu_at_max, ladder_cpu_table};
use crate::schema::{Fanout, LatencyStep, Throughput};
use anyhow::Result;
use std::fmt::Write as _;

/// A multi-node latency ladder beside the single node's of the same run (report.md):
/// `path` says how the updates went ("across the backbone"), `what` heads its columns.
fn latency_beside_single(
    md: &mut String,
    path: &str,
    what: &str,
    single: &[LatencyStep],
    ladder: &[LatencyStep],
) -> Result<()> {
    if ladder.is_empty() {
        return Ok(());
    }
    writeln!(
        md,
        "### End-to-end latency, single node and {path} (cache off; µs)\n"
    )?;
    writeln!(md, "| rate/s | single p50 | {what} p50 | added p50 | single p99 | {what} p99 | {what} mean | {what} max | sustained |")?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|")?;
    for l in ladder {
        let s = single.iter().find(|x| x.rate == l.rate);
        let opt = |f: &dyn Fn(&LatencyStep) -> f64| s.map_or("-".to_string(), |x| us(f(x)));
        let added = s.map_or("-".to_string(), |x| {
            us(l.latency.p50_ns as f64 - x.latency.p50_ns as f64)
        });
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            fmt_rate(l.rate as f64),
            opt(&|x| x.latency.p50_ns as f64),
            us(l.latency.p50_ns as f64),
            added,
            opt(&|x| x.latency.p99_ns as f64),
            us(l.latency.p99_ns as f64),
            us(l.latency.mean_ns),
            us(l.latency.max_ns as f64),
            if l.sustained { "yes" } else { "no" }
        )?;
    }
    writeln!(md)?;
    ladder_cpu_table(md, ladder)
}

/// How a two-node rig's part of report.md names its nodes and path.
pub(crate) struct TwoNodes<'a> {
    /// The section's heading line.
    pub heading: &'a str,
    /// The throughput table's path column ("backbone").
    pub path: &'a str,
    /// Each node's CPU column and process-name prefix ("source CPU", "node-source").
    pub first: (&'a str, &'a str),
    pub second: (&'a str, &'a str),
    /// The reference report's figures, one line.
    pub reference: &'a str,
    /// Where fan-out is measured ("the edge"), and what the sentence adds (", cache on").
    pub fanout_at: &'a str,
    pub fanout_note: &'a str,
    /// How the updates went, for the latency table ("across the backbone"), and the
    /// name of its columns ("backbone").
    pub through: &'a str,
    pub short: &'a str,
}

/// The figures every two-node rig reports (the backbone's, the node tree's): its
/// throughput beside the single node's of the same run, fan-out at the second node, and
/// the latency ladder beside the single node's.
pub(crate) fn two_node_figures(
    md: &mut String,
    names: &TwoNodes<'_>,
    single_node_updates_per_s: u64,
    throughput: &[Throughput],
    fanout: Option<&Fanout>,
    single_node_latency: &[LatencyStep],
    latency: &[LatencyStep],
) -> Result<()> {
    writeln!(md, "{}\n", names.heading)?;
    writeln!(
        md,
        "Single node, cache off, same run: {} updates/s.\n",
        fmt_rate(single_node_updates_per_s as f64)
    )?;
    writeln!(md, "| path | max sustainable updates/s | of single node | {} | {} | publisher CPU | subscriber CPU | next step failed |", names.first.0, names.second.0)?;
    writeln!(md, "|---|---|---|---|---|---|---|---|")?;
    for t in throughput {
        let cpu = |prefix: &str| cpu_at_max(t, prefix);
        let share = if single_node_updates_per_s > 0 {
            format!(
                "{:.0}%",
                100.0 * t.max_sustainable_updates_per_s as f64 / single_node_updates_per_s as f64
            )
        } else {
            "-".into()
        };
        writeln!(
            md,
            "| {}, cache {} | {} | {} | {} | {} | {} | {} | {} |",
            names.path,
            t.cache,
            fmt_rate(t.max_sustainable_updates_per_s as f64),
            share,
            cpu(names.first.1),
            cpu(names.second.1),
            cpu("perf-pub"),
            cpu("perf-sub"),
            t.limited_by.as_deref().unwrap_or("-")
        )?;
    }
    writeln!(md, "\n{}\n", names.reference)?;
    if let Some(f) = fanout {
        writeln!(
            md,
            "Fan-out at {} ({} connections, producer 50/50, fan-out {:.1}, {} items{}): {} in, {} out per second; next step failed: {}.\n",
            names.fanout_at,
            f.connections,
            f.fanout,
            f.items,
            names.fanout_note,
            fmt_rate(f.input_updates_per_s as f64),
            fmt_rate(f.output_updates_per_s as f64),
            f.limited_by.as_deref().unwrap_or("-")
        )?;
    }
    latency_beside_single(md, names.through, names.short, single_node_latency, latency)
}
