//! Byte-level helpers: a bounds-checked reader and varint / zigzag coding.
//! Everything on the wire is big-endian.

use crate::DecodeError;

/// A cursor over a byte slice whose every read is bounds-checked.
#[derive(Debug, Clone, Copy)]
pub struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader over `buf` (`what` names it in errors).
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, what }
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// What is left.
    pub fn rest(&self) -> &'a [u8] {
        self.buf
    }

    /// Nothing is left.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated {
                what: self.what,
                need: n,
                have: self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    /// A byte.
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.bytes(1)?[0])
    }

    /// A big-endian u16.
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        let b = self.bytes(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A big-endian i16.
    pub fn i16(&mut self) -> Result<i16, DecodeError> {
        Ok(self.u16()? as i16)
    }

    /// A big-endian u32.
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.bytes(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A big-endian u64.
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// LEB128 unsigned varint, at most 10 bytes.
    #[inline]
    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        // Fast path: a varint of up to 9 bytes with 8 bytes to read, decoded without a
        // branch per byte. Such a varint cannot overflow (9 bytes hold 63 bits).
        if let Some(chunk) = self.buf.get(..8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let x = u64::from_le_bytes(word);
            let stops = !x & 0x8080_8080_8080_8080;
            if stops != 0 {
                let n = stops.trailing_zeros() as usize / 8 + 1;
                self.buf = &self.buf[n..];
                let x = if n == 8 {
                    x
                } else {
                    x & ((1u64 << (8 * n)) - 1)
                };
                return Ok(compact_varint_groups(x));
            }
            // Nanosecond timestamps since 1970 take 9 bytes.
            if let Some(&last) = self.buf.get(8) {
                if last & 0x80 == 0 {
                    self.buf = &self.buf[9..];
                    return Ok(compact_varint_groups(x) | (last as u64) << 56);
                }
            }
        }
        self.varint_slow()
    }

    /// Passes over a varint, checking it as [`Reader::varint`] does, without
    /// assembling its value (validation that does not need the value: a varint of at
    /// most 8 bytes ends within the word it reads and cannot overflow).
    #[inline]
    pub fn skip_varint(&mut self) -> Result<(), DecodeError> {
        if let Some(chunk) = self.buf.get(..8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let stops = !u64::from_le_bytes(word) & 0x8080_8080_8080_8080;
            if stops != 0 {
                self.buf = &self.buf[stops.trailing_zeros() as usize / 8 + 1..];
                return Ok(());
            }
        }
        self.varint().map(|_| ())
    }

    fn varint_slow(&mut self) -> Result<u64, DecodeError> {
        let buf = self.buf;
        let mut value: u64 = 0;
        for (i, &byte) in buf.iter().take(10).enumerate() {
            let low = (byte & 0x7f) as u64;
            if i == 9 && low > 1 {
                return Err(DecodeError::VarintOverflow);
            }
            value |= low << (7 * i);
            if byte & 0x80 == 0 {
                self.buf = &buf[i + 1..];
                return Ok(value);
            }
        }
        if buf.len() < 10 {
            // Every byte there was carried on: the varint is cut short.
            self.buf = &buf[buf.len()..];
            return Err(DecodeError::Truncated {
                what: self.what,
                need: 1,
                have: 0,
            });
        }
        Err(DecodeError::VarintOverflow)
    }

    /// A UTF-8 string prefixed by a u16 length.
    pub fn str16(&mut self, what: &'static str) -> Result<&'a str, DecodeError> {
        let len = self.u16()? as usize;
        let bytes = self.bytes(len)?;
        std::str::from_utf8(bytes).map_err(|_| DecodeError::InvalidUtf8(what))
    }

    /// Fails if any byte is left: every message body must be consumed exactly.
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes {
                what: self.what,
                trailing: self.buf.len(),
            })
        }
    }
}

/// The value of a varint of at most 8 bytes loaded little-endian into `x` (bytes past
/// the varint zeroed): drops the continuation bits and packs the 7-bit groups.
#[inline]
fn compact_varint_groups(x: u64) -> u64 {
    let x = x & 0x7f7f_7f7f_7f7f_7f7f;
    let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
    (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4)
}

/// Number of bytes of the varint at the start of `buf` (at most 10: the first byte
/// below 0x80 ends it), without decoding it; `None` if no byte ends it within 10 bytes.
#[inline]
pub fn varint_len_at(buf: &[u8]) -> Option<usize> {
    if let Some(chunk) = buf.get(..8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let stops = !u64::from_le_bytes(word) & 0x8080_8080_8080_8080;
        if stops != 0 {
            return Some(stops.trailing_zeros() as usize / 8 + 1);
        }
    }
    buf.iter()
        .take(10)
        .position(|&b| b & 0x80 == 0)
        .map(|p| p + 1)
}

/// Asks the CPU to start loading the cache line that holds `p`, so that a later read of
/// it does not wait for memory. A hint only: it reads nothing a program can observe,
/// never faults whatever the address, and does nothing on architectures other than
/// x86-64.
#[inline(always)]
pub fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 has no precondition: it cannot fault on any address and has no
    // architectural effect. It needs SSE, which every x86-64 CPU has.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Writes a big-endian u16.
pub fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Writes a big-endian u32.
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Writes a big-endian u64.
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Writes a LEB128 varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    // Byte by byte into reserved room: a copy of a variable-length temporary would be a
    // call to memcpy for one to ten bytes, the largest cost of building a field list.
    out.reserve(10);
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Number of bytes `put_varint` writes for `v`.
pub fn varint_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// A signed value as an unsigned one, small magnitudes small.
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The signed value `zigzag` made.
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Writes a u16-length-prefixed string, refusing strings longer than 65,535 bytes.
pub fn put_str16(out: &mut Vec<u8>, s: &str, what: &'static str) -> Result<(), crate::EncodeError> {
    let len = s.len();
    if len > u16::MAX as usize {
        return Err(crate::EncodeError::TooLong {
            what,
            len,
            max: u16::MAX as usize,
        });
    }
    put_u16(out, len as u16);
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_varint_accepts_refuses_and_advances_exactly_as_varint() {
        // Every length from 1 to 11 bytes, ends and continuations, overflows, cut short.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 12) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|i| {
                    let b = (x >> (i * 5)) as u8;
                    if (x >> (40 + i)) & 1 == 1 {
                        b | 0x80
                    } else {
                        b & 0x7f
                    }
                })
                .collect();
            let mut a = Reader::new(&bytes, "test");
            let mut b = Reader::new(&bytes, "test");
            let va = a.varint().map(|_| ());
            let vb = b.skip_varint();
            assert_eq!(va.is_ok(), vb.is_ok(), "{bytes:02x?}");
            if va.is_ok() {
                assert_eq!(a.rest().len(), b.rest().len(), "{bytes:02x?}");
            }
        }
    }
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varint_round_trips(v in any::<u64>()) {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            prop_assert_eq!(out.len(), varint_len(v));
            let mut r = Reader::new(&out, "test");
            prop_assert_eq!(r.varint().unwrap(), v);
            prop_assert!(r.is_empty());
        }

        #[test]
        fn zigzag_round_trips(v in any::<i64>()) {
            prop_assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    proptest! {
        #[test]
        fn fast_and_byte_by_byte_varint_decoding_agree(
            bytes in proptest::collection::vec(any::<u8>(), 0..14),
            stop_at in 0usize..14,
        ) {
            // Mostly well-formed varints of every length, cut or not, followed by more
            // bytes; and plain random bytes.
            let mut b = bytes.clone();
            for (i, x) in b.iter_mut().enumerate() {
                if i < stop_at { *x |= 0x80 } else if i == stop_at { *x &= 0x7f }
            }
            for input in [&bytes[..], &b[..]] {
                let mut fast = Reader::new(input, "t");
                let mut slow = Reader::new(input, "t");
                let f = fast.varint();
                let s = slow.varint_slow();
                prop_assert_eq!(&f, &s);
                if s.is_ok() {
                    prop_assert_eq!(fast.remaining(), slow.remaining());
                    prop_assert_eq!(varint_len_at(input), Some(input.len() - slow.remaining()));
                }
            }
        }
    }

    #[test]
    fn overlong_varint_is_rejected() {
        let bytes = [0xffu8; 11];
        assert_eq!(
            Reader::new(&bytes, "t").varint(),
            Err(DecodeError::VarintOverflow)
        );
        // Ten bytes whose last carries more than the one bit left of a u64.
        let mut bytes = [0xffu8; 10];
        bytes[9] = 0x02;
        assert_eq!(
            Reader::new(&bytes, "t").varint(),
            Err(DecodeError::VarintOverflow)
        );
    }
}
