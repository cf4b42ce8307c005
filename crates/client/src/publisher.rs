//! The blocking publisher: a [`PublisherSession`] driven over a socket.

use crate::conn::{ConnectOptions, Io, Transport};
use crate::publishing::{
    ItemId, PublishError, PublisherEvent, PublisherSession, ReceivedPost, ServiceOptions,
};
use crate::session::Session;
use crate::ClientError;
use log::{info, warn};
use std::time::{Duration, Instant};
use tickwire_proto::{FieldImage, FieldList, NakCode, Role, UpdateType};

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
    /// Hand subscribers' posts to the application as [`PublisherEvent::Post`] (answer
    /// them with [`Publisher::answer_post`]); without it they are refused.
    pub accept_posts: bool,
}

impl PublisherOptions {
    pub fn new(connect: ConnectOptions, service: impl Into<String>) -> Self {
        PublisherOptions {
            connect,
            service: service.into(),
            interactive: false,
            start_down: false,
            accept_posts: false,
        }
    }
}

/// Output queued beyond this is written before publishing more (back-pressure).
const HIGH_WATER: usize = 4 * 1024 * 1024;

/// Publishes the images and updates of one service's items to a node, and reconnects
/// (re-announcing the service and re-sending every image) when the connection is lost.
pub struct Publisher {
    opts: PublisherOptions,
    session: PublisherSession,
    /// `None` while disconnected.
    transport: Option<Transport>,
}

impl Publisher {
    /// Connects, logs in and announces the service.
    pub fn connect(opts: PublisherOptions) -> Result<Self, ClientError> {
        let now = Instant::now();
        let service = ServiceOptions {
            service: opts.service.clone(),
            interactive: opts.interactive,
            start_down: opts.start_down,
            accept_posts: opts.accept_posts,
        };
        let mut session = PublisherSession::new(
            opts.connect.login(Role::Publisher),
            opts.connect.reconnect_policy(),
            service,
            now,
        );
        let mut transport = Transport::open(&opts.connect)?;
        session.connecting(now)?;
        transport.welcome(
            session.connection().expect("connecting"),
            &opts.connect.addr,
        )?;
        session.poll(Instant::now())?;
        if let Some(c) = session.connection() {
            transport.flush_some(c)?;
        }
        info!(
            "publisher for service {:?} connected to {} ({})",
            opts.service,
            opts.connect.addr,
            session.session().map_or("", |s| s.node_name.as_str())
        );
        Ok(Publisher {
            opts,
            session,
            transport: Some(transport),
        })
    }

    pub fn session(&self) -> Option<&Session> {
        self.session.session()
    }

    /// The largest image the node accepts (from its Welcome; the default node's
    /// before the first connection).
    pub fn max_image_bytes(&self) -> usize {
        self.session.max_image_bytes()
    }

    pub fn is_connected(&self) -> bool {
        self.transport.is_some()
    }

    /// The socket, for a caller that waits for input itself and then calls
    /// `dispatch(Duration::ZERO)`. `None` while reconnecting.
    pub fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        self.transport.as_ref().map(|t| t.raw_fd())
    }

    /// Writes what is queued as far as the socket takes it now, without waiting (what
    /// it does not take goes with the next call, `flush` or `dispatch`).
    pub fn write_pending(&mut self) -> Result<(), PublishError> {
        self.write_some()?;
        Ok(())
    }

    pub fn service(&self) -> &str {
        self.session.service()
    }

    pub fn item(&self, name: &str) -> Option<ItemId> {
        self.session.item(name)
    }

    pub fn item_name(&self, id: ItemId) -> Option<&str> {
        self.session.item_name(id)
    }

    /// The item is open at the node (its updates are sent).
    pub fn is_open(&self, id: ItemId) -> bool {
        self.session.is_open(id)
    }

    pub fn item_count(&self) -> usize {
        self.session.item_count()
    }

    /// The publisher's current image of an item.
    pub fn image(&mut self, id: ItemId) -> Option<&FieldImage> {
        self.session.image(id)
    }

    pub fn updates_sent(&mut self) -> u64 {
        self.session.updates_sent()
    }

    pub fn reconnects(&self) -> u64 {
        self.session.reconnects()
    }

    /// Announces the service up (or down again). Subscriber requests wait at the node
    /// while the service is down.
    pub fn set_service_up(&mut self, up: bool) -> Result<(), PublishError> {
        self.session.set_service_up(up)?;
        self.write_some()?;
        Ok(())
    }

    /// Sets an item's whole image and sends it as a refresh: on the item's own stream
    /// (non-interactive), or in answer to the node's pending request (interactive).
    pub fn publish_refresh(
        &mut self,
        name: &str,
        fields: FieldList<'_>,
    ) -> Result<ItemId, PublishError> {
        let id = self.session.publish_refresh(name, fields)?;
        self.back_pressure()?;
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
        self.session
            .publish_update(id, update_type, fields, do_not_conflate)?;
        self.back_pressure()?;
        Ok(())
    }

    /// Answers a post (see [`PublisherEvent::Post`]): `None` accepts it, a code refuses
    /// it with `text` saying why.
    pub fn answer_post(
        &mut self,
        post: &ReceivedPost,
        nak: Option<NakCode>,
        text: &str,
    ) -> Result<(), PublishError> {
        self.session.answer_post(post, nak, text)?;
        Ok(())
    }

    /// Tells the node an item it asked for does not exist.
    pub fn reject_request(&mut self, name: &str, text: &str) -> Result<(), PublishError> {
        self.session.reject_request(name, text)?;
        Ok(())
    }

    /// Writes everything queued, waiting up to `timeout`.
    pub fn flush(&mut self, timeout: Duration) -> Result<(), PublishError> {
        if self.transport.is_none() {
            self.maybe_reconnect()?;
        }
        if let (Some(t), Some(c)) = (self.transport.as_mut(), self.session.connection()) {
            if let Err(e) = t.flush_until(c, Instant::now() + timeout) {
                self.lost(e)?;
            }
        }
        Ok(())
    }

    /// Handles what the node sent (requests, closes, heartbeats), waiting up to
    /// `timeout` for something to arrive, and returns what needs the application.
    /// Call it regularly: heartbeats are answered here.
    pub fn dispatch(&mut self, timeout: Duration) -> Result<Vec<PublisherEvent>, PublishError> {
        let deadline = Instant::now() + timeout;
        loop {
            let now = Instant::now();
            if self.transport.is_none() {
                if now < self.session.retry_at() && now < deadline {
                    std::thread::sleep(self.session.retry_at().min(deadline) - now);
                }
                self.maybe_reconnect()?;
                if self.transport.is_none() || self.session.has_events() {
                    return Ok(self.session.take_events());
                }
                continue;
            }
            if let Err(e) = self.session.poll(now) {
                self.lost(e)?;
                continue;
            }
            if now >= self.session.poll_timeout() {
                if let Err(e) = self.session.handle_timeout(now) {
                    self.lost(e)?;
                    continue;
                }
            }
            self.write_some()?;
            if self.session.has_events() {
                return Ok(self.session.take_events());
            }
            let left = deadline.saturating_duration_since(now);
            let until_timer = self.session.poll_timeout().saturating_duration_since(now);
            let (Some(t), Some(c)) = (self.transport.as_mut(), self.session.connection()) else {
                continue;
            };
            let res = if left.is_zero() {
                t.read_available(c)
            } else {
                t.wait(c, left.min(until_timer).max(Duration::from_micros(100)))
            };
            match res {
                Ok(Io::Read) => continue,
                Ok(Io::Idle) if left.is_zero() => {
                    if let Err(e) = self.session.poll(Instant::now()) {
                        self.lost(e)?;
                    }
                    return Ok(self.session.take_events());
                }
                Ok(Io::Idle) => continue,
                Err(e) => self.lost(e)?,
            }
        }
    }

    /// Past the high-water mark, what is queued is written before going on.
    fn back_pressure(&mut self) -> Result<(), ClientError> {
        if self.session.pending_output() < HIGH_WATER {
            return Ok(());
        }
        if let (Some(t), Some(c)) = (self.transport.as_mut(), self.session.connection()) {
            let res = t
                .flush_some(c)
                .and_then(|_| t.flush_until(c, Instant::now() + Duration::from_secs(10)));
            if let Err(e) = res {
                self.lost(e)?;
            }
        }
        Ok(())
    }

    fn write_some(&mut self) -> Result<(), ClientError> {
        if let (Some(t), Some(c)) = (self.transport.as_mut(), self.session.connection()) {
            if let Err(e) = t.flush_some(c) {
                self.lost(e)?;
            }
        }
        Ok(())
    }

    fn lost(&mut self, err: ClientError) -> Result<(), ClientError> {
        self.transport = None;
        if err.is_transient() && self.opts.connect.reconnect {
            warn!("{err}; reconnecting to {}", self.opts.connect.addr);
        }
        self.session.connection_lost(err, Instant::now())
    }

    fn maybe_reconnect(&mut self) -> Result<(), ClientError> {
        let now = Instant::now();
        if self.transport.is_some() || !self.session.wants_connect(now) {
            return Ok(());
        }
        match Transport::open(&self.opts.connect) {
            Ok(mut t) => {
                self.session.connecting(now)?;
                let c = self.session.connection().expect("connecting");
                if let Err(e) = t.welcome(c, &self.opts.connect.addr) {
                    let msg = e.to_string();
                    self.session.connection_lost(e, Instant::now())?;
                    warn!("reconnect to {} failed: {msg}", self.opts.connect.addr);
                    return Ok(());
                }
                self.transport = Some(t);
                // The Welcome is in: the service and every image are queued here.
                if let Err(e) = self.session.poll(Instant::now()) {
                    return self.lost(e);
                }
                info!(
                    "publisher reconnected to {}; images sent again",
                    self.opts.connect.addr
                );
                self.write_some()
            }
            Err(e) => {
                let msg = e.to_string();
                self.session.connect_failed(e, now)?;
                warn!(
                    "reconnect to {} failed: {msg}; next try in {} ms",
                    self.opts.connect.addr,
                    self.session
                        .retry_at()
                        .saturating_duration_since(now)
                        .as_millis()
                );
                Ok(())
            }
        }
    }
}
