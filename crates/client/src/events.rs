//! What a subscriber receives: borrowed views for zero-copy dispatch ([`EventRef`]) and
//! owned copies for convenience ([`Event`]).

use tickwire_proto::{
    Ack, DataState, Directory, FieldList, NakCode, Refresh, ServiceState, State, Status,
    StreamState, Update, UpdateType, Value,
};

/// The item a stream event belongs to.
#[derive(Debug, Clone, Copy)]
pub struct ItemRef<'a> {
    /// The stream's id.
    pub stream: u32,
    /// The item's service.
    pub service: &'a str,
    /// The item's name.
    pub name: &'a str,
}

/// An event borrowed from the receive buffer; valid during the dispatch callback.
#[derive(Debug)]
pub enum EventRef<'a> {
    /// An image of the item.
    Refresh(ItemRef<'a>, Refresh<'a>),
    /// An update of the item.
    Update(ItemRef<'a>, Update<'a>),
    /// Stream state change. Stream 0 is the connection itself.
    Status(ItemRef<'a>, Status<'a>),
    /// The services the node has, and whether each is up.
    Directory(&'a Directory<'a>),
    /// The answer to a post that asked for one: `stream` and `post_id` as posted.
    Ack(Ack<'a>),
    /// A file-transfer message (`tickwire-files`'s wire format, docs/FILES.md): offers
    /// and chunks down a node tree, answers to `tickwire files`.
    Files(&'a [u8]),
}

/// A field list owned by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fields(Vec<u8>);

impl Fields {
    /// A copy of a field list.
    pub fn from_list(list: FieldList<'_>) -> Self {
        Fields(list.as_bytes().to_vec())
    }
    /// The fields as a list.
    pub fn list(&self) -> FieldList<'_> {
        FieldList::from_trusted(&self.0)
    }
    /// Each field id and value.
    pub fn iter(&self) -> impl Iterator<Item = (i16, Value<'_>)> {
        self.list().iter()
    }
    /// A field's value.
    pub fn get(&self, fid: i16) -> Option<Value<'_>> {
        self.list().get(fid)
    }
    /// How many fields.
    pub fn len(&self) -> usize {
        self.list().len()
    }
    /// No field.
    pub fn is_empty(&self) -> bool {
        self.list().is_empty()
    }
}

/// A stream's state, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedState {
    /// The stream's state (open, closed...).
    pub stream: StreamState,
    /// The data's state (ok, suspect).
    pub data: DataState,
    /// The status code.
    pub code: u16,
    /// Why, for people.
    pub text: String,
}

impl From<&State<'_>> for OwnedState {
    fn from(s: &State<'_>) -> Self {
        OwnedState {
            stream: s.stream,
            data: s.data,
            code: s.code,
            text: s.text.to_string(),
        }
    }
}

/// An owned event, as returned by [`crate::Subscriber::next_event`].
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// An image of the item.
    Refresh {
        /// The stream's id.
        stream: u32,
        /// The item's service.
        service: String,
        /// The item's name.
        name: String,
        /// The item's sequence number.
        seq: u32,
        /// The last part of the image.
        complete: bool,
        /// An answer to this request (not a re-image for everyone).
        solicited: bool,
        /// The stream's state.
        state: OwnedState,
        /// The image.
        fields: Fields,
    },
    /// An update of the item.
    Update {
        /// The stream's id.
        stream: u32,
        /// The item's service.
        service: String,
        /// The item's name.
        name: String,
        /// The item's sequence number.
        seq: u32,
        /// What kind of update (quote, trade...).
        update_type: UpdateType,
        /// Updates merged into this one (conflation).
        conflation_count: u16,
        /// The publisher asked that it not be merged.
        do_not_conflate: bool,
        /// The update's fields.
        fields: Fields,
    },
    /// The stream's state changed.
    Status {
        /// The stream's id (0: the connection).
        stream: u32,
        /// The item's service.
        service: String,
        /// The item's name.
        name: String,
        /// The new state.
        state: OwnedState,
    },
    /// The services the node has, and whether each is up.
    Directory(Vec<(String, ServiceState)>),
    /// The answer to a post: accepted when `nak` is `None`.
    Ack {
        /// The stream posted on (0 for an off-stream post).
        stream: u32,
        /// The post's number.
        post_id: u32,
        /// Why it was refused, if it was.
        nak: Option<NakCode>,
        /// The publisher's text.
        text: String,
    },
    /// A file-transfer message (docs/FILES.md).
    Files(Vec<u8>),
}

impl From<&EventRef<'_>> for Event {
    fn from(e: &EventRef<'_>) -> Self {
        match e {
            EventRef::Refresh(i, r) => Event::Refresh {
                stream: i.stream,
                service: i.service.to_string(),
                name: i.name.to_string(),
                seq: r.seq,
                complete: r.complete,
                solicited: r.solicited,
                state: (&r.state).into(),
                fields: Fields::from_list(r.fields),
            },
            EventRef::Update(i, u) => Event::Update {
                stream: i.stream,
                service: i.service.to_string(),
                name: i.name.to_string(),
                seq: u.seq,
                update_type: u.update_type,
                conflation_count: u.conflation_count,
                do_not_conflate: u.do_not_conflate,
                fields: Fields::from_list(u.fields),
            },
            EventRef::Status(i, s) => Event::Status {
                stream: i.stream,
                service: i.service.to_string(),
                name: i.name.to_string(),
                state: (&s.state).into(),
            },
            EventRef::Directory(d) => Event::Directory(
                d.services
                    .iter()
                    .map(|s| (s.name.to_string(), s.state))
                    .collect(),
            ),
            EventRef::Ack(a) => Event::Ack {
                stream: a.stream_id,
                post_id: a.post_id,
                nak: a.nak,
                text: a.text.to_string(),
            },
            EventRef::Files(body) => Event::Files(body.to_vec()),
        }
    }
}
