//! The backbone's own messages, carried in Aeron messages (docs/PROTOCOL.md, section 10).
//!
//! Every message starts with `0x54` (`T`), the version (1) and its kind. Sources send
//! on the data stream: heartbeats, directory parts, the mapping of their stream ids
//! to items, and the items' data (Tickwire messages, exactly as a node writes them to
//! a subscriber). Edges send on the request stream: their heartbeats, subscribes,
//! unsubscribes and directory requests. Pure functions, no I/O; every decoder is
//! bounds-checked and fuzzed, since anything on a multicast group can send junk.

use tickwire_proto::wire::{put_str16, put_u16, put_u32, put_u64, Reader};
use tickwire_proto::{DecodeError, EncodeError, ServiceState};

/// A backbone message's first byte.
pub const MAGIC: u8 = 0x54;
/// The version this node writes and reads.
pub const VERSION: u8 = 1;
/// Set in the version byte of a sealed message (a MAC trailer follows it: `auth`).
pub const SEALED: u8 = 0x80;
/// Magic, version and kind.
pub const HEADER_LEN: usize = 3;
/// Bytes before a data message's Tickwire messages: header and source id.
pub const DATA_HEADER_LEN: usize = HEADER_LEN + 8;
/// Longest service or item name (as in the node).
pub const MAX_NAME: usize = 256;

const KIND_HEARTBEAT: u8 = 1;
const KIND_DIRECTORY: u8 = 2;
const KIND_OPENED: u8 = 3;
const KIND_DATA: u8 = 4;
const KIND_EDGE_JOINED: u8 = 5;
const KIND_FILES: u8 = 6;
const KIND_EDGE_HEARTBEAT: u8 = 10;
const KIND_SUBSCRIBE: u8 = 11;
const KIND_UNSUBSCRIBE: u8 = 12;
const KIND_DIRECTORY_REQUEST: u8 = 13;
const KIND_EDGE_FILES: u8 = 14;

/// One service in a source's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceInfo<'a> {
    /// Its name.
    pub name: &'a str,
    /// Up or down.
    pub state: ServiceState,
    /// Items are asked for on demand.
    pub interactive: bool,
}

/// A backbone message, borrowing from the received bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackboneMessage<'a> {
    /// A source is alive. `directory_version` changes whenever its directory does.
    Heartbeat {
        /// The source's id.
        source: u64,
        /// Its node's name.
        name: &'a str,
        /// Changes whenever its directory does.
        directory_version: u32,
    },
    /// Part `part` (from 0) of `parts` of the source's directory at `version`.
    Directory {
        /// The source's id.
        source: u64,
        /// The directory's version.
        version: u32,
        /// This part (from 0).
        part: u16,
        /// Parts in all.
        parts: u16,
        /// The services in this part.
        services: Vec<ServiceInfo<'a>>,
    },
    /// From now on the source's stream `stream` carries `service`/`item`.
    Opened {
        /// The source's id.
        source: u64,
        /// The source's stream.
        stream: u32,
        /// The item's service.
        service: &'a str,
        /// The item's name.
        item: &'a str,
    },
    /// Tickwire messages (refreshes, updates, statuses) on the source's streams.
    Data {
        /// The source's id.
        source: u64,
        /// The messages, each whole.
        messages: &'a [u8],
    },
    /// The source has just heard `edge` for the first time, or again after forgetting
    /// it (silent for three liveness times: its streams were released). An edge that
    /// already has items from the source asks for them again.
    EdgeJoined {
        /// The source's id.
        source: u64,
        /// The edge's id.
        edge: u64,
    },
    /// An edge is alive (sources forget the interest of silent edges).
    EdgeHeartbeat {
        /// The edge's id.
        edge: u64,
        /// Its node's name.
        name: &'a str,
    },
    /// An edge wants `service`/`item` from `source` (again: a fresh image).
    Subscribe {
        /// The edge's id.
        edge: u64,
        /// The source's id.
        source: u64,
        /// The item's service.
        service: &'a str,
        /// The item's name.
        item: &'a str,
    },
    /// An edge no longer wants the source's stream.
    Unsubscribe {
        /// The edge's id.
        edge: u64,
        /// The source's id.
        source: u64,
        /// The source's stream.
        stream: u32,
    },
    /// An edge wants the source's whole directory.
    DirectoryRequest {
        /// The edge's id.
        edge: u64,
        /// The source's id.
        source: u64,
    },
    /// A file-transfer message from a source's files (offers, chunks, cancels:
    /// `tickwire-files`'s wire format, docs/FILES.md), to every edge.
    Files {
        /// The source's id.
        source: u64,
        /// The file-transfer message.
        body: &'a [u8],
    },
    /// A file-transfer message from an edge's files (statuses, presences), to every
    /// source.
    EdgeFiles {
        /// The edge's id.
        edge: u64,
        /// The file-transfer message.
        body: &'a [u8],
    },
}

/// Starts a message: magic, version, kind and the id of its sender (the source or
/// the edge), which every kind carries first.
fn header(out: &mut Vec<u8>, kind: u8, sender: u64) {
    out.extend_from_slice(&[MAGIC, VERSION, kind]);
    put_u64(out, sender);
}

fn read_name<'a>(r: &mut Reader<'a>, what: &'static str) -> Result<&'a str, DecodeError> {
    let s = r.str16(what)?;
    if s.is_empty() || s.len() > MAX_NAME {
        return Err(DecodeError::InvalidValue {
            what,
            value: s.len() as u64,
        });
    }
    Ok(s)
}

/// The rest of a message whose last field runs to its end (a data message's Tickwire
/// messages, a file-transfer body), leaving nothing after it.
#[inline]
fn read_to_end<'a>(r: &mut Reader<'a>) -> &'a [u8] {
    let rest = r.rest();
    *r = Reader::new(&[], "backbone message");
    rest
}

fn service_state(v: u8) -> Result<ServiceState, DecodeError> {
    Ok(match v {
        0 => ServiceState::Down,
        1 => ServiceState::Up,
        2 => ServiceState::Removed,
        _ => {
            return Err(DecodeError::InvalidValue {
                what: "service state",
                value: v as u64,
            })
        }
    })
}

impl<'a> BackboneMessage<'a> {
    /// A file-transfer message's body, without decoding anything else: `(true, body)`
    /// for a source's (`Files`), `(false, body)` for an edge's (`EdgeFiles`).
    pub fn decode_files(buf: &'a [u8]) -> Option<(bool, &'a [u8])> {
        match buf {
            [MAGIC, v, kind @ (KIND_FILES | KIND_EDGE_FILES), ..] if v & !SEALED == VERSION => {
                // After the header, the sender's id.
                Some((*kind == KIND_FILES, buf.get(HEADER_LEN + 8..)?))
            }
            _ => None,
        }
    }

    /// Decodes one whole Aeron message.
    pub fn decode(buf: &'a [u8]) -> Result<BackboneMessage<'a>, DecodeError> {
        let mut r = Reader::new(buf, "backbone message");
        let magic = r.u8()?;
        if magic != MAGIC {
            return Err(DecodeError::InvalidValue {
                what: "backbone magic",
                value: magic as u64,
            });
        }
        let version = r.u8()?;
        if version & !SEALED != VERSION {
            return Err(DecodeError::InvalidValue {
                what: "backbone version",
                value: version as u64,
            });
        }
        let kind = r.u8()?;
        let m = match kind {
            KIND_HEARTBEAT => BackboneMessage::Heartbeat {
                source: r.u64()?,
                name: read_name(&mut r, "source name")?,
                directory_version: r.u32()?,
            },
            KIND_DIRECTORY => {
                let source = r.u64()?;
                let version = r.u32()?;
                let part = r.u16()?;
                let parts = r.u16()?;
                if part >= parts {
                    return Err(DecodeError::InvalidValue {
                        what: "directory part",
                        value: part as u64,
                    });
                }
                let n = r.u16()? as usize;
                // Each entry takes at least 5 bytes: a count past the message is junk,
                // refused before anything is allocated for it.
                if n * 5 > r.remaining() {
                    return Err(DecodeError::Truncated {
                        what: "directory entries",
                        need: n * 5,
                        have: r.remaining(),
                    });
                }
                let mut services = Vec::with_capacity(n);
                for _ in 0..n {
                    let name = read_name(&mut r, "service name")?;
                    let state = service_state(r.u8()?)?;
                    let interactive = match r.u8()? {
                        0 => false,
                        1 => true,
                        v => {
                            return Err(DecodeError::InvalidValue {
                                what: "interactive flag",
                                value: v as u64,
                            })
                        }
                    };
                    services.push(ServiceInfo {
                        name,
                        state,
                        interactive,
                    });
                }
                BackboneMessage::Directory {
                    source,
                    version,
                    part,
                    parts,
                    services,
                }
            }
            KIND_OPENED => BackboneMessage::Opened {
                source: r.u64()?,
                stream: r.u32()?,
                service: read_name(&mut r, "service name")?,
                item: read_name(&mut r, "item name")?,
            },
            KIND_DATA => BackboneMessage::Data {
                source: r.u64()?,
                messages: read_to_end(&mut r),
            },
            KIND_EDGE_HEARTBEAT => BackboneMessage::EdgeHeartbeat {
                edge: r.u64()?,
                name: read_name(&mut r, "edge name")?,
            },
            KIND_SUBSCRIBE => BackboneMessage::Subscribe {
                edge: r.u64()?,
                source: r.u64()?,
                service: read_name(&mut r, "service name")?,
                item: read_name(&mut r, "item name")?,
            },
            KIND_UNSUBSCRIBE => BackboneMessage::Unsubscribe {
                edge: r.u64()?,
                source: r.u64()?,
                stream: r.u32()?,
            },
            KIND_DIRECTORY_REQUEST => BackboneMessage::DirectoryRequest {
                edge: r.u64()?,
                source: r.u64()?,
            },
            KIND_EDGE_JOINED => BackboneMessage::EdgeJoined {
                source: r.u64()?,
                edge: r.u64()?,
            },
            KIND_FILES => BackboneMessage::Files {
                source: r.u64()?,
                body: read_to_end(&mut r),
            },
            KIND_EDGE_FILES => BackboneMessage::EdgeFiles {
                edge: r.u64()?,
                body: read_to_end(&mut r),
            },
            other => {
                return Err(DecodeError::InvalidValue {
                    what: "backbone message kind",
                    value: other as u64,
                })
            }
        };
        if !r.is_empty() {
            return Err(DecodeError::TrailingBytes {
                what: "backbone message",
                trailing: r.remaining(),
            });
        }
        Ok(m)
    }

    /// Appends the encoded message to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        match self {
            BackboneMessage::Heartbeat {
                source,
                name,
                directory_version,
            } => {
                header(out, KIND_HEARTBEAT, *source);
                put_name(out, name, "source name")?;
                put_u32(out, *directory_version);
            }
            BackboneMessage::Directory {
                source,
                version,
                part,
                parts,
                services,
            } => {
                header(out, KIND_DIRECTORY, *source);
                put_u32(out, *version);
                put_u16(out, *part);
                put_u16(out, *parts);
                let n = u16::try_from(services.len()).map_err(|_| EncodeError::TooLong {
                    what: "directory part",
                    len: services.len(),
                    max: u16::MAX as usize,
                })?;
                put_u16(out, n);
                for s in services {
                    put_name(out, s.name, "service name")?;
                    out.push(s.state as u8);
                    out.push(s.interactive as u8);
                }
            }
            BackboneMessage::Opened {
                source,
                stream,
                service,
                item,
            } => {
                header(out, KIND_OPENED, *source);
                put_u32(out, *stream);
                put_item(out, service, item)?;
            }
            BackboneMessage::Data { source, messages } => {
                data_header(out, *source);
                out.extend_from_slice(messages);
            }
            BackboneMessage::EdgeHeartbeat { edge, name } => {
                header(out, KIND_EDGE_HEARTBEAT, *edge);
                put_name(out, name, "edge name")?;
            }
            BackboneMessage::Subscribe {
                edge,
                source,
                service,
                item,
            } => {
                header(out, KIND_SUBSCRIBE, *edge);
                put_u64(out, *source);
                put_item(out, service, item)?;
            }
            BackboneMessage::Unsubscribe {
                edge,
                source,
                stream,
            } => {
                header(out, KIND_UNSUBSCRIBE, *edge);
                put_u64(out, *source);
                put_u32(out, *stream);
            }
            BackboneMessage::DirectoryRequest { edge, source } => {
                header(out, KIND_DIRECTORY_REQUEST, *edge);
                put_u64(out, *source);
            }
            BackboneMessage::EdgeJoined { source, edge } => {
                header(out, KIND_EDGE_JOINED, *source);
                put_u64(out, *edge);
            }
            BackboneMessage::Files { source, body } => {
                header(out, KIND_FILES, *source);
                out.extend_from_slice(body);
            }
            BackboneMessage::EdgeFiles { edge, body } => {
                header(out, KIND_EDGE_FILES, *edge);
                out.extend_from_slice(body);
            }
        }
        Ok(())
    }
}

/// Appends a data message's header to `out` (callers start from an empty buffer); Tickwire
/// messages are appended after.
pub fn data_header(out: &mut Vec<u8>, source: u64) {
    header(out, KIND_DATA, source);
}

fn put_name(out: &mut Vec<u8>, s: &str, what: &'static str) -> Result<(), EncodeError> {
    if s.is_empty() || s.len() > MAX_NAME {
        return Err(EncodeError::TooLong {
            what,
            len: s.len(),
            max: MAX_NAME,
        });
    }
    put_str16(out, s, what)
}

/// An item's service and name, as `Opened` and `Subscribe` carry them.
fn put_item(out: &mut Vec<u8>, service: &str, item: &str) -> Result<(), EncodeError> {
    put_name(out, service, "service name")?;
    put_name(out, item, "item name")
}

/// Walks the Tickwire messages of a data message, reading only their headers: the
/// type, the body and (for stream-scoped types) the stream id. The body is decoded
/// only where the edge needs more (a refresh's flags).
pub struct DataMessages<'a> {
    rest: &'a [u8],
}

/// One Tickwire message inside a data message.
pub struct DataMessage<'a> {
    /// Its type (the node's protocol).
    pub message_type: u8,
    /// The source's stream it is on.
    pub stream_id: u32,
    /// The whole message, header included (for forwarding with a new stream id).
    pub encoded: &'a [u8],
}

impl<'a> DataMessages<'a> {
    /// The messages of a data message's body.
    pub fn new(messages: &'a [u8]) -> Self {
        DataMessages { rest: messages }
    }
}

impl<'a> Iterator for DataMessages<'a> {
    type Item = Result<DataMessage<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        use tickwire_proto::message::MESSAGE_HEADER_LEN;
        if self.rest.is_empty() {
            return None;
        }
        let b = self.rest;
        let fail = |need: usize| {
            Some(Err(DecodeError::Truncated {
                what: "backbone data",
                need,
                have: b.len(),
            }))
        };
        if b.len() < MESSAGE_HEADER_LEN + 4 {
            self.rest = &[];
            return fail(MESSAGE_HEADER_LEN + 4);
        }
        let len = u16::from_be_bytes([b[1], b[2]]) as usize;
        let total = MESSAGE_HEADER_LEN + len;
        if len < 4 || b.len() < total {
            self.rest = &[];
            return fail(total.max(MESSAGE_HEADER_LEN + 4));
        }
        let (encoded, rest) = b.split_at(total);
        self.rest = rest;
        Some(Ok(DataMessage {
            message_type: b[0],
            stream_id: u32::from_be_bytes([b[3], b[4], b[5], b[6]]),
            encoded,
        }))
    }
}
