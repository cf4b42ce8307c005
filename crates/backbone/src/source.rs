//! The source role: a node's publishers' data onto the backbone.
//!
//! The source is one internal subscriber of its node's core. An edge's subscribe
//! becomes a request on that connection (once per item, however many edges want it);
//! whatever the core writes back (refreshes, updates, statuses: already encoded, once)
//! is packed into data messages for the backbone without being decoded. Which edges
//! want which stream is kept here, so the last edge's unsubscribe (or its silence)
//! closes the stream in the core. When the backbone cannot take more (Aeron's back
//! pressure), what is not sent stays in the core's queue for this connection, where
//! the core's slow-consumer policy (conflation) applies: a slow backbone never blocks a
//! publisher.

use crate::plumbing::{self, decode_message, frames, messages, stream_id, ControlQueue};
use crate::wire::{data_header, BackboneMessage, ServiceInfo, DATA_HEADER_LEN};
use crate::Outbox;
use log::{info, warn};
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};
use tickwire_core::{ConnId, Node};
use tickwire_proto::{
    code, Message, MessageType, Request, Role, ServiceState, State, Status, StreamState,
};

/// Settings of the source role.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// The node's name, shown by the edges.
    pub name: String,
    /// How often a heartbeat goes out.
    pub heartbeat: Duration,
    /// A heartbeat also goes out this long after the last data message when nothing
    /// follows it (zero: never). An edge finds a lost datagram only when something
    /// after it arrives; Aeron's own heartbeat comes after 100 ms of silence, so a
    /// burst's last datagram, lost, was found only with the next burst.
    pub tail_probe: Duration,
    /// An edge silent this long has its interest dropped.
    pub edge_timeout: Duration,
    /// Services put on the backbone (empty: all but the node's own).
    pub services: Vec<String>,
    /// Services never put on the backbone (the node's own figures).
    pub never: Vec<String>,
    /// Largest data message built from several Tickwire messages (one larger message
    /// goes alone): one Aeron frame's payload by default, so a batch is never split.
    pub batch_bytes: usize,
    /// Most edges remembered at once.
    pub max_edges: usize,
    /// Most control messages (mappings, directories) queued while the backbone is
    /// back-pressured; past it they are dropped (edges ask again).
    pub max_control: usize,
    /// Requests asked of the core and not answered yet, at most: with the cache off
    /// the publishers answer later, so `REQUEST_BUDGET` cannot pace their images.
    pub max_asked: usize,
    /// Of which one service may hold this many (1 to `max_asked`): an interactive
    /// publisher that never answers holds back its own items, not every other
    /// service's.
    pub max_asked_per_service: usize,
    /// A request unanswered this long stops counting (it stays open in the core, and
    /// its answer goes out whenever it comes): silent publishers delay the others' new
    /// items by this much at most, never for good.
    pub ask_patience: Duration,
}

impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig {
            name: "source".into(),
            heartbeat: Duration::from_millis(100),
            tail_probe: Duration::from_micros(100),
            edge_timeout: Duration::from_secs(3),
            services: Vec::new(),
            never: Vec::new(),
            batch_bytes: crate::DEFAULT_MTU - crate::FRAME_HEADER_BYTES,
            max_edges: 1024,
            max_control: 1 << 20,
            max_asked: 4096,
            max_asked_per_service: 1024,
            ask_patience: Duration::from_secs(5),
        }
    }
}

/// Figures of the source role.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceStats {
    /// Data messages sent.
    pub data_messages: u64,
    /// Their bytes.
    pub data_bytes: u64,
    /// Streams open (items edges take).
    pub streams_open: u64,
    /// Subscribes received.
    pub subscribes: u64,
    /// Items sent again as a fresh image.
    pub reimages: u64,
    /// Edges known.
    pub edges: u64,
    /// Offers refused by back pressure.
    pub back_pressured: u64,
    /// Control messages not sent: the publication was full.
    pub control_dropped: u64,
    /// Messages that did not decode.
    pub bad_messages: u64,
    /// Times the core closed the link and the source joined again.
    pub link_reconnects: u64,
    /// Heartbeats sent right after data (`SourceConfig::tail_probe`).
    pub tail_probes: u64,
}

struct SourceStream {
    service: String,
    item: String,
    edges: Vec<u64>,
    /// The core has answered with its first image.
    refreshed: bool,
    /// Waiting in `to_request` or in its service's `parked` (a first request or a
    /// fresh image for a late edge).
    queued: bool,
    /// Asked of the core at this time and not answered yet: counted against
    /// `max_asked` and its service's share until `ask_patience` has passed.
    asked: Option<Instant>,
}

/// One service's part of the requests asked of the core.
#[derive(Default)]
struct ServiceAsks {
    /// Its requests counted against `max_asked_per_service`.
    asked: usize,
    /// Its streams waiting for room in its share (each still `queued`).
    parked: VecDeque<u32>,
}

/// Bytes the core may hold for the link before the source asks it for more images:
/// the images of a large watchlist are asked for as the backbone takes them, so they
/// never pile up in the core's queue (whose hard bound would close the link).
const REQUEST_BUDGET: usize = 256 * 1024;

/// The source role without I/O: puts the node's publishers' data on the backbone,
/// as an in-process subscriber of the node's core.
pub struct Source {
    conn: ConnId,
    id: u64,
    cfg: SourceConfig,
    streams: FxHashMap<u32, SourceStream>,
    by_item: HashMap<(String, String), u32>,
    next_stream: u32,
    edges: FxHashMap<u64, Instant>,
    /// Services on the backbone: name -> (state, interactive).
    directory: BTreeMap<String, (ServiceState, bool)>,
    /// Services the core knows but this source does not announce (e.g. those the same
    /// node receives from the backbone as an edge).
    excluded: BTreeSet<String>,
    directory_version: u32,
    directory_due: bool,
    next_directory: Instant,
    next_heartbeat: Instant,
    /// When the tail probe is due (data went out and nothing since).
    tail_due: Option<Instant>,
    control: ControlQueue,
    pending: VecDeque<Vec<u8>>,
    /// Streams to ask the core for (paced by `REQUEST_BUDGET`, `max_asked` and each
    /// service's share).
    to_request: VecDeque<u32>,
    /// Requests counted against `max_asked`.
    asked: usize,
    /// Each service's counted requests and parked streams (only services with either).
    by_service: HashMap<String, ServiceAsks>,
    /// Counted requests in the order asked, to stop counting them after
    /// `ask_patience`; those answered meanwhile leave when they reach the front (so it
    /// holds at most the requests of the last `ask_patience`).
    asked_order: VecDeque<(Instant, u32)>,
    batch: Vec<u8>,
    to_core: Vec<u8>,
    stats: SourceStats,
}

impl Source {
    /// Connects to the core as its backbone subscriber. `id` tells this run of the
    /// source apart from any other (a random number).
    pub fn start(core: &mut Node, cfg: SourceConfig, id: u64, now: Instant) -> Source {
        let max_control = cfg.max_control;
        let conn = plumbing::connect(core, "backbone (source)", Role::Subscriber, now);
        Source {
            conn,
            id,
            cfg,
            streams: FxHashMap::default(),
            by_item: HashMap::new(),
            next_stream: 1,
            edges: FxHashMap::default(),
            directory: BTreeMap::new(),
            excluded: BTreeSet::new(),
            directory_version: 1,
            directory_due: true,
            next_directory: now,
            next_heartbeat: now,
            tail_due: None,
            control: ControlQueue::new(max_control),
            pending: VecDeque::new(),
            to_request: VecDeque::new(),
            asked: 0,
            by_service: HashMap::new(),
            asked_order: VecDeque::new(),
            batch: Vec::new(),
            to_core: Vec::new(),
            stats: SourceStats::default(),
        }
    }

    /// Its connection in the core.
    pub fn conn(&self) -> ConnId {
        self.conn
    }

    /// The source's id on the backbone.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Changes whenever the directory it puts on the backbone does.
    pub fn directory_version(&self) -> u32 {
        self.directory_version
    }

    /// Its figures.
    pub fn stats(&self) -> SourceStats {
        let mut s = self.stats.clone();
        s.streams_open = self.streams.len() as u64;
        s.control_dropped = self.control.dropped;
        s.edges = self.edges.len() as u64;
        s
    }

    /// The transport was rebuilt: from now on this source has a new id (edges treat it
    /// as a new source and re-image what they take from it). Its streams are closed;
    /// the edges subscribe again.
    pub fn restart(&mut self, core: &mut Node, id: u64, now: Instant) {
        self.id = id;
        self.control.clear();
        self.pending.clear();
        self.edges.clear();
        let open: Vec<u32> = self.streams.keys().copied().collect();
        for sid in open {
            self.close_stream(core, sid, now);
        }
        // After the closes, which put parked streams back in line.
        self.to_request.clear();
        self.asked = 0;
        self.by_service.clear();
        self.asked_order.clear();
        // What the core had queued for the old link is for streams now closed.
        if let Some(w) = core.output(self.conn) {
            let n = w.sealed_bytes().len();
            w.consume(n);
        }
        self.directory_due = true;
    }

    /// Bytes taken from the core and waiting for the backbone (at most about a frame).
    pub fn held_bytes(&self) -> usize {
        self.pending.iter().map(Vec::len).sum()
    }

    /// When [`Source::handle_timeout`] is next needed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        Some(
            self.tail_due
                .map_or(self.next_heartbeat, |t| t.min(self.next_heartbeat)),
        )
    }

    fn queue_heartbeat(&mut self) {
        let name = self.cfg.name.clone();
        self.queue_control(&BackboneMessage::Heartbeat {
            source: self.id,
            name: &name,
            directory_version: self.directory_version,
        });
    }

    /// Services this source must not announce (set by a node that is also an edge).
    pub fn set_excluded(&mut self, excluded: BTreeSet<String>) {
        if excluded != self.excluded {
            self.excluded = excluded;
            self.directory
                .retain(|name, _| !self.excluded.contains(name));
            self.directory_changed();
        }
    }

    fn exported(&self, service: &str) -> bool {
        !self.excluded.contains(service)
            && !self.cfg.never.iter().any(|s| s == service)
            && (self.cfg.services.is_empty() || self.cfg.services.iter().any(|s| s == service))
    }

    fn queue_control(&mut self, m: &BackboneMessage<'_>) {
        self.control.push(m);
    }

    fn directory_changed(&mut self) {
        self.directory_version = self.directory_version.wrapping_add(1);
        self.directory_due = true;
    }

    /// One message from an edge (the request stream). Junk is counted and ignored.
    pub fn on_request(&mut self, core: &mut Node, bytes: &[u8], now: Instant) {
        let msg = match BackboneMessage::decode(bytes) {
            Ok(m) => m,
            Err(e) => {
                self.stats.bad_messages += 1;
                if self.stats.bad_messages.is_power_of_two() {
                    warn!(
                        "backbone: ignored a malformed request ({e}); {} so far",
                        self.stats.bad_messages
                    );
                }
                return;
            }
        };
        match msg {
            BackboneMessage::EdgeHeartbeat { edge, name } if self.heard(edge, now) => {
                info!("backbone: edge {name:?} ({edge:016x}) joined");
            }
            BackboneMessage::Subscribe {
                edge,
                source,
                service,
                item,
            } if source == self.id => {
                self.heard(edge, now);
                if self.edges.contains_key(&edge) {
                    self.subscribe(edge, service, item);
                }
            }
            BackboneMessage::Unsubscribe {
                edge,
                source,
                stream,
            } if source == self.id => {
                self.heard(edge, now);
                self.unsubscribe(core, edge, stream, now);
            }
            BackboneMessage::DirectoryRequest { edge, source } if source == self.id => {
                self.heard(edge, now);
                self.directory_due = true;
            }
            _ => {}
        }
    }

    /// Notes that `edge` is alive; true if it is new. Past `max_edges` new edges are
    /// not remembered (nor served). A new edge is told so (EdgeJoined): one this
    /// source forgot (silent too long: its streams were released) asks again for what
    /// it had, which would otherwise stay silent at the edge for good.
    fn heard(&mut self, edge: u64, now: Instant) -> bool {
        if let Some(t) = self.edges.get_mut(&edge) {
            *t = now;
            return false;
        }
        if self.edges.len() >= self.cfg.max_edges {
            return false;
        }
        self.edges.insert(edge, now);
        self.queue_control(&BackboneMessage::EdgeJoined {
            source: self.id,
            edge,
        });
        true
    }

    fn subscribe(&mut self, edge: u64, service: &str, item: &str) {
        self.stats.subscribes += 1;
        let key = (service.to_string(), item.to_string());
        if let Some(&sid) = self.by_item.get(&key) {
            let s = self.streams.get_mut(&sid).expect("mapped stream");
            if !s.edges.contains(&edge) {
                s.edges.push(edge);
            }
            let again = s.refreshed && !s.queued;
            self.queue_control(&BackboneMessage::Opened {
                source: self.id,
                stream: sid,
                service,
                item,
            });
            if again {
                // A fresh image for the edge that asks (the core answers a request on
                // an open stream with one); edges already in step ignore it.
                self.stats.reimages += 1;
                self.queue_request(sid);
            }
            return;
        }
        let sid = self.next_stream;
        self.next_stream = self.next_stream.wrapping_add(1).max(1);
        self.queue_control(&BackboneMessage::Opened {
            source: self.id,
            stream: sid,
            service,
            item,
        });
        if !self.exported(service) {
            let text = format!("service {service:?} is not on the backbone");
            self.queue_status(sid, &text);
            return;
        }
        self.streams.insert(
            sid,
            SourceStream {
                service: service.to_string(),
                item: item.to_string(),
                edges: vec![edge],
                refreshed: false,
                queued: false,
                asked: None,
            },
        );
        self.by_item.insert(key, sid);
        self.queue_request(sid);
    }

    fn queue_request(&mut self, sid: u32) {
        if let Some(s) = self.streams.get_mut(&sid) {
            if !s.queued {
                s.queued = true;
                self.to_request.push_back(sid);
            }
        }
    }

    /// Asks the core for queued streams while its queue for the link is short and few
    /// requests are unanswered. Returns how many were asked.
    fn issue_requests(&mut self, core: &mut Node, now: Instant) -> usize {
        self.expire_asks(now);
        let mut n = 0;
        while self.asked < self.cfg.max_asked && core.pending_output(self.conn) < REQUEST_BUDGET {
            let Some(sid) = self.to_request.pop_front() else {
                break;
            };
            let Some(s) = self.streams.get_mut(&sid) else {
                continue;
            };
            if s.asked.is_none() {
                if !self.by_service.contains_key(&s.service) {
                    self.by_service
                        .insert(s.service.clone(), ServiceAsks::default());
                }
                let share = self.by_service.get_mut(&s.service).expect("inserted");
                if share.asked >= self.cfg.max_asked_per_service {
                    // Its service has its share out: the stream waits for one of them
                    // to be answered or to go stale; the streams behind it go on.
                    share.parked.push_back(sid);
                    continue;
                }
                share.asked += 1;
                self.asked += 1;
                s.asked = Some(now);
                self.asked_order.push_back((now, sid));
            }
            s.queued = false;
            let (service, item) = (s.service.clone(), s.item.clone());
            self.request(core, sid, &service, &item, now);
            n += 1;
        }
        n
    }

    /// Requests asked `ask_patience` ago and still unanswered stop counting.
    fn expire_asks(&mut self, now: Instant) {
        while let Some(&(at, sid)) = self.asked_order.front() {
            let counted = self.streams.get(&sid).filter(|s| s.asked == Some(at));
            if counted.is_some() && now.saturating_duration_since(at) < self.cfg.ask_patience {
                break;
            }
            self.asked_order.pop_front();
            if let Some(s) = counted {
                let service = s.service.clone();
                self.answered(sid, &service);
            }
        }
    }

    /// Stream `sid` of `service`, counted, was answered, closed or given up waiting for:
    /// its service's share has room for one more, which its first parked stream takes
    /// (at the front of the line, where it was).
    fn answered(&mut self, sid: u32, service: &str) {
        if let Some(s) = self.streams.get_mut(&sid) {
            s.asked = None;
        }
        self.asked -= 1;
        let Some(share) = self.by_service.get_mut(service) else {
            return;
        };
        share.asked -= 1;
        // Streams closed while parked are skipped.
        while let Some(parked) = share.parked.pop_front() {
            if self.streams.get(&parked).is_some_and(|s| s.queued) {
                self.to_request.push_front(parked);
                break;
            }
        }
        if share.asked == 0 && share.parked.is_empty() {
            self.by_service.remove(service);
        }
    }

    /// A closed status for a stream the core never saw, as a data message.
    fn queue_status(&mut self, sid: u32, text: &str) {
        let mut buf = Vec::new();
        data_header(&mut buf, self.id);
        let _ = Message::Status(Status {
            stream_id: sid,
            state: State::closed(code::NOT_FOUND, text),
        })
        .encode(&mut buf);
        self.control.push_encoded(buf);
    }

    fn request(&mut self, core: &mut Node, sid: u32, service: &str, item: &str, now: Instant) {
        self.to_core.clear();
        let _ = Message::Request(Request::streaming(sid, service, item)).encode(&mut self.to_core);
        core.on_frame(self.conn, &self.to_core, now);
    }

    fn unsubscribe(&mut self, core: &mut Node, edge: u64, sid: u32, now: Instant) {
        let Some(s) = self.streams.get_mut(&sid) else {
            return;
        };
        s.edges.retain(|&e| e != edge);
        if s.edges.is_empty() {
            self.close_stream(core, sid, now);
        }
    }

    fn close_stream(&mut self, core: &mut Node, sid: u32, now: Instant) {
        if let Some(s) = self.streams.remove(&sid) {
            if s.asked.is_some() {
                self.answered(sid, &s.service);
            }
            self.by_item.remove(&(s.service, s.item));
            self.to_core.clear();
            let _ = Message::Close { stream_id: sid }.encode(&mut self.to_core);
            core.on_frame(self.conn, &self.to_core, now);
        }
    }

    /// Heartbeats, the directory when due, and edges that went silent.
    pub fn handle_timeout(&mut self, core: &mut Node, now: Instant) {
        if now >= self.next_heartbeat {
            self.next_heartbeat = now + self.cfg.heartbeat;
            self.queue_heartbeat();
        }
        if self.directory_due && now >= self.next_directory {
            self.directory_due = false;
            // At most five whole directories a second, however many edges ask.
            self.next_directory = now + Duration::from_millis(200);
            self.queue_directory();
        }
        let timeout = self.cfg.edge_timeout;
        let gone: Vec<u64> = self
            .edges
            .iter()
            .filter(|(_, &t)| now.saturating_duration_since(t) > timeout)
            .map(|(&e, _)| e)
            .collect();
        for edge in gone {
            info!("backbone: edge {edge:016x} silent for {timeout:?}: its streams are released");
            self.edges.remove(&edge);
            let sids: Vec<u32> = self
                .streams
                .iter()
                .filter(|(_, s)| s.edges.contains(&edge))
                .map(|(&sid, _)| sid)
                .collect();
            for sid in sids {
                self.unsubscribe(core, edge, sid, now);
            }
        }
    }

    fn queue_directory(&mut self) {
        // Parts of at most about 32 KiB.
        let entries: Vec<ServiceInfo<'_>> = self
            .directory
            .iter()
            .map(|(name, &(state, interactive))| ServiceInfo {
                name,
                state,
                interactive,
            })
            .collect();
        let mut parts: Vec<Vec<ServiceInfo<'_>>> = vec![Vec::new()];
        let mut size = 0;
        for e in entries {
            let len = e.name.len() + 4;
            if size + len > 32 * 1024 {
                parts.push(Vec::new());
                size = 0;
            }
            size += len;
            parts.last_mut().expect("a part").push(e);
        }
        let n = parts.len() as u16;
        let mut bufs = Vec::new();
        for (i, services) in parts.into_iter().enumerate() {
            let mut buf = Vec::new();
            let m = BackboneMessage::Directory {
                source: self.id,
                version: self.directory_version,
                part: i as u16,
                parts: n,
                services,
            };
            if m.encode(&mut buf).is_ok() {
                bufs.push(buf);
            }
        }
        for b in bufs {
            self.control.push_encoded(b);
        }
    }

    /// Moves what is ready onto the backbone: control messages first (a stream's
    /// mapping always goes before its data), then the core's output for this link.
    pub fn pump(&mut self, core: &mut Node, out: &mut dyn Outbox, now: Instant) {
        if self.tail_due.is_some_and(|t| now >= t) {
            self.tail_due = None;
            self.stats.tail_probes += 1;
            self.queue_heartbeat();
        }
        let data_before = self.stats.data_messages;
        self.pump_data(core, out, now);
        if self.stats.data_messages != data_before && !self.cfg.tail_probe.is_zero() {
            self.tail_due = Some(now + self.cfg.tail_probe);
        }
    }

    fn pump_data(&mut self, core: &mut Node, out: &mut dyn Outbox, now: Instant) {
        if !self.control.flush(out) {
            self.stats.back_pressured += 1;
            return;
        }
        while let Some(m) = self.pending.front() {
            if !out.offer(m) {
                self.stats.back_pressured += 1;
                return;
            }
            self.stats.data_messages += 1;
            self.stats.data_bytes += m.len() as u64;
            self.pending.pop_front();
        }
        // While the backbone takes everything, a link the core had marked behind gets
        // its conflated updates (`on_output_written`, as a socket would), until it is
        // live again.
        if !core.is_live(self.conn) {
            self.reconnect(core, now);
        }
        // Bounded: each round either moves output or asks for more, and both stop when
        // the backbone or the budget is full.
        for _ in 0..64 {
            self.pump_core_output(core, out);
            if !self.pending.is_empty() {
                break;
            }
            let wrote = core.on_output_written(self.conn);
            let asked = self.issue_requests(core, now);
            if !wrote && asked == 0 {
                break;
            }
        }
    }

    /// The core closed the link (e.g. its queue passed the hard bound): a new link, as
    /// a new source, so that every edge re-images what it takes from this node.
    fn reconnect(&mut self, core: &mut Node, now: Instant) {
        warn!("backbone: the core closed the source's link; joining again as a new source");
        // The closed connection's id is kept for this source until it lets go.
        core.release_internal(self.conn);
        self.conn = plumbing::connect(core, "backbone (source)", Role::Subscriber, now);
        self.stats.link_reconnects += 1;
        self.id = crate::random_id();
        self.streams.clear();
        self.by_item.clear();
        self.to_request.clear();
        self.asked = 0;
        self.by_service.clear();
        self.asked_order.clear();
        self.control.clear();
        self.pending.clear();
        self.edges.clear();
        // The new link's welcome and directory are in its queue: the directory is
        // read from there as usual.
        self.directory.clear();
        self.directory_changed();
    }

    /// The core's output for this link, cut into data messages and offered; what the
    /// backbone does not take waits in `pending`.
    fn pump_core_output(&mut self, core: &mut Node, out: &mut dyn Outbox) {
        let Some(w) = core.output(self.conn) else {
            return;
        };
        if w.is_empty() {
            return;
        }
        let bytes = w.sealed_bytes();
        let mut closed: Vec<u32> = Vec::new();
        let mut refreshed: Vec<u32> = Vec::new();
        let mut directory = Vec::new();
        let max = self.cfg.batch_bytes.max(DATA_HEADER_LEN + 16);
        let mut batch = std::mem::take(&mut self.batch);
        batch.clear();
        // Whole frames are taken from the core; once the backbone refuses a batch, the
        // rest of that frame waits in `pending` and the later frames stay in the core's
        // queue (where its slow-consumer policy sees them).
        let mut walked = 0;
        let mut blocked = false;
        for (payload, frame_len) in frames(bytes) {
            for (ty, encoded) in messages(payload) {
                match MessageType::from_u8(ty) {
                    Some(MessageType::Refresh) => {
                        if let Some(sid) = stream_id(encoded) {
                            refreshed.push(sid);
                        }
                    }
                    Some(MessageType::Status) => {
                        if let Ok(Message::Status(s)) = decode_message(ty, encoded) {
                            if s.state.stream != StreamState::Open {
                                closed.push(s.stream_id);
                            }
                        }
                    }
                    Some(MessageType::Update) => {}
                    Some(MessageType::Directory) => {
                        directory.push(encoded.to_vec());
                        continue;
                    }
                    _ => continue,
                }
                if !batch.is_empty() && batch.len() + encoded.len() > max {
                    let full = std::mem::take(&mut batch);
                    blocked = !self.send_or_hold(out, full, blocked);
                }
                if batch.is_empty() {
                    data_header(&mut batch, self.id);
                }
                batch.extend_from_slice(encoded);
            }
            walked += frame_len;
            if blocked {
                break;
            }
        }
        if !batch.is_empty() {
            let last = std::mem::take(&mut batch);
            self.send_or_hold(out, last, blocked);
        }
        if let Some(w) = core.output(self.conn) {
            w.consume(walked);
        }
        for sid in refreshed {
            if let Some(s) = self.streams.get_mut(&sid) {
                s.refreshed = true;
                if s.asked.is_some() {
                    let service = s.service.clone();
                    self.answered(sid, &service);
                }
            }
        }
        for sid in closed {
            // The core closed the item (not found, publisher closed it): the edges
            // got the status; the stream is forgotten here.
            if let Some(s) = self.streams.remove(&sid) {
                if s.asked.is_some() {
                    self.answered(sid, &s.service);
                }
                self.by_item.remove(&(s.service, s.item));
            }
        }
        for d in directory {
            self.on_core_directory(&d);
        }
    }

    /// Offers `batch` unless the backbone is already refusing; what is not taken waits
    /// in `pending`. Returns whether it was taken.
    fn send_or_hold(&mut self, out: &mut dyn Outbox, batch: Vec<u8>, blocked: bool) -> bool {
        if !blocked && self.pending.is_empty() && out.offer(&batch) {
            self.stats.data_messages += 1;
            self.stats.data_bytes += batch.len() as u64;
            return true;
        }
        if !blocked {
            self.stats.back_pressured += 1;
        }
        self.pending.push_back(batch);
        false
    }

    /// The core's directory (whole at login, then changes) becomes the backbone's.
    fn on_core_directory(&mut self, encoded: &[u8]) {
        let Ok(Message::Directory(d)) = decode_message(MessageType::Directory as u8, encoded)
        else {
            return;
        };
        let mut changed = false;
        for s in &d.services {
            if !self.exported(s.name) {
                continue;
            }
            if s.state == ServiceState::Removed {
                changed |= self.directory.remove(s.name).is_some();
            } else {
                let v = (s.state, s.interactive);
                changed |= self.directory.insert(s.name.to_string(), v) != Some(v);
            }
        }
        if changed {
            self.directory_changed();
        }
    }
}
