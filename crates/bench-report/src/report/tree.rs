//! The node tree's section of report.md.

use super::steps::steps_table;
use super::two_nodes::{two_node_figures, TwoNodes};
use crate::schema::TreeResult;
use anyhow::Result;

/// The node tree's part of report.md.
pub(crate) fn report(md: &mut String, t: &TreeResult) -> Result<()> {
    let names = TwoNodes {
        heading: "## Through two nodes (upstream link over TCP on loopback)",
        path: "top -> POP",
        first: ("top node CPU", "node-top"),
        second: ("POP node CPU", "node-pop"),
        reference: "Reference (RMDS 6, 2009, one core per process, separate hosts): p2ps POP cache enabled, no fan-out 620,000/s; 100 mounts producer 50/50 45,000 in.",
        fanout_at: "the POP",
        fanout_note: ", cache on",
        through: "through two nodes",
        short: "two nodes",
    };
    two_node_figures(
        md,
        &names,
        t.single_node_updates_per_s,
        &t.throughput,
        t.fanout.as_ref(),
        &t.single_node_latency,
        &t.latency,
    )?;
    for th in &t.throughput {
        steps_table(
            md,
            &format!("Two-node steps, cache {}", th.cache),
            &th.steps,
        )?;
    }
    Ok(())
}
