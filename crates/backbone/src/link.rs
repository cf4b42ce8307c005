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

use crate::park::{Parker, Unparker};
use crate::reassembly::{Dropped, Place, Reassembler, MAX_MESSAGE};
use crate::setup_guard;
use crate::{BackboneError, IdleStrategy, Outbox, SpinThenPark};
use log::{info, warn};
use rusteron_client::{
    Aeron, AeronCError, AeronContext, AeronErrorType, AeronExclusivePublication,
    AeronFragmentHandlerCallback, AeronHeader, AeronSubscription, Handler, Handlers, IntoCString,
};
use rusteron_media_driver::bindings::aeron_threading_mode_enum;
use rusteron_media_driver::{AeronDriver, AeronDriverContext};
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Which thread runs the embedded media driver's duty cycle and the backbone's
/// receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverPlacement {
    /// The node's event loop, between its turns: a received message is handled by the
    /// thread that received it (no hand-over, no wake-up of a sleeping event loop),
    /// and what the event loop offers is sent in the same turn. The event loop then
    /// never blocks: it waits by the idle strategy. One busy thread per node.
    EventLoop,
    /// A thread of its own, which wakes the event loop when messages arrive; the event
    /// loop may block. Two threads per node, one of them busy.
    Thread,
}

impl DriverPlacement {
    /// A transport from its config spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "event-loop" => DriverPlacement::EventLoop,
            "thread" => DriverPlacement::Thread,
            _ => return None,
        })
    }
}

/// Whose pace a source's files publication follows when its edges take files at
/// different speeds (Aeron's flow control of that publication).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilesFlowControl {
    /// The slowest edge still answering (Aeron's `min` flow control): every edge gets
    /// every chunk once and none falls so far behind that it must ask for data the
    /// source no longer has. An edge silent for [`FILES_EDGE_TIMEOUT`] (gone, or its
    /// driver stopped) leaves the group, so a dead site holds the others that long
    /// at most; a site whose node cannot take the network's pace slows the others.
    Slowest,
    /// The fastest edge (Aeron's default for multicast): an edge that falls behind
    /// loses what the source has overwritten, asks for it again (NAKs, retransmissions
    /// to every edge, then the files layer's repairs) and slows every site with them.
    Fastest,
}

/// With [`FilesFlowControl::Slowest`]: how long an edge that stopped answering still
/// holds the files publication's pace.
pub const FILES_EDGE_TIMEOUT: Duration = Duration::from_secs(2);

impl FilesFlowControl {
    /// Every spelling `parse` takes, for error messages.
    pub const NAMES: &'static str = "slowest, fastest";

    /// A flow control from its config spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "slowest" => FilesFlowControl::Slowest,
            "fastest" => FilesFlowControl::Fastest,
            _ => return None,
        })
    }

    /// Its config spelling.
    pub fn name(self) -> &'static str {
        match self {
            FilesFlowControl::Slowest => "slowest",
            FilesFlowControl::Fastest => "fastest",
        }
    }

    /// The files publication's channel: the data channel with this flow control, unless
    /// the channel names one itself (the operator's choice stands).
    pub fn channel(self, data_channel: &str) -> String {
        if channel_param(data_channel, "fc").is_some() {
            return data_channel.to_string();
        }
        match self {
            FilesFlowControl::Fastest => data_channel.to_string(),
            FilesFlowControl::Slowest => format!(
                "{data_channel}|fc=min,t:{}ms",
                FILES_EDGE_TIMEOUT.as_millis()
            ),
        }
    }
}

/// Aeron's counter type of a min flow control's receivers (`fc-receivers`).
const FC_RECEIVERS_COUNTER: i32 = 17;

/// Aeron's default datagram payload: a 1,500-byte Ethernet frame less the IP and UDP
/// headers, rounded down to Aeron's 32-byte frame alignment.
pub const DEFAULT_MTU: usize = 1408;

/// Aeron's data frame header, which each message carries inside a datagram.
pub const FRAME_HEADER_BYTES: usize = 32;

/// Where the node's Aeron traffic goes and how the embedded driver behaves.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    /// Aeron channel of the backbone, e.g.
    /// `aeron:udp?endpoint=239.20.30.40:40456|interface=127.0.0.1`.
    pub channel: String,
    /// Aeron channel the edges' requests travel on (the same channel by default).
    pub request_channel: String,
    /// Aeron stream id of the data.
    pub data_stream: i32,
    /// Aeron stream id of the requests.
    pub request_stream: i32,
    /// Aeron stream id of file transfer: from the sources to the edges on the data
    /// channel, and from an edge to the sources on the request channel; None where the
    /// node takes part in no files service. A publication of its own: Aeron's flow
    /// control and the driver's sender then treat files and market data (or requests)
    /// apart (the sender takes a datagram from each publication in turn), so a file's
    /// chunks never queue market data behind them and a file backlog's back pressure
    /// refuses only more chunks.
    pub files_stream: Option<i32>,
    /// Aeron stream id of file transfer from an edge to the sources, on the request
    /// channel (with `files_stream` only): apart from the sources' files, which may
    /// share that channel, so no edge reads another edge's files.
    pub files_up_stream: i32,
    /// Aeron channel of the sources' files (with `files_stream`); None: the data
    /// channel's port plus one ([`files_channel_of`]). A standby source's files come
    /// on its data channel's port plus one.
    pub files_channel: Option<String>,
    /// Whose pace the files publication follows.
    pub files_flow_control: FilesFlowControl,
    /// Publish data (source role).
    pub source: bool,
    /// Receive data (edge role).
    pub edge: bool,
    /// An edge's hot-standby source where there is no multicast: its data channel
    /// (multi-destination-cast) and its request channel (unicast). The edge receives
    /// both sources, and its requests go to both.
    pub standby: Option<(String, String)>,
    /// How the thread running the driver waits.
    pub idle: IdleStrategy,
    /// With `IdleStrategy::Adaptive`: the longest pause polled through while work keeps
    /// coming ([`crate::SpinThenPark`]).
    pub spin_limit: Duration,
    /// Which thread runs the driver and the receiver.
    pub placement: DriverPlacement,
    /// With `IdleStrategy::Backoff`: the longest sleep of the idle driver thread.
    pub max_park: Duration,
    /// Aeron term buffer length (a power of two, 64 KiB to 1 GiB); a publication's log
    /// is three terms.
    pub term_length: usize,
    /// Largest datagram payload the node's publications send (Aeron's MTU: a multiple
    /// of 32, at most 65504). Each datagram costs one trip through the kernel at both
    /// ends, so larger ones carry more updates per trip where the network takes them.
    pub mtu: usize,
    /// Aeron's multicast NAK back-off ceiling.
    pub nak_max_backoff: Duration,
    /// How long a retransmission's data lingers before it may be sent again.
    pub retransmit_linger: Duration,
    /// How long an image without data (a source gone) lives in the driver.
    pub image_liveness: Duration,
    /// SO_RCVBUF and SO_SNDBUF of the driver's UDP sockets (the kernel caps them at
    /// net.core.rmem_max and wmem_max).
    pub socket_buffer: usize,
    /// How far a source may send ahead of what an edge's driver has taken (Aeron's
    /// receiver window; at most `socket_buffer`, and Aeron uses at most half a term).
    pub receiver_window: usize,
    /// Directory under which the driver makes its own (`/dev/shm` when present).
    pub driver_base: PathBuf,
    /// New Aeron sessions (SETUPs of senders not heard yet) the driver takes per
    /// second, at most (the SETUP guard, `setup_guard.rs`).
    pub new_sessions_per_s: u32,
    /// Aeron images (senders) per stream the driver keeps at most (Aeron's stream
    /// session limit).
    pub max_sessions_per_stream: u32,
}

impl LinkConfig {
    /// Settings for `channel`, with the defaults.
    pub fn new(channel: &str) -> Self {
        LinkConfig {
            channel: channel.to_string(),
            request_channel: channel.to_string(),
            data_stream: 1001,
            request_stream: 1002,
            files_stream: None,
            files_up_stream: 1004,
            files_channel: None,
            files_flow_control: FilesFlowControl::Slowest,
            source: false,
            edge: false,
            standby: None,
            idle: IdleStrategy::Adaptive,
            spin_limit: Duration::from_micros(2000),
            placement: DriverPlacement::EventLoop,
            max_park: Duration::from_millis(1),
            term_length: 4 << 20,
            mtu: DEFAULT_MTU,
            nak_max_backoff: Duration::from_micros(100),
            retransmit_linger: Duration::from_millis(1),
            image_liveness: Duration::from_secs(2),
            socket_buffer: 2 << 20,
            receiver_window: 2 << 20,
            driver_base: default_driver_base(),
            new_sessions_per_s: 50,
            max_sessions_per_stream: 256,
        }
    }
}

/// Aeron sends a multicast channel's data to an odd group address and its control
/// messages to the next one, and refuses an even data address. A channel naming an
/// even group (`239.20.30.40`) is taken to name that pair's control group: its data
/// goes to the odd group just below (`239.20.30.39`). Returns the channel Aeron gets
/// and, when it differs, a sentence saying so.
pub fn aeron_channel(channel: &str) -> (String, Option<String>) {
    let Some(start) = channel.find("endpoint=") else {
        return (channel.to_string(), None);
    };
    let at = start + "endpoint=".len();
    let end = channel[at..]
        .find(['|', ':'])
        .map_or(channel.len(), |i| at + i);
    let Ok(ip) = channel[at..end].parse::<std::net::Ipv4Addr>() else {
        return (channel.to_string(), None);
    };
    let o = ip.octets();
    if !ip.is_multicast() || o[3] % 2 == 1 || o[3] == 0 {
        return (channel.to_string(), None);
    }
    let data = std::net::Ipv4Addr::new(o[0], o[1], o[2], o[3] - 1);
    let out = format!("{}{}{}", &channel[..at], data, &channel[end..]);
    let note = format!(
        "multicast group {ip} is even: Aeron sends data to an odd group and control to the next one, so data goes to {data} and control to {ip}"
    );
    (out, Some(note))
}

/// The value of parameter `key` of an Aeron UDP channel (`aeron:udp?k=v|k=v`).
pub fn channel_param<'a>(channel: &'a str, key: &str) -> Option<&'a str> {
    let params = channel.split_once('?')?.1;
    params
        .split('|')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// The channel of the sources' files when the config names none: `data_channel` with
/// the port of its `endpoint` and of its `control` address one higher (an `endpoint`
/// port 0, the edge's own choice, stays 0). Files need a UDP endpoint of their own:
/// Aeron's C driver takes a publication's flow control from the first channel opened
/// on its endpoint, so on the data's endpoint the files would follow the fastest
/// edge whatever `files_flow_control` says; and their own socket gives them their own
/// receiver window and buffers.
pub fn files_channel_of(data_channel: &str) -> Result<String, BackboneError> {
    let bad = |detail: String| BackboneError::Channel {
        what: "files channel (the data channel's port plus one)",
        channel: data_channel.to_string(),
        detail,
    };
    let Some((head, params)) = data_channel.split_once('?') else {
        return Err(bad("no parameters: name backbone.files_channel".into()));
    };
    let mut shifted = 0;
    let mut out = Vec::new();
    for kv in params.split('|') {
        match kv.split_once('=') {
            Some((key @ ("endpoint" | "control"), addr)) => {
                let (host, port) = addr
                    .rsplit_once(':')
                    .ok_or_else(|| bad(format!("{key} {addr:?} has no port")))?;
                let port: u16 = port
                    .parse()
                    .map_err(|_| bad(format!("{key} {addr:?}: the port is not a number")))?;
                let port = match port {
                    0 => 0,
                    u16::MAX => return Err(bad(format!("{key} {addr:?}: no port above it"))),
                    p => p + 1,
                };
                out.push(format!("{key}={host}:{port}"));
                shifted += 1;
            }
            _ => out.push(kv.to_string()),
        }
    }
    if shifted == 0 {
        return Err(bad(
            "neither an endpoint nor a control address: name backbone.files_channel".into(),
        ));
    }
    Ok(format!("{head}?{}", out.join("|")))
}

/// The channel the files of the node's source (`standby`: None), or of an edge's
/// standby source (its data channel), come on, as Aeron gets it.
fn files_channel(cfg: &LinkConfig, standby: Option<&str>) -> Result<String, BackboneError> {
    let named = match (standby, &cfg.files_channel) {
        (None, Some(named)) => named.clone(),
        (None, None) => files_channel_of(&cfg.channel)?,
        (Some(data), _) => files_channel_of(data)?,
    };
    Ok(aeron_channel(&named).0)
}

/// Whether `channel` is a multi-destination-cast one: the source publishes to every
/// edge that joins (`control=SOURCE:PORT|control-mode=dynamic`), with no multicast.
pub fn is_dynamic_mdc(channel: &str) -> bool {
    channel_param(channel, "control-mode") == Some("dynamic")
        && channel_param(channel, "control").is_some()
}

/// The channel an edge receives a multi-destination-cast source on: `channel` with
/// `endpoint=THIS_HOST:0` added (the edge's driver binds a port of its own and tells
/// the source's control address, which then sends to it). THIS_HOST is the channel's
/// `interface` if it has one, else the address this host reaches the source from.
/// Any other channel is returned as it is.
pub fn edge_data_channel(channel: &str) -> Result<String, BackboneError> {
    if !is_dynamic_mdc(channel) || channel_param(channel, "endpoint").is_some() {
        return Ok(channel.to_string());
    }
    let bad = |detail: String| BackboneError::Channel {
        what: "multi-destination-cast data subscription",
        channel: channel.to_string(),
        detail,
    };
    let host = match channel_param(channel, "interface") {
        Some(i) => i.split('/').next().unwrap_or(i).to_string(),
        None => {
            let control = channel_param(channel, "control").unwrap_or_default();
            let to = std::net::ToSocketAddrs::to_socket_addrs(control)
                .map_err(|e| bad(format!("control address {control:?}: {e}")))?
                .next()
                .ok_or_else(|| bad(format!("control address {control:?} resolves to nothing")))?;
            let any: std::net::SocketAddr = if to.is_ipv4() {
                "0.0.0.0:0".parse().expect("literal")
            } else {
                "[::]:0".parse().expect("literal")
            };
            let probe = std::net::UdpSocket::bind(any)
                .and_then(|s| s.connect(to).and_then(|_| s.local_addr()))
                .map_err(|e| bad(format!("no route to the source at {to}: {e}")))?;
            match probe.ip() {
                std::net::IpAddr::V6(ip) => format!("[{ip}]"),
                ip => ip.to_string(),
            }
        }
    };
    Ok(format!("{channel}|endpoint={host}:0"))
}

fn default_driver_base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

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

const DRIVER_PREFIX: &str = "tickwire-aeron-";
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

struct Driver {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    dir: PathBuf,
    /// Work to run on the driver's thread (the receiver).
    commands: SyncSender<DriverCommand>,
    /// With [`DriverPlacement::EventLoop`], once the link is set up: the driver, run
    /// by the event loop (its thread has ended).
    inline: Option<AeronDriver>,
    /// The receiver window it was given ([`effective_receiver_window`]).
    receiver_window: usize,
    /// With a parking idle strategy: wakes the driver's own thread when it is parked
    /// (something was offered, or a command sent).
    unparker: Option<Arc<Unparker>>,
    /// The SETUP guard's settings and count, and the driver context it was set on.
    guard: Arc<setup_guard::GuardShared>,
    context: usize,
}

/// Work run on the driver's thread after each of its duty cycles.
trait Agent {
    /// Does what there is to do now; returns how much (0: idle).
    fn do_work(&mut self) -> usize;
}

/// Builds an agent on the driver's thread (what it holds need not be `Send`).
type AgentFactory = Box<dyn FnOnce() -> Option<Box<dyn Agent>> + Send>;

enum DriverCommand {
    Attach(AgentFactory),
    /// Drop the agent, then say so (its subscriptions go before the client does).
    Detach(SyncSender<()>),
    /// Stop running the driver and hand it over (to the event loop).
    HandOver(SyncSender<AeronDriver>),
}

impl Driver {
    /// From now on the calling thread runs the driver ([`Link::do_work`]). Until
    /// then the driver's own thread ran it, which the blocking set-up calls (adding
    /// publications and subscriptions) need.
    fn hand_over(&mut self) -> Result<(), BackboneError> {
        let (tx, rx) = sync_channel(1);
        self.command(DriverCommand::HandOver(tx))?;
        let driver = rx.recv().map_err(|_| BackboneError::DriverDied)?;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // The driver's idle strategy now sleeps in this thread (`backoff`: from 1 µs).
        // SAFETY: prctl on the calling thread with integer arguments.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1_000u64, 0, 0, 0) };
        self.inline = Some(driver);
        Ok(())
    }

    /// Sends `command` to the driver's own thread and wakes it if it is parked.
    fn command(&self, command: DriverCommand) -> Result<(), BackboneError> {
        self.commands
            .send(command)
            .map_err(|_| BackboneError::DriverDied)?;
        self.unpark();
        Ok(())
    }

    /// Wakes the driver's own thread if it is parked.
    fn unpark(&self) {
        if let Some(u) = &self.unparker {
            u.unpark();
        }
    }

    /// The media driver's two pollers (its receiver's and its sender's epoll sets,
    /// holding every UDP socket it reads): readable when a datagram waits.
    fn poller_fds(driver: &AeronDriver) -> [RawFd; 2] {
        [driver.receiver.poller.fd, driver.sender.poller.fd]
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.unpark();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        drop(self.inline.take());
        setup_guard::forget(self.context);
        // The driver deletes it on a clean close; a failed close leaves nothing behind.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

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

struct Sink {
    batch: Vec<u8>,
    kind: u8,
}

fn on_message(sink: &mut Sink, session: i32, msg: &[u8]) {
    sink.batch.push(sink.kind);
    sink.batch.extend_from_slice(&session.to_be_bytes());
    sink.batch
        .extend_from_slice(&(msg.len() as u32).to_be_bytes());
    sink.batch.extend_from_slice(msg);
}

/// What the receiver's polls hand each fragment to: each stream's messages are put back
/// together (bounded, [`crate::reassembly`]) into the batch being filled.
struct Inbound {
    sink: Sink,
    /// By stream: data, requests, files (the sink's `kind`).
    streams: [Reassembler; 3],
}

impl AeronFragmentHandlerCallback for Inbound {
    fn handle_aeron_fragment_handler(&mut self, fragment: &[u8], header: AeronHeader) {
        let Ok(values) = header.get_values() else {
            return;
        };
        let frame = values.frame();
        let (session, flags) = (frame.session_id(), frame.flags());
        let place = Place {
            term_id: frame.term_id(),
            term_offset: frame.term_offset(),
            frame_length: frame.frame_length(),
        };
        let Inbound { sink, streams } = self;
        streams[usize::from(sink.kind)].fragment(session, place, flags, fragment, |msg| {
            on_message(sink, session, msg)
        });
    }
}

/// What the receiver polls.
struct Subscriptions {
    /// One per source channel (two with a standby over multi-destination-cast).
    data_in: Vec<AeronSubscription>,
    request_in: Option<AeronSubscription>,
    /// The files stream, on each source channel (none without a files stream).
    files_in: Vec<AeronSubscription>,
    /// Set while the node's files thread is behind: the files stream is not polled, so
    /// Aeron holds its data and its flow control holds the sender, rather than the node
    /// dropping chunks that must then be sent again to every site.
    files_hold: Arc<AtomicBool>,
}

/// Fragments of the files stream polled per duty cycle at most (market data's
/// streams take up to 64 each): a file backlog waits in Aeron rather than in the
/// batch ahead of market data.
const FILES_FRAGMENTS: usize = 16;

/// The receiver: polls the subscriptions and hands whole messages, in batches, to the
/// event loop.
struct Receive {
    subs: Subscriptions,
    /// Called only from within this thread's polls; read and changed between them
    /// ([`Receive::inbound`]).
    inbound: Handler<Inbound>,
    /// Fragments dropped by the reassembly, as last logged.
    dropped_logged: u64,
    dropped_logged_at: Option<std::time::Instant>,
    batches: SyncSender<Vec<u8>>,
    empties: Receiver<Vec<u8>>,
    rejects: Receiver<i32>,
    wake: Box<dyn Fn() + Send>,
    counters: Arc<LinkCounters>,
    /// A full batch the event loop has no room for yet: nothing is polled until it
    /// is taken.
    waiting: Option<Vec<u8>>,
}

impl Receive {
    fn new(
        subs: Subscriptions,
        batches: SyncSender<Vec<u8>>,
        empties: Receiver<Vec<u8>>,
        rejects: Receiver<i32>,
        wake: Box<dyn Fn() + Send>,
        counters: Arc<LinkCounters>,
    ) -> Option<Receive> {
        Some(Receive {
            subs,
            inbound: Handler::new(Inbound {
                sink: Sink {
                    batch: Vec::with_capacity(BATCH_BYTES),
                    kind: 0,
                },
                streams: Default::default(),
            }),
            dropped_logged: 0,
            dropped_logged_at: None,
            batches,
            empties,
            rejects,
            wake,
            counters,
            waiting: None,
        })
    }

    /// Hands over what was polled into the batch being filled, if anything (the
    /// event loop runs the receiver and drains it next).
    fn hand_over_partial(&mut self) -> usize {
        if self.inbound().sink.batch.is_empty() || self.waiting.is_some() {
            return 0;
        }
        let next = self
            .empties
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BATCH_BYTES));
        let full = std::mem::replace(&mut self.inbound().sink.batch, next);
        self.counters.messages_in.fetch_add(1, Ordering::Relaxed);
        self.counters
            .bytes_in
            .fetch_add(full.len() as u64, Ordering::Relaxed);
        self.hand_over(full);
        1
    }

    /// The polls' handler, between polls.
    fn inbound(&mut self) -> &mut Inbound {
        // SAFETY: the handler is called only from within `poll` on this thread, and the
        // reference returned here is gone before the next poll (it borrows `self`).
        unsafe { self.inbound.get_mut() }
    }

    /// Logs fragments the reassembly dropped (a forged or broken session), at most
    /// every 10 s.
    fn log_dropped(&mut self) {
        let inbound = self.inbound();
        let dropped: u64 = inbound.streams.iter().map(|r| r.dropped).sum();
        let why = inbound.streams.iter().find_map(|r| r.last_dropped);
        if dropped == self.dropped_logged
            || self
                .dropped_logged_at
                .is_some_and(|t| t.elapsed() < Duration::from_secs(10))
        {
            return;
        }
        warn!(
            "backbone: {} fragments dropped that made no message within {} KiB (the last for {}): a broken or forged sender",
            dropped - self.dropped_logged,
            MAX_MESSAGE / 1024,
            why.map_or("?", Dropped::text)
        );
        self.dropped_logged = dropped;
        self.dropped_logged_at = Some(std::time::Instant::now());
    }

    /// Hands `batch` to the event loop, or keeps it waiting; whether it went.
    fn hand_over(&mut self, batch: Vec<u8>) -> bool {
        match self.batches.try_send(batch) {
            Ok(()) => {
                (self.wake)();
                true
            }
            Err(TrySendError::Full(b)) => {
                if self.waiting.is_none() {
                    self.counters.receiver_waits.fetch_add(1, Ordering::Relaxed);
                }
                self.waiting = Some(b);
                (self.wake)();
                false
            }
            // The link is going away.
            Err(TrySendError::Disconnected(_)) => false,
        }
    }
}

impl Agent for Receive {
    fn do_work(&mut self) -> usize {
        while let Ok(session) = self.rejects.try_recv() {
            if let Some(image) = self
                .subs
                .data_in
                .iter()
                .find_map(|s| s.image_by_session_id(session))
            {
                match image.reject(c"tickwire edge: source lost, re-imaging") {
                    Ok(_) => info!("backbone: rejected the image of Aeron session {session}"),
                    Err(e) => warn!("backbone: could not reject Aeron session {session}: {e:?}"),
                }
            }
        }
        // The event loop is behind: poll nothing (Aeron holds what arrives meanwhile).
        if let Some(batch) = self.waiting.take() {
            if !self.hand_over(batch) {
                return 0;
            }
        }
        let mut work = 0usize;
        let poll = |r: &mut Receive, kind: u8, sub: usize, limit: usize| {
            r.inbound().sink.kind = kind;
            let sub = match kind {
                0 => &r.subs.data_in[sub],
                1 => r.subs.request_in.as_ref().expect("polled only when there"),
                _ => &r.subs.files_in[sub],
            };
            sub.poll(Some(&r.inbound), limit).unwrap_or(0).max(0) as usize
        };
        for i in 0..self.subs.data_in.len() {
            work += poll(self, 0, i, 64);
        }
        if self.subs.request_in.is_some() {
            work += poll(self, 1, 0, 64);
        }
        if !self.subs.files_hold.load(Ordering::Relaxed) {
            for i in 0..self.subs.files_in.len() {
                work += poll(self, 2, i, FILES_FRAGMENTS);
            }
        }
        let filled = self.inbound().sink.batch.len();
        if filled > 0 && (work == 0 || filled >= BATCH_BYTES / 2) {
            work += self.hand_over_partial();
        }
        self.log_dropped();
        work
    }
}

/// A kernel limit on socket buffers (`net.core.rmem_max` or `wmem_max`), if readable.
fn kernel_socket_buffer_cap(path: &str) -> Option<usize> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
}

/// Says when the kernel gives the driver's sockets less than `socket_buffer`: an edge
/// that pauses then overflows its socket sooner, and what it loses is recovered by NAK
/// and retransmission, at a cost in CPU and latency.
fn warn_if_the_kernel_caps_socket_buffers(socket_buffer: usize) {
    for (knob, path) in [
        ("net.core.rmem_max", RMEM_MAX),
        ("net.core.wmem_max", "/proc/sys/net/core/wmem_max"),
    ] {
        if let Some(cap) = kernel_socket_buffer_cap(path).filter(|&cap| cap < socket_buffer) {
            warn!(
                "backbone: the kernel caps socket buffers at {cap} bytes ({knob}), below \
                 backbone.socket_buffer_bytes = {socket_buffer}: raise it \
                 (sysctl -w {knob}={socket_buffer}) or an edge that pauses loses datagrams \
                 sooner (recovered, at a cost); the receiver window is held to it"
            );
        }
    }
}

const RMEM_MAX: &str = "/proc/sys/net/core/rmem_max";

/// The receiver window the driver is given: the configured one, within the socket
/// buffer asked for and within what the kernel grants (`rmem_max`). Aeron refuses to
/// start a driver whose window is larger than the buffer the kernel really gives (the
/// stock rmem_max of 212992 gives 425984 bytes, below the default 2 MiB window), and a
/// source may send a window's worth while an edge's driver is off the CPU: the socket
/// must hold it. Never below one datagram, which Aeron requires.
fn effective_receiver_window(cfg: &LinkConfig, rmem_max: Option<usize>) -> usize {
    cfg.receiver_window
        .min(cfg.socket_buffer)
        .min(rmem_max.unwrap_or(usize::MAX))
        .max(cfg.mtu)
}

fn launch_driver(cfg: &LinkConfig) -> Result<Driver, BackboneError> {
    warn_if_the_kernel_caps_socket_buffers(cfg.socket_buffer);
    let receiver_window = effective_receiver_window(cfg, kernel_socket_buffer_cap(RMEM_MAX));
    let dir = cfg.driver_base.join(format!(
        "{DRIVER_PREFIX}{}-{}",
        std::process::id(),
        next_driver_number()
    ));
    let ctx = AeronDriverContext::new().map_err(|e| BackboneError::aeron("driver context", e))?;
    let dir_c = dir.to_string_lossy().to_string().into_c_string();
    let set = |what: &'static str, r: Result<i32, rusteron_media_driver::AeronCError>| {
        r.map(|_| ()).map_err(|e| BackboneError::aeron(what, e))
    };
    set("driver directory", ctx.set_dir(&dir_c))?;
    set("driver directory", ctx.set_dir_delete_on_start(true))?;
    set("driver directory", ctx.set_dir_delete_on_shutdown(true))?;
    set(
        "threading mode",
        ctx.set_threading_mode(aeron_threading_mode_enum::AERON_THREADING_MODE_SHARED),
    )?;
    if cfg.idle == IdleStrategy::Backoff || cfg.idle.parks() {
        // Aeron's back-off (with a parking strategy, the set-up's): 10 spins, 20
        // yields, then sleeps from 1 µs doubling up to the ceiling (Aeron's own default
        // ceiling is 1 ms). The arguments are read when the strategy is set, so they
        // go first.
        let args = format!("10-20-1us-{}us", cfg.max_park.as_micros().max(1));
        set(
            "idle strategy",
            ctx.set_shared_idle_strategy_init_args(&args.into_c_string()),
        )?;
    }
    set(
        "idle strategy",
        ctx.set_shared_idle_strategy(cfg.idle.driver_name()),
    )?;
    set("term length", ctx.set_term_buffer_length(cfg.term_length))?;
    set("MTU", ctx.set_mtu_length(cfg.mtu))?;
    set(
        "socket buffers",
        ctx.set_socket_so_rcvbuf(cfg.socket_buffer),
    )?;
    set(
        "socket buffers",
        ctx.set_socket_so_sndbuf(cfg.socket_buffer),
    )?;
    set(
        "receiver window",
        ctx.set_rcv_initial_window_length(receiver_window),
    )?;
    set(
        "NAK back-off",
        ctx.set_nak_multicast_max_backoff_ns(cfg.nak_max_backoff.as_nanos() as u64),
    )?;
    set(
        "retransmit linger",
        ctx.set_retransmit_unicast_linger_ns(cfg.retransmit_linger.as_nanos() as u64),
    )?;
    set(
        "image liveness",
        ctx.set_image_liveness_timeout_ns(cfg.image_liveness.as_nanos() as u64),
    )?;
    set(
        "stream session limit",
        ctx.set_stream_session_limit(cfg.max_sessions_per_stream.min(i32::MAX as u32) as i32),
    )?;
    let guard = Arc::new(setup_guard::GuardShared {
        per_second: cfg.new_sessions_per_s.max(1),
        dropped: AtomicU64::new(0),
    });
    let context = ctx.get_inner() as usize;
    setup_guard::install(&ctx, guard.clone())
        .map_err(|e| BackboneError::aeron("SETUP guard", e))?;
    let stop = Arc::new(AtomicBool::new(false));
    type Started = Result<Option<Arc<Unparker>>, BackboneError>;
    let (started_tx, started_rx) = sync_channel::<Started>(1);
    let (commands, command_rx) = sync_channel::<DriverCommand>(4);
    let (idle, spin_limit) = (cfg.idle, cfg.spin_limit);
    let thread = {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("aeron-driver".into())
            .spawn(move || {
                // Sleeps of microseconds (the back-off's) last what they ask, not the
                // kernel's default 50 µs slack more.
                // SAFETY: prctl on the calling thread with integer arguments.
                unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1_000u64, 0, 0, 0) };
                let driver = match AeronDriver::new(&ctx).and_then(|d| d.start(true).map(|_| d)) {
                    Ok(d) => d,
                    Err(e) => {
                        let _ = started_tx.send(Err(BackboneError::aeron("media driver", e)));
                        return;
                    }
                };
                // A parking strategy parks this thread once it runs the receiver (with
                // the driver in a thread of its own); while the link is set up it
                // backs off as Aeron does, since the set-up's commands wake nothing.
                let mut parker = None;
                if idle.parks() {
                    let policy = SpinThenPark::for_strategy(idle, spin_limit);
                    match Parker::new(&Driver::poller_fds(&driver), policy) {
                        Ok(p) => parker = Some(p),
                        Err(e) => warn!(
                            "backbone: cannot park the driver's thread ({e}); it backs off instead"
                        ),
                    }
                }
                let _ = started_tx.send(Ok(parker.as_ref().map(|p| p.unparker())));
                let mut agent: Option<Box<dyn Agent>> = None;
                while !stop.load(Ordering::Acquire) {
                    match command_rx.try_recv() {
                        Ok(DriverCommand::Attach(make)) => agent = make(),
                        Ok(DriverCommand::Detach(done)) => {
                            agent = None;
                            let _ = done.send(());
                        }
                        Ok(DriverCommand::HandOver(to)) => {
                            drop(agent);
                            let _ = to.send(driver);
                            return;
                        }
                        Err(_) => {}
                    }
                    let attached = agent.is_some();
                    let mut duty_cycle = || {
                        let mut work = driver.main_do_work().unwrap_or(0).max(0) as usize;
                        if let Some(a) = agent.as_mut() {
                            work += a.do_work();
                        }
                        work
                    };
                    let work = duty_cycle();
                    match parker.as_mut() {
                        Some(p) if attached => p.wait(work, duty_cycle),
                        _ => driver.main_idle_strategy(work.min(i32::MAX as usize) as i32),
                    }
                }
            })
            .map_err(BackboneError::Thread)?
    };
    match started_rx.recv() {
        Ok(Ok(unparker)) => Ok(Driver {
            stop,
            thread: Some(thread),
            dir,
            commands,
            inline: None,
            receiver_window,
            unparker,
            guard,
            context,
        }),
        Ok(Err(e)) => {
            let _ = thread.join();
            Err(e)
        }
        Err(_) => {
            let _ = thread.join();
            Err(BackboneError::DriverDied)
        }
    }
}

fn next_driver_number() -> u64 {
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Removes the driver directories of node processes that no longer run (a node
/// killed with SIGKILL cannot remove its own).
pub fn remove_stale_drivers(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(rest) = name.strip_prefix(DRIVER_PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        // SAFETY: signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive {
            info!(
                "backbone: removing {} (its node is gone)",
                e.path().display()
            );
            let _ = std::fs::remove_dir_all(e.path());
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

#[cfg(test)]
mod channel_tests {
    use super::{aeron_channel, edge_data_channel, is_dynamic_mdc, FilesFlowControl};

    #[test]
    fn an_edge_on_a_multi_destination_cast_channel_gets_an_endpoint_of_its_own() {
        let mdc = "aeron:udp?control=127.0.0.1:40456|control-mode=dynamic";
        assert!(is_dynamic_mdc(mdc));
        assert_eq!(
            edge_data_channel(mdc).unwrap(),
            format!("{mdc}|endpoint=127.0.0.1:0")
        );
        // The interface, when the channel names one.
        let with_if = "aeron:udp?control=127.0.0.1:40456|control-mode=dynamic|interface=127.0.0.2";
        assert!(edge_data_channel(with_if)
            .unwrap()
            .ends_with("|endpoint=127.0.0.2:0"));
        // An endpoint already given, multicast and plain unicast: unchanged.
        for ch in [
            "aeron:udp?control=127.0.0.1:40456|control-mode=dynamic|endpoint=127.0.0.1:40500",
            "aeron:udp?endpoint=239.20.30.41:40456|interface=127.0.0.1",
            "aeron:udp?endpoint=127.0.0.1:40456",
        ] {
            assert_eq!(edge_data_channel(ch).unwrap(), ch);
        }
        assert!(!is_dynamic_mdc("aeron:udp?endpoint=127.0.0.1:40456"));
        assert!(
            edge_data_channel("aeron:udp?control=no-such-host.invalid:1|control-mode=dynamic")
                .is_err()
        );
    }

    #[test]
    fn an_even_multicast_group_is_the_control_group_of_the_odd_one_below() {
        let (ch, note) = aeron_channel("aeron:udp?endpoint=239.20.30.40:40456|interface=127.0.0.1");
        assert_eq!(
            ch,
            "aeron:udp?endpoint=239.20.30.39:40456|interface=127.0.0.1"
        );
        assert!(note.unwrap().contains("239.20.30.39"));
        for same in [
            "aeron:udp?endpoint=239.20.30.41:40456|interface=127.0.0.1",
            "aeron:udp?endpoint=127.0.0.2:40456",
            "aeron:udp?endpoint=localhost:40456",
            "aeron:ipc",
            "aeron:udp?control=127.0.0.1:4000|control-mode=dynamic",
        ] {
            assert_eq!(aeron_channel(same), (same.to_string(), None));
        }
    }

    #[test]
    fn the_files_publication_follows_the_slowest_edge_unless_the_channel_says_otherwise() {
        let ch = "aeron:udp?endpoint=239.20.30.39:40456|interface=127.0.0.1";
        assert_eq!(
            FilesFlowControl::Slowest.channel(ch),
            format!("{ch}|fc=min,t:2000ms")
        );
        assert_eq!(FilesFlowControl::Fastest.channel(ch), ch);
        let own = "aeron:udp?endpoint=239.20.30.39:40456|fc=tagged,g:7";
        for fc in [FilesFlowControl::Slowest, FilesFlowControl::Fastest] {
            assert_eq!(fc.channel(own), own);
            assert_eq!(FilesFlowControl::parse(fc.name()), Some(fc));
        }
        assert_eq!(FilesFlowControl::parse("min"), None);
    }
}

#[cfg(test)]
mod window_tests {
    use super::{effective_receiver_window, LinkConfig};

    #[test]
    fn the_receiver_window_stays_within_what_the_kernel_grants_but_holds_a_datagram() {
        let cfg = LinkConfig::new("aeron:udp?endpoint=239.1.1.1:4000|interface=127.0.0.1");
        assert_eq!(effective_receiver_window(&cfg, None), 2 << 20);
        assert_eq!(effective_receiver_window(&cfg, Some(4 << 20)), 2 << 20);
        // A kernel with the common default net.core.rmem_max.
        assert_eq!(effective_receiver_window(&cfg, Some(212_992)), 212_992);
        let small_buffer = LinkConfig {
            socket_buffer: 1 << 20,
            ..cfg.clone()
        };
        assert_eq!(effective_receiver_window(&small_buffer, None), 1 << 20);
        let jumbo = LinkConfig {
            mtu: 8192,
            ..cfg.clone()
        };
        assert_eq!(effective_receiver_window(&jumbo, Some(4096)), 8192);
    }
}

#[cfg(test)]
mod files_channel_tests {
    use super::{files_channel, files_channel_of, LinkConfig};

    #[test]
    fn the_files_go_one_port_above_the_data() {
        let multicast = "aeron:udp?endpoint=239.1.1.1:4000|interface=127.0.0.1";
        assert_eq!(
            files_channel_of(multicast).unwrap(),
            "aeron:udp?endpoint=239.1.1.1:4001|interface=127.0.0.1"
        );
        // Multi-destination-cast: the source's control port; an edge's own port 0
        // stays its own choice.
        assert_eq!(
            files_channel_of("aeron:udp?control=10.0.0.5:40456|control-mode=dynamic").unwrap(),
            "aeron:udp?control=10.0.0.5:40457|control-mode=dynamic"
        );
        assert_eq!(
            files_channel_of("aeron:udp?control=[::1]:40456|control-mode=dynamic|endpoint=[::1]:0")
                .unwrap(),
            "aeron:udp?control=[::1]:40457|control-mode=dynamic|endpoint=[::1]:0"
        );
        for bad in [
            "aeron:ipc",
            "aeron:udp?control-mode=manual",
            "aeron:udp?endpoint=239.1.1.1:65535",
            "aeron:udp?endpoint=239.1.1.1",
        ] {
            let e = files_channel_of(bad).unwrap_err().to_string();
            assert!(e.contains("files channel"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_named_files_channel_stands_and_a_standby_sends_on_its_own_port_above() {
        let mut cfg = LinkConfig::new("aeron:udp?endpoint=239.1.1.1:4000|interface=127.0.0.1");
        // An even group is Aeron's control group: the data go to the odd one below.
        cfg.files_channel = Some("aeron:udp?endpoint=239.1.1.4:5000".into());
        assert_eq!(
            files_channel(&cfg, None).unwrap(),
            "aeron:udp?endpoint=239.1.1.3:5000"
        );
        assert_eq!(
            files_channel(
                &cfg,
                Some("aeron:udp?control=10.0.0.8:40456|control-mode=dynamic")
            )
            .unwrap(),
            "aeron:udp?control=10.0.0.8:40457|control-mode=dynamic"
        );
    }
}
