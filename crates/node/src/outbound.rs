//! Connections the node opens itself (to an upstream node, to an interactive RSSL
//! provider): a non-blocking connect registered with the event loop's poll, its
//! outcome once the socket is ready, and closing.

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use std::io::ErrorKind;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a name's addresses are used before it is resolved again (at the next
/// connect after that).
const RESOLVED_FOR: Duration = Duration::from_secs(30);

/// How often the event loop looks whether a lookup has finished.
pub(crate) const LOOKUP_POLL: Duration = Duration::from_millis(5);

/// How long a lookup may take before the connect counts as failed (the lookup goes on,
/// and its answer is used at a later connect).
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// A peer's `host:port`, resolved off the event loop: `getaddrinfo` blocks, for
/// seconds when a name server is slow or gone, and the loop serves every client
/// meanwhile. An IP address is never looked up. The addresses of a name are kept for
/// [`RESOLVED_FOR`], then looked up again at the next connect; while a new lookup
/// fails or takes longer than [`LOOKUP_TIMEOUT`], the last addresses found are used.
/// One lookup at a time: a lookup that hangs is not started again.
pub(crate) struct Resolver {
    addr: String,
    state: Lookup,
    /// The addresses the last lookup that succeeded found.
    last: Option<Vec<SocketAddr>>,
}

enum Lookup {
    /// Nothing yet, or what was known is stale.
    Due,
    /// A thread is looking the name up, since then.
    Asking(mpsc::Receiver<Result<Vec<SocketAddr>, String>>, Instant),
    /// The addresses, and since when (`None`: an IP address, for good).
    Known(Vec<SocketAddr>, Option<Instant>),
}

impl Resolver {
    pub(crate) fn new(addr: &str) -> Self {
        let state = match addr.parse::<SocketAddr>() {
            Ok(a) => Lookup::Known(vec![a], None),
            Err(_) => Lookup::Due,
        };
        Resolver {
            addr: addr.to_owned(),
            state,
            last: None,
        }
    }

    /// Whether a lookup is under way and not yet past its time-out (the loop should
    /// look again in [`LOOKUP_POLL`]).
    pub(crate) fn is_looking_up(&self) -> bool {
        matches!(self.state, Lookup::Asking(_, t) if t.elapsed() < LOOKUP_TIMEOUT)
    }

    /// The addresses, or why there are none; `None` while the lookup runs (it is
    /// started here when due).
    pub(crate) fn addresses(&mut self, now: Instant) -> Option<Result<Vec<SocketAddr>, String>> {
        match &self.state {
            Lookup::Known(a, since)
                if since.is_none_or(|t| now.saturating_duration_since(t) < RESOLVED_FOR) =>
            {
                return Some(Ok(a.clone()));
            }
            Lookup::Asking(rx, started) => {
                let answer = match rx.try_recv() {
                    Ok(r) => r,
                    Err(mpsc::TryRecvError::Empty)
                        if now.saturating_duration_since(*started) < LOOKUP_TIMEOUT =>
                    {
                        return None;
                    }
                    // Still asking: it stays the one lookup, answered later.
                    Err(mpsc::TryRecvError::Empty) => {
                        return Some(self.last.clone().ok_or_else(|| {
                            format!("no answer from the name lookup in {LOOKUP_TIMEOUT:?}")
                        }));
                    }
                    Err(mpsc::TryRecvError::Disconnected) => {
                        Err("the lookup of the name stopped".into())
                    }
                };
                return Some(match (answer, self.last.clone()) {
                    (Ok(a), _) => {
                        self.last = Some(a.clone());
                        self.state = Lookup::Known(a.clone(), Some(now));
                        Ok(a)
                    }
                    // The name no longer resolves: what it was, until the next try.
                    (Err(_), Some(last)) => {
                        self.state = Lookup::Known(last.clone(), Some(now));
                        Ok(last)
                    }
                    (Err(why), None) => {
                        self.state = Lookup::Due;
                        Err(why)
                    }
                });
            }
            Lookup::Known(..) | Lookup::Due => {}
        }
        let (tx, rx) = mpsc::channel();
        let addr = self.addr.clone();
        let spawned = std::thread::Builder::new()
            .name("tickwire-resolve".into())
            .spawn(move || {
                let found = match addr.to_socket_addrs() {
                    Ok(a) => Ok(a.collect::<Vec<_>>()),
                    Err(e) => Err(format!("the address does not resolve: {e}")),
                };
                let _ = tx.send(found);
            });
        if let Err(e) = spawned {
            return Some(Err(format!("cannot look the name up: {e}")));
        }
        self.state = Lookup::Asking(rx, now);
        None
    }
}

/// Starts connecting to the resolver's address, the socket registered under `token`
/// for reading and writing; `Ok(None)` while its name is looked up (try again);
/// why not, if it cannot even start. A name that resolves to several addresses
/// (`localhost`: ::1 and 127.0.0.1) is tried at each in turn, one per `attempt`, so a
/// peer listening on only one of them is reached.
pub(crate) fn connect(
    to: &mut Resolver,
    registry: &Registry,
    token: Token,
    attempt: usize,
    now: Instant,
) -> Result<Option<TcpStream>, String> {
    match to.addresses(now) {
        None => Ok(None),
        Some(Err(why)) => Err(why),
        Some(Ok(all)) => connect_one_of(&all, registry, token, attempt).map(Some),
    }
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

    #[test]
    fn an_ip_address_is_never_looked_up_and_a_name_is_looked_up_off_the_caller() {
        let t0 = Instant::now();
        let mut ip = Resolver::new("127.0.0.1:14002");
        let want: SocketAddr = "127.0.0.1:14002".parse().unwrap();
        assert_eq!(ip.addresses(t0), Some(Ok(vec![want])));
        assert_eq!(ip.addresses(t0 + RESOLVED_FOR * 10), Some(Ok(vec![want])));
        assert!(!ip.is_looking_up());
        // A name: the first call starts the lookup and returns at once.
        let mut name = Resolver::new("localhost:14002");
        assert_eq!(name.addresses(t0), None);
        let deadline = Instant::now() + Duration::from_secs(20);
        let found = loop {
            assert!(name.is_looking_up());
            if let Some(r) = name.addresses(t0) {
                break r.unwrap();
            }
            assert!(Instant::now() < deadline, "the lookup did not end");
            std::thread::sleep(LOOKUP_POLL);
        };
        assert!(found
            .iter()
            .all(|a| a.ip().is_loopback() && a.port() == 14002));
        // Kept, then looked up again once stale.
        assert_eq!(name.addresses(t0 + RESOLVED_FOR / 2), Some(Ok(found)));
        assert_eq!(name.addresses(t0 + RESOLVED_FOR), None);
        // An address that cannot resolve says why (no port: refused before any
        // name server is asked).
        let mut bad = Resolver::new("localhost");
        let deadline = Instant::now() + Duration::from_secs(30);
        let why = loop {
            if let Some(r) = bad.addresses(t0) {
                break r.unwrap_err();
            }
            assert!(Instant::now() < deadline, "the lookup did not end");
            std::thread::sleep(LOOKUP_POLL);
        };
        assert!(why.contains("does not resolve"), "{why}");
    }

    #[test]
    fn a_lookup_past_its_time_fails_the_connect_or_uses_the_last_addresses() {
        let t0 = Instant::now();
        let was: Vec<SocketAddr> = vec!["127.0.0.1:14002".parse().unwrap()];
        // A lookup that does not answer (its sender held here).
        let (tx, rx) = mpsc::channel();
        let mut r = Resolver::new("localhost:14002");
        r.state = Lookup::Asking(rx, t0);
        assert_eq!(r.addresses(t0 + LOOKUP_TIMEOUT / 2), None);
        let e = r.addresses(t0 + LOOKUP_TIMEOUT).unwrap().unwrap_err();
        assert!(e.contains("no answer from the name lookup"), "{e}");
        // Still the one lookup: no second thread, its answer used when it comes.
        assert!(matches!(r.state, Lookup::Asking(..)));
        r.last = Some(was.clone());
        assert_eq!(r.addresses(t0 + LOOKUP_TIMEOUT), Some(Ok(was.clone())));
        // A failed lookup after a good one: the addresses it had, until the next try.
        tx.send(Err("the address does not resolve".into())).unwrap();
        let later = t0 + 2 * LOOKUP_TIMEOUT;
        assert_eq!(r.addresses(later), Some(Ok(was.clone())));
        assert_eq!(r.addresses(later + RESOLVED_FOR / 2), Some(Ok(was)));
        assert_eq!(r.addresses(later + RESOLVED_FOR), None, "looked up again");
    }
}
