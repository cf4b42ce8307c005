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

mod data;
mod items;
mod sources;

use crate::dense::DenseMap;
use crate::plumbing::{self, ControlQueue};
use crate::wire::BackboneMessage;
use log::warn;
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use tickwire_core::{ConnId, Node};
use tickwire_proto::{Role, ServiceState};

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

    fn bad(&mut self, why: &str) {
        self.stats.bad_messages += 1;
        if self.stats.bad_messages.is_power_of_two() {
            warn!(
                "backbone: ignored a malformed message ({why}); {} so far",
                self.stats.bad_messages
            );
        }
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
}
