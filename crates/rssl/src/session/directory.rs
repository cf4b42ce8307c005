//! The Source Directory: answered here from the node's Directory messages, on the
//! consumer's directory streams (a refresh per request, updates as services change).

use super::{Outbox, Session, MAX_DIRECTORY_STREAMS};
use crate::rwf::container::{
    filter_action, map_action, put_array, ElementListWriter, FilterListWriter, MapWriter,
};
use crate::rwf::msg::{
    self, begin_refresh, class, code, data, domain, refresh, request, stream, Msg, MsgKey, RwfState,
};
use crate::rwf::primitive::{self, dt};
use tickwire_proto::ServiceState;

/// Directory filter ids (and their bits in a request's filter).
const FILTER_INFO: u8 = 1;
const FILTER_STATE: u8 = 2;

impl Session {
    pub(super) fn on_directory_request(
        &mut self,
        m: &Msg<'_>,
        to_node: &mut Vec<u8>,
        out: &mut impl Outbox,
    ) {
        let filter = m.key.as_ref().and_then(|k| k.filter).unwrap_or(0x3F);
        let only = m.key.as_ref().and_then(|k| k.service_id);
        // A request on an open directory stream changes it (with a refresh unless it
        // asks for none); one without streaming ends it with its refresh.
        let open = self.directories.iter().position(|d| d.0 == m.stream_id);
        match open {
            _ if m.flags & request::STREAMING == 0 => {
                self.directories.retain(|&(s, _, _)| s != m.stream_id)
            }
            Some(i) => {
                self.directories[i] = (m.stream_id, filter, only);
                // A reissue that asks for no refresh gets none.
                if m.flags & request::NO_REFRESH != 0 {
                    return;
                }
            }
            None if self.directories.len() >= MAX_DIRECTORY_STREAMS => {
                let text = format!("at most {MAX_DIRECTORY_STREAMS} directory streams at once");
                self.refuse(out, to_node, m, code::NO_RESOURCES, &text);
                return;
            }
            None => self.directories.push((m.stream_id, filter, only)),
        }
        let services: Vec<usize> = (0..self.services.len())
            .filter(|&i| self.services[i].state != ServiceState::Removed)
            .filter(|&i| only.is_none_or(|id| self.services[i].id == id))
            .collect();
        self.buf.clear();
        let st = if m.flags & request::STREAMING != 0 {
            stream::OPEN
        } else {
            stream::NON_STREAMING
        };
        let key = MsgKey {
            filter: Some(filter),
            service_id: only,
            ..MsgKey::default()
        };
        begin_refresh(
            &mut self.buf,
            domain::SOURCE,
            m.stream_id,
            refresh::SOLICITED | refresh::REFRESH_COMPLETE | refresh::CLEAR_CACHE,
            dt::MAP,
            None,
            &RwfState::new(st, data::OK, code::NONE, ""),
            Some(&key),
            None,
            false,
        );
        let mut buf = std::mem::take(&mut self.buf);
        self.directory_map(&mut buf, &services, filter, map_action::ADD);
        out.send(&buf);
        self.buf = buf;
    }

    /// The directory's map: one entry per service, with the filters asked for.
    fn directory_map(&self, out: &mut Vec<u8>, services: &[usize], filter: u32, action: u8) {
        let mut map = MapWriter::begin(out, dt::UINT, dt::FILTER_LIST);
        for &i in services {
            let s = &self.services[i];
            let mut key = Vec::new();
            primitive::put_uint(&mut key, s.id as u64);
            if s.state == ServiceState::Removed {
                map.entry(out, map_action::DELETE, &key, |_| {});
                continue;
            }
            map.entry(out, action, &key, |o| {
                let mut fl = FilterListWriter::begin(o, dt::ELEMENT_LIST);
                // INFO goes with updates too: the ETA Consumer example replaces its
                // cached service with an update's entry.
                if filter & (1 << (FILTER_INFO - 1)) != 0 {
                    fl.entry(o, filter_action::SET, FILTER_INFO, |o| {
                        let mut el = ElementListWriter::begin(o);
                        el.ascii(o, "Name", s.name.as_bytes());
                        el.ascii(o, "Vendor", self.cfg.vendor.as_bytes());
                        el.uint(o, "IsSource", 0);
                        // Dictionary among the capabilities: the SDK's watchlist does
                        // not request a domain the service does not list.
                        el.element(o, "Capabilities", dt::ARRAY, |o| {
                            let domains = [domain::DICTIONARY as u64, domain::MARKET_PRICE as u64];
                            put_array(o, dt::UINT, &domains, |o, v| primitive::put_uint(o, *v));
                        });
                        el.element(o, "DictionariesProvided", dt::ARRAY, |o| {
                            put_array(o, dt::ASCII_STRING, &["RWFFld", "RWFEnum"], |o, v| {
                                o.extend_from_slice(v.as_bytes())
                            });
                        });
                        el.element(o, "DictionariesUsed", dt::ARRAY, |o| {
                            put_array(o, dt::ASCII_STRING, &["RWFFld", "RWFEnum"], |o, v| {
                                o.extend_from_slice(v.as_bytes())
                            });
                        });
                        el.element(o, "QoS", dt::ARRAY, |o| {
                            put_array(
                                o,
                                dt::QOS,
                                &[primitive::QOS_REALTIME_TICK_BY_TICK],
                                |o, q| o.push(*q),
                            );
                        });
                        el.uint(o, "SupportsQoSRange", 0);
                        el.uint(o, "SupportsOutOfBandSnapshots", 0);
                        el.uint(o, "AcceptingConsumerStatus", 0);
                        el.end(o);
                    });
                }
                if filter & (1 << (FILTER_STATE - 1)) != 0 {
                    fl.entry(o, filter_action::SET, FILTER_STATE, |o| {
                        let up = (s.state == ServiceState::Up) as u64;
                        let mut el = ElementListWriter::begin(o);
                        el.uint(o, "ServiceState", up);
                        el.uint(o, "AcceptingRequests", up);
                        el.end(o);
                    });
                }
                fl.end(o);
            });
        }
        map.end(out);
    }

    /// The directory streams hear of services added and changed.
    pub(super) fn directory_update(
        &mut self,
        adds: &[usize],
        updates: &[usize],
        out: &mut impl Outbox,
    ) {
        let mut buf = std::mem::take(&mut self.buf);
        for &(sid, filter, only) in &self.directories {
            for (services, action) in [(adds, map_action::ADD), (updates, map_action::UPDATE)] {
                // A stream of one service hears only of it.
                let services: Vec<usize> = services
                    .iter()
                    .copied()
                    .filter(|&i| only.is_none_or(|id| self.services[i].id == id))
                    .collect();
                if services.is_empty() {
                    continue;
                }
                buf.clear();
                let w =
                    msg::MsgWriter::begin(&mut buf, class::UPDATE, domain::SOURCE, sid, 0, dt::MAP);
                buf.push(0); // update type: unspecified
                w.end_header(&mut buf);
                self.directory_map(&mut buf, &services, filter, action);
                out.send(&buf);
            }
        }
        self.buf = buf;
    }
}
