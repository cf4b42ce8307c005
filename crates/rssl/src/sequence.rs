//! Sequence numbers for what RSSL providers publish through a node.

/// The sequence number of an item's last message from an RSSL provider. Providers may
/// number their messages (RWF's optional `seqNum`) or not (the perf tools do not); the
/// node's own protocol numbers every update (the last plus its conflation count), and
/// the backbone and node trees find lost updates by those numbers. So a provider's
/// number is taken where it gives one, and counted on from the last where it does not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ItemSeq {
    last: u32,
}

impl ItemSeq {
    /// A refresh: the provider's number, else the last (its image holds the updates so
    /// far).
    pub fn refresh(&mut self, given: Option<u32>) -> u32 {
        if let Some(seq) = given {
            self.last = seq;
        }
        self.last
    }

    /// An update standing for `count` updates (its conflation count; 0 taken as 1).
    pub fn update(&mut self, given: Option<u32>, count: u16) -> u32 {
        self.last = given.unwrap_or_else(|| self.last.wrapping_add(u32::from(count.max(1))));
        self.last
    }
}

#[cfg(test)]
mod tests {
    use super::ItemSeq;

    #[test]
    fn unnumbered_messages_are_counted_and_numbered_ones_kept() {
        let mut s = ItemSeq::default();
        assert_eq!(s.refresh(None), 0);
        assert_eq!(s.update(None, 1), 1);
        assert_eq!(s.update(None, 0), 2);
        assert_eq!(s.update(None, 3), 5);
        assert_eq!(s.refresh(None), 5);
        assert_eq!(s.update(Some(100), 1), 100);
        assert_eq!(s.update(None, 1), 101);
        assert_eq!(s.refresh(Some(7)), 7);
        let mut wrap = ItemSeq::default();
        wrap.update(Some(u32::MAX), 1);
        assert_eq!(wrap.update(None, 1), 0);
    }
}
