//! RWF messages: the header every message class shares, each class's own fields, the
//! message key, state and QoS.
//!
//! Layout: `u16` header length (what follows it up to the payload), class, domain,
//! `i32` stream id, `u15rb` flags, container type (less 128), the class's fields in a
//! fixed order, then the payload (the rest of the message, unprefixed). Decoders
//! skip header fields they do not know by the header length.

use super::primitive::dt;
use super::wire::{
    put_buf15, put_buf16, put_buf8, put_u15rb, put_u16ob, put_u32, Len15Slot, Reader, RwfError,
};

/// Message classes.
pub mod class {
    // Each constant is the wire's number, under the name the SDK's public code gives it.
    #![allow(missing_docs)]
    pub const REQUEST: u8 = 1;
    pub const REFRESH: u8 = 2;
    pub const STATUS: u8 = 3;
    pub const UPDATE: u8 = 4;
    pub const CLOSE: u8 = 5;
    pub const ACK: u8 = 6;
    pub const GENERIC: u8 = 7;
    pub const POST: u8 = 8;
}

/// Domains (the RDM model a message belongs to).
pub mod domain {
    // Each constant is the wire's number, under the name the SDK's public code gives it.
    #![allow(missing_docs)]
    pub const LOGIN: u8 = 1;
    pub const SOURCE: u8 = 4;
    pub const DICTIONARY: u8 = 5;
    pub const MARKET_PRICE: u8 = 6;
    pub const MARKET_BY_ORDER: u8 = 7;
    pub const MARKET_BY_PRICE: u8 = 8;
    pub const SYMBOL_LIST: u8 = 10;

    /// A name for logs and statuses.
    pub fn name(d: u8) -> String {
        match d {
            LOGIN => "Login".into(),
            SOURCE => "Source".into(),
            DICTIONARY => "Dictionary".into(),
            MARKET_PRICE => "MarketPrice".into(),
            MARKET_BY_ORDER => "MarketByOrder".into(),
            MARKET_BY_PRICE => "MarketByPrice".into(),
            SYMBOL_LIST => "SymbolList".into(),
            other => format!("domain {other}"),
        }
    }
}

/// Request flags.
pub mod request {
    // Each constant is the wire's number, under the name the SDK's public code gives it.
    #![allow(missing_docs)]
    pub const HAS_EXTENDED_HEADER: u16 = 0x0001;
    pub const HAS_PRIORITY: u16 = 0x0002;
    pub const STREAMING: u16 = 0x0004;
    pub const MSG_KEY_IN_UPDATES: u16 = 0x0008;
    pub const CONF_INFO_IN_UPDATES: u16 = 0x0010;
    pub const NO_REFRESH: u16 = 0x0020;
    pub const HAS_QOS: u16 = 0x0040;
    pub const HAS_WORST_QOS: u16 = 0x0080;
    pub const PRIVATE_STREAM: u16 = 0x0100;
    pub const PAUSE: u16 = 0x0200;
    pub const HAS_VIEW: u16 = 0x0400;
    pub const HAS_BATCH: u16 = 0x0800;
}

/// Refresh flags.
pub mod refresh {
    // Each constant is the wire's number, under the name the SDK's public code gives it.
    #![allow(missing_docs)]
    pub const HAS_MSG_KEY: u16 = 0x0008;
    pub const HAS_SEQ_NUM: u16 = 0x0010;
    pub const SOLICITED: u16 = 0x0020;
    pub const REFRESH_COMPLETE: u16 = 0x0040;
    pub const HAS_QOS: u16 = 0x0080;
    pub const CLEAR_CACHE: u16 = 0x0100;
    pub const PRIVATE_STREAM: u16 = 0x0400;
    pub const HAS_PART_NUM: u16 = 0x1000;
}

/// Status flags.
pub mod status {
    // Each constant is the wire's number, under the name the SDK's public code gives it.
    #![allow(missing_docs)]
    pub const HAS_MSG_KEY: u16 = 0x008;
    pub const HAS_GROUP_ID: u16 = 0x010;
    pub const HAS_STATE: u16 = 0x020;
    pub const PRIVATE_STREAM: u16 = 0x080;
}

/// Update flags.
pub mod update {
    // Each constant is the wire's number, under the name the SDK's public code gives it.
    #![allow(missing_docs)]
    pub const HAS_MSG_KEY: u16 = 0x008;
    pub const HAS_SEQ_NUM: u16 = 0x010;
    pub const HAS_CONF_INFO: u16 = 0x020;
    pub const DO_NOT_CONFLATE: u16 = 0x080;
}

/// Close flags.
pub mod close {
    // Each constant is the wire's number, under the name the SDK's public code gives it.
    #![allow(missing_docs)]
    pub const ACK: u16 = 0x02;
    pub const HAS_BATCH: u16 = 0x04;
}

/// Post flags (numbered unlike the other classes').
pub mod post {
    // Each constant is the wire's number, under the name the SDK's public code gives it.
    #![allow(missing_docs)]
    pub const HAS_POST_ID: u16 = 0x002;
    pub const HAS_MSG_KEY: u16 = 0x004;
    pub const HAS_SEQ_NUM: u16 = 0x008;
    pub const POST_COMPLETE: u16 = 0x020;
    pub const ACK: u16 = 0x040;
}

/// Ack flags.
pub mod ack {
    // Each constant is the wire's number, under the name the SDK's public code gives it.
    #![allow(missing_docs)]
    pub const HAS_TEXT: u16 = 0x02;
    pub const HAS_SEQ_NUM: u16 = 0x08;
    pub const HAS_MSG_KEY: u16 = 0x10;
    pub const HAS_NAK_CODE: u16 = 0x20;
}

/// Message key flags.
pub mod key {
    // Each constant is the wire's number, under the name the SDK's public code gives it.
    #![allow(missing_docs)]
    pub const HAS_SERVICE_ID: u16 = 0x01;
    pub const HAS_NAME: u16 = 0x02;
    pub const HAS_NAME_TYPE: u16 = 0x04;
    pub const HAS_FILTER: u16 = 0x08;
    pub const HAS_IDENTIFIER: u16 = 0x10;
    pub const HAS_ATTRIB: u16 = 0x20;
}

/// Stream states.
pub mod stream {
    // Each constant is the wire's number, under the name the SDK's public code gives it.
    #![allow(missing_docs)]
    pub const OPEN: u8 = 1;
    pub const NON_STREAMING: u8 = 2;
    pub const CLOSED_RECOVER: u8 = 3;
    pub const CLOSED: u8 = 4;
}

/// Data states.
pub mod data {
    // Each constant is the wire's number, under the name the SDK's public code gives it.
    #![allow(missing_docs)]
    pub const NO_CHANGE: u8 = 0;
    pub const OK: u8 = 1;
    pub const SUSPECT: u8 = 2;
}

/// Status codes.
pub mod code {
    // Each constant is the wire's number, under the name the SDK's public code gives it.
    #![allow(missing_docs)]
    pub const NONE: u8 = 0;
    pub const NOT_FOUND: u8 = 1;
    pub const TIMEOUT: u8 = 2;
    pub const NOT_ENTITLED: u8 = 3;
    pub const INVALID_ARGUMENT: u8 = 4;
    pub const USAGE_ERROR: u8 = 5;
    pub const PREEMPTED: u8 = 6;
    pub const NO_RESOURCES: u8 = 12;
    pub const TOO_MANY_ITEMS: u8 = 13;
    pub const ALREADY_OPEN: u8 = 14;
    pub const SOURCE_UNKNOWN: u8 = 15;
    pub const NOT_OPEN: u8 = 16;
    pub const INVALID_VIEW: u8 = 21;
    pub const ERROR: u8 = 28;
}

/// A message key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MsgKey<'a> {
    /// The service id.
    pub service_id: Option<u16>,
    /// The item's name.
    pub name: Option<&'a [u8]>,
    /// How the name is to be read (RIC by default).
    pub name_type: Option<u8>,
    /// The filter (admin domains: which parts).
    pub filter: Option<u32>,
    /// A numeric identifier.
    pub identifier: Option<i32>,
    /// Container type and bytes of the attributes (a Login's element list).
    pub attrib: Option<(u8, &'a [u8])>,
}

impl<'a> MsgKey<'a> {
    fn decode(r: &mut Reader<'a>) -> Result<MsgKey<'a>, RwfError> {
        let len = r.u15rb("a message key's length")? as usize;
        let mut k = Reader::new(r.take(len, "a message key")?);
        let flags = k.u15rb("a message key's flags")?;
        let mut key = MsgKey::default();
        if flags & key::HAS_SERVICE_ID != 0 {
            key.service_id = Some(k.u16ob("a service id")?);
        }
        if flags & key::HAS_NAME != 0 {
            key.name = Some(k.buf8("a name")?);
            if flags & key::HAS_NAME_TYPE != 0 {
                key.name_type = Some(k.u8("a name type")?);
            }
        }
        if flags & key::HAS_FILTER != 0 {
            key.filter = Some(k.u32("a filter")?);
        }
        if flags & key::HAS_IDENTIFIER != 0 {
            key.identifier = Some(k.u32("an identifier")? as i32);
        }
        if flags & key::HAS_ATTRIB != 0 {
            let ct = k.u8("an attribute type")?.wrapping_add(128);
            let bytes = if ct == dt::NO_DATA {
                &[][..]
            } else {
                k.buf15("attributes")?
            };
            key.attrib = Some((ct, bytes));
        }
        Ok(key)
    }

    /// Appends the key with its length.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let slot = Len15Slot::new(out);
        let mut flags = 0;
        if self.service_id.is_some() {
            flags |= key::HAS_SERVICE_ID;
        }
        if self.name.is_some() {
            flags |= key::HAS_NAME;
            if self.name_type.is_some() {
                flags |= key::HAS_NAME_TYPE;
            }
        }
        if self.filter.is_some() {
            flags |= key::HAS_FILTER;
        }
        if self.identifier.is_some() {
            flags |= key::HAS_IDENTIFIER;
        }
        if self.attrib.is_some() {
            flags |= key::HAS_ATTRIB;
        }
        put_u15rb(out, flags);
        if let Some(id) = self.service_id {
            put_u16ob(out, id);
        }
        if let Some(name) = self.name {
            put_buf8(out, name);
            if let Some(t) = self.name_type {
                out.push(t);
            }
        }
        if let Some(f) = self.filter {
            put_u32(out, f);
        }
        if let Some(i) = self.identifier {
            put_u32(out, i as u32);
        }
        if let Some((ct, bytes)) = self.attrib {
            out.push(ct.wrapping_sub(128));
            if ct != dt::NO_DATA {
                put_buf15(out, bytes);
            }
        }
        let _ = slot.finish(out); // a key is far below 32 KiB: its fields are bounded
    }
}

/// A stream's state: stream state, data state, code, text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RwfState<'a> {
    /// The stream state (`stream`).
    pub stream: u8,
    /// The data state (`data`).
    pub data: u8,
    /// The status code (`code`).
    pub code: u8,
    /// Why, for people.
    pub text: &'a [u8],
}

impl<'a> RwfState<'a> {
    /// A state from its parts.
    pub fn new(stream: u8, data: u8, code: u8, text: &'a str) -> Self {
        RwfState {
            stream,
            data,
            code,
            text: text.as_bytes(),
        }
    }

    /// A state primitive's bytes (an element's or a field's value).
    pub fn from_value(bytes: &'a [u8]) -> Result<Self, RwfError> {
        Self::decode(&mut Reader::new(bytes))
    }

    fn decode(r: &mut Reader<'a>) -> Result<Self, RwfError> {
        let b = r.u8("a state")?;
        Ok(RwfState {
            stream: b >> 3,
            data: b & 0x7,
            code: r.u8("a state's code")?,
            text: r.buf15("a state's text")?,
        })
    }

    /// Appends it, as RWF writes a state.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push((self.stream << 3) | (self.data & 0x7));
        out.push(self.code);
        put_buf15(out, self.text);
    }
}

/// Skips a QoS (its byte and the time and rate infos it announces).
fn skip_qos(r: &mut Reader<'_>) -> Result<u8, RwfError> {
    let q = r.u8("a QoS")?;
    if q >> 5 > 2 {
        r.u16("a QoS's time info")?;
    }
    if (q >> 1) & 0xF > 2 {
        r.u16("a QoS's rate info")?;
    }
    Ok(q)
}

/// One decoded message: the header's common fields, those of its class this node
/// uses, and the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg<'a> {
    /// The message class (`class`).
    pub class: u8,
    /// The domain (`domain`).
    pub domain: u8,
    /// The stream's id.
    pub stream_id: i32,
    /// The class's flags.
    pub flags: u16,
    /// The payload's container type (`dt`).
    pub container: u8,
    /// The message key, when the message has one.
    pub key: Option<MsgKey<'a>>,
    /// Refresh and Status.
    pub state: Option<RwfState<'a>>,
    /// Refresh, and Status when it has one: the item group the item is in (the
    /// provider's directory may give a whole group a state, or merge it into another).
    pub group_id: Option<&'a [u8]>,
    /// Refresh, Update, Post, Ack.
    pub seq: Option<u32>,
    /// Update: the update type.
    pub update_type: u8,
    /// Post: its id; Ack: the id it answers.
    pub post_id: Option<u32>,
    /// Ack: why the post was refused.
    pub nak_code: Option<u8>,
    /// Ack: text.
    pub text: &'a [u8],
    /// Update: conflation count.
    pub conflation_count: u16,
    /// The payload (its container type says how to read it).
    pub payload: &'a [u8],
}

impl<'a> Msg<'a> {
    /// Reads a message's header and key; the payload is left to the caller.
    pub fn decode(bytes: &'a [u8]) -> Result<Msg<'a>, RwfError> {
        let mut r = Reader::new(bytes);
        let header_len = r.u16("a message header's length")? as usize;
        let header = r.take(header_len, "a message header")?;
        let payload = r.rest();
        let mut h = Reader::new(header);
        let class = h.u8("a message class")? & 0x1F;
        let domain = h.u8("a domain")?;
        let stream_id = h.u32("a stream id")? as i32;
        let flags = h.u15rb("message flags")?;
        let container = h.u8("a container type")?.wrapping_add(128);
        let mut m = Msg {
            class,
            domain,
            stream_id,
            flags,
            container,
            key: None,
            state: None,
            group_id: None,
            seq: None,
            update_type: 0,
            post_id: None,
            nak_code: None,
            text: &[],
            conflation_count: 1,
            payload,
        };
        match class {
            class::REQUEST => {
                if flags & request::HAS_PRIORITY != 0 {
                    h.u8("a priority class")?;
                    h.u16ob("a priority count")?;
                }
                if flags & request::HAS_QOS != 0 {
                    skip_qos(&mut h)?;
                }
                if flags & request::HAS_WORST_QOS != 0 {
                    skip_qos(&mut h)?;
                }
                m.key = Some(MsgKey::decode(&mut h)?);
            }
            class::REFRESH => {
                if flags & refresh::HAS_SEQ_NUM != 0 {
                    m.seq = Some(h.u32("a sequence number")?);
                }
                m.state = Some(RwfState::decode(&mut h)?);
                m.group_id = Some(h.buf8("a group id")?);
                if flags & 0x0002 != 0 {
                    h.buf15("permission data")?;
                }
                if flags & refresh::HAS_QOS != 0 {
                    skip_qos(&mut h)?;
                }
                if flags & refresh::HAS_MSG_KEY != 0 {
                    m.key = Some(MsgKey::decode(&mut h)?);
                }
            }
            class::STATUS => {
                if flags & status::HAS_STATE != 0 {
                    m.state = Some(RwfState::decode(&mut h)?);
                }
                if flags & status::HAS_GROUP_ID != 0 {
                    m.group_id = Some(h.buf8("a group id")?);
                }
                if flags & 0x002 != 0 {
                    h.buf15("permission data")?;
                }
                if flags & status::HAS_MSG_KEY != 0 {
                    m.key = Some(MsgKey::decode(&mut h)?);
                }
            }
            class::UPDATE => {
                m.update_type = h.u8("an update type")?;
                if flags & update::HAS_SEQ_NUM != 0 {
                    m.seq = Some(h.u32("a sequence number")?);
                }
                if flags & update::HAS_CONF_INFO != 0 {
                    m.conflation_count = h.u15rb("a conflation count")?;
                    h.u16("a conflation time")?;
                }
                if flags & 0x002 != 0 {
                    h.buf15("permission data")?;
                }
                if flags & update::HAS_MSG_KEY != 0 {
                    m.key = Some(MsgKey::decode(&mut h)?);
                }
            }
            class::CLOSE | class::GENERIC => {}
            class::POST => {
                h.u32("a post's user address")?;
                h.u32("a post's user id")?;
                if flags & post::HAS_SEQ_NUM != 0 {
                    m.seq = Some(h.u32("a sequence number")?);
                }
                if flags & post::HAS_POST_ID != 0 {
                    m.post_id = Some(h.u32("a post id")?);
                }
                if flags & 0x080 != 0 {
                    h.buf15("permission data")?;
                }
                if flags & post::HAS_MSG_KEY != 0 {
                    m.key = Some(MsgKey::decode(&mut h)?);
                }
            }
            class::ACK => {
                m.post_id = Some(h.u32("an ack id")?);
                if flags & ack::HAS_NAK_CODE != 0 {
                    m.nak_code = Some(h.u8("a nak code")?);
                }
                if flags & ack::HAS_TEXT != 0 {
                    m.text = h.buf16("an ack's text")?;
                }
                if flags & ack::HAS_SEQ_NUM != 0 {
                    m.seq = Some(h.u32("a sequence number")?);
                }
                if flags & ack::HAS_MSG_KEY != 0 {
                    m.key = Some(MsgKey::decode(&mut h)?);
                }
            }
            other => {
                return Err(RwfError::invalid("a message", format!("class {other}")));
            }
        }
        if container == dt::NO_DATA && !payload.is_empty() {
            return Err(RwfError::invalid(
                "a message",
                "a payload after a header that says it has none",
            ));
        }
        Ok(m)
    }
}

/// Writes a message: the header's start now, its length and the payload later.
pub struct MsgWriter {
    start: usize,
}

impl MsgWriter {
    /// Starts a message at the end of `out`: header length (filled by
    /// [`MsgWriter::end_header`]), class, domain, stream, flags, container type.
    pub fn begin(
        out: &mut Vec<u8>,
        class: u8,
        domain: u8,
        stream_id: i32,
        flags: u16,
        container: u8,
    ) -> MsgWriter {
        let start = out.len();
        out.extend_from_slice(&[0, 0, class, domain]);
        put_u32(out, stream_id as u32);
        put_u15rb(out, flags);
        out.push(container.wrapping_sub(128));
        MsgWriter { start }
    }

    /// The header is complete: what follows is the payload.
    pub fn end_header(self, out: &mut [u8]) {
        let len = (out.len() - self.start - 2) as u16;
        out[self.start..self.start + 2].copy_from_slice(&len.to_be_bytes());
    }
}

/// A Refresh's header (the payload follows).
#[allow(clippy::too_many_arguments)]
pub fn begin_refresh(
    out: &mut Vec<u8>,
    domain: u8,
    stream_id: i32,
    flags: u16,
    container: u8,
    seq: Option<u32>,
    state: &RwfState<'_>,
    key: Option<&MsgKey<'_>>,
    part: Option<u16>,
    qos: bool,
) {
    let mut flags = flags;
    if qos {
        flags |= refresh::HAS_QOS;
    }
    if seq.is_some() {
        flags |= refresh::HAS_SEQ_NUM;
    }
    if key.is_some() {
        flags |= refresh::HAS_MSG_KEY;
    }
    if part.is_some() {
        flags |= refresh::HAS_PART_NUM;
    }
    let w = MsgWriter::begin(out, class::REFRESH, domain, stream_id, flags, container);
    if let Some(s) = seq {
        put_u32(out, s);
    }
    state.encode(out);
    out.extend_from_slice(&[2, 0, 0]); // group id: the default
    if qos {
        out.push(super::primitive::QOS_REALTIME_TICK_BY_TICK);
    }
    if let Some(k) = key {
        k.encode(out);
    }
    if let Some(p) = part {
        put_u15rb(out, p & 0x7FFF);
    }
    w.end_header(out);
}

/// A Status (no payload).
pub fn put_status(
    out: &mut Vec<u8>,
    domain: u8,
    stream_id: i32,
    state: &RwfState<'_>,
    key: Option<&MsgKey<'_>>,
    private: bool,
) {
    let mut flags = status::HAS_STATE;
    if key.is_some() {
        flags |= status::HAS_MSG_KEY;
    }
    if private {
        flags |= status::PRIVATE_STREAM;
    }
    let w = MsgWriter::begin(out, class::STATUS, domain, stream_id, flags, dt::NO_DATA);
    state.encode(out);
    if let Some(k) = key {
        k.encode(out);
    }
    w.end_header(out);
}

/// An Update's header (the payload follows).
pub fn begin_update(
    out: &mut Vec<u8>,
    domain: u8,
    stream_id: i32,
    update_type: u8,
    seq: Option<u32>,
    conflation_count: u16,
    do_not_conflate: bool,
) {
    let mut flags = 0;
    if seq.is_some() {
        flags |= update::HAS_SEQ_NUM;
    }
    if conflation_count > 1 {
        flags |= update::HAS_CONF_INFO;
    }
    if do_not_conflate {
        flags |= update::DO_NOT_CONFLATE;
    }
    let w = MsgWriter::begin(out, class::UPDATE, domain, stream_id, flags, dt::FIELD_LIST);
    out.push(update_type);
    if let Some(s) = seq {
        put_u32(out, s);
    }
    if conflation_count > 1 {
        put_u15rb(out, conflation_count.min(0x7FFF));
        out.extend_from_slice(&[0, 0]);
    }
    w.end_header(out);
}

/// An Ack (or, with a nak code, a Nak) of a post.
pub fn put_ack(
    out: &mut Vec<u8>,
    domain: u8,
    stream_id: i32,
    ack_id: u32,
    nak_code: Option<u8>,
    text: &[u8],
    seq: Option<u32>,
) {
    let mut flags = 0;
    if nak_code.is_some() {
        flags |= ack::HAS_NAK_CODE;
    }
    if !text.is_empty() {
        flags |= ack::HAS_TEXT;
    }
    if seq.is_some() {
        flags |= ack::HAS_SEQ_NUM;
    }
    let w = MsgWriter::begin(out, class::ACK, domain, stream_id, flags, dt::NO_DATA);
    put_u32(out, ack_id);
    if let Some(c) = nak_code {
        out.push(c);
    }
    if !text.is_empty() {
        put_buf16(out, text);
    }
    if let Some(s) = seq {
        put_u32(out, s);
    }
    w.end_header(out);
}

/// A Post's header (a field list follows): the node toward interactive providers.
/// The post's user is the node (address 127.0.0.1, id 0); `key` names the item of an
/// off-stream post.
pub fn begin_post(
    out: &mut Vec<u8>,
    domain: u8,
    stream_id: i32,
    post_id: u32,
    wants_ack: bool,
    key: Option<&MsgKey<'_>>,
) {
    let mut flags = post::HAS_POST_ID | post::POST_COMPLETE;
    if wants_ack {
        flags |= post::ACK;
    }
    if key.is_some() {
        flags |= post::HAS_MSG_KEY;
    }
    let w = MsgWriter::begin(out, class::POST, domain, stream_id, flags, dt::FIELD_LIST);
    put_u32(out, u32::from(std::net::Ipv4Addr::LOCALHOST));
    put_u32(out, 0);
    put_u32(out, post_id);
    if let Some(k) = key {
        k.encode(out);
    }
    w.end_header(out);
}

/// A Close (no payload).
pub fn put_close(out: &mut Vec<u8>, domain: u8, stream_id: i32) {
    let w = MsgWriter::begin(out, class::CLOSE, domain, stream_id, 0, dt::NO_DATA);
    w.end_header(out);
}

/// A Request (no payload): the node toward interactive providers. With `qos`, it asks
/// for realtime, tick by tick (the only QoS a node takes).
pub fn put_request(
    out: &mut Vec<u8>,
    domain: u8,
    stream_id: i32,
    flags: u16,
    key: &MsgKey<'_>,
    qos: bool,
) {
    let flags = if qos { flags | request::HAS_QOS } else { flags };
    let w = MsgWriter::begin(out, class::REQUEST, domain, stream_id, flags, dt::NO_DATA);
    if qos {
        out.push(super::primitive::QOS_REALTIME_TICK_BY_TICK);
    }
    key.encode(out);
    w.end_header(out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rwf::hex;

    #[test]
    fn the_sdks_request_decodes() {
        // A streaming MarketPrice request, stream 5, service 1, "TRI.N", with priority
        // and QoS, as the SDK's codec writes it.
        let b = hex("00 16 01 06 00 00 00 05 46 00 01 01 22 80 09 07 01 05 54 52 49 2E 4E 01");
        let m = Msg::decode(&b).unwrap();
        assert_eq!((m.class, m.domain, m.stream_id), (class::REQUEST, 6, 5));
        assert!(m.flags & request::STREAMING != 0);
        let k = m.key.unwrap();
        assert_eq!(k.service_id, Some(1));
        assert_eq!(k.name, Some(&b"TRI.N"[..]));
        assert_eq!(k.name_type, Some(1));
        assert!(m.payload.is_empty());
    }

    #[test]
    fn a_refresh_and_an_update_are_written_as_the_sdk_writes_them() {
        // The SDK's refresh of the same item (fields BID 12.34, ASK 12.35).
        let fields = hex("08 00 02 00 16 03 0C 04 D2 00 19 03 0C 04 D3");
        let mut out = Vec::new();
        let key = MsgKey {
            service_id: Some(1),
            name: Some(b"TRI.N"),
            name_type: Some(1),
            ..MsgKey::default()
        };
        begin_refresh(
            &mut out,
            6,
            5,
            refresh::SOLICITED | refresh::REFRESH_COMPLETE | refresh::CLEAR_CACHE,
            dt::FIELD_LIST,
            None,
            &RwfState::new(stream::OPEN, data::OK, code::NONE, "OK"),
            Some(&key),
            None,
            true,
        );
        out.extend_from_slice(&fields);
        let mut expected = hex("00 1D 02 06 00 00 00 05 81 E8 04 09 00 02 4F 4B 02 00 00 22");
        expected.extend(hex("80 09 07 01 05 54 52 49 2E 4E 01"));
        expected.extend(&fields);
        assert_eq!(out, expected);
        let mut out = Vec::new();
        begin_update(&mut out, 6, 5, 1, None, 1, false);
        out.extend_from_slice(&fields);
        let mut expected = hex("00 09 04 06 00 00 00 05 00 04 01");
        expected.extend(&fields);
        assert_eq!(out, expected);
    }

    #[test]
    fn statuses_closes_and_nacks_match_the_sdk() {
        let mut out = Vec::new();
        put_status(
            &mut out,
            6,
            5,
            &RwfState::new(stream::CLOSED, data::SUSPECT, code::NOT_FOUND, "Not found"),
            None,
            false,
        );
        assert_eq!(
            out,
            hex("00 14 03 06 00 00 00 05 20 00 22 01 09 4E 6F 74 20 66 6F 75 6E 64")
        );
        let mut out = Vec::new();
        put_close(&mut out, 6, 5);
        assert_eq!(out, hex("00 08 05 06 00 00 00 05 00 00"));
        let mut out = Vec::new();
        put_ack(&mut out, 6, 1, 7, Some(10), b"bad", Some(9));
        assert_eq!(
            out,
            hex("00 15 06 06 00 00 00 01 2A 00 00 00 00 07 0A 03 62 61 64 00 00 00 09")
        );
    }

    #[test]
    fn a_post_wrapping_an_update_decodes() {
        let b = hex("00 20 08 06 00 00 00 01 6E 0D 7F 00 00 01 00 00 00 2A 00 00 00 09 00 00 00 07 80 06 03 FE 01 2C 01 58 00 09 04 06 00 00 00 01 00 00 00");
        let m = Msg::decode(&b).unwrap();
        assert_eq!(m.class, class::POST);
        assert_eq!(m.container, dt::MSG);
        assert_eq!((m.seq, m.post_id), (Some(9), Some(7)));
        let k = m.key.unwrap();
        assert_eq!((k.service_id, k.name), (Some(300), Some(&b"X"[..])));
        let inner = Msg::decode(m.payload).unwrap();
        assert_eq!(inner.class, class::UPDATE);
    }

    #[test]
    fn a_login_request_with_attributes_decodes() {
        let b = hex("00 32 01 01 00 00 00 01 04 00 80 28 26 04 75 73 65 72 01 05 80 1E 08 00 02 0D 41 70 70 6C 69 63 61 74 69 6F 6E 49 64 11 03 32 35 36 04 52 6F 6C 65 04 01 00");
        let m = Msg::decode(&b).unwrap();
        let k = m.key.unwrap();
        assert_eq!(k.name, Some(&b"user"[..]));
        let (ct, attrib) = k.attrib.unwrap();
        assert_eq!(ct, dt::ELEMENT_LIST);
        assert_eq!(attrib.len(), 30);
    }

    #[test]
    fn cut_and_contradictory_messages_are_errors() {
        let b = hex("00 16 01 06 00 00 00 05 46 00 01 01 22 80 09 07 01 05 54 52 49 2E 4E 01");
        for n in 0..b.len() {
            assert!(Msg::decode(&b[..n]).is_err(), "{n} bytes");
        }
        // A key longer than the header holding it.
        let mut bad = b.clone();
        bad[14] = 0x20;
        assert!(Msg::decode(&bad).is_err());
        // A payload after NO_DATA.
        let mut bad = b.clone();
        bad.push(1);
        assert!(Msg::decode(&bad).is_err());
    }
}
