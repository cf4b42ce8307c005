//! Fan out first, cache after: publishers' updates whose merge into the cached image
//! waits until their subscribers' bytes are on their way.
//!
//! Merging an update into its item's image is the largest part of the node's work per
//! update when the images are cold (a wide image out of the caches of a CPU the other
//! processes share: about 2 µs for 23 fields of an 83-field image, where forwarding
//! the update costs a tenth of that). The fan-out does not need the image, so the core
//! queues the update for its subscribers, keeps its field list here, and merges it
//! when the driver has written the turn's output ([`crate::Node::settle`]), or before
//! anything reads an image, creates or removes an item, or the list grows past its
//! bound. Subscribers see the same messages in the same order; only the moment the
//! image catches up moves.

use crate::items::ItemHandle;
use crate::ConnId;

/// Updates deferred in one turn (between two [`crate::Node::settle`] calls); past it,
/// what waits is merged and the turn's further updates are merged as they come. A
/// small burst is where a send waits for the merges, and what it deferred is still in
/// the CPU's cache when merged; a large one is best served by merging each update
/// with its fan-out, where the item is loaded once (a second pass over a thousand
/// items costs about 15% more per update: `cargo bench -p tickwire-core --bench lvc`).
pub(crate) const MAX_DEFERRED: usize = 128;
/// Field-list bytes deferred in one turn, likewise.
pub(crate) const MAX_DEFERRED_BYTES: usize = 64 * 1024;

/// The most an update of `count` fields in `len` bytes adds to an image.
pub(crate) fn growth_bound(len: usize, count: usize) -> usize {
    len + 5 * count
}

/// One update still to merge: its publisher, its item, where its field list is.
struct Entry {
    conn: ConnId,
    item: ItemHandle,
    end: u32,
}

/// Updates fanned out and not merged into their images yet, in arrival order.
#[derive(Default)]
pub(crate) struct Deferred {
    entries: Vec<Entry>,
    fields: Vec<u8>,
    /// This turn passed the bounds: no more deferring until the driver settles.
    closed: bool,
    /// The most the waiting updates can grow any image by (see [`Deferred::growth`]).
    growth: usize,
}

impl Deferred {
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The most the waiting updates can add to one image, were they all its: an
    /// entry of the image is at most 5 bytes longer than its field in a list.
    pub(crate) fn growth(&self) -> usize {
        self.growth
    }

    /// Whether an update of `len` bytes may wait: the turn is not closed, and would
    /// stay within the bounds with it. The first that would not closes the turn.
    pub(crate) fn accepts(&mut self, len: usize) -> bool {
        if self.closed {
            return false;
        }
        if self.entries.len() >= MAX_DEFERRED || self.fields.len() + len > MAX_DEFERRED_BYTES {
            self.closed = true;
            return false;
        }
        true
    }

    /// A new turn: updates may wait again.
    pub(crate) fn reopen(&mut self) {
        self.closed = false;
    }

    /// An update of `count` fields encoded in `fields`, to be merged later.
    pub(crate) fn push(&mut self, conn: ConnId, item: ItemHandle, fields: &[u8], count: usize) {
        self.growth += growth_bound(fields.len(), count);
        self.fields.extend_from_slice(fields);
        self.entries.push(Entry {
            conn,
            item,
            end: self.fields.len() as u32,
        });
    }

    /// Takes the waiting updates out (to be merged in order), leaving the buffers'
    /// memory for the next turn via [`Deferred::give_back`].
    pub(crate) fn take(&mut self) -> Taken {
        self.growth = 0;
        Taken {
            entries: std::mem::take(&mut self.entries),
            fields: std::mem::take(&mut self.fields),
        }
    }

    pub(crate) fn give_back(&mut self, mut t: Taken) {
        t.entries.clear();
        t.fields.clear();
        if self.entries.capacity() == 0 {
            self.entries = t.entries;
            self.fields = t.fields;
        }
    }
}

/// The updates of one [`Deferred::take`].
pub(crate) struct Taken {
    entries: Vec<Entry>,
    fields: Vec<u8>,
}

impl Taken {
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn item(&self, i: usize) -> ItemHandle {
        self.entries[i].item
    }

    /// The `i`th update: its publisher, its item, its field list.
    pub(crate) fn get(&self, i: usize) -> (ConnId, ItemHandle, &[u8]) {
        let start = if i == 0 {
            0
        } else {
            self.entries[i - 1].end as usize
        };
        let e = &self.entries[i];
        (e.conn, e.item, &self.fields[start..e.end as usize])
    }
}
