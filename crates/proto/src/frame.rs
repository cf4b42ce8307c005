//! Framing: `u32 payload length` (big-endian) then the payload, which packs one or more
//! whole messages.
//!
//! [`FrameWriter`] appends messages to an output byte buffer, opening a frame when needed
//! and starting a new one before the current would exceed the maximum frame size.
//! [`FrameReader`] accumulates bytes read from a socket and yields complete frames.

use crate::message::Message;
use crate::{DecodeError, EncodeError};
use std::collections::VecDeque;

/// A frame's length prefix.
pub const FRAME_HEADER_LEN: usize = 4;
/// Default largest frame payload, negotiated in the welcome.
pub const DEFAULT_MAX_FRAME: usize = 256 * 1024;
/// Smallest maximum a node may announce: room for the largest single message.
pub const MIN_MAX_FRAME: usize =
    crate::message::MAX_MESSAGE_BODY + crate::message::MESSAGE_HEADER_LEN;

/// Largest maximum a node may announce (`limits.max_frame_bytes`): 16 MiB.
pub const MAX_MAX_FRAME: usize = 16 * 1024 * 1024;

/// Bytes waiting to be written to a peer, with the frame being built at the end.
///
/// Written bytes are consumed from the front; the buffer keeps its capacity, so a
/// connection in steady state does not allocate.
///
/// It also counts messages, so a node can bound a connection's queue in messages as
/// well as bytes: every message appended is counted, and a sealed frame's messages
/// count as sent once its last byte is consumed.
#[derive(Debug)]
pub struct FrameWriter {
    buf: Vec<u8>,
    /// Bytes at the front already handed to the socket.
    consumed: usize,
    /// Start of the open frame's header, if a frame is open.
    open_frame: Option<usize>,
    max_frame: usize,
    /// Position of `buf[0]` in the byte stream since the writer was made.
    base: u64,
    /// Messages appended since the writer was made.
    messages_in: u64,
    /// Messages whose frame has been written completely.
    messages_out: u64,
    /// Stream position where the last completely written frame ended.
    written_end: u64,
    /// Sealed frames not yet completely written: (stream position of the end,
    /// `messages_in` when it was sealed).
    sealed: VecDeque<(u64, u64)>,
}

impl FrameWriter {
    /// Frames at most `max_frame` bytes.
    pub fn new(max_frame: usize) -> Self {
        FrameWriter {
            buf: Vec::new(),
            consumed: 0,
            open_frame: None,
            max_frame: max_frame.max(MIN_MAX_FRAME),
            base: 0,
            messages_in: 0,
            messages_out: 0,
            written_end: 0,
            sealed: VecDeque::new(),
        }
    }

    /// Messages not yet completely written to the socket.
    pub fn pending_messages(&self) -> u64 {
        self.messages_in - self.messages_out
    }

    /// Takes back the count of the last [`FrameWriter::message_buf`] when the caller
    /// wrote nothing after all.
    pub fn forget_message(&mut self) {
        self.messages_in = self.messages_in.saturating_sub(1).max(self.messages_out);
    }

    /// Drops every byte not yet handed to the socket, except the rest of a frame the
    /// socket already took part of (the stream stays well framed). For a connection
    /// about to be closed: its last message can then go out at once.
    pub fn discard_unsent(&mut self) {
        self.seal();
        let at = self.base + self.consumed as u64;
        match self.sealed.front().copied() {
            Some((end, messages)) if at > self.written_end => {
                self.buf.truncate((end - self.base) as usize);
                self.sealed.clear();
                self.sealed.push_back((end, messages));
                self.messages_in = messages;
            }
            _ => {
                self.base += self.consumed as u64;
                self.written_end = self.base;
                self.buf.clear();
                self.consumed = 0;
                self.sealed.clear();
                self.messages_in = self.messages_out;
            }
        }
    }

    /// Frames at most `max_frame` bytes from now on.
    pub fn set_max_frame(&mut self, max_frame: usize) {
        self.seal();
        self.max_frame = max_frame.max(MIN_MAX_FRAME);
    }

    /// Bytes not yet written to the socket (sealed or not).
    pub fn pending_len(&self) -> usize {
        self.buf.len() - self.consumed
    }

    /// Nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.pending_len() == 0
    }

    /// Bytes its buffer holds before it grows.
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Makes room for a message of up to `len` bytes in the open frame, opening a new
    /// frame if there is none or the open one would overflow. Returns the buffer to append
    /// the message to.
    pub fn message_buf(&mut self, len: usize) -> &mut Vec<u8> {
        if let Some(start) = self.open_frame {
            let payload = self.buf.len() - start - FRAME_HEADER_LEN;
            if payload + len > self.max_frame {
                self.seal();
            }
        }
        if self.open_frame.is_none() {
            self.open_frame = Some(self.buf.len());
            self.buf.extend_from_slice(&[0; FRAME_HEADER_LEN]);
        }
        self.messages_in += 1;
        &mut self.buf
    }

    /// Appends one message, encoded.
    pub fn push(&mut self, msg: &Message<'_>) -> Result<(), EncodeError> {
        self.message_buf(0);
        let start = self.open_frame.unwrap_or(0);
        let before = self.buf.len();
        if let Err(e) = msg.encode(&mut self.buf) {
            self.forget_message();
            return Err(e);
        }
        let payload = self.buf.len() - start - FRAME_HEADER_LEN;
        if payload > self.max_frame && before > start + FRAME_HEADER_LEN {
            // The message overflowed a frame that already held others: close that frame
            // just before it and give the message a frame of its own. A single message
            // always fits, as max_frame >= MIN_MAX_FRAME.
            let previous = (before - start - FRAME_HEADER_LEN) as u32;
            self.buf[start..start + FRAME_HEADER_LEN].copy_from_slice(&previous.to_be_bytes());
            self.buf.splice(before..before, [0u8; FRAME_HEADER_LEN]);
            self.open_frame = Some(before);
            self.sealed
                .push_back((self.base + before as u64, self.messages_in - 1));
        }
        Ok(())
    }

    /// Appends bytes that already form one or more whole messages.
    pub fn push_encoded(&mut self, encoded: &[u8]) {
        self.message_buf(encoded.len()).extend_from_slice(encoded);
    }

    /// Closes the open frame (writes its length). Call before handing bytes to a socket.
    pub fn seal(&mut self) {
        if let Some(start) = self.open_frame.take() {
            let payload = self.buf.len() - start - FRAME_HEADER_LEN;
            if payload == 0 {
                self.buf.truncate(start);
            } else {
                self.buf[start..start + FRAME_HEADER_LEN]
                    .copy_from_slice(&(payload as u32).to_be_bytes());
                self.sealed
                    .push_back((self.base + self.buf.len() as u64, self.messages_in));
            }
        }
    }

    /// Seals and returns every byte not yet written.
    pub fn sealed_bytes(&mut self) -> &[u8] {
        self.seal();
        &self.buf[self.consumed..]
    }

    /// Marks `n` bytes from the front as written.
    pub fn consume(&mut self, n: usize) {
        debug_assert!(self.open_frame.is_none());
        self.consumed += n;
        debug_assert!(self.consumed <= self.buf.len());
        let at = self.base + self.consumed as u64;
        while let Some(&(end, messages)) = self.sealed.front() {
            if end > at {
                break;
            }
            self.messages_out = messages;
            self.written_end = end;
            self.sealed.pop_front();
        }
        if self.consumed == self.buf.len() {
            self.base += self.buf.len() as u64;
            self.buf.clear();
            self.consumed = 0;
        } else if self.consumed > 64 * 1024 && self.consumed * 2 > self.buf.len() {
            self.base += self.consumed as u64;
            self.buf.drain(..self.consumed);
            self.consumed = 0;
        }
    }

    /// Drops the buffer's memory if it grew past `keep` bytes and is now empty.
    pub fn shrink_if_idle(&mut self, keep: usize) {
        if self.is_empty() && self.buf.capacity() > keep {
            self.buf = Vec::with_capacity(keep);
        }
        if self.is_empty() && self.sealed.capacity() > 64 {
            self.sealed = VecDeque::new();
        }
    }

    /// Takes all pending bytes (sealed) out of the writer, e.g. to hand to a blocking socket.
    pub fn take_all(&mut self, into: &mut Vec<u8>) {
        self.seal();
        into.extend_from_slice(&self.buf[self.consumed..]);
        self.base += self.buf.len() as u64;
        self.written_end = self.base;
        self.buf.clear();
        self.consumed = 0;
        self.sealed.clear();
        self.messages_out = self.messages_in;
    }
}

/// The frames in `bytes` (length-prefixed, as a [`FrameWriter`] seals them): each
/// payload with the bytes the whole frame takes. Stops at an incomplete frame. For
/// in-process peers reading what a node queued for them.
pub fn frames(bytes: &[u8]) -> impl Iterator<Item = (&[u8], usize)> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if bytes.len() - at < FRAME_HEADER_LEN {
            return None;
        }
        let len =
            u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize;
        let payload = bytes.get(at + FRAME_HEADER_LEN..at + FRAME_HEADER_LEN + len)?;
        at += FRAME_HEADER_LEN + len;
        Some((payload, FRAME_HEADER_LEN + len))
    })
}

/// Accumulates received bytes and yields whole frames.
#[derive(Debug)]
pub struct FrameReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    max_frame: usize,
}

impl FrameReader {
    /// Frames at most `max_frame` bytes.
    pub fn new(max_frame: usize) -> Self {
        FrameReader {
            buf: Vec::new(),
            start: 0,
            end: 0,
            max_frame,
        }
    }

    /// Frames at most `max_frame` bytes from now on.
    pub fn set_max_frame(&mut self, max_frame: usize) {
        self.max_frame = max_frame;
    }

    /// The largest frame payload taken.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// Bytes received but not yet returned as frames.
    pub fn buffered(&self) -> usize {
        self.end - self.start
    }

    /// The bytes received and not yet taken as frames (to tell, from a connection's
    /// first bytes, which protocol it speaks).
    pub fn unread(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// Free space to read into, at least `min` bytes.
    pub fn spare(&mut self, min: usize) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        if self.buf.len() - self.end < min {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.buf.len() - self.end < min {
                self.buf.resize(self.end + min, 0);
            }
        }
        &mut self.buf[self.end..]
    }

    /// Records that `n` bytes were written into [`spare`](Self::spare).
    pub fn filled(&mut self, n: usize) {
        self.end += n;
        debug_assert!(self.end <= self.buf.len());
    }

    /// Copies bytes in (for callers that already hold them).
    pub fn extend(&mut self, bytes: &[u8]) {
        let n = bytes.len();
        self.spare(n)[..n].copy_from_slice(bytes);
        self.filled(n);
    }

    /// Returns the next whole frame payload, `None` if more bytes are needed, or an
    /// error if the length prefix is zero or above the maximum.
    pub fn next_frame(&mut self) -> Result<Option<&[u8]>, DecodeError> {
        let avail = self.end - self.start;
        if avail < FRAME_HEADER_LEN {
            return Ok(None);
        }
        let h = &self.buf[self.start..self.start + FRAME_HEADER_LEN];
        let len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize;
        if len == 0 {
            return Err(DecodeError::EmptyFrame);
        }
        if len > self.max_frame {
            return Err(DecodeError::FrameTooLarge {
                len,
                max: self.max_frame,
            });
        }
        if avail < FRAME_HEADER_LEN + len {
            return Ok(None);
        }
        let begin = self.start + FRAME_HEADER_LEN;
        self.start = begin + len;
        Ok(Some(&self.buf[begin..begin + len]))
    }

    /// Drops the buffer's memory if it grew past `keep` bytes and holds nothing.
    pub fn shrink_if_idle(&mut self, keep: usize) {
        if self.start == self.end && self.buf.len() > keep {
            self.buf = Vec::new();
            self.start = 0;
            self.end = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::MessageIter;

    fn frames(bytes: &[u8]) -> Vec<Vec<Message<'_>>> {
        let mut out = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            let len = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            let payload = &bytes[at + 4..at + 4 + len];
            out.push(
                MessageIter::new(payload)
                    .map(|m| m.unwrap().message)
                    .collect(),
            );
            at += 4 + len;
        }
        out
    }

    #[test]
    fn messages_count_as_sent_when_their_frame_is_written() {
        let mut w = FrameWriter::new(MIN_MAX_FRAME);
        for i in 0..3 {
            w.push(&Message::Ping(i)).unwrap();
        }
        assert_eq!(w.pending_messages(), 3);
        let first_frame = w.sealed_bytes().len();
        w.push(&Message::Ping(3)).unwrap();
        assert_eq!(w.pending_messages(), 4);
        w.seal();
        // Part of the first frame: nothing counts as sent yet.
        w.consume(first_frame - 1);
        assert_eq!(w.pending_messages(), 4);
        w.consume(1);
        assert_eq!(w.pending_messages(), 1);
        let rest = w.sealed_bytes().len();
        w.consume(rest);
        assert_eq!(w.pending_messages(), 0);
        assert!(w.is_empty());
    }

    #[test]
    fn discarding_keeps_only_the_rest_of_a_partly_written_frame() {
        let mut w = FrameWriter::new(MIN_MAX_FRAME);
        w.push(&Message::Ping(1)).unwrap();
        w.push(&Message::Ping(2)).unwrap();
        let first = w.sealed_bytes().to_vec();
        w.push(&Message::Ping(3)).unwrap();
        w.seal();
        w.consume(5); // the socket took the header and one byte
        w.discard_unsent();
        assert_eq!(w.pending_messages(), 2);
        assert_eq!(w.sealed_bytes(), &first[5..]);
        // What follows is framed after it.
        w.push(&Message::Pong(9)).unwrap();
        let mut all = first[..5].to_vec();
        all.extend_from_slice(w.sealed_bytes());
        let got = frames(&all);
        assert_eq!(
            got,
            vec![
                vec![Message::Ping(1), Message::Ping(2)],
                vec![Message::Pong(9)]
            ]
        );
        let n = w.sealed_bytes().len();
        w.consume(n);
        assert_eq!(w.pending_messages(), 0);

        // Nothing partly written: everything unsent goes.
        w.push(&Message::Ping(4)).unwrap();
        w.discard_unsent();
        assert!(w.is_empty());
        assert_eq!(w.pending_messages(), 0);
    }
}
