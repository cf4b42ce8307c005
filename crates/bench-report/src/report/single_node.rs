//! The single-node scenarios' sections of report.md: throughput, fan-out, the latency
//! ladder and instances.

use super::format::{fmt_rate, ns, us};
use super::steps::{cpu_at_max, ladder_cpu_table, node_ns_at_max, steps_table};
use crate::schema::Results;
use crate::stats::node_run_delay_us_per_run;
use anyhow::Result;
use std::fmt::Write as _;

/// The throughput table, one row per cache setting, and each search's steps.
pub(crate) fn throughput(md: &mut String, r: &Results) -> Result<()> {
    writeln!(
        md,
        "## Throughput (no fan-out, {} items)\n",
        r.throughput[0].items
    )?;
    writeln!(md, "| configuration | max sustainable updates/s | node CPU per update | node CPU at that rate | publisher CPU | subscriber CPU | next step failed |")?;
    writeln!(md, "|---|---|---|---|---|---|---|")?;
    for t in &r.throughput {
        let cpu = |prefix: &str| cpu_at_max(t, prefix);
        writeln!(
            md,
            "| node, cache {} | {} | {} | {} | {} | {} | {} |",
            t.cache,
            fmt_rate(t.max_sustainable_updates_per_s as f64),
            node_ns_at_max(t),
            cpu("node"),
            cpu("perf-pub"),
            cpu("perf-sub"),
            t.limited_by.as_deref().unwrap_or("-")
        )?;
    }
    writeln!(md, "\nReference (RMDS 6 src_dist, 2009, one core, tools on other hosts): cache disabled 1,480,000; cache enabled 650,000.\n")?;
    for t in &r.throughput {
        steps_table(md, &format!("Steps, cache {}", t.cache), &t.steps)?;
    }
    Ok(())
}

/// The fan-out row and its search's steps.
pub(crate) fn fanout(md: &mut String, r: &Results) -> Result<()> {
    let Some(f) = &r.fanout else {
        return Ok(());
    };
    writeln!(
        md,
        "## Fan-out ({} connections, producer 50/50, fan-out {:.1}, {} items, cache {})\n",
        f.connections, f.fanout, f.items, f.cache
    )?;
    writeln!(
        md,
        "| input updates/s | output updates/s | next step failed |\n|---|---|---|"
    )?;
    writeln!(
        md,
        "| {} | {} | {} |\n",
        fmt_rate(f.input_updates_per_s as f64),
        fmt_rate(f.output_updates_per_s as f64),
        f.limited_by.as_deref().unwrap_or("-")
    )?;
    writeln!(
        md,
        "Reference (RMDS 6 p2ps, 100 mounts 50/50, one instance): 70,000 in / 3,535,000 out.\n"
    )?;
    steps_table(md, "Steps", &f.steps)?;
    Ok(())
}

/// The latency ladder, with the wake-up floor of the machine when it was measured.
pub(crate) fn latency(md: &mut String, r: &Results) -> Result<()> {
    writeln!(md, "## End-to-end latency (cache off; µs)\n")?;
    writeln!(md, "| rate/s | mean | std dev | max | min | p50 | p90 | p99 | p99.9 | p99.99 | count | node CPU per update | node waited to run (µs per run) | sustained |")?;
    writeln!(
        md,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )?;
    for l in &r.latency {
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            fmt_rate(l.rate as f64),
            us(l.latency.mean_ns),
            us(l.latency.stddev_ns),
            us(l.latency.max_ns as f64),
            us(l.latency.min_ns as f64),
            us(l.latency.p50_ns as f64),
            us(l.latency.p90_ns as f64),
            us(l.latency.p99_ns as f64),
            us(l.latency.p999_ns as f64),
            us(l.latency.p9999_ns as f64),
            l.latency.count,
            ns(l.node_cpu_ns_per_update),
            node_run_delay_us_per_run(&l.step).map_or("n/a".into(), |w| format!("{w:.1}")),
            if l.sustained { "yes" } else { "no" }
        )?;
    }
    if let Some(w) = r.machine.as_ref().and_then(|m| m.wake_round_trip.as_ref()) {
        writeln!(
            md,
            "\nEvery sample crosses at least two wake-ups (the publisher's write wakes the node, the node's write wakes the subscriber), each of a CPU that may have gone idle since the last burst. On this machine two wake-ups of idle CPUs take {} µs (the wake-up probe's p50, above): that is the scale of this table's floor, and figures from two machines compare only with it in view.",
            us(w.p50_ns as f64)
        )?;
    }
    writeln!(md, "\nReference (RMDS 6, ms): 1,000/s mean 0.139; 100,000/s mean 0.396 max 1.104; 1,000,000/s mean 1.140.\n")?;
    ladder_cpu_table(md, &r.latency)?;
    writeln!(md, "![latency](latency.svg)\n")?;
    Ok(())
}

/// Each instance count's per-instance and aggregate rates.
pub(crate) fn instances(md: &mut String, r: &Results) -> Result<()> {
    writeln!(md, "## Instances\n")?;
    writeln!(
        md,
        "| instances | pinned | per instance updates/s | aggregate updates/s |\n|---|---|---|---|"
    )?;
    for i in &r.instances {
        writeln!(
            md,
            "| {} | {} | {} | {} |",
            i.instances,
            if i.pinned { "yes" } else { "no" },
            fmt_rate(i.per_instance_updates_per_s as f64),
            fmt_rate(i.aggregate_updates_per_s as f64)
        )?;
    }
    writeln!(md)?;
    Ok(())
}
