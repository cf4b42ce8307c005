//! The RIPC handshake: a client's ConnectReq (versions 14 down to 11, the key exchange a
//! RIPC 14 client asks for), the server's ConnectAck or ConnectNak, and the client side of
//! it for the node's links to providers.

use super::{
    Channel, ClientInfo, RipcError, Settings, State, Version, EXT_CONNECT_ACK, EXT_CONNECT_NAK,
    FLAG_EXTENDED, KEY_EXCHANGE, KEY_EXCHANGE_TR_SL1_64, PING_CLIENT_TO_SERVER,
    PING_SERVER_TO_CLIENT, PROTOCOL_RWF, RWF_MAJOR, RWF_MINOR,
};
use std::time::{Duration, Instant};

/// The fields of a ConnectReq this server uses.
pub(super) struct ConnectReq {
    key_exchange: bool,
    ping_timeout_s: u8,
    protocol_type: u8,
    major: u8,
    minor: u8,
    client: ClientInfo,
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
pub(super) fn put_component_version(out: &mut Vec<u8>, component: &str) {
    let c = &component.as_bytes()[..component.len().min(253)];
    out.push(c.len() as u8 + 1);
    out.push(c.len() as u8);
    out.extend_from_slice(c);
}

/// A whole handshake message's length, into its first two bytes (left zero until the
/// rest is written).
pub(super) fn set_handshake_len(m: &mut [u8]) {
    let len = m.len() as u16;
    m[..2].copy_from_slice(&len.to_be_bytes());
}

pub(super) fn random_u63() -> u64 {
    let mut b = [0u8; 8];
    // Without randomness the key exchange still works, only guessably.
    let _ = getrandom::getrandom(&mut b);
    u64::from_be_bytes(b) & 0x7FFF_FFFF_FFFF_FFFF
}

/// `base^exp mod m` without overflow.
pub(super) fn mod_pow(base: u64, mut exp: u64, m: u64) -> u64 {
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

impl ConnectReq {
    /// Layout: length (2), flags (1), connection version (4), flags (1: key
    /// exchange), header length (1), compression bitmap size (1) and bitmap, ping
    /// timeout (1), session flags (1), protocol type (1, from RIPC 12), RWF major (1)
    /// and minor (1), host name and IP address (each a length byte and text), and from
    /// RIPC 13 the component version (container length, length, text).
    pub(super) fn parse(req: &[u8], version: Version) -> Result<ConnectReq, RipcError> {
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

impl Channel {
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

    /// The next whole handshake message, taken out of the input (a copy: handling it
    /// writes to the channel).
    pub(super) fn take_handshake_message(&mut self) -> Result<Option<Vec<u8>>, RipcError> {
        let Some(len) = self.whole_message()? else {
            return Ok(None);
        };
        let m = self.input[self.pos..self.pos + len].to_vec();
        self.pos += len;
        Ok(Some(m))
    }

    pub(super) fn on_connect_req(&mut self, req: &[u8]) -> Result<(), RipcError> {
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
    pub(super) fn on_connect_ack(&mut self, m: &[u8]) -> Result<(), RipcError> {
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

    pub(super) fn on_client_key(
        &mut self,
        key: &[u8],
        p: u64,
        secret: u64,
    ) -> Result<(), RipcError> {
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
}
