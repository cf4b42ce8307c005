//! The backbone scenario's section of report.md.

use super::format::{fmt_rate, us};
use super::steps::steps_table;
use super::two_nodes::{two_node_figures, TwoNodes};
use crate::schema::BackboneResult;
use anyhow::Result;
use std::fmt::Write as _;

/// The backbone's part of report.md.
pub(crate) fn report(md: &mut String, b: &BackboneResult) -> Result<()> {
    let heading = format!("## Across the backbone ({})", b.transport);
    let names = TwoNodes {
        heading: &heading,
        path: "backbone",
        first: ("source CPU", "node-source"),
        second: ("edge CPU", "node-edge"),
        reference: "Reference (RMDS 6, 2009, one core per process, separate hosts): src_dist cache disabled 1,480,000/s; p2ps LAN cache enabled 650,000/s.",
        fanout_at: "the edge",
        fanout_note: "",
        through: "across the backbone",
        short: "backbone",
    };
    two_node_figures(
        md,
        &names,
        b.single_node_updates_per_s,
        &b.throughput,
        b.fanout.as_ref(),
        &b.single_node_latency,
        &b.latency,
    )?;
    if !b.loss.is_empty() {
        writeln!(
            md,
            "### Loss at the edge (Aeron's loss generator on received data frames)\n"
        )?;
        writeln!(md, "| loss | sustained updates/s | p50 / p99 at 10,000/s (µs) | gaps | NAKs sent (edge) | retransmits sent (source) |")?;
        writeln!(md, "|---|---|---|---|---|---|")?;
        for l in &b.loss {
            // The latency's step comes first: a latency held in a step that failed is
            // shown as such, not as the latency of that loss.
            let failed = l.steps.first().is_some_and(|s| !s.pass);
            writeln!(
                md,
                "| {:.1}% | {} | {} / {}{} | {} | {} | {} |",
                l.loss_rate * 100.0,
                fmt_rate(l.sustained_updates_per_s as f64),
                us(l.p50_ns as f64),
                us(l.p99_ns as f64),
                if failed { " (its step failed)" } else { "" },
                l.gaps,
                l.naks,
                l.retransmits
            )?;
        }
        writeln!(md)?;
    }
    for t in &b.throughput {
        steps_table(md, &format!("Backbone steps, cache {}", t.cache), &t.steps)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{LossResult, Step};

    /// A loss row whose latency step failed says so beside its latency.
    #[test]
    fn a_loss_rows_latency_from_a_failed_step_is_marked() {
        let row = |pass: bool| LossResult {
            loss_rate: 0.01,
            p50_ns: 40_000,
            p99_ns: 90_000,
            steps: vec![Step {
                pass,
                ..Default::default()
            }],
            ..Default::default()
        };
        let b = BackboneResult {
            loss: vec![row(true), row(false)],
            ..Default::default()
        };
        let mut md = String::new();
        report(&mut md, &b).unwrap();
        let rows: Vec<&str> = md.lines().filter(|l| l.starts_with("| 1.0%")).collect();
        assert_eq!(rows.len(), 2, "{md}");
        assert!(!rows[0].contains("failed"), "{}", rows[0]);
        assert!(rows[1].contains("(its step failed)"), "{}", rows[1]);
    }
}
