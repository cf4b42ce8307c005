//! The relay between a node's core and its upstream node (see the crate's docs).

use crate::path::{NodePath, NODE_LOGIN_PREFIX};
use crate::posts::{answer_to_core, CorePost, UpstreamPosts};
use log::{info, warn};
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use tickwire_client::{
    ClientError, Connection, EventRef, LoginOptions, PostTo, ReconnectPolicy, RequestOptions,
    StreamId, SubscriberSession,
};
use tickwire_core::{ConnId, InternalPeer, Node};
use tickwire_proto::message::{write_readdressed, MESSAGE_HEADER_LEN};
use tickwire_proto::{
    code, DataState, Directory, Message, MessageIter, NakCode, Post, Refresh, Role, ServiceEntry,
    ServiceState, State, Status, StreamState, Value,
};

/// The service and item of every node's own figures (where its chain is read).
const NODE_SERVICE: &str = "TICKWIRE";
const NODE_ITEM: &str = "NODE";
/// `TW_PATH`: the chain of nodes a node is fed from, itself first.
pub const TW_PATH: i16 = -1029;
/// Bytes forwarded to the core in one frame at most (a burst is cut into several).
const TO_CORE_CHUNK: usize = 64 * 1024;

/// How a node's upstream link logs in and reconnects.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// This node: its id (unique per process) and name.
    pub node_id: u64,
    /// This node's name (`[node] name`), shown in chains.
    pub node_name: String,
    /// Who this node logs in to its upstream as.
    pub user: String,
    /// Its secret (a password or a token), empty for an open upstream.
    pub token: String,
    /// The services to take from the upstream (`None`: all of them).
    pub services: Option<BTreeSet<String>>,
    /// Services taken from the upstream at most: past it new ones are left out, so
    /// that an upstream (or a peer posing as one) cannot take every service slot of
    /// this node.
    pub max_services: usize,
    /// The first delay before connecting again; it doubles up to `backoff_max`.
    pub backoff_min: Duration,
    /// The longest delay before connecting again.
    pub backoff_max: Duration,
    /// How long the upstream may take to answer the login.
    pub welcome_timeout: Duration,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            node_id: 0,
            node_name: "tickwire".into(),
            user: "tickwire-node".into(),
            token: String::new(),
            services: None,
            max_services: 1000,
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            welcome_timeout: Duration::from_secs(5),
        }
    }
}

/// Figures of the link.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelayStats {
    /// Items the core has asked the upstream for.
    pub items: u64,
    /// Requests sent upstream.
    pub requests_sent: u64,
    /// Messages received from the upstream.
    pub messages_in: u64,
    /// Images the upstream sent again (after a reconnect) that went to every
    /// subscriber.
    pub reimages: u64,
    /// Connections made to an upstream.
    pub connections: u64,
    /// Upstreams refused because this node was already in their chain.
    pub loops_found: u64,
    /// Services the upstream announced past `RelayConfig::max_services`, left out.
    pub services_left_out: u64,
    /// File-transfer messages from the upstream dropped: the files thread was behind.
    pub files_dropped: u64,
}

struct Link {
    up: StreamId,
    /// The core has had an image: a later solicited one (after a reconnect) is a
    /// re-image for every subscriber, not an answer to a request.
    imaged: bool,
    /// The core asked again for an item it had in step (with its cache off it does so
    /// for every subscriber that joins), and this stream replaced the one it had: its
    /// image answers the core's request when it follows what the core last got (the
    /// sequence number kept by `UpstreamStreams`), else it goes to every subscriber.
    asked_again: Option<u32>,
    /// Made suspect by a lost connection and not imaged since: what the core's
    /// subscribers have is no longer in step with any upstream stream.
    stale: bool,
}

/// The upstream link of a node tree, without I/O: one internal interactive publisher in
/// the node's core on one side, a subscriber session to the upstream node on the other.
/// The caller moves the session's bytes and calls the verbs of the loop's contract.
pub struct Relay {
    conn: ConnId,
    cfg: RelayConfig,
    session: SubscriberSession,
    /// The core's stream id -> the upstream stream.
    links: FxHashMap<u32, Link>,
    /// The upstream stream -> the core's stream id.
    by_up: UpstreamStreams,
    /// The upstream's own figures item (its chain is read there).
    node_stream: StreamId,
    /// The chain of nodes above this one: the upstream first.
    above: NodePath,
    /// What the core has been told: service -> state.
    announced: BTreeMap<String, ServiceState>,
    to_core: Vec<u8>,
    /// While the first directory of a new connection is read: the names it has listed
    /// so far. It may come in several messages (a directory of thousands of services),
    /// read in several polls, until the session says it is whole.
    first_directory: Option<std::collections::HashSet<String>>,
    /// Posts sent upstream, waiting for their answer.
    posts: UpstreamPosts,
    /// File-transfer messages from the upstream, for the node's files thread, and
    /// their bytes (bounded: [`MAX_FILES_IN_BYTES`]).
    files_in: Vec<Vec<u8>>,
    files_in_bytes: usize,
    stats: RelayStats,
    /// Services left out since the last time the log said so, and when that was.
    left_out_unsaid: u64,
    left_out_said_at: Option<Instant>,
}

/// How often services left out are said in the log at most.
const LEFT_OUT_REPORT_EVERY: Duration = Duration::from_secs(10);

/// File-transfer bytes from the upstream held for the files thread at most; past it a
/// message is dropped and counted (a lost chunk is repaired).
pub const MAX_FILES_IN_BYTES: usize = 16 << 20;
/// Output queued toward the upstream past which a file-transfer message waits (a
/// status or presence is sent again later): market data's requests go first.
const FILES_OUT_ROOM: usize = 1 << 20;

impl Relay {
    /// Connects to the core as the publisher of the upstream's services. The upstream
    /// itself is connected by the caller when [`Relay::wants_connect`] says so.
    pub fn start(core: &mut Node, cfg: RelayConfig, now: Instant) -> Relay {
        let conn = core.join_internal(
            &InternalPeer {
                peer: "upstream link",
                role: Role::Publisher,
                application: "tickwire-upstream",
                user: "upstream",
                slow_consumer: None,
            },
            now,
        );
        let login = LoginOptions {
            role: Role::Subscriber,
            application: format!("{NODE_LOGIN_PREFIX}{:016x}/{}", cfg.node_id, cfg.node_name),
            user: cfg.user.clone(),
            token: cfg.token.clone(),
            // The upstream's own policy applies: this node is a subscriber like any.
            slow_consumer: None,
            welcome_timeout: cfg.welcome_timeout,
        };
        let policy = ReconnectPolicy {
            reconnect: true,
            backoff_min: cfg.backoff_min,
            backoff_max: cfg.backoff_max,
            retry_rejected: true,
        };
        let mut session = SubscriberSession::new(login, policy, now);
        // The link opens and closes streams for as long as the node runs.
        session.reuse_stream_ids();
        let node_stream = session
            .subscribe(NODE_SERVICE, NODE_ITEM, RequestOptions::default())
            .expect("no connection yet: nothing is encoded");
        Relay {
            conn,
            cfg,
            session,
            links: FxHashMap::default(),
            by_up: UpstreamStreams::default(),
            node_stream,
            above: NodePath::default(),
            announced: BTreeMap::new(),
            to_core: Vec::new(),
            first_directory: None,
            posts: UpstreamPosts::default(),
            files_in: Vec::new(),
            files_in_bytes: 0,
            stats: RelayStats::default(),
            left_out_unsaid: 0,
            left_out_said_at: None,
        }
    }

    /// Takes the file-transfer messages the upstream sent.
    pub fn take_files(&mut self, into: &mut Vec<Vec<u8>>) {
        self.files_in_bytes = 0;
        into.append(&mut self.files_in);
    }

    /// Sends a file-transfer message to the upstream; false when not connected or its
    /// output is busy (the files thread sends statuses and presences again later).
    pub fn send_files(&mut self, body: &[u8]) -> bool {
        let Some(conn) = self.session.connection() else {
            return false;
        };
        if conn.session().is_none() || conn.writer().pending_len() >= FILES_OUT_ROOM {
            return false;
        }
        conn.writer().push(&Message::Files(body)).is_ok()
    }

    /// The relay's connection in the core.
    pub fn conn(&self) -> ConnId {
        self.conn
    }

    /// The link's figures.
    pub fn stats(&self) -> RelayStats {
        let mut s = self.stats.clone();
        s.items = self.links.len() as u64;
        s
    }

    /// The chain of nodes above this one, the upstream first (empty until known).
    pub fn above(&self) -> &NodePath {
        &self.above
    }

    /// Logged in to an upstream now.
    pub fn is_connected(&self) -> bool {
        self.session.session().is_some()
    }

    /// The upstream's name, while logged in.
    pub fn upstream_name(&self) -> Option<&str> {
        self.session.session().map(|s| s.node_name.as_str())
    }

    /// No connection, and it is time to open one.
    pub fn wants_connect(&self, now: Instant) -> bool {
        self.session.wants_connect(now)
    }

    /// The caller opened a socket to an upstream: the Login is queued.
    pub fn connecting(&mut self, now: Instant) {
        self.stats.connections += 1;
        self.first_directory = Some(Default::default());
        if let Err(e) = self.session.connecting(now) {
            warn!("upstream: cannot start a login: {e}");
        }
    }

    /// The protocol state of the connection, for the caller to move bytes.
    pub fn connection(&mut self) -> Option<&mut Connection> {
        self.session.connection()
    }

    /// When [`Relay::handle_timeout`] is next needed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.session.poll_timeout()
    }

    /// The caller could not open a socket: try again after the backoff.
    pub fn connect_failed(&mut self, err: ClientError, now: Instant) {
        let _ = self.session.connect_failed(err, now);
    }

    /// Heartbeats, the Welcome's deadline, streams to ask for again. An `Err`: the
    /// connection failed; the caller closes its socket and calls [`Relay::lost`].
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), ClientError> {
        self.session.handle_timeout(now)
    }

    /// The connection failed: every item turns open/suspect at the core (the link
    /// reconnects and asks for all of them again).
    pub fn lost(&mut self, core: &mut Node, err: ClientError, now: Instant) {
        let _ = self.session.connection_lost(err, now);
        // Fed by no one until the next upstream says what is above it.
        self.above = NodePath::default();
        // Every item turns suspect: the next image of each is for all its subscribers,
        // however far it has moved, not an answer to a request made before the loss.
        for link in self.links.values_mut() {
            link.asked_again = None;
            link.stale = true;
        }
        let mut answers = Vec::new();
        for p in self.posts.take_all() {
            answer_to_core(
                &mut answers,
                p,
                Some(NakCode::GatewayDown),
                "the upstream link was lost before the answer came",
            );
        }
        if !answers.is_empty() {
            core.on_checked_frame(self.conn, &answers, now);
        }
        let _ = self.poll(core, now);
    }

    /// What the upstream sent, into the core. An `Err`: the connection failed (or
    /// turned out to close a loop); the caller closes its socket and calls
    /// [`Relay::lost`].
    pub fn poll(&mut self, core: &mut Node, now: Instant) -> Result<(), ClientError> {
        let Relay {
            conn,
            session,
            links,
            by_up,
            node_stream,
            to_core,
            posts,
            files_in,
            files_in_bytes,
            stats,
            ..
        } = self;
        let mut directory: Vec<(String, ServiceState)> = Vec::new();
        let mut closed: Vec<u32> = Vec::new();
        let mut path: Option<String> = None;
        to_core.clear();
        let res = session.poll_events(now, |event, raw| {
            stats.messages_in += 1;
            match event {
                EventRef::Directory(d) => {
                    directory.extend(d.services.iter().map(|e| (e.name.to_string(), e.state)));
                }
                EventRef::Refresh(item, r) if item.stream == *node_stream => {
                    if let Some(Value::Utf8(p) | Value::Ascii(p)) = r.fields.get(TW_PATH) {
                        path = Some(p.to_string());
                    }
                }
                EventRef::Update(item, u) if item.stream == *node_stream => {
                    if let Some(Value::Utf8(p) | Value::Ascii(p)) = u.fields.get(TW_PATH) {
                        path = Some(p.to_string());
                    }
                }
                EventRef::Refresh(item, r) => {
                    let Some(csid) = by_up.pass(item.stream, r.seq) else {
                        return;
                    };
                    let Some(link) = links.get_mut(&csid) else {
                        return;
                    };
                    // The sequence number the subscribers in step have reached, if
                    // this image only answers the core's request for a new one.
                    let in_step = link.asked_again == Some(r.seq);
                    if link.imaged && r.solicited && !in_step {
                        // After a reconnect, or when updates were missed while the
                        // core's new request went up: every subscriber of the item gets
                        // the new image (unsolicited), which also returns it to ok.
                        stats.reimages += u64::from(r.clear_cache);
                        let _ = Message::Refresh(Refresh {
                            stream_id: csid,
                            solicited: false,
                            ..r.clone()
                        })
                        .encode(to_core);
                    } else {
                        write_readdressed(to_core, raw, csid);
                    }
                    if r.complete {
                        link.imaged = true;
                        link.stale = false;
                        link.asked_again = None;
                        if r.state.stream != StreamState::Open {
                            closed.push(csid);
                        }
                    }
                }
                EventRef::Update(item, u) => {
                    if let Some(csid) = by_up.pass(item.stream, u.seq) {
                        write_readdressed(to_core, raw, csid);
                    }
                }
                EventRef::Ack(a) => {
                    if let Some(p) = posts.answer(&a) {
                        answer_to_core(to_core, p, a.nak, a.text);
                    }
                }
                EventRef::Files(body) => {
                    if *files_in_bytes + body.len() <= MAX_FILES_IN_BYTES {
                        *files_in_bytes += body.len();
                        files_in.push(tickwire_core::chunk_buffers::SHARED.copy_of(body, 0));
                    } else {
                        stats.files_dropped += 1;
                    }
                }
                EventRef::Status(item, s) => {
                    if item.stream == 0 || item.stream == *node_stream {
                        return;
                    }
                    let Some(csid) = by_up.get(item.stream) else {
                        return;
                    };
                    if raw.len() > MESSAGE_HEADER_LEN + 4 {
                        write_readdressed(to_core, raw, csid);
                    } else {
                        // Made up by the session (connection lost, closed-recover
                        // shown as suspect): encoded here.
                        let _ = Message::Status(Status {
                            stream_id: csid,
                            state: s.state,
                        })
                        .encode(to_core);
                    }
                    if s.state.stream != StreamState::Open {
                        closed.push(csid);
                    }
                }
            }
            if to_core.len() >= TO_CORE_CHUNK {
                core.on_checked_frame(*conn, to_core, now);
                to_core.clear();
            }
        });
        if !self.to_core.is_empty() {
            core.on_checked_frame(self.conn, &self.to_core, now);
            self.to_core.clear();
        }
        for csid in closed {
            if let Some(link) = self.links.remove(&csid) {
                self.by_up.remove(link.up);
            }
        }
        if let Some(listed) = self.first_directory.as_mut() {
            listed.extend(directory.iter().map(|(n, _)| n.clone()));
        }
        let whole = self.session.directory_whole();
        if let Some(listed) = self.first_directory.take_if(|_| whole) {
            if !listed.contains(NODE_SERVICE) {
                warn!(
                    "upstream: {} does not let user {:?} read its {NODE_SERVICE} service, \
                         where a node says which nodes feed it: a loop through this link \
                         cannot be seen and refused (give the user subscribe = \
                         [\"{NODE_SERVICE}\", ...] in the upstream's users file)",
                    self.upstream_name().unwrap_or("the upstream"),
                    self.cfg.user
                );
            }
            // A new upstream (or the same one restarted) may lack services the
            // last one had: for this node it removed them (they go down, and
            // leave after the retention time unless it announces them again).
            let lacking: Vec<(String, ServiceState)> = self
                .announced
                .keys()
                .filter(|name| !listed.contains(name.as_str()))
                .map(|name| (name.clone(), ServiceState::Removed))
                .collect();
            directory.extend(lacking);
        }
        if !directory.is_empty() {
            self.directory_changed(core, directory, now);
        }
        res?;
        if let Some(p) = path {
            self.path_heard(&p)?;
        }
        Ok(())
    }

    /// The upstream's chain, from its figures item.
    fn path_heard(&mut self, text: &str) -> Result<(), ClientError> {
        let Some(p) = NodePath::parse(text) else {
            return Ok(());
        };
        if p.contains(self.cfg.node_id) {
            self.stats.loops_found += 1;
            let reason = format!(
                "loop: this node ({}#{:016x}) is already above its upstream (chain {p})",
                self.cfg.node_name, self.cfg.node_id
            );
            warn!("upstream: {reason}; leaving it");
            return Err(ClientError::Rejected {
                code: code::LOGIN_REJECTED,
                reason,
            });
        }
        if p != self.above {
            info!("upstream: fed through {p}");
            self.above = p;
        }
        Ok(())
    }

    /// Tells the core the upstream's services that changed (those taken).
    fn directory_changed(
        &mut self,
        core: &mut Node,
        entries: Vec<(String, ServiceState)>,
        now: Instant,
    ) {
        let mut changed: Vec<(String, ServiceState)> = Vec::new();
        let mut removed: Vec<String> = Vec::new();
        let mut over_limit = 0usize;
        for (name, state) in entries {
            if name == NODE_SERVICE {
                continue; // every node has its own
            }
            // One the upstream removed is let go of here: it goes down, and is removed
            // after this node's retention time, here and below, unless it comes back.
            if state == ServiceState::Removed {
                if self.announced.remove(&name).is_some() {
                    removed.push(name);
                }
                continue;
            }
            // One not taken at all is none left out past the limit.
            if self
                .cfg
                .services
                .as_ref()
                .is_some_and(|s| !s.contains(&name))
            {
                continue;
            }
            if !self.announced.contains_key(&name) && self.announced.len() >= self.cfg.max_services
            {
                over_limit += 1;
                continue;
            }
            if self.announced.insert(name.clone(), state) == Some(state) {
                continue;
            }
            changed.push((name, state));
        }
        if over_limit > 0 {
            self.stats.services_left_out += over_limit as u64;
            self.left_out_unsaid += over_limit as u64;
            // Said at most every 10 s: how often is the upstream's choice.
            if self
                .left_out_said_at
                .is_none_or(|t| now.saturating_duration_since(t) >= LEFT_OUT_REPORT_EVERY)
            {
                warn!(
                    "upstream: {} services left out (since the last report): this link takes at most {} (upstream.max_services)",
                    std::mem::take(&mut self.left_out_unsaid),
                    self.cfg.max_services
                );
                self.left_out_said_at = Some(now);
            }
        }
        if !removed.is_empty() {
            let names: Vec<&str> = removed.iter().map(String::as_str).collect();
            core.release_services(self.conn, &names, "the upstream node removed it");
        }
        if changed.is_empty() {
            return;
        }
        let directory = Message::Directory(Directory {
            services: changed
                .iter()
                .map(|(name, state)| ServiceEntry {
                    name,
                    state: *state,
                    interactive: true,
                    item_count: 0,
                })
                .collect(),
        });
        core.on_message(self.conn, &directory, now);
    }

    /// Takes the core's requests and closes for the upstream's services onto the
    /// upstream stream list.
    pub fn pump(&mut self, core: &mut Node, now: Instant) {
        // The core's requests (service and name) and closes (none), in their order: an
        // item requested and closed in one turn is closed.
        let mut asks: Vec<(u32, Option<(String, String)>)> = Vec::new();
        let mut answers: Vec<u8> = Vec::new();
        if let Some(w) = core.output(self.conn) {
            if w.is_empty() {
                return;
            }
            let bytes = w.sealed_bytes();
            let mut at = 0;
            for (payload, frame_len) in tickwire_proto::frame::frames(bytes) {
                for raw in MessageIter::new(payload).flatten() {
                    match raw.message {
                        Message::Request(r) => {
                            asks.push((r.stream_id, Some((r.service.into(), r.name.into()))))
                        }
                        Message::Close { stream_id } => asks.push((stream_id, None)),
                        // Sent up at once: its fields live in the core's buffer.
                        Message::Post(p) => self.post_upstream(&p, &mut answers),
                        _ => {}
                    }
                }
                at += frame_len;
            }
            w.consume(at);
        }
        if !answers.is_empty() {
            core.on_checked_frame(self.conn, &answers, now);
        }
        for (csid, request) in asks {
            let Some((service, name)) = request else {
                if let Some(link) = self.links.remove(&csid) {
                    self.by_up.remove(link.up);
                    let _ = self.session.unsubscribe(link.up);
                }
                continue;
            };
            // A request on a stream the core has open asks again: a new upstream
            // stream replaces it. Updates sent meanwhile on neither reach the core, so
            // the new image goes to every subscriber unless it follows what they had.
            let (mut imaged, mut asked_again, mut stale) = (false, None, false);
            if let Some(link) = self.links.remove(&csid) {
                imaged = link.imaged;
                stale = link.stale;
                // Since a lost connection, until its re-image, the item is suspect for
                // every subscriber (the upstream may be another node, or restarted,
                // with the same sequence number): its next image goes to all of them.
                if link.imaged && !link.stale && self.is_connected() {
                    asked_again = self.by_up.last_forwarded(link.up);
                }
                self.by_up.remove(link.up);
                let _ = self.session.unsubscribe(link.up);
            }
            let Ok(up) = self
                .session
                .subscribe(&service, &name, RequestOptions::default())
            else {
                continue;
            };
            self.stats.requests_sent += 1;
            self.links.insert(
                csid,
                Link {
                    up,
                    imaged,
                    asked_again,
                    stale,
                },
            );
            self.by_up.insert(up, csid);
            if !self.is_connected() {
                let text = "upstream not connected; the item is asked for when it is back";
                self.status_to_core(core, csid, text, now);
            }
        }
    }

    /// Posts the core's post upstream: on the item's upstream stream when the link has
    /// one, else by name. What cannot go is answered (onto `answers`, for the core).
    fn post_upstream(&mut self, p: &Post<'_>, answers: &mut Vec<u8>) {
        let core_post = CorePost {
            stream: p.stream_id,
            post_id: p.post_id,
        };
        if !self.is_connected() {
            let text = "the upstream link is down";
            answer_to_core(answers, core_post, Some(NakCode::GatewayDown), text);
            return;
        }
        let id = match self.posts.begin(core_post, p.ack) {
            Ok(id) => id,
            Err((code, text)) => return answer_to_core(answers, core_post, Some(code), &text),
        };
        let to = match self.links.get(&p.stream_id) {
            Some(link) if p.stream_id != 0 => PostTo::Stream(link.up),
            _ => PostTo::Item {
                service: p.service,
                name: p.name,
            },
        };
        if let Err(e) = self.session.post(to, id, p.fields, p.ack) {
            self.posts.cancel(id);
            let text = format!("could not post upstream: {e}");
            answer_to_core(answers, core_post, Some(NakCode::GatewayDown), &text);
        }
    }

    fn status_to_core(&mut self, core: &mut Node, csid: u32, text: &str, now: Instant) {
        let status = Message::Status(Status {
            stream_id: csid,
            state: State {
                stream: StreamState::Open,
                data: DataState::Suspect,
                code: code::CONNECTION_LOST,
                text,
            },
        });
        core.on_message(self.conn, &status, now);
    }
}

/// The upstream stream id -> the core's stream id, and the sequence number of the last
/// image or update passed on from it. The session numbers its streams densely from 1,
/// handing out the ids of ended streams again, so a vector indexed by it is one load per
/// update and as long as the most streams open at once (the core's ids are never 0:
/// that marks a free slot).
#[derive(Default)]
struct UpstreamStreams(Vec<(u32, u32)>);

impl UpstreamStreams {
    #[inline]
    fn get(&self, up: StreamId) -> Option<u32> {
        self.0.get(up as usize).map(|s| s.0).filter(|&c| c != 0)
    }

    /// The core's stream for `up`, noting that a message of sequence number `seq` goes
    /// to it (one look-up for both).
    #[inline]
    fn pass(&mut self, up: StreamId, seq: u32) -> Option<u32> {
        let slot = self.0.get_mut(up as usize).filter(|s| s.0 != 0)?;
        slot.1 = seq;
        Some(slot.0)
    }

    fn last_forwarded(&self, up: StreamId) -> Option<u32> {
        self.0.get(up as usize).filter(|s| s.0 != 0).map(|s| s.1)
    }

    fn insert(&mut self, up: StreamId, csid: u32) {
        let i = up as usize;
        if self.0.len() <= i {
            self.0.resize(i + 1, (0, 0));
        }
        self.0[i] = (csid, 0);
    }

    fn remove(&mut self, up: StreamId) {
        if let Some(slot) = self.0.get_mut(up as usize) {
            *slot = (0, 0);
        }
    }
}
