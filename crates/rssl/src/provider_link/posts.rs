//! Posts sent to the provider and waiting for its Ack, each until a deadline: a
//! provider that never answers does not hold them (nor their place under the cap)
//! until the connection goes.

use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The node's default post timeout (`posts.timeout_ms`).
pub const DEFAULT_POST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub(super) struct PendingPosts {
    /// By post id (the node's, used as the RWF post id too): the node's stream the
    /// post came on, and its deadline.
    by_id: FxHashMap<u32, (u32, Instant)>,
    /// Deadlines in the order given (the same timeout for every post); an answered
    /// post's stays until it passes or is swept.
    deadlines: VecDeque<(Instant, u32)>,
    pub(super) timeout: Duration,
}

impl Default for PendingPosts {
    fn default() -> Self {
        PendingPosts {
            by_id: FxHashMap::default(),
            deadlines: VecDeque::new(),
            timeout: DEFAULT_POST_TIMEOUT,
        }
    }
}

impl PendingPosts {
    pub(super) fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Post `id`, from the node's stream `stream_id`, waits from `now`.
    pub(super) fn insert(&mut self, id: u32, stream_id: u32, now: Instant) {
        let deadline = now + self.timeout;
        self.by_id.insert(id, (stream_id, deadline));
        self.deadlines.push_back((deadline, id));
        // Answered posts' deadlines go once they outnumber the posts waiting, so that
        // posts answered at once hold no memory for the timeout's length (amortized
        // O(1) a post, as the core's own post deadlines).
        if self.deadlines.len() > 2 * self.by_id.len() + 64 {
            let by_id = &self.by_id;
            self.deadlines
                .retain(|&(at, id)| by_id.get(&id).is_some_and(|p| p.1 == at));
        }
    }

    /// Post `id` answered: the node's stream it came on.
    pub(super) fn remove(&mut self, id: u32) -> Option<u32> {
        self.by_id.remove(&id).map(|p| p.0)
    }

    /// Every post waiting, taken (the connection is gone): post id and stream.
    pub(super) fn take_all(&mut self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.deadlines.clear();
        self.by_id
            .drain()
            .map(|(id, (stream_id, _))| (id, stream_id))
    }

    /// The next deadline, if any (maybe of a post answered since: a turn for nothing).
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.front().map(|d| d.0)
    }

    /// The posts whose deadline passed by `now`, taken: `expired(post id, stream)`.
    pub(super) fn expire(&mut self, now: Instant, mut expired: impl FnMut(u32, u32)) {
        while let Some(&(at, id)) = self.deadlines.front() {
            if at > now {
                break;
            }
            self.deadlines.pop_front();
            // Answered meanwhile, or its id taken again by a later post.
            if self.by_id.get(&id).is_some_and(|p| p.1 == at) {
                if let Some((stream_id, _)) = self.by_id.remove(&id) {
                    expired(id, stream_id);
                }
            }
        }
    }
}
