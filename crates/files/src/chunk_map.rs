//! Which chunks of a file a site holds: one bit per chunk.
//!
//! A receiver keeps one per transfer; it lists what it misses (in ranges, for its
//! status) and is saved beside the partial file so that a restarted site asks only
//! for what it lacks.

use std::ops::Range;

/// One bit per chunk of a file; a set bit is a chunk held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkMap {
    words: Vec<u64>,
    chunks: u32,
    held: u32,
}

impl ChunkMap {
    /// A map of `chunks` chunks, none held.
    pub fn new(chunks: u32) -> Self {
        ChunkMap {
            words: vec![0; (chunks as usize).div_ceil(64)],
            chunks,
            held: 0,
        }
    }

    /// Chunks in the file.
    pub fn chunks(&self) -> u32 {
        self.chunks
    }

    /// Chunks held.
    pub fn held(&self) -> u32 {
        self.held
    }

    /// Every chunk is held.
    pub fn is_complete(&self) -> bool {
        self.held == self.chunks
    }

    /// Whether chunk `index` is held.
    pub fn has(&self, index: u32) -> bool {
        index < self.chunks && self.words[(index / 64) as usize] & (1 << (index % 64)) != 0
    }

    /// Marks `index` held; false if it already was (or is past the end).
    pub fn insert(&mut self, index: u32) -> bool {
        if index >= self.chunks {
            return false;
        }
        let word = &mut self.words[(index / 64) as usize];
        let bit = 1u64 << (index % 64);
        if *word & bit != 0 {
            return false;
        }
        *word |= bit;
        self.held += 1;
        true
    }

    /// The first chunk at or after `from` that is not held, if any before `below`.
    pub fn next_missing(&self, from: u32, below: u32) -> Option<u32> {
        self.next_where(from, below, |w| !w)
    }

    /// The first chunk at or after `from` whose bit, in the word `bits` makes of each
    /// word, is set, if any before `below`. Indices step in u64: the word after the
    /// last one of a map of `u32::MAX` chunks starts past `u32::MAX`.
    fn next_where(&self, from: u32, below: u32, bits: impl Fn(u64) -> u64) -> Option<u32> {
        let below = u64::from(below.min(self.chunks));
        let mut i = u64::from(from);
        while i < below {
            let w = bits(self.words[(i / 64) as usize]) & (u64::MAX << (i % 64));
            if w != 0 {
                let found = (i / 64) * 64 + u64::from(w.trailing_zeros());
                return (found < below).then_some(found as u32);
            }
            i = (i / 64 + 1) * 64;
        }
        None
    }

    /// Marks `index` no longer held; false if it was not.
    pub fn remove(&mut self, index: u32) -> bool {
        if !self.has(index) {
            return false;
        }
        self.words[(index / 64) as usize] &= !(1u64 << (index % 64));
        self.held -= 1;
        true
    }

    /// Marks every chunk of `range` held (clamped to the map), a word at a time.
    pub fn insert_range(&mut self, range: std::ops::Range<u32>) {
        let end = u64::from(range.end.min(self.chunks));
        let mut i = u64::from(range.start);
        while i < end {
            let word = (i / 64) as usize;
            let hi = (end - (i / 64) * 64).min(64);
            let lo = i % 64;
            let mask = if hi == 64 {
                u64::MAX << lo
            } else {
                ((1u64 << hi) - 1) & (u64::MAX << lo)
            };
            self.held += (mask & !self.words[word]).count_ones();
            self.words[word] |= mask;
            i = (i / 64 + 1) * 64;
        }
    }

    /// The first chunk at or after `from` that is held, if any before `below`.
    pub fn next_held(&self, from: u32, below: u32) -> Option<u32> {
        self.next_where(from, below, |w| w)
    }

    /// Up to `max` ranges of chunks not held below `below`, in order.
    pub fn missing(&self, below: u32, max: usize) -> Vec<Range<u32>> {
        let below = below.min(self.chunks);
        let mut out = Vec::new();
        let mut from = 0;
        while out.len() < max {
            let Some(start) = self.next_missing(from, below) else {
                break;
            };
            let end = self.next_held(start, below).unwrap_or(below);
            out.push(start..end);
            from = end;
        }
        out
    }

    /// The map as bytes (to save beside a partial file): chunk count, then the words.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.words.len() * 8);
        out.extend_from_slice(&self.chunks.to_be_bytes());
        for w in &self.words {
            out.extend_from_slice(&w.to_be_bytes());
        }
        out
    }

    /// A map saved by [`ChunkMap::to_bytes`], if it is one of `chunks` chunks (a saved
    /// map of another size, a torn write or junk gives `None`: start again).
    pub fn from_bytes(bytes: &[u8], chunks: u32) -> Option<Self> {
        let (head, rest) = bytes.split_first_chunk::<4>()?;
        if u32::from_be_bytes(*head) != chunks || rest.len() != (chunks as usize).div_ceil(64) * 8 {
            return None;
        }
        let words: Vec<u64> = rest
            .chunks_exact(8)
            .map(|w| u64::from_be_bytes(w.try_into().expect("8 bytes")))
            .collect();
        // Bits past the last chunk must be clear, or `held` would lie.
        if !chunks.is_multiple_of(64) && words.last().is_some_and(|w| w >> (chunks % 64) != 0) {
            return None;
        }
        let held = words.iter().map(|w| w.count_ones()).sum();
        Some(ChunkMap {
            words,
            chunks,
            held,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ranges_of_what_is_missing() {
        let mut m = ChunkMap::new(200);
        assert_eq!(m.missing(200, 8), vec![0..200]);
        for i in [0, 1, 2, 64, 65, 130, 199] {
            assert!(m.insert(i));
        }
        assert!(!m.insert(1), "twice");
        assert!(!m.insert(200), "past the end");
        assert_eq!(m.held(), 7);
        assert_eq!(m.missing(200, 8), vec![3..64, 66..130, 131..199]);
        assert_eq!(m.missing(100, 8), vec![3..64, 66..100]);
        assert_eq!(m.missing(200, 2), vec![3..64, 66..130]);
        assert_eq!(m.next_missing(0, 200), Some(3));
        assert_eq!(m.next_missing(64, 66), None);
    }

    #[test]
    fn a_saved_map_comes_back_and_a_wrong_one_does_not() {
        let mut m = ChunkMap::new(70);
        m.insert(3);
        m.insert(69);
        let bytes = m.to_bytes();
        assert_eq!(ChunkMap::from_bytes(&bytes, 70), Some(m.clone()));
        assert_eq!(ChunkMap::from_bytes(&bytes, 71), None);
        assert_eq!(ChunkMap::from_bytes(&bytes[..bytes.len() - 1], 70), None);
        let mut stray = bytes.clone();
        let last = stray.len() - 1;
        stray[last - 7] |= 0x80; // bit 127: past chunk 69
        assert_eq!(ChunkMap::from_bytes(&stray, 70), None);
    }

    #[test]
    fn ranges_are_inserted_a_word_at_a_time() {
        let mut m = ChunkMap::new(300);
        m.insert(10);
        m.insert_range(5..140);
        m.insert_range(290..400);
        assert_eq!(m.held(), 135 + 10);
        assert_eq!(m.missing(300, 8), vec![0..5, 140..290]);
        assert!(m.remove(6) && !m.remove(6));
        assert_eq!(m.next_held(0, 300), Some(5));
        assert_eq!(m.next_held(141, 300), Some(290));
    }

    #[test]
    fn a_map_of_u32_max_chunks_is_searched_to_its_end() {
        // The words are zeroed pages the kernel hands out as they are touched: only
        // the last ones are.
        let mut m = ChunkMap::new(u32::MAX);
        let last = u32::MAX - 1;
        assert_eq!(m.next_held(last - 200, u32::MAX), None);
        assert_eq!(m.missing(u32::MAX, 8).len(), 1);
        assert_eq!(m.next_missing(last, u32::MAX), Some(last));
        m.insert_range(last - 3..u32::MAX);
        assert_eq!(m.held(), 4);
        assert_eq!(m.next_held(last - 200, u32::MAX), Some(last - 3));
        assert_eq!(m.next_missing(last - 3, u32::MAX), None);
    }

    proptest! {
        #[test]
        fn missing_ranges_are_exactly_the_clear_bits(chunks in 0u32..300, held in proptest::collection::vec(0u32..300, 0..200)) {
            let mut m = ChunkMap::new(chunks);
            for i in &held { m.insert(*i); }
            let ranges = m.missing(chunks, usize::MAX);
            let mut clear = Vec::new();
            for r in ranges { clear.extend(r); }
            let want: Vec<u32> = (0..chunks).filter(|i| !held.contains(i)).collect();
            prop_assert_eq!(clear, want);
            prop_assert_eq!(m.is_complete(), (0..chunks).all(|i| held.contains(&i)));
            prop_assert_eq!(ChunkMap::from_bytes(&m.to_bytes(), chunks), Some(m));
        }
    }
}
