//! Tickwire's test kit: a node's core and any number of client sessions (publishers and
//! subscribers of the client library) joined in memory on one fake clock, with no socket
//! and no thread. Bytes move between them as the node's event loop and the client
//! library's drivers move them; time moves only when the test says so, to the next
//! deadline of any part ([`Net::step`]) or by a given amount ([`Net::advance`]). A test
//! of timing (heartbeats, timeouts, back-off) then takes microseconds and never depends
//! on how busy the machine is.
//!
//! Modelled on quinn-proto's test `Pair`. What it must not do: stand in for a part (every
//! part here is the real one the node and the client library run), or sleep.
//!
//! ```
//! use tickwire_testkit::{service, Net};
//! use tickwire_client::{Event, RequestOptions};
//! use tickwire_proto::{encode_field_list, FieldList, Real, Value};
//!
//! let mut net = Net::new(Default::default());
//! let feed = net.publisher(service("FEED"));
//! let fields = encode_field_list([(22, Value::Real(Real::new(10_125, -2)))]);
//! net.publishing(feed).publish_refresh("TRI.N", FieldList::decode(&fields).unwrap()).unwrap();
//! let sub = net.subscriber();
//! net.drive();
//! net.subscribing(sub).subscribe("FEED", "TRI.N", RequestOptions::default()).unwrap();
//! net.drive();
//! assert!(net.events(sub).iter().any(|e| matches!(e, Event::Refresh { .. })));
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::time::{Duration, Instant};
use tickwire_client::{
    ClientError, ClientSession, Event, LoginOptions, PublisherEvent, PublisherSession,
    ReconnectPolicy, ServiceOptions, SubscriberSession,
};
use tickwire_core::{ConnId, CoreConfig, Node};
use tickwire_proto::frame::FrameReader;
use tickwire_proto::Role;

/// Turns [`Net::drive`] takes at most: more means two parts keep each other busy for
/// ever (a livelock), which is a bug the test should see.
const MAX_TURNS: usize = 10_000;
/// Bytes a peer's "socket" moves per turn each way (as a socket buffer would).
const WINDOW: usize = 256 * 1024;

/// A non-interactive service that is up at once, takes no posts.
pub fn service(name: &str) -> ServiceOptions {
    ServiceOptions {
        service: name.to_string(),
        interactive: false,
        start_down: false,
        accept_posts: false,
    }
}

/// Which peer of a [`Net`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerId(usize);

enum Session {
    Publisher(Box<PublisherSession>),
    Subscriber(Box<SubscriberSession>),
}

/// One client session and its connection to the node.
struct Peer {
    session: Session,
    /// The node's id of the connection; `None` while disconnected.
    conn: Option<ConnId>,
    /// Frames from the peer, cut at frame boundaries for the core.
    from_peer: FrameReader,
    /// What the peer was told: events (subscribers), publisher events.
    events: Vec<Event>,
    publisher_events: Vec<PublisherEvent>,
    /// Why the session ended, if it did (a fatal error: refused login...).
    ended: Option<ClientError>,
    /// A hung peer: what it sends does not reach the node.
    muted: bool,
}

impl Session {
    /// What both kinds of session offer their driver.
    fn part(&mut self) -> &mut dyn ClientSession {
        match self {
            Session::Publisher(p) => p.as_mut(),
            Session::Subscriber(s) => s.as_mut(),
        }
    }

    fn part_ref(&self) -> &dyn ClientSession {
        match self {
            Session::Publisher(p) => p.as_ref(),
            Session::Subscriber(s) => s.as_ref(),
        }
    }
}

/// A node's core and its peers on one fake clock.
pub struct Net {
    now: Instant,
    /// The node's core, for the test to look at (items, stats, config).
    pub node: Node,
    peers: Vec<Peer>,
    closing: Vec<ConnId>,
    dirty: Vec<ConnId>,
}

impl Net {
    /// A node with `cfg`; the clock starts now and moves only by the test.
    pub fn new(cfg: CoreConfig) -> Net {
        let now = Instant::now();
        Net {
            now,
            node: Node::new(cfg, now),
            peers: Vec::new(),
            closing: Vec::new(),
            dirty: Vec::new(),
        }
    }

    /// The fake clock.
    pub fn now(&self) -> Instant {
        self.now
    }

    fn login(role: Role) -> LoginOptions {
        LoginOptions {
            role,
            application: "tickwire-testkit".into(),
            user: String::new(),
            token: String::new(),
            slow_consumer: None,
            welcome_timeout: Duration::from_secs(5),
        }
    }

    fn policy() -> ReconnectPolicy {
        ReconnectPolicy {
            reconnect: true,
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            retry_rejected: false,
        }
    }

    /// A publisher of `service`, connected (its Login queued; [`Net::drive`] logs it in).
    pub fn publisher(&mut self, service: ServiceOptions) -> PeerId {
        let s = PublisherSession::new(
            Net::login(Role::Publisher),
            Net::policy(),
            service,
            self.now,
        );
        self.add(Session::Publisher(Box::new(s)))
    }

    /// A subscriber, connected (its Login queued).
    pub fn subscriber(&mut self) -> PeerId {
        let s = SubscriberSession::new(Net::login(Role::Subscriber), Net::policy(), self.now);
        self.add(Session::Subscriber(Box::new(s)))
    }

    fn add(&mut self, session: Session) -> PeerId {
        self.peers.push(Peer {
            session,
            conn: None,
            from_peer: FrameReader::new(self.node.config().limits.max_frame),
            events: Vec::new(),
            publisher_events: Vec::new(),
            ended: None,
            muted: false,
        });
        let id = PeerId(self.peers.len() - 1);
        self.connect(id);
        id
    }

    /// Opens a new connection for `peer` (as its driver does when the session wants one).
    fn connect(&mut self, id: PeerId) {
        let now = self.now;
        let peer = &mut self.peers[id.0];
        if let Err(e) = peer.session.part().connecting(now) {
            peer.ended = Some(e);
            return;
        }
        peer.conn = Some(self.node.connect(&format!("testkit-peer-{}", id.0), now));
        peer.from_peer = FrameReader::new(self.node.config().limits.max_frame);
    }

    /// The publisher session of `peer` (panics for a subscriber).
    pub fn publishing(&mut self, peer: PeerId) -> &mut PublisherSession {
        match &mut self.peers[peer.0].session {
            Session::Publisher(p) => p,
            Session::Subscriber(_) => panic!("{peer:?} is a subscriber"),
        }
    }

    /// The subscriber session of `peer` (panics for a publisher).
    pub fn subscribing(&mut self, peer: PeerId) -> &mut SubscriberSession {
        match &mut self.peers[peer.0].session {
            Session::Subscriber(s) => s,
            Session::Publisher(_) => panic!("{peer:?} is a publisher"),
        }
    }

    /// The events a subscriber received since the last call.
    pub fn events(&mut self, peer: PeerId) -> Vec<Event> {
        std::mem::take(&mut self.peers[peer.0].events)
    }

    /// The events a publisher received since the last call.
    pub fn publisher_events(&mut self, peer: PeerId) -> Vec<PublisherEvent> {
        std::mem::take(&mut self.peers[peer.0].publisher_events)
    }

    /// Why the session of `peer` ended, if it did.
    pub fn ended(&self, peer: PeerId) -> Option<&ClientError> {
        self.peers[peer.0].ended.as_ref()
    }

    /// Whether `peer` has a connection to the node now.
    pub fn is_connected(&self, peer: PeerId) -> bool {
        self.peers[peer.0].conn.is_some()
    }

    /// A hung peer (`true`): what it sends stops reaching the node, which it still hears;
    /// `false` lets it through again.
    pub fn mute(&mut self, peer: PeerId, muted: bool) {
        self.peers[peer.0].muted = muted;
    }

    /// Cuts `peer`'s connection as a network would (both ends see it closed).
    pub fn disconnect(&mut self, peer: PeerId) {
        self.lose(peer.0, ClientError::Disconnected("cut by the test".into()));
        self.drive();
    }

    fn lose(&mut self, i: usize, err: ClientError) {
        let now = self.now;
        let peer = &mut self.peers[i];
        if let Some(c) = peer.conn.take() {
            self.node.on_disconnect(c, now);
        }
        if let Err(e) = peer.session.part().connection_lost(err, now) {
            peer.ended = Some(e);
        }
    }

    /// One turn at the current time: every peer's output to the node, the node's work,
    /// the node's output to every peer, and each session's handling of it. Whether any
    /// byte moved or any part did something.
    pub fn turn(&mut self) -> bool {
        let now = self.now;
        let mut moved = false;
        for i in 0..self.peers.len() {
            moved |= self.peer_to_node(i, now);
        }
        self.node.take_dirty(&mut self.dirty);
        let dirty = std::mem::take(&mut self.dirty);
        for c in &dirty {
            if let Some(i) = self.peers.iter().position(|p| p.conn == Some(*c)) {
                moved |= self.node_to_peer(i, now);
            }
        }
        self.dirty = dirty;
        self.dirty.clear();
        // As the node's event loop: the images catch up once the output is out.
        self.node.settle();
        self.node.take_closing(&mut self.closing);
        for c in std::mem::take(&mut self.closing) {
            if let Some(i) = self.peers.iter().position(|p| p.conn == Some(c)) {
                // What the node wrote before closing reaches the peer, which reads it
                // (a refusal's reason) before it sees the connection end.
                self.node_to_peer(i, now);
                self.poll_session(i, now);
                if self.peers[i].conn.is_some() {
                    self.lose(i, ClientError::Disconnected("closed by the node".into()));
                }
                moved = true;
            }
        }
        for i in 0..self.peers.len() {
            moved |= self.poll_session(i, now);
        }
        moved
    }

    /// What the peer's connection has to send, into the core.
    fn peer_to_node(&mut self, i: usize, now: Instant) -> bool {
        let peer = &mut self.peers[i];
        let Some(c) = peer.conn.filter(|_| !peer.muted) else {
            return false;
        };
        let Some(conn) = peer.session.part().connection() else {
            return false;
        };
        let bytes = conn.transmit();
        let n = bytes.len().min(WINDOW);
        if n == 0 {
            return false;
        }
        peer.from_peer.extend(&bytes[..n]);
        conn.sent(n, now);
        self.node.on_bytes_received(c, now);
        loop {
            match peer.from_peer.next_frame() {
                Ok(Some(frame)) => self.node.on_frame(c, frame, now),
                Ok(None) => break,
                Err(e) => {
                    self.node.on_frame_error(c, &e, now);
                    break;
                }
            }
        }
        true
    }

    /// What the core queued for the peer's connection, into the peer.
    fn node_to_peer(&mut self, i: usize, now: Instant) -> bool {
        let peer = &mut self.peers[i];
        let Some(c) = peer.conn else { return false };
        let Some(out) = self.node.output(c) else {
            return false;
        };
        let bytes = out.sealed_bytes();
        let n = bytes.len().min(WINDOW);
        if n == 0 {
            return false;
        }
        let taken = bytes[..n].to_vec();
        out.consume(n);
        self.node.on_output_written(c);
        if let Some(conn) = peer.session.part().connection() {
            conn.receive(&taken, now);
        }
        true
    }

    /// The session handles what it received; its events are kept for the test.
    fn poll_session(&mut self, i: usize, now: Instant) -> bool {
        let peer = &mut self.peers[i];
        let r = match &mut peer.session {
            Session::Subscriber(s) => {
                let events = &mut peer.events;
                s.poll_events(now, |e, _| events.push(Event::from(&e)))
                    .map(|n| n > 0)
            }
            Session::Publisher(p) => p.poll(now).map(|()| {
                let got = p.take_events();
                let any = !got.is_empty();
                peer.publisher_events.extend(got);
                any
            }),
        };
        match r {
            Ok(any) => any,
            Err(e) => {
                self.lose(i, e);
                true
            }
        }
    }

    /// Turns until nothing moves, at the current time.
    pub fn drive(&mut self) {
        for _ in 0..MAX_TURNS {
            if !self.turn() {
                return;
            }
        }
        panic!("the parts were still busy after {MAX_TURNS} turns at one instant (a livelock)");
    }

    /// The earliest deadline of any part: the node's timers, each session's
    /// (heartbeats, the Welcome's deadline, a reconnect's back-off).
    pub fn next_deadline(&self) -> Instant {
        let sessions = self.peers.iter().filter(|p| p.ended.is_none()).map(|p| {
            let part = p.session.part_ref();
            if p.conn.is_none() {
                Some(part.retry_at())
            } else {
                part.poll_timeout()
            }
        });
        sessions
            .chain(std::iter::once(self.node.poll_timeout()))
            .flatten()
            .min()
            .expect("the node has a deadline")
    }

    /// Moves the clock to the next deadline (never back), lets every part handle its
    /// timers there, reconnects the sessions that want it, then drives. Returns the new
    /// time.
    pub fn step(&mut self) -> Instant {
        self.now = self.now.max(self.next_deadline());
        self.timers();
        self.drive();
        self.now
    }

    /// Moves the clock by `d`, stopping at every deadline on the way (in order), as a
    /// real run of that length would.
    pub fn advance(&mut self, d: Duration) {
        let until = self.now + d;
        loop {
            let next = self.next_deadline();
            if next > until {
                break;
            }
            self.now = self.now.max(next);
            self.timers();
            self.drive();
        }
        self.now = until;
        self.timers();
        self.drive();
    }

    fn timers(&mut self) {
        let now = self.now;
        if self.node.poll_timeout().is_some_and(|t| now >= t) {
            self.node.handle_timeout(now);
        }
        for i in 0..self.peers.len() {
            let peer = &mut self.peers[i];
            if peer.ended.is_some() {
                continue;
            }
            let part = peer.session.part();
            if peer.conn.is_none() {
                if part.wants_connect(now) {
                    self.connect(PeerId(i));
                }
                continue;
            }
            if part.poll_timeout().is_some_and(|t| now >= t) {
                if let Err(e) = part.handle_timeout(now) {
                    self.lose(i, e);
                }
            }
        }
    }
}
