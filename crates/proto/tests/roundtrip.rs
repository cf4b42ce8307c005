//! Property tests for the wire format: every message type round-trips through
//! `Message::encode` and `MessageIter`, framing preserves message sequences however the
//! bytes are chunked, `FieldImage` behaves like a simple replace-or-append model, and
//! truncated or malformed input is rejected with an error rather than a panic.

use proptest::collection::vec;
use proptest::prelude::*;
use tickwire_proto::field::NANOS_PER_DAY;
use tickwire_proto::frame::MIN_MAX_FRAME;
use tickwire_proto::message::{write_readdressed, MAX_VIEW_FIDS, MESSAGE_HEADER_LEN};
use tickwire_proto::{
    Ack, DataState, Date, DecodeError, Dictionary, Directory, EncodeError, FieldImage, FieldList,
    FieldListWriter, FieldType, FrameReader, FrameWriter, Login, Message, MessageIter, MessageType,
    NakCode, Post, Real, Refresh, Replay, ReplayFrom, Request, Role, ServiceEntry, ServiceState,
    SlowConsumerPolicy, State, Status, StreamState, Time, Update, UpdateType, Value, View, Welcome,
    DEFAULT_MAX_FRAME, FRAME_HEADER_LEN,
};

// ---------------------------------------------------------------------------------------
// Owned models of values and messages (the wire types borrow their strings).
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum OVal {
    Blank,
    Int(i64),
    UInt(u64),
    Real(Real),
    Date(Date),
    Time(Time),
    Ascii(String),
    Utf8(String),
    Enum(u16),
    DateTime(Date, Time),
    Buffer(Vec<u8>),
}

impl OVal {
    fn value(&self) -> Value<'_> {
        match self {
            OVal::Blank => Value::Blank,
            OVal::Int(v) => Value::Int(*v),
            OVal::UInt(v) => Value::UInt(*v),
            OVal::Real(v) => Value::Real(*v),
            OVal::Date(v) => Value::Date(*v),
            OVal::Time(v) => Value::Time(*v),
            OVal::Ascii(s) => Value::Ascii(s),
            OVal::Utf8(s) => Value::Utf8(s),
            OVal::Enum(v) => Value::Enum(*v),
            OVal::DateTime(d, t) => Value::DateTime(*d, *t),
            OVal::Buffer(b) => Value::Buffer(b),
        }
    }

    fn encoded(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.value().encode(&mut out);
        out
    }
}

type Fields = Vec<(i16, OVal)>;

fn encode_fields(fields: &Fields) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = FieldListWriter::new(&mut out);
    for (fid, v) in fields {
        assert!(w.push(*fid, v.value()));
    }
    assert_eq!(w.finish() as usize, fields.len());
    out
}

#[derive(Debug, Clone)]
struct OState {
    stream: StreamState,
    data: DataState,
    code: u16,
    text: String,
}

impl OState {
    fn state(&self) -> State<'_> {
        State {
            stream: self.stream,
            data: self.data,
            code: self.code,
            text: &self.text,
        }
    }
}

#[derive(Debug, Clone)]
struct OService {
    name: String,
    state: ServiceState,
    interactive: bool,
    item_count: u32,
}

#[derive(Debug, Clone)]
enum OMsg {
    Login {
        version_min: u16,
        version_max: u16,
        role: Role,
        application: String,
        user: String,
        token: String,
        slow_consumer: Option<SlowConsumerPolicy>,
    },
    Welcome {
        version: u16,
        heartbeat_ms: u32,
        max_frame: u32,
        max_streams: u32,
        max_output_bytes: u32,
        node_name: String,
    },
    Directory(Vec<OService>),
    Request {
        stream_id: u32,
        streaming: bool,
        service: String,
        name: String,
        view: Option<Vec<i16>>,
        refresh: bool,
    },
    Refresh {
        stream_id: u32,
        seq: u32,
        complete: bool,
        solicited: bool,
        clear_cache: bool,
        state: OState,
        service: String,
        name: String,
        fields: Fields,
        encoded_fields: Vec<u8>,
    },
    Update {
        stream_id: u32,
        seq: u32,
        update_type: UpdateType,
        do_not_conflate: bool,
        conflation_count: u16,
        fields: Fields,
        encoded_fields: Vec<u8>,
    },
    Status {
        stream_id: u32,
        state: OState,
    },
    Close(u32),
    Ping(u64),
    Pong(u64),
    Post {
        stream_id: u32,
        post_id: u32,
        ack: bool,
        image: bool,
        redelivered: bool,
        service: String,
        name: String,
        fields: Fields,
        encoded_fields: Vec<u8>,
    },
    Ack {
        stream_id: u32,
        post_id: u32,
        nak: Option<NakCode>,
        text: String,
    },
    Replay {
        stream_id: u32,
        from: ReplayFrom,
        service: String,
        name: String,
    },
}

impl OMsg {
    fn message(&self) -> Message<'_> {
        match self {
            OMsg::Login {
                version_min,
                version_max,
                role,
                application,
                user,
                token,
                slow_consumer,
            } => Message::Login(Login {
                version_min: *version_min,
                version_max: *version_max,
                role: *role,
                application,
                user,
                token,
                slow_consumer: *slow_consumer,
            }),
            OMsg::Welcome {
                version,
                heartbeat_ms,
                max_frame,
                max_streams,
                max_output_bytes,
                node_name,
            } => Message::Welcome(Welcome {
                version: *version,
                heartbeat_ms: *heartbeat_ms,
                max_frame: *max_frame,
                max_streams: *max_streams,
                max_output_bytes: *max_output_bytes,
                node_name,
            }),
            OMsg::Directory(services) => Message::Directory(Directory {
                services: services
                    .iter()
                    .map(|s| ServiceEntry {
                        name: &s.name,
                        state: s.state,
                        interactive: s.interactive,
                        item_count: s.item_count,
                    })
                    .collect(),
            }),
            OMsg::Request {
                stream_id,
                streaming,
                service,
                name,
                view,
                refresh,
            } => Message::Request(Request {
                stream_id: *stream_id,
                streaming: *streaming,
                service,
                name,
                view: view.as_deref().map(View::Fids),
                refresh: *refresh,
            }),
            OMsg::Refresh {
                stream_id,
                seq,
                complete,
                solicited,
                clear_cache,
                state,
                service,
                name,
                encoded_fields,
                ..
            } => Message::Refresh(Refresh {
                stream_id: *stream_id,
                seq: *seq,
                complete: *complete,
                solicited: *solicited,
                clear_cache: *clear_cache,
                state: state.state(),
                service,
                name,
                fields: FieldList::decode(encoded_fields).expect("generated field list"),
            }),
            OMsg::Update {
                stream_id,
                seq,
                update_type,
                do_not_conflate,
                conflation_count,
                encoded_fields,
                ..
            } => Message::Update(Update {
                stream_id: *stream_id,
                seq: *seq,
                update_type: *update_type,
                do_not_conflate: *do_not_conflate,
                conflation_count: *conflation_count,
                fields: FieldList::decode(encoded_fields).expect("generated field list"),
            }),
            OMsg::Status { stream_id, state } => Message::Status(Status {
                stream_id: *stream_id,
                state: state.state(),
            }),
            OMsg::Close(id) => Message::Close { stream_id: *id },
            OMsg::Ping(v) => Message::Ping(*v),
            OMsg::Pong(v) => Message::Pong(*v),
            OMsg::Post {
                stream_id,
                post_id,
                ack,
                image,
                redelivered,
                service,
                name,
                encoded_fields,
                ..
            } => Message::Post(Post {
                stream_id: *stream_id,
                post_id: *post_id,
                ack: *ack,
                image: *image,
                redelivered: *redelivered,
                service,
                name,
                fields: FieldList::decode(encoded_fields).expect("generated field list"),
            }),
            OMsg::Ack {
                stream_id,
                post_id,
                nak,
                text,
            } => Message::Ack(Ack {
                stream_id: *stream_id,
                post_id: *post_id,
                nak: *nak,
                text,
            }),
            OMsg::Replay {
                stream_id,
                from,
                service,
                name,
            } => Message::Replay(Replay {
                stream_id: *stream_id,
                from: *from,
                service,
                name,
            }),
        }
    }

    fn fields(&self) -> Option<&Fields> {
        match self {
            OMsg::Refresh { fields, .. }
            | OMsg::Update { fields, .. }
            | OMsg::Post { fields, .. } => Some(fields),
            _ => None,
        }
    }

    fn is_stream_scoped(&self) -> bool {
        matches!(
            self,
            OMsg::Request { .. }
                | OMsg::Refresh { .. }
                | OMsg::Update { .. }
                | OMsg::Status { .. }
                | OMsg::Close(_)
                | OMsg::Post { .. }
                | OMsg::Ack { .. }
                | OMsg::Replay { .. }
        )
    }

    /// The stream id of a stream-scoped message, which `write_readdressed` rewrites.
    fn stream_id_mut(&mut self) -> Option<&mut u32> {
        match self {
            OMsg::Request { stream_id, .. }
            | OMsg::Refresh { stream_id, .. }
            | OMsg::Update { stream_id, .. }
            | OMsg::Status { stream_id, .. }
            | OMsg::Close(stream_id)
            | OMsg::Post { stream_id, .. }
            | OMsg::Ack { stream_id, .. }
            | OMsg::Replay { stream_id, .. } => Some(stream_id),
            _ => None,
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.message()
            .encode(&mut out)
            .expect("generated message encodes");
        out
    }
}

/// Equality of a message we built with one we decoded. Decoding yields
/// `View::Encoded` where we built `View::Fids`, so views are compared by their ids.
fn same_message(expected: &Message<'_>, got: &Message<'_>) -> bool {
    match (expected, got) {
        (Message::Request(a), Message::Request(b)) => {
            a.stream_id == b.stream_id
                && a.streaming == b.streaming
                && a.service == b.service
                && a.name == b.name
                && a.view.as_ref().map(View::fids) == b.view.as_ref().map(View::fids)
        }
        _ => expected == got,
    }
}

fn decoded_fields<'a>(msg: &Message<'a>) -> Option<Vec<(i16, Value<'a>)>> {
    match msg {
        Message::Refresh(r) => Some(r.fields.iter().collect()),
        Message::Update(u) => Some(u.fields.iter().collect()),
        Message::Post(p) => Some(p.fields.iter().collect()),
        _ => None,
    }
}

fn model_values(fields: &Fields) -> Vec<(i16, Value<'_>)> {
    fields.iter().map(|(f, v)| (*f, v.value())).collect()
}

// ---------------------------------------------------------------------------------------
// Strategies.
// ---------------------------------------------------------------------------------------

/// Days in a month, computed here independently of `Date::is_valid`.
fn days_in_month(year: u16, month: u8) -> u8 {
    match month {
        2 => {
            let y = year as u32;
            if (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400) {
                29
            } else {
                28
            }
        }
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn date() -> impl Strategy<Value = Date> {
    (
        prop_oneof![
            any::<u16>(),
            1900u16..2100,
            Just(0u16),
            Just(2000),
            Just(1900)
        ],
        1u8..=12,
        1u8..=31,
    )
        .prop_map(|(year, month, day)| Date {
            year,
            month,
            day: day.min(days_in_month(year, month)),
        })
}

fn time() -> impl Strategy<Value = Time> {
    prop_oneof![
        Just(0u64),
        Just(NANOS_PER_DAY - 1),
        0..NANOS_PER_DAY,
        0u64..1_000_000,
    ]
    .prop_map(|n| Time {
        nanos_since_midnight: n,
    })
}

fn i64_value() -> impl Strategy<Value = i64> {
    prop_oneof![
        any::<i64>(),
        -200i64..200,
        Just(i64::MIN),
        Just(i64::MAX),
        (0u32..63).prop_map(|s| 1i64 << s),
        (0u32..63).prop_map(|s| -(1i64 << s)),
    ]
}

fn u64_value() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        0u64..300,
        Just(u64::MAX),
        (0u32..64).prop_map(|s| 1u64 << s),
        (1u32..64).prop_map(|s| (1u64 << s) - 1),
    ]
}

fn ascii(max: usize) -> impl Strategy<Value = String> {
    vec(0u8..=127, 0..=max).prop_map(|b| String::from_utf8(b).expect("ASCII is UTF-8"))
}

fn unicode(max: usize) -> impl Strategy<Value = String> {
    vec(any::<char>(), 0..=max).prop_map(|c| c.into_iter().collect())
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![ascii(24), unicode(12)]
}

fn value() -> impl Strategy<Value = OVal> {
    prop_oneof![
        Just(OVal::Blank),
        i64_value().prop_map(OVal::Int),
        u64_value().prop_map(OVal::UInt),
        (i64_value(), any::<i8>()).prop_map(|(m, e)| OVal::Real(Real::new(m, e))),
        date().prop_map(OVal::Date),
        time().prop_map(OVal::Time),
        ascii(40).prop_map(OVal::Ascii),
        unicode(20).prop_map(OVal::Utf8),
        any::<u16>().prop_map(OVal::Enum),
        (date(), time()).prop_map(|(d, t)| OVal::DateTime(d, t)),
        vec(any::<u8>(), 0..=40).prop_map(OVal::Buffer),
    ]
}

fn fid() -> impl Strategy<Value = i16> {
    prop_oneof![any::<i16>(), -4i16..40]
}

fn fields(max: usize) -> impl Strategy<Value = Fields> {
    vec((fid(), value()), 0..=max)
}

fn state() -> impl Strategy<Value = OState> {
    (
        prop_oneof![
            Just(StreamState::Open),
            Just(StreamState::Closed),
            Just(StreamState::ClosedRecover)
        ],
        prop_oneof![Just(DataState::Ok), Just(DataState::Suspect)],
        any::<u16>(),
        text(),
    )
        .prop_map(|(stream, data, code, text)| OState {
            stream,
            data,
            code,
            text,
        })
}

/// Every value: the named ones and those a newer publisher may send (kept as unknown).
fn update_type() -> impl Strategy<Value = UpdateType> {
    any::<u8>().prop_map(UpdateType::from_u8)
}

fn view() -> impl Strategy<Value = Option<Vec<i16>>> {
    prop_oneof![
        2 => Just(None),
        3 => vec(any::<i16>(), 0..40).prop_map(Some),
        1 => vec(any::<i16>(), MAX_VIEW_FIDS..=MAX_VIEW_FIDS).prop_map(Some),
    ]
}

fn service() -> impl Strategy<Value = OService> {
    (
        text(),
        prop_oneof![Just(ServiceState::Down), Just(ServiceState::Up)],
        any::<bool>(),
        any::<u32>(),
    )
        .prop_map(|(name, state, interactive, item_count)| OService {
            name,
            state,
            interactive,
            item_count,
        })
}

fn refresh(fields: BoxedStrategy<Fields>) -> impl Strategy<Value = OMsg> {
    (
        any::<u32>(),
        any::<u32>(),
        any::<[bool; 3]>(),
        state(),
        text(),
        text(),
        fields,
    )
        .prop_map(
            |(stream_id, seq, [complete, solicited, clear_cache], state, service, name, fields)| {
                OMsg::Refresh {
                    stream_id,
                    seq,
                    complete,
                    solicited,
                    clear_cache,
                    state,
                    service,
                    name,
                    encoded_fields: encode_fields(&fields),
                    fields,
                }
            },
        )
}

fn update(fields: BoxedStrategy<Fields>) -> impl Strategy<Value = OMsg> {
    (
        any::<u32>(),
        any::<u32>(),
        update_type(),
        any::<bool>(),
        any::<u16>(),
        fields,
    )
        .prop_map(
            |(stream_id, seq, update_type, do_not_conflate, conflation_count, fields)| {
                OMsg::Update {
                    stream_id,
                    seq,
                    update_type,
                    do_not_conflate,
                    conflation_count,
                    encoded_fields: encode_fields(&fields),
                    fields,
                }
            },
        )
}

/// Any message of any type, of modest size (at most a few kilobytes).
fn message() -> impl Strategy<Value = OMsg> {
    prop_oneof![
        (
            any::<u16>(),
            any::<u16>(),
            any::<bool>(),
            text(),
            text(),
            text(),
            prop_oneof![
                Just(None),
                Just(Some(SlowConsumerPolicy::Conflate)),
                Just(Some(SlowConsumerPolicy::Disconnect))
            ]
        )
            .prop_map(
                |(version_min, version_max, publisher, application, user, token, slow_consumer)| {
                    OMsg::Login {
                        version_min,
                        version_max,
                        role: if publisher {
                            Role::Publisher
                        } else {
                            Role::Subscriber
                        },
                        application,
                        user,
                        token,
                        slow_consumer,
                    }
                }
            ),
        (
            any::<u16>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            text()
        )
            .prop_map(
                |(version, heartbeat_ms, max_frame, max_streams, max_output_bytes, node_name)| {
                    OMsg::Welcome {
                        version,
                        heartbeat_ms,
                        max_frame,
                        max_streams,
                        max_output_bytes,
                        node_name,
                    }
                }
            ),
        vec(service(), 0..8).prop_map(OMsg::Directory),
        (
            any::<u32>(),
            any::<bool>(),
            text(),
            text(),
            view(),
            any::<bool>()
        )
            .prop_map(|(stream_id, streaming, service, name, view, refresh)| {
                OMsg::Request {
                    stream_id,
                    streaming,
                    service,
                    name,
                    view,
                    refresh,
                }
            }),
        refresh(fields(24).boxed()),
        update(fields(24).boxed()),
        (any::<u32>(), state()).prop_map(|(stream_id, state)| OMsg::Status { stream_id, state }),
        any::<u32>().prop_map(OMsg::Close),
        any::<u64>().prop_map(OMsg::Ping),
        any::<u64>().prop_map(OMsg::Pong),
        (
            any::<u32>(),
            any::<u32>(),
            any::<[bool; 3]>(),
            text(),
            text(),
            fields(24)
        )
            .prop_map(
                |(stream_id, post_id, [ack, image, redelivered], service, name, fields)| {
                    OMsg::Post {
                        stream_id,
                        post_id,
                        ack,
                        image,
                        redelivered,
                        service,
                        name,
                        encoded_fields: encode_fields(&fields),
                        fields,
                    }
                }
            ),
        (
            any::<u32>(),
            prop_oneof![
                any::<u32>().prop_map(ReplayFrom::Seq),
                any::<u64>().prop_map(ReplayFrom::Time)
            ],
            text(),
            text()
        )
            .prop_map(|(stream_id, from, service, name)| OMsg::Replay {
                stream_id,
                from,
                service,
                name,
            }),
        (any::<u32>(), any::<u32>(), nak_code(), text()).prop_map(
            |(stream_id, post_id, nak, text)| OMsg::Ack {
                stream_id,
                post_id,
                nak,
                text,
            }
        ),
    ]
}

fn nak_code() -> impl Strategy<Value = Option<NakCode>> {
    prop_oneof![
        Just(None),
        // Every non-zero code, named or kept as unknown.
        (1u8..=255).prop_map(NakCode::of_ack),
    ]
}

/// Mostly ordinary messages, some of them tens of kilobytes, so that a stream of them
/// overflows even the smallest maximum frame.
fn message_maybe_bulky() -> impl Strategy<Value = OMsg> {
    let bulky_fields = vec((fid(), ascii(15_000).prop_map(OVal::Ascii)), 1..=4).boxed();
    prop_oneof![
        8 => message(),
        1 => update(bulky_fields.clone()),
        1 => refresh(bulky_fields),
    ]
}

fn stream_message() -> impl Strategy<Value = OMsg> {
    message().prop_filter("stream-scoped", OMsg::is_stream_scoped)
}

// ---------------------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------------------

/// The messages encoded one after another, as a frame's payload holds them: what the
/// properties that read a packed payload back start from.
fn packed(msgs: &[OMsg]) -> Vec<u8> {
    let mut payload = Vec::new();
    for m in msgs {
        m.message().encode(&mut payload).unwrap();
    }
    payload
}

/// Splits a frame stream into payloads, checking every length prefix.
fn split_frames(mut bytes: &[u8], max: usize) -> Vec<&[u8]> {
    let mut frames = Vec::new();
    while !bytes.is_empty() {
        assert!(bytes.len() >= FRAME_HEADER_LEN);
        let len = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
        assert!(len > 0 && len <= max, "frame of {len} bytes, max {max}");
        frames.push(&bytes[FRAME_HEADER_LEN..FRAME_HEADER_LEN + len]);
        bytes = &bytes[FRAME_HEADER_LEN + len..];
    }
    frames
}

/// Feeds `bytes` to a reader in chunks of the given sizes (cycled), alternating the
/// `extend` and `spare`/`filled` ways of filling it, and returns every message's encoded
/// bytes in order.
fn read_in_chunks(bytes: &[u8], max: usize, chunks: &[usize]) -> Vec<Vec<u8>> {
    let mut reader = FrameReader::new(max);
    let mut got = Vec::new();
    let mut pos = 0;
    let mut i = 0;
    while pos < bytes.len() {
        let n = chunks[i % chunks.len()].min(bytes.len() - pos);
        let chunk = &bytes[pos..pos + n];
        if i % 2 == 0 {
            reader.extend(chunk);
        } else {
            let spare = reader.spare(n);
            assert!(spare.len() >= n);
            spare[..n].copy_from_slice(chunk);
            reader.filled(n);
        }
        pos += n;
        i += 1;
        while let Some(frame) = reader.next_frame().expect("valid frame stream") {
            assert!(!frame.is_empty() && frame.len() <= max);
            for raw in MessageIter::new(frame) {
                got.push(raw.expect("valid message").encoded.to_vec());
            }
        }
    }
    assert_eq!(reader.buffered(), 0);
    assert_eq!(reader.next_frame(), Ok(None));
    got
}

fn check_round_trip(m: &OMsg) -> Result<(), TestCaseError> {
    let msg = m.message();
    // Encoding appends: what is already in the buffer stays.
    let mut out = vec![0xA5, 0x5A];
    msg.encode(&mut out).unwrap();
    prop_assert_eq!(&out[..2], &[0xA5, 0x5A]);
    let bytes = &out[2..];
    prop_assert_eq!(bytes[0], msg.message_type() as u8);
    prop_assert_eq!(
        u16::from_be_bytes([bytes[1], bytes[2]]) as usize,
        bytes.len() - MESSAGE_HEADER_LEN
    );

    let mut it = MessageIter::new(bytes);
    let raw = it.next().expect("one message").expect("decodes");
    prop_assert!(it.next().is_none());
    prop_assert_eq!(raw.encoded, bytes);
    prop_assert!(
        same_message(&msg, &raw.message),
        "sent {:?}\ngot {:?}",
        msg,
        raw.message
    );
    prop_assert_eq!(raw.message.message_type(), msg.message_type());
    if let Some(model) = m.fields() {
        prop_assert_eq!(decoded_fields(&raw.message).unwrap(), model_values(model));
    }
    if let (OMsg::Request { view, .. }, Message::Request(r)) = (m, &raw.message) {
        prop_assert_eq!(view.clone(), r.view.as_ref().map(View::fids));
        if let Some(View::Encoded(list)) = &r.view {
            prop_assert_eq!(list.len(), view.as_ref().unwrap().len());
        }
    }

    // Decoding the body directly gives the same, and re-encoding the decoded message
    // reproduces the bytes exactly.
    let direct = Message::decode_body(bytes[0], &bytes[MESSAGE_HEADER_LEN..]).unwrap();
    prop_assert_eq!(&direct, &raw.message);
    let mut again = Vec::new();
    raw.message.encode(&mut again).unwrap();
    prop_assert_eq!(&again[..], bytes);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Properties.
// ---------------------------------------------------------------------------------------

proptest! {
    #[test]
    fn every_message_round_trips(m in message()) {
        check_round_trip(&m)?;
    }

    /// Bytes decoded in full once read the same when their field lists are not walked
    /// again (`MessageIter::already_checked`, for in-process forwarding).
    #[test]
    fn checked_messages_read_the_same_without_walking_their_fields(msgs in vec(message_maybe_bulky(), 0..20)) {
        let payload = packed(&msgs);
        let full: Vec<_> = MessageIter::new(&payload).map(|r| r.unwrap().message).collect();
        let again: Vec<_> = MessageIter::already_checked(&payload)
            .map(|r| r.unwrap().message)
            .collect();
        prop_assert_eq!(full, again);
    }

    #[test]
    fn bulky_messages_round_trip(m in message_maybe_bulky()) {
        check_round_trip(&m)?;
    }

    #[test]
    fn packed_messages_round_trip(msgs in vec(message(), 0..20)) {
        let payload = packed(&msgs);
        let mut n = 0;
        let mut offset = 0;
        for (raw, m) in MessageIter::new(&payload).zip(&msgs) {
            let raw = raw.unwrap();
            prop_assert!(same_message(&m.message(), &raw.message));
            prop_assert_eq!(raw.encoded, &m.encode()[..]);
            prop_assert_eq!(raw.encoded, &payload[offset..offset + raw.encoded.len()]);
            offset += raw.encoded.len();
            n += 1;
        }
        prop_assert_eq!(n, msgs.len());
        prop_assert_eq!(offset, payload.len());
    }

    #[test]
    fn field_lists_round_trip(model in fields(64)) {
        let bytes = encode_fields(&model);
        let list = FieldList::decode(&bytes).unwrap();
        prop_assert_eq!(list.len(), model.len());
        prop_assert_eq!(list.is_empty(), model.is_empty());
        prop_assert_eq!(list.as_bytes(), &bytes[..]);
        prop_assert_eq!(list.iter().collect::<Vec<_>>(), model_values(&model));
        for ((fid, raw), (mfid, mval)) in list.raw_iter().zip(&model) {
            prop_assert_eq!(fid, *mfid);
            prop_assert_eq!(raw, &mval.encoded()[..]);
            prop_assert_eq!(raw[0], mval.value().field_type() as u8);
        }
        prop_assert_eq!(list.raw_iter().count(), model.len());
        for (fid, v) in &model {
            // `get` finds the first field with the id.
            let first = model.iter().find(|(f, _)| f == fid).map(|(_, v)| v.value());
            prop_assert_eq!(list.get(*fid), first);
            prop_assert!(FieldType::from_tag(v.value().field_type() as u8).is_some());
        }
        // Every strict prefix and any trailing byte is refused.
        for k in 0..bytes.len() {
            prop_assert!(FieldList::decode(&bytes[..k]).is_err());
        }
        let mut longer = bytes.clone();
        longer.push(0);
        let is_trailing = matches!(
            FieldList::decode(&longer),
            Err(DecodeError::TrailingBytes { .. })
        );
        prop_assert!(is_trailing);
    }

    #[test]
    fn frames_carry_message_sequences(
        msgs in vec(message_maybe_bulky(), 0..40),
        small in any::<bool>(),
        encoded_half in any::<bool>(),
        consume_at in any::<prop::sample::Index>(),
        chunks in vec(1usize..3000, 1..16),
    ) {
        let max = if small { MIN_MAX_FRAME } else { DEFAULT_MAX_FRAME };
        let mut w = FrameWriter::new(max);
        prop_assert!(w.is_empty());
        let encoded: Vec<Vec<u8>> = msgs.iter().map(OMsg::encode).collect();
        // Part way through, hand what is pending to the "socket" and consume it, as a
        // connection does.
        let split = if msgs.is_empty() { 0 } else { consume_at.index(msgs.len() + 1) };
        let mut stream = Vec::new();
        for (i, (m, e)) in msgs.iter().zip(&encoded).enumerate() {
            if i == split {
                let pending = w.sealed_bytes().to_vec();
                prop_assert_eq!(pending.len(), w.pending_len());
                stream.extend_from_slice(&pending);
                w.consume(pending.len());
                prop_assert!(w.is_empty());
            }
            if encoded_half && i % 2 == 1 {
                w.push_encoded(e);
            } else {
                w.push(&m.message()).unwrap();
            }
        }
        let tail = w.sealed_bytes().to_vec();
        prop_assert_eq!(tail.len(), w.pending_len());
        stream.extend_from_slice(&tail);
        // Sealing again changes nothing.
        prop_assert_eq!(w.sealed_bytes(), &tail[..]);

        // The frames are well formed and hold exactly the messages, in order.
        let mut from_frames = Vec::new();
        for frame in split_frames(&stream, max) {
            for raw in MessageIter::new(frame) {
                from_frames.push(raw.unwrap().encoded.to_vec());
            }
        }
        prop_assert_eq!(&from_frames, &encoded);

        // A reader fed the stream in arbitrary chunks sees the same sequence.
        let got = read_in_chunks(&stream, max, &chunks);
        prop_assert_eq!(&got, &encoded);
        for (bytes, m) in got.iter().zip(&msgs) {
            let raw = MessageIter::new(bytes).next().unwrap().unwrap();
            prop_assert!(same_message(&m.message(), &raw.message));
        }

        let mut all = Vec::new();
        w.take_all(&mut all);
        prop_assert!(w.is_empty());
    }

    /// Without interruptions, the writer starts a new frame only when the next message
    /// does not fit in the open one.
    #[test]
    fn frames_are_packed_tightly(msgs in vec(message_maybe_bulky(), 1..40)) {
        let max = MIN_MAX_FRAME;
        let mut w = FrameWriter::new(max);
        for m in &msgs {
            w.push(&m.message()).unwrap();
        }
        let stream = w.sealed_bytes().to_vec();
        let frames = split_frames(&stream, max);
        for pair in frames.windows(2) {
            let first_next = MessageIter::new(pair[1]).next().unwrap().unwrap().encoded.len();
            prop_assert!(pair[0].len() + first_next > max);
        }
        let total: usize = msgs.iter().map(|m| m.encode().len()).sum();
        prop_assert_eq!(stream.len(), total + frames.len() * FRAME_HEADER_LEN);
    }

    #[test]
    fn image_matches_replace_or_append_model(ops in vec(image_op(), 0..30)) {
        let mut img = FieldImage::new();
        let mut model: Fields = Vec::new();
        for op in &ops {
            match op {
                ImageOp::Apply(list) => {
                    let bytes = encode_fields(list);
                    img.apply(FieldList::decode(&bytes).unwrap());
                    for (fid, v) in list {
                        model_set(&mut model, *fid, v.clone());
                    }
                }
                ImageOp::Set(fid, v) => {
                    img.set(*fid, v.value());
                    model_set(&mut model, *fid, v.clone());
                }
                ImageOp::Clear => {
                    img.clear();
                    model.clear();
                }
            }
            check_image(&img, &model)?;
        }
    }

    #[test]
    fn image_view_keeps_image_order(
        list in vec((-4i16..12, value()), 0..30),
        // FieldImage::write wants a sorted view (as the node keeps them).
        view in vec(-6i16..14, 0..10).prop_map(|mut v| { v.sort_unstable(); v.dedup(); v }),
    ) {
        let mut img = FieldImage::new();
        let bytes = encode_fields(&list);
        img.apply(FieldList::decode(&bytes).unwrap());
        let mut model = Vec::new();
        for (fid, v) in &list {
            model_set(&mut model, *fid, v.clone());
        }
        let mut out = vec![7u8];
        let n = img.write(&mut out, Some(&view));
        prop_assert_eq!(out[0], 7);
        let expected: Vec<_> = model
            .iter()
            .filter(|(f, _)| view.contains(f))
            .map(|(f, v)| (*f, v.value()))
            .collect();
        prop_assert_eq!(n as usize, expected.len());
        let written = FieldList::decode(&out[1..]).unwrap();
        prop_assert_eq!(written.iter().collect::<Vec<_>>(), expected);
    }

    #[test]
    fn readdressing_changes_only_the_stream_id(m in stream_message(), new_id in any::<u32>()) {
        let encoded = m.encode();
        let mut out = vec![1, 2, 3];
        write_readdressed(&mut out, &encoded, new_id);
        prop_assert_eq!(&out[..3], &[1, 2, 3]);
        let out = &out[3..];
        prop_assert_eq!(out.len(), encoded.len());
        prop_assert_eq!(&out[..MESSAGE_HEADER_LEN], &encoded[..MESSAGE_HEADER_LEN]);
        prop_assert_eq!(&out[MESSAGE_HEADER_LEN..MESSAGE_HEADER_LEN + 4], &new_id.to_be_bytes());
        prop_assert_eq!(&out[MESSAGE_HEADER_LEN + 4..], &encoded[MESSAGE_HEADER_LEN + 4..]);

        let mut expected = m.clone();
        *expected.stream_id_mut().unwrap() = new_id;
        let raw = MessageIter::new(out).next().unwrap().unwrap();
        prop_assert!(same_message(&expected.message(), &raw.message));
        prop_assert_eq!(&expected.encode()[..], out);
    }
}

proptest! {
    // Quadratic in the message size: fewer cases.
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn strict_prefixes_and_trailing_bytes_are_errors(m in message()) {
        let encoded = m.encode();
        let ty = encoded[0];
        let body = &encoded[MESSAGE_HEADER_LEN..];
        for k in 0..body.len() {
            prop_assert!(
                Message::decode_body(ty, &body[..k]).is_err(),
                "prefix of {} of {} bytes decoded", k, body.len()
            );
        }
        let mut longer = body.to_vec();
        longer.push(0);
        let is_trailing = matches!(
            Message::decode_body(ty, &longer),
            Err(DecodeError::TrailingBytes { .. })
        );
        prop_assert!(is_trailing);
        // Truncating the whole encoding (header included) makes the iterator fail once
        // and then stop.
        for k in 1..encoded.len() {
            let mut it = MessageIter::new(&encoded[..k]);
            prop_assert!(it.next().unwrap().is_err());
            prop_assert!(it.next().is_none());
        }
    }

    /// Changing one byte either breaks decoding or yields a message that re-encodes to
    /// exactly the changed bytes (there is one encoding per message).
    #[test]
    fn mutated_messages_fail_or_re_encode_exactly(
        m in message(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut encoded = m.encode();
        let i = MESSAGE_HEADER_LEN + at.index(encoded.len() - MESSAGE_HEADER_LEN);
        encoded[i] = byte;
        if let Ok(msg) = Message::decode_body(encoded[0], &encoded[MESSAGE_HEADER_LEN..]) {
            let mut again = Vec::new();
            msg.encode(&mut again).unwrap();
            // Field lists are carried as bytes, so even a non-minimal varint inside one
            // survives re-encoding.
            prop_assert_eq!(again, encoded);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(ty in any::<u8>(), body in vec(any::<u8>(), 0..200)) {
        let _ = Message::decode_body(ty, &body);
        let _ = FieldList::decode(&body);
        for raw in MessageIter::new(&body) {
            let _ = raw.map(|r| r.message.message_type());
        }
        let mut reader = FrameReader::new(MIN_MAX_FRAME);
        reader.extend(&body);
        while let Ok(Some(frame)) = reader.next_frame() {
            for raw in MessageIter::new(frame) {
                if raw.is_err() {
                    break;
                }
            }
        }
    }

    #[test]
    fn oversized_frame_lengths_are_errors(
        len in prop_oneof![
            (DEFAULT_MAX_FRAME as u32 + 1)..=u32::MAX,
            Just(DEFAULT_MAX_FRAME as u32 + 1),
            Just(u32::MAX),
        ],
        tail in vec(any::<u8>(), 0..64),
    ) {
        let mut reader = FrameReader::new(DEFAULT_MAX_FRAME);
        reader.extend(&len.to_be_bytes());
        reader.extend(&tail);
        prop_assert_eq!(
            reader.next_frame(),
            Err(DecodeError::FrameTooLarge { len: len as usize, max: DEFAULT_MAX_FRAME })
        );
    }

    #[test]
    fn dictionary_text_round_trips(
        defs in prop::collection::btree_map(any::<i16>(), (0usize..9, "[A-Z][A-Z0-9_]{0,10}"), 0..40),
    ) {
        let types = [
            FieldType::Int, FieldType::UInt, FieldType::Real, FieldType::Date,
            FieldType::Time, FieldType::Ascii, FieldType::Utf8, FieldType::Enum,
            FieldType::Real,
        ];
        // Names must be unique: suffix the fid.
        let mut text = String::from("# generated\n\n");
        for (fid, (t, name)) in &defs {
            text.push_str(&format!(
                "{name}_{fid}  {fid}\t{}  ! comment\n",
                types[*t].name().to_lowercase()
            ));
        }
        let d = Dictionary::parse(&text).unwrap();
        prop_assert_eq!(d.len(), defs.len());
        for (fid, (t, name)) in &defs {
            let full = format!("{name}_{fid}");
            let def = d.get(*fid).unwrap();
            prop_assert_eq!(&def.name, &full);
            prop_assert_eq!(def.field_type, types[*t]);
            prop_assert_eq!(d.fid(&full), Some(*fid));
        }
        let ids: Vec<i16> = d.fields().iter().map(|f| f.fid).collect();
        prop_assert_eq!(ids, defs.keys().copied().collect::<Vec<_>>());
    }
}

#[derive(Debug, Clone)]
enum ImageOp {
    Apply(Fields),
    Set(i16, OVal),
    Clear,
}

fn image_op() -> impl Strategy<Value = ImageOp> {
    // A small set of field ids so lists overwrite each other often.
    let fid = -3i16..10;
    prop_oneof![
        8 => vec((fid.clone(), value()), 0..12).prop_map(ImageOp::Apply),
        3 => (fid, value()).prop_map(|(f, v)| ImageOp::Set(f, v)),
        1 => Just(ImageOp::Clear),
    ]
}

fn model_set(model: &mut Fields, fid: i16, v: OVal) {
    match model.iter_mut().find(|(f, _)| *f == fid) {
        Some(slot) => slot.1 = v,
        None => model.push((fid, v)),
    }
}

fn check_image(img: &FieldImage, model: &Fields) -> Result<(), TestCaseError> {
    prop_assert_eq!(img.len(), model.len());
    prop_assert_eq!(img.is_empty(), model.is_empty());
    let bytes = img.to_field_list_bytes();
    prop_assert_eq!(&bytes, &encode_fields(model));
    let list = FieldList::decode(&bytes).unwrap();
    prop_assert_eq!(list.iter().collect::<Vec<_>>(), model_values(model));
    for (fid, v) in model {
        prop_assert_eq!(img.get_raw(*fid), Some(&v.encoded()[..]));
    }
    prop_assert_eq!(img.get_raw(i16::MIN), None);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Fixed cases.
// ---------------------------------------------------------------------------------------

#[test]
fn frame_length_zero_is_an_error() {
    let mut reader = FrameReader::new(DEFAULT_MAX_FRAME);
    reader.extend(&[0, 0, 0, 0, 9, 0, 8]);
    assert_eq!(reader.next_frame(), Err(DecodeError::EmptyFrame));
}

#[test]
fn frame_length_limits() {
    // Exactly the maximum is accepted (and waits for its bytes); one more is refused.
    let max = 100;
    let mut reader = FrameReader::new(max);
    reader.extend(&(max as u32).to_be_bytes());
    assert_eq!(reader.next_frame(), Ok(None));
    reader.extend(&vec![0u8; max - 1]);
    assert_eq!(reader.next_frame(), Ok(None));
    reader.extend(&[0]);
    assert_eq!(reader.next_frame().unwrap().map(<[u8]>::len), Some(max));
    assert_eq!(reader.next_frame(), Ok(None));

    let mut reader = FrameReader::new(max);
    reader.extend(&(max as u32 + 1).to_be_bytes());
    assert_eq!(
        reader.next_frame(),
        Err(DecodeError::FrameTooLarge { len: max + 1, max })
    );

    // A header arriving one byte at a time is not judged until it is complete.
    let mut reader = FrameReader::new(max);
    for b in [0u8, 0, 0] {
        reader.extend(&[b]);
        assert_eq!(reader.next_frame(), Ok(None));
    }
    reader.extend(&[0]);
    assert_eq!(reader.next_frame(), Err(DecodeError::EmptyFrame));
}

#[test]
fn writer_never_goes_below_the_minimum_frame() {
    let mut w = FrameWriter::new(10);
    let token = "x".repeat(60_000);
    let login = Message::Login(Login {
        version_min: 1,
        version_max: 1,
        role: Role::Subscriber,
        application: "a",
        user: "u",
        token: &token,
        slow_consumer: None,
    });
    w.push(&login).unwrap();
    w.push(&login).unwrap();
    let bytes = w.sealed_bytes().to_vec();
    let frames = split_frames(&bytes, MIN_MAX_FRAME);
    assert_eq!(frames.len(), 2);
    let got = read_in_chunks(&bytes, MIN_MAX_FRAME, &[4096, 1, 17]);
    assert_eq!(got.len(), 2);
}

#[test]
fn too_long_values_are_encode_errors_and_leave_the_buffer() {
    let long = "y".repeat(70_000);
    let mut out = vec![42u8];
    let login = Message::Login(Login {
        version_min: 1,
        version_max: 1,
        role: Role::Publisher,
        application: "app",
        user: "user",
        token: &long,
        slow_consumer: None,
    });
    assert!(matches!(
        login.encode(&mut out),
        Err(EncodeError::TooLong { .. })
    ));
    assert_eq!(out, [42]);

    // Each string fits its u16 prefix but together they overflow the body.
    let part = "z".repeat(30_000);
    let login = Message::Login(Login {
        version_min: 1,
        version_max: 1,
        role: Role::Publisher,
        application: &part,
        user: &part,
        token: &part,
        slow_consumer: None,
    });
    assert_eq!(
        login.encode(&mut out),
        Err(EncodeError::TooLong {
            what: "message body",
            len: 6 + 3 * (2 + 30_000),
            max: u16::MAX as usize
        })
    );
    assert_eq!(out, [42]);

    let fids = vec![1i16; MAX_VIEW_FIDS + 1];
    let req = Message::Request(Request {
        stream_id: 1,
        streaming: true,
        service: "S",
        name: "N",
        view: Some(View::Fids(&fids)),
        refresh: true,
    });
    assert!(req.encode(&mut out).is_err());
    assert_eq!(out, [42]);

    // A failed push leaves the frame writer with nothing to send.
    let mut w = FrameWriter::new(DEFAULT_MAX_FRAME);
    assert!(w.push(&req).is_err());
    assert!(w.sealed_bytes().is_empty());
}

#[test]
fn invalid_values_are_refused() {
    fn fl(fid: i16, encoded_value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = FieldListWriter::new(&mut out);
        w.push_raw(fid, encoded_value);
        w.finish();
        out
    }
    // 29 February of a non-leap year, month 13, day 0.
    for (y, m, d) in [
        (1900u16, 2u8, 29u8),
        (2023, 2, 29),
        (2024, 13, 1),
        (2024, 1, 0),
    ] {
        let mut v = vec![FieldType::Date as u8];
        v.extend_from_slice(&y.to_be_bytes());
        v.extend_from_slice(&[m, d]);
        assert!(matches!(
            FieldList::decode(&fl(5, &v)),
            Err(DecodeError::InvalidDate { fid: 5, .. })
        ));
    }
    // Leap days that exist.
    for y in [2000u16, 2024, 0] {
        let mut v = vec![FieldType::Date as u8];
        v.extend_from_slice(&y.to_be_bytes());
        v.extend_from_slice(&[2, 29]);
        assert!(FieldList::decode(&fl(5, &v)).is_ok(), "{y}-02-29");
    }
    // A time of 24:00:00 or later.
    let mut v = Vec::new();
    Value::Time(Time {
        nanos_since_midnight: NANOS_PER_DAY,
    })
    .encode(&mut v);
    assert!(matches!(
        FieldList::decode(&fl(7, &v)),
        Err(DecodeError::InvalidTime { fid: 7, .. })
    ));
    // Non-ASCII bytes in an ASCII field, invalid UTF-8 in a UTF-8 one.
    assert_eq!(
        FieldList::decode(&fl(3, &[FieldType::Ascii as u8, 2, 0xc3, 0xa9])),
        Err(DecodeError::NonAscii(3))
    );
    assert!(matches!(
        FieldList::decode(&fl(3, &[FieldType::Utf8 as u8, 1, 0xff])),
        Err(DecodeError::InvalidUtf8(_))
    ));
    // An unknown type tag.
    assert_eq!(
        FieldList::decode(&fl(9, &[11])),
        Err(DecodeError::UnknownFieldType { fid: 9, tag: 11 })
    );
    // A date and time with an impossible date, a buffer longer than the list.
    assert!(matches!(
        FieldList::decode(&fl(5, &[FieldType::DateTime as u8, 0x07, 0xE9, 2, 30, 0])),
        Err(DecodeError::InvalidDate { fid: 5, .. })
    ));
    assert!(FieldList::decode(&fl(5, &[FieldType::Buffer as u8, 3, 1])).is_err());
    // Unknown message type, flags and enumerations.
    assert_eq!(
        Message::decode_body(0, &[]),
        Err(DecodeError::UnknownMessageType(0))
    );
    assert_eq!(
        Message::decode_body(15, &[]),
        Err(DecodeError::UnknownMessageType(15))
    );
    // An Ack with a nak code this build does not name is kept, not refused: a newer
    // publisher's refusal reaches the poster with its code unchanged.
    let ack = Message::decode_body(MessageType::Ack as u8, &[0, 0, 0, 1, 0, 0, 0, 2, 8, 0, 0]);
    match ack {
        Ok(Message::Ack(a)) => {
            assert_eq!(a.nak, Some(NakCode::Unknown(8)));
            assert_eq!(a.nak.map(NakCode::to_u8), Some(8));
            assert_eq!(a.nak.map(NakCode::name), Some("None"));
        }
        other => panic!("{other:?}"),
    }
    // Likewise an update type: 7 is the RDM's correction.
    let mut update = vec![0, 0, 0, 1, 0, 0, 0, 9, 7, 0, 0, 1];
    update.extend_from_slice(&tickwire_proto::encode_field_list([]));
    match Message::decode_body(MessageType::Update as u8, &update) {
        Ok(Message::Update(u)) => {
            assert_eq!(u.update_type, UpdateType::Unknown(7));
            assert_eq!(u.update_type.to_u8(), 7);
        }
        other => panic!("{other:?}"),
    }
    // A post with a flag bit nobody defined.
    assert_eq!(
        Message::decode_body(
            MessageType::Post as u8,
            &[0, 0, 0, 1, 0, 0, 0, 2, 8, 0, 0, 0, 0, 0, 0]
        ),
        Err(DecodeError::InvalidValue {
            what: "post flags",
            value: 8
        })
    );
    let close = Message::Close { stream_id: 1 };
    let mut enc = Vec::new();
    close.encode(&mut enc).unwrap();
    assert_eq!(enc, [MessageType::Close as u8, 0, 4, 0, 0, 0, 1]);
    let req = Message::Request(Request::streaming(1, "", ""));
    let mut enc = Vec::new();
    req.encode(&mut enc).unwrap();
    enc[MESSAGE_HEADER_LEN + 4] |= 0x80;
    assert!(matches!(
        Message::decode_body(enc[0], &enc[MESSAGE_HEADER_LEN..]),
        Err(DecodeError::InvalidValue {
            what: "request flags",
            ..
        })
    ));
}

/// A login printed with `{:?}` (into a log, a panic message) shows its secret's length,
/// never the secret.
#[test]
fn a_logins_debug_never_shows_its_secret() {
    let login = tickwire_proto::Login::new(
        tickwire_proto::Role::Subscriber,
        "app",
        "alice",
        "s3cret-token",
    );
    for shown in [
        format!("{login:?}"),
        format!("{:?}", tickwire_proto::Message::Login(login.clone())),
    ] {
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.contains("alice") && shown.contains("<12 bytes>"),
            "{shown}"
        );
    }
}
