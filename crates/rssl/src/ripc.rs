//! RIPC, the connection layer of RSSL's socket connection type, server side.
//!
//! Every RIPC message starts with a 3-byte header: `u16` length (big-endian, header
//! included) and a flags byte. The client opens with a ConnectReq naming its connection
//! version (RIPC 14 down to 11: a client whose version is refused closes and tries the
//! next lower one on a new connection); the server answers ConnectAck (the RIPC version,
//! the largest message, the ping timeout, compression: always none here) or ConnectNak
//! with a reason. RIPC 14 clients ask for a key exchange (Diffie-Hellman over 64-bit
//! numbers); they answer the ConnectAck with their half, and the shared key is theirs
//! to use (the SDK encrypts passwords with it). Then:
//! - a message of the header alone is a ping;
//! - flags `DATA` (0x02): one RWF message;
//! - `DATA | PACKING` (0x12): several, each after a `u16` length;
//! - `DATA | EXTENDED` (0x03) and an extended flags byte: a fragment of a message longer
//!   than the largest RIPC message. The first (0x08) carries the whole length (`u32`)
//!   and a fragment id (`u16` from RIPC 13 on, `u8` before); the others (0x04) the id.
//!
//! [`Channel`] is one connection's state: bytes in ([`Channel::handle_bytes`]), RWF
//! messages out ([`Channel::poll`]); RWF messages in ([`Channel::send`]), bytes out
//! ([`Channel::transmit`]). It packs what is sent in one turn ([`Channel::end_batch`]),
//! fragments what is too long, and keeps the pings ([`Channel::handle_timeout`]).

mod handshake;
mod receive;
mod send;

pub use handshake::{connect_nak, looks_like_connect_req};

use std::time::{Duration, Instant};

/// Header of every RIPC message: length (2) and flags (1).
pub const HEADER_LEN: usize = 3;
const FLAG_EXTENDED: u8 = 0x01;
const FLAG_DATA: u8 = 0x02;
const FLAG_COMPRESSED: u8 = 0x04;
const FLAG_COMP_FRAGMENT: u8 = 0x08;
const FLAG_PACKING: u8 = 0x10;
const EXT_CONNECT_ACK: u8 = 0x01;
const EXT_CONNECT_NAK: u8 = 0x02;
const EXT_FRAGMENT: u8 = 0x04;
const EXT_FRAGMENT_HEADER: u8 = 0x08;
/// The ConnectReq's flag asking for a key exchange, and the ClientKey's opcode.
const KEY_EXCHANGE: u8 = 0x08;
/// The only key exchange type the SDK knows (64-bit Diffie-Hellman).
const KEY_EXCHANGE_TR_SL1_64: u8 = 1;
/// Session flags: the client pings the server, the server pings the client.
const PING_CLIENT_TO_SERVER: u8 = 0x01;
const PING_SERVER_TO_CLIENT: u8 = 0x02;
/// The RWF protocol type in a ConnectReq (JSON is 2).
const PROTOCOL_RWF: u8 = 0;
/// The RWF version this side speaks (major, minor); the lower of both sides is used.
const RWF_MAJOR: u8 = 14;
const RWF_MINOR: u8 = 1;
/// Bytes in a packed entry's length.
const PACKED_LEN: usize = 2;

/// A RIPC version this server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    /// RIPC 11.
    V11,
    /// RIPC 12.
    V12,
    /// RIPC 13.
    V13,
    /// RIPC 14 (with the key exchange).
    V14,
}

impl Version {
    /// From the connection version of a ConnectReq.
    pub fn from_connection_version(v: u32) -> Option<Version> {
        Some(match v {
            0x14 => Version::V11,
            0x15 => Version::V12,
            0x16 => Version::V13,
            0x17 => Version::V14,
            _ => return None,
        })
    }

    /// The connection version a ConnectReq carries.
    fn connection_version(self) -> u32 {
        match self {
            Version::V11 => 0x14,
            Version::V12 => 0x15,
            Version::V13 => 0x16,
            Version::V14 => 0x17,
        }
    }

    /// The version a client tries next when a server refuses this one.
    pub fn lower(self) -> Option<Version> {
        match self {
            Version::V14 => Some(Version::V13),
            Version::V13 => Some(Version::V12),
            Version::V12 => Some(Version::V11),
            Version::V11 => None,
        }
    }

    /// The RIPC version number a ConnectAck carries.
    fn ripc_version(self) -> u32 {
        match self {
            Version::V11 => 6,
            Version::V12 => 7,
            Version::V13 => 8,
            Version::V14 => 9,
        }
    }

    /// Bytes of a fragment id.
    fn frag_id_len(self) -> usize {
        if self >= Version::V13 {
            2
        } else {
            1
        }
    }

    /// The number as people know it (11 to 14).
    pub fn number(self) -> u8 {
        match self {
            Version::V11 => 11,
            Version::V12 => 12,
            Version::V13 => 13,
            Version::V14 => 14,
        }
    }
}

/// What a node offers every RSSL connection.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The largest RIPC message either side sends, header included
    /// (`[rssl] max_msg_size`); longer RWF messages are fragmented.
    pub max_msg_size: u16,
    /// The longest ping timeout granted, in seconds: a client asking for more gets
    /// this.
    pub max_ping_timeout_s: u8,
    /// The shortest ping timeout granted, in seconds.
    pub min_ping_timeout_s: u8,
    /// The largest RWF message accepted from a client, reassembled from fragments.
    pub max_message: usize,
    /// Sent as the server's component version (the SDK logs it).
    pub component: String,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_msg_size: 6144,
            max_ping_timeout_s: 60,
            min_ping_timeout_s: 3,
            max_message: 256 * 1024,
            component: format!("tickwire {}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// Why a connection ends.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RipcError {
    /// The first bytes are not a ConnectReq.
    #[error("not a RIPC connection request: {0}")]
    NotRipc(String),
    /// A message that does not parse.
    #[error("malformed RIPC message: {0}")]
    Malformed(String),
    /// A RIPC version this server does not speak.
    #[error("RIPC connection version {0:#x} is not supported (RIPC 11 to 14 are)")]
    UnsupportedVersion(u32),
    /// A message larger than agreed.
    #[error("a message of {len} bytes exceeds the maximum of {max}")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The most allowed.
        max: usize,
    },
    /// Compressed data (compression is negotiated off).
    #[error("compressed RIPC messages were not negotiated")]
    Compressed,
    /// Nothing from the peer past its ping timeout (seconds).
    #[error("nothing received for {0} s (the ping timeout)")]
    TimedOut(u64),
    /// The peer refused the connection.
    #[error("the connection is refused: {0}")]
    Refused(String),
}

/// What the client said of itself in its ConnectReq.
#[derive(Debug, Clone, Default)]
pub struct ClientInfo {
    /// Its host name.
    pub host_name: String,
    /// Its IP address, as it said it.
    pub ip_address: String,
    /// Its component version text.
    pub component: String,
}

/// What [`Channel::poll`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// The handshake is complete: RWF messages may flow.
    Connected,
    /// One whole RWF message, in the buffer given.
    Message,
}

#[derive(Debug)]
enum State {
    /// Client side: the ConnectReq is sent.
    AwaitConnectAck,
    AwaitConnectReq,
    AwaitClientKey {
        p: u64,
        secret: u64,
    },
    /// Active, `Connected` not yet reported.
    Established,
    Active,
    Closed,
}

/// A message being reassembled from fragments.
#[derive(Debug)]
struct Reassembly {
    id: u16,
    total: usize,
    data: Vec<u8>,
}

/// Fragmented messages a client may have in progress at once.
const MAX_REASSEMBLIES: usize = 8;

/// What a connection's buffers keep between bursts: a burst's memory (megabytes for a
/// consumer that did not read for a while, a dictionary download) goes back once it is
/// written or handled, as a native connection's does.
const KEEP_BUFFER: usize = 64 * 1024;

/// One RSSL connection's RIPC layer.
#[derive(Debug)]
pub struct Channel {
    settings: Settings,
    state: State,
    version: Option<Version>,
    /// Bytes received; those before `pos` are parsed.
    input: Vec<u8>,
    pos: usize,
    /// The packed message being handed out: its next entry and its end, in `input`.
    packed: Option<(usize, usize)>,
    /// Bytes for the socket; `sent` of them are written.
    out: Vec<u8>,
    sent: usize,
    /// The packed message open at the end of `out`: its start and entry count.
    open: Option<(usize, usize)>,
    reassembly: Vec<Reassembly>,
    next_frag_id: u16,
    ping_timeout: Duration,
    last_received: Instant,
    last_sent: Instant,
    /// Something was sent since `last_sent` was last brought up to date.
    sent_since: bool,
    client: ClientInfo,
    shared_key: u64,
}

impl Channel {
    /// A server-side channel, waiting for a ConnectReq.
    pub fn new(settings: Settings, now: Instant) -> Self {
        Channel {
            ping_timeout: Duration::from_secs(settings.max_ping_timeout_s.max(1) as u64),
            settings,
            state: State::AwaitConnectReq,
            version: None,
            input: Vec::new(),
            pos: 0,
            packed: None,
            out: Vec::new(),
            sent: 0,
            open: None,
            reassembly: Vec::new(),
            next_frag_id: 1,
            last_received: now,
            last_sent: now,
            sent_since: false,
            client: ClientInfo::default(),
            shared_key: 0,
        }
    }

    /// A client still waiting for the server's ConnectAck (a server that closes now
    /// may not speak this RIPC version).
    pub fn awaits_connect_ack(&self) -> bool {
        matches!(self.state, State::AwaitConnectAck)
    }

    /// The version the handshake settled on.
    pub fn version(&self) -> Option<Version> {
        self.version
    }

    /// The ping timeout granted; pings go out every third of it.
    pub fn ping_timeout(&self) -> Duration {
        self.ping_timeout
    }

    /// What the client said of itself.
    pub fn client(&self) -> &ClientInfo {
        &self.client
    }

    /// The key both sides agreed in RIPC 14's key exchange (0 without one).
    pub fn shared_key(&self) -> u64 {
        self.shared_key
    }

    /// True once the handshake is complete and until the channel closes.
    pub fn is_active(&self) -> bool {
        matches!(self.state, State::Established | State::Active)
    }

    /// Bytes read from the socket.
    pub fn handle_bytes(&mut self, bytes: &[u8], now: Instant) {
        if bytes.is_empty() {
            return;
        }
        // What was parsed goes, once per read rather than once per message; a packed
        // message's entries not handed out yet stay.
        let done = self.packed.map_or(self.pos, |(at, _)| at.min(self.pos));
        if done > 0 {
            self.input.drain(..done);
            if let Some((at, end)) = &mut self.packed {
                *at -= done;
                *end -= done;
            }
            self.pos -= done;
        }
        self.input.extend_from_slice(bytes);
        self.last_received = now;
    }

    /// The peer counts as heard from at `now`: the node holds back reading its socket
    /// (what it sent before waits to be handled), so its pings may be there, unread.
    pub fn hold_alive(&mut self, now: Instant) {
        self.last_received = self.last_received.max(now);
    }

    /// Bytes queued and not yet written.
    pub fn pending(&self) -> usize {
        self.out.len() - self.sent
    }

    /// The pings: one goes out when nothing else did for a third of the timeout; a
    /// client silent for the whole timeout is gone.
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), RipcError> {
        if !self.is_active() {
            return Ok(());
        }
        if std::mem::take(&mut self.sent_since) {
            self.last_sent = now;
        }
        if now.saturating_duration_since(self.last_received) >= self.ping_timeout {
            self.state = State::Closed;
            return Err(RipcError::TimedOut(self.ping_timeout.as_secs()));
        }
        if now.saturating_duration_since(self.last_sent) >= self.ping_timeout / 3 {
            self.end_batch();
            self.out
                .extend_from_slice(&[0, HEADER_LEN as u8, FLAG_DATA]);
            self.last_sent = now;
        }
        Ok(())
    }

    /// When [`Channel::handle_timeout`] has something to do (early after a send: the
    /// send is then dated).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.is_active().then(|| {
            (self.last_sent + self.ping_timeout / 3).min(self.last_received + self.ping_timeout)
        })
    }
}

#[cfg(test)]
mod tests;

/// Bulk output (dictionary parts) waits while this much is queued for the socket.
const BULK_HIGH: usize = 256 * 1024;

impl crate::session::Outbox for Channel {
    fn send(&mut self, rwf: &[u8]) {
        Channel::send(self, rwf);
    }

    fn has_room(&self) -> bool {
        self.pending() < BULK_HIGH
    }
}
