//! The file-transfer messages (docs/PROTOCOL.md, section 14).
//!
//! Every message starts with `0x46` (`F`), the version (1) and its kind; integers are
//! big-endian; a name is a `str16`. Senders send offers, chunks and cancels; receivers
//! send statuses and their presence. The node carries them opaque, as backbone
//! messages or inside native frames, so this decoder sees whatever any peer sends:
//! every length is bounded and checked, every chunk's CRC-32 is checked, and it is
//! fuzzed (`fuzz/fuzz_targets/files_messages.rs`).

use std::ops::Range;
use thiserror::Error;
use tickwire_proto::wire::{put_str16, put_u16, put_u32, put_u64, Reader};
use tickwire_proto::{DecodeError, EncodeError};

/// A file-transfer message's first byte.
pub const MAGIC: u8 = 0x46;
/// The version this node writes and reads.
pub const VERSION: u8 = 1;
/// Magic, version and kind.
pub const HEADER_LEN: usize = 3;
/// Bytes of a chunk message before its data.
pub const CHUNK_HEADER_LEN: usize = HEADER_LEN + 8 + 4 + 4;
/// Largest chunk a transfer may use: a chunk message fits one message of the native
/// protocol (bodies of at most 65,535 bytes) with room to spare.
pub const MAX_CHUNK: u32 = 64_000;
/// Smallest chunk a transfer may use (a node's `chunk_kib` is at least 1): with it a
/// site's map of a file's chunks takes at most a bit per KiB of the file.
pub const MIN_CHUNK: u32 = 1024;
/// Longest site, sender or service name.
pub const MAX_SITE: usize = 256;
/// Longest reason text in a status or a cancel.
pub const MAX_REASON: usize = 256;
/// Most sites an offer may name.
pub const MAX_TARGETS: usize = 256;
/// Most missing ranges one status lists (the rest are asked for in the next one).
pub const MAX_RANGES: usize = 64;

const KIND_OFFER: u8 = 1;
const KIND_CHUNK: u8 = 2;
const KIND_STATUS: u8 = 3;
const KIND_PRESENT: u8 = 4;
const KIND_CANCEL: u8 = 5;
const KIND_PUT: u8 = 16;
const KIND_PUT_DATA: u8 = 17;
const KIND_PUT_ANSWER: u8 = 18;
const KIND_QUERY: u8 = 19;
const KIND_REPORT: u8 = 20;
const KIND_QUERY_REFUSED: u8 = 21;

/// Offer flag: every site that takes the service may receive the file, not only
/// those named.
const FLAG_OPEN: u8 = 1;

/// Why bytes are not a file-transfer message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum WireError {
    /// The bytes do not decode.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// Not a file-transfer message.
    #[error("not a file-transfer message (first byte 0x{0:02x})")]
    Magic(u8),
    /// A version this node does not understand.
    #[error("file-transfer version {0} is not understood")]
    Version(u8),
    /// A kind this node does not know.
    #[error("unknown file-transfer message kind {0}")]
    Kind(u8),
    /// A chunk whose bytes fail their CRC-32.
    #[error("chunk {index} of transfer {transfer:016x} fails its CRC-32")]
    BadCrc {
        /// The transfer's id (the sending node's).
        transfer: u64,
        /// The chunk's number (from 0).
        index: u32,
    },
    /// A length out of range.
    #[error("{what} has {len} bytes or entries, allowed 1..={max}")]
    Length {
        /// What it is about.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The most allowed.
        max: usize,
    },
    /// A value out of range.
    #[error("invalid {what}: {value}")]
    Invalid {
        /// What it is about.
        what: &'static str,
        /// The value.
        value: u64,
    },
}

/// A file offered to sites: its manifest and how far the sender's first pass is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer<'a> {
    /// The transfer's id (the sending node's).
    pub transfer: u64,
    /// The sending site.
    pub sender: &'a str,
    /// The files service.
    pub service: &'a str,
    /// Relative path in the inbox (checked by the receiver: `name::check_name`).
    pub name: &'a str,
    /// The file's size in bytes.
    pub size: u64,
    /// Bytes per chunk, [`MIN_CHUNK`] to [`MAX_CHUNK`] (the last may be shorter).
    pub chunk_size: u32,
    /// The file's SHA-256.
    pub sha256: [u8; 32],
    /// Chunks `0..sent_through` have been sent at least once: a receiver missing one
    /// of them asks for it.
    pub sent_through: u32,
    /// Milliseconds since 1970 after which the sender gives up on sites without it.
    pub expires_ms: u64,
    /// Every site that takes the service may receive it (not only `targets`).
    pub open: bool,
    /// Sites whose delivery the sender records and waits for.
    pub targets: Vec<&'a str>,
}

impl Offer<'_> {
    /// Chunks in the file.
    pub fn chunks(&self) -> u32 {
        chunk_count(self.size, self.chunk_size).unwrap_or(0)
    }
}

/// The transfer an offer, chunk, status or cancel is about, read from its first bytes
/// (no decode, no CRC): for routing a message this side encoded itself.
pub fn transfer_of(buf: &[u8]) -> Option<u64> {
    match buf {
        [MAGIC, VERSION, KIND_OFFER | KIND_CHUNK | KIND_STATUS | KIND_CANCEL, rest @ ..] => {
            rest.first_chunk::<8>().map(|b| u64::from_be_bytes(*b))
        }
        _ => None,
    }
}

/// Whether `buf` is a Cancel, read from its first bytes (no decode): one a node sends
/// or relays goes even to a busy peer (it is not repaired or repeated as a chunk or an
/// offer is).
pub fn is_cancel(buf: &[u8]) -> bool {
    matches!(buf, [MAGIC, VERSION, KIND_CANCEL, ..])
}

/// A report's request and whether it is the last part, read from its first bytes
/// (its entries not decoded): for following which queries are answered.
pub fn report_head(buf: &[u8]) -> Option<(u32, bool)> {
    match buf {
        [MAGIC, VERSION, KIND_REPORT, rest @ ..] => {
            let request = u32::from_be_bytes(*rest.first_chunk::<4>()?);
            Some((request, *rest.get(4)? == 1))
        }
        _ => None,
    }
}

/// Chunks of a file of `size` bytes in chunks of `chunk_size`, if that fits a u32.
pub fn chunk_count(size: u64, chunk_size: u32) -> Option<u32> {
    if chunk_size == 0 {
        return None;
    }
    u32::try_from(size.div_ceil(u64::from(chunk_size))).ok()
}

tickwire_proto::wire_enum! {
    /// What a site says of a transfer.
    pub enum SiteState {
        /// A state this version does not know (kept, so a newer peer is not misread).
        Unknown => "unknown";
        /// Taking chunks; the status lists what it still misses.
        Receiving = 1 => "receiving",
        /// Every chunk, the SHA-256 checked, the file renamed into the inbox (and synced
        /// as its fsync policy says).
        Done = 2 => "done",
        /// It could not take the file (reason in the status); it tries again when
        /// offered the file after its retry time.
        Failed = 3 => "failed",
    }
}

/// A receiving site's answer to an offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status<'a> {
    /// The transfer's id (the sending node's).
    pub transfer: u64,
    /// The site (a node name).
    pub site: &'a str,
    /// Where it stands.
    pub state: SiteState,
    /// Chunks the site holds.
    pub have: u32,
    /// Chunks it misses below the offer's `sent_through` (at most [`MAX_RANGES`]).
    pub missing: Vec<Range<u32>>,
    /// Why it failed (empty otherwise).
    pub reason: &'a str,
}

/// A client's file to queue at a node (`tickwire files send`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Put<'a> {
    /// The client's number for this upload (its answers carry it).
    pub request: u32,
    /// The files service.
    pub service: &'a str,
    /// The file's name at the sites.
    pub name: &'a str,
    /// The file's size in bytes.
    pub size: u64,
    /// The client's hash of the file; the node hashes what it receives and refuses a
    /// file whose hash differs.
    pub sha256: [u8; 32],
    /// The sites to deliver to; empty: every site of the service.
    pub to: Vec<&'a str>,
}

tickwire_proto::wire_enum! {
    /// Where an upload stands, in the node's answer.
    pub enum PutState {
        /// A state this node does not know.
        Unknown => "unknown";
        /// Send the bytes (at most `window` beyond `received`).
        Go = 1 => "go",
        /// The node has `received` bytes.
        Progress = 2 => "progress",
        /// The file is whole, checked and queued as `transfer`.
        Queued = 3 => "queued",
        /// Refused (the reason says why); nothing is queued.
        Refused = 4 => "refused",
    }
}

/// The node's answer to an upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutAnswer<'a> {
    /// The client's number for the upload or query.
    pub request: u32,
    /// Where it stands.
    pub state: PutState,
    /// The transfer's id (the sending node's).
    pub transfer: u64,
    /// Bytes the node has taken.
    pub received: u64,
    /// With `Go`: bytes the client may send beyond `received`.
    pub window: u64,
    /// Why (empty when there is nothing to say).
    pub reason: &'a str,
}

impl<'a> PutAnswer<'a> {
    /// The upload `request` refused, with why.
    pub fn refused(request: u32, reason: &'a str) -> Self {
        PutAnswer {
            request,
            state: PutState::Refused,
            transfer: 0,
            received: 0,
            window: 0,
            reason,
        }
    }
}

/// One file at one site, in a node's report (`tickwire files status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportEntry<'a> {
    /// The transfer's id (the sending node's).
    pub transfer: u64,
    /// The files service.
    pub service: &'a str,
    /// The file's name at the sites.
    pub name: &'a str,
    /// The file's size in bytes.
    pub size: u64,
    /// The file's SHA-256.
    pub sha256: [u8; 32],
    /// Empty: no site yet (a file for every site, before it starts).
    pub site: &'a str,
    /// `queued`, `sending`, `done` or `failed`.
    pub state: &'a str,
    /// Milliseconds since 1970 when the state began.
    pub since_ms: u64,
    /// Why (empty when there is nothing to say).
    pub reason: &'a str,
}

/// A file-transfer message, borrowing from the received bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilesMessage<'a> {
    /// A sender offers a file to its sites.
    Offer(Offer<'a>),
    /// Bytes `index * chunk_size ..` of the transfer's file (CRC checked on decode).
    Chunk {
        /// The transfer's id (the sending node's).
        transfer: u64,
        /// The chunk's number (from 0).
        index: u32,
        /// The bytes.
        data: &'a [u8],
    },
    /// A receiving site's answer to an offer.
    Status(Status<'a>),
    /// A receiving site takes `service` (senders learn which sites exist).
    Present {
        /// The site (a node name).
        site: &'a str,
        /// The files service.
        service: &'a str,
    },
    /// The sender gave the transfer up (expired or cancelled): drop what was received.
    Cancel {
        /// The transfer's id (the sending node's).
        transfer: u64,
        /// Why (empty when there is nothing to say).
        reason: &'a str,
    },
    /// Client to node: queue a file (its bytes follow as `PutData`; the first
    /// [`PUT_FIRST_WINDOW`] bytes may follow at once, before the node's `Go`).
    Put(Put<'a>),
    /// Client to node: bytes of an upload at `offset`.
    PutData {
        /// The client's number for the upload or query.
        request: u32,
        /// Where in the file they go.
        offset: u64,
        /// The bytes.
        data: &'a [u8],
    },
    /// Node to client: where an upload stands.
    PutAnswer(PutAnswer<'a>),
    /// Client to node: what is queued, sent and delivered.
    Query {
        /// The client's number for the upload or query.
        request: u32,
    },
    /// Node to client: part of the answer to a query (`last` on the final part).
    Report {
        /// The client's number for the upload or query.
        request: u32,
        /// The last part.
        last: bool,
        /// One per file and site.
        entries: Vec<ReportEntry<'a>>,
    },
    /// Node to client: the query will get no report (the node's files thread is not
    /// running, is behind, or stopped before it answered), and why.
    QueryRefused {
        /// The query's number.
        request: u32,
        /// Why, for the user.
        reason: &'a str,
    },
}

/// Bytes of an upload a client may send after its `Put` without waiting for the
/// node's `Go` (a small file goes whole with its `Put`, in one round trip). A node's
/// upload window is never smaller.
pub const PUT_FIRST_WINDOW: u64 = 64 * 1024;

fn header(out: &mut Vec<u8>, kind: u8) {
    out.extend_from_slice(&[MAGIC, VERSION, kind]);
}

fn put_name(out: &mut Vec<u8>, s: &str, what: &'static str, max: usize) -> Result<(), EncodeError> {
    if s.is_empty() || s.len() > max {
        return Err(EncodeError::TooLong {
            what,
            len: s.len(),
            max,
        });
    }
    put_str16(out, s, what)
}

/// A list's u16 count, refused past `max`.
fn put_count(
    out: &mut Vec<u8>,
    len: usize,
    what: &'static str,
    max: usize,
) -> Result<(), EncodeError> {
    if len > max {
        return Err(EncodeError::TooLong { what, len, max });
    }
    put_u16(out, len as u16);
    Ok(())
}

/// An offer's or upload's target sites.
fn put_targets(out: &mut Vec<u8>, targets: &[&str]) -> Result<(), EncodeError> {
    put_count(out, targets.len(), "targets", MAX_TARGETS)?;
    for t in targets {
        put_name(out, t, "target site", MAX_SITE)?;
    }
    Ok(())
}

fn put_reason(out: &mut Vec<u8>, s: &str) -> Result<(), EncodeError> {
    // A reason is ours to write: cut it at a character boundary rather than fail.
    let mut end = s.len().min(MAX_REASON);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    put_str16(out, &s[..end], "reason")
}

/// A chunk's or an upload's bytes, refused past [`MAX_CHUNK`] (both go in one
/// message of the native protocol).
fn check_chunk_bytes(data: &[u8], what: &'static str) -> Result<(), EncodeError> {
    if data.len() > MAX_CHUNK as usize {
        return Err(EncodeError::TooLong {
            what,
            len: data.len(),
            max: MAX_CHUNK as usize,
        });
    }
    Ok(())
}

/// Appends a chunk message for `data` (its CRC-32 computed here).
pub fn encode_chunk(
    out: &mut Vec<u8>,
    transfer: u64,
    index: u32,
    data: &[u8],
) -> Result<(), EncodeError> {
    check_chunk_bytes(data, "chunk")?;
    header(out, KIND_CHUNK);
    put_u64(out, transfer);
    put_u32(out, index);
    put_u32(out, crc32fast::hash(data));
    out.extend_from_slice(data);
    Ok(())
}

impl<'a> FilesMessage<'a> {
    /// Appends the message to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        match self {
            FilesMessage::Offer(o) => {
                header(out, KIND_OFFER);
                put_u64(out, o.transfer);
                put_name(out, o.sender, "sender", MAX_SITE)?;
                put_name(out, o.service, "service", MAX_SITE)?;
                put_name(out, o.name, "file name", crate::name::MAX_NAME)?;
                put_u64(out, o.size);
                put_u32(out, o.chunk_size);
                out.extend_from_slice(&o.sha256);
                put_u32(out, o.sent_through);
                put_u64(out, o.expires_ms);
                out.push(if o.open { FLAG_OPEN } else { 0 });
                put_targets(out, &o.targets)?;
            }
            FilesMessage::Chunk {
                transfer,
                index,
                data,
            } => encode_chunk(out, *transfer, *index, data)?,
            FilesMessage::Status(s) => {
                header(out, KIND_STATUS);
                put_u64(out, s.transfer);
                put_name(out, s.site, "site", MAX_SITE)?;
                out.push(s.state.to_u8());
                put_u32(out, s.have);
                put_count(out, s.missing.len(), "missing ranges", MAX_RANGES)?;
                for r in &s.missing {
                    put_u32(out, r.start);
                    put_u32(out, r.end);
                }
                put_reason(out, s.reason)?;
            }
            FilesMessage::Present { site, service } => {
                header(out, KIND_PRESENT);
                put_name(out, site, "site", MAX_SITE)?;
                put_name(out, service, "service", MAX_SITE)?;
            }
            FilesMessage::Cancel { transfer, reason } => {
                header(out, KIND_CANCEL);
                put_u64(out, *transfer);
                put_reason(out, reason)?;
            }
            FilesMessage::Put(p) => {
                header(out, KIND_PUT);
                put_u32(out, p.request);
                put_name(out, p.service, "service", MAX_SITE)?;
                put_name(out, p.name, "file name", crate::name::MAX_NAME)?;
                put_u64(out, p.size);
                out.extend_from_slice(&p.sha256);
                put_targets(out, &p.to)?;
            }
            FilesMessage::PutData {
                request,
                offset,
                data,
            } => {
                check_chunk_bytes(data, "upload data")?;
                header(out, KIND_PUT_DATA);
                put_u32(out, *request);
                put_u64(out, *offset);
                out.extend_from_slice(data);
            }
            FilesMessage::PutAnswer(a) => {
                header(out, KIND_PUT_ANSWER);
                put_u32(out, a.request);
                out.push(a.state.to_u8());
                put_u64(out, a.transfer);
                put_u64(out, a.received);
                put_u64(out, a.window);
                put_reason(out, a.reason)?;
            }
            FilesMessage::Query { request } => {
                header(out, KIND_QUERY);
                put_u32(out, *request);
            }
            FilesMessage::QueryRefused { request, reason } => {
                header(out, KIND_QUERY_REFUSED);
                put_u32(out, *request);
                put_reason(out, reason)?;
            }
            FilesMessage::Report {
                request,
                last,
                entries,
            } => {
                header(out, KIND_REPORT);
                put_u32(out, *request);
                out.push(u8::from(*last));
                put_count(out, entries.len(), "report entries", u16::MAX as usize)?;
                for e in entries {
                    put_u64(out, e.transfer);
                    put_name(out, e.service, "service", MAX_SITE)?;
                    put_name(out, e.name, "file name", crate::name::MAX_NAME)?;
                    put_u64(out, e.size);
                    out.extend_from_slice(&e.sha256);
                    put_str16(out, e.site, "site")?;
                    put_name(out, e.state, "state", 16)?;
                    put_u64(out, e.since_ms);
                    put_reason(out, e.reason)?;
                }
            }
        }
        Ok(())
    }

    /// Decodes one whole message (no bytes may be left over).
    pub fn decode(buf: &'a [u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(buf, "file-transfer message");
        let magic = r.u8()?;
        if magic != MAGIC {
            return Err(WireError::Magic(magic));
        }
        let version = r.u8()?;
        if version != VERSION {
            return Err(WireError::Version(version));
        }
        let kind = r.u8()?;
        let msg = match kind {
            KIND_OFFER => {
                let transfer = r.u64()?;
                let sender = name(&mut r, "sender", MAX_SITE)?;
                let service = name(&mut r, "service", MAX_SITE)?;
                let file = name(&mut r, "file name", crate::name::MAX_NAME)?;
                let size = r.u64()?;
                let chunk_size = r.u32()?;
                if !(MIN_CHUNK..=MAX_CHUNK).contains(&chunk_size) {
                    return Err(WireError::Invalid {
                        what: "chunk size",
                        value: chunk_size.into(),
                    });
                }
                let chunks = chunk_count(size, chunk_size).ok_or(WireError::Invalid {
                    what: "file size (too many chunks)",
                    value: size,
                })?;
                let sha256 = sha256(&mut r)?;
                let sent_through = r.u32()?;
                if sent_through > chunks {
                    return Err(WireError::Invalid {
                        what: "sent_through (past the last chunk)",
                        value: sent_through.into(),
                    });
                }
                let expires_ms = r.u64()?;
                let flags = r.u8()?;
                let targets = targets(&mut r)?;
                FilesMessage::Offer(Offer {
                    transfer,
                    sender,
                    service,
                    name: file,
                    size,
                    chunk_size,
                    sha256,
                    sent_through,
                    expires_ms,
                    open: flags & FLAG_OPEN != 0,
                    targets,
                })
            }
            KIND_CHUNK => {
                let transfer = r.u64()?;
                let index = r.u32()?;
                let crc = r.u32()?;
                let data = chunk_bytes(&r, "chunk")?;
                if crc32fast::hash(data) != crc {
                    return Err(WireError::BadCrc { transfer, index });
                }
                return Ok(FilesMessage::Chunk {
                    transfer,
                    index,
                    data,
                });
            }
            KIND_STATUS => {
                let transfer = r.u64()?;
                let site = name(&mut r, "site", MAX_SITE)?;
                let state = SiteState::from_u8(r.u8()?);
                let have = r.u32()?;
                let count = count(&mut r, "missing ranges", MAX_RANGES)?;
                let mut missing = Vec::with_capacity(count);
                for _ in 0..count {
                    let start = r.u32()?;
                    let end = r.u32()?;
                    if start >= end {
                        return Err(WireError::Invalid {
                            what: "missing range (empty)",
                            value: start.into(),
                        });
                    }
                    missing.push(start..end);
                }
                let reason = reason(&mut r)?;
                FilesMessage::Status(Status {
                    transfer,
                    site,
                    state,
                    have,
                    missing,
                    reason,
                })
            }
            KIND_PRESENT => FilesMessage::Present {
                site: name(&mut r, "site", MAX_SITE)?,
                service: name(&mut r, "service", MAX_SITE)?,
            },
            KIND_CANCEL => {
                let transfer = r.u64()?;
                let reason = reason(&mut r)?;
                FilesMessage::Cancel { transfer, reason }
            }
            KIND_PUT => {
                let request = r.u32()?;
                let service = name(&mut r, "service", MAX_SITE)?;
                let file = name(&mut r, "file name", crate::name::MAX_NAME)?;
                let size = r.u64()?;
                let sha256 = sha256(&mut r)?;
                let to = targets(&mut r)?;
                FilesMessage::Put(Put {
                    request,
                    service,
                    name: file,
                    size,
                    sha256,
                    to,
                })
            }
            KIND_PUT_DATA => {
                let request = r.u32()?;
                let offset = r.u64()?;
                let data = chunk_bytes(&r, "upload data")?;
                return Ok(FilesMessage::PutData {
                    request,
                    offset,
                    data,
                });
            }
            KIND_PUT_ANSWER => FilesMessage::PutAnswer(PutAnswer {
                request: r.u32()?,
                state: PutState::from_u8(r.u8()?),
                transfer: r.u64()?,
                received: r.u64()?,
                window: r.u64()?,
                reason: reason(&mut r)?,
            }),
            KIND_QUERY => FilesMessage::Query { request: r.u32()? },
            KIND_QUERY_REFUSED => FilesMessage::QueryRefused {
                request: r.u32()?,
                reason: reason(&mut r)?,
            },
            KIND_REPORT => {
                let request = r.u32()?;
                let last = match r.u8()? {
                    0 => false,
                    1 => true,
                    v => {
                        return Err(WireError::Invalid {
                            what: "report's last flag",
                            value: v.into(),
                        })
                    }
                };
                let count = r.u16()? as usize;
                // Each entry takes at least 71 bytes: a count past what is there is junk.
                if count > r.remaining() / 71 {
                    return Err(WireError::Length {
                        what: "report entries",
                        len: count,
                        max: r.remaining() / 71,
                    });
                }
                let mut entries = Vec::with_capacity(count);
                for _ in 0..count {
                    let transfer = r.u64()?;
                    let service = name(&mut r, "service", MAX_SITE)?;
                    let file = name(&mut r, "file name", crate::name::MAX_NAME)?;
                    let size = r.u64()?;
                    let sha256 = sha256(&mut r)?;
                    // Empty: no site yet.
                    let site = str_at_most(&mut r, "site", MAX_SITE)?;
                    let state = name(&mut r, "state", 16)?;
                    let since_ms = r.u64()?;
                    entries.push(ReportEntry {
                        transfer,
                        service,
                        name: file,
                        size,
                        sha256,
                        site,
                        state,
                        since_ms,
                        reason: reason(&mut r)?,
                    });
                }
                FilesMessage::Report {
                    request,
                    last,
                    entries,
                }
            }
            other => return Err(WireError::Kind(other)),
        };
        r.finish()?;
        Ok(msg)
    }
}

fn reason<'a>(r: &mut Reader<'a>) -> Result<&'a str, WireError> {
    str_at_most(r, "reason", MAX_REASON)
}

/// A string of at most `max` bytes, maybe empty: every bounded string is checked
/// alike (a name also refuses an empty one).
fn str_at_most<'a>(
    r: &mut Reader<'a>,
    what: &'static str,
    max: usize,
) -> Result<&'a str, WireError> {
    let s = r.str16(what)?;
    if s.len() > max {
        return Err(WireError::Length {
            what,
            len: s.len(),
            max,
        });
    }
    Ok(s)
}

/// A chunk's or an upload's bytes: the rest of the message, at most [`MAX_CHUNK`].
fn chunk_bytes<'a>(r: &Reader<'a>, what: &'static str) -> Result<&'a [u8], WireError> {
    let data = r.rest();
    if data.len() > MAX_CHUNK as usize {
        return Err(WireError::Length {
            what,
            len: data.len(),
            max: MAX_CHUNK as usize,
        });
    }
    Ok(data)
}

/// A list's u16 count, refused past `max`.
fn count(r: &mut Reader<'_>, what: &'static str, max: usize) -> Result<usize, WireError> {
    let count = r.u16()? as usize;
    if count > max {
        return Err(WireError::Length {
            what,
            len: count,
            max,
        });
    }
    Ok(count)
}

/// An offer's or upload's target sites.
fn targets<'a>(r: &mut Reader<'a>) -> Result<Vec<&'a str>, WireError> {
    let count = count(r, "targets", MAX_TARGETS)?;
    let mut targets = Vec::with_capacity(count);
    for _ in 0..count {
        targets.push(name(r, "target site", MAX_SITE)?);
    }
    Ok(targets)
}

fn sha256(r: &mut Reader<'_>) -> Result<[u8; 32], WireError> {
    Ok(r.bytes(32)?.try_into().expect("32 bytes"))
}

fn name<'a>(r: &mut Reader<'a>, what: &'static str, max: usize) -> Result<&'a str, WireError> {
    let s = str_at_most(r, what, max)?;
    if s.is_empty() {
        return Err(WireError::Length { what, len: 0, max });
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_reports_head_is_read_without_its_entries() {
        let mut b = Vec::new();
        for (request, last) in [(4, true), (70_000, false)] {
            b.clear();
            let report = FilesMessage::Report {
                request,
                last,
                entries: vec![],
            };
            report.encode(&mut b).unwrap();
            assert_eq!(report_head(&b), Some((request, last)));
            assert_eq!(report_head(&b[..7]), None, "cut short");
        }
        b.clear();
        FilesMessage::Query { request: 4 }.encode(&mut b).unwrap();
        assert_eq!(report_head(&b), None, "not a report");
    }

    fn round_trip(m: &FilesMessage) {
        let mut buf = Vec::new();
        m.encode(&mut buf).expect("encode");
        assert_eq!(&FilesMessage::decode(&buf).expect("decode"), m);
        // Every strict prefix is refused, never misread; but upload data runs to the
        // end of its message unchecked (the node checks offsets, size and hash).
        if matches!(m, FilesMessage::PutData { .. }) {
            return;
        }
        for cut in 0..buf.len() {
            if let Ok(short) = FilesMessage::decode(&buf[..cut]) {
                panic!("prefix of {cut} bytes decoded as {short:?}");
            }
        }
    }

    fn offer() -> Offer<'static> {
        Offer {
            transfer: 0x0102_0304_0506_0708,
            sender: "ldn-1",
            service: "FILES",
            name: "eod/2026-11-25.csv",
            size: 100_000,
            chunk_size: 32_768,
            sha256: [7; 32],
            sent_through: 2,
            expires_ms: 1_790_000_000_000,
            open: true,
            targets: vec!["nyc-1", "tok-1"],
        }
    }

    #[test]
    fn every_kind_round_trips() {
        round_trip(&FilesMessage::Offer(offer()));
        round_trip(&FilesMessage::Chunk {
            transfer: 9,
            index: 3,
            data: b"some bytes of a file",
        });
        round_trip(&FilesMessage::Status(Status {
            transfer: 9,
            site: "nyc-1",
            state: SiteState::Receiving,
            have: 5,
            missing: vec![0..2, 7..9],
            reason: "",
        }));
        round_trip(&FilesMessage::Status(Status {
            transfer: 9,
            site: "nyc-1",
            state: SiteState::Unknown(42),
            have: 0,
            missing: vec![],
            reason: "a newer state",
        }));
        round_trip(&FilesMessage::Present {
            site: "nyc-1",
            service: "FILES",
        });
        round_trip(&FilesMessage::Cancel {
            transfer: 9,
            reason: "expired",
        });
        round_trip(&FilesMessage::Put(Put {
            request: 3,
            service: "FILES",
            name: "eod.csv",
            size: 1234,
            sha256: [9; 32],
            to: vec!["nyc-1"],
        }));
        round_trip(&FilesMessage::PutData {
            request: 3,
            offset: 64_000,
            data: b"bytes",
        });
        round_trip(&FilesMessage::PutAnswer(PutAnswer {
            request: 3,
            state: PutState::Refused,
            transfer: 0,
            received: 0,
            window: 0,
            reason: "the send queue is full",
        }));
        round_trip(&FilesMessage::Query { request: 4 });
        round_trip(&FilesMessage::QueryRefused {
            request: 4,
            reason: "the node's files thread is behind",
        });
        round_trip(&FilesMessage::Report {
            request: 4,
            last: true,
            entries: vec![
                ReportEntry {
                    transfer: 5,
                    service: "FILES",
                    name: "eod.csv",
                    size: 1234,
                    sha256: [1; 32],
                    site: "nyc-1",
                    state: "done",
                    since_ms: 1_790_000_000_000,
                    reason: "",
                },
                ReportEntry {
                    transfer: 6,
                    service: "FILES",
                    name: "all.csv",
                    size: 0,
                    sha256: [2; 32],
                    site: "",
                    state: "queued",
                    since_ms: 1,
                    reason: "",
                },
            ],
        });
    }

    #[test]
    fn the_transfer_of_a_message_is_read_without_decoding_it() {
        let mut buf = Vec::new();
        encode_chunk(&mut buf, 0xABCD, 3, b"data").unwrap();
        assert_eq!(transfer_of(&buf), Some(0xABCD));
        buf.clear();
        FilesMessage::Offer(offer()).encode(&mut buf).unwrap();
        assert_eq!(transfer_of(&buf), Some(offer().transfer));
        buf.clear();
        FilesMessage::Present {
            site: "a",
            service: "F",
        }
        .encode(&mut buf)
        .unwrap();
        assert_eq!(transfer_of(&buf), None);
        assert_eq!(transfer_of(b"F\x01\x02abc"), None);
    }

    #[test]
    fn a_changed_byte_in_a_chunk_fails_its_crc() {
        let mut buf = Vec::new();
        encode_chunk(&mut buf, 5, 1, b"0123456789").unwrap();
        let last = buf.len() - 1;
        buf[last] ^= 1;
        assert_eq!(
            FilesMessage::decode(&buf),
            Err(WireError::BadCrc {
                transfer: 5,
                index: 1
            })
        );
    }

    #[test]
    fn impossible_offers_are_refused() {
        let encode = |o: Offer| {
            let mut buf = Vec::new();
            FilesMessage::Offer(o).encode(&mut buf).unwrap();
            FilesMessage::decode(&buf).map(|_| ())
        };
        let mut o = offer();
        o.chunk_size = 0;
        assert!(matches!(
            encode(o),
            Err(WireError::Invalid {
                what: "chunk size",
                ..
            })
        ));
        let mut o = offer();
        o.sent_through = 5; // 100,000 bytes are 4 chunks of 32 KiB
        assert!(matches!(encode(o), Err(WireError::Invalid { .. })));
        let mut o = offer();
        o.chunk_size = MIN_CHUNK - 1;
        assert!(matches!(
            encode(o),
            Err(WireError::Invalid {
                what: "chunk size",
                ..
            })
        ));
        let mut o = offer();
        o.chunk_size = MIN_CHUNK;
        o.size = u64::from(u32::MAX) * u64::from(MIN_CHUNK) + 1;
        o.sent_through = 0;
        assert!(matches!(encode(o), Err(WireError::Invalid { .. })));
    }

    #[test]
    fn junk_is_refused_by_kind() {
        assert_eq!(
            FilesMessage::decode(b"T\x01\x01"),
            Err(WireError::Magic(b'T'))
        );
        assert_eq!(
            FilesMessage::decode(b"F\x02\x01"),
            Err(WireError::Version(2))
        );
        assert_eq!(
            FilesMessage::decode(b"F\x01\x63"),
            Err(WireError::Kind(0x63))
        );
    }

    #[test]
    fn long_reasons_are_cut_at_a_character_boundary() {
        let reason = "é".repeat(200); // 400 bytes
        let mut buf = Vec::new();
        FilesMessage::Cancel {
            transfer: 1,
            reason: &reason,
        }
        .encode(&mut buf)
        .unwrap();
        let FilesMessage::Cancel { reason: got, .. } = FilesMessage::decode(&buf).unwrap() else {
            panic!("not a cancel");
        };
        assert_eq!(got.len(), MAX_REASON);
        assert!(reason.starts_with(got));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = FilesMessage::decode(&bytes);
        }

        #[test]
        fn chunks_round_trip(transfer: u64, index: u32, data in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let mut buf = Vec::new();
            encode_chunk(&mut buf, transfer, index, &data).unwrap();
            prop_assert_eq!(buf.len(), CHUNK_HEADER_LEN + data.len());
            prop_assert_eq!(FilesMessage::decode(&buf).unwrap(), FilesMessage::Chunk { transfer, index, data: &data });
        }
    }
}
