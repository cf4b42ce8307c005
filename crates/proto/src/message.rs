//! Messages and their encoding.
//!
//! Each message is `u8 type`, `u16 body length`, then the body. Messages that belong to a
//! stream (request, refresh, update, status, close) start their body with the `u32`
//! stream id, so a node can re-address an encoded message to another stream by rewriting
//! four bytes and copying the rest (see [`write_readdressed`]).

mod decode;
mod encode;
mod iter;

pub use iter::{next_update_stream, write_readdressed, MessageIter, RawMessage};

use crate::field::FieldList;

/// Protocol versions this implementation speaks.
pub const PROTOCOL_VERSION_MIN: u16 = 1;
/// The newest protocol version this library speaks.
pub const PROTOCOL_VERSION_MAX: u16 = 1;

/// A node logging in to another (its upstream) names itself in its Login's
/// application: `tickwire-node/<id, 16 hex digits>/<name>` (docs/PROTOCOL.md, 12).
pub const NODE_LOGIN_PREFIX: &str = "tickwire-node/";

/// The node id in a Login's application name, if a node sent it.
pub fn parse_node_login(application: &str) -> Option<u64> {
    let rest = application.strip_prefix(NODE_LOGIN_PREFIX)?;
    let id = rest.split('/').next()?;
    u64::from_str_radix(id, 16).ok()
}

/// Bytes before a message body: type and body length.
pub const MESSAGE_HEADER_LEN: usize = 3;
/// Largest message body.
pub const MAX_MESSAGE_BODY: usize = u16::MAX as usize;

/// A message's type, its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum MessageType {
    /// A client logs in.
    Login = 1,
    /// The node's answer to a login.
    Welcome = 2,
    /// The node's services.
    Directory = 3,
    /// A subscriber asks for an item.
    Request = 4,
    /// An item's image.
    Refresh = 5,
    /// An item's update.
    Update = 6,
    /// A stream's state changed.
    Status = 7,
    /// A stream is closed.
    Close = 8,
    /// Are you there?
    Ping = 9,
    /// The answer to a ping.
    Pong = 10,
    /// A subscriber's contribution to an item.
    Post = 11,
    /// The answer to a post.
    Ack = 12,
    /// A subscriber asks for an item's history.
    Replay = 13,
    /// A file-transfer message.
    Files = 14,
}

impl MessageType {
    /// From its wire value.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => MessageType::Login,
            2 => MessageType::Welcome,
            3 => MessageType::Directory,
            4 => MessageType::Request,
            5 => MessageType::Refresh,
            6 => MessageType::Update,
            7 => MessageType::Status,
            8 => MessageType::Close,
            9 => MessageType::Ping,
            10 => MessageType::Pong,
            11 => MessageType::Post,
            12 => MessageType::Ack,
            13 => MessageType::Replay,
            14 => MessageType::Files,
            _ => return None,
        })
    }
}

/// What a connection does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Role {
    /// Reads items.
    Subscriber = 1,
    /// Publishes a service.
    Publisher = 2,
}

/// A stream's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum StreamState {
    /// Open: data follows.
    Open = 1,
    /// Closed for good.
    Closed = 2,
    /// Closed; ask again later.
    ClosedRecover = 3,
    /// The refresh of a snapshot request: nothing follows on this stream.
    NonStreaming = 4,
}

impl StreamState {
    /// Its name, as logs and docs/PROTOCOL.md give it.
    pub fn name(self) -> &'static str {
        match self {
            StreamState::Open => "open",
            StreamState::Closed => "closed",
            StreamState::ClosedRecover => "closed-recover",
            StreamState::NonStreaming => "non-streaming",
        }
    }
}

/// The state of a stream's data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum DataState {
    /// Up to date.
    Ok = 1,
    /// Maybe stale.
    Suspect = 2,
}

impl DataState {
    /// Its name, as logs and docs/PROTOCOL.md give it.
    pub fn name(self) -> &'static str {
        match self {
            DataState::Ok => "ok",
            DataState::Suspect => "suspect",
        }
    }
}

crate::wire_enum! {
    /// An update's kind (docs/PROTOCOL.md 3.4.4). A value this build does not name is
    /// kept as `Unknown` and passed on unchanged: a newer publisher's kinds reach every
    /// subscriber, and an older one's decoder does not refuse them.
    pub enum UpdateType {
        /// A value not named below (3 to 255).
        Unknown => "unknown";
        /// Another kind of update.
        Other = 0 => "other",
        /// A quote.
        Quote = 1 => "quote",
        /// A trade.
        Trade = 2 => "trade",
    }
}

/// A service's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ServiceState {
    /// Not available.
    Down = 0,
    /// Available.
    Up = 1,
    /// Node to subscriber only: the service is gone for good; forget it.
    Removed = 2,
}

impl ServiceState {
    /// Its name, as the directory and JSON give it.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceState::Down => "down",
            ServiceState::Up => "up",
            ServiceState::Removed => "removed",
        }
    }
}

/// Status codes carried in [`State::code`]. The text says the rest.
pub mod code {
    /// No code.
    pub const NONE: u16 = 0;
    /// No such item or service.
    pub const NOT_FOUND: u16 = 1;
    /// The service is down.
    pub const SERVICE_DOWN: u16 = 2;
    /// The connection has its most streams open.
    pub const TOO_MANY_STREAMS: u16 = 3;
    /// A malformed message.
    pub const MALFORMED: u16 = 4;
    /// The login was refused.
    pub const LOGIN_REJECTED: u16 = 5;
    /// Nothing came in time.
    pub const TIMEOUT: u16 = 6;
    /// The node is shutting down.
    pub const SHUTDOWN: u16 = 7;
    /// The subscriber fell too far behind.
    pub const SLOW_CONSUMER: u16 = 8;
    /// The node has its most connections.
    pub const TOO_MANY_CONNECTIONS: u16 = 9;
    /// The peer broke the protocol.
    pub const PROTOCOL: u16 = 10;
    /// Do-not-conflate updates could not be kept for a slow subscriber and were dropped
    /// (their values still arrive, merged, once it catches up).
    pub const UPDATES_DROPPED: u16 = 11;
    /// The item's publisher went away.
    pub const PUBLISHER_GONE: u16 = 12;
    /// Never sent by a node: made up by the client library for its streams when its
    /// connection to the node is lost.
    pub const CONNECTION_LOST: u16 = 13;
    /// The node's service limit is reached: a publisher may not add one more.
    pub const TOO_MANY_SERVICES: u16 = 14;
    /// A single message or image is larger than the node accepts (the text names the
    /// limit).
    pub const TOO_LARGE: u16 = 15;
    /// The user is not entitled to this (service, action), or no longer is.
    pub const NOT_ENTITLED: u16 = 16;
}

/// Stream state, data state, a code and a human-readable reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct State<'a> {
    /// The stream state.
    pub stream: StreamState,
    /// The data state.
    pub data: DataState,
    /// The status code (`code`).
    pub code: u16,
    /// Why, for people.
    pub text: &'a str,
}

impl State<'static> {
    /// Open, data ok, no code.
    pub const OPEN_OK: State<'static> = State {
        stream: StreamState::Open,
        data: DataState::Ok,
        code: code::NONE,
        text: "",
    };
}

impl<'a> State<'a> {
    /// Closed, data suspect, with a code and why: how a stream is refused or ended
    /// (e.g. `code::NOT_FOUND` for an item that is not there).
    pub const fn closed(code: u16, text: &'a str) -> State<'a> {
        State {
            stream: StreamState::Closed,
            data: DataState::Suspect,
            code,
            text,
        }
    }
}

/// What the node does with a subscriber that reads slower than its items update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SlowConsumerPolicy {
    /// Merge pending updates of an item into one while the subscriber is behind.
    Conflate = 1,
    /// Close the connection (closed-recover, "slow consumer") past the output bound.
    Disconnect = 2,
}

impl SlowConsumerPolicy {
    /// From its wire value.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(SlowConsumerPolicy::Conflate),
            2 => Some(SlowConsumerPolicy::Disconnect),
            _ => None,
        }
    }

    /// Its name, as logs and docs/PROTOCOL.md give it.
    pub fn name(self) -> &'static str {
        match self {
            SlowConsumerPolicy::Conflate => "conflate",
            SlowConsumerPolicy::Disconnect => "disconnect",
        }
    }

    /// From its name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "conflate" => Some(SlowConsumerPolicy::Conflate),
            "disconnect" => Some(SlowConsumerPolicy::Disconnect),
            _ => None,
        }
    }
}

/// A client logs in. Its `Debug` shows the secret's length, never the secret: a
/// message printed into a log must not hand out a password or a token.
#[derive(Clone, PartialEq, Eq)]
pub struct Login<'a> {
    /// The oldest protocol version the client speaks.
    pub version_min: u16,
    /// The newest protocol version the client speaks.
    pub version_max: u16,
    /// Publisher or subscriber.
    pub role: Role,
    /// The application name.
    pub application: &'a str,
    /// The user it logs in as.
    pub user: &'a str,
    /// Its secret: a password or a token.
    pub token: &'a str,
    /// The slow-consumer policy this connection asks for; `None` (0 on the wire): the
    /// node's choice.
    pub slow_consumer: Option<SlowConsumerPolicy>,
}

impl std::fmt::Debug for Login<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("version_min", &self.version_min)
            .field("version_max", &self.version_max)
            .field("role", &self.role)
            .field("application", &self.application)
            .field("user", &self.user)
            .field("token", &format_args!("<{} bytes>", self.token.len()))
            .field("slow_consumer", &self.slow_consumer)
            .finish()
    }
}

impl<'a> Login<'a> {
    /// A login speaking every version this build speaks, leaving the slow-consumer
    /// policy to the node.
    pub fn new(role: Role, application: &'a str, user: &'a str, token: &'a str) -> Self {
        Login {
            version_min: PROTOCOL_VERSION_MIN,
            version_max: PROTOCOL_VERSION_MAX,
            role,
            application,
            user,
            token,
            slow_consumer: None,
        }
    }
}

/// The node's answer to a login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome<'a> {
    /// The protocol version agreed.
    pub version: u16,
    /// Each side sends something (a ping when idle) at least this often.
    pub heartbeat_ms: u32,
    /// The largest frame the node takes.
    pub max_frame: u32,
    /// Streams the node lets this connection open.
    pub max_streams: u32,
    /// Bytes the node queues for this connection at most.
    pub max_output_bytes: u32,
    /// The node's name.
    pub node_name: &'a str,
}

impl Default for Welcome<'_> {
    /// The newest version, a 5 s heartbeat, 1 MiB frames, 1,000 streams, 16 MiB queued,
    /// no name: a node's answer with ordinary limits (for tests and tools; a node says
    /// its own).
    fn default() -> Self {
        Welcome {
            version: PROTOCOL_VERSION_MAX,
            heartbeat_ms: 5000,
            max_frame: 1 << 20,
            max_streams: 1000,
            max_output_bytes: 1 << 24,
            node_name: "",
        }
    }
}

/// The largest item image (encoded field list, bytes) a node with this
/// `max_output_bytes` (its Welcome says it) accepts: half the hard bound on a
/// subscriber's queue, so a whole image always fits in the queue with room for what
/// surrounds it. A larger one could never be delivered: every subscriber would be
/// dropped as a slow consumer.
pub fn max_image_bytes(max_output_bytes: usize) -> usize {
    max_output_bytes / 2
}

/// One service in the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceEntry<'a> {
    /// The service's name.
    pub name: &'a str,
    /// Its state.
    pub state: ServiceState,
    /// The publisher answers requests for items it has not published yet.
    pub interactive: bool,
    /// Items it has.
    pub item_count: u32,
}

/// The node's services.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directory<'a> {
    /// The services.
    pub services: Vec<ServiceEntry<'a>>,
}

impl<'a> Directory<'a> {
    /// One service, up and not interactive, with `item_count` items: what a publisher of
    /// one feed announces.
    pub fn one_service(name: &'a str, item_count: u32) -> Self {
        Directory {
            services: vec![ServiceEntry {
                name,
                state: ServiceState::Up,
                interactive: false,
                item_count,
            }],
        }
    }

    /// Services in the states given, none interactive, no item count.
    pub fn of(services: impl IntoIterator<Item = (&'a str, ServiceState)>) -> Self {
        Directory {
            services: services
                .into_iter()
                .map(|(name, state)| ServiceEntry {
                    name,
                    state,
                    interactive: false,
                    item_count: 0,
                })
                .collect(),
        }
    }
}

/// A list of field ids (a view), kept encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FidList<'a> {
    bytes: &'a [u8],
}

impl<'a> FidList<'a> {
    /// Each field id.
    pub fn iter(&self) -> impl Iterator<Item = i16> + 'a {
        self.bytes
            .chunks_exact(2)
            .map(|c| i16::from_be_bytes([c[0], c[1]]))
    }
    /// Field ids in the list.
    pub fn len(&self) -> usize {
        self.bytes.len() / 2
    }
    /// No field id.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// The fields a subscriber wants of an item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum View<'a> {
    /// As it came on the wire.
    Encoded(FidList<'a>),
    /// As a list of field ids.
    Fids(&'a [i16]),
}

impl View<'_> {
    /// The field ids.
    pub fn fids(&self) -> Vec<i16> {
        match self {
            View::Encoded(l) => l.iter().collect(),
            View::Fids(f) => f.to_vec(),
        }
    }
}

/// A subscriber asks for an item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    /// The stream it belongs to.
    pub stream_id: u32,
    /// false: snapshot (one refresh, then the stream closes).
    pub streaming: bool,
    /// The item's service.
    pub service: &'a str,
    /// The item's name.
    pub name: &'a str,
    /// The fields wanted (`None`: all).
    pub view: Option<View<'a>>,
    /// false: change an open stream of this item in place (its view, nothing else)
    /// without a new image, as RWF's `NO_REFRESH` reissue does. On a stream that is not
    /// open for this item it is refused with a closed status.
    pub refresh: bool,
}

impl<'a> Request<'a> {
    /// A streaming request for every field of `service`'s `name`, with its image.
    pub fn streaming(stream_id: u32, service: &'a str, name: &'a str) -> Self {
        Request {
            stream_id,
            streaming: true,
            service,
            name,
            view: None,
            refresh: true,
        }
    }
}

/// An item's image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refresh<'a> {
    /// The stream it belongs to.
    pub stream_id: u32,
    /// The item's sequence number.
    pub seq: u32,
    /// Last part of a (possibly multi-part) image.
    pub complete: bool,
    /// An answer to a request, as opposed to an unsolicited re-image.
    pub solicited: bool,
    /// Replace the cached image instead of merging into it (set on the first part).
    pub clear_cache: bool,
    /// Its state.
    pub state: State<'a>,
    /// The item's service.
    pub service: &'a str,
    /// The item's name.
    pub name: &'a str,
    /// The fields.
    pub fields: FieldList<'a>,
}

impl<'a> Refresh<'a> {
    /// A whole image in one part, unsolicited, open and ok, replacing what was cached:
    /// what a publisher sends of an item it images (set `solicited` for an answer).
    pub fn whole(
        stream_id: u32,
        seq: u32,
        service: &'a str,
        name: &'a str,
        fields: FieldList<'a>,
    ) -> Self {
        Refresh {
            stream_id,
            seq,
            complete: true,
            solicited: false,
            clear_cache: true,
            state: State::OPEN_OK,
            service,
            name,
            fields,
        }
    }
}

/// An item's update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update<'a> {
    /// The stream it belongs to.
    pub stream_id: u32,
    /// The item's sequence number.
    pub seq: u32,
    /// What kind of update.
    pub update_type: UpdateType,
    /// Never merge this update with another (trades, typically).
    pub do_not_conflate: bool,
    /// How many publisher updates this one stands for (1 unless conflated).
    pub conflation_count: u16,
    /// The fields.
    pub fields: FieldList<'a>,
}

impl<'a> Update<'a> {
    /// A publisher's update as it sends it: one update (not conflated), which a node
    /// may conflate for a slow subscriber.
    pub fn new(stream_id: u32, seq: u32, update_type: UpdateType, fields: FieldList<'a>) -> Self {
        Update {
            stream_id,
            seq,
            update_type,
            do_not_conflate: false,
            conflation_count: 1,
            fields,
        }
    }
}

/// A stream's state changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status<'a> {
    /// 0 for connection-level status (login rejected, disconnect reason).
    pub stream_id: u32,
    /// Its state.
    pub state: State<'a>,
}

crate::wire_enum! {
    /// Why a post was refused (0 on the wire: it was accepted, see [`NakCode::of_ack`]).
    /// The names are those of the WebSocket API's `NakCode`. A code this build does not
    /// name is kept as `Unknown` and passed on unchanged (the Ack's text says the rest);
    /// its name is the API's `None` (no particular reason: the text says it).
    pub enum NakCode {
        /// A code not named below (never 0, which means accepted).
        Unknown => "None";
        /// The poster is not entitled to post to the service.
        AccessDenied = 1 => "AccessDenied",
        /// The service (its node or its publisher) does not take this post.
        DeniedBySrc = 2 => "DeniedBySrc",
        /// The service has no publisher, or it is down.
        SourceDown = 3 => "SourceDown",
        /// No such service.
        SourceUnknown = 4 => "SourceUnknown",
        /// Too many posts are waiting for an answer.
        NoResources = 5 => "NoResources",
        /// The publisher did not answer in time.
        NoResponse = 6 => "NoResponse",
        /// The node could not reach the service's node (an upstream link is down).
        GatewayDown = 7 => "GatewayDown",
        /// The publisher has no such item.
        SymbolUnknown = 10 => "SymbolUnknown",
        /// An on-stream post named a stream that is not open.
        NotOpen = 11 => "NotOpen",
        /// The post's fields were not acceptable.
        InvalidContent = 12 => "InvalidContent",
    }
}

impl NakCode {
    /// An Ack's code byte: `None` for 0 (accepted), else the refusal's code.
    pub const fn of_ack(v: u8) -> Option<Self> {
        match v {
            0 => None,
            v => Some(NakCode::from_u8(v)),
        }
    }

    /// A named code by its WebSocket API name.
    pub fn parse(name: &str) -> Option<Self> {
        NakCode::NAMED.iter().copied().find(|c| c.name() == name)
    }
}

/// A contribution to an item: subscriber -> node, node -> publisher (docs/PROTOCOL.md,
/// 3.5.10). On-stream, `stream_id` is the poster's open stream and the names are
/// empty; off-stream, `stream_id` is 0 and the names say which item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Post<'a> {
    /// The stream it belongs to.
    pub stream_id: u32,
    /// The poster's number for it; the Ack carries it back.
    pub post_id: u32,
    /// The poster wants an Ack (or a Nak) for it.
    pub ack: bool,
    /// The fields are a whole image (the WebSocket API's posted Refresh), not an update.
    pub image: bool,
    /// Node -> publisher: delivered again after a node restart, from its journal; the
    /// publisher may have had it before (its answer was not recorded).
    pub redelivered: bool,
    /// The item's service.
    pub service: &'a str,
    /// The item's name.
    pub name: &'a str,
    /// The fields.
    pub fields: FieldList<'a>,
}

/// The answer to a post: publisher -> node, node -> subscriber.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack<'a> {
    /// The stream the post came on (0: off-stream).
    pub stream_id: u32,
    /// The poster's number for the post.
    pub post_id: u32,
    /// `None`: accepted.
    pub nak: Option<NakCode>,
    /// Why, for people.
    pub text: &'a str,
}

/// Where a replay starts (docs/PROTOCOL.md, 6.15).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplayFrom {
    /// The item's sequence number (as in its refreshes and updates).
    Seq(u32),
    /// A time: nanoseconds since the Unix epoch at which the node journaled it.
    Time(u64),
}

/// Subscriber -> node: open a stream on an item with its history first: the node's
/// journal's refreshes and updates of the item from `from`, then live ones, with no gap
/// and no repeat (docs/PROTOCOL.md, 6.15).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replay<'a> {
    /// The stream it belongs to.
    pub stream_id: u32,
    /// Where the history starts.
    pub from: ReplayFrom,
    /// The item's service.
    pub service: &'a str,
    /// The item's name.
    pub name: &'a str,
}

/// A message of the protocol (docs/PROTOCOL.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message<'a> {
    /// A client logs in.
    Login(Login<'a>),
    /// The node's answer to a login.
    Welcome(Welcome<'a>),
    /// The node's services.
    Directory(Directory<'a>),
    /// A subscriber asks for an item.
    Request(Request<'a>),
    /// An item's image.
    Refresh(Refresh<'a>),
    /// An item's update.
    Update(Update<'a>),
    /// A stream's state changed.
    Status(Status<'a>),
    /// A stream is closed.
    Close {
        /// The stream it belongs to.
        stream_id: u32,
    },
    /// Are you there?
    Ping(u64),
    /// The answer to a ping.
    Pong(u64),
    /// A subscriber's contribution to an item.
    Post(Post<'a>),
    /// The answer to a post.
    Ack(Ack<'a>),
    /// A subscriber asks for an item's history.
    Replay(Replay<'a>),
    /// A file-transfer message (`tickwire-files`'s wire format), carried opaque:
    /// between nodes of a tree, and between `tickwire files` and a node.
    Files(&'a [u8]),
}

const REQ_STREAMING: u8 = 1;
const REQ_VIEW: u8 = 2;
const REQ_NO_REFRESH: u8 = 4;
const REF_COMPLETE: u8 = 1;
const REF_SOLICITED: u8 = 2;
const REF_CLEAR: u8 = 4;
const UPD_DO_NOT_CONFLATE: u8 = 1;
const POST_ACK: u8 = 1;
const POST_IMAGE: u8 = 2;
const POST_REDELIVERED: u8 = 4;

/// Largest number of field ids in a view.
pub const MAX_VIEW_FIDS: usize = 1024;

/// Most field ids a batch request of the gateways (RSSL, WebSocket) may name over all
/// its items (items x the view's fields): each item's Request to the core carries the
/// view, so a batch of 10,000 items with a view of 1,024 fields would be 20 MB of
/// requests made of one message of tens of KB. A million: 2 MB at most, and any batch
/// of up to 1,000 items with the largest view.
pub const MAX_BATCH_VIEW_FIELDS: usize = 1 << 20;

impl<'a> Message<'a> {
    /// Its type.
    pub fn message_type(&self) -> MessageType {
        match self {
            Message::Login(_) => MessageType::Login,
            Message::Welcome(_) => MessageType::Welcome,
            Message::Directory(_) => MessageType::Directory,
            Message::Request(_) => MessageType::Request,
            Message::Refresh(_) => MessageType::Refresh,
            Message::Update(_) => MessageType::Update,
            Message::Status(_) => MessageType::Status,
            Message::Close { .. } => MessageType::Close,
            Message::Ping(_) => MessageType::Ping,
            Message::Pong(_) => MessageType::Pong,
            Message::Post(_) => MessageType::Post,
            Message::Ack(_) => MessageType::Ack,
            Message::Replay(_) => MessageType::Replay,
            Message::Files(_) => MessageType::Files,
        }
    }
}
