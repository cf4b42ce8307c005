//! The sending side: a bounded queue of files, each offered to its sites, sent once to
//! all of them at a paced rate, and repaired from what the sites say they miss.
//!
//! One stream of messages reaches every site at once (the backbone's multicast, or
//! the same messages relayed down node-tree links), so a file costs about the same
//! for one site as for many. A transfer goes:
//! - queued: waiting for room in the window (`window` transfers at once);
//! - active: offered (its manifest) at once and every `offer_interval`; its chunks sent
//!   once in order (the first pass), then the chunks sites list as missing (repairs,
//!   before any new chunk), and an offer after each pass so sites answer at once;
//! - finished: every target site done (or the transfer expired: the sites without it
//!   failed "expired").
//!
//! A file may be queued while its bytes still arrive (an upload,
//! [`Sender::enqueue_arriving`]): its first pass goes as far as they have, every chunk
//! but the last until the caller says the file is whole and checked
//! ([`Sender::handle_uploaded`]), so no site can finish a file whose hash the sender has
//! not seen; an upload that fails is withdrawn ([`Sender::withdraw`]: a cancel to the
//! sites, which drop what they hold).
//!
//! A transfer stays active only while a target site that is present (heard within
//! `site_timeout`) still needs it: one absent, full or failed site parks its
//! transfers (offered every `park_offer_interval` so that site can try again) and
//! never holds the window the other sites need.

mod queue;
mod sites;
mod window;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::chunk_map::ChunkMap;
use crate::congestion::LossControl;
use crate::manifest::Manifest;
use crate::name::NameError;
use crate::pace::Pace;
use crate::wire::{self, FilesMessage, CHUNK_HEADER_LEN, MAX_CHUNK, MAX_TARGETS, MIN_CHUNK};

/// Where a sender reads the bytes of the files it sends (the node's spool).
pub trait ChunkSource {
    /// Fills `buf` with the bytes of `transfer`'s file at `offset`.
    fn read_chunk(&mut self, transfer: u64, offset: u64, buf: &mut [u8]) -> std::io::Result<()>;
}

/// How a sender behaves; every limit is here.
#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// This site's name (the node's name).
    pub site: String,
    /// Bytes per chunk (at most 1 MiB).
    pub chunk_size: u32,
    /// The files' share of bandwidth, bytes a second.
    pub rate: u64,
    /// The largest burst above `rate`, bytes.
    pub burst: u64,
    /// How often an active transfer is offered again.
    pub offer_interval: Duration,
    /// How often a parked transfer is offered (so a site that failed may try again).
    pub park_offer_interval: Duration,
    /// A site not heard from for this long is absent: its transfers wait for it
    /// without holding the window.
    pub site_timeout: Duration,
    /// How long a sender listens for sites before resolving a transfer sent to every
    /// site of a service.
    pub listen_first: Duration,
    /// Files queued at most (a new one beyond is refused at once).
    pub max_files: usize,
    /// Bytes queued at most.
    pub max_bytes: u64,
    /// Transfers active at once.
    pub window: usize,
    /// How long a transfer waits for its sites before they fail "expired".
    pub expire_after: Duration,
}

impl SenderConfig {
    /// Settings for a sender at `site`, with the defaults.
    pub fn new(site: impl Into<String>) -> Self {
        SenderConfig {
            site: site.into(),
            chunk_size: 16 * 1024,
            rate: 50_000_000,
            burst: 512 * 1024,
            offer_interval: Duration::from_millis(500),
            park_offer_interval: Duration::from_secs(2),
            site_timeout: Duration::from_secs(5),
            listen_first: Duration::from_secs(3),
            max_files: 10_000,
            max_bytes: 16 << 30,
            window: 64,
            expire_after: Duration::from_secs(24 * 3600),
        }
    }
}

/// A file to queue: its bytes are already in the sender's [`ChunkSource`].
#[derive(Debug, Clone)]
pub struct NewFile {
    /// Drawn by the caller (random; unique among its transfers).
    pub transfer: u64,
    /// The files service.
    pub service: String,
    /// The file's name at the sites.
    pub name: String,
    /// The file's size in bytes.
    pub size: u64,
    /// The file's SHA-256.
    pub sha256: [u8; 32],
    /// The sites to deliver to; `None`: every site present for the service when the
    /// transfer starts.
    pub to: Option<Vec<String>>,
    /// Milliseconds since 1970 when it expires (for the offer; the caller's clock).
    pub expires_ms: u64,
}

/// Why a file was not queued.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum QueueError {
    /// The queue holds its most files.
    #[error("the send queue is full: {files} files queued, the limit is {max}")]
    TooManyFiles {
        /// Files in the queue.
        files: usize,
        /// The most allowed.
        max: usize,
    },
    /// The queue holds its most bytes.
    #[error("the send queue is full: {queued} bytes queued and {size} more would pass the limit of {max}")]
    TooManyBytes {
        /// Bytes queued already.
        queued: u64,
        /// The file's size in bytes.
        size: u64,
        /// The most allowed.
        max: u64,
    },
    /// A name a site would refuse.
    #[error("file name {name:?} refused: {reason}")]
    BadName {
        /// The file's name at the sites.
        name: String,
        /// Why (empty when there is nothing to say).
        reason: NameError,
    },
    /// A file with more chunks than a transfer may have.
    #[error("a file of {size} bytes is too large for chunks of {chunk_size} bytes")]
    TooLarge {
        /// The file's size in bytes.
        size: u64,
        /// Bytes per chunk (the last may be shorter).
        chunk_size: u32,
    },
    /// More sites named than a transfer may have.
    #[error("{0} target sites named, at most {MAX_TARGETS}")]
    TooManyTargets(usize),
    /// No site to send to.
    #[error("an empty list of target sites")]
    NoTargets,
    /// The same file is queued already (its transfer).
    #[error("transfer {0:016x} is already queued")]
    Duplicate(u64),
}

/// Where a file stands at one site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Waiting to be sent.
    Queued,
    /// Being sent.
    Sending,
    /// The site has it.
    Done,
    /// The site could not take it.
    Failed,
}

impl Delivery {
    /// The name `files status` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Queued => "queued",
            Delivery::Sending => "sending",
            Delivery::Done => "done",
            Delivery::Failed => "failed",
        }
    }

    /// The state `as_str` names, if it names one.
    pub fn from_name(name: &str) -> Option<Delivery> {
        [
            Delivery::Queued,
            Delivery::Sending,
            Delivery::Done,
            Delivery::Failed,
        ]
        .into_iter()
        .find(|d| d.as_str() == name)
    }
}

/// One site's delivery of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteRecord {
    /// Where it stands.
    pub state: Delivery,
    /// Chunks it said it holds.
    pub have: u32,
    /// Why it failed (empty otherwise).
    pub reason: String,
    /// When the state last changed.
    pub since: Instant,
    /// Whether the sender waits for it (a target), or it is a site that took an open
    /// transfer after it started.
    pub target: bool,
}

/// What a sender reports to its driver (for the delivery record and the spool).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SenderEvent {
    /// A site's delivery changed state.
    Site {
        /// The transfer's id (the sending node's).
        transfer: u64,
        /// The site (a node name).
        site: String,
        /// Where it stands.
        state: Delivery,
        /// Why (empty when there is nothing to say).
        reason: String,
    },
    /// A file for every site present now has its sites: they are its targets from
    /// here on, through a restart too (the spool keeps them with its manifest).
    Targets {
        /// The transfer's id (the sending node's).
        transfer: u64,
        /// The sites named.
        targets: Vec<String>,
    },
    /// A file for every site with no sites yet learned where a newer file of its name
    /// (whole) goes: once it has its sites, it is replaced if they are all among
    /// `sites`. Kept through a restart (the spool keeps it with its manifest), since
    /// the newer may be over by then.
    ReplacedAt {
        /// The older transfer's id.
        transfer: u64,
        /// The newest of the newer files.
        by: u64,
        /// Every site the newer files went to.
        sites: Vec<String>,
    },
    /// The transfer is over: every target has the file (`delivered`), or it expired.
    /// Its bytes may leave the spool.
    Finished {
        /// The transfer's id (the sending node's).
        transfer: u64,
        /// Every site named has it.
        delivered: bool,
    },
}

/// Counters for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderStats {
    /// Offers handled.
    pub offers: u64,
    /// Chunks handled.
    pub chunks: u64,
    /// Chunks sent again for a site that missed them.
    pub repairs: u64,
    /// Bytes handled.
    pub bytes: u64,
    /// Statuses received.
    pub statuses: u64,
    /// Statuses for transfers the sender does not have, or from sites not meant.
    pub ignored_statuses: u64,
    /// Chunks the sender could not read.
    pub read_errors: u64,
    /// Times the rate was cut for the backbone's loss ([`crate::congestion`]).
    pub rate_cuts: u64,
    /// The rate now, bytes a second.
    pub rate: u64,
}

/// Most sites one transfer records (targets and late joiners of an open transfer).
const MAX_SITES_PER_TRANSFER: usize = 2 * MAX_TARGETS;
/// Transfers looked at, oldest first, to fill the window when one finishes (the scan
/// looks at all): bounds what a status costs while a long queue waits for absent sites.
const FILL_LOOKS: usize = 1024;

struct Outgoing {
    m: Manifest,
    chunks: u32,
    /// Chunks whose bytes the source has (all but while the file arrives).
    available: u32,
    /// The file is whole and checked (false while it arrives: an empty file has all
    /// of its no chunks then, and is not whole for that).
    whole: bool,
    /// Targets not resolved yet (sent to every site of the service: resolved when it
    /// starts).
    unresolved: bool,
    /// While unresolved: the sites newer files of its name (whole) went to, and the
    /// newest of them; once it has its sites, it is replaced if they are all among them.
    replaced_at: Option<(u64, Vec<String>)>,
    sites: BTreeMap<String, SiteRecord>,
    /// The first pass's next chunk.
    first_pass: u32,
    /// Its sites have been offered it (by this run, or by the run before a restart
    /// when a site had said where it stands): offered while parked.
    offered: bool,
    /// Chunks asked for again.
    repairs: ChunkMap,
    repair_cursor: u32,
    /// When the next offer is due.
    offer_at: Instant,
    /// Parked, with repairs a site asked for: in `Sender::parked_repairs`.
    repair_queued: bool,
    /// When it was last activated or a site last got further with it (more chunks,
    /// or done, or failed): a site that answers and gets nowhere is no progress.
    last_progress: Instant,
    /// Parked for making no progress: not taken back into the window before this.
    idle_until: Instant,
    expires_at: Instant,
    active: bool,
}

/// An arriving file that has sent all it has: it holds no place in the window (so
/// uploads that trickle cannot keep the other files waiting).
fn waiting_for_bytes(t: &Outgoing) -> bool {
    !t.whole && t.first_pass >= t.available && t.repairs.held() == 0
}

/// Transfers that ended, remembered so that a site still asking about one is told
/// again: it missed the Cancel (down or restarting when it was sent), or took up an
/// open transfer after its targets were done, and would keep its partial file until
/// `abandon_after`.
const REMEMBER_ENDED: usize = 4096;

/// An ended transfer (see [`REMEMBER_ENDED`]).
struct Ended {
    service: String,
    reason: Box<str>,
    told_at: Option<Instant>,
}

/// A message that goes before any chunk.
enum Urgent {
    Offer(u64),
    Cancel(u64, Box<str>),
}

/// The sending side (see the module doc).
pub struct Sender {
    cfg: SenderConfig,
    transfers: HashMap<u64, Outgoing>,
    /// Transfer ids, oldest first (finished ones are dropped as they are met).
    order: VecDeque<u64>,
    /// (service, name) -> the live transfers of that file, oldest first.
    by_name: HashMap<(String, String), Vec<u64>>,
    active: Vec<u64>,
    /// service -> site -> last heard.
    sites: HashMap<String, HashMap<String, Instant>>,
    known_sites: usize,
    pace: Pace,
    loss: LossControl,
    events: VecDeque<SenderEvent>,
    /// Offers and cancels to send before any chunk.
    urgent: VecDeque<Urgent>,
    /// Parked transfers with repairs a site asked for, oldest first.
    parked_repairs: VecDeque<u64>,
    /// Transfers that ended lately, oldest first in `ended_order`.
    ended: HashMap<u64, Ended>,
    ended_order: VecDeque<u64>,
    started: Instant,
    queued_bytes: u64,
    next_scan: Instant,
    park_cursor: usize,
    buf: Vec<u8>,
    stats: SenderStats,
}

impl Sender {
    /// Settings for a sender at `site`, with the defaults.
    pub fn new(mut cfg: SenderConfig, now: Instant) -> Self {
        cfg.chunk_size = cfg.chunk_size.clamp(MIN_CHUNK, MAX_CHUNK);
        cfg.window = cfg.window.max(1);
        let burst = cfg
            .burst
            .max(u64::from(cfg.chunk_size) + CHUNK_HEADER_LEN as u64);
        Sender {
            pace: Pace::new(cfg.rate, burst, now),
            loss: LossControl::new(cfg.rate),
            cfg,
            transfers: HashMap::new(),
            order: VecDeque::new(),
            by_name: HashMap::new(),
            active: Vec::new(),
            sites: HashMap::new(),
            known_sites: 0,
            events: VecDeque::new(),
            urgent: VecDeque::new(),
            parked_repairs: VecDeque::new(),
            ended: HashMap::new(),
            ended_order: VecDeque::new(),
            started: now,
            queued_bytes: 0,
            next_scan: now,
            park_cursor: 0,
            buf: Vec::new(),
            stats: SenderStats::default(),
        }
    }

    /// Its settings.
    pub fn config(&self) -> &SenderConfig {
        &self.cfg
    }

    /// Its counters.
    pub fn stats(&self) -> SenderStats {
        SenderStats {
            rate_cuts: self.loss.cuts(),
            rate: self.loss.rate(),
            ..self.stats
        }
    }

    /// The backbone driver's totals so far: NAKs it received (its receivers' requests
    /// to repair what they lost) and datagrams it sent. The rate follows them
    /// ([`crate::congestion`]).
    pub fn handle_network_counters(&mut self, naks: u64, datagrams: u64, now: Instant) {
        if let Some(rate) = self.loss.on_counters(naks, datagrams, now) {
            self.pace.set_rate(rate, now);
        }
    }

    /// Files queued, not finished.
    pub fn queued_files(&self) -> usize {
        self.transfers.len()
    }

    /// Bytes queued.
    pub fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }

    /// A transfer's manifest and the record of its sites.
    pub fn transfer(&self, transfer: u64) -> Option<(&Manifest, &BTreeMap<String, SiteRecord>)> {
        self.transfers.get(&transfer).map(|t| (&t.m, &t.sites))
    }

    /// Every queued transfer, oldest first.
    pub fn transfers(&self) -> impl Iterator<Item = (&Manifest, &BTreeMap<String, SiteRecord>)> {
        self.order
            .iter()
            .filter_map(|id| self.transfers.get(id))
            .map(|t| (&t.m, &t.sites))
    }

    /// What happened.
    pub fn poll_event(&mut self) -> Option<SenderEvent> {
        self.events.pop_front()
    }

    /// The next deadline: a scan, an offer, or the pace letting the next chunk go.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut at = if self.transfers.is_empty() {
            None
        } else {
            Some(self.next_scan)
        };
        let mut earliest = |t: Instant| at = Some(at.map_or(t, |a: Instant| a.min(t)));
        for id in &self.active {
            earliest(self.transfers[id].offer_at);
        }
        if !self.urgent.is_empty() {
            earliest(self.started); // at once
        }
        if let Some(ready) = self.next_chunk_at() {
            earliest(ready);
        }
        at
    }

    /// When the pace lets the next chunk go, if a transfer has one to send.
    pub fn next_chunk_at(&self) -> Option<Instant> {
        let work = !self.parked_repairs.is_empty()
            || self.active.iter().any(|id| {
                let t = &self.transfers[id];
                t.repairs.held() > 0 || t.first_pass < t.available
            });
        work.then(|| {
            self.pace
                .ready_at(u64::from(self.cfg.chunk_size) + CHUNK_HEADER_LEN as u64)
        })
    }

    /// Writes the next message to send into `out` (cleared first); false when there
    /// is nothing to send now (see [`Sender::poll_timeout`]).
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        src: &mut dyn ChunkSource,
        out: &mut Vec<u8>,
    ) -> bool {
        out.clear();
        while let Some(u) = self.urgent.pop_front() {
            let id = match u {
                Urgent::Cancel(transfer, reason) => {
                    FilesMessage::Cancel {
                        transfer,
                        reason: &reason,
                    }
                    .encode(out)
                    .expect("a cancel always encodes");
                    return true;
                }
                Urgent::Offer(id) => id,
            };
            if let Some(t) = self.transfers.get(&id) {
                self.stats.offers += 1;
                FilesMessage::Offer(t.m.offer(t.first_pass))
                    .encode(out)
                    .expect("a queued manifest encodes");
                return true;
            }
        }
        for i in 0..self.active.len() {
            let t = self
                .transfers
                .get_mut(&self.active[i])
                .expect("active transfers are live");
            if t.offer_at <= now {
                t.offer_at = now + self.cfg.offer_interval;
                self.stats.offers += 1;
                FilesMessage::Offer(t.m.offer(t.first_pass))
                    .encode(out)
                    .expect("a queued manifest encodes");
                return true;
            }
        }
        // Repairs first (sites are waiting on them): of active transfers, then of parked
        // ones a site holds a partial file of (it asked; finishing it frees the site's
        // room for the transfers in the window); then the oldest first pass.
        while let Some(&id) = self.parked_repairs.front() {
            match self.transfers.get_mut(&id) {
                Some(t) if t.repairs.held() > 0 && !t.active => break,
                Some(t) => {
                    t.repair_queued = false;
                    self.parked_repairs.pop_front();
                }
                None => {
                    self.parked_repairs.pop_front();
                }
            }
        }
        let repair = self
            .active
            .iter()
            .find(|id| self.transfers[id].repairs.held() > 0)
            .or_else(|| self.parked_repairs.front())
            .copied();
        let pick = repair.map(|id| (id, true)).or_else(|| {
            self.active
                .iter()
                .find(|id| {
                    let t = &self.transfers[id];
                    t.first_pass < t.available
                })
                .map(|id| (*id, false))
        });
        let Some((id, is_repair)) = pick else {
            return false;
        };
        let t = self.transfers.get_mut(&id).expect("live");
        let index = if is_repair {
            let at = t
                .repairs
                .next_held(t.repair_cursor, t.chunks)
                .or_else(|| t.repairs.next_held(0, t.chunks));
            at.expect("a repair is pending")
        } else {
            t.first_pass
        };
        let len = t.m.chunk_len(index);
        if !self.pace.take((len + CHUNK_HEADER_LEN) as u64, now) {
            return false;
        }
        self.buf.resize(len, 0);
        if let Err(e) = src.read_chunk(id, t.m.offset(index), &mut self.buf) {
            // The spool lost the file: nobody can get it any more.
            self.stats.read_errors += 1;
            let reason = format!("the sender cannot read its copy: {e}");
            self.fail_transfer(id, &reason);
            return self.poll_transmit(now, src, out);
        }
        wire::encode_chunk(out, id, index, &self.buf).expect("chunks are at most MAX_CHUNK");
        self.stats.bytes += len as u64;
        if is_repair {
            t.repairs.remove(index);
            t.repair_cursor = index + 1;
            self.stats.repairs += 1;
            if t.repairs.held() == 0 {
                // The pass is over: ask the sites at once.
                if t.active {
                    t.offer_at = now;
                } else {
                    t.repair_queued = false;
                    self.parked_repairs.retain(|x| *x != id);
                    self.urgent.push_back(Urgent::Offer(id));
                }
            }
        } else {
            t.first_pass += 1;
            self.stats.chunks += 1;
            if t.first_pass == t.chunks {
                t.offer_at = now;
            }
        }
        true
    }
}
