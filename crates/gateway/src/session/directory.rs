//! The Source Directory over the WebSocket API, as RSSL's JSON (`tr_json2`) spells it:
//! a `Refresh` of domain `Source` whose `Map` has, per service (keyed by its numeric id:
//! its position in the session's service list, from 1), a `FilterList` with the INFO
//! (name, capabilities, QoS, dictionaries) and STATE (`ServiceState`,
//! `AcceptingRequests`) entries. A streaming request gets `Update`s as services come,
//! go up or down. ConsPerf and EMA over WebSocket start from it.

use super::{JsonOut, Session};
use serde_json::{json, Value as Json};
use tickwire_proto::ServiceState;

/// Directory filter bits: INFO and STATE.
const FILTER_INFO: u64 = 0x1;
const FILTER_STATE: u64 = 0x2;

/// Directory streams one session may hold open at once (with those asked before the
/// login was answered). RSSL lets a consumer open several (one per service, say); each
/// costs an update per change of the node's directory, so they are bounded.
pub(super) const MAX_DIRECTORY_STREAMS: usize = 16;

/// A client's open Source Directory stream.
#[derive(Debug, Clone, Copy)]
pub(super) struct DirectoryStream {
    pub(super) id: i64,
    filter: u64,
    /// The service it asked about, if it asked about one.
    only: Option<u64>,
}

impl Session {
    pub(super) fn on_directory_request(
        &mut self,
        id: i64,
        obj: &serde_json::Map<String, Json>,
        out: &mut JsonOut,
    ) {
        if self.logged_in().is_none() {
            super::json::write_refusal(
                out,
                id,
                false,
                super::code::PROTOCOL,
                "login required before any other message",
            );
            return;
        }
        let reissue = self.directories.iter().any(|d| d.id == id)
            || self.directory_asked_early.iter().any(|(d, _)| *d == id);
        if !reissue
            && self.directories.len() + self.directory_asked_early.len() >= MAX_DIRECTORY_STREAMS
        {
            super::json::write_refusal(
                out,
                id,
                false,
                super::code::TOO_MANY_STREAMS,
                &format!("at most {MAX_DIRECTORY_STREAMS} Source Directory streams may be open at once: close one first"),
            );
            return;
        }
        if matches!(self.login, super::LoginState::Pending { .. }) {
            // Answered once the login is (it may yet be refused).
            self.directory_asked_early.retain(|(d, _)| *d != id);
            self.directory_asked_early.push((id, obj.clone()));
            return;
        }
        if self.logged_in() == Some(id) {
            // A Close of it would end the login.
            super::json::write_error(
                out,
                id,
                &format!("ID {id} is the login's stream: open the directory on another"),
                "",
            );
            return;
        }
        let key = obj.get("Key");
        let filter = key
            .and_then(|k| k.get("Filter"))
            .and_then(Json::as_u64)
            .unwrap_or(0x3F);
        let only = key.and_then(|k| k.get("Service")).and_then(Json::as_u64);
        let streaming = match super::json::flag(obj, "Streaming", true) {
            Ok(s) => s,
            Err(why) => {
                super::json::write_error(out, id, &why, "");
                return;
            }
        };
        // A request on an open directory stream's ID reissues it (a snapshot on it: its
        // NonStreaming refresh ends it).
        self.directories.retain(|d| d.id != id);
        if streaming {
            self.directories.push(DirectoryStream { id, filter, only });
        }
        let entries: Vec<Json> = self
            .services
            .iter()
            .enumerate()
            .filter(|(i, _)| only.is_none_or(|s| s == *i as u64 + 1))
            .filter(|(_, name)| self.service_state(name) != ServiceState::Removed)
            .map(|(i, name)| self.directory_entry(i, name, filter, "Add"))
            .collect();
        let mut key = json!({ "Filter": filter });
        if let Some(s) = only {
            key["Service"] = json!(s);
        }
        let refresh = json!({
            "ID": id,
            "Type": "Refresh",
            "Domain": "Source",
            "Key": key,
            "State": {
                "Stream": if streaming { "Open" } else { "NonStreaming" },
                "Data": "Ok",
                "Text": "",
            },
            "Map": { "KeyType": "UInt", "Entries": entries },
        });
        out.begin()
            .extend_from_slice(refresh.to_string().as_bytes());
    }

    /// One service's map entry.
    fn directory_entry(&self, position: usize, name: &str, filter: u64, action: &str) -> Json {
        let state = self.service_state(name);
        if state == ServiceState::Removed {
            return json!({ "Action": "Delete", "Key": position + 1 });
        }
        let mut filters = Vec::new();
        // INFO with every entry: consumers replace a service's cached entry with it.
        if filter & FILTER_INFO != 0 {
            filters.push(json!({
                "ID": 1,
                "Action": "Set",
                "Elements": {
                    "Name": name,
                    "Vendor": "Tickwire",
                    "IsSource": 0,
                    "Capabilities": { "Type": "Array", "Data": { "Type": "UInt", "Data": [6] } },
                    "DictionariesUsed": {
                        "Type": "Array",
                        "Data": { "Type": "AsciiString", "Data": ["RWFFld", "RWFEnum"] },
                    },
                    "QoS": {
                        "Type": "Array",
                        "Data": { "Type": "Qos", "Data": [{ "Timeliness": "Realtime", "Rate": "TickByTick" }] },
                    },
                    "SupportsQoSRange": 0,
                    "SupportsOutOfBandSnapshots": 0,
                    "AcceptingConsumerStatus": 0,
                },
            }));
        }
        if filter & FILTER_STATE != 0 {
            let up = u8::from(state == ServiceState::Up);
            filters.push(json!({
                "ID": 2,
                "Action": "Set",
                "Elements": { "ServiceState": up, "AcceptingRequests": up },
            }));
        }
        json!({
            "Action": action,
            "Key": position + 1,
            "FilterList": { "Entries": filters },
        })
    }

    /// The open directory streams hear of services added (`adds`) and changed.
    pub(super) fn directory_changed(
        &mut self,
        adds: &[usize],
        changed: &[usize],
        out: &mut JsonOut,
    ) {
        for d in self.directories.clone() {
            self.directory_stream_changed(d, adds, changed, out);
        }
    }

    fn directory_stream_changed(
        &self,
        DirectoryStream { id, filter, only }: DirectoryStream,
        adds: &[usize],
        changed: &[usize],
        out: &mut JsonOut,
    ) {
        let mut entries: Vec<Json> = Vec::new();
        for (list, action) in [(adds, "Add"), (changed, "Update")] {
            for &i in list {
                if only.is_some_and(|s| s != i as u64 + 1) {
                    continue;
                }
                if let Some(name) = self.services.get(i) {
                    entries.push(self.directory_entry(i, name, filter, action));
                }
            }
        }
        if entries.is_empty() {
            return;
        }
        let update = json!({
            "ID": id,
            "Type": "Update",
            "Domain": "Source",
            "Map": { "KeyType": "UInt", "Entries": entries },
        });
        out.begin().extend_from_slice(update.to_string().as_bytes());
    }
}
