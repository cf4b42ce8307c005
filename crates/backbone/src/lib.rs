//! Tickwire's backbone: source nodes put their publishers' data on a reliable
//! multicast (or unicast) channel; edge nodes take from it what their own subscribers
//! want. The transport is Aeron (its C media driver embedded in the node's process);
//! the backbone's own messages ([`wire`]) say which source is alive, what services it
//! has, which of its streams carries which item, and which items the edges want.
//!
//! With a key file ([`auth`], [`KeyFile`]) every message sent is sealed with a keyed
//! MAC and every message received is checked before a role sees it: only nodes holding
//! the key are heard.
//!
//! The roles are sans-IO like the node's core: [`Source`] and [`Edge`] are driven with
//! `now`, the core they serve, and an [`Outbox`] to offer messages to; the Aeron calls
//! stay in [`link`]. The node's event loop owns a [`Backbone`], which puts them
//! together.

#![warn(missing_docs)]

pub mod auth;
mod dense;
pub mod edge;
mod files_wire;
mod idle;
mod key_file;
pub mod link;
pub mod loopback;
mod park;
mod plumbing;
pub mod reassembly;
mod setup_guard;
pub mod source;
pub mod wire;

#[cfg(test)]
mod tests;

pub use edge::{Edge, EdgeConfig, EdgeStats};
pub use files_wire::{FilesFraming, FilesIn, FilesStream, FilesWire};
pub use idle::{IdleStrategy, SpinThenPark, Wait};
pub use key_file::KeyFile;
pub use link::{
    channel_param, edge_data_channel, files_channel_of, is_dynamic_mdc, DriverCounters,
    DriverPlacement, FilesFlowControl, FilesOffer, Link, LinkConfig, Received, DEFAULT_MTU,
    FILES_EDGE_TIMEOUT, FRAME_HEADER_BYTES,
};
pub use source::{Source, SourceConfig, SourceStats};

use std::time::Instant;
use thiserror::Error;
use tickwire_core::{ConnId, Node};

/// Where the roles put the messages they send.
pub trait Outbox {
    /// Offers one whole message; false if it cannot be taken now (back pressure, no
    /// receiver yet): the caller keeps it and tries again later.
    fn offer(&mut self, msg: &[u8]) -> bool;
}

/// What one [`Backbone::receive`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiveWork {
    /// The media driver's and the receiver's duty cycles (sending, receiving, Aeron's
    /// timers), when the event loop runs them.
    pub driver: usize,
    /// Backbone messages received (data at an edge, requests at a source).
    pub messages: usize,
}

/// A node's part in the backbone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Puts its publishers' data on the backbone.
    Source,
    /// Serves its subscribers from the backbone.
    Edge,
    /// Both.
    Both,
}

impl Role {
    /// A role from its config spelling (`source`, `edge`, `both`).
    pub fn parse(s: &str) -> Option<Role> {
        Some(match s {
            "source" => Role::Source,
            "edge" => Role::Edge,
            "both" => Role::Both,
            _ => return None,
        })
    }

    /// Its config spelling.
    pub fn name(self) -> &'static str {
        match self {
            Role::Source => "source",
            Role::Edge => "edge",
            Role::Both => "both",
        }
    }

    /// Puts data on the backbone.
    pub fn is_source(self) -> bool {
        matches!(self, Role::Source | Role::Both)
    }

    /// Takes data from the backbone.
    pub fn is_edge(self) -> bool {
        matches!(self, Role::Edge | Role::Both)
    }
}

/// Why the backbone cannot start or go on.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum BackboneError {
    /// An Aeron call failed.
    #[error("Aeron {what}: {detail}")]
    Aeron {
        /// What was asked.
        what: &'static str,
        /// Aeron's error.
        detail: String,
    },
    /// An Aeron call on a channel failed.
    #[error("Aeron {what} on channel {channel:?}: {detail}")]
    Channel {
        /// What was asked.
        what: &'static str,
        /// The channel.
        channel: String,
        /// Aeron's error.
        detail: String,
    },
    /// The embedded media driver stopped while starting.
    #[error("the Aeron media driver stopped while starting")]
    DriverDied,
    /// A thread could not be started.
    #[error("cannot start a backbone thread: {0}")]
    Thread(std::io::Error),
}

/// With `[backbone] key_file`: what the backbone seals and checks (module [`auth`]).
/// Each stream has its own origin and counter: a receiver of both would otherwise see
/// one origin's counters out of order across them. File transfer's messages are sealed
/// by the files thread, with origins of its own ([`FilesWire`]), and those of the files
/// stream checked there too; the requests stream is checked here.
struct Sealing {
    file: KeyFile,
    /// Times the key file was read again with new keys (for [`Backbone::files_keys`]).
    keys_version: u64,
    data_out: auth::Sealer,
    requests_out: auth::Sealer,
    data_in: auth::Verifier,
    requests_in: auth::Verifier,
}

impl Sealing {
    fn new(file: KeyFile) -> Sealing {
        let now = auth::wall_clock_ns();
        Sealing {
            file,
            keys_version: 0,
            data_out: auth::Sealer::new(random_id(), now),
            requests_out: auth::Sealer::new(random_id(), now),
            data_in: auth::Verifier::default(),
            requests_in: auth::Verifier::default(),
        }
    }
}

/// Seals every message offered through it.
struct SealedOutbox<'a, O: Outbox> {
    out: &'a mut O,
    sealer: &'a mut auth::Sealer,
    key: &'a auth::Key,
    lane: auth::Lane,
    now_ns: u64,
}

impl<O: Outbox> Outbox for SealedOutbox<'_, O> {
    fn offer(&mut self, msg: &[u8]) -> bool {
        let sealed = self.sealer.seal(self.key, self.lane, msg, self.now_ns);
        self.out.offer(sealed)
    }
}

/// Messages dropped by the backbone's checks, by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rejections {
    /// [`auth::Rejected`] in order, then `sealed_without_key`: sealed messages at a node
    /// with no key file.
    pub by_reason: [u64; 6],
}

impl Rejections {
    /// The reasons' names, for /metrics (in `by_reason`'s order).
    pub const REASONS: [&'static str; 6] = [
        "unsealed",
        "unknown_key",
        "bad_mac",
        "replayed",
        "stale",
        "no_key_file",
    ];

    /// Messages dropped, for all reasons.
    pub fn total(&self) -> u64 {
        self.by_reason.iter().sum()
    }
}

impl BackboneError {
    fn aeron(what: &'static str, e: impl std::fmt::Debug) -> Self {
        BackboneError::Aeron {
            what,
            detail: format!("{e:?}"),
        }
    }

    fn channel(what: &'static str, channel: &str, e: impl std::fmt::Debug) -> Self {
        BackboneError::Channel {
            what,
            channel: channel.to_string(),
            detail: format!("{e:?}"),
        }
    }
}

/// A random id for this run of a role (tells a restarted source from the old one).
pub fn random_id() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most the 8 bytes it is given.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 8 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        return t ^ ((std::process::id() as u64) << 32);
    }
    u64::from_ne_bytes(b)
}

/// What a node shows of its backbone (its figures item, the dashboard, the log).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackboneFigures {
    /// `source`, `edge` or `both`.
    pub role: &'static str,
    /// Live sources seen by the edge: "name (silent N ms)", comma-separated.
    pub sources: String,
    /// Edges known to the source.
    pub edges: u64,
    /// The driver's counters, summed over the links this node has had.
    pub driver: DriverCounters,
    /// Items the edge asked for again: their source was lost, or their data skipped
    /// sequence numbers.
    pub reimages: u64,
    /// Sources the edge lost (silent past their liveness time).
    pub sources_lost: u64,
    /// Times the Aeron link was rebuilt.
    pub link_restarts: u64,
    /// Whether the backbone is authenticated (`[backbone] key_file`).
    pub authenticated: bool,
    /// Messages dropped: not sealed with a key of the node, replayed, stale.
    pub rejections: Rejections,
    /// File-transfer messages dropped because the files thread had not taken the ones
    /// before (the transfer repairs them).
    pub files_dropped: u64,
}

/// What a node's backbone is made of (its `[backbone]` settings).
pub struct BackboneSetup {
    /// The node's role.
    pub role: Role,
    /// The Aeron side's settings.
    pub link: LinkConfig,
    /// The source role's settings.
    pub source: SourceConfig,
    /// The edge role's settings.
    pub edge: EdgeConfig,
    /// None: the backbone is not authenticated.
    pub key_file: Option<KeyFile>,
}

/// The backbone of one node: its roles and its Aeron link, driven by the event loop.
pub struct Backbone {
    /// The source role, if the node has it.
    pub source: Option<Source>,
    /// The edge role, if the node has it.
    pub edge: Option<Edge>,
    /// None while a link that died is being rebuilt.
    link: Option<Link>,
    link_cfg: LinkConfig,
    wake: std::sync::Arc<dyn Fn() + Send + Sync>,
    next_restart: Instant,
    /// Times the Aeron link was rebuilt.
    pub link_restarts: u64,
    role: Role,
    /// Driver counters of links that were rebuilt (a new driver starts from zero).
    earlier: DriverCounters,
    last_counters: std::cell::Cell<DriverCounters>,
    /// The edge's services version last given to the source as excluded.
    /// The edge's services and the source's directory, as last seen by [`Backbone::pump`]'s
    /// exclusion (it is worked out again when either changes).
    excluded_version: (u64, u32),
    /// None: the backbone is not authenticated.
    sealing: Option<Sealing>,
    rejections: Rejections,
    /// Messages of the files stream the files thread refused ([`FilesWire::rejected`]).
    files_rejected: [u64; 5],
    /// File-transfer messages received (offers and chunks at an edge, statuses and
    /// presences at a source), for the node's files thread, and their bytes.
    files_in: Vec<FilesIn>,
    files_in_bytes: usize,
    /// File-transfer messages dropped: the files thread was behind.
    pub files_dropped: u64,
}

/// File-transfer bytes held for the files thread at most (a lost chunk is repaired).
pub const MAX_FILES_IN_BYTES: usize = 16 << 20;

impl Backbone {
    /// Starts Aeron and the roles. `wake` wakes the event loop (called from the
    /// driver's thread, where the receiver runs).
    pub fn start(
        core: &mut Node,
        setup: BackboneSetup,
        wake: std::sync::Arc<dyn Fn() + Send + Sync>,
        now: Instant,
    ) -> Result<Backbone, BackboneError> {
        let BackboneSetup {
            role,
            link: mut link_cfg,
            source: source_cfg,
            edge: edge_cfg,
            key_file,
        } = setup;
        link_cfg.source = role.is_source();
        link_cfg.edge = role.is_edge();
        let w = wake.clone();
        let link = Link::start(&link_cfg, Box::new(move || w()))?;
        let edge = role
            .is_edge()
            .then(|| Edge::start(core, edge_cfg, random_id(), now));
        let source = role
            .is_source()
            .then(|| Source::start(core, source_cfg, random_id(), now));
        Ok(Backbone {
            source,
            edge,
            link: Some(link),
            link_cfg,
            wake,
            next_restart: now,
            link_restarts: 0,
            role,
            earlier: DriverCounters::default(),
            last_counters: Default::default(),
            excluded_version: (0, 0),
            sealing: key_file.map(Sealing::new),
            rejections: Rejections::default(),
            files_rejected: [0; 5],
            files_in: Vec::new(),
            files_in_bytes: 0,
            files_dropped: 0,
        })
    }

    /// Takes the file-transfer messages the backbone brought.
    pub fn take_files(&mut self, into: &mut Vec<FilesIn>) {
        self.files_in_bytes = 0;
        into.append(&mut self.files_in);
    }

    /// How the files thread frames its messages for the backbone now
    /// ([`FilesWire::set_framing`]); None while the node has no files stream or its
    /// link is down.
    pub fn files_framing(&self) -> Option<FilesFraming> {
        self.link_cfg.files_stream?;
        self.link.as_ref()?;
        Some(FilesFraming {
            source: self.source.as_ref().map(|s| s.id()),
            edge: self.edge.as_ref().map(|e| e.id()),
        })
    }

    /// With a key file: its keys, and how many times they changed since the start (the
    /// files thread seals with them, [`FilesWire::set_keys`]).
    pub fn files_keys(&self) -> Option<(u64, &auth::Keys)> {
        self.sealing
            .as_ref()
            .map(|s| (s.keys_version, &s.file.keys))
    }

    /// Whether this node's own files (its sender's chunks) go on the backbone.
    pub fn sends_files(&self) -> bool {
        self.files_framing()
            .is_some_and(|f| f.route(true).is_some())
    }

    /// Offers a message [`FilesWire::frame`] made: taken, refused for now (offer it
    /// again), or with no one to take it (the link down, no subscriber: drop it).
    pub fn offer_files(&mut self, stream: FilesStream, msg: &[u8]) -> FilesOffer {
        let Some(link) = self.link.as_mut() else {
            return FilesOffer::NoOne;
        };
        let out = match stream {
            FilesStream::Files => link.files_out(),
            FilesStream::Requests => link.request_out(),
        };
        out.map_or(FilesOffer::NoOne, |o| o.offer_file(msg))
    }

    /// What the files thread refused of the files stream so far, for the node's figures.
    pub fn set_files_rejected(&mut self, by_reason: [u64; 5]) {
        self.files_rejected = by_reason;
    }

    /// Whether `conn` is one of the backbone's own connections to the core.
    pub fn owns(&self, conn: ConnId) -> bool {
        self.source.as_ref().is_some_and(|s| s.conn() == conn)
            || self.edge.as_ref().is_some_and(|e| e.conn() == conn)
    }

    /// What the receiver has, into the roles.
    /// Takes what the backbone brought (running the driver first when the event loop
    /// runs it); says how much work that was.
    pub fn receive(&mut self, core: &mut Node, now: Instant) -> ReceiveWork {
        let Some(link) = self.link.as_mut() else {
            return ReceiveWork::default();
        };
        let mut work = ReceiveWork {
            driver: link.do_work(),
            messages: 0,
        };
        let (source, edge) = (&mut self.source, &mut self.edge);
        if let Some(e) = edge.as_mut() {
            // A node that is both hears its own source: not one of its edge's.
            e.set_own_source(source.as_ref().map(Source::id));
        }
        let (sealing, rejections) = (&mut self.sealing, &mut self.rejections);
        let (files_in, files_in_bytes, files_dropped) = (
            &mut self.files_in,
            &mut self.files_in_bytes,
            &mut self.files_dropped,
        );
        let now_ns = sealing.as_ref().map_or(0, |_| auth::wall_clock_ns());
        link.drain(|kind, session, msg| {
            work.messages += 1;
            // The files stream's seals are checked on the files thread; what can be told
            // without hashing (not sealed, a key this node does not have) is dropped here,
            // so that a stranger's messages do not take the files thread's queue.
            let seal_to_check = sealing.is_some() && kind == Received::Files;
            let msg = match sealing.as_mut() {
                Some(s) if seal_to_check => match auth::precheck(&s.file.keys, msg) {
                    Ok(()) => msg,
                    Err(why) => {
                        rejected(rejections, why as usize, why.text(), session);
                        return;
                    }
                },
                Some(s) => {
                    let (verifier, lane) = match kind {
                        Received::Data => (&mut s.data_in, auth::Lane::Data),
                        // The files stream's went to the files thread above.
                        Received::Request | Received::Files => {
                            (&mut s.requests_in, auth::Lane::Requests)
                        }
                    };
                    match verifier.verify(&s.file.keys, lane, msg, now_ns) {
                        Ok(plain) => plain.body,
                        Err(why) => {
                            rejected(rejections, why as usize, why.text(), session);
                            return;
                        }
                    }
                }
                None if msg.len() > 1 && msg[1] & wire::SEALED != 0 => {
                    rejected(
                        rejections,
                        5,
                        "sealed, and this node has no [backbone] key_file",
                        session,
                    );
                    return;
                }
                None => msg,
            };
            // File transfer: a source's messages on its files stream (to the edges), an
            // edge's on its files stream or the requests stream (to the sources); they
            // go to the files thread.
            let files = match (kind, wire::BackboneMessage::decode_files(msg)) {
                (Received::Files, Some((true, body))) if edge.is_some() => Some(body),
                (Received::Files | Received::Request, Some((false, body))) if source.is_some() => {
                    Some(body)
                }
                (_, Some(_)) | (Received::Files, None) => return,
                (_, None) => None,
            };
            if let Some(body) = files {
                let bytes = if seal_to_check { msg } else { body };
                if *files_in_bytes + bytes.len() <= MAX_FILES_IN_BYTES {
                    *files_in_bytes += bytes.len();
                    files_in.push(FilesIn {
                        bytes: tickwire_core::chunk_buffers::SHARED.copy_of(bytes, 0),
                        seal_to_check,
                    });
                } else {
                    *files_dropped += 1;
                }
                return;
            }
            match kind {
                Received::Data => {
                    if let Some(e) = edge.as_mut() {
                        e.on_data(core, session, msg, now);
                    }
                }
                Received::Request => {
                    if let Some(s) = source.as_mut() {
                        s.on_request(core, msg, now);
                    }
                }
                // Taken above: only file transfer travels on the files stream.
                Received::Files => {}
            }
        });
        if let Some(e) = edge.as_mut() {
            e.flush(core, now);
        }
        work
    }

    /// Whether the event loop runs the driver: it must then never block, and call
    /// [`Backbone::receive`], [`Backbone::send_now`] and [`Backbone::idle`] every turn.
    pub fn polled_by_event_loop(&self) -> bool {
        self.link.as_ref().is_some_and(|l| l.polled_by_event_loop())
    }

    /// With the driver in the event loop and a parking idle strategy: what the event
    /// loop parks on besides its own sockets ([`Link::wake_fds`]), with the number of
    /// the link they belong to (it changes when the link is rebuilt).
    pub fn wake_fds(&self) -> Option<(u64, [std::os::fd::RawFd; 2])> {
        let fds = self.link.as_ref()?.wake_fds()?;
        Some((self.link_restarts, fds))
    }

    /// How the thread running the driver waits when idle.
    pub fn idle_strategy(&self) -> IdleStrategy {
        self.link_cfg.idle
    }

    /// The longest pause polled through with [`IdleStrategy::Adaptive`].
    pub fn spin_limit(&self) -> std::time::Duration {
        self.link_cfg.spin_limit
    }

    /// After [`Backbone::pump`]: what it offered goes out now (driver in the event
    /// loop: a duty cycle, whose work it returns; a thread of its own: woken).
    pub fn send_now(&mut self) -> usize {
        self.link.as_mut().map_or(0, |l| l.send_now())
    }

    /// At the end of a turn that did `work` (0: none): waits by the driver's idle
    /// strategy when the event loop runs the driver.
    pub fn idle(&self, work: usize) {
        if let Some(l) = self.link.as_ref() {
            l.idle(work);
        }
    }

    /// What the roles have to send, onto Aeron (after the core has run).
    pub fn pump(&mut self, core: &mut Node, now: Instant) {
        // A node that is both: what it receives from the backbone is not put back on it:
        // the services its core has from the edge role. Not those its own publishers
        // have (another source may also have them; the core refused them from the edge).
        if let (Some(s), Some(e)) = (self.source.as_mut(), self.edge.as_ref()) {
            let version = (e.services_version(), s.directory_version());
            if version != self.excluded_version {
                let mut from_edge = e.services();
                from_edge.retain(|name| core.publishes(e.conn(), name));
                s.set_excluded(from_edge);
                self.excluded_version = (e.services_version(), s.directory_version());
            }
        }
        let Some(link) = self.link.as_mut() else {
            return;
        };
        match self.sealing.as_mut() {
            None => {
                if let (Some(e), Some(out)) = (self.edge.as_mut(), link.request_out()) {
                    e.pump(core, out, now);
                }
                if let (Some(s), Some(out)) = (self.source.as_mut(), link.data_out()) {
                    s.pump(core, out, now);
                }
            }
            Some(sealing) => {
                let now_ns = auth::wall_clock_ns();
                let key = sealing.file.keys.signing();
                if let (Some(e), Some(out)) = (self.edge.as_mut(), link.request_out()) {
                    let mut out = SealedOutbox {
                        out,
                        sealer: &mut sealing.requests_out,
                        key,
                        lane: auth::Lane::Requests,
                        now_ns,
                    };
                    e.pump(core, &mut out, now);
                }
                if let (Some(s), Some(out)) = (self.source.as_mut(), link.data_out()) {
                    let mut out = SealedOutbox {
                        out,
                        sealer: &mut sealing.data_out,
                        key,
                        lane: auth::Lane::Data,
                        now_ns,
                    };
                    s.pump(core, &mut out, now);
                }
            }
        }
    }

    /// Whether what the node sends is sealed and what it receives checked.
    pub fn authenticated(&self) -> bool {
        self.sealing.is_some()
    }

    /// Messages dropped by the checks since the start (the files thread's included).
    pub fn rejections(&self) -> Rejections {
        let mut r = self.rejections.clone();
        for (total, files) in r.by_reason.iter_mut().zip(self.files_rejected) {
            *total += files;
        }
        r
    }

    /// The roles' heartbeats and timeouts, and the link's restart when it died.
    pub fn handle_timeout(&mut self, core: &mut Node, now: Instant) {
        if let Some(e) = self.edge.as_mut() {
            e.handle_timeout(core, now);
            let rejects = e.take_images_to_reject();
            if let Some(link) = self.link.as_mut() {
                for session in rejects {
                    link.reject_image(session);
                }
            }
        }
        if let Some(s) = self.source.as_mut() {
            s.handle_timeout(core, now);
        }
        if let Some(s) = self.sealing.as_mut() {
            if s.file.refresh(now) {
                s.keys_version += 1;
            }
        }
        self.restart_dead_link(core, now);
    }

    /// A process stopped or starved for longer than Aeron's liveness timeouts (a
    /// SIGSTOP, a paused VM) comes back with an unusable client: the link is rebuilt
    /// (a new driver, a new client). The source comes back under a new id, so edges
    /// re-image what they take from it; the edge treats every source as lost and
    /// re-images its items when they are heard again. Nothing in the core is lost.
    fn restart_dead_link(&mut self, core: &mut Node, now: Instant) {
        if self.link.as_ref().is_some_and(|l| !l.is_dead()) || now < self.next_restart {
            return;
        }
        if let Some(old) = self.link.take() {
            // The counters last read while the client was usable; a dead client's
            // memory is not read again.
            self.earlier += self.last_counters.take();
            drop(old);
            log::warn!("backbone: the Aeron client is unusable (the process was stopped or starved for too long): restarting the link");
            if let Some(e) = self.edge.as_mut() {
                e.all_sources_lost(core, now);
            }
            if let Some(s) = self.source.as_mut() {
                s.restart(core, random_id(), now);
            }
        }
        let w = self.wake.clone();
        match Link::start(&self.link_cfg, Box::new(move || w())) {
            Ok(link) => {
                self.link_restarts += 1;
                log::info!("backbone: link restarted");
                self.link = Some(link);
            }
            Err(e) => {
                log::warn!("backbone: cannot restart the link ({e}); trying again in 1 s");
                self.next_restart = now + std::time::Duration::from_secs(1);
            }
        }
    }

    /// When [`Backbone::handle_timeout`] is next needed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.source.as_ref().and_then(|s| s.poll_timeout()),
            self.edge.as_ref().and_then(|e| e.poll_timeout()),
            self.sealing.as_ref().map(|s| s.file.next_check()),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Holds the files stream in Aeron while the node's files thread is behind, or
    /// lets it flow again ([`Link::hold_files`]). Only where the files follow the
    /// slowest edge: at the fastest's pace a held image would fall behind what the
    /// source still resends and stop until Aeron dropped it.
    pub fn hold_files(&self, hold: bool) {
        if let Some(link) = self.link.as_ref() {
            link.hold_files(hold && self.link_cfg.files_flow_control == FilesFlowControl::Slowest);
        }
    }

    /// The Aeron link, while it is up.
    pub fn link(&self) -> Option<&Link> {
        self.link.as_ref()
    }

    /// What the node shows of its backbone.
    pub fn figures(&self, now: Instant) -> BackboneFigures {
        let mut driver = self.earlier;
        if let Some(l) = self.link.as_ref().filter(|l| !l.is_dead()) {
            self.last_counters.set(l.driver_counters());
        }
        driver += self.last_counters.get();
        let (sources, reimages, sources_lost) = match &self.edge {
            Some(e) => {
                let st = e.stats();
                (e.sources_text(now), st.reimages, st.sources_lost)
            }
            None => (String::new(), 0, 0),
        };
        BackboneFigures {
            role: self.role.name(),
            sources,
            edges: self.source.as_ref().map_or(0, |s| s.stats().edges),
            driver,
            reimages,
            sources_lost,
            link_restarts: self.link_restarts,
            authenticated: self.sealing.is_some(),
            rejections: self.rejections(),
            files_dropped: self.files_dropped,
        }
    }
}

/// Counts a dropped message; the first and then every power of two of a reason is
/// logged (a flood of forgeries does not flood the log).
fn rejected(r: &mut Rejections, reason: usize, why: &str, session: i32) {
    r.by_reason[reason] += 1;
    let n = r.by_reason[reason];
    if n.is_power_of_two() {
        log::warn!(
            "backbone: dropped a message of Aeron session {session}: {why} ({n} so far for this reason)"
        );
    }
}
