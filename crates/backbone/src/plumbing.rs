//! How the backbone's roles talk to their node's core: each is one in-process
//! connection (`Node::connect_internal`), logged in like any peer, reading what the
//! core writes to it and writing Tickwire messages into it.

use crate::wire::BackboneMessage;
use crate::Outbox;
use std::collections::VecDeque;
use std::time::Instant;
use tickwire_core::{ConnId, InternalPeer, Node};
use tickwire_proto::message::MESSAGE_HEADER_LEN;
use tickwire_proto::{DecodeError, Message, Role, SlowConsumerPolicy};

/// Joins `core` as one of its in-process peers with `role`.
pub(crate) fn connect(core: &mut Node, peer: &str, role: Role, now: Instant) -> ConnId {
    core.join_internal(
        &InternalPeer {
            peer,
            role,
            application: "tickwire-backbone",
            user: "backbone",
            // The source's link is a subscriber like any other: when the backbone
            // cannot take its data fast enough, the core conflates for it, never blocks.
            slow_consumer: (role == Role::Subscriber).then_some(SlowConsumerPolicy::Conflate),
        },
        now,
    )
}

/// Stream id of a stream-scoped message (refresh, update, status, close, request).
pub(crate) fn stream_id(encoded: &[u8]) -> Option<u32> {
    let b = encoded.get(MESSAGE_HEADER_LEN..MESSAGE_HEADER_LEN + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// A whole encoded message (header included, as `messages` and a data message give
/// them) decoded as its type says: its body starts past the header.
#[inline]
pub(crate) fn decode_message(ty: u8, encoded: &[u8]) -> Result<Message<'_>, DecodeError> {
    Message::decode_body(ty, &encoded[MESSAGE_HEADER_LEN..])
}

pub(crate) use tickwire_proto::frame::frames;

/// The messages of one frame payload: each message's type and whole encoding, read
/// from the headers only. Stops at an inconsistency (which the core never writes).
pub(crate) fn messages(payload: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    let mut p = 0;
    std::iter::from_fn(move || {
        if payload.len() - p < MESSAGE_HEADER_LEN {
            return None;
        }
        let body = u16::from_be_bytes([payload[p + 1], payload[p + 2]]) as usize;
        let end = p + MESSAGE_HEADER_LEN + body;
        if end > payload.len() {
            return None;
        }
        let m = (payload[p], &payload[p..end]);
        p = end;
        Some(m)
    })
}

/// Backbone messages waiting to be offered, in order, bounded: past `max` new ones are
/// dropped and counted (their senders ask again: edges repeat requests, sources resend
/// heartbeats and directories).
pub(crate) struct ControlQueue {
    q: VecDeque<Vec<u8>>,
    max: usize,
    pub dropped: u64,
}

impl ControlQueue {
    pub(crate) fn new(max: usize) -> Self {
        ControlQueue {
            q: VecDeque::new(),
            max,
            dropped: 0,
        }
    }

    pub(crate) fn push(&mut self, m: &BackboneMessage<'_>) {
        let mut buf = Vec::new();
        if m.encode(&mut buf).is_ok() {
            self.push_encoded(buf);
        }
    }

    pub(crate) fn push_encoded(&mut self, buf: Vec<u8>) {
        if self.q.len() >= self.max {
            self.dropped += 1;
            return;
        }
        self.q.push_back(buf);
    }

    /// Offers them in order; false if the backbone refused one (it stays first).
    pub(crate) fn flush(&mut self, out: &mut dyn Outbox) -> bool {
        while let Some(m) = self.q.front() {
            if !out.offer(m) {
                return false;
            }
            self.q.pop_front();
        }
        true
    }

    pub(crate) fn clear(&mut self) {
        self.q.clear();
    }
}
