//! TLS on both of a real node's ports (`[tls] cert`, `key`), with a certificate made by
//! rcgen at test time (SAN 127.0.0.1 and localhost): `tickwire publish` and
//! `tickwire subscribe` with `--tls --ca`, clients that cannot or may not speak TLS to
//! it, and the WebSocket API and dashboard page over wss / https (rustls +
//! tungstenite). Loopback only; every wait is bounded; children are killed on drop.

mod common;

use common::*;
use rustls::pki_types::ServerName;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tungstenite::Message;

/// A node with `[tls]` and the WebSocket API on, and the WebSocket address it logged
/// (with its scheme).
fn start_tls_node(certs: &Certs) -> (Node, String) {
    certs.start_node("")
}

/// `tickwire subscribe --node ADDR ARGS...`, given 15 s.
fn subscribe(addr: &str, args: &[&str]) -> Output {
    let mut all = vec!["subscribe", "--node", addr];
    all.extend_from_slice(args);
    run(&all, Duration::from_secs(15))
}

/// `tickwire subscribe --tls --ca CERT --snapshot SYM0` until it answers (the
/// publisher's images may still be on their way), at most 20 s.
fn tls_snapshot(node: &Node, ca: &str) -> Output {
    let addr = node.addr_str();
    let args = [
        "--tls",
        "--ca",
        ca,
        "--snapshot",
        "--json",
        "--timeout",
        "5",
        "SYM0",
    ];
    poll_until(
        Duration::from_secs(20),
        Duration::from_millis(100),
        || subscribe(&addr, &args),
        |out| out.code() == Some(0),
    )
}

/// `tickwire publish --tls --ca CA` of `items` items of FEED at `rate` updates a second.
fn start_tls_publisher(node: &Node, ca: &str, items: &str, rate: &str) -> Proc {
    let addr = node.addr_str();
    Proc::spawn(&[
        "publish",
        "--node",
        &addr,
        "--tls",
        "--ca",
        ca,
        "--service",
        "FEED",
        "--items",
        items,
        "--rate",
        rate,
    ])
}

/// The snapshot of the publisher's SYM0 over TLS answers at last.
fn assert_tls_snapshot_answers(node: &Node, ca: &str, feed: &Proc) {
    let out = tls_snapshot(node, ca);
    assert_eq!(out.code(), Some(0), "{}\n{}", out.stderr, feed.log());
}

#[test]
fn publish_and_subscribe_over_tls_and_clients_that_cannot_are_refused_clearly() {
    let certs = Certs::new("e2e");
    let other = Certs::new("other");
    let (mut node, _) = start_tls_node(&certs);
    let ca = certs.cert_str();
    let mut feed = start_tls_publisher(&node, &ca, "5", "200");

    // End to end: publisher and subscriber over TLS.
    let out = tls_snapshot(&node, &ca);
    assert_eq!(
        out.code(),
        Some(0),
        "--- stdout\n{}\n--- stderr\n{}\n--- publisher\n{}\n--- node\n{}",
        out.stdout,
        out.stderr,
        feed.log(),
        node.proc.log()
    );
    // The image may still be on its way when the request arrives: then open
    // statuses (never a closed one) come before the refresh.
    let lines: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let at = lines
        .iter()
        .position(|v| v["type"] == "refresh")
        .unwrap_or_else(|| panic!("no refresh in\n{}", out.stdout));
    for before in &lines[..at] {
        assert_eq!(before["type"], "status", "{before}");
        assert_eq!(before["state"]["stream"], "open", "{before}");
    }
    let refresh = &lines[at];
    assert_eq!(refresh["item"], "SYM0");
    assert!(refresh["fields"]["BID"].is_number(), "{refresh}");

    // Streaming: refreshes, then updates as they come.
    let addr = node.addr_str();
    let out = subscribe_over_tls(
        &addr,
        &ca,
        &[
            "--json",
            "--count",
            "60",
            "--timeout",
            "10",
            "SYM0",
            "SYM1",
            "SYM2",
            "SYM3",
            "SYM4",
        ],
        Duration::from_secs(20),
    );
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let updates = out
        .stdout
        .lines()
        .filter(|l| l.contains("\"type\":\"update\""))
        .count();
    assert!(updates >= 50, "{updates} updates\n{}", out.stdout);

    // A plain client on the TLS port: a clear error, at once.
    let out = subscribe(&addr, &["--snapshot", "--timeout", "5", "SYM0"]);
    assert_ne!(out.code(), Some(0));
    assert!(
        out.stderr.contains("TLS") && out.stderr.contains("--tls"),
        "{}",
        out.stderr
    );
    // The node logged it once, naming the peer.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !node.proc.log().contains("TLS handshake with 127.0.0.1:") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = node.proc.log();
    assert_eq!(
        log.matches("TLS handshake with 127.0.0.1:").count(),
        1,
        "{log}"
    );

    // A client that trusts another certificate: refused with a certificate error.
    let other_ca = other.cert_str();
    let out = subscribe(
        &addr,
        &[
            "--tls",
            "--ca",
            &other_ca,
            "--snapshot",
            "--timeout",
            "5",
            "SYM0",
        ],
    );
    assert_ne!(out.code(), Some(0));
    assert!(
        out.stderr.contains("invalid peer certificate") && out.stderr.contains("--ca"),
        "{}",
        out.stderr
    );

    // --tls without --ca says what is missing.
    let out = subscribe(&addr, &["--tls", "SYM0"]);
    assert_ne!(out.code(), Some(0));
    assert!(out.stderr.contains("--ca"), "{}", out.stderr);

    // A TLS client on a node without TLS: says so.
    let plain = Node::start(&[]);
    let plain_addr = plain.addr_str();
    let out = subscribe(
        &plain_addr,
        &["--tls", "--ca", &ca, "--snapshot", "--timeout", "5", "SYM0"],
    );
    assert_ne!(out.code(), Some(0));
    assert!(
        out.stderr.contains("TLS handshake failed")
            && out.stderr.contains("does not speak TLS on this port"),
        "{}",
        out.stderr
    );
    drop(plain);

    // The node served on through all of that: the publisher is still connected and a
    // new subscriber gets its data.
    let out = tls_snapshot(&node, &ca);
    assert_eq!(out.code(), Some(0), "{}\n{}", out.stderr, node.proc.log());
    assert!(feed.is_running(), "{}", feed.log());
    assert!(!feed.log().contains("reconnect"), "{}", feed.log());
    assert!(node.is_running());
    assert!(node.stop(Duration::from_secs(10)).is_some());
}

#[test]
fn a_node_with_an_unusable_tls_key_says_which_file_and_why() {
    let certs = Certs::new("badcfg");
    let config = certs.dir.join("node.toml");
    let missing = certs.dir.join("missing-key.pem");
    std::fs::write(
        &config,
        format!(
            "[tls]\ncert = {:?}\nkey = {:?}\n",
            certs.cert_str(),
            missing.display().to_string()
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    let out = run(
        &["node", "--listen", "127.0.0.1:0", "--config", &config],
        Duration::from_secs(15),
    );
    assert_ne!(out.code(), Some(0));
    assert!(
        out.stderr.contains("tls.key")
            && out.stderr.contains("missing-key.pem")
            && out.stderr.contains("cannot read"),
        "{}",
        out.stderr
    );
}

/// A rustls client configuration trusting `ca`.
fn client_config(ca: &Path) -> Arc<rustls::ClientConfig> {
    tickwire_client::tls::client_config_from_ca_file(ca).expect("client config")
}

type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// TLS to `host:port` (verified against the certificate's IP SAN).
fn tls_connect(hostport: &str, ca: &Path) -> TlsStream {
    let tcp = TcpStream::connect(hostport).expect("tcp connect");
    tcp.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let host = hostport.rsplit_once(':').unwrap().0.to_string();
    let name = ServerName::try_from(host).unwrap();
    let conn = rustls::ClientConnection::new(client_config(ca), name).unwrap();
    rustls::StreamOwned::new(conn, tcp)
}

/// An https GET of `path` on the node's HTTP port: the whole answer, or the error of
/// a connection that did not get one (the handshake refused, say).
fn https_get(hostport: &str, ca: &Path, path: &str) -> Result<String, std::io::Error> {
    let mut s = tls_connect(hostport, ca);
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {hostport}\r\n\r\n").as_bytes())?;
    let mut page = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut buf = [0u8; 16 * 1024];
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => page.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(e),
        }
        assert!(Instant::now() < deadline, "no end of {path}");
    }
    Ok(String::from_utf8_lossy(&page).into_owned())
}

#[test]
fn websocket_over_wss_logs_in_and_gets_a_refresh_and_the_dashboard_is_served_over_https() {
    let certs = Certs::new("wss");
    let (node, url) = start_tls_node(&certs);
    let ca = certs.cert_str();
    let mut feed = start_tls_publisher(&node, &ca, "5", "200");
    assert_tls_snapshot_answers(&node, &ca, &feed);
    let hostport = host_port(&url).to_string();

    // https GET of the dashboard page.
    let page = https_get(&hostport, &certs.cert(), "/").expect("the page");
    assert!(page.starts_with("HTTP/1.1 200 OK\r\n"), "{page:.200}");
    assert!(
        page.contains("<html") || page.contains("<!DOCTYPE"),
        "{page:.300}"
    );
    assert!(
        page.contains("wss:"),
        "the page picks wss:// when loaded over https"
    );

    // wss: the WebSocket API over TLS.
    let stream = tls_connect(&hostport, &certs.cert());
    let (mut ws, _) = ws_handshake(&url, "tr_json2", stream);
    let send = |ws: &mut tungstenite::WebSocket<TlsStream>, v: Value| {
        ws.send(Message::text(v.to_string())).expect("send")
    };
    send(
        &mut ws,
        json!({"ID": 1, "Domain": "Login", "Key": {"Name": "alice"}}),
    );
    send(
        &mut ws,
        json!({"ID": 2, "Key": {"Name": "SYM0", "Service": "FEED"}}),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut login, mut refresh) = (None, None);
    while refresh.is_none() {
        assert!(
            Instant::now() < deadline,
            "no refresh over wss (login: {login:?})"
        );
        match ws.read() {
            Ok(Message::Text(t)) => {
                let v: Value = serde_json::from_str(&t).expect("JSON");
                for m in v.as_array().expect("an array") {
                    if m["ID"] == 1 && m["Type"] == "Refresh" {
                        login = Some(m.clone());
                    }
                    if m["ID"] == 2 && m["Type"] == "Refresh" {
                        refresh = Some(m.clone());
                    }
                }
            }
            Ok(_) => {}
            Err(e) if ws_read_timed_out(&e) => {}
            Err(e) => panic!("wss read: {e}"),
        }
    }
    let login = login.expect("the login refresh first");
    assert_eq!(login["State"]["Stream"], "Open");
    let refresh = refresh.unwrap();
    assert_eq!(refresh["Key"]["Name"], "SYM0");
    assert!(refresh["Fields"]["BID"].is_number(), "{refresh}");
    assert!(feed.is_running());
}

/// A TLS subscriber that stops reading is seen as slow by the node and conflated, as a
/// plain one is: rustls holds at most 64 KiB of its records, the rest of its backlog
/// waits in the node's bounded queue. When it reads again it gets merged updates and
/// the node logs that it caught up; the publisher never noticed.
#[test]
fn a_tls_subscriber_that_stops_reading_is_conflated_and_catches_up() {
    use tickwire_client::{ConnectOptions, Event, RequestOptions, Subscriber};
    let certs = Certs::new("slow");
    let config = certs.tls_config(
        "[limits]\nsocket_send_buffer_bytes = 65536\n\
         [slow_consumer]\npolicy = \"conflate\"\nconflate_above_bytes = 65536\n",
    );
    let node = Node::start(&["--config", &config]);
    let ca = certs.cert_str();
    let addr = node.addr_str();
    let feed = start_tls_publisher(&node, &ca, "20", "5000");
    assert_tls_snapshot_answers(&node, &ca, &feed);

    let mut opts = ConnectOptions::new(addr.clone());
    opts.tls = Some(client_config(&certs.cert()));
    opts.receive_buffer_bytes = Some(65_536);
    opts.reconnect = false;
    let mut sub = Subscriber::connect(opts).expect("TLS subscriber");
    for i in 0..20 {
        sub.subscribe("FEED", &format!("SYM{i}"), RequestOptions::default())
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut refreshes = 0;
    while refreshes < 20 {
        assert!(Instant::now() < deadline, "{refreshes} refreshes");
        if let Some(Event::Refresh { .. }) = sub.next_event(Duration::from_millis(100)).unwrap() {
            refreshes += 1;
        }
    }
    // Stop reading until the node says it conflates for this subscriber.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !node.proc.log().contains("conflating") {
        assert!(
            Instant::now() < deadline,
            "the node never saw the stalled TLS subscriber as slow\n{}",
            node.proc.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Read again: merged updates arrive, and the node sees it catch up.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut merged = 0;
    while merged == 0 || !node.proc.log().contains("caught up") {
        assert!(
            Instant::now() < deadline,
            "{merged} merged updates\n{}",
            node.proc.log()
        );
        if let Some(Event::Update {
            conflation_count, ..
        }) = sub.next_event(Duration::from_millis(100)).unwrap()
        {
            if conflation_count > 1 {
                merged += 1;
            }
        }
    }
    let mut feed = feed;
    assert!(feed.is_running(), "{}", feed.log());
    assert!(!feed.log().contains("reconnect"), "{}", feed.log());
}

/// Bytes of records the peer below writes: tens of loop turns' worth of reading.
const KEY_UPDATE_ATTACK_BYTES: usize = 12 << 20;

/// A peer can make its plaintext cost a hundred times its size: each byte in a TLS
/// record of its own, behind 31 key updates (rustls takes 32 in a row). The node's fair
/// share of a loop turn counts the records it reads, not the plaintext in them, so while
/// it still reads such a peer it answers the others. Before, it read that peer until its
/// socket was empty, and no one else until then.
#[test]
fn a_peer_wrapping_each_byte_in_key_updates_does_not_hold_the_event_loop() {
    use tickwire_proto::{FrameWriter, Login, Message as Native, Role};
    let certs = Certs::new("key-updates");
    let (node, url) = start_tls_node(&certs);
    let hostport = host_port(&url).to_string();
    let ca = certs.cert();
    // Logged in, then Pings a byte a record, each behind 31 key updates, all written
    // ahead into one buffer: sending them costs the peer nothing.
    let mut s = tls_connect(&node.addr_str(), &ca);
    let mut frames = FrameWriter::new(1 << 16);
    frames
        .push(&Native::Login(Login::new(
            Role::Subscriber,
            "test",
            "key-updates",
            "",
        )))
        .unwrap();
    s.write_all(frames.sealed_bytes()).unwrap();
    s.flush().unwrap();
    let mut frames = FrameWriter::new(1 << 16);
    frames.push(&Native::Ping(1)).unwrap();
    let ping = frames.sealed_bytes().to_vec();
    let mut attack = Vec::with_capacity(KEY_UPDATE_ATTACK_BYTES + 4096);
    while attack.len() < KEY_UPDATE_ATTACK_BYTES {
        for &b in &ping {
            for _ in 0..31 {
                s.conn.refresh_traffic_keys().unwrap();
            }
            s.conn.writer().write_all(&[b]).unwrap();
            while s.conn.wants_write() {
                s.conn.write_tls(&mut attack).unwrap();
            }
        }
    }
    let writer = answers_while_it_reads(&node, &hostport, &ca, &s.sock, attack);
    drop(s);
    drop(node);
    let _ = writer.join();
}

/// rustls takes an empty record and a key update in turn without end (each resets its
/// count of the other), and no plaintext comes of them. The node reads such a peer a
/// share at a time, as any other, and answers the others meanwhile. Before, a read
/// went on until plaintext came, and the event loop stayed in it for as long as the
/// peer sent.
#[test]
fn a_peer_sending_records_without_plaintext_does_not_hold_the_event_loop() {
    use rustls::pki_types::pem::PemObject;
    use tickwire_tls::testing::{empty_records_and_key_updates, secret_logging_client};
    let certs = Certs::new("empty-records");
    let (node, url) = start_tls_node(&certs);
    let hostport = host_port(&url).to_string();
    let ca = certs.cert();
    // TLS 1.3 with AES-128-GCM and the client's traffic secret logged: the records
    // after the handshake are made by hand.
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(&ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let (cfg, logged) = secret_logging_client(roots);
    let mut tcp = TcpStream::connect(node.addr_str()).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut conn = rustls::ClientConnection::new(Arc::new(cfg), name).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).unwrap();
    }
    // An empty record and a key update, over and over, all written ahead into one
    // buffer: sending them costs the peer nothing.
    let secret = logged.get();
    let pair = empty_records_and_key_updates(&secret, 1).0.len();
    let (attack, _) =
        empty_records_and_key_updates(&secret, KEY_UPDATE_ATTACK_BYTES.div_ceil(pair));
    let writer = answers_while_it_reads(&node, &hostport, &ca, &tcp, attack);
    drop(tcp);
    drop(node);
    let _ = writer.join();
}

/// Writes `attack` on `sock` (a TLS connection to `node`) from a thread of its own, and
/// checks the node answers `/healthz` on another connection while it still reads the
/// attack (its socket holds some of it then): it does not read one peer until that
/// peer's socket is empty. Returns the writer, to join once the node is gone.
fn answers_while_it_reads(
    node: &Node,
    hostport: &str,
    ca: &Path,
    sock: &TcpStream,
    attack: Vec<u8>,
) -> std::thread::JoinHandle<std::io::Result<()>> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (peer, node_side) = (sock.local_addr().unwrap(), sock.peer_addr().unwrap());
    let mut tcp = sock.try_clone().unwrap();
    tcp.set_write_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let written = Arc::new(AtomicBool::new(false));
    let len = attack.len();
    let writer = {
        let written = written.clone();
        std::thread::spawn(move || {
            let r = tcp.write_all(&attack);
            written.store(true, Ordering::SeqCst);
            r
        })
    };
    // The node is reading it: its socket holds some of it.
    let queued = || tcp_receive_queue(node_side, peer).unwrap_or(0);
    let first = poll_until(
        Duration::from_secs(20),
        Duration::from_millis(5),
        queued,
        |q| *q > 0,
    );
    assert!(first > 0, "the attack never reached the node's socket");
    // Asked again if the handshake waits past the client's 200 ms read time-out.
    let health = poll_until(
        Duration::from_secs(30),
        Duration::from_millis(10),
        || https_get(hostport, ca, "/healthz"),
        |answer| answer.is_ok(),
    )
    .expect("an answer to /healthz");
    assert!(health.contains("200 OK"), "{health}");
    let left = queued();
    assert!(
        !written.load(Ordering::SeqCst) || left > 0,
        "the node answered only once it had read the whole {len} bytes of records\n{}",
        node.proc.log()
    );
    writer
}

/// Bytes waiting in the receive queue of the loopback TCP socket from `local` to
/// `remote` (IPv4), from /proc/net/tcp.
fn tcp_receive_queue(local: std::net::SocketAddr, remote: std::net::SocketAddr) -> Option<u64> {
    fn hex(a: std::net::SocketAddr) -> String {
        let std::net::SocketAddr::V4(a) = a else {
            return String::new();
        };
        format!(
            "{:08X}:{:04X}",
            u32::from_le_bytes(a.ip().octets()),
            a.port()
        )
    }
    let (local, remote) = (hex(local), hex(remote));
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() > 4 && cols[1] == local && cols[2] == remote {
            let (_, rx) = cols[4].split_once(':')?;
            u64::from_str_radix(rx, 16).ok()
        } else {
            None
        }
    })
}

#[test]
fn the_lab_websocket_subscriber_measures_over_wss() {
    let certs = Certs::new("perf-wss");
    let (node, url) = start_tls_node(&certs);
    let ca = certs.cert_str();
    let feed = start_tls_publisher(&node, &ca, "5", "200");
    assert_tls_snapshot_answers(&node, &ca, &feed);
    let hostport = host_port(&url).to_string();
    let out = run(
        &[
            "perf-ws-sub",
            "--ws",
            &hostport,
            "--items",
            "2",
            "--duration",
            "3",
            "--json",
            "--tls",
            "--ca",
            &ca,
        ],
        Duration::from_secs(30),
    );
    assert_eq!(out.code(), Some(0), "{}\n{}", out.stdout, out.stderr);
    let summary = out
        .stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Value>(l).ok())
        .expect("a JSON summary");
    let summary = &summary["summary"];
    assert!(
        summary["images"].as_u64() == Some(2) && summary["updates"].as_u64().unwrap_or(0) > 0,
        "{summary}\n{}\n--- node\n{}",
        out.stderr,
        node.proc.log()
    );
}

/// A connection the node closes while its TLS handshake has not even begun (here: one
/// address over its cap of pending logins, whose oldest is closed for the newcomer) is
/// closed at once: no reason could reach it, and lingering would keep reading it, and
/// so keep doing its handshake's crypto for a peer that opens connections only to have
/// them closed. The linger time here is a minute: a close seen within seconds is not it.
#[test]
fn a_connection_closed_during_its_tls_handshake_does_not_linger() {
    let certs = Certs::new("handshake-linger");
    let (node, _) =
        certs.start_node("[limits]\nmax_pending_logins_per_address = 1\nclose_linger_ms = 60000\n");
    let mut first = TcpStream::connect(node.addr).unwrap();
    // The newcomer from the same address closes the first (it sent nothing yet).
    let _second = TcpStream::connect(node.addr).unwrap();
    first
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let got = first.read(&mut buf);
    assert!(
        matches!(got, Ok(0)) || got.is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the node kept the connection"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "closed only after {:?}",
        started.elapsed()
    );
}

/// `[tls] max_handshakes_per_s`: past it a new connection is closed unanswered, before
/// any of its crypto; one address may take a quarter of it, so that others still get
/// in; the next second's connections are taken again.
#[test]
fn new_tls_connections_past_their_rate_are_closed_unanswered() {
    let certs = Certs::new("handshake-rate");
    // (Room for all twenty among the pending logins: none is closed for another.)
    let (mut node, url) = certs
        .start_node("max_handshakes_per_s = 8\n[limits]\nmax_pending_logins_per_address = 64\n");
    // Closed at once (its peer sees the end of the stream) or kept.
    let closed = |c: &mut TcpStream| {
        c.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut buf = [0u8; 16];
        match c.read(&mut buf) {
            Ok(0) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
            Ok(_) => false,
        }
    };
    let one = std::net::Ipv4Addr::new(127, 0, 0, 1);
    let mut conns: Vec<TcpStream> = (0..20).map(|_| connect_from(one, node.addr)).collect();
    let shut = conns.iter_mut().map(closed).filter(|&c| c).count();
    // A quarter of a second's worth (two) from one address, then two a second.
    assert!(shut >= 15, "{shut} of 20 closed");
    assert!(shut < 20, "none was taken");
    // Another address still gets its share.
    let other = std::net::Ipv4Addr::new(127, 0, 0, 2);
    let mut others: Vec<TcpStream> = (0..2).map(|_| connect_from(other, node.addr)).collect();
    assert!(
        others.iter_mut().map(closed).all(|c| !c),
        "another address was locked out"
    );
    node.proc
        .wait_for_line("max_handshakes_per_s", Duration::from_secs(10));
    drop(conns);
    drop(others);
    // A client a moment later gets in.
    let ca = certs.cert_str();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = subscribe(
            &node.addr_str(),
            &["--tls", "--ca", &ca, "--snapshot", "NONE"],
        );
        if !out.stderr.contains("during the TLS handshake") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no TLS client got in: {}",
            out.stderr
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // /metrics counts the connections closed for the rate, and the sessions the
    // handshakes' thread processed (the clients that got in: two each at least).
    let hostport = host_port(&url).to_string();
    let metrics = loop {
        match https_get(&hostport, &certs.cert(), "/metrics") {
            Ok(page) if page.starts_with("HTTP/1.1 200") => break page,
            other => assert!(Instant::now() < deadline, "no /metrics: {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let value = |name: &str| -> u64 {
        let line = metrics
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {metrics}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let for_rate = value("tickwire_tls_handshakes_refused_total{reason=\"rate\"}");
    assert!(for_rate >= shut as u64, "{for_rate} counted, {shut} closed");
    assert_eq!(
        value("tickwire_tls_handshakes_refused_total{reason=\"thread_behind\"}"),
        0
    );
    assert!(value("tickwire_tls_handshake_sessions_processed_total") >= 4);
}

/// Failed TLS handshakes, which any peer can cause at will (plaintext on the TLS port),
/// are logged at most 20 each 10 s, not one line each: a peer opening such
/// connections as fast as the handshake rate allows does not flood the log.
#[test]
fn failed_handshakes_do_not_flood_the_log() {
    let certs = Certs::new("handshake-failures");
    let (mut node, _) = certs.start_node(
        "max_handshakes_per_s = 1000\n[limits]\nmax_pending_logins_per_address = 100\n",
    );
    for _ in 0..40 {
        let mut c = TcpStream::connect(node.addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        // The node's alert, then the end of the stream (or a reset).
        let mut got = Vec::new();
        let _ = c.read_to_end(&mut got);
    }
    // A client that gets in: its login is logged after every failure above.
    let ca = certs.cert_str();
    let out = subscribe(
        &node.addr_str(),
        &["--tls", "--ca", &ca, "--snapshot", "--timeout", "2", "NONE"],
    );
    node.proc
        .wait_for_line("logged in peer=127.0.0.1", Duration::from_secs(10));
    let log = node.proc.log();
    let said = log.matches("TLS handshake with 127.0.0.1:").count();
    assert!(
        (1..=20).contains(&said),
        "{said} failed handshakes logged\n{}\n{log}",
        out.stderr
    );
}

/// A peer fails a session at will as cheaply as a handshake, once the handshake is done:
/// a record the node cannot decrypt. Those failures are held to a few a window in the
/// log too, with the handshakes' (each was logged).
#[test]
fn failed_sessions_do_not_flood_the_log() {
    let certs = Certs::new("session-failures");
    let (node, _) = certs.start_node(
        "max_handshakes_per_s = 1000\n[limits]\nmax_pending_logins_per_address = 100\n",
    );
    let ca = certs.cert();
    for _ in 0..30 {
        let mut s = tls_connect(&node.addr_str(), &ca);
        let deadline = Instant::now() + Duration::from_secs(20);
        while s.conn.is_handshaking() {
            assert!(Instant::now() < deadline, "no handshake");
            match s.conn.complete_io(&mut s.sock) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => panic!("handshake: {e}"),
            }
        }
        // Application data that is not encrypted with the session's keys.
        let mut junk = vec![23, 3, 3, 0, 32];
        junk.extend_from_slice(&[0; 32]);
        s.sock.write_all(&junk).unwrap();
        // The node's alert, then the end of the stream (or a reset).
        s.sock
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut got = Vec::new();
        let _ = s.sock.read_to_end(&mut got);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !node.proc.log().contains("TLS session with 127.0.0.1:") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = node.proc.log();
    let said = log.matches("TLS session with 127.0.0.1:").count();
    assert!(
        (1..=20).contains(&said),
        "{said} failed sessions logged\n{log}"
    );
}
