//! Sources and edges driven in memory on a fake clock: two cores (the source's and the
//! edge's), the backbone replaced by queues of messages the test moves by hand.

use super::*;
use proptest::prelude::*;
use std::collections::VecDeque;
use std::time::Duration;
use tickwire_core::CoreConfig;
use tickwire_proto::{
    encode_field_list, DataState, Directory, FieldList, Login, Message, MessageIter, MessageType,
    Real, Refresh, Request, Role as ProtoRole, ServiceState, StreamState, Update, UpdateType,
    Value,
};

struct Queue<'a> {
    q: &'a mut VecDeque<Vec<u8>>,
    open: bool,
}

impl Outbox for Queue<'_> {
    fn offer(&mut self, msg: &[u8]) -> bool {
        if self.open {
            self.q.push_back(msg.to_vec());
        }
        self.open
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Got {
    Refresh {
        sid: u32,
        seq: u32,
        data: DataState,
        bid: Option<String>,
    },
    Update {
        sid: u32,
        seq: u32,
        bid: Option<String>,
    },
    Status {
        sid: u32,
        stream: StreamState,
        data: DataState,
    },
    Nak {
        post_id: u32,
        text: String,
    },
}

/// An ok image on `sid` at `seq`, its bid as written.
fn image_ok(sid: u32, seq: u32, bid: &str) -> Got {
    Got::Refresh {
        sid,
        seq,
        data: DataState::Ok,
        bid: Some(bid.into()),
    }
}

fn update(sid: u32, seq: u32, bid: &str) -> Got {
    Got::Update {
        sid,
        seq,
        bid: Some(bid.into()),
    }
}

/// The status telling a stream's subscriber its data is suspect (the stream open).
fn suspect(sid: u32) -> Got {
    Got::Status {
        sid,
        stream: StreamState::Open,
        data: DataState::Suspect,
    }
}

/// Whether `got` has an ok image on `sid`.
fn has_ok_image(got: &[Got], sid: u32) -> bool {
    got.iter()
        .any(|g| matches!(g, Got::Refresh { sid: s, data: DataState::Ok, .. } if *s == sid))
}

/// Whether `got` has an update on `sid` at `seq`.
fn has_update(got: &[Got], sid: u32, seq: u32) -> bool {
    got.iter()
        .any(|g| matches!(g, Got::Update { sid: s, seq: q, .. } if *s == sid && *q == seq))
}

/// `got` is one update, on `sid` at `seq`.
fn assert_one_update(got: Vec<Got>, sid: u32, seq: u32) {
    assert!(
        matches!(got[..], [Got::Update { sid: s, seq: q, .. }] if s == sid && q == seq),
        "{got:?}"
    );
}

fn bid(f: &FieldList<'_>) -> Option<String> {
    f.get(22).map(|v| v.to_string())
}

struct Edgy {
    core: Node,
    edge: Edge,
    /// Deliver data to this edge.
    connected: bool,
}

struct World {
    now: Instant,
    src_core: Node,
    source: Source,
    edges: Vec<Edgy>,
    data: VecDeque<Vec<u8>>,
    requests: VecDeque<Vec<u8>>,
    /// The backbone takes the source's data.
    open: bool,
    /// The source is running (a stopped source neither sends nor receives).
    source_up: bool,
    /// The edges' requests (heartbeats among them) never reach the source.
    requests_lost: bool,
}

fn frame(msgs: &[Message<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in msgs {
        m.encode(&mut out).unwrap();
    }
    out
}

fn login(role: ProtoRole) -> Message<'static> {
    Message::Login(Login::new(role, "test", "test", ""))
}

fn image(bid: i64) -> Vec<u8> {
    encode_field_list([
        (22, Value::Real(Real::new(bid, -2))),
        (25, Value::Real(Real::new(bid + 10, -2))),
    ])
}

/// An update of the item on `stream`, its fields `img`.
fn quote_update(stream: u32, seq: u32, img: &[u8]) -> Message<'_> {
    let fields = FieldList::decode(img).unwrap();
    Message::Update(Update::new(stream, seq, UpdateType::Quote, fields))
}

fn core_config(cache: bool) -> CoreConfig {
    CoreConfig {
        cache,
        posts: tickwire_core::PostServices::All,
        ..CoreConfig::default()
    }
}

impl World {
    fn new(edges: usize) -> World {
        World::with_source(edges, SourceConfig::default())
    }

    fn with_source(edges: usize, source_cfg: SourceConfig) -> World {
        let now = Instant::now();
        // A small queue before the core treats the backbone link as behind, so a test
        // can make it so with a few updates.
        let mut cfg = core_config(true);
        cfg.slow_consumer.conflate_above_bytes = 4096;
        cfg.slow_consumer.conflate_above_messages = 64;
        let mut src_core = Node::new(cfg, now);
        let source = Source::start(&mut src_core, source_cfg, 0x5005, now);
        let mut w = World {
            now,
            src_core,
            source,
            edges: Vec::new(),
            data: VecDeque::new(),
            requests: VecDeque::new(),
            open: true,
            source_up: true,
            requests_lost: false,
        };
        for _ in 0..edges {
            w.add_edge();
        }
        w.settle();
        w
    }

    fn add_edge(&mut self) -> usize {
        self.add_edge_with_cache(true)
    }

    fn add_edge_with_cache(&mut self, cache: bool) -> usize {
        let mut core = Node::new(core_config(cache), self.now);
        let id = 0xED00 + self.edges.len() as u64;
        let edge = Edge::start(&mut core, EdgeConfig::default(), id, self.now);
        self.edges.push(Edgy {
            core,
            edge,
            connected: true,
        });
        self.edges.len() - 1
    }

    /// A non-interactive publisher of FEED on the source's core, with `items` images.
    fn publisher(&mut self, items: usize) -> ConnId {
        let p = self.src_core.connect("publisher", self.now);
        let mut msgs = vec![
            login(ProtoRole::Publisher),
            Message::Directory(Directory::one_service("FEED", items as u32)),
        ];
        let names: Vec<String> = (0..items).map(|i| format!("SYM{i}")).collect();
        let img = image(10000);
        for (i, n) in names.iter().enumerate() {
            msgs.push(Message::Refresh(Refresh::whole(
                i as u32 + 1,
                1,
                "FEED",
                n,
                FieldList::decode(&img).unwrap(),
            )));
        }
        let f = frame(&msgs);
        self.src_core.on_frame(p, &f, self.now);
        self.settle();
        p
    }

    fn publish(&mut self, p: ConnId, item: u32, seq: u32, bid: i64) {
        let img = image(bid);
        let f = frame(&[quote_update(item + 1, seq, &img)]);
        self.src_core.on_frame(p, &f, self.now);
        self.settle();
    }

    fn subscriber(&mut self, edge: usize) -> ConnId {
        let e = &mut self.edges[edge];
        let c = e.core.connect("subscriber", self.now);
        e.core
            .on_frame(c, &frame(&[login(ProtoRole::Subscriber)]), self.now);
        c
    }

    fn request(&mut self, edge: usize, conn: ConnId, sid: u32, item: &str) {
        let f = frame(&[Message::Request(Request::streaming(sid, "FEED", item))]);
        self.edges[edge].core.on_frame(conn, &f, self.now);
        self.settle();
    }

    fn close(&mut self, edge: usize, conn: ConnId, sid: u32) {
        let f = frame(&[Message::Close { stream_id: sid }]);
        self.edges[edge].core.on_frame(conn, &f, self.now);
        self.settle();
    }

    /// A subscriber at edge `edge` that asked for FEED's items `streams` (stream id,
    /// name), one after the other.
    fn subscriber_with(&mut self, edge: usize, streams: &[(u32, &str)]) -> ConnId {
        let sub = self.subscriber(edge);
        for &(sid, item) in streams {
            self.request(edge, sub, sid, item);
        }
        sub
    }

    /// A subscriber at edge `edge`, what its login brought taken, that asked for FEED's
    /// `item` on stream `sid`.
    fn subscriber_asking_for(&mut self, edge: usize, sid: u32, item: &str) -> ConnId {
        let sub = self.subscriber(edge);
        self.recv(edge, sub);
        self.request(edge, sub, sid, item);
        sub
    }

    /// A subscriber at edge `edge` with SYM0 open on stream 1, its image taken.
    fn sym0_subscriber_imaged(&mut self, edge: usize) -> ConnId {
        let a = self.subscriber_with(edge, &[(1, "SYM0")]);
        self.recv(edge, a);
        a
    }

    /// A subscriber at edge `edge` with SYM0 open on stream 1, `p` (its publisher) having
    /// sent update 2 since: both taken.
    fn sym0_subscriber_past_update_2(&mut self, p: ConnId, edge: usize) -> ConnId {
        let a = self.subscriber_with(edge, &[(1, "SYM0")]);
        self.publish(p, 0, 2, 10002);
        assert_eq!(self.recv(edge, a).len(), 2, "image and update 2");
        a
    }

    /// The requests edge `edge` sends now, taken off the backbone before they reach the
    /// source.
    fn hold_requests(&mut self, edge: usize) -> Vec<Vec<u8>> {
        let e = &mut self.edges[edge];
        let mut q = Queue {
            q: &mut self.requests,
            open: true,
        };
        e.edge.pump(&mut e.core, &mut q, self.now);
        self.requests.drain(..).collect()
    }

    /// Requests held back by `hold_requests` reach the source at last.
    fn deliver_requests(&mut self, held: Vec<Vec<u8>>) {
        for m in held {
            self.source.on_request(&mut self.src_core, &m, self.now);
        }
        self.settle();
    }

    /// Backbone message `bytes` reaches edge `edge` from the transport's `image`; the
    /// edge passes it to its core at its next `flush_edge`.
    fn edge_receives(&mut self, edge: usize, image: i32, bytes: &[u8]) {
        let e = &mut self.edges[edge];
        e.edge.on_data(&mut e.core, image, bytes, self.now);
    }

    /// The end of edge `edge`'s receive batch.
    fn flush_edge(&mut self, edge: usize) {
        let e = &mut self.edges[edge];
        e.edge.flush(&mut e.core, self.now);
    }

    /// Moves messages until nothing moves.
    fn settle(&mut self) {
        for _ in 0..100 {
            if self.source_up {
                let mut q = Queue {
                    q: &mut self.data,
                    open: self.open,
                };
                self.source.pump(&mut self.src_core, &mut q, self.now);
            }
            for e in &mut self.edges {
                let mut q = Queue {
                    q: &mut self.requests,
                    open: true,
                };
                e.edge.pump(&mut e.core, &mut q, self.now);
            }
            if self.data.is_empty() && self.requests.is_empty() {
                return;
            }
            // Multicast: every edge sees every message of the source.
            for m in self.data.drain(..) {
                for e in self.edges.iter_mut().filter(|e| e.connected) {
                    e.edge.on_data(&mut e.core, 1, &m, self.now);
                }
            }
            // The end of a receive batch (as `Backbone::receive` does).
            for e in self.edges.iter_mut() {
                e.edge.flush(&mut e.core, self.now);
            }
            for m in self.requests.drain(..) {
                if self.source_up && !self.requests_lost {
                    self.source.on_request(&mut self.src_core, &m, self.now);
                }
            }
        }
        panic!("the backbone never settled");
    }

    /// Time passes in steps of 50 ms; every peer stays alive.
    fn advance(&mut self, by: Duration) {
        let end = self.now + by;
        while self.now < end {
            self.now += Duration::from_millis(50);
            if self.source_up {
                self.source.handle_timeout(&mut self.src_core, self.now);
            }
            self.src_core.handle_timeout(self.now);
            for e in &mut self.edges {
                e.edge.handle_timeout(&mut e.core, self.now);
                e.core.handle_timeout(self.now);
            }
            self.settle();
        }
    }

    /// The source stops (it neither sends nor receives) while `by` passes.
    fn stop_source_for(&mut self, by: Duration) {
        self.source_up = false;
        self.advance(by);
    }

    /// The source runs (again) while `by` passes.
    fn run_source_for(&mut self, by: Duration) {
        self.source_up = true;
        self.advance(by);
    }

    /// What the edge's core sent to `conn` (market data only).
    fn recv(&mut self, edge: usize, conn: ConnId) -> Vec<Got> {
        let mut got = Vec::new();
        take_output(&mut self.edges[edge].core, conn, |m| match m {
            Message::Refresh(r) => got.push(Got::Refresh {
                sid: r.stream_id,
                seq: r.seq,
                data: r.state.data,
                bid: bid(&r.fields),
            }),
            Message::Update(u) => got.push(Got::Update {
                sid: u.stream_id,
                seq: u.seq,
                bid: bid(&u.fields),
            }),
            Message::Status(s) => got.push(Got::Status {
                sid: s.stream_id,
                stream: s.state.stream,
                data: s.state.data,
            }),
            Message::Ack(a) => got.push(Got::Nak {
                post_id: a.post_id,
                text: format!("{:?}: {}", a.nak, a.text),
            }),
            _ => {}
        });
        got
    }
}

/// Takes what `core` has queued for `conn`, and hands each message in it to `each`.
fn take_output(core: &mut Node, conn: ConnId, mut each: impl FnMut(Message<'_>)) {
    let mut bytes = Vec::new();
    if let Some(out) = core.output(conn) {
        out.take_all(&mut bytes);
    }
    let mut at = 0;
    while at + 4 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        for m in MessageIter::new(&bytes[at + 4..at + 4 + len]) {
            each(m.unwrap().message);
        }
        at += 4 + len;
    }
}

/// Brings the sources and edges to know each other (heartbeats and directories).
fn ready(edges: usize, items: usize) -> (World, ConnId) {
    ready_with(edges, items, SourceConfig::default())
}

/// As `ready` with no edge, then one edge with its cache off joins: its index.
fn ready_with_a_cache_off_edge() -> (World, ConnId, usize) {
    let (mut w, p) = ready(0, 1);
    let edge = w.add_edge_with_cache(false);
    w.advance(Duration::from_millis(500));
    (w, p, edge)
}

/// As `ready`, with the source's settings.
fn ready_with(edges: usize, items: usize, source: SourceConfig) -> (World, ConnId) {
    let mut w = World::with_source(edges, source);
    let p = w.publisher(items);
    w.advance(Duration::from_millis(500));
    for e in &w.edges {
        assert_eq!(e.edge.stats().sources_live, 1);
        assert_eq!(
            e.edge.services().into_iter().collect::<Vec<_>>(),
            vec!["FEED"]
        );
    }
    (w, p)
}

#[test]
fn a_subscriber_at_an_edge_gets_the_sources_image_then_every_update_in_order() {
    let (mut w, p) = ready(1, 3);
    let sub = w.subscriber_asking_for(0, 7, "SYM1");
    assert_eq!(w.recv(0, sub), vec![image_ok(7, 1, "100.00")]);
    for seq in 2..=5 {
        w.publish(p, 1, seq, 10000 + seq as i64);
    }
    let got = w.recv(0, sub);
    let seqs: Vec<u32> = got
        .iter()
        .map(|g| match g {
            Got::Update { sid: 7, seq, .. } => *seq,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(seqs, vec![2, 3, 4, 5]);
    // Items nobody at an edge asked for stay off the backbone.
    assert_eq!(w.source.stats().streams_open, 1);
}

#[test]
fn a_post_at_an_edge_is_refused_at_once_since_the_backbone_carries_data_one_way() {
    let (mut w, _p) = ready(1, 2);
    let sub = w.subscriber_asking_for(0, 7, "SYM1");
    w.recv(0, sub);
    let fields = image(5);
    let f = frame(&[Message::Post(tickwire_proto::Post {
        stream_id: 7,
        post_id: 3,
        ack: true,
        image: false,
        redelivered: false,
        service: "",
        name: "",
        fields: FieldList::decode(&fields).unwrap(),
    })]);
    w.edges[0].core.on_frame(sub, &f, w.now);
    w.settle();
    assert_eq!(
        w.recv(0, sub),
        vec![Got::Nak {
            post_id: 3,
            text: "Some(DeniedBySrc): posts do not cross the backbone: post to the source node"
                .into()
        }]
    );
}

#[test]
fn many_subscribers_at_an_edge_make_one_subscribe_and_the_last_close_releases_the_source() {
    let (mut w, _p) = ready(1, 2);
    let a = w.subscriber(0);
    let b = w.subscriber(0);
    w.request(0, a, 1, "SYM0");
    w.request(0, b, 2, "SYM0");
    assert_eq!(w.source.stats().subscribes, 1);
    assert!(matches!(w.recv(0, a)[..], [Got::Refresh { sid: 1, .. }]));
    assert!(matches!(w.recv(0, b)[..], [Got::Refresh { sid: 2, .. }]));
    w.close(0, a, 1);
    assert_eq!(w.source.stats().streams_open, 1);
    w.close(0, b, 2);
    assert_eq!(w.source.stats().streams_open, 0);
}

#[test]
fn an_edge_joining_late_is_imaged_and_the_edges_in_step_see_no_second_image() {
    let (mut w, p) = ready(1, 1);
    let a = w.sym0_subscriber_past_update_2(p, 0);
    let late = w.add_edge();
    w.advance(Duration::from_millis(500));
    let b = w.subscriber(late);
    w.request(late, b, 5, "SYM0");
    assert_eq!(w.recv(late, b), vec![image_ok(5, 2, "100.02")]);
    assert_eq!(
        w.recv(0, a),
        vec![],
        "the first edge's subscriber saw the late image"
    );
    w.publish(p, 0, 3, 10003);
    assert_one_update(w.recv(0, a), 1, 3);
    assert_one_update(w.recv(late, b), 5, 3);
}

/// With its cache off, an edge's core asks the backbone for an image for each
/// subscriber that joins an item already streaming. An update that reaches the edge
/// while that image is on its way must still reach the subscribers already in step
/// (or they must be re-imaged): never seq 2 then 4.
#[test]
fn a_subscriber_joining_at_a_cache_off_edge_costs_the_ones_in_step_no_update() {
    let (mut w, p, edge) = ready_with_a_cache_off_edge();
    let a = w.sym0_subscriber_past_update_2(p, edge);
    let b = w.subscriber(edge);
    let f = frame(&[Message::Request(Request::streaming(2, "FEED", "SYM0"))]);
    w.edges[edge].core.on_frame(b, &f, w.now);
    // The edge passes its core's request on; it is held here, not yet at the source.
    let held = w.hold_requests(edge);
    assert!(!held.is_empty(), "the edge asked the source for an image");
    // Meanwhile update 3 crosses the backbone.
    w.publish(p, 0, 3, 10003);
    w.deliver_requests(held);
    w.publish(p, 0, 4, 10004);
    let got = w.recv(edge, a);
    let mut seq = 2;
    for g in &got {
        match g {
            Got::Update { seq: s, .. } => {
                assert_eq!(*s, seq + 1, "a gap at the subscriber in step: {got:?}");
                seq = *s;
            }
            Got::Refresh { seq: s, .. } => seq = *s,
            Got::Status { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(seq, 4, "{got:?}");
    assert!(
        w.recv(edge, b)
            .iter()
            .any(|g| matches!(g, Got::Refresh { sid: 2, .. })),
        "the new subscriber got its image"
    );
}

/// Data from the source (id 0x5005 in `World`) as the edge receives it: `msgs` on the
/// source's own stream ids, handed to edge `edge` and forwarded at once.
fn from_source(w: &mut World, edge: usize, msgs: &[Message<'_>]) {
    let mut encoded = Vec::new();
    for msg in msgs {
        msg.encode(&mut encoded).unwrap();
    }
    from_source_raw(w, edge, &encoded);
}

/// As `from_source`, with the messages already encoded (or not well formed).
fn from_source_raw(w: &mut World, edge: usize, encoded: &[u8]) {
    let mut m = Vec::new();
    wire::data_header(&mut m, 0x5005);
    m.extend_from_slice(encoded);
    w.edge_receives(edge, 1, &m);
    w.flush_edge(edge);
    w.settle();
}

#[test]
fn an_update_that_skips_sequence_numbers_is_held_back_and_the_item_re_imaged() {
    let (mut w, p) = ready(1, 1);
    let a = w.sym0_subscriber_past_update_2(p, 0);
    // The source's stream 1 (its first) jumps from 2 to 4: update 3 never came.
    let img = image(10004);
    from_source(&mut w, 0, &[quote_update(1, 4, &img)]);
    // Suspect at once, then the source's image (here from its cache, at 2) and live.
    assert_eq!(w.recv(0, a), vec![suspect(1), image_ok(1, 2, "100.02")]);
    assert_eq!(w.edges[0].edge.stats().gaps_repaired, 1);
    w.publish(p, 0, 3, 10003);
    assert_one_update(w.recv(0, a), 1, 3);
}

#[test]
fn a_malformed_update_costs_its_item_an_image_not_the_edge_its_connection() {
    let (mut w, p) = ready(1, 2);
    let a = w.subscriber_with(0, &[(1, "SYM0"), (2, "SYM1")]);
    assert_eq!(w.recv(0, a).len(), 2);
    // An update on the source's stream 1 (SYM0), next in sequence, whose field list
    // claims 5 fields and has none; then a good update of SYM1 (the source's stream 2).
    let mut m = Vec::new();
    let body: Vec<u8> = [1u32.to_be_bytes(), 2u32.to_be_bytes()]
        .concat()
        .into_iter()
        .chain([UpdateType::Quote.to_u8(), 0, 0, 1, 0, 5])
        .collect();
    m.push(MessageType::Update as u8);
    m.extend_from_slice(&(body.len() as u16).to_be_bytes());
    m.extend_from_slice(&body);
    let img = image(10002);
    quote_update(2, 2, &img).encode(&mut m).unwrap();
    from_source_raw(&mut w, 0, &m);
    let got = w.recv(0, a);
    assert!(got.contains(&update(2, 2, "100.02")), "{got:?}");
    assert!(got.contains(&suspect(1)), "{got:?}");
    assert!(got.contains(&image_ok(1, 1, "100.00")), "{got:?}");
    let stats = w.edges[0].edge.stats();
    assert_eq!((stats.bad_messages, stats.gaps_repaired), (1, 1));
    // The edge's connection to its core is still live: later data flows.
    w.publish(p, 0, 2, 10003);
    assert_one_update(w.recv(0, a), 1, 2);
}

#[test]
fn an_image_for_another_edge_is_passed_on_only_where_the_edge_is_not_in_step_with_it() {
    let (mut w, p) = ready(1, 1);
    let a = w.sym0_subscriber_past_update_2(p, 0);
    fn refresh(seq: u32, img: &[u8]) -> Message<'_> {
        let fields = FieldList::decode(img).unwrap();
        Message::Refresh(Refresh {
            solicited: true,
            ..Refresh::whole(1, seq, "FEED", "SYM0", fields)
        })
    }
    // In step (the edge has seq 2): another edge's image changes nothing here.
    let img = image(10002);
    from_source(&mut w, 0, &[refresh(2, &img)]);
    assert_eq!(w.recv(0, a), vec![]);
    // Not in step (a source whose core held updates back until it had the image): the
    // image is what this edge missed, and its subscribers get it.
    let img = image(10007);
    from_source(&mut w, 0, &[refresh(7, &img)]);
    assert_eq!(w.recv(0, a), vec![image_ok(1, 7, "100.07")]);
    assert_eq!(w.edges[0].edge.stats().gaps_repaired, 0);
}

#[test]
fn a_lost_source_turns_items_suspect_and_its_return_brings_them_back_without_a_gap() {
    let (mut w, p) = ready(1, 1);
    let a = w.sym0_subscriber_imaged(0);
    // The source stops; an update made meanwhile never reaches the edge.
    w.stop_source_for(Duration::from_millis(1200));
    let got = w.recv(0, a);
    let told_suspect = got.iter().filter(|&g| *g == suspect(1)).count();
    assert_eq!(
        told_suspect, 1,
        "told once that the item is suspect: {got:?}"
    );
    assert!(!got.iter().any(|g| matches!(g, Got::Update { .. })));
    w.src_core.on_bytes_received(p, w.now);
    let img = image(10777);
    let f = frame(&[quote_update(1, 2, &img)]);
    w.src_core.on_frame(p, &f, w.now);
    // Back: the edge asks again and gets an image with what it missed.
    w.run_source_for(Duration::from_millis(1500));
    let got = w.recv(0, a);
    let last_refresh = got.iter().rev().find(|g| matches!(g, Got::Refresh { .. }));
    assert_eq!(last_refresh, Some(&image_ok(1, 2, "107.77")), "{got:?}");
}

#[test]
fn an_edge_the_source_forgot_while_its_requests_were_lost_gets_its_items_again() {
    let (mut w, p) = ready(1, 2);
    let a = w.subscriber_with(0, &[(1, "SYM0"), (2, "SYM1")]);
    w.publish(p, 0, 2, 10100);
    assert!(w.recv(0, a).contains(&update(1, 2, "101.00")));
    // The source hears nothing from the edge for longer than its edge timeout: it
    // releases the edge's streams, while the edge still hears the source.
    w.requests_lost = true;
    w.advance(Duration::from_millis(3500));
    assert_eq!(
        w.source.stats().streams_open,
        0,
        "the streams were released"
    );
    w.publish(p, 0, 3, 10200);
    assert!(w
        .recv(0, a)
        .iter()
        .all(|g| !matches!(g, Got::Update { .. })));
    // Heard again: the edge is told, its subscribers learn their data is suspect, and
    // the items come back with an image holding what they missed, then updates.
    w.requests_lost = false;
    w.advance(Duration::from_millis(300));
    let got = w.recv(0, a);
    for sid in [1, 2] {
        let suspect_at = got.iter().position(|g| *g == suspect(sid));
        let image_at = got.iter().position(
            |g| matches!(g, Got::Refresh { sid: s, data: DataState::Ok, .. } if *s == sid),
        );
        assert!(
            suspect_at.is_some() && image_at.is_some() && suspect_at < image_at,
            "item {sid}: suspect, then an image: {got:?}"
        );
    }
    assert!(got.contains(&image_ok(1, 3, "102.00")));
    w.publish(p, 0, 4, 10300);
    assert_eq!(w.recv(0, a), vec![update(1, 4, "103.00")]);
}

#[test]
fn a_heartbeat_follows_the_last_data_message_so_that_its_loss_is_found_soon() {
    let (mut w, p) = ready(1, 1);
    w.subscriber_with(0, &[(1, "SYM0")]);
    let probes = w.source.stats().tail_probes;
    w.publish(p, 0, 2, 10100);
    let is_heartbeat = |m: &Vec<u8>| {
        matches!(
            wire::BackboneMessage::decode(m),
            Ok(wire::BackboneMessage::Heartbeat { .. })
        )
    };
    let probe = SourceConfig::default().tail_probe;
    assert!(w.source.poll_timeout().is_some_and(|t| t <= w.now + probe));
    // Not before its time...
    let mut q = Queue {
        q: &mut w.data,
        open: true,
    };
    w.source.pump(&mut w.src_core, &mut q, w.now + probe / 2);
    assert!(!w.data.iter().any(is_heartbeat), "too early");
    // ...then once, and not again while no data goes out.
    for _ in 0..3 {
        let mut q = Queue {
            q: &mut w.data,
            open: true,
        };
        w.source.pump(&mut w.src_core, &mut q, w.now + probe);
    }
    assert_eq!(w.data.iter().filter(|m| is_heartbeat(m)).count(), 1);
    assert_eq!(w.source.stats().tail_probes, probes + 1);
}

#[test]
fn a_backbone_that_takes_nothing_makes_the_source_conflate_never_queue_without_bound() {
    let (mut w, p) = ready(1, 1);
    let a = w.sym0_subscriber_imaged(0);
    w.open = false;
    for seq in 2..2000 {
        w.publish(p, 0, seq, 10000 + seq as i64);
    }
    let queued = w.src_core.pending_output(w.source.conn());
    assert!(queued < 1 << 20, "{queued} bytes queued for the backbone");
    let behind = |w: &World| {
        w.src_core
            .connection_reports()
            .iter()
            .any(|r| r.peer.contains("backbone") && r.behind)
    };
    assert!(behind(&w), "the core never saw the link as behind");
    w.open = true;
    w.settle();
    let got = w.recv(0, a);
    let last = got.last().cloned();
    assert!(
        matches!(&last, Some(Got::Update { sid: 1, bid: Some(b), .. }) if b == "119.99"),
        "the latest value arrives: {last:?} (of {} messages)",
        got.len()
    );
    // And the link is live again: the next update goes straight through.
    assert!(!behind(&w), "the source's link is still behind");
    w.publish(p, 0, 2000, 12000);
    assert!(
        matches!(
            &w.recv(0, a)[..],
            [Got::Update {
                sid: 1,
                seq: 2000,
                ..
            }]
        ),
        "the next update did not come through"
    );
}

#[test]
fn an_unknown_item_is_closed_at_the_edge_with_the_sources_reason() {
    let (mut w, _p) = ready(1, 1);
    let a = w.subscriber(0);
    w.request(0, a, 3, "NOPE");
    let got = w.recv(0, a);
    assert_eq!(
        got,
        vec![Got::Status {
            sid: 3,
            stream: StreamState::Closed,
            data: DataState::Suspect
        }]
    );
    assert_eq!(w.source.stats().streams_open, 0);
}

proptest! {
    #[test]
    fn junk_on_the_backbone_is_counted_and_ignored(junk in proptest::collection::vec(any::<u8>(), 0..200)) {
        let (mut w, _p) = ready(1, 1);
        w.edge_receives(0, 1, &junk);
        w.source.on_request(&mut w.src_core, &junk, w.now);
        // A junk data message for a known source with a valid header.
        from_source_raw(&mut w, 0, &junk);
    }

    #[test]
    fn backbone_messages_round_trip(source in any::<u64>(), stream in any::<u32>(), name in "[A-Z]{1,20}") {
        let msgs = [
            wire::BackboneMessage::Heartbeat { source, name: &name, directory_version: stream },
            wire::BackboneMessage::Opened { source, stream, service: &name, item: &name },
            wire::BackboneMessage::Subscribe { edge: source, source, service: &name, item: &name },
            wire::BackboneMessage::Unsubscribe { edge: source, source, stream },
            wire::BackboneMessage::DirectoryRequest { edge: source, source },
            wire::BackboneMessage::EdgeJoined { source, edge: u64::from(stream) },
            wire::BackboneMessage::EdgeHeartbeat { edge: source, name: &name },
            wire::BackboneMessage::Files { source, body: name.as_bytes() },
            wire::BackboneMessage::EdgeFiles { edge: source, body: name.as_bytes() },
            wire::BackboneMessage::Directory { source, version: stream, part: 0, parts: 1, services: vec![
                wire::ServiceInfo { name: &name, state: ServiceState::Up, interactive: true }
            ] },
        ];
        for m in msgs {
            let mut b = Vec::new();
            m.encode(&mut b).unwrap();
            let files = wire::BackboneMessage::decode_files(&b);
            prop_assert_eq!(wire::BackboneMessage::decode(&b).unwrap(), m.clone());
            // The files thread's messages are told apart without a decode.
            match m {
                wire::BackboneMessage::Files { body, .. } => prop_assert_eq!(files, Some((true, body))),
                wire::BackboneMessage::EdgeFiles { body, .. } => prop_assert_eq!(files, Some((false, body))),
                _ => prop_assert_eq!(files, None),
            }
        }
    }
}

#[test]
fn a_large_watchlist_is_imaged_as_the_backbone_takes_it_never_past_the_hard_bound() {
    // 20,000 items of about 100 bytes each: 2 MB of images, asked for by one edge at
    // once, while the backbone takes only a few messages per turn.
    let mut w = World::new(1);
    w.src_core.handle_timeout(w.now);
    let _p = w.publisher(20_000);
    w.advance(Duration::from_millis(500));
    let a = w.subscriber(0);
    for i in 0..20_000u32 {
        let f = frame(&[Message::Request(Request::streaming(
            i + 1,
            "FEED",
            &format!("SYM{i}"),
        ))]);
        w.edges[0].core.on_frame(a, &f, w.now);
    }
    let mut max_queued = 0;
    let mut refreshes = 0;
    let now = w.now;
    for _ in 0..5_000 {
        let e = &mut w.edges[0];
        let mut q = Queue {
            q: &mut w.requests,
            open: true,
        };
        e.edge.pump(&mut e.core, &mut q, now);
        for m in w.requests.drain(..) {
            w.source.on_request(&mut w.src_core, &m, now);
        }
        max_queued =
            max_queued.max(w.src_core.pending_output(w.source.conn()) + w.source.held_bytes());
        // A backbone that takes 20 messages per turn.
        let mut q = Queue {
            q: &mut w.data,
            open: true,
        };
        let mut limited = Limited {
            inner: &mut q,
            left: 20,
        };
        w.source.pump(&mut w.src_core, &mut limited, now);
        max_queued =
            max_queued.max(w.src_core.pending_output(w.source.conn()) + w.source.held_bytes());
        for m in w.data.drain(..) {
            e.edge.on_data(&mut e.core, 1, &m, now);
        }
        e.edge.flush(&mut e.core, now);
        refreshes += w
            .recv(0, a)
            .iter()
            .filter(|g| matches!(g, Got::Refresh { .. }))
            .count();
        if refreshes == 20_000 {
            break;
        }
    }
    assert_eq!(refreshes, 20_000);
    // The images are asked for as the backbone takes them: the request budget (256
    // KiB) plus what a frame in flight holds, not the whole watchlist (about 1 MB).
    assert!(
        max_queued < 512 * 1024,
        "{max_queued} bytes queued for the link (in the core and in the source)"
    );
    assert_eq!(w.source.stats().link_reconnects, 0);
}

struct Limited<'a, 'b> {
    inner: &'a mut Queue<'b>,
    left: usize,
}

impl Outbox for Limited<'_, '_> {
    fn offer(&mut self, msg: &[u8]) -> bool {
        if self.left == 0 {
            return false;
        }
        self.left -= 1;
        self.inner.offer(msg)
    }
}

/// An item asked of source A (Subscribe sent, Opened not back) moves to B when A's
/// directory says its service went down; A's Opened then comes. The edge answers it
/// with an Unsubscribe: A had opened a stream for this edge, and kept it (and sent its
/// data once the service was back) for as long as the edge ran.
#[test]
fn an_opened_from_a_source_the_item_left_before_it_answered_is_unsubscribed() {
    let now = Instant::now();
    let (mut core, mut edge) = sym0_moved_from_a_to_b(now);
    edge_hears(&mut edge, &mut core, opened_sym0(0xA, 7), now);
    edge_hears(&mut edge, &mut core, opened_sym0(0xB, 3), now);
    assert_eq!(edge_asks(&mut edge, &mut core, now), [unsubscribe(0xA, 7)]);
    // Once: a second Opened of A (for another edge) is not answered again.
    edge_hears(&mut edge, &mut core, opened_sym0(0xA, 7), now);
    assert_eq!(edge_asks(&mut edge, &mut core, now), []);
}

/// The item moves twice before any source answered (A, then B, then C): the Opened of
/// each source it left is turned down. The edge remembered only the last one it left,
/// and A kept its stream for as long as the edge ran.
#[test]
fn an_item_moved_twice_before_any_answer_turns_down_both_sources_it_left() {
    let now = Instant::now();
    let (mut core, mut edge) = sym0_moved_from_a_to_b(now);
    let beat = heartbeat(0xC, "c", 1);
    edge_hears(&mut edge, &mut core, beat, now);
    let up = feed_directory(0xC, 1, ServiceState::Up);
    edge_hears(&mut edge, &mut core, up, now);
    let down = feed_directory(0xB, 2, ServiceState::Down);
    edge_hears(&mut edge, &mut core, down, now);
    assert_eq!(edge_asks(&mut edge, &mut core, now), [subscribe_of(0xC)]);
    edge_hears(&mut edge, &mut core, opened_sym0(0xA, 7), now);
    edge_hears(&mut edge, &mut core, opened_sym0(0xB, 5), now);
    edge_hears(&mut edge, &mut core, opened_sym0(0xC, 3), now);
    assert_eq!(
        edge_asks(&mut edge, &mut core, now),
        [unsubscribe(0xA, 7), unsubscribe(0xB, 5)]
    );
}

/// An edge hearing sources A (0xA) and B (0xB), both with FEED up, whose core has a
/// subscriber of SYM0: asked of A, then of B once A's FEED went down (A not answered).
fn sym0_moved_from_a_to_b(now: Instant) -> (Node, Edge) {
    let (mut core, mut edge) = edge_in_core(now);
    for (id, name) in [(0xA, "a"), (0xB, "b")] {
        let beat = heartbeat(id, name, 1);
        edge_hears(&mut edge, &mut core, beat, now);
        let up = feed_directory(id, 1, ServiceState::Up);
        edge_hears(&mut edge, &mut core, up, now);
    }
    edge_asks(&mut edge, &mut core, now);
    let c = core.connect("subscriber", now);
    core.on_frame(c, &frame(&[login(ProtoRole::Subscriber)]), now);
    let request = Message::Request(Request::streaming(1, "FEED", "SYM0"));
    core.on_frame(c, &frame(&[request]), now);
    assert_eq!(edge_asks(&mut edge, &mut core, now), [subscribe_of(0xA)]);
    let down = feed_directory(0xA, 2, ServiceState::Down);
    edge_hears(&mut edge, &mut core, down, now);
    assert_eq!(edge_asks(&mut edge, &mut core, now), [subscribe_of(0xB)]);
    (core, edge)
}

/// `source`'s heartbeat, naming it `name`, at directory version `version`.
fn heartbeat(source: u64, name: &str, version: u32) -> crate::wire::BackboneMessage<'_> {
    crate::wire::BackboneMessage::Heartbeat {
        source,
        name,
        directory_version: version,
    }
}

/// The edge's Subscribe to `source` (of what it holds for it, as the tests' edges send).
fn subscribe_of(source: u64) -> crate::wire::BackboneMessage<'static> {
    crate::wire::BackboneMessage::Subscribe {
        edge: 0,
        source,
        service: "",
        item: "",
    }
}

/// `source`'s Opened of FEED/SYM0 as its `stream`.
fn opened_sym0(source: u64, stream: u32) -> crate::wire::BackboneMessage<'static> {
    crate::wire::BackboneMessage::Opened {
        source,
        stream,
        service: "FEED",
        item: "SYM0",
    }
}

/// The edge's Unsubscribe of `source`'s `stream`.
fn unsubscribe(source: u64, stream: u32) -> crate::wire::BackboneMessage<'static> {
    crate::wire::BackboneMessage::Unsubscribe {
        edge: 0,
        source,
        stream,
    }
}

/// A node that is both: its own publisher has FEED, and so does another source B; the
/// core takes FEED from its publisher and refuses it from the edge. When the publisher
/// leaves, FEED comes from the backbone (it stayed down although B had it up).
#[test]
fn a_both_node_takes_a_service_from_the_backbone_when_its_own_publisher_leaves() {
    use crate::wire::{BackboneMessage, ServiceInfo};
    let now = Instant::now();
    let mut core = Node::new(core_config(true), now);
    let mut edge = Edge::start(&mut core, EdgeConfig::default(), 0xED, now);
    let p = core.connect("publisher", now);
    let feed = Message::Directory(Directory::one_service("FEED", 1));
    core.on_frame(p, &frame(&[login(ProtoRole::Publisher), feed]), now);
    let send =
        |edge: &mut Edge, core: &mut Node, m: BackboneMessage<'_>| edge_hears(edge, core, m, now);
    let beat = || heartbeat(0xB, "b", 1);
    send(&mut edge, &mut core, beat());
    let directory = BackboneMessage::Directory {
        source: 0xB,
        version: 1,
        part: 0,
        parts: 1,
        services: vec![ServiceInfo {
            name: "FEED",
            state: ServiceState::Up,
            interactive: false,
        }],
    };
    send(&mut edge, &mut core, directory);
    assert!(core.publishes(p, "FEED"));
    core.on_disconnect(p, now);
    let mut t = now;
    for _ in 0..5 {
        t += Duration::from_millis(150);
        send(&mut edge, &mut core, beat());
        edge.handle_timeout(&mut core, t);
    }
    assert!(core.publishes(edge.conn(), "FEED"), "{:?}", core.services());
    assert!(core.services().contains(&("FEED".to_string(), true)));
}

#[test]
fn a_directory_heard_from_a_lost_source_before_its_heartbeat_does_not_keep_its_services_down() {
    let (mut w, _p) = ready(1, 1);
    let a = w.sym0_subscriber_imaged(0);
    w.stop_source_for(Duration::from_millis(1200));
    assert_eq!(w.edges[0].edge.stats().sources_live, 0);
    // The source comes back; the first thing the edge hears from it is its directory
    // (sent for another edge's request), before any heartbeat.
    let mut m = Vec::new();
    feed_directory(0x5005, w.source.directory_version(), ServiceState::Up)
        .encode(&mut m)
        .unwrap();
    w.edge_receives(0, 1, &m);
    w.run_source_for(Duration::from_millis(1500));
    assert_eq!(w.edges[0].edge.stats().sources_live, 1);
    let got = w.recv(0, a);
    assert!(
        has_ok_image(&got, 1),
        "the item is imaged again once its source is back: {got:?}"
    );
}

#[test]
fn a_subscriber_joining_a_cache_off_edge_while_its_item_is_re_imaged_leaves_the_others_re_imaged_too(
) {
    let (mut w, p, edge) = ready_with_a_cache_off_edge();
    let a = w.sym0_subscriber_past_update_2(p, edge);
    // A gap (update 3 never came), and the edge's request for an image is held up.
    w.requests_lost = true;
    let img = image(10004);
    from_source(&mut w, edge, &[quote_update(1, 4, &img)]);
    assert_eq!(w.recv(edge, a), vec![suspect(1)]);
    // Another subscriber asks for the item meanwhile.
    let b = w.subscriber(edge);
    w.request(edge, b, 2, "SYM0");
    w.requests_lost = false;
    w.advance(Duration::from_millis(1500));
    let got = w.recv(edge, a);
    assert!(
        has_ok_image(&got, 1),
        "the subscriber told its item was suspect gets the new image: {got:?}"
    );
    assert!(
        w.recv(edge, b)
            .iter()
            .any(|g| matches!(g, Got::Refresh { sid: 2, .. })),
        "the new subscriber got its image"
    );
}

#[test]
fn an_item_closed_before_its_source_answered_is_not_left_open_at_the_source() {
    let (mut w, _p) = ready(1, 1);
    let a = w.subscriber(0);
    let f = frame(&[Message::Request(Request::streaming(1, "FEED", "SYM0"))]);
    w.edges[0].core.on_frame(a, &f, w.now);
    // The edge's subscribe is on its way to the source...
    let held = w.hold_requests(0);
    assert!(!held.is_empty(), "the edge asked the source");
    // ...when the subscriber closes the item.
    w.close(0, a, 1);
    w.deliver_requests(held);
    w.advance(Duration::from_millis(500));
    assert_eq!(
        w.source.stats().streams_open,
        0,
        "the source still sends an item no one at the edge wants"
    );
    assert_eq!(w.edges[0].edge.stats().items, 0);
}

/// A second source, heard by edge 0 only (`World` has one real source): its heartbeat,
/// and its directory (at `version`, FEED in `state`) with it.
fn second_source(w: &mut World, version: u32, state: ServiceState) {
    let mut hb = Vec::new();
    heartbeat(0xB0B, "standby", version)
        .encode(&mut hb)
        .unwrap();
    let mut dir = Vec::new();
    wire::BackboneMessage::Directory {
        source: 0xB0B,
        version,
        part: 0,
        parts: 1,
        services: vec![wire::ServiceInfo {
            name: "FEED",
            state,
            interactive: true,
        }],
    }
    .encode(&mut dir)
    .unwrap();
    w.edge_receives(0, 2, &hb);
    w.edge_receives(0, 2, &dir);
    w.flush_edge(0);
}

#[test]
fn an_item_back_at_a_source_it_once_left_keeps_its_stream_when_that_source_answers_another_edge() {
    let (mut w, p) = ready(2, 1);
    let a = w.subscriber_with(0, &[(1, "SYM0")]);
    second_source(&mut w, 1, ServiceState::Up);
    // The first source pauses: the item moves to the standby, which answers.
    w.source_up = false;
    for _ in 0..24 {
        second_source(&mut w, 1, ServiceState::Up);
        w.src_core.on_bytes_received(p, w.now);
        w.advance(Duration::from_millis(50));
    }
    assert_eq!(w.edges[0].edge.stats().sources_live, 1);
    let mut opened = Vec::new();
    wire::BackboneMessage::Opened {
        source: 0xB0B,
        stream: 77,
        service: "FEED",
        item: "SYM0",
    }
    .encode(&mut opened)
    .unwrap();
    w.edge_receives(0, 2, &opened);
    // The first source is back; then the standby's FEED goes down: the item moves back.
    w.source_up = true;
    for _ in 0..4 {
        second_source(&mut w, 1, ServiceState::Up);
        w.src_core.on_bytes_received(p, w.now);
        w.advance(Duration::from_millis(50));
    }
    for _ in 0..10 {
        second_source(&mut w, 2, ServiceState::Down);
        w.src_core.on_bytes_received(p, w.now);
        w.advance(Duration::from_millis(50));
    }
    w.publish(p, 0, 2, 10002);
    let got = w.recv(0, a);
    assert!(
        has_update(&got, 1, 2),
        "the item is live at the first source again: {got:?}"
    );
    // Another edge takes the item, then lets it go.
    let b = w.subscriber(1);
    w.request(1, b, 1, "SYM0");
    w.close(1, b, 1);
    w.publish(p, 0, 3, 10003);
    let got = w.recv(0, a);
    assert!(
        has_update(&got, 1, 3),
        "edge 0's subscriber still gets the item's updates: {got:?}"
    );
}

#[test]
fn an_item_requested_and_closed_in_one_turn_is_not_asked_of_the_source() {
    let (mut w, _p) = ready(1, 1);
    let a = w.subscriber(0);
    let f = frame(&[
        Message::Request(Request::streaming(1, "FEED", "SYM0")),
        Message::Close { stream_id: 1 },
    ]);
    w.edges[0].core.on_frame(a, &f, w.now);
    w.settle();
    w.advance(Duration::from_millis(2500));
    assert_eq!(
        w.edges[0].edge.stats().items,
        0,
        "the edge still has the item"
    );
    assert_eq!(
        w.source.stats().streams_open,
        0,
        "the source still sends an item no one at the edge wants"
    );
}

/// A directory in parts, out of order and with a part repeated: the edge takes the
/// services once every part is there, and not before (a repeated part counts once).
#[test]
fn a_directory_in_parts_is_taken_once_every_part_is_there() {
    use crate::wire::{BackboneMessage, ServiceInfo};
    let now = Instant::now();
    let (mut core, mut edge) = edge_in_core(now);
    let send =
        |edge: &mut Edge, core: &mut Node, m: BackboneMessage<'_>| edge_hears(edge, core, m, now);
    send(&mut edge, &mut core, heartbeat(0xB, "b", 1));
    let names = ["P0", "P1", "P2"];
    let part = |part: u16| BackboneMessage::Directory {
        source: 0xB,
        version: 1,
        part,
        parts: 3,
        services: vec![ServiceInfo {
            name: names[part as usize],
            state: ServiceState::Up,
            interactive: false,
        }],
    };
    let publishes = |core: &Node, edge: &Edge| names.map(|n| core.publishes(edge.conn(), n));
    for p in [2, 0, 2] {
        send(&mut edge, &mut core, part(p));
        assert_eq!(publishes(&core, &edge), [false; 3], "after part {p}");
    }
    send(&mut edge, &mut core, part(1));
    assert_eq!(publishes(&core, &edge), [true; 3], "{:?}", core.services());
}

/// A core with an edge in it, as a node has them.
fn edge_in_core(now: Instant) -> (Node, Edge) {
    let mut core = Node::new(core_config(true), now);
    let edge = Edge::start(&mut core, EdgeConfig::default(), 0xED, now);
    (core, edge)
}

/// `m` comes to the edge from the backbone.
fn edge_hears(edge: &mut Edge, core: &mut Node, m: crate::wire::BackboneMessage<'_>, now: Instant) {
    let mut b = Vec::new();
    m.encode(&mut b).unwrap();
    edge.on_data(core, 1, &b, now);
    edge.flush(core, now);
}

/// The Subscribes and Unsubscribes the edge sends its sources now (their edge, service
/// and item left out).
fn edge_asks(
    edge: &mut Edge,
    core: &mut Node,
    now: Instant,
) -> Vec<crate::wire::BackboneMessage<'static>> {
    use crate::wire::BackboneMessage;
    let mut out = VecDeque::new();
    edge.pump(
        core,
        &mut Queue {
            q: &mut out,
            open: true,
        },
        now,
    );
    out.drain(..)
        .filter_map(|m| match BackboneMessage::decode(&m).unwrap() {
            BackboneMessage::Subscribe { source, .. } => Some(BackboneMessage::Subscribe {
                edge: 0,
                source,
                service: "",
                item: "",
            }),
            BackboneMessage::Unsubscribe { source, stream, .. } => {
                Some(BackboneMessage::Unsubscribe {
                    edge: 0,
                    source,
                    stream,
                })
            }
            _ => None,
        })
        .collect()
}

/// An item the core closed just before the transport was rebuilt: its Unsubscribe,
/// not sent yet, is sent once the source is heard again (it was lost with the queue,
/// and the source went on sending the item to this edge for as long as it ran).
#[test]
fn an_unsubscribe_not_sent_when_the_transport_is_rebuilt_is_sent_when_the_source_is_back() {
    use crate::wire::BackboneMessage;
    let now = Instant::now();
    let (mut core, mut edge) = edge_in_core(now);
    let a = 0xA;
    let beat = heartbeat(a, "a", 1);
    edge_hears(&mut edge, &mut core, beat.clone(), now);
    let dir = feed_directory(a, 1, ServiceState::Up);
    edge_hears(&mut edge, &mut core, dir, now);
    let c = core.connect("subscriber", now);
    core.on_frame(c, &frame(&[login(ProtoRole::Subscriber)]), now);
    let request = Message::Request(Request::streaming(1, "FEED", "SYM0"));
    core.on_frame(c, &frame(&[request]), now);
    assert_eq!(edge_asks(&mut edge, &mut core, now).len(), 1, "subscribed");
    let opened = BackboneMessage::Opened {
        source: a,
        stream: 7,
        service: "FEED",
        item: "SYM0",
    };
    edge_hears(&mut edge, &mut core, opened, now);
    // The subscriber leaves; the edge's Unsubscribe waits (the backbone takes nothing),
    // and the transport is rebuilt.
    core.on_disconnect(c, now);
    let mut refused = VecDeque::new();
    let mut full = Queue {
        q: &mut refused,
        open: false,
    };
    edge.pump(&mut core, &mut full, now);
    edge.all_sources_lost(&mut core, now);
    assert_eq!(
        edge_asks(&mut edge, &mut core, now),
        [],
        "no source to tell"
    );
    edge_hears(&mut edge, &mut core, beat, now);
    let told = BackboneMessage::Unsubscribe {
        edge: 0,
        source: a,
        stream: 7,
    };
    assert_eq!(edge_asks(&mut edge, &mut core, now), [told]);
}

/// A service no source on the backbone lists any more (its source removed it) is let
/// go of by the edge: down, and no longer the edge's, so that the node removes it after
/// its retention time. While no source is heard at all, the edge keeps its services.
#[test]
fn a_service_no_source_lists_any_more_is_let_go_of_by_the_edge() {
    use crate::wire::{BackboneMessage, ServiceInfo};
    let now = Instant::now();
    let (mut core, mut edge) = edge_in_core(now);
    let beat = |version| heartbeat(0xA, "a", version);
    let dir = |version, names: &[&'static str]| BackboneMessage::Directory {
        source: 0xA,
        version,
        part: 0,
        parts: 1,
        services: names
            .iter()
            .map(|&name| ServiceInfo {
                name,
                state: ServiceState::Up,
                interactive: true,
            })
            .collect(),
    };
    edge_hears(&mut edge, &mut core, beat(1), now);
    edge_hears(&mut edge, &mut core, dir(1, &["FEED", "GONE"]), now);
    let edges = |core: &Node, edge: &Edge| ["FEED", "GONE"].map(|n| core.publishes(edge.conn(), n));
    assert_eq!(edges(&core, &edge), [true, true]);
    // The source is lost: its services stay the edge's, down.
    edge.all_sources_lost(&mut core, now);
    assert_eq!(edges(&core, &edge), [true, true]);
    // Heard again, without GONE: let go of.
    edge_hears(&mut edge, &mut core, beat(2), now);
    edge_hears(&mut edge, &mut core, dir(2, &["FEED"]), now);
    assert_eq!(edges(&core, &edge), [true, false]);
    let mut services = core.services();
    services.sort();
    assert_eq!(
        services,
        [("FEED".to_string(), true), ("GONE".to_string(), false)]
    );
    // Listed again: the edge's again.
    edge_hears(&mut edge, &mut core, beat(3), now);
    edge_hears(&mut edge, &mut core, dir(3, &["FEED", "GONE"]), now);
    assert_eq!(edges(&core, &edge), [true, true]);
}

/// An item waiting at A for its image when A's service goes down, and no source has
/// it up, has no source: A's stream is let go of. When B has the service, the item
/// moves there, and A's data on that stream reaches it no more (it took A's updates
/// as B's, found holes in them and was re-imaged over and over, and A sent the stream
/// for as long as the edge ran).
#[test]
fn an_item_left_with_no_source_lets_go_of_its_stream_at_the_old_one() {
    use crate::wire::BackboneMessage;
    let t0 = Instant::now();
    let (mut core, mut edge) = edge_in_core(t0);
    let dir = feed_directory;
    let beat = |source: u64, version: u32| {
        heartbeat(source, if source == 0xA { "a" } else { "b" }, version)
    };
    let (a, b) = (0xA, 0xB);
    edge_hears(&mut edge, &mut core, beat(a, 1), t0);
    edge_hears(&mut edge, &mut core, dir(a, 1, ServiceState::Up), t0);
    let c = core.connect("subscriber", t0);
    core.on_frame(c, &frame(&[login(ProtoRole::Subscriber)]), t0);
    let request = Message::Request(Request::streaming(1, "FEED", "SYM0"));
    core.on_frame(c, &frame(&[request]), t0);
    assert_eq!(edge_asks(&mut edge, &mut core, t0).len(), 1, "subscribed");
    let opened = |source, stream| BackboneMessage::Opened {
        source,
        stream,
        service: "FEED",
        item: "SYM0",
    };
    edge_hears(&mut edge, &mut core, opened(a, 7), t0);
    // A's FEED goes down before its image came; A stays live.
    edge_hears(&mut edge, &mut core, beat(a, 2), t0);
    edge_hears(&mut edge, &mut core, dir(a, 2, ServiceState::Down), t0);
    let mut asks = Vec::new();
    for ms in [400, 800, 1200] {
        let now = t0 + Duration::from_millis(ms);
        edge_hears(&mut edge, &mut core, beat(a, 2), now);
        edge.handle_timeout(&mut core, now);
        asks.extend(edge_asks(&mut edge, &mut core, now));
    }
    // B has it up: the item moves there and B answers.
    let now = t0 + Duration::from_millis(1300);
    edge_hears(&mut edge, &mut core, beat(b, 1), now);
    edge_hears(&mut edge, &mut core, dir(b, 1, ServiceState::Up), now);
    asks.extend(edge_asks(&mut edge, &mut core, now));
    edge_hears(&mut edge, &mut core, opened(b, 3), now);
    let img = image(10000);
    let data = |source: u64, m: Message<'_>| {
        let mut d = Vec::new();
        wire::data_header(&mut d, source);
        m.encode(&mut d).unwrap();
        d
    };
    let mut refresh = Refresh::whole(3, 5, "FEED", "SYM0", FieldList::decode(&img).unwrap());
    refresh.solicited = true;
    edge.on_data(&mut core, 1, &data(b, Message::Refresh(refresh)), now);
    edge.flush(&mut core, now);
    assert!(
        asks.contains(&BackboneMessage::Unsubscribe {
            edge: 0,
            source: a,
            stream: 7
        }),
        "A was not told the edge no longer takes its stream: {asks:?}"
    );
    // A's update on its old stream is not the item's.
    let update = Update::new(7, 40, UpdateType::Quote, FieldList::decode(&img).unwrap());
    edge.on_data(&mut core, 1, &data(a, Message::Update(update)), now);
    edge.flush(&mut core, now);
    assert_eq!(edge.stats().gaps_repaired, 0, "A's data reached the item");
}

/// Source `source`'s whole directory (version `version`, one part): FEED, interactive,
/// in `state`.
fn feed_directory(
    source: u64,
    version: u32,
    state: ServiceState,
) -> crate::wire::BackboneMessage<'static> {
    crate::wire::BackboneMessage::Directory {
        source,
        version,
        part: 0,
        parts: 1,
        services: vec![crate::wire::ServiceInfo {
            name: "FEED",
            state,
            interactive: true,
        }],
    }
}

/// An interactive publisher of SILENT on the source's core: it reads its requests and
/// answers none of them (unless a test answers for it).
fn silent_publisher(w: &mut World) -> ConnId {
    let p = w.src_core.connect("silent publisher", w.now);
    let dir = Message::Directory(Directory {
        services: vec![tickwire_proto::ServiceEntry {
            name: "SILENT",
            state: ServiceState::Up,
            interactive: true,
            item_count: 0,
        }],
    });
    w.src_core
        .on_frame(p, &frame(&[login(ProtoRole::Publisher), dir]), w.now);
    p
}

/// Edge 0's subscriber `a` asks for SILENT's items `names` (streams from 100 on), and
/// the world settles; when it asked.
fn ask_for_silent_items(w: &mut World, a: ConnId, names: &[impl AsRef<str>]) -> Instant {
    let asks: Vec<Message<'_>> = names
        .iter()
        .enumerate()
        .map(|(i, n)| Message::Request(Request::streaming(100 + i as u32, "SILENT", n.as_ref())))
        .collect();
    let asked_at = w.now;
    w.edges[0].core.on_frame(a, &frame(&asks), w.now);
    w.settle();
    asked_at
}

/// The requests `p` has been sent since the last call: (stream id, item).
fn requests_read(w: &mut World, p: ConnId) -> Vec<(u32, String)> {
    let mut got = Vec::new();
    take_output(&mut w.src_core, p, |m| {
        if let Message::Request(r) = m {
            got.push((r.stream_id, r.name.to_string()));
        }
    });
    got
}

/// More items of a publisher that never answers than the source may have unanswered:
/// they took every request the source could make, and no edge got a new item of any
/// other service again. A service holds a share of the requests at most, and a
/// request unanswered for `ask_patience` stops counting (its answer still goes out).
#[test]
fn a_publisher_that_never_answers_holds_back_its_own_items_not_the_other_services() {
    silent_publisher_holds_back_only_its_own_items(SourceConfig::default());
}

/// The same with the operator's settings: a share of 2 defers a silent service's third
/// ask (another service's still goes at once), and the deferred go after 1 s, not 5.
#[test]
fn the_share_of_one_service_and_the_patience_are_settings() {
    silent_publisher_holds_back_only_its_own_items(SourceConfig {
        max_asked: 8,
        max_asked_per_service: 2,
        ask_patience: Duration::from_secs(1),
        ..SourceConfig::default()
    });
}

fn silent_publisher_holds_back_only_its_own_items(cfg: SourceConfig) {
    let (share, patience) = (cfg.max_asked_per_service, cfg.ask_patience);
    let many = cfg.max_asked as u32 + 500;
    let (mut w, _p) = ready_with(1, 1, cfg);
    let silent = silent_publisher(&mut w);
    w.advance(Duration::from_millis(300));
    let a = w.subscriber(0);
    let names: Vec<String> = (0..many).map(|i| format!("S{i}")).collect();
    let asked_at = ask_for_silent_items(&mut w, a, &names);
    let first = requests_read(&mut w, silent);
    assert!(!first.is_empty(), "the silent publisher was asked");
    // Another service's item comes at once.
    w.request(0, a, 1, "SYM0");
    let got = w.recv(0, a);
    assert!(
        has_ok_image(&got, 1),
        "FEED's item waited behind {} unanswered requests: {got:?}",
        first.len()
    );
    assert_eq!(first.len(), share, "SILENT's share");
    // Unanswered for long enough, they stop counting: more of SILENT's are asked.
    let mut later = Vec::new();
    let end = w.now + patience + Duration::from_millis(200);
    while w.now < end && later.is_empty() {
        w.advance(Duration::from_millis(50));
        later = requests_read(&mut w, silent);
    }
    assert_eq!(later.len(), share, "the next share of SILENT's");
    assert!(
        w.now >= asked_at + patience,
        "asked again before the patience ran out"
    );
    // A stale request is still open: its late answer reaches the subscriber.
    let (stream, name) = first[0].clone();
    let img = image(4200);
    let answer = Refresh::whole(stream, 1, "SILENT", &name, FieldList::decode(&img).unwrap());
    w.src_core
        .on_frame(silent, &frame(&[Message::Refresh(answer)]), w.now);
    w.settle();
    let got = w.recv(0, a);
    assert!(
        got.iter().any(|g| matches!(
            g,
            Got::Refresh { sid: 100, bid, .. } if bid.as_deref() == Some("42.00")
        )),
        "{got:?}"
    );
}

/// `max_asked` bounds the requests of every service together: a silent service whose
/// share is the whole budget holds another service's new item until its requests stop
/// counting, `ask_patience` later.
#[test]
fn the_whole_budget_of_asks_is_a_setting() {
    let patience = Duration::from_secs(1);
    let (mut w, _p) = ready_with(
        1,
        1,
        SourceConfig {
            max_asked: 3,
            max_asked_per_service: 3,
            ask_patience: patience,
            ..SourceConfig::default()
        },
    );
    let silent = silent_publisher(&mut w);
    w.advance(Duration::from_millis(300));
    let a = w.subscriber(0);
    let asked_at = ask_for_silent_items(&mut w, a, &["S0", "S1", "S2"]);
    assert_eq!(requests_read(&mut w, silent).len(), 3);
    let refreshed = |got: &[Got]| got.iter().any(|g| matches!(g, Got::Refresh { sid: 1, .. }));
    w.request(0, a, 1, "SYM0");
    let got = w.recv(0, a);
    assert!(!refreshed(&got), "the budget was full: {got:?}");
    let end = w.now + patience + Duration::from_millis(200);
    let mut got = Vec::new();
    while w.now < end && !refreshed(&got) {
        w.advance(Duration::from_millis(50));
        got = w.recv(0, a);
    }
    assert!(
        refreshed(&got),
        "FEED's item once SILENT's stopped counting: {got:?}"
    );
    assert!(
        w.now >= asked_at + patience,
        "asked before the patience ran out"
    );
}

/// As above, and the core asks for the item again (its service went down and came back
/// up) before either source answered: A's Opened is still turned down (the
/// edge forgot it had left A, and A kept the stream for as long as the edge ran).
#[test]
fn an_item_asked_again_by_the_core_still_turns_down_the_source_it_left() {
    let now = Instant::now();
    let (mut core, mut edge) = sym0_moved_from_a_to_b(now);
    // B's FEED goes down and up: the core asks for the item again.
    let down = feed_directory(0xB, 2, ServiceState::Down);
    edge_hears(&mut edge, &mut core, down, now);
    assert_eq!(edge_asks(&mut edge, &mut core, now), []);
    let up = feed_directory(0xB, 3, ServiceState::Up);
    edge_hears(&mut edge, &mut core, up, now);
    assert_eq!(
        edge_asks(&mut edge, &mut core, now),
        [subscribe_of(0xB)],
        "the core asked again"
    );
    edge_hears(&mut edge, &mut core, opened_sym0(0xA, 7), now);
    edge_hears(&mut edge, &mut core, opened_sym0(0xB, 3), now);
    assert_eq!(edge_asks(&mut edge, &mut core, now), [unsubscribe(0xA, 7)]);
}

/// The source's data stops reaching an edge while the edge's requests still reach the
/// source (a one-way partition), for longer than the edge remembers a lost source (60
/// liveness times), and the edge's subscriber lets its item go meanwhile. The source
/// ends the stream: it kept hearing the edge, so it kept the edge's interest, and the
/// edge, which was to tell it on its return, had forgotten it by then.
#[test]
fn a_stream_an_edge_let_go_of_while_it_could_not_hear_its_source_ends_at_the_source() {
    let (mut w, _p) = ready(1, 1);
    let a = w.subscriber_with(0, &[(1, "SYM0")]);
    assert_eq!(w.source.stats().streams_open, 1);
    w.edges[0].connected = false;
    let liveness = EdgeConfig::default().liveness;
    let live = |w: &mut World| {
        w.advance(Duration::from_millis(50));
        w.edges[0].edge.stats().sources_live
    };
    assert!(
        (0..100).any(|_| live(&mut w) == 0),
        "the edge lost the source"
    );
    w.close(0, a, 1);
    w.advance(liveness * 61);
    assert_eq!(
        w.source.stats().edges,
        1,
        "the source heard the edge throughout"
    );
    w.edges[0].connected = true;
    assert!(
        (0..100).any(|_| live(&mut w) == 1),
        "the edge hears the source"
    );
    w.advance(liveness);
    assert_eq!(
        w.source.stats().streams_open,
        0,
        "the source still sends an item no one at the edge wants"
    );
}
