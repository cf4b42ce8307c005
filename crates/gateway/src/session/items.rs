//! A client's item requests (single, batch, view, snapshot, replay) and closes: its IDs
//! kept apart from the node's stream ids, each request turned into the node's Request.

use super::json::{
    flag, parse_replay, write_batch_status, write_error, write_refusal, write_status,
};
use super::{ItemStream, JsonOut, LoginState, Session, MAX_BATCH};
use serde_json::Value as Json;
use std::sync::Arc;
use tickwire_proto::message::MAX_BATCH_VIEW_FIELDS;
use tickwire_proto::{
    code, DataState, Message, Replay, ReplayFrom, Request, ServiceState, StreamState, View,
};

impl Session {
    pub(super) fn resolve_service(&self, s: Option<&Json>) -> Result<String, String> {
        match s {
            None | Some(Json::Null) => self
                .cfg
                .default_service
                .clone()
                .or_else(|| {
                    // Not one the user may no longer read (or that went): its Delete was
                    // sent, and a request without a Service would be refused there.
                    self.services
                        .iter()
                        .zip(&self.services.states)
                        .find(|&(s, &state)| {
                            Some(s) != self.cfg.node_service.as_deref()
                                && state != ServiceState::Removed
                        })
                        .map(|(s, _)| s.to_string())
                })
                .ok_or_else(|| "no service given and the node has none".to_string()),
            Some(Json::String(name)) => Ok(name.clone()),
            Some(Json::Number(n)) => n
                .as_u64()
                .and_then(|i| i.checked_sub(1))
                .and_then(|i| self.services.get(i as usize).map(str::to_string))
                .ok_or_else(|| format!("unknown service id {n}")),
            Some(other) => Err(format!("invalid Service {other}")),
        }
    }

    pub(super) fn on_item_request(
        &mut self,
        id: i64,
        obj: &serde_json::Map<String, Json>,
        to_node: &mut Vec<u8>,
        out: &mut JsonOut,
        text: &dyn Fn() -> String,
    ) {
        if self.logged_in().is_none() {
            write_refusal(
                out,
                id,
                false,
                code::PROTOCOL,
                "login required before any other message",
            );
            return;
        }
        let key = obj.get("Key");
        let service = match self.resolve_service(key.and_then(|k| k.get("Service"))) {
            Ok(s) => s,
            Err(why) => {
                self.refuse_request(id, code::NOT_FOUND, &why, to_node, out);
                return;
            }
        };
        let (streaming, key_in_updates, refresh) = match (
            flag(obj, "Streaming", true),
            flag(obj, "KeyInUpdates", true),
            flag(obj, "Refresh", true),
        ) {
            (Ok(s), Ok(k), Ok(r)) => (s, k, r),
            (Err(why), _, _) | (_, Err(why), _) | (_, _, Err(why)) => {
                write_error(out, id, &why, &text());
                return;
            }
        };
        let view = match obj.get("View") {
            None | Some(Json::Null) => None,
            Some(Json::Array(fields)) => {
                let mut fids = Vec::with_capacity(fields.len());
                for f in fields {
                    let fid = match f {
                        Json::String(name) => self.cfg.dictionary.fid(name),
                        Json::Number(n) => n
                            .as_i64()
                            .and_then(|n| i16::try_from(n).ok())
                            .filter(|&fid| self.cfg.dictionary.name(fid).is_some()),
                        _ => None,
                    };
                    match fid {
                        Some(fid) => fids.push(fid),
                        None => {
                            write_error(
                                out,
                                id,
                                &format!("JSON Unexpected FID. Received {f} for key 'View'"),
                                &text(),
                            );
                            return;
                        }
                    }
                }
                Some(fids)
            }
            Some(_) => {
                write_error(
                    out,
                    id,
                    "JSON Converter Token Type error: expected an array for key 'View'",
                    &text(),
                );
                return;
            }
        };
        // Tickwire's extension: the item's history first (docs/WEBSOCKET.md).
        let replay = match obj.get("Replay").map(parse_replay) {
            None => None,
            Some(Ok(from)) if view.is_none() && streaming => Some(from),
            Some(Ok(_)) => {
                write_error(
                    out,
                    id,
                    "a Replay request is streaming and takes no View",
                    &text(),
                );
                return;
            }
            Some(Err(why)) => {
                write_error(out, id, &why, &text());
                return;
            }
        };
        match key.and_then(|k| k.get("Name")) {
            Some(Json::String(name)) => {
                if let Some(taken) = self.reserved_id_in(id, id) {
                    let why = format!("ID {taken} is the login's or the directory's stream");
                    write_error(out, id, &why, &text());
                    return;
                }
                let name = name.clone();
                // `"Refresh": false` on an open ID changes its view where it stands.
                if !refresh
                    && replay.is_none()
                    && self.change_in_place(id, &service, &name, view.as_deref(), to_node)
                {
                    return;
                }
                self.open_item(
                    id,
                    &service,
                    &name,
                    view.map(Arc::from),
                    streaming,
                    key_in_updates,
                    replay,
                    to_node,
                    out,
                );
            }
            Some(Json::Array(names)) => {
                // Item i takes ID id + 1 + i: an entry skipped would move every later
                // item onto another ID than the client counts.
                let Some(names) = names
                    .iter()
                    .map(Json::as_str)
                    .collect::<Option<Vec<&str>>>()
                else {
                    write_error(
                        out,
                        id,
                        "JSON Converter Token Type error: a batch's 'Name' holds names (strings) only",
                        &text(),
                    );
                    return;
                };
                if names.len() > MAX_BATCH {
                    let why = format!(
                        "a batch of {} names is more than the {MAX_BATCH} a request may hold",
                        names.len()
                    );
                    write_error(out, id, &why, &text());
                    return;
                }
                // Each item's request to the node carries the view.
                let fields = names
                    .len()
                    .saturating_mul(view.as_ref().map_or(0, Vec::len));
                if fields > MAX_BATCH_VIEW_FIELDS {
                    let why = format!(
                        "a batch of {} names with a view of {} fields names {fields} fields in all, more than {MAX_BATCH_VIEW_FIELDS}: split the batch",
                        names.len(),
                        view.as_ref().map_or(0, Vec::len)
                    );
                    write_error(out, id, &why, &text());
                    return;
                }
                // Item i takes ID id + 1 + i: each must exist and be no other stream's.
                let ids = id.checked_add(1).zip(id.checked_add(names.len() as i64));
                let Some((first, last)) = ids else {
                    write_error(
                        out,
                        id,
                        "a batch's item IDs would pass the largest ID",
                        &text(),
                    );
                    return;
                };
                // The batch's own ID too: its Status closes it.
                if let Some(taken) = self.reserved_id_in(id, last) {
                    let why = format!(
                        "a batch's IDs would take ID {taken}, the login's or the directory's"
                    );
                    write_error(out, id, &why, &text());
                    return;
                }
                // An item open on the batch's ID ends with it.
                self.close_item_id(id, to_node);
                write_batch_status(out, id, names.len(), "items from Batch Request");
                let view: Option<Arc<[i16]>> = view.map(Arc::from);
                for (i, name) in names.iter().enumerate() {
                    self.open_item(
                        first + i as i64,
                        &service,
                        name,
                        view.clone(),
                        streaming,
                        key_in_updates,
                        replay,
                        to_node,
                        out,
                    );
                }
            }
            _ => write_error(
                out,
                id,
                "JSON Missing required key 'Name' in 'Key'",
                &text(),
            ),
        }
    }

    /// A request without a refresh on the open ID `json_id` of the same item: the node's
    /// stream takes `view` where it stands (docs/PROTOCOL.md 6.8), no image comes. False
    /// when the ID is not open for that item (such a request opens the stream, with its
    /// image, as any other).
    pub(super) fn change_in_place(
        &mut self,
        json_id: i64,
        service: &str,
        name: &str,
        view: Option<&[i16]>,
        to_node: &mut Vec<u8>,
    ) -> bool {
        let Some(&sid) = self.by_json.get(&json_id) else {
            return false;
        };
        // Another item on the ID is a request for it, with its image, as without
        // `"Refresh": false`.
        let Some(s) = self
            .streams
            .get_mut(&sid)
            .filter(|s| s.service == service && s.name == name)
        else {
            return false;
        };
        let request = Message::Request(Request {
            stream_id: sid,
            streaming: s.streaming,
            service,
            name,
            view: view.map(View::Fids),
            refresh: false,
        });
        if request.encode(to_node).is_err() {
            return false;
        }
        s.view = view.map(Arc::from);
        true
    }

    /// The login's or the open directory's ID, if it is in `first..=last`: an item may
    /// not take it (a Close of the item would end the login).
    pub(super) fn reserved_id_in(&self, first: i64, last: i64) -> Option<i64> {
        let login = match self.login {
            LoginState::Pending { id, .. } | LoginState::Open { id } => Some(id),
            LoginState::None => None,
        };
        // A directory asked before the login holds its ID until it opens.
        let directories = self.directories.iter().map(|d| d.id);
        let asked_early = self.directory_asked_early.iter().map(|(id, _)| *id);
        login
            .into_iter()
            .chain(directories)
            .chain(asked_early)
            .find(|id| (first..=last).contains(id))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn open_item(
        &mut self,
        json_id: i64,
        service: &str,
        name: &str,
        view: Option<Arc<[i16]>>,
        streaming: bool,
        key_in_updates: bool,
        replay: Option<ReplayFrom>,
        to_node: &mut Vec<u8>,
        out: &mut JsonOut,
    ) {
        // A request on an open ID for the same item and mode re-issues it (new view,
        // fresh image) on the same stream. For another item or mode (or a replay) the
        // old stream is closed at the node and a new one opened: what was still on its
        // way for the old one is dropped here, not shown under the new item's name, and
        // the old one cannot stay open where no Close reaches it.
        let same =
            |s: &ItemStream| s.service == service && s.name == name && s.streaming == streaming;
        let sid = match self.by_json.get(&json_id).copied() {
            Some(sid) if replay.is_none() && self.streams.get(&sid).is_some_and(same) => sid,
            old => {
                if let Some(old) = old {
                    self.by_json.remove(&json_id);
                    self.streams.remove(&old);
                    let _ = Message::Close { stream_id: old }.encode(to_node);
                }
                let sid = self.next_sid;
                self.next_sid = self.next_sid.wrapping_add(1).max(1);
                sid
            }
        };
        let msg = match replay {
            Some(from) => Message::Replay(Replay {
                stream_id: sid,
                from,
                service,
                name,
            }),
            None => Message::Request(Request {
                stream_id: sid,
                streaming,
                service,
                name,
                view: view.as_deref().map(View::Fids),
                refresh: true,
            }),
        };
        if let Err(e) = msg.encode(to_node) {
            // A reissue that cannot be sent closes the stream it would have changed:
            // the client is told it is closed, so it is, in the node too.
            if self.by_json.remove(&json_id).is_some() {
                self.streams.remove(&sid);
                let _ = Message::Close { stream_id: sid }.encode(to_node);
            }
            write_status(
                out,
                json_id,
                false,
                Some((service, name)),
                StreamState::Closed,
                DataState::Suspect,
                code::MALFORMED,
                &format!("request cannot be sent: {e}"),
            );
            return;
        }
        self.by_json.insert(json_id, sid);
        self.streams.insert(
            sid,
            ItemStream {
                json_id,
                service: service.to_string(),
                name: name.to_string(),
                view,
                streaming,
                key_in_updates,
            },
        );
    }

    pub(super) fn on_close(&mut self, id: Option<&Json>, to_node: &mut Vec<u8>, out: &mut JsonOut) {
        let ids: Option<Vec<i64>> = match id {
            Some(Json::Number(n)) => n.as_i64().map(|i| vec![i]),
            Some(Json::Array(a)) => a.iter().map(Json::as_i64).collect(),
            None => {
                write_error(out, 0, "JSON Missing required key 'ID'", "Close");
                return;
            }
            _ => None,
        };
        // An ID that is no integer (1.5, "x", one in a batch) closes nothing: said,
        // rather than a batch whose count is off or no answer at all.
        let Some(ids) = ids else {
            write_error(
                out,
                0,
                "JSON Converter Token Type error: expected an integer or an array of integers for key 'ID'",
                "Close",
            );
            return;
        };
        for &id in &ids {
            if self.logged_in() == Some(id) {
                // Logout: every stream closes with it.
                let sids: Vec<u32> = self.streams.keys().copied().collect();
                for sid in sids {
                    let _ = Message::Close { stream_id: sid }.encode(to_node);
                }
                self.streams.clear();
                self.by_json.clear();
                self.login = LoginState::None;
                self.finished = true;
                continue;
            }
            self.close_item_id(id, to_node);
            // A directory's stream: no more updates on it.
            self.directories.retain(|d| d.id != id);
            // One asked before the login was answered: it does not open after it.
            self.directory_asked_early.retain(|(d, _)| *d != id);
        }
        if ids.len() > 1 {
            write_batch_status(
                out,
                ids[0],
                ids.len(),
                "stream ids from Batch Close Request",
            );
        }
    }

    /// Refuses a request with a `Closed` Status on `id`: an item stream open on the ID
    /// closes with it (else its updates would go on coming on an ID the client was told
    /// is closed).
    pub(super) fn refuse_request(
        &mut self,
        id: i64,
        c: u16,
        text: &str,
        to_node: &mut Vec<u8>,
        out: &mut JsonOut,
    ) {
        if let Some(taken) = self.reserved_id_in(id, id) {
            // Not on the login's ID (the client would take its login for closed), nor
            // the directory's, which stays open: an Error, as for items there.
            let why = format!("{text} (ID {taken} is the login's or the directory's stream)");
            write_error(out, id, &why, "");
            return;
        }
        self.close_item_id(id, to_node);
        write_refusal(out, id, false, c, text);
    }

    /// Closes the item stream open on client ID `id`, if there is one.
    pub(super) fn close_item_id(&mut self, id: i64, to_node: &mut Vec<u8>) {
        if let Some(sid) = self.by_json.remove(&id) {
            self.streams.remove(&sid);
            let _ = Message::Close { stream_id: sid }.encode(to_node);
        }
    }

    pub(super) fn forget(&mut self, sid: u32) {
        if let Some(s) = self.streams.remove(&sid) {
            self.by_json.remove(&s.json_id);
        }
    }
}
