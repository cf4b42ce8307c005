//! Stream ids handed out again, for a session that opens and closes streams for as
//! long as it lives (a node's upstream link): its per-stream tables are indexed by id,
//! and without reuse they would grow with every stream it ever opened.
//!
//! An id is reused only once nothing more can come for its old stream. The node sends
//! its messages in order, and answers a Ping after everything it sent before reading
//! it: so a Ping sent after an id was given up (this side's Close, or the node's own
//! end of the stream and anything this side sent on it before seeing that) is a fence,
//! and its Pong frees the ids given up before it. A new connection frees them all: the
//! old one's messages are gone with it.

use std::collections::VecDeque;

/// Ids given up before a fence is sent however many are free (one Ping per so many
/// closes at the most).
const FENCE_BATCH: usize = 64;

/// The ids a session may hand out again.
#[derive(Debug, Default)]
pub(crate) struct IdPool {
    /// Free: nothing more can come for them.
    free: Vec<u32>,
    /// Given up since the last fence.
    unfenced: Vec<u32>,
    /// Fences sent (their Ping's token), each with the ids its Pong frees.
    fences: VecDeque<(u64, Vec<u32>)>,
    /// Tokens of this session's fences; 0 is the heartbeat's Ping.
    last_token: u64,
}

impl IdPool {
    /// An id to hand out again, if one is free.
    pub(crate) fn take(&mut self) -> Option<u32> {
        self.free.pop()
    }

    /// The stream of `sid` ended (closed here, or by the node).
    pub(crate) fn give_up(&mut self, sid: u32) {
        self.unfenced.push(sid);
    }

    /// A fence to send now (the token of its Ping), when ids wait for one and either
    /// none is free or a batch has gathered.
    pub(crate) fn fence_due(&mut self) -> Option<u64> {
        if self.unfenced.is_empty() || (self.unfenced.len() < FENCE_BATCH && !self.free.is_empty())
        {
            return None;
        }
        self.last_token += 1;
        let ids = std::mem::take(&mut self.unfenced);
        self.fences.push_back((self.last_token, ids));
        Some(self.last_token)
    }

    /// The node answered the Ping of `token`: the ids of that fence and of the ones
    /// before it are free.
    pub(crate) fn pong(&mut self, token: u64) {
        while self.fences.front().is_some_and(|(t, _)| *t <= token) {
            let (_, ids) = self.fences.pop_front().expect("checked");
            self.free.extend(ids);
        }
    }

    /// A new connection: every id given up is free.
    pub(crate) fn new_connection(&mut self) {
        self.free.append(&mut self.unfenced);
        for (_, ids) in self.fences.drain(..) {
            self.free.extend(ids);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_given_up_is_free_only_once_a_fence_after_it_is_answered() {
        let mut p = IdPool::default();
        p.give_up(5);
        assert_eq!(p.take(), None);
        let t = p.fence_due().expect("none free: a fence at once");
        p.give_up(6); // after the fence: not freed by its answer
        assert_eq!(p.take(), None);
        p.pong(0); // the heartbeat's answer frees nothing
        assert_eq!(p.take(), None);
        p.pong(t);
        assert_eq!(p.take(), Some(5));
        assert_eq!(p.take(), None);
        let t2 = p.fence_due().expect("6 waits, none free");
        p.pong(t2);
        assert_eq!(p.take(), Some(6));
    }

    #[test]
    fn fences_gather_a_batch_while_ids_are_free_and_a_new_connection_frees_all() {
        let mut p = IdPool::default();
        p.give_up(1);
        let t = p.fence_due().unwrap();
        p.pong(t);
        // One id free: the next ones wait for a batch.
        for sid in 10..10 + FENCE_BATCH as u32 - 1 {
            p.give_up(sid);
            assert_eq!(p.fence_due(), None);
        }
        p.give_up(99);
        let t = p.fence_due().expect("a batch");
        p.give_up(100);
        assert_eq!(p.fence_due(), None);
        // Lost before its answer: all of them free with the new connection.
        p.new_connection();
        let mut all: Vec<u32> = std::iter::from_fn(|| p.take()).collect();
        all.sort_unstable();
        assert_eq!(all.len(), FENCE_BATCH + 2);
        assert_eq!((all[0], *all.last().unwrap()), (1, 100));
        p.pong(t); // a late answer frees nothing twice
        assert_eq!(p.take(), None);
    }
}
