//! What a subscriber receives: borrowed views for zero-copy dispatch ([`EventRef`]) and
//! owned copies for convenience ([`Event`]).

use tickwire_proto::{
    Ack, DataState, Directory, FieldList, NakCode, Refresh, ServiceState, State, Status,
    StreamState, Update, UpdateType, Value,
};

/// The item a stream event belongs to.
#[derive(Debug, Clone, Copy)]
pub struct ItemRef<'a> {
    pub stream: u32,
    pub service: &'a str,
    pub name: &'a str,
}

/// An event borrowed from the receive buffer; valid during the dispatch callback.
#[derive(Debug)]
pub enum EventRef<'a> {
    Refresh(ItemRef<'a>, Refresh<'a>),
    Update(ItemRef<'a>, Update<'a>),
    /// Stream state change. Stream 0 is the connection itself.
    Status(ItemRef<'a>, Status<'a>),
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
    pub fn from_list(list: FieldList<'_>) -> Self {
        Fields(list.as_bytes().to_vec())
    }
    pub fn list(&self) -> FieldList<'_> {
        FieldList::from_trusted(&self.0)
    }
    pub fn iter(&self) -> impl Iterator<Item = (i16, Value<'_>)> {
        self.list().iter()
    }
    pub fn get(&self, fid: i16) -> Option<Value<'_>> {
        self.list().get(fid)
    }
    pub fn len(&self) -> usize {
        self.list().len()
    }
    pub fn is_empty(&self) -> bool {
        self.list().is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedState {
    pub stream: StreamState,
    pub data: DataState,
    pub code: u16,
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
    Refresh {
        stream: u32,
        service: String,
        name: String,
        seq: u32,
        complete: bool,
        solicited: bool,
        state: OwnedState,
        fields: Fields,
    },
    Update {
        stream: u32,
        service: String,
        name: String,
        seq: u32,
        update_type: UpdateType,
        conflation_count: u16,
        do_not_conflate: bool,
        fields: Fields,
    },
    Status {
        stream: u32,
        service: String,
        name: String,
        state: OwnedState,
    },
    Directory(Vec<(String, ServiceState)>),
    /// The answer to a post: accepted when `nak` is `None`.
    Ack {
        stream: u32,
        post_id: u32,
        nak: Option<NakCode>,
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
