//! The WebSocket scenario's section of report.md.

use super::format::{fmt_rate, us};
use super::steps::steps_table;
use crate::schema::WebSocketResult;
use crate::stats::{node_cpu_us_per_update, node_usage, node_user_us_per_update};
use anyhow::Result;
use std::fmt::Write as _;

/// The search, the latency at fixed rates and, when run, the shared-encoding fan-out.
pub(crate) fn report(md: &mut String, w: &WebSocketResult) -> Result<()> {
    writeln!(
        md,
        "## WebSocket subscriber\n\nOne tr_json2 connection watching {} items (one batch request), cache on: highest sustained rate **{} updates/s**.\n",
        w.items,
        fmt_rate(w.max_sustainable_updates_per_s as f64)
    )?;
    steps_table(md, "WebSocket search", &w.steps)?;
    steps_table(md, "WebSocket latency at fixed rates", &w.latency)?;
    if let Some(f) = &w.fanout {
        writeln!(
            md,
            "### WebSocket fan-out: shared encoding\n\n{} connections each watching the same {} items, {} updates/s in ({} out), cache on. Node CPU per update delivered (median of {} runs each): **{:.2} µs shared, {:.2} µs per client**, {:.2}x; of which user mode (the encoding; the rest is writing to the sockets) {:.2} and {:.2} µs.\n",
            f.connections,
            f.items,
            fmt_rate(f.input_updates_per_s as f64),
            fmt_rate((f.input_updates_per_s * f.connections as u64) as f64),
            f.shared.len(),
            f.shared_node_cpu_us_per_update,
            f.unshared_node_cpu_us_per_update,
            f.unshared_over_shared,
            f.shared_node_user_us_per_update,
            f.unshared_node_user_us_per_update
        )?;
        writeln!(
            md,
            "Update encodings (nodes' whole lives, from their /metrics): shared {} made, {} reused; per client {} made, {} reused.\n",
            f.shared_encoded, f.shared_reused, f.unshared_encoded, f.unshared_reused
        )?;
        writeln!(md, "| encoding | delivered/s | node CPU % | node µs/update | of which user | p50 µs | p99 µs | result |")?;
        writeln!(md, "|---|---|---|---|---|---|---|---|")?;
        for (name, steps) in [("shared", &f.shared), ("per client", &f.unshared)] {
            for st in steps.iter() {
                let node_cpu = node_usage(st).map_or(f64::NAN, |p| p.cpu_percent);
                writeln!(
                    md,
                    "| {name} | {} | {:.0} | {:.2} | {:.2} | {} | {} | {} |",
                    fmt_rate(st.delivered_per_s),
                    node_cpu,
                    node_cpu_us_per_update(st).unwrap_or(f64::NAN),
                    node_user_us_per_update(st).unwrap_or(f64::NAN),
                    us(st.latency.p50_ns as f64),
                    us(st.latency.p99_ns as f64),
                    st.reason
                )?;
            }
        }
        writeln!(md)?;
    }
    Ok(())
}
