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
use crate::rwf::container::FieldListWriter;
use crate::rwf::msg::{
    begin_refresh, begin_update, class, code, data, domain, put_close, put_status, refresh, stream,
    Msg, MsgKey, RwfState,
};
use crate::rwf::primitive::dt;
use downloads::Download;
pub(crate) use provided::{
    apply_directory_news, encode_refresh, encode_update, native_refresh, native_update,
    provider_fields_to_native, service_told, ProvidedItem, ProviderBooks,
};
use rustc_hash::FxHashMap;
use std::sync::Arc;
use tickwire_proto::{code as ncode, DataState, Message, ServiceState, Status, StreamState, Value};

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

/// Most node streams a consumer's item stream keeps, once replaced by reissues, for the
/// Acks of the posts made on them.
const MAX_REPLACED: usize = 16;
/// At most this many streaming directory streams open on one connection.
const MAX_DIRECTORY_STREAMS: usize = 16;

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

mod directory;
mod downloads;
mod items;
mod login;
mod post;
mod provided;
mod provider;
#[cfg(test)]
mod tests;
