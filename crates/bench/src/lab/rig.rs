//! A rig: a node and its load tools (or a NATS server and its), started as one set for
//! a scenario, and the waits for them to be ready.

use super::process::{start_node, start_node_wrapped, Proc, Programs};
use anyhow::{anyhow, bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
pub(super) fn perf_pub_args(spec: &RigSpec, system: &str, addr: &str) -> Vec<String> {
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
pub(super) fn start_nats_rig(
    bin: &Path,
    server: &Path,
    spec: &RigSpec,
    log_dir: &Path,
) -> Result<Rig> {
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
