//! `tickwire-bench`: Tickwire's performance lab, a program of its own so that the node's
//! program and its image ship without it. Its scenarios start nodes with the `tickwire`
//! program beside it (or `$TICKWIRE_BIN`) and its own load tools as separate processes.
//! `tickwire bench ARGS...` runs `tickwire-bench ARGS...`.

use clap::{Parser, Subcommand};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use tickwire_bench::bench::BenchCommand;
use tickwire_bench::{perf_nats_sub, perf_post, perf_pub, perf_sub, perf_ws_sub};

#[derive(Parser)]
#[command(
    name = "tickwire-bench",
    version,
    about = "Tickwire's performance lab: the classic market-data test procedures",
    long_about = "Tickwire's performance lab. A scenario (`tickwire-bench quick --out DIR`) \
starts nodes (the `tickwire` program beside this one, or $TICKWIRE_BIN) and the load tools \
below as separate processes, finds the highest sustainable rates and the latency at each, \
and writes DIR/results.json, DIR/report.md and SVG plots; `compare DIR...` compares runs. \
docs/BENCHMARKS.md holds the current figures and the procedure. `tickwire bench ...` is \
the same as `tickwire-bench ...`.\n\nLogging: TICKWIRE_LOG=error|warn|info|debug|trace|off \
(default info), to standard error."
)]
struct Cli {
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(Subcommand)]
enum LabCommand {
    #[command(flatten)]
    Scenario(BenchCommand),
    /// Load tool: the publisher (reference 74-byte updates on an exact schedule, latency
    /// timestamps in TIM_TRK_1).
    PerfPub(perf_pub::PerfPubArgs),
    /// Load tool: the subscriber (many connections, every field decoded, sequence gaps
    /// counted, latency histograms).
    PerfSub(perf_sub::PerfSubArgs),
    /// Load tool: a WebSocket subscriber (tr_json2 JSON, latency from TIM_TRK_1), driven
    /// by the `ws` scenario.
    PerfWsSub(perf_ws_sub::PerfWsSubArgs),
    /// Load tool: the subscriber of the NATS peer (the same decoding, sequence and
    /// latency checks as perf-sub), driven by the `peers` scenario.
    PerfNatsSub(perf_nats_sub::PerfNatsSubArgs),
    /// Load tool: the poster (posts kept in flight up to a window, Ack latency, the
    /// node's journal system calls per post), driven by the `journal` scenario.
    PerfPost(perf_post::PerfPostArgs),
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = stderr_log::init() {
        eprintln!("tickwire-bench: {e}");
        std::process::exit(2);
    }
    let result = match cli.command {
        LabCommand::Scenario(c) => tickwire_bench::bench::run(c),
        LabCommand::PerfPub(a) => perf_pub::run(a).map(|_| ()),
        LabCommand::PerfPost(a) => perf_post::run(a).map(|_| ()),
        LabCommand::PerfSub(a) => perf_sub::run(a, stop_on_signal()).map(|_| ()),
        LabCommand::PerfWsSub(a) => perf_ws_sub::run(a, stop_on_signal()),
        LabCommand::PerfNatsSub(a) => perf_nats_sub::run(a, stop_on_signal()),
    };
    if let Err(e) = result {
        eprintln!("tickwire-bench: {e:#}");
        std::process::exit(1);
    }
}

/// A flag SIGINT and SIGTERM raise: the subscribers print their summary and stop.
fn stop_on_signal() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(signal, stop.clone());
    }
    stop
}

/// The lab's log: `LEVEL target: message` lines on standard error, the level from
/// TICKWIRE_LOG as the node reads it. The lab logs little (its load tools' warnings),
/// so it needs neither timestamps nor the node's structured formats.
mod stderr_log {
    use log::{LevelFilter, Log, Metadata, Record};

    struct Stderr;

    impl Log for Stderr {
        fn enabled(&self, metadata: &Metadata) -> bool {
            metadata.level() <= log::max_level()
        }
        fn log(&self, record: &Record) {
            if self.enabled(record.metadata()) {
                eprintln!("{} {}: {}", record.level(), record.target(), record.args());
            }
        }
        fn flush(&self) {}
    }

    pub(crate) fn init() -> Result<(), String> {
        let level = match std::env::var("TICKWIRE_LOG").as_deref() {
            Err(_) | Ok("") => LevelFilter::Info,
            Ok(v) => v.parse::<LevelFilter>().map_err(|_| {
                format!("TICKWIRE_LOG={v:?} is not a log level: use error, warn, info, debug, trace or off")
            })?,
        };
        log::set_logger(&Stderr).map_err(|e| e.to_string())?;
        log::set_max_level(level);
        Ok(())
    }
}
