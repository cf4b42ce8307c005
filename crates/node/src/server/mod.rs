//! The event loop: one thread, mio (epoll), non-blocking sockets.
//!
//! Each loop turn reads everything readable (up to a fair share per connection), lets
//! the core process it, then writes each connection's pending bytes once. The first
//! message is never held back waiting for more: batching comes only from what arrived
//! in the same turn. A socket that cannot take all its bytes keeps them in its bounded
//! output buffer and is written again when epoll says it is writable; the node never
//! blocks on a peer.

//!
//! The loop's parts: `event_loop.rs` (the phases of a turn), `connections.rs` and
//! `socket_io.rs` (client connections), `accept.rs` (listeners), `parts.rs` (the
//! upstream link, RSSL providers, the backbone, logins, the journal, files), and
//! `report.rs` (the stats log).

mod accept;
mod connections;
mod event_loop;
mod parts;
mod report;
pub(crate) mod socket_io;

use crate::config::{NodeConfig, RsslAt, WaitStrategy};
use crate::rssl::RsslShared;
use accept::{AcceptTrouble, Listener};
use event_loop::EventLoop;
use log::{info, warn};
use mio::net::TcpListener;
use mio::{Interest, Poll, Token, Waker};
use std::io::{self, ErrorKind};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;
use tickwire_backbone::Backbone;
use tickwire_core::{Node, Stats};

const LISTENER: Token = Token(usize::MAX - 1);
const WAKER: Token = Token(usize::MAX - 2);
const WS_LISTENER: Token = Token(usize::MAX - 3);
/// RSSL's own port (`[rssl] listen` naming an address other than the node's).
const RSSL_LISTENER: Token = Token(usize::MAX - 6);

/// Stops a running node, or has it reload its users file, from another thread
/// (signal handler, test, demo).
#[derive(Clone)]
pub struct ShutdownHandle {
    flag: Arc<AtomicBool>,
    reload: Arc<AtomicBool>,
    waker: Arc<Waker>,
}

impl ShutdownHandle {
    /// Stops the node (its streams closed, closed-recover).
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
    tls: Option<crate::tls::TlsServer>,
    /// New TLS connections allowed now (`[tls] max_handshakes_per_s`).
    handshakes: accept::HandshakeShare,
    /// `[files]`: the files thread, started with its directories opened.
    files: Option<crate::files::FilesThread>,
    /// Which browser pages may open WebSockets (`websocket.allowed_origins`, and the
    /// names the node's own pages go by).
    origins: Arc<tickwire_gateway::ws::OriginRules>,
}

/// A node running on its own thread.
pub struct RunningNode {
    /// The node's address.
    pub addr: SocketAddr,
    /// The WebSocket API's address, if it is on.
    pub ws_addr: Option<SocketAddr>,
    handle: ShutdownHandle,
    thread: Option<JoinHandle<io::Result<Stats>>>,
}

impl RunningNode {
    /// A handle to stop it or have it reload its users.
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
                    // A consumer pings every third of its timeout: at most 3 heartbeats,
                    // as native peers get, and at least RIPC's 3 s (whole seconds); the
                    // core drops the connection when silent for the timeout granted.
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
        let tls = match cfg
            .load_tls()
            .map_err(|e| io::Error::new(ErrorKind::InvalidInput, e.to_string()))?
        {
            Some(config) => Some(crate::tls::TlsServer {
                config,
                handshakes: crate::tls::handshakes::Handshakes::start(
                    waker.clone(),
                    cfg.limits.max_pending_logins,
                )?,
            }),
            None => None,
        };
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
        if users.is_some() && !cfg.security.login_token.is_empty() {
            warn!(
                "[security] login_token is ignored: the users file ({}) says who may log in",
                cfg.security.users_file
            );
        }
        match &users {
            Some(u) => info!(
                "{} users loaded from {}; anonymous logins: {:?}",
                u.len(),
                cfg.security.users_file,
                cfg.security.anonymous
            ),
            // Not open: only holders of the shared token log in.
            None if !cfg.security.login_token.is_empty() => info!(
                "no users file ([security] users_file): a login needs [security] login_token, and anyone holding it may publish and subscribe"
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
                cfg.backbone.mtu,
                waker.clone(),
            )
            .map_err(|e| io::Error::new(ErrorKind::InvalidInput, e))?;
            Some(f)
        } else {
            None
        };
        let handshakes = accept::HandshakeShare::new(cfg.tls.max_handshakes_per_s, Instant::now());
        let origins = Arc::new(tickwire_gateway::ws::OriginRules::new(
            &cfg.websocket.allowed_origins,
            &crate::ws::machine_names(),
        ));
        Ok(NodeServer {
            files,
            origins,
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
            handshakes,
        })
    }

    /// Where the node listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Where the WebSocket API listens, if it is on.
    pub fn ws_addr(&self) -> Option<SocketAddr> {
        self.ws_addr
    }

    /// With `[tls]`: its figures since the start.
    fn tls_figures(&self) -> Option<crate::tls::TlsFigures> {
        let tls = self.tls.as_ref()?;
        let (refused_for_thread_behind, sessions_processed) = tls.handshakes.figures();
        Some(crate::tls::TlsFigures {
            refused_for_rate: self.handshakes.refused_total,
            refused_for_thread_behind,
            sessions_processed,
        })
    }

    /// Whether both ports speak TLS (`[tls]`).
    pub fn tls(&self) -> bool {
        self.tls.is_some()
    }

    /// A handle to stop it or have it reload its users.
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

    /// Runs the event loop until shut down; returns the node's counters. Each turn
    /// reads everything readable, lets every part and the core handle it and their
    /// deadlines, then writes each connection's pending bytes once.
    pub fn run(self) -> io::Result<Stats> {
        let mut node = EventLoop::start(self)?;
        loop {
            node.wait()?;
            let now = Instant::now();
            node.handle_events(now);
            node.read_connections(now);
            node.handle_parts(now);
            node.handle_timeouts(now);
            node.pump_parts(now);
            node.write_connections(now);
            node.end_turn(now);
            if let Some(stats) = node.finished(now) {
                return Ok(stats);
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
            parts::UPSTREAM,
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
        let mut link = cfg.link_config();
        link.files_stream = self.cfg.files.enabled().then_some(cfg.files_stream);
        let setup = tickwire_backbone::BackboneSetup {
            role,
            link,
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
            "backbone: {} on {} (data stream {}, requests stream {}{}), {}",
            role.name(),
            cfg.channel,
            cfg.data_stream,
            cfg.request_stream,
            if self.cfg.files.enabled() {
                match role {
                    tickwire_backbone::Role::Source | tickwire_backbone::Role::Both => format!(
                        ", files stream {} at the {} edge's pace",
                        cfg.files_stream, cfg.files_flow_control
                    ),
                    tickwire_backbone::Role::Edge => format!(
                        ", files stream {}, its own files up on stream {}",
                        cfg.files_stream, cfg.files_up_stream
                    ),
                }
            } else {
                String::new()
            },
            if b.authenticated() {
                let signing = b.files_keys().map(|(_, k)| k.signing());
                format!(
                    "authenticated with the keys of {}{}",
                    cfg.key_file,
                    signing.map_or(String::new(), |k| format!(
                        " (signing with key {:08x}, {})",
                        k.id,
                        k.mac().name()
                    ))
                )
            } else {
                "NOT authenticated".into()
            }
        );
        if !b.authenticated() {
            warn!("backbone: no [backbone] key_file: any host that can send to the channel is heard (it can inject data, keep a dead source live or fill the source table); `tickwire backbone keygen > FILE` makes a key file");
        }
        Ok(Some(b))
    }
}
