//! TLS over a non-blocking socket, for both ends of Tickwire's connections (a node's
//! accepted connections, the client library's): rustls's records moved between the
//! socket and the plaintext the protocol reads and writes, without ever blocking, and
//! without holding more than [`TLS_BUFFER`] of plaintext for a socket that does not
//! take it.
//!
//! What each end adds stays with it: the node logs a failed session once with its peer
//! and closes politely (`crates/node/src/tls/`); the client explains a certificate it
//! refuses (`crates/client/src/tls.rs`).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use rustls::{ConnectionCommon, SideData};
use std::io::{self, ErrorKind, Read, Write};
use std::ops::DerefMut;

/// The most plaintext rustls holds for the socket while its records are not written.
pub const TLS_BUFFER: usize = 64 * 1024;

/// What a record weighs against a reader's fair share, besides its bytes. Decrypting
/// a record has a fixed cost of about a KiB of data's worth (about 1 µs for a one-byte
/// record on a 2-vCPU host, against 1-2 GB/s for bulk); a key update costs several
/// times that.
pub const RECORD_COST: u64 = 1024;

/// What one read may take from the socket in records that carry no plaintext before it
/// returns `Interrupted`. rustls takes a key update and an empty record in turn without
/// end (each resets its count of the other): a read that waited for plaintext would go
/// on for as long as such a peer sends.
pub const READ_COST_WITHOUT_PLAINTEXT: u64 = 64 * RECORD_COST;

/// TLS record header: content type, version (2), length (2).
const RECORD_HEADER_LEN: usize = 5;

/// Bytes and records read from a socket, the records told apart by their headers.
#[derive(Debug, Default)]
struct RecordCounter {
    bytes: u64,
    records: u64,
    /// The header being read, and how much of it has come.
    header: [u8; RECORD_HEADER_LEN],
    header_len: usize,
    /// Bytes of the current record's body still to come.
    body_left: usize,
}

impl RecordCounter {
    fn saw(&mut self, mut data: &[u8]) {
        self.bytes += data.len() as u64;
        while !data.is_empty() {
            if self.body_left > 0 {
                let n = self.body_left.min(data.len());
                self.body_left -= n;
                data = &data[n..];
                continue;
            }
            let n = (RECORD_HEADER_LEN - self.header_len).min(data.len());
            self.header[self.header_len..self.header_len + n].copy_from_slice(&data[..n]);
            self.header_len += n;
            data = &data[n..];
            if self.header_len == RECORD_HEADER_LEN {
                self.records += 1;
                self.body_left = u16::from_be_bytes([self.header[3], self.header[4]]) as usize;
                self.header_len = 0;
            }
        }
    }
}

/// The socket as rustls reads it, with what it gives counted.
struct Counted<'a, S> {
    inner: &'a mut S,
    counter: &'a mut RecordCounter,
}

impl<S: Read> Read for Counted<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.counter.saw(&buf[..n]);
        Ok(n)
    }
}

/// Why a read failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReadError {
    /// The socket's error (`WouldBlock` when it has nothing more).
    Io(io::Error),
    /// The peer's records were refused; the alert saying why is queued
    /// ([`TlsStream::send_alert`]).
    Tls(rustls::Error),
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

/// A TLS session (`tls`: a rustls client or server connection) over a non-blocking
/// socket (`tcp`).
pub struct TlsStream<C, S> {
    /// The session.
    pub tls: C,
    /// The socket.
    pub tcp: S,
    /// What was read from the socket so far ([`TlsStream::read_cost`]).
    read: RecordCounter,
}

impl<C, D, S> TlsStream<C, S>
where
    C: DerefMut<Target = ConnectionCommon<D>>,
    D: SideData,
    S: Read + Write,
{
    /// A session over a socket; rustls holds at most [`TLS_BUFFER`] of plaintext.
    pub fn new(mut tls: C, tcp: S) -> Self {
        tls.set_buffer_limit(Some(TLS_BUFFER));
        TlsStream {
            tls,
            tcp,
            read: RecordCounter::default(),
        }
    }

    /// What the records read from the socket since the start cost to process, in bytes:
    /// their bytes, plus [`RECORD_COST`] for each. A reader's fair share is counted in
    /// this, not in the plaintext: a peer can put each byte of plaintext in a record of
    /// its own, behind up to 32 key updates (rustls's bound), and so make it cost
    /// hundreds of times its size.
    pub fn read_cost(&self) -> u64 {
        self.read.bytes + self.read.records * RECORD_COST
    }

    /// Reads records from the socket into the session (`read_tls`), counted.
    pub fn read_tls(&mut self) -> io::Result<usize> {
        let mut counted = Counted {
            inner: &mut self.tcp,
            counter: &mut self.read,
        };
        self.tls.read_tls(&mut counted)
    }

    /// Plaintext from the peer. `Ok(0)` at the end: a close_notify, or the socket
    /// closed without one (for Tickwire's self-delimiting frames an end like any other:
    /// a cut frame is never handed on). `WouldBlock` only when the socket has nothing
    /// more. `Interrupted` when records costing [`READ_COST_WITHOUT_PLAINTEXT`] gave no
    /// plaintext: the socket may hold more, to be read when the caller's fair share
    /// (which counts them) allows.
    pub fn read(&mut self, buf: &mut [u8]) -> Result<usize, ReadError> {
        let cost_at = self.read_cost();
        loop {
            // Plaintext rustls already decrypted comes first: it must be drained before
            // more is read from the socket (rustls bounds what it holds decrypted).
            match self.tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(0),
                Err(e) => return Err(e.into()),
            }
            if self.read_cost() - cost_at >= READ_COST_WITHOUT_PLAINTEXT {
                return Err(ReadError::Io(ErrorKind::Interrupted.into()));
            }
            match self.read_tls() {
                Ok(0) => {
                    // End of the socket: processed, so the reader reports the end.
                    self.process()?;
                    return Ok(self.tls.reader().read(buf).unwrap_or(0));
                }
                Ok(_) => {
                    self.process()?;
                    // Handshake answers, key updates: out at once if the socket takes
                    // them, else with the next write or writable event.
                    if self.tls.wants_write() {
                        self.flush_pending()?;
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Processes the records read; an error leaves its alert queued.
    pub fn process(&mut self) -> Result<(), ReadError> {
        self.tls
            .process_new_packets()
            .map(|_| ())
            .map_err(ReadError::Tls)
    }

    /// Plaintext to the peer: what rustls takes, bounded by [`TLS_BUFFER`].
    /// `WouldBlock` when nothing was taken because the socket is full: a writable
    /// event follows.
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.flush_pending()?;
        let n = self.tls.writer().write(buf)?;
        if n == 0 {
            return Err(ErrorKind::WouldBlock.into());
        }
        self.flush_pending()?;
        Ok(n)
    }

    /// Writes the records waiting for the socket (handshake, alerts, data taken
    /// earlier), as far as the socket takes them.
    pub fn flush_pending(&mut self) -> io::Result<()> {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.tcp) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// After a refused record: the alert rustls queued, sent if the socket takes it
    /// now (best effort; the connection is closing).
    pub fn send_alert(&mut self) {
        while self.tls.wants_write() {
            match self.tls.write_tls(&mut self.tcp) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
}

#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    use rustls::{ClientConfig, ClientConnection, RootCertStore, ServerConfig, ServerConnection};
    use std::net::{TcpListener, TcpStream};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    type Client = TlsStream<ClientConnection, TcpStream>;
    type Server = TlsStream<ServerConnection, TcpStream>;

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    /// A server configuration with a new self-signed certificate for 127.0.0.1, and
    /// that certificate.
    fn server_config() -> (Arc<ServerConfig>, CertificateDer<'static>) {
        let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
        let cert = CertificateDer::from(ck.cert.der().to_vec());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der()));
        let cfg = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.clone()], key)
            .unwrap();
        (Arc::new(cfg), cert)
    }

    fn client_config(trusted: CertificateDer<'static>) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(trusted).unwrap();
        let cfg = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        Arc::new(cfg)
    }

    /// Both ends over one loopback connection, non-blocking.
    fn pair(server: Arc<ServerConfig>, client: Arc<ClientConfig>) -> (Server, Client) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (s, _) = listener.accept().unwrap();
        c.set_nonblocking(true).unwrap();
        s.set_nonblocking(true).unwrap();
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let server = TlsStream::new(ServerConnection::new(server).unwrap(), s);
        let client = TlsStream::new(ClientConnection::new(client, name).unwrap(), c);
        (server, client)
    }

    /// Reads what `end` has until `want` bytes came, or the end, or an error; bounded.
    fn read_all<C, D>(
        end: &mut TlsStream<C, TcpStream>,
        other: &mut dyn FnMut(),
        want: usize,
    ) -> Result<Vec<u8>, ReadError>
    where
        C: DerefMut<Target = ConnectionCommon<D>>,
        D: SideData,
    {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while got.len() < want {
            assert!(
                Instant::now() < deadline,
                "only {} of {want} bytes",
                got.len()
            );
            other();
            match end.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(ReadError::Io(e)) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(got)
    }

    #[test]
    fn records_are_counted_by_their_headers_however_the_reads_cut_them() {
        // Three records: bodies of 3, 0 and 300 bytes.
        let mut bytes = vec![23, 3, 3, 0, 3, 1, 2, 3, 23, 3, 3, 0, 0, 23, 3, 3, 1, 44];
        bytes.extend_from_slice(&[9; 300]);
        for cut in [1, 2, 4, 5, 7, 64, bytes.len()] {
            let mut c = RecordCounter::default();
            for piece in bytes.chunks(cut) {
                c.saw(piece);
            }
            assert_eq!((c.records, c.bytes), (3, bytes.len() as u64), "cut {cut}");
            assert_eq!((c.header_len, c.body_left), (0, 0), "cut {cut}");
        }
    }

    /// Plaintext a byte a record, behind 31 key updates each, costs the reader its
    /// records: the fair share that counts it is not fooled by the byte.
    #[test]
    fn a_byte_behind_key_updates_costs_its_records() {
        let (server_cfg, cert) = server_config();
        let (mut server, mut client) = pair(server_cfg, client_config(cert));
        // The handshake, and a first byte.
        client.write(b"a").unwrap();
        let mut drive = || {
            let _ = client.flush_pending();
            let _ = client.read(&mut [0u8; 1024]);
        };
        assert_eq!(read_all(&mut server, &mut drive, 1).unwrap(), b"a");
        let before = server.read_cost();
        for _ in 0..10 {
            for _ in 0..31 {
                client.tls.refresh_traffic_keys().unwrap();
            }
            client.write(b"b").unwrap();
        }
        let mut drive = || {
            let _ = client.flush_pending();
        };
        assert_eq!(
            read_all(&mut server, &mut drive, 10).unwrap(),
            b"bbbbbbbbbb"
        );
        let cost = server.read_cost() - before;
        assert!(
            cost >= 10 * 32 * RECORD_COST,
            "10 bytes in 320 records cost {cost}"
        );
    }

    /// A socket in memory: reads what `input` holds, then `WouldBlock`.
    #[derive(Default)]
    struct Mem {
        input: std::collections::VecDeque<u8>,
        output: Vec<u8>,
    }

    impl Read for Mem {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.input.is_empty() {
                return Err(ErrorKind::WouldBlock.into());
            }
            self.input.read(buf)
        }
    }

    impl Write for Mem {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.output.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A peer sending an empty record and a key update in turn (each resets rustls's
    /// count of the other, so it takes them without end) is read a bounded cost at a
    /// time, not for as long as it sends: the read says `Interrupted` with the rest in
    /// the socket, and reads go on from there, the plaintext after it intact.
    #[test]
    fn records_without_plaintext_are_read_a_bounded_cost_at_a_time() {
        let (server_cfg, cert) = server_config();
        let mut roots = RootCertStore::empty();
        roots.add(cert).unwrap();
        let (cfg, secret) = crate::testing::secret_logging_client(roots);
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let mut client = ClientConnection::new(Arc::new(cfg), name).unwrap();
        let mut server = TlsStream::new(ServerConnection::new(server_cfg).unwrap(), Mem::default());
        let mut buf = [0u8; 4096];
        let is = |r: &Result<usize, ReadError>, kind: ErrorKind| matches!(r, Err(ReadError::Io(e)) if e.kind() == kind);
        for _ in 0..8 {
            if !client.is_handshaking() && !server.tls.is_handshaking() {
                break;
            }
            while client.wants_write() {
                client.write_tls(&mut server.tcp.input).unwrap();
            }
            let r = server.read(&mut buf);
            assert!(is(&r, ErrorKind::WouldBlock), "{r:?}");
            let answer = std::mem::take(&mut server.tcp.output);
            let mut answer = &answer[..];
            while !answer.is_empty() {
                client.read_tls(&mut answer).unwrap();
                client.process_new_packets().unwrap();
            }
        }
        assert!(!server.tls.is_handshaking());
        let (flood, last) = crate::testing::empty_records_and_key_updates(&secret.get(), 2000);
        server.tcp.input.extend(&flood);
        server
            .tcp
            .input
            .extend(crate::testing::seal_record(&last, 0, b"z\x17"));
        let before = server.read_cost();
        let r = server.read(&mut buf);
        assert!(is(&r, ErrorKind::Interrupted), "{r:?}");
        assert!(
            server.tcp.input.len() > flood.len() / 2,
            "one read took {} of the {} bytes of records",
            flood.len() + 22 - server.tcp.input.len(),
            flood.len()
        );
        let mut reads = 1;
        let got = loop {
            assert!(reads < 4000, "{reads} reads");
            match server.read(&mut buf) {
                Ok(n) => break buf[..n].to_vec(),
                r => assert!(is(&r, ErrorKind::Interrupted), "{r:?}"),
            }
            reads += 1;
        };
        assert_eq!(got, b"z");
        assert!(server.read_cost() - before > 4000 * RECORD_COST);
        let r = server.read(&mut buf);
        assert!(is(&r, ErrorKind::WouldBlock), "{r:?}");
    }

    #[test]
    fn both_ends_handshake_and_move_bytes_over_non_blocking_sockets() {
        let (server_cfg, cert) = server_config();
        let (mut server, mut client) = pair(server_cfg, client_config(cert));
        let hello = vec![7u8; 200_000];
        // The client writes as far as rustls takes (the handshake first); the server
        // reads, and drives its side of the handshake by reading.
        let mut at = 0;
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        while got.len() < hello.len() {
            assert!(
                Instant::now() < deadline,
                "{} of {} bytes",
                got.len(),
                hello.len()
            );
            if at < hello.len() {
                match client.write(&hello[at..]) {
                    Ok(n) => {
                        assert!(n <= TLS_BUFFER, "took {n} bytes at once");
                        at += n;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => panic!("client write: {e}"),
                }
            }
            let _ = client.flush_pending();
            // The client reads too: the server's handshake records come to it so.
            match client.read(&mut buf) {
                Ok(_) | Err(ReadError::Io(_)) => {}
                Err(ReadError::Tls(e)) => panic!("client: {e}"),
            }
            match server.read(&mut buf) {
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(ReadError::Io(e)) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => panic!("server: {e:?}"),
            }
            let _ = server.flush_pending();
        }
        assert_eq!(got, hello);
        // And back, then a clean end: close_notify reads as 0.
        server.write(b"bye").unwrap();
        server.tls.send_close_notify();
        server.flush_pending().unwrap();
        let back = read_all(&mut client, &mut || {}, usize::MAX).unwrap();
        assert_eq!(back, b"bye");
    }

    #[test]
    fn a_certificate_the_client_does_not_trust_is_a_tls_error_with_its_alert_sent() {
        let (server_cfg, _) = server_config();
        let (_, other_cert) = server_config();
        let (mut server, mut client) = pair(server_cfg, client_config(other_cert));
        client.flush_pending().unwrap(); // the ClientHello
        let mut buf = [0u8; 4096];
        let client_err = {
            let mut drive_server = || {
                let _ = server.read(&mut buf);
                let _ = server.flush_pending();
            };
            read_all(&mut client, &mut drive_server, 1).expect_err("a refused certificate")
        };
        let ReadError::Tls(e) = client_err else {
            panic!("{client_err:?}")
        };
        assert!(matches!(e, rustls::Error::InvalidCertificate(_)), "{e:?}");
        client.send_alert();
        // The server hears why: the client's alert.
        let server_err = read_all(&mut server, &mut || {}, 1).expect_err("the alert");
        assert!(
            matches!(server_err, ReadError::Tls(rustls::Error::AlertReceived(_))),
            "{server_err:?}"
        );
    }
}
