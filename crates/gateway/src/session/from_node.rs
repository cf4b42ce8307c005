//! The node's messages for one connection into the client's JSON: the Welcome, refreshes,
//! updates (shared encodings, see [`super::UpdateCache`]), statuses, acks, heartbeats.

use super::json::{write_fields, write_key, write_node_status, write_state, Bytes};
use super::{encode_update_tail, JsonOut, LoginState, Session, SharedTail, UpdateCache};
use rustc_hash::FxHasher;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use tickwire_proto::{Message, StreamState};

impl Session {
    /// A message the node queued for this connection, turned into JSON.
    pub fn on_node_message(
        &mut self,
        msg: &Message<'_>,
        cache: &mut UpdateCache,
        out: &mut JsonOut,
    ) {
        match msg {
            Message::Welcome(_) => {
                if let LoginState::Pending { id, echo } =
                    std::mem::replace(&mut self.login, LoginState::None)
                {
                    self.write_login_refresh(id, &self.user.clone(), &echo, out);
                    self.login = LoginState::Open { id };
                    for (id, asked) in std::mem::take(&mut self.directory_asked_early) {
                        self.on_directory_request(id, &asked, out);
                    }
                }
            }
            Message::Directory(d) => {
                // Names resolve requests (a numeric `Service` is a position, stable for
                // the session: a removed service keeps its place and requests for it
                // are refused by the node); states go to an open Source Directory
                // stream (directory.rs). Items hear of their service through their
                // own statuses.
                let (mut adds, mut changed) = (Vec::new(), Vec::new());
                for s in &d.services {
                    let new = self.services.add(s.name);
                    if let Some((i, moved)) = self.services.set_state(s.name, s.state) {
                        if new {
                            adds.push(i);
                        } else if moved {
                            changed.push(i);
                        }
                    }
                }
                self.directory_changed(&adds, &changed, out);
            }
            Message::Ping(_) => out.begin().extend_from_slice(b"{\"Type\":\"Ping\"}"),
            Message::Refresh(r) => {
                let Some(s) = self.streams.get(&r.stream_id) else {
                    return;
                };
                let o = out.begin();
                let _ = write!(Bytes(o), "{{\"ID\":{},\"Type\":\"Refresh\",", s.json_id);
                write_key(o, &s.service, &s.name);
                o.extend_from_slice(b",\"State\":");
                write_state(o, r.state.stream, r.state.data, r.state.code, r.state.text);
                let _ = write!(
                    Bytes(o),
                    ",\"Qos\":{{\"Timeliness\":\"Realtime\",\"Rate\":\"TickByTick\"}},\"SeqNumber\":{}",
                    r.seq
                );
                if !r.complete {
                    o.extend_from_slice(b",\"Complete\":false");
                }
                if !r.solicited {
                    o.extend_from_slice(b",\"Solicited\":false");
                }
                if !r.clear_cache {
                    o.extend_from_slice(b",\"ClearCache\":false");
                }
                o.extend_from_slice(b",\"Fields\":");
                write_fields(o, &self.cfg.dictionary, r.fields);
                o.push(b'}');
                if r.complete && (r.state.stream != StreamState::Open || !s.streaming) {
                    self.forget(r.stream_id);
                }
            }
            Message::Update(u) => {
                let Some(s) = self.streams.get(&u.stream_id) else {
                    return;
                };
                let dict = &self.cfg.dictionary;
                let o = out.begin();
                let _ = write!(Bytes(o), "{{\"ID\":{}", s.json_id);
                if !cache.share {
                    cache.misses += 1;
                    encode_update_tail(o, s, u, dict);
                    return;
                }
                // Everything after the ID is the same for every session watching this
                // item with this view: encoded once per turn, found again by its full
                // key (a hash alone could hand one item's update to another's client).
                let key = &mut cache.key;
                key.clear();
                for part in [s.service.as_bytes(), s.name.as_bytes()] {
                    key.extend_from_slice(&(part.len() as u32).to_le_bytes());
                    key.extend_from_slice(part);
                }
                match &s.view {
                    None => key.push(0),
                    Some(v) => {
                        key.push(1);
                        key.extend_from_slice(&(v.len() as u32).to_le_bytes());
                        v.iter()
                            .for_each(|f| key.extend_from_slice(&f.to_le_bytes()));
                    }
                }
                key.push(s.key_in_updates as u8);
                key.push(u.update_type.to_u8());
                key.push(u.do_not_conflate as u8);
                key.extend_from_slice(&u.conflation_count.to_le_bytes());
                key.extend_from_slice(&u.seq.to_le_bytes());
                key.extend_from_slice(u.fields.as_bytes());
                let mut h = FxHasher::default();
                key.hash(&mut h);
                let hash = h.finish();
                match cache.tails.get(&hash) {
                    Some(e) if e.key == *key => {
                        cache.hits += 1;
                        o.extend_from_slice(&e.tail);
                    }
                    Some(_) => {
                        // A collision: this session encodes its own.
                        cache.misses += 1;
                        encode_update_tail(o, s, u, dict);
                    }
                    None => {
                        cache.misses += 1;
                        let mut tail = Vec::with_capacity(u.fields.as_bytes().len() * 3 + 96);
                        encode_update_tail(&mut tail, s, u, dict);
                        o.extend_from_slice(&tail);
                        let key = key.clone();
                        cache.tails.insert(hash, SharedTail { key, tail });
                    }
                }
            }
            Message::Ack(a) => self.on_node_ack(a, out),
            Message::Status(st) if st.stream_id == 0 => {
                let id = self.logged_in().unwrap_or(0);
                write_node_status(out, id, true, None, &st.state);
                if st.state.stream != StreamState::Open {
                    self.finished = true;
                }
            }
            Message::Status(st) => {
                let Some(s) = self.streams.get(&st.stream_id) else {
                    return;
                };
                let key = Some((s.service.as_str(), s.name.as_str()));
                write_node_status(out, s.json_id, false, key, &st.state);
                // The client library recovers closed-recover streams by itself; a JSON
                // client is told and decides.
                if st.state.stream != StreamState::Open {
                    self.forget(st.stream_id);
                }
            }
            _ => {}
        }
    }
}
