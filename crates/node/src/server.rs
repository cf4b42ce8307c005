//! The event loop: one thread, mio (epoll), non-blocking sockets.
//!
//! Each loop turn reads everything readable (up to a fair share per connection), lets
//! the core process it, then writes each connection's pending bytes once. The first
//! message is never held back waiting for more: batching comes only from what arrived
//! in the same turn. A socket that cannot take all its bytes keeps them in its bounded
//! output buffer and is written again when epoll says it is writable; the node never
//! blocks on a peer.

use crate::config::{NodeConfig, RsslAt, WaitStrategy};
use crate::rssl::{RsslConn, RsslShared};
use crate::tls::Transport;
use crate::ws::WsConn;
use log::{debug, error, info, warn};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use std::io::{self, ErrorKind, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tickwire_backbone::Backbone;
use tickwire_core::{ConnId, Node, Stats};
use tickwire_gateway::{SessionConfig, UpdateCache};
use tickwire_proto::frame::{FrameReader, FrameWriter};
use tickwire_proto::{code, DataState, Message, State, Status, StreamState};

const LISTENER: Token = Token(usize::MAX - 1);
const WS_LISTENER: Token = Token(usize::MAX - 3);
const WAKER: Token = Token(usize::MAX - 2);
const UPSTREAM: Token = Token(usize::MAX - 4);
/// The backbone's media driver's pollers (with a parking idle strategy).
const BACKBONE_DRIVER: Token = Token(usize::MAX - 5);
/// RSSL's own port (`[rssl] listen` naming an address other than the node's).
const RSSL_LISTENER: Token = Token(usize::MAX - 6);
/// Interactive RSSL providers: the first's token; the others count down from it.
const RSSL_PROVIDERS: usize = usize::MAX - 1000;
/// How often RSSL connections' pings are seen to (their intervals are seconds).
const RSSL_TICK: Duration = Duration::from_millis(500);
/// Bytes read from one connection per loop turn before the others get their turn.
const READ_SHARE: usize = 256 * 1024;
/// Idle buffers above this size are released, so memory follows the load back down.
const KEEP_BUFFER: usize = 64 * 1024;

struct Socket {
    /// The socket, plain or TLS (`[tls]`): every read and write goes through it.
    transport: Transport,
    reader: FrameReader,
    /// Peer closed its side or failed; close once the core has been told.
    dead: bool,
    /// The node closed its sending side (FIN after the last bytes) and waits for the
    /// peer to close; meanwhile what the peer sends is read and dropped.
    fin_sent: bool,
    /// Bytes asked of the socket per read: starts small (most subscribers send a few
    /// requests and pings) and doubles, up to [`MAX_READ`], while reads fill it.
    read_size: usize,
    /// A WebSocket (JSON API) connection rather than the node's own protocol.
    ws: Option<Box<WsConn>>,
    /// An RSSL connection (LSEG Real-Time SDK applications).
    rssl: Option<Box<RsslConn>>,
    /// On the node's own port: which protocol it speaks (the node's, RSSL where it
    /// shares the port, or HTTP by mistake) is not known until its first bytes.
    sniffing: bool,
    /// Spoke HTTP to the node's own port: answered with where HTTP is (wrong_port.rs),
    /// now closing; what else it sends is read and dropped.
    refused_http: bool,
    /// Already in the lingering list (closing): it must be there once only, or a
    /// second expiry would disconnect whoever reuses the id.
    lingering: bool,
}

/// Puts a connection the node is closing in the lingering list, once.
fn start_linger(
    sockets: &mut [Option<Socket>],
    lingering: &mut Vec<(ConnId, Instant)>,
    id: ConnId,
    deadline: Instant,
) {
    match sockets.get_mut(id).and_then(|s| s.as_mut()) {
        Some(s) if s.lingering => {}
        Some(s) => {
            s.lingering = true;
            lingering.push((id, deadline));
        }
        None => lingering.push((id, deadline)),
    }
}

/// First and largest read sizes (see `Socket::read_size`).
const FIRST_READ: usize = 4 * 1024;
const MAX_READ: usize = 64 * 1024;

/// Stops a running node, or has it reload its users file, from another thread
/// (signal handler, test, demo).
#[derive(Clone)]
pub struct ShutdownHandle {
    flag: Arc<AtomicBool>,
    reload: Arc<AtomicBool>,
    waker: Arc<Waker>,
}

impl ShutdownHandle {
    pub fn shutdown(&self) {
        self.flag.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
    }

    /// Reload the users file (SIGHUP): connections stay; what a user may no longer
    /// have is closed.
    pub fn reload(&self) {
        self.reload.store(true, Ordering::SeqCst);
        let _ = self.waker.wake();
    }
}

/// The node's listening sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listener {
    /// The node's own protocol (and RSSL, when it shares the port).
    Native = 0,
    WebSocket = 1,
    Rssl = 2,
}

/// A bound node, ready to run.
pub struct NodeServer {
    cfg: NodeConfig,
    poll: Poll,
    listener: TcpListener,
    local_addr: SocketAddr,
    ws_listener: Option<TcpListener>,
    ws_addr: Option<SocketAddr>,
    rssl_at: RsslAt,
    rssl_listener: Option<TcpListener>,
    /// What every RSSL connection shares (none when RSSL is off and no provider is
    /// configured).
    rssl: Option<Arc<RsslShared>>,
    shutdown: ShutdownHandle,
    accept_trouble: AcceptTrouble,
    users: Option<Arc<tickwire_core::Users>>,
    /// `[tls]`: both ports speak TLS only.
    tls: Option<Arc<rustls::ServerConfig>>,
    /// `[files]`: the files thread, started with its directories opened.
    files: Option<crate::files::FilesThread>,
}

/// Accepting failed for want of resources (file descriptors, memory). Epoll is
/// edge-triggered: the connections already queued would not be reported again until
/// another arrives, so the node retries by itself after a short pause, and logs the
/// condition once per interval rather than once per failed accept.
#[derive(Default)]
struct AcceptTrouble {
    /// When to try again, per listener.
    retry_at: [Option<Instant>; 3],
    failures: u64,
    last_log: Option<Instant>,
}

const ACCEPT_RETRY: Duration = Duration::from_millis(100);
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(10);

impl AcceptTrouble {
    fn failed(&mut self, listener: Listener, e: &io::Error, now: Instant) {
        self.retry_at[listener as usize] = Some(now + ACCEPT_RETRY);
        self.failures += 1;
        if self
            .last_log
            .is_none_or(|t| now.saturating_duration_since(t) >= ACCEPT_LOG_EVERY)
        {
            error!(
                "cannot accept connections: {e} ({} failed accepts since the last report); \
                 retrying every {} ms",
                self.failures,
                ACCEPT_RETRY.as_millis()
            );
            self.failures = 0;
            self.last_log = Some(now);
        }
    }

    /// The listeners due for another try.
    fn due(&mut self, now: Instant) -> [bool; 3] {
        let mut due = [false; 3];
        for (i, at) in self.retry_at.iter_mut().enumerate() {
            if at.is_some_and(|t| now >= t) {
                *at = None;
                due[i] = true;
            }
        }
        due
    }

    fn next_retry(&self) -> Option<Instant> {
        self.retry_at.iter().flatten().min().copied()
    }
}

/// A node running on its own thread.
pub struct RunningNode {
    pub addr: SocketAddr,
    /// The WebSocket API's address, if it is on.
    pub ws_addr: Option<SocketAddr>,
    handle: ShutdownHandle,
    thread: Option<JoinHandle<io::Result<Stats>>>,
}

impl RunningNode {
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.handle.clone()
    }

    /// Asks the node to stop and waits for it; returns its final counters.
    pub fn stop(mut self) -> io::Result<Stats> {
        self.handle.shutdown();
        self.join_thread()
    }

    fn join_thread(&mut self) -> io::Result<Stats> {
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("node thread panicked"))),
            None => Ok(Stats::default()),
        }
    }
}

impl Drop for RunningNode {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.handle.shutdown();
            let _ = self.join_thread();
        }
    }
}

impl NodeServer {
    /// Binds the listening socket (so the address, port 0 resolved, is known at once).
    pub fn bind(cfg: NodeConfig) -> io::Result<NodeServer> {
        let poll = Poll::new()?;
        let mut listener = TcpListener::bind(cfg.node.listen).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot listen on {}: {e}", cfg.node.listen),
            )
        })?;
        // mio listens with a backlog of 128; a second listen() raises it, so a burst of
        // (re)connecting subscribers is queued rather than left to retry SYNs.
        let backlog = cfg.limits.listen_backlog.min(i32::MAX as u32) as i32;
        // SAFETY: a valid listening socket descriptor owned by `listener`.
        if unsafe { libc::listen(listener.as_raw_fd(), backlog) } != 0 {
            warn!(
                "cannot set the listen backlog to {backlog}: {}",
                io::Error::last_os_error()
            );
        }
        let local_addr = listener.local_addr()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let ws_at = cfg
            .websocket
            .address()
            .map_err(|e| io::Error::new(ErrorKind::InvalidInput, e.to_string()))?;
        let (ws_listener, ws_addr) = match ws_at {
            Some(at) => {
                let mut l = TcpListener::bind(at).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("cannot listen for WebSocket clients on {at}: {e}"),
                    )
                })?;
                poll.registry()
                    .register(&mut l, WS_LISTENER, Interest::READABLE)?;
                let a = l.local_addr()?;
                (Some(l), Some(a))
            }
            None => (None, None),
        };
        let rssl_at = cfg
            .rssl
            .at(local_addr)
            .map_err(|e| io::Error::new(ErrorKind::InvalidInput, e.to_string()))?;
        let rssl_listener = match rssl_at {
            RsslAt::Own(at) => {
                let mut l = TcpListener::bind(at).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("cannot listen for RSSL connections on {at}: {e}"),
                    )
                })?;
                poll.registry()
                    .register(&mut l, RSSL_LISTENER, Interest::READABLE)?;
                info!(
                    "RSSL (LSEG Real-Time SDK applications) on {}",
                    l.local_addr()?
                );
                Some(l)
            }
            RsslAt::Shared => {
                info!("RSSL (LSEG Real-Time SDK applications) on the node's port, {local_addr}");
                None
            }
            RsslAt::Off => None,
        };
        let rssl_dictionary = match rssl_at {
            RsslAt::Off if cfg.rssl.providers.is_empty() => None,
            _ => {
                let d = cfg
                    .rssl
                    .load_dictionary()
                    .map_err(|e| io::Error::new(ErrorKind::InvalidInput, e.to_string()))?;
                info!("RSSL field types from {} ({} fields)", d.source, d.len());
                Some(Arc::new(d))
            }
        };
        let rssl = rssl_dictionary.map(|dictionary| {
            // Parts that fit a RIPC message: the consumer gets them unfragmented.
            let part = (cfg.rssl.max_msg_size as usize)
                .saturating_sub(256)
                .max(256);
            let downloads = Arc::new(tickwire_rssl::dictionary::Downloads::build(
                &dictionary,
                part,
            ));
            Arc::new(RsslShared {
                ripc: tickwire_rssl::ripc::Settings {
                    max_msg_size: cfg.rssl.max_msg_size,
                    // A consumer pings every third of its timeout; the core drops a peer
                    // silent for 3 heartbeats, so the timeout granted is at most that.
                    max_ping_timeout_s: (cfg.limits.heartbeat_ms * 3 / 1000).clamp(3, 255) as u8,
                    max_message: cfg.limits.max_frame_bytes,
                    ..tickwire_rssl::ripc::Settings::default()
                },
                session: Arc::new(tickwire_rssl::session::SessionConfig {
                    node_name: cfg.node.name.clone(),
                    dictionary,
                    downloads,
                    ..tickwire_rssl::session::SessionConfig::default()
                }),
            })
        });
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let tls = cfg
            .load_tls()
            .map_err(|e| io::Error::new(ErrorKind::InvalidInput, e.to_string()))?;
        if tls.is_some() {
            info!(
                "TLS on (certificate {}): {} TLS clients only",
                cfg.tls.cert,
                if ws_addr.is_some() {
                    "the node's port and the WebSocket port accept"
                } else {
                    "the node's port accepts"
                }
            );
        }
        let users = cfg
            .load_users()
            .map_err(|e| io::Error::new(ErrorKind::InvalidInput, e.to_string()))?;
        match &users {
            Some(u) => info!(
                "{} users loaded from {}; anonymous logins: {:?}",
                u.len(),
                cfg.security.users_file,
                cfg.security.anonymous
            ),
            None => warn!(
                "no users file ([security] users_file): the node is open, anyone who can reach {} may publish and subscribe{}",
                local_addr,
                if local_addr.ip().is_loopback() { " (loopback only)" } else { "" }
            ),
        }
        let files = if cfg.files.enabled() {
            let f = crate::files::FilesThread::start(
                &cfg.files,
                &cfg.node.name,
                tickwire_backbone::random_id(),
                waker.clone(),
            )
            .map_err(|e| io::Error::new(ErrorKind::InvalidInput, e))?;
            Some(f)
        } else {
            None
        };
        Ok(NodeServer {
            files,
            cfg,
            poll,
            listener,
            local_addr,
            ws_listener,
            ws_addr,
            rssl_at,
            rssl_listener,
            rssl,
            shutdown: ShutdownHandle {
                flag: Arc::new(AtomicBool::new(false)),
                reload: Arc::new(AtomicBool::new(false)),
                waker: waker.clone(),
            },
            accept_trouble: AcceptTrouble::default(),
            users,
            tls,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Where the WebSocket API listens, if it is on.
    pub fn ws_addr(&self) -> Option<SocketAddr> {
        self.ws_addr
    }

    /// Whether both ports speak TLS (`[tls]`).
    pub fn tls(&self) -> bool {
        self.tls.is_some()
    }

    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Binds and runs on a new thread.
    pub fn spawn(cfg: NodeConfig) -> io::Result<RunningNode> {
        let server = NodeServer::bind(cfg)?;
        let addr = server.local_addr();
        let ws_addr = server.ws_addr();
        let handle = server.shutdown_handle();
        let thread = std::thread::Builder::new()
            .name("tickwire-node".into())
            .spawn(move || server.run())?;
        Ok(RunningNode {
            addr,
            ws_addr,
            handle,
            thread: Some(thread),
        })
    }

    /// Runs the event loop until shut down; returns the node's counters.
    pub fn run(mut self) -> io::Result<Stats> {
        if !self.cfg.node.cpus.is_empty() {
            match crate::pin_current_thread(&self.cfg.node.cpus) {
                Ok(()) => info!("event loop pinned to CPUs {:?}", self.cfg.node.cpus),
                Err(e) => warn!("could not pin to CPUs {:?}: {e}", self.cfg.node.cpus),
            }
        }
        let start = Instant::now();
        let mut core_cfg = self.cfg.core_config();
        let node_id = tickwire_backbone::random_id();
        core_cfg.node_id = node_id;
        core_cfg.users = self.users.clone();
        let mut core = Node::new(core_cfg, start);
        let auth = crate::auth::Verifier::start(
            self.shutdown.waker.clone(),
            self.cfg.limits.max_pending_logins,
        )?;
        let mut auth_requests = Vec::new();
        let journal = (!self.cfg.journal.dir.is_empty()).then(|| {
            crate::journal::JournalThread::start(
                &self.cfg.journal,
                &mut core,
                self.shutdown.waker.clone(),
            )
        });
        let mut journal_requests = Vec::new();
        let mut files = self.files.take();
        let mut sockets: Vec<Option<Socket>> = Vec::new();
        let mut events = Events::with_capacity(1024);
        let hb = core.config().limits.heartbeat;
        // The node's own chores (idle buffers released); the core says when it needs
        // its tick (`Node::poll_timeout`).
        let chores_every = Duration::from_secs(1);
        let mut next_chores = start + chores_every;
        let stats_every = Duration::from_secs(self.cfg.node.stats_interval_s);
        let mut next_stats = start + stats_every;
        let mut last_stats = core.stats().clone();
        let mut dirty = Vec::new();
        let mut closing = Vec::new();
        let mut dead: Vec<ConnId> = Vec::new();
        let mut lingering: Vec<(ConnId, Instant)> = Vec::new();
        // Connections that used up their read share and may hold more data: edge-triggered
        // epoll will not report them again, so they are read next turn without waiting.
        let mut carry: Vec<ConnId> = Vec::new();
        let mut ready: Vec<ConnId> = Vec::new();
        let max_conns = self.cfg.limits.max_connections;
        let max_frame = self.cfg.limits.max_frame_bytes;
        let mut shutdown_deadline: Option<Instant> = None;
        let linger = Duration::from_millis(self.cfg.limits.close_linger_ms);
        let wait = self.cfg.node.wait;
        let spin_for = Duration::from_micros(self.cfg.node.spin_us);
        let mut last_event = start;
        let ws_cfg = Arc::new(SessionConfig {
            ping_timeout_s: ((hb.as_millis() * 3).div_ceil(1000) as u32).max(1),
            max_msg_size: self.cfg.websocket.max_msg_size,
            default_service: (!self.cfg.websocket.default_service.is_empty())
                .then(|| self.cfg.websocket.default_service.clone()),
            node_service: Some(crate::node_item::NODE_SERVICE.to_string()),
            dictionary: Arc::new(tickwire_proto::Dictionary::market_price()),
        });
        let mut ws_cache = UpdateCache::new(self.cfg.websocket.share_encoding);
        let rssl = self.rssl.clone();
        let mut providers: Vec<crate::rssl_provider::ProviderConn> = match &rssl {
            Some(shared) => self
                .cfg
                .rssl
                .providers
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    crate::rssl_provider::ProviderConn::start(
                        &mut core,
                        &p.address,
                        &p.user,
                        shared.session.dictionary.clone(),
                        shared.ripc.clone(),
                        Token(RSSL_PROVIDERS - i),
                        start,
                    )
                })
                .collect(),
            None => Vec::new(),
        };
        // With RSSL off, providers still need the dictionary, but no consumer does.
        let rssl = rssl.filter(|_| self.rssl_at != RsslAt::Off);
        let rssl_shared = rssl.is_some() && self.rssl_at == RsslAt::Shared;
        let http_answer = crate::wrong_port::http_answer(self.ws_addr, rssl_shared);
        // RSSL connections' pings: seen to every RSSL_TICK while any is open.
        let mut next_rssl_tick: Option<Instant> = None;
        let mut node_item = crate::node_item::NodeItem::start(&mut core, start);
        node_item.journal = journal.as_ref().map(|j| j.figures.clone());
        let mut next_node_item = start + Duration::from_secs(1);
        let mut backbone = self.start_backbone(&mut core, start)?;
        let mut upstream = self.start_upstream(&mut core, node_id, start)?;
        // With the backbone's driver here and a parking idle strategy: how the loop
        // waits (driver_wait.rs).
        let mut driver_wait = backbone.as_ref().map(crate::driver_wait::DriverWait::new);

        loop {
            let now = Instant::now();
            let mut timeout = core
                .poll_timeout()
                .min(next_chores)
                .min(next_node_item)
                .saturating_duration_since(now);
            // A backbone whose driver the event loop runs: with a parking idle strategy
            // the loop parks in epoll on the driver's pollers too, when the last turn's
            // wait says so; otherwise it needs a turn all the time, and waits by the
            // driver's idle strategy at the end of the turn.
            let driver_here = backbone.as_ref().is_some_and(|b| b.polled_by_event_loop());
            let driver_parks = match (&backbone, driver_wait.as_mut()) {
                (Some(b), Some(w)) => w.parks(b, self.poll.registry(), BACKBONE_DRIVER),
                _ => false,
            };
            let spinning = if driver_here {
                match driver_wait.as_ref().and_then(|w| w.block_for()) {
                    Some(at_most) if driver_parks => {
                        timeout = timeout.min(at_most);
                        false
                    }
                    _ => true,
                }
            } else {
                match wait {
                    WaitStrategy::Block => false,
                    WaitStrategy::Yield | WaitStrategy::Spin => true,
                    WaitStrategy::SpinThenBlock => {
                        now.saturating_duration_since(last_event) < spin_for
                    }
                }
            };
            if spinning {
                timeout = Duration::ZERO;
            }
            if !carry.is_empty() {
                timeout = Duration::ZERO;
            } else if !lingering.is_empty() {
                timeout = timeout.min(Duration::from_millis(10));
            }
            if let Some(at) = self.accept_trouble.next_retry() {
                timeout = timeout.min(at.saturating_duration_since(now));
            }
            if let Some(at) = next_rssl_tick {
                timeout = timeout.min(at.saturating_duration_since(now));
            }
            for p in &providers {
                if let Some(at) = p.poll_timeout() {
                    timeout = timeout.min(at.saturating_duration_since(now));
                }
            }
            if let Some(at) = backbone.as_ref().and_then(|b| b.poll_timeout()) {
                timeout = timeout.min(at.saturating_duration_since(now));
            }
            if let Some(u) = &upstream {
                timeout = timeout.min(u.poll_timeout().saturating_duration_since(now));
            }
            if let Some(at) = files.as_ref().and_then(|f| f.poll_timeout(now)) {
                timeout = timeout.min(at.saturating_duration_since(now));
            }
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            let now = Instant::now();
            ready.clear();
            ready.append(&mut carry);
            if !events.is_empty() {
                last_event = now;
            } else if wait == WaitStrategy::Yield && !driver_here {
                std::thread::yield_now();
            }
            // The driver's pollers say a datagram waits; the driver's duty cycle (in
            // `receive`) counts what it really did.
            let mut turn_work = events
                .iter()
                .filter(|e| e.token() != BACKBONE_DRIVER)
                .count()
                + ready.len();
            for event in events.iter() {
                match event.token() {
                    BACKBONE_DRIVER => {}
                    LISTENER | WS_LISTENER | RSSL_LISTENER => {
                        let listener = match event.token() {
                            LISTENER => Listener::Native,
                            WS_LISTENER => Listener::WebSocket,
                            _ => Listener::Rssl,
                        };
                        if shutdown_deadline.is_none() {
                            self.accept_all(
                                &mut core,
                                &mut sockets,
                                max_conns,
                                max_frame,
                                now,
                                listener,
                            );
                        }
                    }
                    WAKER => {}
                    UPSTREAM => {
                        if let Some(u) = upstream.as_mut() {
                            let readable =
                                event.is_readable() || event.is_read_closed() || event.is_error();
                            u.on_event(
                                &mut core,
                                self.poll.registry(),
                                readable,
                                event.is_writable(),
                                now,
                            );
                        }
                    }
                    Token(t) if t <= RSSL_PROVIDERS && RSSL_PROVIDERS - t < providers.len() => {
                        let readable =
                            event.is_readable() || event.is_read_closed() || event.is_error();
                        providers[RSSL_PROVIDERS - t].on_event(
                            &mut core,
                            self.poll.registry(),
                            readable,
                            event.is_writable(),
                            now,
                        );
                    }
                    Token(id) => {
                        if event.is_readable() || event.is_read_closed() || event.is_error() {
                            ready.push(id);
                        }
                        if event.is_writable() {
                            flush(&mut core, &mut sockets, id, &mut dead, &mut ws_cache, now);
                        }
                    }
                }
            }
            if shutdown_deadline.is_none() {
                let due = self.accept_trouble.due(now);
                for listener in [Listener::Native, Listener::WebSocket, Listener::Rssl] {
                    if due[listener as usize] {
                        self.accept_all(
                            &mut core,
                            &mut sockets,
                            max_conns,
                            max_frame,
                            now,
                            listener,
                        );
                    }
                }
            }
            ready.sort_unstable();
            ready.dedup();
            let metrics = crate::metrics::Extra {
                journal: journal.as_ref(),
                backbone: node_item.backbone.as_ref(),
                backbone_linked: backbone.as_ref().map(|b| b.link().is_some()),
                upstream: upstream.as_ref(),
                websocket_updates_encoded: ws_cache.misses,
                websocket_updates_reused: ws_cache.hits,
            };
            for &id in &ready {
                if read_some(
                    &mut core,
                    &mut sockets,
                    id,
                    now,
                    &mut dead,
                    &Gateways {
                        ws: &ws_cfg,
                        rssl: rssl.as_ref(),
                        rssl_shared,
                        http_answer: &http_answer,
                    },
                    &metrics,
                ) {
                    carry.push(id);
                }
                // A WebSocket connection its own side decided to close (an HTTP
                // answer, a close frame) gets the same linger as any other: a peer
                // that never closes and keeps sending is dropped in the end.
                let ws_closing = sockets.get(id).and_then(|s| s.as_ref()).is_some_and(|s| {
                    !s.dead
                        && (s.ws.as_ref().is_some_and(|w| w.close_after_flush)
                            || s.rssl.as_ref().is_some_and(|r| r.close_after_flush)
                            || s.refused_http)
                });
                if sockets
                    .get(id)
                    .and_then(|s| s.as_ref())
                    .is_some_and(|s| s.rssl.is_some())
                    && next_rssl_tick.is_none()
                {
                    next_rssl_tick = Some(now + RSSL_TICK);
                }
                if ws_closing {
                    start_linger(&mut sockets, &mut lingering, id, now + linger);
                }
            }

            // Secrets checked off the loop come back; new ones go to be checked.
            auth.deliver(&mut core, now);
            core.take_auth_requests(&mut auth_requests);
            for req in auth_requests.drain(..) {
                auth.submit(&mut core, req, self.users.clone(), now);
            }
            // Posts the journal has kept go on; new records go to be kept.
            if let Some(j) = &journal {
                j.deliver(&mut core, now);
                core.take_journal_requests(&mut journal_requests);
                j.submit(&mut core, &mut journal_requests, now);
            }
            if self.shutdown.reload.swap(false, Ordering::SeqCst) {
                self.reload_users(&mut core, now);
            }

            // The upstream link: what its upstream sent, its timers, (re)connecting.
            if let Some(u) = upstream.as_mut() {
                u.turn(&mut core, self.poll.registry(), now);
            }
            for p in providers.iter_mut() {
                p.turn(&mut core, self.poll.registry(), now);
            }

            // The backbone: what its receiver has (run here, or in its own thread, which
            // woke us), its timers. For the adaptive wait: what came from outside this
            // turn (not the driver's own timers), and whether the driver did anything.
            let mut turn_input = turn_work;
            let mut driver_busy = false;
            if let Some(b) = backbone.as_mut() {
                let got = b.receive(&mut core, now);
                turn_work += got.driver + got.messages;
                turn_input += got.messages;
                driver_busy = got.driver > 0;
                if b.poll_timeout().is_some_and(|at| now >= at) {
                    b.on_tick(&mut core, now);
                }
            }

            if now >= next_node_item && shutdown_deadline.is_none() {
                node_item.backbone = backbone.as_ref().map(|b| b.figures(now));
                node_item.upstream = upstream.as_ref().map(|u| u.state_text());
                node_item.path = match &upstream {
                    Some(u) => u.above().below(node_id, &self.cfg.node.name).to_string(),
                    None => tickwire_upstream::NodePath::default()
                        .below(node_id, &self.cfg.node.name)
                        .to_string(),
                };
                node_item.tick(&mut core, now);
                next_node_item = now + Duration::from_secs(1);
            }
            if now >= core.poll_timeout() {
                core.on_tick(now);
            }
            if next_rssl_tick.is_some_and(|at| now >= at) {
                // RIPC's pings, and consumers silent past their ping timeout.
                let mut open = 0;
                for id in 0..sockets.len() {
                    let Some(sock) = sockets[id].as_mut().filter(|s| !s.dead) else {
                        continue;
                    };
                    let Some(r) = sock.rssl.as_mut() else {
                        continue;
                    };
                    open += 1;
                    let closing = r.close_after_flush;
                    r.handle_timeout(now);
                    if r.write(&mut sock.transport).is_err() {
                        sock.dead = true;
                        dead.push(id);
                    } else if !closing && r.close_after_flush {
                        start_linger(&mut sockets, &mut lingering, id, now + linger);
                    }
                }
                next_rssl_tick = (open > 0).then(|| now + RSSL_TICK);
            }
            if now >= next_chores {
                next_chores = now + chores_every;
                // An empty input buffer is released: most subscribers send little
                // (requests, pings), and 64 KiB each adds up over thousands of them.
                // A busy connection pays one allocation per tick at most.
                for s in sockets.iter_mut().flatten() {
                    s.reader.shrink_if_idle(0);
                }
            }
            if shutdown_deadline.is_none() && self.shutdown.flag.load(Ordering::SeqCst) {
                info!("shutting down: closing every stream (closed-recover)");
                core.shutdown(now);
                shutdown_deadline = Some(now + Duration::from_secs(2));
            }

            // Files: what peers and the upstream sent to the files thread, its answers
            // (before the upstream link writes its bytes).
            if let Some(f) = files.as_mut() {
                f.turn(&mut core, upstream.as_mut(), backbone.as_mut());
            }

            // What the core wrote to the backbone's connections this turn goes out,
            // and its requests to the upstream link.
            if let Some(b) = backbone.as_mut() {
                b.pump(&mut core, now);
                driver_busy |= b.send_now() > 0;
            }
            if let Some(u) = upstream.as_mut() {
                u.pump(&mut core, self.poll.registry(), now);
                if let Some(f) = files.as_mut() {
                    f.intake_upstream(u);
                }
            }
            for p in providers.iter_mut() {
                p.pump(&mut core, self.poll.registry(), now);
            }
            core.take_dirty(&mut dirty);
            for &id in &dirty {
                flush(&mut core, &mut sockets, id, &mut dead, &mut ws_cache, now);
            }
            // The turn's updates are on their way: now their images catch up.
            core.settle();
            // An update's JSON is shared by the WebSocket sessions within one turn.
            ws_cache.clear();
            core.take_closing(&mut closing);
            for &id in &closing {
                flush(&mut core, &mut sockets, id, &mut dead, &mut ws_cache, now);
                start_linger(&mut sockets, &mut lingering, id, now + linger);
            }
            // Closing connections keep their socket until their last bytes (the status
            // saying why) are written and the peer has closed too, or the linger time
            // has passed. Closing at once could reset the connection (unread bytes from
            // the peer make the kernel send RST), and a reset loses what the peer had
            // not read yet: the status among it.
            lingering.retain(|&(id, deadline)| {
                let sock = sockets.get_mut(id).and_then(|s| s.as_mut());
                if let Some(s) = sock.filter(|s| !s.dead) {
                    if now < deadline {
                        let ws_pending = s.ws.as_ref().is_some_and(|w| !w.out.is_empty())
                            || s.rssl.as_ref().is_some_and(|r| r.pending() > 0);
                        if core.pending_output(id) > 0 || ws_pending || s.transport.has_pending() {
                            return true;
                        }
                        if !s.fin_sent {
                            s.transport.shutdown_write();
                            s.fin_sent = true;
                        }
                        return true;
                    }
                }
                if let Some(mut s) = sockets.get_mut(id).and_then(|s| s.take()) {
                    let _ = self.poll.registry().deregister(s.transport.tcp_mut());
                    let _ = s.transport.tcp().shutdown(std::net::Shutdown::Both);
                }
                core.on_disconnect(id, now);
                false
            });
            // Connections whose peer went away.
            for id in dead.drain(..) {
                lingering.retain(|&(l, _)| l != id);
                if let Some(mut s) = sockets.get_mut(id).and_then(|s| s.take()) {
                    let _ = self.poll.registry().deregister(s.transport.tcp_mut());
                    core.on_disconnect(id, now);
                }
            }

            if stats_every > Duration::ZERO && now >= next_stats {
                let s = core.stats().clone();
                let secs = (now - next_stats + stats_every).as_secs_f64();
                if s != last_stats {
                    let behind: Vec<String> = core
                        .connection_reports()
                        .into_iter()
                        .filter(|r| r.behind)
                        .map(|r| {
                            format!("{} ({}, {} bytes queued)", r.peer, r.user, r.queued_bytes)
                        })
                        .collect();
                    let per_s = |now: u64, then: u64| ((now - then) as f64 / secs).round() as u64;
                    tracing::info!(
                        connections = core.connection_count(),
                        items = core.item_count(),
                        updates_in_per_s = per_s(s.updates_in, last_stats.updates_in),
                        updates_out_per_s = per_s(s.updates_out, last_stats.updates_out),
                        refreshes_out = s.refreshes_out,
                        conflated = s.conflated_updates,
                        slow_consumer_disconnects = s.slow_consumer_disconnects,
                        behind = %if behind.is_empty() { "none".to_string() } else { behind.join(", ") },
                        "stats"
                    );
                }
                last_stats = s;
                next_stats = now + stats_every;
            }
            if let Some(b) = &backbone {
                match driver_wait.as_mut().filter(|_| driver_parks) {
                    Some(w) => w.after_turn(now, turn_input, driver_busy),
                    None => b.idle(turn_work),
                }
            }

            if let Some(deadline) = shutdown_deadline {
                let pending: usize = (0..sockets.len())
                    .filter(|&i| sockets[i].is_some())
                    .map(|i| core.pending_output(i))
                    .sum();
                if sockets.iter().all(|s| s.is_none()) || now >= deadline {
                    if pending > 0 {
                        warn!("exiting with {pending} bytes unsent to slow peers");
                    }
                    let stats = core.stats().clone();
                    tracing::info!(
                        connections_accepted = stats.connections_accepted,
                        logins = stats.logins,
                        updates_in = stats.updates_in,
                        updates_out = stats.updates_out,
                        refreshes_in = stats.refreshes_in,
                        refreshes_out = stats.refreshes_out,
                        requests = stats.requests,
                        slow_consumer_episodes = stats.slow_consumer_episodes,
                        conflated = stats.conflated_updates,
                        do_not_conflate_dropped = stats.do_not_conflate_dropped,
                        malformed_disconnects = stats.malformed_disconnects,
                        protocol_disconnects = stats.protocol_disconnects,
                        slow_consumer_disconnects = stats.slow_consumer_disconnects,
                        heartbeat_timeouts = stats.heartbeat_timeouts,
                        "node stopped"
                    );
                    if let Some(b) = &backbone {
                        let f = b.figures(now);
                        tracing::info!(
                            bytes_in = f.driver.bytes_received,
                            bytes_out = f.driver.bytes_sent,
                            naks_sent = f.driver.naks_sent,
                            naks_received = f.driver.naks_received,
                            retransmits_sent = f.driver.retransmits_sent,
                            sources_lost = f.sources_lost,
                            reimages = f.reimages,
                            link_restarts = f.link_restarts,
                            "backbone stopped"
                        );
                    }
                    if ws_cache.hits + ws_cache.misses > 0 {
                        info!(
                            "WebSocket updates: {} encoded, {} reused from another client's encoding (websocket.share_encoding = {})",
                            ws_cache.misses,
                            ws_cache.hits,
                            self.cfg.websocket.share_encoding
                        );
                    }
                    return Ok(stats);
                }
            }
        }
    }

    /// Starts the upstream link when `[upstream] nodes` lists any.
    fn start_upstream(
        &self,
        core: &mut Node,
        node_id: u64,
        now: Instant,
    ) -> io::Result<Option<crate::upstream::UpstreamLink>> {
        let cfg = &self.cfg.upstream;
        if cfg.nodes.is_empty() {
            return Ok(None);
        }
        let relay = cfg
            .relay_config(node_id, &self.cfg.node.name)
            .map_err(|e| io::Error::other(e.to_string()))?;
        Ok(Some(crate::upstream::UpstreamLink::start(
            core,
            relay,
            cfg.nodes.clone(),
            UPSTREAM,
            now,
        )))
    }

    /// Joins the backbone when `[backbone] role` is set.
    fn start_backbone(&self, core: &mut Node, now: Instant) -> io::Result<Option<Backbone>> {
        let cfg = &self.cfg.backbone;
        let Some(role) = cfg.role() else {
            return Ok(None);
        };
        let waker = self.shutdown.waker.clone();
        let name = &self.cfg.node.name;
        let key_file = cfg
            .key_file(now)
            .map_err(|e| io::Error::other(format!("cannot join the backbone: {e}")))?;
        let setup = tickwire_backbone::BackboneSetup {
            role,
            link: cfg.link_config(),
            source: cfg.source_config(name),
            edge: cfg.edge_config(name),
            key_file,
        };
        let b = Backbone::start(
            core,
            setup,
            std::sync::Arc::new(move || {
                let _ = waker.wake();
            }),
            now,
        )
        .map_err(|e| io::Error::other(format!("cannot join the backbone: {e}")))?;
        if b.polled_by_event_loop() && self.cfg.node.wait != WaitStrategy::Block {
            warn!(
                "node.wait is not used: the event loop runs the backbone's Aeron driver and waits by backbone.idle = {:?} (backbone.driver = \"thread\" gives the driver a thread of its own)",
                cfg.idle
            );
        }
        info!(
            "backbone: {} on {} (data stream {}, requests stream {}), {}",
            role.name(),
            cfg.channel,
            cfg.data_stream,
            cfg.request_stream,
            if b.authenticated() {
                format!("authenticated with the keys of {}", cfg.key_file)
            } else {
                "NOT authenticated".into()
            }
        );
        if !b.authenticated() {
            warn!("backbone: no [backbone] key_file: any host that can send to the channel is heard (it can inject data, keep a dead source live or fill the source table); `tickwire backbone keygen > FILE` makes a key file");
        }
        Ok(Some(b))
    }

    /// SIGHUP: the users file again. A file that does not load leaves the old users in
    /// place (and says why).
    fn reload_users(&mut self, core: &mut Node, now: Instant) {
        if self.cfg.security.users_file.is_empty() {
            warn!("reload asked, but no users file is configured ([security] users_file)");
            return;
        }
        match self.cfg.load_users() {
            Ok(users) => {
                info!(
                    target: "audit",
                    "users file {} reloaded: {} users",
                    self.cfg.security.users_file,
                    users.as_ref().map_or(0, |u| u.len())
                );
                self.users = users.clone();
                core.set_users(users, now);
            }
            Err(e) => error!("users file not reloaded, the previous one stays in force: {e}"),
        }
    }

    fn accept_all(
        &mut self,
        core: &mut Node,
        sockets: &mut Vec<Option<Socket>>,
        max_conns: usize,
        max_frame: usize,
        now: Instant,
        listener: Listener,
    ) {
        loop {
            let accepted = match listener {
                Listener::Native => self.listener.accept(),
                Listener::WebSocket => match &self.ws_listener {
                    Some(l) => l.accept(),
                    None => return,
                },
                Listener::Rssl => match &self.rssl_listener {
                    Some(l) => l.accept(),
                    None => return,
                },
            };
            let (mut stream, peer) = match accepted {
                Ok(x) => x,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of file descriptors and the like.
                    self.accept_trouble.failed(listener, &e, now);
                    return;
                }
            };
            // Room among the pending logins (the oldest idle one may be closed for it).
            if let tickwire_core::Admission::Refuse(text) = core.admit(&peer.to_string(), now) {
                refuse(&mut stream, &text, self.tls.is_some());
                continue;
            }
            let pending = core.awaiting_login_count();
            if core.connection_count() - pending >= max_conns {
                let text = format!("connection limit reached: {max_conns} connections");
                refuse(&mut stream, &text, self.tls.is_some());
                continue;
            }
            let _ = stream.set_nodelay(true);
            if self.cfg.limits.socket_send_buffer_bytes > 0 {
                set_send_buffer(&stream, self.cfg.limits.socket_send_buffer_bytes);
            }
            let id = core.connect(&peer.to_string(), now);
            if let Err(e) = self.poll.registry().register(
                &mut stream,
                Token(id),
                Interest::READABLE | Interest::WRITABLE,
            ) {
                warn!("cannot register connection from {peer}: {e}");
                core.on_disconnect(id, now);
                continue;
            }
            let transport = match Transport::new(stream, peer, self.tls.as_ref()) {
                Ok(t) => t,
                Err(e) => {
                    warn!("cannot start TLS with {peer}: {e}");
                    core.on_disconnect(id, now);
                    continue;
                }
            };
            if sockets.len() <= id {
                sockets.resize_with(id + 1, || None);
            }
            sockets[id] = Some(Socket {
                transport,
                reader: FrameReader::new(max_frame),
                dead: false,
                fin_sent: false,
                read_size: FIRST_READ,
                ws: (listener == Listener::WebSocket).then(|| {
                    Box::new(WsConn::with_allowed_origins(
                        &self.cfg.websocket.allowed_origins,
                    ))
                }),
                rssl: match (&self.rssl, listener) {
                    (Some(shared), Listener::Rssl) => {
                        Some(Box::new(RsslConn::new(shared, peer.to_string(), now)))
                    }
                    _ => None,
                },
                sniffing: listener == Listener::Native,
                refused_http: false,
                lingering: false,
            });
        }
    }
}

/// Sets SO_SNDBUF (the kernel doubles it for its bookkeeping and caps it at
/// net.core.wmem_max); a failure is logged, the connection kept.
fn set_send_buffer(stream: &TcpStream, bytes: usize) {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    // SAFETY: a valid socket descriptor and a pointer to a c_int of the given size.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        warn!(
            "cannot set the send buffer to {bytes} bytes: {}",
            io::Error::last_os_error()
        );
    }
}

/// Tells a connection over a limit why it is refused (best effort) and drops it.
/// With TLS the status cannot be sent before a handshake the node will not spend on a
/// connection it refuses: the client sees the connection closed; the node logs why.
fn refuse(stream: &mut TcpStream, text: &str, tls: bool) {
    if tls {
        debug!("connection refused before the TLS handshake: {text}");
        let _ = stream.shutdown(std::net::Shutdown::Both);
        return;
    }
    let mut w = FrameWriter::new(tickwire_proto::frame::MIN_MAX_FRAME);
    let _ = w.push(&Message::Status(Status {
        stream_id: 0,
        state: State {
            stream: StreamState::Closed,
            data: DataState::Suspect,
            code: code::TOO_MANY_CONNECTIONS,
            text,
        },
    }));
    let _ = stream.write(w.sealed_bytes());
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// What the protocols translated to the node's own share across connections.
#[derive(Clone, Copy)]
struct Gateways<'a> {
    ws: &'a Arc<SessionConfig>,
    rssl: Option<&'a Arc<RsslShared>>,
    /// RSSL is served on the node's own port too.
    rssl_shared: bool,
    /// The answer to HTTP on the node's own port.
    http_answer: &'a [u8],
}

/// Reads up to a fair share from one connection and hands whole frames to the core.
/// Returns true if the socket may still hold data (share used up).
fn read_some(
    core: &mut Node,
    sockets: &mut [Option<Socket>],
    id: ConnId,
    now: Instant,
    dead: &mut Vec<ConnId>,
    gateways: &Gateways<'_>,
    metrics: &crate::metrics::Extra<'_>,
) -> bool {
    let Gateways {
        ws: ws_cfg,
        rssl,
        rssl_shared,
        http_answer,
    } = *gateways;
    let Some(sock) = sockets.get_mut(id).and_then(|s| s.as_mut()) else {
        return false;
    };
    if sock.dead {
        return false;
    }
    if sock.refused_http {
        // Closing: what it still sends is dropped (unread bytes at close would reset
        // the connection and could lose the answer).
        let mut sink = [0u8; 4096];
        for _ in 0..16 {
            match sock.transport.read(&mut sink) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        return false;
    }
    if let Some(r) = sock.rssl.as_mut() {
        let mut bytes = Vec::new();
        let closed =
            crate::ws::read_into(&mut sock.transport, &mut bytes, READ_SHARE).unwrap_or(true);
        if !bytes.is_empty() {
            if !r.close_after_flush {
                core.on_bytes_received(id, now);
                core.set_wall_clock(unix_now_ns());
            }
            r.on_bytes(&bytes, core, id, now);
            if r.write(&mut sock.transport).is_err() {
                sock.dead = true;
                dead.push(id);
                return false;
            }
        }
        if closed {
            sock.dead = true;
            dead.push(id);
            return false;
        }
        return bytes.len() >= READ_SHARE;
    }
    if let Some(w) = sock.ws.as_mut() {
        let mut bytes = Vec::new();
        // A read error ends the connection like a close.
        let closed =
            crate::ws::read_into(&mut sock.transport, &mut bytes, READ_SHARE).unwrap_or(true);
        if !bytes.is_empty() {
            // What a peer sends after its connection started closing does not keep
            // it alive.
            if !w.close_after_flush {
                core.on_bytes_received(id, now);
            }
            let peer = sock
                .transport
                .tcp()
                .peer_addr()
                .map_or_else(|_| "?".to_string(), |a| a.to_string());
            w.on_bytes(&bytes, ws_cfg, core, id, now, &peer);
            if let Some(asked) = w.node_request.take() {
                let (status, content_type, body) = crate::node_http::answer(asked, core, metrics);
                w.out = tickwire_gateway::ws::http_response(status, content_type, body.as_bytes());
            }
            if w.write(&mut sock.transport).is_err() {
                sock.dead = true;
                dead.push(id);
                return false;
            }
        }
        if closed {
            sock.dead = true;
            dead.push(id);
            return false;
        }
        return bytes.len() >= READ_SHARE;
    }
    let mut total = 0;
    loop {
        let want = sock.read_size;
        let buf = sock.reader.spare(want);
        let full = buf.len();
        match sock.transport.read(buf) {
            Ok(0) => {
                sock.dead = true;
                dead.push(id);
                break;
            }
            Ok(n) => {
                if n == full && want < MAX_READ {
                    sock.read_size = (want * 2).min(MAX_READ);
                }
                sock.reader.filled(n);
                total += n;
                if sock.sniffing {
                    // HTTP by mistake (curl, a browser, a WebSocket client): told where
                    // HTTP is, in HTTP.
                    match crate::wrong_port::looks_like_http(sock.reader.unread()) {
                        Some(true) => {
                            sock.sniffing = false;
                            sock.refused_http = true;
                            debug!(
                                "{}: HTTP on the node's own port: answered where HTTP is",
                                peer_text(&sock.transport)
                            );
                            let _ = sock.transport.write(http_answer);
                            sock.reader = FrameReader::new(0);
                            return false;
                        }
                        None => continue,
                        Some(false) => sock.sniffing = rssl_shared,
                    }
                }
                if sock.sniffing {
                    // RSSL on the node's port: a RIPC ConnectReq tells itself apart
                    // from a native login by its first bytes.
                    match tickwire_rssl::ripc::looks_like_connect_req(sock.reader.unread()) {
                        None => continue,
                        Some(false) => sock.sniffing = false,
                        Some(true) => {
                            sock.sniffing = false;
                            let Some(shared) = rssl else { return false };
                            let first = sock.reader.unread().to_vec();
                            sock.reader = FrameReader::new(0);
                            let peer = peer_text(&sock.transport);
                            let mut r = Box::new(RsslConn::new(shared, peer, now));
                            core.on_bytes_received(id, now);
                            r.on_bytes(&first, core, id, now);
                            let failed = r.write(&mut sock.transport).is_err();
                            sock.rssl = Some(r);
                            if failed {
                                sock.dead = true;
                                dead.push(id);
                                return false;
                            }
                            // The rest of what the socket holds, as RSSL.
                            return true;
                        }
                    }
                }
                core.on_bytes_received(id, now);
                core.set_wall_clock(unix_now_ns());
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => {
                sock.dead = true;
                dead.push(id);
                break;
            }
        }
        // Hand over the frames as they complete, so the buffer stays small.
        if !deliver_frames(core, sock, id, now) {
            return false;
        }
        if total >= READ_SHARE {
            return true;
        }
    }
    // Also while the first bytes are still undecided: a frame length no frame can have
    // (0xFFFF_FFF0) is refused as it would be without RSSL on the port.
    deliver_frames(core, sock, id, now);
    false
}

/// A connection's peer address for logs.
fn peer_text(t: &Transport) -> String {
    t.tcp()
        .peer_addr()
        .map_or_else(|_| "?".to_string(), |a| a.to_string())
}

/// The wall clock for the core's latency samples (updates' send stamps are in it).
fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Passes every complete frame to the core; false if the stream was found malformed.
fn deliver_frames(core: &mut Node, sock: &mut Socket, id: ConnId, now: Instant) -> bool {
    loop {
        match sock.reader.next_frame() {
            Ok(Some(frame)) => core.on_frame(id, frame, now),
            Ok(None) => return true,
            Err(e) => {
                core.on_frame_error(id, &e, now);
                // The core queued the peer for closing; nothing more is read from it.
                return false;
            }
        }
    }
}

/// Writes as much of a connection's pending output as the socket takes. A subscriber
/// that is behind is topped up with its conflated updates as its queue drains. A
/// WebSocket connection's output is first turned into JSON.
fn flush(
    core: &mut Node,
    sockets: &mut [Option<Socket>],
    id: ConnId,
    dead: &mut Vec<ConnId>,
    ws_cache: &mut UpdateCache,
    now: Instant,
) {
    let Some(sock) = sockets.get_mut(id).and_then(|s| s.as_mut()) else {
        return;
    };
    // TLS records the socket did not take earlier (handshake, data rustls accepted, a
    // close_notify) go first, even when the core has nothing for this connection:
    // epoll is edge-triggered, this writable event is the only one.
    if sock.transport.flush_pending().is_err() {
        if !sock.dead {
            sock.dead = true;
            dead.push(id);
        }
        return;
    }
    if let Some(r) = sock.rssl.as_mut() {
        for _ in 0..16 {
            r.pull_from_core(core, id, now);
            if r.write(&mut sock.transport).is_err() {
                sock.dead = true;
                dead.push(id);
                return;
            }
            if r.pending() > 0 || core.pending_output(id) == 0 {
                break;
            }
        }
        return;
    }
    if let Some(w) = sock.ws.as_mut() {
        for _ in 0..16 {
            w.pull_from_core(core, id, ws_cache);
            if w.write(&mut sock.transport).is_err() {
                sock.dead = true;
                dead.push(id);
                return;
            }
            if !w.out.is_empty() || core.pending_output(id) == 0 {
                break;
            }
        }
        if w.close_after_flush && w.out.is_empty() && !sock.fin_sent {
            // The peer closes in turn (read 0), which ends the connection.
            sock.transport.shutdown_write();
            sock.fin_sent = true;
        }
        return;
    }
    loop {
        let Some(out) = core.output(id) else { return };
        let bytes = out.sealed_bytes();
        if bytes.is_empty() {
            if core.on_output_written(id) {
                continue;
            }
            if let Some(out) = core.output(id) {
                out.shrink_if_idle(KEEP_BUFFER);
            }
            return;
        }
        match sock.transport.write(bytes) {
            Ok(0) => {
                sock.dead = true;
                dead.push(id);
                return;
            }
            Ok(n) => out.consume(n),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                // Queue more for when the socket is writable again, if it drained enough.
                core.on_output_written(id);
                return;
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => {
                sock.dead = true;
                dead.push(id);
                return;
            }
        }
    }
}
