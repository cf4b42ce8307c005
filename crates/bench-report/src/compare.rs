//! `tickwire-bench compare DIR...`: the headline figures of several runs side by side.

use crate::plot::BarChart;
use crate::schema::Results;
use anyhow::{bail, Context, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Headline figures compared across runs: (metric, value, higher is better).
pub fn headline(r: &Results) -> Vec<(String, Option<f64>, bool)> {
    // (metric, value, higher is better)
    let mut v = Vec::new();
    for cache in ["off", "on"] {
        v.push((
            format!("throughput cache {cache} (updates/s)"),
            r.throughput
                .iter()
                .find(|t| t.cache == cache)
                .map(|t| t.max_sustainable_updates_per_s as f64),
            true,
        ));
    }
    v.push((
        "fan-out output (updates/s)".into(),
        r.fanout.as_ref().map(|f| f.output_updates_per_s as f64),
        true,
    ));
    let at = |rate: u64| r.latency.iter().find(|l| l.rate == rate);
    v.push((
        "latency mean at 100k/s (µs)".into(),
        at(100_000).map(|l| l.latency.mean_ns / 1e3),
        false,
    ));
    v.push((
        "latency p99 at 100k/s (µs)".into(),
        at(100_000).map(|l| l.latency.p99_ns as f64 / 1e3),
        false,
    ));
    let node_cpu = r
        .latency
        .iter()
        .find(|l| l.rate == 100_000)
        .and_then(|l| l.step.processes.iter().find(|p| p.name.starts_with("node")))
        .map(|p| p.cpu_percent);
    v.push(("node CPU at 100k/s (%)".into(), node_cpu, false));
    let syscalls = r
        .latency
        .iter()
        .find(|l| l.rate == 100_000)
        .and_then(|l| l.step.processes.iter().find(|p| p.name.starts_with("node")))
        .and_then(|p| p.syscalls.map(|s| s as f64 / p.wall_s.max(1e-9)));
    v.push(("node system calls/s at 100k/s".into(), syscalls, false));
    let stall = r.stall.as_ref();
    v.push((
        "stall: healthy p99, subscriber stopped (µs)".into(),
        stall.map(|s| s.stall_p99_ns as f64 / 1e3),
        false,
    ));
    v.push((
        "stall: recovery after node pause (ms)".into(),
        stall.and_then(|s| s.recovery_ms),
        false,
    ));
    v.push((
        "stall: node peak RSS (MiB)".into(),
        stall.map(|s| s.node_peak_rss_bytes as f64 / 1048576.0),
        false,
    ));
    v
}

/// A run's `DIR/results.json`.
pub fn read_results(dir: &Path) -> Result<Results> {
    let path = dir.join("results.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a tickwire results file", path.display()))
}

/// A comparison of runs: its markdown table and its chart.
pub struct Comparison {
    /// `compare.md`: each run's headline figures and their index (base 100: the first
    /// run), ending with a link to `compare.svg`.
    pub markdown: String,
    /// `compare.svg`: the indexes as bars.
    pub chart: BarChart,
}

/// Compares `runs` (named `names`, in the same order; the first is the base).
pub fn render(runs: &[Results], names: &[String]) -> Result<Comparison> {
    if runs.len() < 2 || runs.len() != names.len() {
        bail!("compare needs at least two runs, each with a name");
    }
    let rows: Vec<Vec<(String, Option<f64>, bool)>> = runs.iter().map(headline).collect();
    let mut md = String::new();
    writeln!(md, "# Tickwire bench comparison (base 100: {})\n", names[0])?;
    write!(md, "| metric |")?;
    for n in names {
        write!(md, " {n} | index |")?;
    }
    writeln!(md)?;
    write!(md, "|---|")?;
    for _ in names {
        write!(md, "---|---|")?;
    }
    writeln!(md)?;
    let mut chart_series: Vec<(String, Vec<f64>)> =
        names.iter().map(|n| (n.clone(), vec![])).collect();
    let mut categories = Vec::new();
    for (i, (metric, base, higher)) in rows[0].iter().enumerate() {
        write!(md, "| {metric} |")?;
        let mut any = false;
        for (k, row) in rows.iter().enumerate() {
            let v = row[i].1;
            let index = match (v, base) {
                (Some(v), Some(b)) if *b > 0.0 => Some(100.0 * v / b),
                _ => None,
            };
            write!(
                md,
                " {} | {} |",
                v.map_or("-".into(), |v| format!("{v:.1}")),
                index.map_or("-".into(), |x| format!("{x:.0}"))
            )?;
            if let Some(x) = index {
                any = true;
                chart_series[k].1.push(x);
            } else {
                // No figure: no bar (a bar at 0 would read as a run that lost it all).
                chart_series[k].1.push(f64::NAN);
            }
        }
        writeln!(md)?;
        if any {
            categories.push(format!(
                "{metric}{}",
                if *higher { "" } else { " (lower is better)" }
            ));
        } else {
            for s in &mut chart_series {
                s.1.pop();
            }
        }
    }
    let mut chart = BarChart::new("Comparison, base 100", "index").with_reference(100.0);
    chart = chart.with_categories(categories);
    for (name, vals) in chart_series {
        chart = chart.with_series(name, vals);
    }
    writeln!(md, "\n![comparison](compare.svg)")?;
    Ok(Comparison {
        markdown: md,
        chart,
    })
}

/// `tickwire-bench compare`: reads the runs in `dirs`, writes `compare.md` and
/// `compare.svg` (into `out`, else the first directory) and returns the markdown.
pub fn compare(dirs: &[PathBuf], out: Option<&Path>) -> Result<String> {
    if dirs.len() < 2 {
        bail!("compare needs at least two result directories");
    }
    let runs: Vec<Results> = dirs
        .iter()
        .map(|d| read_results(d))
        .collect::<Result<_>>()?;
    let names: Vec<String> = dirs
        .iter()
        .map(|d| {
            d.file_name()
                .map_or(d.display().to_string(), |n| n.to_string_lossy().into())
        })
        .collect();
    let Comparison { markdown, chart } = render(&runs, &names)?;
    let out = out.unwrap_or(&dirs[0]);
    std::fs::create_dir_all(out)?;
    chart.save(out.join("compare.svg"))?;
    std::fs::write(out.join("compare.md"), &markdown)?;
    Ok(markdown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::Throughput;

    fn run(cache_off: Option<u64>) -> Results {
        Results {
            throughput: cache_off
                .map(|rate| Throughput {
                    cache: "off".into(),
                    items: 10,
                    max_sustainable_updates_per_s: rate,
                    limited_by: None,
                    steps: vec![],
                })
                .into_iter()
                .collect(),
            ..Results::default()
        }
    }

    #[test]
    fn a_figure_a_run_lacks_has_no_bar() {
        let names = vec!["a".to_string(), "b".to_string()];
        let c = render(&[run(Some(1000)), run(None)], &names).unwrap();
        assert_eq!(c.chart.categories, ["throughput cache off (updates/s)"]);
        assert_eq!(c.chart.series[0].1, [100.0]);
        assert!(c.chart.series[1].1[0].is_nan(), "{:?}", c.chart.series[1]);
        assert!(
            c.markdown.contains("| 1000.0 | 100 | - | - |"),
            "{}",
            c.markdown
        );
    }
}
