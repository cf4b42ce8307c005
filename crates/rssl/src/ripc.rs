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

    /// The client side of a connection (the node connecting to an interactive
    /// provider): a RIPC 14 ConnectReq (no key exchange, no compression) is queued.
    pub fn connect(settings: Settings, host: &str, now: Instant) -> Self {
        Channel::connect_at(settings, host, Version::V14, now)
    }

    /// As [`Channel::connect`], at RIPC `version` (a server that closes at one version
    /// is tried at the next lower one, on a new connection, as the SDK's clients do).
    pub fn connect_at(settings: Settings, host: &str, version: Version, now: Instant) -> Self {
        let mut c = Channel::new(settings, now);
        let mut m = vec![0, 0, 0];
        m.extend_from_slice(&version.connection_version().to_be_bytes());
        m.push(0); // no key exchange
        let header_len_at = m.len();
        m.push(0);
        m.push(0); // no compression bitmap
        m.push(c.settings.max_ping_timeout_s.max(1));
        m.push(0); // session flags
        if version >= Version::V12 {
            m.push(PROTOCOL_RWF);
        }
        m.push(RWF_MAJOR);
        m.push(RWF_MINOR);
        for text in [host, "127.0.0.1"] {
            let t = &text.as_bytes()[..text.len().min(255)];
            m.push(t.len() as u8);
            m.extend_from_slice(t);
        }
        m[header_len_at] = m.len() as u8;
        if version >= Version::V13 {
            put_component_version(&mut m, &c.settings.component);
        }
        set_handshake_len(&mut m);
        c.out = m;
        c.state = State::AwaitConnectAck;
        c.version = Some(version);
        c
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

    /// The next thing the bytes received hold: the handshake's end, or one RWF message
    /// (copied into `msg`). `Ok(None)`: more bytes are needed. After an error the
    /// channel is closed (a ConnectNak may be waiting in [`Channel::transmit`]).
    pub fn poll(&mut self, msg: &mut Vec<u8>) -> Result<Option<Input>, RipcError> {
        let r = self.poll_inner(msg);
        if r.is_err() {
            self.state = State::Closed;
            self.input = Vec::new();
            self.pos = 0;
            self.packed = None;
        } else if matches!(r, Ok(None)) && self.pos == self.input.len() && self.packed.is_none() {
            // All of it handled.
            self.input.clear();
            self.pos = 0;
            self.input.shrink_to(KEEP_BUFFER);
        }
        r
    }

    fn poll_inner(&mut self, msg: &mut Vec<u8>) -> Result<Option<Input>, RipcError> {
        loop {
            match self.state {
                State::Closed => return Ok(None),
                State::Established => {
                    self.state = State::Active;
                    return Ok(Some(Input::Connected));
                }
                State::AwaitConnectAck => {
                    let Some(ack) = self.take_handshake_message()? else {
                        return Ok(None);
                    };
                    self.on_connect_ack(&ack)?;
                    self.state = State::Established;
                }
                State::AwaitConnectReq => {
                    // A TLS record of type handshake (a ClientHello) would read as a
                    // ConnectReq of 5,635 bytes or more, waited for while the client
                    // waits for the server's answer.
                    if self.input[self.pos..].starts_with(&[0x16, 0x03]) {
                        return Err(RipcError::NotRipc(
                            "a TLS handshake, on a port without TLS (the node has no \
                             [tls]): connect without encryption"
                                .into(),
                        ));
                    }
                    let Some(req) = self.take_handshake_message()? else {
                        return Ok(None);
                    };
                    self.on_connect_req(&req)?;
                }
                State::AwaitClientKey { p, secret } => {
                    let Some(key) = self.take_handshake_message()? else {
                        return Ok(None);
                    };
                    self.on_client_key(&key, p, secret)?;
                    self.state = State::Established;
                }
                State::Active => {
                    if self.packed_entry(msg)? {
                        return Ok(Some(Input::Message));
                    }
                    let Some(len) = self.whole_message()? else {
                        return Ok(None);
                    };
                    let start = self.pos;
                    self.pos += len;
                    if self.on_data(start, len, msg)? {
                        return Ok(Some(Input::Message));
                    }
                }
            }
        }
    }

    /// The next whole handshake message, taken out of the input (a copy: handling it
    /// writes to the channel).
    fn take_handshake_message(&mut self) -> Result<Option<Vec<u8>>, RipcError> {
        let Some(len) = self.whole_message()? else {
            return Ok(None);
        };
        let m = self.input[self.pos..self.pos + len].to_vec();
        self.pos += len;
        Ok(Some(m))
    }

    /// The length of the RIPC message at the front of `input`, once all of it is there.
    fn whole_message(&self) -> Result<Option<usize>, RipcError> {
        let input = &self.input[self.pos..];
        if input.len() < 2 {
            return Ok(None);
        }
        let len = u16::from_be_bytes([input[0], input[1]]) as usize;
        if len < HEADER_LEN {
            return Err(RipcError::Malformed(format!(
                "a message length of {len} is shorter than the header"
            )));
        }
        Ok((input.len() >= len).then_some(len))
    }

    fn on_connect_req(&mut self, req: &[u8]) -> Result<(), RipcError> {
        if req.len() < 8 {
            return Err(RipcError::NotRipc(format!(
                "a ConnectReq of {} bytes is too short",
                req.len()
            )));
        }
        let conn_version = u32::from_be_bytes([req[3], req[4], req[5], req[6]]);
        let Some(version) = Version::from_connection_version(conn_version) else {
            // The client tries a lower version on a new connection; a Nak would stop
            // it (the SDK's own server closes too).
            return Err(RipcError::UnsupportedVersion(conn_version));
        };
        let parsed = ConnectReq::parse(req, version)?;
        if parsed.protocol_type != PROTOCOL_RWF {
            let text = format!(
                "protocol type {} is not supported (only RWF, 0)",
                parsed.protocol_type
            );
            self.nak(&text);
            return Err(RipcError::Refused(text));
        }
        self.version = Some(version);
        self.client = parsed.client;
        let asked = parsed.ping_timeout_s;
        let granted = asked.clamp(
            self.settings.min_ping_timeout_s.max(1),
            self.settings.max_ping_timeout_s.max(1),
        );
        self.ping_timeout = Duration::from_secs(granted as u64);
        let (major, minor) = if (parsed.major, parsed.minor) < (RWF_MAJOR, RWF_MINOR) {
            (parsed.major, parsed.minor)
        } else {
            (RWF_MAJOR, RWF_MINOR)
        };
        let key_exchange = version == Version::V14 && parsed.key_exchange;
        let mut ack = Vec::with_capacity(64);
        ack.extend_from_slice(&[0, 0, FLAG_EXTENDED, EXT_CONNECT_ACK, 10, 0]);
        ack.extend_from_slice(&version.ripc_version().to_be_bytes());
        ack.extend_from_slice(&self.settings.max_msg_size.to_be_bytes());
        ack.push(PING_CLIENT_TO_SERVER | PING_SERVER_TO_CLIENT);
        ack.push(granted);
        ack.push(major);
        ack.push(minor);
        ack.extend_from_slice(&0u16.to_be_bytes()); // compression: none
        ack.push(0); // compression level
        if key_exchange {
            // The SDK's 64-bit Diffie-Hellman: P random, G = 5, our half G^secret mod P.
            let p = random_u63().max(7);
            let g = 5u64;
            let secret = random_u63();
            ack.push(KEY_EXCHANGE);
            ack.push(KEY_EXCHANGE_TR_SL1_64);
            ack.push(24);
            ack.extend_from_slice(&p.to_be_bytes());
            ack.extend_from_slice(&g.to_be_bytes());
            ack.extend_from_slice(&mod_pow(g, secret, p).to_be_bytes());
            self.state = State::AwaitClientKey { p, secret };
        } else {
            self.state = State::Established;
        }
        if version >= Version::V13 {
            put_component_version(&mut ack, &self.settings.component);
        }
        set_handshake_len(&mut ack);
        self.out.extend_from_slice(&ack);
        Ok(())
    }

    /// The server's answer to our ConnectReq: its largest message, the ping timeout, no
    /// compression; or a refusal with its reason.
    fn on_connect_ack(&mut self, m: &[u8]) -> Result<(), RipcError> {
        let cut = || RipcError::Malformed("the ConnectAck is cut short".into());
        if m.len() < 4 || m[2] & FLAG_EXTENDED == 0 {
            return Err(RipcError::Malformed(
                "expected a ConnectAck or ConnectNak".into(),
            ));
        }
        if m[3] & EXT_CONNECT_NAK != 0 {
            let n = m
                .get(6..8)
                .map_or(0, |b| u16::from_be_bytes([b[0], b[1]]) as usize);
            let text = m.get(8..8 + n).unwrap_or(&[]);
            let text = String::from_utf8_lossy(text)
                .trim_end_matches('\0')
                .to_string();
            return Err(RipcError::Refused(text));
        }
        if m[3] & EXT_CONNECT_ACK == 0 || m.len() < 19 {
            return Err(cut());
        }
        let ripc = u32::from_be_bytes([m[6], m[7], m[8], m[9]]);
        let asked = self.version.unwrap_or(Version::V14);
        if ripc != asked.ripc_version() {
            return Err(RipcError::UnsupportedVersion(ripc));
        }
        let max = u16::from_be_bytes([m[10], m[11]]);
        self.settings.max_msg_size = self.settings.max_msg_size.min(max.max(512));
        self.ping_timeout = Duration::from_secs(m[13].max(1) as u64);
        if u16::from_be_bytes([m[16], m[17]]) != 0 {
            return Err(RipcError::Compressed);
        }
        Ok(())
    }

    fn on_client_key(&mut self, key: &[u8], p: u64, secret: u64) -> Result<(), RipcError> {
        if key.len() < 4 || key[2] != KEY_EXCHANGE {
            return Err(RipcError::Malformed(
                "expected the client's key exchange after the ConnectAck".into(),
            ));
        }
        let key_len = key[3] as usize;
        if key_len == 8 && key.len() >= 12 {
            let theirs = u64::from_be_bytes(key[4..12].try_into().expect("8 bytes"));
            self.shared_key = mod_pow(theirs, secret, p);
        }
        Ok(())
    }

    /// Refuses the connection with a reason (a ConnectNak); only before the handshake
    /// is complete.
    pub fn nak(&mut self, text: &str) {
        self.out.extend_from_slice(&connect_nak(text));
        self.state = State::Closed;
    }

    /// The next entry of the packed message being handed out, if one is.
    fn packed_entry(&mut self, msg: &mut Vec<u8>) -> Result<bool, RipcError> {
        while let Some((at, end)) = self.packed {
            if end - at < PACKED_LEN {
                return Err(RipcError::Malformed(
                    "a packed entry's length is cut".into(),
                ));
            }
            let n = u16::from_be_bytes([self.input[at], self.input[at + 1]]) as usize;
            let from = at + PACKED_LEN;
            if n > end - from {
                return Err(RipcError::Malformed(format!(
                    "a packed entry of {n} bytes runs past its message"
                )));
            }
            self.packed = (from + n < end).then_some((from + n, end));
            if n > 0 {
                msg.clear();
                msg.extend_from_slice(&self.input[from..from + n]);
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// One RIPC data message at `start` in `input`: true if it completed an RWF
    /// message (in `msg`).
    fn on_data(&mut self, start: usize, len: usize, msg: &mut Vec<u8>) -> Result<bool, RipcError> {
        let flags = self.input[start + 2];
        if len == HEADER_LEN {
            return Ok(false); // a ping: it has done its work by arriving
        }
        if flags & (FLAG_COMPRESSED | FLAG_COMP_FRAGMENT) != 0 {
            return Err(RipcError::Compressed);
        }
        if flags & FLAG_PACKING != 0 {
            self.packed = Some((start + HEADER_LEN, start + len));
            return self.packed_entry(msg);
        }
        if flags & FLAG_EXTENDED != 0 {
            return self.on_fragment(start, len, msg);
        }
        if flags & FLAG_DATA == 0 {
            return Err(RipcError::Malformed(format!(
                "flags {flags:#04x} name no data"
            )));
        }
        let body = &self.input[start + HEADER_LEN..start + len];
        if body.len() > self.settings.max_message {
            return Err(RipcError::TooLarge {
                len: body.len(),
                max: self.settings.max_message,
            });
        }
        msg.clear();
        msg.extend_from_slice(body);
        Ok(true)
    }

    fn on_fragment(
        &mut self,
        start: usize,
        len: usize,
        msg: &mut Vec<u8>,
    ) -> Result<bool, RipcError> {
        let version = self.version.expect("active");
        let id_len = version.frag_id_len();
        let m = &self.input[start..start + len];
        if m.len() < HEADER_LEN + 1 {
            return Err(RipcError::Malformed("a fragment without its flags".into()));
        }
        let ext = m[3];
        let read_id = |at: usize| -> Result<u16, RipcError> {
            if m.len() < at + id_len {
                return Err(RipcError::Malformed("a fragment's id is cut".into()));
            }
            Ok(if id_len == 2 {
                u16::from_be_bytes([m[at], m[at + 1]])
            } else {
                m[at] as u16
            })
        };
        if ext & EXT_FRAGMENT_HEADER != 0 {
            if m.len() < 8 {
                return Err(RipcError::Malformed("a first fragment is cut".into()));
            }
            let total = u32::from_be_bytes([m[4], m[5], m[6], m[7]]) as usize;
            let id = read_id(8)?;
            let data = &m[8 + id_len..];
            if total > self.settings.max_message {
                return Err(RipcError::TooLarge {
                    len: total,
                    max: self.settings.max_message,
                });
            }
            if data.len() > total {
                return Err(RipcError::Malformed(
                    "a first fragment longer than its message".into(),
                ));
            }
            self.reassembly.retain(|r| r.id != id);
            if self.reassembly.len() >= MAX_REASSEMBLIES {
                return Err(RipcError::Malformed(format!(
                    "more than {MAX_REASSEMBLIES} fragmented messages at once"
                )));
            }
            // What all messages in progress will hold is bounded like one message.
            let held: usize = self.reassembly.iter().map(|r| r.total).sum();
            if held + total > self.settings.max_message {
                return Err(RipcError::TooLarge {
                    len: held + total,
                    max: self.settings.max_message,
                });
            }
            // Room for what came, not for what is announced: a peer that announces
            // a large message and sends no more holds no memory for it.
            let mut buf = Vec::with_capacity(total.min(KEEP_BUFFER).max(data.len()));
            buf.extend_from_slice(data);
            self.reassembly.push(Reassembly {
                id,
                total,
                data: buf,
            });
            return Ok(self.complete(id, msg));
        }
        if ext & EXT_FRAGMENT != 0 {
            let id = read_id(4)?;
            let data = &m[4 + id_len..];
            let Some(r) = self.reassembly.iter_mut().find(|r| r.id == id) else {
                return Err(RipcError::Malformed(format!(
                    "a fragment of message {id}, which never started"
                )));
            };
            if data.len() > r.total - r.data.len() {
                return Err(RipcError::Malformed(format!(
                    "fragments of message {id} run past its length of {}",
                    r.total
                )));
            }
            r.data.extend_from_slice(data);
            return Ok(self.complete(id, msg));
        }
        Err(RipcError::Malformed(format!(
            "extended flags {ext:#04x} are not a fragment"
        )))
    }

    /// Hands out a reassembled message once all of it is there.
    fn complete(&mut self, id: u16, msg: &mut Vec<u8>) -> bool {
        let Some(i) = self
            .reassembly
            .iter()
            .position(|r| r.id == id && r.data.len() == r.total)
        else {
            return false;
        };
        let r = self.reassembly.swap_remove(i);
        *msg = r.data;
        true
    }

    /// Queues one RWF message. Messages sent in one turn share RIPC messages (packed)
    /// until [`Channel::end_batch`]; a message longer than a RIPC message is fragmented.
    pub fn send(&mut self, rwf: &[u8]) {
        if !self.is_active() {
            return;
        }
        self.sent_since = true;
        let max = self.settings.max_msg_size as usize;
        if let Some((start, entries)) = self.open {
            if self.out.len() - start + PACKED_LEN + rwf.len() <= max {
                self.out
                    .extend_from_slice(&(rwf.len() as u16).to_be_bytes());
                self.out.extend_from_slice(rwf);
                self.open = Some((start, entries + 1));
                return;
            }
            self.end_batch();
        }
        if HEADER_LEN + PACKED_LEN + rwf.len() <= max {
            let start = self.out.len();
            self.out
                .extend_from_slice(&[0, 0, FLAG_DATA | FLAG_PACKING]);
            self.out
                .extend_from_slice(&(rwf.len() as u16).to_be_bytes());
            self.out.extend_from_slice(rwf);
            self.open = Some((start, 1));
            return;
        }
        self.fragment(rwf);
    }

    fn fragment(&mut self, rwf: &[u8]) {
        let version = self.version.expect("active");
        let id_len = version.frag_id_len();
        let id = self.next_frag_id;
        self.next_frag_id = self.next_frag_id.wrapping_add(1);
        if self.next_frag_id == 0 || (id_len == 1 && self.next_frag_id > 255) {
            self.next_frag_id = 1;
        }
        let max = self.settings.max_msg_size as usize;
        let put_id = |out: &mut Vec<u8>| {
            if id_len == 2 {
                out.extend_from_slice(&id.to_be_bytes());
            } else {
                out.push(id as u8);
            }
        };
        let mut at = 0;
        let mut first = true;
        while at < rwf.len() || first {
            let start = self.out.len();
            self.out
                .extend_from_slice(&[0, 0, FLAG_EXTENDED | FLAG_DATA]);
            if first {
                self.out.push(EXT_FRAGMENT_HEADER);
                self.out
                    .extend_from_slice(&(rwf.len() as u32).to_be_bytes());
            } else {
                self.out.push(EXT_FRAGMENT);
            }
            put_id(&mut self.out);
            let room = max - (self.out.len() - start);
            let n = room.min(rwf.len() - at);
            self.out.extend_from_slice(&rwf[at..at + n]);
            at += n;
            let len = (self.out.len() - start) as u16;
            self.out[start..start + 2].copy_from_slice(&len.to_be_bytes());
            first = false;
        }
    }

    /// Closes the packed message being filled: call once per turn before writing. A
    /// packed message of one entry becomes a plain one.
    pub fn end_batch(&mut self) {
        let Some((start, entries)) = self.open.take() else {
            return;
        };
        if entries == 1 {
            // Plain: drop the entry's length.
            self.out
                .drain(start + HEADER_LEN..start + HEADER_LEN + PACKED_LEN);
            self.out[start + 2] = FLAG_DATA;
        }
        let len = (self.out.len() - start) as u16;
        self.out[start..start + 2].copy_from_slice(&len.to_be_bytes());
    }

    /// Bytes for the socket (call [`Channel::end_batch`] first).
    pub fn transmit(&self) -> &[u8] {
        let end = self.open.map_or(self.out.len(), |(start, _)| start);
        &self.out[self.sent..end]
    }

    /// `n` bytes of [`Channel::transmit`] were written.
    pub fn consume(&mut self, n: usize) {
        self.sent += n;
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
            self.out.shrink_to(KEEP_BUFFER);
        } else if self.sent > 64 * 1024 && self.open.is_none() {
            self.out.drain(..self.sent);
            self.sent = 0;
        }
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

/// The fields of a ConnectReq this server uses.
struct ConnectReq {
    key_exchange: bool,
    ping_timeout_s: u8,
    protocol_type: u8,
    major: u8,
    minor: u8,
    client: ClientInfo,
}

impl ConnectReq {
    /// Layout: length (2), flags (1), connection version (4), flags (1: key
    /// exchange), header length (1), compression bitmap size (1) and bitmap, ping
    /// timeout (1), session flags (1), protocol type (1, from RIPC 12), RWF major (1)
    /// and minor (1), host name and IP address (each a length byte and text), and from
    /// RIPC 13 the component version (container length, length, text).
    fn parse(req: &[u8], version: Version) -> Result<ConnectReq, RipcError> {
        let cut = || RipcError::NotRipc("the ConnectReq is cut short".into());
        let mut at = 7;
        let byte = |at: &mut usize| -> Result<u8, RipcError> {
            let b = *req.get(*at).ok_or_else(cut)?;
            *at += 1;
            Ok(b)
        };
        let text = |at: &mut usize| -> Result<String, RipcError> {
            let n = *req.get(*at).ok_or_else(cut)? as usize;
            *at += 1;
            let s = req.get(*at..*at + n).ok_or_else(cut)?;
            *at += n;
            Ok(String::from_utf8_lossy(s).into_owned())
        };
        let flags = byte(&mut at)?;
        let _header_len = byte(&mut at)?;
        let bitmap = byte(&mut at)? as usize;
        at += bitmap;
        let ping_timeout_s = byte(&mut at)?;
        let _session_flags = byte(&mut at)?;
        let protocol_type = if version >= Version::V12 {
            byte(&mut at)?
        } else {
            PROTOCOL_RWF
        };
        let major = byte(&mut at)?;
        let minor = byte(&mut at)?;
        let host_name = text(&mut at)?;
        let ip_address = text(&mut at)?;
        let mut component = String::new();
        if version >= Version::V13 && at < req.len() {
            let container = byte(&mut at)? as usize;
            if container > 0 {
                let end = at + container;
                component = text(&mut at)?;
                if at > end {
                    return Err(RipcError::NotRipc(
                        "the ConnectReq's component version overruns its container".into(),
                    ));
                }
                at = end;
            }
        }
        if at > req.len() {
            return Err(cut());
        }
        Ok(ConnectReq {
            key_exchange: flags & KEY_EXCHANGE != 0,
            ping_timeout_s,
            protocol_type,
            major,
            minor,
            client: ClientInfo {
                host_name,
                ip_address,
                component,
            },
        })
    }
}

/// Tells a RIPC ConnectReq from the node's own protocol by a connection's first bytes:
/// a native frame starts with a `u32` length below 64 KiB for a login (so two zero
/// bytes), a ConnectReq with its non-zero `u16` length, flags 0 and a connection
/// version. `None`: not enough bytes to tell.
pub fn looks_like_connect_req(first: &[u8]) -> Option<bool> {
    if first.len() < 2 {
        return None;
    }
    if first[0] == 0 && first[1] == 0 {
        return Some(false);
    }
    if first.len() < 7 {
        return None;
    }
    let v = u32::from_be_bytes([first[3], first[4], first[5], first[6]]);
    Some(first[2] == 0 && (0x10..=0x20).contains(&v))
}

/// The component version a handshake ends with (the client's ConnectReq and the
/// server's ConnectAck alike): its length plus one, its length, the text (at most 253
/// bytes, so that both lengths fit a byte).
fn put_component_version(out: &mut Vec<u8>, component: &str) {
    let c = &component.as_bytes()[..component.len().min(253)];
    out.push(c.len() as u8 + 1);
    out.push(c.len() as u8);
    out.extend_from_slice(c);
}

/// A whole handshake message's length, into its first two bytes (left zero until the
/// rest is written).
fn set_handshake_len(m: &mut [u8]) {
    let len = m.len() as u16;
    m[..2].copy_from_slice(&len.to_be_bytes());
}

fn random_u63() -> u64 {
    let mut b = [0u8; 8];
    // Without randomness the key exchange still works, only guessably.
    let _ = getrandom::getrandom(&mut b);
    u64::from_be_bytes(b) & 0x7FFF_FFFF_FFFF_FFFF
}

/// `base^exp mod m` without overflow.
fn mod_pow(base: u64, mut exp: u64, m: u64) -> u64 {
    if m <= 1 {
        return 0;
    }
    let m128 = m as u128;
    let mut b = base as u128 % m128;
    let mut r: u128 = 1;
    while exp > 0 {
        if exp & 1 == 1 {
            r = r * b % m128;
        }
        b = b * b % m128;
        exp >>= 1;
    }
    r as u64
}

/// A ConnectNak with a reason (the first 1,000 bytes of `text`): what refuses a client
/// before its handshake, also where the node refuses it before reading anything (a
/// connection over the node's limits).
pub fn connect_nak(text: &str) -> Vec<u8> {
    let text = &text.as_bytes()[..text.len().min(1000)];
    let mut nak = Vec::with_capacity(16 + text.len());
    let len = (8 + text.len() + 1) as u16;
    nak.extend_from_slice(&len.to_be_bytes());
    nak.extend_from_slice(&[FLAG_EXTENDED, EXT_CONNECT_NAK, 8, 0]);
    nak.extend_from_slice(&((text.len() + 1) as u16).to_be_bytes());
    nak.extend_from_slice(text);
    nak.push(0);
    nak
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
