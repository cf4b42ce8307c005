//! A provider's Source Directory: the services in a directory refresh or update's map
//! (keyed by service id), with the name from their INFO filter and the state from
//! their STATE filter when the message carries them.

use crate::rwf::container::{map_action, ElementIter, FilterIter, MapIter};
use crate::rwf::primitive;
use crate::rwf::RwfError;
use tickwire_proto::{Directory, Message, ServiceEntry, ServiceState};

/// Directory filter ids.
const FILTER_INFO: u8 = 1;
const FILTER_STATE: u8 = 2;

/// One service as a directory message gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceInfo {
    /// The service id.
    pub id: u16,
    /// The INFO filter's `Name`, when the message has it.
    pub name: Option<String>,
    /// The STATE filter's `ServiceState` (1: up), when the message has it.
    pub up: Option<bool>,
    /// The map entry deletes the service.
    pub deleted: bool,
}

impl ServiceInfo {
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
    /// taken as up; a known one keeps its state (None: nothing to tell).
    pub fn state_to_tell(&self, known: bool) -> Option<ServiceState> {
        match self.state() {
            None if known => None,
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
pub fn services(map: &[u8]) -> Result<Vec<ServiceInfo>, RwfError> {
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
        };
        if !s.deleted {
            for filter in FilterIter::new(value)? {
                let (_, filter, body) = filter?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn info(up: Option<bool>, deleted: bool) -> ServiceInfo {
        ServiceInfo {
            id: 7,
            name: None,
            up,
            deleted,
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
}
