//! The SVG plots written beside report.md.

use super::stall::stall_plot;
use crate::plot::{BarChart, LineChart};
use crate::schema::{LatencyStep, Results, Step};
use anyhow::Result;
use std::path::Path;

/// The steps' (asked rate, delivered per second) points, by rate.
fn delivered_by_rate(steps: &[Step]) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = steps
        .iter()
        .map(|s| (s.target_rate as f64, s.delivered_per_s))
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts
}

/// Writes the plots of the scenarios that ran: latency.svg, throughput.svg,
/// fanout.svg, stall.svg, instances.svg.
pub(crate) fn write(dir: &Path, r: &Results) -> Result<()> {
    if !r.latency.is_empty() {
        let pts = |f: &dyn Fn(&LatencyStep) -> f64| -> Vec<(f64, f64)> {
            r.latency
                .iter()
                .map(|l| (l.rate as f64, f(l) / 1e3))
                .collect()
        };
        LineChart::new(
            "End-to-end latency by update rate (cache off)",
            "updates/s",
            "latency (µs)",
        )
        .with_log(true, true)
        .with_series("mean", pts(&|l| l.latency.mean_ns))
        .with_series("p50", pts(&|l| l.latency.p50_ns as f64))
        .with_series("p90", pts(&|l| l.latency.p90_ns as f64))
        .with_series("p99", pts(&|l| l.latency.p99_ns as f64))
        .with_series("p99.9", pts(&|l| l.latency.p999_ns as f64))
        .save(dir.join("latency.svg"))?;
    }
    if !r.throughput.is_empty() {
        let mut chart = LineChart::new(
            "Throughput steps: delivered vs asked",
            "asked updates/s",
            "delivered updates/s",
        )
        .with_log(true, true);
        for t in &r.throughput {
            chart = chart.with_series(format!("cache {}", t.cache), delivered_by_rate(&t.steps));
        }
        chart.save(dir.join("throughput.svg"))?;
    }
    if let Some(f) = &r.fanout {
        let pts = delivered_by_rate(&f.steps);
        LineChart::new(
            "Fan-out: output vs input",
            "input updates/s",
            "output updates/s",
        )
        .with_log(true, true)
        .with_series(
            format!("{} connections, fan-out {:.1}", f.connections, f.fanout),
            pts,
        )
        .save(dir.join("fanout.svg"))?;
    }
    if let Some(st) = &r.stall {
        stall_plot(st).save(dir.join("stall.svg"))?;
    }
    if !r.instances.is_empty() {
        BarChart::new("Aggregate sustainable updates/s", "updates/s")
            .with_categories(
                r.instances
                    .iter()
                    .map(|i| {
                        format!(
                            "{} {}",
                            i.instances,
                            if i.pinned { "pinned" } else { "unpinned" }
                        )
                    })
                    .collect(),
            )
            .with_series(
                "aggregate",
                r.instances
                    .iter()
                    .map(|i| i.aggregate_updates_per_s as f64)
                    .collect(),
            )
            .save(dir.join("instances.svg"))?;
    }
    Ok(())
}
