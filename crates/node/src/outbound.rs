//! Connections the node opens itself (to an upstream node, to an interactive RSSL
//! provider): a non-blocking connect registered with the event loop's poll, its
//! outcome once the socket is ready, and closing.

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use std::io::ErrorKind;
use std::net::ToSocketAddrs;

/// Starts connecting to `addr` (`host:port`), the socket registered under `token` for
/// reading and writing; why not, if it cannot even start.
pub(crate) fn connect(addr: &str, registry: &Registry, token: Token) -> Result<TcpStream, String> {
    let at = match addr.to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(a)) => a,
        Ok(None) => return Err("the address resolves to nothing".into()),
        Err(e) => return Err(format!("the address does not resolve: {e}")),
    };
    let mut s = TcpStream::connect(at).map_err(|e| e.to_string())?;
    registry
        .register(&mut s, token, Interest::READABLE | Interest::WRITABLE)
        .map_err(|e| e.to_string())?;
    Ok(s)
}

/// A connect whose socket became ready: `Ok(true)` connected (Nagle off), `Ok(false)`
/// not yet, `Err` refused (the caller closes the socket).
pub(crate) fn connect_result(s: &mut TcpStream) -> Result<bool, String> {
    let err = match s.take_error() {
        Ok(Some(e)) | Err(e) => Some(e),
        Ok(None) => s.peer_addr().err(),
    };
    match err {
        Some(e) if e.kind() == ErrorKind::NotConnected => Ok(false),
        Some(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(false),
        Some(e) => Err(e.to_string()),
        None => {
            let _ = s.set_nodelay(true);
            Ok(true)
        }
    }
}

/// Closes a socket the node opened: out of the poll, both ways shut.
pub(crate) fn close(mut s: TcpStream, registry: &Registry) {
    let _ = registry.deregister(&mut s);
    let _ = s.shutdown(std::net::Shutdown::Both);
}
