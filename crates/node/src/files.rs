//! `[files]` (docs/FILES.md): the node's files on a thread of their own. Spooling an
//! upload, writing chunks and syncing an inbox take disk time the event loop must
//! never wait for. The loop hands the thread what peers and the upstream link sent
//! (with each sender's rights on the node's file services), and sends what the thread
//! answers; the thread runs `tickwire_files::Hub` and writes the audit log.
//!
//! Both directions are bounded: the loop never blocks on the thread (a message that
//! does not fit is dropped and counted: the transfer repairs a lost chunk, an upload
//! with a gap is refused), and the thread waits for the loop when the loop is behind.

mod audit_log;
mod config;
mod figures;
mod outbox;
mod thread;
mod unanswered;

pub use config::{FilesSection, FsyncSetting};
pub use figures::FilesFigures;
use figures::ThreadFigures;
use log::{error, info, warn};
use mio::Waker;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use thread::{open, spawn, Opening};
use tickwire_auth::Action;
use tickwire_backbone::{auth::Keys, FilesFraming, FilesOffer, FilesStream};
use tickwire_core::{chunk_buffers, ConnId, FilesIn, Node};
use tickwire_files::{Output, Peer, Rights};
use unanswered::{Unanswered, THREAD_BEHIND, THREAD_DOWN};

enum Input {
    Message {
        from: Peer,
        user: String,
        rights: Rights,
        body: Vec<u8>,
    },
    /// A message the backbone brought (its seal checked here, see [`FilesWire`]).
    FromBackbone(tickwire_backbone::FilesIn),
    /// How to frame messages for the backbone now, and its keys when they changed.
    Wire {
        framing: Option<FilesFraming>,
        keys: Option<Keys>,
    },
    Gone(ConnId),
    /// A connection's rights on every file service now, and the sites it may speak
    /// for (the users file was reloaded): what it may no longer have ends
    /// ([`Hub::handle_rights`]).
    Rights(ConnId, Rights, tickwire_core::SiteTest),
    /// The backbone driver's totals: NAKs received, datagrams sent.
    Network {
        naks: u64,
        datagrams: u64,
    },
    /// Stops the thread as a defect would, once it has sent what this turn made.
    #[cfg(test)]
    Panic,
}

/// What the files thread hands the event loop.
enum ToLoop {
    /// For a peer's connection or the upstream link.
    Peer(Output),
    /// A message for the backbone, framed (and sealed) by the thread at `framed`.
    Backbone {
        stream: FilesStream,
        bytes: Vec<u8>,
        framed: Instant,
    },
}

/// How long a message framed for the backbone may wait for Aeron (a peer not there
/// yet, back pressure) before it is dropped, not offered: its seal's counter follows
/// the clock, and a receiver that has not heard its sender yet refuses one more than
/// 60 s off as a recording. The transfers send what matters again.
const FRAMED_LIFETIME: Duration = Duration::from_secs(10);

/// How often the backbone driver's loss is read for the sender's rate.
const NETWORK_SAMPLE: Duration = Duration::from_millis(50);

/// Messages waiting for the files thread at most (a chunk is at most 64 KB: 64 MB),
/// and for the event loop (16 MB).
const IN_QUEUE: usize = 1024;
const OUT_QUEUE: usize = 256;
/// Output queued for a peer past which offers and chunks wait (they are sent again).
const ROOM: usize = 1 << 20;
/// Backbone messages waiting here for room in the files thread's queue, at most: past
/// it they are dropped (and repaired).
const BACKLOG_BYTES: usize = 16 << 20;
/// How long the backbone's files stream is held in Aeron at most while the files
/// thread is behind: a site whose thread is stuck (a hung disk) then stops holding the
/// sender, and the other sites, and drops what it cannot take.
const HOLD_LIMIT: Duration = Duration::from_secs(1);

/// Backbone messages that wait in the event loop for room in the files thread's queue,
/// in order, and since when: while any wait, the backbone holds the files stream in
/// Aeron (whose flow control then holds the sender) rather than the node dropping
/// chunks that must be sent again to every site; for `HOLD_LIMIT` at most.
#[derive(Default)]
struct Backlog {
    queue: std::collections::VecDeque<tickwire_backbone::FilesIn>,
    bytes: usize,
    behind_since: Option<Instant>,
}

impl Backlog {
    fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Keeps `m` last; false (it is dropped) past `BACKLOG_BYTES`.
    fn push_back(&mut self, m: tickwire_backbone::FilesIn) -> bool {
        if self.bytes + m.bytes.len() > BACKLOG_BYTES {
            return false;
        }
        self.bytes += m.bytes.len();
        self.queue.push_back(m);
        true
    }

    /// Puts back the first one, which the thread had no room for.
    fn push_front(&mut self, m: tickwire_backbone::FilesIn) {
        self.bytes += m.bytes.len();
        self.queue.push_front(m);
    }

    fn pop_front(&mut self) -> Option<tickwire_backbone::FilesIn> {
        let m = self.queue.pop_front()?;
        self.bytes -= m.bytes.len();
        Some(m)
    }

    /// Whether the backbone holds the files stream: while messages wait, for
    /// `HOLD_LIMIT` from the first at most (a site whose thread is stuck then stops
    /// holding the sender and the other sites, and drops what it cannot keep).
    fn holds(&mut self, now: Instant) -> bool {
        if self.queue.is_empty() {
            self.behind_since = None;
            return false;
        }
        let since = *self.behind_since.get_or_insert(now);
        now.duration_since(since) < HOLD_LIMIT
    }
}

/// The event loop's handle on the files thread.
pub struct FilesThread {
    services: Vec<String>,
    input: Option<SyncSender<Input>>,
    output: Receiver<ToLoop>,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
    taken: Vec<FilesIn>,
    gone: Vec<ConnId>,
    from_upstream: Vec<Vec<u8>>,
    from_backbone: Vec<tickwire_backbone::FilesIn>,
    /// What the thread was last told of the backbone's framing and keys (the keys'
    /// version); None: nothing yet.
    wire_given: Option<(Option<FilesFraming>, Option<u64>)>,
    /// A message for the backbone that Aeron could not take yet, and when it was framed.
    held: Option<(FilesStream, Vec<u8>, Instant)>,
    /// Messages for the backbone dropped after waiting `FRAMED_LIFETIME`.
    expired: u64,
    /// Messages for the backbone dropped because no one was there to take them.
    no_one: u64,
    /// Messages for a peer's connection or the upstream link dropped: it was busy.
    to_peers: u64,
    /// Messages from the backbone waiting for room in the thread's queue.
    backlog: Backlog,
    /// Messages the loop could not hand over (the thread was behind).
    pub dropped: u64,
    /// Connections gone whose end the thread had no room for yet.
    gone_unsent: Vec<ConnId>,
    /// Connections that sent the thread a message (their routes and uploads are
    /// there), until they go.
    speakers: std::collections::HashSet<ConnId>,
    /// Connections whose rights the thread is to be told after a reload of the users
    /// file, and has had no room for yet.
    rights_unsent: Vec<ConnId>,
    /// (user, site) pairs refused and said in the log (each once).
    sites_refused: std::collections::HashSet<(String, String)>,
    /// What the thread has done, for /metrics.
    pub figures: Arc<FilesFigures>,
    /// The backbone's datagram payload, to count datagrams from bytes.
    backbone_mtu: u64,
    next_network_sample: Instant,
    /// Times the thread stopped (a panic) and was started again.
    pub restarts: u64,
    /// Uploads and queries handed to the thread and not answered yet, by connection
    /// and request: refused if the thread stops.
    unanswered: Unanswered,
    /// The thread stopped: what it left unanswered is refused once its last answers
    /// (still in its queue to the loop) are out.
    refuse_unanswered: bool,
    /// Connections gone whose last messages from the thread may still come, by id (a
    /// count: an id is reused at once, and may go again): what the thread sends to
    /// such an id before the end it marks (`Hub::handle_gone`) was for the gone
    /// connection, and is dropped, not given to a new one under its id.
    departed: std::collections::HashMap<ConnId, u32>,
    /// What starting the thread again needs, and when it may be tried.
    again: Again,
}

/// What a stopped files thread is started again from: the same settings, its spool,
/// inbox and audit log (as after a kill -9 of the node).
struct Again {
    cfg: FilesSection,
    site: String,
    waker: Arc<Waker>,
    /// When the running thread started (a thread that ran long enough resets the
    /// back-off).
    started: Instant,
    /// While stopped: when to try next.
    next_try: Option<Instant>,
    back_off: Duration,
}

/// The first wait before a stopped files thread is started again, doubled at each stop
/// that follows soon after (one bad message or file must not spin the node).
const RESTART_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between two starts.
const RESTART_MAX: Duration = Duration::from_secs(60);
/// A thread that ran this long resets the back-off.
const RESTART_FORGOTTEN: Duration = Duration::from_secs(300);

/// File-transfer messages the loop dropped, by where (for /metrics).
#[derive(Debug, Clone, Copy, Default)]
pub struct FilesDrops {
    /// For the files thread, whose queue was full (or which was stopped).
    pub to_thread: u64,
    /// For a peer's connection or the upstream link, which was busy.
    pub to_peers: u64,
    /// For the backbone, after waiting `FRAMED_LIFETIME` for Aeron.
    pub expired: u64,
    /// For the backbone, with no node there to take them.
    pub no_one: u64,
}

impl Drop for FilesThread {
    fn drop(&mut self) {
        if self.dropped > 0 {
            info!(
                "files: {} messages dropped on their way to the files thread (it was behind)",
                self.dropped
            );
        }
        if self.expired > 0 {
            info!(
                "files: {} messages for the backbone dropped after waiting {FRAMED_LIFETIME:?} for it",
                self.expired
            );
        }
        if self.no_one > 0 {
            info!(
                "files: {} messages for the backbone dropped with no node connected to take them",
                self.no_one
            );
        }
        self.input = None;
        if let Some(t) = self.thread.take() {
            // The thread may be waiting for room to hand over its output: take it until
            // the thread has seen its input close and gone.
            while !t.is_finished() {
                while self.output.try_recv().is_ok() {}
                std::thread::sleep(Duration::from_millis(1));
            }
            let _ = t.join();
        }
    }
}

/// A started files thread: its input, its output, and the thread (which ends with why
/// it could not open its directories, if it could not).
type Spawned = (
    SyncSender<Input>,
    Receiver<ToLoop>,
    std::thread::JoinHandle<Result<(), String>>,
);

/// What a panic said, when it said it as text.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    match (p.downcast_ref::<&str>(), p.downcast_ref::<String>()) {
        (Some(s), _) => format!("panic: {s}"),
        (_, Some(s)) => format!("panic: {s}"),
        _ => "panic".to_owned(),
    }
}

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl FilesThread {
    /// Opens the spool and inbox, puts back what a previous run left, and starts the
    /// thread. An error names the directory that could not be used.
    pub fn start(
        cfg: &FilesSection,
        site: &str,
        seed: u64,
        backbone_mtu: usize,
        waker: Arc<Waker>,
    ) -> Result<FilesThread, String> {
        let now = Instant::now();
        let figures = Arc::new(FilesFigures {
            sends: !cfg.spool.is_empty(),
            receives: !cfg.inbox.is_empty(),
            ..FilesFigures::default()
        });
        let opened = open(cfg, site, seed, &ThreadFigures::first(figures.clone()))?;
        let (input, output, thread) = spawn(
            Opening::Done(Box::new(opened)),
            waker.clone(),
            figures.clone(),
        )?;
        Ok(FilesThread {
            services: cfg.services.clone(),
            input: Some(input),
            output,
            thread: Some(thread),
            taken: Vec::new(),
            gone: Vec::new(),
            from_upstream: Vec::new(),
            from_backbone: Vec::new(),
            wire_given: None,
            held: None,
            expired: 0,
            no_one: 0,
            to_peers: 0,
            backlog: Backlog::default(),
            dropped: 0,
            gone_unsent: Vec::new(),
            speakers: Default::default(),
            rights_unsent: Vec::new(),
            sites_refused: Default::default(),
            figures,
            backbone_mtu: backbone_mtu.max(1) as u64,
            next_network_sample: now,
            restarts: 0,
            unanswered: Unanswered::default(),
            refuse_unanswered: false,
            departed: std::collections::HashMap::new(),
            again: Again {
                cfg: cfg.clone(),
                site: site.to_owned(),
                waker,
                started: now,
                next_try: None,
                back_off: RESTART_FIRST,
            },
        })
    }

    /// Whether the files thread runs (false between a panic and its start again).
    pub fn is_running(&self) -> bool {
        self.thread.is_some()
    }

    /// The messages the loop dropped so far, by where.
    pub fn drops(&self) -> FilesDrops {
        FilesDrops {
            to_thread: self.dropped,
            to_peers: self.to_peers,
            expired: self.expired,
            no_one: self.no_one,
        }
    }

    /// Notices a thread that stopped (only a panic stops it while the node runs) and
    /// starts it again from disk, as a node restarted after a kill -9 would: files
    /// queued stay queued, partial files resume. Sites say again where they are.
    /// True when it found the thread stopped.
    fn watch_thread(&mut self, now: Instant) -> bool {
        let finished = self.thread.take_if(|t| t.is_finished());
        let stopped = finished.is_some();
        if let Some(t) = finished {
            let why = match t.join() {
                Err(p) => panic_text(&*p),
                Ok(Err(e)) => e,
                Ok(Ok(())) => "it returned".to_owned(),
            };
            let quick = now.duration_since(self.again.started) < RESTART_FORGOTTEN;
            self.again.back_off = if quick && self.restarts > 0 {
                (self.again.back_off * 2).min(RESTART_MAX)
            } else {
                RESTART_FIRST
            };
            error!(
                "files: the files thread stopped ({why}); starting it again from its spool and inbox in {:?}",
                self.again.back_off
            );
            self.input = None;
            self.again.next_try = Some(now + self.again.back_off);
        }
        let Some(at) = self.again.next_try.filter(|&at| now >= at) else {
            return stopped;
        };
        let a = &self.again;
        let opening = Opening::OnThread {
            cfg: a.cfg.clone(),
            site: a.site.clone(),
        };
        match spawn(opening, a.waker.clone(), self.figures.clone()) {
            Ok((input, output, thread)) => {
                self.input = Some(input);
                self.output = output;
                self.thread = Some(thread);
                self.restarts += 1;
                self.again.started = now;
                self.again.next_try = None;
                // The new thread knows nothing of the old one's wire or connections,
                // and sends nothing for those gone before it.
                self.wire_given = None;
                self.held = None;
                self.gone_unsent.clear();
                self.departed.clear();
                info!(
                    "files: the files thread starts again (restart {}): it opens its spool and inbox",
                    self.restarts
                );
            }
            Err(e) => {
                self.again.back_off = (self.again.back_off * 2).min(RESTART_MAX);
                self.again.next_try = Some(at.max(now) + self.again.back_off);
                error!(
                    "files: cannot start the files thread again: {e}; trying again in {:?}",
                    self.again.back_off
                );
            }
        }
        stopped
    }

    fn submit(&mut self, input: Input) {
        if self.queue_full_for(input) {
            self.dropped += 1;
        }
    }

    /// Hands `input` to the thread: true if its queue has no room now (a thread that
    /// is gone takes nothing, and is not waited for).
    fn queue_full_for(&mut self, input: Input) -> bool {
        let Some(tx) = &self.input else {
            self.dropped += 1;
            return false;
        };
        match tx.try_send(input) {
            Ok(()) => false,
            Err(TrySendError::Full(_)) => true,
            Err(TrySendError::Disconnected(_)) => {
                self.dropped += 1;
                false
            }
        }
    }

    /// What the connection may do with each file service, for the messages that ask.
    fn rights(&self, core: &Node, conn: ConnId, kind: Option<u8>) -> Rights {
        let (publish, subscribe) = match kind {
            Some(16) => (true, false),      // Put
            Some(19) => (true, true),       // Query
            Some(PRESENT) => (false, true), // Present
            _ => return Rights::default(),  // the rest need none (or are routed by site)
        };
        let mut r = Rights::default();
        for (i, s) in self.services.iter().enumerate() {
            if publish && core.entitled(conn, Action::Publish, s) {
                r.publish |= 1 << i;
            }
            if subscribe && core.entitled(conn, Action::Subscribe, s) {
                r.subscribe |= 1 << i;
            }
        }
        r
    }

    /// Every right the connection has on the node's file services.
    fn all_rights(&self, core: &Node, conn: ConnId) -> Rights {
        let mut r = Rights::default();
        for (i, s) in self.services.iter().enumerate() {
            if core.entitled(conn, Action::Publish, s) {
                r.publish |= 1 << i;
            }
            if core.entitled(conn, Action::Subscribe, s) {
                r.subscribe |= 1 << i;
            }
        }
        r
    }

    /// The users file was reloaded: the thread is told, in the next turns, the rights
    /// (and sites) of every connection that has sent it anything, and ends what they
    /// no longer allow (routes to sites below, uploads, queries waiting).
    pub fn users_changed(&mut self) {
        // Each told its rights as they are when there is room: those not told yet of
        // an earlier reload are among them.
        self.rights_unsent = self.speakers.iter().copied().collect();
    }

    /// The site a peer's Present names, if the peer may not speak for it: what it
    /// says of a site it is not (present, done) would be believed.
    fn site_refused(&self, core: &Node, conn: ConnId, body: &[u8]) -> Option<String> {
        if body.get(2) != Some(&PRESENT) {
            return None;
        }
        match tickwire_files::wire::FilesMessage::decode(body) {
            Ok(tickwire_files::wire::FilesMessage::Present { site, .. })
                if !core.may_be_site(conn, site) =>
            {
                Some(site.to_owned())
            }
            _ => None,
        }
    }

    /// One turn of the event loop: peers' and the upstream's messages to the thread,
    /// the thread's messages to peers and the upstream.
    pub fn turn(
        &mut self,
        core: &mut Node,
        upstream: Option<&mut crate::upstream::UpstreamLink>,
        backbone: Option<&mut tickwire_backbone::Backbone>,
    ) {
        if self.watch_thread(Instant::now()) {
            self.refuse_unanswered = true;
        }
        if self.refuse_unanswered && self.input.is_some() {
            // Started again before the stopped thread's queue was out: what was left in
            // it went with it, and what is asked from now on is the new thread's.
            self.refuse_all_unanswered(core);
        }
        // First, so that a change of framing or keys has the queue's room before peers'
        // messages take it.
        if let Some(b) = backbone.as_deref() {
            self.tell_wire(b);
        }
        let mut taken = std::mem::take(&mut self.taken);
        let mut gone = std::mem::take(&mut self.gone);
        core.take_files(&mut taken, &mut gone);
        // A connection's end is never dropped: its routes would pass to the next
        // connection given its id. What the thread has no room for now goes next turn
        // (and that id's messages wait behind it, dropped as a full queue drops them).
        for &conn in &gone {
            self.unanswered.gone(conn);
            *self.departed.entry(conn).or_default() += 1;
            self.speakers.remove(&conn);
        }
        self.gone_unsent.append(&mut gone);
        let mut unsent = std::mem::take(&mut self.gone_unsent);
        unsent.retain(|&conn| self.queue_full_for(Input::Gone(conn)));
        self.gone_unsent = unsent;
        // Rights a reload took, before what the connections sent since: never dropped
        // (an upload would go on, a route stay), what has no room now goes next turn.
        let mut unsent = std::mem::take(&mut self.rights_unsent);
        unsent.retain(|&conn| {
            self.speakers.contains(&conn)
                && self.queue_full_for(Input::Rights(
                    conn,
                    self.all_rights(core, conn),
                    core.sites_of(conn),
                ))
        });
        self.rights_unsent = unsent;
        for m in taken.drain(..) {
            if self.gone_unsent.contains(&m.conn) {
                // A new connection under the id of one whose end the thread has not
                // had yet: its message cannot go before that end. An upload or a
                // query is refused now rather than left to its time-out.
                self.dropped += 1;
                if let Some(asked) = Unanswered::asked(&m.body) {
                    core.send_files(m.conn, &unanswered::refusal(asked, THREAD_BEHIND), None);
                }
                continue;
            }
            if let Some(site) = self.site_refused(core, m.conn, &m.body) {
                let user = core.user_of(m.conn).unwrap_or("");
                if self.sites_refused.len() < SITES_REFUSED_TOLD
                    && self.sites_refused.insert((user.to_owned(), site.clone()))
                {
                    warn!(
                        "files: user {user:?} may not speak for site {site:?}: its Present is ignored (the users file's `sites`)"
                    );
                }
                continue;
            }
            let rights = self.rights(core, m.conn, m.body.get(2).copied());
            let user = core.user_of(m.conn).unwrap_or("").to_owned();
            self.speakers.insert(m.conn);
            let asked = Unanswered::asked(&m.body);
            let stopped = self.input.is_none();
            let full = self.queue_full_for(Input::Message {
                from: Peer::Conn(m.conn),
                user,
                rights,
                body: m.body,
            });
            if full {
                self.dropped += 1;
            }
            // An upload's start or a query the thread never sees gets no answer from it:
            // refused now. One it sees is followed until answered.
            match asked {
                Some(asked) if full || stopped => {
                    let why = if stopped { THREAD_DOWN } else { THREAD_BEHIND };
                    core.send_files(m.conn, &unanswered::refusal(asked, why), None);
                }
                Some(asked) => self.unanswered.follow(m.conn, asked),
                None => {}
            }
        }
        self.taken = taken;
        self.gone = gone;
        let mut up = upstream;
        if let Some(u) = up.as_deref_mut() {
            self.intake_upstream(u);
        }
        let mut bb = backbone;
        if let Some(b) = bb.as_deref_mut() {
            self.sample_network(b);
            self.submit_backlog();
            let mut from_backbone = std::mem::take(&mut self.from_backbone);
            b.take_files(&mut from_backbone);
            for m in from_backbone.drain(..) {
                self.submit_from_backbone(m);
            }
            self.from_backbone = from_backbone;
            b.hold_files(self.backlog.holds(Instant::now()));
            let rejected = self
                .figures
                .backbone_rejected
                .each_ref()
                .map(|n| n.load(Relaxed));
            b.set_files_rejected(rejected);
        }
        // The backbone is one stream for every site: what Aeron cannot take now waits
        // (and with it the files thread, whose queue to here is bounded), rather than
        // being lost and sent again. A peer's connection or the upstream link that is
        // busy drops a chunk (it is repaired): one slow peer must not hold the others.
        loop {
            let o = match self.held.take() {
                Some((stream, bytes, framed)) => ToLoop::Backbone {
                    stream,
                    bytes,
                    framed,
                },
                None => match self.output.try_recv() {
                    Ok(o) => o,
                    Err(_) => break,
                },
            };
            match o {
                ToLoop::Peer(o) => {
                    match o.to {
                        // Counted when the peer is there but busy (to one gone, a
                        // message is moot).
                        Peer::Conn(c) if self.departed.contains_key(&c) => {
                            // A gone connection's: dropped (its end counted).
                            if o.body.is_empty() {
                                self.end_of_departed(c);
                            }
                        }
                        Peer::Conn(_) if o.body.is_empty() => {}
                        Peer::Conn(c) => {
                            self.unanswered.answered(c, &o.body);
                            if !core.send_files(c, &o.body, o.droppable.then_some(ROOM))
                                && core.user_of(c).is_some()
                            {
                                self.to_peers += 1;
                            }
                        }
                        Peer::Upstream => {
                            if let Some(u) = up.as_deref_mut() {
                                if !u.send_files(&o.body) && u.is_connected() {
                                    self.to_peers += 1;
                                }
                            }
                        }
                        // Framed by the thread: never here.
                        Peer::Backbone => {}
                    }
                    chunk_buffers::SHARED.give_back(o.body);
                }
                ToLoop::Backbone {
                    stream,
                    bytes,
                    framed,
                } => {
                    if framed.elapsed() > FRAMED_LIFETIME {
                        self.expired += 1;
                        continue;
                    }
                    if let Some(b) = bb.as_deref_mut() {
                        match b.offer_files(stream, &bytes) {
                            FilesOffer::Taken => {}
                            FilesOffer::Busy if b.files_framing().is_some() => {
                                self.held = Some((stream, bytes, framed));
                                break;
                            }
                            // No one to take it (no source up, no edge yet): waiting
                            // would hold every message behind it; the protocol repeats
                            // what matters (presences, offers, statuses).
                            FilesOffer::Busy | FilesOffer::NoOne => self.no_one += 1,
                        }
                    }
                    chunk_buffers::SHARED.give_back(bytes);
                }
            }
        }
        // After the stopped thread's last answers, so that no refusal overtakes one.
        if self.refuse_unanswered && self.held.is_none() {
            self.refuse_all_unanswered(core);
        }
    }

    /// The thread's messages to a gone connection `conn` have all come.
    fn end_of_departed(&mut self, conn: ConnId) {
        if let Some(n) = self.departed.get_mut(&conn) {
            *n -= 1;
            if *n == 0 {
                self.departed.remove(&conn);
            }
        }
    }

    /// Refuses every upload and query the stopped thread left unanswered.
    fn refuse_all_unanswered(&mut self, core: &mut Node) {
        for (conn, body) in self.unanswered.refuse_all() {
            core.send_files(conn, &body, None);
        }
        self.refuse_unanswered = false;
    }

    /// Tells the thread how to frame and seal for the backbone when that changed: at
    /// the first turn, when the link went down or came back (a source under a new id),
    /// when the key file was read again. Told again next turn if its queue was full.
    fn tell_wire(&mut self, b: &tickwire_backbone::Backbone) {
        let framing = b.files_framing();
        let keys = b.files_keys();
        let now = (framing, keys.map(|(version, _)| version));
        if self.wire_given == Some(now) {
            return;
        }
        let keys_changed = self.wire_given.is_none_or(|(_, version)| version != now.1);
        let Some(tx) = &self.input else { return };
        let input = Input::Wire {
            framing,
            keys: keys.filter(|_| keys_changed).map(|(_, k)| k.clone()),
        };
        if tx.try_send(input).is_ok() {
            self.wire_given = Some(now);
        }
    }

    /// The backbone driver's loss, to the sender (every `NETWORK_SAMPLE`; only where
    /// the sender's chunks go on the backbone: reading the driver's counters walks
    /// them all, on the event loop).
    fn sample_network(&mut self, b: &tickwire_backbone::Backbone) {
        if !self.figures.sends || !b.sends_files() {
            return;
        }
        let now = Instant::now();
        if now < self.next_network_sample {
            return;
        }
        self.next_network_sample = now + NETWORK_SAMPLE;
        if let Some(link) = b.link().filter(|l| !l.is_dead()) {
            let c = link.driver_counters();
            self.submit(Input::Network {
                naks: c.naks_received,
                datagrams: c.bytes_sent / self.backbone_mtu,
            });
        }
    }

    /// When the loop must come back for a message the backbone could not take yet,
    /// or to hand the thread its backlog.
    pub fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        let soon = (self.held.is_some() || !self.backlog.is_empty())
            .then(|| now + Duration::from_millis(1));
        soon.into_iter().chain(self.again.next_try).min()
    }

    /// A message from the backbone to the thread: behind those waiting, if any; kept
    /// when the thread's queue is full (the backbone then holds the rest in Aeron).
    fn submit_from_backbone(&mut self, m: tickwire_backbone::FilesIn) {
        let m = match self.backlog.is_empty() {
            true => match self.try_submit_backbone(m) {
                Ok(()) => return,
                Err(m) => m,
            },
            false => m,
        };
        if !self.backlog.push_back(m) {
            self.dropped += 1;
        }
    }

    /// Hands the thread what waits for it, in order, while its queue has room.
    fn submit_backlog(&mut self) {
        while let Some(m) = self.backlog.pop_front() {
            if let Err(m) = self.try_submit_backbone(m) {
                self.backlog.push_front(m);
                return;
            }
        }
    }

    /// The message back when the thread's queue is full (dropped if the thread is gone).
    fn try_submit_backbone(
        &mut self,
        m: tickwire_backbone::FilesIn,
    ) -> Result<(), tickwire_backbone::FilesIn> {
        let Some(tx) = &self.input else {
            return Ok(());
        };
        match tx.try_send(Input::FromBackbone(m)) {
            Err(TrySendError::Full(Input::FromBackbone(m))) => Err(m),
            _ => Ok(()),
        }
    }
}

impl FilesThread {
    /// What the upstream link has read for the files thread. Called again after the
    /// link's reads at the end of a turn, so nothing waits for the next turn.
    pub fn intake_upstream(&mut self, u: &mut crate::upstream::UpstreamLink) {
        let mut from_upstream = std::mem::take(&mut self.from_upstream);
        u.take_files(&mut from_upstream);
        for body in from_upstream.drain(..) {
            self.submit(Input::Message {
                from: Peer::Upstream,
                user: String::new(),
                rights: Rights::default(),
                body,
            });
        }
        self.from_upstream = from_upstream;
    }
}

/// The kind byte of a files Present message.
const PRESENT: u8 = 4;
/// The kind bytes of a client's Put and of the node's answer to it.
const PUT: u8 = 16;
const PUT_ANSWER: u8 = 18;
/// The kind byte of a client's status query.
const QUERY: u8 = 19;

/// (user, site) pairs whose refusal is logged at most (each once).
const SITES_REFUSED_TOLD: usize = 1000;

#[cfg(test)]
mod backlog_tests {
    use super::{Backlog, BACKLOG_BYTES, HOLD_LIMIT};
    use std::time::{Duration, Instant};

    fn m(byte: u8, len: usize) -> tickwire_backbone::FilesIn {
        tickwire_backbone::FilesIn {
            bytes: vec![byte; len],
            seal_to_check: false,
        }
    }

    #[test]
    fn the_backbone_is_held_while_messages_wait_for_a_second_at_most() {
        let t0 = Instant::now();
        let mut b = Backlog::default();
        assert!(!b.holds(t0));
        assert!(b.push_back(m(1, 10)));
        assert!(b.push_back(m(2, 20)));
        assert!(b.holds(t0));
        assert!(b.holds(t0 + HOLD_LIMIT - Duration::from_millis(1)));
        // A thread stuck that long stops holding the sender and the other sites.
        assert!(!b.holds(t0 + HOLD_LIMIT));
        // In order; one put back stays first.
        let first = b.pop_front().unwrap();
        assert_eq!(first, m(1, 10));
        b.push_front(first);
        assert_eq!(b.pop_front().unwrap(), m(1, 10));
        assert_eq!(b.pop_front().unwrap(), m(2, 20));
        assert!(b.is_empty());
        // Emptied, it starts again from the next message.
        let later = t0 + 3 * HOLD_LIMIT;
        assert!(!b.holds(later));
        assert!(b.push_back(m(3, 5)));
        assert!(b.holds(later + Duration::from_millis(500)));
    }

    #[test]
    fn past_its_bytes_a_message_is_dropped_not_kept() {
        let mut b = Backlog::default();
        assert!(b.push_back(m(0, BACKLOG_BYTES - 10)));
        assert!(!b.push_back(m(0, 11)));
        assert!(b.push_back(m(0, 10)));
        assert!(!b.push_back(m(0, 1)));
        b.pop_front();
        assert!(b.push_back(m(0, 1)));
    }
}

#[cfg(test)]
mod restart_tests {
    use super::{
        open, FilesFigures, FilesSection, FilesThread, Input, ThreadFigures, RESTART_FIRST,
    };
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// The service FILES, its spool, inbox and outbox under `dir`.
    fn files_cfg(dir: &std::path::Path) -> FilesSection {
        let path = |d: &str| dir.join(d).to_str().unwrap().to_owned();
        FilesSection {
            services: vec!["FILES".into()],
            spool: path("spool"),
            inbox: path("inbox"),
            outbox: path("outbox"),
            ..FilesSection::default()
        }
    }

    /// A files thread of [`files_cfg`] at `site`, with the poll its waker wakes.
    fn started(dir: &std::path::Path, site: &str) -> (mio::Poll, FilesThread) {
        let cfg = files_cfg(dir);
        let poll = mio::Poll::new().unwrap();
        let waker = Arc::new(mio::Waker::new(poll.registry(), mio::Token(0)).unwrap());
        let t = FilesThread::start(&cfg, site, 7, 1400, waker).unwrap();
        (poll, t)
    }

    /// Waits (bounded) until `done` holds, turning the watchdog at `now`.
    fn until(t: &mut FilesThread, now: Instant, done: impl Fn(&FilesThread) -> bool) {
        let give_up = Instant::now() + Duration::from_secs(20);
        while !done(t) {
            assert!(
                Instant::now() < give_up,
                "the files thread did not get there"
            );
            t.watch_thread(now);
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// An outbox file is hashed on the outbox's own thread: the look that takes it
    /// returns before its hash is there (the files thread goes on with its transfers),
    /// and a later look queues it.
    #[test]
    fn outbox_files_are_hashed_off_the_files_thread() {
        let dir = tempfile::tempdir().unwrap();
        let figures = ThreadFigures::first(Arc::new(FilesFigures::default()));
        let opened = open(&files_cfg(dir.path()), "source", 9, &figures).unwrap();
        let (mut hub, mut outbox) = (opened.hub, opened.outbox.unwrap());
        let queued = |hub: &tickwire_files::Hub| hub.sender_figures().unwrap().1;
        let file = dir.path().join("outbox/eod.csv");
        std::fs::write(&file, vec![7u8; 1 << 20]).unwrap();
        let t0 = Instant::now();
        outbox.look(&mut hub, t0);
        let t1 = t0 + Duration::from_secs(1);
        // It stood still since the last look: it goes to be hashed, and the look
        // returns without it queued.
        outbox.look(&mut hub, t1);
        assert!(outbox.busy());
        assert_eq!(queued(&hub), 0, "hashed by the look itself");
        let give_up = Instant::now() + Duration::from_secs(20);
        while queued(&hub) == 0 {
            assert!(Instant::now() < give_up, "never queued");
            std::thread::sleep(Duration::from_millis(2));
            outbox.look(&mut hub, t1);
        }
        assert!(!outbox.busy());
        assert!(!file.exists(), "it left the outbox");
        assert_eq!(hub.sender_figures().unwrap().2, 1 << 20);
    }

    #[test]
    fn a_files_thread_that_panics_starts_again_from_its_spool_with_a_back_off() {
        let dir = tempfile::tempdir().unwrap();
        let (_poll, mut t) = started(dir.path(), "source");
        // A file the outbox hands to the queue: the queue must outlive the thread.
        std::fs::write(dir.path().join("outbox/eod.csv"), b"a,b\n1,2\n").unwrap();
        let t0 = Instant::now();
        until(&mut t, t0, |t| t.figures.queued_files.load(Relaxed) == 1);

        t.submit(Input::Panic);
        until(&mut t, t0, |t| !t.is_running());
        // Stopped: what comes meanwhile is dropped and counted, not queued for no one.
        t.submit(Input::Network {
            naks: 0,
            datagrams: 0,
        });
        assert_eq!(t.drops().to_thread, 1);
        // Started again after the first wait, not before, from the spool.
        let stopped = t.again.next_try.unwrap();
        t.watch_thread(stopped - Duration::from_millis(1));
        assert!(!t.is_running());
        t.figures.queued_files.store(0, Relaxed);
        t.watch_thread(stopped);
        assert!(t.is_running());
        assert_eq!(t.restarts, 1);
        // The new thread opens the spool itself, and finds the file there.
        until(&mut t, stopped, |t| {
            t.figures.queued_files.load(Relaxed) == 1
        });

        // Stopped again soon after: the wait doubles.
        t.submit(Input::Panic);
        until(&mut t, stopped, |t| !t.is_running());
        let next = t.again.next_try.unwrap();
        assert_eq!(next, stopped + 2 * RESTART_FIRST);
        t.figures.queued_files.store(0, Relaxed);
        t.watch_thread(next);
        assert!(t.is_running());
        assert_eq!(t.restarts, 2);
        until(&mut t, next, |t| t.figures.queued_files.load(Relaxed) == 1);

        // A spool that cannot be opened ends the new thread, which is tried again
        // later (the wait doubling), and runs once the spool is back.
        t.submit(Input::Panic);
        until(&mut t, next, |t| !t.is_running());
        let spool = dir.path().join("spool");
        std::fs::rename(&spool, dir.path().join("spool.away")).unwrap();
        std::fs::write(&spool, b"not a directory").unwrap();
        let at = t.again.next_try.unwrap();
        t.watch_thread(at);
        assert_eq!(t.restarts, 3);
        until(&mut t, at, |t| !t.is_running());
        let again = t.again.next_try.unwrap();
        assert_eq!(again, at + 8 * RESTART_FIRST);
        std::fs::remove_file(&spool).unwrap();
        std::fs::rename(dir.path().join("spool.away"), &spool).unwrap();
        t.figures.queued_files.store(0, Relaxed);
        t.watch_thread(again);
        until(&mut t, again, |t| t.figures.queued_files.load(Relaxed) == 1);
        assert!(t.is_running());
    }

    /// A file whose `done` a site's thread sent is in the site's audit log, though the
    /// thread stops right after (a defect, or a kill): a restarted site knows it has
    /// the file (offered again, it answers done; `files status` lists it), rather than
    /// taking it again from nothing.
    #[test]
    fn a_file_a_site_said_done_for_is_in_its_audit_log_when_its_thread_stops_then() {
        use tickwire_files::wire::{encode_chunk, FilesMessage};
        let dir = tempfile::tempdir().unwrap();
        // Committed in the turn that completes it.
        let cfg = FilesSection {
            fsync: super::FsyncSetting::Always,
            ..files_cfg(dir.path())
        };
        let poll = mio::Poll::new().unwrap();
        let waker = Arc::new(mio::Waker::new(poll.registry(), mio::Token(0)).unwrap());
        let mut t = FilesThread::start(&cfg, "edge", 7, 1400, waker).unwrap();
        let bytes = b"a,b\n1,2\n".to_vec();
        let m = tickwire_files::Manifest {
            transfer: 0xfeed,
            sender: "source".into(),
            service: "FILES".into(),
            name: "eod.csv".into(),
            size: bytes.len() as u64,
            chunk_size: 1024,
            sha256: tickwire_files::spool::sha256_reader(&mut &bytes[..])
                .unwrap()
                .1,
            expires_ms: u64::MAX,
            open: true,
            targets: vec![],
        };
        let mut offer = Vec::new();
        FilesMessage::Offer(m.offer(1)).encode(&mut offer).unwrap();
        let mut chunk = Vec::new();
        encode_chunk(&mut chunk, m.transfer, 0, &bytes).unwrap();
        for body in [offer, chunk] {
            t.submit(Input::Message {
                from: tickwire_files::Peer::Upstream,
                user: String::new(),
                rights: tickwire_files::Rights::ALL,
                body,
            });
        }
        // The file arrives, its done goes up, and the thread stops in that turn.
        t.submit(Input::Panic);
        let t0 = Instant::now();
        until(&mut t, t0, |t| !t.is_running());
        assert!(dir.path().join("inbox/FILES/eod.csv").exists());
        let audit = std::fs::read_to_string(cfg.audit_path()).unwrap();
        assert!(
            audit.contains("\"event\":\"arrived\""),
            "the site said done, and its audit log does not have the file: {audit:?}"
        );
    }

    /// A new client of `core`, logged in.
    fn log_in(core: &mut tickwire_core::Node, now: Instant) -> usize {
        use tickwire_proto::{Login, Message, Role};
        let conn = core.connect("client", now);
        let login = Login::new(Role::Subscriber, "test", "", "");
        core.on_message(conn, &Message::Login(login), now);
        files_answers(core, conn);
        conn
    }

    /// A status query from `conn` under `request`.
    fn ask(core: &mut tickwire_core::Node, conn: usize, request: u32) {
        use tickwire_files::wire::FilesMessage;
        let mut body = Vec::new();
        FilesMessage::Query { request }.encode(&mut body).unwrap();
        core.on_message(conn, &tickwire_proto::Message::Files(&body), Instant::now());
    }

    /// The files messages a client of `core` was sent, in order, as (what, request).
    fn files_answers(core: &mut tickwire_core::Node, conn: usize) -> Vec<(&'static str, u32)> {
        use tickwire_files::wire::FilesMessage;
        use tickwire_proto::Message;
        let mut got = Vec::new();
        crate::test_support::each_message_to(core, conn, |m| {
            if let Message::Files(body) = m {
                match FilesMessage::decode(body).unwrap() {
                    FilesMessage::Report {
                        request,
                        last: true,
                        ..
                    } => got.push(("report", request)),
                    FilesMessage::QueryRefused { request, .. } => got.push(("refused", request)),
                    _ => {}
                }
            }
        });
        got
    }

    #[test]
    fn a_stopped_threads_last_answers_go_out_before_the_refusals_of_what_it_left() {
        let dir = tempfile::tempdir().unwrap();
        let (_poll, mut t) = started(dir.path(), "source");
        let now = Instant::now();
        let (mut core, conn) = core_with_client(now);
        // Two queries: the first answered at once, the second waiting for the gap
        // between a connection's answers; then the thread stops.
        for request in [1, 2] {
            ask(&mut core, conn, request);
        }
        t.turn(&mut core, None, None);
        t.submit(Input::Panic);
        let give_up = Instant::now() + Duration::from_secs(20);
        while !t.thread.as_ref().is_some_and(|h| h.is_finished()) {
            assert!(Instant::now() < give_up, "the files thread did not stop");
            std::thread::sleep(Duration::from_millis(2));
        }
        // The stop is seen with the first answer still in the thread's queue to the
        // loop: it goes out first, and only what stayed unanswered is refused.
        t.turn(&mut core, None, None);
        let got = files_answers(&mut core, conn);
        assert_eq!(got.first(), Some(&("report", 1)), "{got:?}");
        for request in [1, 2] {
            let answers = got.iter().filter(|(_, r)| *r == request).count();
            assert_eq!(answers, 1, "query {request} answered once: {got:?}");
        }
        assert!(!t.refuse_unanswered, "nothing left to refuse");
    }

    /// A core that takes files, with a client logged in on it.
    fn core_with_client(now: Instant) -> (tickwire_core::Node, usize) {
        let core_cfg = tickwire_core::CoreConfig {
            files: true,
            ..tickwire_core::CoreConfig::default()
        };
        let mut core = tickwire_core::Node::new(core_cfg, now);
        let conn = log_in(&mut core, now);
        (core, conn)
    }

    #[test]
    fn an_answer_to_a_gone_connection_never_reaches_a_new_one_under_its_id() {
        let dir = tempfile::tempdir().unwrap();
        let (_poll, mut t) = started(dir.path(), "source");
        let now = Instant::now();
        let (mut core, old) = core_with_client(now);
        ask(&mut core, old, 1);
        t.turn(&mut core, None, None);
        // It goes with its query unanswered (or answered, still on its way), and a new
        // client takes its id at once.
        core.on_disconnect(old, now);
        let new = log_in(&mut core, now);
        assert_eq!(new, old, "the id is reused");
        files_answers(&mut core, new);
        let give_up = Instant::now() + Duration::from_secs(20);
        t.turn(&mut core, None, None);
        while !t.departed.is_empty() {
            assert!(
                Instant::now() < give_up,
                "the gone connection's end never came"
            );
            std::thread::sleep(Duration::from_millis(2));
            t.turn(&mut core, None, None);
        }
        assert_eq!(
            files_answers(&mut core, new),
            [],
            "nothing of the old one's"
        );
        // Its own query is answered.
        ask(&mut core, new, 1);
        let mut got = Vec::new();
        while got.is_empty() {
            assert!(Instant::now() < give_up, "no answer");
            std::thread::sleep(Duration::from_millis(2));
            t.turn(&mut core, None, None);
            got = files_answers(&mut core, new);
        }
        assert_eq!(got, [("report", 1)]);
    }

    #[test]
    fn a_query_sent_just_before_its_connection_went_is_not_answered_to_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let (_poll, mut t) = started(dir.path(), "source");
        let now = Instant::now();
        let (mut core, old) = core_with_client(now);
        // Asked, and gone, before the loop took the query to the thread.
        ask(&mut core, old, 7);
        core.on_disconnect(old, now);
        let new = log_in(&mut core, now);
        assert_eq!(new, old, "the id is reused");
        ask(&mut core, new, 1);
        let give_up = Instant::now() + Duration::from_secs(20);
        let mut got = Vec::new();
        while !got.iter().any(|&(_, r)| r == 1) {
            assert!(Instant::now() < give_up, "no answer to the new connection");
            t.turn(&mut core, None, None);
            got.extend(files_answers(&mut core, new));
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(got, [("report", 1)], "only its own answer");
    }

    /// The answers to uploads a client of `core` was sent: (request, state, reason).
    fn put_answers(
        core: &mut tickwire_core::Node,
        conn: usize,
    ) -> Vec<(u32, tickwire_files::wire::PutState, String)> {
        use tickwire_files::wire::FilesMessage;
        let mut got = Vec::new();
        crate::test_support::each_message_to(core, conn, |m| {
            if let tickwire_proto::Message::Files(body) = m {
                if let Ok(FilesMessage::PutAnswer(a)) = FilesMessage::decode(body) {
                    got.push((a.request, a.state, a.reason.to_string()));
                }
            }
        });
        got
    }

    /// A reload of the users file that takes a user's right to send a files service
    /// ends its upload in progress (refused, its sites told to drop it), as a reload
    /// disconnects a publisher that may no longer publish its service: the rest of the
    /// file is not sent to every site.
    #[test]
    fn a_reload_that_takes_the_right_to_send_ends_an_upload_in_progress() {
        use tickwire_files::wire::{FilesMessage, Put, PutState};
        use tickwire_proto::{Login, Message, Role};
        let users = |publish: &str| {
            let text = format!(
                "[users.alice]\ntoken_hash = \"{}\"\npublish = [{publish}]\n",
                tickwire_auth::hash_token("alice-secret")
            );
            Some(Arc::new(
                tickwire_auth::Users::parse(&text, "users.toml").unwrap(),
            ))
        };
        let dir = tempfile::tempdir().unwrap();
        let (_poll, mut t) = started(dir.path(), "source");
        let now = Instant::now();
        let core_cfg = tickwire_core::CoreConfig {
            files: true,
            users: users("\"FILES\""),
            ..tickwire_core::CoreConfig::default()
        };
        let mut core = tickwire_core::Node::new(core_cfg, now);
        let conn = core.connect("client", now);
        let login = Login::new(Role::Subscriber, "test", "alice", "alice-secret");
        core.on_message(conn, &Message::Login(login), now);
        let mut checks = Vec::new();
        core.take_auth_requests(&mut checks);
        assert_eq!(checks.len(), 1);
        core.on_auth_result(conn, checks[0].ticket, Ok(()), now);
        // alice starts a 200 KB upload: its first 50 KB.
        let data = vec![7u8; 200_000];
        let send = |core: &mut tickwire_core::Node, m: FilesMessage<'_>| {
            let mut body = Vec::new();
            m.encode(&mut body).unwrap();
            core.on_message(conn, &Message::Files(&body), Instant::now());
        };
        let put = Put {
            request: 1,
            service: "FILES",
            name: "big.bin",
            size: data.len() as u64,
            sha256: tickwire_files::spool::sha256_reader(&mut &data[..])
                .unwrap()
                .1,
            to: vec!["edge1"],
        };
        send(&mut core, FilesMessage::Put(put));
        send(
            &mut core,
            FilesMessage::PutData {
                request: 1,
                offset: 0,
                data: &data[..50_000],
            },
        );
        let give_up = Instant::now() + Duration::from_secs(20);
        let mut got = Vec::new();
        while !got
            .iter()
            .any(|a: &(u32, PutState, String)| a.1 == PutState::Go)
        {
            assert!(
                Instant::now() < give_up,
                "the upload never started: {got:?}"
            );
            t.turn(&mut core, None, None);
            got.extend(put_answers(&mut core, conn));
            std::thread::sleep(Duration::from_millis(2));
        }
        // The users file is reloaded without alice's right to publish FILES.
        core.set_users(users(""), Instant::now());
        t.users_changed();
        let mut got = Vec::new();
        while !got
            .iter()
            .any(|a: &(u32, PutState, String)| a.1 == PutState::Refused)
        {
            assert!(
                Instant::now() < give_up,
                "the upload went on after the reload: {got:?}"
            );
            t.turn(&mut core, None, None);
            got.extend(put_answers(&mut core, conn));
            std::thread::sleep(Duration::from_millis(2));
        }
        assert_eq!(
            got.last().map(|a| a.2.as_str()),
            Some(
                "user \"alice\" may no longer publish service \"FILES\" (the users file was reloaded)"
            ),
            "{got:?}"
        );
    }

    #[test]
    fn the_counters_of_a_restarted_files_thread_go_on_from_the_stopped_ones() {
        let dir = tempfile::tempdir().unwrap();
        let (_poll, mut t) = started(dir.path(), "site");
        let junk = |t: &mut FilesThread| {
            t.submit(Input::Message {
                from: tickwire_files::Peer::Conn(3),
                user: "u".into(),
                rights: tickwire_files::Rights::ALL,
                body: vec![0xEE; 5],
            })
        };
        let t0 = Instant::now();
        for _ in 0..3 {
            junk(&mut t);
        }
        until(&mut t, t0, |t| t.figures.malformed.load(Relaxed) == 3);
        t.submit(Input::Panic);
        until(&mut t, t0, |t| !t.is_running());
        let at = t.again.next_try.unwrap();
        t.watch_thread(at);
        assert!(t.is_running());
        // The new thread's first figures (published as it opens) do not go back to 0,
        // and what it counts is added.
        junk(&mut t);
        until(&mut t, at, |t| t.figures.malformed.load(Relaxed) == 4);
        assert_eq!(t.figures.malformed.load(Relaxed), 4);
    }
}
