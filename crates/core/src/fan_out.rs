//! The publishing path: a publisher's refreshes, updates and statuses into the cache and
//! out to every subscriber of the item (the hot path, see the crate's doc).

use crate::items::{ItemHandle, SubEntry};
use crate::{
    deferred, latency, slow, Conn, ConnId, ConnRole, Node, NODE_STREAM_BASE, SETTLE_IMAGE_AHEAD,
    SETTLE_ITEM_AHEAD,
};
use tickwire_proto::frame::FrameWriter;
use tickwire_proto::message::write_readdressed;
use tickwire_proto::wire::prefetch;
use tickwire_proto::{
    code, FieldList, FieldListWriter, Message, Refresh, State, Status, StreamState, Update,
};
use tracing::warn;

impl Node {
    pub(crate) fn on_publisher_refresh(&mut self, conn: ConnId, r: &Refresh<'_>) {
        self.stats.refreshes_in += 1;
        let known = self
            .conn_mut(conn)
            .and_then(|c| c.pub_streams.get(r.stream_id));
        let h = match known {
            Some(h) => h,
            None => {
                // A stream of the node's not open: the node closed the request while its
                // answer was on the way (a subscriber left at once). The publisher could
                // not know: the refresh is dropped, as an update would be.
                if r.stream_id >= NODE_STREAM_BASE {
                    self.stats.refreshes_on_closed_streams += 1;
                    return;
                }
                // A non-interactive publisher pushing an item on a stream of its own.
                if r.stream_id == 0 {
                    self.stats.protocol_disconnects += 1;
                    let text = format!(
                        "refresh on stream {} which the node never opened",
                        r.stream_id
                    );
                    self.reject(conn, code::PROTOCOL, &text);
                    return;
                }
                let svc = self.service_by_name.get(r.service).copied();
                let owned = svc.filter(|&s| self.services[s].publisher == Some(conn));
                let Some(svc) = owned else {
                    self.stats.protocol_disconnects += 1;
                    let text = format!(
                        "refresh for {}/{} but this connection did not announce service {:?}",
                        r.service, r.name, r.service
                    );
                    self.reject(conn, code::PROTOCOL, &text);
                    return;
                };
                let h = match self.services[svc].items.get(r.name) {
                    Some(&h) => h,
                    None => {
                        let h = self.new_item(svc, r.name);
                        self.services[svc].items.insert(r.name.into(), h);
                        h
                    }
                };
                let item = self.items.get_mut(h).expect("live");
                if let Some((old_conn, old_sid)) = item.publisher {
                    if old_conn == conn {
                        if let Some(c) = self.conns[conn].as_mut() {
                            c.pub_streams.remove(old_sid);
                        }
                    }
                }
                let item = self.items.get_mut(h).expect("live");
                item.publisher = Some((conn, r.stream_id));
                if let Some(c) = self.conn_mut(conn) {
                    c.pub_streams.insert(r.stream_id, h);
                }
                h
            }
        };
        let cache = self.cfg.cache;
        let item = self.items.get_mut(h).expect("live");
        if r.clear_cache {
            item.image.clear();
            item.complete = false;
        }
        if cache {
            item.image.apply(r.fields);
            if item.image.encoded_len() > self.max_image {
                self.refuse_large_image(conn, h);
                return;
            }
        }
        item.seq = r.seq;
        item.data_state = r.state.data;
        if item.journaled {
            self.posts
                .journal_item_message(&tickwire_journal::ItemMessage {
                    service: &self.services[item.service].name,
                    item: &item.name,
                    seq: r.seq,
                    refresh: true,
                    update_type: 0,
                    fields: r.fields,
                });
            if item.capturing {
                self.replays.capture(h, r.seq, true, 0, r.fields.as_bytes());
            }
        }
        // Who gets this refresh: a solicited one goes to the streams waiting for an
        // image; an unsolicited one (a re-image) or a recovery to every stream.
        let solicited = r.solicited && !item.recovering;
        if r.complete {
            item.complete = cache;
            item.refresh_requested = false;
            item.recovering = false;
        }
        if !cache {
            item.refresh_in_parts = !r.complete;
        } else if !r.complete {
            // Sent once whole, from the cache: a part costs no walk of the item's
            // streams (a publisher's many small parts to an item of 100,000 streams).
            return;
        }
        // Streams opened between this refresh's parts get none of it (they missed its
        // first parts); once it is complete the publisher is asked again for them.
        let mut late = false;
        let targets: Vec<usize> = item
            .subs
            .iter_mut()
            .enumerate()
            .filter_map(|(i, s)| {
                if s.joined_mid_refresh {
                    s.joined_mid_refresh = !r.complete;
                    late = true;
                    return None;
                }
                (s.awaiting_refresh || !solicited).then_some(i)
            })
            .collect();
        if late && r.complete {
            self.request_from_publisher(h);
        }
        if targets.is_empty() {
            return;
        }
        if cache {
            for &i in &targets {
                let entry = self.items.get(h).expect("live").subs[i].clone_meta();
                self.write_image_refresh(h, &entry, solicited || entry.awaiting_refresh);
            }
        } else {
            for &i in &targets {
                let entry = self.items.get(h).expect("live").subs[i].clone_meta();
                self.write_passthrough_refresh(h, &entry, r);
            }
        }
        self.after_refresh(h, &targets, r.complete);
    }

    /// Marks refreshed streams live and drops the snapshot ones.
    pub(crate) fn after_refresh(&mut self, h: ItemHandle, targets: &[usize], complete: bool) {
        if !complete {
            return;
        }
        let Some(item) = self.items.get_mut(h) else {
            return;
        };
        let mut snapshots = Vec::new();
        for &i in targets {
            let s = &mut item.subs[i];
            s.awaiting_refresh = false;
            if !s.streaming {
                snapshots.push((s.conn, s.stream_id));
            }
        }
        for (c, sid) in snapshots {
            self.unsubscribe(c, sid);
        }
    }

    /// Writes the cached image of an item to one subscriber stream, split into parts if it
    /// does not fit one message.
    pub(crate) fn write_image_refresh(&mut self, h: ItemHandle, sub: &SubEntry, solicited: bool) {
        self.merge_deferred();
        self.discard_pending(sub.conn, sub.stream_id);
        let Some(item) = self.items.get(h) else {
            return;
        };
        let service = &self.services[item.service];
        let state = State {
            stream: sub.stream_state(),
            data: item.data_state,
            code: code::NONE,
            text: "",
        };
        let Some(c) = self.conns.get_mut(sub.conn).and_then(|c| c.as_mut()) else {
            return;
        };
        let mut fields = std::mem::take(&mut self.scratch);
        fields.clear();
        item.image.write(&mut fields, sub.view.as_deref());
        // An image too large for one message goes out in parts.
        const PART: usize = tickwire_proto::field::PART_BYTES;
        let split;
        let parts: Vec<&[u8]> = if fields.len() <= PART {
            vec![&fields[..]]
        } else {
            split = tickwire_proto::field::split_field_list(&fields, PART);
            split.iter().map(|p| &p[..]).collect()
        };
        let n = parts.len();
        for (i, part) in parts.iter().enumerate() {
            let msg = Message::Refresh(Refresh {
                stream_id: sub.stream_id,
                seq: item.seq,
                complete: i + 1 == n,
                solicited,
                clear_cache: i == 0,
                state,
                service: &service.name,
                name: &item.name,
                fields: FieldList::from_trusted(part),
            });
            if let Err(e) = c.out.push(&msg) {
                warn!("refresh for {} not encoded: {e}", item.name);
            }
        }
        self.refresh_queued(sub.conn, fields);
    }

    /// An image grew past what a subscriber's queue can ever hold: no subscriber could
    /// receive it (each would be dropped as a slow consumer, again and again). The item
    /// is closed to its streams with the reason and the publisher told to stop (Close
    /// on its stream); the publisher library refuses such an image before sending it.
    #[cold]
    pub(crate) fn refuse_large_image(&mut self, conn: ConnId, h: ItemHandle) {
        let Some(item) = self.items.get(h) else {
            return;
        };
        let text = format!(
            "image of {}/{} is {} bytes: the node caches at most {} (half of limits.max_output_bytes)",
            self.services[item.service].name,
            item.name,
            item.image.encoded_len(),
            self.max_image
        );
        let sid = item.publisher.filter(|(c, _)| *c == conn).map(|(_, s)| s);
        warn!("{text}: item closed");
        self.close_item(h, State::closed(code::TOO_LARGE, &text));
        if let Some(sid) = sid {
            self.send(conn, &Message::Close { stream_id: sid });
        }
    }

    /// Cache off: forwards a publisher's refresh part to one stream (filtered by its view).
    pub(crate) fn write_passthrough_refresh(
        &mut self,
        h: ItemHandle,
        sub: &SubEntry,
        r: &Refresh<'_>,
    ) {
        if r.clear_cache {
            self.discard_pending(sub.conn, sub.stream_id);
        } else {
            self.write_pending_now(sub.conn, sub.stream_id);
        }
        let Some(item) = self.items.get(h) else {
            return;
        };
        let Some(c) = self.conns.get_mut(sub.conn).and_then(|c| c.as_mut()) else {
            return;
        };
        let mut fields = std::mem::take(&mut self.scratch);
        fields.clear();
        filter_fields(&mut fields, r.fields, sub.view.as_deref());
        let msg = Message::Refresh(Refresh {
            stream_id: sub.stream_id,
            seq: r.seq,
            complete: r.complete,
            // The answer to the stream's request; a re-image of a live stream is not,
            // though it answers the node's own request (an interactive publisher back).
            solicited: sub.awaiting_refresh,
            clear_cache: r.clear_cache,
            state: State {
                stream: sub.stream_state(),
                data: item.data_state,
                code: r.state.code,
                text: r.state.text,
            },
            service: &self.services[item.service].name,
            name: &item.name,
            fields: FieldList::from_trusted(&fields),
        });
        if let Err(e) = c.out.push(&msg) {
            warn!("refresh for {} not forwarded: {e}", item.name);
        }
        self.refresh_queued(sub.conn, fields);
    }

    /// After a refresh went into a subscriber's queue (from the cache or forwarded):
    /// the field scratch back for the next one, the refresh counted, the connection
    /// due a flush and checked for overflow.
    #[inline]
    pub(crate) fn refresh_queued(&mut self, conn: ConnId, scratch: Vec<u8>) {
        self.scratch = scratch;
        self.stats.refreshes_out += 1;
        self.mark_dirty(conn);
        self.check_overflow(conn);
    }

    pub(crate) fn check_overflow(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get(conn).and_then(|c| c.as_ref()) {
            if needs_overflow_check(c) {
                self.overflowed.push(conn);
            }
        }
    }

    /// Publisher updates: while one is processed, the memory of later ones is loaded (a
    /// pipeline of hints; it changes no result). With 100,000 items updated at random,
    /// each update would otherwise wait for memory three times in a row: its stream's
    /// slot in `pub_streams`, then its item, then the item's image. Only stream ids in
    /// the dense part of `pub_streams` are followed (no hash probe for a hint).
    #[inline]
    pub(crate) fn prefetch_ahead(&self, conn: ConnId, ahead: &mut UpdateLookahead<'_>) {
        let Some(c) = self.conns.get(conn).and_then(|c| c.as_ref()) else {
            return;
        };
        if c.role != ConnRole::Publisher {
            return;
        }
        let (image_of, item_of, slot_of) = ahead.advance();
        // The image and the first subscription of an update a little ahead (its item
        // was loaded earlier): the fan-out reads the subscription list, a memory of its
        // own, for every update, cache on or off.
        let item = image_of
            .and_then(|sid| c.pub_streams.get_dense(sid))
            .and_then(|h| self.items.get(h));
        if let Some(item) = item {
            if self.cfg.cache {
                item.image.prefetch();
            }
            if !item.subs.is_empty() {
                prefetch(item.subs.as_ptr() as *const u8);
            }
        }
        // The item of one further on (its stream slot was loaded earlier).
        if let Some(h) = item_of.and_then(|sid| c.pub_streams.get_dense(sid)) {
            self.items.prefetch(h);
        }
        // The stream slot of one further still.
        if let Some(sid) = slot_of {
            c.pub_streams.prefetch(sid);
        }
    }

    /// The hot path: one update fanned out to every live stream of its item.
    pub(crate) fn on_publisher_update(&mut self, conn: ConnId, u: &Update<'_>, encoded: &[u8]) {
        self.stats.updates_in += 1;
        if self.stats.updates_in & (latency::SAMPLE_EVERY - 1) == 0 {
            self.sample_latency(u.fields);
        }
        let Some(h) = self
            .conns
            .get(conn)
            .and_then(|c| c.as_ref())
            .and_then(|c| c.pub_streams.get(u.stream_id))
        else {
            self.stats.updates_on_unknown_streams += 1;
            return;
        };
        let Some(item) = self.items.get_mut(h) else {
            return;
        };
        self.services[item.service].updates_in += 1;
        if self.cfg.cache {
            // The merge into the image waits until the subscribers' bytes are written
            // (deferred.rs), unless the image could outgrow the cache with it (then
            // everything waiting is merged first and this one at once, checked) or
            // the list is full.
            let bytes = u.fields.as_bytes();
            let most = item.image.encoded_len()
                + self.deferred.growth()
                + deferred::growth_bound(bytes.len(), u.fields.len());
            if most > self.max_image || !self.deferred.accepts(bytes.len()) {
                self.merge_deferred();
                let item = self.items.get_mut(h).expect("live");
                item.image.apply(u.fields);
                if item.image.encoded_len() > self.max_image {
                    self.refuse_large_image(conn, h);
                    return;
                }
                return self.fan_out_update(h, u, encoded);
            }
            self.deferred.push(conn, h, bytes, u.fields.len());
        }
        self.fan_out_update(h, u, encoded);
    }

    /// Merges the updates fanned out since the last call into their cached images (see
    /// deferred.rs). The driver calls it once it has written a turn's output; the core
    /// calls it itself before anything reads an image or changes the item table.
    pub fn settle(&mut self) {
        self.merge_deferred();
        self.deferred.reopen();
    }

    /// Merges what waits (before an image is read or the item table changes).
    pub(crate) fn merge_deferred(&mut self) {
        if self.deferred.is_empty() {
            return;
        }
        let taken = self.deferred.take();
        for i in 0..taken.len() {
            // While this one is merged, the image of one a few updates on is loaded,
            // and the item of one further still (whose image is the next to load).
            if i + SETTLE_IMAGE_AHEAD < taken.len() {
                if let Some(next) = self.items.get(taken.item(i + SETTLE_IMAGE_AHEAD)) {
                    next.image.prefetch();
                }
            }
            if i + SETTLE_ITEM_AHEAD < taken.len() {
                self.items.prefetch(taken.item(i + SETTLE_ITEM_AHEAD));
            }
            let (conn, h, fields) = taken.get(i);
            let Some(item) = self.items.get_mut(h) else {
                continue;
            };
            item.image.apply(FieldList::from_trusted(fields));
            if item.image.encoded_len() > self.max_image {
                self.refuse_large_image(conn, h);
            }
        }
        self.deferred.give_back(taken);
    }

    /// Updates fanned out whose merge into the cache is still to come ([`Node::settle`]).
    pub fn unsettled_updates(&self) -> usize {
        self.deferred.len()
    }

    /// An update to every live stream of its item (its image merged or deferred).
    #[inline(always)]
    pub(crate) fn fan_out_update(&mut self, h: ItemHandle, u: &Update<'_>, encoded: &[u8]) {
        let Node {
            items,
            conns,
            dirty,
            overflowed,
            cfg,
            stats,
            now,
            scratch,
            services,
            posts,
            replays,
            ..
        } = self;
        let Some(item) = items.get_mut(h) else { return };
        let out_before = stats.updates_out;
        item.seq = u.seq;
        if item.journaled {
            posts.journal_item_message(&tickwire_journal::ItemMessage {
                service: &services[item.service].name,
                item: &item.name,
                seq: u.seq,
                refresh: false,
                update_type: u.update_type.to_u8(),
                fields: u.fields,
            });
            if item.capturing {
                replays.capture(h, u.seq, false, u.update_type.to_u8(), u.fields.as_bytes());
            }
        }
        let data_state = item.data_state;
        for s in &item.subs {
            if s.awaiting_refresh {
                continue; // its refresh, still to come, will include this update
            }
            let Some(c) = conns.get_mut(s.conn).and_then(|c| c.as_mut()) else {
                continue;
            };
            if let Some(cf) = c.conflation.as_deref_mut() {
                // Behind: merged into the stream's pending update, unless it is a
                // do-not-conflate update and the queue has room for it (and for the
                // pending update, which must go first).
                let pending = cf.pending.get(&s.stream_id);
                let need = encoded.len() + pending.map_or(0, |p| p.fields.heap_bytes() + 512);
                let room = u.do_not_conflate
                    && c.out.pending_len() + need <= cfg.limits.max_output_bytes
                    && c.out.pending_messages() + 4 <= cfg.limits.max_output_messages;
                if !room {
                    slow::merge(cf, h, s.stream_id, u);
                    if u.do_not_conflate {
                        stats.do_not_conflate_dropped += 1;
                        c.do_not_conflate_dropped += 1;
                    }
                    continue;
                }
                if let Some(p) = cf.pending.remove(&s.stream_id) {
                    let view = s.view.as_deref();
                    slow::write_pending(&mut c.out, scratch, s.stream_id, &p, view, data_state);
                    slow::count_written(cf, &p, stats, &mut c.conflated_updates);
                }
                if !cf.pending.is_empty() {
                    cf.direct_since_check += 1;
                    overflowed.push(s.conn);
                }
            }
            match &s.view {
                None => write_readdressed(c.out.message_buf(encoded.len()), encoded, s.stream_id),
                Some(view) => {
                    if !write_update_view(&mut c.out, u, s.stream_id, view) {
                        continue;
                    }
                }
            }
            stats.updates_out += 1;
            c.last_tx = *now;
            if !c.dirty {
                c.dirty = true;
                dirty.push(s.conn);
            }
            if is_behind(c) {
                overflowed.push(s.conn);
            }
        }
        services[item.service].updates_out += stats.updates_out - out_before;
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn sample_latency(&mut self, fields: FieldList<'_>) {
        if self.wall_clock_ns == 0 {
            return;
        }
        if let Some(tickwire_proto::Value::UInt(stamp)) = fields.get(tickwire_proto::fid::TIM_TRK_1)
        {
            self.latency.record(stamp, self.wall_clock_ns);
        }
    }

    pub(crate) fn on_publisher_status(&mut self, conn: ConnId, s: &Status<'_>) {
        let Some(h) = self
            .conn_mut(conn)
            .and_then(|c| c.pub_streams.get(s.stream_id))
        else {
            return;
        };
        if s.state.stream != StreamState::Open {
            // The publisher closed the item (e.g. not found): every stream ends with it.
            self.close_item(h, s.state);
            return;
        }
        let Some(item) = self.items.get_mut(h) else {
            return;
        };
        item.data_state = s.state.data;
        let subs: Vec<(ConnId, u32)> = item.subs.iter().map(|e| (e.conn, e.stream_id)).collect();
        for (c, sid) in subs {
            self.send(
                c,
                &Message::Status(Status {
                    stream_id: sid,
                    state: s.state,
                }),
            );
        }
    }
}

/// How many messages ahead of the one being processed [`Node::prefetch_ahead`] loads
/// an update's image, its item, and its stream slot. Each stage must have had time to
/// arrive (about a memory latency, a few hundred ns) before the next one reads it.
const PREFETCH_IMAGE: usize = 2;
const PREFETCH_ITEM: usize = 5;
const PREFETCH_SLOT: usize = 8;
const LOOKAHEAD_RING: usize = 16;

/// Walks the message headers of a frame ahead of
/// [`MessageIter`](tickwire_proto::MessageIter) (no decoding) and keeps the stream ids of
/// the updates among the next messages, for [`Node::prefetch_ahead`].
pub(crate) struct UpdateLookahead<'a> {
    rest: &'a [u8],
    /// The stream id of message `i` (if an update) at `i % LOOKAHEAD_RING`.
    ring: [Option<u32>; LOOKAHEAD_RING],
    /// The message being processed.
    step: usize,
}

impl<'a> UpdateLookahead<'a> {
    pub(crate) fn new(payload: &'a [u8]) -> Self {
        let mut ahead = UpdateLookahead {
            rest: payload,
            ring: [None; LOOKAHEAD_RING],
            step: 0,
        };
        for i in 0..PREFETCH_SLOT {
            ahead.ring[i] = ahead.next_update_sid();
        }
        ahead
    }

    /// Moves on to the next message; gives the stream ids (if updates) of the messages
    /// `PREFETCH_IMAGE`, `PREFETCH_ITEM` and `PREFETCH_SLOT` after the one to process.
    #[inline]
    pub(crate) fn advance(&mut self) -> (Option<u32>, Option<u32>, Option<u32>) {
        let i = self.step;
        self.step += 1;
        let slot = self.next_update_sid();
        self.ring[(i + PREFETCH_SLOT) % LOOKAHEAD_RING] = slot;
        (
            self.ring[(i + PREFETCH_IMAGE) % LOOKAHEAD_RING],
            self.ring[(i + PREFETCH_ITEM) % LOOKAHEAD_RING],
            slot,
        )
    }

    /// Moves over one message: its stream id if it is an update.
    #[inline]
    pub(crate) fn next_update_sid(&mut self) -> Option<u32> {
        tickwire_proto::message::next_update_stream(&mut self.rest)
    }
}

/// A subscriber behind, or any other peer whose queue passed the hard bound (a
/// publisher or a connection not logged in that sends pings and reads nothing).
#[inline]
pub(crate) fn needs_overflow_check(c: &Conn) -> bool {
    match c.role {
        ConnRole::Subscriber => is_behind(c),
        ConnRole::Publisher | ConnRole::AwaitingLogin => {
            c.out.pending_len() > c.behind_bytes || c.out.pending_messages() > c.behind_messages
        }
        ConnRole::Closing => false,
    }
}

/// A subscriber whose queue passed the size at which it counts as behind.
#[inline]
pub(crate) fn is_behind(c: &Conn) -> bool {
    c.out.pending_len() > c.behind_bytes || c.out.pending_messages() > c.behind_messages
}

/// Writes an update restricted to `view`; false (nothing written) if no field is in it.
pub(crate) fn write_update_view(
    out: &mut FrameWriter,
    u: &Update<'_>,
    stream_id: u32,
    view: &[i16],
) -> bool {
    let buf = out.message_buf(u.fields.as_bytes().len() + 32);
    let start = buf.len();
    let res = Message::Update(Update {
        stream_id,
        fields: FieldList::EMPTY,
        ..u.clone()
    })
    .encode(buf);
    if res.is_err() {
        buf.truncate(start);
        out.forget_message();
        return false;
    }
    // Replace the empty field list just written with the filtered one.
    buf.truncate(buf.len() - 2);
    let fl_start = buf.len();
    filter_fields(buf, u.fields, Some(view));
    let count = u16::from_be_bytes([buf[fl_start], buf[fl_start + 1]]);
    if count == 0 {
        buf.truncate(start);
        out.forget_message();
        return false;
    }
    let body_len = (buf.len() - start - 3) as u16;
    buf[start + 1..start + 3].copy_from_slice(&body_len.to_be_bytes());
    true
}

/// Appends `fields` restricted to `view` (all of them if `None`; sorted) as a field list.
pub(crate) fn filter_fields(out: &mut Vec<u8>, fields: FieldList<'_>, view: Option<&[i16]>) {
    let mut w = FieldListWriter::new(out);
    for (fid, raw) in fields.raw_iter() {
        if view.is_none_or(|v| v.binary_search(&fid).is_ok()) {
            w.push_raw(fid, raw);
        }
    }
    w.finish();
}

#[cfg(test)]
mod lookahead_tests {
    use super::*;
    use tickwire_proto::{encode_field_list, UpdateType, Value};

    #[test]
    fn the_lookahead_names_the_updates_ahead_and_survives_garbage() {
        let fields = encode_field_list([(22, Value::UInt(1))]);
        let mut payload = Vec::new();
        let mut expected = Vec::new();
        for i in 0..40u32 {
            if i % 3 == 0 {
                Message::Ping(i as u64).encode(&mut payload).unwrap();
                expected.push(None);
            } else {
                Message::Update(Update::new(
                    1000 + i,
                    i,
                    UpdateType::Quote,
                    FieldList::decode(&fields).unwrap(),
                ))
                .encode(&mut payload)
                .unwrap();
                expected.push(Some(1000 + i));
            }
        }
        let at = |i: usize| expected.get(i).copied().flatten();
        let mut ahead = UpdateLookahead::new(&payload);
        for i in 0..expected.len() {
            let got = ahead.advance();
            let want = (
                at(i + PREFETCH_IMAGE),
                at(i + PREFETCH_ITEM),
                at(i + PREFETCH_SLOT),
            );
            assert_eq!(got, want, "message {i}");
        }
        // Cut or random bytes: it stops, without panicking.
        let mut x: u64 = 7;
        for n in 0..payload.len() {
            let mut bytes = payload[..n].to_vec();
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if let Some(b) = bytes.get_mut((x >> 33) as usize % n.max(1)) {
                *b = (x >> 17) as u8;
            }
            let mut ahead = UpdateLookahead::new(&bytes);
            for _ in 0..50 {
                ahead.advance();
            }
        }
    }
}
