//! Item groups: a provider puts each item in a group (its refresh's group id, or a
//! status that moves it), and its Source Directory's GROUP filter then speaks of whole
//! groups at once: a state for every item of a group, or a group merged into another.
//! Used by both kinds of provider: the interactive ones the node connects to
//! (`provider_link`) and the non-interactive ones that connect to the node
//! (`session::provider`).

use crate::directory::{GroupChange, ServiceInfo};
use crate::session::native_state;
use rustc_hash::{FxHashMap, FxHasher};
use std::hash::{Hash, Hasher};
use tickwire_proto::{Message, Status, StreamState};

/// Where one item is: its provider's service id and its group.
#[derive(Debug, Default)]
pub(crate) struct ItemGroup {
    service: u16,
    /// Empty until the provider names it.
    group: Box<[u8]>,
}

impl ItemGroup {
    /// An item of `service`, in no group yet.
    pub(crate) fn new(service: u16) -> Self {
        ItemGroup {
            service,
            group: Box::default(),
        }
    }

    /// The group a refresh or status names, if any (allocates only when it changes).
    pub(crate) fn set(&mut self, group: Option<&[u8]>) {
        if let Some(g) = group.filter(|g| **g != *self.group) {
            self.group = g.into();
        }
    }
}

/// Every service's group news of one directory message, in order.
pub(crate) fn news<'a>(entries: &[ServiceInfo<'a>]) -> Vec<(u16, GroupChange<'a>)> {
    entries
        .iter()
        .flat_map(|e| e.groups.iter().map(|g| (e.id, g.clone())))
        .collect()
}

/// Applies `changes` (in the message's order) to `items`: a group's state goes to each
/// of its items as a status on its node stream, as if the provider had sent each one;
/// a merge moves its items into the other group, where the news after it may find
/// them. One look at each item and one status at most for it, whatever the number of
/// changes. Returns the items whose stream the news closed (key and node stream), for
/// the caller to forget.
pub(crate) fn apply<'i, K: Copy>(
    items: impl Iterator<Item = (K, u32, &'i mut ItemGroup)>,
    changes: &[(u16, GroupChange<'_>)],
    to_node: &mut Vec<u8>,
) -> Vec<(K, u32)> {
    let key = |service: u16, group: &[u8]| {
        let mut h = FxHasher::default();
        (service, group).hash(&mut h);
        h.finish()
    };
    // The changes of each (service, group), by the key's hash, in order.
    let mut by_group: FxHashMap<u64, Vec<usize>> = FxHashMap::default();
    for (i, (service, c)) in changes.iter().enumerate() {
        by_group.entry(key(*service, c.group)).or_default().push(i);
    }
    let mut closed = Vec::new();
    for (k, native, item) in items {
        // The next change, from `next` on, of the group the item is in now.
        let mut next = 0;
        let mut last_state = None;
        while let Some(i) = by_group
            .get(&key(item.service, &item.group))
            .and_then(|list| {
                list[list.partition_point(|&i| i < next)..]
                    .iter()
                    .copied()
                    .find(|&i| changes[i].0 == item.service && *changes[i].1.group == *item.group)
            })
        {
            next = i + 1;
            let c = &changes[i].1;
            if let Some(s) = &c.state {
                let state = native_state(s);
                let open = state.stream == StreamState::Open;
                last_state = Some(state);
                if !open {
                    break;
                }
            }
            if let Some(to) = c.merged_to {
                item.group = to.into();
            }
        }
        if let Some(state) = last_state {
            if state.stream != StreamState::Open {
                closed.push((k, native));
            }
            let _ = Message::Status(Status {
                stream_id: native,
                state,
            })
            .encode(to_node);
        }
    }
    closed
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::rwf::container::{
        filter_action, map_action, ElementListWriter, FilterListWriter, MapWriter,
    };
    use crate::rwf::msg::{self, class, domain, RwfState};
    use crate::rwf::primitive::dt;

    /// One GROUP filter entry: the group, the group it merges into, its new state
    /// (stream state, data state).
    pub(crate) type GroupNews<'a> = (&'a [u8], Option<&'a [u8]>, Option<(u8, u8)>);

    /// A provider's directory update on its `stream` with GROUP filter entries for
    /// `service`.
    pub(crate) fn group_update(stream: i32, service: u8, news: &[GroupNews<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        let w = msg::MsgWriter::begin(&mut out, class::UPDATE, domain::SOURCE, stream, 0, dt::MAP);
        out.push(0); // update type: unspecified
        w.end_header(&mut out);
        let mut map = MapWriter::begin(&mut out, dt::UINT, dt::FILTER_LIST);
        map.entry(&mut out, map_action::UPDATE, &[service], |o| {
            let mut fl = FilterListWriter::begin(o, dt::ELEMENT_LIST);
            for &(group, merged_to, state) in news {
                fl.entry(o, filter_action::SET, 3, |o| {
                    let mut el = ElementListWriter::begin(o);
                    el.element(o, "Group", dt::BUFFER, |o| o.extend_from_slice(group));
                    if let Some(to) = merged_to {
                        el.element(o, "MergedToGroup", dt::BUFFER, |o| o.extend_from_slice(to));
                    }
                    if let Some((st, data)) = state {
                        el.element(o, "Status", dt::STATE, |o| {
                            RwfState::new(st, data, msg::code::NONE, "group news").encode(o)
                        });
                    }
                    el.end(o);
                });
            }
            fl.end(o);
        });
        map.end(&mut out);
        out
    }
}
