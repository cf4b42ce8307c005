use super::*;
use crate::rwf::container::{put_array, ElementListWriter, FieldIter};
use crate::rwf::hex;
use crate::rwf::msg::{self, request};
use crate::rwf::primitive;
use crate::testing;
use tickwire_proto::{
    Directory, FieldListWriter as NativeFields, MessageIter, Real, Refresh, State, Status, Update,
    UpdateType,
};

/// The node's messages a session sent, decoded.
fn node_messages(to_node: &[u8]) -> Vec<String> {
    MessageIter::new(to_node)
        .map(|m| format!("{:?}", m.unwrap().message))
        .collect()
}

fn welcome() -> Vec<u8> {
    testing::node_welcome()
}

fn deliver(s: &mut Session, encoded: &[u8], out: &mut Vec<Vec<u8>>) {
    for m in MessageIter::new(encoded) {
        s.on_node_message(&m.unwrap().message, out);
    }
}

fn directory(services: &[(&str, ServiceState)]) -> Vec<u8> {
    let mut b = Vec::new();
    Message::Directory(Directory::of(services.iter().copied()))
        .encode(&mut b)
        .unwrap();
    b
}

/// A session logged in as the ETA Consumer example does, with FEED in the directory.
fn logged_in() -> (Session, Vec<Vec<u8>>) {
    let mut s = Session::new(Arc::new(SessionConfig::default()));
    let mut to_node = Vec::new();
    let mut out = Vec::new();
    // The ETA Consumer's own login request (user "root", captured).
    let login = testing::eta_login(0);
    s.on_client_message(&login, &mut to_node, &mut out);
    let sent = node_messages(&to_node);
    assert!(sent[0].contains("user: \"root\""), "{sent:?}");
    assert!(
        sent[0].contains("application: \"rssl:Consumer\""),
        "{sent:?}"
    );
    assert!(out.is_empty(), "nothing before the node accepts");
    deliver(&mut s, &welcome(), &mut out);
    deliver(&mut s, &directory(&[("FEED", ServiceState::Up)]), &mut out);
    let refresh = Msg::decode(&out[0]).unwrap();
    assert_eq!(
        (refresh.class, refresh.domain, refresh.stream_id),
        (class::REFRESH, domain::LOGIN, 1)
    );
    assert_eq!(refresh.state.unwrap().stream, stream::OPEN);
    assert_eq!(refresh.key.unwrap().name, Some(&b"root"[..]));
    out.clear();
    (s, out)
}

/// The ETA Consumer's directory request (filter 7), as captured: the one way the tests
/// open a session's directory stream.
fn request_directory(s: &mut Session, to_node: &mut Vec<u8>, out: &mut Vec<Vec<u8>>) {
    s.on_client_message(
        &hex("000f 01 04 00000002 04 00 80 05 08 00 00 00 07"),
        to_node,
        out,
    );
}

#[test]
fn a_consumer_logs_in_reads_the_directory_and_gets_an_item() {
    let (mut s, mut out) = logged_in();
    let mut to_node = Vec::new();
    // The ETA Consumer's directory request and item request for TRI.N.
    request_directory(&mut s, &mut to_node, &mut out);
    let dir = Msg::decode(&out[0]).unwrap();
    assert_eq!(
        (dir.class, dir.domain, dir.container),
        (class::REFRESH, domain::SOURCE, dt::MAP)
    );
    // The service is in the map with its name.
    assert!(dir.payload.windows(4).any(|w| w == b"FEED"));
    s.on_client_message(
        &hex("0016 01 06 00000005 46 00 01 01 22 80 09 07 01 05 54 52 49 2E 4E 01"),
        &mut to_node,
        &mut out,
    );
    let sent = node_messages(&to_node);
    assert!(
        sent[0].contains("service: \"FEED\", name: \"TRI.N\""),
        "{sent:?}"
    );
    assert!(sent[0].contains("streaming: true"));
    // The node's refresh and update come back on the consumer's stream 5.
    let mut fields = Vec::new();
    let mut w = NativeFields::new(&mut fields);
    assert!(w.push(22, Value::Real(Real::new(1234, -2))));
    assert!(w.push(3, Value::Ascii("TRI")));
    w.finish();
    let fl = tickwire_proto::FieldList::decode(&fields).unwrap();
    let node = refresh_and_update(1, fl);
    out.clear();
    deliver(&mut s, &node, &mut out);
    let r = Msg::decode(&out[0]).unwrap();
    assert_eq!(
        (r.class, r.stream_id, r.container),
        (class::REFRESH, 5, dt::FIELD_LIST)
    );
    assert!(r.flags & refresh::REFRESH_COMPLETE != 0 && r.flags & refresh::SOLICITED != 0);
    let k = r.key.unwrap();
    assert_eq!((k.service_id, k.name), (Some(1), Some(&b"TRI.N"[..])));
    let f: Vec<_> = FieldIter::new(r.payload)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(f, [(22, &[0x0C, 0x04, 0xD2][..]), (3, &b"TRI"[..])]);
    let u = Msg::decode(&out[1]).unwrap();
    assert_eq!(
        (u.class, u.stream_id, u.update_type, u.seq),
        (class::UPDATE, 5, 1, Some(2))
    );
    // The consumer closes: the node's stream closes.
    to_node.clear();
    s.on_client_message(&hex("0008 05 06 00000005 00 00"), &mut to_node, &mut out);
    assert_eq!(node_messages(&to_node), ["Close { stream_id: 1 }"]);
    assert_eq!(s.stream_count(), 0);
}

#[test]
fn a_refused_login_gets_a_login_status_with_the_reason() {
    let mut s = Session::new(Arc::new(SessionConfig::default()));
    let (mut to_node, mut out) = (Vec::new(), Vec::new());
    s.on_client_message(
        &hex("000e 01 01 00000001 04 00 80 04 02 02 6d 65"),
        &mut to_node,
        &mut out,
    );
    let mut node = Vec::new();
    Message::Status(Status {
        stream_id: 0,
        state: State {
            stream: StreamState::Closed,
            data: DataState::Suspect,
            code: ncode::LOGIN_REJECTED,
            text: "wrong password",
        },
    })
    .encode(&mut node)
    .unwrap();
    deliver(&mut s, &node, &mut out);
    let m = Msg::decode(&out[0]).unwrap();
    assert_eq!(
        (m.class, m.domain, m.stream_id),
        (class::STATUS, domain::LOGIN, 1)
    );
    let st = m.state.unwrap();
    assert_eq!(
        (st.stream, st.code, st.text),
        (stream::CLOSED, code::NOT_ENTITLED, &b"wrong password"[..])
    );
    assert!(s.finished);
}

#[test]
fn unknown_services_other_domains_and_junk_are_refused_with_a_reason() {
    let (mut s, mut out) = logged_in();
    let mut to_node = Vec::new();
    // Service id 9 is not in the directory.
    s.on_client_message(
        &hex("0016 01 06 00000005 46 00 01 01 22 80 09 07 09 05 54 52 49 2E 4E 01"),
        &mut to_node,
        &mut out,
    );
    // MarketByOrder.
    s.on_client_message(
        &hex("0016 01 07 00000006 46 00 01 01 22 80 09 07 01 05 54 52 49 2E 4E 01"),
        &mut to_node,
        &mut out,
    );
    // Junk.
    s.on_client_message(&[0, 40, 1, 6, 0, 0, 0, 7], &mut to_node, &mut out);
    assert!(to_node.is_empty());
    let texts: Vec<(i32, u8, String)> = out
        .iter()
        .map(|b| {
            let m = Msg::decode(b).unwrap();
            let st = m.state.unwrap();
            (
                m.stream_id,
                st.code,
                String::from_utf8_lossy(st.text).into_owned(),
            )
        })
        .collect();
    assert_eq!(texts[0].0, 5);
    assert_eq!(texts[0].1, code::SOURCE_UNKNOWN);
    assert!(texts[1].2.contains("MarketByOrder"), "{texts:?}");
    assert_eq!(texts[2].0, 7);
    assert!(texts[2].2.contains("malformed"), "{texts:?}");
}

/// A streaming batch request of FEED's `items` on stream 10, with a view of BID and ASK.
fn batch_request(items: &[&str]) -> Vec<u8> {
    batch_request_with(items, request::HAS_VIEW, &[22, 25])
}

/// A batch of `items` whose payload carries the view `fids` too, `view_flag`
/// (`HAS_VIEW` or 0) saying whether the request asks for it.
fn batch_request_with(items: &[&str], view_flag: u16, fids: &[i64]) -> Vec<u8> {
    let items: Vec<&[u8]> = items.iter().map(|i| i.as_bytes()).collect();
    batch_request_on(10, &items, view_flag, fids)
}

/// A view entry left blank, for [`batch_request_on`]'s `fids`.
const BLANK_FID: i64 = i64::MIN;

/// As [`batch_request_with`], on stream `stream`, with names of any bytes.
fn batch_request_on(stream: i32, items: &[&[u8]], view_flag: u16, fids: &[i64]) -> Vec<u8> {
    // Payload: {:ItemList [items], :ViewType 1, :ViewData [fids]}.
    let mut payload = Vec::new();
    let mut el = ElementListWriter::begin(&mut payload);
    el.element(&mut payload, ":ItemList", dt::ARRAY, |o| {
        put_array(o, dt::ASCII_STRING, items, |o, v| o.extend_from_slice(v))
    });
    el.uint(&mut payload, ":ViewType", 1);
    el.element(&mut payload, ":ViewData", dt::ARRAY, |o| {
        put_array(o, dt::INT, fids, |o, v| {
            if *v != BLANK_FID {
                primitive::put_int(o, *v)
            }
        })
    });
    el.end(&mut payload);
    let mut req = Vec::new();
    let key = MsgKey {
        service_id: Some(1),
        ..MsgKey::default()
    };
    let w = msg::MsgWriter::begin(
        &mut req,
        class::REQUEST,
        domain::MARKET_PRICE,
        stream,
        request::STREAMING | request::HAS_BATCH | view_flag,
        dt::ELEMENT_LIST,
    );
    key.encode(&mut req);
    w.end_header(&mut req);
    req.extend_from_slice(&payload);
    req
}

/// Sends the batch request (on stream 10) and checks it is refused whole: no item asked
/// of the node, its stream closed with `TooManyItems`, no stream open. Returns the text.
fn batch_refused_whole(s: &mut Session, request: &[u8]) -> String {
    let (mut to_node, mut out) = (Vec::new(), Vec::new());
    s.on_client_message(request, &mut to_node, &mut out);
    assert!(node_messages(&to_node).is_empty(), "no item is asked for");
    let refused = Msg::decode(&out[0]).unwrap();
    let state = refused.state.unwrap();
    assert_eq!(
        (refused.class, refused.stream_id, state.code),
        (class::STATUS, 10, code::TOO_MANY_ITEMS)
    );
    assert_eq!(s.stream_count(), 0);
    String::from_utf8_lossy(state.text).into_owned()
}

#[test]
fn a_batch_over_the_limit_is_refused_whole() {
    let (mut s, _) = logged_in();
    let names: Vec<String> = (0..=SessionConfig::default().max_batch)
        .map(|i| format!("I{i}"))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let text = batch_refused_whole(&mut s, &batch_request(&names));
    assert!(text.contains("exceeds the limit"), "{text}");
}

/// A batch's items take the stream ids after its own: a batch whose ids would pass
/// the largest a consumer may use (and wrap to a provider's) is refused whole.
#[test]
fn a_batch_whose_item_ids_would_pass_the_largest_stream_id_is_refused() {
    let (mut s, _) = logged_in();
    let (mut to_node, mut out) = (Vec::new(), Vec::new());
    let items: [&[u8]; 3] = [b"A", b"B", b"C"];
    let near_the_end = batch_request_on(i32::MAX - 2, &items, request::HAS_VIEW, &[22]);
    s.on_client_message(&near_the_end, &mut to_node, &mut out);
    assert!(node_messages(&to_node).is_empty(), "no item is asked for");
    let refused = Msg::decode(&out[0]).unwrap();
    let state = refused.state.unwrap();
    assert_eq!(
        (refused.class, refused.stream_id, state.code),
        (class::STATUS, i32::MAX - 2, code::TOO_MANY_ITEMS)
    );
    assert!(String::from_utf8_lossy(state.text).contains("past stream id"));
    assert_eq!(s.stream_count(), 0);
    // The last ids that fit: each item on its own.
    out.clear();
    let to_the_end = batch_request_on(i32::MAX - 3, &items, request::HAS_VIEW, &[22]);
    s.on_client_message(&to_the_end, &mut to_node, &mut out);
    assert_eq!(node_messages(&to_node).len(), 3);
    let mut ids: Vec<i32> = s.streams.values().map(|st| st.rssl).collect();
    ids.sort();
    assert_eq!(ids, [i32::MAX - 2, i32::MAX - 1, i32::MAX]);
}

/// A view whose field ids include a blank one is refused: blank names no field (it
/// was taken for field id 0).
#[test]
fn a_view_with_a_blank_field_id_is_refused() {
    let (mut s, _) = logged_in();
    let (mut to_node, mut out) = (Vec::new(), Vec::new());
    let request = batch_request_on(10, &[b"A"], request::HAS_VIEW, &[22, BLANK_FID]);
    s.on_client_message(&request, &mut to_node, &mut out);
    assert!(node_messages(&to_node).is_empty(), "no item is asked for");
    let refused = Msg::decode(&out[0]).unwrap();
    let state = refused.state.unwrap();
    assert_eq!((refused.class, refused.stream_id), (class::STATUS, 10));
    let text = String::from_utf8_lossy(state.text);
    assert!(text.contains("a blank field id"), "{text}");
}

/// A name that cannot be passed on to the node (its bytes, not UTF-8, grow past a
/// message as text) gets a status on its own stream; the batch's other items open.
#[test]
fn an_item_the_node_cannot_be_asked_for_gets_a_status() {
    let (mut s, _) = logged_in();
    let (mut to_node, mut out) = (Vec::new(), Vec::new());
    let huge = vec![0xFFu8; 30_000];
    let items: [&[u8]; 3] = [b"A", &huge, b"C"];
    s.on_client_message(
        &batch_request_on(10, &items, 0, &[]),
        &mut to_node,
        &mut out,
    );
    assert_eq!(node_messages(&to_node).len(), 2, "A and C are asked for");
    assert_eq!(s.stream_count(), 2);
    let statuses: Vec<(i32, u8, String)> = out
        .iter()
        .map(|b| Msg::decode(b).unwrap())
        .filter(|m| m.class == class::STATUS)
        .map(|m| {
            let st = m.state.unwrap();
            (
                m.stream_id,
                st.stream,
                String::from_utf8_lossy(st.text).into_owned(),
            )
        })
        .collect();
    let item = statuses
        .iter()
        .find(|s| s.0 == 12)
        .expect("a status on stream 12");
    assert_eq!(item.1, stream::CLOSED);
    assert!(item.2.contains("cannot be passed on"), "{statuses:?}");
}

#[test]
fn a_batch_on_an_items_open_stream_closes_that_item_in_the_node_too() {
    let (mut s, mut out) = logged_in();
    let mut to_node = Vec::new();
    let key = MsgKey {
        service_id: Some(1),
        name: Some(b"TRI.N"),
        name_type: Some(1),
        ..MsgKey::default()
    };
    let mut b = Vec::new();
    msg::put_request(
        &mut b,
        domain::MARKET_PRICE,
        10,
        request::STREAMING,
        &key,
        false,
    );
    s.on_client_message(&b, &mut to_node, &mut out);
    to_node.clear();
    s.on_client_message(&batch_request(&["A", "B"]), &mut to_node, &mut out);
    let sent = node_messages(&to_node);
    assert_eq!(sent[0], "Close { stream_id: 1 }", "{sent:?}");
    assert_eq!(sent.len(), 3, "{sent:?}");
    assert_eq!(s.stream_count(), 2, "A and B, not TRI.N");
}

#[test]
fn a_batch_opens_one_stream_per_item_after_its_own_and_a_view_is_passed_on() {
    let (mut s, mut out) = logged_in();
    let mut to_node = Vec::new();
    let req = batch_request(&["A", "B"]);
    s.on_client_message(&req, &mut to_node, &mut out);
    let sent = node_messages(&to_node);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(
        sent[0].contains("name: \"A\"") && sent[0].contains("[0, 22, 0, 25]"),
        "{sent:?}"
    );
    let batch = Msg::decode(&out[0]).unwrap();
    assert_eq!((batch.class, batch.stream_id), (class::STATUS, 10));
    assert_eq!(
        s.by_rssl
            .keys()
            .copied()
            .collect::<std::collections::BTreeSet<_>>(),
        [11, 12].into()
    );
}

#[test]
fn a_batch_without_the_view_flag_opens_its_items_without_a_view() {
    let (mut s, mut out) = logged_in();
    let mut to_node = Vec::new();
    s.on_client_message(
        &batch_request_with(&["A", "B"], 0, &[22, 25]),
        &mut to_node,
        &mut out,
    );
    let sent = node_messages(&to_node);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(sent.iter().all(|m| m.contains("view: None")), "{sent:?}");
}

#[test]
fn the_directory_stream_follows_services_up_down_and_new() {
    let (mut s, mut out) = logged_in();
    let mut to_node = Vec::new();
    request_directory(&mut s, &mut to_node, &mut out);
    out.clear();
    deliver(
        &mut s,
        &directory(&[("FEED", ServiceState::Down), ("NEW", ServiceState::Up)]),
        &mut out,
    );
    assert_eq!(out.len(), 2, "an ADD for NEW, an UPDATE for FEED");
    for b in &out {
        let m = Msg::decode(b).unwrap();
        assert_eq!(
            (m.class, m.domain, m.stream_id),
            (class::UPDATE, domain::SOURCE, 2)
        );
    }
    assert!(out[0].windows(3).any(|w| w == b"NEW"));
    assert!(out[1].windows(12).any(|w| w == b"ServiceState"));
}

#[test]
fn every_part_of_a_streaming_items_refresh_says_open() {
    let (mut s, mut out) = logged_in();
    let mut to_node = Vec::new();
    request_directory(&mut s, &mut to_node, &mut out);
    let mut b = Vec::new();
    let key = MsgKey {
        service_id: Some(1),
        name: Some(b"TRI.N"),
        name_type: Some(1),
        ..MsgKey::default()
    };
    msg::put_request(
        &mut b,
        domain::MARKET_PRICE,
        5,
        request::STREAMING,
        &key,
        false,
    );
    s.on_client_message(&b, &mut to_node, &mut out);
    let empty = [0u8, 0];
    let mut node = Vec::new();
    for complete in [false, true] {
        Message::Refresh(Refresh {
            stream_id: 1,
            seq: 1,
            complete,
            solicited: true,
            clear_cache: !complete,
            state: State::OPEN_OK,
            service: "FEED",
            name: "TRI.N",
            fields: tickwire_proto::FieldList::from_trusted(&empty),
        })
        .encode(&mut node)
        .unwrap();
    }
    out.clear();
    deliver(&mut s, &node, &mut out);
    let states: Vec<(bool, u8)> = out
        .iter()
        .map(|m| Msg::decode(m).unwrap())
        .map(|m| {
            (
                m.flags & refresh::REFRESH_COMPLETE != 0,
                m.state.unwrap().stream,
            )
        })
        .collect();
    assert_eq!(states, [(false, stream::OPEN), (true, stream::OPEN)]);
}

/// A PostMsg on `stream` (id 7, sequence number 9, asking for an Ack) of an empty field
/// list, with `key` naming the item when off-stream.
fn post_msg(stream: i32, key: Option<&MsgKey<'_>>) -> Vec<u8> {
    post_msg_with_id(stream, key, 7)
}

/// A post (sequence number 9, post id `post_id`, asking for an Ack) of no fields on
/// `stream`, with `key` when given.
fn post_msg_with_id(stream: i32, key: Option<&MsgKey<'_>>, post_id: u32) -> Vec<u8> {
    let mut b = Vec::new();
    let mut flags =
        msg::post::HAS_POST_ID | msg::post::ACK | msg::post::POST_COMPLETE | msg::post::HAS_SEQ_NUM;
    if key.is_some() {
        flags |= msg::post::HAS_MSG_KEY;
    }
    let w = msg::MsgWriter::begin(
        &mut b,
        class::POST,
        domain::MARKET_PRICE,
        stream,
        flags,
        dt::FIELD_LIST,
    );
    b.extend_from_slice(&[0; 8]); // the post's user: address and id
    b.extend_from_slice(&9u32.to_be_bytes());
    b.extend_from_slice(&post_id.to_be_bytes());
    if let Some(k) = key {
        k.encode(&mut b);
    }
    w.end_header(&mut b);
    let fl = FieldListWriter::begin(&mut b);
    fl.end(&mut b);
    b
}

fn node_ack(stream_id: u32) -> Vec<u8> {
    let mut b = Vec::new();
    Message::Ack(tickwire_proto::Ack {
        stream_id,
        post_id: 7,
        nak: None,
        text: "",
    })
    .encode(&mut b)
    .unwrap();
    b
}

/// A consumer logged in that has read the directory, nothing sent or answered since.
fn directory_read() -> (Session, Vec<u8>, Vec<Vec<u8>>) {
    let (mut s, mut out) = logged_in();
    let mut to_node = Vec::new();
    request_directory(&mut s, &mut to_node, &mut out);
    to_node.clear();
    out.clear();
    (s, to_node, out)
}

/// The key of TRI.N of service 1.
fn tri_n_key() -> MsgKey<'static> {
    MsgKey {
        service_id: Some(1),
        name: Some(b"TRI.N"),
        name_type: Some(1),
        ..MsgKey::default()
    }
}

#[test]
fn an_off_stream_post_is_acked_on_the_stream_it_came_on_with_its_sequence_number() {
    let (mut s, mut to_node, mut out) = directory_read();
    let key = tri_n_key();
    // On the directory's stream 2: not an item stream, so the key names the item.
    s.on_client_message(&post_msg(2, Some(&key)), &mut to_node, &mut out);
    assert!(out.is_empty(), "{out:?}");
    let sent = node_messages(&to_node);
    assert!(
        sent[0].contains("name: \"TRI.N\"") && sent[0].contains("stream_id: 0"),
        "{sent:?}"
    );
    deliver(&mut s, &node_ack(0), &mut out);
    let a = Msg::decode(&out[0]).unwrap();
    assert_eq!(
        (a.class, a.stream_id, a.post_id, a.seq),
        (class::ACK, 2, Some(7), Some(9))
    );
    assert_eq!(s.pending_posts.len(), 0);
}

#[test]
fn an_item_streams_unanswered_posts_go_when_it_closes() {
    let (mut s, mut out) = logged_in();
    let mut to_node = Vec::new();
    request_directory(&mut s, &mut to_node, &mut out);
    s.on_client_message(
        &hex("0016 01 06 00000005 46 00 01 01 22 80 09 07 01 05 54 52 49 2E 4E 01"),
        &mut to_node,
        &mut out,
    );
    out.clear();
    s.on_client_message(&post_msg(5, None), &mut to_node, &mut out);
    assert_eq!(s.pending_posts.len(), 1);
    // The consumer closes the item before the node answers.
    s.on_client_message(&hex("0008 05 06 00000005 00 00"), &mut to_node, &mut out);
    assert_eq!(s.pending_posts.len(), 0);
    deliver(&mut s, &node_ack(1), &mut out);
    assert!(
        out.is_empty(),
        "no Ack on a stream the consumer closed: {out:?}"
    );
}

/// A session logged in as a non-interactive provider (the ETA Consumer's login with
/// role 1) that announced service 7, PROV, and published item X on its stream -5.
fn provider_with_an_item() -> (Session, Vec<u8>, Vec<Vec<u8>>) {
    let mut s = Session::new(Arc::new(SessionConfig::default()));
    let (mut to_node, mut out) = (Vec::new(), Vec::new());
    let login = testing::eta_login(1);
    s.on_client_message(&login, &mut to_node, &mut out);
    deliver(&mut s, &welcome(), &mut out);
    let dir = testing::service_up(-1, testing::DirectoryMsg::Unsolicited, 7, b"PROV");
    s.on_client_message(&dir, &mut to_node, &mut out);
    let key = MsgKey {
        service_id: Some(7),
        name: Some(b"X"),
        name_type: Some(1),
        ..MsgKey::default()
    };
    let item = testing::refresh_in_group(-5, false, testing::DEFAULT_GROUP, Some(&key), |_, _| {});
    to_node.clear();
    s.on_client_message(&item, &mut to_node, &mut out);
    let sent = node_messages(&to_node);
    assert!(
        sent.iter()
            .any(|m| m.contains("name: \"X\"") && m.contains("stream_id: 1")),
        "{sent:?}"
    );
    out.clear();
    (s, to_node, out)
}

#[test]
fn a_provider_item_the_node_refuses_or_closes_is_closed_at_the_provider_and_forgotten() {
    let update = |s: &mut Session| {
        let mut u = Vec::new();
        begin_update(&mut u, domain::MARKET_PRICE, -5, 1, None, 0, false);
        let fl = FieldListWriter::begin(&mut u);
        fl.end(&mut u);
        let (mut to_node, mut out) = (Vec::new(), Vec::new());
        s.on_client_message(&u, &mut to_node, &mut out);
        node_messages(&to_node)
    };
    let refused = Message::Status(Status {
        stream_id: 1,
        state: State::closed(tickwire_proto::code::NOT_ENTITLED, "no"),
    });
    let closed = Message::Close { stream_id: 1 };
    for from_node in [refused, closed] {
        let (mut s, _, mut out) = provider_with_an_item();
        assert_eq!(update(&mut s).len(), 1, "an update goes to the node");
        let mut b = Vec::new();
        from_node.encode(&mut b).unwrap();
        deliver(&mut s, &b, &mut out);
        let st = Msg::decode(&out[0]).unwrap();
        assert_eq!(
            (st.class, st.stream_id, st.state.unwrap().stream),
            (class::STATUS, -5, stream::CLOSED),
            "{from_node:?}"
        );
        assert!(
            update(&mut s).is_empty(),
            "{from_node:?}: later updates go nowhere"
        );
    }
}

#[test]
fn a_directory_stream_of_one_service_hears_only_of_it() {
    let (mut s, mut out) = logged_in();
    let mut to_node = Vec::new();
    deliver(
        &mut s,
        &directory(&[("FEED", ServiceState::Up), ("OTHER", ServiceState::Up)]),
        &mut out,
    );
    // Streaming, filter 7, about service 2 (OTHER) only.
    let key = MsgKey {
        service_id: Some(2),
        filter: Some(7),
        ..MsgKey::default()
    };
    let mut b = Vec::new();
    msg::put_request(&mut b, domain::SOURCE, 2, request::STREAMING, &key, false);
    s.on_client_message(&b, &mut to_node, &mut out);
    out.clear();
    deliver(
        &mut s,
        &directory(&[("FEED", ServiceState::Down)]),
        &mut out,
    );
    assert!(out.is_empty(), "not the service asked about: {out:?}");
    deliver(
        &mut s,
        &directory(&[("OTHER", ServiceState::Down)]),
        &mut out,
    );
    assert_eq!(out.len(), 1);
    let u = Msg::decode(&out[0]).unwrap();
    assert_eq!(
        (u.class, u.domain, u.stream_id),
        (class::UPDATE, domain::SOURCE, 2)
    );
}

/// A request for MarketPrice on `stream` with `flags`, naming `name` on service 1 (or
/// no key at all), with a view of `view`'s field ids when there are any.
fn item_request(stream: i32, flags: u16, name: Option<&[u8]>, view: &[i64]) -> Vec<u8> {
    let mut payload = Vec::new();
    let flags = if view.is_empty() {
        flags
    } else {
        let mut el = ElementListWriter::begin(&mut payload);
        el.uint(&mut payload, ":ViewType", 1);
        el.element(&mut payload, ":ViewData", dt::ARRAY, |o| {
            put_array(o, dt::INT, view, |o, v| primitive::put_int(o, *v))
        });
        el.end(&mut payload);
        flags | request::HAS_VIEW
    };
    let key = MsgKey {
        service_id: name.map(|_| 1),
        name,
        name_type: name.map(|_| 1),
        ..MsgKey::default()
    };
    let container = if view.is_empty() {
        dt::NO_DATA
    } else {
        dt::ELEMENT_LIST
    };
    let mut req = Vec::new();
    let w = msg::MsgWriter::begin(
        &mut req,
        class::REQUEST,
        domain::MARKET_PRICE,
        stream,
        flags,
        container,
    );
    key.encode(&mut req);
    w.end_header(&mut req);
    req.extend_from_slice(&payload);
    req
}

/// The node's refresh (complete, TRI.N of FEED) and one update (a quote, sequence
/// number 2) of its stream `native`, both of `fields`.
fn refresh_and_update(native: u32, fields: tickwire_proto::FieldList<'_>) -> Vec<u8> {
    let mut node = Vec::new();
    Message::Refresh(Refresh {
        solicited: true,
        ..Refresh::whole(native, 1, "FEED", "TRI.N", fields)
    })
    .encode(&mut node)
    .unwrap();
    Message::Update(Update::new(native, 2, UpdateType::Quote, fields))
        .encode(&mut node)
        .unwrap();
    node
}

/// An empty field list.
fn no_fields() -> tickwire_proto::FieldList<'static> {
    tickwire_proto::FieldList::from_trusted(&[0, 0])
}

/// The classes of the messages sent to the consumer, on which stream.
fn classes(out: &[Vec<u8>]) -> Vec<(u8, i32)> {
    out.iter()
        .map(|m| Msg::decode(m).unwrap())
        .map(|m| (m.class, m.stream_id))
        .collect()
}

/// A consumer with TRI.N open on its stream 5 (the node's stream 1), with `view`, its
/// image and an update delivered.
fn tri_open(view: &[i64]) -> Session {
    let (mut s, mut out) = logged_in();
    let mut to_node = Vec::new();
    request_directory(&mut s, &mut to_node, &mut out);
    let first = item_request(5, request::STREAMING, Some(b"TRI.N"), view);
    s.on_client_message(&first, &mut to_node, &mut out);
    out.clear();
    deliver(&mut s, &refresh_and_update(1, no_fields()), &mut out);
    assert_eq!(classes(&out), [(class::REFRESH, 5), (class::UPDATE, 5)]);
    s
}

/// The consumer's request on stream 5 again: what the session asked of the node.
fn reissue(s: &mut Session, flags: u16, name: Option<&[u8]>, view: &[i64]) -> Vec<String> {
    let (mut to_node, mut out) = (Vec::new(), Vec::new());
    s.on_client_message(&item_request(5, flags, name, view), &mut to_node, &mut out);
    assert!(out.is_empty(), "nothing refused");
    node_messages(&to_node)
}

/// What the consumer gets of the node's refresh and update on its stream `native`.
fn passed_on(s: &mut Session, native: u32) -> Vec<(u8, i32)> {
    let mut out = Vec::new();
    deliver(s, &refresh_and_update(native, no_fields()), &mut out);
    classes(&out)
}

#[test]
fn a_paused_stream_gets_no_updates_until_a_reissue_resumes_it_with_a_refresh() {
    let mut s = tri_open(&[]);
    // Paused, as EMA reissues it: no key, no refresh wanted. The node's stream stays.
    let pause = request::STREAMING | request::PAUSE | request::NO_REFRESH;
    assert!(reissue(&mut s, pause, None, &[]).is_empty());
    assert_eq!(
        passed_on(&mut s, 1),
        [(class::REFRESH, 5)],
        "no update while paused"
    );
    // Resumed, asking for a refresh: a new image, then updates again.
    let sent = reissue(&mut s, request::STREAMING, None, &[]);
    assert_eq!(sent[0], "Close { stream_id: 1 }", "{sent:?}");
    assert!(sent[1].contains("name: \"TRI.N\""), "{sent:?}");
    assert_eq!(
        passed_on(&mut s, 2),
        [(class::REFRESH, 5), (class::UPDATE, 5)]
    );
    assert_eq!(s.stream_count(), 1);
}

#[test]
fn a_reissue_with_a_new_view_and_no_refresh_changes_the_nodes_stream_in_place() {
    let mut s = tri_open(&[22]);
    // A new view, no refresh wanted: the node's stream 1 takes the view where it stands
    // (its image, posts and sequence go on); no image comes.
    let flags = request::STREAMING | request::NO_REFRESH;
    let sent = reissue(&mut s, flags, Some(b"TRI.N"), &[22, 25]);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(
        sent[0].contains("stream_id: 1,") && sent[0].contains("[0, 22, 0, 25]"),
        "{sent:?}"
    );
    assert!(sent[0].contains("refresh: false"), "{sent:?}");
    // The same view again changes nothing.
    assert!(reissue(&mut s, flags, Some(b"TRI.N"), &[22, 25]).is_empty());
    // A reissue without NO_REFRESH gets its image on a new node stream, as before.
    let sent = reissue(&mut s, request::STREAMING, Some(b"TRI.N"), &[22]);
    assert_eq!(sent[0], "Close { stream_id: 1 }", "{sent:?}");
    assert!(sent[1].contains("refresh: true"), "{sent:?}");
    assert_eq!(
        passed_on(&mut s, 2),
        [(class::REFRESH, 5), (class::UPDATE, 5)]
    );
}

#[test]
fn a_pause_without_a_view_asks_for_every_field_as_rwf_says() {
    // RWF: a request without HAS_VIEW discards the stream's view, NO_REFRESH or not.
    let mut s = tri_open(&[22]);
    let pause = request::STREAMING | request::PAUSE | request::NO_REFRESH;
    let sent = reissue(&mut s, pause, None, &[]);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(
        sent[0].contains("stream_id: 1,") && sent[0].contains("view: None"),
        "{sent:?}"
    );
    assert!(sent[0].contains("refresh: false"), "{sent:?}");
    assert_eq!(
        passed_on(&mut s, 1),
        [(class::REFRESH, 5)],
        "no update while paused"
    );
    // Resumed without a refresh: the stream has no view, so nothing goes to the node.
    let resume = request::STREAMING | request::NO_REFRESH;
    assert!(reissue(&mut s, resume, None, &[]).is_empty());
    assert_eq!(
        passed_on(&mut s, 1),
        [(class::REFRESH, 5), (class::UPDATE, 5)]
    );
    assert_eq!(s.stream_count(), 1);
}

#[test]
fn a_refused_reissue_closes_the_items_stream_at_the_node_too() {
    let mut s = tri_open(&[]);
    // A view asked for with none given.
    let b = item_request(
        5,
        request::STREAMING | request::HAS_VIEW,
        Some(b"TRI.N"),
        &[],
    );
    let (mut to_node, mut out) = (Vec::new(), Vec::new());
    s.on_client_message(&b, &mut to_node, &mut out);
    assert_eq!(classes(&out), [(class::STATUS, 5)]);
    assert_eq!(node_messages(&to_node), ["Close { stream_id: 1 }"]);
    assert_eq!(s.stream_count(), 0);
}

#[test]
fn a_providers_group_news_reaches_the_items_of_the_group() {
    use crate::testing::{group_update, GroupNews};
    let (mut s, _, mut out) = provider_with_an_item();
    let hear = |s: &mut Session, news: &[GroupNews<'_>]| {
        let mut to_node = Vec::new();
        s.on_client_message(&group_update(-1, 7, news), &mut to_node, &mut Vec::new());
        node_messages(&to_node)
    };
    // X's refresh named the default group (two zero bytes): news of another group, or
    // of its group at another service, is not for it.
    assert!(hear(
        &mut s,
        &[(&[0, 9], None, Some((stream::OPEN, data::SUSPECT)))]
    )
    .is_empty());
    let mut other = Vec::new();
    s.on_client_message(
        &group_update(
            -1,
            8,
            &[(&[0, 0], None, Some((stream::OPEN, data::SUSPECT)))],
        ),
        &mut other,
        &mut out,
    );
    assert!(
        node_messages(&other).is_empty(),
        "{:?}",
        node_messages(&other)
    );
    let said = hear(
        &mut s,
        &[(&[0, 0], None, Some((stream::OPEN, data::SUSPECT)))],
    );
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("stream_id: 1") && said[0].contains("data: Suspect"),
        "{said:?}"
    );
    // Merged away, then closed in its new group: the item is gone.
    let said = hear(
        &mut s,
        &[
            (&[0, 0], Some(&[0, 4]), None),
            (&[0, 4], None, Some((stream::CLOSED, data::SUSPECT))),
        ],
    );
    assert!(
        said.len() == 1 && said[0].contains("stream: Closed"),
        "{said:?}"
    );
    let mut u = Vec::new();
    begin_update(&mut u, domain::MARKET_PRICE, -5, 1, None, 0, false);
    FieldListWriter::begin(&mut u).end(&mut u);
    let mut to_node = Vec::new();
    s.on_client_message(&u, &mut to_node, &mut out);
    assert!(to_node.is_empty(), "{:?}", node_messages(&to_node));
}

/// The consumer's request on stream 5 (open for TRI.N): what it gets back, and what
/// the session asked of the node.
fn refused_reissue(s: &mut Session, request: &[u8]) -> ((u8, u8, String), Vec<String>) {
    let (mut to_node, mut out) = (Vec::new(), Vec::new());
    s.on_client_message(request, &mut to_node, &mut out);
    assert_eq!(classes(&out), [(class::STATUS, 5)]);
    let st = Msg::decode(&out[0]).unwrap().state.unwrap();
    let text = String::from_utf8_lossy(st.text).into_owned();
    ((st.stream, st.code, text), node_messages(&to_node))
}

#[test]
fn a_reissue_naming_another_item_or_service_is_refused_and_ends_the_stream() {
    for (what, request) in [
        (
            "another item",
            item_request(5, request::STREAMING, Some(b"IBM.N"), &[]),
        ),
        ("another service", {
            let mut on_service_2 = Vec::new();
            let w = msg::MsgWriter::begin(
                &mut on_service_2,
                class::REQUEST,
                domain::MARKET_PRICE,
                5,
                request::STREAMING,
                dt::NO_DATA,
            );
            let key = MsgKey {
                service_id: Some(2),
                name: Some(b"TRI.N"),
                name_type: Some(1),
                ..MsgKey::default()
            };
            key.encode(&mut on_service_2);
            w.end_header(&mut on_service_2);
            on_service_2
        }),
        (
            "a private stream",
            item_request(
                5,
                request::STREAMING | request::PRIVATE_STREAM,
                Some(b"TRI.N"),
                &[],
            ),
        ),
    ] {
        let mut s = tri_open(&[]);
        let ((state, code, text), sent) = refused_reissue(&mut s, &request);
        assert_eq!((state, code), (stream::CLOSED, code::USAGE_ERROR), "{what}");
        assert!(
            text.starts_with("item request rejected for stream id 5"),
            "{what}: {text}"
        );
        assert_eq!(
            sent,
            ["Close { stream_id: 1 }"],
            "{what}: the node's stream ends"
        );
        assert_eq!(s.stream_count(), 0, "{what}");
    }
    // The same key, or none, is a reissue as before.
    let mut s = tri_open(&[]);
    let sent = reissue(&mut s, request::STREAMING, Some(b"TRI.N"), &[]);
    assert_eq!(sent[0], "Close { stream_id: 1 }", "{sent:?}");
    assert!(sent[1].contains("name: \"TRI.N\""), "{sent:?}");
    assert_eq!(s.stream_count(), 1);
}

/// A provider repeating its group's state makes nothing of it for the node: the first
/// message reaches each item, the repeats none, until an item has a state of its own
/// (its refresh) and the group's state is news for it again.
#[test]
fn a_group_state_repeated_reaches_the_items_once() {
    use crate::testing::group_update;
    let (mut s, _, mut out) = provider_with_an_item();
    const ITEMS: i32 = 2_000;
    let refresh = |i: i32| testing::item_refresh(-10 - i, 7, &format!("I{i}"));
    let mut to_node = Vec::new();
    for i in 0..ITEMS {
        s.on_client_message(&refresh(i), &mut to_node, &mut out);
    }
    let suspect = group_update(
        -1,
        7,
        &[(
            testing::DEFAULT_GROUP,
            None,
            Some((stream::OPEN, data::SUSPECT)),
        )],
    );
    let statuses = |s: &mut Session, msgs: &[&[u8]]| {
        let mut to_node = Vec::new();
        for m in msgs {
            s.on_client_message(m, &mut to_node, &mut Vec::new());
        }
        node_messages(&to_node)
    };
    // X and the 2,000 items.
    assert_eq!(statuses(&mut s, &[&suspect]).len(), ITEMS as usize + 1);
    assert!(statuses(&mut s, &[suspect.as_slice(); 20]).is_empty());
    let again = statuses(&mut s, &[&refresh(7), &suspect]);
    assert_eq!(
        again.len(),
        ITEMS as usize + 2,
        "the refresh, then every item's status"
    );
    assert!(again[1].contains("data: Suspect"), "{:?}", &again[..2]);
}

/// A batch whose view, times its items, names more than 2^20 fields
/// is refused whole; one within it opens its items, which share one copy of the view.
#[test]
fn a_batch_whose_view_names_too_many_fields_in_all_is_refused() {
    let fids: Vec<i64> = (1..=1024).collect();
    let names: Vec<String> = (0..2_000).map(|i| format!("I{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (mut s, mut out) = logged_in();
    let mut to_node = Vec::new();
    let too_many = batch_request_with(&names, request::HAS_VIEW, &fids);
    let text = batch_refused_whole(&mut s, &too_many);
    assert!(text.contains("split the batch"), "{text}");

    let within = batch_request_with(&names[..1_000], request::HAS_VIEW, &fids);
    s.on_client_message(&within, &mut to_node, &mut out);
    assert_eq!(node_messages(&to_node).len(), 1_000);
    assert_eq!(s.stream_count(), 1_000);
    let views: Vec<&Arc<[i16]>> = s
        .streams
        .values()
        .filter_map(|st| st.view.as_ref())
        .collect();
    assert_eq!(views.len(), 1_000);
    assert!(views.windows(2).all(|w| Arc::ptr_eq(w[0], w[1])));
}

/// A session numbers each service name it hears once, for its life (a removed service
/// keeps its id): past 65,535 names a new one is not offered to it, and the names it
/// has keep their ids.
#[test]
fn a_session_numbers_at_most_65535_services() {
    let (mut s, mut out) = logged_in();
    let before = s.services.len();
    let names: Vec<String> = (0..=u16::MAX as usize)
        .map(|i| format!("S{i:05}"))
        .collect();
    for chunk in names.chunks(4_000) {
        let entries: Vec<(&str, ServiceState)> = chunk
            .iter()
            .map(|n| (n.as_str(), ServiceState::Up))
            .collect();
        deliver(&mut s, &directory(&entries), &mut out);
    }
    assert_eq!(s.services.len(), u16::MAX as usize);
    let last = u16::MAX as usize - before - 1;
    let name = |id: u16| s.service(id).map(|x| x.name.clone());
    assert_eq!(name(u16::MAX), Some(names[last].clone()));
    assert_eq!(
        s.service_by_name.get(names[last + 1].as_str()),
        None,
        "one name too many"
    );
    assert_eq!(name(before as u16 + 1), Some("S00000".to_string()));
    assert!(s.service(0).is_none());
}

/// A second off-stream post under a post id still waiting for its Ack is refused (the
/// node answers off-stream posts by id alone): the first one's Ack still finds its
/// stream.
#[test]
fn an_off_stream_post_under_a_waiting_post_id_is_refused() {
    let (mut s, mut to_node, mut out) = directory_read();
    let key = tri_n_key();
    s.on_client_message(&post_msg(2, Some(&key)), &mut to_node, &mut out);
    s.on_client_message(&post_msg(1, Some(&key)), &mut to_node, &mut out);
    assert_eq!(
        node_messages(&to_node).len(),
        1,
        "one post reaches the node"
    );
    let nak = Msg::decode(&out[0]).unwrap();
    assert_eq!(
        (nak.class, nak.stream_id, nak.post_id),
        (class::ACK, 1, Some(7))
    );
    assert!(nak.nak_code.is_some(), "{nak:?}");
    out.clear();
    deliver(&mut s, &node_ack(0), &mut out);
    let a = Msg::decode(&out[0]).unwrap();
    assert_eq!((a.class, a.stream_id, a.post_id), (class::ACK, 2, Some(7)));
}

/// The node's stream ids a consumer session hands out wrap past u32::MAX, skipping 0
/// and the ids still open.
#[test]
fn the_nodes_stream_ids_wrap_around_the_open_ones() {
    let (mut s, mut out) = logged_in();
    let opened = |s: &mut Session, stream: i32, name: &[u8]| {
        let mut to_node = Vec::new();
        let req = item_request(stream, request::STREAMING, Some(name), &[]);
        s.on_client_message(&req, &mut to_node, &mut Vec::new());
        node_messages(&to_node)
    };
    let first = opened(&mut s, 5, b"A");
    assert!(first[0].contains("stream_id: 1,"), "{first:?}");
    s.next_native = u32::MAX;
    let last = opened(&mut s, 6, b"B");
    assert!(
        last[0].contains(&format!("stream_id: {},", u32::MAX)),
        "{last:?}"
    );
    let wrapped = opened(&mut s, 7, b"C");
    assert!(
        wrapped[0].contains("stream_id: 2,"),
        "1 is A's: {wrapped:?}"
    );
    assert_eq!(s.stream_count(), 3);
    out.clear();
}

/// A provider's items get the node's publisher stream ids below 2^31 (the node's own
/// start there), wrapping around the ids still open.
#[test]
fn a_providers_stream_ids_stay_below_the_nodes_and_wrap_around_the_open_ones() {
    let (mut s, _, mut out) = provider_with_an_item();
    let published = |s: &mut Session, stream: i32, name: &str| {
        let item = testing::item_refresh(stream, 7, name);
        let mut to_node = Vec::new();
        s.on_client_message(&item, &mut to_node, &mut Vec::new());
        node_messages(&to_node)
    };
    s.provider.as_mut().unwrap().next_native = 0x7fff_fffe;
    let last = published(&mut s, -6, "Y");
    assert!(
        last[0].contains(&format!("stream_id: {},", 0x7fff_ffffu32)),
        "{last:?}"
    );
    let wrapped = published(&mut s, -7, "Z");
    assert!(
        wrapped[0].contains("stream_id: 2,"),
        "1 is X's: {wrapped:?}"
    );
    out.clear();
}

/// The node marks every item of a service suspect when the service goes down: the
/// provider's group state after the service comes back reaches the items, although it
/// is the state the group last had.
#[test]
fn a_group_state_after_its_service_went_down_and_up_reaches_the_items() {
    use crate::testing::{group_update, source_directory, state, DirectoryMsg};
    let (mut s, _, _) = provider_with_an_item();
    let group = |d| {
        group_update(
            -1,
            7,
            &[(testing::DEFAULT_GROUP, None, Some((stream::OPEN, d)))],
        )
    };
    assert_eq!(provider_says(&mut s, &group(data::SUSPECT)).len(), 1);
    assert_eq!(provider_says(&mut s, &group(data::OK)).len(), 1);
    assert!(
        provider_says(&mut s, &group(data::OK)).is_empty(),
        "a repeat"
    );
    let down = source_directory(-1, DirectoryMsg::Update, 7, |o, fl| state(o, fl, 0));
    let said = provider_says(&mut s, &down);
    assert!(said.iter().any(|m| m.contains("Down")), "{said:?}");
    let up = source_directory(-1, DirectoryMsg::Update, 7, |o, fl| state(o, fl, 1));
    let said = provider_says(&mut s, &up);
    assert!(said.iter().any(|m| m.contains("Up")), "{said:?}");
    let said = provider_says(&mut s, &group(data::OK));
    assert_eq!(said.len(), 1, "X stays suspect at the node: {said:?}");
}

/// A non-interactive provider that deletes its service has it let go of at the node,
/// and adding it back with its INFO filter alone has it up again (its id was known).
#[test]
fn a_providers_service_deleted_and_added_back_without_a_state_is_up() {
    use crate::testing::{info, source_directory, DirectoryMsg};
    let (mut s, _, _) = provider_with_an_item();
    let deletion = source_directory(-1, DirectoryMsg::Deletion, 7, |_, _| {});
    let said = provider_says(&mut s, &deletion);
    assert!(said.iter().any(|m| m.contains("Down")), "{said:?}");
    // Deleted: for the node to let go of, once.
    assert_eq!(s.take_released(), ["PROV"]);
    assert!(s.take_released().is_empty());
    let back = source_directory(-1, DirectoryMsg::Unsolicited, 7, |o, fl| {
        info(o, fl, b"PROV")
    });
    let said = provider_says(&mut s, &back);
    assert!(
        said.iter()
            .any(|m| m.contains("\"PROV\"") && m.contains("Up")),
        "{said:?}"
    );
}

/// Off-stream posts past the 65,536 the session remembers for their Acks are refused:
/// none could be told apart from a repeat of a post id.
#[test]
fn off_stream_posts_past_those_remembered_are_refused() {
    let (mut s, mut to_node, mut out) = directory_read();
    let key = tri_n_key();
    for id in 0..65_536 {
        s.on_client_message(&post_msg_with_id(2, Some(&key), id), &mut to_node, &mut out);
    }
    assert!(out.is_empty(), "{} refused", out.len());
    to_node.clear();
    s.on_client_message(
        &post_msg_with_id(2, Some(&key), 65_536),
        &mut to_node,
        &mut out,
    );
    assert!(to_node.is_empty(), "the post reached the node");
    let nak = Msg::decode(&out[0]).unwrap();
    assert_eq!(
        (nak.class, nak.post_id, nak.nak_code),
        (
            class::ACK,
            Some(65_536),
            Some(tickwire_proto::NakCode::NoResources.to_u8())
        )
    );
}

/// A provider's periodic directory update that repeats its service's state (up) and
/// its group's state is no news: no item hears anything.
#[test]
fn a_periodic_directory_update_repeating_its_states_reaches_no_item() {
    use crate::testing::{group, group_update, source_directory, state, DirectoryMsg};
    let (mut s, _, _) = provider_with_an_item();
    let ok = (testing::DEFAULT_GROUP, None, Some((stream::OPEN, data::OK)));
    assert_eq!(provider_says(&mut s, &group_update(-1, 7, &[ok])).len(), 1);
    let periodic = source_directory(-1, DirectoryMsg::Update, 7, |o, fl| {
        state(o, fl, 1);
        group(o, fl, ok);
    });
    for _ in 0..3 {
        let said = provider_says(&mut s, &periodic);
        assert!(said.iter().all(|m| !m.contains("Status")), "{said:?}");
    }
}

/// A non-interactive provider's service Status reaches its items too.
#[test]
fn a_non_interactive_providers_service_status_reaches_its_items() {
    use crate::testing::{source_directory, state_with_status, DirectoryMsg};
    let (mut s, _, _) = provider_with_an_item();
    let statuses = |s: &mut Session, st| {
        let update = source_directory(-1, DirectoryMsg::Update, 7, |o, fl| {
            state_with_status(o, fl, 1, st)
        });
        let said = provider_says(s, &update);
        said.into_iter()
            .filter(|m| m.starts_with("Status"))
            .collect::<Vec<_>>()
    };
    let said = statuses(&mut s, (stream::OPEN, data::SUSPECT));
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("stream_id: 1") && said[0].contains("data: Suspect"),
        "{said:?}"
    );
    let said = statuses(&mut s, (stream::OPEN, data::OK));
    assert!(said.len() == 1 && said[0].contains("data: Ok"), "{said:?}");
}

/// What the session tells the node of one message from its provider.
fn provider_says(s: &mut Session, m: &[u8]) -> Vec<String> {
    let mut to_node = Vec::new();
    s.on_client_message(m, &mut to_node, &mut Vec::new());
    node_messages(&to_node)
}

/// A consumer's snapshot request for TRI.N (its stream 5, the node's 1) whose service
/// is down: the node's status says it waits, open and suspect. What the consumer got.
fn snapshot_waiting() -> (Session, Vec<Vec<u8>>) {
    let (mut s, mut out) = logged_in();
    let mut to_node = Vec::new();
    request_directory(&mut s, &mut to_node, &mut out);
    s.on_client_message(
        &item_request(5, 0, Some(b"TRI.N"), &[]),
        &mut to_node,
        &mut out,
    );
    assert!(node_messages(&to_node)[0].contains("streaming: false"));
    out.clear();
    let mut waiting = Vec::new();
    Message::Status(Status {
        stream_id: 1,
        state: State {
            stream: StreamState::Open,
            data: DataState::Suspect,
            code: ncode::SERVICE_DOWN,
            text: "service \"FEED\" is down",
        },
    })
    .encode(&mut waiting)
    .unwrap();
    deliver(&mut s, &waiting, &mut out);
    (s, out)
}

/// RWF's NON_STREAMING would end the snapshot: its image would find no stream.
#[test]
fn a_snapshot_waiting_for_a_down_service_stays_open_for_its_image() {
    let (mut s, mut out) = snapshot_waiting();
    let st = Msg::decode(&out[0]).unwrap().state.unwrap();
    assert_eq!((st.stream, st.data), (stream::OPEN, data::SUSPECT));
    out.clear();
    deliver(&mut s, &refresh_and_update(1, no_fields()), &mut out);
    let image = Msg::decode(&out[0]).unwrap();
    assert_eq!((image.class, image.stream_id), (class::REFRESH, 5));
    assert_eq!(image.state.unwrap().stream, stream::NON_STREAMING);
    assert_eq!(s.stream_count(), 0, "the image ends it");
}

#[test]
fn a_snapshot_waiting_for_a_down_service_closed_by_the_consumer_is_closed_at_the_node() {
    let (mut s, _) = snapshot_waiting();
    let mut close = Vec::new();
    put_close(&mut close, domain::MARKET_PRICE, 5);
    let mut to_node = Vec::new();
    s.on_client_message(&close, &mut to_node, &mut Vec::new());
    assert_eq!(node_messages(&to_node), ["Close { stream_id: 1 }"]);
}

/// A non-interactive provider's refresh on its `stream` of item `name`, whose field
/// list does not decode (a Real with hint 31).
fn malformed_refresh(stream: i32, name: &[u8]) -> Vec<u8> {
    let key = MsgKey {
        service_id: Some(7),
        name: Some(name),
        name_type: Some(1),
        ..MsgKey::default()
    };
    testing::refresh_in_group(stream, false, testing::DEFAULT_GROUP, Some(&key), |o, f| {
        f.field(o, 22, |o| o.extend_from_slice(&[31, 1]))
    })
}

#[test]
fn a_providers_refresh_whose_fields_do_not_decode_is_refused_with_the_reason() {
    let (mut s, _, _) = provider_with_an_item();
    let (mut to_node, mut out) = (Vec::new(), Vec::new());
    s.on_client_message(&malformed_refresh(-6, b"Y"), &mut to_node, &mut out);
    assert!(to_node.is_empty(), "{:?}", node_messages(&to_node));
    let refusal = Msg::decode(&out[0]).unwrap();
    let st = refusal.state.unwrap();
    assert_eq!(
        (refusal.class, refusal.stream_id, st.stream),
        (class::STATUS, -6, stream::CLOSED)
    );
    let text = String::from_utf8_lossy(st.text);
    assert!(text.contains("does not decode"), "{text}");
    // Y took no stream: the next item has the one after X's.
    let said = provider_says(&mut s, &testing::item_refresh(-7, 7, "Z"));
    assert!(said[0].contains("stream_id: 2,"), "{said:?}");
    // X, published, is closed at the node too.
    out.clear();
    s.on_client_message(&malformed_refresh(-5, b"X"), &mut to_node, &mut out);
    let said = node_messages(&to_node);
    assert!(
        said.len() == 1 && said[0].contains("stream_id: 1") && said[0].contains("Closed"),
        "{said:?}"
    );
    assert_eq!(Msg::decode(&out[0]).unwrap().stream_id, -5);
}

/// An update whose fields do not decode is not left out without a word (the item's
/// image would be wrong at every subscriber): the item is closed at the node and at
/// the provider, with the reason.
#[test]
fn a_providers_update_whose_fields_do_not_decode_closes_the_item_with_the_reason() {
    let (mut s, _, _) = provider_with_an_item();
    let mut update = Vec::new();
    let w = msg::MsgWriter::begin(
        &mut update,
        class::UPDATE,
        domain::MARKET_PRICE,
        -5,
        0,
        dt::FIELD_LIST,
    );
    update.push(0); // update type: unspecified
    w.end_header(&mut update);
    let mut f = FieldListWriter::begin(&mut update);
    f.field(&mut update, 22, |o| o.extend_from_slice(&[31, 1]));
    f.end(&mut update);
    let (mut to_node, mut out) = (Vec::new(), Vec::new());
    s.on_client_message(&update, &mut to_node, &mut out);
    let said = node_messages(&to_node);
    assert!(
        said.len() == 1 && said[0].contains("stream_id: 1") && said[0].contains("Closed"),
        "{said:?}"
    );
    let refusal = Msg::decode(&out[0]).unwrap();
    let st = refusal.state.unwrap();
    assert_eq!((refusal.stream_id, st.stream), (-5, stream::CLOSED));
    let text = String::from_utf8_lossy(st.text);
    assert!(
        text.contains("update's field list does not decode"),
        "{text}"
    );
}

#[test]
fn a_providers_status_without_a_state_only_moves_the_item_to_another_group() {
    let (mut s, _, _) = provider_with_an_item();
    let mut st = Vec::new();
    let w = msg::MsgWriter::begin(
        &mut st,
        class::STATUS,
        domain::MARKET_PRICE,
        -5,
        msg::status::HAS_GROUP_ID,
        dt::NO_DATA,
    );
    st.extend_from_slice(&[2, 0, 9]);
    w.end_header(&mut st);
    let said = provider_says(&mut s, &st);
    assert!(said.is_empty(), "{said:?}");
    let suspect = Some((stream::OPEN, data::SUSPECT));
    let said = provider_says(
        &mut s,
        &testing::group_update(-1, 7, &[(&[0, 9], None, suspect)]),
    );
    assert!(
        said.len() == 1 && said[0].contains("stream_id: 1"),
        "X is in group 9: {said:?}"
    );
}

#[test]
fn a_providers_service_left_out_of_its_new_directory_refresh_goes_down() {
    let (mut s, _, _) = provider_with_an_item();
    let only_other = testing::service_up(-1, testing::DirectoryMsg::Anew, 8, b"OTHER");
    let said = provider_says(&mut s, &only_other);
    assert!(
        said.iter()
            .any(|m| m.contains("name: \"PROV\", state: Down")),
        "{said:?}"
    );
}

#[test]
fn a_providers_renamed_service_goes_down_under_its_old_name() {
    let (mut s, _, _) = provider_with_an_item();
    let renamed = testing::service_up(-1, testing::DirectoryMsg::Update, 7, b"PROV2");
    let said = provider_says(&mut s, &renamed);
    assert!(
        said.iter()
            .any(|m| m.contains("name: \"PROV\", state: Down")
                && m.contains("name: \"PROV2\", state: Up")),
        "{said:?}"
    );
}

/// A malformed message on the login stream closes that stream at the consumer, which
/// ends its session: the node ends it too, rather than go on with a session the
/// consumer holds closed.
#[test]
fn a_malformed_message_on_the_login_stream_ends_the_session() {
    let (mut s, mut out) = logged_in();
    // A Generic message's header on the login stream (1), cut short.
    let bad = [0, 6, 7, domain::LOGIN, 0, 0, 0, 1, 0];
    s.on_client_message(&bad, &mut Vec::new(), &mut out);
    let st = Msg::decode(&out[0]).unwrap();
    assert_eq!((st.domain, st.stream_id), (domain::LOGIN, 1));
    assert_eq!(st.state.unwrap().stream, stream::CLOSED);
    assert!(s.finished);
    // On another stream, only that stream is closed.
    let (mut s, mut out) = logged_in();
    let bad = [0, 6, 7, domain::MARKET_PRICE, 0, 0, 0, 9, 0];
    s.on_client_message(&bad, &mut Vec::new(), &mut out);
    assert_eq!(Msg::decode(&out[0]).unwrap().stream_id, 9);
    assert!(!s.finished);
}

/// PROV (id 7) renamed PROV2: X ends at the node as recoverable, and its next
/// refresh, now PROV2's, opens a node stream of its own (the node takes a known
/// stream's refresh whatever service it names).
#[test]
fn a_renamed_services_item_is_not_left_on_the_old_names_stream() {
    let (mut s, _, _) = provider_with_an_item();
    let renamed = testing::service_up(-1, testing::DirectoryMsg::Update, 7, b"PROV2");
    let at_rename = provider_says(&mut s, &renamed);
    assert!(
        at_rename
            .iter()
            .any(|m| m.contains("stream_id: 1,") && m.contains("ClosedRecover")),
        "{at_rename:?}"
    );
    let said = provider_says(&mut s, &testing::item_refresh(-5, 7, "X"));
    assert!(
        said[0].contains("stream_id: 2,") && said[0].contains("\"PROV2\""),
        "{said:?}"
    );
}

/// X's refresh naming a service not in the directory is refused, and X is closed at
/// the node and forgotten: the provider's stream -5, opened again for Y, gets a node
/// stream of its own.
#[test]
fn an_item_whose_refresh_is_refused_is_forgotten_at_the_node_too() {
    let (mut s, _, _) = provider_with_an_item();
    let (mut to_node, mut out) = (Vec::new(), Vec::new());
    s.on_client_message(&testing::item_refresh(-5, 99, "X"), &mut to_node, &mut out);
    let refusal = Msg::decode(&out[0]).unwrap();
    let refused = (refusal.stream_id, refusal.state.unwrap().stream);
    assert_eq!(refused, (-5, stream::CLOSED));
    let closed = node_messages(&to_node);
    assert!(
        closed[0].contains("stream_id: 1,") && closed[0].contains("Closed"),
        "{closed:?}"
    );
    let said = provider_says(&mut s, &testing::item_refresh(-5, 7, "Y"));
    assert!(said[0].contains("stream_id: 2,"), "{said:?}");
}

/// A login by authentication token (name type 5) names no user: its token, in the
/// AuthenticationToken element with a name of one NUL byte as the ETA Consumer's `-at`
/// sends it (or as the name itself), goes to the node as the secret of a login without
/// a user, and the node finds whose token it is.
#[test]
fn a_login_by_authentication_token_sends_the_node_its_token_and_no_user() {
    for (name, element) in [(&b"\0"[..], Some(&b"tok-1"[..])), (&b"tok-1"[..], None)] {
        let mut attrib = Vec::new();
        let mut el = ElementListWriter::begin(&mut attrib);
        el.ascii(&mut attrib, "ApplicationId", b"256");
        if let Some(token) = element {
            el.ascii(&mut attrib, "AuthenticationToken", token);
        }
        el.end(&mut attrib);
        let key = MsgKey {
            name: Some(name),
            name_type: Some(5),
            attrib: Some((dt::ELEMENT_LIST, &attrib)),
            ..MsgKey::default()
        };
        let mut login = Vec::new();
        msg::put_request(
            &mut login,
            domain::LOGIN,
            1,
            request::STREAMING,
            &key,
            false,
        );
        let mut s = Session::new(Arc::new(SessionConfig::default()));
        let (mut to_node, mut out) = (Vec::new(), Vec::<Vec<u8>>::new());
        s.on_client_message(&login, &mut to_node, &mut out);
        let logins: Vec<(String, String)> = MessageIter::new(&to_node)
            .map(|m| match m.unwrap().message {
                Message::Login(l) => (l.user.to_string(), l.token.to_string()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(logins, [(String::new(), "tok-1".to_string())]);
    }
}

/// A Login request again on the open login stream (a reissue) is answered as a request
/// is: a refresh marked solicited (the SDK's watchlist takes only a solicited one as its
/// answer, and asks again when none comes), and nothing when it asks for no refresh
/// (as the watchlist's token renewals do).
#[test]
fn a_login_reissue_gets_a_solicited_refresh_unless_it_asks_for_none() {
    let (mut s, mut out) = logged_in();
    let key = MsgKey {
        name: Some(b"root"),
        name_type: Some(1),
        ..MsgKey::default()
    };
    let login = |flags| {
        let mut b = Vec::new();
        msg::put_request(&mut b, domain::LOGIN, 1, flags, &key, false);
        b
    };
    let mut to_node = Vec::new();
    s.on_client_message(&login(request::STREAMING), &mut to_node, &mut out);
    assert_eq!(out.len(), 1);
    let r = Msg::decode(&out[0]).unwrap();
    assert_eq!(
        (r.class, r.domain, r.stream_id),
        (class::REFRESH, domain::LOGIN, 1)
    );
    assert!(r.flags & refresh::SOLICITED != 0, "unsolicited");
    assert_eq!(r.state.unwrap().stream, stream::OPEN);
    out.clear();
    let no_refresh = request::STREAMING | request::NO_REFRESH;
    s.on_client_message(&login(no_refresh), &mut to_node, &mut out);
    assert!(out.is_empty(), "{} messages", out.len());
    assert!(to_node.is_empty() && !s.finished);
}

/// A post on an item's stream, then a reissue of the stream that asks for a refresh
/// (a new view, a priority, a resume): the node's stream the post went on is replaced,
/// but the consumer's stream goes on, and the post's Ack still reaches it. Once the
/// consumer closes the stream, the Acks of its earlier node streams go too.
#[test]
fn a_posts_ack_reaches_its_stream_after_a_reissue_replaced_the_nodes_stream() {
    let mut s = tri_open(&[]);
    let (mut to_node, mut out) = (Vec::new(), Vec::new());
    s.on_client_message(&post_msg(5, None), &mut to_node, &mut out);
    assert!(node_messages(&to_node)[0].contains("stream_id: 1,"));
    let sent = reissue(&mut s, request::STREAMING, None, &[22]);
    assert_eq!(sent[0], "Close { stream_id: 1 }", "{sent:?}");
    // The node answers the post on the stream it came on.
    deliver(&mut s, &node_ack(1), &mut out);
    assert_eq!(out.len(), 1, "no Ack");
    let ack = Msg::decode(&out[0]).unwrap();
    assert_eq!(
        (ack.class, ack.stream_id, ack.post_id, ack.seq),
        (class::ACK, 5, Some(7), Some(9))
    );
    assert_eq!(s.pending_posts.len(), 0);
    // A post before two reissues, the stream closed before its answer: none comes.
    out.clear();
    s.on_client_message(&post_msg(5, None), &mut to_node, &mut out);
    reissue(&mut s, request::STREAMING, None, &[]);
    reissue(&mut s, request::STREAMING, None, &[25]);
    assert_eq!(s.pending_posts.len(), 1);
    s.on_client_message(&hex("0008 05 06 00000005 00 00"), &mut to_node, &mut out);
    assert_eq!(s.pending_posts.len(), 0);
    deliver(&mut s, &node_ack(2), &mut out);
    assert!(out.is_empty(), "an Ack on a closed stream: {out:?}");
}

/// A stream reissued over and over, a post waiting on each of its node streams: the
/// posts kept for their Acks are those of the latest few node streams, so that neither
/// they nor what a reissue costs grow with the reissues.
#[test]
fn the_posts_kept_across_reissues_of_a_stream_are_bounded() {
    let mut s = tri_open(&[]);
    let (mut to_node, mut out) = (Vec::new(), Vec::new());
    for _ in 0..1000 {
        s.on_client_message(&post_msg(5, None), &mut to_node, &mut out);
        reissue(&mut s, request::STREAMING, None, &[]);
    }
    assert!(out.is_empty());
    assert!(
        s.pending_posts.len() <= MAX_REPLACED,
        "{}",
        s.pending_posts.len()
    );
    // The latest post's Ack still comes, with its sequence number (it went on the
    // node's stream 1,000, replaced by 1,001); the first's does not.
    deliver(&mut s, &node_ack(1000), &mut out);
    deliver(&mut s, &node_ack(1), &mut out);
    assert_eq!(out.len(), 1);
    let ack = Msg::decode(&out[0]).unwrap();
    assert_eq!(
        (ack.class, ack.stream_id, ack.seq),
        (class::ACK, 5, Some(9))
    );
}

/// A provider's refresh on its open stream -5 (item X) naming another item, Y: the
/// node's X is not given Y's image under X's name. The stream is refused (a stream is
/// one item's, as for a consumer's reissue): X is closed at the node, and the
/// provider's stream -5, opened again for Y, gets a node stream of its own.
#[test]
fn a_providers_refresh_naming_another_item_on_an_open_stream_is_refused() {
    let (mut s, _, _) = provider_with_an_item();
    let (mut to_node, mut out) = (Vec::new(), Vec::new());
    s.on_client_message(&testing::item_refresh(-5, 7, "Y"), &mut to_node, &mut out);
    let said = node_messages(&to_node);
    assert!(
        !said.iter().any(|m| m.starts_with("Refresh")),
        "Y's image went to the node: {said:?}"
    );
    assert!(
        said.iter()
            .any(|m| m.contains("stream_id: 1,") && m.contains("stream: Closed")),
        "{said:?}"
    );
    let refusal = Msg::decode(&out[0]).unwrap();
    let st = refusal.state.unwrap();
    assert_eq!(
        (refusal.stream_id, st.stream, st.code),
        (-5, stream::CLOSED, code::USAGE_ERROR)
    );
    let said = provider_says(&mut s, &testing::item_refresh(-5, 7, "Y"));
    assert!(
        said[0].contains("stream_id: 2,") && said[0].contains("name: \"Y\""),
        "{said:?}"
    );
    // X again on its own stream is X's refresh, as before.
    let said = provider_says(&mut s, &testing::item_refresh(-6, 7, "X"));
    assert!(said[0].contains("stream_id: 3,"), "{said:?}");
    let said = provider_says(&mut s, &testing::item_refresh(-6, 7, "X"));
    assert!(
        said[0].starts_with("Refresh") && said[0].contains("stream_id: 3,"),
        "{said:?}"
    );
}

/// Two streaming directory requests on streams of their own (one about every service,
/// one about OTHER alone): each stream hears of the services it asked about; a close
/// or a non-streaming request on one ends only that one; a stream past the most a
/// connection may hold open is refused.
#[test]
fn each_directory_stream_hears_of_its_services() {
    let (mut s, mut out) = logged_in();
    let mut to_node = Vec::new();
    deliver(
        &mut s,
        &directory(&[("FEED", ServiceState::Up), ("OTHER", ServiceState::Up)]),
        &mut out,
    );
    request_directory(&mut s, &mut to_node, &mut out);
    let key = MsgKey {
        service_id: Some(2),
        filter: Some(7),
        ..MsgKey::default()
    };
    let mut b = Vec::new();
    msg::put_request(&mut b, domain::SOURCE, 3, request::STREAMING, &key, false);
    s.on_client_message(&b, &mut to_node, &mut out);
    out.clear();
    deliver(
        &mut s,
        &directory(&[("OTHER", ServiceState::Down)]),
        &mut out,
    );
    assert_eq!(classes(&out), [(class::UPDATE, 2), (class::UPDATE, 3)]);
    out.clear();
    deliver(
        &mut s,
        &directory(&[("FEED", ServiceState::Down)]),
        &mut out,
    );
    assert_eq!(classes(&out), [(class::UPDATE, 2)]);
    // Stream 2 closed: 3 goes on.
    out.clear();
    s.on_client_message(&hex("0008 05 04 00000002 00 00"), &mut to_node, &mut out);
    deliver(&mut s, &directory(&[("OTHER", ServiceState::Up)]), &mut out);
    assert_eq!(classes(&out), [(class::UPDATE, 3)]);
    // Asked again without streaming: its refresh ends it, and nothing follows on it.
    out.clear();
    let mut b = Vec::new();
    msg::put_request(&mut b, domain::SOURCE, 3, 0, &key, false);
    s.on_client_message(&b, &mut to_node, &mut out);
    assert_eq!(classes(&out), [(class::REFRESH, 3)]);
    assert_eq!(
        Msg::decode(&out[0]).unwrap().state.unwrap().stream,
        stream::NON_STREAMING
    );
    out.clear();
    deliver(
        &mut s,
        &directory(&[("OTHER", ServiceState::Down)]),
        &mut out,
    );
    assert!(out.is_empty(), "{out:?}");
    // As many streams as a connection may hold, and one more: refused.
    for sid in 0..=MAX_DIRECTORY_STREAMS as i32 {
        let mut b = Vec::new();
        msg::put_request(
            &mut b,
            domain::SOURCE,
            10 + sid,
            request::STREAMING,
            &key,
            false,
        );
        s.on_client_message(&b, &mut to_node, &mut out);
    }
    let last = Msg::decode(out.last().unwrap()).unwrap();
    assert_eq!(
        (last.class, last.stream_id),
        (class::STATUS, 10 + MAX_DIRECTORY_STREAMS as i32)
    );
    assert_eq!(last.state.unwrap().code, code::NO_RESOURCES);
    out.clear();
    deliver(&mut s, &directory(&[("OTHER", ServiceState::Up)]), &mut out);
    assert_eq!(out.len(), MAX_DIRECTORY_STREAMS);
}

/// A message that does not decode, on an open item stream: the consumer is told the
/// stream is closed, and so it is, at the node too; its updates stop, and the stream
/// id may be opened again, for another item.
#[test]
fn a_malformed_message_on_an_item_stream_closes_it_at_the_node_too() {
    let mut s = tri_open(&[]);
    let (mut to_node, mut out) = (Vec::new(), Vec::new());
    let bad = [0, 6, 7, domain::MARKET_PRICE, 0, 0, 0, 5, 0];
    s.on_client_message(&bad, &mut to_node, &mut out);
    let st = Msg::decode(&out[0]).unwrap();
    assert_eq!(
        (st.class, st.stream_id, st.state.unwrap().stream),
        (class::STATUS, 5, stream::CLOSED)
    );
    assert_eq!(node_messages(&to_node), ["Close { stream_id: 1 }"]);
    assert_eq!(s.stream_count(), 0);
    assert!(
        passed_on(&mut s, 1).is_empty(),
        "updates on a closed stream"
    );
    // Stream 5 again, for another item: a new stream, not a reissue refused.
    out.clear();
    to_node.clear();
    let ibm = item_request(5, request::STREAMING, Some(b"IBM.N"), &[]);
    s.on_client_message(&ibm, &mut to_node, &mut out);
    assert!(out.is_empty(), "refused: {out:?}");
    assert!(node_messages(&to_node)[0].contains("IBM.N"));
    // A provider's item stream likewise: its item ends at the node.
    let (mut s, _, _) = provider_with_an_item();
    let bad = [0, 6, 7, domain::MARKET_PRICE, 0xFF, 0xFF, 0xFF, 0xFB, 0];
    let said = provider_says(&mut s, &bad);
    assert!(
        said.len() == 1 && said[0].contains("stream_id: 1,") && said[0].contains("Closed"),
        "{said:?}"
    );
    let said = provider_says(&mut s, &testing::item_refresh(-5, 7, "X"));
    assert!(said[0].contains("stream_id: 2,"), "{said:?}");
}

/// A request the node refuses on an open item stream (another domain on its id, a
/// message of a class no consumer sends): the consumer is told the stream is closed,
/// and so it is, at the node too.
#[test]
fn a_refused_message_on_an_open_item_stream_closes_it_at_the_node_too() {
    let other_domain = {
        let mut b = item_request(5, request::STREAMING, Some(b"TRI.N"), &[]);
        b[3] = domain::MARKET_BY_ORDER;
        b
    };
    let refresh_from_consumer = {
        let mut b = Vec::new();
        let ok = testing::ok();
        begin_refresh(
            &mut b,
            domain::MARKET_PRICE,
            5,
            0,
            dt::NO_DATA,
            None,
            &ok,
            None,
            None,
            false,
        );
        b
    };
    for bad in [other_domain, refresh_from_consumer] {
        let mut s = tri_open(&[]);
        let (mut to_node, mut out) = (Vec::new(), Vec::new());
        s.on_client_message(&bad, &mut to_node, &mut out);
        let st = Msg::decode(&out[0]).unwrap();
        assert_eq!(
            (st.class, st.stream_id, st.state.unwrap().stream),
            (class::STATUS, 5, stream::CLOSED)
        );
        assert_eq!(node_messages(&to_node), ["Close { stream_id: 1 }"]);
        assert_eq!(s.stream_count(), 0);
        assert!(
            passed_on(&mut s, 1).is_empty(),
            "updates on a closed stream"
        );
    }
}

/// A provider's refresh whose fields are too many for one of the node's messages (two
/// texts of 40,000 bytes) reaches the node in parts, as the node's own publishers send
/// a large image; an update that large, which no node message carries, ends the item
/// with the reason rather than leave its image wrong without a word.
#[test]
fn a_providers_refresh_too_large_for_one_node_message_goes_in_parts() {
    let (mut s, _, _) = provider_with_an_item();
    let key = MsgKey {
        service_id: Some(7),
        name: Some(b"BIG"),
        name_type: Some(1),
        ..MsgKey::default()
    };
    let big = |o: &mut Vec<u8>, f: &mut FieldListWriter| {
        f.field(o, 3, |o| o.extend_from_slice(&[b'A'; 40_000]));
        f.field(o, 28, |o| o.extend_from_slice(&[b'B'; 40_000]));
    };
    let mut rf = Vec::new();
    let flags = refresh::REFRESH_COMPLETE | refresh::CLEAR_CACHE;
    let ok = testing::ok();
    let d = domain::MARKET_PRICE;
    begin_refresh(
        &mut rf,
        d,
        -6,
        flags,
        dt::FIELD_LIST,
        None,
        &ok,
        Some(&key),
        None,
        false,
    );
    let mut fl = FieldListWriter::begin(&mut rf);
    big(&mut rf, &mut fl);
    fl.end(&mut rf);
    let mut to_node = Vec::new();
    s.on_client_message(&rf, &mut to_node, &mut Vec::new());
    let parts: Vec<Refresh<'_>> = MessageIter::new(&to_node)
        .map(|m| match m.unwrap().message {
            Message::Refresh(r) => r,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert!(parts.iter().all(|p| p.stream_id == 2 && p.name == "BIG"));
    assert_eq!(
        parts
            .iter()
            .map(|p| (p.clear_cache, p.complete))
            .collect::<Vec<_>>(),
        [(true, false), (false, true)]
    );
    let fields: Vec<i16> = parts
        .iter()
        .flat_map(|p| p.fields.iter().map(|f| f.0))
        .collect();
    assert_eq!(fields, [3, 28]);
    // An update as large: the item ends at the node, and the provider hears why.
    let mut u = Vec::new();
    begin_update(&mut u, domain::MARKET_PRICE, -6, 1, None, 0, false);
    let mut fl = FieldListWriter::begin(&mut u);
    big(&mut u, &mut fl);
    fl.end(&mut u);
    let (mut to_node, mut out) = (Vec::new(), Vec::new());
    s.on_client_message(&u, &mut to_node, &mut out);
    let said = node_messages(&to_node);
    assert!(
        said.len() == 1 && said[0].contains("stream_id: 2,") && said[0].contains("Closed"),
        "{said:?}"
    );
    let st = Msg::decode(&out[0]).unwrap();
    assert_eq!(
        (st.stream_id, st.state.unwrap().stream),
        (-6, stream::CLOSED)
    );
}

/// A Login request again on the login stream before the node accepted the first (a
/// reissue): it is not refused, which would tell the consumer its login is closed; the
/// login's refresh, when the node accepts it, answers both.
#[test]
fn a_login_reissue_before_the_login_is_accepted_waits_for_its_refresh() {
    let mut s = Session::new(Arc::new(SessionConfig::default()));
    let (mut to_node, mut out) = (Vec::new(), Vec::new());
    let login = testing::eta_login(0);
    s.on_client_message(&login, &mut to_node, &mut out);
    to_node.clear();
    s.on_client_message(&login, &mut to_node, &mut out);
    assert!(out.is_empty(), "{out:?}");
    assert!(to_node.is_empty() && !s.finished);
    deliver(&mut s, &welcome(), &mut out);
    assert_eq!(classes(&out), [(class::REFRESH, 1)]);
    assert_eq!(
        Msg::decode(&out[0]).unwrap().state.unwrap().stream,
        stream::OPEN
    );
}

/// A directory request again on an open directory stream that asks for no refresh
/// (RWF's `NO_REFRESH`) changes the stream and gets none; the stream goes on.
#[test]
fn a_directory_reissue_without_a_refresh_gets_none() {
    let (mut s, mut out) = logged_in();
    let mut to_node = Vec::new();
    request_directory(&mut s, &mut to_node, &mut out);
    out.clear();
    let key = MsgKey {
        filter: Some(3),
        ..MsgKey::default()
    };
    let mut b = Vec::new();
    let flags = request::STREAMING | request::NO_REFRESH;
    msg::put_request(&mut b, domain::SOURCE, 2, flags, &key, false);
    s.on_client_message(&b, &mut to_node, &mut out);
    assert!(out.is_empty(), "{:?}", classes(&out));
    deliver(
        &mut s,
        &directory(&[("FEED", ServiceState::Down)]),
        &mut out,
    );
    assert_eq!(classes(&out), [(class::UPDATE, 2)]);
}
