//! Walking a frame's messages: [`MessageIter`] decodes (and validates) them one by one,
//! [`next_update_stream`] finds the next update's stream without decoding, and
//! [`write_readdressed`] copies an encoded message under another stream id.

use super::decode::Validation;
use super::{Message, MessageType, MESSAGE_HEADER_LEN};
use crate::wire::Reader;
use crate::DecodeError;

/// Iterates the messages packed in one frame payload.
pub struct MessageIter<'a> {
    r: Reader<'a>,
    failed: bool,
    validation: Validation,
}

/// Moves `rest` over one message without decoding it: the stream id of that message if
/// it is an update, else `None` (also at the end, or at a truncated message, which
/// empties `rest`). For walking a frame a few messages ahead of its decoding, to
/// prefetch what those updates will touch.
#[inline]
pub fn next_update_stream(rest: &mut &[u8]) -> Option<u32> {
    let [ty, a, b, tail @ ..] = *rest else {
        *rest = &[];
        return None;
    };
    let len = u16::from_be_bytes([*a, *b]) as usize;
    let Some((body, tail)) = tail.split_at_checked(len) else {
        *rest = &[];
        return None;
    };
    *rest = tail;
    match body {
        [s0, s1, s2, s3, ..] if *ty == MessageType::Update as u8 => {
            Some(u32::from_be_bytes([*s0, *s1, *s2, *s3]))
        }
        _ => None,
    }
}

/// One message as it appeared on the wire: its decoded form and its encoded bytes
/// (header included), so it can be forwarded without re-encoding.
pub struct RawMessage<'a> {
    /// The message.
    pub message: Message<'a>,
    /// The whole message, header included.
    pub encoded: &'a [u8],
}

/// Appends `encoded` (a whole stream-scoped message as found by [`MessageIter`]) to
/// `out`, with its stream id replaced by `stream_id`. This is how one encoded update is
/// shared by every subscriber: only the four id bytes differ.
pub fn write_readdressed(out: &mut Vec<u8>, encoded: &[u8], stream_id: u32) {
    debug_assert!(encoded.len() >= MESSAGE_HEADER_LEN + 4);
    out.extend_from_slice(&encoded[..MESSAGE_HEADER_LEN]);
    out.extend_from_slice(&stream_id.to_be_bytes());
    out.extend_from_slice(&encoded[MESSAGE_HEADER_LEN + 4..]);
}

impl<'a> MessageIter<'a> {
    /// The messages of a frame's payload.
    pub fn new(payload: &'a [u8]) -> Self {
        MessageIter {
            r: Reader::new(payload, "frame payload"),
            failed: false,
            validation: Validation::Full,
        }
    }

    /// The messages of a payload whose every message was decoded successfully by
    /// [`MessageIter::new`] before (e.g. forwarded by an in-process peer): their field
    /// lists are not walked again. Anything else is still checked.
    pub fn already_checked(payload: &'a [u8]) -> Self {
        MessageIter {
            validation: Validation::FieldListsChecked,
            ..MessageIter::new(payload)
        }
    }
}

impl<'a> Iterator for MessageIter<'a> {
    type Item = Result<RawMessage<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.r.is_empty() {
            return None;
        }
        let start = self.r.rest();
        let res = (|| {
            let ty = self.r.u8()?;
            let len = self.r.u16()? as usize;
            let body = self.r.bytes(len)?;
            let message = Message::decode_body_as(ty, body, self.validation)?;
            Ok(RawMessage {
                message,
                encoded: &start[..MESSAGE_HEADER_LEN + len],
            })
        })();
        if res.is_err() {
            self.failed = true;
        }
        Some(res)
    }
}
