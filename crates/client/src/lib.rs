//! Tickwire's client library: [`Publisher`] and [`Subscriber`] for Rust programs.
//!
//! Both are blocking APIs meant for a plain thread: the caller drives them with
//! `dispatch` / `next_event` (which also answer heartbeats) and they own their socket
//! (non-blocking underneath, so a publisher keeps reading while it writes). Both
//! reconnect automatically with exponential backoff: a subscriber re-requests its whole
//! watchlist, a publisher re-announces its service and re-sends the image of every item.
//!
//! The protocol itself has no I/O: [`Connection`] (login, Welcome, framing,
//! heartbeats) and [`SubscriberSession`] (the watchlist and its recovery) take bytes
//! and `now` and give bytes to send, events and the next deadline, as does
//! [`PublisherSession`] (a service's items, their images and re-imaging). Both sessions
//! offer their drivers one contract, [`ClientSession`]: one blocking driver (`driver.rs`)
//! runs either over a socket, the test kit runs them in memory on a fake clock, and a
//! node's upstream link drives a subscriber session in its event loop.
//! This crate owns the client side of the protocol and nothing of the node.

#![warn(missing_docs)]

mod conn;
#[cfg(feature = "clap")]
mod credentials;
mod driver;
mod events;
pub mod files;
mod publisher;
pub mod publishing;
mod reconnect;
pub mod session;
mod stream_ids;
mod subscriber;
pub mod tls;
pub mod watchlist;

#[cfg(test)]
mod tests;

pub use conn::ConnectOptions;
#[cfg(feature = "clap")]
pub use credentials::Credentials;
pub use driver::{ClientSession, Reconnect, Reconnected};
pub use events::{Event, EventRef, Fields, ItemRef, OwnedState};
pub use publisher::{Publisher, PublisherOptions};
pub use publishing::{
    ItemId, PublishError, PublisherEvent, PublisherSession, ReceivedPost, ServiceOptions,
};
pub use rustls;
pub use session::{Connection, LoginOptions, Session};
pub use subscriber::Subscriber;
pub use tickwire_proto as proto;
pub use watchlist::{PostTo, ReconnectPolicy, RequestOptions, StreamId, SubscriberSession};

use thiserror::Error;

/// Why a client operation failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The node cannot be reached (or refused the TLS handshake).
    #[error("cannot connect to node at {addr}: {reason}")]
    Connect {
        /// The address.
        addr: String,
        /// Why not.
        reason: String,
    },
    /// The node refused the connection for now (connection limit, shutting down).
    #[error("refused by the node: {0}")]
    Refused(String),
    /// The node refused the login.
    #[error("login rejected by the node (code {code}): {reason}")]
    Rejected {
        /// The status code.
        code: u16,
        /// The node's reason.
        reason: String,
    },
    /// The connection was lost.
    #[error("connection to the node lost: {0}")]
    Disconnected(String),
    /// Nothing came in time (what, in the text).
    #[error("timed out {0}")]
    Timeout(String),
    /// The node broke the protocol.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// Bytes from the node do not decode.
    #[error("malformed data from the node: {0}")]
    Decode(#[from] tickwire_proto::DecodeError),
    /// A message could not be encoded (too large).
    #[error("cannot encode: {0}")]
    Encode(#[from] tickwire_proto::EncodeError),
    /// A socket error.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

impl ClientError {
    /// A connection-level failure that reconnecting may cure.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ClientError::Connect { .. }
                | ClientError::Refused(_)
                | ClientError::Disconnected(_)
                | ClientError::Timeout(_)
                | ClientError::Decode(_)
                | ClientError::Io(_)
        )
    }
}

/// Exponential backoff between reconnection attempts. It starts again from the
/// minimum only after a connection that stayed up for [`Backoff::HEALTHY`]: a node that
/// accepts and then refuses at once (a service another publisher holds, a full node)
/// sees the delays keep doubling rather than a try every `min`.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    min: std::time::Duration,
    max: std::time::Duration,
    next: std::time::Duration,
    connected_at: Option<std::time::Instant>,
}

impl Backoff {
    pub(crate) const HEALTHY: std::time::Duration = std::time::Duration::from_secs(10);

    pub(crate) fn new(min: std::time::Duration, max: std::time::Duration) -> Self {
        Backoff {
            min,
            max,
            next: min,
            connected_at: None,
        }
    }

    /// A connection (re)opened.
    pub(crate) fn connected(&mut self, now: std::time::Instant) {
        self.connected_at = Some(now);
    }

    /// The delay before the next attempt after a failure or a lost connection, doubling
    /// up to the maximum unless the last connection lasted long enough to count as
    /// healthy.
    pub(crate) fn step(&mut self, now: std::time::Instant) -> std::time::Duration {
        if let Some(at) = self.connected_at.take() {
            if now.saturating_duration_since(at) >= Self::HEALTHY {
                self.next = self.min;
            }
        }
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }
}

#[cfg(test)]
mod backoff_tests {
    use super::Backoff;
    use std::time::{Duration, Instant};

    #[test]
    fn refused_right_after_connecting_keeps_doubling_and_a_healthy_connection_resets() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(100), ms(1600));
        let mut now = Instant::now();
        let mut delays = Vec::new();
        for _ in 0..6 {
            b.connected(now);
            now += ms(5); // refused at once
            delays.push(b.step(now).as_millis());
        }
        assert_eq!(delays, [100, 200, 400, 800, 1600, 1600]);
        b.connected(now);
        now += Backoff::HEALTHY;
        assert_eq!(b.step(now), ms(100));
        assert_eq!(b.step(now), ms(200), "a failed try is no connection");
    }
}
