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

use crate::wire::prefetch;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::OnceLock;

/// The fewest slots an index has.
const MIN_SLOTS: usize = 16;

/// fid -> offset of its live entry in the image's data, and the dead bytes there: one
/// heap block, `[dead bytes, fields indexed, slot...]`, so that the image holds one
/// pointer to it and a node can start loading the slots ahead of an update
/// ([`Index::prefetch`]) without first loading a header block.
#[derive(Debug, Clone)]
pub(super) struct Index(Box<[u64]>);

/// Where the header words are in the block; the slots follow.
const DEAD: usize = 0;
const LEN: usize = 1;
const SLOTS: usize = 2;

/// The process's multiplier: random, odd, drawn once.
#[inline(always)]
fn process_multiplier() -> u64 {
    static MULTIPLIER: OnceLock<u64> = OnceLock::new();
    *MULTIPLIER.get_or_init(|| RandomState::new().hash_one(0x7469_636b_u64) | 1)
}

impl Index {
    /// An empty index with room for `fields` fields.
    pub(super) fn with_capacity(fields: usize) -> Self {
        let slots = (fields * 4 / 3 + 1).next_power_of_two().max(MIN_SLOTS);
        Index(vec![0; SLOTS + slots].into_boxed_slice())
    }

    /// The slots: each 0 (empty) or `(offset + 1) << 16 | fid as u16`; a power of two
    /// of them.
    #[inline(always)]
    fn slots(&self) -> &[u64] {
        &self.0[SLOTS..]
    }

    /// Fields indexed.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.0[LEN] as usize
    }

    /// Bytes of dead entries in the image's data.
    #[inline]
    pub(super) fn dead(&self) -> usize {
        self.0[DEAD] as usize
    }

    /// Sets the bytes of dead entries in the image's data.
    #[inline]
    pub(super) fn set_dead(&mut self, bytes: usize) {
        self.0[DEAD] = bytes as u64;
    }

    /// Heap bytes held.
    pub(super) fn heap_bytes(&self) -> usize {
        self.0.len() * 8
    }

    /// Starts loading the slots into the CPU cache, if they are few (up to 128, the
    /// index of an image of up to 96 fields: 16 cache lines).
    #[inline]
    pub(super) fn prefetch(&self) {
        let slots = self.slots();
        if slots.len() <= 128 {
            let p = slots.as_ptr() as *const u8;
            for line in 0..slots.len() / 8 {
                prefetch(p.wrapping_add(line * 64));
            }
        }
    }

    /// The slot where the search for `fid` starts (multiply-shift: the product's top
    /// log2(slots) bits).
    #[inline(always)]
    fn home(&self, fid: i16) -> usize {
        let shift = 64 - self.slots().len().trailing_zeros();
        ((fid as u16 as u64).wrapping_mul(process_multiplier()) >> shift) as usize
    }

    /// The slot holding `fid`, or the empty slot where it would go.
    #[inline(always)]
    fn probe(&self, fid: i16) -> (usize, bool) {
        let slots = self.slots();
        let key = fid as u16 as u64;
        let mask = slots.len() - 1;
        let mut i = self.home(fid);
        loop {
            let s = slots[i];
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
            (i, true) => Some((self.slots()[i] >> 16) as usize - 1),
            _ => None,
        }
    }

    /// Records that the entry of `fid` is at `pos` (a new field or one that moved).
    pub(super) fn set(&mut self, fid: i16, pos: usize) {
        let slot = ((pos as u64 + 1) << 16) | fid as u16 as u64;
        let (mut i, found) = self.probe(fid);
        if !found {
            if (self.len() + 1) * 4 > self.slots().len() * 3 {
                self.grow();
                i = self.probe(fid).0;
            }
            self.0[LEN] += 1;
        }
        self.0[SLOTS + i] = slot;
    }

    /// Doubles the slots and places every field again.
    #[cold]
    fn grow(&mut self) {
        let mut bigger = Self::with_capacity(self.slots().len());
        bigger.0[DEAD] = self.0[DEAD];
        bigger.0[LEN] = self.0[LEN];
        for &s in self.slots().iter().filter(|&&s| s != 0) {
            let (i, _) = bigger.probe(s as u16 as i16);
            bigger.0[SLOTS + i] = s;
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
        assert!(
            index.len() * 4 <= index.slots().len() * 3,
            "load at most 3/4"
        );
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
