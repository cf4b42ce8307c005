//! A byte relay: the least any infrastructure between two peers can do. Each accepted
//! connection is joined to a new connection to `upstream`, and bytes are copied both
//! ways as they come (a blocking thread per direction, `TCP_NODELAY` on both sides):
//! one more loopback hop, one more wake-up, no decoding. The RSSL scenario puts it
//! between ProvPerf and ConsPerf to show what one hop costs on this machine, beside
//! what the node adds.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// What one read may take (the size of a large RIPC burst).
const CHUNK: usize = 64 * 1024;

/// A running relay; dropping it closes every connection and joins its threads.
pub struct ByteRelay {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Every relayed socket, to be shut down when the relay stops.
    sockets: Arc<Mutex<Vec<TcpStream>>>,
    acceptor: Option<JoinHandle<Vec<JoinHandle<()>>>>,
}

impl ByteRelay {
    /// Listens on a free loopback port and relays every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> io::Result<ByteRelay> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let sockets = Arc::new(Mutex::new(Vec::new()));
        let acceptor = {
            let (stop, sockets) = (stop.clone(), sockets.clone());
            std::thread::Builder::new()
                .name("byte-relay".into())
                .spawn(move || accept_loop(listener, upstream, &stop, &sockets))?
        };
        Ok(ByteRelay {
            addr,
            stop,
            sockets,
            acceptor: Some(acceptor),
        })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for ByteRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the acceptor, which then sees `stop`.
        let _ = TcpStream::connect(self.addr);
        let copiers = self.acceptor.take().map(|a| a.join().unwrap_or_default());
        for s in self
            .sockets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = s.shutdown(Shutdown::Both);
        }
        for c in copiers.into_iter().flatten() {
            let _ = c.join();
        }
    }
}

/// Accepts until told to stop: the copying threads it started.
fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    stop: &AtomicBool,
    sockets: &Mutex<Vec<TcpStream>>,
) -> Vec<JoinHandle<()>> {
    let mut copiers = Vec::new();
    for client in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(client) = client else { continue };
        let Ok(server) = TcpStream::connect(upstream) else {
            // Nothing to join it to: the client sees its connection closed.
            continue;
        };
        let joined = (|| -> io::Result<[JoinHandle<()>; 2]> {
            for s in [&client, &server] {
                s.set_nodelay(true)?;
                sockets
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(s.try_clone()?);
            }
            Ok([
                copier(client.try_clone()?, server.try_clone()?)?,
                copier(server, client)?,
            ])
        })();
        copiers.extend(joined.into_iter().flatten());
    }
    copiers
}

/// Copies `from` to `to` until either ends, then ends both directions of `to`'s write
/// side so the peer sees the close.
fn copier(mut from: TcpStream, mut to: TcpStream) -> io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("byte-relay-copy".into())
        .spawn(move || {
            let mut buf = vec![0u8; CHUNK];
            loop {
                match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                }
            }
            let _ = to.shutdown(Shutdown::Write);
            let _ = from.shutdown(Shutdown::Read);
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_go_both_ways_and_a_close_goes_through() {
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let relay = ByteRelay::start(server.local_addr().unwrap()).unwrap();
        let mut client = TcpStream::connect(relay.addr()).unwrap();
        let (mut upstream, _) = server.accept().unwrap();
        client.write_all(b"ConnectReq").unwrap();
        let mut got = [0u8; 10];
        upstream.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ConnectReq");
        upstream.write_all(b"ConnectAck").unwrap();
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ConnectAck");
        // The upstream's close reaches the client as the end of its stream.
        drop(upstream);
        let mut rest = Vec::new();
        client.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
    }

    #[test]
    fn dropping_the_relay_closes_its_connections() {
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let relay = ByteRelay::start(server.local_addr().unwrap()).unwrap();
        let mut client = TcpStream::connect(relay.addr()).unwrap();
        let (_upstream, _) = server.accept().unwrap();
        client
            .set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        drop(relay);
        // Ended (0 bytes) or reset: either way, not left hanging.
        let mut byte = [0u8; 1];
        match client.read(&mut byte) {
            Ok(n) => assert_eq!(n, 0),
            Err(e) => assert!(
                !matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ),
                "the relay left its client open: {e}"
            ),
        }
    }
}
