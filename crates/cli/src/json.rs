//! Events as JSON objects (one per line) and as plain text lines.

use serde_json::{json, Map, Value as Json};
use tickwire_client::EventRef;
use tickwire_proto::{Dictionary, FieldList, Value};

/// A field value as JSON: reals as numbers, dates "YYYY-MM-DD", times
/// "HH:MM:SS.nnnnnnnnn", enums as numbers, blank as null, buffers base64.
pub(crate) fn value_json(v: &Value<'_>) -> Json {
    match v {
        Value::Blank => Json::Null,
        Value::Int(i) => json!(i),
        Value::UInt(u) => json!(u),
        Value::Real(r) => {
            // Through the decimal text, so 100.01 prints as 100.01.
            let text = r.to_string();
            text.parse::<f64>().map(|f| json!(f)).unwrap_or(Json::Null)
        }
        Value::Date(d) => json!(d.to_string()),
        Value::Time(t) => json!(t.to_string()),
        Value::Ascii(s) | Value::Utf8(s) => json!(s),
        Value::Enum(e) => json!(e),
        // "YYYY-MM-DDTHH:MM:SS.nnnnnnnnn" and base64, as `tickwire post` reads them.
        v @ (Value::DateTime(..) | Value::Buffer(_)) => json!(v.to_string()),
    }
}

pub(crate) fn fields_json(dict: &Dictionary, fields: FieldList<'_>) -> Json {
    let mut m = Map::new();
    for (fid, v) in fields.iter() {
        let key = dict
            .name(fid)
            .map_or_else(|| fid.to_string(), str::to_string);
        m.insert(key, value_json(&v));
    }
    Json::Object(m)
}

fn state_json(s: &tickwire_proto::State<'_>) -> Json {
    json!({
        "stream": s.stream.name(),
        "data": s.data.name(),
        "code": s.code,
        "text": s.text,
    })
}

/// [`event_json`] as one line of text, with the characters JSON lets through that
/// would act on a terminal (C1 controls, bidi overrides) escaped too, as in
/// `files status --json`.
pub(crate) fn event_json_line(dict: &Dictionary, e: &EventRef<'_>) -> String {
    let line = event_json(dict, e).to_string();
    tickwire_files::name::printable_json(&line).into_owned()
}

pub(crate) fn event_json(dict: &Dictionary, e: &EventRef<'_>) -> Json {
    match e {
        EventRef::Refresh(i, r) => json!({
            "type": "refresh",
            "service": i.service,
            "item": i.name,
            "stream": i.stream,
            "seq": r.seq,
            "complete": r.complete,
            "solicited": r.solicited,
            "state": state_json(&r.state),
            "fields": fields_json(dict, r.fields),
        }),
        EventRef::Update(i, u) => {
            let mut o = json!({
                "type": "update",
                "service": i.service,
                "item": i.name,
                "stream": i.stream,
                "seq": u.seq,
                "update_type": u.update_type.name(),
                "conflation_count": u.conflation_count,
                "fields": fields_json(dict, u.fields),
            });
            if u.do_not_conflate {
                o["do_not_conflate"] = json!(true);
            }
            o
        }
        EventRef::Status(i, s) => json!({
            "type": "status",
            "service": i.service,
            "item": i.name,
            "stream": i.stream,
            "state": state_json(&s.state),
        }),
        EventRef::Directory(d) => json!({
            "type": "directory",
            "services": d.services.iter().map(|s| json!({
                "name": s.name,
                "state": s.state.as_str(),
                "interactive": s.interactive,
                "items": s.item_count,
            })).collect::<Vec<_>>(),
        }),
        EventRef::Ack(a) => {
            let mut o = json!({
                "type": "ack",
                "stream": a.stream_id,
                "post_id": a.post_id,
                "ok": a.nak.is_none(),
                "text": a.text,
            });
            if let Some(code) = a.nak {
                o["nak_code"] = json!(code.name());
            }
            o
        }
        EventRef::Files(body) => json!({"type": "files", "bytes": body.len()}),
    }
}

fn fields_text(dict: &Dictionary, fields: FieldList<'_>) -> String {
    let mut out = String::new();
    for (fid, v) in fields.iter() {
        if !out.is_empty() {
            out.push(' ');
        }
        match dict.name(fid) {
            Some(n) => out.push_str(n),
            None => out.push_str(&fid.to_string()),
        }
        out.push('=');
        match v {
            // A publisher's text: shown without the characters that would write on the
            // terminal or forge a line of output.
            Value::Ascii(text) | Value::Utf8(text) => {
                out.push_str(&tickwire_files::name::printable(text))
            }
            v => out.push_str(&v.to_string()),
        }
    }
    out
}

/// One human-readable line per event.
pub(crate) fn event_line(dict: &Dictionary, e: &EventRef<'_>) -> String {
    match e {
        EventRef::Refresh(i, r) => format!(
            "REFRESH {}/{} seq={} state={}/{} {}",
            i.service,
            i.name,
            r.seq,
            r.state.stream.name(),
            r.state.data.name(),
            fields_text(dict, r.fields)
        ),
        EventRef::Update(i, u) => format!(
            "UPDATE  {}/{} seq={} {} {}",
            i.service,
            i.name,
            u.seq,
            u.update_type.name(),
            fields_text(dict, u.fields)
        ),
        EventRef::Status(i, s) => format!(
            "STATUS  {}/{} state={}/{} code={} {:?}",
            i.service,
            i.name,
            s.state.stream.name(),
            s.state.data.name(),
            s.state.code,
            s.state.text
        ),
        EventRef::Directory(d) => format!(
            "DIRECTORY {}",
            d.services
                .iter()
                .map(|s| format!("{}({})", s.name, s.state.as_str()))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        EventRef::Ack(a) => match a.nak {
            None => format!("ACK     post {} accepted {:?}", a.post_id, a.text),
            Some(code) => format!("NAK     post {} {} {:?}", a.post_id, code.name(), a.text),
        },
        EventRef::Files(body) => format!("FILES   {} bytes", body.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwire_client::ItemRef;
    use tickwire_proto::{encode_field_list, Update, UpdateType};

    #[test]
    fn a_publishers_text_cannot_write_on_the_terminal_or_forge_a_line() {
        let text = "X\nUPDATE  FEED/Y seq=9 Quote BID=1\u{1b}[2J\u{202e}";
        let fields = encode_field_list([(3, Value::Utf8(text))]);
        let e = EventRef::Update(
            ItemRef {
                stream: 1,
                service: "FEED",
                name: "X",
            },
            Update {
                stream_id: 1,
                seq: 1,
                update_type: UpdateType::Quote,
                do_not_conflate: false,
                conflation_count: 1,
                fields: FieldList::decode(&fields).unwrap(),
            },
        );
        let line = event_line(&Dictionary::market_price(), &e);
        assert!(!line.contains(['\n', '\u{1b}', '\u{202e}']), "{line:?}");
        assert!(
            line.ends_with("X\\u{a}UPDATE  FEED/Y seq=9 Quote BID=1\\u{1b}[2J\\u{202e}"),
            "{line:?}"
        );
        // As JSON: escaped as JSON (the override too), and the same text once parsed.
        let json = event_json_line(&Dictionary::market_price(), &e);
        assert!(!json.contains(['\n', '\u{1b}', '\u{202e}']), "{json:?}");
        let parsed: Json = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed["fields"]["DSPLY_NAME"], text, "{json}");
    }
}
