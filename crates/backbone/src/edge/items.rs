//! The items the core asks for: its requests and closes taken from its output, each item
//! asked of a source with its service up (again when it moves), or closed there.

use super::{Edge, EdgeItem, Phase, MAX_LEFT_UNANSWERED};
use crate::plumbing::{decode_message, frames, messages, stream_id};
use crate::wire::BackboneMessage;
use crate::Outbox;
use std::time::Instant;
use tickwire_core::Node;
use tickwire_proto::{
    code, Ack, DataState, Message, MessageType, NakCode, State, Status, StreamState,
};

impl Edge {
    /// The item is gone (closed by its source or by the core).
    pub(super) fn forget(&mut self, sid: u32) {
        if let Some(it) = self.items.remove(sid) {
            self.by_name.remove(&(it.service, it.name));
            if let (Some(src), Some(stream)) = (it.source, it.source_stream) {
                if let Some(s) = self.sources.get_mut(&src) {
                    s.streams.remove(stream);
                }
            }
        }
    }

    /// Asks the item's source for an image of a live item (its stream stays as it is).
    pub(super) fn ask_again(&mut self, sid: u32) {
        let Some(it) = self.items.get(sid) else {
            return;
        };
        let Some(source) = it.source else {
            return;
        };
        let (service, name) = (it.service.clone(), it.name.clone());
        self.subscribe_at(source, &service, &name);
    }

    /// Asks `source` for an item (it answers with the stream and an image).
    fn subscribe_at(&mut self, source: u64, service: &str, item: &str) {
        self.stats.subscribes_sent += 1;
        self.queue_control(&BackboneMessage::Subscribe {
            edge: self.id,
            source,
            service,
            item,
        });
    }

    /// Asks a source for the item (again), or tells the core there is none.
    pub(super) fn route(&mut self, core: &mut Node, sid: u32, now: Instant) {
        let Some(it) = self.items.get(sid) else {
            return;
        };
        let prefer = it.source;
        let service = it.service.clone();
        let name = it.name.clone();
        match self.pick_source(&service, prefer) {
            Some(src) => {
                let it = self.items.get_mut(sid).expect("present");
                match (it.source, it.source_stream.take()) {
                    (Some(old), Some(stream)) => {
                        if let Some(s) = self.sources.get_mut(&old) {
                            s.streams.remove(stream);
                            if old != src {
                                // The old source is still there: it stops sending the
                                // item.
                                self.control.push(&BackboneMessage::Unsubscribe {
                                    edge: self.id,
                                    source: old,
                                    stream,
                                });
                            }
                        }
                    }
                    // Asked and not answered yet: its answer is turned down when it comes.
                    (Some(old), None) if old != src && !it.left_unanswered.contains(&old) => {
                        if it.left_unanswered.len() >= MAX_LEFT_UNANSWERED {
                            it.left_unanswered.remove(0);
                        }
                        it.left_unanswered.push(old);
                    }
                    _ => {}
                }
                // Asked again where it was once left: that source's answers are wanted
                // again (turning one down would unsubscribe the stream the item uses).
                it.left_unanswered.retain(|&s| s != src);
                it.source = Some(src);
                it.phase = Phase::Waiting { since: now };
                // Its image, when it comes, goes to every subscriber (a re-image).
                it.image_asked = None;
                self.subscribe_at(src, &service, &name);
            }
            None => {
                let it = self.items.get_mut(sid).expect("present");
                if it.phase == Phase::NoSource {
                    return;
                }
                it.phase = Phase::NoSource;
                // Its stream at the source it was on is let go of: left mapped, that
                // source's data on it would reach the item once it moves elsewhere.
                if let (Some(old), Some(stream)) = (it.source, it.source_stream.take()) {
                    if let Some(s) = self.sources.get_mut(&old) {
                        s.streams.remove(stream);
                        self.control.push(&BackboneMessage::Unsubscribe {
                            edge: self.id,
                            source: old,
                            stream,
                        });
                    }
                }
                let text = format!("no source on the backbone has service {service:?} up");
                self.status_to_core(core, sid, code::SERVICE_DOWN, &text, now);
            }
        }
    }

    pub(super) fn status_to_core(
        &mut self,
        core: &mut Node,
        sid: u32,
        code: u16,
        text: &str,
        now: Instant,
    ) {
        let status = Message::Status(Status {
            stream_id: sid,
            state: State {
                stream: StreamState::Open,
                data: DataState::Suspect,
                code,
                text,
            },
        });
        core.on_message(self.conn, &status, now);
    }

    /// Takes the core's requests and closes for the backbone's services, then moves
    /// the queued requests onto the backbone.
    pub fn pump(&mut self, core: &mut Node, out: &mut dyn Outbox, now: Instant) {
        // The core's requests (service and name) and closes (none), in their order: an
        // item requested and closed in one turn is closed.
        let mut asks: Vec<(u32, Option<(String, String)>)> = Vec::new();
        let mut refusals: Vec<u8> = Vec::new();
        if let Some(w) = core.output(self.conn) {
            if !w.is_empty() {
                let bytes = w.sealed_bytes();
                let mut walked = 0;
                for (payload, frame_len) in frames(bytes) {
                    for (ty, encoded) in messages(payload) {
                        if ty == MessageType::Request as u8 {
                            if let Ok(Message::Request(r)) = decode_message(ty, encoded) {
                                asks.push((r.stream_id, Some((r.service.into(), r.name.into()))));
                            }
                        } else if ty == MessageType::Close as u8 {
                            if let Some(sid) = stream_id(encoded) {
                                asks.push((sid, None));
                            }
                        } else if ty == MessageType::Post as u8 {
                            // The backbone carries data one way: a post is refused at
                            // once rather than left to time out.
                            if let Ok(Message::Post(p)) = decode_message(ty, encoded) {
                                let _ = Message::Ack(Ack {
                                    stream_id: p.stream_id,
                                    post_id: p.post_id,
                                    nak: Some(NakCode::DeniedBySrc),
                                    text:
                                        "posts do not cross the backbone: post to the source node",
                                })
                                .encode(&mut refusals);
                            }
                        }
                    }
                    walked += frame_len;
                }
                w.consume(walked);
            }
        }
        if !refusals.is_empty() {
            core.on_checked_frame(self.conn, &refusals, now);
        }
        for (sid, request) in asks {
            let Some((service, name)) = request else {
                self.close_item(sid, now);
                continue;
            };
            // The core asks for an image of an item this edge streams in step (with its
            // cache off, it does so for every subscriber that joins): the source is asked
            // again, and the item stays live, so that the subscribers in step miss no
            // update while that image is on its way.
            if let Some(it) = self.items.get_mut(sid) {
                if it.phase == Phase::Live && it.service == service && it.name == name {
                    it.image_asked = Some(now);
                    self.ask_again(sid);
                    continue;
                }
            }
            // A request on a stream the core already has open asks again (e.g. the
            // service came back up). The item keeps its source, its stream there and
            // the source it left unanswered, for `route` to let go of what it no
            // longer takes (forgotten, a late Opened of the source it had left was
            // taken for another edge's, and that source kept the stream for good).
            // Whether its subscribers have had an image stays too: if so (it is being
            // imaged again, after a gap or its source's loss), the image asked for
            // goes to all of them, those told it is suspect included.
            let same = |it: &EdgeItem| it.service == service && it.name == name;
            if let Some(it) = self.items.get_mut(sid).filter(|it| same(it)) {
                it.phase = Phase::Waiting { since: now };
                it.seq = 0;
                it.image_asked = None;
                self.route(core, sid, now);
                continue;
            }
            // Another item on a stream id the core had for one: the old one is let go of.
            self.close_item(sid, now);
            self.by_name.insert((service.clone(), name.clone()), sid);
            self.items.insert(
                sid,
                EdgeItem {
                    service,
                    name,
                    source: None,
                    source_stream: None,
                    phase: Phase::Waiting { since: now },
                    imaged: false,
                    seq: 0,
                    image_asked: None,
                    left_unanswered: Vec::new(),
                },
            );
            self.route(core, sid, now);
        }
        self.control.flush(out);
    }

    /// The core closed its stream `sid`: the source is told, or its answer is turned
    /// down when it comes.
    fn close_item(&mut self, sid: u32, now: Instant) {
        if let Some(it) = self.items.get(sid) {
            match (it.source, it.source_stream) {
                (Some(src), Some(stream)) => {
                    self.queue_control(&BackboneMessage::Unsubscribe {
                        edge: self.id,
                        source: src,
                        stream,
                    });
                }
                // Asked and not answered yet: its answer is turned down when it comes.
                (Some(src), None) if matches!(it.phase, Phase::Waiting { .. }) => {
                    let key = (it.service.clone(), it.name.clone());
                    self.closed_unanswered.insert(key, (src, now));
                }
                _ => {}
            }
        }
        self.forget(sid);
    }
}
