use thiserror::Error;

/// Why a frame, message or field list could not be decoded.
///
/// Every variant names what was wrong so a node can tell the offending peer in a
/// status text before it disconnects it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("truncated {what}: needed {need} more bytes, {have} left")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    FrameTooLarge { len: usize, max: usize },
    #[error("empty frame")]
    EmptyFrame,
    #[error("unknown message type {0}")]
    UnknownMessageType(u8),
    #[error("unknown field type tag {tag} for field {fid}")]
    UnknownFieldType { fid: i16, tag: u8 },
    #[error("{0} is not valid UTF-8")]
    InvalidUtf8(&'static str),
    #[error("field {0}: ASCII string contains a non-ASCII byte")]
    NonAscii(i16),
    #[error("field {fid}: invalid date {year:04}-{month:02}-{day:02}")]
    InvalidDate {
        fid: i16,
        year: u16,
        month: u8,
        day: u8,
    },
    #[error("field {fid}: time of {nanos} ns is past the end of the day")]
    InvalidTime { fid: i16, nanos: u64 },
    #[error("varint longer than 10 bytes or overflowing 64 bits")]
    VarintOverflow,
    #[error("{what}: {trailing} unexpected trailing bytes")]
    TrailingBytes { what: &'static str, trailing: usize },
    #[error("invalid {what}: {value}")]
    InvalidValue { what: &'static str, value: u64 },
}

/// Why a message or field could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum EncodeError {
    #[error("field {fid}: {reason}")]
    InvalidField { fid: i16, reason: String },
    #[error("{what} of {len} bytes exceeds the limit of {max}")]
    TooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
}
