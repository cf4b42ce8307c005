//! `tickwire-bench summary DIR...`: the current table of a scenario from several runs of
//! it (docs/BENCHMARKS.md opens with these): every headline figure's median, its spread
//! (lowest to highest) and the number of runs that have it, under the commit, machine
//! and command the runs came from. Figures measured alike (a latency ladder's rungs, the
//! files' classes) are cells of tables of their own, a row a rate or a class.

use crate::compare::read_results;
use crate::schema::{Fanout, FilesRow, LatencyStep, Results, RsslStep, Throughput};
use crate::stats::median;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// The highest rate with a byte relay's row (the RSSL latency goal's rate).
const RELAY_ROWS_UP_TO: u64 = 10_000;

/// The headline figures of one run: (name, value). Names are stable across runs of one
/// scenario, so runs are matched by name.
fn figures(r: &Results) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = Vec::new();
    let mut put = |name: String, value: f64| v.push((name, value));
    let us = |ns: f64| ns / 1e3;
    let ladder = |put: &mut dyn FnMut(String, f64), prefix: &str, steps: &[LatencyStep]| {
        // Rungs past saturation measure a queue, not the path: only sustained ones.
        for l in steps.iter().filter(|l| l.latency.count > 0 && l.sustained) {
            put(
                format!("{prefix}latency p50 at {}/s (µs)", number(l.rate as f64)),
                us(l.latency.p50_ns as f64),
            );
            put(
                format!("{prefix}latency p99 at {}/s (µs)", number(l.rate as f64)),
                us(l.latency.p99_ns as f64),
            );
        }
    };
    let throughput = |put: &mut dyn FnMut(String, f64), prefix: &str, t: &[Throughput]| {
        for t in t {
            put(
                format!("{prefix}throughput, cache {} (updates/s)", t.cache),
                t.max_sustainable_updates_per_s as f64,
            );
        }
    };
    let fanout = |put: &mut dyn FnMut(String, f64), prefix: &str, f: &Option<Fanout>| {
        if let Some(f) = f {
            put(
                format!("{prefix}fan-out x{:.1}: output (updates/s)", f.fanout),
                f.output_updates_per_s as f64,
            );
        }
    };
    throughput(&mut put, "", &r.throughput);
    fanout(&mut put, "", &r.fanout);
    ladder(&mut put, "", &r.latency);
    if let Some(s) = &r.stall {
        put(
            "stall: healthy p99, one subscriber stopped (µs)".into(),
            us(s.stall_p99_ns as f64),
        );
        if let Some(ms) = s.recovery_ms {
            put("stall: recovery after the node's pause (ms)".into(), ms);
        }
    }
    if let Some(m) = &r.memory {
        put("memory: bytes per stream".into(), m.per_stream_bytes);
        put(
            "memory: bytes per connection".into(),
            m.per_connection_with_streams_bytes,
        );
    }
    if let Some(w) = &r.websocket {
        put(
            "WebSocket: one subscriber (updates/s)".into(),
            w.max_sustainable_updates_per_s as f64,
        );
        if let Some(f) = &w.fanout {
            put(
                "WebSocket: node CPU per update, shared encoding (µs)".into(),
                f.shared_node_cpu_us_per_update,
            );
            put(
                "WebSocket: node CPU per update, per client (µs)".into(),
                f.unshared_node_cpu_us_per_update,
            );
        }
    }
    if let Some(b) = &r.backbone {
        throughput(&mut put, "backbone: ", &b.throughput);
        fanout(&mut put, "backbone: ", &b.fanout);
        ladder(&mut put, "backbone: ", &b.latency);
        for l in &b.loss {
            put(
                format!(
                    "backbone: {}% loss, sustained (updates/s)",
                    l.loss_rate * 100.0
                ),
                l.sustained_updates_per_s as f64,
            );
        }
    }
    if let Some(t) = &r.tree {
        throughput(&mut put, "two nodes: ", &t.throughput);
        fanout(&mut put, "two nodes: ", &t.fanout);
        ladder(&mut put, "two nodes: ", &t.latency);
    }
    if let Some(w) = &r.wait {
        for s in &w.strategies {
            // What waiting costs: the nodes' CPU with nothing to do (the rung at rate 0).
            if let Some(rest) = s.latency.iter().find(|l| l.rate == 0) {
                let nodes = rest
                    .step
                    .processes
                    .iter()
                    .filter(|p| p.name.starts_with("node"));
                put(
                    format!("wait {}: the nodes' CPU at rest (% of a CPU)", s.strategy),
                    nodes.map(|p| p.cpu_percent).sum(),
                );
            }
            ladder(&mut put, &format!("wait {}: ", s.strategy), &s.latency);
        }
    }
    if let Some(p) = &r.peers {
        for (name, side) in [("Tickwire", &p.tickwire), ("NATS", &p.nats)] {
            if side.available {
                put(
                    format!("{name}: highest rate (updates/s)"),
                    side.max_sustainable_updates_per_s as f64,
                );
                ladder(&mut put, &format!("{name}: "), &side.latency);
            }
        }
    }
    for j in &r.journal {
        put(format!("journal {}: posts acked/s", j.sync), j.posts_per_s);
        put(
            format!("journal {}: Ack p99 (µs)", j.sync),
            us(j.ack_p99_ns as f64),
        );
        put(
            format!("journal {}: system calls per post", j.sync),
            j.syscalls_per_post,
        );
    }
    if let Some(c) = &r.journal_updates {
        put(
            "journal of updates: cost to the sustained rate (%)".into(),
            c.cost_percent,
        );
    }
    if let Some(x) = &r.rssl {
        let m = &x.max_sustained_updates_per_s;
        put(
            "RSSL: ProvPerf -> ConsPerf direct (updates/s)".into(),
            m.direct as f64,
        );
        put(
            "RSSL: ProvPerf -> node -> ConsPerf (updates/s)".into(),
            m.through_node as f64,
        );
        put(
            "RSSL: NIProvPerf -> node -> ConsPerf (updates/s)".into(),
            m.through_node_niprovperf as f64,
        );
        // What a path adds to the direct path's latency at the same rate, by `latency`.
        let added = |s: &RsslStep, latency: fn(&RsslStep) -> Option<f64>| {
            let direct = x.direct.iter().find(|d| d.rate == s.rate && d.sustained)?;
            Some(latency(s)? - latency(direct)?)
        };
        let mean = |s: &RsslStep| s.latency_avg_us;
        // ConsPerf's mean counts the few latency-stamped updates held behind the burst
        // of images at its start (tens of ms each, about ten stamped updates a second):
        // the median of its one-second means is the steady path.
        let seconds = |s: &RsslStep| s.latency_median_of_seconds_us;
        // The goals, rate by rate: the node's CPU per update over its native
        // path's, and what the node adds to ConsPerf's mean latency.
        for t in x.through_node.iter().filter(|t| t.sustained) {
            let rate = number(t.rate as f64);
            let native = x
                .native
                .iter()
                // A native rung past saturation measured a queue too.
                .find(|n| n.rate == t.rate && n.sustained && n.node_cpu_ns_per_update > 0.0);
            if let (Some(cpu), Some(native)) = (t.node_cpu_ns_per_update, native) {
                put(
                    format!(
                        "RSSL: node CPU per update over native, {} at {rate}/s (x)",
                        t.provider
                    ),
                    cpu / native.node_cpu_ns_per_update,
                );
            }
            if let Some(v) = added(t, mean) {
                put(
                    format!(
                        "RSSL: mean latency added by the node, {} at {rate}/s (µs)",
                        t.provider
                    ),
                    v,
                );
            }
            if let Some(v) = added(t, seconds) {
                put(
                    format!(
                        "RSSL: latency added by the node, median of 1-s means, {} at {rate}/s (µs)",
                        t.provider
                    ),
                    v,
                );
            }
        }
        // The floor of any one hop on this machine, for the latency rows above; up to
        // the goal's rate: above it ConsPerf's latency is mostly queueing in the tools,
        // which a thread in between can even shorten.
        for relayed in x
            .relayed
            .iter()
            .filter(|t| t.sustained && t.rate <= RELAY_ROWS_UP_TO)
        {
            let rate = number(relayed.rate as f64);
            if let Some(v) = added(relayed, mean) {
                put(
                    format!("RSSL: mean latency added by a byte relay, at {rate}/s (µs)"),
                    v,
                );
            }
            if let Some(v) = added(relayed, seconds) {
                put(
                    format!(
                        "RSSL: latency added by a byte relay, median of 1-s means, at {rate}/s (µs)"
                    ),
                    v,
                );
            }
        }
    }
    let files = |put: &mut dyn FnMut(String, f64), who: &str, rows: &[FilesRow]| {
        for f in rows.iter().filter(|f| f.unavailable.is_none()) {
            put(
                format!(
                    "files {who}: {} to {} site(s), fsync {} (files/min)",
                    f.class, f.sites, f.fsync
                ),
                f.files_per_min,
            );
        }
    };
    files(&mut put, "Tickwire", &r.files);
    // The goal of one file to N sites in about the time to one, beside what it would
    // take on this machine if time followed the CPU every process used (report.md has
    // every class).
    for (f, x) in r
        .files
        .iter()
        .filter(|f| f.files == 1)
        .filter_map(|f| Some((f, f.against_one_site(&r.files)?)))
    {
        let row = format!(
            "files Tickwire: {} to {} sites against 1, fsync {}",
            f.class, f.sites, f.fsync
        );
        put(format!("{row}: time (x)"), x.time);
        put(format!("{row}: CPU of every process (x)"), x.cpu);
    }
    for m in &r.files_market_data {
        let when = if m.queued_first {
            "queued first"
        } else {
            "sent as uploaded"
        };
        put(
            format!(
                "files at {} MB/s ({when}): market data p99 during / without",
                m.files_share_mb_per_s
            ),
            m.p99_ratio,
        );
    }
    for f in r.files_faults.iter().filter(|f| f.unavailable.is_none()) {
        put(
            format!("files fault {}: seconds to whole", f.fault),
            f.seconds,
        );
        put(
            format!("files fault {}: sites whole of those that can be", f.fault),
            f.sites_whole as f64 / f.sites_expected.max(1) as f64,
        );
    }
    if let Some(p) = &r.peers {
        files(&mut put, "uftp", &p.uftp);
        files(&mut put, "rsync", &p.rsync);
    }
    v
}

/// The runs of one scenario and their figures, matched by name.
struct Runs {
    runs: Vec<Results>,
    /// Figure names in the order the runs first gave them.
    order: Vec<String>,
    values: BTreeMap<String, Vec<f64>>,
}

/// One figure over the runs: median, lowest, highest and how many runs have it.
struct Cell {
    median: f64,
    lowest: f64,
    highest: f64,
    runs: usize,
}

impl Runs {
    fn read(dirs: &[PathBuf]) -> Result<Runs> {
        let runs: Vec<Results> = dirs
            .iter()
            .map(|d| read_results(d))
            .collect::<Result<_>>()?;
        let first = runs
            .first()
            .context("summary needs at least one result directory")?;
        if let Some(other) = runs.iter().find(|r| r.scenario != first.scenario) {
            bail!(
                "the runs are of different scenarios ({} and {}): a table is of one",
                first.scenario,
                other.scenario
            );
        }
        let mut order: Vec<String> = Vec::new();
        let mut values: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for r in &runs {
            for (name, value) in figures(r) {
                if !values.contains_key(&name) {
                    order.push(name.clone());
                }
                values.entry(name).or_default().push(value);
            }
        }
        Ok(Runs {
            runs,
            order,
            values,
        })
    }

    fn scenario(&self) -> &str {
        &self.runs[0].scenario
    }

    /// What the runs say of `f`, each value once ("a, b" where runs differ).
    fn distinct(&self, f: &dyn Fn(&Results) -> String) -> String {
        let mut seen: Vec<String> = Vec::new();
        for v in self.runs.iter().map(f) {
            if !seen.contains(&v) {
                seen.push(v);
            }
        }
        seen.join(", ")
    }

    fn commit(&self) -> String {
        self.distinct(&|r| r.git_commit.chars().take(7).collect())
    }

    fn machine(&self) -> String {
        self.distinct(&|r| match &r.machine {
            Some(m) => format!("{}, {} CPUs", m.cpu_model, m.cpus),
            None => "machine not recorded".into(),
        })
    }

    fn command(&self) -> String {
        self.distinct(&|r| {
            if r.command.is_empty() {
                "command not recorded".into()
            } else {
                format!("`{}`", with_out_dir(&r.command))
            }
        })
    }

    fn cell(&self, name: &str) -> Cell {
        let mut v = self.values[name].clone();
        v.sort_by(f64::total_cmp);
        Cell {
            median: median(v.clone()),
            lowest: v[0],
            highest: v[v.len() - 1],
            runs: v.len(),
        }
    }

    /// A figure as a grid shows it: "median (lowest – highest)", with the number of
    /// runs where fewer than all have it.
    fn grid_text(&self, name: &str) -> String {
        let c = self.cell(name);
        let fewer = match c.runs {
            n if n == self.runs.len() => String::new(),
            1 => "; 1 run".into(),
            n => format!("; {n} runs"),
        };
        format!(
            "{} ({} – {}{fewer})",
            number(c.median),
            number(c.lowest),
            number(c.highest)
        )
    }

    /// The figures that stand alone, and those that are cells of a grid.
    fn split(&self) -> (Vec<&String>, Vec<&String>) {
        self.order.iter().partition(|n| grid_cell(n).is_none())
    }
}

/// The markdown table of `dirs` (runs of one scenario).
pub fn summary(dirs: &[PathBuf]) -> Result<String> {
    let runs = Runs::read(dirs)?;
    let mut md = String::new();
    writeln!(
        md,
        "`{}`, {} run(s); commit {}; {}; {}.\n",
        runs.scenario(),
        runs.runs.len(),
        runs.commit(),
        runs.machine(),
        runs.command(),
    )?;
    let (single, in_grids) = runs.split();
    if !single.is_empty() {
        writeln!(md, "| figure | median | spread | runs |")?;
        writeln!(md, "|---|---:|---:|---:|")?;
    }
    for name in &single {
        let c = runs.cell(name);
        writeln!(
            md,
            "| {name} | {} | {} – {} | {} |",
            number(c.median),
            number(c.lowest),
            number(c.highest),
            c.runs,
        )?;
    }
    write_grids(&mut md, &runs, &in_grids, !single.is_empty())?;
    Ok(md)
}

/// The measure of the rate ladders a digest sets side by side.
const DIGEST_LADDER: &str = "latency p99 (µs)";

/// The digest of several scenarios, each a folder of runs (`SCENARIO/run-N`), in the
/// order given: which runs (commit, machine, command), every figure that stands alone,
/// the latency p99 of every ladder a row a rate, and the files a row a class.
/// docs/BENCHMARKS.md opens with it; `summary` of one scenario has all its tables.
pub fn digest(scenarios: &[PathBuf]) -> Result<String> {
    let mut all: Vec<Runs> = Vec::new();
    for dir in scenarios {
        let mut runs: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("results.json").is_file())
            .collect();
        if runs.is_empty() {
            bail!(
                "{} holds no run (a folder with results.json)",
                dir.display()
            );
        }
        runs.sort();
        all.push(Runs::read(&runs)?);
    }
    let mut md = String::new();
    writeln!(md, "| scenario | runs | commit | machine | command |")?;
    writeln!(md, "|---|---:|---|---|---|")?;
    for r in &all {
        writeln!(
            md,
            "| {} | {} | {} | {} | {} |",
            r.scenario(),
            r.runs.len(),
            r.commit(),
            r.machine(),
            r.command()
        )?;
    }
    writeln!(md, "\n| scenario | figure | median (lowest – highest) |")?;
    writeln!(md, "|---|---|---:|")?;
    for r in &all {
        for name in r.split().0 {
            writeln!(md, "| {} | {name} | {} |", r.scenario(), r.grid_text(name))?;
        }
    }
    // Every ladder's p99, a column a ladder (its group, or its scenario's name).
    let mut columns: Vec<LadderColumn> = Vec::new();
    let mut rates: Vec<(u64, &str)> = Vec::new();
    for r in &all {
        for name in r.split().1 {
            let Some(c) = rung(name).filter(|c| c.column == DIGEST_LADDER) else {
                continue;
            };
            // Named by its scenario, and its group where the scenario has several.
            let label = match c.group.as_str() {
                "" => r.scenario().to_string(),
                g if g.starts_with(r.scenario()) => g.to_string(),
                g => format!("{}: {g}", r.scenario()),
            };
            let rate: u64 = c.row.replace(',', "").parse().unwrap_or(0);
            if !rates.iter().any(|(x, _)| *x == rate) {
                rates.push((rate, c.row));
            }
            match columns.iter_mut().find(|l| l.label == label) {
                Some(l) => l.rungs.push((c.row, name)),
                None => columns.push(LadderColumn {
                    label,
                    runs: r,
                    rungs: vec![(c.row, name)],
                }),
            }
        }
    }
    if !columns.is_empty() {
        rates.sort();
        let labels: Vec<&str> = columns.iter().map(|l| l.label.as_str()).collect();
        writeln!(
            md,
            "\n| {DIGEST_LADDER} at rate (updates/s) | {} |",
            labels.join(" | ")
        )?;
        writeln!(md, "|---:|{}", "---:|".repeat(labels.len()))?;
        for (_, row) in rates {
            let line: Vec<String> = columns
                .iter()
                .map(|l| {
                    l.rungs
                        .iter()
                        .find(|(at, _)| *at == row)
                        .map_or("–".into(), |(_, name)| l.runs.grid_text(name))
                })
                .collect();
            writeln!(md, "| {row} | {} |", line.join(" | "))?;
        }
    }
    for r in &all {
        let classes: Vec<&String> = r
            .split()
            .1
            .into_iter()
            .filter(|n| files_class(n).is_some())
            .collect();
        if !classes.is_empty() {
            write_grids(&mut md, r, &classes, true)?;
        }
    }
    Ok(md)
}

/// One ladder's column of the digest: its label, its runs, and its rungs (rate, figure).
struct LadderColumn<'a> {
    label: String,
    runs: &'a Runs,
    rungs: Vec<(&'a str, &'a String)>,
}

/// The cells of grids, `names`, as tables: a row a rate (a class, a fault...).
fn write_grids(
    md: &mut String,
    runs: &Runs,
    names: &[&String],
    mut after_a_table: bool,
) -> Result<()> {
    let cells: Vec<(&String, GridCell)> = names
        .iter()
        .filter_map(|n| grid_cell(n).map(|c| (*n, c)))
        .collect();
    // Groups measured alike (the wait strategies, the peers) share one table, a column
    // saying which; the files' tools share one whatever they measured.
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for (_, c) in &cells {
        if !groups.contains(&(c.row_label, c.group.as_str())) {
            groups.push((c.row_label, &c.group));
        }
    }
    let mut tables: Vec<Grid> = Vec::new();
    for (row_label, group) in groups {
        let mut columns: Vec<&str> = Vec::new();
        for (_, c) in cells.iter().filter(|(_, c)| c.group == group) {
            if !columns.contains(&c.column.as_str()) {
                columns.push(&c.column);
            }
        }
        let joins = |t: &Grid| {
            t.row_label == row_label && (row_label == FILES_ROWS || t.columns == columns)
        };
        match tables.iter_mut().find(|t| joins(t)) {
            Some(t) => {
                for c in columns {
                    if !t.columns.contains(&c) {
                        t.columns.push(c);
                    }
                }
                t.groups.push(group);
            }
            None => tables.push(Grid {
                row_label,
                columns,
                groups: vec![group],
            }),
        }
    }
    for t in tables {
        let named = t.groups.iter().any(|g| !g.is_empty());
        writeln!(
            md,
            "{}| {}{} | {} |",
            if after_a_table { "\n" } else { "" },
            if named { "set-up | " } else { "" },
            t.row_label,
            t.columns.join(" | ")
        )?;
        writeln!(
            md,
            "|{}---:|{}",
            if named { "---|" } else { "" },
            "---:|".repeat(t.columns.len())
        )?;
        for group in t.groups {
            let of_group: Vec<&(&String, GridCell)> =
                cells.iter().filter(|(_, c)| c.group == group).collect();
            let mut rows: Vec<&str> = Vec::new();
            for (_, c) in &of_group {
                if !rows.contains(&c.row) {
                    rows.push(c.row);
                }
            }
            for row in rows {
                let line: Vec<String> = t
                    .columns
                    .iter()
                    .map(|col| {
                        of_group
                            .iter()
                            .find(|(_, c)| c.row == row && c.column == *col)
                            .map_or("–".into(), |(name, _)| runs.grid_text(name))
                    })
                    .collect();
                let first = if named {
                    format!("{group} | ")
                } else {
                    String::new()
                };
                writeln!(md, "| {first}{row} | {} |", line.join(" | "))?;
            }
        }
        after_a_table = true;
    }
    Ok(())
}

/// The first column of the files' table.
const FILES_ROWS: &str = "class";

/// One table of [`GridCell`]s.
struct Grid<'a> {
    row_label: &'static str,
    columns: Vec<&'a str>,
    groups: Vec<&'a str>,
}

/// A figure that is one cell of a table: a rung of a rate ladder, "GROUP: MEASURE at
/// RATE/s (UNIT)" (the group may be absent; a measure that ends in ", WHO", one word
/// such as "ProvPerf", is WHO's, in the group), or a files class, "files TOOL: CLASS to
/// N site(s), fsync F (UNIT)".
struct GridCell<'a> {
    group: String,
    /// The row: the rate, or the class.
    row: &'a str,
    /// What the first column says the rows are.
    row_label: &'static str,
    /// The column: the measure with its unit ("latency p99 (µs)"), or where the class
    /// went ("to 4 site(s), fsync never (files/min)").
    column: String,
}

fn grid_cell(name: &str) -> Option<GridCell<'_>> {
    rung(name)
        .or_else(|| files_class(name))
        .or_else(|| by_kind(name))
}

/// "KIND ROW: MEASURE" for the kinds whose rows are measured alike: the files' faults,
/// the journal's fsync policies.
fn by_kind(name: &str) -> Option<GridCell<'_>> {
    let (head, measure) = name.split_once(": ")?;
    let (kind, row) = head.rsplit_once(' ')?;
    let row_label = match kind {
        "files fault" => "fault",
        "journal" if ["always", "batch", "never", "off"].contains(&row) => "fsync",
        _ => return None,
    };
    Some(GridCell {
        group: kind.to_string(),
        row,
        row_label,
        column: measure.to_string(),
    })
}

fn rung(name: &str) -> Option<GridCell<'_>> {
    let (head, tail) = name.rsplit_once(" at ")?;
    let (rate, unit) = tail.split_once("/s")?;
    if rate.is_empty() || !rate.chars().all(|c| c.is_ascii_digit() || c == ',') {
        return None;
    }
    let (group, measure) = head.split_once(": ").unwrap_or(("", head));
    let measure = measure.trim_end_matches(',');
    let (group, measure) = match measure.rsplit_once(", ") {
        Some((m, who)) if !who.is_empty() && !who.contains(' ') => {
            (format!("{group} {who}").trim().to_string(), m)
        }
        _ => (group.to_string(), measure),
    };
    Some(GridCell {
        group,
        row: rate,
        row_label: "rate (updates/s)",
        column: format!("{measure}{unit}"),
    })
}

fn files_class(name: &str) -> Option<GridCell<'_>> {
    let (group, rest) = name.split_once(": ")?;
    let (class, to) = rest.split_once(" to ")?;
    if !group.starts_with("files ") || !to.contains(" site(s), fsync ") {
        return None;
    }
    Some(GridCell {
        group: group.to_string(),
        row: class,
        row_label: FILES_ROWS,
        column: format!("to {to}"),
    })
}

/// A command line with its `--out` folder as `DIR`: the runs of one table differ only
/// there.
fn with_out_dir(command: &str) -> String {
    let mut words = command.split(' ');
    let mut out = Vec::new();
    while let Some(w) = words.next() {
        out.push(w);
        if w == "--out" && words.next().is_some() {
            out.push("DIR");
        }
    }
    out.join(" ")
}

/// A figure as a table shows it: whole numbers with thousands separators, small ones
/// with a significant decimal.
fn number(x: f64) -> String {
    if x.abs() >= 100.0 {
        let s = format!("{:.0}", x.round());
        let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        format!("{sign}{out}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{LatencySummary, PeersResult, RsslResult};

    /// Writes `r` as the results.json of run folder `dir` (made with its parents).
    fn write_run(dir: &std::path::Path, r: &Results) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("results.json"), serde_json::to_string(r).unwrap()).unwrap();
    }

    /// A throughput entry of 10 items that sustained `rate`.
    fn throughput(cache: &str, rate: u64) -> Throughput {
        Throughput {
            cache: cache.into(),
            items: 10,
            max_sustainable_updates_per_s: rate,
            limited_by: None,
            steps: vec![],
        }
    }

    #[test]
    fn what_the_runs_say_is_each_value_once_in_the_order_first_said() {
        let run = |commit: &str| Results {
            git_commit: commit.into(),
            ..Default::default()
        };
        let runs = Runs {
            runs: vec![run("aaaaaaa1"), run("bbbbbbb2"), run("aaaaaaa3")],
            order: vec![],
            values: BTreeMap::new(),
        };
        assert_eq!(runs.commit(), "aaaaaaa, bbbbbbb");
    }

    #[test]
    fn numbers_read_as_a_table_shows_them() {
        assert_eq!(number(1_234_567.4), "1,234,567");
        assert_eq!(number(123.0), "123");
        assert_eq!(number(-4_500.0), "-4,500");
        assert_eq!(number(42.25), "42.2");
        assert_eq!(number(0.125), "0.12");
    }

    #[test]
    fn a_table_holds_the_median_and_spread_of_each_figure() {
        let dir = std::env::temp_dir().join(format!("tickwire-summary-{}", std::process::id()));
        let mut dirs = Vec::new();
        for (i, rate) in [300_000u64, 100_000, 200_000].into_iter().enumerate() {
            let d = dir.join(format!("run-{i}"));
            let r = Results {
                scenario: "throughput".into(),
                git_commit: "0123456789abcdef".into(),
                command: format!("tickwire-bench throughput --out /tmp/run-{i} --step-seconds 3"),
                throughput: vec![throughput("off", rate)],
                ..Default::default()
            };
            write_run(&d, &r);
            dirs.push(d);
        }
        let md = summary(&dirs).unwrap();
        assert!(
            md.contains("`throughput`, 3 run(s); commit 0123456"),
            "{md}"
        );
        // One command for the three runs: they differ only in their folder.
        assert!(
            md.contains("; `tickwire-bench throughput --out DIR --step-seconds 3`.\n"),
            "{md}"
        );
        assert!(
            md.contains("| throughput, cache off (updates/s) | 200,000 | 100,000 – 300,000 | 3 |"),
            "{md}"
        );
        let mut other = Results {
            scenario: "latency".into(),
            ..Default::default()
        };
        other.git_commit = "x".into();
        let d = dir.join("other");
        write_run(&d, &other);
        dirs.push(d);
        assert!(summary(&dirs)
            .unwrap_err()
            .to_string()
            .contains("different scenarios"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_latency_ladder_is_a_table_of_its_own_with_a_row_a_rate() {
        let dir = std::env::temp_dir().join(format!("tickwire-ladder-{}", std::process::id()));
        let step = |rate: u64, p50_us: u64, sustained: bool| LatencyStep {
            rate,
            latency: LatencySummary {
                count: 1000,
                p50_ns: p50_us * 1000,
                p99_ns: p50_us * 3000,
                ..Default::default()
            },
            sustained,
            ..Default::default()
        };
        let mut dirs = Vec::new();
        for (i, base) in [40u64, 50, 60].into_iter().enumerate() {
            let d = dir.join(format!("run-{i}"));
            let r = Results {
                scenario: "latency".into(),
                git_commit: "0123456789abcdef".into(),
                throughput: vec![throughput("on", 1000)],
                // The last run did not sustain 5,000/s: that rung has two runs.
                latency: vec![step(1_000, base, true), step(5_000, base + 10, i < 2)],
                ..Default::default()
            };
            write_run(&d, &r);
            dirs.push(d);
        }
        let md = summary(&dirs).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            md.contains("| throughput, cache on (updates/s) | 1,000 | 1,000 – 1,000 | 3 |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| rate (updates/s) | latency p50 (µs) | latency p99 (µs) |\n|---:|---:|---:|\n"
            ),
            "{md}"
        );
        assert!(
            md.contains("| 1,000 | 50.0 (40.0 – 60.0) | 150 (120 – 180) |\n"),
            "{md}"
        );
        assert!(
            md.contains("| 5,000 | 55.0 (50.0 – 60.0; 2 runs) | 165 (150 – 180; 2 runs) |"),
            "{md}"
        );
        assert!(!md.contains("latency p50 at"), "{md}");
    }

    #[test]
    fn figures_measured_alike_are_cells_of_one_table_and_the_rest_stay_whole() {
        let r = rung("NATS: latency p99 at 10,000/s (µs)").unwrap();
        // Tickwire and NATS measured alike: one table, a row a set-up and rate.
        assert_eq!(
            (r.group.as_str(), r.column.as_str(), r.row),
            ("NATS", "latency p99 (µs)", "10,000")
        );
        let r =
            rung("RSSL: latency added by the node, median of 1-s means, ProvPerf at 1,000/s (µs)")
                .unwrap();
        assert_eq!(
            (r.group.as_str(), r.column.as_str()),
            (
                "RSSL ProvPerf",
                "latency added by the node, median of 1-s means (µs)"
            )
        );
        let r = rung("RSSL: mean latency added by a byte relay, at 10,000/s (µs)").unwrap();
        assert_eq!(r.column, "mean latency added by a byte relay (µs)");
        assert!(
            grid_cell("files at 50 MB/s (queued first): market data p99 during / without")
                .is_none()
        );
        let c = grid_cell("journal always: posts acked/s").unwrap();
        assert_eq!(
            (c.row_label, c.row, c.column.as_str()),
            ("fsync", "always", "posts acked/s")
        );
        let c = grid_cell("files fault kill_site: seconds to whole").unwrap();
        assert_eq!(
            (c.row, c.column.as_str()),
            ("kill_site", "seconds to whole")
        );
        assert!(grid_cell("journal of updates: cost to the sustained rate (%)").is_none());
        let c =
            grid_cell("files uftp: 63KB-both-ways to 4 site(s), fsync never (files/min)").unwrap();
        assert_eq!(
            (c.group.as_str(), c.row, c.column.as_str()),
            (
                "files uftp",
                "63KB-both-ways",
                "to 4 site(s), fsync never (files/min)"
            )
        );
    }

    #[test]
    fn files_to_several_sites_are_set_beside_one_site_in_time_and_cpu() {
        let row = |sites: usize, seconds: f64, cpu: &[(&str, f64)]| FilesRow {
            class: "large".into(),
            files: 1,
            sites,
            fsync: "never".into(),
            seconds,
            cpu_s: cpu.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            ..Default::default()
        };
        let r = Results {
            files: vec![
                row(
                    1,
                    2.0,
                    &[("node src", 1.5), ("node site1", 1.0), ("send", 0.5)],
                ),
                row(4, 3.0, &[("node src", 1.5), ("sites", 4.0), ("send", 0.5)]),
                // Without CPU figures (older results): no CPU row, nor a time row.
                FilesRow {
                    class: "16KB".into(),
                    files: 1,
                    sites: 4,
                    seconds: 1.0,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let f: BTreeMap<String, f64> = figures(&r).into_iter().collect();
        let against = "files Tickwire: large to 4 sites against 1, fsync never";
        assert_eq!(f.get(&format!("{against}: time (x)")), Some(&1.5));
        assert_eq!(
            f.get(&format!("{against}: CPU of every process (x)")),
            Some(&2.0)
        );
        assert!(
            !f.keys().any(|k| k.contains("16KB to 4 sites against")),
            "{f:?}"
        );
        assert_eq!(r.files[1].cpu_busy(2), Some(1.0));
        assert_eq!(r.files[2].cpu_busy(2), None);
    }

    #[test]
    fn the_rssl_goals_are_figures_of_their_own() {
        let step = |provider: &str, cpu: Option<f64>, latency: f64, sustained: bool| RsslStep {
            rate: 10_000,
            provider: provider.into(),
            latency_avg_us: Some(latency),
            latency_median_of_seconds_us: Some(latency / 2.0),
            sustained,
            node_cpu_ns_per_update: cpu,
            ..Default::default()
        };
        let r = Results {
            rssl: Some(RsslResult {
                direct: vec![step("ProvPerf", None, 50.0, true)],
                relayed: vec![step("ProvPerf", None, 78.0, true)],
                through_node: vec![
                    step("ProvPerf", Some(6_000.0), 130.0, true),
                    // Not sustained: a queue, not the path.
                    step("NIProvPerf", Some(9_000.0), 900.0, false),
                ],
                native: vec![LatencyStep {
                    rate: 10_000,
                    node_cpu_ns_per_update: 4_000.0,
                    sustained: true,
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        // The native path not sustained at the rate: no ratio over it.
        let mut unsustained = r.clone();
        if let Some(x) = unsustained.rssl.as_mut() {
            x.native[0].sustained = false;
        }
        assert!(!figures(&unsustained)
            .iter()
            .any(|(k, _)| k.contains("over native")));
        let f: BTreeMap<String, f64> = figures(&r).into_iter().collect();
        assert_eq!(
            f.get("RSSL: node CPU per update over native, ProvPerf at 10,000/s (x)"),
            Some(&1.5)
        );
        assert_eq!(
            f.get("RSSL: mean latency added by the node, ProvPerf at 10,000/s (µs)"),
            Some(&80.0)
        );
        assert_eq!(
            f.get(
                "RSSL: latency added by the node, median of 1-s means, ProvPerf at 10,000/s (µs)"
            ),
            Some(&40.0)
        );
        assert!(!f.keys().any(|k| k.contains("NIProvPerf at")), "{f:?}");
        assert_eq!(
            f.get("RSSL: mean latency added by a byte relay, at 10,000/s (µs)"),
            Some(&28.0)
        );
        assert_eq!(
            f.get("RSSL: latency added by a byte relay, median of 1-s means, at 10,000/s (µs)"),
            Some(&14.0)
        );
    }

    #[test]
    fn a_digest_sets_every_scenario_and_every_ladder_side_by_side() {
        let root = std::env::temp_dir().join(format!("tickwire-digest-{}", std::process::id()));
        let step = |rate: u64, p99_us: u64| LatencyStep {
            rate,
            latency: LatencySummary {
                count: 1000,
                p50_ns: p99_us * 300,
                p99_ns: p99_us * 1000,
                ..Default::default()
            },
            sustained: true,
            ..Default::default()
        };
        let write = |scenario: &str, run: usize, r: Results| {
            let d = root.join(scenario).join(format!("run-{run}"));
            let r = Results {
                scenario: scenario.into(),
                git_commit: "0123456789abcdef".into(),
                command: format!("tickwire-bench {scenario} --out {}", d.display()),
                ..r
            };
            write_run(&d, &r);
        };
        for run in 1..=3 {
            let k = run as u64;
            write(
                "latency",
                run,
                Results {
                    throughput: vec![throughput("on", 1000 * k)],
                    latency: vec![step(1_000, 100 + k), step(10_000, 200 + k)],
                    ..Default::default()
                },
            );
            let mut peers = PeersResult::default();
            peers.nats.available = true;
            peers.nats.max_sustainable_updates_per_s = 500 * k;
            peers.nats.latency = vec![step(10_000, 300 + k), step(50_000, 400 + k)];
            write(
                "peers",
                run,
                Results {
                    peers: Some(peers),
                    ..Default::default()
                },
            );
        }
        // A folder with no run is an error, not an empty row.
        std::fs::create_dir_all(root.join("empty")).unwrap();
        let err = digest(&[root.join("latency"), root.join("empty")]).unwrap_err();
        assert!(err.to_string().contains("holds no run"), "{err}");

        let md = digest(&[root.join("peers"), root.join("latency")]).unwrap();
        let _ = std::fs::remove_dir_all(&root);
        // The scenarios in the order given, each with its commit and command.
        let peers_at = md.find("| peers | 3 | 0123456 |").expect(&md);
        let latency_at = md.find("| latency | 3 | 0123456 |").expect(&md);
        assert!(peers_at < latency_at, "{md}");
        assert!(md.contains("`tickwire-bench latency --out DIR` |"), "{md}");
        // The figures that stand alone, a row each with its scenario.
        assert!(
            md.contains("| latency | throughput, cache on (updates/s) | 2,000 (1,000 – 3,000) |"),
            "{md}"
        );
        assert!(
            md.contains("| peers | NATS: highest rate (updates/s) | 1,000 (500 – 1,500) |"),
            "{md}"
        );
        // One table of every ladder's p99, the rates of all of them in order.
        assert!(
            md.contains("| latency p99 (µs) at rate (updates/s) | peers: NATS | latency |\n"),
            "{md}"
        );
        assert!(md.contains("| 1,000 | – | 102 (101 – 103) |\n"), "{md}");
        assert!(
            md.contains("| 10,000 | 302 (301 – 303) | 202 (201 – 203) |\n"),
            "{md}"
        );
        assert!(md.contains("| 50,000 | 402 (401 – 403) | – |\n"), "{md}");
        // The p50s stay in the scenario's own tables.
        assert!(!md.contains("p50"), "{md}");
    }
}
