//! Slow consumers: what the node does with a subscriber that reads slower than its items
//! update.
//!
//! A subscriber is *behind* when the output the node holds for it (bytes the socket has
//! not taken yet) passes a threshold, in bytes or messages. Then, by policy:
//!
//! - `conflate` (default): its updates are no longer queued one by one. Each stream keeps
//!   one pending update instead, into which every later update of the item is merged
//!   (latest value of every changed field, the count of updates merged). Memory per slow
//!   subscriber is bounded by its streams times their fields, not by the update rate.
//!   When its queue has drained to half the threshold, the pending updates are written,
//!   oldest stream first, as the socket takes them; when none is left it is live again.
//!   Applied to what it already had, they give exactly the node's current image.
//!   Do-not-conflate updates are never merged: they are queued as long as the hard
//!   bound (`max_output_bytes` / `max_output_messages`) allows; past it they are merged
//!   for their values only and the stream is told (status `UPDATES_DROPPED`) before its
//!   pending update.
//! - `disconnect`: past the hard bound, unsent output is dropped and the connection gets
//!   a closed-recover status "slow consumer" and is closed.
//!
//! Other messages (refreshes, statuses) are always queued; one that would pass the hard
//! bound disconnects the subscriber whatever its policy. Nothing here runs unless a
//! subscriber is behind: the hot path only compares its queue with the threshold.

use crate::admission::LogName;
use crate::items::ItemHandle;
use crate::{ConnId, ConnRole, Node, Stats};
use rustc_hash::FxHashMap;
use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::time::Instant;
use tickwire_proto::frame::FrameWriter;
use tickwire_proto::{
    code, DataState, FieldImage, FieldList, Message, SlowConsumerPolicy, State, Status,
    StreamState, Update, UpdateType,
};
use tracing::{info, warn};

/// The node's slow-consumer settings.
#[derive(Debug, Clone)]
pub struct SlowConsumerConfig {
    /// Policy of connections that do not ask for one and whose user has none below.
    pub policy: SlowConsumerPolicy,
    /// Per-user policy (the login's user name); a connection's own request wins.
    pub per_user: HashMap<String, SlowConsumerPolicy>,
    /// Under `conflate`: queued output (bytes) past which a subscriber is behind.
    pub conflate_above_bytes: usize,
    /// Under `conflate`: queued messages past which a subscriber is behind.
    pub conflate_above_messages: u64,
}

impl Default for SlowConsumerConfig {
    fn default() -> Self {
        SlowConsumerConfig {
            policy: SlowConsumerPolicy::Conflate,
            per_user: HashMap::new(),
            conflate_above_bytes: 1024 * 1024,
            conflate_above_messages: 20_000,
        }
    }
}

/// One connection as seen by the node, for logs and monitoring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionReport {
    /// The connection's id.
    pub id: ConnId,
    /// The client's address.
    pub peer: String,
    /// The user it logged in as.
    pub user: String,
    /// The application it named.
    pub application: String,
    /// "subscriber", "publisher", "login" (not logged in yet) or "closing".
    pub role: &'static str,
    /// Its slow-consumer policy.
    pub policy: SlowConsumerPolicy,
    /// Behind, its updates being conflated.
    pub behind: bool,
    /// Bytes queued for it.
    pub queued_bytes: usize,
    /// The most it had queued when the node came to write (see `Node::output`).
    pub queued_bytes_high_water: usize,
    /// Messages queued for it.
    pub queued_messages: u64,
    /// Streams open.
    pub streams: usize,
    /// Streams with a pending conflated update.
    pub pending_streams: usize,
    /// Times it fell behind.
    pub slow_episodes: u64,
    /// Updates merged for it while behind.
    pub conflated_updates: u64,
    /// Do-not-conflate updates it had no room for.
    pub do_not_conflate_dropped: u64,
}

/// The state of a subscriber while it is behind.
pub(crate) struct Conflation {
    since: Instant,
    pub(crate) pending: FxHashMap<u32, PendingUpdate>,
    /// Stream ids in the order they got a pending update (written in that order).
    order: VecDeque<u32>,
    /// Updates merged during this episode, and conflated updates written for them.
    merged: u64,
    pub(crate) written: u64,
    /// Do-not-conflate updates queued directly and not yet matched by a pending update
    /// written (one per `DIRECT_PER_PENDING`), so a steady trade flow that keeps the
    /// queue high cannot hold the other streams' pending updates back for ever.
    pub(crate) direct_since_check: u32,
}

impl Conflation {
    pub(crate) fn new(since: Instant) -> Self {
        Conflation {
            since,
            pending: FxHashMap::default(),
            order: VecDeque::new(),
            merged: 0,
            written: 0,
            direct_since_check: 0,
        }
    }

    pub(crate) fn has_pending(&self, stream_id: u32) -> bool {
        self.pending.contains_key(&stream_id)
    }
}

/// The updates of one stream merged while its subscriber is behind.
pub(crate) struct PendingUpdate {
    item: ItemHandle,
    pub(crate) fields: FieldImage,
    /// Updates merged (the conflation count of the update written for them).
    pub(crate) count: u32,
    seq: u32,
    update_type: UpdateType,
    /// Do-not-conflate updates among them that had no room in the queue.
    dropped: u32,
    /// The latest open-state status for the stream while it was pending (data state
    /// changes are states, not events: the last one stands for all), written after
    /// the update.
    status: Option<(DataState, u16, String)>,
}

impl PendingUpdate {
    fn new(item: ItemHandle, seq: u32, update_type: UpdateType) -> Self {
        PendingUpdate {
            item,
            fields: FieldImage::new(),
            count: 0,
            seq,
            update_type,
            dropped: 0,
            status: None,
        }
    }
}

/// Do-not-conflate updates queued directly per pending update written alongside.
const DIRECT_PER_PENDING: u32 = 16;

/// Largest field list sent in one conflated update; a larger merge goes out in parts
/// (as refreshes do).
const PART: usize = tickwire_proto::field::PART_BYTES;

/// Keeps the order queue in step with the pending updates: entries for streams whose
/// pending update was written or dropped elsewhere are removed once they outnumber
/// the live ones, so the queue stays bounded by the streams.
fn compact_order(cf: &mut Conflation) {
    if cf.order.len() > 2 * cf.pending.len() + 64 {
        let mut seen = rustc_hash::FxHashSet::default();
        let pending = &cf.pending;
        cf.order
            .retain(|sid| pending.contains_key(sid) && seen.insert(*sid));
    }
}

/// Merges one update into the pending update of its stream.
pub(crate) fn merge(cf: &mut Conflation, item: ItemHandle, stream_id: u32, u: &Update<'_>) {
    if !cf.pending.contains_key(&stream_id) {
        compact_order(cf);
        cf.order.push_back(stream_id);
    }
    let p = cf
        .pending
        .entry(stream_id)
        .or_insert_with(|| PendingUpdate::new(item, u.seq, u.update_type));
    p.fields.apply(u.fields);
    if p.count == 0 {
        p.update_type = u.update_type;
    } else if p.update_type != u.update_type {
        p.update_type = UpdateType::Other;
    }
    // An update may already stand for several (merged by an upstream node, e.g. a
    // source for its backbone link): the merge stands for all of them, so the
    // subscriber's sequence check still adds up. A count of 0 continues a merge too
    // large for one message (same sequence number) and adds nothing.
    p.count = p.count.saturating_add(u32::from(u.conflation_count)).max(1);
    p.seq = u.seq;
    if u.do_not_conflate {
        p.dropped += 1;
    }
    cf.merged += 1;
}

/// Counts a pending update just written (by the fan-out or by catching up): one more
/// for the episode, and the updates it stood for beyond itself as conflated away,
/// node-wide and for the connection.
#[inline]
pub(crate) fn count_written(
    cf: &mut Conflation,
    p: &PendingUpdate,
    stats: &mut Stats,
    conn_conflated: &mut u64,
) {
    let merged_away = u64::from(p.count.saturating_sub(1));
    stats.conflated_updates += merged_away;
    *conn_conflated += merged_away;
    cf.written += 1;
}

/// The status that tells a subscriber `dropped` do-not-conflate updates of a stream
/// were dropped while it was behind (the data suspect); `then` ends the text.
fn push_dropped_status(out: &mut FrameWriter, stream_id: u32, dropped: u32, then: &str) {
    let text = format!(
        "{dropped} do-not-conflate updates dropped: the subscriber fell too far behind{then}"
    );
    let _ = out.push(&Message::Status(Status {
        stream_id,
        state: State {
            stream: StreamState::Open,
            data: DataState::Suspect,
            code: code::UPDATES_DROPPED,
            text: &text,
        },
    }));
}

/// Writes a stream's pending update: first, if do-not-conflate updates were dropped, a
/// status saying so; then one update with the latest value of every field merged (its
/// conflation count saturates at 65,535, read "that many or more"; a merge too large
/// for one message goes in parts, the later ones with conflation count 0 and the same
/// sequence number); then the stream's latest status, or after a drop a status
/// restoring the item's data state.
pub(crate) fn write_pending(
    out: &mut FrameWriter,
    scratch: &mut Vec<u8>,
    stream_id: u32,
    p: &PendingUpdate,
    view: Option<&[i16]>,
    data: DataState,
) {
    scratch.clear();
    let n = p.fields.write(scratch, view);
    if p.dropped > 0 {
        let then = if n > 0 {
            "; their latest values follow in a conflated update"
        } else {
            ""
        };
        push_dropped_status(out, stream_id, p.dropped, then);
    }
    if n > 0 {
        let count = p.count.clamp(1, u16::MAX as u32) as u16;
        fn update<'a>(sid: u32, p: &PendingUpdate, fields: &'a [u8], count: u16) -> Message<'a> {
            Message::Update(Update {
                stream_id: sid,
                seq: p.seq,
                update_type: p.update_type,
                do_not_conflate: false,
                conflation_count: count,
                fields: FieldList::from_trusted(fields),
            })
        }
        if scratch.len() <= PART {
            let _ = out.push(&update(stream_id, p, scratch, count));
        } else {
            let parts = tickwire_proto::field::split_field_list(scratch, PART);
            for (i, part) in parts.iter().enumerate() {
                let _ = out.push(&update(stream_id, p, part, if i == 0 { count } else { 0 }));
            }
        }
    }
    let status = match &p.status {
        Some((data, code, text)) => Some((*data, *code, text.as_str())),
        None if p.dropped > 0 => Some((
            data,
            code::NONE,
            "caught up: the latest values were delivered",
        )),
        None => None,
    };
    if let Some((data, code, text)) = status {
        let _ = out.push(&Message::Status(Status {
            stream_id,
            state: State {
                stream: StreamState::Open,
                data,
                code,
                text,
            },
        }));
    }
}

impl Node {
    /// The policy of a connection that just logged in.
    pub(crate) fn policy_for(
        &self,
        user: &str,
        asked: Option<SlowConsumerPolicy>,
    ) -> SlowConsumerPolicy {
        let sc = &self.cfg.slow_consumer;
        asked
            .or_else(|| sc.per_user.get(user).copied())
            .unwrap_or(sc.policy)
    }

    /// Sets a subscriber's policy and the queue size at which it counts as behind.
    pub(crate) fn apply_policy(&mut self, conn: ConnId, policy: SlowConsumerPolicy) {
        let (limits, sc) = (&self.cfg.limits, &self.cfg.slow_consumer);
        let (bytes, messages) = match policy {
            // At most half the hard bound: room is left above the threshold for what
            // is never merged (refreshes, statuses, trades).
            SlowConsumerPolicy::Conflate => (
                sc.conflate_above_bytes.min(limits.max_output_bytes / 2),
                sc.conflate_above_messages
                    .min(limits.max_output_messages / 2),
            ),
            SlowConsumerPolicy::Disconnect => (limits.max_output_bytes, limits.max_output_messages),
        };
        if let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) {
            c.policy = policy;
            c.behind_bytes = bytes;
            c.behind_messages = messages;
        }
    }

    /// Subscribers whose queue passed their threshold while a frame was processed:
    /// start conflating, or disconnect those past the hard bound.
    pub(crate) fn handle_overflows(&mut self) {
        if self.overflowed.is_empty() {
            return;
        }
        let mut list = std::mem::take(&mut self.overflowed);
        list.sort_unstable();
        list.dedup();
        let (max_bytes, max_messages) = (
            self.cfg.limits.max_output_bytes,
            self.cfg.limits.max_output_messages,
        );
        for conn in list.drain(..) {
            let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) else {
                continue;
            };
            let (bytes, messages) = (c.out.pending_len(), c.out.pending_messages());
            if matches!(c.role, ConnRole::Publisher | ConnRole::AwaitingLogin) {
                // Not a subscriber, yet not reading what the node sends it (pongs,
                // requests): past the hard bound it is dropped, never buffered more.
                if bytes > max_bytes || messages > max_messages {
                    let text = format!(
                        "not reading: {bytes} bytes / {messages} messages queued, limit \
                         {max_bytes} bytes / {max_messages} messages"
                    );
                    c.out.discard_unsent();
                    self.stats.protocol_disconnects += 1;
                    self.reject(conn, code::SLOW_CONSUMER, &text);
                }
                continue;
            }
            if c.role != ConnRole::Subscriber {
                continue;
            }
            if bytes > max_bytes || messages > max_messages {
                let text = format!(
                    "slow consumer: {bytes} bytes / {messages} messages queued, limit \
                     {max_bytes} bytes / {max_messages} messages (policy {})",
                    c.policy.name()
                );
                self.disconnect_slow(conn, &text);
                continue;
            }
            if let Some(cf) = c.conflation.as_deref_mut() {
                // Trades went straight to the queue: one pending update follows every
                // DIRECT_PER_PENDING of them, so the other streams are not starved and
                // conflation still saves most of the traffic.
                let n = (cf.direct_since_check / DIRECT_PER_PENDING) as usize;
                cf.direct_since_check %= DIRECT_PER_PENDING;
                if n > 0 {
                    self.write_oldest_pending(conn, n, max_bytes, max_messages);
                }
                continue;
            }
            if c.policy == SlowConsumerPolicy::Conflate {
                c.conflation = Some(Box::new(Conflation::new(self.now)));
                c.slow_episodes += 1;
                self.stats.slow_consumer_episodes += 1;
                let items = self.item_names(conn, 5);
                let c = self.conns[conn].as_ref().expect("live");
                warn!(
                    peer = %c.peer, user = %LogName(&c.user), application = %LogName(&c.application),
                    "slow consumer: {bytes} bytes / {messages} messages queued; conflating its \
                     {} streams ({items})",
                    c.sub_streams.len()
                );
            }
        }
        self.overflowed = list;
    }

    /// Drops a subscriber's unsent output, tells it why (closed-recover: it may come
    /// back) and closes it.
    fn disconnect_slow(&mut self, conn: ConnId, text: &str) {
        let items = self.item_names(conn, 5);
        if let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) {
            c.out.discard_unsent();
            c.conflation = None;
            warn!(
                peer = %c.peer, user = %LogName(&c.user), application = %LogName(&c.application),
                "disconnecting slow consumer (items {items}): {text}"
            );
        }
        self.stats.slow_consumer_disconnects += 1;
        self.reject(conn, code::SLOW_CONSUMER, text);
    }

    /// "A, B, C and 7 more": the first items a subscriber watches, for logs.
    fn item_names(&self, conn: ConnId, first: usize) -> String {
        let Some(c) = self.conns.get(conn).and_then(|c| c.as_ref()) else {
            return String::new();
        };
        let mut out = String::new();
        for (i, at) in c.sub_streams.values().take(first).enumerate() {
            if let Some(item) = self.items.get(at.item) {
                if i > 0 {
                    out.push_str(", ");
                }
                let svc = &self.services[item.service].name;
                let _ = write!(out, "{svc}/{}", item.name);
            }
        }
        if c.sub_streams.len() > first {
            let _ = write!(out, " and {} more", c.sub_streams.len() - first);
        }
        if out.is_empty() {
            out.push_str("no items");
        }
        out
    }

    /// The socket took (some of) a connection's output. A subscriber that is behind and
    /// has drained to half its threshold gets pending conflated updates, up to that
    /// half; once none is left and its queue is below that half, it is live again.
    /// Returns true if output was added.
    pub fn on_output_written(&mut self, conn: ConnId) -> bool {
        let Some(c) = self.conns.get(conn).and_then(|c| c.as_ref()) else {
            return false;
        };
        if c.role != ConnRole::Subscriber || c.conflation.is_none() {
            return false;
        }
        let (low_bytes, low_messages) = (c.behind_bytes / 2, c.behind_messages / 2);
        let wrote = self.write_oldest_pending(conn, usize::MAX, low_bytes, low_messages) > 0;
        let now = self.now;
        let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return wrote;
        };
        let Some(cf) = c.conflation.as_deref() else {
            return wrote;
        };
        if !(cf.pending.is_empty()
            && c.out.pending_len() < low_bytes
            && c.out.pending_messages() < low_messages)
        {
            return wrote;
        }
        let (ms, merged, written) = (
            now.saturating_duration_since(cf.since).as_millis(),
            cf.merged,
            cf.written,
        );
        c.conflation = None;
        let stale_directory = std::mem::take(&mut c.directory_stale);
        let items = self.item_names(conn, 5);
        let c = self.conns[conn].as_ref().expect("live");
        info!(
            peer = %c.peer, user = %LogName(&c.user), application = %LogName(&c.application),
            "slow consumer caught up after {ms} ms: {merged} updates merged into {written} \
             conflated updates ({items})"
        );
        if stale_directory {
            self.send_directory(conn);
            return true;
        }
        wrote
    }

    /// Writes up to `n` pending updates, oldest stream first, while the queue stays
    /// below `max_bytes` and `max_messages`. Returns how many were written.
    fn write_oldest_pending(
        &mut self,
        conn: ConnId,
        n: usize,
        max_bytes: usize,
        max_messages: u64,
    ) -> usize {
        let Node {
            conns,
            items,
            scratch,
            stats,
            dirty,
            now,
            ..
        } = self;
        let Some(c) = conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return 0;
        };
        let Some(cf) = c.conflation.as_deref_mut() else {
            return 0;
        };
        let mut wrote = 0;
        while wrote < n {
            let Some(&sid) = cf.order.front() else {
                break;
            };
            let Some(p) = cf.pending.get(&sid) else {
                cf.order.pop_front(); // written or dropped elsewhere
                continue;
            };
            // Room for it (an estimate); an empty queue takes any one, however large.
            let need = p.fields.heap_bytes() + 512;
            let queued = c.out.pending_len();
            if queued > 0
                && (queued + need > max_bytes || c.out.pending_messages() + 4 > max_messages)
            {
                break;
            }
            cf.order.pop_front();
            let p = cf.pending.remove(&sid).expect("checked");
            let Some(&at) = c.sub_streams.get(&sid).filter(|at| at.item == p.item) else {
                continue;
            };
            let (Some(item), Some(view)) = (items.get(p.item), items.view_of(at)) else {
                continue;
            };
            write_pending(&mut c.out, scratch, sid, &p, view, item.data_state);
            count_written(cf, &p, stats, &mut c.conflated_updates);
            wrote += 1;
        }
        if wrote > 0 {
            c.last_tx = *now;
            if !c.dirty {
                c.dirty = true;
                dirty.push(conn);
            }
        }
        wrote
    }

    /// An open-state status for a stream of a subscriber that is behind: kept with the
    /// stream's pending update (after it, the latest status standing for earlier
    /// ones) instead of being queued. Returns false if it must be queued now.
    pub(crate) fn defer_status(&mut self, conn: ConnId, st: &Status<'_>) -> bool {
        if st.stream_id == 0 || st.state.stream != StreamState::Open {
            return false;
        }
        let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return false;
        };
        let Some(item) = c.sub_streams.get(&st.stream_id).map(|at| at.item) else {
            return false;
        };
        let Some(cf) = c.conflation.as_deref_mut() else {
            return false;
        };
        if !cf.pending.contains_key(&st.stream_id) {
            compact_order(cf);
            cf.order.push_back(st.stream_id);
        }
        let seq = self.items.get(item).map_or(0, |i| i.seq);
        let p = cf
            .pending
            .entry(st.stream_id)
            .or_insert_with(|| PendingUpdate::new(item, seq, UpdateType::Other));
        p.status = Some((st.state.data, st.state.code, st.state.text.to_string()));
        true
    }

    /// Before a message that must follow a stream's pending update (a status): writes
    /// that update now, whatever the queue holds, so the order is kept.
    pub(crate) fn write_pending_now(&mut self, conn: ConnId, stream_id: u32) {
        let Node {
            conns,
            items,
            scratch,
            stats,
            ..
        } = self;
        let Some(c) = conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return;
        };
        let Some(cf) = c.conflation.as_deref_mut() else {
            return;
        };
        let Some(p) = cf.pending.remove(&stream_id) else {
            return;
        };
        let Some(item) = items.get(p.item) else {
            return;
        };
        let at = c.sub_streams.get(&stream_id).filter(|at| at.item == p.item);
        if let Some(view) = at.and_then(|&at| items.view_of(at)) {
            write_pending(&mut c.out, scratch, stream_id, &p, view, item.data_state);
            count_written(cf, &p, stats, &mut c.conflated_updates);
        }
    }

    /// A refresh is about to replace a stream's image: its pending update is moot, but
    /// a drop of do-not-conflate updates is still reported.
    pub(crate) fn discard_pending(&mut self, conn: ConnId, stream_id: u32) {
        let Some(c) = self.conns.get_mut(conn).and_then(|c| c.as_mut()) else {
            return;
        };
        let Some(cf) = c.conflation.as_deref_mut() else {
            return;
        };
        let Some(p) = cf.pending.remove(&stream_id) else {
            return;
        };
        if p.dropped > 0 {
            push_dropped_status(&mut c.out, stream_id, p.dropped, "");
        }
    }

    /// Every connection, for monitoring (a slow path: it allocates).
    pub fn connection_reports(&self) -> Vec<ConnectionReport> {
        self.conns
            .iter()
            .enumerate()
            .filter_map(|(id, c)| {
                let c = c.as_ref()?;
                Some(ConnectionReport {
                    id,
                    peer: c.peer.clone(),
                    user: c.user.clone(),
                    application: c.application.clone(),
                    role: match c.role {
                        ConnRole::AwaitingLogin => "login",
                        ConnRole::Subscriber => "subscriber",
                        ConnRole::Publisher => "publisher",
                        ConnRole::Closing => "closing",
                    },
                    policy: c.policy,
                    behind: c.conflation.is_some(),
                    queued_bytes: c.out.pending_len(),
                    queued_bytes_high_water: c.queue_high_water,
                    queued_messages: c.out.pending_messages(),
                    streams: c.sub_streams.len(),
                    pending_streams: c.conflation.as_ref().map_or(0, |cf| cf.pending.len()),
                    slow_episodes: c.slow_episodes,
                    conflated_updates: c.conflated_updates,
                    do_not_conflate_dropped: c.do_not_conflate_dropped,
                })
            })
            .collect()
    }
}
