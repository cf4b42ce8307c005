//! The blocking publisher: a [`PublisherSession`] driven over a socket.

use crate::conn::ConnectOptions;
use crate::driver::Driver;
use crate::publishing::{
    ItemId, PublishError, PublisherEvent, PublisherSession, ReceivedPost, ServiceOptions,
};
use crate::ClientError;
use log::info;
use std::time::{Duration, Instant};
use tickwire_proto::{FieldImage, FieldList, NakCode, Role, UpdateType};

/// How a publisher connects and what it announces.
#[derive(Debug, Clone)]
pub struct PublisherOptions {
    /// Where and as whom it connects.
    pub connect: ConnectOptions,
    /// The service it publishes.
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
    /// A non-interactive service, up at once, taking no posts.
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
/// A node that has not taken the output past the high-water mark after this long (in
/// one wait or several) is taken as lost.
const STALL_LIMIT: Duration = Duration::from_secs(10);

/// Publishes the images and updates of one service's items to a node, and reconnects
/// (re-announcing the service and re-sending every image) when the connection is lost.
pub struct Publisher {
    driver: Driver<PublisherSession>,
    /// Publishing waits for room itself (else the caller calls `wait_for_room`).
    wait_in_publish: bool,
    /// Since when output past the high-water mark has waited for the node.
    stalled_since: Option<Instant>,
}

impl Publisher {
    /// Connects, logs in and announces the service.
    pub fn connect(opts: PublisherOptions) -> Result<Self, ClientError> {
        let service = ServiceOptions {
            service: opts.service.clone(),
            interactive: opts.interactive,
            start_down: opts.start_down,
            accept_posts: opts.accept_posts,
        };
        let session = PublisherSession::new(
            opts.connect.login(Role::Publisher),
            opts.connect.reconnect_policy(),
            service,
            Instant::now(),
        );
        let mut driver = Driver::connect(opts.connect, session, "publisher")?;
        // The Welcome is in: the service is announced now.
        driver.session.poll(Instant::now())?;
        driver.write_some()?;
        info!(
            "publisher for service {:?} connected to {} ({})",
            opts.service,
            driver.node(),
            driver
                .session
                .session()
                .map_or("", |s| s.node_name.as_str())
        );
        Ok(Publisher {
            driver,
            wait_in_publish: true,
            stalled_since: None,
        })
    }

    crate::driver::driver_methods!("publisher");

    /// The largest image the node accepts (from its Welcome; the default node's
    /// before the first connection).
    pub fn max_image_bytes(&self) -> usize {
        self.driver.session.max_image_bytes()
    }

    /// Writes what is queued as far as the socket takes it now, without waiting (what
    /// it does not take goes with the next call, `flush` or `dispatch`).
    pub fn write_pending(&mut self) -> Result<(), PublishError> {
        self.driver.not_ended()?;
        self.driver.write_some()?;
        Ok(())
    }

    /// The service it publishes.
    pub fn service(&self) -> &str {
        self.driver.session.service()
    }

    /// An item by name.
    pub fn item(&self, name: &str) -> Option<ItemId> {
        self.driver.session.item(name)
    }

    /// An item's name.
    pub fn item_name(&self, id: ItemId) -> Option<&str> {
        self.driver.session.item_name(id)
    }

    /// The item is open at the node (its updates are sent).
    pub fn is_open(&self, id: ItemId) -> bool {
        self.driver.session.is_open(id)
    }

    /// Items it has published.
    pub fn item_count(&self) -> usize {
        self.driver.session.item_count()
    }

    /// The publisher's current image of an item.
    pub fn image(&mut self, id: ItemId) -> Option<&FieldImage> {
        self.driver.session.image(id)
    }

    /// Updates sent so far.
    pub fn updates_sent(&mut self) -> u64 {
        self.driver.session.updates_sent()
    }

    /// Announces the service up (or down again). Subscriber requests wait at the node
    /// while the service is down.
    pub fn set_service_up(&mut self, up: bool) -> Result<(), PublishError> {
        self.driver.not_ended()?;
        self.driver.session.set_service_up(up)?;
        self.driver.write_some()?;
        Ok(())
    }

    /// Sets an item's whole image and sends it as a refresh: on the item's own stream
    /// (non-interactive), or in answer to the node's pending request (interactive).
    pub fn publish_refresh(
        &mut self,
        name: &str,
        fields: FieldList<'_>,
    ) -> Result<ItemId, PublishError> {
        self.driver.not_ended()?;
        let id = self.driver.session.publish_refresh(name, fields)?;
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
        self.driver.not_ended()?;
        self.driver
            .session
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
        self.driver.not_ended()?;
        self.driver.session.answer_post(post, nak, text)?;
        Ok(())
    }

    /// Tells the node an item it asked for does not exist.
    pub fn reject_request(&mut self, name: &str, text: &str) -> Result<(), PublishError> {
        self.driver.not_ended()?;
        self.driver.session.reject_request(name, text)?;
        Ok(())
    }

    /// Writes everything queued, waiting up to `timeout` (reconnecting first when a
    /// reconnect is due); `ClientError::Timeout` when the node did not take it all in
    /// time (the rest stays queued).
    pub fn flush(&mut self, timeout: Duration) -> Result<(), PublishError> {
        self.driver.not_ended()?;
        if !self.driver.is_connected() {
            self.driver.run(Duration::ZERO, |_, _| Ok(None::<()>))?;
        }
        self.driver.flush(timeout)?;
        Ok(())
    }

    /// Handles what the node sent (requests, closes, heartbeats), waiting up to
    /// `timeout` for something to arrive, and returns what needs the application.
    /// Call it regularly: heartbeats are answered here. A signal handled meanwhile
    /// (Ctrl-C, say) ends the wait early, with whatever came.
    pub fn dispatch(&mut self, timeout: Duration) -> Result<Vec<PublisherEvent>, PublishError> {
        let got = self.driver.run(timeout, |session, now| {
            session.poll(now)?;
            Ok(session.has_events().then(|| session.take_events()))
        })?;
        Ok(got.unwrap_or_default())
    }

    /// With `false`, publishing never waits for the node: the caller calls
    /// [`Publisher::wait_for_room`] after publishing (in short slices, say, to look at
    /// signals between them). By default publishing waits itself.
    pub fn set_wait_in_publish(&mut self, wait: bool) {
        self.wait_in_publish = wait;
    }

    /// Past the high-water mark, what is queued is written before going on: waits up
    /// to `timeout` for it, and says whether there is room now. A node that has taken
    /// none of it for 10 s, over however many calls, is taken as lost (reconnected, and
    /// every image sent again), so that what waits for it stays bounded.
    pub fn wait_for_room(&mut self, timeout: Duration) -> Result<bool, ClientError> {
        self.driver.not_ended()?;
        if self.driver.session.pending_output() < HIGH_WATER {
            self.stalled_since = None;
            return Ok(true);
        }
        let now = Instant::now();
        let since = *self.stalled_since.get_or_insert(now);
        let left = (since + STALL_LIMIT).saturating_duration_since(now);
        match self.driver.flush(timeout.min(left)) {
            Ok(()) => {
                self.stalled_since = None;
                Ok(true)
            }
            Err(ClientError::Timeout(_)) if timeout < left => Ok(false),
            Err(e @ ClientError::Timeout(_)) => {
                self.stalled_since = None;
                self.driver.lost(e)?;
                Ok(true)
            }
            Err(e) => Err(e),
        }
    }

    fn back_pressure(&mut self) -> Result<(), ClientError> {
        if self.wait_in_publish {
            self.wait_for_room(STALL_LIMIT)?;
        }
        Ok(())
    }
}
