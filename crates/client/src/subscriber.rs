//! The blocking subscriber: a [`SubscriberSession`] driven over a socket.

use crate::conn::ConnectOptions;
use crate::driver::Driver;
use crate::events::{Event, EventRef};
use crate::watchlist::{PostTo, RequestOptions, StreamId, SubscriberSession};
use crate::ClientError;
use log::info;
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};
use tickwire_proto::{FieldList, Role, ServiceState};

/// Subscribes to items on a node and delivers their refreshes, updates and statuses.
///
/// Drive it with [`dispatch`](Self::dispatch) (zero-copy callback) or
/// [`next_event`](Self::next_event) (owned events). When the connection is lost, every
/// open stream gets an open/suspect status, the subscriber reconnects with backoff and
/// requests its whole watchlist again.
pub struct Subscriber {
    driver: Driver<SubscriberSession>,
    ready: VecDeque<Event>,
    /// The error that ended a `next_event` call which had events in hand: returned
    /// once they are.
    ended_by: Option<ClientError>,
}

impl Subscriber {
    /// Connects and logs in; fails if the node cannot be reached now.
    pub fn connect(opts: ConnectOptions) -> Result<Self, ClientError> {
        let session = SubscriberSession::new(
            opts.login(Role::Subscriber),
            opts.reconnect_policy(),
            Instant::now(),
        );
        let driver = Driver::connect(opts, session, "subscriber")?;
        info!(
            "subscriber connected to {} ({})",
            driver.node(),
            driver
                .session
                .session()
                .map_or("", |s| s.node_name.as_str())
        );
        Ok(Subscriber {
            driver,
            ready: VecDeque::new(),
            ended_by: None,
        })
    }

    crate::driver::driver_methods!("subscriber");

    /// Services and their state, as the node's directory messages left them (each
    /// lists the services that changed; removed ones are gone from here).
    pub fn directory(&self) -> &BTreeMap<String, ServiceState> {
        self.driver.session.directory()
    }

    /// Open streams in the watchlist.
    pub fn open_streams(&self) -> usize {
        self.driver.session.open_streams()
    }

    /// Opens a stream for an item; its refresh (or a status) arrives through dispatch.
    pub fn subscribe(
        &mut self,
        service: &str,
        name: &str,
        options: RequestOptions,
    ) -> Result<StreamId, ClientError> {
        self.driver.not_ended()?;
        let sid = self.driver.session.subscribe(service, name, options)?;
        self.driver.write_some()?;
        Ok(sid)
    }

    /// Sends a post (a contribution) to an item, on an open stream or by name; with
    /// `ack` its answer arrives through dispatch as an `Ack` event carrying `post_id`
    /// (see [`SubscriberSession::post`]). An error when the connection is lost before
    /// the post is written, even if it is then re-established: the post is not sent.
    pub fn post(
        &mut self,
        to: PostTo<'_>,
        post_id: u32,
        fields: FieldList<'_>,
        ack: bool,
    ) -> Result<(), ClientError> {
        self.driver.not_ended()?;
        self.driver.session.post(to, post_id, fields, ack)?;
        self.driver.write_some_or_lost()
    }

    /// Sends a file-transfer message to the node (`crate::files` uses it).
    pub fn send_files(&mut self, body: &[u8]) -> Result<(), ClientError> {
        self.driver.not_ended()?;
        self.driver.session.send_files(body)?;
        self.driver.write_some()
    }

    /// Bytes queued for the node and not yet written.
    pub fn pending_output(&mut self) -> usize {
        self.driver
            .session
            .connection()
            .map_or(0, |c| c.pending_output())
    }

    /// Closes a stream.
    pub fn unsubscribe(&mut self, sid: StreamId) -> Result<(), ClientError> {
        self.driver.session.unsubscribe(sid)?;
        self.driver.write_some()
    }

    /// Changes an open stream's view where it stands, with no new image (see
    /// [`SubscriberSession::change_view`]).
    pub fn change_view(
        &mut self,
        sid: StreamId,
        view: Option<Vec<i16>>,
    ) -> Result<(), ClientError> {
        self.driver.not_ended()?;
        self.driver.session.change_view(sid, view)?;
        self.driver.write_some()
    }

    /// Writes any queued requests, waiting up to `timeout`.
    pub fn flush(&mut self, timeout: Duration) -> Result<(), ClientError> {
        self.driver.not_ended()?;
        self.driver.flush(timeout)
    }

    /// Returns the next event, waiting up to `timeout`; `None` if nothing came.
    pub fn next_event(&mut self, timeout: Duration) -> Result<Option<Event>, ClientError> {
        if let Some(e) = self.ready.pop_front() {
            return Ok(Some(e));
        }
        if let Some(err) = self.ended_by.take() {
            return Err(err);
        }
        let mut got = VecDeque::new();
        let res = self.dispatch(timeout, |e| got.push_back(Event::from(&e)));
        self.ready = got;
        if let Err(err) = res {
            // What came before the end (the node's last words among it) goes first.
            if self.ready.is_empty() {
                return Err(err);
            }
            self.ended_by = Some(err);
        }
        Ok(self.ready.pop_front())
    }

    /// Delivers the events available now to `f`, waiting up to `timeout` for the first
    /// (a signal handled meanwhile ends the wait early). A connection lost meanwhile
    /// ends the call as soon as it delivered anything (the node's last statuses, the
    /// open/suspect statuses of the streams still open): the reconnect is left to a
    /// later call.
    /// Returns how many were delivered. Events borrow the receive buffer: no copy, no
    /// allocation per message.
    pub fn dispatch(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(EventRef<'_>),
    ) -> Result<usize, ClientError> {
        // Counted over the whole call, not per poll: a poll that hands out events and
        // then fails (the node's last statuses, then its close of the connection) has
        // them counted still, so the call returns them as soon as the connection is
        // given up (with the statuses made up for it), rather than trying to reconnect
        // until its time-out first. The reconnect is made by a later call.
        let mut n = 0;
        let delivered = self.driver.run(timeout, |session, now| {
            session.poll_events(now, |e, _| {
                n += 1;
                f(e)
            })?;
            Ok((n > 0).then_some(n))
        })?;
        Ok(delivered.unwrap_or(0))
    }
}
