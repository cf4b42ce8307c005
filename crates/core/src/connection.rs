//! A connection's life in the core: connecting (sockets and the node's in-process parts),
//! frames in and their dispatch by role, time-outs and heartbeats, output, and its end.

use crate::admission::{self, LogName};
use crate::fan_out::{needs_overflow_check, UpdateLookahead};
use crate::security::Identity;
use crate::streams::StreamMap;
use crate::{Conn, ConnId, ConnRole, InternalPeer, Node, MAX_TICK_INTERVAL, NODE_STREAM_BASE};
use rustc_hash::FxHashMap;
use std::time::{Duration, Instant};
use tickwire_proto::frame::FrameWriter;
use tickwire_proto::{
    code, DataState, DecodeError, Message, MessageIter, SlowConsumerPolicy, State, Status,
    StreamState,
};
use tracing::{info, warn};

impl Node {
    /// A new connection from `peer` (a description for logs, e.g. its address).
    pub fn connect(&mut self, peer: &str, now: Instant) -> ConnId {
        self.now = now;
        self.tick_by(now + self.cfg.limits.login_timeout);
        self.stats.connections_accepted += 1;
        self.awaiting_login += 1;
        let ip = admission::peer_ip(peer);
        let conn = Conn {
            role: ConnRole::AwaitingLogin,
            peer: peer.to_string(),
            ip,
            user: String::new(),
            application: String::new(),
            out: FrameWriter::new(self.cfg.limits.max_frame),
            last_rx: now,
            last_tx: now,
            last_ping: now,
            silence_limit: None,
            logged_in: false,
            dirty: false,
            sub_streams: FxHashMap::default(),
            pub_streams: StreamMap::default(),
            next_node_stream: NODE_STREAM_BASE,
            services: Vec::new(),
            policy: SlowConsumerPolicy::Conflate,
            behind_bytes: self.cfg.limits.max_output_bytes,
            behind_messages: self.cfg.limits.max_output_messages,
            conflation: None,
            directory_stale: false,
            connected_at: now,
            identity: Identity::Open,
            internal: false,
            pending_login: None,
            http: None,
            slow_episodes: 0,
            conflated_updates: 0,
            do_not_conflate_dropped: 0,
            queue_high_water: 0,
        };
        let id = if let Some(id) = self.free_conns.pop() {
            self.conns[id] = Some(conn);
            id
        } else {
            self.conns.push(Some(conn));
            self.conns.len() - 1
        };
        self.login_pending(id, ip, now);
        id
    }

    /// Whether `conn` is a connection the core still serves (not closing, not gone). An
    /// in-process peer checks it: the core may close it like any peer (e.g. past the
    /// hard bound on its queue), and its id is reused once it is gone.
    pub fn is_live(&self, conn: ConnId) -> bool {
        self.conns
            .get(conn)
            .and_then(|c| c.as_ref())
            .is_some_and(|c| c.role != ConnRole::Closing)
    }

    /// A connection for one of the node's own in-process peers (its figures item, an
    /// upstream link, the backbone): logs in without a check and may do everything.
    /// A service it may not carry (another publisher's, past the service limit) is
    /// left out without closing it. If the core closes it all the same (past the hard
    /// bound on its queue), its id stays closed, never another connection's, until
    /// [`Node::release_internal`].
    pub fn connect_internal(&mut self, peer: &str, now: Instant) -> ConnId {
        let id = self.connect(peer, now);
        if let Some(c) = self.conn_mut(id) {
            c.internal = true;
        }
        id
    }

    /// An in-process peer ([`Node::connect_internal`]) logged in as `who`, ready for
    /// typed messages ([`Node::on_message`]): the one way the node's own parts join
    /// its core.
    pub fn join_internal(&mut self, who: &InternalPeer<'_>, now: Instant) -> ConnId {
        let conn = self.connect_internal(who.peer, now);
        let login = Message::Login(tickwire_proto::Login {
            version_min: tickwire_proto::PROTOCOL_VERSION_MIN,
            version_max: tickwire_proto::PROTOCOL_VERSION_MAX,
            role: who.role,
            application: who.application,
            user: who.user,
            token: "",
            slow_consumer: who.slow_consumer,
        });
        self.on_message(conn, &login, now);
        conn
    }

    /// Bytes waiting to be sent on `conn` (seal before writing: use `sealed_bytes`).
    /// A connection's output, to write; what is queued then counts toward its
    /// high-water mark (once per write, not per message).
    pub fn output(&mut self, conn: ConnId) -> Option<&mut FrameWriter> {
        let c = self.conns.get_mut(conn)?.as_mut()?;
        c.queue_high_water = c.queue_high_water.max(c.out.pending_len());
        Some(&mut c.out)
    }

    /// Moves the ids of connections with new output into `into` (cleared first).
    pub fn take_dirty(&mut self, into: &mut Vec<ConnId>) {
        into.clear();
        std::mem::swap(into, &mut self.dirty);
        for &c in into.iter() {
            if let Some(conn) = self.conns.get_mut(c).and_then(|c| c.as_mut()) {
                conn.dirty = false;
            }
        }
    }

    /// Moves the ids of connections the node has finished with into `into`: flush what
    /// they have pending, close the socket, then call [`Node::on_disconnect`].
    pub fn take_closing(&mut self, into: &mut Vec<ConnId>) {
        into.clear();
        std::mem::swap(into, &mut self.closing);
    }

    /// The peer's socket is gone (or the caller closed it): forget the connection.
    pub fn on_disconnect(&mut self, conn: ConnId, now: Instant) {
        self.merge_deferred();
        self.now = now;
        let Some(c) = self.conns.get(conn).and_then(|c| c.as_ref()) else {
            return;
        };
        // An in-process peer's id, let go of (`release_internal`), may be its new link's
        // by now: a late end of the old one does not end it.
        if c.internal && c.role != ConnRole::Closing {
            return;
        }
        // A session its peer ended (the node's own closings were logged with their
        // reason when it decided them; connections that never logged in, such as HTTP
        // requests, are not sessions).
        if matches!(c.role, ConnRole::Subscriber | ConnRole::Publisher) && !c.internal {
            info!(
                peer = %c.peer, role = ?c.role, user = %LogName(&c.user), application = %LogName(&c.application),
                reason = "closed by the peer", "disconnected"
            );
        }
        self.detach(conn, "connection lost");
        if self.cfg.files {
            self.forget_files_of(conn);
            self.files_gone.push(conn);
        }
        self.closing.retain(|&c| c != conn);
        self.overflowed.retain(|&c| c != conn);
        self.dirty.retain(|&c| c != conn);
        if self.conns[conn].as_ref().is_some_and(|c| c.internal) {
            // An in-process peer still holds this id: it stays closed (`is_live` says
            // so) and is not given to the next connection, whose Welcome and data the
            // peer would otherwise take as its own, until the peer lets it go
            // (`release_internal`).
            self.handle_overflows();
            return;
        }
        self.conns[conn] = None;
        self.closing_conns -= 1;
        // The id is reused by the next connection: nothing queued for this one may
        // reach it.
        self.free_conns.push(conn);
        self.handle_overflows();
    }

    /// An in-process peer lets go of its closed connection (see
    /// [`Node::connect_internal`]): its id may now be reused.
    pub fn release_internal(&mut self, conn: ConnId) {
        self.merge_deferred();
        let closed_internal = self
            .conns
            .get(conn)
            .and_then(|c| c.as_ref())
            .is_some_and(|c| c.internal && c.role == ConnRole::Closing);
        if closed_internal {
            self.conns[conn] = None;
            self.closing_conns -= 1;
            // Its id may be the next connection's: the caller is not to close it.
            self.closing.retain(|&c| c != conn);
            self.dirty.retain(|&c| c != conn);
            self.free_conns.push(conn);
        }
    }

    /// Bytes arrived on `conn` (perhaps not yet a whole frame): the peer is alive.
    pub fn on_bytes_received(&mut self, conn: ConnId, now: Instant) {
        if let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) {
            c.last_rx = now;
        }
    }

    /// The connection's transport agreed with its peer how often the peer speaks (an
    /// RSSL consumer's RIPC ping timeout, whole seconds): it is dropped when silent for
    /// `limit`, not for 3 heartbeat intervals.
    pub fn set_silence_limit(&mut self, conn: ConnId, limit: Duration) {
        if let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) {
            c.silence_limit = Some(limit);
        }
    }

    /// The connection's bytes could not be framed (bad length prefix): tell it and close.
    pub fn on_frame_error(&mut self, conn: ConnId, err: &DecodeError, now: Instant) {
        self.merge_deferred();
        self.now = now;
        self.stats.malformed_disconnects += 1;
        let text = format!("malformed frame: {err}");
        self.reject(conn, code::MALFORMED, &text);
    }

    /// One message from an in-process peer (the node's own figures, an upstream link,
    /// a backbone role), as it is: no encoding for the core to decode again. An update
    /// is encoded once here, since the core forwards its encoding to subscribers.
    pub fn on_message(&mut self, conn: ConnId, msg: &Message<'_>, now: Instant) {
        self.now = now;
        let internal = match self.conns.get_mut(conn).and_then(|c| c.as_mut()) {
            Some(c) if c.role != ConnRole::Closing => {
                c.last_rx = now;
                c.internal
            }
            _ => return,
        };
        if internal && !matches!(msg, Message::Update(_)) {
            self.on_message_from(conn, msg, &[]);
            self.handle_overflows();
            return;
        }
        // An update's encoding is what subscribers get; a peer whose login may be
        // verified off the loop takes the frame path (which holds what follows a
        // login until it is verified).
        let mut buf = std::mem::take(&mut self.scratch_message);
        buf.clear();
        if msg.encode(&mut buf).is_ok() {
            if internal {
                self.on_message_from(conn, msg, &buf);
                self.handle_overflows();
            } else {
                self.on_frame(conn, &buf, now);
            }
        }
        self.scratch_message = buf;
    }

    /// Processes one received frame payload.
    pub fn on_frame(&mut self, conn: ConnId, payload: &[u8], now: Instant) {
        self.frame_in(conn, payload, now, false);
    }

    /// A frame from an in-process peer whose every message it decoded in full itself
    /// (an upstream link forwarding what its upstream sent): the field lists are not
    /// walked again. From any other connection it is an ordinary frame.
    pub fn on_checked_frame(&mut self, conn: ConnId, payload: &[u8], now: Instant) {
        let internal = self
            .conns
            .get(conn)
            .and_then(|c| c.as_ref())
            .is_some_and(|c| c.internal);
        self.frame_in(conn, payload, now, internal);
    }

    /// A frame the node's own code encoded for a connection whose protocol it
    /// translates (RSSL): its field lists, built by `FieldListWriter`, which writes only
    /// what a decoder accepts, are not walked again. The rest of each message is
    /// checked as in any frame.
    pub fn on_translated_frame(&mut self, conn: ConnId, payload: &[u8], now: Instant) {
        self.frame_in(conn, payload, now, true);
    }

    pub(crate) fn frame_in(&mut self, conn: ConnId, payload: &[u8], now: Instant, checked: bool) {
        self.now = now;
        match self.conns.get_mut(conn).and_then(|c| c.as_mut()) {
            Some(c) if c.role != ConnRole::Closing => c.last_rx = now,
            _ => return,
        }
        if self.hold_if_authenticating(conn, payload) {
            self.handle_overflows();
            return;
        }
        let mut ahead = UpdateLookahead::new(payload);
        let messages = if checked {
            MessageIter::already_checked(payload)
        } else {
            MessageIter::new(payload)
        };
        for raw in messages {
            let raw = match raw {
                Ok(raw) => raw,
                Err(err) => {
                    self.stats.malformed_disconnects += 1;
                    let text = format!("malformed message: {err}");
                    self.reject(conn, code::MALFORMED, &text);
                    break;
                }
            };
            self.prefetch_ahead(conn, &mut ahead);
            self.on_message_from(conn, &raw.message, raw.encoded);
            if self.role(conn) == Some(ConnRole::Closing) {
                break;
            }
            // Only a Login can start a verification (checked for it alone: this loop is
            // the hot path of every update).
            if matches!(raw.message, Message::Login(_))
                && self
                    .conn_mut(conn)
                    .is_some_and(|c| c.pending_login.is_some())
            {
                // The login is being verified: the rest of the frame waits for it.
                let offset = raw.encoded.as_ptr() as usize - payload.as_ptr() as usize;
                let rest = &payload[offset + raw.encoded.len()..];
                if !rest.is_empty() {
                    self.hold_if_authenticating(conn, rest);
                }
                break;
            }
        }
        self.handle_overflows();
    }

    /// Heartbeats and timeouts. Call at least every quarter heartbeat interval.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.merge_deferred();
        self.now = now;
        let hb = self.cfg.limits.heartbeat;
        let login_timeout = self.cfg.limits.login_timeout;
        let mut timed_out = Vec::new();
        let mut next = now + MAX_TICK_INTERVAL;
        for (id, slot) in self.conns.iter_mut().enumerate() {
            let Some(c) = slot else { continue };
            // The node's own in-process parts are not pinged nor timed out: each
            // watches its own transport (an upstream link its heartbeats, an RSSL
            // provider link RIPC's pings), and one waiting for its peer to come up
            // keeps its place in the core.
            if c.role == ConnRole::Closing || c.internal {
                continue;
            }
            // This connection's next deadline, as it stands after this tick (traffic
            // meanwhile only moves it later: a tick then finds nothing to do).
            let silence = c.silence_limit.unwrap_or(hb * 3);
            next = next.min(c.last_rx + silence);
            if c.role == ConnRole::AwaitingLogin {
                next = next.min(c.connected_at + login_timeout);
            }
            if now.saturating_duration_since(c.last_rx) >= silence {
                timed_out.push((id, Some(silence), c.silence_limit.is_some()));
                continue;
            }
            if c.role == ConnRole::AwaitingLogin
                && now.saturating_duration_since(c.connected_at) >= self.cfg.limits.login_timeout
            {
                timed_out.push((id, None, false));
                continue;
            }
            // A ping when the node has sent nothing for an interval, or has received
            // nothing for one (a client that only answers pings, as WebSocket JSON
            // clients do, then answers before the timeout), at most once an interval.
            let tx_idle = now.saturating_duration_since(c.last_tx) >= hb;
            let rx_idle = now.saturating_duration_since(c.last_rx) >= hb
                && now.saturating_duration_since(c.last_ping) >= hb;
            if c.role != ConnRole::AwaitingLogin && (tx_idle || rx_idle) {
                let token = now.saturating_duration_since(c.last_rx).as_nanos() as u64;
                let _ = c.out.push(&Message::Ping(token));
                c.last_tx = now;
                c.last_ping = now;
                if !c.dirty {
                    c.dirty = true;
                    self.dirty.push(id);
                }
            }
            if c.role != ConnRole::AwaitingLogin {
                next = next
                    .min(c.last_tx + hb)
                    .min(c.last_rx.max(c.last_ping) + hb);
            }
        }
        self.next_tick = next;
        self.expire_services(now);
        self.end_lingering(now);
        self.expire_posts(now);
        self.redeliver_ready();
        self.sessions.expire(now);
        for (id, silence, agreed) in timed_out {
            let text = match silence {
                None => format!(
                    "no login within {} ms (limits.login_timeout_ms)",
                    self.cfg.limits.login_timeout.as_millis()
                ),
                Some(silence) => {
                    self.stats.heartbeat_timeouts += 1;
                    let why = match agreed {
                        true => "the ping timeout agreed",
                        false => "3 heartbeat intervals",
                    };
                    format!("nothing received for {} ms ({why})", silence.as_millis())
                }
            };
            self.reject(id, code::TIMEOUT, &text);
        }
        self.handle_overflows();
    }

    /// Node shutdown: every subscriber stream gets closed-recover, every connection is
    /// queued for closing. Flush outputs, then exit.
    pub fn shutdown(&mut self, now: Instant) {
        self.merge_deferred();
        self.now = now;
        self.shutting_down = true;
        let ids: Vec<ConnId> = (0..self.conns.len())
            .filter(|&i| self.conns[i].is_some())
            .collect();
        for id in ids {
            let streams: Vec<u32> = self.conns[id]
                .as_ref()
                .map(|c| c.sub_streams.keys().copied().collect())
                .unwrap_or_default();
            let state = State {
                stream: StreamState::ClosedRecover,
                data: DataState::Suspect,
                code: code::SHUTDOWN,
                text: "node shutting down",
            };
            for sid in streams {
                self.send(
                    id,
                    &Message::Status(Status {
                        stream_id: sid,
                        state,
                    }),
                );
            }
            self.reject(id, code::SHUTDOWN, "node shutting down");
        }
    }

    pub(crate) fn role(&self, conn: ConnId) -> Option<ConnRole> {
        self.conns.get(conn)?.as_ref().map(|c| c.role)
    }

    pub(crate) fn conn_mut(&mut self, conn: ConnId) -> Option<&mut Conn> {
        self.conns.get_mut(conn)?.as_mut()
    }

    /// Queues a message on a connection.
    pub(crate) fn send(&mut self, conn: ConnId, msg: &Message<'_>) {
        let now = self.now;
        if let Message::Status(s) = msg {
            let behind = self
                .conns
                .get(conn)
                .and_then(|c| c.as_ref())
                .and_then(|c| c.conflation.as_deref());
            if let Some(cf) = behind {
                let pending = cf.has_pending(s.stream_id);
                // Behind: an open-state status waits with the stream's pending update;
                // a closing one goes now, after that update (order is kept per stream).
                if self.defer_status(conn, s) {
                    return;
                }
                if pending {
                    self.write_pending_now(conn, s.stream_id);
                }
            }
        }
        let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return;
        };
        if let Err(e) = c.out.push(msg) {
            warn!("could not encode a message for {}: {e}", c.peer);
            return;
        }
        c.last_tx = now;
        if !c.dirty {
            c.dirty = true;
            self.dirty.push(conn);
        }
        if needs_overflow_check(c) {
            self.overflowed.push(conn);
        }
    }

    /// Sends a connection-level closed status, detaches the connection and queues it
    /// for closing.
    pub(crate) fn reject(&mut self, conn: ConnId, code: u16, text: &str) {
        let Some(role) = self.role(conn) else { return };
        if role == ConnRole::Closing {
            return;
        }
        if code == code::LOGIN_REJECTED {
            self.stats.logins_refused += 1;
        }
        // A peer can have its connections closed before login at will: those warnings
        // are held to a few a window.
        let held = match role {
            ConnRole::AwaitingLogin => self.guard.prelogin_log.allow(self.now),
            _ => Some(0),
        };
        let c = self.conns[conn].as_ref();
        match (code != code::SHUTDOWN, held, c) {
            (true, Some(0), Some(c)) => warn!(
                peer = %c.peer, ?role, user = %LogName(&c.user), application = %LogName(&c.application),
                reason = %text, "disconnecting"
            ),
            (true, Some(held), Some(c)) => warn!(
                peer = %c.peer, ?role, user = %LogName(&c.user), application = %LogName(&c.application),
                reason = %text, closed_before_login_not_logged = held, "disconnecting"
            ),
            _ => {}
        }
        let stream = if code == code::SHUTDOWN || code == code::SLOW_CONSUMER {
            StreamState::ClosedRecover
        } else {
            StreamState::Closed
        };
        self.send(
            conn,
            &Message::Status(Status {
                stream_id: 0,
                state: State {
                    stream,
                    data: DataState::Suspect,
                    code,
                    text,
                },
            }),
        );
        self.detach(conn, text);
        if let Some(c) = self.conn_mut(conn) {
            c.role = ConnRole::Closing;
        }
        self.closing.push(conn);
    }

    /// Removes a connection from every item and service it touches.
    pub(crate) fn detach(&mut self, conn: ConnId, reason: &str) {
        let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return;
        };
        let (role, ip) = (c.role, c.ip);
        c.role = ConnRole::Closing;
        if role == ConnRole::AwaitingLogin {
            self.awaiting_login -= 1;
        }
        if role != ConnRole::Closing {
            self.closing_conns += 1;
        }
        match role {
            ConnRole::Subscriber => {
                let streams: Vec<u32> = c.sub_streams.keys().copied().collect();
                for sid in streams {
                    self.unsubscribe(conn, sid);
                }
                self.posts_poster_gone(conn);
                self.replay_conn_gone(conn);
            }
            ConnRole::Publisher => {
                self.publisher_gone(conn, reason);
                self.posts_publisher_gone(conn);
            }
            ConnRole::AwaitingLogin => self.login_no_longer_pending(ip),
            ConnRole::Closing => {}
        }
    }

    // Inlined into the frame loop, the hot path: with a second caller (`on_message`)
    // the compiler stopped inlining it, which cost 20-60 instructions per update
    // (callgrind, crates/core/benches/per_update_instructions.py).
    #[inline(always)]
    pub(crate) fn on_message_from(&mut self, conn: ConnId, msg: &Message<'_>, encoded: &[u8]) {
        // Anything but an update may read an image or change the item table: the
        // images catch up first.
        if !matches!(msg, Message::Update(_)) {
            self.merge_deferred();
        }
        let Some(role) = self.role(conn) else { return };
        match (role, msg) {
            (ConnRole::AwaitingLogin, Message::Login(login)) => self.on_login(conn, login),
            (ConnRole::Subscriber | ConnRole::Publisher, Message::Ping(token)) => {
                self.send(conn, &Message::Pong(*token))
            }
            (ConnRole::Subscriber | ConnRole::Publisher, Message::Pong(_)) => {}
            (ConnRole::AwaitingLogin, _) => {
                self.stats.protocol_disconnects += 1;
                self.reject(
                    conn,
                    code::PROTOCOL,
                    "login required before any other message",
                );
            }
            (ConnRole::Subscriber, Message::Request(req)) => self.on_subscriber_request(conn, req),
            (ConnRole::Subscriber, Message::Close { stream_id }) => {
                self.end_stream(conn, *stream_id)
            }
            (ConnRole::Subscriber, Message::Replay(r)) => self.on_subscriber_replay(conn, r),
            (ConnRole::Subscriber | ConnRole::Publisher, Message::Files(body)) => {
                self.on_files_message(conn, body)
            }
            (ConnRole::Subscriber, Message::Post(p)) => self.on_subscriber_post(conn, p),
            (ConnRole::Publisher, Message::Ack(a)) => self.on_publisher_ack(conn, a),
            (ConnRole::Publisher, Message::Directory(dir)) => {
                self.on_publisher_directory(conn, dir)
            }
            (ConnRole::Publisher, Message::Update(upd)) => {
                self.on_publisher_update(conn, upd, encoded)
            }
            (ConnRole::Publisher, Message::Refresh(r)) => self.on_publisher_refresh(conn, r),
            (ConnRole::Publisher, Message::Status(s)) => self.on_publisher_status(conn, s),
            (ConnRole::Closing, _) => {}
            (_, other) => {
                self.stats.protocol_disconnects += 1;
                let text = format!(
                    "a {} may not send a {:?} message",
                    if role == ConnRole::Publisher {
                        "publisher"
                    } else {
                        "subscriber"
                    },
                    other.message_type()
                );
                self.reject(conn, code::PROTOCOL, &text);
            }
        }
    }

    /// Queues already-encoded messages (`ends`: where each ends in `buf`) through the
    /// connection's bounded queue.
    pub(crate) fn queue_encoded(&mut self, conn: ConnId, buf: &[u8], ends: &[usize]) {
        let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return;
        };
        let mut start = 0;
        for &end in ends {
            c.out.push_encoded(&buf[start..end]);
            start = end;
        }
        self.mark_dirty(conn);
        self.check_overflow(conn);
    }

    pub(crate) fn mark_dirty(&mut self, conn: ConnId) {
        let now = self.now;
        if let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) {
            c.last_tx = now;
            if !c.dirty {
                c.dirty = true;
                self.dirty.push(conn);
            }
        }
    }

    /// [`Node::handle_timeout`] is needed by `at` (or sooner).
    pub(crate) fn tick_by(&mut self, at: Instant) {
        self.next_tick = self.next_tick.min(at);
    }

    /// When [`Node::handle_timeout`] is next needed: the earliest heartbeat, timeout or
    /// linger deadline, at most [`MAX_TICK_INTERVAL`] away (services past their
    /// retention, expired session tokens).
    pub fn poll_timeout(&self) -> Option<Instant> {
        Some(self.next_tick)
    }

    /// Bytes queued for `conn` and not yet taken by its socket.
    pub fn pending_output(&self, conn: ConnId) -> usize {
        self.conns
            .get(conn)
            .and_then(|c| c.as_ref())
            .map_or(0, |c| c.out.pending_len())
    }
}
