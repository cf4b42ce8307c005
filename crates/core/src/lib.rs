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
mod connection;
mod deferred;
mod directory;
mod fan_out;
mod files;
mod items;
pub mod latency;
mod login;
mod loop_share;
mod posts;
mod replay;
mod security;
mod slow;
mod streams;
mod subscriptions;

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
use items::{ItemHandle, ItemTable, StreamRef};
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
use tickwire_auth::SessionTokens;
pub use tickwire_auth::{Anonymous, Users};
use tickwire_proto::frame::FrameWriter;
use tickwire_proto::{code, SlowConsumerPolicy};
use tracing::warn;

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
}

#[cfg(test)]
mod tests;
