//! Posts (contributions) over the WebSocket API: a `Post` on an item's stream or, with a
//! `Key`, on the login stream (off-stream), its `Message.Fields` encoded by the
//! dictionary's types; the node's answer comes back as an `Ack` with `AckID` = the
//! `PostID` and, when refused, `NakCode` and `Text`.

use super::json::{escape, write_error, Bytes};
use super::{JsonOut, Session};
use serde_json::value::RawValue;
use serde_json::Value as Json;
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;
use tickwire_proto::text::parse_value;
use tickwire_proto::{Ack, Dictionary, FieldList, FieldListWriter, Message, NakCode, Post};

/// A post the session cannot send: answered with a Nak when the client asked for an
/// Ack (and gave a PostID), else with an Error.
struct Refusal {
    code: NakCode,
    text: String,
}

fn refuse(code: NakCode, text: impl Into<String>) -> Refusal {
    Refusal {
        code,
        text: text.into(),
    }
}

/// The messages of a frame (an array's, or the one) as the client wrote them; none if
/// the frame does not parse so.
pub(super) fn messages_as_written(frame: &str) -> Vec<&str> {
    if frame.trim_start().starts_with('[') {
        serde_json::from_str::<Vec<&RawValue>>(frame)
            .map(|msgs| msgs.into_iter().map(RawValue::get).collect())
            .unwrap_or_default()
    } else {
        vec![frame]
    }
}

/// A posted message's `Fields` as written: each value's JSON text by field name.
#[derive(serde::Deserialize)]
struct PostWritten<'a> {
    #[serde(rename = "Message", borrow)]
    message: Option<MessageWritten<'a>>,
}

#[derive(serde::Deserialize)]
struct MessageWritten<'a> {
    #[serde(rename = "Fields", borrow)]
    fields: Option<HashMap<Cow<'a, str>, &'a RawValue>>,
}

/// The post's field values as written, by name: what a JSON number says beyond the
/// double it parses into (101.50 has two decimals).
fn fields_as_written(post: &str) -> HashMap<Cow<'_, str>, &RawValue> {
    serde_json::from_str::<PostWritten<'_>>(post)
        .ok()
        .and_then(|p| p.message)
        .and_then(|m| m.fields)
        .unwrap_or_default()
}

impl Session {
    pub(super) fn on_post(
        &mut self,
        id: i64,
        post: &serde_json::Map<String, Json>,
        written: Option<&str>,
        to_node: &mut Vec<u8>,
        out: &mut JsonOut,
        offending: &str,
    ) {
        let ack = match super::json::flag(post, "Ack", false) {
            Ok(a) => a,
            Err(why) => {
                write_error(out, id, &why, offending);
                return;
            }
        };
        let post_id = post.get("PostID").and_then(Json::as_i64);
        if let Err(r) = self.send_post(id, post, written, ack, post_id, to_node) {
            match post_id {
                Some(post_id) if ack => write_ack(out, id, post_id, Some(r.code), &r.text),
                _ => write_error(out, id, &r.text, offending),
            }
        }
    }

    fn send_post(
        &mut self,
        id: i64,
        post: &serde_json::Map<String, Json>,
        written: Option<&str>,
        ack: bool,
        post_id: Option<i64>,
        to_node: &mut Vec<u8>,
    ) -> Result<(), Refusal> {
        if self.logged_in().is_none() {
            return Err(refuse(
                NakCode::NotOpen,
                "login required before any other message",
            ));
        }
        let post_id =
            match post_id {
                Some(p) => u32::try_from(p).map_err(|_| {
                    refuse(
                        NakCode::InvalidContent,
                        format!("PostID {p} is not in 0..4294967295"),
                    )
                })?,
                None if ack => return Err(refuse(
                    NakCode::InvalidContent,
                    "JSON Missing required key 'PostID' (a post that asks for an Ack needs one)",
                )),
                None => 0,
            };
        let domain = super::domain_of(post).map_err(|why| refuse(NakCode::InvalidContent, why))?;
        if domain != "MarketPrice" {
            return Err(refuse(
                NakCode::InvalidContent,
                format!("domain {domain:?} is not supported (MarketPrice only)"),
            ));
        }
        let Some(message) = post.get("Message").and_then(Json::as_object) else {
            return Err(refuse(
                NakCode::InvalidContent,
                "JSON Missing required key 'Message' (the posted Update or Refresh)",
            ));
        };
        let image = match message
            .get("Type")
            .and_then(Json::as_str)
            .unwrap_or("Update")
        {
            "Update" => false,
            "Refresh" => true,
            other => {
                return Err(refuse(
                    NakCode::InvalidContent,
                    format!("a post carries an Update or a Refresh, not {other:?}"),
                ))
            }
        };
        let mut fields = Vec::new();
        match message.get("Fields") {
            Some(Json::Object(f)) => {
                let written = written.map(fields_as_written).unwrap_or_default();
                encode_fields(&self.cfg.dictionary, f, &written, &mut fields)?
            }
            None => {
                FieldListWriter::new(&mut fields).finish();
            }
            Some(_) => {
                return Err(refuse(
                    NakCode::InvalidContent,
                    "JSON Converter Token Type error: expected an object for key 'Fields'",
                ))
            }
        };
        // On the stream of an open item, or off-stream by the Key's names.
        let on_stream = self.by_json.get(&id).copied();
        let (stream_id, service, name) = match (on_stream, post.get("Key")) {
            (Some(sid), None) => (sid, String::new(), String::new()),
            (_, Some(key)) => {
                let service = self
                    .resolve_service(key.get("Service"))
                    .map_err(|why| refuse(NakCode::SourceUnknown, why))?;
                let Some(name) = key.get("Name").and_then(Json::as_str) else {
                    return Err(refuse(
                        NakCode::InvalidContent,
                        "JSON Missing required key 'Name' in 'Key'",
                    ));
                };
                (0, service, name.to_string())
            }
            (None, None) => {
                return Err(refuse(
                    NakCode::NotOpen,
                    format!(
                    "ID {id} is not an open item stream, and the post has no Key naming its item"
                ),
                ))
            }
        };
        // The node answers an off-stream post by its PostID alone: two waiting at once
        // with one PostID could not be told apart.
        if stream_id == 0 && self.off_stream_posts.contains_key(&post_id) {
            return Err(refuse(
                NakCode::InvalidContent,
                format!("PostID {post_id} is already waiting for its Ack: give each post its own"),
            ));
        }
        let msg = Message::Post(Post {
            stream_id,
            post_id,
            ack,
            image,
            redelivered: false,
            service: &service,
            name: &name,
            fields: FieldList::from_trusted(&fields),
        });
        msg.encode(to_node).map_err(|e| {
            refuse(
                NakCode::InvalidContent,
                format!("the post cannot be sent: {e}"),
            )
        })?;
        // Answered by the node in any case (at the latest when its post timeout
        // passes), which takes the entry out again.
        if stream_id == 0 && ack {
            self.off_stream_posts.insert(post_id, id);
        }
        Ok(())
    }

    /// The node's answer to a post.
    pub(super) fn on_node_ack(&mut self, a: &Ack<'_>, out: &mut JsonOut) {
        let id = if a.stream_id == 0 {
            self.off_stream_posts.remove(&a.post_id)
        } else {
            self.streams.get(&a.stream_id).map(|s| s.json_id)
        };
        // A stream closed meanwhile: the answer goes on the login stream.
        let id = id.or_else(|| self.logged_in()).unwrap_or(0);
        write_ack(out, id, i64::from(a.post_id), a.nak, a.text);
    }
}

/// `Fields` of a posted message into a field list: each name (or id) by the
/// dictionary, each value by its field's type, a number read from its text as
/// `written` (as the Real-Time SDK reads it: 101.50 is a real of two decimals) where
/// it is there.
fn encode_fields(
    dict: &Dictionary,
    fields: &serde_json::Map<String, Json>,
    written: &HashMap<Cow<'_, str>, &RawValue>,
    out: &mut Vec<u8>,
) -> Result<(), Refusal> {
    let mut w = FieldListWriter::new(out);
    for (name, value) in fields {
        let def = dict
            .fid(name)
            .and_then(|fid| dict.get(fid))
            .ok_or_else(|| refuse(NakCode::InvalidContent, format!("unknown field {name:?}")))?;
        let number;
        let text = match value {
            Json::Null => "",
            Json::String(s) => s.as_str(),
            Json::Number(n) => match written.get(name.as_str()).map(|r| r.get()) {
                Some(t) if t.starts_with(|c: char| c == '-' || c.is_ascii_digit()) => t,
                _ => {
                    number = n.to_string();
                    number.as_str()
                }
            },
            other => {
                return Err(refuse(
                    NakCode::InvalidContent,
                    format!(
                        "field {name:?}: {other} is not a value of type {}",
                        def.field_type.name()
                    ),
                ))
            }
        };
        let mut scratch = Vec::new();
        let v = parse_value(def.field_type, text, &mut scratch)
            .map_err(|why| refuse(NakCode::InvalidContent, format!("field {name:?}: {why}")))?;
        w.try_push(def.fid, v)
            .map_err(|e| refuse(NakCode::InvalidContent, format!("field {name:?}: {e}")))?;
    }
    w.finish();
    Ok(())
}

fn write_ack(out: &mut JsonOut, id: i64, post_id: i64, nak: Option<NakCode>, text: &str) {
    let o = out.begin();
    let _ = write!(
        Bytes(o),
        "{{\"ID\":{id},\"Type\":\"Ack\",\"AckID\":{post_id}"
    );
    if let Some(code) = nak {
        let _ = write!(Bytes(o), ",\"NakCode\":\"{}\"", code.name());
    }
    if !text.is_empty() {
        o.extend_from_slice(b",\"Text\":");
        escape(o, text);
    }
    o.push(b'}');
}
