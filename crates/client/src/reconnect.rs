//! When a session connects again: the policy, the backoff between tries, and the count
//! of connections, and the connection itself. Shared by the subscriber's and the
//! publisher's sessions.

use crate::session::{Connection, LoginOptions, Session};
use crate::{Backoff, ClientError};
use std::time::{Duration, Instant};

/// Whether and how soon to reconnect after a connection is lost.
#[derive(Debug, Clone)]
pub struct ReconnectPolicy {
    /// Reconnect after a lost connection.
    pub reconnect: bool,
    /// The first delay; it doubles up to `backoff_max`.
    pub backoff_min: Duration,
    /// The longest delay.
    pub backoff_max: Duration,
    /// A refused login is tried again too (with backoff), rather than ending the
    /// session: for a link that moves between upstream nodes, where one refusing it
    /// (a loop, a full node) is no reason to stop.
    pub retry_rejected: bool,
}

pub(crate) struct Reconnection {
    policy: ReconnectPolicy,
    backoff: Backoff,
    /// While disconnected: when to try again.
    retry_at: Instant,
    /// Connections that were logged in (had their Welcome), the one open now left out.
    logged_in_before: u64,
    /// An error ended the session: it is never connected again.
    ended: bool,
}

impl Reconnection {
    /// The first connection is due at once.
    pub(crate) fn new(policy: ReconnectPolicy, now: Instant) -> Self {
        Reconnection {
            backoff: Backoff::new(policy.backoff_min, policy.backoff_max),
            policy,
            retry_at: now,
            logged_in_before: 0,
            ended: false,
        }
    }

    pub(crate) fn policy(&self) -> &ReconnectPolicy {
        &self.policy
    }

    /// A connection opened.
    pub(crate) fn connected(&mut self, now: Instant) {
        self.backoff.connected(now);
    }

    /// A connection that had its Welcome is gone.
    pub(crate) fn logged_in_lost(&mut self) {
        self.logged_in_before += 1;
    }

    /// Whether `err` ends the session rather than being tried again: any error
    /// without reconnecting; a refused login before any login was taken (its
    /// credentials are wrong; a node of a failover list that took the connection and
    /// never answered does not count). A login refused once one was taken is tried
    /// again after the backoff: the same credentials were taken before, and the node
    /// refuses some logins only for a while (failed logins from the same address held
    /// off, its checks busy).
    pub(crate) fn ends_session(&self, err: &ClientError) -> bool {
        let rejected = matches!(err, ClientError::Rejected { .. });
        !self.policy.reconnect
            || (rejected && !self.policy.retry_rejected && self.logged_in_before == 0)
    }

    /// A try failed or a connection was lost: the next try after the backoff, or `Err`
    /// when the session ends.
    pub(crate) fn failed(&mut self, err: ClientError, now: Instant) -> Result<(), ClientError> {
        let ends = self.ends_session(&err);
        self.fail(err, now, ends)
    }

    /// As [`Reconnection::failed`], whether it ends the session decided already.
    fn fail(&mut self, err: ClientError, now: Instant, ends: bool) -> Result<(), ClientError> {
        if ends {
            self.ended = true;
            return Err(err);
        }
        self.retry_at = now + self.backoff.step(now);
        Ok(())
    }

    pub(crate) fn due(&self, now: Instant) -> bool {
        !self.ended && now >= self.retry_at
    }

    /// The session ended (see [`Reconnection::ends_session`]).
    pub(crate) fn ended(&self) -> bool {
        self.ended
    }

    pub(crate) fn retry_at(&self) -> Instant {
        self.retry_at
    }

    /// Connections that were logged in and are gone.
    pub(crate) fn logged_in_before(&self) -> u64 {
        self.logged_in_before
    }
}

/// A session's connection that comes and goes: the one open now (logged in or not
/// yet), the login each new one sends, and when the next is due. Both sessions keep
/// theirs in one, so that connecting, losing and ending work alike for them.
pub(crate) struct Link {
    login: LoginOptions,
    conn: Option<Connection>,
    reconnection: Reconnection,
}

impl Link {
    /// No connection yet; the first is due at once.
    pub(crate) fn new(login: LoginOptions, policy: ReconnectPolicy, now: Instant) -> Self {
        Link {
            login,
            conn: None,
            reconnection: Reconnection::new(policy, now),
        }
    }

    pub(crate) fn policy(&self) -> &ReconnectPolicy {
        self.reconnection.policy()
    }

    /// A transport opened: a new connection, its Login queued.
    pub(crate) fn connecting(&mut self, now: Instant) -> Result<(), ClientError> {
        self.conn = Some(Connection::new(&self.login, now)?);
        self.reconnection.connected(now);
        Ok(())
    }

    /// The connection failed: it is dropped and the next one scheduled, after
    /// `carry_on` (told whether there was one) has done what the session does for a
    /// lost connection. `Err` when the error ends the session instead (then `carry_on`
    /// is not called).
    pub(crate) fn lost(
        &mut self,
        err: ClientError,
        now: Instant,
        carry_on: impl FnOnce(bool, &ClientError),
    ) -> Result<(), ClientError> {
        let lost = self.conn.take();
        let had = lost.is_some();
        // Judged before this connection counts among those logged in: a refusal on
        // the first one to log in (a service it may not publish) ends the session.
        let ends = self.reconnection.ends_session(&err);
        if lost.is_some_and(|c| c.session().is_some()) {
            self.reconnection.logged_in_lost();
        }
        if !ends {
            carry_on(had, &err);
        }
        self.reconnection.fail(err, now, ends)
    }

    /// The connection, while there is one (logged in or not yet).
    pub(crate) fn connection(&mut self) -> Option<&mut Connection> {
        self.conn.as_mut()
    }

    /// The connection, once its Welcome is in.
    pub(crate) fn logged_in(&mut self) -> Option<&mut Connection> {
        self.conn.as_mut().filter(|c| c.session().is_some())
    }

    pub(crate) fn is_connected(&self) -> bool {
        self.conn.is_some()
    }

    pub(crate) fn pending_output(&self) -> usize {
        self.conn.as_ref().map_or(0, |c| c.pending_output())
    }

    /// The connection's next deadline or any of `also`, whichever is first; while
    /// disconnected, when the next connection is due.
    pub(crate) fn poll_timeout(&self, also: impl IntoIterator<Item = Instant>) -> Option<Instant> {
        match &self.conn {
            Some(c) => c.poll_timeout().into_iter().chain(also).min(),
            None => Some(self.reconnection.retry_at()),
        }
    }

    /// Connections that were logged in (had their Welcome), the one open now included.
    pub(crate) fn logged_in_count(&self) -> u64 {
        self.reconnection.logged_in_before() + u64::from(self.session().is_some())
    }

    pub(crate) fn connect_failed(
        &mut self,
        err: ClientError,
        now: Instant,
    ) -> Result<(), ClientError> {
        self.reconnection.failed(err, now)
    }

    pub(crate) fn wants_connect(&self, now: Instant) -> bool {
        self.conn.is_none() && self.reconnection.due(now)
    }

    pub(crate) fn retry_at(&self) -> Instant {
        self.reconnection.retry_at()
    }

    pub(crate) fn ended(&self) -> bool {
        self.reconnection.ended()
    }

    pub(crate) fn session(&self) -> Option<&Session> {
        self.conn.as_ref().and_then(|c| c.session())
    }

    /// Connections logged in after the first.
    pub(crate) fn reconnects(&self) -> u64 {
        self.logged_in_count().saturating_sub(1)
    }
}

/// The methods both sessions answer from their [`Link`] (a field `link`), written
/// once.
macro_rules! link_methods {
    () => {
        /// The driver could not open a transport. `Err` when there is no retrying.
        pub fn connect_failed(
            &mut self,
            err: ClientError,
            now: Instant,
        ) -> Result<(), ClientError> {
            self.link.connect_failed(err, now)
        }

        /// No connection, and it is time to open one.
        pub fn wants_connect(&self, now: Instant) -> bool {
            self.link.wants_connect(now)
        }

        /// When the next connection is due (meaningful while disconnected).
        pub fn retry_at(&self) -> Instant {
            self.link.retry_at()
        }

        /// An error ended the session (a lost connection without reconnecting, a
        /// refused login): it never connects again.
        pub fn ended(&self) -> bool {
            self.link.ended()
        }

        /// What the node said in its Welcome, while logged in.
        pub fn session(&self) -> Option<&Session> {
            self.link.session()
        }

        /// Connections logged in after the first (a node of a failover list that took
        /// the connection and never answered its login does not count).
        pub fn reconnects(&self) -> u64 {
            self.link.reconnects()
        }
    };
}
pub(crate) use link_methods;
