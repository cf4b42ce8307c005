//! RWF's integers and length-prefixed bytes: a bounded reader and the writers.
//!
//! - `u15rb`: below 0x80 one byte, else two with the top bit set.
//! - `u16ob`: below 0xFE one byte, else 0xFE and a `u16`.
//! - `u30rb`: the first byte's top two bits give the size (1, 2, 3 or 4 bytes).
//! - `i15rb`: as `u15rb`, signed (bit 6 or bit 14 is the sign).
//! - `buf8`, `buf15`, `buf16`: bytes after a `u8`, `u15rb` or `u16ob` length.
//!
//! Everything is big-endian. Decoders accept the longer forms the SDK writes when it
//! reserves a length before knowing it (`80 09` for 9, `FE 00 3C` for 60).

use std::fmt;

/// Why bytes are not valid RWF.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RwfError {
    /// The bytes end before what is being read (named).
    #[error("{0} is cut short")]
    Truncated(&'static str),
    /// Bytes that decode to something not allowed.
    #[error("{what}: {detail}")]
    Invalid {
        /// What was being read.
        what: &'static str,
        /// What is wrong.
        detail: String,
    },
}

impl RwfError {
    /// Bytes that decode to something not allowed.
    pub fn invalid(what: &'static str, detail: impl fmt::Display) -> Self {
        RwfError::Invalid {
            what,
            detail: detail.to_string(),
        }
    }
}

/// A cursor over bytes that never reads past their end.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, at: 0 }
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.at
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    /// Nothing is left.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// What is left, all of it (a message's payload, a container's set data).
    pub fn rest(&mut self) -> &'a [u8] {
        let r = &self.bytes[self.at..];
        self.at = self.bytes.len();
        r
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], RwfError> {
        if self.remaining() < n {
            return Err(RwfError::Truncated(what));
        }
        let r = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(r)
    }

    /// A byte.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, RwfError> {
        Ok(self.take(1, what)?[0])
    }

    /// A big-endian u16.
    pub fn u16(&mut self, what: &'static str) -> Result<u16, RwfError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A big-endian i16.
    pub fn i16(&mut self, what: &'static str) -> Result<i16, RwfError> {
        Ok(self.u16(what)? as i16)
    }

    /// A big-endian u32.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, RwfError> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A 15-bit length: one byte below 0x80, else two with the top bit set.
    pub fn u15rb(&mut self, what: &'static str) -> Result<u16, RwfError> {
        let b = self.u8(what)?;
        if b & 0x80 == 0 {
            return Ok(b as u16);
        }
        Ok((((b & 0x7F) as u16) << 8) | self.u8(what)? as u16)
    }

    /// A 15-bit signed value, written as `u15rb`.
    pub fn i15rb(&mut self, what: &'static str) -> Result<i16, RwfError> {
        let b = self.u8(what)?;
        if b & 0x80 == 0 {
            // Seven bits, bit 6 the sign.
            return Ok(((b << 1) as i8 >> 1) as i16);
        }
        let v = (((b & 0x7F) as u16) << 8) | self.u8(what)? as u16;
        Ok(((v << 1) as i16) >> 1)
    }

    /// A length of one byte, or 0xFE and a u16 (0xFF is a length of 255, as the SDK
    /// reads it, though it never writes one).
    pub fn u16ob(&mut self, what: &'static str) -> Result<u16, RwfError> {
        let b = self.u8(what)?;
        if b != 0xFE {
            return Ok(b as u16);
        }
        self.u16(what)
    }

    /// A 30-bit value: its top two bits say how many more bytes follow.
    pub fn u30rb(&mut self, what: &'static str) -> Result<u32, RwfError> {
        let b = self.u8(what)?;
        let extra = match b & 0xC0 {
            0x00 => 0,
            0x80 => 1,
            0x40 => 2,
            _ => 3,
        };
        let mut v = (b & 0x3F) as u32;
        for _ in 0..extra {
            v = (v << 8) | self.u8(what)? as u32;
        }
        Ok(v)
    }

    /// A buffer with a one-byte length.
    pub fn buf8(&mut self, what: &'static str) -> Result<&'a [u8], RwfError> {
        let n = self.u8(what)? as usize;
        self.take(n, what)
    }

    /// A buffer with a `u15rb` length.
    pub fn buf15(&mut self, what: &'static str) -> Result<&'a [u8], RwfError> {
        let n = self.u15rb(what)? as usize;
        self.take(n, what)
    }

    /// A buffer with a `u16ob` length.
    pub fn buf16(&mut self, what: &'static str) -> Result<&'a [u8], RwfError> {
        let n = self.u16ob(what)? as usize;
        self.take(n, what)
    }
}

/// Writes a big-endian u16.
pub fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Writes a big-endian u32.
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Writes a 15-bit length as `u15rb`.
pub fn put_u15rb(out: &mut Vec<u8>, v: u16) {
    debug_assert!(v <= 0x7FFF);
    if v < 0x80 {
        out.push(v as u8);
    } else {
        out.push(0x80 | (v >> 8) as u8);
        out.push(v as u8);
    }
}

/// Writes a length as `u16ob`.
pub fn put_u16ob(out: &mut Vec<u8>, v: u16) {
    if v < 0xFE {
        out.push(v as u8);
    } else {
        out.push(0xFE);
        put_u16(out, v);
    }
}

/// Writes a buffer with a one-byte length (cut at 255).
pub fn put_buf8(out: &mut Vec<u8>, b: &[u8]) {
    let b = &b[..b.len().min(255)];
    out.push(b.len() as u8);
    out.extend_from_slice(b);
}

/// Writes a buffer with a `u15rb` length.
pub fn put_buf15(out: &mut Vec<u8>, b: &[u8]) {
    let b = &b[..b.len().min(0x7FFF)];
    put_u15rb(out, b.len() as u16);
    out.extend_from_slice(b);
}

/// Writes a buffer with a `u16ob` length.
pub fn put_buf16(out: &mut Vec<u8>, b: &[u8]) {
    let b = &b[..b.len().min(0xFFFF)];
    put_u16ob(out, b.len() as u16);
    out.extend_from_slice(b);
}

/// A value `put` writes after its `u16ob` length in the shortest form: one byte for
/// the usual short value, widened to three for a long one (as the SDK writes field
/// values and array items). A value over 65,535 bytes is cut there.
pub fn put_sized_u16ob(out: &mut Vec<u8>, put: impl FnOnce(&mut Vec<u8>)) {
    let len_at = out.len();
    out.push(0);
    put(out);
    let n = out.len() - len_at - 1;
    if n < 0xFE {
        out[len_at] = n as u8;
    } else {
        let n = n.min(0xFFFF) as u16;
        out.truncate(len_at + 1 + n as usize);
        out[len_at] = 0xFE;
        out.splice(len_at + 1..len_at + 1, n.to_be_bytes());
    }
}

/// A `u16ob` length written once what it measures is: three bytes reserved
/// (`FE hi lo`), as the SDK's own multi-step encoders do.
#[must_use]
pub struct LenSlot(usize);

impl LenSlot {
    /// Reserves a `u16ob` length (three bytes), filled in by `finish`.
    pub fn u16ob(out: &mut Vec<u8>) -> LenSlot {
        out.extend_from_slice(&[0xFE, 0, 0]);
        LenSlot(out.len())
    }

    /// Fills in the length of what was written since; `false` if it is over 65,535
    /// bytes (the caller must not send it).
    pub fn finish(self, out: &mut [u8]) -> bool {
        let n = out.len() - self.0;
        let Ok(n) = u16::try_from(n) else {
            return false;
        };
        out[self.0 - 2..self.0].copy_from_slice(&n.to_be_bytes());
        true
    }

    /// The value `put` writes, after a reserved length filled in at once; `false` as
    /// [`LenSlot::finish`].
    pub fn wrap(out: &mut Vec<u8>, put: impl FnOnce(&mut Vec<u8>)) -> bool {
        let slot = LenSlot::u16ob(out);
        put(out);
        slot.finish(out)
    }
}

/// A `u15rb` length written later: two bytes reserved.
#[must_use]
pub struct Len15Slot(usize);

impl Len15Slot {
    /// Reserves a `u15rb` length (two bytes), filled in by `finish`.
    pub fn new(out: &mut Vec<u8>) -> Len15Slot {
        out.extend_from_slice(&[0x80, 0]);
        Len15Slot(out.len())
    }

    /// Fills in the length of what was written since; `false` if it does not fit.
    pub fn finish(self, out: &mut [u8]) -> bool {
        let n = out.len() - self.0;
        if n > 0x7FFF {
            return false;
        }
        out[self.0 - 2] = 0x80 | (n >> 8) as u8;
        out[self.0 - 1] = n as u8;
        true
    }
}
