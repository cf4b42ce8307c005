//! The RSSL scenario's section of report.md.

use super::format::{fmt_rate, ns, us_or_dash};
use crate::schema::{RsslResult, RsslStep, NIPROVPERF, PROVPERF};
use anyhow::Result;
use std::fmt::Write as _;

/// report.md's section: the paths and the native path side by side.
pub(crate) fn report(md: &mut String, r: &RsslResult, ticks: Option<u64>) -> Result<()> {
    let m = &r.max_sustained_updates_per_s;
    writeln!(
        md,
        "\n## RSSL: LSEG's perf tools through Tickwire\n\n\
         {}; {} items. \"direct\": ProvPerf -> ConsPerf, no infrastructure; \"relayed\": \
         ProvPerf -> a byte relay -> ConsPerf, the cost of one more hop. Through the \
         node: ProvPerf -> node -> ConsPerf (the node a consumer of ProvPerf), and \
         NIProvPerf -> node -> ConsPerf. Rate and latency are ConsPerf's steady-state \
         figures (mean latency, µs, from the providers' latency-stamped updates); CPU is the \
         node's per update it sent, beside the native path's (perf-pub -> node -> perf-sub, \
         cache on, items of the perf tools' shape: 83-field images, 23-field updates) at \
         the same rate. The providers send {} bursts a second (rate / bursts updates \
         each). Highest rate with every update: direct {}, through \
         the node from ProvPerf {}, from NIProvPerf {}.\n",
        r.tools,
        r.items,
        ticks.map_or("1,000 (or rate)".into(), |t| fmt_rate(t as f64)),
        fmt_rate(m.direct as f64),
        fmt_rate(m.through_node as f64),
        fmt_rate(m.through_node_niprovperf as f64),
    )?;
    writeln!(md, "| rate/s | direct rate | direct latency | relayed latency | node (ProvPerf) rate | latency | added | node (NIProvPerf) rate | latency | median of 1-s means: direct / relayed / ProvPerf / NIProvPerf | node CPU/update (ProvPerf) | (NIProvPerf) | native | ProvPerf/native |")?;
    writeln!(
        md,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )?;
    for d in &r.direct {
        let via = |p: &str| {
            r.through_node
                .iter()
                .find(|t| t.rate == d.rate && t.provider == p)
        };
        let (i, n) = (via(PROVPERF), via(NIPROVPERF));
        let relayed = r.relayed.iter().find(|x| x.rate == d.rate);
        let native = r
            .native
            .iter()
            // Past saturation the native rung measured a queue, not the path.
            .find(|x| x.rate == d.rate && x.sustained)
            .map(|x| x.node_cpu_ns_per_update)
            .filter(|c| *c > 0.0);
        let rate_cell = |s: Option<&RsslStep>| {
            s.map_or("-".into(), |s| {
                format!(
                    "{}{}",
                    fmt_rate(s.update_rate),
                    if s.sustained { "" } else { " (short)" }
                )
            })
        };
        let lat = |s: Option<&RsslStep>| s.map_or("-".into(), |s| us_or_dash(s.latency_avg_us));
        let sec = |s: Option<&RsslStep>| {
            s.and_then(|s| s.latency_median_of_seconds_us)
                .map_or("-".into(), |v| format!("{v:.0}"))
        };
        let cpu = |s: Option<&RsslStep>| {
            s.and_then(|s| s.node_cpu_ns_per_update)
                .map_or("-".into(), ns)
        };
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} / {} / {} | {} | {} | {} | {} |",
            fmt_rate(d.rate as f64),
            rate_cell(Some(d)),
            us_or_dash(d.latency_avg_us),
            lat(relayed),
            rate_cell(i),
            lat(i),
            match (i.and_then(|i| i.latency_avg_us), d.latency_avg_us) {
                (Some(a), Some(b)) => format!("{:+.1}", a - b),
                _ => "-".into(),
            },
            rate_cell(n),
            lat(n),
            sec(Some(d)),
            sec(relayed),
            sec(i),
            sec(n),
            cpu(i),
            cpu(n),
            native.map_or("-".into(), ns),
            match (i.and_then(|i| i.node_cpu_ns_per_update), native) {
                (Some(a), Some(b)) => format!("{:.2}x", a / b),
                _ => "-".into(),
            },
        )?;
    }
    writeln!(md)?;
    Ok(())
}
