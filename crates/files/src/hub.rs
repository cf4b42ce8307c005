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

mod record;
mod restore;
mod uploads;

use uploads::{UnsyncedUpload, Upload, ENDED_BEFORE_UPLOAD};

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::audit::HubEvent;
use crate::inbox::Inbox;
use crate::manifest::Manifest;
use crate::receiver::{Receiver, ReceiverEvent, ReceiverStats};
use crate::sender::{Delivery, Sender, SenderEvent, SenderStats};
use crate::spool::{PendingCancel, Spool};
use crate::wire::{FilesMessage, PutAnswer, PutState};

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

    /// A message to send, if any.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// What happened, for the audit log.
    pub fn poll_event(&mut self) -> Option<HubEvent> {
        self.events.pop_front()
    }
}
