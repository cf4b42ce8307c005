//! The processes of a lab run and the measurement of one step.
//!
//! Every component is a separate `tickwire` process (node, perf-pub, perf-sub), as a
//! user would run them. Load tools run with `--control --json`: the lab changes the
//! publisher's rate and asks both tools for exact counters at step boundaries (`mark`),
//! so a step's offered and delivered counts do not depend on one-second report lines.

use crate::perf_sub::Mark as SubMark;
use crate::sysinfo::ProcessMonitor;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};
use tickwire_bench_report::schema::{ProcessUsage, Step};

/// One `tickwire` process of the lab, killed when dropped.
pub struct Proc {
    /// Its name in the lab's messages and its log file (`NAME.log`).
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
    /// Its command line as results.json records it (program name, then arguments).
    pub command: String,
    /// A node's WebSocket address, when it serves one.
    pub ws_addr: Option<String>,
}

impl Proc {
    /// Starts `bin args...`; JSON lines on stdout are collected, everything else (and
    /// stderr) goes to `log_dir/NAME.log`.
    pub fn spawn(bin: &Path, name: &str, args: &[String], log_dir: &Path) -> Result<Proc> {
        let log = std::fs::File::create(log_dir.join(format!("{name}.log")))
            .with_context(|| format!("cannot create the log of {name} in {}", log_dir.display()))?;
        let mut child = ends_with_lab(&mut Command::new(bin))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log.try_clone()?)
            .env("TICKWIRE_LOG", "warn")
            .spawn()
            .with_context(|| format!("cannot start {} {}", bin.display(), args.join(" ")))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = channel();
        let mut log = log;
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) if v.is_object() => {
                        if tx.send(v).is_err() {
                            break;
                        }
                    }
                    _ => {
                        let _ = writeln!(log, "{line}");
                    }
                }
            }
        });
        Ok(Proc {
            name: name.to_string(),
            stdin: child.stdin.take(),
            child,
            lines: rx,
            command: format!("{} {}", program_name(bin), args.join(" ")),
            ws_addr: None,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Writes one line to its control input (`rate N`, `mark NAME`, `quit`); fails when
    /// it has none or has exited.
    pub fn send(&mut self, command: &str) -> Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| anyhow!("{}: no control input", self.name))?;
        writeln!(stdin, "{command}").with_context(|| format!("{} stopped", self.name))?;
        stdin.flush()?;
        Ok(())
    }

    /// Waits for a JSON line of `type`, skipping others (up to `timeout`).
    pub fn expect(&mut self, ty: &str, timeout: Duration) -> Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(v) if v["type"] == ty => return Ok(v),
                Ok(_) => continue,
                Err(_) => {
                    if let Ok(Some(status)) = self.child.try_wait() {
                        bail!(
                            "{} exited ({status}) before printing {ty:?}; see its log",
                            self.name
                        );
                    }
                    bail!("{} printed no {ty:?} within {timeout:?}", self.name);
                }
            }
        }
    }

    /// Whether it has not exited yet.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Asks the process to stop (`quit` on its control input, else SIGINT) and waits.
    pub fn stop(mut self) -> Result<()> {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "quit");
        }
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        Ok(())
    }
}

/// Makes the process `cmd` starts end with the lab. Every way out of the lab drops its
/// processes, which kills them; but a lab killed itself (SIGTERM, SIGKILL) drops
/// nothing, and a node, whose standard input is not the lab's, would run on. The
/// kernel sends the child SIGKILL when the thread that started it ends, so call this
/// only on a thread that lives as long as the lab (its main thread).
pub fn ends_with_lab(cmd: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt;
    let lab = std::process::id();
    // SAFETY: the closure makes only async-signal-safe system calls (prctl, getppid,
    // raise), as between fork and exec it must.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // A lab that ended before the prctl sends nothing: its child goes too.
            if libc::getppid() as u32 != lab {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        })
    }
}

/// How a command line names `bin`: `tickwire` or `tickwire-bench` for Tickwire's own
/// programs, the path of anything else (a peer's server).
fn program_name(bin: &Path) -> String {
    match bin.file_name().and_then(|n| n.to_str()) {
        Some(n @ ("tickwire" | "tickwire-bench")) => n.into(),
        _ => bin.display().to_string(),
    }
}

/// The two programs a lab run starts: the node's (`tickwire`: nodes, `publish`, `files
/// send`) and the lab's own (`tickwire-bench`: the load tools perf-pub, perf-sub...).
#[derive(Debug, Clone)]
pub struct Programs {
    /// The node's program (`tickwire`).
    pub node: PathBuf,
    /// The lab's own program (`tickwire-bench`), which runs the load tools.
    pub lab: PathBuf,
}

impl Programs {
    /// The lab is this process's program; the node's is `$TICKWIRE_BIN` when set, else
    /// the `tickwire` beside it (cargo builds both into one target folder).
    pub fn find() -> Result<Programs> {
        let lab = std::env::current_exe().context("cannot find the tickwire-bench program")?;
        let node = match std::env::var_os("TICKWIRE_BIN") {
            Some(path) => PathBuf::from(path),
            None => lab.with_file_name("tickwire"),
        };
        if !node.is_file() {
            bail!(
                "the node's program {} is missing: build it (`cargo build --release` builds \
                 tickwire and tickwire-bench) or name it with TICKWIRE_BIN",
                node.display()
            );
        }
        Ok(Programs { node, lab })
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts a node on a free loopback port and waits for its address.
pub fn start_node(
    bin: &Path,
    name: &str,
    extra: &[String],
    log_dir: &Path,
) -> Result<(Proc, String)> {
    start_node_wrapped(&[], bin, name, extra, log_dir, &[])
}

/// [`start_node`] run through `wrapper` (a command that ends by executing its
/// arguments, e.g. `unshare` giving the node a mount namespace of its own; none if
/// empty) with extra environment variables `env` (e.g. Aeron's loss generator): the
/// process is still the node's, so signals and CPU figures reach it.
pub fn start_node_wrapped(
    wrapper: &[String],
    bin: &Path,
    name: &str,
    extra: &[String],
    log_dir: &Path,
    env: &[(String, String)],
) -> Result<(Proc, String)> {
    let mut args = vec!["node".to_string(), "--listen".into(), "127.0.0.1:0".into()];
    args.extend_from_slice(extra);
    let log_path = log_dir.join(format!("{name}.log"));
    let log = std::fs::File::create(&log_path)?;
    let mut command = match wrapper.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(bin);
            c
        }
        None => Command::new(bin),
    };
    let mut child = ends_with_lab(&mut command)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env("TICKWIRE_LOG", "info")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .spawn()
        .with_context(|| format!("cannot start {} node", bin.display()))?;
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let mut log = log;
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            let _ = writeln!(log, "{line}");
            if let Some(rest) = line.split("listening on ").nth(1) {
                let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                let _ = tx.send(addr);
            }
            if let Some(rest) = line.split("WebSocket API on ws://").nth(1) {
                let addr = rest.split('/').next().unwrap_or("").to_string();
                let _ = tx.send(format!("ws {addr}"));
            }
        }
    });
    let (_tx, dead) = channel::<Value>();
    let mut proc = Proc {
        name: name.to_string(),
        child,
        stdin: None,
        lines: dead,
        command: {
            let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}='{v}' ")).collect();
            let wrapper: Vec<String> = wrapper.iter().map(|w| format!("{w} ")).collect();
            format!(
                "{}{}tickwire {}",
                env.concat(),
                wrapper.concat(),
                args.join(" ")
            )
        },
        ws_addr: None,
    };
    let addr = rx
        .recv_timeout(Duration::from_secs(20))
        .map_err(|_| anyhow!("node did not start; see {}", log_path.display()))?;
    if !proc.is_running() {
        bail!("node exited at start; see {}", log_path.display());
    }
    // With --ws the WebSocket address follows; callers read it from `proc.ws_addr`.
    if args.iter().any(|a| a == "--ws") {
        let ws = rx.recv_timeout(Duration::from_secs(20)).map_err(|_| {
            anyhow!(
                "node did not log its WebSocket address; see {}",
                log_path.display()
            )
        })?;
        proc.ws_addr = ws.strip_prefix("ws ").map(str::to_string);
    }
    Ok((proc, addr))
}

/// A node with one publisher and one perf-sub process, driven step by step.
pub struct Rig {
    /// The node the publisher connects to (the source, across a backbone).
    pub node: Proc,
    /// Where `node` listens.
    pub node_addr: String,
    /// Across a backbone: the edge node the subscriber connects to.
    pub edge: Option<Proc>,
    /// perf-pub (with `--system nats`, publishing to the NATS server).
    pub publisher: Proc,
    /// The subscriber: perf-sub, perf-ws-sub or perf-nats-sub.
    pub subscriber: Proc,
    /// Updates the subscriber's connections receive in all per update published (the
    /// spec's `fanout`).
    pub fanout: f64,
    /// The spec's label, in messages and the results.
    pub label: String,
    /// Updates perf-sub has reported across all marks (its running total).
    pub sub_total: u64,
    /// With `scrape_metrics`: what scrapes the node.
    pub scraper: Option<crate::scraper::Scraper>,
}

impl Rig {
    /// The command lines of the rig's processes (node, edge, publisher, subscriber), as
    /// results.json records them.
    pub fn commands(&self) -> Vec<String> {
        let mut v = vec![self.node.command.clone()];
        v.extend(self.edge.iter().map(|e| e.command.clone()));
        v.push(self.publisher.command.clone());
        v.push(self.subscriber.command.clone());
        v
    }

    /// Name and process id of each of the rig's processes (node, edge, publisher,
    /// subscriber), for the process monitor.
    pub fn pids(&self) -> Vec<(String, u32)> {
        let mut v = vec![(self.node.name.clone(), self.node.pid())];
        v.extend(self.edge.iter().map(|e| (e.name.clone(), e.pid())));
        v.push((self.publisher.name.clone(), self.publisher.pid()));
        v.push((self.subscriber.name.clone(), self.subscriber.pid()));
        v
    }

    /// Stops every process of the rig, the subscriber first.
    pub fn stop(self) -> Result<()> {
        if let Some(s) = &self.scraper {
            let (ok, failed, bytes) = s.counts();
            // The node's log says what it was asked; this says what was scraped.
            eprintln!(
                "{}: /metrics scraped {ok} times ({failed} failed), {} bytes each",
                self.label,
                bytes.checked_div(ok).unwrap_or(0)
            );
        }
        self.subscriber.stop()?;
        self.publisher.stop()?;
        if let Some(e) = self.edge {
            e.stop()?;
        }
        self.node.stop()
    }
}

/// How a rig is built.
#[derive(Debug, Clone)]
pub struct RigSpec {
    /// Names the rig in messages and the results; its processes' names and logs derive
    /// from it ([`rig_tag`]).
    pub label: String,
    /// The node's `--cache`: `on` or `off`.
    pub cache: &'static str,
    /// Items SYM0 .. SYM{N-1} the publisher publishes and the subscriber watches.
    pub items: usize,
    /// Subscriber connections (perf-sub `--connections`).
    pub connections: usize,
    /// How items are shared across the connections (perf-sub `--commonality`).
    pub commonality: &'static str,
    /// Updates delivered per update published (for the WebSocket subscriber, which
    /// has no `--commonality`, the streams are items times this).
    pub fanout: f64,
    /// perf-pub's first `--update-rate`, updates/s (the lab then sets each step's rate).
    pub start_rate: u64,
    /// perf-pub's `--tick-rate`: bursts per second.
    pub tick_rate: u64,
    /// perf-pub's `--latency-rate`: timestamped updates per second, or `all`.
    pub latency_rate: String,
    /// perf-pub `--flush-every`: also write after every N updates of a burst (0: once
    /// a burst).
    pub flush_every: u64,
    /// perf-pub's `--spin-us` (0: it sleeps to each burst).
    pub spin_us: u64,
    /// perf-pub's `--yield-after-write`.
    pub yield_after_write: bool,
    /// perf-pub's `--shape`: `level1` (the reference quote) or `wide` (the perf tools'
    /// 83-field images, 23-field updates).
    pub shape: &'static str,
    /// perf-sub's `--wait` (block or spin); perf-ws-sub and the NATS subscriber block.
    pub sub_wait: String,
    /// CPUs for node, publisher, subscriber (empty: no pinning).
    pub cpus: Option<(String, String, String)>,
    /// Subscribers over the WebSocket JSON API (perf-ws-sub) instead of the node's
    /// own protocol (perf-sub).
    pub websocket: bool,
    /// A configuration file for the node (TOML text), written to the log directory;
    /// flags still override it.
    pub node_config: Option<String>,
    /// Across a backbone: the edge node's config file instead of `node_config`.
    pub edge_config: Option<String>,
    /// Across a backbone: the publisher on a source node, the subscriber on an edge.
    pub backbone: Option<BackboneSpec>,
    /// Through two nodes over an upstream link: the publisher on the top node, the
    /// subscriber on a node fed by it (`--upstream`).
    pub upstream: bool,
    /// `GET /metrics` on the (first) node once a second while the rig runs.
    pub scrape_metrics: bool,
    /// The peer scenario: a NATS server (this program) instead of a node, fed by
    /// `perf-pub --system nats` and read by `perf-nats-sub`.
    pub nats_server: Option<PathBuf>,
}

/// A source and an edge node on an Aeron channel.
#[derive(Debug, Clone)]
pub struct BackboneSpec {
    /// The Aeron channel both nodes use (`--backbone`).
    pub channel: String,
    /// Fraction of the data frames the edge's media driver drops (Aeron's loss
    /// generator), e.g. 0.01.
    pub loss: Option<f64>,
}

impl BackboneSpec {
    /// Multicast on loopback, on a free port (and a free one above it, where the
    /// files go) and a group of its own per rig.
    pub fn loopback() -> Result<BackboneSpec> {
        static GROUP: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
        let port = tickwire_backbone::loopback::free_port_pair()
            .ok_or_else(|| anyhow::anyhow!("no two free UDP ports side by side on loopback"))?;
        let g = 101 + 2 * (GROUP.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 60);
        Ok(BackboneSpec {
            channel: format!("aeron:udp?endpoint=239.20.31.{g}:{port}|interface=127.0.0.1"),
            loss: None,
        })
    }
}

impl RigSpec {
    /// One subscriber connection watching every item, cache as given, 1,000 bursts/s
    /// and 1,000 latency samples/s, no pinning: what most scenarios use.
    pub fn new(label: impl Into<String>, cache: &'static str, items: usize) -> Self {
        RigSpec {
            label: label.into(),
            cache,
            items,
            connections: 1,
            commonality: "all",
            fanout: 1.0,
            start_rate: 1000,
            tick_rate: 1000,
            latency_rate: "1000".into(),
            flush_every: 0,
            spin_us: 0,
            yield_after_write: false,
            shape: "level1",
            sub_wait: "block".into(),
            cpus: None,
            websocket: false,
            node_config: None,
            edge_config: None,
            backbone: None,
            upstream: false,
            scrape_metrics: false,
            nats_server: None,
        }
    }
}

/// The part of a rig's process and log names that comes from its label.
pub fn rig_tag(label: &str) -> String {
    // A file name: no directory separator.
    label
        .replace(' ', "_")
        .replace('=', "-")
        .replace(',', "")
        .replace('/', "_per_")
}

/// Starts a rig's processes as `spec` says (nodes, then perf-pub, then the subscriber),
/// logs in `log_dir`, and returns once the subscriber has every image.
pub fn start_rig(programs: &Programs, spec: &RigSpec, log_dir: &Path) -> Result<Rig> {
    if let Some(server) = &spec.nats_server {
        return start_nats_rig(&programs.lab, server, spec, log_dir);
    }
    let bin = &programs.node;
    let pin = |which: usize| -> Vec<String> {
        match &spec.cpus {
            Some(c) => {
                let list = [&c.0, &c.1, &c.2][which];
                vec!["--cpus".into(), list.clone()]
            }
            None => vec![],
        }
    };
    let tag = rig_tag(&spec.label);
    let mut node_args = vec!["--cache".to_string(), spec.cache.into()];
    // Headroom for bursts at high rates; a subscriber that is really slow still fails
    // the step (gaps or missing updates).
    node_args.extend(["--heartbeat-ms".to_string(), "5000".into()]);
    node_args.extend(pin(0));
    if spec.websocket || spec.scrape_metrics {
        node_args.extend(["--ws".to_string(), "127.0.0.1:0".into()]);
    }
    if let Some(toml) = &spec.node_config {
        let path = log_dir.join(format!("node-{tag}.toml"));
        std::fs::write(&path, toml).with_context(|| format!("writing {}", path.display()))?;
        node_args.extend(["--config".to_string(), path.display().to_string()]);
    }
    let (node, addr, edge, sub_addr) = match &spec.backbone {
        None if spec.upstream => {
            let mut top_args = node_args.clone();
            top_args.extend(["--name".to_string(), "top".into()]);
            let (node, addr) = start_node(bin, &format!("node-top-{tag}"), &top_args, log_dir)?;
            let mut pop_args = node_args.clone();
            pop_args.extend([
                "--upstream".to_string(),
                addr.clone(),
                "--name".into(),
                "pop".into(),
            ]);
            let (pop, pop_addr) = start_node(bin, &format!("node-pop-{tag}"), &pop_args, log_dir)?;
            (node, addr, Some(pop), pop_addr)
        }
        None => {
            let (node, addr) = start_node(bin, &format!("node-{tag}"), &node_args, log_dir)?;
            let a = addr.clone();
            (node, addr, None, a)
        }
        Some(bb) => {
            // Both nodes serve /metrics: the lab reads the drivers' counters there.
            if !node_args.iter().any(|a| a == "--ws") {
                node_args.extend(["--ws".to_string(), "127.0.0.1:0".into()]);
            }
            let mut source_args = node_args.clone();
            source_args.extend(
                [
                    "--backbone",
                    &bb.channel,
                    "--role",
                    "source",
                    "--name",
                    "source",
                ]
                .map(String::from),
            );
            let (node, addr) =
                start_node(bin, &format!("node-source-{tag}"), &source_args, log_dir)?;
            let mut edge_args = node_args.clone();
            if let Some(toml) = &spec.edge_config {
                let path = log_dir.join(format!("edge-{tag}.toml"));
                std::fs::write(&path, toml)
                    .with_context(|| format!("writing {}", path.display()))?;
                // In place of the node's own config file.
                match edge_args.iter().position(|a| a == "--config") {
                    Some(i) => edge_args[i + 1] = path.display().to_string(),
                    None => edge_args.extend(["--config".to_string(), path.display().to_string()]),
                }
            }
            edge_args.extend(
                [
                    "--backbone",
                    &bb.channel,
                    "--role",
                    "edge",
                    "--name",
                    "edge",
                ]
                .map(String::from),
            );
            let env: Vec<(String, String)> = match bb.loss {
                Some(rate) => vec![
                    (
                        "AERON_UDP_CHANNEL_INCOMING_INTERCEPTORS".into(),
                        "loss".into(),
                    ),
                    (
                        "AERON_UDP_CHANNEL_TRANSPORT_BINDINGS_LOSS_ARGS".into(),
                        format!("rate={rate}|recv-msg-mask=0x2|seed=7"),
                    ),
                ],
                None => vec![],
            };
            let edge_name = format!("node-edge-{tag}");
            let (edge, edge_addr) =
                start_node_wrapped(&[], bin, &edge_name, &edge_args, log_dir, &env)?;
            (node, addr, Some(edge), edge_addr)
        }
    };
    let items = spec.items.to_string();
    // The load tools are this program's, named after their role and the rig.
    let spawn_tool = |role: &str, args: &[String]| {
        Proc::spawn(&programs.lab, &format!("{role}-{tag}"), args, log_dir)
    };
    let mut pub_args = perf_pub_args(spec, "tickwire", &addr);
    pub_args.extend(pin(1));
    let mut publisher = spawn_tool("perf-pub", &pub_args)?;
    // The publisher prints its first second once its images are out.
    publisher.expect("second", Duration::from_secs(120))?;
    if spec.backbone.is_some() || spec.upstream {
        wait_for_service(&sub_addr, "FEED", Duration::from_secs(60)).with_context(|| {
            format!("{}: the downstream node never saw service FEED", spec.label)
        })?;
    }
    let node_addr = addr;
    let addr = sub_addr;
    let conns = spec.connections.to_string();
    let mut sub_args: Vec<String> = if spec.websocket {
        let ws = node
            .ws_addr
            .clone()
            .ok_or_else(|| anyhow!("the node serves no WebSocket API"))?;
        controlled(
            "perf-ws-sub",
            &["--ws", &ws, "--items", &items, "--connections", &conns],
        )
    } else {
        controlled_perf_sub(
            &addr,
            &items,
            &conns,
            spec.commonality,
            &["--wait", &spec.sub_wait],
        )
    };
    sub_args.extend(pin(2));
    let mut subscriber = spawn_tool("perf-sub", &sub_args)?;
    let commonality =
        <crate::perf_sub::Commonality as clap::ValueEnum>::from_str(spec.commonality, false)
            .map_err(|e| anyhow!("commonality {:?}: {e}", spec.commonality))?;
    let streams = if spec.websocket {
        (spec.items as f64 * spec.fanout).round() as u64
    } else {
        commonality.streams(spec.connections, spec.items)
    };
    wait_for_images(&mut subscriber, streams, &spec.label)?;
    let scraper = match (&node.ws_addr, spec.scrape_metrics) {
        (Some(http), true) => Some(crate::scraper::Scraper::start(http.clone())),
        _ => None,
    };
    Ok(Rig {
        node,
        node_addr,
        edge,
        publisher,
        subscriber,
        fanout: spec.fanout,
        label: spec.label.clone(),
        sub_total: 0,
        scraper,
    })
}

/// A load tool's command line under the lab's control: `TOOL ARGS... --control --json
/// --duration 86400`. It runs until told to quit, takes its marks and rates on standard
/// input and answers in JSON lines.
pub fn controlled(tool: &str, args: &[&str]) -> Vec<String> {
    std::iter::once(tool)
        .chain(args.iter().copied())
        .chain(["--control", "--json", "--duration", "86400"])
        .map(String::from)
        .collect()
}

/// perf-sub's command line under the lab's control ([`controlled`]): `connections`
/// connections to the node at `addr` sharing `items` items per `commonality`, then
/// `extra` flags. The rigs and the stall scenario start their subscribers alike.
pub fn controlled_perf_sub(
    addr: &str,
    items: &str,
    connections: &str,
    commonality: &str,
    extra: &[&str],
) -> Vec<String> {
    let common = [
        "--node",
        addr,
        "--items",
        items,
        "--connections",
        connections,
        "--commonality",
        commonality,
    ];
    controlled("perf-sub", &[&common[..], extra].concat())
}

/// perf-pub's command line in a rig: `system` at `addr`, controlled by the lab, at the
/// spec's first rate.
fn perf_pub_args(spec: &RigSpec, system: &str, addr: &str) -> Vec<String> {
    let mut args = controlled(
        "perf-pub",
        &[
            "--system",
            system,
            "--node",
            addr,
            "--items",
            &spec.items.to_string(),
            "--update-rate",
            &spec.start_rate.to_string(),
            "--tick-rate",
            &spec.tick_rate.to_string(),
            "--latency-rate",
            &spec.latency_rate,
        ],
    );
    if spec.flush_every > 0 {
        args.extend(["--flush-every".into(), spec.flush_every.to_string()]);
    }
    if spec.spin_us > 0 {
        args.extend(["--spin-us".into(), spec.spin_us.to_string()]);
    }
    if spec.yield_after_write {
        args.push("--yield-after-write".into());
    }
    if spec.shape != "level1" {
        args.extend(["--shape".into(), spec.shape.into()]);
    }
    args
}

/// A NATS server on a free loopback port, `perf-pub --system nats` and
/// `perf-nats-sub`: the same workload and control lines as a node's rig.
fn start_nats_rig(bin: &Path, server: &Path, spec: &RigSpec, log_dir: &Path) -> Result<Rig> {
    let tag = rig_tag(&spec.label);
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let node = Proc::spawn(
        server,
        &format!("nats-server-{tag}"),
        &[
            "-a".into(),
            "127.0.0.1".into(),
            "-p".into(),
            port.to_string(),
        ],
        log_dir,
    )?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&addr).is_err() {
        if Instant::now() > deadline {
            bail!(
                "{}: the NATS server did not listen on {addr} within 20 s",
                spec.label
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let items = spec.items.to_string();
    let mut sub_args = controlled("perf-nats-sub", &["--nats", &addr, "--items", &items]);
    if let Some((_, _, cpus)) = &spec.cpus {
        sub_args.extend(["--cpus".into(), cpus.clone()]);
    }
    // The subscriber first: NATS keeps nothing for a subscriber that is not there yet.
    let mut subscriber = Proc::spawn(bin, &format!("perf-sub-{tag}"), &sub_args, log_dir)?;
    subscriber.expect("ready", Duration::from_secs(30))?;
    let mut pub_args = perf_pub_args(spec, "nats", &addr);
    if let Some((_, cpus, _)) = &spec.cpus {
        pub_args.extend(["--cpus".into(), cpus.clone()]);
    }
    let mut publisher = Proc::spawn(bin, &format!("perf-pub-{tag}"), &pub_args, log_dir)?;
    publisher.expect("second", Duration::from_secs(60))?;
    Ok(Rig {
        node,
        node_addr: addr,
        edge: None,
        publisher,
        subscriber,
        fanout: spec.fanout,
        label: spec.label.clone(),
        sub_total: 0,
        scraper: None,
    })
}

/// Waits until the node at `addr` has `service` up in its directory (an edge learns
/// the sources' services from the backbone).
pub fn wait_for_service(addr: &str, service: &str, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut opts = tickwire_client::ConnectOptions::new(addr.to_string());
    opts.application = "tickwire-bench".into();
    let mut sub = tickwire_client::Subscriber::connect(opts)?;
    while Instant::now() < deadline {
        sub.dispatch(Duration::from_millis(100), |_| {})?;
        if sub.directory().get(service) == Some(&tickwire_proto::ServiceState::Up) {
            return Ok(());
        }
    }
    bail!("service {service} not up at {addr} within {timeout:?}")
}

/// Waits (up to 300 s) until perf-sub's one-second lines have counted `streams` images.
pub fn wait_for_images(subscriber: &mut Proc, streams: u64, label: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut images = 0u64;
    while images < streams {
        if Instant::now() > deadline {
            bail!("{label}: only {images} of {streams} images arrived in 300 s");
        }
        let v = subscriber.expect("second", Duration::from_secs(30))?;
        images += v["images"].as_u64().unwrap_or(0);
    }
    Ok(())
}

/// Exact counters from both load tools at one instant.
struct Marks {
    pub_total: u64,
    /// perf-sub's running total after this mark.
    sub_total: u64,
    pub_lag_ms: f64,
    sub: SubMark,
}

fn take_marks(rig: &mut Rig, name: &str) -> Result<Marks> {
    rig.publisher.send("mark")?;
    rig.subscriber.send(&format!("mark {name}"))?;
    let p = rig.publisher.expect("mark", Duration::from_secs(30))?;
    let s = rig.subscriber.expect("mark", Duration::from_secs(30))?;
    let sub: SubMark = serde_json::from_value(s["mark"].clone()).context("perf-sub mark")?;
    rig.sub_total += sub.updates;
    Ok(Marks {
        sub_total: rig.sub_total,
        pub_total: p["total"].as_u64().unwrap_or(0),
        pub_lag_ms: p["max_lag_ms"].as_f64().unwrap_or(0.0),
        sub,
    })
}

/// Sets the rate on every rig, lets it settle, then measures `seconds`.
pub fn hold(
    rigs: &mut [Rig],
    rate: u64,
    seconds: f64,
    settle: f64,
    monitor: &ProcessMonitor,
) -> Result<Vec<Step>> {
    for rig in rigs.iter_mut() {
        rig.publisher.send(&format!("rate {rate}"))?;
    }
    std::thread::sleep(Duration::from_secs_f64(settle));
    let mut before = Vec::new();
    for rig in rigs.iter_mut() {
        before.push(take_marks(rig, "settle")?);
    }
    let m0 = monitor.mark();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    let mut after = Vec::new();
    for rig in rigs.iter_mut() {
        after.push(take_marks(rig, &format!("rate-{rate}"))?);
    }
    let window = t0.elapsed().as_secs_f64();
    let m1 = monitor.mark();
    let all_usage = monitor.usage_between(m0, m1);
    let system = monitor.system_between(m0, m1);
    let mut steps = Vec::new();
    for (i, rig) in rigs.iter_mut().enumerate() {
        let (b, a) = (&before[i], &after[i]);
        let offered = a.pub_total.saturating_sub(b.pub_total);
        let delivered = a.sub.updates;
        let Verdict {
            ratio,
            backlog_start,
            backlog_end,
            mut reasons,
        } = verdict(rate, window, rig.fanout, b, a);
        if !rig.node.is_running() {
            reasons.push("node exited".into());
        }
        let names: Vec<String> = rig.pids().into_iter().map(|(n, _)| n).collect();
        let processes: Vec<ProcessUsage> = all_usage
            .iter()
            .filter(|u| names.contains(&u.name))
            .cloned()
            .collect();
        let node_cpu_s: f64 = processes
            .iter()
            .filter(|u| {
                u.name == rig.node.name || rig.edge.as_ref().is_some_and(|e| e.name == u.name)
            })
            // The exact count where there is one: a node at a low rate runs in bursts
            // shorter than a clock tick.
            .map(ProcessUsage::cpu_s)
            .sum();
        let node_cpu_ns_per_update = if offered > 0 {
            node_cpu_s * 1e9 / offered as f64
        } else {
            0.0
        };
        steps.push(Step {
            label: rig.label.clone(),
            target_rate: rate,
            seconds: window,
            offered,
            delivered,
            delivered_ratio: ratio,
            offered_per_s: offered as f64 / window,
            delivered_per_s: delivered as f64 / window,
            gaps: a.sub.gaps,
            statuses: a.sub.statuses,
            conflated: a.sub.conflated,
            backlog_start,
            backlog_end,
            publisher_max_lag_ms: a.pub_lag_ms,
            pass: reasons.is_empty(),
            reason: if reasons.is_empty() {
                "ok".into()
            } else {
                reasons.join("; ")
            },
            latency: a.sub.latency,
            node_cpu_ns_per_update,
            processes,
            system: system.clone(),
        });
    }
    Ok(steps)
}

/// A step's delivered ratio, backlog and reasons to fail (none: it passed).
struct Verdict {
    ratio: f64,
    backlog_start: i64,
    backlog_end: i64,
    reasons: Vec<String>,
}

/// What the load tools' marks at a step's start (`b`) and end (`a`) say of it: `rate`
/// asked, `window` seconds long, each update due to `fanout` streams.
fn verdict(rate: u64, window: f64, fanout: f64, b: &Marks, a: &Marks) -> Verdict {
    let offered = a.pub_total.saturating_sub(b.pub_total);
    let expected = offered as f64 * fanout;
    let ratio = if expected > 0.0 {
        a.sub.updates as f64 / expected
    } else {
        1.0
    };
    let pub_kept_up =
        offered as f64 >= 0.99 * rate as f64 * a.sub.seconds.min(window).max(1e-9) || rate == 0;
    let mut reasons = Vec::new();
    if ratio < 0.995 {
        reasons.push(format!("delivered {:.2}% of offered", ratio * 100.0));
    }
    // Updates sent before perf-sub connected are not expected: the backlog is taken
    // relative to the start of the step.
    let backlog = |m: &Marks| (m.pub_total as f64 * fanout) as i64 - m.sub_total as i64;
    let (backlog_start, backlog_end) = (backlog(b), backlog(a));
    let growth = backlog_end - backlog_start;
    if growth as f64 > (0.005 * expected).max(1000.0) {
        reasons.push(format!("backlog grew by {growth} updates"));
    }
    if a.sub.gaps > 0 {
        reasons.push(format!("{} sequence gaps", a.sub.gaps));
    }
    if a.sub.conflated > 0 {
        reasons.push(format!(
            "{} updates conflated (the subscriber fell behind)",
            a.sub.conflated
        ));
    }
    // A connection re-established re-images its streams: what it missed meanwhile
    // shows as no gap, only as a shortfall the 0.5% tolerance can hide.
    let reconnects = a.sub.reconnects.saturating_sub(b.sub.reconnects);
    if reconnects > 0 {
        reasons.push(format!("the subscriber reconnected {reconnects} times"));
    }
    if !pub_kept_up {
        reasons.push(format!(
            "publisher sent {:.0}/s of {rate}/s asked (publisher-limited)",
            offered as f64 / window
        ));
    }
    Verdict {
        ratio,
        backlog_start,
        backlog_end,
        reasons,
    }
}

/// After a failed step: a low rate until the subscribers have caught up (bounded).
pub fn recover(rigs: &mut [Rig], seconds: f64) -> Result<()> {
    for rig in rigs.iter_mut() {
        rig.publisher.send("rate 1000")?;
    }
    std::thread::sleep(Duration::from_secs_f64(seconds));
    for rig in rigs.iter_mut() {
        take_marks(rig, "recover")?;
    }
    Ok(())
}

/// Ramp (doubling from `start`) then bisection: the highest rate at which every rig's
/// step passes. Returns (max sustainable, steps).
pub fn find_max(
    rigs: &mut [Rig],
    start: u64,
    limit: u64,
    bisections: u32,
    seconds: f64,
    monitor: &ProcessMonitor,
    progress: &mut dyn FnMut(&[Step]),
) -> Result<(u64, Vec<Vec<Step>>)> {
    let mut all = Vec::new();
    // Holds `rate` on every rig and keeps the steps: whether every rig passed (after a
    // failure, a low rate lets the backlog drain).
    let passes = |rate: u64| -> Result<bool> {
        let steps = hold(rigs, rate, seconds, 1.0, monitor)?;
        progress(&steps);
        let pass = steps.iter().all(|s| s.pass);
        all.push(steps);
        if !pass {
            recover(rigs, 3.0)?;
        }
        Ok(pass)
    };
    let max = search(start, limit, bisections, passes)?;
    Ok((max, all))
}

/// The rates [`find_max`] tries, each judged by `passes`: from `start` (or `limit`, if
/// lower), doubling up to `limit` while they pass, then `bisections` halvings of the interval between the last
/// pass and the first failure. Returns the highest rate that passed (0: none). Every
/// rate tried is above the previous pass, so the search ends after at most 64 doublings
/// and `bisections` more.
fn search(
    start: u64,
    limit: u64,
    bisections: u32,
    mut passes: impl FnMut(u64) -> Result<bool>,
) -> Result<u64> {
    // A first rate above the limit would try nothing and report 0 as the highest
    // sustained rate.
    let mut rate = start.min(limit);
    // Doubling 0 stays 0: the ramp would hold rate 0 for ever.
    if rate == 0 {
        bail!("a search's first rate (--start-rate) and its limit (--max-rate) must be at least 1");
    }
    let mut lo = 0u64;
    let mut hi = 0u64;
    while rate <= limit {
        if passes(rate)? {
            lo = rate;
            // Past u64::MAX there is nothing left to try.
            match rate.checked_mul(2) {
                Some(r) => rate = r,
                None => break,
            }
        } else {
            hi = rate;
            break;
        }
    }
    if hi > 0 {
        for _ in 0..bisections {
            let mid = round_rate((lo + hi) / 2);
            if mid <= lo || mid >= hi {
                break;
            }
            if passes(mid)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
    }
    Ok(lo)
}

/// Rounds a rate to 2 significant digits (bisection points read better).
pub fn round_rate(r: u64) -> u64 {
    if r < 100 {
        return r;
    }
    let mag = 10u64.pow((r as f64).log10().floor() as u32 - 1);
    (r / mag) * mag
}

/// The commit this lab was built from (`build.rs`), or "unknown".
pub fn git_commit() -> String {
    env!("TICKWIRE_GIT_COMMIT").to_string()
}

/// Creates `dir` and `dir/logs`; returns the path of `logs`.
pub fn ensure_dir(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir.join("logs"))
        .with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir.join("logs"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Marks of a step's start and end: `sent` updates offered over 1 s at 1,000/s,
    /// `received` delivered, the subscriber's running reconnect count at each.
    fn marks(sent: u64, received: u64, reconnects: (u64, u64)) -> (Marks, Marks) {
        let mark = |pub_total, sub_total, updates, reconnects| Marks {
            pub_total,
            sub_total,
            pub_lag_ms: 0.0,
            sub: SubMark {
                seconds: 1.0,
                updates,
                reconnects,
                ..SubMark::default()
            },
        };
        (
            mark(1_000, 1_000, 0, reconnects.0),
            mark(1_000 + sent, 1_000 + received, received, reconnects.1),
        )
    }

    #[test]
    fn a_step_is_judged_by_its_marks() {
        let (b, a) = marks(1_000, 1_000, (2, 2));
        let v = verdict(1_000, 1.0, 1.0, &b, &a);
        assert!(v.reasons.is_empty(), "{:?}", v.reasons);
        assert_eq!((v.ratio, v.backlog_start, v.backlog_end), (1.0, 0, 0));
        let (b, a) = marks(1_000, 900, (0, 0));
        let v = verdict(1_000, 1.0, 1.0, &b, &a);
        assert_eq!(v.reasons, ["delivered 90.00% of offered"]);
    }

    #[test]
    fn a_step_in_which_the_subscriber_reconnected_fails() {
        // 0.3% lost while it reconnected: within the delivery tolerance, and no gap (its
        // streams were imaged again), but not every update delivered.
        let (b, a) = marks(1_000, 997, (1, 2));
        let v = verdict(1_000, 1.0, 1.0, &b, &a);
        assert_eq!(v.reasons, ["the subscriber reconnected 1 times"]);
    }

    #[test]
    fn a_search_ends_whatever_its_first_rate() {
        // Every rate passes: the ramp ends at the limit, or where doubling overflows.
        let bounded = |start, limit| {
            let mut tried = Vec::new();
            let max = search(start, limit, 3, |r| {
                assert!(tried.len() < 100, "unbounded search: {tried:?}");
                tried.push(r);
                Ok(true)
            });
            (max.ok(), tried.len())
        };
        assert_eq!(bounded(1_000, 8_000), (Some(8_000), 4));
        assert_eq!(bounded(1 << 62, u64::MAX), (Some(1 << 63), 2));
        // Rate 0 doubled is 0: refused rather than held for ever.
        assert_eq!(bounded(0, 8_000), (None, 0));
        assert_eq!(bounded(1_000, 0), (None, 0));
        // A failure is bisected towards the last pass.
        let mut tried = Vec::new();
        let max = search(1_000, u64::MAX, 3, |r| {
            tried.push(r);
            Ok(r <= 5_000)
        });
        assert_eq!(max.unwrap(), 5_000);
        assert_eq!(tried, [1_000, 2_000, 4_000, 8_000, 6_000, 5_000, 5_500]);
    }

    #[test]
    fn a_child_does_not_outlive_the_thread_that_started_it() {
        // As when the lab is killed: its child's Proc is never dropped, so nothing
        // kills the child but its tie to the lab.
        let logs = std::env::temp_dir().join(format!("tickwire-lab-ends-{}", std::process::id()));
        std::fs::create_dir_all(&logs).unwrap();
        let pid = std::thread::spawn({
            let logs = logs.clone();
            move || {
                let p = Proc::spawn(Path::new("sleep"), "sleeper", &["30".into()], &logs).unwrap();
                let pid = p.pid();
                std::mem::forget(p);
                pid
            }
        })
        .join()
        .unwrap();
        // Gone, or a zombie nobody reaps (its Child was forgotten).
        let ended = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|t| crate::sysinfo::parse_stat(&t))
                .is_none_or(|s| s.state == 'Z')
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ended() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = std::fs::remove_dir_all(&logs);
        assert!(ended(), "process {pid} outlived the thread that started it");
    }

    #[test]
    fn a_search_whose_first_rate_is_above_its_limit_starts_at_the_limit() {
        let mut tried = Vec::new();
        let max = search(250_000, 100_000, 1, |r| {
            tried.push(r);
            Ok(true)
        });
        assert_eq!((max.unwrap(), tried), (100_000, vec![100_000]));
    }

    #[test]
    fn rates_round_to_two_digits() {
        assert_eq!(round_rate(1_234_567), 1_200_000);
        assert_eq!(round_rate(750_000), 750_000);
        assert_eq!(round_rate(99), 99);
        assert_eq!(round_rate(1_000), 1_000);
    }
}
