//! One connection to a node: a non-blocking socket driven with poll(2), frame buffers
//! both ways, the login handshake and heartbeats. Shared by Publisher and Subscriber.

use crate::tls::{Stream, TlsStream};
use crate::ClientError;
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_proto::frame::{FrameReader, FrameWriter};
use tickwire_proto::{
    code, Login, Message, MessageIter, Role, SlowConsumerPolicy, StreamState, PROTOCOL_VERSION_MAX,
    PROTOCOL_VERSION_MIN,
};

/// How to reach and log in to a node.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// `host:port` of the node.
    pub addr: String,
    pub application: String,
    pub user: String,
    pub token: String,
    pub connect_timeout: Duration,
    /// Reconnect automatically (with backoff) when the connection is lost.
    pub reconnect: bool,
    pub backoff_min: Duration,
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

/// What the node said in its welcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub version: u16,
    pub heartbeat: Duration,
    pub max_frame: usize,
    pub max_streams: u32,
    pub max_output_bytes: u32,
    pub node_name: String,
}

pub(crate) struct Conn {
    stream: Stream,
    /// `host:port` as given (for errors).
    addr: String,
    /// Bytes have arrived on this connection (the first ones are checked for a TLS
    /// answer to a plain client).
    received_any: bool,
    pub reader: FrameReader,
    pub writer: FrameWriter,
    pub session: Session,
    pub last_rx: Instant,
    pub last_tx: Instant,
    /// Messages that arrived in the welcome's frame, after it.
    pub after_welcome: Vec<u8>,
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

impl Conn {
    /// Connects, logs in and waits for the welcome.
    pub fn open(opts: &ConnectOptions, role: Role) -> Result<Conn, ClientError> {
        let addr = resolve(&opts.addr)?;
        let stream = TcpStream::connect_timeout(&addr, opts.connect_timeout).map_err(|e| {
            ClientError::Connect {
                addr: opts.addr.clone(),
                reason: e.to_string(),
            }
        })?;
        stream.set_nodelay(true)?;
        stream.set_nonblocking(true)?;
        if let Some(bytes) = opts.receive_buffer_bytes {
            set_receive_buffer(&stream, bytes)?;
        }
        let start = Instant::now();
        let deadline = start + opts.connect_timeout;
        let stream = match &opts.tls {
            None => Stream::Plain(stream),
            Some(cfg) => Stream::Tls(Box::new(handshake(stream, cfg, &opts.addr, deadline)?)),
        };
        let now = Instant::now();
        let mut conn = Conn {
            stream,
            addr: opts.addr.clone(),
            received_any: false,
            reader: FrameReader::new(tickwire_proto::DEFAULT_MAX_FRAME),
            writer: FrameWriter::new(tickwire_proto::DEFAULT_MAX_FRAME),
            session: Session {
                version: 0,
                heartbeat: Duration::from_secs(5),
                max_frame: tickwire_proto::DEFAULT_MAX_FRAME,
                max_streams: 0,
                max_output_bytes: 0,
                node_name: String::new(),
            },
            last_rx: now,
            last_tx: now,
            after_welcome: Vec::new(),
            peer_closed: false,
        };
        conn.writer.push(&Message::Login(Login {
            version_min: PROTOCOL_VERSION_MIN,
            version_max: PROTOCOL_VERSION_MAX,
            role,
            application: &opts.application,
            user: &opts.user,
            token: &opts.token,
            slow_consumer: opts.slow_consumer,
        }))?;
        conn.flush_until(deadline)?;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ClientError::Connect {
                    addr: opts.addr.clone(),
                    reason: "no welcome from the node in time".into(),
                });
            }
            if let Io::Idle = conn.wait(left)? {
                continue;
            }
            let frame = match conn.reader.next_frame()? {
                Some(f) => f,
                None => continue,
            };
            // The welcome is the first message; a status means the login was refused.
            let first = MessageIter::new(frame).next();
            match first {
                Some(Ok(raw)) => match raw.message {
                    Message::Welcome(w) => {
                        let session = Session {
                            version: w.version,
                            heartbeat: Duration::from_millis(w.heartbeat_ms.max(100) as u64),
                            max_frame: w.max_frame as usize,
                            max_streams: w.max_streams,
                            max_output_bytes: w.max_output_bytes,
                            node_name: w.node_name.to_string(),
                        };
                        // Messages after the welcome in the same frame (the directory)
                        // are the caller's to process first.
                        let after = frame[raw.encoded.len()..].to_vec();
                        let max = session.max_frame.max(tickwire_proto::frame::MIN_MAX_FRAME);
                        conn.reader
                            .set_max_frame(max.max(tickwire_proto::DEFAULT_MAX_FRAME));
                        conn.writer.set_max_frame(max);
                        conn.session = session;
                        conn.after_welcome = after;
                        return Ok(conn);
                    }
                    Message::Status(s) if is_fatal(s.state.stream, s.state.code) => {
                        return Err(ClientError::Rejected {
                            code: s.state.code,
                            reason: s.state.text.to_string(),
                        })
                    }
                    // Connection limit, node shutting down: worth trying again later.
                    Message::Status(s) => {
                        return Err(ClientError::Connect {
                            addr: opts.addr.clone(),
                            reason: format!("refused by the node: {}", s.state.text),
                        })
                    }
                    other => {
                        return Err(ClientError::Protocol(format!(
                            "expected a welcome, got {:?}",
                            other.message_type()
                        )))
                    }
                },
                Some(Err(e)) => return Err(e.into()),
                None => continue,
            }
        }
    }

    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        self.stream.tcp().as_raw_fd()
    }

    /// Waits up to `timeout` for the socket to be readable (and writes pending output
    /// when it is writable), then reads what is there.
    pub fn wait(&mut self, timeout: Duration) -> Result<Io, ClientError> {
        let mut events = libc::POLLIN;
        if !self.writer.is_empty() || self.stream.has_pending() {
            events |= libc::POLLOUT;
        }
        let mut pfd = libc::pollfd {
            fd: self.raw_fd(),
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
                return Ok(Io::Idle);
            }
            return Err(e.into());
        }
        if pfd.revents & libc::POLLOUT != 0 {
            self.flush_some()?;
        }
        if pfd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
            return self.read_available();
        }
        Ok(Io::Idle)
    }

    /// Reads whatever the socket holds now (non-blocking).
    pub fn read_available(&mut self) -> Result<Io, ClientError> {
        if self.peer_closed {
            return Err(ClientError::Disconnected(
                "node closed the connection".into(),
            ));
        }
        let mut got = false;
        loop {
            let buf = self.reader.spare(64 * 1024);
            let read = self.stream.read(buf);
            if let (Ok(n), false) = (&read, self.received_any) {
                if *n > 0 {
                    self.received_any = true;
                    if let Some(e) = tls_answer(&self.stream, &buf[..*n], &self.addr) {
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
                    self.reader.filled(n);
                    got = true;
                    self.last_rx = Instant::now();
                    // A short read drained the socket. (Not so over TLS: a read
                    // returns what one read of the socket decrypted, 16 KiB at most,
                    // so it goes on until the socket is empty.)
                    if n < 16 * 1024 && matches!(self.stream, Stream::Plain(_)) {
                        break;
                    }
                    if self.reader.buffered() > 4 * 1024 * 1024 {
                        break; // let the caller drain before reading more
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(ClientError::Disconnected(e.to_string())),
            }
        }
        Ok(if got { Io::Read } else { Io::Idle })
    }

    /// Writes as much pending output as the socket takes now.
    pub fn flush_some(&mut self) -> Result<(), ClientError> {
        // TLS records the socket did not take before go first.
        self.stream
            .flush_pending()
            .map_err(|e| ClientError::Disconnected(e.to_string()))?;
        loop {
            let bytes = self.writer.sealed_bytes();
            if bytes.is_empty() {
                return Ok(());
            }
            match self.stream.write(bytes) {
                Ok(0) => return Err(ClientError::Disconnected("node stopped reading".into())),
                Ok(n) => {
                    self.writer.consume(n);
                    self.last_tx = Instant::now();
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(ClientError::Disconnected(e.to_string())),
            }
        }
    }

    /// Writes all pending output, waiting for the socket as needed, until `deadline`.
    /// Input that arrives meanwhile is read into the frame buffer (never dropped).
    pub fn flush_until(&mut self, deadline: Instant) -> Result<(), ClientError> {
        self.flush_some()?;
        while !self.writer.is_empty() || self.stream.has_pending() {
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
            if pfd.revents & libc::POLLIN != 0 && self.reader.buffered() < 64 * 1024 * 1024 {
                self.read_available()?;
            }
            if pfd.revents & (libc::POLLOUT | libc::POLLHUP | libc::POLLERR) != 0 {
                self.flush_some()?;
            }
        }
        Ok(())
    }

    /// Sends a ping when nothing was sent for a heartbeat interval; fails when the node
    /// has been silent for three.
    pub fn heartbeat(&mut self) -> Result<(), ClientError> {
        let now = Instant::now();
        let hb = self.session.heartbeat;
        if now.duration_since(self.last_rx) >= hb * 3 {
            return Err(ClientError::Disconnected(format!(
                "node silent for {} ms (3 heartbeat intervals)",
                (hb * 3).as_millis()
            )));
        }
        if now.duration_since(self.last_tx) >= hb && self.writer.is_empty() {
            self.writer.push(&Message::Ping(0))?;
            self.last_tx = now;
            self.flush_some()?;
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
    let mut tls =
        rustls::ClientConnection::new(cfg.clone(), name).map_err(|e| fail(format!("TLS: {e}")))?;
    tls.set_buffer_limit(Some(crate::tls::TLS_BUFFER));
    let mut s = TlsStream { tcp, tls };
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
        let mut pfd = libc::pollfd {
            fd: s.tcp.as_raw_fd(),
            events,
            revents: 0,
        };
        let ms = left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(e.into());
        }
        if pfd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) == 0 {
            continue;
        }
        match s.tls.read_tls(&mut s.tcp) {
            Ok(0) => {
                return Err(fail(
                    "the node closed the connection during the TLS handshake \
                     (does it speak TLS on this port?)"
                        .into(),
                ))
            }
            Ok(_) => {
                if let Err(e) = s.process() {
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

/// Whether a connection-level status from the node ends the session for good.
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

pub(crate) fn is_fatal(stream: StreamState, status_code: u16) -> bool {
    stream == StreamState::Closed && status_code == code::LOGIN_REJECTED
}
