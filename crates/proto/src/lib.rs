//! Tickwire's wire format: framing, messages, field lists, the field dictionary and the
//! encoded field image used by caches.
//!
//! This crate owns the bytes on the wire and nothing else: pure functions and plain data,
//! no sockets, no clocks, no threads. Every decoder validates its input completely and
//! returns a [`DecodeError`] naming what was wrong; none panics on any input (the fuzz
//! targets in `fuzz/` hold it to that). docs/PROTOCOL.md is the specification.

#![warn(missing_docs)]

pub mod dictionary;
mod error;
pub mod field;
pub mod frame;
pub mod image;
pub mod message;
pub mod reference;
pub mod text;
pub mod wire;
mod wire_enum;

pub use dictionary::{fid, Dictionary, FieldDef};
pub use error::{DecodeError, EncodeError};
pub use field::{
    encode_field_list, Date, FieldList, FieldListWriter, FieldType, Real, Time, Value,
};
pub use frame::{FrameReader, FrameWriter, DEFAULT_MAX_FRAME, FRAME_HEADER_LEN};
pub use image::FieldImage;
pub use message::{
    code, max_image_bytes, parse_node_login, Ack, DataState, Directory, Login, Message,
    MessageIter, MessageType, NakCode, Post, RawMessage, Refresh, Replay, ReplayFrom, Request,
    Role, ServiceEntry, ServiceState, SlowConsumerPolicy, State, Status, StreamState, Update,
    UpdateType, View, Welcome, NODE_LOGIN_PREFIX, PROTOCOL_VERSION_MAX, PROTOCOL_VERSION_MIN,
};
