//! RWF containers: field lists (item data), element lists (admin data), maps and
//! filter lists (the source directory), series (dictionaries) and arrays.
//!
//! Decoding covers what consumers and providers send a node (field lists, element
//! lists, arrays, maps of field lists); encoding what a node sends. Set-defined data
//! (entries described once by a set definition) is not decoded: a field list that has
//! some is refused by its caller with a reason.

use super::primitive::{self, dt};
use super::wire::{put_buf15, put_sized_u16ob, put_u16, put_u16ob, LenSlot, Reader, RwfError};

/// Field and element list flags (the same bits for both).
const LIST_HAS_INFO: u8 = 0x01;
const LIST_HAS_SET_DATA: u8 = 0x02;
const LIST_HAS_STANDARD_DATA: u8 = 0x08;

/// What a list's errors call its parts.
struct ListNames {
    list: &'static str,
    flags: &'static str,
    info: &'static str,
    count: &'static str,
    set_data: &'static str,
}

/// The head field and element lists share: flags, the info (skipped), set-defined
/// data (refused), and how many standard entries follow.
fn list_head(r: &mut Reader<'_>, names: &ListNames) -> Result<u16, RwfError> {
    if r.is_empty() {
        return Ok(0);
    }
    let flags = r.u8(names.flags)?;
    if flags & LIST_HAS_INFO != 0 {
        let n = r.u8(names.info)? as usize;
        r.take(n, names.info)?;
    }
    if flags & LIST_HAS_SET_DATA != 0 {
        return Err(RwfError::invalid(names.list, names.set_data));
    }
    if flags & LIST_HAS_STANDARD_DATA != 0 {
        r.u16(names.count)
    } else {
        Ok(0)
    }
}

/// The next entry of a container that said how many it holds: counts it down, and
/// ends the iteration at the first error (what follows a bad entry cannot be found).
fn next_counted<T>(
    left: &mut u16,
    read: impl FnOnce() -> Result<T, RwfError>,
) -> Option<Result<T, RwfError>> {
    if *left == 0 {
        return None;
    }
    *left -= 1;
    let entry = read();
    if entry.is_err() {
        *left = 0;
    }
    Some(entry)
}

/// A container's `u16` entry count: reserved when it begins, patched when it ends.
struct EntryCount {
    at: usize,
    count: u16,
}

impl EntryCount {
    fn reserve(out: &mut Vec<u8>) -> EntryCount {
        let at = out.len();
        put_u16(out, 0);
        EntryCount { at, count: 0 }
    }

    fn add(&mut self) {
        self.count = self.count.wrapping_add(1);
    }

    fn patch(self, out: &mut [u8]) {
        out[self.at..self.at + 2].copy_from_slice(&self.count.to_be_bytes());
    }
}

/// A field list's entries: field id and the value's bytes (typed by the dictionary).
pub struct FieldIter<'a> {
    r: Reader<'a>,
    left: u16,
}

impl<'a> FieldIter<'a> {
    /// Reads a container's head from `bytes`; its entries follow as the iterator's items.
    pub fn new(bytes: &'a [u8]) -> Result<FieldIter<'a>, RwfError> {
        let mut r = Reader::new(bytes);
        let names = ListNames {
            list: "a field list",
            flags: "a field list's flags",
            info: "a field list's info",
            count: "a field list's count",
            set_data: "set-defined data is not supported (send standard data)",
        };
        let left = list_head(&mut r, &names)?;
        Ok(FieldIter { r, left })
    }

    /// Entries in the list.
    pub fn count(&self) -> u16 {
        self.left
    }
}

impl<'a> Iterator for FieldIter<'a> {
    type Item = Result<(i16, &'a [u8]), RwfError>;

    fn next(&mut self) -> Option<Self::Item> {
        let r = &mut self.r;
        next_counted(&mut self.left, || {
            let fid = r.i16("a field id")?;
            Ok((fid, r.buf16("a field's value")?))
        })
    }
}

/// Writes a field list: flags, the count (patched at the end), entries.
pub struct FieldListWriter {
    count: EntryCount,
}

impl FieldListWriter {
    /// Starts one in `out`.
    pub fn begin(out: &mut Vec<u8>) -> FieldListWriter {
        out.push(LIST_HAS_STANDARD_DATA);
        let count = EntryCount::reserve(out);
        FieldListWriter { count }
    }

    /// One entry whose value body `put` writes (its length is measured, a byte
    /// reserved for the usual short value and widened for a long one).
    pub fn field(&mut self, out: &mut Vec<u8>, fid: i16, put: impl FnOnce(&mut Vec<u8>)) {
        put_u16(out, fid as u16);
        put_sized_u16ob(out, put);
        self.count.add();
    }

    /// Patches the entry count into `out` (once every entry is written).
    pub fn end(self, out: &mut [u8]) {
        self.count.patch(out);
    }
}

/// An element list's entries: name, data type, value bytes.
pub struct ElementIter<'a> {
    r: Reader<'a>,
    left: u16,
}

impl<'a> ElementIter<'a> {
    /// Reads a container's head from `bytes`; its entries follow as the iterator's items.
    pub fn new(bytes: &'a [u8]) -> Result<ElementIter<'a>, RwfError> {
        let mut r = Reader::new(bytes);
        let names = ListNames {
            list: "an element list",
            flags: "an element list's flags",
            info: "an element list's info",
            count: "an element list's count",
            set_data: "set-defined data is not supported",
        };
        let left = list_head(&mut r, &names)?;
        Ok(ElementIter { r, left })
    }
}

/// One element: name, data type and the value's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Element<'a> {
    /// The element's name.
    pub name: &'a [u8],
    /// Its RWF type (`dt`).
    pub data_type: u8,
    /// The value's bytes.
    pub value: &'a [u8],
}

impl<'a> Element<'a> {
    /// The value as an unsigned integer, if it is one.
    pub fn uint(&self) -> Option<u64> {
        match self.data_type {
            dt::UINT | dt::INT | dt::ENUM => primitive::uint(self.value).ok().flatten(),
            _ => None,
        }
    }

    /// The value as text, if it is a string or buffer.
    pub fn text(&self) -> Option<&'a [u8]> {
        matches!(
            self.data_type,
            dt::ASCII_STRING | dt::UTF8_STRING | dt::RMTES_STRING | dt::BUFFER
        )
        .then_some(self.value)
    }
}

impl<'a> Iterator for ElementIter<'a> {
    type Item = Result<Element<'a>, RwfError>;

    fn next(&mut self) -> Option<Self::Item> {
        let r = &mut self.r;
        next_counted(&mut self.left, || {
            let name = r.buf15("an element's name")?;
            let data_type = r.u8("an element's type")?;
            let value = if data_type == dt::NO_DATA {
                &[][..]
            } else {
                r.buf16("an element's value")?
            };
            Ok(Element {
                name,
                data_type,
                value,
            })
        })
    }
}

/// Writes an element list.
pub struct ElementListWriter {
    count: EntryCount,
}

impl ElementListWriter {
    /// Starts one in `out`.
    pub fn begin(out: &mut Vec<u8>) -> ElementListWriter {
        out.push(LIST_HAS_STANDARD_DATA);
        let count = EntryCount::reserve(out);
        ElementListWriter { count }
    }

    /// One element whose value `put` writes.
    pub fn element(
        &mut self,
        out: &mut Vec<u8>,
        name: &str,
        data_type: u8,
        put: impl FnOnce(&mut Vec<u8>),
    ) {
        put_buf15(out, name.as_bytes());
        out.push(data_type);
        let _ = LenSlot::wrap(out, put);
        self.count.add();
    }

    /// An unsigned integer element.
    pub fn uint(&mut self, out: &mut Vec<u8>, name: &str, v: u64) {
        self.element(out, name, dt::UINT, |o| primitive::put_uint(o, v));
    }

    /// An ASCII string element.
    pub fn ascii(&mut self, out: &mut Vec<u8>, name: &str, v: &[u8]) {
        self.element(out, name, dt::ASCII_STRING, |o| o.extend_from_slice(v));
    }

    /// Patches the entry count into `out` (once every entry is written).
    pub fn end(self, out: &mut [u8]) {
        self.count.patch(out);
    }
}

/// An array's items: each a value's bytes.
pub struct ArrayIter<'a> {
    r: Reader<'a>,
    /// The RWF type of its entries (`dt`).
    pub primitive: u8,
    item_len: u16,
    left: u16,
}

impl<'a> ArrayIter<'a> {
    /// Reads a container's head from `bytes`; its entries follow as the iterator's items.
    pub fn new(bytes: &'a [u8]) -> Result<ArrayIter<'a>, RwfError> {
        let mut r = Reader::new(bytes);
        if r.is_empty() {
            return Ok(ArrayIter {
                r,
                primitive: 0,
                item_len: 0,
                left: 0,
            });
        }
        let primitive = r.u8("an array's type")?;
        let item_len = r.u16ob("an array's item length")?;
        let left = r.u16("an array's count")?;
        Ok(ArrayIter {
            r,
            primitive,
            item_len,
            left,
        })
    }
}

impl<'a> Iterator for ArrayIter<'a> {
    type Item = Result<&'a [u8], RwfError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (r, item_len) = (&mut self.r, self.item_len);
        next_counted(&mut self.left, || {
            if item_len > 0 {
                r.take(item_len as usize, "an array's item")
            } else {
                r.buf16("an array's item")
            }
        })
    }
}

/// An array of variable-length items, each written by `put` into its own slot.
pub fn put_array<T>(
    out: &mut Vec<u8>,
    primitive: u8,
    items: &[T],
    mut put: impl FnMut(&mut Vec<u8>, &T),
) {
    out.push(primitive);
    put_u16ob(out, 0);
    put_u16(out, items.len().min(0xFFFF) as u16);
    for item in items.iter().take(0xFFFF) {
        put_sized_u16ob(out, |o| put(o, item));
    }
}

/// Map entry actions.
pub mod map_action {
    // Each constant is the wire's number, under the name the SDK's public code gives it.
    #![allow(missing_docs)]
    pub const UPDATE: u8 = 1;
    pub const ADD: u8 = 2;
    pub const DELETE: u8 = 3;
}

/// Writes a map of entries keyed by a primitive.
pub struct MapWriter {
    count: EntryCount,
}

impl MapWriter {
    /// A map with `key_type` keys and `container` values (no summary data).
    pub fn begin(out: &mut Vec<u8>, key_type: u8, container: u8) -> MapWriter {
        out.push(0);
        out.push(key_type);
        out.push(container.wrapping_sub(128));
        let count = EntryCount::reserve(out);
        MapWriter { count }
    }

    /// One entry: action, the key's bytes, and (unless deleted) the value `put` writes.
    pub fn entry(
        &mut self,
        out: &mut Vec<u8>,
        action: u8,
        key: &[u8],
        put: impl FnOnce(&mut Vec<u8>),
    ) {
        out.push(action);
        put_buf15(out, key);
        if action != map_action::DELETE {
            let _ = LenSlot::wrap(out, put);
        }
        self.count.add();
    }

    /// Patches the entry count into `out` (once every entry is written).
    pub fn end(self, out: &mut [u8]) {
        self.count.patch(out);
    }
}

/// Filter entry actions.
pub mod filter_action {
    // Each constant is the wire's number, under the name the SDK's public code gives it.
    #![allow(missing_docs)]
    pub const UPDATE: u8 = 1;
    pub const SET: u8 = 2;
    pub const CLEAR: u8 = 3;
}

/// Writes a filter list.
pub struct FilterListWriter {
    count_at: usize,
    count: u8,
}

impl FilterListWriter {
    /// Starts one in `out`.
    pub fn begin(out: &mut Vec<u8>, container: u8) -> FilterListWriter {
        out.push(0);
        out.push(container.wrapping_sub(128));
        let count_at = out.len();
        out.push(0);
        FilterListWriter { count_at, count: 0 }
    }

    /// One entry, whose body `put` writes.
    pub fn entry(&mut self, out: &mut Vec<u8>, action: u8, id: u8, put: impl FnOnce(&mut Vec<u8>)) {
        out.push(action);
        out.push(id);
        if action != filter_action::CLEAR {
            let _ = LenSlot::wrap(out, put);
        }
        self.count = self.count.wrapping_add(1);
    }

    /// Patches the entry count into `out` (once every entry is written).
    pub fn end(self, out: &mut [u8]) {
        out[self.count_at] = self.count;
    }
}

/// Series flags.
const SERIES_HAS_SUMMARY_DATA: u8 = 0x02;

/// Writes a series of entries of one container type, with summary data first.
pub struct SeriesWriter {
    count: EntryCount,
}

impl SeriesWriter {
    /// A series whose summary data (`summary`, of the entries' type) comes first.
    pub fn begin(out: &mut Vec<u8>, container: u8, summary: &[u8]) -> SeriesWriter {
        out.push(if summary.is_empty() {
            0
        } else {
            SERIES_HAS_SUMMARY_DATA
        });
        out.push(container.wrapping_sub(128));
        if !summary.is_empty() {
            put_buf15(out, summary);
        }
        let count = EntryCount::reserve(out);
        SeriesWriter { count }
    }

    /// One entry, whose body `put` writes.
    pub fn entry(&mut self, out: &mut Vec<u8>, put: impl FnOnce(&mut Vec<u8>)) {
        let _ = LenSlot::wrap(out, put);
        self.count.add();
    }

    /// Patches the entry count into `out` (once every entry is written).
    pub fn end(self, out: &mut [u8]) {
        self.count.patch(out);
    }
}

/// Map flags this decoder reads.
const MAP_HAS_SET_DEFS: u8 = 0x01;
const MAP_HAS_SUMMARY: u8 = 0x02;
const MAP_HAS_PER_ENTRY_PERM: u8 = 0x04;
const MAP_HAS_TOTAL_COUNT_HINT: u8 = 0x08;
const MAP_HAS_KEY_FIELD_ID: u8 = 0x10;

/// A map's entries: action, key bytes, value bytes (empty when deleted).
pub struct MapIter<'a> {
    r: Reader<'a>,
    /// The RWF type of the map's keys (`dt`).
    pub key_type: u8,
    /// The container type of its entries' payloads (`dt`).
    pub container: u8,
    per_entry_perm: bool,
    left: u16,
}

impl<'a> MapIter<'a> {
    /// Reads a container's head from `bytes`; its entries follow as the iterator's items.
    pub fn new(bytes: &'a [u8]) -> Result<MapIter<'a>, RwfError> {
        let mut r = Reader::new(bytes);
        let flags = r.u8("a map's flags")?;
        let key_type = r.u8("a map's key type")?;
        let container = r.u8("a map's container type")?.wrapping_add(128);
        if flags & MAP_HAS_KEY_FIELD_ID != 0 {
            r.u16("a map's key field id")?;
        }
        if flags & MAP_HAS_SET_DEFS != 0 {
            r.buf15("a map's set definitions")?;
        }
        if flags & MAP_HAS_SUMMARY != 0 {
            r.buf15("a map's summary data")?;
        }
        if flags & MAP_HAS_TOTAL_COUNT_HINT != 0 {
            r.u30rb("a map's count hint")?;
        }
        let left = r.u16("a map's count")?;
        Ok(MapIter {
            r,
            key_type,
            container,
            per_entry_perm: flags & MAP_HAS_PER_ENTRY_PERM != 0,
            left,
        })
    }
}

impl<'a> Iterator for MapIter<'a> {
    type Item = Result<(u8, &'a [u8], &'a [u8]), RwfError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (r, per_entry_perm, container) = (&mut self.r, self.per_entry_perm, self.container);
        next_counted(&mut self.left, || {
            let b = r.u8("a map entry's action")?;
            let action = b & 0x0F;
            if per_entry_perm && b & 0x10 != 0 {
                r.buf15("a map entry's permissions")?;
            }
            let key = r.buf15("a map entry's key")?;
            let value = if action == map_action::DELETE || container == dt::NO_DATA {
                &[][..]
            } else {
                r.buf16("a map entry's value")?
            };
            Ok((action, key, value))
        })
    }
}

/// A filter list's entries: action, filter id, value bytes.
pub struct FilterIter<'a> {
    r: Reader<'a>,
    container: u8,
    per_entry_perm: bool,
    left: u16,
}

impl<'a> FilterIter<'a> {
    /// Reads a container's head from `bytes`; its entries follow as the iterator's items.
    pub fn new(bytes: &'a [u8]) -> Result<FilterIter<'a>, RwfError> {
        let mut r = Reader::new(bytes);
        let flags = r.u8("a filter list's flags")?;
        let container = r.u8("a filter list's container type")?.wrapping_add(128);
        if flags & 0x02 != 0 {
            r.u8("a filter list's count hint")?;
        }
        let left = u16::from(r.u8("a filter list's count")?);
        Ok(FilterIter {
            r,
            container,
            per_entry_perm: flags & 0x01 != 0,
            left,
        })
    }
}

impl<'a> Iterator for FilterIter<'a> {
    type Item = Result<(u8, u8, &'a [u8]), RwfError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (r, per_entry_perm) = (&mut self.r, self.per_entry_perm);
        let mut container = self.container;
        next_counted(&mut self.left, || {
            let b = r.u8("a filter entry's action")?;
            let action = b & 0x0F;
            let id = r.u8("a filter id")?;
            if b & 0x20 != 0 {
                container = r.u8("a filter entry's container type")?.wrapping_add(128);
            }
            if per_entry_perm && b & 0x10 != 0 {
                r.buf15("a filter entry's permissions")?;
            }
            let value = if action == filter_action::CLEAR || container == dt::NO_DATA {
                &[][..]
            } else {
                r.buf16("a filter entry's value")?
            };
            Ok((action, id, value))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rwf::hex;

    #[test]
    fn a_length_byte_of_ff_is_255_bytes_as_the_sdk_reads_it() {
        // One field (fid 3) of 255 bytes whose length is the single byte FF; the SDK
        // takes the three-byte form only after FE.
        let mut b = hex("08 00 01 00 03 FF");
        b.extend([b'a'; 255]);
        let fields: Vec<_> = FieldIter::new(&b).unwrap().map(Result::unwrap).collect();
        assert_eq!(fields, vec![(3, &[b'a'; 255][..])]);
    }

    #[test]
    fn field_lists_both_ways() {
        let mut out = Vec::new();
        let mut w = FieldListWriter::begin(&mut out);
        w.field(&mut out, 22, |o| o.extend_from_slice(&[0x0C, 0x04, 0xD2]));
        w.field(&mut out, 25, |o| o.extend_from_slice(&[0x0C, 0x04, 0xD3]));
        w.field(&mut out, 3, |o| o.extend_from_slice(&[b'x'; 300]));
        w.end(&mut out);
        let mut expected = hex("08 00 03 00 16 03 0C 04 D2 00 19 03 0C 04 D3 00 03 FE 01 2C");
        expected.extend([b'x'; 300]);
        assert_eq!(out, expected);
        let fields: Vec<_> = FieldIter::new(&out).unwrap().map(Result::unwrap).collect();
        assert_eq!(fields[0], (22, &[0x0C, 0x04, 0xD2][..]));
        assert_eq!(fields[2].1.len(), 300);
        // With an info block, as some providers send.
        let info = hex("09 03 01 00 00 00 02 00 16 03 0C 04 D2 00 19 03 0C 04 D3");
        assert_eq!(FieldIter::new(&info).unwrap().count(), 2);
        // Cut anywhere: an error, never a panic.
        for n in 1..info.len() {
            let _ = FieldIter::new(&info[..n]).map(|i| i.collect::<Vec<_>>());
        }
    }

    #[test]
    fn the_sdks_directory_map_is_what_the_writers_make() {
        // Map UINT 1 -> FilterList -> INFO SET -> {Name, Capabilities [6,7], QoS [RT/TBT]}.
        let mut out = Vec::new();
        let mut map = MapWriter::begin(&mut out, dt::UINT, dt::FILTER_LIST);
        map.entry(&mut out, map_action::ADD, &[1], |o| {
            let mut fl = FilterListWriter::begin(o, dt::ELEMENT_LIST);
            fl.entry(o, filter_action::SET, 1, |o| {
                let mut el = ElementListWriter::begin(o);
                el.ascii(o, "Name", b"SVC");
                el.element(o, "Capabilities", dt::ARRAY, |o| {
                    put_array(o, dt::UINT, &[6u64, 7], |o, v| primitive::put_uint(o, *v));
                });
                el.element(o, "QoS", dt::ARRAY, |o| {
                    put_array(o, dt::QOS, &[0x22u8], |o, q| o.push(*q));
                });
                el.end(o);
            });
            fl.end(o);
        });
        map.end(&mut out);
        // The SDK's bytes, but for "SVC": the SDK wrote its length in one byte (11 03),
        // we in the reserved form (11 FE 00 03), so both enclosing lengths are 2 more.
        let mut expected = hex("00 04 07 00 01 02 01 01 FE 00 3E 00 05 01 02 01 FE 00 36 08 00 03");
        expected.extend(hex("04 4E 61 6D 65 11 FE 00 03 53 56 43"));
        expected.extend(hex(
            "0C 43 61 70 61 62 69 6C 69 74 69 65 73 0F FE 00 08 04 00 00 02 01 06 01 07",
        ));
        expected.extend(hex("03 51 6F 53 0F FE 00 06 0C 00 00 01 01 22"));
        assert_eq!(out, expected);
    }

    #[test]
    fn element_lists_and_arrays_decode() {
        let b = hex("08 00 02 0D 41 70 70 6C 69 63 61 74 69 6F 6E 49 64 11 03 32 35 36 04 52 6F 6C 65 04 01 00");
        let els: Vec<_> = ElementIter::new(&b).unwrap().map(Result::unwrap).collect();
        assert_eq!(els[0].name, b"ApplicationId");
        assert_eq!(els[0].text(), Some(&b"256"[..]));
        assert_eq!(els[1].uint(), Some(0));
        let a = hex("04 00 00 02 01 06 01 07");
        let items: Vec<_> = ArrayIter::new(&a).unwrap().map(Result::unwrap).collect();
        assert_eq!(items, [&[6u8][..], &[7u8][..]]);
    }
}
