//! Replay then join (docs/PROTOCOL.md, 6.15): a stream that starts with an item's
//! history from the node's journal and goes on live with no gap and no repeat.
//!
//! The core asks the journal thread for the item's journaled messages up to the item's
//! sequence number *now* (every refresh and update up to it has been handed to the
//! journal before the question: [`crate::posts::Posts::flush_item_messages`]). When the
//! answer comes, the item may have moved on: the core asks again from where the answer
//! ended, and attaches the stream to the live item in the turn an answer reaches the
//! item's current sequence number. The event loop is single-threaded, so no update can
//! slip between the last replayed message and the first live one.

use crate::items::{ItemHandle, SubEntry};
use crate::posts::{JournalRequest, JournalWrite};
use crate::{ConnId, Node};
use rustc_hash::FxHashMap;
use tickwire_journal::History;
use tickwire_proto::{
    code, FieldList, Message, Refresh, Replay, ReplayFrom, State, Status, Update, UpdateType,
};

/// Rounds of catching up before the stream joins from the current image instead.
const MAX_ROUNDS: u32 = 8;

/// A stream waiting for (part of) its history.
struct Replaying {
    conn: ConnId,
    stream: u32,
    item: ItemHandle,
    service: String,
    name: String,
    from: ReplayFrom,
    /// The item's seq the current question goes up to.
    until: u32,
    rounds: u32,
    /// Messages replayed so far.
    sent: u64,
    truncated: bool,
}

#[derive(Default)]
pub(crate) struct Replays {
    /// By the journal's ticket.
    waiting: FxHashMap<u64, Replaying>,
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
        self.unsubscribe(conn, sid);
        self.cancel_replays(|p| p.conn == conn && p.stream == sid);
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
        let until = item.seq;
        self.ask_history(Replaying {
            conn,
            stream: r.stream_id,
            item: h,
            service: r.service.to_string(),
            name: r.name.to_string(),
            from: r.from,
            until,
            rounds: 0,
            sent: 0,
            truncated: false,
        });
        Ok(())
    }

    fn ask_history(&mut self, mut p: Replaying) {
        // Everything journaled so far goes before the question.
        self.posts.flush_item_messages();
        let ticket = self.posts.new_ticket();
        p.rounds += 1;
        // A history must fit in the subscriber's queue with room to spare.
        let max = (self.cfg.limits.max_output_bytes / 512).max(64);
        self.posts.push_request(JournalRequest {
            ticket,
            write: JournalWrite::History {
                service: p.service.clone(),
                item: p.name.clone(),
                from: p.from,
                until: p.until,
                max,
            },
        });
        self.replays.waiting.insert(ticket, p);
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
        let Some(mut p) = self.replays.waiting.remove(&ticket) else {
            return;
        };
        if !self.is_live(p.conn) {
            return;
        }
        let history = match result {
            Ok(h) => h,
            Err(why) => {
                let text = format!("the journal cannot replay {}/{}: {why}", p.service, p.name);
                self.send(
                    p.conn,
                    &Message::Status(Status {
                        stream_id: p.stream,
                        state: State::closed(code::NOT_FOUND, &text),
                    }),
                );
                return;
            }
        };
        p.truncated |= history.truncated;
        for m in &history.messages {
            let fields = FieldList::from_trusted(&m.fields);
            let msg = if m.refresh {
                Message::Refresh(Refresh {
                    stream_id: p.stream,
                    seq: m.seq,
                    complete: true,
                    solicited: false,
                    clear_cache: true,
                    state: State::OPEN_OK,
                    service: &p.service,
                    name: &p.name,
                    fields,
                })
            } else {
                Message::Update(Update {
                    stream_id: p.stream,
                    seq: m.seq,
                    update_type: UpdateType::from_u8(m.update_type),
                    do_not_conflate: false,
                    conflation_count: 1,
                    fields,
                })
            };
            self.send(p.conn, &msg);
            p.sent += 1;
        }
        let Some(item) = self.items.get(p.item) else {
            return;
        };
        let current = item.seq;
        if current != p.until && p.rounds < MAX_ROUNDS {
            // The item moved on meanwhile: the rest of its history, then live.
            p.from = ReplayFrom::Seq(p.until.wrapping_add(1));
            p.until = current;
            self.ask_history(p);
            return;
        }
        let caught_up = current == p.until;
        let entry = SubEntry {
            conn: p.conn,
            stream_id: p.stream,
            view: None,
            awaiting_refresh: false,
            streaming: true,
        };
        if !caught_up {
            // Still moving after every round: from the current image on instead.
            self.write_image_refresh(p.item, &entry, false);
        }
        self.attach(p.item, entry);
        let text = format!(
            "replayed {} messages{}; live from seq {}{}",
            p.sent,
            if p.truncated {
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

    /// Replays that no longer have anyone to go to.
    fn cancel_replays(&mut self, gone: impl Fn(&Replaying) -> bool) {
        if !self.replays.waiting.is_empty() {
            self.replays.waiting.retain(|_, p| !gone(p));
        }
    }

    pub(crate) fn replay_conn_gone(&mut self, conn: ConnId) {
        self.cancel_replays(|p| p.conn == conn);
    }

    pub(crate) fn replay_stream_closed(&mut self, conn: ConnId, sid: u32) {
        self.cancel_replays(|p| p.conn == conn && p.stream == sid);
    }
}
