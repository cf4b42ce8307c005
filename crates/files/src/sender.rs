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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use thiserror::Error;

use crate::chunk_map::ChunkMap;
use crate::congestion::LossControl;
use crate::manifest::Manifest;
use crate::name::{check_name, NameError};
use crate::pace::Pace;
use crate::wire::{
    self, chunk_count, FilesMessage, SiteState, Status, CHUNK_HEADER_LEN, MAX_CHUNK, MAX_TARGETS,
    MIN_CHUNK,
};

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
/// Most sites whose presence a sender remembers (the longest silent goes first).
const MAX_KNOWN_SITES: usize = 4096;
/// How often the queue is scanned (expiry, window, parked offers).
const SCAN_INTERVAL: Duration = Duration::from_millis(100);
/// Transfers looked at, oldest first, to fill the window when one finishes (the scan
/// looks at all): bounds what a status costs while a long queue waits for absent sites.
const FILL_LOOKS: usize = 1024;
/// Parked transfers offered per scan at most (640 a second).
const PARKED_OFFERS_PER_SCAN: usize = 64;

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
/// A site's questions about an ended transfer are answered at most this often.
const RETELL_EVERY: Duration = Duration::from_secs(1);

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

    /// Queues a file; refused at once (never waits) when the queue is full.
    pub fn enqueue(&mut self, file: NewFile, now: Instant) -> Result<u64, QueueError> {
        let id = self.enqueue_with(file, now)?;
        self.replace_older(id, |_| true);
        Ok(id)
    }

    /// Queues a file whose bytes are still arriving in the sender's [`ChunkSource`]
    /// (checked as [`Sender::enqueue`] checks): nothing of it goes out before
    /// [`Sender::handle_uploaded`] says how much has arrived.
    pub fn enqueue_arriving(&mut self, file: NewFile, now: Instant) -> Result<u64, QueueError> {
        let id = self.enqueue_with(file, now)?;
        let t = self.transfers.get_mut(&id).expect("just queued");
        t.available = 0;
        t.whole = false;
        Ok(id)
    }

    /// `bytes` of an arriving file are in its source; `whole`: all of it, and its
    /// SHA-256 checked. Until then its last chunk is held back.
    pub fn handle_uploaded(&mut self, transfer: u64, bytes: u64, whole: bool, now: Instant) {
        let Some(t) = self.transfers.get_mut(&transfer) else {
            return;
        };
        if !t.active && waiting_for_bytes(t) {
            // It may take a place in the window now.
            self.next_scan = self.next_scan.min(now);
        }
        if t.whole {
            return;
        }
        if whole {
            // Whole and checked: now it replaces the older files of its name (an upload
            // that fails leaves the older one to its sites), not one queued after it.
            t.available = t.chunks;
            t.whole = true;
            let older = self.queued_before(transfer);
            self.replace_older(transfer, |o| older.contains(&o.m.transfer));
            return;
        }
        let full = bytes / u64::from(t.m.chunk_size.max(1));
        t.available = (full.min(u64::from(t.chunks.saturating_sub(1)))) as u32;
    }

    /// Takes back a queued file (its upload failed): every site that does not have it
    /// fails with `reason`, and the sites are told to drop what they hold.
    pub fn withdraw(&mut self, transfer: u64, reason: &str) {
        if self.transfers.contains_key(&transfer) {
            self.fail_transfer(transfer, reason);
        }
    }

    /// A file whole under a name replaces the older files of that name still on their
    /// way (those `older` says are older) where it goes to every site they still need
    /// to reach: a site that took an older one later (after a full disk, say) would
    /// put its bytes back over the newer. An older file still due at a site the newer
    /// one does not go to is left to go.
    fn replace_older(&mut self, newer: u64, older: impl Fn(&Outgoing) -> bool) {
        let Some(t) = self.transfers.get(&newer) else {
            return;
        };
        // A file for every site goes to the sites present when it starts: until it has
        // them it replaces nothing (`resolve_open` comes back), then it covers those.
        if t.unresolved {
            return;
        }
        let key = (t.m.service.clone(), t.m.name.clone());
        let covers = &t.m.targets;
        let replaced: Vec<u64> = self.by_name[&key]
            .iter()
            .filter(|id| **id != newer)
            .filter_map(|id| self.transfers.get(id).map(|o| (*id, o)))
            .filter(|(_, o)| older(o))
            .filter(|(_, o)| {
                !o.unresolved
                    && o.sites
                        .iter()
                        .filter(|(_, r)| r.target && r.state != Delivery::Done)
                        .all(|(site, _)| covers.contains(site))
            })
            .map(|(id, _)| id)
            .collect();
        // An older one with no sites yet cannot be replaced now: it remembers where the
        // newer goes, so that it reaches no site after the newer (`resolve_open`).
        let waiting: Vec<u64> = self.by_name[&key]
            .iter()
            .filter(|id| **id != newer)
            .filter(|id| {
                self.transfers
                    .get(id)
                    .is_some_and(|o| o.unresolved && older(o))
            })
            .copied()
            .collect();
        let covers = covers.clone();
        for id in waiting {
            self.note_replaced_at(id, newer, &covers);
        }
        let reason = format!("replaced by a newer file of the same name (transfer {newer:016x})");
        for id in replaced {
            self.fail_transfer(id, &reason);
        }
    }

    /// An unresolved transfer learns that `newer` went to `covers` (see
    /// [`SenderEvent::ReplacedAt`]).
    fn note_replaced_at(&mut self, id: u64, newer: u64, covers: &[String]) {
        let Some(o) = self.transfers.get_mut(&id).filter(|o| o.unresolved) else {
            return;
        };
        let (by, sites) = o.replaced_at.get_or_insert_with(|| (newer, Vec::new()));
        *by = newer;
        for site in covers {
            if !sites.contains(site) {
                sites.push(site.clone());
            }
        }
        let (by, sites) = (*by, sites.clone());
        self.events.push_back(SenderEvent::ReplacedAt {
            transfer: id,
            by,
            sites,
        });
    }

    /// What an unresolved transfer knows of newer files of its name: the newest, and
    /// the sites they went to ([`SenderEvent::ReplacedAt`]).
    pub fn replaced_at(&self, transfer: u64) -> Option<(u64, &[String])> {
        let t = self.transfers.get(&transfer)?;
        t.replaced_at.as_ref().map(|(by, sites)| (*by, &sites[..]))
    }

    /// Puts back what a restored transfer knew of newer files of its name before the
    /// restart ([`SenderEvent::ReplacedAt`]): they may be over, and not restored.
    pub fn restore_replaced_at(&mut self, transfer: u64, by: u64, sites: &[String]) {
        self.note_replaced_at(transfer, by, sites);
    }

    /// The live transfers of `transfer`'s name queued before it.
    fn queued_before(&self, transfer: u64) -> Vec<u64> {
        let Some(t) = self.transfers.get(&transfer) else {
            return Vec::new();
        };
        let key = (t.m.service.clone(), t.m.name.clone());
        self.by_name.get(&key).map_or(Vec::new(), |ids| {
            ids.iter().copied().take_while(|x| *x != transfer).collect()
        })
    }

    /// Fails a transfer at every site that does not have it, cancels it at the sites
    /// and removes it.
    fn fail_transfer(&mut self, id: u64, reason: &str) {
        let Some(t) = self.transfers.get(&id) else {
            return;
        };
        for (site, r) in &t.sites {
            if r.target && r.state != Delivery::Done {
                self.events.push_back(SenderEvent::Site {
                    transfer: id,
                    site: site.clone(),
                    state: Delivery::Failed,
                    reason: reason.to_owned(),
                });
            }
        }
        if t.unresolved {
            // A file for every site that ended before it had its sites: its record's
            // one line, "every site" (the empty name), says it failed and why.
            self.events.push_back(SenderEvent::Site {
                transfer: id,
                site: String::new(),
                state: Delivery::Failed,
                reason: reason.to_owned(),
            });
        }
        self.remove(id, reason);
        self.urgent.push_back(Urgent::Cancel(id, reason.into()));
        self.events.push_back(SenderEvent::Finished {
            transfer: id,
            delivered: false,
        });
    }

    fn enqueue_with(&mut self, file: NewFile, now: Instant) -> Result<u64, QueueError> {
        check_name(&file.name).map_err(|reason| QueueError::BadName {
            name: file.name.clone(),
            reason,
        })?;
        if chunk_count(file.size, self.cfg.chunk_size).is_none() {
            return Err(QueueError::TooLarge {
                size: file.size,
                chunk_size: self.cfg.chunk_size,
            });
        }
        if let Some(to) = &file.to {
            if to.is_empty() {
                return Err(QueueError::NoTargets);
            }
            if to.len() > MAX_TARGETS {
                return Err(QueueError::TooManyTargets(to.len()));
            }
        }
        if self.transfers.len() >= self.cfg.max_files {
            return Err(QueueError::TooManyFiles {
                files: self.transfers.len(),
                max: self.cfg.max_files,
            });
        }
        if self.queued_bytes.saturating_add(file.size) > self.cfg.max_bytes {
            return Err(QueueError::TooManyBytes {
                queued: self.queued_bytes,
                size: file.size,
                max: self.cfg.max_bytes,
            });
        }
        if self.transfers.contains_key(&file.transfer) {
            return Err(QueueError::Duplicate(file.transfer));
        }
        let (open, targets) = match file.to {
            Some(mut to) => {
                to.sort();
                to.dedup();
                (false, to)
            }
            None => (true, Vec::new()),
        };
        let m = Manifest {
            transfer: file.transfer,
            sender: self.cfg.site.clone(),
            service: file.service,
            name: file.name,
            size: file.size,
            chunk_size: self.cfg.chunk_size,
            sha256: file.sha256,
            expires_ms: file.expires_ms,
            open,
            targets,
        };
        let expires_at = now + self.cfg.expire_after;
        self.insert(m, expires_at, now);
        self.next_scan = now;
        Ok(file.transfer)
    }

    /// Puts back a transfer a previous run of the sender had queued (from the
    /// driver's spool), with what its sites had said.
    pub fn restore(
        &mut self,
        m: Manifest,
        sites: impl IntoIterator<Item = (String, Delivery, String)>,
        expires_at: Instant,
        now: Instant,
    ) {
        if self.transfers.contains_key(&m.transfer) || m.chunk_size == 0 || m.chunk_size > MAX_CHUNK
        {
            return;
        }
        let id = m.transfer;
        self.insert(m, expires_at, now);
        let t = self.transfers.get_mut(&id).expect("just inserted");
        for (site, state, reason) in sites {
            let target = t.m.targets.contains(&site);
            if !target && t.sites.len() >= MAX_SITES_PER_TRANSFER {
                continue;
            }
            // A site that said where it stands was offered the file: a failed one
            // may try again when it is offered, parked, as before the restart.
            t.offered |= state != Delivery::Queued;
            // Sending resumes as queued: this run has sent nothing yet.
            let state = if state == Delivery::Sending {
                Delivery::Queued
            } else {
                state
            };
            t.sites.insert(
                site,
                SiteRecord {
                    state,
                    have: 0,
                    reason,
                    since: now,
                    target,
                },
            );
        }
        // Sites that said where they stand may hold parts of it: rather than a first
        // pass from chunk 0, its offers say every chunk went once, and each site
        // answers with what it misses, which alone is sent again (as repairs).
        if let Some(t) = self.transfers.get_mut(&id).filter(|t| t.offered) {
            t.first_pass = t.chunks;
        }
        // Every target had it (the log lost the line saying it was over, a full disk
        // say): over now, delivered, rather than kept until it expires undelivered.
        self.finish_if_delivered(id);
        // Files of one name put back in any order: the later queued (the later expiry)
        // replaces the earlier, as when they were queued.
        if let Some(t) = self.transfers.get(&id) {
            let (expires, key) = (t.m.expires_ms, (t.m.service.clone(), t.m.name.clone()));
            self.replace_older(id, |o| o.m.expires_ms < expires);
            let newer: Vec<u64> = self.by_name.get(&key).map_or(Vec::new(), |ids| {
                ids.iter()
                    .filter(|n| self.transfers[n].m.expires_ms > expires)
                    .copied()
                    .collect()
            });
            for n in newer {
                self.replace_older(n, |o| o.m.transfer == id);
            }
        }
        self.next_scan = now;
    }

    fn insert(&mut self, m: Manifest, expires_at: Instant, now: Instant) {
        let chunks = m.chunks();
        let unresolved = m.open && m.targets.is_empty();
        let sites = m
            .targets
            .iter()
            .map(|s| {
                (
                    s.clone(),
                    SiteRecord {
                        state: Delivery::Queued,
                        have: 0,
                        reason: String::new(),
                        since: now,
                        target: true,
                    },
                )
            })
            .collect();
        self.queued_bytes += m.size;
        self.order.push_back(m.transfer);
        self.by_name
            .entry((m.service.clone(), m.name.clone()))
            .or_default()
            .push(m.transfer);
        self.transfers.insert(
            m.transfer,
            Outgoing {
                chunks,
                available: chunks,
                whole: true,
                unresolved,
                replaced_at: None,
                sites,
                first_pass: 0,
                offered: false,
                repairs: ChunkMap::new(chunks),
                repair_cursor: 0,
                offer_at: now,
                repair_queued: false,
                last_progress: now,
                idle_until: now,
                expires_at,
                active: false,
                m,
            },
        );
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

    /// A receiving site says it takes `service`.
    pub fn handle_present(&mut self, site: &str, service: &str, now: Instant) {
        self.heard(service, site, now);
    }

    fn heard(&mut self, service: &str, site: &str, now: Instant) {
        let timeout = self.cfg.site_timeout;
        if let Some(at) = self.sites.get_mut(service).and_then(|m| m.get_mut(site)) {
            if now.saturating_duration_since(*at) >= timeout {
                // Back after an absence: what waits for it is looked at now.
                self.next_scan = now;
            }
            *at = now;
            return;
        }
        // A site first heard: the transfers that wait for it start now, not at the
        // next scan.
        self.next_scan = now;
        if self.known_sites >= MAX_KNOWN_SITES {
            let oldest = self
                .sites
                .iter()
                .flat_map(|(svc, m)| m.iter().map(move |(site, at)| (*at, svc, site)))
                .min()
                .map(|(_, svc, site)| (svc.clone(), site.clone()));
            if let Some((svc, site)) = oldest {
                let m = self.sites.get_mut(&svc).expect("found");
                m.remove(&site);
                if m.is_empty() {
                    self.sites.remove(&svc);
                }
                self.known_sites -= 1;
            }
        }
        self.sites
            .entry(service.to_owned())
            .or_default()
            .insert(site.to_owned(), now);
        self.known_sites += 1;
    }

    fn present(&self, service: &str, site: &str, now: Instant) -> bool {
        self.sites
            .get(service)
            .and_then(|m| m.get(site))
            .is_some_and(|at| now.saturating_duration_since(*at) < self.cfg.site_timeout)
    }

    /// A site's status for one of our transfers.
    pub fn handle_status(&mut self, s: &Status, now: Instant) {
        self.stats.statuses += 1;
        let Some(t) = self.transfers.get(&s.transfer) else {
            if !self.retell_ended(s, now) {
                self.stats.ignored_statuses += 1;
            }
            return;
        };
        // No site can have a file whose upload is still coming in (its last chunk
        // waits for the whole upload): such a `done` is not believed.
        let uploading = !t.whole;
        if !t.m.is_for(s.site) || (uploading && s.state == SiteState::Done) {
            self.stats.ignored_statuses += 1;
            return;
        }
        let service = t.m.service.clone();
        self.heard(&service, s.site, now);
        let t = self.transfers.get_mut(&s.transfer).expect("checked");
        if !t.sites.contains_key(s.site) {
            if t.sites.len() >= MAX_SITES_PER_TRANSFER {
                self.stats.ignored_statuses += 1;
                return;
            }
            t.sites.insert(
                s.site.to_owned(),
                SiteRecord {
                    state: Delivery::Queued,
                    have: 0,
                    reason: String::new(),
                    since: now,
                    target: false,
                },
            );
        }
        // A site's reason is shown to operators: kept printable.
        let failed_reason = crate::name::printable(s.reason);
        let (state, reason) = match s.state {
            SiteState::Receiving => {
                for r in &s.missing {
                    // Only chunks already sent: the first pass brings the rest.
                    t.repairs.insert_range(r.start..r.end.min(t.first_pass));
                }
                if !t.active && t.repairs.held() > 0 && !t.repair_queued {
                    t.repair_queued = true;
                    self.parked_repairs.push_back(s.transfer);
                }
                (Delivery::Sending, "")
            }
            SiteState::Done => (Delivery::Done, ""),
            SiteState::Failed => (Delivery::Failed, &*failed_reason),
            SiteState::Unknown(_) => return,
        };
        let rec = t.sites.get_mut(s.site).expect("inserted above");
        if rec.target && (s.have > rec.have || rec.state != state) {
            t.last_progress = now;
        }
        rec.have = s.have;
        if rec.state != state || rec.reason != reason {
            rec.state = state;
            rec.reason = reason.to_owned();
            rec.since = now;
            self.events.push_back(SenderEvent::Site {
                transfer: s.transfer,
                site: s.site.to_owned(),
                state,
                reason: reason.to_owned(),
            });
        }
        if state == Delivery::Done && self.finish_if_delivered(s.transfer) {
            // Its place in the window goes to the next file now, not at the next scan
            // (which looks further down a long queue than this does).
            self.fill_window(now, FILL_LOOKS);
        }
    }

    /// Removes the transfer if every site it is for has it; whether it did.
    fn finish_if_delivered(&mut self, transfer: u64) -> bool {
        let Some(t) = self.transfers.get(&transfer) else {
            return false;
        };
        if t.unresolved
            || !t
                .sites
                .values()
                .filter(|r| r.target)
                .all(|r| r.state == Delivery::Done)
        {
            return false;
        }
        self.remove(
            transfer,
            "the transfer is over: every site named has the file",
        );
        self.events.push_back(SenderEvent::Finished {
            transfer,
            delivered: true,
        });
        true
    }

    /// Activates the oldest transfers a present site needs while the window has room,
    /// looking at the first `looks` of the queue.
    fn fill_window(&mut self, now: Instant, looks: usize) {
        for i in 0..self.order.len().min(looks) {
            if self.active.len() >= self.cfg.window {
                break;
            }
            let id = self.order[i];
            // `order` keeps finished transfers until the next scan: skipped.
            let waiting = self.transfers.get(&id).is_some_and(|t| {
                !t.active && !waiting_for_bytes(t) && t.idle_until <= now && self.needy(t, now)
            });
            if waiting {
                self.activate(id, now);
            }
        }
    }

    /// Removes a transfer that ended (`why`, told to any site that asks about it later).
    fn remove(&mut self, transfer: u64, why: &str) {
        if let Some(t) = self.transfers.remove(&transfer) {
            self.queued_bytes -= t.m.size;
            let key = (t.m.service, t.m.name);
            if let Some(ids) = self.by_name.get_mut(&key) {
                ids.retain(|id| *id != transfer);
                if ids.is_empty() {
                    self.by_name.remove(&key);
                }
            }
            if self.ended_order.len() >= REMEMBER_ENDED {
                if let Some(old) = self.ended_order.pop_front() {
                    self.ended.remove(&old);
                }
            }
            let ended = Ended {
                service: key.0,
                reason: why.into(),
                told_at: None,
            };
            if self.ended.insert(transfer, ended).is_none() {
                self.ended_order.push_back(transfer);
            }
        }
        self.active.retain(|id| *id != transfer);
    }

    /// The service of a transfer, live or ended lately (a site's status about it is
    /// taken in that service).
    pub fn service_of(&self, transfer: u64) -> Option<&str> {
        match self.transfers.get(&transfer) {
            Some(t) => Some(&t.m.service),
            None => self.ended.get(&transfer).map(|e| e.service.as_str()),
        }
    }

    /// A site still receiving a transfer that ended: told again to drop it (at most
    /// once per [`RETELL_EVERY`]).
    fn retell_ended(&mut self, s: &Status, now: Instant) -> bool {
        let Some(e) = self.ended.get_mut(&s.transfer) else {
            return false;
        };
        let due = match e.told_at {
            Some(at) => now.saturating_duration_since(at) >= RETELL_EVERY,
            None => true,
        };
        if s.state == SiteState::Receiving && due {
            e.told_at = Some(now);
            self.urgent
                .push_back(Urgent::Cancel(s.transfer, e.reason.clone()));
        }
        true
    }

    /// Whether the transfer has a present target site that still needs it.
    fn needy(&self, t: &Outgoing, now: Instant) -> bool {
        !t.unresolved
            && t.sites.iter().any(|(site, r)| {
                r.target
                    && matches!(r.state, Delivery::Queued | Delivery::Sending)
                    && self.present(&t.m.service, site, now)
            })
    }

    /// Its deadlines passed by `now` (pacing, repairs, expiry).
    pub fn handle_timeout(&mut self, now: Instant) {
        if now < self.next_scan {
            return;
        }
        self.next_scan = now + SCAN_INTERVAL;
        self.expire(now);
        self.resolve_open(now);
        // Park what no present site needs, what waits for its bytes, and what gets no
        // site further once its first pass is sent (a site whose partial files are all
        // taken ignores new offers until one is done; one whose chunks never arrive
        // asks for the same repairs again and again: waiting for either must not hold
        // the window; their repairs still go, outside it); fill the window, oldest
        // first.
        let quiet = self.cfg.offer_interval * 4;
        let active = std::mem::take(&mut self.active);
        for id in active {
            let Some(t) = self.transfers.get(&id) else {
                continue;
            };
            let stalled =
                t.first_pass >= t.chunks && now.saturating_duration_since(t.last_progress) >= quiet;
            if self.needy(t, now) && !waiting_for_bytes(t) && !stalled {
                self.active.push(id);
            } else if let Some(t) = self.transfers.get_mut(&id) {
                t.active = false;
                t.offer_at = now + self.cfg.park_offer_interval;
                if stalled {
                    t.idle_until = t.offer_at;
                }
                // The repairs its sites asked for still go, outside the window.
                if stalled && t.repairs.held() > 0 && !t.repair_queued {
                    t.repair_queued = true;
                    self.parked_repairs.push_back(id);
                }
            }
        }
        self.order.retain(|id| self.transfers.contains_key(id));
        let mut parked_offers = 0;
        let len = self.order.len();
        self.fill_window(now, len);
        // Offer a few parked transfers that were offered before (by this run or the
        // one before a restart), in turn, so failed and busy sites may ask again. One
        // never offered waits for the window: a site that
        // opened a partial file for it would hold a place the window's transfers need.
        for _ in 0..len {
            if parked_offers >= PARKED_OFFERS_PER_SCAN {
                break;
            }
            self.park_cursor = (self.park_cursor + 1) % len;
            let id = self.order[self.park_cursor];
            let t = self
                .transfers
                .get_mut(&id)
                .expect("order holds live transfers");
            if !t.active && !t.unresolved && t.offered && t.offer_at <= now {
                t.offer_at = now + self.cfg.park_offer_interval;
                self.urgent.push_back(Urgent::Offer(id));
                parked_offers += 1;
            }
        }
    }

    fn activate(&mut self, id: u64, now: Instant) {
        let present: Vec<String> = {
            let t = &self.transfers[&id];
            t.sites
                .iter()
                .filter(|(site, r)| {
                    r.target && r.state == Delivery::Queued && self.present(&t.m.service, site, now)
                })
                .map(|(site, _)| site.clone())
                .collect()
        };
        let t = self.transfers.get_mut(&id).expect("live");
        t.active = true;
        t.offered = true;
        t.last_progress = now;
        t.offer_at = now;
        for site in present {
            let rec = t.sites.get_mut(&site).expect("listed");
            rec.state = Delivery::Sending;
            rec.since = now;
            self.events.push_back(SenderEvent::Site {
                transfer: id,
                site,
                state: Delivery::Sending,
                reason: String::new(),
            });
        }
        self.active.push(id);
    }

    fn expire(&mut self, now: Instant) {
        let expired: Vec<u64> = self
            .transfers
            .iter()
            .filter(|(_, t)| t.expires_at <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            self.fail_transfer(id, "expired");
        }
    }

    fn resolve_open(&mut self, now: Instant) {
        if now.saturating_duration_since(self.started) < self.cfg.listen_first {
            return;
        }
        // Oldest first: each, resolved, replaces the older ones of its name.
        let unresolved: Vec<u64> = self
            .order
            .iter()
            .filter(|id| self.transfers.get(id).is_some_and(|t| t.unresolved))
            .copied()
            .collect();
        for id in unresolved {
            let service = self.transfers[&id].m.service.clone();
            let mut targets: Vec<String> = self
                .sites
                .get(&service)
                .into_iter()
                .flatten()
                .filter(|(_, at)| now.saturating_duration_since(**at) < self.cfg.site_timeout)
                .map(|(site, _)| site.clone())
                .collect();
            if targets.is_empty() {
                continue; // waits for a site
            }
            targets.sort();
            targets.truncate(MAX_TARGETS);
            let t = self.transfers.get_mut(&id).expect("live");
            for site in &targets {
                let rec = t.sites.entry(site.clone()).or_insert_with(|| SiteRecord {
                    state: Delivery::Queued,
                    have: 0,
                    reason: String::new(),
                    since: now,
                    target: true,
                });
                rec.target = true;
            }
            t.m.targets = targets.clone();
            t.unresolved = false;
            let replaced = t
                .replaced_at
                .take()
                .filter(|(_, at)| targets.iter().all(|s| at.contains(s)));
            self.events.push_back(SenderEvent::Targets {
                transfer: id,
                targets,
            });
            if let Some((newer, _)) = replaced {
                let reason =
                    format!("replaced by a newer file of the same name (transfer {newer:016x})");
                self.fail_transfer(id, &reason);
                continue;
            }
            // Sites that answered before it was resolved may be done already.
            self.finish_if_delivered(id);
            // Whole, it now replaces the older files of its name where it goes.
            if self.transfers.get(&id).is_some_and(|t| t.whole) {
                let older = self.queued_before(id);
                self.replace_older(id, |o| older.contains(&o.m.transfer));
            }
        }
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
