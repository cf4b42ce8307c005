//! `tickwire`: the single binary. Thin subcommands over the library crates.

mod backbone;
mod demo;
mod feed;
mod files;
mod health;
mod journal;
mod json;
mod json_log;
mod lab;
mod logger;
mod node_args;
mod post;
mod publish;
mod replay;
mod stdout;
mod subscribe;
mod users;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use tickwire_node::{CacheMode, NodeConfig, NodeServer};

/// How long a node may take to stop after SIGTERM or SIGINT before it is ended.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

#[derive(Parser)]
#[command(
    name = "tickwire",
    version,
    about = "Tickwire: real-time market data distribution",
    long_about = "Tickwire distributes real-time market data: publishers push images and \
updates of items, a node keeps the last value of every item and fans updates out to every \
subscriber.\n\nStart with `tickwire demo`. Logging: TICKWIRE_LOG=error|warn|info|debug|trace|off \
(default info), to standard error, as text or (--log-format json) one JSON object per line."
)]
struct Cli {
    /// Log lines as text (date, time, level, source, message) or as one JSON object per
    /// line (for log shippers). The level: TICKWIRE_LOG.
    #[arg(long, value_name = "text|json", default_value = "text", global = true)]
    log_format: logger::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node: accept publishers and subscribers, cache and fan out their data.
    Node(NodeArgs),
    /// Publish a synthetic random-walk quote feed to a node.
    Publish(publish::PublishArgs),
    /// Subscribe to items and print every refresh, update and status.
    Subscribe(subscribe::SubscribeArgs),
    /// Post (contribute) values to an item and print the answer: exit status 0 when the
    /// publisher accepted it, 1 when it was refused (the reason is printed).
    Post(post::PostArgs),
    /// An item's history from the node's journal from a sequence number or a time, then
    /// its live messages with no gap and no repeat, printed as `subscribe` prints them.
    Replay(replay::ReplayArgs),
    /// A source node fed by a synthetic feed, two edge nodes on a backbone and a live
    /// quote board, in one process (--single: one node, no backbone).
    Demo(demo::DemoArgs),
    /// The performance lab: `tickwire bench SCENARIO --out DIR` runs `tickwire-bench
    /// SCENARIO --out DIR`, the lab's own program (nodes and load tools as separate
    /// processes; results.json, report.md and SVG plots). `tickwire bench --help` lists
    /// the scenarios.
    Bench(lab::LabArgs),
    /// The lab's load tools kept under their old names: `tickwire perf-pub ...` runs
    /// `tickwire-bench perf-pub ...` (likewise perf-sub, perf-ws-sub, perf-nats-sub,
    /// perf-post).
    #[command(hide = true)]
    PerfPub(lab::LabArgs),
    #[command(hide = true)]
    PerfSub(lab::LabArgs),
    #[command(hide = true)]
    PerfWsSub(lab::LabArgs),
    #[command(hide = true)]
    PerfNatsSub(lab::LabArgs),
    #[command(hide = true)]
    PerfPost(lab::LabArgs),
    /// Users file helpers: `users hash` prints the hash line for a password or token
    /// read from standard input.
    #[command(subcommand)]
    Users(users::UsersCommand),
    /// The node's journal of posts: `journal inspect DIR` prints its records.
    #[command(subcommand)]
    Journal(journal::JournalCommand),
    /// Backbone helpers: `backbone keygen > FILE` writes a new key file for
    /// `[backbone] key_file` (an authenticated backbone).
    #[command(subcommand)]
    Backbone(backbone::BackboneCommand),
    /// Files through the nodes: `files send` queues files at a node for its sites,
    /// `files status` prints who has what (docs/FILES.md).
    #[command(subcommand)]
    Files(files::FilesCommand),
    /// Ask a node on its HTTP port whether it is alive (GET /healthz) or, with --ready,
    /// ready (GET /readyz); prints the answer, exit status 0 when it was 200 OK, else 1
    /// (a container's HEALTHCHECK).
    ///
    /// Give the port with --ws ADDR or --config FILE; there is no default. A node
    /// serves /healthz and /readyz only on its WebSocket/HTTP port (`tickwire node --ws
    /// ADDR`, websocket.listen), which it has only when configured.
    Health(health::HealthArgs),
}

#[derive(clap::Args)]
struct NodeArgs {
    /// Address to listen on for publishers and subscribers: IP:PORT or HOST:PORT (port 0
    /// picks a free port). Default 127.0.0.1:14002, or node.listen from the config file.
    #[arg(long, value_name = "ADDR", value_parser = tickwire_node::config::resolve_listen)]
    listen: Option<std::net::SocketAddr>,
    /// Last-value cache: `on` serves new subscribers from the cache; `off` passes updates
    /// through and forwards every request to the publisher for its image.
    #[arg(long, value_name = "on|off")]
    cache: Option<CacheMode>,
    /// TOML configuration file (every key is documented in docs/OPERATIONS.md). Flags
    /// override the file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Name announced to peers.
    #[arg(long)]
    name: Option<String>,
    /// Maximum simultaneous connections.
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Heartbeat interval in milliseconds (a peer silent for 3 intervals is dropped).
    #[arg(long, value_name = "MS")]
    heartbeat_ms: Option<u64>,
    /// How the event loop waits for work: block (default; no CPU when idle), yield,
    /// spin (lowest latency, one CPU always busy), spin-then-block.
    #[arg(long, value_name = "STRATEGY")]
    wait: Option<tickwire_node::WaitStrategy>,
    /// Pin the event loop to these CPUs, e.g. `0` or `0,1`.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    cpus: Option<Vec<usize>>,
    /// What to do with subscribers that fall behind: `conflate` (default: merge their
    /// pending updates per item) or `disconnect` (closed-recover past the output bound).
    /// Overrides slow_consumer.policy; a subscriber may ask for its own at login.
    #[arg(long, value_name = "POLICY")]
    slow_consumer: Option<tickwire_node::SlowPolicy>,
    /// Serve the WebSocket JSON API (tr_json2) at ws://ADDR/WebSocket, e.g.
    /// 127.0.0.1:15000 (port 0 picks a free port). Overrides websocket.listen.
    #[arg(long, value_name = "ADDR")]
    ws: Option<String>,
    /// Where LSEG Real-Time SDK applications (ETA, EMA, the perf tools) connect over
    /// RSSL: by default the node's own port (--listen; each connection is told apart
    /// by its first bytes), `off` for none, or an address of its own, e.g.
    /// 127.0.0.1:14003. Overrides rssl.listen.
    #[arg(long, value_name = "ADDR|off")]
    rssl: Option<String>,
    /// Connect to an interactive RSSL provider (ProvPerf, the ETA Provider) at
    /// HOST:PORT as a consumer and serve its services; repeat for several. Adds to
    /// [[rssl.providers]].
    #[arg(long, value_name = "HOST:PORT")]
    rssl_provider: Vec<String>,
    /// Join a backbone on this Aeron channel, e.g.
    /// `aeron:udp?endpoint=239.20.30.40:40456|interface=127.0.0.1` (multicast on
    /// loopback). Overrides backbone.channel; needs --role (or backbone.role).
    #[arg(long, value_name = "CHANNEL")]
    backbone: Option<String>,
    /// The node's part in the backbone: `source` (its publishers' services go on the
    /// backbone), `edge` (its subscribers are served from the backbone) or `both`.
    #[arg(long, value_name = "source|edge|both")]
    role: Option<String>,
    /// Feed this node from other nodes over TCP: their services become this node's,
    /// each item asked for upstream once however many local subscribers want it. The
    /// link moves to the next node in the list when one cannot be reached. Overrides
    /// upstream.nodes (user and password file: upstream.user, upstream.password_file).
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT...]", value_delimiter = ',')]
    upstream: Option<Vec<String>>,
    /// Services whose publishers are sent subscribers' posts (contributions); `*` for
    /// every service. Overrides posts.services (default: none, every post refused).
    #[arg(long, value_name = "SERVICE[,SERVICE...]", value_delimiter = ',')]
    posts: Option<Vec<String>>,
    /// Print the effective configuration (file + flags) as TOML and exit.
    #[arg(long)]
    print_config: bool,
}

fn node_config(args: &NodeArgs) -> Result<NodeConfig> {
    let mut cfg = match &args.config {
        // Checked once the flags are applied: a flag overrides a file's value, and a
        // file may leave a key to a flag (a channel in the file, --role per host).
        Some(path) => NodeConfig::read(path)?,
        None => NodeConfig::default(),
    };
    if let Some(l) = args.listen {
        cfg.node.listen = l;
    }
    if let Some(c) = args.cache {
        cfg.node.cache = c;
    }
    if let Some(n) = &args.name {
        cfg.node.name = n.clone();
    }
    if let Some(n) = args.max_connections {
        cfg.limits.max_connections = n;
    }
    if let Some(ms) = args.heartbeat_ms {
        cfg.limits.heartbeat_ms = ms;
    }
    if let Some(w) = args.wait {
        cfg.node.wait = w;
    }
    if let Some(cpus) = &args.cpus {
        cfg.node.cpus = cpus.clone();
    }
    if let Some(p) = args.slow_consumer {
        cfg.slow_consumer.policy = p;
    }
    if let Some(ws) = &args.ws {
        cfg.websocket.listen = ws.clone();
    }
    if let Some(rssl) = &args.rssl {
        cfg.rssl.listen = rssl.clone();
    }
    for address in &args.rssl_provider {
        cfg.rssl
            .providers
            .push(tickwire_node::config::RsslProviderSection {
                address: address.clone(),
                ..Default::default()
            });
    }
    if let Some(ch) = &args.backbone {
        cfg.backbone.channel = ch.clone();
    }
    if let Some(r) = &args.role {
        cfg.backbone.role = r.clone();
    }
    if let Some(u) = &args.upstream {
        cfg.upstream.nodes = u.clone();
    }
    if let Some(p) = &args.posts {
        cfg.posts.services = p.clone();
    }
    if !cfg.backbone.channel.is_empty() && cfg.backbone.role.is_empty() {
        anyhow::bail!(
            "--backbone needs --role source|edge|both (or backbone.role in the config file)"
        );
    }
    cfg.validate()
        .map_err(|e| anyhow::anyhow!(with_flag(e, args.config.as_deref())))?;
    Ok(cfg)
}

/// A config error, naming the config file, if any, and the flag that sets the key too
/// (a flag's value is checked against the key it overrides).
fn with_flag(e: tickwire_node::ConfigError, file: Option<&std::path::Path>) -> String {
    let flag = match &e {
        tickwire_node::ConfigError::Invalid { key, .. } => match *key {
            "limits.heartbeat_ms" => Some("--heartbeat-ms"),
            "limits.max_connections" => Some("--max-connections"),
            "node.listen" => Some("--listen"),
            "node.cache" => Some("--cache"),
            "node.cpus" => Some("--cpus"),
            "node.name" => Some("--name"),
            "node.wait" => Some("--wait"),
            "slow_consumer.policy" => Some("--slow-consumer"),
            "websocket.listen" => Some("--ws"),
            "rssl.listen" => Some("--rssl"),
            "backbone.channel" => Some("--backbone"),
            "backbone.role" => Some("--role"),
            "upstream.nodes" => Some("--upstream"),
            _ => None,
        },
        _ => None,
    };
    let whence = match file {
        Some(path) => format!("config file {}", path.display()),
        None => "invalid node settings".into(),
    };
    match flag {
        Some(f) => format!("{whence}: {e} (set by {f} or in the config file)"),
        None => format!("{whence}: {e}"),
    }
}

fn run_node(args: NodeArgs) -> Result<()> {
    let cfg = node_config(&args)?;
    if args.print_config {
        stdout::text(&cfg.to_toml())?;
        return Ok(());
    }
    let cache = cfg.node.cache;
    let server = NodeServer::bind(cfg)?;
    let handle = server.shutdown_handle();
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ])
    .context("cannot install signal handlers")?;
    std::thread::spawn(move || {
        for sig in signals.forever() {
            if sig == signal_hook::consts::SIGHUP {
                log::info!("SIGHUP received: reloading the users file");
                handle.reload();
                continue;
            }
            log::info!("signal {sig} received");
            handle.shutdown();
            break;
        }
        // A node that does not stop (a thread stuck in a library) is still stopped:
        // at a second signal, or after STOP_GRACE. Nothing acknowledged is lost: the
        // journal keeps what it acknowledged through a crash.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            if signals.forever().any(|s| s != signal_hook::consts::SIGHUP) {
                let _ = tx.send("a second signal");
            }
        });
        let why = rx
            .recv_timeout(STOP_GRACE)
            .unwrap_or("the node did not stop in time");
        log::error!(
            "{why}: exiting now, without a clean stop (a stop takes at most {} s)",
            STOP_GRACE.as_secs()
        );
        // SAFETY: _exit(2) ends the process at once; no handler of ours runs after it.
        unsafe { libc::_exit(1) };
    });
    let tls = server.tls();
    log::info!(
        "tickwire node listening on {} (cache {}{})",
        server.local_addr(),
        if cache == CacheMode::On { "on" } else { "off" },
        if tls { ", TLS only" } else { "" }
    );
    if let Some(ws) = server.ws_addr() {
        if tls {
            log::info!(
                "WebSocket API on wss://{ws}/WebSocket (tr_json2), dashboard https://{ws}/, metrics https://{ws}/metrics"
            );
        } else {
            log::info!(
                "WebSocket API on ws://{ws}/WebSocket (tr_json2), dashboard http://{ws}/, metrics http://{ws}/metrics"
            );
        }
    }
    server.run()?;
    Ok(())
}

fn main() {
    let cli = Cli::parse();
    let log_format = cli.log_format;
    if let Err(e) = logger::init(log_format) {
        logger::fatal(log_format, &e);
        std::process::exit(2);
    }
    let result = match cli.command {
        Command::Node(a) => run_node(a),
        Command::Publish(a) => publish::run(a),
        Command::Subscribe(a) => subscribe::run(a),
        Command::Post(a) => post::run(a),
        Command::Replay(a) => replay::run(a),
        Command::Demo(a) => demo::run(a),
        Command::Bench(a) => lab::exec(None, a),
        Command::Users(c) => users::run(c),
        Command::Journal(c) => journal::run(c),
        Command::Backbone(c) => backbone::run(c),
        Command::Files(c) => files::run(c),
        Command::Health(a) => health::run(a),
        Command::PerfPub(a) => lab::exec(Some("perf-pub"), a),
        Command::PerfSub(a) => lab::exec(Some("perf-sub"), a),
        Command::PerfWsSub(a) => lab::exec(Some("perf-ws-sub"), a),
        Command::PerfNatsSub(a) => lab::exec(Some("perf-nats-sub"), a),
        Command::PerfPost(a) => lab::exec(Some("perf-post"), a),
    };
    match result {
        Ok(()) => {}
        Err(e) => {
            if let Some(exit) = e.downcast_ref::<subscribe::Exit>() {
                std::process::exit(exit.0);
            }
            logger::fatal(log_format, &format!("{e:#}"));
            std::process::exit(1);
        }
    }
}
