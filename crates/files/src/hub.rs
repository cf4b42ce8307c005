//! A node's files: its sender (with its spool), its receiver (with its inbox), the
//! uploads of `tickwire files send`, the routes to the sites below it, and the record
//! `tickwire files status` reads. The node's files thread drives one `Hub`; the event
//! loop only moves its messages.
//!
//! Routes, on a node tree:
//! - a site below says it is there (`Present`) on its connection: the connection is a
//!   route to that site for that service (if the connection's user may subscribe to
//!   it); offers, chunks and cancels of that service go down every such route, this
//!   node's own and those it relays from its upstream;
//! - statuses and presences from below go to this node's sender when the transfer is
//!   its own, else up the link the transfer came down;
//! - this node's receiver takes what comes down its upstream link, and answers up it.
//!
//! Every table is bounded: uploads at once, routes per connection, transfers relayed,
//! records kept.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::audit::{HubEvent, PastFile};
use crate::inbox::Inbox;
use crate::manifest::Manifest;
use crate::name::check_name;
use crate::receiver::{Receiver, ReceiverEvent, ReceiverStats};
use crate::sender::{Delivery, NewFile, Sender, SenderEvent, SenderStats};
use crate::spool::{PendingCancel, Spool, SpoolWriter, Spooled};
use crate::wire::{FilesMessage, Put, PutAnswer, PutState, ReportEntry, PUT_FIRST_WINDOW};

/// Where a message comes from or goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Peer {
    /// One of the node's connections (a client, a node below), by its id.
    Conn(usize),
    /// The node's upstream link.
    Upstream,
    /// The backbone: one message reaches every node on it.
    Backbone,
}

/// Where a site's presence goes up: every way toward senders.
const UP: [Peer; 2] = [Peer::Upstream, Peer::Backbone];

/// What a connection may do with each of the node's file services (bit `i`: the
/// service at index `i` of [`HubConfig::services`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rights {
    /// Services (bits by index) it may send files in.
    pub publish: u64,
    /// Services (bits by index) it may receive files of.
    pub subscribe: u64,
}

impl Rights {
    /// Every right on every service.
    pub const ALL: Rights = Rights {
        publish: u64::MAX,
        subscribe: u64::MAX,
    };
}

/// Why a file whose upload a restart interrupted is cancelled at the sites.
const UNFINISHED: &str =
    "the sending node stopped before the file was uploaded whole: send it again";

/// Most file services a node has (the bits of [`Rights`]).
pub const MAX_SERVICES: usize = 64;

/// A node's files settings.
#[derive(Debug, Clone)]
pub struct HubConfig {
    /// This node's name: its site.
    pub site: String,
    /// The files services this node takes part in.
    pub services: Vec<String>,
    /// Uploads in progress at once.
    pub max_uploads: usize,
    /// Bytes a client may send beyond what the node has acknowledged.
    pub upload_window: u64,
    /// An upload with no bytes for this long is dropped.
    pub upload_timeout: Duration,
    /// Finished transfers and received files the record keeps (the audit log has all).
    pub keep_records: usize,
    /// How long a transfer waits for its sites (for the offers' expiry time).
    pub expire_after: Duration,
}

impl HubConfig {
    /// Settings for `site` taking part in `services`, with the defaults.
    pub fn new(site: impl Into<String>, services: Vec<String>) -> Self {
        HubConfig {
            site: site.into(),
            services,
            max_uploads: 64,
            upload_window: 1 << 20,
            upload_timeout: Duration::from_secs(30),
            keep_records: 10_000,
            expire_after: Duration::from_secs(24 * 3600),
        }
    }
}

/// A message for the event loop to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Where it goes.
    pub to: Peer,
    /// The message. Empty: no message, but the end of a gone connection's
    /// ([`Hub::handle_gone`]): what comes for its id after it is for a new connection
    /// under the same id, what came before it for the gone one.
    pub body: Vec<u8>,
    /// Sent only if the peer has room: an offer or chunk the sites ask for again,
    /// or a status or presence sent again, rather than market data waiting.
    pub droppable: bool,
}

/// Counters for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HubStats {
    /// Uploads accepted.
    pub uploads: u64,
    /// Uploads refused.
    pub uploads_refused: u64,
    /// Messages not allowed where they came from (rights, direction, unknown).
    pub ignored: u64,
    /// Messages that did not decode.
    pub malformed: u64,
    /// Messages passed on to the sites below.
    pub relayed_down: u64,
    /// Messages passed on to the sender above.
    pub relayed_up: u64,
    /// Syncs of the spool (files' bytes, its log, its directory) before files were
    /// said queued.
    pub spool_syncs: u64,
    /// Spool syncs that failed (the uploads waiting for them refused).
    pub spool_sync_failures: u64,
}

/// An upload in progress: its transfer is queued already (`Sender::enqueue_arriving`).
struct Upload {
    /// Who uploads it: one user's uploads in progress hold at most half the node's.
    user: Box<str>,
    size: u64,
    sha256: [u8; 32],
    transfer: u64,
    writer: SpoolWriter,
    acked: u64,
    last_data: Instant,
}

/// One site's line in the record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SiteLine {
    state: Delivery,
    since_ms: u64,
    reason: String,
}

/// A file in the record: sent by this node (its sites), or received here.
#[derive(Debug, Clone)]
struct Record {
    /// When it entered the record (reports list files in this order).
    seq: u64,
    manifest: Manifest,
    sites: BTreeMap<String, SiteLine>,
    finished: bool,
}

/// Most sites one connection may be a route to.
const MAX_ROUTES_PER_PEER: usize = 256;
/// A route to a site not heard from for this long is forgotten (sites say they are
/// there every second; one silent for 5 s is absent already).
const ROUTE_FORGOTTEN: Duration = Duration::from_secs(60);
/// Relayed transfers whose service is remembered (for their chunks) at most.
const MAX_RELAYED: usize = 65_536;
/// Report bytes per message (the native protocol's bodies are at most 65,535).
const REPORT_BYTES: usize = 60_000;
/// Why an upload ends whose transfer the sender gave up first.
const ENDED_BEFORE_UPLOAD: &str =
    "the sender gave the file up before its upload ended (tickwire files status says why)";
/// Messages a sender may produce per pump (the thread then looks at its input).
const PUMP_BATCH: usize = 256;

/// A node's files (see the module doc).
pub struct Hub {
    cfg: HubConfig,
    sender: Option<(Sender, Spool)>,
    receiver: Option<(Receiver, Inbox)>,
    uploads: HashMap<(usize, u32), Upload>,
    routes: HashMap<Peer, BTreeMap<(usize, String), Instant>>,
    /// Transfers relayed down (or received): their service's index, and where they
    /// came from (their sites' statuses go back that way).
    relayed: HashMap<u64, (usize, Peer)>,
    relayed_order: VecDeque<u64>,
    records: BTreeMap<u64, Record>,
    record_seq: u64,
    finished_order: VecDeque<u64>,
    out: VecDeque<Output>,
    events: VecDeque<HubEvent>,
    /// For ids: a splitmix64 state seeded by the node.
    id_state: u64,
    t0: Instant,
    wall0_ms: u64,
    /// When the completed files waiting in the inbox are synced (its fsync policy's
    /// delay after the first of them).
    commit_due: Option<Instant>,
    /// Uploads an earlier run never finished, cancelled at each site as it says it is
    /// there (after a restart no site is known until it does); the spool keeps them.
    restart_cancels: Vec<RestartCancel>,
    stats: HubStats,
    buf: Vec<u8>,
    /// Status queries answered to each connection at most once per gap.
    queries: crate::query_pace::QueryPace,
    /// Uploads whole and checked, waiting for the spool's sync to be logged queued and
    /// then answered.
    queued_unsynced: Vec<UnsyncedUpload>,
    /// When the spool is synced next (its fsync policy's delay after the first file
    /// that waits for it).
    spool_sync_due: Option<Instant>,
}

/// A file whose upload a restart interrupted: the sites that got its first chunks are
/// told to drop them, each when it is heard.
struct RestartCancel {
    transfer: u64,
    /// Its service's index.
    service: usize,
    /// Until when sites are told (one that comes back later drops the part when it
    /// gives the file up, `abandon_after`).
    until: Instant,
    /// The same on the wall clock, as the spool keeps it (through a restart).
    until_ms: u64,
    /// The sites told, and how often (a few times: the first may go before the way to
    /// the site is up).
    told: HashMap<String, u8>,
}

/// An upload whole and checked whose bytes wait for the spool's sync.
struct UnsyncedUpload {
    /// The client's connection (none once it is gone: the file is queued all the same).
    conn: Option<usize>,
    request: u32,
    transfer: u64,
    size: u64,
}

/// Logs a transfer whose bytes are in the spool as queued, with what its sites said
/// meanwhile (for a restart); the reason if the log cannot take it.
fn save_queued(
    tx: &Sender,
    spool: &mut Spool,
    records: &BTreeMap<u64, Record>,
    transfer: u64,
) -> Result<(), String> {
    let Some((m, sites)) = tx.transfer(transfer) else {
        return Err(ENDED_BEFORE_UPLOAD.to_string());
    };
    spool
        .save(m)
        .map_err(|e| format!("the node cannot keep the file's manifest: {e}"))?;
    for (site, r) in sites {
        if r.state != Delivery::Queued {
            let line = records.get(&transfer).and_then(|rec| rec.sites.get(site));
            let since_ms = line.map(|l| l.since_ms);
            let _ = spool.record(transfer, site, r.state, &r.reason, since_ms);
        }
    }
    // Newer files of its name learned of while it was still arriving.
    if let Some((by, sites)) = tx.replaced_at(transfer) {
        let _ = spool.record_replaced_at(transfer, by, sites);
    }
    Ok(())
}

/// How long after a restart the sites are told of the uploads it interrupted.
const RESTART_CANCEL_FOR: Duration = Duration::from_secs(600);
/// How many times each site is told.
const RESTART_CANCEL_TIMES: u8 = 3;

impl Hub {
    /// A hub for the node; `sender` and `receiver` are there when the node has a spool
    /// and an inbox. `wall_ms` is the wall clock at `now`; `seed` seeds transfer ids.
    pub fn new(
        cfg: HubConfig,
        sender: Option<(Sender, Spool)>,
        receiver: Option<(Receiver, Inbox)>,
        now: Instant,
        wall_ms: u64,
        seed: u64,
    ) -> Self {
        Hub {
            cfg,
            sender,
            receiver,
            uploads: HashMap::new(),
            routes: HashMap::new(),
            relayed: HashMap::new(),
            relayed_order: VecDeque::new(),
            records: BTreeMap::new(),
            record_seq: 0,
            finished_order: VecDeque::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            id_state: seed,
            t0: now,
            wall0_ms: wall_ms,
            commit_due: None,
            restart_cancels: Vec::new(),
            stats: HubStats::default(),
            buf: Vec::new(),
            queries: Default::default(),
            queued_unsynced: Vec::new(),
            spool_sync_due: None,
        }
    }

    /// Its counters.
    pub fn stats(&self) -> HubStats {
        self.stats
    }

    /// Its sender's counters and queue (files, bytes), where the node has a spool.
    pub fn sender_figures(&self) -> Option<(SenderStats, usize, u64)> {
        self.sender
            .as_ref()
            .map(|(tx, _)| (tx.stats(), tx.queued_files(), tx.queued_bytes()))
    }

    /// Its receiver's counters, where the node has an inbox.
    pub fn receiver_stats(&self) -> Option<ReceiverStats> {
        self.receiver.as_ref().map(|(rx, _)| rx.stats())
    }

    /// Its inbox's writes, syncs and renames, where the node has an inbox.
    pub fn inbox_counts(&self) -> Option<crate::inbox::InboxCounts> {
        self.receiver.as_ref().map(|(_, inbox)| inbox.counts())
    }

    /// Its settings.
    pub fn config(&self) -> &HubConfig {
        &self.cfg
    }

    /// The files whose story was over before this run (from the audit log, oldest
    /// first), put back in the record so that `files status` still lists them. Call
    /// before [`Hub::restore`]: a transfer the spool still holds replaces its past.
    pub fn restore_history(&mut self, past: Vec<PastFile>) {
        for file in past {
            let transfer = file.manifest.transfer;
            let sites = file
                .sites
                .into_iter()
                .map(|s| {
                    (
                        s.site,
                        SiteLine {
                            state: s.state,
                            since_ms: s.since_ms,
                            reason: s.reason,
                        },
                    )
                })
                .collect();
            self.put_record(file.manifest, sites, true);
            self.finished_order.push_back(transfer);
        }
        self.forget_beyond_keep();
    }

    /// Puts a file's record in, after every record there (reports list them in this
    /// order), in place of any of its transfer, which leaves the finished ones' order.
    fn put_record(
        &mut self,
        manifest: Manifest,
        sites: BTreeMap<String, SiteLine>,
        finished: bool,
    ) {
        self.record_seq += 1;
        let transfer = manifest.transfer;
        let rec = Record {
            seq: self.record_seq,
            manifest,
            sites,
            finished,
        };
        if self.records.insert(transfer, rec).is_some() {
            self.finished_order.retain(|t| *t != transfer);
        }
    }

    /// Drops the oldest finished files from the record past `keep_records` (the audit
    /// log has them all).
    fn forget_beyond_keep(&mut self) {
        while self.finished_order.len() > self.cfg.keep_records {
            if let Some(old) = self.finished_order.pop_front() {
                self.records.remove(&old);
            }
        }
    }

    /// The sender's queue, from the spool a previous run left: every transfer put back
    /// with what its sites had said.
    pub fn restore(&mut self, now: Instant) -> std::io::Result<usize> {
        let wall = self.wall_ms(now);
        let Some((sender, spool)) = self.sender.as_mut() else {
            return Ok(0);
        };
        let queued = spool.load()?;
        let n = queued.len();
        for Spooled {
            manifest: m,
            sites,
            replaced_at,
        } in queued
        {
            let left = Duration::from_millis(m.expires_ms.saturating_sub(wall));
            // Since when a site stands where it does: as the spool has it, unchanged by
            // the restart; a target that has said nothing yet, since the file was
            // queued (its expiry less `expire_after`); else (a site being sent to,
            // queued again; a line of an earlier version) since now.
            let queued_ms = m
                .expires_ms
                .saturating_sub(self.cfg.expire_after.as_millis() as u64)
                .min(wall);
            let since = |site: &str, state: Delivery| match sites.iter().find(|s| s.site == site) {
                Some(s) if s.state == state => s.since_ms.unwrap_or(wall),
                None if state == Delivery::Queued => queued_ms,
                _ => wall,
            };
            let line = |site: &str, state: Delivery, reason: &str| {
                let since_ms = since(site, state);
                let reason = reason.to_owned();
                (
                    site.to_owned(),
                    SiteLine {
                        state,
                        since_ms,
                        reason,
                    },
                )
            };
            self.record_seq += 1;
            let rec = Record {
                seq: self.record_seq,
                manifest: m.clone(),
                sites: sites
                    .iter()
                    .map(|s| line(&s.site, s.state, &s.reason))
                    .collect(),
                finished: false,
            };
            let transfer = m.transfer;
            if self.records.insert(transfer, rec).is_some() {
                self.finished_order.retain(|t| *t != transfer);
            }
            let said = sites
                .iter()
                .map(|s| (s.site.clone(), s.state, s.reason.clone()));
            sender.restore(m, said, now + left, now);
            if let Some((by, sites)) = replaced_at {
                sender.restore_replaced_at(transfer, by, &sites);
            }
            // As the sender has it now: its target sites that have said nothing yet
            // too (queued), and a site that was being sent to queued again.
            if let (Some((_, restored)), Some(rec)) =
                (sender.transfer(transfer), self.records.get_mut(&transfer))
            {
                rec.sites = restored
                    .iter()
                    .map(|(site, r)| line(site, r.state, &r.reason))
                    .collect();
            }
        }
        // Uploads the last run began and never finished: their bytes are gone, and
        // the sites are told to drop what they got; the spool keeps what is left to
        // tell, so a run stopped within that time leaves it to the next one (`fresh`:
        // not in the spool yet).
        let mut cancels: Vec<(PendingCancel, bool)> =
            spool.cancels().into_iter().map(|c| (c, false)).collect();
        for m in spool.take_unfinished() {
            self.record_seq += 1;
            let rec = Record {
                seq: self.record_seq,
                manifest: m.clone(),
                sites: Default::default(),
                finished: false,
            };
            if self.records.insert(m.transfer, rec).is_some() {
                self.finished_order.retain(|t| *t != m.transfer);
            }
            let transfer = m.transfer;
            let cancel = PendingCancel {
                transfer,
                service: m.service.clone(),
                until_ms: wall + RESTART_CANCEL_FOR.as_millis() as u64,
                told: Vec::new(),
            };
            cancels.push((cancel, true));
            // The record says why it failed at its sites.
            sender.restore(m, [], now, now);
            sender.withdraw(transfer, UNFINISHED);
        }
        for (c, fresh) in cancels {
            let service = self.cfg.services.iter().position(|s| *s == c.service);
            let Some(service) = service.filter(|_| c.until_ms > wall) else {
                let _ = spool.cancel_over(c.transfer);
                continue;
            };
            if fresh {
                // Best effort: one the log cannot take is told by this run only.
                let _ = spool.keep_cancel(&c);
            }
            let told = c.told.into_iter();
            self.restart_cancels.push(RestartCancel {
                transfer: c.transfer,
                service,
                until: now + Duration::from_millis(c.until_ms - wall),
                until_ms: c.until_ms,
                told: told.map(|site| (site, RESTART_CANCEL_TIMES)).collect(),
            });
        }
        Ok(n)
    }

    /// Uploads an earlier run began and never finished, whose sites are still to be
    /// told to drop what they got ([`Hub::restore`] found them).
    pub fn interrupted_uploads(&self) -> usize {
        self.restart_cancels.len()
    }

    /// Partial files a previous run of the receiver left, reopened; and the transfers
    /// it finished (from the audit log), answered "done" when offered again.
    pub fn resume_receiver(
        &mut self,
        done: impl IntoIterator<Item = u64>,
        now: Instant,
    ) -> std::io::Result<usize> {
        let Some((rx, inbox)) = self.receiver.as_mut() else {
            return Ok(0);
        };
        rx.remember_done(done);
        let partials = inbox.partial_manifests()?;
        let n = partials.len();
        for m in partials {
            rx.resume(m, now, inbox);
        }
        Ok(n)
    }

    fn wall_ms(&self, now: Instant) -> u64 {
        self.wall0_ms + now.saturating_duration_since(self.t0).as_millis() as u64
    }

    fn next_id(&mut self) -> u64 {
        // splitmix64: distinct ids from one random seed.
        self.id_state = self.id_state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.id_state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn service_index(&self, service: &str) -> Option<usize> {
        self.cfg.services.iter().position(|s| s == service)
    }

    fn send(&mut self, to: Peer, msg: &FilesMessage, droppable: bool) {
        let mut body = Vec::new();
        if msg.encode(&mut body).is_ok() {
            self.out.push_back(Output {
                to,
                body,
                droppable,
            });
        }
    }

    fn answer(&mut self, conn: usize, a: PutAnswer) {
        self.send(Peer::Conn(conn), &FilesMessage::PutAnswer(a), false);
    }

    fn answer_queued(&mut self, conn: usize, request: u32, transfer: u64, size: u64) {
        let a = PutAnswer {
            request,
            state: PutState::Queued,
            transfer,
            received: size,
            window: 0,
            reason: "",
        };
        self.answer(conn, a);
    }

    fn refuse(&mut self, conn: usize, request: u32, reason: &str) {
        self.stats.uploads_refused += 1;
        self.answer(conn, PutAnswer::refused(request, reason));
    }

    /// A message from `from`, whose user is `user` with `rights`.
    pub fn handle(&mut self, from: Peer, user: &str, rights: Rights, body: &[u8], now: Instant) {
        let msg = match FilesMessage::decode(body) {
            Ok(m) => m,
            Err(e) => {
                self.stats.malformed += 1;
                // An upload's answer is the only place a client hears of it.
                if let Peer::Conn(c) = from {
                    if body.get(2) == Some(&16) {
                        self.refuse(c, 0, &format!("malformed upload: {e}"));
                    }
                }
                return;
            }
        };
        match (from, msg) {
            (Peer::Conn(c), FilesMessage::Put(p)) => self.on_put(c, user, rights, &p, now),
            (
                Peer::Conn(c),
                FilesMessage::PutData {
                    request,
                    offset,
                    data,
                },
            ) => self.on_put_data(c, request, offset, data, now),
            (Peer::Conn(c), FilesMessage::Query { request }) => {
                if let Some(r) = self.queries.ask(c, request, rights, now) {
                    self.on_query(c, rights, &[r]);
                }
            }
            (Peer::Conn(_), FilesMessage::Present { site, service }) => {
                self.on_present(from, rights, site, service, body, now)
            }
            // Nodes on the backbone hold its key (when it has one): trusted as a whole.
            (Peer::Backbone, FilesMessage::Present { site, service }) => {
                self.on_present(from, Rights::ALL, site, service, body, now)
            }
            (Peer::Conn(_) | Peer::Backbone, FilesMessage::Status(s)) => {
                // The transfer's service: a peer speaks for a site in the services it
                // was heard present for, not in every service of the node.
                // (A transfer that ended lately still has one: a site that missed its
                // Cancel is told again.)
                let own_service = self.sender.as_ref().and_then(|(tx, _)| {
                    let service = tx.service_of(s.transfer)?;
                    self.service_index(service)
                });
                let service = own_service.or_else(|| self.relayed.get(&s.transfer).map(|r| r.0));
                let routed = service.is_some_and(|i| {
                    self.routes
                        .get(&from)
                        .is_some_and(|r| r.keys().any(|(j, site)| *j == i && site == s.site))
                });
                if !routed {
                    self.stats.ignored += 1;
                    return;
                }
                let own = own_service.is_some();
                if own {
                    let (tx, _) = self.sender.as_mut().expect("checked");
                    tx.handle_status(&s, now);
                } else if let Some(&(_, origin)) = self.relayed.get(&s.transfer) {
                    self.stats.relayed_up += 1;
                    self.out.push_back(Output {
                        to: origin,
                        body: body.to_vec(),
                        droppable: true,
                    });
                } else {
                    self.stats.ignored += 1;
                }
            }
            (
                Peer::Upstream | Peer::Backbone,
                m @ (FilesMessage::Offer(_)
                | FilesMessage::Chunk { .. }
                | FilesMessage::Cancel { .. }),
            ) => self.on_sender_message(from, &m, body, now),
            _ => self.stats.ignored += 1,
        }
    }

    fn on_present(
        &mut self,
        from: Peer,
        rights: Rights,
        site: &str,
        service: &str,
        body: &[u8],
        now: Instant,
    ) {
        let Some(i) = self.service_index(service) else {
            self.stats.ignored += 1;
            return;
        };
        if rights.subscribe & (1 << i) == 0 {
            // Its right taken (the users file reloaded): what it was routed for in this
            // service goes now, not when its routes are forgotten a minute later.
            if let Some(r) = self.routes.get_mut(&from) {
                r.retain(|(j, _), _| *j != i);
            }
            self.stats.ignored += 1;
            return;
        }
        if site == self.cfg.site {
            self.stats.ignored += 1;
            return;
        }
        let routes = self.routes.entry(from).or_default();
        let key = (i, site.to_owned());
        if !routes.contains_key(&key) && routes.len() >= MAX_ROUTES_PER_PEER {
            // Full: the route heard from least recently goes, if it is no longer heard
            // (live routes are not pushed out by a flood of new names).
            let oldest = routes
                .iter()
                .min_by_key(|(_, at)| **at)
                .filter(|(_, at)| now.saturating_duration_since(**at) >= ROUTE_FORGOTTEN)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    routes.remove(&k);
                }
                None => {
                    self.stats.ignored += 1;
                    return;
                }
            }
        }
        routes.insert(key, now);
        if let Some((tx, _)) = self.sender.as_mut() {
            tx.handle_present(site, service, now);
        }
        self.tell_restart_cancels(from, i, site, now);
        // Senders above learn of the site through this node.
        for to in UP.into_iter().filter(|p| *p != from) {
            self.stats.relayed_up += 1;
            self.out.push_back(Output {
                to,
                body: body.to_vec(),
                droppable: true,
            });
        }
    }

    /// Cancels the uploads the last run never finished at `site` (of service `i`),
    /// which was just heard from `from`.
    fn tell_restart_cancels(&mut self, from: Peer, i: usize, site: &str, now: Instant) {
        if self.restart_cancels.is_empty() {
            return;
        }
        let Some((_, spool)) = self.sender.as_mut() else {
            return;
        };
        // Over: the spool forgets them.
        self.restart_cancels.retain(|c| {
            let over = c.until <= now;
            if over {
                let _ = spool.cancel_over(c.transfer);
            }
            !over
        });
        let mut due = Vec::new();
        for c in self.restart_cancels.iter_mut().filter(|c| c.service == i) {
            if !c.told.contains_key(site) && c.told.len() >= MAX_ROUTES_PER_PEER {
                continue;
            }
            let told = c.told.entry(site.to_owned()).or_default();
            if *told < RESTART_CANCEL_TIMES {
                *told += 1;
                due.push(c.transfer);
                if *told == RESTART_CANCEL_TIMES {
                    // Told: not again after a restart.
                    let told = c.told.iter().filter(|(_, n)| **n >= RESTART_CANCEL_TIMES);
                    let kept = PendingCancel {
                        transfer: c.transfer,
                        service: self.cfg.services[i].clone(),
                        until_ms: c.until_ms,
                        told: told.map(|(site, _)| site.clone()).collect(),
                    };
                    let _ = spool.keep_cancel(&kept);
                }
            }
        }
        for transfer in due {
            let cancel = FilesMessage::Cancel {
                transfer,
                reason: UNFINISHED,
            };
            self.send(from, &cancel, true);
        }
    }

    /// An offer, chunk or cancel from another node's sender: to this node's receiver,
    /// and down every route to a site of its service (never back where it came from).
    fn on_sender_message(&mut self, from: Peer, m: &FilesMessage, body: &[u8], now: Instant) {
        let service = match m {
            FilesMessage::Offer(o) => {
                let Some(i) = self.service_index(o.service) else {
                    self.stats.ignored += 1;
                    return;
                };
                if !self.relayed.contains_key(&o.transfer) {
                    if self.relayed_order.len() >= MAX_RELAYED {
                        if let Some(old) = self.relayed_order.pop_front() {
                            self.relayed.remove(&old);
                        }
                    }
                    self.relayed.insert(o.transfer, (i, from));
                    self.relayed_order.push_back(o.transfer);
                }
                i
            }
            FilesMessage::Chunk { transfer, .. } | FilesMessage::Cancel { transfer, .. } => {
                // Or a partial file a previous run of this site left: no offer of it
                // may come again (its sender gave it up and cancels it), and its
                // chunks are taken before the next offer.
                let known = self.relayed.get(transfer).map(|r| r.0).or_else(|| {
                    let (rx, _) = self.receiver.as_ref()?;
                    self.service_index(rx.partial_service(*transfer)?)
                });
                let Some(i) = known else {
                    self.stats.ignored += 1;
                    return;
                };
                i
            }
            _ => return,
        };
        if let Some((rx, inbox)) = self.receiver.as_mut() {
            rx.handle(m, now, inbox);
        }
        let down: Vec<Peer> = self
            .routes
            .iter()
            .filter(|(p, r)| **p != from && r.keys().any(|(s, _)| *s == service))
            .map(|(p, _)| *p)
            .collect();
        let droppable = !matches!(m, FilesMessage::Cancel { .. });
        for to in down {
            self.stats.relayed_down += 1;
            self.out.push_back(Output {
                to,
                body: body.to_vec(),
                droppable,
            });
        }
    }

    fn on_put(&mut self, conn: usize, user: &str, rights: Rights, p: &Put, now: Instant) {
        let Some(i) = self.service_index(p.service) else {
            let reason = format!(
                "this node has no files service {:?} (its services: {:?})",
                p.service, self.cfg.services
            );
            return self.refuse(conn, p.request, &reason);
        };
        if rights.publish & (1 << i) == 0 {
            let reason = format!("user {user:?} may not publish service {:?}", p.service);
            return self.refuse(conn, p.request, &reason);
        }
        if self.uploads.contains_key(&(conn, p.request)) {
            return self.refuse(
                conn,
                p.request,
                "an upload with this request number is in progress",
            );
        }
        let Some((tx, _)) = self.sender.as_ref() else {
            return self.refuse(
                conn,
                p.request,
                "this node sends no files ([files] spool is not set)",
            );
        };
        if let Err(e) = check_name(p.name) {
            return self.refuse(
                conn,
                p.request,
                &format!("file name {:?} refused: {e}", p.name),
            );
        }
        let cfg = tx.config();
        if tx.queued_files() >= cfg.max_files {
            let reason = format!(
                "the send queue is full: {} files queued, the limit is {}",
                tx.queued_files(),
                cfg.max_files
            );
            return self.refuse(conn, p.request, &reason);
        }
        if tx.queued_bytes().saturating_add(p.size) > cfg.max_bytes {
            let reason = format!(
                "the send queue is full: {} bytes queued and {} more would pass the limit of {}",
                tx.queued_bytes(),
                p.size,
                cfg.max_bytes
            );
            return self.refuse(conn, p.request, &reason);
        }
        if self.uploads.len() >= self.cfg.max_uploads {
            let reason = format!(
                "{} uploads are in progress at this node; try again shortly",
                self.uploads.len()
            );
            return self.refuse(conn, p.request, &reason);
        }
        // One user (however slowly its bytes come) never holds every upload or the
        // whole queue: the others can still send.
        let (mine, my_bytes) = self
            .uploads
            .values()
            .filter(|u| &*u.user == user)
            .fold((0, 0u64), |(n, b), u| (n + 1, b.saturating_add(u.size)));
        if mine >= (self.cfg.max_uploads / 2).max(1) {
            let reason = format!(
                "user {user:?} has {mine} uploads in progress, the most one user may have; try again when one is done"
            );
            return self.refuse(conn, p.request, &reason);
        }
        if my_bytes.saturating_add(p.size) > cfg.max_bytes / 2 {
            let reason = format!(
                "user {user:?}'s uploads in progress would hold {} bytes, more than half the send queue's limit of {} (one user's uploads hold at most half of [files] max_queue_mb)",
                my_bytes.saturating_add(p.size),
                cfg.max_bytes
            );
            return self.refuse(conn, p.request, &reason);
        }
        let transfer = self.next_id();
        let wall = self.wall_ms(now);
        let (tx, spool) = self.sender.as_mut().expect("checked");
        let writer = match spool.begin(transfer, p.size) {
            Ok(w) => w,
            Err(e) => {
                return self.refuse(
                    conn,
                    p.request,
                    &format!("the node cannot spool the file: {e}"),
                )
            }
        };
        // Queued now, its chunks sent as they arrive (the sites check the SHA-256
        // announced; the last chunk waits until the node has checked it too).
        let file = NewFile {
            transfer,
            service: p.service.to_owned(),
            name: p.name.to_owned(),
            size: p.size,
            sha256: p.sha256,
            to: (!p.to.is_empty()).then(|| p.to.iter().map(|s| (*s).to_owned()).collect()),
            expires_ms: wall + self.cfg.expire_after.as_millis() as u64,
        };
        let m = match tx.enqueue_arriving(file, now) {
            Ok(t) => tx.transfer(t).expect("queued").0.clone(),
            Err(e) => {
                spool.remove(transfer);
                return self.refuse(conn, p.request, &e.to_string());
            }
        };
        // Chunks of a file larger than what comes with its Put reach the sites before
        // it is whole here: logged, so that a restart in between cancels it at the
        // sites rather than leaving them its first part until they give it up. Best
        // effort: a spool that cannot log fails the upload at its end anyway.
        if p.size > PUT_FIRST_WINDOW {
            let _ = spool.note_arriving(&m);
        }
        self.record_queued(&m, user.to_owned(), now);
        self.uploads.insert(
            (conn, p.request),
            Upload {
                user: user.into(),
                size: p.size,
                sha256: p.sha256,
                transfer,
                writer,
                acked: 0,
                last_data: now,
            },
        );
        self.stats.uploads += 1;
        let window = self.cfg.upload_window;
        self.answer(
            conn,
            PutAnswer {
                request: p.request,
                state: PutState::Go,
                transfer,
                received: 0,
                window,
                reason: "",
            },
        );
        if p.size == 0 {
            self.finish_upload(conn, p.request, now);
        }
    }

    fn drop_upload(&mut self, conn: usize, request: u32, reason: &str) {
        if let Some(u) = self.uploads.remove(&(conn, request)) {
            self.withdraw_upload(u, reason);
        }
        self.refuse(conn, request, reason);
    }

    /// An upload that will not be whole: its bytes go, and its transfer is withdrawn
    /// from the sites that started on it.
    fn withdraw_upload(&mut self, u: Upload, reason: &str) {
        drop(u.writer);
        if let Some((tx, spool)) = self.sender.as_mut() {
            spool.remove(u.transfer);
            tx.withdraw(u.transfer, &format!("the upload failed: {reason}"));
        }
    }

    fn on_put_data(&mut self, conn: usize, request: u32, offset: u64, data: &[u8], now: Instant) {
        let Some(u) = self.uploads.get_mut(&(conn, request)) else {
            self.stats.ignored += 1;
            return;
        };
        if offset != u.writer.len() {
            let reason = format!(
                "bytes missing: the node has {} and was sent bytes from {offset} (the node was too busy; send again)",
                u.writer.len()
            );
            return self.drop_upload(conn, request, &reason);
        }
        if u.writer.len() + data.len() as u64 > u.size {
            let reason = format!("more bytes than the {} announced", u.size);
            return self.drop_upload(conn, request, &reason);
        }
        if u.writer.len() + data.len() as u64 > u.acked + self.cfg.upload_window {
            let reason = format!(
                "bytes beyond the window: the node acknowledged {} and allows {} more",
                u.acked, self.cfg.upload_window
            );
            return self.drop_upload(conn, request, &reason);
        }
        if let Err(e) = u.writer.write(data) {
            return self.drop_upload(
                conn,
                request,
                &format!("the node cannot spool the file: {e}"),
            );
        }
        // Bytes, not messages, keep an upload alive: empty ones would hold its place.
        if !data.is_empty() {
            u.last_data = now;
        }
        let received = u.writer.len();
        if received == u.size {
            return self.finish_upload(conn, request, now);
        }
        let transfer = u.transfer;
        if let Some((tx, _)) = self.sender.as_mut() {
            tx.handle_uploaded(transfer, received, false, now);
        }
        let u = self.uploads.get_mut(&(conn, request)).expect("live");
        if received - u.acked >= self.cfg.upload_window / 2 {
            u.acked = received;
            let (transfer, window) = (u.transfer, self.cfg.upload_window);
            self.answer(
                conn,
                PutAnswer {
                    request,
                    state: PutState::Progress,
                    transfer,
                    received,
                    window,
                    reason: "",
                },
            );
        }
    }

    fn finish_upload(&mut self, conn: usize, request: u32, now: Instant) {
        let u = self.uploads.remove(&(conn, request)).expect("an upload");
        let transfer = u.transfer;
        let (tx, spool) = self.sender.as_mut().expect("uploads need a sender");
        spool.written(transfer, &u.writer);
        let (size, sha) = u.writer.finish();
        let reason = if sha != u.sha256 {
            "the bytes received do not match the SHA-256 announced".to_string()
        } else if tx.transfer(transfer).is_none() {
            ENDED_BEFORE_UPLOAD.to_string()
        } else {
            let fsync = spool.fsync();
            if fsync != crate::inbox::Fsync::Never {
                // Logged queued once its bytes are on the disk, said queued (and its
                // last chunk sent: no site can finish it before) once the log is
                // (`sync_spool`).
                self.queued_unsynced.push(UnsyncedUpload {
                    conn: Some(conn),
                    request,
                    transfer,
                    size,
                });
                self.spool_sync_due
                    .get_or_insert(now + fsync.commit_delay());
                return;
            }
            tx.handle_uploaded(transfer, size, true, now);
            match save_queued(tx, spool, &self.records, transfer) {
                Ok(()) => return self.answer_queued(conn, request, transfer, size),
                Err(e) => e,
            }
        };
        spool.remove(transfer);
        tx.withdraw(transfer, &format!("the upload failed: {reason}"));
        self.refuse(conn, request, &reason);
    }

    /// A queued file into the record (and the audit log): its target sites queued.
    fn record_queued(&mut self, m: &Manifest, user: String, now: Instant) {
        let wall = self.wall_ms(now);
        let sites = m
            .targets
            .iter()
            .map(|s| {
                (
                    s.clone(),
                    SiteLine {
                        state: Delivery::Queued,
                        since_ms: wall,
                        reason: String::new(),
                    },
                )
            })
            .collect();
        self.put_record(m.clone(), sites, false);
        self.events.push_back(HubEvent::Queued {
            manifest: m.clone(),
            user,
        });
    }

    /// Answers `requests` of `conn` (one walk of the record, a report for each).
    fn on_query(&mut self, conn: usize, rights: Rights, requests: &[u32]) {
        let visible = rights.publish | rights.subscribe;
        let mut entries: Vec<ReportEntry> = Vec::new();
        let mut parts = Vec::new();
        let mut size = 0;
        // A file for every site, before it starts, has no site yet.
        let queued = SiteLine {
            state: Delivery::Queued,
            since_ms: 0,
            reason: String::new(),
        };
        let mut in_order: Vec<&Record> = self.records.values().collect();
        in_order.sort_by_key(|r| r.seq);
        for rec in in_order {
            let m = &rec.manifest;
            let Some(i) = self.cfg.services.iter().position(|s| *s == m.service) else {
                continue;
            };
            if visible & (1 << i) == 0 {
                continue;
            }
            let lines: Vec<(&str, &SiteLine)> = if rec.sites.is_empty() {
                vec![]
            } else {
                rec.sites.iter().map(|(s, l)| (s.as_str(), l)).collect()
            };
            let lines = if lines.is_empty() {
                vec![("", &queued)]
            } else {
                lines
            };
            for (site, line) in lines {
                let e = ReportEntry {
                    transfer: m.transfer,
                    service: &m.service,
                    name: &m.name,
                    size: m.size,
                    sha256: m.sha256,
                    site,
                    state: line.state.as_str(),
                    since_ms: line.since_ms,
                    reason: &line.reason,
                };
                let len = 80 + m.service.len() + m.name.len() + site.len() + line.reason.len();
                if size + len > REPORT_BYTES && !entries.is_empty() {
                    parts.push(std::mem::take(&mut entries));
                    size = 0;
                }
                size += len;
                entries.push(e);
            }
        }
        parts.push(entries);
        let mut bodies = Vec::new();
        for &request in requests {
            for (i, part) in parts.iter().enumerate() {
                let mut body = Vec::new();
                let report = FilesMessage::Report {
                    request,
                    last: i + 1 == parts.len(),
                    entries: part.clone(),
                };
                if report.encode(&mut body).is_ok() {
                    bodies.push(body);
                }
            }
        }
        for body in bodies {
            self.out.push_back(Output {
                to: Peer::Conn(conn),
                body,
                droppable: false,
            });
        }
    }

    /// Whether a file of this node's outbox named `name`, of `size` bytes, could be
    /// queued now (its name, a files service, a spool, room in the queue): asked
    /// before it is hashed, which takes a while for a large one.
    pub fn can_enqueue_local(&self, name: &str, size: u64) -> Result<(), String> {
        check_name(name).map_err(|e| format!("file name {name:?} refused: {e}"))?;
        if self.cfg.services.is_empty() {
            return Err("no files service".into());
        }
        let Some((tx, _)) = self.sender.as_ref() else {
            return Err("this node sends no files ([files] spool is not set)".into());
        };
        let cfg = tx.config();
        if tx.queued_files() >= cfg.max_files
            || tx.queued_bytes().saturating_add(size) > cfg.max_bytes
        {
            return Err(format!(
                "the send queue is full ({} files, {} bytes queued)",
                tx.queued_files(),
                tx.queued_bytes()
            ));
        }
        Ok(())
    }

    /// Whether an outbox file is synced as it is hashed ([`hash_outbox_file`]'s
    /// `sync`): the spool's fsync policy is not `never`.
    ///
    /// [`hash_outbox_file`]: crate::spool::hash_outbox_file
    pub fn outbox_syncs(&self) -> bool {
        self.sender
            .as_ref()
            .is_some_and(|(_, spool)| spool.fsync() != crate::inbox::Fsync::Never)
    }

    /// Queues a file of this node's outbox for every site of the first service, once
    /// hashed (`hashed`: its size and SHA-256, from [`hash_outbox_file`] with
    /// [`Hub::outbox_syncs`]): queued, then moved into the spool (it leaves the outbox).
    /// An error leaves it where it is (it is tried again at the next look).
    ///
    /// [`hash_outbox_file`]: crate::spool::hash_outbox_file
    pub fn enqueue_hashed(
        &mut self,
        path: &std::path::Path,
        name: &str,
        hashed: (u64, [u8; 32]),
        now: Instant,
    ) -> Result<Manifest, String> {
        let (size, sha256) = hashed;
        self.can_enqueue_local(name, size)?;
        let service = self.cfg.services[0].clone();
        let wall = self.wall_ms(now);
        let transfer = self.next_id();
        let (tx, spool) = self.sender.as_mut().expect("checked");
        spool.hashed_in_place(transfer, size);
        let file = NewFile {
            transfer,
            service,
            name: name.to_owned(),
            size,
            sha256,
            to: None,
            expires_ms: wall + self.cfg.expire_after.as_millis() as u64,
        };
        let m = match tx.enqueue(file, now) {
            Ok(t) => tx.transfer(t).expect("queued").0.clone(),
            Err(e) => {
                spool.remove(transfer);
                return Err(e.to_string());
            }
        };
        // The manifest first, then the file: see `Spool::hash_in_place`. With a policy
        // the manifest is on the disk before the move is.
        let synced = |spool: &mut Spool| match spool.fsync() {
            crate::inbox::Fsync::Never => Ok(()),
            _ => spool.sync_log().map(|_| ()),
        };
        if let Err(e) = spool
            .save(&m)
            .and_then(|()| synced(spool))
            .and_then(|()| spool.move_in(transfer, path, size))
        {
            spool.remove(transfer);
            tx.withdraw(transfer, "it could not be taken into the spool");
            return Err(format!("cannot take it into the spool: {e}"));
        }
        let fsync = spool.fsync();
        if fsync != crate::inbox::Fsync::Never {
            self.spool_sync_due
                .get_or_insert(now + fsync.commit_delay());
        }
        self.record_queued(&m, "outbox".into(), now);
        Ok(m)
    }

    /// A connection's rights now (the users file was reloaded): every right it has on
    /// the node's file services, not only those one message needs, and `may_be_site`,
    /// the sites it may speak for. What it may no longer have ends at once, as a
    /// reload closes a subscriber's streams and disconnects a publisher: its routes in
    /// the services it may no longer receive and to the sites it may no longer speak
    /// for (without waiting for its next presence, which a peer need never send, and
    /// which the node does not pass on for a site the peer may not speak for), its
    /// uploads in the services it may no longer send (withdrawn at the sites, refused
    /// with the reason), and the status queries it has waiting see only what it may
    /// see now.
    pub fn handle_rights(
        &mut self,
        conn: usize,
        rights: Rights,
        may_be_site: &dyn Fn(&str) -> bool,
    ) {
        if let Some(r) = self.routes.get_mut(&Peer::Conn(conn)) {
            r.retain(|(i, site), _| rights.subscribe & (1 << i) != 0 && may_be_site(site));
            if r.is_empty() {
                self.routes.remove(&Peer::Conn(conn));
            }
        }
        let mut lost: Vec<(u32, String, Box<str>)> = Vec::new();
        for (&(c, request), u) in &self.uploads {
            if c != conn {
                continue;
            }
            let service = self
                .sender
                .as_ref()
                .and_then(|(tx, _)| tx.service_of(u.transfer))
                .map(str::to_owned);
            let allowed = service
                .as_deref()
                .and_then(|s| self.service_index(s))
                .is_some_and(|i| rights.publish & (1 << i) != 0);
            if !allowed {
                lost.push((request, service.unwrap_or_default(), u.user.clone()));
            }
        }
        lost.sort_unstable();
        for (request, service, user) in lost {
            let why = format!(
                "user {user:?} may no longer publish service {service:?} (the users file was reloaded)"
            );
            self.drop_upload(conn, request, &why);
        }
        self.queries.restrict(conn, rights);
    }

    /// A connection is gone: its uploads are dropped, its routes forgotten.
    pub fn handle_gone(&mut self, conn: usize) {
        let mine: Vec<u32> = self
            .uploads
            .keys()
            .filter(|(c, _)| *c == conn)
            .map(|(_, r)| *r)
            .collect();
        for r in mine {
            if let Some(u) = self.uploads.remove(&(conn, r)) {
                self.withdraw_upload(u, "the uploading client went away");
            }
        }
        self.routes.remove(&Peer::Conn(conn));
        self.queries.forget(conn);
        // Its whole uploads are queued all the same; no one is there to be told.
        for w in &mut self.queued_unsynced {
            if w.conn == Some(conn) {
                w.conn = None;
            }
        }
        // Nothing more for it: the end of its messages, for whoever delivers them.
        self.out.push_back(Output {
            to: Peer::Conn(conn),
            body: Vec::new(),
            droppable: false,
        });
    }

    /// The backbone driver's totals so far (NAKs received, datagrams sent): the
    /// sender's rate follows the backbone's loss ([`crate::congestion`]).
    pub fn handle_network_counters(&mut self, naks: u64, datagrams: u64, now: Instant) {
        if let Some((sender, _)) = self.sender.as_mut() {
            sender.handle_network_counters(naks, datagrams, now);
        }
    }

    /// Its deadlines passed by `now` (the sender's pacing and repairs, the receiver's).
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.spool_sync_due.is_some_and(|at| now >= at) {
            self.sync_spool(now);
        }
        for (conn, rights, requests) in self.queries.due(now) {
            self.on_query(conn, rights, &requests);
        }
        for r in self.routes.values_mut() {
            r.retain(|_, at| now.saturating_duration_since(*at) < ROUTE_FORGOTTEN);
        }
        self.routes.retain(|_, r| !r.is_empty());
        let stale: Vec<(usize, u32)> = self
            .uploads
            .iter()
            .filter(|(_, u)| now.saturating_duration_since(u.last_data) >= self.cfg.upload_timeout)
            .map(|(k, _)| *k)
            .collect();
        for (c, r) in stale {
            let reason = format!(
                "no bytes for {} s: the upload is dropped",
                self.cfg.upload_timeout.as_secs()
            );
            self.drop_upload(c, r, &reason);
        }
        if let Some((tx, _)) = self.sender.as_mut() {
            tx.handle_timeout(now);
        }
        if let Some((rx, inbox)) = self.receiver.as_mut() {
            rx.handle_timeout(now, inbox);
            if inbox.has_pending() {
                let due = *self
                    .commit_due
                    .get_or_insert(now + inbox.fsync().commit_delay());
                if now >= due {
                    self.commit_pending(now);
                }
            }
        }
    }

    /// Syncs the spool (under its fsync policy): the bytes of the uploads that waited
    /// and the directory, then their manifests into the log, then the log; then tells
    /// their clients that the files are queued. In that order a power loss leaves no
    /// manifest without its bytes and no client told of a file the log lacks. An upload
    /// the spool cannot sync or log is refused (a file the node cannot keep is not one
    /// it may say it has) and withdrawn at the sites.
    fn sync_spool(&mut self, now: Instant) {
        self.spool_sync_due = None;
        let Some((tx, spool)) = self.sender.as_mut() else {
            return;
        };
        let waiting = std::mem::take(&mut self.queued_unsynced);
        let mut failed: Vec<(UnsyncedUpload, String)> = Vec::new();
        let mut saved = Vec::new();
        match spool.sync_data() {
            Ok(n) => {
                self.stats.spool_syncs += n as u64;
                for w in waiting {
                    match save_queued(tx, spool, &self.records, w.transfer) {
                        Ok(()) => saved.push(w),
                        Err(e) => failed.push((w, e)),
                    }
                }
                match spool.sync_log() {
                    Ok(n) => self.stats.spool_syncs += n as u64,
                    Err(e) => {
                        self.stats.spool_sync_failures += 1;
                        let why = format!("the node cannot sync its spool: {e}");
                        failed.extend(saved.drain(..).map(|w| (w, why.clone())));
                    }
                }
            }
            Err(e) => {
                self.stats.spool_sync_failures += 1;
                let why = format!("the node cannot sync its spool: {e}");
                failed.extend(waiting.into_iter().map(|w| (w, why.clone())));
            }
        }
        for (w, why) in &failed {
            spool.remove(w.transfer);
            tx.withdraw(w.transfer, &format!("the upload failed: {why}"));
        }
        for w in &saved {
            tx.handle_uploaded(w.transfer, w.size, true, now);
        }
        for (w, why) in failed {
            if let Some(conn) = w.conn {
                self.refuse(conn, w.request, &why);
            }
        }
        for w in saved {
            if let Some(conn) = w.conn {
                self.answer_queued(conn, w.request, w.transfer, w.size);
            }
        }
    }

    /// Commits the completed files waiting for their sync now (their delay is up, or
    /// the node stops).
    pub fn commit_pending(&mut self, now: Instant) {
        if self.spool_sync_due.is_some() {
            self.sync_spool(now);
        }
        self.commit_due = None;
        if let Some((rx, inbox)) = self.receiver.as_mut() {
            for (t, r) in inbox.flush() {
                rx.handle_committed(t, r, now, inbox);
            }
        }
    }

    /// Whether the sender may send a chunk now: input should wait for it (the pace
    /// keeps only a short burst of what it allows).
    pub fn chunk_due(&self, now: Instant) -> bool {
        self.sender
            .as_ref()
            .and_then(|(tx, _)| tx.next_chunk_at())
            .is_some_and(|at| at <= now)
    }

    /// When `handle_timeout` is next needed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut at: Option<Instant> = None;
        let mut earliest = |t: Option<Instant>| {
            if let Some(t) = t {
                at = Some(at.map_or(t, |a| a.min(t)));
            }
        };
        earliest(self.sender.as_ref().and_then(|(tx, _)| tx.poll_timeout()));
        earliest(self.receiver.as_ref().and_then(|(rx, _)| rx.poll_timeout()));
        earliest(self.queries.poll_timeout());
        earliest(self.spool_sync_due);
        earliest(
            self.uploads
                .values()
                .map(|u| u.last_data + self.cfg.upload_timeout)
                .min(),
        );
        if self.receiver.as_ref().is_some_and(|(_, i)| i.has_pending()) {
            // Files to commit: when their delay is up (at once, to start it).
            earliest(Some(self.commit_due.unwrap_or(self.t0)));
        }
        at
    }

    /// Runs the sender and receiver: their messages to the routes, their events to the
    /// record. Returns whether the sender has more to send now (call again).
    pub fn pump(&mut self, now: Instant) -> bool {
        let mut more = false;
        // Transfers the sender gave up (expired): an upload still bringing one ends.
        let mut ended = Vec::new();
        let wall = self.wall_ms(now);
        if let Some((tx, spool)) = self.sender.as_mut() {
            let mut n = 0;
            while n < PUMP_BATCH && tx.poll_transmit(now, spool, &mut self.buf) {
                n += 1;
                // A transfer that ended lately too (a Cancel told again), which the
                // record may no longer list.
                let service = crate::wire::transfer_of(&self.buf).and_then(|transfer| {
                    tx.service_of(transfer).map(str::to_owned).or_else(|| {
                        self.records
                            .get(&transfer)
                            .map(|r| r.manifest.service.clone())
                    })
                });
                let Some(i) = service.and_then(|s| self.cfg.services.iter().position(|x| *x == s))
                else {
                    continue;
                };
                let droppable = !crate::wire::is_cancel(&self.buf);
                for (peer, r) in &self.routes {
                    if r.keys().any(|(s, _)| *s == i) {
                        self.out.push_back(Output {
                            to: *peer,
                            body: self.buf.clone(),
                            droppable,
                        });
                    }
                }
            }
            more = n == PUMP_BATCH;
            while let Some(e) = tx.poll_event() {
                // An upload still coming in for a transfer that is over (failed,
                // expired, cancelled) ends with it: its spool space is given back now.
                if let SenderEvent::Finished { transfer, .. } = e {
                    ended.push(transfer);
                }
                Self::sender_event(
                    spool,
                    &mut self.records,
                    &mut self.finished_order,
                    &mut self.events,
                    e,
                    wall,
                );
            }
        }
        let mut received = Vec::new();
        if let Some((rx, _)) = self.receiver.as_mut() {
            while rx.poll_transmit(now, &mut self.buf) {
                // A status goes back the way its transfer came; a presence every way
                // toward senders.
                let origin = crate::wire::transfer_of(&self.buf)
                    .and_then(|t| self.relayed.get(&t).map(|(_, p)| *p));
                let ways: &[Peer] = match &origin {
                    Some(p) => std::slice::from_ref(p),
                    None => &UP,
                };
                for &to in ways {
                    self.out.push_back(Output {
                        to,
                        body: self.buf.clone(),
                        droppable: true,
                    });
                }
            }
            while let Some(e) = rx.poll_event() {
                received.push(e);
            }
        }
        for e in received {
            match e {
                ReceiverEvent::Arrived { manifest } => {
                    self.record_received(&manifest, Delivery::Done, String::new(), wall);
                    self.events.push_back(HubEvent::Arrived { manifest });
                }
                ReceiverEvent::Failed { manifest, reason }
                | ReceiverEvent::Cancelled { manifest, reason } => {
                    self.record_received(&manifest, Delivery::Failed, reason.clone(), wall);
                    self.events.push_back(HubEvent::Failed { manifest, reason })
                }
            }
        }
        for t in ended {
            let key = self
                .uploads
                .iter()
                .find(|(_, u)| u.transfer == t)
                .map(|(k, _)| *k);
            if let Some((conn, request)) = key {
                self.uploads.remove(&(conn, request));
                self.refuse(conn, request, ENDED_BEFORE_UPLOAD);
            }
        }
        // A site's received files too: a node that only receives keeps no more.
        self.forget_beyond_keep();
        more
    }

    /// A file this site received, or could not take (as the audit log's history has
    /// it after a restart): its line in the record. A file this node both sent and
    /// received keeps its sender's record.
    fn record_received(&mut self, m: &Manifest, state: Delivery, reason: String, wall: u64) {
        let line = SiteLine {
            state,
            since_ms: wall,
            reason,
        };
        match self.records.get_mut(&m.transfer) {
            Some(rec) if rec.manifest.sender == self.cfg.site => {}
            // Failed before, taken now (or failed again).
            Some(rec) => {
                rec.sites = BTreeMap::from([(self.cfg.site.clone(), line)]);
            }
            None => {
                let sites = BTreeMap::from([(self.cfg.site.clone(), line)]);
                self.put_record(m.clone(), sites, true);
                self.finished_order.push_back(m.transfer);
            }
        }
    }

    /// One of the sender's events: into the spool, the records and the audit events.
    fn sender_event(
        spool: &mut Spool,
        records: &mut BTreeMap<u64, Record>,
        finished_order: &mut VecDeque<u64>,
        events: &mut VecDeque<HubEvent>,
        e: SenderEvent,
        wall: u64,
    ) {
        // The spool keeps what a restart needs: each site's state, and the bytes until
        // the transfer is over.
        match e {
            SenderEvent::Site {
                transfer,
                site,
                state,
                reason,
            } => {
                if let Err(err) = spool.record(transfer, &site, state, &reason, Some(wall)) {
                    events.push_back(HubEvent::SpoolError {
                        reason: format!("cannot record a site's state in the spool: {err}"),
                    });
                }
                if let Some(rec) = records.get_mut(&transfer) {
                    rec.sites.insert(
                        site.clone(),
                        SiteLine {
                            state,
                            since_ms: wall,
                            reason: reason.clone(),
                        },
                    );
                    events.push_back(HubEvent::Site {
                        manifest: rec.manifest.clone(),
                        site,
                        state,
                        reason,
                    });
                }
            }
            SenderEvent::ReplacedAt {
                transfer,
                by,
                sites,
            } => {
                if let Err(err) = spool.record_replaced_at(transfer, by, &sites) {
                    events.push_back(HubEvent::SpoolError {
                        reason: format!("cannot keep a file's newer files in the spool: {err}"),
                    });
                }
            }
            SenderEvent::Targets { transfer, targets } => {
                if let Some(rec) = records.get_mut(&transfer) {
                    rec.manifest.targets = targets;
                    if let Err(err) = spool.resave(&rec.manifest) {
                        events.push_back(HubEvent::SpoolError {
                            reason: format!("cannot keep the sites of a file in the spool: {err}"),
                        });
                    }
                }
            }
            SenderEvent::Finished {
                transfer,
                delivered,
            } => {
                spool.remove(transfer);
                if let Some(rec) = records.get_mut(&transfer) {
                    rec.finished = true;
                    finished_order.push_back(transfer);
                    events.push_back(HubEvent::Finished {
                        manifest: rec.manifest.clone(),
                        delivered,
                    });
                }
            }
        }
    }

    /// A message to send, if any.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// What happened, for the audit log.
    pub fn poll_event(&mut self) -> Option<HubEvent> {
        self.events.pop_front()
    }
}
