//! Records and their encoding (docs/JOURNAL.md): pure functions over bytes.
//!
//! A record on disk is `u32 body length | u32 CRC-32 of the body | body`; the body is
//! `u8 stream | u64 seq | u64 time (ns since the Unix epoch) | the stream's part`.

use tickwire_proto::wire::{put_str16, put_u32, put_u64, Reader};
use tickwire_proto::{DecodeError, FieldList, NakCode};

/// Bytes before a record's body: its length and its checksum.
pub const RECORD_HEADER_LEN: usize = 8;
/// The largest body: a post's fields fit in one protocol message (64 KiB), with room
/// for the names around them.
pub const MAX_BODY: usize = 200 * 1024;

/// The journal's two streams, as in a persistence server: what was received, and what
/// was completed (the publisher's answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Stream {
    /// Posts as received.
    Received = 1,
    /// Their answers.
    Completed = 2,
    /// A refresh or an update of a journaled item (`[journal] updates`), for replay.
    Update = 3,
}

impl Stream {
    /// Its name, for logs.
    pub fn name(self) -> &'static str {
        match self {
            Stream::Received => "received",
            Stream::Completed => "completed",
            Stream::Update => "update",
        }
    }
}

/// A post as received, before its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received<'a> {
    /// The item's service.
    pub service: &'a str,
    /// The item.
    pub item: &'a str,
    /// Who posted it (the user of the connection; empty on an open node).
    pub user: &'a str,
    /// The poster's number for it.
    pub post_id: u32,
    /// The fields are a whole image, not an update.
    pub image: bool,
    /// The posted fields.
    pub fields: FieldList<'a>,
}

/// The answer to a received post.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed<'a> {
    /// The `seq` of the received record it completes.
    pub received: u64,
    /// `None`: the publisher accepted it.
    pub nak: Option<NakCode>,
    /// The publisher's text.
    pub text: &'a str,
}

/// A refresh or update of an item, as the node received it from its publisher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemMessage<'a> {
    /// The item's service.
    pub service: &'a str,
    /// The item.
    pub item: &'a str,
    /// The item's sequence number.
    pub seq: u32,
    /// A refresh (a whole image), not an update.
    pub refresh: bool,
    /// The update type (PROTOCOL 3.4.4; 0 for a refresh).
    pub update_type: u8,
    /// Its fields.
    pub fields: FieldList<'a>,
}

impl ItemMessage<'_> {
    /// Appends its part of a record body (after stream, seq and time): what the node
    /// writes for each journaled message, then hands to [`crate::Journal::item_message`].
    pub fn encode_part(&self, out: &mut Vec<u8>) -> Result<(), tickwire_proto::EncodeError> {
        put_u32(out, self.seq);
        out.push(if self.refresh { ITEM_REFRESH } else { 0 });
        out.push(self.update_type);
        put_str16(out, self.service, "service name")?;
        put_str16(out, self.item, "item name")?;
        out.extend_from_slice(self.fields.as_bytes());
        Ok(())
    }
}

/// What a record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body<'a> {
    /// A post received.
    Received(Received<'a>),
    /// A post answered.
    Completed(Completed<'a>),
    /// An item's refresh or update.
    Update(ItemMessage<'a>),
}

impl Body<'_> {
    /// The stream it belongs to.
    pub fn stream(&self) -> Stream {
        match self {
            Body::Received(_) => Stream::Received,
            Body::Completed(_) => Stream::Completed,
            Body::Update(_) => Stream::Update,
        }
    }
}

/// One record: its place in the journal, when it was written, what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// Its place in the journal (from 1, no gaps).
    pub seq: u64,
    /// When it was written (ns since the Unix epoch).
    pub time_ns: u64,
    /// What it says.
    pub body: Body<'a>,
}

const RECEIVED_IMAGE: u8 = 1;
const ITEM_REFRESH: u8 = 1;

impl Record<'_> {
    /// Appends the record (header and body) to `out`. On error `out` is as it was.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), tickwire_proto::EncodeError> {
        let start = out.len();
        out.extend_from_slice(&[0; RECORD_HEADER_LEN]);
        let res = self.encode_body(out);
        let len = out.len() - start - RECORD_HEADER_LEN;
        let res = match res {
            Ok(()) if len > MAX_BODY => Err(tickwire_proto::EncodeError::TooLong {
                what: "journal record",
                len,
                max: MAX_BODY,
            }),
            other => other,
        };
        if let Err(e) = res {
            out.truncate(start);
            return Err(e);
        }
        let crc = crc32fast::hash(&out[start + RECORD_HEADER_LEN..]);
        out[start..start + 4].copy_from_slice(&(len as u32).to_be_bytes());
        out[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
        Ok(())
    }

    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), tickwire_proto::EncodeError> {
        out.push(self.body.stream() as u8);
        put_u64(out, self.seq);
        put_u64(out, self.time_ns);
        match &self.body {
            Body::Received(r) => {
                put_u32(out, r.post_id);
                out.push(if r.image { RECEIVED_IMAGE } else { 0 });
                put_str16(out, r.service, "service name")?;
                put_str16(out, r.item, "item name")?;
                put_str16(out, r.user, "user")?;
                out.extend_from_slice(r.fields.as_bytes());
            }
            Body::Completed(c) => {
                put_u64(out, c.received);
                out.push(c.nak.map_or(0, NakCode::to_u8));
                put_str16(out, c.text, "text")?;
            }
            Body::Update(m) => m.encode_part(out)?,
        }
        Ok(())
    }
}

/// Why bytes are not a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// Fewer bytes than the record says it has: the end of a write a crash cut short.
    #[error("record cut short: {have} of {need} bytes")]
    Short {
        /// Bytes there are.
        have: usize,
        /// Bytes the record needs.
        need: usize,
    },
    /// A length no record can have.
    #[error("record length {0} is out of range (1 to {MAX_BODY})")]
    Length(usize),
    /// The bytes are not what was written.
    #[error("checksum mismatch (stored {stored:08x}, computed {computed:08x})")]
    Checksum {
        /// The checksum written.
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// The body does not decode.
    #[error("record body: {0}")]
    Body(#[from] DecodeError),
    /// A stream this version does not know.
    #[error("unknown stream {0}")]
    UnknownStream(u8),
}

/// The record at the start of `bytes` and its length on disk.
pub fn decode(bytes: &[u8]) -> Result<(Record<'_>, usize), RecordError> {
    if bytes.len() < RECORD_HEADER_LEN {
        return Err(RecordError::Short {
            have: bytes.len(),
            need: RECORD_HEADER_LEN,
        });
    }
    let len = u32::from_be_bytes(bytes[0..4].try_into().expect("4 bytes")) as usize;
    if len == 0 || len > MAX_BODY {
        return Err(RecordError::Length(len));
    }
    let need = RECORD_HEADER_LEN + len;
    if bytes.len() < need {
        return Err(RecordError::Short {
            have: bytes.len(),
            need,
        });
    }
    let stored = u32::from_be_bytes(bytes[4..8].try_into().expect("4 bytes"));
    let body = &bytes[RECORD_HEADER_LEN..need];
    let computed = crc32fast::hash(body);
    if stored != computed {
        return Err(RecordError::Checksum { stored, computed });
    }
    Ok((decode_body(body)?, need))
}

fn decode_body(body: &[u8]) -> Result<Record<'_>, RecordError> {
    let mut r = Reader::new(body, "journal record");
    let stream = r.u8()?;
    let seq = r.u64()?;
    let time_ns = r.u64()?;
    let body = match stream {
        1 => {
            let post_id = r.u32()?;
            let flags = r.u8()?;
            if flags & !RECEIVED_IMAGE != 0 {
                return Err(RecordError::Body(DecodeError::InvalidValue {
                    what: "received flags",
                    value: flags as u64,
                }));
            }
            let service = r.str16("service name")?;
            let item = r.str16("item name")?;
            let user = r.str16("user")?;
            let fields = FieldList::decode(r.rest())?;
            r.bytes(r.remaining())?;
            Body::Received(Received {
                service,
                item,
                user,
                post_id,
                image: flags & RECEIVED_IMAGE != 0,
                fields,
            })
        }
        2 => {
            let received = r.u64()?;
            let nak = NakCode::of_ack(r.u8()?);
            Body::Completed(Completed {
                received,
                nak,
                text: r.str16("text")?,
            })
        }
        3 => {
            let seq = r.u32()?;
            let flags = r.u8()?;
            if flags & !ITEM_REFRESH != 0 {
                return Err(RecordError::Body(DecodeError::InvalidValue {
                    what: "item message flags",
                    value: flags as u64,
                }));
            }
            let update_type = r.u8()?;
            let service = r.str16("service name")?;
            let item = r.str16("item name")?;
            let fields = FieldList::decode(r.rest())?;
            r.bytes(r.remaining())?;
            Body::Update(ItemMessage {
                service,
                item,
                seq,
                refresh: flags & ITEM_REFRESH != 0,
                update_type,
                fields,
            })
        }
        other => return Err(RecordError::UnknownStream(other)),
    };
    r.finish()?;
    Ok(Record { seq, time_ns, body })
}
