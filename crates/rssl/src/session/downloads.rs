//! Dictionary downloads: the consumer's requests for `RWFFld` and `RWFEnum`, their
//! refreshes sent a part at a time as the connection has room.

use super::{Outbox, Session};
use crate::rwf::msg::{
    begin_refresh, code, data, domain, refresh, request, stream, Msg, MsgKey, RwfState,
};
use crate::rwf::primitive::dt;

/// A dictionary being sent, a part at a time as the connection has room.
#[derive(Debug)]
pub(super) struct Download {
    pub(super) stream: i32,
    /// The field dictionary (`RWFFld`), else the enumeration tables (`RWFEnum`).
    fields: bool,
    /// Verbosity 0 (INFO): the summary alone.
    info_only: bool,
    next_part: usize,
    name: Vec<u8>,
    service_id: Option<u16>,
    filter: u32,
    streaming: bool,
}

/// The dictionaries' names in the Dictionary domain and the directory.
const FIELD_DICTIONARY: &[u8] = b"RWFFld";
const ENUM_DICTIONARY: &[u8] = b"RWFEnum";
/// At most this many downloads in progress on one connection (the two dictionaries,
/// and a repeat of each).
const MAX_DOWNLOADS: usize = 4;

impl Session {
    pub(super) fn on_dictionary_request(
        &mut self,
        m: &Msg<'_>,
        to_node: &mut Vec<u8>,
        out: &mut impl Outbox,
    ) {
        let key = m.key.clone().unwrap_or_default();
        let name = key.name.unwrap_or(b"");
        let fields = match name {
            FIELD_DICTIONARY => true,
            ENUM_DICTIONARY => false,
            other => {
                let text = format!(
                    "no dictionary {:?}: the node serves RWFFld and RWFEnum",
                    String::from_utf8_lossy(other)
                );
                self.refuse(out, to_node, m, code::NOT_FOUND, &text);
                return;
            }
        };
        self.downloads.retain(|d| d.stream != m.stream_id);
        if self.downloads.len() >= MAX_DOWNLOADS {
            let text = format!("at most {MAX_DOWNLOADS} dictionary downloads at once");
            self.refuse(out, to_node, m, code::NO_RESOURCES, &text);
            return;
        }
        let filter = key.filter.unwrap_or(0x7);
        self.downloads.push(Download {
            stream: m.stream_id,
            fields,
            info_only: filter == 0,
            next_part: 0,
            name: name.to_vec(),
            service_id: key.service_id,
            filter,
            streaming: m.flags & request::STREAMING != 0,
        });
        self.pump_downloads(out);
    }

    /// Dictionary parts are still to be sent ([`Session::pump_downloads`]).
    pub fn downloading(&self) -> bool {
        !self.downloads.is_empty()
    }

    /// Sends dictionary parts while the connection has room: call again when it drains.
    pub fn pump_downloads(&mut self, out: &mut impl Outbox) {
        let all = self.cfg.downloads.clone();
        while out.has_room() {
            let Some(d) = self.downloads.first_mut() else {
                return;
            };
            let parts = if d.fields { &all.fields } else { &all.enums };
            let info = if d.fields {
                &all.fields_info
            } else {
                &all.enums_info
            };
            let (payload, last) = if d.info_only || parts.is_empty() {
                (info, true)
            } else {
                (&parts[d.next_part], d.next_part + 1 == parts.len())
            };
            let mut flags = refresh::SOLICITED;
            if d.next_part == 0 {
                flags |= refresh::CLEAR_CACHE;
            }
            if last {
                flags |= refresh::REFRESH_COMPLETE;
            }
            let key = MsgKey {
                service_id: d.service_id,
                name: Some(&d.name),
                filter: Some(d.filter),
                ..MsgKey::default()
            };
            let st = if d.streaming {
                stream::OPEN
            } else {
                stream::NON_STREAMING
            };
            self.buf.clear();
            let state = RwfState::new(st, data::OK, code::NONE, "");
            begin_refresh(
                &mut self.buf,
                domain::DICTIONARY,
                d.stream,
                flags,
                dt::SERIES,
                None,
                &state,
                Some(&key),
                None,
                false,
            );
            self.buf.extend_from_slice(payload);
            out.send(&self.buf);
            d.next_part += 1;
            if last {
                self.downloads.remove(0);
            }
        }
    }
}
