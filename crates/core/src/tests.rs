//! The node driven in memory on a fake clock: peers are byte buffers, time is an Instant
//! the test moves by hand.

use super::*;
use tickwire_proto::frame::FrameReader;
use tickwire_proto::{encode_field_list, Real, UpdateType, Value};

#[derive(Debug, Clone, PartialEq)]
enum Got {
    Welcome {
        heartbeat_ms: u32,
    },
    Directory(Vec<(String, bool)>),
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
}

fn fields_of(f: FieldList<'_>) -> Vec<(i16, String)> {
    f.iter().map(|(id, v)| (id, v.to_string())).collect()
}

fn own(m: &Message<'_>) -> Got {
    match m {
        Message::Welcome(w) => Got::Welcome {
            heartbeat_ms: w.heartbeat_ms,
        },
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
    }
}

struct Harness {
    node: Node,
    now: Instant,
}

impl Harness {
    fn new(cache: bool) -> Self {
        let now = Instant::now();
        let cfg = CoreConfig {
            cache,
            limits: Limits {
                heartbeat: Duration::from_secs(1),
                max_streams_per_connection: 3,
                max_output_bytes: 64 * 1024,
                ..Limits::default()
            },
            ..CoreConfig::default()
        };
        Harness {
            node: Node::new(cfg, now),
            now,
        }
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

    fn login(&mut self, role: Role) -> ConnId {
        let c = self.node.connect("test", self.now);
        self.send(
            c,
            &[Message::Login(Login {
                version_min: 1,
                version_max: 3,
                role,
                application: "test",
                user: "u",
                token: "",
            })],
        );
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
            })],
        );
    }
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
    Message::Update(Update {
        stream_id: sid,
        seq,
        update_type: UpdateType::Quote,
        do_not_conflate: false,
        conflation_count: 1,
        fields: FieldList::decode(fields).unwrap(),
    })
}

fn s(v: &str) -> String {
    v.to_string()
}

#[test]
fn cached_item_is_served_at_once_then_updates_follow_with_the_subscribers_stream_id() {
    let mut h = Harness::new(true);
    let p = h.publisher("FEED", false);
    let img = bid_ask(10000, 10010);
    h.send(p, &[refresh(1, 5, "SYM0", &img, false)]);
    let sub = h.login(Role::Subscriber);
    h.request(sub, 42, "FEED", "SYM0", true, None);
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
fn cache_off_forwards_every_request_to_the_publisher_and_holds_updates_until_the_refresh() {
    let mut h = Harness::new(false);
    let p = h.publisher("FEED", false);
    let img = bid_ask(10000, 10010);
    h.send(p, &[refresh(7, 1, "SYM0", &img, false)]);
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

#[test]
fn publisher_loss_turns_streams_suspect_and_its_return_makes_them_ok() {
    let mut h = Harness::new(true);
    let p = h.publisher("FEED", false);
    let img = bid_ask(10000, 10010);
    h.send(p, &[refresh(1, 1, "SYM0", &img, false)]);
    let sub = h.login(Role::Subscriber);
    h.request(sub, 3, "FEED", "SYM0", true, None);
    h.recv(sub);
    h.node.on_disconnect(p, h.now);
    let got = h.recv(sub);
    assert!(
        got.iter().any(|m| matches!(
            m,
            Got::Status {
                sid: 3,
                stream: StreamState::Open,
                data: DataState::Suspect,
                ..
            }
        )),
        "{got:?}"
    );
    assert!(
        got.contains(&Got::Directory(vec![(s("FEED"), false)])),
        "{got:?}"
    );
    // A new subscriber is still served from the cache, marked suspect.
    let late = h.login(Role::Subscriber);
    h.request(late, 1, "FEED", "SYM0", true, None);
    assert!(h.recv(late).iter().any(|m| matches!(
        m,
        Got::Refresh {
            data: DataState::Suspect,
            ..
        }
    )));
    // The publisher returns and re-images (unsolicited): every stream gets it, ok again.
    let p2 = h.publisher("FEED", false);
    h.send(p2, &[refresh(1, 1, "SYM0", &img, false)]);
    let got = h.recv(sub);
    assert!(
        got.iter().any(|m| matches!(
            m,
            Got::Refresh {
                sid: 3,
                data: DataState::Ok,
                solicited: false,
                ..
            }
        )),
        "{got:?}"
    );
}

#[test]
fn snapshot_gets_one_non_streaming_refresh_and_no_updates() {
    let mut h = Harness::new(true);
    let p = h.publisher("FEED", false);
    let img = bid_ask(10000, 10010);
    h.send(p, &[refresh(1, 1, "SYM0", &img, false)]);
    let sub = h.login(Role::Subscriber);
    h.recv(sub);
    h.request(sub, 1, "FEED", "SYM0", false, None);
    let got = h.recv(sub);
    assert!(
        matches!(
            &got[..],
            [Got::Refresh {
                stream: StreamState::NonStreaming,
                ..
            }]
        ),
        "{got:?}"
    );
    h.send(p, &[update(1, 2, &img)]);
    assert!(h.recv(sub).is_empty());
}

#[test]
fn snapshot_with_cache_off_waits_for_the_publisher_then_closes() {
    let mut h = Harness::new(false);
    let p = h.publisher("FEED", false);
    let img = bid_ask(10000, 10010);
    h.send(p, &[refresh(1, 1, "SYM0", &img, false)]);
    let sub = h.login(Role::Subscriber);
    h.recv(sub);
    h.request(sub, 1, "FEED", "SYM0", false, None);
    h.send(p, &[refresh(1, 1, "SYM0", &img, true)]);
    h.send(p, &[update(1, 2, &img)]);
    let got = h.recv(sub);
    assert!(
        matches!(
            &got[..],
            [Got::Refresh {
                stream: StreamState::NonStreaming,
                ..
            }]
        ),
        "{got:?}"
    );
}

#[test]
fn view_filters_refresh_and_updates() {
    let mut h = Harness::new(true);
    let p = h.publisher("FEED", false);
    let img = bid_ask(10000, 10010);
    h.send(p, &[refresh(1, 1, "SYM0", &img, false)]);
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

#[test]
fn malformed_input_gets_a_reason_and_only_that_connection_is_closed() {
    let mut h = Harness::new(true);
    let p = h.publisher("FEED", false);
    let img = bid_ask(10000, 10010);
    h.send(p, &[refresh(1, 1, "SYM0", &img, false)]);
    let good = h.login(Role::Subscriber);
    h.request(good, 1, "FEED", "SYM0", true, None);
    h.recv(good);
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
        matches!(&got[..], [Got::Status { code: code::PROTOCOL, text, .. }] if text.contains("login required")),
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
            role: Role::Subscriber,
            application: "a",
            user: "u",
            token: "",
        })],
    );
    let got = h.recv(c);
    assert!(
        matches!(&got[..], [Got::Status { code: code::LOGIN_REJECTED, text, .. }] if text.contains("7..=9")),
        "{got:?}"
    );
}

#[test]
fn heartbeats_are_sent_when_idle_and_silent_peers_are_dropped() {
    let mut h = Harness::new(true);
    let sub = h.login(Role::Subscriber);
    h.recv(sub);
    h.now += Duration::from_millis(1100);
    h.node.on_tick(h.now);
    assert_eq!(h.recv(sub), vec![Got::Ping]);
    h.send(sub, &[Message::Ping(1)]);
    assert_eq!(h.recv(sub), vec![Got::Pong]);
    h.now += Duration::from_millis(2900);
    h.node.on_tick(h.now);
    assert!(
        h.recv(sub).iter().all(|m| !matches!(m, Got::Status { .. })),
        "2.9 s silent is fine"
    );
    h.now += Duration::from_millis(200);
    h.node.on_tick(h.now);
    let got = h.recv(sub);
    assert!(
        got.iter().any(|m| matches!(
            m,
            Got::Status {
                code: code::TIMEOUT,
                ..
            }
        )),
        "{got:?}"
    );
    assert_eq!(h.node.stats().heartbeat_timeouts, 1);
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
    let mut h = Harness::new(true);
    let p = h.publisher("FEED", false);
    let img = bid_ask(10000, 10010);
    h.send(p, &[refresh(1, 1, "SYM0", &img, false)]);
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
    assert!(
        matches!(
            got.last(),
            Some(Got::Status {
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
    let mut h = Harness::new(true);
    let p = h.publisher("FEED", false);
    let img = bid_ask(1, 2);
    h.send(p, &[refresh(1, 1, "SYM0", &img, false)]);
    let sub = h.login(Role::Subscriber);
    h.request(sub, 5, "FEED", "SYM0", true, None);
    h.recv(sub);
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
    let announce = |state| {
        Message::Directory(Directory {
            services: vec![ServiceEntry {
                name: "FEED",
                state,
                interactive: false,
                item_count: 0,
            }],
        })
    };
    h.send(p, &[announce(ServiceState::Down)]);
    let sub = h.login(Role::Subscriber);
    h.request(sub, 1, "FEED", "SYM0", true, None);
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
            announce(ServiceState::Up),
        ],
    );
    let got = h.recv(sub);
    assert!(
        got.iter().any(|m| matches!(
            m,
            Got::Refresh {
                sid: 1,
                data: DataState::Ok,
                ..
            }
        )),
        "{got:?}"
    );
    assert!(
        got.iter().any(|m| matches!(
            m,
            Got::Status {
                sid: 2,
                stream: StreamState::Closed,
                code: code::NOT_FOUND,
                ..
            }
        )),
        "{got:?}"
    );
    assert!(
        got.contains(&Got::Directory(vec![(s("FEED"), true)])),
        "{got:?}"
    );
}

#[test]
fn an_interactive_publishers_return_re_images_live_streams() {
    let mut h = Harness::new(true);
    let p = h.publisher("FEED", true);
    let sub = h.login(Role::Subscriber);
    h.request(sub, 1, "FEED", "X", true, None);
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
    assert!(h.recv(sub).iter().any(|m| matches!(
        m,
        Got::Status {
            data: DataState::Suspect,
            ..
        }
    )));
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
    assert!(
        got.iter().any(|m| matches!(m, Got::Refresh { sid: 1, data: DataState::Ok, fields, .. } if fields[0] == (22, s("2.00")))),
        "{got:?}"
    );
}

#[test]
fn a_service_announced_down_turns_its_streams_suspect() {
    let mut h = Harness::new(true);
    let p = h.publisher("FEED", false);
    let img = bid_ask(100, 101);
    h.send(p, &[refresh(1, 1, "A", &img, false)]);
    let sub = h.login(Role::Subscriber);
    h.request(sub, 1, "FEED", "A", true, None);
    h.recv(sub);
    h.send(
        p,
        &[Message::Directory(Directory {
            services: vec![ServiceEntry {
                name: "FEED",
                state: ServiceState::Down,
                interactive: false,
                item_count: 0,
            }],
        })],
    );
    let got = h.recv(sub);
    assert!(
        got.iter().any(|m| matches!(
            m,
            Got::Status {
                sid: 1,
                stream: StreamState::Open,
                data: DataState::Suspect,
                code: code::SERVICE_DOWN,
                ..
            }
        )),
        "{got:?}"
    );
    // Its re-image brings the stream back to ok.
    h.send(p, &[refresh(1, 2, "A", &img, false)]);
    assert!(h.recv(sub).iter().any(|m| matches!(
        m,
        Got::Refresh {
            sid: 1,
            data: DataState::Ok,
            ..
        }
    )));
}
