//! Whole RWF messages as a provider writes them, for the tests and benches of this crate
//! and of the node (feature `testing`): a Source Directory with its INFO, STATE and
//! GROUP filters, and an item's refresh in an item group. One place, so that each test
//! does not build its own copy of the same bytes.

use crate::rwf::container::{
    filter_action, map_action, ElementListWriter, FieldListWriter, FilterListWriter, MapWriter,
};
use crate::rwf::msg::{self, class, data, domain, refresh, stream, MsgKey, RwfState};
use crate::rwf::primitive::dt;

/// Which Source Directory message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectoryMsg {
    /// A complete refresh answering the node's request (an interactive provider's).
    Solicited,
    /// A complete refresh nobody asked for (a non-interactive provider's).
    Unsolicited,
    /// A complete refresh nobody asked for that clears the cache: the provider's whole
    /// directory anew (a service it leaves out is gone).
    Anew,
    /// An update.
    Update,
    /// An update whose map entry deletes the service (its filters are not written).
    Deletion,
}

/// One GROUP filter entry: the group, the group it merges into, its new state (stream
/// state, data state).
pub type GroupNews<'a> = (&'a [u8], Option<&'a [u8]>, Option<(u8, u8)>);

/// Open, ok, no code, no text.
pub fn ok() -> RwfState<'static> {
    RwfState::new(stream::OPEN, data::OK, msg::code::NONE, "")
}

/// Bytes from hex pairs, spaces anywhere ("08 00 03", "0800 03"): how the tests write
/// the bytes the SDK's codec makes.
pub fn hex(s: &str) -> Vec<u8> {
    let digits: String = s.split_whitespace().collect();
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap())
        .collect()
}

/// The ETA Consumer example's login request (user "root", stream 1), as it sends it,
/// with `Role` `role` (0 a consumer, 1 a provider: the ETA NIProvider's).
pub fn eta_login(role: u8) -> Vec<u8> {
    let mut b = hex("0063 01 01 00000001 04 00 80 59 26 04 72 6f 6f 74 01 05 80 4f 08 00 04 0d 41 70 70 6c 69 63 61 74 69 6f 6e 49 64 11 03 32 35 36 0f 41 70 70 6c 69 63 61 74 69 6f 6e 4e 61 6d 65 11 08 43 6f 6e 73 75 6d 65 72 08 50 6f 73 69 74 69 6f 6e 11 0c 31 32 37 2e 30 2e 30 2e 31 2f 76 6d 04 52 6f 6c 65 04 01 00");
    *b.last_mut().expect("not empty") = role;
    b
}

/// The node's Welcome to a session it accepted (a 1 s heartbeat, named "n"), encoded
/// as the node sends it.
pub fn node_welcome() -> Vec<u8> {
    let mut b = Vec::new();
    tickwire_proto::Message::Welcome(tickwire_proto::Welcome {
        heartbeat_ms: 1000,
        node_name: "n",
        ..tickwire_proto::Welcome::default()
    })
    .encode(&mut b)
    .expect("a Welcome encodes");
    b
}

/// A provider's answer to a login on `stream`: a complete, solicited refresh, open and ok.
pub fn login_accepted(stream_id: i32) -> Vec<u8> {
    let mut out = Vec::new();
    msg::begin_refresh(
        &mut out,
        domain::LOGIN,
        stream_id,
        refresh::SOLICITED | refresh::REFRESH_COMPLETE,
        dt::NO_DATA,
        None,
        &RwfState::new(stream::OPEN, data::OK, msg::code::NONE, "ok"),
        None,
        None,
        false,
    );
    out
}

/// A Source Directory message on the provider's `stream` for service id `service`, whose
/// filter entries `filters` writes.
pub fn source_directory(
    stream_id: i32,
    kind: DirectoryMsg,
    service: u8,
    filters: impl FnOnce(&mut Vec<u8>, &mut FilterListWriter),
) -> Vec<u8> {
    let mut out = Vec::new();
    let flags = match kind {
        DirectoryMsg::Solicited => refresh::SOLICITED | refresh::REFRESH_COMPLETE,
        DirectoryMsg::Unsolicited => refresh::REFRESH_COMPLETE,
        DirectoryMsg::Anew => refresh::REFRESH_COMPLETE | refresh::CLEAR_CACHE,
        DirectoryMsg::Update | DirectoryMsg::Deletion => 0,
    };
    let action = if matches!(kind, DirectoryMsg::Update | DirectoryMsg::Deletion) {
        let w = msg::MsgWriter::begin(
            &mut out,
            class::UPDATE,
            domain::SOURCE,
            stream_id,
            0,
            dt::MAP,
        );
        out.push(0); // update type: unspecified
        w.end_header(&mut out);
        if kind == DirectoryMsg::Deletion {
            map_action::DELETE
        } else {
            map_action::UPDATE
        }
    } else {
        let ok = ok();
        msg::begin_refresh(
            &mut out,
            domain::SOURCE,
            stream_id,
            flags,
            dt::MAP,
            None,
            &ok,
            None,
            None,
            false,
        );
        map_action::ADD
    };
    let mut map = MapWriter::begin(&mut out, dt::UINT, dt::FILTER_LIST);
    map.entry(&mut out, action, &[service], |o| {
        let mut fl = FilterListWriter::begin(o, dt::ELEMENT_LIST);
        filters(o, &mut fl);
        fl.end(o);
    });
    map.end(&mut out);
    out
}

/// The INFO filter entry: the service's name.
pub fn info(o: &mut Vec<u8>, fl: &mut FilterListWriter, name: &[u8]) {
    fl.entry(o, filter_action::SET, 1, |o| {
        let mut el = ElementListWriter::begin(o);
        el.ascii(o, "Name", name);
        el.end(o);
    });
}

/// The STATE filter entry: `ServiceState` (1 up, 0 down).
pub fn state(o: &mut Vec<u8>, fl: &mut FilterListWriter, service_state: u64) {
    fl.entry(o, filter_action::SET, 2, |o| {
        let mut el = ElementListWriter::begin(o);
        el.uint(o, "ServiceState", service_state);
        el.end(o);
    });
}

/// The STATE filter entry with a `Status` for all the service's items (stream state,
/// data state) besides its `ServiceState`.
pub fn state_with_status(
    o: &mut Vec<u8>,
    fl: &mut FilterListWriter,
    service_state: u64,
    status: (u8, u8),
) {
    fl.entry(o, filter_action::SET, 2, |o| {
        let mut el = ElementListWriter::begin(o);
        el.uint(o, "ServiceState", service_state);
        el.element(o, "Status", dt::STATE, |o| {
            RwfState::new(status.0, status.1, msg::code::NONE, "service news").encode(o)
        });
        el.end(o);
    });
}

/// One GROUP filter entry.
pub fn group(o: &mut Vec<u8>, fl: &mut FilterListWriter, news: GroupNews<'_>) {
    let (group, merged_to, state) = news;
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

/// A directory refresh of service `service`, named `name` and up.
pub fn service_up(stream_id: i32, kind: DirectoryMsg, service: u8, name: &[u8]) -> Vec<u8> {
    source_directory(stream_id, kind, service, |o, fl| {
        info(o, fl, name);
        state(o, fl, 1);
    })
}

/// A directory update with GROUP filter entries for `service`.
pub fn group_update(stream_id: i32, service: u8, news: &[GroupNews<'_>]) -> Vec<u8> {
    source_directory(stream_id, DirectoryMsg::Update, service, |o, fl| {
        for &n in news {
            group(o, fl, n);
        }
    })
}

/// The default item group (RWF's two zero bytes).
pub const DEFAULT_GROUP: &[u8] = &[0, 0];

/// A provider's complete MarketPrice refresh on its `stream`, `solicited` or not, open
/// and ok, the item in `group`, with `key` when given, and the fields `fields` writes.
pub fn refresh_in_group(
    stream_id: i32,
    solicited: bool,
    group: &[u8],
    key: Option<&MsgKey<'_>>,
    fields: impl FnOnce(&mut Vec<u8>, &mut FieldListWriter),
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut flags = refresh::REFRESH_COMPLETE;
    if solicited {
        flags |= refresh::SOLICITED;
    }
    if key.is_some() {
        flags |= refresh::HAS_MSG_KEY;
    }
    let w = msg::MsgWriter::begin(
        &mut out,
        class::REFRESH,
        domain::MARKET_PRICE,
        stream_id,
        flags,
        dt::FIELD_LIST,
    );
    ok().encode(&mut out);
    out.push(group.len() as u8);
    out.extend_from_slice(group);
    if let Some(k) = key {
        k.encode(&mut out);
    }
    w.end_header(&mut out);
    let mut f = FieldListWriter::begin(&mut out);
    fields(&mut out, &mut f);
    f.end(&mut out);
    out
}

/// A non-interactive provider's first refresh of item `name` of its service `service`
/// on its `stream`, in the default group, with no fields.
pub fn item_refresh(stream_id: i32, service: u16, name: &str) -> Vec<u8> {
    let key = MsgKey {
        service_id: Some(service),
        name: Some(name.as_bytes()),
        name_type: Some(1),
        ..MsgKey::default()
    };
    refresh_in_group(stream_id, false, DEFAULT_GROUP, Some(&key), |_, _| {})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rwf::msg::Msg;

    #[test]
    fn the_messages_decode_as_what_they_say() {
        let dir = service_up(2, DirectoryMsg::Solicited, 7, b"PROV");
        let m = Msg::decode(&dir).unwrap();
        assert_eq!(
            (m.class, m.domain, m.stream_id),
            (class::REFRESH, domain::SOURCE, 2)
        );
        assert_eq!(m.flags & refresh::SOLICITED, refresh::SOLICITED);
        let up = group_update(
            2,
            7,
            &[(&[0, 1], None, Some((stream::OPEN, data::SUSPECT)))],
        );
        let m = Msg::decode(&up).unwrap();
        assert_eq!((m.class, m.domain), (class::UPDATE, domain::SOURCE));
        let key = MsgKey {
            service_id: Some(7),
            name: Some(b"X"),
            name_type: Some(1),
            ..MsgKey::default()
        };
        let rf = refresh_in_group(5, true, &[0, 1], Some(&key), |_, _| {});
        let m = Msg::decode(&rf).unwrap();
        assert_eq!(m.group_id, Some(&[0u8, 1][..]));
        assert_eq!(m.key.unwrap().name, Some(&b"X"[..]));
    }
}
