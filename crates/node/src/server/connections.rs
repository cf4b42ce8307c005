//! The node's client connections as the event loop keeps them: which are readable,
//! which have output, which are closing (and linger until their last bytes are out),
//! which are gone, and the RIPC pings of the RSSL ones.

use super::socket_io::{flush, read_some, Gateways, Socket};
use crate::part::Readiness;
use mio::Registry;
use std::time::{Duration, Instant};
use tickwire_core::{ConnId, Node};
use tickwire_gateway::UpdateCache;

/// How often RSSL connections' pings are seen to (their intervals are seconds).
const RSSL_TICK: Duration = Duration::from_millis(500);
/// Most connections lingering at once: past it some are closed at once, so that a
/// peer having the node close its connections (HTTP requests, each new one from an
/// address at its cap of pending logins closing that address's oldest, a login broken
/// on purpose) cannot hold thousands of sockets and their queues for the linger time.
/// Those that never logged in go first, then those that did; in each, those that have
/// all the node had for them (waiting only for their peer's close) before those still
/// receiving (a slow reader of a page, a slow consumer's last status); the oldest first.
const MAX_LINGERING: usize = 1024;

/// How often lingering connections are looked at while nothing else happens.
const LINGER_CHECK: Duration = Duration::from_millis(10);

pub(super) struct Connections {
    /// By connection id (the core's).
    sockets: Vec<Option<Socket>>,
    /// Readable this turn.
    ready: Vec<ConnId>,
    /// Connections that used up their read share and may hold more data: edge-triggered
    /// epoll will not report them again, so they are read next turn without waiting.
    carry: Vec<ConnId>,
    /// Peer gone (closed, reset, failed write): disconnected at the end of the turn.
    dead: Vec<ConnId>,
    /// Closing connections and until when they may linger.
    lingering: Vec<(ConnId, Instant)>,
    /// The core's lists, taken each turn.
    dirty: Vec<ConnId>,
    closing: Vec<ConnId>,
    /// An update's JSON is shared by the WebSocket sessions within one turn.
    pub ws_cache: UpdateCache,
    gateways: Gateways,
    linger: Duration,
    /// RSSL connections' pings: seen to every [`RSSL_TICK`] while any is open.
    next_rssl_tick: Option<Instant>,
}

impl Connections {
    pub(super) fn new(gateways: Gateways, ws_cache: UpdateCache, linger: Duration) -> Self {
        Connections {
            sockets: Vec::new(),
            ready: Vec::new(),
            carry: Vec::new(),
            dead: Vec::new(),
            lingering: Vec::new(),
            dirty: Vec::new(),
            closing: Vec::new(),
            ws_cache,
            gateways,
            linger,
            next_rssl_tick: None,
        }
    }

    /// A newly accepted connection (its id is the core's).
    pub(super) fn insert(&mut self, id: ConnId, socket: Socket) {
        if self.sockets.len() <= id {
            self.sockets.resize_with(id + 1, || None);
        }
        self.sockets[id] = Some(socket);
    }

    /// When the loop must turn even without input: at once for connections with more
    /// to read, soon while any lingers, at the next RSSL ping check.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        let soon = if !self.carry.is_empty() {
            Some(Instant::now())
        } else if !self.lingering.is_empty() {
            Some(Instant::now() + LINGER_CHECK)
        } else {
            None
        };
        [soon, self.next_rssl_tick].into_iter().flatten().min()
    }

    /// Starts a turn: the connections carried over are read again. Returns how many.
    pub(super) fn begin_turn(&mut self) -> usize {
        self.ready.clear();
        self.ready.append(&mut self.carry);
        self.ready.len()
    }

    /// Readiness of connection `id`: read later this turn, written now; a hang-up is
    /// remembered on its socket (see `Socket::hung_up`).
    pub(super) fn handle_io(
        &mut self,
        core: &mut Node,
        id: ConnId,
        readiness: Readiness,
        now: Instant,
    ) {
        if readiness.hung_up {
            if let Some(s) = self.sockets.get_mut(id).and_then(|s| s.as_mut()) {
                s.hung_up = true;
            }
        }
        if readiness.readable {
            self.ready.push(id);
        }
        let writable = readiness.writable;
        if writable {
            self.flush(core, id, now);
        }
    }

    /// TLS sessions back from the handshakes' thread: each connection is read this
    /// turn (its handshake may have failed, or plaintext came with its last records)
    /// and written (what the core queued meanwhile).
    pub(super) fn handshakes_back(
        &mut self,
        core: &mut Node,
        sessions: impl Iterator<Item = crate::tls::handshakes::HandshakeJob>,
        now: Instant,
    ) {
        for job in sessions {
            let id = job.conn;
            let Some(s) = self.sockets.get_mut(id).and_then(|s| s.as_mut()) else {
                continue;
            };
            if s.transport.handshake_back(job) {
                self.ready.push(id);
                self.flush(core, id, now);
            }
        }
    }

    /// Reads every readable connection (a fair share each) into the core.
    pub(super) fn read_ready(
        &mut self,
        core: &mut Node,
        view: &crate::node_view::Extra<'_>,
        now: Instant,
    ) {
        self.ready.sort_unstable();
        self.ready.dedup();
        let ready = std::mem::take(&mut self.ready);
        for &id in &ready {
            if read_some(
                core,
                &mut self.sockets,
                id,
                now,
                &mut self.dead,
                &mut self.gateways,
                view,
            ) {
                self.carry.push(id);
            }
            let Some(s) = self.sockets.get(id).and_then(|s| s.as_ref()) else {
                continue;
            };
            // A connection its own side decided to close (an HTTP answer, a close
            // frame) gets the same linger as any other: a peer that never closes and
            // keeps sending is dropped in the end.
            let closing = !s.dead
                && (s.ws.as_ref().is_some_and(|w| w.conn.close_after_flush)
                    || s.rssl.as_ref().is_some_and(|r| r.close_after_flush)
                    || s.refused_http);
            if s.rssl.is_some() && self.next_rssl_tick.is_none() {
                self.next_rssl_tick = Some(now + RSSL_TICK);
            }
            if closing {
                self.start_linger(id, now);
            }
        }
        self.ready = ready;
    }

    /// RIPC's pings, and RSSL consumers silent past their ping timeout.
    pub(super) fn handle_timeout(&mut self, now: Instant) {
        if self.next_rssl_tick.is_none_or(|at| now < at) {
            return;
        }
        let mut open = 0;
        for id in 0..self.sockets.len() {
            let Some(sock) = self.sockets[id].as_mut().filter(|s| !s.dead) else {
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
                self.dead.push(id);
            } else if !closing && r.close_after_flush {
                self.start_linger(id, now);
            }
        }
        self.next_rssl_tick = (open > 0).then(|| now + RSSL_TICK);
    }

    /// An empty input buffer is released: most subscribers send little (requests,
    /// pings), and 64 KiB each adds up over thousands of them. A busy connection pays
    /// one allocation per call at most.
    pub(super) fn release_idle_buffers(&mut self) {
        for s in self.sockets.iter_mut().flatten() {
            s.reader.shrink_if_idle(0);
        }
    }

    /// What the core queued this turn is written; connections it closes start to
    /// linger.
    pub(super) fn write_out(&mut self, core: &mut Node, now: Instant) {
        core.take_dirty(&mut self.dirty);
        let dirty = std::mem::take(&mut self.dirty);
        for &id in &dirty {
            self.flush(core, id, now);
        }
        self.dirty = dirty;
        // The turn's updates are on their way: now their images catch up.
        core.settle();
        self.ws_cache.clear();
        core.take_closing(&mut self.closing);
        let closing = std::mem::take(&mut self.closing);
        for &id in &closing {
            self.flush(core, id, now);
            self.start_linger(id, now);
        }
        self.closing = closing;
    }

    /// Closing connections keep their socket until their last bytes (the status saying
    /// why) are written and the peer has closed too, or the linger time has passed.
    /// Closing at once could reset the connection (unread bytes from the peer make the
    /// kernel send RST), and a reset loses what the peer had not read yet: the status
    /// among it. Connections whose peer went away go now.
    pub(super) fn reap(&mut self, core: &mut Node, registry: &Registry, now: Instant) {
        let over = self.over_the_cap(core, now);
        let sockets = &mut self.sockets;
        self.lingering.retain(|&(id, deadline)| {
            let cut = over.contains(&id);
            let sock = sockets.get_mut(id).and_then(|s| s.as_mut());
            if let Some(s) = sock.filter(|s| !s.dead && !cut) {
                if now < deadline {
                    if unsent(core, s, id) {
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
                let _ = registry.deregister(s.transport.tcp_mut());
                let _ = s.transport.tcp().shutdown(std::net::Shutdown::Both);
            }
            core.on_disconnect(id, now);
            false
        });
        for id in self.dead.drain(..) {
            self.lingering.retain(|&(l, _)| l != id);
            if let Some(mut s) = self.sockets.get_mut(id).and_then(|s| s.take()) {
                let _ = registry.deregister(s.transport.tcp_mut());
                core.on_disconnect(id, now);
            }
        }
    }

    /// The lingering connections that would stay, past [`MAX_LINGERING`], in the order
    /// they give way (see there).
    fn over_the_cap(&self, core: &Node, now: Instant) -> std::collections::HashSet<ConnId> {
        if self.lingering.len() <= MAX_LINGERING {
            return Default::default();
        }
        // [never logged in, logged in] x [all written, still receiving].
        let mut ranks: [Vec<ConnId>; 4] = Default::default();
        for &(id, deadline) in &self.lingering {
            let socket = self.sockets.get(id).and_then(|s| s.as_ref());
            let Some(s) = socket.filter(|s| !s.dead) else {
                continue;
            };
            if now >= deadline {
                continue;
            }
            let rank = 2 * usize::from(core.ever_logged_in(id)) + usize::from(unsent(core, s, id));
            ranks[rank].push(id);
        }
        let staying: usize = ranks.iter().map(Vec::len).sum();
        let excess = staying.saturating_sub(MAX_LINGERING);
        ranks.into_iter().flatten().take(excess).collect()
    }

    /// Writes what connection `id` has pending, as far as its socket takes it.
    fn flush(&mut self, core: &mut Node, id: ConnId, now: Instant) {
        flush(
            core,
            &mut self.sockets,
            id,
            &mut self.dead,
            &mut self.ws_cache,
            now,
        );
    }

    /// No connection is left.
    pub(super) fn all_closed(&self) -> bool {
        self.sockets.iter().all(|s| s.is_none())
    }

    /// Bytes the core still holds for the open connections.
    pub(super) fn unsent(&self, core: &Node) -> usize {
        (0..self.sockets.len())
            .filter(|&i| self.sockets[i].is_some())
            .map(|i| core.pending_output(i))
            .sum()
    }

    /// Puts a connection the node is closing in the lingering list, once: a second
    /// expiry would disconnect whoever reuses the id. One still in its TLS handshake
    /// is closed at once: the reason could not reach it, and finishing the handshake
    /// would cost the node a key exchange for nothing (a peer that has its connections
    /// closed as fast as it opens them would keep a CPU at its crypto).
    fn start_linger(&mut self, id: ConnId, now: Instant) {
        let socket = self.sockets.get(id).and_then(|s| s.as_ref());
        let deadline = match socket.is_some_and(|s| s.transport.handshaking()) {
            true => now,
            false => now + self.linger,
        };
        match self.sockets.get_mut(id).and_then(|s| s.as_mut()) {
            Some(s) if s.lingering => {}
            Some(s) => {
                s.lingering = true;
                self.lingering.push((id, deadline));
            }
            None => self.lingering.push((id, deadline)),
        }
    }
}

/// Whether anything for connection `id` is still to be written: the core's queue, its
/// gateway's, or TLS records.
fn unsent(core: &Node, s: &Socket, id: ConnId) -> bool {
    let gateway = s.ws.as_ref().is_some_and(|w| !w.conn.out.is_empty())
        || s.rssl.as_ref().is_some_and(|r| r.pending() > 0);
    core.pending_output(id) > 0 || gateway || s.transport.has_pending()
}
