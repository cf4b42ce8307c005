//! The wait scenario's section of report.md.

use super::format::{fmt_rate, us};
use super::steps::process_cpu;
use crate::schema::WaitResult;
use anyhow::Result;
use std::fmt::Write as _;

/// The wait scenario's part of report.md: one table, a row per strategy and rung.
pub(crate) fn report(md: &mut String, w: &WaitResult) -> Result<()> {
    writeln!(
        md,
        "## What waiting costs: the backbone's idle strategies ({})\n",
        w.transport
    )?;
    writeln!(
        md,
        "Each process's CPU as a share of one CPU, and per update sent (its CPU time over the updates the publisher sent in the step). Latency in µs, end to end. \"At rest\": publisher and subscriber connected, every image sent, no update.\n"
    )?;
    writeln!(md, "| idle | rate/s | p50 | p99 | mean | source node | edge node | publisher | subscriber | sustained |")?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|")?;
    for s in &w.strategies {
        for l in &s.latency {
            let cpu = |prefix: &str| process_cpu(&l.step, prefix);
            let latency = |ns: f64| {
                if l.latency.count > 0 {
                    us(ns)
                } else {
                    "-".into()
                }
            };
            writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                s.strategy,
                if l.rate == 0 {
                    "at rest".to_string()
                } else {
                    fmt_rate(l.rate as f64)
                },
                latency(l.latency.p50_ns as f64),
                latency(l.latency.p99_ns as f64),
                latency(l.latency.mean_ns),
                cpu("node-source"),
                cpu("node-edge"),
                cpu("perf-pub"),
                cpu("perf-sub"),
                if l.sustained { "yes" } else { "no" }
            )?;
        }
    }
    writeln!(md)?;
    Ok(())
}
