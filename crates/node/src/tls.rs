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
//! The plain path is a match on the enum and the socket's own `read` / `write`.

use log::{debug, warn};
use mio::net::TcpStream;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ServerConfig, ServerConnection};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::path::Path;
use std::sync::Arc;

pub use tickwire_tls::TLS_BUFFER;

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
}

impl Transport {
    /// Wraps an accepted socket: TLS if the node has a TLS configuration.
    pub fn new(
        tcp: TcpStream,
        peer: SocketAddr,
        tls: Option<&Arc<ServerConfig>>,
    ) -> io::Result<Self> {
        match tls {
            None => Ok(Transport::Plain(tcp)),
            Some(cfg) => {
                let conn = ServerConnection::new(cfg.clone()).map_err(io::Error::other)?;
                Ok(Transport::Tls(Box::new(TlsStream {
                    s: tickwire_tls::TlsStream::new(conn, tcp),
                    peer,
                    failed: false,
                    fin_wanted: false,
                    fin_done: false,
                })))
            }
        }
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

    /// Reads plaintext. `WouldBlock` only when the socket has nothing more; `Ok(0)` at
    /// the end of the stream.
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
                    if !t.failed {
                        t.s.tls.send_close_notify();
                    }
                }
                let _ = t.flush_pending();
            }
        }
    }
}

impl TlsStream {
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
            warn!(
                "TLS {what} with {} failed: {e}{hint}; closing the connection",
                self.peer
            );
            self.s.send_alert();
            let _ = self.s.tcp.shutdown(Shutdown::Write);
        }
        io::Error::new(ErrorKind::InvalidData, format!("TLS {what} failed: {e}"))
    }

    fn failed_error(&self) -> io::Error {
        io::Error::new(ErrorKind::InvalidData, "TLS session failed")
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.failed {
            return Err(self.failed_error());
        }
        match self.s.read(buf) {
            Ok(n) => Ok(n),
            Err(tickwire_tls::ReadError::Io(e)) => Err(e),
            Err(tickwire_tls::ReadError::Tls(e)) => {
                let what = self.phase();
                Err(self.fail(what, &e))
            }
            Err(other) => Err(io::Error::other(format!("{other:?}"))),
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
        self.s.write(buf).inspect_err(|e| self.log_write_error(e))
    }

    fn flush_pending(&mut self) -> io::Result<()> {
        self.s
            .flush_pending()
            .inspect_err(|e| self.log_write_error(e))?;
        if self.fin_wanted && !self.fin_done && !self.s.tls.wants_write() {
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
        let (dir, cert, key, pem) = cert_files("bound");
        let server_cfg = server_config(&cert, &key).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let client_cfg = Arc::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
        );

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
        let (tcp, peer) = l.accept().unwrap();
        tcp.set_nonblocking(true).unwrap();
        let mut t = Transport::new(TcpStream::from_std(tcp), peer, Some(&server_cfg)).unwrap();
        let fd = t.tcp().as_raw_fd();
        let deadline = Instant::now() + Duration::from_secs(20);

        // Handshake and the client's byte.
        let mut buf = [0u8; 16];
        loop {
            assert!(Instant::now() < deadline, "no handshake");
            match t.read(&mut buf) {
                Ok(1) => break,
                Ok(n) => panic!("read {n}"),
                Err(e) if e.kind() == ErrorKind::WouldBlock => wait_fd(fd, libc::POLLIN),
                Err(e) => panic!("{e}"),
            }
        }

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
