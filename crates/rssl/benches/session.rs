//! What the node's RSSL path costs per update, apart from the sockets and the core: an
//! RWF update of a MarketPrice item read from a provider into the node's own message,
//! and the node's update written to a consumer as RWF, through the same `Session` code
//! the node runs (the consumer logged in as the ETA Consumer example does).
//!
//! `cargo bench -p tickwire-rssl --bench session`. A figure here against the core's
//! `on_frame` (crates/core/benches) says how much of the node's CPU per RSSL update is
//! the translation.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::sync::Arc;
use tickwire_proto::{
    Date, Directory, FieldList, FieldListWriter, Message, MessageIter, Real, Refresh, Time, Update,
    UpdateType, Value,
};
use tickwire_rssl::dictionary::RwfDictionary;
use tickwire_rssl::rwf::container::FieldListWriter as RwfFields;
use tickwire_rssl::rwf::msg::{self, domain, Msg};
use tickwire_rssl::session::{Outbox, Session, SessionConfig};
use tickwire_rssl::testing::{self, hex};

/// An update of 23 fields, as the vendor's perf tools' MarketPrice updates carry:
/// prices (reals of several hints), sizes and volumes, a date, times, an enumeration.
fn update_values() -> Vec<(i16, Value<'static>)> {
    let mut v = vec![
        (22, Value::Real(Real::new(10_125, -2))),     // BID
        (25, Value::Real(Real::new(10_130, -2))),     // ASK
        (30, Value::UInt(1_500)),                     // BIDSIZE
        (31, Value::UInt(2_000)),                     // ASKSIZE
        (6, Value::Real(Real::new(101_275, -3))),     // TRDPRC_1
        (178, Value::UInt(300)),                      // TRDVOL_1
        (32, Value::UInt(1_234_567)),                 // ACVOL_1
        (11, Value::Real(Real::new(-35, -2))),        // NETCHNG_1
        (12, Value::Real(Real::new(10_200, -2))),     // HIGH_1
        (13, Value::Real(Real::new(10_050, -2))),     // LOW_1
        (56, Value::Real(Real::new(-34, -2))),        // PCTCHNG
        (100, Value::Real(Real::new(12_500_000, 0))), // TURNOVER
        (23, Value::Real(Real::new(10_120, -2))),     // BID_1
        (26, Value::Real(Real::new(10_135, -2))),     // ASK_1
        (67, Value::UInt(9_876)),                     // NUM_MOVES
        (14, Value::Enum(1)),                         // PRCTCK_1
        (1021, Value::UInt(4_242)),                   // SEQNUM
    ];
    let date = Date {
        year: 2026,
        month: 11,
        day: 29,
    };
    v.push((16, Value::Date(date))); // TRADE_DATE
    v.push((
        18,
        Value::Time(Time::from_hms_nanos(14, 30, 5, 123_000_000)),
    )); // TRDTIM_1
    v.push((
        1025,
        Value::Time(Time::from_hms_nanos(14, 30, 5, 124_000_000)),
    )); // QUOTIM
    v.push((5, Value::Time(Time::from_hms_nanos(14, 30, 0, 0)))); // TIMACT
    v.push((79, Value::Real(Real::new(10_127, -2)))); // IRGPRC
    v.push((80, Value::UInt(100))); // IRGVOL
    v
}

/// The update's fields in the node's encoding.
fn native_fields() -> Vec<u8> {
    let mut b = Vec::new();
    let mut w = FieldListWriter::new(&mut b);
    for (fid, v) in update_values() {
        assert!(w.push(fid, v));
    }
    w.finish();
    b
}

/// The update as a provider sends it: an RWF Update on its stream -1, its fields typed
/// as the dictionary says.
fn rwf_update(dict: &RwfDictionary) -> Vec<u8> {
    let mut out = Vec::new();
    msg::begin_update(&mut out, domain::MARKET_PRICE, -1, 1, Some(7), 1, false);
    let mut w = RwfFields::begin(&mut out);
    for (fid, v) in update_values() {
        w.field(&mut out, fid, |o| dict.put_value(o, fid, &v));
    }
    w.end(&mut out);
    out
}

/// Counts what the session writes, keeping no copy (the node's writer copies once).
#[derive(Default)]
struct Written(usize);

impl Outbox for Written {
    fn send(&mut self, rwf: &[u8]) {
        self.0 += rwf.len();
    }
}

fn deliver(s: &mut Session, encoded: &[u8], out: &mut impl Outbox) {
    for m in MessageIter::new(encoded) {
        s.on_node_message(&m.expect("the node's message").message, out);
    }
}

/// A consumer session logged in as the ETA Consumer example does, with TRI.N of FEED
/// open on its stream 5 and refreshed.
fn consumer_with_an_item(fields: &[u8]) -> Session {
    let mut s = Session::new(Arc::new(SessionConfig::default()));
    let (mut to_node, mut out) = (Vec::new(), Vec::<Vec<u8>>::new());
    // The ETA Consumer's own login request (user "root").
    let login = testing::eta_login(0);
    s.on_client_message(&login, &mut to_node, &mut out);
    let mut node = testing::node_welcome();
    Message::Directory(Directory::one_service("FEED", 1))
        .encode(&mut node)
        .unwrap();
    deliver(&mut s, &node, &mut out);
    // The directory, then a streaming request for TRI.N (service 1) on stream 5.
    s.on_client_message(
        &hex("000f 01 04 00000002 04 00 80 05 08 00 00 00 07"),
        &mut to_node,
        &mut out,
    );
    s.on_client_message(
        &hex("0016 01 06 00000005 46 00 01 01 22 80 09 07 01 05 54 52 49 2E 4E 01"),
        &mut to_node,
        &mut out,
    );
    let opened: Vec<String> = MessageIter::new(&to_node)
        .map(|m| format!("{:?}", m.unwrap().message))
        .collect();
    assert!(
        opened.iter().any(|m| m.contains("name: \"TRI.N\"")),
        "the item is requested of the node: {opened:?}"
    );
    let mut node = Vec::new();
    Message::Refresh(Refresh {
        solicited: true,
        ..Refresh::whole(1, 1, "FEED", "TRI.N", FieldList::decode(fields).unwrap())
    })
    .encode(&mut node)
    .unwrap();
    out.clear();
    deliver(&mut s, &node, &mut out);
    let r = Msg::decode(out.last().expect("a refresh for the consumer")).unwrap();
    assert_eq!(r.stream_id, 5, "the refresh reaches the consumer's stream");
    s
}

fn bench_rssl(c: &mut Criterion) {
    let fields = native_fields();
    let mut g = c.benchmark_group("rssl");
    g.throughput(Throughput::Elements(1));

    // The node's update (23 fields) to a consumer as RWF.
    let mut s = consumer_with_an_item(&fields);
    let mut update = Vec::new();
    Message::Update(Update::new(
        1,
        2,
        UpdateType::Quote,
        FieldList::decode(&fields).unwrap(),
    ))
    .encode(&mut update)
    .unwrap();
    let node_update = MessageIter::new(&update).next().unwrap().unwrap().message;
    let mut written = Written::default();
    s.on_node_message(&node_update, &mut written);
    assert!(
        written.0 > 100,
        "the update is written: {} bytes",
        written.0
    );
    g.bench_function("update_to_consumer", |b| {
        b.iter(|| s.on_node_message(black_box(&node_update), &mut written))
    });

    // A provider's RWF update (23 fields) read into the node's field list and update,
    // as the provider paths do (the session's message decode, the dictionary's typed
    // reading, the node's encoding).
    let dict = SessionConfig::default().dictionary;
    let rwf = rwf_update(&dict);
    let mut native = Vec::with_capacity(1024);
    let mut to_node = Vec::with_capacity(1024);
    g.bench_function("update_from_provider", |b| {
        b.iter(|| {
            let m = Msg::decode(black_box(&rwf)).unwrap();
            native.clear();
            dict.to_native(m.payload, &mut native, |_| {}).unwrap();
            to_node.clear();
            Message::Update(Update::new(
                1,
                m.seq.unwrap_or(0),
                UpdateType::from_u8(m.update_type),
                FieldList::from_trusted(&native),
            ))
            .encode(&mut to_node)
            .unwrap();
            black_box(to_node.len())
        })
    });
    g.finish();
}

criterion_group!(benches, bench_rssl);
criterion_main!(benches);
