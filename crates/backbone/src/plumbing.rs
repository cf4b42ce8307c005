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
/// heartbeats and directories). At most one heartbeat waits: while no one takes what a
/// role offers (no edge yet, no source), the next heartbeat would only repeat it, and
/// heartbeats piled up by the hour (36,000 an hour, up to the bound), then went out as
/// a burst of stale ones ahead of anything new when a peer came.
pub(crate) struct ControlQueue {
    /// Each message, and whether it is a heartbeat.
    q: VecDeque<(Vec<u8>, bool)>,
    heartbeats: usize,
    max: usize,
    pub dropped: u64,
}

impl ControlQueue {
    pub(crate) fn new(max: usize) -> Self {
        ControlQueue {
            q: VecDeque::new(),
            heartbeats: 0,
            max,
            dropped: 0,
        }
    }

    pub(crate) fn push(&mut self, m: &BackboneMessage<'_>) {
        let heartbeat = matches!(
            m,
            BackboneMessage::Heartbeat { .. } | BackboneMessage::EdgeHeartbeat { .. }
        );
        if heartbeat && self.heartbeats > 0 {
            return;
        }
        let mut buf = Vec::new();
        if m.encode(&mut buf).is_ok() && self.room() {
            self.heartbeats += usize::from(heartbeat);
            self.q.push_back((buf, heartbeat));
        }
    }

    pub(crate) fn push_encoded(&mut self, buf: Vec<u8>) {
        if self.room() {
            self.q.push_back((buf, false));
        }
    }

    fn room(&mut self) -> bool {
        let room = self.q.len() < self.max;
        if !room {
            self.dropped += 1;
        }
        room
    }

    /// Takes every message waiting, in order.
    pub(crate) fn take_all(&mut self) -> impl Iterator<Item = Vec<u8>> {
        self.heartbeats = 0;
        std::mem::take(&mut self.q).into_iter().map(|(m, _)| m)
    }

    /// Messages waiting.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.q.len()
    }

    /// Offers them in order; false if the backbone refused one (it stays first).
    pub(crate) fn flush(&mut self, out: &mut dyn Outbox) -> bool {
        while let Some((m, heartbeat)) = self.q.front() {
            if !out.offer(m) {
                return false;
            }
            self.heartbeats -= usize::from(*heartbeat);
            self.q.pop_front();
        }
        true
    }

    pub(crate) fn clear(&mut self) {
        self.q.clear();
        self.heartbeats = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Backbone {
        taken: Vec<Vec<u8>>,
        open: bool,
    }

    impl Outbox for Backbone {
        fn offer(&mut self, msg: &[u8]) -> bool {
            if self.open {
                self.taken.push(msg.to_vec());
            }
            self.open
        }
    }

    #[test]
    fn an_hour_with_no_one_to_take_them_leaves_one_heartbeat_waiting() {
        let mut q = ControlQueue::new(1 << 20);
        let mut no_one = Backbone {
            taken: Vec::new(),
            open: false,
        };
        let beat = |version| BackboneMessage::Heartbeat {
            source: 7,
            name: "src",
            directory_version: version,
        };
        for second in 0..3600 {
            for _ in 0..10 {
                q.push(&beat(second));
                assert!(!q.flush(&mut no_one));
            }
        }
        q.push(&BackboneMessage::EdgeJoined { source: 7, edge: 9 });
        assert_eq!(q.len(), 2);
        no_one.open = true;
        assert!(q.flush(&mut no_one));
        assert_eq!(no_one.taken.len(), 2);
        // Once out, the next heartbeat is queued again.
        q.push(&beat(4000));
        assert_eq!(q.len(), 1);
        assert_eq!(q.dropped, 0);
    }
}
