//! What either kind of provider publishes, as the node's messages: the non-interactive
//! provider of this session (provider.rs) and the interactive provider of a node's link
//! (`provider_link`) share its items, their states and refreshes in parts, and what
//! their directories tell the node.

use crate::dictionary::RwfDictionary;
use crate::item_groups::ItemGroups;
use crate::provided_items::ProvidedItems;
use crate::rwf::msg::{self, code, data, refresh, stream, Msg, RwfState};
use crate::rwf::RwfError;
use crate::sequence::ItemSeq;
use rustc_hash::{FxHashMap, FxHashSet};
use tickwire_proto::{
    code as ncode, DataState, FieldList, Message, Refresh, ServiceState, State, Status,
    StreamState, Update, UpdateType,
};

/// An RWF update type as the node's: the node numbers them as the RDM does (0
/// unspecified, 1 quote, 2 trade) and keeps the others (news alert, correction...) as
/// they are, so they come out of every protocol unchanged.
pub(crate) fn native_update_type(t: u8) -> UpdateType {
    UpdateType::from_u8(t)
}

/// A provider's RWF update as the node's, on the node's stream at `seq`, with its
/// fields already in the node's encoding: one mapping of the update's type and flags
/// for the node's provider links and its provider sessions alike.
#[inline]
pub(crate) fn native_update<'a>(
    m: &Msg<'_>,
    stream_id: u32,
    seq: u32,
    fields: &'a [u8],
) -> Update<'a> {
    Update {
        stream_id,
        seq,
        update_type: native_update_type(m.update_type),
        do_not_conflate: m.flags & msg::update::DO_NOT_CONFLATE != 0,
        conflation_count: m.conflation_count.max(1),
        fields: FieldList::from_trusted(fields),
    }
}

/// The largest field list in one of the node's refresh messages: a larger image goes in
/// parts, as the node's own publishers send one (docs/PROTOCOL.md 6.9).
const REFRESH_PART: usize = tickwire_proto::field::PART_BYTES;

/// A provider's refresh for the node: in parts when its fields are more than one of the
/// node's messages holds (the first part clears the image if the refresh does, the last
/// completes it if the refresh does).
pub(crate) fn encode_refresh(r: Refresh<'_>, to_node: &mut Vec<u8>) {
    let fields = r.fields.as_bytes();
    if fields.len() <= REFRESH_PART {
        let _ = Message::Refresh(r).encode(to_node);
        return;
    }
    let parts = tickwire_proto::field::split_field_list(fields, REFRESH_PART);
    let n = parts.len();
    for (i, part) in parts.iter().enumerate() {
        let _ = Message::Refresh(Refresh {
            complete: r.complete && i + 1 == n,
            clear_cache: r.clear_cache && i == 0,
            fields: FieldList::from_trusted(part),
            ..r.clone()
        })
        .encode(to_node);
    }
}

/// A provider's update for the node: an error when it is more than one of the node's
/// messages holds (an update cannot go in parts).
pub(crate) fn encode_update(
    u: Update<'_>,
    to_node: &mut Vec<u8>,
) -> Result<(), tickwire_proto::EncodeError> {
    Message::Update(u).encode(to_node)
}

/// A provider's RWF refresh of `item` as the node's, for `service`/`name`, its fields
/// already in the node's encoding (as [`native_update`]); `solicited` is the provider's
/// own flag, or false where the node asked for nothing.
#[inline]
pub(crate) fn native_refresh<'a>(
    m: &Msg<'a>,
    item: &mut ProvidedItem,
    solicited: bool,
    service: &'a str,
    name: &'a str,
    fields: &'a [u8],
) -> Refresh<'a> {
    Refresh {
        stream_id: item.native,
        seq: item.seq.refresh(m.seq),
        complete: m.flags & refresh::REFRESH_COMPLETE != 0,
        solicited,
        clear_cache: m.flags & refresh::CLEAR_CACHE != 0,
        state: m.state.map_or(State::OPEN_OK, |s| item.state(&s)),
        service,
        name,
        fields: FieldList::from_trusted(fields),
    }
}

/// An item a provider publishes through the node, by either kind of provider.
#[derive(Debug)]
pub(crate) struct ProvidedItem {
    /// The node's stream it is on.
    pub(crate) native: u32,
    pub(crate) seq: ItemSeq,
    /// The provider's service id.
    pub(crate) service: u16,
    /// The item's name.
    pub(crate) name: Box<[u8]>,
    /// Its data state at the node: what RWF's NO_CHANGE leaves it.
    pub(crate) data: DataState,
}

impl ProvidedItem {
    /// Item `name` of the provider's `service` on the node's stream `native`, suspect
    /// until a state says otherwise.
    pub(crate) fn new(native: u32, service: u16, name: &[u8]) -> Self {
        ProvidedItem {
            native,
            seq: ItemSeq::default(),
            service,
            name: name.into(),
            data: DataState::Suspect,
        }
    }

    /// A state the provider gives the item, as the node's.
    pub(crate) fn state<'a>(&mut self, s: &RwfState<'a>) -> State<'a> {
        let state = native_state(s, self.data);
        self.data = state.data;
        state
    }
}

/// The node was told that the provider's `service` is in `state`: its groups hear of
/// it, and a service gone down made its items suspect at the node.
pub(crate) fn service_told(
    groups: &mut ItemGroups,
    items: &mut ProvidedItems,
    service: u16,
    state: ServiceState,
) {
    if groups.service_told(service, state) && state == ServiceState::Down {
        items.for_service(service, |item| item.data = DataState::Suspect);
    }
}

/// The `Status` of the provider's `service` (its STATE filter's): to each of its items
/// as if the provider had sent each one, but for those it changes nothing for (their
/// stream stays open, their data state as it was: a provider repeating it costs no
/// node message). Those it closes are forgotten; `closed` gets each.
pub(crate) fn service_status(
    groups: &mut ItemGroups,
    items: &mut ProvidedItems,
    service: u16,
    status: &RwfState<'_>,
    to_node: &mut Vec<u8>,
    mut closed: impl FnMut(&ProvidedItem),
) {
    let mut changed = false;
    for stream in items.streams_of(service) {
        let Some(item) = items.get_mut(&stream) else {
            continue;
        };
        let was = item.data;
        let state = item.state(status);
        let open = state.stream == StreamState::Open;
        if open && state.data == was {
            continue;
        }
        changed = true;
        let stream_id = item.native;
        if !open {
            groups.remove(stream);
            if let Some(item) = items.remove(&stream) {
                closed(&item);
            }
        }
        let _ = Message::Status(Status { stream_id, state }).encode(to_node);
    }
    // A state its groups gave before may no longer be their items'.
    if changed {
        groups.service_changed(service);
    }
}

/// The items of the provider's services whose name went (`gone`: renamed, deleted or
/// left out): each was opened under the old name, so it ends at the node as
/// recoverable (asked again, it comes from the service that has the name now) and is
/// forgotten; `closed` gets each one's provider stream and item.
pub(crate) fn close_renamed_items(
    gone: &FxHashSet<u16>,
    groups: &mut ItemGroups,
    items: &mut ProvidedItems,
    to_node: &mut Vec<u8>,
    mut closed: impl FnMut(i32, &ProvidedItem),
) {
    let state = State {
        stream: StreamState::ClosedRecover,
        data: DataState::Suspect,
        code: ncode::NONE,
        text: "the provider renamed or removed the item's service",
    };
    for &service in gone {
        for (stream, item) in items.remove_service(service) {
            groups.remove(stream);
            closed(stream, &item);
            let _ = Message::Status(Status {
                stream_id: item.native,
                state,
            })
            .encode(to_node);
        }
    }
}

/// A provider's services and items as the node serves them: what an interactive
/// provider's link and a non-interactive provider's session both keep.
pub(crate) struct ProviderBooks<'a> {
    pub(crate) services: &'a crate::directory::ProviderServices,
    pub(crate) groups: &'a mut ItemGroups,
    pub(crate) items: &'a mut ProvidedItems,
    /// The node's stream ids of the items, to their provider streams.
    pub(crate) native: &'a mut FxHashMap<u32, i32>,
}

impl ProviderBooks<'_> {
    /// The provider's `state` of its item stream `stream` (the node's `native`), to the
    /// node; an item no longer open is forgotten.
    pub(crate) fn item_status(
        &mut self,
        stream: i32,
        native: u32,
        state: State<'_>,
        to_node: &mut Vec<u8>,
    ) {
        if state.stream != StreamState::Open {
            self.items.remove(&stream);
            self.groups.remove(stream);
            self.native.remove(&native);
        }
        let _ = Message::Status(Status {
            stream_id: native,
            state,
        })
        .encode(to_node);
    }
}

/// A provider's directory message told to the node and its items, after its services
/// took it (`news`): each item of a renamed or removed service ends
/// (`closed_at_provider` gets its provider stream), the services whose state was told
/// go to the node's directory (`interactive`: as an interactive provider's), each
/// service's `Status` (an update's, of a service already known, as the SDK's watchlist
/// takes it) goes to its items, and then the item groups' news (`group_news`).
pub(crate) fn apply_directory_news(
    books: ProviderBooks<'_>,
    news: &crate::directory::DirectoryNews,
    entries: &[crate::directory::ServiceInfo<'_>],
    group_news: &[(u16, crate::directory::GroupChange<'_>)],
    interactive: bool,
    to_node: &mut Vec<u8>,
    mut closed_at_provider: impl FnMut(i32),
) {
    let ProviderBooks {
        services,
        groups,
        items,
        native,
    } = books;
    close_renamed_items(&news.gone, groups, items, to_node, |stream, item| {
        native.remove(&item.native);
        closed_at_provider(stream);
    });
    for &(id, _, state) in &news.told {
        service_told(groups, items, id, state);
    }
    if !news.told.is_empty() {
        let told = news
            .told
            .iter()
            .map(|(_, name, state)| (name.as_str(), *state));
        crate::directory::encode_node_directory(told, interactive, to_node);
    }
    for e in entries.iter().filter(|e| !e.added && !e.deleted) {
        if let (Some(status), Some(_)) = (&e.status, services.name(e.id)) {
            service_status(groups, items, e.id, status, to_node, |item| {
                native.remove(&item.native);
            });
        }
    }
    if !group_news.is_empty() {
        groups.apply_to_node(group_news, to_node, items, |item| {
            native.remove(&item.native);
        });
    }
}

/// A provider's RWF field list as the node's, in `out` (cleared first). The fields the
/// dictionary leaves out are counted in `skipped`, and the first of them ever is kept
/// in `first_skipped` (the node logs it once). An error if the field list is malformed.
pub(crate) fn provider_fields_to_native(
    dict: &RwfDictionary,
    rwf: &[u8],
    out: &mut Vec<u8>,
    skipped: &mut u64,
    first_skipped: &mut Option<i16>,
) -> Result<(), RwfError> {
    out.clear();
    dict.to_native(rwf, out, |fid| {
        *skipped += 1;
        first_skipped.get_or_insert(fid);
    })
}

/// An RWF state as the node's (stream and data state, the codes the node has, text),
/// for an item whose data state is `was` (RWF's NO_CHANGE keeps it).
pub(crate) fn native_state<'a>(s: &RwfState<'a>, was: DataState) -> State<'a> {
    State {
        stream: match s.stream {
            stream::OPEN => StreamState::Open,
            stream::NON_STREAMING => StreamState::NonStreaming,
            stream::CLOSED_RECOVER => StreamState::ClosedRecover,
            _ => StreamState::Closed,
        },
        data: match s.data {
            data::SUSPECT => DataState::Suspect,
            data::NO_CHANGE => was,
            _ => DataState::Ok,
        },
        code: match s.code {
            code::NOT_FOUND => ncode::NOT_FOUND,
            code::NOT_ENTITLED => ncode::NOT_ENTITLED,
            _ => ncode::NONE,
        },
        text: std::str::from_utf8(s.text).unwrap_or(""),
    }
}
