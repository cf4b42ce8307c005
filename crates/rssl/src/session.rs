//! One RSSL consumer's session: its RWF messages in, the node's own messages out, and
//! back.
//!
//! The session keeps the consumer's stream ids apart from the node's (1, 2, 3 ...
//! chosen here) and its service ids apart from the node's service names (numbered 1,
//! 2, 3 ... in the order the session first hears of them, stable for the session).
//! - Login: the consumer's Login request becomes the node's Login (the user, and the
//!   password element or the token as its secret); the node's Welcome becomes the login
//!   Refresh, a refusal the login's Status.
//! - Source Directory: answered here from the node's Directory messages, which the
//!   node sends after the Welcome and whenever a service changes.
//! - MarketPrice: streaming and snapshot requests, views (field id lists) and batches
//!   (item lists) become the node's Requests; its refreshes, updates and statuses
//!   come back as RWF. Other item domains are refused with a status that says so.
//!
//! To the node's core an RSSL consumer is a subscriber like any other: same limits,
//! same slow-consumer policy, same entitlements.

use crate::dictionary::{Downloads, RwfDictionary};
use crate::item_groups::ItemGroups;
use crate::provided_items::ProvidedItems;
use crate::rwf::container::{
    filter_action, map_action, put_array, ArrayIter, ElementIter, ElementListWriter,
    FieldListWriter, FilterListWriter, MapWriter,
};
use crate::rwf::msg::{
    self, begin_refresh, begin_update, class, code, data, domain, put_close, put_status, refresh,
    request, stream, Msg, MsgKey, RwfState,
};
use crate::rwf::primitive::{self, dt};
use crate::rwf::RwfError;
use crate::sequence::ItemSeq;
use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::Arc;
use tickwire_proto::{
    code as ncode, DataState, FieldList, Login, Message, Refresh, Request, Role, ServiceState,
    State, Status, StreamState, Update, UpdateType, Value, View, PROTOCOL_VERSION_MAX,
    PROTOCOL_VERSION_MIN,
};

/// Where the session's RWF messages go (the RIPC channel, or a test's list).
pub trait Outbox {
    /// One RWF message to send.
    fn send(&mut self, rwf: &[u8]);
    /// Whether more may be queued now (bulk output, such as a dictionary download,
    /// waits while it is false).
    fn has_room(&self) -> bool {
        true
    }
}

impl Outbox for Vec<Vec<u8>> {
    fn send(&mut self, rwf: &[u8]) {
        self.push(rwf.to_vec());
    }
}

/// Settings shared by every RSSL session of a node.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The node's name, in the login Refresh's text.
    pub node_name: String,
    /// The service of the node's own figures: listed like the others.
    pub vendor: String,
    /// Most items one batch request may name.
    pub max_batch: usize,
    /// Each field's RWF type.
    pub dictionary: Arc<RwfDictionary>,
    /// The dictionaries' refreshes, for consumers that download them.
    pub downloads: Arc<Downloads>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            node_name: "tickwire".into(),
            vendor: "Tickwire".into(),
            max_batch: 10_000,
            dictionary: Arc::new(RwfDictionary::from_native(
                &tickwire_proto::Dictionary::market_price(),
            )),
            downloads: Arc::new(Downloads::default()),
        }
    }
}

/// Directory filter ids (and their bits in a request's filter).
const FILTER_INFO: u8 = 1;
const FILTER_STATE: u8 = 2;
/// Login element names.
const EL_PASSWORD: &[u8] = b"Password";
const EL_AUTHN_TOKEN: &[u8] = b"AuthenticationToken";
const EL_APPLICATION_ID: &[u8] = b"ApplicationId";
const EL_APPLICATION_NAME: &[u8] = b"ApplicationName";
const EL_POSITION: &[u8] = b"Position";
const EL_ROLE: &[u8] = b"Role";
/// The login's `Role` of a (non-interactive) provider; consumers say 0.
const ROLE_PROVIDER: u64 = 1;
/// The login name type of an authentication token.
const NAME_TYPE_AUTHN_TOKEN: u8 = 5;
/// Batch and view element names.
const EL_ITEM_LIST: &[u8] = b":ItemList";
const EL_VIEW_TYPE: &[u8] = b":ViewType";
const EL_VIEW_DATA: &[u8] = b":ViewData";
/// `:ViewType` 1: a list of field ids.
const VIEW_FIELD_IDS: u64 = 1;

#[derive(Debug)]
enum LoginState {
    None,
    Pending { stream: i32, user: String },
    Open { stream: i32, user: String },
}

/// One item stream: the consumer's id and what it asked for.
#[derive(Debug)]
struct ItemStream {
    rssl: i32,
    service_id: u16,
    name: Vec<u8>,
    streaming: bool,
    private: bool,
    /// Paused by the consumer (`PAUSE`): its updates are not sent until a reissue
    /// without it resumes the stream.
    paused: bool,
    /// The view the node's stream has (`None`: every field); the items of one batch
    /// share their request's.
    view: Option<Arc<[i16]>>,
    /// The node's streams this stream had before a reissue replaced them, whose posts
    /// still wait for their Acks (the node answers a post on the stream it came on).
    replaced: Vec<u32>,
}

/// What an item request asks of each item it opens (a batch names several items).
struct ItemRequest<'a> {
    service_id: u16,
    service: &'a str,
    streaming: bool,
    private: bool,
    view: Option<Arc<[i16]>>,
    paused: bool,
}

/// A service as the session numbers it.
#[derive(Debug)]
struct Service {
    name: String,
    id: u16,
    state: ServiceState,
}

/// The RSSL side of one consumer connection.
pub struct Session {
    cfg: Arc<SessionConfig>,
    login: LoginState,
    /// The node's services as this session numbers them: service id `i + 1` is
    /// `services[i]`, in the order first heard; a removed service keeps its id.
    services: Vec<Service>,
    /// `services` by name.
    service_by_name: FxHashMap<Box<str>, usize>,
    /// The consumer's streaming directory streams: each one's id, the filter it asked
    /// for, and the service (if it asked about one).
    directories: Vec<(i32, u32, Option<u16>)>,
    /// Open item streams by the node's stream id.
    streams: FxHashMap<u32, ItemStream>,
    /// The node's stream id of each of the consumer's item streams.
    by_rssl: FxHashMap<i32, u32>,
    next_native: u32,
    buf: Vec<u8>,
    /// Dictionary refreshes still to send.
    downloads: Vec<Download>,
    /// A non-interactive provider's publishing (its login said role 1).
    provider: Option<Box<provider::Provider>>,
    /// Posts waiting for the node's answer.
    pending_posts: post::PendingPosts,
    /// The consumer logged out, or its login was refused: close once written.
    pub finished: bool,
    /// The session's own answers to the node's messages (a non-interactive provider's
    /// refusal of a post), for the node: see [`Session::drain_answers`].
    answers: Vec<u8>,
}

/// A dictionary being sent, a part at a time as the connection has room.
#[derive(Debug)]
struct Download {
    stream: i32,
    /// The field dictionary (`RWFFld`), else the enumeration tables (`RWFEnum`).
    fields: bool,
    /// Verbosity 0 (INFO): the summary alone.
    info_only: bool,
    next_part: usize,
    name: Vec<u8>,
    service_id: Option<u16>,
    filter: u32,
    streaming: bool,
}

/// Most node streams a consumer's item stream keeps, once replaced by reissues, for the
/// Acks of the posts made on them.
const MAX_REPLACED: usize = 16;

/// The dictionaries' names in the Dictionary domain and the directory.
const FIELD_DICTIONARY: &[u8] = b"RWFFld";
const ENUM_DICTIONARY: &[u8] = b"RWFEnum";
/// At most this many streaming directory streams open on one connection.
const MAX_DIRECTORY_STREAMS: usize = 16;
/// At most this many downloads in progress on one connection (the two dictionaries,
/// and a repeat of each).
const MAX_DOWNLOADS: usize = 4;

impl Session {
    /// Appends to `to_node` what the session answers the node itself (node messages,
    /// for `Node::on_frame`), once the node's messages have been handed to it.
    pub fn drain_answers(&mut self, to_node: &mut Vec<u8>) {
        to_node.append(&mut self.answers);
    }

    /// The service this session numbers `id`.
    fn service(&self, id: u16) -> Option<&Service> {
        self.services.get(usize::from(id).checked_sub(1)?)
    }

    /// A session before the consumer's login.
    pub fn new(cfg: Arc<SessionConfig>) -> Self {
        Session {
            cfg,
            login: LoginState::None,
            services: Vec::new(),
            service_by_name: FxHashMap::default(),
            directories: Vec::new(),
            streams: FxHashMap::default(),
            by_rssl: FxHashMap::default(),
            next_native: 1,
            buf: Vec::with_capacity(1024),
            downloads: Vec::new(),
            pending_posts: post::PendingPosts::default(),
            answers: Vec::new(),
            provider: None,
            finished: false,
        }
    }

    /// Streams open.
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// The consumer's login stream, once it asked to log in.
    fn login_stream(&self) -> Option<i32> {
        match &self.login {
            LoginState::None => None,
            LoginState::Pending { stream, .. } | LoginState::Open { stream, .. } => Some(*stream),
        }
    }

    /// The user logged in (or asking to).
    pub fn user(&self) -> Option<&str> {
        match &self.login {
            LoginState::None => None,
            LoginState::Pending { user, .. } | LoginState::Open { user, .. } => Some(user),
        }
    }

    /// One RWF message from the consumer: what it means for the node goes to `to_node`
    /// (the node's own messages, encoded), answers of the session's own to `out`.
    pub fn on_client_message(&mut self, rwf: &[u8], to_node: &mut Vec<u8>, out: &mut impl Outbox) {
        let m = match Msg::decode(rwf) {
            Ok(m) => m,
            Err(e) => {
                // Which stream it was for may be readable even when the rest is not.
                let (dom, sid) = if rwf.len() >= 8 {
                    (rwf[3], i32::from_be_bytes([rwf[4], rwf[5], rwf[6], rwf[7]]))
                } else {
                    (domain::LOGIN, 0)
                };
                let text = format!("malformed message: {e}");
                self.close_stream(out, dom, sid, code::INVALID_ARGUMENT, &text);
                self.end_stream(dom, sid, ncode::MALFORMED, &text, to_node);
                return;
            }
        };
        match (m.class, m.domain) {
            (class::REQUEST, domain::LOGIN) => self.on_login(&m, to_node, out),
            (class::CLOSE, domain::LOGIN) => {
                if matches!(&self.login, LoginState::Open { stream, .. } | LoginState::Pending { stream, .. } if *stream == m.stream_id)
                {
                    self.finished = true;
                }
            }
            (class::GENERIC, domain::LOGIN) => {} // RTT and the like: nothing to do
            (_, _) if !matches!(self.login, LoginState::Open { .. }) => {
                self.refuse(
                    out,
                    to_node,
                    &m,
                    code::NOT_ENTITLED,
                    "log in first (a Login request on its own stream)",
                );
            }
            _ if self.provider.is_some() => self.on_provider_message(&m, to_node, out),
            (class::REQUEST, domain::SOURCE) => self.on_directory_request(&m, to_node, out),
            (class::CLOSE, domain::SOURCE) => {
                self.directories.retain(|&(s, _, _)| s != m.stream_id);
            }
            (class::REQUEST, domain::DICTIONARY) => self.on_dictionary_request(&m, to_node, out),
            (class::CLOSE, domain::DICTIONARY) => {
                self.downloads.retain(|d| d.stream != m.stream_id)
            }
            (class::REQUEST, domain::MARKET_PRICE) => self.on_item_request(&m, to_node, out),
            (class::REQUEST, other) => {
                let text = format!(
                    "the {} domain is not carried: Tickwire serves MarketPrice items",
                    domain::name(other)
                );
                self.refuse(out, to_node, &m, code::USAGE_ERROR, &text);
            }
            (class::CLOSE, _) => self.on_close(m.stream_id, to_node),
            (class::POST, _) => self.on_post(&m, to_node, out),
            (class::GENERIC, _) => {}
            (c, _) => {
                let text = format!("a message of class {c} is not expected from a consumer");
                self.refuse(out, to_node, &m, code::USAGE_ERROR, &text);
            }
        }
    }

    fn on_login(&mut self, m: &Msg<'_>, to_node: &mut Vec<u8>, out: &mut impl Outbox) {
        if !matches!(self.login, LoginState::None) {
            // A reissue of the open login (a new token, a pause): nothing changes. It
            // is answered as a request is, with a solicited refresh (the SDK's
            // watchlist takes no other as its answer, and asks again), unless it asks
            // for none.
            if let LoginState::Open { stream, user } = &self.login {
                if *stream == m.stream_id {
                    if m.flags & request::NO_REFRESH == 0 {
                        let (stream, user) = (*stream, user.clone());
                        self.login_refresh(stream, &user, out);
                    }
                    return;
                }
            }
            // Before the node accepted the login: its refresh answers this one too.
            if matches!(self.login, LoginState::Pending { stream, .. } if stream == m.stream_id) {
                return;
            }
            self.refuse(
                out,
                to_node,
                m,
                code::USAGE_ERROR,
                "a login is already open on this connection",
            );
            return;
        }
        let key = m.key.clone().unwrap_or_default();
        let name = String::from_utf8_lossy(key.name.unwrap_or(b"")).into_owned();
        let mut secret = String::new();
        let mut token = None;
        let mut app = String::from("rssl");
        let mut provider = false;
        if let Some((dt::ELEMENT_LIST, attrib)) = key.attrib {
            if let Ok(els) = ElementIter::new(attrib) {
                for e in els.flatten() {
                    let text = e.text().map(|t| String::from_utf8_lossy(t).into_owned());
                    match (e.name, text) {
                        (EL_PASSWORD, Some(t)) => secret = t,
                        (EL_AUTHN_TOKEN, Some(t)) => token = Some(t),
                        (EL_APPLICATION_NAME, Some(t)) => app = format!("rssl:{t}"),
                        (EL_ROLE, _) => provider = e.uint() == Some(ROLE_PROVIDER),
                        (EL_APPLICATION_ID | EL_POSITION, _) => {}
                        _ => {}
                    }
                }
            }
        }
        // A token login names no user: the token is the secret. The RDM puts it in
        // the AuthenticationToken element, with a name of one NUL byte (as the ETA
        // Consumer's `-at` sends it); a name that is the token is taken too.
        let user = if key.name_type == Some(NAME_TYPE_AUTHN_TOKEN) {
            secret = token.unwrap_or(name);
            String::new()
        } else {
            name
        };
        let login = Message::Login(Login {
            version_min: PROTOCOL_VERSION_MIN,
            version_max: PROTOCOL_VERSION_MAX,
            role: if provider {
                Role::Publisher
            } else {
                Role::Subscriber
            },
            application: &app,
            user: &user,
            token: &secret,
            slow_consumer: None,
        });
        if login.encode(to_node).is_err() {
            self.refuse(
                out,
                to_node,
                m,
                code::INVALID_ARGUMENT,
                "login fields too long",
            );
            self.finished = true;
            return;
        }
        self.login = LoginState::Pending {
            stream: m.stream_id,
            user,
        };
        if provider {
            self.provider = Some(Box::default());
        }
    }

    /// The login Refresh: the answer to a Login request, the first or a reissue.
    fn login_refresh(&mut self, stream_id: i32, user: &str, out: &mut impl Outbox) {
        self.buf.clear();
        let text = format!("Login accepted by {}", self.cfg.node_name);
        let mut attrib = Vec::new();
        let mut el = ElementListWriter::begin(&mut attrib);
        el.uint(&mut attrib, "SingleOpen", 0);
        el.uint(&mut attrib, "AllowSuspectData", 1);
        el.uint(&mut attrib, "SupportBatchRequests", 1);
        el.uint(&mut attrib, "SupportViewRequests", 1);
        el.uint(&mut attrib, "SupportOMMPost", 1);
        el.uint(&mut attrib, "SupportOptimizedPauseResume", 0);
        el.uint(&mut attrib, "SupportStandby", 0);
        if self.provider.is_some() {
            // Providers without dictionary files of their own may download the node's.
            el.uint(&mut attrib, "SupportProviderDictionaryDownload", 1);
        }
        el.end(&mut attrib);
        let key = MsgKey {
            name: Some(user.as_bytes()),
            name_type: Some(1),
            attrib: Some((dt::ELEMENT_LIST, &attrib)),
            ..MsgKey::default()
        };
        let flags = refresh::SOLICITED | refresh::REFRESH_COMPLETE | refresh::CLEAR_CACHE;
        begin_refresh(
            &mut self.buf,
            domain::LOGIN,
            stream_id,
            flags,
            dt::NO_DATA,
            None,
            &RwfState::new(stream::OPEN, data::OK, code::NONE, &text),
            Some(&key),
            None,
            false,
        );
        out.send(&self.buf);
    }

    fn on_directory_request(&mut self, m: &Msg<'_>, to_node: &mut Vec<u8>, out: &mut impl Outbox) {
        let filter = m.key.as_ref().and_then(|k| k.filter).unwrap_or(0x3F);
        let only = m.key.as_ref().and_then(|k| k.service_id);
        // A request on an open directory stream changes it (with a refresh unless it
        // asks for none); one without streaming ends it with its refresh.
        let open = self.directories.iter().position(|d| d.0 == m.stream_id);
        match open {
            _ if m.flags & request::STREAMING == 0 => {
                self.directories.retain(|&(s, _, _)| s != m.stream_id)
            }
            Some(i) => {
                self.directories[i] = (m.stream_id, filter, only);
                // A reissue that asks for no refresh gets none.
                if m.flags & request::NO_REFRESH != 0 {
                    return;
                }
            }
            None if self.directories.len() >= MAX_DIRECTORY_STREAMS => {
                let text = format!("at most {MAX_DIRECTORY_STREAMS} directory streams at once");
                self.refuse(out, to_node, m, code::NO_RESOURCES, &text);
                return;
            }
            None => self.directories.push((m.stream_id, filter, only)),
        }
        let services: Vec<usize> = (0..self.services.len())
            .filter(|&i| self.services[i].state != ServiceState::Removed)
            .filter(|&i| only.is_none_or(|id| self.services[i].id == id))
            .collect();
        self.buf.clear();
        let st = if m.flags & request::STREAMING != 0 {
            stream::OPEN
        } else {
            stream::NON_STREAMING
        };
        let key = MsgKey {
            filter: Some(filter),
            service_id: only,
            ..MsgKey::default()
        };
        begin_refresh(
            &mut self.buf,
            domain::SOURCE,
            m.stream_id,
            refresh::SOLICITED | refresh::REFRESH_COMPLETE | refresh::CLEAR_CACHE,
            dt::MAP,
            None,
            &RwfState::new(st, data::OK, code::NONE, ""),
            Some(&key),
            None,
            false,
        );
        let mut buf = std::mem::take(&mut self.buf);
        self.directory_map(&mut buf, &services, filter, map_action::ADD);
        out.send(&buf);
        self.buf = buf;
    }

    /// The directory's map: one entry per service, with the filters asked for.
    fn directory_map(&self, out: &mut Vec<u8>, services: &[usize], filter: u32, action: u8) {
        let mut map = MapWriter::begin(out, dt::UINT, dt::FILTER_LIST);
        for &i in services {
            let s = &self.services[i];
            let mut key = Vec::new();
            primitive::put_uint(&mut key, s.id as u64);
            if s.state == ServiceState::Removed {
                map.entry(out, map_action::DELETE, &key, |_| {});
                continue;
            }
            map.entry(out, action, &key, |o| {
                let mut fl = FilterListWriter::begin(o, dt::ELEMENT_LIST);
                // INFO goes with updates too: the ETA Consumer example replaces its
                // cached service with an update's entry.
                if filter & (1 << (FILTER_INFO - 1)) != 0 {
                    fl.entry(o, filter_action::SET, FILTER_INFO, |o| {
                        let mut el = ElementListWriter::begin(o);
                        el.ascii(o, "Name", s.name.as_bytes());
                        el.ascii(o, "Vendor", self.cfg.vendor.as_bytes());
                        el.uint(o, "IsSource", 0);
                        // Dictionary among the capabilities: the SDK's watchlist does
                        // not request a domain the service does not list.
                        el.element(o, "Capabilities", dt::ARRAY, |o| {
                            let domains = [domain::DICTIONARY as u64, domain::MARKET_PRICE as u64];
                            put_array(o, dt::UINT, &domains, |o, v| primitive::put_uint(o, *v));
                        });
                        el.element(o, "DictionariesProvided", dt::ARRAY, |o| {
                            put_array(o, dt::ASCII_STRING, &["RWFFld", "RWFEnum"], |o, v| {
                                o.extend_from_slice(v.as_bytes())
                            });
                        });
                        el.element(o, "DictionariesUsed", dt::ARRAY, |o| {
                            put_array(o, dt::ASCII_STRING, &["RWFFld", "RWFEnum"], |o, v| {
                                o.extend_from_slice(v.as_bytes())
                            });
                        });
                        el.element(o, "QoS", dt::ARRAY, |o| {
                            put_array(
                                o,
                                dt::QOS,
                                &[primitive::QOS_REALTIME_TICK_BY_TICK],
                                |o, q| o.push(*q),
                            );
                        });
                        el.uint(o, "SupportsQoSRange", 0);
                        el.uint(o, "SupportsOutOfBandSnapshots", 0);
                        el.uint(o, "AcceptingConsumerStatus", 0);
                        el.end(o);
                    });
                }
                if filter & (1 << (FILTER_STATE - 1)) != 0 {
                    fl.entry(o, filter_action::SET, FILTER_STATE, |o| {
                        let up = (s.state == ServiceState::Up) as u64;
                        let mut el = ElementListWriter::begin(o);
                        el.uint(o, "ServiceState", up);
                        el.uint(o, "AcceptingRequests", up);
                        el.end(o);
                    });
                }
                fl.end(o);
            });
        }
        map.end(out);
    }

    fn on_dictionary_request(&mut self, m: &Msg<'_>, to_node: &mut Vec<u8>, out: &mut impl Outbox) {
        let key = m.key.clone().unwrap_or_default();
        let name = key.name.unwrap_or(b"");
        let fields = match name {
            FIELD_DICTIONARY => true,
            ENUM_DICTIONARY => false,
            other => {
                let text = format!(
                    "no dictionary {:?}: the node serves RWFFld and RWFEnum",
                    String::from_utf8_lossy(other)
                );
                self.refuse(out, to_node, m, code::NOT_FOUND, &text);
                return;
            }
        };
        self.downloads.retain(|d| d.stream != m.stream_id);
        if self.downloads.len() >= MAX_DOWNLOADS {
            let text = format!("at most {MAX_DOWNLOADS} dictionary downloads at once");
            self.refuse(out, to_node, m, code::NO_RESOURCES, &text);
            return;
        }
        let filter = key.filter.unwrap_or(0x7);
        self.downloads.push(Download {
            stream: m.stream_id,
            fields,
            info_only: filter == 0,
            next_part: 0,
            name: name.to_vec(),
            service_id: key.service_id,
            filter,
            streaming: m.flags & request::STREAMING != 0,
        });
        self.pump_downloads(out);
    }

    /// Dictionary parts are still to be sent ([`Session::pump_downloads`]).
    pub fn downloading(&self) -> bool {
        !self.downloads.is_empty()
    }

    /// Sends dictionary parts while the connection has room: call again when it drains.
    pub fn pump_downloads(&mut self, out: &mut impl Outbox) {
        let all = self.cfg.downloads.clone();
        while out.has_room() {
            let Some(d) = self.downloads.first_mut() else {
                return;
            };
            let parts = if d.fields { &all.fields } else { &all.enums };
            let info = if d.fields {
                &all.fields_info
            } else {
                &all.enums_info
            };
            let (payload, last) = if d.info_only || parts.is_empty() {
                (info, true)
            } else {
                (&parts[d.next_part], d.next_part + 1 == parts.len())
            };
            let mut flags = refresh::SOLICITED;
            if d.next_part == 0 {
                flags |= refresh::CLEAR_CACHE;
            }
            if last {
                flags |= refresh::REFRESH_COMPLETE;
            }
            let key = MsgKey {
                service_id: d.service_id,
                name: Some(&d.name),
                filter: Some(d.filter),
                ..MsgKey::default()
            };
            let st = if d.streaming {
                stream::OPEN
            } else {
                stream::NON_STREAMING
            };
            self.buf.clear();
            let state = RwfState::new(st, data::OK, code::NONE, "");
            begin_refresh(
                &mut self.buf,
                domain::DICTIONARY,
                d.stream,
                flags,
                dt::SERIES,
                None,
                &state,
                Some(&key),
                None,
                false,
            );
            self.buf.extend_from_slice(payload);
            out.send(&self.buf);
            d.next_part += 1;
            if last {
                self.downloads.remove(0);
            }
        }
    }

    fn on_item_request(&mut self, m: &Msg<'_>, to_node: &mut Vec<u8>, out: &mut impl Outbox) {
        let mut key = m.key.clone().unwrap_or_default();
        let streaming = m.flags & request::STREAMING != 0;
        let private = m.flags & request::PRIVATE_STREAM != 0;
        let paused = m.flags & request::PAUSE != 0;
        // A reissue (a request on an open item stream) may leave out what it keeps.
        let open = self
            .by_rssl
            .get(&m.stream_id)
            .and_then(|n| self.streams.get(n))
            .filter(|_| m.flags & request::HAS_BATCH == 0);
        if let Some(why) = open.and_then(|s| reissue_mismatch(s, &key, private)) {
            // As the SDK's providers answer: the stream is the item's, not another's.
            let text = format!("item request rejected for stream id {}: {why}", m.stream_id);
            self.refuse(out, to_node, m, code::USAGE_ERROR, &text);
            return;
        }
        let reissued = open.map(|s| (s.service_id, s.name.clone()));
        if let Some((id, name)) = &reissued {
            key.service_id = key.service_id.or(Some(*id));
            if key.name.is_none() {
                key.name = Some(name);
            }
        }
        let key = key;
        let Some(service_id) = key.service_id else {
            self.refuse(
                out,
                to_node,
                m,
                code::SOURCE_UNKNOWN,
                "the request names no service id (see the source directory)",
            );
            return;
        };
        let Some(service) = self
            .service(service_id)
            .filter(|s| s.state != ServiceState::Removed)
        else {
            self.refuse(
                out,
                to_node,
                m,
                code::SOURCE_UNKNOWN,
                &format!("service id {service_id} is not in the source directory"),
            );
            return;
        };
        let service_name = service.name.clone();
        let mut view: Option<Vec<i16>> = None;
        let mut batch: Vec<Vec<u8>> = Vec::new();
        if m.flags & (request::HAS_VIEW | request::HAS_BATCH) != 0 {
            if let Err(e) = parse_request_payload(m, &mut view, &mut batch, self.cfg.max_batch) {
                self.refuse(
                    out,
                    to_node,
                    m,
                    code::INVALID_ARGUMENT,
                    &format!("malformed request payload: {e}"),
                );
                return;
            }
            // A view in a batch's payload counts only when the request says so (RWF:
            // without HAS_VIEW, no view).
            if m.flags & request::HAS_VIEW == 0 {
                view = None;
            }
            if m.flags & request::HAS_VIEW != 0 && view.is_none() {
                self.refuse(
                    out,
                    to_node,
                    m,
                    code::INVALID_VIEW,
                    "a view request needs :ViewType 1 and :ViewData (field ids)",
                );
                return;
            }
        }
        // A reissue that wants no refresh changes the stream where it stands: its pause,
        // and its view (RWF: without `HAS_VIEW`, every field), which the node changes
        // in place; no image comes.
        let view: Option<Arc<[i16]>> = view.map(Into::into);
        if reissued.is_some() && m.flags & request::NO_REFRESH != 0 {
            self.change_in_place(m.stream_id, &service_name, view, paused, to_node);
            return;
        }
        if m.flags & request::HAS_BATCH != 0 {
            // Each item's request to the node carries the view: what one batch may make
            // of it is held to what a large message would carry.
            let fields = batch
                .len()
                .saturating_mul(view.as_ref().map_or(0, |v| v.len()));
            if fields > tickwire_proto::message::MAX_BATCH_VIEW_FIELDS {
                self.refuse(
                    out,
                    to_node,
                    m,
                    code::TOO_MANY_ITEMS,
                    &format!(
                        "a batch of {} items with a view of {} fields names {fields} fields in all, more than {}: split the batch",
                        batch.len(),
                        view.as_ref().map_or(0, |v| v.len()),
                        tickwire_proto::message::MAX_BATCH_VIEW_FIELDS
                    ),
                );
                return;
            }
        }
        let item_req = ItemRequest {
            service_id,
            service: &service_name,
            streaming,
            private,
            view,
            paused,
        };
        if m.flags & request::HAS_BATCH != 0 {
            if batch.len() > self.cfg.max_batch {
                self.refuse(
                    out,
                    to_node,
                    m,
                    code::TOO_MANY_ITEMS,
                    &format!(
                        "a batch of more than {} items exceeds the limit",
                        self.cfg.max_batch
                    ),
                );
                return;
            }
            // The batch's own stream closes; each item gets the ids that follow it, which
            // must stay a consumer's (positive) ids.
            if i64::from(m.stream_id) + batch.len() as i64 > i64::from(i32::MAX) {
                self.refuse(
                    out,
                    to_node,
                    m,
                    code::TOO_MANY_ITEMS,
                    &format!(
                        "a batch of {} items on stream {} would number its items past stream id {}",
                        batch.len(),
                        m.stream_id,
                        i32::MAX
                    ),
                );
                return;
            }
            let text = format!(
                "batch of {} items opened on streams {} and on",
                batch.len(),
                m.stream_id as i64 + 1
            );
            // A batch on an item's open stream closes that item too, in the node.
            self.on_close(m.stream_id, to_node);
            self.close_stream(out, m.domain, m.stream_id, code::NONE, &text);
            for (i, name) in batch.iter().enumerate() {
                let sid = m.stream_id + 1 + i as i32;
                if let Err(e) = self.open_item(sid, name, &item_req, to_node) {
                    self.close_stream(out, m.domain, sid, code::INVALID_ARGUMENT, &e);
                }
            }
            return;
        }
        let Some(name) = key.name else {
            self.refuse(
                out,
                to_node,
                m,
                code::INVALID_ARGUMENT,
                "the request names no item",
            );
            return;
        };
        if let Err(e) = self.open_item(m.stream_id, name, &item_req, to_node) {
            self.close_stream(out, m.domain, m.stream_id, code::INVALID_ARGUMENT, &e);
        }
    }

    /// Asks the node for the item `name` on the consumer's stream `rssl`; an error is
    /// what the consumer is told (nothing was asked of the node).
    fn open_item(
        &mut self,
        rssl: i32,
        name: &[u8],
        req: &ItemRequest<'_>,
        to_node: &mut Vec<u8>,
    ) -> Result<(), String> {
        // A request on an open stream changes it (a new view, say): the node's stream
        // is replaced, and the consumer's goes on.
        let replaced = self.replace(rssl, to_node);
        // Past a wrap, the ids still open, or with posts waiting, are skipped.
        let native = loop {
            let n = self.next_native;
            self.next_native = n.wrapping_add(1).max(1);
            if !self.streams.contains_key(&n) && !self.pending_posts.has_stream(n) {
                break n;
            }
        };
        let name_text = String::from_utf8_lossy(name);
        let request = Message::Request(Request {
            stream_id: native,
            streaming: req.streaming,
            service: req.service,
            name: &name_text,
            view: req.view.as_deref().map(View::Fids),
            refresh: true,
        });
        // A name whose bytes are not UTF-8 grows as it is made text (each byte that is
        // not, three): it may no longer fit a message.
        if let Err(e) = request.encode(to_node) {
            return Err(format!("the request cannot be passed on: {e}"));
        }
        self.by_rssl.insert(rssl, native);
        self.streams.insert(
            native,
            ItemStream {
                rssl,
                service_id: req.service_id,
                name: name.to_vec(),
                streaming: req.streaming,
                private: req.private,
                paused: req.paused,
                view: req.view.clone(),
                replaced,
            },
        );
        Ok(())
    }

    /// Closes the node's stream of the consumer's open stream `rssl`, which a request
    /// on it replaces: its posts still waiting keep their way back to the consumer's
    /// stream. Returns the node's streams of `rssl` with posts waiting.
    fn replace(&mut self, rssl: i32, to_node: &mut Vec<u8>) -> Vec<u32> {
        let Some(native) = self.by_rssl.remove(&rssl) else {
            return Vec::new();
        };
        let _ = Message::Close { stream_id: native }.encode(to_node);
        let Some(s) = self.streams.remove(&native) else {
            return Vec::new();
        };
        let mut replaced = s.replaced;
        replaced.push(native);
        replaced.retain(|&n| self.pending_posts.has_stream(n));
        // A stream reissued over and over while its posts wait keeps the latest few:
        // the posts of older node streams get no Ack, and a reissue costs no more.
        let past = replaced.len().saturating_sub(MAX_REPLACED);
        for n in replaced.drain(..past) {
            self.pending_posts.forget_stream(n);
        }
        replaced
    }

    /// A `NO_REFRESH` reissue on the open stream `rssl`: its pause is taken, and a view
    /// other than the stream's is sent to the node as a request without a refresh.
    fn change_in_place(
        &mut self,
        rssl: i32,
        service: &str,
        view: Option<Arc<[i16]>>,
        paused: bool,
        to_node: &mut Vec<u8>,
    ) {
        let Some(&native) = self.by_rssl.get(&rssl) else {
            return;
        };
        let Some(s) = self.streams.get_mut(&native) else {
            return;
        };
        s.paused = paused;
        if s.view == view {
            return;
        }
        let name = String::from_utf8_lossy(&s.name);
        let request = Message::Request(Request {
            stream_id: native,
            streaming: s.streaming,
            service,
            name: &name,
            view: view.as_deref().map(View::Fids),
            refresh: false,
        });
        if request.encode(to_node).is_ok() {
            s.view = view;
        }
    }

    fn on_close(&mut self, rssl: i32, to_node: &mut Vec<u8>) {
        if let Some(native) = self.by_rssl.remove(&rssl) {
            self.forget(native);
            let _ = Message::Close { stream_id: native }.encode(to_node);
        }
    }

    /// The consumer's stream on the node's `native` is gone: so are its posts' Acks.
    fn forget(&mut self, native: u32) {
        if let Some(s) = self.streams.remove(&native) {
            self.by_rssl.remove(&s.rssl);
            self.pending_posts.forget_stream(native);
            for n in s.replaced {
                self.pending_posts.forget_stream(n);
            }
        }
    }

    /// Refuses the consumer's message `m`: closes its stream, and what was open on it
    /// at the node too (a refused reissue of an item request ends the stream it was
    /// for).
    fn refuse(
        &mut self,
        out: &mut impl Outbox,
        to_node: &mut Vec<u8>,
        m: &Msg<'_>,
        code: u8,
        text: &str,
    ) {
        self.close_stream(out, m.domain, m.stream_id, code, text);
        self.end_stream(m.domain, m.stream_id, ncode::PROTOCOL, text, to_node);
    }

    /// The consumer was told its stream `sid` (of domain `dom`) is closed: what was
    /// open on it ends, at the node too (an item, a provider's item: with `node_code`
    /// and `text`), and so do a directory stream and a download on it. The login
    /// stream closed ends the session, for both ends.
    fn end_stream(&mut self, dom: u8, sid: i32, node_code: u16, text: &str, to_node: &mut Vec<u8>) {
        self.on_close(sid, to_node);
        self.end_published(sid, node_code, text, to_node);
        self.directories.retain(|&(s, _, _)| s != sid);
        self.downloads.retain(|d| d.stream != sid);
        if dom == domain::LOGIN && self.login_stream() == Some(sid) {
            self.finished = true;
        }
    }

    /// Closes a consumer's stream, data suspect: a refused request's, or a batch's own.
    fn close_stream(&mut self, out: &mut impl Outbox, dom: u8, sid: i32, code: u8, text: &str) {
        self.buf.clear();
        put_status(
            &mut self.buf,
            dom,
            sid,
            &RwfState::new(stream::CLOSED, data::SUSPECT, code, text),
            None,
            false,
        );
        out.send(&self.buf);
    }

    /// Fields a provider sent that the dictionary does not know (left out): how many,
    /// and the first.
    pub fn skipped_fields(&self) -> (u64, Option<i16>) {
        self.provider
            .as_ref()
            .map_or((0, None), |p| (p.skipped_fields, p.first_skipped))
    }

    /// Services a non-interactive provider deleted or left out of its whole directory,
    /// taken once: the node lets go of them, so that they leave it after its retention
    /// time rather than stay down for as long as the provider is connected.
    pub fn take_released(&mut self) -> Vec<String> {
        self.provider
            .as_mut()
            .map_or(Vec::new(), |p| p.take_released())
    }

    /// Services a provider announced past the most it may (left out).
    pub fn refused_services(&self) -> u64 {
        self.provider.as_ref().map_or(0, |p| p.refused_services())
    }

    /// One of the node's messages for this connection.
    pub fn on_node_message(&mut self, m: &Message<'_>, out: &mut impl Outbox) {
        if self.provider.is_some()
            && !matches!(
                m,
                Message::Welcome(_) | Message::Status(Status { stream_id: 0, .. })
            )
        {
            self.on_node_message_to_provider(m, out);
            return;
        }
        match m {
            Message::Welcome(_) => {
                if let LoginState::Pending { stream, user } =
                    std::mem::replace(&mut self.login, LoginState::None)
                {
                    self.login_refresh(stream, &user, out);
                    self.login = LoginState::Open { stream, user };
                }
            }
            Message::Directory(d) => {
                // New services (or back after removal) are added in full, changed ones
                // get their state, removed ones are deleted; a removed service keeps
                // its id for the session.
                let (mut adds, mut updates) = (Vec::new(), Vec::new());
                for e in &d.services {
                    match self.service_by_name.get(e.name).copied() {
                        None if e.state == ServiceState::Removed => {}
                        // Every id is taken (65,535 names heard by this session): the
                        // service is not offered to it.
                        None if self.services.len() >= usize::from(u16::MAX) => {}
                        None => {
                            let id = self.services.len() as u16 + 1;
                            self.services.push(Service {
                                name: e.name.to_string(),
                                id,
                                state: e.state,
                            });
                            self.service_by_name
                                .insert(e.name.into(), self.services.len() - 1);
                            adds.push(self.services.len() - 1);
                        }
                        Some(i) => {
                            let was = std::mem::replace(&mut self.services[i].state, e.state);
                            if was == ServiceState::Removed && e.state != ServiceState::Removed {
                                adds.push(i);
                            } else if was != e.state {
                                updates.push(i);
                            }
                        }
                    }
                }
                self.directory_update(&adds, &updates, out);
            }
            Message::Refresh(r) => {
                let Some(s) = self.streams.get_mut(&r.stream_id) else {
                    return;
                };
                let st = rwf_stream_state(r.state.stream, s.streaming);
                let mut flags = 0;
                if r.solicited {
                    flags |= refresh::SOLICITED;
                }
                if r.complete {
                    flags |= refresh::REFRESH_COMPLETE;
                }
                if r.clear_cache {
                    flags |= refresh::CLEAR_CACHE;
                }
                if s.private {
                    flags |= refresh::PRIVATE_STREAM;
                }
                let key = MsgKey {
                    service_id: Some(s.service_id),
                    name: Some(&s.name),
                    name_type: Some(1),
                    ..MsgKey::default()
                };
                self.buf.clear();
                let state = RwfState {
                    stream: st,
                    data: rwf_data_state(r.state.data),
                    code: rwf_code(r.state.code),
                    text: r.state.text.as_bytes(),
                };
                begin_refresh(
                    &mut self.buf,
                    domain::MARKET_PRICE,
                    s.rssl,
                    flags,
                    dt::FIELD_LIST,
                    Some(r.seq),
                    &state,
                    Some(&key),
                    None,
                    true,
                );
                put_fields(&mut self.buf, &self.cfg.dictionary, r.fields.iter());
                out.send(&self.buf);
                if r.complete && st != stream::OPEN {
                    self.forget(r.stream_id);
                }
            }
            Message::Update(u) => {
                let Some(s) = self.streams.get(&u.stream_id).filter(|s| !s.paused) else {
                    return;
                };
                self.buf.clear();
                let ut = u.update_type.to_u8();
                begin_update(
                    &mut self.buf,
                    domain::MARKET_PRICE,
                    s.rssl,
                    ut,
                    Some(u.seq),
                    u.conflation_count,
                    u.do_not_conflate,
                );
                put_fields(&mut self.buf, &self.cfg.dictionary, u.fields.iter());
                out.send(&self.buf);
            }
            Message::Status(st) if st.stream_id == 0 => self.on_connection_status(&st.state, out),
            Message::Status(st) => self.item_status(st.stream_id, &st.state, out),
            Message::Close { stream_id } => {
                if let Some(s) = self.streams.get(stream_id) {
                    let rssl = s.rssl;
                    self.buf.clear();
                    put_close(&mut self.buf, domain::MARKET_PRICE, rssl);
                    out.send(&self.buf);
                    self.forget(*stream_id);
                }
            }
            Message::Ack(a) => self.on_node_ack(a, out),
            // RIPC keeps the connection alive with pings of its own.
            Message::Ping(_) | Message::Pong(_) => {}
            _ => {}
        }
    }

    /// The node's state of its item stream `native`, to the consumer as a StatusMsg;
    /// a stream it ends is forgotten.
    fn item_status(&mut self, native: u32, state: &State<'_>, out: &mut impl Outbox) {
        let Some(s) = self.streams.get(&native) else {
            return;
        };
        let state = RwfState {
            // Open, even for a snapshot: the node still owes its image (its service is
            // down, say), and RWF's NON_STREAMING would end the stream.
            stream: rwf_stream_state(state.stream, true),
            data: rwf_data_state(state.data),
            code: rwf_code(state.code),
            text: state.text.as_bytes(),
        };
        let (rssl, private) = (s.rssl, s.private);
        self.buf.clear();
        put_status(
            &mut self.buf,
            domain::MARKET_PRICE,
            rssl,
            &state,
            None,
            private,
        );
        out.send(&self.buf);
        if state.stream != stream::OPEN {
            self.forget(native);
        }
    }

    /// A connection-level status: a refused login, or the node closing the connection.
    fn on_connection_status(&mut self, state: &State<'_>, out: &mut impl Outbox) {
        let stream_id = match &self.login {
            LoginState::Pending { stream, .. } | LoginState::Open { stream, .. } => *stream,
            LoginState::None => 1,
        };
        let code = match state.code {
            ncode::LOGIN_REJECTED | ncode::NOT_ENTITLED => code::NOT_ENTITLED,
            other => rwf_code(other),
        };
        let st = RwfState {
            stream: if state.stream == StreamState::Open {
                stream::OPEN
            } else {
                stream::CLOSED
            },
            data: rwf_data_state(state.data),
            code,
            text: state.text.as_bytes(),
        };
        self.buf.clear();
        put_status(&mut self.buf, domain::LOGIN, stream_id, &st, None, false);
        out.send(&self.buf);
        if st.stream != stream::OPEN {
            self.finished = true;
        }
    }

    /// The directory streams hear of services added and changed.
    fn directory_update(&mut self, adds: &[usize], updates: &[usize], out: &mut impl Outbox) {
        let mut buf = std::mem::take(&mut self.buf);
        for &(sid, filter, only) in &self.directories {
            for (services, action) in [(adds, map_action::ADD), (updates, map_action::UPDATE)] {
                // A stream of one service hears only of it.
                let services: Vec<usize> = services
                    .iter()
                    .copied()
                    .filter(|&i| only.is_none_or(|id| self.services[i].id == id))
                    .collect();
                if services.is_empty() {
                    continue;
                }
                buf.clear();
                let w =
                    msg::MsgWriter::begin(&mut buf, class::UPDATE, domain::SOURCE, sid, 0, dt::MAP);
                buf.push(0); // update type: unspecified
                w.end_header(&mut buf);
                self.directory_map(&mut buf, &services, filter, action);
                out.send(&buf);
            }
        }
        self.buf = buf;
    }
}

/// Why a reissue on the open stream `open` cannot be taken as one: its key names another
/// item or service, or it adds the private flag (both name another stream). A reissue
/// may leave its key out; what it names must be the stream's.
fn reissue_mismatch(open: &ItemStream, key: &MsgKey<'_>, private: bool) -> Option<String> {
    if let Some(id) = key.service_id.filter(|&id| id != open.service_id) {
        return Some(format!(
            "the stream is open on service id {}, not {id}; a reissue cannot change its key",
            open.service_id
        ));
    }
    if let Some(name) = key.name.filter(|&n| n != open.name.as_slice()) {
        return Some(format!(
            "the stream is open for {:?}, not {:?}; a reissue cannot change its key",
            String::from_utf8_lossy(&open.name),
            String::from_utf8_lossy(name)
        ));
    }
    if private && !open.private {
        return Some("a reissue cannot make an open stream private".to_owned());
    }
    None
}

/// The view and batch a request's element list carries; a batch's names are taken up
/// to one past `max_batch` (enough to refuse it, without copying the rest).
fn parse_request_payload(
    m: &Msg<'_>,
    view: &mut Option<Vec<i16>>,
    batch: &mut Vec<Vec<u8>>,
    max_batch: usize,
) -> Result<(), RwfError> {
    if m.container != dt::ELEMENT_LIST {
        return Err(RwfError::invalid(
            "a request",
            "its payload is not an element list",
        ));
    }
    let mut view_type = None;
    let mut view_data = None;
    for e in ElementIter::new(m.payload)? {
        let e = e?;
        match e.name {
            EL_ITEM_LIST if e.data_type == dt::ARRAY => {
                for item in ArrayIter::new(e.value)?.take(max_batch.saturating_add(1)) {
                    batch.push(item?.to_vec());
                }
            }
            EL_VIEW_TYPE => view_type = e.uint(),
            EL_VIEW_DATA if e.data_type == dt::ARRAY => view_data = Some(e.value),
            _ => {}
        }
    }
    if let (Some(VIEW_FIELD_IDS) | None, Some(data)) = (view_type, view_data) {
        let mut fids = Vec::new();
        for item in ArrayIter::new(data)? {
            // Blank names no field (a field id 0 would be taken for one).
            let Some(v) = primitive::int(item?)? else {
                return Err(RwfError::invalid("a view", "a blank field id"));
            };
            fids.push(
                i16::try_from(v)
                    .map_err(|_| RwfError::invalid("a view", format!("field id {v}")))?,
            );
        }
        if fids.len() > tickwire_proto::message::MAX_VIEW_FIDS {
            return Err(RwfError::invalid(
                "a view",
                format!(
                    "{} field ids (at most {})",
                    fids.len(),
                    tickwire_proto::message::MAX_VIEW_FIDS
                ),
            ));
        }
        *view = Some(fids);
    }
    Ok(())
}

/// A field list in RWF from the node's typed values.
pub(crate) fn put_fields<'a>(
    out: &mut Vec<u8>,
    dict: &RwfDictionary,
    fields: impl Iterator<Item = (i16, Value<'a>)>,
) {
    let mut w = FieldListWriter::begin(out);
    for (fid, v) in fields {
        w.field(out, fid, |o| dict.put_value(o, fid, &v));
    }
    w.end(out);
}

/// An RWF update type as the node's: the node numbers them as the RDM does (0
/// unspecified, 1 quote, 2 trade) and keeps the others (news alert, correction...) as
/// they are, so they come out of every protocol unchanged.
pub(crate) fn native_update_type(t: u8) -> UpdateType {
    UpdateType::from_u8(t)
}

/// A provider's RWF update as the node's, on the node's stream at `seq`, with its
/// fields already in the node's encoding: one mapping of the update's type and flags
/// for the node's provider links and its provider sessions alike.
#[inline]
pub(crate) fn native_update<'a>(
    m: &Msg<'_>,
    stream_id: u32,
    seq: u32,
    fields: &'a [u8],
) -> Update<'a> {
    Update {
        stream_id,
        seq,
        update_type: native_update_type(m.update_type),
        do_not_conflate: m.flags & msg::update::DO_NOT_CONFLATE != 0,
        conflation_count: m.conflation_count.max(1),
        fields: FieldList::from_trusted(fields),
    }
}

/// The largest field list in one of the node's refresh messages: a larger image goes in
/// parts, as the node's own publishers send one (docs/PROTOCOL.md 6.9).
const REFRESH_PART: usize = tickwire_proto::field::PART_BYTES;

/// A provider's refresh for the node: in parts when its fields are more than one of the
/// node's messages holds (the first part clears the image if the refresh does, the last
/// completes it if the refresh does).
pub(crate) fn encode_refresh(r: Refresh<'_>, to_node: &mut Vec<u8>) {
    let fields = r.fields.as_bytes();
    if fields.len() <= REFRESH_PART {
        let _ = Message::Refresh(r).encode(to_node);
        return;
    }
    let parts = tickwire_proto::field::split_field_list(fields, REFRESH_PART);
    let n = parts.len();
    for (i, part) in parts.iter().enumerate() {
        let _ = Message::Refresh(Refresh {
            complete: r.complete && i + 1 == n,
            clear_cache: r.clear_cache && i == 0,
            fields: FieldList::from_trusted(part),
            ..r.clone()
        })
        .encode(to_node);
    }
}

/// A provider's update for the node: an error when it is more than one of the node's
/// messages holds (an update cannot go in parts).
pub(crate) fn encode_update(
    u: Update<'_>,
    to_node: &mut Vec<u8>,
) -> Result<(), tickwire_proto::EncodeError> {
    Message::Update(u).encode(to_node)
}

/// A provider's RWF refresh of `item` as the node's, for `service`/`name`, its fields
/// already in the node's encoding (as [`native_update`]); `solicited` is the provider's
/// own flag, or false where the node asked for nothing.
#[inline]
pub(crate) fn native_refresh<'a>(
    m: &Msg<'a>,
    item: &mut ProvidedItem,
    solicited: bool,
    service: &'a str,
    name: &'a str,
    fields: &'a [u8],
) -> Refresh<'a> {
    Refresh {
        stream_id: item.native,
        seq: item.seq.refresh(m.seq),
        complete: m.flags & refresh::REFRESH_COMPLETE != 0,
        solicited,
        clear_cache: m.flags & refresh::CLEAR_CACHE != 0,
        state: m.state.map_or(State::OPEN_OK, |s| item.state(&s)),
        service,
        name,
        fields: FieldList::from_trusted(fields),
    }
}

/// An item a provider publishes through the node, by either kind of provider.
#[derive(Debug)]
pub(crate) struct ProvidedItem {
    /// The node's stream it is on.
    pub(crate) native: u32,
    pub(crate) seq: ItemSeq,
    /// The provider's service id.
    pub(crate) service: u16,
    /// The item's name.
    pub(crate) name: Box<[u8]>,
    /// Its data state at the node: what RWF's NO_CHANGE leaves it.
    pub(crate) data: DataState,
}

impl ProvidedItem {
    /// Item `name` of the provider's `service` on the node's stream `native`, suspect
    /// until a state says otherwise.
    pub(crate) fn new(native: u32, service: u16, name: &[u8]) -> Self {
        ProvidedItem {
            native,
            seq: ItemSeq::default(),
            service,
            name: name.into(),
            data: DataState::Suspect,
        }
    }

    /// A state the provider gives the item, as the node's.
    pub(crate) fn state<'a>(&mut self, s: &RwfState<'a>) -> State<'a> {
        let state = native_state(s, self.data);
        self.data = state.data;
        state
    }
}

/// The node was told that the provider's `service` is in `state`: its groups hear of
/// it, and a service gone down made its items suspect at the node.
pub(crate) fn service_told(
    groups: &mut ItemGroups,
    items: &mut ProvidedItems,
    service: u16,
    state: ServiceState,
) {
    if groups.service_told(service, state) && state == ServiceState::Down {
        items.for_service(service, |item| item.data = DataState::Suspect);
    }
}

/// The `Status` of the provider's `service` (its STATE filter's): to each of its items
/// as if the provider had sent each one, but for those it changes nothing for (their
/// stream stays open, their data state as it was: a provider repeating it costs no
/// node message). Those it closes are forgotten; `closed` gets each.
pub(crate) fn service_status(
    groups: &mut ItemGroups,
    items: &mut ProvidedItems,
    service: u16,
    status: &RwfState<'_>,
    to_node: &mut Vec<u8>,
    mut closed: impl FnMut(&ProvidedItem),
) {
    let mut changed = false;
    for stream in items.streams_of(service) {
        let Some(item) = items.get_mut(&stream) else {
            continue;
        };
        let was = item.data;
        let state = item.state(status);
        let open = state.stream == StreamState::Open;
        if open && state.data == was {
            continue;
        }
        changed = true;
        let stream_id = item.native;
        if !open {
            groups.remove(stream);
            if let Some(item) = items.remove(&stream) {
                closed(&item);
            }
        }
        let _ = Message::Status(Status { stream_id, state }).encode(to_node);
    }
    // A state its groups gave before may no longer be their items'.
    if changed {
        groups.service_changed(service);
    }
}

/// The items of the provider's services whose name went (`gone`: renamed, deleted or
/// left out): each was opened under the old name, so it ends at the node as
/// recoverable (asked again, it comes from the service that has the name now) and is
/// forgotten; `closed` gets each one's provider stream and item.
pub(crate) fn close_renamed_items(
    gone: &FxHashSet<u16>,
    groups: &mut ItemGroups,
    items: &mut ProvidedItems,
    to_node: &mut Vec<u8>,
    mut closed: impl FnMut(i32, &ProvidedItem),
) {
    let state = State {
        stream: StreamState::ClosedRecover,
        data: DataState::Suspect,
        code: ncode::NONE,
        text: "the provider renamed or removed the item's service",
    };
    for &service in gone {
        for (stream, item) in items.remove_service(service) {
            groups.remove(stream);
            closed(stream, &item);
            let _ = Message::Status(Status {
                stream_id: item.native,
                state,
            })
            .encode(to_node);
        }
    }
}

/// A provider's services and items as the node serves them: what an interactive
/// provider's link and a non-interactive provider's session both keep.
pub(crate) struct ProviderBooks<'a> {
    pub(crate) services: &'a crate::directory::ProviderServices,
    pub(crate) groups: &'a mut ItemGroups,
    pub(crate) items: &'a mut ProvidedItems,
    /// The node's stream ids of the items, to their provider streams.
    pub(crate) native: &'a mut FxHashMap<u32, i32>,
}

impl ProviderBooks<'_> {
    /// The provider's `state` of its item stream `stream` (the node's `native`), to the
    /// node; an item no longer open is forgotten.
    pub(crate) fn item_status(
        &mut self,
        stream: i32,
        native: u32,
        state: State<'_>,
        to_node: &mut Vec<u8>,
    ) {
        if state.stream != StreamState::Open {
            self.items.remove(&stream);
            self.groups.remove(stream);
            self.native.remove(&native);
        }
        let _ = Message::Status(Status {
            stream_id: native,
            state,
        })
        .encode(to_node);
    }
}

/// A provider's directory message told to the node and its items, after its services
/// took it (`news`): each item of a renamed or removed service ends
/// (`closed_at_provider` gets its provider stream), the services whose state was told
/// go to the node's directory (`interactive`: as an interactive provider's), each
/// service's `Status` (an update's, of a service already known, as the SDK's watchlist
/// takes it) goes to its items, and then the item groups' news (`group_news`).
pub(crate) fn apply_directory_news(
    books: ProviderBooks<'_>,
    news: &crate::directory::DirectoryNews,
    entries: &[crate::directory::ServiceInfo<'_>],
    group_news: &[(u16, crate::directory::GroupChange<'_>)],
    interactive: bool,
    to_node: &mut Vec<u8>,
    mut closed_at_provider: impl FnMut(i32),
) {
    let ProviderBooks {
        services,
        groups,
        items,
        native,
    } = books;
    close_renamed_items(&news.gone, groups, items, to_node, |stream, item| {
        native.remove(&item.native);
        closed_at_provider(stream);
    });
    for &(id, _, state) in &news.told {
        service_told(groups, items, id, state);
    }
    if !news.told.is_empty() {
        let told = news
            .told
            .iter()
            .map(|(_, name, state)| (name.as_str(), *state));
        crate::directory::encode_node_directory(told, interactive, to_node);
    }
    for e in entries.iter().filter(|e| !e.added && !e.deleted) {
        if let (Some(status), Some(_)) = (&e.status, services.name(e.id)) {
            service_status(groups, items, e.id, status, to_node, |item| {
                native.remove(&item.native);
            });
        }
    }
    if !group_news.is_empty() {
        groups.apply_to_node(group_news, to_node, items, |item| {
            native.remove(&item.native);
        });
    }
}

/// A provider's RWF field list as the node's, in `out` (cleared first). The fields the
/// dictionary leaves out are counted in `skipped`, and the first of them ever is kept
/// in `first_skipped` (the node logs it once). An error if the field list is malformed.
pub(crate) fn provider_fields_to_native(
    dict: &RwfDictionary,
    rwf: &[u8],
    out: &mut Vec<u8>,
    skipped: &mut u64,
    first_skipped: &mut Option<i16>,
) -> Result<(), RwfError> {
    out.clear();
    dict.to_native(rwf, out, |fid| {
        *skipped += 1;
        first_skipped.get_or_insert(fid);
    })
}

/// An RWF state as the node's (stream and data state, the codes the node has, text),
/// for an item whose data state is `was` (RWF's NO_CHANGE keeps it).
pub(crate) fn native_state<'a>(s: &RwfState<'a>, was: DataState) -> State<'a> {
    State {
        stream: match s.stream {
            stream::OPEN => StreamState::Open,
            stream::NON_STREAMING => StreamState::NonStreaming,
            stream::CLOSED_RECOVER => StreamState::ClosedRecover,
            _ => StreamState::Closed,
        },
        data: match s.data {
            data::SUSPECT => DataState::Suspect,
            data::NO_CHANGE => was,
            _ => DataState::Ok,
        },
        code: match s.code {
            code::NOT_FOUND => ncode::NOT_FOUND,
            code::NOT_ENTITLED => ncode::NOT_ENTITLED,
            _ => ncode::NONE,
        },
        text: std::str::from_utf8(s.text).unwrap_or(""),
    }
}

fn rwf_stream_state(s: StreamState, streaming: bool) -> u8 {
    match s {
        StreamState::Open if streaming => stream::OPEN,
        StreamState::Open => stream::NON_STREAMING,
        StreamState::NonStreaming => stream::NON_STREAMING,
        StreamState::Closed => stream::CLOSED,
        StreamState::ClosedRecover => stream::CLOSED_RECOVER,
    }
}

fn rwf_data_state(d: DataState) -> u8 {
    match d {
        DataState::Ok => data::OK,
        DataState::Suspect => data::SUSPECT,
    }
}

/// The node's status codes as RWF's.
fn rwf_code(c: u16) -> u8 {
    match c {
        ncode::NONE => code::NONE,
        ncode::NOT_FOUND => code::NOT_FOUND,
        ncode::SERVICE_DOWN | ncode::PUBLISHER_GONE => code::NONE,
        ncode::TOO_MANY_STREAMS => code::TOO_MANY_ITEMS,
        ncode::MALFORMED | ncode::PROTOCOL => code::USAGE_ERROR,
        ncode::LOGIN_REJECTED | ncode::NOT_ENTITLED => code::NOT_ENTITLED,
        ncode::TIMEOUT => code::TIMEOUT,
        ncode::SLOW_CONSUMER | ncode::TOO_MANY_CONNECTIONS => code::NO_RESOURCES,
        ncode::TOO_LARGE => code::USAGE_ERROR,
        _ => code::ERROR,
    }
}

mod post;
mod provider;
#[cfg(test)]
mod tests;
