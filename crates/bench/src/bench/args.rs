//! The flags of `tickwire bench SCENARIO`: each scenario's `--help` shows only the
//! flags it reads.
//!
//! The flags are defined once, in small groups (`*Flags`); each scenario's args struct
//! (`ThroughputArgs`, ...) flattens `OutFlags` and the groups that scenario reads, and
//! `quick`, which runs the scenarios one after the other, flattens them all
//! (`AllFlags`). Every scenario's args become the `BenchArgs` the scenario code reads
//! (`--out` and every group); the groups a scenario does not take hold their clap
//! defaults there (parsed from an empty command line, so the defaults are written only
//! in the `#[arg]`s).

use std::path::PathBuf;

// The flag groups, in the order their flags appear in `bench quick --help`. Plain
// comments, not doc comments: clap would make a doc comment the command's about text.

// Every scenario.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub(crate) struct OutFlags {
    /// Directory for results.json, report.md, plots and process logs.
    #[arg(long, value_name = "DIR")]
    pub(crate) out: PathBuf,
}

// The watchlist of the single-node rigs (throughput, latency, instances, the stall
// scenario's max search, backbone, tree, journal's update cost).
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub(crate) struct ItemsFlags {
    /// Watchlist size for the throughput and latency scenarios.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub(crate) items: usize,
}

// How long each rate is held: every scenario that holds rates (all but memory).
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub(crate) struct StepFlags {
    /// Seconds each rate is held (the reference procedure holds 300).
    #[arg(long, value_name = "S")]
    pub(crate) step_seconds: Option<f64>,
}

// The latency ladder (latency, backbone, tree).
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub(crate) struct LadderFlags {
    /// Latency ladder (updates/s), e.g. 1000,10000,100000; then doubling to saturation.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub(crate) rates: Option<Vec<u64>>,
    /// Ladders: perf-pub spins over the last N µs before each burst instead of sleeping
    /// to it (perf-pub --spin-us), so that its own wake-up's lateness is not counted as
    /// latency; 0 sleeps all the way.
    #[arg(long, value_name = "US", default_value_t = 200)]
    pub(crate) pub_spin_us: u64,
    /// Ladders: perf-pub gives up its CPU after each write within a burst (perf-pub
    /// --yield-after-write), so that the node it woke, which the kernel often queues on
    /// perf-pub's own CPU, runs at once instead of after the rest of the burst.
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = ["on", "off"])]
    pub(crate) pub_yield: String,
    /// Ladders, and the rssl scenario's nodes: how the node's event loop waits for work
    /// (`[node] wait`: block, yield, spin, spin-then-block).
    #[arg(long, value_name = "STRATEGY", default_value = "block",
          value_parser = ["block", "yield", "spin", "spin-then-block"])]
    pub(crate) node_wait: String,
    /// Ladders: how perf-sub waits for data (perf-sub --wait: block, or spin, which keeps
    /// one CPU busy).
    #[arg(long, value_name = "STRATEGY", default_value = "block", value_parser = ["block", "spin"])]
    pub(crate) sub_wait: String,
}

// The fan-out rig (fanout; backbone and tree have a fan-out row too).
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub(crate) struct FanoutFlags {
    /// Items in the fan-out scenario.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub(crate) fanout_items: usize,
    /// Subscriber connections in the fan-out scenario.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub(crate) connections: usize,
}

// The first rate of every max search (ramp then bisection): all scenarios but latency
// (a ladder, no search) and memory.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub(crate) struct StartRateFlags {
    /// First rate of every search for a highest sustainable rate (ramp, then
    /// bisection). Default: 250,000 updates/s where one publisher feeds one subscriber,
    /// 10,000 for fan-out and WebSocket searches, 100,000 per instance.
    #[arg(long, value_name = "N")]
    pub(crate) start_rate: Option<u64>,
}

// The rate limit and the process monitor's system call count: every scenario that
// holds rates (all but memory).
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub(crate) struct LimitFlags {
    /// Highest rate tried (updates/s per instance).
    #[arg(long, value_name = "N", default_value_t = 16_000_000)]
    pub(crate) max_rate: u64,
    /// Count system calls with `perf` where the kernel allows it.
    #[arg(long)]
    pub(crate) syscalls: bool,
    /// `GET /metrics` on each rig's node once a second while it runs, as Prometheus
    /// watching it closely would (the node then also serves its HTTP port on
    /// 127.0.0.1): compare with a run without to see what being scraped costs.
    #[arg(long)]
    pub(crate) scrape_metrics: bool,
}

// The stall scenario.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub(crate) struct StallFlags {
    /// Stall scenario: the publisher's rate (default: 50% of the max sustainable rate
    /// with the cache on, from the throughput scenario in `quick`, else from a short
    /// search first).
    #[arg(long, value_name = "N")]
    pub(crate) stall_rate: Option<u64>,
    /// Stall scenario: items in the watchlist of every subscriber.
    #[arg(long, value_name = "N", default_value_t = 1_000)]
    pub(crate) stall_items: usize,
    /// Stall scenario: perf-sub processes (one connection each, every item); the first
    /// is stopped, the others are the healthy ones.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub(crate) stall_subscribers: usize,
    /// Stall scenario: seconds the subscriber is stopped.
    #[arg(long, value_name = "S", default_value_t = 3.0)]
    pub(crate) stall_seconds: f64,
    /// Stall scenario: milliseconds the node is stopped.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    pub(crate) node_pause_ms: u64,
    /// Stall scenario: seconds of the baseline and of each recovery phase (default 3;
    /// 2 in `quick`).
    #[arg(long, value_name = "S")]
    pub(crate) stall_phase_seconds: Option<f64>,
    /// Stall scenario: length of the latency time series' intervals.
    #[arg(long, value_name = "MS", default_value_t = 50)]
    pub(crate) stall_interval_ms: u64,
}

// The WebSocket scenario.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub(crate) struct WsFlags {
    /// WebSocket scenario: items the WebSocket subscriber watches (one batch request).
    #[arg(long, value_name = "N", default_value_t = 1_000)]
    pub(crate) ws_items: usize,
    /// WebSocket fan-out: connections, each watching every one of --ws-fanout-items.
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub(crate) ws_connections: usize,
    /// WebSocket fan-out: items each connection watches.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub(crate) ws_fanout_items: usize,
    /// WebSocket fan-out: the publisher's rate (updates/s in; out is this times the
    /// connections).
    #[arg(long, value_name = "N", default_value_t = 2_000)]
    pub(crate) ws_fanout_rate: u64,
}

// The backbone scenario, and the nodes of the files scenario's market data.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub(crate) struct BackboneFlags {
    /// Backbone scenario (and the files scenario's market data): which thread runs
    /// each node's Aeron driver and receiver (`[backbone] driver`: event-loop, thread).
    #[arg(long, value_name = "PLACEMENT", default_value = "event-loop",
          value_parser = ["event-loop", "thread"])]
    pub(crate) backbone_driver: String,
    /// Backbone scenario (and the files scenario's market data): how the threads
    /// running the nodes' Aeron drivers wait when idle (`[backbone] idle`: adaptive,
    /// block, yield, backoff, sleep, spin).
    #[arg(long, value_name = "STRATEGY", default_value = "adaptive")]
    pub(crate) backbone_idle: String,
    /// Backbone scenario (and the files scenario's market data): with
    /// `--backbone-idle backoff`, the longest sleep of an idle driver thread in µs
    /// (`[backbone] max_park_us`; default: the node's).
    #[arg(long, value_name = "US")]
    pub(crate) backbone_max_park_us: Option<u64>,
    /// Backbone scenario (and the files scenario's market data): the nodes' datagram
    /// payload in bytes (`[backbone] mtu`). The lab's loopback carries 64 KiB; 8192 is
    /// what a LAN with jumbo (9,000-byte) frames carries; 1408, the node's default,
    /// fits a 1,500-byte Ethernet frame.
    #[arg(long, value_name = "BYTES", default_value_t = 8192)]
    pub(crate) backbone_mtu: usize,
    /// Backbone scenario (and the files scenario's market data): whether the nodes'
    /// backbone is authenticated (`[backbone] key_file`, with a key made for the run in
    /// --out's logs): `on`, as a production backbone should be (a keyed BLAKE3 key, what
    /// `tickwire backbone keygen` writes), `hmac-sha256` (a key of the MAC that key
    /// files written before BLAKE3 use), or `off`, to see what the seals cost.
    #[arg(
        long,
        value_name = "on|hmac-sha256|off",
        default_value = "on",
        value_parser = ["on", "hmac-sha256", "off"]
    )]
    pub(crate) backbone_auth: String,
}

// The wait scenario.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub(crate) struct WaitFlags {
    /// Wait scenario: the idle strategies measured, one rig each, in this order
    /// (`[backbone] idle`): a step at rest, then the latency ladder (without --rates:
    /// 1000,10000,100000).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "block,adaptive,backoff,yield,spin"
    )]
    pub(crate) wait_strategies: Vec<String>,
}

// The memory scenario.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub(crate) struct MemoryFlags {
    /// Memory scenario: subscriber connections of the full rig.
    #[arg(long, value_name = "N", default_value_t = 1_000)]
    pub(crate) memory_connections: usize,
    /// Memory scenario: items each connection watches in the full rig.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub(crate) memory_items: usize,
}

// The journal scenario.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub(crate) struct JournalFlags {
    /// `bench journal`: posts only, without the search for what journaling every update
    /// costs the sustained rate.
    #[arg(long)]
    pub(crate) journal_posts_only: bool,
}

// The RSSL scenario: LSEG's own tools through Tickwire.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub(crate) struct RsslFlags {
    /// RSSL scenario: LSEG's Real-Time SDK tools (jars/, etc/ with the dictionaries and
    /// MsgData.xml, fetch-deps.sh and classpath.sh), laid out as
    /// ../shared/interop/rtsdk is.
    #[arg(long, value_name = "DIR", default_value = "../shared/interop/rtsdk")]
    pub(crate) rtsdk: PathBuf,
    /// RSSL scenario: where the tools' third-party jars are (fetched there with the
    /// SDK's fetch-deps.sh, which needs Maven, when missing).
    #[arg(long, value_name = "DIR", default_value = "target/rtsdk-lib")]
    pub(crate) rtsdk_lib: PathBuf,
    /// RSSL scenario: items ConsPerf requests and the providers publish.
    #[arg(long, value_name = "N", default_value_t = 1_000)]
    pub(crate) rssl_items: usize,
    /// RSSL scenario: the providers' ticks per second, each tick a burst of rate / ticks
    /// updates (default: 1,000, the tools' own, or the rate when lower). More ticks,
    /// smaller bursts: what a burst's length adds to the latency.
    #[arg(long, value_name = "N")]
    pub(crate) rssl_ticks: Option<u64>,
}

// The files scenario.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub(crate) struct FilesFlags {
    /// Files scenario: how many files of each class, as a multiple of 2,000 x 16 KB,
    /// 500 x 63 KB and 50 x 635 KB (the large file stays one).
    #[arg(long, value_name = "X", default_value_t = 1.0)]
    pub(crate) files_scale: f64,
    /// Files scenario: the large file's size, MB.
    #[arg(long, value_name = "MB", default_value_t = 200)]
    pub(crate) files_large_mb: u64,
    /// Files scenario: numbers of receiving sites (comma-separated).
    #[arg(
        long,
        value_name = "N,...",
        value_delimiter = ',',
        default_value = "1,4"
    )]
    pub(crate) files_sites: Vec<usize>,
    /// Files scenario: the files' share of the network at the source, MB/s
    /// (`[files] rate_mb_per_s`): above what the sites take, chunks are lost and sent
    /// again.
    #[arg(long, value_name = "MB", default_value_t = 200)]
    pub(crate) files_rate_mb: u64,
    /// Files scenario: the fsync policies of every node, its inbox and spool (always,
    /// never; comma-separated).
    #[arg(
        long,
        value_name = "POLICY,...",
        value_delimiter = ',',
        default_value = "always,never"
    )]
    pub(crate) files_fsync: Vec<String>,
}

// Every group but `OutFlags` (which has no default): `quick`'s flags, and with
// `Default` the clap defaults of every group.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub(crate) struct AllFlags {
    #[command(flatten)]
    pub(crate) watchlist: ItemsFlags,
    #[command(flatten)]
    pub(crate) step: StepFlags,
    #[command(flatten)]
    pub(crate) ladder: LadderFlags,
    #[command(flatten)]
    pub(crate) fanout: FanoutFlags,
    #[command(flatten)]
    pub(crate) start: StartRateFlags,
    #[command(flatten)]
    pub(crate) limit: LimitFlags,
    #[command(flatten)]
    pub(crate) stall: StallFlags,
    #[command(flatten)]
    pub(crate) ws: WsFlags,
    #[command(flatten)]
    pub(crate) backbone: BackboneFlags,
    #[command(flatten)]
    pub(crate) wait: WaitFlags,
    #[command(flatten)]
    pub(crate) memory: MemoryFlags,
    #[command(flatten)]
    pub(crate) journal: JournalFlags,
    #[command(flatten)]
    pub(crate) rssl: RsslFlags,
    #[command(flatten)]
    pub(crate) files: FilesFlags,
}

/// What clap makes of an empty command line for the flags of `T`: their defaults.
fn clap_defaults<T: clap::Args + clap::FromArgMatches>() -> T {
    let cmd = T::augment_args(clap::Command::new("defaults"));
    let matches = cmd
        .try_get_matches_from(["defaults"])
        .expect("a flag group without required flags parses an empty command line");
    T::from_arg_matches(&matches).expect("clap's defaults make the flag group")
}

impl Default for AllFlags {
    /// Every flag at its clap default.
    fn default() -> Self {
        clap_defaults()
    }
}

impl AllFlags {
    /// The `BenchArgs` of these flags and `--out`.
    pub(crate) fn with_out(self, out: OutFlags) -> BenchArgs {
        BenchArgs {
            out: out.out,
            flags: self,
        }
    }
}

/// Every scenario's settings, as the scenario code reads them (and `results.json`
/// records them): `--out` and every flag group, read through `Deref`
/// (`args.stall.stall_rate`); a group its scenario does not take holds its defaults.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BenchArgs {
    pub(crate) out: PathBuf,
    pub(crate) flags: AllFlags,
}

impl std::ops::Deref for BenchArgs {
    type Target = AllFlags;
    fn deref(&self) -> &AllFlags {
        &self.flags
    }
}

impl std::ops::DerefMut for BenchArgs {
    fn deref_mut(&mut self) -> &mut AllFlags {
        &mut self.flags
    }
}

/// A scenario's args struct: `--out` and the flag groups named (field: type, in the
/// order of `AllFlags`, which is the order of `--help`), and its `BenchArgs` with the
/// other groups at their defaults.
macro_rules! scenario_args {
    ($($name:ident { $($group:ident: $ty:ty),* $(,)? })*) => {$(
        /// A scenario's flags: `--out` and the flag groups that scenario reads; its
        /// `BenchArgs` holds the other groups at their defaults.
        #[derive(clap::Args, Debug, Clone, PartialEq)]
        pub struct $name {
            #[command(flatten)]
            pub(crate) out: OutFlags,
            $(
                #[command(flatten)]
                pub(crate) $group: $ty,
            )*
        }

        impl From<$name> for BenchArgs {
            fn from(a: $name) -> Self {
                AllFlags {
                    $($group: a.$group,)*
                    ..AllFlags::default()
                }
                .with_out(a.out)
            }
        }
    )*};
}

// Which flags each scenario reads (`self.args.*` in bench.rs and bench/*.rs, and what
// the helpers it calls read: `seconds()` reads --step-seconds; `search_one_rig` reads
// --start-rate and --max-rate; `latency_ladder` --max-rate; `ladder()` --rates; the
// process monitor --syscalls).
scenario_args! {
    ThroughputArgs {
        watchlist: ItemsFlags,
        step: StepFlags,
        start: StartRateFlags,
        limit: LimitFlags,
    }
    FanoutArgs {
        step: StepFlags,
        fanout: FanoutFlags,
        start: StartRateFlags,
        limit: LimitFlags,
    }
    LatencyArgs {
        watchlist: ItemsFlags,
        step: StepFlags,
        ladder: LadderFlags,
        limit: LimitFlags,
    }
    InstancesArgs {
        watchlist: ItemsFlags,
        step: StepFlags,
        start: StartRateFlags,
        limit: LimitFlags,
    }
    // The throughput, fan-out (no row in `quick`) and latency procedures across the
    // backbone.
    BackboneArgs {
        watchlist: ItemsFlags,
        step: StepFlags,
        ladder: LadderFlags,
        fanout: FanoutFlags,
        start: StartRateFlags,
        limit: LimitFlags,
        backbone: BackboneFlags,
    }
    // The backbone's latency ladder once per idle strategy (--items at most 10,000;
    // --max-rate is the highest rung).
    WaitArgs {
        watchlist: ItemsFlags,
        step: StepFlags,
        ladder: LadderFlags,
        limit: LimitFlags,
        backbone: BackboneFlags,
        wait: WaitFlags,
    }
    // The same through two nodes.
    TreeArgs {
        watchlist: ItemsFlags,
        step: StepFlags,
        ladder: LadderFlags,
        fanout: FanoutFlags,
        start: StartRateFlags,
        limit: LimitFlags,
    }
    // Tickwire (cache off) and NATS: a max search and the latency ladder each.
    PeersArgs {
        watchlist: ItemsFlags,
        step: StepFlags,
        ladder: LadderFlags,
        start: StartRateFlags,
        limit: LimitFlags,
    }
    // Posts; then, unless --journal-posts-only, a max search with and without the
    // journal on a throughput rig (--items at most 10,000).
    JournalArgs {
        watchlist: ItemsFlags,
        step: StepFlags,
        start: StartRateFlags,
        limit: LimitFlags,
        journal: JournalFlags,
    }
    // Without --stall-rate, a short max search on a throughput rig (--items,
    // --step-seconds, --start-rate); the rate is capped at --max-rate.
    StallArgs {
        watchlist: ItemsFlags,
        step: StepFlags,
        start: StartRateFlags,
        limit: LimitFlags,
        stall: StallFlags,
    }
    // A max search of one WebSocket subscriber (its items: --ws-items), then fixed
    // rates.
    WsArgs {
        step: StepFlags,
        start: StartRateFlags,
        limit: LimitFlags,
        ws: WsFlags,
    }
    // Fresh rigs at a fixed rate, no search, no process monitor.
    MemoryArgs {
        memory: MemoryFlags,
    }
    // LSEG's perf tools directly and through a node at the --rates ladder (then
    // doubling while ConsPerf keeps up directly), and the native path's ladder beside.
    RsslArgs {
        step: StepFlags,
        ladder: LadderFlags,
        rssl: RsslFlags,
    }
    // Files to 1 and 4 sites, beside rsync and uftp; then market data's latency held
    // --step-seconds (default 10) without and beside files.
    FilesArgs {
        step: StepFlags,
        backbone: BackboneFlags,
        files: FilesFlags,
    }
}

/// `bench quick`: every flag (it runs every scenario but memory; the memory flags stay
/// so that `quick --help` lists every flag of `bench`).
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct QuickArgs {
    #[command(flatten)]
    pub(crate) out: OutFlags,
    #[command(flatten)]
    pub(crate) all: AllFlags,
}

impl From<QuickArgs> for BenchArgs {
    fn from(a: QuickArgs) -> Self {
        a.all.with_out(a.out)
    }
}

#[cfg(test)]
mod tests {
    use super::super::BenchCommand;
    use super::*;
    use clap::{CommandFactory, Parser};
    use std::collections::BTreeSet;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        bench: BenchCommand,
    }

    const SCENARIOS: [&str; 15] = [
        "throughput",
        "fanout",
        "latency",
        "instances",
        "quick",
        "backbone",
        "tree",
        "wait",
        "peers",
        "journal",
        "stall",
        "ws",
        "memory",
        "rssl",
        "files",
    ];

    /// The long flags of `scenario`, without clap's --help.
    fn flags(scenario: &str) -> BTreeSet<String> {
        let cmd = Cli::command();
        let sub = cmd
            .find_subcommand(scenario)
            .unwrap_or_else(|| panic!("no `bench {scenario}`"));
        sub.get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long())
            .filter(|l| *l != "help")
            .map(|l| format!("--{l}"))
            .collect()
    }

    fn parse(args: &[&str]) -> BenchArgs {
        let cli = Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        match cli.bench {
            BenchCommand::Throughput(a) => a.into(),
            BenchCommand::Fanout(a) => a.into(),
            BenchCommand::Latency(a) => a.into(),
            BenchCommand::Instances(a) => a.into(),
            BenchCommand::Quick(a) => (*a).into(),
            BenchCommand::Backbone(a) => a.into(),
            BenchCommand::Tree(a) => a.into(),
            BenchCommand::Wait(a) => a.into(),
            BenchCommand::Peers(a) => a.into(),
            BenchCommand::Journal(a) => a.into(),
            BenchCommand::Stall(a) => a.into(),
            BenchCommand::Ws(a) => a.into(),
            BenchCommand::Memory(a) => a.into(),
            BenchCommand::Rssl(a) => a.into(),
            BenchCommand::Files(a) => a.into(),
            BenchCommand::Compare { .. } | BenchCommand::Summary { .. } => {
                panic!("compare and summary have no BenchArgs")
            }
        }
    }

    #[test]
    fn the_command_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn each_scenario_shows_only_its_flags() {
        let stall = flags("stall");
        assert!(stall.contains("--stall-rate"), "{stall:?}");
        assert!(stall.contains("--node-pause-ms"), "{stall:?}");
        assert!(!stall.contains("--ws-items"), "{stall:?}");
        assert!(!stall.contains("--memory-connections"), "{stall:?}");

        let memory = flags("memory");
        assert!(memory.contains("--memory-connections"), "{memory:?}");
        assert!(!memory.contains("--rates"), "{memory:?}");
        assert!(!memory.contains("--step-seconds"), "{memory:?}");

        let ws = flags("ws");
        assert!(ws.contains("--ws-fanout-rate"), "{ws:?}");
        assert!(ws.contains("--start-rate"), "{ws:?}");
        assert!(!ws.contains("--stall-rate"), "{ws:?}");

        assert!(flags("backbone").contains("--backbone-idle"));
        assert!(!flags("tree").contains("--backbone-idle"));
        assert!(flags("wait").contains("--wait-strategies"));
        assert!(flags("wait").contains("--backbone-driver"));
        assert!(!flags("backbone").contains("--wait-strategies"));
        assert!(flags("journal").contains("--journal-posts-only"));
        assert!(!flags("throughput").contains("--rates"));
        assert!(!flags("latency").contains("--start-rate"));
    }

    #[test]
    fn quick_has_every_flag_and_every_scenario_has_out() {
        let quick = flags("quick");
        for s in SCENARIOS {
            let f = flags(s);
            assert!(f.contains("--out"), "bench {s}: {f:?}");
            assert!(
                f.is_subset(&quick),
                "bench {s} has flags quick lacks: {f:?}"
            );
        }
        // Every field of BenchArgs's groups is a flag of quick.
        let all = [
            "--out",
            "--items",
            "--step-seconds",
            "--rates",
            "--pub-spin-us",
            "--pub-yield",
            "--node-wait",
            "--sub-wait",
            "--fanout-items",
            "--connections",
            "--start-rate",
            "--max-rate",
            "--syscalls",
            "--scrape-metrics",
            "--stall-rate",
            "--stall-items",
            "--stall-subscribers",
            "--stall-seconds",
            "--node-pause-ms",
            "--stall-phase-seconds",
            "--stall-interval-ms",
            "--ws-items",
            "--ws-connections",
            "--ws-fanout-items",
            "--ws-fanout-rate",
            "--backbone-driver",
            "--backbone-idle",
            "--backbone-max-park-us",
            "--backbone-mtu",
            "--backbone-auth",
            "--wait-strategies",
            "--memory-connections",
            "--memory-items",
            "--journal-posts-only",
            "--rtsdk",
            "--rtsdk-lib",
            "--rssl-items",
            "--rssl-ticks",
            "--files-scale",
            "--files-large-mb",
            "--files-rate-mb",
            "--files-sites",
            "--files-fsync",
        ];
        let want: BTreeSet<String> = all.iter().map(|s| s.to_string()).collect();
        assert_eq!(quick, want);
    }

    #[test]
    fn defaults_are_claps() {
        let d = AllFlags::default().with_out(OutFlags {
            out: PathBuf::from("d"),
        });
        let flags = AllFlags {
            watchlist: ItemsFlags { items: 100_000 },
            step: StepFlags { step_seconds: None },
            ladder: LadderFlags {
                rates: None,
                pub_spin_us: 200,
                pub_yield: "on".into(),
                node_wait: "block".into(),
                sub_wait: "block".into(),
            },
            fanout: FanoutFlags {
                fanout_items: 10_000,
                connections: 100,
            },
            start: StartRateFlags { start_rate: None },
            limit: LimitFlags {
                max_rate: 16_000_000,
                syscalls: false,
                scrape_metrics: false,
            },
            stall: StallFlags {
                stall_rate: None,
                stall_items: 1_000,
                stall_subscribers: 4,
                stall_seconds: 3.0,
                node_pause_ms: 500,
                stall_phase_seconds: None,
                stall_interval_ms: 50,
            },
            ws: WsFlags {
                ws_items: 1_000,
                ws_connections: 50,
                ws_fanout_items: 100,
                ws_fanout_rate: 2_000,
            },
            backbone: BackboneFlags {
                backbone_driver: "event-loop".into(),
                backbone_idle: "adaptive".into(),
                backbone_max_park_us: None,
                backbone_mtu: 8192,
                backbone_auth: "on".into(),
            },
            wait: WaitFlags {
                wait_strategies: ["block", "adaptive", "backoff", "yield", "spin"]
                    .map(String::from)
                    .to_vec(),
            },
            memory: MemoryFlags {
                memory_connections: 1_000,
                memory_items: 100,
            },
            journal: JournalFlags {
                journal_posts_only: false,
            },
            rssl: RsslFlags {
                rtsdk: PathBuf::from("../shared/interop/rtsdk"),
                rtsdk_lib: PathBuf::from("target/rtsdk-lib"),
                rssl_items: 1_000,
                rssl_ticks: None,
            },
            files: FilesFlags {
                files_scale: 1.0,
                files_large_mb: 200,
                files_rate_mb: 200,
                files_sites: vec![1, 4],
                files_fsync: vec!["always".into(), "never".into()],
            },
        };
        let want = BenchArgs {
            out: PathBuf::from("d"),
            flags,
        };
        assert_eq!(d, want);
        // Every scenario with only --out: all defaults.
        for s in SCENARIOS {
            assert_eq!(parse(&[s, "--out", "d"]), want, "bench {s}");
        }
    }

    #[test]
    fn stall_flags_reach_bench_args_and_the_rest_are_defaults() {
        let defaults = parse(&["quick", "--out", "d"]);
        assert_eq!(parse(&["stall", "--out", "d"]), defaults);

        let got = parse(&[
            "stall",
            "--out",
            "d",
            "--stall-rate",
            "5000",
            "--stall-seconds",
            "1.5",
            "--node-pause-ms",
            "200",
            "--items",
            "500",
        ]);
        let mut want = defaults.clone();
        want.stall.stall_rate = Some(5_000);
        want.stall.stall_seconds = 1.5;
        want.stall.node_pause_ms = 200;
        want.watchlist.items = 500;
        assert_eq!(got, want);

        // A flag of another scenario is refused.
        assert!(Cli::try_parse_from(["bench", "stall", "--out", "d", "--ws-items", "5"]).is_err());
        assert!(Cli::try_parse_from(["bench", "memory", "--out", "d", "--rates", "1"]).is_err());
    }

    #[test]
    fn quick_takes_every_flag() {
        let got = parse(&[
            "quick",
            "--out",
            "q",
            "--rates",
            "1000,2000",
            "--ws-items",
            "7",
            "--memory-items",
            "20",
            "--backbone-idle",
            "spin",
            "--backbone-driver",
            "thread",
            "--backbone-mtu",
            "1408",
            "--journal-posts-only",
            "--syscalls",
        ]);
        assert_eq!(got.out, PathBuf::from("q"));
        assert_eq!(got.ladder.rates, Some(vec![1_000, 2_000]));
        assert_eq!(got.ws.ws_items, 7);
        assert_eq!(got.memory.memory_items, 20);
        assert_eq!(got.backbone.backbone_idle, "spin");
        assert_eq!(got.backbone.backbone_driver, "thread");
        assert_eq!(got.backbone.backbone_mtu, 1408);
        assert!(got.journal.journal_posts_only && got.limit.syscalls);
    }
}
