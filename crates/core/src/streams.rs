//! A publisher connection's stream id -> item handle map, looked up once per update.
//!
//! Ids come densely from two places: a publisher numbers the items it pushes from 1
//! (the client library's stream of item `n` is `n + 1`), and the node numbers its
//! requests to an interactive publisher (an upstream link, a backbone edge) from
//! 0x8000_0000, per connection. Ids in either run live in a vector indexed by the id's
//! offset in it: one load instead of a hash probe into a table of 100,000 entries, and
//! a slot the update path can prefetch. Other ids (sparse ones) go to a hash map. A
//! vector only grows while it stays dense: its length is kept within twice the ids it
//! holds plus a little slack, so a publisher that picks stream id 0x7FFF_FFFF costs a
//! map entry, not 8 GiB.

use crate::items::ItemHandle;
use rustc_hash::FxHashMap;
use tickwire_proto::wire::prefetch;

/// Marks an unused slot of a vector (the item table never holds 2^32 - 1 items).
const NONE: ItemHandle = ItemHandle::MAX;
/// Ids at or above a run's base plus this are never put in its vector (64 MiB at most).
const DENSE_LIMIT: u32 = 1 << 24;
/// A vector may grow this far past twice the number of ids it holds.
const DENSE_SLACK: usize = 4096;
/// Where the node's own request ids start (`crate::NODE_STREAM_BASE`).
const NODE_BASE: u32 = crate::NODE_STREAM_BASE;

/// One dense run of ids from `base`.
#[derive(Default)]
struct Dense {
    base: u32,
    /// Indexed by `id - base`; `NONE` where the id is not in use.
    slots: Vec<ItemHandle>,
    /// Ids in use in `slots`.
    len: usize,
}

impl Dense {
    /// The slot index of `sid`, if `sid` belongs to this run's range.
    #[inline]
    fn index(&self, sid: u32) -> Option<usize> {
        let off = sid.checked_sub(self.base)?;
        (off < DENSE_LIMIT).then_some(off as usize)
    }

    #[inline]
    fn get(&self, sid: u32) -> Option<ItemHandle> {
        let i = self.index(sid)?;
        self.slots.get(i).copied().filter(|&h| h != NONE)
    }
}

pub(crate) struct StreamMap {
    /// The publisher's own ids, from 0.
    own: Dense,
    /// The node's request ids, from `NODE_BASE`.
    node: Dense,
    /// Every id in neither vector (an id is in one place only).
    sparse: FxHashMap<u32, ItemHandle>,
}

impl Default for StreamMap {
    fn default() -> StreamMap {
        StreamMap {
            own: Dense::default(),
            node: Dense {
                base: NODE_BASE,
                ..Dense::default()
            },
            sparse: FxHashMap::default(),
        }
    }
}

impl StreamMap {
    #[inline]
    fn run_mut(&mut self, sid: u32) -> &mut Dense {
        if sid >= NODE_BASE {
            &mut self.node
        } else {
            &mut self.own
        }
    }

    #[inline]
    pub(crate) fn get(&self, sid: u32) -> Option<ItemHandle> {
        // A publisher's own ids first, as directly as can be (the own run's base is 0).
        if let Some(&h) = self.own.slots.get(sid as usize) {
            if h != NONE {
                return Some(h);
            }
        }
        self.get_elsewhere(sid)
    }

    fn get_elsewhere(&self, sid: u32) -> Option<ItemHandle> {
        if let Some(h) = self.node.get(sid) {
            return Some(h);
        }
        if self.sparse.is_empty() {
            return None;
        }
        self.sparse.get(&sid).copied()
    }

    /// The handle of `sid` if it is in a vector: one load, never a hash probe (for
    /// hints, where a miss costs nothing).
    #[inline]
    pub(crate) fn get_dense(&self, sid: u32) -> Option<ItemHandle> {
        match self.own.slots.get(sid as usize) {
            Some(&h) if h != NONE => Some(h),
            _ => self.node.get(sid),
        }
    }

    /// Starts loading the memory `get(sid)` will read if `sid` is in a vector (a hint).
    #[inline]
    pub(crate) fn prefetch(&self, sid: u32) {
        let slot = match self.own.slots.get(sid as usize) {
            Some(slot) => Some(slot),
            None => self.node.index(sid).and_then(|i| self.node.slots.get(i)),
        };
        if let Some(slot) = slot {
            prefetch(slot as *const ItemHandle as *const u8);
        }
    }

    pub(crate) fn contains_key(&self, sid: u32) -> bool {
        self.get(sid).is_some()
    }

    /// Maps `sid` to `h`, replacing what it mapped to; returns the old handle.
    pub(crate) fn insert(&mut self, sid: u32, h: ItemHandle) -> Option<ItemHandle> {
        debug_assert!(h != NONE);
        let run = self.run_mut(sid);
        let Some(i) = run.index(sid) else {
            return self.sparse.insert(sid, h);
        };
        let fits = i < run.slots.len();
        let may_grow = i < 2 * run.len + DENSE_SLACK;
        if !fits && !may_grow {
            return self.sparse.insert(sid, h);
        }
        if !fits {
            run.slots.resize(i + 1, NONE);
        }
        let old = std::mem::replace(&mut run.slots[i], h);
        if old != NONE {
            return Some(old);
        }
        run.len += 1;
        if self.sparse.is_empty() {
            None
        } else {
            // Put in the map while the vector was too short for it.
            self.sparse.remove(&sid)
        }
    }

    pub(crate) fn remove(&mut self, sid: u32) -> Option<ItemHandle> {
        let run = self.run_mut(sid);
        if let Some(slot) = run.index(sid).and_then(|i| run.slots.get_mut(i)) {
            if *slot != NONE {
                run.len -= 1;
                return Some(std::mem::replace(slot, NONE));
            }
        }
        self.sparse.remove(&sid)
    }

    pub(crate) fn clear(&mut self) {
        for run in [&mut self.own, &mut self.node] {
            run.slots.clear();
            run.len = 0;
        }
        self.sparse.clear();
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.own.len + self.node.len + self.sparse.len()
    }

    #[cfg(test)]
    pub(crate) fn dense_capacity(&self) -> usize {
        self.own.slots.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn behaves_like_a_map() {
        // Random operations over ids dense, sparse, huge and in the node's range, checked
        // against a HashMap.
        let mut m = StreamMap::default();
        let mut model: HashMap<u32, ItemHandle> = HashMap::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200_000 {
            let r = next();
            let sid = match r % 5 {
                0 | 1 => (r >> 8) as u32 % 20_000,
                2 => (r >> 8) as u32 % 200_000,
                3 => 0x8000_0000 + (r >> 8) as u32 % 1000,
                _ => (r >> 8) as u32,
            };
            let h = (r >> 40) as u32 % 1_000_000;
            match (r >> 4) % 3 {
                0 | 1 => assert_eq!(m.insert(sid, h), model.insert(sid, h)),
                _ => assert_eq!(m.remove(sid), model.remove(&sid)),
            }
            assert_eq!(m.get(sid), model.get(&sid).copied());
            assert_eq!(m.len(), model.len());
        }
        for (&sid, &h) in &model {
            assert_eq!(m.get(sid), Some(h));
        }
        m.clear();
        assert_eq!(m.len(), 0);
        assert_eq!(m.get(1), None);
    }

    #[test]
    fn dense_ids_use_the_vector_and_huge_ids_do_not_grow_it() {
        let mut m = StreamMap::default();
        for sid in 1..=100_000u32 {
            assert_eq!(m.insert(sid, sid * 2), None);
        }
        assert!(m.sparse.is_empty());
        assert_eq!(m.get(100_000), Some(200_000));
        assert_eq!(m.insert(0x7FFF_FFFF, 5), None);
        assert_eq!(m.insert(DENSE_LIMIT, 7), None);
        assert_eq!(m.insert(0xFFFF_FFF0, 8), None);
        assert_eq!(m.sparse.len(), 3);
        assert!(m.dense_capacity() < 400_000);
        assert_eq!(m.get(0x7FFF_FFFF), Some(5));
        assert_eq!(m.remove(0x7FFF_FFFF), Some(5));
        assert_eq!(m.get(0x7FFF_FFFF), None);

        // Ids stepping up by large strides cannot inflate the vector: it stays within
        // twice the ids it holds plus the slack.
        let mut m = StreamMap::default();
        let mut sid = 1u32;
        for _ in 0..1000 {
            m.insert(sid, 1);
            sid = sid.saturating_mul(2).min(DENSE_LIMIT - 1);
        }
        assert!(m.own.slots.len() <= 2 * m.own.len + DENSE_SLACK);
        assert_eq!(m.len(), 25);
    }

    #[test]
    fn the_node_s_own_request_ids_are_dense_too() {
        let mut m = StreamMap::default();
        for n in 0..100_000u32 {
            assert_eq!(m.insert(0x8000_0000 + n, n), None);
        }
        assert!(m.sparse.is_empty(), "a vector, not the map");
        assert_eq!(m.get_dense(0x8000_0000 + 99_999), Some(99_999));
        assert_eq!(m.get(0x8000_0000 + 100_000), None);
        assert_eq!(m.remove(0x8000_0000 + 5), Some(5));
        assert_eq!(m.get_dense(0x8000_0000 + 5), None);
        // Own ids and node ids side by side.
        assert_eq!(m.insert(3, 33), None);
        assert_eq!(m.get(3), Some(33));
        assert_eq!(m.len(), 100_000);
    }
}
