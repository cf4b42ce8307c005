//! The flags the load tools share. perf-pub, perf-sub and perf-nats-sub take the same
//! `--service`, `--items`, `--duration`, `--cpus` and `--json` (names, defaults and
//! meaning), so they are defined once here and flattened into each tool's flags.

/// The items a load tool publishes or subscribes to.
#[derive(clap::Args, Clone, Debug)]
pub struct FeedFlags {
    /// Service of the items (for NATS: subjects SERVICE.SYM0 .. SERVICE.SYM{N-1}).
    #[arg(long, value_name = "NAME", default_value = "FEED")]
    pub service: String,
    /// Items SYM0 .. SYM{N-1}.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub items: usize,
}

/// How long a load tool runs, on which CPUs, and how it reports.
#[derive(clap::Args, Clone, Debug)]
pub struct RunFlags {
    /// Seconds to run (perf-pub: of updates, after the images).
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    pub duration: f64,
    /// Pin to these CPUs, e.g. `0` or `0,1`.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub cpus: Vec<usize>,
    /// Print JSON lines (one per second, then a summary) instead of text.
    #[arg(long)]
    pub json: bool,
}
