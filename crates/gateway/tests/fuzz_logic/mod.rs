//! What each gateway fuzz target does with its input, as plain functions: the corpus
//! replay test (`tests/fuzz_corpus.rs`, stable Rust) and the cargo-fuzz targets in
//! `fuzz/` both use this file. A broken invariant panics; otherwise `Ok` if the input
//! was accepted, `Err` naming why not.

#![allow(dead_code)]

use std::sync::Arc;
use tickwire_gateway::connection::{Host, TokenAnswer};
use tickwire_gateway::session::JsonOut;
use tickwire_gateway::ws::{parse_request, Frame, FrameDecoder, OriginRules, MAX_HEAD};
use tickwire_gateway::{Connection, Session, SessionConfig, UpdateCache};
use tickwire_proto::{FieldList, Message, MessageIter, Refresh, Update, UpdateType, Welcome};

pub(crate) const TARGETS: [&str; 3] = ["ws_frames", "json_session", "ws_connection"];

pub(crate) fn run(target: &str, data: &[u8]) -> Result<(), String> {
    match target {
        "ws_frames" => ws_frames(data),
        "json_session" => json_session(data),
        "ws_connection" => ws_connection(data),
        other => panic!("no fuzz target named {other:?}"),
    }
}

/// Client bytes into the HTTP parser and the frame decoder, in pieces whose size the
/// first byte chooses: no panic, messages within the limit, text always UTF-8.
///
/// Attacks on the node's WebSocket port: the input is also parsed as the value of a
/// header padding the head past `MAX_HEAD` (it must be refused, complete or not, unless
/// the input itself ends the head in time); and when the first byte's top bit is set,
/// the rest is repeated to 64 KiB, so a few tiny frames become a flood, fed in read-sized
/// batches. Either way the decoder moves no more bytes compacting its buffer than it
/// was given (shifting the buffer once per frame made tiny frames cost O(n^2)).
pub(crate) fn ws_frames(data: &[u8]) -> Result<(), String> {
    check_head(data);
    let mut big = b"GET / HTTP/1.1\r\nX: ".to_vec();
    big.extend(data.iter().cycle().take(MAX_HEAD));
    big.extend_from_slice(b"\r\n\r\n");
    match parse_request(&big) {
        Ok(Some((_, n))) => assert!(n <= MAX_HEAD, "a head of {n} bytes was accepted"),
        Ok(None) => panic!("{} bytes without a whole head were not refused", big.len()),
        Err(_) => {}
    }
    let Some((&first, rest)) = data.split_first() else {
        return Err("empty".into());
    };
    let step = (first as usize % 64) + 1;
    let flooded;
    let (input, batch) = if first & 0x80 != 0 && !rest.is_empty() {
        flooded = rest.repeat((64 * 1024) / rest.len() + 1);
        (&flooded[..], step * 1024)
    } else {
        (rest, step)
    };
    let max = 1024;
    let mut d = FrameDecoder::new(max);
    for chunk in input.chunks(batch) {
        d.extend(chunk);
        loop {
            match d.next_frame() {
                Ok(None) => break,
                Ok(Some(Frame::Text(t))) => assert!(t.len() <= max),
                Ok(Some(Frame::Binary(b))) => assert!(b.len() <= max),
                Ok(Some(Frame::Ping(p) | Frame::Pong(p))) => assert!(p.len() <= 125),
                Ok(Some(Frame::TooLarge(n))) => assert!(n > max as u64),
                Ok(Some(Frame::Close(_))) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        assert!(
            d.bytes_moved() <= input.len() as u64,
            "{} bytes moved decoding {} bytes",
            d.bytes_moved(),
            input.len()
        );
    }
    Ok(())
}

/// `parse_request` on raw bytes: a head it accepts fits in `MAX_HEAD`, and it waits
/// for more only while the bytes fit too.
fn check_head(data: &[u8]) {
    match parse_request(data) {
        Ok(Some((_, n))) => assert!(n <= MAX_HEAD && n <= data.len()),
        Ok(None) => assert!(data.len() <= MAX_HEAD),
        Err(_) => {}
    }
}

/// Server frames are unmasked text frames holding JSON arrays: checks each.
fn check_frames(bytes: &[u8]) {
    let mut at = 0;
    while at < bytes.len() {
        let op = bytes[at] & 0x0f;
        let (len, hdr) = match bytes[at + 1] & 0x7f {
            126 => (
                u16::from_be_bytes([bytes[at + 2], bytes[at + 3]]) as usize,
                4,
            ),
            127 => {
                let mut n = [0u8; 8];
                n.copy_from_slice(&bytes[at + 2..at + 10]);
                (u64::from_be_bytes(n) as usize, 10)
            }
            n => (n as usize, 2),
        };
        let payload = &bytes[at + hdr..at + hdr + len];
        if op == 1 {
            let v: serde_json::Value = serde_json::from_slice(payload)
                .unwrap_or_else(|e| panic!("server sent invalid JSON ({e}): {payload:?}"));
            assert!(v.is_array(), "every frame is an array");
        }
        at += hdr + len;
    }
}

/// A logged-in session given the input as a client text message; what it sends the
/// node must decode, and the JSON it sends back (for its own answers and for the node's
/// refreshes and updates of every stream it opened) must be valid, and the same byte for
/// byte whether updates' encodings are shared between streams or not.
pub(crate) fn json_session(data: &[u8]) -> Result<(), String> {
    let shared = json_session_output(data, UpdateCache::new(true));
    let own = json_session_output(data, UpdateCache::new(false));
    assert!(shared == own, "sharing encodings changed the output");
    Ok(())
}

fn json_session_output(data: &[u8], mut cache: UpdateCache) -> Vec<u8> {
    let cfg = Arc::new(SessionConfig {
        default_service: Some("FEED".into()),
        ..SessionConfig::default()
    });
    let mut s = Session::new(cfg);
    let mut out = JsonOut::default();
    let mut to_node = Vec::new();
    s.on_client_text(
        r#"{"ID":1,"Domain":"Login","Key":{"Name":"fuzz"}}"#,
        &mut to_node,
        &mut out,
    );
    s.on_node_message(
        &Message::Welcome(Welcome {
            max_frame: 262_144,
            max_output_bytes: 1 << 20,
            node_name: "fuzz",
            ..Welcome::default()
        }),
        &mut cache,
        &mut out,
    );
    to_node.clear();
    let text = String::from_utf8_lossy(data);
    s.on_client_text(&text, &mut to_node, &mut out);
    let fields = tickwire_proto::encode_field_list([
        (
            22,
            tickwire_proto::Value::Real(tickwire_proto::Real::new(12345, -2)),
        ),
        (3, tickwire_proto::Value::Ascii("A\"B\\\u{1}")),
    ]);
    let mut streams = Vec::new();
    for m in MessageIter::new(&to_node) {
        let m = m.map_err(|e| panic!("the session sent the node a bad message: {e}"));
        if let Ok(raw) = m {
            if let Message::Request(r) = raw.message {
                streams.push((r.stream_id, r.service.to_string(), r.name.to_string()));
            }
        }
    }
    for (sid, service, name) in &streams {
        let fl = FieldList::decode(&fields).expect("valid");
        s.on_node_message(
            &Message::Refresh(Refresh {
                solicited: true,
                ..Refresh::whole(*sid, 1, service, name, fl)
            }),
            &mut cache,
            &mut out,
        );
        s.on_node_message(
            &Message::Update(Update {
                stream_id: *sid,
                seq: 2,
                update_type: UpdateType::Trade,
                do_not_conflate: true,
                conflation_count: 3,
                fields: fl,
            }),
            &mut cache,
            &mut out,
        );
    }
    let mut frames = Vec::new();
    out.take(&mut frames);
    check_frames(&frames);
    frames
}

/// A node as a fuzzed connection sees it: it takes what it is handed, issues tokens and
/// serves `/metrics` (a fixed answer).
struct FuzzHost;

impl Host for FuzzHost {
    fn to_node(&mut self, messages: &[u8]) {
        for m in MessageIter::new(messages) {
            if let Err(e) = m {
                panic!("the connection handed the node a bad message: {e}");
            }
        }
    }
    fn output_limit(&self) -> usize {
        64 * 1024
    }
    fn tls(&self) -> bool {
        false
    }
    fn present_session_token(&mut self, token: &str) -> Option<Result<String, String>> {
        Some(if token.len().is_multiple_of(2) {
            Ok("alice".into())
        } else {
            Err("expired".into())
        })
    }
    fn request_session_token(&mut self, user: &str, _password: &str) -> Option<TokenAnswer> {
        Some(TokenAnswer::Issued {
            token: "t0k".into(),
            user: user.into(),
            lifetime_s: 60,
        })
    }
    fn node_endpoint(&mut self, target: &str, _accept: Option<&str>, _: Option<&str>) -> bool {
        target == "/metrics"
    }
    fn dashboard(&self) -> &'static str {
        "<html></html>"
    }
    fn peer(&self) -> &str {
        "127.0.0.1:1"
    }
}

/// A connection on the node's WebSocket port fed what a client sends, in pieces whose
/// size the first byte chooses; the first byte's two top bits choose what comes before
/// the input: nothing (the raw request), an upgrade whose `Sec-WebSocket-Key` value is
/// the input (a peer's text quoted back), or a whole upgrade the input's frames follow.
/// No panic; what the connection answers is one HTTP answer, or a 101 and frames.
/// `Ok` when the connection ended upgraded and open.
pub(crate) fn ws_connection(data: &[u8]) -> Result<(), String> {
    let Some((&first, rest)) = data.split_first() else {
        return Err("empty".into());
    };
    let upgrade = |key: &[u8]| {
        let mut head = b"GET /WebSocket HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\
            Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
            Sec-WebSocket-Protocol: tr_json2\r\nSec-WebSocket-Key: "
            .to_vec();
        head.extend_from_slice(key);
        head.extend_from_slice(b"\r\n\r\n");
        head
    };
    let input = match first >> 6 {
        0 => rest.to_vec(),
        1 => upgrade(
            &rest
                .iter()
                .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
                .collect::<Vec<_>>(),
        ),
        _ => {
            let mut v = upgrade(b"dGhlIHNhbXBsZSBub25jZQ==");
            v.extend_from_slice(rest);
            v
        }
    };
    let step = (first as usize % 64) + 1;
    let cfg = Arc::new(SessionConfig::default());
    let mut host = FuzzHost;
    let origins = OriginRules::new(&["https://example.com".to_string()], &["node".to_string()]);
    let mut c = Connection::new(Arc::new(origins));
    for chunk in input.chunks(step) {
        c.handle_bytes(chunk, &cfg, &mut host);
    }
    let out = &c.out;
    if !out.is_empty() {
        assert!(out.starts_with(b"HTTP/1.1 "), "an answer that is not HTTP");
    }
    if c.takes_node_messages() {
        assert!(out.starts_with(b"HTTP/1.1 101 "), "open without a 101");
        Ok(())
    } else {
        Err("not upgraded".into())
    }
}
