//! A run's `report.md` (a section per scenario that ran) and its SVG plots, written
//! beside its `results.json`.

mod backbone;
mod files;
mod format;
mod journal;
mod memory;
mod peers;
mod plots;
mod processes;
mod rssl;
mod single_node;
mod stall;
mod steps;
mod tree;
mod two_nodes;
mod wait;
mod websocket;

pub use format::{fmt_rate, ns, us, us_or_dash};

use crate::schema::{Machine, Results};
use anyhow::Result;
use std::fmt::Write as _;
use std::path::Path;

/// Writes `dir/results.json`, `dir/report.md` and the run's SVG plots.
pub fn write_outputs(dir: &Path, r: &Results) -> Result<()> {
    std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(r)?)?;
    std::fs::write(dir.join("report.md"), render(r)?)?;
    plots::write(dir, r)?;
    Ok(())
}

/// The text of `report.md`: the machine, then each scenario's section in a fixed
/// order, every process's usage and the commands run.
pub fn render(r: &Results) -> Result<String> {
    let mut md = String::new();
    header(&mut md, r)?;
    if !r.throughput.is_empty() {
        single_node::throughput(&mut md, r)?;
    }
    single_node::fanout(&mut md, r)?;
    if !r.latency.is_empty() {
        single_node::latency(&mut md, r)?;
    }
    if !r.instances.is_empty() {
        single_node::instances(&mut md, r)?;
    }
    scenarios(&mut md, r)?;
    if let Some(w) = &r.websocket {
        websocket::report(&mut md, w)?;
    }
    if let Some(m) = &r.memory {
        memory::report(&mut md, m)?;
    }
    if !r.processes.is_empty() {
        processes::report(&mut md, &r.processes)?;
    }
    commands(&mut md, r)?;
    Ok(md)
}

/// The machine, the build and the pass rule every table uses.
fn header(md: &mut String, r: &Results) -> Result<()> {
    match &r.machine {
        Some(m) => writeln!(
            md,
            "Machine: {} ({} CPUs, {:.1} GiB), kernel {}, {}, socket buffers at most {} / {} bytes (net.core.rmem_max / wmem_max). Tickwire {} (commit {}). Run took {:.0} s.\n",
            m.cpu_model,
            m.cpus,
            m.memory_bytes as f64 / (1u64 << 30) as f64,
            m.kernel,
            m.os.as_deref().unwrap_or("unknown OS"),
            m.socket_receive_buffer_max_bytes
                .map_or("unknown".to_string(), |b| b.to_string()),
            m.socket_send_buffer_max_bytes
                .map_or("unknown".to_string(), |b| b.to_string()),
            r.tickwire_version,
            r.git_commit,
            r.duration_s
        )?,
        None => writeln!(md, "Tickwire {} (commit {}).\n", r.tickwire_version, r.git_commit)?,
    }
    if let Some(line) = r.machine.as_ref().and_then(idle_sentence) {
        writeln!(md, "{line}\n")?;
    }
    writeln!(md, "Node, publisher and subscriber run on this one machine as separate processes. A rate is sustained when the subscribers received at least 99.5% of what was offered (times the fan-out) over the step, with zero sequence gaps, and the publisher kept its schedule.\n")?;
    Ok(())
}

/// The sections of the scenarios beyond one node, in report order.
fn scenarios(md: &mut String, r: &Results) -> Result<()> {
    if let Some(st) = &r.stall {
        stall::report(md, st)?;
    }
    if let Some(b) = &r.backbone {
        backbone::report(md, b)?;
    }
    if let Some(w) = &r.wait {
        wait::report(md, w)?;
    }
    if !r.journal.is_empty() {
        journal::report(md, &r.journal)?;
    }
    if let Some(c) = &r.journal_updates {
        journal::report_updates(md, c)?;
    }
    if let Some(t) = &r.tree {
        tree::report(md, t)?;
    }
    if let Some(p) = r.peers.as_ref().filter(|p| !p.nats.is_unset()) {
        peers::report(md, p)?;
    }
    if !r.files.is_empty() {
        let (uftp, rsync) = r
            .peers
            .as_ref()
            .map_or((&[][..], &[][..]), |p| (&p.uftp[..], &p.rsync[..]));
        files::report(
            md,
            &r.files,
            uftp,
            rsync,
            r.machine.as_ref().map(|m| m.cpus),
            r.files_backbone_auth.as_deref(),
        )?;
        files::market_data_report(md, &r.files_market_data)?;
        files::faults_report(md, &r.files_faults)?;
    }
    if let Some(x) = &r.rssl {
        rssl::report(md, x, r.settings.rssl_ticks)?;
    }
    Ok(())
}

/// Every command line the run started, last in the report.
fn commands(md: &mut String, r: &Results) -> Result<()> {
    writeln!(md, "## Commands\n\n```")?;
    for c in &r.commands {
        writeln!(md, "{c}")?;
    }
    writeln!(md, "```")?;
    Ok(())
}

/// The report's sentence on how idle CPUs wait and what waking one costs, if known.
fn idle_sentence(m: &Machine) -> Option<String> {
    let idle = &m.cpu_idle;
    let mut parts = Vec::new();
    if let Some(d) = &idle.driver {
        parts.push(format!(
            "idle CPUs: cpuidle driver {d}, governor {}",
            idle.governor.as_deref().unwrap_or("unknown")
        ));
    }
    if let Some(ns) = idle.guest_halt_poll_ns {
        parts.push(if ns == 0 {
            "guest halt polling off (an idle virtual CPU halts at once)".to_string()
        } else {
            format!("guest halt polling up to {} µs", ns / 1000)
        });
    }
    if let Some(w) = &m.wake_round_trip {
        parts.push(format!(
            "a thread on an idle CPU woken and answering (loopback TCP round trip, CPUs {} and {}, {} µs idle before each): p50 {} µs, p90 {} µs",
            w.cpus[0],
            w.cpus[1],
            w.idle_us,
            us(w.p50_ns as f64),
            us(w.p90_ns as f64)
        ));
    }
    (!parts.is_empty()).then(|| {
        let mut s = parts.join("; ");
        s[..1].make_ascii_uppercase();
        s + "."
    })
}
