//! The publisher: pushes the images and updates of one service's items to a node.
//!
//! It keeps the current image of every item it published, so it can answer any request
//! from the node (a cache-off node forwards every subscriber request), re-image every
//! item after a reconnect, and serve an interactive ("sink-driven") node that asks for
//! items on demand.

use crate::conn::{Conn, ConnectOptions, Io};
use crate::session::{is_fatal, Session};
use crate::{Backoff, ClientError};
use log::{info, warn};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use thiserror::Error;
use tickwire_proto::{
    code, DataState, Directory, FieldImage, FieldList, Message, MessageIter, Refresh, Role,
    ServiceEntry, ServiceState, State, Status, StreamState, Update, UpdateType,
};

/// Index of an item in the publisher.
pub type ItemId = usize;

#[derive(Debug, Clone)]
pub struct PublisherOptions {
    pub connect: ConnectOptions,
    pub service: String,
    /// Announce the service as interactive: the node asks for items on demand and says
    /// when nobody watches them any more.
    pub interactive: bool,
    /// Announce the service down at first and bring it up with
    /// [`Publisher::set_service_up`] once the initial images are published, so no
    /// subscriber is told "not found" for an item that is on its way.
    pub start_down: bool,
}

impl PublisherOptions {
    pub fn new(connect: ConnectOptions, service: impl Into<String>) -> Self {
        PublisherOptions {
            connect,
            service: service.into(),
            interactive: false,
            start_down: false,
        }
    }
}

/// What the node asked of the publisher that the library could not answer alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublisherEvent {
    /// An interactive node wants an item this publisher has no image for: answer with
    /// [`Publisher::publish_refresh`] (or [`Publisher::reject_request`]).
    Request { name: String },
    /// Nobody watches the item any more; updates to it are kept in its image only.
    Closed { item: ItemId },
    /// The connection was re-established and every image sent again.
    Reconnected,
    /// The connection was lost; the publisher keeps images and reconnects.
    Disconnected { reason: String },
}

#[derive(Debug, Error)]
pub enum PublishError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error("unknown item id {0}")]
    UnknownItem(ItemId),
    #[error(
        "image of {name:?} not published: {bytes} bytes, the node accepts at most {max} \
         (half its max_output_bytes)"
    )]
    ImageTooLarge {
        name: String,
        bytes: usize,
        max: usize,
    },
}

struct PubItem {
    name: String,
    image: FieldImage,
    seq: u32,
    /// The stream this item is open on at the node, if any.
    stream: Option<u32>,
}

/// First stream id the node uses for its own requests; the publisher's ids stay below.
const NODE_STREAM_BASE: u32 = 0x8000_0000;
/// Output queued beyond this is written before publishing more (back-pressure).
const HIGH_WATER: usize = 4 * 1024 * 1024;
/// Largest field list per refresh part.
const REFRESH_PART: usize = 60_000;

pub struct Publisher {
    opts: PublisherOptions,
    conn: Option<Conn>,
    items: Vec<PubItem>,
    by_name: HashMap<String, ItemId>,
    by_stream: HashMap<u32, ItemId>,
    /// Interactive requests waiting for the application's image: name -> node stream.
    pending_requests: HashMap<String, u32>,
    events: Vec<PublisherEvent>,
    backoff: Backoff,
    retry_at: Instant,
    scratch: Vec<u8>,
    updates_sent: u64,
    reconnects: u64,
    /// The state the application wants the service announced with.
    service_up: bool,
}

impl Publisher {
    /// Connects, logs in and announces the service.
    pub fn connect(opts: PublisherOptions) -> Result<Self, ClientError> {
        let mut conn = Conn::open(&opts.connect, Role::Publisher)?;
        let service_up = !opts.start_down;
        announce(&mut conn, &opts, service_up)?;
        info!(
            "publisher for service {:?} connected to {} ({})",
            opts.service,
            opts.connect.addr,
            conn.session().node_name
        );
        Ok(Publisher {
            backoff: Backoff::new(opts.connect.backoff_min, opts.connect.backoff_max),
            opts,
            conn: Some(conn),
            items: Vec::new(),
            by_name: HashMap::new(),
            by_stream: HashMap::new(),
            pending_requests: HashMap::new(),
            events: Vec::new(),
            retry_at: Instant::now(),
            scratch: Vec::with_capacity(64 * 1024),
            updates_sent: 0,
            reconnects: 0,
            service_up,
        })
    }

    pub fn session(&self) -> Option<&Session> {
        self.conn.as_ref().map(|c| c.session())
    }

    /// The largest image the node accepts (from its Welcome; the default node's
    /// before the first connection).
    pub fn max_image_bytes(&self) -> usize {
        let max_output = self
            .conn
            .as_ref()
            .map(|c| c.session().max_output_bytes as usize)
            .filter(|&m| m > 0)
            .unwrap_or(8 * 1024 * 1024);
        tickwire_proto::max_image_bytes(max_output)
    }

    pub fn is_connected(&self) -> bool {
        self.conn.is_some()
    }

    pub fn service(&self) -> &str {
        &self.opts.service
    }

    pub fn item(&self, name: &str) -> Option<ItemId> {
        self.by_name.get(name).copied()
    }

    pub fn item_name(&self, id: ItemId) -> Option<&str> {
        self.items.get(id).map(|i| i.name.as_str())
    }

    /// The item is open at the node (its updates are sent).
    pub fn is_open(&self, id: ItemId) -> bool {
        self.items.get(id).is_some_and(|i| i.stream.is_some())
    }

    pub fn item_count(&self) -> usize {
        self.items.len()
    }

    /// The publisher's current image of an item.
    pub fn image(&self, id: ItemId) -> Option<&FieldImage> {
        self.items.get(id).map(|i| &i.image)
    }

    pub fn updates_sent(&self) -> u64 {
        self.updates_sent
    }

    pub fn reconnects(&self) -> u64 {
        self.reconnects
    }

    /// Announces the service up (or down again). Subscriber requests wait at the node
    /// while the service is down.
    pub fn set_service_up(&mut self, up: bool) -> Result<(), PublishError> {
        self.service_up = up;
        if let Some(conn) = self.conn.as_mut() {
            if let Err(e) = announce(conn, &self.opts, up) {
                self.lost(e)?;
            }
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
                self.items.push(PubItem {
                    name: name.to_string(),
                    image: FieldImage::new(),
                    seq: 0,
                    stream: None,
                });
                self.by_name.insert(name.to_string(), id);
                id
            }
        };
        let item = &mut self.items[id];
        item.image.clear();
        item.image.apply(fields);
        let solicited;
        if let Some(sid) = self.pending_requests.remove(name) {
            self.bind(id, sid);
            solicited = true;
        } else {
            if item.stream.is_none() && !self.opts.interactive {
                let own = own_stream(id);
                self.bind(id, own);
            }
            solicited = false;
        }
        if self.items[id].stream.is_some() {
            self.send_refresh(id, solicited)?;
        }
        Ok(id)
    }

    /// Merges an update into the item's image and sends it if the item is open.
    pub fn publish_update(
        &mut self,
        id: ItemId,
        update_type: UpdateType,
        fields: FieldList<'_>,
        do_not_conflate: bool,
    ) -> Result<(), PublishError> {
        let item = self
            .items
            .get_mut(id)
            .ok_or(PublishError::UnknownItem(id))?;
        item.image.apply(fields);
        item.seq = item.seq.wrapping_add(1);
        let (Some(sid), Some(conn)) = (item.stream, self.conn.as_mut()) else {
            return Ok(());
        };
        let msg = Message::Update(Update {
            stream_id: sid,
            seq: item.seq,
            update_type,
            do_not_conflate,
            conflation_count: 1,
            fields,
        });
        conn.proto.writer().push(&msg).map_err(ClientError::from)?;
        self.updates_sent += 1;
        if conn.proto.writer().pending_len() >= HIGH_WATER {
            let res = conn
                .flush_some()
                .and_then(|_| conn.flush_until(Instant::now() + Duration::from_secs(10)));
            if let Err(e) = res {
                self.lost(e)?;
            }
        }
        Ok(())
    }

    /// Tells the node an item it asked for does not exist.
    pub fn reject_request(&mut self, name: &str, text: &str) -> Result<(), PublishError> {
        if let (Some(sid), Some(conn)) = (self.pending_requests.remove(name), self.conn.as_mut()) {
            conn.proto
                .writer()
                .push(&Message::Status(Status {
                    stream_id: sid,
                    state: State {
                        stream: StreamState::Closed,
                        data: DataState::Suspect,
                        code: code::NOT_FOUND,
                        text,
                    },
                }))
                .map_err(ClientError::from)?;
        }
        Ok(())
    }

    /// Writes everything queued, waiting up to `timeout`.
    pub fn flush(&mut self, timeout: Duration) -> Result<(), PublishError> {
        if let Some(conn) = &mut self.conn {
            if let Err(e) = conn.flush_until(Instant::now() + timeout) {
                self.lost(e)?;
            }
        } else {
            self.maybe_reconnect()?;
        }
        Ok(())
    }

    /// Handles what the node sent (requests, closes, heartbeats), waiting up to
    /// `timeout` for something to arrive, and returns what needs the application.
    /// Call it regularly: heartbeats are answered here.
    pub fn dispatch(&mut self, timeout: Duration) -> Result<Vec<PublisherEvent>, PublishError> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.conn.is_none() {
                let now = Instant::now();
                if now < self.retry_at && now < deadline {
                    std::thread::sleep(self.retry_at.min(deadline) - now);
                }
                self.maybe_reconnect()?;
                if self.conn.is_none() || !self.events.is_empty() {
                    return Ok(std::mem::take(&mut self.events));
                }
            }
            if let Err(e) = self.process_input() {
                self.lost(e)?;
                continue;
            }
            if !self.events.is_empty() {
                return Ok(std::mem::take(&mut self.events));
            }
            let conn = self.conn.as_mut().expect("connected");
            let left = deadline.saturating_duration_since(Instant::now());
            let res = if left.is_zero() {
                conn.read_available()
            } else {
                conn.wait(left.min(conn.session().heartbeat / 2))
            };
            let res = res.and_then(|io| conn.heartbeat().map(|_| io));
            match res {
                Ok(Io::Read) => continue,
                Ok(Io::Idle) if left.is_zero() => return Ok(std::mem::take(&mut self.events)),
                Ok(Io::Idle) => continue,
                Err(e) => self.lost(e)?,
            }
        }
    }

    fn bind(&mut self, id: ItemId, sid: u32) {
        if let Some(old) = self.items[id].stream.replace(sid) {
            self.by_stream.remove(&old);
        }
        self.by_stream.insert(sid, id);
    }

    fn send_refresh(&mut self, id: ItemId, solicited: bool) -> Result<(), ClientError> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(());
        };
        let item = &self.items[id];
        let Some(sid) = item.stream else {
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
            conn.proto.writer().push(&Message::Refresh(Refresh {
                stream_id: sid,
                seq: item.seq,
                complete: i + 1 == n,
                solicited,
                clear_cache: i == 0,
                state: State::OPEN_OK,
                service: &self.opts.service,
                name: &item.name,
                fields: FieldList::from_trusted(part),
            }))?;
        }
        Ok(())
    }

    fn process_input(&mut self) -> Result<(), ClientError> {
        let mut requests: Vec<(u32, String)> = Vec::new();
        let mut closes: Vec<u32> = Vec::new();
        {
            let conn = self.conn.as_mut().expect("connected");
            let mut pings = Vec::new();
            let mut handle = |payload: &[u8]| -> Result<(), ClientError> {
                for raw in MessageIter::new(payload) {
                    match raw?.message {
                        Message::Request(r) => requests.push((r.stream_id, r.name.to_string())),
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
                Ok(())
            };
            while let Some(frame) = conn.proto.next_frame()? {
                handle(frame)?;
            }
            for t in pings {
                conn.proto.writer().push(&Message::Pong(t))?;
            }
        }
        for sid in closes {
            if let Some(id) = self.by_stream.remove(&sid) {
                self.items[id].stream = None;
                self.events.push(PublisherEvent::Closed { item: id });
            }
        }
        for (sid, name) in requests {
            if let Some(&id) = self.by_stream.get(&sid) {
                // The node wants a fresh image of an open item (cache off, or re-request).
                self.send_refresh(id, true)?;
            } else if let Some(&id) = self.by_name.get(&name) {
                self.bind(id, sid);
                self.send_refresh(id, true)?;
            } else if self.opts.interactive {
                self.pending_requests.insert(name.clone(), sid);
                self.events.push(PublisherEvent::Request { name });
            } else {
                let text = format!("{name:?} is not published by this publisher");
                let conn = self.conn.as_mut().expect("connected");
                conn.proto.writer().push(&Message::Status(Status {
                    stream_id: sid,
                    state: State {
                        stream: StreamState::Closed,
                        data: DataState::Suspect,
                        code: code::NOT_FOUND,
                        text: &text,
                    },
                }))?;
            }
        }
        let conn = self.conn.as_mut().expect("connected");
        if !conn.proto.writer().is_empty() {
            conn.flush_some()?;
        }
        Ok(())
    }

    fn lost(&mut self, err: ClientError) -> Result<(), ClientError> {
        self.conn = None;
        if matches!(err, ClientError::Rejected { .. }) || !self.opts.connect.reconnect {
            return Err(err);
        }
        warn!("{err}; reconnecting to {}", self.opts.connect.addr);
        self.events.push(PublisherEvent::Disconnected {
            reason: err.to_string(),
        });
        // Streams the node opened belong to the old connection.
        for item in &mut self.items {
            if item.stream.is_some_and(|s| s >= NODE_STREAM_BASE) {
                item.stream = None;
            }
        }
        self.by_stream.retain(|&s, _| s < NODE_STREAM_BASE);
        self.pending_requests.clear();
        let now = Instant::now();
        self.retry_at = now + self.backoff.step(now);
        Ok(())
    }

    fn maybe_reconnect(&mut self) -> Result<(), ClientError> {
        if self.conn.is_some() || Instant::now() < self.retry_at {
            return Ok(());
        }
        // Down first, every image, then up (if the application had it up): subscribers
        // re-requesting meanwhile wait at the node instead of hearing "not found".
        let conn = Conn::open(&self.opts.connect, Role::Publisher).and_then(|mut c| {
            announce(&mut c, &self.opts, false)?;
            Ok(c)
        });
        match conn {
            Ok(conn) => {
                self.conn = Some(conn);
                self.backoff.connected(Instant::now());
                self.reconnects += 1;
                info!(
                    "publisher reconnected to {}; re-sending {} images",
                    self.opts.connect.addr,
                    self.by_stream.len()
                );
                // Every item on its own stream is re-imaged (unsolicited).
                let own: Vec<ItemId> = self.by_stream.values().copied().collect();
                for id in own {
                    self.send_refresh(id, false)?;
                }
                if self.service_up {
                    let conn = self.conn.as_mut().expect("just connected");
                    announce(conn, &self.opts, true)?;
                }
                self.events.push(PublisherEvent::Reconnected);
                Ok(())
            }
            Err(e @ ClientError::Rejected { .. }) => Err(e),
            Err(e) => {
                let delay = self.backoff.step(Instant::now());
                warn!(
                    "reconnect to {} failed: {e}; next try in {} ms",
                    self.opts.connect.addr,
                    delay.as_millis()
                );
                self.retry_at = Instant::now() + delay;
                Ok(())
            }
        }
    }
}

fn own_stream(id: ItemId) -> u32 {
    (id as u32 + 1) % NODE_STREAM_BASE
}

fn announce(conn: &mut Conn, opts: &PublisherOptions, up: bool) -> Result<(), ClientError> {
    conn.proto.writer().push(&Message::Directory(Directory {
        services: vec![ServiceEntry {
            name: &opts.service,
            state: if up {
                ServiceState::Up
            } else {
                ServiceState::Down
            },
            interactive: opts.interactive,
            item_count: 0,
        }],
    }))?;
    conn.flush_some()
}
