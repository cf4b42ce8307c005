//! Hostile and broken peers against a real `tickwire node` process: each offender gets a
//! connection-level closed status naming its problem and is disconnected; the node stays
//! up, keeps serving everybody else, and its memory stays bounded through a storm of
//! connections that come and go.

mod common;

use common::{
    assert_serves, encode, expect_event, frame, login, request, start_publisher, subscriber, End,
    Node, RawConn, Rng,
};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tickwire_client::{Event, RequestOptions};
use tickwire_proto::{code, MessageType, Role, StreamState, DEFAULT_MAX_FRAME};

const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What an offender must get back.
struct Expect {
    code: u16,
    /// Lower-case words the status text must contain.
    words: &'static [&'static str],
}

/// Sends `bytes` on a fresh connection, reads until the node closes it, and checks the
/// last message is a closed connection status with the expected code and text.
fn offend(node: &mut Node, what: &str, prelude: &[u8], bytes: &[u8], expect: Expect) {
    let mut raw = RawConn::connect(node.addr);
    if !prelude.is_empty() {
        raw.send(prelude).unwrap();
    }
    // The node may close as soon as it has read the start; a failed write is fine.
    let _ = raw.send(bytes);
    let end = raw.read_until_end(READ_TIMEOUT);
    let log = node.proc.log();
    assert_eq!(
        end,
        End::Eof,
        "{what}: the connection was reset instead of closed; received {:?}\n--- node\n{log}",
        raw.received
    );
    let last = raw
        .received
        .last()
        .unwrap_or_else(|| panic!("{what}: nothing received before EOF\n--- node\n{log}"));
    assert!(
        last.is_conn_status(),
        "{what}: last message is not a connection status: {:?}",
        raw.received
    );
    let state = last.state.as_ref().expect("status state");
    assert_eq!(state.stream, StreamState::Closed, "{what}: {state:?}");
    assert_eq!(state.code, expect.code, "{what}: {state:?}");
    assert!(!state.text.trim().is_empty(), "{what}: empty status text");
    let text = state.text.to_lowercase();
    for w in expect.words {
        assert!(
            text.contains(w),
            "{what}: status text {:?} lacks {w:?}",
            state.text
        );
    }
    // Exactly one connection-level status, and nothing after it.
    let conn_statuses = raw.received.iter().filter(|g| g.is_conn_status()).count();
    assert_eq!(conn_statuses, 1, "{what}: {:?}", raw.received);
    assert!(node.is_running(), "{what}: the node died\n--- node\n{log}");
}

#[test]
fn every_offender_is_told_why_and_disconnected_and_the_node_serves_on() {
    let mut node = Node::start(&[]);
    let _feed = start_publisher(&node, "FEED", 10, 200, false);

    // A well-behaved subscriber, connected throughout: it must not notice anything.
    let mut bystander = subscriber(node.addr);
    bystander
        .subscribe("FEED", "SYM0", RequestOptions::default())
        .unwrap();
    expect_event(
        &mut bystander,
        READ_TIMEOUT,
        "the bystander's refresh",
        |e| matches!(e, Event::Refresh { name, .. } if name == "SYM0"),
    );

    // (a) 4 KB of random bytes: the first four make an absurd frame length.
    let noise = Rng::new(0x7ac3_11fe).bytes(4096);
    let len = u32::from_be_bytes([noise[0], noise[1], noise[2], noise[3]]) as usize;
    assert!(len > DEFAULT_MAX_FRAME, "pick another seed: {len}");
    offend(
        &mut node,
        "4 KB of random bytes",
        &[],
        &noise,
        Expect {
            code: code::MALFORMED,
            words: &["malformed frame", "exceeds"],
        },
    );

    // (a') random bytes inside a well-formed frame: the messages are garbage.
    let payload = Rng::new(0xb1a5_7ed0).bytes(4092);
    let mut bytes = frame(&payload);
    // A type byte no message has, so the first message is rejected whatever follows.
    bytes[4] = 0;
    offend(
        &mut node,
        "a frame of random bytes",
        &[],
        &bytes,
        Expect {
            code: code::MALFORMED,
            words: &["malformed message"],
        },
    );

    // (b) an absurd length prefix.
    offend(
        &mut node,
        "frame length 0xFFFF_FFF0",
        &[],
        &0xFFFF_FFF0u32.to_be_bytes(),
        Expect {
            code: code::MALFORMED,
            words: &["frame", "4294967280"],
        },
    );

    // (c) a valid frame holding a message of unknown type 200 (empty body).
    offend(
        &mut node,
        "message type 200",
        &[],
        &frame(&[200, 0, 0]),
        Expect {
            code: code::MALFORMED,
            words: &["unknown message type 200"],
        },
    );

    // (d) a truncated message: its body length says 100, 10 bytes follow; the frame
    // length (13) is consistent with what is there.
    let mut truncated = vec![MessageType::Request as u8, 0, 100];
    truncated.extend_from_slice(&[7; 10]);
    assert_eq!(truncated.len(), 13);
    offend(
        &mut node,
        "truncated message",
        &[],
        &frame(&truncated),
        Expect {
            code: code::MALFORMED,
            words: &["truncated"],
        },
    );

    // (e) a valid request before any login.
    offend(
        &mut node,
        "request before login",
        &[],
        &encode(&[request(1, "FEED", "SYM0")]),
        Expect {
            code: code::PROTOCOL,
            words: &["login"],
        },
    );

    // (e') garbage after a valid login: told and closed all the same.
    offend(
        &mut node,
        "unknown message after login",
        &encode(&[login(Role::Subscriber)]),
        &frame(&[200, 0, 0]),
        Expect {
            code: code::MALFORMED,
            words: &["unknown message type 200"],
        },
    );

    // (f) a truncated frame, then the peer closes: the node just drops it.
    {
        let mut raw = RawConn::connect(node.addr);
        let mut partial = 100u32.to_be_bytes().to_vec();
        partial.extend_from_slice(&[1; 10]);
        raw.send(&partial).unwrap();
    }

    // The node is up, serves a newcomer, and the bystander never noticed.
    assert!(node.is_running(), "node died\n{}", node.proc.log());
    assert_serves(node.addr, "FEED", "SYM1", 3);
    for i in 0..3 {
        expect_event(
            &mut bystander,
            READ_TIMEOUT,
            &format!("bystander update {i}"),
            |e| {
                assert!(
                    !matches!(e, Event::Status { .. }),
                    "the bystander got a status: {e:?}"
                );
                matches!(e, Event::Update { name, .. } if name == "SYM0")
            },
        );
    }
    assert_eq!(bystander.reconnects(), 0, "the bystander was disconnected");
    assert!(node.is_running(), "node died\n{}", node.proc.log());
    let log = node.proc.log();
    assert!(!log.contains("panicked"), "{log}");
}

/// Open file descriptors of a process (Linux /proc).
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read /proc/PID/fd")
        .count()
}

/// Waits until the node holds at most `most` descriptors; returns what it holds.
fn wait_for_fds_at_most(pid: u32, most: usize) -> usize {
    let deadline = Instant::now() + READ_TIMEOUT;
    let mut fds = open_fds(pid);
    while fds > most && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        fds = open_fds(pid);
    }
    fds
}

/// The node stops reading a plain socket at a read shorter than it asked for (the next
/// read would only say "nothing more"); a peer whose last bytes and close come in one
/// readiness event must still be seen closing: its socket is closed, on the node's own
/// port and on the WebSocket port alike.
#[test]
fn peers_that_send_a_few_bytes_and_close_at_once_are_let_go() {
    const PEERS: usize = 200;
    let cfg = std::env::temp_dir().join(format!("tickwire-hangup-{}.toml", std::process::id()));
    std::fs::write(&cfg, "[limits]\nmax_pending_logins = 512\n").expect("write config");
    let (mut node, ws) = Node::start_ws(&["--config", cfg.to_str().expect("utf-8 path")]);
    let ws: std::net::SocketAddr = ws.parse().expect("the WebSocket address");
    let fds_before = open_fds(node.proc.pid());
    let login_bytes = encode(&[login(Role::Subscriber)]);
    let half_login = &login_bytes[..login_bytes.len() / 2];
    let half_upgrade = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n";
    for i in 0..PEERS {
        use std::io::Write;
        let (to, bytes): (_, &[u8]) = if i % 2 == 0 {
            (node.addr, half_login)
        } else {
            (ws, half_upgrade)
        };
        let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("connection {i}: {e}"));
        // Bytes and close back to back: they often reach the node as one event.
        s.write_all(bytes).expect("write");
        s.shutdown(std::net::Shutdown::Write).expect("shutdown");
    }
    let fds = wait_for_fds_at_most(node.proc.pid(), fds_before);
    assert!(
        fds <= fds_before,
        "the node holds {fds} descriptors after {PEERS} peers closed, {fds_before} before"
    );
    assert!(node.is_running(), "node died\n{}", node.proc.log());
    let _ = std::fs::remove_file(&cfg);
}

#[test]
fn connection_storm_leaves_memory_bounded_and_the_node_serving() {
    const TOTAL: usize = 10_000;
    // At most this many connections are open (or waiting to be accepted) at once: below
    // the node's listen backlog of 128 (std/mio default), so no SYN is dropped and no
    // connect waits a second for its retransmission.
    const BATCH: usize = 100;
    // Each batch is connections that never log in: room for all of them (the default
    // limit of 64 pending logins would refuse some, which another test checks).
    let cfg = std::env::temp_dir().join(format!("tickwire-storm-{}.toml", std::process::id()));
    std::fs::write(&cfg, "[limits]\nmax_pending_logins = 256\n").expect("write config");
    let mut node = Node::start(&["--config", cfg.to_str().expect("utf-8 path")]);
    let _feed = start_publisher(&node, "FEED", 10, 200, false);
    // Warm up, so the baseline includes a served subscriber.
    assert_serves(node.addr, "FEED", "SYM0", 2);
    let before = node.rss_kib();
    let fds_before = open_fds(node.proc.pid());

    let login_bytes = encode(&[login(Role::Subscriber)]);
    let half_login = &login_bytes[..login_bytes.len() / 2];
    let started = Instant::now();
    // A bound on the storm, not a speed checked (under 3 s on a quiet machine).
    let deadline = started + Duration::from_secs(120);
    let mut opened = 0;
    let mut batch: Vec<TcpStream> = Vec::with_capacity(BATCH);
    while opened < TOTAL {
        assert!(
            Instant::now() < deadline,
            "storm too slow: {opened} connections in {:?}",
            started.elapsed()
        );
        let n = BATCH.min(TOTAL - opened);
        for i in 0..n - 1 {
            let mut s = TcpStream::connect_timeout(&node.addr, Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("connection {}: {e}", opened + i));
            if (opened + i) % 3 == 0 {
                use std::io::Write;
                let _ = s.write_all(half_login);
            }
            batch.push(s);
        }
        // The last of the batch logs in: once it is welcomed, the node has accepted
        // every connection before it.
        let mut last = RawConn::connect(node.addr);
        last.send(&login_bytes).unwrap();
        last.read_until(READ_TIMEOUT, "a welcome", |g| g.ty == MessageType::Welcome);
        opened += n;
        batch.clear(); // drops (closes) them all
    }
    let storm = started.elapsed();

    assert!(node.is_running(), "node died\n{}", node.proc.log());
    assert_serves(node.addr, "FEED", "SYM1", 3);
    // Every dropped connection's socket is closed by the node (no descriptor leak).
    let fd_deadline = Instant::now() + READ_TIMEOUT;
    let mut fds = open_fds(node.proc.pid());
    while fds > fds_before + 2 && Instant::now() < fd_deadline {
        std::thread::sleep(Duration::from_millis(50));
        fds = open_fds(node.proc.pid());
    }
    assert!(
        fds <= fds_before + 2,
        "the node holds {fds} descriptors after the storm, {fds_before} before"
    );
    let after = node.rss_kib();
    let grown = after.saturating_sub(before);
    eprintln!(
        "{TOTAL} connections in {storm:?}; node RSS {before} KiB -> {after} KiB (+{grown} KiB)"
    );
    assert!(
        grown < 64 * 1024,
        "node RSS grew by {grown} KiB ({before} -> {after}) over {TOTAL} connections"
    );
    assert!(node.is_running(), "node died\n{}", node.proc.log());
    let _ = std::fs::remove_file(&cfg);
}

#[test]
fn http_at_the_nodes_port_and_a_subscriber_at_its_websocket_port_are_told_where_to_go() {
    use std::io::{Read, Write};
    let (mut node, ws) = Node::start_ws(&[]);
    // curl, or a browser, at the node's own port (RSSL shares it by default).
    let mut s = std::net::TcpStream::connect(node.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("request");
    let mut answer = String::new();
    s.read_to_string(&mut answer)
        .expect("the answer, then the end");
    assert!(answer.starts_with("HTTP/1.1 400 Bad Request"), "{answer}");
    assert!(
        answer.contains("the Tickwire protocol and RSSL, not HTTP"),
        "{answer}"
    );
    assert!(answer.contains(&format!("http://{ws}/")), "{answer}");
    // A subscriber pointed at the WebSocket port.
    let out = common::run(
        &["subscribe", "--node", &ws, "--service", "FEED", "SYM0"],
        Duration::from_secs(20),
    );
    let text = &out.stderr;
    assert!(
        text.contains("this is its WebSocket and HTTP port (--ws)"),
        "{text}"
    );
    // The node serves on.
    let _feed = start_publisher(&node, "FEED", 1, 10, false);
    common::wait_for_image(node.addr, "FEED", "SYM0", Duration::from_secs(20)).expect("served");
    node.stop(Duration::from_secs(10));
}
