//! One WebSocket connection's JSON session: client JSON in, the node's messages out, and
//! back.
//!
//! The client speaks `tr_json2`: a Login (domain `Login`), item requests (MarketPrice:
//! single, batch with `Key.Name` an array, view, snapshot), Close (one ID or an array),
//! Ping/Pong. The session keeps the client's IDs (any integer) apart from the node's
//! stream ids (1, 2, 3 ... chosen here), turns each request into the node's Request, and
//! each of the node's messages for this connection into JSON: the Welcome becomes the
//! login Refresh, refreshes, updates and statuses keep their meaning, a heartbeat Ping
//! becomes `{"Type":"Ping"}`. Every frame sent is a JSON array of messages.
//!
//! Updates are the bulk: [`UpdateCache`] lets every session with the same item and view
//! share one encoding of an update (all but its `ID`).

mod directory;
mod from_node;
mod items;
mod json;
mod login;
mod post;

use json::{update_type_name, write_error, write_fields, write_key, Bytes};
use rustc_hash::FxHashMap;
use serde_json::Value as Json;
use std::fmt::Write as _;
use std::sync::Arc;
use tickwire_proto::{code, Dictionary, ServiceState, Update};

/// Settings shared by every session of a node.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Seconds without traffic after which the node drops a client (3 heartbeats);
    /// announced in the login Refresh.
    pub ping_timeout_s: u32,
    /// Largest client message accepted, in bytes; announced in the login Refresh.
    pub max_msg_size: usize,
    /// Service used when a request names none; `None`: the first in the directory
    /// other than `node_service`.
    pub default_service: Option<String>,
    /// The service of the node's own figures, never a default.
    pub node_service: Option<String>,
    /// Field names and types, for the JSON's field names and values.
    pub dictionary: Arc<Dictionary>,
}

impl Default for SessionConfig {
    /// Ordinary settings: 15 s without traffic (three 5 s heartbeats, the node's
    /// default), messages of up to 61,440 bytes, no default service, no node service
    /// (a node names its own), the MarketPrice dictionary.
    fn default() -> Self {
        SessionConfig {
            ping_timeout_s: 15,
            max_msg_size: 61_440,
            default_service: None,
            node_service: None,
            dictionary: Arc::new(Dictionary::market_price()),
        }
    }
}

/// Encoded update tails, shared by the sessions during one turn of the event loop.
pub struct UpdateCache {
    /// Off, every session encodes its own updates: only to measure what sharing saves
    /// (`websocket.share_encoding`).
    share: bool,
    tails: FxHashMap<u64, SharedTail>,
    /// Scratch for the key being looked up.
    key: Vec<u8>,
    /// Updates taken from another session's encoding.
    pub hits: u64,
    /// Updates encoded.
    pub misses: u64,
}

/// One update's JSON after its `ID`, and everything that made it (to tell it apart from
/// another with the same hash).
struct SharedTail {
    key: Vec<u8>,
    tail: Vec<u8>,
}

impl Default for UpdateCache {
    fn default() -> Self {
        UpdateCache::new(true)
    }
}

impl UpdateCache {
    /// An empty cache; `share` off, every session encodes its own updates.
    pub fn new(share: bool) -> Self {
        UpdateCache {
            share,
            tails: FxHashMap::default(),
            key: Vec::new(),
            hits: 0,
            misses: 0,
        }
    }

    /// Forget the turn's encodings (call once per event-loop turn).
    pub fn clear(&mut self) {
        self.tails.clear();
    }
}

/// An update's JSON after its `ID`: `,"Type":"Update",...,"Fields":{...}}`.
fn encode_update_tail(t: &mut Vec<u8>, s: &ItemStream, u: &Update<'_>, dict: &Dictionary) {
    let _ = write!(
        Bytes(t),
        ",\"Type\":\"Update\",\"UpdateType\":\"{}\",\"SeqNumber\":{}",
        update_type_name(u.update_type),
        u.seq
    );
    if u.do_not_conflate {
        t.extend_from_slice(b",\"DoNotConflate\":true");
    }
    if u.conflation_count > 1 {
        let _ = write!(
            Bytes(t),
            ",\"ConflationInfo\":{{\"Count\":{}}}",
            u.conflation_count
        );
    }
    if s.key_in_updates {
        t.push(b',');
        write_key(t, &s.service, &s.name);
    }
    t.extend_from_slice(b",\"Fields\":");
    write_fields(t, dict, u.fields);
    t.push(b'}');
}

/// JSON messages waiting to be framed: each frame is one JSON array.
#[derive(Default)]
pub struct JsonOut {
    /// The array being built (starts with `[` once a message is in).
    current: Vec<u8>,
    /// Whole WebSocket text frames ready to send.
    pub frames: Vec<u8>,
}

/// An array is closed and framed once it passes this size.
const FRAME_TARGET: usize = 60_000;

impl JsonOut {
    fn begin(&mut self) -> &mut Vec<u8> {
        if self.current.len() > FRAME_TARGET {
            self.end_frame();
        }
        if self.current.is_empty() {
            self.current.push(b'[');
        } else {
            self.current.push(b',');
        }
        &mut self.current
    }

    /// Closes the current array into a frame.
    pub fn end_frame(&mut self) {
        if self.current.is_empty() {
            return;
        }
        self.current.push(b']');
        crate::ws::encode_text(&mut self.frames, &self.current);
        self.current.clear();
    }

    /// Moves every framed byte (closing the current array) into `out`.
    pub fn take(&mut self, out: &mut Vec<u8>) {
        self.end_frame();
        out.append(&mut self.frames);
    }

    /// Nothing is waiting to be taken.
    pub fn is_empty(&self) -> bool {
        self.current.is_empty() && self.frames.is_empty()
    }

    /// Bytes waiting (framed, and the array being built).
    pub fn len(&self) -> usize {
        self.current.len() + self.frames.len()
    }
}

/// One item stream of the session.
struct ItemStream {
    json_id: i64,
    service: String,
    name: String,
    /// Shared by a batch's items.
    view: Option<Arc<[i16]>>,
    streaming: bool,
    key_in_updates: bool,
}

enum LoginState {
    None,
    /// Sent to the node; waiting for its Welcome.
    Pending {
        id: i64,
        echo: Json,
    },
    Open {
        id: i64,
    },
}

/// The services a session has seen in the node's directory, in the order they first
/// appeared: a numeric `Service` in a request is a position in it, from 1, so a name
/// keeps its position. The index makes each directory entry one hash lookup (a linear
/// search per entry made a directory of n services cost n^2 comparisons).
#[derive(Default)]
struct ServiceList {
    names: Vec<String>,
    /// Each service's state as the node last said.
    states: Vec<ServiceState>,
    /// Name -> index in `names`.
    index: FxHashMap<String, usize>,
}

impl ServiceList {
    /// Adds `name` if it is new; true if it was.
    fn add(&mut self, name: &str) -> bool {
        if self.index.contains_key(name) {
            return false;
        }
        self.index.insert(name.to_string(), self.names.len());
        self.names.push(name.to_string());
        self.states.push(ServiceState::Down);
        true
    }

    /// Records a service's state; its position, and whether the state changed.
    fn set_state(&mut self, name: &str, state: ServiceState) -> Option<(usize, bool)> {
        let &i = self.index.get(name)?;
        let changed = self.states[i] != state;
        self.states[i] = state;
        Some((i, changed))
    }

    /// The service at `position` (from 0).
    fn get(&self, position: usize) -> Option<&str> {
        self.names.get(position).map(String::as_str)
    }

    fn iter(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }
}

/// One connection's JSON session.
pub struct Session {
    cfg: Arc<SessionConfig>,
    login: LoginState,
    user: String,
    by_json: FxHashMap<i64, u32>,
    streams: FxHashMap<u32, ItemStream>,
    next_sid: u32,
    /// Services in the node's directory (numeric service ids are positions in it).
    services: ServiceList,
    /// The client's open Source Directory streams (one per service, say), at most
    /// [`directory::MAX_DIRECTORY_STREAMS`].
    directories: Vec<directory::DirectoryStream>,
    /// Source Directory requests that came before the login was answered: answered
    /// after it, in order (a refused login answers them with nothing).
    directory_asked_early: Vec<(i64, serde_json::Map<String, Json>)>,
    /// Logged in from a session token at the upgrade ([`Session::cookie_login`]).
    cookie_login: bool,
    /// The client logged out or the node ended the session: close after sending.
    pub finished: bool,
    /// Off-stream posts waiting for their answer: PostID -> the ID they came on.
    off_stream_posts: FxHashMap<u32, i64>,
}

/// Most names a batch request may hold (as an RSSL consumer's batch on the node).
pub const MAX_BATCH: usize = 10_000;

/// The ID of a login the server makes itself (from the upgrade's cookie), as LSEG's
/// servers number it: negative, so it never meets a client's own IDs.
pub const COOKIE_LOGIN_ID: i64 = -1;

impl std::fmt::Write for Bytes<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// A message's domain: a name, or the RDM's number for it (1 Login, 4 Source, 6
/// MarketPrice; another number is named as it is, and refused as any unknown domain);
/// MarketPrice when absent.
pub(super) fn domain_of(
    obj: &serde_json::Map<String, Json>,
) -> Result<std::borrow::Cow<'_, str>, String> {
    use std::borrow::Cow;
    match obj.get("Domain") {
        None | Some(Json::Null) => Ok(Cow::Borrowed("MarketPrice")),
        Some(Json::String(name)) => Ok(Cow::Borrowed(name)),
        Some(Json::Number(n)) => Ok(match n.as_u64() {
            Some(1) => Cow::Borrowed("Login"),
            Some(4) => Cow::Borrowed("Source"),
            Some(6) => Cow::Borrowed("MarketPrice"),
            _ => Cow::Owned(n.to_string()),
        }),
        Some(other) => Err(format!(
            "JSON Converter Token Type error: expected a name or a number for key 'Domain', not {other}"
        )),
    }
}

impl Session {
    /// A service's state as the node last said (Down for one never heard of).
    fn service_state(&self, name: &str) -> ServiceState {
        self.services
            .index
            .get(name)
            .map_or(ServiceState::Down, |&i| self.services.states[i])
    }

    /// A session before the client's Login.
    pub fn new(cfg: Arc<SessionConfig>) -> Self {
        Session {
            cfg,
            login: LoginState::None,
            user: String::new(),
            by_json: FxHashMap::default(),
            streams: FxHashMap::default(),
            next_sid: 1,
            services: ServiceList::default(),
            directories: Vec::new(),
            directory_asked_early: Vec::new(),
            cookie_login: false,
            finished: false,
            off_stream_posts: FxHashMap::default(),
        }
    }

    /// Open item streams.
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// A text message from the client. Messages for the node are appended (encoded) to
    /// `to_node`; answers the session gives itself go to `out`.
    pub fn on_client_text(&mut self, text: &str, to_node: &mut Vec<u8>, out: &mut JsonOut) {
        self.on_client_text_within(text, to_node, out, usize::MAX);
    }

    /// As [`Session::on_client_text`], reading an array's messages only while their
    /// answers take at most `room` bytes of `out`: a frame of thousands of small
    /// requests each answered at length (a directory refresh per `{"ID":7,"Domain":
    /// "Source"}`) must not queue more than the connection may hold. The messages
    /// left are not read, and the client is told so.
    pub fn on_client_text_within(
        &mut self,
        text: &str,
        to_node: &mut Vec<u8>,
        out: &mut JsonOut,
        room: usize,
    ) {
        let json: Json = match serde_json::from_str(text) {
            Ok(j) => j,
            Err(e) => {
                write_error(out, 0, &format!("JSON parser error: {e}"), text);
                return;
            }
        };
        let before = out.len();
        // Each message's text as the client wrote it, for posts: a posted number's
        // decimals are a real's hint, which the parsed number (a double) has lost.
        let raw = if text.contains("\"Post\"") {
            post::messages_as_written(text)
        } else {
            Vec::new()
        };
        let raw = |i: usize| raw.get(i).copied();
        match json {
            Json::Array(msgs) => {
                for (i, m) in msgs.iter().enumerate() {
                    if out.len() - before > room {
                        let why = format!(
                            "the answers to the first {i} of the {} messages of this frame fill the connection's output; the rest were not read",
                            msgs.len()
                        );
                        write_error(out, 0, &why, "");
                        break;
                    }
                    self.on_client_message(m, raw(i), to_node, out);
                }
            }
            m => self.on_client_message(&m, raw(0), to_node, out),
        }
    }

    /// A client message too large to take.
    pub fn on_too_large(&mut self, len: u64, out: &mut JsonOut) {
        let text = format!(
            "message of {len} bytes exceeds MaxMsgSize ({} bytes); it was ignored",
            self.cfg.max_msg_size
        );
        write_error(out, 0, &text, "");
    }

    /// One client message, `m`; `written` is its text as the client wrote it, where
    /// a post needs it (none: the parsed message serves).
    fn on_client_message(
        &mut self,
        m: &Json,
        written: Option<&str>,
        to_node: &mut Vec<u8>,
        out: &mut JsonOut,
    ) {
        let text = || m.to_string();
        let Some(obj) = m.as_object() else {
            write_error(
                out,
                0,
                "JSON Converter Token Type error: expected an object",
                &text(),
            );
            return;
        };
        let ty = match obj.get("Type") {
            None | Some(Json::Null) => "Request",
            Some(Json::String(t)) => t.as_str(),
            // Not taken for a Request: a client that means something else (a Close
            // spelt with a number) must not open a stream.
            Some(other) => {
                let why =
                    format!("JSON Converter Token Type error: expected a string for key 'Type', not {other}");
                write_error(out, 0, &why, "");
                return;
            }
        };
        match ty {
            "Ping" => {
                out.begin().extend_from_slice(b"{\"Type\":\"Pong\"}");
                return;
            }
            "Pong" => return, // any bytes count as liveness at the node
            _ => {}
        }
        if ty == "Close" {
            self.on_close(obj.get("ID"), to_node, out);
            return;
        }
        let id = match obj.get("ID") {
            Some(Json::Number(n)) if n.as_i64().is_some() => n.as_i64().unwrap_or(0),
            Some(_) => {
                write_error(
                    out,
                    0,
                    "JSON Converter Token Type error: expected an integer for key 'ID'",
                    &text(),
                );
                return;
            }
            None => {
                write_error(out, 0, "JSON Missing required key 'ID'", &text());
                return;
            }
        };
        if ty == "Post" {
            self.on_post(id, obj, written, to_node, out, &text());
            return;
        }
        if ty != "Request" {
            write_error(
                out,
                id,
                &format!("JSON Unexpected Value. Received '{ty}' for key 'Type'"),
                &text(),
            );
            return;
        }
        let domain = match domain_of(obj) {
            Ok(d) => d,
            Err(why) => {
                write_error(out, id, &why, &text());
                return;
            }
        };
        match domain.as_ref() {
            "Login" => self.on_login(id, obj, to_node, out),
            "MarketPrice" => self.on_item_request(id, obj, to_node, out, &text),
            "Source" => {
                // The directory takes the ID: an item open on it is closed, as for a
                // request for another item on it.
                if self.logged_in().is_some() {
                    self.close_item_id(id, to_node);
                }
                self.on_directory_request(id, obj, out)
            }
            other => self.refuse_request(
                id,
                code::PROTOCOL,
                &format!("domain {other:?} is not supported (MarketPrice only)"),
                to_node,
                out,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_entitlement_refusal_is_not_entitled_in_the_api() {
        assert_eq!(super::json::code_name(code::NOT_ENTITLED), "NotEntitled");
        assert_eq!(super::json::code_name(code::LOGIN_REJECTED), "NotEntitled");
        assert_eq!(super::json::code_name(9999), "Error");
    }

    #[test]
    fn update_types_keep_their_rdm_names() {
        use tickwire_proto::UpdateType;
        assert_eq!(
            super::json::update_type_name(UpdateType::Other),
            "Unspecified"
        );
        assert_eq!(super::json::update_type_name(UpdateType::Trade), "Trade");
        assert_eq!(
            super::json::update_type_name(UpdateType::from_u8(7)),
            "Correction"
        );
        assert_eq!(
            super::json::update_type_name(UpdateType::from_u8(200)),
            "Unspecified"
        );
    }

    use super::*;
    use tickwire_proto::{
        DataState, FieldList, Message, ReplayFrom, Role, State, StreamState, UpdateType, Value,
    };

    fn session() -> Session {
        Session::new(Arc::new(SessionConfig {
            default_service: Some("FEED".into()),
            ..SessionConfig::default()
        }))
    }

    /// A session whose client has sent its Login (ID 1, user "u"), with what it sent
    /// the node and what it wrote the client.
    fn logged_in_session() -> (Session, Vec<u8>, JsonOut) {
        logged_in(session())
    }

    /// `s` once its client has sent its Login (as [`logged_in_session`]).
    fn logged_in(mut s: Session) -> (Session, Vec<u8>, JsonOut) {
        let (mut to_node, mut out) = (Vec::new(), JsonOut::default());
        s.on_client_text(
            r#"{"ID":1,"Domain":"Login","Key":{"Name":"u"}}"#,
            &mut to_node,
            &mut out,
        );
        (s, to_node, out)
    }

    fn messages(bytes: &[u8]) -> Vec<String> {
        MessageIterNames(bytes).collect()
    }

    /// The types of the encoded messages, for assertions.
    struct MessageIterNames<'a>(&'a [u8]);

    impl Iterator for MessageIterNames<'_> {
        type Item = String;
        fn next(&mut self) -> Option<String> {
            let mut it = tickwire_proto::MessageIter::new(self.0);
            let raw = it.next()?.ok()?;
            let name = format!("{:?}", raw.message.message_type());
            self.0 = &self.0[raw.encoded.len()..];
            Some(name)
        }
    }

    /// A directory of many services: each entry is looked up once (a set), not
    /// compared with every service known so far, which made 100,000 services take
    /// 10^10 string comparisons. Names keep their first position, so a numeric
    /// `Service` still means the same service after a repeated or grown directory.
    #[test]
    fn a_large_directory_is_taken_in_one_pass_and_keeps_its_positions() {
        use tickwire_proto::{Directory, ServiceState};
        let names: Vec<String> = (0..100_000).map(|i| format!("SVC{i}")).collect();
        fn dir(names: &[String]) -> Message<'_> {
            Message::Directory(Directory::of(
                names.iter().map(|n| (n.as_str(), ServiceState::Up)),
            ))
        }
        let mut s = session();
        let mut cache = UpdateCache::new(true);
        let mut out = JsonOut::default();
        s.on_node_message(&dir(&names), &mut cache, &mut out);
        // Again, and again with the order changed and one new name at the end.
        s.on_node_message(&dir(&names), &mut cache, &mut out);
        let mut shuffled: Vec<String> = names.iter().rev().cloned().collect();
        shuffled.push("NEW".into());
        s.on_node_message(&dir(&shuffled), &mut cache, &mut out);
        let id = |n: u64| s.resolve_service(Some(&Json::from(n)));
        assert_eq!(id(1), Ok("SVC0".to_string()));
        assert_eq!(id(100_000), Ok("SVC99999".to_string()));
        assert_eq!(id(100_001), Ok("NEW".to_string()));
        assert!(id(100_002).is_err());
        assert!(out.is_empty(), "a directory is not shown to the client");
    }

    #[test]
    fn requests_sent_right_after_the_login_are_passed_on_in_order() {
        let (mut s, mut to_node, mut out) = logged_in_session();
        s.on_client_text(r#"{"ID":2,"Key":{"Name":"SYM0"}}"#, &mut to_node, &mut out);
        assert_eq!(messages(&to_node), ["Login", "Request"]);
        assert!(out.is_empty(), "no status: the request is not refused");
    }

    #[test]
    fn a_request_before_any_login_is_refused_with_a_status() {
        let mut s = session();
        let (mut to_node, mut out) = (Vec::new(), JsonOut::default());
        s.on_client_text(r#"{"ID":2,"Key":{"Name":"SYM0"}}"#, &mut to_node, &mut out);
        assert!(to_node.is_empty());
        let mut frames = Vec::new();
        out.take(&mut frames);
        let text = String::from_utf8_lossy(&frames);
        assert!(text.contains("login required"), "{text}");
    }

    /// Two sessions watching SYM0 and SYM1 (client IDs 2 and 3, node streams 1 and 2).
    fn watching_two_items() -> Session {
        let (mut s, mut to_node, mut out) = logged_in_session();
        for text in [
            r#"{"ID":2,"Key":{"Name":"SYM0"}}"#,
            r#"{"ID":3,"Key":{"Name":"SYM1"}}"#,
        ] {
            s.on_client_text(text, &mut to_node, &mut out);
        }
        s
    }

    fn update_json(s: &mut Session, cache: &mut UpdateCache, sid: u32, bytes: &[u8]) -> Json {
        let mut out = JsonOut::default();
        let u = Update::new(sid, 7, UpdateType::Quote, FieldList::decode(bytes).unwrap());
        s.on_node_message(&Message::Update(u), cache, &mut out);
        let mut frames = Vec::new();
        out.take(&mut frames);
        let len = frames[1] as usize;
        assert_eq!(len, frames.len() - 2, "one short frame");
        serde_json::from_slice::<Vec<Json>>(&frames[2..]).unwrap()[0].clone()
    }

    #[test]
    fn shared_update_encodings_are_reused_only_for_the_same_item_and_update() {
        let fields = tickwire_proto::encode_field_list([(
            22,
            Value::Real(tickwire_proto::Real::new(10050, -2)),
        )]);
        let (mut a, mut b) = (watching_two_items(), watching_two_items());
        let mut shared = UpdateCache::new(true);
        let first = update_json(&mut a, &mut shared, 1, &fields);
        let again = update_json(&mut b, &mut shared, 1, &fields);
        assert_eq!((shared.hits, shared.misses), (1, 1));
        assert_eq!(first, again);
        assert_eq!(first["ID"], 2);
        assert_eq!(first["Fields"]["BID"], 100.5);
        // Same update bytes on another item: not the same message.
        let other = update_json(&mut b, &mut shared, 2, &fields);
        assert_eq!((shared.hits, shared.misses), (1, 2));
        assert_eq!(other["ID"], 3);
        // Sharing off: the same JSON, encoded by each session.
        let mut own = UpdateCache::new(false);
        assert_eq!(update_json(&mut a, &mut own, 1, &fields), first);
        assert_eq!((own.hits, own.misses), (0, 1));
    }

    proptest::proptest! {
        /// Every real is written as a JSON number a client parses to its value: zero
        /// with a positive exponent too (`0` and not `000`, which is no JSON).
        #[test]
        fn every_real_is_a_json_number_of_its_value(
            mantissa in proptest::prop_oneof![
                proptest::strategy::Just(0i64),
                proptest::num::i64::ANY,
            ],
            exponent in proptest::num::i8::ANY,
        ) {
            let r = tickwire_proto::Real::new(mantissa, exponent);
            let fields = tickwire_proto::encode_field_list([(22, Value::Real(r))]);
            let u = Update::new(1, 7, UpdateType::Quote, FieldList::decode(&fields).unwrap());
            let json = node_says(&mut watching_two_items(), &Message::Update(u));
            let got = json[0]["Fields"]["BID"].as_f64();
            let want = r.to_f64();
            proptest::prop_assert!(
                got.is_some_and(|g| (g - want).abs() <= want.abs() * 1e-15),
                "{} read as {:?}", r, got
            );
        }
    }

    /// The node's answers to this session's login, as the client sees them.
    /// What the session says of an update (BID 169.05, seq 2) on the node's stream `sid`.
    fn update_says(s: &mut Session, sid: u32) -> Vec<Json> {
        let fields = tickwire_proto::encode_field_list([(
            22,
            tickwire_proto::Value::Real(tickwire_proto::Real::new(16905, -2)),
        )]);
        let update = Message::Update(tickwire_proto::Update {
            stream_id: sid,
            seq: 2,
            update_type: tickwire_proto::UpdateType::Quote,
            do_not_conflate: false,
            conflation_count: 0,
            fields: tickwire_proto::FieldList::decode(&fields).unwrap(),
        });
        node_says(s, &update)
    }

    fn node_says(s: &mut Session, m: &Message<'_>) -> Vec<Json> {
        let mut out = JsonOut::default();
        s.on_node_message(m, &mut UpdateCache::default(), &mut out);
        let mut frames = Vec::new();
        out.take(&mut frames);
        client_json(&frames)
    }

    /// The JSON messages in server frames (unmasked text frames).
    fn client_json(mut frames: &[u8]) -> Vec<Json> {
        let mut msgs = Vec::new();
        while !frames.is_empty() {
            let (len, hdr) = match frames[1] {
                126 => (u16::from_be_bytes([frames[2], frames[3]]) as usize, 4),
                127 => (
                    u64::from_be_bytes(frames[2..10].try_into().unwrap()) as usize,
                    10,
                ),
                n => (n as usize, 2),
            };
            let arr: Vec<Json> = serde_json::from_slice(&frames[hdr..hdr + len]).unwrap();
            msgs.extend(arr);
            frames = &frames[hdr + len..];
        }
        msgs
    }

    fn welcome() -> Message<'static> {
        Message::Welcome(tickwire_proto::Welcome {
            max_output_bytes: 1 << 20,
            node_name: "n",
            ..Default::default()
        })
    }

    /// The Source Directory as RSSL's JSON spells it (what ConsPerf and EMA over
    /// WebSocket read before asking for items), and its updates on the open stream.
    #[test]
    fn the_source_directory_lists_services_by_position_and_follows_their_state() {
        use tickwire_proto::{Directory, ServiceState};
        fn dir(services: &[(&'static str, ServiceState)]) -> Message<'static> {
            Message::Directory(Directory::of(services.iter().copied()))
        }
        let (mut s, mut to_node, _) = logged_in_session();
        node_says(&mut s, &welcome());
        node_says(
            &mut s,
            &dir(&[("FEED", ServiceState::Up), ("OTHER", ServiceState::Down)]),
        );
        let mut out = JsonOut::default();
        s.on_client_text(
            r#"{"ID":2,"Domain":"Source","Key":{"Filter":7}}"#,
            &mut to_node,
            &mut out,
        );
        let mut frames = Vec::new();
        out.take(&mut frames);
        let r = &client_json(&frames)[0];
        assert_eq!(r["Type"], "Refresh");
        assert_eq!(r["Domain"], "Source");
        let entries = r["Map"]["Entries"].as_array().unwrap();
        assert_eq!(entries[0]["Key"], 1);
        let info = &entries[0]["FilterList"]["Entries"][0]["Elements"];
        assert_eq!(info["Name"], "FEED");
        assert_eq!(info["Capabilities"]["Data"]["Data"][0], 6);
        let state = &entries[1]["FilterList"]["Entries"][1]["Elements"];
        assert_eq!(state["ServiceState"], 0, "OTHER is down");
        // OTHER comes up, NEW appears: one update on the directory stream.
        let u = node_says(
            &mut s,
            &dir(&[("OTHER", ServiceState::Up), ("NEW", ServiceState::Up)]),
        );
        assert_eq!(u[0]["Type"], "Update");
        assert_eq!(u[0]["ID"], 2);
        let entries = u[0]["Map"]["Entries"].as_array().unwrap();
        assert_eq!(
            (entries[0]["Action"].as_str(), entries[0]["Key"].as_u64()),
            (Some("Add"), Some(3))
        );
        assert_eq!(
            (entries[1]["Action"].as_str(), entries[1]["Key"].as_u64()),
            (Some("Update"), Some(2))
        );
    }

    /// A login by token (RDM name type 5, as the published API sends one) names no
    /// user: the node is sent the token alone and finds whose it is.
    #[test]
    fn a_login_by_authentication_token_sends_the_node_the_token_and_no_user() {
        for text in [
            r#"{"ID":1,"Domain":"Login","Key":{"NameType":"AuthnToken","Elements":{"ApplicationId":"256","AuthenticationToken":"tok-1"}}}"#,
            r#"{"ID":1,"Domain":"Login","Key":{"Name":"ignored","NameType":5,"Elements":{"AuthenticationToken":"tok-1"}}}"#,
        ] {
            let mut s = session();
            let (mut to_node, mut out) = (Vec::new(), JsonOut::default());
            s.on_client_text(text, &mut to_node, &mut out);
            let logins: Vec<(String, String)> = tickwire_proto::MessageIter::new(&to_node)
                .filter_map(|m| match m.unwrap().message {
                    Message::Login(l) => Some((l.user.to_string(), l.token.to_string())),
                    _ => None,
                })
                .collect();
            assert_eq!(logins, [(String::new(), "tok-1".to_string())], "{text}");
        }
    }

    /// The published authenticating examples send no Login: the upgrade's cookie logs
    /// them in, and the login Refresh (ID -1) comes unasked, echoing the cookies.
    #[test]
    fn a_cookie_login_sends_the_node_a_login_and_the_client_its_refresh_on_id_minus_1() {
        let mut s = session();
        let mut to_node = Vec::new();
        s.cookie_login("alice", Some("555"), Some("10.0.0.1"), &mut to_node);
        let mut it = tickwire_proto::MessageIter::new(&to_node);
        match it.next().unwrap().unwrap().message {
            Message::Login(l) => {
                assert_eq!((l.user, l.token, l.application), ("alice", "", "ws:555"));
                assert_eq!(l.role, Role::Subscriber);
            }
            other => panic!("{other:?}"),
        }
        assert!(it.next().is_none());
        let got = node_says(&mut s, &welcome());
        assert_eq!(got.len(), 1, "{got:?}");
        let r = &got[0];
        assert_eq!(
            (r["ID"].as_i64(), r["Type"].as_str()),
            (Some(-1), Some("Refresh"))
        );
        assert_eq!(r["Domain"], "Login");
        assert_eq!(r["Key"]["Name"], "alice");
        assert_eq!(r["Key"]["Elements"]["ApplicationId"], "555");
        assert_eq!(r["Key"]["Elements"]["Position"], "10.0.0.1");
        assert_eq!(r["State"]["Stream"], "Open");
        // Requests go on as after any login; closing ID -1 logs out.
        let (mut to_node, mut out) = (Vec::new(), JsonOut::default());
        s.on_client_text(r#"{"ID":2,"Key":{"Name":"SYM0"}}"#, &mut to_node, &mut out);
        assert_eq!(messages(&to_node), ["Request"]);
        s.on_client_text(
            r#"{"ID":-1,"Type":"Close","Domain":"Login"}"#,
            &mut to_node,
            &mut out,
        );
        assert!(s.finished);
    }

    /// A token the node does not take: its refusal is the login's Status, on ID -1,
    /// and the session ends.
    #[test]
    fn a_refused_cookie_login_gets_the_login_status_and_ends_the_session() {
        let mut s = session();
        s.cookie_login("", None, None, &mut Vec::new());
        let got = node_says(
            &mut s,
            &Message::Status(tickwire_proto::Status {
                stream_id: 0,
                state: State::closed(
                    code::LOGIN_REJECTED,
                    "login rejected: unknown or expired session token",
                ),
            }),
        );
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0]["ID"], -1);
        assert_eq!(got[0]["Type"], "Status");
        assert_eq!(got[0]["Domain"], "Login");
        assert_eq!(got[0]["State"]["Stream"], "Closed");
        assert_eq!(got[0]["State"]["Code"], "NotEntitled");
        assert!(s.finished);
    }

    /// A client that sends its own Login without credentials after a cookie login gets
    /// that login, on its own ID (before or after the node accepted it); a Login with
    /// credentials or naming someone else is refused as a second login.
    #[test]
    fn a_login_without_credentials_joins_the_cookie_login_on_the_clients_id() {
        for before_welcome in [true, false] {
            let mut s = session();
            s.cookie_login("alice", None, None, &mut Vec::new());
            if !before_welcome {
                assert_eq!(node_says(&mut s, &welcome())[0]["ID"], -1);
            }
            let (mut to_node, mut out) = (Vec::new(), JsonOut::default());
            s.on_client_text(
                r#"{"ID":1,"Domain":"Login","Key":{"Elements":{"ApplicationId":"555"}}}"#,
                &mut to_node,
                &mut out,
            );
            assert!(to_node.is_empty(), "no second login for the node");
            let mut frames = Vec::new();
            out.take(&mut frames);
            let mut got = client_json(&frames);
            if before_welcome {
                assert!(got.is_empty(), "{got:?}");
                got = node_says(&mut s, &welcome());
            }
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(got[0]["ID"], 1);
            assert_eq!(got[0]["Type"], "Refresh");
            assert_eq!(got[0]["Key"]["Name"], "alice");
            for other in [
                r#"{"ID":3,"Domain":"Login","Key":{"Name":"bob"}}"#,
                r#"{"ID":3,"Domain":"Login","Key":{"Name":"alice","Elements":{"Password":"x"}}}"#,
            ] {
                let (mut to_node, mut out) = (Vec::new(), JsonOut::default());
                s.on_client_text(other, &mut to_node, &mut out);
                assert!(to_node.is_empty());
                let mut frames = Vec::new();
                out.take(&mut frames);
                let got = client_json(&frames);
                assert_eq!(got[0]["Type"], "Status", "{got:?}");
                assert!(got[0]["State"]["Text"]
                    .as_str()
                    .unwrap()
                    .contains("already open"));
            }
        }
    }

    use tickwire_proto::{Ack, NakCode};

    /// A post as sent: stream, post id, ack, image, service, item, fields.
    type SentPost = (u32, u32, bool, bool, String, String, Vec<(i16, String)>);

    /// The posts the session sent the node.
    fn posts_sent(bytes: &[u8]) -> Vec<SentPost> {
        tickwire_proto::MessageIter::new(bytes)
            .filter_map(|m| match m.unwrap().message {
                Message::Post(p) => Some((
                    p.stream_id,
                    p.post_id,
                    p.ack,
                    p.image,
                    p.service.to_string(),
                    p.name.to_string(),
                    p.fields.iter().map(|(f, v)| (f, v.to_string())).collect(),
                )),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_request_with_replay_asks_the_node_for_the_history_first() {
        let mut s = watching_two_items();
        let (mut to_node, mut out) = (Vec::new(), JsonOut::default());
        for text in [
            r#"{"ID":5,"Key":{"Name":"SYM0"},"Replay":{"FromSeq":1200}}"#,
            r#"{"ID":6,"Key":{"Name":"SYM1"},"Replay":{"FromTimeNs":1795492800000000000}}"#,
            r#"{"ID":7,"Key":{"Name":"SYM1"},"Replay":{"FromSeq":1},"View":["BID"]}"#,
            r#"{"ID":8,"Key":{"Name":"SYM1"},"Replay":{}}"#,
        ] {
            s.on_client_text(text, &mut to_node, &mut out);
        }
        let replays: Vec<(String, ReplayFrom)> = tickwire_proto::MessageIter::new(&to_node)
            .filter_map(|m| match m.unwrap().message {
                Message::Replay(r) => Some((r.name.to_string(), r.from)),
                _ => None,
            })
            .collect();
        assert_eq!(
            replays,
            [
                ("SYM0".to_string(), ReplayFrom::Seq(1200)),
                (
                    "SYM1".to_string(),
                    ReplayFrom::Time(1_795_492_800_000_000_000)
                )
            ]
        );
        let mut frames = Vec::new();
        out.take(&mut frames);
        let msgs = client_json(&frames);
        assert_eq!(msgs.len(), 2, "{msgs:?}");
        assert!(msgs[0]["Text"].as_str().unwrap().contains("takes no View"));
        assert!(msgs[1]["Text"].as_str().unwrap().contains("FromSeq"));
    }

    #[test]
    fn posts_on_stream_and_off_stream_reach_the_node_typed_by_the_dictionary() {
        let mut s = watching_two_items();
        let (mut to_node, mut out) = (Vec::new(), JsonOut::default());
        for text in [
            // On item stream ID 2 (SYM0), as an update.
            r#"{"ID":2,"Type":"Post","Ack":true,"PostID":7,"Message":{"ID":0,"Type":"Update","Fields":{"BID":101.50,"ASK":"101.30"}}}"#,
            // Off-stream, on the login stream with a Key, a posted Refresh.
            r#"{"ID":1,"Type":"Post","Domain":"MarketPrice","Ack":true,"PostID":8,"Key":{"Name":"NEW","Service":"FEED"},"Message":{"ID":0,"Type":"Refresh","Fields":{"DSPLY_NAME":"New item","ACVOL_1":300,"BID":null}}}"#,
        ] {
            s.on_client_text(text, &mut to_node, &mut out);
        }
        let posts = posts_sent(&to_node);
        assert_eq!(
            posts,
            vec![
                // (JSON objects are read in key order.) A number and a string alike
                // keep the decimals as written: 101.50 is 10150 and -2, as the
                // Real-Time SDK reads it.
                (
                    1,
                    7,
                    true,
                    false,
                    "".into(),
                    "".into(),
                    vec![(25, "101.30".into()), (22, "101.50".into())]
                ),
                (
                    0,
                    8,
                    true,
                    true,
                    "FEED".into(),
                    "NEW".into(),
                    vec![
                        (32, "300".into()),
                        (22, "(blank)".into()),
                        (3, "New item".into())
                    ]
                ),
            ]
        );
        // The answers, on the IDs the posts came on.
        let ack = |sid, post_id, nak, text| {
            Message::Ack(Ack {
                stream_id: sid,
                post_id,
                nak,
                text,
            })
        };
        let got = node_says(&mut s, &ack(1, 7, None, ""));
        assert_eq!(
            got,
            vec![serde_json::json!({"ID":2,"Type":"Ack","AckID":7})]
        );
        let got = node_says(
            &mut s,
            &ack(0, 8, Some(NakCode::SymbolUnknown), "no such item"),
        );
        assert_eq!(
            got,
            vec![
                serde_json::json!({"ID":1,"Type":"Ack","AckID":8,"NakCode":"SymbolUnknown","Text":"no such item"})
            ]
        );
    }

    #[test]
    fn a_posted_numbers_decimals_are_its_hint_wherever_the_post_is_in_its_frame() {
        let mut s = watching_two_items();
        let (mut to_node, mut out) = (Vec::new(), JsonOut::default());
        // A frame of three messages, the posts second and third; a key written with an
        // escape; numbers with an exponent, a sign, trailing zeros; an integer field.
        // (Fields are read in key order.)
        s.on_client_text(
            r#"[{"ID":3,"Type":"Close"},
                {"ID":2,"Type":"Post","PostID":1,"Message":{"Fields":{"BID": 99.500, "ASK": -1.50e1}}},
                {"ID":2,"Type":"Post","PostID":2,"Message":{"Fields":{"ACVOL_1": 300, "BID": 7}}}]"#,
            &mut to_node,
            &mut out,
        );
        let fields: Vec<Vec<(i16, String)>> =
            posts_sent(&to_node).into_iter().map(|p| p.6).collect();
        assert_eq!(
            fields,
            vec![
                vec![(25, "-15.0".into()), (22, "99.500".into())],
                vec![(32, "300".into()), (22, "7".into())]
            ]
        );
    }

    #[test]
    fn a_post_the_session_cannot_send_gets_a_nak_or_an_error_saying_why() {
        let mut s = watching_two_items();
        let (mut to_node, mut out) = (Vec::new(), JsonOut::default());
        let cases = [
            (
                r#"{"ID":2,"Type":"Post","Ack":true,"PostID":1,"Message":{"Fields":{"NOPE":1}}}"#,
                "unknown field \"NOPE\"",
            ),
            (
                r#"{"ID":2,"Type":"Post","Ack":true,"PostID":2,"Message":{"Fields":{"ACVOL_1":-5}}}"#,
                "not an integer of 0 or more",
            ),
            (
                r#"{"ID":2,"Type":"Post","Ack":true,"PostID":3,"Message":{"Fields":{"BID":true}}}"#,
                "is not a value of type REAL",
            ),
            (
                r#"{"ID":9,"Type":"Post","Ack":true,"PostID":4,"Message":{"Fields":{}}}"#,
                "not an open item stream",
            ),
            (
                r#"{"ID":2,"Type":"Post","Ack":true,"PostID":5,"Message":{"Type":"Status"}}"#,
                "not \"Status\"",
            ),
            (
                r#"{"ID":2,"Type":"Post","Ack":true,"PostID":6}"#,
                "Missing required key 'Message'",
            ),
        ];
        for (text, _) in cases {
            s.on_client_text(text, &mut to_node, &mut out);
        }
        // Without an Ack asked for, a refusal is an Error.
        s.on_client_text(
            r#"{"ID":2,"Type":"Post","Message":{"Fields":{"NOPE":1}}}"#,
            &mut to_node,
            &mut out,
        );
        assert!(posts_sent(&to_node).is_empty(), "nothing reaches the node");
        let mut frames = Vec::new();
        out.take(&mut frames);
        let msgs = client_json(&frames);
        assert_eq!(msgs.len(), cases.len() + 1);
        for (i, (_, why)) in cases.iter().enumerate() {
            let m = &msgs[i];
            assert_eq!(m["Type"], "Ack", "{m}");
            assert_eq!(m["AckID"], i as u64 + 1, "{m}");
            assert!(
                m["NakCode"] == "InvalidContent" || m["NakCode"] == "NotOpen",
                "{m}"
            );
            let text = m["Text"].as_str().unwrap();
            assert!(text.contains(why), "{text} / {why}");
        }
        assert_eq!(msgs[cases.len()]["Type"], "Error");
    }

    /// The answers a session wrote for the client, as JSON.
    fn answers(out: &mut JsonOut) -> Vec<Json> {
        let mut frames = Vec::new();
        out.take(&mut frames);
        client_json(&frames)
    }

    fn ready_session() -> (Session, Vec<u8>) {
        ready(session())
    }

    /// `s` logged in, with the services FEED and OTHER up.
    fn ready(s: Session) -> (Session, Vec<u8>) {
        use tickwire_proto::{Directory, ServiceState};
        let (mut s, to_node, _) = logged_in(s);
        node_says(&mut s, &welcome());
        let services = ["FEED", "OTHER"].map(|name| (name, ServiceState::Up));
        node_says(&mut s, &Message::Directory(Directory::of(services)));
        (s, to_node)
    }

    #[test]
    fn a_frame_stops_being_read_once_its_answers_fill_the_room_the_connection_has() {
        let (mut s, mut to_node) = ready_session();
        let one = r#"{"ID":7,"Domain":"Source"}"#;
        let frame = format!("[{}]", vec![one; 1000].join(","));
        let mut out = JsonOut::default();
        s.on_client_text_within(&frame, &mut to_node, &mut out, 2_000);
        let got = answers(&mut out);
        assert!(got.len() < 20, "{} answers", got.len());
        let last = got.last().unwrap();
        assert_eq!(last["Type"], "Error", "{last}");
        assert!(
            last["Text"]
                .as_str()
                .unwrap()
                .contains("the rest were not read"),
            "{last}"
        );
    }

    #[test]
    fn a_batch_whose_item_ids_overflow_or_take_the_logins_or_pass_the_limit_is_refused() {
        let (mut s, mut to_node) = ready_session();
        to_node.clear();
        let too_many: Vec<String> = (0..=MAX_BATCH).map(|i| format!("\"I{i}\"")).collect();
        let overflow = r#"{"ID":9223372036854775807,"Key":{"Name":["A","B"]}}"#.to_string();
        let takes_login = r#"{"ID":-1,"Key":{"Name":["A","B"]}}"#.to_string();
        let single_on_login = r#"{"ID":1,"Key":{"Name":"A"}}"#.to_string();
        let large = format!(r#"{{"ID":100,"Key":{{"Name":[{}]}}}}"#, too_many.join(","));
        // 2,000 names with a view of 1,024 fields: 2,048,000 fields in all.
        let view: Vec<&str> = vec!["\"BID\""; 1024];
        let viewed = format!(
            r#"{{"ID":100,"Key":{{"Name":[{}]}},"View":[{}]}}"#,
            too_many[..2000].join(","),
            view.join(",")
        );
        for (request, why) in [
            (overflow, "pass the largest ID"),
            (takes_login, "would take ID 1"),
            (single_on_login, "ID 1 is the login's"),
            (large, "is more than the 10000"),
            (viewed, "2048000 fields in all"),
        ] {
            let mut out = JsonOut::default();
            s.on_client_text(&request, &mut to_node, &mut out);
            let got = answers(&mut out);
            assert_eq!(got[0]["Type"], "Error", "{got:?}");
            assert!(got[0]["Text"].as_str().unwrap().contains(why), "{got:?}");
            assert!(
                messages(&to_node).is_empty(),
                "{why}: nothing asked of the node"
            );
        }
        assert!(s.logged_in().is_some(), "still logged in");
    }

    #[test]
    fn a_closed_directory_stream_gets_no_more_updates() {
        use tickwire_proto::{Directory, ServiceState};
        let (mut s, mut to_node) = ready_session();
        let mut out = JsonOut::default();
        s.on_client_text(r#"{"ID":7,"Domain":"Source"}"#, &mut to_node, &mut out);
        s.on_client_text(r#"{"ID":7,"Type":"Close"}"#, &mut to_node, &mut out);
        let down = Message::Directory(Directory::of([("FEED", ServiceState::Down)]));
        assert!(node_says(&mut s, &down).is_empty());
    }

    /// A `Type` that is no string is an Error, not a Request.
    #[test]
    fn a_type_that_is_no_string_is_an_error_and_opens_nothing() {
        let (mut s, mut to_node) = ready_session();
        to_node.clear();
        let mut out = JsonOut::default();
        s.on_client_text(
            r#"{"ID":5,"Type":5,"Key":{"Name":"A"}}"#,
            &mut to_node,
            &mut out,
        );
        assert!(messages(&to_node).is_empty(), "{:?}", messages(&to_node));
        let got = answers(&mut out);
        assert_eq!(got[0]["Type"], "Error", "{got:?}");
        assert!(
            got[0]["Text"].as_str().unwrap().contains("key 'Type'"),
            "{got:?}"
        );
    }

    /// A Close whose ID is no integer (or a batch holding one) closes nothing and is
    /// answered with an Error (it got no answer, or a batch status of the wrong count).
    #[test]
    fn a_close_of_an_id_that_is_no_integer_is_an_error_and_closes_nothing() {
        let (mut s, mut to_node) = ready_session();
        let mut out = JsonOut::default();
        s.on_client_text(r#"{"ID":5,"Key":{"Name":"A"}}"#, &mut to_node, &mut out);
        answers(&mut out);
        for close in [
            r#"{"ID":1.5,"Type":"Close"}"#,
            r#"{"ID":[5,"x"],"Type":"Close"}"#,
        ] {
            to_node.clear();
            s.on_client_text(close, &mut to_node, &mut out);
            assert!(
                messages(&to_node).is_empty(),
                "{close}: {:?}",
                messages(&to_node)
            );
            let got = answers(&mut out);
            assert_eq!(got.len(), 1, "{close}: {got:?}");
            assert_eq!(got[0]["Type"], "Error", "{close}: {got:?}");
            assert!(
                got[0]["Text"].as_str().unwrap().contains("key 'ID'"),
                "{got:?}"
            );
        }
        // Whole, the batch closes its stream.
        s.on_client_text(r#"{"ID":[5],"Type":"Close"}"#, &mut to_node, &mut out);
        assert_eq!(messages(&to_node), ["Close"]);
    }

    /// A login reissued before the node answered: the login's one refresh answers it,
    /// rather than a refusal that closed the login stream the refresh then came on.
    #[test]
    fn a_login_reissued_before_its_answer_is_answered_by_the_logins_refresh() {
        let (mut s, mut to_node, mut out) = logged_in(session());
        let sent = to_node.len();
        s.on_client_text(
            r#"{"ID":1,"Domain":"Login","Key":{"Name":"u","Elements":{"ApplicationId":"257"}}}"#,
            &mut to_node,
            &mut out,
        );
        assert!(answers(&mut out).is_empty(), "answered with the login");
        assert_eq!(to_node.len(), sent, "nothing more asked of the node");
        s.on_client_text(
            r#"{"ID":1,"Domain":"Login","Key":{"Name":"other"}}"#,
            &mut to_node,
            &mut out,
        );
        let got = answers(&mut out);
        assert_eq!(got[0]["Type"], "Error", "{got:?}");
        let got = node_says(&mut s, &welcome());
        let refreshes: Vec<_> = got.iter().filter(|m| m["Type"] == "Refresh").collect();
        assert_eq!(refreshes.len(), 1, "{got:?}");
        assert_eq!(refreshes[0]["ID"], 1);
        assert_eq!(refreshes[0]["State"]["Stream"], "Open", "{got:?}");
        assert_eq!(
            refreshes[0]["Key"]["Elements"]["ApplicationId"], "257",
            "{got:?}"
        );
    }

    #[test]
    fn a_login_reissue_answers_for_the_user_logged_in_and_may_not_name_another() {
        let (mut s, mut to_node) = ready_session();
        let mut out = JsonOut::default();
        s.on_client_text(
            r#"{"ID":1,"Domain":"Login","Key":{"Name":"admin","Elements":{"Password":"x"}}}"#,
            &mut to_node,
            &mut out,
        );
        let got = answers(&mut out);
        assert_eq!(got[0]["Type"], "Error", "{got:?}");
        assert!(
            got[0]["Text"]
                .as_str()
                .unwrap()
                .contains("logged in as \"u\""),
            "{got:?}"
        );
        s.on_client_text(
            r#"{"ID":1,"Domain":"Login","Key":{"Name":"u"}}"#,
            &mut to_node,
            &mut out,
        );
        let got = answers(&mut out);
        assert_eq!(
            (got[0]["Type"].as_str(), got[0]["Key"]["Name"].as_str()),
            (Some("Refresh"), Some("u"))
        );
    }

    #[test]
    fn an_off_stream_post_id_waiting_for_its_ack_is_not_taken_again() {
        let (mut s, mut to_node) = ready_session();
        to_node.clear();
        let post = |id: i64| {
            format!(
                r#"{{"ID":{id},"Type":"Post","Domain":"MarketPrice","Ack":true,"PostID":5,"Key":{{"Name":"X","Service":"FEED"}},"Message":{{"ID":0,"Type":"Update","Fields":{{"BID":1.5}}}}}}"#
            )
        };
        let mut out = JsonOut::default();
        s.on_client_text(&post(10), &mut to_node, &mut out);
        s.on_client_text(&post(11), &mut to_node, &mut out);
        assert_eq!(posts_sent(&to_node).len(), 1, "the second is refused");
        let got = answers(&mut out);
        assert_eq!(
            (got[0]["ID"].as_i64(), got[0]["Type"].as_str()),
            (Some(11), Some("Ack")),
            "{got:?}"
        );
        assert!(got[0]["NakCode"].is_string(), "{got:?}");
        let acked = node_says(
            &mut s,
            &Message::Ack(Ack {
                stream_id: 0,
                post_id: 5,
                nak: None,
                text: "",
            }),
        );
        assert_eq!(
            acked,
            vec![serde_json::json!({"ID":10,"Type":"Ack","AckID":5})]
        );
    }

    #[test]
    fn a_directory_stream_of_one_service_hears_only_of_it_and_none_opens_before_a_login() {
        use tickwire_proto::{Directory, ServiceState};
        let mut fresh = session();
        let (mut to_node, mut out) = (Vec::new(), JsonOut::default());
        fresh.on_client_text(r#"{"ID":7,"Domain":"Source"}"#, &mut to_node, &mut out);
        let got = answers(&mut out);
        assert!(
            got[0]["State"]["Text"]
                .as_str()
                .unwrap()
                .contains("login required"),
            "{got:?}"
        );
        let (mut s, mut to_node) = ready_session();
        // Service 2 is OTHER.
        s.on_client_text(
            r#"{"ID":7,"Domain":"Source","Key":{"Service":2}}"#,
            &mut to_node,
            &mut out,
        );
        answers(&mut out);
        let down =
            |name: &'static str| Message::Directory(Directory::of([(name, ServiceState::Down)]));
        assert!(
            node_says(&mut s, &down("FEED")).is_empty(),
            "not the service asked about"
        );
        let got = node_says(&mut s, &down("OTHER"));
        assert_eq!(got[0]["Map"]["Entries"][0]["Key"], 2, "{got:?}");
    }

    /// Directory streams on two IDs (one per service, as RSSL consumers may open) each
    /// hear of their own service; closing one leaves the other; past the bound a new
    /// one is refused, a request on an open one's ID is not.
    #[test]
    fn directory_streams_on_two_ids_each_hear_of_their_service_up_to_a_bound() {
        use tickwire_proto::{Directory, ServiceState};
        let (mut s, mut to_node) = ready_session();
        let mut out = JsonOut::default();
        for (id, service) in [(7, 1), (8, 2)] {
            s.on_client_text(
                &format!(r#"{{"ID":{id},"Domain":"Source","Key":{{"Service":{service}}}}}"#),
                &mut to_node,
                &mut out,
            );
        }
        let got = answers(&mut out);
        assert_eq!(got.len(), 2, "{got:?}");
        let down =
            |name: &'static str| Message::Directory(Directory::of([(name, ServiceState::Down)]));
        let got = node_says(&mut s, &down("FEED"));
        assert_eq!((got.len(), got[0]["ID"].as_i64()), (1, Some(7)), "{got:?}");
        let got = node_says(&mut s, &down("OTHER"));
        assert_eq!((got.len(), got[0]["ID"].as_i64()), (1, Some(8)), "{got:?}");
        s.on_client_text(r#"{"ID":7,"Type":"Close"}"#, &mut to_node, &mut out);
        let up = |name: &'static str| Message::Directory(Directory::of([(name, ServiceState::Up)]));
        assert!(node_says(&mut s, &up("FEED")).is_empty(), "7 was closed");
        let got = node_says(&mut s, &up("OTHER"));
        assert_eq!(got[0]["ID"], 8, "{got:?}");

        for id in 100..100 + directory::MAX_DIRECTORY_STREAMS as i64 {
            s.on_client_text(
                &format!(r#"{{"ID":{id},"Domain":"Source"}}"#),
                &mut to_node,
                &mut out,
            );
        }
        let got = answers(&mut out);
        let refused: Vec<&Json> = got.iter().filter(|a| a["Type"] == "Status").collect();
        assert_eq!(refused.len(), 1, "{got:?}");
        assert_eq!(refused[0]["State"]["Stream"], "Closed", "{got:?}");
        assert!(
            refused[0]["State"]["Text"]
                .as_str()
                .unwrap()
                .contains("close one first"),
            "{got:?}"
        );
        s.on_client_text(r#"{"ID":8,"Domain":"Source"}"#, &mut to_node, &mut out);
        let got = answers(&mut out);
        assert_eq!(got[0]["Type"], "Refresh", "a reissue is answered: {got:?}");
    }

    /// Two directory requests made before the login was answered are both answered
    /// after it (the second no longer replaced the first).
    #[test]
    fn directory_requests_before_the_logins_answer_are_all_answered_after_it() {
        let (mut s, mut to_node, mut out) = logged_in_session();
        answers(&mut out);
        for id in [7, 8] {
            s.on_client_text(
                &format!(r#"{{"ID":{id},"Domain":"Source"}}"#),
                &mut to_node,
                &mut out,
            );
        }
        assert!(
            answers(&mut out).is_empty(),
            "held until the login is answered"
        );
        let got = node_says(&mut s, &welcome());
        let ids: Vec<_> = got
            .iter()
            .filter(|a| a["Domain"] == "Source")
            .map(|a| a["ID"].as_i64())
            .collect();
        assert_eq!(ids, [Some(7), Some(8)], "{got:?}");
    }

    #[test]
    fn a_reissue_that_cannot_be_sent_closes_the_stream_in_the_node_too() {
        let (mut s, mut to_node) = ready_session();
        let mut out = JsonOut::default();
        s.on_client_text(r#"{"ID":5,"Key":{"Name":"A"}}"#, &mut to_node, &mut out);
        to_node.clear();
        answers(&mut out);
        let long = "X".repeat(70_000);
        s.on_client_text(
            &format!(r#"{{"ID":5,"Key":{{"Name":"{long}"}}}}"#),
            &mut to_node,
            &mut out,
        );
        assert_eq!(messages(&to_node), ["Close"]);
        let got = answers(&mut out);
        assert_eq!(
            (got[0]["ID"].as_i64(), got[0]["State"]["Stream"].as_str()),
            (Some(5), Some("Closed")),
            "{got:?}"
        );
        assert!(s.streams.is_empty() && s.by_json.is_empty());
    }

    /// A request on an open ID for another item opens a new stream and closes the old
    /// one at the node: what was still on its way for the old one is not shown under the
    /// new item's name, and the old one's end does not end the new one.
    #[test]
    fn another_item_under_an_open_id_gets_a_stream_of_its_own() {
        let (mut s, mut to_node) = ready_session();
        let mut out = JsonOut::default();
        s.on_client_text(r#"{"ID":5,"Key":{"Name":"NOPE"}}"#, &mut to_node, &mut out);
        let old = requests(&to_node)[0].0;
        to_node.clear();
        s.on_client_text(r#"{"ID":5,"Key":{"Name":"SYM7"}}"#, &mut to_node, &mut out);
        answers(&mut out);
        assert_eq!(messages(&to_node), ["Close", "Request"]);
        let new = requests(&to_node)[0].0;
        assert_ne!(old, new);
        assert!(update_says(&mut s, old).is_empty(), "the old item's update");
        let closed = Message::Status(tickwire_proto::Status {
            stream_id: old,
            state: tickwire_proto::State {
                stream: StreamState::Closed,
                data: DataState::Suspect,
                code: code::NOT_FOUND,
                text: "item \"NOPE\" not found",
            },
        });
        assert!(node_says(&mut s, &closed).is_empty(), "the old item's end");
        let got = update_says(&mut s, new);
        assert_eq!(got[0]["ID"], 5, "{got:?}");
        // The new stream is still the ID's: a Close reaches it.
        to_node.clear();
        s.on_client_text(r#"{"ID":5,"Type":"Close"}"#, &mut to_node, &mut out);
        assert_eq!(messages(&to_node), ["Close"]);
        // The same item again under an open ID stays on its stream (a re-issue).
        s.on_client_text(r#"{"ID":6,"Key":{"Name":"A"}}"#, &mut to_node, &mut out);
        to_node.clear();
        s.on_client_text(
            r#"{"ID":6,"Key":{"Name":"A"},"View":["BID"]}"#,
            &mut to_node,
            &mut out,
        );
        assert_eq!(messages(&to_node), ["Request"]);
    }

    /// A Source Directory request on the ID of an open item stream takes the ID from
    /// it, as a request for another item does: the item's stream is closed at the node,
    /// so its updates do not come on the directory's ID, and a Close of the ID does not
    /// leave it open where nothing reaches it.
    #[test]
    fn a_directory_request_on_an_open_items_id_closes_the_item() {
        let (mut s, mut to_node) = ready_session();
        let mut out = JsonOut::default();
        s.on_client_text(r#"{"ID":5,"Key":{"Name":"SYM7"}}"#, &mut to_node, &mut out);
        let sid = requests(&to_node)[0].0;
        to_node.clear();
        s.on_client_text(r#"{"ID":5,"Domain":"Source"}"#, &mut to_node, &mut out);
        assert_eq!(messages(&to_node), ["Close"]);
        let got = answers(&mut out);
        assert!(
            got.iter().any(|m| m["ID"] == 5 && m["Domain"] == "Source"),
            "{got:?}"
        );
        assert!(update_says(&mut s, sid).is_empty(), "the item's update");
        assert_eq!(s.stream_count(), 0);
    }

    /// A batch on the ID of an open item stream: the batch's Status closes that ID, so
    /// the item's stream is closed at the node (its updates would otherwise go on
    /// coming on an ID the client was told is closed). A batch on the login's ID is
    /// refused, as a single request there is: its Status would close the login's ID.
    #[test]
    fn a_batch_on_an_open_items_id_closes_the_item_and_one_on_the_logins_id_is_refused() {
        let (mut s, mut to_node) = ready_session();
        let mut out = JsonOut::default();
        s.on_client_text(r#"{"ID":5,"Key":{"Name":"SYM7"}}"#, &mut to_node, &mut out);
        let sid = requests(&to_node)[0].0;
        to_node.clear();
        s.on_client_text(
            r#"{"ID":5,"Key":{"Name":["A","B"]}}"#,
            &mut to_node,
            &mut out,
        );
        assert_eq!(messages(&to_node), ["Close", "Request", "Request"]);
        answers(&mut out);
        assert!(update_says(&mut s, sid).is_empty(), "the item's update");
        assert_eq!(s.stream_count(), 2, "A and B");

        to_node.clear();
        s.on_client_text(
            r#"{"ID":1,"Key":{"Name":["C","D"]}}"#,
            &mut to_node,
            &mut out,
        );
        let got = answers(&mut out);
        assert_eq!(got[0]["Type"], "Error", "{got:?}");
        assert!(messages(&to_node).is_empty());
    }

    /// A request refused with a `Closed` Status on the ID of an open item stream (a
    /// service id the directory does not have, a domain not served) closes that item:
    /// its updates would otherwise go on coming on an ID the client was told is closed.
    #[test]
    fn a_request_refused_on_an_open_items_id_closes_the_item() {
        for refused in [
            r#"{"ID":5,"Key":{"Name":"SYM7","Service":99}}"#,
            r#"{"ID":5,"Domain":"MarketByOrder","Key":{"Name":"SYM7"}}"#,
        ] {
            let (mut s, mut to_node) = ready_session();
            let mut out = JsonOut::default();
            s.on_client_text(r#"{"ID":5,"Key":{"Name":"SYM7"}}"#, &mut to_node, &mut out);
            let sid = requests(&to_node)[0].0;
            to_node.clear();
            s.on_client_text(refused, &mut to_node, &mut out);
            let got = answers(&mut out);
            assert_eq!(got[0]["State"]["Stream"], "Closed", "{got:?}");
            assert_eq!(messages(&to_node), ["Close"], "{refused}");
            assert!(
                update_says(&mut s, sid).is_empty(),
                "{refused}: the item's update"
            );
            assert_eq!(s.stream_count(), 0);
        }
    }

    /// Such a request on the login's or the directory's ID is an Error, and both stay
    /// open: a Closed Status on the login's ID ends the login for the client.
    #[test]
    fn a_request_refused_on_the_logins_or_the_directorys_id_is_an_error() {
        use tickwire_proto::{Directory, ServiceState};
        let (mut s, mut to_node) = ready_session();
        let mut out = JsonOut::default();
        s.on_client_text(r#"{"ID":7,"Domain":"Source"}"#, &mut to_node, &mut out);
        answers(&mut out);
        to_node.clear();
        for refused in [
            r#"{"ID":1,"Domain":"MarketByOrder","Key":{"Name":"A"}}"#,
            r#"{"ID":1,"Key":{"Name":"A","Service":99}}"#,
            r#"{"ID":7,"Domain":"MarketByOrder","Key":{"Name":"A"}}"#,
            r#"{"ID":7,"Key":{"Name":"A","Service":99}}"#,
        ] {
            s.on_client_text(refused, &mut to_node, &mut out);
            let got = answers(&mut out);
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(got[0]["Type"], "Error", "{refused}: {got:?}");
        }
        assert!(messages(&to_node).is_empty());
        assert_eq!(s.logged_in(), Some(1));
        let down = Message::Directory(Directory::of([("FEED", ServiceState::Down)]));
        assert_eq!(
            node_says(&mut s, &down)[0]["ID"],
            7,
            "the directory's update"
        );
    }

    /// A request without a Service goes to the first service the user may read: not to
    /// one the node has since removed from the user's directory (a users file reload).
    #[test]
    fn a_request_without_a_service_skips_a_service_removed_since() {
        use tickwire_proto::{Directory, ServiceState};
        let (mut s, mut to_node) = ready(Session::new(Arc::new(SessionConfig::default())));
        let mut out = JsonOut::default();
        s.on_client_text(r#"{"ID":20,"Key":{"Name":"SYM1"}}"#, &mut to_node, &mut out);
        let removed = Message::Directory(Directory::of([("FEED", ServiceState::Removed)]));
        node_says(&mut s, &removed);
        s.on_client_text(r#"{"ID":21,"Key":{"Name":"SYM1"}}"#, &mut to_node, &mut out);
        let sent: Vec<String> = tickwire_proto::MessageIter::new(&to_node)
            .filter_map(|m| match m.unwrap().message {
                Message::Request(r) => Some(r.service.to_string()),
                _ => None,
            })
            .collect();
        assert_eq!(sent, ["FEED", "OTHER"]);
    }

    /// Values of the wrong type are errors, not defaults or skips: a batch's non-string
    /// entry moved every later item to another ID, and "Streaming":"false" streamed;
    /// the RDM's domain numbers name their domains.
    #[test]
    fn values_of_the_wrong_type_are_errors_and_domain_numbers_name_their_domains() {
        let (mut s, mut to_node) = ready_session();
        let mut out = JsonOut::default();
        for bad in [
            r#"{"ID":5,"Key":{"Name":["SYM0",5,"SYM2"]}}"#,
            r#"{"ID":5,"Key":{"Name":"SYM0"},"Streaming":"false"}"#,
            r#"{"ID":5,"Key":{"Name":"SYM0"},"KeyInUpdates":0}"#,
            r#"{"ID":5,"Key":{"Name":"SYM0"},"Domain":[6]}"#,
        ] {
            to_node.clear();
            s.on_client_text(bad, &mut to_node, &mut out);
            let got = answers(&mut out);
            assert_eq!(got[0]["Type"], "Error", "{bad}: {got:?}");
            assert!(
                to_node.is_empty(),
                "{bad}: sent the node {:?}",
                messages(&to_node)
            );
        }
        s.on_client_text(
            r#"{"ID":5,"Key":{"Name":"SYM0"},"Domain":6}"#,
            &mut to_node,
            &mut out,
        );
        assert_eq!(messages(&to_node), ["Request"]);
        s.on_client_text(
            r#"{"ID":6,"Key":{"Name":"SYM0"},"Domain":7}"#,
            &mut to_node,
            &mut out,
        );
        let got = answers(&mut out);
        assert_eq!(got.last().unwrap()["State"]["Stream"], "Closed", "{got:?}");
        // The directory's Streaming, a post's Ack and Domain alike.
        for bad in [
            r#"{"ID":3,"Domain":"Source","Streaming":"false"}"#,
            r#"{"ID":5,"Type":"Post","Ack":"true","PostID":7,"Message":{"Type":"Update","Fields":{"BID":1}}}"#,
        ] {
            s.on_client_text(bad, &mut to_node, &mut out);
            let got = answers(&mut out);
            assert_eq!(got[0]["Type"], "Error", "{bad}: {got:?}");
        }
        to_node.clear();
        s.on_client_text(
            r#"{"ID":5,"Type":"Post","Ack":true,"PostID":8,"Domain":7,"Message":{"Type":"Update","Fields":{"BID":1}}}"#,
            &mut to_node,
            &mut out,
        );
        let got = answers(&mut out);
        assert_eq!(
            (got[0]["Type"].as_str(), got[0]["AckID"].as_i64()),
            (Some("Ack"), Some(8)),
            "{got:?}"
        );
        assert!(got[0]["NakCode"].is_string(), "{got:?}");
        assert!(to_node.is_empty());
        // A login's user name is a string.
        let mut fresh = session();
        fresh.on_client_text(
            r#"{"ID":1,"Domain":"Login","Key":{"Name":["alice"]}}"#,
            &mut to_node,
            &mut out,
        );
        let got = answers(&mut out);
        assert_eq!(got[0]["Type"], "Error", "{got:?}");
        assert!(to_node.is_empty());
    }

    /// A Source Directory request sent with the Login is answered after the login is
    /// (it was answered before, even for a login then refused).
    #[test]
    fn a_directory_asked_before_the_login_is_answered_after_it() {
        let (mut s, mut to_node, mut out) = logged_in_session();
        answers(&mut out);
        s.on_client_text(r#"{"ID":2,"Domain":"Source"}"#, &mut to_node, &mut out);
        assert!(answers(&mut out).is_empty(), "answered before the login");
        let got = node_says(&mut s, &welcome());
        let domains: Vec<&str> = got.iter().filter_map(|m| m["Domain"].as_str()).collect();
        assert_eq!(domains, ["Login", "Source"], "{got:?}");
    }

    /// A directory asked before the login holds its ID already: an item may not take
    /// it meanwhile (the directory would open on the item's ID once the login is).
    #[test]
    fn a_directory_asked_before_the_login_keeps_its_id_from_items() {
        let (mut s, mut to_node, mut out) = logged_in_session();
        answers(&mut out);
        s.on_client_text(r#"{"ID":2,"Domain":"Source"}"#, &mut to_node, &mut out);
        to_node.clear();
        s.on_client_text(r#"{"ID":2,"Key":{"Name":"A"}}"#, &mut to_node, &mut out);
        let got = answers(&mut out);
        assert_eq!(got[0]["Type"], "Error", "{got:?}");
        assert!(messages(&to_node).is_empty());
        assert_eq!(s.stream_count(), 0);
    }

    /// A directory asked before the login and closed before the login is answered: it
    /// does not open once the login is, and its ID is free for an item.
    #[test]
    fn a_directory_asked_and_closed_before_the_login_does_not_open_after_it() {
        use tickwire_proto::{Directory, ServiceState};
        let (mut s, mut to_node, mut out) = logged_in_session();
        s.on_client_text(r#"{"ID":2,"Domain":"Source"}"#, &mut to_node, &mut out);
        s.on_client_text(r#"{"ID":2,"Type":"Close"}"#, &mut to_node, &mut out);
        assert!(answers(&mut out).is_empty());
        let got = node_says(&mut s, &welcome());
        let domains: Vec<&str> = got.iter().filter_map(|m| m["Domain"].as_str()).collect();
        assert_eq!(domains, ["Login"], "{got:?}");
        let up = Message::Directory(Directory::of([("FEED", ServiceState::Up)]));
        assert!(node_says(&mut s, &up).is_empty(), "an update on ID 2");
        to_node.clear();
        s.on_client_text(r#"{"ID":2,"Key":{"Name":"A"}}"#, &mut to_node, &mut out);
        assert!(answers(&mut out).is_empty());
        assert_eq!(messages(&to_node), ["Request"]);
    }

    /// A snapshot of the directory on the ID of its open stream: its `NonStreaming`
    /// refresh ends the stream, so no update follows on that ID.
    #[test]
    fn a_directory_snapshot_on_the_open_directorys_id_ends_its_stream() {
        use tickwire_proto::{Directory, ServiceState};
        let (mut s, mut to_node) = ready_session();
        let mut out = JsonOut::default();
        s.on_client_text(r#"{"ID":7,"Domain":"Source"}"#, &mut to_node, &mut out);
        s.on_client_text(
            r#"{"ID":7,"Domain":"Source","Streaming":false}"#,
            &mut to_node,
            &mut out,
        );
        let got = answers(&mut out);
        assert_eq!(got[1]["State"]["Stream"], "NonStreaming", "{got:?}");
        let down = Message::Directory(Directory::of([("FEED", ServiceState::Down)]));
        assert!(node_says(&mut s, &down).is_empty(), "an update on ID 7");
    }

    /// A directory on the login's ID is refused: closing it would end the login.
    #[test]
    fn the_directory_may_not_take_the_logins_id() {
        let (mut s, mut to_node) = ready_session();
        let mut out = JsonOut::default();
        s.on_client_text(r#"{"ID":1,"Domain":"Source"}"#, &mut to_node, &mut out);
        let got = answers(&mut out);
        assert_eq!(got[0]["Type"], "Error", "{got:?}");
        assert!(s.directories.is_empty());
    }

    /// The requests the session sent the node: (stream id, view, refresh).
    fn requests(bytes: &[u8]) -> Vec<(u32, Option<Vec<i16>>, bool)> {
        tickwire_proto::MessageIter::new(bytes)
            .filter_map(|m| match m.unwrap().message {
                Message::Request(r) => Some((r.stream_id, r.view.map(|v| v.fids()), r.refresh)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn refresh_false_on_an_open_id_changes_its_view_in_place() {
        let (mut s, mut to_node) = ready_session();
        let mut out = JsonOut::default();
        s.on_client_text(
            r#"{"ID":5,"Key":{"Name":"A"},"View":["BID"]}"#,
            &mut to_node,
            &mut out,
        );
        let opened = requests(&to_node);
        assert_eq!(opened.len(), 1);
        let (sid, _, _) = opened[0];
        to_node.clear();
        answers(&mut out);
        // The same stream, the new view, no refresh; nothing closed.
        s.on_client_text(
            r#"{"ID":5,"Key":{"Name":"A"},"View":["BID","ASK"],"Refresh":false}"#,
            &mut to_node,
            &mut out,
        );
        assert_eq!(requests(&to_node), [(sid, Some(vec![22, 25]), false)]);
        assert_eq!(messages(&to_node), ["Request"]);
        assert!(answers(&mut out).is_empty());
        assert_eq!(s.streams[&sid].view.as_deref(), Some(&[22, 25][..]));
        // On an ID not open, `"Refresh": false` opens it as any request, with its image.
        to_node.clear();
        s.on_client_text(
            r#"{"ID":6,"Key":{"Name":"B"},"Refresh":false}"#,
            &mut to_node,
            &mut out,
        );
        let opened = requests(&to_node);
        assert!(matches!(&opened[..], [(_, None, true)]), "{opened:?}");
        // Another item on an open ID is a request for it, with its image, on a stream
        // of its own (the old one closed).
        to_node.clear();
        s.on_client_text(
            r#"{"ID":5,"Key":{"Name":"C"},"Refresh":false}"#,
            &mut to_node,
            &mut out,
        );
        let reopened = requests(&to_node);
        assert!(
            matches!(&reopened[..], [(new, None, true)] if *new != sid),
            "{reopened:?}"
        );
        assert_eq!(messages(&to_node), ["Close", "Request"]);
        assert_eq!(s.streams[&s.by_json[&5]].name, "C");
    }
}
