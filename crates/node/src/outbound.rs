//! Connections the node opens itself (to an upstream node, to an interactive RSSL
//! provider): a non-blocking connect registered with the event loop's poll, its
//! outcome once the socket is ready, and closing.

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use std::io::ErrorKind;
use std::net::{SocketAddr, ToSocketAddrs};

/// Starts connecting to `addr` (`host:port`), the socket registered under `token` for
/// reading and writing; why not, if it cannot even start. A name that resolves to
/// several addresses (`localhost`: ::1 and 127.0.0.1) is tried at each in turn, one
/// per `attempt`, so a peer listening on only one of them is reached.
pub(crate) fn connect(
    addr: &str,
    registry: &Registry,
    token: Token,
    attempt: usize,
) -> Result<TcpStream, String> {
    let all: Vec<SocketAddr> = match addr.to_socket_addrs() {
        Ok(a) => a.collect(),
        Err(e) => return Err(format!("the address does not resolve: {e}")),
    };
    connect_one_of(&all, registry, token, attempt)
}

/// Starts connecting to `all[attempt % all.len()]`.
fn connect_one_of(
    all: &[SocketAddr],
    registry: &Registry,
    token: Token,
    attempt: usize,
) -> Result<TcpStream, String> {
    let Some(&at) = all.get(attempt % all.len().max(1)) else {
        return Err("the address resolves to nothing".into());
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Connects to `all` at `attempt` and waits for the outcome.
    fn reaches(all: &[SocketAddr], attempt: usize) -> bool {
        let poll = mio::Poll::new().unwrap();
        let mut s = connect_one_of(all, poll.registry(), Token(1), attempt).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match connect_result(&mut s) {
                Ok(true) => return true,
                Err(_) => return false,
                Ok(false) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Ok(false) => panic!("no outcome of the connect in 10 s"),
            }
        }
    }

    #[test]
    fn each_address_of_a_name_is_tried_in_turn() {
        let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        // A port nothing listens on: bound, then let go.
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let all = [closed, open.local_addr().unwrap()];
        assert!(!reaches(&all, 0), "the first address refuses");
        assert!(reaches(&all, 1), "the next attempt tries the second");
        assert!(!reaches(&all, 2), "and round again");
    }
}
