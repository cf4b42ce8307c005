//! The edge role: the backbone's data to a node's own subscribers.
//!
//! The edge is one internal, interactive publisher of its node's core, announcing
//! every service the live sources announce. The core asks it for an item once,
//! however many local subscribers want it; the edge subscribes to the item at a
//! source that has the service up, and feeds what the source sends (already encoded
//! Tickwire messages) into the core with the stream id rewritten: the core caches,
//! conflates and fans out as for any publisher.
//!
//! Never a silent gap: an item is forwarded only from the image the source sent for it
//! on, in order (Aeron delivers each source's messages reliably and in order, or not
//! at all). A source that goes silent for the liveness time is lost: its items turn
//! open/suspect and are asked for again at another source with the service, or at the
//! same source when it is back; its services go down when no live source has them.

use crate::dense::DenseMap;
use crate::plumbing::{self, decode_message, frames, messages, stream_id, ControlQueue};
use crate::wire::{BackboneMessage, DataMessages};
use crate::Outbox;
use log::{info, warn};
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use tickwire_core::{ConnId, Node};
use tickwire_proto::message::write_readdressed;
use tickwire_proto::{
    code, Ack, DataState, Directory, Message, MessageType, NakCode, Role, ServiceEntry,
    ServiceState, State, Status, StreamState,
};

/// Settings of the edge role.
#[derive(Debug, Clone)]
pub struct EdgeConfig {
    /// The node's name, in its heartbeats.
    pub name: String,
    /// How often the edge tells the sources it is alive.
    pub heartbeat: Duration,
    /// A source silent this long is lost.
    pub liveness: Duration,
    /// An item asked for and not answered in this time is asked for again.
    pub request_retry: Duration,
    /// Most sources remembered at once.
    pub max_sources: usize,
    /// Most requests queued while the backbone is back-pressured.
    pub max_control: usize,
}

impl Default for EdgeConfig {
    fn default() -> Self {
        EdgeConfig {
            name: "edge".into(),
            heartbeat: Duration::from_millis(100),
            liveness: Duration::from_secs(1),
            request_retry: Duration::from_secs(1),
            max_sources: 256,
            max_control: 1 << 20,
        }
    }
}

/// Figures of the edge role.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EdgeStats {
    /// Sources heard and live.
    pub sources_live: u64,
    /// Sources not taken: every slot held by a live source.
    pub sources_refused: u64,
    /// Items taken from sources.
    pub items: u64,
    /// Data messages received.
    pub data_messages: u64,
    /// Their bytes.
    pub data_bytes: u64,
    /// Subscribes sent to sources.
    pub subscribes_sent: u64,
    /// Sources lost (silent past their liveness time).
    pub sources_lost: u64,
    /// Items asked for again (a fresh image).
    pub reimages: u64,
    /// Messages that did not decode.
    pub bad_messages: u64,
    /// Control messages not sent: the request publication was full.
    pub control_dropped: u64,
    /// Items whose data from the source skipped sequence numbers, re-imaged for it.
    pub gaps_repaired: u64,
}

/// How many data messages ahead of the one being forwarded the edge loads its stream's
/// slot and its item (each stage needs about a memory latency to arrive).
const PREFETCH_SLOT: usize = 4;
const PREFETCH_ITEM: usize = 2;
/// The most bytes of data gathered for the core before it gets them (see `Edge::flush`).
const FLUSH_BYTES: usize = 64 * 1024;

/// A directory part: (service, state) pairs.
type DirectoryPart = Vec<(String, ServiceState)>;

/// A source's directory being received in parts: the parts seen, and how many are not,
/// so that each part costs the same however many there are.
struct Assembling {
    version: u32,
    parts: Vec<Option<DirectoryPart>>,
    missing: usize,
}

struct SourceView {
    name: String,
    /// The transport's id of the image this source's messages arrive on.
    image: i32,
    last_heard: Instant,
    live: bool,
    /// The directory version the edge has whole (0: none yet).
    directory_version: u32,
    announced_version: u32,
    next_directory_request: Instant,
    /// A directory being received in parts.
    assembling: Option<Assembling>,
    services: BTreeMap<String, ServiceState>,
    /// The source's stream ids -> the core's stream ids (with this edge).
    streams: DenseMap<u32>,
    /// Streams dropped when the source was lost. It is told at once that this edge no
    /// longer takes them, and again when it is heard again (it was only paused, or the
    /// first telling went with a rebuilt link), or it would send them on.
    released: Vec<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No live source has the service.
    NoSource,
    /// Asked at `source`; forwarding starts with its image.
    Waiting { since: Instant },
    /// In step with the source.
    Live,
}

struct EdgeItem {
    service: String,
    name: String,
    source: Option<u64>,
    source_stream: Option<u32>,
    phase: Phase,
    /// The core has had an image of it: a later image (after its source was lost) is
    /// a re-image for the subscribers, not an answer to their requests.
    imaged: bool,
    /// The sequence number of the last image or update forwarded (6.10 of the
    /// protocol): the next update must follow it.
    seq: u32,
    /// While live: when the core asked for an image again (with its cache off, for a
    /// subscriber joining), not answered yet. Updates keep flowing to the subscribers
    /// in step meanwhile; the source's image goes to the core for the new one.
    image_asked: Option<Instant>,
    /// Sources the item was asked of and moved away from before they answered (the
    /// latest [`MAX_LEFT_UNANSWERED`]): an Opened of one, when it comes, is answered with
    /// an Unsubscribe (it would keep the stream for as long as this edge runs).
    left_unanswered: Vec<u64>,
}

/// Sources an item remembers having left unanswered (bounded: an item moves only when its
/// service goes down at its source). One moved on more often before any answered leaves
/// the oldest's stream running there, unwanted, for as long as this edge runs.
const MAX_LEFT_UNANSWERED: usize = 4;

/// The edge role without I/O: takes from the backbone what the node's subscribers
/// want, as an in-process publisher of the sources' services in the node's core.
pub struct Edge {
    conn: ConnId,
    id: u64,
    cfg: EdgeConfig,
    /// The id of the source role of this same node (a node that is both): its own
    /// data comes back to it on the backbone and is not taken (the core already has
    /// those services from their publishers).
    own_source: Option<u64>,
    sources: FxHashMap<u64, SourceView>,
    /// The core's stream id -> the item.
    items: DenseMap<EdgeItem>,
    by_name: HashMap<(String, String), u32>,
    /// What the core has been told: service -> up.
    announced: BTreeMap<String, bool>,
    /// Changes whenever the set of announced services does.
    services_version: u64,
    control: ControlQueue,
    next_heartbeat: Instant,
    to_core: Vec<u8>,
    /// Images of lost sources, for the transport to drop (see `take_images_to_reject`).
    reject: Vec<i32>,
    /// Items the core closed while their source had not answered yet: service and
    /// name -> the source and when. Its Opened, when it comes, is answered with an
    /// Unsubscribe (the source would keep the stream for as long as this edge runs).
    closed_unanswered: HashMap<(String, String), (u64, Instant)>,
    stats: EdgeStats,
}

impl Edge {
    /// Connects to the core as the publisher of the backbone's services.
    pub fn start(core: &mut Node, cfg: EdgeConfig, id: u64, now: Instant) -> Edge {
        let max_control = cfg.max_control;
        let conn = plumbing::connect(core, "backbone (edge)", Role::Publisher, now);
        Edge {
            conn,
            id,
            cfg,
            sources: FxHashMap::default(),
            items: DenseMap::new(tickwire_core::NODE_STREAM_BASE),
            by_name: HashMap::new(),
            announced: BTreeMap::new(),
            services_version: 0,
            control: ControlQueue::new(max_control),
            next_heartbeat: now,
            to_core: Vec::new(),
            reject: Vec::new(),
            closed_unanswered: HashMap::new(),
            stats: EdgeStats::default(),
            own_source: None,
        }
    }

    /// The id of this node's own source role (it changes when the transport is
    /// rebuilt): that source is never taken as one of the edge's.
    pub fn set_own_source(&mut self, id: Option<u64>) {
        self.own_source = id;
    }

    /// Its connection in the core.
    pub fn conn(&self) -> ConnId {
        self.conn
    }

    /// The edge's id on the backbone.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Its figures.
    pub fn stats(&self) -> EdgeStats {
        let mut s = self.stats.clone();
        s.sources_live = self.sources.values().filter(|s| s.live).count() as u64;
        s.items = self.items.len() as u64;
        s.control_dropped = self.control.dropped;
        s
    }

    /// Names of the live sources and the services each announces.
    pub fn sources(&self) -> Vec<(String, Vec<String>)> {
        self.sources
            .values()
            .filter(|s| s.live)
            .map(|s| (s.name.clone(), s.services.keys().cloned().collect()))
            .collect()
    }

    /// The live sources, each with how long it has been silent: "src (2 ms), ...".
    pub fn sources_text(&self, now: Instant) -> String {
        let mut v: Vec<(&str, u128)> = self
            .sources
            .values()
            .filter(|s| s.live)
            .map(|s| {
                (
                    s.name.as_str(),
                    now.saturating_duration_since(s.last_heard).as_millis(),
                )
            })
            .collect();
        v.sort();
        v.iter()
            .map(|(n, ms)| format!("{n} ({ms} ms)"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Changes whenever [`Edge::services`] does.
    pub fn services_version(&self) -> u64 {
        self.services_version
    }

    /// Services received from the backbone (a node that is also a source does not
    /// put them back on it).
    pub fn services(&self) -> std::collections::BTreeSet<String> {
        self.announced.keys().cloned().collect()
    }

    /// When [`Edge::handle_timeout`] is next needed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        Some(self.next_heartbeat)
    }

    fn queue_control(&mut self, m: &BackboneMessage<'_>) {
        self.control.push(m);
    }

    /// The images of sources lost since the last call. An image can be stuck: an edge
    /// stopped longer than the source keeps data for cannot have what it missed
    /// retransmitted, so the transport drops the image and makes a new one, from the
    /// source's current position, which the edge then re-images item by item.
    pub fn take_images_to_reject(&mut self) -> Vec<i32> {
        std::mem::take(&mut self.reject)
    }

    /// One message from a source (the data stream), which arrived on the transport's
    /// image `image`. Junk is counted and ignored.
    pub fn on_data(&mut self, core: &mut Node, image: i32, bytes: &[u8], now: Instant) {
        let msg = match BackboneMessage::decode(bytes) {
            Ok(m) => m,
            Err(e) => {
                self.bad(&e.to_string());
                return;
            }
        };
        if !matches!(msg, BackboneMessage::Data { .. }) {
            self.flush(core, now);
        }
        match msg {
            BackboneMessage::Heartbeat {
                source,
                name,
                directory_version,
            } => self.on_heartbeat(image, source, name, directory_version, now),
            BackboneMessage::Directory {
                source,
                version,
                part,
                parts,
                services,
            } => {
                // A lost source's directory waits for its heartbeat: taken before it,
                // the directory would count as had, and the heartbeat that brings the
                // source back would neither ask for it nor announce its services.
                let Some(s) = self.sources.get_mut(&source).filter(|s| s.live) else {
                    return;
                };
                s.last_heard = now;
                if version == s.directory_version {
                    return;
                }
                let entries: DirectoryPart = services
                    .iter()
                    .map(|e| (e.name.to_string(), e.state))
                    .collect();
                let a = match &mut s.assembling {
                    Some(a) if a.version == version && a.parts.len() == parts as usize => a,
                    _ => s.assembling.insert(Assembling {
                        version,
                        parts: vec![None; parts as usize],
                        missing: parts as usize,
                    }),
                };
                // A part repeated replaces the first, and is counted once.
                if a.parts[part as usize].replace(entries).is_none() {
                    a.missing -= 1;
                }
                if a.missing == 0 {
                    let all = s.assembling.take().expect("assembling").parts;
                    s.services = all.into_iter().flatten().flatten().collect();
                    s.directory_version = version;
                    self.directory_updated(core, now);
                }
            }
            BackboneMessage::Opened {
                source,
                stream,
                service,
                item,
            } => {
                let key = (service.to_string(), item.to_string());
                if self
                    .closed_unanswered
                    .get(&key)
                    .is_some_and(|&(src, _)| src == source)
                {
                    self.closed_unanswered.remove(&key);
                    let wanted = self
                        .by_name
                        .get(&key)
                        .and_then(|&sid| self.items.get(sid))
                        .is_some_and(|it| it.source == Some(source));
                    if !wanted {
                        self.control.push(&BackboneMessage::Unsubscribe {
                            edge: self.id,
                            source,
                            stream,
                        });
                        return;
                    }
                }
                let Some(&sid) = self.by_name.get(&key) else {
                    return;
                };
                let Some(it) = self.items.get_mut(sid) else {
                    return;
                };
                if it.source != Some(source) || !matches!(it.phase, Phase::Waiting { .. }) {
                    if let Some(i) = it.left_unanswered.iter().position(|&s| s == source) {
                        it.left_unanswered.swap_remove(i);
                        self.control.push(&BackboneMessage::Unsubscribe {
                            edge: self.id,
                            source,
                            stream,
                        });
                    }
                    return;
                }
                if let Some(old) = it.source_stream.replace(stream) {
                    if let Some(s) = self.sources.get_mut(&source) {
                        s.streams.remove(old);
                    }
                }
                if let Some(s) = self.sources.get_mut(&source) {
                    s.streams.insert(stream, sid);
                }
            }
            BackboneMessage::Data { source, messages } => {
                self.on_source_data(core, source, messages, now)
            }
            BackboneMessage::EdgeJoined { source, edge } if edge == self.id => {
                self.joined(core, source, now)
            }
            _ => {}
        }
    }

    /// `source` has just started to know this edge. If it had forgotten it (its
    /// requests went unheard for three liveness times, and it released the edge's
    /// streams), the items this edge has from it get nothing more: each is asked for
    /// again, its subscribers told it is suspect meanwhile, and re-imaged.
    fn joined(&mut self, core: &mut Node, source: u64, now: Instant) {
        let live: Vec<u32> = self
            .items
            .iter()
            .filter(|(_, it)| it.source == Some(source) && it.phase == Phase::Live)
            .map(|(sid, _)| sid)
            .collect();
        if live.is_empty() {
            return;
        }
        let name = self
            .sources
            .get(&source)
            .map_or(String::new(), |s| s.name.clone());
        warn!(
            "backbone: source {name:?} ({source:016x}) had forgotten this edge (it heard none of its requests for too long): re-imaging its {} items",
            live.len()
        );
        self.stats.reimages += live.len() as u64;
        for sid in live {
            self.status_to_core(
                core,
                sid,
                code::UPDATES_DROPPED,
                "the source had lost track of this edge: re-imaging",
                now,
            );
            self.route(core, sid, now);
        }
    }

    fn bad(&mut self, why: &str) {
        self.stats.bad_messages += 1;
        if self.stats.bad_messages.is_power_of_two() {
            warn!(
                "backbone: ignored a malformed message ({why}); {} so far",
                self.stats.bad_messages
            );
        }
    }

    fn on_heartbeat(&mut self, image: i32, source: u64, name: &str, version: u32, now: Instant) {
        if self.own_source == Some(source) {
            return;
        }
        if !self.sources.contains_key(&source) {
            if self.sources.len() >= self.cfg.max_sources {
                // Room is made by forgetting the longest-silent lost source (a live
                // one is never pushed out).
                let Some(oldest) = self
                    .sources
                    .iter()
                    .filter(|(_, s)| !s.live)
                    .min_by_key(|(_, s)| s.last_heard)
                    .map(|(id, _)| *id)
                else {
                    if self.stats.sources_refused == 0 {
                        warn!(
                            "backbone: source {name:?} ({source:016x}) not taken: {} live sources already (the limit)",
                            self.sources.len()
                        );
                    }
                    self.stats.sources_refused += 1;
                    return;
                };
                self.sources.remove(&oldest);
            }
            self.sources.insert(
                source,
                SourceView {
                    name: name.to_string(),
                    image,
                    last_heard: now,
                    live: false,
                    directory_version: 0,
                    announced_version: version,
                    next_directory_request: now,
                    assembling: None,
                    services: BTreeMap::new(),
                    streams: DenseMap::new(1),
                    released: Vec::new(),
                },
            );
        }
        let s = self.sources.get_mut(&source).expect("present");
        s.last_heard = now;
        s.image = image;
        s.announced_version = version;
        if !s.live {
            s.live = true;
            info!("backbone: source {name:?} ({source:016x}) is live");
            for stream in std::mem::take(&mut s.released) {
                self.control.push(&BackboneMessage::Unsubscribe {
                    edge: self.id,
                    source,
                    stream,
                });
            }
        }
        if s.directory_version != version && now >= s.next_directory_request {
            s.next_directory_request = now + Duration::from_millis(200);
            self.queue_control(&BackboneMessage::DirectoryRequest {
                edge: self.id,
                source,
            });
        }
    }

    fn on_source_data(&mut self, core: &mut Node, source: u64, messages: &[u8], now: Instant) {
        let Some(s) = self.sources.get_mut(&source) else {
            return;
        };
        s.last_heard = now;
        self.stats.data_messages += 1;
        self.stats.data_bytes += messages.len() as u64;
        let mut closed: Vec<u32> = Vec::new();
        // Items whose data has a hole, with what is missing.
        let mut gapped: Vec<(u32, String)> = Vec::new();
        let mut bad = None;
        // With 100,000 items updated at random, each message would wait for memory twice
        // (its stream's slot, then its item): the slot of the message `PREFETCH_SLOT`
        // ahead and the item of the one `PREFETCH_ITEM` ahead are loaded meanwhile.
        let mut slot_ahead = DataMessages::new(messages);
        for _ in 0..PREFETCH_SLOT {
            if let Some(Ok(m)) = slot_ahead.next() {
                s.streams.prefetch(m.stream_id);
            }
        }
        let mut item_ahead = DataMessages::new(messages);
        for _ in 0..PREFETCH_ITEM {
            if let Some(Ok(m)) = item_ahead.next() {
                if let Some(&sid) = s.streams.get(m.stream_id) {
                    self.items.prefetch(sid);
                }
            }
        }
        for m in DataMessages::new(messages) {
            let m = match m {
                Ok(m) => m,
                Err(e) => {
                    bad = Some(e.to_string());
                    break;
                }
            };
            if let Some(Ok(ahead)) = slot_ahead.next() {
                s.streams.prefetch(ahead.stream_id);
            }
            if let Some(Ok(ahead)) = item_ahead.next() {
                if let Some(&sid) = s.streams.get(ahead.stream_id) {
                    self.items.prefetch(sid);
                }
            }
            let Some(&sid) = s.streams.get(m.stream_id) else {
                continue;
            };
            let Some(it) = self.items.get_mut(sid) else {
                continue;
            };
            let forward = match MessageType::from_u8(m.message_type) {
                Some(MessageType::Update) if it.phase == Phase::Live => {
                    // Decoded here, not by the core (which gets the batch as checked):
                    // one bad message costs its item an image, not the edge its
                    // connection to the core.
                    let hole = match decode_message(m.message_type, m.encoded) {
                        Ok(Message::Update(u)) => {
                            // Updates the source did not send on this stream (its core
                            // held them for an image that this edge, in step, would not
                            // pass on): never forwarded as if nothing were missing.
                            match sequence_hole(it.seq, u.seq, u.conflation_count) {
                                Some(what) => Some(what),
                                None => {
                                    it.seq = u.seq;
                                    None
                                }
                            }
                        }
                        _ => {
                            self.stats.bad_messages += 1;
                            Some("an update that does not decode".to_string())
                        }
                    };
                    match hole {
                        Some(what) => {
                            gapped.push((sid, what));
                            it.phase = Phase::Waiting { since: now };
                            false
                        }
                        None => true,
                    }
                }
                Some(MessageType::Update) => false,
                Some(MessageType::Refresh) => {
                    let Ok(Message::Refresh(r)) = decode_message(m.message_type, m.encoded) else {
                        bad = Some("a refresh that does not decode".into());
                        break;
                    };
                    let re_image = match it.phase {
                        // Recovery (another source, the same one back, or a gap): the
                        // subscribers get the new image as an unsolicited refresh,
                        // which the core passes to every one of them.
                        Phase::Waiting { .. } if it.imaged && r.solicited => true,
                        // Another edge's image (solicited) changes nothing here when
                        // this edge is in step with it. When it is not (the source's
                        // core held updates back until it had the image, as with its
                        // cache off), the image is what this edge missed.
                        Phase::Live if r.solicited => r.seq != it.seq,
                        _ => false,
                    };
                    match it.phase {
                        _ if re_image => {
                            // The core marks it solicited for a subscriber waiting for
                            // an image, so this answers the core's own request too.
                            let re_image = Message::Refresh(tickwire_proto::Refresh {
                                stream_id: sid,
                                solicited: false,
                                ..r
                            });
                            let _ = re_image.encode(&mut self.to_core);
                            it.seq = r.seq;
                            if r.complete {
                                it.phase = Phase::Live;
                                it.image_asked = None;
                            }
                            false
                        }
                        Phase::Waiting { .. } => {
                            it.seq = r.seq;
                            if r.complete {
                                it.phase = Phase::Live;
                                it.imaged = true;
                            }
                            true
                        }
                        // A publisher's own re-image goes to every subscriber.
                        Phase::Live if !r.solicited => {
                            it.seq = r.seq;
                            true
                        }
                        // The image the core asked for, in step with what the
                        // subscribers in step have: to the core as it came, which
                        // gives it to the subscribers waiting for one only.
                        Phase::Live if it.image_asked.is_some() => {
                            if r.complete {
                                it.image_asked = None;
                            }
                            true
                        }
                        Phase::Live | Phase::NoSource => false,
                    }
                }
                Some(MessageType::Status) => {
                    let Ok(Message::Status(st)) = decode_message(m.message_type, m.encoded) else {
                        bad = Some("a status that does not decode".into());
                        break;
                    };
                    if st.state.stream != StreamState::Open {
                        closed.push(sid);
                    }
                    true
                }
                _ => false,
            };
            if forward {
                write_readdressed(&mut self.to_core, m.encoded, sid);
            }
        }
        if let Some(why) = bad {
            self.bad(&why);
        }
        if !closed.is_empty() || !gapped.is_empty() || self.to_core.len() >= FLUSH_BYTES {
            self.flush(core, now);
        }
        for sid in closed {
            self.forget(sid);
        }
        for (sid, what) in gapped {
            self.repair_gap(core, sid, &what, now);
        }
    }

    /// An item's data has a hole (`what`): its subscribers are told their data is
    /// suspect, and it is asked for again at its source, whose image they then get (an
    /// unsolicited refresh), as after a source is lost.
    fn repair_gap(&mut self, core: &mut Node, sid: u32, what: &str, now: Instant) {
        self.stats.gaps_repaired += 1;
        self.stats.reimages += 1;
        let Some(it) = self.items.get(sid) else {
            return;
        };
        if self.stats.gaps_repaired <= 10 || self.stats.gaps_repaired.is_power_of_two() {
            warn!(
                "backbone: {}/{}: {what}: re-imaging it ({} so far)",
                it.service, it.name, self.stats.gaps_repaired
            );
        }
        let text = format!("updates missing from the backbone ({what}): re-imaging");
        self.status_to_core(core, sid, code::UPDATES_DROPPED, &text, now);
        self.route(core, sid, now);
    }

    /// Hands the core what the data messages received so far carried. Data is gathered
    /// across the messages of a receive batch: the core's update path prefetches a few
    /// messages ahead within a frame, and a frame of one Aeron message (about 15
    /// updates) leaves its first few unprefetched. Called before anything else reaches
    /// the core, so the core sees every source's messages in their order.
    ///
    /// Every message in it was decoded in full here, so the core does not walk the
    /// field lists again.
    pub fn flush(&mut self, core: &mut Node, now: Instant) {
        if !self.to_core.is_empty() {
            core.on_checked_frame(self.conn, &self.to_core, now);
            self.to_core.clear();
        }
    }

    /// The item is gone (closed by its source or by the core).
    fn forget(&mut self, sid: u32) {
        if let Some(it) = self.items.remove(sid) {
            self.by_name.remove(&(it.service, it.name));
            if let (Some(src), Some(stream)) = (it.source, it.source_stream) {
                if let Some(s) = self.sources.get_mut(&src) {
                    s.streams.remove(stream);
                }
            }
        }
    }

    /// A live source that has `service` up, keeping `prefer` if it still does.
    fn pick_source(&self, service: &str, prefer: Option<u64>) -> Option<u64> {
        let has = |id: &u64| {
            self.sources
                .get(id)
                .is_some_and(|s| s.live && s.services.get(service) == Some(&ServiceState::Up))
        };
        if let Some(p) = prefer.filter(|p| has(p)) {
            return Some(p);
        }
        // The source whose node name sorts first (then the lowest id): every edge
        // picks the same one, and operators choose the primary by its name.
        self.sources
            .iter()
            .filter(|(id, _)| has(id))
            .min_by(|a, b| (&a.1.name, a.0).cmp(&(&b.1.name, b.0)))
            .map(|(&id, _)| id)
    }

    /// Asks the item's source for an image of a live item (its stream stays as it is).
    fn ask_again(&mut self, sid: u32) {
        let Some(it) = self.items.get(sid) else {
            return;
        };
        let Some(source) = it.source else {
            return;
        };
        let (service, name) = (it.service.clone(), it.name.clone());
        self.subscribe_at(source, &service, &name);
    }

    /// Asks `source` for an item (it answers with the stream and an image).
    fn subscribe_at(&mut self, source: u64, service: &str, item: &str) {
        self.stats.subscribes_sent += 1;
        self.queue_control(&BackboneMessage::Subscribe {
            edge: self.id,
            source,
            service,
            item,
        });
    }

    /// Asks a source for the item (again), or tells the core there is none.
    fn route(&mut self, core: &mut Node, sid: u32, now: Instant) {
        let Some(it) = self.items.get(sid) else {
            return;
        };
        let prefer = it.source;
        let service = it.service.clone();
        let name = it.name.clone();
        match self.pick_source(&service, prefer) {
            Some(src) => {
                let it = self.items.get_mut(sid).expect("present");
                match (it.source, it.source_stream.take()) {
                    (Some(old), Some(stream)) => {
                        if let Some(s) = self.sources.get_mut(&old) {
                            s.streams.remove(stream);
                            if old != src {
                                // The old source is still there: it stops sending the
                                // item.
                                self.control.push(&BackboneMessage::Unsubscribe {
                                    edge: self.id,
                                    source: old,
                                    stream,
                                });
                            }
                        }
                    }
                    // Asked and not answered yet: its answer is turned down when it comes.
                    (Some(old), None) if old != src && !it.left_unanswered.contains(&old) => {
                        if it.left_unanswered.len() >= MAX_LEFT_UNANSWERED {
                            it.left_unanswered.remove(0);
                        }
                        it.left_unanswered.push(old);
                    }
                    _ => {}
                }
                // Asked again where it was once left: that source's answers are wanted
                // again (turning one down would unsubscribe the stream the item uses).
                it.left_unanswered.retain(|&s| s != src);
                it.source = Some(src);
                it.phase = Phase::Waiting { since: now };
                // Its image, when it comes, goes to every subscriber (a re-image).
                it.image_asked = None;
                self.subscribe_at(src, &service, &name);
            }
            None => {
                let it = self.items.get_mut(sid).expect("present");
                if it.phase == Phase::NoSource {
                    return;
                }
                it.phase = Phase::NoSource;
                // Its stream at the source it was on is let go of: left mapped, that
                // source's data on it would reach the item once it moves elsewhere.
                if let (Some(old), Some(stream)) = (it.source, it.source_stream.take()) {
                    if let Some(s) = self.sources.get_mut(&old) {
                        s.streams.remove(stream);
                        self.control.push(&BackboneMessage::Unsubscribe {
                            edge: self.id,
                            source: old,
                            stream,
                        });
                    }
                }
                let text = format!("no source on the backbone has service {service:?} up");
                self.status_to_core(core, sid, code::SERVICE_DOWN, &text, now);
            }
        }
    }

    fn status_to_core(&mut self, core: &mut Node, sid: u32, code: u16, text: &str, now: Instant) {
        let status = Message::Status(Status {
            stream_id: sid,
            state: State {
                stream: StreamState::Open,
                data: DataState::Suspect,
                code,
                text,
            },
        });
        core.on_message(self.conn, &status, now);
    }

    /// The union of the live sources' directories, told to the core as changes.
    fn directory_updated(&mut self, core: &mut Node, now: Instant) {
        let mut union: BTreeMap<String, bool> = BTreeMap::new();
        for s in self.sources.values().filter(|s| s.live) {
            for (name, state) in &s.services {
                if *state == ServiceState::Removed {
                    continue;
                }
                let up = *state == ServiceState::Up;
                let e = union.entry(name.clone()).or_insert(false);
                *e |= up;
            }
        }
        // Services no live source lists, while one has told its whole directory (the
        // sources removed them): let go of, so that they go down, and are removed
        // after the node's retention time (here and below) unless a source has them
        // again. While no source is heard, they stay known, down: the backbone may
        // only be cut off.
        let heard = self
            .sources
            .values()
            .any(|s| s.live && s.directory_version != 0);
        let gone: Vec<String> = match heard {
            true => (self.announced.keys())
                .filter(|n| !union.contains_key(*n))
                .cloned()
                .collect(),
            false => Vec::new(),
        };
        if !gone.is_empty() {
            for name in &gone {
                self.announced.remove(name);
            }
            self.services_version += 1;
            let names: Vec<&str> = gone.iter().map(String::as_str).collect();
            core.release_services(self.conn, &names, "no source on the backbone has it");
        }
        for name in self.announced.keys() {
            union.entry(name.clone()).or_insert(false);
        }
        let changed: Vec<(String, bool)> = union
            .iter()
            .filter(|(n, up)| self.announced.get(*n) != Some(up))
            .map(|(n, &up)| (n.clone(), up))
            .collect();
        if !changed.is_empty() {
            let directory = Message::Directory(Directory {
                services: changed
                    .iter()
                    .map(|(n, up)| ServiceEntry {
                        name: n,
                        state: if *up {
                            ServiceState::Up
                        } else {
                            ServiceState::Down
                        },
                        interactive: true,
                        item_count: 0,
                    })
                    .collect(),
            });
            core.on_message(self.conn, &directory, now);
            if !union.keys().eq(self.announced.keys()) {
                self.services_version += 1;
            }
            self.announced = union;
        }
        // Items without a source may have one now; items whose source no longer has
        // their service up (its publisher left, the node stays) move to a source that
        // has it, as when a source is lost.
        let orphans: Vec<u32> = self
            .items
            .iter()
            .filter(|(_, it)| {
                it.phase == Phase::NoSource
                    || it.source.is_some_and(|src| {
                        self.sources.get(&src).is_some_and(|s| {
                            s.live && s.services.get(&it.service) != Some(&ServiceState::Up)
                        })
                    })
            })
            .map(|(sid, _)| sid)
            .collect();
        for sid in orphans {
            let Some(it) = self.items.get(sid) else {
                continue;
            };
            if it.phase != Phase::NoSource {
                let service = it.service.clone();
                if self.pick_source(&service, None).is_none() {
                    // No other source has it either: the item waits where it is
                    // (the core has said the service is down).
                    continue;
                }
                self.stats.reimages += 1;
                let text = format!(
                    "service {service:?} went down at its source; moving to another source"
                );
                self.status_to_core(core, sid, code::PUBLISHER_GONE, &text, now);
            }
            self.route(core, sid, now);
        }
    }

    /// Services the backbone has up that the core has with no publisher are announced
    /// again. On a node that is both, the core refuses a service its own publisher has
    /// (the edge's announcement is dropped, not kept): when that publisher leaves, the
    /// service would stay down although another source has it up. (Not one the core
    /// does not have: a core at its service limit would refuse it, and say so, at
    /// every heartbeat.)
    fn announce_unpublished(&mut self, core: &mut Node, now: Instant) {
        let services: Vec<ServiceEntry<'_>> = self
            .announced
            .iter()
            .filter(|(name, &up)| up && core.lacks_publisher(name))
            .map(|(name, _)| ServiceEntry {
                name,
                state: ServiceState::Up,
                interactive: true,
                item_count: 0,
            })
            .collect();
        if !services.is_empty() {
            core.on_message(self.conn, &Message::Directory(Directory { services }), now);
        }
    }

    /// Takes the core's requests and closes for the backbone's services, then moves
    /// the queued requests onto the backbone.
    pub fn pump(&mut self, core: &mut Node, out: &mut dyn Outbox, now: Instant) {
        // The core's requests (service and name) and closes (none), in their order: an
        // item requested and closed in one turn is closed.
        let mut asks: Vec<(u32, Option<(String, String)>)> = Vec::new();
        let mut refusals: Vec<u8> = Vec::new();
        if let Some(w) = core.output(self.conn) {
            if !w.is_empty() {
                let bytes = w.sealed_bytes();
                let mut walked = 0;
                for (payload, frame_len) in frames(bytes) {
                    for (ty, encoded) in messages(payload) {
                        if ty == MessageType::Request as u8 {
                            if let Ok(Message::Request(r)) = decode_message(ty, encoded) {
                                asks.push((r.stream_id, Some((r.service.into(), r.name.into()))));
                            }
                        } else if ty == MessageType::Close as u8 {
                            if let Some(sid) = stream_id(encoded) {
                                asks.push((sid, None));
                            }
                        } else if ty == MessageType::Post as u8 {
                            // The backbone carries data one way: a post is refused at
                            // once rather than left to time out.
                            if let Ok(Message::Post(p)) = decode_message(ty, encoded) {
                                let _ = Message::Ack(Ack {
                                    stream_id: p.stream_id,
                                    post_id: p.post_id,
                                    nak: Some(NakCode::DeniedBySrc),
                                    text:
                                        "posts do not cross the backbone: post to the source node",
                                })
                                .encode(&mut refusals);
                            }
                        }
                    }
                    walked += frame_len;
                }
                w.consume(walked);
            }
        }
        if !refusals.is_empty() {
            core.on_checked_frame(self.conn, &refusals, now);
        }
        for (sid, request) in asks {
            let Some((service, name)) = request else {
                self.close_item(sid, now);
                continue;
            };
            // The core asks for an image of an item this edge streams in step (with its
            // cache off, it does so for every subscriber that joins): the source is asked
            // again, and the item stays live, so that the subscribers in step miss no
            // update while that image is on its way.
            if let Some(it) = self.items.get_mut(sid) {
                if it.phase == Phase::Live && it.service == service && it.name == name {
                    it.image_asked = Some(now);
                    self.ask_again(sid);
                    continue;
                }
            }
            // A request on a stream the core already has open asks again (e.g. the
            // service came back up). The item keeps its source, its stream there and
            // the source it left unanswered, for `route` to let go of what it no
            // longer takes (forgotten, a late Opened of the source it had left was
            // taken for another edge's, and that source kept the stream for good).
            // Whether its subscribers have had an image stays too: if so (it is being
            // imaged again, after a gap or its source's loss), the image asked for
            // goes to all of them, those told it is suspect included.
            let same = |it: &EdgeItem| it.service == service && it.name == name;
            if let Some(it) = self.items.get_mut(sid).filter(|it| same(it)) {
                it.phase = Phase::Waiting { since: now };
                it.seq = 0;
                it.image_asked = None;
                self.route(core, sid, now);
                continue;
            }
            // Another item on a stream id the core had for one: the old one is let go of.
            self.close_item(sid, now);
            self.by_name.insert((service.clone(), name.clone()), sid);
            self.items.insert(
                sid,
                EdgeItem {
                    service,
                    name,
                    source: None,
                    source_stream: None,
                    phase: Phase::Waiting { since: now },
                    imaged: false,
                    seq: 0,
                    image_asked: None,
                    left_unanswered: Vec::new(),
                },
            );
            self.route(core, sid, now);
        }
        self.control.flush(out);
    }

    /// The core closed its stream `sid`: the source is told, or its answer is turned
    /// down when it comes.
    fn close_item(&mut self, sid: u32, now: Instant) {
        if let Some(it) = self.items.get(sid) {
            match (it.source, it.source_stream) {
                (Some(src), Some(stream)) => {
                    self.queue_control(&BackboneMessage::Unsubscribe {
                        edge: self.id,
                        source: src,
                        stream,
                    });
                }
                // Asked and not answered yet: its answer is turned down when it comes.
                (Some(src), None) if matches!(it.phase, Phase::Waiting { .. }) => {
                    let key = (it.service.clone(), it.name.clone());
                    self.closed_unanswered.insert(key, (src, now));
                }
                _ => {}
            }
        }
        self.forget(sid);
    }

    /// Heartbeats, lost sources, requests to repeat.
    pub fn handle_timeout(&mut self, core: &mut Node, now: Instant) {
        if now >= self.next_heartbeat {
            self.next_heartbeat = now + self.cfg.heartbeat;
            let name = self.cfg.name.clone();
            self.queue_control(&BackboneMessage::EdgeHeartbeat {
                edge: self.id,
                name: &name,
            });
            self.announce_unpublished(core, now);
        }
        let liveness = self.cfg.liveness;
        let lost: Vec<u64> = self
            .sources
            .iter()
            .filter(|(_, s)| s.live && now.saturating_duration_since(s.last_heard) > liveness)
            .map(|(&id, _)| id)
            .collect();
        for id in lost {
            self.source_lost(core, id, now);
            // Told now: this edge may have stopped hearing the source while the source
            // still hears it (a one-way partition); the source then keeps this edge's
            // interest and sends the streams on. Told only on the source's return, they
            // were forgotten with the source (after 60 liveness times) when that took
            // longer, and the streams ran at the source for good.
            self.tell_released(id);
        }
        // An answer not come in three liveness times is not coming (the source forgot
        // this edge's request, or it is lost).
        self.closed_unanswered
            .retain(|_, (_, at)| now.saturating_duration_since(*at) <= liveness * 3);
        // Sources gone for a long time are forgotten (a restarted source has a new id;
        // the streams they had for this edge were let go of when they were lost).
        let forget_after = liveness * 60;
        self.sources
            .retain(|_, s| s.live || now.saturating_duration_since(s.last_heard) < forget_after);
        let retry = self.cfg.request_retry;
        let stale: Vec<u32> = self
            .items
            .iter()
            .filter(|(_, it)| {
                matches!(it.phase, Phase::Waiting { since } if now.saturating_duration_since(since) > retry)
            })
            .map(|(sid, _)| sid)
            .collect();
        for sid in stale {
            self.route(core, sid, now);
        }
        let unanswered: Vec<u32> = self
            .items
            .iter()
            .filter(|(_, it)| {
                it.phase == Phase::Live
                    && it
                        .image_asked
                        .is_some_and(|at| now.saturating_duration_since(at) > retry)
            })
            .map(|(sid, _)| sid)
            .collect();
        for sid in unanswered {
            if let Some(it) = self.items.get_mut(sid) {
                it.image_asked = Some(now);
            }
            self.ask_again(sid);
        }
    }

    /// The transport was rebuilt: every source is lost until heard again.
    pub fn all_sources_lost(&mut self, core: &mut Node, now: Instant) {
        let live: Vec<u64> = self
            .sources
            .iter()
            .filter(|(_, s)| s.live)
            .map(|(&id, _)| id)
            .collect();
        for id in live {
            self.source_lost(core, id, now);
        }
        self.reject.clear();
        // What was not sent is dropped with the old publication, but an Unsubscribe
        // is sent when its source is heard again: that source may only have been
        // unreachable, and would go on sending the stream to this edge.
        for m in self.control.take_all() {
            if let Ok(BackboneMessage::Unsubscribe { source, stream, .. }) =
                BackboneMessage::decode(&m)
            {
                if let Some(s) = self.sources.get_mut(&source) {
                    s.released.push(stream);
                }
            }
        }
    }

    /// Tells `id` that this edge no longer takes the streams it released there.
    fn tell_released(&mut self, id: u64) {
        let Some(s) = self.sources.get(&id) else {
            return;
        };
        for &stream in &s.released {
            self.control.push(&BackboneMessage::Unsubscribe {
                edge: self.id,
                source: id,
                stream,
            });
        }
    }

    fn source_lost(&mut self, core: &mut Node, id: u64, now: Instant) {
        let Some(s) = self.sources.get_mut(&id) else {
            return;
        };
        s.live = false;
        s.released
            .extend(s.streams.iter().map(|(stream, _)| stream));
        s.streams.clear();
        self.reject.push(s.image);
        s.directory_version = 0;
        s.assembling = None;
        let name = s.name.clone();
        self.stats.sources_lost += 1;
        warn!(
            "backbone: source {name:?} ({id:016x}) silent for {:?}: its items are suspect",
            self.cfg.liveness
        );
        let affected: Vec<u32> = self
            .items
            .iter()
            .filter(|(_, it)| it.source == Some(id))
            .map(|(sid, _)| sid)
            .collect();
        for &sid in &affected {
            if let Some(it) = self.items.get_mut(sid) {
                it.source_stream = None;
                it.phase = Phase::Waiting { since: now };
            }
        }
        // Services no live source has any more go down: the core tells their
        // subscribers (open/suspect, "service ... is down") once.
        self.directory_updated(core, now);
        let text = format!("source {name:?} lost; moving to another source");
        for sid in affected {
            self.stats.reimages += 1;
            let Some(service) = self.items.get(sid).map(|it| it.service.clone()) else {
                continue;
            };
            if self.pick_source(&service, None).is_some() {
                self.status_to_core(core, sid, code::PUBLISHER_GONE, &text, now);
                self.route(core, sid, now);
            } else if let Some(it) = self.items.get_mut(sid) {
                // Asked for again when a source with the service is heard.
                it.phase = Phase::NoSource;
            }
        }
    }
}

/// Why an update with sequence number `seq` and conflation count `count` cannot follow
/// `last` on its stream, if it cannot. A count of 0 continues a merge too large for one
/// message (the same number again); 65,535 stands for "that many or more" (at least
/// that far ahead, less than half the number space); any other count is exact.
fn sequence_hole(last: u32, seq: u32, count: u16) -> Option<String> {
    let ahead = seq.wrapping_sub(last);
    let fits = match count {
        0 => ahead == 0,
        u16::MAX => (u32::from(u16::MAX)..1 << 31).contains(&ahead),
        n => ahead == u32::from(n),
    };
    (!fits).then(|| match count {
        0 => format!("sequence number {seq} continuing a merge where {last} was the last"),
        u16::MAX => format!("sequence number {seq} for 65,535 or more updates after {last}"),
        n => format!(
            "sequence number {seq} where {} was due",
            last.wrapping_add(u32::from(n))
        ),
    })
}

#[cfg(test)]
mod sequence_tests {
    use super::sequence_hole;

    #[test]
    fn every_conflation_count_is_checked_against_the_sequence() {
        assert_eq!(sequence_hole(10, 11, 1), None);
        assert_eq!(sequence_hole(10, 13, 3), None);
        assert!(sequence_hole(10, 12, 1).is_some());
        assert_eq!(sequence_hole(u32::MAX, 0, 1), None, "wraps");
        // A merge in parts: the later parts repeat the number.
        assert_eq!(sequence_hole(13, 13, 0), None);
        assert!(sequence_hole(13, 14, 0).is_some());
        // "That many or more": not fewer, not backwards.
        assert_eq!(sequence_hole(10, 10 + 65_535, u16::MAX), None);
        assert_eq!(sequence_hole(10, 10 + 1_000_000, u16::MAX), None);
        assert!(sequence_hole(10, 11, u16::MAX).is_some());
        assert!(sequence_hole(10, 9, u16::MAX).is_some());
    }
}
