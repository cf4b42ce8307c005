//! A map from stream ids to values, looked up once per update at the edge.
//!
//! Stream ids come densely: a source numbers the streams it opens for its edges from 1,
//! and the core numbers its requests to the edge from `NODE_STREAM_BASE`. An id in the
//! dense run from `base` lives in a vector slot indexed by its offset: one load instead
//! of a hash probe into a table of 100,000 entries, and a slot the data path can
//! prefetch a few messages ahead. Other ids go to a hash map. The vector only grows
//! while it stays dense (its length within twice the ids it holds plus some slack), so
//! an id far from the rest costs a map entry, not gigabytes.

use rustc_hash::FxHashMap;
use tickwire_proto::wire::prefetch;

/// Ids at or above `base` plus this are never put in the vector.
const DENSE_LIMIT: u32 = 1 << 24;
/// The vector may grow this far past twice the number of ids it holds.
const DENSE_SLACK: usize = 4096;

pub(crate) struct DenseMap<V> {
    base: u32,
    /// Indexed by `id - base`.
    slots: Vec<Option<V>>,
    /// Ids held in `slots`.
    dense_len: usize,
    /// Every id not in `slots` (an id is in one place only).
    sparse: FxHashMap<u32, V>,
}

impl<V> DenseMap<V> {
    /// An empty map whose dense run starts at `base`.
    pub(crate) fn new(base: u32) -> DenseMap<V> {
        DenseMap {
            base,
            slots: Vec::new(),
            dense_len: 0,
            sparse: FxHashMap::default(),
        }
    }

    #[inline]
    fn index(&self, id: u32) -> Option<usize> {
        let off = id.checked_sub(self.base)?;
        (off < DENSE_LIMIT).then_some(off as usize)
    }

    #[inline]
    pub(crate) fn get(&self, id: u32) -> Option<&V> {
        if let Some(Some(v)) = self.index(id).and_then(|i| self.slots.get(i)) {
            return Some(v);
        }
        if self.sparse.is_empty() {
            return None;
        }
        self.sparse.get(&id)
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, id: u32) -> Option<&mut V> {
        if let Some(i) = self.index(id) {
            if let Some(Some(_)) = self.slots.get(i) {
                return self.slots[i].as_mut();
            }
        }
        if self.sparse.is_empty() {
            return None;
        }
        self.sparse.get_mut(&id)
    }

    /// Starts loading the slot `get(id)` will read, if `id` is in the vector's range (a
    /// hint: it changes no result).
    #[inline]
    pub(crate) fn prefetch(&self, id: u32) {
        if let Some(slot) = self.index(id).and_then(|i| self.slots.get(i)) {
            prefetch(slot as *const Option<V> as *const u8);
        }
    }

    /// Maps `id` to `v`; returns what it mapped to before.
    pub(crate) fn insert(&mut self, id: u32, v: V) -> Option<V> {
        let Some(i) = self.index(id) else {
            return self.sparse.insert(id, v);
        };
        if i >= self.slots.len() {
            if i >= 2 * self.dense_len + DENSE_SLACK {
                return self.sparse.insert(id, v);
            }
            self.slots.resize_with(i + 1, || None);
        }
        // The id may have gone to the map while the vector was shorter.
        let earlier = if self.sparse.is_empty() {
            None
        } else {
            self.sparse.remove(&id)
        };
        let old = self.slots[i].replace(v);
        if old.is_none() {
            self.dense_len += 1;
        }
        old.or(earlier)
    }

    pub(crate) fn remove(&mut self, id: u32) -> Option<V> {
        if let Some(i) = self.index(id) {
            if let Some(old) = self.slots.get_mut(i).and_then(Option::take) {
                self.dense_len -= 1;
                return Some(old);
            }
        }
        if self.sparse.is_empty() {
            return None;
        }
        self.sparse.remove(&id)
    }

    pub(crate) fn len(&self) -> usize {
        self.dense_len + self.sparse.len()
    }

    pub(crate) fn clear(&mut self) {
        self.slots.clear();
        self.dense_len = 0;
        self.sparse.clear();
    }

    /// Every (id, value), the vector's in id order first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &V)> {
        let base = self.base;
        self.slots
            .iter()
            .enumerate()
            .filter_map(move |(i, v)| v.as_ref().map(|v| (base + i as u32, v)))
            .chain(self.sparse.iter().map(|(&id, v)| (id, v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Against a BTreeMap, over ids dense, sparse, below the base and far above it.
    #[test]
    fn behaves_as_a_map() {
        let mut m: DenseMap<u64> = DenseMap::new(100);
        let mut reference = BTreeMap::new();
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for step in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let id = match x % 4 {
                0 => 100 + (x >> 8) as u32 % 3000,
                1 => (x >> 8) as u32 % 200,
                2 => (x >> 8) as u32,
                _ => 100 + (x >> 8) as u32 % 20_000,
            };
            match (x >> 40) % 3 {
                0 | 1 => assert_eq!(m.insert(id, step), reference.insert(id, step)),
                _ => assert_eq!(m.remove(id), reference.remove(&id)),
            }
            assert_eq!(m.get(id), reference.get(&id));
            assert_eq!(m.len(), reference.len());
        }
        let mut all: Vec<(u32, u64)> = m.iter().map(|(k, &v)| (k, v)).collect();
        all.sort();
        let expected: Vec<(u32, u64)> = reference.iter().map(|(&k, &v)| (k, v)).collect();
        assert_eq!(all, expected);
        if let Some((&id, _)) = reference.iter().next() {
            *m.get_mut(id).expect("present") += 1;
            assert_eq!(m.get(id), Some(&(reference[&id] + 1)));
        }
        m.clear();
        assert_eq!(m.len(), 0);
        assert_eq!(m.iter().count(), 0);
    }

    /// An id far above the others costs a map entry, not a vector that long.
    #[test]
    fn a_far_id_does_not_grow_the_vector() {
        let mut m: DenseMap<u8> = DenseMap::new(1);
        m.insert(1, 1);
        m.insert(10_000_000, 2);
        m.insert(u32::MAX, 3);
        assert!(m.slots.len() < 10);
        assert_eq!(m.get(10_000_000), Some(&2));
        assert_eq!(m.get(u32::MAX), Some(&3));
        assert_eq!(m.len(), 3);
    }
}
