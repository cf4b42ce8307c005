//! The Aeron side: the media driver embedded in the node's process, the client, the
//! publications the event loop offers to, and the receiver that polls the
//! subscriptions and hands whole messages to the event loop.
//!
//! Threads: the driver runs in Aeron's `shared` threading mode (one duty cycle for its
//! conductor, sender and receiver), and the backbone's receiver runs right after it.
//! By default ([`DriverPlacement::EventLoop`]) the node's event loop runs both between
//! its turns: an update received from the backbone reaches the subscribers' sockets
//! from the thread that received it, with no hand-over between threads and no wake-up
//! of a sleeping event loop (a wake-up costs tens of microseconds on a virtual
//! machine), and what the event loop offers is sent in the same turn. The event loop
//! then never blocks; it waits by the configured idle strategy. One busy thread per
//! node. With [`DriverPlacement::Thread`] they run in a thread of their own, which
//! wakes the event loop when it has something; then, when the event loop is behind,
//! the receiver stops polling (the driver goes on) and Aeron's own flow control holds
//! the rest. Either way the driver's own thread runs it while the link is set up (the
//! set-up calls wait for the driver). The client's conductor has a thread of its own
//! (it sleeps between its rare duties). Offers write into shared memory, no syscall.

mod config;
mod driver;
mod receive;

pub use config::{
    aeron_channel, channel_param, edge_data_channel, files_channel_of, is_dynamic_mdc,
    DriverPlacement, FilesFlowControl, LinkConfig, DEFAULT_MTU, FILES_EDGE_TIMEOUT,
    FRAME_HEADER_BYTES,
};
pub use driver::remove_stale_drivers;

use config::files_channel;
use driver::{launch_driver, Agent, AgentFactory, Driver, DriverCommand};
use receive::{Receive, Subscriptions};

use crate::{BackboneError, IdleStrategy, Outbox};
use log::{info, warn};
use rusteron_client::{
    Aeron, AeronCError, AeronContext, AeronErrorType, AeronExclusivePublication, Handlers,
    IntoCString,
};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Aeron's counter type of a min flow control's receivers (`fc-receivers`).
const FC_RECEIVERS_COUNTER: i32 = 17;

/// Which subscription a received message came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// A source's message (the data stream).
    Data,
    /// An edge's message (the request stream).
    Request,
    /// A source's file-transfer message (the files stream).
    Files,
}

/// Figures of the embedded media driver (Aeron's system counters), since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DriverCounters {
    /// Bytes sent.
    pub bytes_sent: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// NAKs sent (gaps this side asked to have repaired).
    pub naks_sent: u64,
    /// NAKs received.
    pub naks_received: u64,
    /// Retransmissions sent.
    pub retransmits_sent: u64,
    /// Packets refused as invalid.
    pub invalid_packets: u64,
    /// SETUPs of new Aeron sessions dropped past `new_sessions_per_s`.
    pub new_sessions_refused: u64,
    /// A source's files publication: the edges its flow control follows now (Aeron's
    /// min flow control group; None without it, e.g. `files_flow_control = "fastest"`).
    pub files_edges: Option<u64>,
}

impl std::ops::AddAssign for DriverCounters {
    fn add_assign(&mut self, o: DriverCounters) {
        self.bytes_sent += o.bytes_sent;
        self.bytes_received += o.bytes_received;
        self.naks_sent += o.naks_sent;
        self.naks_received += o.naks_received;
        self.retransmits_sent += o.retransmits_sent;
        self.invalid_packets += o.invalid_packets;
        self.new_sessions_refused += o.new_sessions_refused;
        // A gauge: the latest link's.
        self.files_edges = o.files_edges;
    }
}

/// Figures the receiver keeps.
#[derive(Debug, Default)]
pub struct LinkCounters {
    /// Batches handed to the event loop.
    pub messages_in: AtomicU64,
    /// Their bytes.
    pub bytes_in: AtomicU64,
    /// Times the event loop was behind and a full batch had to wait for it (the
    /// receiver polled nothing meanwhile).
    pub receiver_waits: AtomicU64,
}

/// Bytes per batch handed from the receiver to the event loop.
const BATCH_BYTES: usize = 256 * 1024;
/// Batches in flight between them.
const BATCHES: usize = 16;
/// With the driver in the event loop: its duty cycles per turn at most (each receives
/// up to the driver's receive vector of datagrams): enough to take a turn's worth of
/// arrivals, few enough that the event loop is soon back at its sockets.
const CYCLES_PER_TURN: usize = 64;
/// The Aeron client conductor's sleep between duty cycles.
const CLIENT_CONDUCTOR_SLEEP: Duration = Duration::from_millis(50);
/// Before each message in a batch: its kind, Aeron session and length.
const RECORD_HEADER: usize = 9;

/// The running Aeron side of a node.
pub struct Link {
    /// The client hit an error it cannot recover from: the link must be rebuilt.
    fatal: Arc<AtomicBool>,
    data_out: Option<Publication>,
    request_out: Option<Publication>,
    files_out: Option<Publication>,
    /// The Aeron session of `files_out` when it goes down to the edges (a source's).
    files_down: Option<i32>,
    batches: Receiver<Vec<u8>>,
    empties: SyncSender<Vec<u8>>,
    rejects: SyncSender<i32>,
    counters: Arc<LinkCounters>,
    /// The receiver's [`Subscriptions::files_hold`].
    hold_files: Arc<AtomicBool>,
    /// With [`DriverPlacement::EventLoop`]: the receiver, run by [`Link::do_work`].
    receiver: Option<Receive>,
    idle: IdleStrategy,
    /// Offers made when the driver's own thread was last woken to send them.
    offers_sent: u64,
    // Dropped last: the client before the driver.
    _aeron: Aeron,
    _driver: Driver,
}

/// One exclusive publication, offered to by the event loop only.
pub struct Publication {
    publication: AeronExclusivePublication,
    /// Messages offered.
    pub offers: u64,
    /// Offers refused (back pressure or not connected).
    pub refused: u64,
}

/// What became of a file-transfer message offered to the backbone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilesOffer {
    /// Taken.
    Taken,
    /// Not now (back-pressure, or the driver busy): offer it again.
    Busy,
    /// No subscriber is connected (or there is no link): offering again does not help
    /// until one is; the message is the caller's to drop.
    NoOne,
}

impl Publication {
    /// Offers a file-transfer message, saying whether waiting could help.
    pub(crate) fn offer_file(&mut self, msg: &[u8]) -> FilesOffer {
        match self.publication.offer(msg) {
            Ok(_) => {
                self.offers += 1;
                FilesOffer::Taken
            }
            Err(e) => {
                self.refused += 1;
                use rusteron_client::AeronOfferError::{AdminAction, BackPressured};
                if matches!(e, BackPressured | AdminAction) {
                    FilesOffer::Busy
                } else {
                    FilesOffer::NoOne
                }
            }
        }
    }
}

impl Outbox for Publication {
    fn offer(&mut self, msg: &[u8]) -> bool {
        match self.publication.offer(msg) {
            Ok(_) => {
                self.offers += 1;
                true
            }
            Err(_) => {
                self.refused += 1;
                false
            }
        }
    }
}

/// How often [`wait_added`] asks whether the driver has added a publication or a
/// subscription.
const ADD_POLL: Duration = Duration::from_millis(1);

/// Waits for an asynchronous add (a publication or a subscription) until `timeout`,
/// asking every [`ADD_POLL`]. rusteron's `poll_blocking` asks without pause in a
/// release build: its spin took a CPU from the driver's own threads, which do the work
/// it waits for, at every start and restart of the link.
fn wait_added<T>(
    mut poll: impl FnMut() -> Result<Option<T>, AeronCError>,
    timeout: Duration,
) -> Result<T, AeronCError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(added) = poll()? {
            return Ok(added);
        }
        if Instant::now() >= deadline {
            return Err(AeronErrorType::TimedOut.into());
        }
        std::thread::sleep(ADD_POLL);
    }
}

/// Makes the client's conductor sleep `sleep` between its duty cycles. Aeron's C client
/// builds its idle strategy when the context is made, with the sleep it had then (16 ms,
/// or `AERON_CLIENT_IDLE_SLEEP_DURATION`): setting the sleep alone afterwards changes
/// nothing the conductor reads, so the strategy is built again with the new argument.
fn set_client_conductor_sleep(ctx: &AeronContext, sleep: Duration) -> Result<(), AeronCError> {
    let ns = sleep.as_nanos() as u64;
    ctx.set_idle_sleep_duration_ns(ns)?;
    let args = std::ffi::CString::new(ns.to_string()).expect("digits have no NUL");
    ctx.set_idle_strategy_init_args(&args)?;
    ctx.set_idle_strategy(c"sleep-ns")?;
    Ok(())
}

impl Link {
    /// Starts the driver, the client, the publications and the receiver.
    /// `wake` is called (from the driver's thread) when received messages wait.
    pub fn start(cfg: &LinkConfig, wake: Box<dyn Fn() + Send>) -> Result<Link, BackboneError> {
        remove_stale_drivers(&cfg.driver_base);
        let driver = launch_driver(cfg)?;
        let dir_c = driver.dir.to_string_lossy().to_string().into_c_string();
        let ctx = AeronContext::new().map_err(|e| BackboneError::aeron("client context", e))?;
        ctx.set_dir(&dir_c)
            .map_err(|e| BackboneError::aeron("client directory", e))?;
        let fatal = Arc::new(AtomicBool::new(false));
        let fatal_in_handler = fatal.clone();
        ctx.set_error_handler(Some(move |code: i32, msg: &str| {
            warn!("aeron client error {code}: {msg}");
            // Timeouts between client and driver (the process was stopped or starved
            // for longer than the liveness timeouts) leave the client unusable.
            if (1000..=1002).contains(&code.abs()) || (1005..=1006).contains(&code.abs()) {
                fatal_in_handler.store(true, Ordering::SeqCst);
            }
        }))
        .map_err(|e| BackboneError::aeron("client error handler", e))?;
        // The client's conductor thread wakes to keep the driver informed (a keep-alive
        // every 500 ms) and to hear of new images; data never waits for it. Aeron's
        // default of 16 ms between its duty cycles costs a wake-up 60 times a second.
        set_client_conductor_sleep(&ctx, CLIENT_CONDUCTOR_SLEEP)
            .map_err(|e| BackboneError::aeron("client idle sleep", e))?;
        let aeron = Aeron::new(&ctx).map_err(|e| BackboneError::aeron("client", e))?;
        aeron
            .start()
            .map_err(|e| BackboneError::aeron("client start", e))?;
        let timeout = Duration::from_secs(10);
        let (channel, note) = aeron_channel(&cfg.channel);
        if let Some(note) = note {
            info!("backbone: {note}");
        }
        let (request_channel, note) = aeron_channel(&cfg.request_channel);
        if let (Some(note), true) = (note, cfg.request_channel != cfg.channel) {
            info!("backbone: request channel: {note}");
        }
        let cfg_channel = channel.clone();
        let channel = channel.into_c_string();
        let request_channel = request_channel.into_c_string();
        let add_pub = |ch: &std::ffi::CStr, stream: i32, what: &'static str| {
            aeron
                .async_add_exclusive_publication(ch, stream)
                .and_then(|a| wait_added(|| a.poll(), timeout))
                .map(|publication| Publication {
                    publication,
                    offers: 0,
                    refused: 0,
                })
                .map_err(|e| BackboneError::channel(what, &cfg.channel, e))
        };
        let add_sub = |ch: &std::ffi::CStr, stream: i32, what: &'static str| {
            aeron
                .async_add_subscription(ch, stream, Handlers::NONE, Handlers::NONE)
                .and_then(|a| wait_added(|| a.poll(), timeout))
                .map_err(|e| BackboneError::channel(what, &cfg.channel, e))
        };
        let data_out = if cfg.source {
            Some(add_pub(&channel, cfg.data_stream, "data publication")?)
        } else {
            None
        };
        // Toward the sources: to the request channel, or with a standby source one
        // publication sending each message to both (Aeron's multi-destination-cast
        // with destinations of our choosing).
        let add_upward_pub = |stream: i32, what: &'static str| match &cfg.standby {
            None => add_pub(&request_channel, stream, what),
            Some((_, standby_requests)) => {
                let p = add_pub(c"aeron:udp?control-mode=manual", stream, what)?;
                for dest in [&cfg.request_channel, standby_requests] {
                    p.publication
                        .add_destination(&dest.clone().into_c_string(), timeout)
                        .map_err(|e| BackboneError::channel("request destination", dest, e))?;
                }
                Ok(p)
            }
        };
        let request_out = match cfg.edge {
            false => None,
            true => Some(add_upward_pub(cfg.request_stream, "request publication")?),
        };
        // A source's files go down to every edge; an edge's (one that is not also a
        // source) up to the sources.
        let files_out = match (cfg.source, cfg.edge, cfg.files_stream) {
            (true, _, Some(stream)) => {
                let files_channel = cfg.files_flow_control.channel(&files_channel(cfg, None)?);
                Some(add_pub(
                    &files_channel.into_c_string(),
                    stream,
                    "files publication",
                )?)
            }
            (false, true, Some(_)) => {
                Some(add_upward_pub(cfg.files_up_stream, "files publication")?)
            }
            _ => None,
        };
        let files_down_session = match (cfg.source, files_out.as_ref()) {
            (true, Some(p)) => p.publication.get_constants().ok().map(|c| c.session_id()),
            _ => None,
        };
        let mut data_in = Vec::new();
        let mut files_in = Vec::new();
        if cfg.edge {
            let standby = cfg.standby.as_ref().map(|(data, _)| data.as_str());
            for ch in std::iter::once(cfg_channel.as_str()).chain(standby) {
                let edge_channel = edge_data_channel(ch)?.into_c_string();
                data_in.push(add_sub(
                    &edge_channel,
                    cfg.data_stream,
                    "data subscription",
                )?);
            }
            if let Some(stream) = cfg.files_stream {
                let standby = cfg.standby.as_ref().map(|(data, _)| Some(data.as_str()));
                for of in std::iter::once(None).chain(standby) {
                    let ch = edge_data_channel(&files_channel(cfg, of)?)?.into_c_string();
                    files_in.push(add_sub(&ch, stream, "files subscription")?);
                }
            }
        }
        let request_in = if cfg.source {
            if cfg.files_stream.is_some() {
                files_in.push(add_sub(
                    &request_channel,
                    cfg.files_up_stream,
                    "files subscription",
                )?);
            }
            Some(add_sub(
                &request_channel,
                cfg.request_stream,
                "request subscription",
            )?)
        } else {
            None
        };
        let (batch_tx, batches) = sync_channel::<Vec<u8>>(BATCHES);
        let (empties, empty_rx) = sync_channel::<Vec<u8>>(BATCHES + 1);
        let (rejects, reject_rx) = sync_channel::<i32>(64);
        let counters = Arc::new(LinkCounters::default());
        let files_hold = Arc::new(AtomicBool::new(false));
        let hold_files = files_hold.clone();
        let mut driver = driver;
        let receiver = match cfg.placement {
            DriverPlacement::Thread => {
                let factory: AgentFactory = {
                    let counters = counters.clone();
                    Box::new(move || {
                        let subs = Subscriptions {
                            data_in,
                            request_in,
                            files_in,
                            files_hold,
                        };
                        let agent =
                            Receive::new(subs, batch_tx, empty_rx, reject_rx, wake, counters)?;
                        Some(Box::new(agent) as Box<dyn Agent>)
                    })
                };
                driver.command(DriverCommand::Attach(factory))?;
                None
            }
            DriverPlacement::EventLoop => {
                driver.hand_over()?;
                Receive::new(
                    Subscriptions {
                        data_in,
                        request_in,
                        files_in,
                        files_hold,
                    },
                    batch_tx,
                    empty_rx,
                    reject_rx,
                    Box::new(|| {}),
                    counters.clone(),
                )
            }
        };
        info!(
            "backbone: Aeron driver in {} (run by the {}, {} idle, term length {} bytes, MTU {} bytes, receiver window {} bytes, socket buffers {} bytes), channel {}{}",
            driver.dir.display(),
            match cfg.placement {
                DriverPlacement::EventLoop => "event loop",
                DriverPlacement::Thread => "driver's own thread",
            },
            cfg.idle.name(),
            cfg.term_length,
            cfg.mtu,
            driver.receiver_window,
            cfg.socket_buffer,
            cfg.channel,
            match cfg.files_stream {
                Some(stream) => format!(
                    ", files on stream {stream} of {} (from the edges on stream {} of the request channel)",
                    files_channel(cfg, None).unwrap_or_default(),
                    cfg.files_up_stream
                ),
                None => String::new(),
            }
        );
        Ok(Link {
            fatal,
            data_out,
            request_out,
            files_out,
            files_down: files_down_session,
            batches,
            empties,
            rejects,
            counters,
            hold_files,
            receiver,
            idle: cfg.idle,
            offers_sent: 0,
            _aeron: aeron,
            _driver: driver,
        })
    }

    /// Whether the event loop runs the driver ([`DriverPlacement::EventLoop`]): it
    /// must then call [`Link::do_work`] every turn and never block.
    pub fn polled_by_event_loop(&self) -> bool {
        self._driver.inline.is_some()
    }

    /// With the driver in the event loop: duty cycles of the driver (sending what
    /// was offered, receiving, Aeron's protocol) and of the receiver, while they find
    /// work, up to `CYCLES_PER_TURN`; what they received then waits for
    /// [`Link::drain`]. Taking everything that arrived during the turn before at once
    /// keeps the turns large under load: the event loop then writes to each
    /// subscriber's socket once for many updates. Returns how much was done (0: idle).
    pub fn do_work(&mut self) -> usize {
        let Some(driver) = self._driver.inline.as_ref() else {
            return 0;
        };
        let mut total = 0;
        for _ in 0..CYCLES_PER_TURN {
            let mut work = driver.main_do_work().unwrap_or(0).max(0) as usize;
            if let Some(r) = self.receiver.as_mut() {
                work += r.do_work();
            }
            total += work;
            if work == 0 {
                break;
            }
        }
        if let Some(r) = self.receiver.as_mut() {
            total += r.hand_over_partial();
        }
        total
    }

    /// With the driver in the event loop: its duty cycle only, so that what the event
    /// loop just offered goes out in this turn.
    /// With the driver in a thread of its own, parked: wakes it to send.
    /// Returns the driver's work (0 with the driver in its own thread).
    pub fn send_now(&mut self) -> usize {
        match self._driver.inline.as_ref() {
            Some(driver) => driver.main_do_work().unwrap_or(0).max(0) as usize,
            None => {
                // Only when something was offered since: an eventfd write and a
                // wake-up are not free.
                let offers = [&self.data_out, &self.request_out, &self.files_out]
                    .iter()
                    .map(|p| p.as_ref().map_or(0, |p| p.offers))
                    .sum::<u64>();
                if offers != self.offers_sent {
                    self.offers_sent = offers;
                    self._driver.unpark();
                }
                0
            }
        }
    }

    /// With the driver in the event loop and a parking idle strategy: the descriptors
    /// the event loop parks on besides its own sockets (the driver's pollers, readable
    /// when a datagram waits). None otherwise. They change when the link is rebuilt.
    pub fn wake_fds(&self) -> Option<[RawFd; 2]> {
        match self._driver.inline.as_ref() {
            Some(driver) if self.idle.parks() => Some(Driver::poller_fds(driver)),
            _ => None,
        }
    }

    /// With the driver in the event loop and one of Aeron's idle strategies (not a
    /// parking one, which the event loop waits by itself): waits by it when the turn
    /// did no work (`work` 0), and resets it otherwise.
    pub fn idle(&self, work: usize) {
        if self.idle.parks() {
            return;
        }
        if let Some(driver) = self._driver.inline.as_ref() {
            driver.main_idle_strategy(work.min(i32::MAX as usize) as i32);
        }
    }

    /// The data publication (source role), while connected.
    pub fn data_out(&mut self) -> Option<&mut Publication> {
        self.data_out.as_mut()
    }

    /// The request publication (edge role), while connected.
    pub fn request_out(&mut self) -> Option<&mut Publication> {
        self.request_out.as_mut()
    }

    /// The files publication: down to the edges (source role with a files stream), or
    /// up to the sources (edge role only).
    pub fn files_out(&mut self) -> Option<&mut Publication> {
        self.files_out.as_mut()
    }

    /// The media driver's own counters (this node's driver only).
    pub fn driver_counters(&self) -> DriverCounters {
        let mut c = DriverCounters::default();
        // A source's files publication, whose flow-control group is counted.
        let files_down = self.files_down.map(|session| session.to_string());
        self._aeron
            .counters_reader()
            .foreach_counter_fn(|value, _id, type_id, _key, label| {
                // "fc-receivers: REGISTRATION SESSION STREAM CHANNEL": the receivers a
                // min flow control follows (none with Aeron's default, max).
                if type_id == FC_RECEIVERS_COUNTER {
                    let session = label.split_whitespace().nth(2);
                    if session.is_some() && session == files_down.as_deref() {
                        c.files_edges = Some(value.max(0) as u64);
                    }
                    return;
                }
                // Type 0: Aeron's system counters, told apart by their labels.
                if type_id != 0 {
                    return;
                }
                let v = value.max(0) as u64;
                match label {
                    "Bytes sent" => c.bytes_sent = v,
                    "Bytes received" => c.bytes_received = v,
                    "NAKs sent" => c.naks_sent = v,
                    "NAKs received" => c.naks_received = v,
                    "Retransmits sent" => c.retransmits_sent = v,
                    "Invalid packets" => c.invalid_packets = v,
                    _ => {}
                }
            });
        c.new_sessions_refused = self._driver.guard.dropped.load(Ordering::Relaxed);
        c
    }

    /// Whether the Aeron client is unusable (see [`crate::Backbone::handle_timeout`]).
    pub fn is_dead(&self) -> bool {
        self.fatal.load(Ordering::SeqCst)
    }

    /// Holds the files stream where it is (`true`: not polled, Aeron keeps what
    /// arrives and its flow control holds the sender) or lets it be polled again.
    pub fn hold_files(&self, hold: bool) {
        self.hold_files.store(hold, Ordering::Relaxed);
    }

    /// The receiver's figures.
    pub fn counters(&self) -> &LinkCounters {
        &self.counters
    }

    /// Asks the receiver to reject the data image of Aeron session `session`
    /// (a source the edge lost: its image may be stuck behind data the source no
    /// longer has); the driver makes a new one, at the source's current position,
    /// when the source is heard again.
    pub fn reject_image(&mut self, session: i32) {
        let _ = self.rejects.try_send(session);
        self._driver.unpark();
    }

    /// Hands every received message waiting now to `f`, with the Aeron session (the
    /// sending publication) it came from.
    pub fn drain(&mut self, mut f: impl FnMut(Received, i32, &[u8])) {
        loop {
            let batch = match self.batches.try_recv() {
                Ok(b) => b,
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return,
            };
            let mut at = 0;
            while batch.len() - at >= RECORD_HEADER {
                let kind = match batch[at] {
                    0 => Received::Data,
                    1 => Received::Request,
                    _ => Received::Files,
                };
                let word = |i: usize| {
                    [
                        batch[at + i],
                        batch[at + i + 1],
                        batch[at + i + 2],
                        batch[at + i + 3],
                    ]
                };
                let session = i32::from_be_bytes(word(1));
                let len = u32::from_be_bytes(word(5)) as usize;
                let Some(msg) = batch.get(at + RECORD_HEADER..at + RECORD_HEADER + len) else {
                    break;
                };
                f(kind, session, msg);
                at += RECORD_HEADER + len;
            }
            let mut batch = batch;
            batch.clear();
            let _ = self.empties.try_send(batch);
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        // The receiver's subscriptions are closed before the client (dropped next).
        if self.receiver.take().is_some() {
            return;
        }
        let (done_tx, done) = sync_channel(1);
        if self._driver.command(DriverCommand::Detach(done_tx)).is_ok() {
            let _ = done.recv_timeout(Duration::from_secs(10));
        }
    }
}

#[cfg(test)]
mod client_tests {
    use super::{set_client_conductor_sleep, CLIENT_CONDUCTOR_SLEEP};
    use rusteron_client::AeronContext;

    /// The conductor's idle strategy, which Aeron built when the context was made, is
    /// built again with the node's sleep (setting the sleep alone left it at 16 ms: the
    /// conductor woke 60 times a second at rest).
    #[test]
    fn the_client_conductor_sleeps_as_long_as_the_node_says() {
        let ctx = AeronContext::new().unwrap();
        set_client_conductor_sleep(&ctx, CLIENT_CONDUCTOR_SLEEP).unwrap();
        assert_eq!(ctx.get_idle_strategy(), "sleep-ns");
        let ns: u64 = ctx.get_idle_strategy_init_args().parse().unwrap();
        assert_eq!(ns, CLIENT_CONDUCTOR_SLEEP.as_nanos() as u64);
    }
}
