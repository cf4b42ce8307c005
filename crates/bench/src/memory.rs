//! `tickwire bench memory`: what a node's memory costs per subscriber connection and
//! per stream (one item watched on one connection).
//!
//! Three rigs, each a fresh node with a perf-pub and one perf-sub process holding many
//! connections that each watch the same items (commonality all), updates flowing at a
//! low rate. The node's resident set (VmRSS) is read once every image has arrived and
//! updates have flowed for a while:
//!
//! - `small`: 10 connections x W items (the node's fixed cost, W items cached);
//! - `full`: C connections x W items;
//! - `narrow`: C connections x W/10 items.
//!
//! Per connection (with its W streams) = (full - small) / (C - 10); per stream =
//! (full - narrow) / (C x (W - W/10)); per connection alone = per connection with
//! streams - W x per stream. The narrow rig caches fewer items (about 100 bytes each),
//! which the per-stream figure absorbs; it is small next to the streams.

use crate::lab::{start_rig, RigSpec};
use crate::sysinfo::parse_status;
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::time::Duration;
use tickwire_bench_report::schema::{Memory, MemoryRig};

fn node_memory(pid: u32) -> Result<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("cannot read /proc/{pid}/status"))?;
    let s = parse_status(&text);
    match (s.vm_rss_bytes, s.vm_hwm_bytes) {
        (Some(rss), Some(hwm)) => Ok((rss, hwm)),
        _ => bail!("no VmRSS/VmHWM in /proc/{pid}/status"),
    }
}

fn measure(
    programs: &crate::lab::Programs,
    logs: &Path,
    connections: usize,
    items: usize,
    rate: u64,
    settle: Duration,
) -> Result<MemoryRig> {
    let label = format!("memory {connections}x{items}");
    let mut spec = RigSpec::new(label, "on", items);
    spec.connections = connections;
    spec.fanout = connections as f64;
    spec.start_rate = rate;
    spec.latency_rate = "all".into();
    let rig = start_rig(programs, &spec, logs)?;
    std::thread::sleep(settle);
    let (rss, hwm) = node_memory(rig.node.pid())?;
    rig.subscriber.stop()?;
    rig.publisher.stop()?;
    rig.node.stop()?;
    Ok(MemoryRig {
        connections,
        items,
        streams: connections * items,
        node_rss_bytes: rss,
        node_peak_rss_bytes: hwm,
    })
}

/// Runs the three rigs and derives the per-connection and per-stream figures.
pub fn run(
    programs: &crate::lab::Programs,
    logs: &Path,
    connections: usize,
    items: usize,
    progress: &mut dyn FnMut(&str),
) -> Result<Memory> {
    if connections <= 10 || items < 10 {
        bail!("memory: needs more than 10 connections and at least 10 items");
    }
    let rate = 10;
    let settle = Duration::from_secs(3);
    let small = measure(programs, logs, 10, items, rate, settle)?;
    progress(&format!(
        "memory: 10 connections x {items} items: node RSS {:.1} MiB",
        small.node_rss_bytes as f64 / 1048576.0
    ));
    let full = measure(programs, logs, connections, items, rate, settle)?;
    progress(&format!(
        "memory: {connections} connections x {items} items: node RSS {:.1} MiB",
        full.node_rss_bytes as f64 / 1048576.0
    ));
    let narrow_items = items / 10;
    let narrow = measure(programs, logs, connections, narrow_items, rate, settle)?;
    progress(&format!(
        "memory: {connections} connections x {narrow_items} items: node RSS {:.1} MiB",
        narrow.node_rss_bytes as f64 / 1048576.0
    ));
    let per_conn_streams =
        (full.node_rss_bytes as f64 - small.node_rss_bytes as f64) / (connections - 10) as f64;
    let per_stream = (full.node_rss_bytes as f64 - narrow.node_rss_bytes as f64)
        / (connections * (items - narrow_items)) as f64;
    Ok(Memory {
        connections,
        items,
        update_rate: rate,
        settle_s: settle.as_secs_f64(),
        per_connection_with_streams_bytes: per_conn_streams,
        per_stream_bytes: per_stream,
        per_connection_bytes: per_conn_streams - items as f64 * per_stream,
        small,
        full,
        narrow,
    })
}
