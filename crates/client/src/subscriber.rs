//! The blocking subscriber: a [`SubscriberSession`] driven over a socket.

use crate::conn::{ConnectOptions, Io, Transport};
use crate::events::{Event, EventRef};
use crate::session::Session;
use crate::watchlist::{PostTo, RequestOptions, StreamId, SubscriberSession};
use crate::ClientError;
use log::{info, warn};
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
    opts: ConnectOptions,
    session: SubscriberSession,
    /// `None` while disconnected.
    transport: Option<Transport>,
    ready: VecDeque<Event>,
}

impl Subscriber {
    /// Connects and logs in; fails if the node cannot be reached now.
    pub fn connect(opts: ConnectOptions) -> Result<Self, ClientError> {
        let now = Instant::now();
        let mut session =
            SubscriberSession::new(opts.login(Role::Subscriber), opts.reconnect_policy(), now);
        let mut transport = Transport::open(&opts)?;
        session.connecting(now)?;
        let conn = session.connection().expect("just connected");
        transport.welcome(conn, &opts.addr)?;
        info!(
            "subscriber connected to {} ({})",
            opts.addr,
            session.session().map_or("", |s| s.node_name.as_str())
        );
        Ok(Subscriber {
            opts,
            session,
            transport: Some(transport),
            ready: VecDeque::new(),
        })
    }

    /// The current session, if logged in.
    pub fn session(&self) -> Option<&Session> {
        self.session.session()
    }

    /// The socket, for callers that poll many subscribers from one thread and call
    /// `dispatch(Duration::ZERO, ..)` on the ready ones. `None` while reconnecting.
    pub fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        self.transport.as_ref().map(|t| t.raw_fd())
    }

    pub fn is_connected(&self) -> bool {
        self.transport.is_some()
    }

    /// Times the connection was re-established.
    pub fn reconnects(&self) -> u64 {
        self.session.reconnects()
    }

    /// Services and their state, as the node's directory messages left them (each
    /// lists the services that changed; removed ones are gone from here).
    pub fn directory(&self) -> &BTreeMap<String, ServiceState> {
        self.session.directory()
    }

    /// Open streams in the watchlist.
    pub fn open_streams(&self) -> usize {
        self.session.open_streams()
    }

    /// Opens a stream for an item; its refresh (or a status) arrives through dispatch.
    pub fn subscribe(
        &mut self,
        service: &str,
        name: &str,
        options: RequestOptions,
    ) -> Result<StreamId, ClientError> {
        let sid = self.session.subscribe(service, name, options)?;
        self.write_some()?;
        Ok(sid)
    }

    /// Sends a post (a contribution) to an item, on an open stream or by name; with
    /// `ack` its answer arrives through dispatch as an `Ack` event carrying `post_id`
    /// (see [`SubscriberSession::post`]).
    pub fn post(
        &mut self,
        to: PostTo<'_>,
        post_id: u32,
        fields: FieldList<'_>,
        ack: bool,
    ) -> Result<(), ClientError> {
        self.session.post(to, post_id, fields, ack)?;
        self.write_some()
    }

    /// Closes a stream.
    pub fn unsubscribe(&mut self, sid: StreamId) -> Result<(), ClientError> {
        self.session.unsubscribe(sid)?;
        self.write_some()
    }

    /// Writes any queued requests, waiting up to `timeout`.
    pub fn flush(&mut self, timeout: Duration) -> Result<(), ClientError> {
        if let (Some(t), Some(c)) = (self.transport.as_mut(), self.session.connection()) {
            if let Err(e) = t.flush_until(c, Instant::now() + timeout) {
                self.lost(e)?;
            }
        }
        Ok(())
    }

    /// Returns the next event, waiting up to `timeout`; `None` if nothing came.
    pub fn next_event(&mut self, timeout: Duration) -> Result<Option<Event>, ClientError> {
        if let Some(e) = self.ready.pop_front() {
            return Ok(Some(e));
        }
        let mut got = VecDeque::new();
        self.dispatch(timeout, |e| got.push_back(Event::from(&e)))?;
        self.ready = got;
        Ok(self.ready.pop_front())
    }

    /// Delivers the events available now to `f`, waiting up to `timeout` for the first.
    /// Returns how many were delivered. Events borrow the receive buffer: no copy, no
    /// allocation per message.
    pub fn dispatch(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(EventRef<'_>),
    ) -> Result<usize, ClientError> {
        let deadline = Instant::now() + timeout;
        loop {
            let now = Instant::now();
            let delivered = match self.session.poll_events(now, |e, _| f(e)) {
                Ok(n) => n,
                Err(e) => {
                    self.lost(e)?;
                    continue;
                }
            };
            if self.transport.is_none() {
                if delivered > 0 {
                    return Ok(delivered);
                }
                // A reconnect that is due is tried even by a zero-timeout call (an
                // application polling with Duration::ZERO would otherwise never get one).
                if self.session.wants_connect(now) {
                    self.try_reconnect(now)?;
                    continue;
                }
                if now >= deadline {
                    return Ok(0);
                }
                std::thread::sleep(self.session.retry_at().min(deadline) - now);
                continue;
            }
            if now >= self.session.poll_timeout() {
                if let Err(e) = self.session.handle_timeout(now) {
                    self.lost(e)?;
                    continue;
                }
            }
            self.write_some()?;
            if delivered > 0 {
                return Ok(delivered);
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
                Ok(Io::Idle) if left.is_zero() => return Ok(0),
                Ok(Io::Idle) => continue,
                Err(e) => self.lost(e)?,
            }
        }
    }

    /// Writes what the socket takes now.
    fn write_some(&mut self) -> Result<(), ClientError> {
        if let (Some(t), Some(c)) = (self.transport.as_mut(), self.session.connection()) {
            if let Err(e) = t.flush_some(c) {
                self.lost(e)?;
            }
        }
        Ok(())
    }

    /// The connection failed: the session tells every open stream and schedules the
    /// reconnect (or the error ends the subscriber).
    fn lost(&mut self, err: ClientError) -> Result<(), ClientError> {
        self.transport = None;
        if err.is_transient() && self.opts.reconnect {
            warn!("{err}; reconnecting to {}", self.opts.addr);
        }
        self.session.connection_lost(err, Instant::now())
    }

    fn try_reconnect(&mut self, now: Instant) -> Result<(), ClientError> {
        match Transport::open(&self.opts) {
            Ok(t) => {
                self.session.connecting(now)?;
                self.transport = Some(t);
                info!(
                    "reconnected to {}; requesting {} streams again as their services appear",
                    self.opts.addr,
                    self.session.open_streams()
                );
                Ok(())
            }
            Err(e) => {
                let msg = e.to_string();
                self.session.connect_failed(e, now)?;
                warn!(
                    "reconnect to {} failed: {msg}; next try in {} ms",
                    self.opts.addr,
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
