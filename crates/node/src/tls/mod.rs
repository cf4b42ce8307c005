//! TLS on the node's ports (`[tls] cert`, `key`): the server configuration, and the
//! transport every accepted socket is wrapped in (plain or TLS).
//!
//! The event loop is edge-triggered and never blocks, and the transport keeps it so:
//!
//! - A read returns `WouldBlock` only when the socket itself did, so epoll reports the
//!   socket again when more arrives. Handshake records produced while reading are
//!   written at once; what the socket does not take waits in rustls and is written by
//!   [`Transport::flush_pending`], which the event loop calls whenever epoll reports the
//!   socket writable, whether or not the core has output for the connection.
//! - rustls takes at most [`TLS_BUFFER`] bytes of plaintext while its records are not
//!   written yet; past that a write reports `WouldBlock` (the socket is full at that
//!   point, so a writable event follows). The rest of a slow peer's output stays in the
//!   core's bounded queue, where the slow-consumer policy sees it.
//! - A TLS error (a failed handshake, plaintext sent to the TLS port, a corrupt record)
//!   ends that connection only: it is logged once, with the peer, the alert rustls has
//!   queued is sent (best effort), and reads fail from then on.
//!
//! - A handshake's crypto runs on a thread of its own ([`handshakes`]): the loop reads
//!   the peer's records into the session and hands the session over; until it is back
//!   the connection reads and writes nothing.
//!
//! The plain path is a match on the enum and the socket's own `read` / `write`.

pub mod handshakes;

use log::{debug, warn};
use mio::net::TcpStream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tickwire_core::ConnId;

use handshakes::{HandshakeJob, HandshakeQueue, Handshakes, NotTaken};
pub use tickwire_tls::TLS_BUFFER;

/// The node's TLS figures for `/metrics`, since its start.
#[derive(Debug, Clone, Copy, Default)]
pub struct TlsFigures {
    /// New connections closed before their handshake, past `[tls] max_handshakes_per_s`.
    pub refused_for_rate: u64,
    /// Handshakes failed because the handshakes' thread was behind (its queue full).
    pub refused_for_thread_behind: u64,
    /// Sessions the handshakes' thread processed (a handshake takes two or three).
    pub sessions_processed: u64,
}

/// What the node's TLS connections share: the server configuration, and the thread
/// their handshakes' crypto runs on.
pub struct TlsServer {
    /// From `[tls] cert` and `key`.
    pub config: Arc<ServerConfig>,
    /// The handshakes' thread.
    pub handshakes: Handshakes,
}

/// Why `[tls]` does not load: the key (`tls.cert` or `tls.key`), the file, the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfigError {
    /// The config key (`tls.cert`, `tls.key`).
    pub key: &'static str,
    /// The file.
    pub file: String,
    /// What is wrong with it.
    pub reason: String,
}

impl std::fmt::Display for TlsConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "config {} = {:?}: {}", self.key, self.file, self.reason)
    }
}

impl std::error::Error for TlsConfigError {}

/// The server configuration from a PEM certificate chain and a PEM private key (PKCS#8,
/// PKCS#1 or SEC1). Errors name the key, the file and the reason: unreadable file, no
/// certificate or key in it, a key that does not match the certificate.
pub fn server_config(cert: &str, key: &str) -> Result<Arc<ServerConfig>, TlsConfigError> {
    let err = |k: &'static str, file: &str, reason: String| TlsConfigError {
        key: k,
        file: file.to_string(),
        reason,
    };
    let cert_pem = std::fs::read(Path::new(cert))
        .map_err(|e| err("tls.cert", cert, format!("cannot read the file: {e}")))?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err("tls.cert", cert, format!("not a PEM file: {e}")))?;
    if chain.is_empty() {
        return Err(err(
            "tls.cert",
            cert,
            "no certificate in it (expected PEM \"-----BEGIN CERTIFICATE-----\" sections: \
             the server certificate first, then its intermediates)"
                .into(),
        ));
    }
    let key_pem = std::fs::read(Path::new(key))
        .map_err(|e| err("tls.key", key, format!("cannot read the file: {e}")))?;
    let private_key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        let reason = match e {
            rustls::pki_types::pem::Error::NoItemsFound => {
                "no private key in it (expected PEM \"-----BEGIN PRIVATE KEY-----\", \
                 \"RSA PRIVATE KEY\" or \"EC PRIVATE KEY\")"
                    .to_string()
            }
            e => format!("not a PEM private key: {e}"),
        };
        err("tls.key", key, reason)
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| err("tls.cert", cert, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, private_key)
        .map_err(|e| {
            let reason = match e {
                rustls::Error::InconsistentKeys(_) => format!(
                    "the private key does not match the certificate in {cert} (the first \
                     certificate of tls.cert must be the one this key signs for)"
                ),
                e => format!("unusable private key or certificate: {e}"),
            };
            err("tls.key", key, reason)
        })?;
    Ok(Arc::new(cfg))
}

/// An accepted connection's byte stream: the socket itself, or TLS over it.
pub enum Transport {
    /// Without TLS.
    Plain(TcpStream),
    /// TLS over the socket.
    Tls(Box<TlsStream>),
}

/// A server-side TLS session over a non-blocking socket (`tickwire_tls`), logged once
/// with its peer when it fails, closed with a close_notify.
pub struct TlsStream {
    s: tickwire_tls::TlsStream<ServerConnection, TcpStream>,
    peer: SocketAddr,
    /// The session failed (logged once); every read and write fails from then on.
    failed: bool,
    /// The write side is to be shut down once the close_notify (and everything before
    /// it) is written.
    fin_wanted: bool,
    fin_done: bool,
    /// Where the handshake's records are processed, while it lasts (None: here).
    offload: Option<Offload>,
    /// The session is at the handshakes' thread; `s.tls` is a new session standing in
    /// for it, never used, until it is back.
    away: bool,
    /// Where failed sessions are counted for the log (any peer can fail one at will).
    failures: HandshakeQueue,
}

/// A handshake's way to the handshakes' thread.
struct Offload {
    queue: HandshakeQueue,
    conn: ConnId,
    ticket: u64,
    config: Arc<ServerConfig>,
    /// The session that stands in while the real one is away (made once, kept between
    /// trips: it is never used).
    stand_in: Option<ServerConnection>,
    /// Trips to the thread so far.
    trips: u32,
    /// Set when this session is dropped (its connection closed): a job still queued
    /// for it is skipped.
    closed: Arc<AtomicBool>,
}

impl Drop for Offload {
    fn drop(&mut self) {
        self.closed.store(true, Ordering::Relaxed);
    }
}

/// Trips to the handshakes' thread a handshake may take: TLS 1.3 takes two (the
/// ClientHello, then the client's Finished), 1.2 two or three, a few more where records
/// arrive in pieces. A peer sending its handshake a byte at a time would otherwise cost
/// the loop a trip a byte.
const MAX_HANDSHAKE_TRIPS: u32 = 32;

impl Transport {
    /// Wraps connection `conn`'s socket: TLS if the node has `[tls]`, its handshake's
    /// crypto on the handshakes' thread.
    pub fn accepted(
        tcp: TcpStream,
        peer: SocketAddr,
        conn: ConnId,
        tls: Option<&TlsServer>,
    ) -> io::Result<Self> {
        let Some(tls) = tls else {
            return Ok(Transport::Plain(tcp));
        };
        let queue = tls.handshakes.queue();
        let offload = Offload {
            queue: queue.clone(),
            conn,
            ticket: queue.ticket(),
            config: tls.config.clone(),
            stand_in: None,
            trips: 0,
            closed: Arc::new(AtomicBool::new(false)),
        };
        TlsStream::transport(tcp, peer, &tls.config, offload)
    }

    /// A session back from the handshakes' thread: put back, the records it has for
    /// the peer written. False if it is not this transport's (its connection closed
    /// while it was away, and the id went to another). The connection is to be read
    /// (and written) at once: a failed handshake's read says so, and plaintext that
    /// came with the handshake's last records waits in the session.
    pub fn handshake_back(&mut self, job: HandshakeJob) -> bool {
        let Transport::Tls(t) = self else {
            return false;
        };
        let Some(off) = t
            .offload
            .as_mut()
            .filter(|o| t.away && o.ticket == job.ticket)
        else {
            return false;
        };
        off.stand_in = Some(std::mem::replace(&mut t.s.tls, *job.tls));
        t.away = false;
        match job.result {
            Err(e) => {
                let _ = t.fail("handshake", &e);
            }
            Ok(()) => {
                if t.fin_wanted {
                    t.s.tls.send_close_notify();
                }
                let _ = t.flush_pending();
            }
        }
        true
    }

    /// The socket (to register with epoll, ask the peer's address, shut down).
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Transport::Plain(s) => s,
            Transport::Tls(t) => &t.s.tcp,
        }
    }

    /// The socket, mutably (to deregister it).
    pub fn tcp_mut(&mut self) -> &mut TcpStream {
        match self {
            Transport::Plain(s) => s,
            Transport::Tls(t) => &mut t.s.tcp,
        }
    }

    /// Whether a read that returned less than asked emptied the socket: true without
    /// TLS (the kernel gave all it held; bytes arriving later raise a new readiness
    /// event), false with TLS (a short plaintext read may leave records in the socket).
    pub fn short_read_drains(&self) -> bool {
        matches!(self, Transport::Plain(_))
    }

    /// What the records taken from the socket since the start cost (TLS: their bytes
    /// and a fixed cost each, `tickwire_tls::TlsStream::read_cost`); 0 without TLS,
    /// where what [`Transport::read`] returns is what the socket gave.
    pub fn tls_read_cost(&self) -> u64 {
        match self {
            Transport::Plain(_) => 0,
            Transport::Tls(t) => t.s.read_cost(),
        }
    }

    /// What a read of `plaintext` bytes, since [`Transport::tls_read_cost`] was
    /// `tls_cost_at`, counts against a fair share: the plaintext, or the cost of the
    /// records that carried it where that is more (a peer can put each byte in a record
    /// of its own, behind key updates).
    pub fn share_used(&self, plaintext: usize, tls_cost_at: u64) -> usize {
        let records = self.tls_read_cost().saturating_sub(tls_cost_at);
        plaintext.max(usize::try_from(records).unwrap_or(usize::MAX))
    }

    /// Reads plaintext. `WouldBlock` only when the socket has nothing more; `Ok(0)` at
    /// the end of the stream; `Interrupted` after TLS records that gave no plaintext
    /// (the socket may hold more: [`Transport::share_used`] counts them).
    #[inline]
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = match self {
            Transport::Plain(s) => s.read(buf),
            Transport::Tls(t) => t.read(buf),
        }?;
        crate::io_counters::read(n);
        Ok(n)
    }

    /// Writes plaintext: what the socket (plain) or rustls (TLS, bounded by
    /// [`TLS_BUFFER`]) takes. `WouldBlock` when nothing was taken because the socket is
    /// full: a writable event follows.
    #[inline]
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = match self {
            Transport::Plain(s) => s.write(buf),
            Transport::Tls(t) => t.write(buf),
        }?;
        crate::io_counters::written(n);
        Ok(n)
    }

    /// Writes the TLS records waiting for the socket (handshake, alerts, data rustls
    /// took earlier), as far as the socket takes them. Called when epoll reports the
    /// socket writable, whether or not the core has output for it.
    #[inline]
    pub fn flush_pending(&mut self) -> io::Result<()> {
        match self {
            Transport::Plain(_) => Ok(()),
            Transport::Tls(t) => t.flush_pending(),
        }
    }

    /// A TLS handshake is under way: nothing the node says reaches the peer before it
    /// ends (and going on with it costs the node its key exchange).
    pub fn handshaking(&self) -> bool {
        match self {
            Transport::Plain(_) => false,
            Transport::Tls(t) => t.s.tls.is_handshaking(),
        }
    }

    /// Bytes are waiting in the transport for the socket (TLS records not yet written).
    #[inline]
    pub fn has_pending(&self) -> bool {
        match self {
            Transport::Plain(_) => false,
            Transport::Tls(t) => t.s.tls.wants_write(),
        }
    }

    /// Ends our sending side: FIN after what is written (TLS: after a close_notify and
    /// the records before it, once the socket has taken them).
    pub fn shutdown_write(&mut self) {
        match self {
            Transport::Plain(s) => {
                let _ = s.shutdown(Shutdown::Write);
            }
            Transport::Tls(t) => {
                if !t.fin_wanted {
                    t.fin_wanted = true;
                    // Away, the close_notify follows the session's return.
                    if !t.failed && !t.away {
                        t.s.tls.send_close_notify();
                    }
                }
                let _ = t.flush_pending();
            }
        }
    }
}

impl TlsStream {
    /// A TLS transport over `tcp`.
    fn transport(
        tcp: TcpStream,
        peer: SocketAddr,
        cfg: &Arc<ServerConfig>,
        offload: Offload,
    ) -> io::Result<Transport> {
        let conn = ServerConnection::new(cfg.clone()).map_err(io::Error::other)?;
        let failures = offload.queue.clone();
        Ok(Transport::Tls(Box::new(TlsStream {
            s: tickwire_tls::TlsStream::new(conn, tcp),
            peer,
            failed: false,
            fin_wanted: false,
            fin_done: false,
            offload: Some(offload),
            away: false,
            failures,
        })))
    }

    /// The session failed: logged once (with the peer), the alert rustls queued sent
    /// if the socket takes it, then the write side is shut down.
    fn fail(&mut self, what: &str, e: &dyn std::fmt::Display) -> io::Error {
        if !self.failed {
            self.failed = true;
            let hint = if what == "handshake" {
                " (a client without TLS, or one that does not trust this node's certificate?)"
            } else {
                ""
            };
            // Any peer can fail a handshake, or a session once the handshake is done
            // (a record it garbles), at will: those are held to a few a window.
            let said = self.failures.failure_to_say(std::time::Instant::now());
            match said {
                Some(0) => warn!(
                    "TLS {what} with {} failed: {e}{hint}; closing the connection",
                    self.peer
                ),
                Some(held) => warn!(
                    "TLS {what} with {} failed: {e}{hint}; closing the connection ({held} more failed TLS handshakes or sessions not logged before this one)",
                    self.peer
                ),
                None => {}
            }
            self.close_failed();
        }
        io::Error::new(ErrorKind::InvalidData, format!("TLS {what} failed: {e}"))
    }

    /// The alert rustls queued, if the socket takes it, then the end of the write side.
    fn close_failed(&mut self) {
        self.s.send_alert();
        let _ = self.s.tcp.shutdown(Shutdown::Write);
    }

    fn failed_error(&self) -> io::Error {
        io::Error::new(ErrorKind::InvalidData, "TLS session failed")
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.failed {
            return Err(self.failed_error());
        }
        if self.away {
            return Err(ErrorKind::WouldBlock.into());
        }
        if self.offload.is_some() {
            if self.s.tls.is_handshaking() {
                return self.read_handshake(buf);
            }
            self.offload = None;
        }
        self.s.read(buf).map_err(|e| self.read_failed(e))
    }

    fn read_failed(&mut self, e: tickwire_tls::ReadError) -> io::Error {
        match e {
            tickwire_tls::ReadError::Io(e) => e,
            tickwire_tls::ReadError::Tls(e) => {
                let what = self.phase();
                self.fail(what, &e)
            }
            other => io::Error::other(format!("{other:?}")),
        }
    }

    /// During the handshake: what the peer sent is read into the session, and the
    /// session goes to the handshakes' thread to process it; `WouldBlock` until it is
    /// back (the loop reads again then).
    fn read_handshake(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut got = false;
        // A handshake cannot end on its first records (the client's Finished follows the
        // node's answer): a ClientHello with the end of the stream costs no crypto.
        let could_end = self.offload.as_ref().is_some_and(|o| o.trips > 0);
        loop {
            match self.s.read_tls() {
                // The end after records (a client's Finished, a request and its FIN
                // in one write): they are processed first, rustls reports the end after.
                Ok(0) if got && could_end => break,
                Ok(0) => return Ok(0),
                Ok(_) => got = true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                // rustls holds as much as it takes unprocessed: processed first, the rest
                // read once the session is back.
                Err(_) if got => break,
                Err(e) => return Err(e),
            }
        }
        if !got {
            return Err(ErrorKind::WouldBlock.into());
        }
        let off = self.offload.as_mut().expect("a handshake's way");
        off.trips += 1;
        if off.trips > MAX_HANDSHAKE_TRIPS {
            let why = format!("its records came in more than {MAX_HANDSHAKE_TRIPS} pieces");
            return Err(self.fail("handshake", &why));
        }
        let stand_in = match off.stand_in.take() {
            Some(s) => s,
            None => ServerConnection::new(off.config.clone()).map_err(io::Error::other)?,
        };
        let job = HandshakeJob {
            conn: off.conn,
            ticket: off.ticket,
            tls: Box::new(std::mem::replace(&mut self.s.tls, stand_in)),
            result: Ok(()),
            closed: off.closed.clone(),
        };
        match off.queue.submit(job) {
            Ok(()) => {
                self.away = true;
                Err(ErrorKind::WouldBlock.into())
            }
            Err(NotTaken::Full(job)) => {
                // Counted and reported by the loop (`Handshakes::report`), not logged
                // one by one.
                self.s.tls = *job.tls;
                self.failed = true;
                self.close_failed();
                Err(io::Error::new(
                    ErrorKind::InvalidData,
                    "TLS handshake refused: the handshakes' thread is behind",
                ))
            }
            Err(NotTaken::Gone(job)) => {
                // The thread died: this connection and the next do theirs here.
                self.s.tls = *job.tls;
                self.offload = None;
                if let Err(e) = self.s.process() {
                    return Err(self.read_failed(e));
                }
                self.flush_pending()?;
                self.read(buf)
            }
        }
    }

    fn phase(&self) -> &'static str {
        if self.s.tls.is_handshaking() {
            "handshake"
        } else {
            "session"
        }
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.failed {
            return Err(self.failed_error());
        }
        if self.away {
            // The stand-in would take it, and lose it.
            return Err(ErrorKind::WouldBlock.into());
        }
        self.s.write(buf).inspect_err(|e| self.log_write_error(e))
    }

    fn flush_pending(&mut self) -> io::Result<()> {
        self.s
            .flush_pending()
            .inspect_err(|e| self.log_write_error(e))?;
        if self.fin_wanted && !self.fin_done && !self.away && !self.s.tls.wants_write() {
            self.fin_done = true;
            let _ = self.s.tcp.shutdown(Shutdown::Write);
        }
        Ok(())
    }

    fn log_write_error(&self, e: &io::Error) {
        if e.kind() != ErrorKind::WouldBlock {
            debug!("TLS write to {} failed: {e}", self.peer);
        }
    }

    /// Test only: the TLS bytes rustls holds for the socket (taken out to count them).
    #[cfg(test)]
    fn take_pending_tls(&mut self) -> Vec<u8> {
        let mut v = Vec::new();
        while self.s.tls.wants_write() {
            self.s.tls.write_tls(&mut v).unwrap();
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A self-signed certificate for 127.0.0.1 / localhost, written to a temp dir.
    fn cert_files(tag: &str) -> (std::path::PathBuf, String, String, String) {
        let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
            .unwrap();
        let dir = std::env::temp_dir().join(format!("tickwire-tls-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cert = dir.join("cert.pem");
        let key = dir.join("key.pem");
        std::fs::write(&cert, ck.cert.pem()).unwrap();
        std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();
        let pem = ck.cert.pem();
        (
            dir,
            cert.display().to_string(),
            key.display().to_string(),
            pem,
        )
    }

    /// A client configuration trusting the certificate `pem`.
    fn client_config(pem: &str) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        Arc::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
        )
    }

    /// A TLS client in a thread: it sends "ping" (which drives its handshake) and
    /// returns what it reads until the node closes (or an error's text).
    fn tls_client(
        addr: SocketAddr,
        cfg: Arc<rustls::ClientConfig>,
    ) -> std::thread::JoinHandle<String> {
        std::thread::spawn(move || {
            let tcp = std::net::TcpStream::connect(addr).unwrap();
            tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let conn = rustls::ClientConnection::new(cfg, "127.0.0.1".try_into().unwrap()).unwrap();
            let mut s = rustls::StreamOwned::new(conn, tcp);
            if let Err(e) = s.write_all(b"ping").and_then(|_| s.flush()) {
                return format!("error: {e}");
            }
            let mut got = Vec::new();
            match s.read_to_end(&mut got) {
                Ok(_) => String::from_utf8_lossy(&got).into_owned(),
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                    String::from_utf8_lossy(&got).into_owned()
                }
                Err(e) => format!("error: {e}"),
            }
        })
    }

    /// A client's first flight (its ClientHello) for a node with the certificate `pem`.
    fn client_hello(pem: &str) -> Vec<u8> {
        let mut client =
            rustls::ClientConnection::new(client_config(pem), "127.0.0.1".try_into().unwrap())
                .unwrap();
        let mut hello = Vec::new();
        client.write_tls(&mut hello).unwrap();
        hello
    }

    /// An accepted connection `conn` on `l`, its handshake's crypto for `server`'s
    /// thread.
    fn accept(l: &std::net::TcpListener, conn: ConnId, server: &TlsServer) -> Transport {
        let (tcp, peer) = l.accept().unwrap();
        tcp.set_nonblocking(true).unwrap();
        Transport::accepted(TcpStream::from_std(tcp), peer, conn, Some(server)).unwrap()
    }

    /// A TLS server for the tests, its handshakes' thread running; the certificate's
    /// directory and PEM.
    fn started(tag: &str) -> (std::path::PathBuf, TlsServer, String) {
        let (dir, server, pem, _) = started_with_poll(tag);
        (dir, server, pem)
    }

    /// As [`started`], with the poll the thread wakes (its waker's token is 0).
    fn started_with_poll(tag: &str) -> (std::path::PathBuf, TlsServer, String, mio::Poll) {
        let (dir, cert, key, pem) = cert_files(tag);
        let poll = mio::Poll::new().unwrap();
        let waker = Arc::new(mio::Waker::new(poll.registry(), mio::Token(0)).unwrap());
        let server = TlsServer {
            config: server_config(&cert, &key).unwrap(),
            handshakes: Handshakes::start(waker, 4).unwrap(),
        };
        (dir, server, pem, poll)
    }

    /// A TLS server whose handshakes' queue (of `capacity`) no thread reads, and the
    /// queue's end.
    fn unstarted(
        tag: &str,
        capacity: usize,
    ) -> (
        std::path::PathBuf,
        TlsServer,
        String,
        std::sync::mpsc::Receiver<HandshakeJob>,
    ) {
        let (dir, cert, key, pem) = cert_files(tag);
        let (handshakes, inbox) = handshakes::unstarted(capacity);
        let server = TlsServer {
            config: server_config(&cert, &key).unwrap(),
            handshakes,
        };
        (dir, server, pem, inbox)
    }

    /// Reads `t` until its session is at the handshakes' thread.
    fn hand_over(t: &mut Transport) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut buf = [0u8; 8];
        while !is_away(t) {
            assert!(Instant::now() < deadline, "never handed over");
            let r = t.read(&mut buf);
            assert!(
                r.as_ref().is_err_and(|e| e.kind() == ErrorKind::WouldBlock),
                "{r:?}"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Reads `t` as the event loop would (each session back from the thread given
    /// back) until the read fails: the session failed, the connection is to close.
    fn assert_fails(t: &mut Transport, server: &TlsServer) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut buf = [0u8; 8];
        let failed = loop {
            assert!(Instant::now() < deadline, "never failed");
            match t.read(&mut buf) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    for job in server.handshakes.finished() {
                        assert!(t.handshake_back(job));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                r => break r,
            }
        };
        assert!(
            failed
                .as_ref()
                .is_err_and(|e| e.kind() == ErrorKind::InvalidData),
            "{failed:?}"
        );
    }

    /// Answers "pong", closes, and checks that the client read it.
    fn answer(t: &mut Transport, client: std::thread::JoinHandle<String>) {
        assert_eq!(t.write(b"pong").unwrap(), 4);
        t.shutdown_write();
        while t.has_pending() {
            t.flush_pending().unwrap();
        }
        assert_eq!(client.join().unwrap(), "pong");
    }

    fn is_away(t: &Transport) -> bool {
        matches!(t, Transport::Tls(tls) if tls.away)
    }

    /// Reads `t` as the event loop would until it has `want` bytes, giving it back
    /// each session the handshakes' thread returns; how many came back.
    fn read_through_the_thread(
        t: &mut Transport,
        server: &TlsServer,
        want: usize,
    ) -> (Vec<u8>, usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let (mut got, mut back) = (Vec::new(), 0);
        let mut buf = [0u8; 64];
        while got.len() < want {
            assert!(
                Instant::now() < deadline,
                "read {got:?}, {back} sessions back"
            );
            match t.read(&mut buf) {
                Ok(0) => panic!("closed after {got:?}"),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    for job in server.handshakes.finished() {
                        assert!(t.handshake_back(job), "its own session");
                        back += 1;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("{e}"),
            }
        }
        (got, back)
    }

    /// A handshake's records are processed on the handshakes' thread: while its
    /// session is away the connection reads and writes nothing, and once back the
    /// handshake goes on, then the session carries data both ways.
    #[test]
    fn a_handshake_is_processed_on_the_handshakes_thread() {
        let (dir, server, pem, mut poll) = started_with_poll("thread");
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = tls_client(l.local_addr().unwrap(), client_config(&pem));
        let mut t = accept(&l, 3, &server);
        // The ClientHello read, its session handed over: nothing to read or write.
        hand_over(&mut t);
        assert!(t.handshaking());
        // Its return wakes the loop.
        let mut events = mio::Events::with_capacity(4);
        poll.poll(&mut events, Some(Duration::from_secs(20)))
            .unwrap();
        assert!(
            events.iter().any(|e| e.token() == mio::Token(0)),
            "the loop is woken"
        );
        let w = t.write(b"early");
        assert!(w.is_err_and(|e| e.kind() == ErrorKind::WouldBlock));
        assert!(!t.has_pending());
        let (got, back) = read_through_the_thread(&mut t, &server, 4);
        assert_eq!(got, b"ping");
        assert!(back >= 1, "{back} sessions back");
        assert!(!t.handshaking());
        answer(&mut t, client);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// What the peer sends while its session is away stays in the socket: it is read
    /// into the session once back, never into the stand-in.
    #[test]
    fn bytes_that_come_while_the_session_is_away_stay_in_the_socket() {
        use std::os::fd::AsRawFd;
        let (dir, server, pem, _inbox) = unstarted("stays", 4);
        let hello = client_hello(&pem);
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut peer = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        peer.write_all(&hello).unwrap();
        let mut t = accept(&l, 4, &server);
        hand_over(&mut t);
        peer.write_all(b"sixsix").unwrap();
        let fd = t.tcp().as_raw_fd();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut peek = [0u8; 16];
        let waiting = loop {
            let mut buf = [0u8; 16];
            let r = t.read(&mut buf);
            assert!(
                r.as_ref().is_err_and(|e| e.kind() == ErrorKind::WouldBlock),
                "{r:?}"
            );
            // SAFETY: a valid socket and a buffer of the length given.
            let n = unsafe {
                libc::recv(
                    fd,
                    peek.as_mut_ptr().cast(),
                    peek.len(),
                    libc::MSG_PEEK | libc::MSG_DONTWAIT,
                )
            };
            if n == 6 || Instant::now() > deadline {
                break n;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(waiting, 6, "the bytes are still in the socket");
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A ClientHello followed by the end of the stream is not worth a key exchange: the
    /// read says the end, nothing goes to the thread.
    #[test]
    fn a_client_hello_with_the_end_of_the_stream_costs_no_crypto() {
        let (dir, server, pem, inbox) = unstarted("hello-fin", 4);
        let hello = client_hello(&pem);
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut peer = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        peer.write_all(&hello).unwrap();
        peer.shutdown(std::net::Shutdown::Write).unwrap();
        let mut t = accept(&l, 8, &server);
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut buf = [0u8; 8];
        let end = loop {
            assert!(Instant::now() < deadline, "never ended");
            match t.read(&mut buf) {
                Err(e) if e.kind() == ErrorKind::WouldBlock && !is_away(&t) => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                r => break r,
            }
        };
        assert_eq!(end.unwrap(), 0);
        assert!(inbox.try_recv().is_err(), "nothing for the thread");
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A client whose Finished, first request and end of stream come in one write: the
    /// request is read, then the end (the records are processed before the end is
    /// said).
    #[test]
    fn a_request_that_comes_with_the_end_of_the_stream_is_read_before_it() {
        let (dir, server, pem) = started("fin");
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let cfg = client_config(&pem);
        let addr = l.local_addr().unwrap();
        let (sent_tx, sent_rx) = std::sync::mpsc::channel();
        let client = std::thread::spawn(move || {
            let tcp = std::net::TcpStream::connect(addr).unwrap();
            tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut conn =
                rustls::ClientConnection::new(cfg, "127.0.0.1".try_into().unwrap()).unwrap();
            let mut tcp = tcp;
            // The ClientHello, then the server's flight read.
            while conn.is_handshaking() {
                if conn.wants_write() {
                    conn.write_tls(&mut tcp).unwrap();
                } else {
                    conn.read_tls(&mut tcp).unwrap();
                    conn.process_new_packets().unwrap();
                }
            }
            // Finished (queued by the last step), the request, and the FIN at once.
            conn.writer().write_all(b"ping").unwrap();
            let mut out = Vec::new();
            while conn.wants_write() {
                conn.write_tls(&mut out).unwrap();
            }
            tcp.write_all(&out).unwrap();
            tcp.shutdown(std::net::Shutdown::Write).unwrap();
            sent_tx.send(()).unwrap();
        });
        let mut t = accept(&l, 6, &server);
        // The ClientHello's session back, its answer written.
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut buf = [0u8; 16];
        loop {
            assert!(Instant::now() < deadline, "no answer to the ClientHello");
            let _ = t.read(&mut buf);
            if server.handshakes.finished().any(|j| t.handshake_back(j)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        sent_rx.recv_timeout(Duration::from_secs(20)).unwrap();
        let (got, _) = read_through_the_thread(&mut t, &server, 4);
        assert_eq!(got, b"ping");
        assert_eq!(t.read(&mut buf).unwrap(), 0, "then the end");
        client.join().unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A connection closed while its session is away marks the session for the thread
    /// to skip; a session back for an id another connection now has is not taken by
    /// it.
    #[test]
    fn a_session_is_taken_back_by_its_own_connection_only() {
        let (dir, server, pem, inbox) = unstarted("ticket", 4);
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _c1 = tls_client(l.local_addr().unwrap(), client_config(&pem));
        let mut first = accept(&l, 5, &server);
        hand_over(&mut first);
        let job = inbox.recv().unwrap();
        assert_eq!(job.conn, 5);
        // The first closes: its session, still queued, is marked for the thread to skip.
        assert!(!job.closed.load(Ordering::Relaxed));
        drop(first);
        assert!(job.closed.load(Ordering::Relaxed));
        // Id 5 again, another connection, its session away too.
        let _c2 = tls_client(l.local_addr().unwrap(), client_config(&pem));
        let mut second = accept(&l, 5, &server);
        hand_over(&mut second);
        let its_own = inbox.recv().unwrap();
        assert!(!second.handshake_back(job), "another connection's session");
        assert!(is_away(&second));
        assert!(second.handshake_back(its_own));
        assert!(!is_away(&second));
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// With as many sessions away as the queue holds, a new handshake fails at once
    /// (its connection closes; nothing waits); with the thread gone, handshakes are
    /// done on the loop and still complete.
    #[test]
    fn a_full_queue_fails_the_handshake_and_a_gone_thread_leaves_it_to_the_loop() {
        let (dir, server, pem, inbox) = unstarted("full", 1);
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let _c1 = tls_client(addr, client_config(&pem));
        let mut first = accept(&l, 1, &server);
        let c2 = tls_client(addr, client_config(&pem));
        let mut second = accept(&l, 2, &server);
        hand_over(&mut first);
        assert_fails(&mut second, &server);
        drop(second);
        assert!(
            c2.join().unwrap().starts_with("error"),
            "the client is closed on"
        );
        // The thread gone: the next connection's handshake is done here.
        drop(inbox);
        let c3 = tls_client(addr, client_config(&pem));
        let mut third = accept(&l, 3, &server);
        let (got, back) = read_through_the_thread(&mut third, &server, 4);
        assert_eq!((got.as_slice(), back), (&b"ping"[..], 0));
        answer(&mut third, c3);
        drop(first);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A peer that sends its ClientHello a byte at a time costs a trip to the thread a
    /// byte, up to [`MAX_HANDSHAKE_TRIPS`]: the next byte fails the handshake.
    #[test]
    fn a_handshake_sent_a_byte_at_a_time_is_cut_off() {
        let (dir, server, pem) = started("bytes");
        let hello = client_hello(&pem);
        assert!(hello.len() > MAX_HANDSHAKE_TRIPS as usize + 1);
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut peer = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        peer.set_nodelay(true).unwrap();
        let mut t = accept(&l, 2, &server);
        let trips = |t: &Transport| match t {
            Transport::Tls(tls) => tls.offload.as_ref().map_or(0, |o| o.trips),
            Transport::Plain(_) => 0,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut buf = [0u8; 8];
        let mut failed_at = None;
        'bytes: for (i, b) in hello.iter().enumerate() {
            peer.write_all(&[*b]).unwrap();
            loop {
                assert!(Instant::now() < deadline, "byte {i}: stuck");
                match t.read(&mut buf) {
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        for job in server.handshakes.finished() {
                            assert!(t.handshake_back(job));
                        }
                        if !is_away(&t) && trips(&t) == i as u32 + 1 {
                            continue 'bytes;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(e) if e.kind() == ErrorKind::InvalidData => {
                        failed_at = Some(i);
                        break 'bytes;
                    }
                    r => panic!("byte {i}: {r:?}"),
                }
            }
        }
        assert_eq!(failed_at, Some(MAX_HANDSHAKE_TRIPS as usize));
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A peer that does not speak TLS fails its handshake on the thread: once its
    /// session is back, the read says so, and the connection is to close.
    #[test]
    fn a_handshake_failing_on_the_thread_fails_the_next_read() {
        let (dir, server, _) = started("junk");
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut plain = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        plain.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let mut t = accept(&l, 9, &server);
        assert_fails(&mut t, &server);
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn wait_fd(fd: std::os::fd::RawFd, events: libc::c_short) {
        let mut pfd = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        unsafe { libc::poll(&mut pfd, 1, 100) };
    }

    /// A peer that completes the handshake, sends one byte, then stops reading: the
    /// TLS transport takes plaintext until its records fill the socket and then at
    /// most TLS_BUFFER more, and reports WouldBlock from then on. Once the peer reads
    /// again, records left waiting are written by flush_pending alone (what the event
    /// loop does on a writable event), and every accepted byte arrives.
    #[test]
    fn tls_transport_never_buffers_more_than_its_bound_when_the_peer_does_not_read() {
        use std::os::fd::AsRawFd;
        let (dir, server, pem) = started("bound");
        let client_cfg = client_config(&pem);

        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let client = std::thread::spawn(move || -> usize {
            let tcp = std::net::TcpStream::connect(addr).unwrap();
            tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let conn =
                rustls::ClientConnection::new(client_cfg, "127.0.0.1".try_into().unwrap()).unwrap();
            let mut s = rustls::StreamOwned::new(conn, tcp);
            s.write_all(b"!").unwrap(); // drives the handshake
            s.flush().unwrap();
            go_rx.recv().unwrap(); // stalled until the server has filled everything
            let mut total = 0;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match s.read(&mut buf) {
                    Ok(0) => return total,
                    Ok(n) => total += n,
                    Err(e) if e.kind() == ErrorKind::UnexpectedEof => return total,
                    Err(e) => panic!("client read after {total} bytes: {e}"),
                }
            }
        });
        let mut t = accept(&l, 1, &server);
        let fd = t.tcp().as_raw_fd();
        let deadline = Instant::now() + Duration::from_secs(20);

        // Handshake and the client's byte.
        let (got, _) = read_through_the_thread(&mut t, &server, 1);
        assert_eq!(got, b"!");

        // Write until the transport refuses three times in a row (the socket full each
        // time, a writable poll in between finding nothing more to do).
        let chunk = vec![0x5au8; 16 * 1024];
        let mut accepted = 0usize;
        let mut refusals = 0;
        while refusals < 3 {
            assert!(Instant::now() < deadline, "never refused");
            assert!(
                accepted < 256 << 20,
                "took {accepted} bytes for a peer that does not read"
            );
            match t.write(&chunk) {
                Ok(n) => {
                    assert!(n <= TLS_BUFFER, "took {n} bytes at once");
                    accepted += n;
                    refusals = 0;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    refusals += 1;
                    wait_fd(fd, libc::POLLOUT);
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(t.has_pending(), "records wait for the stalled peer");
        let Transport::Tls(tls) = &mut t else {
            unreachable!()
        };
        // What rustls holds: at most the bound, plus the records' framing and tags.
        // (Counted by draining it; those bytes are handed to the socket below.)
        let pending = tls.take_pending_tls();
        let overhead = (TLS_BUFFER / (16 * 1024) + 1) * 64;
        assert!(
            pending.len() <= TLS_BUFFER + overhead,
            "{} TLS bytes held for a peer that does not read (bound {TLS_BUFFER})",
            pending.len()
        );
        assert!(
            accepted > TLS_BUFFER,
            "the socket took some first: {accepted}"
        );

        // The peer reads again: what was held is written, then the end.
        go_tx.send(()).unwrap();
        let mut at = 0;
        while at < pending.len() {
            assert!(Instant::now() < deadline, "stuck writing held records");
            match tls.s.tcp.write(&pending[at..]) {
                Ok(n) => at += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => wait_fd(fd, libc::POLLOUT),
                Err(e) => panic!("{e}"),
            }
        }
        // More while the peer reads: then only flush_pending, no more writes.
        for _ in 0..8 {
            match t.write(&chunk) {
                Ok(n) => accepted += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => wait_fd(fd, libc::POLLOUT),
                Err(e) => panic!("{e}"),
            }
        }
        t.shutdown_write();
        while t.has_pending() {
            assert!(Instant::now() < deadline, "close_notify never written");
            wait_fd(fd, libc::POLLOUT);
            t.flush_pending().unwrap();
        }
        assert_eq!(
            client.join().unwrap(),
            accepted,
            "every accepted byte arrives"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// `[tls]` errors say which key, which file and why.
    #[test]
    fn config_errors_name_the_key_the_file_and_the_reason() {
        let (dir, cert, key, _) = cert_files("cfg");
        let (dir2, cert2, key2, _) = cert_files("cfg2");
        assert!(server_config(&cert, &key).is_ok());
        let missing = dir.join("nope.pem").display().to_string();
        let e = server_config(&missing, &key).unwrap_err().to_string();
        assert!(
            e.contains("tls.cert") && e.contains("nope.pem") && e.contains("cannot read"),
            "{e}"
        );
        let e = server_config(&key, &key).unwrap_err().to_string();
        assert!(
            e.contains("tls.cert") && e.contains("no certificate"),
            "{e}"
        );
        let e = server_config(&cert, &cert).unwrap_err().to_string();
        assert!(e.contains("tls.key") && e.contains("no private key"), "{e}");
        let e = server_config(&cert, &key2).unwrap_err().to_string();
        assert!(
            e.contains("tls.key") && e.contains(&key2) && e.contains("does not match"),
            "{e}"
        );
        let _ = cert2;
        std::fs::remove_dir_all(dir).unwrap();
        std::fs::remove_dir_all(dir2).unwrap();
    }
}
