//! The hot path: a source's data messages, checked in order and readdressed to the
//! core's streams, gathered and handed to the core; a hole in an item's sequence is
//! repaired with a fresh image.

use super::{Edge, Phase};
use crate::plumbing::decode_message;
use crate::wire::DataMessages;
use log::warn;
use std::time::Instant;
use tickwire_core::Node;
use tickwire_proto::message::write_readdressed;
use tickwire_proto::{code, Message, MessageType, StreamState};

/// How many data messages ahead of the one being forwarded the edge loads its stream's
/// slot and its item (each stage needs about a memory latency to arrive).
const PREFETCH_SLOT: usize = 4;
const PREFETCH_ITEM: usize = 2;
/// The most bytes of data gathered for the core before it gets them (see `Edge::flush`).
const FLUSH_BYTES: usize = 64 * 1024;

impl Edge {
    pub(super) fn on_source_data(
        &mut self,
        core: &mut Node,
        source: u64,
        messages: &[u8],
        now: Instant,
    ) {
        let Some(s) = self.sources.get_mut(&source) else {
            return;
        };
        s.last_heard = now;
        self.stats.data_messages += 1;
        self.stats.data_bytes += messages.len() as u64;
        let mut closed: Vec<u32> = Vec::new();
        // Items whose data has a hole, with what is missing.
        let mut gapped: Vec<(u32, String)> = Vec::new();
        let mut bad = None;
        // With 100,000 items updated at random, each message would wait for memory twice
        // (its stream's slot, then its item): the slot of the message `PREFETCH_SLOT`
        // ahead and the item of the one `PREFETCH_ITEM` ahead are loaded meanwhile.
        let mut slot_ahead = DataMessages::new(messages);
        for _ in 0..PREFETCH_SLOT {
            if let Some(Ok(m)) = slot_ahead.next() {
                s.streams.prefetch(m.stream_id);
            }
        }
        let mut item_ahead = DataMessages::new(messages);
        for _ in 0..PREFETCH_ITEM {
            if let Some(Ok(m)) = item_ahead.next() {
                if let Some(&sid) = s.streams.get(m.stream_id) {
                    self.items.prefetch(sid);
                }
            }
        }
        for m in DataMessages::new(messages) {
            let m = match m {
                Ok(m) => m,
                Err(e) => {
                    bad = Some(e.to_string());
                    break;
                }
            };
            if let Some(Ok(ahead)) = slot_ahead.next() {
                s.streams.prefetch(ahead.stream_id);
            }
            if let Some(Ok(ahead)) = item_ahead.next() {
                if let Some(&sid) = s.streams.get(ahead.stream_id) {
                    self.items.prefetch(sid);
                }
            }
            let Some(&sid) = s.streams.get(m.stream_id) else {
                continue;
            };
            let Some(it) = self.items.get_mut(sid) else {
                continue;
            };
            let forward = match MessageType::from_u8(m.message_type) {
                Some(MessageType::Update) if it.phase == Phase::Live => {
                    // Decoded here, not by the core (which gets the batch as checked):
                    // one bad message costs its item an image, not the edge its
                    // connection to the core.
                    let hole = match decode_message(m.message_type, m.encoded) {
                        Ok(Message::Update(u)) => {
                            // Updates the source did not send on this stream (its core
                            // held them for an image that this edge, in step, would not
                            // pass on): never forwarded as if nothing were missing.
                            match sequence_hole(it.seq, u.seq, u.conflation_count) {
                                Some(what) => Some(what),
                                None => {
                                    it.seq = u.seq;
                                    None
                                }
                            }
                        }
                        _ => {
                            self.stats.bad_messages += 1;
                            Some("an update that does not decode".to_string())
                        }
                    };
                    match hole {
                        Some(what) => {
                            gapped.push((sid, what));
                            it.phase = Phase::Waiting { since: now };
                            false
                        }
                        None => true,
                    }
                }
                Some(MessageType::Update) => false,
                Some(MessageType::Refresh) => {
                    let Ok(Message::Refresh(r)) = decode_message(m.message_type, m.encoded) else {
                        bad = Some("a refresh that does not decode".into());
                        break;
                    };
                    let re_image = match it.phase {
                        // Recovery (another source, the same one back, or a gap): the
                        // subscribers get the new image as an unsolicited refresh,
                        // which the core passes to every one of them.
                        Phase::Waiting { .. } if it.imaged && r.solicited => true,
                        // Another edge's image (solicited) changes nothing here when
                        // this edge is in step with it. When it is not (the source's
                        // core held updates back until it had the image, as with its
                        // cache off), the image is what this edge missed.
                        Phase::Live if r.solicited => r.seq != it.seq,
                        _ => false,
                    };
                    match it.phase {
                        _ if re_image => {
                            // The core marks it solicited for a subscriber waiting for
                            // an image, so this answers the core's own request too.
                            let re_image = Message::Refresh(tickwire_proto::Refresh {
                                stream_id: sid,
                                solicited: false,
                                ..r
                            });
                            let _ = re_image.encode(&mut self.to_core);
                            it.seq = r.seq;
                            if r.complete {
                                it.phase = Phase::Live;
                                it.image_asked = None;
                            }
                            false
                        }
                        Phase::Waiting { .. } => {
                            it.seq = r.seq;
                            if r.complete {
                                it.phase = Phase::Live;
                                it.imaged = true;
                            }
                            true
                        }
                        // A publisher's own re-image goes to every subscriber.
                        Phase::Live if !r.solicited => {
                            it.seq = r.seq;
                            true
                        }
                        // The image the core asked for, in step with what the
                        // subscribers in step have: to the core as it came, which
                        // gives it to the subscribers waiting for one only.
                        Phase::Live if it.image_asked.is_some() => {
                            if r.complete {
                                it.image_asked = None;
                            }
                            true
                        }
                        Phase::Live | Phase::NoSource => false,
                    }
                }
                Some(MessageType::Status) => {
                    let Ok(Message::Status(st)) = decode_message(m.message_type, m.encoded) else {
                        bad = Some("a status that does not decode".into());
                        break;
                    };
                    if st.state.stream != StreamState::Open {
                        closed.push(sid);
                    }
                    true
                }
                _ => false,
            };
            if forward {
                write_readdressed(&mut self.to_core, m.encoded, sid);
            }
        }
        if let Some(why) = bad {
            self.bad(&why);
        }
        if !closed.is_empty() || !gapped.is_empty() || self.to_core.len() >= FLUSH_BYTES {
            self.flush(core, now);
        }
        for sid in closed {
            self.forget(sid);
        }
        for (sid, what) in gapped {
            self.repair_gap(core, sid, &what, now);
        }
    }

    /// An item's data has a hole (`what`): its subscribers are told their data is
    /// suspect, and it is asked for again at its source, whose image they then get (an
    /// unsolicited refresh), as after a source is lost.
    fn repair_gap(&mut self, core: &mut Node, sid: u32, what: &str, now: Instant) {
        self.stats.gaps_repaired += 1;
        self.stats.reimages += 1;
        let Some(it) = self.items.get(sid) else {
            return;
        };
        if self.stats.gaps_repaired <= 10 || self.stats.gaps_repaired.is_power_of_two() {
            warn!(
                "backbone: {}/{}: {what}: re-imaging it ({} so far)",
                it.service, it.name, self.stats.gaps_repaired
            );
        }
        let text = format!("updates missing from the backbone ({what}): re-imaging");
        self.status_to_core(core, sid, code::UPDATES_DROPPED, &text, now);
        self.route(core, sid, now);
    }

    /// Hands the core what the data messages received so far carried. Data is gathered
    /// across the messages of a receive batch: the core's update path prefetches a few
    /// messages ahead within a frame, and a frame of one Aeron message (about 15
    /// updates) leaves its first few unprefetched. Called before anything else reaches
    /// the core, so the core sees every source's messages in their order.
    ///
    /// Every message in it was decoded in full here, so the core does not walk the
    /// field lists again.
    pub fn flush(&mut self, core: &mut Node, now: Instant) {
        if !self.to_core.is_empty() {
            core.on_checked_frame(self.conn, &self.to_core, now);
            self.to_core.clear();
        }
    }
}

/// Why an update with sequence number `seq` and conflation count `count` cannot follow
/// `last` on its stream, if it cannot. A count of 0 continues a merge too large for one
/// message (the same number again); 65,535 stands for "that many or more" (at least
/// that far ahead, less than half the number space); any other count is exact.
fn sequence_hole(last: u32, seq: u32, count: u16) -> Option<String> {
    let ahead = seq.wrapping_sub(last);
    let fits = match count {
        0 => ahead == 0,
        u16::MAX => (u32::from(u16::MAX)..1 << 31).contains(&ahead),
        n => ahead == u32::from(n),
    };
    (!fits).then(|| match count {
        0 => format!("sequence number {seq} continuing a merge where {last} was the last"),
        u16::MAX => format!("sequence number {seq} for 65,535 or more updates after {last}"),
        n => format!(
            "sequence number {seq} where {} was due",
            last.wrapping_add(u32::from(n))
        ),
    })
}

#[cfg(test)]
mod sequence_tests {
    use super::sequence_hole;

    #[test]
    fn every_conflation_count_is_checked_against_the_sequence() {
        assert_eq!(sequence_hole(10, 11, 1), None);
        assert_eq!(sequence_hole(10, 13, 3), None);
        assert!(sequence_hole(10, 12, 1).is_some());
        assert_eq!(sequence_hole(u32::MAX, 0, 1), None, "wraps");
        // A merge in parts: the later parts repeat the number.
        assert_eq!(sequence_hole(13, 13, 0), None);
        assert!(sequence_hole(13, 14, 0).is_some());
        // "That many or more": not fewer, not backwards.
        assert_eq!(sequence_hole(10, 10 + 65_535, u16::MAX), None);
        assert_eq!(sequence_hole(10, 10 + 1_000_000, u16::MAX), None);
        assert!(sequence_hole(10, 11, u16::MAX).is_some());
        assert!(sequence_hole(10, 9, u16::MAX).is_some());
    }
}
