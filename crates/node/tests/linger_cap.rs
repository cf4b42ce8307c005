//! The cap on lingering connections that never logged in: a flood of HTTP clients that
//! take their answer and never close is held to it (the node closes the ones past it),
//! and it takes those that have all their answer first, not a slow reader still
//! receiving a page. Real sockets, a node in this process.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::FromRawFd;
use std::time::{Duration, Instant};
use tickwire_node::config::NodeConfig;
use tickwire_node::{NodeServer, RunningNode};

/// The tests count this process's descriptors: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The node's cap (connections.rs), and a flood past it.
const CAP: usize = 1024;
const FLOOD: usize = 1100;

/// A client socket with a small receive buffer (set before connecting), so that the
/// node cannot write a page of tens of KB at once.
fn slow_reader(addr: SocketAddr) -> TcpStream {
    let SocketAddr::V4(a) = addr else {
        panic!("an IPv4 address")
    };
    // SAFETY: a new socket, owned at once; the option and address live across the calls.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let stream = TcpStream::from_raw_fd(fd);
        let v: libc::c_int = 1024;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: a.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(*a.ip()).to_be(),
            },
            sin_zero: [0; 8],
        };
        let rc = libc::connect(
            fd,
            (&sin as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        assert_eq!(rc, 0, "connect: {}", std::io::Error::last_os_error());
        stream
    }
}

/// A node whose closing connections linger a minute and whose sockets send little at
/// a time; its WebSocket address (where HTTP is answered).
fn node() -> (RunningNode, SocketAddr) {
    let mut cfg = NodeConfig::default();
    cfg.node.listen = "127.0.0.1:0".parse().unwrap();
    cfg.websocket.listen = "127.0.0.1:0".into();
    cfg.limits.close_linger_ms = 60_000;
    cfg.limits.login_timeout_ms = 600_000;
    cfg.limits.max_pending_logins = 100_000;
    cfg.limits.max_pending_logins_per_address = 100_000;
    cfg.limits.socket_send_buffer_bytes = 4096;
    let node = NodeServer::spawn(cfg).unwrap();
    let ws = node.ws_addr.expect("the WebSocket API's HTTP");
    (node, ws)
}

/// File descriptors this process holds.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Waits (20 s at most) until this process holds at most `others` descriptors plus the
/// node's lingering sockets up to the cap (and a few of its own), or panics.
fn assert_node_holds_at_most_the_cap(others: usize) {
    let most = others + CAP + 16;
    let deadline = Instant::now() + Duration::from_secs(20);
    while open_fds() > most && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let node = open_fds().saturating_sub(others);
    assert!(
        open_fds() <= most,
        "the node holds {node} sockets: more than {CAP} linger"
    );
}

/// Reads until the peer closes (or resets, or 20 s pass): what came.
fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while let Ok(n @ 1..) = s.read(&mut buf) {
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// The body's length and the length its head announced.
fn body_and_length(answer: &[u8]) -> (usize, usize) {
    let text = String::from_utf8_lossy(answer);
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP head");
    let length = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse::<usize>().unwrap())
        })
        .expect("a Content-Length");
    (body.len(), length)
}

#[test]
fn the_linger_cap_closes_finished_floods_not_a_slow_reader() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (_node, ws) = node();
    let before = open_fds();
    // The dashboard page to a reader that takes it slowly: the node has the rest to
    // write while the connection lingers.
    let mut page = slow_reader(ws);
    page.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    // HTTP clients that take their answer and never close: each lingers, done writing.
    let mut flood = Vec::new();
    for _ in 0..FLOOD {
        let mut s = TcpStream::connect(ws).unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        flood.push(s);
    }
    // Each has its answer: the node has answered all, and they linger.
    let mut head = [0u8; 17];
    for s in &mut flood {
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.read_exact(&mut head).expect("an answer");
        assert_eq!(&head, b"HTTP/1.1 200 OK\r\n");
    }
    // The page comes whole: the flood's finished connections went first.
    let (body, length) = body_and_length(&read_to_close(&mut page));
    assert_eq!(body, length, "the page was cut short by the linger cap");
    // And the flood was held to the cap: the node closed its sockets past it (this
    // process holds both ends: the flood's and the node's).
    assert_node_holds_at_most_the_cap(before + FLOOD + 1);
    drop(flood);
}

/// Connections that logged in and were closed by the node (here: a login broken on
/// purpose by a second one) are held to the cap too: a peer that never closes its side
/// cannot make the node hold a socket each for the linger time.
#[test]
fn connections_closed_after_their_login_are_held_to_the_cap_too() {
    use tickwire_proto::frame::FrameWriter;
    use tickwire_proto::{Login, Message, Role};
    const MANY: usize = 1500;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (node, _) = node();
    let mut w = FrameWriter::new(1 << 20);
    let login = Message::Login(Login::new(Role::Subscriber, "flood", "anyone", ""));
    w.push(&login).unwrap();
    w.push(&login).unwrap();
    let bytes = w.sealed_bytes().to_vec();
    let before = open_fds();
    // One at a time: each is answered (its welcome, then why it is closed) and its
    // writing side closed by the node (its FIN); the socket is kept open.
    let mut held = Vec::new();
    for _ in 0..MANY {
        let mut s = TcpStream::connect(node.addr).unwrap();
        s.write_all(&bytes).unwrap();
        let answer = read_to_close(&mut s);
        assert!(!answer.is_empty(), "no answer");
        held.push(s);
    }
    assert_node_holds_at_most_the_cap(before + MANY);
    drop(held);
}
