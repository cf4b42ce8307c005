//! `[upstream]`: the node fed over TCP by other nodes (docs/OPERATIONS.md, "Node trees")
//! and the socket of that link, driven inside the event loop. The protocol is the
//! `tickwire-upstream` crate's [`Relay`]; this file moves its bytes and picks the
//! upstream to connect to.

use crate::config_error::{invalid, ConfigError};
use crate::part::{Cx, Part, Readiness};
use log::{info, warn};
use mio::net::TcpStream;
use mio::{Registry, Token};
use serde::{Deserialize, Serialize};
use std::io::{ErrorKind, Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tickwire_client::ClientError;
use tickwire_core::Node;
use tickwire_upstream::{NodePath, Relay, RelayConfig};

/// `[upstream]`: empty `nodes` means the node is fed by no other node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpstreamSection {
    /// Upstream nodes (`host:port`), in order of preference: the link moves to the
    /// next when one cannot be reached.
    pub nodes: Vec<String>,
    /// Services to take from the upstream; empty: all (but its own figures).
    pub services: Vec<String>,
    /// Services taken from the upstream at most; past it new ones are left out (and
    /// logged), so that no upstream can take every service slot of this node.
    pub max_services: usize,
    /// User to log in to the upstream as.
    pub user: String,
    /// File holding the secret (password or login token) on its first line; empty:
    /// none.
    pub password_file: PathBuf,
    /// First delay before reconnecting, doubling up to `reconnect_max_ms`.
    pub reconnect_min_ms: u64,
    /// The longest delay before reconnecting.
    pub reconnect_max_ms: u64,
    /// How long an upstream has to answer the login.
    pub login_timeout_ms: u64,
    /// With the cache on: an item nobody here watches any more stays open upstream
    /// (its image kept current) this long, so a quick re-request is answered at once
    /// from this node's cache. 0: closed upstream at once. Applies to every
    /// interactive service of the node.
    pub linger_ms: u64,
}

impl Default for UpstreamSection {
    fn default() -> Self {
        UpstreamSection {
            nodes: Vec::new(),
            services: Vec::new(),
            max_services: 1000,
            user: "tickwire-node".into(),
            password_file: PathBuf::new(),
            reconnect_min_ms: 100,
            reconnect_max_ms: 5000,
            login_timeout_ms: 5000,
            linger_ms: 10_000,
        }
    }
}

impl UpstreamSection {
    /// Checks the section; the error names the key and why.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for n in &self.nodes {
            let ok = n
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !ok {
                return Err(invalid("upstream.nodes", n, "expected HOST:PORT"));
            }
        }
        if self.reconnect_min_ms == 0 || self.reconnect_min_ms > self.reconnect_max_ms {
            return Err(invalid(
                "upstream.reconnect_min_ms",
                self.reconnect_min_ms,
                "must be at least 1 and at most upstream.reconnect_max_ms",
            ));
        }
        if self.max_services == 0 {
            return Err(invalid(
                "upstream.max_services",
                self.max_services,
                "must be at least 1",
            ));
        }
        if self.login_timeout_ms < 100 {
            return Err(invalid(
                "upstream.login_timeout_ms",
                self.login_timeout_ms,
                "must be at least 100",
            ));
        }
        if !self.password_file.as_os_str().is_empty() {
            self.secret()?;
        }
        Ok(())
    }

    /// The secret from `password_file`'s first line (empty without one).
    pub fn secret(&self) -> Result<String, ConfigError> {
        if self.password_file.as_os_str().is_empty() {
            return Ok(String::new());
        }
        let path = self.password_file.display();
        let text = std::fs::read_to_string(&self.password_file)
            .map_err(|e| invalid("upstream.password_file", &path, &e.to_string()))?;
        let first = text.lines().next().unwrap_or("").trim_end_matches('\r');
        if first.is_empty() {
            return Err(invalid(
                "upstream.password_file",
                &path,
                "the file is empty",
            ));
        }
        Ok(first.to_string())
    }

    /// The relay's settings for this node.
    pub fn relay_config(&self, node_id: u64, node_name: &str) -> Result<RelayConfig, ConfigError> {
        Ok(RelayConfig {
            node_id,
            node_name: node_name.to_string(),
            user: self.user.clone(),
            token: self.secret()?,
            services: (!self.services.is_empty()).then(|| self.services.iter().cloned().collect()),
            max_services: self.max_services,
            backoff_min: Duration::from_millis(self.reconnect_min_ms),
            backoff_max: Duration::from_millis(self.reconnect_max_ms),
            welcome_timeout: Duration::from_millis(self.login_timeout_ms),
        })
    }
}

/// Bytes read from the upstream per loop turn at most: the node's own subscribers get
/// their turn too. More waits in the socket (and the upstream sees this node as slow
/// if it stays behind).
const READ_SHARE: usize = 1 << 20;

/// The link's socket and the choice of upstream.
pub struct UpstreamLink {
    relay: Relay,
    nodes: Vec<String>,
    /// Each node's address, looked up off the event loop.
    resolvers: Vec<crate::outbound::Resolver>,
    /// Index in `nodes` of the upstream connected or tried last.
    current: usize,
    /// Rounds of connects that failed: which of an upstream's addresses is tried.
    attempts: usize,
    socket: Option<TcpStream>,
    /// A non-blocking connect in progress (done when the socket turns writable).
    connecting: bool,
    /// The socket may hold more than the last turn's read share.
    more_to_read: bool,
    token: Token,
    /// The chain above as last told to the core (a change goes to the core and the
    /// figures item).
    chain_told: NodePath,
}

impl UpstreamLink {
    /// Starts the link (the relay joins the core; connecting starts in the first turn).
    pub fn start(
        core: &mut Node,
        cfg: RelayConfig,
        nodes: Vec<String>,
        token: Token,
        now: Instant,
    ) -> Self {
        info!("upstream: fed by {} (in this order)", nodes.join(", "));
        UpstreamLink {
            relay: Relay::start(core, cfg, now),
            resolvers: nodes
                .iter()
                .map(|n| crate::outbound::Resolver::new(n))
                .collect(),
            nodes,
            current: 0,
            attempts: 0,
            socket: None,
            connecting: false,
            more_to_read: false,
            token,
            chain_told: NodePath::default(),
        }
    }

    /// The chain of nodes above this one, the upstream first.
    pub fn above(&self) -> &NodePath {
        self.relay.above()
    }

    /// Logged in to an upstream node (its data can flow).
    pub fn is_connected(&self) -> bool {
        self.relay.upstream_name().is_some()
    }

    /// `upstream-name (host:port)` or why there is none, for the figures.
    pub fn state_text(&self) -> String {
        match self.relay.upstream_name() {
            Some(n) => format!("{n} ({})", self.nodes[self.current]),
            None => format!("connecting ({})", self.nodes[self.current]),
        }
    }

    /// File-transfer messages the upstream sent (for the files thread).
    pub fn take_files(&mut self, into: &mut Vec<Vec<u8>>) {
        self.relay.take_files(into);
    }

    /// File-transfer messages from the upstream dropped because the files thread had
    /// not taken the ones before (`MAX_FILES_IN_BYTES`).
    pub fn files_dropped(&self) -> u64 {
        self.relay.stats().files_dropped
    }

    /// A file-transfer message for the upstream (written with the link's next bytes);
    /// false when not connected or busy.
    pub fn send_files(&mut self, body: &[u8]) -> bool {
        self.relay.send_files(body)
    }

    fn connect(&mut self, registry: &Registry, now: Instant) {
        let to = &mut self.resolvers[self.current];
        match crate::outbound::connect(to, registry, self.token, self.attempts, now) {
            Ok(Some(s)) => {
                self.socket = Some(s);
                self.connecting = true;
            }
            Ok(None) => {} // its name is being looked up: again next turn
            Err(why) => {
                let addr = self.nodes[self.current].clone();
                self.failed(&addr, why, now)
            }
        }
    }

    /// The non-blocking connect finished: connected, or refused.
    fn connect_done(&mut self, registry: &Registry, now: Instant) {
        let Some(s) = self.socket.as_mut() else {
            return;
        };
        match crate::outbound::connect_result(s) {
            Ok(false) => return, // not yet
            Ok(true) => {}
            Err(why) => {
                let addr = self.nodes[self.current].clone();
                self.close_socket(registry);
                self.failed(&addr, why, now);
                return;
            }
        }
        self.connecting = false;
        info!(
            "upstream: connected to {}; logging in",
            self.nodes[self.current]
        );
        self.relay.connecting(now);
    }

    /// No connection to the current upstream: the next one is tried after the backoff.
    fn failed(&mut self, addr: &str, why: String, now: Instant) {
        warn!("upstream: cannot connect to {addr}: {why}");
        self.current = (self.current + 1) % self.nodes.len();
        if self.current == 0 {
            // Every upstream tried: next time, each at its next address.
            self.attempts = self.attempts.wrapping_add(1);
        }
        self.relay.connect_failed(
            ClientError::Connect {
                addr: addr.to_string(),
                reason: why,
            },
            now,
        );
    }

    fn lost(&mut self, core: &mut Node, registry: &Registry, err: ClientError, now: Instant) {
        let addr = self.nodes[self.current].clone();
        let logged_in = self.relay.is_connected();
        warn!("upstream: link to {addr} lost: {err}");
        self.close_socket(registry);
        // A refused login, or a link lost before it was up: the next upstream.
        if !logged_in || matches!(err, ClientError::Rejected { .. }) {
            self.current = (self.current + 1) % self.nodes.len();
        }
        self.relay.lost(core, err, now);
    }

    fn close_socket(&mut self, registry: &Registry) {
        if let Some(s) = self.socket.take() {
            crate::outbound::close(s, registry);
        }
        self.connecting = false;
        self.more_to_read = false;
    }

    fn read(&mut self, core: &mut Node, now: Instant) -> Result<(), ClientError> {
        let (Some(s), Some(conn)) = (self.socket.as_mut(), self.relay.connection()) else {
            return Ok(());
        };
        let mut total = 0;
        self.more_to_read = false;
        loop {
            if total >= READ_SHARE || !conn.wants_input() {
                self.more_to_read = true;
                break;
            }
            let buf = conn.spare(64 * 1024);
            match s.read(buf) {
                Ok(0) => {
                    // Deliver what came before the end, then report it.
                    self.relay.poll(core, now)?;
                    return Err(ClientError::Disconnected(
                        "the upstream closed the connection".into(),
                    ));
                }
                Ok(n) => {
                    conn.received(n, now);
                    total += n;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(ClientError::Disconnected(e.to_string())),
            }
        }
        self.relay.poll(core, now)
    }

    fn write(&mut self, core: &mut Node, registry: &Registry, now: Instant) {
        if self.connecting {
            return;
        }
        let (Some(s), Some(conn)) = (self.socket.as_mut(), self.relay.connection()) else {
            return;
        };
        loop {
            let bytes = conn.transmit();
            if bytes.is_empty() {
                return;
            }
            match s.write(bytes) {
                Ok(n) => conn.sent(n, now),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return, // writable event later
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.lost(
                        core,
                        registry,
                        ClientError::Disconnected(e.to_string()),
                        now,
                    );
                    return;
                }
            }
        }
    }
}

impl Part for UpstreamLink {
    /// Sooner than the relay's deadlines while the socket may hold more to read.
    fn poll_timeout(&self) -> Option<Instant> {
        if self.more_to_read && self.socket.is_some() {
            return Some(Instant::now());
        }
        let lookup = self.resolvers[self.current]
            .is_looking_up()
            .then(|| Instant::now() + crate::outbound::LOOKUP_POLL);
        [self.relay.poll_timeout(), lookup]
            .into_iter()
            .flatten()
            .min()
    }

    fn handle_io(&mut self, cx: &mut Cx<'_>, readiness: Readiness) {
        let Readiness {
            readable, writable, ..
        } = readiness;
        // A connect ends with the socket writable, or in error (`readable` includes
        // errors and hang-ups).
        if self.connecting && (writable || readable) {
            self.connect_done(cx.registry, cx.now);
        }
        // Read in this turn (edge-triggered: this event is the only notice). A refused
        // connect is readable too, and leaves no socket to read: nothing is due then
        // until the next attempt.
        self.more_to_read |= readable && self.socket.is_some();
        if writable {
            self.write(cx.core, cx.registry, cx.now);
        }
    }

    /// Connects when due, and reads what the upstream sent into the core.
    fn handle_input(&mut self, cx: &mut Cx<'_>) {
        if self.socket.is_none() && self.relay.wants_connect(cx.now) {
            self.connect(cx.registry, cx.now);
        }
        if self.more_to_read && !self.connecting && self.socket.is_some() {
            if let Err(e) = self.read(cx.core, cx.now) {
                self.lost(cx.core, cx.registry, e, cx.now);
            }
        }
    }

    /// The relay's heartbeats and timeouts; a new chain above goes to the core.
    fn handle_timeout(&mut self, cx: &mut Cx<'_>) {
        if self.relay.poll_timeout().is_some_and(|t| cx.now >= t) {
            if let Err(e) = self.relay.handle_timeout(cx.now) {
                self.lost(cx.core, cx.registry, e, cx.now);
            }
        }
        if self.relay.above() != &self.chain_told {
            self.chain_told = self.relay.above().clone();
            cx.core.set_upstream_chain(self.chain_told.0.clone());
        }
    }

    /// The core's requests and closes go upstream, and queued bytes are written.
    fn pump(&mut self, cx: &mut Cx<'_>) {
        self.relay.pump(cx.core, cx.now);
        if let Err(e) = self.relay.poll(cx.core, cx.now) {
            self.lost(cx.core, cx.registry, e, cx.now);
        }
        self.write(cx.core, cx.registry, cx.now);
    }
}
