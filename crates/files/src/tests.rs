//! A sender and its sites joined in memory on one fake clock: every message goes
//! through the wire encoder and decoder, may be lost (a seeded generator), and the
//! file bytes live in memory stores. Loss, restarts, full disks, absent sites and
//! hostile offers run here in milliseconds.

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::wire::{encode_chunk, FilesMessage, Offer};
use crate::*;

const SERVICE: &str = "FILES";

/// A transfer's sites as a driver would persist them.
type SavedSites = Vec<(String, Delivery, String)>;
/// What a file for every site knows of newer ones (`Sender::replaced_at`).
type SavedReplacedAt = Option<(u64, Vec<String>)>;

#[derive(Default)]
struct MemSpool(HashMap<u64, Vec<u8>>);

impl ChunkSource for MemSpool {
    fn read_chunk(&mut self, transfer: u64, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let file = self
            .0
            .get(&transfer)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "not in the spool"))?;
        let at = offset as usize;
        buf.copy_from_slice(&file[at..at + buf.len()]);
        Ok(())
    }
}

#[derive(Default)]
struct MemStore {
    partial: HashMap<u64, Vec<u8>>,
    maps: HashMap<u64, ChunkMap>,
    /// What a disk store keeps beside each partial file.
    manifests: HashMap<u64, Manifest>,
    inbox: BTreeMap<String, Vec<u8>>,
    /// Writes fail as on a full disk.
    full: bool,
    /// Commits are synced later (fsync `batch`).
    defer: bool,
    deferred: Vec<Manifest>,
}

impl Store for MemStore {
    fn open(&mut self, m: &Manifest) -> io::Result<Option<ChunkMap>> {
        self.partial
            .entry(m.transfer)
            .or_insert_with(|| vec![0; m.size as usize]);
        self.manifests.insert(m.transfer, m.clone());
        Ok(self.maps.get(&m.transfer).cloned())
    }
    fn write(&mut self, transfer: u64, offset: u64, data: &[u8]) -> io::Result<()> {
        if self.full {
            return Err(io::Error::from_raw_os_error(28)); // ENOSPC
        }
        let file = self.partial.get_mut(&transfer).expect("opened");
        file[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn read(&mut self, transfer: u64, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let file = &self.partial[&transfer];
        buf.copy_from_slice(&file[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn save_map(&mut self, m: &Manifest, map: &ChunkMap) -> io::Result<()> {
        self.maps.insert(m.transfer, map.clone());
        Ok(())
    }
    fn commit(&mut self, m: &Manifest) -> io::Result<bool> {
        if self.defer {
            self.deferred.push(m.clone());
            return Ok(false);
        }
        let bytes = self.partial.remove(&m.transfer).expect("opened");
        self.maps.remove(&m.transfer);
        self.manifests.remove(&m.transfer);
        self.inbox.insert(m.name.clone(), bytes);
        Ok(true)
    }
    fn discard(&mut self, transfer: u64) {
        self.partial.remove(&transfer);
        self.maps.remove(&transfer);
        self.manifests.remove(&transfer);
    }
}

struct Site {
    rx: Receiver,
    store: MemStore,
    up: bool,
    events: Vec<ReceiverEvent>,
}

/// A deterministic generator (xorshift), so a lossy run is the same every time.
struct Loss {
    state: u64,
    per_mille: u64,
}

impl Loss {
    fn drop(&mut self) -> bool {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state % 1000 < self.per_mille
    }
}

struct Net {
    t0: Instant,
    now: Instant,
    tx: Sender,
    spool: MemSpool,
    sites: Vec<Site>,
    loss: Loss,
    events: Vec<SenderEvent>,
    /// Chunk messages each site was handed (after loss).
    chunks_to: Vec<u64>,
    buf: Vec<u8>,
}

fn sender_config() -> SenderConfig {
    let mut cfg = SenderConfig::new("src");
    cfg.chunk_size = 1024;
    cfg.rate = 20_000_000;
    cfg
}

/// A sender slow enough that a test can stop it halfway through a file.
fn slow_sender_config() -> SenderConfig {
    let mut cfg = sender_config();
    cfg.rate = 1_000_000;
    cfg.burst = 16 * 1024;
    cfg
}

fn site_name(i: usize) -> String {
    format!("site-{i}")
}

impl Net {
    fn new(sites: usize, cfg: SenderConfig) -> Self {
        let t0 = Instant::now();
        Net {
            t0,
            now: t0,
            tx: Sender::new(cfg, t0),
            spool: MemSpool::default(),
            sites: (0..sites)
                .map(|i| Site {
                    rx: Receiver::new(ReceiverConfig::new(site_name(i), vec![SERVICE.into()]), t0),
                    store: MemStore::default(),
                    up: true,
                    events: Vec::new(),
                })
                .collect(),
            loss: Loss {
                state: 0x9E37_79B9_7F4A_7C15,
                per_mille: 0,
            },
            events: Vec::new(),
            chunks_to: vec![0; sites],
            buf: Vec::new(),
        }
    }

    /// Queues `bytes` as `name`; returns the transfer id.
    fn send(
        &mut self,
        id: u64,
        name: &str,
        bytes: Vec<u8>,
        to: Option<Vec<String>>,
    ) -> Result<u64, QueueError> {
        let file = NewFile {
            transfer: id,
            service: SERVICE.into(),
            name: name.into(),
            size: bytes.len() as u64,
            sha256: Sha256::digest(&bytes).into(),
            to,
            expires_ms: 0,
        };
        let queued = self.tx.enqueue(file, self.now)?;
        self.spool.0.insert(id, bytes);
        Ok(queued)
    }

    /// Delivers one message from the sender to every site that is up.
    fn deliver(&mut self, bytes: &[u8]) {
        let msg = FilesMessage::decode(bytes).expect("the sender's messages decode");
        for (i, site) in self.sites.iter_mut().enumerate() {
            if !site.up || self.loss.drop() {
                continue;
            }
            if matches!(msg, FilesMessage::Chunk { .. }) {
                self.chunks_to[i] += 1;
            }
            site.rx.handle(&msg, self.now, &mut site.store);
        }
    }

    /// One turn: the sender sends what it may, every site answers.
    fn turn(&mut self) {
        self.tx.handle_timeout(self.now);
        let mut out = std::mem::take(&mut self.buf);
        while self.tx.poll_transmit(self.now, &mut self.spool, &mut out) {
            self.deliver(&out);
        }
        for site in &mut self.sites {
            if !site.up {
                continue;
            }
            site.rx.handle_timeout(self.now, &mut site.store);
            while site.rx.poll_transmit(self.now, &mut out) {
                if self.loss.drop() {
                    continue;
                }
                match FilesMessage::decode(&out).expect("a site's messages decode") {
                    FilesMessage::Status(s) => self.tx.handle_status(&s, self.now),
                    FilesMessage::Present { site, service } => {
                        self.tx.handle_present(site, service, self.now)
                    }
                    other => panic!("a site sent {other:?}"),
                }
            }
            while let Some(e) = site.rx.poll_event() {
                site.events.push(e);
            }
        }
        while let Some(e) = self.tx.poll_event() {
            self.events.push(e);
        }
        self.buf = out;
    }

    /// Turns until `done` holds, moving the clock to the next deadline (at least
    /// 100 µs); panics after `limit` of simulated time.
    fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&Net) -> bool) {
        let end = self.now + limit;
        loop {
            self.turn();
            if done(self) {
                return;
            }
            assert!(self.now < end, "not done after {limit:?} of simulated time");
            let mut next = self.tx.poll_timeout().unwrap_or(end);
            for s in &self.sites {
                if let Some(t) = s.rx.poll_timeout() {
                    next = next.min(t);
                }
            }
            self.now = next.max(self.now + Duration::from_micros(100)).min(end);
        }
    }

    /// Site `i` restarts: a new receiver over the same store, its partial files
    /// reopened.
    fn restart_site(&mut self, i: usize) {
        let site = &mut self.sites[i];
        site.rx = Receiver::new(
            ReceiverConfig::new(site_name(i), vec![SERVICE.into()]),
            self.now,
        );
        for m in site.store.manifests.values().cloned().collect::<Vec<_>>() {
            site.rx.resume(m, self.now, &mut site.store);
        }
    }

    fn run_for(&mut self, d: Duration) {
        let end = self.now + d;
        self.run_until(d + Duration::from_secs(1), |n| n.now >= end);
    }

    fn finished(&self, id: u64) -> Option<bool> {
        self.events.iter().find_map(|e| match e {
            SenderEvent::Finished {
                transfer,
                delivered,
            } if *transfer == id => Some(*delivered),
            _ => None,
        })
    }

    fn all_finished(&self, ids: &[u64]) -> bool {
        ids.iter().all(|id| self.finished(*id).is_some())
    }

    /// Queues `count` files of `size` bytes for the first `sites` sites, as transfers
    /// `first`, `first + 1`, ... named `{prefix}0`, `{prefix}1`, ... (file i's bytes
    /// seeded with i): their transfer ids. How the tests that fill a window queue files.
    fn send_many(
        &mut self,
        count: u64,
        first: u64,
        prefix: &str,
        size: usize,
        sites: usize,
    ) -> Vec<u64> {
        (0..count)
            .map(|i| {
                let name = format!("{prefix}{i}");
                self.send(first + i, &name, bytes(size, i as u8), targets(sites))
                    .unwrap()
            })
            .collect()
    }
}

/// One site with room for `max_partials` partial files, and a sender with a window of
/// `window`: the set-up of the tests of a site's room against the sender's window.
fn one_site_with_partials(window: usize, max_partials: usize) -> Net {
    let mut cfg = sender_config();
    cfg.window = window;
    let mut net = Net::new(1, cfg);
    let mut rc = ReceiverConfig::new(site_name(0), vec![SERVICE.into()]);
    rc.max_partials = max_partials;
    net.sites[0].rx = Receiver::new(rc, net.now);
    net
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn targets(n: usize) -> Option<Vec<String>> {
    Some((0..n).map(site_name).collect())
}

#[test]
fn one_file_reaches_three_sites_byte_for_byte_in_one_pass() {
    let mut net = Net::new(3, sender_config());
    let file = bytes(100_000, 1);
    let id = net
        .send(7, "eod/2026-11-25.csv", file.clone(), targets(3))
        .unwrap();
    net.run_until(Duration::from_secs(10), |n| n.finished(id).is_some());
    assert_eq!(net.finished(id), Some(true));
    for site in &net.sites {
        assert_eq!(site.store.inbox.get("eod/2026-11-25.csv"), Some(&file));
        assert!(site.store.partial.is_empty() && site.store.maps.is_empty());
        assert!(
            matches!(&site.events[..], [ReceiverEvent::Arrived { manifest }] if manifest.transfer == id)
        );
    }
    // One stream for every site: each chunk sent once, no repair.
    let stats = net.tx.stats();
    assert_eq!((stats.chunks, stats.repairs), (98, 0));
    assert_eq!(net.chunks_to, vec![98, 98, 98]);
    // Each site went sending, then done.
    for i in 0..3 {
        let states: Vec<Delivery> = net
            .events
            .iter()
            .filter_map(|e| match e {
                SenderEvent::Site { site, state, .. } if *site == site_name(i) => Some(*state),
                _ => None,
            })
            .collect();
        assert_eq!(states, vec![Delivery::Sending, Delivery::Done]);
    }
    assert_eq!((net.tx.queued_files(), net.tx.queued_bytes()), (0, 0));
}

#[test]
fn five_percent_loss_both_ways_is_repaired_and_every_file_is_whole() {
    let mut net = Net::new(3, sender_config());
    net.loss.per_mille = 50;
    let mut files = Vec::new();
    for i in 0..20u64 {
        let len = [0, 1, 1023, 1024, 1025, 50_000][i as usize % 6] + i as usize * 7;
        let data = bytes(len, i as u8);
        let name = format!("batch/f{i}.dat");
        let id = net.send(100 + i, &name, data.clone(), targets(3)).unwrap();
        files.push((id, name, data));
    }
    let ids: Vec<u64> = files.iter().map(|f| f.0).collect();
    net.run_until(Duration::from_secs(60), |n| n.all_finished(&ids));
    for (id, name, data) in &files {
        assert_eq!(net.finished(*id), Some(true), "{name}");
        for site in &net.sites {
            assert_eq!(site.store.inbox.get(name), Some(data), "{name}");
        }
    }
    assert!(net.tx.stats().repairs > 0, "5% loss needs repairs");
}

#[test]
fn a_site_that_restarts_mid_file_asks_only_for_what_it_lacks() {
    let mut net = Net::new(2, slow_sender_config());
    let file = bytes(400 * 1024, 3);
    let id = net.send(9, "big.bin", file.clone(), targets(2)).unwrap();
    // Until site 1 holds about half the chunks (a map save every 64 chunks).
    net.run_until(Duration::from_secs(10), |n| n.chunks_to[1] >= 200);
    net.sites[1].up = false;
    let saved = net.sites[1]
        .store
        .maps
        .get(&id)
        .map(|m| m.held())
        .expect("a map was saved");
    assert!(saved >= 128, "saved map holds {saved}");
    net.restart_site(1);
    assert_eq!(net.sites[1].rx.partials(), 1);
    let before = net.chunks_to[1];
    net.sites[1].up = true;
    net.run_until(Duration::from_secs(30), |n| n.finished(id).is_some());
    assert_eq!(net.finished(id), Some(true));
    assert_eq!(net.sites[1].store.inbox.get("big.bin"), Some(&file));
    let after_restart = net.chunks_to[1] - before;
    // It may see the rest of the first pass and the repairs of what the map did not
    // hold yet, never the whole file again.
    assert!(
        after_restart <= 400 - u64::from(saved),
        "{after_restart} chunks after the restart, {saved} saved"
    );
}

#[test]
fn a_sender_that_restarts_continues_its_queue() {
    let mut net = Net::new(2, slow_sender_config());
    let a = bytes(300_000, 4);
    let b = bytes(5_000, 5);
    let ia = net.send(1, "a.bin", a.clone(), targets(2)).unwrap();
    let ib = net.send(2, "b.bin", b.clone(), targets(2)).unwrap();
    net.run_until(Duration::from_secs(10), |n| n.chunks_to[0] >= 100);
    assert_eq!(net.restart_sender(slow_sender_config()), 2);
    let before = net.chunks_to.clone();
    net.run_until(Duration::from_secs(30), |n| n.all_finished(&[ia, ib]));
    for site in &net.sites {
        assert_eq!(site.store.inbox.get("a.bin"), Some(&a));
        assert_eq!(site.store.inbox.get("b.bin"), Some(&b));
    }
    // The sites' chunks of a.bin are not sent again: only what they missed.
    let a_chunks = 300_000u64.div_ceil(u64::from(slow_sender_config().chunk_size));
    let b_chunks = 5_000u64.div_ceil(u64::from(slow_sender_config().chunk_size));
    for (i, had) in before.iter().enumerate() {
        let again = net.chunks_to[i] - had;
        assert!(
            again <= a_chunks + b_chunks - had.min(&a_chunks),
            "site {i}: {again} chunks after the restart, {had} before"
        );
    }
}

/// A transfer restored with every target done (the line saying it was over was lost)
/// finishes at once, delivered: it neither waits for its expiry nor is recorded as
/// undelivered.
#[test]
fn a_restored_transfer_every_target_has_finishes_delivered() {
    let now = Instant::now();
    let mut tx = Sender::new(sender_config(), now);
    let mut m = Manifest::sample(5, "eod.csv", 3);
    m.targets = vec!["site-0".into(), "site-1".into()];
    m.chunk_size = 16 * 1024;
    let sites = ["site-0", "site-1"].map(|s| (s.to_string(), Delivery::Done, String::new()));
    tx.restore(m, sites, now + Duration::from_secs(3600), now);
    assert!(tx.transfer(5).is_none());
    let finished: Vec<SenderEvent> = std::iter::from_fn(|| tx.poll_event()).collect();
    assert!(
        finished.iter().any(|e| matches!(
            e,
            SenderEvent::Finished {
                transfer: 5,
                delivered: true
            }
        )),
        "{finished:?}"
    );
}

#[test]
fn a_full_disk_at_one_site_fails_there_only_and_the_site_tries_again_later() {
    let mut net = Net::new(3, sender_config());
    net.sites[2].store.full = true;
    let file = bytes(20_000, 6);
    let id = net
        .send(11, "refdata.csv", file.clone(), targets(3))
        .unwrap();
    net.run_until(Duration::from_secs(10), |n| {
        n.sites[0].store.inbox.contains_key("refdata.csv")
            && n.sites[1].store.inbox.contains_key("refdata.csv")
            && n.tx
                .transfer(id)
                .is_some_and(|(_, s)| s["site-2"].state == Delivery::Failed)
    });
    let (_, sites) = net.tx.transfer(id).unwrap();
    assert_eq!(sites["site-0"].state, Delivery::Done);
    assert!(
        sites["site-2"].reason.contains("No space left on device"),
        "{:?}",
        sites["site-2"].reason
    );
    assert!(
        net.sites[2].store.partial.is_empty(),
        "nothing half-written stays"
    );
    assert_eq!(net.finished(id), None, "it waits for site-2");
    // Space is freed; after its retry time the site takes the file when offered.
    net.sites[2].store.full = false;
    net.run_until(Duration::from_secs(120), |n| n.finished(id).is_some());
    assert_eq!(net.finished(id), Some(true));
    assert_eq!(net.sites[2].store.inbox.get("refdata.csv"), Some(&file));
}

#[test]
fn names_that_escape_the_inbox_are_refused_by_the_sender_and_by_every_site() {
    let mut net = Net::new(1, sender_config());
    for bad in ["../etc/passwd", "/etc/passwd", "a/../../b", "a\\b", ""] {
        let err = net.send(1, bad, vec![1, 2, 3], targets(1)).unwrap_err();
        assert!(matches!(err, QueueError::BadName { .. }), "{bad:?}: {err}");
    }
    // A hostile sender skips the check: the site refuses, writes nothing, says why.
    let offer = Offer {
        transfer: 66,
        sender: "evil",
        service: SERVICE,
        name: "../../home/user/.bashrc",
        size: 3,
        chunk_size: 1024,
        sha256: Sha256::digest([1, 2, 3]).into(),
        sent_through: 1,
        expires_ms: 0,
        open: true,
        targets: vec![],
    };
    let site = &mut net.sites[0];
    site.rx
        .handle(&FilesMessage::Offer(offer), net.now, &mut site.store);
    let mut chunk = Vec::new();
    encode_chunk(&mut chunk, 66, 0, &[1, 2, 3]).unwrap();
    site.rx.handle(
        &FilesMessage::decode(&chunk).unwrap(),
        net.now,
        &mut site.store,
    );
    assert!(site.store.partial.is_empty() && site.store.inbox.is_empty());
    let mut out = Vec::new();
    let mut statuses = Vec::new();
    while site.rx.poll_transmit(net.now, &mut out) {
        if let FilesMessage::Status(s) = FilesMessage::decode(&out).unwrap() {
            statuses.push((s.state, s.reason.to_owned()));
        }
    }
    assert_eq!(statuses.len(), 1);
    assert_eq!(statuses[0].0, wire::SiteState::Failed);
    assert!(
        statuses[0].1.contains("escape the inbox"),
        "{}",
        statuses[0].1
    );
    assert_eq!(site.rx.stats().unknown_chunks, 1);
}

#[test]
fn a_full_queue_refuses_a_file_at_once() {
    let mut cfg = sender_config();
    cfg.max_files = 2;
    cfg.max_bytes = 10_000;
    let mut net = Net::new(1, cfg);
    net.send(1, "a", bytes(10, 0), targets(1)).unwrap();
    assert!(matches!(
        net.send(2, "b", bytes(9_991, 0), targets(1)),
        Err(QueueError::TooManyBytes { .. })
    ));
    net.send(3, "c", bytes(10, 0), targets(1)).unwrap();
    let err = net.send(4, "d", bytes(10, 0), targets(1)).unwrap_err();
    assert_eq!(err, QueueError::TooManyFiles { files: 2, max: 2 });
    assert_eq!(
        err.to_string(),
        "the send queue is full: 2 files queued, the limit is 2"
    );
    assert_eq!(
        net.send(1, "e", bytes(1, 0), targets(1)).unwrap_err(),
        QueueError::TooManyFiles { files: 2, max: 2 }
    );
    // Delivered files leave the queue and make room.
    net.run_until(Duration::from_secs(10), |n| n.all_finished(&[1, 3]));
    net.send(4, "d", bytes(10, 0), targets(1)).unwrap();
}

#[test]
fn junk_chunks_change_nothing() {
    // Slow enough that the file is still arriving when the junk comes.
    let mut net = Net::new(1, slow_sender_config());
    let file = bytes(40 * 1024 + 952, 8);
    let id = net.send(5, "x.bin", file.clone(), targets(1)).unwrap();
    // Let the offer reach the site, then throw junk at it.
    net.run_until(Duration::from_secs(5), |n| n.sites[0].rx.partials() == 1);
    assert!(net.finished(id).is_none());
    let site = &mut net.sites[0];
    let mut junk = Vec::new();
    for (transfer, index, data) in [
        (5u64, 0u32, vec![0u8; 10]), // wrong length
        (5, 99, vec![0; 1024]),      // past the last chunk
        (5, 40, vec![0; 1024]),      // the last chunk is 952 bytes
        (77, 0, vec![0; 1024]),      // a transfer never offered
    ] {
        junk.clear();
        encode_chunk(&mut junk, transfer, index, &data).unwrap();
        site.rx.handle(
            &FilesMessage::decode(&junk).unwrap(),
            net.now,
            &mut site.store,
        );
    }
    let st = site.rx.stats();
    assert_eq!((st.bad_chunks, st.unknown_chunks), (3, 1));
    net.run_until(Duration::from_secs(10), |n| n.finished(id).is_some());
    assert_eq!(net.sites[0].store.inbox.get("x.bin"), Some(&file));
}

#[test]
fn an_absent_site_never_holds_the_window_the_others_need() {
    let mut cfg = sender_config();
    cfg.window = 2;
    let mut net = Net::new(2, cfg);
    net.sites[1].up = false;
    let ids = net.send_many(10, 200, "f", 5_000, 2);
    net.run_until(Duration::from_secs(30), |n| {
        n.sites[0].store.inbox.len() == 10
    });
    assert!(
        ids.iter().all(|id| net.finished(*id).is_none()),
        "they wait for site-1"
    );
    for (_, sites) in net.tx.transfers() {
        assert_eq!(sites["site-0"].state, Delivery::Done);
        assert_eq!(sites["site-1"].state, Delivery::Queued);
    }
    // Site 1 comes back: it gets everything.
    net.sites[1].up = true;
    net.run_until(Duration::from_secs(60), |n| n.all_finished(&ids));
    assert_eq!(net.sites[1].store.inbox.len(), 10);
}

/// A transfer done frees its place in the window at once: the next file is offered
/// straight away, not at the sender's next look at its queue (every 100 ms), which held
/// small files to a window's worth per 100 ms.
#[test]
fn a_finished_transfer_makes_room_in_the_window_at_once() {
    let mut cfg = sender_config();
    cfg.window = 1;
    let mut net = Net::new(1, cfg);
    let ids = net.send_many(5, 300, "f", 500, 1);
    let t0 = net.now;
    net.run_until(Duration::from_secs(10), |n| n.all_finished(&ids));
    assert!(
        net.now - t0 < Duration::from_millis(50),
        "5 files one after another took {:?}",
        net.now - t0
    );
}

#[test]
fn a_transfer_whose_site_never_comes_expires() {
    let mut cfg = sender_config();
    cfg.expire_after = Duration::from_secs(20);
    let mut net = Net::new(2, cfg);
    net.sites[1].up = false;
    let id = net
        .send(3, "late.csv", bytes(2_000, 2), targets(2))
        .unwrap();
    net.run_until(Duration::from_secs(30), |n| n.finished(id).is_some());
    assert_eq!(net.finished(id), Some(false));
    assert!(net.events.contains(&SenderEvent::Site {
        transfer: id,
        site: "site-1".into(),
        state: Delivery::Failed,
        reason: "expired".into()
    }));
    assert_eq!(net.tx.queued_files(), 0);
    assert!(net.sites[0].store.inbox.contains_key("late.csv"));
}

#[test]
fn a_file_for_every_site_goes_to_the_sites_present_when_it_starts() {
    let mut net = Net::new(3, sender_config());
    let id = net.send(4, "all.csv", bytes(9_000, 9), None).unwrap();
    // Nobody is named: the sender listens first, then sends to whoever is present.
    net.run_until(Duration::from_secs(10), |n| n.finished(id).is_some());
    assert_eq!(net.finished(id), Some(true));
    assert!(net
        .sites
        .iter()
        .all(|s| s.store.inbox.contains_key("all.csv")));
    assert!(net.now - net.t0 >= sender_config().listen_first);
}

#[test]
fn the_pace_holds_file_traffic_to_its_share_of_bandwidth() {
    let mut cfg = sender_config();
    cfg.rate = 1_000_000;
    cfg.burst = 64 * 1024;
    let mut net = Net::new(1, cfg);
    let id = net
        .send(1, "two-mb.bin", bytes(2_000_000, 1), targets(1))
        .unwrap();
    net.run_until(Duration::from_secs(10), |n| n.finished(id).is_some());
    let took = net.now - net.t0;
    // 2 MB at 1 MB/s, less the first burst.
    assert!(took >= Duration::from_millis(1900), "{took:?}");
    assert!(took <= Duration::from_millis(2600), "{took:?}");
}

#[test]
fn bytes_that_do_not_match_their_hash_start_again_then_fail() {
    let mut net = Net::new(1, sender_config());
    let id = net
        .send(2, "liar.bin", bytes(4_000, 1), targets(1))
        .unwrap();
    // The spool's copy changes after the hash was taken.
    net.spool.0.insert(id, bytes(4_000, 2));
    net.run_until(Duration::from_secs(30), |n| {
        n.tx.transfer(id)
            .is_some_and(|(_, s)| s["site-0"].state == Delivery::Failed)
    });
    let (_, s) = net.tx.transfer(id).unwrap();
    assert!(
        s["site-0"].reason.contains("SHA-256"),
        "{}",
        s["site-0"].reason
    );
    assert_eq!(net.sites[0].rx.stats().hash_mismatches, 3);
    assert!(net.sites[0].store.inbox.is_empty() && net.sites[0].store.partial.is_empty());
}

#[test]
fn with_deferred_syncs_a_site_says_done_only_once_its_store_has_synced() {
    let mut net = Net::new(1, sender_config());
    net.sites[0].store.defer = true;
    let file = bytes(3_000, 3);
    let id = net.send(8, "synced.bin", file.clone(), targets(1)).unwrap();
    net.run_until(Duration::from_secs(5), |n| {
        !n.sites[0].store.deferred.is_empty()
    });
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.finished(id), None, "not done before the sync");
    let m = net.sites[0].store.deferred.pop().unwrap();
    let site = &mut net.sites[0];
    site.store.defer = false;
    site.store.commit(&m).unwrap();
    site.rx
        .handle_committed(id, Ok(()), net.now, &mut site.store);
    net.run_until(Duration::from_secs(5), |n| n.finished(id).is_some());
    assert_eq!(net.finished(id), Some(true));
    assert_eq!(net.sites[0].store.inbox.get("synced.bin"), Some(&file));
}

#[test]
fn a_site_that_holds_all_the_partial_files_it_may_still_finishes_every_file() {
    // Small files, lost chunks, a site with room for 4 partial files and a window of 8:
    // the site's partial files are repaired even when their transfers are not in the
    // window, so neither side waits on the other for ever.
    let mut net = one_site_with_partials(8, 4);
    net.loss.per_mille = 300;
    let ids = net.send_many(40, 500, "s", 700, 1);
    net.run_until(Duration::from_secs(300), |n| n.all_finished(&ids));
    assert_eq!(net.sites[0].store.inbox.len(), 40);
}

#[test]
fn a_long_queue_never_fills_a_site_with_files_not_yet_sent() {
    // More files queued than the site has room for partial files, and a window smaller
    // than that room: the transfers waiting for the window are not offered, so the
    // site's room stays for the ones being sent.
    let mut net = one_site_with_partials(4, 8);
    let ids = net.send_many(200, 900, "q", 700, 1);
    net.run_until(Duration::from_secs(120), |n| n.all_finished(&ids));
    assert_eq!(net.sites[0].store.inbox.len(), 200);
}

impl Net {
    /// Queues `bytes` as a file still arriving: the spool holds only what
    /// [`Net::arrive`] has put in, so a read beyond it fails the transfer.
    fn send_arriving(&mut self, id: u64, name: &str, bytes: &[u8], sites: usize) -> u64 {
        let file = NewFile {
            transfer: id,
            service: SERVICE.into(),
            name: name.into(),
            size: bytes.len() as u64,
            sha256: Sha256::digest(bytes).into(),
            to: targets(sites),
            expires_ms: 0,
        };
        self.spool.0.insert(id, Vec::new());
        self.tx.enqueue_arriving(file, self.now).unwrap()
    }

    /// The first `len` bytes of `bytes` are in the spool (`whole`: all, and checked).
    fn arrive(&mut self, id: u64, bytes: &[u8], len: usize, whole: bool) {
        self.spool.0.insert(id, bytes[..len].to_vec());
        self.tx.handle_uploaded(id, len as u64, whole, self.now);
    }

    /// The sender stops and starts again with `cfg`, restoring what its node would have
    /// persisted (manifests, site states and what files for every site know of newer
    /// ones; each expiring in an hour). Returns how
    /// many transfers it restored.
    fn restart_sender(&mut self, cfg: SenderConfig) -> usize {
        let saved: Vec<(Manifest, SavedSites, SavedReplacedAt)> = self
            .tx
            .transfers()
            .map(|(m, sites)| {
                let sites = sites
                    .iter()
                    .map(|(s, r)| (s.clone(), r.state, r.reason.clone()))
                    .collect();
                let replaced_at = self.tx.replaced_at(m.transfer);
                let replaced_at = replaced_at.map(|(by, sites)| (by, sites.to_vec()));
                (m.clone(), sites, replaced_at)
            })
            .collect();
        let restored = saved.len();
        let mut tx = Sender::new(cfg, self.now);
        for (m, sites, replaced_at) in saved {
            let id = m.transfer;
            tx.restore(m, sites, self.now + Duration::from_secs(3600), self.now);
            if let Some((by, sites)) = replaced_at {
                tx.restore_replaced_at(id, by, &sites);
            }
        }
        self.tx = tx;
        restored
    }
}

#[test]
fn a_file_still_arriving_goes_out_as_its_bytes_come_and_no_site_has_it_before_it_is_checked() {
    let mut net = Net::new(2, sender_config());
    let file = bytes(100_000, 3); // 98 chunks of 1,024 bytes
    let id = net.send_arriving(7, "big.bin", &file, 2);
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.chunks_to, vec![0, 0], "nothing before its bytes");
    // Half of it: the chunks it holds whole, nothing beyond.
    net.arrive(id, &file, 50_000, false);
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.chunks_to, vec![48, 48]);
    // All of it, not yet checked: every chunk but the last.
    net.arrive(id, &file, 100_000, false);
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.chunks_to, vec![97, 97]);
    assert!(net.finished(id).is_none());
    assert!(net.sites.iter().all(|s| s.store.inbox.is_empty()));
    // Checked: the last chunk goes and every site has the file, in one pass.
    net.arrive(id, &file, 100_000, true);
    net.run_until(Duration::from_secs(10), |n| n.finished(id).is_some());
    assert_eq!(net.finished(id), Some(true));
    for site in &net.sites {
        assert_eq!(site.store.inbox.get("big.bin"), Some(&file));
    }
    let stats = net.tx.stats();
    assert_eq!((stats.chunks, stats.repairs, stats.read_errors), (98, 0, 0));
}

/// Two sites that hold the first 60 KB of a 100 KB file still uploaded (transfer 9).
fn two_sites_holding_part_of_an_upload() -> (Net, u64) {
    let mut net = Net::new(2, sender_config());
    let file = bytes(100_000, 4);
    let id = net.send_arriving(9, "big.bin", &file, 2);
    net.arrive(id, &file, 60_000, false);
    net.run_for(Duration::from_millis(500));
    (net, id)
}

#[test]
fn an_upload_that_fails_is_withdrawn_and_every_site_drops_what_it_holds() {
    let (mut net, id) = two_sites_holding_part_of_an_upload();
    assert!(net.sites.iter().all(|s| s.store.partial.contains_key(&id)));
    net.tx
        .withdraw(id, "the upload failed: the client went away");
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.finished(id), Some(false));
    let failed: Vec<&str> = net
        .events
        .iter()
        .filter_map(|e| match e {
            SenderEvent::Site {
                state: Delivery::Failed,
                reason,
                ..
            } => Some(reason.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(failed, ["the upload failed: the client went away"; 2]);
    for site in &net.sites {
        assert!(site.store.partial.is_empty() && site.store.inbox.is_empty());
        assert!(
            site.events.iter().any(|e| matches!(e, ReceiverEvent::Cancelled { manifest, reason } if manifest.transfer == id && reason == "cancelled by its sender: the upload failed: the client went away")),
            "{:?}",
            site.events
        );
    }
    assert_eq!((net.tx.queued_files(), net.tx.queued_bytes()), (0, 0));
}

/// A site down when its sender gave a transfer up (the Cancel never reached it) is
/// told again when it comes back asking about the transfer: its partial file goes at
/// once, not after `abandon_after` (an hour).
#[test]
fn a_site_that_missed_a_cancel_is_told_again_when_it_asks() {
    let (mut net, id) = two_sites_holding_part_of_an_upload();
    assert!(net.sites[1].store.partial.contains_key(&id));
    net.sites[1].up = false;
    net.tx
        .withdraw(id, "the upload failed: the client went away");
    net.run_for(Duration::from_millis(500));
    assert!(net.sites[0].store.partial.is_empty());
    assert!(
        net.sites[1].store.partial.contains_key(&id),
        "site-1 was down"
    );
    net.restart_site(1);
    net.sites[1].up = true;
    net.run_until(Duration::from_secs(5), |n| {
        n.sites[1].store.partial.is_empty()
    });
    assert!(
        net.sites[1].events.iter().any(|e| matches!(e, ReceiverEvent::Cancelled { manifest, reason } if manifest.transfer == id && reason == "cancelled by its sender: the upload failed: the client went away")),
        "{:?}",
        net.sites[1].events
    );
}

/// A site that failed version 1 of a file (its disk was full) and then took version 2,
/// queued later under the same name, keeps version 2: version 1 is replaced at the
/// sender, not retried over it.
#[test]
fn an_older_version_retried_later_does_not_replace_a_newer_one() {
    let mut net = Net::new(1, sender_config());
    net.sites[0].store.full = true;
    let v1 = bytes(20_000, 1);
    let id1 = net.send(1, "eod.csv", v1, targets(1)).unwrap();
    net.run_until(Duration::from_secs(10), |n| {
        n.tx.transfer(id1)
            .is_some_and(|(_, s)| s["site-0"].state == Delivery::Failed)
    });
    net.sites[0].store.full = false;
    let v2 = bytes(20_000, 2);
    let id2 = net.send(2, "eod.csv", v2.clone(), targets(1)).unwrap();
    net.run_until(Duration::from_secs(10), |n| n.finished(id2).is_some());
    assert!(net.sites[0].store.inbox.get("eod.csv") == Some(&v2));
    // The sender keeps offering version 1 to the site that failed it.
    net.run_until(Duration::from_secs(120), |n| n.finished(id1).is_some());
    assert!(
        net.sites[0].store.inbox.get("eod.csv") == Some(&v2),
        "the site's eod.csv went back to version 1 (first byte {:?})",
        net.sites[0].store.inbox.get("eod.csv").map(|b| b[0])
    );
}

/// A site that is there and answers every offer but never gets a chunk (a tree link
/// always full of market data, where files go only with room) does not hold a place in
/// the window for as long as the file lives: a file for another site goes meanwhile.
#[test]
fn a_site_that_gets_no_further_does_not_hold_the_window_for_the_others() {
    let mut cfg = sender_config();
    cfg.window = 1;
    let mut net = Net::new(2, cfg);
    // Site 1's answers are written below; its receiver gets nothing.
    net.sites[1].up = false;
    let a = net.send(1, "a.bin", bytes(4096, 1), targets(2)).unwrap();
    net.send(2, "b.bin", bytes(4096, 2), Some(vec![site_name(0)]))
        .unwrap();
    let stuck = site_name(1);
    let end = net.now + Duration::from_secs(120);
    while net.now < end && !net.sites[0].store.inbox.contains_key("b.bin") {
        net.tx.handle_present(&stuck, SERVICE, net.now);
        let status = wire::Status {
            transfer: a,
            site: &stuck,
            state: wire::SiteState::Receiving,
            have: 0,
            missing: std::iter::once(0..4).collect(),
            reason: "",
        };
        net.tx.handle_status(&status, net.now);
        net.turn();
        net.now += Duration::from_millis(50);
    }
    assert!(
        net.sites[0].store.inbox.contains_key("a.bin"),
        "site 0 has a.bin"
    );
    assert!(
        net.sites[0].store.inbox.contains_key("b.bin"),
        "after 120 s b.bin for site 0 still waits behind a.bin, which site 1 never completes \
         ({} repairs sent)",
        net.tx.stats().repairs
    );
}

/// A file of the same name sent to other sites replaces nothing: the first file's
/// sites still get it.
#[test]
fn a_file_of_the_same_name_for_other_sites_does_not_replace_the_first() {
    let mut net = Net::new(2, sender_config());
    let v1 = bytes(20_000, 1);
    let id1 = net
        .send(1, "eod.csv", v1.clone(), Some(vec![site_name(0)]))
        .unwrap();
    let id2 = net
        .send(2, "eod.csv", bytes(20_000, 2), Some(vec![site_name(1)]))
        .unwrap();
    net.run_until(Duration::from_secs(30), |n| n.all_finished(&[id1, id2]));
    assert_eq!(net.finished(id2), Some(true));
    assert_eq!(
        net.finished(id1),
        Some(true),
        "site-0's eod.csv was cancelled by a file for site-1 only"
    );
    assert_eq!(net.sites[0].store.inbox.get("eod.csv"), Some(&v1));
}

/// A newer upload of the same name that then fails has not taken the older file away
/// from the sites still waiting for it: a file replaces another once it is whole.
#[test]
fn a_failed_upload_of_the_same_name_leaves_the_older_file_to_its_sites() {
    let mut net = Net::new(1, sender_config());
    net.sites[0].up = false;
    let v1 = bytes(20_000, 1);
    let id1 = net.send(1, "eod.csv", v1.clone(), targets(1)).unwrap();
    let v2 = bytes(20_000, 2);
    let file = NewFile {
        transfer: 2,
        service: SERVICE.into(),
        name: "eod.csv".into(),
        size: v2.len() as u64,
        sha256: Sha256::digest(&v2).into(),
        to: targets(1),
        expires_ms: 0,
    };
    net.tx.enqueue_arriving(file, net.now).unwrap();
    net.tx
        .withdraw(2, "the upload failed: the client went away");
    net.sites[0].up = true;
    net.run_until(Duration::from_secs(30), |n| n.finished(id1).is_some());
    assert_eq!(
        net.finished(id1),
        Some(true),
        "eod.csv v1 was cancelled by an upload that never arrived"
    );
    assert_eq!(net.sites[0].store.inbox.get("eod.csv"), Some(&v1));
}

/// Two transfers of one name put back from the spool, in any order: the later queued
/// (its later expiry) replaces the earlier, and a newer file replaces it in turn.
#[test]
fn restored_transfers_of_one_name_keep_only_the_newest() {
    let now = Instant::now();
    let later = now + Duration::from_secs(3600);
    let manifest = |transfer: u64, expires_ms: u64| {
        let mut m = Manifest::sample(transfer, "eod.csv", 3000);
        m.chunk_size = 1024;
        m.expires_ms = expires_ms;
        m
    };
    for order in [[1, 2], [2, 1]] {
        let mut tx = Sender::new(sender_config(), now);
        for t in order {
            tx.restore(manifest(t, 1000 * t), [], later, now);
        }
        let live: Vec<u64> = tx.transfers().map(|(m, _)| m.transfer).collect();
        assert_eq!(live, vec![2], "restored in the order {order:?}");
    }
    let mut tx = Sender::new(sender_config(), now);
    tx.restore(manifest(1, 1000), [], later, now);
    tx.restore(manifest(2, 2000), [], later, now);
    let file = NewFile {
        transfer: 3,
        service: SERVICE.into(),
        name: "eod.csv".into(),
        size: 10,
        sha256: [1; 32],
        to: Some(vec!["edge1".into(), "edge2".into()]),
        expires_ms: 0,
    };
    tx.enqueue(file, now).unwrap();
    let live: Vec<u64> = tx.transfers().map(|(m, _)| m.transfer).collect();
    assert_eq!(
        live,
        vec![3],
        "older transfers of eod.csv still queued after a newer one"
    );
}

/// A transfer parked for getting no site further while repairs it was asked for are
/// still held sends them as parked repairs (outside the window), not only after the
/// site's next answer to a parked offer.
#[test]
fn repairs_held_when_a_transfer_is_parked_still_go() {
    let t0 = Instant::now();
    let mut cfg = sender_config();
    cfg.rate = 4_000; // a few chunks a second: repairs stay held
    cfg.burst = 8 * 1024;
    let mut tx = Sender::new(cfg, t0);
    let mut src = MemSpool::default();
    let data = bytes(64 * 1024, 1);
    tx.enqueue(
        NewFile {
            transfer: 1,
            service: SERVICE.into(),
            name: "a.bin".into(),
            size: data.len() as u64,
            sha256: Sha256::digest(&data).into(),
            to: Some(vec!["s".into()]),
            expires_ms: 0,
        },
        t0,
    )
    .unwrap();
    src.0.insert(1, data);
    let mut out = Vec::new();
    let mut now = t0;
    // The first pass.
    while now < t0 + Duration::from_secs(60) {
        tx.handle_present("s", SERVICE, now);
        tx.handle_timeout(now);
        while tx.poll_transmit(now, &mut src, &mut out) {}
        // The site takes the second half as it comes.
        let have = tx.stats().chunks.saturating_sub(32) as u32;
        let status = wire::Status {
            transfer: 1,
            site: "s",
            state: wire::SiteState::Receiving,
            have,
            missing: vec![],
            reason: "",
        };
        tx.handle_status(&status, now);
        if tx.stats().chunks == 64 {
            break;
        }
        now += Duration::from_millis(50);
    }
    assert_eq!(tx.stats().chunks, 64);
    // The first half was lost: the site asks for it, then gets nothing further and its
    // answers are lost for a while (its link is busy).
    let status = wire::Status {
        transfer: 1,
        site: "s",
        state: wire::SiteState::Receiving,
        have: 32,
        missing: std::iter::once(0..32).collect(),
        reason: "",
    };
    tx.handle_status(&status, now);
    // Repairs go while it is active (the site's answers to offers lost on its busy
    // link), until it is parked as stalled.
    let parked_at = now + tx.config().offer_interval * 4;
    while now <= parked_at {
        tx.handle_present("s", SERVICE, now);
        tx.handle_timeout(now);
        while tx.poll_transmit(now, &mut src, &mut out) {}
        now += Duration::from_millis(50);
    }
    let repairs_before = tx.stats().repairs;
    assert!(
        repairs_before > 0 && repairs_before < 32,
        "{repairs_before}"
    );
    let end = now + Duration::from_millis(1900);
    while now < end {
        tx.handle_present("s", SERVICE, now);
        tx.handle_timeout(now);
        while tx.poll_transmit(now, &mut src, &mut out) {}
        now += Duration::from_millis(50);
    }
    assert!(
        tx.stats().repairs > repairs_before + 2,
        "repairs held when the transfer was parked: {} sent in 1.9 s",
        tx.stats().repairs - repairs_before
    );
}

/// An empty file uploaded under the name of one still on its way replaces it once it
/// is whole and checked, as any other file does; and no site has it before then.
#[test]
fn an_empty_upload_replaces_the_older_file_of_its_name_once_whole() {
    let mut net = Net::new(1, sender_config());
    net.sites[0].up = false;
    let id1 = net
        .send(1, "eod.csv", bytes(20_000, 1), targets(1))
        .unwrap();
    let id2 = net.send_arriving(2, "eod.csv", &[], 1);
    net.arrive(id2, &[], 0, true);
    net.run_for(Duration::from_millis(500));
    assert_eq!(net.finished(id1), Some(false), "replaced by the empty file");
    net.sites[0].up = true;
    net.run_until(Duration::from_secs(30), |n| n.finished(id2).is_some());
    assert_eq!(net.finished(id2), Some(true));
    assert_eq!(net.sites[0].store.inbox.get("eod.csv"), Some(&Vec::new()));
    // Another, still arriving: no site has it before it is whole.
    let id3 = net.send_arriving(3, "empty.csv", &[], 1);
    net.run_for(Duration::from_secs(1));
    assert_eq!(
        net.sites[0].store.inbox.get("empty.csv"),
        None,
        "the empty file reached a site before its upload was whole"
    );
    net.arrive(id3, &[], 0, true);
    net.run_until(Duration::from_secs(30), |n| n.finished(id3).is_some());
    assert_eq!(net.sites[0].store.inbox.get("empty.csv"), Some(&Vec::new()));
}

/// A file for every site goes to the sites present when it starts: one queued while a
/// site that still needs the older file of its name is away does not go to that site,
/// so it does not replace the older file there. The site, back, gets the older file
/// rather than neither.
#[test]
fn a_file_for_every_site_does_not_replace_the_older_one_at_a_site_away_when_it_starts() {
    let mut net = Net::new(2, sender_config());
    net.sites[1].up = false;
    let v1 = bytes(20_000, 1);
    let id1 = net.send(1, "eod.csv", v1.clone(), targets(2)).unwrap();
    net.run_until(Duration::from_secs(10), |n| {
        n.sites[0].store.inbox.contains_key("eod.csv")
    });
    let v2 = bytes(20_000, 2);
    let id2 = net.send(2, "eod.csv", v2.clone(), None).unwrap();
    net.run_until(Duration::from_secs(30), |n| n.finished(id2).is_some());
    assert_eq!(net.finished(id2), Some(true));
    assert_eq!(net.sites[0].store.inbox.get("eod.csv"), Some(&v2));
    assert_eq!(net.finished(id1), None, "site-1 still waits for eod.csv");
    net.sites[1].up = true;
    net.run_until(Duration::from_secs(30), |n| n.finished(id1).is_some());
    assert_eq!(net.finished(id1), Some(true));
    assert_eq!(net.sites[1].store.inbox.get("eod.csv"), Some(&v1));
}

/// A file for every site replaces the older file of its name once it has its sites,
/// where they are every site the older one has yet to reach.
#[test]
fn a_file_for_every_site_replaces_the_older_one_once_it_has_its_sites() {
    let mut net = Net::new(1, sender_config());
    net.sites[0].up = false;
    let id1 = net
        .send(1, "eod.csv", bytes(20_000, 1), targets(1))
        .unwrap();
    let v2 = bytes(20_000, 2);
    let id2 = net.send(2, "eod.csv", v2.clone(), None).unwrap();
    net.run_for(Duration::from_secs(4));
    assert_eq!(
        net.finished(id1),
        None,
        "no site is known to take the newer yet"
    );
    net.sites[0].up = true;
    net.run_until(Duration::from_secs(30), |n| n.finished(id2).is_some());
    assert_eq!(net.finished(id1), Some(false), "replaced by the newer");
    assert_eq!(net.sites[0].store.inbox.get("eod.csv"), Some(&v2));
}

/// Files for every site of one name, queued while no site is there, take their sites
/// together: the newer replaces the older, whichever order the sender looks at them.
#[test]
fn files_for_every_site_of_one_name_queued_before_any_site_keep_the_newer() {
    for round in 0..8 {
        let mut net = Net::new(1, sender_config());
        net.sites[0].up = false;
        let ids: Vec<u64> = (0..4)
            .map(|i| {
                net.send(10 + i, "eod.csv", bytes(5_000, i as u8), None)
                    .unwrap()
            })
            .collect();
        net.run_for(Duration::from_secs(4));
        net.sites[0].up = true;
        net.run_until(Duration::from_secs(30), |n| n.all_finished(&ids));
        let delivered: Vec<Option<bool>> = ids.iter().map(|id| net.finished(*id)).collect();
        assert_eq!(
            delivered,
            [Some(false), Some(false), Some(false), Some(true)],
            "round {round}"
        );
        assert_eq!(
            net.sites[0].store.inbox.get("eod.csv"),
            Some(&bytes(5_000, 3))
        );
    }
}

/// A site whose disk was full when its sender stopped is offered the file again once
/// the sender is back, and takes it when its disk has room: the restarted sender does
/// not leave the transfer waiting for its expiry.
#[test]
fn a_site_that_failed_before_its_sender_restarted_is_offered_the_file_again() {
    let mut net = Net::new(1, sender_config());
    net.sites[0].store.full = true;
    let file = bytes(20_000, 7);
    let id = net.send(1, "eod.csv", file.clone(), targets(1)).unwrap();
    net.run_until(Duration::from_secs(10), |n| {
        n.tx.transfer(id)
            .is_some_and(|(_, s)| s["site-0"].state == Delivery::Failed)
    });
    net.restart_sender(sender_config());
    net.sites[0].store.full = false;
    net.run_until(Duration::from_secs(120), |n| n.finished(id).is_some());
    assert_eq!(net.finished(id), Some(true));
    assert_eq!(net.sites[0].store.inbox.get("eod.csv"), Some(&file));
}

/// A site away when a newer file for every site started, back while that file is still
/// on its way, may take it as well as the older one it still needs: it ends with the
/// newer, whichever of them it finishes last.
#[test]
fn a_site_back_while_a_newer_file_for_every_site_is_on_its_way_ends_with_the_newer() {
    let mut net = Net::new(2, slow_sender_config());
    net.sites[1].up = false;
    let v1 = bytes(3_000_000, 1);
    let id1 = net.send(1, "eod.csv", v1, targets(2)).unwrap();
    net.run_until(Duration::from_secs(10), |n| {
        n.sites[0].store.inbox.contains_key("eod.csv")
    });
    let v2 = bytes(600_000, 2);
    let id2 = net.send(2, "eod.csv", v2.clone(), None).unwrap();
    net.run_until(Duration::from_secs(10), |n| {
        n.events
            .iter()
            .any(|e| matches!(e, SenderEvent::Targets { transfer, .. } if *transfer == id2))
    });
    net.run_for(Duration::from_millis(300));
    assert_eq!(net.finished(id2), None, "still on its way");
    net.sites[1].up = true;
    net.run_until(Duration::from_secs(60), |n| n.all_finished(&[id1, id2]));
    net.run_for(Duration::from_secs(5));
    assert_eq!(net.sites[0].store.inbox.get("eod.csv"), Some(&v2));
    assert!(
        net.sites[1].store.inbox.get("eod.csv") == Some(&v2),
        "site-1 ended with {} bytes",
        net.sites[1]
            .store
            .inbox
            .get("eod.csv")
            .map_or(0, |b| b.len())
    );
}

/// Two uploads of one name at once: the one queued later replaces the earlier,
/// whichever is whole first; the earlier, whole first, does not end the later's upload.
#[test]
fn of_two_uploads_of_one_name_the_later_queued_replaces_the_earlier_whichever_is_whole_first() {
    let mut net = Net::new(1, sender_config());
    let v1 = bytes(30_000, 1);
    let v2 = bytes(30_000, 2);
    let id1 = net.send_arriving(1, "eod.csv", &v1, 1);
    let id2 = net.send_arriving(2, "eod.csv", &v2, 1);
    net.arrive(id1, &v1, v1.len(), true);
    net.run_for(Duration::from_millis(100));
    assert_eq!(net.finished(id2), None, "the later upload goes on");
    net.arrive(id2, &v2, v2.len(), true);
    net.run_until(Duration::from_secs(30), |n| n.all_finished(&[id1, id2]));
    assert_eq!(net.finished(id2), Some(true));
    net.run_for(Duration::from_secs(1));
    assert_eq!(net.sites[0].store.inbox.get("eod.csv"), Some(&v2));
}

/// A file for every site queued before its sender knows any site, then a newer file
/// of its name for a named site, which goes at once: once the older has its sites, the
/// newer replaces it there, and the site keeps the newer (the older could not be
/// replaced when the newer was queued: it had no sites yet).
#[test]
fn a_newer_file_replaces_an_older_one_for_every_site_once_the_older_has_its_sites() {
    let mut net = Net::new(1, sender_config());
    let id1 = net.send(1, "eod.csv", bytes(20_000, 1), None).unwrap();
    let v2 = bytes(20_000, 2);
    let id2 = net.send(2, "eod.csv", v2.clone(), targets(1)).unwrap();
    net.run_until(Duration::from_secs(30), |n| n.all_finished(&[id1, id2]));
    assert_eq!(net.finished(id2), Some(true));
    assert_eq!(net.finished(id1), Some(false), "replaced by the newer");
    assert_eq!(net.sites[0].store.inbox.get("eod.csv"), Some(&v2));
}
