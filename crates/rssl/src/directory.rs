//! A provider's Source Directory: the services in a directory refresh or update's map
//! (keyed by service id), with the name from their INFO filter, the state from their
//! STATE filter and the item groups' news from their GROUP filters when the message
//! carries them.

use crate::rwf::container::{map_action, ElementIter, FilterIter, MapIter};
use crate::rwf::msg::{class, refresh, Msg, RwfState};
use crate::rwf::primitive::{self, dt};
use crate::rwf::RwfError;
use rustc_hash::{FxHashMap, FxHashSet};
use tickwire_proto::{Directory, Message, ServiceEntry, ServiceState};

/// Directory filter ids.
const FILTER_INFO: u8 = 1;
const FILTER_STATE: u8 = 2;
const FILTER_GROUP: u8 = 3;

/// One GROUP filter entry: news of an item group of the service (RDM: `Group`, and
/// `MergedToGroup` or `Status` or both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupChange<'a> {
    /// The group the news is about (an item's group id, from its refresh or status).
    pub group: &'a [u8],
    /// Its items now belong to this group.
    pub merged_to: Option<&'a [u8]>,
    /// Every item of the group has this state now.
    pub state: Option<RwfState<'a>>,
}

/// One service as a directory message gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceInfo<'a> {
    /// The service id.
    pub id: u16,
    /// The INFO filter's `Name`, when the message has it.
    pub name: Option<String>,
    /// The STATE filter's `ServiceState` (1: up), when the message has it.
    pub up: Option<bool>,
    /// The STATE filter's `Status`: a state for every item of the service (None when
    /// absent or blank).
    pub status: Option<RwfState<'a>>,
    /// The map entry deletes the service.
    pub deleted: bool,
    /// The map entry adds the service (every refresh's entries, and a service back
    /// after its deletion): it describes the service in full.
    pub added: bool,
    /// Its GROUP filter entries, in the message's order.
    pub groups: Vec<GroupChange<'a>>,
}

impl ServiceInfo<'_> {
    /// The state the message gives the service: down once deleted or said to be down,
    /// up when said to be up; None when it says nothing of it (an update of its load or
    /// its groups alone), so the last state known stands.
    pub fn state(&self) -> Option<ServiceState> {
        if self.deleted || self.up == Some(false) {
            Some(ServiceState::Down)
        } else {
            self.up.map(|_| ServiceState::Up)
        }
    }

    /// The state the node is told of a service: a new one whose state is not given is
    /// taken as up, and so is one added anew (a deleted service's id may come back
    /// without a STATE filter); a known one updated keeps its state (None: nothing to
    /// tell).
    pub fn state_to_tell(&self, known: bool) -> Option<ServiceState> {
        match self.state() {
            None if known && !self.added => None,
            None => Some(ServiceState::Up),
            said => said,
        }
    }
}

/// Most services one provider may announce: those past it are left out (the node's own
/// limits apply behind this).
pub const MAX_PROVIDER_SERVICES: usize = 1024;

/// A provider's services as its directory messages gave them, for both kinds of
/// provider: their names by the provider's ids, and back.
#[derive(Debug, Default)]
pub(crate) struct ProviderServices {
    names: FxHashMap<u16, String>,
    ids: FxHashMap<String, u16>,
    /// While a directory refresh that clears the cache comes in: the services known
    /// when it began that it has not listed yet (those its last part leaves out are
    /// gone).
    stale: Option<FxHashSet<u16>>,
    /// Services left out at [`MAX_PROVIDER_SERVICES`] (the node logs it).
    pub(crate) refused: u64,
}

/// What a directory message changed: what the node is to be told, by id, and the ids
/// whose name went (renamed, deleted or left out): their items are no longer what
/// their streams were opened for.
#[derive(Debug, Default)]
pub(crate) struct DirectoryNews {
    pub(crate) told: Vec<(u16, String, ServiceState)>,
    pub(crate) gone: FxHashSet<u16>,
    /// Names no service of the provider's has any more (deleted, or left out of a
    /// whole directory): the node lets go of them.
    pub(crate) released: Vec<String>,
}

impl ProviderServices {
    /// The name of the provider's service `id`.
    pub(crate) fn name(&self, id: u16) -> Option<&str> {
        self.names.get(&id).map(String::as_str)
    }

    /// The provider's id of the service `name`.
    pub(crate) fn id(&self, name: &str) -> Option<u16> {
        self.ids.get(name).copied()
    }

    /// Whether it has no service.
    pub(crate) fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Every service: its id and name.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u16, &str)> {
        self.names.iter().map(|(&id, name)| (id, name.as_str()))
    }

    /// Every service forgotten (the connection is gone).
    pub(crate) fn clear(&mut self) {
        self.names.clear();
        self.ids.clear();
        self.stale = None;
    }

    /// The services that count toward [`MAX_PROVIDER_SERVICES`]: while a whole
    /// directory comes in, not the old ones it has yet to list (it replaces them).
    fn counted(&self) -> usize {
        self.names.len() - self.stale.as_ref().map_or(0, |s| s.len())
    }

    /// Takes in a directory message `m` whose services are `entries`. A renamed
    /// service is down under its old name; a deleted one is down and forgotten; a
    /// refresh that clears the cache is the whole directory, and once complete the
    /// services it left out are down and forgotten. `told` gives the state the node
    /// was last told of a service, given again under its new name.
    pub(crate) fn apply(
        &mut self,
        m: &Msg<'_>,
        entries: &[ServiceInfo<'_>],
        told: impl Fn(u16) -> Option<ServiceState>,
    ) -> DirectoryNews {
        let is_refresh = m.class == class::REFRESH;
        if is_refresh && m.flags & refresh::CLEAR_CACHE != 0 {
            self.stale = Some(self.names.keys().copied().collect());
        }
        let mut news = DirectoryNews::default();
        for e in entries {
            // Only the refresh lists a service (an update in between does not).
            if let (true, Some(stale)) = (is_refresh, &mut self.stale) {
                stale.remove(&e.id);
            }
            if e.deleted {
                self.forget(e.id, &mut news);
                continue;
            }
            let known = self.names.contains_key(&e.id);
            let Some(name) = e.name.clone().or_else(|| self.names.get(&e.id).cloned()) else {
                continue;
            };
            // The old services a whole directory replaces are kept besides its own
            // until it completes: never more than twice the most.
            let full = self.counted() >= MAX_PROVIDER_SERVICES
                || self.names.len() >= 2 * MAX_PROVIDER_SERVICES;
            if !known && full {
                self.refused += 1;
                continue;
            }
            let mut state = e.state_to_tell(known);
            if let Some(old) = self.names.insert(e.id, name.clone()) {
                if old != name {
                    // Renamed: the new name is new to the node.
                    self.name_gone(e.id, old, &mut news);
                    state = state.or(told(e.id)).or(Some(ServiceState::Up));
                }
            }
            self.ids.insert(name.clone(), e.id);
            if let Some(state) = state {
                news.told.push((e.id, name, state));
            }
        }
        if is_refresh && m.flags & refresh::REFRESH_COMPLETE != 0 {
            for id in self.stale.take().unwrap_or_default() {
                self.forget(id, &mut news);
            }
        }
        news
    }

    /// The service `id` is gone: down and forgotten, its place under the cap free.
    fn forget(&mut self, id: u16, news: &mut DirectoryNews) {
        if let Some(stale) = &mut self.stale {
            stale.remove(&id);
        }
        if let Some(name) = self.names.remove(&id) {
            self.name_gone(id, name, news);
        }
    }

    /// `name` is no longer the service `id`'s: its items go, and the name is down at
    /// the node unless another of the provider's services has taken it.
    fn name_gone(&mut self, id: u16, name: String, news: &mut DirectoryNews) {
        news.gone.insert(id);
        if self.ids.get(&name) == Some(&id) {
            self.ids.remove(&name);
            news.released.push(name.clone());
            news.told.push((id, name, ServiceState::Down));
        }
    }
}

/// Tells the node the state of services a provider publishes, with no item counts
/// (the node keeps its own); `interactive`: the node may ask for their items.
pub(crate) fn encode_node_directory<'a>(
    services: impl IntoIterator<Item = (&'a str, ServiceState)>,
    interactive: bool,
    to_node: &mut Vec<u8>,
) {
    let services = services
        .into_iter()
        .map(|(name, state)| ServiceEntry {
            name,
            state,
            interactive,
            item_count: 0,
        })
        .collect();
    let _ = Message::Directory(Directory { services }).encode(to_node);
}

/// The services of a directory message's map.
pub fn services(map: &[u8]) -> Result<Vec<ServiceInfo<'_>>, RwfError> {
    let mut out = Vec::new();
    for entry in MapIter::new(map)? {
        let (action, key, value) = entry?;
        let Some(id) = primitive::uint(key)? else {
            continue;
        };
        let mut s = ServiceInfo {
            id: id.min(u16::MAX as u64) as u16,
            name: None,
            up: None,
            status: None,
            deleted: action == map_action::DELETE,
            added: action == map_action::ADD,
            groups: Vec::new(),
        };
        if !s.deleted {
            for filter in FilterIter::new(value)? {
                let (_, filter, body) = filter?;
                if filter == FILTER_GROUP {
                    s.groups.extend(group_change(body)?);
                    continue;
                }
                for el in ElementIter::new(body)? {
                    let el = el?;
                    match (filter, el.name) {
                        (FILTER_INFO, b"Name") => {
                            s.name = el.text().map(|t| String::from_utf8_lossy(t).into_owned())
                        }
                        (FILTER_STATE, b"ServiceState") => s.up = el.uint().map(|v| v == 1),
                        (FILTER_STATE, b"Status") if el.data_type == dt::STATE => {
                            s.status = RwfState::from_value(el.value).ok()
                        }
                        _ => {}
                    }
                }
            }
        }
        out.push(s);
    }
    Ok(out)
}

/// A GROUP filter entry's elements; None without a `Group` (nothing to apply it to). A
/// `Status` that is blank (or not a state) is taken as absent: the rest of the entry,
/// and of the message, still counts.
fn group_change(body: &[u8]) -> Result<Option<GroupChange<'_>>, RwfError> {
    let mut group = None;
    let mut merged_to = None;
    let mut state = None;
    for el in ElementIter::new(body)? {
        let el = el?;
        match el.name {
            b"Group" => group = el.text(),
            b"MergedToGroup" => merged_to = el.text(),
            b"Status" if el.data_type == dt::STATE => state = RwfState::from_value(el.value).ok(),
            _ => {}
        }
    }
    Ok(group.map(|group| GroupChange {
        group,
        merged_to,
        state,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(up: Option<bool>, deleted: bool) -> ServiceInfo<'static> {
        ServiceInfo {
            id: 7,
            name: None,
            up,
            status: None,
            deleted,
            added: false,
            groups: Vec::new(),
        }
    }

    #[test]
    fn a_message_that_says_nothing_of_a_known_services_state_leaves_it() {
        assert_eq!(info(None, false).state_to_tell(true), None);
        assert_eq!(
            info(None, false).state_to_tell(false),
            Some(ServiceState::Up)
        );
        assert_eq!(
            info(Some(false), false).state_to_tell(true),
            Some(ServiceState::Down)
        );
        assert_eq!(
            info(Some(true), false).state_to_tell(true),
            Some(ServiceState::Up)
        );
        assert_eq!(
            info(None, true).state_to_tell(true),
            Some(ServiceState::Down)
        );
    }

    #[test]
    fn a_known_service_added_anew_without_its_state_is_up() {
        let added = ServiceInfo {
            added: true,
            ..info(None, false)
        };
        assert_eq!(added.state_to_tell(true), Some(ServiceState::Up));
        let added_down = ServiceInfo {
            added: true,
            ..info(Some(false), false)
        };
        assert_eq!(added_down.state_to_tell(true), Some(ServiceState::Down));
    }

    #[test]
    fn a_services_group_entries_are_read_in_order_and_a_blank_status_is_no_status() {
        use crate::rwf::container::{
            filter_action, ElementListWriter, FilterListWriter, MapWriter,
        };
        use crate::rwf::msg::{data, stream};
        let mut map = Vec::new();
        let mut m = MapWriter::begin(&mut map, dt::UINT, dt::FILTER_LIST);
        m.entry(&mut map, map_action::UPDATE, &[7], |o| {
            let mut fl = FilterListWriter::begin(o, dt::ELEMENT_LIST);
            // One without a Group first: nothing to apply it to.
            fl.entry(o, filter_action::SET, FILTER_GROUP, |o| {
                let mut el = ElementListWriter::begin(o);
                el.element(o, "MergedToGroup", dt::BUFFER, |o| o.push(9));
                el.end(o);
            });
            for g in 0..200u8 {
                fl.entry(o, filter_action::SET, FILTER_GROUP, |o| {
                    let mut el = ElementListWriter::begin(o);
                    el.element(o, "Group", dt::BUFFER, |o| o.push(g));
                    el.element(o, "Status", dt::STATE, |o| {
                        // Blank (no bytes) for the last one: as if absent.
                        if g < 199 {
                            RwfState::new(stream::OPEN, data::SUSPECT, 0, "down").encode(o)
                        }
                    });
                    el.end(o);
                });
            }
            // The same message says the service is down: that still counts.
            fl.entry(o, filter_action::SET, FILTER_STATE, |o| {
                let mut el = ElementListWriter::begin(o);
                el.uint(o, "ServiceState", 0);
                el.end(o);
            });
            fl.end(o);
        });
        m.end(&mut map);
        let got = services(&map).unwrap();
        let groups = &got[0].groups;
        assert_eq!(groups.len(), 200);
        assert_eq!((groups[0].group, groups[0].merged_to), (&[0][..], None));
        let state = groups[0].state.unwrap();
        assert_eq!(
            (state.stream, state.data, state.text),
            (stream::OPEN, data::SUSPECT, &b"down"[..])
        );
        assert_eq!((groups[199].group, groups[199].state), (&[199][..], None));
        assert_eq!((got[0].up, got[0].name.as_deref()), (Some(false), None));
    }
}
