//! The sans-I/O client session against the real core, in memory, on a fake clock:
//! bytes move by hand between them and time is an `Instant` the test advances.

use crate::events::Event;
use crate::session::LoginOptions;
use crate::watchlist::{ReconnectPolicy, RequestOptions, SubscriberSession};
use crate::ClientError;
use std::time::{Duration, Instant};
use tickwire_core::{ConnId, CoreConfig, Node};
use tickwire_proto::frame::FrameReader;
use tickwire_proto::{
    code, encode_field_list, DataState, Directory, FieldList, Login, Message, Refresh, Role,
    ServiceState, State, StreamState, Update, UpdateType, Value,
};

const HB: Duration = Duration::from_secs(1);

struct Lab {
    core: Node,
    now: Instant,
    publisher: ConnId,
    session: SubscriberSession,
    /// The subscriber's connection at the core.
    sub_conn: Option<ConnId>,
    /// Bytes from the session not yet framed for the core.
    to_core: FrameReader,
}

fn login(role: Role) -> LoginOptions {
    LoginOptions {
        role,
        application: "test".into(),
        user: "alice".into(),
        token: String::new(),
        slow_consumer: None,
        welcome_timeout: Duration::from_secs(5),
    }
}

fn fields(bid: f64) -> Vec<u8> {
    let cents = (bid * 100.0).round() as i64;
    encode_field_list([(22, Value::Real(tickwire_proto::Real::new(cents, -2)))])
}

/// The back-off both labs' sessions reconnect with.
fn policy() -> ReconnectPolicy {
    ReconnectPolicy {
        reconnect: true,
        backoff_min: Duration::from_millis(100),
        backoff_max: Duration::from_secs(1),
        retry_rejected: false,
    }
}

/// A core that pings idle connections every `HB`, as both labs' nodes do.
fn node(now: Instant) -> Node {
    let mut cfg = CoreConfig::default();
    cfg.limits.heartbeat = HB;
    Node::new(cfg, now)
}

/// The Login a peer of the core's sends, with `name` as its application and user.
fn login_message(role: Role, name: &str) -> Message<'_> {
    Message::Login(Login::new(role, name, name, ""))
}

/// A complete, unsolicited image of `service`'s `name` on the publisher's stream `sid`.
fn image<'a>(service: &'a str, name: &'a str, sid: u32, fields: &'a [u8]) -> Message<'a> {
    Message::Refresh(Refresh::whole(
        sid,
        1,
        service,
        name,
        FieldList::from_trusted(fields),
    ))
}

fn node_with_publisher(now: Instant) -> (Node, ConnId) {
    let mut core = node(now);
    let publisher = core.connect("publisher", now);
    let mut frame = Vec::new();
    login_message(Role::Publisher, "feed")
        .encode(&mut frame)
        .unwrap();
    core.on_frame(publisher, &frame, now);
    (core, publisher)
}

/// Moves what each side has ready to the other, once: the session's bytes framed into
/// the core (`to_core` keeps a partial frame), the core's into the session (dropped
/// while it has no connection). Whether any bytes moved.
fn exchange(
    core: &mut Node,
    conn_id: ConnId,
    to_core: &mut FrameReader,
    mut conn: Option<&mut crate::Connection>,
    now: Instant,
) -> bool {
    let mut moved = false;
    if let Some(c) = conn.as_deref_mut() {
        let out = c.transmit().to_vec();
        c.sent(out.len(), now);
        if !out.is_empty() {
            moved = true;
            to_core.extend(&out);
            while let Some(frame) = to_core.next_frame().unwrap() {
                let frame = frame.to_vec();
                core.on_frame(conn_id, &frame, now);
            }
        }
    }
    if let Some(w) = core.output(conn_id) {
        let bytes = w.sealed_bytes().to_vec();
        w.consume(bytes.len());
        if !bytes.is_empty() {
            moved = true;
            if let Some(c) = conn {
                c.receive(&bytes, now);
            }
        }
    }
    moved
}

impl Lab {
    fn new() -> Lab {
        let now = Instant::now();
        let (core, publisher) = node_with_publisher(now);
        let session = SubscriberSession::new(login(Role::Subscriber), policy(), now);
        let mut lab = Lab {
            core,
            now,
            publisher,
            session,
            sub_conn: None,
            to_core: FrameReader::new(1 << 20),
        };
        lab.announce(&["FEED"]);
        lab.refresh("A", 1, 100.0);
        lab
    }

    /// The publisher's directory: these services, up.
    fn announce(&mut self, services: &[&str]) {
        let up = services.iter().map(|&name| (name, ServiceState::Up));
        self.publish(&[Message::Directory(Directory::of(up))]);
    }

    fn publish(&mut self, msgs: &[Message<'_>]) {
        let mut frame = Vec::new();
        for m in msgs {
            m.encode(&mut frame).unwrap();
        }
        self.core.on_frame(self.publisher, &frame, self.now);
        if let Some(w) = self.core.output(self.publisher) {
            let n = w.sealed_bytes().len();
            w.consume(n);
        }
    }

    fn refresh(&mut self, name: &str, sid: u32, bid: f64) {
        self.publish(&[image("FEED", name, sid, &fields(bid))]);
    }

    fn update(&mut self, sid: u32, seq: u32, bid: f64) {
        let f = fields(bid);
        self.publish(&[Message::Update(Update::new(
            sid,
            seq,
            UpdateType::Quote,
            FieldList::from_trusted(&f),
        ))]);
    }

    /// The transport opens: a new connection at the core.
    fn connect(&mut self) {
        assert!(self.session.wants_connect(self.now));
        self.session.connecting(self.now).unwrap();
        self.sub_conn = Some(self.core.connect("subscriber", self.now));
        self.to_core = FrameReader::new(1 << 20);
    }

    /// Moves bytes both ways until neither side has more, and returns the events.
    fn pump(&mut self) -> Result<Vec<(Event, bool)>, ClientError> {
        let mut events = Vec::new();
        let Some(conn_id) = self.sub_conn else {
            self.session.poll_events(self.now, |e, raw| {
                events.push((Event::from(&e), !raw.is_empty()))
            })?;
            return Ok(events);
        };
        for _ in 0..10 {
            let moved = exchange(
                &mut self.core,
                conn_id,
                &mut self.to_core,
                self.session.connection(),
                self.now,
            );
            self.session.poll_events(self.now, |e, raw| {
                events.push((Event::from(&e), !raw.is_empty()))
            })?;
            if !moved {
                break;
            }
        }
        Ok(events)
    }

    /// A session logged in to the lab's node, nothing asked for yet.
    fn connected() -> Lab {
        let mut lab = Lab::new();
        lab.connect();
        lab.pump().unwrap();
        lab
    }

    /// A connected session with FEED's A open, its image taken.
    fn watching_a() -> (Lab, crate::StreamId) {
        let mut lab = Lab::connected();
        let a = lab.subscribe("FEED", "A");
        lab.pump().unwrap();
        (lab, a)
    }

    /// A connected session that hands ids out again, FEED's B published as well as A.
    fn reusing_ids() -> Lab {
        let mut lab = Lab::new();
        lab.refresh("B", 2, 200.0);
        lab.session.reuse_stream_ids();
        lab.connect();
        lab.pump().unwrap();
        lab
    }

    /// A connected session with FEED's A and B open, their images taken.
    fn watching_a_and_b() -> (Lab, crate::StreamId, crate::StreamId) {
        let mut lab = Lab::new();
        lab.refresh("B", 2, 200.0);
        lab.connect();
        lab.pump().unwrap();
        let a = lab.subscribe("FEED", "A");
        let b = lab.subscribe("FEED", "B");
        assert_eq!(lab.pump().unwrap().len(), 2);
        (lab, a, b)
    }

    /// Opens a stream for `service`'s `name` with the default options.
    fn subscribe(&mut self, service: &str, name: &str) -> crate::StreamId {
        self.session
            .subscribe(service, name, RequestOptions::default())
            .unwrap()
    }

    /// `msgs` in one frame, straight into the session's connection, as if the node sent
    /// them.
    fn receive(&mut self, msgs: &[Message<'_>]) {
        let mut payload = Vec::new();
        for m in msgs {
            m.encode(&mut payload).unwrap();
        }
        let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&payload);
        self.session.connection().unwrap().receive(&frame, self.now);
    }

    /// The connection breaks: the core forgets it, the session is told.
    fn break_connection(&mut self) {
        if let Some(c) = self.sub_conn.take() {
            self.core.on_disconnect(c, self.now);
        }
        self.session
            .connection_lost(ClientError::Disconnected("test".into()), self.now)
            .unwrap();
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
        self.core.handle_timeout(self.now);
    }
}

/// The node closes stream `sid` as recoverable (as a node does for a stream it cannot
/// serve for now).
fn closed_recover(sid: u32) -> Message<'static> {
    Message::Status(tickwire_proto::Status {
        stream_id: sid,
        state: State {
            stream: StreamState::ClosedRecover,
            data: DataState::Suspect,
            code: code::SHUTDOWN,
            text: "try again",
        },
    })
}

fn bid(e: &Event) -> Option<String> {
    match e {
        Event::Refresh { fields, .. } | Event::Update { fields, .. } => {
            fields.get(22).map(|v| v.to_string())
        }
        _ => None,
    }
}

#[test]
fn logs_in_subscribes_and_streams_with_the_node_own_encoding() {
    let mut lab = Lab::new();
    lab.connect();
    assert!(lab.session.session().is_none(), "no welcome yet");
    let events = lab.pump().unwrap();
    let s = lab.session.session().expect("welcomed");
    assert_eq!(s.heartbeat, HB);
    assert!(
        matches!(&events[..], [(Event::Directory(d), true)] if d.iter().any(|(n, st)| n == "FEED" && *st == ServiceState::Up)),
        "{events:?}"
    );
    let sid = lab.subscribe("FEED", "A");
    let events = lab.pump().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(
        matches!(&events[0].0, Event::Refresh { stream, solicited: true, .. } if *stream == sid)
    );
    assert_eq!(bid(&events[0].0).as_deref(), Some("100.00"));
    lab.update(1, 2, 101.0);
    let events = lab.pump().unwrap();
    assert_eq!(events.len(), 1);
    assert!(events[0].1, "a received event carries its encoding");
    assert_eq!(bid(&events[0].0).as_deref(), Some("101.00"));
    lab.session.unsubscribe(sid).unwrap();
    lab.pump().unwrap();
    assert_eq!(lab.session.open_streams(), 0);
    lab.update(1, 3, 102.0);
    assert!(lab.pump().unwrap().is_empty(), "nothing after the close");
}

#[test]
fn pings_when_idle_and_fails_when_the_node_is_silent() {
    let mut lab = Lab::connected();
    let deadline = lab
        .session
        .poll_timeout()
        .expect("a deadline while connected");
    assert_eq!(deadline, lab.now + HB, "a ping is the next thing due");
    lab.now = deadline;
    lab.session.handle_timeout(lab.now).unwrap();
    let c = lab.session.connection().unwrap();
    let out = c.transmit().to_vec();
    let msgs: Vec<_> = tickwire_proto::MessageIter::new(&out[4..])
        .map(|m| m.unwrap().message.message_type())
        .collect();
    assert_eq!(msgs, [tickwire_proto::MessageType::Ping]);
    // The node stops talking (its bytes never arrive): three intervals and it is lost.
    c.sent(out.len(), lab.now);
    let silent_from = lab.now - HB;
    lab.now = silent_from + HB * 3;
    let err = lab.session.handle_timeout(lab.now).unwrap_err();
    assert!(err.to_string().contains("silent"), "{err}");
}

#[test]
fn a_node_that_does_not_welcome_in_time_is_a_failed_connection() {
    let mut lab = Lab::new();
    lab.connect();
    assert_eq!(
        lab.session.poll_timeout(),
        Some(lab.now + Duration::from_secs(5))
    );
    lab.now += Duration::from_secs(5);
    let err = lab.session.handle_timeout(lab.now).unwrap_err();
    assert!(matches!(err, ClientError::Timeout(_)), "{err}");
}

#[test]
fn a_lost_connection_makes_every_stream_suspect_then_recovers_the_watchlist() {
    let (mut lab, a, b) = Lab::watching_a_and_b();

    lab.break_connection();
    let events = lab.pump().unwrap();
    let suspect: Vec<u32> = events
        .iter()
        .filter_map(|(e, raw)| match e {
            Event::Status { stream, state, .. }
                if state.data == DataState::Suspect
                    && state.stream == StreamState::Open
                    && state.code == code::CONNECTION_LOST
                    && !raw =>
            {
                Some(*stream)
            }
            _ => None,
        })
        .collect();
    assert_eq!(suspect, [a, b]);
    assert!(!lab.session.wants_connect(lab.now), "backoff first");
    assert_eq!(
        lab.session.poll_timeout(),
        Some(lab.now + Duration::from_millis(100))
    );
    lab.advance(Duration::from_millis(100));

    // The node restarted and its publisher is not back: the requests wait for the
    // service to be in the directory.
    (lab.core, lab.publisher) = node_with_publisher(lab.now);
    lab.connect();
    let events = lab.pump().unwrap();
    assert!(
        events
            .iter()
            .all(|(e, _)| !matches!(e, Event::Refresh { .. })),
        "{events:?}"
    );
    lab.announce(&["FEED"]);
    lab.refresh("A", 1, 110.0);
    lab.refresh("B", 2, 210.0);
    let events = lab.pump().unwrap();
    let refreshed: Vec<(u32, Option<String>)> = events
        .iter()
        .filter_map(|(e, _)| match e {
            Event::Refresh { stream, .. } => Some((*stream, bid(e))),
            _ => None,
        })
        .collect();
    assert_eq!(
        refreshed,
        [(a, Some("110.00".into())), (b, Some("210.00".into()))]
    );
    assert_eq!(lab.session.reconnects(), 1);
}

#[test]
fn a_view_changed_in_place_brings_no_image_and_holds_across_a_reconnect() {
    let mut lab = Lab::connected();
    let a = lab.subscribe("FEED", "A");
    assert_eq!(bid(&lab.pump().unwrap()[0].0).as_deref(), Some("100.00"));
    // A view without the bid: no image, and an update of the bid alone is not sent.
    lab.session.change_view(a, Some(vec![23])).unwrap();
    assert!(lab.pump().unwrap().is_empty(), "no image");
    lab.update(1, 2, 101.0);
    assert!(lab.pump().unwrap().is_empty());
    // Every field again: the next update comes, on the same stream, with no image.
    lab.session.change_view(a, None).unwrap();
    assert!(lab.pump().unwrap().is_empty(), "no image");
    lab.update(1, 3, 102.0);
    let got = lab.pump().unwrap();
    assert!(
        matches!(&got[..], [(Event::Update { stream, .. }, _)] if *stream == a),
        "{got:?}"
    );
    assert_eq!(bid(&got[0].0).as_deref(), Some("102.00"));
    // The view is the stream's: after a lost connection it is asked for with it.
    lab.session.change_view(a, Some(vec![23])).unwrap();
    lab.pump().unwrap();
    lab.break_connection();
    lab.now += Duration::from_secs(2);
    lab.connect();
    let again = lab.pump().unwrap();
    let refresh = again
        .iter()
        .find(|(e, _)| matches!(e, Event::Refresh { stream, .. } if *stream == a))
        .expect("the stream's new image");
    assert_eq!(bid(&refresh.0), None, "in the view: no bid");
    // Not open: refused.
    assert!(lab.session.change_view(999, None).is_err());
}

#[test]
fn a_view_change_that_crosses_a_recoverable_close_keeps_the_stream() {
    let (mut lab, a) = Lab::watching_a();
    // The item's publisher closes it, recoverable; the client changes the view before
    // it reads that: the node, with no stream left, refuses the change with a close.
    lab.publish(&[Message::Status(tickwire_proto::Status {
        stream_id: 1,
        state: State {
            stream: StreamState::ClosedRecover,
            data: DataState::Suspect,
            code: 0,
            text: "feed restarting",
        },
    })]);
    lab.session.change_view(a, Some(vec![23])).unwrap();
    lab.pump().unwrap();
    assert!(lab.session.item(a).is_some(), "still to be asked for again");
    // Asked for again, with the view.
    lab.refresh("A", 1, 100.0);
    let give_up = lab.now + Duration::from_secs(60);
    let refresh = loop {
        assert!(lab.now < give_up, "the stream was never asked for again");
        lab.advance(Duration::from_millis(100));
        lab.session.handle_timeout(lab.now).unwrap();
        let got = lab.pump().unwrap();
        if let Some((e, _)) = got
            .into_iter()
            .find(|(e, _)| matches!(e, Event::Refresh { stream, .. } if *stream == a))
        {
            break e;
        }
    };
    assert_eq!(bid(&refresh), None, "in the view: no bid");
}

/// Streams refer to their service by an index into names the session keeps once:
/// every event, `item()` and the requests sent again after a reconnect must still name
/// the right service, views included.
#[test]
fn streams_of_several_services_keep_their_service_name_and_view() {
    let mut lab = Lab::new();
    let news = |lab: &mut Lab, bid: f64| lab.publish(&[image("NEWS", "A", 3, &fields(bid))]);
    lab.announce(&["FEED", "NEWS"]);
    news(&mut lab, 7.0);
    lab.connect();
    lab.pump().unwrap();
    let feed_a = lab.subscribe("FEED", "A");
    let news_a = lab.subscribe("NEWS", "A");
    let viewed = RequestOptions {
        view: Some(vec![23]), // not the bid (22): the refresh must carry no bid
        ..RequestOptions::default()
    };
    let feed_a_view = lab.session.subscribe("FEED", "A", viewed).unwrap();
    let named = |events: &[(Event, bool)]| -> Vec<(u32, String, String, Option<String>)> {
        events
            .iter()
            .filter_map(|(e, _)| match e {
                Event::Refresh {
                    stream,
                    service,
                    name,
                    ..
                } => Some((*stream, service.clone(), name.clone(), bid(e))),
                _ => None,
            })
            .collect()
    };
    let want = |feed: &str, news: &str| {
        vec![
            (feed_a, "FEED".into(), "A".into(), Some(feed.to_string())),
            (news_a, "NEWS".into(), "A".into(), Some(news.to_string())),
            (feed_a_view, "FEED".into(), "A".into(), None),
        ]
    };
    assert_eq!(named(&lab.pump().unwrap()), want("100.00", "7.00"));
    assert_eq!(lab.session.item(news_a), Some(("NEWS", "A")));
    assert_eq!(lab.session.item(feed_a_view), Some(("FEED", "A")));

    lab.update(1, 2, 101.0);
    let updated: Vec<(u32, String)> = lab
        .pump()
        .unwrap()
        .iter()
        .filter_map(|(e, _)| match e {
            Event::Update {
                stream, service, ..
            } => Some((*stream, service.clone())),
            _ => None,
        })
        .collect();
    // The viewed stream sees no update: only the bid changed.
    assert_eq!(updated, [(feed_a, "FEED".into())]);

    // After a reconnect every stream is requested again under its own service.
    lab.break_connection();
    lab.pump().unwrap();
    lab.advance(Duration::from_millis(100));
    (lab.core, lab.publisher) = node_with_publisher(lab.now);
    lab.connect();
    lab.announce(&["FEED", "NEWS"]);
    lab.refresh("A", 1, 110.0);
    news(&mut lab, 8.0);
    assert_eq!(named(&lab.pump().unwrap()), want("110.00", "8.00"));
}

#[test]
fn a_closed_recover_stream_is_requested_again_after_the_delay() {
    let (mut lab, a) = Lab::watching_a();
    lab.receive(&[closed_recover(a)]);
    let events = lab.pump().unwrap();
    assert!(
        matches!(&events[..], [(Event::Status { stream, state, .. }, _)]
            if *stream == a && state.stream == StreamState::Open && state.data == DataState::Suspect),
        "shown as open/suspect: {events:?}"
    );
    assert_eq!(
        lab.session.open_streams(),
        1,
        "the stream stays in the watchlist"
    );
    let again = lab.now + Duration::from_millis(500);
    assert_eq!(lab.session.poll_timeout(), Some(again));
    lab.now = again;
    lab.session.handle_timeout(lab.now).unwrap();
    let events = lab.pump().unwrap();
    assert!(
        matches!(&events[..], [(Event::Refresh { stream, .. }, true)] if *stream == a),
        "{events:?}"
    );
}

#[test]
fn a_refused_login_ends_the_session() {
    let mut lab = Lab::new();
    let cfg = CoreConfig {
        login_token: Some("secret".into()),
        ..CoreConfig::default()
    };
    lab.core = Node::new(cfg, lab.now);
    lab.connect();
    let err = lab.pump().unwrap_err();
    assert!(matches!(err, ClientError::Rejected { .. }), "{err}");
    let end = lab.session.connection_lost(err, lab.now).unwrap_err();
    assert!(end.to_string().contains("bad token"), "{end}");
}

/// A login refused on a reconnect (a node holding off failed logins from the address,
/// say) is tried again after the backoff: the same credentials were taken before.
#[test]
fn a_login_refused_on_a_reconnect_is_tried_again() {
    let mut lab = Lab::connected();
    lab.sub_conn = None;
    let lost = ClientError::Disconnected("the node went away".into());
    lab.session.connection_lost(lost, lab.now).unwrap();
    let cfg = CoreConfig {
        login_token: Some("secret".into()),
        ..CoreConfig::default()
    };
    lab.core = Node::new(cfg, lab.now);
    lab.now += Duration::from_secs(10);
    lab.connect();
    let err = lab.pump().unwrap_err();
    assert!(matches!(err, ClientError::Rejected { .. }), "{err}");
    lab.session.connection_lost(err, lab.now).unwrap();
    assert!(!lab.session.ended());
    lab.now += Duration::from_secs(60);
    assert!(lab.session.wants_connect(lab.now));
}

/// A connection that never had its Welcome (a node of a failover list that took it
/// and never answered) is no login: the next one to log in is the first, not a
/// reconnect, and a login refused there ends the session as a first refusal does.
#[test]
fn a_connection_never_logged_in_is_neither_a_reconnect_nor_a_login_taken() {
    let mut lab = Lab::new();
    lab.connect();
    lab.break_connection(); // before the Welcome
    lab.now += Duration::from_secs(10);
    lab.connect();
    lab.pump().unwrap();
    assert!(lab.session.session().is_some(), "logged in");
    assert_eq!(lab.session.reconnects(), 0);
    // Lost and back: that one is a reconnect.
    lab.break_connection();
    lab.now += Duration::from_secs(10);
    lab.connect();
    lab.pump().unwrap();
    assert_eq!(lab.session.reconnects(), 1);
    // Never logged in, then refused: the credentials are wrong, the session ends.
    let mut lab = Lab::new();
    lab.connect();
    lab.break_connection();
    lab.core = Node::new(
        CoreConfig {
            login_token: Some("secret".into()),
            ..CoreConfig::default()
        },
        lab.now,
    );
    lab.now += Duration::from_secs(10);
    lab.connect();
    let err = lab.pump().unwrap_err();
    assert!(matches!(err, ClientError::Rejected { .. }), "{err}");
    assert!(lab.session.connection_lost(err, lab.now).is_err());
    assert!(lab.session.ended());
}

/// What a subscriber of the publisher's node saw (what the tests look at).
#[derive(Debug, PartialEq)]
enum Seen {
    Refresh { seq: u32, solicited: bool, ok: bool },
    Update { seq: u32 },
    Other,
}

/// A complete image with ok data, as a subscriber of the node sees one.
fn ok_refresh(seq: u32, solicited: bool) -> Seen {
    Seen::Refresh {
        seq,
        solicited,
        ok: true,
    }
}

/// A publisher session on its own node (the lab's publisher connection unused).
struct PubLab {
    core: Node,
    now: Instant,
    session: crate::PublisherSession,
    conn: Option<ConnId>,
    to_core: FrameReader,
}

impl PubLab {
    fn new(interactive: bool) -> PubLab {
        let now = Instant::now();
        let session = crate::PublisherSession::new(
            login(Role::Publisher),
            policy(),
            crate::ServiceOptions {
                service: "FEED".into(),
                interactive,
                start_down: false,
                accept_posts: false,
            },
            now,
        );
        PubLab {
            core: node(now),
            now,
            session,
            conn: None,
            to_core: FrameReader::new(1 << 20),
        }
    }

    fn connect(&mut self) -> Vec<crate::PublisherEvent> {
        assert!(self.session.wants_connect(self.now));
        self.session.connecting(self.now).unwrap();
        self.conn = Some(self.core.connect("publisher", self.now));
        self.to_core = FrameReader::new(1 << 20);
        self.pump()
    }

    /// Moves bytes both ways until neither side has more.
    fn pump(&mut self) -> Vec<crate::PublisherEvent> {
        let conn_id = self.conn.expect("connected");
        for _ in 0..10 {
            let c = self.session.connection().expect("connection");
            let moved = exchange(
                &mut self.core,
                conn_id,
                &mut self.to_core,
                Some(c),
                self.now,
            );
            self.session.poll(self.now).unwrap();
            if !moved {
                break;
            }
        }
        self.session.take_events()
    }

    /// A subscriber of the core's, asking for `name`; what it got so far.
    fn subscribe(&mut self, name: &str) -> ConnId {
        let sub = self.core.connect("subscriber", self.now);
        let mut frame = Vec::new();
        for m in [
            login_message(Role::Subscriber, "app"),
            Message::Request(tickwire_proto::Request::streaming(1, "FEED", name)),
        ] {
            m.encode(&mut frame).unwrap();
        }
        self.core.on_frame(sub, &frame, self.now);
        sub
    }

    fn received(&mut self, sub: ConnId) -> Vec<Seen> {
        let w = self.core.output(sub).unwrap();
        let bytes = w.sealed_bytes().to_vec();
        w.consume(bytes.len());
        let mut r = FrameReader::new(1 << 20);
        r.extend(&bytes);
        let mut v = Vec::new();
        while let Some(f) = r.next_frame().unwrap() {
            for m in tickwire_proto::MessageIter::new(f) {
                let m = m.unwrap().message;
                v.push(match m {
                    Message::Refresh(r) => Seen::Refresh {
                        seq: r.seq,
                        solicited: r.solicited,
                        ok: r.state.data == DataState::Ok,
                    },
                    Message::Update(u) => Seen::Update { seq: u.seq },
                    _ => Seen::Other,
                });
            }
        }
        v
    }

    /// A non-interactive publisher session, logged in, with item A published (bid 100)
    /// and a subscriber of the node's asking for it: the lab, A's id and the subscriber.
    fn publishing_a_to_a_subscriber() -> (PubLab, crate::ItemId, ConnId) {
        let mut lab = PubLab::new(false);
        lab.connect();
        let id = lab.refresh("A", 100.0);
        lab.pump();
        let sub = lab.subscribe("A");
        (lab, id, sub)
    }

    /// Publishes `name`'s whole image, with this bid.
    fn refresh(&mut self, name: &str, bid: f64) -> crate::ItemId {
        self.session
            .publish_refresh(name, FieldList::from_trusted(&fields(bid)))
            .unwrap()
    }

    /// Publishes a quote of this bid to an item that has its image.
    fn update(&mut self, id: crate::ItemId, bid: f64) {
        self.session
            .publish_update(
                id,
                UpdateType::Quote,
                FieldList::from_trusted(&fields(bid)),
                false,
            )
            .unwrap();
    }

    /// The bid in the session's own image of an item.
    fn image_bid(&mut self, id: crate::ItemId) -> Option<String> {
        let img = self.session.image(id).expect("an image");
        FieldList::from_trusted(&img.to_field_list_bytes())
            .get(22)
            .map(|v| v.to_string())
    }

    /// The bid in the node's cached image of FEED's `name` (`None` if it has none).
    fn node_bid(&mut self, name: &str) -> Option<String> {
        let img = self.core.cached_image("FEED", name)?;
        FieldList::from_trusted(&img).get(22).map(|v| v.to_string())
    }
}

#[test]
fn a_publisher_session_announces_publishes_and_updates_its_service() {
    let mut lab = PubLab::new(false);
    lab.connect();
    assert_eq!(lab.core.services(), [("FEED".to_string(), true)]);
    let id = lab.refresh("A", 100.0);
    lab.update(id, 101.0);
    lab.pump();
    assert_eq!(lab.node_bid("A"), Some("101.00".into()), "cached");
    assert_eq!(lab.session.updates_sent(), 1);
}

#[test]
fn queued_updates_go_out_in_order_with_the_sessions_other_messages() {
    let (mut lab, id, sub) = PubLab::publishing_a_to_a_subscriber();
    lab.pump();
    let got = lab.received(sub);
    assert_eq!(got.last(), Some(&ok_refresh(0, true)));
    // Three updates (queued), a new image (which must follow them), one more update,
    // and an update too large for one message (refused at once, the queue kept).
    for bid in [101.0, 102.0, 103.0] {
        lab.update(id, bid);
    }
    lab.refresh("A", 110.0);
    assert_eq!(
        lab.image_bid(id),
        Some("110.00".into()),
        "the image replaces the updates before it"
    );
    lab.update(id, 111.0);
    let huge = "x".repeat(65_535);
    let too_large = encode_field_list([
        (1, Value::Utf8(&huge)),
        (22, Value::Real(tickwire_proto::Real::new(1, 0))),
    ]);
    let refused = lab.session.publish_update(
        id,
        UpdateType::Quote,
        FieldList::from_trusted(&too_large),
        false,
    );
    assert!(
        refused.is_err(),
        "an update over the message limit: {refused:?}"
    );
    assert_eq!(lab.session.updates_sent(), 4);
    lab.pump();
    assert_eq!(
        lab.received(sub),
        [
            Seen::Update { seq: 1 },
            Seen::Update { seq: 2 },
            Seen::Update { seq: 3 },
            ok_refresh(3, false),
            Seen::Update { seq: 4 },
        ]
    );
    // The refused update still went into the image, as any published update does.
    let img = lab.session.image(id).unwrap();
    assert_eq!(img.get_raw(1).map(|v| v.len()), Some(1 + 3 + 65_535));
}

/// An update too large to queue, but not for one message, goes at once, after the
/// queued ones: sent, counted and merged into the image as any other.
#[test]
fn an_update_too_large_to_queue_is_sent_at_once_after_the_queued_ones() {
    let (mut lab, id, sub) = PubLab::publishing_a_to_a_subscriber();
    lab.pump();
    lab.received(sub);
    lab.update(id, 101.0);
    let text = "x".repeat(65_480);
    let large = encode_field_list([
        (1, Value::Utf8(&text)),
        (22, Value::Real(tickwire_proto::Real::new(10_200, -2))),
    ]);
    assert!(large.len() > tickwire_proto::message::MAX_MESSAGE_BODY - 64);
    lab.session
        .publish_update(
            id,
            UpdateType::Quote,
            FieldList::from_trusted(&large),
            false,
        )
        .unwrap();
    assert_eq!(lab.session.updates_sent(), 2);
    assert_eq!(lab.image_bid(id), Some("102.00".into()));
    lab.pump();
    assert_eq!(
        lab.received(sub),
        [Seen::Update { seq: 1 }, Seen::Update { seq: 2 }]
    );
    assert_eq!(lab.node_bid("A"), Some("102.00".into()));
}

#[test]
fn an_interactive_publisher_session_is_asked_answers_and_is_told_when_nobody_watches() {
    let mut lab = PubLab::new(true);
    lab.connect();
    let sub = lab.subscribe("A");
    let events = lab.pump();
    assert_eq!(
        events,
        [crate::PublisherEvent::Request { name: "A".into() }]
    );
    let id = lab.refresh("A", 100.0);
    lab.pump();
    let got = lab.received(sub);
    assert!(
        got.contains(&ok_refresh(0, true)),
        "a solicited refresh: {got:?}"
    );
    assert!(lab.session.is_open(id));
    let mut frame = Vec::new();
    Message::Close { stream_id: 1 }.encode(&mut frame).unwrap();
    lab.core.on_frame(sub, &frame, lab.now);
    let events = lab.pump();
    assert_eq!(events, [crate::PublisherEvent::Closed { item: id }]);
    assert!(!lab.session.is_open(id));
}

/// A subscriber of the node's that asks for `name` on stream 1 and closes it at once.
fn ask_and_close(lab: &mut PubLab, name: &str) {
    let sub = lab.subscribe(name);
    let mut frame = Vec::new();
    Message::Close { stream_id: 1 }.encode(&mut frame).unwrap();
    lab.core.on_frame(sub, &frame, lab.now);
}

/// The node closes a request before the image arrives (its only subscriber left): the
/// image is not sent on the closed stream, which the node takes as a protocol error and
/// drops the publisher for; the next request is answered as ever.
#[test]
fn a_request_the_node_closes_before_its_answer_is_not_answered() {
    let mut lab = PubLab::new(true);
    lab.connect();
    // Asked, told to the application, closed before it answers.
    let sub = lab.subscribe("A");
    assert_eq!(
        lab.pump(),
        [crate::PublisherEvent::Request { name: "A".into() }]
    );
    let mut frame = Vec::new();
    Message::Close { stream_id: 1 }.encode(&mut frame).unwrap();
    lab.core.on_frame(sub, &frame, lab.now);
    assert_eq!(lab.pump(), []);
    let id = lab.refresh("A", 100.0);
    assert_eq!(lab.pump(), []);
    assert!(!lab.session.is_open(id));
    // Asked and closed in one read, for an item the publisher has.
    ask_and_close(&mut lab, "A");
    lab.pump();
    assert!(!lab.session.is_open(id));
    // Still the service's publisher: a new request is answered from the image.
    let sub = lab.subscribe("A");
    lab.pump();
    assert!(lab.session.is_open(id));
    let got = lab.received(sub);
    assert!(got.contains(&ok_refresh(0, true)), "{got:?}");
}

#[test]
fn a_publisher_session_re_images_everything_after_a_reconnect() {
    let (mut lab, id, sub) = PubLab::publishing_a_to_a_subscriber();
    lab.received(sub);

    // The connection drops; updates go on into the image meanwhile.
    lab.core.on_disconnect(lab.conn.take().unwrap(), lab.now);
    lab.session
        .connection_lost(ClientError::Disconnected("test".into()), lab.now)
        .unwrap();
    lab.update(id, 105.0);
    assert_eq!(
        lab.session.updates_sent(),
        0,
        "nothing sent without a connection"
    );
    assert_eq!(
        lab.session.take_events(),
        [crate::PublisherEvent::Disconnected {
            reason: "connection to the node lost: test".into()
        }]
    );
    lab.now += Duration::from_millis(100);
    assert_eq!(lab.connect(), [crate::PublisherEvent::Reconnected]);
    // The subscriber that stayed gets the current image, ok again.
    assert_eq!(lab.node_bid("A"), Some("105.00".into()), "re-imaged");
    assert_eq!(lab.core.services(), [("FEED".to_string(), true)]);
    let got = lab.received(sub);
    assert!(got.contains(&ok_refresh(1, false)), "{got:?}");
}

#[test]
fn updates_merged_in_batches_leave_every_image_as_if_merged_one_by_one() {
    let mut lab = PubLab::new(false);
    lab.connect();
    let ids: Vec<_> = ["A", "B", "C"]
        .iter()
        .map(|n| lab.refresh(n, 100.0))
        .collect();
    // More than one batch, interleaved, ending part-way through a batch.
    let mut last = [0.0; 3];
    for i in 0..200 {
        let k = (i * 7) % 3;
        let bid = 100.0 + i as f64 / 100.0;
        lab.update(ids[k], bid);
        last[k] = bid;
    }
    for (k, &id) in ids.iter().enumerate() {
        assert_eq!(
            lab.image_bid(id),
            Some(format!("{:.2}", last[k])),
            "item {k}"
        );
    }
    // A refresh after pending updates replaces them: its image is what stays.
    for i in 0..10 {
        lab.update(ids[0], 200.0 + i as f64);
    }
    lab.refresh("A", 50.0);
    assert_eq!(lab.image_bid(ids[0]), Some("50.00".into()));
    // The node got every update in order: its image is the last one sent.
    lab.pump();
    assert_eq!(lab.node_bid("B"), Some(format!("{:.2}", last[1])), "cached");
}

/// With ids handed out again (as a node's upstream link has them), a session that opens
/// and closes streams for ever keeps to a few ids, and an update of a closed stream
/// still on its way never reaches the stream that takes its id next.
#[test]
fn reused_stream_ids_stay_few_and_a_late_update_never_reaches_the_next_stream() {
    let mut lab = Lab::reusing_ids();
    let mut most = 0;
    let mut seq = 1;
    for round in 0..500u32 {
        let a = lab.subscribe("FEED", "A");
        let got = lab.pump().unwrap();
        assert!(
            got.iter()
                .any(|(e, _)| matches!(e, Event::Refresh { name, .. } if name == "A")),
            "round {round}: {got:?}"
        );
        // An update of A is on its way when A is closed and B opened at once.
        seq += 1;
        lab.update(1, seq, 100.0 + f64::from(round % 50));
        lab.session.unsubscribe(a).unwrap();
        let b = lab.subscribe("FEED", "B");
        for (e, _) in lab.pump().unwrap() {
            if let Event::Refresh { name, .. } | Event::Update { name, .. } = &e {
                assert!(
                    name != "B" || bid(&e).and_then(|b| b.parse::<f64>().ok()) == Some(200.0),
                    "round {round}: A's update on B's stream {b}: {e:?}"
                );
                assert!(name != "A", "round {round}: A after its close: {e:?}");
            }
        }
        lab.session.unsubscribe(b).unwrap();
        most = most.max(a).max(b);
    }
    assert!(
        most <= 8,
        "1,000 streams opened and closed took ids up to {most}"
    );
}

/// A node (or a peer posing as one) that asks for the same large image again and again
/// and reads none of the answers: the publisher holds at most its bound of unread
/// output (`max_unread_output`), then fails the connection saying why.
#[test]
fn a_node_that_asks_for_images_and_reads_none_cannot_make_the_publisher_hold_them_all() {
    let mut lab = PubLab::new(false);
    lab.connect();
    // A 50 KB image.
    let big = "x".repeat(50_000);
    let image = encode_field_list([(3, Value::Ascii(&big))]);
    lab.session
        .publish_refresh("A", FieldList::from_trusted(&image))
        .unwrap();
    lab.pump();
    let c = lab.session.connection().unwrap();
    c.max_unread_output = 4 << 20;
    let mut requests = tickwire_proto::FrameWriter::new(1 << 20);
    for sid in 0..100u32 {
        requests
            .push(&Message::Request(tickwire_proto::Request::streaming(
                0x8000_0000 + sid,
                "FEED",
                "A",
            )))
            .unwrap();
    }
    let requests = requests.sealed_bytes().to_vec();
    let mut failed = None;
    for round in 0..100 {
        let c = lab.session.connection().unwrap();
        c.receive(&requests, lab.now);
        if let Err(e) = lab.session.poll(lab.now) {
            failed = Some((round, e));
            break;
        }
        let waiting = lab.session.connection().unwrap().pending_output();
        assert!(waiting <= (4 << 20) + 60_000 * 100, "{waiting} bytes held");
    }
    let (round, e) = failed.expect("the connection failed");
    assert!(round < 10, "after {round} rounds of 100 requests");
    assert!(e.to_string().contains("does not read"), "{e}");
}

/// The images a publisher sends again after a reconnect are its own to send, not what
/// a node asked for and left unread: more of them than the unread bound (256 MiB by
/// default, which a service of a million items passes) still go out, where the
/// connection failed at once, and again at every reconnect.
#[test]
fn images_sent_again_after_a_reconnect_may_exceed_the_unread_output_bound() {
    let mut lab = PubLab::new(false);
    lab.connect();
    let big = "x".repeat(50_000);
    let image = encode_field_list([(3, Value::Ascii(&big))]);
    for i in 0..100 {
        lab.session
            .publish_refresh(&format!("I{i}"), FieldList::from_trusted(&image))
            .unwrap();
        lab.pump();
    }
    lab.core.on_disconnect(lab.conn.take().unwrap(), lab.now);
    lab.session
        .connection_lost(ClientError::Disconnected("test".into()), lab.now)
        .unwrap();
    lab.session.take_events();
    lab.now += Duration::from_millis(100);
    lab.session.connecting(lab.now).unwrap();
    // 5 MB of images against a bound of 1 MiB.
    lab.session.connection().unwrap().max_unread_output = 1 << 20;
    lab.conn = Some(lab.core.connect("publisher", lab.now));
    lab.to_core = FrameReader::new(1 << 20);
    assert_eq!(lab.pump(), [crate::PublisherEvent::Reconnected]);
    assert!(lab.core.cached_image("FEED", "I99").is_some(), "re-imaged");
}

/// A request that cannot be encoded (a name longer than the protocol takes) is refused
/// when made, connected or not: held for later, it failed every reconnection, and the
/// other streams never came back.
#[test]
fn a_request_that_cannot_be_sent_is_refused_even_while_disconnected() {
    let mut lab = Lab::new();
    let long = "x".repeat(70_000);
    let err = lab
        .session
        .subscribe("FEED", &long, RequestOptions::default())
        .expect_err("refused before any connection");
    assert!(
        err.to_string().contains("too long") || err.to_string().contains("exceeds"),
        "{err}"
    );
    let a = lab.subscribe("FEED", "A");
    lab.connect();
    let got = lab.pump().unwrap();
    assert!(
        got.iter()
            .any(|(e, _)| matches!(e, Event::Refresh { stream, .. } if *stream == a)),
        "{got:?}"
    );
}

/// A directory of more services than any node holds is kept only up to
/// `MAX_DIRECTORY`: a peer posing as a node cannot make the session hold names without
/// end.
#[test]
fn the_directory_a_session_keeps_is_bounded() {
    let mut lab = Lab::connected();
    let names: Vec<String> = (0..crate::watchlist::MAX_DIRECTORY + 10)
        .map(|i| format!("S{i}"))
        .collect();
    for chunk in names.chunks(2_000) {
        lab.receive(&[Message::Directory(Directory::of(
            chunk.iter().map(|n| (n.as_str(), ServiceState::Up)),
        ))]);
        lab.session.poll_events(lab.now, |_, _| {}).unwrap();
    }
    assert_eq!(
        lab.session.directory().len(),
        crate::watchlist::MAX_DIRECTORY
    );
}

/// A recoverable close repeated (by a peer posing as a node, say) is one stream to ask
/// for again, not one request per copy.
#[test]
fn a_repeated_recoverable_close_asks_for_the_stream_again_once() {
    let (mut lab, a) = Lab::watching_a();
    lab.receive(&vec![closed_recover(a); 100]);
    lab.session.poll_events(lab.now, |_, _| {}).unwrap();
    lab.now += Duration::from_millis(500);
    lab.session.handle_timeout(lab.now).unwrap();
    assert_eq!(requests_waiting(&mut lab, a), 1);
}

/// Requests for stream `sid` the session has to send.
fn requests_waiting(lab: &mut Lab, sid: u32) -> usize {
    let sent = lab.session.connection().unwrap().transmit().to_vec();
    let mut reader = FrameReader::new(1 << 20);
    reader.extend(&sent);
    let mut requests = 0;
    while let Some(f) = reader.next_frame().unwrap() {
        for m in tickwire_proto::MessageIter::new(f) {
            if matches!(m.unwrap().message, Message::Request(r) if r.stream_id == sid) {
                requests += 1;
            }
        }
    }
    requests
}

/// A stream closed while it waits to be asked for again is not asked for (its place
/// in the list is left to be passed over).
#[test]
fn a_stream_closed_while_it_waits_to_be_asked_again_is_not_asked_for() {
    let (mut lab, a) = Lab::watching_a();
    lab.receive(&[closed_recover(a)]);
    lab.session.poll_events(lab.now, |_, _| {}).unwrap();
    lab.session.unsubscribe(a).unwrap();
    lab.now += Duration::from_millis(500);
    lab.session.handle_timeout(lab.now).unwrap();
    assert_eq!(requests_waiting(&mut lab, a), 0);
}

/// After a reconnection to a node that does not know the service yet, the streams wait
/// for it; one closed meanwhile is not asked for when the service appears, the others
/// are.
#[test]
fn a_stream_closed_while_it_waits_for_its_service_is_not_asked_for() {
    let (mut lab, a, b) = Lab::watching_a_and_b();
    lab.break_connection();
    lab.pump().unwrap();
    // The node restarted: its publisher is back, FEED not announced yet.
    let (core, publisher) = node_with_publisher(lab.now);
    (lab.core, lab.publisher) = (core, publisher);
    lab.now += Duration::from_secs(2);
    lab.connect();
    lab.pump().unwrap();
    lab.session.unsubscribe(a).unwrap();
    lab.announce(&["FEED"]);
    lab.refresh("A", 1, 101.0);
    lab.refresh("B", 2, 201.0);
    let events = lab.pump().unwrap();
    let refreshed: Vec<u32> = events
        .iter()
        .filter_map(|(e, _)| match e {
            Event::Refresh { stream, .. } => Some(*stream),
            _ => None,
        })
        .collect();
    assert_eq!(refreshed, vec![b], "{events:?}");
}

/// With ids handed out again, a stream closed after its connection was lost (its
/// "connection lost" status not taken yet) leaves no status to the stream that takes
/// its id on the next connection.
#[test]
fn a_made_up_status_of_a_closed_stream_never_reaches_the_stream_with_its_id_next() {
    let mut lab = Lab::reusing_ids();
    let a = lab.subscribe("FEED", "A");
    lab.pump().unwrap();
    lab.break_connection();
    lab.session.unsubscribe(a).unwrap();
    lab.now += Duration::from_secs(2);
    lab.connect();
    let b = lab.subscribe("FEED", "B");
    assert_eq!(b, a, "the id is handed out again on the new connection");
    for (e, _) in lab.pump().unwrap() {
        if let Event::Status { name, state, .. } = &e {
            assert!(
                !(name == "B" && state.code == code::CONNECTION_LOST),
                "A's made-up status on B: {e:?}"
            );
        }
    }
}
