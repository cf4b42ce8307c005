//! Item groups: a provider puts each item in a group (its refresh's group id, or a
//! status that moves it), and its Source Directory's GROUP filter then speaks of whole
//! groups at once: a state for every item of a group, or a group merged into another.
//! Used by both kinds of provider: the interactive ones the node connects to
//! (`provider_link`) and the non-interactive ones that connect to the node
//! (`session::provider`), each keying its items by the provider's stream id.
//!
//! The groups are indexed, so that a message's news costs what it changes, not the
//! number of items: a state is noted on the group (one status per item comes out at the
//! end of the message, the same as if the provider had sent each), a merge moves the
//! smaller group's items into the larger (an item moves only into a group at least
//! twice the size it left), a closing state detaches its group at once. A state the
//! group already has, with no item come or changed since (nor its service by the
//! node), is not news: it reaches no item (a provider repeating its group's state
//! costs nothing).

use crate::directory::{GroupChange, ServiceInfo};
use crate::provided_items::ProvidedItems;
use crate::rwf::msg::{stream, RwfState};
use crate::session::ProvidedItem;
use rustc_hash::FxHashMap;
use tickwire_proto::{Message, ServiceState, Status, StreamState};

/// An item's place: its group's slot, its place in the slot's list, and when it joined
/// (a state noted on the group before that is not its own).
#[derive(Debug, Clone, Copy)]
struct Member {
    slot: u32,
    pos: u32,
    joined: u64,
}

#[derive(Debug, Default)]
struct Slot {
    service: u16,
    group: Box<[u8]>,
    /// The provider's stream ids of its items.
    members: Vec<i32>,
    /// The last state given to every item of the group, and when.
    applied: Option<(OwnedState, u64)>,
    /// When an item last came into the group, or had a state of its own (a refresh or
    /// a status): after `applied`, some item may not have that state.
    changed: u64,
}

/// A state kept past its message.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OwnedState {
    stream: u8,
    data: u8,
    code: u8,
    text: Box<[u8]>,
}

impl OwnedState {
    fn of(s: &RwfState<'_>) -> Self {
        OwnedState {
            stream: s.stream,
            data: s.data,
            code: s.code,
            text: s.text.into(),
        }
    }

    fn is(&self, s: &RwfState<'_>) -> bool {
        (self.stream, self.data, self.code) == (s.stream, s.data, s.code) && *self.text == *s.text
    }
}

/// Every item's group, indexed both ways (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct ItemGroups {
    items: FxHashMap<i32, Member>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    by_key: FxHashMap<u16, FxHashMap<Box<[u8]>, u32>>,
    /// When the node last changed a service's items on its own (the service went down
    /// or up, the provider's directory closed): a group state given before then may no
    /// longer be its items'.
    services_changed: FxHashMap<u16, u64>,
    /// Each service's state as last told to the node.
    services_told: FxHashMap<u16, ServiceState>,
    /// Counts changes applied, to order states and joins.
    stamp: u64,
    /// Items moved by merges (what a merge costs).
    #[cfg(test)]
    moved: u64,
}

/// A state noted at a stamp.
type Noted<'a> = (u64, RwfState<'a>);

impl ItemGroups {
    /// The item on the provider's stream `item` had a refresh or a status: it is in
    /// `group` of `service` now when the message names one, and its state is its own.
    pub(crate) fn set(&mut self, item: i32, service: u16, group: Option<&[u8]>) {
        if let Some(m) = self.items.get(&item) {
            let s = &mut self.slots[m.slot as usize];
            s.changed = self.stamp;
            if group.is_none_or(|g| s.service == service && *s.group == *g) {
                return;
            }
        }
        let Some(group) = group else { return };
        self.remove(item);
        let slot = self.slot_of(service, group);
        let joined = self.stamp;
        self.join(item, slot, joined);
    }

    /// The item is gone (closed by either side).
    pub(crate) fn remove(&mut self, item: i32) {
        let Some(m) = self.items.remove(&item) else {
            return;
        };
        let members = &mut self.slots[m.slot as usize].members;
        members.swap_remove(m.pos as usize);
        if let Some(&moved) = members.get(m.pos as usize) {
            if let Some(mm) = self.items.get_mut(&moved) {
                mm.pos = m.pos;
            }
        }
        if members.is_empty() {
            self.free_slot(m.slot);
        }
    }

    /// The node was told `service` is in `state`: where that changes it, the node
    /// changed the service's items on its own (their state follows the service's), and
    /// the next group state is news for them, whatever was given before. True where it
    /// changes it.
    pub(crate) fn service_told(&mut self, service: u16, state: ServiceState) -> bool {
        let changed = self
            .services_told
            .insert(service, state)
            .is_some_and(|was| was != state);
        if changed {
            self.service_changed(service);
        }
        changed
    }

    /// The state the node was last told of `service`.
    pub(crate) fn told(&self, service: u16) -> Option<ServiceState> {
        self.services_told.get(&service).copied()
    }

    /// The node changed the items of `service` on its own (the provider's directory
    /// closed, its services down, a state for all its items): as
    /// [`ItemGroups::service_told`] with a change.
    pub(crate) fn service_changed(&mut self, service: u16) {
        self.stamp += 1;
        self.services_changed.insert(service, self.stamp);
    }

    /// Every item gone (the connection).
    pub(crate) fn clear(&mut self) {
        let stamp = self.stamp;
        *self = ItemGroups::default();
        self.stamp = stamp;
    }

    fn slot_of(&mut self, service: u16, group: &[u8]) -> u32 {
        if let Some(&slot) = self.by_key.get(&service).and_then(|g| g.get(group)) {
            return slot;
        }
        let new = Slot {
            service,
            group: group.into(),
            ..Slot::default()
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = new;
                s
            }
            None => {
                self.slots.push(new);
                (self.slots.len() - 1) as u32
            }
        };
        self.by_key
            .entry(service)
            .or_default()
            .insert(group.into(), slot);
        slot
    }

    fn join(&mut self, item: i32, slot: u32, joined: u64) {
        let s = &mut self.slots[slot as usize];
        s.changed = s.changed.max(joined);
        let members = &mut s.members;
        let pos = members.len() as u32;
        members.push(item);
        self.items.insert(item, Member { slot, pos, joined });
    }

    fn free_slot(&mut self, slot: u32) {
        let s = std::mem::take(&mut self.slots[slot as usize]);
        if let Some(groups) = self.by_key.get_mut(&s.service) {
            groups.remove(&s.group);
            if groups.is_empty() {
                self.by_key.remove(&s.service);
            }
        }
        self.free.push(slot);
    }

    /// Applies `changes` (in the message's order): returns each item's new state, one
    /// at most an item, as if the provider had sent it a status. An item whose state
    /// closes its stream has left the index; the caller forgets it too.
    pub(crate) fn apply<'a>(
        &mut self,
        changes: &[(u16, GroupChange<'a>)],
    ) -> Vec<(i32, RwfState<'a>)> {
        // States noted on groups (slot: the last one) and on items that moved away
        // from a group with one.
        let mut on_groups: FxHashMap<u32, Noted<'a>> = FxHashMap::default();
        let mut on_items: FxHashMap<i32, Noted<'a>> = FxHashMap::default();
        let mut out = Vec::new();
        for (service, c) in changes {
            self.stamp += 1;
            let now = self.stamp;
            let Some(&slot) = self.by_key.get(service).and_then(|g| g.get(c.group)) else {
                continue;
            };
            if let Some(state) = c.state {
                if state.stream != stream::OPEN {
                    // Closed: its items leave now, whatever comes after.
                    on_groups.remove(&slot);
                    for item in std::mem::take(&mut self.slots[slot as usize].members) {
                        self.items.remove(&item);
                        on_items.remove(&item);
                        out.push((item, state));
                    }
                    self.free_slot(slot);
                    continue;
                }
                let s = &self.slots[slot as usize];
                let since = self.services_changed.get(service).copied().unwrap_or(0);
                let known = s
                    .applied
                    .as_ref()
                    .is_some_and(|(a, at)| a.is(&state) && s.changed.max(since) < *at);
                if known {
                    // Every item has it: only a state noted earlier in this message
                    // would be undone, and that one is dropped as the later wins.
                    on_groups.remove(&slot);
                } else {
                    on_groups.insert(slot, (now, state));
                }
            }
            if let Some(to) = c.merged_to {
                self.merge(slot, *service, to, now, &mut on_groups, &mut on_items);
            }
        }
        for (slot, (at, state)) in on_groups {
            let s = &mut self.slots[slot as usize];
            s.applied = Some((OwnedState::of(&state), at));
            let members = &s.members;
            out.reserve(members.len());
            for &item in members {
                // Most messages move no item: nothing of its own to look up then.
                let own = match on_items.is_empty() {
                    true => None,
                    false => on_items.remove(&item),
                };
                let joined = self.items.get(&item).map_or(0, |m| m.joined);
                let group = (joined < at).then_some((at, state));
                if let Some((_, s)) = later(own, group) {
                    out.push((item, s));
                }
            }
        }
        out.extend(on_items.into_iter().map(|(item, (_, s))| (item, s)));
        out
    }

    /// Applies `changes` and writes each item's status for the node: `items` holds
    /// the items served (an item not there is skipped), and loses those whose stream
    /// the news closes; `closed(item)` is told of each of those.
    pub(crate) fn apply_to_node(
        &mut self,
        changes: &[(u16, GroupChange<'_>)],
        to_node: &mut Vec<u8>,
        items: &mut ProvidedItems,
        mut closed: impl FnMut(&ProvidedItem),
    ) {
        for (id, state) in self.apply(changes) {
            let Some(item) = items.get_mut(&id) else {
                continue;
            };
            let state = item.state(&state);
            let stream_id = item.native;
            if state.stream != StreamState::Open {
                if let Some(item) = items.remove(&id) {
                    closed(&item);
                }
            }
            let _ = Message::Status(Status { stream_id, state }).encode(to_node);
        }
    }

    /// Moves the items of `slot` into `to` of the same service: the smaller group's
    /// items move, each taking the state noted on the group it leaves.
    fn merge<'a>(
        &mut self,
        slot: u32,
        service: u16,
        to: &[u8],
        now: u64,
        on_groups: &mut FxHashMap<u32, Noted<'a>>,
        on_items: &mut FxHashMap<i32, Noted<'a>>,
    ) {
        let target = self.slot_of(service, to);
        if target == slot {
            return;
        }
        let (stays, goes) = if self.slots[slot as usize].members.len()
            > self.slots[target as usize].members.len()
        {
            (slot, target)
        } else {
            (target, slot)
        };
        let noted = on_groups.remove(&goes);
        for item in std::mem::take(&mut self.slots[goes as usize].members) {
            let joined = self.items.get(&item).map_or(0, |m| m.joined);
            if let Some(n) = noted.filter(|&(at, _)| joined < at) {
                let own = on_items.remove(&item);
                if let Some(l) = later(own, Some(n)) {
                    on_items.insert(item, l);
                }
            }
            self.join(item, stays, now);
            #[cfg(test)]
            {
                self.moved += 1;
            }
        }
        if stays == slot {
            // The larger group takes the name it merged into.
            self.free_slot(goes);
            let key: Box<[u8]> = to.into();
            let old = std::mem::replace(&mut self.slots[slot as usize].group, key.clone());
            let groups = self.by_key.entry(service).or_default();
            groups.remove(&old);
            groups.insert(key, slot);
        } else {
            self.free_slot(goes);
        }
    }
}

/// The later of two noted states.
fn later<'a>(a: Option<Noted<'a>>, b: Option<Noted<'a>>) -> Option<Noted<'a>> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if x.0 >= y.0 { x } else { y }),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Every service's group news of one directory message, in order.
pub(crate) fn news<'a>(entries: &[ServiceInfo<'a>]) -> Vec<(u16, GroupChange<'a>)> {
    entries
        .iter()
        .flat_map(|e| e.groups.iter().map(|g| (e.id, g.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::rwf::msg::RwfState;

    use super::{GroupChange, ItemGroups};
    use crate::rwf::msg::{data, stream as st};

    fn change<'a>(
        group: &'a [u8],
        merged_to: Option<&'a [u8]>,
        state: Option<(u8, u8)>,
    ) -> (u16, GroupChange<'a>) {
        let state = state.map(|(s, d)| RwfState::new(s, d, 0, ""));
        (
            7,
            GroupChange {
                group,
                merged_to,
                state,
            },
        )
    }

    /// What `apply` said, sorted: (item, stream state, data state).
    fn said(g: &mut ItemGroups, changes: &[(u16, GroupChange<'_>)]) -> Vec<(i32, u8, u8)> {
        let mut out: Vec<_> = g
            .apply(changes)
            .into_iter()
            .map(|(i, s)| (i, s.stream, s.data))
            .collect();
        out.sort();
        out
    }

    const SUSPECT: Option<(u8, u8)> = Some((st::OPEN, data::SUSPECT));
    const OK: Option<(u8, u8)> = Some((st::OPEN, data::OK));
    const CLOSED: Option<(u8, u8)> = Some((st::CLOSED_RECOVER, data::SUSPECT));

    #[test]
    fn states_and_merges_follow_the_messages_order_each_item_hearing_once() {
        let mut g = ItemGroups::default();
        for (item, group) in [(1, 1u8), (2, 1), (3, 2), (4, 3)] {
            g.set(item, 7, Some(&[group]));
        }
        g.set(9, 8, Some(&[1])); // another service's group 1
                                 // Group 1 suspect, then merged into 2, then 2 ok: 1 and 2 end ok, 3 ok; group
                                 // 3 suspect alone; the other service's group 1 hears nothing.
        let got = said(
            &mut g,
            &[
                change(&[1], None, SUSPECT),
                change(&[1], Some(&[2]), None),
                change(&[2], None, OK),
                change(&[3], None, SUSPECT),
            ],
        );
        assert_eq!(
            got,
            [
                (1, st::OPEN, data::OK),
                (2, st::OPEN, data::OK),
                (3, st::OPEN, data::OK),
                (4, st::OPEN, data::SUSPECT)
            ]
        );
        // Group 2 (now 1, 2 and 3) suspect, then merged into 3: those keep suspect;
        // group 3's ok before the merge is 4's alone.
        let got = said(
            &mut g,
            &[
                change(&[3], None, OK),
                change(&[2], None, SUSPECT),
                change(&[2], Some(&[3]), None),
            ],
        );
        assert_eq!(
            got,
            [
                (1, st::OPEN, data::SUSPECT),
                (2, st::OPEN, data::SUSPECT),
                (3, st::OPEN, data::SUSPECT),
                (4, st::OPEN, data::OK)
            ]
        );
        // All four are in group 3 now; a closing state takes them out for good: the
        // news after it in the same message and in the next do not reach them.
        let got = said(
            &mut g,
            &[change(&[3], None, CLOSED), change(&[3], None, OK)],
        );
        assert_eq!(got.len(), 4);
        assert!(
            got.iter().all(|&(_, s, _)| s == st::CLOSED_RECOVER),
            "{got:?}"
        );
        assert!(said(&mut g, &[change(&[3], None, OK)]).is_empty());
        assert_eq!(
            said(
                &mut g,
                &[(
                    8,
                    GroupChange {
                        group: &[1],
                        merged_to: None,
                        state: OK.map(|(s, d)| RwfState::new(s, d, 0, ""))
                    }
                )]
            ),
            [(9, st::OPEN, data::OK)]
        );
    }

    #[test]
    fn items_leave_and_change_groups_and_the_index_follows() {
        let mut g = ItemGroups::default();
        for item in 0..1000 {
            g.set(item, 7, Some(&[(item % 3) as u8]));
        }
        // Every even item leaves; every fifth moves to group 9.
        for item in (0..1000).step_by(2) {
            g.remove(item);
        }
        for item in (0..1000).step_by(5) {
            g.set(item, 7, Some(&[9]));
        }
        let got: Vec<i32> = said(&mut g, &[change(&[1], None, SUSPECT)])
            .into_iter()
            .map(|(i, ..)| i)
            .collect();
        let want: Vec<i32> = (0..1000)
            .filter(|i| i % 3 == 1 && i % 2 == 1 && i % 5 != 0)
            .collect();
        assert_eq!(got, want);
        let got: Vec<i32> = said(&mut g, &[change(&[9], None, SUSPECT)])
            .into_iter()
            .map(|(i, ..)| i)
            .collect();
        assert_eq!(got, (0..1000).step_by(5).collect::<Vec<_>>());
        g.clear();
        assert!(said(&mut g, &[change(&[9], None, SUSPECT)]).is_empty());
    }

    #[test]
    fn a_merge_moves_the_smaller_groups_items_only() {
        let mut g = ItemGroups::default();
        for item in 0..100_000 {
            g.set(item, 7, Some(&[0]));
        }
        g.set(-1, 7, Some(&[1]));
        // Merged back and forth 64 times in one message, the large group never moves.
        let mut news = Vec::new();
        for _ in 0..32 {
            news.push(change(&[0], Some(&[1]), None));
            news.push(change(&[1], Some(&[0]), None));
        }
        news.push(change(&[0], None, SUSPECT));
        assert_eq!(g.apply(&news).len(), 100_001);
        assert!(g.moved <= 64, "{} items moved", g.moved);
    }
}

/// The index against a naive model of the same rules (each entry applied to every item
/// in turn), over random items, groups and news, checking the index's own invariants
/// after every message.
#[cfg(test)]
mod model_tests {
    use super::{GroupChange, ItemGroups};
    use crate::rwf::msg::{data, stream as st, RwfState};
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const GROUPS: [&[u8]; 5] = [b"a", b"b", b"c", b"d", b""];
    const STATES: [(u8, u8); 4] = [
        (st::OPEN, data::OK),
        (st::OPEN, data::SUSPECT),
        (st::CLOSED_RECOVER, data::SUSPECT),
        (st::NON_STREAMING, data::OK),
    ];

    /// Each item's (service, group), news applied entry by entry to every item.
    #[derive(Default)]
    struct Model {
        items: BTreeMap<i32, (u16, Vec<u8>)>,
    }

    impl Model {
        /// Each item's last state: (item, stream state, data state, code).
        fn apply(&mut self, changes: &[(u16, GroupChange<'_>)]) -> Vec<(i32, u8, u8, u8)> {
            let mut last: BTreeMap<i32, (u8, u8, u8)> = BTreeMap::new();
            for (service, c) in changes {
                let members: Vec<i32> = self
                    .items
                    .iter()
                    .filter(|(_, (s, g))| s == service && g[..] == *c.group)
                    .map(|(&i, _)| i)
                    .collect();
                if let Some(s) = c.state {
                    for &m in &members {
                        last.insert(m, (s.stream, s.data, s.code));
                        if s.stream != st::OPEN {
                            self.items.remove(&m);
                        }
                    }
                    if s.stream != st::OPEN {
                        continue;
                    }
                }
                if let Some(to) = c.merged_to {
                    for m in &members {
                        if let Some(item) = self.items.get_mut(m) {
                            item.1 = to.to_vec();
                        }
                    }
                }
            }
            last.into_iter()
                .map(|(i, (a, b, c))| (i, a, b, c))
                .collect()
        }
    }

    /// Every item where its slot says, every named slot holding items, freed ones empty.
    fn check_index(g: &ItemGroups) {
        for (&item, m) in &g.items {
            let s = &g.slots[m.slot as usize];
            assert_eq!(s.members[m.pos as usize], item, "the place of {item}");
            assert_eq!(g.by_key[&s.service][&s.group], m.slot);
        }
        let mut n = 0;
        for (service, groups) in &g.by_key {
            assert!(!groups.is_empty());
            for (name, &slot) in groups {
                let s = &g.slots[slot as usize];
                assert_eq!((s.service, &s.group), (*service, name));
                assert!(!s.members.is_empty(), "an empty slot is named");
                assert!(!g.free.contains(&slot));
                n += s.members.len();
            }
        }
        assert_eq!(n, g.items.len());
        for &f in &g.free {
            assert!(g.slots[f as usize].members.is_empty());
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Set(i32, u16, usize),
        Remove(i32),
        Clear,
    }

    /// One entry: service, group, merged into, state (an index into `STATES`).
    type Entry = (u16, usize, Option<usize>, Option<usize>);

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (0..40i32, 7..9u16, 0..5usize).prop_map(|(i, s, g)| Op::Set(i, s, g)),
            2 => (0..40i32).prop_map(Op::Remove),
            1 => Just(Op::Clear),
        ]
    }

    fn entry() -> impl Strategy<Value = Entry> {
        (
            prop_oneof![4 => Just(7u16), 1 => Just(8u16)],
            0..5usize,
            proptest::option::of(0..5usize),
            proptest::option::of(0..4usize),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]
        #[test]
        fn the_index_agrees_with_a_naive_model(
            rounds in proptest::collection::vec(
                (proptest::collection::vec(op(), 0..10), proptest::collection::vec(entry(), 0..14)),
                1..6,
            )
        ) {
            let mut g = ItemGroups::default();
            let mut m = Model::default();
            // What each item heard last from its group's news (the index's statuses,
            // which the model's must then agree with); none after a state of its own.
            let mut heard: BTreeMap<i32, (u8, u8, u8)> = BTreeMap::new();
            for (ops, entries) in rounds {
                for op in ops {
                    match op {
                        Op::Set(item, service, group) => {
                            g.set(item, service, Some(GROUPS[group]));
                            m.items.insert(item, (service, GROUPS[group].to_vec()));
                            heard.remove(&item);
                        }
                        Op::Remove(item) => {
                            g.remove(item);
                            m.items.remove(&item);
                            heard.remove(&item);
                        }
                        Op::Clear => {
                            g.clear();
                            m.items.clear();
                            heard.clear();
                        }
                    }
                }
                // Each entry's state carries the entry's place as its code: which
                // entry an item's state came from shows.
                let changes: Vec<(u16, GroupChange<'_>)> = entries
                    .iter()
                    .enumerate()
                    .map(|(k, &(service, group, to, state))| {
                        let state = state.map(|s| RwfState::new(STATES[s].0, STATES[s].1, k as u8, ""));
                        let merged_to = to.map(|t| GROUPS[t]);
                        (service, GroupChange { group: GROUPS[group], merged_to, state })
                    })
                    .collect();
                // The same message twice: the second time its states are mostly known,
                // but for an item that had a refresh of its own in between.
                for pass in 0..2 {
                    if pass == 1 {
                        if let Some((&i, (service, group))) = m.items.iter().next() {
                            g.set(i, *service, Some(group));
                            heard.remove(&i);
                        }
                    }
                    let got: BTreeMap<i32, (u8, u8, u8)> = g
                        .apply(&changes)
                        .into_iter()
                        .map(|(i, s)| (i, (s.stream, s.data, s.code)))
                        .collect();
                    let want: BTreeMap<i32, (u8, u8, u8)> = m
                        .apply(&changes)
                        .into_iter()
                        .map(|(i, a, b, c)| (i, (a, b, c)))
                        .collect();
                    // Every status the index gives is the model's; one it leaves out,
                    // the item has already.
                    for (i, s) in &got {
                        prop_assert_eq!(want.get(i), Some(s), "item {}", i);
                    }
                    for (i, s) in &want {
                        if !got.contains_key(i) {
                            prop_assert_eq!(heard.get(i), Some(s), "item {} left without news", i);
                        }
                    }
                    for (i, s) in want {
                        match m.items.contains_key(&i) {
                            true => heard.insert(i, s),
                            false => heard.remove(&i),
                        };
                    }
                    check_index(&g);
                    for (&i, place) in &g.items {
                        let s = &g.slots[place.slot as usize];
                        prop_assert_eq!(m.items.get(&i), Some(&(s.service, s.group.to_vec())));
                    }
                    prop_assert_eq!(g.items.len(), m.items.len());
                }
            }
        }
    }
}
