//! Non-interactive providers (the ETA NIProvider, NIProvPerf, EMA's OmmNiProvider): a
//! login with role 1 makes the session a publisher to the node.
//!
//! The provider announces its services in a Source Directory refresh of its own (its
//! service ids are its own: the session keeps their names), then publishes items on
//! streams it numbers itself (negative): their refreshes, updates, statuses and closes
//! become the node's own messages on streams the session numbers, the fields read by
//! the field dictionary. What the node sends a publisher (a refused item's status)
//! comes back on the provider's stream.

use super::{
    apply_directory_news, encode_refresh, encode_update, native_refresh, native_update,
    provider_fields_to_native, service_told, Outbox, ProvidedItem, ProviderBooks, Session,
};
use crate::directory::{encode_node_directory, ProviderServices};
use crate::item_groups::{self, ItemGroups};
use crate::provided_items::ProvidedItems;
use crate::rwf::msg::{self, class, domain, put_status, Msg, RwfState};
use crate::rwf::primitive::dt;
use crate::rwf::RwfError;
use rustc_hash::FxHashMap;
use tickwire_proto::{code, DataState, Message, ServiceState, State, Status, StreamState};

/// What a provider connection publishes.
#[derive(Debug, Default)]
pub(super) struct Provider {
    /// Its services (their ids are its own).
    services: ProviderServices,
    /// Its item streams (MarketPrice): its stream id to the node's.
    items: ProvidedItems,
    /// The node's stream ids back to the provider's.
    by_native: FxHashMap<u32, i32>,
    /// The items' groups, by the provider's stream (its directory speaks of groups).
    groups: ItemGroups,
    /// The last of the node's stream ids handed out.
    pub(super) next_native: u32,
    /// Scratch for a field list in the node's encoding.
    fields: Vec<u8>,
    /// Fields left out because the dictionary does not know them: how many, and the
    /// first (the node logs it once).
    pub skipped_fields: u64,
    pub first_skipped: Option<i16>,
    /// Services it deleted or left out of a whole directory: for the node to let go
    /// of ([`super::Session::take_released`]).
    released: Vec<String>,
}

/// Most item streams one provider may hold (the node's own limits apply behind this
/// too: an item the node refuses or closes is dropped here as well).
const MAX_PROVIDER_ITEMS: usize = 1 << 20;

impl Provider {
    /// Services it announced past the most it may (left out).
    pub(super) fn refused_services(&self) -> u64 {
        self.services.refused
    }

    pub(super) fn take_released(&mut self) -> Vec<String> {
        std::mem::take(&mut self.released)
    }

    fn books(&mut self) -> ProviderBooks<'_> {
        ProviderBooks {
            services: &self.services,
            groups: &mut self.groups,
            items: &mut self.items,
            native: &mut self.by_native,
        }
    }
}

impl Session {
    /// A message from a provider.
    pub(super) fn on_provider_message(
        &mut self,
        m: &Msg<'_>,
        to_node: &mut Vec<u8>,
        out: &mut impl Outbox,
    ) {
        match (m.class, m.domain) {
            (class::REFRESH | class::UPDATE, domain::SOURCE) => {
                self.on_provider_directory(m, to_node)
            }
            (class::CLOSE, domain::SOURCE) => {
                let p = self.provider.as_mut().expect("a provider");
                for (id, _) in p.services.iter() {
                    service_told(&mut p.groups, &mut p.items, id, ServiceState::Down);
                }
                let services = p.services.iter().map(|(_, n)| (n, ServiceState::Down));
                encode_node_directory(services, false, to_node);
            }
            (class::REFRESH, domain::MARKET_PRICE) => self.on_provider_refresh(m, to_node, out),
            (class::UPDATE, domain::MARKET_PRICE) => self.on_provider_update(m, to_node, out),
            (class::STATUS | class::CLOSE, domain::MARKET_PRICE) => {
                self.on_provider_close(m, to_node)
            }
            (class::REQUEST, domain::DICTIONARY) => self.on_dictionary_request(m, to_node, out),
            (class::CLOSE, domain::DICTIONARY) => {
                self.downloads.retain(|d| d.stream != m.stream_id)
            }
            (class::GENERIC | class::ACK, _) => {}
            (_, d) if d != domain::MARKET_PRICE && d != domain::SOURCE => {
                let text = format!(
                    "the {} domain is not carried: Tickwire carries MarketPrice items",
                    domain::name(d)
                );
                self.refuse(out, to_node, m, msg::code::USAGE_ERROR, &text);
            }
            (c, _) => {
                let text = format!("a message of class {c} is not expected from a provider");
                self.refuse(out, to_node, m, msg::code::USAGE_ERROR, &text);
            }
        }
    }

    fn on_provider_directory(&mut self, m: &Msg<'_>, to_node: &mut Vec<u8>) {
        if m.container != dt::MAP {
            return;
        }
        let Ok(entries) = crate::directory::services(m.payload) else {
            return;
        };
        let p = self.provider.as_mut().expect("a provider");
        let groups = item_groups::news(&entries);
        let mut news = p.services.apply(m, &entries, |id| p.groups.told(id));
        p.released.append(&mut news.released);
        // The provider's next refresh of such an item opens a node stream under the
        // service's new name.
        apply_directory_news(p.books(), &news, &entries, &groups, false, to_node, |_| {});
    }

    fn on_provider_refresh(&mut self, m: &Msg<'_>, to_node: &mut Vec<u8>, out: &mut impl Outbox) {
        let p = self.provider.as_mut().expect("a provider");
        let key = m.key.clone().unwrap_or_default();
        let service = key.service_id.and_then(|id| p.services.name(id));
        let (Some(service), Some(service_id), Some(name)) =
            (service.map(str::to_string), key.service_id, key.name)
        else {
            let text =
                "a refresh needs a key with a service id from the provider's directory and a name";
            self.refuse_published(m, code::NOT_FOUND, text, to_node, out);
            return;
        };
        // A stream is one item's: a refresh on an open stream naming another (a
        // stream reused without a close) would give the node's item another's image.
        if let Some(item) = p.items.get(&m.stream_id) {
            if item.service != service_id || *item.name != *name {
                let text = format!(
                    "stream {} is open for {:?} of service id {}, not {:?} of {service_id}: a refresh cannot change its key (close the stream first)",
                    m.stream_id,
                    String::from_utf8_lossy(&item.name),
                    item.service,
                    String::from_utf8_lossy(name),
                );
                self.refuse_published(m, code::PROTOCOL, &text, to_node, out);
                return;
            }
        }
        if !p.items.contains_key(&m.stream_id) && p.items.len() >= MAX_PROVIDER_ITEMS {
            let text = format!("a provider may publish at most {MAX_PROVIDER_ITEMS} items");
            self.refuse(out, to_node, m, msg::code::TOO_MANY_ITEMS, &text);
            return;
        }
        // The fields before the item takes a stream.
        if let Err(e) = self.provider_fields(m.payload) {
            self.refuse_malformed(m, "refresh", &e, to_node, out);
            return;
        }
        let p = self.provider.as_mut().expect("a provider");
        if !p.items.contains_key(&m.stream_id) {
            // The publisher's own stream ids stay below the node's (from 2^31), and
            // past a wrap skip the ids still open.
            let native = loop {
                p.next_native = match p.next_native.wrapping_add(1) {
                    n if n == 0 || n >= 0x8000_0000 => 1,
                    n => n,
                };
                if !p.by_native.contains_key(&p.next_native) {
                    break p.next_native;
                }
            };
            p.by_native.insert(native, m.stream_id);
            let item = ProvidedItem::new(native, service_id, name);
            p.items.insert(m.stream_id, item);
        }
        let item = p.items.get_mut(&m.stream_id).expect("inserted above");
        p.groups.set(m.stream_id, item.service, m.group_id);
        let name = String::from_utf8_lossy(name);
        // Unasked: the node requested nothing of a non-interactive provider.
        let refresh = native_refresh(m, item, false, &service, &name, &p.fields);
        encode_refresh(refresh, to_node);
    }

    /// A refresh or update whose fields do not decode: refused (an update left out
    /// would leave its subscribers' image wrong without a word).
    fn refuse_malformed(
        &mut self,
        m: &Msg<'_>,
        what: &str,
        e: &RwfError,
        to_node: &mut Vec<u8>,
        out: &mut impl Outbox,
    ) {
        let text = format!("the {what}'s field list does not decode: {e}");
        self.refuse_published(m, code::MALFORMED, &text, to_node, out);
    }

    /// A refresh or update refused with `text`: the provider's stream is closed, and
    /// so is the item at the node (with `node_code`) if it had one, and forgotten: the
    /// provider may open the stream again for another item.
    fn refuse_published(
        &mut self,
        m: &Msg<'_>,
        node_code: u16,
        text: &str,
        to_node: &mut Vec<u8>,
        out: &mut impl Outbox,
    ) {
        self.end_published(m.stream_id, node_code, text, to_node);
        self.refuse(out, to_node, m, msg::code::USAGE_ERROR, text);
    }

    /// The item on the provider's `stream`, if it has one, is closed at the node (with
    /// `node_code` and `text`) and forgotten.
    pub(super) fn end_published(
        &mut self,
        stream: i32,
        node_code: u16,
        text: &str,
        to_node: &mut Vec<u8>,
    ) {
        let Some(p) = self.provider.as_mut() else {
            return;
        };
        if let Some(item) = p.items.remove(&stream) {
            p.by_native.remove(&item.native);
            p.groups.remove(stream);
            let _ = Message::Status(Status {
                stream_id: item.native,
                state: State::closed(node_code, text),
            })
            .encode(to_node);
        }
    }

    fn on_provider_update(&mut self, m: &Msg<'_>, to_node: &mut Vec<u8>, out: &mut impl Outbox) {
        let p = self.provider.as_ref().expect("a provider");
        let Some(native) = p.items.get(&m.stream_id).map(|i| i.native) else {
            return; // an update before its refresh: nothing to apply it to
        };
        if let Err(e) = self.provider_fields(m.payload) {
            self.refuse_malformed(m, "update", &e, to_node, out);
            return;
        }
        let p = self.provider.as_mut().expect("a provider");
        let seq = p
            .items
            .get_mut(&m.stream_id)
            .map_or(0, |i| i.seq.update(m.seq, m.conflation_count));
        if let Err(e) = encode_update(native_update(m, native, seq, &p.fields), to_node) {
            let text = format!("the update is too large for the node: {e}");
            self.refuse_published(m, code::TOO_LARGE, &text, to_node, out);
        }
    }

    fn on_provider_close(&mut self, m: &Msg<'_>, to_node: &mut Vec<u8>) {
        let p = self.provider.as_mut().expect("a provider");
        let Some(item) = p.items.get_mut(&m.stream_id) else {
            return;
        };
        p.groups.set(m.stream_id, item.service, m.group_id);
        let native = item.native;
        let state = match (m.class, m.state) {
            (class::STATUS, Some(s)) => item.state(&s),
            // No state: the item only moved to another group (set above).
            (class::STATUS, None) => return,
            _ => State::closed(code::NOT_FOUND, "the provider closed the item"),
        };
        p.books().item_status(m.stream_id, native, state, to_node);
    }

    /// The provider's field list in `provider.fields` as the node's; an error if it is
    /// malformed.
    fn provider_fields(&mut self, rwf: &[u8]) -> Result<(), RwfError> {
        let p = self.provider.as_mut().expect("a provider");
        provider_fields_to_native(
            &self.cfg.dictionary,
            rwf,
            &mut p.fields,
            &mut p.skipped_fields,
            &mut p.first_skipped,
        )
    }

    /// A status the node sends the provider about one of its items.
    pub(super) fn on_node_message_to_provider(&mut self, m: &Message<'_>, out: &mut impl Outbox) {
        // A non-interactive provider has no stream to take a post on: refused at once,
        // rather than left to the node's timeout.
        if let Message::Post(p) = m {
            if p.ack {
                let _ = Message::Ack(tickwire_proto::Ack {
                    stream_id: p.stream_id,
                    post_id: p.post_id,
                    nak: Some(tickwire_proto::NakCode::DeniedBySrc),
                    text: "a non-interactive RSSL provider takes no posts",
                })
                .encode(&mut self.answers);
            }
            return;
        }
        // The node closed an item (it refused its image): the provider is told, and
        // the item is forgotten here, so its updates stop going to a dead stream.
        let (native, state) = match m {
            Message::Status(s) => (s.stream_id, s.state),
            Message::Close { stream_id } => {
                (*stream_id, State::closed(code::NONE, "closed by the node"))
            }
            _ => return,
        };
        let p = self.provider.as_mut().expect("a provider");
        let Some(&stream) = p.by_native.get(&native) else {
            return;
        };
        let open = state.stream == StreamState::Open;
        if !open {
            p.by_native.remove(&native);
            p.items.remove(&stream);
            p.groups.remove(stream);
        }
        let state = RwfState {
            stream: if open {
                msg::stream::OPEN
            } else {
                msg::stream::CLOSED
            },
            data: if state.data == DataState::Ok {
                msg::data::OK
            } else {
                msg::data::SUSPECT
            },
            code: msg::code::NONE,
            text: state.text.as_bytes(),
        };
        self.buf.clear();
        put_status(
            &mut self.buf,
            domain::MARKET_PRICE,
            stream,
            &state,
            None,
            false,
        );
        out.send(&self.buf);
    }
}
