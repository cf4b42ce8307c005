//! The items a provider publishes through the node, by the provider's stream id and by
//! service: what a directory message says of one service (renamed, removed, down, a
//! state for all its items) costs that service's items, never a look at every item of
//! the connection. Used by both kinds of provider, as `item_groups` is.

use crate::session::ProvidedItem;
use rustc_hash::{FxHashMap, FxHashSet};

/// A provider's items, indexed by service as well (an item's service never changes:
/// a stream is one item's, and a refresh naming another is refused).
#[derive(Debug, Default)]
pub(crate) struct ProvidedItems {
    items: FxHashMap<i32, ProvidedItem>,
    /// Each service's items (no entry for a service without any).
    by_service: FxHashMap<u16, FxHashSet<i32>>,
    /// Items a service's news looked at (what such news costs).
    #[cfg(test)]
    pub(crate) visited: u64,
}

impl ProvidedItems {
    pub(crate) fn get(&self, stream: &i32) -> Option<&ProvidedItem> {
        self.items.get(stream)
    }

    pub(crate) fn get_mut(&mut self, stream: &i32) -> Option<&mut ProvidedItem> {
        self.items.get_mut(stream)
    }

    pub(crate) fn contains_key(&self, stream: &i32) -> bool {
        self.items.contains_key(stream)
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// `item` on the provider's `stream`, in place of any item there.
    pub(crate) fn insert(&mut self, stream: i32, item: ProvidedItem) {
        let service = item.service;
        if let Some(old) = self.items.insert(stream, item) {
            self.unindex(stream, old.service);
        }
        self.by_service.entry(service).or_default().insert(stream);
    }

    pub(crate) fn remove(&mut self, stream: &i32) -> Option<ProvidedItem> {
        let item = self.items.remove(stream)?;
        self.unindex(*stream, item.service);
        Some(item)
    }

    pub(crate) fn clear(&mut self) {
        self.items.clear();
        self.by_service.clear();
    }

    /// Every item of `service` taken out, with its stream.
    pub(crate) fn remove_service(&mut self, service: u16) -> Vec<(i32, ProvidedItem)> {
        let streams = self.by_service.remove(&service).unwrap_or_default();
        streams
            .into_iter()
            .filter_map(|s| {
                #[cfg(test)]
                {
                    self.visited += 1;
                }
                self.items.remove(&s).map(|item| (s, item))
            })
            .collect()
    }

    /// The streams of `service`'s items.
    pub(crate) fn streams_of(&mut self, service: u16) -> Vec<i32> {
        #[cfg(test)]
        {
            self.visited += self.by_service.get(&service).map_or(0, |s| s.len() as u64);
        }
        self.by_service
            .get(&service)
            .map_or_else(Vec::new, |s| s.iter().copied().collect())
    }

    /// `f` on each item of `service`.
    pub(crate) fn for_service(&mut self, service: u16, mut f: impl FnMut(&mut ProvidedItem)) {
        let Some(streams) = self.by_service.get(&service) else {
            return;
        };
        for s in streams {
            #[cfg(test)]
            {
                self.visited += 1;
            }
            if let Some(item) = self.items.get_mut(s) {
                f(item);
            }
        }
    }

    fn unindex(&mut self, stream: i32, service: u16) {
        if let Some(streams) = self.by_service.get_mut(&service) {
            streams.remove(&stream);
            if streams.is_empty() {
                self.by_service.remove(&service);
            }
        }
    }

    /// How many services have items in the index.
    #[cfg(test)]
    pub(crate) fn indexed_services(&self) -> usize {
        self.by_service.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_index_follows_inserts_replacements_and_removals() {
        let mut items = ProvidedItems::default();
        for s in 0..10 {
            items.insert(s, ProvidedItem::new(s as u32, (s % 2) as u16, b"X"));
        }
        // Stream 0 reused for an item of service 7.
        items.insert(0, ProvidedItem::new(100, 7, b"Y"));
        items.remove(&1);
        let mut even = items.streams_of(0);
        even.sort();
        assert_eq!(even, [2, 4, 6, 8]);
        assert_eq!(items.streams_of(7), [0]);
        let mut odd: Vec<i32> = items
            .remove_service(1)
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        odd.sort();
        assert_eq!(odd, [3, 5, 7, 9]);
        assert_eq!((items.len(), items.indexed_services()), (5, 2));
        items.remove(&0);
        assert_eq!(
            items.indexed_services(),
            1,
            "no entry for a service left empty"
        );
        items.clear();
        assert!(items.is_empty() && items.streams_of(0).is_empty());
    }
}
