//! A provider's Source Directory: the services in a directory refresh or update's map
//! (keyed by service id), with the name from their INFO filter, the state from their
//! STATE filter and the item groups' news from their GROUP filters when the message
//! carries them.

use crate::rwf::container::{map_action, ElementIter, FilterIter, MapIter};
use crate::rwf::msg::RwfState;
use crate::rwf::primitive::{self, dt};
use crate::rwf::RwfError;
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
