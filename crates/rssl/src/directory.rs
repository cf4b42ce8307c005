//! A provider's Source Directory: the services in a directory refresh or update's map
//! (keyed by service id), with the name from their INFO filter and the state from
//! their STATE filter when the message carries them.

use crate::rwf::container::{map_action, ElementIter, FilterIter, MapIter};
use crate::rwf::primitive;
use crate::rwf::RwfError;

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
