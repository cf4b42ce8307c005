//! The Dictionary domain's refreshes: each dictionary as a series of element lists,
//! split into parts, encoded once per node and sent to every consumer that asks.
//!
//! As the SDK's own providers send them: entries are set data of one local set
//! definition (names and types sent once per part, not per entry); summary data (the
//! dictionary's `Type` first, then its id and versions) leads the first part of the
//! field dictionary and every part of the enumeration dictionary.

use super::{EnumTable, FieldEntry, RwfDictionary};
use crate::rwf::container::{put_array, ElementListWriter};
use crate::rwf::primitive::{self, dt};
use crate::rwf::wire::{put_buf15, put_u15rb, put_u16, put_u16ob, LenSlot};

/// Set-defined types: 1 and 2 byte integers.
const INT_1: u8 = 64;
const UINT_1: u8 = 65;
const INT_2: u8 = 66;
const UINT_2: u8 = 67;
/// Series flags.
const SERIES_HAS_SET_DEFS: u8 = 0x01;
const SERIES_HAS_SUMMARY: u8 = 0x02;
const SERIES_HAS_TOTAL_COUNT_HINT: u8 = 0x04;
/// Element list flags for set data (with and without a set id).
const EL_HAS_SET_DATA: u8 = 0x02;
const EL_HAS_SET_ID: u8 = 0x04;
/// Dictionary types in the summary.
const TYPE_FIELD_DEFINITIONS: u64 = 1;
const TYPE_ENUM_TABLES: u64 = 2;

/// Every part of both dictionaries, as series payloads.
#[derive(Debug, Clone, Default)]
pub struct Downloads {
    /// The field dictionary's parts, as series payloads.
    pub fields: Vec<Vec<u8>>,
    /// The enumeration tables' parts, as series payloads.
    pub enums: Vec<Vec<u8>>,
    /// The summaries alone (a request of verbosity INFO).
    pub fields_info: Vec<u8>,
    /// The enumeration tables' summary alone.
    pub enums_info: Vec<u8>,
}

impl Downloads {
    /// Parts of about `part_bytes` each (a table of enumerations is never split).
    pub fn build(d: &RwfDictionary, part_bytes: usize) -> Downloads {
        let field_summary = summary(TYPE_FIELD_DEFINITIONS, d.fields.dictionary_id, |o, el| {
            el.ascii(o, "Version", d.fields.version.as_bytes());
        });
        let enum_summary = summary(TYPE_ENUM_TABLES, d.enums.dictionary_id, |o, el| {
            el.ascii(o, "RT_Version", d.enums.rt_version.as_bytes());
            el.ascii(o, "DT_Version", d.enums.dt_version.as_bytes());
            el.ascii(o, "Version", d.enums.dt_version.as_bytes());
        });
        let field_defs = set_defs(&[
            ("NAME", dt::ASCII_STRING),
            ("FID", INT_2),
            ("RIPPLETO", INT_2),
            ("TYPE", INT_1),
            ("LENGTH", UINT_2),
            ("RWFTYPE", UINT_1),
            ("RWFLEN", UINT_2),
            ("ENUMLENGTH", UINT_1),
            ("LONGNAME", dt::ASCII_STRING),
        ]);
        let enum_defs = set_defs(&[
            ("FIDS", dt::ARRAY),
            ("VALUE", dt::ARRAY),
            ("DISPLAY", dt::ARRAY),
        ]);
        let fields: Vec<Vec<u8>> = d
            .fields
            .fields
            .iter()
            .filter(|f| f.rwf_type != 0)
            .map(field_entry)
            .collect();
        let enums: Vec<Vec<u8>> = d.enums.tables.iter().map(enum_entry).collect();
        Downloads {
            fields: parts(&fields, &field_defs, &field_summary, false, part_bytes),
            enums: parts(&enums, &enum_defs, &enum_summary, true, part_bytes),
            fields_info: series(&[], &[], &field_summary, Some(fields.len())),
            enums_info: series(&[], &[], &enum_summary, Some(enums.len())),
        }
    }
}

/// A dictionary's summary data: its `Type` and `DictionaryId` lead, as consumers
/// expect, then what `rest` puts (the versions).
fn summary(
    dictionary_type: u64,
    dictionary_id: i64,
    rest: impl FnOnce(&mut Vec<u8>, &mut ElementListWriter),
) -> Vec<u8> {
    let mut o = Vec::new();
    let mut el = ElementListWriter::begin(&mut o);
    el.element(&mut o, "Type", dt::INT, |o| {
        primitive::put_int(o, dictionary_type as i64)
    });
    el.element(&mut o, "DictionaryId", dt::INT, |o| {
        primitive::put_int(o, dictionary_id)
    });
    rest(&mut o, &mut el);
    el.end(&mut o);
    o
}

/// A local set-definition database of one element set, id 0.
fn set_defs(entries: &[(&str, u8)]) -> Vec<u8> {
    let mut o = vec![0, 1];
    put_u15rb(&mut o, 0);
    o.push(entries.len() as u8);
    for (name, t) in entries {
        put_buf15(&mut o, name.as_bytes());
        o.push(*t);
    }
    o
}

fn field_entry(f: &FieldEntry) -> Vec<u8> {
    let mut o = vec![EL_HAS_SET_DATA];
    put_text16(&mut o, &f.name);
    put_u16(&mut o, f.fid as u16);
    put_u16(&mut o, f.ripple_to as u16);
    o.push(f.mf_type as u8);
    put_u16(&mut o, f.length);
    o.push(f.rwf_type);
    put_u16(&mut o, f.rwf_length);
    o.push(f.enum_length);
    put_text16(&mut o, &f.long_name);
    o
}

/// A name with its length, cut at 65,535 bytes so that the length and the bytes agree
/// (a dictionary file may have a longer one).
fn put_text16(o: &mut Vec<u8>, text: &str) {
    let b = &text.as_bytes()[..text.len().min(0xFFFF)];
    put_u16ob(o, b.len() as u16);
    o.extend_from_slice(b);
}

fn enum_entry(t: &EnumTable) -> Vec<u8> {
    let mut o = vec![EL_HAS_SET_DATA | EL_HAS_SET_ID];
    put_u15rb(&mut o, 0);
    // FIDS: fixed 2-byte integers.
    let slot = LenSlot::u16ob(&mut o);
    o.push(dt::INT);
    put_u16ob(&mut o, 2);
    let fids = &t.fids[..t.fids.len().min(0xFFFF)];
    put_u16(&mut o, fids.len() as u16);
    for fid in fids {
        put_u16(&mut o, *fid as u16);
    }
    let _ = slot.finish(&mut o);
    let slot = LenSlot::u16ob(&mut o);
    put_array(&mut o, dt::ENUM, &t.values, |o, (v, _)| {
        primitive::put_enum(o, *v)
    });
    let _ = slot.finish(&mut o);
    // ASCII if every display is, else UTF-8 if they are, else RMTES (raw bytes).
    let bytes = || t.values.iter().map(|(_, d)| d.as_slice());
    let display_type = if bytes().all(|d| d.is_ascii()) {
        dt::ASCII_STRING
    } else if bytes().all(|d| std::str::from_utf8(d).is_ok()) {
        dt::UTF8_STRING
    } else {
        dt::RMTES_STRING
    };
    let slot = LenSlot::u16ob(&mut o);
    put_array(&mut o, display_type, &t.values, |o, (_, d)| {
        o.extend_from_slice(d)
    });
    let _ = slot.finish(&mut o);
    o
}

/// Entries into parts of about `part_bytes`.
fn parts(
    entries: &[Vec<u8>],
    defs: &[u8],
    summary: &[u8],
    summary_every_part: bool,
    part_bytes: usize,
) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut first = 0;
    while first < entries.len() || out.is_empty() {
        let mut last = first;
        let mut size = 0;
        while last < entries.len()
            && (last == first || size + entries[last].len() + 3 <= part_bytes)
        {
            size += entries[last].len() + 3;
            last += 1;
        }
        let with_summary = out.is_empty() || summary_every_part;
        let hint = out.is_empty().then_some(entries.len());
        out.push(series(
            &entries[first..last],
            defs,
            if with_summary { summary } else { &[] },
            hint,
        ));
        first = last;
    }
    out
}

/// A series of element lists.
fn series(
    entries: &[Vec<u8>],
    defs: &[u8],
    summary: &[u8],
    total_count_hint: Option<usize>,
) -> Vec<u8> {
    let mut o = Vec::new();
    let mut flags = 0;
    if !defs.is_empty() {
        flags |= SERIES_HAS_SET_DEFS;
    }
    if !summary.is_empty() {
        flags |= SERIES_HAS_SUMMARY;
    }
    if total_count_hint.is_some() {
        flags |= SERIES_HAS_TOTAL_COUNT_HINT;
    }
    o.push(flags);
    o.push(dt::ELEMENT_LIST.wrapping_sub(128));
    if !defs.is_empty() {
        put_buf15(&mut o, defs);
    }
    if !summary.is_empty() {
        put_buf15(&mut o, summary);
    }
    if let Some(n) = total_count_hint {
        put_u30rb(&mut o, n.min(0x3FFF_FFFF) as u32);
    }
    put_u16(&mut o, entries.len() as u16);
    for e in entries {
        put_u16ob(&mut o, e.len() as u16);
        o.extend_from_slice(e);
    }
    o
}

/// `u30rb`: the first byte's top two bits give the size.
fn put_u30rb(o: &mut Vec<u8>, v: u32) {
    if v < 0x40 {
        o.push(v as u8);
    } else if v < 0x4000 {
        o.extend_from_slice(&[0x80 | (v >> 8) as u8, v as u8]);
    } else if v < 0x40_0000 {
        o.extend_from_slice(&[0x40 | (v >> 16) as u8, (v >> 8) as u8, v as u8]);
    } else {
        o.extend_from_slice(&[
            0xC0 | (v >> 24) as u8,
            (v >> 16) as u8,
            (v >> 8) as u8,
            v as u8,
        ]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rwf::wire::Reader;

    #[test]
    fn a_name_too_long_for_its_length_is_cut_where_the_length_says() {
        let f = FieldEntry {
            name: "N".repeat(70_000),
            long_name: "L".into(),
            fid: 22,
            ripple_to: 0,
            mf_type: 4,
            length: 17,
            enum_length: 0,
            rwf_type: dt::REAL,
            rwf_length: 7,
        };
        let o = field_entry(&f);
        // Set data, then the name's length (0xFE: two bytes follow) and as many bytes.
        assert_eq!(o[1..4], [0xFE, 0xFF, 0xFF]);
        let after = 4 + 0xFFFF;
        assert!(o[4..after].iter().all(|&b| b == b'N'));
        assert_eq!(
            o[after..after + 2],
            22u16.to_be_bytes(),
            "the field id follows"
        );
    }

    #[test]
    fn the_node_dictionary_splits_into_parts_that_all_hold_whole_entries() {
        let d = RwfDictionary::from_native(&tickwire_proto::Dictionary::market_price());
        let dl = Downloads::build(&d, 600);
        assert!(dl.fields.len() > 1, "small parts: several");
        let mut entries = 0;
        for (i, p) in dl.fields.iter().enumerate() {
            let mut r = Reader::new(p);
            let flags = r.u8("flags").unwrap();
            assert_eq!(flags & SERIES_HAS_SUMMARY != 0, i == 0);
            r.u8("ct").unwrap();
            r.buf15("defs").unwrap();
            if i == 0 {
                let s = r.buf15("summary").unwrap();
                // Type comes first.
                assert_eq!(&s[3..8], b"\x04Type");
                assert_eq!(r.u30rb("hint").unwrap() as usize, d.len());
            }
            let n = r.u16("count").unwrap();
            for _ in 0..n {
                r.buf16("entry").unwrap();
            }
            assert!(r.is_empty());
            entries += n as usize;
        }
        assert_eq!(entries, d.len());
        assert_eq!(dl.enums.len(), 1, "no tables: one empty part");
    }
}
