//! What the RSSL fuzz target does with its input, shared with the stable-Rust replay of
//! its corpus (`tests/fuzz_corpus.rs`).
//!
//! The input is what a client sends a node from its first byte: the RIPC handshake,
//! then RWF messages. Each message is decoded and handed to a consumer session (logged
//! in, with a service in its directory), and its payload walked as every container the
//! node decodes. Nothing may panic, and what the channel holds stays bounded.

use std::time::{Duration, Instant};
use tickwire_proto::{Directory, Message, Welcome};
use tickwire_rssl::dictionary::RwfDictionary;
use tickwire_rssl::ripc::{Channel, Input, Settings};
use tickwire_rssl::rwf::container::{ArrayIter, ElementIter, FieldIter};
use tickwire_rssl::rwf::msg::Msg;
use tickwire_rssl::session::{Session, SessionConfig};

/// The node's side of the session: accepted, with service FEED up.
fn node_messages() -> Vec<u8> {
    let mut b = Vec::new();
    let _ = Message::Welcome(Welcome {
        max_frame: 1 << 18,
        node_name: "fuzz",
        ..Welcome::default()
    })
    .encode(&mut b);
    let _ = Message::Directory(Directory::one_service("FEED", 1)).encode(&mut b);
    b
}

pub(crate) fn rssl_connection(data: &[u8]) {
    let now = Instant::now();
    let settings = Settings {
        max_message: 64 * 1024,
        ..Settings::default()
    };
    let max_message = settings.max_message;
    let mut ch = Channel::new(settings, now);
    let mut session = Session::new(std::sync::Arc::new(SessionConfig::default()));
    let dict = RwfDictionary::from_native(&tickwire_proto::Dictionary::market_price());
    let node = node_messages();
    let mut to_node = Vec::new();
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut msg = Vec::new();
    let mut welcomed = false;
    // In pieces of varying size, as reads fall.
    let mut at = 0;
    let mut piece = 1;
    while at < data.len() {
        let end = (at + piece).min(data.len());
        ch.handle_bytes(&data[at..end], now);
        at = end;
        piece = piece % 97 + 7;
        loop {
            match ch.poll(&mut msg) {
                Ok(None) | Err(_) => break,
                Ok(Some(Input::Connected)) => {}
                Ok(Some(Input::Message)) => {
                    assert!(msg.len() <= max_message, "a message over the bound");
                    walk(&msg, &dict);
                    session.on_client_message(&msg, &mut to_node, &mut out);
                    if !welcomed && !to_node.is_empty() {
                        welcomed = true;
                        for m in tickwire_proto::MessageIter::new(&node).flatten() {
                            session.on_node_message(&m.message, &mut out);
                        }
                    }
                    // What the session asked of the node decodes as the node's messages.
                    for m in tickwire_proto::MessageIter::new(&to_node) {
                        assert!(m.is_ok(), "the session wrote a bad message: {:?}", m.err());
                    }
                    to_node.clear();
                    for o in out.drain(..) {
                        assert!(Msg::decode(&o).is_ok(), "the session wrote bad RWF");
                    }
                }
            }
        }
    }
    let _ = ch.handle_timeout(now + Duration::from_secs(120));
    ch.end_batch();
    as_provider(data, now);
}

/// The same bytes as a provider's answers to the node connecting to it: RIPC's client
/// side (a ConnectAck or Nak first), then RWF messages through the provider link.
fn as_provider(data: &[u8], now: Instant) {
    let dict = std::sync::Arc::new(RwfDictionary::from_native(
        &tickwire_proto::Dictionary::market_price(),
    ));
    let mut ch = Channel::connect(Settings::default(), "fuzz", now);
    let mut link = tickwire_rssl::provider_link::ProviderLink::new(dict, "fuzz");
    let (mut to_node, mut msg) = (Vec::new(), Vec::new());
    let mut asked = false;
    ch.handle_bytes(data, now);
    loop {
        match ch.poll(&mut msg) {
            Ok(None) | Err(_) => break,
            Ok(Some(Input::Connected)) => link.on_connected(&mut ch),
            Ok(Some(Input::Message)) => {
                if link
                    .on_provider_message(&msg, &mut to_node, &mut ch)
                    .is_err()
                {
                    break;
                }
                // Once the provider names a service, the node asks for two items
                // (streams 5 and 6 at the provider), so that what it says of
                // items (their refreshes, statuses, groups) finds some.
                if let Some(service) = link.service_names().first().filter(|_| !asked) {
                    asked = true;
                    for (stream_id, name) in [(1, "A"), (2, "B")] {
                        let request = tickwire_proto::Message::Request(
                            tickwire_proto::Request::streaming(stream_id, service, name),
                        );
                        link.on_node_message(&request, &mut to_node, &mut ch, now);
                    }
                }
                for m in tickwire_proto::MessageIter::new(&to_node) {
                    assert!(m.is_ok(), "the link wrote a bad message: {:?}", m.err());
                }
                to_node.clear();
            }
        }
    }
    link.handle_timeout(now + Duration::from_secs(60), &mut to_node);
    link.on_lost(&mut to_node);
}

/// Every decoder over a message's parts.
fn walk(bytes: &[u8], dict: &RwfDictionary) {
    let Ok(m) = Msg::decode(bytes) else { return };
    if let Some((_, attrib)) = m.key.as_ref().and_then(|k| k.attrib) {
        elements(attrib);
    }
    if let Ok(fields) = FieldIter::new(m.payload) {
        for (fid, body) in fields.flatten() {
            let _ = dict.value(fid, body);
        }
    }
    elements(m.payload);
    if m.container == 141 {
        walk(m.payload, dict);
    }
}

fn elements(bytes: &[u8]) {
    if let Ok(els) = ElementIter::new(bytes) {
        for e in els.flatten() {
            let _ = e.uint();
            if let Ok(items) = ArrayIter::new(e.value) {
                for item in items.flatten() {
                    let _ = tickwire_rssl::rwf::primitive::int(item);
                    let _ = tickwire_rssl::rwf::primitive::real(item);
                    let _ = tickwire_rssl::rwf::primitive::time(item);
                }
            }
        }
    }
}
