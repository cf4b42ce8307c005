//! Framing: `u32 payload length` (big-endian) then the payload, which packs one or more
//! whole messages.
//!
//! [`FrameWriter`] appends messages to an output byte buffer, opening a frame when needed
//! and starting a new one before the current would exceed the maximum frame size.
//! [`FrameReader`] accumulates bytes read from a socket and yields complete frames.

use crate::message::Message;
use crate::{DecodeError, EncodeError};

pub const FRAME_HEADER_LEN: usize = 4;
/// Default largest frame payload, negotiated in the welcome.
pub const DEFAULT_MAX_FRAME: usize = 256 * 1024;
/// Smallest maximum a node may announce: room for the largest single message.
pub const MIN_MAX_FRAME: usize =
    crate::message::MAX_MESSAGE_BODY + crate::message::MESSAGE_HEADER_LEN;

/// Bytes waiting to be written to a peer, with the frame being built at the end.
///
/// Written bytes are consumed from the front; the buffer keeps its capacity, so a
/// connection in steady state does not allocate.
#[derive(Debug)]
pub struct FrameWriter {
    buf: Vec<u8>,
    /// Bytes at the front already handed to the socket.
    consumed: usize,
    /// Start of the open frame's header, if a frame is open.
    open_frame: Option<usize>,
    max_frame: usize,
}

impl FrameWriter {
    pub fn new(max_frame: usize) -> Self {
        FrameWriter {
            buf: Vec::new(),
            consumed: 0,
            open_frame: None,
            max_frame: max_frame.max(MIN_MAX_FRAME),
        }
    }

    pub fn set_max_frame(&mut self, max_frame: usize) {
        self.seal();
        self.max_frame = max_frame.max(MIN_MAX_FRAME);
    }

    /// Bytes not yet written to the socket (sealed or not).
    pub fn pending_len(&self) -> usize {
        self.buf.len() - self.consumed
    }

    pub fn is_empty(&self) -> bool {
        self.pending_len() == 0
    }

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
        &mut self.buf
    }

    /// Appends one message, encoded.
    pub fn push(&mut self, msg: &Message<'_>) -> Result<(), EncodeError> {
        self.message_buf(0);
        let start = self.open_frame.unwrap_or(0);
        let before = self.buf.len();
        msg.encode(&mut self.buf)?;
        let payload = self.buf.len() - start - FRAME_HEADER_LEN;
        if payload > self.max_frame && before > start + FRAME_HEADER_LEN {
            // The message overflowed a frame that already held others: close that frame
            // just before it and give the message a frame of its own. A single message
            // always fits, as max_frame >= MIN_MAX_FRAME.
            let previous = (before - start - FRAME_HEADER_LEN) as u32;
            self.buf[start..start + FRAME_HEADER_LEN].copy_from_slice(&previous.to_be_bytes());
            self.buf.splice(before..before, [0u8; FRAME_HEADER_LEN]);
            self.open_frame = Some(before);
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
        if self.consumed == self.buf.len() {
            self.buf.clear();
            self.consumed = 0;
        } else if self.consumed > 64 * 1024 && self.consumed * 2 > self.buf.len() {
            self.buf.drain(..self.consumed);
            self.consumed = 0;
        }
    }

    /// Drops the buffer's memory if it grew past `keep` bytes and is now empty.
    pub fn shrink_if_idle(&mut self, keep: usize) {
        if self.is_empty() && self.buf.capacity() > keep {
            self.buf = Vec::with_capacity(keep);
        }
    }

    /// Takes all pending bytes (sealed) out of the writer, e.g. to hand to a blocking socket.
    pub fn take_all(&mut self, into: &mut Vec<u8>) {
        self.seal();
        into.extend_from_slice(&self.buf[self.consumed..]);
        self.buf.clear();
        self.consumed = 0;
    }
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
    pub fn new(max_frame: usize) -> Self {
        FrameReader {
            buf: Vec::new(),
            start: 0,
            end: 0,
            max_frame,
        }
    }

    pub fn set_max_frame(&mut self, max_frame: usize) {
        self.max_frame = max_frame;
    }

    /// Bytes received but not yet returned as frames.
    pub fn buffered(&self) -> usize {
        self.end - self.start
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
