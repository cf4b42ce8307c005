//! The node as a consumer of an interactive provider (ProvPerf, the ETA Provider, any
//! RSSL provider that listens): its services become the node's, served on request.
//!
//! Once RIPC is up the link logs in, asks for the provider's Source Directory
//! (streaming) and announces the services it lists to the node as interactive, up or
//! down as the provider says. The node's requests for their items (a subscriber
//! somewhere wants one) become RWF requests on streams the link numbers (5, 6 ...), and
//! the provider's refreshes, updates and statuses come back to the node on the node's
//! streams, the fields read by the field dictionary. When the connection is lost, the
//! node's side of the link says the services are down; on the next connection they
//! come up again and the node asks for every item still watched.

use crate::dictionary::RwfDictionary;
use crate::directory::{encode_node_directory, ProviderServices};
use crate::item_groups::{self, ItemGroups};
use crate::provided_items::ProvidedItems;
use crate::rwf::container::ElementListWriter;
use crate::rwf::msg::{self, class, domain, put_close, put_request, request, Msg, MsgKey};
use crate::rwf::primitive::dt;
use crate::rwf::RwfError;
use crate::session::{
    apply_directory_news, encode_refresh, encode_update, native_refresh, native_update,
    provider_fields_to_native, Outbox, ProvidedItem, ProviderBooks,
};
use rustc_hash::FxHashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_proto::{code, Ack, Message, NakCode, Post, ServiceState, State, Status, StreamState};

mod posts;
pub use posts::DEFAULT_POST_TIMEOUT;

const LOGIN_STREAM: i32 = 1;
const DIRECTORY_STREAM: i32 = 2;
/// The first item stream (3 and 4 are the dictionaries' by custom).
const FIRST_ITEM_STREAM: i32 = 5;
/// Posts waiting for the provider's answer; past this many a post is refused
/// (`NoResources`) until answers come or the oldest time out.
const MAX_PENDING_POSTS: usize = 65_536;
/// Directory filter asked: INFO, STATE, GROUP and LOAD (the ETA Provider refuses less
/// than the first three).
const DIRECTORY_FILTER: u32 = 0x0F;

/// Why the link gives up on a connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// The provider refused the login.
    #[error("the provider refused the login: {0}")]
    LoginRefused(String),
    /// The provider closed its source directory.
    #[error("the provider closed its source directory: {0}")]
    DirectoryClosed(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Login sent.
    LoggingIn,
    /// Directory requested (and maybe received).
    Open,
}

/// One provider connection's translation, without I/O.
pub struct ProviderLink {
    dict: Arc<RwfDictionary>,
    user: String,
    phase: Phase,
    /// The provider's services.
    services: ProviderServices,
    /// Item streams: the node's stream to the provider's, and back.
    streams: FxHashMap<u32, i32>,
    by_rssl: ProvidedItems,
    /// The items' groups, by the provider's stream (its directory speaks of groups).
    groups: ItemGroups,
    next_stream: i32,
    buf: Vec<u8>,
    fields: Vec<u8>,
    /// Posts sent to the provider and waiting for its Ack, until their deadline.
    posts: posts::PendingPosts,
    /// Services the provider no longer has, for the node to let go of
    /// ([`ProviderLink::take_released`]).
    released: Vec<String>,
    /// The provider's services when its connection was lost: those its next whole
    /// directory leaves out are let go of then (a provider restarted without one).
    before_loss: Vec<String>,
    /// Fields the dictionary does not know: how many, and the first.
    pub skipped_fields: u64,
    /// The first field left out, if any.
    pub first_skipped: Option<i16>,
}

impl ProviderLink {
    /// A link logging in as `user`, reading fields by `dict`.
    pub fn new(dict: Arc<RwfDictionary>, user: &str) -> Self {
        ProviderLink {
            dict,
            user: user.to_string(),
            phase: Phase::LoggingIn,
            services: ProviderServices::default(),
            streams: FxHashMap::default(),
            by_rssl: ProvidedItems::default(),
            groups: ItemGroups::default(),
            next_stream: FIRST_ITEM_STREAM,
            buf: Vec::new(),
            fields: Vec::new(),
            posts: posts::PendingPosts::default(),
            released: Vec::new(),
            before_loss: Vec::new(),
            skipped_fields: 0,
            first_skipped: None,
        }
    }

    /// How long a post waits for the provider's answer before its poster is refused
    /// (`NoResponse`): the node's post timeout (`posts.timeout_ms`).
    pub fn with_post_timeout(mut self, timeout: Duration) -> Self {
        self.posts.timeout = timeout;
        self
    }

    /// When [`ProviderLink::handle_timeout`] has something to do next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.posts.next_deadline()
    }

    /// Posts the provider left unanswered past the post timeout are refused
    /// (`NoResponse`), and their places freed.
    pub fn handle_timeout(&mut self, now: Instant, to_node: &mut Vec<u8>) {
        let ms = self.posts.timeout.as_millis();
        let text =
            format!("the interactive provider did not answer within {ms} ms (posts.timeout_ms)");
        self.posts.expire(now, |post_id, stream_id| {
            let _ = Message::Ack(Ack {
                stream_id,
                post_id,
                nak: Some(NakCode::NoResponse),
                text: &text,
            })
            .encode(to_node);
        });
    }

    /// The provider accepted the login (its directory is asked for).
    pub fn logged_in(&self) -> bool {
        self.phase == Phase::Open
    }

    /// RIPC is up: log in (as a consumer, role 0).
    pub fn on_connected(&mut self, out: &mut impl Outbox) {
        self.phase = Phase::LoggingIn;
        self.streams.clear();
        self.by_rssl.clear();
        self.groups.clear();
        let _ = self.posts.take_all();
        self.next_stream = FIRST_ITEM_STREAM;
        let mut attrib = Vec::new();
        let mut el = ElementListWriter::begin(&mut attrib);
        el.ascii(&mut attrib, "ApplicationId", b"256");
        el.ascii(&mut attrib, "ApplicationName", b"tickwire");
        el.ascii(&mut attrib, "Position", b"127.0.0.1/tickwire");
        el.uint(&mut attrib, "Role", 0);
        el.end(&mut attrib);
        let key = MsgKey {
            name: Some(self.user.as_bytes()),
            name_type: Some(1),
            attrib: Some((dt::ELEMENT_LIST, &attrib)),
            ..MsgKey::default()
        };
        self.buf.clear();
        put_request(
            &mut self.buf,
            domain::LOGIN,
            LOGIN_STREAM,
            request::STREAMING,
            &key,
            false,
        );
        out.send(&self.buf);
    }

    /// The connection is gone: the provider's services are down until it is back, and
    /// what it said of them is forgotten (its next directory says it again: a service
    /// whose state it does not give is up, as at the first connection).
    pub fn on_lost(&mut self, to_node: &mut Vec<u8>) {
        self.announce(ServiceState::Down, to_node);
        // Posts sent and not answered never will be: their posters hear it now, as
        // those that find the provider not connected do, not at the post timeout.
        for (post_id, stream_id) in self.posts.take_all() {
            let _ = Message::Ack(Ack {
                stream_id,
                post_id,
                nak: Some(NakCode::SourceDown),
                text: "the connection to the interactive provider was lost before its answer",
            })
            .encode(to_node);
        }
        // Remembered across the loss (the earlier ones' too, if it never answered).
        for name in self.service_names() {
            if !self.before_loss.contains(&name) {
                self.before_loss.push(name);
            }
        }
        self.services.clear();
        self.streams.clear();
        self.by_rssl.clear();
        self.groups.clear();
    }

    /// Services the provider no longer has (deleted from its directory, or left out
    /// of its whole directory after a reconnect), taken once: the node lets go of them,
    /// so that they leave it after its retention time rather than stay down for good.
    pub fn take_released(&mut self) -> Vec<String> {
        std::mem::take(&mut self.released)
    }

    fn announce(&self, state: ServiceState, to_node: &mut Vec<u8>) {
        if self.services.is_empty() {
            return;
        }
        let services = self.services.iter().map(|(_, name)| (name, state));
        encode_node_directory(services, true, to_node);
    }

    /// The provider's names of its services, for logs.
    pub fn service_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.services.iter().map(|(_, n)| n.to_string()).collect();
        v.sort();
        v
    }

    /// Services left out because the provider announced more than a provider may.
    pub fn refused_services(&self) -> u64 {
        self.services.refused
    }

    /// One RWF message from the provider.
    pub fn on_provider_message(
        &mut self,
        rwf: &[u8],
        to_node: &mut Vec<u8>,
        out: &mut impl Outbox,
    ) -> Result<(), LinkError> {
        let Ok(m) = Msg::decode(rwf) else {
            return Ok(()); // a malformed answer is dropped: the provider is not ours to close
        };
        match (m.class, m.domain) {
            (class::REFRESH, domain::LOGIN)
                if self.phase == Phase::LoggingIn
                    && m.state.is_some_and(|s| s.stream == msg::stream::OPEN) =>
            {
                self.phase = Phase::Open;
                let key = MsgKey {
                    filter: Some(DIRECTORY_FILTER),
                    ..MsgKey::default()
                };
                self.buf.clear();
                put_request(
                    &mut self.buf,
                    domain::SOURCE,
                    DIRECTORY_STREAM,
                    request::STREAMING,
                    &key,
                    false,
                );
                out.send(&self.buf);
            }
            (class::STATUS, domain::LOGIN) => {
                if let Some(s) = m.state.filter(|s| s.stream != msg::stream::OPEN) {
                    return Err(LinkError::LoginRefused(
                        String::from_utf8_lossy(s.text).into_owned(),
                    ));
                }
            }
            (class::REFRESH | class::UPDATE, domain::SOURCE) => self.on_directory(&m, to_node, out),
            (class::STATUS, domain::SOURCE) => {
                if let Some(s) = m.state.filter(|s| s.stream != msg::stream::OPEN) {
                    return Err(LinkError::DirectoryClosed(
                        String::from_utf8_lossy(s.text).into_owned(),
                    ));
                }
            }
            (class::REFRESH, domain::MARKET_PRICE) => self.on_refresh(&m, to_node, out),
            (class::UPDATE, domain::MARKET_PRICE) => self.on_update(&m, to_node, out),
            (class::STATUS, domain::MARKET_PRICE) => self.on_status(&m, to_node),
            (class::ACK, _) => self.on_ack(&m, to_node),
            _ => {}
        }
        Ok(())
    }

    /// A post for one of the provider's items: on the item's stream when the link has
    /// it open, else on the login stream with a key naming service and item (as RSSL
    /// consumers post off-stream), its fields as RWF.
    fn on_node_post(
        &mut self,
        p: &Post<'_>,
        to_node: &mut Vec<u8>,
        out: &mut impl Outbox,
        now: Instant,
    ) {
        let refuse = |to_node: &mut Vec<u8>, nak, text: &str| {
            let _ = Message::Ack(Ack {
                stream_id: p.stream_id,
                post_id: p.post_id,
                nak: Some(nak),
                text,
            })
            .encode(to_node);
        };
        let Some(service_id) = self.services.id(p.service) else {
            refuse(
                to_node,
                NakCode::SourceUnknown,
                "the provider has no such service",
            );
            return;
        };
        if p.ack && self.posts.len() >= MAX_PENDING_POSTS {
            refuse(
                to_node,
                NakCode::NoResources,
                "too many posts wait for the provider's answer",
            );
            return;
        }
        let key = MsgKey {
            service_id: Some(service_id),
            name: Some(p.name.as_bytes()),
            name_type: Some(1),
            ..MsgKey::default()
        };
        let (stream, key) = match self.streams.get(&p.stream_id) {
            Some(&s) if p.stream_id != 0 => (s, None),
            _ => (LOGIN_STREAM, Some(&key)),
        };
        self.buf.clear();
        msg::begin_post(
            &mut self.buf,
            domain::MARKET_PRICE,
            stream,
            p.post_id,
            p.ack,
            key,
        );
        crate::session::put_fields(&mut self.buf, &self.dict, p.fields.iter());
        out.send(&self.buf);
        if p.ack {
            self.posts.insert(p.post_id, p.stream_id, now);
        }
    }

    /// The provider's answer to a post: to the node, on the stream the post came on.
    fn on_ack(&mut self, m: &Msg<'_>, to_node: &mut Vec<u8>) {
        let Some(post_id) = m.post_id else { return };
        let Some(stream_id) = self.posts.remove(post_id) else {
            return; // an answer to no post of ours
        };
        let nak = m.nak_code.and_then(NakCode::of_ack);
        let _ = Message::Ack(Ack {
            stream_id,
            post_id,
            nak,
            text: std::str::from_utf8(m.text).unwrap_or(""),
        })
        .encode(to_node);
    }

    fn books(&mut self) -> ProviderBooks<'_> {
        ProviderBooks {
            services: &self.services,
            groups: &mut self.groups,
            items: &mut self.by_rssl,
            native: &mut self.streams,
        }
    }

    fn on_directory(&mut self, m: &Msg<'_>, to_node: &mut Vec<u8>, out: &mut impl Outbox) {
        if m.container != dt::MAP {
            return;
        }
        let Ok(entries) = crate::directory::services(m.payload) else {
            return;
        };
        let groups = item_groups::news(&entries);
        let mut news = self.services.apply(m, &entries, |id| self.groups.told(id));
        self.released.append(&mut news.released);
        // The first whole directory since a reconnect: what it leaves out of the
        // services the provider had is gone.
        if m.class == class::REFRESH && m.flags & msg::refresh::REFRESH_COMPLETE != 0 {
            for name in std::mem::take(&mut self.before_loss) {
                if self.services.id(&name).is_none() && !self.released.contains(&name) {
                    self.released.push(name);
                }
            }
        }
        // A renamed or removed service's streams are closed at the provider too: the
        // node's next request for their items opens a stream on the service that has
        // the name.
        let books = ProviderBooks {
            services: &self.services,
            groups: &mut self.groups,
            items: &mut self.by_rssl,
            native: &mut self.streams,
        };
        // (Beside the books, the buffer the closes are written in.)
        let buf = &mut self.buf;
        apply_directory_news(books, &news, &entries, &groups, true, to_node, |rssl| {
            buf.clear();
            put_close(buf, domain::MARKET_PRICE, rssl);
            out.send(buf);
        });
    }

    /// The provider's fields in `self.fields` as the node's; an error if malformed.
    fn fields(&mut self, rwf: &[u8]) -> Result<(), RwfError> {
        provider_fields_to_native(
            &self.dict,
            rwf,
            &mut self.fields,
            &mut self.skipped_fields,
            &mut self.first_skipped,
        )
    }

    /// A refresh or update of item stream `m.stream_id` whose field list does not
    /// decode: left out, the item's image would be missing or wrong without a word. The
    /// item ends at the node with the reason, and its stream at the provider.
    fn malformed(
        &mut self,
        m: &Msg<'_>,
        what: &str,
        e: &RwfError,
        to_node: &mut Vec<u8>,
        out: &mut impl Outbox,
    ) {
        let text = format!("the provider's {what} does not decode: {e}");
        self.end_item(m.stream_id, code::MALFORMED, &text, to_node, out);
    }

    /// The item on the provider's stream `rssl` ends at the node (closed, with
    /// `node_code` and `text`) and at the provider, and is forgotten.
    fn end_item(
        &mut self,
        rssl: i32,
        node_code: u16,
        text: &str,
        to_node: &mut Vec<u8>,
        out: &mut impl Outbox,
    ) {
        let Some(item) = self.by_rssl.remove(&rssl) else {
            return;
        };
        self.streams.remove(&item.native);
        self.groups.remove(rssl);
        let _ = Message::Status(Status {
            stream_id: item.native,
            state: State::closed(node_code, text),
        })
        .encode(to_node);
        self.buf.clear();
        put_close(&mut self.buf, domain::MARKET_PRICE, rssl);
        out.send(&self.buf);
    }

    fn on_refresh(&mut self, m: &Msg<'_>, to_node: &mut Vec<u8>, out: &mut impl Outbox) {
        // The fields first, so that the stream is looked up once (a message for a
        // stream the link does not have is rare: one just closed).
        if let Err(e) = self.fields(m.payload) {
            return self.malformed(m, "refresh", &e, to_node, out);
        }
        let Some(item) = self.by_rssl.get_mut(&m.stream_id) else {
            return;
        };
        self.groups.set(m.stream_id, item.service, m.group_id);
        let key = m.key.clone().unwrap_or_default();
        let service = key
            .service_id
            .and_then(|id| self.services.name(id))
            .unwrap_or_default();
        let name = String::from_utf8_lossy(key.name.unwrap_or(b""));
        let solicited = m.flags & msg::refresh::SOLICITED != 0;
        let refresh = native_refresh(m, item, solicited, service, &name, &self.fields);
        let (native, state) = (item.native, refresh.state);
        let ended = refresh.complete && state.stream != StreamState::Open;
        encode_refresh(refresh, to_node);
        if ended {
            // The provider ended the stream with its image (a non-streaming answer, a
            // closed one): the node takes the image, then the end, which the node's
            // refresh does not carry.
            self.by_rssl.remove(&m.stream_id);
            self.groups.remove(m.stream_id);
            self.streams.remove(&native);
            let _ = Message::Status(Status {
                stream_id: native,
                state,
            })
            .encode(to_node);
        }
    }

    fn on_update(&mut self, m: &Msg<'_>, to_node: &mut Vec<u8>, out: &mut impl Outbox) {
        // The fields first, so that the stream is looked up once (a message for a
        // stream the link does not have is rare: one just closed).
        if let Err(e) = self.fields(m.payload) {
            return self.malformed(m, "update", &e, to_node, out);
        }
        let Some(item) = self.by_rssl.get_mut(&m.stream_id) else {
            return;
        };
        let (native, seq) = (item.native, item.seq.update(m.seq, m.conflation_count));
        if let Err(e) = encode_update(native_update(m, native, seq, &self.fields), to_node) {
            let text = format!("the provider's update is too large for the node: {e}");
            self.end_item(m.stream_id, code::TOO_LARGE, &text, to_node, out);
        }
    }

    fn on_status(&mut self, m: &Msg<'_>, to_node: &mut Vec<u8>) {
        let Some(item) = self.by_rssl.get_mut(&m.stream_id) else {
            return;
        };
        self.groups.set(m.stream_id, item.service, m.group_id);
        let native = item.native;
        let Some(s) = m.state else { return };
        let state = item.state(&s);
        self.books()
            .item_status(m.stream_id, native, state, to_node);
    }

    /// One of the node's messages to this publisher, at `now`: requests and closes of
    /// items, posts.
    pub fn on_node_message(
        &mut self,
        m: &Message<'_>,
        to_node: &mut Vec<u8>,
        out: &mut impl Outbox,
        now: Instant,
    ) {
        match m {
            Message::Request(r) => {
                let Some(service_id) = self.services.id(r.service) else {
                    let _ = Message::Status(Status {
                        stream_id: r.stream_id,
                        state: State::closed(code::NOT_FOUND, "the provider has no such service"),
                    })
                    .encode(to_node);
                    return;
                };
                // A request on a stream already open asks again: same provider stream.
                let rssl = match self.streams.get(&r.stream_id) {
                    Some(&s) => s,
                    None => {
                        // Past a wrap, the ids still open are skipped.
                        let s = loop {
                            let s = self.next_stream;
                            self.next_stream = s.checked_add(1).unwrap_or(FIRST_ITEM_STREAM);
                            if !self.by_rssl.contains_key(&s) {
                                break s;
                            }
                        };
                        self.streams.insert(r.stream_id, s);
                        self.by_rssl.insert(
                            s,
                            ProvidedItem::new(r.stream_id, service_id, r.name.as_bytes()),
                        );
                        s
                    }
                };
                let key = MsgKey {
                    service_id: Some(service_id),
                    name: Some(r.name.as_bytes()),
                    name_type: Some(1),
                    ..MsgKey::default()
                };
                let flags = if r.streaming { request::STREAMING } else { 0 };
                self.buf.clear();
                put_request(&mut self.buf, domain::MARKET_PRICE, rssl, flags, &key, true);
                out.send(&self.buf);
            }
            Message::Post(p) => self.on_node_post(p, to_node, out, now),
            Message::Close { stream_id } => {
                if let Some(rssl) = self.streams.remove(stream_id) {
                    self.by_rssl.remove(&rssl);
                    self.groups.remove(rssl);
                    self.buf.clear();
                    put_close(&mut self.buf, domain::MARKET_PRICE, rssl);
                    out.send(&self.buf);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rwf::container::{
        filter_action, ElementListWriter, FieldListWriter, FilterListWriter,
    };
    use crate::rwf::msg::{begin_refresh, refresh, stream, RwfState};
    use crate::rwf::primitive::{self, RwfReal};
    use crate::testing::{self, group_update, DirectoryMsg, GroupNews};
    use tickwire_proto::{FieldList, MessageIter, Real, Request};

    fn native(bytes: &[u8]) -> Vec<String> {
        MessageIter::new(bytes)
            .map(|m| format!("{:?}", m.unwrap().message))
            .collect()
    }

    /// A provider's answer to the link's login: accepted.
    fn login_refresh() -> Vec<u8> {
        testing::login_accepted(1)
    }

    /// A provider's directory refresh: service 7, "PROV", up.
    fn directory() -> Vec<u8> {
        directory_refresh(true)
    }

    /// A provider's directory refresh of service 7, "PROV": up in its STATE filter, or
    /// with no STATE filter at all.
    fn directory_refresh(with_state: bool) -> Vec<u8> {
        testing::source_directory(DIRECTORY_STREAM, DirectoryMsg::Solicited, 7, |o, fl| {
            testing::info(o, fl, b"PROV");
            if with_state {
                testing::state(o, fl, 1);
            }
        })
    }

    /// A link on the node's own dictionary, connected: its login request sent.
    fn connected() -> (ProviderLink, Vec<u8>, Vec<Vec<u8>>) {
        let dict = Arc::new(RwfDictionary::from_native(
            &tickwire_proto::Dictionary::market_price(),
        ));
        let mut link = ProviderLink::new(dict, "node");
        let mut out = Vec::new();
        link.on_connected(&mut out);
        (link, Vec::new(), out)
    }

    /// A provider's directory update of service 7 whose filter entries `filters` writes.
    fn directory_update_of(filters: impl FnOnce(&mut Vec<u8>, &mut FilterListWriter)) -> Vec<u8> {
        testing::source_directory(DIRECTORY_STREAM, DirectoryMsg::Update, 7, filters)
    }

    /// A provider's directory update of service 7: `state` in its STATE filter, or
    /// only its LOAD filter.
    fn directory_update(state: Option<u64>) -> Vec<u8> {
        directory_update_of(|o, fl| match state {
            Some(st) => testing::state(o, fl, st),
            None => fl.entry(o, filter_action::SET, 4, |o| {
                let mut el = ElementListWriter::begin(o);
                el.uint(o, "LoadFactor", 5);
                el.end(o);
            }),
        })
    }

    /// A link logged in whose provider's directory gave service 7, PROV, up.
    fn serving_prov() -> (ProviderLink, Vec<u8>, Vec<Vec<u8>>) {
        let (mut link, mut to_node, mut out) = connected();
        link.on_provider_message(&login_refresh(), &mut to_node, &mut out)
            .unwrap();
        link.on_provider_message(&directory(), &mut to_node, &mut out)
            .unwrap();
        (link, to_node, out)
    }

    /// The link told the node that `service` is in `state` (as the node's directory
    /// message prints it).
    fn assert_told(to_node: &[u8], service: &str, state: &str) {
        let said = said(to_node);
        let entry = format!("name: {service:?}, {state}");
        assert!(said.iter().any(|m| m.contains(&entry)), "{said:?}");
    }

    /// The node's messages a link sent, decoded.
    fn said(to_node: &[u8]) -> Vec<String> {
        MessageIter::new(to_node)
            .map(|m| format!("{:?}", m.unwrap().message))
            .collect()
    }

    #[test]
    fn a_provider_back_after_a_loss_is_taken_as_new_its_services_up_unless_it_says_otherwise() {
        let (mut link, mut to_node, mut out) = serving_prov();
        to_node.clear();
        link.on_lost(&mut to_node);
        assert_told(&to_node, "PROV", "state: Down");
        to_node.clear();
        link.on_connected(&mut out);
        link.on_provider_message(&login_refresh(), &mut to_node, &mut out)
            .unwrap();
        link.on_provider_message(&directory_refresh(false), &mut to_node, &mut out)
            .unwrap();
        assert_told(&to_node, "PROV", "state: Up");
    }

    /// Services the provider no longer has are for the node to let go of: one deleted
    /// from its directory, and one its whole directory leaves out after a reconnect
    /// (a provider restarted without it); a service it keeps is not.
    #[test]
    fn services_the_provider_no_longer_has_are_let_go_of() {
        let (mut link, mut to_node, mut out) = connected();
        link.on_provider_message(&login_refresh(), &mut to_node, &mut out)
            .unwrap();
        let dir = whole_directory(refresh::SOLICITED, &services_added(0..3));
        link.on_provider_message(&dir, &mut to_node, &mut out)
            .unwrap();
        assert!(link.take_released().is_empty());
        // S2 deleted.
        let deletion = directory_of(
            None,
            &[(crate::rwf::container::map_action::DELETE, 2, None, None)],
        );
        link.on_provider_message(&deletion, &mut to_node, &mut out)
            .unwrap();
        assert_eq!(link.take_released(), ["S2"]);
        // Lost, and back with S0 only.
        link.on_lost(&mut to_node);
        link.on_connected(&mut out);
        link.on_provider_message(&login_refresh(), &mut to_node, &mut out)
            .unwrap();
        assert!(link.take_released().is_empty(), "not before its directory");
        let dir = whole_directory(refresh::SOLICITED, &services_added(0..1));
        link.on_provider_message(&dir, &mut to_node, &mut out)
            .unwrap();
        assert_eq!(link.take_released(), ["S1"]);
        assert_eq!(link.service_names(), ["S0"]);
    }

    #[test]
    fn a_deleted_service_added_back_without_a_state_is_up_again() {
        let (mut link, mut to_node, mut out) = serving_prov();
        to_node.clear();
        let deletion =
            testing::source_directory(DIRECTORY_STREAM, DirectoryMsg::Deletion, 7, |_, _| {});
        link.on_provider_message(&deletion, &mut to_node, &mut out)
            .unwrap();
        assert_told(&to_node, "PROV", "state: Down");
        to_node.clear();
        // Back in an unsolicited refresh, INFO alone.
        let back =
            testing::source_directory(DIRECTORY_STREAM, DirectoryMsg::Unsolicited, 7, |o, fl| {
                testing::info(o, fl, b"PROV")
            });
        link.on_provider_message(&back, &mut to_node, &mut out)
            .unwrap();
        assert_told(&to_node, "PROV", "state: Up");
    }

    #[test]
    fn a_directory_update_of_a_services_load_alone_leaves_its_state() {
        let (mut link, mut to_node, mut out) = serving_prov();
        to_node.clear();
        link.on_provider_message(&directory_update(Some(0)), &mut to_node, &mut out)
            .unwrap();
        assert_told(&to_node, "PROV", "state: Down");
        to_node.clear();
        link.on_provider_message(&directory_update(None), &mut to_node, &mut out)
            .unwrap();
        assert!(
            said(&to_node).is_empty(),
            "still down: {:?}",
            said(&to_node)
        );
    }

    #[test]
    fn a_provider_is_logged_in_to_read_and_its_items_served_on_the_nodes_streams() {
        let (mut link, mut to_node, mut out) = connected();
        let login = Msg::decode(&out[0]).unwrap();
        assert_eq!(
            (login.class, login.domain, login.stream_id),
            (class::REQUEST, domain::LOGIN, 1)
        );
        assert_eq!(login.key.unwrap().name, Some(&b"node"[..]));
        // Its login refresh: the directory is asked for, streaming, INFO|STATE|GROUP|LOAD.
        let lr = login_refresh();
        link.on_provider_message(&lr, &mut to_node, &mut out)
            .unwrap();
        let dr = Msg::decode(&out[1]).unwrap();
        assert_eq!(
            (dr.domain, dr.key.unwrap().filter),
            (domain::SOURCE, Some(0x0F))
        );
        assert!(dr.flags & request::STREAMING != 0);
        // Its directory: the node hears of an interactive service, up.
        link.on_provider_message(&directory(), &mut to_node, &mut out)
            .unwrap();
        let said = native(&to_node);
        assert!(
            said[0].contains("name: \"PROV\", state: Up, interactive: true"),
            "{said:?}"
        );
        to_node.clear();
        // The node asks for an item on its stream 900: the provider is asked on 5.
        let req = Message::Request(Request::streaming(900, "PROV", "ITEM"));
        link.on_node_message(&req, &mut to_node, &mut out, Instant::now());
        let r = Msg::decode(&out[2]).unwrap();
        assert_eq!((r.class, r.stream_id), (class::REQUEST, 5));
        let k = r.key.unwrap();
        assert_eq!((k.service_id, k.name), (Some(7), Some(&b"ITEM"[..])));
        // Its refresh comes back on the node's stream, the values the node's own.
        let mut rf = Vec::new();
        let key = MsgKey {
            service_id: Some(7),
            name: Some(b"ITEM"),
            ..MsgKey::default()
        };
        begin_refresh(
            &mut rf,
            domain::MARKET_PRICE,
            5,
            refresh::SOLICITED | refresh::REFRESH_COMPLETE | refresh::CLEAR_CACHE,
            dt::FIELD_LIST,
            Some(3),
            &RwfState::new(stream::OPEN, msg::data::OK, msg::code::NONE, ""),
            Some(&key),
            None,
            true,
        );
        let mut w = FieldListWriter::begin(&mut rf);
        w.field(&mut rf, 22, |o| {
            primitive::put_real(o, RwfReal::from_decimal(Real::new(1234, -2)))
        });
        w.end(&mut rf);
        link.on_provider_message(&rf, &mut to_node, &mut out)
            .unwrap();
        let said = native(&to_node);
        assert!(
            said[0].starts_with("Refresh(Refresh { stream_id: 900, seq: 3"),
            "{said:?}"
        );
        assert!(
            said[0].contains("service: \"PROV\", name: \"ITEM\""),
            "{said:?}"
        );
        let got = MessageIter::new(&to_node).next().unwrap().unwrap();
        let Message::Refresh(refresh) = got.message else {
            panic!()
        };
        assert_eq!(
            refresh.fields.get(22),
            Some(tickwire_proto::Value::Real(Real::new(1234, -2)))
        );
        to_node.clear();
        // The node closes: so does the provider's stream. The link is lost: PROV is down.
        link.on_node_message(
            &Message::Close { stream_id: 900 },
            &mut to_node,
            &mut out,
            Instant::now(),
        );
        assert_eq!(Msg::decode(&out[3]).unwrap().class, class::CLOSE);
        link.on_lost(&mut to_node);
        assert!(native(&to_node)[0].contains("state: Down"));
    }

    #[test]
    fn posts_go_to_the_provider_and_its_answers_back_to_the_node() {
        use crate::rwf::msg::{post, put_ack};
        let (mut link, mut to_node, mut out) = connected();
        let lr = login_refresh();
        link.on_provider_message(&lr, &mut to_node, &mut out)
            .unwrap();
        link.on_provider_message(&directory(), &mut to_node, &mut out)
            .unwrap();
        to_node.clear();
        out.clear();
        let mut fields = Vec::new();
        let mut w = tickwire_proto::FieldListWriter::new(&mut fields);
        w.push(22, tickwire_proto::Value::Real(Real::new(1234, -2)));
        w.finish();
        let post_to = |service| {
            Message::Post(Post {
                stream_id: 0,
                post_id: 44,
                ack: true,
                image: false,
                redelivered: false,
                service,
                name: "ITEM",
                fields: FieldList::decode(&fields).unwrap(),
            })
        };
        // Off-stream (the node has no stream of the item): on the login stream, keyed.
        link.on_node_message(&post_to("PROV"), &mut to_node, &mut out, Instant::now());
        let p = Msg::decode(&out[0]).unwrap();
        assert_eq!(
            (p.class, p.stream_id, p.post_id),
            (class::POST, 1, Some(44))
        );
        assert!(p.flags & post::ACK != 0);
        let k = p.key.unwrap();
        assert_eq!((k.service_id, k.name), (Some(7), Some(&b"ITEM"[..])));
        assert_eq!(p.container, dt::FIELD_LIST);
        // The provider's Nak comes back as the node's, once.
        let mut nak = Vec::new();
        put_ack(
            &mut nak,
            domain::MARKET_PRICE,
            1,
            44,
            Some(10),
            b"unknown item",
            None,
        );
        link.on_provider_message(&nak, &mut to_node, &mut out)
            .unwrap();
        link.on_provider_message(&nak, &mut to_node, &mut out)
            .unwrap();
        let said = native(&to_node);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].contains("post_id: 44, nak: Some(SymbolUnknown), text: \"unknown item\""),
            "{said:?}"
        );
        to_node.clear();
        // A service the provider does not have: refused at once, nothing sent.
        link.on_node_message(&post_to("OTHER"), &mut to_node, &mut out, Instant::now());
        assert_eq!(out.len(), 1);
        assert!(native(&to_node)[0].contains("nak: Some(SourceUnknown)"));
        to_node.clear();
        // One still waiting when the connection is lost is answered then, once.
        link.on_node_message(&post_to("PROV"), &mut to_node, &mut out, Instant::now());
        link.on_lost(&mut to_node);
        let said = native(&to_node);
        let acks: Vec<_> = said.iter().filter(|m| m.starts_with("Ack")).collect();
        assert_eq!(acks.len(), 1, "{said:?}");
        assert!(
            acks[0].contains("post_id: 44, nak: Some(SourceDown)"),
            "{said:?}"
        );
        to_node.clear();
        link.on_connected(&mut out);
        link.on_provider_message(&nak, &mut to_node, &mut out)
            .unwrap();
        assert!(to_node.is_empty(), "{:?}", native(&to_node));
    }

    /// A provider that never answers: its posts wait until the post timeout, then
    /// their posters are refused (`NoResponse`, saying so) and their places freed, so
    /// that posts past the cap are taken again without a reconnect; an answered post
    /// does not expire, and the provider's late answer reaches no one.
    #[test]
    fn posts_the_provider_never_answers_expire_and_free_their_places() {
        use crate::rwf::msg::put_ack;
        let (link, mut to_node, mut out) = serving_prov();
        let timeout = Duration::from_millis(500);
        let mut link = link.with_post_timeout(timeout);
        let mut fields = Vec::new();
        tickwire_proto::FieldListWriter::new(&mut fields).finish();
        let post = |post_id| {
            Message::Post(Post {
                stream_id: 0,
                post_id,
                ack: true,
                image: false,
                redelivered: false,
                service: "PROV",
                name: "ITEM",
                fields: FieldList::decode(&fields).unwrap(),
            })
        };
        let t0 = Instant::now();
        assert_eq!(link.poll_timeout(), None);
        let cap = MAX_PENDING_POSTS as u32;
        for id in 0..=cap {
            link.on_node_message(&post(id), &mut to_node, &mut out, t0);
        }
        let acks = |to_node: &[u8]| {
            MessageIter::new(to_node)
                .filter_map(|m| match m.unwrap().message {
                    Message::Ack(a) => Some((a.post_id, a.nak, a.text.to_string())),
                    _ => None,
                })
                .collect::<Vec<_>>()
        };
        let refused = acks(&to_node);
        assert_eq!(refused.len(), 1);
        assert_eq!(
            (refused[0].0, refused[0].1),
            (cap, Some(NakCode::NoResources))
        );
        // Post 0 answered in time.
        let mut ack = Vec::new();
        put_ack(&mut ack, domain::MARKET_PRICE, 1, 0, None, b"", None);
        to_node.clear();
        link.on_provider_message(&ack, &mut to_node, &mut out)
            .unwrap();
        assert_eq!(acks(&to_node), [(0, None, String::new())]);
        assert_eq!(link.poll_timeout(), Some(t0 + timeout));
        to_node.clear();
        link.handle_timeout(t0 + timeout - Duration::from_millis(1), &mut to_node);
        assert!(to_node.is_empty());
        link.handle_timeout(t0 + timeout, &mut to_node);
        let expired = acks(&to_node);
        assert_eq!(expired.len(), cap as usize - 1);
        assert!(expired
            .iter()
            .all(|a| a.0 != 0 && a.1 == Some(NakCode::NoResponse)));
        assert_eq!(
            expired[0].2,
            "the interactive provider did not answer within 500 ms (posts.timeout_ms)"
        );
        assert_eq!((link.posts.len(), link.poll_timeout()), (0, None));
        // Room again; the provider's late answer to an expired post goes nowhere.
        to_node.clear();
        out.clear();
        let t1 = t0 + timeout;
        link.on_node_message(&post(cap + 1), &mut to_node, &mut out, t1);
        assert_eq!((out.len(), link.posts.len()), (1, 1));
        ack.clear();
        put_ack(&mut ack, domain::MARKET_PRICE, 1, 7, None, b"", None);
        link.on_provider_message(&ack, &mut to_node, &mut out)
            .unwrap();
        assert!(to_node.is_empty(), "{:?}", said(&to_node));
        assert_eq!(link.poll_timeout(), Some(t1 + timeout));
    }

    #[test]
    fn a_refused_login_ends_the_connection_with_the_reason() {
        let (mut link, mut to_node, mut out) = connected();
        let mut st = Vec::new();
        msg::put_status(
            &mut st,
            domain::LOGIN,
            1,
            &RwfState::new(
                stream::CLOSED,
                msg::data::SUSPECT,
                msg::code::NOT_ENTITLED,
                "no",
            ),
            None,
            false,
        );
        assert_eq!(
            link.on_provider_message(&st, &mut to_node, &mut out),
            Err(LinkError::LoginRefused("no".into()))
        );
    }

    /// The item `name` asked for on the node's stream `native`.
    fn ask(link: &mut ProviderLink, native: u32, name: &str, out: &mut Vec<Vec<u8>>) {
        let req = Message::Request(Request::streaming(native, "PROV", name));
        link.on_node_message(&req, &mut Vec::new(), out, Instant::now());
    }

    /// A provider's refresh on its stream `rssl`, the item in `group`.
    fn refresh_in_group(rssl: i32, group: &[u8]) -> Vec<u8> {
        testing::refresh_in_group(rssl, true, group, None, |o, f| {
            f.field(o, 22, |o| {
                primitive::put_real(o, RwfReal::from_decimal(Real::new(1, 0)))
            });
        })
    }

    /// A link serving PROV whose node asked for ITEM on its stream 900 (the provider is
    /// asked on 5), nothing yet told the node.
    fn asked_for_item() -> (ProviderLink, Vec<u8>, Vec<Vec<u8>>) {
        let (mut link, mut to_node, mut out) = serving_prov();
        ask(&mut link, 900, "ITEM", &mut out);
        to_node.clear();
        (link, to_node, out)
    }

    /// Starts a provider's MarketPrice refresh on its stream 5, with `flags` and
    /// `state`; its field list follows.
    fn begin_item_refresh(rf: &mut Vec<u8>, flags: u16, state: &RwfState<'_>) {
        let d = domain::MARKET_PRICE;
        begin_refresh(
            rf,
            d,
            5,
            flags,
            dt::FIELD_LIST,
            None,
            state,
            None,
            None,
            false,
        );
    }

    /// The item on the provider's stream 5 ended and was forgotten: what else comes on
    /// that stream reaches no one.
    fn assert_item_forgotten(link: &mut ProviderLink, out: &mut Vec<Vec<u8>>) {
        let mut to_node = Vec::new();
        link.on_provider_message(&refresh_in_group(5, &[0, 1]), &mut to_node, out)
            .unwrap();
        assert!(to_node.is_empty(), "{:?}", said(&to_node));
    }

    /// A provider's status on its stream `rssl`: open, ok, the item now in `group`.
    fn status_moving_to(rssl: i32, group: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let w = msg::MsgWriter::begin(
            &mut out,
            class::STATUS,
            domain::MARKET_PRICE,
            rssl,
            msg::status::HAS_STATE | msg::status::HAS_GROUP_ID,
            dt::NO_DATA,
        );
        RwfState::new(stream::OPEN, msg::data::OK, msg::code::NONE, "").encode(&mut out);
        out.push(group.len() as u8);
        out.extend_from_slice(group);
        w.end_header(&mut out);
        out
    }

    /// The node's streams told a status, with its stream state and data state.
    fn statuses(to_node: &[u8]) -> Vec<(u32, StreamState, tickwire_proto::DataState)> {
        MessageIter::new(to_node)
            .filter_map(|m| match m.unwrap().message {
                Message::Status(s) => Some((s.stream_id, s.state.stream, s.state.data)),
                _ => None,
            })
            .collect()
    }

    /// Items A1 and A2 (node streams 901, 902) in group 1, B (903) in group 2.
    fn serving_three_items() -> (ProviderLink, Vec<u8>, Vec<Vec<u8>>) {
        let (mut link, mut to_node, mut out) = serving_prov();
        for (native, name) in [(901, "A1"), (902, "A2"), (903, "B")] {
            ask(&mut link, native, name, &mut out);
        }
        for (rssl, group) in [(5, &[0, 1]), (6, &[0, 1]), (7, &[0, 2])] {
            link.on_provider_message(&refresh_in_group(rssl, group), &mut to_node, &mut out)
                .unwrap();
        }
        to_node.clear();
        (link, to_node, out)
    }

    /// What the node's streams are told of `news` from the directory, by stream.
    fn hear(
        link: &mut ProviderLink,
        news: &[GroupNews<'_>],
    ) -> Vec<(u32, StreamState, tickwire_proto::DataState)> {
        let mut to_node = Vec::new();
        let update = group_update(DIRECTORY_STREAM, 7, news);
        link.on_provider_message(&update, &mut to_node, &mut Vec::new())
            .unwrap();
        let mut got = statuses(&to_node);
        got.sort_by_key(|g| g.0);
        got
    }

    const SUSPECT: Option<(u8, u8)> = Some((stream::OPEN, msg::data::SUSPECT));

    #[test]
    fn a_groups_state_in_the_directory_goes_to_each_of_its_items_alone() {
        use tickwire_proto::DataState::{Ok as Fine, Suspect};
        let (mut link, ..) = serving_three_items();
        let open = StreamState::Open;
        let got = hear(&mut link, &[(&[0, 1], None, SUSPECT)]);
        assert_eq!(got, [(901, open, Suspect), (902, open, Suspect)]);
        let ok = Some((stream::OPEN, msg::data::OK));
        let got = hear(&mut link, &[(&[0, 1], None, ok)]);
        assert_eq!(got, [(901, open, Fine), (902, open, Fine)]);
    }

    #[test]
    fn a_merged_group_takes_the_news_of_the_group_it_joined_and_a_closed_item_is_forgotten() {
        use tickwire_proto::DataState::Suspect;
        let (mut link, mut to_node, mut out) = serving_three_items();
        // Group 1 merges into 2, then group 2 closes (recoverable), in one message:
        // every item hears it once.
        let closed = Some((stream::CLOSED_RECOVER, msg::data::SUSPECT));
        let got = hear(
            &mut link,
            &[(&[0, 1], Some(&[0, 2]), None), (&[0, 2], None, closed)],
        );
        let gone = StreamState::ClosedRecover;
        assert_eq!(
            got,
            [
                (901, gone, Suspect),
                (902, gone, Suspect),
                (903, gone, Suspect)
            ]
        );
        // Closed: the provider's later messages on those streams reach no one.
        link.on_provider_message(&refresh_in_group(5, &[0, 2]), &mut to_node, &mut out)
            .unwrap();
        assert!(to_node.is_empty(), "{:?}", said(&to_node));
        // The news of a group before the merge into it does not reach the newcomers.
        let (mut link, ..) = serving_three_items();
        let got = hear(
            &mut link,
            &[(&[0, 2], None, SUSPECT), (&[0, 1], Some(&[0, 2]), None)],
        );
        assert_eq!(got, [(903, StreamState::Open, Suspect)]);
    }

    #[test]
    fn an_items_own_status_can_move_it_to_another_group() {
        use tickwire_proto::DataState::Suspect;
        let (mut link, mut to_node, mut out) = serving_three_items();
        link.on_provider_message(&status_moving_to(5, &[0, 3]), &mut to_node, &mut out)
            .unwrap();
        // A1 by group 3, A2 by group 1, each once; B in group 2 hears nothing.
        let got = hear(
            &mut link,
            &[(&[0, 1], None, SUSPECT), (&[0, 3], None, SUSPECT)],
        );
        let open = StreamState::Open;
        assert_eq!(got, [(901, open, Suspect), (902, open, Suspect)]);
    }

    /// What the node's streams are told of a directory update of PROV whose STATE
    /// filter gives all its items `status` (stream state, data state), by stream.
    fn hear_service(
        link: &mut ProviderLink,
        status: (u8, u8),
    ) -> Vec<(u32, StreamState, tickwire_proto::DataState)> {
        let update = directory_update_of(|o, fl| testing::state_with_status(o, fl, 1, status));
        let mut to_node = Vec::new();
        link.on_provider_message(&update, &mut to_node, &mut Vec::new())
            .unwrap();
        let mut got = statuses(&to_node);
        got.sort_by_key(|g| g.0);
        got
    }

    /// A service's Status in its STATE filter goes to each of its items (not another
    /// service's), once: suspect, ok again, a state they have already (nothing), and
    /// closed, which ends and forgets them; a group's state after it is news again.
    #[test]
    fn a_services_status_in_the_directory_goes_to_each_of_its_items() {
        use tickwire_proto::DataState::{Ok as Fine, Suspect};
        let (mut link, mut to_node, mut out) = serving_three_items();
        let other = testing::service_up(DIRECTORY_STREAM, DirectoryMsg::Update, 8, b"OTHER");
        link.on_provider_message(&other, &mut to_node, &mut out)
            .unwrap();
        let req = Message::Request(Request::streaming(904, "OTHER", "C"));
        link.on_node_message(&req, &mut to_node, &mut out, Instant::now());
        link.on_provider_message(&refresh_in_group(8, &[0, 1]), &mut to_node, &mut out)
            .unwrap();
        let (open, gone) = (StreamState::Open, StreamState::ClosedRecover);
        let suspect = (stream::OPEN, msg::data::SUSPECT);
        let all = |s, d| vec![(901, s, d), (902, s, d), (903, s, d)];
        assert_eq!(hear_service(&mut link, suspect), all(open, Suspect));
        assert!(hear_service(&mut link, suspect).is_empty(), "no news");
        let ok = (stream::OPEN, msg::data::OK);
        assert_eq!(hear_service(&mut link, ok), all(open, Fine));
        // Group 1 ok (every item ok already, but news to the group), then the service
        // suspect: the group's ok again reaches its items.
        hear(&mut link, &[(&[0, 1], None, Some(ok))]);
        assert_eq!(hear_service(&mut link, suspect), all(open, Suspect));
        let got = hear(&mut link, &[(&[0, 1], None, Some(ok))]);
        assert_eq!(got, [(901, open, Fine), (902, open, Fine)]);
        let closed = (stream::CLOSED_RECOVER, msg::data::SUSPECT);
        assert_eq!(hear_service(&mut link, closed), all(gone, Suspect));
        assert_eq!(link.streams.keys().collect::<Vec<_>>(), [&904]);
        to_node.clear();
        link.on_provider_message(&refresh_in_group(5, &[0, 1]), &mut to_node, &mut out)
            .unwrap();
        assert!(to_node.is_empty(), "{:?}", said(&to_node));
    }

    /// As the SDK's watchlist, the Status is taken from an update of a known service,
    /// not from a refresh's entry (which adds the service anew).
    #[test]
    fn a_services_status_in_a_directory_refresh_reaches_no_item() {
        let (mut link, mut to_node, mut out) = serving_three_items();
        let refresh =
            testing::source_directory(DIRECTORY_STREAM, DirectoryMsg::Unsolicited, 7, |o, fl| {
                testing::info(o, fl, b"PROV");
                testing::state_with_status(o, fl, 1, (stream::OPEN, msg::data::SUSPECT));
            });
        link.on_provider_message(&refresh, &mut to_node, &mut out)
            .unwrap();
        assert!(statuses(&to_node).is_empty(), "{:?}", said(&to_node));
    }

    /// The node's answer to its request for `name` of service `service`: what the link
    /// sent the provider, and told the node.
    fn request(link: &mut ProviderLink, service: &str, name: &str) -> (usize, Vec<String>) {
        let (mut to_node, mut out) = (Vec::new(), Vec::new());
        let req = Message::Request(Request::streaming(900, service, name));
        link.on_node_message(&req, &mut to_node, &mut out, Instant::now());
        (out.len(), said(&to_node))
    }

    #[test]
    fn a_renamed_service_goes_down_under_its_old_name() {
        let (mut link, mut to_node, mut out) = serving_prov();
        to_node.clear();
        let renamed = testing::service_up(DIRECTORY_STREAM, DirectoryMsg::Update, 7, b"PROV2");
        link.on_provider_message(&renamed, &mut to_node, &mut out)
            .unwrap();
        assert_told(&to_node, "PROV", "state: Down");
        assert_told(&to_node, "PROV2", "state: Up");
        // The old name is no longer the provider's.
        let (sent, told) = request(&mut link, "PROV", "ITEM");
        assert_eq!(sent, 0);
        assert!(
            told[0].contains("the provider has no such service"),
            "{told:?}"
        );
        assert_eq!(request(&mut link, "PROV2", "ITEM").0, 1);
        assert_eq!(link.service_names(), ["PROV2"]);
    }

    #[test]
    fn a_service_renamed_without_its_state_keeps_it_under_the_new_name() {
        let (mut link, mut to_node, mut out) = serving_prov();
        link.on_provider_message(&directory_update(Some(0)), &mut to_node, &mut out)
            .unwrap();
        to_node.clear();
        let renamed = directory_update_of(|o, fl| testing::info(o, fl, b"PROV2"));
        link.on_provider_message(&renamed, &mut to_node, &mut out)
            .unwrap();
        assert_told(&to_node, "PROV2", "state: Down");
    }

    #[test]
    fn a_service_renamed_over_and_over_keeps_one_name() {
        let (mut link, mut to_node, mut out) = serving_prov();
        let name = |i: u32| format!("PROV{i}");
        for i in 0..1000 {
            let renamed = directory_update_of(|o, fl| testing::info(o, fl, name(i).as_bytes()));
            link.on_provider_message(&renamed, &mut to_node, &mut out)
                .unwrap();
        }
        assert_eq!(link.service_names(), [name(999)]);
        assert!((0..999).all(|i| link.services.id(&name(i)).is_none()));
    }

    #[test]
    fn a_service_left_out_of_a_new_directory_refresh_goes_down_and_is_forgotten() {
        let (mut link, mut to_node, mut out) = serving_prov();
        to_node.clear();
        let only_other = testing::service_up(DIRECTORY_STREAM, DirectoryMsg::Anew, 8, b"OTHER");
        link.on_provider_message(&only_other, &mut to_node, &mut out)
            .unwrap();
        assert_told(&to_node, "PROV", "state: Down");
        assert_told(&to_node, "OTHER", "state: Up");
        assert_eq!(request(&mut link, "PROV", "ITEM").0, 0);
        assert_eq!(link.service_names(), ["OTHER"]);
    }

    #[test]
    fn services_past_the_most_a_provider_may_announce_are_left_out() {
        use crate::directory::MAX_PROVIDER_SERVICES;
        let (mut link, mut to_node, mut out) = connected();
        link.on_provider_message(&login_refresh(), &mut to_node, &mut out)
            .unwrap();
        let all = services_added(0..MAX_PROVIDER_SERVICES as u16 + 6);
        let dir = whole_directory(refresh::SOLICITED, &all);
        link.on_provider_message(&dir, &mut to_node, &mut out)
            .unwrap();
        assert_eq!(link.service_names().len(), MAX_PROVIDER_SERVICES);
        assert_eq!(link.refused_services(), 6);
        assert_eq!(
            request(&mut link, &format!("S{MAX_PROVIDER_SERVICES}"), "X").0,
            0
        );
    }

    #[test]
    fn a_status_with_data_state_no_change_leaves_the_items_data_state() {
        use tickwire_proto::DataState::{Ok as Fine, Suspect};
        let (mut link, mut to_node, mut out) = serving_three_items();
        let mut status = |link: &mut ProviderLink, data: u8| {
            let mut st = Vec::new();
            let state = RwfState::new(stream::OPEN, data, msg::code::NONE, "text");
            msg::put_status(&mut st, domain::MARKET_PRICE, 5, &state, None, false);
            to_node.clear();
            link.on_provider_message(&st, &mut to_node, &mut out)
                .unwrap();
            statuses(&to_node)
        };
        let open = StreamState::Open;
        assert_eq!(
            status(&mut link, msg::data::SUSPECT),
            [(901, open, Suspect)]
        );
        assert_eq!(
            status(&mut link, msg::data::NO_CHANGE),
            [(901, open, Suspect)]
        );
        assert_eq!(status(&mut link, msg::data::OK), [(901, open, Fine)]);
        assert_eq!(status(&mut link, msg::data::NO_CHANGE), [(901, open, Fine)]);
        // The node makes the items of a service gone down suspect.
        for state in [0, 1] {
            link.on_provider_message(
                &directory_update(Some(state)),
                &mut Vec::new(),
                &mut Vec::new(),
            )
            .unwrap();
        }
        assert_eq!(
            status(&mut link, msg::data::NO_CHANGE),
            [(901, open, Suspect)]
        );
    }

    #[test]
    fn the_links_stream_ids_wrap_around_the_open_ones() {
        let (mut link, _, mut out) = serving_prov();
        ask(&mut link, 900, "A", &mut out); // on 5, still open
        link.next_stream = i32::MAX;
        ask(&mut link, 901, "B", &mut out);
        ask(&mut link, 902, "C", &mut out);
        let sids: Vec<i32> = out[out.len() - 2..]
            .iter()
            .map(|m| Msg::decode(m).unwrap().stream_id)
            .collect();
        assert_eq!(sids, [i32::MAX, 6]);
        assert_eq!(link.by_rssl.get(&5).unwrap().native, 900);
    }

    /// A directory message of `entries` (map action, service id, name, ServiceState):
    /// a refresh with `refresh_flags`, or an update where None.
    fn directory_of(
        refresh_flags: Option<u16>,
        entries: &[(u8, u16, Option<&str>, Option<u64>)],
    ) -> Vec<u8> {
        use crate::rwf::container::{map_action, MapWriter};
        let mut dir = Vec::new();
        match refresh_flags {
            Some(flags) => {
                let ok = testing::ok();
                let (s, d) = (DIRECTORY_STREAM, domain::SOURCE);
                begin_refresh(&mut dir, d, s, flags, dt::MAP, None, &ok, None, None, false);
            }
            None => {
                let (s, d) = (DIRECTORY_STREAM, domain::SOURCE);
                let w = msg::MsgWriter::begin(&mut dir, class::UPDATE, d, s, 0, dt::MAP);
                dir.push(0);
                w.end_header(&mut dir);
            }
        }
        let mut map = MapWriter::begin(&mut dir, dt::UINT, dt::FILTER_LIST);
        for &(action, id, name, state) in entries {
            map.entry(&mut dir, action, &id.to_be_bytes(), |o| {
                if action == map_action::DELETE {
                    return;
                }
                let mut fl = FilterListWriter::begin(o, dt::ELEMENT_LIST);
                if let Some(name) = name {
                    testing::info(o, &mut fl, name.as_bytes());
                }
                if let Some(state) = state {
                    testing::state(o, &mut fl, state);
                }
                fl.end(o);
            });
        }
        map.end(&mut dir);
        dir
    }

    /// Services `ids` added, named S and their id, up.
    fn services_added(ids: std::ops::Range<u16>) -> Vec<(u8, u16, Option<String>)> {
        use crate::rwf::container::map_action;
        ids.map(|i| (map_action::ADD, i, Some(format!("S{i}"))))
            .collect()
    }

    /// A whole directory (a refresh that clears the cache) with `flags` besides.
    fn whole_directory(flags: u16, services: &[(u8, u16, Option<String>)]) -> Vec<u8> {
        let entries: Vec<_> = services
            .iter()
            .map(|(action, id, name)| (*action, *id, name.as_deref(), Some(1)))
            .collect();
        let flags = flags | refresh::REFRESH_COMPLETE | refresh::CLEAR_CACHE;
        directory_of(Some(flags), &entries)
    }

    /// A link logged in whose provider announced as many services as it may: S0 to
    /// S1023, ids 0 to 1023.
    fn link_at_the_cap() -> ProviderLink {
        use crate::directory::MAX_PROVIDER_SERVICES;
        let (mut link, mut to_node, mut out) = connected();
        link.on_provider_message(&login_refresh(), &mut to_node, &mut out)
            .unwrap();
        let all = services_added(0..MAX_PROVIDER_SERVICES as u16);
        let dir = whole_directory(refresh::SOLICITED, &all);
        link.on_provider_message(&dir, &mut to_node, &mut out)
            .unwrap();
        assert_eq!(link.service_names().len(), MAX_PROVIDER_SERVICES);
        link
    }

    /// A whole directory at the cap that keeps 24 services and lists 1,000 new ones
    /// takes them all: the old services it replaces do not count toward the cap.
    #[test]
    fn a_new_whole_directory_at_the_cap_takes_its_new_services() {
        use crate::directory::MAX_PROVIDER_SERVICES;
        let mut link = link_at_the_cap();
        let dir = whole_directory(0, &services_added(1000..2024));
        link.on_provider_message(&dir, &mut Vec::new(), &mut Vec::new())
            .unwrap();
        assert_eq!(link.service_names().len(), MAX_PROVIDER_SERVICES);
        assert_eq!(link.refused_services(), 0);
    }

    /// A service deleted at the cap is forgotten: another takes its place.
    #[test]
    fn a_deleted_service_leaves_room_under_the_cap() {
        use crate::rwf::container::map_action;
        let mut link = link_at_the_cap();
        let delete = directory_of(None, &[(map_action::DELETE, 0, None, None)]);
        link.on_provider_message(&delete, &mut Vec::new(), &mut Vec::new())
            .unwrap();
        let add = directory_of(None, &[(map_action::ADD, 5000, Some("NEW"), Some(1))]);
        let mut to_node = Vec::new();
        link.on_provider_message(&add, &mut to_node, &mut Vec::new())
            .unwrap();
        assert_eq!(link.refused_services(), 0);
        assert_told(&to_node, "NEW", "state: Up");
        assert_eq!(link.services.id("S0"), None);
    }

    /// PROV renamed PROV2, then PROV back on another id: the node's request for
    /// PROV/ITEM on the stream it had goes to the new id on a stream of its own, not
    /// on the renamed service's (whose stream is closed at the provider and ends at the
    /// node as recoverable).
    #[test]
    fn a_request_for_a_name_back_on_another_id_is_not_sent_on_the_renamed_services_stream() {
        use crate::rwf::container::map_action;
        let (mut link, _, mut out) = serving_prov();
        ask(&mut link, 900, "ITEM", &mut out);
        assert_eq!(Msg::decode(out.last().unwrap()).unwrap().stream_id, 5);
        let renamed = testing::service_up(DIRECTORY_STREAM, DirectoryMsg::Update, 7, b"PROV2");
        let mut to_node = Vec::new();
        out.clear();
        link.on_provider_message(&renamed, &mut to_node, &mut out)
            .unwrap();
        let close = Msg::decode(&out[0]).unwrap();
        assert_eq!((close.class, close.stream_id), (class::CLOSE, 5));
        assert!(statuses(&to_node).contains(&(
            900,
            StreamState::ClosedRecover,
            tickwire_proto::DataState::Suspect
        )));
        let back = directory_of(None, &[(map_action::ADD, 8, Some("PROV"), Some(1))]);
        link.on_provider_message(&back, &mut Vec::new(), &mut out)
            .unwrap();
        out.clear();
        ask(&mut link, 900, "ITEM", &mut out);
        let req = Msg::decode(out.last().unwrap()).unwrap();
        assert_eq!(req.key.unwrap().service_id, Some(8));
        assert_eq!(
            (
                req.stream_id,
                link.by_rssl.get(&req.stream_id).unwrap().service
            ),
            (6, 8)
        );
    }

    /// Two services swap names in one update: the items of both end at the node as
    /// recoverable (none goes on getting the other service's data).
    #[test]
    fn services_swapping_names_end_the_items_of_both() {
        use crate::rwf::container::map_action;
        let (mut link, mut to_node, mut out) = serving_prov();
        let other = directory_of(None, &[(map_action::ADD, 8, Some("OTHER"), Some(1))]);
        link.on_provider_message(&other, &mut to_node, &mut out)
            .unwrap();
        ask(&mut link, 900, "ITEM", &mut out);
        let req = Message::Request(Request::streaming(901, "OTHER", "ITEM"));
        link.on_node_message(&req, &mut Vec::new(), &mut out, Instant::now());
        to_node.clear();
        let swap = directory_of(
            None,
            &[
                (map_action::UPDATE, 7, Some("OTHER"), None),
                (map_action::UPDATE, 8, Some("PROV"), None),
            ],
        );
        link.on_provider_message(&swap, &mut to_node, &mut out)
            .unwrap();
        let mut ended: Vec<_> = statuses(&to_node)
            .into_iter()
            .filter(|s| s.1 == StreamState::ClosedRecover)
            .map(|s| s.0)
            .collect();
        ended.sort();
        assert_eq!(ended, [900, 901]);
        assert!(link.streams.is_empty() && link.by_rssl.is_empty());
    }

    /// What the directory says of a service costs that service's items: renaming,
    /// deleting, putting down or up a service without items looks at none of the
    /// 10,000 items of another; deleting PROV looks at its own and ends each.
    #[test]
    fn news_of_a_service_costs_its_own_items_not_the_connections() {
        use crate::rwf::container::map_action;
        let (mut link, _, mut out) = serving_prov();
        for i in 0..10_000 {
            ask(&mut link, 1000 + i, &format!("I{i}"), &mut out);
        }
        let mut to_node = Vec::new();
        let news = [
            (map_action::ADD, 8, Some("EMPTY"), Some(1)),
            (map_action::UPDATE, 8, Some("EMPTY2"), None),
            (map_action::UPDATE, 8, None, Some(0)),
            (map_action::UPDATE, 8, None, Some(1)),
            (map_action::DELETE, 8, None, None),
        ];
        for entry in news {
            let dir = directory_of(None, &[entry]);
            link.on_provider_message(&dir, &mut to_node, &mut out)
                .unwrap();
        }
        assert_eq!(link.by_rssl.visited, 0);
        assert!(statuses(&to_node).is_empty(), "{:?}", said(&to_node));
        let delete = directory_of(None, &[(map_action::DELETE, 7, None, None)]);
        link.on_provider_message(&delete, &mut to_node, &mut out)
            .unwrap();
        assert_eq!(link.by_rssl.visited, 10_000);
        assert_eq!(statuses(&to_node).len(), 10_000);
        assert!(link.by_rssl.is_empty() && link.streams.is_empty());
    }

    /// An update of PROV between the parts of a whole directory that leaves it out
    /// does not list it: PROV goes down and is forgotten when the last part comes.
    #[test]
    fn an_update_between_a_whole_directorys_parts_lists_no_service() {
        use crate::rwf::container::map_action;
        let (mut link, mut to_node, mut out) = serving_prov();
        let other = [(map_action::ADD, 8, Some("OTHER"), Some(1))];
        let first = directory_of(Some(refresh::CLEAR_CACHE), &other);
        link.on_provider_message(&first, &mut to_node, &mut out)
            .unwrap();
        link.on_provider_message(&directory_update(None), &mut to_node, &mut out)
            .unwrap();
        to_node.clear();
        let last = directory_of(Some(refresh::REFRESH_COMPLETE), &[]);
        link.on_provider_message(&last, &mut to_node, &mut out)
            .unwrap();
        assert_told(&to_node, "PROV", "state: Down");
        assert_eq!(link.service_names(), ["OTHER"]);
    }

    /// A provider's refresh or update whose field list the node cannot read (here set
    /// data, which the node does not decode) is not dropped without a word: the item
    /// ends at the node with the reason (its subscribers would otherwise wait for an
    /// image that never comes, or hold one that went wrong), and its stream is closed
    /// at the provider.
    #[test]
    fn a_refresh_or_update_that_does_not_decode_ends_the_item_with_the_reason() {
        for class in [class::REFRESH, class::UPDATE] {
            let (mut link, mut to_node, mut out) = asked_for_item();
            if class == class::UPDATE {
                link.on_provider_message(&refresh_in_group(5, &[0, 1]), &mut to_node, &mut out)
                    .unwrap();
                to_node.clear();
            }
            out.clear();
            let mut bad = Vec::new();
            if class == class::REFRESH {
                let flags = refresh::SOLICITED | refresh::REFRESH_COMPLETE;
                begin_item_refresh(&mut bad, flags, &testing::ok());
            } else {
                msg::begin_update(&mut bad, domain::MARKET_PRICE, 5, 1, None, 0, false);
            }
            bad.push(0x02); // a field list of set data
            link.on_provider_message(&bad, &mut to_node, &mut out)
                .unwrap();
            assert_eq!(
                statuses(&to_node),
                [(900, StreamState::Closed, tickwire_proto::DataState::Suspect)],
                "{:?}",
                said(&to_node)
            );
            assert!(
                said(&to_node)[0].contains("set-defined data"),
                "{:?}",
                said(&to_node)
            );
            let close = Msg::decode(&out[0]).unwrap();
            assert_eq!((close.class, close.stream_id), (class::CLOSE, 5));
            assert_item_forgotten(&mut link, &mut out);
        }
    }

    /// A provider that answers the node's request with a refresh that ends its stream
    /// (non-streaming, or closed): the node gets the image, then hears that the stream
    /// ended, rather than holding the item as live with nothing more to come.
    #[test]
    fn a_refresh_that_ends_its_stream_ends_the_item_at_the_node() {
        for (st, node_st) in [
            (stream::NON_STREAMING, StreamState::NonStreaming),
            (stream::CLOSED_RECOVER, StreamState::ClosedRecover),
        ] {
            let (mut link, mut to_node, mut out) = asked_for_item();
            let mut rf = Vec::new();
            let state = RwfState::new(st, msg::data::OK, msg::code::NONE, "");
            let flags = refresh::SOLICITED | refresh::REFRESH_COMPLETE | refresh::CLEAR_CACHE;
            begin_item_refresh(&mut rf, flags, &state);
            FieldListWriter::begin(&mut rf).end(&mut rf);
            link.on_provider_message(&rf, &mut to_node, &mut out)
                .unwrap();
            let told = said(&to_node);
            assert!(
                told[0].starts_with("Refresh(Refresh { stream_id: 900"),
                "{told:?}"
            );
            assert_eq!(
                statuses(&to_node),
                [(900, node_st, tickwire_proto::DataState::Ok)],
                "{told:?}"
            );
            assert_item_forgotten(&mut link, &mut out);
        }
    }

    /// An interactive provider's refresh too large for one of the node's messages
    /// reaches the node in parts; an update that large ends the item with the reason,
    /// and its stream at the provider.
    #[test]
    fn a_refresh_too_large_for_one_node_message_goes_in_parts() {
        let (mut link, mut to_node, mut out) = asked_for_item();
        let big = |o: &mut Vec<u8>, f: &mut FieldListWriter| {
            f.field(o, 3, |o| o.extend_from_slice(&[b'A'; 40_000]));
            f.field(o, 28, |o| o.extend_from_slice(&[b'B'; 40_000]));
        };
        let mut rf = Vec::new();
        let flags = refresh::SOLICITED | refresh::REFRESH_COMPLETE | refresh::CLEAR_CACHE;
        begin_item_refresh(&mut rf, flags, &testing::ok());
        let mut fl = FieldListWriter::begin(&mut rf);
        big(&mut rf, &mut fl);
        fl.end(&mut rf);
        link.on_provider_message(&rf, &mut to_node, &mut out)
            .unwrap();
        let parts: Vec<(u32, bool, bool)> = MessageIter::new(&to_node)
            .map(|m| match m.unwrap().message {
                Message::Refresh(r) => (r.stream_id, r.clear_cache, r.complete),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(parts, [(900, true, false), (900, false, true)]);
        to_node.clear();
        out.clear();
        let mut u = Vec::new();
        msg::begin_update(&mut u, domain::MARKET_PRICE, 5, 1, None, 0, false);
        let mut fl = FieldListWriter::begin(&mut u);
        big(&mut u, &mut fl);
        fl.end(&mut u);
        link.on_provider_message(&u, &mut to_node, &mut out)
            .unwrap();
        assert_eq!(
            statuses(&to_node),
            [(900, StreamState::Closed, tickwire_proto::DataState::Suspect)]
        );
        let close = Msg::decode(&out[0]).unwrap();
        assert_eq!((close.class, close.stream_id), (class::CLOSE, 5));
    }
}
