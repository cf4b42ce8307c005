//! The node driven in memory on a fake clock: peers are byte buffers, time is an Instant
//! the test moves by hand.

use super::*;
use tickwire_proto::frame::FrameReader;
use tickwire_proto::{
    encode_field_list, DataState, Directory, FieldList, Login, Message, MessageIter, NakCode, Real,
    Refresh, Request, Role, ServiceEntry, ServiceState, State, Status, StreamState, Update,
    UpdateType, Value, View,
};

/// Asserts that one of the messages in `got` matches `pattern`; a failure shows them all.
macro_rules! assert_any {
    ($got:expr, $pattern:pat) => {{
        let got = &$got;
        assert!(got.iter().any(|m| matches!(m, $pattern)), "{got:?}");
    }};
}

#[derive(Debug, Clone, PartialEq)]
enum Got {
    Welcome {
        heartbeat_ms: u32,
        max_streams: u32,
        max_output_bytes: u32,
    },
    Directory(Vec<(String, bool)>),
    /// A Directory whose entries all say "removed".
    Removed(Vec<String>),
    Request {
        sid: u32,
        service: String,
        name: String,
    },
    Refresh {
        sid: u32,
        seq: u32,
        stream: StreamState,
        data: DataState,
        solicited: bool,
        fields: Vec<(i16, String)>,
    },
    Update {
        sid: u32,
        seq: u32,
        fields: Vec<(i16, String)>,
    },
    /// An update standing for several (conflated), or a do-not-conflate one.
    Merged {
        sid: u32,
        seq: u32,
        count: u16,
        do_not_conflate: bool,
        fields: Vec<(i16, String)>,
    },
    Status {
        sid: u32,
        stream: StreamState,
        data: DataState,
        code: u16,
        text: String,
    },
    Close {
        sid: u32,
    },
    Ping,
    Pong,
    Login,
    Post {
        sid: u32,
        post_id: u32,
        ack: bool,
        redelivered: bool,
        service: String,
        name: String,
        fields: Vec<(i16, String)>,
    },
    Ack {
        sid: u32,
        post_id: u32,
        nak: Option<NakCode>,
        text: String,
    },
    Replay {
        sid: u32,
    },
    Files(Vec<u8>),
}

fn fields_of(f: FieldList<'_>) -> Vec<(i16, String)> {
    f.iter().map(|(id, v)| (id, v.to_string())).collect()
}

fn own(m: &Message<'_>) -> Got {
    match m {
        Message::Welcome(w) => Got::Welcome {
            heartbeat_ms: w.heartbeat_ms,
            max_streams: w.max_streams,
            max_output_bytes: w.max_output_bytes,
        },
        Message::Directory(d) if d.services.iter().all(|s| s.state == ServiceState::Removed) => {
            Got::Removed(d.services.iter().map(|s| s.name.to_string()).collect())
        }
        Message::Directory(d) => Got::Directory(
            d.services
                .iter()
                .map(|s| (s.name.to_string(), s.state == ServiceState::Up))
                .collect(),
        ),
        Message::Request(r) => Got::Request {
            sid: r.stream_id,
            service: r.service.into(),
            name: r.name.into(),
        },
        Message::Refresh(r) => Got::Refresh {
            sid: r.stream_id,
            seq: r.seq,
            stream: r.state.stream,
            data: r.state.data,
            solicited: r.solicited,
            fields: fields_of(r.fields),
        },
        Message::Update(u) if u.conflation_count != 1 || u.do_not_conflate => Got::Merged {
            sid: u.stream_id,
            seq: u.seq,
            count: u.conflation_count,
            do_not_conflate: u.do_not_conflate,
            fields: fields_of(u.fields),
        },
        Message::Update(u) => Got::Update {
            sid: u.stream_id,
            seq: u.seq,
            fields: fields_of(u.fields),
        },
        Message::Status(s) => Got::Status {
            sid: s.stream_id,
            stream: s.state.stream,
            data: s.state.data,
            code: s.state.code,
            text: s.state.text.into(),
        },
        Message::Close { stream_id } => Got::Close { sid: *stream_id },
        Message::Ping(_) => Got::Ping,
        Message::Pong(_) => Got::Pong,
        Message::Login(_) => Got::Login,
        Message::Post(p) => Got::Post {
            sid: p.stream_id,
            post_id: p.post_id,
            ack: p.ack,
            redelivered: p.redelivered,
            service: p.service.into(),
            name: p.name.into(),
            fields: fields_of(p.fields),
        },
        Message::Replay(r) => Got::Replay { sid: r.stream_id },
        Message::Files(body) => Got::Files(body.to_vec()),
        Message::Ack(a) => Got::Ack {
            sid: a.stream_id,
            post_id: a.post_id,
            nak: a.nak,
            text: a.text.into(),
        },
    }
}

struct Harness {
    node: Node,
    now: Instant,
    /// Bytes each connection has read so far, not yet a whole frame.
    partial: FxHashMap<ConnId, Vec<u8>>,
}

impl Harness {
    fn new(cache: bool) -> Self {
        let cfg = CoreConfig {
            cache,
            limits: Limits {
                heartbeat: Duration::from_secs(1),
                max_streams_per_connection: 3,
                ..Limits::default()
            },
            ..CoreConfig::default()
        };
        Harness::with_config(cfg)
    }

    /// A node with the default configuration but for `limits`.
    fn with_limits(limits: Limits) -> Self {
        Harness::with_config(CoreConfig {
            limits,
            ..CoreConfig::default()
        })
    }

    fn with_config(cfg: CoreConfig) -> Self {
        let now = Instant::now();
        Harness {
            node: Node::new(cfg, now),
            now,
            partial: FxHashMap::default(),
        }
    }

    /// A slow reader: takes at most `max` bytes of what the node queued for `c`, as a
    /// socket would, then tells the node (which may queue conflated updates).
    fn read_some(&mut self, c: ConnId, max: usize) -> Vec<Got> {
        let Some(out) = self.node.output(c) else {
            return vec![];
        };
        let bytes = out.sealed_bytes();
        let n = bytes.len().min(max);
        let taken = bytes[..n].to_vec();
        out.consume(n);
        self.node.on_output_written(c);
        let buf = self.partial.entry(c).or_default();
        buf.extend_from_slice(&taken);
        let mut got = Vec::new();
        let mut at = 0;
        while buf.len() - at >= 4 {
            let len = u32::from_be_bytes(buf[at..at + 4].try_into().unwrap()) as usize;
            if buf.len() - at - 4 < len {
                break;
            }
            for m in MessageIter::new(&buf[at + 4..at + 4 + len]) {
                got.push(own(&m.unwrap().message));
            }
            at += 4 + len;
        }
        buf.drain(..at);
        got
    }

    /// Reads everything, including conflated updates queued as the output drains.
    fn read_all(&mut self, c: ConnId) -> Vec<Got> {
        let mut got = Vec::new();
        for _ in 0..100_000 {
            let more = self.read_some(c, 16 * 1024);
            if more.is_empty() && self.node.pending_output(c) == 0 {
                break;
            }
            got.extend(more);
        }
        got
    }

    fn send(&mut self, c: ConnId, msgs: &[Message<'_>]) {
        let mut payload = Vec::new();
        for m in msgs {
            m.encode(&mut payload).unwrap();
        }
        self.node.on_frame(c, &payload, self.now);
    }

    /// Everything the node queued for `c` since the last call.
    fn recv(&mut self, c: ConnId) -> Vec<Got> {
        let Some(out) = self.node.output(c) else {
            return vec![];
        };
        let bytes = out.sealed_bytes().to_vec();
        out.consume(bytes.len());
        let mut reader = FrameReader::new(1 << 20);
        reader.extend(&bytes);
        let mut got = Vec::new();
        while let Some(frame) = reader.next_frame().unwrap() {
            for m in MessageIter::new(frame) {
                got.push(own(&m.unwrap().message));
            }
        }
        got
    }

    /// Connects a peer and sends it `login`; what the node answers is left unread.
    fn connect_with(&mut self, login: Login<'_>) -> ConnId {
        let c = self.node.connect("test", self.now);
        self.send(c, &[Message::Login(login)]);
        c
    }

    fn login(&mut self, role: Role) -> ConnId {
        let c = self.connect_with(Login {
            version_max: 3,
            ..client_login(role, "u", "")
        });
        let got = self.recv(c);
        assert!(matches!(got[0], Got::Welcome { .. }), "{got:?}");
        c
    }

    fn publisher(&mut self, service: &str, interactive: bool) -> ConnId {
        let p = self.login(Role::Publisher);
        self.send(
            p,
            &[Message::Directory(Directory {
                services: vec![ServiceEntry {
                    name: service,
                    state: ServiceState::Up,
                    interactive,
                    item_count: 0,
                }],
            })],
        );
        p
    }

    fn request(
        &mut self,
        c: ConnId,
        sid: u32,
        service: &str,
        name: &str,
        streaming: bool,
        view: Option<&[i16]>,
    ) {
        self.send(
            c,
            &[Message::Request(Request {
                stream_id: sid,
                streaming,
                service,
                name,
                view: view.map(View::Fids),
                refresh: true,
            })],
        );
    }

    /// A request without a refresh on `sid` (for FEED's `name`): the open stream's view
    /// changes in place.
    fn change_view(&mut self, c: ConnId, sid: u32, name: &str, view: Option<&[i16]>) {
        self.send(
            c,
            &[Message::Request(Request {
                stream_id: sid,
                streaming: true,
                service: "FEED",
                name,
                view: view.map(View::Fids),
                refresh: false,
            })],
        );
    }

    /// Moves the clock to the core's next deadline and handles it, as a driver that ticks
    /// only when told does.
    fn tick_when_due(&mut self) {
        self.now = self
            .node
            .poll_timeout()
            .expect("the core always has a deadline");
        self.node.handle_timeout(self.now);
    }

    /// A non-interactive publisher of FEED that has sent `img` as the image of `name` on
    /// its stream `psid`.
    fn publisher_of(&mut self, psid: u32, name: &str, img: &[u8]) -> ConnId {
        let p = self.publisher("FEED", false);
        self.send(p, &[refresh(psid, 1, name, img, false)]);
        p
    }

    /// A new subscriber that asked for a stream of FEED's `name` on its stream `sid`; what
    /// the node sent it is left unread.
    fn subscriber_to(&mut self, sid: u32, name: &str) -> ConnId {
        let sub = self.login(Role::Subscriber);
        self.request(sub, sid, "FEED", name, true, None);
        sub
    }

    /// As [`Harness::subscriber_to`], with the image it was sent read and dropped.
    fn watcher_of(&mut self, sid: u32, name: &str) -> ConnId {
        let sub = self.subscriber_to(sid, name);
        self.recv(sub);
        sub
    }
}

/// The login of a protocol-1 client called "test", asking for the node's slow-consumer
/// policy.
fn client_login<'a>(role: Role, user: &'a str, token: &'a str) -> Login<'a> {
    Login::new(role, "test", user, token)
}

/// A directory announcing non-interactive services, each up (`true`) or down.
fn directory<'a>(services: impl IntoIterator<Item = (&'a str, bool)>) -> Message<'a> {
    let state = |up| {
        if up {
            ServiceState::Up
        } else {
            ServiceState::Down
        }
    };
    Message::Directory(Directory::of(
        services.into_iter().map(|(name, up)| (name, state(up))),
    ))
}

fn bid_ask(bid: i64, ask: i64) -> Vec<u8> {
    encode_field_list([
        (22, Value::Real(Real::new(bid, -2))),
        (25, Value::Real(Real::new(ask, -2))),
    ])
}

fn refresh<'a>(
    sid: u32,
    seq: u32,
    name: &'a str,
    fields: &'a [u8],
    solicited: bool,
) -> Message<'a> {
    Message::Refresh(Refresh {
        stream_id: sid,
        seq,
        complete: true,
        solicited,
        clear_cache: true,
        state: State::OPEN_OK,
        service: "FEED",
        name,
        fields: FieldList::decode(fields).unwrap(),
    })
}

fn update(sid: u32, seq: u32, fields: &[u8]) -> Message<'_> {
    Message::Update(Update::new(
        sid,
        seq,
        UpdateType::Quote,
        FieldList::decode(fields).unwrap(),
    ))
}

fn s(v: &str) -> String {
    v.to_string()
}

/// A node (cache on or off, see [`Harness::new`]) whose FEED publisher has imaged `name`
/// as `img` on its stream 1: the node and the publisher.
fn node_with_item(cache: bool, name: &str, img: &[u8]) -> (Harness, ConnId) {
    let mut h = Harness::new(cache);
    let p = h.publisher_of(1, name, img);
    (h, p)
}

/// A [`node_with_item`] of SYM0, and a subscriber that asked for a snapshot of it on its
/// stream 1: the node, the publisher and the subscriber.
fn snapshot_requested(cache: bool, img: &[u8]) -> (Harness, ConnId, ConnId) {
    let (mut h, p) = node_with_item(cache, "SYM0", img);
    let sub = h.login(Role::Subscriber);
    h.recv(sub);
    h.request(sub, 1, "FEED", "SYM0", false, None);
    (h, p, sub)
}

/// Whether `got` is exactly one non-streaming refresh: the answer to a snapshot request.
fn is_snapshot(got: &[Got]) -> bool {
    matches!(
        got,
        [Got::Refresh {
            stream: StreamState::NonStreaming,
            ..
        }]
    )
}

/// Whether `got` is one status, with `code` and a text that contains `says`.
fn only_status(got: &[Got], code: u16, says: &str) -> bool {
    matches!(got, [Got::Status { code: c, text, .. }] if *c == code && text.contains(says))
}

/// The code of `got` when it is one status, closing stream `sid`; None otherwise.
fn only_closed(got: &[Got], sid: u32) -> Option<u16> {
    match got {
        [Got::Status {
            sid: s,
            stream: StreamState::Closed,
            code,
            ..
        }] if *s == sid => Some(*code),
        _ => None,
    }
}

/// The journal's record of update `seq` of the bid/ask item, time-stamped `seq` ns.
fn past(seq: u32) -> tickwire_journal::PastMessage {
    tickwire_journal::PastMessage {
        time_ns: seq as u64,
        seq,
        refresh: false,
        update_type: 1,
        fields: bid_ask(seq as i64, seq as i64 + 1),
    }
}

/// The directory message a subscriber receives listing `entries`, each up or down.
fn dir(entries: &[(&str, bool)]) -> Got {
    Got::Directory(entries.iter().map(|&(n, up)| (s(n), up)).collect())
}

#[test]
fn cached_item_is_served_at_once_then_updates_follow_with_the_subscribers_stream_id() {
    let mut h = Harness::new(true);
    let p = h.publisher("FEED", false);
    let img = bid_ask(10000, 10010);
    h.send(p, &[refresh(1, 5, "SYM0", &img, false)]);
    let sub = h.subscriber_to(42, "SYM0");
    let got = h.recv(sub);
    assert_eq!(
        got,
        vec![Got::Refresh {
            sid: 42,
            seq: 5,
            stream: StreamState::Open,
            data: DataState::Ok,
            solicited: true,
            fields: vec![(22, s("100.00")), (25, s("100.10"))],
        }]
    );
    let upd = encode_field_list([(22, Value::Real(Real::new(10001, -2)))]);
    h.send(p, &[update(1, 6, &upd)]);
    assert_eq!(
        h.recv(sub),
        vec![Got::Update {
            sid: 42,
            seq: 6,
            fields: vec![(22, s("100.01"))]
        }]
    );
    // The cache merged the update.
    let cached = h.node.cached_image("FEED", "SYM0").unwrap();
    assert_eq!(
        fields_of(FieldList::decode(&cached).unwrap()),
        vec![(22, s("100.01")), (25, s("100.10"))]
    );
    assert!(h.recv(p).iter().all(|m| !matches!(m, Got::Request { .. })));
}

#[test]
fn updates_go_out_before_their_merge_and_a_new_subscriber_still_gets_them_in_its_image() {
    let mut h = Harness::new(true);
    let p = h.publisher("FEED", false);
    h.send(p, &[refresh(1, 5, "SYM0", &bid_ask(10000, 10010), false)]);
    let first = h.watcher_of(1, "SYM0");
    let bids: Vec<Vec<u8>> = (1..=3)
        .map(|i| encode_field_list([(22, Value::Real(Real::new(10000 + i, -2)))]))
        .collect();
    h.send(
        p,
        &[
            update(1, 6, &bids[0]),
            update(1, 7, &bids[1]),
            update(1, 8, &bids[2]),
        ],
    );
    // Fanned out, not merged yet.
    assert_eq!(h.recv(first).len(), 3);
    assert_eq!(h.node.unsettled_updates(), 3);
    // A request is not an update: the image catches up before it is read.
    let second = h.subscriber_to(9, "SYM0");
    assert_eq!(h.node.unsettled_updates(), 0);
    assert!(matches!(
        &h.recv(second)[..],
        [Got::Refresh { seq: 8, fields, .. }] if *fields == vec![(22, s("100.03")), (25, s("100.10"))]
    ));
}

#[test]
fn updates_waiting_for_their_merge_are_bounded_when_the_driver_never_settles() {
    let mut h = Harness::new(true);
    let p = h.publisher("FEED", false);
    h.send(p, &[refresh(1, 1, "SYM0", &bid_ask(10000, 10010), false)]);
    let most = crate::deferred::MAX_DEFERRED;
    let mut seen = 0;
    for i in 0..(most as i64 + 1000) {
        let bid = encode_field_list([(22, Value::Real(Real::new(20000 + i, -2)))]);
        h.send(p, &[update(1, 2 + i as u32, &bid)]);
        seen = seen.max(h.node.unsettled_updates());
    }
    assert!(seen <= most, "{seen} updates waited");
    let last = 20000 + most as i64 + 999;
    let cached = h.node.cached_image("FEED", "SYM0").unwrap();
    assert_eq!(
        fields_of(FieldList::decode(&cached).unwrap())[0],
        (22, Real::new(last, -2).to_string())
    );
}

#[test]
fn cache_off_forwards_every_request_to_the_publisher_and_holds_updates_until_the_refresh() {
    let mut h = Harness::new(false);
    let img = bid_ask(10000, 10010);
    let p = h.publisher_of(7, "SYM0", &img);
    assert!(h.node.cached_image("FEED", "SYM0").is_none());
    let sub = h.login(Role::Subscriber);
    h.recv(sub);
    h.request(sub, 1, "FEED", "SYM0", true, None);
    assert!(
        h.recv(sub).is_empty(),
        "no image without the publisher's refresh"
    );
    assert_eq!(
        h.recv(p),
        vec![Got::Request {
            sid: 7,
            service: s("FEED"),
            name: s("SYM0")
        }]
    );
    // An update sent before the publisher answers is covered by its refresh.
    let upd = bid_ask(10001, 10011);
    h.send(p, &[update(7, 2, &upd)]);
    assert!(h.recv(sub).is_empty());
    h.send(p, &[refresh(7, 2, "SYM0", &upd, true)]);
    h.send(p, &[update(7, 3, &img)]);
    let got = h.recv(sub);
    assert!(
        matches!(
            &got[0],
            Got::Refresh {
                sid: 1,
                seq: 2,
                solicited: true,
                ..
            }
        ),
        "{got:?}"
    );
    assert!(
        matches!(&got[1], Got::Update { sid: 1, seq: 3, .. }),
        "{got:?}"
    );
    assert_eq!(got.len(), 2);
}

#[test]
fn interactive_publisher_is_asked_for_items_and_told_when_the_last_subscriber_closes() {
    let mut h = Harness::new(true);
    let p = h.publisher("FEED", true);
    let a = h.login(Role::Subscriber);
    let b = h.login(Role::Subscriber);
    h.request(a, 1, "FEED", "NEW", true, None);
    h.request(b, 9, "FEED", "NEW", true, None);
    let reqs: Vec<Got> = h
        .recv(p)
        .into_iter()
        .filter(|m| matches!(m, Got::Request { .. }))
        .collect();
    assert_eq!(
        reqs.len(),
        1,
        "one request however many subscribers wait: {reqs:?}"
    );
    let Got::Request { sid: psid, .. } = reqs[0] else {
        unreachable!()
    };
    assert!(psid >= NODE_STREAM_BASE);
    let img = bid_ask(500, 501);
    h.send(p, &[refresh(psid, 1, "NEW", &img, true)]);
    assert!(h
        .recv(a)
        .iter()
        .any(|m| matches!(m, Got::Refresh { sid: 1, .. })));
    assert!(h
        .recv(b)
        .iter()
        .any(|m| matches!(m, Got::Refresh { sid: 9, .. })));
    h.send(a, &[Message::Close { stream_id: 1 }]);
    assert!(h.recv(p).is_empty(), "b still watches");
    h.send(b, &[Message::Close { stream_id: 9 }]);
    assert_eq!(h.recv(p), vec![Got::Close { sid: psid }]);
    assert_eq!(h.node.item_count(), 0);
}

/// An interactive publisher of FEED, a subscriber asking for FEED/X on its stream 1,
/// and the node's stream of X at the publisher.
fn item_asked_of_a_publisher() -> (Harness, ConnId, ConnId, u32) {
    let mut h = Harness::new(true);
    let p = h.publisher("FEED", true);
    let a = h.login(Role::Subscriber);
    h.request(a, 1, "FEED", "X", true, None);
    let Some(Got::Request { sid: psid, .. }) = h
        .recv(p)
        .into_iter()
        .find(|m| matches!(m, Got::Request { .. }))
    else {
        panic!("asked of the publisher")
    };
    (h, p, a, psid)
}

/// A subscriber that leaves before an interactive publisher answered: the node closes
/// the request, and the answer that crossed the close is dropped (and counted), not
/// taken for a protocol error that dropped the publisher and every subscriber with it.
#[test]
fn an_answer_that_crossed_the_nodes_close_is_dropped_and_the_publisher_stays() {
    let (mut h, p, a, psid) = item_asked_of_a_publisher();
    h.send(a, &[Message::Close { stream_id: 1 }]);
    assert_eq!(h.recv(p), vec![Got::Close { sid: psid }]);
    h.send(p, &[refresh(psid, 1, "X", &bid_ask(1, 2), true)]);
    assert!(h.node.publishes(p, "FEED"), "still the publisher");
    assert_eq!(h.node.stats().refreshes_on_closed_streams, 1);
    // Stream 0 is never an item's.
    h.send(p, &[refresh(0, 1, "X", &bid_ask(1, 2), true)]);
    assert!(!h.node.publishes(p, "FEED"), "a protocol error");
}

/// A publisher that lets go of one of its services (an upstream link whose upstream
/// removed it): its streams of that service close at it and turn suspect at the
/// subscribers, its other services stay its own, and the service is taken again (and
/// its watched items asked for again) when it announces it anew.
#[test]
fn a_service_let_go_of_is_down_its_streams_closed_at_the_publisher_and_taken_back_later() {
    let (mut h, p, a, psid) = item_asked_of_a_publisher();
    h.send(p, &[refresh(psid, 1, "X", &bid_ask(1, 2), true)]);
    h.recv(a);
    h.node.release_services(p, &["FEED", "NOT-ITS-OWN"], "test");
    assert_eq!(h.recv(p), vec![Got::Close { sid: psid }]);
    let got = h.recv(a);
    assert_any!(
        got,
        Got::Status {
            sid: 1,
            stream: StreamState::Open,
            data: DataState::Suspect,
            ..
        }
    );
    assert!(got.contains(&dir(&[("FEED", false)])), "{got:?}");
    assert!(!h.node.publishes(p, "FEED"));
    // Announced again: its own again, and the watched item is asked for anew.
    let again = ServiceEntry {
        name: "FEED",
        state: ServiceState::Up,
        interactive: true,
        item_count: 0,
    };
    h.send(
        p,
        &[Message::Directory(Directory {
            services: vec![again],
        })],
    );
    assert!(h.node.publishes(p, "FEED"));
    assert_any!(h.recv(p), Got::Request { .. });
}

#[test]
fn publisher_loss_turns_streams_suspect_and_its_return_makes_them_ok() {
    let img = bid_ask(10000, 10010);
    let (mut h, p) = node_with_item(true, "SYM0", &img);
    let sub = h.watcher_of(3, "SYM0");
    h.node.on_disconnect(p, h.now);
    let got = h.recv(sub);
    assert_any!(
        got,
        Got::Status {
            sid: 3,
            stream: StreamState::Open,
            data: DataState::Suspect,
            ..
        }
    );
    assert!(got.contains(&dir(&[("FEED", false)])), "{got:?}");
    // A new subscriber is still served from the cache, marked suspect.
    let late = h.subscriber_to(1, "SYM0");
    assert_any!(
        h.recv(late),
        Got::Refresh {
            data: DataState::Suspect,
            ..
        }
    );
    // Once nobody watches it, the stale image still stays in the cache.
    h.send(late, &[Message::Close { stream_id: 1 }]);
    h.send(sub, &[Message::Close { stream_id: 3 }]);
    let third = h.login(Role::Subscriber);
    h.request(third, 1, "FEED", "SYM0", false, None);
    let got = h.recv(third);
    assert_any!(
        got,
        Got::Refresh {
            stream: StreamState::NonStreaming,
            data: DataState::Suspect,
            ..
        }
    );
    h.request(sub, 3, "FEED", "SYM0", true, None);
    h.recv(sub);
    // The publisher returns and re-images (unsolicited): every stream gets it, ok again.
    let p2 = h.publisher("FEED", false);
    h.send(p2, &[refresh(1, 1, "SYM0", &img, false)]);
    let got = h.recv(sub);
    assert_any!(
        got,
        Got::Refresh {
            sid: 3,
            data: DataState::Ok,
            solicited: false,
            ..
        }
    );
}

/// A stale image kept while its service is down goes when the publisher comes back:
/// a non-interactive one that no longer publishes the item makes it unknown, and an
/// interactive one is asked for it.
#[test]
fn stale_images_nobody_watches_go_when_the_service_comes_back() {
    for interactive_on_return in [false, true] {
        let (mut h, p) = node_with_item(true, "SYM0", &bid_ask(10000, 10010));
        let sub = h.watcher_of(3, "SYM0");
        h.node.on_disconnect(p, h.now);
        h.send(sub, &[Message::Close { stream_id: 3 }]);
        h.recv(sub);
        assert_eq!(h.node.item_count(), 1, "kept while the service is down");
        let p2 = h.publisher("FEED", interactive_on_return);
        h.recv(p2);
        assert_eq!(h.node.item_count(), 0, "dropped when it comes back");
        h.request(sub, 4, "FEED", "SYM0", true, None);
        let got = h.recv(sub);
        if interactive_on_return {
            assert!(
                h.recv(p2).iter().any(|m| matches!(m, Got::Request { .. })),
                "the interactive publisher is asked"
            );
            assert!(
                !got.iter().any(|m| matches!(m, Got::Refresh { .. })),
                "{got:?}"
            );
        } else {
            assert!(
                got.iter().any(|m| matches!(
                    m,
                    Got::Status {
                        sid: 4,
                        stream: StreamState::Closed,
                        ..
                    }
                )),
                "not published any more: {got:?}"
            );
        }
    }
}

#[test]
fn a_services_update_counts_survive_its_items_going() {
    let (mut h, p) = node_with_item(true, "SYM0", &bid_ask(10000, 10010));
    let sub = h.watcher_of(3, "SYM0");
    for seq in 2..5 {
        h.send(p, &[update(1, seq, &bid_ask(10000 + seq as i64, 10010))]);
    }
    let feed = |h: &Harness| {
        let f = h.node.service_figures();
        let f = f.into_iter().find(|f| f.name == "FEED").unwrap();
        (f.items, f.updates_in, f.updates_out)
    };
    assert_eq!(feed(&h), (1, 3, 3));
    // The item goes (stale, nobody watches it, the service comes back): its counts stay.
    h.node.on_disconnect(p, h.now);
    h.send(sub, &[Message::Close { stream_id: 3 }]);
    h.recv(sub);
    let p2 = h.publisher("FEED", false);
    h.recv(p2);
    assert_eq!(feed(&h), (0, 3, 3));
}

/// A refresh part of FEED's `name` on the publisher's stream `sid`.
fn refresh_part<'a>(
    sid: u32,
    name: &'a str,
    fields: &'a [u8],
    first: bool,
    last: bool,
) -> Message<'a> {
    Message::Refresh(Refresh {
        stream_id: sid,
        seq: 5,
        complete: last,
        solicited: true,
        clear_cache: first,
        state: State::OPEN_OK,
        service: "FEED",
        name,
        fields: FieldList::decode(fields).unwrap(),
    })
}

#[test]
fn cache_off_a_stream_opened_between_the_parts_of_a_refresh_waits_for_a_whole_one() {
    let mut h = Harness::new(false);
    let p = h.publisher_of(7, "SYM0", &bid_ask(1, 2));
    let first = h.watcher_of(1, "SYM0");
    h.recv(p);
    let bid = encode_field_list([(22, Value::Real(Real::new(100, -2)))]);
    let ask = encode_field_list([(25, Value::Real(Real::new(101, -2)))]);
    h.send(p, &[refresh_part(7, "SYM0", &bid, true, false)]);
    assert_eq!(h.recv(first).len(), 1);
    // Opened after the first part: the rest of this refresh is not an image for it.
    let late = h.watcher_of(1, "SYM0");
    h.send(p, &[refresh_part(7, "SYM0", &ask, false, true)]);
    assert_eq!(h.recv(first).len(), 1);
    let got = h.recv(late);
    assert!(got.is_empty(), "no part without the first: {got:?}");
    // The publisher is asked again, and its whole answer goes to the late stream only.
    assert_any!(h.recv(p), Got::Request { sid: 7, .. });
    h.send(p, &[refresh_part(7, "SYM0", &bid, true, false)]);
    h.send(p, &[refresh_part(7, "SYM0", &ask, false, true)]);
    assert!(h.recv(first).is_empty());
    let got = h.recv(late);
    let fields: Vec<i16> = got
        .iter()
        .flat_map(|m| match m {
            Got::Refresh { fields, .. } => fields.iter().map(|f| f.0).collect(),
            _ => vec![],
        })
        .collect();
    assert_eq!(fields, vec![22, 25], "{got:?}");
    h.send(p, &[update(7, 6, &ask)]);
    assert_any!(h.recv(late), Got::Update { sid: 1, seq: 6, .. });
}

#[test]
fn snapshot_gets_one_non_streaming_refresh_and_no_updates() {
    let img = bid_ask(10000, 10010);
    let (mut h, p, sub) = snapshot_requested(true, &img);
    let got = h.recv(sub);
    assert!(is_snapshot(&got), "{got:?}");
    h.send(p, &[update(1, 2, &img)]);
    assert!(h.recv(sub).is_empty());
}

#[test]
fn snapshot_with_cache_off_waits_for_the_publisher_then_closes() {
    let img = bid_ask(10000, 10010);
    let (mut h, p, sub) = snapshot_requested(false, &img);
    h.send(p, &[refresh(1, 1, "SYM0", &img, true)]);
    h.send(p, &[update(1, 2, &img)]);
    let got = h.recv(sub);
    assert!(is_snapshot(&got), "{got:?}");
}

#[test]
fn view_filters_refresh_and_updates() {
    let img = bid_ask(10000, 10010);
    let (mut h, p) = node_with_item(true, "SYM0", &img);
    let sub = h.login(Role::Subscriber);
    h.recv(sub);
    h.request(sub, 1, "FEED", "SYM0", true, Some(&[25]));
    let got = h.recv(sub);
    assert!(
        matches!(&got[..], [Got::Refresh { fields, .. }] if fields == &vec![(25, s("100.10"))]),
        "{got:?}"
    );
    let only_bid = encode_field_list([(22, Value::Real(Real::new(1, 0)))]);
    h.send(p, &[update(1, 2, &only_bid), update(1, 3, &img)]);
    assert_eq!(
        h.recv(sub),
        vec![Got::Update {
            sid: 1,
            seq: 3,
            fields: vec![(25, s("100.10"))]
        }]
    );
}

/// Streams requested in a row with the same view (in any order, with repeats) share
/// one copy of it; another view is a copy of its own, and each filters as its own.
#[test]
fn requests_in_a_row_with_one_view_share_it() {
    let img = bid_ask(10000, 10010);
    let (mut h, _p) = node_with_item(true, "SYM0", &img);
    let sub = h.login(Role::Subscriber);
    h.recv(sub);
    // (The harness's connections hold 3 streams.)
    for sid in 1..=2 {
        h.request(sub, sid, "FEED", "SYM0", true, Some(&[25, 22, 25]));
    }
    h.request(sub, 3, "FEED", "SYM0", true, Some(&[25]));
    let got = h.recv(sub);
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(
        matches!(&got[2], Got::Refresh { fields, .. } if fields == &vec![(25, s("100.10"))]),
        "{got:?}"
    );
    let item = *h.node.services[0].items.get("SYM0").expect("the item");
    let subs = &h.node.items.get(item).expect("the item").subs;
    let views: Vec<&std::sync::Arc<[i16]>> = subs.iter().filter_map(|e| e.view.as_ref()).collect();
    assert_eq!(views.len(), 3);
    let shared: Vec<_> = views.iter().filter(|v| v[..] == [22, 25]).collect();
    assert_eq!(shared.len(), 2);
    assert!(shared
        .windows(2)
        .all(|w| std::sync::Arc::ptr_eq(w[0], w[1])));
}

#[test]
fn a_request_without_a_refresh_changes_the_view_in_place_and_sends_no_image() {
    let img = bid_ask(10000, 10010);
    let (mut h, p) = node_with_item(true, "SYM0", &img);
    let sub = h.login(Role::Subscriber);
    h.recv(sub);
    h.request(sub, 1, "FEED", "SYM0", true, Some(&[25]));
    assert_eq!(h.recv(sub).len(), 1, "the image of the first view");
    h.change_view(sub, 1, "SYM0", Some(&[22]));
    assert!(
        h.recv(sub).is_empty(),
        "no image for a view changed in place"
    );
    h.send(p, &[update(1, 2, &img)]);
    assert_eq!(
        h.recv(sub),
        [Got::Update {
            sid: 1,
            seq: 2,
            fields: vec![(22, s("100.00"))]
        }]
    );
    // No view: every field again, on the same stream.
    h.change_view(sub, 1, "SYM0", None);
    h.send(p, &[update(1, 3, &img)]);
    assert_eq!(
        h.recv(sub),
        [Got::Update {
            sid: 1,
            seq: 3,
            fields: vec![(22, s("100.00")), (25, s("100.10"))]
        }]
    );
}

#[test]
fn a_view_changed_while_the_image_is_awaited_cuts_the_image_that_comes() {
    let mut h = Harness::new(false);
    let img = bid_ask(10000, 10010);
    let p = h.publisher_of(7, "SYM0", &img);
    let sub = h.login(Role::Subscriber);
    h.recv(sub);
    h.request(sub, 1, "FEED", "SYM0", true, None);
    assert_eq!(h.recv(p).len(), 1, "the publisher is asked for the image");
    h.change_view(sub, 1, "SYM0", Some(&[25]));
    assert!(h.recv(p).is_empty(), "nothing more asked of the publisher");
    h.send(p, &[refresh(7, 2, "SYM0", &img, true)]);
    let got = h.recv(sub);
    assert!(
        matches!(&got[..], [Got::Refresh { sid: 1, solicited: true, fields, .. }]
            if fields == &vec![(25, s("100.10"))]),
        "the awaited image, in the new view: {got:?}"
    );
}

#[test]
fn a_request_without_a_refresh_on_a_stream_not_open_for_the_item_is_closed() {
    let img = bid_ask(10000, 10010);
    let (mut h, p) = node_with_item(true, "SYM0", &img);
    let sub = h.watcher_of(1, "SYM0");
    // Not open at all.
    h.change_view(sub, 2, "SYM0", Some(&[22]));
    assert!(
        only_status(
            &h.recv(sub),
            code::NOT_FOUND,
            "the stream is not open for item \"SYM0\""
        ),
        "a stream that is not open"
    );
    // Open for another item: the stream ends.
    h.change_view(sub, 1, "SYM1", Some(&[22]));
    assert!(only_status(
        &h.recv(sub),
        code::NOT_FOUND,
        "only changes an open stream"
    ));
    h.send(p, &[update(1, 2, &img)]);
    assert!(h.recv(sub).is_empty(), "stream 1 is closed");
}

#[test]
fn unknown_service_and_unknown_item_are_closed_with_a_reason() {
    let mut h = Harness::new(true);
    let _p = h.publisher("FEED", false);
    let sub = h.login(Role::Subscriber);
    h.recv(sub);
    h.request(sub, 1, "NOPE", "X", true, None);
    h.request(sub, 2, "FEED", "MISSING", true, None);
    let got = h.recv(sub);
    assert!(
        matches!(&got[0], Got::Status { sid: 1, stream: StreamState::Closed, code: code::NOT_FOUND, text, .. } if text.contains("unknown service \"NOPE\"")),
        "{got:?}"
    );
    assert!(
        matches!(&got[1], Got::Status { sid: 2, stream: StreamState::Closed, code: code::NOT_FOUND, text, .. } if text.contains("MISSING")),
        "{got:?}"
    );
}

/// The Welcome's limits are 32-bit: limits past 4 GiB (or 2^32 streams) are said as
/// the most it can say, not cut to their low bits (2^32 + 2048 output bytes were said
/// as 2048, and publishers refused images over 1 KiB that the node would take).
#[test]
fn limits_past_what_a_welcome_can_say_are_said_as_its_most() {
    let mut h = Harness::with_config(CoreConfig {
        limits: Limits {
            max_output_bytes: (1 << 32) + 2048,
            max_streams_per_connection: 1 << 32,
            ..Limits::default()
        },
        ..CoreConfig::default()
    });
    let c = h.connect_with(client_login(Role::Subscriber, "u", ""));
    let got = h.recv(c);
    let Some(Got::Welcome {
        max_streams,
        max_output_bytes,
        ..
    }) = got.first()
    else {
        panic!("{got:?}")
    };
    assert_eq!((*max_streams, *max_output_bytes), (u32::MAX, u32::MAX));
}

#[test]
fn malformed_input_gets_a_reason_and_only_that_connection_is_closed() {
    let img = bid_ask(10000, 10010);
    let (mut h, p) = node_with_item(true, "SYM0", &img);
    let good = h.watcher_of(1, "SYM0");
    let bad = h.login(Role::Subscriber);
    h.node.on_frame(bad, &[99, 0, 0], h.now);
    let got = h.recv(bad);
    assert!(
        matches!(&got[..], [.., Got::Status { sid: 0, stream: StreamState::Closed, code: code::MALFORMED, text, .. }] if text.contains("unknown message type 99")),
        "{got:?}"
    );
    let mut closing = Vec::new();
    h.node.take_closing(&mut closing);
    assert_eq!(closing, vec![bad]);
    h.send(p, &[update(1, 2, &img)]);
    assert_eq!(h.recv(good).len(), 1);
}

#[test]
fn request_before_login_is_refused() {
    let mut h = Harness::new(true);
    let c = h.node.connect("x", h.now);
    h.request(c, 1, "FEED", "A", true, None);
    let got = h.recv(c);
    assert!(
        only_status(&got, code::PROTOCOL, "login required"),
        "{got:?}"
    );
}

#[test]
fn incompatible_version_is_refused_with_both_ranges() {
    let mut h = Harness::new(true);
    let c = h.node.connect("x", h.now);
    h.send(
        c,
        &[Message::Login(Login {
            version_min: 7,
            version_max: 9,
            application: "a",
            ..client_login(Role::Subscriber, "u", "")
        })],
    );
    let got = h.recv(c);
    assert!(only_status(&got, code::LOGIN_REJECTED, "7..=9"), "{got:?}");
}

#[test]
fn heartbeats_are_sent_when_idle_and_silent_peers_are_dropped() {
    let mut h = Harness::new(true);
    let sub = h.login(Role::Subscriber);
    h.recv(sub);
    h.now += Duration::from_millis(1100);
    h.node.handle_timeout(h.now);
    assert_eq!(h.recv(sub), vec![Got::Ping]);
    h.send(sub, &[Message::Ping(1)]);
    assert_eq!(h.recv(sub), vec![Got::Pong]);
    h.now += Duration::from_millis(2900);
    h.node.handle_timeout(h.now);
    assert!(
        h.recv(sub).iter().all(|m| !matches!(m, Got::Status { .. })),
        "2.9 s silent is fine"
    );
    h.now += Duration::from_millis(200);
    h.node.handle_timeout(h.now);
    let got = h.recv(sub);
    assert_any!(
        got,
        Got::Status {
            code: code::TIMEOUT,
            ..
        }
    );
    assert_eq!(h.node.stats().heartbeat_timeouts, 1);
}

/// A connection whose transport agreed on a silence limit (an RSSL consumer's ping
/// timeout) is dropped when silent for that long, not for 3 heartbeat intervals.
#[test]
fn a_silence_limit_agreed_replaces_the_three_heartbeats() {
    let mut h = Harness::new(true);
    let sub = h.login(Role::Subscriber);
    h.recv(sub);
    h.node.set_silence_limit(sub, Duration::from_secs(5));
    h.now += Duration::from_millis(4900);
    h.node.handle_timeout(h.now);
    assert!(
        h.recv(sub).iter().all(|m| !matches!(m, Got::Status { .. })),
        "4.9 s silent is within the 5 s agreed (3 heartbeats are 3 s)"
    );
    h.now += Duration::from_millis(200);
    h.node.handle_timeout(h.now);
    let got = h.recv(sub);
    assert!(
        got.iter().any(
            |m| matches!(m, Got::Status { code: code::TIMEOUT, text, .. }
            if text.contains("5000 ms (the ping timeout agreed)"))
        ),
        "{got:?}"
    );
}

#[test]
fn the_nodes_own_parts_are_neither_pinged_nor_timed_out() {
    let mut h = Harness::new(true);
    let own = h.node.join_internal(
        &crate::InternalPeer {
            peer: "a link waiting for its peer",
            role: Role::Publisher,
            application: "test",
            user: "node",
            slow_consumer: None,
        },
        h.now,
    );
    h.recv(own);
    for _ in 0..10 {
        h.now += Duration::from_millis(1100);
        h.node.handle_timeout(h.now);
    }
    assert!(h.node.is_live(own));
    assert!(h.recv(own).is_empty());
    assert_eq!(h.node.stats().heartbeat_timeouts, 0);
}

/// An in-process peer whose link the core closed lets it go and joins again at once,
/// getting the same id back: the end the event loop then gives the closed link (from
/// the core's closing list) does not end the new one. Before, it did, and the peer
/// joined a third time.
#[test]
fn a_late_end_of_a_released_internal_link_does_not_end_its_next() {
    let mut h = Harness::new(true);
    let peer = crate::InternalPeer {
        peer: "a link",
        role: Role::Subscriber,
        application: "test",
        user: "node",
        slow_consumer: None,
    };
    let old = h.node.join_internal(&peer, h.now);
    h.node
        .reject(old, code::SLOW_CONSUMER, "its queue passed the hard bound");
    assert!(!h.node.is_live(old));
    h.node.release_internal(old);
    let new = h.node.join_internal(&peer, h.now);
    assert_eq!(new, old, "the id is given again");
    // The event loop's turn: what the core closed is written, then ended.
    let mut closing = Vec::new();
    h.node.take_closing(&mut closing);
    for id in closing {
        h.node.on_disconnect(id, h.now);
    }
    h.node.on_disconnect(old, h.now);
    assert!(h.node.is_live(new), "the new link was ended");
    assert_eq!(h.node.logged_in_count(), h.node.connection_count());
}

#[test]
fn stream_limit_refuses_the_extra_stream_only() {
    let mut h = Harness::new(true);
    let p = h.publisher("FEED", false);
    let img = bid_ask(1, 2);
    for i in 0..4u32 {
        let name = format!("S{i}");
        h.send(p, &[refresh(i + 1, 1, &name, &img, false)]);
    }
    let sub = h.login(Role::Subscriber);
    h.recv(sub);
    for i in 0..4u32 {
        h.request(sub, i + 1, "FEED", &format!("S{i}"), true, None);
    }
    let got = h.recv(sub);
    assert_eq!(
        got.iter()
            .filter(|m| matches!(m, Got::Refresh { .. }))
            .count(),
        3
    );
    assert!(got.iter().any(|m| matches!(m, Got::Status { sid: 4, code: code::TOO_MANY_STREAMS, text, .. } if text.contains("3 open streams"))), "{got:?}");
}

#[test]
fn a_subscriber_that_never_reads_is_disconnected_at_its_output_limit() {
    let mut h = Harness::with_config(CoreConfig {
        limits: Limits {
            max_output_bytes: 64 * 1024,
            ..Limits::default()
        },
        slow_consumer: SlowConsumerConfig {
            policy: SlowConsumerPolicy::Disconnect,
            ..SlowConsumerConfig::default()
        },
        ..CoreConfig::default()
    });
    let img = bid_ask(10000, 10010);
    let p = h.publisher_of(1, "SYM0", &img);
    let slow = h.login(Role::Subscriber);
    let fast = h.login(Role::Subscriber);
    h.request(slow, 1, "FEED", "SYM0", true, None);
    h.request(fast, 1, "FEED", "SYM0", true, None);
    for seq in 2..4000 {
        h.send(p, &[update(1, seq, &img)]);
        h.recv(fast);
    }
    assert_eq!(h.node.stats().slow_consumer_disconnects, 1);
    let got = h.recv(slow);
    // What it had not been sent was dropped: it gets the tail of at most one frame it
    // had started to receive (none here), then the reason.
    assert!(got.len() < 100, "{} messages still queued", got.len());
    assert!(
        matches!(
            got.last(),
            Some(Got::Status {
                sid: 0,
                stream: StreamState::ClosedRecover,
                code: code::SLOW_CONSUMER,
                ..
            })
        ),
        "{:?}",
        got.last()
    );
}

#[test]
fn shutdown_sends_closed_recover_on_every_stream() {
    let (mut h, p) = node_with_item(true, "SYM0", &bid_ask(1, 2));
    let sub = h.watcher_of(5, "SYM0");
    h.node.shutdown(h.now);
    let got = h.recv(sub);
    assert!(
        got.contains(&Got::Status {
            sid: 5,
            stream: StreamState::ClosedRecover,
            data: DataState::Suspect,
            code: code::SHUTDOWN,
            text: s("node shutting down")
        }),
        "{got:?}"
    );
    let mut closing = Vec::new();
    h.node.take_closing(&mut closing);
    closing.sort();
    assert_eq!(closing, vec![p, sub]);
}

#[test]
fn large_images_go_out_as_multi_part_refreshes() {
    let mut h = Harness::new(true);
    let p = h.publisher("FEED", false);
    // 3 refresh parts of 30 KB each of string fields make a ~90 KB image.
    let long = "x".repeat(10_000);
    for part in 0..3i16 {
        let fl = encode_field_list((0..3i16).map(|i| (part * 3 + i + 100, Value::Ascii(&long))));
        h.send(
            p,
            &[Message::Refresh(Refresh {
                stream_id: 1,
                seq: part as u32 + 1,
                complete: part == 2,
                solicited: false,
                clear_cache: part == 0,
                state: State::OPEN_OK,
                service: "FEED",
                name: "BIG",
                fields: FieldList::decode(&fl).unwrap(),
            })],
        );
    }
    let sub = h.login(Role::Subscriber);
    h.recv(sub);
    h.request(sub, 1, "FEED", "BIG", true, None);
    let got = h.recv(sub);
    let total: usize = got
        .iter()
        .map(|m| match m {
            Got::Refresh { fields, .. } => fields.len(),
            _ => 0,
        })
        .sum();
    assert!(got.len() >= 2, "{} parts", got.len());
    assert_eq!(total, 9);
}

#[test]
fn requests_wait_while_a_service_is_down_and_missing_items_are_closed_when_it_comes_up() {
    let mut h = Harness::new(true);
    let p = h.login(Role::Publisher);
    h.send(p, &[directory([("FEED", false)])]);
    let sub = h.subscriber_to(1, "SYM0");
    h.request(sub, 2, "FEED", "NEVER", true, None);
    let got = h.recv(sub);
    assert!(
        got.iter().all(|m| matches!(
            m,
            Got::Status {
                stream: StreamState::Open,
                data: DataState::Suspect,
                code: code::SERVICE_DOWN,
                ..
            }
        )),
        "held, not refused: {got:?}"
    );
    let img = bid_ask(100, 101);
    h.send(
        p,
        &[
            refresh(1, 1, "SYM0", &img, false),
            directory([("FEED", true)]),
        ],
    );
    let got = h.recv(sub);
    assert_any!(
        got,
        Got::Refresh {
            sid: 1,
            data: DataState::Ok,
            ..
        }
    );
    assert_any!(
        got,
        Got::Status {
            sid: 2,
            stream: StreamState::Closed,
            code: code::NOT_FOUND,
            ..
        }
    );
    assert!(got.contains(&dir(&[("FEED", true)])), "{got:?}");
}

#[test]
fn an_interactive_publishers_return_re_images_live_streams() {
    for cache in [true, false] {
        an_interactive_publishers_return_re_images_live_streams_cache(cache);
    }
}

fn an_interactive_publishers_return_re_images_live_streams_cache(cache: bool) {
    let mut h = Harness::new(cache);
    let p = h.publisher("FEED", true);
    let sub = h.subscriber_to(1, "X");
    let Some(Got::Request { sid, .. }) = h
        .recv(p)
        .into_iter()
        .find(|m| matches!(m, Got::Request { .. }))
    else {
        panic!("no request")
    };
    let img = bid_ask(100, 101);
    h.send(p, &[refresh(sid, 1, "X", &img, true)]);
    h.recv(sub);
    h.node.on_disconnect(p, h.now);
    assert_any!(
        h.recv(sub),
        Got::Status {
            data: DataState::Suspect,
            ..
        }
    );
    let p2 = h.publisher("FEED", true);
    let reqs: Vec<Got> = h
        .recv(p2)
        .into_iter()
        .filter(|m| matches!(m, Got::Request { .. }))
        .collect();
    let [Got::Request {
        sid: sid2, name, ..
    }] = &reqs[..]
    else {
        panic!("the live item is asked for again: {reqs:?}")
    };
    assert_eq!(name, "X");
    let img2 = bid_ask(200, 201);
    h.send(p2, &[refresh(*sid2, 1, "X", &img2, true)]);
    let got = h.recv(sub);
    // A re-image of a live stream: not the answer to its request.
    assert!(
        got.iter().any(|m| matches!(m, Got::Refresh { sid: 1, data: DataState::Ok, solicited: false, fields, .. } if fields[0] == (22, s("2.00")))),
        "cache {cache}: {got:?}"
    );
}

#[test]
fn a_service_announced_down_turns_its_streams_suspect() {
    let img = bid_ask(100, 101);
    let (mut h, p) = node_with_item(true, "A", &img);
    let sub = h.watcher_of(1, "A");
    h.send(p, &[directory([("FEED", false)])]);
    let got = h.recv(sub);
    assert_any!(
        got,
        Got::Status {
            sid: 1,
            stream: StreamState::Open,
            data: DataState::Suspect,
            code: code::SERVICE_DOWN,
            ..
        }
    );
    // Its re-image brings the stream back to ok.
    h.send(p, &[refresh(1, 2, "A", &img, false)]);
    assert_any!(
        h.recv(sub),
        Got::Refresh {
            sid: 1,
            data: DataState::Ok,
            ..
        }
    );
}

// ---- slow consumers ----

/// A node with a small conflation threshold (8 KiB / 200 messages) under a 256 KiB /
/// 5,000-message hard bound.
fn slow_harness(cache: bool, policy: SlowConsumerPolicy) -> Harness {
    Harness::with_config(CoreConfig {
        cache,
        limits: Limits {
            max_output_bytes: 256 * 1024,
            max_output_messages: 5_000,
            ..Limits::default()
        },
        slow_consumer: SlowConsumerConfig {
            policy,
            conflate_above_bytes: 8 * 1024,
            conflate_above_messages: 200,
            ..SlowConsumerConfig::default()
        },
        ..CoreConfig::default()
    })
}

/// A conflating [`slow_harness`] whose FEED publisher has imaged SYM0 on its stream 1, and
/// a subscriber that asked for SYM0 on its stream 1 and has read nothing yet.
fn slow_subscriber_to_sym0() -> (Harness, ConnId, ConnId) {
    let mut h = slow_harness(true, SlowConsumerPolicy::Conflate);
    let p = h.publisher_of(1, "SYM0", &bid_ask(100, 101));
    let slow = h.subscriber_to(1, "SYM0");
    (h, p, slow)
}

fn trade(sid: u32, seq: u32, price: i64) -> Vec<u8> {
    let _ = (sid, seq);
    encode_field_list([(6, Value::Real(Real::new(price, -2)))])
}

fn dnc_update(sid: u32, seq: u32, fields: &[u8]) -> Message<'_> {
    Message::Update(Update {
        stream_id: sid,
        seq,
        update_type: UpdateType::Trade,
        do_not_conflate: true,
        conflation_count: 1,
        fields: FieldList::decode(fields).unwrap(),
    })
}

/// What a subscriber's images look like after applying what it received, per stream,
/// with the number of publisher updates each received message stands for.
#[derive(Default)]
struct Replica {
    images: std::collections::BTreeMap<u32, std::collections::BTreeMap<i16, String>>,
    updates_seen: std::collections::BTreeMap<u32, u64>,
    merged_messages: usize,
}

impl Replica {
    /// A replica of everything `c` can read now.
    fn read_from(h: &mut Harness, c: ConnId) -> Self {
        let mut replica = Replica::default();
        replica.apply(&h.read_all(c));
        replica
    }

    fn apply(&mut self, got: &[Got]) {
        for g in got {
            match g {
                Got::Refresh { sid, fields, .. } => {
                    let img = self.images.entry(*sid).or_default();
                    img.clear();
                    img.extend(fields.iter().cloned());
                }
                Got::Update { sid, fields, .. } => {
                    self.images
                        .entry(*sid)
                        .or_default()
                        .extend(fields.iter().cloned());
                    *self.updates_seen.entry(*sid).or_default() += 1;
                }
                Got::Merged {
                    sid, fields, count, ..
                } => {
                    self.images
                        .entry(*sid)
                        .or_default()
                        .extend(fields.iter().cloned());
                    *self.updates_seen.entry(*sid).or_default() += u64::from(*count);
                    if *count > 1 {
                        self.merged_messages += 1;
                    }
                }
                _ => {}
            }
        }
    }
}

fn cached(h: &mut Harness, name: &str) -> std::collections::BTreeMap<i16, String> {
    let bytes = h.node.cached_image("FEED", name).expect("cached");
    fields_of(FieldList::decode(&bytes).unwrap())
        .into_iter()
        .collect()
}

#[test]
fn a_slow_subscriber_gets_conflated_updates_that_rebuild_the_current_image() {
    let mut h = slow_harness(true, SlowConsumerPolicy::Conflate);
    let p = h.publisher("FEED", false);
    let names: Vec<String> = (0..20).map(|i| format!("SYM{i}")).collect();
    for (i, n) in names.iter().enumerate() {
        let img = bid_ask(10000 + i as i64, 10010 + i as i64);
        h.send(p, &[refresh(i as u32 + 1, 1, n, &img, false)]);
    }
    let slow = h.login(Role::Subscriber);
    let fast = h.login(Role::Subscriber);
    let mut slow_replica = Replica::default();
    let mut fast_replica = Replica::default();
    for (i, n) in names.iter().enumerate() {
        h.request(slow, i as u32 + 1, "FEED", n, true, None);
        h.request(fast, i as u32 + 1, "FEED", n, true, None);
    }
    slow_replica.apply(&h.read_all(slow));
    fast_replica.apply(&h.read_all(fast));
    let mut sent = std::collections::BTreeMap::<u32, u64>::new();
    let mut max_queued = 0;
    // 20,000 updates while the slow subscriber reads nothing; bids, asks and trades
    // change, so a merged update must carry the latest of each.
    for k in 0..20_000u32 {
        let item = k % 20;
        let sid = item + 1;
        let fields = if k % 3 == 0 {
            trade(sid, k, 5000 + k as i64)
        } else {
            bid_ask(10000 + k as i64, 10100 + k as i64)
        };
        h.send(p, &[update(sid, k + 2, &fields)]);
        *sent.entry(sid).or_default() += 1;
        fast_replica.apply(&h.recv(fast));
        max_queued = max_queued.max(h.node.pending_output(slow));
    }
    assert_eq!(h.node.stats().slow_consumer_episodes, 1);
    assert_eq!(h.node.stats().slow_consumer_disconnects, 0);
    // Its queue stopped growing at the threshold (plus the frame that crossed it).
    assert!(max_queued < 16 * 1024, "queued {max_queued} bytes");
    let report = h.node.connection_reports();
    let r = report.iter().find(|r| r.id == slow).unwrap();
    assert!(r.behind && r.pending_streams == 20, "{r:?}");

    slow_replica.apply(&h.read_all(slow));
    assert!(slow_replica.merged_messages >= 20);
    for (i, n) in names.iter().enumerate() {
        let sid = i as u32 + 1;
        let node_image = cached(&mut h, n);
        assert_eq!(slow_replica.images[&sid], node_image, "{n} (slow)");
        assert_eq!(fast_replica.images[&sid], node_image, "{n} (fast)");
        // Every publisher update is accounted for: received or merged.
        assert_eq!(slow_replica.updates_seen[&sid], sent[&sid], "{n}");
        assert_eq!(fast_replica.updates_seen[&sid], sent[&sid], "{n}");
    }
    let merged: u64 = 20_000 - h.node.stats().conflated_updates;
    assert!(merged < 20_000);
    // Live again: the next update arrives on its own.
    let r = h.node.connection_reports();
    assert!(!r.iter().find(|r| r.id == slow).unwrap().behind);
    let img = bid_ask(1, 2);
    h.send(p, &[update(1, 30_000, &img)]);
    assert!(matches!(
        h.read_all(slow).as_slice(),
        [Got::Update {
            sid: 1,
            seq: 30_000,
            ..
        }]
    ));
}

#[test]
fn merging_updates_that_already_stand_for_several_adds_their_counts() {
    // A node fed by another node (a backbone edge) receives updates its upstream
    // already merged: a merge of those stands for the sum, or a subscriber checking
    // sequence numbers would see gaps that are not there.
    let mut h = slow_harness(true, SlowConsumerPolicy::Conflate);
    let p = h.publisher_of(1, "SYM0", &bid_ask(10000, 10010));
    let slow = h.subscriber_to(1, "SYM0");
    let mut replica = Replica::read_from(&mut h, slow);
    let mut seq = 1u32;
    for k in 0..2_000u32 {
        let fields = bid_ask(10000 + k as i64, 10100 + k as i64);
        seq += 3;
        let merged_upstream = Message::Update(Update {
            stream_id: 1,
            seq,
            update_type: UpdateType::Quote,
            do_not_conflate: false,
            conflation_count: 3,
            fields: FieldList::decode(&fields).unwrap(),
        });
        h.send(p, &[merged_upstream]);
    }
    assert_eq!(h.node.stats().slow_consumer_episodes, 1);
    replica.apply(&h.read_all(slow));
    assert!(replica.merged_messages > 0);
    assert_eq!(replica.updates_seen[&1], 3 * 2_000);
}

#[test]
fn conflation_works_with_the_cache_off_and_respects_views() {
    let mut h = slow_harness(false, SlowConsumerPolicy::Conflate);
    let img = bid_ask(100, 101);
    let p = h.publisher_of(1, "SYM0", &img);
    let slow = h.login(Role::Subscriber);
    h.request(slow, 7, "FEED", "SYM0", true, Some(&[22]));
    // Cache off: the node asks the publisher for the image.
    assert!(matches!(
        h.recv(p).as_slice(),
        [Got::Request { sid: 1, .. }]
    ));
    h.send(p, &[refresh(1, 1, "SYM0", &img, true)]);
    let mut replica = Replica::read_from(&mut h, slow);
    assert!(replica.images.contains_key(&7));
    for k in 0..5_000u32 {
        h.send(
            p,
            &[update(1, k + 2, &bid_ask(200 + k as i64, 300 + k as i64))],
        );
    }
    replica.apply(&h.read_all(slow));
    // The last bid was 200 + 4,999 hundredths.
    assert_eq!(replica.images[&7].get(&22), Some(&s("51.99")));
    assert_eq!(replica.images[&7].get(&25), None, "outside the view");
    assert_eq!(replica.updates_seen[&7], 5_000);
}

#[test]
fn do_not_conflate_updates_are_never_merged_while_there_is_room() {
    let (mut h, p, slow) = slow_subscriber_to_sym0();
    h.read_all(slow);
    // Quotes and trades interleaved; the trades must each arrive, in order.
    let mut trades = Vec::new();
    for k in 0..3_000u32 {
        if k % 10 == 0 {
            let f = trade(1, k, 7000 + k as i64);
            h.send(p, &[dnc_update(1, k + 2, &f)]);
            trades.push(k + 2);
        } else {
            h.send(p, &[update(1, k + 2, &bid_ask(k as i64, k as i64 + 1))]);
        }
    }
    assert_eq!(h.node.stats().slow_consumer_episodes, 1);
    assert_eq!(h.node.stats().do_not_conflate_dropped, 0);
    let got = h.read_all(slow);
    let mut seqs = Vec::new();
    let mut last_seq = 1;
    let mut replica = Replica::default();
    replica.apply(&got);
    for g in &got {
        match g {
            Got::Merged {
                seq,
                do_not_conflate: true,
                count,
                ..
            } => {
                assert_eq!(*count, 1);
                seqs.push(*seq);
                assert!(*seq > last_seq);
                last_seq = *seq;
            }
            Got::Merged { seq, .. } | Got::Update { seq, .. } => {
                assert!(*seq > last_seq, "out of order at {seq}");
                last_seq = *seq;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seqs, trades);
    assert_eq!(replica.updates_seen[&1], 3_000);
    assert_eq!(replica.images[&1], cached(&mut h, "SYM0"));
}

#[test]
fn do_not_conflate_updates_without_room_are_reported_not_silently_lost() {
    let (mut h, p, slow) = slow_subscriber_to_sym0();
    let mut replica = Replica::read_from(&mut h, slow);
    // Far more trades than the 5,000-message bound holds.
    for k in 0..12_000u32 {
        let f = trade(1, k, 1000 + k as i64);
        h.send(p, &[dnc_update(1, k + 2, &f)]);
    }
    let dropped = h.node.stats().do_not_conflate_dropped;
    assert!(dropped > 0);
    assert_eq!(h.node.stats().slow_consumer_disconnects, 0);
    assert!(h.node.pending_output(slow) <= 256 * 1024);
    let got = h.read_all(slow);
    replica.apply(&got);
    let text = format!("{dropped} do-not-conflate updates dropped");
    let notice = got.iter().position(|g| {
        matches!(g, Got::Status { code: code::UPDATES_DROPPED, data: DataState::Suspect, text: t, .. } if t.starts_with(&text))
    });
    let notice = notice.expect("the subscriber is told");
    assert!(
        matches!(&got[notice + 1], Got::Merged { count, .. } if u64::from(*count) == dropped),
        "{:?}",
        &got[notice + 1]
    );
    assert!(matches!(
        &got[notice + 2],
        Got::Status {
            data: DataState::Ok,
            stream: StreamState::Open,
            ..
        }
    ));
    assert_eq!(replica.updates_seen[&1], 12_000);
    assert_eq!(replica.images[&1], cached(&mut h, "SYM0"));
}

#[test]
fn policy_comes_from_the_login_then_the_user_then_the_node() {
    let mut cfg = slow_harness(true, SlowConsumerPolicy::Conflate)
        .node
        .cfg
        .clone();
    cfg.slow_consumer
        .per_user
        .insert("strict".into(), SlowConsumerPolicy::Disconnect);
    let mut h = Harness::with_config(cfg);
    let p = h.publisher_of(1, "SYM0", &bid_ask(100, 101));
    let login = |h: &mut Harness, user: &str, asked: Option<SlowConsumerPolicy>| {
        let c = h.connect_with(Login {
            slow_consumer: asked,
            ..client_login(Role::Subscriber, user, "")
        });
        h.request(c, 1, "FEED", "SYM0", true, None);
        h.recv(c);
        c
    };
    let default = login(&mut h, "anyone", None);
    let strict = login(&mut h, "strict", None);
    let strict_but_asks = login(&mut h, "strict", Some(SlowConsumerPolicy::Conflate));
    let asks_disconnect = login(&mut h, "anyone", Some(SlowConsumerPolicy::Disconnect));
    for k in 0..10_000u32 {
        h.send(p, &[update(1, k + 2, &bid_ask(k as i64, 1))]);
    }
    let reports = h.node.connection_reports();
    let policy = |c| {
        reports
            .iter()
            .find(|r| r.id == c)
            .map(|r| (r.policy, r.role))
    };
    assert_eq!(
        policy(default),
        Some((SlowConsumerPolicy::Conflate, "subscriber"))
    );
    assert_eq!(
        policy(strict_but_asks),
        Some((SlowConsumerPolicy::Conflate, "subscriber"))
    );
    assert_eq!(
        policy(strict),
        Some((SlowConsumerPolicy::Disconnect, "closing"))
    );
    assert_eq!(
        policy(asks_disconnect),
        Some((SlowConsumerPolicy::Disconnect, "closing"))
    );
    assert_eq!(h.node.stats().slow_consumer_disconnects, 2);
    assert_eq!(h.node.stats().slow_consumer_episodes, 2);
}

#[test]
fn a_status_on_a_stream_with_a_pending_update_comes_after_it() {
    let (mut h, p, slow) = slow_subscriber_to_sym0();
    h.read_all(slow);
    for k in 0..2_000u32 {
        h.send(p, &[update(1, k + 2, &bid_ask(k as i64, 1))]);
    }
    // The publisher leaves: the stream turns suspect, after its latest values.
    h.node.on_disconnect(p, h.now);
    let got = h.read_all(slow);
    let status = got
        .iter()
        .position(|g| {
            matches!(
                g,
                Got::Status {
                    code: code::PUBLISHER_GONE,
                    ..
                }
            )
        })
        .expect("status");
    let last_update = got
        .iter()
        .rposition(|g| matches!(g, Got::Update { .. } | Got::Merged { .. }))
        .expect("updates");
    assert!(last_update < status, "{:?}", &got[last_update..]);
    let mut replica = Replica::default();
    replica.apply(&got);
    assert_eq!(replica.updates_seen[&1], 2_000);
}

#[test]
fn a_subscriber_behind_by_messages_stays_conflated_until_it_drains() {
    // Small updates: the 200-message threshold is passed long before the 8 KiB one.
    let (mut h, p, slow) = slow_subscriber_to_sym0();
    let mut replica = Replica::read_from(&mut h, slow);
    let mut max_messages = 0;
    for k in 0..3_000u32 {
        let f = encode_field_list([(22, Value::Real(Real::new(k as i64, -2)))]);
        h.send(p, &[update(1, k + 2, &f)]);
        // The socket takes nothing, but the loop asks after every write attempt.
        replica.apply(&h.read_some(slow, 0));
        let r = h.node.connection_reports();
        let r = r.iter().find(|r| r.id == slow).unwrap();
        max_messages = max_messages.max(r.queued_messages);
    }
    assert_eq!(h.node.stats().slow_consumer_episodes, 1);
    assert!(max_messages <= 201, "{max_messages} messages queued");
    replica.apply(&h.read_all(slow));
    assert_eq!(replica.images[&1], cached(&mut h, "SYM0"));
    assert_eq!(replica.updates_seen[&1], 3_000);
}

#[test]
fn pending_updates_keep_flowing_while_trades_keep_the_queue_high() {
    let mut h = slow_harness(true, SlowConsumerPolicy::Conflate);
    let img = bid_ask(100, 101);
    let p = h.publisher_of(1, "QUOTES", &img);
    h.send(p, &[refresh(2, 1, "TRADES", &img, false)]);
    let slow = h.subscriber_to(1, "QUOTES");
    h.request(slow, 2, "FEED", "TRADES", true, None);
    let mut replica = Replica::read_from(&mut h, slow);
    // It reads less than the trades take: the queue stays high (about 140 quote
    // updates get through before it falls behind; with no pending update written
    // alongside the trades, none after; with one per 16 trades, about 110 more).
    let mut quote_updates_seen_while_busy = 0;
    for k in 0..4_000u32 {
        h.send(p, &[update(1, k + 2, &bid_ask(k as i64, k as i64 + 1))]);
        let t = trade(2, k, 100 + k as i64);
        h.send(p, &[dnc_update(2, k + 2, &t)]);
        let got = h.read_some(slow, 15);
        quote_updates_seen_while_busy += got
            .iter()
            .filter(|g| matches!(g, Got::Merged { sid: 1, .. } | Got::Update { sid: 1, .. }))
            .count();
        replica.apply(&got);
    }
    assert!(h.node.stats().slow_consumer_episodes >= 1);
    assert!(
        quote_updates_seen_while_busy > 200,
        "the quotes pending update waited behind the trades ({quote_updates_seen_while_busy})"
    );
    replica.apply(&h.read_all(slow));
    assert_eq!(replica.images[&1], cached(&mut h, "QUOTES"));
    assert_eq!(replica.images[&2], cached(&mut h, "TRADES"));
    assert_eq!(replica.updates_seen[&1], 4_000);
    assert_eq!(replica.updates_seen[&2], 4_000);
}

#[test]
fn an_item_closed_by_its_publisher_delivers_the_pending_values_first() {
    let (mut h, p, slow) = slow_subscriber_to_sym0();
    let mut replica = Replica::read_from(&mut h, slow);
    for k in 0..2_000u32 {
        h.send(p, &[update(1, k + 2, &bid_ask(k as i64, k as i64 + 7))]);
    }
    let last = cached(&mut h, "SYM0");
    h.send(
        p,
        &[Message::Status(Status {
            stream_id: 1,
            state: State::closed(code::NOT_FOUND, "delisted"),
        })],
    );
    let got = h.read_all(slow);
    replica.apply(&got);
    assert!(matches!(
        got.last(),
        Some(Got::Status {
            stream: StreamState::Closed,
            ..
        })
    ));
    assert_eq!(replica.images[&1], last);
    assert_eq!(replica.updates_seen[&1], 2_000);
}

#[test]
fn a_merge_larger_than_a_message_goes_out_in_parts() {
    // As slow_harness, with room for a 240 KB image (a node caches images up to half
    // its hard bound).
    let mut h = Harness::with_config(CoreConfig {
        limits: Limits {
            max_output_bytes: 1024 * 1024,
            max_output_messages: 5_000,
            ..Limits::default()
        },
        slow_consumer: SlowConsumerConfig {
            policy: SlowConsumerPolicy::Conflate,
            conflate_above_bytes: 8 * 1024,
            conflate_above_messages: 200,
            ..SlowConsumerConfig::default()
        },
        ..CoreConfig::default()
    });
    let p = h.publisher_of(1, "WIDE", &bid_ask(100, 101));
    let slow = h.subscriber_to(1, "WIDE");
    let mut replica = Replica::read_from(&mut h, slow);
    // 40 updates of 2 different 3,000-byte text fields each: 80 fields, 240 KB merged.
    let text = "t".repeat(3_000);
    let mut k = 0;
    for round in 0..3 {
        for i in 0..40i16 {
            let f = encode_field_list([
                (1000 + 2 * i, Value::Ascii(&text)),
                (1001 + 2 * i, Value::Ascii(&text)),
                (22, Value::Real(Real::new(round * 100 + i as i64, 0))),
            ]);
            k += 1;
            h.send(p, &[update(1, k + 1, &f)]);
        }
    }
    let got = h.read_all(slow);
    let continuations = got
        .iter()
        .filter(|g| matches!(g, Got::Merged { count: 0, .. }))
        .count();
    assert!(continuations >= 1, "no part after the first");
    replica.apply(&got);
    assert_eq!(replica.images[&1], cached(&mut h, "WIDE"));
}

mod files;
mod hostile;
mod posts;
mod security;

#[test]
fn an_unwatched_interactive_item_lingers_in_the_cache_and_a_quick_re_request_is_answered_from_it() {
    let mut h = Harness::with_config(CoreConfig {
        cache: true,
        interactive_linger: Duration::from_secs(5),
        ..CoreConfig::default()
    });
    let p = h.publisher("FEED", true);
    let sub = h.subscriber_to(1, "A");
    let asked = h.recv(p);
    let Some(Got::Request { sid: psid, .. }) = asked.first().cloned() else {
        panic!("{asked:?}")
    };
    let img = bid_ask(100, 101);
    h.send(p, &[refresh(psid, 1, "A", &img, true)]);
    h.recv(sub);
    h.send(sub, &[Message::Close { stream_id: 1 }]);
    assert!(
        h.recv(p).iter().all(|g| !matches!(g, Got::Close { .. })),
        "not closed at the publisher yet"
    );
    // Kept current meanwhile.
    let upd = bid_ask(102, 103);
    h.send(p, &[update(psid, 2, &upd)]);
    h.now += Duration::from_secs(2);
    h.node.handle_timeout(h.now);
    let again = h.subscriber_to(4, "A");
    let got = h.recv(again);
    assert!(
        got.iter()
            .any(|g| matches!(g, Got::Refresh { sid: 4, seq: 2, fields, .. }
            if fields.contains(&(22, s("1.02"))))),
        "answered from the cache, current: {got:?}"
    );
    assert!(
        h.recv(p).iter().all(|g| !matches!(g, Got::Request { .. })),
        "the publisher was not asked again"
    );
    // Left again: the linger time starts over, and at its end the publisher is told.
    h.send(again, &[Message::Close { stream_id: 4 }]);
    h.now += Duration::from_secs(4);
    h.node.handle_timeout(h.now);
    let closes = |got: Vec<Got>| -> Vec<Got> {
        got.into_iter()
            .filter(|g| matches!(g, Got::Close { .. }))
            .collect()
    };
    assert!(closes(h.recv(p)).is_empty(), "4 s of a new 5 s linger");
    h.now += Duration::from_secs(2);
    h.node.handle_timeout(h.now);
    assert_eq!(closes(h.recv(p)), [Got::Close { sid: psid }]);
    assert_eq!(h.node.item_count(), 0);
}

#[test]
fn without_a_linger_time_an_unwatched_interactive_item_is_closed_at_once() {
    let mut h = Harness::new(true);
    let p = h.publisher("FEED", true);
    let sub = h.subscriber_to(1, "A");
    let Some(Got::Request { sid: psid, .. }) = h.recv(p).first().cloned() else {
        panic!()
    };
    let img = bid_ask(100, 101);
    h.send(p, &[refresh(psid, 1, "A", &img, true)]);
    h.send(sub, &[Message::Close { stream_id: 1 }]);
    assert_eq!(h.recv(p), [Got::Close { sid: psid }]);
}

#[test]
fn the_core_says_when_it_needs_a_tick_and_ticking_only_then_keeps_heartbeats_and_timeouts() {
    let mut h = Harness::new(true); // heartbeat 1 s
    let start = h.now;
    let sub = h.login(Role::Subscriber);
    h.node.handle_timeout(h.now);
    assert_eq!(
        h.node.poll_timeout(),
        Some(start + Duration::from_secs(1)),
        "a ping is due"
    );
    // A loop that ticks only when told: pings go out every interval, and a peer silent
    // for three is dropped at three, not later.
    let mut ticks = 0;
    let mut pings = 0;
    while h.node.is_live(sub) {
        h.tick_when_due();
        ticks += 1;
        pings += h.recv(sub).iter().filter(|g| **g == Got::Ping).count();
        assert!(ticks < 20, "ticked {ticks} times");
    }
    assert_eq!(
        h.now - start,
        Duration::from_secs(3),
        "dropped after 3 intervals"
    );
    assert!(pings >= 2, "{pings} pings");
    // A new connection that never logs in is dropped at its login timeout (or at
    // three silent intervals, if sooner), not later.
    let c = h.node.connect("silent", h.now);
    let limits = h.node.config().limits.clone();
    let due = limits.login_timeout.min(limits.heartbeat * 3);
    let opened = h.now;
    while h.node.is_live(c) {
        h.tick_when_due();
    }
    assert_eq!(h.now - opened, due);
}

#[test]
fn an_in_process_peer_speaks_to_the_core_in_messages_not_bytes() {
    let mut h = Harness::new(true);
    let p = h.node.connect_internal("own publisher", h.now);
    for m in [
        Message::Login(Login {
            application: "in-process",
            ..client_login(Role::Publisher, "node", "")
        }),
        Message::Directory(Directory::one_service("FEED", 1)),
    ] {
        h.node.on_message(p, &m, h.now);
    }
    let got = h.recv(p);
    assert!(matches!(got[..], [Got::Welcome { .. }]), "{got:?}");
    assert_eq!(h.node.services(), [("FEED".to_string(), true)]);
    let img = bid_ask(100, 101);
    let upd = bid_ask(102, 103);
    h.node
        .on_message(p, &refresh(1, 1, "X", &img, false), h.now);
    let got = h.recv(p);
    assert!(got.is_empty(), "{got:?}");
    let sub = h.login(Role::Subscriber);
    h.recv(sub);
    h.request(sub, 5, "FEED", "X", true, None);
    h.node.on_message(p, &update(1, 2, &upd), h.now);
    let got = h.recv(sub);
    assert!(
        matches!(
            &got[..],
            [
                Got::Refresh { sid: 5, seq: 1, .. },
                Got::Update { sid: 5, seq: 2, .. }
            ]
        ),
        "{got:?}"
    );
}

/// The item name queries' share of the loop: a query goes while the share is not
/// spent (one larger than a second's worth too, taking it below zero), and the next
/// waits for what it took.
#[test]
fn item_name_queries_share_the_loop() {
    let t0 = Instant::now();
    let per_s = crate::ITEM_NAMES_SCANNED_PER_S;
    let mut share = crate::LoopShare::new(per_s, t0);
    assert!(share.take(per_s / 2.0, t0).is_ok());
    assert!(share.take(per_s, t0).is_ok(), "half is left: it goes");
    let wait = share.take(1.0, t0).expect_err("spent");
    assert!(
        (wait.as_secs_f64() - 0.5).abs() < 1e-6,
        "half a second's worth taken beyond the share: {wait:?}"
    );
    assert!(share.take(1.0, t0 + wait / 2).is_err());
    assert!(
        share.take(per_s * 3.0, t0 + wait).is_ok(),
        "a large service, once not spent"
    );
    assert!(share.take(1.0, t0 + wait + Duration::from_secs(1)).is_err());
    assert!(share.take(1.0, t0 + wait + Duration::from_secs(3)).is_ok());
}
