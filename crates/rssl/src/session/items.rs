//! MarketPrice item requests: streaming and snapshot requests, views, batches, pauses
//! and reissues as the node's Requests; closes, and the node's item statuses back.

use super::{
    rwf_code, rwf_data_state, rwf_stream_state, ItemStream, Outbox, Session, MAX_REPLACED,
};
use crate::rwf::container::{ArrayIter, ElementIter};
use crate::rwf::msg::{code, domain, put_status, request, stream, Msg, MsgKey, RwfState};
use crate::rwf::primitive::{self, dt};
use crate::rwf::RwfError;
use std::sync::Arc;
use tickwire_proto::{Message, Request, ServiceState, State, View};

/// What an item request asks of each item it opens (a batch names several items).
struct ItemRequest<'a> {
    service_id: u16,
    service: &'a str,
    streaming: bool,
    private: bool,
    view: Option<Arc<[i16]>>,
    paused: bool,
}

/// Batch and view element names.
const EL_ITEM_LIST: &[u8] = b":ItemList";
const EL_VIEW_TYPE: &[u8] = b":ViewType";
const EL_VIEW_DATA: &[u8] = b":ViewData";
/// `:ViewType` 1: a list of field ids.
const VIEW_FIELD_IDS: u64 = 1;

impl Session {
    pub(super) fn on_item_request(
        &mut self,
        m: &Msg<'_>,
        to_node: &mut Vec<u8>,
        out: &mut impl Outbox,
    ) {
        let mut key = m.key.clone().unwrap_or_default();
        let streaming = m.flags & request::STREAMING != 0;
        let private = m.flags & request::PRIVATE_STREAM != 0;
        let paused = m.flags & request::PAUSE != 0;
        // A reissue (a request on an open item stream) may leave out what it keeps.
        let open = self
            .by_rssl
            .get(&m.stream_id)
            .and_then(|n| self.streams.get(n))
            .filter(|_| m.flags & request::HAS_BATCH == 0);
        if let Some(why) = open.and_then(|s| reissue_mismatch(s, &key, private)) {
            // As the SDK's providers answer: the stream is the item's, not another's.
            let text = format!("item request rejected for stream id {}: {why}", m.stream_id);
            self.refuse(out, to_node, m, code::USAGE_ERROR, &text);
            return;
        }
        let reissued = open.map(|s| (s.service_id, s.name.clone()));
        if let Some((id, name)) = &reissued {
            key.service_id = key.service_id.or(Some(*id));
            if key.name.is_none() {
                key.name = Some(name);
            }
        }
        let key = key;
        let Some(service_id) = key.service_id else {
            self.refuse(
                out,
                to_node,
                m,
                code::SOURCE_UNKNOWN,
                "the request names no service id (see the source directory)",
            );
            return;
        };
        let Some(service) = self
            .service(service_id)
            .filter(|s| s.state != ServiceState::Removed)
        else {
            self.refuse(
                out,
                to_node,
                m,
                code::SOURCE_UNKNOWN,
                &format!("service id {service_id} is not in the source directory"),
            );
            return;
        };
        let service_name = service.name.clone();
        let mut view: Option<Vec<i16>> = None;
        let mut batch: Vec<Vec<u8>> = Vec::new();
        if m.flags & (request::HAS_VIEW | request::HAS_BATCH) != 0 {
            if let Err(e) = parse_request_payload(m, &mut view, &mut batch, self.cfg.max_batch) {
                self.refuse(
                    out,
                    to_node,
                    m,
                    code::INVALID_ARGUMENT,
                    &format!("malformed request payload: {e}"),
                );
                return;
            }
            // A view in a batch's payload counts only when the request says so (RWF:
            // without HAS_VIEW, no view).
            if m.flags & request::HAS_VIEW == 0 {
                view = None;
            }
            if m.flags & request::HAS_VIEW != 0 && view.is_none() {
                self.refuse(
                    out,
                    to_node,
                    m,
                    code::INVALID_VIEW,
                    "a view request needs :ViewType 1 and :ViewData (field ids)",
                );
                return;
            }
        }
        // A reissue that wants no refresh changes the stream where it stands: its pause,
        // and its view (RWF: without `HAS_VIEW`, every field), which the node changes
        // in place; no image comes.
        let view: Option<Arc<[i16]>> = view.map(Into::into);
        if reissued.is_some() && m.flags & request::NO_REFRESH != 0 {
            self.change_in_place(m.stream_id, &service_name, view, paused, to_node);
            return;
        }
        if m.flags & request::HAS_BATCH != 0 {
            // Each item's request to the node carries the view: what one batch may make
            // of it is held to what a large message would carry.
            let fields = batch
                .len()
                .saturating_mul(view.as_ref().map_or(0, |v| v.len()));
            if fields > tickwire_proto::message::MAX_BATCH_VIEW_FIELDS {
                self.refuse(
                    out,
                    to_node,
                    m,
                    code::TOO_MANY_ITEMS,
                    &format!(
                        "a batch of {} items with a view of {} fields names {fields} fields in all, more than {}: split the batch",
                        batch.len(),
                        view.as_ref().map_or(0, |v| v.len()),
                        tickwire_proto::message::MAX_BATCH_VIEW_FIELDS
                    ),
                );
                return;
            }
        }
        let item_req = ItemRequest {
            service_id,
            service: &service_name,
            streaming,
            private,
            view,
            paused,
        };
        if m.flags & request::HAS_BATCH != 0 {
            if batch.len() > self.cfg.max_batch {
                self.refuse(
                    out,
                    to_node,
                    m,
                    code::TOO_MANY_ITEMS,
                    &format!(
                        "a batch of more than {} items exceeds the limit",
                        self.cfg.max_batch
                    ),
                );
                return;
            }
            // The batch's own stream closes; each item gets the ids that follow it, which
            // must stay a consumer's (positive) ids.
            if i64::from(m.stream_id) + batch.len() as i64 > i64::from(i32::MAX) {
                self.refuse(
                    out,
                    to_node,
                    m,
                    code::TOO_MANY_ITEMS,
                    &format!(
                        "a batch of {} items on stream {} would number its items past stream id {}",
                        batch.len(),
                        m.stream_id,
                        i32::MAX
                    ),
                );
                return;
            }
            let text = format!(
                "batch of {} items opened on streams {} and on",
                batch.len(),
                m.stream_id as i64 + 1
            );
            // A batch on an item's open stream closes that item too, in the node.
            self.on_close(m.stream_id, to_node);
            self.close_stream(out, m.domain, m.stream_id, code::NONE, &text);
            for (i, name) in batch.iter().enumerate() {
                let sid = m.stream_id + 1 + i as i32;
                if let Err(e) = self.open_item(sid, name, &item_req, to_node) {
                    self.close_stream(out, m.domain, sid, code::INVALID_ARGUMENT, &e);
                }
            }
            return;
        }
        let Some(name) = key.name else {
            self.refuse(
                out,
                to_node,
                m,
                code::INVALID_ARGUMENT,
                "the request names no item",
            );
            return;
        };
        if let Err(e) = self.open_item(m.stream_id, name, &item_req, to_node) {
            self.close_stream(out, m.domain, m.stream_id, code::INVALID_ARGUMENT, &e);
        }
    }

    /// Asks the node for the item `name` on the consumer's stream `rssl`; an error is
    /// what the consumer is told (nothing was asked of the node).
    fn open_item(
        &mut self,
        rssl: i32,
        name: &[u8],
        req: &ItemRequest<'_>,
        to_node: &mut Vec<u8>,
    ) -> Result<(), String> {
        // A request on an open stream changes it (a new view, say): the node's stream
        // is replaced, and the consumer's goes on.
        let replaced = self.replace(rssl, to_node);
        // Past a wrap, the ids still open, or with posts waiting, are skipped.
        let native = loop {
            let n = self.next_native;
            self.next_native = n.wrapping_add(1).max(1);
            if !self.streams.contains_key(&n) && !self.pending_posts.has_stream(n) {
                break n;
            }
        };
        let name_text = String::from_utf8_lossy(name);
        let request = Message::Request(Request {
            stream_id: native,
            streaming: req.streaming,
            service: req.service,
            name: &name_text,
            view: req.view.as_deref().map(View::Fids),
            refresh: true,
        });
        // A name whose bytes are not UTF-8 grows as it is made text (each byte that is
        // not, three): it may no longer fit a message.
        if let Err(e) = request.encode(to_node) {
            return Err(format!("the request cannot be passed on: {e}"));
        }
        self.by_rssl.insert(rssl, native);
        self.streams.insert(
            native,
            ItemStream {
                rssl,
                service_id: req.service_id,
                name: name.to_vec(),
                streaming: req.streaming,
                private: req.private,
                paused: req.paused,
                view: req.view.clone(),
                replaced,
            },
        );
        Ok(())
    }

    /// Closes the node's stream of the consumer's open stream `rssl`, which a request
    /// on it replaces: its posts still waiting keep their way back to the consumer's
    /// stream. Returns the node's streams of `rssl` with posts waiting.
    fn replace(&mut self, rssl: i32, to_node: &mut Vec<u8>) -> Vec<u32> {
        let Some(native) = self.by_rssl.remove(&rssl) else {
            return Vec::new();
        };
        let _ = Message::Close { stream_id: native }.encode(to_node);
        let Some(s) = self.streams.remove(&native) else {
            return Vec::new();
        };
        let mut replaced = s.replaced;
        replaced.push(native);
        replaced.retain(|&n| self.pending_posts.has_stream(n));
        // A stream reissued over and over while its posts wait keeps the latest few:
        // the posts of older node streams get no Ack, and a reissue costs no more.
        let past = replaced.len().saturating_sub(MAX_REPLACED);
        for n in replaced.drain(..past) {
            self.pending_posts.forget_stream(n);
        }
        replaced
    }

    /// A `NO_REFRESH` reissue on the open stream `rssl`: its pause is taken, and a view
    /// other than the stream's is sent to the node as a request without a refresh.
    fn change_in_place(
        &mut self,
        rssl: i32,
        service: &str,
        view: Option<Arc<[i16]>>,
        paused: bool,
        to_node: &mut Vec<u8>,
    ) {
        let Some(&native) = self.by_rssl.get(&rssl) else {
            return;
        };
        let Some(s) = self.streams.get_mut(&native) else {
            return;
        };
        s.paused = paused;
        if s.view == view {
            return;
        }
        let name = String::from_utf8_lossy(&s.name);
        let request = Message::Request(Request {
            stream_id: native,
            streaming: s.streaming,
            service,
            name: &name,
            view: view.as_deref().map(View::Fids),
            refresh: false,
        });
        if request.encode(to_node).is_ok() {
            s.view = view;
        }
    }

    pub(super) fn on_close(&mut self, rssl: i32, to_node: &mut Vec<u8>) {
        if let Some(native) = self.by_rssl.remove(&rssl) {
            self.forget(native);
            let _ = Message::Close { stream_id: native }.encode(to_node);
        }
    }

    /// The consumer's stream on the node's `native` is gone: so are its posts' Acks.
    pub(super) fn forget(&mut self, native: u32) {
        if let Some(s) = self.streams.remove(&native) {
            self.by_rssl.remove(&s.rssl);
            self.pending_posts.forget_stream(native);
            for n in s.replaced {
                self.pending_posts.forget_stream(n);
            }
        }
    }

    /// The node's state of its item stream `native`, to the consumer as a StatusMsg;
    /// a stream it ends is forgotten.
    pub(super) fn item_status(&mut self, native: u32, state: &State<'_>, out: &mut impl Outbox) {
        let Some(s) = self.streams.get(&native) else {
            return;
        };
        let state = RwfState {
            // Open, even for a snapshot: the node still owes its image (its service is
            // down, say), and RWF's NON_STREAMING would end the stream.
            stream: rwf_stream_state(state.stream, true),
            data: rwf_data_state(state.data),
            code: rwf_code(state.code),
            text: state.text.as_bytes(),
        };
        let (rssl, private) = (s.rssl, s.private);
        self.buf.clear();
        put_status(
            &mut self.buf,
            domain::MARKET_PRICE,
            rssl,
            &state,
            None,
            private,
        );
        out.send(&self.buf);
        if state.stream != stream::OPEN {
            self.forget(native);
        }
    }
}

/// Why a reissue on the open stream `open` cannot be taken as one: its key names another
/// item or service, or it adds the private flag (both name another stream). A reissue
/// may leave its key out; what it names must be the stream's.
fn reissue_mismatch(open: &ItemStream, key: &MsgKey<'_>, private: bool) -> Option<String> {
    if let Some(id) = key.service_id.filter(|&id| id != open.service_id) {
        return Some(format!(
            "the stream is open on service id {}, not {id}; a reissue cannot change its key",
            open.service_id
        ));
    }
    if let Some(name) = key.name.filter(|&n| n != open.name.as_slice()) {
        return Some(format!(
            "the stream is open for {:?}, not {:?}; a reissue cannot change its key",
            String::from_utf8_lossy(&open.name),
            String::from_utf8_lossy(name)
        ));
    }
    if private && !open.private {
        return Some("a reissue cannot make an open stream private".to_owned());
    }
    None
}

/// The view and batch a request's element list carries; a batch's names are taken up
/// to one past `max_batch` (enough to refuse it, without copying the rest).
fn parse_request_payload(
    m: &Msg<'_>,
    view: &mut Option<Vec<i16>>,
    batch: &mut Vec<Vec<u8>>,
    max_batch: usize,
) -> Result<(), RwfError> {
    if m.container != dt::ELEMENT_LIST {
        return Err(RwfError::invalid(
            "a request",
            "its payload is not an element list",
        ));
    }
    let mut view_type = None;
    let mut view_data = None;
    for e in ElementIter::new(m.payload)? {
        let e = e?;
        match e.name {
            EL_ITEM_LIST if e.data_type == dt::ARRAY => {
                for item in ArrayIter::new(e.value)?.take(max_batch.saturating_add(1)) {
                    batch.push(item?.to_vec());
                }
            }
            EL_VIEW_TYPE => view_type = e.uint(),
            EL_VIEW_DATA if e.data_type == dt::ARRAY => view_data = Some(e.value),
            _ => {}
        }
    }
    if let (Some(VIEW_FIELD_IDS) | None, Some(data)) = (view_type, view_data) {
        let mut fids = Vec::new();
        for item in ArrayIter::new(data)? {
            // Blank names no field (a field id 0 would be taken for one).
            let Some(v) = primitive::int(item?)? else {
                return Err(RwfError::invalid("a view", "a blank field id"));
            };
            fids.push(
                i16::try_from(v)
                    .map_err(|_| RwfError::invalid("a view", format!("field id {v}")))?,
            );
        }
        if fids.len() > tickwire_proto::message::MAX_VIEW_FIDS {
            return Err(RwfError::invalid(
                "a view",
                format!(
                    "{} field ids (at most {})",
                    fids.len(),
                    tickwire_proto::message::MAX_VIEW_FIDS
                ),
            ));
        }
        *view = Some(fids);
    }
    Ok(())
}
