//! Field values between Python and the wire, by the dictionary's type of each field.
//!
//! To Python: REAL is a `float`, INT/UINT/ENUM an `int`, DATE a `datetime.date`, TIME a
//! `datetime.time`, DATETIME a naive `datetime.datetime` (UTC), BUFFER `bytes`,
//! ASCII/UTF8 a `str`, a blank `None`. From Python, each type takes its
//! natural values and a string in the form the command line takes (`"101.25"`,
//! `"2026-11-24"`, `"14:30:00.25"`); a `float` keeps its shortest decimal form (101.25
//! is sent as 10125e-2, not as the nearest binary fraction); INT/UINT fields take a
//! `datetime` as nanoseconds since the Unix epoch (the latency stamp TIM_TRK_1). A naive
//! datetime is in UTC wherever it goes. numpy's numbers are taken as Python's.

use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDate, PyDateTime, PyDict, PyFloat, PyString, PyTime,
};
use std::collections::HashMap;
use std::sync::Arc;
use tickwire_client::proto::dictionary::Dictionary;
use tickwire_client::proto::field::{Date, FieldListWriter, FieldType, Real, Time, Value};
use tickwire_client::proto::text::{parse_real, parse_value};
use tickwire_client::proto::FieldList;

/// The dictionary a Subscriber or Publisher names fields by: the built-in MarketPrice
/// one, or a file in the dictionary format.
pub(crate) fn load_dictionary(path: Option<&str>) -> PyResult<Arc<Dictionary>> {
    Ok(Arc::new(match path {
        None => Dictionary::market_price(),
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| PyValueError::new_err(format!("cannot read dictionary {p}: {e}")))?;
            Dictionary::parse(&text)
                .map_err(|e| PyValueError::new_err(format!("dictionary {p}: {e}")))?
        }
    }))
}

/// Makes pyo3 import `datetime`'s types, which it does the first time a date, time or
/// datetime is made or recognized (under the stable ABI, which has no C API for them):
/// called once, while the module is imported. Left to the first event with a date, it
/// would import them in a subscriber's thread, another thread needing them meanwhile
/// waiting for it with the GIL released and taking the GIL back through pyo3's own
/// detach, which aborts the process if the interpreter began exiting in between (see
/// detach.rs).
pub(crate) fn import_datetime_types(py: Python<'_>) -> PyResult<()> {
    PyDate::new(py, 2000, 1, 1)?;
    PyTime::new(py, 0, 0, 0, 0, None)?;
    PyDateTime::new(py, 2000, 1, 1, 0, 0, 0, 0, None)?;
    Ok(())
}

/// The names of the built-in dictionary's fields, by field id.
#[pyfunction]
pub(crate) fn field_names() -> std::collections::BTreeMap<i16, String> {
    Dictionary::market_price()
        .fields()
        .into_iter()
        .map(|f| (f.fid, f.name.clone()))
        .collect()
}

/// The dictionary's field names as Python strings, made once: every event's dict
/// shares them instead of allocating its keys (a third of a subscriber's time).
pub struct FieldNames(HashMap<i16, Py<PyString>>);

impl FieldNames {
    pub fn new(py: Python<'_>, dictionary: &Dictionary) -> Self {
        FieldNames(
            dictionary
                .fields()
                .into_iter()
                .map(|f| (f.fid, PyString::intern(py, &f.name).unbind()))
                .collect(),
        )
    }
}

/// A field list as a dict by field name (a field the dictionary does not know is keyed
/// by its id).
pub(crate) fn fields_to_dict<'py>(
    py: Python<'py>,
    list: FieldList<'_>,
    names: &FieldNames,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (fid, value) in list.iter() {
        let value = value_to_py(py, value)?;
        match names.0.get(&fid) {
            Some(name) => dict.set_item(name.bind(py), value)?,
            None => dict.set_item(fid, value)?,
        }
    }
    Ok(dict)
}

fn value_to_py<'py>(py: Python<'py>, value: Value<'_>) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Blank => py.None().into_bound(py),
        Value::Int(i) => i.into_pyobject(py)?.into_any(),
        Value::UInt(u) => u.into_pyobject(py)?.into_any(),
        Value::Enum(e) => e.into_pyobject(py)?.into_any(),
        Value::Real(r) => r.to_f64().into_pyobject(py)?.into_any(),
        Value::Ascii(s) | Value::Utf8(s) => PyString::new(py, s).into_any(),
        // A date or time Python cannot hold (year 0 or after 9999, both allowed on the
        // wire, or an invalid one) is None, as a blank is: one such value must not cost
        // the whole batch of events it came in.
        Value::Date(d) if d.is_valid() => PyDate::new(py, d.year.into(), d.month, d.day)
            .map_or_else(|_| py.None().into_bound(py), |d| d.into_any()),
        Value::Date(_) => py.None().into_bound(py),
        Value::Time(t) => {
            let (h, m, s, us) = hms_micros(t);
            PyTime::new(py, h, m, s, us, None)
                .map_or_else(|_| py.None().into_bound(py), |t| t.into_any())
        }
        Value::DateTime(d, t) if d.is_valid() => {
            let (h, m, s, us) = hms_micros(t);
            PyDateTime::new(py, d.year.into(), d.month, d.day, h, m, s, us, None)
                .map_or_else(|_| py.None().into_bound(py), |d| d.into_any())
        }
        Value::DateTime(..) => py.None().into_bound(py),
        Value::Buffer(b) => PyBytes::new(py, b).into_any(),
    })
}

/// Hours, minutes, seconds and microseconds (what Python's times hold) of a time.
fn hms_micros(t: Time) -> (u8, u8, u8, u32) {
    let n = t.nanos_since_midnight;
    let secs = n / 1_000_000_000;
    (
        (secs / 3600 % 24) as u8,
        (secs / 60 % 60) as u8,
        (secs % 60) as u8,
        (n % 1_000_000_000 / 1000) as u32,
    )
}

/// Encodes a dict of field name (or id) -> value into `out`.
pub(crate) fn encode_dict(
    dict: &Bound<'_, PyDict>,
    dictionary: &Dictionary,
    out: &mut Vec<u8>,
) -> PyResult<()> {
    out.clear();
    let mut writer = FieldListWriter::new(out);
    // Strings parsed from Python text borrow it: keep the texts alive until encoded.
    for (key, value) in dict.iter() {
        let (fid, name) = field_of(&key, dictionary)?;
        let ty = dictionary.get(fid).expect("field_of found it").field_type;
        let text;
        let mut scratch = Vec::new();
        let value = match py_to_value(&value, ty) {
            Ok(Converted::Value(v)) => v,
            Ok(Converted::Bytes(b)) => {
                scratch = b;
                Value::Buffer(&scratch)
            }
            Ok(Converted::Text(t)) => {
                text = t;
                parse_value(ty, &text, &mut scratch).map_err(|why| bad_value(&name, ty, &why))?
            }
            Err(why) => return Err(bad_value(&name, ty, &why)),
        };
        writer
            .try_push(fid, value)
            .map_err(|e| PyValueError::new_err(format!("field {name}: {e}")))?;
    }
    writer.finish();
    Ok(())
}

fn bad_value(name: &str, ty: FieldType, why: &str) -> PyErr {
    PyValueError::new_err(format!("field {name} ({}): {why}", ty.name()))
}

/// The field id and name a dict key stands for.
fn field_of(key: &Bound<'_, PyAny>, dictionary: &Dictionary) -> PyResult<(i16, String)> {
    if let Ok(name) = key.cast::<PyString>() {
        let name = name.to_cow()?;
        let fid = dictionary.fid(&name).ok_or_else(|| {
            PyKeyError::new_err(format!("field {name:?} is not in the dictionary"))
        })?;
        return Ok((fid, name.to_string()));
    }
    if key.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(
            "a field is named by a str or an int id, not bool",
        ));
    }
    if let Ok(id) = key.extract::<i128>() {
        let def = i16::try_from(id)
            .ok()
            .and_then(|fid| dictionary.get(fid))
            .ok_or_else(|| {
                PyKeyError::new_err(format!("field id {id} is not in the dictionary"))
            })?;
        return Ok((def.fid, def.name.clone()));
    }
    Err(PyTypeError::new_err(format!(
        "a field is named by a str or an int id, not {}",
        key.get_type().name()?
    )))
}

enum Converted {
    Value(Value<'static>),
    /// A string (or a decimal number's text) for `parse_value`.
    Text(String),
    /// A buffer's bytes.
    Bytes(Vec<u8>),
}

fn py_to_value(v: &Bound<'_, PyAny>, ty: FieldType) -> Result<Converted, String> {
    use Converted::{Text, Value as V};
    if v.is_none() {
        return Ok(V(Value::Blank));
    }
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(Text(s.to_cow().map_err(|e| e.to_string())?.into_owned()));
    }
    let type_name = || {
        v.get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default()
    };
    // Python's bool and numpy's (`bool_`, `bool` in numpy 2), which would pass for a
    // number.
    if v.is_instance_of::<PyBool>() || matches!(type_name().as_str(), "bool_" | "bool") {
        return Err("a bool is not a field value".into());
    }
    match ty {
        FieldType::Real => {
            // decimal.Decimal and the like: their text.
            if type_name() == "Decimal" {
                return Ok(Text(v.str().map_err(|e| e.to_string())?.to_string()));
            }
            // Ints, and numpy's (anything with __index__), exactly: one past 128 bits
            // too is refused, not taken as the float below would round it.
            if v.hasattr("__index__").unwrap_or(false) {
                let i = v
                    .extract::<i128>()
                    .ok()
                    .and_then(|i| i64::try_from(i).ok())
                    .ok_or_else(|| {
                        let text = v.str().map(|s| s.to_string()).unwrap_or_default();
                        format!("{text} does not fit 64 bits")
                    })?;
                return Ok(V(Value::Real(Real::new(i, 0))));
            }
            // Floats, and numpy's (anything with __float__).
            if v.is_instance_of::<PyFloat>() || v.hasattr("__float__").unwrap_or(false) {
                let f = v.extract::<f64>().map_err(|e| e.to_string())?;
                if !f.is_finite() {
                    return Err(format!("{f} is not a finite number"));
                }
                // `{:e}` is the shortest form that reads back as the same float.
                return parse_real(&format!("{f:e}"))
                    .map(|r| V(Value::Real(r)))
                    .ok_or_else(|| format!("{f:e} does not fit a decimal (at most 18 digits, times 10 to the power -128 to 127)"));
            }
        }
        FieldType::Int | FieldType::UInt => {
            let n: Option<i128> = if let Ok(dt) = v.cast::<PyDateTime>() {
                Some(epoch_nanos(dt).map_err(|e| e.to_string())?)
            } else if v.hasattr("__index__").unwrap_or(false) {
                // An int, or numpy's.
                Some(
                    v.extract()
                        .map_err(|_| "does not fit 64 bits".to_string())?,
                )
            } else {
                None
            };
            if let Some(n) = n {
                return if ty == FieldType::Int {
                    i64::try_from(n)
                        .map(|i| V(Value::Int(i)))
                        .map_err(|_| format!("{n} does not fit 64 bits"))
                } else {
                    u64::try_from(n)
                        .map(|u| V(Value::UInt(u)))
                        .map_err(|_| format!("{n} is not an integer of 0 to 2^64-1"))
                };
            }
        }
        FieldType::Enum => {
            if v.hasattr("__index__").unwrap_or(false) {
                let e: u16 = v
                    .extract()
                    .map_err(|_| "is not an enumeration value (0 to 65535)".to_string())?;
                return Ok(V(Value::Enum(e)));
            }
        }
        FieldType::Date => {
            // A datetime is a date too: its date, in UTC when it is aware (as its
            // instant is taken in a TIME or DATETIME field).
            if let Ok(dt) = v.cast::<PyDateTime>() {
                let dt = if dt.getattr("tzinfo").map_err(|e| e.to_string())?.is_none() {
                    dt.clone()
                } else {
                    in_utc(dt).map_err(|e| e.to_string())?
                };
                return Ok(V(Value::Date(date_of(dt.as_any())?)));
            }
            if let Ok(d) = v.cast::<PyDate>() {
                return Ok(V(Value::Date(date_of(d.as_any())?)));
            }
        }
        FieldType::Time => {
            let (h, m, s, us) = if let Ok(dt) = v.cast::<PyDateTime>() {
                // An aware datetime is taken in UTC, a naive one as it is.
                let dt = if dt.getattr("tzinfo").map_err(|e| e.to_string())?.is_none() {
                    dt.clone()
                } else {
                    in_utc(dt).map_err(|e| e.to_string())?
                };
                time_of(dt.as_any()).map_err(|e| e.to_string())?
            } else if let Ok(t) = v.cast::<PyTime>() {
                if !t.getattr("tzinfo").map_err(|e| e.to_string())?.is_none() {
                    return Err(
                        "an aware datetime.time is not taken (its offset may depend on \
                        the date): give the time in UTC, naive, or an aware datetime"
                            .into(),
                    );
                }
                time_of(t.as_any()).map_err(|e| e.to_string())?
            } else {
                return Err(format!("expected a datetime.time, not {}", type_name()));
            };
            return Ok(V(Value::Time(Time::from_hms_nanos(h, m, s, us * 1000))));
        }
        FieldType::DateTime => {
            let Ok(dt) = v.cast::<PyDateTime>() else {
                return Err(format!("expected a datetime.datetime, not {}", type_name()));
            };
            // An aware datetime is taken in UTC, a naive one as it is.
            let dt = if dt.getattr("tzinfo").map_err(|e| e.to_string())?.is_none() {
                dt.clone()
            } else {
                in_utc(dt).map_err(|e| e.to_string())?
            };
            let date = date_of(dt.as_any())?;
            let (h, m, s, us) = time_of(dt.as_any()).map_err(|e| e.to_string())?;
            let time = Time::from_hms_nanos(h, m, s, us * 1000);
            return Ok(V(Value::DateTime(date, time)));
        }
        FieldType::Buffer => {
            if let Ok(b) = v.cast::<PyBytes>() {
                return Ok(Converted::Bytes(b.as_bytes().to_vec()));
            }
            if let Ok(b) = v.cast::<PyByteArray>() {
                return Ok(Converted::Bytes(b.to_vec()));
            }
        }
        FieldType::Ascii | FieldType::Utf8 | FieldType::Blank => {}
    }
    Err(format!("cannot take a value of type {}", type_name()))
}

/// A date's (or datetime's) year, month and day. Read as attributes: the limited API
/// of the abi3 wheels has no C accessors for them.
fn date_of(d: &Bound<'_, PyAny>) -> Result<Date, String> {
    let get = |name: &str| -> Result<i32, String> {
        d.getattr(name)
            .and_then(|v| v.extract::<i32>())
            .map_err(|e| e.to_string())
    };
    Ok(Date {
        year: u16::try_from(get("year")?).map_err(|_| "year out of range")?,
        month: get("month")? as u8,
        day: get("day")? as u8,
    })
}

/// A time's (or datetime's) hour, minute, second and microsecond, as attributes.
fn time_of(t: &Bound<'_, PyAny>) -> PyResult<(u8, u8, u8, u32)> {
    let get = |name: &str| -> PyResult<u32> { t.getattr(name)?.extract::<u32>() };
    Ok((
        get("hour")? as u8,
        get("minute")? as u8,
        get("second")? as u8,
        get("microsecond")?,
    ))
}

/// An aware datetime in UTC.
fn in_utc<'py>(dt: &Bound<'py, PyDateTime>) -> PyResult<Bound<'py, PyDateTime>> {
    let utc = dt
        .py()
        .import("datetime")?
        .getattr("timezone")?
        .getattr("utc")?;
    Ok(dt
        .call_method1("astimezone", (utc,))?
        .cast_into::<PyDateTime>()?)
}

/// Nanoseconds since the Unix epoch, exactly (a float timestamp would round them). A
/// naive datetime is in UTC, as a DATETIME field takes it (and reads it back).
fn epoch_nanos(dt: &Bound<'_, PyDateTime>) -> PyResult<i128> {
    let t = if dt.getattr("tzinfo")?.is_none() {
        dt.clone()
    } else {
        in_utc(dt)?
    };
    let date = date_of(t.as_any()).map_err(pyo3::exceptions::PyValueError::new_err)?;
    let (h, m, s, us) = time_of(t.as_any())?;
    let days = days_from_civil(date.year.into(), date.month.into(), date.day.into());
    let secs = days * 86_400 + i128::from(h) * 3600 + i128::from(m) * 60 + i128::from(s);
    Ok(secs * 1_000_000_000 + i128::from(us) * 1000)
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i128, m: i128, d: i128) -> i128 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}
