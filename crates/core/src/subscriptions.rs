//! Subscriptions: a subscriber's requests (streams, views, snapshots), the items they
//! open or share, and the streams' ends.

use crate::items::{Item, ItemHandle, StreamRef, SubEntry};
use crate::{ConnId, ConnRole, Node, NODE_STREAM_BASE};
use std::sync::Arc;
use std::time::Instant;
use tickwire_auth::Action;
use tickwire_proto::{code, Message, Request, State, Status, View};
use tracing::info;

impl Node {
    /// What a subscriber's stream for `service` must pass to open, a request's or a
    /// replay's (`what`, for the audit log): room under the stream limit, the user's
    /// entitlement, a service the node knows. The service's index, or the code and
    /// text of the refusal.
    pub(crate) fn admit_stream(
        &mut self,
        conn: ConnId,
        service: &str,
        what: &str,
    ) -> Result<usize, (u16, String)> {
        let max = self.cfg.limits.max_streams_per_connection;
        // Replays waiting for their history count: each joins as a stream.
        let open =
            self.conn_mut(conn).map_or(0, |c| c.sub_streams.len()) + self.replays.waiting_of(conn);
        if open >= max {
            return Err((
                code::TOO_MANY_STREAMS,
                format!("stream limit reached: {max} open streams per connection"),
            ));
        }
        if !self.may(conn, Action::Subscribe, service) {
            let text = self.not_entitled(conn, Action::Subscribe, service);
            info!(target: "audit", "{what} refused: {text}");
            return Err((code::NOT_ENTITLED, text));
        }
        self.service_by_name
            .get(service)
            .copied()
            .ok_or_else(|| (code::NOT_FOUND, format!("unknown service {service:?}")))
    }

    /// A subscriber's stream on id 0 (the connection's own): the connection is closed
    /// as a protocol error. True if so.
    pub(crate) fn refuse_stream_zero(&mut self, conn: ConnId, sid: u32) -> bool {
        if sid != 0 {
            return false;
        }
        self.stats.protocol_disconnects += 1;
        self.reject(
            conn,
            code::PROTOCOL,
            "stream id 0 is reserved for the connection",
        );
        true
    }

    pub(crate) fn on_subscriber_request(&mut self, conn: ConnId, req: &Request<'_>) {
        self.stats.requests += 1;
        let sid = req.stream_id;
        if self.refuse_stream_zero(conn, sid) {
            return;
        }
        // Views are kept sorted and without repeats: every field of every update is
        // looked up in them by binary search.
        let view: Option<Arc<[i16]>> = req.view.as_ref().map(|v| {
            let mut fids: Vec<i16> = match v {
                View::Encoded(l) => l.iter().collect(),
                View::Fids(f) => f.to_vec(),
            };
            fids.sort_unstable();
            fids.dedup();
            match &self.last_view {
                Some(last) if **last == *fids => last.clone(),
                _ => {
                    let view: Arc<[i16]> = fids.into();
                    self.last_view = Some(view.clone());
                    view
                }
            }
        });
        if !req.refresh {
            self.change_view_in_place(conn, req, view);
            return;
        }
        // A request on an open stream (or one replaying) re-issues it (a new view, a
        // fresh image).
        self.end_stream(conn, sid);
        let svc = match self.admit_stream(conn, req.service, "request") {
            Ok(svc) => svc,
            Err((c, text)) => {
                self.send(
                    conn,
                    &Message::Status(Status {
                        stream_id: sid,
                        state: State::closed(c, &text),
                    }),
                );
                return;
            }
        };
        let entry = SubEntry {
            conn,
            stream_id: sid,
            view,
            awaiting_refresh: true,
            streaming: req.streaming,
            joined_mid_refresh: false,
        };
        let handle = match self.services[svc].items.get(req.name) {
            Some(&h) => h,
            None => {
                let service = &self.services[svc];
                let service_up = service.publisher.is_some() && service.up;
                if service_up && !service.interactive {
                    let text =
                        format!("item {:?} not found in service {:?}", req.name, req.service);
                    self.send(
                        conn,
                        &Message::Status(Status {
                            stream_id: sid,
                            state: State::closed(code::NOT_FOUND, &text),
                        }),
                    );
                    return;
                }
                let h = self.new_item(svc, req.name);
                self.services[svc].items.insert(req.name.into(), h);
                h
            }
        };
        let cache = self.cfg.cache;
        let service_up = self.services[svc].publisher.is_some() && self.services[svc].up;
        let item = self.items.get_mut(handle).expect("live handle");
        if cache && item.complete {
            // Served from the cache at once.
            let mut entry = entry;
            entry.awaiting_refresh = false;
            let streaming = entry.streaming;
            self.write_image_refresh(handle, &entry, true);
            if streaming {
                self.attach(handle, entry);
            }
            return;
        }
        let mut entry = entry;
        entry.joined_mid_refresh = item.refresh_in_parts;
        self.attach(handle, entry);
        if !service_up {
            let text = format!(
                "service {:?} is down; waiting for its publisher",
                req.service
            );
            self.send_service_down(conn, sid, &text);
            return;
        }
        self.request_from_publisher(handle);
    }

    /// Asks the item's publisher for a (solicited) refresh, once.
    pub(crate) fn request_from_publisher(&mut self, h: ItemHandle) {
        let Some(item) = self.items.get_mut(h) else {
            return;
        };
        if item.refresh_requested {
            return;
        }
        let service = &self.services[item.service];
        let Some(pconn) = service.publisher else {
            return;
        };
        let pub_sid = match item.publisher {
            Some((c, sid)) if c == pconn => sid,
            _ => {
                if !service.interactive {
                    // A non-interactive publisher will push its image itself.
                    return;
                }
                let Some(c) = self.conns[pconn].as_mut() else {
                    return;
                };
                // Node ids count up per connection (dense, so the update path finds
                // them with one load) and wrap within their half of the id space,
                // skipping ids in use; an id is not reused before the wrap, so a late
                // message for a closed stream never lands on another item.
                let mut sid = c.next_node_stream;
                while c.pub_streams.contains_key(sid) {
                    sid = sid.wrapping_add(1).max(NODE_STREAM_BASE);
                }
                c.next_node_stream = sid.wrapping_add(1).max(NODE_STREAM_BASE);
                item.publisher = Some((pconn, sid));
                c.pub_streams.insert(sid, h);
                sid
            }
        };
        item.refresh_requested = true;
        let (svc_name, name) = (service.name.clone(), item.name.clone());
        self.send(
            pconn,
            &Message::Request(Request::streaming(pub_sid, &svc_name, &name)),
        );
    }

    /// Adds a subscriber stream to its item and records where it is.
    /// A new item of service `svc` (the caller lists it in the service's items).
    pub(crate) fn new_item(&mut self, svc: usize, name: &str) -> ItemHandle {
        let mut item = Item::new(svc, name);
        item.journaled =
            self.cfg.journal_updates && self.cfg.journal.takes(&self.services[svc].name);
        self.items.insert(item)
    }

    /// A request without a refresh: the stream open for this item takes the new view
    /// where it stands, so an image still arriving and the updates that follow are cut
    /// to it; nothing else changes and no image is sent. On a stream not open for this
    /// item there is nothing to change: the stream is closed with the reason.
    pub(crate) fn change_view_in_place(
        &mut self,
        conn: ConnId,
        req: &Request<'_>,
        view: Option<Arc<[i16]>>,
    ) {
        let sid = req.stream_id;
        let at = self
            .conns
            .get(conn)
            .and_then(|c| c.as_ref())
            .and_then(|c| c.sub_streams.get(&sid))
            .copied();
        let entry = at.and_then(|at| {
            let item = self.items.get_mut(at.item)?;
            let same = &*item.name == req.name
                && self.services.get(item.service).map(|s| &*s.name) == Some(req.service);
            same.then(|| item.subs.get_mut(at.slot as usize)).flatten()
        });
        if let Some(entry) = entry {
            entry.view = view;
            return;
        }
        // Not open (a replay still reading its history is not yet), or open for
        // another item: it ends, whatever it was.
        self.end_stream(conn, sid);
        let text = format!(
            "the stream is not open for item {:?} of service {:?}: a request without a \
             refresh only changes an open stream",
            req.name, req.service
        );
        self.send(
            conn,
            &Message::Status(Status {
                stream_id: sid,
                state: State::closed(code::NOT_FOUND, &text),
            }),
        );
    }

    pub(crate) fn attach(&mut self, h: ItemHandle, entry: SubEntry) {
        let Some(item) = self.items.get_mut(h) else {
            return;
        };
        let (conn, sid) = (entry.conn, entry.stream_id);
        let slot = item.subs.len() as u32;
        item.subs.push(entry);
        if let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) {
            c.sub_streams.insert(sid, StreamRef { item: h, slot });
        }
    }

    /// Ends a subscriber stream, open or replaying its item's history.
    pub(crate) fn end_stream(&mut self, conn: ConnId, sid: u32) {
        self.unsubscribe(conn, sid);
        self.replay_stream_closed(conn, sid);
    }

    /// Removes one subscriber stream (if open) from its item in O(1), releasing the
    /// item if it was the last.
    pub(crate) fn unsubscribe(&mut self, conn: ConnId, sid: u32) {
        let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return;
        };
        let Some(at) = c.sub_streams.remove(&sid) else {
            return;
        };
        if let Some(cf) = c.conflation.as_deref_mut() {
            cf.pending.remove(&sid);
        }
        let Some(item) = self.items.get_mut(at.item) else {
            return;
        };
        let slot = at.slot as usize;
        debug_assert!(item
            .subs
            .get(slot)
            .is_some_and(|s| s.conn == conn && s.stream_id == sid));
        if slot >= item.subs.len() {
            return;
        }
        item.subs.swap_remove(slot);
        // The stream that took its place records its new slot.
        if let Some(moved) = item.subs.get(slot) {
            let moved_at = self
                .conns
                .get_mut(moved.conn)
                .and_then(|c| c.as_mut())
                .and_then(|c| c.sub_streams.get_mut(&moved.stream_id));
            if let Some(r) = moved_at {
                r.slot = at.slot;
            }
        }
        if item.subs.is_empty() {
            self.release_if_unused(at.item);
        }
    }

    /// An item nobody watches: closed on an interactive publisher (it stops sending);
    /// kept in the cache for a non-interactive one, also while its service is down after
    /// its publisher left (the stale image is served, suspect, as to the streams that
    /// watched it then). Once the service is up again, only what its publisher publishes
    /// is kept.
    pub(crate) fn release_if_unused(&mut self, h: ItemHandle) {
        let Some(item) = self.items.get(h) else {
            return;
        };
        if !item.subs.is_empty() {
            return;
        }
        let service = &self.services[item.service];
        let service_up = service.publisher.is_some() && service.up;
        let stale_image = self.cfg.cache && item.complete && !service_up;
        let keep = !service.interactive && (item.publisher.is_some() || stale_image);
        if keep {
            return;
        }
        let linger = self.cfg.interactive_linger;
        if service.interactive && self.cfg.cache && !linger.is_zero() && service_up {
            let now = self.now;
            let item = self.items.get_mut(h).expect("live");
            if item.complete && item.publisher.is_some() {
                if item.linger_until.replace(now + linger).is_none() {
                    self.lingering.push(h);
                }
                self.tick_by(now + linger);
                return;
            }
        }
        self.drop_unwatched(h);
    }

    /// Items whose linger time is over and that nobody asked for meanwhile go.
    pub(crate) fn end_lingering(&mut self, now: Instant) {
        if self.lingering.is_empty() {
            return;
        }
        let mut i = 0;
        while i < self.lingering.len() {
            let h = self.lingering[i];
            let state = self
                .items
                .get(h)
                .map(|it| (it.subs.is_empty(), it.linger_until));
            match state {
                Some((true, Some(until))) if now < until => {
                    self.tick_by(until);
                    i += 1;
                }
                Some((unwatched, Some(_))) => {
                    self.lingering.swap_remove(i);
                    if let Some(it) = self.items.get_mut(h) {
                        it.linger_until = None;
                    }
                    if unwatched {
                        self.drop_unwatched(h);
                    }
                }
                // Gone meanwhile (its handle perhaps reused by an item not lingering).
                _ => {
                    self.lingering.swap_remove(i);
                }
            }
        }
    }

    /// Removes an item nobody watches, closing it at its interactive publisher.
    pub(crate) fn drop_unwatched(&mut self, h: ItemHandle) {
        let item = self.items.remove(h).expect("live");
        self.services[item.service].items.remove(&*item.name);
        if let Some((pconn, sid)) = item.publisher {
            if let Some(c) = self.conns.get_mut(pconn).and_then(|c| c.as_mut()) {
                c.pub_streams.remove(sid);
            }
            if self.role(pconn) == Some(ConnRole::Publisher) {
                self.send(pconn, &Message::Close { stream_id: sid });
            }
        }
    }

    /// Sends `state` to every stream of an item and forgets the item.
    pub(crate) fn close_item(&mut self, h: ItemHandle, state: State<'_>) {
        // Slow subscribers get their pending values before the item goes.
        let subs: Vec<(ConnId, u32)> = self
            .items
            .get(h)
            .map(|i| i.subs.iter().map(|s| (s.conn, s.stream_id)).collect())
            .unwrap_or_default();
        for (c, sid) in subs {
            self.write_pending_now(c, sid);
        }
        let Some(item) = self.items.remove(h) else {
            return;
        };
        self.services[item.service].items.remove(&*item.name);
        if let Some((pconn, sid)) = item.publisher {
            if let Some(c) = self.conns.get_mut(pconn).and_then(|c| c.as_mut()) {
                c.pub_streams.remove(sid);
            }
        }
        for s in &item.subs {
            if let Some(c) = self.conns.get_mut(s.conn).and_then(|c| c.as_mut()) {
                c.sub_streams.remove(&s.stream_id);
            }
            self.send(
                s.conn,
                &Message::Status(Status {
                    stream_id: s.stream_id,
                    state,
                }),
            );
        }
    }
}
