//! HTTP/1.1 upgrade and WebSocket frames (RFC 6455), server side, without I/O.
//!
//! [`parse_request`] reads an HTTP request head from received bytes; [`accept_key`]
//! makes the `Sec-WebSocket-Accept` answer; [`check_origin`] tells whether a browser's
//! upgrade (by its `Origin`) may go on. [`FrameDecoder`] turns received bytes into
//! whole messages (text, binary, ping, pong, close), joining fragments, unmasking, and
//! enforcing a size limit; the `encode_*` functions write unmasked server frames.

use thiserror::Error;

/// The GUID RFC 6455 appends to the client's key.
const WS_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// Largest HTTP request head accepted.
pub const MAX_HEAD: usize = 16 * 1024;

/// What is wrong with a client's HTTP request head or WebSocket frames.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum WsError {
    /// The request head is too large.
    #[error("HTTP request head larger than {MAX_HEAD} bytes or with too many header lines")]
    HeadTooLarge,
    /// The request head does not parse.
    #[error("malformed HTTP request: {0}")]
    BadRequest(String),
    /// A frame sets bits no extension gave a meaning.
    #[error("WebSocket frame with reserved bits set (no extension was agreed)")]
    ReservedBits,
    /// A client frame without a mask.
    #[error("WebSocket frame from the client is not masked")]
    Unmasked,
    /// An opcode RFC 6455 does not define.
    #[error("unknown WebSocket opcode {0}")]
    BadOpcode(u8),
    /// A control frame too long or fragmented.
    #[error("WebSocket control frame longer than 125 bytes or fragmented")]
    BadControl,
    /// A message larger than the maximum.
    #[error("WebSocket message of {len} bytes exceeds the maximum of {max}")]
    TooLarge {
        /// The message's length.
        len: u64,
        /// The largest allowed.
        max: usize,
    },
    /// A continuation with nothing to continue.
    #[error("WebSocket continuation frame without a message to continue")]
    UnexpectedContinuation,
    /// A new message before the last was finished.
    #[error("WebSocket data frame while a fragmented message is unfinished")]
    UnfinishedMessage,
    /// A text message that is not UTF-8.
    #[error("WebSocket text message is not valid UTF-8")]
    InvalidUtf8,
    /// A 64-bit length with its top bit set.
    #[error("WebSocket frame length with the most significant bit set")]
    BadLength,
    /// A close frame of one byte, with a code no endpoint may send, or a reason that is
    /// not UTF-8 (RFC 6455 5.5.1, 7.4).
    #[error("WebSocket close frame {0}")]
    BadClose(&'static str),
}

/// Why a close frame is refused when its reason is not UTF-8.
const CLOSE_REASON_NOT_UTF8: &str = "whose reason is not UTF-8";

impl WsError {
    /// The close code of a connection failed for this error (RFC 6455 7.4.1): 1007
    /// for text that is not UTF-8 (a message, or a close frame's reason), 1002 for any
    /// other breach of the protocol.
    pub fn close_code(&self) -> u16 {
        match self {
            WsError::InvalidUtf8 => 1007,
            WsError::BadClose(why) if *why == CLOSE_REASON_NOT_UTF8 => 1007,
            _ => 1002,
        }
    }

    /// The HTTP status answering a request head that failed to parse.
    pub fn http_status(&self) -> &'static str {
        match self {
            WsError::HeadTooLarge => "431 Request Header Fields Too Large",
            _ => "400 Bad Request",
        }
    }
}

/// The parts of an HTTP request head a node needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`...
    pub method: String,
    /// The request target, as sent.
    pub path: String,
    /// Header (lower-cased name, value) pairs.
    pub headers: Vec<(String, String)>,
}

impl Request {
    /// The first value of a header (`name` lower-cased).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Comma-separated tokens of a header, trimmed, lower-cased.
    pub fn tokens(&self, name: &str) -> Vec<String> {
        self.header(name)
            .map(|v| {
                v.split(',')
                    .map(|t| t.trim().to_ascii_lowercase())
                    .filter(|t| !t.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A WebSocket upgrade request (GET, Upgrade: websocket, a key): one the node
    /// answers, with 101 if [`Request::upgrade_refusal`] finds nothing wrong with it.
    pub fn is_websocket(&self) -> bool {
        self.method == "GET"
            && self.tokens("upgrade").iter().any(|t| t == "websocket")
            && self.header("sec-websocket-key").is_some()
    }

    /// What is wrong with a WebSocket upgrade (RFC 6455 4.2.1), if anything: the
    /// status to answer and why. A version other than 13 gets 426 and the version the
    /// node speaks (4.4); a key that is not 16 bytes in base64, 400.
    pub fn upgrade_refusal(&self) -> Option<(&'static str, String)> {
        let version = self.header("sec-websocket-version").unwrap_or("").trim();
        if version != "13" {
            // Said cut short: the refusal is logged too.
            let version = prefix_within(version, 16);
            return Some((
                "426 Upgrade Required",
                format!(
                    "WebSocket version {version:?} is not supported: this node speaks version 13 (Sec-WebSocket-Version: 13)"
                ),
            ));
        }
        use base64::Engine;
        let key = self.header("sec-websocket-key").unwrap_or("").trim();
        let decoded = base64::engine::general_purpose::STANDARD.decode(key);
        if decoded.map_or(true, |k| k.len() != 16) {
            return Some((
                "400 Bad Request",
                format!(
                    "Sec-WebSocket-Key must be 16 bytes in base64 (24 characters), not {:?}",
                    prefix_within(key, 64)
                ),
            ));
        }
        None
    }
}

/// Parses a request head from the start of `buf`: `Ok(None)` until it is complete,
/// then the request and the bytes it took. A head longer than [`MAX_HEAD`], or with more
/// header lines than the parser's table holds, is [`WsError::HeadTooLarge`] (431)
/// whether or not it is complete: the limit once held only for incomplete heads, so a
/// 100 KB head sent in one write was accepted.
pub fn parse_request(buf: &[u8]) -> Result<Option<(Request, usize)>, WsError> {
    // A head that fits ends within MAX_HEAD bytes: parsing one byte more tells a head
    // that fits from one that does not, without parsing the rest.
    let window = &buf[..buf.len().min(MAX_HEAD + 1)];
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(window) {
        Ok(httparse::Status::Complete(n)) if n > MAX_HEAD => Err(WsError::HeadTooLarge),
        Ok(httparse::Status::Complete(n)) => {
            let headers = req
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_ascii_lowercase(),
                        String::from_utf8_lossy(h.value).trim().to_string(),
                    )
                })
                .collect();
            Ok(Some((
                Request {
                    method: req.method.unwrap_or("").to_string(),
                    path: req.path.unwrap_or("").to_string(),
                    headers,
                },
                n,
            )))
        }
        Ok(httparse::Status::Partial) if window.len() > MAX_HEAD => Err(WsError::HeadTooLarge),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(WsError::HeadTooLarge),
        Err(e) => Err(WsError::BadRequest(e.to_string())),
    }
}

/// `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    use base64::Engine;
    let mut sha = sha1_smol::Sha1::new();
    sha.update(key.trim().as_bytes());
    sha.update(WS_GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(sha.digest().bytes())
}

/// The 101 answer to an upgrade, with the subprotocol chosen.
pub fn upgrade_response(key: &str, protocol: &str) -> String {
    format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\nSec-WebSocket-Protocol: {protocol}\r\n\r\n",
        accept_key(key)
    )
}

/// A plain HTTP response (the connection is closed after it).
pub fn http_response(status: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    http_response_with(status, content_type, &[], body)
}

/// A plain HTTP response with more header lines (`Set-Cookie`, `Allow`).
pub fn http_response_with(
    status: &str,
    content_type: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Cache-Control: no-cache\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    out.push_str("\r\n");
    let mut out = out.into_bytes();
    out.extend_from_slice(body);
    out
}

/// What the `Origin` header of a WebSocket upgrade says about it (browser safety: a
/// page from another site must not use a browser on the node's network as its client).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OriginCheck {
    /// No `Origin` header: not a browser (browsers send one on every upgrade).
    Absent,
    /// The origin is the request's own host and port (its `Host` header), as for the
    /// node's dashboard page, under one of the node's own names (an IP address,
    /// `localhost`, or [`OriginRules::own_names`]).
    SameOrigin,
    /// Listed in the allowed origins (or `*` is).
    Listed,
    /// Anything else: the upgrade is refused (403).
    Refused,
}

impl OriginCheck {
    /// The upgrade may go ahead.
    pub fn allowed(self) -> bool {
        self != OriginCheck::Refused
    }
}

/// What a browser's page may do with the node: which origins besides the node's own
/// may upgrade, and the names the node's own origin goes by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OriginRules {
    /// `websocket.allowed_origins`: origins whose pages may upgrade besides the node's
    /// own (`*`: any), as [`valid_allowed_origin`] takes them.
    pub allowed_origins: Vec<String>,
    /// Host names besides IP addresses and `localhost` under which a browser's page
    /// is the node's own (its machine's name). A page whose origin matches the
    /// request's `Host` under any other name is not: a site whose name an attacker
    /// points at the node's address (DNS rebinding) sends its own name as `Host`.
    /// (Programs that send the origin of the URL they connect to, as Python's
    /// websocket-client does, are the node's own under any name: they are not pages.)
    pub own_names: Vec<String>,
}

impl OriginRules {
    /// The node's own origin (under its own names) and these origins.
    pub fn new(allowed_origins: &[String], own_names: &[String]) -> Self {
        OriginRules {
            allowed_origins: allowed_origins.to_vec(),
            own_names: own_names.iter().map(|n| n.to_ascii_lowercase()).collect(),
        }
    }

    /// Whether `req` comes from a browser (it sends `Sec-Fetch-Mode` or
    /// `Sec-Fetch-Site`, which a page cannot leave out) naming the node by a `Host`
    /// that is neither one of its own names nor an allowed origin's: a site whose name
    /// an attacker points at the node's address (DNS rebinding), whose page would read
    /// what the node answers as if it were its own.
    pub fn foreign_browser_host(&self, req: &Request) -> bool {
        let browser =
            req.header("sec-fetch-mode").is_some() || req.header("sec-fetch-site").is_some();
        if !browser || self.allowed_origins.iter().any(|a| a == "*") {
            return false;
        }
        let Some((host, _)) = req.header("host").and_then(|h| parse_host_port(h, 80)) else {
            return true;
        };
        !self.is_own_name(&host)
            && !(self.allowed_origins.iter())
                .filter_map(|a| parse_origin(a))
                .any(|o| o.host == host)
    }

    /// A host (lower-cased, an IPv6 address in brackets) that names the node: an IP
    /// address, `localhost` (and names under it, which resolve to loopback), or one of
    /// its own names.
    fn is_own_name(&self, host: &str) -> bool {
        host.starts_with('[')
            || host.parse::<std::net::Ipv4Addr>().is_ok()
            || host == "localhost"
            || host.ends_with(".localhost")
            || self.own_names.iter().any(|n| n == host)
    }
}

/// Checks a WebSocket upgrade's `Origin` header against its `Host` header and the
/// rules' allowed origins (`*`, or origins as [`valid_allowed_origin`] takes them).
///
/// Origins compare by scheme (`http` or `https`), host (without regard to case) and
/// port, a port left out being the scheme's default (80, 443); a `Host` without a port
/// takes the default of the origin's scheme. From a browser (it sends `Sec-Fetch-Mode`
/// or `Sec-Fetch-Site`, as every current one does, and a page cannot leave them out),
/// the same origin counts only under one of the node's own names ([`OriginRules`]).
/// An origin that is not of that form (`null`, say) is allowed only by `*`.
pub fn check_origin(req: &Request, rules: &OriginRules) -> OriginCheck {
    let allowed = &rules.allowed_origins;
    let Some(origin) = req.header("origin") else {
        return OriginCheck::Absent;
    };
    if allowed.iter().any(|a| a == "*") {
        return OriginCheck::Listed;
    }
    let Some(parsed) = parse_origin(origin) else {
        return OriginCheck::Refused;
    };
    let same = req
        .header("host")
        .and_then(|h| parse_host_port(h, if parsed.https { 443 } else { 80 }))
        .is_some_and(|(host, port)| {
            let browser =
                req.header("sec-fetch-mode").is_some() || req.header("sec-fetch-site").is_some();
            host == parsed.host && port == parsed.port && (!browser || rules.is_own_name(&host))
        });
    if same {
        return OriginCheck::SameOrigin;
    }
    if allowed
        .iter()
        .any(|a| parse_origin(a).as_ref() == Some(&parsed))
    {
        return OriginCheck::Listed;
    }
    OriginCheck::Refused
}

/// Whether `entry` may be listed in the allowed origins: `*`, or `http://` or
/// `https://`, a host and an optional port, nothing else (no path, no wildcard).
pub fn valid_allowed_origin(entry: &str) -> Result<(), String> {
    if entry == "*" || parse_origin(entry).is_some() {
        Ok(())
    } else {
        Err(
            "expected \"*\" or http:// or https://, a host and an optional port, nothing \
             after (e.g. \"https://dash.example.com:8443\")"
                .into(),
        )
    }
}

/// An origin as compared: scheme and host lower-cased, the port always given.
#[derive(Debug, PartialEq, Eq)]
struct Origin {
    https: bool,
    host: String,
    port: u16,
}

/// `http://host[:port]` or `https://host[:port]` (RFC 6454 serialisation).
fn parse_origin(s: &str) -> Option<Origin> {
    let (scheme, rest) = s.split_once("://")?;
    let https = if scheme.eq_ignore_ascii_case("https") {
        true
    } else if scheme.eq_ignore_ascii_case("http") {
        false
    } else {
        return None;
    };
    let (host, port) = parse_host_port(rest, if https { 443 } else { 80 })?;
    Some(Origin { https, host, port })
}

/// `host[:port]` (a `Host` header, or an origin after its scheme): the host
/// lower-cased and the port, `default_port` if none is given.
fn parse_host_port(s: &str, default_port: u16) -> Option<(String, u16)> {
    let (host, port) = if s.starts_with('[') {
        // An IPv6 literal: [addr] or [addr]:port.
        let end = s.find(']')?;
        match &s[end + 1..] {
            "" => (&s[..=end], None),
            p => (&s[..=end], Some(p.strip_prefix(':')?)),
        }
    } else {
        match s.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    let host_ok = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._[]:".contains(&b))
        && (host.starts_with('[') || !host.contains([':', '[', ']']));
    if !host_ok {
        return None;
    }
    let port = match port {
        None => default_port,
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p.parse().ok()?,
        Some(_) => return None,
    };
    Some((host.to_ascii_lowercase(), port))
}

/// A whole WebSocket message from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A text message (UTF-8 checked).
    Text(String),
    /// A binary message.
    Binary(Vec<u8>),
    /// A ping, with its payload (answered with a pong of the same).
    Ping(Vec<u8>),
    /// A pong.
    Pong(Vec<u8>),
    /// Close, with the status code if one was given.
    Close(Option<u16>),
    /// A data message longer than the maximum: its bytes are skipped as they arrive
    /// and the stream goes on with the next message.
    TooLarge(u64),
}

/// A frame as parsed: fin, opcode, unmasked payload, bytes it took.
type RawFrame = (bool, u8, Vec<u8>, usize);

const OP_CONTINUATION: u8 = 0;
const OP_TEXT: u8 = 1;
const OP_BINARY: u8 = 2;
const OP_CLOSE: u8 = 8;
const OP_PING: u8 = 9;
const OP_PONG: u8 = 10;

/// Accumulates received bytes and yields whole messages.
///
/// Decoding advances a cursor (`start`) through `buf`; the bytes before it are dropped
/// once per [`FrameDecoder::extend`], not once per frame. Shifting the rest of the
/// buffer after every frame made a flood of tiny frames cost O(frames x buffer): each
/// byte received is now moved at most once (what is left of an incomplete frame).
#[derive(Debug)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    /// Bytes of `buf` before this are decoded (or skipped) already.
    start: usize,
    max_message: usize,
    /// A fragmented data message being joined: its opcode and payload so far.
    partial: Option<(u8, Vec<u8>)>,
    /// Payload bytes of an oversized frame still to drop.
    skip: u64,
    /// Dropping the continuation frames of an oversized fragmented message.
    skipping_fragments: bool,
    /// Bytes moved to the front of `buf` by compaction, in all (for tests).
    moved: u64,
}

impl FrameDecoder {
    /// A decoder refusing messages larger than `max_message` bytes.
    pub fn new(max_message: usize) -> Self {
        FrameDecoder {
            buf: Vec::new(),
            start: 0,
            max_message,
            partial: None,
            skip: 0,
            skipping_fragments: false,
            moved: 0,
        }
    }

    /// Appends received bytes, first dropping what was decoded since the last call.
    pub fn extend(&mut self, bytes: &[u8]) {
        if self.start > 0 {
            let rest = self.buf.len() - self.start;
            self.buf.copy_within(self.start.., 0);
            self.buf.truncate(rest);
            self.moved += rest as u64;
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes received and not yet part of a whole frame.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Bytes moved by compaction since the decoder was made. When every call to
    /// `extend` is followed by `next_frame` until `Ok(None)`, this is at most the bytes
    /// given to `extend`: tests and fuzz targets check that bound.
    pub fn bytes_moved(&self) -> u64 {
        self.moved
    }

    /// The bytes not decoded yet.
    fn unread(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// The next whole message, `Ok(None)` if more bytes are needed. After an error the
    /// connection must be closed: the stream cannot be resynchronised.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, WsError> {
        loop {
            if self.skip > 0 {
                let n = self.skip.min(self.buffered() as u64) as usize;
                self.start += n;
                self.skip -= n as u64;
                if self.skip > 0 {
                    return Ok(None);
                }
            }
            let (fin, opcode, payload, used) = match self.parse_frame() {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(None),
                Err(WsError::TooLarge { len, .. }) => {
                    // Skip this frame (and, if fragmented, the rest of its message).
                    let (header, payload_len, fin) = self.header_of_oversized();
                    self.start += header;
                    self.skip = payload_len;
                    let was_skipping = self.skipping_fragments;
                    self.partial = None;
                    self.skipping_fragments = !fin;
                    if was_skipping {
                        continue; // already reported
                    }
                    return Ok(Some(Frame::TooLarge(len)));
                }
                Err(e) => return Err(e),
            };
            self.start += used;
            if self.skipping_fragments && opcode == OP_CONTINUATION {
                self.skipping_fragments = !fin;
                continue;
            }
            match opcode {
                OP_PING | OP_PONG | OP_CLOSE => {
                    return Ok(Some(match opcode {
                        OP_PING => Frame::Ping(payload),
                        OP_PONG => Frame::Pong(payload),
                        _ => Frame::Close(close_code(&payload)?),
                    }))
                }
                OP_TEXT | OP_BINARY => {
                    if self.partial.is_some() {
                        return Err(WsError::UnfinishedMessage);
                    }
                    if fin {
                        return finish(opcode, payload).map(Some);
                    }
                    self.partial = Some((opcode, payload));
                }
                OP_CONTINUATION => {
                    let Some((op, mut so_far)) = self.partial.take() else {
                        return Err(WsError::UnexpectedContinuation);
                    };
                    let len = so_far.len() + payload.len();
                    if len > self.max_message {
                        return Err(WsError::TooLarge {
                            len: len as u64,
                            max: self.max_message,
                        });
                    }
                    so_far.extend_from_slice(&payload);
                    if fin {
                        return finish(op, so_far).map(Some);
                    }
                    self.partial = Some((op, so_far));
                }
                other => return Err(WsError::BadOpcode(other)),
            }
        }
    }

    /// Header length, payload length and fin of the frame at the front (whose
    /// header `parse_frame` has already checked).
    fn header_of_oversized(&self) -> (usize, u64, bool) {
        let b = self.unread();
        let (len, at) = match b[1] & 0x7f {
            126 => (u16::from_be_bytes([b[2], b[3]]) as u64, 4),
            127 => {
                let mut n = [0u8; 8];
                n.copy_from_slice(&b[2..10]);
                (u64::from_be_bytes(n), 10)
            }
            n => (n as u64, 2),
        };
        (at + 4, len, b[0] & 0x80 != 0)
    }

    /// One frame from the buffer: (fin, opcode, unmasked payload, bytes used).
    fn parse_frame(&self) -> Result<Option<RawFrame>, WsError> {
        let b = self.unread();
        if b.len() < 2 {
            return Ok(None);
        }
        let fin = b[0] & 0x80 != 0;
        if b[0] & 0x70 != 0 {
            return Err(WsError::ReservedBits);
        }
        let opcode = b[0] & 0x0f;
        if !matches!(opcode, 0 | 1 | 2 | 8 | 9 | 10) {
            return Err(WsError::BadOpcode(opcode));
        }
        if b[1] & 0x80 == 0 {
            return Err(WsError::Unmasked);
        }
        let (len, mut at) = match b[1] & 0x7f {
            126 => {
                if b.len() < 4 {
                    return Ok(None);
                }
                (u16::from_be_bytes([b[2], b[3]]) as u64, 4)
            }
            127 => {
                if b.len() < 10 {
                    return Ok(None);
                }
                let mut n = [0u8; 8];
                n.copy_from_slice(&b[2..10]);
                (u64::from_be_bytes(n), 10)
            }
            n => (n as u64, 2),
        };
        if len >> 63 != 0 {
            return Err(WsError::BadLength);
        }
        if opcode >= 8 && (len > 125 || !fin) {
            return Err(WsError::BadControl);
        }
        if b.len() < at + 4 {
            return Ok(None);
        }
        let so_far = self.partial.as_ref().map_or(0, |(_, p)| p.len()) as u64;
        if opcode < 8 && len.saturating_add(so_far) > self.max_message as u64 {
            return Err(WsError::TooLarge {
                len: len.saturating_add(so_far),
                max: self.max_message,
            });
        }
        let mask = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        at += 4;
        let len = len as usize;
        if b.len() < at + len {
            return Ok(None);
        }
        let payload = b[at..at + len]
            .iter()
            .enumerate()
            .map(|(i, &x)| x ^ mask[i % 4])
            .collect();
        Ok(Some((fin, opcode, payload, at + len)))
    }
}

fn finish(opcode: u8, payload: Vec<u8>) -> Result<Frame, WsError> {
    if opcode == OP_TEXT {
        String::from_utf8(payload)
            .map(Frame::Text)
            .map_err(|_| WsError::InvalidUtf8)
    } else {
        Ok(Frame::Binary(payload))
    }
}

fn encode(out: &mut Vec<u8>, opcode: u8, payload: &[u8]) {
    out.push(0x80 | opcode);
    match payload.len() {
        n if n < 126 => out.push(n as u8),
        n if n <= u16::MAX as usize => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
}

/// Appends a text frame (a whole message).
pub fn encode_text(out: &mut Vec<u8>, text: &[u8]) {
    encode(out, OP_TEXT, text);
}

/// Appends a pong answering a ping's payload.
pub fn encode_pong(out: &mut Vec<u8>, payload: &[u8]) {
    encode(out, OP_PONG, &payload[..payload.len().min(125)]);
}

/// Appends a close frame with a status code and reason (cut to fit a control frame).
pub fn encode_close(out: &mut Vec<u8>, code: u16, reason: &str) {
    let mut p = code.to_be_bytes().to_vec();
    p.extend_from_slice(prefix_within(reason, 123).as_bytes());
    encode(out, OP_CLOSE, &p);
}

/// A close frame's status code, if it has one (RFC 6455 5.5.1: none, or a code of two
/// bytes and a UTF-8 reason; 7.4: codes an endpoint may send).
fn close_code(payload: &[u8]) -> Result<Option<u16>, WsError> {
    match payload {
        [] => Ok(None),
        [_] => Err(WsError::BadClose("of one byte (a code takes two)")),
        [a, b, reason @ ..] => {
            let code = u16::from_be_bytes([*a, *b]);
            // 1012-1014 are registered since (service restart, try again later, bad gateway).
            let sendable = matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999);
            if !sendable {
                return Err(WsError::BadClose("with a status code no endpoint may send"));
            }
            if std::str::from_utf8(reason).is_err() {
                return Err(WsError::BadClose(CLOSE_REASON_NOT_UTF8));
            }
            Ok(Some(code))
        }
    }
}

/// The longest start of `text` of at most `max` bytes that ends between characters (a
/// peer's text quoted back, cut to fit: a cut inside a character would panic).
pub(crate) fn prefix_within(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_upgrade_needs_version_13_and_a_key_of_16_bytes() {
        let head = |extra: &str| {
            let text = format!(
                "GET /WebSocket HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n{extra}\r\n"
            );
            parse_request(text.as_bytes()).unwrap().unwrap().0
        };
        let good = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";
        assert_eq!(head(good).upgrade_refusal(), None);
        let v8 =
            head("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n");
        assert_eq!(v8.upgrade_refusal().unwrap().0, "426 Upgrade Required");
        let empty = head("Sec-WebSocket-Key: \r\nSec-WebSocket-Version: 13\r\n");
        assert_eq!(empty.upgrade_refusal().unwrap().0, "400 Bad Request");
        let short = head("Sec-WebSocket-Key: YWJj\r\nSec-WebSocket-Version: 13\r\n");
        assert_eq!(short.upgrade_refusal().unwrap().0, "400 Bad Request");
    }

    use super::*;

    /// A client frame: masked with a fixed key.
    fn client_frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![(if fin { 0x80 } else { 0 }) | opcode];
        let mask = [1u8, 2, 3, 4];
        match payload.len() {
            n if n < 126 => out.push(0x80 | n as u8),
            n if n <= 65535 => {
                out.push(0x80 | 126);
                out.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                out.push(0x80 | 127);
                out.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        out.extend_from_slice(&mask);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        out
    }

    /// Every frame of `bytes`, fed to a decoder `chunk` bytes at a time.
    fn decode_in_chunks(bytes: &[u8], max_message: usize, chunk: usize) -> Vec<Frame> {
        let mut d = FrameDecoder::new(max_message);
        let mut got = Vec::new();
        for piece in bytes.chunks(chunk) {
            d.extend(piece);
            while let Some(f) = d.next_frame().unwrap() {
                got.push(f);
            }
        }
        got
    }

    #[test]
    fn the_accept_key_is_the_rfc_example() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn requests_parse_in_pieces() {
        let text = b"GET /WebSocket HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: abc\r\nSec-WebSocket-Protocol: tr_json2\r\n\r\nrest";
        assert_eq!(parse_request(&text[..20]).unwrap(), None);
        let (req, n) = parse_request(text).unwrap().unwrap();
        assert_eq!(&text[n..], b"rest");
        assert_eq!(req.path, "/WebSocket");
        assert!(req.is_websocket());
        assert_eq!(req.tokens("sec-websocket-protocol"), vec!["tr_json2"]);
        assert!(matches!(
            parse_request(b"GARBAGE\x00\r\n\r\n"),
            Err(WsError::BadRequest(_))
        ));
        assert_eq!(
            parse_request(&vec![b'a'; MAX_HEAD + 1]),
            Err(WsError::HeadTooLarge)
        );
    }

    /// The head limit holds whether or not the head is complete: a 100 KB head that
    /// arrives in one read used to be accepted.
    #[test]
    fn a_head_over_the_limit_is_refused_even_when_complete() {
        let head = |filler: usize| {
            format!(
                "GET / HTTP/1.1\r\nHost: x\r\nX-Filler: {}\r\n\r\n",
                "a".repeat(filler)
            )
            .into_bytes()
        };
        let big = head(100_000);
        assert_eq!(parse_request(&big), Err(WsError::HeadTooLarge));
        assert_eq!(parse_request(&big[..50_000]), Err(WsError::HeadTooLarge));
        // Just at the limit is fine; one byte more is not, complete or not.
        let at = head(MAX_HEAD - head(0).len());
        assert_eq!(at.len(), MAX_HEAD);
        assert_eq!(parse_request(&at).unwrap().unwrap().1, MAX_HEAD);
        let over = head(MAX_HEAD - head(0).len() + 1);
        assert_eq!(parse_request(&over), Err(WsError::HeadTooLarge));
        assert_eq!(
            parse_request(&over[..MAX_HEAD + 1]),
            Err(WsError::HeadTooLarge)
        );
        // Bytes after a head within the limit (early WebSocket frames) do not count.
        let mut with_frames = head(100);
        let n = with_frames.len();
        with_frames.extend(vec![0x89; 2 * MAX_HEAD]);
        assert_eq!(parse_request(&with_frames).unwrap().unwrap().1, n);
        // So many header lines that they do not fit the parser's table: too large too.
        let many = format!("GET / HTTP/1.1\r\n{}\r\n", "A: b\r\n".repeat(100));
        assert_eq!(parse_request(many.as_bytes()), Err(WsError::HeadTooLarge));
        assert_eq!(
            WsError::HeadTooLarge.http_status(),
            "431 Request Header Fields Too Large"
        );
    }

    /// An upgrade request with these `Host` and `Origin` headers (either absent).
    fn upgrade(host: Option<&str>, origin: Option<&str>) -> Request {
        upgrade_with(host, origin, "")
    }

    /// An upgrade as a browser sends it (with its `Sec-Fetch-*` headers).
    fn browser_upgrade(host: &str, origin: &str) -> Request {
        let fetch = "Sec-Fetch-Mode: websocket\r\nSec-Fetch-Site: same-origin\r\n";
        upgrade_with(Some(host), Some(origin), fetch)
    }

    fn upgrade_with(host: Option<&str>, origin: Option<&str>, more: &str) -> Request {
        let mut text = String::from("GET /WebSocket HTTP/1.1\r\n");
        if let Some(h) = host {
            text += &format!("Host: {h}\r\n");
        }
        if let Some(o) = origin {
            text += &format!("Origin: {o}\r\n");
        }
        text += more;
        text += "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: abc\r\n\r\n";
        parse_request(text.as_bytes()).unwrap().unwrap().0
    }

    /// The node's own names in these tests, besides addresses and `localhost`.
    const OWN: &str = "Node.Example.com";

    fn rules(allowed: &[&str]) -> OriginRules {
        let allowed: Vec<String> = allowed.iter().map(|s| s.to_string()).collect();
        OriginRules::new(&allowed, &[OWN.to_string()])
    }

    fn check(host: &str, origin: Option<&str>, allowed: &[&str]) -> OriginCheck {
        check_origin(&upgrade(Some(host), origin), &rules(allowed))
    }

    /// Browsers send `Origin` on every WebSocket upgrade; other programs need not.
    #[test]
    fn an_upgrade_without_origin_is_allowed() {
        assert_eq!(check("127.0.0.1:15000", None, &[]), OriginCheck::Absent);
        assert_eq!(
            check_origin(&upgrade(None, None), &rules(&[])),
            OriginCheck::Absent
        );
        assert!(OriginCheck::Absent.allowed());
    }

    /// The dashboard's own upgrade: the page came from the node, so its origin is the
    /// node's host and port (what the browser put in `Host`).
    #[test]
    fn the_same_origin_is_allowed() {
        let same = [
            ("127.0.0.1:15000", "http://127.0.0.1:15000"),
            ("127.0.0.1:15000", "https://127.0.0.1:15000"),
            ("localhost:15000", "http://localhost:15000"),
            ("dash.localhost:15000", "http://dash.localhost:15000"),
            ("[::1]:15000", "http://[::1]:15000"),
            ("10.1.2.3:15000", "http://10.1.2.3:15000"),
            // Host names compare without regard to case.
            ("Node.Example.COM:15000", "http://node.example.com:15000"),
            ("node.example.com:15000", "HTTP://NODE.Example.com:15000"),
            // A port left out is the scheme's default: 80 for http, 443 for https.
            ("node.example.com", "http://node.example.com"),
            ("node.example.com:80", "http://node.example.com"),
            ("node.example.com", "http://node.example.com:80"),
            ("node.example.com", "https://node.example.com"),
            ("node.example.com:443", "https://node.example.com"),
            ("node.example.com", "https://node.example.com:443"),
        ];
        for (host, origin) in same {
            assert_eq!(
                check(host, Some(origin), &[]),
                OriginCheck::SameOrigin,
                "Host {host}, Origin {origin}"
            );
        }
    }

    /// A page of a site whose name an attacker points at the node's address (DNS
    /// rebinding) sends that name as both `Host` and `Origin`: from a browser, not the
    /// node's own origin unless the name is one of the node's, or the origin is
    /// listed. A program sending its URL's origin is the node's own under any name.
    #[test]
    fn a_browsers_same_origin_under_a_name_not_the_nodes_is_refused() {
        let own = rules(&[]);
        for host in [
            "rebind.evil.example:14080",
            "127.0.0.1.evil.example:14080",
            "0x7f000001:14080",
        ] {
            let origin = format!("http://{host}");
            let req = browser_upgrade(host, &origin);
            assert_eq!(
                check_origin(&req, &own),
                OriginCheck::Refused,
                "Host {host}"
            );
            // A program (no Sec-Fetch headers) under that name: its own URL's origin.
            assert_eq!(
                check(host, Some(&origin), &[]),
                OriginCheck::SameOrigin,
                "Host {host}"
            );
        }
        let req = browser_upgrade(
            "rebind.evil.example:14080",
            "http://rebind.evil.example:14080",
        );
        assert_eq!(
            check_origin(&req, &rules(&["http://rebind.evil.example:14080"])),
            OriginCheck::Listed
        );
        let named = OriginRules::new(&[], &["Rebind.Evil.Example".to_string()]);
        assert_eq!(check_origin(&req, &named), OriginCheck::SameOrigin);
        for (host, origin) in [
            ("127.0.0.1:14080", "http://127.0.0.1:14080"),
            ("[::1]:14080", "http://[::1]:14080"),
            ("localhost:14080", "http://localhost:14080"),
            ("node.example.com:14080", "http://node.example.com:14080"),
        ] {
            assert_eq!(
                check_origin(&browser_upgrade(host, origin), &own),
                OriginCheck::SameOrigin,
                "Host {host}"
            );
        }
    }

    /// Any other origin is refused unless listed: another host, another port, another
    /// default port, a scheme that is not http(s), junk, `null`, no Host to compare.
    #[test]
    fn another_origin_is_refused() {
        let other = [
            ("127.0.0.1:15000", "http://evil.example"),
            ("127.0.0.1:15000", "http://evil.example:15000"),
            ("127.0.0.1:15000", "http://127.0.0.1:15001"),
            ("127.0.0.1:15000", "http://127.0.0.1"),
            ("127.0.0.1:15000", "http://127.0.0.1.evil.example:15000"),
            ("node.example.com", "https://node.example.com:80"),
            ("node.example.com:80", "https://node.example.com"),
            ("node.example.com:443", "http://node.example.com"),
            ("127.0.0.1:15000", "ws://127.0.0.1:15000"),
            ("127.0.0.1:15000", "file://127.0.0.1:15000"),
            ("127.0.0.1:15000", "http://127.0.0.1:15000/"),
            ("127.0.0.1:15000", "http://127.0.0.1:15000/path"),
            ("127.0.0.1:15000", "http://user@127.0.0.1:15000"),
            ("127.0.0.1:15000", "http://127.0.0.1:+15000"),
            ("127.0.0.1:15000", "http://127.0.0.1:"),
            ("127.0.0.1:15000", "127.0.0.1:15000"),
            ("127.0.0.1:15000", "null"),
            ("127.0.0.1:15000", ""),
            ("[::1]:15000", "http://[::2]:15000"),
        ];
        for (host, origin) in other {
            assert_eq!(
                check(host, Some(origin), &[]),
                OriginCheck::Refused,
                "Host {host}, Origin {origin}"
            );
        }
        assert_eq!(
            check_origin(&upgrade(None, Some("http://127.0.0.1:15000")), &rules(&[])),
            OriginCheck::Refused
        );
        assert!(!OriginCheck::Refused.allowed());
    }

    /// An origin listed in the allowed origins is allowed (same scheme, host and port;
    /// case and a default port written out do not matter), and `*` allows any.
    #[test]
    fn listed_origins_and_the_wildcard_are_allowed() {
        let list = ["https://dash.example.com:8443", "http://evil.example"];
        for origin in [
            "https://dash.example.com:8443",
            "https://DASH.example.com:8443",
            "http://evil.example",
            "http://evil.example:80",
        ] {
            assert_eq!(
                check("127.0.0.1:15000", Some(origin), &list),
                OriginCheck::Listed,
                "{origin}"
            );
        }
        for origin in [
            "http://dash.example.com:8443",
            "https://dash.example.com",
            "https://sub.dash.example.com:8443",
            "https://evil.example",
            "http://evil.example:8080",
            "null",
        ] {
            assert_eq!(
                check("127.0.0.1:15000", Some(origin), &list),
                OriginCheck::Refused,
                "{origin}"
            );
        }
        for origin in ["http://evil.example", "https://x.y:1", "null", "junk"] {
            assert_eq!(
                check("127.0.0.1:15000", Some(origin), &["*"]),
                OriginCheck::Listed,
                "{origin}"
            );
        }
        // Same-origin needs no listing.
        assert_eq!(
            check("127.0.0.1:15000", Some("http://127.0.0.1:15000"), &list),
            OriginCheck::SameOrigin
        );
    }

    /// Config entries must be `*` or an origin a browser could send.
    #[test]
    fn allowed_origin_entries_are_checked() {
        for ok in [
            "*",
            "https://dash.example.com:8443",
            "http://evil.example",
            "http://[::1]:15000",
            "HTTPS://Dash.Example.com",
        ] {
            assert_eq!(valid_allowed_origin(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "dash.example.com",
            "https://dash.example.com/",
            "https://dash.example.com/path",
            "https://*.example.com",
            "ws://dash.example.com",
            "https://dash.example.com:99999",
            "https://dash.example.com:",
            "null",
            " https://dash.example.com",
        ] {
            let e = valid_allowed_origin(bad).expect_err(bad);
            assert!(e.contains("https://"), "{bad}: {e}");
        }
    }

    #[test]
    fn frames_decode_whole_fragmented_and_in_pieces() {
        let mut bytes = client_frame(true, OP_TEXT, b"hello");
        bytes.extend(client_frame(false, OP_TEXT, b"wor"));
        bytes.extend(client_frame(true, OP_PING, b"p"));
        bytes.extend(client_frame(true, OP_CONTINUATION, b"ld"));
        let big = vec![b'x'; 70_000];
        bytes.extend(client_frame(true, OP_BINARY, &big));
        bytes.extend(client_frame(true, OP_CLOSE, &1000u16.to_be_bytes()));
        bytes.extend(client_frame(true, OP_CLOSE, b""));
        bytes.extend(client_frame(true, OP_CLOSE, b"\x0f\xa0bye"));
        bytes.extend(client_frame(true, OP_CLOSE, &1013u16.to_be_bytes()));
        let got = decode_in_chunks(&bytes, 100_000, 7);
        assert_eq!(
            got,
            vec![
                Frame::Text("hello".into()),
                Frame::Ping(b"p".to_vec()),
                Frame::Text("world".into()),
                Frame::Binary(big),
                Frame::Close(Some(1000)),
                Frame::Close(None),
                Frame::Close(Some(4000)),
                Frame::Close(Some(1013)),
            ]
        );
    }

    #[test]
    fn bad_frames_are_errors() {
        let cases: Vec<(Vec<u8>, WsError)> = vec![
            (
                vec![0x81, 0x05, b'h', b'e', b'l', b'l', b'o'],
                WsError::Unmasked,
            ),
            (vec![0xC1, 0x80, 0, 0, 0, 0], WsError::ReservedBits),
            (vec![0x83, 0x80, 0, 0, 0, 0], WsError::BadOpcode(3)),
            (client_frame(false, OP_PING, b""), WsError::BadControl),
            (
                client_frame(true, OP_CONTINUATION, b"x"),
                WsError::UnexpectedContinuation,
            ),
            (
                client_frame(true, OP_TEXT, &[0xff, 0xfe]),
                WsError::InvalidUtf8,
            ),
            (
                client_frame(true, OP_CLOSE, &[0x03]),
                WsError::BadClose("of one byte (a code takes two)"),
            ),
            (
                client_frame(true, OP_CLOSE, &999u16.to_be_bytes()),
                WsError::BadClose("with a status code no endpoint may send"),
            ),
            (
                client_frame(true, OP_CLOSE, &1015u16.to_be_bytes()),
                WsError::BadClose("with a status code no endpoint may send"),
            ),
            (
                client_frame(true, OP_CLOSE, &1005u16.to_be_bytes()),
                WsError::BadClose("with a status code no endpoint may send"),
            ),
            (
                client_frame(true, OP_CLOSE, &[0x03, 0xe8, 0xff]),
                WsError::BadClose("whose reason is not UTF-8"),
            ),
        ];
        for (bytes, want) in cases {
            let mut d = FrameDecoder::new(100);
            d.extend(&bytes);
            assert_eq!(d.next_frame(), Err(want.clone()), "{bytes:?}");
        }
        let mut d = FrameDecoder::new(100);
        let mut two = client_frame(false, OP_TEXT, b"a");
        two.extend(client_frame(true, OP_TEXT, b"b"));
        d.extend(&two);
        assert_eq!(d.next_frame(), Err(WsError::UnfinishedMessage));
    }

    #[test]
    fn an_oversized_message_is_skipped_and_the_stream_goes_on() {
        let mut bytes = client_frame(true, OP_TEXT, &[b'a'; 200]);
        bytes.extend(client_frame(true, OP_TEXT, b"next"));
        bytes.extend(client_frame(false, OP_TEXT, &[b'b'; 90]));
        bytes.extend(client_frame(false, OP_CONTINUATION, &[b'c'; 90]));
        bytes.extend(client_frame(true, OP_CONTINUATION, &[b'd'; 90]));
        bytes.extend(client_frame(true, OP_TEXT, b"after"));
        let got = decode_in_chunks(&bytes, 100, 5);
        assert_eq!(
            got,
            vec![
                Frame::TooLarge(200),
                Frame::Text("next".into()),
                Frame::TooLarge(180),
                Frame::Text("after".into()),
            ]
        );
    }

    /// A flood of tiny frames read in one batch: decoding must not shift the rest of
    /// the buffer once per frame (that made 1-byte frames ~17x dearer than the same
    /// bytes in larger frames). Whatever the decoder moves to compact its buffer is
    /// bounded by what it was given, however the bytes are split into frames.
    #[test]
    fn a_flood_of_tiny_frames_moves_each_byte_at_most_once() {
        let one = client_frame(true, OP_PING, b"");
        let n = 20_000;
        let flood: Vec<u8> = one.iter().copied().cycle().take(one.len() * n).collect();
        // Read batches of 64 KiB, as the node does, the last frame of each cut in two.
        let mut d = FrameDecoder::new(1000);
        let mut frames = 0;
        for piece in flood.chunks(64 * 1024 + 3) {
            d.extend(piece);
            while let Some(f) = d.next_frame().unwrap() {
                assert_eq!(f, Frame::Ping(Vec::new()));
                frames += 1;
            }
        }
        assert_eq!(frames, n);
        assert_eq!(d.buffered(), 0);
        assert!(
            d.bytes_moved() <= flood.len() as u64,
            "{} bytes moved to decode {} bytes",
            d.bytes_moved(),
            flood.len()
        );
        // Skipped oversized messages and pieces one byte long: still linear.
        let mut bytes = Vec::new();
        for i in 0..500 {
            bytes.extend(client_frame(true, OP_TEXT, &[b'a'; 150]));
            bytes.extend(client_frame(true, OP_TEXT, format!("{i}").as_bytes()));
        }
        let mut d = FrameDecoder::new(100);
        let mut got = 0;
        for piece in bytes.chunks(1) {
            d.extend(piece);
            while let Some(f) = d.next_frame().unwrap() {
                assert!(matches!(f, Frame::TooLarge(150) | Frame::Text(_)), "{f:?}");
                got += 1;
            }
        }
        assert_eq!(got, 1000);
        assert!(d.bytes_moved() <= bytes.len() as u64, "{}", d.bytes_moved());
    }

    #[test]
    fn server_frames_have_the_right_lengths() {
        for n in [0usize, 125, 126, 65_535, 65_536] {
            let mut out = Vec::new();
            encode_text(&mut out, &vec![b'a'; n]);
            let header = match n {
                n if n < 126 => 2,
                n if n <= 65_535 => 4,
                _ => 10,
            };
            assert_eq!(out.len(), header + n);
            assert_eq!(out[0], 0x81);
        }
        let mut out = Vec::new();
        encode_close(&mut out, 1009, &"é".repeat(100));
        assert!(out.len() <= 127);
        assert!(std::str::from_utf8(&out[4..]).is_ok());
    }
}
