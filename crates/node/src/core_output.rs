//! The core's queued output for a connection that translates the node's messages into
//! another protocol (WebSocket JSON, RSSL): taken a whole frame at a time while the
//! connection's own buffer has room, so a slow client's backlog stays in the core,
//! where the slow-consumer policy sees it.

use tickwire_core::{ConnId, Node};
use tickwire_proto::{Message, MessageIter};

/// A connection that turns the node's messages into its own protocol.
pub(crate) trait Translate {
    /// Whether more may be translated now (its bytes waiting are below its high mark).
    fn has_room(&self) -> bool;
    /// One of the node's messages for the connection.
    fn message(&mut self, m: &Message<'_>);
    /// After each batch of frames taken from the core.
    fn end_batch(&mut self) {}
}

/// Hands the core's whole frames for `id` to `t` while it has room (at most 64
/// batches a call).
pub(crate) fn pull_frames(core: &mut Node, id: ConnId, t: &mut impl Translate) {
    for _ in 0..64 {
        if !t.has_room() {
            break;
        }
        let Some(o) = core.output(id) else { break };
        let bytes = o.sealed_bytes();
        if bytes.is_empty() {
            if core.on_output_written(id) {
                continue;
            }
            break;
        }
        let mut at = 0;
        while bytes.len() - at >= 4 && t.has_room() {
            let len = u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
                as usize;
            let Some(payload) = bytes.get(at + 4..at + 4 + len) else {
                break;
            };
            // The core queues only what it decoded in full or wrote itself: its field
            // lists are not walked again.
            for m in MessageIter::already_checked(payload).flatten() {
                t.message(&m.message);
            }
            at += 4 + len;
        }
        o.consume(at);
        t.end_batch();
        core.on_output_written(id);
    }
}

/// Drops what the core queued for a connection that will not read it (before an
/// upgrade or handshake, after a close).
pub(crate) fn drop_core_output(core: &mut Node, id: ConnId) {
    if let Some(o) = core.output(id) {
        let n = o.sealed_bytes().len();
        o.consume(n);
    }
}
