//! `tickwire demo`: the distributed system on one machine, in one process: a source
//! node fed by a synthetic feed, two edge nodes on a backbone (Aeron multicast on
//! loopback), and a live quote board reading from the first edge; each node serves its
//! dashboard. `--single`: one node, no backbone.

use crate::publish::{run_feed, PublishArgs};
use crate::stdout::{quiet_if_gone, reader_gone};
use anyhow::{Context, Result};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_client::{ConnectOptions, EventRef, RequestOptions, Subscriber};
use tickwire_node::{NodeConfig, NodeServer, RunningNode};
use tickwire_proto::{fid, DataState, FieldList, ServiceState, Value};

#[derive(clap::Args)]
pub(crate) struct DemoArgs {
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long, value_name = "SECONDS", value_parser = crate::subscribe::seconds)]
    duration: Option<f64>,
    /// Address of the node the feed publishes to (the source; with --single, the one
    /// node); if it is taken, a free port is used instead. The edges take free ports.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:14002")]
    listen: std::net::SocketAddr,
    /// Address of the dashboard and WebSocket API (http://ADDR/) of the board's node
    /// (the first edge; with --single, the one node); if it is taken, a free port is
    /// used instead. The other nodes' dashboards take free ports.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:15000")]
    ws: std::net::SocketAddr,
    /// Items in the synthetic feed.
    #[arg(long, value_name = "N", default_value_t = 300, value_parser = at_least_1())]
    items: usize,
    /// Updates per second across the feed.
    #[arg(long, value_name = "UPDATES_PER_S", default_value_t = 2000)]
    rate: u64,
    /// Items shown on the board (at most --items).
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = at_least_1())]
    board: usize,
    /// One node (feed and board on it), no backbone.
    #[arg(long)]
    single: bool,
}

/// A count of 1 or more (0 was taken as 1 while the demo said 0).
fn at_least_1() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::new().range(1..)
}

/// The demo's feed sends what is due every 20 ms (50 bursts a second; the board
/// redraws every 250 ms): between bursts the nodes park, and the demo runs cool. A feed
/// ticking every millisecond would look like a steady load to the nodes' adaptive wait,
/// which then polls to keep its latency (docs/OPERATIONS.md, "Waiting: what idle costs").
const DEMO_TICK_MS: u64 = 20;

/// A node in the demo: ports that are taken fall back to free ones, each in turn.
fn spawn_node(mut cfg: NodeConfig) -> Result<RunningNode> {
    loop {
        match NodeServer::spawn(cfg.clone()) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                if cfg.node.listen.port() != 0
                    && std::net::TcpListener::bind(cfg.node.listen).is_err()
                {
                    cfg.node.listen.set_port(0);
                } else if !cfg.websocket.listen.is_empty() && !cfg.websocket.listen.ends_with(":0")
                {
                    let mut ws: std::net::SocketAddr = cfg.websocket.listen.parse()?;
                    ws.set_port(0);
                    cfg.websocket.listen = ws.to_string();
                } else {
                    return Err(e).context("cannot start an embedded node");
                }
            }
            Err(e) => return Err(e).context("cannot start an embedded node"),
        }
    }
}

/// The demo's nodes: where the feed publishes, where the board reads, and the others.
struct Nodes {
    /// The node the feed publishes to (the source).
    feed: RunningNode,
    /// The node the board reads from (the first edge), when not the same.
    board: Option<RunningNode>,
    others: Vec<RunningNode>,
    /// Dropped after the nodes (fields drop in order).
    _key_file: Option<DemoKeyFile>,
}

/// The demo backbone's key file (the backbone is authenticated, as it should be in
/// production), in a directory of its own that goes when the demo ends.
struct DemoKeyFile {
    dir: std::path::PathBuf,
    path: std::path::PathBuf,
}

impl DemoKeyFile {
    fn new() -> Result<DemoKeyFile> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let dir = std::env::temp_dir().join(format!("tickwire-demo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("cannot make {}", dir.display()))?;
        let path = dir.join("backbone.keys");
        let text = tickwire_backbone::auth::new_key_file(tickwire_backbone::auth::Mac::Blake3)
            .map_err(|_| anyhow::anyhow!("the system's random number generator failed"))?;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(DemoKeyFile { dir, path })
    }
}

impl Drop for DemoKeyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Nodes {
    fn board_node(&self) -> &RunningNode {
        self.board.as_ref().unwrap_or(&self.feed)
    }

    fn dashboards(&self) -> Vec<(String, String)> {
        let mut v = Vec::new();
        let mut add = |name: &str, n: &RunningNode| {
            if let Some(a) = n.ws_addr {
                v.push((
                    name.to_string(),
                    format!("http://{a}/?items=SYM0,SYM1,SYM2,SYM3"),
                ));
            }
        };
        match &self.board {
            Some(b) => {
                add("edge-1", b);
                for (i, o) in self.others.iter().enumerate() {
                    add(&format!("edge-{}", i + 2), o);
                }
                add("source", &self.feed);
            }
            None => add("node", &self.feed),
        }
        v
    }
}

fn start_nodes(args: &DemoArgs) -> Result<Nodes> {
    let mut base = NodeConfig::default();
    base.node.stats_interval_s = 0;
    if args.single {
        let mut cfg = base;
        cfg.node.listen = args.listen;
        cfg.websocket.listen = args.ws.to_string();
        return Ok(Nodes {
            feed: spawn_node(cfg)?,
            board: None,
            others: Vec::new(),
            _key_file: None,
        });
    }
    // The data's port and the files' above it, both free.
    let port = tickwire_backbone::loopback::free_port_pair()
        .ok_or_else(|| anyhow::anyhow!("no two free UDP ports side by side on loopback"))?;
    let channel = format!("aeron:udp?endpoint=239.20.30.41:{port}|interface=127.0.0.1");
    let key_file = DemoKeyFile::new()?;
    let node = |name: &str, role: &str, listen: std::net::SocketAddr, ws: String| {
        let mut cfg = base.clone();
        cfg.node.name = name.into();
        cfg.node.listen = listen;
        cfg.websocket.listen = ws;
        cfg.backbone.role = role.into();
        cfg.backbone.channel = channel.clone();
        cfg.backbone.key_file = key_file.path.display().to_string();
        cfg
    };
    let free: std::net::SocketAddr = "127.0.0.1:0".parse()?;
    let source = spawn_node(node("source", "source", args.listen, "127.0.0.1:0".into()))
        .context("cannot start the source node (tickwire demo --single runs without a backbone)")?;
    let edge_1 = spawn_node(node("edge-1", "edge", free, args.ws.to_string()))?;
    let edge_2 = spawn_node(node("edge-2", "edge", free, "127.0.0.1:0".into()))?;
    Ok(Nodes {
        feed: source,
        board: Some(edge_1),
        others: vec![edge_2],
        _key_file: Some(key_file),
    })
}

/// How long the feed may take to reach the board's node.
const START_WAIT: Duration = Duration::from_secs(20);

/// The demo feed's thread: the updates it sent, or why it stopped.
type Feed = std::thread::JoinHandle<Result<u64>>;

/// The feed, if its thread has ended (it ends on its own only when something went
/// wrong): why, its own error first, which says what the user needs to know (a node
/// that refused it, an unreadable item file), where "the feed stopped" would not.
fn feed_ended(feed: &mut Option<Feed>) -> Option<anyhow::Error> {
    let joined = feed.take_if(|f| f.is_finished())?.join();
    Some(match joined {
        Ok(Err(e)) => e.context("the demo feed stopped"),
        Ok(Ok(sent)) => anyhow::anyhow!("the demo feed stopped unexpectedly after {sent} updates"),
        Err(_) => anyhow::anyhow!("the demo feed thread panicked"),
    })
}

/// Waits until the feed is ready and the board's node has its service up: Ok(true);
/// Ok(false) when `stop` is set first (Ctrl-C or SIGTERM while starting); the feed's
/// own error when it ends first.
fn wait_for_feed(
    sub: &mut Subscriber,
    feed_ready: &AtomicBool,
    feed: &mut Option<Feed>,
    stop: &AtomicBool,
    within: Duration,
) -> Result<bool> {
    let wait_until = Instant::now() + within;
    while !feed_ready.load(Ordering::SeqCst)
        || sub.directory().get("FEED") != Some(&ServiceState::Up)
    {
        if stop.load(Ordering::Relaxed) {
            return Ok(false);
        }
        if let Some(e) = feed_ended(feed) {
            return Err(e);
        }
        if Instant::now() >= wait_until {
            anyhow::bail!(
                "the demo feed did not reach the board's node within {} s",
                within.as_secs()
            );
        }
        sub.dispatch(Duration::from_millis(20), |_| {})?;
    }
    Ok(true)
}

#[derive(Default, Clone)]
struct Row {
    name: String,
    bid: Option<String>,
    ask: Option<String>,
    last: Option<String>,
    volume: Option<String>,
    /// +1 up, -1 down, 0 unchanged: the last move of the bid.
    tick: i8,
    bid_value: f64,
    updates: u64,
    suspect: bool,
}

fn text(v: Option<Value<'_>>) -> Option<String> {
    v.map(|v| v.to_string())
}

impl Row {
    fn apply(&mut self, fields: FieldList<'_>) {
        if let Some(Value::Real(b)) = fields.get(fid::BID) {
            let f = b.to_f64();
            self.tick = if f > self.bid_value {
                1
            } else if f < self.bid_value {
                -1
            } else {
                0
            };
            self.bid_value = f;
            self.bid = Some(b.to_string());
        }
        self.ask = text(fields.get(fid::ASK)).or(self.ask.take());
        self.last = text(fields.get(fid::TRDPRC_1)).or(self.last.take());
        self.volume = text(fields.get(fid::ACVOL_1)).or(self.volume.take());
    }
}

pub(crate) fn run(args: DemoArgs) -> Result<()> {
    if std::env::var_os("TICKWIRE_LOG").is_none() {
        crate::logger::set_level(log::LevelFilter::Warn); // keep the board clean
    }
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;

    let nodes = start_nodes(&args)?;
    let addr = nodes.feed.addr.to_string();
    let board_addr = nodes.board_node().addr.to_string();
    let dashboards = nodes.dashboards();
    let dashboard = dashboards.first().map_or_else(String::new, |d| d.1.clone());
    let feed_args = PublishArgs {
        conn: crate::node_args::NodeArgs {
            node: addr.clone(),
            credentials: Default::default(),
        },
        service: "FEED".into(),
        items: Some(args.items),
        item_file: None,
        rate: args.rate,
        tick_ms: Some(DEMO_TICK_MS),
        interactive: false,
        duration: None,
        seed: 1,
        accept_posts: false,
    };
    let feed_stop = Arc::new(AtomicBool::new(false));
    let feed_ready = Arc::new(AtomicBool::new(false));
    // An Option only to be joined where it is found ended (its error reported).
    let mut feed: Option<Feed> = {
        let (a, s, r) = (feed_args.clone(), feed_stop.clone(), feed_ready.clone());
        Some(
            std::thread::Builder::new()
                .name("demo-feed".into())
                .spawn(move || run_feed(&a, s, r))?,
        )
    };

    let mut opts = ConnectOptions::new(board_addr.clone());
    opts.application = "tickwire-demo".into();
    let mut sub = Subscriber::connect(opts)?;
    let shown = args.board.min(args.items);
    let mut rows: Vec<Row> = (0..shown)
        .map(|i| Row {
            name: format!("SYM{i}"),
            ..Row::default()
        })
        .collect();
    // Subscribe once the feed has published its images (a request for an item a
    // non-interactive service does not have is closed at once) and the board's node
    // has the service (an edge learns it from the backbone).
    if !wait_for_feed(&mut sub, &feed_ready, &mut feed, &stop, START_WAIT)? {
        return Ok(()); // stopped while starting: nothing to show
    }
    for r in &rows {
        sub.subscribe("FEED", &r.name, RequestOptions::default())?;
    }

    let tty = std::io::stdout().is_terminal();
    let start = Instant::now();
    let end = args
        .duration
        .map(|d| start + Duration::from_secs_f64(d.max(0.0)));
    let mut out = std::io::stdout().lock();
    let mut received: u64 = 0;
    let mut next_draw = start;
    let mut last_count = 0u64;
    let mut last_draw = start;
    let result: Result<()> = (|| {
        if tty {
            write!(out, "\x1b[?25l\x1b[2J")?;
        } else {
            let topology = match &nodes.board {
                Some(_) => format!(
                    "source node on {addr} (the feed), edges on {board_addr} (the board) and {}, on the backbone",
                    nodes.others.iter().map(|n| n.addr.to_string()).collect::<Vec<_>>().join(", ")
                ),
                None => format!("node on {addr}"),
            };
            let all: Vec<String> = dashboards.iter().map(|(n, u)| format!("{n} {u}")).collect();
            let cmd = command_name();
            writeln!(
                out,
                "tickwire demo: {topology}, {} items at {} updates/s; try `{cmd} subscribe --node {board_addr} SYM0`; dashboard {dashboard} (dashboards: {})",
                args.items,
                args.rate,
                all.join(", ")
            )?;
        }
        while !stop.load(Ordering::Relaxed) && end.is_none_or(|e| Instant::now() < e) {
            if let Some(e) = feed_ended(&mut feed) {
                return Err(e);
            }
            sub.dispatch(Duration::from_millis(50), |e| match e {
                EventRef::Refresh(i, r) => {
                    if let Some(row) = rows.get_mut(i.stream as usize - 1) {
                        row.apply(r.fields);
                        row.suspect = r.state.data == DataState::Suspect;
                    }
                }
                EventRef::Update(i, u) => {
                    received += 1;
                    if let Some(row) = rows.get_mut(i.stream as usize - 1) {
                        row.apply(u.fields);
                        row.updates += 1;
                    }
                }
                EventRef::Status(i, s) => {
                    if let Some(row) = rows.get_mut((i.stream as usize).wrapping_sub(1)) {
                        row.suspect = s.state.data == DataState::Suspect;
                    }
                }
                EventRef::Directory(_) | EventRef::Ack(_) | EventRef::Files(_) => {}
            })?;
            let now = Instant::now();
            if now >= next_draw {
                let secs = now.duration_since(last_draw).as_secs_f64().max(1e-3);
                let rate = (received - last_count) as f64 / secs;
                if tty {
                    draw_board(
                        &mut out,
                        &nodes,
                        &dashboards,
                        &rows,
                        now - start,
                        rate,
                        &args,
                    )?;
                    next_draw = now + Duration::from_millis(250);
                } else {
                    let r = &rows[0];
                    writeln!(
                        out,
                        "t={:>4.1}s board updates {:>7.0}/s total {:>8}  {} bid {} ask {} last {}",
                        (now - start).as_secs_f64(),
                        rate,
                        received,
                        r.name,
                        r.bid.as_deref().unwrap_or("-"),
                        r.ask.as_deref().unwrap_or("-"),
                        r.last.as_deref().unwrap_or("-"),
                    )?;
                    next_draw = now + Duration::from_secs(1);
                }
                out.flush()?;
                last_count = received;
                last_draw = now;
            }
        }
        Ok(())
    })();
    // A reader that stopped reading (`| head`) ends the demo as Ctrl-C does.
    let result = match result {
        Err(e) if e.downcast_ref().is_some_and(reader_gone) => Ok(()),
        r => r,
    };
    if tty {
        quiet_if_gone(write!(out, "\x1b[?25h"))?;
    }
    if std::env::var_os("TICKWIRE_LOG").is_none() {
        crate::logger::set_level(log::LevelFilter::Error); // the feed leaving is expected now
    }
    feed_stop.store(true, Ordering::Relaxed);
    // None: it ended on its own, and `result` holds why.
    let sent = feed.map(|f| {
        f.join()
            .map_err(|_| anyhow::anyhow!("the demo feed thread panicked"))
    });
    // The board leaves first: a node stopping waits for its connected peers to close
    // (up to 2 s).
    drop(sub);
    let Nodes {
        feed: feed_node,
        board,
        others,
        _key_file: key_file,
    } = nodes;
    let board_stats = match board {
        Some(b) => Some(b.stop()?),
        None => None,
    };
    for o in others {
        o.stop()?;
    }
    let feed_stats = feed_node.stop()?;
    drop(key_file);
    result?;
    let Some(sent) = sent else {
        // Taken only where it ended, its error then `result`'s, returned above.
        anyhow::bail!("the demo feed stopped");
    };
    let sent = sent??;
    let fanned = board_stats.as_ref().unwrap_or(&feed_stats).updates_out;
    quiet_if_gone(writeln!(
        out,
        "tickwire demo finished after {:.1} s: feed sent {sent} updates, the board's node fanned out {fanned}, board received {received}",
        start.elapsed().as_secs_f64(),
    ))?;
    Ok(())
}

fn draw_board(
    out: &mut impl Write,
    nodes: &Nodes,
    dashboards: &[(String, String)],
    rows: &[Row],
    elapsed: Duration,
    rate: f64,
    args: &DemoArgs,
) -> std::io::Result<()> {
    let board = nodes.board_node().addr;
    write!(out, "\x1b[H")?;
    let topology = match &nodes.board {
        Some(_) => format!(
            "feed -> source {} -> backbone -> edge-1 {board} -> board (+ edge-2)",
            nodes.feed.addr
        ),
        None => format!("node {board}"),
    };
    writeln!(
        out,
        "\x1b[1mTickwire demo\x1b[0m  {topology}  feed {} items at {} updates/s  up {:.0} s\x1b[K",
        args.items,
        args.rate,
        elapsed.as_secs_f64()
    )?;
    writeln!(
        out,
        "board: {rate:.0} updates/s   Ctrl-C to stop   other terminal: {cmd} subscribe --node {board} SYM0\x1b[K",
        cmd = command_name()
    )?;
    for (name, url) in dashboards {
        writeln!(out, "dashboard of {name} (browser): {url}\x1b[K")?;
    }
    writeln!(out, "\x1b[K")?;
    writeln!(
        out,
        "\x1b[4m{:<10} {:>12} {:>12} {:>12} {:>14} {:>9}\x1b[0m\x1b[K",
        "ITEM", "BID", "ASK", "LAST", "VOLUME", "UPDATES"
    )?;
    for r in rows {
        let color = match r.tick {
            1 => "\x1b[32m",
            -1 => "\x1b[31m",
            _ => "",
        };
        let arrow = match r.tick {
            1 => "▲",
            -1 => "▼",
            _ => " ",
        };
        writeln!(
            out,
            "{:<10} {color}{:>11}{arrow}\x1b[0m {:>12} {:>12} {:>14} {:>9}{}\x1b[K",
            r.name,
            r.bid.as_deref().unwrap_or("-"),
            r.ask.as_deref().unwrap_or("-"),
            r.last.as_deref().unwrap_or("-"),
            r.volume.as_deref().unwrap_or("-"),
            r.updates,
            if r.suspect { "  SUSPECT" } else { "" }
        )?;
    }
    Ok(())
}

/// How to run this binary from another terminal: `tickwire` when its directory is on
/// the PATH, else its full path (after `cargo run`, `target/release/tickwire`).
fn command_name() -> String {
    let Ok(exe) = std::env::current_exe() else {
        return "tickwire".into();
    };
    let on_path = exe.parent().is_some_and(|dir| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.as_path() == dir))
    });
    if on_path {
        "tickwire".into()
    } else {
        exe.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ctrl-C or SIGTERM while the demo starts ends the wait for the feed at once: it
    /// was not looked at until the feed reached the board or 20 s had passed, and then
    /// the demo failed ("did not reach the board's node").
    #[test]
    fn a_stop_while_starting_ends_the_wait_for_the_feed() {
        let mut cfg = NodeConfig::default();
        cfg.node.listen = "127.0.0.1:0".parse().unwrap();
        cfg.node.stats_interval_s = 0;
        let node = NodeServer::spawn(cfg).expect("node");
        let mut sub = Subscriber::connect(ConnectOptions::new(node.addr.to_string())).unwrap();
        // No feed ever comes; the signal has.
        let stop = AtomicBool::new(true);
        let waited = wait_for_feed(
            &mut sub,
            &AtomicBool::new(false),
            &mut None,
            &stop,
            Duration::from_secs(10),
        );
        assert!(matches!(waited, Ok(false)), "{waited:?}");
    }

    /// A feed that fails while the demo starts: its own error is what the demo reports
    /// (it said only that the feed "did not reach the board's node").
    #[test]
    fn a_feed_that_fails_while_starting_reports_its_own_error() {
        let mut cfg = NodeConfig::default();
        cfg.node.listen = "127.0.0.1:0".parse().unwrap();
        cfg.node.stats_interval_s = 0;
        let node = NodeServer::spawn(cfg).expect("node");
        let mut sub = Subscriber::connect(ConnectOptions::new(node.addr.to_string())).unwrap();
        let missing = std::env::temp_dir().join(format!(
            "tickwire-demo-no-such-items-{}",
            std::process::id()
        ));
        let args = PublishArgs {
            conn: crate::node_args::NodeArgs {
                node: node.addr.to_string(),
                credentials: Default::default(),
            },
            service: "FEED".into(),
            items: None,
            item_file: Some(missing.clone()),
            rate: 1,
            tick_ms: Some(DEMO_TICK_MS),
            interactive: false,
            duration: None,
            seed: 1,
            accept_posts: false,
        };
        let ready = Arc::new(AtomicBool::new(false));
        let r = ready.clone();
        let mut feed: Option<Feed> = Some(std::thread::spawn(move || {
            run_feed(&args, Arc::new(AtomicBool::new(false)), r)
        }));
        let waited = wait_for_feed(
            &mut sub,
            &ready,
            &mut feed,
            &AtomicBool::new(false),
            Duration::from_secs(20),
        );
        let e = format!("{:#}", waited.expect_err("the feed failed"));
        assert!(
            e.contains("the demo feed stopped") && e.contains(&missing.display().to_string()),
            "{e}"
        );
        assert!(feed.is_none(), "the feed's thread was joined");
    }
}
