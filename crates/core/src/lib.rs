//! Tickwire node logic as a sans-IO state machine.
//!
//! [`Node`] owns the item table, the last-value cache, subscriptions, fan-out, service
//! state, heartbeats and limits. It never touches a socket, a thread or the clock: the
//! caller feeds it connection events and received frames with the current time, and
//! drains, per connection, the bytes to send ([`Node::output`]) and the list of
//! connections to close ([`Node::take_closing`]). The `tickwire-node` crate drives it
//! with real sockets; the tests here drive it in memory on a fake clock.
//!
//! Hot path (a publisher's update): the field list is validated once as the message is
//! decoded; the publisher's stream id is mapped to an item handle (an indexed load for
//! the dense ids publishers use, a hash lookup otherwise); for each subscriber the
//! already-encoded update is copied with its stream id rewritten, appended to that
//! subscriber's frame buffer; its field list is kept to be merged into the cached image
//! (one heap block, walked without decoding values) once the driver has written the
//! turn's output ([`Node::settle`]), so the cache's cold memory is not in the way of the
//! subscribers' bytes. While a frame's updates are processed, the memory of the next few
//! is prefetched. No allocation, no lock, no syscall per message.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod admission;
pub mod chunk_buffers;
mod deferred;
mod files;
mod items;
pub mod latency;
mod loop_share;
mod posts;
mod replay;
mod security;
mod slow;
mod streams;

pub use admission::{counted_address, Admission, QuietLog};
pub use files::{FilesIn, SiteTest, FILES_IN_BYTES};
pub use loop_share::LoopShare;

/// Who one of the node's own in-process parts is, as its core sees it
/// ([`Node::join_internal`]): its figures item, a backbone role, an upstream link.
#[derive(Debug, Clone, Copy)]
pub struct InternalPeer<'a> {
    /// How the connection is named in logs and reports.
    pub peer: &'a str,
    /// Publisher or subscriber.
    pub role: tickwire_proto::Role,
    /// The application name it logs in with.
    pub application: &'a str,
    /// The user it acts as.
    pub user: &'a str,
    /// For a subscriber: what the core does when it falls behind (None: the node's).
    pub slow_consumer: Option<tickwire_proto::SlowConsumerPolicy>,
}
use crate::admission::LogName;
use items::{Item, ItemHandle, ItemTable, StreamRef, SubEntry};
pub use posts::{JournalRequest, JournalWrite, PostServices, PostStats, Redelivery};
use rustc_hash::FxHashMap;
pub use security::{
    AuthRequest, SessionTokenConfig, TokenAnswer, TokenRefusal, MAX_HELD_BEFORE_LOGIN,
};
use security::{HttpAuth, Identity, PendingLogin};
use slow::Conflation;
pub use slow::{ConnectionReport, SlowConsumerConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};
use streams::StreamMap;
use tickwire_auth::{Action, Services, SessionTokens};
pub use tickwire_auth::{Anonymous, Users};
use tickwire_proto::frame::FrameWriter;
use tickwire_proto::message::write_readdressed;
use tickwire_proto::wire::prefetch;
use tickwire_proto::{
    code, DataState, DecodeError, Directory, FieldList, FieldListWriter, Login, Message,
    MessageIter, Refresh, Request, Role, ServiceEntry, ServiceState, SlowConsumerPolicy, State,
    Status, StreamState, Update, View, Welcome, PROTOCOL_VERSION_MAX, PROTOCOL_VERSION_MIN,
};
use tracing::{info, warn};

/// Longest user or application name a login may carry.
pub const MAX_LOGIN_NAME_BYTES: usize = 256;

/// Index of a connection inside the node; reused after [`Node::on_disconnect`].
pub type ConnId = usize;

/// Limits enforced per connection.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest frame payload accepted and sent.
    pub max_frame: usize,
    /// Open item streams per subscriber connection.
    pub max_streams_per_connection: usize,
    /// Hard bound on the bytes queued for one subscriber: past it the subscriber is
    /// disconnected as a slow consumer, whatever its policy.
    pub max_output_bytes: usize,
    /// Hard bound on the messages queued for one subscriber (as for the bytes).
    pub max_output_messages: u64,
    /// Each side sends at least this often; a peer silent for 3 intervals is dropped.
    pub heartbeat: Duration,
    /// A connection that has not logged in within this time is dropped.
    pub login_timeout: Duration,
    /// Connections logged in at most (the node's own in-process peers among them): a
    /// login past it is refused (`TOO_MANY_CONNECTIONS`), as the node's accept refuses
    /// a connection at it.
    pub max_connections: usize,
    /// Connections waiting to log in at most, in all and from one address (see
    /// [`Node::admit`]).
    pub max_pending_logins: usize,
    /// The same, per client address.
    pub max_pending_logins_per_address: usize,
    /// Services the node holds at most; a publisher announcing one more is refused.
    pub max_services: usize,
    /// A service without a publisher and without open streams for this long is
    /// removed (with its cached images); zero keeps such services for ever.
    pub service_retention: Duration,
    /// Posts one connection may have waiting for their publisher's answer.
    pub max_pending_posts: usize,
    /// A post its publisher has not answered within this time is refused (`NoResponse`).
    pub post_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame: tickwire_proto::DEFAULT_MAX_FRAME,
            max_streams_per_connection: 200_000,
            max_output_bytes: 8 * 1024 * 1024,
            max_output_messages: 200_000,
            heartbeat: Duration::from_secs(5),
            login_timeout: Duration::from_secs(10),
            max_connections: 10_000,
            max_pending_logins: 64,
            max_pending_logins_per_address: 8,
            max_services: 10_000,
            service_retention: Duration::from_secs(3600),
            max_pending_posts: 10_000,
            post_timeout: Duration::from_secs(10),
        }
    }
}

/// The node's core settings (the node's config file, resolved).
#[derive(Debug, Clone)]
pub struct CoreConfig {
    /// The node's name, in its directory and figures.
    pub node_name: String,
    /// Last-value cache on (true) or pass-through (false).
    pub cache: bool,
    /// Connection and resource limits.
    pub limits: Limits,
    /// When set (and no users file), every login must carry this token.
    pub login_token: Option<String>,
    /// Users and their entitlements; `None`: the node is open to everyone.
    pub users: Option<Arc<Users>>,
    /// With users: who may log in without a secret.
    pub anonymous: Anonymous,
    /// What happens to subscribers that fall behind.
    pub slow_consumer: SlowConsumerConfig,
    /// Session tokens (`POST /getToken` on the WebSocket/HTTP port).
    pub session_tokens: SessionTokenConfig,
    /// The node's ports speak TLS only (`[tls]`). Without it, session tokens are
    /// issued to peers on a loopback address only: a password must not cross the
    /// network in cleartext to get one.
    pub tls: bool,
    /// This node's id among nodes (a tree of nodes over upstream links refuses a
    /// login that would close a loop).
    pub node_id: u64,
    /// With the cache on: an item of an interactive service that nobody watches any
    /// more is kept (and kept current) this long before its publisher is told to
    /// close it, so a quick re-request is answered from the cache. Zero: closed at
    /// once.
    pub interactive_linger: Duration,
    /// Services whose publishers are sent subscribers' posts (`[posts] services`).
    pub posts: PostServices,
    /// Services whose posts go through the node's journal (`[journal] services`).
    pub journal: PostServices,
    /// The journal also keeps every refresh and update of those services, for replay
    /// (`[journal] updates`).
    pub journal_updates: bool,
    /// The node moves files (`[files]`): peers' file-transfer messages go to its
    /// files thread; without, a peer that sends one is told and disconnected.
    pub files: bool,
}

impl Default for CoreConfig {
    fn default() -> Self {
        CoreConfig {
            node_name: "tickwire".into(),
            cache: true,
            limits: Limits::default(),
            login_token: None,
            users: None,
            anonymous: Anonymous::None,
            slow_consumer: SlowConsumerConfig::default(),
            session_tokens: SessionTokenConfig::default(),
            tls: false,
            node_id: 0,
            interactive_linger: Duration::ZERO,
            posts: PostServices::None,
            journal: PostServices::None,
            journal_updates: false,
            files: false,
        }
    }
}

/// Counters kept by the node (single-threaded, so plain integers).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connections accepted.
    pub connections_accepted: u64,
    /// Logins accepted.
    pub logins: u64,
    /// Updates received from publishers.
    pub updates_in: u64,
    /// Updates sent to subscribers.
    pub updates_out: u64,
    /// Refreshes received from publishers.
    pub refreshes_in: u64,
    /// Refreshes sent to subscribers.
    pub refreshes_out: u64,
    /// Item requests from subscribers.
    pub requests: u64,
    /// Connections closed for a malformed frame.
    pub malformed_disconnects: u64,
    /// Connections closed for a protocol error.
    pub protocol_disconnects: u64,
    /// File-transfer messages dropped: the files thread was that far behind.
    pub files_dropped: u64,
    /// Subscribers closed as too slow (their policy said so).
    pub slow_consumer_disconnects: u64,
    /// Times a subscriber fell behind and its updates started being conflated.
    pub slow_consumer_episodes: u64,
    /// Publisher updates merged into others for slow subscribers (a conflated update
    /// standing for k updates counts k - 1).
    pub conflated_updates: u64,
    /// Do-not-conflate updates a slow subscriber had no room for (it was told).
    pub do_not_conflate_dropped: u64,
    /// Connections closed for silence past three heartbeats.
    pub heartbeat_timeouts: u64,
    /// Updates for streams the node does not know (dropped).
    pub updates_on_unknown_streams: u64,
    /// Refreshes for node streams not open (dropped): mostly answers that crossed the
    /// node's Close of the request on the way.
    pub refreshes_on_closed_streams: u64,
    /// Logins refused (credentials, entitlement, protocol version, a loop).
    pub logins_refused: u64,
    /// Logins whose secret or token failed its check (each counts for the throttle).
    pub logins_failed: u64,
    /// Services an in-process peer (an upstream link, the backbone) announced and
    /// the node did not take from it (another publisher's, past the service limit).
    pub internal_services_refused: u64,
    /// Connections closed before they logged in to make room for newer ones
    /// (`Limits::max_pending_logins`, `max_pending_logins_per_address`).
    pub idle_logins_closed: u64,
    /// What happened to posts.
    pub posts: PostStats,
}

/// What a connection is, once it has logged in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnRole {
    AwaitingLogin,
    Subscriber,
    Publisher,
    /// Detached from every item; only its pending output is still flushed.
    Closing,
}

struct Conn {
    role: ConnRole,
    peer: String,
    /// The peer's address, when it has one (not the node's in-process peers).
    ip: Option<std::net::IpAddr>,
    user: String,
    application: String,
    out: FrameWriter,
    last_rx: Instant,
    last_tx: Instant,
    /// When the node last pinged it.
    last_ping: Instant,
    /// How long it may be silent before it is dropped, where its transport agreed on
    /// one ([`Node::set_silence_limit`]); else 3 heartbeat intervals.
    silence_limit: Option<Duration>,
    /// It logged in (it may be closing now).
    logged_in: bool,
    dirty: bool,
    /// Subscriber: stream id -> its item and its slot among the item's streams.
    sub_streams: FxHashMap<u32, StreamRef>,
    /// Publisher: stream id -> item.
    pub_streams: StreamMap,
    /// The next id for the node's own requests to this (interactive) publisher.
    next_node_stream: u32,
    /// Publisher: the services it announced.
    services: Vec<usize>,
    /// Subscriber: what happens when it falls behind.
    policy: SlowConsumerPolicy,
    /// Queued output past which it is behind: the conflation threshold under
    /// `conflate`, the hard bound under `disconnect`.
    behind_bytes: usize,
    behind_messages: u64,
    /// Present while the subscriber is behind and its updates are being conflated.
    conflation: Option<Box<Conflation>>,
    /// Subscriber: directory changes were skipped while it was behind; it gets the
    /// whole directory when it catches up.
    directory_stale: bool,
    /// When it connected (for the login deadline).
    connected_at: Instant,
    /// Who it is (once logged in).
    identity: Identity,
    /// One of the node's own in-process peers: no login check, every right.
    internal: bool,
    /// Its login, while the secret is being checked.
    pending_login: Option<Box<PendingLogin>>,
    /// A WebSocket/HTTP connection's token request or session cookie.
    http: Option<Box<HttpAuth>>,
    slow_episodes: u64,
    conflated_updates: u64,
    do_not_conflate_dropped: u64,
    /// The most output it had queued when the node came to write it (the largest
    /// backlog a turn left it), for `/metrics`.
    queue_high_water: usize,
}

struct Service {
    name: String,
    publisher: Option<ConnId>,
    /// The publisher says the service is up (it may connect down, image, then go up).
    up: bool,
    interactive: bool,
    items: FxHashMap<Box<str>, ItemHandle>,
    /// Since when it has had no publisher (for `Limits::service_retention`).
    orphaned_since: Option<Instant>,
    /// Updates taken from its publisher, and sent to subscribers. Counted per update
    /// on the service, not on the item (half the instructions, a third of a percent
    /// of an update's), so that a scrape reads them and does not sum 100,000 items
    /// (2 ms of the event loop).
    updates_in: u64,
    updates_out: u64,
}

/// A service's figures, for `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceFigures {
    /// The service's name.
    pub name: String,
    /// It has a publisher and is up.
    pub up: bool,
    /// Items it has.
    pub items: usize,
    /// Updates received for it.
    pub updates_in: u64,
    /// Updates sent of it.
    pub updates_out: u64,
}

/// The longest service name a publisher may announce, in bytes: directory entries stay
/// small, so a directory message always holds many of them.
pub const MAX_SERVICE_NAME: usize = 256;

/// First stream id the node assigns on a publisher connection. Publishers choose ids
/// below it for the items they push; ids from here up are the node's requests.
pub const NODE_STREAM_BASE: u32 = 0x8000_0000;

/// [`Node::handle_timeout`] is needed at least this often (services past their retention,
/// expired session tokens); heartbeats and timeouts may need it sooner.
pub const MAX_TICK_INTERVAL: Duration = Duration::from_secs(1);

/// The node without I/O: item table and last values, subscriptions, fan-out,
/// service state, heartbeats, limits and slow consumers. Bytes and the time go in
/// (`on_frame`, `handle_timeout`); each connection's output and the next deadline
/// (`output`, `poll_timeout`) come out.
pub struct Node {
    cfg: CoreConfig,
    /// The last view a request asked for: requests in a row with the same view (a
    /// batch's items, a client opening many items alike) share one copy of it.
    last_view: Option<Arc<[i16]>>,
    /// See [`Node::set_upstream_chain`].
    upstream_chain: Vec<(u64, String)>,
    /// Items kept after their last subscriber left (`CoreConfig::interactive_linger`).
    lingering: Vec<ItemHandle>,
    /// See [`Node::poll_timeout`].
    next_tick: Instant,
    /// Where [`Node::on_message`] encodes an update.
    scratch_message: Vec<u8>,
    conns: Vec<Option<Conn>>,
    free_conns: Vec<ConnId>,
    items: ItemTable,
    services: Vec<Service>,
    service_by_name: FxHashMap<String, usize>,
    dirty: Vec<ConnId>,
    closing: Vec<ConnId>,
    /// Subscribers whose output passed the limit while a frame was processed.
    overflowed: Vec<ConnId>,
    scratch: Vec<u8>,
    now: Instant,
    stats: Stats,
    /// See [`Node::set_wall_clock`]; 0 until the driver sets it (no latency samples).
    wall_clock_ns: u64,
    latency: latency::LatencyHistogram,
    shutting_down: bool,
    /// Largest image cached (`tickwire_proto::max_image_bytes` of the output bound).
    max_image: usize,
    /// Connections that have not logged in yet.
    awaiting_login: usize,
    /// Connections closing: detached, their socket not yet gone.
    closing_conns: usize,
    /// What the item name queries may still look at ([`Node::service_item_names`]).
    item_scans: LoopShare,
    /// Pending logins per address, failed logins ([`Node::admit`]).
    guard: admission::LoginGuard,
    /// Secrets to check off the event loop.
    auth_requests: Vec<AuthRequest>,
    next_ticket: u64,
    /// Session tokens issued by `POST /getToken`, not expired or revoked.
    sessions: SessionTokens,
    /// Posts forwarded to publishers and not answered yet.
    posts: posts::Posts,
    /// Streams waiting for their history (replay then join).
    replays: replay::Replays,
    /// Updates fanned out, their merge into the cache still to come ([`Node::settle`]).
    deferred: deferred::Deferred,
    /// File-transfer messages for the files thread, and their bytes.
    files_in: Vec<FilesIn>,
    files_in_bytes: usize,
    /// Connections gone since the files thread last heard (its uploads and routes go).
    files_gone: Vec<ConnId>,
}

/// How far ahead [`Node::settle`] loads images, and items: a merge takes less time than
/// a load from memory, so a few merges must cover one.
const SETTLE_IMAGE_AHEAD: usize = 4;
const SETTLE_ITEM_AHEAD: usize = 8;

/// Item names the HTTP item queries (`GET /items`) may look at a second, all of them
/// together: each looks at every item of its service on the event loop (about 40 ns a
/// name), so two million a second cost the loop a few percent at most.
pub const ITEM_NAMES_SCANNED_PER_S: f64 = 2_000_000.0;

/// The names of a service's items a query found, and whether more match.
pub type ItemNames = (Vec<String>, bool);

impl Node {
    /// A node with no connection, its clock at `now`.
    pub fn new(cfg: CoreConfig, now: Instant) -> Self {
        let max_image = tickwire_proto::max_image_bytes(cfg.limits.max_output_bytes);
        let sessions = SessionTokens::new(cfg.session_tokens.max_tokens);
        Node {
            cfg,
            upstream_chain: Vec::new(),
            last_view: None,
            lingering: Vec::new(),
            next_tick: now + MAX_TICK_INTERVAL,
            scratch_message: Vec::new(),
            conns: Vec::new(),
            free_conns: Vec::new(),
            items: ItemTable::default(),
            services: Vec::new(),
            service_by_name: FxHashMap::default(),
            dirty: Vec::new(),
            closing: Vec::new(),
            overflowed: Vec::new(),
            scratch: Vec::with_capacity(64 * 1024),
            now,
            stats: Stats::default(),
            wall_clock_ns: 0,
            latency: latency::LatencyHistogram::default(),
            shutting_down: false,
            max_image,
            awaiting_login: 0,
            closing_conns: 0,
            item_scans: LoopShare::new(ITEM_NAMES_SCANNED_PER_S, now),
            guard: admission::LoginGuard::default(),
            auth_requests: Vec::new(),
            next_ticket: 0,
            sessions,
            posts: posts::Posts::default(),
            deferred: deferred::Deferred::default(),
            replays: replay::Replays::default(),
            files_in: Vec::new(),
            files_in_bytes: 0,
            files_gone: Vec::new(),
        }
    }

    /// Its settings.
    pub fn config(&self) -> &CoreConfig {
        &self.cfg
    }

    /// Its counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Connections currently held (any role, closing ones included).
    pub fn connection_count(&self) -> usize {
        self.conns.len() - self.free_conns.len()
    }

    /// Connections that have not logged in yet (they have `Limits::login_timeout`).
    pub fn awaiting_login_count(&self) -> usize {
        self.awaiting_login
    }

    /// Whether `conn` logged in at some time (it may be closing now): a connection that
    /// never did (an HTTP request, a login refused or never sent) is one a peer can have
    /// the node open and close at will.
    pub fn ever_logged_in(&self, conn: ConnId) -> bool {
        self.conns
            .get(conn)
            .and_then(|c| c.as_ref())
            .is_some_and(|c| c.logged_in)
    }

    /// Connections logged in: not waiting to log in, not closing. What the node's
    /// connection limit counts: a closing connection lingers until its peer has read
    /// why, and one waiting to log in is held to the caps on pending logins.
    pub fn logged_in_count(&self) -> usize {
        self.connection_count() - self.awaiting_login - self.closing_conns
    }

    /// Every service the node knows, with whether it is up (a publisher announced it up).
    /// Every service's state, items and update counts.
    pub fn service_figures(&self) -> Vec<ServiceFigures> {
        self.services
            .iter()
            .map(|s| ServiceFigures {
                name: s.name.clone(),
                up: s.publisher.is_some() && s.up,
                items: s.items.len(),
                updates_in: s.updates_in,
                updates_out: s.updates_out,
            })
            .collect()
    }

    /// The node's wall clock (nanoseconds since the Unix epoch) as the driver read it
    /// last, before handing over what it read: updates' send stamps are compared with
    /// it (see [`latency`]).
    pub fn set_wall_clock(&mut self, unix_ns: u64) {
        self.wall_clock_ns = unix_ns;
    }

    /// Sampled latency of updates carrying the publisher's send time.
    pub fn latency(&self) -> &latency::LatencyHistogram {
        &self.latency
    }

    /// Every service and whether it is up.
    pub fn services(&self) -> Vec<(String, bool)> {
        self.services
            .iter()
            .map(|s| (s.name.clone(), s.publisher.is_some() && s.up))
            .collect()
    }

    /// Whether the node has the service named `name` and no one publishes it now.
    pub fn lacks_publisher(&self, name: &str) -> bool {
        self.service_by_name
            .get(name)
            .is_some_and(|&s| self.services[s].publisher.is_none())
    }

    /// Whether `conn` is the publisher of the service named `name`.
    pub fn publishes(&self, conn: ConnId, name: &str) -> bool {
        self.service_by_name
            .get(name)
            .is_some_and(|&s| self.services[s].publisher == Some(conn))
    }

    /// Items in the table.
    pub fn item_count(&self) -> usize {
        self.items.len()
    }

    /// The first `limit` names (in order) of a service's items that start with
    /// `prefix`, and whether more match; `None` for a service the node does not have,
    /// `Some(Err(wait))` when the queries have used their share of the loop (try again
    /// after `wait`). One pass over the service's items, keeping the `limit` smallest:
    /// a query costs its service's item count, and the queries together may look at
    /// [`ITEM_NAMES_SCANNED_PER_S`] names a second (a query goes while the share is not
    /// spent, whatever it costs, and the next waits for what it took).
    pub fn service_item_names(
        &mut self,
        service: &str,
        prefix: &str,
        limit: usize,
        now: Instant,
    ) -> Option<Result<ItemNames, Duration>> {
        self.merge_deferred();
        let s = self.service_by_name.get(service)?;
        let cost = self.services[*s].items.len() as f64;
        if let Err(wait) = self.item_scans.take(cost, now) {
            return Some(Err(wait));
        }
        let mut smallest: std::collections::BinaryHeap<&str> = Default::default();
        let mut matching = 0usize;
        for name in self.services[*s].items.keys() {
            if !name.starts_with(prefix) {
                continue;
            }
            matching += 1;
            if smallest.len() < limit {
                smallest.push(name);
            } else if smallest.peek().is_some_and(|&largest| &**name < largest) {
                smallest.pop();
                smallest.push(name);
            }
        }
        let names: Vec<String> = smallest
            .into_sorted_vec()
            .into_iter()
            .map(str::to_string)
            .collect();
        let more = matching > names.len();
        Some(Ok((names, more)))
    }

    /// The node checks logins against a users file.
    pub fn has_users(&self) -> bool {
        self.cfg.users.is_some()
    }

    /// Whether a login needs a secret the node knows: it has a users file or a shared
    /// `login_token` (else anyone who reaches it may log in).
    pub fn guards_logins(&self) -> bool {
        self.cfg.users.is_some() || self.cfg.login_token.is_some()
    }

    /// The cached image of an item as an encoded field list, if the node has one.
    pub fn cached_image(&mut self, service: &str, name: &str) -> Option<Vec<u8>> {
        self.merge_deferred();
        let s = self.service_by_name.get(service)?;
        let h = *self.services[*s].items.get(name)?;
        let item = self.items.get(h)?;
        item.complete.then(|| item.image.to_field_list_bytes())
    }

    /// A new connection from `peer` (a description for logs, e.g. its address).
    pub fn connect(&mut self, peer: &str, now: Instant) -> ConnId {
        self.now = now;
        self.tick_by(now + self.cfg.limits.login_timeout);
        self.stats.connections_accepted += 1;
        self.awaiting_login += 1;
        let ip = admission::peer_ip(peer);
        let conn = Conn {
            role: ConnRole::AwaitingLogin,
            peer: peer.to_string(),
            ip,
            user: String::new(),
            application: String::new(),
            out: FrameWriter::new(self.cfg.limits.max_frame),
            last_rx: now,
            last_tx: now,
            last_ping: now,
            silence_limit: None,
            logged_in: false,
            dirty: false,
            sub_streams: FxHashMap::default(),
            pub_streams: StreamMap::default(),
            next_node_stream: NODE_STREAM_BASE,
            services: Vec::new(),
            policy: SlowConsumerPolicy::Conflate,
            behind_bytes: self.cfg.limits.max_output_bytes,
            behind_messages: self.cfg.limits.max_output_messages,
            conflation: None,
            directory_stale: false,
            connected_at: now,
            identity: Identity::Open,
            internal: false,
            pending_login: None,
            http: None,
            slow_episodes: 0,
            conflated_updates: 0,
            do_not_conflate_dropped: 0,
            queue_high_water: 0,
        };
        let id = if let Some(id) = self.free_conns.pop() {
            self.conns[id] = Some(conn);
            id
        } else {
            self.conns.push(Some(conn));
            self.conns.len() - 1
        };
        self.login_pending(id, ip, now);
        id
    }

    /// Whether `conn` is a connection the core still serves (not closing, not gone). An
    /// in-process peer checks it: the core may close it like any peer (e.g. past the
    /// hard bound on its queue), and its id is reused once it is gone.
    pub fn is_live(&self, conn: ConnId) -> bool {
        self.conns
            .get(conn)
            .and_then(|c| c.as_ref())
            .is_some_and(|c| c.role != ConnRole::Closing)
    }

    /// A connection for one of the node's own in-process peers (its figures item, an
    /// upstream link, the backbone): logs in without a check and may do everything.
    /// A service it may not carry (another publisher's, past the service limit) is
    /// left out without closing it. If the core closes it all the same (past the hard
    /// bound on its queue), its id stays closed, never another connection's, until
    /// [`Node::release_internal`].
    pub fn connect_internal(&mut self, peer: &str, now: Instant) -> ConnId {
        let id = self.connect(peer, now);
        if let Some(c) = self.conn_mut(id) {
            c.internal = true;
        }
        id
    }

    /// An in-process peer ([`Node::connect_internal`]) logged in as `who`, ready for
    /// typed messages ([`Node::on_message`]): the one way the node's own parts join
    /// its core.
    pub fn join_internal(&mut self, who: &InternalPeer<'_>, now: Instant) -> ConnId {
        let conn = self.connect_internal(who.peer, now);
        let login = Message::Login(tickwire_proto::Login {
            version_min: tickwire_proto::PROTOCOL_VERSION_MIN,
            version_max: tickwire_proto::PROTOCOL_VERSION_MAX,
            role: who.role,
            application: who.application,
            user: who.user,
            token: "",
            slow_consumer: who.slow_consumer,
        });
        self.on_message(conn, &login, now);
        conn
    }

    /// Bytes waiting to be sent on `conn` (seal before writing: use `sealed_bytes`).
    /// A connection's output, to write; what is queued then counts toward its
    /// high-water mark (once per write, not per message).
    pub fn output(&mut self, conn: ConnId) -> Option<&mut FrameWriter> {
        let c = self.conns.get_mut(conn)?.as_mut()?;
        c.queue_high_water = c.queue_high_water.max(c.out.pending_len());
        Some(&mut c.out)
    }

    /// Moves the ids of connections with new output into `into` (cleared first).
    pub fn take_dirty(&mut self, into: &mut Vec<ConnId>) {
        into.clear();
        std::mem::swap(into, &mut self.dirty);
        for &c in into.iter() {
            if let Some(conn) = self.conns.get_mut(c).and_then(|c| c.as_mut()) {
                conn.dirty = false;
            }
        }
    }

    /// Moves the ids of connections the node has finished with into `into`: flush what
    /// they have pending, close the socket, then call [`Node::on_disconnect`].
    pub fn take_closing(&mut self, into: &mut Vec<ConnId>) {
        into.clear();
        std::mem::swap(into, &mut self.closing);
    }

    /// The peer's socket is gone (or the caller closed it): forget the connection.
    pub fn on_disconnect(&mut self, conn: ConnId, now: Instant) {
        self.merge_deferred();
        self.now = now;
        let Some(c) = self.conns.get(conn).and_then(|c| c.as_ref()) else {
            return;
        };
        // An in-process peer's id, let go of (`release_internal`), may be its new link's
        // by now: a late end of the old one does not end it.
        if c.internal && c.role != ConnRole::Closing {
            return;
        }
        // A session its peer ended (the node's own closings were logged with their
        // reason when it decided them; connections that never logged in, such as HTTP
        // requests, are not sessions).
        if matches!(c.role, ConnRole::Subscriber | ConnRole::Publisher) && !c.internal {
            info!(
                peer = %c.peer, role = ?c.role, user = %LogName(&c.user), application = %LogName(&c.application),
                reason = "closed by the peer", "disconnected"
            );
        }
        self.detach(conn, "connection lost");
        if self.cfg.files {
            self.forget_files_of(conn);
            self.files_gone.push(conn);
        }
        self.closing.retain(|&c| c != conn);
        self.overflowed.retain(|&c| c != conn);
        self.dirty.retain(|&c| c != conn);
        if self.conns[conn].as_ref().is_some_and(|c| c.internal) {
            // An in-process peer still holds this id: it stays closed (`is_live` says
            // so) and is not given to the next connection, whose Welcome and data the
            // peer would otherwise take as its own, until the peer lets it go
            // (`release_internal`).
            self.handle_overflows();
            return;
        }
        self.conns[conn] = None;
        self.closing_conns -= 1;
        // The id is reused by the next connection: nothing queued for this one may
        // reach it.
        self.free_conns.push(conn);
        self.handle_overflows();
    }

    /// An in-process peer lets go of its closed connection (see
    /// [`Node::connect_internal`]): its id may now be reused.
    pub fn release_internal(&mut self, conn: ConnId) {
        self.merge_deferred();
        let closed_internal = self
            .conns
            .get(conn)
            .and_then(|c| c.as_ref())
            .is_some_and(|c| c.internal && c.role == ConnRole::Closing);
        if closed_internal {
            self.conns[conn] = None;
            self.closing_conns -= 1;
            // Its id may be the next connection's: the caller is not to close it.
            self.closing.retain(|&c| c != conn);
            self.dirty.retain(|&c| c != conn);
            self.free_conns.push(conn);
        }
    }

    /// Bytes arrived on `conn` (perhaps not yet a whole frame): the peer is alive.
    pub fn on_bytes_received(&mut self, conn: ConnId, now: Instant) {
        if let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) {
            c.last_rx = now;
        }
    }

    /// The connection's transport agreed with its peer how often the peer speaks (an
    /// RSSL consumer's RIPC ping timeout, whole seconds): it is dropped when silent for
    /// `limit`, not for 3 heartbeat intervals.
    pub fn set_silence_limit(&mut self, conn: ConnId, limit: Duration) {
        if let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) {
            c.silence_limit = Some(limit);
        }
    }

    /// The connection's bytes could not be framed (bad length prefix): tell it and close.
    pub fn on_frame_error(&mut self, conn: ConnId, err: &DecodeError, now: Instant) {
        self.merge_deferred();
        self.now = now;
        self.stats.malformed_disconnects += 1;
        let text = format!("malformed frame: {err}");
        self.reject(conn, code::MALFORMED, &text);
    }

    /// One message from an in-process peer (the node's own figures, an upstream link,
    /// a backbone role), as it is: no encoding for the core to decode again. An update
    /// is encoded once here, since the core forwards its encoding to subscribers.
    pub fn on_message(&mut self, conn: ConnId, msg: &Message<'_>, now: Instant) {
        self.now = now;
        let internal = match self.conns.get_mut(conn).and_then(|c| c.as_mut()) {
            Some(c) if c.role != ConnRole::Closing => {
                c.last_rx = now;
                c.internal
            }
            _ => return,
        };
        if internal && !matches!(msg, Message::Update(_)) {
            self.on_message_from(conn, msg, &[]);
            self.handle_overflows();
            return;
        }
        // An update's encoding is what subscribers get; a peer whose login may be
        // verified off the loop takes the frame path (which holds what follows a
        // login until it is verified).
        let mut buf = std::mem::take(&mut self.scratch_message);
        buf.clear();
        if msg.encode(&mut buf).is_ok() {
            if internal {
                self.on_message_from(conn, msg, &buf);
                self.handle_overflows();
            } else {
                self.on_frame(conn, &buf, now);
            }
        }
        self.scratch_message = buf;
    }

    /// Processes one received frame payload.
    pub fn on_frame(&mut self, conn: ConnId, payload: &[u8], now: Instant) {
        self.frame_in(conn, payload, now, false);
    }

    /// A frame from an in-process peer whose every message it decoded in full itself
    /// (an upstream link forwarding what its upstream sent): the field lists are not
    /// walked again. From any other connection it is an ordinary frame.
    pub fn on_checked_frame(&mut self, conn: ConnId, payload: &[u8], now: Instant) {
        let internal = self
            .conns
            .get(conn)
            .and_then(|c| c.as_ref())
            .is_some_and(|c| c.internal);
        self.frame_in(conn, payload, now, internal);
    }

    /// A frame the node's own code encoded for a connection whose protocol it
    /// translates (RSSL): its field lists, built by `FieldListWriter`, which writes only
    /// what a decoder accepts, are not walked again. The rest of each message is
    /// checked as in any frame.
    pub fn on_translated_frame(&mut self, conn: ConnId, payload: &[u8], now: Instant) {
        self.frame_in(conn, payload, now, true);
    }

    fn frame_in(&mut self, conn: ConnId, payload: &[u8], now: Instant, checked: bool) {
        self.now = now;
        match self.conns.get_mut(conn).and_then(|c| c.as_mut()) {
            Some(c) if c.role != ConnRole::Closing => c.last_rx = now,
            _ => return,
        }
        if self.hold_if_authenticating(conn, payload) {
            self.handle_overflows();
            return;
        }
        let mut ahead = UpdateLookahead::new(payload);
        let messages = if checked {
            MessageIter::already_checked(payload)
        } else {
            MessageIter::new(payload)
        };
        for raw in messages {
            let raw = match raw {
                Ok(raw) => raw,
                Err(err) => {
                    self.stats.malformed_disconnects += 1;
                    let text = format!("malformed message: {err}");
                    self.reject(conn, code::MALFORMED, &text);
                    break;
                }
            };
            self.prefetch_ahead(conn, &mut ahead);
            self.on_message_from(conn, &raw.message, raw.encoded);
            if self.role(conn) == Some(ConnRole::Closing) {
                break;
            }
            // Only a Login can start a verification (checked for it alone: this loop is
            // the hot path of every update).
            if matches!(raw.message, Message::Login(_))
                && self
                    .conn_mut(conn)
                    .is_some_and(|c| c.pending_login.is_some())
            {
                // The login is being verified: the rest of the frame waits for it.
                let offset = raw.encoded.as_ptr() as usize - payload.as_ptr() as usize;
                let rest = &payload[offset + raw.encoded.len()..];
                if !rest.is_empty() {
                    self.hold_if_authenticating(conn, rest);
                }
                break;
            }
        }
        self.handle_overflows();
    }

    /// Heartbeats and timeouts. Call at least every quarter heartbeat interval.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.merge_deferred();
        self.now = now;
        let hb = self.cfg.limits.heartbeat;
        let login_timeout = self.cfg.limits.login_timeout;
        let mut timed_out = Vec::new();
        let mut next = now + MAX_TICK_INTERVAL;
        for (id, slot) in self.conns.iter_mut().enumerate() {
            let Some(c) = slot else { continue };
            // The node's own in-process parts are not pinged nor timed out: each
            // watches its own transport (an upstream link its heartbeats, an RSSL
            // provider link RIPC's pings), and one waiting for its peer to come up
            // keeps its place in the core.
            if c.role == ConnRole::Closing || c.internal {
                continue;
            }
            // This connection's next deadline, as it stands after this tick (traffic
            // meanwhile only moves it later: a tick then finds nothing to do).
            let silence = c.silence_limit.unwrap_or(hb * 3);
            next = next.min(c.last_rx + silence);
            if c.role == ConnRole::AwaitingLogin {
                next = next.min(c.connected_at + login_timeout);
            }
            if now.saturating_duration_since(c.last_rx) >= silence {
                timed_out.push((id, Some(silence), c.silence_limit.is_some()));
                continue;
            }
            if c.role == ConnRole::AwaitingLogin
                && now.saturating_duration_since(c.connected_at) >= self.cfg.limits.login_timeout
            {
                timed_out.push((id, None, false));
                continue;
            }
            // A ping when the node has sent nothing for an interval, or has received
            // nothing for one (a client that only answers pings, as WebSocket JSON
            // clients do, then answers before the timeout), at most once an interval.
            let tx_idle = now.saturating_duration_since(c.last_tx) >= hb;
            let rx_idle = now.saturating_duration_since(c.last_rx) >= hb
                && now.saturating_duration_since(c.last_ping) >= hb;
            if c.role != ConnRole::AwaitingLogin && (tx_idle || rx_idle) {
                let token = now.saturating_duration_since(c.last_rx).as_nanos() as u64;
                let _ = c.out.push(&Message::Ping(token));
                c.last_tx = now;
                c.last_ping = now;
                if !c.dirty {
                    c.dirty = true;
                    self.dirty.push(id);
                }
            }
            if c.role != ConnRole::AwaitingLogin {
                next = next
                    .min(c.last_tx + hb)
                    .min(c.last_rx.max(c.last_ping) + hb);
            }
        }
        self.next_tick = next;
        self.expire_services(now);
        self.end_lingering(now);
        self.expire_posts(now);
        self.redeliver_ready();
        self.sessions.expire(now);
        for (id, silence, agreed) in timed_out {
            let text = match silence {
                None => format!(
                    "no login within {} ms (limits.login_timeout_ms)",
                    self.cfg.limits.login_timeout.as_millis()
                ),
                Some(silence) => {
                    self.stats.heartbeat_timeouts += 1;
                    let why = match agreed {
                        true => "the ping timeout agreed",
                        false => "3 heartbeat intervals",
                    };
                    format!("nothing received for {} ms ({why})", silence.as_millis())
                }
            };
            self.reject(id, code::TIMEOUT, &text);
        }
        self.handle_overflows();
    }

    /// Node shutdown: every subscriber stream gets closed-recover, every connection is
    /// queued for closing. Flush outputs, then exit.
    pub fn shutdown(&mut self, now: Instant) {
        self.merge_deferred();
        self.now = now;
        self.shutting_down = true;
        let ids: Vec<ConnId> = (0..self.conns.len())
            .filter(|&i| self.conns[i].is_some())
            .collect();
        for id in ids {
            let streams: Vec<u32> = self.conns[id]
                .as_ref()
                .map(|c| c.sub_streams.keys().copied().collect())
                .unwrap_or_default();
            let state = State {
                stream: StreamState::ClosedRecover,
                data: DataState::Suspect,
                code: code::SHUTDOWN,
                text: "node shutting down",
            };
            for sid in streams {
                self.send(
                    id,
                    &Message::Status(Status {
                        stream_id: sid,
                        state,
                    }),
                );
            }
            self.reject(id, code::SHUTDOWN, "node shutting down");
        }
    }

    fn role(&self, conn: ConnId) -> Option<ConnRole> {
        self.conns.get(conn)?.as_ref().map(|c| c.role)
    }

    fn conn_mut(&mut self, conn: ConnId) -> Option<&mut Conn> {
        self.conns.get_mut(conn)?.as_mut()
    }

    /// Queues a message on a connection.
    fn send(&mut self, conn: ConnId, msg: &Message<'_>) {
        let now = self.now;
        if let Message::Status(s) = msg {
            let behind = self
                .conns
                .get(conn)
                .and_then(|c| c.as_ref())
                .and_then(|c| c.conflation.as_deref());
            if let Some(cf) = behind {
                let pending = cf.has_pending(s.stream_id);
                // Behind: an open-state status waits with the stream's pending update;
                // a closing one goes now, after that update (order is kept per stream).
                if self.defer_status(conn, s) {
                    return;
                }
                if pending {
                    self.write_pending_now(conn, s.stream_id);
                }
            }
        }
        let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return;
        };
        if let Err(e) = c.out.push(msg) {
            warn!("could not encode a message for {}: {e}", c.peer);
            return;
        }
        c.last_tx = now;
        if !c.dirty {
            c.dirty = true;
            self.dirty.push(conn);
        }
        if needs_overflow_check(c) {
            self.overflowed.push(conn);
        }
    }

    /// Sends a connection-level closed status, detaches the connection and queues it
    /// for closing.
    fn reject(&mut self, conn: ConnId, code: u16, text: &str) {
        let Some(role) = self.role(conn) else { return };
        if role == ConnRole::Closing {
            return;
        }
        if code == code::LOGIN_REJECTED {
            self.stats.logins_refused += 1;
        }
        // A peer can have its connections closed before login at will: those warnings
        // are held to a few a window.
        let held = match role {
            ConnRole::AwaitingLogin => self.guard.prelogin_log.allow(self.now),
            _ => Some(0),
        };
        let c = self.conns[conn].as_ref();
        match (code != code::SHUTDOWN, held, c) {
            (true, Some(0), Some(c)) => warn!(
                peer = %c.peer, ?role, user = %LogName(&c.user), application = %LogName(&c.application),
                reason = %text, "disconnecting"
            ),
            (true, Some(held), Some(c)) => warn!(
                peer = %c.peer, ?role, user = %LogName(&c.user), application = %LogName(&c.application),
                reason = %text, closed_before_login_not_logged = held, "disconnecting"
            ),
            _ => {}
        }
        let stream = if code == code::SHUTDOWN || code == code::SLOW_CONSUMER {
            StreamState::ClosedRecover
        } else {
            StreamState::Closed
        };
        self.send(
            conn,
            &Message::Status(Status {
                stream_id: 0,
                state: State {
                    stream,
                    data: DataState::Suspect,
                    code,
                    text,
                },
            }),
        );
        self.detach(conn, text);
        if let Some(c) = self.conn_mut(conn) {
            c.role = ConnRole::Closing;
        }
        self.closing.push(conn);
    }

    /// Removes a connection from every item and service it touches.
    fn detach(&mut self, conn: ConnId, reason: &str) {
        let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return;
        };
        let (role, ip) = (c.role, c.ip);
        c.role = ConnRole::Closing;
        if role == ConnRole::AwaitingLogin {
            self.awaiting_login -= 1;
        }
        if role != ConnRole::Closing {
            self.closing_conns += 1;
        }
        match role {
            ConnRole::Subscriber => {
                let streams: Vec<u32> = c.sub_streams.keys().copied().collect();
                for sid in streams {
                    self.unsubscribe(conn, sid);
                }
                self.posts_poster_gone(conn);
                self.replay_conn_gone(conn);
            }
            ConnRole::Publisher => {
                self.publisher_gone(conn, reason);
                self.posts_publisher_gone(conn);
            }
            ConnRole::AwaitingLogin => self.login_no_longer_pending(ip),
            ConnRole::Closing => {}
        }
    }

    // Inlined into the frame loop, the hot path: with a second caller (`on_message`)
    // the compiler stopped inlining it, which cost 20-60 instructions per update
    // (callgrind, crates/core/benches/per_update_instructions.py).
    #[inline(always)]
    fn on_message_from(&mut self, conn: ConnId, msg: &Message<'_>, encoded: &[u8]) {
        // Anything but an update may read an image or change the item table: the
        // images catch up first.
        if !matches!(msg, Message::Update(_)) {
            self.merge_deferred();
        }
        let Some(role) = self.role(conn) else { return };
        match (role, msg) {
            (ConnRole::AwaitingLogin, Message::Login(login)) => self.on_login(conn, login),
            (ConnRole::Subscriber | ConnRole::Publisher, Message::Ping(token)) => {
                self.send(conn, &Message::Pong(*token))
            }
            (ConnRole::Subscriber | ConnRole::Publisher, Message::Pong(_)) => {}
            (ConnRole::AwaitingLogin, _) => {
                self.stats.protocol_disconnects += 1;
                self.reject(
                    conn,
                    code::PROTOCOL,
                    "login required before any other message",
                );
            }
            (ConnRole::Subscriber, Message::Request(req)) => self.on_subscriber_request(conn, req),
            (ConnRole::Subscriber, Message::Close { stream_id }) => {
                self.end_stream(conn, *stream_id)
            }
            (ConnRole::Subscriber, Message::Replay(r)) => self.on_subscriber_replay(conn, r),
            (ConnRole::Subscriber | ConnRole::Publisher, Message::Files(body)) => {
                self.on_files_message(conn, body)
            }
            (ConnRole::Subscriber, Message::Post(p)) => self.on_subscriber_post(conn, p),
            (ConnRole::Publisher, Message::Ack(a)) => self.on_publisher_ack(conn, a),
            (ConnRole::Publisher, Message::Directory(dir)) => {
                self.on_publisher_directory(conn, dir)
            }
            (ConnRole::Publisher, Message::Update(upd)) => {
                self.on_publisher_update(conn, upd, encoded)
            }
            (ConnRole::Publisher, Message::Refresh(r)) => self.on_publisher_refresh(conn, r),
            (ConnRole::Publisher, Message::Status(s)) => self.on_publisher_status(conn, s),
            (ConnRole::Closing, _) => {}
            (_, other) => {
                self.stats.protocol_disconnects += 1;
                let text = format!(
                    "a {} may not send a {:?} message",
                    if role == ConnRole::Publisher {
                        "publisher"
                    } else {
                        "subscriber"
                    },
                    other.message_type()
                );
                self.reject(conn, code::PROTOCOL, &text);
            }
        }
    }

    fn on_login(&mut self, conn: ConnId, login: &Login<'_>) {
        let lo = login.version_min.max(PROTOCOL_VERSION_MIN);
        let hi = login.version_max.min(PROTOCOL_VERSION_MAX);
        if lo > hi {
            let text = format!(
                "no common protocol version: client speaks {}..={}, node speaks {}..={}",
                login.version_min, login.version_max, PROTOCOL_VERSION_MIN, PROTOCOL_VERSION_MAX
            );
            self.stats.protocol_disconnects += 1;
            self.reject(conn, code::LOGIN_REJECTED, &text);
            return;
        }
        if self.shutting_down {
            self.reject(conn, code::SHUTDOWN, "node shutting down");
            return;
        }
        if let Some(text) = self.loop_refusal(login.application) {
            self.reject(conn, code::LOGIN_REJECTED, &text);
            return;
        }
        for (what, name) in [("user", login.user), ("application", login.application)] {
            if name.len() > MAX_LOGIN_NAME_BYTES {
                let text = format!(
                    "login rejected: the {what} name {} is longer than {MAX_LOGIN_NAME_BYTES} bytes",
                    admission::shown(name)
                );
                self.stats.protocol_disconnects += 1;
                self.reject(conn, code::LOGIN_REJECTED, &text);
                return;
            }
        }
        if let Some(text) = self.login_held_off(conn, login.user) {
            self.reject(conn, code::LOGIN_REJECTED, &text);
            return;
        }
        let Some(identity) = self.authenticate(conn, hi, login) else {
            return; // refused, or its secret is being checked
        };
        if identity == Identity::Anonymous {
            let peer = self.conns[conn].as_ref().map_or("", |c| c.peer.as_str());
            info!(
                target: "audit",
                user = %LogName(login.user), role = ?login.role, %peer, anonymous = true,
                "login accepted"
            );
        }
        self.finish_login(
            conn,
            hi,
            login.role,
            login.user,
            login.application,
            login.slow_consumer,
            identity,
        );
    }

    /// Why a node logging in would close a loop: it is this node, or a node this one
    /// is fed from.
    fn loop_refusal(&self, application: &str) -> Option<String> {
        let id = tickwire_proto::parse_node_login(application)?;
        if id == self.cfg.node_id {
            return Some(format!(
                "loop refused: node {:?} ({id:016x}) is logging in to itself",
                self.cfg.node_name
            ));
        }
        let (_, name) = self.upstream_chain.iter().find(|(i, _)| *i == id)?;
        let chain: Vec<&str> = self
            .upstream_chain
            .iter()
            .map(|(_, n)| n.as_str())
            .collect();
        Some(format!(
            "loop refused: node {name:?} ({id:016x}) feeds this node (upstream chain {}); \
             it cannot also be fed by it",
            chain.join(" -> ")
        ))
    }

    /// The nodes this node is fed from over upstream links, nearest first: a login
    /// from any of them is refused (it would close a loop).
    pub fn set_upstream_chain(&mut self, chain: Vec<(u64, String)>) {
        self.upstream_chain = chain;
    }

    /// A login accepted: the connection takes its role and gets the Welcome (and a
    /// subscriber the directory).
    #[allow(clippy::too_many_arguments)]
    fn finish_login(
        &mut self,
        conn: ConnId,
        version: u16,
        role: Role,
        user: &str,
        application: &str,
        slow_consumer: Option<SlowConsumerPolicy>,
        identity: Identity,
    ) {
        if self.role(conn) != Some(ConnRole::AwaitingLogin) {
            return;
        }
        // Connections waiting to log in are not counted at accept (so that they
        // cannot crowd out real users): the limit holds at the login, or as many as
        // were waiting when the node was short of it would all get in.
        let max = self.cfg.limits.max_connections;
        let internal = self.conns[conn].as_ref().is_some_and(|c| c.internal);
        if !internal && self.logged_in_count() >= max {
            self.reject(
                conn,
                code::TOO_MANY_CONNECTIONS,
                &format!("connection limit reached: {max} connections"),
            );
            return;
        }
        self.stats.logins += 1;
        self.awaiting_login -= 1;
        let ip = self.conns[conn].as_ref().and_then(|c| c.ip);
        self.login_no_longer_pending(ip);
        let limits = self.cfg.limits.clone();
        if role == Role::Subscriber {
            let policy = self.policy_for(user, slow_consumer);
            self.apply_policy(conn, policy);
        }
        let Some(c) = self.conn_mut(conn) else { return };
        c.role = match role {
            Role::Subscriber => ConnRole::Subscriber,
            Role::Publisher => ConnRole::Publisher,
        };
        c.logged_in = true;
        c.identity = identity;
        c.user = user.to_string();
        c.application = application.to_string();
        info!(
            peer = %c.peer, ?role, user = %LogName(&c.user), application = %LogName(&c.application),
            "logged in"
        );
        let welcome = Message::Welcome(Welcome {
            version,
            heartbeat_ms: limits.heartbeat.as_millis() as u32,
            max_frame: limits.max_frame as u32,
            // Past what 32 bits say, the most they say: `as` kept the low bits (2^32
            // streams were said as 0).
            max_streams: u32::try_from(limits.max_streams_per_connection).unwrap_or(u32::MAX),
            max_output_bytes: u32::try_from(limits.max_output_bytes).unwrap_or(u32::MAX),
            node_name: &self.cfg.node_name.clone(),
        });
        self.send(conn, &welcome);
        if role == Role::Subscriber {
            self.send_directory(conn);
        }
    }

    /// What subscribers see of one service.
    fn service_entry(&self, svc: usize) -> ServiceEntry<'_> {
        let s = &self.services[svc];
        ServiceEntry {
            name: &s.name,
            state: if s.publisher.is_some() && s.up {
                ServiceState::Up
            } else {
                ServiceState::Down
            },
            interactive: s.interactive,
            item_count: s.items.len() as u32,
        }
    }

    /// Whether a connection may see every service in the directory: no entitlements
    /// to filter it by (an open node, the node's own peers, a user or an anonymous
    /// login entitled to subscribe to `"*"`).
    fn sees_every_service(&self, conn: ConnId) -> bool {
        self.entitlements_pass(conn, |e| e.subscribe == Services::All)
    }

    /// The whole directory, to a subscriber that just logged in or caught up: the
    /// services it may subscribe to (the others are not its business, not even their
    /// names).
    fn send_directory(&mut self, conn: ConnId) {
        let all = self.sees_every_service(conn);
        let entries: Vec<ServiceEntry<'_>> = (0..self.services.len())
            .filter(|&s| all || self.may(conn, Action::Subscribe, &self.services[s].name))
            .map(|s| self.service_entry(s))
            .collect();
        let mut buf = Vec::new();
        let mut ends = Vec::new();
        encode_directory(&entries, &mut buf, &mut ends);
        self.queue_encoded(conn, &buf, &ends);
    }

    /// Tells every subscriber what changed: `changed` services (their current entry)
    /// and `removed` ones, each subscriber only the services it may subscribe to. A
    /// subscriber that is behind gets nothing now and the whole directory when it
    /// catches up, so a publisher announcing services over and over cannot fill
    /// anyone's queue.
    ///
    /// Encoded once for every subscriber that sees every service, and once per distinct
    /// set of visible entries for the others: their entitlements are looked up once
    /// per user, and users with the same rights (a group) share one encoding. The cost
    /// is O(subscribers + users with restricted rights x services changed), on
    /// directory changes only (the update path does not look at any of this).
    fn broadcast_directory_change(&mut self, changed: &[usize], removed: &[String]) {
        if changed.is_empty() && removed.is_empty() {
            return;
        }
        let mut entries: Vec<ServiceEntry<'_>> =
            changed.iter().map(|&s| self.service_entry(s)).collect();
        entries.extend(removed.iter().map(|name| ServiceEntry {
            name,
            state: ServiceState::Removed,
            interactive: false,
            item_count: 0,
        }));
        // Encodings: [0] every entry; then one per distinct subset (entry indices).
        let (mut buf, mut ends) = (Vec::new(), Vec::new());
        encode_directory(&entries, &mut buf, &mut ends);
        let mut encoded: Vec<Encoded> = vec![(buf, ends)];
        let mut by_subset: FxHashMap<Vec<u32>, usize> = FxHashMap::default();
        let mut by_user: FxHashMap<&str, Option<usize>> = FxHashMap::default();
        // Per subscriber: the encoding it gets (`None`: nothing it may see changed),
        // or that it is behind.
        let mut plan: Vec<(ConnId, Result<Option<usize>, ()>)> = Vec::new();
        for (id, c) in self.conns.iter().enumerate() {
            let Some(c) = c else { continue };
            if c.role != ConnRole::Subscriber {
                continue;
            }
            if c.conflation.is_some() {
                plan.push((id, Err(())));
                continue;
            }
            let memo = (c.identity == Identity::User)
                .then(|| by_user.get(c.user.as_str()).copied())
                .flatten();
            let which = match memo {
                Some(which) => which,
                None if self.sees_every_service(id) => Some(0),
                None => {
                    let subset: Vec<u32> = (0..entries.len() as u32)
                        .filter(|&i| self.may(id, Action::Subscribe, entries[i as usize].name))
                        .collect();
                    (!subset.is_empty()).then(|| {
                        *by_subset.entry(subset).or_insert_with_key(|subset| {
                            let chosen: Vec<ServiceEntry<'_>> = subset
                                .iter()
                                .map(|&i| entries[i as usize].clone())
                                .collect();
                            let mut e: Encoded = Default::default();
                            encode_directory(&chosen, &mut e.0, &mut e.1);
                            encoded.push(e);
                            encoded.len() - 1
                        })
                    })
                }
            };
            if c.identity == Identity::User {
                by_user.insert(c.user.as_str(), which);
            }
            plan.push((id, Ok(which)));
        }
        drop(by_user);
        for (id, which) in plan {
            match which {
                Err(()) => {
                    if let Some(c) = self.conn_mut(id) {
                        c.directory_stale = true;
                    }
                }
                Ok(None) => {}
                Ok(Some(i)) => {
                    let (buf, ends) = &encoded[i];
                    self.queue_encoded(id, buf, ends);
                }
            }
        }
    }

    /// Queues already-encoded messages (`ends`: where each ends in `buf`) through the
    /// connection's bounded queue.
    fn queue_encoded(&mut self, conn: ConnId, buf: &[u8], ends: &[usize]) {
        let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return;
        };
        let mut start = 0;
        for &end in ends {
            c.out.push_encoded(&buf[start..end]);
            start = end;
        }
        self.mark_dirty(conn);
        self.check_overflow(conn);
    }

    fn mark_dirty(&mut self, conn: ConnId) {
        let now = self.now;
        if let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) {
            c.last_tx = now;
            if !c.dirty {
                c.dirty = true;
                self.dirty.push(conn);
            }
        }
    }

    /// What a subscriber's stream for `service` must pass to open, a request's or a
    /// replay's (`what`, for the audit log): room under the stream limit, the user's
    /// entitlement, a service the node knows. The service's index, or the code and
    /// text of the refusal.
    pub(crate) fn admit_stream(
        &mut self,
        conn: ConnId,
        service: &str,
        what: &str,
    ) -> Result<usize, (u16, String)> {
        let max = self.cfg.limits.max_streams_per_connection;
        // Replays waiting for their history count: each joins as a stream.
        let open =
            self.conn_mut(conn).map_or(0, |c| c.sub_streams.len()) + self.replays.waiting_of(conn);
        if open >= max {
            return Err((
                code::TOO_MANY_STREAMS,
                format!("stream limit reached: {max} open streams per connection"),
            ));
        }
        if !self.may(conn, Action::Subscribe, service) {
            let text = self.not_entitled(conn, Action::Subscribe, service);
            info!(target: "audit", "{what} refused: {text}");
            return Err((code::NOT_ENTITLED, text));
        }
        self.service_by_name
            .get(service)
            .copied()
            .ok_or_else(|| (code::NOT_FOUND, format!("unknown service {service:?}")))
    }

    /// A subscriber's stream on id 0 (the connection's own): the connection is closed
    /// as a protocol error. True if so.
    fn refuse_stream_zero(&mut self, conn: ConnId, sid: u32) -> bool {
        if sid != 0 {
            return false;
        }
        self.stats.protocol_disconnects += 1;
        self.reject(
            conn,
            code::PROTOCOL,
            "stream id 0 is reserved for the connection",
        );
        true
    }

    fn on_subscriber_request(&mut self, conn: ConnId, req: &Request<'_>) {
        self.stats.requests += 1;
        let sid = req.stream_id;
        if self.refuse_stream_zero(conn, sid) {
            return;
        }
        // Views are kept sorted and without repeats: every field of every update is
        // looked up in them by binary search.
        let view: Option<Arc<[i16]>> = req.view.as_ref().map(|v| {
            let mut fids: Vec<i16> = match v {
                View::Encoded(l) => l.iter().collect(),
                View::Fids(f) => f.to_vec(),
            };
            fids.sort_unstable();
            fids.dedup();
            match &self.last_view {
                Some(last) if **last == *fids => last.clone(),
                _ => {
                    let view: Arc<[i16]> = fids.into();
                    self.last_view = Some(view.clone());
                    view
                }
            }
        });
        if !req.refresh {
            self.change_view_in_place(conn, req, view);
            return;
        }
        // A request on an open stream (or one replaying) re-issues it (a new view, a
        // fresh image).
        self.end_stream(conn, sid);
        let svc = match self.admit_stream(conn, req.service, "request") {
            Ok(svc) => svc,
            Err((c, text)) => {
                self.send(
                    conn,
                    &Message::Status(Status {
                        stream_id: sid,
                        state: State::closed(c, &text),
                    }),
                );
                return;
            }
        };
        let entry = SubEntry {
            conn,
            stream_id: sid,
            view,
            awaiting_refresh: true,
            streaming: req.streaming,
            joined_mid_refresh: false,
        };
        let handle = match self.services[svc].items.get(req.name) {
            Some(&h) => h,
            None => {
                let service = &self.services[svc];
                let service_up = service.publisher.is_some() && service.up;
                if service_up && !service.interactive {
                    let text =
                        format!("item {:?} not found in service {:?}", req.name, req.service);
                    self.send(
                        conn,
                        &Message::Status(Status {
                            stream_id: sid,
                            state: State::closed(code::NOT_FOUND, &text),
                        }),
                    );
                    return;
                }
                let h = self.new_item(svc, req.name);
                self.services[svc].items.insert(req.name.into(), h);
                h
            }
        };
        let cache = self.cfg.cache;
        let service_up = self.services[svc].publisher.is_some() && self.services[svc].up;
        let item = self.items.get_mut(handle).expect("live handle");
        if cache && item.complete {
            // Served from the cache at once.
            let mut entry = entry;
            entry.awaiting_refresh = false;
            let streaming = entry.streaming;
            self.write_image_refresh(handle, &entry, true);
            if streaming {
                self.attach(handle, entry);
            }
            return;
        }
        let mut entry = entry;
        entry.joined_mid_refresh = item.refresh_in_parts;
        self.attach(handle, entry);
        if !service_up {
            let text = format!(
                "service {:?} is down; waiting for its publisher",
                req.service
            );
            self.send_service_down(conn, sid, &text);
            return;
        }
        self.request_from_publisher(handle);
    }

    /// Asks the item's publisher for a (solicited) refresh, once.
    fn request_from_publisher(&mut self, h: ItemHandle) {
        let Some(item) = self.items.get_mut(h) else {
            return;
        };
        if item.refresh_requested {
            return;
        }
        let service = &self.services[item.service];
        let Some(pconn) = service.publisher else {
            return;
        };
        let pub_sid = match item.publisher {
            Some((c, sid)) if c == pconn => sid,
            _ => {
                if !service.interactive {
                    // A non-interactive publisher will push its image itself.
                    return;
                }
                let Some(c) = self.conns[pconn].as_mut() else {
                    return;
                };
                // Node ids count up per connection (dense, so the update path finds
                // them with one load) and wrap within their half of the id space,
                // skipping ids in use; an id is not reused before the wrap, so a late
                // message for a closed stream never lands on another item.
                let mut sid = c.next_node_stream;
                while c.pub_streams.contains_key(sid) {
                    sid = sid.wrapping_add(1).max(NODE_STREAM_BASE);
                }
                c.next_node_stream = sid.wrapping_add(1).max(NODE_STREAM_BASE);
                item.publisher = Some((pconn, sid));
                c.pub_streams.insert(sid, h);
                sid
            }
        };
        item.refresh_requested = true;
        let (svc_name, name) = (service.name.clone(), item.name.clone());
        self.send(
            pconn,
            &Message::Request(Request::streaming(pub_sid, &svc_name, &name)),
        );
    }

    /// Adds a subscriber stream to its item and records where it is.
    /// A new item of service `svc` (the caller lists it in the service's items).
    fn new_item(&mut self, svc: usize, name: &str) -> ItemHandle {
        let mut item = Item::new(svc, name);
        item.journaled =
            self.cfg.journal_updates && self.cfg.journal.takes(&self.services[svc].name);
        self.items.insert(item)
    }

    /// A request without a refresh: the stream open for this item takes the new view
    /// where it stands, so an image still arriving and the updates that follow are cut
    /// to it; nothing else changes and no image is sent. On a stream not open for this
    /// item there is nothing to change: the stream is closed with the reason.
    fn change_view_in_place(&mut self, conn: ConnId, req: &Request<'_>, view: Option<Arc<[i16]>>) {
        let sid = req.stream_id;
        let at = self
            .conns
            .get(conn)
            .and_then(|c| c.as_ref())
            .and_then(|c| c.sub_streams.get(&sid))
            .copied();
        let entry = at.and_then(|at| {
            let item = self.items.get_mut(at.item)?;
            let same = &*item.name == req.name
                && self.services.get(item.service).map(|s| &*s.name) == Some(req.service);
            same.then(|| item.subs.get_mut(at.slot as usize)).flatten()
        });
        if let Some(entry) = entry {
            entry.view = view;
            return;
        }
        // Not open (a replay still reading its history is not yet), or open for
        // another item: it ends, whatever it was.
        self.end_stream(conn, sid);
        let text = format!(
            "the stream is not open for item {:?} of service {:?}: a request without a \
             refresh only changes an open stream",
            req.name, req.service
        );
        self.send(
            conn,
            &Message::Status(Status {
                stream_id: sid,
                state: State::closed(code::NOT_FOUND, &text),
            }),
        );
    }

    fn attach(&mut self, h: ItemHandle, entry: SubEntry) {
        let Some(item) = self.items.get_mut(h) else {
            return;
        };
        let (conn, sid) = (entry.conn, entry.stream_id);
        let slot = item.subs.len() as u32;
        item.subs.push(entry);
        if let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) {
            c.sub_streams.insert(sid, StreamRef { item: h, slot });
        }
    }

    /// Ends a subscriber stream, open or replaying its item's history.
    fn end_stream(&mut self, conn: ConnId, sid: u32) {
        self.unsubscribe(conn, sid);
        self.replay_stream_closed(conn, sid);
    }

    /// Removes one subscriber stream (if open) from its item in O(1), releasing the
    /// item if it was the last.
    fn unsubscribe(&mut self, conn: ConnId, sid: u32) {
        let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return;
        };
        let Some(at) = c.sub_streams.remove(&sid) else {
            return;
        };
        if let Some(cf) = c.conflation.as_deref_mut() {
            cf.pending.remove(&sid);
        }
        let Some(item) = self.items.get_mut(at.item) else {
            return;
        };
        let slot = at.slot as usize;
        debug_assert!(item
            .subs
            .get(slot)
            .is_some_and(|s| s.conn == conn && s.stream_id == sid));
        if slot >= item.subs.len() {
            return;
        }
        item.subs.swap_remove(slot);
        // The stream that took its place records its new slot.
        if let Some(moved) = item.subs.get(slot) {
            let moved_at = self
                .conns
                .get_mut(moved.conn)
                .and_then(|c| c.as_mut())
                .and_then(|c| c.sub_streams.get_mut(&moved.stream_id));
            if let Some(r) = moved_at {
                r.slot = at.slot;
            }
        }
        if item.subs.is_empty() {
            self.release_if_unused(at.item);
        }
    }

    /// An item nobody watches: closed on an interactive publisher (it stops sending);
    /// kept in the cache for a non-interactive one, also while its service is down after
    /// its publisher left (the stale image is served, suspect, as to the streams that
    /// watched it then). Once the service is up again, only what its publisher publishes
    /// is kept.
    fn release_if_unused(&mut self, h: ItemHandle) {
        let Some(item) = self.items.get(h) else {
            return;
        };
        if !item.subs.is_empty() {
            return;
        }
        let service = &self.services[item.service];
        let service_up = service.publisher.is_some() && service.up;
        let stale_image = self.cfg.cache && item.complete && !service_up;
        let keep = !service.interactive && (item.publisher.is_some() || stale_image);
        if keep {
            return;
        }
        let linger = self.cfg.interactive_linger;
        if service.interactive && self.cfg.cache && !linger.is_zero() && service_up {
            let now = self.now;
            let item = self.items.get_mut(h).expect("live");
            if item.complete && item.publisher.is_some() {
                if item.linger_until.replace(now + linger).is_none() {
                    self.lingering.push(h);
                }
                self.tick_by(now + linger);
                return;
            }
        }
        self.drop_unwatched(h);
    }

    /// [`Node::handle_timeout`] is needed by `at` (or sooner).
    fn tick_by(&mut self, at: Instant) {
        self.next_tick = self.next_tick.min(at);
    }

    /// When [`Node::handle_timeout`] is next needed: the earliest heartbeat, timeout or
    /// linger deadline, at most [`MAX_TICK_INTERVAL`] away (services past their
    /// retention, expired session tokens).
    pub fn poll_timeout(&self) -> Option<Instant> {
        Some(self.next_tick)
    }

    /// Items whose linger time is over and that nobody asked for meanwhile go.
    fn end_lingering(&mut self, now: Instant) {
        if self.lingering.is_empty() {
            return;
        }
        let mut i = 0;
        while i < self.lingering.len() {
            let h = self.lingering[i];
            let state = self
                .items
                .get(h)
                .map(|it| (it.subs.is_empty(), it.linger_until));
            match state {
                Some((true, Some(until))) if now < until => {
                    self.tick_by(until);
                    i += 1;
                }
                Some((unwatched, Some(_))) => {
                    self.lingering.swap_remove(i);
                    if let Some(it) = self.items.get_mut(h) {
                        it.linger_until = None;
                    }
                    if unwatched {
                        self.drop_unwatched(h);
                    }
                }
                // Gone meanwhile (its handle perhaps reused by an item not lingering).
                _ => {
                    self.lingering.swap_remove(i);
                }
            }
        }
    }

    /// Removes an item nobody watches, closing it at its interactive publisher.
    fn drop_unwatched(&mut self, h: ItemHandle) {
        let item = self.items.remove(h).expect("live");
        self.services[item.service].items.remove(&*item.name);
        if let Some((pconn, sid)) = item.publisher {
            if let Some(c) = self.conns.get_mut(pconn).and_then(|c| c.as_mut()) {
                c.pub_streams.remove(sid);
            }
            if self.role(pconn) == Some(ConnRole::Publisher) {
                self.send(pconn, &Message::Close { stream_id: sid });
            }
        }
    }

    fn on_publisher_directory(&mut self, conn: ConnId, dir: &Directory<'_>) {
        let mut changed = Vec::new();
        let internal = self.conns[conn].as_ref().is_some_and(|c| c.internal);
        // With an in-process peer: how many services were left out, and the first why.
        let mut left_out: (u64, Option<String>) = (0, None);
        for entry in &dir.services {
            if let Err((code, text)) = self.check_announced(conn, entry) {
                if internal {
                    // An in-process peer (an upstream link, the backbone) relays
                    // services it does not choose: the one it may not carry is left
                    // out, the others go on. Closing it would cut them all, and it
                    // cannot log in again.
                    left_out.0 += 1;
                    left_out.1.get_or_insert(text);
                    continue;
                }
                self.stats.protocol_disconnects += 1;
                self.reject(conn, code, &text);
                break;
            }
            let svc = match self.service_by_name.get(entry.name) {
                Some(&s) => s,
                None => {
                    self.services.push(Service {
                        name: entry.name.to_string(),
                        publisher: None,
                        up: false,
                        interactive: entry.interactive,
                        items: FxHashMap::default(),
                        orphaned_since: None,
                        updates_in: 0,
                        updates_out: 0,
                    });
                    let s = self.services.len() - 1;
                    self.service_by_name.insert(entry.name.to_string(), s);
                    changed.push(s);
                    s
                }
            };
            if self.services[svc].publisher.is_none() {
                self.services[svc].publisher = Some(conn);
                self.services[svc].orphaned_since = None;
                if let Some(c) = self.conn_mut(conn) {
                    c.services.push(svc);
                }
                changed.push(svc);
            }
            let service = &mut self.services[svc];
            let was_up = service.up;
            let up = entry.state == ServiceState::Up;
            if service.interactive == entry.interactive && was_up == up {
                continue; // nothing changed: nothing to log or tell
            }
            service.interactive = entry.interactive;
            service.up = up;
            changed.push(svc);
            info!(
                service = %service.name,
                interactive = entry.interactive,
                "service is {}",
                if up { "up" } else { "down" },
            );
            if up && !was_up {
                self.service_came_up(svc);
            } else if was_up && !up {
                self.service_went_down(svc);
            }
        }
        if let (n @ 1.., Some(first)) = left_out {
            self.stats.internal_services_refused += n;
            // One line per directory, however many it held (a peer posing as an
            // upstream node may announce thousands).
            warn!(
                peer = %self.conns[conn].as_ref().map_or("", |c| c.peer.as_str()),
                "service not taken from an in-process peer: {first}{}",
                if n > 1 { format!(" (and {} more services left out)", n - 1) } else { String::new() }
            );
        }
        changed.sort_unstable();
        changed.dedup();
        self.broadcast_directory_change(&changed, &[]);
    }

    /// Whether a publisher may announce this directory entry; the code and reason if
    /// not.
    fn check_announced(&self, conn: ConnId, entry: &ServiceEntry<'_>) -> Result<(), (u16, String)> {
        if entry.state == ServiceState::Removed {
            let text = format!(
                "service {:?}: state removed is sent by nodes only",
                entry.name
            );
            return Err((code::PROTOCOL, text));
        }
        if !self.may(conn, Action::Publish, entry.name) {
            let text = self.not_entitled(conn, Action::Publish, entry.name);
            warn!(target: "audit", "publisher refused: {text}");
            return Err((code::NOT_ENTITLED, text));
        }
        if entry.name.is_empty() || entry.name.len() > MAX_SERVICE_NAME {
            let text = format!(
                "service name of {} bytes: allowed 1 to {MAX_SERVICE_NAME}",
                entry.name.len()
            );
            return Err((code::PROTOCOL, text));
        }
        match self.service_by_name.get(entry.name) {
            Some(&svc) => match self.services[svc].publisher {
                Some(other) if other != conn => Err((
                    code::PROTOCOL,
                    format!(
                        "service {:?} is already published by {}",
                        entry.name,
                        self.conns[other].as_ref().map_or("", |c| c.peer.as_str())
                    ),
                )),
                _ => Ok(()),
            },
            None if self.services.len() >= self.cfg.limits.max_services => Err((
                code::TOO_MANY_SERVICES,
                format!(
                    "service limit reached: {} services on this node (limits.max_services)",
                    self.cfg.limits.max_services
                ),
            )),
            None => Ok(()),
        }
    }

    /// Removes the services that have had no publisher for `service_retention` and
    /// that nobody watches, with their cached images, and tells subscribers.
    fn expire_services(&mut self, now: Instant) {
        let keep = self.cfg.limits.service_retention;
        if keep.is_zero() {
            return;
        }
        let mut removed = Vec::new();
        let mut svc = 0;
        while svc < self.services.len() {
            let s = &self.services[svc];
            let expired = s.publisher.is_none()
                && s.orphaned_since
                    .is_some_and(|t| now.saturating_duration_since(t) >= keep)
                && s.items
                    .values()
                    .all(|&h| self.items.get(h).is_none_or(|i| i.subs.is_empty()));
            if expired {
                removed.push(self.remove_service(svc));
            } else {
                svc += 1;
            }
        }
        self.broadcast_directory_change(&[], &removed);
    }

    /// Forgets a service nobody publishes or watches, and its items; the last service
    /// takes its index. Returns its name.
    fn remove_service(&mut self, svc: usize) -> String {
        let service = self.services.swap_remove(svc);
        self.service_by_name.remove(&service.name);
        for &h in service.items.values() {
            self.items.remove(h);
        }
        if let Some(moved) = self.services.get(svc) {
            let from = self.services.len();
            if let Some(i) = self.service_by_name.get_mut(&moved.name) {
                *i = svc;
            }
            for &h in moved.items.values() {
                if let Some(item) = self.items.get_mut(h) {
                    item.service = svc;
                }
            }
            if let Some(p) = moved.publisher {
                if let Some(c) = self.conns.get_mut(p).and_then(|c| c.as_mut()) {
                    for s in c.services.iter_mut().filter(|s| **s == from) {
                        *s = svc;
                    }
                }
            }
        }
        info!(
            "service {:?} removed: no publisher for {} s and nobody watching ({} cached items dropped)",
            service.name,
            self.cfg.limits.service_retention.as_secs(),
            service.items.len()
        );
        service.name
    }

    /// Streams held while the service was down: an interactive publisher is asked for
    /// them; a non-interactive one has pushed what it has, and the rest do not exist.
    fn service_came_up(&mut self, svc: usize) {
        // Stale images nobody watches go: the returning publisher re-images what it
        // still publishes (non-interactive) or is asked when someone wants it.
        let unwatched_stale: Vec<ItemHandle> = self.services[svc]
            .items
            .values()
            .copied()
            .filter(|&h| {
                self.items
                    .get(h)
                    .is_some_and(|i| i.subs.is_empty() && i.publisher.is_none())
            })
            .collect();
        for h in unwatched_stale {
            self.release_if_unused(h);
        }
        let interactive = self.services[svc].interactive;
        let watched: Vec<ItemHandle> = self.services[svc]
            .items
            .values()
            .copied()
            .filter(|&h| self.items.get(h).is_some_and(|i| !i.subs.is_empty()))
            .collect();
        for h in watched {
            let Some(item) = self.items.get_mut(h) else {
                continue;
            };
            let waiting = item.subs.iter().any(|s| s.awaiting_refresh);
            if interactive {
                // Everything watched is asked for again; live streams (suspect since the
                // old publisher left) get the new image too.
                item.recovering = item.subs.iter().any(|s| !s.awaiting_refresh);
                // So is an item whose request was unanswered when the service went
                // down: the answer may have gone with it (an RSSL provider's lost
                // connection), and the item would wait for it for good.
                item.refresh_requested = false;
                self.request_from_publisher(h);
            } else if waiting {
                if item.publisher.is_some() {
                    self.request_from_publisher(h);
                } else {
                    let name = item.name.clone();
                    let text = format!(
                        "item {name:?} not found in service {:?}",
                        self.services[svc].name
                    );
                    self.close_item(h, State::closed(code::NOT_FOUND, &text));
                }
            }
        }
    }

    /// A live publisher announced its service down: its streams turn suspect.
    fn service_went_down(&mut self, svc: usize) {
        let text = format!("service {:?} is down", self.services[svc].name);
        let handles: Vec<ItemHandle> = self.services[svc].items.values().copied().collect();
        for h in handles {
            let Some(item) = self.items.get_mut(h) else {
                continue;
            };
            item.data_state = DataState::Suspect;
            let subs: Vec<(ConnId, u32)> =
                item.subs.iter().map(|s| (s.conn, s.stream_id)).collect();
            for (c, sid) in subs {
                self.send_service_down(c, sid, &text);
            }
        }
    }

    /// Tells a subscriber stream its service is down (`text` says which): the stream
    /// stays open, its data suspect, until a publisher brings the service back (a
    /// request that finds the service down and a service that goes down alike).
    fn send_service_down(&mut self, conn: ConnId, stream_id: u32, text: &str) {
        self.send(
            conn,
            &Message::Status(Status {
                stream_id,
                state: State {
                    stream: StreamState::Open,
                    data: DataState::Suspect,
                    code: code::SERVICE_DOWN,
                    text,
                },
            }),
        );
    }

    /// Sends `state` to every stream of an item and forgets the item.
    fn close_item(&mut self, h: ItemHandle, state: State<'_>) {
        // Slow subscribers get their pending values before the item goes.
        let subs: Vec<(ConnId, u32)> = self
            .items
            .get(h)
            .map(|i| i.subs.iter().map(|s| (s.conn, s.stream_id)).collect())
            .unwrap_or_default();
        for (c, sid) in subs {
            self.write_pending_now(c, sid);
        }
        let Some(item) = self.items.remove(h) else {
            return;
        };
        self.services[item.service].items.remove(&*item.name);
        if let Some((pconn, sid)) = item.publisher {
            if let Some(c) = self.conns.get_mut(pconn).and_then(|c| c.as_mut()) {
                c.pub_streams.remove(sid);
            }
        }
        for s in &item.subs {
            if let Some(c) = self.conns.get_mut(s.conn).and_then(|c| c.as_mut()) {
                c.sub_streams.remove(&s.stream_id);
            }
            self.send(
                s.conn,
                &Message::Status(Status {
                    stream_id: s.stream_id,
                    state,
                }),
            );
        }
    }

    /// The publisher of some services left: their streams turn suspect, caches stay.
    fn publisher_gone(&mut self, conn: ConnId, reason: &str) {
        let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return;
        };
        let services = std::mem::take(&mut c.services);
        c.pub_streams.clear();
        self.services_left(services, reason);
    }

    /// An in-process publisher (an upstream link, a backbone edge) no longer has the
    /// services `names` of its own (where it takes them from removed them): they go as
    /// if their publisher had left (their streams suspect, their caches kept), and
    /// unless a publisher announces them again, are removed after
    /// `service_retention` at this node and every node below it. A publisher may not
    /// remove a service itself: a peer that left and comes back finds it.
    pub fn release_services(&mut self, conn: ConnId, names: &[&str], reason: &str) {
        let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return;
        };
        let mine: Vec<usize> = names
            .iter()
            .filter_map(|n| self.service_by_name.get(*n).copied())
            .filter(|svc| c.services.contains(svc))
            .collect();
        if mine.is_empty() {
            return;
        }
        c.services.retain(|svc| !mine.contains(svc));
        // Its streams of their items close, as for items nobody watches: it stops
        // sending them, and takes them again as a publisher of the service.
        let mut closed = Vec::new();
        for &svc in &mine {
            for h in self.services[svc].items.values() {
                match self.items.get(*h).and_then(|i| i.publisher) {
                    Some((p, sid)) if p == conn => {
                        c.pub_streams.remove(sid);
                        closed.push(sid);
                    }
                    _ => {}
                }
            }
        }
        for sid in closed {
            self.send(conn, &Message::Close { stream_id: sid });
        }
        self.services_left(mine, reason);
    }

    /// The services `services` lost their publisher (`reason`, for the log).
    fn services_left(&mut self, services: Vec<usize>, reason: &str) {
        let mut to_release = Vec::new();
        let now = self.now;
        for &svc in &services {
            self.services[svc].orphaned_since = Some(now);
            let name = self.services[svc].name.clone();
            warn!(service = %name, "service is down: its publisher left ({reason})");
            self.services[svc].publisher = None;
            self.services[svc].up = false;
            let text = format!("service {name:?} is down: its publisher left");
            let handles: Vec<ItemHandle> = self.services[svc].items.values().copied().collect();
            for h in handles {
                let Some(item) = self.items.get_mut(h) else {
                    continue;
                };
                item.publisher = None;
                item.refresh_requested = false;
                item.refresh_in_parts = false;
                item.data_state = DataState::Suspect;
                let subs: Vec<(ConnId, u32)> =
                    item.subs.iter().map(|s| (s.conn, s.stream_id)).collect();
                if subs.is_empty() {
                    to_release.push(h);
                }
                for (sc, sid) in subs {
                    self.send(
                        sc,
                        &Message::Status(Status {
                            stream_id: sid,
                            state: State {
                                stream: StreamState::Open,
                                data: DataState::Suspect,
                                code: code::PUBLISHER_GONE,
                                text: &text,
                            },
                        }),
                    );
                }
            }
        }
        for h in to_release {
            // With the cache off, an image-less item nobody watches is not worth keeping.
            if !self.cfg.cache {
                if let Some(item) = self.items.remove(h) {
                    self.services[item.service].items.remove(&*item.name);
                }
            }
        }
        self.broadcast_directory_change(&services, &[]);
    }

    fn on_publisher_refresh(&mut self, conn: ConnId, r: &Refresh<'_>) {
        self.stats.refreshes_in += 1;
        let known = self
            .conn_mut(conn)
            .and_then(|c| c.pub_streams.get(r.stream_id));
        let h = match known {
            Some(h) => h,
            None => {
                // A stream of the node's not open: the node closed the request while its
                // answer was on the way (a subscriber left at once). The publisher could
                // not know: the refresh is dropped, as an update would be.
                if r.stream_id >= NODE_STREAM_BASE {
                    self.stats.refreshes_on_closed_streams += 1;
                    return;
                }
                // A non-interactive publisher pushing an item on a stream of its own.
                if r.stream_id == 0 {
                    self.stats.protocol_disconnects += 1;
                    let text = format!(
                        "refresh on stream {} which the node never opened",
                        r.stream_id
                    );
                    self.reject(conn, code::PROTOCOL, &text);
                    return;
                }
                let svc = self.service_by_name.get(r.service).copied();
                let owned = svc.filter(|&s| self.services[s].publisher == Some(conn));
                let Some(svc) = owned else {
                    self.stats.protocol_disconnects += 1;
                    let text = format!(
                        "refresh for {}/{} but this connection did not announce service {:?}",
                        r.service, r.name, r.service
                    );
                    self.reject(conn, code::PROTOCOL, &text);
                    return;
                };
                let h = match self.services[svc].items.get(r.name) {
                    Some(&h) => h,
                    None => {
                        let h = self.new_item(svc, r.name);
                        self.services[svc].items.insert(r.name.into(), h);
                        h
                    }
                };
                let item = self.items.get_mut(h).expect("live");
                if let Some((old_conn, old_sid)) = item.publisher {
                    if old_conn == conn {
                        if let Some(c) = self.conns[conn].as_mut() {
                            c.pub_streams.remove(old_sid);
                        }
                    }
                }
                let item = self.items.get_mut(h).expect("live");
                item.publisher = Some((conn, r.stream_id));
                if let Some(c) = self.conn_mut(conn) {
                    c.pub_streams.insert(r.stream_id, h);
                }
                h
            }
        };
        let cache = self.cfg.cache;
        let item = self.items.get_mut(h).expect("live");
        if r.clear_cache {
            item.image.clear();
            item.complete = false;
        }
        if cache {
            item.image.apply(r.fields);
            if item.image.encoded_len() > self.max_image {
                self.refuse_large_image(conn, h);
                return;
            }
        }
        item.seq = r.seq;
        item.data_state = r.state.data;
        if item.journaled {
            self.posts
                .journal_item_message(&tickwire_journal::ItemMessage {
                    service: &self.services[item.service].name,
                    item: &item.name,
                    seq: r.seq,
                    refresh: true,
                    update_type: 0,
                    fields: r.fields,
                });
            if item.capturing {
                self.replays.capture(h, r.seq, true, 0, r.fields.as_bytes());
            }
        }
        // Who gets this refresh: a solicited one goes to the streams waiting for an
        // image; an unsolicited one (a re-image) or a recovery to every stream.
        let solicited = r.solicited && !item.recovering;
        if r.complete {
            item.complete = cache;
            item.refresh_requested = false;
            item.recovering = false;
        }
        if !cache {
            item.refresh_in_parts = !r.complete;
        } else if !r.complete {
            // Sent once whole, from the cache: a part costs no walk of the item's
            // streams (a publisher's many small parts to an item of 100,000 streams).
            return;
        }
        // Streams opened between this refresh's parts get none of it (they missed its
        // first parts); once it is complete the publisher is asked again for them.
        let mut late = false;
        let targets: Vec<usize> = item
            .subs
            .iter_mut()
            .enumerate()
            .filter_map(|(i, s)| {
                if s.joined_mid_refresh {
                    s.joined_mid_refresh = !r.complete;
                    late = true;
                    return None;
                }
                (s.awaiting_refresh || !solicited).then_some(i)
            })
            .collect();
        if late && r.complete {
            self.request_from_publisher(h);
        }
        if targets.is_empty() {
            return;
        }
        if cache {
            for &i in &targets {
                let entry = self.items.get(h).expect("live").subs[i].clone_meta();
                self.write_image_refresh(h, &entry, solicited || entry.awaiting_refresh);
            }
        } else {
            for &i in &targets {
                let entry = self.items.get(h).expect("live").subs[i].clone_meta();
                self.write_passthrough_refresh(h, &entry, r);
            }
        }
        self.after_refresh(h, &targets, r.complete);
    }

    /// Marks refreshed streams live and drops the snapshot ones.
    fn after_refresh(&mut self, h: ItemHandle, targets: &[usize], complete: bool) {
        if !complete {
            return;
        }
        let Some(item) = self.items.get_mut(h) else {
            return;
        };
        let mut snapshots = Vec::new();
        for &i in targets {
            let s = &mut item.subs[i];
            s.awaiting_refresh = false;
            if !s.streaming {
                snapshots.push((s.conn, s.stream_id));
            }
        }
        for (c, sid) in snapshots {
            self.unsubscribe(c, sid);
        }
    }

    /// Writes the cached image of an item to one subscriber stream, split into parts if it
    /// does not fit one message.
    fn write_image_refresh(&mut self, h: ItemHandle, sub: &SubEntry, solicited: bool) {
        self.merge_deferred();
        self.discard_pending(sub.conn, sub.stream_id);
        let Some(item) = self.items.get(h) else {
            return;
        };
        let service = &self.services[item.service];
        let state = State {
            stream: sub.stream_state(),
            data: item.data_state,
            code: code::NONE,
            text: "",
        };
        let Some(c) = self.conns.get_mut(sub.conn).and_then(|c| c.as_mut()) else {
            return;
        };
        let mut fields = std::mem::take(&mut self.scratch);
        fields.clear();
        item.image.write(&mut fields, sub.view.as_deref());
        // An image too large for one message goes out in parts.
        const PART: usize = tickwire_proto::field::PART_BYTES;
        let split;
        let parts: Vec<&[u8]> = if fields.len() <= PART {
            vec![&fields[..]]
        } else {
            split = tickwire_proto::field::split_field_list(&fields, PART);
            split.iter().map(|p| &p[..]).collect()
        };
        let n = parts.len();
        for (i, part) in parts.iter().enumerate() {
            let msg = Message::Refresh(Refresh {
                stream_id: sub.stream_id,
                seq: item.seq,
                complete: i + 1 == n,
                solicited,
                clear_cache: i == 0,
                state,
                service: &service.name,
                name: &item.name,
                fields: FieldList::from_trusted(part),
            });
            if let Err(e) = c.out.push(&msg) {
                warn!("refresh for {} not encoded: {e}", item.name);
            }
        }
        self.refresh_queued(sub.conn, fields);
    }

    /// An image grew past what a subscriber's queue can ever hold: no subscriber could
    /// receive it (each would be dropped as a slow consumer, again and again). The item
    /// is closed to its streams with the reason and the publisher told to stop (Close
    /// on its stream); the publisher library refuses such an image before sending it.
    #[cold]
    fn refuse_large_image(&mut self, conn: ConnId, h: ItemHandle) {
        let Some(item) = self.items.get(h) else {
            return;
        };
        let text = format!(
            "image of {}/{} is {} bytes: the node caches at most {} (half of limits.max_output_bytes)",
            self.services[item.service].name,
            item.name,
            item.image.encoded_len(),
            self.max_image
        );
        let sid = item.publisher.filter(|(c, _)| *c == conn).map(|(_, s)| s);
        warn!("{text}: item closed");
        self.close_item(h, State::closed(code::TOO_LARGE, &text));
        if let Some(sid) = sid {
            self.send(conn, &Message::Close { stream_id: sid });
        }
    }

    /// Cache off: forwards a publisher's refresh part to one stream (filtered by its view).
    fn write_passthrough_refresh(&mut self, h: ItemHandle, sub: &SubEntry, r: &Refresh<'_>) {
        if r.clear_cache {
            self.discard_pending(sub.conn, sub.stream_id);
        } else {
            self.write_pending_now(sub.conn, sub.stream_id);
        }
        let Some(item) = self.items.get(h) else {
            return;
        };
        let Some(c) = self.conns.get_mut(sub.conn).and_then(|c| c.as_mut()) else {
            return;
        };
        let mut fields = std::mem::take(&mut self.scratch);
        fields.clear();
        filter_fields(&mut fields, r.fields, sub.view.as_deref());
        let msg = Message::Refresh(Refresh {
            stream_id: sub.stream_id,
            seq: r.seq,
            complete: r.complete,
            // The answer to the stream's request; a re-image of a live stream is not,
            // though it answers the node's own request (an interactive publisher back).
            solicited: sub.awaiting_refresh,
            clear_cache: r.clear_cache,
            state: State {
                stream: sub.stream_state(),
                data: item.data_state,
                code: r.state.code,
                text: r.state.text,
            },
            service: &self.services[item.service].name,
            name: &item.name,
            fields: FieldList::from_trusted(&fields),
        });
        if let Err(e) = c.out.push(&msg) {
            warn!("refresh for {} not forwarded: {e}", item.name);
        }
        self.refresh_queued(sub.conn, fields);
    }

    /// After a refresh went into a subscriber's queue (from the cache or forwarded):
    /// the field scratch back for the next one, the refresh counted, the connection
    /// due a flush and checked for overflow.
    #[inline]
    fn refresh_queued(&mut self, conn: ConnId, scratch: Vec<u8>) {
        self.scratch = scratch;
        self.stats.refreshes_out += 1;
        self.mark_dirty(conn);
        self.check_overflow(conn);
    }

    fn check_overflow(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get(conn).and_then(|c| c.as_ref()) {
            if needs_overflow_check(c) {
                self.overflowed.push(conn);
            }
        }
    }

    /// Publisher updates: while one is processed, the memory of later ones is loaded (a
    /// pipeline of hints; it changes no result). With 100,000 items updated at random,
    /// each update would otherwise wait for memory three times in a row: its stream's
    /// slot in `pub_streams`, then its item, then the item's image. Only stream ids in
    /// the dense part of `pub_streams` are followed (no hash probe for a hint).
    #[inline]
    fn prefetch_ahead(&self, conn: ConnId, ahead: &mut UpdateLookahead<'_>) {
        let Some(c) = self.conns.get(conn).and_then(|c| c.as_ref()) else {
            return;
        };
        if c.role != ConnRole::Publisher {
            return;
        }
        let (image_of, item_of, slot_of) = ahead.advance();
        // The image and the first subscription of an update a little ahead (its item
        // was loaded earlier): the fan-out reads the subscription list, a memory of its
        // own, for every update, cache on or off.
        let item = image_of
            .and_then(|sid| c.pub_streams.get_dense(sid))
            .and_then(|h| self.items.get(h));
        if let Some(item) = item {
            if self.cfg.cache {
                item.image.prefetch();
            }
            if !item.subs.is_empty() {
                prefetch(item.subs.as_ptr() as *const u8);
            }
        }
        // The item of one further on (its stream slot was loaded earlier).
        if let Some(h) = item_of.and_then(|sid| c.pub_streams.get_dense(sid)) {
            self.items.prefetch(h);
        }
        // The stream slot of one further still.
        if let Some(sid) = slot_of {
            c.pub_streams.prefetch(sid);
        }
    }

    /// The hot path: one update fanned out to every live stream of its item.
    fn on_publisher_update(&mut self, conn: ConnId, u: &Update<'_>, encoded: &[u8]) {
        self.stats.updates_in += 1;
        if self.stats.updates_in & (latency::SAMPLE_EVERY - 1) == 0 {
            self.sample_latency(u.fields);
        }
        let Some(h) = self
            .conns
            .get(conn)
            .and_then(|c| c.as_ref())
            .and_then(|c| c.pub_streams.get(u.stream_id))
        else {
            self.stats.updates_on_unknown_streams += 1;
            return;
        };
        let Some(item) = self.items.get_mut(h) else {
            return;
        };
        self.services[item.service].updates_in += 1;
        if self.cfg.cache {
            // The merge into the image waits until the subscribers' bytes are written
            // (deferred.rs), unless the image could outgrow the cache with it (then
            // everything waiting is merged first and this one at once, checked) or
            // the list is full.
            let bytes = u.fields.as_bytes();
            let most = item.image.encoded_len()
                + self.deferred.growth()
                + deferred::growth_bound(bytes.len(), u.fields.len());
            if most > self.max_image || !self.deferred.accepts(bytes.len()) {
                self.merge_deferred();
                let item = self.items.get_mut(h).expect("live");
                item.image.apply(u.fields);
                if item.image.encoded_len() > self.max_image {
                    self.refuse_large_image(conn, h);
                    return;
                }
                return self.fan_out_update(h, u, encoded);
            }
            self.deferred.push(conn, h, bytes, u.fields.len());
        }
        self.fan_out_update(h, u, encoded);
    }

    /// Merges the updates fanned out since the last call into their cached images (see
    /// deferred.rs). The driver calls it once it has written a turn's output; the core
    /// calls it itself before anything reads an image or changes the item table.
    pub fn settle(&mut self) {
        self.merge_deferred();
        self.deferred.reopen();
    }

    /// Merges what waits (before an image is read or the item table changes).
    fn merge_deferred(&mut self) {
        if self.deferred.is_empty() {
            return;
        }
        let taken = self.deferred.take();
        for i in 0..taken.len() {
            // While this one is merged, the image of one a few updates on is loaded,
            // and the item of one further still (whose image is the next to load).
            if i + SETTLE_IMAGE_AHEAD < taken.len() {
                if let Some(next) = self.items.get(taken.item(i + SETTLE_IMAGE_AHEAD)) {
                    next.image.prefetch();
                }
            }
            if i + SETTLE_ITEM_AHEAD < taken.len() {
                self.items.prefetch(taken.item(i + SETTLE_ITEM_AHEAD));
            }
            let (conn, h, fields) = taken.get(i);
            let Some(item) = self.items.get_mut(h) else {
                continue;
            };
            item.image.apply(FieldList::from_trusted(fields));
            if item.image.encoded_len() > self.max_image {
                self.refuse_large_image(conn, h);
            }
        }
        self.deferred.give_back(taken);
    }

    /// Updates fanned out whose merge into the cache is still to come ([`Node::settle`]).
    pub fn unsettled_updates(&self) -> usize {
        self.deferred.len()
    }

    /// An update to every live stream of its item (its image merged or deferred).
    #[inline(always)]
    fn fan_out_update(&mut self, h: ItemHandle, u: &Update<'_>, encoded: &[u8]) {
        let Node {
            items,
            conns,
            dirty,
            overflowed,
            cfg,
            stats,
            now,
            scratch,
            services,
            posts,
            replays,
            ..
        } = self;
        let Some(item) = items.get_mut(h) else { return };
        let out_before = stats.updates_out;
        item.seq = u.seq;
        if item.journaled {
            posts.journal_item_message(&tickwire_journal::ItemMessage {
                service: &services[item.service].name,
                item: &item.name,
                seq: u.seq,
                refresh: false,
                update_type: u.update_type.to_u8(),
                fields: u.fields,
            });
            if item.capturing {
                replays.capture(h, u.seq, false, u.update_type.to_u8(), u.fields.as_bytes());
            }
        }
        let data_state = item.data_state;
        for s in &item.subs {
            if s.awaiting_refresh {
                continue; // its refresh, still to come, will include this update
            }
            let Some(c) = conns.get_mut(s.conn).and_then(|c| c.as_mut()) else {
                continue;
            };
            if let Some(cf) = c.conflation.as_deref_mut() {
                // Behind: merged into the stream's pending update, unless it is a
                // do-not-conflate update and the queue has room for it (and for the
                // pending update, which must go first).
                let pending = cf.pending.get(&s.stream_id);
                let need = encoded.len() + pending.map_or(0, |p| p.fields.heap_bytes() + 512);
                let room = u.do_not_conflate
                    && c.out.pending_len() + need <= cfg.limits.max_output_bytes
                    && c.out.pending_messages() + 4 <= cfg.limits.max_output_messages;
                if !room {
                    slow::merge(cf, h, s.stream_id, u);
                    if u.do_not_conflate {
                        stats.do_not_conflate_dropped += 1;
                        c.do_not_conflate_dropped += 1;
                    }
                    continue;
                }
                if let Some(p) = cf.pending.remove(&s.stream_id) {
                    let view = s.view.as_deref();
                    slow::write_pending(&mut c.out, scratch, s.stream_id, &p, view, data_state);
                    slow::count_written(cf, &p, stats, &mut c.conflated_updates);
                }
                if !cf.pending.is_empty() {
                    cf.direct_since_check += 1;
                    overflowed.push(s.conn);
                }
            }
            match &s.view {
                None => write_readdressed(c.out.message_buf(encoded.len()), encoded, s.stream_id),
                Some(view) => {
                    if !write_update_view(&mut c.out, u, s.stream_id, view) {
                        continue;
                    }
                }
            }
            stats.updates_out += 1;
            c.last_tx = *now;
            if !c.dirty {
                c.dirty = true;
                dirty.push(s.conn);
            }
            if is_behind(c) {
                overflowed.push(s.conn);
            }
        }
        services[item.service].updates_out += stats.updates_out - out_before;
    }

    #[cold]
    #[inline(never)]
    fn sample_latency(&mut self, fields: FieldList<'_>) {
        if self.wall_clock_ns == 0 {
            return;
        }
        if let Some(tickwire_proto::Value::UInt(stamp)) = fields.get(tickwire_proto::fid::TIM_TRK_1)
        {
            self.latency.record(stamp, self.wall_clock_ns);
        }
    }

    fn on_publisher_status(&mut self, conn: ConnId, s: &Status<'_>) {
        let Some(h) = self
            .conn_mut(conn)
            .and_then(|c| c.pub_streams.get(s.stream_id))
        else {
            return;
        };
        if s.state.stream != StreamState::Open {
            // The publisher closed the item (e.g. not found): every stream ends with it.
            self.close_item(h, s.state);
            return;
        }
        let Some(item) = self.items.get_mut(h) else {
            return;
        };
        item.data_state = s.state.data;
        let subs: Vec<(ConnId, u32)> = item.subs.iter().map(|e| (e.conn, e.stream_id)).collect();
        for (c, sid) in subs {
            self.send(
                c,
                &Message::Status(Status {
                    stream_id: sid,
                    state: s.state,
                }),
            );
        }
    }

    /// Bytes queued for `conn` and not yet taken by its socket.
    pub fn pending_output(&self, conn: ConnId) -> usize {
        self.conns
            .get(conn)
            .and_then(|c| c.as_ref())
            .map_or(0, |c| c.out.pending_len())
    }
}

/// How many messages ahead of the one being processed [`Node::prefetch_ahead`] loads
/// an update's image, its item, and its stream slot. Each stage must have had time to
/// arrive (about a memory latency, a few hundred ns) before the next one reads it.
const PREFETCH_IMAGE: usize = 2;
const PREFETCH_ITEM: usize = 5;
const PREFETCH_SLOT: usize = 8;
const LOOKAHEAD_RING: usize = 16;

/// Walks the message headers of a frame ahead of [`MessageIter`] (no decoding) and keeps
/// the stream ids of the updates among the next messages, for [`Node::prefetch_ahead`].
struct UpdateLookahead<'a> {
    rest: &'a [u8],
    /// The stream id of message `i` (if an update) at `i % LOOKAHEAD_RING`.
    ring: [Option<u32>; LOOKAHEAD_RING],
    /// The message being processed.
    step: usize,
}

impl<'a> UpdateLookahead<'a> {
    fn new(payload: &'a [u8]) -> Self {
        let mut ahead = UpdateLookahead {
            rest: payload,
            ring: [None; LOOKAHEAD_RING],
            step: 0,
        };
        for i in 0..PREFETCH_SLOT {
            ahead.ring[i] = ahead.next_update_sid();
        }
        ahead
    }

    /// Moves on to the next message; gives the stream ids (if updates) of the messages
    /// `PREFETCH_IMAGE`, `PREFETCH_ITEM` and `PREFETCH_SLOT` after the one to process.
    #[inline]
    fn advance(&mut self) -> (Option<u32>, Option<u32>, Option<u32>) {
        let i = self.step;
        self.step += 1;
        let slot = self.next_update_sid();
        self.ring[(i + PREFETCH_SLOT) % LOOKAHEAD_RING] = slot;
        (
            self.ring[(i + PREFETCH_IMAGE) % LOOKAHEAD_RING],
            self.ring[(i + PREFETCH_ITEM) % LOOKAHEAD_RING],
            slot,
        )
    }

    /// Moves over one message: its stream id if it is an update.
    #[inline]
    fn next_update_sid(&mut self) -> Option<u32> {
        tickwire_proto::message::next_update_stream(&mut self.rest)
    }
}

/// Encoded messages and where each ends in the bytes (what [`encode_directory`] makes).
type Encoded = (Vec<u8>, Vec<usize>);

/// Encodes directory entries as as many Directory messages as their size needs (a
/// message body holds at most 65,535 bytes); `ends` gets where each message ends.
fn encode_directory(entries: &[ServiceEntry<'_>], buf: &mut Vec<u8>, ends: &mut Vec<usize>) {
    let mut rest = entries;
    while !rest.is_empty() {
        let mut size = 2;
        let mut n = 0;
        for e in rest {
            let entry = 8 + e.name.len();
            if n > 0 && size + entry > tickwire_proto::message::MAX_MESSAGE_BODY {
                break;
            }
            size += entry;
            n += 1;
        }
        let (chunk, later) = rest.split_at(n);
        let msg = Message::Directory(Directory {
            services: chunk.to_vec(),
        });
        if let Err(e) = msg.encode(buf) {
            // Only a name longer than a message could fail; publishers' are bounded.
            warn!("directory entries not encoded: {e}");
        }
        ends.push(buf.len());
        rest = later;
    }
}

/// A subscriber behind, or any other peer whose queue passed the hard bound (a
/// publisher or a connection not logged in that sends pings and reads nothing).
#[inline]
fn needs_overflow_check(c: &Conn) -> bool {
    match c.role {
        ConnRole::Subscriber => is_behind(c),
        ConnRole::Publisher | ConnRole::AwaitingLogin => {
            c.out.pending_len() > c.behind_bytes || c.out.pending_messages() > c.behind_messages
        }
        ConnRole::Closing => false,
    }
}

/// A subscriber whose queue passed the size at which it counts as behind.
#[inline]
fn is_behind(c: &Conn) -> bool {
    c.out.pending_len() > c.behind_bytes || c.out.pending_messages() > c.behind_messages
}

/// Writes an update restricted to `view`; false (nothing written) if no field is in it.
fn write_update_view(out: &mut FrameWriter, u: &Update<'_>, stream_id: u32, view: &[i16]) -> bool {
    let buf = out.message_buf(u.fields.as_bytes().len() + 32);
    let start = buf.len();
    let res = Message::Update(Update {
        stream_id,
        fields: FieldList::EMPTY,
        ..u.clone()
    })
    .encode(buf);
    if res.is_err() {
        buf.truncate(start);
        out.forget_message();
        return false;
    }
    // Replace the empty field list just written with the filtered one.
    buf.truncate(buf.len() - 2);
    let fl_start = buf.len();
    filter_fields(buf, u.fields, Some(view));
    let count = u16::from_be_bytes([buf[fl_start], buf[fl_start + 1]]);
    if count == 0 {
        buf.truncate(start);
        out.forget_message();
        return false;
    }
    let body_len = (buf.len() - start - 3) as u16;
    buf[start + 1..start + 3].copy_from_slice(&body_len.to_be_bytes());
    true
}

/// Appends `fields` restricted to `view` (all of them if `None`; sorted) as a field list.
fn filter_fields(out: &mut Vec<u8>, fields: FieldList<'_>, view: Option<&[i16]>) {
    let mut w = FieldListWriter::new(out);
    for (fid, raw) in fields.raw_iter() {
        if view.is_none_or(|v| v.binary_search(&fid).is_ok()) {
            w.push_raw(fid, raw);
        }
    }
    w.finish();
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod lookahead_tests {
    use super::*;
    use tickwire_proto::{encode_field_list, UpdateType, Value};

    #[test]
    fn the_lookahead_names_the_updates_ahead_and_survives_garbage() {
        let fields = encode_field_list([(22, Value::UInt(1))]);
        let mut payload = Vec::new();
        let mut expected = Vec::new();
        for i in 0..40u32 {
            if i % 3 == 0 {
                Message::Ping(i as u64).encode(&mut payload).unwrap();
                expected.push(None);
            } else {
                Message::Update(Update::new(
                    1000 + i,
                    i,
                    UpdateType::Quote,
                    FieldList::decode(&fields).unwrap(),
                ))
                .encode(&mut payload)
                .unwrap();
                expected.push(Some(1000 + i));
            }
        }
        let at = |i: usize| expected.get(i).copied().flatten();
        let mut ahead = UpdateLookahead::new(&payload);
        for i in 0..expected.len() {
            let got = ahead.advance();
            let want = (
                at(i + PREFETCH_IMAGE),
                at(i + PREFETCH_ITEM),
                at(i + PREFETCH_SLOT),
            );
            assert_eq!(got, want, "message {i}");
        }
        // Cut or random bytes: it stops, without panicking.
        let mut x: u64 = 7;
        for n in 0..payload.len() {
            let mut bytes = payload[..n].to_vec();
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if let Some(b) = bytes.get_mut((x >> 33) as usize % n.max(1)) {
                *b = (x >> 17) as u8;
            }
            let mut ahead = UpdateLookahead::new(&bytes);
            for _ in 0..50 {
                ahead.advance();
            }
        }
    }
}
