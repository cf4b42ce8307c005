//! [`FieldImage`]: the current value of every field of an item, kept encoded.
//!
//! Used by the node's last-value cache and by the client library's publisher. Applying an
//! update overwrites fields in place when the encoded length is unchanged (the common case
//! for prices and sizes) and never decodes values, so the cache does no allocation per
//! update once an item's image has reached its size.

use crate::field::{FieldList, FieldListWriter, Value};

#[derive(Debug, Clone, Copy)]
struct Slot {
    fid: i16,
    offset: u32,
    len: u32,
}

#[derive(Debug, Clone, Default)]
pub struct FieldImage {
    /// Concatenated tag+value encodings, in first-seen field order.
    data: Vec<u8>,
    slots: Vec<Slot>,
}

impl FieldImage {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn clear(&mut self) {
        self.data.clear();
        self.slots.clear();
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Bytes of memory held (for the memory accounting in docs/BENCHMARKS.md).
    pub fn heap_bytes(&self) -> usize {
        self.data.capacity() + self.slots.capacity() * std::mem::size_of::<Slot>()
    }

    /// Merges a field list: each field replaces the field of the same id or is appended.
    pub fn apply(&mut self, fields: FieldList<'_>) {
        for (fid, encoded) in fields.raw_iter() {
            self.set_raw(fid, encoded);
        }
    }

    /// Sets one field from its encoded tag+value bytes.
    pub fn set_raw(&mut self, fid: i16, encoded: &[u8]) {
        match self.slots.iter().position(|s| s.fid == fid) {
            Some(i) => {
                let slot = self.slots[i];
                let (off, old_len) = (slot.offset as usize, slot.len as usize);
                if old_len == encoded.len() {
                    self.data[off..off + old_len].copy_from_slice(encoded);
                } else {
                    self.data
                        .splice(off..off + old_len, encoded.iter().copied());
                    let delta = encoded.len() as i64 - old_len as i64;
                    self.slots[i].len = encoded.len() as u32;
                    for s in &mut self.slots {
                        if s.offset as usize > off {
                            s.offset = (s.offset as i64 + delta) as u32;
                        }
                    }
                }
            }
            None => {
                self.slots.push(Slot {
                    fid,
                    offset: self.data.len() as u32,
                    len: encoded.len() as u32,
                });
                self.data.extend_from_slice(encoded);
            }
        }
    }

    /// Sets one field from a value.
    pub fn set(&mut self, fid: i16, value: Value<'_>) {
        let mut tmp = Vec::with_capacity(16);
        value.encode(&mut tmp);
        self.set_raw(fid, &tmp);
    }

    /// The encoded tag+value of a field.
    pub fn get_raw(&self, fid: i16) -> Option<&[u8]> {
        self.slots
            .iter()
            .find(|s| s.fid == fid)
            .map(|s| &self.data[s.offset as usize..(s.offset + s.len) as usize])
    }

    /// Writes every field (or only those in `view`, in image order) as a field list.
    pub fn write(&self, out: &mut Vec<u8>, view: Option<&[i16]>) -> u16 {
        let mut w = FieldListWriter::new(out);
        for s in &self.slots {
            if view.is_none_or(|v| v.contains(&s.fid)) {
                w.push_raw(
                    s.fid,
                    &self.data[s.offset as usize..(s.offset + s.len) as usize],
                );
            }
        }
        w.finish()
    }

    /// The image as an encoded field list in a new vector.
    pub fn to_field_list_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.data.len() + 2 + self.slots.len() * 2);
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
}
