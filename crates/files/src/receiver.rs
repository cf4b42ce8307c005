//! The receiving side: a site takes the files offered to it, chunk by chunk, into
//! partial files, checks each file's SHA-256, and only then makes it visible under
//! its name; it tells the sender what it misses, what it has and what failed.
//!
//! The bytes live in a [`Store`] (the node's inbox on disk, or memory in tests): the
//! receiver writes each chunk at its offset, saves its [`ChunkMap`] beside the
//! partial file every few chunks, and asks the store to commit (rename, fsync by
//! policy) once the hash matches. A restarted site reopens its partial files with
//! their maps and asks only for what it lacks.
//!
//! Every cost is bounded: partial files at once (`max_partials`), the size of a file
//! (`max_file_bytes`), the transfers it remembers as done or failed, and the work per
//! chunk (the hash follows the chunks as they arrive in order; a chunk that fills a
//! gap reads at most [`HASH_READ_BACK`] held chunks back from the store, the rest at
//! completion).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::chunk_map::ChunkMap;
use crate::manifest::Manifest;
use crate::name::check_name;
use crate::wire::{FilesMessage, Offer, SiteState, Status, MAX_RANGES};

/// Where a site keeps the files it receives.
pub trait Store {
    /// Opens the partial file of a transfer, creating it if new; returns the chunk
    /// map saved beside it if there is one (a restarted site resumes from it).
    fn open(&mut self, m: &Manifest) -> std::io::Result<Option<ChunkMap>>;
    /// Writes `data` at `offset` of the transfer's partial file.
    fn write(&mut self, transfer: u64, offset: u64, data: &[u8]) -> std::io::Result<()>;
    /// Reads `buf.len()` bytes at `offset` of the transfer's partial file.
    fn read(&mut self, transfer: u64, offset: u64, buf: &mut [u8]) -> std::io::Result<()>;
    /// Saves the map beside the partial file (after the chunks it lists are written),
    /// with the manifest a restart resumes from.
    fn save_map(&mut self, m: &Manifest, map: &ChunkMap) -> std::io::Result<()>;
    /// The file is whole and its hash matches: make it visible under its name.
    /// `Ok(true)`: done and durable as the store's fsync policy says; `Ok(false)`:
    /// the store syncs it with others later and calls [`Receiver::handle_committed`].
    fn commit(&mut self, m: &Manifest) -> std::io::Result<bool>;
    /// Forgets a partial file.
    fn discard(&mut self, transfer: u64);
}

/// Held chunks read back to hash after a chunk fills a gap (the rest at completion).
pub const HASH_READ_BACK: u32 = 16;
/// Hash mismatches of one transfer before it fails (each one starts it again).
const MAX_MISMATCHES: u32 = 3;

/// A receiving site's settings.
#[derive(Debug, Clone)]
pub struct ReceiverConfig {
    /// This site's name (the node's name).
    pub site: String,
    /// The file services this site takes (and is entitled to).
    pub services: Vec<String>,
    /// Partial files at once; further offers wait (they are offered again).
    pub max_partials: usize,
    /// Largest file taken.
    pub max_file_bytes: u64,
    /// After a failure, how long before the site tries the file again.
    pub retry_after: Duration,
    /// How often the site says it takes its services.
    pub present_interval: Duration,
    /// A partial file not offered for this long is dropped.
    pub abandon_after: Duration,
    /// Transfers remembered as done (so an offer again is answered "done").
    pub remember: usize,
    /// Chunks between saves of a partial file's map, at least: a large file's map is
    /// saved every 1/64 of its chunks (each save writes the whole map, so the map
    /// bytes written per chunk stay bounded whatever the file's size).
    pub save_every: u32,
}

impl ReceiverConfig {
    /// A receiver with `cfg`, its clock at `now`.
    pub fn new(site: impl Into<String>, services: Vec<String>) -> Self {
        ReceiverConfig {
            site: site.into(),
            services,
            max_partials: 256,
            max_file_bytes: 64 << 30,
            retry_after: Duration::from_secs(30),
            present_interval: Duration::from_secs(1),
            abandon_after: Duration::from_secs(3600),
            remember: 100_000,
            save_every: 64,
        }
    }
}

/// Chunks between saves of the map of a file of `chunks` chunks: a save writes the
/// whole map (a bit per chunk), so at most 64 saves to a file, and then at least
/// `save_every` chunks apart.
fn save_interval(save_every: u32, chunks: u32) -> u32 {
    save_every.max(chunks / 64).max(1)
}

/// What a receiver reports to its driver (the audit log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiverEvent {
    /// A file is in the inbox, whole and checked.
    Arrived {
        /// The file.
        manifest: Manifest,
    },
    /// A file could not be taken (it is tried again when offered after `retry_after`).
    Failed {
        /// The file.
        manifest: Manifest,
        /// Why (empty when there is nothing to say).
        reason: String,
    },
    /// The sender gave the transfer up (or it was not offered for `abandon_after`);
    /// the partial file is gone.
    Cancelled {
        /// The file.
        manifest: Manifest,
        /// Why.
        reason: String,
    },
}

/// A receiver's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiverStats {
    /// Offers handled.
    pub offers: u64,
    /// Chunks handled.
    pub chunks: u64,
    /// Bytes handled.
    pub bytes: u64,
    /// Chunks already held.
    pub duplicate_chunks: u64,
    /// Chunks of transfers this site does not take (or not yet offered).
    pub unknown_chunks: u64,
    /// Chunks whose index or length does not fit their manifest.
    pub bad_chunks: u64,
    /// Offers left unanswered because `max_partials` were open.
    pub busy: u64,
    /// Files whose SHA-256 did not match (dropped).
    pub hash_mismatches: u64,
    /// Files that arrived whole.
    pub files: u64,
    /// Files that failed.
    pub failures: u64,
}

struct Incoming {
    m: Manifest,
    map: ChunkMap,
    /// Chunks `0..hashed` are in `hasher`.
    hashed: u32,
    hasher: Sha256,
    sent_through: u32,
    last_offer: Instant,
    since_save: u32,
    mismatches: u32,
    /// Waiting for the store's commit.
    committing: bool,
}

/// The receiving side of one site (see the module doc).
pub struct Receiver {
    cfg: ReceiverConfig,
    incoming: HashMap<u64, Incoming>,
    /// Done transfers, and the order they finished in (oldest forgotten first).
    done: HashSet<u64>,
    done_order: VecDeque<u64>,
    /// Failed transfers: until when they are refused, and why.
    failed: HashMap<u64, (Instant, String)>,
    /// The order they failed in, with their `until` (an entry whose `until` is not the
    /// map's any more was removed or failed again since): oldest forgotten first.
    failed_order: VecDeque<(u64, Instant)>,
    /// Transfers whose status is due (each once).
    due: VecDeque<u64>,
    due_set: HashSet<u64>,
    present_at: Instant,
    present_next: usize,
    events: VecDeque<ReceiverEvent>,
    buf: Vec<u8>,
    stats: ReceiverStats,
}

impl Receiver {
    /// A receiver with `cfg`, its clock at `now`.
    pub fn new(cfg: ReceiverConfig, now: Instant) -> Self {
        Receiver {
            cfg,
            incoming: HashMap::new(),
            done: HashSet::new(),
            done_order: VecDeque::new(),
            failed: HashMap::new(),
            failed_order: VecDeque::new(),
            due: VecDeque::new(),
            due_set: HashSet::new(),
            present_at: now,
            present_next: 0,
            events: VecDeque::new(),
            buf: Vec::new(),
            stats: ReceiverStats::default(),
        }
    }

    /// Its counters.
    pub fn stats(&self) -> ReceiverStats {
        self.stats
    }

    /// Files partly received.
    pub fn partials(&self) -> usize {
        self.incoming.len()
    }

    /// The service of a file partly received (one a previous run left included).
    pub fn partial_service(&self, transfer: u64) -> Option<&str> {
        self.incoming.get(&transfer).map(|i| i.m.service.as_str())
    }

    /// Transfers a previous run finished (from the audit log), so that offers of them
    /// are answered "done" rather than received again.
    pub fn remember_done(&mut self, transfers: impl IntoIterator<Item = u64>) {
        for t in transfers {
            self.mark_done(t);
        }
    }

    fn mark_done(&mut self, transfer: u64) {
        if self.done.insert(transfer) {
            self.done_order.push_back(transfer);
            while self.done_order.len() > self.cfg.remember {
                if let Some(old) = self.done_order.pop_front() {
                    self.done.remove(&old);
                }
            }
        }
    }

    /// What happened.
    pub fn poll_event(&mut self) -> Option<ReceiverEvent> {
        self.events.pop_front()
    }

    fn status_due(&mut self, transfer: u64) {
        if self.due_set.insert(transfer) {
            self.due.push_back(transfer);
        }
    }

    /// A message from a sender (statuses and presences of other sites are ignored).
    pub fn handle(&mut self, msg: &FilesMessage, now: Instant, store: &mut dyn Store) {
        match msg {
            FilesMessage::Offer(o) => self.handle_offer(o, now, store),
            FilesMessage::Chunk {
                transfer,
                index,
                data,
            } => self.handle_chunk(*transfer, *index, data, now, store),
            FilesMessage::Cancel { transfer, reason } => {
                self.failed.remove(transfer);
                if let Some(inc) = self.incoming.remove(transfer) {
                    store.discard(*transfer);
                    self.events.push_back(ReceiverEvent::Cancelled {
                        manifest: inc.m,
                        reason: format!("cancelled by its sender: {reason}"),
                    });
                }
            }
            // Other sites' messages, and those between clients and nodes.
            _ => {}
        }
    }

    fn handle_offer(&mut self, o: &Offer, now: Instant, store: &mut dyn Store) {
        // A node that sends and receives hears its own offers on the backbone.
        if !self.cfg.services.iter().any(|s| s == o.service) || o.sender == self.cfg.site {
            return;
        }
        let m = Manifest::from_offer(o);
        if !m.is_for(&self.cfg.site) {
            return;
        }
        self.stats.offers += 1;
        if self.done.contains(&o.transfer) {
            self.status_due(o.transfer);
            return;
        }
        if let Some((until, _)) = self.failed.get(&o.transfer) {
            if now < *until {
                self.status_due(o.transfer);
                return;
            }
            self.failed.remove(&o.transfer);
        }
        if let Some(inc) = self.incoming.get_mut(&o.transfer) {
            if inc.m != m {
                // The same id with another manifest: junk or a forged offer.
                return;
            }
            inc.sent_through = inc.sent_through.max(o.sent_through);
            inc.last_offer = now;
            // A whole file waiting for its commit needs no map (its commit is a
            // moment away): saving one would create two files for nothing.
            // Saved after a pass too, when an eighth of a save's worth has come since.
            let interval = save_interval(self.cfg.save_every, inc.map.chunks());
            if inc.since_save > 0 && inc.since_save >= interval / 8 && !inc.committing {
                inc.since_save = 0;
                if let Err(e) = store.save_map(&inc.m, &inc.map) {
                    self.fail(
                        o.transfer,
                        format!("cannot save the chunk map: {e}"),
                        now,
                        store,
                    );
                    return;
                }
            }
            self.status_due(o.transfer);
            return;
        }
        self.start(m, o.sent_through, now, store);
    }

    /// Reopens a partial file a previous run of this site left (its manifest kept by
    /// the driver beside it), so chunks that arrive before the next offer are taken.
    pub fn resume(&mut self, m: Manifest, now: Instant, store: &mut dyn Store) {
        if self.incoming.contains_key(&m.transfer) {
            return;
        }
        let transfer = m.transfer;
        if self.done.contains(&transfer) {
            // Arrived before a crash that left its map and manifest behind: they go.
            store.discard(transfer);
            return;
        }
        self.start(m, 0, now, store);
        // Refused now (its name, or a size over a limit lowered since): what it left
        // on the disk goes.
        if !self.incoming.contains_key(&transfer) && self.failed.contains_key(&transfer) {
            store.discard(transfer);
        }
    }

    fn start(&mut self, m: Manifest, sent_through: u32, now: Instant, store: &mut dyn Store) {
        if let Err(e) = check_name(&m.name) {
            let reason = format!("file name {:?} refused: {e}", m.name);
            self.refuse(m, reason, now);
            return;
        }
        if m.size > self.cfg.max_file_bytes {
            let reason = format!(
                "a file of {} bytes is larger than this site's max_file_bytes ({})",
                m.size, self.cfg.max_file_bytes
            );
            self.refuse(m, reason, now);
            return;
        }
        if self.incoming.len() >= self.cfg.max_partials {
            self.stats.busy += 1;
            return;
        }
        let chunks = m.chunks();
        let map = match store.open(&m) {
            Ok(saved) => saved
                .filter(|s| s.chunks() == chunks)
                .unwrap_or_else(|| ChunkMap::new(chunks)),
            Err(e) => {
                self.refuse(m, format!("cannot open the partial file: {e}"), now);
                return;
            }
        };
        let transfer = m.transfer;
        self.incoming.insert(
            transfer,
            Incoming {
                m,
                map,
                hashed: 0,
                hasher: Sha256::new(),
                sent_through,
                last_offer: now,
                since_save: 0,
                mismatches: 0,
                committing: false,
            },
        );
        if self.incoming[&transfer].map.is_complete() {
            self.complete(transfer, now, store);
        }
        self.status_due(transfer);
    }

    fn handle_chunk(
        &mut self,
        transfer: u64,
        index: u32,
        data: &[u8],
        now: Instant,
        store: &mut dyn Store,
    ) {
        let Some(inc) = self.incoming.get_mut(&transfer) else {
            self.stats.unknown_chunks += 1;
            return;
        };
        if index >= inc.map.chunks() || data.len() != inc.m.chunk_len(index) {
            self.stats.bad_chunks += 1;
            return;
        }
        if inc.map.has(index) || inc.committing {
            self.stats.duplicate_chunks += 1;
            return;
        }
        if let Err(e) = store.write(transfer, inc.m.offset(index), data) {
            self.fail(transfer, format!("cannot write: {e}"), now, store);
            return;
        }
        inc.map.insert(index);
        self.stats.chunks += 1;
        self.stats.bytes += data.len() as u64;
        inc.since_save += 1;
        if index == inc.hashed {
            inc.hasher.update(data);
            inc.hashed += 1;
        }
        if let Err(e) = Self::hash_held(inc, HASH_READ_BACK, &mut self.buf, store) {
            self.fail(transfer, format!("cannot read back: {e}"), now, store);
            return;
        }
        if inc.map.is_complete() {
            self.complete(transfer, now, store);
            self.status_due(transfer);
        } else if inc.since_save >= save_interval(self.cfg.save_every, inc.map.chunks()) {
            inc.since_save = 0;
            if let Err(e) = store.save_map(&inc.m, &inc.map) {
                self.fail(
                    transfer,
                    format!("cannot save the chunk map: {e}"),
                    now,
                    store,
                );
            }
        }
    }

    /// Hashes up to `max` held chunks past the hashed prefix, reading them back.
    fn hash_held(
        inc: &mut Incoming,
        max: u32,
        buf: &mut Vec<u8>,
        store: &mut dyn Store,
    ) -> std::io::Result<()> {
        let mut n = 0;
        while n < max && inc.hashed < inc.map.chunks() && inc.map.has(inc.hashed) {
            buf.resize(inc.m.chunk_len(inc.hashed), 0);
            store.read(inc.m.transfer, inc.m.offset(inc.hashed), buf)?;
            inc.hasher.update(&buf[..]);
            inc.hashed += 1;
            n += 1;
        }
        Ok(())
    }

    /// Every chunk is held: check the hash, then commit.
    fn complete(&mut self, transfer: u64, now: Instant, store: &mut dyn Store) {
        let inc = self.incoming.get_mut(&transfer).expect("incoming");
        if let Err(e) = Self::hash_held(inc, u32::MAX, &mut self.buf, store) {
            self.fail(transfer, format!("cannot read back: {e}"), now, store);
            return;
        }
        let digest: [u8; 32] = std::mem::take(&mut inc.hasher).finalize().into();
        if digest != inc.m.sha256 {
            self.stats.hash_mismatches += 1;
            inc.mismatches += 1;
            if inc.mismatches >= MAX_MISMATCHES {
                let reason = format!("the received bytes' SHA-256 differs from the manifest's {MAX_MISMATCHES} times");
                self.fail(transfer, reason, now, store);
                return;
            }
            // Start again from nothing: which chunk is wrong cannot be known.
            store.discard(transfer);
            let reopened = store.open(&inc.m);
            inc.map = ChunkMap::new(inc.map.chunks());
            inc.hashed = 0;
            if let Err(e) = reopened {
                self.fail(
                    transfer,
                    format!("cannot open the partial file: {e}"),
                    now,
                    store,
                );
            }
            return;
        }
        match store.commit(&inc.m) {
            Ok(true) => self.arrived(transfer),
            Ok(false) => inc.committing = true,
            Err(e) => self.fail(transfer, format!("cannot commit: {e}"), now, store),
        }
    }

    /// The store finished a commit it had deferred (`Store::commit` gave `Ok(false)`).
    pub fn handle_committed(
        &mut self,
        transfer: u64,
        result: std::io::Result<()>,
        now: Instant,
        store: &mut dyn Store,
    ) {
        if !self.incoming.get(&transfer).is_some_and(|i| i.committing) {
            return;
        }
        match result {
            Ok(()) => self.arrived(transfer),
            Err(e) => self.fail(transfer, format!("cannot commit: {e}"), now, store),
        }
        self.status_due(transfer);
    }

    fn arrived(&mut self, transfer: u64) {
        let inc = self.incoming.remove(&transfer).expect("incoming");
        self.mark_done(transfer);
        self.stats.files += 1;
        self.events
            .push_back(ReceiverEvent::Arrived { manifest: inc.m });
    }

    fn fail(&mut self, transfer: u64, reason: String, now: Instant, store: &mut dyn Store) {
        if let Some(inc) = self.incoming.remove(&transfer) {
            store.discard(transfer);
            self.refuse(inc.m, reason, now);
        }
    }

    fn refuse(&mut self, m: Manifest, reason: String, now: Instant) {
        self.stats.failures += 1;
        // Bounded like the done set: the oldest failure is forgotten first.
        while self.failed.len() >= self.cfg.remember.max(1) {
            let Some((old, until)) = self.failed_order.pop_front() else {
                break;
            };
            if self.failed.get(&old).is_some_and(|(u, _)| *u == until) {
                self.failed.remove(&old);
            }
        }
        let until = now + self.cfg.retry_after;
        self.failed.insert(m.transfer, (until, reason.clone()));
        self.failed_order.push_back((m.transfer, until));
        self.status_due(m.transfer);
        self.events.push_back(ReceiverEvent::Failed {
            manifest: m,
            reason,
        });
    }

    /// Its deadlines passed by `now` (statuses due, partial files expired).
    pub fn handle_timeout(&mut self, now: Instant, store: &mut dyn Store) {
        let abandon = self.cfg.abandon_after;
        let stale: Vec<u64> = self
            .incoming
            .iter()
            .filter(|(_, i)| {
                !i.committing && now.saturating_duration_since(i.last_offer) >= abandon
            })
            .map(|(t, _)| *t)
            .collect();
        for t in stale {
            let Some(inc) = self.incoming.remove(&t) else {
                continue;
            };
            store.discard(t);
            self.events.push_back(ReceiverEvent::Cancelled {
                manifest: inc.m,
                reason: "not offered for abandon_after".into(),
            });
        }
        self.failed.retain(|_, (until, _)| *until + abandon > now);
        let failed = &self.failed;
        self.failed_order
            .retain(|(t, until)| failed.get(t).is_some_and(|(u, _)| u == until));
    }

    /// When `handle_timeout` is next needed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        Some(self.present_at)
    }

    /// Writes the next message to send into `out` (cleared first): a presence when
    /// due, else a due status. False when there is none.
    pub fn poll_transmit(&mut self, now: Instant, out: &mut Vec<u8>) -> bool {
        out.clear();
        if now >= self.present_at && !self.cfg.services.is_empty() {
            let service = &self.cfg.services[self.present_next % self.cfg.services.len()];
            FilesMessage::Present {
                site: &self.cfg.site,
                service,
            }
            .encode(out)
            .expect("configured names encode");
            self.present_next += 1;
            if self.present_next.is_multiple_of(self.cfg.services.len()) {
                self.present_at = now + self.cfg.present_interval;
            }
            return true;
        }
        while let Some(transfer) = self.due.pop_front() {
            self.due_set.remove(&transfer);
            let status = if let Some(inc) = self.incoming.get(&transfer) {
                Status {
                    transfer,
                    site: &self.cfg.site,
                    state: SiteState::Receiving,
                    have: inc.map.held(),
                    missing: inc.map.missing(inc.sent_through, MAX_RANGES),
                    reason: "",
                }
            } else if self.done.contains(&transfer) {
                Status {
                    transfer,
                    site: &self.cfg.site,
                    state: SiteState::Done,
                    have: 0,
                    missing: Vec::new(),
                    reason: "",
                }
            } else if let Some((_, reason)) = self.failed.get(&transfer) {
                Status {
                    transfer,
                    site: &self.cfg.site,
                    state: SiteState::Failed,
                    have: 0,
                    missing: Vec::new(),
                    reason,
                }
            } else {
                continue;
            };
            FilesMessage::Status(status)
                .encode(out)
                .expect("a status encodes");
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store that keeps nothing, counts the bytes of the chunk maps it is asked to
    /// save and notes the transfers it is told to discard.
    #[derive(Default)]
    struct MapBytes(u64, Vec<u64>);

    impl Store for MapBytes {
        fn open(&mut self, _: &Manifest) -> std::io::Result<Option<ChunkMap>> {
            Ok(None)
        }
        fn write(&mut self, _: u64, _: u64, _: &[u8]) -> std::io::Result<()> {
            Ok(())
        }
        fn read(&mut self, _: u64, _: u64, buf: &mut [u8]) -> std::io::Result<()> {
            buf.fill(0);
            Ok(())
        }
        fn save_map(&mut self, _: &Manifest, map: &ChunkMap) -> std::io::Result<()> {
            self.0 += map.to_bytes().len() as u64;
            Ok(())
        }
        fn commit(&mut self, _: &Manifest) -> std::io::Result<bool> {
            Ok(true)
        }
        fn discard(&mut self, transfer: u64) {
            self.1.push(transfer);
        }
    }

    /// Map bytes saved per chunk received, for a file of `chunks` chunks of 1 KiB (the
    /// smallest chunk a sender may use); every chunk but the first arrives (so nothing is
    /// hashed and the file never completes).
    fn map_bytes_per_chunk(chunks: u32) -> u64 {
        let now = Instant::now();
        let mut rx = Receiver::new(ReceiverConfig::new("site", vec!["FILES".into()]), now);
        let mut store = MapBytes::default();
        let offer = Offer {
            transfer: 1,
            sender: "src",
            service: "FILES",
            name: "big.bin",
            size: u64::from(chunks) * 1024,
            chunk_size: 1024,
            sha256: [0; 32],
            sent_through: 0,
            expires_ms: 0,
            open: true,
            targets: vec![],
        };
        rx.handle(&FilesMessage::Offer(offer), now, &mut store);
        let data = [7u8; 1024];
        for index in 1..chunks {
            let chunk = FilesMessage::Chunk {
                transfer: 1,
                index,
                data: &data,
            };
            rx.handle(&chunk, now, &mut store);
        }
        assert_eq!(rx.stats().chunks, u64::from(chunks - 1));
        store.0 / u64::from(chunks - 1)
    }

    /// A transfer that arrived before a crash which left its map and manifest behind is
    /// not resumed: they are discarded.
    #[test]
    fn what_an_arrived_file_left_behind_is_discarded_on_resume() {
        let now = Instant::now();
        let mut rx = Receiver::new(ReceiverConfig::new("site", vec!["FILES".into()]), now);
        rx.remember_done([7]);
        let mut store = MapBytes::default();
        rx.resume(Manifest::sample(7, "eod.csv", 3), now, &mut store);
        assert_eq!(store.1, vec![7]);
        assert_eq!(rx.partials(), 0);
    }

    /// Each save writes the whole map (a bit per chunk): saved every `save_every`
    /// chunks whatever the size, a 64 GiB file of 1 KiB chunks would write terabytes
    /// of maps. The map bytes written per chunk do not grow with the file.
    #[test]
    fn map_bytes_written_per_chunk_do_not_grow_with_the_file() {
        let small = map_bytes_per_chunk(4096);
        let large = map_bytes_per_chunk(65_536);
        assert!(
            large <= 2 * small.max(1),
            "map bytes per chunk: {small} for 4 MiB, {large} for 64 MiB"
        );
    }

    #[test]
    fn the_oldest_failures_are_forgotten_first_and_one_failed_again_counts_as_new() {
        let now = Instant::now();
        let mut cfg = ReceiverConfig::new("site", vec!["FILES".into()]);
        cfg.remember = 3;
        let mut rx = Receiver::new(cfg, now);
        let m = |transfer| Manifest {
            transfer,
            sender: "src".into(),
            service: "FILES".into(),
            name: "f".into(),
            size: 1,
            chunk_size: 1024,
            sha256: [0; 32],
            expires_ms: 0,
            open: false,
            targets: vec![],
        };
        let t = |s: u64| now + Duration::from_millis(s);
        for (i, transfer) in [1, 2, 3, 1, 4, 5].into_iter().enumerate() {
            rx.refuse(m(transfer), "no".into(), t(i as u64));
        }
        let mut kept: Vec<u64> = rx.failed.keys().copied().collect();
        kept.sort();
        assert_eq!(kept, [1, 4, 5], "1 failed again after 2 and 3");
    }
}
