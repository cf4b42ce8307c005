//! An interactive provider's connections, from the node: one that speaks only an older
//! RIPC closes them at the versions it does not know (as the SDK's servers do), and the
//! node asks again one version lower each time, on a new connection, and logs in at the
//! one it takes; one that drops every connection once it accepted the login is tried
//! again after a back-off that grows; `/readyz` waits for the node's login to each; an
//! item asked for when the connection was lost is asked for again on the next.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tickwire_node::config::{NodeConfig, RsslProviderSection};
use tickwire_node::NodeServer;
use tickwire_rssl::ripc::{Channel, Input, Settings};
use tickwire_rssl::rwf::msg::{class, domain, Msg};
use tickwire_rssl::testing;

/// RIPC 12's connection version: the newest this provider takes.
const NEWEST_TAKEN: u32 = 0x15;
const LIMIT: Duration = Duration::from_secs(60);

/// Reads what the peer sends until `done` says it is enough, or `LIMIT`.
fn read_until(s: &mut TcpStream, got: &mut Vec<u8>, done: impl Fn(&[u8]) -> bool) -> bool {
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    while !done(got) {
        if start.elapsed() > LIMIT {
            return false;
        }
        match s.read(&mut buf) {
            Ok(0) => return false,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return false,
        }
    }
    true
}

#[test]
fn the_node_falls_back_to_the_ripc_version_an_older_provider_takes() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let (seen_tx, seen) = mpsc::channel::<u32>();
    let (login_tx, login) = mpsc::channel::<(u8, u8)>();
    std::thread::spawn(move || {
        for s in listener.incoming().take(8) {
            let Ok(mut s) = s else { continue };
            s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
            // The ConnectReq's length (2 bytes) and, after its flags, its version.
            let mut got = Vec::new();
            let whole =
                |b: &[u8]| b.len() >= 2 && b.len() >= u16::from_be_bytes([b[0], b[1]]) as usize;
            if !read_until(&mut s, &mut got, whole) || got.len() < 7 {
                continue;
            }
            let version = u32::from_be_bytes([got[3], got[4], got[5], got[6]]);
            let _ = seen_tx.send(version);
            if version > NEWEST_TAKEN {
                continue; // closed, as a server that does not know the version
            }
            serve(s, &got, |m, _| {
                let _ = login_tx.send((m.domain, m.class));
                true
            });
            return;
        }
    });
    let mut cfg = NodeConfig::default();
    cfg.node.listen = "127.0.0.1:0".parse().unwrap();
    cfg.rssl.providers = vec![RsslProviderSection {
        address,
        ..RsslProviderSection::default()
    }];
    let _node = NodeServer::spawn(cfg).unwrap();
    let first = login
        .recv_timeout(LIMIT)
        .expect("the node logged in at no version");
    assert_eq!(first, (domain::LOGIN, class::REQUEST));
    let versions: Vec<u32> = seen.try_iter().collect();
    assert_eq!(versions, [0x17, 0x16, 0x15], "RIPC 14, 13, then 12");
}

/// Serves one connection of the node's, `first` its bytes already read: its RIPC
/// handshake, then `answer` for each message until it says the connection is done, or
/// `LIMIT`.
fn serve(mut s: TcpStream, first: &[u8], mut answer: impl FnMut(&Msg<'_>, &mut Channel) -> bool) {
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut ch = Channel::new(Settings::default(), Instant::now());
    ch.handle_bytes(first, Instant::now());
    let mut msg = Vec::new();
    let start = Instant::now();
    while start.elapsed() < LIMIT {
        while let Ok(Some(input)) = ch.poll(&mut msg) {
            if input == Input::Message && answer(&Msg::decode(&msg).unwrap(), &mut ch) {
                ch.end_batch();
                let _ = s.write_all(ch.transmit());
                return;
            }
        }
        ch.end_batch();
        while !ch.transmit().is_empty() {
            let n = s.write(ch.transmit()).unwrap();
            ch.consume(n);
        }
        let mut more = Vec::new();
        if read_until(&mut s, &mut more, |b| !b.is_empty()) {
            ch.handle_bytes(&more, Instant::now());
        }
    }
}

#[test]
fn a_provider_that_drops_the_connection_once_logged_in_is_tried_again_less_and_less_often() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let (dropped_tx, dropped) = mpsc::channel::<Instant>();
    std::thread::spawn(move || {
        for s in listener.incoming().take(4) {
            // The login accepted, the connection dropped.
            serve(s.unwrap(), &[], |m, ch| {
                ch.send(&testing::login_accepted(m.stream_id));
                true
            });
            let _ = dropped_tx.send(Instant::now());
        }
    });
    let mut cfg = NodeConfig::default();
    cfg.node.listen = "127.0.0.1:0".parse().unwrap();
    cfg.rssl.providers = vec![RsslProviderSection {
        address,
        ..RsslProviderSection::default()
    }];
    let _node = NodeServer::spawn(cfg).unwrap();
    let at: Vec<Instant> = (0..4)
        .map(|_| dropped.recv_timeout(LIMIT).expect("the node came back"))
        .collect();
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    // 200, 400 and 800 ms, give or take the connects (every 200 ms without a back-off).
    assert!(gaps[2] >= Duration::from_millis(700), "{gaps:?}");
}

/// `GET /readyz`: the status line and the body (the node answers and closes).
fn readyz(ws: std::net::SocketAddr) -> (String, String) {
    let mut s = TcpStream::connect(ws).unwrap();
    s.set_read_timeout(Some(LIMIT)).unwrap();
    write!(s, "GET /readyz HTTP/1.1\r\nHost: {ws}\r\n\r\n").unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

/// Each interactive provider is a dependency of the node: not ready while it has not
/// accepted the node's login, ready once it has.
#[test]
fn the_node_is_ready_once_its_providers_took_its_login() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let (go_tx, go) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        // Answers once the test has seen the node not ready (the node's connection
        // waits in the listener's queue meanwhile).
        let _ = go.recv_timeout(LIMIT);
        if let Some(Ok(s)) = listener.incoming().next() {
            serve(s, &[], |m, ch| {
                if m.domain == domain::LOGIN {
                    ch.send(&testing::login_accepted(m.stream_id));
                }
                false
            });
        }
    });
    let mut cfg = NodeConfig::default();
    cfg.node.listen = "127.0.0.1:0".parse().unwrap();
    cfg.websocket.listen = "127.0.0.1:0".into();
    cfg.rssl.providers = vec![RsslProviderSection {
        address: address.clone(),
        ..RsslProviderSection::default()
    }];
    let node = NodeServer::spawn(cfg).unwrap();
    let ws = node.ws_addr.expect("an HTTP port");
    let line = format!("rssl_provider {address}: ");
    let (status, body) = readyz(ws);
    assert!(status.contains("503"), "{status}\n{body}");
    assert!(body.contains(&format!("{line}not logged in")), "{body}");
    go_tx.send(()).unwrap();
    let start = Instant::now();
    loop {
        let (status, body) = readyz(ws);
        if status.contains("200") {
            assert!(body.contains(&format!("{line}logged in")), "{body}");
            break;
        }
        assert!(start.elapsed() < LIMIT, "never ready: {status}\n{body}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A provider lost while the node's request for an item is unanswered: back, it is
/// asked for the item again, and the item's subscriber gets its image.
#[test]
fn an_item_asked_for_when_the_provider_was_lost_is_asked_for_again() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let (asked_tx, asked) = mpsc::channel::<usize>();
    std::thread::spawn(move || {
        for (n, s) in listener.incoming().take(2).enumerate() {
            serve(s.unwrap(), &[], |m, ch| {
                match (m.domain, m.class) {
                    (domain::LOGIN, class::REQUEST) => {
                        ch.send(&testing::login_accepted(m.stream_id))
                    }
                    (domain::SOURCE, class::REQUEST) => ch.send(&testing::service_up(
                        m.stream_id,
                        testing::DirectoryMsg::Solicited,
                        7,
                        b"PROV",
                    )),
                    (domain::MARKET_PRICE, class::REQUEST) => {
                        let _ = asked_tx.send(n);
                        // The first connection drops with the request unanswered.
                        if n == 0 {
                            return true;
                        }
                        ch.send(&testing::item_refresh(m.stream_id, 7, "ITEM"));
                    }
                    _ => {}
                }
                false
            });
        }
    });
    let mut cfg = NodeConfig::default();
    cfg.node.listen = "127.0.0.1:0".parse().unwrap();
    cfg.rssl.providers = vec![RsslProviderSection {
        address,
        ..RsslProviderSection::default()
    }];
    let node = NodeServer::spawn(cfg).unwrap();
    let mut sub = tickwire_client::Subscriber::connect(tickwire_client::ConnectOptions::new(
        node.addr.to_string(),
    ))
    .unwrap();
    let start = Instant::now();
    while sub.directory().get("PROV") != Some(&tickwire_proto::ServiceState::Up) {
        assert!(start.elapsed() < LIMIT, "PROV never up");
        let _ = sub.next_event(Duration::from_millis(50)).unwrap();
    }
    sub.subscribe("PROV", "ITEM", tickwire_client::RequestOptions::default())
        .unwrap();
    assert_eq!(asked.recv_timeout(LIMIT), Ok(0));
    assert_eq!(
        asked.recv_timeout(Duration::from_secs(20)),
        Ok(1),
        "not asked again once back"
    );
    loop {
        assert!(start.elapsed() < LIMIT, "no image");
        if let Some(tickwire_client::Event::Refresh { name, .. }) =
            sub.next_event(Duration::from_millis(50)).unwrap()
        {
            assert_eq!(name, "ITEM");
            break;
        }
    }
}
