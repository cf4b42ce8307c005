//! Replay then join (docs/PROTOCOL.md, 6.15): a stream that starts with an item's
//! history from the node's journal and goes on live with no gap and no repeat.
//!
//! The core asks the journal thread for the item's journaled messages up to the item's
//! sequence number *now* (every refresh and update up to it has been handed to the
//! journal before the question: [`crate::posts::Posts::flush_item_messages`]). From the
//! question on, the core keeps the item's live messages itself (a [`LiveLog`]), so when
//! the answer comes, however late, the stream gets the history, then what the item did
//! meanwhile, and is attached to the live item in the same turn. The event loop is
//! single-threaded, so no update can slip between the last replayed message and the
//! first live one. Only a log that passes its bound (a busy item and a journal slow to
//! answer) makes the stream join from the item's image instead, and it is told so.

use crate::items::{Item, ItemHandle, SubEntry};
use crate::posts::{JournalRequest, JournalWrite};
use crate::{ConnId, Node, Service};
use rustc_hash::FxHashMap;
use tickwire_auth::Action;
use tickwire_journal::{History, PastMessage};
use tickwire_proto::{
    code, FieldList, Message, Refresh, Replay, ReplayFrom, State, Status, Update, UpdateType,
};

/// A stream waiting for (part of) its history.
struct Replaying {
    conn: ConnId,
    stream: u32,
    item: ItemHandle,
    service: String,
    name: String,
    from: ReplayFrom,
    /// The item's seq the question goes up to.
    until: u32,
    /// Where its item's live log stood when the question was asked (an index counted
    /// from the log's start, dropped messages included).
    log_from: u64,
}

/// The live messages of an item that has replays waiting, kept from the first question
/// on and dropped when the last answer has come.
struct LiveLog {
    waiters: u32,
    /// The index of `messages[0]` (messages dropped at an overflow are counted).
    base: u64,
    messages: Vec<PastMessage>,
    bytes: usize,
    /// Waiters whose question came before this index lost messages to an overflow.
    lost_before: u64,
    max_messages: usize,
    max_bytes: usize,
}

impl Replaying {
    /// Whether `item` is still the item replayed: its slot may hold another one now,
    /// perhaps of the same name in another service.
    fn is(&self, item: &Item, services: &[Service]) -> bool {
        *item.name == *self.name && services[item.service].name == self.service
    }
}

impl LiveLog {
    fn end(&self) -> u64 {
        self.base + self.messages.len() as u64
    }
}

#[derive(Default)]
pub(crate) struct Replays {
    /// By the journal's ticket.
    waiting: FxHashMap<u64, Replaying>,
    /// By item: only items with a replay waiting.
    logs: FxHashMap<ItemHandle, LiveLog>,
    /// Questions at the journal, by ticket, with the connection that asked: counted
    /// until their answer comes, even when the stream has gone meanwhile (the journal
    /// reads them all the same).
    asked: FxHashMap<u64, ConnId>,
    /// The same, counted by connection.
    asked_by: FxHashMap<ConnId, u32>,
    /// Replays in `waiting`, counted by connection: each will be a stream when it
    /// joins, so each holds a place under the connection's stream limit meanwhile.
    waiting_by: FxHashMap<ConnId, u32>,
}

/// Histories one connection may have the journal read at once: the node reads few at a
/// time for everyone (16 wait at most), and one connection must not take them all.
pub(crate) const MAX_REPLAYS_PER_CONNECTION: u32 = 2;

impl Replays {
    /// Items keeping a live log now.
    #[cfg(test)]
    pub(crate) fn logging(&self) -> usize {
        self.logs.len()
    }

    /// A refresh or update of an item that has replays waiting (`Item::capturing`).
    #[cold]
    #[inline(never)]
    pub(crate) fn capture(
        &mut self,
        h: ItemHandle,
        seq: u32,
        refresh: bool,
        update_type: u8,
        fields: &[u8],
    ) {
        let Some(log) = self.logs.get_mut(&h) else {
            return;
        };
        if log.messages.len() >= log.max_messages || log.bytes + fields.len() > log.max_bytes {
            // Those waiting will join from the image; later questions start afresh.
            log.base = log.end();
            log.lost_before = log.base;
            log.messages = Vec::new();
            log.bytes = 0;
        }
        log.bytes += fields.len();
        log.messages.push(PastMessage {
            time_ns: 0,
            seq,
            refresh,
            update_type,
            fields: fields.to_vec(),
        });
    }

    /// One more waiter on an item's log: where the log stands.
    fn join(&mut self, h: ItemHandle, max_messages: usize, max_bytes: usize) -> u64 {
        let log = self.logs.entry(h).or_insert_with(|| LiveLog {
            waiters: 0,
            base: 0,
            messages: Vec::new(),
            bytes: 0,
            lost_before: 0,
            max_messages,
            max_bytes,
        });
        log.waiters += 1;
        log.end()
    }

    /// A waiter leaves its item's log: what the item did since its question, or `None`
    /// if some of it was dropped. The log goes with its last waiter (and the item
    /// stops capturing: `true` in the second place).
    fn leave(&mut self, p: &Replaying) -> (Option<Vec<PastMessage>>, bool) {
        let Some(log) = self.logs.get_mut(&p.item) else {
            return (None, false);
        };
        let since = (p.log_from >= log.lost_before).then(|| {
            let skip = (p.log_from - log.base) as usize;
            log.messages[skip..].to_vec()
        });
        log.waiters -= 1;
        let last = log.waiters == 0;
        if last {
            self.logs.remove(&p.item);
        }
        (since, last)
    }

    fn wait(&mut self, ticket: u64, p: Replaying) {
        *self.waiting_by.entry(p.conn).or_default() += 1;
        self.waiting.insert(ticket, p);
    }

    fn stop_waiting(&mut self, ticket: u64) -> Option<Replaying> {
        let p = self.waiting.remove(&ticket)?;
        if let Some(n) = self.waiting_by.get_mut(&p.conn) {
            *n -= 1;
            if *n == 0 {
                self.waiting_by.remove(&p.conn);
            }
        }
        Some(p)
    }

    /// Replays of `conn` waiting for their history.
    pub(crate) fn waiting_of(&self, conn: ConnId) -> usize {
        self.waiting_by.get(&conn).copied().unwrap_or(0) as usize
    }
}

impl Node {
    /// A subscriber's Replay.
    pub(crate) fn on_subscriber_replay(&mut self, conn: ConnId, r: &Replay<'_>) {
        let sid = r.stream_id;
        if self.refuse_stream_zero(conn, sid) {
            return;
        }
        self.stats.requests += 1;
        // A replay on an open stream (or one replaying) starts it again.
        self.end_stream(conn, sid);
        match self.start_replay(conn, r) {
            Ok(()) => {}
            Err((c, text)) => self.send(
                conn,
                &Message::Status(Status {
                    stream_id: sid,
                    state: State::closed(c, &text),
                }),
            ),
        }
    }

    fn start_replay(&mut self, conn: ConnId, r: &Replay<'_>) -> Result<(), (u16, String)> {
        let svc = self.admit_stream(conn, r.service, "replay")?;
        let Some(&h) = self.services[svc].items.get(r.name) else {
            return Err((
                code::NOT_FOUND,
                format!("item {:?} not found in service {:?}", r.name, r.service),
            ));
        };
        let item = self.items.get(h).expect("a listed item");
        if !item.journaled {
            return Err((
                code::NOT_FOUND,
                format!(
                    "no history of service {:?} on this node (it keeps one for the services in [journal] services, with [journal] updates = true)",
                    r.service
                ),
            ));
        }
        let asked = self.replays.asked_by.get(&conn).copied().unwrap_or(0);
        if asked >= MAX_REPLAYS_PER_CONNECTION {
            return Err((
                code::TOO_MANY_STREAMS,
                format!(
                    "{asked} replays of this connection are being read already: ask again once one has come"
                ),
            ));
        }
        let until = item.seq;
        // A history (and what the item does while it is read) must fit in the
        // subscriber's queue with room to spare.
        let max = (self.cfg.limits.max_output_bytes / 512).max(64);
        // ...in bytes too: a few messages of large images would pass the queue's bound
        // (and the subscriber be dropped as slow) long before their count does.
        let max_bytes = self.cfg.limits.max_output_bytes / 4;
        let log_from = self
            .replays
            .join(h, max, self.cfg.limits.max_output_bytes / 2);
        self.items.get_mut(h).expect("a listed item").capturing = true;
        let p = Replaying {
            conn,
            stream: r.stream_id,
            item: h,
            service: r.service.to_string(),
            name: r.name.to_string(),
            from: r.from,
            until,
            log_from,
        };
        // Everything journaled so far goes before the question.
        self.posts.flush_item_messages();
        let ticket = self.posts.new_ticket();
        self.posts.push_request(JournalRequest {
            ticket,
            write: JournalWrite::History(tickwire_journal::HistoryQuery {
                service: p.service.clone(),
                item: p.name.clone(),
                from: p.from,
                until: p.until,
                max,
                max_bytes,
            }),
        });
        self.replays.wait(ticket, p);
        self.replays.asked.insert(ticket, conn);
        *self.replays.asked_by.entry(conn).or_default() += 1;
        Ok(())
    }

    /// The journal's answer to a history question.
    pub fn on_history(
        &mut self,
        ticket: u64,
        result: Result<History, String>,
        now: std::time::Instant,
    ) {
        self.merge_deferred();
        self.now = now;
        if let Some(conn) = self.replays.asked.remove(&ticket) {
            if let Some(n) = self.replays.asked_by.get_mut(&conn) {
                *n -= 1;
                if *n == 0 {
                    self.replays.asked_by.remove(&conn);
                }
            }
        }
        let Some(p) = self.replays.stop_waiting(ticket) else {
            return;
        };
        let since = self.leave_live_log(&p);
        if !self.is_live(p.conn) {
            return;
        }
        // A reload may have taken the service away while the journal read.
        if !self.may(p.conn, Action::Subscribe, &p.service) {
            let text = self.not_entitled(p.conn, Action::Subscribe, &p.service);
            tracing::info!(target: "audit", "permission withdrawn: {text} (replay on stream {} refused)", p.stream);
            self.send(
                p.conn,
                &Message::Status(Status {
                    stream_id: p.stream,
                    state: State::closed(code::NOT_ENTITLED, &text),
                }),
            );
            return;
        }
        let history = match result {
            Ok(h) => h,
            Err(why) => {
                let text = format!("the journal cannot replay {}/{}: {why}", p.service, p.name);
                return self.close_replay(&p, &text);
            }
        };
        // The item went (and its slot may hold another one now).
        let Some(current) = self
            .items
            .get(p.item)
            .filter(|i| p.is(i, &self.services))
            .map(|i| i.seq)
        else {
            let text = format!("{}/{} went while its history was read", p.service, p.name);
            return self.close_replay(&p, &text);
        };
        let mut sent = 0u64;
        for m in &history.messages {
            self.send_past(&p, m);
            sent += 1;
        }
        let entry = SubEntry {
            conn: p.conn,
            stream_id: p.stream,
            view: None,
            awaiting_refresh: false,
            streaming: true,
            joined_mid_refresh: false,
        };
        let caught_up = since.is_some();
        match since {
            // What the item did while the history was read, then live.
            Some(since) => {
                for m in &since {
                    self.send_past(&p, m);
                    sent += 1;
                }
            }
            // Too much of it to keep: from the current image on instead.
            None => self.write_image_refresh(p.item, &entry, false),
        }
        self.attach(p.item, entry);
        let text = format!(
            "replayed {sent} messages{}; live from seq {}{}",
            if history.truncated {
                " (the latest only: the history is longer)"
            } else {
                ""
            },
            current.wrapping_add(1),
            if caught_up {
                ""
            } else {
                " (the history did not catch up: an image came first)"
            }
        );
        self.send(
            p.conn,
            &Message::Status(Status {
                stream_id: p.stream,
                state: State {
                    text: &text,
                    ..State::OPEN_OK
                },
            }),
        );
        self.handle_overflows();
    }

    /// Ends a replay that cannot go on, saying why.
    fn close_replay(&mut self, p: &Replaying, text: &str) {
        self.send(
            p.conn,
            &Message::Status(Status {
                stream_id: p.stream,
                state: State::closed(code::NOT_FOUND, text),
            }),
        );
    }

    /// One journaled (or logged) message, readdressed to the replaying stream.
    fn send_past(&mut self, p: &Replaying, m: &PastMessage) {
        let fields = FieldList::from_trusted(&m.fields);
        let msg = if m.refresh {
            Message::Refresh(Refresh::whole(p.stream, m.seq, &p.service, &p.name, fields))
        } else {
            Message::Update(Update::new(
                p.stream,
                m.seq,
                UpdateType::from_u8(m.update_type),
                fields,
            ))
        };
        self.send(p.conn, &msg);
    }

    /// A replay stops waiting: what its item did since the question (see
    /// [`Replays::leave`]); the item stops capturing with the last one.
    fn leave_live_log(&mut self, p: &Replaying) -> Option<Vec<PastMessage>> {
        let (since, last) = self.replays.leave(p);
        // An item that went and came back in the same slot did not capture throughout.
        let services = &self.services;
        let item = self
            .items
            .get_mut(p.item)
            .filter(|i| i.capturing && p.is(i, services))?;
        if last {
            item.capturing = false;
        }
        since
    }

    /// Replays that no longer have anyone to go to.
    fn cancel_replays(&mut self, gone: impl Fn(&Replaying) -> bool) {
        if self.replays.waiting.is_empty() {
            return;
        }
        let tickets: Vec<u64> = self
            .replays
            .waiting
            .iter()
            .filter(|(_, p)| gone(p))
            .map(|(t, _)| *t)
            .collect();
        for t in tickets {
            if let Some(p) = self.replays.stop_waiting(t) {
                self.leave_live_log(&p);
            }
        }
    }

    pub(crate) fn replay_conn_gone(&mut self, conn: ConnId) {
        self.cancel_replays(|p| p.conn == conn);
    }

    pub(crate) fn replay_stream_closed(&mut self, conn: ConnId, sid: u32) {
        self.cancel_replays(|p| p.conn == conn && p.stream == sid);
    }
}
