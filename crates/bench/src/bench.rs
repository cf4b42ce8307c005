//! `tickwire bench SCENARIO --out DIR`: the classic market-data test procedures.
//!
//! Starts nodes and load tools as separate processes, finds the highest sustainable
//! rates (ramp, then bisection), climbs a latency ladder, and writes `DIR/results.json`,
//! `DIR/report.md` and SVG plots. docs/BENCHMARKS.md documents the procedure and schema.

use crate::lab::{self, find_max, hold, recover, round_rate, start_rig, Rig, RigSpec};
use crate::stall::StallPlan;
use crate::sysinfo::{machine, MonitorOptions, ProcessMonitor};
use anyhow::{bail, Context, Result};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tickwire_bench_report::report::write_outputs;
use tickwire_bench_report::schema::*;
use tickwire_bench_report::stats::{median, node_cpu_us_per_update, node_user_us_per_update};

mod args;
mod backbone_scenario;
mod child_cpu;
mod files_faults;
mod files_market_data;
mod files_rig;
mod files_scenario;
mod journal_scenario;
mod peers_scenario;
mod rssl_scenario;
mod tree_scenario;
mod two_nodes;
mod wait_scenario;

/// perf-pub's `--flush-every` in the latency ladders: at 100,000/s a burst of 100
/// updates written whole put about 100 µs of building into its first update's latency
/// (p50 250 µs against 120-150 µs with 8; with 1, a write per update, one run of two
/// had a p99 of 92 ms).
const LATENCY_FLUSH_EVERY: u64 = 8;

pub use args::*;

/// The scenarios of `tickwire-bench` (each a subcommand), `summary` and `compare`.
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
    /// KB and 635 KB files and one large file; fsync always and never at every node), and
    /// the same files with rsync and uftp: files/minute, MB/s, CPU seconds per GB and
    /// system calls per file (docs/FILES.md).
    Files(FilesArgs),
    /// The current table of a scenario from several runs of it: each headline figure's
    /// median, spread and number of runs, under the runs' commit, machine and command
    /// (markdown on standard output). With `--digest`, the digest docs/BENCHMARKS.md
    /// opens with, of several scenarios.
    Summary {
        /// Directories holding results.json, runs of one scenario; with `--digest`,
        /// scenario folders each holding its runs (`SCENARIO/run-N/results.json`).
        #[arg(required = true, value_name = "DIR")]
        dirs: Vec<PathBuf>,
        /// One digest of the scenarios DIR... in the order given: which runs, every
        /// figure that stands alone, every ladder's latency p99 a row a rate, the files
        /// a row a class (the tables of one scenario: `summary` of its runs).
        #[arg(long)]
        digest: bool,
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
            scrape_metrics: spec.scrape_metrics || self.args.limit.scrape_metrics,
            ..spec.clone()
        };
        start_rig(&self.programs, &spec, &self.logs)
    }

    fn seconds(&self) -> f64 {
        step_seconds(&self.args, self.quick)
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
            let spec = RigSpec::new(
                format!("throughput cache={cache}"),
                cache,
                self.args.watchlist.items,
            );
            let (secs, bisect) = (self.seconds(), self.bisections());
            let (max, steps) = self.search_one_rig("throughput", &spec, 250_000, secs, bisect)?;
            self.results.throughput.push(Throughput {
                cache: cache.into(),
                items: self.args.watchlist.items,
                max_sustainable_updates_per_s: max,
                limited_by: limit_reason(&steps, max),
                steps,
            });
        }
        Ok(())
    }

    /// [`find_max`] from `start` up to --max-rate, the steps of each rate tried told on
    /// the progress line as `describe` puts them.
    fn find_max_rate(
        &mut self,
        rigs: &mut [Rig],
        start: u64,
        bisect: u32,
        secs: f64,
        monitor: &ProcessMonitor,
        describe: impl Fn(&[Step]) -> String,
    ) -> Result<(u64, Vec<Vec<Step>>)> {
        let progress = &mut self.progress;
        let limit = self.args.limit.max_rate;
        find_max(rigs, start, limit, bisect, secs, monitor, &mut |s| {
            progress.line(&describe(s), 1.0)
        })
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
        let start = self.args.start.start_rate.unwrap_or(default_start);
        let (max, steps) = self.find_max_rate(&mut rigs, start, bisect, secs, &monitor, |s| {
            step_text(&s[0])
        })?;
        let steps: Vec<Step> = steps.into_iter().flatten().collect();
        self.record_processes(scenario, &steps);
        stop_rigs(rigs)?;
        Ok((max, steps))
    }

    fn fanout(&mut self) -> Result<()> {
        let conns = self.args.fanout.connections.max(1);
        let items = if self.quick {
            self.args.fanout.fanout_items.min(2_000)
        } else {
            self.args.fanout.fanout_items
        };
        let fanout = crate::perf_sub::Commonality::Producer5050.fanout(conns, items);
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
        let spec = RigSpec::new("latency cache=off", "off", self.args.watchlist.items);
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
        self.rates_or(&default)
    }

    /// The --rates, sorted; `default` without them.
    fn rates_or(&self, default: &[u64]) -> Vec<u64> {
        let mut rates = self
            .args
            .ladder
            .rates
            .clone()
            .unwrap_or_else(|| default.to_vec());
        rates.sort_unstable();
        rates
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
        let node_config = match self.args.ladder.node_wait.as_str() {
            "block" => spec.node_config.clone(),
            wait => Some(format!(
                "{}[node]\nwait = \"{wait}\"\n",
                spec.node_config.as_deref().unwrap_or("")
            )),
        };
        let spec = &RigSpec {
            flush_every: LATENCY_FLUSH_EVERY,
            spin_us: self.args.ladder.pub_spin_us,
            yield_after_write: self.args.ladder.pub_yield == "on",
            sub_wait: self.args.ladder.sub_wait.clone(),
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
                None if last > 0 && last * 2 <= self.args.limit.max_rate => last * 2,
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
            self.args.watchlist.items.min(10_000)
        } else {
            self.args.watchlist.items
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
            let start = self.args.start.start_rate.unwrap_or(100_000);
            let (max, steps) =
                self.find_max_rate(&mut rigs, start, bisect, secs, &monitor, |s| {
                    let agg: f64 = s.iter().map(|x| x.delivered_per_s).sum();
                    let ok = s.iter().all(|x| x.pass);
                    format!(
                        "{} instances {}: {} updates/s each, {:.0}/s aggregate: {}",
                        s.len(),
                        if pinned { "pinned" } else { "unpinned" },
                        s[0].target_rate,
                        agg,
                        if ok { "pass" } else { "FAIL" }
                    )
                })?;
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
        let items = self.args.ws.ws_items;
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
        let conns = self.args.ws.ws_connections.max(1);
        let items = self.args.ws.ws_fanout_items.max(1);
        let rate = self.args.ws.ws_fanout_rate;
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
            self.args.memory.memory_connections,
            self.args.memory.memory_items,
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
        let (rate, max, source) = match self.args.stall.stall_rate {
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
                        let spec = RigSpec::new(
                            "stall max search cache=on",
                            "on",
                            self.args.watchlist.items,
                        );
                        let secs = self.args.step.step_seconds.unwrap_or(2.0);
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
        let rate = rate.min(self.args.limit.max_rate);
        let phase = stall_phase_seconds(&self.args, self.quick);
        let plan = StallPlan {
            rate,
            items: self.args.stall.stall_items,
            subscribers: self.args.stall.stall_subscribers,
            settle_s: 1.0,
            baseline_s: phase,
            stall_s: self.args.stall.stall_seconds,
            after_s: phase,
            node_pause_ms: self.args.stall.node_pause_ms,
            pause_tail_s: 1.0,
            interval_ms: self.args.stall.stall_interval_ms,
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
    LatencyStep {
        rate,
        latency: s.latency,
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

/// How long each rate is held: `--step-seconds`, or 2 s in `quick` and 10 s elsewhere.
fn step_seconds(args: &BenchArgs, quick: bool) -> f64 {
    args.step
        .step_seconds
        .unwrap_or(if quick { 2.0 } else { 10.0 })
}

/// Each phase of the stall scenario: `--stall-phase-seconds`, or 2 s in `quick` and 3 s
/// elsewhere.
fn stall_phase_seconds(args: &BenchArgs, quick: bool) -> f64 {
    args.stall
        .stall_phase_seconds
        .unwrap_or(if quick { 2.0 } else { 3.0 })
}

/// When a rate counts as sustained (`results.json` `settings.pass_criteria`).
const PASS_CRITERIA: &str = "delivered >= 99.5% of offered x fan-out over the step, backlog (sent x fan-out - received) grown by at most 0.5% of that (or 1,000 updates), zero sequence gaps, no update conflated, no subscriber connection re-established, publisher within 1% of its schedule";

/// Runs a bench subcommand.
pub fn run(cmd: BenchCommand) -> Result<()> {
    let (name, mut args): (&str, BenchArgs) = match cmd {
        BenchCommand::Compare { dirs, out } => {
            print!(
                "{}",
                tickwire_bench_report::compare::compare(&dirs, out.as_deref())?
            );
            return Ok(());
        }
        BenchCommand::Summary { dirs, digest } => {
            use tickwire_bench_report::summary::{digest as digest_of, summary};
            let md = if digest {
                digest_of(&dirs)?
            } else {
                summary(&dirs)?
            };
            print!("{md}");
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
    let count_syscalls = args.limit.syscalls && crate::sysinfo::perf_can_count_syscalls();
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
            settings: Settings {
                items: args.watchlist.items,
                step_seconds: step_seconds(&args, quick),
                rates: args.ladder.rates.clone(),
                fanout_items: args.fanout.fanout_items,
                connections: args.fanout.connections,
                start_rate: args.start.start_rate,
                max_rate: args.limit.max_rate,
                ladder_pub_spin_us: args.ladder.pub_spin_us,
                ladder_pub_yield: args.ladder.pub_yield.clone(),
                ladder_node_wait: args.ladder.node_wait.clone(),
                ladder_sub_wait: args.ladder.sub_wait.clone(),
                syscalls_counted: count_syscalls,
                metrics_scraped_every_s: args.limit.scrape_metrics.then_some(1),
                stall_rate: args.stall.stall_rate,
                stall_items: args.stall.stall_items,
                stall_subscribers: args.stall.stall_subscribers,
                stall_seconds: args.stall.stall_seconds,
                node_pause_ms: args.stall.node_pause_ms,
                stall_phase_seconds: stall_phase_seconds(&args, quick),
                stall_interval_ms: args.stall.stall_interval_ms,
                memory_connections: args.memory.memory_connections,
                memory_items: args.memory.memory_items,
                ws_items: args.ws.ws_items,
                ws_connections: args.ws.ws_connections,
                ws_fanout_items: args.ws.ws_fanout_items,
                ws_fanout_rate: args.ws.ws_fanout_rate,
                backbone_driver: args.backbone.backbone_driver.clone(),
                backbone_idle: args.backbone.backbone_idle.clone(),
                backbone_max_park_us: args.backbone.backbone_max_park_us,
                backbone_mtu: args.backbone.backbone_mtu,
                backbone_auth: args.backbone.backbone_auth.clone(),
                journal_posts_only: args.journal.journal_posts_only,
                rssl_items: args.rssl.rssl_items,
                rssl_ticks: args.rssl.rssl_ticks,
                files_scale: args.files.files_scale,
                files_large_mb: args.files.files_large_mb,
                files_rate_mb: args.files.files_rate_mb,
                files_sites: args.files.files_sites.clone(),
                files_fsync: args.files.files_fsync.clone(),
                wait_strategies: args.wait.wait_strategies.clone(),
                pass_criteria: PASS_CRITERIA.into(),
            },
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

/// This run's command line as a user would type it again (`tickwire-bench ...`, however
/// the program was reached).
fn lab_command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("tickwire-bench {}", args.join(" "))
}
