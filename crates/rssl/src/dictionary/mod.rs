//! Which RWF type each field id has on the wire.
//!
//! RWF field lists carry no types: both ends read them from a field dictionary
//! (RDMFieldDictionary). The node encodes each of its typed values as the type the
//! consumer's dictionary says, converting where the value allows (a node `UINT` size
//! is an RWF `REAL` with no decimals), and decodes what providers send by the same
//! table. Without a dictionary file (`[rssl] field_dictionary`) the table holds
//! Tickwire's own fields, typed as the standard MarketPrice fields of the same
//! numbers are.

mod download;
mod enum_file;
mod field_file;

pub use download::Downloads;
pub use enum_file::{EnumFile, EnumTable};
pub use field_file::{FieldEntry, FieldFile};

use crate::rwf::primitive::{self, dt};
use crate::rwf::RwfError;
use tickwire_proto::{Date, Dictionary, FieldType, Real, Value};

/// The field and enumeration dictionaries RWF is encoded and decoded by, and
/// downloaded from.
pub struct RwfDictionary {
    /// `types[fid + 32768]`: the field's RWF type, 0 for unknown fields.
    types: Box<[u8]>,
    /// The field dictionary (RDMFieldDictionary).
    pub fields: FieldFile,
    /// The enumeration tables (enumtype.def).
    pub enums: EnumFile,
    /// Where it came from (for logs).
    pub source: String,
}

impl std::fmt::Debug for RwfDictionary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RwfDictionary({} fields, {} enum tables, from {})",
            self.fields.fields.len(),
            self.enums.tables.len(),
            self.source
        )
    }
}

/// Tickwire fields whose standard RWF type is not the node's own: sizes and volumes
/// are reals in RDMFieldDictionary, a trade qualifier an enumeration.
const STANDARD_TYPES: [(i16, u8); 11] = [
    (30, dt::REAL),   // BIDSIZE
    (31, dt::REAL),   // ASKSIZE
    (32, dt::REAL),   // ACVOL_1
    (40, dt::ENUM),   // CTS_QUAL
    (41, dt::REAL),   // BLKCOUNT
    (42, dt::REAL),   // BLKVOLUM
    (54, dt::REAL),   // LOT_SIZE
    (67, dt::REAL),   // NUM_MOVES
    (80, dt::REAL),   // IRGVOL
    (178, dt::REAL),  // TRDVOL_1
    (1021, dt::REAL), // SEQNUM
];

impl RwfDictionary {
    /// From dictionary files' contents.
    pub fn new(fields: FieldFile, enums: EnumFile, source: &str) -> Self {
        let mut types = vec![0u8; 65536].into_boxed_slice();
        for f in &fields.fields {
            types[(f.fid as i32 + 32768) as usize] = f.rwf_type;
        }
        RwfDictionary {
            types,
            fields,
            enums,
            source: source.to_string(),
        }
    }

    /// The node's own dictionary, typed as the standard fields are, with no enumeration
    /// tables.
    pub fn from_native(d: &Dictionary) -> Self {
        let mut file = FieldFile {
            version: format!("tickwire-{}", env!("CARGO_PKG_VERSION")),
            dictionary_id: 1,
            fields: Vec::new(),
        };
        for f in d.fields() {
            let rwf_type = STANDARD_TYPES
                .iter()
                .find(|(fid, _)| *fid == f.fid)
                .map_or(native_rwf_type(f.field_type), |(_, t)| *t);
            // The Marketfeed type and lengths, as the standard dictionary gives fields
            // of each kind.
            let (mf_type, length, rwf_length, enum_length) = match rwf_type {
                dt::REAL => (4, 17, 7, 0),
                dt::INT | dt::UINT => (1, 15, 8, 0),
                dt::DATE => (3, 11, 4, 0),
                dt::TIME => (7, 5, 5, 0),
                dt::ENUM => (6, 3, 1, 3),
                _ => (5, 32, 32, 0),
            };
            file.fields.push(FieldEntry {
                name: f.name.clone(),
                long_name: f.name.clone(),
                fid: f.fid,
                ripple_to: 0,
                mf_type,
                length,
                enum_length,
                rwf_type,
                rwf_length,
            });
        }
        file.fields.sort_by_key(|f| f.fid);
        let enums = EnumFile {
            rt_version: file.version.clone(),
            dt_version: file.version.clone(),
            dictionary_id: 1,
            tables: Vec::new(),
        };
        RwfDictionary::new(file, enums, "the node's own dictionary")
    }

    /// An RDMFieldDictionary file's contents (and no enumeration tables).
    pub fn parse_rdm(text: &str, source: &str) -> Result<Self, String> {
        Ok(RwfDictionary::new(
            FieldFile::parse(text, source)?,
            EnumFile::default(),
            source,
        ))
    }

    /// Fields it knows.
    pub fn len(&self) -> usize {
        self.fields.fields.len()
    }

    /// It knows no field.
    pub fn is_empty(&self) -> bool {
        self.fields.fields.is_empty()
    }

    /// The field's RWF type; 0 if the dictionary does not have it.
    #[inline]
    pub fn rwf_type(&self, fid: i16) -> u8 {
        self.types[(fid as i32 + 32768) as usize]
    }

    /// A field's entry.
    pub fn field(&self, fid: i16) -> Option<&FieldEntry> {
        self.fields
            .fields
            .binary_search_by_key(&fid, |f| f.fid)
            .ok()
            .map(|i| &self.fields.fields[i])
    }

    /// The RWF body of a node value for this field; the value's own type where the
    /// dictionary has no type for it. A value that cannot be the field's type (text
    /// for a number) is sent blank.
    #[inline]
    pub fn put_value(&self, out: &mut Vec<u8>, fid: i16, v: &Value<'_>) {
        put_as(out, self.rwf_type(fid), v);
    }

    /// A node value from an RWF body of this field. `Ok(None)`: the dictionary does
    /// not know the field, or its type has no node value (arrays, nested containers).
    #[inline]
    pub fn value<'a>(&self, fid: i16, body: &'a [u8]) -> Result<Option<Value<'a>>, RwfError> {
        let t = self.rwf_type(fid);
        if body.is_empty() && t != 0 {
            return Ok(Some(Value::Blank));
        }
        Ok(Some(match t {
            dt::INT => Value::Int(primitive::int(body)?.unwrap_or(0)),
            dt::UINT => Value::UInt(primitive::uint(body)?.unwrap_or(0)),
            dt::REAL => primitive::real_decimal(body)?.map_or(Value::Blank, Value::Real),
            // A date with a blank part (day or month 0, which the SDK sends) is no
            // node date: blank, as an infinite float is, not the end of the list.
            dt::DATE => primitive::date(body)?
                .filter(Date::is_valid)
                .map_or(Value::Blank, Value::Date),
            dt::TIME => primitive::time(body)?.map_or(Value::Blank, Value::Time),
            dt::ENUM => primitive::enumerated(body)?.map_or(Value::Blank, Value::Enum),
            dt::DATETIME => primitive::datetime(body)?
                .filter(|(d, _)| d.is_valid())
                .map_or(Value::Blank, |(d, t)| Value::DateTime(d, t)),
            dt::FLOAT | dt::DOUBLE => {
                primitive::float_or_double(body)?.map_or(Value::Blank, Value::Real)
            }
            dt::BUFFER => Value::Buffer(body),
            // Text the node can read as text is text; other bytes (RMTES in a
            // character set of its own) stay bytes, passed on as they came.
            dt::ASCII_STRING | dt::RMTES_STRING | dt::UTF8_STRING => {
                match std::str::from_utf8(body) {
                    Ok(s) if t == dt::ASCII_STRING && s.is_ascii() => Value::Ascii(s),
                    Ok(s) => Value::Utf8(s),
                    Err(_) => Value::Buffer(body),
                }
            }
            _ => return Ok(None),
        }))
    }
}

impl RwfDictionary {
    /// An RWF field list as the node's own (appended to `out`). A field the dictionary
    /// does not know, or of a type the node has no value for, is left out and passed to
    /// `skipped`.
    pub fn to_native(
        &self,
        rwf: &[u8],
        out: &mut Vec<u8>,
        mut skipped: impl FnMut(i16),
    ) -> Result<(), RwfError> {
        let mut w = tickwire_proto::FieldListWriter::new(out);
        for entry in crate::rwf::container::FieldIter::new(rwf)? {
            let (fid, body) = entry?;
            match self.value(fid, body)? {
                Some(v) => {
                    if !w.push(fid, v) {
                        return Err(RwfError::invalid("a field list", "too many fields"));
                    }
                }
                None => skipped(fid),
            }
        }
        w.finish();
        Ok(())
    }
}

/// The RWF type a node field type is sent as when no dictionary says otherwise.
pub fn native_rwf_type(t: FieldType) -> u8 {
    match t {
        FieldType::Int => dt::INT,
        FieldType::UInt => dt::UINT,
        FieldType::Real => dt::REAL,
        FieldType::Date => dt::DATE,
        FieldType::Time => dt::TIME,
        FieldType::Ascii => dt::RMTES_STRING,
        FieldType::Utf8 => dt::RMTES_STRING,
        FieldType::Enum => dt::ENUM,
        FieldType::DateTime => dt::DATETIME,
        FieldType::Buffer => dt::BUFFER,
        FieldType::Blank => 0,
    }
}

/// RDMFieldDictionary's names of RWF types.
pub(crate) fn rwf_type_by_name(name: &str) -> Option<u8> {
    Some(match name {
        "INT64" | "INT32" | "INT" => dt::INT,
        "UINT64" | "UINT32" | "UINT" => dt::UINT,
        "REAL64" | "REAL32" | "REAL" => dt::REAL,
        "FLOAT" => dt::FLOAT,
        "DOUBLE" => dt::DOUBLE,
        "DATE" => dt::DATE,
        "TIME" => dt::TIME,
        "DATETIME" => dt::DATETIME,
        "QOS" => dt::QOS,
        "STATE" => dt::STATE,
        "ENUM" => dt::ENUM,
        "ARRAY" => dt::ARRAY,
        "BUFFER" => dt::BUFFER,
        "ASCII_STRING" => dt::ASCII_STRING,
        "UTF8_STRING" => dt::UTF8_STRING,
        "RMTES_STRING" => dt::RMTES_STRING,
        "OPAQUE" => dt::OPAQUE,
        "FIELD_LIST" => dt::FIELD_LIST,
        "ELEMENT_LIST" => dt::ELEMENT_LIST,
        "FILTER_LIST" => dt::FILTER_LIST,
        "VECTOR" => dt::VECTOR,
        "MAP" => dt::MAP,
        "SERIES" => dt::SERIES,
        "MSG" => dt::MSG,
        "NO_DATA" => dt::NO_DATA,
        _ => return None,
    })
}

/// The RDMFieldDictionary name of an RWF type.
pub fn rwf_type_name(t: u8) -> &'static str {
    match t {
        dt::INT => "INT64",
        dt::UINT => "UINT64",
        dt::REAL => "REAL64",
        dt::FLOAT => "FLOAT",
        dt::DOUBLE => "DOUBLE",
        dt::DATE => "DATE",
        dt::TIME => "TIME",
        dt::DATETIME => "DATETIME",
        dt::ENUM => "ENUM",
        dt::ARRAY => "ARRAY",
        dt::BUFFER => "BUFFER",
        dt::ASCII_STRING => "ASCII_STRING",
        dt::UTF8_STRING => "UTF8_STRING",
        dt::RMTES_STRING => "RMTES_STRING",
        _ => "UNKNOWN",
    }
}

/// A value's body as RWF type `t` (0: its own type).
#[inline(always)]
pub fn put_as(out: &mut Vec<u8>, t: u8, v: &Value<'_>) {
    // Not recursive, so that it inlines where a field list is written (the value then
    // stays in registers instead of going through memory).
    let t = if t == 0 {
        native_rwf_type(v.field_type())
    } else {
        t
    };
    match (t, *v) {
        (_, Value::Blank) => {}
        (dt::REAL, Value::Real(r)) => primitive::put_decimal(out, r),
        (dt::REAL, Value::UInt(u)) => {
            if let Ok(i) = i64::try_from(u) {
                primitive::put_decimal(out, Real::new(i, 0));
            }
        }
        (dt::REAL, Value::Int(i)) => primitive::put_decimal(out, Real::new(i, 0)),
        (dt::REAL, Value::Enum(e)) => primitive::put_decimal(out, Real::new(e as i64, 0)),
        (dt::UINT | dt::INT | dt::ENUM, Value::Real(r)) => {
            if let Some(i) = integral(r) {
                match t {
                    dt::UINT if i >= 0 => primitive::put_uint(out, i as u64),
                    dt::INT => primitive::put_int(out, i),
                    dt::ENUM if (0..=0xFFFF).contains(&i) => primitive::put_enum(out, i as u16),
                    _ => {}
                }
            }
        }
        (dt::UINT, Value::UInt(u)) => primitive::put_uint(out, u),
        (dt::UINT, Value::Int(i)) if i >= 0 => primitive::put_uint(out, i as u64),
        (dt::UINT, Value::Enum(e)) => primitive::put_uint(out, e as u64),
        (dt::INT, Value::Int(i)) => primitive::put_int(out, i),
        (dt::INT, Value::UInt(u)) => {
            if let Ok(i) = i64::try_from(u) {
                primitive::put_int(out, i);
            }
        }
        (dt::INT, Value::Enum(e)) => primitive::put_int(out, e as i64),
        (dt::ENUM, Value::Enum(e)) => primitive::put_enum(out, e),
        (dt::ENUM, Value::UInt(u)) if u <= 0xFFFF => primitive::put_enum(out, u as u16),
        (dt::ENUM, Value::Int(i)) if (0..=0xFFFF).contains(&i) => {
            primitive::put_enum(out, i as u16)
        }
        (dt::FLOAT, Value::Real(r)) => primitive::put_float(out, r),
        (dt::DOUBLE, Value::Real(r)) => primitive::put_double(out, r),
        (dt::FLOAT, Value::Int(i)) => primitive::put_float(out, Real::new(i, 0)),
        (dt::DOUBLE, Value::Int(i)) => primitive::put_double(out, Real::new(i, 0)),
        (dt::FLOAT | dt::DOUBLE, Value::UInt(u)) => {
            if let Ok(i) = i64::try_from(u) {
                if t == dt::FLOAT {
                    primitive::put_float(out, Real::new(i, 0));
                } else {
                    primitive::put_double(out, Real::new(i, 0));
                }
            }
        }
        (dt::DATE, Value::Date(d) | Value::DateTime(d, _)) => primitive::put_date(out, d),
        (dt::TIME, Value::Time(tm) | Value::DateTime(_, tm)) => primitive::put_time(out, tm),
        (dt::DATETIME, Value::DateTime(d, tm)) => primitive::put_datetime(out, d, tm),
        (
            dt::ASCII_STRING | dt::RMTES_STRING | dt::UTF8_STRING | dt::BUFFER,
            Value::Ascii(s) | Value::Utf8(s),
        ) => out.extend_from_slice(s.as_bytes()),
        // Bytes as they came: text the node could not read as UTF-8 (RMTES in a
        // character set of its own, Latin-1 in an ASCII field), or a buffer.
        (dt::ASCII_STRING | dt::RMTES_STRING | dt::UTF8_STRING | dt::BUFFER, Value::Buffer(b)) => {
            out.extend_from_slice(b)
        }
        // Not this field's type: blank rather than bytes the consumer would misread.
        _ => {}
    }
}

/// A decimal's integer value, if it has no fraction.
fn integral(r: Real) -> Option<i64> {
    if r.exponent >= 0 {
        return r
            .mantissa
            .checked_mul(10i64.checked_pow(r.exponent as u32)?);
    }
    let d = 10i64.checked_pow(u32::from(r.exponent.unsigned_abs()))?;
    (r.mantissa % d == 0).then_some(r.mantissa / d)
}

/// A line of an RDM dictionary file (RDMFieldDictionary, enumtype.def) that says
/// something: a `!tag NAME VALUE`, or an entry. Blank lines and other comments (`!`)
/// are skipped.
enum DictLine<'a> {
    Tag(&'a str, &'a str),
    /// The line's number (from 1) and its trimmed text.
    Entry(usize, &'a str),
}

fn dict_lines(text: &str) -> impl Iterator<Item = DictLine<'_>> {
    text.lines().enumerate().filter_map(|(i, line)| {
        let line = line.trim();
        if let Some(tag) = line.strip_prefix("!tag") {
            let mut t = tag.split_whitespace();
            return Some(DictLine::Tag(t.next()?, t.next()?));
        }
        (!line.is_empty() && !line.starts_with('!')).then_some(DictLine::Entry(i + 1, line))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decimal_is_integral_only_where_it_has_no_fraction_down_to_the_smallest_exponent() {
        assert_eq!(integral(Real::new(12_300, -2)), Some(123));
        assert_eq!(integral(Real::new(12_345, -2)), None);
        assert_eq!(integral(Real::new(7, 2)), Some(700));
        assert_eq!(integral(Real::new(1, i8::MIN)), None);
        assert_eq!(integral(Real::new(1, i8::MAX)), None);
    }

    #[test]
    fn the_nodes_own_fields_are_typed_as_the_standard_ones() {
        let d = RwfDictionary::from_native(&Dictionary::market_price());
        assert_eq!(d.rwf_type(22), dt::REAL); // BID
        assert_eq!(d.rwf_type(30), dt::REAL); // BIDSIZE: a UINT in the node's
        assert_eq!(d.rwf_type(3), dt::RMTES_STRING); // DSPLY_NAME
        assert_eq!(d.rwf_type(4), dt::ENUM);
        assert_eq!(d.rwf_type(12345), 0);
        // A size of 500 goes out as a real with no decimals, and comes back so.
        let mut b = Vec::new();
        d.put_value(&mut b, 30, &Value::UInt(500));
        assert_eq!(b, [14, 0x01, 0xF4]);
        assert_eq!(d.value(30, &b), Ok(Some(Value::Real(Real::new(500, 0)))));
        // Text where a number is expected is blank, not garbage.
        b.clear();
        d.put_value(&mut b, 22, &Value::Ascii("x"));
        assert!(b.is_empty());
    }

    #[test]
    fn dates_and_times_buffers_floats_and_foreign_text_keep_their_values() {
        use tickwire_proto::{Date, Time};
        let text = "\
            DT  \"DT\"  9001  NULL  DATE  11  DATETIME  12\n\
            BUF \"BUF\" 9002  NULL  BINARY 16 BUFFER    16\n\
            FLT \"FLT\" 9003  NULL  PRICE 17  FLOAT      4\n\
            DBL \"DBL\" 9004  NULL  PRICE 17  DOUBLE     8\n\
            TXT \"TXT\" 9005  NULL  ALPHANUMERIC 16 RMTES_STRING 16\n";
        let d = RwfDictionary::parse_rdm(text, "test").unwrap();
        let roundtrip = |fid: i16, body: &[u8]| {
            let v = d.value(fid, body).unwrap().unwrap();
            let mut again = Vec::new();
            d.put_value(&mut again, fid, &v);
            (format!("{v:?}"), again)
        };
        // 2024-02-29 13:45:01.500: the date's day, month and year, then the time.
        let dt = [29, 2, 0x07, 0xE8, 13, 45, 1, 0x01, 0xF4];
        assert_eq!(
            d.value(9001, &dt),
            Ok(Some(Value::DateTime(
                Date {
                    year: 2024,
                    month: 2,
                    day: 29
                },
                Time::from_hms_nanos(13, 45, 1, 500_000_000)
            )))
        );
        assert_eq!(roundtrip(9001, &dt).1, dt);
        assert!(d.value(9001, &dt[..8]).is_err());
        // Any bytes in a buffer, as they came.
        let buf = [0, 0xFF, 0x1B, 0x25];
        assert_eq!(d.value(9002, &buf), Ok(Some(Value::Buffer(&buf))));
        assert_eq!(roundtrip(9002, &buf).1, buf);
        // A float 0.1 is the decimal 0.1, and the same float again.
        let flt = 0.1f32.to_be_bytes();
        assert_eq!(d.value(9003, &flt), Ok(Some(Value::Real(Real::new(1, -1)))));
        assert_eq!(roundtrip(9003, &flt).1, flt);
        let dbl = 101.25f64.to_be_bytes();
        assert_eq!(
            d.value(9004, &dbl),
            Ok(Some(Value::Real(Real::new(10125, -2))))
        );
        assert_eq!(roundtrip(9004, &dbl).1, dbl);
        assert_eq!(
            d.value(9004, &f64::NAN.to_be_bytes()),
            Ok(Some(Value::Blank))
        );
        // RMTES text in a character set of its own (not UTF-8) passes as bytes.
        let rmtes = [0x1B, 0x28, 0x42, b'A', 0xE9];
        assert_eq!(d.value(9005, &rmtes), Ok(Some(Value::Buffer(&rmtes))));
        assert_eq!(roundtrip(9005, &rmtes).1, rmtes);
        assert_eq!(
            d.value(9005, "café".as_bytes()),
            Ok(Some(Value::Utf8("café")))
        );
    }

    #[test]
    fn a_date_with_a_blank_part_is_blank_and_its_field_list_goes_on() {
        // The SDK sends a day or month of 0 (a date known to the month or year only);
        // the node's dates are whole ones.
        let d = RwfDictionary::from_native(&Dictionary::market_price());
        let year_only = [0, 0, 0x07, 0xE8];
        assert_eq!(d.value(16, &year_only), Ok(Some(Value::Blank)));
        let mut rwf = Vec::new();
        let mut w = crate::rwf::container::FieldListWriter::begin(&mut rwf);
        w.field(&mut rwf, 16, |o| o.extend_from_slice(&year_only));
        w.field(&mut rwf, 22, |o| o.extend_from_slice(&[0x0C, 0x04, 0xD2]));
        w.end(&mut rwf);
        let mut native = Vec::new();
        d.to_native(&rwf, &mut native, |_| {}).unwrap();
        let fields: Vec<_> = tickwire_proto::FieldList::decode(&native)
            .unwrap()
            .iter()
            .map(|(fid, v)| format!("{fid}={v:?}"))
            .collect();
        assert_eq!(
            fields,
            ["16=Blank", "22=Real(Real { mantissa: 1234, exponent: -2 })"]
        );
        // In a date and time too.
        let mut dt = year_only.to_vec();
        dt.extend_from_slice(&[13, 45]);
        let t = "DT \"DT\" 9001 NULL DATE 11 DATETIME 12\n";
        let d = RwfDictionary::parse_rdm(t, "test").unwrap();
        assert_eq!(d.value(9001, &dt), Ok(Some(Value::Blank)));
    }

    #[test]
    fn text_fields_of_bytes_that_are_not_utf8_pass_on_as_they_came() {
        // Latin-1 in an ASCII_STRING field, a cut UTF-8 sequence in a UTF8_STRING one.
        let text = "\
            ASC \"ASC\" 9101  NULL  ALPHANUMERIC 16 ASCII_STRING 16\n\
            UTF \"UTF\" 9102  NULL  ALPHANUMERIC 16 UTF8_STRING  16\n";
        let d = RwfDictionary::parse_rdm(text, "test").unwrap();
        for (fid, body) in [(9101, &b"caf\xe9"[..]), (9102, &b"caf\xc3"[..])] {
            let v = d.value(fid, body).unwrap().unwrap();
            assert_eq!(v, Value::Buffer(body));
            let mut again = Vec::new();
            d.put_value(&mut again, fid, &v);
            assert_eq!(again, body, "field {fid}");
        }
    }

    #[test]
    fn rdm_lines_parse() {
        let text = "! comment\n\
            BID        \"BID\"                   22  BID_1       PRICE              17  REAL64           7\n\
            RDN_EXCHID \"IDN EXCHANGE ID\"        4  NULL        ENUMERATED    3 ( 3 )  ENUM             1\n\
            DSPLY_NAME \"DISPLAY NAME\"           3  NULL        ALPHANUMERIC       16  RMTES_STRING    16\n\
            NEG_FID    \"NEG\"                -22  NULL        INTEGER             5  INT64            2\n";
        let d = RwfDictionary::parse_rdm(text, "test").unwrap();
        assert_eq!(d.len(), 4);
        assert_eq!(d.rwf_type(4), dt::ENUM);
        assert_eq!(d.rwf_type(-22), dt::INT);
        assert_eq!(d.field(3).unwrap().name, "DSPLY_NAME");
        assert!(RwfDictionary::parse_rdm("BID \"BID\" x NULL PRICE 17 REAL64 7", "t").is_err());
        assert!(
            RwfDictionary::parse_rdm("BID \"BID\" 22 NULL PRICE 17 REAL99 7", "t")
                .unwrap_err()
                .contains("REAL99")
        );
    }
}
