//! When a session connects again: the policy, the backoff between tries, and the count
//! of connections. Shared by the subscriber's and the publisher's sessions.

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
    connections: u64,
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
            connections: 0,
            ended: false,
        }
    }

    pub(crate) fn policy(&self) -> &ReconnectPolicy {
        &self.policy
    }

    /// A connection opened.
    pub(crate) fn connected(&mut self, now: Instant) {
        self.backoff.connected(now);
        self.connections += 1;
    }

    /// Whether `err` ends the session rather than being tried again: any error
    /// without reconnecting; a refused login on the first connection (its credentials
    /// are wrong). A login refused on a later connection is tried again after the
    /// backoff: the same credentials were taken before, and the node refuses some
    /// logins only for a while (failed logins from the same address held off, its
    /// checks busy).
    pub(crate) fn ends_session(&self, err: &ClientError) -> bool {
        let rejected = matches!(err, ClientError::Rejected { .. });
        !self.policy.reconnect || (rejected && !self.policy.retry_rejected && self.connections <= 1)
    }

    /// A try failed or a connection was lost: the next try after the backoff, or `Err`
    /// when the session ends.
    pub(crate) fn failed(&mut self, err: ClientError, now: Instant) -> Result<(), ClientError> {
        if self.ends_session(&err) {
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

    /// Connections opened so far.
    pub(crate) fn connections(&self) -> u64 {
        self.connections
    }

    /// Connections opened after the first.
    pub(crate) fn reconnects(&self) -> u64 {
        self.connections.saturating_sub(1)
    }
}
