//! Messages put back together from Aeron's fragments, bounded.
//!
//! Aeron splits a message longer than one datagram's payload into fragments (BEGIN, then
//! middles, then END) and leaves putting them back to the subscriber. Aeron's own C
//! assembler keeps one buffer per session for ever and lets it grow to 2 GiB: a host
//! that forges a session (no key is needed to send datagrams, only to be believed) could
//! send a BEGIN and middles with no END and grow the node's heap without limit, before
//! any seal is checked. Here a message is at most [`MAX_MESSAGE`] bytes, at most
//! [`MAX_PARTIAL`] messages are being put together at once (the one started longest ago
//! gives way), and what an unfinished message held is freed when it is dropped.

use rustc_hash::FxHashMap;

/// The longest message any node sends on the backbone: a data message is at most one
/// Tickwire message of 64 KiB with its headers and seal (or a batch of smaller ones under
/// `batch_bytes`, at most 64 KiB), a file chunk at most 64,000 bytes with its own; Aeron
/// takes at most an eighth of the term length in one message, and the term length is at
/// least 1 MiB (`backbone.term_length`).
pub const MAX_MESSAGE: usize = 128 * 1024;

// The largest message a source sends: one Tickwire message (its body at most 64 KiB)
// behind the data header, with room for the message header and the seal.
const _: () = assert!(tickwire_proto::message::MAX_MESSAGE_BODY + 1024 <= MAX_MESSAGE);

/// Messages being put together at once, at most: each session (a source's data, an
/// edge's requests) sends one message at a time.
pub const MAX_PARTIAL: usize = 64;

/// Aeron's fragment flags (the data frame header's `flags`).
const BEGIN: u8 = 0x80;
const END: u8 = 0x40;

/// Where a fragment is in its session's stream: its term and offset, and its frame's
/// length (header included). A message's fragments follow each other in one term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// The term's id.
    pub term_id: i32,
    /// The fragment's offset in the term.
    pub term_offset: i32,
    /// Its frame's length, header included.
    pub frame_length: i32,
}

impl Place {
    /// Where the fragment after this one starts (frames are 32-byte aligned).
    fn next(self) -> (i32, i32) {
        let aligned = (self.frame_length.max(0) + 31) & !31;
        (self.term_id, self.term_offset.wrapping_add(aligned))
    }
}

/// Why fragments were dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// The message would be longer than [`MAX_MESSAGE`].
    TooLong,
    /// A middle or last fragment without its beginning (or after a dropped one).
    NoBeginning,
    /// A new message began before the last one of its session ended.
    Unfinished,
    /// More than [`MAX_PARTIAL`] messages were being put together.
    Crowded,
    /// A fragment that does not follow the last one (its image went and came back
    /// within another message: putting them together would splice two messages).
    Gap,
}

impl Dropped {
    /// For the log.
    pub fn text(self) -> &'static str {
        match self {
            Dropped::TooLong => "a message longer than the longest any node sends",
            Dropped::NoBeginning => "fragments without their beginning",
            Dropped::Unfinished => "a message begun again before it ended",
            Dropped::Crowded => "too many messages begun at once",
            Dropped::Gap => "a fragment that does not follow the one before it",
        }
    }
}

struct Partial {
    bytes: Vec<u8>,
    /// When it began (in fragments seen), to know which started longest ago.
    began: u64,
    /// Where its next fragment must be: term id and offset.
    next: (i32, i32),
}

/// Messages of one stream being put together, by Aeron session.
#[derive(Default)]
pub struct Reassembler {
    partial: FxHashMap<i32, Partial>,
    fragments: u64,
    /// A finished message's buffer, kept for the next (only when small).
    spare: Vec<u8>,
    /// Fragments dropped since the start.
    pub dropped: u64,
    /// The last reason, for the log.
    pub last_dropped: Option<Dropped>,
}

impl Reassembler {
    /// One fragment of `session` at `place` with Aeron's `flags`: a whole message goes
    /// to `deliver` (a message in one fragment without being copied).
    pub fn fragment(
        &mut self,
        session: i32,
        place: Place,
        flags: u8,
        payload: &[u8],
        deliver: impl FnOnce(&[u8]),
    ) {
        self.fragments += 1;
        let (begin, end) = (flags & BEGIN != 0, flags & END != 0);
        if begin {
            if let Some(p) = self.partial.remove(&session) {
                self.drop_counted(Dropped::Unfinished);
                self.recycle(p.bytes);
            }
            if end {
                deliver(payload);
                return;
            }
            if payload.len() > MAX_MESSAGE {
                self.drop_counted(Dropped::TooLong);
                return;
            }
            if self.partial.len() >= MAX_PARTIAL {
                let oldest = self
                    .partial
                    .iter()
                    .min_by_key(|(_, p)| p.began)
                    .map(|(&s, _)| s);
                if let Some(p) = oldest.and_then(|s| self.partial.remove(&s)) {
                    self.drop_counted(Dropped::Crowded);
                    self.recycle(p.bytes);
                }
            }
            let mut bytes = std::mem::take(&mut self.spare);
            bytes.extend_from_slice(payload);
            self.partial.insert(
                session,
                Partial {
                    bytes,
                    began: self.fragments,
                    next: place.next(),
                },
            );
            return;
        }
        let Some(p) = self.partial.get_mut(&session) else {
            self.drop_counted(Dropped::NoBeginning);
            return;
        };
        if p.next != (place.term_id, place.term_offset) {
            let p = self.partial.remove(&session).expect("present");
            self.drop_counted(Dropped::Gap);
            self.recycle(p.bytes);
            return;
        }
        p.next = place.next();
        if p.bytes.len() + payload.len() > MAX_MESSAGE {
            let p = self.partial.remove(&session).expect("present");
            self.drop_counted(Dropped::TooLong);
            self.recycle(p.bytes);
            return;
        }
        p.bytes.extend_from_slice(payload);
        if end {
            let p = self.partial.remove(&session).expect("present");
            deliver(&p.bytes);
            self.recycle(p.bytes);
        }
    }

    /// Messages being put together now.
    pub fn partial_count(&self) -> usize {
        self.partial.len()
    }

    fn drop_counted(&mut self, why: Dropped) {
        self.dropped += 1;
        self.last_dropped = Some(why);
    }

    fn recycle(&mut self, mut bytes: Vec<u8>) {
        if bytes.capacity() <= MAX_MESSAGE && bytes.capacity() > self.spare.capacity() {
            bytes.clear();
            self.spare = bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each session's fragments one after another in term 0, as Aeron lays them out.
    fn feed(r: &mut Reassembler, session: i32, flags: u8, payload: &[u8]) -> Option<Vec<u8>> {
        use std::collections::HashMap;
        thread_local!(static AT: std::cell::RefCell<HashMap<i32, i32>> = Default::default());
        let frame_length = 32 + payload.len() as i32;
        let term_offset = AT.with(|a| {
            let mut a = a.borrow_mut();
            let at = a.entry(session).or_insert(0);
            let here = *at;
            *at += (frame_length + 31) & !31;
            here
        });
        let place = Place {
            term_id: 0,
            term_offset,
            frame_length,
        };
        feed_at(r, session, place, flags, payload)
    }

    fn feed_at(
        r: &mut Reassembler,
        session: i32,
        place: Place,
        flags: u8,
        payload: &[u8],
    ) -> Option<Vec<u8>> {
        let mut got = None;
        r.fragment(session, place, flags, payload, |m| got = Some(m.to_vec()));
        got
    }

    /// The session's image went while a message was half there, and came back within
    /// another message: its middle and end are not spliced onto the first one's head.
    #[test]
    fn fragments_after_a_gap_are_not_put_onto_another_messages_head() {
        let mut r = Reassembler::default();
        let at = |term_offset, len: usize| Place {
            term_id: 3,
            term_offset,
            frame_length: 32 + len as i32,
        };
        assert_eq!(feed_at(&mut r, 5, at(0, 10), BEGIN, b"HEAD-OF-1|"), None);
        assert_eq!(feed_at(&mut r, 5, at(4096, 8), 0, b"middle-9"), None);
        assert_eq!(r.last_dropped, Some(Dropped::Gap));
        assert_eq!(feed_at(&mut r, 5, at(4160, 8), END, b"end-of-9"), None);
        // In another term at the offset that would follow: a gap too.
        assert_eq!(feed_at(&mut r, 6, at(0, 3), BEGIN, b"abc"), None);
        let other_term = Place {
            term_id: 4,
            ..at(64, 3)
        };
        assert_eq!(feed_at(&mut r, 6, other_term, END, b"def"), None);
        // Fragments that follow each other make their message.
        assert_eq!(feed_at(&mut r, 7, at(0, 3), BEGIN, b"abc"), None);
        assert_eq!(
            feed_at(&mut r, 7, at(64, 3), END, b"def"),
            Some(b"abcdef".to_vec())
        );
    }

    #[test]
    fn fragments_of_interleaved_sessions_make_their_messages() {
        let mut r = Reassembler::default();
        assert_eq!(
            feed(&mut r, 1, BEGIN | END, b"whole"),
            Some(b"whole".to_vec())
        );
        assert_eq!(feed(&mut r, 1, BEGIN, b"ab"), None);
        assert_eq!(feed(&mut r, 2, BEGIN, b"xy"), None);
        assert_eq!(feed(&mut r, 1, 0, b"cd"), None);
        assert_eq!(feed(&mut r, 2, END, b"z"), Some(b"xyz".to_vec()));
        assert_eq!(feed(&mut r, 1, END, b"e"), Some(b"abcde".to_vec()));
        assert_eq!(r.partial_count(), 0);
        assert_eq!(r.dropped, 0);
    }

    #[test]
    fn a_message_that_never_ends_is_dropped_at_the_bound_and_frees_what_it_held() {
        let mut r = Reassembler::default();
        let chunk = vec![7u8; 1400];
        assert_eq!(feed(&mut r, 9, BEGIN, &chunk), None);
        let mut sent = chunk.len();
        while sent + chunk.len() <= MAX_MESSAGE {
            assert_eq!(feed(&mut r, 9, 0, &chunk), None);
            sent += chunk.len();
        }
        assert_eq!(r.partial_count(), 1);
        // The fragment past the bound drops the message; the rest has no beginning.
        assert_eq!(feed(&mut r, 9, 0, &chunk), None);
        assert_eq!(r.last_dropped, Some(Dropped::TooLong));
        assert_eq!(r.partial_count(), 0);
        for _ in 0..10_000 {
            assert_eq!(feed(&mut r, 9, 0, &chunk), None);
        }
        assert_eq!(r.partial_count(), 0);
        assert_eq!(r.last_dropped, Some(Dropped::NoBeginning));
        // The session's next message is whole again.
        assert_eq!(feed(&mut r, 9, BEGIN, b"a"), None);
        assert_eq!(feed(&mut r, 9, END, b"b"), Some(b"ab".to_vec()));
    }

    #[test]
    fn many_sessions_beginning_messages_hold_at_most_the_bound() {
        let mut r = Reassembler::default();
        for session in 0..10_000 {
            feed(&mut r, session, BEGIN, &[1; 1000]);
            assert!(r.partial_count() <= MAX_PARTIAL);
        }
        assert_eq!(r.last_dropped, Some(Dropped::Crowded));
        // The newest are kept: the last session's message can end.
        assert_eq!(feed(&mut r, 9_999, END, b"!").map(|m| m.len()), Some(1001));
    }

    proptest::proptest! {
        /// Any fragments, in any order: the bounds hold, and every message delivered is
        /// within the longest (a session's fragments in order make their message).
        #[test]
        fn any_fragments_keep_the_bounds(
            frags in proptest::collection::vec((0i32..80, 0u8..4, 0usize..40_000), 0..400)
        ) {
            let mut r = Reassembler::default();
            for (session, f, len) in frags {
                let flags = [0, END, BEGIN, BEGIN | END][usize::from(f)];
                let payload = vec![1u8; len];
                let mut got = None;
                let place = Place { term_id: 0, term_offset: (len as i32) & !31, frame_length: 32 };
                r.fragment(session, place, flags, &payload, |m| got = Some(m.len()));
                proptest::prop_assert!(r.partial_count() <= MAX_PARTIAL);
                proptest::prop_assert!(r.partial.values().all(|p| p.bytes.len() <= MAX_MESSAGE));
                if let Some(n) = got {
                    proptest::prop_assert!(n <= MAX_MESSAGE || flags == BEGIN | END);
                }
            }
        }
    }

    #[test]
    fn a_message_begun_again_replaces_the_unfinished_one() {
        let mut r = Reassembler::default();
        feed(&mut r, 3, BEGIN, b"old");
        feed(&mut r, 3, BEGIN, b"new");
        assert_eq!(r.last_dropped, Some(Dropped::Unfinished));
        assert_eq!(feed(&mut r, 3, END, b"!"), Some(b"new!".to_vec()));
    }
}
