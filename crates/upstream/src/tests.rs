//! Two real cores joined by a relay, in memory, on a fake clock: the upstream node's
//! core with a publisher, the downstream node's core with local subscribers. Bytes
//! move between the relay's connection and the upstream core by hand.

use crate::{NodePath, Relay, RelayConfig, TW_PATH};
use std::time::{Duration, Instant};
use tickwire_client::ClientError;
use tickwire_core::{ConnId, CoreConfig, Node};
use tickwire_proto::frame::FrameReader;
use tickwire_proto::{
    code, encode_field_list, DataState, Directory, FieldList, Login, Message, MessageIter, Refresh,
    Request, Role, ServiceEntry, ServiceState, StreamState, Update, UpdateType, Value,
};

/// What a peer received, reduced to what the tests look at.
#[derive(Debug, Clone, PartialEq)]
enum Got {
    Refresh {
        sid: u32,
        seq: u32,
        solicited: bool,
        data: DataState,
        bid: i64,
    },
    Update {
        sid: u32,
        seq: u32,
        count: u16,
        bid: i64,
    },
    Status {
        sid: u32,
        stream: StreamState,
        data: DataState,
        code: u16,
    },
    Request {
        sid: u32,
        name: String,
    },
    Close {
        sid: u32,
    },
    Directory(Vec<(String, ServiceState)>),
    Other,
}

/// Item A's first image (bid 100, as the tree publishes it), solicited on `sid`.
fn image_of_a(sid: u32, data: DataState) -> Got {
    Got::Refresh {
        sid,
        seq: 1,
        solicited: true,
        data,
        bid: 100,
    }
}

/// Asserts that one of the messages in `got` matches the pattern; the failure shows
/// them all, after the message when one is given.
macro_rules! assert_any {
    ($got:expr, $pat:pat) => {
        assert_any!($got, $pat, "")
    };
    ($got:expr, $pat:pat, $what:literal) => {{
        let got = &$got;
        assert!(got.iter().any(|g| matches!(g, $pat)), "{}{got:?}", $what);
    }};
}

/// An update on `sid`, standing for `count` updates, bid `bid`.
fn update(sid: u32, seq: u32, count: u16, bid: i64) -> Got {
    Got::Update {
        sid,
        seq,
        count,
        bid,
    }
}

/// Whether `g` is a status telling `sid`'s subscriber its data is suspect, the stream
/// open (for whatever reason).
fn is_suspect(g: &Got, sid: u32) -> bool {
    matches!(g, Got::Status { sid: s, stream: StreamState::Open, data: DataState::Suspect, .. } if *s == sid)
}

/// The status a stream gets when the node loses its upstream: open, suspect.
fn connection_lost(sid: u32) -> Got {
    Got::Status {
        sid,
        stream: StreamState::Open,
        data: DataState::Suspect,
        code: code::CONNECTION_LOST,
    }
}

fn bid_of(f: FieldList<'_>) -> i64 {
    match f.get(22) {
        Some(Value::Real(r)) => r.mantissa,
        _ => -1,
    }
}

fn decode(bytes: &[u8]) -> Vec<Got> {
    let mut reader = FrameReader::new(1 << 24);
    reader.extend(bytes);
    let mut got = Vec::new();
    while let Some(frame) = reader.next_frame().unwrap() {
        for raw in MessageIter::new(frame) {
            got.push(match raw.unwrap().message {
                Message::Refresh(r) => Got::Refresh {
                    sid: r.stream_id,
                    seq: r.seq,
                    solicited: r.solicited,
                    data: r.state.data,
                    bid: bid_of(r.fields),
                },
                Message::Update(u) => Got::Update {
                    sid: u.stream_id,
                    seq: u.seq,
                    count: u.conflation_count,
                    bid: bid_of(u.fields),
                },
                Message::Status(s) => Got::Status {
                    sid: s.stream_id,
                    stream: s.state.stream,
                    data: s.state.data,
                    code: s.state.code,
                },
                Message::Request(r) => Got::Request {
                    sid: r.stream_id,
                    name: r.name.to_string(),
                },
                Message::Close { stream_id } => Got::Close { sid: stream_id },
                Message::Directory(d) => Got::Directory(
                    d.services
                        .iter()
                        .map(|e| (e.name.to_string(), e.state))
                        .collect(),
                ),
                _ => Got::Other,
            });
        }
    }
    got
}

fn login(core: &mut Node, role: Role, application: &str, now: Instant) -> ConnId {
    let c = core.connect("test", now);
    let mut frame = Vec::new();
    Message::Login(Login::new(role, application, "u", ""))
        .encode(&mut frame)
        .unwrap();
    core.on_frame(c, &frame, now);
    c
}

/// A publisher logged in to `core` as `application`, having announced the one service
/// `(name, item count)`.
fn publisher_of(core: &mut Node, application: &str, service: (&str, u32), now: Instant) -> ConnId {
    let c = login(core, Role::Publisher, application, now);
    let (name, item_count) = service;
    let directory = Message::Directory(Directory::one_service(name, item_count));
    send(core, c, &[directory], now);
    c
}

fn send(core: &mut Node, c: ConnId, msgs: &[Message<'_>], now: Instant) {
    let mut frame = Vec::new();
    for m in msgs {
        m.encode(&mut frame).unwrap();
    }
    core.on_frame(c, &frame, now);
}

fn recv(core: &mut Node, c: ConnId) -> Vec<Got> {
    let Some(out) = core.output(c) else {
        return vec![];
    };
    let bytes = out.sealed_bytes().to_vec();
    out.consume(bytes.len());
    decode(&bytes)
}

fn quote(bid: i64) -> Vec<u8> {
    encode_field_list([(22, Value::Real(tickwire_proto::Real::new(bid, -2)))])
}

struct Tree {
    now: Instant,
    up: Node,
    publisher: ConnId,
    /// Requests the upstream's publisher got: name -> its stream there.
    down: Node,
    relay: Relay,
    /// The relay's connection at the upstream core.
    link: Option<ConnId>,
    to_up: FrameReader,
    /// Messages the upstream publisher received.
    publisher_got: Vec<Got>,
}

const NODE_ID: u64 = 0xd0;

impl Tree {
    fn new(services: Option<&[&str]>) -> Tree {
        Tree::with_cache(services, true)
    }

    /// As `new`, with the downstream node's cache on or off.
    fn with_cache(services: Option<&[&str]>, down_cache: bool) -> Tree {
        let now = Instant::now();
        let mut up = Node::new(CoreConfig::default(), now);
        let publisher = login(&mut up, Role::Publisher, "feed", now);
        let entries = ["FEED", "OTHER"].map(|name| ServiceEntry {
            name,
            state: ServiceState::Up,
            interactive: false,
            item_count: 0,
        });
        send(
            &mut up,
            publisher,
            &[Message::Directory(Directory {
                services: entries.to_vec(),
            })],
            now,
        );
        let mut down = Node::new(
            CoreConfig {
                cache: down_cache,
                ..core_config()
            },
            now,
        );
        let cfg = RelayConfig {
            services: services.map(|s| s.iter().map(|s| s.to_string()).collect()),
            ..link_config()
        };
        let relay = Relay::start(&mut down, cfg, now);
        let mut t = Tree {
            now,
            up,
            publisher,
            down,
            relay,
            link: None,
            to_up: FrameReader::new(1 << 24),
            publisher_got: Vec::new(),
        };
        for (i, name) in ["A", "B", "C"].iter().enumerate() {
            t.publish_image(name, i as u32 + 1, 100 * (i as i64 + 1));
        }
        t
    }

    /// The upstream publisher sends `msg`.
    fn publish(&mut self, msg: Message<'_>) {
        send(&mut self.up, self.publisher, &[msg], self.now);
    }

    fn publish_image(&mut self, name: &str, sid: u32, bid: i64) {
        let f = quote(bid);
        let fields = FieldList::from_trusted(&f);
        self.publish(Message::Refresh(Refresh::whole(
            sid, 1, "FEED", name, fields,
        )));
    }

    fn publish_update(&mut self, sid: u32, seq: u32, bid: i64) {
        let f = quote(bid);
        let fields = FieldList::from_trusted(&f);
        self.publish(Message::Update(Update::new(
            sid,
            seq,
            UpdateType::Quote,
            fields,
        )));
    }

    /// The link's socket opens to the upstream.
    fn connect(&mut self) {
        assert!(self.relay.wants_connect(self.now));
        self.relay.connecting(self.now);
        self.link = Some(self.up.connect("downstream node", self.now));
        self.to_up = FrameReader::new(1 << 24);
    }

    /// The link connects and the two nodes exchange everything they have to say.
    fn link_up(&mut self) {
        self.connect();
        self.settle().unwrap();
    }

    fn lose_link(&mut self) {
        if let Some(l) = self.link.take() {
            self.up.on_disconnect(l, self.now);
        }
        self.relay.lost(
            &mut self.down,
            ClientError::Disconnected("test".into()),
            self.now,
        );
    }

    /// One event-loop turn of the downstream node, repeated until nothing moves.
    fn settle(&mut self) -> Result<(), ClientError> {
        for _ in 0..20 {
            if !self.turn()? {
                return Ok(());
            }
        }
        Ok(())
    }

    /// One event-loop turn of the downstream node; whether any bytes moved.
    fn turn(&mut self) -> Result<bool, ClientError> {
        self.relay.pump(&mut self.down, self.now);
        let mut moved = false;
        if let (Some(link), Some(c)) = (self.link, self.relay.connection()) {
            let out = c.transmit().to_vec();
            c.sent(out.len(), self.now);
            if !out.is_empty() {
                moved = true;
                self.to_up.extend(&out);
                while let Some(f) = self.to_up.next_frame().unwrap() {
                    let f = f.to_vec();
                    self.up.on_frame(link, &f, self.now);
                }
            }
            if let Some(w) = self.up.output(link) {
                let bytes = w.sealed_bytes().to_vec();
                w.consume(bytes.len());
                if !bytes.is_empty() {
                    moved = true;
                    self.relay.connection().unwrap().receive(&bytes, self.now);
                }
            }
        }
        let got = recv(&mut self.up, self.publisher);
        self.publisher_got.extend(got);
        self.relay.poll(&mut self.down, self.now)?;
        Ok(moved)
    }

    /// The downstream node's services and their state, by name.
    fn down_services(&self) -> Vec<(String, bool)> {
        let mut s = self.down.services();
        s.sort();
        s
    }

    /// A fresh downstream core whose services go 1 s after their publisher, and its link.
    fn down_with_short_retention(&mut self) {
        self.replace_down(short_retention(NODE_ID), link_config());
    }

    /// A fresh downstream core, and its link taking `max_services` at most.
    fn down_taking_at_most(&mut self, max_services: usize) {
        let link = RelayConfig {
            max_services,
            ..link_config()
        };
        self.replace_down(core_config(), link);
    }

    /// A fresh downstream core made with `core`, and its link with `link`.
    fn replace_down(&mut self, core: CoreConfig, link: RelayConfig) {
        self.down = Node::new(core, self.now);
        self.relay = Relay::start(&mut self.down, link, self.now);
    }

    /// The link is lost, and comes back 100 ms later to a next upstream that has FEED
    /// only.
    fn relink_to_an_upstream_of_feed_only(&mut self) {
        self.lose_link();
        let mut up = Node::new(CoreConfig::default(), self.now);
        let publisher = publisher_of(&mut up, "feed", ("FEED", 0), self.now);
        (self.up, self.publisher) = (up, publisher);
        self.now += Duration::from_millis(100);
        self.link_up();
    }

    /// A linked tree whose downstream node has its cache off, with two subscribers:
    /// s1 has item A open on stream 7, its ok image taken; s2 has nothing open yet.
    fn cache_off_with_s1_imaged() -> (Tree, ConnId, ConnId) {
        let mut t = Tree::with_cache(None, false);
        t.link_up();
        let (s1, s2) = (t.subscriber(), t.subscriber());
        t.request(s1, 7, "A");
        t.settle().unwrap();
        assert!(
            recv(&mut t.down, s1).contains(&image_of_a(7, DataState::Ok)),
            "s1's image"
        );
        (t, s1, s2)
    }

    fn subscriber(&mut self) -> ConnId {
        login(&mut self.down, Role::Subscriber, "app", self.now)
    }

    /// A local subscriber with FEED's items open on these streams, their images taken.
    fn watching(&mut self, streams: &[(u32, &str)]) -> ConnId {
        let s = self.subscriber();
        for &(sid, name) in streams {
            self.request(s, sid, name);
        }
        self.settle().unwrap();
        recv(&mut self.down, s);
        s
    }

    fn request(&mut self, c: ConnId, sid: u32, name: &str) {
        send(
            &mut self.down,
            c,
            &[Message::Request(Request::streaming(sid, "FEED", name))],
            self.now,
        );
    }

    fn requests_upstream(&self) -> usize {
        self.publisher_got
            .iter()
            .filter(|g| matches!(g, Got::Request { .. }))
            .count()
    }
}

/// The downstream node's core config: its id, the rest as default.
fn core_config() -> CoreConfig {
    CoreConfig {
        node_id: NODE_ID,
        ..CoreConfig::default()
    }
}

/// The downstream node's link config: the node's id and name, the rest as default.
fn link_config() -> RelayConfig {
    RelayConfig {
        node_id: NODE_ID,
        node_name: "down".into(),
        ..RelayConfig::default()
    }
}

/// A core config whose services go 1 s after their publisher left.
fn short_retention(node_id: u64) -> CoreConfig {
    CoreConfig {
        node_id,
        limits: tickwire_core::Limits {
            service_retention: Duration::from_secs(1),
            ..Default::default()
        },
        ..CoreConfig::default()
    }
}

/// The upstream's own figures service, `TICKWIRE`, with item `NODE` saying `path` (its
/// `TW_PATH`) when given.
fn upstream_figures(t: &mut Tree, path: Option<&str>) {
    let figures = publisher_of(&mut t.up, "figures", ("TICKWIRE", 1), t.now);
    let Some(path) = path else { return };
    let f = encode_field_list([(TW_PATH, Value::Utf8(path))]);
    send(
        &mut t.up,
        figures,
        &[Message::Refresh(Refresh::whole(
            1,
            1,
            "TICKWIRE",
            "NODE",
            FieldList::from_trusted(&f),
        ))],
        t.now,
    );
}

#[test]
fn an_item_is_asked_upstream_once_for_every_local_subscriber_and_closed_with_the_last() {
    let mut t = Tree::new(None);
    t.link_up();
    let (s1, s2) = (t.subscriber(), t.subscriber());
    let dir = recv(&mut t.down, s1);
    assert!(
        dir.iter().any(|g| matches!(g, Got::Directory(d)
            if d.contains(&("FEED".into(), ServiceState::Up)))),
        "the upstream's services are the node's: {dir:?}"
    );
    t.request(s1, 7, "A");
    t.request(s2, 9, "A");
    t.settle().unwrap();
    let (g1, g2) = (recv(&mut t.down, s1), recv(&mut t.down, s2));
    assert!(g1.contains(&image_of_a(7, DataState::Ok)), "{g1:?}");
    assert!(g2.contains(&image_of_a(9, DataState::Ok)), "{g2:?}");
    // The upstream's core was asked once, by the link (its publisher not at all: the
    // upstream's cache answered).
    assert_eq!(t.relay.stats().requests_sent, 1);
    t.publish_update(1, 2, 101);
    t.settle().unwrap();
    assert_eq!(recv(&mut t.down, s1), [update(7, 2, 1, 101)]);
    assert_eq!(recv(&mut t.down, s2), [update(9, 2, 1, 101)]);

    // The first close keeps the upstream stream; the last closes it.
    send(&mut t.down, s1, &[Message::Close { stream_id: 7 }], t.now);
    t.settle().unwrap();
    assert_eq!(t.relay.stats().items, 1);
    send(&mut t.down, s2, &[Message::Close { stream_id: 9 }], t.now);
    t.settle().unwrap();
    assert_eq!(t.relay.stats().items, 0);
    let upstream_items = t.up.item_count();
    t.publish_update(1, 3, 102);
    t.settle().unwrap();
    assert!(recv(&mut t.down, s1).is_empty() && recv(&mut t.down, s2).is_empty());
    assert_eq!(
        upstream_items,
        t.up.item_count(),
        "the upstream keeps its own cache"
    );
    assert_eq!(t.requests_upstream(), 0);
}

/// With its cache off, the downstream node's core asks the link for an image again for
/// every subscriber that joins an item already streaming. An update sent while that
/// image is on its way must still reach the subscribers in step, or they must be
/// re-imaged: never seq 1 then 3.
#[test]
fn a_subscriber_joining_at_a_cache_off_node_costs_the_ones_in_step_no_update() {
    let (mut t, s1, s2) = Tree::cache_off_with_s1_imaged();
    // s2 joins: the core asks the link, which asks upstream (not sent yet)...
    t.request(s2, 9, "A");
    t.relay.pump(&mut t.down, t.now);
    // ...while update 2 leaves the upstream.
    t.publish_update(1, 2, 101);
    t.settle().unwrap();
    t.publish_update(1, 3, 102);
    t.settle().unwrap();
    let got = recv(&mut t.down, s1);
    let mut seq = 1;
    for g in &got {
        match g {
            Got::Update { seq: s, .. } => {
                assert_eq!(*s, seq + 1, "a gap at the subscriber in step: {got:?}");
                seq = *s;
            }
            Got::Refresh { seq: s, .. } => seq = *s,
            _ => {}
        }
    }
    assert_eq!(seq, 3, "{got:?}");
    assert_s2_imaged(&mut t, s2);
}

#[test]
fn conflation_counts_and_statuses_pass_through() {
    let mut t = Tree::new(None);
    t.link_up();
    let s = t.watching(&[(3, "A")]);
    // An update that already stands for several (conflated upstream) keeps its count.
    let f = quote(150);
    t.publish(Message::Update(Update {
        stream_id: 1,
        seq: 6,
        update_type: UpdateType::Quote,
        do_not_conflate: false,
        conflation_count: 5,
        fields: FieldList::from_trusted(&f),
    }));
    t.settle().unwrap();
    assert_eq!(recv(&mut t.down, s), [update(3, 6, 5, 150)]);
    // The publisher leaves: its service goes down upstream, and here.
    t.up.on_disconnect(t.publisher, t.now);
    t.settle().unwrap();
    let got = recv(&mut t.down, s);
    assert!(got.iter().any(|g| is_suspect(g, 3)), "{got:?}");
}

#[test]
fn a_lost_upstream_makes_items_suspect_and_the_reconnect_reimages_them() {
    let mut t = Tree::new(None);
    t.link_up();
    let s = t.watching(&[(3, "A"), (4, "B")]);

    t.lose_link();
    let got = recv(&mut t.down, s);
    for sid in [3, 4] {
        assert!(got.contains(&connection_lost(sid)), "{got:?}");
    }
    // While the upstream is away, a request for an item the node has is answered
    // from its cache, suspect; one for an item it has not is told so at once.
    t.request(s, 5, "A");
    t.request(s, 6, "C");
    t.relay.pump(&mut t.down, t.now);
    let got = recv(&mut t.down, s);
    assert!(got.contains(&image_of_a(5, DataState::Suspect)), "{got:?}");
    assert!(got.contains(&connection_lost(6)), "{got:?}");

    // Meanwhile the item moved on upstream.
    t.publish_update(1, 2, 111);
    t.now += Duration::from_millis(100);
    t.link_up();
    let got = recv(&mut t.down, s);
    // Each stream gets the new image as an unsolicited refresh, ok again; nothing
    // before it is ok data.
    for (sid, bid) in [(3, 111), (4, 200), (5, 111), (6, 300)] {
        let at = got
            .iter()
            .position(|g| matches!(g, Got::Refresh { sid: s, data: DataState::Ok, bid: b, .. } if *s == sid && *b == bid))
            .unwrap_or_else(|| panic!("no ok image for {sid}: {got:?}"));
        assert!(!got[..at]
            .iter()
            .any(|g| matches!(g, Got::Update { sid: s, .. } if *s == sid)));
    }
    assert_any!(
        got,
        Got::Refresh {
            sid: 3,
            solicited: false,
            ..
        }
    );
    assert!(t.relay.stats().reimages >= 2);
}

#[test]
fn only_the_chosen_services_are_taken_and_never_the_upstream_figures_service() {
    let mut t = Tree::new(Some(&["OTHER"]));
    // The upstream has its own figures service too.
    upstream_figures(&mut t, None);
    t.link_up();
    let services = t.down.services();
    assert_eq!(services, [("OTHER".to_string(), true)], "{services:?}");
}

#[test]
fn an_upstream_announcing_more_services_than_the_link_takes_has_the_rest_left_out() {
    let mut t = Tree::new(None);
    // A fresh downstream core, with a link taking one service at most.
    t.down_taking_at_most(1);
    t.link_up();
    // The upstream has FEED and OTHER: one is taken, the other left out and counted.
    let services = t.down.services();
    assert_eq!(services.len(), 1, "{services:?}");
    assert_eq!(t.relay.stats().services_left_out, 1);
}

#[test]
fn a_chain_above_that_holds_this_node_is_a_loop_and_the_link_leaves() {
    let mut t = Tree::new(None);
    let path = NodePath::default()
        .below(0xa, "a")
        .below(NODE_ID, "down")
        .below(0xb, "up")
        .to_string();
    upstream_figures(&mut t, Some(&path));
    t.connect();
    let err = t.settle().unwrap_err();
    assert!(
        matches!(&err, ClientError::Rejected { reason, .. } if reason.contains("loop")),
        "{err}"
    );
    assert_eq!(t.relay.stats().loops_found, 1);
}

#[test]
fn the_chain_above_is_learned_and_logins_from_it_are_refused_by_the_core() {
    let mut t = Tree::new(None);
    let path = NodePath::default().below(0xa, "top").below(0xb, "up");
    upstream_figures(&mut t, Some(&path.to_string()));
    t.link_up();
    assert_eq!(t.relay.above(), &path);
    t.down.set_upstream_chain(path.0.clone());
    // "top", two levels up, logs in to this node as a downstream: refused.
    let c = login(
        &mut t.down,
        Role::Subscriber,
        "tickwire-node/000000000000000a/top",
        t.now,
    );
    let got = recv(&mut t.down, c);
    assert!(
        matches!(
            &got[..],
            [Got::Status {
                sid: 0,
                code: code::LOGIN_REJECTED,
                ..
            }]
        ),
        "{got:?}"
    );
    // Any other node is welcome.
    let c = login(
        &mut t.down,
        Role::Subscriber,
        "tickwire-node/000000000000000c/leaf",
        t.now,
    );
    assert!(recv(&mut t.down, c)
        .iter()
        .any(|g| matches!(g, Got::Directory(_))));
}

#[test]
fn services_the_next_upstream_lacks_are_down_here() {
    let mut t = Tree::new(None);
    t.link_up();
    assert_eq!(
        t.down_services(),
        [("FEED".to_string(), true), ("OTHER".to_string(), true)]
    );
    t.relink_to_an_upstream_of_feed_only();
    assert_eq!(
        t.down_services(),
        [("FEED".to_string(), true), ("OTHER".to_string(), false)]
    );
}

/// A cache-off node asks the link again for an item it has when a subscriber joins; if
/// the link drops before that image comes, the image after the reconnect is a re-image
/// for every subscriber, even when the item has not moved meanwhile.
#[test]
fn a_link_lost_while_a_cache_off_node_asked_again_re_images_every_subscriber() {
    let (mut t, s1, s2) = Tree::cache_off_with_s1_imaged();
    // s2 joins: the core asks the link again; the link drops before the answer.
    t.request(s2, 9, "A");
    t.relay.pump(&mut t.down, t.now);
    t.lose_link();
    assert!(
        recv(&mut t.down, s1).contains(&connection_lost(7)),
        "s1 is told its item is suspect"
    );
    t.now += Duration::from_millis(100);
    t.link_up();
    both_imaged(&mut t, s1, s2);
}

#[test]
fn an_item_requested_and_closed_in_one_turn_is_not_left_open_upstream() {
    let mut t = Tree::new(None);
    t.link_up();
    let s = t.subscriber();
    send(
        &mut t.down,
        s,
        &[
            Message::Request(Request::streaming(5, "FEED", "A")),
            Message::Close { stream_id: 5 },
        ],
        t.now,
    );
    t.settle().unwrap();
    assert_eq!(t.relay.stats().items, 0, "the link still has the item");
}

/// As above, with the subscriber joining while the link is down.
#[test]
fn a_subscriber_joining_a_cache_off_node_while_its_link_is_down_leaves_every_subscriber_re_imaged()
{
    let (mut t, s1, s2) = Tree::cache_off_with_s1_imaged();
    t.lose_link();
    recv(&mut t.down, s1);
    // s2 joins while the link is down: the core asks the link again.
    t.request(s2, 9, "A");
    t.relay.pump(&mut t.down, t.now);
    t.now += Duration::from_millis(100);
    t.link_up();
    both_imaged(&mut t, s1, s2);
}

/// s2 got its image of A on stream 9.
fn assert_s2_imaged(t: &mut Tree, s2: ConnId) {
    assert!(
        recv(&mut t.down, s2)
            .iter()
            .any(|g| matches!(g, Got::Refresh { sid: 9, .. })),
        "s2's image"
    );
}

/// s1 (on stream 7) is imaged again, ok, and s2 (on stream 9) gets its image.
fn both_imaged(t: &mut Tree, s1: ConnId, s2: ConnId) {
    let got = recv(&mut t.down, s1);
    assert_any!(
        got,
        Got::Refresh {
            sid: 7,
            data: DataState::Ok,
            ..
        },
        "s1 is imaged again, ok: "
    );
    assert_s2_imaged(t, s2);
}

/// A service the upstream node removed (its publisher gone past its retention time)
/// is let go of here: down at once, and removed after this node's own retention time,
/// here and so below. It was kept down here for as long as the link lasted.
#[test]
fn a_service_the_upstream_removes_goes_here_too_after_this_nodes_retention() {
    let mut t = Tree::new(None);
    // Upstream: FEED from one publisher, GONE from another.
    let mut up = Node::new(short_retention(0), t.now);
    let feed = publisher_of(&mut up, "feed", ("FEED", 0), t.now);
    let gone = publisher_of(&mut up, "gone", ("GONE", 0), t.now);
    (t.up, t.publisher) = (up, feed);
    t.down_with_short_retention();
    t.link_up();
    let has = |t: &Tree| t.down_services();
    let both = |gone_up| [("FEED".to_string(), true), ("GONE".to_string(), gone_up)];
    assert_eq!(has(&t), both(true));
    assert!(t.down.publishes(t.relay.conn(), "GONE"));
    // GONE's publisher leaves: down there and here, and still the link's.
    t.up.on_disconnect(gone, t.now);
    t.settle().unwrap();
    assert_eq!(has(&t), both(false));
    assert!(t.down.publishes(t.relay.conn(), "GONE"));
    // Past the upstream's retention, it removes GONE: the link lets go of it here.
    t.now += Duration::from_millis(1500);
    t.up.handle_timeout(t.now);
    t.settle().unwrap();
    assert_eq!(has(&t), both(false));
    assert!(!t.down.publishes(t.relay.conn(), "GONE"), "let go of");
    // Past this node's retention, it is removed here too.
    t.now += Duration::from_millis(1500);
    t.down.handle_timeout(t.now);
    assert_eq!(has(&t), [("FEED".to_string(), true)]);
}

/// A cache-off node asks the link again for an item when a subscriber joins just after
/// the link is back, before the item's re-image came: the image the new stream brings
/// is a re-image for the subscribers made suspect by the loss, even when the item has
/// not moved meanwhile (its sequence number is the one they had).
#[test]
fn a_subscriber_joining_a_cache_off_node_just_after_its_link_is_back_leaves_every_subscriber_re_imaged(
) {
    let (mut t, s1, s2) = Tree::cache_off_with_s1_imaged();
    t.lose_link();
    recv(&mut t.down, s1);
    t.now += Duration::from_millis(100);
    // Logged in again (one turn: the login up, the welcome and directory down); the
    // link's request for A is on its way up.
    t.connect();
    t.turn().unwrap();
    assert!(t.relay.is_connected());
    // s2 joins now: the core asks the link again.
    t.request(s2, 9, "A");
    t.relay.pump(&mut t.down, t.now);
    t.settle().unwrap();
    both_imaged(&mut t, s1, s2);
}

/// An upstream node restarted without a service (or the next one, lacking it) has
/// removed it as far as this node can tell: it is let go of as one the upstream
/// removes, and leaves after this node's retention time. It was kept down for good.
#[test]
fn a_service_the_next_upstream_lacks_goes_here_after_this_nodes_retention() {
    let mut t = Tree::new(None);
    t.down_with_short_retention();
    t.link_up();
    t.relink_to_an_upstream_of_feed_only();
    assert_eq!(
        t.down_services(),
        [("FEED".to_string(), true), ("OTHER".to_string(), false)]
    );
    assert!(!t.down.publishes(t.relay.conn(), "OTHER"), "let go of");
    t.now += Duration::from_millis(1500);
    t.down.handle_timeout(t.now);
    assert_eq!(t.down.services(), [("FEED".to_string(), true)]);
    // Should the upstream announce it again, it is the link's again.
    publisher_of(&mut t.up, "other", ("OTHER", 0), t.now);
    t.settle().unwrap();
    assert!(t.down.publishes(t.relay.conn(), "OTHER"));
}

/// A service the link does not take (`services`) is no service left out for the limit,
/// even once the link has as many as it takes.
#[test]
fn services_not_chosen_are_not_counted_as_left_out_past_the_limit() {
    let mut t = Tree::new(None);
    let link = RelayConfig {
        services: Some(["FEED".to_string()].into()),
        max_services: 1,
        ..link_config()
    };
    t.replace_down(core_config(), link);
    t.link_up();
    assert_eq!(t.down.services(), [("FEED".to_string(), true)]);
    assert_eq!(t.relay.stats().services_left_out, 0);
}

/// An upstream with more services than one frame holds: its directory at a login comes
/// in several frames, which the link may read in several polls. The services of the
/// later frames are not taken for removed at the first (they went down, and their
/// subscribers were told the upstream had removed them, until the next poll).
#[test]
fn a_first_directory_read_in_parts_takes_nothing_it_lists_later_for_removed() {
    let mut t = Tree::new(None);
    let names: Vec<String> = (0..2_500).map(|i| format!("S{i:0>99}")).collect();
    for part in names.chunks(400) {
        let services = part
            .iter()
            .map(|name| ServiceEntry {
                name,
                state: ServiceState::Up,
                interactive: false,
                item_count: 0,
            })
            .collect();
        let directory = Message::Directory(Directory { services });
        send(&mut t.up, t.publisher, &[directory], t.now);
    }
    // A link that takes them all.
    t.down_taking_at_most(10_000);
    t.link_up();
    let last = (names.last().unwrap().clone(), true);
    assert!(t.down_services().contains(&last));

    // The link is lost, and connects again to the same upstream.
    t.lose_link();
    t.now += Duration::from_millis(100);
    t.connect();
    let link = t.link.unwrap();
    t.relay.pump(&mut t.down, t.now);
    let login = t.relay.connection().unwrap().transmit().to_vec();
    t.relay.connection().unwrap().sent(login.len(), t.now);
    t.to_up.extend(&login);
    while let Some(f) = t.to_up.next_frame().unwrap() {
        let f = f.to_vec();
        t.up.on_frame(link, &f, t.now);
    }
    let w = t.up.output(link).unwrap();
    let bytes = w.sealed_bytes().to_vec();
    w.consume(bytes.len());
    // Its first frame (the Welcome and the directory's first messages), read alone.
    let first = 4 + u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
    let later = &bytes[first..];
    assert!(
        later.windows(100).any(|w| w == last.0.as_bytes()),
        "the last service comes in a later frame"
    );
    t.relay
        .connection()
        .unwrap()
        .receive(&bytes[..first], t.now);
    t.relay.poll(&mut t.down, t.now).unwrap();
    assert!(
        t.down_services().contains(&last),
        "a service of the directory's later frames is still up after its first"
    );
    t.relay.connection().unwrap().receive(later, t.now);
    t.settle().unwrap();
    let services = t.down_services();
    assert!(services.contains(&last));
    assert!(services.iter().all(|(_, up)| *up), "every service is up");
}
