//! The publisher's protocol without I/O: one service's items over a [`Connection`]
//! that comes and goes.
//!
//! It keeps the current image of every item it published, so it can answer any request
//! from the node (a cache-off node forwards every subscriber request), re-image every
//! item after a reconnect, and serve an interactive ("sink-driven") node that asks for
//! items on demand. Reconnection delays are its decision too: the driver asks
//! [`PublisherSession::wants_connect`].

use crate::events::Fields;
use crate::reconnect::{link_methods, Link, ReconnectPolicy};
use crate::session::{is_fatal, Connection, LoginOptions, Session};
use crate::ClientError;
use std::collections::HashMap;
use std::time::Instant;
use thiserror::Error;
use tickwire_proto::{
    code, Ack, Directory, FieldImage, FieldList, Message, MessageIter, NakCode, Refresh,
    ServiceEntry, ServiceState, State, Status, StreamState, Update, UpdateType,
};

/// Index of an item in the publisher.
pub type ItemId = usize;

/// What the node asked of the publisher that the library could not answer alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublisherEvent {
    /// An interactive node wants an item this publisher has no image for: answer with
    /// `publish_refresh` (or `reject_request`).
    Request {
        /// The item.
        name: String,
    },
    /// Nobody watches the item any more; updates to it are kept in its image only.
    Closed {
        /// The item.
        item: ItemId,
    },
    /// The connection was re-established and every image sent again.
    Reconnected,
    /// The connection was lost; the publisher keeps images and reconnects.
    Disconnected {
        /// Why.
        reason: String,
    },
    /// A subscriber's contribution to an item (only with `accept_posts`). When `ack`
    /// is set, answer it with [`PublisherSession::answer_post`]: the node refuses it as
    /// unanswered otherwise.
    Post(ReceivedPost),
}

/// A post the node forwarded to this publisher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedPost {
    /// Where the answer goes: pass both to [`PublisherSession::answer_post`].
    pub stream: u32,
    /// The poster's number for it.
    pub post_id: u32,
    /// The poster wants an answer.
    pub ack: bool,
    /// The fields are a whole image, not an update.
    pub image: bool,
    /// Delivered again after the node restarted (from its journal): this publisher may
    /// have had it before, its answer never reached the journal.
    pub redelivered: bool,
    /// The item's service.
    pub service: String,
    /// The item's name.
    pub name: String,
    /// The item, if this publisher has it.
    pub item: Option<ItemId>,
    /// The posted fields.
    pub fields: Fields,
}

/// Why publishing failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The connection failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// No item has this id.
    #[error("unknown item id {0}")]
    UnknownItem(ItemId),
    #[error(
        "image of {name:?} not published: {bytes} bytes, the node accepts at most {max} \
         (half its max_output_bytes)"
    )]
    /// An image larger than the node takes.
    ImageTooLarge {
        /// The item.
        name: String,
        /// Its image's size.
        bytes: usize,
        /// The most the node takes.
        max: usize,
    },
}

/// The service a publisher announces.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    /// The service's name.
    pub service: String,
    /// Announce the service as interactive: the node asks for items on demand and says
    /// when nobody watches them any more.
    pub interactive: bool,
    /// Announce the service down at first and bring it up with `set_service_up` once
    /// the initial images are published, so no subscriber is told "not found" for an
    /// item that is on its way.
    pub start_down: bool,
    /// Hand subscribers' posts to the application ([`PublisherEvent::Post`]). Without
    /// it every post is refused (`DeniedBySrc`) by the library.
    pub accept_posts: bool,
}

/// What every update of an item reads and writes: its sequence number, its stream and
/// its image's header, in one cache line (an item's name is kept apart), so that an
/// update to an item not in the CPU's cache costs one miss before its image's data.
#[derive(Default)]
#[repr(align(64))]
struct PubItem {
    image: FieldImage,
    seq: u32,
    /// The stream this item is open on at the node, if any.
    stream: Option<u32>,
}

impl PubItem {
    /// Takes an update: its next sequence number, sent with it through `w` (a
    /// logged-in connection's writer) if the item is open, and merged into its image
    /// (even when it could not be encoded). Whether it was sent.
    #[inline]
    fn take_update(
        &mut self,
        w: Option<&mut tickwire_proto::FrameWriter>,
        u: UpdateOf,
        fields: FieldList<'_>,
    ) -> Result<bool, tickwire_proto::EncodeError> {
        self.seq = self.seq.wrapping_add(1);
        let sent = match (self.stream, w) {
            (Some(sid), Some(w)) => w
                .push(&Message::Update(Update {
                    stream_id: sid,
                    seq: self.seq,
                    update_type: u.update_type,
                    do_not_conflate: u.do_not_conflate,
                    conflation_count: 1,
                    fields,
                }))
                .map(|()| true),
            _ => Ok(false),
        };
        self.image.apply(fields);
        sent
    }
}

/// Updates are queued by `publish_update` and sent and merged into their images in
/// batches of this many, with each update's item and its image's data loaded a few
/// updates ahead, as the node does. Done one at a time, each update waited on two or
/// three cache misses in turn (an item among 100,000 is rarely in the CPU's cache): its
/// sequence number, then its image. The queue is settled before anything else the
/// session does (every other method, and before the output is taken), so the order of
/// messages and what the application observes are as if each update were sent at once.
const UPDATE_BATCH: usize = 64;
/// How far ahead an update's item is loaded, and its image's data.
const ITEM_AHEAD: usize = 8;
const IMAGE_AHEAD: usize = 4;
/// Field lists up to this size are queued: their Update always encodes (a message body
/// holds 65,535 bytes; an Update's header takes at most 16). Larger ones are sent at
/// once, so that the error for one too large is the caller's.
const QUEUED_FIELDS_MAX: usize = tickwire_proto::message::MAX_MESSAGE_BODY - 64;

/// An update as published, but for its fields: its item and its flags.
#[derive(Clone, Copy)]
struct UpdateOf {
    id: ItemId,
    update_type: UpdateType,
    do_not_conflate: bool,
}

/// One queued update, its field list in `PendingUpdates::fields`.
#[derive(Clone, Copy)]
struct QueuedUpdate {
    update: UpdateOf,
    start: u32,
    end: u32,
}

/// Updates published and not yet sent or merged into their images.
#[derive(Default)]
struct PendingUpdates {
    fields: Vec<u8>,
    list: Vec<QueuedUpdate>,
}

/// First stream id the node uses for its own requests; the publisher's ids stay below.
const NODE_STREAM_BASE: u32 = 0x8000_0000;
/// Largest field list per refresh part.
const REFRESH_PART: usize = tickwire_proto::field::PART_BYTES;

/// A service's items, their images and re-imaging, without I/O: what a
/// [`crate::Publisher`] drives over a socket.
pub struct PublisherSession {
    link: Link,
    service: ServiceOptions,
    /// The current connection's Welcome has been acted on (service announced, images
    /// sent).
    welcomed: bool,
    items: Vec<PubItem>,
    /// Per item, as `items`.
    names: Vec<String>,
    by_name: HashMap<String, ItemId>,
    by_stream: HashMap<u32, ItemId>,
    /// Interactive requests waiting for the application's image: name -> node stream.
    pending_requests: HashMap<String, u32>,
    events: Vec<PublisherEvent>,
    scratch: Vec<u8>,
    /// See [`UPDATE_BATCH`].
    pending: PendingUpdates,
    updates_sent: u64,
    /// The state the application wants the service announced with.
    service_up: bool,
}

impl PublisherSession {
    /// A session with no connection yet (the driver connects when
    /// [`PublisherSession::wants_connect`] says so: at once, the first time).
    pub fn new(
        login: LoginOptions,
        policy: ReconnectPolicy,
        service: ServiceOptions,
        now: Instant,
    ) -> Self {
        PublisherSession {
            link: Link::new(login, policy, now),
            service_up: !service.start_down,
            service,
            welcomed: false,
            items: Vec::new(),
            names: Vec::new(),
            by_name: HashMap::new(),
            by_stream: HashMap::new(),
            pending_requests: HashMap::new(),
            events: Vec::new(),
            scratch: Vec::with_capacity(64 * 1024),
            pending: PendingUpdates::default(),
            updates_sent: 0,
        }
    }

    /// The driver opened a transport: the Login is queued. Once the Welcome is in,
    /// the service is announced down, every image sent, then the service announced
    /// as the application wants it (subscribers re-requesting meanwhile wait at the
    /// node instead of hearing "not found").
    pub fn connecting(&mut self, now: Instant) -> Result<(), ClientError> {
        self.settle();
        self.link.connecting(now)?;
        self.welcomed = false;
        Ok(())
    }

    /// The connection failed: streams the node opened are forgotten (its images are
    /// kept) and a reconnect is scheduled. `Err` when the session ends instead.
    pub fn connection_lost(&mut self, err: ClientError, now: Instant) -> Result<(), ClientError> {
        self.settle();
        let (events, items) = (&mut self.events, &mut self.items);
        let (by_stream, pending_requests) = (&mut self.by_stream, &mut self.pending_requests);
        self.link.lost(err, now, |had, err| {
            if had {
                events.push(PublisherEvent::Disconnected {
                    reason: err.to_string(),
                });
            }
            for st in items {
                if st.stream.is_some_and(|s| s >= NODE_STREAM_BASE) {
                    st.stream = None;
                }
            }
            by_stream.retain(|&s, _| s < NODE_STREAM_BASE);
            pending_requests.clear();
        })
    }

    link_methods!();

    /// The connection, while connected.
    pub fn connection(&mut self) -> Option<&mut Connection> {
        self.settle();
        self.link.connection()
    }

    /// Logged in now.
    pub fn is_connected(&self) -> bool {
        self.link.is_connected()
    }

    /// The service it publishes.
    pub fn service(&self) -> &str {
        &self.service.service
    }

    /// The largest image the node accepts (from its Welcome; the default node's before
    /// the first connection).
    pub fn max_image_bytes(&self) -> usize {
        let max_output = self
            .session()
            .map(|s| s.max_output_bytes as usize)
            .filter(|&m| m > 0)
            .unwrap_or(8 * 1024 * 1024);
        tickwire_proto::max_image_bytes(max_output)
    }

    /// An item by name.
    pub fn item(&self, name: &str) -> Option<ItemId> {
        self.by_name.get(name).copied()
    }

    /// An item's name.
    pub fn item_name(&self, id: ItemId) -> Option<&str> {
        self.names.get(id).map(String::as_str)
    }

    /// The item is open at the node (its updates are sent).
    pub fn is_open(&self, id: ItemId) -> bool {
        self.items.get(id).is_some_and(|i| i.stream.is_some())
    }

    /// Items it has.
    pub fn item_count(&self) -> usize {
        self.items.len()
    }

    /// An item's image.
    pub fn image(&mut self, id: ItemId) -> Option<&FieldImage> {
        self.settle();
        self.items.get(id).map(|i| &i.image)
    }

    /// Sends the queued updates (where their items are open and the session logged
    /// in) and merges them into their images, in the order they were published.
    fn settle(&mut self) {
        let PendingUpdates { fields, list } = &mut self.pending;
        if list.is_empty() {
            return;
        }
        // Borrowed apart from `items` (so not through `self.writer()`).
        let mut writer = logged_in_writer(&mut self.link, self.welcomed);
        for i in 0..list.len() {
            if let Some(far) = list.get(i + ITEM_AHEAD) {
                let far = &self.items[far.update.id];
                tickwire_proto::wire::prefetch((far as *const PubItem).cast());
            }
            if let Some(near) = list.get(i + IMAGE_AHEAD) {
                self.items[near.update.id].image.prefetch();
            }
            let u = list[i];
            let update = FieldList::from_trusted(&fields[u.start as usize..u.end as usize]);
            let sent = self.items[u.update.id].take_update(writer.as_deref_mut(), u.update, update);
            // Cannot fail: only field lists of at most QUEUED_FIELDS_MAX are queued.
            debug_assert!(sent.is_ok(), "a queued update failed to encode: {sent:?}");
            self.updates_sent += matches!(sent, Ok(true)) as u64;
        }
        list.clear();
        fields.clear();
    }

    /// Updates written to the node (queued ones included).
    pub fn updates_sent(&mut self) -> u64 {
        self.settle();
        self.updates_sent
    }

    /// Output queued and not yet written, including about what the queued updates
    /// will take.
    pub fn pending_output(&self) -> usize {
        let queued = self.pending.fields.len() + 16 * self.pending.list.len();
        self.link.pending_output() + queued
    }

    /// What needs the application since the last call.
    pub fn take_events(&mut self) -> Vec<PublisherEvent> {
        std::mem::take(&mut self.events)
    }

    /// Events wait to be taken.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// A logged-in connection's writer.
    fn writer(&mut self) -> Option<&mut tickwire_proto::FrameWriter> {
        logged_in_writer(&mut self.link, self.welcomed)
    }

    /// Announces the service up (or down again). Subscriber requests wait at the node
    /// while the service is down.
    pub fn set_service_up(&mut self, up: bool) -> Result<(), ClientError> {
        self.settle();
        self.service_up = up;
        if self.writer().is_some() {
            self.announce(up)?;
        }
        Ok(())
    }

    /// Sets an item's whole image and sends it as a refresh: on the item's own stream
    /// (non-interactive), or in answer to the node's pending request (interactive).
    pub fn publish_refresh(
        &mut self,
        name: &str,
        fields: FieldList<'_>,
    ) -> Result<ItemId, PublishError> {
        // The node would refuse it (and no subscriber could ever receive it whole):
        // say so here, with the sizes, instead of sending it.
        let bytes = fields.as_bytes().len();
        let max = self.max_image_bytes();
        if bytes > max {
            return Err(PublishError::ImageTooLarge {
                name: name.to_string(),
                bytes,
                max,
            });
        }
        let id = match self.by_name.get(name) {
            Some(&id) => id,
            None => {
                let id = self.items.len();
                self.items.push(PubItem::default());
                self.names.push(name.to_string());
                self.by_name.insert(name.to_string(), id);
                id
            }
        };
        // Updates published before this image go first (they are replaced by it).
        self.settle();
        let item = &mut self.items[id];
        item.image.clear();
        item.image.apply(fields);
        let solicited;
        if let Some(sid) = self.pending_requests.remove(name) {
            self.bind(id, sid);
            solicited = true;
        } else {
            if self.items[id].stream.is_none() && !self.service.interactive {
                self.bind(id, own_stream(id));
            }
            solicited = false;
        }
        if self.items[id].stream.is_some() {
            self.send_refresh(id, solicited)?;
        }
        Ok(id)
    }

    /// Merges an update into the item's image and sends it if the item is open. The
    /// update is queued and both are done with the next few dozen updates, or before
    /// the session does anything else (its output is taken, a message from the node is
    /// handled, an image is read): the application cannot tell the difference, but a
    /// batch has its items loaded ahead of use. `Err` only for an unknown item or (at
    /// once) a field list too large for one message.
    pub fn publish_update(
        &mut self,
        id: ItemId,
        update_type: UpdateType,
        fields: FieldList<'_>,
        do_not_conflate: bool,
    ) -> Result<(), PublishError> {
        if id >= self.items.len() {
            return Err(PublishError::UnknownItem(id));
        }
        let update = UpdateOf {
            id,
            update_type,
            do_not_conflate,
        };
        let bytes = fields.as_bytes();
        if bytes.len() > QUEUED_FIELDS_MAX {
            return self.publish_large_update(update, fields);
        }
        // Queued (see UPDATE_BATCH): the item's state is not touched here.
        let p = &mut self.pending;
        let start = p.fields.len() as u32;
        p.fields.extend_from_slice(bytes);
        p.list.push(QueuedUpdate {
            update,
            start,
            end: p.fields.len() as u32,
        });
        if p.list.len() >= UPDATE_BATCH {
            self.settle();
        }
        Ok(())
    }

    /// An update too large to queue: sent at once, so an error is the caller's.
    #[cold]
    fn publish_large_update(
        &mut self,
        u: UpdateOf,
        fields: FieldList<'_>,
    ) -> Result<(), PublishError> {
        self.settle();
        let w = logged_in_writer(&mut self.link, self.welcomed);
        let sent = self.items[u.id]
            .take_update(w, u, fields)
            .map_err(ClientError::from)?;
        self.updates_sent += sent as u64;
        Ok(())
    }

    /// Tells the node an item it asked for does not exist.
    pub fn reject_request(&mut self, name: &str, text: &str) -> Result<(), ClientError> {
        self.settle();
        let Some(sid) = self.pending_requests.remove(name) else {
            return Ok(());
        };
        if let Some(w) = self.writer() {
            push_not_found(w, sid, text)?;
        }
        Ok(())
    }

    /// When [`PublisherSession::handle_timeout`] is next needed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.link.poll_timeout(None)
    }

    /// Heartbeats and the Welcome's deadline. An `Err`: the connection failed; pass it
    /// to [`PublisherSession::connection_lost`].
    pub fn handle_timeout(&mut self, now: Instant) -> Result<(), ClientError> {
        self.settle();
        match self.link.connection() {
            Some(c) => c.handle_timeout(now),
            None => Ok(()),
        }
    }

    /// Handles what the node sent (the Welcome, requests, closes, heartbeats). What
    /// needs the application is in [`PublisherSession::take_events`]. An `Err`: the
    /// connection failed; pass it to [`PublisherSession::connection_lost`].
    pub fn poll(&mut self, _now: Instant) -> Result<(), ClientError> {
        self.settle();
        let Some(conn) = self.link.connection() else {
            return Ok(());
        };
        let mut requests: Vec<(u32, String)> = Vec::new();
        let mut closes: Vec<u32> = Vec::new();
        let mut pings: Vec<u64> = Vec::new();
        let mut posts: Vec<ReceivedPost> = Vec::new();
        while let Some(frame) = conn.next_frame()? {
            for raw in MessageIter::new(frame) {
                match raw?.message {
                    Message::Request(r) => requests.push((r.stream_id, r.name.to_string())),
                    Message::Post(p) => posts.push(ReceivedPost {
                        stream: p.stream_id,
                        post_id: p.post_id,
                        ack: p.ack,
                        image: p.image,
                        redelivered: p.redelivered,
                        service: p.service.to_string(),
                        name: p.name.to_string(),
                        item: None,
                        fields: Fields::from_list(p.fields),
                    }),
                    Message::Close { stream_id } => closes.push(stream_id),
                    Message::Ping(t) => pings.push(t),
                    Message::Pong(_) | Message::Directory(_) => {}
                    Message::Status(s) if s.stream_id == 0 => {
                        if is_fatal(s.state.stream, s.state.code) {
                            return Err(ClientError::Rejected {
                                code: s.state.code,
                                reason: s.state.text.to_string(),
                            });
                        }
                        if s.state.stream != StreamState::Open {
                            return Err(ClientError::Disconnected(format!(
                                "node closed the connection: {}",
                                s.state.text
                            )));
                        }
                    }
                    Message::Status(_) => {}
                    other => {
                        return Err(ClientError::Protocol(format!(
                            "unexpected {:?} message from the node",
                            other.message_type()
                        )))
                    }
                }
            }
        }
        for t in pings {
            conn.writer().push(&Message::Pong(t))?;
        }
        if conn.session().is_some() && !self.welcomed {
            self.welcome()?;
        }
        // A stream the node closed is answered no more: a refresh on it after its
        // Close is a protocol error at the node, which drops the connection. That
        // covers a request closed in this same batch and one still waiting for the
        // application's image.
        let mut closed = std::collections::HashSet::new();
        for sid in closes {
            closed.insert(sid);
            if let Some(id) = self.by_stream.remove(&sid) {
                self.items[id].stream = None;
                self.events.push(PublisherEvent::Closed { item: id });
            }
        }
        if !closed.is_empty() && !self.pending_requests.is_empty() {
            self.pending_requests.retain(|_, sid| !closed.contains(sid));
        }
        for (sid, name) in requests {
            if closed.contains(&sid) {
                continue;
            }
            if let Some(&id) = self.by_stream.get(&sid) {
                // The node wants a fresh image of an open item (cache off, re-request).
                self.send_refresh(id, true)?;
            } else if let Some(&id) = self.by_name.get(&name) {
                self.bind(id, sid);
                self.send_refresh(id, true)?;
            } else if self.service.interactive {
                self.pending_requests.insert(name.clone(), sid);
                self.events.push(PublisherEvent::Request { name });
            } else if let Some(w) = self.writer() {
                let text = format!("{name:?} is not published by this publisher");
                push_not_found(w, sid, &text)?;
            }
        }
        for mut post in posts {
            if self.service.accept_posts {
                post.item = self.by_name.get(&post.name).copied();
                self.events.push(PublisherEvent::Post(post));
            } else if post.ack {
                self.answer_post(
                    &post,
                    Some(NakCode::DeniedBySrc),
                    "this publisher does not take posts",
                )?;
            }
        }
        match self.link.connection() {
            Some(c) => c.check_output(),
            None => Ok(()),
        }
    }

    /// Answers a post that asked for it (`post.ack`): `None` accepts it, a code
    /// refuses it with `text` saying why. The node passes the answer to the poster.
    pub fn answer_post(
        &mut self,
        post: &ReceivedPost,
        nak: Option<NakCode>,
        text: &str,
    ) -> Result<(), ClientError> {
        self.settle();
        if !post.ack {
            return Ok(());
        }
        match self.writer() {
            Some(w) => Ok(w.push(&Message::Ack(Ack {
                stream_id: post.stream,
                post_id: post.post_id,
                nak,
                text,
            }))?),
            // The node refuses (`SourceDown`) what its publisher left unanswered.
            None => Ok(()),
        }
    }

    /// The Welcome is in: the service down, every image, then the service as wanted.
    fn welcome(&mut self) -> Result<(), ClientError> {
        self.welcomed = true;
        let before = self.link.pending_output();
        let first = self.link.logged_in_count() == 1;
        self.announce(if first { self.service_up } else { false })?;
        // Every item on its own stream is (re-)imaged, unsolicited.
        let own: Vec<ItemId> = self.by_stream.values().copied().collect();
        for id in own {
            self.send_refresh(id, false)?;
        }
        if !first {
            if self.service_up {
                self.announce(true)?;
            }
            self.events.push(PublisherEvent::Reconnected);
        }
        // Every image is owed, however many: not held against the node as unread.
        let queued = self.link.pending_output().saturating_sub(before);
        if let Some(c) = self.link.connection() {
            c.owe(queued);
        }
        Ok(())
    }

    fn bind(&mut self, id: ItemId, sid: u32) {
        if let Some(old) = self.items[id].stream.replace(sid) {
            self.by_stream.remove(&old);
        }
        self.by_stream.insert(sid, id);
    }

    fn send_refresh(&mut self, id: ItemId, solicited: bool) -> Result<(), ClientError> {
        self.settle();
        let Some(conn) = self.link.connection() else {
            return Ok(());
        };
        if conn.session().is_none() || !self.welcomed {
            return Ok(()); // sent with every image once the Welcome is in
        }
        let item = &self.items[id];
        let (seq, stream) = (item.seq, item.stream);
        let Some(sid) = stream else {
            return Ok(());
        };
        self.scratch.clear();
        item.image.write(&mut self.scratch, None);
        let parts = if self.scratch.len() <= REFRESH_PART {
            vec![self.scratch.clone()]
        } else {
            tickwire_proto::field::split_field_list(&self.scratch, REFRESH_PART)
        };
        let n = parts.len();
        for (i, part) in parts.iter().enumerate() {
            conn.writer().push(&Message::Refresh(Refresh {
                stream_id: sid,
                seq,
                complete: i + 1 == n,
                solicited,
                clear_cache: i == 0,
                state: State::OPEN_OK,
                service: &self.service.service,
                name: &self.names[id],
                fields: FieldList::from_trusted(part),
            }))?;
        }
        Ok(())
    }

    fn announce(&mut self, up: bool) -> Result<(), ClientError> {
        let Some(conn) = self.link.connection() else {
            return Ok(());
        };
        conn.writer().push(&Message::Directory(Directory {
            services: vec![ServiceEntry {
                name: &self.service.service,
                state: if up {
                    ServiceState::Up
                } else {
                    ServiceState::Down
                },
                interactive: self.service.interactive,
                item_count: 0,
            }],
        }))?;
        Ok(())
    }
}

/// The writer of a connection whose Welcome is in and acted on, if any.
fn logged_in_writer(link: &mut Link, welcomed: bool) -> Option<&mut tickwire_proto::FrameWriter> {
    match link.logged_in() {
        Some(c) if welcomed => Some(c.writer()),
        _ => None,
    }
}

/// Answers the node's request on stream `sid` for an item that is not here (the one
/// answer both for an unknown item and for one the application rejected).
fn push_not_found(
    w: &mut tickwire_proto::FrameWriter,
    sid: u32,
    text: &str,
) -> Result<(), ClientError> {
    w.push(&Message::Status(Status {
        stream_id: sid,
        state: State::closed(code::NOT_FOUND, text),
    }))?;
    Ok(())
}

fn own_stream(id: ItemId) -> u32 {
    (id as u32 + 1) % NODE_STREAM_BASE
}
