//! Interactive RSSL providers (`[[rssl.providers]]`, `--rssl-provider`): the node
//! connects to each as a consumer, and serves the services it lists
//! (`tickwire-rssl`'s `ProviderLink` does the translating; this file the socket).
//!
//! To the core a provider is an in-process publisher of interactive services: the
//! core's requests for their items go to the provider, its answers come back. A lost
//! connection puts the services down (their items go suspect) and is retried with a
//! back-off; back up, the core asks again for every item still watched.

use crate::part::{Cx, Part, Readiness};
use log::{info, warn};
use mio::net::TcpStream;
use mio::{Registry, Token};
use std::io::{ErrorKind, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_core::{ConnId, InternalPeer, Node};
use tickwire_proto::{MessageIter, Role};
use tickwire_rssl::dictionary::RwfDictionary;
use tickwire_rssl::provider_link::ProviderLink;
use tickwire_rssl::ripc::{Channel, Input, RipcError, Settings, Version};

/// Bytes read from a provider per loop turn before the rest of the node gets a turn.
const READ_SHARE: usize = 256 * 1024;
/// The node's messages a provider's input may make in a turn: past it, what was read
/// waits in the channel for the next turn, the socket not read meanwhile (a provider's
/// group state reaches every item of the group: the bytes read are no measure).
const TO_NODE_SHARE: usize = 256 * 1024;
const RECONNECT_MIN: Duration = Duration::from_millis(200);
const RECONNECT_MAX: Duration = Duration::from_secs(5);
/// How long a connection must last after its login for the next to be tried at once:
/// a provider that accepts the login and drops the connection keeps backing off.
const RECONNECT_STEADY: Duration = Duration::from_secs(10);
/// From the connect to the provider's login refresh at most: a provider whose kernel
/// accepts but which never answers is given up and tried again.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes for the provider (requests, closes, posts) the connection holds at most: the
/// rest waits in the core, whose limits see it (posts to a publisher that does not
/// read them are refused there).
const OUT_HIGH: usize = 256 * 1024;

/// One provider: where it is, the connection, and the node's side of it.
pub(crate) struct ProviderConn {
    address: String,
    /// Its address, looked up off the event loop.
    resolver: crate::outbound::Resolver,
    token: Token,
    /// The in-process publisher connection the provider's services belong to.
    conn: ConnId,
    link: ProviderLink,
    ripc: Settings,
    socket: Option<TcpStream>,
    channel: Option<Channel>,
    connecting: bool,
    more_to_read: bool,
    /// The last turn stopped at [`TO_NODE_SHARE`]: the channel may hold messages not
    /// handled yet, handled before the socket is read again.
    backlog: bool,
    /// The provider closed its side or the socket failed (an event said so): reads go
    /// to the end of the stream.
    hung_up: bool,
    next_try: Instant,
    backoff: Duration,
    /// Until the provider accepts the login: when it is given up.
    login_deadline: Option<Instant>,
    /// When the provider accepted the login on this connection.
    logged_in_at: Option<Instant>,
    /// Connects that failed: which of the address's resolutions is tried next.
    attempts: usize,
    /// The RIPC version asked for next: 14, lower while the provider closes before its
    /// ConnectAck (as the SDK's clients fall back), 14 again once a connection that got
    /// its ConnectAck is lost.
    ripc_version: Version,
    to_node: Vec<u8>,
    msg: Vec<u8>,
    skipped_logged: bool,
    refused_logged: bool,
}

impl ProviderConn {
    pub(crate) fn start(
        core: &mut Node,
        address: &str,
        user: &str,
        dict: Arc<RwfDictionary>,
        ripc: Settings,
        token: Token,
        now: Instant,
    ) -> Self {
        let peer = format!("rssl provider {address}");
        let conn = core.join_internal(
            &InternalPeer {
                peer: &peer,
                role: Role::Publisher,
                application: "tickwire-rssl-provider",
                user: "node",
                slow_consumer: None,
            },
            now,
        );
        info!("RSSL: serving the services of the interactive provider at {address}");
        // Its posts time out as the core's do: a provider that never answers frees
        // them then (the poster gets one answer, whichever comes first).
        let post_timeout = core.config().limits.post_timeout;
        ProviderConn {
            address: address.to_string(),
            resolver: crate::outbound::Resolver::new(address),
            token,
            conn,
            link: ProviderLink::new(dict, user).with_post_timeout(post_timeout),
            ripc,
            socket: None,
            channel: None,
            connecting: false,
            more_to_read: false,
            backlog: false,
            hung_up: false,
            next_try: now,
            backoff: RECONNECT_MIN,
            login_deadline: None,
            logged_in_at: None,
            attempts: 0,
            ripc_version: Version::V14,
            to_node: Vec::new(),
            msg: Vec::new(),
            skipped_logged: false,
            refused_logged: false,
        }
    }

    fn deliver(&mut self, core: &mut Node, now: Instant) {
        if !self.to_node.is_empty() {
            core.on_translated_frame(self.conn, &self.to_node, now);
            self.to_node.clear();
        }
        // Services it no longer has leave the node after its retention time.
        let gone = self.link.take_released();
        if !gone.is_empty() {
            let names: Vec<&str> = gone.iter().map(String::as_str).collect();
            core.release_services(self.conn, &names, "the RSSL provider no longer has it");
        }
    }

    fn connect(&mut self, registry: &Registry, now: Instant) {
        let to = &mut self.resolver;
        match crate::outbound::connect(to, registry, self.token, self.attempts, now) {
            Ok(Some(s)) => {
                self.socket = Some(s);
                self.connecting = true;
                self.login_deadline = Some(now + LOGIN_TIMEOUT);
            }
            Ok(None) => {} // its name is being looked up: again next turn
            Err(why) => self.failed(&why, now),
        }
    }

    fn connect_done(&mut self, core: &mut Node, registry: &Registry, now: Instant) {
        let Some(s) = self.socket.as_mut() else {
            return;
        };
        match crate::outbound::connect_result(s) {
            Ok(false) => return,
            Ok(true) => {}
            Err(why) => {
                self.close_socket(registry);
                self.failed(&why, now);
                return;
            }
        }
        self.connecting = false;
        self.channel = Some(Channel::connect_at(
            self.ripc.clone(),
            "tickwire",
            self.ripc_version,
            now,
        ));
        self.write(core, registry, now);
    }

    fn failed(&mut self, why: &str, now: Instant) {
        warn!(
            "RSSL provider {}: cannot connect: {why}; again in {} ms",
            self.address,
            self.backoff.as_millis()
        );
        self.retry_later(now);
    }

    /// The next attempt after the back-off, which doubles up to its most; it starts
    /// again from the least once a connection lasted [`RECONNECT_STEADY`] after its
    /// login (not at a bare connect or login: a provider that refuses every login, or
    /// drops every connection once logged in, is not asked five times a second).
    fn retry_later(&mut self, now: Instant) {
        self.attempts = self.attempts.wrapping_add(1);
        self.next_try = now + self.backoff;
        self.backoff = (self.backoff * 2).min(RECONNECT_MAX);
        self.login_deadline = None;
    }

    /// For `/readyz`: whether the provider has accepted the node's login on the
    /// connection open now, and that said to people.
    pub(crate) fn readiness(&self) -> (bool, &'static str) {
        match (self.logged_in_at, &self.channel) {
            (Some(_), Some(_)) => (true, "logged in"),
            (_, Some(_)) => (false, "not logged in: logging in"),
            _ => (false, "not logged in: connecting"),
        }
    }

    /// Where the provider is (`[[rssl.providers]] address`).
    pub(crate) fn address(&self) -> &str {
        &self.address
    }

    fn lost(&mut self, core: &mut Node, registry: &Registry, why: &str, now: Instant) {
        // A connection that got as far as its ConnectAck: the next starts from RIPC 14
        // again (a version stepped down for a provider that was only restarting would
        // otherwise stay).
        if self
            .channel
            .as_ref()
            .is_some_and(|c| !c.awaits_connect_ack())
        {
            self.ripc_version = Version::V14;
        }
        if self
            .logged_in_at
            .take()
            .is_some_and(|at| now.saturating_duration_since(at) >= RECONNECT_STEADY)
        {
            self.backoff = RECONNECT_MIN;
        }
        warn!(
            "RSSL provider {}: connection lost: {why}; again in {} ms",
            self.address,
            self.backoff.as_millis()
        );
        self.close_socket(registry);
        self.link.on_lost(&mut self.to_node);
        self.deliver(core, now);
        self.retry_later(now);
    }

    fn close_socket(&mut self, registry: &Registry) {
        if let Some(s) = self.socket.take() {
            crate::outbound::close(s, registry);
        }
        self.channel = None;
        self.connecting = false;
        self.more_to_read = false;
        self.backlog = false;
        self.hung_up = false;
    }

    fn read(&mut self, core: &mut Node, registry: &Registry, now: Instant) {
        let (Some(s), Some(ch)) = (self.socket.as_mut(), self.channel.as_mut()) else {
            self.more_to_read = false;
            return;
        };
        self.more_to_read = false;
        let mut total = 0;
        let mut buf = [0u8; 16 * 1024];
        let mut closed = None;
        let mut version_refused = false;
        let backlog = std::mem::take(&mut self.backlog);
        if backlog {
            // What the socket holds is read next turn; the provider is not silent
            // meanwhile (its pings may be there, unread).
            ch.hold_alive(now);
            self.more_to_read = true;
        }
        loop {
            if backlog {
                break;
            }
            if total >= READ_SHARE {
                self.more_to_read = true;
                break;
            }
            match s.read(&mut buf) {
                Ok(0) => {
                    closed = Some("the provider closed the connection".to_string());
                    break;
                }
                Ok(n) => {
                    ch.handle_bytes(&buf[..n], now);
                    total += n;
                    // Shorter than asked: the socket is empty, and what comes later
                    // raises a new event (unless the provider hung up: then to the end).
                    if n < buf.len() && !self.hung_up {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    closed = Some(e.to_string());
                    break;
                }
            }
        }
        // A provider that closed has sent its last: all of it is handled now.
        let share = match closed {
            Some(_) => usize::MAX,
            None => TO_NODE_SHARE,
        };
        loop {
            if self.to_node.len() >= share {
                self.backlog = true;
                self.more_to_read = true;
                break;
            }
            match ch.poll(&mut self.msg) {
                Ok(None) => break,
                Ok(Some(Input::Connected)) => {
                    info!("RSSL provider {}: connected; logging in", self.address);
                    self.link.on_connected(ch);
                }
                Ok(Some(Input::Message)) => {
                    if let Err(e) = self
                        .link
                        .on_provider_message(&self.msg, &mut self.to_node, ch)
                    {
                        closed = Some(e.to_string());
                        break;
                    }
                    if self.login_deadline.is_some() && self.link.logged_in() {
                        self.login_deadline = None;
                        self.logged_in_at = Some(now);
                    }
                }
                Err(e) => {
                    version_refused = matches!(e, RipcError::UnsupportedVersion(_));
                    closed = Some(e.to_string());
                    break;
                }
            }
        }
        version_refused |= closed.is_some() && ch.awaits_connect_ack();
        if version_refused {
            if let Some(lower) = self.ripc_version.lower() {
                info!(
                    "RSSL provider {}: closed at RIPC {} before its ConnectAck; trying RIPC {}",
                    self.address,
                    self.ripc_version.number(),
                    lower.number()
                );
                self.ripc_version = lower;
                self.close_socket(registry);
                self.next_try = now;
                return;
            }
            // No version was taken: from the top again after the back-off.
            self.ripc_version = Version::V14;
        }
        if !self.skipped_logged {
            if let Some(fid) = self.link.first_skipped {
                warn!(
                    "RSSL provider {}: fields the node's RWF dictionary does not know are left out (field {fid}, {} so far); give the node the provider's dictionary ([rssl] field_dictionary)",
                    self.address, self.link.skipped_fields
                );
                self.skipped_logged = true;
            }
        }
        if !self.refused_logged && self.link.refused_services() > 0 {
            warn!(
                "RSSL provider {}: announces more than {} services: those past it are left out",
                self.address,
                tickwire_rssl::directory::MAX_PROVIDER_SERVICES
            );
            self.refused_logged = true;
        }
        self.deliver(core, now);
        match closed {
            Some(why) => self.lost(core, registry, &why, now),
            None => self.write(core, registry, now),
        }
    }

    fn write(&mut self, core: &mut Node, registry: &Registry, now: Instant) {
        if self.connecting {
            return;
        }
        let (Some(s), Some(ch)) = (self.socket.as_mut(), self.channel.as_mut()) else {
            return;
        };
        ch.end_batch();
        loop {
            let bytes = ch.transmit();
            if bytes.is_empty() {
                return;
            }
            match s.write(bytes) {
                Ok(0) => break,
                Ok(n) => ch.consume(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    let why = e.to_string();
                    self.lost(core, registry, &why, now);
                    return;
                }
            }
        }
        self.lost(core, registry, "the socket takes no more", now);
    }
}

impl Part for ProviderConn {
    fn poll_timeout(&self) -> Option<Instant> {
        if self.more_to_read {
            return Some(Instant::now());
        }
        let at = match &self.channel {
            Some(c) => c.poll_timeout(),
            None if self.resolver.is_looking_up() => {
                Some(Instant::now() + crate::outbound::LOOKUP_POLL)
            }
            None if self.socket.is_none() => Some(self.next_try),
            None => None,
        };
        [at, self.login_deadline, self.link.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    fn handle_io(&mut self, cx: &mut Cx<'_>, readiness: Readiness) {
        let Readiness {
            readable,
            writable,
            hung_up,
        } = readiness;
        self.hung_up |= hung_up;
        if self.connecting && (writable || readable) {
            self.connect_done(cx.core, cx.registry, cx.now);
        }
        self.more_to_read |= readable;
        if writable {
            self.write(cx.core, cx.registry, cx.now);
        }
    }

    /// Connects when due, and reads what the provider sent into the core.
    fn handle_input(&mut self, cx: &mut Cx<'_>) {
        if self.socket.is_none() && cx.now >= self.next_try {
            self.connect(cx.registry, cx.now);
        }
        if self.more_to_read && !self.connecting {
            self.read(cx.core, cx.registry, cx.now);
        }
    }

    /// RIPC's pings, a provider silent past its ping timeout, and posts it left
    /// unanswered past the post timeout.
    fn handle_timeout(&mut self, cx: &mut Cx<'_>) {
        if self.link.poll_timeout().is_some_and(|at| cx.now >= at) {
            self.link.handle_timeout(cx.now, &mut self.to_node);
            self.deliver(cx.core, cx.now);
        }
        if self.login_deadline.is_some_and(|at| cx.now >= at) {
            let why = format!(
                "no login accepted within {} s of the connect",
                LOGIN_TIMEOUT.as_secs()
            );
            return self.lost(cx.core, cx.registry, &why, cx.now);
        }
        let timed_out = match self.channel.as_mut() {
            Some(c) => c.handle_timeout(cx.now).err(),
            None => None,
        };
        if let Some(e) = timed_out {
            self.lost(cx.core, cx.registry, &e.to_string(), cx.now);
        }
    }

    /// The core's requests and closes go to the provider; queued bytes are written.
    fn pump(&mut self, cx: &mut Cx<'_>) {
        let (core, registry, now) = (&mut *cx.core, cx.registry, cx.now);
        if let Some(w) = core.output(self.conn) {
            if !w.is_empty() {
                let bytes = w.sealed_bytes();
                let mut at = 0;
                for (payload, frame_len) in tickwire_proto::frame::frames(bytes) {
                    // A provider that reads slowly: the rest waits in the core.
                    if self
                        .channel
                        .as_ref()
                        .is_some_and(|ch| ch.is_active() && ch.pending() >= OUT_HIGH)
                    {
                        break;
                    }
                    for raw in MessageIter::new(payload).flatten() {
                        match self.channel.as_mut() {
                            Some(ch) if ch.is_active() => {
                                self.link
                                    .on_node_message(&raw.message, &mut self.to_node, ch, now)
                            }
                            // Not connected: the services are down, the core asks again
                            // when they are back; a post is answered at once.
                            _ => refuse_post(&raw.message, &mut self.to_node),
                        }
                    }
                    at += frame_len;
                }
                w.consume(at);
            }
        }
        self.deliver(core, now);
        self.write(core, registry, now);
    }
}

/// A post for a provider that is not connected: refused at once (`SourceDown`) where it
/// asked for an Ack, rather than left to the node's post timeout.
fn refuse_post(m: &tickwire_proto::Message<'_>, to_node: &mut Vec<u8>) {
    if let tickwire_proto::Message::Post(p) = m {
        if p.ack {
            let _ = tickwire_proto::Message::Ack(tickwire_proto::Ack {
                stream_id: p.stream_id,
                post_id: p.post_id,
                nak: Some(tickwire_proto::NakCode::SourceDown),
                text: "the interactive provider is not connected",
            })
            .encode(to_node);
        }
    }
}
