//! One connection's bytes: reading a fair share and handing whole frames (or the
//! WebSocket's and RSSL's messages) to the core, and writing what the core queued for
//! it as far as the socket takes.

use crate::rssl::{RsslConn, RsslShared};
use crate::tls::Transport;
use crate::ws::WsConn;
use log::debug;
use std::io::ErrorKind;
use std::sync::Arc;
use std::time::Instant;
use tickwire_core::{ConnId, Node};
use tickwire_gateway::{SessionConfig, UpdateCache};
use tickwire_proto::frame::FrameReader;

/// Bytes read from one connection per loop turn before the others get their turn.
pub(super) const READ_SHARE: usize = 256 * 1024;
/// Idle buffers above this size are released, so memory follows the load back down
/// (an RSSL connection's message buffers too).
pub(crate) const KEEP_BUFFER: usize = 64 * 1024;
/// First and largest read sizes (see `Socket::read_size`).
pub(super) const FIRST_READ: usize = 4 * 1024;
const MAX_READ: usize = 64 * 1024;

/// A connection's socket and the protocol state that lives beside it.
pub(super) struct Socket {
    /// The socket, plain or TLS (`[tls]`): every read and write goes through it.
    pub(super) transport: Transport,
    pub(super) reader: FrameReader,
    /// Peer closed its side or failed; close once the core has been told.
    pub(super) dead: bool,
    /// The node closed its sending side (FIN after the last bytes) and waits for the
    /// peer to close; meanwhile what the peer sends is read and dropped.
    pub(super) fin_sent: bool,
    /// Bytes asked of the socket per read: starts small (most subscribers send a few
    /// requests and pings) and doubles, up to [`MAX_READ`], while reads fill it.
    pub(super) read_size: usize,
    /// A WebSocket (JSON API) connection rather than the node's own protocol.
    pub(super) ws: Option<Box<WsConn>>,
    /// An RSSL connection (LSEG Real-Time SDK applications).
    pub(super) rssl: Option<Box<RsslConn>>,
    /// On the node's own port: which protocol it speaks (the node's, RSSL where it
    /// shares the port, or HTTP by mistake) is not known until its first bytes.
    pub(super) sniffing: bool,
    /// Spoke HTTP to the node's own port: answered with where HTTP is (wrong_port.rs),
    /// now closing; what else it sends is read and dropped.
    pub(super) refused_http: bool,
    /// Already in the lingering list (closing): it must be there once only, or a
    /// second expiry would disconnect whoever reuses the id.
    pub(super) lingering: bool,
    /// The peer closed or the socket failed (the readiness event said so): each read
    /// goes on to `WouldBlock` or the end of the stream, never stopping at a short read,
    /// as no later event would come for what is left.
    pub(super) hung_up: bool,
}

impl Socket {
    /// Whether reading may stop at a read shorter than asked (the socket is then
    /// empty, and whatever comes next raises a new event): saves the read that would
    /// only say `WouldBlock`, one system call in four at a low update rate.
    fn short_read_drains(&self) -> bool {
        !self.hung_up && self.transport.short_read_drains()
    }
}

/// What the protocols translated to the node's own share across connections.
pub(super) struct Gateways {
    pub ws: Arc<SessionConfig>,
    pub rssl: Option<Arc<RsslShared>>,
    /// RSSL is served on the node's own port too.
    pub rssl_shared: bool,
    /// The answer to HTTP on the node's own port.
    pub http_answer: Vec<u8>,
    /// The buffers gateway connections are read through.
    pub input: GatewayInput,
    /// The last `/metrics` answers, given again for a while.
    pub metrics_renders: crate::node_http::MetricsRenders,
}

/// The buffers a gateway connection's read (RSSL, WebSocket) goes through, one set for
/// every connection, kept across reads so that a read neither allocates nor zeroes
/// memory.
pub(super) struct GatewayInput {
    /// What each read system call fills: zeroed once.
    chunk: Box<[u8]>,
    /// What one connection's read gathered this turn (at most a read share).
    bytes: Vec<u8>,
}

impl GatewayInput {
    pub(super) fn new() -> Self {
        GatewayInput {
            chunk: vec![0; 16 * 1024].into_boxed_slice(),
            bytes: Vec::new(),
        }
    }

    /// Reads what the connection holds (up to a read share) into `self.bytes`, a
    /// `chunk` at a time.
    fn read(&mut self, sock: &mut Socket) -> std::io::Result<GatewayRead> {
        self.bytes.clear();
        if self.bytes.capacity() > KEEP_BUFFER {
            self.bytes = Vec::new();
        }
        let drains = sock.short_read_drains();
        let stream = &mut sock.transport;
        let tls_cost_at = stream.tls_read_cost();
        loop {
            if stream.share_used(self.bytes.len(), tls_cost_at) >= READ_SHARE {
                return Ok(GatewayRead::ShareUsed);
            }
            match stream.read(&mut self.chunk) {
                Ok(0) => return Ok(GatewayRead::Closed),
                Ok(n) => {
                    self.bytes.extend_from_slice(&self.chunk[..n]);
                    // A short read emptied the socket (see `Transport::short_read_drains`):
                    // the `WouldBlock` after it is not asked for.
                    if drains && n < self.chunk.len() {
                        return Ok(GatewayRead::Emptied);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(GatewayRead::Emptied),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// How a gateway connection's read ended.
#[derive(Clone, Copy, PartialEq, Eq)]
enum GatewayRead {
    /// The socket has nothing more for now (a readiness event follows new bytes).
    Emptied,
    /// The read share is used: the socket may hold more, read next turn.
    ShareUsed,
    /// The peer closed.
    Closed,
}

/// The end of a gateway's read (RSSL, WebSocket): a failed read or write, or the
/// peer's close, ends the connection; else true if the read used its whole share (more
/// may wait).
fn gateway_read_end(
    sock: &mut Socket,
    id: ConnId,
    dead: &mut Vec<ConnId>,
    read: std::io::Result<GatewayRead>,
    wrote: std::io::Result<()>,
) -> bool {
    match (read, wrote) {
        (Ok(GatewayRead::Closed) | Err(_), _) | (_, Err(_)) => {
            sock.dead = true;
            dead.push(id);
            false
        }
        (Ok(read), Ok(())) => read == GatewayRead::ShareUsed,
    }
}

/// Reads up to a fair share from one connection and hands whole frames to the core.
/// Returns true if the socket may still hold data (share used up).
pub(super) fn read_some(
    core: &mut Node,
    sockets: &mut [Option<Socket>],
    id: ConnId,
    now: Instant,
    dead: &mut Vec<ConnId>,
    gateways: &mut Gateways,
    metrics: &crate::metrics::Extra<'_>,
) -> bool {
    let Gateways {
        ws: ws_cfg,
        rssl,
        rssl_shared,
        http_answer,
        input,
        metrics_renders,
    } = gateways;
    let rssl_shared = *rssl_shared;
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
    if let Some(r) = sock.rssl.as_mut().filter(|r| r.backlog()) {
        // What the last turn left: handled before the socket is read again, so that a
        // peer whose messages fan out is held back by its own socket. The peer is not
        // silent meanwhile (its pings wait unread), and its socket is read next turn
        // whatever: its readiness was taken by the turn that left the backlog.
        core.set_wall_clock(unix_now_ns());
        r.handle_messages(core, id, now);
        let wrote = r.write(&mut sock.transport);
        gateway_read_end(sock, id, dead, Ok(GatewayRead::Emptied), wrote);
        return !sock.dead;
    }
    if sock.rssl.is_some() {
        let read = input.read(sock);
        let closed = read.as_ref().map_or(true, |r| *r == GatewayRead::Closed);
        let bytes = &input.bytes;
        let r = sock.rssl.as_mut().expect("an RSSL connection");
        let mut wrote = Ok(());
        if !bytes.is_empty() {
            if !r.close_after_flush {
                core.on_bytes_received(id, now);
                core.set_wall_clock(unix_now_ns());
            }
            r.on_bytes(bytes, core, id, now);
            // A peer that closed has sent its last: all of it is handled now (at most a
            // read share of bytes), none left behind with the connection.
            while closed && r.backlog() {
                r.handle_messages(core, id, now);
            }
            wrote = r.write(&mut sock.transport);
        }
        let more = r.backlog();
        return gateway_read_end(sock, id, dead, read, wrote) || more;
    }
    if sock.ws.is_some() {
        // A read error ends the connection like a close.
        let read = input.read(sock);
        let bytes = &input.bytes;
        let w = sock.ws.as_mut().expect("a WebSocket connection");
        let mut wrote = Ok(());
        if !bytes.is_empty() {
            // What a peer sends after its connection started closing does not keep
            // it alive.
            if !w.conn.close_after_flush {
                core.on_bytes_received(id, now);
            }
            w.on_bytes(bytes, ws_cfg, core, id, now);
            if let Some(asked) = w.node_request.take() {
                let (status, content_type, body) =
                    crate::node_http::answer(asked, core, metrics, metrics_renders, now);
                w.conn.out =
                    tickwire_gateway::ws::http_response(status, content_type, body.as_bytes());
            }
            wrote = w.write(&mut sock.transport);
        }
        return gateway_read_end(sock, id, dead, read, wrote);
    }
    let drains = sock.short_read_drains();
    let tls_cost_at = sock.transport.tls_read_cost();
    let mut total = 0;
    loop {
        let want = sock.read_size;
        let buf = sock.reader.spare(want);
        let full = buf.len();
        let emptied;
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
                emptied = drains && n < full;
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
            Err(e) if e.kind() == ErrorKind::Interrupted => {
                // Also TLS records that carried no plaintext: they count against the
                // share like any others.
                if sock.transport.share_used(total, tls_cost_at) >= READ_SHARE {
                    return true;
                }
                continue;
            }
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
        if sock.transport.share_used(total, tls_cost_at) >= READ_SHARE {
            return true;
        }
        if emptied {
            break;
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
pub(super) fn flush(
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
            if !w.conn.out.is_empty() || core.pending_output(id) == 0 {
                break;
            }
        }
        if w.conn.close_after_flush && w.conn.out.is_empty() && !sock.fin_sent {
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
