//! The JSON a session writes: strings escaped, states, codes and update types by their
//! RSSL names, field lists by the dictionary's types, keys, and the statuses and errors
//! it answers with.

use super::JsonOut;
use serde_json::Value as Json;
use std::fmt::Write as _;
use tickwire_proto::{
    code, DataState, Dictionary, FieldList, ReplayFrom, State, StreamState, UpdateType, Value,
};

pub(super) fn escape(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(Bytes(out), "\\u{:04x}", c as u32);
            }
            c => {
                let mut b = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
            }
        }
    }
    out.push(b'"');
}

/// `fmt::Write` into a byte vector.
pub(super) struct Bytes<'a>(pub(super) &'a mut Vec<u8>);

pub(super) fn stream_name(s: StreamState) -> &'static str {
    match s {
        StreamState::Open => "Open",
        StreamState::NonStreaming => "NonStreaming",
        StreamState::ClosedRecover => "ClosedRecover",
        StreamState::Closed => "Closed",
    }
}

pub(super) fn data_name(d: DataState) -> &'static str {
    match d {
        DataState::Ok => "Ok",
        DataState::Suspect => "Suspect",
    }
}

/// The API's state code for a node status code.
pub(super) fn code_name(c: u16) -> &'static str {
    match c {
        code::NONE => "None",
        code::NOT_FOUND => "NotFound",
        code::SERVICE_DOWN => "NoResources",
        code::TOO_MANY_STREAMS => "TooManyItems",
        code::MALFORMED => "InvalidArgument",
        code::LOGIN_REJECTED | code::NOT_ENTITLED => "NotEntitled",
        code::TIMEOUT => "Timeout",
        code::SHUTDOWN => "None",
        code::SLOW_CONSUMER => "NoResources",
        code::TOO_MANY_CONNECTIONS => "NoResources",
        code::PROTOCOL => "UsageError",
        code::UPDATES_DROPPED => "GapDetected",
        code::PUBLISHER_GONE => "NoResources",
        code::TOO_MANY_SERVICES => "NoResources",
        code::TOO_LARGE => "NoResources",
        _ => "Error",
    }
}

/// The WebSocket API's name of an update type: the RDM's names, which number them as
/// the node does; a value without one is `Unspecified`.
pub(super) fn update_type_name(t: UpdateType) -> &'static str {
    const RDM: [&str; 12] = [
        "Unspecified",
        "Quote",
        "Trade",
        "NewsAlert",
        "VolumeAlert",
        "OrderIndication",
        "ClosingRun",
        "Correction",
        "MarketDigest",
        "QuotesTrade",
        "Multiple",
        "Verify",
    ];
    RDM.get(usize::from(t.to_u8()))
        .copied()
        .unwrap_or("Unspecified")
}

pub(super) fn write_state(
    out: &mut Vec<u8>,
    stream: StreamState,
    data: DataState,
    c: u16,
    text: &str,
) {
    out.extend_from_slice(b"{\"Stream\":\"");
    out.extend_from_slice(stream_name(stream).as_bytes());
    out.extend_from_slice(b"\",\"Data\":\"");
    out.extend_from_slice(data_name(data).as_bytes());
    out.push(b'"');
    if c != code::NONE {
        out.extend_from_slice(b",\"Code\":\"");
        out.extend_from_slice(code_name(c).as_bytes());
        out.push(b'"');
    }
    out.extend_from_slice(b",\"Text\":");
    escape(out, text);
    out.push(b'}');
}

/// A field list as a JSON object keyed by dictionary name (a field the dictionary does
/// not know is keyed by its number).
pub(super) fn write_fields(out: &mut Vec<u8>, dict: &Dictionary, fields: FieldList<'_>) {
    out.push(b'{');
    let mut first = true;
    for (fid, v) in fields.iter() {
        if !first {
            out.push(b',');
        }
        first = false;
        match dict.name(fid) {
            Some(name) => escape(out, name),
            None => escape(out, &fid.to_string()),
        }
        out.push(b':');
        match v {
            Value::Blank => out.extend_from_slice(b"null"),
            Value::Int(i) => {
                let _ = write!(Bytes(out), "{i}");
            }
            Value::UInt(u) => {
                let _ = write!(Bytes(out), "{u}");
            }
            Value::Real(r) => {
                let _ = write!(Bytes(out), "{r}");
            }
            Value::Enum(e) => {
                let _ = write!(Bytes(out), "{e}");
            }
            Value::Date(d) => escape(out, &d.to_string()),
            Value::Time(t) => escape(out, &t.to_string()),
            Value::Ascii(s) | Value::Utf8(s) => escape(out, s),
            // As the text parsers read them back: ISO 8601 and base64 strings.
            v @ (Value::DateTime(..) | Value::Buffer(_)) => escape(out, &v.to_string()),
        }
    }
    out.push(b'}');
}

pub(super) fn write_key(out: &mut Vec<u8>, service: &str, name: &str) {
    out.extend_from_slice(b"\"Key\":{\"Service\":");
    escape(out, service);
    out.extend_from_slice(b",\"Name\":");
    escape(out, name);
    out.push(b'}');
}

/// A message's boolean key (`absent` when it is not there); a value of another type is
/// an error (the string "false" once streamed).
pub(super) fn flag(
    obj: &serde_json::Map<String, Json>,
    key: &str,
    absent: bool,
) -> Result<bool, String> {
    match obj.get(key) {
        None | Some(Json::Null) => Ok(absent),
        Some(Json::Bool(b)) => Ok(*b),
        Some(other) => Err(format!(
            "JSON Converter Token Type error: expected true or false for key '{key}', not {other}"
        )),
    }
}

/// An `Error` message: the offending ID (0 if unknown), a text, and the message.
pub(super) fn write_error(out: &mut JsonOut, id: i64, text: &str, offending: &str) {
    let o = out.begin();
    let _ = write!(Bytes(o), "{{\"ID\":{id},\"Type\":\"Error\",\"Text\":");
    escape(o, text);
    o.extend_from_slice(b",\"Debug\":{\"Message\":");
    escape(o, crate::ws::prefix_within(offending, 1024));
    o.extend_from_slice(b"}}");
}

/// `"Replay": {"FromSeq": N}` or `{"FromTimeNs": N}` (nanoseconds since the Unix
/// epoch).
pub(super) fn parse_replay(r: &Json) -> Result<ReplayFrom, String> {
    let seq = r.get("FromSeq").and_then(Json::as_u64);
    let time = r.get("FromTimeNs").and_then(Json::as_u64);
    match (seq, time) {
        (Some(s), None) => u32::try_from(s)
            .map(ReplayFrom::Seq)
            .map_err(|_| format!("Replay FromSeq {s} is out of range")),
        (None, Some(t)) => Ok(ReplayFrom::Time(t)),
        _ => Err("Replay takes one of FromSeq (a sequence number) or FromTimeNs (nanoseconds since the Unix epoch)".into()),
    }
}

/// A `Status` on a client ID.
#[allow(clippy::too_many_arguments)]
pub(super) fn write_status(
    out: &mut JsonOut,
    id: i64,
    login: bool,
    key: Option<(&str, &str)>,
    stream: StreamState,
    data: DataState,
    c: u16,
    text: &str,
) {
    let o = out.begin();
    let _ = write!(Bytes(o), "{{\"ID\":{id},\"Type\":\"Status\",");
    if login {
        o.extend_from_slice(b"\"Domain\":\"Login\",");
    }
    if let Some((service, name)) = key {
        write_key(o, service, name);
        o.push(b',');
    }
    o.extend_from_slice(b"\"State\":");
    write_state(o, stream, data, c, text);
    o.push(b'}');
}

/// The node's state of a stream as a `Status` on a client ID.
pub(super) fn write_node_status(
    out: &mut JsonOut,
    id: i64,
    login: bool,
    key: Option<(&str, &str)>,
    st: &State<'_>,
) {
    write_status(out, id, login, key, st.stream, st.data, st.code, st.text);
}

/// The one `Status` that answers a batch (of item names, or of IDs to close) as a
/// whole, its first ID closed: every one of the `n` was taken (`what` says what the
/// batch was).
pub(super) fn write_batch_status(out: &mut JsonOut, id: i64, n: usize, what: &str) {
    write_status(
        out,
        id,
        false,
        None,
        StreamState::Closed,
        DataState::Ok,
        code::NONE,
        &format!("Processed {n} total {what}. {n} Ok."),
    );
}

/// Refuses request `id` (a login when `login`): its stream closes, suspect.
pub(super) fn write_refusal(out: &mut JsonOut, id: i64, login: bool, c: u16, text: &str) {
    write_status(
        out,
        id,
        login,
        None,
        StreamState::Closed,
        DataState::Suspect,
        c,
        text,
    );
}
