//! Accepting connections: the node's listeners, the limits a connection is held to
//! before it costs anything (pending logins, the connection limit), and retrying by
//! itself when accepting fails for want of resources.

use super::event_loop::EventLoop;
use super::socket_io::{Socket, FIRST_READ};
use crate::rssl::RsslConn;
use crate::tls::Transport;
use crate::ws::WsConn;
use log::{debug, error, warn};
use mio::net::TcpStream;
use mio::{Interest, Token};
use std::io::{self, ErrorKind, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use tickwire_core::LoopShare;
use tickwire_proto::frame::{FrameReader, FrameWriter};
use tickwire_proto::{code, Message, State, Status};

/// The node's listening sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Listener {
    /// The node's own protocol (and RSSL, when it shares the port).
    Native = 0,
    WebSocket = 1,
    Rssl = 2,
}

/// Accepting failed for want of resources (file descriptors, memory), or stopped at a
/// turn's share. Epoll is edge-triggered: the connections already queued would not be
/// reported again until another arrives, so the node retries by itself: after a short
/// pause after a failure (logged once per interval rather than once per failed accept),
/// next turn after a full share.
#[derive(Default)]
pub(super) struct AcceptTrouble {
    /// When to try again, per listener.
    retry_at: [Option<Instant>; 3],
    failures: u64,
    last_log: Option<Instant>,
}

const ACCEPT_RETRY: Duration = Duration::from_millis(100);
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(10);
/// Connections one listener takes from its queue in a turn at most: peers opening
/// connections as fast as the node takes (or refuses) them must not keep the loop at
/// its listener while the connections it serves wait. The rest are taken next turn.
pub(super) const ACCEPTS_PER_TURN: usize = 64;

impl AcceptTrouble {
    pub(super) fn failed(&mut self, listener: Listener, e: &io::Error, now: Instant) {
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

    /// `listener` has more queued than a turn takes: it is due again next turn, which
    /// comes without waiting (epoll would not say so again: it is edge-triggered).
    pub(super) fn more_queued(&mut self, listener: Listener, now: Instant) {
        // After `now`: not this turn's `due(now)`, but any later one.
        self.retry_at[listener as usize] = Some(now + Duration::from_nanos(1));
    }

    /// The listeners due for another try.
    pub(super) fn due(&mut self, now: Instant) -> [bool; 3] {
        let mut due = [false; 3];
        for (i, at) in self.retry_at.iter_mut().enumerate() {
            if at.is_some_and(|t| now >= t) {
                *at = None;
                due[i] = true;
            }
        }
        due
    }

    pub(super) fn next_retry(&self) -> Option<Instant> {
        self.retry_at.iter().flatten().min().copied()
    }
}

/// New TLS connections allowed a second (`[tls] max_handshakes_per_s`), with a
/// second's worth in hand: each costs the node its handshake's key exchange and
/// signature (about 0.9 ms with an RSA-2048 key, on the handshakes' thread), so a peer
/// opening connections as fast as it can (even replaying one recorded ClientHello,
/// which costs it nothing) could otherwise keep a CPU at its crypto. One address may take a quarter of it at most,
/// so that one host opening connections as fast as it can does not lock the others out
/// (an IPv6 host is one /64).
pub(super) struct HandshakeShare {
    all: LoopShare,
    by_address: std::collections::HashMap<std::net::IpAddr, LoopShare>,
    /// Connections closed for want of it, since the last time the node said so.
    refused: u64,
    /// The same, since the start.
    pub(super) refused_total: u64,
    said_at: Option<Instant>,
}

/// Addresses a [`HandshakeShare`] keeps a share for at most (the longest unheard
/// forgotten past it: its share was whole again anyway after a second).
const HANDSHAKE_ADDRESSES: usize = 4096;

impl HandshakeShare {
    pub(super) fn new(per_s: u32, now: Instant) -> Self {
        HandshakeShare {
            all: LoopShare::new(f64::from(per_s.max(1)), now),
            by_address: Default::default(),
            refused: 0,
            refused_total: 0,
            said_at: None,
        }
    }

    /// Whether a connection from `ip` may have a handshake: both its address's share
    /// and the node's have one in hand (taken by [`HandshakeShare::spend`] once the
    /// connection is admitted).
    fn allows(&mut self, ip: std::net::IpAddr, now: Instant) -> bool {
        // An IPv6 host by its /64, as for logins: it has that many addresses to use.
        let ip = tickwire_core::counted_address(ip);
        let per_address = (self.all.per_s() / 4.0).max(1.0);
        if !self.by_address.contains_key(&ip) && self.by_address.len() >= HANDSHAKE_ADDRESSES {
            if let Some(oldest) = self
                .by_address
                .iter()
                .min_by_key(|(_, s)| s.last_asked())
                .map(|(a, _)| *a)
            {
                self.by_address.remove(&oldest);
            }
        }
        let mine = self
            .by_address
            .entry(ip)
            .or_insert_with(|| LoopShare::new(per_address, now));
        if mine.has(1.0, now).is_ok() && self.all.has(1.0, now).is_ok() {
            return true;
        }
        self.refused += 1;
        self.refused_total += 1;
        // Said at most every 10 s: a flood of them must not flood the log too.
        if self
            .said_at
            .is_none_or(|t| now.saturating_duration_since(t) >= ACCEPT_LOG_EVERY)
        {
            warn!(
                "new TLS connections closed unanswered: {} a second at most, a quarter of it from one address ([tls] max_handshakes_per_s); {} since the last report",
                self.all.per_s(),
                self.refused
            );
            self.refused = 0;
            self.said_at = Some(now);
        }
        false
    }

    /// Takes the handshake [`HandshakeShare::allows`] said `ip` may have.
    fn spend(&mut self, ip: std::net::IpAddr) {
        let ip = tickwire_core::counted_address(ip);
        if let Some(mine) = self.by_address.get_mut(&ip) {
            mine.spend(1.0);
        }
        self.all.spend(1.0);
    }
}

impl EventLoop {
    /// Accepts from listeners whose retry after a failed accept is due.
    pub(super) fn accept_due(&mut self, now: Instant) {
        let due = self.server.accept_trouble.due(now);
        for listener in [Listener::Native, Listener::WebSocket, Listener::Rssl] {
            if due[listener as usize] {
                let _ = self.accept_all(listener, now);
            }
        }
    }

    /// Accepts every connection `listener` has queued (epoll is edge-triggered), up to
    /// [`ACCEPTS_PER_TURN`]: past that, the rest next turn. Returns how many it took
    /// from the queue, refused ones included.
    pub(super) fn accept_all(&mut self, listener: Listener, now: Instant) -> usize {
        let server = &mut self.server;
        let core = &mut self.core;
        let max_conns = server.cfg.limits.max_connections;
        let mut taken = 0;
        loop {
            if taken == ACCEPTS_PER_TURN {
                server.accept_trouble.more_queued(listener, now);
                return taken;
            }
            let accepted = match listener {
                Listener::Native => server.listener.accept(),
                Listener::WebSocket => match &server.ws_listener {
                    Some(l) => l.accept(),
                    None => return taken,
                },
                Listener::Rssl => match &server.rssl_listener {
                    Some(l) => l.accept(),
                    None => return taken,
                },
            };
            let (mut stream, peer) = match accepted {
                Ok(x) => x,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return taken,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of file descriptors and the like.
                    server.accept_trouble.failed(listener, &e, now);
                    return taken;
                }
            };
            taken += 1;
            // A handshake the loop may spend on it: asked first, so that no pending
            // login is closed for a newcomer refused anyway.
            let tls = server.tls.is_some();
            if tls && !server.handshakes.allows(peer.ip(), now) {
                let _ = stream.shutdown(std::net::Shutdown::Both);
                continue;
            }
            // The limit counts connections logged in: not those waiting to log in
            // (held to their own caps below), nor those closing. Asked before those
            // caps, so that no pending login is closed for a newcomer refused anyway.
            if core.logged_in_count() >= max_conns {
                let text = format!("connection limit reached: {max_conns} connections");
                refuse(&mut stream, &text, server.tls.is_some(), listener);
                continue;
            }
            // Room among the pending logins (the oldest idle one may be closed for it).
            if let tickwire_core::Admission::Refuse(text) = core.admit(&peer.to_string(), now) {
                refuse(&mut stream, &text, server.tls.is_some(), listener);
                continue;
            }
            if tls {
                server.handshakes.spend(peer.ip());
            }
            let _ = stream.set_nodelay(true);
            if server.cfg.limits.socket_send_buffer_bytes > 0 {
                set_send_buffer(&stream, server.cfg.limits.socket_send_buffer_bytes);
            }
            let id = core.connect(&peer.to_string(), now);
            if let Err(e) = server.poll.registry().register(
                &mut stream,
                Token(id),
                Interest::READABLE | Interest::WRITABLE,
            ) {
                warn!("cannot register connection from {peer}: {e}");
                core.on_disconnect(id, now);
                continue;
            }
            let transport = match Transport::accepted(stream, peer, id, server.tls.as_ref()) {
                Ok(t) => t,
                Err(e) => {
                    warn!("cannot start TLS with {peer}: {e}");
                    core.on_disconnect(id, now);
                    continue;
                }
            };
            self.conns.insert(
                id,
                Socket {
                    transport,
                    reader: FrameReader::new(server.cfg.limits.max_frame_bytes),
                    dead: false,
                    fin_sent: false,
                    read_size: FIRST_READ,
                    ws: (listener == Listener::WebSocket).then(|| {
                        Box::new(WsConn::with_origins(
                            server.origins.clone(),
                            peer.to_string(),
                        ))
                    }),
                    rssl: match (&server.rssl, listener) {
                        (Some(shared), Listener::Rssl) => {
                            Some(Box::new(RsslConn::new(shared, peer.to_string(), now)))
                        }
                        _ => None,
                    },
                    sniffing: listener == Listener::Native,
                    refused_http: false,
                    lingering: false,
                    hung_up: false,
                },
            );
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

/// Tells a connection over a limit why it is refused (best effort), in its listener's
/// protocol, and drops it: a native Status, an HTTP 503 on the WebSocket port, a RIPC
/// ConnectNak on RSSL's own port (on the native port, where RSSL may come too, its
/// protocol is not known yet: a native Status). With TLS nothing can be sent before a
/// handshake the node will not spend on a connection it refuses: the client sees the
/// connection closed; the node logs why.
fn refuse(stream: &mut TcpStream, text: &str, tls: bool, listener: Listener) {
    if tls {
        debug!("connection refused before the TLS handshake: {text}");
        let _ = stream.shutdown(std::net::Shutdown::Both);
        return;
    }
    let bytes = match listener {
        Listener::WebSocket => tickwire_gateway::ws::http_response(
            "503 Service Unavailable",
            "text/plain; charset=utf-8",
            format!("{text}\n").as_bytes(),
        ),
        Listener::Rssl => tickwire_rssl::ripc::connect_nak(text),
        Listener::Native => {
            let mut w = FrameWriter::new(tickwire_proto::frame::MIN_MAX_FRAME);
            let _ = w.push(&Message::Status(Status {
                stream_id: 0,
                state: State::closed(code::TOO_MANY_CONNECTIONS, text),
            }));
            w.sealed_bytes().to_vec()
        }
    };
    let _ = stream.write(&bytes);
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::HandshakeShare;
    use std::time::Instant;

    /// One IPv6 host has a /64 of addresses: its new connections share one address's
    /// quarter of the handshakes, whichever address of it they come from.
    #[test]
    fn an_ipv6_hosts_addresses_share_one_handshake_share() {
        let now = Instant::now();
        let mut share = HandshakeShare::new(8, now);
        let host = |last: u16| std::net::IpAddr::from([0x2001, 0xdb8, 1, 2, 0, 0, 0, last]);
        for last in [1, 2] {
            assert!(share.allows(host(last), now));
            share.spend(host(last));
        }
        // A quarter of 8 a second taken: the /64's next address waits.
        assert!(!share.allows(host(3), now));
        let other = std::net::IpAddr::from([0x2001, 0xdb8, 1, 3, 0, 0, 0, 1]);
        assert!(share.allows(other, now), "another /64 is another host");
    }
}
