//! The item table: items addressed by a dense integer handle, slots reused.

use tickwire_proto::wire::prefetch;
use tickwire_proto::{DataState, FieldImage, StreamState};

pub(crate) type ItemHandle = u32;

/// Where a subscriber stream lives: its item, and its place in that item's `subs`, so
/// that closing or finding one stream costs O(1) however many streams the item has
/// (one connection may open 200,000 streams on one item).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StreamRef {
    pub item: ItemHandle,
    pub slot: u32,
}

/// One subscriber stream of an item.
pub(crate) struct SubEntry {
    pub conn: usize,
    pub stream_id: u32,
    /// Field ids the subscriber wants (sorted); `None` for all. Shared by streams
    /// requested in a row with the same view.
    pub view: Option<std::sync::Arc<[i16]>>,
    /// Opened but not yet sent its image: updates are held back until the refresh.
    pub awaiting_refresh: bool,
    /// false for a snapshot request: closed after its refresh.
    pub streaming: bool,
    /// Cache off: opened while the publisher's refresh was between its parts. The rest
    /// of that refresh is not a whole image for it: it waits for the next one.
    pub joined_mid_refresh: bool,
}

impl SubEntry {
    /// The stream state its refreshes carry (the cached image's and a publisher's
    /// forwarded alike): open, or non-streaming for a snapshot request.
    #[inline]
    pub(crate) fn stream_state(&self) -> StreamState {
        if self.streaming {
            StreamState::Open
        } else {
            StreamState::NonStreaming
        }
    }

    pub(crate) fn clone_meta(&self) -> SubEntry {
        SubEntry {
            conn: self.conn,
            stream_id: self.stream_id,
            view: self.view.clone(),
            awaiting_refresh: self.awaiting_refresh,
            streaming: self.streaming,
            joined_mid_refresh: self.joined_mid_refresh,
        }
    }
}

pub(crate) struct Item {
    pub service: usize,
    pub name: Box<str>,
    /// Last value of every field (empty with the cache off).
    pub image: FieldImage,
    /// A complete image is cached.
    pub complete: bool,
    /// Sequence number of the last refresh or update applied.
    pub seq: u32,
    pub data_state: DataState,
    pub subs: Vec<SubEntry>,
    /// The publisher connection and its stream id for this item.
    pub publisher: Option<(usize, u32)>,
    /// A request for a refresh is outstanding at the publisher.
    pub refresh_requested: bool,
    /// Cache off: the publisher's refresh has come in part and its complete part is
    /// still to come.
    pub refresh_in_parts: bool,
    /// The outstanding request re-images live streams (an interactive publisher came
    /// back): its refresh goes to every stream, not only those waiting for an image.
    pub recovering: bool,
    /// Nobody watches it, and its interactive publisher is told so only at this time
    /// (`CoreConfig::interactive_linger`): a quick re-request is answered from the
    /// cache.
    pub linger_until: Option<std::time::Instant>,
    /// Its refreshes and updates go into the node's journal (`[journal] updates`).
    pub journaled: bool,
    /// Replays of it are waiting for their history: its messages are kept meanwhile
    /// (replay.rs).
    pub capturing: bool,
}

impl Item {
    pub(crate) fn new(service: usize, name: &str) -> Self {
        Item {
            service,
            name: name.into(),
            image: FieldImage::new(),
            complete: false,
            seq: 0,
            data_state: DataState::Ok,
            subs: Vec::new(),
            publisher: None,
            refresh_requested: false,
            refresh_in_parts: false,
            recovering: false,
            linger_until: None,
            journaled: false,
            capturing: false,
        }
    }
}

#[derive(Default)]
pub(crate) struct ItemTable {
    slots: Vec<Option<Item>>,
    free: Vec<ItemHandle>,
}

impl ItemTable {
    /// The view of the stream at `at` (`Some(None)` for all fields), if it is there.
    pub(crate) fn view_of(&self, at: StreamRef) -> Option<Option<&[i16]>> {
        let sub = self.get(at.item)?.subs.get(at.slot as usize)?;
        Some(sub.view.as_deref())
    }

    pub(crate) fn insert(&mut self, item: Item) -> ItemHandle {
        if let Some(h) = self.free.pop() {
            self.slots[h as usize] = Some(item);
            h
        } else {
            self.slots.push(Some(item));
            (self.slots.len() - 1) as ItemHandle
        }
    }

    /// Starts loading the item's memory, every cache line its slot touches (a slot of
    /// 144 bytes spans three lines at some offsets) (a hint).
    #[inline]
    pub(crate) fn prefetch(&self, h: ItemHandle) {
        const LINE: usize = 64;
        const SIZE: usize = std::mem::size_of::<Option<Item>>();
        if let Some(slot) = self.slots.get(h as usize) {
            let p = slot as *const Option<Item> as *const u8;
            let mut at = 0;
            while at < SIZE {
                prefetch(p.wrapping_add(at));
                at += LINE;
            }
            // The last line, which the steps above miss when the slot starts mid-line.
            prefetch(p.wrapping_add(SIZE - 1));
        }
    }

    pub(crate) fn get(&self, h: ItemHandle) -> Option<&Item> {
        self.slots.get(h as usize)?.as_ref()
    }

    pub(crate) fn get_mut(&mut self, h: ItemHandle) -> Option<&mut Item> {
        self.slots.get_mut(h as usize)?.as_mut()
    }

    pub(crate) fn remove(&mut self, h: ItemHandle) -> Option<Item> {
        let item = self.slots.get_mut(h as usize)?.take();
        if item.is_some() {
            self.free.push(h);
        }
        item
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}
