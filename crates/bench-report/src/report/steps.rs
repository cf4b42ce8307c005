//! Tables and cells of report.md built from steps: a search's steps, a process's CPU at
//! the highest sustained rate, every process's CPU at each rung of a ladder.

use super::format::{fmt_rate, ns, us};
use crate::schema::{LatencyStep, Step, Throughput};
use crate::stats::cpu_ns_per_update;
use anyhow::Result;
use std::fmt::Write as _;

/// CPU % of the first process whose name starts with `prefix`, at the highest rate the
/// throughput search sustained ("-" if none).
pub(crate) fn cpu_at_max(t: &Throughput, prefix: &str) -> String {
    t.steps
        .iter()
        .find(|s| s.pass && s.target_rate == t.max_sustainable_updates_per_s)
        .and_then(|s| s.processes.iter().find(|p| p.name.starts_with(prefix)))
        .map_or("-".to_string(), |p| format!("{:.0}%", p.cpu_percent))
}

/// The CPU of the first process of `step` whose name starts with `prefix`: its share
/// of one CPU and per update sent ("12.5% / 850 ns"); "-" if there is none.
pub(crate) fn process_cpu(step: &Step, prefix: &str) -> String {
    step.processes
        .iter()
        .find(|p| p.name.starts_with(prefix))
        .map_or("-".to_string(), |p| {
            format!("{:.1}% / {}", p.cpu_percent, ns(cpu_ns_per_update(step, p)))
        })
}

/// Every process's CPU at each rung of a latency ladder (report.md): what the rung's
/// latency cost, waiting included.
pub(crate) fn ladder_cpu_table(md: &mut String, ladder: &[LatencyStep]) -> Result<()> {
    if ladder.is_empty() {
        return Ok(());
    }
    writeln!(
        md,
        "CPU of every process at each rung (share of one CPU; CPU time per update sent):\n"
    )?;
    writeln!(
        md,
        "| rate/s | process | CPU | per update |\n|---|---|---|---|"
    )?;
    for l in ladder {
        for p in &l.step.processes {
            writeln!(
                md,
                "| {} | {} | {:.1}% | {} |",
                fmt_rate(l.rate as f64),
                p.name,
                p.cpu_percent,
                ns(cpu_ns_per_update(&l.step, p))
            )?;
        }
    }
    writeln!(md)?;
    Ok(())
}

/// The node's CPU per update at the highest sustained rate.
pub(crate) fn node_ns_at_max(t: &Throughput) -> String {
    t.steps
        .iter()
        .find(|s| s.pass && s.target_rate == t.max_sustainable_updates_per_s)
        .map_or("-".to_string(), |s| ns(s.node_cpu_ns_per_update))
}

/// One row per step: asked, offered and delivered rates, loss, lag, latency, CPUs.
pub(crate) fn steps_table(md: &mut String, title: &str, steps: &[Step]) -> Result<()> {
    writeln!(md, "{title}:\n")?;
    writeln!(md, "| asked/s | offered/s | delivered/s | delivered % | node CPU per update | gaps | pub lag max ms | latency mean µs | p99 µs | CPU busy % (per CPU) | result |")?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|")?;
    for s in steps {
        let cpus = s.system.as_ref().map_or("-".to_string(), |sys| {
            sys.cpus
                .iter()
                .map(|c| format!("{:.0}", c.busy_percent))
                .collect::<Vec<_>>()
                .join("/")
        });
        writeln!(
            md,
            "| {} | {} | {} | {:.2} | {} | {} | {:.1} | {} | {} | {} | {} |",
            fmt_rate(s.target_rate as f64),
            fmt_rate(s.offered_per_s),
            fmt_rate(s.delivered_per_s),
            s.delivered_ratio * 100.0,
            ns(s.node_cpu_ns_per_update),
            s.gaps,
            s.publisher_max_lag_ms,
            us(s.latency.mean_ns),
            us(s.latency.p99_ns as f64),
            cpus,
            if s.pass {
                "pass".to_string()
            } else {
                s.reason.clone()
            }
        )?;
    }
    writeln!(md)?;
    Ok(())
}
