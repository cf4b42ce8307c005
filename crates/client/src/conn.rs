//! The socket to a node: non-blocking, driven with poll(2), plain or TLS, moving bytes
//! to and from the sans-I/O [`Connection`]. Shared by Publisher and Subscriber.

use crate::session::{Connection, LoginOptions};
use crate::tls::{Stream, TlsStream};
use crate::watchlist::ReconnectPolicy;
use crate::ClientError;
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_proto::{Role, SlowConsumerPolicy};

/// How to reach and log in to a node.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// The node: `host:port` (or `tcp://host:port`; a host alone means port
    /// 14002), or several, comma-separated, for failover: the first one
    /// reachable, and after a loss the next ones in turn.
    pub addr: String,
    /// The application name the login gives.
    pub application: String,
    /// The user to log in as (empty: none).
    pub user: String,
    /// Its secret: a password or a token (empty: none).
    pub token: String,
    /// How long connecting (and the Welcome) may take.
    pub connect_timeout: Duration,
    /// Reconnect automatically (with backoff) when the connection is lost.
    pub reconnect: bool,
    /// The first delay before reconnecting; it doubles up to `backoff_max`.
    pub backoff_min: Duration,
    /// The longest delay before reconnecting.
    pub backoff_max: Duration,
    /// The slow-consumer policy to ask the node for (`None`: the node's configured one).
    pub slow_consumer: Option<SlowConsumerPolicy>,
    /// Kernel receive buffer (SO_RCVBUF); `None` keeps the kernel's autotuning, which
    /// may grow it to tens of MB: that much backlog can then wait in this host's kernel
    /// before the node sees the application as slow.
    pub receive_buffer_bytes: Option<usize>,
    /// TLS (the node's `[tls]`): the configuration with the certificates to trust
    /// ([`crate::tls::client_config_from_ca_file`]). The certificate is checked against
    /// the host of `addr` (a name, or an IP address listed in the certificate). `None`:
    /// plain TCP.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl ConnectOptions {
    /// Options to connect to `addr` (`host:port`, or several comma-separated for failover), with the defaults.
    pub fn new(addr: impl Into<String>) -> Self {
        ConnectOptions {
            addr: addr.into(),
            application: "tickwire-client".into(),
            user: std::env::var("USER").unwrap_or_else(|_| "tickwire".into()),
            token: String::new(),
            connect_timeout: Duration::from_secs(5),
            reconnect: true,
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            slow_consumer: None,
            receive_buffer_bytes: None,
            tls: None,
        }
    }
}

impl ConnectOptions {
    /// The Login these options make, for `role`.
    pub fn login(&self, role: Role) -> LoginOptions {
        LoginOptions {
            role,
            application: self.application.clone(),
            user: self.user.clone(),
            token: self.token.clone(),
            slow_consumer: self.slow_consumer,
            welcome_timeout: self.connect_timeout,
        }
    }

    /// How the session reconnects, from these options.
    pub fn reconnect_policy(&self) -> ReconnectPolicy {
        ReconnectPolicy {
            reconnect: self.reconnect,
            backoff_min: self.backoff_min,
            backoff_max: self.backoff_max,
            retry_rejected: false,
        }
    }
}

/// The socket to a node (plain TCP or TLS), non-blocking, moving bytes between it and
/// a [`Connection`].
pub(crate) struct Transport {
    stream: Stream,
    /// `host:port` as given (for errors).
    addr: String,
    /// Bytes have arrived (the first ones are checked for a TLS answer to a plain
    /// client).
    received_any: bool,
    /// The node closed the connection after bytes still to be processed (its last
    /// words, e.g. why it closed): reported on the next read, once they are.
    peer_closed: bool,
}

/// Outcome of waiting on the socket.
pub(crate) enum Io {
    /// Bytes were read (frames may be ready).
    Read,
    /// Nothing to read within the timeout.
    Idle,
    /// A signal cut the wait short: the caller returns, so that a program whose
    /// handler set a flag (Ctrl-C) sees it now rather than at its time-out.
    Interrupted,
}

/// The port of a node's native protocol when an address names none.
pub(crate) const DEFAULT_PORT: u16 = 14002;

/// The nodes an address names, each as `host:port`: `host:port`, `tcp://host:port`,
/// `host` (port [`DEFAULT_PORT`]), `[v6]:port`, or several of these comma-separated.
pub(crate) fn node_addresses(addr: &str) -> Result<Vec<String>, ClientError> {
    let bad = |reason: String| ClientError::Connect {
        addr: addr.to_string(),
        reason,
    };
    let mut nodes = Vec::new();
    for part in addr.split(',').map(str::trim) {
        let mut node = part;
        if let Some((scheme, rest)) = node.split_once("://") {
            if !scheme.eq_ignore_ascii_case("tcp") {
                return Err(bad(format!(
                    "{scheme}:// is not this client's protocol: give the node's --listen port \
                     as host:port or tcp://host:port (the WebSocket API, ws://, is for \
                     WebSocket clients)"
                )));
            }
            node = rest.trim_end_matches('/');
        }
        if node.is_empty() {
            return Err(bad(
                "an empty address in the list: give host:port, comma-separated for several nodes"
                    .into(),
            ));
        }
        let with_port = if let Some(rest) = node.strip_prefix('[') {
            // [v6] or [v6]:port
            match rest.split_once(']') {
                Some((_, "")) => format!("{node}:{DEFAULT_PORT}"),
                Some((_, port)) if port.starts_with(':') => node.to_string(),
                _ => return Err(bad(format!("{node:?} is not [address]:port"))),
            }
        } else if node.matches(':').count() > 1 {
            // A bare IPv6 address: no port can be told apart.
            format!("[{node}]:{DEFAULT_PORT}")
        } else if node.contains(':') {
            node.to_string()
        } else {
            format!("{node}:{DEFAULT_PORT}")
        };
        let port = with_port.rsplit_once(':').map_or("", |(_, p)| p);
        if port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(bad(format!("{node:?}: the port must be 1 to 65535")));
        }
        nodes.push(with_port);
    }
    Ok(nodes)
}

fn resolve(addr: &str) -> Result<SocketAddr, ClientError> {
    addr.to_socket_addrs()
        .map_err(|e| ClientError::Connect {
            addr: addr.to_string(),
            reason: e.to_string(),
        })?
        .next()
        .ok_or_else(|| ClientError::Connect {
            addr: addr.to_string(),
            reason: "address resolves to nothing".into(),
        })
}

impl Transport {
    /// Connects to `node` (one of the options' [`node_addresses`]) and does the TLS
    /// handshake, within the options' connect timeout.
    pub(crate) fn open(opts: &ConnectOptions, node: &str) -> Result<Transport, ClientError> {
        let addr = resolve(node)?;
        let stream = TcpStream::connect_timeout(&addr, opts.connect_timeout).map_err(|e| {
            ClientError::Connect {
                addr: node.to_string(),
                reason: e.to_string(),
            }
        })?;
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        if let Some(bytes) = opts.receive_buffer_bytes {
            set_receive_buffer(&stream, bytes)?;
        }
        let deadline = crate::driver::deadline_after(opts.connect_timeout);
        let stream = match &opts.tls {
            None => Stream::Plain(stream),
            Some(cfg) => Stream::Tls(Box::new(handshake(stream, cfg, node, deadline)?)),
        };
        Ok(Transport {
            stream,
            addr: node.to_string(),
            received_any: false,
            peer_closed: false,
        })
    }

    /// Sends the queued Login and waits until the node's Welcome is in (the
    /// connection's own deadline bounds the wait).
    pub(crate) fn welcome(
        &mut self,
        proto: &mut Connection,
        addr: &str,
    ) -> Result<(), ClientError> {
        // A connection waiting for its Welcome always has that deadline.
        let deadline = proto
            .poll_timeout()
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(5));
        self.flush_until(proto, deadline)?;
        loop {
            let now = Instant::now();
            if let Err(e) = proto.handle_timeout(now) {
                return Err(ClientError::Connect {
                    addr: addr.to_string(),
                    reason: format!("no welcome from the node in time ({e})"),
                });
            }
            // The Welcome, once in, is taken by the first `next_frame` (which the
            // caller makes): peek by asking for the session after reading.
            if proto.buffered() > 0 {
                match proto.take_welcome() {
                    Ok(true) => return Ok(()),
                    Ok(false) => {}
                    Err(ClientError::Refused(text)) => {
                        return Err(ClientError::Connect {
                            addr: addr.to_string(),
                            reason: format!("refused by the node: {text}"),
                        })
                    }
                    Err(e) => return Err(e),
                }
            }
            let left = proto
                .poll_timeout()
                .map_or(Duration::from_millis(100), |t| {
                    t.saturating_duration_since(now)
                });
            self.wait(proto, left.max(Duration::from_millis(1)))?;
        }
    }

    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        self.stream.tcp().as_raw_fd()
    }

    /// Output waits to be written: the connection's queue or, over TLS, the stream's.
    pub(crate) fn wants_write(&self, proto: &Connection) -> bool {
        proto.pending_output() > 0 || self.stream.has_pending()
    }

    /// Waits up to `timeout` for the socket to be readable (and writes pending output
    /// when it is writable), then reads what is there.
    pub(crate) fn wait(
        &mut self,
        proto: &mut Connection,
        timeout: Duration,
    ) -> Result<Io, ClientError> {
        let mut events = libc::POLLIN;
        if proto.pending_output() > 0 || self.stream.has_pending() {
            events |= libc::POLLOUT;
        }
        let Some(revents) = poll_fd(self.raw_fd(), events, timeout)? else {
            return Ok(Io::Interrupted);
        };
        if revents & libc::POLLOUT != 0 {
            self.flush_some(proto)?;
        }
        if revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
            return self.read_available(proto);
        }
        Ok(Io::Idle)
    }

    /// Reads whatever the socket holds now (non-blocking).
    pub(crate) fn read_available(&mut self, proto: &mut Connection) -> Result<Io, ClientError> {
        if self.peer_closed {
            return Err(ClientError::Disconnected(
                "node closed the connection".into(),
            ));
        }
        let mut got = false;
        loop {
            let buf = proto.spare(64 * 1024);
            let read = self.stream.read(buf);
            if let (Ok(n), false) = (&read, self.received_any) {
                if *n > 0 {
                    self.received_any = true;
                    let first = &buf[..*n];
                    if let Some(e) = tls_answer(&self.stream, first, &self.addr)
                        .or_else(|| http_answer(first, &self.addr))
                    {
                        return Err(e);
                    }
                }
            }
            match read {
                Ok(0) if got => {
                    // Deliver what came before the end first.
                    self.peer_closed = true;
                    break;
                }
                Ok(0) => {
                    return Err(ClientError::Disconnected(
                        "node closed the connection".into(),
                    ))
                }
                Ok(n) => {
                    proto.received(n, Instant::now());
                    got = true;
                    // A short read drained the socket. (Not so over TLS: a read
                    // returns what one read of the socket decrypted, 16 KiB at most,
                    // so it goes on until the socket is empty.)
                    if n < 16 * 1024 && matches!(self.stream, Stream::Plain(_)) {
                        break;
                    }
                    if !proto.wants_input() {
                        break; // let the caller drain before reading more
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                // Over TLS: records without plaintext took a read's share (a node
                // can send them without end). Back to the caller, whose wait sees its
                // time-out; the socket is read again on its next poll.
                Err(e)
                    if e.kind() == ErrorKind::Interrupted
                        && matches!(self.stream, Stream::Tls(_)) =>
                {
                    break
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(ClientError::Disconnected(e.to_string())),
            }
        }
        Ok(if got { Io::Read } else { Io::Idle })
    }

    /// Writes as much pending output as the socket takes now.
    pub(crate) fn flush_some(&mut self, proto: &mut Connection) -> Result<(), ClientError> {
        // TLS records the socket did not take before go first.
        self.stream
            .flush_pending()
            .map_err(|e| ClientError::Disconnected(e.to_string()))?;
        loop {
            let bytes = proto.transmit();
            if bytes.is_empty() {
                return Ok(());
            }
            match self.stream.write(bytes) {
                Ok(0) => return Err(ClientError::Disconnected("node stopped reading".into())),
                Ok(n) => proto.sent(n, Instant::now()),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(ClientError::Disconnected(e.to_string())),
            }
        }
    }

    /// Writes all pending output, waiting for the socket as needed, until `deadline`.
    /// Input that arrives meanwhile is read into the frame buffer (never dropped).
    pub(crate) fn flush_until(
        &mut self,
        proto: &mut Connection,
        deadline: Instant,
    ) -> Result<(), ClientError> {
        self.flush_some(proto)?;
        while proto.pending_output() > 0 || self.stream.has_pending() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ClientError::Timeout("writing to the node".into()));
            }
            let mut pfd = libc::pollfd {
                fd: self.raw_fd(),
                events: libc::POLLOUT | libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            let n = unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(1000) as i32) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != ErrorKind::Interrupted {
                    return Err(e.into());
                }
                continue;
            }
            if pfd.revents & libc::POLLIN != 0 && proto.buffered() < 64 * 1024 * 1024 {
                self.read_available(proto)?;
            }
            if pfd.revents & (libc::POLLOUT | libc::POLLHUP | libc::POLLERR) != 0 {
                self.flush_some(proto)?;
            }
        }
        Ok(())
    }
}

/// A plain client's first bytes from the node are a TLS record (an alert answering
/// the login it took for a handshake): the node requires TLS on this port. No frame
/// starts so (its length would be over 350 MB).
fn tls_answer(stream: &Stream, first: &[u8], addr: &str) -> Option<ClientError> {
    let tls_record = first.len() >= 2 && matches!(first[0], 0x15 | 0x16) && first[1] == 0x03;
    (matches!(stream, Stream::Plain(_)) && tls_record).then(|| ClientError::Connect {
        addr: addr.to_string(),
        reason: "the node answered with TLS: it accepts TLS clients only on this port \
                 (connect with --tls and --ca FILE)"
            .into(),
    })
}

/// The node's first bytes are an HTTP response (a WebSocket port's 400 to a login it
/// cannot parse): the client was pointed at the node's HTTP and WebSocket port. No
/// frame starts so (its length would be over a gigabyte).
fn http_answer(first: &[u8], addr: &str) -> Option<ClientError> {
    first.starts_with(b"HTTP/").then(|| ClientError::Connect {
        addr: addr.to_string(),
        reason: "the node answered in HTTP: this is its WebSocket and HTTP port (--ws); \
                 publishers and subscribers connect to its own port (--listen, by default \
                 127.0.0.1:14002)"
            .into(),
    })
}

/// Waits up to `timeout` for `events` on `fd`: the events that came (empty on a
/// timeout), or `None` when a signal cut the wait short.
fn poll_fd(
    fd: std::os::fd::RawFd,
    events: libc::c_short,
    timeout: Duration,
) -> std::io::Result<Option<libc::c_short>> {
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // Round up: truncating a sub-millisecond wait to poll(0) would spin.
    let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
    // SAFETY: one valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == ErrorKind::Interrupted {
            return Ok(None);
        }
        return Err(e);
    }
    Ok(Some(pfd.revents))
}

/// The TLS handshake over a connected non-blocking socket, within `deadline`.
fn handshake(
    tcp: TcpStream,
    cfg: &Arc<rustls::ClientConfig>,
    addr: &str,
    deadline: Instant,
) -> Result<TlsStream, ClientError> {
    let fail = |reason: String| ClientError::Connect {
        addr: addr.to_string(),
        reason,
    };
    let name = crate::tls::server_name(addr).map_err(&fail)?;
    let tls =
        rustls::ClientConnection::new(cfg.clone(), name).map_err(|e| fail(format!("TLS: {e}")))?;
    let mut s = TlsStream::new(tls, tcp);
    while s.tls.is_handshaking() {
        s.flush_pending()
            .map_err(|e| fail(format!("TLS handshake: {e}")))?;
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(fail("no TLS handshake from the node in time".into()));
        }
        let mut events = libc::POLLIN;
        if s.tls.wants_write() {
            events |= libc::POLLOUT;
        }
        let Some(revents) = poll_fd(s.tcp.as_raw_fd(), events, left)? else {
            continue;
        };
        if revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) == 0 {
            continue;
        }
        match s.read_tls() {
            Ok(0) => {
                return Err(fail(
                    "the node closed the connection during the TLS handshake \
                     (does it speak TLS on this port? A TLS node that refuses a \
                     connection, at its limits or shutting down, closes it unanswered: \
                     its log says why)"
                        .into(),
                ))
            }
            Ok(_) => {
                if let Err(e) = s.process() {
                    let e = crate::tls::read_error(&mut s, e);
                    return Err(fail(format!("TLS handshake failed: {e}")));
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
            Err(e) => return Err(fail(format!("TLS handshake: {e}"))),
        }
    }
    // The client's last handshake records (its Finished) go out with the login.
    s.flush_pending()
        .map_err(|e| fail(format!("TLS handshake: {e}")))?;
    Ok(s)
}

/// SO_RCVBUF (the kernel doubles it for bookkeeping and caps it at net.core.rmem_max).
fn set_receive_buffer(stream: &TcpStream, bytes: usize) -> std::io::Result<()> {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    // SAFETY: a valid socket descriptor and a pointer to a c_int of the given size.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod address_tests {
    use super::node_addresses;

    #[test]
    fn addresses_take_a_scheme_a_default_port_and_a_list() {
        let ok = |a: &str| node_addresses(a).unwrap_or_else(|e| panic!("{a}: {e}"));
        assert_eq!(ok("127.0.0.1:14002"), ["127.0.0.1:14002"]);
        assert_eq!(ok("tcp://h1:15000/"), ["h1:15000"]);
        assert_eq!(ok("TCP://h1"), ["h1:14002"]);
        assert_eq!(ok("h1"), ["h1:14002"]);
        assert_eq!(ok("[::1]"), ["[::1]:14002"]);
        assert_eq!(ok("[::1]:9"), ["[::1]:9"]);
        assert_eq!(ok("::1"), ["[::1]:14002"]);
        assert_eq!(ok("h1:1, tcp://h2:2 ,h3"), ["h1:1", "h2:2", "h3:14002"]);
    }

    #[test]
    fn a_wrong_address_says_what_is_expected() {
        let err = |a: &str| node_addresses(a).unwrap_err().to_string();
        assert!(err("ws://h1:15000/WebSocket").contains("ws:// is not this client's protocol"));
        assert!(err("h1:1,,h2:2").contains("an empty address in the list"));
        assert!(err("h1:0").contains("the port must be 1 to 65535"));
        assert!(err("h1:http").contains("the port must be 1 to 65535"));
        assert!(err("[::1]x").contains("is not [address]:port"));
    }
}
