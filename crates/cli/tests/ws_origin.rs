//! Browser safety of the WebSocket upgrade, against a real `tickwire node --ws` over
//! 127.0.0.1: an upgrade whose `Origin` is neither the node's own (under one of its
//! names) nor listed in `websocket.allowed_origins` gets 403 and EOF (and a warning in
//! the log); the node's own origin (the dashboard page) and a listed one get 101. Raw HTTP, every read
//! bounded in time; the node is killed on drop.

mod common;

use common::*;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// How long any answer may take.
const WAIT: Duration = Duration::from_secs(10);

/// Connects and sends a WebSocket upgrade for `Host: addr`, with this `Origin` header
/// (none if `None`), as a browser would.
fn send_upgrade(addr: &str, origin: Option<&str>) -> TcpStream {
    send_upgrade_as(addr, addr, origin, "")
}

/// As [`send_upgrade`], for `Host: host` (the name the node was reached by), with
/// `more` header lines.
fn send_upgrade_as(addr: &str, host: &str, origin: Option<&str>, more: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(WAIT)).unwrap();
    let origin = origin.map_or(String::new(), |o| format!("Origin: {o}\r\n"));
    let head = format!(
        "GET /WebSocket HTTP/1.1\r\nHost: {host}\r\n{origin}{more}Upgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: tr_json2\r\n\r\n"
    );
    s.write_all(head.as_bytes()).expect("send the upgrade");
    s
}

/// Everything the node sends until it ends its side (EOF), without this side closing
/// first; panics if EOF does not come within [`WAIT`].
fn read_until_eof(s: &mut TcpStream) -> String {
    let deadline = Instant::now() + WAIT;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "no EOF within {WAIT:?}: {:?}",
            String::from_utf8_lossy(&got[..got.len().min(200)])
        );
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return String::from_utf8_lossy(&got).into_owned(),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("read failed after {} bytes: {e}", got.len()),
        }
    }
}

/// The answer's head (up to the blank line); panics if it does not come within
/// [`WAIT`] or the node closes first.
fn read_head(s: &mut TcpStream) -> String {
    let deadline = Instant::now() + WAIT;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        assert!(
            Instant::now() < deadline,
            "no answer within {WAIT:?}: {:?}",
            String::from_utf8_lossy(&got)
        );
        match s.read(&mut buf) {
            Ok(0) => panic!(
                "closed before the answer: {:?}",
                String::from_utf8_lossy(&got)
            ),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("read failed: {e}"),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Asserts the upgrade was refused: 403 naming the origin and the config key, then EOF
/// (the node ends the connection without waiting for the client).
fn assert_refused(s: &mut TcpStream, origin: &str) {
    let text = read_until_eof(s);
    assert!(text.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{text}");
    assert!(text.contains("Connection: close"), "{text}");
    let body = &text[text.find("\r\n\r\n").expect("a whole head") + 4..];
    assert!(
        body.contains(origin)
            && body.contains("not allowed")
            && body.contains("websocket.allowed_origins"),
        "{body}"
    );
}

fn assert_upgraded(s: &mut TcpStream) {
    let head = read_head(s);
    assert!(
        head.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{head}"
    );
    assert!(head.contains("Sec-WebSocket-Protocol: tr_json2"), "{head}");
}

/// A page from another site cannot open a session through a browser that reaches the
/// node; the node's own origin (its dashboard) and a program sending no `Origin` can.
#[test]
fn an_upgrade_from_another_origin_gets_403_and_eof_the_nodes_own_origin_101() {
    let (mut node, addr) = Node::start_ws(&[]);

    let mut s = send_upgrade(&addr, Some("http://evil.example"));
    let client = s.local_addr().unwrap().to_string();
    assert_refused(&mut s, "http://evil.example");
    // One warning, naming the peer and the origin.
    let line = node
        .proc
        .wait_for_line("origin \"http://evil.example\"", WAIT);
    assert!(line.contains("WARN") && line.contains(&client), "{line}");

    let own = format!("http://{addr}");
    let mut s = send_upgrade(&addr, Some(&own));
    assert_upgraded(&mut s);

    let mut s = send_upgrade(&addr, None);
    assert_upgraded(&mut s);

    let refused = node.proc.log().matches("upgrade refused").count();
    assert_eq!(refused, 1, "{}", node.proc.log());
}

/// `[websocket] allowed_origins` lets the pages of the origins it lists connect; any
/// other is still refused.
#[test]
fn an_origin_listed_in_allowed_origins_is_upgraded() {
    let cfg = TempConfig::new(
        "ws-origin-allowed",
        "[websocket]\nallowed_origins = [\"http://evil.example\"]\n",
    );
    let (_node, addr) = Node::start_ws(&["--config", cfg.path()]);

    let mut s = send_upgrade(&addr, Some("http://evil.example"));
    assert_upgraded(&mut s);

    let mut s = send_upgrade(&addr, Some("http://other.example"));
    assert_refused(&mut s, "http://other.example");
}

/// A page of a site whose name an attacker points at the node's address (DNS
/// rebinding) sends that name as both `Host` and `Origin`: from a browser (its
/// `Sec-Fetch-*` headers), refused. The node's own names (localhost, its machine's host
/// name) are its own origin; a program sending its URL's origin is its own under any.
#[test]
fn a_browsers_same_origin_under_a_name_not_the_nodes_gets_403() {
    let (_node, addr) = Node::start_ws(&[]);
    let port = addr.rsplit(':').next().expect("host:port");
    let browser = "Sec-Fetch-Mode: websocket\r\nSec-Fetch-Site: same-origin\r\n";
    let rebound = format!("rebind.evil.example:{port}");
    let origin = format!("http://{rebound}");
    let mut s = send_upgrade_as(&addr, &rebound, Some(&origin), browser);
    assert_refused(&mut s, &origin);
    let mut s = send_upgrade_as(&addr, &rebound, Some(&origin), "");
    assert_upgraded(&mut s);

    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("a host name");
    for name in ["localhost", hostname.trim()] {
        let host = format!("{name}:{port}");
        let mut s = send_upgrade_as(&addr, &host, Some(&format!("http://{host}")), browser);
        assert_upgraded(&mut s);
    }
}
