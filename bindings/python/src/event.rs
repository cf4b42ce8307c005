//! What a Python subscriber receives: one `Event` class for refreshes, updates,
//! statuses and post answers, its attributes `None` where they do not apply.

use crate::values::{fields_to_dict, FieldNames};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tickwire_client::proto::{DataState, NakCode, StreamState, UpdateType};
use tickwire_client::{Event as ClientEvent, OwnedState};

/// A refresh, update, status or ack of one item stream.
#[pyclass(frozen, get_all, module = "tickwire")]
pub struct Event {
    /// "refresh", "update", "status" or "ack".
    #[pyo3(name = "type")]
    pub kind: &'static str,
    pub service: String,
    pub item: String,
    /// The stream's id (what `subscribe` returned for the item).
    pub stream: u32,
    /// Field name -> value (refresh: the whole image, or one part of it when
    /// `complete` is False; update: the fields that changed; otherwise empty).
    pub fields: Py<PyDict>,
    /// The message's sequence number (refresh and update).
    pub seq: Option<u32>,
    /// Refresh: the last part of the image.
    pub complete: Option<bool>,
    /// Update: "quote", "trade" or "other".
    pub update_type: Option<&'static str>,
    /// Refresh and status: "open", "closed", "closed-recover" or "non-streaming".
    pub stream_state: Option<&'static str>,
    /// Refresh and status: "ok" or "suspect" (the data may be stale: its publisher
    /// or the connection to the node is gone, and the library is recovering it).
    pub data_state: Option<&'static str>,
    /// Refresh, status, ack: the node's status or Nak code (0 when all is well).
    pub code: Option<u16>,
    /// Refresh, status, ack: the node's text (why a stream closed, why a post was refused).
    pub text: Option<String>,
    /// Ack: the post's id, and whether it was accepted.
    pub post_id: Option<u32>,
    pub accepted: Option<bool>,
    /// Ack of a refused post: the WebSocket API's name of its code ("DeniedBySrc", ...).
    pub nak: Option<&'static str>,
}

#[pymethods]
impl Event {
    fn __repr__(&self, py: Python<'_>) -> String {
        let mut s = format!("Event({} {}/{}", self.kind, self.service, self.item);
        if let Some(seq) = self.seq {
            s += &format!(" seq={seq}");
        }
        if let (Some(st), Some(ds)) = (self.stream_state, self.data_state) {
            s += &format!(" {st}/{ds}");
        }
        if let Some(ok) = self.accepted {
            s += &format!(
                " post {} {}",
                self.post_id.unwrap_or(0),
                self.nak.unwrap_or(if ok { "accepted" } else { "refused" })
            );
        }
        if let Some(text) = self.text.as_deref().filter(|t| !t.is_empty()) {
            s += &format!(" {text:?}");
        }
        let fields = self.fields.bind(py);
        if !fields.is_empty() {
            s += &format!(
                " {}",
                fields.str().map(|f| f.to_string()).unwrap_or_default()
            );
        }
        s + ")"
    }

    /// Pickled as its attributes (to cross a `multiprocessing` queue, say).
    fn __reduce__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyDict>,))> {
        let state = PyDict::new(py);
        state.set_item("type", self.kind)?;
        state.set_item("service", &self.service)?;
        state.set_item("item", &self.item)?;
        state.set_item("stream", self.stream)?;
        state.set_item("fields", self.fields.bind(py))?;
        state.set_item("seq", self.seq)?;
        state.set_item("complete", self.complete)?;
        state.set_item("update_type", self.update_type)?;
        state.set_item("stream_state", self.stream_state)?;
        state.set_item("data_state", self.data_state)?;
        state.set_item("code", self.code)?;
        state.set_item("text", &self.text)?;
        state.set_item("post_id", self.post_id)?;
        state.set_item("accepted", self.accepted)?;
        state.set_item("nak", self.nak)?;
        let rebuild = py.import("tickwire._native")?.getattr("_event")?;
        Ok((rebuild, (state,)))
    }
}

/// An event from its pickled attributes ([`Event::__reduce__`]).
#[pyfunction]
pub(crate) fn _event(state: &Bound<'_, PyDict>) -> PyResult<Event> {
    fn get<'py, T: pyo3::conversion::FromPyObjectOwned<'py>>(
        d: &Bound<'py, PyDict>,
        key: &str,
    ) -> PyResult<T> {
        match d.get_item(key)? {
            Some(v) => v.extract().map_err(Into::into),
            None => Err(PyValueError::new_err(format!("an event without {key:?}"))),
        }
    }
    // The names an event holds are the library's own: found again among them.
    fn one_of(
        key: &str,
        name: Option<String>,
        names: impl IntoIterator<Item = &'static str>,
    ) -> PyResult<Option<&'static str>> {
        let Some(name) = name else { return Ok(None) };
        names
            .into_iter()
            .find(|n| *n == name)
            .map(Some)
            .ok_or_else(|| PyValueError::new_err(format!("{name:?} is not an event's {key}")))
    }
    let every_u8 = || 0..=u8::MAX;
    let kind = one_of(
        "type",
        Some(get(state, "type")?),
        ["refresh", "update", "status", "ack"],
    )?
    .expect("given");
    Ok(Event {
        kind,
        service: get(state, "service")?,
        item: get(state, "item")?,
        stream: get(state, "stream")?,
        fields: get::<Bound<'_, PyDict>>(state, "fields")?.unbind(),
        seq: get(state, "seq")?,
        complete: get(state, "complete")?,
        update_type: one_of(
            "update_type",
            get(state, "update_type")?,
            every_u8().map(|v| UpdateType::from_u8(v).name()),
        )?,
        stream_state: one_of(
            "stream_state",
            get(state, "stream_state")?,
            [
                StreamState::Open,
                StreamState::Closed,
                StreamState::ClosedRecover,
                StreamState::NonStreaming,
            ]
            .map(StreamState::name),
        )?,
        data_state: one_of(
            "data_state",
            get(state, "data_state")?,
            [DataState::Ok, DataState::Suspect].map(DataState::name),
        )?,
        code: get(state, "code")?,
        text: get(state, "text")?,
        post_id: get(state, "post_id")?,
        accepted: get(state, "accepted")?,
        nak: one_of(
            "nak",
            get(state, "nak")?,
            every_u8().map(|v| NakCode::from_u8(v).name()),
        )?,
    })
}

impl Event {
    fn new(py: Python<'_>, kind: &'static str, stream: u32, service: String, item: String) -> Self {
        Event {
            kind,
            service,
            item,
            stream,
            fields: PyDict::new(py).unbind(),
            seq: None,
            complete: None,
            update_type: None,
            stream_state: None,
            data_state: None,
            code: None,
            text: None,
            post_id: None,
            accepted: None,
            nak: None,
        }
    }

    fn with_state(mut self, state: OwnedState) -> Self {
        self.stream_state = Some(state.stream.name());
        self.data_state = Some(state.data.name());
        self.code = Some(state.code);
        self.text = Some(state.text);
        self
    }

    /// The Python event for a library event; `None` for the directory (a Subscriber
    /// reports services through `services()`) and file-transfer messages.
    pub fn from_client(
        py: Python<'_>,
        e: ClientEvent,
        names: &FieldNames,
    ) -> PyResult<Option<Self>> {
        Ok(Some(match e {
            ClientEvent::Refresh {
                stream,
                service,
                name,
                seq,
                complete,
                state,
                fields,
                ..
            } => {
                let mut ev = Event::new(py, "refresh", stream, service, name).with_state(state);
                ev.fields = fields_to_dict(py, fields.list(), names)?.unbind();
                ev.seq = Some(seq);
                ev.complete = Some(complete);
                ev
            }
            ClientEvent::Update {
                stream,
                service,
                name,
                seq,
                update_type,
                fields,
                ..
            } => {
                let mut ev = Event::new(py, "update", stream, service, name);
                ev.fields = fields_to_dict(py, fields.list(), names)?.unbind();
                ev.seq = Some(seq);
                ev.update_type = Some(update_type.name());
                ev
            }
            ClientEvent::Status {
                stream,
                service,
                name,
                state,
            } => Event::new(py, "status", stream, service, name).with_state(state),
            ClientEvent::Ack {
                stream,
                post_id,
                nak,
                text,
            } => {
                let mut ev = Event::new(py, "ack", stream, String::new(), String::new());
                ev.post_id = Some(post_id);
                ev.accepted = Some(nak.is_none());
                ev.code = Some(nak.map_or(0, |n| u16::from(n.to_u8())));
                ev.nak = nak.map(|n| n.name());
                ev.text = Some(text);
                ev
            }
            // File transfer is not in the Python API (`tickwire files` is the tool).
            ClientEvent::Directory(_) | ClientEvent::Files(_) => return Ok(None),
        }))
    }
}
