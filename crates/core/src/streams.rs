//! A publisher connection's stream id -> item handle map, looked up once per update.
//!
//! Publishers number the items they push densely from 1 (the client library's stream of
//! item `n` is `n + 1`), so ids below a bound live in a vector indexed by the id: one
//! load instead of a hash probe into a table of 100,000 entries. Other ids (the node's
//! own requests from 0x8000_0000 on, and sparse ids) go to a hash map. The vector only
//! grows while it stays dense: its length is kept within twice the ids it holds plus a
//! little slack, so a publisher that picks stream id 0x7FFF_FFFF costs a map entry, not
//! 8 GiB.

use crate::items::ItemHandle;
use rustc_hash::FxHashMap;
use tickwire_proto::wire::prefetch;

/// Marks an unused slot of the vector (the item table never holds 2^32 - 1 items).
const NONE: ItemHandle = ItemHandle::MAX;
/// Ids at or above this are never put in the vector (64 MiB of it at most).
const DENSE_LIMIT: u32 = 1 << 24;
/// The vector may grow this far past twice the number of ids it holds.
const DENSE_SLACK: usize = 4096;

#[derive(Default)]
pub struct StreamMap {
    /// Indexed by stream id; `NONE` where the id is not in use.
    dense: Vec<ItemHandle>,
    /// Ids in use in `dense`.
    dense_len: usize,
    /// Every id not in `dense` (an id is in one or the other, never both).
    sparse: FxHashMap<u32, ItemHandle>,
}

impl StreamMap {
    #[inline]
    pub fn get(&self, sid: u32) -> Option<ItemHandle> {
        if let Some(&h) = self.dense.get(sid as usize) {
            if h != NONE {
                return Some(h);
            }
        }
        if self.sparse.is_empty() {
            return None;
        }
        self.sparse.get(&sid).copied()
    }

    /// The handle of `sid` if it is in the vector: one load, never a hash probe (for
    /// hints, where a miss costs nothing).
    #[inline]
    pub fn get_dense(&self, sid: u32) -> Option<ItemHandle> {
        self.dense.get(sid as usize).copied().filter(|&h| h != NONE)
    }

    /// Starts loading the memory `get(sid)` will read if `sid` is in the vector (a hint).
    #[inline]
    pub fn prefetch(&self, sid: u32) {
        if let Some(slot) = self.dense.get(sid as usize) {
            prefetch(slot as *const ItemHandle as *const u8);
        }
    }

    pub fn contains_key(&self, sid: u32) -> bool {
        self.get(sid).is_some()
    }

    /// Maps `sid` to `h`, replacing what it mapped to; returns the old handle.
    pub fn insert(&mut self, sid: u32, h: ItemHandle) -> Option<ItemHandle> {
        debug_assert!(h != NONE);
        let i = sid as usize;
        let fits = i < self.dense.len();
        let may_grow = sid < DENSE_LIMIT && i < 2 * self.dense_len + DENSE_SLACK;
        if !fits && !may_grow {
            return self.sparse.insert(sid, h);
        }
        if !fits {
            self.dense.resize(i + 1, NONE);
        }
        let old = std::mem::replace(&mut self.dense[i], h);
        if old != NONE {
            return Some(old);
        }
        self.dense_len += 1;
        if self.sparse.is_empty() {
            None
        } else {
            // Put in the map while the vector was too short for it.
            self.sparse.remove(&sid)
        }
    }

    pub fn remove(&mut self, sid: u32) -> Option<ItemHandle> {
        if let Some(slot) = self.dense.get_mut(sid as usize) {
            if *slot != NONE {
                self.dense_len -= 1;
                return Some(std::mem::replace(slot, NONE));
            }
        }
        self.sparse.remove(&sid)
    }

    pub fn clear(&mut self) {
        self.dense.clear();
        self.dense_len = 0;
        self.sparse.clear();
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.dense_len + self.sparse.len()
    }

    #[cfg(test)]
    pub fn dense_capacity(&self) -> usize {
        self.dense.capacity()
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
        assert_eq!(m.insert(0x8000_0000, 6), None);
        assert_eq!(m.insert(DENSE_LIMIT, 7), None);
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
        assert!(m.dense.len() <= 2 * m.dense_len + DENSE_SLACK);
        assert_eq!(m.len(), 25);
    }
}
