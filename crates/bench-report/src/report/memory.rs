//! The memory scenario's section of report.md.

use crate::schema::Memory;
use anyhow::Result;
use std::fmt::Write as _;

/// Each rig's node memory and the per-connection and per-stream figures.
pub(crate) fn report(md: &mut String, m: &Memory) -> Result<()> {
    writeln!(md, "## Memory per connection and per stream\n")?;
    writeln!(
        md,
        "Node VmRSS after every image arrived and {:.0} s of updates at {}/s per item set (cache on).\n",
        m.settle_s, m.update_rate
    )?;
    writeln!(
        md,
        "| rig | connections | items each | streams | node RSS MiB | peak RSS MiB |"
    )?;
    writeln!(md, "|---|---|---|---|---|---|")?;
    for (name, g) in [
        ("small", &m.small),
        ("full", &m.full),
        ("narrow", &m.narrow),
    ] {
        writeln!(
            md,
            "| {name} | {} | {} | {} | {:.1} | {:.1} |",
            g.connections,
            g.items,
            g.streams,
            g.node_rss_bytes as f64 / 1048576.0,
            g.node_peak_rss_bytes as f64 / 1048576.0
        )?;
    }
    writeln!(
        md,
        "\nPer connection with its {} streams: {:.0} bytes; per stream: {:.0} bytes; per connection alone: {:.0} bytes.\n",
        m.items, m.per_connection_with_streams_bytes, m.per_stream_bytes, m.per_connection_bytes
    )?;
    Ok(())
}
