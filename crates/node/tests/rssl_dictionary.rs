//! An RSSL consumer's dictionary download of many parts, on a socket that takes every
//! write at once (loopback): the parts go out as fast as the socket takes them, not a
//! quarter MiB per heartbeat. A write that never meets a full socket brings no
//! writable event, and a dictionary's parts come from the session, not the core, so the
//! node must go on by itself.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tickwire_node::config::NodeConfig;
use tickwire_node::NodeServer;
use tickwire_rssl::ripc::{Channel, Input, Settings};
use tickwire_rssl::rwf::msg::{class, domain, put_request, refresh, request, Msg, MsgKey};

/// Far longer than the download takes: without the fix, each quarter MiB after the
/// first waited for the next heartbeat.
const HEARTBEAT_MS: u64 = 120_000;
/// Bound on the whole download (it takes milliseconds).
const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn a_large_dictionary_download_goes_out_without_waiting_for_heartbeats() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut text = String::new();
    for i in 1..=20_000 {
        text.push_str(&format!(
            "FIELD_NAME_{i} \"FIELD DESCRIPTION {i}\" {i} NULL ALPHANUMERIC 20 RMTES_STRING 20\n"
        ));
    }
    let fields = dir.join("RDMFieldDictionary");
    std::fs::write(&fields, text).unwrap();
    let mut cfg = NodeConfig::default();
    cfg.node.listen = "127.0.0.1:0".parse().unwrap();
    cfg.rssl.field_dictionary = fields.display().to_string();
    cfg.limits.heartbeat_ms = HEARTBEAT_MS;
    let node = NodeServer::spawn(cfg).unwrap();
    let mut s = TcpStream::connect(node.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let start = Instant::now();
    let mut ch = Channel::connect(Settings::default(), "test", start);
    let (mut msg, mut buf) = (Vec::new(), vec![0u8; 65536]);
    let (mut parts, mut bytes) = (0usize, 0usize);
    loop {
        assert!(
            start.elapsed() < LIMIT,
            "{parts} parts ({bytes} bytes) of the dictionary in {LIMIT:?}"
        );
        ch.end_batch();
        while !ch.transmit().is_empty() {
            let n = s.write(ch.transmit()).unwrap();
            ch.consume(n);
        }
        match s.read(&mut buf) {
            Ok(0) => panic!("the node closed the connection after {parts} parts"),
            Ok(n) => ch.handle_bytes(&buf[..n], Instant::now()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => panic!("{e}"),
        }
        while let Some(input) = ch.poll(&mut msg).unwrap() {
            match input {
                Input::Connected => {
                    let key = MsgKey {
                        name: Some(b"user"),
                        name_type: Some(1),
                        ..MsgKey::default()
                    };
                    let mut b = Vec::new();
                    put_request(&mut b, domain::LOGIN, 1, request::STREAMING, &key, false);
                    ch.send(&b);
                }
                Input::Message => {
                    let m = Msg::decode(&msg).unwrap();
                    if (m.domain, m.class) == (domain::LOGIN, class::REFRESH) {
                        let key = MsgKey {
                            name: Some(b"RWFFld"),
                            filter: Some(7),
                            ..MsgKey::default()
                        };
                        let mut b = Vec::new();
                        put_request(&mut b, domain::DICTIONARY, 3, 0, &key, false);
                        ch.send(&b);
                    } else if m.domain == domain::DICTIONARY {
                        parts += 1;
                        bytes += msg.len();
                        if m.flags & refresh::REFRESH_COMPLETE != 0 {
                            assert!(bytes > 1 << 20, "a download of many parts: {bytes} bytes");
                            return;
                        }
                    }
                }
            }
        }
    }
}
