//! What each fuzz target does with its input, as plain functions.
//!
//! One copy serves both users: `tests/fuzz_corpus.rs` replays the committed corpus
//! through these functions on stable Rust, and the cargo-fuzz targets in `fuzz/` include
//! this file with `#[path]`. Each function panics when an invariant breaks (that is the
//! bug a fuzzer reports) and otherwise returns `Ok` if the input was accepted as a whole
//! or `Err` naming why it was rejected (rejecting is fine: that is what the decoders are
//! for).
//!
//! This file depends on `tickwire_proto` and std only.

#![allow(dead_code)]

use std::collections::HashMap;
use tickwire_proto::message::{write_readdressed, MAX_MESSAGE_BODY, MESSAGE_HEADER_LEN};
use tickwire_proto::{
    Dictionary, EncodeError, FieldImage, FieldList, FieldListWriter, FieldType, FrameReader,
    Message, MessageIter, Value, DEFAULT_MAX_FRAME,
};

/// Names of the fuzz targets, which are also the corpus directory names.
pub(crate) const TARGETS: [&str; 4] = [
    "frame_decoder",
    "message_decoder",
    "field_list",
    "dictionary",
];

/// Runs the named target's logic on one input.
pub(crate) fn run(target: &str, data: &[u8]) -> Result<(), String> {
    match target {
        "frame_decoder" => frame_decoder(data),
        "message_decoder" => message_decoder(data),
        "field_list" => field_list(data),
        "dictionary" => dictionary(data),
        other => panic!("no fuzz target named {other:?}"),
    }
}

/// Most item images kept at once, so memory stays proportional to the input.
const MAX_IMAGES: usize = 16;

/// Chunk sizes the byte stream is fed in, as a socket would deliver it.
fn chunk_size(total: usize, i: usize) -> usize {
    const SIZES: [usize; 8] = [1, 3, 64, 2, 4096, 7, 13, 500];
    SIZES[(i + total) % SIZES.len()]
}

/// `frame_decoder`: the bytes are a received stream. Feed them to a `FrameReader` in
/// chunks, decode every message of every frame, iterate every field list and apply every
/// refresh and update to a per-stream `FieldImage`.
pub(crate) fn frame_decoder(data: &[u8]) -> Result<(), String> {
    let mut reader = FrameReader::new(DEFAULT_MAX_FRAME);
    let mut images: Vec<(u32, FieldImage)> = Vec::new();
    let mut pos = 0;
    let mut i = 0;
    while pos < data.len() {
        let n = chunk_size(data.len(), i).min(data.len() - pos);
        let chunk = &data[pos..pos + n];
        if i % 2 == 0 {
            reader.extend(chunk);
        } else {
            let spare = reader.spare(n);
            assert!(spare.len() >= n, "spare gave less than asked");
            spare[..n].copy_from_slice(chunk);
            reader.filled(n);
        }
        pos += n;
        i += 1;
        loop {
            match reader.next_frame() {
                Ok(None) => break,
                Ok(Some(frame)) => {
                    assert!(!frame.is_empty() && frame.len() <= DEFAULT_MAX_FRAME);
                    check_frame(frame, &mut images)?;
                }
                // A node drops the connection here; so do we.
                Err(e) => return Err(format!("frame: {e}")),
            }
        }
    }
    match reader.buffered() {
        0 => Ok(()),
        n => Err(format!("{n} bytes of an incomplete frame left")),
    }
}

fn check_frame(frame: &[u8], images: &mut Vec<(u32, FieldImage)>) -> Result<(), String> {
    let mut consumed = 0;
    let mut iter = MessageIter::new(frame);
    for raw in iter.by_ref() {
        let raw = raw.map_err(|e| format!("message: {e}"))?;
        assert_eq!(raw.encoded, &frame[consumed..consumed + raw.encoded.len()]);
        consumed += raw.encoded.len();
        check_message(&raw.message, raw.encoded);
        match &raw.message {
            Message::Refresh(r) => {
                let img = image_for(images, r.stream_id);
                if r.clear_cache {
                    img.clear();
                }
                apply_and_check(img, r.fields);
            }
            Message::Update(u) => apply_and_check(image_for(images, u.stream_id), u.fields),
            Message::Close { stream_id } => images.retain(|(id, _)| id != stream_id),
            _ => {}
        }
    }
    assert!(iter.next().is_none());
    assert_eq!(consumed, frame.len(), "a decoded frame is consumed exactly");
    Ok(())
}

fn image_for(images: &mut Vec<(u32, FieldImage)>, stream_id: u32) -> &mut FieldImage {
    let i = match images.iter().position(|(id, _)| *id == stream_id) {
        Some(i) => i,
        None => {
            if images.len() == MAX_IMAGES {
                images.remove(0);
            }
            images.push((stream_id, FieldImage::new()));
            images.len() - 1
        }
    };
    &mut images[i].1
}

fn apply_and_check(img: &mut FieldImage, fields: FieldList<'_>) {
    check_fields(fields);
    img.apply(fields);
    // Each field of the list is now in the image; within one list a later field of
    // the same id wins.
    let mut last: HashMap<i16, &[u8]> = HashMap::new();
    for (fid, encoded) in fields.raw_iter() {
        last.insert(fid, encoded);
    }
    for (fid, encoded) in last {
        assert_eq!(img.get_raw(fid), Some(encoded));
    }
    let bytes = img.to_field_list_bytes();
    let list = FieldList::decode(&bytes).expect("an image is a valid field list");
    assert_eq!(list.len(), img.len());
    let mut fids: Vec<i16> = list.iter().map(|(f, _)| f).collect();
    fids.sort_unstable();
    fids.dedup();
    assert_eq!(fids.len(), img.len(), "an image holds each field once");
}

/// Iterates a validated field list every way there is.
fn check_fields(fields: FieldList<'_>) {
    let mut n = 0;
    for ((fid, value), (raw_fid, raw)) in fields.iter().zip(fields.raw_iter()) {
        assert_eq!(fid, raw_fid);
        assert_eq!(raw[0], value.field_type() as u8);
        assert_eq!(FieldType::from_tag(raw[0]), Some(value.field_type()));
        check_value(fid, value);
        n += 1;
    }
    assert_eq!(n, fields.len(), "a validated list yields all its fields");
    assert_eq!(fields.iter().count(), fields.len());
    assert_eq!(fields.raw_iter().count(), fields.len());
    assert_eq!(fields.is_empty(), fields.iter().next().is_none());
}

/// Formats a value and checks it re-encodes to something that decodes to itself.
fn check_value(fid: i16, value: Value<'_>) {
    let _ = value.to_string();
    if let Value::Real(r) = value {
        let _ = r.to_f64();
    }
    let mut one = Vec::new();
    let mut w = FieldListWriter::new(&mut one);
    assert!(w.push(fid, value));
    w.finish();
    let list = FieldList::decode(&one).expect("a decoded value re-encodes validly");
    assert_eq!(list.iter().collect::<Vec<_>>(), vec![(fid, value)]);
}

/// Checks one decoded message against its encoded bytes (header included).
fn check_message(msg: &Message<'_>, encoded: &[u8]) {
    assert_eq!(encoded[0], msg.message_type() as u8);
    // There is one encoding per message: re-encoding gives back the very bytes.
    let mut again = Vec::new();
    msg.encode(&mut again)
        .expect("a decoded message re-encodes");
    assert_eq!(again, encoded, "re-encoding changed the bytes of {msg:?}");
    if let Message::Request(r) = msg {
        if let Some(view) = &r.view {
            let _ = view.fids();
        }
    }
    let stream_id = match msg {
        Message::Request(m) => Some(m.stream_id),
        Message::Refresh(m) => Some(m.stream_id),
        Message::Update(m) => Some(m.stream_id),
        Message::Status(m) => Some(m.stream_id),
        Message::Close { stream_id } => Some(*stream_id),
        _ => None,
    };
    if let Some(id) = stream_id {
        let new_id = id ^ 0x5a5a_0001;
        let mut out = Vec::new();
        write_readdressed(&mut out, encoded, new_id);
        assert_eq!(out.len(), encoded.len());
        let moved = Message::decode_body(out[0], &out[MESSAGE_HEADER_LEN..])
            .expect("a re-addressed message decodes");
        assert_eq!(moved.message_type(), msg.message_type());
        assert_eq!(
            &out[MESSAGE_HEADER_LEN + 4..],
            &encoded[MESSAGE_HEADER_LEN + 4..]
        );
        assert_eq!(
            &out[MESSAGE_HEADER_LEN..MESSAGE_HEADER_LEN + 4],
            &new_id.to_be_bytes()
        );
    }
}

/// `message_decoder`: first byte is the message type, the rest the body.
pub(crate) fn message_decoder(data: &[u8]) -> Result<(), String> {
    let Some((&ty, body)) = data.split_first() else {
        return Err("empty input".into());
    };
    let msg = Message::decode_body(ty, body).map_err(|e| format!("message: {e}"))?;
    assert_eq!(msg.message_type() as u8, ty);
    if let Message::Refresh(r) = &msg {
        check_fields(r.fields);
    }
    if let Message::Update(u) = &msg {
        check_fields(u.fields);
    }
    let mut encoded = Vec::new();
    if body.len() > MAX_MESSAGE_BODY {
        // Decodable, but too long to go on the wire as one message.
        assert!(matches!(
            msg.encode(&mut encoded),
            Err(EncodeError::TooLong { .. })
        ));
        assert!(
            encoded.is_empty(),
            "a failed encode leaves the buffer as it was"
        );
        return Ok(());
    }
    msg.encode(&mut encoded)
        .expect("a decoded message re-encodes");
    assert_eq!(encoded[0], ty);
    assert_eq!(
        u16::from_be_bytes([encoded[1], encoded[2]]) as usize,
        body.len()
    );
    assert_eq!(&encoded[MESSAGE_HEADER_LEN..], body);
    let again = Message::decode_body(ty, &encoded[MESSAGE_HEADER_LEN..])
        .expect("a re-encoded message decodes");
    assert_eq!(again, msg);
    let mut iter = MessageIter::new(&encoded);
    let raw = iter.next().unwrap().expect("a re-encoded message decodes");
    assert!(iter.next().is_none());
    assert_eq!(raw.message, msg);
    assert_eq!(raw.encoded, &encoded[..]);
    check_message(&msg, &encoded);
    Ok(())
}

/// `field_list`: decode, iterate, re-encode through `FieldListWriter` and compare.
pub(crate) fn field_list(data: &[u8]) -> Result<(), String> {
    let list = FieldList::decode(data).map_err(|e| format!("field list: {e}"))?;
    assert_eq!(list.as_bytes(), data);
    check_fields(list);
    let items: Vec<(i16, Value<'_>)> = list.iter().collect();

    // From decoded values. Varints are re-encoded in their shortest form, and nothing
    // else about a field has more than one encoding: the bytes come back identical
    // unless the input spelled a varint with redundant bytes, in which case the
    // re-encoding is strictly shorter (and canonical: encoding it again changes nothing).
    let mut out = Vec::new();
    let mut w = FieldListWriter::new(&mut out);
    for (fid, value) in &items {
        assert!(w.push(*fid, *value));
    }
    assert_eq!(w.finish() as usize, items.len());
    if out.len() == data.len() {
        assert_eq!(out, data, "same length but different bytes");
    } else {
        assert!(out.len() < data.len(), "re-encoding grew the list");
    }
    let again = FieldList::decode(&out).expect("a re-encoded list decodes");
    assert_eq!(again.iter().collect::<Vec<_>>(), items);
    let mut twice = Vec::new();
    let mut w = FieldListWriter::new(&mut twice);
    for (fid, value) in again.iter() {
        w.push(fid, value);
    }
    w.finish();
    assert_eq!(twice, out, "the re-encoding is canonical");

    // From the raw bytes: always identical.
    let mut raw_out = Vec::new();
    let mut w = FieldListWriter::new(&mut raw_out);
    for (fid, encoded) in list.raw_iter() {
        assert!(w.push_raw(fid, encoded));
    }
    w.finish();
    assert_eq!(raw_out, data);

    // Into an image: one field per id, holding the last value given for it, in
    // first-seen order for a small image (a large one may move a field whose length
    // changed to the end: compared as sets).
    let mut img = FieldImage::new();
    img.apply(list);
    let mut model: Vec<(i16, Value<'_>)> = Vec::new();
    for (fid, value) in &items {
        match model.iter_mut().find(|(f, _)| f == fid) {
            Some(slot) => slot.1 = *value,
            None => model.push((*fid, *value)),
        }
    }
    let bytes = img.to_field_list_bytes();
    let image = FieldList::decode(&bytes).expect("an image is a valid field list");
    let mut got = image.iter().collect::<Vec<_>>();
    if got != model {
        // Only a large image may reorder.
        assert!(
            model.len() > 64 || data.len() > 16 * 1024,
            "a small image keeps first-seen order"
        );
        got.sort_by_key(|(fid, _)| *fid);
        model.sort_by_key(|(fid, _)| *fid);
    }
    assert_eq!(got, model);
    Ok(())
}

/// `dictionary`: parse arbitrary UTF-8 as a dictionary file.
pub(crate) fn dictionary(data: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(data).map_err(|e| format!("not UTF-8: {e}"))?;
    let d = Dictionary::parse(text).map_err(|e| format!("dictionary: {e}"))?;
    let fields = d.fields();
    assert_eq!(fields.len(), d.len());
    assert_eq!(d.is_empty(), fields.is_empty());
    assert!(fields.windows(2).all(|w| w[0].fid < w[1].fid));
    let mut written = String::new();
    for def in &fields {
        assert_eq!(d.get(def.fid), Some(*def));
        assert_eq!(d.name(def.fid), Some(def.name.as_str()));
        assert_eq!(d.fid(&def.name), Some(def.fid));
        assert_eq!(
            FieldType::from_name(def.field_type.name()),
            Some(def.field_type)
        );
        written.push_str(&format!(
            "{} {} {}\n",
            def.name,
            def.fid,
            def.field_type.name()
        ));
    }
    // Written back out, it parses to the same dictionary.
    let again = Dictionary::parse(&written).expect("a written dictionary parses");
    assert_eq!(again.fields(), fields);
    Ok(())
}
