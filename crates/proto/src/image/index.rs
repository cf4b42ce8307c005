//! [`Index`]: where each field of a large [`FieldImage`](super::FieldImage) is.
//!
//! One block of slots, open addressing with linear probing: a lookup touches one cache
//! line in the common case. A node's cache holds thousands of images and an update finds
//! its item's image out of the CPU's nearer caches; a B-tree (the index before) took a
//! miss per level and per node half (keys, then values), which was most of the cost of
//! an update to a 1,000-item cache of 83-field images (`cargo bench -p tickwire-proto
//! --bench image many`).
//!
//! Field ids are chosen by the publisher, so the hash is keyed: multiply-shift with an
//! odd multiplier drawn from the process's random state (2-universal: ids a publisher
//! picks collide no more often than random ones unless it knows the multiplier). Load
//! stays at most 3/4, so a probe walks a few slots.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::OnceLock;

/// The fewest slots an index has.
const MIN_SLOTS: usize = 16;

/// fid -> offset of its live entry in the image's data, and the dead bytes there.
#[derive(Debug, Clone)]
pub(super) struct Index {
    /// Each slot is 0 (empty) or `(offset + 1) << 16 | fid as u16`; a power of two long.
    slots: Box<[u64]>,
    /// `64 - log2(slots.len())`: the multiply-shift keeps the product's top bits.
    shift: u32,
    /// The hash's multiplier (odd).
    multiplier: u64,
    /// Fields indexed.
    len: usize,
    /// Bytes of dead entries in the image's data.
    pub(super) dead: usize,
}

/// The process's multiplier: random, odd, drawn once.
fn process_multiplier() -> u64 {
    static MULTIPLIER: OnceLock<u64> = OnceLock::new();
    *MULTIPLIER.get_or_init(|| RandomState::new().hash_one(0x7469_636b_u64) | 1)
}

impl Index {
    /// An empty index with room for `fields` fields.
    pub(super) fn with_capacity(fields: usize) -> Self {
        let slots = (fields * 4 / 3 + 1).next_power_of_two().max(MIN_SLOTS);
        Self {
            slots: vec![0; slots].into_boxed_slice(),
            shift: 64 - slots.trailing_zeros(),
            multiplier: process_multiplier(),
            len: 0,
            dead: 0,
        }
    }

    /// Fields indexed (the image's own count says it outside tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Heap bytes held (the block of slots and this header).
    pub(super) fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.slots.len() * 8
    }

    /// The slot holding `fid`, or the empty slot where it would go.
    #[inline(always)]
    fn probe(&self, fid: i16) -> (usize, bool) {
        let key = fid as u16 as u64;
        let mask = self.slots.len() - 1;
        let mut i = (key.wrapping_mul(self.multiplier) >> self.shift) as usize;
        loop {
            let s = self.slots[i];
            if s == 0 {
                return (i, false);
            }
            if s as u16 as u64 == key {
                return (i, true);
            }
            i = (i + 1) & mask;
        }
    }

    /// Where the entry of `fid` is.
    #[inline(always)]
    pub(super) fn get(&self, fid: i16) -> Option<usize> {
        match self.probe(fid) {
            (i, true) => Some((self.slots[i] >> 16) as usize - 1),
            _ => None,
        }
    }

    /// Records that the entry of `fid` is at `pos` (a new field or one that moved).
    pub(super) fn set(&mut self, fid: i16, pos: usize) {
        let slot = ((pos as u64 + 1) << 16) | fid as u16 as u64;
        let (i, found) = self.probe(fid);
        if found {
            self.slots[i] = slot;
            return;
        }
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
            let (i, _) = self.probe(fid);
            self.slots[i] = slot;
        } else {
            self.slots[i] = slot;
        }
        self.len += 1;
    }

    /// Doubles the slots and places every field again.
    #[cold]
    fn grow(&mut self) {
        let mut bigger = Self::with_capacity(self.slots.len());
        bigger.dead = self.dead;
        for &s in self.slots.iter().filter(|&&s| s != 0) {
            let (i, _) = bigger.probe(s as u16 as i16);
            bigger.slots[i] = s;
            bigger.len += 1;
        }
        *self = bigger;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_was_set_through_growth_and_moves() {
        let mut index = Index::with_capacity(1);
        for fid in (i16::MIN..=i16::MAX).step_by(7) {
            index.set(fid, fid as u16 as usize * 3);
        }
        let n = (i16::MIN..=i16::MAX).step_by(7).count();
        assert_eq!(index.len(), n);
        assert!(index.len() * 4 <= index.slots.len() * 3, "load at most 3/4");
        for fid in (i16::MIN..=i16::MAX).step_by(7) {
            assert_eq!(index.get(fid), Some(fid as u16 as usize * 3), "fid {fid}");
            assert_eq!(index.get(fid.wrapping_add(1)), None);
        }
        // A field that moved keeps one slot.
        index.set(i16::MIN, 1 << 40);
        assert_eq!(index.get(i16::MIN), Some(1 << 40));
        assert_eq!(index.len(), n);
    }

    #[test]
    fn every_field_id_fits_one_index() {
        let mut index = Index::with_capacity(0);
        for fid in i16::MIN..=i16::MAX {
            index.set(fid, 0);
        }
        assert_eq!(index.len(), 65_536);
        assert!((i16::MIN..=i16::MAX).all(|fid| index.get(fid) == Some(0)));
    }
}
