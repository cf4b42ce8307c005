//! [`FieldImage`]: the current value of every field of an item, kept encoded.
//!
//! Used by the node's last-value cache and by the client library's publisher. Applying an
//! update overwrites fields in place when the encoded length is unchanged (the common case
//! for prices and sizes) and never decodes values, so the cache does no allocation per
//! update once an item's image has reached its size. An image is one heap block, plus an
//! index once it is large.

mod index;

use crate::field::{FieldList, FieldListWriter, Value};
use index::Index;

/// In an entry header, a length byte with this value is followed by the length as 4
/// bytes (little-endian); any smaller value is the length itself.
const LONG_LEN: u8 = 254;

/// A length byte with this value marks a dead entry (the old place of a field that
/// moved); its first byte then holds the entry's original length byte, so it can still
/// be stepped over.
const DEAD: u8 = u8::MAX;

/// An image with more fields than this, or more bytes than [`INDEX_MIN_BYTES`], keeps an
/// index. Up to it the walk from a cursor keeps first-seen order and needs no second
/// block; crates/proto/benches/image.rs (10-field updates into n-field images, ns per
/// field, walk vs index): in image order 7 vs 13 at 32 fields, 13 vs 11 at 48, 14 vs 13
/// at 64, 23 vs 16 at 128; shuffled, the walk loses from 32 fields (28 vs 11) and is 4x
/// slower at 64. Above 64 the walk's O(fields) per field no longer pays. (Measured with
/// the B-tree index the keyed hash of `image/index.rs` replaced; the hash is faster, so
/// the thresholds here lean towards the walk.)
const INDEX_MIN_FIELDS: u32 = 64;

/// An image of at least this many fields is indexed as soon as an update comes out of
/// its order (a quarter of the update's fields found behind the previous one): the walk
/// then costs O(fields) per field. Same bench, shuffled, walk vs index: 9 vs 8 ns per
/// field at 16 fields, 19 at 32, 39 at 64; in image order the walk stays (5 ns at 32).
/// The perf tools' items (about 60 fields, updated in no particular order) are such.
const INDEX_OUT_OF_ORDER_MIN_FIELDS: u32 = 16;

/// An image larger than this keeps an index too: without one, a length change moves
/// the tail of the image, and a few fields of long strings make that O(bytes) per field.
const INDEX_MIN_BYTES: usize = 16 * 1024;

/// One heap block holding every field of an item.
///
/// Each field is an entry: `fid` (2 bytes, native order), the length `n` of its encoded
/// value (1 byte if below 254, else the byte 254 then 4 bytes), then its `n` bytes of
/// encoded tag+value.
///
/// A small image (up to `INDEX_MIN_FIELDS` fields and `INDEX_MIN_BYTES` bytes, the
/// common case) has no index and keeps fields in first-seen order: fields are found by
/// walking the entries, and [`FieldImage::apply`] starts each search where the previous
/// field was found, so an update whose fields come in image order (the usual case) is
/// merged in one pass over about 150 contiguous bytes; a length change moves the entries
/// after the field.
///
/// A larger image keeps an index (fid -> offset) and never moves the tail: a field whose
/// length changes is appended and its old entry marked dead (so it goes last in the
/// image's order), and the entries are compacted in place when dead bytes exceed live
/// ones. Every field of an update then costs one lookup in a keyed hash (expected O(1),
/// see `image/index.rs`) plus amortised O(its bytes), whatever the order, lengths or
/// repetitions a publisher sends.
#[derive(Debug, Clone, Default)]
pub struct FieldImage {
    data: Vec<u8>,
    /// Number of fields (live entries in `data`).
    count: u32,
    /// `None` while the image is small. One pointer (the index is one heap block):
    /// most images are small, and the node keeps one per item.
    index: Option<Index>,
}

/// The entry at `pos`, whose length byte is `n`: where its encoded value starts and ends.
#[inline(always)]
fn span(data: &[u8], pos: usize, n: u8) -> (usize, usize) {
    if n < LONG_LEN {
        (pos + 3, pos + 3 + n as usize)
    } else {
        let b = &data[pos + 3..pos + 7];
        let n = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        (pos + 7, pos + 7 + n)
    }
}

/// The live entry at `pos`: its field id and where its encoded value starts and ends.
#[inline(always)]
fn entry(data: &[u8], pos: usize) -> (i16, usize, usize) {
    let fid = i16::from_ne_bytes([data[pos], data[pos + 1]]);
    let n = data[pos + 2];
    debug_assert_ne!(n, DEAD, "entry at {pos} is dead");
    let (start, end) = span(data, pos, n);
    (fid, start, end)
}

/// The entry at `pos`, live or dead: its field id (`None` if dead) and where its value
/// starts and ends.
#[inline(always)]
fn any_entry(data: &[u8], pos: usize) -> (Option<i16>, usize, usize) {
    if data[pos + 2] != DEAD {
        let (fid, start, end) = entry(data, pos);
        (Some(fid), start, end)
    } else {
        let (start, end) = span(data, pos, data[pos]);
        (None, start, end)
    }
}

/// Marks the live entry at `pos` dead (keeping its length readable).
#[inline]
fn kill(data: &mut [u8], pos: usize) {
    data[pos] = data[pos + 2];
    data[pos + 2] = DEAD;
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

/// Appends an entry.
#[inline]
fn push_entry(data: &mut Vec<u8>, fid: i16, encoded: &[u8]) {
    let mut hdr = [0u8; 7];
    let h = header(fid, encoded.len(), &mut hdr);
    data.extend_from_slice(&hdr[..h]);
    data.extend_from_slice(encoded);
}

// Work done by the image (entries visited, index lookups, bytes moved), counted in
// tests only so they can check the cost of an update structurally rather than with a
// clock.
#[cfg(test)]
thread_local! {
    static WORK: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[inline(always)]
fn tally(_n: usize) {
    #[cfg(test)]
    WORK.with(|w| w.set(w.get() + _n as u64));
}

/// Sets a field of an indexed image.
fn set_indexed(data: &mut Vec<u8>, count: &mut u32, index: &mut Index, fid: i16, encoded: &[u8]) {
    tally(1);
    let Some(pos) = index.get(fid) else {
        index.set(fid, data.len());
        push_entry(data, fid, encoded);
        *count += 1;
        return;
    };
    let (_, start, end) = entry(data, pos);
    if end - start == encoded.len() {
        copy_short(&mut data[start..end], encoded);
        return;
    }
    if end == data.len() {
        // The last entry: rewrite it where it is.
        data.truncate(pos);
    } else {
        // Moving the tail would cost O(image) per field: leave the old entry dead and
        // append the new one.
        kill(data, pos);
        index.set_dead(index.dead() + end - pos);
        index.set(fid, data.len());
    }
    push_entry(data, fid, encoded);
    if index.dead() > data.len() - index.dead() {
        compact(data, index);
    }
}

/// Drops the dead entries, moving the live ones down in order (in place: no
/// allocation). Runs when dead bytes exceed live ones, so its O(image) cost is paid for
/// by the bytes the updates that killed those entries wrote.
fn compact(data: &mut Vec<u8>, index: &mut Index) {
    tally(data.len());
    let (mut read, mut write) = (0, 0);
    while read < data.len() {
        let (fid, _, end) = any_entry(data, read);
        if let Some(fid) = fid {
            if write != read {
                data.copy_within(read..end, write);
                tally(1);
                index.set(fid, write);
            }
            write += end - read;
        }
        read = end;
    }
    data.truncate(write);
    index.set_dead(0);
}

impl FieldImage {
    /// An empty image.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every field gone.
    pub fn clear(&mut self) {
        self.data.clear();
        self.count = 0;
        self.index = None;
    }

    /// Fields in the image.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// No field.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes of the image's live entries: about the size of its encoded field list
    /// (what a refresh of it carries), whatever dead entries a large image holds.
    #[inline]
    pub fn encoded_len(&self) -> usize {
        self.data.len() - self.index.as_ref().map_or(0, |i| i.dead())
    }

    /// Bytes of memory held (for the memory accounting in docs/BENCHMARKS.md); the index
    /// of a large image is estimated.
    pub fn heap_bytes(&self) -> usize {
        self.data.capacity() + self.index.as_ref().map_or(0, |i| i.heap_bytes())
    }

    /// Starts loading the image's memory into the CPU cache (a hint; see
    /// [`crate::wire::prefetch`]): a node about to merge an update into an item it has
    /// not touched lately calls this a little ahead. A small image: its first 256
    /// bytes (an update's fields are found by a walk from the start); an indexed one: its
    /// index's slots and its first 1 KiB (each field of an update is a load of its slot
    /// and then of its entry, anywhere in the image).
    #[inline]
    pub fn prefetch(&self) {
        let most = match &self.index {
            None => 256,
            Some(index) => {
                index.prefetch();
                1024
            }
        };
        let len = self.data.len().min(most);
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
        // Whether the image stays small whatever the list holds (the hot path): then the
        // walk runs with no threshold check per field. An entry is at most 5 bytes longer
        // than its field in the list.
        let n = fields.len();
        let most = self.data.len() + fields.as_bytes().len() + 5 * n;
        let small = self.index.is_none()
            && self.count as usize + n <= INDEX_MIN_FIELDS as usize
            && most <= INDEX_MIN_BYTES;
        // One loop over the list, so the field iterator is inlined into it (with a loop
        // per case it is not, which costs ~30% on small images).
        let mut cursor = 0;
        // Fields found behind the one before (the walk went round the image for them),
        // counted where the walk wraps, so an update in image order pays nothing.
        let mut behind = 0;
        for (fid, encoded) in fields.raw_iter() {
            cursor = if small {
                self.set_from::<false>(cursor, fid, encoded, &mut behind)
            } else {
                self.set_growing(cursor, fid, encoded, &mut behind)
            };
        }
        if behind > 1
            && behind * 4 >= n
            && self.index.is_none()
            && self.count >= INDEX_OUT_OF_ORDER_MIN_FIELDS
        {
            self.build_index();
        }
    }

    /// Sets a field of an image that is or may become large: by the walk from `cursor`
    /// (building the index if the image outgrows it), or by the index. Returns the next
    /// cursor.
    #[inline(never)]
    fn set_growing(
        &mut self,
        cursor: usize,
        fid: i16,
        encoded: &[u8],
        behind: &mut usize,
    ) -> usize {
        match self.index.as_mut() {
            Some(index) => {
                set_indexed(&mut self.data, &mut self.count, index, fid, encoded);
                0
            }
            None => self.set_from::<true>(cursor, fid, encoded, behind),
        }
    }

    /// Sets one field from its encoded tag+value bytes.
    pub fn set_raw(&mut self, fid: i16, encoded: &[u8]) {
        self.set_growing(0, fid, encoded, &mut 0);
    }

    /// The entry of `fid` in a small image, searched from the entry at `from` to the end,
    /// then from the start up to `from` (counting in `behind` a field found there).
    #[inline(always)]
    fn find_from(&self, fid: i16, from: usize, behind: &mut usize) -> Option<usize> {
        let data = &self.data[..];
        let mut pos = from;
        while pos < data.len() {
            let (f, _, end) = entry(data, pos);
            tally(1);
            if f == fid {
                return Some(pos);
            }
            pos = end;
        }
        pos = 0;
        while pos < from {
            let (f, _, end) = entry(data, pos);
            tally(1);
            if f == fid {
                *behind += 1;
                return Some(pos);
            }
            pos = end;
        }
        None
    }

    /// Sets a field of a small image, searching from the entry at `from`; returns where
    /// the entry after it starts. With `GROW`, builds the index when the image outgrows
    /// the walk; without, the caller knows it cannot.
    #[inline(always)]
    fn set_from<const GROW: bool>(
        &mut self,
        from: usize,
        fid: i16,
        encoded: &[u8],
        behind: &mut usize,
    ) -> usize {
        let Some(pos) = self.find_from(fid, from, behind) else {
            push_entry(&mut self.data, fid, encoded);
            self.count += 1;
            if GROW && (self.count > INDEX_MIN_FIELDS || self.data.len() > INDEX_MIN_BYTES) {
                self.build_index();
            }
            return self.data.len();
        };
        let (_, start, end) = entry(&self.data, pos);
        if end - start == encoded.len() {
            // Same length (the common case for prices and sizes): overwrite in place.
            copy_short(&mut self.data[start..end], encoded);
            return end;
        }
        // A new length: move the entries after it (at most INDEX_MIN_BYTES), then write
        // header and value.
        let mut hdr = [0u8; 7];
        let h = header(fid, encoded.len(), &mut hdr);
        let new_end = pos + h + encoded.len();
        let len = self.data.len();
        tally(len - end);
        if new_end > end {
            self.data.resize(len + (new_end - end), 0);
            self.data.copy_within(end..len, new_end);
        } else {
            self.data.copy_within(end..len, new_end);
            self.data.truncate(len - (end - new_end));
        }
        self.data[pos..pos + h].copy_from_slice(&hdr[..h]);
        self.data[pos + h..new_end].copy_from_slice(encoded);
        if GROW && self.data.len() > INDEX_MIN_BYTES {
            self.build_index();
        }
        new_end
    }

    /// Indexes a small image (which has no dead entries).
    #[cold]
    fn build_index(&mut self) {
        let mut index = Index::with_capacity(self.count as usize);
        let mut pos = 0;
        while pos < self.data.len() {
            let (fid, _, end) = entry(&self.data, pos);
            tally(1);
            index.set(fid, pos);
            pos = end;
        }
        self.index = Some(index);
    }

    /// Sets one field from a value.
    pub fn set(&mut self, fid: i16, value: Value<'_>) {
        let mut tmp = Vec::with_capacity(16);
        value.encode(&mut tmp);
        self.set_raw(fid, &tmp);
    }

    /// The encoded tag+value of a field.
    pub fn get_raw(&self, fid: i16) -> Option<&[u8]> {
        let pos = match &self.index {
            Some(index) => index.get(fid)?,
            None => self.find_from(fid, 0, &mut 0)?,
        };
        let (_, start, end) = entry(&self.data, pos);
        Some(&self.data[start..end])
    }

    /// Every field in image order: (fid, encoded tag+value). That is first-seen order
    /// for a small image; in a large one a field whose length changed comes after the
    /// others.
    fn fields(&self) -> impl Iterator<Item = (i16, &[u8])> + '_ {
        let data = &self.data[..];
        let mut pos = 0;
        std::iter::from_fn(move || loop {
            if pos >= data.len() {
                return None;
            }
            let (fid, start, end) = any_entry(data, pos);
            pos = end;
            if let Some(fid) = fid {
                return Some((fid, &data[start..end]));
            }
        })
    }

    /// Writes every field (or only those in `view`, in image order) as a field list.
    ///
    /// `view` must be sorted in ascending order (duplicates are harmless), as the node
    /// keeps its streams' views: each field is then looked up by binary search, so a
    /// large view costs O(log m) per field. An unsorted view fails a debug assertion; in
    /// a release build it is still honoured, with a linear search per field.
    pub fn write(&self, out: &mut Vec<u8>, view: Option<&[i16]>) -> u16 {
        let mut w = FieldListWriter::new(out);
        match view {
            None => {
                for (fid, encoded) in self.fields() {
                    w.push_raw(fid, encoded);
                }
            }
            Some(view) => {
                let sorted = view.windows(2).all(|p| p[0] <= p[1]);
                debug_assert!(sorted, "FieldImage::write: view {view:?} is not sorted");
                for (fid, encoded) in self.fields() {
                    let wanted = if sorted {
                        view.binary_search(&fid).is_ok()
                    } else {
                        view.contains(&fid)
                    };
                    if wanted {
                        w.push_raw(fid, encoded);
                    }
                }
            }
        }
        w.finish()
    }

    /// The image as an encoded field list in a new vector.
    pub fn to_field_list_bytes(&self) -> Vec<u8> {
        // Entry headers are at least as long as the field ids they become.
        let dead = self.index.as_ref().map_or(0, |i| i.dead());
        let mut out = Vec::with_capacity(self.data.len() - dead + 2);
        self.write(&mut out, None);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field::{encode_field_list, Real};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

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
        img.write(&mut viewed, Some(&[22, 30]));
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
            if img.index.is_none() {
                let expected = encode_field_list(model.iter().map(|(f, v)| (*f, Value::Utf8(v))));
                assert_eq!(out, expected, "round {round}");
            } else {
                // Past INDEX_MIN_BYTES a field whose length changed goes last.
                let mut got: Vec<(i16, String)> = FieldList::decode(&out)
                    .unwrap()
                    .iter()
                    .map(|(f, v)| match v {
                        Value::Utf8(s) => (f, s.to_string()),
                        other => panic!("{other:?}"),
                    })
                    .collect();
                got.sort();
                let mut expected = model.clone();
                expected.sort();
                assert_eq!(got, expected, "round {round}");
            }
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

    fn work() -> u64 {
        WORK.with(|w| w.get())
    }

    fn fid_at(i: usize) -> i16 {
        (i as i32 - 30_000) as i16
    }

    /// An image of `n` fields (ids from -30,000) of `width`-byte values.
    fn wide_image(n: usize, width: usize) -> FieldImage {
        let v = "v".repeat(width);
        let bytes = encode_field_list((0..n).map(|i| (fid_at(i), Value::Ascii(&v))));
        let mut img = FieldImage::new();
        img.apply(FieldList::decode(&bytes).unwrap());
        assert_eq!(img.len(), n);
        img
    }

    /// The attack: a 60,000-field image, then 15,000-field updates in reverse field
    /// order (8 of them: every field updated twice). Returns the image, the work spent
    /// on the updates and the bytes of entries they wrote. The old linear search visited
    /// about 60,000 entries per field (9e8 per update); a splice per length change moved
    /// half the image (about 270 KB) per field.
    fn reverse_updates(width_of: impl Fn(usize) -> usize) -> (FieldImage, u64, u64) {
        let mut img = wide_image(60_000, 4);
        let start = work();
        let mut written = 0;
        for round in 0..8 {
            let values: Vec<String> = (0..15_000)
                .map(|i| "u".repeat(width_of(round + i)))
                .collect();
            let bytes = encode_field_list(
                (0..15_000)
                    .rev()
                    .map(|i| (fid_at(i * 4 + round % 4), Value::Ascii(&values[i]))),
            );
            // Entry header (3 bytes), tag, length and text.
            written += values.iter().map(|v| 5 + v.len() as u64).sum::<u64>();
            img.apply(FieldList::decode(&bytes).unwrap());
        }
        (img, work() - start, written)
    }

    #[test]
    fn reverse_order_updates_of_a_large_image_cost_linear_work() {
        let (img, spent, _) = reverse_updates(|_| 4);
        assert_eq!(img.len(), 60_000);
        // 120,000 field updates: one index lookup each (the old code: 7.2e9 visits).
        assert!(
            spent <= 2 * 120_000,
            "work {spent} for 120,000 field updates"
        );
    }

    #[test]
    fn an_image_updated_out_of_its_order_is_indexed_and_in_order_is_not() {
        let update = |img: &mut FieldImage, order: &[usize]| {
            let bytes = encode_field_list(order.iter().map(|&i| (fid_at(i), Value::Ascii("w"))));
            img.apply(FieldList::decode(&bytes).unwrap());
        };
        // In image order (with gaps): the walk stays, each field found ahead.
        let mut img = wide_image(40, 1);
        update(&mut img, &[1, 5, 9, 20, 33, 39]);
        assert!(img.index.is_none());
        // Out of order: a few fields behind the one before, and it is indexed; the
        // next such update costs a lookup per field, not a walk round the image.
        update(&mut img, &[30, 2, 25, 7, 38, 11]);
        assert!(img.index.is_some());
        let start = work();
        update(&mut img, &[35, 3, 28, 6, 39, 10]);
        assert_eq!(work() - start, 6);
        assert_eq!(img.len(), 40);
        // A small image is never indexed for it.
        let mut small = wide_image(10, 1);
        update(&mut small, &[9, 1, 8, 2, 7, 3]);
        assert!(small.index.is_none());
    }

    #[test]
    fn length_changes_in_a_large_image_cost_linear_work() {
        // Every value changes length (4 -> 1..=9 bytes, never 4 twice in a row).
        let width = |k: usize| [1, 2, 3, 5, 6, 7, 8, 9][k % 8];
        let (img, spent, written) = reverse_updates(width);
        assert_eq!(img.len(), 60_000);
        for i in [0, 1, 7, 14_999] {
            let round = 5; // the last to write fids i * 4 + 1
            let mut enc = Vec::new();
            Value::Ascii(&"u".repeat(width(round + i))).encode(&mut enc);
            assert_eq!(img.get_raw(fid_at(i * 4 + 1)), Some(&enc[..]));
        }
        assert!(img.index.as_ref().unwrap().dead() <= img.data.len() / 2);
        // A lookup per field, plus compactions paid for by the bytes the updates wrote
        // (each compaction scans the image once; it runs when the dead bytes, all
        // written by updates, exceed the live ones). The old code: 1.9e10.
        let image = 60_000 * 9;
        assert!(
            spent <= 2 * (120_000 + written + image),
            "work {spent}, {written} bytes written"
        );
    }

    /// A field's value in the model tests: `len` copies of one letter.
    fn text(len: usize, letter: u8) -> String {
        String::from_utf8(vec![b'a' + letter % 26; len]).unwrap()
    }

    fn encoded(v: Value<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        v.encode(&mut out);
        out
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// (fid, value length, letter) per field, applied as one field list.
        Apply(Vec<(i16, usize, u8)>),
        Set(i16, usize, u8),
        Clear,
    }

    /// Lengths around the one-byte header limit, short ones and a few long strings (so
    /// some images pass INDEX_MIN_BYTES with few fields).
    fn length() -> impl Strategy<Value = usize> {
        prop_oneof![
            12 => 0usize..12,
            2 => 248usize..262,
            1 => 1_500usize..5_000,
        ]
    }

    fn ops() -> impl Strategy<Value = Vec<Op>> {
        // Up to 8..200 distinct ids per case: images on both sides of INDEX_MIN_FIELDS.
        (8i16..200).prop_flat_map(|ids| {
            let field = move || (-8i16..ids - 8, length(), any::<u8>());
            let op = prop_oneof![
                8 => proptest::collection::vec(field(), 0..160).prop_map(Op::Apply),
                2 => field().prop_map(|(f, n, l)| Op::Set(f, n, l)),
                1 => Just(Op::Clear),
            ];
            proptest::collection::vec(op, 1..24)
        })
    }

    /// Checks an image against the model: fid -> encoded value, and first-seen order.
    fn check(img: &FieldImage, model: &BTreeMap<i16, Vec<u8>>, order: &[i16]) {
        assert_eq!(img.len(), model.len());
        assert_eq!(img.is_empty(), model.is_empty());
        for (fid, v) in model {
            assert_eq!(img.get_raw(*fid), Some(&v[..]), "fid {fid}");
        }
        assert_eq!(img.get_raw(i16::MIN), None);
        assert_eq!(img.get_raw(i16::MAX), None);
        let bytes = img.to_field_list_bytes();
        let list = FieldList::decode(&bytes).expect("an image is a valid field list");
        let written: Vec<(i16, &[u8])> = list.raw_iter().collect();
        let as_map: BTreeMap<i16, Vec<u8>> =
            written.iter().map(|(f, v)| (*f, v.to_vec())).collect();
        assert_eq!(written.len(), model.len(), "each field once");
        assert_eq!(&as_map, model);
        let fids: Vec<i16> = written.iter().map(|(f, _)| *f).collect();
        if img.index.is_none() {
            assert_eq!(fids, order, "a small image keeps first-seen order");
            assert!(model.len() <= INDEX_MIN_FIELDS as usize);
        }
        // A sorted view: every third field of the model and ids it does not hold.
        let mut view: Vec<i16> = model.keys().copied().step_by(3).collect();
        view.extend([i16::MIN, -100, 500]);
        view.sort_unstable();
        let mut out = Vec::new();
        let n = img.write(&mut out, Some(&view));
        let viewed: Vec<(i16, &[u8])> = FieldList::decode(&out).unwrap().raw_iter().collect();
        let expected: Vec<(i16, &[u8])> = written
            .iter()
            .copied()
            .filter(|(f, _)| view.contains(f))
            .collect();
        assert_eq!(viewed, expected);
        assert_eq!(n as usize, expected.len());
        assert!(img.heap_bytes() >= img.data.len());
        // The index's bookkeeping: every live entry indexed at its place, dead bytes
        // counted, and compaction keeping them at most the live ones.
        if let Some(index) = &img.index {
            let (mut pos, mut live, mut dead, mut entries) = (0, 0, 0, 0);
            while pos < img.data.len() {
                let (fid, _, end) = any_entry(&img.data, pos);
                match fid {
                    Some(fid) => {
                        assert_eq!(index.get(fid), Some(pos));
                        live += end - pos;
                        entries += 1;
                    }
                    None => dead += end - pos,
                }
                pos = end;
            }
            assert_eq!(pos, img.data.len());
            assert_eq!(entries, model.len());
            assert_eq!(index.len(), model.len());
            assert_eq!(dead, index.dead());
            assert!(dead <= live, "dead {dead} > live {live}");
        }
    }

    proptest! {
        #[test]
        fn image_matches_a_map_model(ops in ops()) {
            let mut img = FieldImage::new();
            let mut model: BTreeMap<i16, Vec<u8>> = BTreeMap::new();
            let mut order: Vec<i16> = Vec::new();
            let set = |model: &mut BTreeMap<i16, Vec<u8>>, order: &mut Vec<i16>, fid, v| {
                if model.insert(fid, v).is_none() {
                    order.push(fid);
                }
            };
            for op in &ops {
                match op {
                    Op::Apply(fields) => {
                        let texts: Vec<String> =
                            fields.iter().map(|(_, n, l)| text(*n, *l)).collect();
                        let bytes = encode_field_list(
                            fields.iter().zip(&texts).map(|((f, _, _), t)| (*f, Value::Ascii(t))),
                        );
                        img.apply(FieldList::decode(&bytes).unwrap());
                        for ((f, _, _), t) in fields.iter().zip(&texts) {
                            set(&mut model, &mut order, *f, encoded(Value::Ascii(t)));
                        }
                    }
                    Op::Set(f, n, l) => {
                        let t = text(*n, *l);
                        img.set(*f, Value::Ascii(&t));
                        set(&mut model, &mut order, *f, encoded(Value::Ascii(&t)));
                    }
                    Op::Clear => {
                        img.clear();
                        model.clear();
                        order.clear();
                    }
                }
                check(&img, &model, &order);
            }
        }
    }

    #[test]
    fn a_large_image_compacts_and_stays_bounded() {
        // One field in the middle of a 1,000-field image changes length 10,000 times:
        // its old entries die and are compacted away, so the block stays within twice
        // the live bytes (plus the field), and the other fields keep their order.
        let mut img = wide_image(1_000, 4);
        let live = img.data.len();
        for i in 0..10_000 {
            img.set(fid_at(500), Value::Ascii(&text(i % 20, 1)));
            assert!(
                img.data.len() <= 2 * (live + 32),
                "{} bytes",
                img.data.len()
            );
        }
        assert_eq!(img.len(), 1_000);
        let fids: Vec<i16> = FieldList::decode(&img.to_field_list_bytes())
            .unwrap()
            .iter()
            .map(|(f, _)| f)
            .collect();
        let mut expected: Vec<i16> = (0..1_000).filter(|&i| i != 500).map(fid_at).collect();
        expected.push(fid_at(500));
        assert_eq!(fids, expected, "the moved field goes last");
        assert_eq!(
            img.get_raw(fid_at(500)),
            Some(&encoded(Value::Ascii(&text(9_999 % 20, 1)))[..])
        );
    }

    #[test]
    fn a_view_is_searched_by_binary_search() {
        // 30,000 fields written through a 30,000-id view: O(n log m), not O(n m).
        let img = wide_image(30_000, 4);
        let view: Vec<i16> = (0..30_000).step_by(2).map(fid_at).collect();
        let mut out = Vec::new();
        assert_eq!(img.write(&mut out, Some(&view)), 15_000);
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
