//! The one blocking driver of a client session over a socket: it connects and
//! reconnects when the session says so, writes what the session queued, handles its
//! timers, and waits for input or the session's next deadline. [`crate::Subscriber`]
//! and [`crate::Publisher`] are this driver around their session; what differs between
//! them is only what they hand the application ([`Driver::run`]'s `deliver`).

use crate::conn::{ConnectOptions, Io, Transport};
use crate::publishing::PublisherSession;
use crate::session::Connection;
use crate::watchlist::SubscriberSession;
use crate::ClientError;
use log::{info, warn};
use std::time::{Duration, Instant};

/// What every client session offers its driver (the blocking driver, the test kit,
/// a node's event loop): the connection it speaks over, its deadlines, and what to do
/// when a connection opens, fails or is lost.
pub trait ClientSession {
    /// A transport was opened: the Login is queued.
    fn connecting(&mut self, now: Instant) -> Result<(), ClientError>;
    /// Opening one failed; `Err` when the session gives up.
    fn connect_failed(&mut self, err: ClientError, now: Instant) -> Result<(), ClientError>;
    /// The connection was lost; `Err` when the session gives up.
    fn connection_lost(&mut self, err: ClientError, now: Instant) -> Result<(), ClientError>;
    /// Whether a new connection is due (never while connected).
    fn wants_connect(&self, now: Instant) -> bool;
    /// While disconnected: when the next connection is due.
    fn retry_at(&self) -> Instant;
    /// An error ended the session: it never connects again.
    fn ended(&self) -> bool;
    /// The protocol state of the current connection, if any.
    fn connection(&mut self) -> Option<&mut Connection>;
    /// The next deadline while connected (heartbeats, the Welcome's).
    fn poll_timeout(&self) -> Option<Instant>;
    /// Handles the deadlines passed at `now`; `Err` means the connection is lost.
    fn handle_timeout(&mut self, now: Instant) -> Result<(), ClientError>;
}

macro_rules! client_session {
    ($t:ty) => {
        impl ClientSession for $t {
            fn connecting(&mut self, now: Instant) -> Result<(), ClientError> {
                <$t>::connecting(self, now)
            }
            fn connect_failed(
                &mut self,
                err: ClientError,
                now: Instant,
            ) -> Result<(), ClientError> {
                <$t>::connect_failed(self, err, now)
            }
            fn connection_lost(
                &mut self,
                err: ClientError,
                now: Instant,
            ) -> Result<(), ClientError> {
                <$t>::connection_lost(self, err, now)
            }
            fn wants_connect(&self, now: Instant) -> bool {
                <$t>::wants_connect(self, now)
            }
            fn retry_at(&self) -> Instant {
                <$t>::retry_at(self)
            }
            fn ended(&self) -> bool {
                <$t>::ended(self)
            }
            fn connection(&mut self) -> Option<&mut Connection> {
                <$t>::connection(self)
            }
            fn poll_timeout(&self) -> Option<Instant> {
                <$t>::poll_timeout(self)
            }
            fn handle_timeout(&mut self, now: Instant) -> Result<(), ClientError> {
                <$t>::handle_timeout(self, now)
            }
        }
    };
}

client_session!(SubscriberSession);
client_session!(PublisherSession);

/// The public methods [`crate::Publisher`] and [`crate::Subscriber`] answer alike from
/// their `driver` field (a [`Driver`]): the connection's state, the socket for a caller
/// that waits itself, and reconnects taken out. `$who` names the type in the docs.
macro_rules! driver_methods {
    ($who:literal) => {
        /// The node's Welcome, while logged in.
        pub fn session(&self) -> Option<&$crate::Session> {
            self.driver.session.session()
        }

        /// Logged in now.
        pub fn is_connected(&self) -> bool {
            self.driver.is_connected()
        }

        /// An error ended the session (the connection lost without `reconnect`, a refused
        /// login): it never connects again, and every call that needs the node fails.
        pub fn is_ended(&self) -> bool {
            self.driver.session.ended()
        }

        /// The socket, for a caller that waits for input itself (one thread polling
        /// many, say) and then calls `dispatch` with `Duration::ZERO`. `None` while
        /// reconnecting.
        pub fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
            self.driver.raw_fd()
        }

        /// For a caller that waits on [`raw_fd`](Self::raw_fd) itself: when `dispatch` is
        /// due even if nothing arrives (a heartbeat to send, the node's silence to judge,
        /// while disconnected the next reconnect), and whether to wake when the socket is
        /// writable too ([`wants_write`](Self::wants_write)).
        pub fn poll_timeout(&self) -> Option<std::time::Instant> {
            self.driver.session.poll_timeout()
        }

        /// Output waits for the socket to take it: a caller waiting on
        /// [`raw_fd`](Self::raw_fd) itself also waits for it to be writable, then calls
        /// `dispatch(Duration::ZERO)`, which writes.
        pub fn wants_write(&mut self) -> bool {
            self.driver.wants_write()
        }

        /// Times the connection was re-established.
        pub fn reconnects(&self) -> u64 {
            self.driver.session.reconnects()
        }

        #[doc = concat!("A reconnect that is due, taken out to be made without this ", $who, " (see")]
        /// [`Reconnect`](crate::Reconnect)): for a caller that shares it behind a lock, so
        /// that the lock is not held while the connect waits. Until
        /// [`finish_reconnect`](Self::finish_reconnect)
        #[doc = concat!("gets its outcome the ", $who, " does not reconnect by itself. `None` when")]
        /// none is due or one is already out.
        pub fn take_reconnect(&mut self) -> Option<$crate::Reconnect> {
            self.driver.take_reconnect(std::time::Instant::now())
        }

        #[doc = concat!("From now on the ", $who, " never reconnects by itself: every reconnect is")]
        /// taken out with [`take_reconnect`](Self::take_reconnect), and a call that waits
        /// returns early (with nothing to deliver) when one comes due. For a caller that
        /// shares it behind a lock: any call could otherwise make a reconnect that came
        /// due meanwhile, holding the lock through the connect.
        pub fn reconnect_when_taken_only(&mut self) {
            self.driver.reconnect_when_taken_only();
        }

        /// Takes the outcome of [`Reconnect::connect`](crate::Reconnect::connect): the new
        /// connection (its login and what follows are handled by the next calls), or the
        /// failure (the back-off starts now; `Err` when it ends the session).
        pub fn finish_reconnect(
            &mut self,
            made: $crate::Reconnected,
        ) -> Result<(), $crate::ClientError> {
            self.driver.finish_reconnect(made)
        }
    };
}
pub(crate) use driver_methods;

/// A session driven over a socket from the caller's thread.
pub(crate) struct Driver<S> {
    pub opts: ConnectOptions,
    pub session: S,
    /// The nodes the options name (failover), and the one connected last.
    nodes: Vec<String>,
    current: usize,
    /// `None` while disconnected.
    transport: Option<Transport>,
    /// "subscriber" or "publisher", for the log.
    what: &'static str,
    /// A reconnect is being made elsewhere ([`Driver::take_reconnect`]): `run` does
    /// not open one of its own meanwhile.
    reconnect_taken: bool,
    /// Reconnects are only ever taken out ([`Driver::reconnect_when_taken_only`]):
    /// `run` returns when one is due instead of making it.
    taken_only: bool,
}

/// How often `run` looks again, without a transport, while a reconnect taken out of
/// it is being made.
const RECONNECT_ELSEWHERE_POLL: Duration = Duration::from_millis(10);

/// A reconnect taken out of a subscriber or publisher (`take_reconnect`), to be made
/// where the caller holds no lock: [`Reconnect::connect`] blocks up to the connect
/// time-out for each node it tries. Its outcome goes back through
/// `finish_reconnect`; until then the session does not reconnect by itself.
#[derive(Debug)]
pub struct Reconnect {
    opts: ConnectOptions,
    nodes: Vec<String>,
    /// The node lost (tried last).
    lost: usize,
}

/// What a [`Reconnect`] made: a transport to one of the nodes and its index, or the
/// last node's failure.
pub struct Reconnected(Result<(Transport, usize), ClientError>);

impl Reconnect {
    /// Opens a transport: the node after the one lost first, then the others in turn
    /// (that one last). Blocks while each is tried.
    pub fn connect(self) -> Reconnected {
        let n = self.nodes.len();
        let mut last_error = None;
        for step in 1..=n {
            let i = (self.lost + step) % n;
            match Transport::open(&self.opts, &self.nodes[i]) {
                Ok(t) => return Reconnected(Ok((t, i))),
                Err(e) => last_error = Some(e),
            }
        }
        Reconnected(Err(last_error.unwrap_or_else(|| ClientError::Connect {
            addr: self.opts.addr.clone(),
            reason: "no node to connect to".into(),
        })))
    }
}

impl<S: ClientSession> Driver<S> {
    /// Connects and waits for the node's Welcome; fails if the node cannot be reached
    /// or refuses the login now.
    pub(crate) fn connect(
        opts: ConnectOptions,
        mut session: S,
        what: &'static str,
    ) -> Result<Self, ClientError> {
        let nodes = crate::conn::node_addresses(&opts.addr)?;
        // The first node that answers the login; each one's reason if none does.
        let mut failures = Vec::new();
        for (i, node) in nodes.iter().enumerate() {
            let opened = Transport::open(&opts, node).and_then(|mut transport| {
                session.connecting(Instant::now())?;
                let conn = session
                    .connection()
                    .expect("a session is connected once connecting");
                transport.welcome(conn, node)?;
                Ok(transport)
            });
            match opened {
                Ok(transport) => {
                    return Ok(Driver {
                        opts,
                        session,
                        nodes,
                        current: i,
                        transport: Some(transport),
                        what,
                        reconnect_taken: false,
                        taken_only: false,
                    })
                }
                Err(e) => failures.push(e),
            }
        }
        if failures.len() == 1 {
            return Err(failures.remove(0));
        }
        Err(ClientError::Connect {
            addr: opts.addr.clone(),
            reason: format!(
                "no node of the list answered: {}",
                failures
                    .iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        })
    }

    /// The node connected last (`host:port`).
    pub(crate) fn node(&self) -> &str {
        &self.nodes[self.current]
    }

    pub(crate) fn is_connected(&self) -> bool {
        self.transport.is_some()
    }

    pub(crate) fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        self.transport.as_ref().map(|t| t.raw_fd())
    }

    /// Output waits for the socket to take it.
    pub(crate) fn wants_write(&mut self) -> bool {
        match (self.transport.as_ref(), self.session.connection()) {
            (Some(t), Some(c)) => t.wants_write(c),
            _ => false,
        }
    }

    /// `Err` once an error ended the session: a call that needs the node fails rather
    /// than queueing what can never be sent.
    pub(crate) fn not_ended(&self) -> Result<(), ClientError> {
        if self.session.ended() {
            return Err(ClientError::Disconnected(
                "the connection was lost and is not reconnected".into(),
            ));
        }
        Ok(())
    }

    /// Writes what the socket takes now.
    pub(crate) fn write_some(&mut self) -> Result<(), ClientError> {
        if let (Some(t), Some(c)) = (self.transport.as_mut(), self.session.connection()) {
            if let Err(e) = t.flush_some(c) {
                self.lost(e)?;
            }
        }
        Ok(())
    }

    /// As [`Driver::write_some`], but a connection lost on the way is an error even when
    /// the session reconnects: what was queued (a post, say) went with it.
    pub(crate) fn write_some_or_lost(&mut self) -> Result<(), ClientError> {
        if let (Some(t), Some(c)) = (self.transport.as_mut(), self.session.connection()) {
            if let Err(e) = t.flush_some(c) {
                let why = match &e {
                    ClientError::Disconnected(why) => why.clone(),
                    other => other.to_string(),
                };
                self.lost(e)?;
                return Err(ClientError::Disconnected(format!(
                    "{why}: it was not written"
                )));
            }
        }
        Ok(())
    }

    /// Writes everything queued, waiting for the socket up to `timeout`: a `Timeout`
    /// error when it could not (the connection stays, with what is still queued); a
    /// failed connection is lost as anywhere else.
    pub(crate) fn flush(&mut self, timeout: Duration) -> Result<(), ClientError> {
        if let (Some(t), Some(c)) = (self.transport.as_mut(), self.session.connection()) {
            let res = t
                .flush_some(c)
                .and_then(|_| t.flush_until(c, deadline_after(timeout)));
            match res {
                Ok(()) => {}
                Err(e @ ClientError::Timeout(_)) => return Err(e),
                Err(e) => self.lost(e)?,
            }
        }
        Ok(())
    }

    /// The connection failed: the session is told (it schedules the reconnect, or the
    /// error ends it).
    pub(crate) fn lost(&mut self, err: ClientError) -> Result<(), ClientError> {
        self.transport = None;
        if err.is_transient() && self.opts.reconnect {
            warn!("{err}; reconnecting to {}", self.opts.addr);
        }
        self.session.connection_lost(err, Instant::now())
    }

    /// Opens a new transport when the session wants one. The Welcome and what follows
    /// it are handled as input, by `run`.
    fn reconnect(&mut self) -> Result<(), ClientError> {
        match self.take_reconnect(Instant::now()) {
            Some(r) => self.finish_reconnect(r.connect()),
            None => Ok(()),
        }
    }

    /// From now on every reconnect is taken out ([`Driver::take_reconnect`]): `run`
    /// never makes one (it would wait for the connect in a call of its caller's, a
    /// lock held perhaps), and returns when one is due, for its caller to take.
    pub(crate) fn reconnect_when_taken_only(&mut self) {
        self.taken_only = true;
    }

    /// The reconnect due at `now`, taken out to be made elsewhere (see [`Reconnect`]);
    /// `None` when none is due, or one is already out.
    pub(crate) fn take_reconnect(&mut self, now: Instant) -> Option<Reconnect> {
        if self.transport.is_some()
            || self.reconnect_taken
            || self.session.ended()
            || !self.session.wants_connect(now)
        {
            return None;
        }
        self.reconnect_taken = true;
        Some(Reconnect {
            opts: self.opts.clone(),
            nodes: self.nodes.clone(),
            lost: self.current,
        })
    }

    /// Takes the outcome of a reconnect taken out: the new transport (unless one came
    /// meanwhile or the session ended: it is then closed), or the failure, after which
    /// the back-off counts from now (the attempts took time: a node that never answers
    /// is not tried again at once).
    pub(crate) fn finish_reconnect(&mut self, made: Reconnected) -> Result<(), ClientError> {
        self.reconnect_taken = false;
        match made.0 {
            Ok((transport, i)) => {
                if self.transport.is_some() || self.session.ended() {
                    return Ok(());
                }
                self.session.connecting(Instant::now())?;
                self.transport = Some(transport);
                self.current = i;
                info!("{} reconnected to {}", self.what, self.nodes[i]);
                Ok(())
            }
            Err(e) => {
                let now = Instant::now();
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

    /// Drives the session for up to `timeout`: `deliver` lets it handle its input and
    /// returns what the application gets, if anything (then `run` returns it at once,
    /// after writing what the session queued). Reconnects when due, handles timers,
    /// and waits for input or the next deadline in between. `None` when `timeout`
    /// passed with nothing to deliver, or a signal cut the wait short.
    ///
    /// An `Err` from `deliver` loses the connection; `deliver` is then called again
    /// at once, before any reconnect or wait: what it handed the application before
    /// the error (the node's last words) must be returned by that call, or this one
    /// goes on reconnecting until `timeout` with them held.
    pub(crate) fn run<T>(
        &mut self,
        timeout: Duration,
        mut deliver: impl FnMut(&mut S, Instant) -> Result<Option<T>, ClientError>,
    ) -> Result<Option<T>, ClientError> {
        let deadline = deadline_after(timeout);
        // Reads after the deadline: one more is handled (a zero-timeout call delivers
        // what it read), then the call returns however much keeps coming.
        let mut reads_past_deadline = 0;
        // A timer's read was handed to `deliver` (once a call: a timer that stays due
        // while bytes keep coming does not hold the call past its deadline).
        let mut read_on_timer = false;
        loop {
            let now = Instant::now();
            match deliver(&mut self.session, now) {
                Ok(Some(t)) => {
                    self.write_some()?;
                    return Ok(Some(t));
                }
                Ok(None) => {}
                Err(e) => {
                    self.lost(e)?;
                    continue;
                }
            }
            if self.transport.is_none() {
                self.not_ended()?;
                // A reconnect that is due is tried even by a zero-timeout call (an
                // application polling with Duration::ZERO would otherwise never get one).
                if !self.reconnect_taken && self.session.wants_connect(now) {
                    if self.taken_only {
                        return Ok(None);
                    }
                    self.reconnect()?;
                    continue;
                }
                if now >= deadline {
                    return Ok(None);
                }
                let wake = match self.reconnect_taken {
                    true => now + RECONNECT_ELSEWHERE_POLL,
                    false => self.session.retry_at(),
                };
                std::thread::sleep(wake.min(deadline).saturating_duration_since(now));
                continue;
            }
            if self.session.poll_timeout().is_some_and(|t| now >= t) {
                // What waits in the socket shows the node alive: read it before its
                // silence is judged (the application may not have called for a while).
                let mut read = false;
                if let (Some(t), Some(c)) = (self.transport.as_mut(), self.session.connection()) {
                    match t.read_available(c) {
                        Ok(io) => read = matches!(io, Io::Read),
                        Err(e) => {
                            self.lost(e)?;
                            continue;
                        }
                    }
                }
                if let Err(e) = self.session.handle_timeout(now) {
                    self.lost(e)?;
                    continue;
                }
                if read && !read_on_timer {
                    // What was read is delivered by this call, not a later one.
                    read_on_timer = true;
                    continue;
                }
            }
            self.write_some()?;
            let left = deadline.saturating_duration_since(now);
            let until_timer = self
                .session
                .poll_timeout()
                .map_or(left, |t| t.saturating_duration_since(now));
            let (Some(t), Some(c)) = (self.transport.as_mut(), self.session.connection()) else {
                continue;
            };
            let res = if left.is_zero() {
                t.read_available(c)
            } else {
                t.wait(c, left.min(until_timer).max(Duration::from_micros(100)))
            };
            match res {
                Ok(Io::Read) if left.is_zero() => {
                    reads_past_deadline += 1;
                    if reads_past_deadline > 1 {
                        return Ok(None);
                    }
                }
                Ok(Io::Read) => continue,
                Ok(Io::Idle) if left.is_zero() => return Ok(None),
                Ok(Io::Idle) => continue,
                Ok(Io::Interrupted) => return Ok(None),
                Err(e) => self.lost(e)?,
            }
        }
    }
}

/// `timeout` from now; a time-out too long to add (`Duration::MAX`, say) is a century.
pub(crate) fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}
