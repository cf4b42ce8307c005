//! RSSL connections of the node's event loop: the RIPC channel and the RWF session
//! (`tickwire-rssl`) between the socket and the core.
//!
//! As for WebSocket clients, an RSSL consumer is to the core a subscriber like any
//! other: its requests become the node's messages handed to `Node::on_frame`, and what
//! the core queues for it is turned into RWF only while the socket keeps up (less than
//! [`RSSL_OUT_HIGH`] bytes waiting), so a slow consumer's backlog stays in the core's
//! queue, where the slow-consumer policy applies.

use crate::core_output::{drop_core_output, pull_frames, Translate};
use crate::tls::Transport;
use log::{debug, info, warn};
use std::io::ErrorKind;
use std::sync::Arc;
use std::time::Instant;
use tickwire_core::{ConnId, Node};
use tickwire_rssl::ripc::{Channel, Input, Settings};
use tickwire_rssl::session::{Session, SessionConfig};

/// RWF waiting for the socket above which no more is translated from the core.
const RSSL_OUT_HIGH: usize = 256 * 1024;

/// The node's messages one connection's input may make in a turn (a native connection
/// reads as much): past it, what the peer sent waits in the channel for the next turn,
/// and its socket is not read meanwhile. A message can fan out (a provider's group
/// state reaches every item of the group), so the bytes read are no measure of the work.
const TO_NODE_SHARE: usize = 256 * 1024;

// What a connection's message buffers keep between bursts, as a native connection's
// do: a large message's memory goes back once it is handled.
use crate::server::socket_io::KEEP_BUFFER;

/// What every RSSL connection of a node shares.
pub(crate) struct RsslShared {
    pub ripc: Settings,
    pub session: Arc<SessionConfig>,
}

/// The RSSL side of one connection.
pub(crate) struct RsslConn {
    channel: Channel,
    session: Session,
    to_node: Vec<u8>,
    msg: Vec<u8>,
    /// Close once the output is written (a refused handshake, a logout, junk).
    pub close_after_flush: bool,
    fin_sent: bool,
    /// A provider's unknown fields were logged (once per connection).
    skipped_logged: bool,
    /// A provider's services past its most were logged (once per connection).
    refused_logged: bool,
    /// The last turn stopped at its share ([`TO_NODE_SHARE`]): the channel may hold
    /// messages not handled yet.
    backlog: bool,
    /// The peer's address, for logs.
    peer: String,
}

impl RsslConn {
    pub(crate) fn new(shared: &RsslShared, peer: String, now: Instant) -> Self {
        RsslConn {
            channel: Channel::new(shared.ripc.clone(), now),
            session: Session::new(shared.session.clone()),
            to_node: Vec::new(),
            msg: Vec::new(),
            close_after_flush: false,
            fin_sent: false,
            skipped_logged: false,
            refused_logged: false,
            backlog: false,
            peer,
        }
    }

    /// Bytes read from the socket.
    pub(crate) fn on_bytes(&mut self, bytes: &[u8], core: &mut Node, id: ConnId, now: Instant) {
        if self.close_after_flush {
            return;
        }
        self.channel.handle_bytes(bytes, now);
        self.handle_messages(core, id, now);
    }

    /// Whether messages may wait in the channel from a turn that used its share: the
    /// loop hands them on ([`RsslConn::handle_messages`]) before it reads the socket
    /// again.
    pub(crate) fn backlog(&self) -> bool {
        self.backlog && !self.close_after_flush
    }

    /// Hands the channel's messages to the session and what it makes of them to the
    /// core, until their share of the turn is used.
    pub(crate) fn handle_messages(&mut self, core: &mut Node, id: ConnId, now: Instant) {
        let peer = &self.peer;
        let mut made = 0;
        if self.backlog {
            // The node chose not to read: what the peer sent since (its pings among it)
            // waits in the socket, so RIPC counts it as heard from. (The core does: each
            // of its messages handed on counts.)
            self.channel.hold_alive(now);
        }
        self.backlog = false;
        loop {
            if made >= TO_NODE_SHARE {
                self.backlog = true;
                break;
            }
            if self.channel.pending() > out_limit(core) {
                // Sending without reading what it is sent: its answers would grow
                // without bound.
                warn!(
                    "{peer}: RSSL consumer sends but does not read ({} bytes waiting): closing it",
                    self.channel.pending()
                );
                self.close_after_flush = true;
                break;
            }
            match self.channel.poll(&mut self.msg) {
                Ok(None) => break,
                Ok(Some(Input::Connected)) => {
                    // RIPC's pings keep it alive: the core drops it when silent for the
                    // timeout agreed, which is at least 3 s whatever the heartbeat.
                    core.set_silence_limit(id, self.channel.ping_timeout());
                    let c = self.channel.client();
                    info!(
                        "{peer}: RSSL connection (RIPC {}, ping timeout {} s, {} on {})",
                        self.channel.version().map_or(0, |v| v.number()),
                        self.channel.ping_timeout().as_secs(),
                        if c.component.is_empty() {
                            "unnamed"
                        } else {
                            &c.component
                        },
                        c.host_name
                    );
                }
                Ok(Some(Input::Message)) => {
                    self.session
                        .on_client_message(&self.msg, &mut self.to_node, &mut self.channel);
                    // The session writes the node's messages with the node's own
                    // encoders: their field lists need no second walk (the fuzz target
                    // checks that every one of them decodes).
                    if !self.to_node.is_empty() {
                        made += self.to_node.len();
                        core.on_translated_frame(id, &self.to_node, now);
                        self.to_node.clear();
                    }
                    let gone = self.session.take_released();
                    if !gone.is_empty() {
                        let names: Vec<&str> = gone.iter().map(String::as_str).collect();
                        core.release_services(id, &names, "the RSSL provider no longer has it");
                    }
                    if !self.skipped_logged {
                        if let (n, Some(fid)) = self.session.skipped_fields() {
                            warn!(
                                "{peer}: RSSL provider sends fields the node's RWF dictionary does not know (field {fid}, {n} so far): they are left out; give the node the providers' dictionary ([rssl] field_dictionary)"
                            );
                            self.skipped_logged = true;
                        }
                    }
                    if !self.refused_logged && self.session.refused_services() > 0 {
                        warn!(
                            "{peer}: RSSL provider announces more than {} services: those past it are left out",
                            tickwire_rssl::directory::MAX_PROVIDER_SERVICES
                        );
                        self.refused_logged = true;
                    }
                    if self.session.finished {
                        debug!("{peer}: RSSL consumer logged out");
                        self.close_after_flush = true;
                        break;
                    }
                }
                Err(e) => {
                    warn!("{peer}: RSSL connection closed: {e}");
                    self.close_after_flush = true;
                    break;
                }
            }
        }
        // A message reassembled from fragments, or the requests of a large batch.
        if self.msg.capacity() > KEEP_BUFFER {
            self.msg = Vec::new();
        }
        if self.to_node.capacity() > KEEP_BUFFER {
            self.to_node = Vec::new();
        }
    }

    /// Turns what the core queued for this connection into RWF, while the socket
    /// keeps up.
    pub(crate) fn pull_from_core(&mut self, core: &mut Node, id: ConnId, now: Instant) {
        if self.close_after_flush {
            drop_core_output(core, id);
            return;
        }
        pull_frames(
            core,
            id,
            &mut RsslTranslate {
                session: &mut self.session,
                channel: &mut self.channel,
            },
        );
        // What the session answered the node itself.
        self.session.drain_answers(&mut self.to_node);
        if !self.to_node.is_empty() {
            core.on_translated_frame(id, &self.to_node, now);
            self.to_node.clear();
        }
        // Dictionary parts as the socket drains.
        self.session.pump_downloads(&mut self.channel);
        if self.session.finished {
            self.close_after_flush = true;
        }
    }

    /// The pings RIPC owes, and the end of a silent peer.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        if let Err(e) = self.channel.handle_timeout(now) {
            warn!("{}: RSSL connection closed: {e}", self.peer);
            self.close_after_flush = true;
        }
    }

    /// Bytes queued for the socket.
    pub(crate) fn pending(&self) -> usize {
        self.channel.pending()
    }

    /// Writes what the socket takes. Err: the socket failed.
    ///
    /// A dictionary download goes on while the socket takes all of it: a write that
    /// never meets a full socket brings no writable event, and its parts come from the
    /// session, not the core, so nothing else would bring the connection back for
    /// them before a heartbeat. (A dictionary is a few MiB at most: its parts go a
    /// quarter MiB at a time, within `DOWNLOAD_ROUNDS`.)
    pub(crate) fn write(&mut self, t: &mut Transport) -> std::io::Result<()> {
        for _ in 0..DOWNLOAD_ROUNDS {
            if !self.write_channel(t)? || !self.session.downloading() || self.close_after_flush {
                break;
            }
            self.session.pump_downloads(&mut self.channel);
        }
        if self.close_after_flush && !self.fin_sent {
            t.shutdown_write();
            self.fin_sent = true;
        }
        Ok(())
    }

    /// Writes what the channel holds; true if the socket took all of it.
    fn write_channel(&mut self, t: &mut Transport) -> std::io::Result<bool> {
        self.channel.end_batch();
        loop {
            let bytes = self.channel.transmit();
            if bytes.is_empty() {
                return Ok(true);
            }
            match t.write(bytes) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => self.channel.consume(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Rounds of dictionary parts one write may send while the socket takes them all.
const DOWNLOAD_ROUNDS: usize = 64;

/// The most an RSSL connection may hold for its socket before a consumer that keeps
/// sending is closed (as for WebSocket connections).
fn out_limit(core: &Node) -> usize {
    let l = &core.config().limits;
    RSSL_OUT_HIGH + 4 * l.max_frame + l.max_output_bytes
}

/// The RSSL session's side of [`pull_frames`]: whole frames of the core's queue until
/// [`RSSL_OUT_HIGH`] bytes wait for the socket.
struct RsslTranslate<'a> {
    session: &'a mut Session,
    channel: &'a mut Channel,
}

impl Translate for RsslTranslate<'_> {
    fn has_room(&self) -> bool {
        self.channel.pending() < RSSL_OUT_HIGH
    }

    fn message(&mut self, m: &tickwire_proto::Message<'_>) {
        self.session.on_node_message(m, self.channel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tickwire_core::CoreConfig;
    use tickwire_rssl::testing;

    /// What `conn` queued for its socket, to the client (as the socket would take it).
    fn to_client(conn: &mut RsslConn, client: &mut Channel, now: Instant) {
        conn.channel.end_batch();
        let n = conn.channel.transmit().len();
        client.handle_bytes(conn.channel.transmit(), now);
        conn.channel.consume(n);
        while let Ok(Some(_)) = client.poll(&mut Vec::new()) {}
    }

    /// What the client queued, as one read of the socket.
    fn from_client(client: &mut Channel) -> Vec<u8> {
        client.end_batch();
        let bytes = client.transmit().to_vec();
        client.consume(bytes.len());
        bytes
    }

    /// A non-interactive provider whose one read holds 20,000 items' refreshes: the
    /// node takes a share of them a turn, the rest wait in the channel (the socket not
    /// read meanwhile), and every one arrives.
    #[test]
    fn a_read_that_makes_much_for_the_core_is_handled_a_share_a_turn() {
        let now = Instant::now();
        let mut core = Node::new(CoreConfig::default(), now);
        let id = core.connect("provider", now);
        let shared = RsslShared {
            ripc: Settings::default(),
            session: Arc::new(SessionConfig::default()),
        };
        let mut conn = RsslConn::new(&shared, "test".into(), now);
        let mut client = Channel::connect(Settings::default(), "test", now);
        conn.on_bytes(&from_client(&mut client), &mut core, id, now);
        to_client(&mut conn, &mut client, now);
        client.send(&testing::eta_login(1));
        conn.on_bytes(&from_client(&mut client), &mut core, id, now);
        conn.pull_from_core(&mut core, id, now);
        client.send(&testing::service_up(
            -1,
            testing::DirectoryMsg::Unsolicited,
            7,
            b"PROV",
        ));
        conn.on_bytes(&from_client(&mut client), &mut core, id, now);
        assert!(!conn.backlog());
        let before = core.item_count();

        const ITEMS: i32 = 20_000;
        for i in 0..ITEMS {
            let refresh = testing::item_refresh(-10 - i, 7, &format!("ITEM{i}"));
            client.send(&refresh);
        }
        let read = from_client(&mut client);
        conn.on_bytes(&read, &mut core, id, now);
        let first = core.item_count() - before;
        assert!(conn.backlog(), "one turn took all {first} items");
        assert!(
            first > 0 && first < ITEMS as usize,
            "{first} items in the first turn"
        );
        // Each turn long after the last, as on a busy machine: the provider is not
        // silent meanwhile (what it sent waits unread), and neither RIPC's timeout
        // (60 s here) nor the core's drops it.
        let mut turns = 1;
        let mut t = now;
        while conn.backlog() {
            t += Duration::from_secs(40);
            conn.handle_messages(&mut core, id, t);
            conn.handle_timeout(t);
            core.handle_timeout(t);
            assert!(!conn.close_after_flush, "closed after {turns} turns");
            assert!(core.is_live(id), "the core dropped the provider");
            turns += 1;
            assert!(turns < 100, "the backlog never ends");
        }
        assert_eq!(
            core.item_count() - before,
            ITEMS as usize,
            "every item arrived"
        );
        assert!(turns > 2, "{turns} turns");
    }

    /// What a batch of 5,000 items makes for the core (5,000 requests), and a message
    /// of 200 KB reassembled from fragments, leave no buffer of their size with the
    /// connection once handled.
    #[test]
    fn a_large_message_leaves_no_buffer_of_its_size_behind() {
        use tickwire_rssl::rwf::container::{put_array, ElementListWriter};
        use tickwire_rssl::rwf::msg::{class, domain, request, MsgKey, MsgWriter};
        use tickwire_rssl::rwf::primitive::dt;
        let now = Instant::now();
        let mut core = Node::new(CoreConfig::default(), now);
        let shared = RsslShared {
            ripc: Settings::default(),
            session: Arc::new(SessionConfig::default()),
        };
        // A provider of PROV, for the consumer to ask of.
        let pid = core.connect("provider", now);
        let mut provider = RsslConn::new(&shared, "provider".into(), now);
        let mut pclient = Channel::connect(Settings::default(), "test", now);
        provider.on_bytes(&from_client(&mut pclient), &mut core, pid, now);
        to_client(&mut provider, &mut pclient, now);
        pclient.send(&testing::eta_login(1));
        provider.on_bytes(&from_client(&mut pclient), &mut core, pid, now);
        provider.pull_from_core(&mut core, pid, now);
        let up = testing::service_up(-1, testing::DirectoryMsg::Unsolicited, 7, b"PROV");
        pclient.send(&up);
        provider.on_bytes(&from_client(&mut pclient), &mut core, pid, now);
        // The consumer, logged in, PROV its service 1.
        let id = core.connect("consumer", now);
        let mut conn = RsslConn::new(&shared, "consumer".into(), now);
        let mut client = Channel::connect(Settings::default(), "test", now);
        conn.on_bytes(&from_client(&mut client), &mut core, id, now);
        to_client(&mut conn, &mut client, now);
        client.send(&testing::eta_login(0));
        conn.on_bytes(&from_client(&mut client), &mut core, id, now);
        conn.pull_from_core(&mut core, id, now);
        to_client(&mut conn, &mut client, now);
        let mut batch = Vec::new();
        let flags = request::STREAMING | request::HAS_BATCH;
        let w = MsgWriter::begin(
            &mut batch,
            class::REQUEST,
            domain::MARKET_PRICE,
            5,
            flags,
            dt::ELEMENT_LIST,
        );
        let key = MsgKey {
            service_id: Some(1),
            ..MsgKey::default()
        };
        key.encode(&mut batch);
        w.end_header(&mut batch);
        let names: Vec<String> = (0..5_000).map(|i| format!("ITEM.{i:04}")).collect();
        let mut el = ElementListWriter::begin(&mut batch);
        el.element(&mut batch, ":ItemList", dt::ARRAY, |o| {
            put_array(o, dt::ASCII_STRING, &names, |o, n| {
                o.extend_from_slice(n.as_bytes())
            })
        });
        el.end(&mut batch);
        client.send(&batch);
        conn.on_bytes(&from_client(&mut client), &mut core, id, now);
        assert_eq!(conn.session.stream_count(), 5_000, "the batch was handled");
        let held = conn.to_node.capacity();
        assert!(held <= KEEP_BUFFER, "{held}");
        // A Generic message on the login stream (nothing to do) of 200 KB.
        let mut big = Vec::new();
        let w = MsgWriter::begin(&mut big, class::GENERIC, domain::LOGIN, 1, 0, dt::OPAQUE);
        w.end_header(&mut big);
        big.resize(big.len() + 200_000, 7);
        client.send(&big);
        conn.on_bytes(&from_client(&mut client), &mut core, id, now);
        assert!(!conn.close_after_flush);
        let held = conn.msg.capacity();
        assert!(held <= KEEP_BUFFER, "{held}");
    }
}
