//! `tickwire bench SCENARIO --out DIR`: the classic market-data test procedures.
//!
//! Starts nodes and load tools as separate processes, finds the highest sustainable
//! rates (ramp, then bisection), climbs a latency ladder, and writes `DIR/results.json`,
//! `DIR/report.md` and SVG plots. docs/BENCHMARKS.md documents the procedure and schema.

use crate::lab::{self, find_max, hold, recover, round_rate, start_rig, Rig, RigSpec, Step};
use crate::plot::{BarChart, LineChart};
use crate::stall::{Stall, StallPlan};
use crate::sysinfo::{machine, Machine, MonitorOptions, ProcessMonitor, ProcessUsage};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod args;
mod backbone_scenario;
mod files_market_data;
mod files_scenario;
mod journal_scenario;
mod peers_scenario;
mod rssl_scenario;
mod summary;
mod tree_scenario;
mod wait_scenario;

/// perf-pub's `--flush-every` in the latency ladders: at 100,000/s a burst of 100
/// updates written whole put about 100 µs of building into its first update's latency
/// (p50 250 µs against 120-150 µs with 8; with 1, a write per update, one run of two
/// had a p99 of 92 ms).
const LATENCY_FLUSH_EVERY: u64 = 8;

pub use args::*;

#[derive(clap::Subcommand, Debug, Clone)]
pub enum BenchCommand {
    /// Highest update rate with zero loss, cache off and on, no fan-out.
    Throughput(ThroughputArgs),
    /// 100 subscriber connections, producer 50/50 (fan-out 50.5): highest input rate.
    Fanout(FanoutArgs),
    /// End-to-end latency at a ladder of rates, up to saturation (cache off).
    Latency(LatencyArgs),
    /// N independent node+publisher+subscriber sets, pinned to disjoint CPUs vs not.
    Instances(InstancesArgs),
    /// Every scenario but memory, with short steps (across the backbone and through two
    /// nodes: at most 10,000 items, no fan-out row; on the backbone 1% loss only; the
    /// journal: 3 s per sync policy).
    Quick(Box<QuickArgs>),
    /// Across the backbone (publisher -> source node -> Aeron multicast on loopback ->
    /// edge node -> subscriber): throughput cache off and on, fan-out at the edge, the
    /// latency ladder, 0.1% and 1% loss; single-node figures from the same run beside
    /// them.
    Backbone(BackboneArgs),
    /// Through two nodes over an upstream link (publisher -> top node -> TCP -> POP
    /// node -> subscriber, the report's "p2ps POP" rows): throughput cache off and on,
    /// fan-out at the POP, the latency ladder; single-node figures from the same run
    /// beside them.
    Tree(TreeArgs),
    /// The same workload on Tickwire and on a peer (NATS, `nats-server` from the
    /// system's packages) in one run: highest sustained rate and the latency ladder of
    /// each, side by side.
    Peers(PeersArgs),
    /// What waiting costs: across the backbone, once per idle strategy of the nodes'
    /// media drivers (`[backbone] idle`: block, adaptive, backoff, yield, spin), the
    /// nodes at rest, then a latency ladder (1,000, 10,000, 100,000/s); each rung's
    /// latency beside every process's CPU (share of a CPU, and per update).
    Wait(WaitArgs),
    /// Posts through the node's journal: posts acknowledged per second, Ack latency
    /// (p50/p99/max) and the journal's system calls per post with each sync policy
    /// (always, batch, never) and without a journal.
    Journal(JournalArgs),
    /// At 50% of the max sustainable rate, stop one of several subscribers (SIGSTOP) for
    /// 3 s, then the node for 500 ms: the others' latency, recovery, loss, node memory.
    Stall(StallArgs),
    /// One WebSocket JSON subscriber (tr_json2): highest update rate with zero loss,
    /// then latency at 1,000 and 10,000 updates/s.
    Ws(WsArgs),
    /// Node memory per subscriber connection and per stream: 1,000 connections x 100
    /// items against 10 x 100 and 1,000 x 10 (fresh nodes, updates flowing).
    Memory(MemoryArgs),
    /// LSEG's own perf tools over RSSL: ProvPerf -> ConsPerf directly (the tools' own
    /// floor) beside NIProvPerf -> node -> ConsPerf, at 1,000, 10,000 and 100,000
    /// updates/s and up to the highest rate ConsPerf sustains directly; ConsPerf's
    /// update rate and mean latency, and the node's CPU per update beside its native
    /// path's.
    Rssl(RsslArgs),
    /// Files from one site to 1 and to 4 sites over the backbone (classes of 16 KB, 63
    /// KB and 635 KB files and one large file; the sites' fsync always and never), and
    /// the same files with rsync and uftp: files/minute, MB/s, CPU seconds per GB and
    /// system calls per file (docs/FILES.md).
    Files(FilesArgs),
    /// The current table of a scenario from several runs of it: each headline figure's
    /// median, spread and number of runs, under the runs' commit, machine and command
    /// (markdown on standard output; docs/BENCHMARKS.md opens with these).
    Summary {
        /// Directories holding results.json, runs of one scenario.
        #[arg(required = true, value_name = "DIR")]
        dirs: Vec<PathBuf>,
    },
    /// Compare result directories: the first is base 100.
    Compare {
        /// Directories holding results.json; the first is the base.
        #[arg(required = true, num_args = 2.., value_name = "DIR")]
        dirs: Vec<PathBuf>,
        /// Write the comparison (compare.md, compare.svg) here (default: the first DIR).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

/// The whole results file (schema in docs/BENCHMARKS.md).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Results {
    pub tickwire_version: String,
    pub git_commit: String,
    pub scenario: String,
    /// The lab's own command line (`tickwire-bench SCENARIO ...`; empty in results
    /// written before it was kept).
    #[serde(default)]
    pub command: String,
    pub started_unix_s: u64,
    pub duration_s: f64,
    pub machine: Option<Machine>,
    pub settings: serde_json::Value,
    pub commands: Vec<String>,
    pub throughput: Vec<Throughput>,
    pub fanout: Option<Fanout>,
    pub latency: Vec<LatencyStep>,
    pub instances: Vec<Instances>,
    pub processes: Vec<StepProcess>,
    /// The stall scenario (absent in results written before it existed).
    #[serde(default)]
    pub stall: Option<Stall>,
    /// The memory scenario (absent in results written before it existed).
    #[serde(default)]
    pub memory: Option<crate::memory::Memory>,
    /// The WebSocket scenario (absent in results written before it existed).
    #[serde(default)]
    pub websocket: Option<WebSocketResult>,
    /// The backbone scenario (absent in results written before it existed).
    #[serde(default)]
    pub backbone: Option<backbone_scenario::BackboneResult>,
    /// The wait scenario (absent in results written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<wait_scenario::WaitResult>,
    /// The node-tree scenario (absent in results written before it existed).
    #[serde(default)]
    pub tree: Option<tree_scenario::TreeResult>,
    /// The peer scenario (absent in results written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peers: Option<peers_scenario::PeersResult>,
    /// The journal scenario: one line per sync policy (absent in results written
    /// before it existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub journal: Vec<journal_scenario::JournalStep>,
    /// The journal scenario: what journaling every update costs the sustained rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal_updates: Option<journal_scenario::JournalUpdateCost>,
    /// The RSSL scenario (absent in results written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rssl: Option<rssl_scenario::RsslResult>,
    /// `bench files`: Tickwire's rows (the peers' are in `peers`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<files_scenario::FilesRow>,
    /// `bench files`: market data's latency without files and during a transfer, at
    /// each files share.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files_market_data: Vec<files_market_data::FilesMarketData>,
}

/// `bench ws`: one WebSocket JSON subscriber.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WebSocketResult {
    pub items: usize,
    /// Highest rate delivered with zero loss to the WebSocket subscriber.
    pub max_sustainable_updates_per_s: u64,
    pub steps: Vec<Step>,
    /// Steps held at fixed rates (1,000 and 10,000 updates/s) for latency.
    pub latency: Vec<Step>,
    /// Many connections watching the same items, with the node's shared JSON encoding
    /// on and off (absent in results written before it existed).
    #[serde(default)]
    pub fanout: Option<WsFanout>,
}

/// `bench ws`, fan-out part: what encoding an update's JSON once for every WebSocket
/// client watching it saves, in node CPU per update delivered, at one fixed rate.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WsFanout {
    pub connections: usize,
    pub items: usize,
    /// The publisher's rate; the node delivers this times `connections`.
    pub input_updates_per_s: u64,
    /// Node CPU (user + system) per update delivered, median of the runs, in µs.
    pub shared_node_cpu_us_per_update: f64,
    pub unshared_node_cpu_us_per_update: f64,
    /// unshared / shared: how many times more CPU the node spends without sharing.
    pub unshared_over_shared: f64,
    /// The user-mode part of the above (the encoding itself; the system part, writing
    /// to the sockets, is the same either way), median of the runs, in µs.
    #[serde(default)]
    pub shared_node_user_us_per_update: f64,
    #[serde(default)]
    pub unshared_node_user_us_per_update: f64,
    /// Update encodings the nodes made, and the times one was reused for another
    /// client, over the whole life of the shared and of the per-client nodes, from
    /// their /metrics (they show that sharing happened, and only where it was on).
    #[serde(default)]
    pub shared_encoded: u64,
    #[serde(default)]
    pub shared_reused: u64,
    #[serde(default)]
    pub unshared_encoded: u64,
    #[serde(default)]
    pub unshared_reused: u64,
    /// One step per run, alternating shared and unshared rigs (each run a fresh rig).
    pub shared: Vec<Step>,
    pub unshared: Vec<Step>,
}

/// The node's usage in a step (its process is named `node-...`).
fn node_usage(step: &Step) -> Option<&ProcessUsage> {
    step.processes.iter().find(|p| p.name.starts_with("node-"))
}

/// The node's CPU seconds in a step (picked by `cpu`) per update delivered, in µs.
fn node_us_per_update(step: &Step, cpu: impl Fn(&ProcessUsage) -> f64) -> Option<f64> {
    let node = node_usage(step)?;
    (step.delivered > 0).then(|| cpu(node) * 1e6 / step.delivered as f64)
}

/// The node's CPU (user + system) microseconds per update delivered in a step.
fn node_cpu_us_per_update(step: &Step) -> Option<f64> {
    node_us_per_update(step, |p| p.cpu_user_s + p.cpu_sys_s)
}

/// The user-mode part of [`node_cpu_us_per_update`].
fn node_user_us_per_update(step: &Step) -> Option<f64> {
    node_us_per_update(step, |p| p.cpu_user_s)
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Throughput {
    pub cache: String,
    pub items: usize,
    pub max_sustainable_updates_per_s: u64,
    /// Why the lowest failing rate failed (e.g. "publisher-limited": the load tool, not
    /// the node, was the limit).
    pub limited_by: Option<String>,
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fanout {
    /// Why the lowest failing rate failed.
    pub limited_by: Option<String>,
    pub connections: usize,
    pub items: usize,
    pub commonality: String,
    pub fanout: f64,
    pub cache: String,
    pub input_updates_per_s: u64,
    pub output_updates_per_s: u64,
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LatencyStep {
    pub rate: u64,
    pub mean_ns: f64,
    pub stddev_ns: f64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub p9999_ns: u64,
    pub count: u64,
    pub gaps: u64,
    pub delivered_ratio: f64,
    pub sustained: bool,
    /// The node's CPU per update at this rate (as in `step`).
    #[serde(default)]
    pub node_cpu_ns_per_update: f64,
    pub step: Step,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Instances {
    pub instances: usize,
    pub pinned: bool,
    pub per_instance_updates_per_s: u64,
    pub aggregate_updates_per_s: u64,
    pub steps: Vec<Vec<Step>>,
}

/// One process's figures for one step, flattened for dashboards.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepProcess {
    pub scenario: String,
    pub step: String,
    pub rate: u64,
    #[serde(flatten)]
    pub usage: ProcessUsage,
}

struct Progress {
    start: Instant,
    tty: bool,
    planned: f64,
    done: f64,
}

impl Progress {
    fn line(&mut self, text: &str, weight: f64) {
        self.done += weight;
        let elapsed = self.start.elapsed().as_secs_f64();
        let frac = (self.done / self.planned).clamp(0.01, 1.0);
        let eta = (elapsed / frac - elapsed).max(0.0);
        if self.tty {
            let width = 24;
            let filled = (frac * width as f64) as usize;
            eprintln!(
                "[{}{}] {:>3.0}% {:>4.0}s ETA {:>4.0}s  {text}",
                "#".repeat(filled),
                "-".repeat(width - filled),
                frac * 100.0,
                elapsed,
                eta
            );
        } else {
            eprintln!("bench {elapsed:>6.1}s (ETA {eta:.0}s): {text}");
        }
    }
}

fn step_text(s: &Step) -> String {
    format!(
        "{}: {} updates/s asked, {:.0}/s delivered ({:.2}% of asked x fan-out), gaps {}, latency p99 {:.0} µs: {}",
        s.label,
        s.target_rate,
        s.delivered_per_s,
        s.delivered_ratio * 100.0,
        s.gaps,
        s.latency.p99_ns as f64 / 1e3,
        if s.pass {
            "pass".to_string()
        } else {
            format!("FAIL ({})", s.reason)
        }
    )
}

struct Lab {
    programs: lab::Programs,
    logs: PathBuf,
    args: BenchArgs,
    quick: bool,
    results: Results,
    progress: Progress,
    count_syscalls: bool,
}

impl Lab {
    /// Starts a rig as `spec` says, scraped when the run asks for it.
    fn start_rig(&self, spec: &RigSpec) -> Result<Rig> {
        let spec = RigSpec {
            scrape_metrics: spec.scrape_metrics || self.args.scrape_metrics,
            ..spec.clone()
        };
        start_rig(&self.programs, &spec, &self.logs)
    }

    fn seconds(&self) -> f64 {
        self.args
            .step_seconds
            .unwrap_or(if self.quick { 2.0 } else { 10.0 })
    }

    fn bisections(&self) -> u32 {
        if self.quick {
            1
        } else {
            3
        }
    }

    fn monitor(&self, rigs: &[Rig]) -> ProcessMonitor {
        let pids: Vec<(String, u32)> = rigs.iter().flat_map(|r| r.pids()).collect();
        ProcessMonitor::start_with(
            &pids,
            MonitorOptions {
                interval: Duration::from_millis(200),
                count_syscalls: self.count_syscalls,
            },
        )
    }

    fn record_processes(&mut self, scenario: &str, steps: &[Step]) {
        for s in steps {
            for u in &s.processes {
                self.results.processes.push(StepProcess {
                    scenario: scenario.into(),
                    step: s.label.clone(),
                    rate: s.target_rate,
                    usage: u.clone(),
                });
            }
        }
    }

    fn throughput(&mut self) -> Result<()> {
        for cache in ["off", "on"] {
            let spec = RigSpec::new(format!("throughput cache={cache}"), cache, self.args.items);
            let (secs, bisect) = (self.seconds(), self.bisections());
            let (max, steps) = self.search_one_rig("throughput", &spec, 250_000, secs, bisect)?;
            self.results.throughput.push(Throughput {
                cache: cache.into(),
                items: self.args.items,
                max_sustainable_updates_per_s: max,
                limited_by: limit_reason(&steps, max),
                steps,
            });
        }
        Ok(())
    }

    /// One rig: ramp then bisect to its highest sustained rate, each rate held `secs`;
    /// the rig is stopped after.
    fn search_one_rig(
        &mut self,
        scenario: &str,
        spec: &RigSpec,
        default_start: u64,
        secs: f64,
        bisect: u32,
    ) -> Result<(u64, Vec<Step>)> {
        let mut rigs = vec![self.start_rig(spec)?];
        self.results.commands.extend(rigs[0].commands());
        let monitor = self.monitor(&rigs);
        let start = self.args.start_rate.unwrap_or(default_start);
        let progress = &mut self.progress;
        let (max, steps) = find_max(
            &mut rigs,
            start,
            self.args.max_rate,
            bisect,
            secs,
            &monitor,
            &mut |s| progress.line(&step_text(&s[0]), 1.0),
        )?;
        let steps: Vec<Step> = steps.into_iter().flatten().collect();
        self.record_processes(scenario, &steps);
        stop_rigs(rigs)?;
        Ok((max, steps))
    }

    fn fanout(&mut self) -> Result<()> {
        let conns = self.args.connections.max(1);
        let items = if self.quick {
            self.args.fanout_items.min(2_000)
        } else {
            self.args.fanout_items
        };
        let fanout = crate::perf_sub::Commonality::Producer5050.fanout(conns);
        let spec = RigSpec {
            connections: conns,
            commonality: "producer-50-50",
            fanout,
            ..RigSpec::new(format!("fanout {conns} connections"), "off", items)
        };
        let (secs, bisect) = (self.seconds(), self.bisections());
        let (max, steps) = self.search_one_rig("fanout", &spec, 10_000, secs, bisect)?;
        let best = steps
            .iter()
            .filter(|s| s.pass && s.target_rate == max)
            .map(|s| s.delivered_per_s)
            .fold(0.0, f64::max);
        self.results.fanout = Some(Fanout {
            limited_by: limit_reason(&steps, max),
            connections: conns,
            items,
            commonality: "producer-50-50".into(),
            fanout,
            cache: "off".into(),
            input_updates_per_s: max,
            output_updates_per_s: best.round() as u64,
            steps,
        });
        Ok(())
    }

    fn latency(&mut self) -> Result<()> {
        let spec = RigSpec::new("latency cache=off", "off", self.args.items);
        let ladder = self.ladder();
        let steps = self.latency_ladder(&spec, "latency", &ladder)?;
        self.results.latency = steps;
        Ok(())
    }

    /// The rates of the latency ladder (then doubling until a step is not sustained).
    fn ladder(&self) -> Vec<u64> {
        let default: Vec<u64> = if self.quick {
            vec![1_000, 10_000, 100_000]
        } else {
            vec![
                1_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000,
            ]
        };
        let mut ladder = self.args.rates.clone().unwrap_or(default);
        ladder.sort_unstable();
        ladder
    }

    /// Climbs `ladder` on one rig built from `spec`, then doubles until a step is not
    /// sustained (saturation). The publisher writes every `LATENCY_FLUSH_EVERY` updates
    /// (the reference procedure's latency runs flushed at once), so that an update's
    /// latency is not the time its burst took to build, and spins over the last
    /// `--pub-spin-us` before each burst, so that it is not its own late wake-up either;
    /// with `--pub-yield on` it gives up its CPU after each of those writes, so that it
    /// does not hold the node it just woke off that CPU.
    fn latency_ladder(
        &mut self,
        spec: &RigSpec,
        scenario: &str,
        ladder: &[u64],
    ) -> Result<Vec<LatencyStep>> {
        let node_config = match self.args.node_wait.as_str() {
            "block" => spec.node_config.clone(),
            wait => Some(format!(
                "{}[node]\nwait = \"{wait}\"\n",
                spec.node_config.as_deref().unwrap_or("")
            )),
        };
        let spec = &RigSpec {
            flush_every: LATENCY_FLUSH_EVERY,
            spin_us: self.args.pub_spin_us,
            yield_after_write: self.args.pub_yield == "on",
            sub_wait: self.args.sub_wait.clone(),
            node_config,
            ..spec.clone()
        };
        let mut rigs = vec![self.start_rig(spec)?];
        self.results.commands.extend(rigs[0].commands());
        let monitor = self.monitor(&rigs);
        let secs = self.seconds();
        let mut rate_iter = ladder.iter().copied();
        let mut last = 0;
        let mut out = Vec::new();
        loop {
            let rate = match rate_iter.next() {
                Some(r) => r,
                None if last > 0 && last * 2 <= self.args.max_rate => last * 2,
                None => break,
            };
            let steps = hold(&mut rigs, rate, secs, 1.0, &monitor)?;
            let s = steps.into_iter().next().expect("one rig");
            self.progress.line(&step_text(&s), 1.0);
            self.record_processes(scenario, std::slice::from_ref(&s));
            let sustained = s.pass;
            out.push(latency_step(rate, s));
            last = rate;
            if !sustained {
                break; // saturated
            }
        }
        let _ = recover(&mut rigs, 1.0);
        stop_rigs(rigs)?;
        Ok(out)
    }

    fn instances(&mut self) -> Result<()> {
        let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
        let n = ncpu.max(2);
        let items = if self.quick {
            self.args.items.min(10_000)
        } else {
            self.args.items
        };
        for pinned in [false, true] {
            let mut rigs = Vec::new();
            for i in 0..n {
                let cpu = (i % ncpu).to_string();
                let label = format!(
                    "instance {i} {}",
                    if pinned { "pinned" } else { "unpinned" }
                );
                let spec = RigSpec {
                    cpus: pinned.then(|| (cpu.clone(), cpu.clone(), cpu.clone())),
                    ..RigSpec::new(label, "off", items)
                };
                rigs.push(self.start_rig(&spec)?);
                self.results.commands.extend(rigs[i].commands());
            }
            let monitor = self.monitor(&rigs);
            let (secs, bisect) = (self.seconds(), self.bisections());
            let start = self.args.start_rate.unwrap_or(100_000);
            let progress = &mut self.progress;
            let (max, steps) = find_max(
                &mut rigs,
                start,
                self.args.max_rate,
                bisect,
                secs,
                &monitor,
                &mut |s| {
                    let agg: f64 = s.iter().map(|x| x.delivered_per_s).sum();
                    let ok = s.iter().all(|x| x.pass);
                    progress.line(
                        &format!(
                            "{} instances {}: {} updates/s each, {:.0}/s aggregate: {}",
                            s.len(),
                            if pinned { "pinned" } else { "unpinned" },
                            s[0].target_rate,
                            agg,
                            if ok { "pass" } else { "FAIL" }
                        ),
                        1.0,
                    )
                },
            )?;
            for s in &steps {
                self.record_processes("instances", s);
            }
            self.results.instances.push(Instances {
                instances: n,
                pinned,
                per_instance_updates_per_s: max,
                aggregate_updates_per_s: max * n as u64,
                steps,
            });
            stop_rigs(rigs)?;
        }
        Ok(())
    }
}

impl Lab {
    /// One WebSocket subscriber watching --ws-items: its highest sustained rate and its
    /// latency at 1,000 and 10,000 updates/s; then the fan-out comparison.
    fn ws(&mut self) -> Result<()> {
        let items = self.args.ws_items;
        let mut spec = RigSpec::new("websocket 1 connection", "on", items);
        spec.websocket = true;
        let secs = self.seconds();
        let bisect = if self.quick { 1 } else { 2 };
        let (max, steps) = self.search_one_rig("websocket", &spec, 10_000, secs, bisect)?;
        let mut rigs = vec![self.start_rig(&spec)?];
        let monitor = self.monitor(&rigs);
        let mut latency = Vec::new();
        for rate in [1_000u64, 10_000] {
            if rate > max.max(1_000) {
                continue;
            }
            let step = hold(&mut rigs, rate, secs, 1.0, &monitor)?;
            if let Some(s) = step.into_iter().next() {
                self.progress
                    .line(&format!("websocket latency: {}", step_text(&s)), 1.0);
                latency.push(s);
            }
        }
        stop_rigs(rigs)?;
        let fanout = self.ws_fanout()?;
        self.results.websocket = Some(WebSocketResult {
            items,
            max_sustainable_updates_per_s: max,
            steps,
            latency,
            fanout: Some(fanout),
        });
        Ok(())
    }

    /// Many WebSocket connections watching the same items at one fixed rate, on fresh
    /// rigs with `websocket.share_encoding` on and off in turn (on, off, off, on, ...
    /// so that drift in the machine's speed does not favour either).
    fn ws_fanout(&mut self) -> Result<WsFanout> {
        let conns = self.args.ws_connections.max(1);
        let items = self.args.ws_fanout_items.max(1);
        let rate = self.args.ws_fanout_rate;
        let runs = if self.quick { 2 } else { 4 };
        let secs = self.seconds();
        let (mut shared, mut unshared) = (Vec::new(), Vec::new());
        let (mut shared_counts, mut unshared_counts) = ((0, 0), (0, 0));
        for run in 0..runs {
            let share = matches!(run % 4, 0 | 3);
            let label = format!(
                "websocket fanout {conns} connections {} encoding run {}",
                if share { "shared" } else { "per-client" },
                run + 1
            );
            let spec = RigSpec {
                connections: conns,
                fanout: conns as f64,
                websocket: true,
                node_config: Some(format!("[websocket]\nshare_encoding = {share}\n")),
                ..RigSpec::new(label, "on", items)
            };
            let mut rigs = vec![self.start_rig(&spec)?];
            if run == 0 || run == 1 {
                self.results.commands.extend(rigs[0].commands());
            }
            let monitor = self.monitor(&rigs);
            let step = hold(&mut rigs, rate, secs, 1.0, &monitor)?
                .into_iter()
                .next()
                .ok_or_else(|| anyhow::anyhow!("no step measured"))?;
            let http = rigs[0].node.ws_addr.as_deref();
            let encoded =
                crate::scraper::counter(http, "tickwire_websocket_updates_encoded_total")?;
            let reused = crate::scraper::counter(http, "tickwire_websocket_updates_reused_total")?;
            stop_rigs(rigs)?;
            if share {
                shared_counts.0 += encoded;
                shared_counts.1 += reused;
            } else {
                unshared_counts.0 += encoded;
                unshared_counts.1 += reused;
            }
            let cpu = node_cpu_us_per_update(&step).unwrap_or(f64::NAN);
            self.progress.line(
                &format!("{} — node {cpu:.2} µs CPU per update", step_text(&step)),
                1.0,
            );
            if share {
                shared.push(step);
            } else {
                unshared.push(step);
            }
        }
        let cpu =
            |steps: &[Step]| median(steps.iter().filter_map(node_cpu_us_per_update).collect());
        let (on, off) = (cpu(&shared), cpu(&unshared));
        let user =
            |steps: &[Step]| median(steps.iter().filter_map(node_user_us_per_update).collect());
        self.record_processes(
            "websocket fanout",
            &[shared.clone(), unshared.clone()].concat(),
        );
        Ok(WsFanout {
            connections: conns,
            items,
            input_updates_per_s: rate,
            shared_node_cpu_us_per_update: on,
            unshared_node_cpu_us_per_update: off,
            unshared_over_shared: if on > 0.0 { off / on } else { 0.0 },
            shared_encoded: shared_counts.0,
            shared_reused: shared_counts.1,
            unshared_encoded: unshared_counts.0,
            unshared_reused: unshared_counts.1,
            shared_node_user_us_per_update: user(&shared),
            unshared_node_user_us_per_update: user(&unshared),
            shared,
            unshared,
        })
    }

    fn memory(&mut self) -> Result<()> {
        let (programs, logs) = (self.programs.clone(), self.logs.clone());
        let progress = &mut self.progress;
        let m = crate::memory::run(
            &programs,
            &logs,
            self.args.memory_connections,
            self.args.memory_items,
            &mut |text| progress.line(text, 1.0),
        )?;
        self.progress.line(
            &format!(
                "memory: {:.0} bytes per connection, {:.0} bytes per stream ({} connections x {} items: node RSS {:.1} MiB)",
                m.per_connection_bytes,
                m.per_stream_bytes,
                m.connections,
                m.items,
                m.full.node_rss_bytes as f64 / 1048576.0
            ),
            0.0,
        );
        self.results.memory = Some(m);
        Ok(())
    }

    /// The stall scenario at 50% of the max sustainable rate (cache on): the throughput
    /// scenario's figure when it ran before (in `quick`), else a short search with the
    /// same rig (2 s steps, one bisection), unless `--stall-rate` says.
    fn stall(&mut self) -> Result<()> {
        let mut search_steps = Vec::new();
        let (rate, max, source) = match self.args.stall_rate {
            Some(r) => (r, None, "--stall-rate".to_string()),
            None => {
                let known = self
                    .results
                    .throughput
                    .iter()
                    .find(|t| t.cache == "on" && t.max_sustainable_updates_per_s > 0)
                    .map(|t| t.max_sustainable_updates_per_s);
                let (max, source) = match known {
                    Some(m) => (m, "50% of the throughput scenario's max (cache on)"),
                    None => {
                        let spec = RigSpec::new("stall max search cache=on", "on", self.args.items);
                        let secs = self.args.step_seconds.unwrap_or(2.0);
                        let (m, steps) =
                            self.search_one_rig("stall-search", &spec, 250_000, secs, 1)?;
                        search_steps = steps;
                        (m, "50% of a short max search (throughput rig, cache on)")
                    }
                };
                if max == 0 {
                    bail!("stall: no rate was sustained in the max search; give --stall-rate N");
                }
                (round_rate(max / 2).max(1), Some(max), source.to_string())
            }
        };
        let rate = rate.min(self.args.max_rate);
        let phase = self
            .args
            .stall_phase_seconds
            .unwrap_or(if self.quick { 2.0 } else { 3.0 });
        let plan = StallPlan {
            rate,
            items: self.args.stall_items,
            subscribers: self.args.stall_subscribers,
            settle_s: 1.0,
            baseline_s: phase,
            stall_s: self.args.stall_seconds,
            after_s: phase,
            node_pause_ms: self.args.node_pause_ms,
            pause_tail_s: 1.0,
            interval_ms: self.args.stall_interval_ms,
            latency_rate: 10_000,
        };
        let options = MonitorOptions {
            interval: Duration::from_millis(200),
            count_syscalls: self.count_syscalls,
        };
        let progress = &mut self.progress;
        let run = crate::stall::run(&self.programs, &self.logs, &plan, options, &mut |t| {
            progress.line(t, 1.0)
        })?;
        self.results.commands.extend(run.commands);
        for phase in run.processes {
            for usage in phase.usage {
                self.results.processes.push(StepProcess {
                    scenario: "stall".into(),
                    step: phase.phase.clone(),
                    rate,
                    usage,
                });
            }
        }
        let mut stall = run.stall;
        stall.rate_source = source;
        stall.max_sustainable_updates_per_s = max;
        stall.search_steps = search_steps;
        let ms = |v: Option<f64>| v.map_or("not recovered".to_string(), |v| format!("{v:.0} ms"));
        self.progress.line(
            &format!(
                "stall at {rate}/s: healthy p99 {:.0} µs baseline, {:.0} µs subscriber stopped, {:.0} µs node paused; recovery {} (stopped subscriber {}); gaps {}; node peak RSS {:.1} MiB; {}",
                stall.baseline_p99_ns as f64 / 1e3,
                stall.stall_p99_ns as f64 / 1e3,
                stall.node_pause_p99_ns as f64 / 1e3,
                ms(stall.recovery_ms),
                ms(stall.subscriber_recovery_ms),
                stall.healthy_gaps,
                stall.node_peak_rss_bytes as f64 / 1048576.0,
                if stall.pass { "targets met" } else { "targets NOT met" }
            ),
            1.0,
        );
        self.results.stall = Some(stall);
        Ok(())
    }
}

/// The reason of the lowest failing step above the maximum.
fn limit_reason(steps: &[Step], max: u64) -> Option<String> {
    steps
        .iter()
        .filter(|s| !s.pass && s.target_rate > max)
        .min_by_key(|s| s.target_rate)
        .map(|s| format!("at {} updates/s: {}", s.target_rate, s.reason))
}

fn latency_step(rate: u64, s: Step) -> LatencyStep {
    let l = s.latency;
    LatencyStep {
        rate,
        mean_ns: l.mean_ns,
        stddev_ns: l.stddev_ns,
        min_ns: l.min_ns,
        max_ns: l.max_ns,
        p50_ns: l.p50_ns,
        p90_ns: l.p90_ns,
        p99_ns: l.p99_ns,
        p999_ns: l.p999_ns,
        p9999_ns: l.p9999_ns,
        count: l.count,
        gaps: s.gaps,
        delivered_ratio: s.delivered_ratio,
        sustained: s.pass,
        node_cpu_ns_per_update: s.node_cpu_ns_per_update,
        step: s,
    }
}

fn stop_rigs(rigs: Vec<Rig>) -> Result<()> {
    for r in rigs {
        r.stop()?;
    }
    Ok(())
}

/// Runs a bench subcommand.
pub fn run(cmd: BenchCommand) -> Result<()> {
    let (name, mut args): (&str, BenchArgs) = match cmd {
        BenchCommand::Compare { dirs, out } => return compare(&dirs, out.as_deref()),
        BenchCommand::Summary { dirs } => {
            print!("{}", summary::summary(&dirs)?);
            return Ok(());
        }
        BenchCommand::Throughput(a) => ("throughput", a.into()),
        BenchCommand::Fanout(a) => ("fanout", a.into()),
        BenchCommand::Latency(a) => ("latency", a.into()),
        BenchCommand::Instances(a) => ("instances", a.into()),
        BenchCommand::Quick(a) => ("quick", (*a).into()),
        BenchCommand::Backbone(a) => ("backbone", a.into()),
        BenchCommand::Tree(a) => ("tree", a.into()),
        BenchCommand::Wait(a) => ("wait", a.into()),
        BenchCommand::Peers(a) => ("peers", a.into()),
        BenchCommand::Journal(a) => ("journal", a.into()),
        BenchCommand::Stall(a) => ("stall", a.into()),
        BenchCommand::Memory(a) => ("memory", a.into()),
        BenchCommand::Ws(a) => ("ws", a.into()),
        BenchCommand::Rssl(a) => ("rssl", a.into()),
        BenchCommand::Files(a) => ("files", a.into()),
    };
    // Absolute, as every process the lab starts gets paths under it (uftpd refuses a
    // relative destination).
    args.out =
        std::path::absolute(&args.out).with_context(|| format!("--out {}", args.out.display()))?;
    let logs = lab::ensure_dir(&args.out)?;
    let programs = lab::Programs::find()?;
    if cfg!(debug_assertions) {
        eprintln!(
            "bench: warning: this is a debug build; figures are not representative (use --release)"
        );
    }
    let quick = name == "quick";
    let planned = match name {
        "throughput" => 14.0,
        "fanout" => 8.0,
        "latency" => 10.0,
        "instances" => 12.0,
        "stall" => 12.0,
        "memory" => 3.0,
        "ws" => 12.0,
        "backbone" => 20.0,
        "tree" => 15.0,
        "wait" => 15.0,
        "peers" => 20.0,
        "journal" => 1.0,
        "rssl" => 4.0,
        "files" => 2.0,
        _ => 40.0,
    };
    let count_syscalls = args.syscalls && crate::sysinfo::perf_can_count_syscalls();
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut lab = Lab {
        programs,
        logs,
        quick,
        count_syscalls,
        results: Results {
            tickwire_version: env!("CARGO_PKG_VERSION").into(),
            git_commit: lab::git_commit(),
            scenario: name.into(),
            command: lab_command_line(),
            started_unix_s: started,
            machine: Some(machine_with_wake_probe()),
            settings: serde_json::json!({
                "items": args.items,
                "step_seconds": args.step_seconds.unwrap_or(if quick { 2.0 } else { 10.0 }),
                "fanout_items": args.fanout_items,
                "connections": args.connections,
                "max_rate": args.max_rate,
                "ladder_pub_spin_us": args.pub_spin_us,
                "ladder_pub_yield": args.pub_yield,
                "ladder_node_wait": args.node_wait,
                "ladder_sub_wait": args.sub_wait,
                "syscalls_counted": count_syscalls,
                "metrics_scraped_every_s": args.scrape_metrics.then_some(1),
                "stall_rate": args.stall_rate,
                "stall_items": args.stall_items,
                "stall_subscribers": args.stall_subscribers,
                "stall_seconds": args.stall_seconds,
                "node_pause_ms": args.node_pause_ms,
                "stall_phase_seconds": args.stall_phase_seconds.unwrap_or(if quick { 2.0 } else { 3.0 }),
                "stall_interval_ms": args.stall_interval_ms,
                "memory_connections": args.memory_connections,
                "memory_items": args.memory_items,
                "ws_items": args.ws_items,
                "ws_connections": args.ws_connections,
                "ws_fanout_items": args.ws_fanout_items,
                "ws_fanout_rate": args.ws_fanout_rate,
                "backbone_driver": args.backbone_driver,
                "backbone_idle": args.backbone_idle,
                "backbone_max_park_us": args.backbone_max_park_us,
                "backbone_mtu": args.backbone_mtu,
                "backbone_auth": args.backbone_auth,
                "files_scale": args.files_scale,
                "files_large_mb": args.files_large_mb,
                "files_rate_mb": args.files_rate_mb,
                "files_sites": args.files_sites,
                "files_fsync": args.files_fsync,
                "wait_strategies": args.wait_strategies,
                "pass_criteria": "delivered >= 99.5% of offered x fan-out over the step, backlog (sent x fan-out - received) grown by at most 0.5% of that (or 1,000 updates), zero sequence gaps, no update conflated, publisher within 1% of its schedule",
            }),
            commands: vec![std::env::args().collect::<Vec<_>>().join(" ")],
            ..Results::default()
        },
        progress: Progress {
            start: Instant::now(),
            tty: std::io::stderr().is_terminal(),
            planned,
            done: 0.0,
        },
        args,
    };
    let t0 = Instant::now();
    let outcome = match name {
        "throughput" => lab.throughput(),
        "fanout" => lab.fanout(),
        "latency" => lab.latency(),
        "instances" => lab.instances(),
        "stall" => lab.stall(),
        "memory" => lab.memory(),
        "ws" => lab.ws(),
        "backbone" => lab.backbone(),
        "tree" => lab.tree(),
        "wait" => lab.wait(),
        "peers" => lab.peers(),
        "journal" => lab.journal(),
        "rssl" => lab.rssl(),
        "files" => lab.files(),
        _ => lab
            .throughput()
            .and_then(|_| lab.fanout())
            .and_then(|_| lab.latency())
            .and_then(|_| lab.instances())
            .and_then(|_| lab.stall())
            .and_then(|_| lab.ws())
            .and_then(|_| lab.backbone())
            .and_then(|_| lab.tree())
            .and_then(|_| lab.peers())
            .and_then(|_| lab.journal()),
    };
    lab.results.duration_s = t0.elapsed().as_secs_f64();
    // Whatever was measured is written, even if a later scenario failed.
    write_outputs(&lab.args.out, &lab.results)?;
    outcome?;
    eprintln!(
        "bench: wrote {}/results.json and report.md in {:.0} s",
        lab.args.out.display(),
        lab.results.duration_s
    );
    Ok(())
}

/// CPU % of the first process whose name starts with `prefix`, at the highest rate the
/// throughput search sustained ("-" if none).
/// A multi-node latency ladder beside the single node's of the same run (report.md):
/// `path` says how the updates went ("across the backbone"), `what` heads its columns.
fn latency_beside_single(
    md: &mut String,
    path: &str,
    what: &str,
    single: &[LatencyStep],
    ladder: &[LatencyStep],
) -> Result<()> {
    if ladder.is_empty() {
        return Ok(());
    }
    writeln!(
        md,
        "### End-to-end latency, single node and {path} (cache off; µs)\n"
    )?;
    writeln!(md, "| rate/s | single p50 | {what} p50 | added p50 | single p99 | {what} p99 | {what} mean | {what} max | sustained |")?;
    writeln!(md, "|---|---|---|---|---|---|---|---|---|")?;
    for l in ladder {
        let s = single.iter().find(|x| x.rate == l.rate);
        let opt = |f: &dyn Fn(&LatencyStep) -> f64| s.map_or("-".to_string(), |x| us(f(x)));
        let added = s.map_or("-".to_string(), |x| us(l.p50_ns as f64 - x.p50_ns as f64));
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            fmt_rate(l.rate as f64),
            opt(&|x| x.p50_ns as f64),
            us(l.p50_ns as f64),
            added,
            opt(&|x| x.p99_ns as f64),
            us(l.p99_ns as f64),
            us(l.mean_ns),
            us(l.max_ns as f64),
            if l.sustained { "yes" } else { "no" }
        )?;
    }
    writeln!(md)?;
    ladder_cpu_table(md, ladder)
}

fn cpu_at_max(t: &Throughput, prefix: &str) -> String {
    t.steps
        .iter()
        .find(|s| s.pass && s.target_rate == t.max_sustainable_updates_per_s)
        .and_then(|s| s.processes.iter().find(|p| p.name.starts_with(prefix)))
        .map_or("-".to_string(), |p| format!("{:.0}%", p.cpu_percent))
}

/// A process's CPU time per update the publisher sent in `step`, in ns (0: none sent).
fn cpu_ns_per_update(step: &Step, p: &ProcessUsage) -> f64 {
    if step.offered == 0 {
        return 0.0;
    }
    (p.cpu_user_s + p.cpu_sys_s) * 1e9 / step.offered as f64
}

/// The CPU of the first process of `step` whose name starts with `prefix`: its share
/// of one CPU and per update sent ("12.5% / 850 ns"); "-" if there is none.
fn process_cpu(step: &Step, prefix: &str) -> String {
    step.processes
        .iter()
        .find(|p| p.name.starts_with(prefix))
        .map_or("-".to_string(), |p| {
            format!("{:.1}% / {}", p.cpu_percent, ns(cpu_ns_per_update(step, p)))
        })
}

/// Every process's CPU at each rung of a latency ladder (report.md): what the rung's
/// latency cost, waiting included.
fn ladder_cpu_table(md: &mut String, ladder: &[LatencyStep]) -> Result<()> {
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
fn node_ns_at_max(t: &Throughput) -> String {
    t.steps
        .iter()
        .find(|s| s.pass && s.target_rate == t.max_sustainable_updates_per_s)
        .map_or("-".to_string(), |s| ns(s.node_cpu_ns_per_update))
}

/// A per-update CPU time: "-" where there was none to measure.
fn ns(v: f64) -> String {
    if v > 0.0 {
        format!("{v:.0} ns")
    } else {
        "-".to_string()
    }
}

/// The node processes' wait for a CPU per run in a step (their total wait over their
/// total runs), where the kernel exposes it.
fn node_run_delay_us_per_run(step: &Step) -> Option<f64> {
    run_delay_us_per_run(
        step.processes
            .iter()
            .filter(|u| u.name.starts_with("node"))
            .map(|u| (u.run_delay_s, u.run_delay_us_per_run)),
    )
}

/// Total wait over total runs, from each process's (wait in s, wait per run in µs);
/// `None` if any process lacks the figures or nothing ran.
fn run_delay_us_per_run(
    processes: impl Iterator<Item = (Option<f64>, Option<f64>)>,
) -> Option<f64> {
    let (mut delay_us, mut runs) = (0.0, 0.0);
    for (total_s, per_run_us) in processes {
        let (total_us, per_run_us) = (total_s? * 1e6, per_run_us?);
        if per_run_us > 0.0 {
            delay_us += total_us;
            runs += total_us / per_run_us;
        }
    }
    (runs > 0.0).then(|| delay_us / runs)
}

fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1e3)
}

fn fmt_rate(r: f64) -> String {
    let s = format!("{:.0}", r);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The machine, with what waking an idle CPU costs here measured now, before any
/// process of the run starts (nothing else competes for the CPUs).
fn machine_with_wake_probe() -> Machine {
    let mut m = machine();
    match crate::wakeup::measure() {
        Ok(w) => m.wake_round_trip = Some(w),
        Err(e) => eprintln!("bench: warning: the wake-up probe failed: {e:#}"),
    }
    m
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

pub fn write_outputs(dir: &Path, r: &Results) -> Result<()> {
    std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(r)?)?;
    let mut md = String::new();
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
    if !r.throughput.is_empty() {
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
            steps_table(&mut md, &format!("Steps, cache {}", t.cache), &t.steps)?;
        }
    }
    if let Some(f) = &r.fanout {
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
        steps_table(&mut md, "Steps", &f.steps)?;
    }
    if !r.latency.is_empty() {
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
                us(l.mean_ns),
                us(l.stddev_ns),
                us(l.max_ns as f64),
                us(l.min_ns as f64),
                us(l.p50_ns as f64),
                us(l.p90_ns as f64),
                us(l.p99_ns as f64),
                us(l.p999_ns as f64),
                us(l.p9999_ns as f64),
                l.count,
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
        ladder_cpu_table(&mut md, &r.latency)?;
        writeln!(md, "![latency](latency.svg)\n")?;
    }
    if !r.instances.is_empty() {
        writeln!(md, "## Instances\n")?;
        writeln!(md, "| instances | pinned | per instance updates/s | aggregate updates/s |\n|---|---|---|---|")?;
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
    }
    if let Some(st) = &r.stall {
        stall_report(&mut md, st)?;
    }
    if let Some(b) = &r.backbone {
        backbone_scenario::report(&mut md, b)?;
    }
    if let Some(w) = &r.wait {
        wait_scenario::report(&mut md, w)?;
    }
    if !r.journal.is_empty() {
        journal_scenario::report(&mut md, &r.journal)?;
    }
    if let Some(c) = &r.journal_updates {
        journal_scenario::report_updates(&mut md, c)?;
    }
    if let Some(t) = &r.tree {
        tree_scenario::report(&mut md, t)?;
    }
    if let Some(p) = r.peers.as_ref().filter(|p| !p.nats.is_unset()) {
        peers_scenario::report(&mut md, p)?;
    }
    if !r.files.is_empty() {
        let (uftp, rsync) = r
            .peers
            .as_ref()
            .map_or((&[][..], &[][..]), |p| (&p.uftp[..], &p.rsync[..]));
        files_scenario::report(&mut md, &r.files, uftp, rsync)?;
        files_market_data::report(&mut md, &r.files_market_data)?;
    }
    if let Some(r) = &r.rssl {
        rssl_scenario::report(&mut md, r)?;
    }
    if let Some(w) = &r.websocket {
        writeln!(
            md,
            "## WebSocket subscriber\n\nOne tr_json2 connection watching {} items (one batch request), cache on: highest sustained rate **{} updates/s**.\n",
            w.items,
            fmt_rate(w.max_sustainable_updates_per_s as f64)
        )?;
        steps_table(&mut md, "WebSocket search", &w.steps)?;
        steps_table(&mut md, "WebSocket latency at fixed rates", &w.latency)?;
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
    }
    if let Some(m) = &r.memory {
        writeln!(md, "## Memory per connection and per stream\n")?;
        writeln!(
            md,
            "Node VmRSS after every image arrived and {:.0} s of updates at {}/s per item set (cache on).\n",
            m.settle_s, m.update_rate
        )?;
        writeln!(
            md,
            "| rig | connections | items each | streams | node RSS MiB | peak RSS MiB |"
        )?;
        writeln!(md, "|---|---|---|---|---|---|")?;
        for (name, g) in [
            ("small", &m.small),
            ("full", &m.full),
            ("narrow", &m.narrow),
        ] {
            writeln!(
                md,
                "| {name} | {} | {} | {} | {:.1} | {:.1} |",
                g.connections,
                g.items,
                g.streams,
                g.node_rss_bytes as f64 / 1048576.0,
                g.node_peak_rss_bytes as f64 / 1048576.0
            )?;
        }
        writeln!(
            md,
            "\nPer connection with its {} streams: {:.0} bytes; per stream: {:.0} bytes; per connection alone: {:.0} bytes.\n",
            m.items, m.per_connection_with_streams_bytes, m.per_stream_bytes, m.per_connection_bytes
        )?;
    }
    if !r.processes.is_empty() {
        writeln!(md, "## Processes per step\n")?;
        writeln!(md, "\"waited to run\": time the process was runnable but not running (woken and queued for a CPU, mostly behind another process), per run on a CPU.\n")?;
        writeln!(md, "| scenario | step | rate | process | CPU % | user s | sys s | peak RSS MiB | vol. cs | invol. cs | migrations | waited to run (µs per run) | syscalls |")?;
        writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")?;
        for p in &r.processes {
            let u = &p.usage;
            writeln!(
                md,
                "| {} | {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.1} | {} | {} | {} | {} | {} |",
                p.scenario,
                p.step,
                fmt_rate(p.rate as f64),
                u.name,
                u.cpu_percent,
                u.cpu_user_s,
                u.cpu_sys_s,
                u.peak_rss_bytes as f64 / 1048576.0,
                u.voluntary_ctx_switches,
                u.involuntary_ctx_switches,
                u.migrations.map_or("n/a".into(), |m| m.to_string()),
                u.run_delay_us_per_run
                    .map_or("n/a".into(), |w| format!("{w:.1}")),
                u.syscalls.map_or("n/a".into(), |m| m.to_string()),
            )?;
        }
        writeln!(md)?;
    }
    writeln!(md, "## Commands\n\n```")?;
    for c in &r.commands {
        writeln!(md, "{c}")?;
    }
    writeln!(md, "```")?;
    std::fs::write(dir.join("report.md"), md)?;
    plots(dir, r)?;
    Ok(())
}

fn stall_report(md: &mut String, st: &Stall) -> Result<()> {
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

fn steps_table(md: &mut String, title: &str, steps: &[Step]) -> Result<()> {
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

fn plots(dir: &Path, r: &Results) -> Result<()> {
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
        .with_series("mean", pts(&|l| l.mean_ns))
        .with_series("p50", pts(&|l| l.p50_ns as f64))
        .with_series("p90", pts(&|l| l.p90_ns as f64))
        .with_series("p99", pts(&|l| l.p99_ns as f64))
        .with_series("p99.9", pts(&|l| l.p999_ns as f64))
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
            let mut pts: Vec<(f64, f64)> = t
                .steps
                .iter()
                .map(|s| (s.target_rate as f64, s.delivered_per_s))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart = chart.with_series(format!("cache {}", t.cache), pts);
        }
        chart.save(dir.join("throughput.svg"))?;
    }
    if let Some(f) = &r.fanout {
        let mut pts: Vec<(f64, f64)> = f
            .steps
            .iter()
            .map(|s| (s.target_rate as f64, s.delivered_per_s))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
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

/// The healthy (and the stopped) subscribers' p99 per interval, with brackets over the
/// windows in which the subscriber and the node were stopped.
fn stall_plot(st: &Stall) -> LineChart {
    let pts = |f: &dyn Fn(&crate::stall::StallPoint) -> Option<u64>| -> Vec<(f64, f64)> {
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

/// Headline figures compared across runs.
fn headline(r: &Results) -> Vec<(String, Option<f64>, bool)> {
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
        at(100_000).map(|l| l.mean_ns / 1e3),
        false,
    ));
    v.push((
        "latency p99 at 100k/s (µs)".into(),
        at(100_000).map(|l| l.p99_ns as f64 / 1e3),
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
fn read_results(dir: &Path) -> Result<Results> {
    let path = dir.join("results.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a tickwire results file", path.display()))
}

/// This run's command line as a user would type it again (`tickwire-bench ...`, however
/// the program was reached).
fn lab_command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("tickwire-bench {}", args.join(" "))
}

pub fn compare(dirs: &[PathBuf], out: Option<&Path>) -> Result<()> {
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
    let rows: Vec<Vec<(String, Option<f64>, bool)>> = runs.iter().map(headline).collect();
    let mut md = String::new();
    writeln!(md, "# Tickwire bench comparison (base 100: {})\n", names[0])?;
    write!(md, "| metric |")?;
    for n in &names {
        write!(md, " {n} | index |")?;
    }
    writeln!(md)?;
    write!(md, "|---|")?;
    for _ in &names {
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
                chart_series[k].1.push(0.0);
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
    let out = out.unwrap_or(&dirs[0]);
    std::fs::create_dir_all(out)?;
    let mut chart = BarChart::new("Comparison, base 100", "index").with_reference(100.0);
    chart = chart.with_categories(categories);
    for (name, vals) in chart_series {
        chart = chart.with_series(name, vals);
    }
    chart.save(out.join("compare.svg"))?;
    writeln!(md, "\n![comparison](compare.svg)")?;
    std::fs::write(out.join("compare.md"), &md)?;
    print!("{md}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::run_delay_us_per_run;

    #[test]
    fn the_nodes_wait_per_run_is_weighted_by_their_runs() {
        // 1 ms over 100 runs (10 µs each) and 3 ms over 100 runs (30 µs each): 20 µs.
        let two = [(Some(0.001), Some(10.0)), (Some(0.003), Some(30.0))];
        assert_eq!(run_delay_us_per_run(two.into_iter()), Some(20.0));
        // A process without schedstat: no figure rather than a partial one.
        let partial = [(Some(0.001), Some(10.0)), (None, None)];
        assert_eq!(run_delay_us_per_run(partial.into_iter()), None);
        // Nothing ran, or no process: no figure.
        assert_eq!(run_delay_us_per_run([(Some(0.0), None)].into_iter()), None);
        assert_eq!(run_delay_us_per_run(std::iter::empty()), None);
    }
}
