//! The subscriber's protocol without I/O: a watchlist of item streams over a
//! [`Connection`] that comes and goes. It opens and closes streams, turns what the node
//! sends into events, makes up the statuses of a lost connection, and after a
//! reconnect requests the whole watchlist again (each stream once the directory lists
//! its service). Reconnection delays are its decision too: the driver asks
//! [`SubscriberSession::wants_connect`].

use crate::events::{EventRef, ItemRef};
pub use crate::reconnect::ReconnectPolicy;
use crate::reconnect::{link_methods, Link};
use crate::session::{is_fatal, Connection, LoginOptions, Session};
use crate::stream_ids::IdPool;
use crate::ClientError;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};
use tickwire_proto::frame::FrameWriter;
use tickwire_proto::{
    code, DataState, FieldList, Message, MessageIter, Post, Replay, ReplayFrom, Request,
    ServiceState, State, Status, StreamState, View,
};

/// Identifies one item stream of a subscriber.
pub type StreamId = u32;

/// Where a post goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostTo<'a> {
    /// The item of one of the session's open streams.
    Stream(StreamId),
    /// Any item, by name (off-stream).
    Item {
        /// The item's service.
        service: &'a str,
        /// The item's name.
        name: &'a str,
    },
}

/// How an item is asked for.
#[derive(Debug, Clone, Default)]
pub struct RequestOptions {
    /// One refresh, then the stream closes.
    pub snapshot: bool,
    /// Only these field ids (refresh and updates).
    pub view: Option<Vec<i16>>,
    /// Start with the item's history from the node's journal, from this sequence number
    /// or time, then go on live with no gap and no repeat (a Replay instead of a
    /// Request; docs/PROTOCOL.md 6.15). After a lost connection the stream asks again
    /// from the message after the last one it delivered. Not with `snapshot` or `view`.
    pub replay: Option<ReplayFrom>,
}

/// One stream of the watchlist.
#[repr(align(32))]
struct Watch {
    name: Box<str>,
    /// Index in the session's [`Services`].
    service: u32,
    streaming: bool,
    /// Waiting in `held` to be asked for (the list is cleaned lazily: a stream closed
    /// meanwhile, or whose id went to another, is skipped there by this flag).
    held: bool,
    /// Waiting in `recover` to be asked for again (cleaned lazily, as `held`): one
    /// look, where a search of the list made a node closing 100,000 streams with
    /// closed-recover cost the session 10^10 steps.
    recovering: bool,
    /// A view or a replay: few streams have one, so it is kept out of line.
    extra: Option<Box<WatchExtra>>,
}

// Every update reads its stream's entry at random in a watchlist that can hold
// hundreds of thousands of streams: at 32 bytes, aligned, an entry is one cache line
// (two per line), not the 96 bytes over two lines it took with its strings inline.
const _: () = assert!(std::mem::size_of::<Option<Watch>>() == 32);
const _: () = assert!(std::mem::align_of::<Option<Watch>>() == 32);

/// The rarely used parts of a stream.
struct WatchExtra {
    view: Option<Vec<i16>>,
    /// A replay stream: where its history starts (moved on past every message
    /// delivered, so a re-request after a lost connection neither repeats nor skips).
    replay: Option<ReplayFrom>,
}

impl Watch {
    fn replay(&self) -> Option<ReplayFrom> {
        self.extra.as_ref().and_then(|x| x.replay)
    }

    /// A replay stream's next message is the one after `seq`.
    #[inline]
    fn delivered(&mut self, seq: u32) {
        if let Some(x) = self.extra.as_mut().filter(|x| x.replay.is_some()) {
            x.replay = Some(ReplayFrom::Seq(seq.wrapping_add(1)));
        }
    }
}

/// The service names of a watchlist, each stored once: streams refer to them by index.
#[derive(Default)]
struct Services {
    names: Vec<Box<str>>,
    index: HashMap<Box<str>, u32>,
}

impl Services {
    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(name.into());
        self.index.insert(name.into(), i);
        i
    }

    fn name(&self, i: u32) -> &str {
        &self.names[i as usize]
    }
}

/// Services the session keeps in its directory at most: ten times what a node holds by
/// default (`limits.max_services`), so that a peer posing as a node cannot make it hold
/// names without end (2,000,000 took 250 MB); past it new ones are not kept, and a
/// request for one waits, as for a service the node does not have.
pub const MAX_DIRECTORY: usize = 100_000;

/// A status made up here (the connection was lost), not yet delivered.
struct Synthetic {
    stream: u32,
    state: State<'static>,
    text: String,
}

/// A watchlist over connections that come and go, without I/O: requests, the
/// statuses of a lost connection, re-requests as services come back. What a
/// [`crate::Subscriber`] drives over a socket.
pub struct SubscriberSession {
    link: Link,
    /// Indexed by stream id (ids are dense, from 1).
    watch: Vec<Option<Watch>>,
    services: Services,
    open_streams: usize,
    next_sid: u32,
    synthetic: VecDeque<Synthetic>,
    directory: BTreeMap<String, ServiceState>,
    /// Streams the node closed with closed-recover, to request again at the given time.
    recover: Vec<(u32, Instant)>,
    /// After a reconnect: streams waiting for their service to appear in the directory.
    held: Vec<u32>,
    /// A stream was held or the directory changed since `held` was last looked at:
    /// it is walked then only, not at every poll (100,000 streams of a service that
    /// never comes back would be walked at each).
    held_look: bool,
    /// Ids of ended streams to hand out again (`reuse_stream_ids`); `None`: every id
    /// is new.
    ids: Option<IdPool>,
    /// The connection's whole first directory: its fence Ping not sent yet, sent, or
    /// answered ([`SubscriberSession::directory_whole`]).
    directory_fence: Fence,
}

/// Where a connection's fence for its first directory stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fence {
    NotSent,
    Sent,
    Answered,
}

/// The token of the Ping sent once logged in: the node answers a Ping after all it
/// sent before reading it, its whole directory of the login among it. (0 is the
/// heartbeat's; stream id fences count up from 1.)
const DIRECTORY_FENCE: u64 = u64::MAX;

impl SubscriberSession {
    /// A session with no connection yet: the driver connects when
    /// [`SubscriberSession::wants_connect`] says so (at once, the first time).
    pub fn new(login: LoginOptions, policy: ReconnectPolicy, now: Instant) -> Self {
        SubscriberSession {
            link: Link::new(login, policy, now),
            watch: vec![None],
            services: Services::default(),
            open_streams: 0,
            next_sid: 1,
            synthetic: VecDeque::new(),
            directory: BTreeMap::new(),
            recover: Vec::new(),
            held: Vec::new(),
            held_look: false,
            ids: None,
            directory_fence: Fence::NotSent,
        }
    }

    /// Hands out the ids of ended streams again, once nothing more can come for their
    /// old streams (`stream_ids`): the session then holds memory for the streams open,
    /// not for every stream it ever opened. For a session that opens and closes streams
    /// for as long as it lives, and reads each event as it comes (an event read later
    /// may name an id already given to another stream).
    pub fn reuse_stream_ids(&mut self) {
        self.ids.get_or_insert_with(IdPool::default);
    }

    /// The driver opened a transport to the node: the Login is queued on a new
    /// connection, and every stream of the watchlist waits to be requested again.
    pub fn connecting(&mut self, now: Instant) -> Result<(), ClientError> {
        self.link.connecting(now)?;
        self.recover.clear(); // everything is requested again
        self.directory.clear(); // the node's directory follows its welcome
        self.directory_fence = Fence::NotSent;
        if let Some(ids) = self.ids.as_mut() {
            ids.new_connection();
        }
        // A restarted node may not know a service until its publisher is back: each
        // request waits until the directory lists the service.
        self.held.clear();
        for (sid, w) in self.watch.iter_mut().enumerate() {
            if let Some(w) = w {
                w.held = true;
                w.recovering = false;
                self.held.push(sid as u32);
            }
        }
        self.held_look = true;
        Ok(())
    }

    /// The connection failed (a transport error, or an error this session returned):
    /// every open stream is told (open/suspect) and a reconnect is scheduled. `Err`
    /// when the session ends instead (a refused login, or no reconnecting).
    pub fn connection_lost(&mut self, err: ClientError, now: Instant) -> Result<(), ClientError> {
        let (watch, synthetic) = (&self.watch, &mut self.synthetic);
        self.link.lost(err, now, |had, err| {
            if !had {
                return;
            }
            // The reason, without a "connection to the node lost" of its own.
            let why = match err {
                ClientError::Disconnected(why) => why.clone(),
                other => other.to_string(),
            };
            let text = format!("connection to the node lost ({why}); reconnecting");
            for (sid, w) in watch.iter().enumerate() {
                if w.is_some() {
                    synthetic.push_back(Synthetic {
                        stream: sid as u32,
                        state: State {
                            stream: StreamState::Open,
                            data: DataState::Suspect,
                            code: code::CONNECTION_LOST,
                            text: "",
                        },
                        text: text.clone(),
                    });
                }
            }
        })
    }

    link_methods!();

    /// The connection, while there is one (logged in or not yet).
    pub fn connection(&mut self) -> Option<&mut Connection> {
        self.link.connection()
    }

    /// The node's whole directory of this connection's login has come (it may come in
    /// several Directory messages: thousands of services): a service not in
    /// [`SubscriberSession::directory`] now is not the node's. False until then, and
    /// again from each new connection.
    pub fn directory_whole(&self) -> bool {
        self.directory_fence == Fence::Answered
    }

    /// Services and their state, as the node's directory messages left them.
    pub fn directory(&self) -> &BTreeMap<String, ServiceState> {
        &self.directory
    }

    /// Open streams in the watchlist.
    pub fn open_streams(&self) -> usize {
        self.open_streams
    }

    /// The item of an open stream.
    pub fn item(&self, sid: StreamId) -> Option<(&str, &str)> {
        self.watch
            .get(sid as usize)?
            .as_ref()
            .map(|w| (self.services.name(w.service), &*w.name))
    }

    /// Opens a stream for an item; its refresh (or a status) comes as an event.
    pub fn subscribe(
        &mut self,
        service: &str,
        name: &str,
        options: RequestOptions,
    ) -> Result<StreamId, ClientError> {
        let sid = match self.ids.as_mut().and_then(|ids| ids.take()) {
            Some(sid) => sid,
            None => {
                let sid = self.next_sid;
                self.next_sid = sid.checked_add(1).ok_or_else(|| {
                    ClientError::Protocol("every stream id of the session is used".into())
                })?;
                sid
            }
        };
        let extra = (options.view.is_some() || options.replay.is_some()).then(|| {
            Box::new(WatchExtra {
                view: options.view,
                replay: options.replay,
            })
        });
        let mut w = Watch {
            name: name.into(),
            service: self.services.intern(service),
            streaming: !options.snapshot,
            held: false,
            recovering: false,
            extra,
        };
        if let Some(conn) = self.link.logged_in() {
            push_request(conn.writer(), sid, &w, &self.services)?;
        } else {
            // Sent later (held, or with the whole watchlist after a reconnect): a request
            // that cannot be encoded (a name or a view too long) is refused now, or it
            // would fail every connection from then on.
            push_request(&mut FrameWriter::new(0), sid, &w, &self.services)?;
            if self.link.is_connected() {
                w.held = true;
                self.held.push(sid);
                self.held_look = true;
            }
        }
        if self.watch.len() <= sid as usize {
            self.watch.resize_with(sid as usize + 1, || None);
        }
        self.watch[sid as usize] = Some(w);
        self.open_streams += 1;
        Ok(sid)
    }

    /// Sends a post (a contribution) to an item: on one of this session's open streams,
    /// or off-stream by service and item name. With `ack`, its answer comes as an
    /// [`EventRef::Ack`] carrying `post_id`; the node refuses a post it cannot route
    /// with such an answer in any case. A post is not kept across a lost connection:
    /// an `Err` says it was not sent.
    pub fn post(
        &mut self,
        to: PostTo<'_>,
        post_id: u32,
        fields: FieldList<'_>,
        ack: bool,
    ) -> Result<(), ClientError> {
        let (stream_id, service, name) = match to {
            PostTo::Stream(sid) => {
                if self.item(sid).is_none() {
                    return Err(ClientError::Protocol(format!(
                        "stream {sid} is not open in this session"
                    )));
                }
                (sid, "", "")
            }
            PostTo::Item { service, name } => (0, service, name),
        };
        let Some(conn) = self.link.logged_in() else {
            return Err(ClientError::Disconnected(
                "not logged in to a node: the post was not sent".into(),
            ));
        };
        conn.writer().push(&Message::Post(Post {
            stream_id,
            post_id,
            ack,
            image: false,
            redelivered: false,
            service,
            name,
            fields,
        }))?;
        Ok(())
    }

    /// Sends a file-transfer message (`tickwire-files`'s wire format) to the node.
    pub fn send_files(&mut self, body: &[u8]) -> Result<(), ClientError> {
        let conn = self
            .link
            .logged_in()
            .ok_or_else(|| ClientError::Disconnected("not connected".into()))?;
        conn.writer().push(&Message::Files(body))?;
        Ok(())
    }

    /// Closes a stream.
    pub fn unsubscribe(&mut self, sid: StreamId) -> Result<(), ClientError> {
        if self
            .watch
            .get_mut(sid as usize)
            .and_then(|w| w.take())
            .is_some()
        {
            self.open_streams -= 1;
            // Its places in `held` and `recover`, if any, go when those lists are next
            // read (its flags went with it): no walk of a list per close.
            // A status made up for it and not delivered yet would reach the stream that
            // takes its id next.
            if !self.synthetic.is_empty() {
                self.synthetic.retain(|s| s.stream != sid);
            }
            if let Some(conn) = self.link.logged_in() {
                conn.writer().push(&Message::Close { stream_id: sid })?;
            }
            // Free once the fence the next poll sends is answered, or with the next
            // connection.
            if let Some(ids) = self.ids.as_mut() {
                ids.give_up(sid);
            }
        }
        Ok(())
    }

    /// Changes the view of an open stream where it stands (`None`: every field), with
    /// no new image: the updates from now on carry the new view (as RWF's `NO_REFRESH`
    /// reissue; docs/PROTOCOL.md 6.8). A stream that is reopened after a lost
    /// connection is asked for with it. `Err` for a stream not open, or a replay's
    /// (which takes no view).
    pub fn change_view(
        &mut self,
        sid: StreamId,
        view: Option<Vec<i16>>,
    ) -> Result<(), ClientError> {
        let Some(w) = self.watch.get_mut(sid as usize).and_then(|w| w.as_mut()) else {
            return Err(ClientError::Protocol(format!("stream {sid} is not open")));
        };
        if w.replay().is_some() {
            return Err(ClientError::Protocol(format!(
                "stream {sid} is a replay: it takes no view"
            )));
        }
        match (&mut w.extra, view) {
            (Some(x), view) => x.view = view,
            (None, None) => {}
            (extra @ None, view) => {
                *extra = Some(Box::new(WatchExtra { view, replay: None }));
            }
        }
        // Held (not asked for yet), or to be asked for again: the request will carry it.
        if w.held || w.recovering {
            return Ok(());
        }
        if let Some(conn) = self.link.logged_in() {
            let view = w.extra.as_ref().and_then(|x| x.view.as_deref());
            conn.writer().push(&Message::Request(Request {
                stream_id: sid,
                streaming: w.streaming,
                service: self.services.name(w.service),
                name: &w.name,
                view: view.map(View::Fids),
                refresh: false,
            }))?;
        }
        Ok(())
    }

    /// When [`SubscriberSession::handle_timeout`] is next needed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.link.poll_timeout(self.recover.iter().map(|&(_, t)| t))
    }

    /// Heartbeats, the Welcome's deadline, streams to request again. An `Err` means
    /// the connection failed: pass it to [`SubscriberSession::connection_lost`].
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), ClientError> {
        let Some(conn) = self.link.connection() else {
            return Ok(());
        };
        conn.handle_timeout(now)?;
        self.rerequest_recovered(now)
    }

    /// Delivers the events available now: statuses made up for a lost connection, then
    /// what the node sent. `f` gets each event and its encoding as received (empty for
    /// the made-up ones), both borrowed from the receive buffer. Returns how many. An
    /// `Err` means the connection failed: pass it to
    /// [`SubscriberSession::connection_lost`].
    pub fn poll_events(
        &mut self,
        now: Instant,
        mut f: impl FnMut(EventRef<'_>, &[u8]),
    ) -> Result<usize, ClientError> {
        let mut n = self.deliver_synthetic(&mut f);
        let recover_delay = self
            .link
            .policy()
            .backoff_min
            .max(Duration::from_millis(500));
        let Some(conn) = self.link.connection() else {
            return Ok(n);
        };
        let mut ctx = Ctx {
            watch: &mut self.watch,
            services: &self.services,
            open_streams: &mut self.open_streams,
            directory: &mut self.directory,
            recover: &mut self.recover,
            recover_at: now + recover_delay,
            ids: self.ids.as_mut(),
            directory_changed: &mut self.held_look,
            directory_fence: &mut self.directory_fence,
        };
        // Pings are answered after the frames (which borrow the connection's input).
        let mut pings = Vec::new();
        while let Some(frame) = conn.next_frame()? {
            n += handle_payload(frame, &mut ctx, &mut pings, &mut f)?;
        }
        for t in pings {
            conn.writer().push(&Message::Pong(t))?;
        }
        if let Some(token) = self.ids.as_mut().and_then(|ids| ids.fence_due()) {
            conn.writer().push(&Message::Ping(token))?;
        }
        if self.directory_fence == Fence::NotSent && conn.session().is_some() {
            conn.writer().push(&Message::Ping(DIRECTORY_FENCE))?;
            self.directory_fence = Fence::Sent;
        }
        conn.check_output()?;
        if conn.session().is_some() {
            self.release_held()?;
        }
        Ok(n)
    }

    /// Sends the held requests whose service the directory now lists.
    fn release_held(&mut self) -> Result<(), ClientError> {
        if self.held.is_empty() || !self.held_look {
            return Ok(());
        }
        let Some(conn) = self.link.connection() else {
            return Ok(());
        };
        self.held_look = false;
        let (watch, directory, services) = (&mut self.watch, &self.directory, &self.services);
        let mut err = None;
        self.held.retain(|&sid| {
            let Some(Some(w)) = watch.get_mut(sid as usize) else {
                return false;
            };
            if !w.held {
                return false; // closed, or its id given to a stream asked for already
            }
            if !directory.contains_key(services.name(w.service)) {
                return true;
            }
            w.held = false;
            if let Err(e) = push_request(conn.writer(), sid, w, services) {
                err = Some(e);
            }
            false
        });
        err.map_or(Ok(()), Err)
    }

    /// Requests again the streams closed with closed-recover whose delay has passed.
    fn rerequest_recovered(&mut self, now: Instant) -> Result<(), ClientError> {
        let Some(conn) = self.link.logged_in() else {
            return Ok(());
        };
        let mut i = 0;
        while i < self.recover.len() {
            let (sid, at) = self.recover[i];
            if at > now {
                i += 1;
                continue;
            }
            self.recover.swap_remove(i);
            // Closed meanwhile (and its id perhaps another stream's): passed over.
            if let Some(Some(w)) = self.watch.get_mut(sid as usize) {
                if std::mem::take(&mut w.recovering) {
                    push_request(conn.writer(), sid, w, &self.services)?;
                }
            }
        }
        Ok(())
    }

    fn deliver_synthetic(&mut self, f: &mut impl FnMut(EventRef<'_>, &[u8])) -> usize {
        let mut n = 0;
        while let Some(s) = self.synthetic.pop_front() {
            let Some(w) = self.watch.get(s.stream as usize).and_then(|w| w.as_ref()) else {
                continue;
            };
            f(
                EventRef::Status(
                    ItemRef {
                        stream: s.stream,
                        service: self.services.name(w.service),
                        name: &w.name,
                    },
                    Status {
                        stream_id: s.stream,
                        state: State {
                            text: &s.text,
                            ..s.state
                        },
                    },
                ),
                &[],
            );
            n += 1;
        }
        n
    }
}

fn push_request(
    w: &mut FrameWriter,
    sid: u32,
    watch: &Watch,
    services: &Services,
) -> Result<(), ClientError> {
    let service = services.name(watch.service);
    if let Some(from) = watch.replay() {
        w.push(&Message::Replay(Replay {
            stream_id: sid,
            from,
            service,
            name: &watch.name,
        }))?;
        return Ok(());
    }
    let view = watch.extra.as_ref().and_then(|x| x.view.as_deref());
    w.push(&Message::Request(Request {
        stream_id: sid,
        streaming: watch.streaming,
        service,
        name: &watch.name,
        view: view.map(View::Fids),
        refresh: true,
    }))?;
    Ok(())
}

/// The parts of a session that message handling updates.
struct Ctx<'s> {
    watch: &'s mut Vec<Option<Watch>>,
    services: &'s Services,
    open_streams: &'s mut usize,
    directory: &'s mut BTreeMap<String, ServiceState>,
    recover: &'s mut Vec<(u32, Instant)>,
    recover_at: Instant,
    ids: Option<&'s mut IdPool>,
    /// Set when a Directory comes.
    directory_changed: &'s mut bool,
    directory_fence: &'s mut Fence,
}

impl Ctx<'_> {
    fn close(&mut self, sid: u32) {
        if self.watch[sid as usize].take().is_some() {
            *self.open_streams -= 1;
            if let Some(ids) = self.ids.as_deref_mut() {
                ids.give_up(sid);
            }
        }
    }
}

/// Delivers the messages of one frame payload.
fn handle_payload(
    payload: &[u8],
    ctx: &mut Ctx<'_>,
    pings: &mut Vec<u64>,
    f: &mut impl FnMut(EventRef<'_>, &[u8]),
) -> Result<usize, ClientError> {
    let mut n = 0;
    // A watchlist of 100,000 streams is megabytes: the entry of an update a few
    // messages ahead is loaded while this one is handled.
    let mut ahead = Lookahead::new(payload);
    for raw in MessageIter::new(payload) {
        if let Some(sid) = ahead.next_update_stream() {
            if let Some(w) = ctx.watch.get(sid as usize) {
                tickwire_proto::wire::prefetch(w as *const Option<Watch> as *const u8);
            }
        }
        let raw = raw?;
        let encoded = raw.encoded;
        match raw.message {
            Message::Refresh(r) => {
                let sid = r.stream_id;
                let Some(w) = ctx.watch.get_mut(sid as usize).and_then(|w| w.as_mut()) else {
                    continue; // a late message for a stream already closed
                };
                if r.complete {
                    w.delivered(r.seq);
                }
                let done = r.complete && r.state.stream != StreamState::Open;
                let item = ItemRef {
                    stream: sid,
                    service: ctx.services.name(w.service),
                    name: &w.name,
                };
                f(EventRef::Refresh(item, r), encoded);
                n += 1;
                if done {
                    ctx.close(sid);
                }
            }
            Message::Update(u) => {
                let Some(w) = ctx
                    .watch
                    .get_mut(u.stream_id as usize)
                    .and_then(|w| w.as_mut())
                else {
                    continue;
                };
                w.delivered(u.seq);
                let item = ItemRef {
                    stream: u.stream_id,
                    service: ctx.services.name(w.service),
                    name: &w.name,
                };
                f(EventRef::Update(item, u), encoded);
                n += 1;
            }
            Message::Status(s) if s.stream_id == 0 => {
                let item = ItemRef {
                    stream: 0,
                    service: "",
                    name: "",
                };
                f(EventRef::Status(item, s.clone()), encoded);
                n += 1;
                if s.state.stream != StreamState::Open {
                    if is_fatal(s.state.stream, s.state.code) {
                        return Err(ClientError::Rejected {
                            code: s.state.code,
                            reason: s.state.text.to_string(),
                        });
                    }
                    return Err(ClientError::Disconnected(format!(
                        "node closed the connection: {}",
                        s.state.text
                    )));
                }
            }
            Message::Status(s) => {
                let sid = s.stream_id;
                let Some(w) = ctx.watch.get(sid as usize).and_then(|w| w.as_ref()) else {
                    continue;
                };
                let item = ItemRef {
                    stream: sid,
                    service: ctx.services.name(w.service),
                    name: &w.name,
                };
                if s.state.stream == StreamState::ClosedRecover && w.streaming {
                    // Recoverable: the stream stays in the watchlist, shown as suspect,
                    // and is requested again shortly (or on reconnect).
                    let shown = Status {
                        stream_id: sid,
                        state: State {
                            stream: StreamState::Open,
                            data: DataState::Suspect,
                            ..s.state
                        },
                    };
                    f(EventRef::Status(item, shown), &[]);
                    n += 1;
                    // Once: a peer repeating the status must not multiply the requests.
                    if let Some(Some(w)) = ctx.watch.get_mut(sid as usize) {
                        if !std::mem::replace(&mut w.recovering, true) {
                            ctx.recover.push((sid, ctx.recover_at));
                        }
                    }
                    continue;
                }
                // Closed at the node already, and to be asked for again: a close now is
                // the node's answer to a view change that crossed the close
                // (`change_view`), not the end of the stream.
                if s.state.stream == StreamState::Closed && w.recovering {
                    continue;
                }
                let done = s.state.stream != StreamState::Open;
                f(EventRef::Status(item, s), encoded);
                n += 1;
                if done {
                    ctx.close(sid);
                }
            }
            Message::Directory(d) => {
                *ctx.directory_changed = true;
                for e in &d.services {
                    if e.state == ServiceState::Removed {
                        ctx.directory.remove(e.name);
                    } else if let Some(state) = ctx.directory.get_mut(e.name) {
                        *state = e.state;
                    } else if ctx.directory.len() < MAX_DIRECTORY {
                        ctx.directory.insert(e.name.to_string(), e.state);
                    }
                }
                f(EventRef::Directory(&d), encoded);
                n += 1;
            }
            Message::Ack(a) => {
                f(EventRef::Ack(a), encoded);
                n += 1;
            }
            Message::Files(body) => {
                f(EventRef::Files(body), encoded);
                n += 1;
            }
            Message::Ping(t) => pings.push(t),
            Message::Pong(DIRECTORY_FENCE) => *ctx.directory_fence = Fence::Answered,
            Message::Pong(t) => {
                if let Some(ids) = ctx.ids.as_deref_mut() {
                    ids.pong(t);
                }
            }
            other => {
                return Err(ClientError::Protocol(format!(
                    "unexpected {:?} message from the node",
                    other.message_type()
                )))
            }
        }
    }
    Ok(n)
}

/// Walks message headers (no decoding) `AHEAD` messages in front of the handling.
struct Lookahead<'a> {
    rest: &'a [u8],
}

const AHEAD: usize = 4;

impl<'a> Lookahead<'a> {
    fn new(payload: &'a [u8]) -> Self {
        let mut l = Lookahead { rest: payload };
        for _ in 0..AHEAD {
            l.next_update_stream();
        }
        l
    }

    /// Moves over one message: its stream id if it is an update.
    #[inline]
    fn next_update_stream(&mut self) -> Option<u32> {
        tickwire_proto::message::next_update_stream(&mut self.rest)
    }
}
