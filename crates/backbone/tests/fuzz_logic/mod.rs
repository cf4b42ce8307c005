//! What the `backbone_messages` fuzz target does with an input, shared with the
//! stable-Rust corpus replay test: anything on a backbone channel goes through the
//! decoder, the seal check, and a live edge and source with real cores. A panic is a
//! bug; ignoring the input is fine.

use std::time::Instant;
use tickwire_backbone::auth::{precheck, Keys, Lane, Rejected, Sealer, Verifier};
use tickwire_backbone::wire::{data_header, BackboneMessage, DataMessages};
use tickwire_backbone::FilesWire;
use tickwire_backbone::{Edge, EdgeConfig, Source, SourceConfig};
use tickwire_core::{CoreConfig, Node};

const SOURCE: u64 = 0x5005;

pub(crate) fn backbone_messages(data: &[u8]) {
    sealing(data);
    if let Ok(m) = BackboneMessage::decode(data) {
        let mut again = Vec::new();
        m.encode(&mut again).expect("a decoded message encodes");
        assert_eq!(BackboneMessage::decode(&again).expect("round trip"), m);
        if let BackboneMessage::Data { messages, .. } = m {
            for _ in DataMessages::new(messages) {}
        }
    }
    let now = Instant::now();
    let mut edge_core = Node::new(CoreConfig::default(), now);
    let mut edge = Edge::start(&mut edge_core, EdgeConfig::default(), 0xED, now);
    let mut hb = Vec::new();
    BackboneMessage::Heartbeat {
        source: SOURCE,
        name: "src",
        directory_version: 1,
    }
    .encode(&mut hb)
    .expect("encodes");
    edge.on_data(&mut edge_core, 1, &hb, now);
    edge.on_data(&mut edge_core, 1, data, now);
    let mut framed = Vec::new();
    data_header(&mut framed, SOURCE);
    framed.extend_from_slice(data);
    edge.on_data(&mut edge_core, 1, &framed, now);
    edge.handle_timeout(&mut edge_core, now);

    let mut source_core = Node::new(CoreConfig::default(), now);
    let mut source = Source::start(&mut source_core, SourceConfig::default(), SOURCE, now);
    source.on_request(&mut source_core, data, now);
    source.handle_timeout(&mut source_core, now);
}

/// Anything read as a key file or checked as a sealed message is refused, dropped or
/// passed, never panics; the input
/// sealed with the key (when as long as a message's header) verifies as itself, once.
fn sealing(data: &[u8]) {
    // A key file's text, whatever it holds, is read or refused.
    let _ = Keys::parse(&String::from_utf8_lossy(data));
    let keys = Keys::parse(&format!("00000001 {}\n", "ab".repeat(32))).expect("a key");
    const NOW: u64 = 1_800_000_000_000_000_000;
    let mut v = Verifier::default();
    // The lane the files thread checks a message of the files streams against.
    let files_lane = match BackboneMessage::decode_files(data) {
        Some((true, _)) => Lane::FilesDown,
        _ => Lane::FilesUp,
    };
    let checked = v.verify(&keys, files_lane, data, NOW);
    // The event loop's look without hashing refuses only what the check refuses, and
    // for the same reason.
    if let Err(why) = precheck(&keys, data) {
        assert_eq!(checked, Err(why), "the precheck and the check disagree");
    }
    // What the files thread opens: checked the same way, whatever it holds.
    let mut files = FilesWire::new();
    files.set_keys(keys.clone());
    let opened = files.open(data);
    assert_eq!(opened.is_ok(), checked.is_ok());
    if data.len() < tickwire_backbone::wire::HEADER_LEN {
        return;
    }
    let mut s = Sealer::new(9, NOW);
    let sealed = s.seal(keys.signing(), Lane::Data, data, NOW).to_vec();
    assert_eq!(
        Verifier::default().verify(&keys, Lane::Requests, &sealed, NOW),
        Err(Rejected::BadMac),
        "a message sealed for one stream passes on another"
    );
    let plain = v
        .verify(&keys, Lane::Data, &sealed, NOW)
        .expect("a sealed message verifies");
    assert_eq!(plain.body.len(), data.len());
    assert_eq!(&plain.body[2..], data.get(2..).unwrap_or_default());
    assert!(
        v.verify(&keys, Lane::Data, &sealed, NOW).is_err(),
        "a replay passes"
    );
}
