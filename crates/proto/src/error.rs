use thiserror::Error;

/// Why a frame, message or field list could not be decoded.
///
/// Every variant names what was wrong so a node can tell the offending peer in a
/// status text before it disconnects it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes end before what is being read.
    #[error("truncated {what}: needed {need} more bytes, {have} left")]
    Truncated {
        /// What was being read or written.
        what: &'static str,
        /// Bytes it needs.
        need: usize,
        /// Bytes there are.
        have: usize,
    },
    /// A frame larger than agreed.
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    FrameTooLarge {
        /// Its length.
        len: usize,
        /// The most allowed.
        max: usize,
    },
    /// A frame with no message.
    #[error("empty frame")]
    EmptyFrame,
    /// A message type this version does not know.
    #[error("unknown message type {0}")]
    UnknownMessageType(u8),
    /// A field type this version does not know.
    #[error("unknown field type tag {tag} for field {fid}")]
    UnknownFieldType {
        /// The field id.
        fid: i16,
        /// The type tag on the wire.
        tag: u8,
    },
    /// Text that is not UTF-8.
    #[error("{0} is not valid UTF-8")]
    InvalidUtf8(&'static str),
    /// An ASCII field with other bytes (its id).
    #[error("field {0}: ASCII string contains a non-ASCII byte")]
    NonAscii(i16),
    /// A date that does not exist.
    #[error("field {fid}: invalid date {year:04}-{month:02}-{day:02}")]
    InvalidDate {
        /// The field id.
        fid: i16,
        /// The year.
        year: u16,
        /// The month (1..=12).
        month: u8,
        /// The day of the month (1..=31).
        day: u8,
    },
    /// A time past the end of the day.
    #[error("field {fid}: time of {nanos} ns is past the end of the day")]
    InvalidTime {
        /// The field id.
        fid: i16,
        /// Nanoseconds since midnight.
        nanos: u64,
    },
    /// A varint longer than 64 bits.
    #[error("varint longer than 10 bytes or overflowing 64 bits")]
    VarintOverflow,
    /// Bytes left after what should be the end.
    #[error("{what}: {trailing} unexpected trailing bytes")]
    TrailingBytes {
        /// What was being read or written.
        what: &'static str,
        /// Bytes left over.
        trailing: usize,
    },
    /// A value out of range.
    #[error("invalid {what}: {value}")]
    InvalidValue {
        /// What was being read or written.
        what: &'static str,
        /// The value.
        value: u64,
    },
}

/// Why a message or field could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// A field the dictionary says is another type.
    #[error("field {fid}: {reason}")]
    InvalidField {
        /// The field id.
        fid: i16,
        /// What is wrong with it.
        reason: String,
    },
    /// Too long to encode.
    #[error("{what} of {len} bytes exceeds the limit of {max}")]
    TooLong {
        /// What was being read or written.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The most allowed.
        max: usize,
    },
}
