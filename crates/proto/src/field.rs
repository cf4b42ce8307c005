//! Field lists: (field id, typed value) pairs.
//!
//! Encoding of a field list: `u16 count`, then per field `i16 fid`, `u8 type tag` and the
//! value. Values never use binary floats: a real is an integer mantissa and a decimal
//! exponent. See docs/PROTOCOL.md for the exact layout of every type.

use crate::wire::{put_u16, put_varint, unzigzag, varint_len_at, zigzag, Reader};
use crate::DecodeError;
use std::fmt;

/// Type tags on the wire. The dictionary uses the same names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FieldType {
    /// No value.
    Blank = 0,
    /// A signed integer.
    Int = 1,
    /// An unsigned integer.
    UInt = 2,
    /// A decimal: mantissa and exponent.
    Real = 3,
    /// A date.
    Date = 4,
    /// A time of day.
    Time = 5,
    /// ASCII text.
    Ascii = 6,
    /// UTF-8 text.
    Utf8 = 7,
    /// An enumerated value.
    Enum = 8,
    /// A date and a time of day together (RWF's DATETIME).
    DateTime = 9,
    /// Opaque bytes (RWF's BUFFER; also RMTES text that is not UTF-8, kept as sent).
    Buffer = 10,
}

impl FieldType {
    /// The type a wire tag names.
    pub fn from_tag(tag: u8) -> Option<FieldType> {
        Some(match tag {
            0 => FieldType::Blank,
            1 => FieldType::Int,
            2 => FieldType::UInt,
            3 => FieldType::Real,
            4 => FieldType::Date,
            5 => FieldType::Time,
            6 => FieldType::Ascii,
            7 => FieldType::Utf8,
            8 => FieldType::Enum,
            9 => FieldType::DateTime,
            10 => FieldType::Buffer,
            _ => return None,
        })
    }

    /// The name used in dictionary files.
    pub fn name(self) -> &'static str {
        match self {
            FieldType::Blank => "BLANK",
            FieldType::Int => "INT",
            FieldType::UInt => "UINT",
            FieldType::Real => "REAL",
            FieldType::Date => "DATE",
            FieldType::Time => "TIME",
            FieldType::Ascii => "ASCII",
            FieldType::Utf8 => "UTF8",
            FieldType::Enum => "ENUM",
            FieldType::DateTime => "DATETIME",
            FieldType::Buffer => "BUFFER",
        }
    }

    /// The type a dictionary file names.
    pub fn from_name(name: &str) -> Option<FieldType> {
        Some(match name.to_ascii_uppercase().as_str() {
            "INT" => FieldType::Int,
            "UINT" => FieldType::UInt,
            "REAL" => FieldType::Real,
            "DATE" => FieldType::Date,
            "TIME" => FieldType::Time,
            "ASCII" => FieldType::Ascii,
            "UTF8" => FieldType::Utf8,
            "ENUM" => FieldType::Enum,
            "DATETIME" => FieldType::DateTime,
            "BUFFER" => FieldType::Buffer,
            _ => return None,
        })
    }
}

/// A decimal number: `mantissa * 10^exponent`. 101.25 is `Real { mantissa: 10125, exponent: -2 }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Real {
    /// The mantissa.
    pub mantissa: i64,
    /// The power of ten it is multiplied by.
    pub exponent: i8,
}

impl Real {
    /// A real from its mantissa and exponent.
    pub fn new(mantissa: i64, exponent: i8) -> Self {
        Real { mantissa, exponent }
    }

    /// The nearest float to the decimal (for display, JSON and the Python package; the
    /// wire keeps the exact decimal), so 111.225 is 111.225 and not
    /// 111.22500000000001, and a float published as a real reads back equal. Cheap
    /// where both operands are exact (a mantissa below 2^53, at most 22 places either
    /// way: one rounding); else the decimal is parsed, which rounds correctly too.
    pub fn to_f64(self) -> f64 {
        const EXACT_MANTISSA: u64 = 1 << 53;
        const POWERS: [f64; 23] = [
            1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
            1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
        ];
        let places = self.exponent.unsigned_abs() as usize;
        if self.mantissa.unsigned_abs() < EXACT_MANTISSA && places < POWERS.len() {
            let m = self.mantissa as f64;
            return if self.exponent < 0 {
                m / POWERS[places]
            } else {
                m * POWERS[places]
            };
        }
        // "-9223372036854775808e-128" at most: 25 bytes, on the stack.
        let mut text = [0u8; 32];
        let mut w = &mut text[..];
        let _ =
            std::io::Write::write_fmt(&mut w, format_args!("{}e{}", self.mantissa, self.exponent));
        let len = 32 - w.len();
        std::str::from_utf8(&text[..len])
            .ok()
            .and_then(|t| t.parse().ok())
            .unwrap_or(f64::NAN)
    }
}

impl fmt::Display for Real {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.exponent >= 0 {
            write!(f, "{}", self.mantissa)?;
            // Zero is "0", not "000": JSON allows no leading zeros.
            if self.mantissa == 0 {
                return Ok(());
            }
            for _ in 0..self.exponent {
                f.write_str("0")?;
            }
            return Ok(());
        }
        let digits = self.mantissa.unsigned_abs().to_string();
        let places = (-(self.exponent as i32)) as usize;
        let sign = if self.mantissa < 0 { "-" } else { "" };
        if digits.len() > places {
            let (int, frac) = digits.split_at(digits.len() - places);
            write!(f, "{sign}{int}.{frac}")
        } else {
            write!(f, "{sign}0.{}{digits}", "0".repeat(places - digits.len()))
        }
    }
}

/// A calendar date.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Date {
    /// The year.
    pub year: u16,
    /// The month (1..=12).
    pub month: u8,
    /// The day of the month (1..=31).
    pub day: u8,
}

impl Date {
    /// A date that exists (blank dates are not valid).
    pub fn is_valid(&self) -> bool {
        let days = match self.month {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 => {
                let y = self.year as u32;
                if (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400) {
                    29
                } else {
                    28
                }
            }
            _ => return false,
        };
        self.day >= 1 && self.day <= days
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

/// A time of day to the nanosecond.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Time {
    /// Nanoseconds since midnight.
    pub nanos_since_midnight: u64,
}

/// Nanoseconds in a day.
pub const NANOS_PER_DAY: u64 = 86_400 * 1_000_000_000;

impl Time {
    /// A time from hours, minutes, seconds and nanoseconds.
    pub fn from_hms_nanos(h: u8, m: u8, s: u8, nanos: u32) -> Self {
        Time {
            nanos_since_midnight: ((h as u64 * 60 + m as u64) * 60 + s as u64) * 1_000_000_000
                + nanos as u64,
        }
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.nanos_since_midnight;
        let secs = n / 1_000_000_000;
        write!(
            f,
            "{:02}:{:02}:{:02}.{:09}",
            secs / 3600,
            (secs / 60) % 60,
            secs % 60,
            n % 1_000_000_000
        )
    }
}

/// One typed value. Strings borrow from the buffer they were decoded from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    /// No value.
    Blank,
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    UInt(u64),
    /// A decimal: mantissa and exponent.
    Real(Real),
    /// A date.
    Date(Date),
    /// A time of day.
    Time(Time),
    /// ASCII text.
    Ascii(&'a str),
    /// UTF-8 text.
    Utf8(&'a str),
    /// An enumerated value.
    Enum(u16),
    /// A date and a time.
    DateTime(Date, Time),
    /// Bytes.
    Buffer(&'a [u8]),
}

impl Value<'_> {
    /// Its type.
    pub fn field_type(&self) -> FieldType {
        match self {
            Value::Blank => FieldType::Blank,
            Value::Int(_) => FieldType::Int,
            Value::UInt(_) => FieldType::UInt,
            Value::Real(_) => FieldType::Real,
            Value::Date(_) => FieldType::Date,
            Value::Time(_) => FieldType::Time,
            Value::Ascii(_) => FieldType::Ascii,
            Value::Utf8(_) => FieldType::Utf8,
            Value::Enum(_) => FieldType::Enum,
            Value::DateTime(..) => FieldType::DateTime,
            Value::Buffer(_) => FieldType::Buffer,
        }
    }

    /// Appends tag and value (not the field id).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.field_type() as u8);
        match *self {
            Value::Blank => {}
            Value::Int(v) => put_varint(out, zigzag(v)),
            Value::UInt(v) => put_varint(out, v),
            Value::Real(r) => {
                out.push(r.exponent as u8);
                put_varint(out, zigzag(r.mantissa));
            }
            Value::Date(d) => {
                put_u16(out, d.year);
                out.push(d.month);
                out.push(d.day);
            }
            Value::Time(t) => put_varint(out, t.nanos_since_midnight),
            Value::Ascii(s) | Value::Utf8(s) => {
                put_varint(out, s.len() as u64);
                out.extend_from_slice(s.as_bytes());
            }
            Value::Enum(v) => put_u16(out, v),
            Value::DateTime(d, t) => {
                put_u16(out, d.year);
                out.push(d.month);
                out.push(d.day);
                put_varint(out, t.nanos_since_midnight);
            }
            Value::Buffer(b) => {
                put_varint(out, b.len() as u64);
                out.extend_from_slice(b);
            }
        }
    }
}

impl fmt::Display for Value<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Blank => f.write_str("(blank)"),
            Value::Int(v) => write!(f, "{v}"),
            Value::UInt(v) => write!(f, "{v}"),
            Value::Real(v) => write!(f, "{v}"),
            Value::Date(v) => write!(f, "{v}"),
            Value::Time(v) => write!(f, "{v}"),
            Value::Ascii(s) | Value::Utf8(s) => f.write_str(s),
            Value::Enum(v) => write!(f, "{v}"),
            Value::DateTime(d, t) => write!(f, "{d}T{t}"),
            // Base64, as text parses it back (crate::text).
            Value::Buffer(b) => {
                use base64::Engine;
                f.write_str(&base64::engine::general_purpose::STANDARD.encode(b))
            }
        }
    }
}

/// Longest string value accepted in a field (bytes).
pub const MAX_STRING_LEN: u64 = 65_535;

#[inline(always)]
fn decode_value<'a>(fid: i16, r: &mut Reader<'a>) -> Result<Value<'a>, DecodeError> {
    let tag = r.u8()?;
    let ty = FieldType::from_tag(tag).ok_or(DecodeError::UnknownFieldType { fid, tag })?;
    Ok(match ty {
        FieldType::Blank => Value::Blank,
        FieldType::Int => Value::Int(unzigzag(r.varint()?)),
        FieldType::UInt => Value::UInt(r.varint()?),
        FieldType::Real => {
            let exponent = r.u8()? as i8;
            Value::Real(Real {
                mantissa: unzigzag(r.varint()?),
                exponent,
            })
        }
        FieldType::Date => Value::Date(read_date(fid, r)?),
        FieldType::Time => Value::Time(read_time(fid, r)?),
        FieldType::DateTime => Value::DateTime(read_date(fid, r)?, read_time(fid, r)?),
        FieldType::Buffer => Value::Buffer(read_bytes(r)?),
        FieldType::Ascii | FieldType::Utf8 => {
            let bytes = read_bytes(r)?;
            let s =
                std::str::from_utf8(bytes).map_err(|_| DecodeError::InvalidUtf8("string field"))?;
            if ty == FieldType::Ascii {
                if !s.is_ascii() {
                    return Err(DecodeError::NonAscii(fid));
                }
                Value::Ascii(s)
            } else {
                Value::Utf8(s)
            }
        }
        FieldType::Enum => Value::Enum(r.u16()?),
    })
}

#[inline(always)]
fn read_date(fid: i16, r: &mut Reader<'_>) -> Result<Date, DecodeError> {
    let d = Date {
        year: r.u16()?,
        month: r.u8()?,
        day: r.u8()?,
    };
    if !d.is_valid() {
        return Err(DecodeError::InvalidDate {
            fid,
            year: d.year,
            month: d.month,
            day: d.day,
        });
    }
    Ok(d)
}

#[inline(always)]
fn read_time(fid: i16, r: &mut Reader<'_>) -> Result<Time, DecodeError> {
    let nanos = r.varint()?;
    if nanos >= NANOS_PER_DAY {
        return Err(DecodeError::InvalidTime { fid, nanos });
    }
    Ok(Time {
        nanos_since_midnight: nanos,
    })
}

/// A string's or buffer's bytes: a varint length, at most [`MAX_STRING_LEN`].
#[inline(always)]
fn read_bytes<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], DecodeError> {
    let len = r.varint()?;
    if len > MAX_STRING_LEN {
        return Err(DecodeError::InvalidValue {
            what: "string length",
            value: len,
        });
    }
    r.bytes(len as usize)
}

/// Checks one tag+value exactly as [`decode_value`] does (the same error for the same
/// bytes) without building the value: what validating a received list costs.
#[inline(always)]
fn check_value(fid: i16, r: &mut Reader<'_>) -> Result<(), DecodeError> {
    let tag = r.u8()?;
    match tag {
        0 => {}
        1 | 2 => r.skip_varint()?,
        3 => {
            r.u8()?;
            r.skip_varint()?;
        }
        4 => {
            read_date(fid, r)?;
        }
        5 => {
            read_time(fid, r)?;
        }
        9 => {
            read_date(fid, r)?;
            read_time(fid, r)?;
        }
        10 => {
            read_bytes(r)?;
        }
        6 | 7 => {
            let bytes = read_bytes(r)?;
            // ASCII is valid UTF-8 of either type; anything else gets the full checks.
            if !bytes.is_ascii() {
                let s = std::str::from_utf8(bytes)
                    .map_err(|_| DecodeError::InvalidUtf8("string field"))?;
                if tag == FieldType::Ascii as u8 && !s.is_ascii() {
                    return Err(DecodeError::NonAscii(fid));
                }
            }
        }
        8 => {
            r.u16()?;
        }
        _ => return Err(DecodeError::UnknownFieldType { fid, tag }),
    }
    Ok(())
}

/// An encoded field list whose structure has been validated: iterating it cannot fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldList<'a> {
    bytes: &'a [u8],
    count: u16,
}

impl<'a> FieldList<'a> {
    /// Validates and wraps an encoded field list that must fill `bytes` exactly.
    pub fn decode(bytes: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes, "field list");
        let count = r.u16()?;
        for _ in 0..count {
            let fid = r.i16()?;
            check_value(fid, &mut r)?;
        }
        r.finish()?;
        Ok(FieldList { bytes, count })
    }

    /// Validates a field list at the start of `r`, consuming it.
    pub(crate) fn decode_prefix(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let start = r.rest();
        let count = r.u16()?;
        for _ in 0..count {
            let fid = r.i16()?;
            check_value(fid, r)?;
        }
        let used = start.len() - r.remaining();
        Ok(FieldList {
            bytes: &start[..used],
            count,
        })
    }

    /// Wraps bytes this process encoded itself with [`FieldListWriter`] (or took from a
    /// validated list), skipping validation. Garbage in gives an iterator that stops early,
    /// never a panic.
    pub fn from_trusted(bytes: &'a [u8]) -> Self {
        let count = match bytes {
            [a, b, ..] => u16::from_be_bytes([*a, *b]),
            _ => 0,
        };
        if bytes.len() < 2 {
            return FieldList::EMPTY;
        }
        FieldList { bytes, count }
    }

    /// A list with no field.
    pub const EMPTY: FieldList<'static> = FieldList {
        bytes: &[0, 0],
        count: 0,
    };

    /// The encoded bytes, count included.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Fields in the list.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// No field.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Each field id and value.
    pub fn iter(&self) -> FieldIter<'a> {
        FieldIter {
            r: Reader::new(&self.bytes[2..], "field list"),
            left: self.count,
        }
    }

    /// Iterates (fid, encoded tag+value bytes) without decoding values.
    pub fn raw_iter(&self) -> RawFieldIter<'a> {
        RawFieldIter {
            r: Reader::new(&self.bytes[2..], "field list"),
            left: self.count,
        }
    }

    /// A field's value.
    pub fn get(&self, fid: i16) -> Option<Value<'a>> {
        self.iter().find(|(f, _)| *f == fid).map(|(_, v)| v)
    }
}

impl<'a> IntoIterator for FieldList<'a> {
    type Item = (i16, Value<'a>);
    type IntoIter = FieldIter<'a>;
    fn into_iter(self) -> FieldIter<'a> {
        self.iter()
    }
}

/// Iterator over a validated field list.
pub struct FieldIter<'a> {
    r: Reader<'a>,
    left: u16,
}

impl<'a> Iterator for FieldIter<'a> {
    type Item = (i16, Value<'a>);

    // Always, with the decoding and the checking of a value: a subscriber reads every
    // field of every update, and as calls these took a fifth of its time.
    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        let fid = next_fid(&mut self.r, &mut self.left)?;
        // The list was validated when it was built, so this cannot fail.
        let value = decode_value(fid, &mut self.r).ok()?;
        Some((fid, value))
    }
}

/// The next field's id of a validated list with `left` fields to go: both iterators
/// step through a list alike and differ only in what they make of the value.
#[inline(always)]
fn next_fid(r: &mut Reader<'_>, left: &mut u16) -> Option<i16> {
    if *left == 0 {
        return None;
    }
    *left -= 1;
    r.i16().ok()
}

/// Iterator yielding each field's id and its encoded tag+value bytes.
pub struct RawFieldIter<'a> {
    r: Reader<'a>,
    left: u16,
}

impl<'a> Iterator for RawFieldIter<'a> {
    type Item = (i16, &'a [u8]);

    // Always: FieldImage::apply's loop runs this once per field of every update, and
    // as a call it cost a fifth of a publisher's merge.
    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        let fid = next_fid(&mut self.r, &mut self.left)?;
        // The list was validated when it was built: only the value's length is needed.
        let used = encoded_len(self.r.rest())?;
        let value = self.r.bytes(used).ok()?;
        Some((fid, value))
    }
}

/// Length of the encoded tag+value at the start of `b`, found without decoding the
/// value: a varint ends at its first byte below 0x80, the fixed-size types have fixed
/// sizes, a string is its varint length plus that many bytes. Exact for a validated
/// list; on bytes that are not one (a [`FieldList::from_trusted`] given garbage) it may
/// accept a value a decoder would refuse, and it gives `None` (so the iterator stops)
/// for an unknown tag or a value running past the end. Never panics.
#[inline(always)]
fn encoded_len(b: &[u8]) -> Option<usize> {
    let len = match *b.first()? {
        0 => 1,
        1 | 2 | 5 => 1 + varint_len_at(b.get(1..)?)?,
        3 => 2 + varint_len_at(b.get(2..)?)?,
        4 => 5,
        9 => 5 + varint_len_at(b.get(5..)?)?,
        6 | 7 | 10 => {
            let mut r = Reader::new(b.get(1..)?, "field list");
            let n = r.varint().ok()?;
            if n > MAX_STRING_LEN {
                return None;
            }
            1 + (b.len() - 1 - r.remaining()) + n as usize
        }
        8 => 3,
        _ => return None,
    };
    (len <= b.len()).then_some(len)
}

/// Why [`FieldListWriter::try_push`] refuses a field (65,535 fields already, or a value
/// a decoder would reject).
#[cold]
#[inline(never)]
fn refusal(fid: i16, value: Value<'_>) -> crate::EncodeError {
    let reason = match value {
        Value::Ascii(s) if !s.is_ascii() => format!("{s:?} is not ASCII (use a UTF8 field)"),
        Value::Ascii(s) | Value::Utf8(s) if s.len() as u64 > MAX_STRING_LEN => {
            format!("string of {} bytes, limit {MAX_STRING_LEN}", s.len())
        }
        Value::Buffer(b) if b.len() as u64 > MAX_STRING_LEN => {
            format!("buffer of {} bytes, limit {MAX_STRING_LEN}", b.len())
        }
        Value::Date(d) | Value::DateTime(d, _) if !d.is_valid() => format!("invalid date {d}"),
        Value::DateTime(_, t) if t.nanos_since_midnight >= NANOS_PER_DAY => {
            format!("{} ns is past the end of the day", t.nanos_since_midnight)
        }
        Value::Time(t) if t.nanos_since_midnight >= NANOS_PER_DAY => {
            format!("{} ns is past the end of the day", t.nanos_since_midnight)
        }
        _ => "a field list holds at most 65,535 fields".into(),
    };
    crate::EncodeError::InvalidField { fid, reason }
}

/// Builds an encoded field list in a caller-owned buffer (no allocation once the buffer
/// has grown to size).
pub struct FieldListWriter<'b> {
    out: &'b mut Vec<u8>,
    count_at: usize,
    count: u16,
}

impl<'b> FieldListWriter<'b> {
    /// A writer appending a field list to `out` (its count is written by
    /// [`finish`](Self::finish)).
    pub fn new(out: &'b mut Vec<u8>) -> Self {
        let count_at = out.len();
        out.extend_from_slice(&[0, 0]);
        FieldListWriter {
            out,
            count_at,
            count: 0,
        }
    }

    /// Appends a field; `false` (nothing written) if [`try_push`](Self::try_push) would
    /// refuse it.
    pub fn push(&mut self, fid: i16, value: Value<'_>) -> bool {
        self.try_push(fid, value).is_ok()
    }

    /// Appends a field, refusing what a decoder would reject (so a publisher cannot send
    /// a list the node disconnects it for): non-ASCII text in an ASCII field, a string
    /// over 65,535 bytes, an impossible date, a time past midnight, a 65,536th field.
    #[inline]
    pub fn try_push(&mut self, fid: i16, value: Value<'_>) -> Result<(), crate::EncodeError> {
        // The checks inline, the message out of line: a number (the common case) costs
        // a compare and no call.
        let acceptable = self.count < u16::MAX
            && match value {
                Value::Ascii(s) => s.is_ascii() && s.len() as u64 <= MAX_STRING_LEN,
                Value::Utf8(s) => s.len() as u64 <= MAX_STRING_LEN,
                Value::Date(d) => d.is_valid(),
                Value::Time(t) => t.nanos_since_midnight < NANOS_PER_DAY,
                Value::DateTime(d, t) => d.is_valid() && t.nanos_since_midnight < NANOS_PER_DAY,
                Value::Buffer(b) => b.len() as u64 <= MAX_STRING_LEN,
                _ => true,
            };
        if !acceptable {
            return Err(refusal(fid, value));
        }
        self.out.extend_from_slice(&fid.to_be_bytes());
        value.encode(self.out);
        self.count += 1;
        Ok(())
    }

    /// Appends a field from its already-encoded tag+value bytes.
    pub fn push_raw(&mut self, fid: i16, encoded_value: &[u8]) -> bool {
        if self.count == u16::MAX {
            return false;
        }
        self.out.extend_from_slice(&fid.to_be_bytes());
        self.out.extend_from_slice(encoded_value);
        self.count += 1;
        true
    }

    /// Fields written.
    pub fn count(&self) -> u16 {
        self.count
    }

    /// Writes the count; returns the number of fields.
    pub fn finish(self) -> u16 {
        self.out[self.count_at..self.count_at + 2].copy_from_slice(&self.count.to_be_bytes());
        self.count
    }
}

/// Encodes a field list from pairs into a new vector (convenience for tests and tools).
pub fn encode_field_list<'v>(fields: impl IntoIterator<Item = (i16, Value<'v>)>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = FieldListWriter::new(&mut out);
    for (fid, v) in fields {
        w.push(fid, v);
    }
    w.finish();
    out
}

/// The most field-list bytes one part of a multi-part refresh carries (or one piece of
/// a conflated update too large for one message): room to spare under the native
/// protocol's 65,535-byte bodies.
pub const PART_BYTES: usize = 60_000;

/// Splits an encoded field list into field lists of at most about `max` bytes each
/// (images too large for one message go out as a multi-part refresh).
pub fn split_field_list(encoded: &[u8], max: usize) -> Vec<Vec<u8>> {
    let mut parts = Vec::new();
    let mut group: Vec<(i16, &[u8])> = Vec::new();
    let mut size = 2;
    let encode = |group: &[(i16, &[u8])]| {
        let mut out = Vec::with_capacity(max);
        let mut w = FieldListWriter::new(&mut out);
        for (fid, raw) in group {
            w.push_raw(*fid, raw);
        }
        w.finish();
        out
    };
    for (fid, raw) in FieldList::from_trusted(encoded).raw_iter() {
        if size + raw.len() + 2 > max && !group.is_empty() {
            parts.push(encode(&group));
            group.clear();
            size = 2;
        }
        group.push((fid, raw));
        size += raw.len() + 2;
    }
    parts.push(encode(&group));
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_real_becomes_the_float_nearest_its_decimal() {
        // Each float's shortest text is the decimal itself: one rounding, not two.
        for (m, e, text) in [
            (11122500, -5, "111.225"),
            (12697, -2, "126.97"),
            (-15, -3, "-0.015"),
            (10841, -4, "1.0841"),
            (31723, -2, "317.23"),
            (5, 3, "5000"),
            (0, 0, "0"),
        ] {
            assert_eq!(Real::new(m, e).to_f64().to_string(), text);
        }
        // Every mantissa below 2^53 with up to 22 places, against the parsed decimal.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let m = (x >> 11) as i64 % (1 << 53);
            let e = -((x % 23) as i8);
            let r = Real::new(m, e);
            assert_eq!(r.to_f64(), r.to_string().parse::<f64>().unwrap(), "{r}");
        }
        // Any mantissa, any exponent: the nearest float too.
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let r = Real::new(x as i64 >> (x % 60), (x >> 56) as i8);
            assert_eq!(r.to_f64(), r.to_string().parse::<f64>().unwrap(), "{r}");
        }
        for r in [Real::new(i64::MIN, -128), Real::new(i64::MAX, 127)] {
            assert_eq!(r.to_f64(), r.to_string().parse::<f64>().unwrap(), "{r}");
        }
    }

    #[test]
    fn a_real_prints_as_a_number_json_reads() {
        for (m, e, text) in [
            (0, 3, "0"),
            (0, 0, "0"),
            (0, -2, "0.00"),
            (5, 3, "5000"),
            (-5, 1, "-50"),
            (-15, -3, "-0.015"),
        ] {
            assert_eq!(Real::new(m, e).to_string(), text);
        }
    }

    /// A float written as the real of its shortest decimal (as publishers of floats
    /// do) reads back as the same float, whatever its digits.
    #[test]
    fn a_float_read_back_from_its_shortest_decimal_is_the_same_float() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let f = f64::from_bits(x >> 2) % 1e6;
            if !f.is_finite() {
                continue;
            }
            let (digits, exp) = format!("{f:e}")
                .split_once('e')
                .map(|(d, e)| (d.replace('.', ""), e.parse::<i32>().unwrap()))
                .unwrap();
            let places = digits.trim_start_matches('-').len() as i32 - 1;
            let Ok(exponent) = i8::try_from(exp - places) else {
                continue;
            };
            let r = Real::new(digits.parse().unwrap(), exponent);
            assert_eq!(r.to_f64(), f, "{r}");
        }
        assert_eq!(
            Real::new(10280011237530761, -15).to_f64(),
            10.280011237530761
        );
        assert_eq!(Real::new(12345, -29).to_f64(), 1.2345e-25);
    }

    #[test]
    fn the_writer_refuses_what_a_decoder_would_reject() {
        let mut out = Vec::new();
        let mut w = FieldListWriter::new(&mut out);
        assert!(w.try_push(3, Value::Ascii("café")).is_err());
        assert!(w
            .try_push(
                16,
                Value::Date(Date {
                    year: 2026,
                    month: 2,
                    day: 30
                })
            )
            .is_err());
        let late = Time {
            nanos_since_midnight: NANOS_PER_DAY,
        };
        assert!(w.try_push(5, Value::Time(late)).is_err());
        assert!(!w.push(3, Value::Ascii("é")));
        assert!(w.push(3, Value::Utf8("café")));
        assert_eq!(w.finish(), 1);
        assert_eq!(FieldList::decode(&out).unwrap().len(), 1);
    }

    #[test]
    fn raw_iter_on_untrusted_garbage_stops_without_panicking() {
        // from_trusted skips validation; raw_iter then only skips values. Whatever the
        // bytes, it yields slices inside the buffer that add up to at most all of it.
        let mut x: u64 = 0x1234_5678_9abc_def1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..20_000 {
            let len = (next() % 64) as usize;
            let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if round % 2 == 0 && len > 4 {
                bytes[2] = 0; // a plausible fid
                bytes[4] = (next() % 9) as u8; // a known tag
            }
            let list = FieldList::from_trusted(&bytes);
            let mut used = 2;
            for (_, raw) in list.raw_iter() {
                assert!(!raw.is_empty() && FieldType::from_tag(raw[0]).is_some());
                used += 2 + raw.len();
            }
            assert!(used <= bytes.len().max(2));
            let _ = list.iter().count();
        }
    }

    #[test]
    fn encoded_len_matches_the_decoder() {
        let mut out = Vec::new();
        let mut w = FieldListWriter::new(&mut out);
        let long = "z".repeat(70_000);
        let values = [
            Value::Blank,
            Value::Int(i64::MIN),
            Value::Int(-1),
            Value::UInt(u64::MAX),
            Value::UInt(0),
            Value::Real(Real::new(i64::MAX, -128)),
            Value::Date(Date {
                year: 2024,
                month: 2,
                day: 29,
            }),
            Value::Time(Time {
                nanos_since_midnight: NANOS_PER_DAY - 1,
            }),
            Value::Ascii(""),
            Value::Ascii(&long[..65_535]),
            Value::Utf8("é"),
            Value::Enum(65_535),
        ];
        for (i, v) in values.iter().enumerate() {
            assert!(w.push(i as i16, *v));
        }
        w.finish();
        let list = FieldList::decode(&out).unwrap();
        let raw: Vec<_> = list.raw_iter().collect();
        assert_eq!(raw.len(), values.len());
        for ((fid, enc), v) in raw.iter().zip(&values) {
            let mut expected = Vec::new();
            v.encode(&mut expected);
            assert_eq!((*fid, *enc), (*fid, &expected[..]));
        }
        // A cut list stops early instead of reading past its end.
        let cut = FieldList::from_trusted(&out[..out.len() - 1]);
        assert_eq!(cut.raw_iter().count(), values.len() - 1);
    }

    #[test]
    fn validation_gives_the_decoders_verdict_on_any_bytes() {
        // FieldList::decode checks values without building them; it must accept and
        // refuse (with the same error) exactly what decoding every value would.
        fn by_decoding(bytes: &[u8]) -> Result<(), DecodeError> {
            let mut r = Reader::new(bytes, "field list");
            let count = r.u16()?;
            for _ in 0..count {
                let fid = r.i16()?;
                decode_value(fid, &mut r)?;
            }
            r.finish()
        }
        let mut valid = Vec::new();
        let mut w = FieldListWriter::new(&mut valid);
        w.push(1, Value::Int(-300));
        w.push(2, Value::UInt(1 << 62));
        w.push(3, Value::Real(Real::new(-1_000_125, -4)));
        w.push(
            4,
            Value::Date(Date {
                year: 2024,
                month: 2,
                day: 29,
            }),
        );
        w.push(
            5,
            Value::Time(Time {
                nanos_since_midnight: NANOS_PER_DAY - 1,
            }),
        );
        w.push(6, Value::Ascii("IBM"));
        w.push(7, Value::Utf8("café"));
        w.push(8, Value::Enum(840));
        w.push(9, Value::Blank);
        w.finish();
        let mut x: u64 = 0x0123_4567_89ab_cdef;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut refused = 0;
        for _ in 0..100_000 {
            let mut b = valid.clone();
            for _ in 0..1 + next() % 3 {
                let at = (next() % b.len() as u64) as usize;
                b[at] = match next() % 4 {
                    0 => next() as u8,
                    1 => b[at] ^ 0x80,
                    2 => 0xff,
                    _ => 0xc3,
                };
            }
            let cut = b.len() - (next() % 3) as usize;
            let b = &b[..cut];
            let expected = by_decoding(b);
            refused += expected.is_err() as u32;
            assert_eq!(FieldList::decode(b).map(|_| ()), expected, "{b:02x?}");
        }
        assert!(refused > 10_000 && refused < 100_000);
    }
}
