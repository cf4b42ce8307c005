//! The stall scenario's section of report.md and its plot.

use super::format::{fmt_rate, us};
use crate::plot::LineChart;
use crate::schema::{Stall, StallPoint};
use anyhow::Result;
use std::fmt::Write as _;

/// The phases, the figures and the targets of a stall run.
pub(crate) fn report(md: &mut String, st: &Stall) -> Result<()> {
    writeln!(
        md,
        "## Stall: one subscriber stopped, then the node ({} subscribers, {} items each, cache {})\n",
        st.subscribers, st.items, st.cache
    )?;
    writeln!(
        md,
        "Publisher at {} updates/s ({}{}). Subscriber 0 stopped (SIGSTOP) for {:.0} ms, later the node for {:.0} ms. \"Healthy\" figures are the highest among the {} other subscribers.\n",
        fmt_rate(st.rate as f64),
        st.rate_source,
        st.max_sustainable_updates_per_s
            .map_or(String::new(), |m| format!(": max {}/s", fmt_rate(m as f64))),
        st.subscriber_stopped_ms,
        st.node_stopped_ms,
        st.healthy_subscribers
    )?;
    writeln!(md, "| phase | seconds | publisher sent/s | publisher lag max ms | healthy updates | gaps | conflated | healthy p99 µs | healthy max µs | node max RSS MiB | node CPU % |")?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|")?;
    for p in &st.phases {
        writeln!(
            md,
            "| {} | {:.2} | {} | {:.1} | {} | {} | {} | {} | {} | {:.1} | {:.0} |",
            p.name,
            p.seconds,
            fmt_rate(p.publisher_per_s),
            p.publisher_max_lag_ms,
            p.healthy_updates,
            p.healthy_gaps,
            p.healthy_conflated,
            us(p.healthy_p99_ns as f64),
            us(p.healthy_max_ns as f64),
            p.node_max_rss_bytes as f64 / 1048576.0,
            p.node_cpu_percent
        )?;
    }
    let ms = |v: Option<f64>| v.map_or("not recovered".to_string(), |v| format!("{v:.0}"));
    let s = &st.stopped_subscriber;
    writeln!(md, "\n| figure | value |\n|---|---|")?;
    writeln!(
        md,
        "| healthy p99 µs: baseline / subscriber stopped / after / node paused / after | {} / {} / {} / {} / {} |",
        us(st.baseline_p99_ns as f64),
        us(st.stall_p99_ns as f64),
        us(st.after_subscriber_p99_ns as f64),
        us(st.node_pause_p99_ns as f64),
        us(st.after_node_p99_ns as f64)
    )?;
    writeln!(
        md,
        "| recovery after the node's SIGCONT (healthy), ms | {} |",
        ms(st.recovery_ms)
    )?;
    writeln!(
        md,
        "| recovery of the stopped subscriber after its SIGCONT, ms | {} |",
        ms(st.subscriber_recovery_ms)
    )?;
    writeln!(
        md,
        "| healthy subscribers: gaps / lost / reconnects / conflated | {} / {} / {} / {} |",
        st.healthy_gaps, st.healthy_lost, st.healthy_reconnects, st.healthy_conflated
    )?;
    writeln!(
        md,
        "| stopped subscriber: updates / gaps / conflated / reconnects (dropped by the node) | {} / {} / {} / {} ({}) |",
        s.updates,
        s.gaps,
        s.conflated,
        s.reconnects,
        if st.stopped_subscriber_disconnected { "yes" } else { "no" }
    )?;
    writeln!(
        md,
        "| conflated updates, all subscribers | {} |",
        st.conflated_updates
    )?;
    writeln!(
        md,
        "| node peak RSS, MiB | {:.1} |",
        st.node_peak_rss_bytes as f64 / 1048576.0
    )?;
    writeln!(
        md,
        "| publisher sent/s: baseline / subscriber stopped | {} / {} |",
        fmt_rate(st.publisher_baseline_per_s),
        fmt_rate(st.publisher_stall_per_s)
    )?;
    writeln!(
        md,
        "\n| target | required | measured | result |\n|---|---|---|---|"
    )?;
    for t in &st.targets {
        writeln!(
            md,
            "| {} | {} | {} | {} |",
            t.name,
            t.target,
            t.value,
            if t.pass { "met" } else { "NOT met" }
        )?;
    }
    writeln!(md, "\nRecovery: {}.\n", st.recovery_rule)?;
    writeln!(md, "![stall](stall.svg)\n")?;
    Ok(())
}

/// The healthy (and the stopped) subscribers' p99 per interval, with brackets over the
/// windows in which the subscriber and the node were stopped.
pub(crate) fn stall_plot(st: &Stall) -> LineChart {
    let pts = |f: &dyn Fn(&StallPoint) -> Option<u64>| -> Vec<(f64, f64)> {
        st.series
            .iter()
            .filter_map(|p| f(p).map(|v| (p.t_ms / 1e3, v as f64 / 1e3)))
            .collect()
    };
    let healthy = pts(&|p| (p.healthy_count > 0).then_some(p.healthy_p99_ns));
    let stopped = pts(&|p| (p.stopped_count > 0).then_some(p.stopped_p99_ns));
    let ys = healthy.iter().chain(&stopped).map(|p| p.1);
    let lo = ys.clone().fold(f64::INFINITY, f64::min);
    let hi = ys.fold(0.0, f64::max);
    let event = |name: &str| {
        st.events
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.t_ms / 1e3)
    };
    let bracket = |from: Option<f64>, to: Option<f64>| match (from, to) {
        (Some(a), Some(b)) if lo.is_finite() => vec![(a, lo), (a, hi), (b, hi), (b, lo)],
        _ => Vec::new(),
    };
    LineChart::new(
        format!(
            "Stall: p99 per {} ms interval ({} updates/s)",
            st.interval_ms,
            fmt_rate(st.rate as f64)
        ),
        "seconds from the baseline's start",
        "latency p99 (µs)",
    )
    .with_log(false, true)
    // The healthy subscribers last, drawn over the stopped one: they are the point.
    .with_series("stopped subscriber", stopped)
    .with_series("healthy (highest)", healthy)
    .with_series(
        "subscriber stopped",
        bracket(event("subscriber SIGSTOP"), event("subscriber SIGCONT")),
    )
    .with_series(
        "node stopped",
        bracket(event("node SIGSTOP"), event("node SIGCONT")),
    )
}
