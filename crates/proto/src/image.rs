//! [`FieldImage`]: the current value of every field of an item, kept encoded.
//!
//! Used by the node's last-value cache and by the client library's publisher. Applying an
//! update overwrites fields in place when the encoded length is unchanged (the common case
//! for prices and sizes) and never decodes values, so the cache does no allocation per
//! update once an item's image has reached its size. An image is one heap block.

use crate::field::{FieldList, FieldListWriter, Value};

/// In an entry header, a length byte with this value is followed by the length as 4
/// bytes (little-endian); any smaller value is the length itself.
const LONG_LEN: u8 = u8::MAX;

/// One heap block holding every field of an item, in first-seen order.
///
/// Each field is an entry: `fid` (2 bytes, native order), the length `n` of its encoded
/// value (1 byte if below 255, else the byte 255 then 4 bytes), then its `n` bytes of
/// encoded tag+value. Fields are found by walking the entries; [`FieldImage::apply`]
/// starts each search where the previous field was found, so an update whose fields come
/// in image order (the usual case) is merged in one pass over about 150 contiguous bytes.
#[derive(Debug, Clone, Default)]
pub struct FieldImage {
    data: Vec<u8>,
    /// Number of fields (entries in `data`).
    count: u32,
}

/// The entry at `pos`: its field id and where its encoded value starts and ends.
#[inline(always)]
fn entry(data: &[u8], pos: usize) -> (i16, usize, usize) {
    let fid = i16::from_ne_bytes([data[pos], data[pos + 1]]);
    let n = data[pos + 2];
    if n != LONG_LEN {
        (fid, pos + 3, pos + 3 + n as usize)
    } else {
        let b = &data[pos + 3..pos + 7];
        let n = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        (fid, pos + 7, pos + 7 + n)
    }
}

/// `dst.copy_from_slice(src)` without a call to `memcpy` for the few bytes of a typical
/// value: two overlapping fixed-size copies.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n != dst.len() || n > 16 {
        dst.copy_from_slice(src);
    } else if n >= 8 {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..].copy_from_slice(&src[n - 8..]);
    } else if n >= 4 {
        dst[..4].copy_from_slice(&src[..4]);
        dst[n - 4..].copy_from_slice(&src[n - 4..]);
    } else if n > 0 {
        dst[0] = src[0];
        dst[n / 2] = src[n / 2];
        dst[n - 1] = src[n - 1];
    }
}

/// Writes an entry header into `hdr`; returns its length.
#[inline]
fn header(fid: i16, len: usize, hdr: &mut [u8; 7]) -> usize {
    hdr[..2].copy_from_slice(&fid.to_ne_bytes());
    if len < LONG_LEN as usize {
        hdr[2] = len as u8;
        3
    } else {
        hdr[2] = LONG_LEN;
        hdr[3..7].copy_from_slice(&(len as u32).to_le_bytes());
        7
    }
}

impl FieldImage {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn clear(&mut self) {
        self.data.clear();
        self.count = 0;
    }

    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes of memory held (for the memory accounting in docs/BENCHMARKS.md).
    pub fn heap_bytes(&self) -> usize {
        self.data.capacity()
    }

    /// Starts loading the image's memory into the CPU cache (a hint; see
    /// [`crate::wire::prefetch`]): a node about to merge an update into an item it has
    /// not touched lately calls this a little ahead.
    #[inline]
    pub fn prefetch(&self) {
        let len = self.data.len().min(256);
        let p = self.data.as_ptr();
        let mut off = 0;
        while off < len {
            crate::wire::prefetch(p.wrapping_add(off));
            off += 64;
        }
        if len > 0 {
            crate::wire::prefetch(p.wrapping_add(len - 1));
        }
    }

    /// Merges a field list: each field replaces the field of the same id or is appended.
    pub fn apply(&mut self, fields: FieldList<'_>) {
        let mut cursor = 0;
        for (fid, encoded) in fields.raw_iter() {
            cursor = self.set_from(cursor, fid, encoded);
        }
    }

    /// Sets one field from its encoded tag+value bytes.
    pub fn set_raw(&mut self, fid: i16, encoded: &[u8]) {
        self.set_from(0, fid, encoded);
    }

    /// The entry of `fid`, searched from the entry at `from` to the end, then from the
    /// start up to `from`.
    #[inline(always)]
    fn find_from(&self, fid: i16, from: usize) -> Option<usize> {
        let data = &self.data[..];
        let mut pos = from;
        while pos < data.len() {
            let (f, _, end) = entry(data, pos);
            if f == fid {
                return Some(pos);
            }
            pos = end;
        }
        pos = 0;
        while pos < from {
            let (f, _, end) = entry(data, pos);
            if f == fid {
                return Some(pos);
            }
            pos = end;
        }
        None
    }

    /// Sets a field, searching from the entry at `from`; returns where the entry after
    /// it starts.
    #[inline(always)]
    fn set_from(&mut self, from: usize, fid: i16, encoded: &[u8]) -> usize {
        let Some(pos) = self.find_from(fid, from) else {
            let mut hdr = [0u8; 7];
            let h = header(fid, encoded.len(), &mut hdr);
            self.data.extend_from_slice(&hdr[..h]);
            self.data.extend_from_slice(encoded);
            self.count += 1;
            return self.data.len();
        };
        let (_, start, end) = entry(&self.data, pos);
        if end - start == encoded.len() {
            // Same length (the common case for prices and sizes): overwrite in place.
            copy_short(&mut self.data[start..end], encoded);
            return end;
        }
        // A new length: move the entries after it, then write header and value.
        let mut hdr = [0u8; 7];
        let h = header(fid, encoded.len(), &mut hdr);
        let new_end = pos + h + encoded.len();
        let len = self.data.len();
        if new_end > end {
            self.data.resize(len + (new_end - end), 0);
            self.data.copy_within(end..len, new_end);
        } else {
            self.data.copy_within(end..len, new_end);
            self.data.truncate(len - (end - new_end));
        }
        self.data[pos..pos + h].copy_from_slice(&hdr[..h]);
        self.data[pos + h..new_end].copy_from_slice(encoded);
        new_end
    }

    /// Sets one field from a value.
    pub fn set(&mut self, fid: i16, value: Value<'_>) {
        let mut tmp = Vec::with_capacity(16);
        value.encode(&mut tmp);
        self.set_raw(fid, &tmp);
    }

    /// The encoded tag+value of a field.
    pub fn get_raw(&self, fid: i16) -> Option<&[u8]> {
        let pos = self.find_from(fid, 0)?;
        let (_, start, end) = entry(&self.data, pos);
        Some(&self.data[start..end])
    }

    /// Every field in image order: (fid, encoded tag+value).
    fn fields(&self) -> impl Iterator<Item = (i16, &[u8])> + '_ {
        let data = &self.data[..];
        let mut pos = 0;
        std::iter::from_fn(move || {
            if pos >= data.len() {
                return None;
            }
            let (fid, start, end) = entry(data, pos);
            pos = end;
            Some((fid, &data[start..end]))
        })
    }

    /// Writes every field (or only those in `view`, in image order) as a field list.
    pub fn write(&self, out: &mut Vec<u8>, view: Option<&[i16]>) -> u16 {
        let mut w = FieldListWriter::new(out);
        for (fid, encoded) in self.fields() {
            if view.is_none_or(|v| v.contains(&fid)) {
                w.push_raw(fid, encoded);
            }
        }
        w.finish()
    }

    /// The image as an encoded field list in a new vector.
    pub fn to_field_list_bytes(&self) -> Vec<u8> {
        // Entry headers are at least as long as the field ids they become.
        let mut out = Vec::with_capacity(self.data.len() + 2);
        self.write(&mut out, None);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field::{encode_field_list, Real};

    #[test]
    fn apply_replaces_and_appends() {
        let mut img = FieldImage::new();
        let a = encode_field_list([
            (22, Value::Real(Real::new(10000, -2))),
            (25, Value::Real(Real::new(10010, -2))),
            (3, Value::Ascii("ABC")),
        ]);
        img.apply(FieldList::decode(&a).unwrap());
        // Same length in place, different length (string) spliced, new field appended.
        let b = encode_field_list([
            (25, Value::Real(Real::new(10011, -2))),
            (3, Value::Ascii("LONGER NAME")),
            (30, Value::UInt(500)),
        ]);
        img.apply(FieldList::decode(&b).unwrap());
        let bytes = img.to_field_list_bytes();
        let list = FieldList::decode(&bytes).unwrap();
        let got: Vec<_> = list.iter().collect();
        assert_eq!(
            got,
            vec![
                (22, Value::Real(Real::new(10000, -2))),
                (25, Value::Real(Real::new(10011, -2))),
                (3, Value::Ascii("LONGER NAME")),
                (30, Value::UInt(500)),
            ]
        );
        let mut viewed = Vec::new();
        img.write(&mut viewed, Some(&[30, 22]));
        let got: Vec<_> = FieldList::decode(&viewed)
            .unwrap()
            .iter()
            .map(|f| f.0)
            .collect();
        assert_eq!(got, vec![22, 30]);
    }

    #[test]
    fn long_values_and_length_changes_keep_every_field() {
        // Values of 254 bytes and more take the long entry header; a field moving across
        // that boundary, growing and shrinking, must leave its neighbours intact.
        let mut img = FieldImage::new();
        let mut model: Vec<(i16, String)> = Vec::new();
        let lengths = [
            0usize, 1, 250, 251, 252, 253, 254, 300, 70_000, 65_535, 2, 0,
        ];
        for (round, &n) in lengths.iter().enumerate() {
            let long = "x".repeat(n.min(65_535));
            let fields: Vec<(i16, String)> = vec![
                (7, format!("r{round}")),
                (-3, long.clone()),
                (1000, "y".repeat(round * 40)),
            ];
            // Alternate the order, so searches wrap around.
            let ordered: Vec<&(i16, String)> = if round % 2 == 0 {
                fields.iter().collect()
            } else {
                fields.iter().rev().collect()
            };
            let bytes = encode_field_list(ordered.iter().map(|(f, v)| (*f, Value::Utf8(v))));
            img.apply(FieldList::decode(&bytes).unwrap());
            for (f, v) in ordered {
                match model.iter_mut().find(|(mf, _)| mf == f) {
                    Some(slot) => slot.1 = v.clone(),
                    None => model.push((*f, v.clone())),
                }
            }
            assert_eq!(img.len(), model.len());
            let out = img.to_field_list_bytes();
            let expected = encode_field_list(model.iter().map(|(f, v)| (*f, Value::Utf8(v))));
            assert_eq!(out, expected, "round {round}");
            for (f, v) in &model {
                let mut enc = Vec::new();
                Value::Utf8(v).encode(&mut enc);
                assert_eq!(img.get_raw(*f), Some(&enc[..]));
            }
        }
        assert_eq!(img.get_raw(8), None);
        img.clear();
        assert!(img.is_empty());
        assert_eq!(img.to_field_list_bytes(), vec![0, 0]);
    }

    #[test]
    fn set_raw_keeps_any_bytes() {
        // set_raw stores what it is given, even bytes that are no valid encoding.
        let mut img = FieldImage::new();
        img.set_raw(1, &[0xff; 3]);
        img.set_raw(2, &[]);
        img.set_raw(1, &[0x80; 300]);
        assert_eq!(img.get_raw(1), Some(&[0x80u8; 300][..]));
        assert_eq!(img.get_raw(2), Some(&[][..]));
        assert_eq!(img.len(), 2);
    }
}
