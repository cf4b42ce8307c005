//! The event loop's state and the phases of one turn (`NodeServer::run` is the loop
//! over them): wait for the earliest deadline of any part; hand out the events; read
//! the connections; every part's input and deadlines; the core's and the node's own
//! timers; every part's output; write the connections; close what is gone.

use super::connections::Connections;
use super::parts::{DriverPace, Parts, BACKBONE_DRIVER, RSSL_PROVIDERS};
use super::socket_io::{GatewayInput, Gateways};
use super::{Listener, NodeServer, LISTENER, RSSL_LISTENER, WAKER, WS_LISTENER};
use crate::config::{RsslAt, WaitStrategy};
use crate::part::{Cx, Readiness};
use log::{info, warn};
use mio::{Events, Token};
use std::io::{self, ErrorKind};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_core::{Node, Stats};
use tickwire_gateway::{SessionConfig, UpdateCache};

/// How long epoll may wait for `deadline`, measured from now, after every part has
/// given its deadline: a part with more to do at once says so with `Instant::now()`,
/// taken after the loop's own `now`, and must get no wait at all. (A wait of a few
/// nanoseconds would not do: epoll counts in milliseconds, and mio rounds a wait up
/// to the next one, so the part would wait a whole millisecond.)
fn timeout_until(deadline: Option<Instant>) -> Option<Duration> {
    let now = Instant::now();
    deadline.map(|t| t.saturating_duration_since(now))
}

/// The node's own chores (idle buffers released) this often.
const CHORES_EVERY: Duration = Duration::from_secs(1);
/// How long a shutting-down node waits for its connections' last bytes.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

pub(super) struct EventLoop {
    pub(super) server: NodeServer,
    pub(super) core: Node,
    pub(super) conns: Connections,
    parts: Parts,
    events: Events,
    next_chores: Instant,
    stats_log: super::report::StatsLog,
    /// Shutting down: until when the connections may drain.
    stopping: Option<Instant>,
    /// When the last event came (`node.wait = "spin-then-block"`).
    last_event: Instant,
    /// What came from outside this turn (events, connections read again): for the
    /// backbone's idle strategy.
    outside: usize,
}

impl EventLoop {
    /// The core and every part the configuration asks for, started.
    pub(super) fn start(mut server: NodeServer) -> io::Result<EventLoop> {
        let cfg = &server.cfg;
        if !cfg.node.cpus.is_empty() {
            match crate::pin_current_thread(&cfg.node.cpus) {
                Ok(()) => info!("event loop pinned to CPUs {:?}", cfg.node.cpus),
                Err(e) => warn!("could not pin to CPUs {:?}: {e}", cfg.node.cpus),
            }
        }
        let start = Instant::now();
        let mut core_cfg = cfg.core_config();
        let node_id = tickwire_backbone::random_id();
        core_cfg.node_id = node_id;
        core_cfg.users = server.users.clone();
        let mut core = Node::new(core_cfg, start);
        let waker = server.shutdown.waker.clone();
        let verifier = crate::auth::Verifier::start(waker.clone(), cfg.limits.max_pending_logins)?;
        let journal = (!cfg.journal.dir.is_empty())
            .then(|| crate::journal::JournalThread::start(&cfg.journal, &mut core, waker));
        let hb = core.config().limits.heartbeat;
        let ws = Arc::new(SessionConfig {
            ping_timeout_s: ((hb.as_millis() * 3).div_ceil(1000) as u32).max(1),
            max_msg_size: cfg.websocket.max_msg_size,
            default_service: (!cfg.websocket.default_service.is_empty())
                .then(|| cfg.websocket.default_service.clone()),
            node_service: Some(crate::node_item::NODE_SERVICE.to_string()),
            dictionary: Arc::new(tickwire_proto::Dictionary::market_price()),
        });
        let providers = match &server.rssl {
            Some(shared) => (cfg.rssl.providers.iter().enumerate())
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
        let rssl = server
            .rssl
            .clone()
            .filter(|_| server.rssl_at != RsslAt::Off);
        let rssl_shared = rssl.is_some() && server.rssl_at == RsslAt::Shared;
        let gateways = Gateways {
            ws,
            rssl,
            rssl_shared,
            http_answer: crate::wrong_port::http_answer(server.ws_addr, rssl_shared),
            input: GatewayInput::new(),
            metrics_renders: Default::default(),
        };
        let conns = Connections::new(
            gateways,
            UpdateCache::new(cfg.websocket.share_encoding),
            Duration::from_millis(cfg.limits.close_linger_ms),
        );
        let item = crate::node_item::NodeItem::start(&mut core, start);
        let backbone = server.start_backbone(&mut core, start)?;
        let upstream = server.start_upstream(&mut core, node_id, start)?;
        let stats_every = Duration::from_secs(cfg.node.stats_interval_s);
        let mut parts = Parts::new(
            verifier,
            server.users.clone(),
            journal,
            upstream,
            providers,
            backbone,
            server.files.take(),
            item,
            node_id,
            &server.cfg.node.name,
            start,
        );
        parts.metrics_token = cfg
            .websocket
            .metrics_token()
            .map_err(|e| io::Error::new(ErrorKind::InvalidInput, e.to_string()))?;
        Ok(EventLoop {
            stats_log: super::report::StatsLog::new(stats_every, &core, start),
            server,
            core,
            conns,
            parts,
            events: Events::with_capacity(1024),
            next_chores: start + CHORES_EVERY,
            stopping: None,
            last_event: start,
            outside: 0,
        })
    }

    /// Waits in epoll for events, or until the earliest deadline of any part; not at
    /// all while the wait strategy spins.
    pub(super) fn wait(&mut self) -> io::Result<()> {
        let now = Instant::now();
        let deadline = [
            self.core.poll_timeout(),
            self.parts.poll_timeout(now),
            self.conns.poll_timeout(),
            self.server.accept_trouble.next_retry(),
            Some(self.next_chores),
        ]
        .into_iter()
        .flatten()
        .min();
        let mut timeout = timeout_until(deadline);
        let wait = self.server.cfg.node.wait;
        let pace = self.parts.driver_pace(self.server.poll.registry());
        let spinning = match pace {
            DriverPace::Park(at_most) => {
                timeout = Some(timeout.map_or(at_most, |t| t.min(at_most)));
                false
            }
            DriverPace::Spin => true,
            DriverPace::Elsewhere => match wait {
                WaitStrategy::Block => false,
                WaitStrategy::Yield | WaitStrategy::Spin => true,
                WaitStrategy::SpinThenBlock => {
                    let spin_for = Duration::from_micros(self.server.cfg.node.spin_us);
                    now.saturating_duration_since(self.last_event) < spin_for
                }
            },
        };
        if spinning {
            timeout = Some(Duration::ZERO);
        }
        if let Err(e) = self.server.poll.poll(&mut self.events, timeout) {
            if e.kind() != ErrorKind::Interrupted {
                return Err(e);
            }
        }
        let now = Instant::now();
        if !self.events.is_empty() {
            self.last_event = now;
        } else if wait == WaitStrategy::Yield && matches!(pace, DriverPace::Elsewhere) {
            std::thread::yield_now();
        }
        Ok(())
    }

    /// Hands each event to its listener, part or connection; retries accepting when
    /// due.
    pub(super) fn handle_events(&mut self, now: Instant) {
        self.outside = self.conns.begin_turn();
        let events = std::mem::replace(&mut self.events, Events::with_capacity(0));
        for event in events.iter() {
            let token = event.token();
            // The driver's pollers say a datagram waits; the driver's duty cycle counts
            // what it really did.
            self.outside += usize::from(token != BACKBONE_DRIVER);
            let readable = event.is_readable() || event.is_read_closed() || event.is_error();
            let listener = match token {
                LISTENER => Some(Listener::Native),
                WS_LISTENER => Some(Listener::WebSocket),
                RSSL_LISTENER => Some(Listener::Rssl),
                _ => None,
            };
            if let Some(listener) = listener {
                if self.stopping.is_none() {
                    let _ = self.accept_all(listener, now);
                }
                continue;
            }
            if token == WAKER {
                continue;
            }
            let mut cx = Cx {
                core: &mut self.core,
                registry: self.server.poll.registry(),
                now,
            };
            let readiness = Readiness {
                readable,
                writable: event.is_writable(),
                hung_up: event.is_read_closed() || event.is_error(),
            };
            if !self.parts.handle_io(&mut cx, token, readiness) {
                self.conns
                    .handle_io(&mut self.core, token.0, readiness, now);
            }
        }
        self.events = events;
        if self.stopping.is_none() {
            self.accept_due(now);
        }
    }

    /// Reads every readable connection into the core.
    pub(super) fn read_connections(&mut self, now: Instant) {
        if let Some(tls) = &mut self.server.tls {
            self.conns
                .handshakes_back(&mut self.core, tls.handshakes.finished(), now);
            let _ = tls.handshakes.report(now);
        }
        let (encoded, reused) = (self.conns.ws_cache.misses, self.conns.ws_cache.hits);
        let mut view = self.parts.view(encoded, reused);
        view.tls = self.server.tls_figures();
        self.conns.read_ready(&mut self.core, &view, now);
    }

    /// Every part's input and deadlines.
    pub(super) fn handle_parts(&mut self, now: Instant) {
        let mut cx = Cx {
            core: &mut self.core,
            registry: self.server.poll.registry(),
            now,
        };
        self.parts.handle_input(&mut cx);
    }

    /// The node's own deadlines: the figures item, the core's heartbeats and timeouts,
    /// RSSL's pings, chores, a reload or shutdown asked for.
    pub(super) fn handle_timeouts(&mut self, now: Instant) {
        if self.server.shutdown.reload.swap(false, Ordering::SeqCst) {
            self.reload_users(now);
        }
        let mut cx = Cx {
            core: &mut self.core,
            registry: self.server.poll.registry(),
            now,
        };
        self.parts.handle_timeout(&mut cx, self.stopping.is_some());
        if self.core.poll_timeout().is_some_and(|t| now >= t) {
            self.core.handle_timeout(now);
        }
        self.conns.handle_timeout(now);
        if now >= self.next_chores {
            self.next_chores = now + CHORES_EVERY;
            self.conns.release_idle_buffers();
        }
        if self.stopping.is_none() && self.server.shutdown.flag.load(Ordering::SeqCst) {
            info!("shutting down: closing every stream (closed-recover)");
            self.core.shutdown(now);
            self.stopping = Some(now + SHUTDOWN_GRACE);
        }
    }

    /// What the core wrote for every part goes out.
    pub(super) fn pump_parts(&mut self, now: Instant) {
        let mut cx = Cx {
            core: &mut self.core,
            registry: self.server.poll.registry(),
            now,
        };
        self.parts.pump(&mut cx);
    }

    /// What the core wrote for the connections goes out; closing and dead ones go.
    pub(super) fn write_connections(&mut self, now: Instant) {
        self.conns.write_out(&mut self.core, now);
        self.conns
            .reap(&mut self.core, self.server.poll.registry(), now);
    }

    /// The turn's end: the stats line when due; the backbone's idle strategy.
    pub(super) fn end_turn(&mut self, now: Instant) {
        self.stats_log.handle_timeout(&self.core, now);
        self.parts.end_turn(now, self.outside);
    }

    /// Shutting down, with every connection closed or the grace time over: the node's
    /// counters.
    pub(super) fn finished(&mut self, now: Instant) -> Option<Stats> {
        let deadline = self.stopping?;
        if !self.conns.all_closed() && now < deadline {
            return None;
        }
        let unsent = self.conns.unsent(&self.core);
        if unsent > 0 {
            warn!("exiting with {unsent} bytes unsent to slow peers");
        }
        let stats = self.core.stats().clone();
        super::report::node_stopped(
            &stats,
            self.parts.backbone.as_ref().map(|b| &b.backbone),
            &self.conns.ws_cache,
            self.server.cfg.websocket.share_encoding,
            now,
        );
        Some(stats)
    }

    /// SIGHUP: the users file again. A file that does not load leaves the old users in
    /// place (and says why).
    fn reload_users(&mut self, now: Instant) {
        let cfg = &self.server.cfg;
        if cfg.security.users_file.is_empty() {
            warn!("reload asked, but no users file is configured ([security] users_file)");
            return;
        }
        match cfg.load_users() {
            Ok(users) => {
                info!(
                    target: "audit",
                    "users file {} reloaded: {} users",
                    cfg.security.users_file,
                    users.as_ref().map_or(0, |u| u.len())
                );
                self.server.users = users.clone();
                self.parts.logins.users = users.clone();
                self.core.set_users(users, now);
                if let Some(f) = self.parts.files.as_mut() {
                    f.users_changed();
                }
            }
            Err(e) => log::error!("users file not reloaded, the previous one stays in force: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_with_more_to_do_at_once_gets_no_wait() {
        // As a carried connection or a provider with more to read asks for its turn.
        let asap = Some(Instant::now());
        assert_eq!(timeout_until(asap), Some(Duration::ZERO));
        let later = timeout_until(Some(Instant::now() + Duration::from_secs(60)));
        assert!(
            later.is_some_and(|t| t > Duration::from_secs(59)),
            "{later:?}"
        );
        assert_eq!(timeout_until(None), None);
    }

    /// Connections queued faster than a turn takes them: each turn takes its share, and
    /// the loop comes back at once for the rest (epoll would not say so again), so that
    /// a flood of connects cannot keep the loop at its listener.
    #[test]
    fn a_turn_takes_a_share_of_queued_connections_and_the_next_turn_the_rest() {
        use super::super::accept::ACCEPTS_PER_TURN;
        let mut cfg = crate::config::NodeConfig::default();
        cfg.node.listen = "127.0.0.1:0".parse().unwrap();
        cfg.rssl.listen = "off".into();
        let mut lp = EventLoop::start(NodeServer::bind(cfg).unwrap()).unwrap();
        let addr = lp.server.local_addr();
        let queued = 2 * ACCEPTS_PER_TURN + 10;
        let clients: Vec<_> = (0..queued)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let mut taken = 0;
        let mut turns = 0;
        let give_up = Instant::now() + Duration::from_secs(20);
        while taken < queued {
            assert!(Instant::now() < give_up, "{taken} of {queued} taken");
            let now = Instant::now();
            let this_turn = lp.accept_all(Listener::Native, now);
            assert!(this_turn <= ACCEPTS_PER_TURN, "{this_turn} in one turn");
            if this_turn == ACCEPTS_PER_TURN {
                // The rest are due next turn, without a wait: not in this one.
                assert!(!lp.server.accept_trouble.due(now)[Listener::Native as usize]);
                assert_eq!(
                    timeout_until(lp.server.accept_trouble.next_retry()),
                    Some(Duration::ZERO)
                );
            }
            taken += this_turn;
            turns += 1;
        }
        assert_eq!(taken, queued);
        assert!(turns >= 3, "{turns} turns");
        drop(clients);
    }
}
