//! Field values from text, by the field's type: what a person types on a command line
//! (`BID=101.25`) and what a JSON number or string holds (the WebSocket API's posts).
//! Reals keep the decimal exactly as written: `101.25` is mantissa 10125, exponent -2.
//! A date and time is `YYYY-MM-DDTHH:MM:SS[.fraction]`; a buffer is base64, as the
//! WebSocket API writes it.

use crate::field::{Date, FieldType, Real, Time, Value};

/// Parses `text` as a value of type `ty`. An empty text is a blank. A buffer's bytes
/// are decoded into `scratch`, which the value then borrows.
pub fn parse_value<'a>(
    ty: FieldType,
    text: &'a str,
    scratch: &'a mut Vec<u8>,
) -> Result<Value<'a>, String> {
    if text.is_empty() {
        return Ok(Value::Blank);
    }
    let bad = |what: &str| format!("{text:?} is not {what}");
    Ok(match ty {
        FieldType::Blank => return Err(bad("blank (an empty value)")),
        FieldType::Int => Value::Int(text.parse().map_err(|_| bad("an integer"))?),
        FieldType::UInt => Value::UInt(text.parse().map_err(|_| bad("an integer of 0 or more"))?),
        FieldType::Enum => Value::Enum(
            text.parse()
                .map_err(|_| bad("an enumeration value (0 to 65535)"))?,
        ),
        FieldType::Real => Value::Real(parse_real(text).ok_or_else(|| bad("a decimal number"))?),
        FieldType::Date => Value::Date(parse_date(text).ok_or_else(|| bad("a date (YYYY-MM-DD)"))?),
        FieldType::Time => {
            Value::Time(parse_time(text).ok_or_else(|| bad("a time of day (HH:MM:SS[.fraction])"))?)
        }
        FieldType::Ascii if text.is_ascii() => Value::Ascii(text),
        FieldType::Ascii => return Err(bad("ASCII text")),
        FieldType::Utf8 => Value::Utf8(text),
        FieldType::DateTime => {
            let (date, time) = text
                .split_once(['T', ' '])
                .and_then(|(d, t)| Some((parse_date(d)?, parse_time(t)?)))
                .ok_or_else(|| bad("a date and time (YYYY-MM-DDTHH:MM:SS[.fraction])"))?;
            Value::DateTime(date, time)
        }
        FieldType::Buffer => {
            use base64::Engine;
            *scratch = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|_| bad("base64"))?;
            Value::Buffer(scratch)
        }
    })
}

/// A decimal number: optional sign, digits, optional fraction, optional exponent
/// (`1.5e-3`), as exactly as a `Real` can hold it (mantissa up to 18 digits). The
/// fraction's digits make the exponent, its trailing zeros too, as the Real-Time SDK
/// reads a number's text: `101.50` is 10150 and -2, shown `101.50` by an application
/// that formats by the hint; only a number with more than 18 digits loses trailing
/// zeros of its fraction, as many as it must to fit.
pub fn parse_real(text: &str) -> Option<Real> {
    let (number, exp) = match text.find(['e', 'E']) {
        Some(i) => (&text[..i], text[i + 1..].parse::<i32>().ok()?),
        None => (text, 0),
    };
    let (negative, digits) = match number.as_bytes().first()? {
        b'-' => (true, &number[1..]),
        b'+' => (false, &number[1..]),
        _ => (false, number),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Leading zeros of the whole carry nothing; trailing zeros of the fraction carry
    // the precision, kept while the mantissa has room for them.
    let int = int.trim_start_matches('0');
    let digits = if int.is_empty() {
        // 0.0050: the zeros before the 5 are no digits of the mantissa.
        frac.trim_start_matches('0').len()
    } else {
        int.len() + frac.len()
    };
    let trailing_zeros = frac.len() - frac.trim_end_matches('0').len();
    let frac = &frac[..frac.len() - digits.saturating_sub(18).min(trailing_zeros)];
    let all: String = format!("{int}{frac}");
    let all = all.trim_start_matches('0');
    if all.len() > 18 {
        return None;
    }
    let mut mantissa: i64 = if all.is_empty() { 0 } else { all.parse().ok()? };
    let mut exponent = exp.checked_sub(frac.len() as i32)?;
    // Keep the exponent in range where the value allows (1e200 does not fit; 100e-200
    // is 1e-198).
    while exponent < i8::MIN as i32 && mantissa % 10 == 0 && mantissa != 0 {
        mantissa /= 10;
        exponent += 1;
    }
    // Zero keeps its hint (0.00) where it fits one.
    if mantissa == 0 && i8::try_from(exponent).is_err() {
        exponent = 0;
    }
    let exponent = i8::try_from(exponent).ok()?;
    Some(Real::new(
        if negative { -mantissa } else { mantissa },
        exponent,
    ))
}

fn parse_date(text: &str) -> Option<Date> {
    let mut parts = text.splitn(3, '-');
    let d = Date {
        year: parts.next()?.parse().ok()?,
        month: parts.next()?.parse().ok()?,
        day: parts.next()?.parse().ok()?,
    };
    d.is_valid().then_some(d)
}

fn parse_time(text: &str) -> Option<Time> {
    let (hms, frac) = text.split_once('.').unwrap_or((text, ""));
    let mut parts = hms.splitn(3, ':');
    let h: u8 = parts.next()?.parse().ok()?;
    let m: u8 = parts.next()?.parse().ok()?;
    let s: u8 = parts.next().unwrap_or("0").parse().ok()?;
    if h > 23 || m > 59 || s > 59 || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let nanos = if frac.is_empty() {
        0
    } else {
        frac.parse::<u32>().ok()? * 10u32.pow(9 - frac.len() as u32)
    };
    Some(Time::from_hms_nanos(h, m, s, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reals_keep_the_decimal_as_written() {
        let r = |m, e| Some(Real::new(m, e));
        assert_eq!(parse_real("101.25"), r(10125, -2));
        assert_eq!(parse_real("-0.5"), r(-5, -1));
        assert_eq!(parse_real("+7"), r(7, 0));
        // The fraction's trailing zeros are its precision, as written.
        assert_eq!(parse_real("1.50"), r(150, -2));
        assert_eq!(parse_real("101.500"), r(101500, -3));
        assert_eq!(parse_real("0.0050"), r(50, -4));
        assert_eq!(parse_real("-2.0"), r(-20, -1));
        assert_eq!(parse_real("1.50e2"), r(150, 0));
        // Past 18 digits, only as many trailing zeros go as must.
        assert_eq!(
            parse_real("12345678901234567.800"),
            r(123456789012345678, -1)
        );
        assert_eq!(
            parse_real("1.00000000000000000000"),
            r(100000000000000000, -17)
        );
        assert_eq!(parse_real("1.5e-3"), r(15, -4));
        assert_eq!(parse_real("2E2"), r(2, 2));
        assert_eq!(parse_real("0.000"), r(0, -3));
        assert_eq!(parse_real("0"), r(0, 0));
        assert_eq!(parse_real("0e-999"), r(0, 0));
        assert_eq!(parse_real(".5"), r(5, -1));
        assert_eq!(parse_real("123456789012345678"), r(123456789012345678, 0));
        for bad in [
            "",
            "-",
            ".",
            "1.2.3",
            "abc",
            "1e",
            "1e999",
            "1234567890123456789",
            "1,5",
        ] {
            assert_eq!(parse_real(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn every_type_parses_from_text_and_says_what_it_wanted() {
        assert_eq!(
            parse_value(FieldType::Int, "-3", &mut Vec::new()),
            Ok(Value::Int(-3))
        );
        assert_eq!(
            parse_value(FieldType::UInt, "300", &mut Vec::new()),
            Ok(Value::UInt(300))
        );
        assert_eq!(
            parse_value(FieldType::Enum, "840", &mut Vec::new()),
            Ok(Value::Enum(840))
        );
        assert_eq!(
            parse_value(FieldType::Ascii, "IBM", &mut Vec::new()),
            Ok(Value::Ascii("IBM"))
        );
        assert_eq!(
            parse_value(FieldType::Utf8, "Zürich", &mut Vec::new()),
            Ok(Value::Utf8("Zürich"))
        );
        assert_eq!(
            parse_value(FieldType::Real, "", &mut Vec::new()),
            Ok(Value::Blank)
        );
        assert_eq!(
            parse_value(FieldType::Date, "2024-02-29", &mut Vec::new()),
            Ok(Value::Date(Date {
                year: 2024,
                month: 2,
                day: 29
            }))
        );
        assert_eq!(
            parse_value(FieldType::Time, "13:45:01.5", &mut Vec::new()),
            Ok(Value::Time(Time::from_hms_nanos(13, 45, 1, 500_000_000)))
        );
        assert_eq!(
            parse_value(FieldType::UInt, "-1", &mut Vec::new()),
            Err("\"-1\" is not an integer of 0 or more".into())
        );
        assert!(parse_value(FieldType::Date, "2023-02-29", &mut Vec::new()).is_err());
        assert!(parse_value(FieldType::Time, "24:00:00", &mut Vec::new()).is_err());
        assert!(parse_value(FieldType::Ascii, "Zürich", &mut Vec::new()).is_err());
        assert_eq!(
            parse_value(
                FieldType::DateTime,
                "2024-02-29T13:45:01.5",
                &mut Vec::new()
            ),
            Ok(Value::DateTime(
                Date {
                    year: 2024,
                    month: 2,
                    day: 29
                },
                Time::from_hms_nanos(13, 45, 1, 500_000_000)
            ))
        );
        assert!(parse_value(FieldType::DateTime, "2024-02-29", &mut Vec::new()).is_err());
        let mut scratch = Vec::new();
        assert_eq!(
            parse_value(FieldType::Buffer, "AAH/", &mut scratch),
            Ok(Value::Buffer(&[0, 1, 255]))
        );
        assert_eq!(
            parse_value(FieldType::Buffer, "not base64!", &mut Vec::new()),
            Err("\"not base64!\" is not base64".into())
        );
    }
}
