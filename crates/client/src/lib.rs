//! Tickwire's client library: [`Publisher`] and [`Subscriber`] for Rust programs.
//!
//! Both are blocking APIs meant for a plain thread: the caller drives them with
//! `dispatch` / `next_event` (which also answer heartbeats) and they own their socket
//! (non-blocking underneath, so a publisher keeps reading while it writes). Both
//! reconnect automatically with exponential backoff: a subscriber re-requests its whole
//! watchlist, a publisher re-announces its service and re-sends the image of every item.
//! This crate owns the client side of the protocol and nothing of the node.

mod conn;
mod events;
mod publisher;
mod subscriber;

pub use conn::{ConnectOptions, Session};
pub use events::{Event, EventRef, Fields, ItemRef, OwnedState};
pub use publisher::{ItemId, PublishError, Publisher, PublisherEvent, PublisherOptions};
pub use subscriber::{RequestOptions, StreamId, Subscriber};
pub use tickwire_proto as proto;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ClientError {
    #[error("cannot connect to node at {addr}: {reason}")]
    Connect { addr: String, reason: String },
    #[error("login rejected by the node (code {code}): {reason}")]
    Rejected { code: u16, reason: String },
    #[error("connection to the node lost: {0}")]
    Disconnected(String),
    #[error("timed out {0}")]
    Timeout(String),
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("malformed data from the node: {0}")]
    Decode(#[from] tickwire_proto::DecodeError),
    #[error("cannot encode: {0}")]
    Encode(#[from] tickwire_proto::EncodeError),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}

impl ClientError {
    /// A connection-level failure that reconnecting may cure.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ClientError::Connect { .. }
                | ClientError::Disconnected(_)
                | ClientError::Timeout(_)
                | ClientError::Decode(_)
                | ClientError::Io(_)
        )
    }
}

/// Exponential backoff between reconnection attempts.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    min: std::time::Duration,
    max: std::time::Duration,
    next: std::time::Duration,
}

impl Backoff {
    pub fn new(min: std::time::Duration, max: std::time::Duration) -> Self {
        Backoff {
            min,
            max,
            next: min,
        }
    }
    pub fn reset(&mut self) {
        self.next = self.min;
    }
    /// The delay before the next attempt, doubling up to the maximum.
    pub fn step(&mut self) -> std::time::Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }
}
