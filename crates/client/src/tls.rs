//! TLS to a node (`[tls]` on the node; `--tls --ca FILE` on the commands): the client
//! configuration, and the byte stream a connection reads and writes, plain or TLS over
//! the same non-blocking socket.
//!
//! Only the certificates given are trusted (the node's CA, or its self-signed
//! certificate): the system's certificate store is not read. The name checked is the
//! host of the node's address, a DNS name or an IP address (which the certificate must
//! then list as an IP subject alternative name).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{CertificateError, ClientConfig, ClientConnection, RootCertStore};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::Path;
use std::sync::Arc;
use tickwire_tls::ReadError;

pub use tickwire_tls::TLS_BUFFER;

/// A client configuration trusting the certificates of a PEM file (a CA, or the node's
/// self-signed certificate). Errors name the file and say why.
pub fn client_config_from_ca_file(path: &Path) -> Result<Arc<ClientConfig>, String> {
    let pem =
        std::fs::read(path).map_err(|e| format!("cannot read CA file {}: {e}", path.display()))?;
    client_config_from_ca_pem(&pem).map_err(|e| format!("CA file {}: {e}", path.display()))
}

/// A client configuration trusting the certificates in PEM text.
pub fn client_config_from_ca_pem(pem: &[u8]) -> Result<Arc<ClientConfig>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM file: {e}"))?;
    if certs.is_empty() {
        return Err(
            "no certificate in it (expected PEM \"-----BEGIN CERTIFICATE-----\" sections)".into(),
        );
    }
    let mut roots = RootCertStore::empty();
    for c in certs {
        roots
            .add(c)
            .map_err(|e| format!("unusable certificate: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

/// The name to verify the node's certificate against: the host of `host:port`
/// (`[v6]:port` too), a DNS name or an IP address.
pub fn server_name(addr: &str) -> Result<ServerName<'static>, String> {
    let host = match addr.rsplit_once(':') {
        Some((h, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => addr,
    };
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    ServerName::try_from(host.to_string())
        .map_err(|e| format!("{host:?} is not a host name or IP address for TLS: {e}"))
}

/// A connection's byte stream.
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

/// A TLS session to a node over the connection's socket.
pub(crate) type TlsStream = tickwire_tls::TlsStream<ClientConnection, TcpStream>;

/// A read's failure as the client reports it: for a record the client refused, the
/// alert is sent (best effort), the write side shut, and the TLS error explained.
pub(crate) fn read_error(t: &mut TlsStream, e: ReadError) -> io::Error {
    match e {
        ReadError::Io(e) => e,
        ReadError::Tls(e) => {
            t.send_alert();
            let _ = t.tcp.shutdown(Shutdown::Write);
            io::Error::new(ErrorKind::InvalidData, TlsError(e))
        }
        other => io::Error::other(format!("{other:?}")),
    }
}

impl Stream {
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => &t.tcp,
        }
    }

    /// Plaintext from the node; `WouldBlock` only when the socket has nothing more.
    /// Over TLS, `Interrupted` when records without plaintext took a read's share
    /// (the socket may hold more).
    #[inline]
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(t) => t.read(buf).map_err(|e| read_error(t, e)),
        }
    }

    /// Plaintext to the node: what the socket (or rustls, up to [`TLS_BUFFER`]) takes;
    /// `WouldBlock` when nothing could be taken because the socket is full.
    #[inline]
    pub(crate) fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(t) => t.write(buf),
        }
    }

    /// Writes the TLS records waiting for the socket, as far as it takes them.
    #[inline]
    pub(crate) fn flush_pending(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(_) => Ok(()),
            Stream::Tls(t) => t.flush_pending(),
        }
    }

    /// TLS records wait for the socket.
    #[inline]
    pub(crate) fn has_pending(&self) -> bool {
        match self {
            Stream::Plain(_) => false,
            Stream::Tls(t) => t.tls.wants_write(),
        }
    }
}

/// A TLS failure, kept as rustls reported it (so a certificate error can be explained).
#[derive(Debug)]
pub(crate) struct TlsError(pub rustls::Error);

impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TLS: {}", self.0)?;
        match &self.0 {
            rustls::Error::InvalidCertificate(c)
                if format!("{c:?}").contains("CaUsedAsEndEntity") =>
            {
                write!(
                    f,
                    " (the node's certificate is a CA certificate, basicConstraints CA:TRUE, \
                     as `openssl req -x509` makes by default: give the node a certificate \
                     with CA:FALSE, or one signed by that CA)"
                )
            }
            // The dates are checked first: whatever else is wrong, this is to be fixed.
            rustls::Error::InvalidCertificate(
                CertificateError::Expired
                | CertificateError::ExpiredContext { .. }
                | CertificateError::NotValidYet
                | CertificateError::NotValidYetContext { .. },
            ) => write!(
                f,
                " (the node's certificate is outside its dates of validity: renew it, or \
                 set the clock right on this host or on the node's)"
            ),
            rustls::Error::InvalidCertificate(_) => write!(
                f,
                " (the node's certificate is not one --ca trusts, or not for this host)"
            ),
            rustls::Error::InvalidMessage(_) => write!(
                f,
                " (the node does not speak TLS on this port? connect without --tls)"
            ),
            _ => Ok(()),
        }
    }
}

impl std::error::Error for TlsError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_name_is_the_host_of_the_address() {
        let ip = |s: &str| match server_name(s).unwrap() {
            ServerName::IpAddress(a) => std::net::IpAddr::from(a).to_string(),
            other => panic!("{other:?}"),
        };
        assert_eq!(ip("127.0.0.1:14002"), "127.0.0.1");
        assert_eq!(ip("[::1]:14002"), "::1");
        assert!(matches!(
            server_name("node.example.com:14002").unwrap(),
            ServerName::DnsName(_)
        ));
        assert!(server_name("bad host:1").is_err());
    }

    /// A node whose certificate is out of its dates is refused, and the client says
    /// so: not that --ca does not trust it, which sends the operator to the wrong file.
    #[test]
    fn an_expired_certificate_is_refused_as_expired() {
        use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
        use std::time::Duration;
        let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".into()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server_cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let node = std::thread::spawn(move || {
            let (mut tcp, _) = listener.accept().unwrap();
            tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut conn = rustls::ServerConnection::new(Arc::new(server_cfg)).unwrap();
            while conn.is_handshaking() && conn.complete_io(&mut tcp).is_ok() {}
        });
        let mut opts = crate::ConnectOptions::new(addr.clone());
        opts.tls = Some(client_config_from_ca_pem(cert.pem().as_bytes()).unwrap());
        let e = match crate::conn::Transport::open(&opts, &addr) {
            Ok(_) => panic!("an expired certificate was taken"),
            Err(e) => e.to_string(),
        };
        node.join().unwrap();
        assert!(e.contains("expired"), "{e}");
        assert!(e.contains("clock") && !e.contains("--ca trusts"), "{e}");
    }
}
