//! RWF's primitive values as they sit inside containers: a length (given by the
//! container) and a body. A body of length 0 is blank, whatever the type.

use super::wire::{put_u16, RwfError};
use tickwire_proto::{Date, Real, Time};

/// RWF data types (the numbers on the wire).
pub mod dt {
    // Each constant is the wire's number, under the name the SDK's public code gives it.
    #![allow(missing_docs)]
    pub const INT: u8 = 3;
    pub const UINT: u8 = 4;
    pub const FLOAT: u8 = 5;
    pub const DOUBLE: u8 = 6;
    pub const REAL: u8 = 8;
    pub const DATE: u8 = 9;
    pub const TIME: u8 = 10;
    pub const DATETIME: u8 = 11;
    pub const QOS: u8 = 12;
    pub const STATE: u8 = 13;
    pub const ENUM: u8 = 14;
    pub const ARRAY: u8 = 15;
    pub const BUFFER: u8 = 16;
    pub const ASCII_STRING: u8 = 17;
    pub const UTF8_STRING: u8 = 18;
    pub const RMTES_STRING: u8 = 19;
    pub const NO_DATA: u8 = 128;
    pub const OPAQUE: u8 = 130;
    pub const FIELD_LIST: u8 = 132;
    pub const ELEMENT_LIST: u8 = 133;
    pub const FILTER_LIST: u8 = 135;
    pub const VECTOR: u8 = 136;
    pub const MAP: u8 = 137;
    pub const SERIES: u8 = 138;
    pub const MSG: u8 = 141;
}

/// Real hints 0..=21 are `value * 10^(hint - 14)`; 22..=30 `value / 2^(hint - 22)`.
const HINT_EXPONENT_0: i8 = 14;
const HINT_FRACTION_1: u8 = 22;
const HINT_FRACTION_256: u8 = 30;
const HINT_INFINITY: u8 = 33;
const HINT_NEG_INFINITY: u8 = 34;
const HINT_NAN: u8 = 35;
const HINT_BLANK_BIT: u8 = 0x20;

/// An RWF real as it was on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RwfReal {
    /// Blank.
    Blank,
    /// A value: mantissa and exponent hint.
    Value {
        /// The mantissa.
        value: i64,
        /// The exponent hint (RWF's, 0..30).
        hint: u8,
    },
    /// Positive infinity.
    Infinity,
    /// Negative infinity.
    NegInfinity,
    /// Not a number.
    NaN,
}

impl RwfReal {
    /// As the node's decimal, exactly: a fraction `v / 2^k` is `v * 5^k / 10^k`.
    /// `None`: blank, infinite, not a number, or too large for the decimal.
    pub fn to_decimal(self) -> Option<Real> {
        let RwfReal::Value { value, hint } = self else {
            return None;
        };
        decimal_of(value, hint)
    }

    /// From the node's decimal: exponents -14..=7 keep their value and hint; others
    /// are scaled into that range (dropping digits below 10^-14 and rounding toward
    /// zero, or multiplying up to 10^7).
    pub fn from_decimal(r: Real) -> RwfReal {
        match value_and_hint(r) {
            Some((value, hint)) => RwfReal::Value { value, hint },
            None => RwfReal::Infinity,
        }
    }
}

/// A Real's value and hint (0..=30) as the node's decimal, exactly: a fraction
/// `v / 2^k` is `v * 5^k / 10^k`. `None` if too large for the decimal.
#[inline]
fn decimal_of(value: i64, hint: u8) -> Option<Real> {
    if hint < HINT_FRACTION_1 {
        return Some(Real::new(value, hint as i8 - HINT_EXPONENT_0));
    }
    let k = (hint - HINT_FRACTION_1) as u32;
    let m = value.checked_mul(5i64.pow(k))?;
    Some(Real::new(m, -(k as i8)))
}

/// The node's decimal as a Real's value and exponent hint: exponents -14..=7 keep
/// their value; others are scaled into that range (dropping digits below 10^-14 and
/// rounding toward zero, or multiplying up to 10^7). `None`: too large (infinity).
#[inline]
fn value_and_hint(r: Real) -> Option<(i64, u8)> {
    let (mut m, mut e) = (r.mantissa, r.exponent as i32);
    while e < -14 {
        m /= 10;
        e += 1;
    }
    while e > 7 {
        m = m.checked_mul(10)?;
        e -= 1;
    }
    Some((m, (e + HINT_EXPONENT_0 as i32) as u8))
}

/// Minimal two's-complement bytes of `v`.
#[inline]
pub fn put_int(out: &mut Vec<u8>, v: i64) {
    // The bits that differ from the sign, plus the sign bit, in whole bytes: counted,
    // not searched for a byte at a time (this runs for every price a consumer gets).
    let redundant = if v < 0 {
        v.leading_ones()
    } else {
        v.leading_zeros()
    };
    let bytes = ((64 - redundant) / 8 + 1).min(8) as usize;
    put_top_bytes(out, (v as u64) << (8 * (8 - bytes)), bytes);
}

/// The first `n` (1 to 8) big-endian bytes of `word`: one 8-byte store and a cut,
/// not a copy of a length known only at run time.
#[inline]
fn put_top_bytes(out: &mut Vec<u8>, word: u64, n: usize) {
    let len = out.len();
    out.extend_from_slice(&word.to_be_bytes());
    out.truncate(len + n);
}

/// Minimal unsigned bytes of `v` (at least one).
#[inline]
pub fn put_uint(out: &mut Vec<u8>, v: u64) {
    let skip = (v.leading_zeros() / 8).min(7) as usize;
    put_top_bytes(out, v << (8 * skip), 8 - skip);
}

/// An Int (blank: `None`).
pub fn int(body: &[u8]) -> Result<Option<i64>, RwfError> {
    match body.len() {
        0 => Ok(None),
        1..=8 => {
            let mut v: i64 = if body[0] & 0x80 != 0 { -1 } else { 0 };
            for &b in body {
                v = (v << 8) | b as i64;
            }
            Ok(Some(v))
        }
        n => Err(RwfError::invalid("an Int", format!("{n} bytes (1 to 8)"))),
    }
}

/// A UInt (blank: `None`).
pub fn uint(body: &[u8]) -> Result<Option<u64>, RwfError> {
    match body.len() {
        0 => Ok(None),
        1..=8 => Ok(Some(body.iter().fold(0u64, |v, &b| (v << 8) | b as u64))),
        n => Err(RwfError::invalid("a UInt", format!("{n} bytes (1 to 8)"))),
    }
}

/// Writes a Real.
pub fn put_real(out: &mut Vec<u8>, r: RwfReal) {
    match r {
        RwfReal::Blank => {}
        RwfReal::Infinity => out.push(HINT_INFINITY),
        RwfReal::NegInfinity => out.push(HINT_NEG_INFINITY),
        RwfReal::NaN => out.push(HINT_NAN),
        RwfReal::Value { value, hint } => {
            out.push(hint);
            put_int(out, value);
        }
    }
}

/// Writes the node's decimal as a Real, as [`put_real`] of [`RwfReal::from_decimal`]
/// writes it, without the `RwfReal` between them: every price a consumer gets goes
/// this way.
#[inline]
pub fn put_decimal(out: &mut Vec<u8>, r: Real) {
    match value_and_hint(r) {
        Some((value, hint)) => {
            out.push(hint);
            put_int(out, value);
        }
        None => out.push(HINT_INFINITY),
    }
}

/// Reads a Real.
pub fn real(body: &[u8]) -> Result<RwfReal, RwfError> {
    match body.first().map(|first| first & 0x3F) {
        Some(HINT_INFINITY) => Ok(RwfReal::Infinity),
        Some(HINT_NEG_INFINITY) => Ok(RwfReal::NegInfinity),
        Some(HINT_NAN) => Ok(RwfReal::NaN),
        _ => Ok(
            real_parts(body)?.map_or(RwfReal::Blank, |(value, hint)| RwfReal::Value {
                value,
                hint,
            }),
        ),
    }
}

/// A Real read straight into the node's decimal, as [`real`] then
/// [`RwfReal::to_decimal`] read it (`None`: blank, infinite, not a number, or too large
/// for the decimal), without the `RwfReal` between them: every price a provider
/// publishes comes this way.
#[inline]
pub fn real_decimal(body: &[u8]) -> Result<Option<Real>, RwfError> {
    Ok(real_parts(body)?.and_then(|(value, hint)| decimal_of(value, hint)))
}

/// A Real's value and hint; `None` for a blank one (infinity, -infinity and NaN,
/// 0x21-0x23, carry the blank bit too: [`real`] reads them first).
#[inline]
fn real_parts(body: &[u8]) -> Result<Option<(i64, u8)>, RwfError> {
    let [first, rest @ ..] = body else {
        return Ok(None);
    };
    if first & HINT_BLANK_BIT != 0 || rest.is_empty() {
        return Ok(None);
    }
    let hint = first & 0x1F;
    if hint > HINT_FRACTION_256 {
        return Err(RwfError::invalid("a Real", format!("hint {hint}")));
    }
    Ok(Some((int(rest)?.expect("not empty"), hint)))
}

/// Writes a Date.
pub fn put_date(out: &mut Vec<u8>, d: Date) {
    out.push(d.day);
    out.push(d.month);
    put_u16(out, d.year);
}

/// Reads a Date (blank: `None`).
pub fn date(body: &[u8]) -> Result<Option<Date>, RwfError> {
    match body {
        [] | [0, 0, 0, 0] => Ok(None),
        [day, month, y0, y1] => Ok(Some(Date {
            day: *day,
            month: *month,
            year: u16::from_be_bytes([*y0, *y1]),
        })),
        _ => Err(RwfError::invalid(
            "a Date",
            format!("{} bytes (4)", body.len()),
        )),
    }
}

/// A time to the nanosecond in the shortest form that keeps it (2, 3, 5, 7 or 8 bytes).
pub fn put_time(out: &mut Vec<u8>, t: Time) {
    let n = t.nanos_since_midnight;
    let secs = n / 1_000_000_000;
    let sub = n % 1_000_000_000;
    let (ms, us, ns) = (sub / 1_000_000, (sub / 1000) % 1000, sub % 1000);
    out.push((secs / 3600) as u8);
    out.push(((secs / 60) % 60) as u8);
    let s = (secs % 60) as u8;
    if sub == 0 && s == 0 {
        return;
    }
    out.push(s);
    if sub == 0 {
        return;
    }
    put_u16(out, ms as u16);
    if us == 0 && ns == 0 {
        return;
    }
    if ns == 0 {
        put_u16(out, us as u16);
        return;
    }
    // The 8-byte form: bits 10..0 of the word are µs, bits 13..11 ns's bits 10..8.
    put_u16(out, (((ns as u16) & 0x700) << 3) | us as u16);
    out.push(ns as u8);
}

/// Reads a Time (blank: `None`).
pub fn time(body: &[u8]) -> Result<Option<Time>, RwfError> {
    let bad = || RwfError::invalid("a Time", format!("{} bytes (2, 3, 5, 7 or 8)", body.len()));
    if body.is_empty() {
        return Ok(None);
    }
    if !matches!(body.len(), 2 | 3 | 5 | 7 | 8) {
        return Err(bad());
    }
    let (h, m) = (body[0], body[1]);
    let s = body.get(2).copied().unwrap_or(0);
    let ms = if body.len() >= 5 {
        u16::from_be_bytes([body[3], body[4]])
    } else {
        0
    };
    // All fields at their maximum is the SDK's other blank.
    if h == 255 && m == 255 {
        return Ok(None);
    }
    let (mut us, mut ns) = (0u32, 0u32);
    if body.len() >= 7 {
        let w = u16::from_be_bytes([body[5], body[6]]);
        if body.len() == 8 {
            us = (w & 0x7FF) as u32;
            ns = (((w & 0x3800) >> 3) as u32) + body[7] as u32;
        } else {
            us = w as u32;
        }
    }
    // Minute to nanosecond as given, and their blank values: blank ones after the
    // last part given are a time to a lesser precision (10:30 with its seconds and
    // below blank, as the SDK writes one), and read as zeros.
    let given = match body.len() {
        2 => 1,
        3 => 2,
        5 => 3,
        7 => 4,
        _ => 5,
    };
    let mut parts = [m as u32, s as u32, ms as u32, us, ns];
    let blank = [255, 255, 65_535, 2047, 2047];
    if let Some(first) = (0..given).find(|&i| parts[i] == blank[i]) {
        if (first..given).all(|i| parts[i] == blank[i]) {
            parts[first..].fill(0);
        }
    }
    let [m, s, ms, us, ns] = parts;
    if h > 23 || m > 59 || s > 60 || ms > 999 || us > 999 || ns > 999 {
        return Err(RwfError::invalid(
            "a Time",
            format!("{h}:{m}:{s}.{ms}.{us}.{ns} is not a time of day"),
        ));
    }
    let nanos = ms * 1_000_000 + us * 1000 + ns;
    Ok(Some(Time::from_hms_nanos(
        h,
        m as u8,
        s.min(59) as u8,
        nanos,
    )))
}

/// A date and time: the date's 4 bytes, then the time in its shortest form.
pub fn put_datetime(out: &mut Vec<u8>, d: Date, t: Time) {
    put_date(out, d);
    put_time(out, t);
}

/// A date and time (6, 7, 9, 11 or 12 bytes); `None` when the date is blank (a time
/// of no date, which the SDK takes, is no node date and time: blank, as a date with a
/// blank part is, rather than the end of its field list). A blank time is the day's
/// start.
pub fn datetime(body: &[u8]) -> Result<Option<(Date, Time)>, RwfError> {
    if body.is_empty() {
        return Ok(None);
    }
    if !matches!(body.len(), 6 | 7 | 9 | 11 | 12) {
        return Err(RwfError::invalid(
            "a DateTime",
            format!("{} bytes (6, 7, 9, 11 or 12)", body.len()),
        ));
    }
    let date = date(&body[..4])?;
    let time = time(&body[4..])?;
    Ok(date.map(|d| (d, time.unwrap_or(Time::from_hms_nanos(0, 0, 0, 0)))))
}

/// A binary float (4 bytes) or double (8 bytes), big-endian, as the decimal that
/// prints as it does (a float 0.1 is 0.1, not 0.100000001490116). `None`: blank, or
/// infinite or not a number, which a decimal cannot hold.
pub fn float_or_double(body: &[u8]) -> Result<Option<Real>, RwfError> {
    // `{:e}` is the shortest text that reads back as the same binary number.
    let text = match body.len() {
        0 => return Ok(None),
        4 => {
            let f = f32::from_be_bytes(body.try_into().expect("4 bytes"));
            if !f.is_finite() {
                return Ok(None);
            }
            format!("{f:e}")
        }
        8 => {
            let f = f64::from_be_bytes(body.try_into().expect("8 bytes"));
            if !f.is_finite() {
                return Ok(None);
            }
            format!("{f:e}")
        }
        n => {
            return Err(RwfError::invalid(
                "a Float or Double",
                format!("{n} bytes (4 or 8)"),
            ))
        }
    };
    Ok(tickwire_proto::text::parse_real(&text))
}

/// Writes a Float.
pub fn put_float(out: &mut Vec<u8>, r: Real) {
    out.extend_from_slice(&(r.to_f64() as f32).to_be_bytes());
}

/// Writes a Double.
pub fn put_double(out: &mut Vec<u8>, r: Real) {
    out.extend_from_slice(&r.to_f64().to_be_bytes());
}

/// Writes an Enum.
pub fn put_enum(out: &mut Vec<u8>, v: u16) {
    if v <= 0xFF {
        out.push(v as u8);
    } else {
        put_u16(out, v);
    }
}

/// Reads an Enum (blank: `None`).
pub fn enumerated(body: &[u8]) -> Result<Option<u16>, RwfError> {
    match body {
        [] => Ok(None),
        [v] => Ok(Some(*v as u16)),
        [a, b] => Ok(Some(u16::from_be_bytes([*a, *b]))),
        _ => Err(RwfError::invalid(
            "an Enum",
            format!("{} bytes (1 or 2)", body.len()),
        )),
    }
}

/// QoS: realtime, tick by tick (the only one a node offers).
pub const QOS_REALTIME_TICK_BY_TICK: u8 = 0x22;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy;

    fn body(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut v = Vec::new();
        f(&mut v);
        v
    }

    #[test]
    fn the_sdks_own_bodies() {
        // From the SDK's codec: INT -1 FF, 128 00 80; UINT 200 C8, 0x12345 01 23 45.
        assert_eq!(body(|o| put_int(o, -1)), [0xFF]);
        assert_eq!(body(|o| put_int(o, 128)), [0x00, 0x80]);
        assert_eq!(body(|o| put_int(o, -129)), [0xFF, 0x7F]);
        assert_eq!(body(|o| put_uint(o, 200)), [0xC8]);
        assert_eq!(body(|o| put_uint(o, 0x12345)), [0x01, 0x23, 0x45]);
        assert_eq!(body(|o| put_uint(o, 0)), [0]);
        // REAL 12.34 0C 04 D2; DATE 15/11/2005 0F 0B 07 D5; TIME 21:00:01 15 00 01.
        let r = RwfReal::from_decimal(Real::new(1234, -2));
        assert_eq!(body(|o| put_real(o, r)), [0x0C, 0x04, 0xD2]);
        let d = Date {
            year: 2005,
            month: 11,
            day: 15,
        };
        assert_eq!(body(|o| put_date(o, d)), [0x0F, 0x0B, 0x07, 0xD5]);
        let t = Time::from_hms_nanos(21, 0, 1, 0);
        assert_eq!(body(|o| put_time(o, t)), [0x15, 0x00, 0x01]);
        // 21:00:01.500, µs 7, ns 999: 15 00 01 01 F4 18 07 E7.
        let t = Time::from_hms_nanos(21, 0, 1, 500_007_999);
        let b = body(|o| put_time(o, t));
        assert_eq!(b, [0x15, 0x00, 0x01, 0x01, 0xF4, 0x18, 0x07, 0xE7]);
        assert_eq!(time(&b), Ok(Some(t)));
        assert_eq!(body(|o| put_enum(o, 840)), [0x03, 0x48]);
    }

    proptest::proptest! {
        /// Every Int comes back, in the fewest bytes that keep its sign (one fewer
        /// would read back as another number), edges included.
        #[test]
        fn ints_take_the_fewest_bytes_that_keep_them(
            v in proptest::prop_oneof![
                proptest::num::i64::ANY,
                (0u32..64).prop_map(|k| 1i64 << k),
                (0u32..64).prop_map(|k| (1i64 << k).wrapping_sub(1)),
                (0u32..64).prop_map(|k| (1i64 << k).wrapping_neg()),
                (0u32..64).prop_map(|k| (1i64 << k).wrapping_neg().wrapping_sub(1)),
            ]
        ) {
            let b = body(|o| put_int(o, v));
            proptest::prop_assert_eq!(int(&b), Ok(Some(v)));
            if b.len() > 1 {
                proptest::prop_assert_ne!(int(&b[1..]), Ok(Some(v)), "{:?} is not minimal", b);
            }
        }
    }

    proptest::proptest! {
        /// Every UInt comes back in the fewest bytes (one at least).
        #[test]
        fn uints_take_the_fewest_bytes(
            v in proptest::prop_oneof![
                proptest::num::u64::ANY,
                (0u32..64).prop_map(|k| 1u64 << k),
                (0u32..64).prop_map(|k| (1u64 << k) - 1),
            ]
        ) {
            let b = body(|o| put_uint(o, v));
            proptest::prop_assert_eq!(uint(&b), Ok(Some(v)));
            proptest::prop_assert!(b.len() == 1 || b[0] != 0, "{:?} is not minimal", b);
        }
    }

    proptest::proptest! {
        /// The one-step writing of a decimal is the two-step one, for any decimal.
        #[test]
        fn a_decimal_written_as_a_real_is_the_real_made_from_it(
            mantissa in proptest::num::i64::ANY,
            exponent in proptest::num::i8::ANY,
        ) {
            let r = Real::new(mantissa, exponent);
            proptest::prop_assert_eq!(
                body(|o| put_decimal(o, r)),
                body(|o| put_real(o, RwfReal::from_decimal(r)))
            );
        }
    }

    proptest::proptest! {
        /// The one-step reading of a Real is the two-step one, for any bytes.
        #[test]
        fn a_real_read_as_a_decimal_is_the_real_made_one(
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..12)
        ) {
            proptest::prop_assert_eq!(
                real_decimal(&body),
                real(&body).map(RwfReal::to_decimal)
            );
        }
    }

    #[test]
    fn reals_keep_their_value_both_ways() {
        for (m, e) in [
            (1234i64, -2i8),
            (-5, 0),
            (7, 7),
            (1, -14),
            (0, -4),
            (i64::MIN, -3),
        ] {
            let r = Real::new(m, e);
            let b = body(|o| put_real(o, RwfReal::from_decimal(r)));
            assert_eq!(real(&b).unwrap().to_decimal(), Some(r));
        }
        // A fraction: -3/256 is -0.01171875.
        let frac = real(&[0x1E, 0xFD]).unwrap();
        assert_eq!(frac.to_decimal(), Some(Real::new(-3 * 390_625, -8)));
        assert_eq!(real(&[]), Ok(RwfReal::Blank));
        assert_eq!(real(&[0x21]), Ok(RwfReal::Infinity));
        assert_eq!(real(&[0x2C, 0x01]), Ok(RwfReal::Blank));
    }

    #[test]
    fn a_date_and_time_of_a_blank_date_is_blank() {
        let mut b = Vec::new();
        put_date(
            &mut b,
            Date {
                year: 0,
                month: 0,
                day: 0,
            },
        );
        put_time(&mut b, Time::from_hms_nanos(10, 30, 5, 0));
        assert_eq!(datetime(&b), Ok(None));
        // The other way round: the day's start.
        let mut b = Vec::new();
        let d = Date {
            year: 2026,
            month: 12,
            day: 1,
        };
        put_date(&mut b, d);
        b.extend_from_slice(&[255, 255, 255]);
        assert_eq!(
            datetime(&b),
            Ok(Some((d, Time::from_hms_nanos(0, 0, 0, 0))))
        );
    }

    #[test]
    fn a_time_to_the_hour_minute_or_second_reads_with_zeros_below() {
        // Parts at their blank values after the last one given: the SDK's time to a
        // lesser precision (10:30 is written with its seconds and below blank).
        let t = |h, m, s, nanos| Ok(Some(Time::from_hms_nanos(h, m, s, nanos)));
        let minute = [10, 30, 255, 0xFF, 0xFF, 0x3F, 0xFF, 0xFF];
        assert_eq!(time(&minute), t(10, 30, 0, 0));
        assert_eq!(time(&[10, 30, 255]), t(10, 30, 0, 0));
        assert_eq!(time(&[10, 255]), t(10, 0, 0, 0));
        assert_eq!(time(&[10, 30, 5, 0xFF, 0xFF]), t(10, 30, 5, 0));
        assert_eq!(
            time(&[10, 30, 5, 0, 7, 0x07, 0xFF]),
            t(10, 30, 5, 7_000_000)
        );
        let no_ns = [10, 30, 5, 0, 7, 0x38, 0x08, 0xFF];
        assert_eq!(time(&no_ns), t(10, 30, 5, 7_008_000));
        // A blank part before one that is given is no time.
        assert!(time(&[10, 30, 255, 0, 5]).is_err());
        assert!(time(&[10, 255, 5]).is_err());
        assert!(time(&[255, 30]).is_err());
        assert!(
            time(&[10, 30, 5, 0, 7, 0x3D, 0xDC, 0xFF]).is_err(),
            "1500 µs"
        );
    }

    #[test]
    fn times_of_every_length() {
        for nanos in [0u32, 0, 123_000_000, 123_456_000, 123_456_789] {
            for (h, m, s) in [(0u8, 0u8, 0u8), (9, 30, 0), (23, 59, 59)] {
                let t = Time::from_hms_nanos(h, m, s, nanos);
                let b = body(|o| put_time(o, t));
                assert!(matches!(b.len(), 2 | 3 | 5 | 7 | 8));
                assert_eq!(time(&b), Ok(Some(t)), "{b:02x?}");
            }
        }
        assert!(time(&[1, 2, 3, 4]).is_err());
        assert_eq!(time(&[255, 255, 255]), Ok(None));
    }
}
